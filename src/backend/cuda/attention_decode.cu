/* attention_decode.cu — attention for a few query rows over a long paged cache (decode), split-K
 * ("flash-decoding"): f16 cache, dk == dv in {64, 128, 256}.
 *
 * Same contract and numerics as attention.cu (the CPU oracle's non flash-attention path: q rounded
 * to f16, score = scale * softcap(q . k), probabilities normalised by the row's final max and sum
 * and rounded to f16, then times V), but each K and V row is read once and the loads are wide:
 *   scores kernel: CTA per (row, kv head, tile of <= G query heads, KV split); a lane owns one key,
 *                  loads its whole K row with 16-byte loads (8 in flight) and dots it with the
 *                  group's q (shared memory, broadcast); writes the scores to a scratch row and the
 *                  split's running (max, exp-sum) per head;
 *   values kernel: same grid; merges the splits' stats (final max M, 1 / sum), turns each stored
 *                  score into p = f16(exp(s - M) / L) (the CPU's exp polynomial), and accumulates
 *                  p * V with a warp reading whole V rows (lane: D / 32 dims), 8 rows in flight;
 *   fused:         with one split (short contexts), one kernel runs both passes;
 *   combine:       with n_splits > 1, the last CTA of each (row, kv head, head tile) to finish its
 *                  values (an atomic counter per tile, reset by that CTA for the next launch or graph
 *                  replay) sums the splits' partial outputs: no third kernel.
 * The old kernel recomputed q . k in its second pass and loaded K/V a few elements per lane.
 */
#include "backend/cuda/act_quant.cuh"

#include <stdint.h>

#define DEC_THREADS 128
#define DEC_WARPS 4

/* The CPU's order: softcap on the raw dot, then the scale (as attention.cu). */
static __device__ __forceinline__ float dec_score(float dot, const cuda_attn_args &a, float inv_cap) {
    float s = dot;
    if (a.softcap > 0.0f) s = __fmul_rn(tanh_precise(__fmul_rn(s, inv_cap)), a.softcap);
    return __fmul_rn(s, a.scale);
}

/* Where a CTA works: its row, kv head, query heads [h0, h0 + gn), keys [p_begin, p_end). */
struct dec_geom {
    int r, kvh, h0, gn, first, p_begin, p_end;
    const int32_t *bt;
    int64_t rh0; /* r * n_head + h0 */
};

template <int G>
static __device__ __forceinline__ dec_geom dec_geometry(const cuda_attn_args &a, int n_gtiles) {
    dec_geom g;
    int bx = blockIdx.x;
    const int gt = bx % n_gtiles;
    bx /= n_gtiles;
    g.kvh = bx % a.n_head_kv;
    g.r = bx / a.n_head_kv;
    const int group = a.n_head / a.n_head_kv;
    g.h0 = g.kvh * group + gt * G;
    g.gn = min(G, group - gt * G);
    const int pos = a.pos[g.r];
    g.first = a.window > 0 ? max(0, pos - a.window + 1) : 0;
    const int span = pos - g.first + 1, split = blockIdx.y, ns = a.n_splits;
    g.p_begin = g.first + (int)((int64_t)span * split / ns);
    g.p_end = g.first + (int)((int64_t)span * (split + 1) / ns);
    g.bt = a.block_table + (int64_t)a.seq[g.r] * a.max_blocks;
    g.rh0 = (int64_t)g.r * a.n_head + g.h0;
    return g;
}

static __device__ __forceinline__ int64_t dec_slot(const dec_geom &g, const cuda_attn_args &a, int p) {
    return (int64_t)g.bt[p / a.block_size] * a.block_size + p % a.block_size;
}

/* Pass 1: scores[(r * n_head + h) * sstride + (p - first)] for every key of the split, and the
 * split's (max, exp-sum) per head in a.stats. */
