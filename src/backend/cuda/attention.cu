/* attention.cu — KV store into the paged cache, and attention over it.
 *
 * Numerics follow the CPU oracle (ggml's non flash-attention path): q rounded to f16, score =
 * scale * softcap(q . k) (softcap first, through a double tanh), softmax probabilities normalised
 * by the row's final max and sum and rounded to f16, then multiplied with V. Because a probability
 * is rounded only after the final max and sum are known, the kernel makes two passes over the keys:
 *   pass 0 (stats): running max and exp-sum of the scores per (row, head, KV split);
 *   pass 1 (out):   merges the stats of all splits, recomputes each score, p = f16(exp(s - M) / L)
 *                   (exp as the CPU's polynomial), accumulates p * v;
 * and with n_splits > 1 a third kernel sums the splits' partial outputs.
 *
 * Work split: one CTA (4 warps) per (query row, kv head, tile of up to GMAX of the kv head's query
 * heads, KV split); the query heads of a GQA group share every K/V row the CTA loads. A warp takes
 * KB consecutive keys per step and loads all of their K (and V) elements before using any: lane l
 * holds dims l, l + 32, ... of each row; the scores are warp-shuffle sums. Decode (few rows, long
 * context) splits the keys over enough CTAs to fill the GPU.
 */
#include "backend/cuda/cuda_dev.cuh"

#define ATTN_THREADS 128
#define ATTN_WARPS (ATTN_THREADS / 32)

template <bool F16>
static __device__ __forceinline__ float kv_load(const void *base, int64_t idx) {
    if (F16) return h2f(ld_ro16b((const uint16_t *)base + idx));
    return __ldg((const float *)base + idx);
}

/* The CPU's order: softcap on the raw dot (times the float reciprocal of the cap), then the scale. */
static __device__ __forceinline__ float attn_score(float dot, const cuda_attn_args &a, float inv_cap) {
    float s = dot;
    if (a.softcap > 0.0f) s = __fmul_rn(tanh_precise(__fmul_rn(s, inv_cap)), a.softcap);
    return __fmul_rn(s, a.scale);
}

