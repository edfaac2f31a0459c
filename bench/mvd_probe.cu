/* bench/mvd_probe.cu — read-bandwidth probe for the dense decode mat-vecs (issue 30: qwen2.5-7b / qwen3-8b /
 * gemma2-9b decode is mat-vec bound at ~1.9 TB/s): the engine's Q4_K kernels (matmul_q.cu, included) at one
 * model's FFN shapes against a plain streaming read of the same bytes and against experimental kernel
 * structures. Prints us and GB/s per variant, single launches (weights rotated over 4 copies so that L2 holds
 * none) and chains of 16 launches with programmatic launch (as in a decode graph); checks that each variant's
 * outputs equal the engine kernel's bit for bit (or says how many differ).
 *
 * Session 29 (H200, docs/cuda-notes.md "The decode mat-vec was issue-bound"): the engine's gate/up went from 39.6 to
 * 23.0 us a launch in a chain (1.93 -> 3.32 TB/s) with the branch-free scale decode, the hoisted chunk index and the
 * gate+up rows in one warp ("pair"); "nodot" (the loads alone) streams 4.4 TB/s, a plain read 3.7. Two chunks a lane
 * ("chunk pairs": one scale decode for 32 bytes) and persistent warps with a two-stage register pipeline (1.3-1.8
 * TB/s; removed) were slower.
 *
 *   build (device): nvcc -O3 -std=c++17 -arch=sm_90 -Iinclude -Isrc -o /tmp/mvd_probe bench/mvd_probe.cu
 *   run:            /tmp/mvd_probe [d_model n_ff]      (defaults 3584 18944: qwen2.5-7b)
 */
#include <stdio.h>
#include <stdlib.h>
#include <algorithm>
#include <vector>

#include "backend/cuda/matmul_q.cu"

#include "probe_common.cuh"

/* ---- experimental Q4_K traits ---- */

/* Q4_K a chunk pair a lane: 32 bytes of codes (sub-blocks 2 i, 2 i + 1 whole), one scale decode */
struct TQ4_Kp {
    static constexpr int CPB = 4, BS = 256, ACT = 1;
    struct W { uint4 q0, q1, meta; };
    static __device__ __forceinline__ W load(const cuda_wview &w, int64_t g, int i) {
        W r;
        r.q0 = ld_stream16(w.p0 + g * 128 + 32 * i);
        r.q1 = ld_stream16(w.p0 + g * 128 + 32 * i + 16);
        r.meta = __ldg((const uint4 *)(w.p1 + g * 16));
        return r;
    }
    template <int NR> static __device__ __forceinline__ void dot(const W &c, const cuda_xview &x, int b, int i, float *acc) {
        uint32_t scp, mp;
        kscale_pair(c.meta.y, c.meta.z, c.meta.w, i, &scp, &mp);
        const int sc1 = (int)(scp & 0xFF), sc2 = (int)(scp >> 8 & 0xFF), m1 = (int)(mp & 0xFF), m2 = (int)(mp >> 8 & 0xFF);
        const float d = h2f((uint16_t)(c.meta.x & 0xFFFF)), dmin = h2f((uint16_t)(c.meta.x >> 16));
#pragma unroll
        for (int t = 0; t < NR; t++) {
            const int v = b * 256 + 64 * i;
            const int s1 = dot16(c.q0.x & M4, c.q0.y & M4, c.q0.z & M4, c.q0.w & M4, act_q16(x, t, v)) +
                           dot16(c.q1.x & M4, c.q1.y & M4, c.q1.z & M4, c.q1.w & M4, act_q16(x, t, v + 16));
            const int s2 = dot16((c.q0.x >> 4) & M4, (c.q0.y >> 4) & M4, (c.q0.z >> 4) & M4, (c.q0.w >> 4) & M4,
                                 act_q16(x, t, v + 32)) +
                           dot16((c.q1.x >> 4) & M4, (c.q1.y >> 4) & M4, (c.q1.z >> 4) & M4, (c.q1.w >> 4) & M4,
                                 act_q16(x, t, v + 48));
            const uint2 gs = *(const uint2 *)(x.g + (int64_t)t * (x.k / 16) + v / 16);
            const int g0 = (int)(int16_t)(gs.x & 0xFFFF) + (int)(int16_t)(gs.x >> 16);
            const int g1 = (int)(int16_t)(gs.y & 0xFFFF) + (int)(int16_t)(gs.y >> 16);
            const int isum = sc1 * s1 + sc2 * s2, summs = m1 * g0 + m2 * g1;
            const float dy = act_d256(x, t, b);
            acc[t] += (dy * d) * (float)isum - (dy * dmin) * (float)summs;
        }
    }
};

