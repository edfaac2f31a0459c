/* bench/mv_probe.cu — read-bandwidth probe for the MoE decode mat-vecs at mixtral's shapes (issue 9):
 * the engine's expert kernels (matmul_q.cu, included) against a plain streaming read and against
 * experimental kernel structures, on the same buffers. Prints GB/s per variant and checks that the
 * variants' outputs equal the engine kernel's bit for bit.
 *
 * "chain" lines time 16 launches back to back with programmatic launch, each on its own expert pair (the
 * launch costs overlap as in a decode graph), us per launch. Session 13 (docs/performance.md): the engine's
 * gate/up 48.1 us against a plain read of its bytes 43.6; the same kernel without the dot products (mode 1)
 * 45.5, without the scale loads (mode 3) 45.0 on 11 % fewer bytes, activations in shared memory (mode 2) 47.7;
 * a grid-stride form and register-pipelined forms no faster; the light form (2 chunks a lane) 47.5. Down +
 * combine 26.9 against a read 22.5; one register pipeline per warp (combine_pipe) 25.5. Neither moved the
 * mixtral decode step measurably (quarrel bench), so the engine kept its kernels.
 * Session 16 (H200, docs/performance.md): read 132 MB 31.2 us, engine gate/up 43.5, persistent gate/up 35.2 (now
 * the engine's, where it takes 42.0 in the decode step), down + combine 23.3, combine_pipe 21.1 (the engine's
 * two-slot form now). The "16 layers' planes" lines (new) test whether weights spread over GBs stream slower.
 *
 *   build (device): nvcc -O3 -std=c++17 -arch=sm_90 -Iinclude -Isrc -o /tmp/mv_probe bench/mv_probe.cu
 *   run:            /tmp/mv_probe [k_gate_up n_ff n_expert]      (defaults 4096 14336 8)
 */
#include <stdio.h>
#include <stdlib.h>
#include <vector>

#include "backend/cuda/matmul_q.cu"

#include "probe_common.cuh"

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


/* Persistent gate/up (GLU): a grid of at most one wave; warp gw takes items (slot, row) gw, gw + GW, ...;
 * an item loads the gate and the up row together (U chunks a lane each) and writes act(gate, up).
 * PIPE: the next item's loads are issued before this item's dots. Requires nch <= 32 * U. */
