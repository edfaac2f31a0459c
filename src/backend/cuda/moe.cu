/* moe.cu — mixture-of-experts kernels: routing (softmax / sigmoid / softmax over the selected logits,
 * top-k, normalisation, scale; one thread per token), the indexed mat-vec (one warp per output row
 * of one (token, slot): the weight row of the slot's expert is dequantized 8 values at a time and
 * dotted with the f32 activation row), the GLU activations and the weighted sum of the experts.
 *
 * This is the correctness-first version (issue 9, CPU half): every routed (token, slot) reads its
 * expert's rows itself; grouping the tokens of an expert into one tile (the prefill GEMM) and
 * quantized activations (dp4a / mma) are the GPU speed half. Numerics: f32 dot products of the
 * dequantized weights, so results match the CPU oracle (which quantizes activations to Q8) within
 * the lab's tolerance, not bit for bit.
 */
#include "backend/cuda/ew_dev.cuh"
#include "backend/cuda/norm_dev.cuh"
#include "backend/cuda/quant_dev.cuh"

/* 8 values of weight row `row` from element e (a multiple of 8): quantized types through T::deq8. */
template <class T, int FK>
static __device__ __forceinline__ void deq8_row(const cuda_wview &w, int64_t row, int64_t e, float *o) {
    if (FK == 2) {
        const float *p = (const float *)w.p0 + row * w.k + e;
#pragma unroll
        for (int i = 0; i < 8; i++) o[i] = e + i < w.k ? __ldg(p + i) : 0.0f;
    } else if (FK >= 0) {
        const uint16_t *p = (const uint16_t *)w.p0 + row * w.k + e;
#pragma unroll
        for (int i = 0; i < 8; i++) o[i] = e + i < w.k ? (FK == 0 ? h2f(p[i]) : bf2f(p[i])) : 0.0f;
    } else {
        const int64_t b = e / T::BS;
        T::deq8(w, row * w.nb + b, (int)(e - b * T::BS), o);
    }
}

/* ---- routing ---- */

static __device__ __forceinline__ float route_exp(float x) { return expf(x); }

/* One warp per token row (n_expert <= QR_CUDA_MOE_MAX_EXPERT): lane l owns experts l, l + 32, ...;
 * the probabilities are recomputed where needed (as the CPU computes them), the top-k chosen in k
 * rounds of a warp argmax over the selection scores (ties: the lower id), then lane 0 applies the
 * weight normalisation and scale of the arch. */
#define QR_CUDA_MOE_MAX_EXPERT 512
#define ROUTE_WARPS 4
static __device__ __forceinline__ float route_prob(float l, int gating, float mx, float inv) {
    if (gating == QR_MOE_SOFTMAX) return __fmul_rn(route_exp(l - mx), inv);
    if (gating == QR_MOE_SIGMOID) return __fdiv_rn(1.0f, __fadd_rn(1.0f, route_exp(-l)));
    return l;
}

/* A float as an unsigned key of the same order (1 + the sign-flipped bits: 0 is left for "no candidate";
 * -inf and NaNs order as their bits do). */
static __device__ __forceinline__ uint32_t route_key(float f) {
    const uint32_t u = __float_as_uint(f);
    const uint32_t k = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return k == 0xffffffffu ? k : k + 1u;
}

/* PL: experts per lane (n_expert <= 32 PL); KR: k <= ROUTE_KREG, the selected weights kept in lane 0's
 * registers (loops unrolled over ROUTE_KREG and guarded); else they go through global memory, one
 * round trip per access. */
#define ROUTE_KREG 16
/* Group-limited routing (as the CPU's mask_groups, ops_moe.c): lane g < n_groups scores group g as the sum of its two
 * best selection scores (the first best, then the first best of the rest), the n_used best groups are chosen by warp
 * argmax (ties to the lower group), and every other group's experts get -inf. sh: this warp's [n_expert] staging. */
