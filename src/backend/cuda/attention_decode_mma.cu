/* attention_decode_mma.cu — batched decode attention on f16 tensor cores (issue 29): one query row a sequence,
 * many sequences a step, an f16 cache, head size 64 or 128, one key split.
 *
 * The flash-decoding kernel (attention_decode.cu) gives a lane a key and walks 512 FMA and 128 shared loads of q a
 * key (~84 warp instructions a key and kv head, ncu: issue- and latency-bound at ~2 TB/s). Here the dot products
 * and p * V are mma.sync m16n8k16 and every K / V byte goes from global memory straight into registers:
 *
 * CTA = (row, kv head, tile of <= 8 query heads), 4 warps; warp w takes the 16-key chunks w, w + 4, ... of the
 * row's keys. Lane (g = lane / 4, t = lane % 4) loads key g of each 8-key half of a chunk: its uint4 pieces
 * i * 4 + t (i < D / 32), 64 contiguous bytes a key per lane quad, K and V of the chunk issued together.
 *  - S = Q K^T: A = q (rows = the tile's heads, rows 8-15 zero), B = K^T. The dot product's dims are taken in a
 *    permuted order that matches the lane's own pieces: k-step kk = (i = kk / 2, half h = kk % 2) has the lane's
 *    dims (i * 4 + t) * 8 + 4h + {0, 1} (b0) and + {2, 3} (b1); q's fragment (shared memory, set up once) uses
 *    the same order. C: lane (g, t) holds head g's scores of keys 2t, 2t + 1 of each half.
 *  - online softmax per head (quad shuffles), p rounded to f16 (the flash kernel's numerics);
 *  - O^T += V^T P^T: A = V^T (16 dims x 16 keys) from the loaded V pieces through movmatrix.trans (an 8 x 8
 *    transpose in registers), B = P^T straight from S's accumulators (the standard flash register reuse with
 *    heads as the n dimension: lane (g, t) holds head g's p of keys 2t, 2t + 1), C: lane (g, t) holds dims of its
 *    m-tile x heads 2t, 2t + 1.
 * The 4 warps' (max, sum, O) merge in shared memory in warp order; exp(sink) joins the sum (gpt-oss); one split
 * only (the backend picks this kernel when a step has enough CTAs); the output can be quantized for the output
 * projection as the fused flash-decoding kernel does.
 */
#include "backend/cuda/act_quant.cuh"

#include "backend/cuda/attention_dev.cuh"
#include "backend/cuda/mma_dev.cuh"

#include <stdint.h>

#define DM_WARPS 4

static __device__ __forceinline__ uint32_t dm_word(const uint4 &v, int j) {
    return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w;
}

template <int D>
static __global__ void __launch_bounds__(DM_WARPS * 32, 4) attn_dec_mma(const cuda_attn_args a, int n_gtiles) {
    constexpr int G = 8, NQ = D / 32 /* uint4 pieces a lane a key */, KS = D / 16 /* k-steps of q . k */;
    constexpr int MT = D / 16; /* m-tiles (16 dims) of O^T */
    __shared__ uint2 qa_s[KS][32];             /* lane's (a0, a2) of q for k-step kk */
    __shared__ float ml_s[2][DM_WARPS][G];     /* each warp's max and sum a head */
    __shared__ __align__(16) float o_s[DM_WARPS][G][D];
    pdl_enter();
    const dec_geom gm = dec_geometry<G>(a, n_gtiles);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    if (warp == 0) { /* q in the permuted k order, f16 */
        const bool hv = g < gm.gn;
        const float *qr = a.q + (gm.rh0 + (hv ? g : 0)) * a.dk;
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
            const int d0 = ((kk >> 1) * 4 + t) * 8 + 4 * (kk & 1);
            qa_s[kk][lane] = hv ? make_uint2(qr_half2_bits(qr[d0], qr[d0 + 1]), qr_half2_bits(qr[d0 + 2], qr[d0 + 3])) : make_uint2(0u, 0u);
        }
    }
    __syncthreads();
    const float inv_cap = a.softcap > 0.0f ? __fdiv_rn(1.0f, a.softcap) : 0.0f;
    const int64_t stride = (int64_t)a.n_head_kv * D; /* halves a slot */
    const __half *kc = (const __half *)a.k_cache + (int64_t)gm.kvh * D, *vc = (const __half *)a.v_cache + (int64_t)gm.kvh * D;
    float m = -INFINITY, l = 0.0f; /* head g's running max and (this lane's part of the) sum */
    float o[MT][4];