template <int DPL, int GMAX, int KB, bool F16, bool OUT>
static __global__ void __launch_bounds__(ATTN_THREADS) attn_kernel(const cuda_attn_args a, int n_gtiles) {
    constexpr int D = DPL * 32;
    extern __shared__ float smem[];
    float *q_s = smem;                    /* [GMAX][D] */
    float *stat_s = q_s + GMAX * D;       /* OUT: M, inv [2][GMAX]; stats: m, l [2][ATTN_WARPS][GMAX] */
    float *acc_s = stat_s + 2 * ATTN_WARPS * GMAX; /* OUT: [ATTN_WARPS][GMAX][D] */

    const int split = blockIdx.y, ns = a.n_splits;
    int bx = blockIdx.x;
    const int gt = bx % n_gtiles;
    bx /= n_gtiles;
    const int kvh = bx % a.n_head_kv, r = bx / a.n_head_kv;
    const int group = a.n_head / a.n_head_kv;
    const int h0 = kvh * group + gt * GMAX;
    const int gn = min(GMAX, group - gt * GMAX);
    const int pos = a.pos[r];
    const int first = a.window > 0 ? max(0, pos - a.window + 1) : 0;
    const int span = pos - first + 1;
    const int p_begin = first + (int)((int64_t)span * split / ns);
    const int p_end = first + (int)((int64_t)span * (split + 1) / ns);
    const int32_t *bt = a.block_table + (int64_t)a.seq[r] * a.max_blocks;
    const int64_t rh0 = (int64_t)r * a.n_head + h0;

    for (int i = threadIdx.x; i < GMAX * D; i += blockDim.x) {
        const int g = i / D, d = i % D;
        float v = 0.0f;
        if (g < gn && d < a.dk) v = round_f16(a.q[(rh0 + g) * a.dk + d]);
        q_s[i] = v;
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (OUT) { /* merge the stats of every split of each head: a warp per head, lanes over the splits */
        for (int g = warp; g < gn; g += ATTN_WARPS) {
            const float *st = a.stats + (rh0 + g) * ns * 2;
            float M = -INFINITY, L = 0.0f;
            for (int s2 = lane; s2 < ns; s2 += 32) M = fmaxf(M, st[2 * s2]);
            M = warp_max(M);
            for (int s2 = lane; s2 < ns; s2 += 32)
                if (st[2 * s2 + 1] > 0.0f) L += st[2 * s2 + 1] * __expf(st[2 * s2] - M);
            L = warp_sum(L);
            if (a.sinks) { /* the sink is one more score with no value (ggml: in the max and the sum) */
                const float sk = a.sinks[h0 + g], M2 = fmaxf(M, sk);
                L = (L > 0.0f ? L * __expf(M - M2) : 0.0f) + __expf(sk - M2);
                M = M2;
            }
            if (lane == 0) {
                stat_s[g] = M;
                stat_s[GMAX + g] = (float)(1.0 / (double)L);
            }
        }
    }
    __syncthreads();

    const float inv_cap = a.softcap > 0.0f ? __fdiv_rn(1.0f, a.softcap) : 0.0f;
    float m[GMAX], l[GMAX], Mg[GMAX], invg[GMAX], acc[GMAX][DPL];
#pragma unroll
    for (int g = 0; g < GMAX; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
        Mg[g] = OUT ? stat_s[g] : 0.0f;
        invg[g] = OUT ? stat_s[GMAX + g] : 0.0f;
#pragma unroll
        for (int i = 0; i < DPL; i++) acc[g][i] = 0.0f;
    }
    const int64_t kstride = (int64_t)a.n_head_kv * a.dk, vstride = (int64_t)a.n_head_kv * a.dv;
    const int64_t koff = (int64_t)kvh * a.dk, voff = (int64_t)kvh * a.dv;
    for (int p0 = p_begin + warp * KB; p0 < p_end; p0 += ATTN_WARPS * KB) {
        float kr[KB][DPL], vr[KB][DPL];
        bool valid[KB];
#pragma unroll
        for (int kb = 0; kb < KB; kb++) {
            const int p = p0 + kb;
            valid[kb] = p < p_end;
            const int64_t slot = valid[kb] ? (int64_t)bt[p / a.block_size] * a.block_size + p % a.block_size : 0;
#pragma unroll
            for (int i = 0; i < DPL; i++) {
                const int d = lane + 32 * i;
                kr[kb][i] = valid[kb] && d < a.dk ? kv_load<F16>(a.k_cache, slot * kstride + koff + d) : 0.0f;
                if (OUT) vr[kb][i] = valid[kb] && d < a.dv ? kv_load<F16>(a.v_cache, slot * vstride + voff + d) : 0.0f;
            }
        }
#pragma unroll
        for (int g = 0; g < GMAX; g++) {
            if (g >= gn) continue;
            float dot[KB];
#pragma unroll
            for (int kb = 0; kb < KB; kb++) {
                float t = 0.0f;
#pragma unroll
                for (int i = 0; i < DPL; i++) t = fmaf(q_s[g * D + lane + 32 * i], kr[kb][i], t);
                dot[kb] = t;
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1)
#pragma unroll
                for (int kb = 0; kb < KB; kb++) dot[kb] += __shfl_xor_sync(0xffffffffu, dot[kb], o);
            float s[KB];
#pragma unroll
            for (int kb = 0; kb < KB; kb++) s[kb] = valid[kb] ? attn_score(dot[kb], a, inv_cap) : -INFINITY;
            if (!OUT) {
                float bm = s[0];
#pragma unroll
                for (int kb = 1; kb < KB; kb++) bm = fmaxf(bm, s[kb]);
                const float mn = fmaxf(m[g], bm);
                float add = 0.0f;
#pragma unroll
                for (int kb = 0; kb < KB; kb++) add += valid[kb] ? __expf(s[kb] - mn) : 0.0f;
                l[g] = l[g] * __expf(m[g] - mn) + add;
                m[g] = mn;
            } else {
#pragma unroll
                for (int kb = 0; kb < KB; kb++) {
                    if (!valid[kb]) continue;
                    const float pr = round_f16(__fmul_rn(ggml_expf(s[kb] - Mg[g]), invg[g]));
#pragma unroll
                    for (int i = 0; i < DPL; i++) acc[g][i] = fmaf(pr, vr[kb][i], acc[g][i]);
                }
            }
        }
    }
    if constexpr (!OUT) {
        /* merge the warps' running stats; write this split's (max, sum) per head */
        if (lane == 0) {
#pragma unroll
            for (int g = 0; g < GMAX; g++) {
                stat_s[warp * GMAX + g] = m[g];
                stat_s[(ATTN_WARPS + warp) * GMAX + g] = l[g];
            }
        }
        __syncthreads();
        if ((int)threadIdx.x < gn) {
            const int g = threadIdx.x;
            float M = -INFINITY, L = 0.0f;
            for (int w = 0; w < ATTN_WARPS; w++) M = fmaxf(M, stat_s[w * GMAX + g]);
            for (int w = 0; w < ATTN_WARPS; w++) {
                const float lw = stat_s[(ATTN_WARPS + w) * GMAX + g];
                if (lw > 0.0f) L += lw * __expf(stat_s[w * GMAX + g] - M);
            }
            float *st = a.stats + ((rh0 + g) * ns + split) * 2;
            st[0] = M;
            st[1] = L;
        }
    } else {
#pragma unroll
        for (int g = 0; g < GMAX; g++)
#pragma unroll
            for (int i = 0; i < DPL; i++) acc_s[(warp * GMAX + g) * D + lane + 32 * i] = acc[g][i];
        __syncthreads();
        for (int i = threadIdx.x; i < gn * a.dv; i += blockDim.x) {
            const int g = i / a.dv, d = i % a.dv;
            float sum = 0.0f;
#pragma unroll
            for (int w = 0; w < ATTN_WARPS; w++) sum += acc_s[(w * GMAX + g) * D + d];
            if (ns == 1) a.out[(rh0 + g) * a.dv + d] = sum;
            else a.partial[((rh0 + g) * ns + split) * (int64_t)a.dv + d] = sum;
        }
    }
}

/* out = the sum of the splits' partial outputs: grid n_tok * n_head. */
static __global__ void attn_combine_kernel(const float *__restrict__ partial, int n_splits, int dv,
                                           float *__restrict__ out) {
    const int64_t rh = blockIdx.x;
    const float *pp = partial + rh * n_splits * (int64_t)dv;
    for (int d = threadIdx.x; d < dv; d += blockDim.x) {
        float s = 0.0f;
#pragma unroll 8
        for (int k = 0; k < n_splits; k++) s += pp[k * (int64_t)dv + d];
        out[rh * dv + d] = s;
    }
}

template <int DPL, int GMAX>
static cudaError_t launch_attn(const cuda_attn_args *a, cudaStream_t stream) {
    /* keys in flight per warp step: 16 / DPL (16 K and 16 V loads per lane). 32 / DPL measured
     * slower (decode ctx 4096: 106 vs 75 us; more registers, fewer CTAs per SM). */
    constexpr int KB = 16 / DPL > 0 ? 16 / DPL : 1;
    const int group = a->n_head / a->n_head_kv;
    const int n_gtiles = (group + GMAX - 1) / GMAX;
    const dim3 grid((unsigned)((int64_t)a->n_tok * a->n_head_kv * n_gtiles), (unsigned)a->n_splits);
    const size_t smem0 = (size_t)(GMAX * DPL * 32 + 2 * ATTN_WARPS * GMAX) * sizeof(float);
    const size_t smem1 = smem0 + (size_t)ATTN_WARPS * GMAX * DPL * 32 * sizeof(float);
    if (a->f16) {
        attn_kernel<DPL, GMAX, KB, true, false><<<grid, ATTN_THREADS, smem0, stream>>>(*a, n_gtiles);
        attn_kernel<DPL, GMAX, KB, true, true><<<grid, ATTN_THREADS, smem1, stream>>>(*a, n_gtiles);
    } else {
        attn_kernel<DPL, GMAX, KB, false, false><<<grid, ATTN_THREADS, smem0, stream>>>(*a, n_gtiles);
        attn_kernel<DPL, GMAX, KB, false, true><<<grid, ATTN_THREADS, smem1, stream>>>(*a, n_gtiles);
    }
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess || a->n_splits == 1) return e;
    attn_combine_kernel<<<(unsigned)((int64_t)a->n_tok * a->n_head), 128, 0, stream>>>(a->partial, a->n_splits, a->dv,
                                                                                        a->out);
    QR_CUDA_CHECK_LAUNCH();
}