template <int D, int G>
static __device__ __forceinline__ void dec_scores(const cuda_attn_args &a, int n_gtiles, float *scores, int32_t sstride) {
    constexpr int NC = D / 8; /* 16-byte chunks of a K row */
    constexpr int CB = NC < 8 ? NC : 8; /* chunks in flight */
    __shared__ __align__(16) float q_s[G * D];
    __shared__ float st_s[2][DEC_WARPS][G];
    const dec_geom g = dec_geometry<G>(a, n_gtiles);
    for (int i = threadIdx.x; i < G * D; i += DEC_THREADS) {
        const int gi = i / D, d = i % D;
        q_s[i] = gi < g.gn ? round_f16(a.q[(g.rh0 + gi) * a.dk + d]) : 0.0f;
    }
    __syncthreads();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const float inv_cap = a.softcap > 0.0f ? __fdiv_rn(1.0f, a.softcap) : 0.0f;
    float m[G], l[G];
#pragma unroll
    for (int gi = 0; gi < G; gi++) m[gi] = -INFINITY, l[gi] = 0.0f;
    const int64_t kstride = (int64_t)a.n_head_kv * D; /* halves */
    const __half *kc = (const __half *)a.k_cache + (int64_t)g.kvh * D;
    for (int p0 = g.p_begin + warp * 32; p0 < g.p_end; p0 += DEC_WARPS * 32) {
        const int p = p0 + lane;
        const bool valid = p < g.p_end;
        const uint4 *krow = (const uint4 *)(kc + (valid ? dec_slot(g, a, p) : 0) * kstride);
        float dot[G];
#pragma unroll
        for (int gi = 0; gi < G; gi++) dot[gi] = 0.0f;
#pragma unroll
        for (int c0 = 0; c0 < NC; c0 += CB) {
            uint4 kv[CB];
#pragma unroll
            for (int c = 0; c < CB; c++) kv[c] = valid ? krow[c0 + c] : make_uint4(0, 0, 0, 0); /* coherent: the new key was just stored */
#pragma unroll
            for (int c = 0; c < CB; c++) {
                const __half2 *h2 = (const __half2 *)&kv[c];
                float kf[8];
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const float2 f = __half22float2(h2[j]);
                    kf[2 * j] = f.x, kf[2 * j + 1] = f.y;
                }
#pragma unroll
                for (int gi = 0; gi < G; gi++) {
                    const float *qq = q_s + gi * D + (c0 + c) * 8;
#pragma unroll
                    for (int e = 0; e < 8; e++) dot[gi] = fmaf(qq[e], kf[e], dot[gi]);
                }
            }
        }
#pragma unroll
        for (int gi = 0; gi < G; gi++) {
            if (gi >= g.gn) break;
            const float s = valid ? dec_score(dot[gi], a, inv_cap) : -INFINITY;
            if (valid) scores[(g.rh0 + gi) * sstride + (p - g.first)] = s;
            const float mn = fmaxf(m[gi], warp_max(s));
            const float e = valid ? __expf(s - mn) : 0.0f;
            l[gi] = l[gi] * __expf(m[gi] - mn) + warp_sum(e);
            m[gi] = mn;
        }
    }
    /* merge the warps' stats; write this split's (max, sum) per head */
    if (lane == 0) {
#pragma unroll
        for (int gi = 0; gi < G; gi++) st_s[0][warp][gi] = m[gi], st_s[1][warp][gi] = l[gi];
    }
    __syncthreads();
    if ((int)threadIdx.x < g.gn) {
        const int gi = threadIdx.x;
        float M = -INFINITY, L = 0.0f;
        for (int w = 0; w < DEC_WARPS; w++) M = fmaxf(M, st_s[0][w][gi]);
        for (int w = 0; w < DEC_WARPS; w++)
            if (st_s[1][w][gi] > 0.0f) L += st_s[1][w][gi] * __expf(st_s[0][w][gi] - M);
        float *st = a.stats + ((g.rh0 + gi) * a.n_splits + blockIdx.y) * 2;
        st[0] = M;
        st[1] = L;
    }
}

/* DPL halves of a V row starting at element d0 (DPL = 2, 4 or 8: one 4/8/16-byte load). */
template <int DPL>
static __device__ __forceinline__ void load_v(const __half *row, int d0, float (&v)[DPL]) {
    if constexpr (DPL == 2) {
        const float2 f = __half22float2(*(const __half2 *)(row + d0));
        v[0] = f.x, v[1] = f.y;
    } else if constexpr (DPL == 4) {
        const uint2 u = *(const uint2 *)(row + d0);
        const float2 a = __half22float2(*(const __half2 *)&u.x), b = __half22float2(*(const __half2 *)&u.y);
        v[0] = a.x, v[1] = a.y, v[2] = b.x, v[3] = b.y;
    } else {
        const uint4 u = *(const uint4 *)(row + d0); /* coherent loads (PDL: see quant_dev.cuh) */
        const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const float2 f = __half22float2(*(const __half2 *)&w[j]);
            v[2 * j] = f.x, v[2 * j + 1] = f.y;
        }
    }
}