#pragma unroll
    for (int i = 0; i < MT; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    for (int c0 = gm.p_begin + warp * 16; c0 < gm.p_end; c0 += DM_WARPS * 16) {
        uint4 kr[2][NQ], vr[2][NQ];
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const int p = c0 + hf * 8 + g;
            const bool valid = p < gm.p_end;
            const int64_t off = (valid ? dec_slot(gm, a, p) : 0) * stride;
            const uint4 *kp = (const uint4 *)(kc + off), *vp = (const uint4 *)(vc + off);
#pragma unroll
            for (int i = 0; i < NQ; i++) { /* coherent loads: the new key was just stored (PDL) */
                kr[hf][i] = valid ? kp[i * 4 + t] : make_uint4(0u, 0u, 0u, 0u);
                vr[hf][i] = valid ? vp[i * 4 + t] : make_uint4(0u, 0u, 0u, 0u);
            }
        }
        /* S = q K^T: s[hf][0..1] = head g, keys c0 + hf * 8 + 2t + {0, 1} */
        float s[2][4];
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            s[hf][0] = s[hf][1] = s[hf][2] = s[hf][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < KS; kk++) {
                const uint2 qa = qa_s[kk][lane];
                const uint32_t af[4] = {qa.x, 0u, qa.y, 0u};
                qr_mma16816(s[hf], af, dm_word(kr[hf][kk >> 1], 2 * (kk & 1)), dm_word(kr[hf][kk >> 1], 2 * (kk & 1) + 1));
            }
        }
        float mx = -INFINITY;
#pragma unroll
        for (int hf = 0; hf < 2; hf++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int p = c0 + hf * 8 + 2 * t + e;
                s[hf][e] = p < gm.p_end ? dec_score(s[hf][e], a, inv_cap) : -INFINITY;
                mx = fmaxf(mx, s[hf][e]);
            }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float mn = fmaxf(m, mx); /* finite: the chunk's first key is valid */
        const float alpha = __expf(m - mn);
        m = mn;
        float ps = 0.0f;
        uint32_t pb[2];
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const float p0 = __expf(s[hf][0] - mn), p1 = __expf(s[hf][1] - mn);
            ps += p0 + p1;
            pb[hf] = qr_half2_bits(p0, p1);
        }
        l = l * alpha + ps;
        /* O^T's columns are heads 2t, 2t + 1: their rescale factors from lanes 8t and 8t + 4 */
        const float al0 = __shfl_sync(0xffffffffu, alpha, 8 * t), al1 = __shfl_sync(0xffffffffu, alpha, 8 * t + 4);
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            o[mt][0] *= al0, o[mt][1] *= al1, o[mt][2] *= al0, o[mt][3] *= al1;
            const int i = mt >> 1, j = 2 * (mt & 1);
            const uint32_t vf[4] = {qr_movmatrix_t(dm_word(vr[0][i], j)), qr_movmatrix_t(dm_word(vr[0][i], j + 1)),
                                    qr_movmatrix_t(dm_word(vr[1][i], j)), qr_movmatrix_t(dm_word(vr[1][i], j + 1))};
            qr_mma16816(o[mt], vf, pb[0], pb[1]);
        }
    }
    /* merge the warps: head g's max and sum (the quad's partial sums first) */
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    if (t == 0) ml_s[0][warp][g] = m, ml_s[1][warp][g] = l;
    __syncthreads();
    float sc[2]; /* this warp's factor for heads 2t, 2t + 1 */
