/* attention_dev.cuh — what the flash-decoding kernels share (attention_decode.cu: the global-memory
 * split kernels; attention_cluster.cu: the cluster kernel): a CTA's geometry, cache slots, the score. */
#ifndef QR_CUDA_ATTENTION_DEV_CUH
#define QR_CUDA_ATTENTION_DEV_CUH

#include "backend/cuda/act_quant.cuh"

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

/* 8 halves (one 16-byte load of a K or V row) -> floats. */
static __device__ __forceinline__ void half8_to_f32(const uint4 &raw, float *f) {
    const __half2 *h2 = (const __half2 *)&raw;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const float2 v = __half22float2(h2[j]);
        f[2 * j] = v.x, f[2 * j + 1] = v.y;
    }
}

/* p * V partial sums acc[G][8] (8 dims of a row per lane, TPR lanes per row, 32 / TPR row groups per
 * warp): sums the warp's row groups with shuffles, then the first group writes the warp's [G][D] sums
 * (dims chunk * 8 ..) to dst. */
template <int G, int D, int TPR>
static __device__ __forceinline__ void pv_warp_reduce_store(float (&acc)[G][8], float (*dst)[D], int lane, int chunk) {
#pragma unroll
    for (int gi = 0; gi < G; gi++)
#pragma unroll
        for (int e = 0; e < 8; e++)
#pragma unroll
            for (int o = TPR; o < 32; o <<= 1) acc[gi][e] += __shfl_xor_sync(0xffffffffu, acc[gi][e], o);
    if (lane >= TPR) return;
#pragma unroll
    for (int gi = 0; gi < G; gi++) {
        *(float4 *)&dst[gi][chunk * 8] = make_float4(acc[gi][0], acc[gi][1], acc[gi][2], acc[gi][3]);
        *(float4 *)&dst[gi][chunk * 8 + 4] = make_float4(acc[gi][4], acc[gi][5], acc[gi][6], acc[gi][7]);
    }
}

#endif /* QR_CUDA_ATTENTION_DEV_CUH */