/* Pass 2: out (n_splits == 1) or this split's partial output = sum over its keys of p * v. */
template <int D, int G>
static __device__ __forceinline__ void dec_values(const cuda_attn_args &a, int n_gtiles, const float *scores,
                                                  int32_t sstride, unsigned int *counters) {
    constexpr int DPL = D / 32; /* dims per lane */
    constexpr int VB = 8;       /* V rows in flight */
    __shared__ float mi_s[2][G];
    __shared__ float p_s[DEC_WARPS][G][32];
    __shared__ int32_t slot_s[DEC_WARPS][32];
    __shared__ float acc_s[DEC_WARPS][G][D];
    __shared__ int last_s;
    const dec_geom g = dec_geometry<G>(a, n_gtiles);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, ns = a.n_splits;
    for (int gi = warp; gi < g.gn; gi += DEC_WARPS) { /* merge the stats of every split: lanes over splits */
        const float *st = a.stats + (g.rh0 + gi) * ns * 2;
        float M = -INFINITY, L = 0.0f;
        for (int s2 = lane; s2 < ns; s2 += 32) M = fmaxf(M, __ldcg(st + 2 * s2));
        M = warp_max(M);
        for (int s2 = lane; s2 < ns; s2 += 32) {
            const float l2 = __ldcg(st + 2 * s2 + 1);
            if (l2 > 0.0f) L += l2 * __expf(__ldcg(st + 2 * s2) - M);
        }
        L = warp_sum(L);
        if (a.sinks) { /* the sink is one more score with no value (as attention.cu) */
            const float sk = a.sinks[g.h0 + gi], M2 = fmaxf(M, sk);
            L = (L > 0.0f ? L * __expf(M - M2) : 0.0f) + __expf(sk - M2);
            M = M2;
        }
        if (lane == 0) mi_s[0][gi] = M, mi_s[1][gi] = (float)(1.0 / (double)L);
    }
    __syncthreads();
    float acc[G][DPL];
#pragma unroll
    for (int gi = 0; gi < G; gi++)
#pragma unroll
        for (int i = 0; i < DPL; i++) acc[gi][i] = 0.0f;
    const int64_t vstride = (int64_t)a.n_head_kv * D;
    const __half *vc = (const __half *)a.v_cache + (int64_t)g.kvh * D;
    for (int p0 = g.p_begin + warp * 32; p0 < g.p_end; p0 += DEC_WARPS * 32) {
        const int p = p0 + lane, nk = min(32, g.p_end - p0);
        const bool valid = p < g.p_end;
        slot_s[warp][lane] = valid ? (int32_t)dec_slot(g, a, p) : 0;
#pragma unroll
        for (int gi = 0; gi < G; gi++) {
            float pr = 0.0f;
            if (gi < g.gn && valid)
                pr = round_f16(__fmul_rn(ggml_expf(__ldcg(scores + (g.rh0 + gi) * sstride + (p - g.first)) - mi_s[0][gi]),
                                         mi_s[1][gi]));
            p_s[warp][gi][lane] = pr;
        }
        __syncwarp();
        for (int j0 = 0; j0 < nk; j0 += VB) {
            float v[VB][DPL];
#pragma unroll
            for (int jj = 0; jj < VB; jj++) {
                if (j0 + jj < nk) load_v<DPL>(vc + (int64_t)slot_s[warp][j0 + jj] * vstride, lane * DPL, v[jj]);
                else
#pragma unroll
                    for (int i = 0; i < DPL; i++) v[jj][i] = 0.0f;
            }
#pragma unroll
            for (int jj = 0; jj < VB; jj++) {
#pragma unroll
                for (int gi = 0; gi < G; gi++) {
                    const float pv = j0 + jj < nk ? p_s[warp][gi][j0 + jj] : 0.0f;
#pragma unroll
                    for (int i = 0; i < DPL; i++) acc[gi][i] = fmaf(pv, v[jj][i], acc[gi][i]);
                }
            }
        }
        __syncwarp();
    }
#pragma unroll
    for (int gi = 0; gi < G; gi++)
#pragma unroll
        for (int i = 0; i < DPL; i++) acc_s[warp][gi][lane * DPL + i] = acc[gi][i];
    __syncthreads();
    for (int i = threadIdx.x; i < g.gn * D; i += DEC_THREADS) {
        const int gi = i / D, d = i % D;
        float sum = 0.0f;
#pragma unroll
        for (int w = 0; w < DEC_WARPS; w++) sum += acc_s[w][gi][d];
        if (ns == 1) a.out[(g.rh0 + gi) * D + d] = sum;
        else a.partial[((g.rh0 + gi) * ns + blockIdx.y) * (int64_t)D + d] = sum;
    }
    if (ns == 1) return;
    /* the last split of this tile to finish sums the partial outputs (in split order, as a separate
     * combine kernel would) */
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last_s = atomicAdd(&counters[blockIdx.x], 1u) == (unsigned)(ns - 1);
    __syncthreads();
    if (!last_s) return;
    __threadfence();
    for (int i = threadIdx.x; i < g.gn * D; i += DEC_THREADS) {
        const int gi = i / D, d = i % D;
        const float *pp = a.partial + (g.rh0 + gi) * ns * (int64_t)D + d;
        float sum = 0.0f;
        for (int k = 0; k < ns; k++) sum += __ldcg(pp + k * (int64_t)D);
        a.out[(g.rh0 + gi) * D + d] = sum;
    }
    if (threadIdx.x == 0) counters[blockIdx.x] = 0u;
}