#pragma unroll
    for (int e = 0; e < 2; e++) {
        const int h = 2 * t + e;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < DM_WARPS; w++) M = fmaxf(M, ml_s[0][w][h]);
        sc[e] = ml_s[0][warp][h] == -INFINITY ? 0.0f : __expf(ml_s[0][warp][h] - M);
    }
    /* O^T (m-tile mt, lane (g, t)): c0 / c1 = dim of row g, heads 2t / 2t + 1; c2 / c3 = row g + 8. Row g of the
     * m-tile is transposed block (i, j) row g: dim (i * 4 + g / 2) * 8 + 2j + g % 2 */
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        const int i = mt >> 1, j = 2 * (mt & 1);
        const int d0 = (i * 4 + (g >> 1)) * 8 + 2 * j + (g & 1), d1 = d0 + 2;
        o_s[warp][2 * t][d0] = o[mt][0] * sc[0], o_s[warp][2 * t + 1][d0] = o[mt][1] * sc[1];
        o_s[warp][2 * t][d1] = o[mt][2] * sc[0], o_s[warp][2 * t + 1][d1] = o[mt][3] * sc[1];
    }
    __syncthreads();
    for (int x = threadIdx.x; x < gm.gn * D; x += DM_WARPS * 32) {
        const int h = x / D, d = x % D;
        float M = -INFINITY, L = 0.0f, sum = 0.0f;
#pragma unroll
        for (int w = 0; w < DM_WARPS; w++) M = fmaxf(M, ml_s[0][w][h]);
#pragma unroll
        for (int w = 0; w < DM_WARPS; w++) {
            if (ml_s[0][w][h] != -INFINITY) L += ml_s[1][w][h] * __expf(ml_s[0][w][h] - M);
            sum += o_s[w][h][d];
        }
        if (a.sinks) { /* one more score with no value (as attention_decode.cu) */
            const float sk = a.sinks[gm.h0 + h], M2 = fmaxf(M, sk), f = M == -INFINITY ? 0.0f : __expf(M - M2);
            L = L * f + __expf(sk - M2), sum *= f;
        }
        a.out[(gm.rh0 + h) * D + d] = L > 0.0f ? sum / L : 0.0f;
    }
    if (a.q8_kind < 0) return;
    __syncthreads(); /* the tile's output quantized for the output projection, as attn_dec_fused */
    const int bs = a.q8_kind == 0 ? 32 : 256;
    const int64_t b0 = gm.rh0 * D / bs, nb = (int64_t)gm.gn * D / bs;
    for (int64_t jb = warp; jb < nb; jb += DM_WARPS) {
        if (a.q8_kind == 0) act_quant_block32(a.out, b0 + jb, lane, a.q8, a.q8d, a.q8s, a.q8g);
        else act_quant_block256(a.out, b0 + jb, lane, a.q8, a.q8d, a.q8g);
    }
}

extern "C" bool qr_cuda_attn_decode_mma_supported(const cuda_attn_args *a) {
    return a->f16 && !a->kvq && a->dk == a->dv && (a->dk == 64 || a->dk == 128) && a->n_splits == 1 && !a->cluster;
}

extern "C" cudaError_t qr_cuda_attention_decode_mma(const cuda_attn_args *a, bool pdl, cudaStream_t stream) {
    if (a->n_tok <= 0) return cudaSuccess;
    if (!qr_cuda_attn_decode_mma_supported(a)) return cudaErrorInvalidValue;
    const int group = a->n_head / a->n_head_kv, n_gtiles = (group + 7) / 8;
    const dim3 grid((unsigned)((int64_t)a->n_tok * a->n_head_kv * n_gtiles));
    if (a->dk == 64) return launch_k(attn_dec_mma<64>, grid, dim3(DM_WARPS * 32), 0, stream, pdl, *a, n_gtiles);
    return launch_k(attn_dec_mma<128>, grid, dim3(DM_WARPS * 32), 0, stream, pdl, *a, n_gtiles);
}
