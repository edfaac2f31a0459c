/* bench/mv_probe.cu — read-bandwidth probe for the MoE decode mat-vecs at mixtral's shapes (issue 9):
 * the engine's expert kernels (matmul_q.cu, included) against a plain streaming read and against
 * experimental kernel structures, on the same buffers. Prints GB/s per variant and checks that the
 * variants' outputs equal the engine kernel's bit for bit.
 *
 *   build (device): nvcc -O3 -std=c++17 -arch=sm_90 -Iinclude -Isrc -o /tmp/mv_probe bench/mv_probe.cu
 *   run:            /tmp/mv_probe [k_gate_up n_ff n_expert]      (defaults 4096 14336 8)
 */
#include <stdio.h>
#include <stdlib.h>
#include <vector>

#include "backend/cuda/matmul_q.cu"

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));     \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static __global__ void fill_kernel(uint8_t *p, size_t n, uint32_t seed, int mode) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
        if (mode == 1 && (i & 1)) h = 0x1c + (h & 3); /* f16 scales: high byte small -> finite, ~1e-3 */
        p[i] = (uint8_t)h;
    }
}

/* the plain read: every byte of [p, p + n) once, 16-byte loads, U in flight per thread */
template <int U>
static __global__ void read_kernel(const uint4 *p, size_t n16, uint32_t *sink) {
    uint32_t acc = 0;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += stride * U) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; u++) v[u] = i + u * stride < n16 ? ld_stream16(p + i + u * stride) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < U; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    if (acc == 0x12345678u) sink[0] = acc;
}

/* ---- TMA bulk-copy pipeline (experimental) ---- */
static __device__ __forceinline__ void mbar_init(uint64_t *b, int n) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"((unsigned)__cvta_generic_to_shared(b)), "r"(n) : "memory");
}
static __device__ __forceinline__ void mbar_expect(uint64_t *b, uint32_t tx) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"((unsigned)__cvta_generic_to_shared(b)),
                 "r"(tx)
                 : "memory");
}
static __device__ __forceinline__ void mbar_wait(uint64_t *b, uint32_t parity) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(b);
    uint32_t done = 0;
    while (!done)
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done)
                     : "r"(a), "r"(parity)
                     : "memory");
}
static __device__ __forceinline__ void bulk_g2s(void *dst, const void *src, uint32_t bytes, uint64_t *b) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     (unsigned)__cvta_generic_to_shared(dst)),
                 "l"(src), "r"(bytes), "r"((unsigned)__cvta_generic_to_shared(b))
                 : "memory");
}

/* Q4_0 rows through a per-warp ring of S stages (one weight row a stage: codes then scales).
 * Work: output o = (slot s, row i) over n_slots * n_out, R rows an output (GLU: gate, up; combine: the
 * slots of one token, n_out outputs). Warp gw takes outputs gw, gw + GW, ... */