template <int D, int G>
static __global__ void __launch_bounds__(DEC_THREADS)
    attn_dec_scores(const cuda_attn_args a, int n_gtiles, float *scores, int32_t sstride) {
    pdl_enter();
    dec_scores<D, G>(a, n_gtiles, scores, sstride);
}

template <int D, int G>
static __global__ void __launch_bounds__(DEC_THREADS)
    attn_dec_values(const cuda_attn_args a, int n_gtiles, const float *scores, int32_t sstride, unsigned int *counters) {
    pdl_enter();
    dec_values<D, G>(a, n_gtiles, scores, sstride, counters);
}

/* One split (short contexts): both passes in one CTA, the scores and stats it wrote read back after a
 * barrier (coherent loads), so one launch instead of two. */
template <int D, int G>
static __global__ void __launch_bounds__(DEC_THREADS)
    attn_dec_fused(const cuda_attn_args a, int n_gtiles, float *scores, int32_t sstride, unsigned int *counters) {
    pdl_enter();
    dec_scores<D, G>(a, n_gtiles, scores, sstride);
    __syncthreads();
    dec_values<D, G>(a, n_gtiles, scores, sstride, counters);
    if (a.q8_kind < 0) return;
    /* the tile's output (gn heads x D, contiguous, block-aligned: checked by the host) quantized for
     * the output projection, one warp per block */
    __syncthreads();
    const dec_geom g = dec_geometry<G>(a, n_gtiles);
    const int bs = a.q8_kind == 0 ? 32 : 256, lane = threadIdx.x & 31;
    const int64_t b0 = g.rh0 * D / bs, nb = (int64_t)g.gn * D / bs;
    for (int64_t j = threadIdx.x >> 5; j < nb; j += DEC_WARPS) {
        if (a.q8_kind == 0) act_quant_block32(a.out, b0 + j, lane, a.q8, a.q8d, a.q8s, a.q8g);
        else act_quant_block256(a.out, b0 + j, lane, a.q8, a.q8d, a.q8g);
    }
}