template <int PL>
static __device__ __forceinline__ void route_mask_groups(float (&sc)[PL], int n_expert, int n_groups, int n_used,
                                                         float *sh, int lane) {
#pragma unroll
    for (int i = 0; i < PL; i++)
        if (lane + 32 * i < n_expert) sh[lane + 32 * i] = sc[i];
    __syncwarp();
    const int per = n_expert / n_groups;
    float score = -INFINITY;
    if (lane < n_groups) {
        const float *x = sh + lane * per;
        int b1 = 0;
        for (int i = 1; i < per; i++)
            if (x[i] > x[b1]) b1 = i;
        int b2 = b1 == 0 ? 1 : 0;
        for (int i = 0; i < per; i++)
            if (i != b1 && x[i] > x[b2]) b2 = i;
        score = __fadd_rn(x[b1], x[b2]);
    }
    uint32_t keep = 0u; /* bit g: group g kept (n_groups <= 32) */
    for (int j = 0; j < n_used; j++) {
        const uint32_t key = lane < n_groups && !(keep >> lane & 1u) ? route_key(score) : 0u;
        const uint32_t top = __reduce_max_sync(0xffffffffu, key);
        const uint32_t g = __reduce_min_sync(0xffffffffu, key == top && key ? (uint32_t)lane : 0xffffffffu);
        keep |= 1u << g;
    }
#pragma unroll
    for (int i = 0; i < PL; i++) {
        const int e = lane + 32 * i;
        if (e < n_expert && !(keep >> (e / per) & 1u)) sc[i] = -INFINITY;
    }
    __syncwarp();
}

template <int PL, bool KR>
static __device__ __forceinline__ void route_row(const float *lg, int n_expert, int k, int gating, bool norm, float scale,
                                                 bool has_sel_bias, const float *sb, int32_t *id, float *w, int lane,
                                                 int n_groups = 0, int n_group_used = 0, float *sh = nullptr) {
    /* this lane's logits, probabilities and selection scores, in registers (unrolled, guarded) */
    float l[PL], pr[PL], sc[PL];
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < PL; i++) {
        const int e = lane + 32 * i;
        l[i] = e < n_expert ? lg[e] : -INFINITY;
        mx = fmaxf(mx, l[i]);
    }
    double sum = 0.0;
    if (gating == QR_MOE_SOFTMAX) {
        mx = warp_max(mx);
#pragma unroll
        for (int i = 0; i < PL; i++)
            if (lane + 32 * i < n_expert) sum += (double)route_exp(l[i] - mx);
        sum = warp_sum_d(sum);
    }
    const float inv = (float)(1.0 / sum);
#pragma unroll
    for (int i = 0; i < PL; i++) {
        const int e = lane + 32 * i;
        pr[i] = e < n_expert ? route_prob(l[i], gating, mx, inv) : 0.0f;
        sc[i] = e < n_expert ? (has_sel_bias ? __fadd_rn(pr[i], sb[i]) : pr[i]) : -INFINITY;
    }
    if (n_groups > 1) route_mask_groups<PL>(sc, n_expert, n_groups, n_group_used, sh, lane);
    constexpr int KN = KR ? ROUTE_KREG : 1, KLOOP = KR ? ROUTE_KREG : (1 << 30);
    float wk[KN];       /* KR: lane 0's selected probabilities */
    uint32_t taken = 0; /* bit i: expert lane + 32 i is chosen */
#pragma unroll
    for (int j = 0; j < KLOOP; j++) {
        if (j >= k) break;
        /* this lane's best candidate (higher score, then the lower id), as an ordered key: 0 = none */
        int mine = -1;
        uint32_t key = 0u;
#pragma unroll
        for (int i = 0; i < PL; i++) {
            const int e = lane + 32 * i;
            if (e >= n_expert || (taken >> i & 1u)) continue;
            const uint32_t ki = route_key(sc[i]);
            if (mine < 0 || ki > key) mine = e, key = ki;
        }
        /* warp argmax in two reductions: the highest key, then the lowest id holding it */
        const uint32_t top = __reduce_max_sync(0xffffffffu, key);
        const int best = top == 0u ? -1 : (int)__reduce_min_sync(0xffffffffu, key == top && mine >= 0 ? (uint32_t)mine : 0xffffffffu);
        float best_p = 0.0f;
#pragma unroll
        for (int i = 0; i < PL; i++)
            if (lane + 32 * i == best) best_p = pr[i];
        best_p = __shfl_sync(0xffffffffu, best_p, best >= 0 ? best & 31 : 0);
        if (best >= 0 && (best & 31) == lane) taken |= 1u << (best >> 5);
        if (lane == 0) {
            id[j] = best;
            if (KR) wk[j < KN ? j : 0] = best_p;
            else w[j] = best_p;
        }
    }
    if (lane != 0) return;
    /* the arch's weight transforms, on lane 0's registers (KR) or on global memory */