template <class T, int U, int PIPE, int MINB, int MODE = 0> /* MODE 1: no dots (xor); 2: activations in shared memory; 3: no scale loads */
static __global__ void __launch_bounds__(128, MINB)
    glu_persist_kernel(const qr_cuda_mv_id_args a, const cuda_xview x0, int n_slots) {
    pdl_wait();
    pdl_launch_dependents();
    cuda_xview x = x0;
    if (MODE == 2) {
        __shared__ __align__(16) int8_t sq[4096];
        __shared__ float sd[128];
        __shared__ int16_t sg[256];
        for (int i = threadIdx.x; i < 256; i += 128) ((int4 *)sq)[i] = ((const int4 *)x0.q)[i];
        for (int i = threadIdx.x; i < 128; i += 128) sd[i] = x0.d[i];
        for (int i = threadIdx.x; i < 256; i += 128) sg[i] = x0.g[i];
        __syncthreads();
        x.q = sq, x.d = sd, x.g = sg;
    }
    const int lane = threadIdx.x & 31;
    const int64_t gw = (int64_t)blockIdx.x * 4 + (threadIdx.x >> 5), GW = (int64_t)gridDim.x * 4;
    const int64_t n_items = (int64_t)n_slots * a.n_out;
    const cuda_wview &wg = a.w[0], &wu = a.w[1];
    const int nch = (int)wg.nb * T::CPB;
    typename T::W bg[2][U], bu[2][U];
    auto issue = [&](int64_t it, int buf) {
        const int s = (int)(it / a.n_out);
        const int64_t i = it % a.n_out;
        const int64_t row = (int64_t)a.ids[s] * a.n_out + i;
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = lane + 32 * u;
            if (c < nch) {
                if (MODE == 3) {
                    bg[buf][u].q = ld_stream16(wg.p0 + (row * wg.nb + c) * 16), bg[buf][u].d = 0x3800u;
                    bu[buf][u].q = ld_stream16(wu.p0 + (row * wu.nb + c) * 16), bu[buf][u].d = 0x3800u;
                } else {
                    bg[buf][u] = T::load(wg, row * wg.nb + c / T::CPB, c % T::CPB);
                    bu[buf][u] = T::load(wu, row * wu.nb + c / T::CPB, c % T::CPB);
                }
            }
        }
    };
    auto finish = [&](int64_t it, int buf) {
        const int s = (int)(it / a.n_out);
        const int64_t i = it % a.n_out;
        float ag[1] = {0.0f}, au[1] = {0.0f};
        const cuda_xview xs = xview_row<T>(x, a.x_per_slot ? s : s / a.n_used);
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = lane + 32 * u;
            if (c < nch) {
                if (MODE == 1) {
                    ag[0] += __int_as_float((int)(bg[buf][u].q.x ^ bg[buf][u].q.y ^ bg[buf][u].q.z ^ bg[buf][u].q.w)) + (float)bg[buf][u].d;
                    au[0] += __int_as_float((int)(bu[buf][u].q.x ^ bu[buf][u].q.y ^ bu[buf][u].q.z ^ bu[buf][u].q.w)) + (float)bu[buf][u].d;
                } else {
                    T::template dot<1>(bg[buf][u], xs, c / T::CPB, c % T::CPB, ag);
                    T::template dot<1>(bu[buf][u], xs, c / T::CPB, c % T::CPB, au);
                }
            }
        }
        const float g = warp_sum(ag[0]), v = warp_sum(au[0]);
        if (lane == 0) a.y[(int64_t)s * a.n_out + i] = glu_act(a.act, g, v);
    };
    if (!PIPE) {
        for (int64_t it = gw; it < n_items; it += GW) {
            issue(it, 0);
            finish(it, 0);
        }
        return;
    }
    int64_t it = gw;
    if (it < n_items) issue(it, 0);
    int buf = 0;
    for (; it < n_items; it += GW) {
        if (it + GW < n_items) {
            if (buf == 0) issue(it + GW, 1);
            else issue(it + GW, 0);
        }
        if (buf == 0) finish(it, 0);
        else finish(it, 1);
        buf ^= 1;
    }
}


/* the engine's expert mat-vec with UF chunks a lane in flight and MB CTAs an SM (the light form) */
template <class T, int UF, int MB>
static __global__ void __launch_bounds__(MMV_THREADS, MB)
    id_light_kernel(const qr_cuda_mv_id_args a, const cuda_xview x, int wpr) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int part = warp % wpr, sub = warp / wpr, rpc = (MMV_THREADS / 32) / wpr;
    const int s = (int)blockIdx.y;
    pdl_wait();
    pdl_launch_dependents();
    const int e = a.ids[s];
    const int m = sub & 1;
    const int64_t i = (int64_t)blockIdx.x * (rpc / 2) + (sub >> 1);
    const cuda_wview &w = a.w[m];
    const bool valid = i < a.n_out && e >= 0 && (int64_t)e * a.n_out < w.n;
    const int64_t row = valid ? (int64_t)e * a.n_out + i : w.n;
    const cuda_xview xs = xview_row<T>(x, a.x_per_slot ? s : s / a.n_used);
    float acc[1];
    matvec_row_part<T, 1, UF>(w, xs, row, part, wpr, lane, acc);
    __shared__ float red[MMV_THREADS / 32];
    if (lane == 0) red[warp] = acc[0];
    __syncthreads();
    if (m != 0 || part != 0 || lane != 0 || !valid) return;
    float g = 0.0f, u = 0.0f;
    for (int p = 0; p < wpr; p++) g += red[warp + p], u += red[warp + wpr + p];
    a.y[(int64_t)s * a.n_out + i] = glu_act(a.act, g, u);
}