/* the loaded words folded (the no-dot mode keeps every load live) */
static __device__ __forceinline__ uint32_t wx(const TQ4_K::W &c) { return c.q.x ^ c.q.y ^ c.q.z ^ c.q.w ^ c.meta.x ^ c.meta.w; }
static __device__ __forceinline__ uint32_t wx(const TQ4_Kp::W &c) {
    return c.q0.x ^ c.q0.y ^ c.q0.z ^ c.q0.w ^ c.q1.x ^ c.q1.y ^ c.q1.z ^ c.q1.w ^ c.meta.x ^ c.meta.w;
}

/* ---- experimental GLU forms (wpr 1) ---- */

/* MODE 0: as the engine (one warp a row, gate and up rows in alternate warps), U chunks a lane in flight;
 * MODE 1: the same loads without the dot products (a bound on what the arithmetic costs). */
template <class T, int MODE, int U, int MINB>
static __global__ void __launch_bounds__(128, MINB) glu_var_kernel(const mv_multi_args a, const cuda_xview x) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int m = warp & 1;
    const cuda_wview &w = a.w[m];
    const int64_t row = (int64_t)blockIdx.x * 2 + (warp >> 1);
    pdl_launch_dependents();
    float acc = 0.0f;
    uint32_t xo = 0;
    bool waited = false;
    if (row < w.n) {
        const int nch = (int)w.nb * T::CPB;
        const int64_t gbase = row * w.nb;
        for (int c0 = lane; c0 < nch; c0 += 32 * U) {
            typename T::W wd[U];
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int c = c0 + u * 32;
                if (c < nch) wd[u] = T::load(w, gbase + c / T::CPB, c % T::CPB);
            }
            if (!waited) pdl_wait(), waited = true;
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int c = c0 + u * 32;
                if (c < nch) {
                    if (MODE == 0) T::template dot<1>(wd[u], x, c / T::CPB, c % T::CPB, &acc);
                    else xo ^= wx(wd[u]);
                }
            }
        }
    }
    if (!waited) pdl_wait();
    if (MODE == 1) acc = (float)(xo & 0xFF);
    acc = warp_sum(acc);
    __shared__ float red[4];
    if (lane == 0) red[warp] = acc;
    __syncthreads();
    if (m == 0 && lane == 0 && row < w.n) a.y[0][row] = ew_op<CUDA_EW_SWIGLU>(red[warp], red[warp + 1], 0.0f);
}

/* One warp computes a gate row and the matching up row together (2 U chunks a lane in flight), no shared
 * memory; 4 output rows a CTA. */
template <int U, int MINB>
static __global__ void __launch_bounds__(128, MINB) glu_pair_kernel(const mv_multi_args a, const cuda_xview x) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * 4 + warp;
    const cuda_wview &wg = a.w[0], &wu = a.w[1];
    pdl_launch_dependents();
    float acc[2] = {0.0f, 0.0f};
    bool waited = false;
    if (row < wg.n) {
        const int nch = (int)wg.nb * 8;
        const int64_t gbase = row * wg.nb;
        for (int c0 = lane; c0 < nch; c0 += 32 * U) {
            TQ4_K::W wa[U], wb[U];
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int c = c0 + u * 32;
                if (c < nch) wa[u] = TQ4_K::load(wg, gbase + c / 8, c % 8), wb[u] = TQ4_K::load(wu, gbase + c / 8, c % 8);
            }
            if (!waited) pdl_wait(), waited = true;
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int c = c0 + u * 32;
                if (c < nch) TQ4_K::dot<1>(wa[u], x, c / 8, c % 8, acc), TQ4_K::dot<1>(wb[u], x, c / 8, c % 8, acc + 1);
            }
        }
    }
    if (!waited) pdl_wait();
    acc[0] = warp_sum(acc[0]);
    acc[1] = warp_sum(acc[1]);
    if (lane == 0 && row < wg.n) a.y[0][row] = ew_op<CUDA_EW_SWIGLU>(acc[0], acc[1], 0.0f);
}