template <int S, int MODE> /* MODE 0: GLU gate/up (silu(g) * u); 1: down + combine of n_used slots */
static __global__ void __launch_bounds__(256) tma_q40_kernel(cuda_wview wg, cuda_wview wu, const int32_t *ids,
                                                              int64_t n_out, int n_slots, int n_used, cuda_xview x,
                                                              const float *weights, float *y) {
    extern __shared__ __align__(128) uint8_t smem[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int nb = (int)wg.nb;
    const uint32_t qbytes = (uint32_t)nb * 16, sbytes = (uint32_t)nb * 2;
    const uint32_t stage = (qbytes + sbytes + 127) & ~127u;
    uint8_t *ring = smem + (size_t)warp * S * stage;
    uint64_t *bar = (uint64_t *)(smem + (size_t)(blockDim.x / 32) * S * stage) + warp * S;
    const int R = MODE == 0 ? 2 : n_used;
    const int64_t n_outputs = MODE == 0 ? (int64_t)n_slots * n_out : n_out;
    const int64_t gw = (int64_t)blockIdx.x * (blockDim.x / 32) + warp, GW = (int64_t)gridDim.x * (blockDim.x / 32);
    const int64_t my_outputs = gw < n_outputs ? (n_outputs - gw + GW - 1) / GW : 0;
    const int64_t my_rows = my_outputs * R;
    if (lane == 0)
        for (int s = 0; s < S; s++) mbar_init(bar + s, 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    __syncwarp();
    /* row j of this warp's sequence: output gw + (j / R) GW, part j % R */
    auto issue = [&](int64_t j) {
        const int64_t o = gw + (j / R) * GW;
        const int part = (int)(j % R);
        int64_t row;
        const cuda_wview *w;
        if (MODE == 0) {
            const int s = (int)(o / n_out);
            const int64_t i = o % n_out;
            row = (int64_t)ids[s] * n_out + i;
            w = part == 0 ? &wg : &wu;
        } else {
            row = (int64_t)ids[part] * n_out + o;
            w = &wg;
        }
        uint8_t *st = ring + (size_t)(j % S) * stage;
        uint64_t *b = bar + (j % S);
        mbar_expect(b, qbytes + sbytes);
        bulk_g2s(st, w->p0 + row * nb * 16, qbytes, b);
        bulk_g2s(st + qbytes, w->p1 + row * nb * 2, sbytes, b);
    };
    if (lane == 0)
        for (int64_t j = 0; j < S && j < my_rows; j++) issue(j);
    float part_acc[2] = {0.0f, 0.0f};
    float comb = 0.0f;
    for (int64_t j = 0; j < my_rows; j++) {
        const int st = (int)(j % S);
        mbar_wait(bar + st, (uint32_t)((j / S) & 1));
        const uint8_t *q = ring + (size_t)st * stage;
        const uint16_t *sc = (const uint16_t *)(q + qbytes);
        const int part = (int)(j % R);
        const int64_t o = gw + (j / R) * GW;
        cuda_xview xs = x;
        if (MODE == 0) xs = x; /* one token: both slots read activation row 0 */
        else xs = xview_row<TQ4_0>(x, part);
        float acc[1] = {0.0f};
        for (int c = lane; c < nb; c += 32) {
            TQ4_0::W wd;
            wd.q = *(const uint4 *)(q + (size_t)c * 16);
            wd.d = h2f(sc[c]);
            TQ4_0::dot<1>(wd, xs, c, 0, acc);
        }
        __syncwarp();
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        if (lane == 0 && j + S < my_rows) issue(j + S);
        const float v = warp_sum(acc[0]);
        if (MODE == 0) {
            part_acc[part] = v;
            if (part == 1 && lane == 0) y[o] = glu_act(QR_GLU_SWIGLU, part_acc[0], part_acc[1]);
        } else {
            const float wy = __fmul_rn(v, weights[part]);
            comb = part == 0 ? wy : __fadd_rn(comb, wy);
            if (part == R - 1 && lane == 0) y[o] = comb;
        }
    }
}

/* down + combine with every slot's loads of an iteration issued together (U chunks per slot) */
template <class T, int U, int NU>
static __global__ void __launch_bounds__(MMV_THREADS, 8)
    combine_all_kernel(const qr_cuda_mv_id_args a, const cuda_xview x, const float *__restrict__ weights) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t i = (int64_t)blockIdx.x * (MMV_THREADS / 32) + warp;
    const cuda_wview &w = a.w[0];
    if (i >= a.n_out) return;
    int64_t row[NU];
    float acc[NU][1];
#pragma unroll
    for (int j = 0; j < NU; j++) row[j] = (int64_t)a.ids[j] * a.n_out + i, acc[j][0] = 0.0f;
    const int nch = (int)w.nb * T::CPB;
    for (int c0 = lane; c0 < nch; c0 += 32 * U) {
        typename T::W wd[NU][U];
#pragma unroll
        for (int j = 0; j < NU; j++)
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int c = c0 + u * 32;
                if (c < nch) wd[j][u] = T::load(w, row[j] * w.nb + c / T::CPB, c % T::CPB);
            }
#pragma unroll
        for (int j = 0; j < NU; j++)
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int c = c0 + u * 32;
                if (c < nch) T::template dot<1>(wd[j][u], xview_row<T>(x, j), c / T::CPB, c % T::CPB, acc[j]);
            }
    }
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < NU; j++) {
        const float wy = __fmul_rn(warp_sum(acc[j][0]), weights[j]);
        s = j == 0 ? wy : __fadd_rn(s, wy);
    }
    if (lane == 0) a.y[i] = s;
}