/* ---- cluster flash-decoding (short and medium contexts) ----
 *
 * The n_splits CTAs of a tile (row, kv head, query-head tile) form one thread-block cluster, each
 * taking a contiguous range of <= CL_KMAX keys. They exchange what the two kernels above exchange
 * through global memory through distributed shared memory instead, in one launch:
 *   1. before waiting for the previous kernel: the keys' cache slots (plan data) into shared memory;
 *      after it: this CTA's first K round, its first V rows and q, all loads in flight together;
 *   2. scores (lanes_per_key = D / 32 lanes per key, 32 halves each) into shared memory, then the
 *      CTA's (max, exp-sum) per head; cluster barrier; every CTA merges all the cluster's stats in
 *      rank order (the same M and 1 / L everywhere), turns its scores into the CPU's rounded
 *      probabilities p = f16(exp(s - M) / L), and accumulates p * V (D / 8 threads per V row);
 *   3. cluster barrier; the CTAs sum the cluster's partial outputs in rank order, each for its share of
 *      the quantization blocks, write the output and quantize it for the output projection
 *      (q8_kind >= 0); a last barrier keeps every CTA's shared memory alive until all have read it. */
#define CL_KMAX 512
#define CL_MAX 8

#include <cooperative_groups.h>

template <int D, int G>
static __global__ void __launch_bounds__(DEC_THREADS) attn_dec_cluster(const cuda_attn_args a, int n_gtiles) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 /* clusters: Hopper on (the host launches it only there) */
    namespace cg = cooperative_groups;
    constexpr int LPK = D / 32;            /* lanes per key in the score pass: 4 chunks of 8 halves each */
    constexpr int KPR = DEC_THREADS / LPK; /* keys per score round */
    constexpr int TPR = D / 8;             /* threads per V row (8 halves each) */
    constexpr int KG = DEC_THREADS / TPR;  /* key groups of the value pass */
    constexpr int VB = 8;                  /* V rows per thread in flight */
    __shared__ __align__(16) float q_s[G * D];
    __shared__ float sc_s[G][CL_KMAX];
    __shared__ int32_t slot_s[CL_KMAX];
    __shared__ __align__(16) float red_s[DEC_WARPS][G][D];
    __shared__ float st_s[2][G];
    __shared__ float mi_s[2][G];
    cg::cluster_group cl = cg::this_cluster();
    const int cs = (int)cl.num_blocks();
    long long *dbg = a.dbg && blockIdx.x == 0 && threadIdx.x == 0 && (blockIdx.y == 0 || (int)blockIdx.y == cs - 1)
                         ? a.dbg + (blockIdx.y == 0 ? 0 : 16)
                         : NULL;
#define STAMP(i) \
    if (dbg) dbg[i] = clock64()
    STAMP(0);
    const dec_geom g = dec_geometry<G>(a, n_gtiles);
    const int nk = max(0, g.p_end - g.p_begin);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    for (int i = tid; i < nk; i += DEC_THREADS) slot_s[i] = (int32_t)dec_slot(g, a, g.p_begin + i);
    __syncthreads();
    STAMP(1);
    pdl_enter();
    STAMP(2);
    const int64_t kvstride = (int64_t)a.n_head_kv * D; /* halves */
    const __half *kc = (const __half *)a.k_cache + (int64_t)g.kvh * D;
    const __half *vc = (const __half *)a.v_cache + (int64_t)g.kvh * D;
    const int kq = tid / LPK, kj = tid % LPK;  /* score pass: key of the round, lane in the key */
    const int kgi = tid / TPR, dc = tid % TPR; /* value pass: key group, 8-dim chunk */
    uint4 kv[4], vb[VB];
    auto load_k = [&](int k0, uint4 *dst) {
        const int kl = k0 + kq;
        const uint4 *row = (const uint4 *)(kc + (int64_t)(kl < nk ? slot_s[kl] : 0) * kvstride);
#pragma unroll
        for (int c = 0; c < 4; c++) dst[c] = kl < nk ? row[kj + LPK * c] : make_uint4(0, 0, 0, 0);
    };
    auto load_v = [&](int i0) {
#pragma unroll
        for (int i = 0; i < VB; i++) {
            const int kl = kgi + KG * (i0 + i);
            vb[i] = kl < nk ? *((const uint4 *)(vc + (int64_t)slot_s[kl] * kvstride) + dc) : make_uint4(0, 0, 0, 0);
        }
    };
    load_k(0, kv);
    load_v(0);
    for (int i = tid; i < G * D; i += DEC_THREADS) {
        const int gi = i / D, d = i % D;
        q_s[i] = gi < g.gn ? round_f16(a.q[(g.rh0 + gi) * a.dk + d]) : 0.0f;
    }
    __syncthreads();
    STAMP(3);
    const float inv_cap = a.softcap > 0.0f ? __fdiv_rn(1.0f, a.softcap) : 0.0f;
    for (int k0 = 0; k0 < nk; k0 += KPR) {
        uint4 cur[4];
#pragma unroll
        for (int c = 0; c < 4; c++) cur[c] = kv[c];
        if (k0 + KPR < nk) load_k(k0 + KPR, kv);
        float dot[G];
#pragma unroll
        for (int gi = 0; gi < G; gi++) dot[gi] = 0.0f;
#pragma unroll
        for (int c = 0; c < 4; c++) {
            const int ch = kj + LPK * c;
            const __half2 *h2 = (const __half2 *)&cur[c];
            float kf[8];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float2 f = __half22float2(h2[j]);
                kf[2 * j] = f.x, kf[2 * j + 1] = f.y;
            }
#pragma unroll
            for (int gi = 0; gi < G; gi++) {
                const float4 qa = *(const float4 *)(q_s + gi * D + ch * 8), qb = *(const float4 *)(q_s + gi * D + ch * 8 + 4);
                dot[gi] = fmaf(qa.x, kf[0], dot[gi]);
                dot[gi] = fmaf(qa.y, kf[1], dot[gi]);
                dot[gi] = fmaf(qa.z, kf[2], dot[gi]);
                dot[gi] = fmaf(qa.w, kf[3], dot[gi]);
                dot[gi] = fmaf(qb.x, kf[4], dot[gi]);
                dot[gi] = fmaf(qb.y, kf[5], dot[gi]);
                dot[gi] = fmaf(qb.z, kf[6], dot[gi]);
                dot[gi] = fmaf(qb.w, kf[7], dot[gi]);
            }
        }
