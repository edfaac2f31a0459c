/* attention.cu — KV store into the paged cache, and attention over it (flash-attention style: one
 * pass over the keys with an online softmax, no score matrix in memory).
 *
 * Work split: one CTA (4 warps) per (query row, kv head, tile of up to GMAX of the kv head's query
 * heads, KV split). The query heads of a GQA group share every K/V row the CTA loads. Each warp
 * walks the keys p = begin + warp, begin + warp + 4, ... of the CTA's range: lane l holds dims
 * l, l + 32, ... of the key and value rows, the score is a warp-shuffle sum, and each warp keeps its
 * own running max, denominator and output accumulator per head. The 4 warps are merged through
 * shared memory at the end. With n_splits > 1 (decode: few rows, long context) every split writes
 * (max, denominator, unnormalised output) to a scratch buffer and a second kernel merges the splits.
 *
 * Numerics as the CPU oracle: q rounded to f16, scores = scale * (q . k) in f32, optional softcap
 * through a double tanh; the exp is the fast one (relative error ~1e-7).
 */
#include "backend/cuda/cuda_dev.cuh"

#define ATTN_THREADS 128
#define ATTN_WARPS (ATTN_THREADS / 32)

template <bool F16>
static __device__ __forceinline__ float kv_load(const void *base, int64_t idx) {
    if (F16) return h2f(ld_ro16b((const uint16_t *)base + idx));
    return __ldg((const float *)base + idx);
}

template <int DPL, int GMAX, bool F16>
static __global__ void __launch_bounds__(ATTN_THREADS) attn_kernel(const cuda_attn_args a, int n_gtiles) {
    constexpr int D = DPL * 32;
    extern __shared__ float smem[];
    float *q_s = smem;                       /* [GMAX][D] */
    float *m_s = q_s + GMAX * D;             /* [ATTN_WARPS][GMAX] */
    float *l_s = m_s + ATTN_WARPS * GMAX;    /* [ATTN_WARPS][GMAX] */
    float *acc_s = l_s + ATTN_WARPS * GMAX;  /* [ATTN_WARPS][GMAX][D] */

    const int split = blockIdx.y;
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
    const int p_begin = first + (int)((int64_t)span * split / a.n_splits);
    const int p_end = first + (int)((int64_t)span * (split + 1) / a.n_splits);
    const int32_t *bt = a.block_table + (int64_t)a.seq[r] * a.max_blocks;

    for (int i = threadIdx.x; i < GMAX * D; i += blockDim.x) {
        const int g = i / D, d = i % D;
        float v = 0.0f;
        if (g < gn && d < a.dk) v = round_f16(a.q[((int64_t)r * a.n_head + h0 + g) * a.dk + d]);
        q_s[i] = v;
    }
    __syncthreads();

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float m[GMAX], l[GMAX], acc[GMAX][DPL];
#pragma unroll
    for (int g = 0; g < GMAX; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
#pragma unroll
        for (int i = 0; i < DPL; i++) acc[g][i] = 0.0f;
    }
    const int64_t kstride = (int64_t)a.n_head_kv * a.dk, vstride = (int64_t)a.n_head_kv * a.dv;
    const int64_t koff = (int64_t)kvh * a.dk, voff = (int64_t)kvh * a.dv;
    for (int p = p_begin + warp; p < p_end; p += ATTN_WARPS) {
        const int64_t slot = (int64_t)bt[p / a.block_size] * a.block_size + p % a.block_size;
        float kr[DPL], vr[DPL];
#pragma unroll
        for (int i = 0; i < DPL; i++) {
            const int d = lane + 32 * i;
            kr[i] = d < a.dk ? kv_load<F16>(a.k_cache, slot * kstride + koff + d) : 0.0f;
            vr[i] = d < a.dv ? kv_load<F16>(a.v_cache, slot * vstride + voff + d) : 0.0f;
        }
#pragma unroll
        for (int g = 0; g < GMAX; g++) {
            if (g < gn) {
                float dot = 0.0f;
#pragma unroll
                for (int i = 0; i < DPL; i++) dot = fmaf(q_s[g * D + lane + 32 * i], kr[i], dot);
                dot = warp_sum(dot);
                float s = dot * a.scale;
                if (a.softcap > 0.0f) s = a.softcap * tanh_precise(__fdiv_rn(s, a.softcap));
                const float mn = fmaxf(m[g], s);
                const float corr = __expf(m[g] - mn), pe = __expf(s - mn);
                l[g] = l[g] * corr + pe;
#pragma unroll
                for (int i = 0; i < DPL; i++) acc[g][i] = acc[g][i] * corr + pe * vr[i];
                m[g] = mn;
            }
        }
    }
    /* merge the warps */
    if (lane == 0) {
#pragma unroll
        for (int g = 0; g < GMAX; g++) {
            m_s[warp * GMAX + g] = m[g];
            l_s[warp * GMAX + g] = l[g];
        }
    }
#pragma unroll
    for (int g = 0; g < GMAX; g++)
#pragma unroll
        for (int i = 0; i < DPL; i++) acc_s[(warp * GMAX + g) * D + lane + 32 * i] = acc[g][i];
    __syncthreads();
    for (int i = threadIdx.x; i < gn * a.dv; i += blockDim.x) {
        const int g = i / a.dv, d = i % a.dv;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < ATTN_WARPS; w++) M = fmaxf(M, m_s[w * GMAX + g]);
        float L = 0.0f, A = 0.0f;
#pragma unroll
        for (int w = 0; w < ATTN_WARPS; w++) {
            const float lw = l_s[w * GMAX + g];
            if (lw > 0.0f) {
                const float f = __expf(m_s[w * GMAX + g] - M);
                L += lw * f;
                A += acc_s[(w * GMAX + g) * D + d] * f;
            }
        }
        const int64_t rh = (int64_t)r * a.n_head + h0 + g;
        if (a.n_splits == 1) {
            a.out[rh * a.dv + d] = __fdiv_rn(A, L);
        } else {
            float *pp = a.partial + (rh * a.n_splits + split) * (int64_t)(a.dv + 2);
            if (d == 0) {
                pp[0] = M;
                pp[1] = L;
            }
            pp[2 + d] = A;
        }
    }
}