extern "C" cudaError_t qr_cuda_attention(const cuda_attn_args *a, cudaStream_t stream) {
    if (a->n_tok <= 0) return cudaSuccess;
    const int dmax = a->dk > a->dv ? a->dk : a->dv;
    if (dmax <= 64) return launch_attn<2, 8>(a, stream);
    if (dmax <= 128) return launch_attn<4, 8>(a, stream);
    if (dmax <= 256) return launch_attn<8, 4>(a, stream);
    if (dmax <= 512) return launch_attn<16, 2>(a, stream);
    if (dmax <= QR_CUDA_MAX_HEAD_DIM) return launch_attn<18, 2>(a, stream); /* MLA: 576 / 512 (deepseek2) */
    return cudaErrorInvalidValue;
}

/* ---- KV store: one CTA per token row ---- */

template <bool F16>
static __global__ void kv_store_kernel(const float *__restrict__ k, const float *__restrict__ v, int32_t k_dim,
                                       int32_t v_dim, const int32_t *__restrict__ slots, void *k_cache,
                                       void *v_cache) {
    const int r = blockIdx.x;
    const int64_t s = slots[r];
    for (int i = threadIdx.x; i < k_dim; i += blockDim.x) {
        const float x = k[(int64_t)r * k_dim + i];
        if (F16) ((__half *)k_cache)[s * k_dim + i] = __float2half_rn(x);
        else ((float *)k_cache)[s * k_dim + i] = x;
    }
    for (int i = threadIdx.x; i < v_dim; i += blockDim.x) {
        const float x = v[(int64_t)r * v_dim + i];
        if (F16) ((__half *)v_cache)[s * v_dim + i] = __float2half_rn(x);
        else ((float *)v_cache)[s * v_dim + i] = x;
    }
}

extern "C" cudaError_t qr_cuda_kv_store(const float *k, const float *v, int32_t n_tok, int32_t k_dim, int32_t v_dim,
                                        const int32_t *slots, void *k_cache, void *v_cache, bool f16,
                                        cudaStream_t stream) {
    if (n_tok <= 0) return cudaSuccess;
    if (f16) kv_store_kernel<true><<<(unsigned)n_tok, 256, 0, stream>>>(k, v, k_dim, v_dim, slots, k_cache, v_cache);
    else kv_store_kernel<false><<<(unsigned)n_tok, 256, 0, stream>>>(k, v, k_dim, v_dim, slots, k_cache, v_cache);
    QR_CUDA_CHECK_LAUNCH();
}