/* L2 prefetch of [p, p + bytes) in 64 KB bulk requests, one thread a request */
static __global__ void l2_prefetch_kernel(const uint8_t *p, size_t bytes) {
    const size_t off = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 65536;
    if (off >= bytes) return;
    const uint32_t n = (uint32_t)min((size_t)65536, bytes - off);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + off), "r"(n) : "memory");
}

int main(int argc, char **argv) {
    const int64_t K = argc > 1 ? atoll(argv[1]) : 4096, F = argc > 2 ? atoll(argv[2]) : 14336;
    const int NE = argc > 3 ? atoi(argv[3]) : 8, NSM = [] {
        int d, n;
        cudaGetDevice(&d);
        cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, d);
        return n;
    }();
    /* gate, up: [NE * F][K]; down: [NE * K][F]; Q4_0 planes */
    auto plane = [&](int64_t rows, int64_t k, cuda_wview *w) {
        const int64_t nb = k / 32;
        uint8_t *p0, *p1;
        CK(cudaMalloc(&p0, rows * nb * 16));
        CK(cudaMalloc(&p1, rows * nb * 2));
        fill_kernel<<<1024, 256>>>(p0, rows * nb * 16, (uint32_t)rows, 0);
        fill_kernel<<<1024, 256>>>(p1, rows * nb * 2, (uint32_t)rows + 7, 1);
        *w = {QR_TYPE_Q4_0, k, rows, nb, p0, p1, nullptr};
    };
    cuda_wview wg, wu, wd;
    plane(NE * F, K, &wg);
    plane(NE * F, K, &wu);
    plane(NE * K, F, &wd);
    /* activations (Q8_0 rule): codes, d, s, 16-sums; 2 rows */
    auto act = [&](int64_t k, int rows, cuda_xview *x) {
        int8_t *q;
        float *d, *s;
        int16_t *g;
        CK(cudaMalloc(&q, rows * k));
        CK(cudaMalloc(&d, rows * k / 32 * 4));
        CK(cudaMalloc(&s, rows * k / 32 * 4));
        CK(cudaMalloc(&g, rows * k / 16 * 2));
        fill_kernel<<<64, 256>>>((uint8_t *)q, rows * k, 99, 0);
        std::vector<float> hd(rows * k / 32, 0.01f);
        CK(cudaMemcpy(d, hd.data(), hd.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(s, hd.data(), hd.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaMemset(g, 0, rows * k / 16 * 2));
        *x = {q, d, s, g, nullptr, (int32_t)k};
    };
    cuda_xview xg, xd;
    act(K, 1, &xg);
    act(F, 2, &xd);
    int32_t *ids;
    float *wts, *y0, *y1;
    CK(cudaMalloc(&ids, 64));
    CK(cudaMalloc(&wts, 64));
    CK(cudaMalloc(&y0, 2 * F * 4));
    CK(cudaMalloc(&y1, 2 * F * 4));
    uint32_t *sink;
    CK(cudaMalloc(&sink, 4));
    const float hw[2] = {0.6f, 0.4f};
    CK(cudaMemcpy(wts, hw, 8, cudaMemcpyHostToDevice));
    CK(cudaDeviceSynchronize());
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    const int reps = 50;
    /* ids rotate over expert pairs so that no call finds the previous one's rows in L2 */
    auto set_ids = [&](int r) {
        const int32_t h[2] = {(2 * r) % NE, (2 * r + 1) % NE};
        cudaMemcpyAsync(ids, h, 8, cudaMemcpyHostToDevice);
    };
    auto timeit = [&](const char *name, double bytes, auto &&fn) {
        for (int r = 0; r < 3; r++) set_ids(r), fn();
        CK(cudaDeviceSynchronize());
        float tot = 0;
        for (int r = 0; r < reps; r++) {
            set_ids(r);
            cudaEventRecord(e0);
            fn();
            cudaEventRecord(e1);
            cudaEventSynchronize(e1);
            float ms;
            cudaEventElapsedTime(&ms, e0, e1);
            tot += ms;
        }
        CK(cudaGetLastError());
        const double us = tot * 1e3 / reps;
        printf("%-44s %8.2f us  %7.1f GB/s\n", name, us, bytes / us * 1e-3);
    };
    const double gu_bytes = 2.0 * 2 * F * (K / 32) * 18, dn_bytes = 2.0 * K * (F / 32) * 18;
    printf("shapes: gate/up %lld x %lld, down %lld x %lld, %d experts, top-2; %d SMs\n", (long long)F, (long long)K,
           (long long)K, (long long)F, NE, NSM);
    /* plain reads of the same byte counts */
    for (int U : {2, 4, 8}) {
        for (int cps : {4, 8}) {
            char nm[64];
            snprintf(nm, sizeof nm, "read gate/up bytes U=%d ctas/SM=%d", U, cps);
            timeit(nm, gu_bytes, [&] {
                const size_t n16 = (size_t)(gu_bytes / 16);
                if (U == 2) read_kernel<2><<<NSM * cps, 128>>>((const uint4 *)wg.p0, n16, sink);
                if (U == 4) read_kernel<4><<<NSM * cps, 128>>>((const uint4 *)wg.p0, n16, sink);
                if (U == 8) read_kernel<8><<<NSM * cps, 128>>>((const uint4 *)wg.p0, n16, sink);
            });
        }
    }
    qr_cuda_mv_id_args a = {};
    a.w[0] = wg, a.w[1] = wu, a.n_out = F, a.ids = ids, a.n_used = 2, a.x_per_slot = 0, a.act = QR_GLU_SWIGLU, a.y = y0;
    timeit("engine gate/up (matvec_id glu, wpr 1)", gu_bytes, [&] { qr_cuda_matvec_id(&a, 1, &xg, 2, 1, false, 0); });
    qr_cuda_mv_id_args b = {};
    b.w[0] = wd, b.n_out = K, b.ids = ids, b.n_used = 2, b.x_per_slot = 1, b.act = -1, b.y = y0 + 2 * F - 0;
    float *yd0, *yd1;
    CK(cudaMalloc(&yd0, K * 4));
    CK(cudaMalloc(&yd1, K * 4));
    b.y = yd0;
    timeit("engine down+combine (matvec_id_combine)", dn_bytes, [&] { qr_cuda_matvec_id_combine(&b, &xd, wts, nullptr, 1, false, 0); });
    {
        qr_cuda_mv_id_args c = b;
        c.y = yd1;
        auto cmp = [&](const char *nm) {
            set_ids(reps - 1);
            qr_cuda_matvec_id_combine(&b, &xd, wts, nullptr, 1, false, 0);
            CK(cudaDeviceSynchronize());
            std::vector<float> h0(K), h1(K);
            CK(cudaMemcpy(h0.data(), yd0, K * 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(h1.data(), yd1, K * 4, cudaMemcpyDeviceToHost));
            int64_t diff = 0;
            for (int64_t i = 0; i < K; i++) diff += memcmp(&h0[i], &h1[i], 4) != 0;
            printf("    %s: outputs differing from the engine's: %lld of %lld\n", nm, (long long)diff, (long long)K);
        };
        timeit("combine_all U=4 (8 loads a lane)", dn_bytes, [&] {
            combine_all_kernel<TQ4_0, 4, 2><<<(unsigned)(K / 4), 128>>>(c, xd, wts);
        });
        cmp("U=4");
        timeit("combine_all U=2 (4 loads a lane)", dn_bytes, [&] {
            combine_all_kernel<TQ4_0, 2, 2><<<(unsigned)(K / 4), 128>>>(c, xd, wts);
        });
        cmp("U=2");
    }
    /* big reads: the asymptotic rate */
    for (double mb : {66.0, 132.0, 528.0}) {
        char nm[64];
        snprintf(nm, sizeof nm, "read %.0f MB U=8 ctas/SM=8", mb);
        timeit(nm, mb * 1e6, [&] { read_kernel<8><<<NSM * 8, 128>>>((const uint4 *)wg.p0, (size_t)(mb * 1e6 / 16), sink); });
    }
    /* TMA variants */
    auto tma = [&](int S, int warps, int cps, int mode) {
        const int64_t nb = mode == 0 ? K / 32 : F / 32;
        const size_t stage = (size_t)((nb * 18 + 127) & ~127);
        const size_t sm = (size_t)warps * S * stage + (size_t)warps * S * 8;
        char nm[96];
        snprintf(nm, sizeof nm, "tma %s S=%d warps=%d ctas/SM=%d (%zu KB)", mode ? "down" : "gate/up", S, warps, cps,
                 sm / 1024);
        auto k0 = S == 2 ? tma_q40_kernel<2, 0> : S == 4 ? tma_q40_kernel<4, 0> : tma_q40_kernel<8, 0>;
        auto k1 = S == 2 ? tma_q40_kernel<2, 1> : S == 4 ? tma_q40_kernel<4, 1> : tma_q40_kernel<8, 1>;
        auto kk = mode ? k1 : k0;
        if (cudaFuncSetAttribute(kk, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm) != cudaSuccess || sm > 227 * 1024) {
            printf("%-44s skipped (smem)\n", nm);
            cudaGetLastError();
            return;
        }
        const int grid = NSM * cps;
        timeit(nm, mode ? dn_bytes : gu_bytes, [&] {
            if (mode == 0) kk<<<grid, warps * 32, sm>>>(wg, wu, ids, F, 2, 2, xg, wts, y1);
            else kk<<<grid, warps * 32, sm>>>(wd, wd, ids, K, 1, 2, xd, wts, yd1);
        });
        /* same ids as the engine's last call: compare */
        set_ids(reps - 1);
        if (mode == 0) {
            qr_cuda_matvec_id(&a, 1, &xg, 2, 1, false, 0);
            kk<<<grid, warps * 32, sm>>>(wg, wu, ids, F, 2, 2, xg, wts, y1);
        } else {
            qr_cuda_matvec_id_combine(&b, &xd, wts, nullptr, 1, false, 0);
            kk<<<grid, warps * 32, sm>>>(wd, wd, ids, K, 1, 2, xd, wts, yd1);
        }
        CK(cudaDeviceSynchronize());
        const int64_t n = mode ? K : 2 * F;
        std::vector<float> h0(n), h1(n);
        CK(cudaMemcpy(h0.data(), mode ? yd0 : y0, n * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(h1.data(), mode ? yd1 : y1, n * 4, cudaMemcpyDeviceToHost));
        int64_t diff = 0;
        for (int64_t i = 0; i < n; i++) diff += memcmp(&h0[i], &h1[i], 4) != 0;
        printf("    outputs differing from the engine's: %lld of %lld\n", (long long)diff, (long long)n);
    };
    for (int mode : {0, 1})
        for (int S : {2, 4, 8})
            for (int warps : {4, 8})
                for (int cps : {1, 2, 3}) tma(S, warps, cps, mode);
    return 0;
}