/* Merges the n_splits partial results of one (row, head): grid n_tok * n_head. */
static __global__ void attn_combine_kernel(const float *__restrict__ partial, int n_splits, int dv,
                                           float *__restrict__ out) {
    const int64_t rh = blockIdx.x;
    const float *pp = partial + rh * n_splits * (int64_t)(dv + 2);
    float M = -INFINITY;
    for (int s = 0; s < n_splits; s++) M = fmaxf(M, pp[s * (int64_t)(dv + 2)]);
    for (int d = threadIdx.x; d < dv; d += blockDim.x) {
        float L = 0.0f, A = 0.0f;
        for (int s = 0; s < n_splits; s++) {
            const float *ps = pp + s * (int64_t)(dv + 2);
            if (ps[1] > 0.0f) {
                const float f = __expf(ps[0] - M);
                L += ps[1] * f;
                A += ps[2 + d] * f;
            }
        }
        out[rh * dv + d] = __fdiv_rn(A, L);
    }
}

template <int DPL, int GMAX>
static cudaError_t launch_attn(const cuda_attn_args *a, cudaStream_t stream) {
    const int group = a->n_head / a->n_head_kv;
    const int n_gtiles = (group + GMAX - 1) / GMAX;
    const dim3 grid((unsigned)((int64_t)a->n_tok * a->n_head_kv * n_gtiles), (unsigned)a->n_splits);
    const size_t smem = (size_t)(GMAX * DPL * 32 * (1 + ATTN_WARPS) + 2 * ATTN_WARPS * GMAX) * sizeof(float);
    if (a->f16) attn_kernel<DPL, GMAX, true><<<grid, ATTN_THREADS, smem, stream>>>(*a, n_gtiles);
    else attn_kernel<DPL, GMAX, false><<<grid, ATTN_THREADS, smem, stream>>>(*a, n_gtiles);
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
    if (dmax <= QR_CUDA_MAX_HEAD_DIM) return launch_attn<16, 2>(a, stream);
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