int main(int argc, char **argv) {
    const int64_t D = argc > 1 ? atoll(argv[1]) : 3584, F = argc > 2 ? atoll(argv[2]) : 18944;
    int dev = 0, NSM = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&NSM, cudaDevAttrMultiProcessorCount, dev));
    const int NS = 4; /* weight copies */
    const int64_t nbg = D / 256, nbd = F / 256;
    auto mk = [&](int64_t n, int64_t nb, qr_type ty, uint32_t seed) {
        cuda_wview w = {};
        w.type = ty, w.k = nb * 256, w.n = n, w.nb = nb;
        const size_t main = ty == QR_TYPE_Q4_K ? 128 : 192, side = 16;
        uint8_t *p0, *p1, *p2 = nullptr;
        CK(cudaMalloc(&p0, n * nb * main));
        CK(cudaMalloc(&p1, n * nb * side));
        fill_kernel<<<1024, 256>>>(p0, n * nb * main, seed, 0);
        fill_kernel<<<1024, 256>>>(p1, n * nb * side, seed + 1, ty == QR_TYPE_Q4_K ? 2 : 0);
        if (ty == QR_TYPE_Q6_K) {
            CK(cudaMalloc(&p2, n * nb * 2));
            fill_kernel<<<256, 256>>>(p2, n * nb * 2, seed + 2, 1);
        }
        w.p0 = p0, w.p1 = p1, w.p2 = p2;
        return w;
    };
    std::vector<cuda_wview> wg(NS), wu(NS), wd(NS), wd6(NS);
    for (int s = 0; s < NS; s++) {
        wg[s] = mk(F, nbg, QR_TYPE_Q4_K, 100 + s);
        wu[s] = mk(F, nbg, QR_TYPE_Q4_K, 200 + s);
        wd[s] = mk(D, nbd, QR_TYPE_Q4_K, 300 + s);
        wd6[s] = mk(D, nbd, QR_TYPE_Q6_K, 400 + s);
    }
    auto act = [&](int64_t k, cuda_xview *x) {
        float *xf;
        int8_t *q;
        float *d;
        int16_t *g;
        CK(cudaMalloc(&xf, k * 4));
        CK(cudaMalloc(&q, k));
        CK(cudaMalloc(&d, k / 256 * 4));
        CK(cudaMalloc(&g, k / 16 * 2));
        std::vector<float> h(k);
        for (int64_t i = 0; i < k; i++) h[i] = (float)((i * 7919) % 2001 - 1000) / 500.0f;
        CK(cudaMemcpy(xf, h.data(), k * 4, cudaMemcpyHostToDevice));
        CK(qr_cuda_quantize_act(xf, 1, (int32_t)k, 1, q, d, nullptr, g, false, 0));
        *x = {q, d, nullptr, g, nullptr, (int32_t)k};
    };
    cuda_xview xg, xd;
    act(D, &xg);
    act(F, &xd);
    float *y0, *y1;
    uint32_t *sink;
    CK(cudaMalloc(&y0, F * 4));
    CK(cudaMalloc(&y1, F * 4));
    CK(cudaMalloc(&sink, 4));
    CK(cudaDeviceSynchronize());
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    const double gu_bytes = 2.0 * F * nbg * 144, dn_bytes = (double)D * nbd * 144, dn6_bytes = (double)D * nbd * 210;
    printf("shapes: gate/up %lld x %lld (%.1f MB), down %lld x %lld (Q4_K %.1f MB, Q6_K %.1f MB); %d SMs\n",
           (long long)F, (long long)D, gu_bytes / 1e6, (long long)D, (long long)F, dn_bytes / 1e6, dn6_bytes / 1e6, NSM);
    auto args = [&](int s, float *y) {
        mv_multi_args a = {};
        a.w[0] = wg[s], a.w[1] = wu[s], a.y[0] = y;
        return a;
    };
    /* single launches (median of 40), rotating over the NS copies; then chains of 16 pdl launches */
    const bool once = getenv("MVD_ONCE") != nullptr; /* one launch a variant (for Nsight Compute) */
    auto timeit = [&](const char *name, double bytes, auto &&fn) {
        if (once) {
            fn(0, false);
            CK(cudaDeviceSynchronize());
            printf("%s: launched once\n", name);
            return;
        }
        for (int r = 0; r < 4; r++) fn(r % NS, false);
        CK(cudaDeviceSynchronize());
        std::vector<float> v;
        for (int r = 0; r < 40; r++) {
            cudaEventRecord(e0);
            fn(r % NS, false);
            cudaEventRecord(e1);
            cudaEventSynchronize(e1);
            float ms;
            cudaEventElapsedTime(&ms, e0, e1);
            v.push_back(ms);
        }
        std::sort(v.begin(), v.end());
        const float best = best_chain_ms(e0, e1, 7, 16, [&](int r) { fn(r % NS, true); });
        CK(cudaGetLastError());
        const double us = v[20] * 1e3, cus = best * 1e3 / 16;
        printf("%-46s %8.2f us %7.1f GB/s | chain %8.2f us %7.1f GB/s\n", name, us, bytes / us * 1e-3, cus,
               bytes / cus * 1e-3);
    };
    auto cmp = [&](const char *nm, int64_t n, auto &&ref, auto &&fn) {
        ref(y0);
        fn(y1);
        CK(cudaDeviceSynchronize());
        double md;
        const int64_t diff = count_differ(y0, y1, n, 1e-6, &md);
        printf("    %s: %lld of %lld outputs differ from the engine's (max rel %.2e)\n", nm, (long long)diff, (long long)n, md);
    };
    const size_t gu16 = (size_t)(F * nbg * 128 / 16);
    for (int U : {4, 8})
        for (int cps : {8, 16}) {
            char nm[80];
            snprintf(nm, sizeof nm, "read gate qs U=%d ctas/SM=%d (x2 bytes)", U, cps);
            timeit(nm, 2.0 * F * nbg * 128, [&](int s, bool pdl) {
                auto k = U == 4 ? read_kernel<4> : read_kernel<8>;
                launch_k(k, dim3(NSM * cps), dim3(128), 0, 0, pdl, (const uint4 *)wg[s].p0, gu16, sink);
                launch_k(k, dim3(NSM * cps), dim3(128), 0, 0, pdl, (const uint4 *)wu[s].p0, gu16, sink);
            });
        }
    auto engine = [&](int s, bool pdl, float *y, int wpr) {
        cuda_wview w2[2] = {wg[s], wu[s]};
        float *ys[2] = {y, nullptr};
        CK(qr_cuda_matvec_multi(w2, 2, &xg, 1, ys, nullptr, wpr, 1, pdl, 0));
    };
    for (int wpr : {1, 2}) {
        char nm[80];
        snprintf(nm, sizeof nm, "engine gate/up glu wpr=%d", wpr);
        timeit(nm, gu_bytes, [&](int s, bool pdl) { engine(s, pdl, y0, wpr); });
    }
    auto ref = [&](float *y) { engine(0, false, y, 1); };
    const unsigned g2 = (unsigned)((F + 1) / 2), g4 = (unsigned)((F + 3) / 4);
