/* bench/probe_common.cuh — what the mat-vec probes (mv_probe.cu, mvd_probe.cu) share: the error check, a
 * deterministic fill of weight planes and the plain streaming read they compare against. Include after
 * backend/cuda/matmul_q.cu (ld_stream16, the pdl helpers). */
#pragma once
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

/* the engine's tuning switch, as tune.cu's default (the probes link without the backend) */
bool cuda_tune_mmv_u2(void) { return true; }

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));     \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* Pseudo-random bytes. mode 1: every odd byte small (fp16 scales: finite, ~1e-3); mode 2: the odd bytes of the
 * first 4 of every 16 (a Q4_K scale plane's d and dmin) */
static __global__ void fill_kernel(uint8_t *p, size_t n, uint32_t seed, int mode) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
        if ((mode == 1 || (mode == 2 && i % 16 < 4)) && (i & 1)) h = 0x1c + (h & 3);
        p[i] = (uint8_t)h;
    }
}

/* the plain read: every byte of [p, p + n) once, 16-byte loads, U in flight per thread (programmatic launch:
 * the loads are issued before the wait for the kernel before) */
template <int U>
static __global__ void read_kernel(const uint4 *p, size_t n16, uint32_t *sink) {
    pdl_launch_dependents();
    uint32_t acc = 0;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += stride * U) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; u++) v[u] = i + u * stride < n16 ? ld_stream16(p + i + u * stride) : make_uint4(0, 0, 0, 0);
        pdl_wait();
#pragma unroll
        for (int u = 0; u < U; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    if (acc == 0x12345678u) sink[0] = acc;
}

/* The best (of reps) time in ms of n calls fn(r), r = 0..n-1, back to back between two events. */
template <class F>
static float best_chain_ms(cudaEvent_t e0, cudaEvent_t e1, int reps, int n, F &&fn) {
    float best = 1e30f;
    for (int rep = 0; rep < reps; rep++) {
        cudaEventRecord(e0);
        for (int r = 0; r < n; r++) fn(r);
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        best = fminf(best, ms);
    }
    return best;
}

/* How many of the n floats at device pointers a and b differ bitwise; *max_rel: the largest |a - b| / (|a| + eps). */
static int64_t count_differ(const float *a, const float *b, int64_t n, double eps, double *max_rel) {
    std::vector<float> h0((size_t)n), h1((size_t)n);
    CK(cudaMemcpy(h0.data(), a, (size_t)n * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(h1.data(), b, (size_t)n * 4, cudaMemcpyDeviceToHost));
    int64_t diff = 0;
    double md = 0;
    for (int64_t i = 0; i < n; i++) {
        diff += memcmp(&h0[i], &h1[i], 4) != 0;
        md = fmax(md, fabs((double)h0[i] - h1[i]) / (fabs((double)h0[i]) + eps));
    }
    *max_rel = md;
    return diff;
}