#pragma unroll
        for (int gi = 0; gi < G; gi++)
#pragma unroll
            for (int o = 1; o < LPK; o <<= 1) dot[gi] += __shfl_xor_sync(0xffffffffu, dot[gi], o);
        const int kl = k0 + kq;
        if (kl < nk && kj == 0) {
#pragma unroll
            for (int gi = 0; gi < G; gi++) sc_s[gi][kl] = gi < g.gn ? dec_score(dot[gi], a, inv_cap) : -INFINITY;
        }
    }
    __syncthreads();
    STAMP(4);
    /* this CTA's (max, exp-sum) per head */
    for (int gi = warp; gi < G; gi += DEC_WARPS) {
        float m = -INFINITY, l = 0.0f;
        if (gi < g.gn) {
            for (int i = lane; i < nk; i += 32) m = fmaxf(m, sc_s[gi][i]);
            m = warp_max(m);
            if (m > -INFINITY)
                for (int i = lane; i < nk; i += 32) l += ggml_expf(sc_s[gi][i] - m);
            l = warp_sum(l);
        }
        if (lane == 0) st_s[0][gi] = m, st_s[1][gi] = l;
    }
    STAMP(5);
    cl.sync();
    STAMP(6);
    /* the cluster's M and 1 / L per head, merged in rank order by every CTA */
    for (int gi = warp; gi < g.gn; gi += DEC_WARPS) {
        float m = -INFINITY, l = 0.0f;
        if (lane < cs) {
            const float *pst = cl.map_shared_rank(&st_s[0][0], lane);
            m = pst[gi];
            l = pst[G + gi];
        }
        const float M0 = warp_max(m);
        float L = warp_sum(l > 0.0f ? l * __expf(m - M0) : 0.0f), M = M0;
        if (a.sinks) {
            const float sk = a.sinks[g.h0 + gi], M2 = fmaxf(M, sk);
            L = (L > 0.0f ? L * __expf(M - M2) : 0.0f) + __expf(sk - M2);
            M = M2;
        }
        if (lane == 0) mi_s[0][gi] = M, mi_s[1][gi] = (float)(1.0 / (double)L);
    }
    __syncthreads();
    for (int i = tid; i < G * nk; i += DEC_THREADS) {
        const int gi = i / nk, kl = i % nk;
        sc_s[gi][kl] = gi < g.gn ? round_f16(__fmul_rn(ggml_expf(sc_s[gi][kl] - mi_s[0][gi]), mi_s[1][gi])) : 0.0f;
    }
    __syncthreads();
    STAMP(7);
    /* p * V: thread (key group, 8 dims), keys kgi, kgi + KG, ... */
    float acc[G][8];
