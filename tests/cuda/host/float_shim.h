/* float_shim.h — host stand-ins for CUDA's explicitly rounded float intrinsics and bit casts (shim.h,
 * kernel_host.h). */
#pragma once
#include <stdint.h>
#include <string.h>
static inline float __fmul_rn(float a, float b) { volatile float r = a * b; return r; }
static inline float __fadd_rn(float a, float b) { volatile float r = a + b; return r; }
static inline float __fsub_rn(float a, float b) { volatile float r = a - b; return r; }
static inline float __fdiv_rn(float a, float b) { volatile float r = a / b; return r; }
static inline float __fsqrt_rn(float x) { volatile float r = __builtin_sqrtf(x); return r; }
static inline int __float2int_rz(float x) { return (int)x; }
static inline float __uint_as_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t __float_as_uint(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