#define WK(j) (*(KR ? &wk[(j) < KN ? (j) : 0] : &w[j]))
#define FOR_K _Pragma("unroll") for (int j = 0; j < (KR ? ROUTE_KREG : k); j++) if (j < k)
    if (gating == QR_MOE_SOFTMAX_WEIGHT) {
        float m2 = -INFINITY;
        FOR_K m2 = fmaxf(m2, WK(j));
        double s2 = 0.0;
        FOR_K s2 += (double)(WK(j) = route_exp(WK(j) - m2));
        const float i2 = (float)(1.0 / s2);
        FOR_K WK(j) = __fmul_rn(WK(j), i2);
    }
    if (norm) {
        double s3 = 0.0;
        FOR_K s3 += (double)WK(j);
        const float fs = fmaxf((float)s3, 6.103515625e-5f);
        FOR_K WK(j) = __fdiv_rn(WK(j), fs);
    }
    if (scale != 1.0f && scale != 0.0f) FOR_K WK(j) = __fmul_rn(WK(j), scale);
    if (KR) FOR_K w[j] = WK(j);
#undef FOR_K
#undef WK
}

template <int PL, bool KR>
static __global__ void moe_route_kernel(const float *__restrict__ logits, int64_t n_rows, int n_expert, int k,
                                        int gating, bool norm, float scale, const float *__restrict__ sel_bias,
                                        int32_t *__restrict__ ids, float *__restrict__ weights, int n_groups,
                                        int n_group_used) {
    __shared__ float sh[ROUTE_WARPS][QR_CUDA_MOE_MAX_EXPERT]; /* group-limited routing's staging */
    const int lane = threadIdx.x & 31;
    float sb[PL]; /* the selection bias (a weight) is read before waiting for the logits */
#pragma unroll
    for (int i = 0; i < PL; i++) sb[i] = sel_bias && lane + 32 * i < n_expert ? __ldg(sel_bias + lane + 32 * i) : 0.0f;
    pdl_enter();
    const int64_t r = (int64_t)blockIdx.x * ROUTE_WARPS + (threadIdx.x >> 5);
    if (r >= n_rows) return;
    route_row<PL, KR>(logits + r * n_expert, n_expert, k, gating, norm, scale, sel_bias != nullptr, sb, ids + r * k,
                      weights + r * k, lane, n_groups, n_group_used, sh[threadIdx.x >> 5]);
}

extern "C" cudaError_t qr_cuda_moe_route(const float *logits, int64_t n_rows, const qr_moe_route_params *p,
                                         const float *sel_bias, int32_t *ids, float *weights, bool pdl,
                                         cudaStream_t stream) {
    if (n_rows <= 0) return cudaSuccess;
    if (p->n_expert < 1 || p->n_expert > QR_CUDA_MOE_MAX_EXPERT || p->n_used < 1 || p->n_used > p->n_expert ||
        p->n_groups > 32)
        return cudaErrorInvalidValue;
    const dim3 grid((unsigned)((n_rows + ROUTE_WARPS - 1) / ROUTE_WARPS)), block(32 * ROUTE_WARPS);
#define ROUTE(PL, KR)                                                                                                  \
    launch_k(moe_route_kernel<PL, KR>, grid, block, 0, stream, pdl, logits, n_rows, (int)p->n_expert, (int)p->n_used, \
             (int)p->gating, (bool)p->norm, p->scale, sel_bias, ids, weights, (int)p->n_groups, (int)p->n_group_used)
    if (p->n_used > ROUTE_KREG) return ROUTE(QR_CUDA_MOE_MAX_EXPERT / 32, false);
    if (p->n_expert <= 32) return ROUTE(1, true);
    if (p->n_expert <= 64) return ROUTE(2, true);
    if (p->n_expert <= 128) return ROUTE(4, true);
    if (p->n_expert <= 256) return ROUTE(8, true);
    return ROUTE(QR_CUDA_MOE_MAX_EXPERT / 32, true);
#undef ROUTE
}