#pragma unroll
    for (int gi = 0; gi < G; gi++)
#pragma unroll
        for (int e = 0; e < 8; e++) acc[gi][e] = 0.0f;
    for (int i0 = 0; kgi + KG * i0 < nk; i0 += VB) {
        uint4 cur[VB];
#pragma unroll
        for (int i = 0; i < VB; i++) cur[i] = vb[i];
        if (kgi + KG * (i0 + VB) < nk) load_v(i0 + VB);
#pragma unroll
        for (int i = 0; i < VB; i++) {
            const int kl = kgi + KG * (i0 + i);
            if (kl >= nk) break;
            const __half2 *h2 = (const __half2 *)&cur[i];
            float vf[8];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float2 f = __half22float2(h2[j]);
                vf[2 * j] = f.x, vf[2 * j + 1] = f.y;
            }
#pragma unroll
            for (int gi = 0; gi < G; gi++) {
                const float pv = sc_s[gi][kl];
#pragma unroll
                for (int e = 0; e < 8; e++) acc[gi][e] = fmaf(pv, vf[e], acc[gi][e]);
            }
        }
    }
    STAMP(8);
    /* reduce the key groups: inside the warp, then across the warps */
#pragma unroll
    for (int gi = 0; gi < G; gi++)
#pragma unroll
        for (int e = 0; e < 8; e++)
#pragma unroll
            for (int o = TPR; o < 32; o <<= 1) acc[gi][e] += __shfl_xor_sync(0xffffffffu, acc[gi][e], o);
    if (lane < TPR) {
#pragma unroll
        for (int gi = 0; gi < G; gi++) {
            *(float4 *)&red_s[warp][gi][dc * 8] = make_float4(acc[gi][0], acc[gi][1], acc[gi][2], acc[gi][3]);
            *(float4 *)&red_s[warp][gi][dc * 8 + 4] = make_float4(acc[gi][4], acc[gi][5], acc[gi][6], acc[gi][7]);
        }
    }
    __syncthreads();
    for (int i = tid; i < G * D; i += DEC_THREADS) {
        const int gi = i / D, d = i % D;
        float sum = 0.0f;
#pragma unroll
        for (int w = 0; w < DEC_WARPS; w++) sum += red_s[w][gi][d];
        red_s[0][gi][d] = sum;
    }
    STAMP(9);
    cl.sync();
    STAMP(10);
    /* the cluster's sum, block by block (32 or 256 values: the quantization blocks), blocks spread
     * over the ranks and their warps */
    const int rank = (int)cl.block_rank();
    float *const part0 = &red_s[0][0][0];
#define part(r) cl.map_shared_rank(part0, (r))
    const int64_t base = g.rh0 * D;
    if (a.q8_kind == 1) {
        const int nu = g.gn * D / 256;
        for (int u = rank + cs * warp; u < nu; u += cs * DEC_WARPS) {
            const int f = u * 256 + lane * 8;
            float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            for (int r = 0; r < cs; r++) {
                const float *pr = part(r);
                const float4 x0 = *(const float4 *)(pr + f), x1 = *(const float4 *)(pr + f + 4);
                v[0] += x0.x, v[1] += x0.y, v[2] += x0.z, v[3] += x0.w, v[4] += x1.x, v[5] += x1.y, v[6] += x1.z,
                    v[7] += x1.w;
            }
            *(float4 *)(a.out + base + f) = make_float4(v[0], v[1], v[2], v[3]);
            *(float4 *)(a.out + base + f + 4) = make_float4(v[4], v[5], v[6], v[7]);
            act_quant_vals256(v, base / 256 + u, lane, a.q8, a.q8d, a.q8g);
        }
    } else {
        const int nu = (g.gn * D + 31) / 32;
        for (int u = rank + cs * warp; u < nu; u += cs * DEC_WARPS) {
            const int f = u * 32 + lane;
            float v = 0.0f;
            if (f < g.gn * D)
                for (int r = 0; r < cs; r++) v += part(r)[f];
            if (f < g.gn * D) a.out[base + f] = v;
            if (a.q8_kind == 0) act_quant_val32(v, base / 32 + u, lane, a.q8, a.q8d, a.q8s, a.q8g);
        }
    }
