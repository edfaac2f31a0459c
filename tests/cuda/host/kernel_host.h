/* kernel_host.h — what the host runs of a CUDA kernel need besides simt.h (check_attention,
 * check_attention_decode, check_ssd): the SIMT globals, no-op launch attributes, the rounded float
 * intrinsics. Include once per program, after simt.h. */
#pragma once
thread_local dim3h threadIdx, blockIdx;
dim3h blockDim, gridDim;
std::barrier<> *g_block_bar; std::barrier<> *g_warp_bar[4]; float g_warp_buf[4][32]; double g_warp_bufd[4][32];
#undef __forceinline__
#define __forceinline__ inline
#define __launch_bounds__(x)
template <class T> static inline T __ldg(const T *p) { return *p; }
#include "float_shim.h"
#include <math.h>
/* unused by the float kernels these programs run (the integer dot and byte permute of cuda_dev.cuh) */
static inline int __dp4a(int a, int b, int c) { return c; }
static inline uint32_t __byte_perm(uint32_t x, uint32_t, uint32_t) { return x; }
static inline int __float2int_rn(float x) { return (int)nearbyintf(x); } /* round half to even */