#define VAR(NAME, KERN, GRID)                                                                                  \
    timeit(NAME, gu_bytes, [&](int s, bool pdl) { launch_k(KERN, dim3(GRID), dim3(128), 0, 0, pdl, args(s, y1), xg); }); \
    cmp(NAME, F, ref, [&](float *y) { launch_k(KERN, dim3(GRID), dim3(128), 0, 0, false, args(0, y), xg); });
    VAR("var U=2 occ8 (the old engine form)", (glu_var_kernel<TQ4_K, 0, 2, 8>), g2)
    VAR("nodot U=2 occ8", (glu_var_kernel<TQ4_K, 1, 2, 8>), g2)
    VAR("chunk pairs U=1 occ8", (glu_var_kernel<TQ4_Kp, 0, 1, 8>), g2)
    VAR("pair U=1 occ8", (glu_pair_kernel<1, 8>), g4)
#undef VAR
    /* down */
    for (int wpr : {1, 2, 4}) {
        char nm[80];
        snprintf(nm, sizeof nm, "engine down Q4_K wpr=%d", wpr);
        timeit(nm, dn_bytes, [&](int s, bool pdl) { CK(qr_cuda_matvec(&wd[s], &xd, 1, y1, wpr, pdl, 0)); });
        snprintf(nm, sizeof nm, "engine down Q6_K wpr=%d", wpr);
        timeit(nm, dn6_bytes, [&](int s, bool pdl) { CK(qr_cuda_matvec(&wd6[s], &xd, 1, y1, wpr, pdl, 0)); });
    }
    return 0;
}