/* ---- the MoE layer's norm, router and routing in one launch (decode rows) ---- */

/* One CTA a row, each thread 8 values (norm_dev.cuh): x += b_scale b; y = rmsnorm(x) * w (QK >= 0: also y's
 * codes for the expert mat-vec); logits = Wr y (+ br), Wr F32 [n_expert][dim]; then the routing (route_row)
 * by warp 0. The router rows of this thread's 8 columns are prefetched into L2 before the dependency wait
 * (loaded into registers after it). The three kernels this replaces (norm, router mat-vec, routing) cost
 * three launches and the router rows' load from memory on the critical path. n_expert <= 8, dim <= 4096.
 * The logits are sums of per-thread fmaf chains, then over the warp (a transposing reduction), then over the
 * warps in groups of 4: another order than the router mat-vec's, so they may differ from it in the last bits
 * (the lab: within 2.7e-7 of the CPU's). */
#define NR_ROUTE_NRE 8
template <bool ADD, int QK>
static __global__ void __launch_bounds__(512)
    norm_route_kernel(float *x, const float *__restrict__ b, float b_scale, const float *__restrict__ w, int64_t dim,
                      float eps, float *y, int8_t *q, float *qd, float *qs, int16_t *qg, const float *__restrict__ wr,
                      const float *__restrict__ br, int n_expert, int k, int gating, bool norm, float scale,
                      const float *__restrict__ sel_bias, float *logits, int32_t *ids, float *weights) {
    __shared__ double sh[32];
    __shared__ float part[16][NR_ROUTE_NRE];
    __shared__ float lg[NR_ROUTE_NRE];
    const int64_t i0 = (int64_t)threadIdx.x * 8;
    const bool on = i0 < dim;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (int)(blockDim.x >> 5);
    float g[8], v[8], rw[NR_ROUTE_NRE][8];
    rmsnorm8_weights(w, dim, g);
    if (on) /* a thread's 32 bytes of a row are one L2 sector */
        for (int e = 0; e < n_expert; e++) asm volatile("prefetch.global.L2 [%0];" ::"l"(wr + (int64_t)e * dim + i0));
    const float sb = sel_bias && lane < n_expert ? __ldg(sel_bias + lane) : 0.0f;
    const float be = br && (lane >> 2) < n_expert ? __ldg(br + (lane >> 2)) : 0.0f; /* warp 0's lanes 4e.. */
    pdl_enter();
    rmsnorm8_load<ADD>(x, b, b_scale, dim, v); /* the row first: the norm is the critical path */
#pragma unroll
    for (int e = 0; e < NR_ROUTE_NRE; e++) { /* 128 KB (mixtral) through one SM: they land during the norm */
        if (e < n_expert && on) {
            const float4 a0 = __ldg((const float4 *)(wr + (int64_t)e * dim + i0));
            const float4 a1 = __ldg((const float4 *)(wr + (int64_t)e * dim + i0 + 4));
            rw[e][0] = a0.x, rw[e][1] = a0.y, rw[e][2] = a0.z, rw[e][3] = a0.w;
            rw[e][4] = a1.x, rw[e][5] = a1.y, rw[e][6] = a1.z, rw[e][7] = a1.w;
        } else {
#pragma unroll
            for (int j = 0; j < 8; j++) rw[e][j] = 0.0f;
        }
    }
    rmsnorm8_finish<ADD, QK>(x, w != nullptr, g, dim, eps, y, q, qd, qs, qg, sh, v);
    /* the 8 dot products, then a transposing warp reduction (9 shuffles instead of 8 x 5): after it lane l
     * holds the warp's sum for expert 4 b4 + 2 b3 + b2 of its lane bits */
    float p[NR_ROUTE_NRE];
#pragma unroll
    for (int e = 0; e < NR_ROUTE_NRE; e++) {
        p[e] = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; j++) p[e] = fmaf(rw[e][j], v[j], p[e]);
    }
    const bool b4 = lane & 16, b3 = lane & 8, b2 = lane & 4;
    float a4[4], a2[2];