/* down + combine, the loads of the next U-chunk step issued before this step's dots (over both
 * slots in order); a warp per output row */
template <class T, int U, int MB>
static __global__ void __launch_bounds__(MMV_THREADS, MB)
    combine_pipe_kernel(const qr_cuda_mv_id_args a, const cuda_xview x, const float *__restrict__ weights) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    pdl_wait();
    pdl_launch_dependents();
    const int64_t i = (int64_t)blockIdx.x * (MMV_THREADS / 32) + warp;
    const cuda_wview &w = a.w[0];
    if (i >= a.n_out) return;
    const int nch = (int)w.nb * T::CPB;
    const int steps = (nch + 32 * U - 1) / (32 * U); /* per slot */
    int64_t rb[2];
    rb[0] = ((int64_t)a.ids[0] * a.n_out + i) * w.nb;
    rb[1] = ((int64_t)a.ids[1] * a.n_out + i) * w.nb;
    typename T::W buf[2][U];
    auto issue = [&](int st, int bsel) {
        const int j = st / steps, c0 = (st % steps) * 32 * U + lane;
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = c0 + u * 32;
            if (c < nch) {
                if (bsel) buf[1][u] = T::load(w, rb[j] + c / T::CPB, c % T::CPB);
                else buf[0][u] = T::load(w, rb[j] + c / T::CPB, c % T::CPB);
            }
        }
    };
    float acc[2][1] = {{0.0f}, {0.0f}};
    auto fin = [&](int st, int bsel) {
        const int j = st / steps, c0 = (st % steps) * 32 * U + lane;
        const cuda_xview xs = xview_row<T>(x, j);
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = c0 + u * 32;
            if (c < nch) {
                if (j == 0) T::template dot<1>(bsel ? buf[1][u] : buf[0][u], xs, c / T::CPB, c % T::CPB, acc[0]);
                else T::template dot<1>(bsel ? buf[1][u] : buf[0][u], xs, c / T::CPB, c % T::CPB, acc[1]);
            }
        }
    };
    const int total = 2 * steps;
    issue(0, 0);
    for (int st = 0; st < total; st += 2) {
        if (st + 1 < total) issue(st + 1, 1);
        fin(st, 0);
        if (st + 1 < total) {
            if (st + 2 < total) issue(st + 2, 0);
            fin(st + 1, 1);
        }
    }
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < 2; j++) {
        const float wy = __fmul_rn(warp_sum(acc[j][0]), weights[j]);
        sum = j == 0 ? wy : __fadd_rn(sum, wy);
    }
    if (lane == 0) a.y[i] = sum;
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

    /* chains: 16 launches back to back with programmatic launch, each on its own expert pair (as in a
     * graph, where launch costs overlap); us per launch */
    {
        int32_t *ids16;
        CK(cudaMalloc(&ids16, 64 * 4));
        std::vector<int32_t> hi(64);
        for (int r = 0; r < 32; r++) hi[2 * r] = (2 * r) % NE, hi[2 * r + 1] = (2 * r + 1) % NE;
        CK(cudaMemcpy(ids16, hi.data(), 64 * 4, cudaMemcpyHostToDevice));
        auto chain = [&](const char *name, double bytes, auto &&fn) {
            for (int r = 0; r < 16; r++) fn(r);
            CK(cudaDeviceSynchronize());
            const float best = best_chain_ms(e0, e1, 5, 16, fn);
            CK(cudaGetLastError());
            const double us = best * 1e3 / 16;
            printf("chain %-38s %8.2f us  %7.1f GB/s\n", name, us, bytes / us * 1e-3);
        };
        auto chk = [&](const char *nm, auto &&fn) {
            qr_cuda_mv_id_args c = a;
            c.ids = ids16 + 6;
            c.y = y0;
            qr_cuda_matvec_id(&c, 1, &xg, 2, 1, false, 0);
            fn(3);
            CK(cudaDeviceSynchronize());
            std::vector<float> h0(2 * F), h1(2 * F);
            CK(cudaMemcpy(h0.data(), y0, 2 * F * 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(h1.data(), y1, 2 * F * 4, cudaMemcpyDeviceToHost));
            int64_t diff = 0;
            for (int64_t i = 0; i < 2 * F; i++) diff += memcmp(&h0[i], &h1[i], 4) != 0;
            printf("    %s: outputs differing from the engine's: %lld of %lld\n", nm, (long long)diff, (long long)(2 * F));
        };
        for (int pdl : {1}) {
            char nm[96];
            chain("engine down+combine pdl=1", dn_bytes, [&](int r) {
                qr_cuda_mv_id_args c = b;
                c.ids = ids16 + 2 * r;
                qr_cuda_matvec_id_combine(&c, &xd, wts, nullptr, 1, true, 0);
            });
            chain("read 66 MB pdl=1", dn_bytes, [&](int r) {
                launch_k(read_kernel<8>, dim3(NSM * 8), dim3(128), 0, 0, true, (const uint4 *)(r & 1 ? wu.p0 : wg.p0), (size_t)(dn_bytes / 16), sink);
            });
            chain("engine gate/up pdl=1 (again)", gu_bytes, [&](int r) {
                qr_cuda_mv_id_args c = a;
                c.ids = ids16 + 2 * r;
                qr_cuda_matvec_id(&c, 1, &xg, 2, 1, true, 0);
            });
            {
                auto dchk = [&](const char *nm2, auto &&fn) {
                    qr_cuda_mv_id_args c = b;
                    c.ids = ids16 + 6;
                    c.y = yd0;
                    qr_cuda_matvec_id_combine(&c, &xd, wts, nullptr, 1, false, 0);
                    fn(3);
                    CK(cudaDeviceSynchronize());
                    double md;
                    const int64_t diff = count_differ(yd0, yd1, K, 1e-3, &md);
                    printf("    %s: outputs differing from the engine's: %lld of %lld (max rel %.2g)\n", nm2, (long long)diff, (long long)K, md);
                };
                struct DV { const char *nm; void (*k)(const qr_cuda_mv_id_args, const cuda_xview, const float *); };
                const DV dvs[] = {{"combine_pipe U=2 mb=8", combine_pipe_kernel<TQ4_0, 2, 8>}};
                for (const DV &v : dvs) {
                    auto fn = [&](int r) {
                        qr_cuda_mv_id_args c = b;
                        c.ids = ids16 + 2 * r;
                        c.y = yd1;
                        launch_k(v.k, dim3((unsigned)(K / 4)), dim3(128), 0, 0, true, c, xd, (const float *)wts);
                    };
                    chain(v.nm, dn_bytes, fn);
                    dchk(v.nm, fn);
                }

                struct GV { const char *nm; void (*k)(const qr_cuda_mv_id_args, const cuda_xview, int); };
                const GV gvs[] = {{"id_light UF=2 mb=12", id_light_kernel<TQ4_0, 2, 12>},
                                  {"id_light UF=2 mb=10", id_light_kernel<TQ4_0, 2, 10>},
                                  {"id_light UF=4 mb=8", id_light_kernel<TQ4_0, 4, 8>}};
                for (const GV &v : gvs) {
                    auto fn = [&](int r) {
                        qr_cuda_mv_id_args c = a;
                        c.ids = ids16 + 2 * r;
                        c.y = y1;
                        launch_k(v.k, dim3((unsigned)(F / 2), 2), dim3(128), 0, 0, true, c, xg, 1);
                    };
                    chain(v.nm, gu_bytes, fn);
                    chk(v.nm, fn);
                }
            }

            snprintf(nm, sizeof nm, "engine gate/up pdl=%d", pdl);
            chain(nm, gu_bytes, [&](int r) {
                qr_cuda_mv_id_args c = a;
                c.ids = ids16 + 2 * r;
                qr_cuda_matvec_id(&c, 1, &xg, 2, 1, pdl, 0);
            });
            snprintf(nm, sizeof nm, "read 132 MB pdl=%d", pdl);
            chain(nm, gu_bytes, [&](int r) {
                const size_t n16 = (size_t)(gu_bytes / 16);
                launch_k(read_kernel<8>, dim3(NSM * 8), dim3(128), 0, 0, pdl, (const uint4 *)(r & 1 ? wu.p0 : wg.p0), n16, sink);
            });
            struct V { int pipe, minb; void (*k)(const qr_cuda_mv_id_args, const cuda_xview, int); };
            const V vs[] = {{0, 6, glu_persist_kernel<TQ4_0, 4, 0, 6>}, {10, 6, glu_persist_kernel<TQ4_0, 4, 0, 6, 1>},
                            {20, 6, glu_persist_kernel<TQ4_0, 4, 0, 6, 2>}, {30, 6, glu_persist_kernel<TQ4_0, 4, 0, 6, 3>},
                            {10, 8, glu_persist_kernel<TQ4_0, 4, 0, 8, 1>}, {20, 8, glu_persist_kernel<TQ4_0, 4, 0, 8, 2>}};
            for (const V &v : vs) {
                for (int cps : {v.minb}) {
                    snprintf(nm, sizeof nm, "persist gate/up mode=%d minb=%d cps=%d pdl=%d", v.pipe / 10, v.minb, cps, pdl);
                    auto fn = [&](int r) {
                        qr_cuda_mv_id_args c = a;
                        c.ids = ids16 + 2 * r;
                        c.y = y1;
                        launch_k(v.k, dim3(NSM * cps), dim3(128), 0, 0, pdl, c, xg, 2);
                    };
                    chain(nm, gu_bytes, fn);
                    if (pdl) chk(nm, fn);
                }
            }
            /* the engine's kernels (persistent gate/up: 6 CTAs an SM) on one set of planes and on 16 layers' planes
             * (8.4 GB, as the engine's weights spread over many GB: does TLB reach explain the engine's 42 us
             * against the probe's 35 on the H200? session 16) */
            {
                const int NL = 16;
                std::vector<cuda_wview> lg(NL), lu(NL);
                for (int l = 0; l < NL; l++) plane(NE * F, K, &lg[l]), plane(NE * F, K, &lu[l]);
                CK(cudaDeviceSynchronize());
                for (int spread = 0; spread < 2; spread++)
                    for (int variant : {0, 6}) {
                        snprintf(nm, sizeof nm, "engine gate/up %s %d, %s", variant ? "persistent" : "grid", variant,
                                 spread ? "16 layers' planes" : "one plane");
                        chain(nm, gu_bytes, [&](int r) {
                            qr_cuda_mv_id_args c = a;
                            if (spread) c.w[0] = lg[r % NL], c.w[1] = lu[r % NL];
                            c.ids = ids16 + 2 * r;
                            c.y = y1;
                            c.variant = variant;
                            qr_cuda_matvec_id(&c, 1, &xg, 2, 1, true, 0);
                        });
                    }
                for (int l = 0; l < NL; l++) {
                    CK(cudaFree((void *)lg[l].p0));
                    CK(cudaFree((void *)lg[l].p1));
                    CK(cudaFree((void *)lu[l].p0));
                    CK(cudaFree((void *)lu[l].p1));
                }
            }
        }
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
    if (getenv("PROBE_TMA"))
    for (int mode : {0, 1})
        for (int S : {2, 4, 8})
            for (int warps : {4, 8})
                for (int cps : {1, 2, 3}) tma(S, warps, cps, mode);
    return 0;
}