#undef part
    STAMP(11);
    cl.sync();
    STAMP(12);
#undef STAMP
#endif
}

template <int D, int G>
static cudaError_t launch_dec_cluster(const cuda_attn_args *a, bool pdl, cudaStream_t stream) {
    const int group = a->n_head / a->n_head_kv, n_gtiles = (group + G - 1) / G;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)((int64_t)a->n_tok * a->n_head_kv * n_gtiles), (unsigned)a->n_splits);
    cfg.blockDim = dim3(DEC_THREADS);
    cfg.stream = stream;
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 1;
    attr[0].val.clusterDim.y = (unsigned)a->n_splits;
    attr[0].val.clusterDim.z = 1;
    attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 2 : 1;
    return cudaLaunchKernelEx(&cfg, attn_dec_cluster<D, G>, *a, n_gtiles);
}

extern "C" int qr_cuda_attn_cluster_splits(int64_t span, int32_t forced) {
    if (forced > 0) return forced <= CL_MAX && span <= (int64_t)forced * CL_KMAX ? forced : 0;
    if (span > (int64_t)CL_MAX * CL_KMAX) return 0;
    const int64_t ns = (span + 63) / 64;
    return ns < 1 ? 1 : (ns > CL_MAX ? CL_MAX : (int)ns);
}

template <int D, int G>
static cudaError_t launch_dec(const cuda_attn_args *a, float *scores, int32_t sstride, unsigned int *counters,
                              bool pdl, cudaStream_t stream) {
    const int group = a->n_head / a->n_head_kv, n_gtiles = (group + G - 1) / G;
    const dim3 grid((unsigned)((int64_t)a->n_tok * a->n_head_kv * n_gtiles), (unsigned)a->n_splits);
    if (a->n_splits == 1)
        return launch_k(attn_dec_fused<D, G>, grid, dim3(DEC_THREADS), 0, stream, pdl, *a, n_gtiles, scores, sstride,
                        counters);
    const cudaError_t e = launch_k(attn_dec_scores<D, G>, grid, dim3(DEC_THREADS), 0, stream, pdl, *a, n_gtiles, scores,
                                   sstride);
    if (e != cudaSuccess) return e;
    return launch_k(attn_dec_values<D, G>, grid, dim3(DEC_THREADS), 0, stream, pdl, *a, n_gtiles,
                    (const float *)scores, sstride, counters);
}

extern "C" int64_t qr_cuda_attn_decode_tiles(const cuda_attn_args *a) {
    const int G = a->dk == 256 ? 4 : 8, group = a->n_head / a->n_head_kv;
    return (int64_t)a->n_tok * a->n_head_kv * ((group + G - 1) / G);
}

extern "C" bool qr_cuda_attn_decode_supported(const cuda_attn_args *a) {
    return a->f16 && a->dk == a->dv && (a->dk == 64 || a->dk == 128 || a->dk == 256);
}

extern "C" cudaError_t qr_cuda_attention_decode(const cuda_attn_args *a, float *scores, int32_t score_stride,
                                                unsigned int *counters, bool pdl, cudaStream_t stream) {
    if (a->n_tok <= 0) return cudaSuccess;
    if (!qr_cuda_attn_decode_supported(a)) return cudaErrorInvalidValue;
    if (a->cluster) {
        if (a->n_splits < 1 || a->n_splits > CL_MAX) return cudaErrorInvalidValue;
        if (a->dk == 64) return launch_dec_cluster<64, 8>(a, pdl, stream);
        if (a->dk == 128) return launch_dec_cluster<128, 8>(a, pdl, stream);
        return launch_dec_cluster<256, 4>(a, pdl, stream);
    }
    if (a->dk == 64) return launch_dec<64, 8>(a, scores, score_stride, counters, pdl, stream);
    if (a->dk == 128) return launch_dec<128, 8>(a, scores, score_stride, counters, pdl, stream);
    return launch_dec<256, 4>(a, scores, score_stride, counters, pdl, stream);
}
