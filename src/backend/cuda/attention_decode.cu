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

#include "backend/cuda/attention_dev.cuh"

#include <stdint.h>

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
                float kf[8];
                half8_to_f32(kv[c], kf);
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

/* Pass 2: out (n_splits == 1) or this split's partial output = sum over its keys of p * v. */
template <int D, int G>
static __device__ __forceinline__ void dec_values(const cuda_attn_args &a, int n_gtiles, const float *scores,
                                                  int32_t sstride, unsigned int *counters) {
    constexpr int TPR = D / 8;    /* lanes per V row: 16 bytes (8 dims) each */
    constexpr int RPI = 32 / TPR; /* V rows per warp load: 4, 2, 1 for D = 64, 128, 256 */
    constexpr int VB = 8;         /* warp loads in flight */
    __shared__ float mi_s[2][G];
    __shared__ float p_s[DEC_WARPS][G][32];
    __shared__ int32_t slot_s[DEC_WARPS][32];
    __shared__ __align__(16) float acc_s[DEC_WARPS][G][D]; /* float4 stores (pv_warp_reduce_store) */
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
    const int sub = lane / TPR, dl = lane % TPR; /* row of the warp load, 8-dim chunk */
    float acc[G][8];
#pragma unroll
    for (int gi = 0; gi < G; gi++)
#pragma unroll
        for (int e = 0; e < 8; e++) acc[gi][e] = 0.0f;
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
        for (int j0 = 0; j0 < nk; j0 += VB * RPI) {
            uint4 raw[VB]; /* coherent loads (PDL: see quant_dev.cuh) */
#pragma unroll
            for (int jj = 0; jj < VB; jj++) {
                const int j = j0 + jj * RPI + sub;
                raw[jj] = j < nk ? *((const uint4 *)(vc + (int64_t)slot_s[warp][j] * vstride) + dl) : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int jj = 0; jj < VB; jj++) {
                const int j = j0 + jj * RPI + sub;
                if (j >= nk) break;
                float vf[8];
                half8_to_f32(raw[jj], vf);
#pragma unroll
                for (int gi = 0; gi < G; gi++) {
                    const float pv = p_s[warp][gi][j];
#pragma unroll
                    for (int e = 0; e < 8; e++) acc[gi][e] = fmaf(pv, vf[e], acc[gi][e]);
                }
            }
        }
        __syncwarp();
    }
    /* the warp's row groups, then the warps (below) */
    pv_warp_reduce_store<G, D, TPR>(acc, acc_s[warp], lane, dl);
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
    /* a thread per 4 dims of a head (16-byte loads), CB splits' loads in flight before they are added
     * in split order: the same sums as one load per step, without a round trip per split (the tail
     * that kept this CTA busy: 132 splits one after another at tinyllama's 16k-key decode) */
    constexpr int CB = 8;
    for (int i = threadIdx.x; i < g.gn * D / 4; i += DEC_THREADS) {
        const int gi = i / (D / 4), d = (i % (D / 4)) * 4;
        const float4 *pp = (const float4 *)(a.partial + (g.rh0 + gi) * ns * (int64_t)D + d);
        float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (int k0 = 0; k0 < ns; k0 += CB) {
            float4 v[CB];
#pragma unroll
            for (int k = 0; k < CB; k++) v[k] = k0 + k < ns ? __ldcg(pp + (int64_t)(k0 + k) * (D / 4)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
            for (int k = 0; k < CB; k++) {
                if (k0 + k >= ns) break;
                sum.x += v[k].x, sum.y += v[k].y, sum.z += v[k].z, sum.w += v[k].w;
            }
        }
        *(float4 *)(a.out + (g.rh0 + gi) * D + d) = sum;
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

/* Query heads per CTA: 8, or 4 for head size 256 and for GQA groups of <= 4 (no idle half). */
static int dec_heads(const cuda_attn_args *a) { return a->dk == 256 || a->n_head / a->n_head_kv <= 4 ? 4 : 8; }

extern "C" int64_t qr_cuda_attn_decode_tiles(const cuda_attn_args *a) {
    const int G = dec_heads(a), group = a->n_head / a->n_head_kv;
    return (int64_t)a->n_tok * a->n_head_kv * ((group + G - 1) / G);
}

extern "C" bool qr_cuda_attn_decode_supported(const cuda_attn_args *a) {
    return a->f16 && a->dk == a->dv && (a->dk == 64 || a->dk == 128 || a->dk == 256);
}

extern "C" cudaError_t qr_cuda_attention_decode(const cuda_attn_args *a, float *scores, int32_t score_stride,
                                                unsigned int *counters, bool pdl, cudaStream_t stream) {
    if (a->n_tok <= 0) return cudaSuccess;
    if (!qr_cuda_attn_decode_supported(a)) return cudaErrorInvalidValue;
    if (a->cluster) return qr_cuda_attention_cluster(a, pdl, stream);
    const bool g4 = dec_heads(a) == 4;
    if (a->dk == 64)
        return g4 ? launch_dec<64, 4>(a, scores, score_stride, counters, pdl, stream)
                  : launch_dec<64, 8>(a, scores, score_stride, counters, pdl, stream);
    if (a->dk == 128)
        return g4 ? launch_dec<128, 4>(a, scores, score_stride, counters, pdl, stream)
                  : launch_dec<128, 8>(a, scores, score_stride, counters, pdl, stream);
    return launch_dec<256, 4>(a, scores, score_stride, counters, pdl, stream);
}
