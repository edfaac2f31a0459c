/* shim.h — host stand-ins for the CUDA intrinsics quant_dev.cuh uses (check_quant.cpp). */
#pragma once
/* host shims for compiling cuda_dev.cuh / quant_dev.cuh with g++ */
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <math.h>
#include <string.h>
#include <stdint.h>
#include "float_shim.h"
#undef __forceinline__
#define __forceinline__ inline
template <class T> static inline T __ldg(const T *p) { return *p; }
static inline int __dp4a(int a, int b, int c) {
    for (int i = 0; i < 4; i++) c += (int)(int8_t)(a >> (8 * i)) * (int)(int8_t)(b >> (8 * i));
    return c;
}
/* CUDA's __byte_perm reads 3 bits of each of the 4 low selector nibbles (bit 3, PTX prmt's sign-replicate
 * flag, is not part of the intrinsic: measured on the H100, where raw 4-bit codes as selectors index
 * bytes 0-7). */
static inline uint32_t __byte_perm(uint32_t x, uint32_t y, uint32_t s) {
    uint8_t b[8];
    for (int i = 0; i < 4; i++) b[i] = (uint8_t)(x >> (8 * i)), b[4 + i] = (uint8_t)(y >> (8 * i));
    uint32_t r = 0;
    for (int i = 0; i < 4; i++) r |= (uint32_t)b[(s >> (4 * i)) & 7] << (8 * i);
    return r;
}
template <class T> static inline T __shfl_xor_sync(unsigned, T v, int) { return v; }
static inline void __syncthreads(void) {}
struct fake3 { unsigned x, y, z; };
static fake3 threadIdx, blockDim, blockIdx;
