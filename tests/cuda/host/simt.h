/* simt.h — a minimal SIMT emulation for check_attention.cpp: block barrier and warp shuffles
 * over std::threads. */
#pragma once
#include <barrier>
#include <thread>
#include <vector>
#include <functional>
struct dim3h { unsigned x, y, z; };
extern thread_local dim3h threadIdx, blockIdx;
extern dim3h blockDim, gridDim;
extern std::barrier<> *g_block_bar;
extern std::barrier<> *g_warp_bar[4];
extern float g_warp_buf[4][32];
extern double g_warp_bufd[4][32];
inline void __syncthreads() { g_block_bar->arrive_and_wait(); }
inline float __shfl_xor_sync(unsigned, float v, int o) {
    int w = threadIdx.x / 32, l = threadIdx.x % 32;
    g_warp_buf[w][l] = v; g_warp_bar[w]->arrive_and_wait();
    float r = g_warp_buf[w][l ^ o]; g_warp_bar[w]->arrive_and_wait(); return r;
}
inline double __shfl_xor_sync(unsigned, double v, int o) {
    int w = threadIdx.x / 32, l = threadIdx.x % 32;
    g_warp_bufd[w][l] = v; g_warp_bar[w]->arrive_and_wait();
    double r = g_warp_bufd[w][l ^ o]; g_warp_bar[w]->arrive_and_wait(); return r;
}
inline int __shfl_xor_sync(unsigned, int v, int o) { return (int)__shfl_xor_sync(0u, (double)v, o); }
inline int __shfl_down_sync(unsigned, int v, int o) { /* through the float buffer: exact for small ints */
    const int w = threadIdx.x / 32, l = threadIdx.x % 32;
    g_warp_buf[w][l] = (float)v; g_warp_bar[w]->arrive_and_wait();
    const int r = l + o < 32 ? (int)g_warp_buf[w][l + o] : v; g_warp_bar[w]->arrive_and_wait(); return r;
}