#pragma unroll
    for (int j = 0; j < 4; j++) a4[j] = (b4 ? p[j + 4] : p[j]) + __shfl_xor_sync(0xffffffffu, b4 ? p[j] : p[j + 4], 16);
#pragma unroll
    for (int j = 0; j < 2; j++) a2[j] = (b3 ? a4[j + 2] : a4[j]) + __shfl_xor_sync(0xffffffffu, b3 ? a4[j] : a4[j + 2], 8);
    float c = (b2 ? a2[1] : a2[0]) + __shfl_xor_sync(0xffffffffu, b2 ? a2[0] : a2[1], 4);
    c += __shfl_xor_sync(0xffffffffu, c, 2);
    c += __shfl_xor_sync(0xffffffffu, c, 1);
    const int ce = (b4 ? 4 : 0) + (b3 ? 2 : 0) + (b2 ? 1 : 0);
    if ((lane & 3) == 0) part[warp][ce] = c;
    __syncthreads();
    if (warp != 0) return;
    /* warp 0: expert lane >> 2 over the warps (lane & 3) * 4 .. + 3, then over the 4 lanes; the logits to
     * shared memory for the routing */
    const int le = lane >> 2;
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int wi = (lane & 3) * 4 + i;
        if (wi < nw) sum += part[wi][le];
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    if ((lane & 3) == 0 && le < n_expert) {
        if (br) sum = __fadd_rn(sum, be);
        lg[le] = sum;
        logits[(int64_t)blockIdx.x * n_expert + le] = sum;
    }
    __syncwarp();
    route_row<1, true>(lg, n_expert, k, gating, norm, scale, sel_bias != nullptr, &sb, ids + (int64_t)blockIdx.x * k,
                       weights + (int64_t)blockIdx.x * k, lane);
}

extern "C" bool qr_cuda_norm_route_supported(int64_t dim, int32_t n_expert, int32_t n_used) {
    return dim % 8 == 0 && dim <= 4096 && n_expert >= 1 && n_expert <= NR_ROUTE_NRE && n_used >= 1 && n_used <= n_expert;
}

extern "C" cudaError_t qr_cuda_norm_route(float *x, const float *b, float b_scale, const float *w, int64_t n_rows,
                                          int64_t dim, float eps, float *y, int qkind, int8_t *q, float *d, float *s,
                                          int16_t *g, const float *wr, const float *br, const qr_moe_route_params *p,
                                          const float *sel_bias, float *logits, int32_t *ids, float *weights, bool pdl,
                                          cudaStream_t stream) {
    if (n_rows <= 0) return cudaSuccess;
    if (!qr_cuda_norm_route_supported(dim, p->n_expert, p->n_used) || qkind > 1 ||
        (qkind >= 0 && dim % (qkind == 0 ? 32 : 256)) || n_rows > 65535)
        return cudaErrorInvalidValue;
    const dim3 grid((unsigned)n_rows), block((unsigned)((dim / 8 + 31) / 32 * 32));
#define L(A, K)                                                                                                         \
    return launch_k(norm_route_kernel<A, K>, grid, block, 0, stream, pdl, x, b, b_scale, w, dim, eps, y, q, d, s, g, wr, \
                    br, (int)p->n_expert, (int)p->n_used, (int)p->gating, (bool)p->norm, p->scale, sel_bias, logits,  \
                    ids, weights)
    if (b) {
        if (qkind == 0) L(true, 0);
        if (qkind == 1) L(true, 1);
        L(true, -1);
    }
    if (qkind == 0) L(false, 0);
    if (qkind == 1) L(false, 1);
    L(false, -1);
#undef L
}

/* ---- indexed mat-vec ---- */

#define MMID_WARPS 8

/* Grid: (ceil(n_out / MMID_WARPS), n_rows * n_used). Warp w of block b computes output row
 * b.x * MMID_WARPS + w of slot b.y. */
