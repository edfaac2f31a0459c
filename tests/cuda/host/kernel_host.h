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
static inline int __dp4a(int a, int b, int c) { /* the quantized KV cache's scores (check_kvq) */
    for (int i = 0; i < 4; i++) c += (int)(int8_t)(a >> (8 * i)) * (int)(int8_t)(b >> (8 * i));
    return c;
}
/* unused by the kernels these programs run (the byte permute of cuda_dev.cuh) */
static inline uint32_t __byte_perm(uint32_t x, uint32_t, uint32_t) { return x; }
static inline int __float2int_rn(float x) { return (int)nearbyintf(x); } /* round half to even */
/* Runs fn() as a grid of gx x gy (x gz) CTAs of `threads` (<= 128: 4 warps) std::threads, one CTA after another (a
 * CTA's static arrays stand in for its shared memory), with the block and warp barriers simt.h's shuffles use. */
template <class F> static void host_run_grid(unsigned gx, unsigned gy, unsigned threads, F fn, unsigned gz = 1) {
    gridDim = {gx, gy, gz};
    blockDim = {threads, 1, 1};
    for (unsigned bz = 0; bz < gz; bz++)
        for (unsigned by = 0; by < gy; by++)
            for (unsigned bx = 0; bx < gx; bx++) {
                std::barrier<> bb(threads), wb0(32), wb1(32), wb2(32), wb3(32);
                g_block_bar = &bb, g_warp_bar[0] = &wb0, g_warp_bar[1] = &wb1, g_warp_bar[2] = &wb2, g_warp_bar[3] = &wb3;
                std::vector<std::thread> th;
                for (unsigned t = 0; t < threads; t++)
                    th.emplace_back([&, t] {
                        threadIdx = {t, 0, 0};
                        blockIdx = {bx, by, bz};
                        fn();
                    });
                for (auto &x : th) x.join();
            }
}