template <class T, int FK>
static __global__ void matmul_id_kernel(const cuda_wview w, int64_t n_out, const float *__restrict__ bias,
                                        const float *__restrict__ x, bool x_per_slot, const int32_t *__restrict__ ids,
                                        int n_used, float *__restrict__ y) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t i = (int64_t)blockIdx.x * MMID_WARPS + warp, s = blockIdx.y;
    if (i >= n_out) return;
    const int e = ids[s];
    const float *xr = x + (x_per_slot ? s : s / n_used) * w.k;
    const int64_t row = (int64_t)e * n_out + i;
    float acc = 0.0f;
    for (int64_t c = (int64_t)lane * 8; c < w.k; c += 32 * 8) {
        float o[8];
        deq8_row<T, FK>(w, row, c, o);
#pragma unroll
        for (int q = 0; q < 8; q++)
            if (c + q < w.k) acc = fmaf(o[q], xr[c + q], acc);
    }
    acc = warp_sum(acc);
    if (lane == 0) y[s * n_out + i] = bias ? acc + bias[(int64_t)e * n_out + i] : acc;
}

template <class T, int FK>
static cudaError_t launch_mmid(const cuda_wview *w, int64_t n_out, const float *bias, const float *x, bool per_slot,
                               const int32_t *ids, int64_t n_rows, int n_used, float *y, cudaStream_t stream) {
    const dim3 grid((unsigned)((n_out + MMID_WARPS - 1) / MMID_WARPS), (unsigned)(n_rows * n_used));
    matmul_id_kernel<T, FK><<<grid, 32 * MMID_WARPS, 0, stream>>>(*w, n_out, bias, x, per_slot, ids, n_used, y);
    QR_CUDA_CHECK_LAUNCH();
}

extern "C" cudaError_t qr_cuda_matmul_id(const cuda_wview *w, int64_t n_out, const float *bias, const float *x,
                                         bool x_per_slot, const int32_t *ids, int64_t n_rows, int32_t n_used, float *y,
                                         cudaStream_t stream) {
    if (n_rows <= 0) return cudaSuccess;
    if (n_rows * n_used > 65535 || w->k % 8) return cudaErrorInvalidValue;
#define L(T, FK) launch_mmid<T, FK>(w, n_out, bias, x, x_per_slot, ids, n_rows, n_used, y, stream)
    switch ((qr_type)w->type) {
    case QR_TYPE_Q4_0: return L(TQ4_0, -1);
    case QR_TYPE_Q4_1: return L(TQ4_1, -1);
    case QR_TYPE_Q5_0: return L(TQ5_0, -1);
    case QR_TYPE_Q5_1: return L(TQ5_1, -1);
    case QR_TYPE_Q8_0: return L(TQ8_0, -1);
    case QR_TYPE_MXFP4: return L(TMXFP4, -1);
    case QR_TYPE_IQ4_NL: return L(TIQ4_NL, -1);
    case QR_TYPE_Q2_K: return L(TQ2_K, -1);
    case QR_TYPE_Q3_K: return L(TQ3_K, -1);
    case QR_TYPE_Q4_K: return L(TQ4_K, -1);
    case QR_TYPE_Q5_K: return L(TQ5_K, -1);
    case QR_TYPE_Q6_K: return L(TQ6_K, -1);
    case QR_TYPE_F16: return L(TQ4_0, 0);
    case QR_TYPE_BF16: return L(TQ4_0, 1);
    case QR_TYPE_F32: return L(TQ4_0, 2);
    default: return cudaErrorInvalidValue;
    }
#undef L
}

/* ---- activations and the weighted sum ---- */

static __global__ void glu_kernel(const float *g, const float *u, int64_t n, int act, float *out) {
    pdl_enter();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[i] = glu_act(act, g[i], u ? u[i] : 0.0f);
}

extern "C" cudaError_t qr_cuda_glu(const float *g, const float *u, int64_t n, int act, float *out, bool pdl,
                                   cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    return launch_k(glu_kernel, dim3((unsigned)((n + 255) / 256)), dim3(256), 0, stream, pdl, g, u, n, act, out);
}

static __global__ void moe_combine_kernel(const float *__restrict__ y, const float *__restrict__ w, int64_t n_rows,
                                          int n_used, int64_t dim, const float *add, float *out) {
    pdl_enter();
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n_rows * dim) return;
    const int64_t r = idx / dim, i = idx % dim;
    const float *yr = y + r * n_used * dim + i, *wr = w + r * n_used;
    float acc = __fmul_rn(yr[0], wr[0]);
    for (int j = 1; j < n_used; j++) acc = __fadd_rn(acc, __fmul_rn(yr[(int64_t)j * dim], wr[j]));
    out[idx] = add ? __fadd_rn(acc, add[idx]) : acc;
}

extern "C" cudaError_t qr_cuda_moe_combine(const float *y, const float *w, int64_t n_rows, int32_t n_used, int64_t dim,
                                           const float *add, float *out, bool pdl, cudaStream_t stream) {
    if (n_rows <= 0) return cudaSuccess;
    const int64_t n = n_rows * dim;
    return launch_k(moe_combine_kernel, dim3((unsigned)((n + 255) / 256)), dim3(256), 0, stream, pdl, y, w, n_rows,
                    (int)n_used, dim, add, out);
}

/* ---- the grouped expert GEMM of prefill: gather the activations of each expert's slots, scatter back ---- */

/* One CTA per destination row; 16-byte copies when k is a multiple of 8, else 2-byte ones. */
static __global__ void gather_f16_kernel(const uint16_t *__restrict__ src, int64_t k, const int32_t *__restrict__ rows,
                                         uint16_t *__restrict__ dst) {
    const int64_t p = blockIdx.x;
    uint16_t *d = dst + p * k;
    if (rows[p] < 0) { /* a padding row */
        for (int64_t i = threadIdx.x; i < k; i += blockDim.x) d[i] = 0;
        return;
    }
    const uint16_t *s = src + (int64_t)rows[p] * k;
    if (k % 8 == 0) {
        for (int64_t i = threadIdx.x; i < k / 8; i += blockDim.x) ((uint4 *)d)[i] = ((const uint4 *)s)[i];
    } else {
        for (int64_t i = threadIdx.x; i < k; i += blockDim.x) d[i] = s[i];
    }
}

extern "C" cudaError_t qr_cuda_gather_f16(const void *src, int64_t k, const int32_t *rows, int32_t n, void *dst,
                                          cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    gather_f16_kernel<<<(unsigned)n, 128, 0, stream>>>((const uint16_t *)src, k, rows, (uint16_t *)dst);
    QR_CUDA_CHECK_LAUNCH();
}

/* Grid (ceil(n_out / 256), n). */
static __global__ void moe_scatter_kernel(const float *__restrict__ g, const float *__restrict__ u,
                                          const float *__restrict__ bg, const float *__restrict__ bu,
                                          const int32_t *__restrict__ slot, const int32_t *__restrict__ expert,
                                          const int32_t *__restrict__ row, int64_t n_out, int act,
                                          float *__restrict__ out) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, p = blockIdx.y;
    if (i >= n_out) return;
    const int64_t bi = (int64_t)expert[p] * n_out + i, gi = (int64_t)row[p] * n_out + i;
    float a = g[gi];
    if (bg) a = __fadd_rn(a, bg[bi]);
    float r = a;
    if (u) {
        float b = u[gi];
        if (bu) b = __fadd_rn(b, bu[bi]);
        r = glu_act(act, a, b);
    } else if (act >= 0) {
        r = glu_act(act, a, 0.0f);
    }
    out[(int64_t)slot[p] * n_out + i] = r;
}

extern "C" cudaError_t qr_cuda_moe_scatter(const float *g, const float *u, const float *bg, const float *bu,
                                           const int32_t *slot, const int32_t *expert, const int32_t *row, int32_t n,
                                           int64_t n_out, int act, float *out, cudaStream_t stream) {
    if (n <= 0 || n_out <= 0) return cudaSuccess;
    if (n > 65535) return cudaErrorInvalidValue;
    const dim3 grid((unsigned)((n_out + 255) / 256), (unsigned)n);
    moe_scatter_kernel<<<grid, 256, 0, stream>>>(g, u, bg, bu, slot, expert, row, n_out, act, out);
    QR_CUDA_CHECK_LAUNCH();
}
