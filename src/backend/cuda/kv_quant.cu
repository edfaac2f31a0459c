/* kv_quant.cu — the quantized KV cache on the GPU (Q8_0, Q4_0; layout in kv_quant.cuh): the store (rotate,
 * quantize), the Walsh-Hadamard transform of q and of the attention output, and attention over the cache for the
 * passes the tensor-core flash kernel does not take (decode, graphs).
 *
 * Numerics. The store follows the CPU backend value for value (cpu_kv_store: llama.cpp's rotation of a quantized
 * cache, chunks scaled by 1 / sqrt(chunk) then butterflies; Q8_0 codes by ggml's x86 rule, Q4_0 by the reference
 * rule), so the cached codes equal the CPU's. The decode kernel follows the CPU's flash-attention path (llama.cpp's):
 * q (rotated) quantized to Q8_0 by the activation rule, each score the blocks' integer dots times d_k * d_q, then the
 * GPU's own order: an online softmax in f32 a warp's 32 keys at a time, V dequantized and summed in f32. The flash
 * prefill kernel takes f16 q against the dequantized K (attention_flash.cu). The exact mode has no quantized cache:
 * the backend refuses it.
 *
 * Decode kernel: a CTA (4 warps) per (row, kv head, tile of <= G query heads, key split), as attention_decode.cu.
 * A warp takes 32 keys a step: lane l dots key l's K row (8 values a load) with the group's q (shared memory),
 * the warp's running max / sum absorb the 32 scores, and the warp sums p * V over them (D / 8 lanes a V row, 8 values
 * each). The warps' (max, sum, output) merge through shared memory; with several splits the last CTA of a tile (a
 * counter per tile, reset for the next launch) merges the splits' partial outputs in split order.
 */
#include "backend/cuda/act_quant.cuh"
#include "backend/cuda/attention_dev.cuh"
#include "backend/cuda/kv_quant.cuh"
#include "backend/cuda/rope_dev.cuh"

/* ---- store ---- */

/* Warp per chunk of C = 32 E values of a row: rotated when rot, then quantized into the row's slot. */
template <int E>
static __global__ void __launch_bounds__(128)
    kvq_store_kernel(const float *__restrict__ x, int32_t n_tok, int32_t dim, bool rot, const int32_t *__restrict__ slots,
                     int32_t bs, uint8_t *__restrict__ cache, int32_t kvq) {
    constexpr int C = 32 * E;
    const int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31, n_ch = dim / C;
    if (w >= (int64_t)n_tok * n_ch) return;
    const int r = (int)(w / n_ch), c0 = (int)(w % n_ch) * C;
    float v[E];
#pragma unroll
    for (int e = 0; e < E; e++) v[e] = x[(int64_t)r * dim + c0 + lane * E + e];
    if (rot) kvq_fwht_warp<E>(v, lane);
    kvq_put_warp<E>(v, lane, c0, slots[r], dim, bs, cache, kvq);
}

extern "C" cudaError_t qr_cuda_kvq_store(const float *x, int32_t n_tok, int32_t dim, int32_t rot, const int32_t *slots,
                                         int32_t block_size, void *cache, int32_t kvq, cudaStream_t stream) {
    if (n_tok <= 0) return cudaSuccess;
    const int C = rot ? rot : 32;
    if ((kvq != CUDA_KVQ_Q8 && kvq != CUDA_KVQ_Q4) || dim % C || (C != 32 && C != 64 && C != 128 && C != 256))
        return cudaErrorInvalidValue;
    const int64_t warps = (int64_t)n_tok * (dim / C);
    const unsigned grid = (unsigned)((warps * 32 + 127) / 128);
    uint8_t *c = (uint8_t *)cache;
    KVQ_BY_CHUNK(C, kvq_store_kernel<E><<<grid, 128, 0, stream>>>(x, n_tok, dim, rot != 0, slots, block_size, c, kvq))
    QR_CUDA_CHECK_LAUNCH();
}

/* Decode passes: rope(q), rope(k) in place, then k and v rotated and quantized into their slots, one launch. CTA (row,
 * unit): units [0, n_head) are q heads, [n_head, n_head + n_head_kv) k heads, the rest 4 chunks of v each (a warp a
 * chunk). A head's thread owns a rotated pair (rope_kv_store_heads_kernel's arithmetic); a k head's warps then take its
 * chunks from the roped row. */
template <int EK, int EV>
static __global__ void __launch_bounds__(128) rope_kvq_store_kernel(
    float *q, float *k, const float *__restrict__ v, int32_t n_head, int32_t n_head_kv, int32_t head_dim, int32_t v_dim,
    const int32_t *__restrict__ pos, const int32_t *__restrict__ slots, const cuda_rope_consts c,
    const float *__restrict__ ff, uint8_t *k_cache, uint8_t *v_cache, int32_t bs, int32_t kvq, bool rot_k, bool rot_v) {
    const int r = blockIdx.x, u = blockIdx.y, half = c.n_rot / 2, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int k_dim = n_head_kv * head_dim;
    const int64_t s = slots[r];
    if (u >= n_head + n_head_kv) { /* v chunks */
        pdl_enter();
        constexpr int C = 32 * EV;
        const int c0 = ((u - n_head - n_head_kv) * 4 + warp) * C;
        if (c0 >= v_dim) return;
        float x[EV];
#pragma unroll
        for (int e = 0; e < EV; e++) x[e] = v[(int64_t)r * v_dim + c0 + lane * EV + e];
        if (rot_v) kvq_fwht_warp<EV>(x, lane);
        kvq_put_warp<EV>(x, lane, c0, s, v_dim, bs, v_cache, kvq);
        return;
    }
    const bool is_k = u >= n_head;
    const int h = is_k ? u - n_head : u;
    float2 cs[2];
    rope_head_cs(cs, pos[r], half, c, ff);
    pdl_enter();
    float *xr = (is_k ? k + (int64_t)r * k_dim : q + (int64_t)r * n_head * head_dim) + (int64_t)h * head_dim;
    rope_head_rotate(xr, cs, half, c, [](int, int, float, float) {});
    if (!is_k) return;
    __syncthreads(); /* the roped head (and its untouched tail) in global memory, written by this CTA */
    constexpr int C = 32 * EK;
    for (int c0 = warp * C; c0 < head_dim; c0 += 4 * C) {
        float x[EK];
#pragma unroll
        for (int e = 0; e < EK; e++) x[e] = xr[c0 + lane * EK + e];
        if (rot_k) kvq_fwht_warp<EK>(x, lane);
        kvq_put_warp<EK>(x, lane, h * head_dim + c0, s, k_dim, bs, k_cache, kvq);
    }
}

extern "C" cudaError_t qr_cuda_rope_kvq_store(float *q, float *k, const float *v, int32_t n_tok, int32_t n_head,
                                             int32_t n_head_kv, int32_t head_dim, int32_t v_dim, const int32_t *pos,
                                             const int32_t *slots, const cuda_rope_consts *c, const float *freq_factors,
                                             void *k_cache, void *v_cache, int32_t block_size, int32_t kvq, int32_t rot_k,
                                             int32_t rot_v, bool pdl, cudaStream_t stream) {
    if (n_tok <= 0) return cudaSuccess;
    const int CK = rot_k ? rot_k : 32, CV = rot_v ? rot_v : 32;
    if (n_tok > 8 || c->n_rot / 2 > 256 || head_dim % CK || v_dim % (4 * CV) ||
        (CK != 32 && CK != 64 && CK != 128 && CK != 256) || (CV != 32 && CV != 64 && CV != 128 && CV != 256))
        return cudaErrorNotSupported; /* the caller takes rope + qr_cuda_kvq_store */
    const unsigned units = (unsigned)(n_head + n_head_kv + v_dim / (4 * CV));
    uint8_t *kc = (uint8_t *)k_cache, *vc = (uint8_t *)v_cache;
    cudaError_t e = cudaErrorNotSupported;
#define RKV(EK, EV)                                                                                                 \
    e = launch_k(rope_kvq_store_kernel<EK, EV>, dim3((unsigned)n_tok, units), dim3(128), 0, stream, pdl, q, k, v, n_head, \
                 n_head_kv, head_dim, v_dim, pos, slots, *c, freq_factors, kc, vc, block_size, kvq, rot_k != 0, rot_v != 0)
    if (CV == 64) {
        KVQ_BY_CHUNK(CK, RKV(E, 2))
    } else if (CV == 32) {
        KVQ_BY_CHUNK(CK, RKV(E, 1))
    }
#undef RKV
    return e;
}

/* ---- the transform of q and of the output (the flash kernel's passes) ---- */

template <int E>
static __global__ void __launch_bounds__(128) fwht_kernel(const float *x, float *y, int64_t n_chunks) {
    constexpr int C = 32 * E;
    const int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (w >= n_chunks) return;
    x += w * C + lane * E, y += w * C + lane * E;
    float v[E];
#pragma unroll
    for (int e = 0; e < E; e++) v[e] = x[e];
    kvq_fwht_warp<E>(v, lane);
#pragma unroll
    for (int e = 0; e < E; e++) y[e] = v[e];
}

extern "C" cudaError_t qr_cuda_fwht(const float *x, float *y, int64_t n_rows, int32_t n, int32_t chunk, cudaStream_t stream) {
    if (n_rows <= 0) return cudaSuccess;
    if (n % chunk || (chunk != 32 && chunk != 64 && chunk != 128 && chunk != 256)) return cudaErrorInvalidValue;
    const int64_t chunks = n_rows * (n / chunk);
    const unsigned grid = (unsigned)((chunks * 32 + 127) / 128);
    KVQ_BY_CHUNK(chunk, fwht_kernel<E><<<grid, 128, 0, stream>>>(x, y, chunks))
    QR_CUDA_CHECK_LAUNCH();
}

/* ---- attention ---- */

/* q's heads [h0, h0 + gn) of row rh0 rotated (chunks of C = 32 E, a warp a chunk) and quantized to Q8_0 into the
 * CTA's shared arrays: codes 4 a word (Q4_0 K: each 8 values as the 4 even ones, then the 4 odd ones, the order of
 * the cache's nibble words), the blocks' scales (f16 values) and code sums. */
template <int D, int G, int KQ, int E>
static __device__ __forceinline__ void kvq_q_prep(const cuda_attn_args &a, const dec_geom &g, bool rot, int warp, int lane,
                                                  int32_t (*qc)[D / 4], float (*qd)[D / 32], int32_t (*qs)[D / 32]) {
    constexpr int C = 32 * E, L = 32 / E;
    if constexpr (C <= D) /* (the rotation's chunk divides the head: backend_check.c) */
    for (int t = warp; t < G * (D / C); t += DEC_WARPS) {
        const int gi = t / (D / C), c0 = (t % (D / C)) * C, cl = c0 + lane * E;
        float v[E];
#pragma unroll
        for (int e = 0; e < E; e++) v[e] = gi < g.gn ? a.q[(g.rh0 + gi) * a.dk + cl + e] : 0.0f;
        if (rot) kvq_fwht_warp<E>(v, lane);
        int c[E];
        const float d = kvq_q8_codes<E>(v, c);
        int sum = 0;
#pragma unroll
        for (int e = 0; e < E; e++) {
            const int i = cl + e, j = i & 7, at = KQ == CUDA_KVQ_Q8 ? i : (i & ~7) + (j & 1) * 4 + (j >> 1);
            ((int8_t *)qc[gi])[at] = (int8_t)c[e];
            sum += c[e];
        }
        float fs = (float)sum; /* exact: |sum| <= 32 * 127 */
#pragma unroll
        for (int o = 1; o < L; o <<= 1) fs += __shfl_xor_sync(0xffffffffu, fs, o);
        if (lane % L == 0) qd[gi][cl / 32] = round_f16(d), qs[gi][cl / 32] = (int32_t)fs;
    }
}

/* Writes heads [0, gn) of o ([G][D], shared) to out rows rh0.., each rotated back in chunks of C = 32 E (rot). */
template <int D, int G, int E>
static __device__ __forceinline__ void kvq_out(const float (*o)[D], float *out, int64_t rh0, int gn, bool rot, int warp,
                                               int lane) {
    constexpr int C = 32 * E;
    if constexpr (C <= D)
    for (int t = warp; t < gn * (D / C); t += DEC_WARPS) {
        const int gi = t / (D / C), cl = (t % (D / C)) * C + lane * E;
        float v[E];
#pragma unroll
        for (int e = 0; e < E; e++) v[e] = o[gi][cl + e];
        if (rot) kvq_fwht_warp<E>(v, lane);
#pragma unroll
        for (int e = 0; e < E; e++) out[(rh0 + gi) * D + cl + e] = v[e];
    }
}

/* The tile's output (heads [0, gn) of rows rh0.., contiguous and whole blocks: the host checks) quantized for the
 * output projection into the activation scratch (a.q8_kind >= 0: qr_cuda_quantize_act's rule), a warp a block. */
template <int D>
static __device__ __forceinline__ void kvq_out_q8(const cuda_attn_args &a, const dec_geom &g, int warp, int lane) {
    if (a.q8_kind < 0) return;
    __syncthreads(); /* the output this CTA wrote */
    const int bs = a.q8_kind == 0 ? 32 : 256;
    const int64_t b0 = g.rh0 * D / bs, nb = (int64_t)g.gn * D / bs;
    for (int64_t j = warp; j < nb; j += DEC_WARPS) {
        if (a.q8_kind == 0) act_quant_block32(a.out, b0 + j, lane, a.q8, a.q8d, a.q8s, a.q8g);
        else act_quant_block256(a.out, b0 + j, lane, a.q8, a.q8d, a.q8g);
    }
}

template <int D, int G, int KQ>
static __global__ void __launch_bounds__(DEC_THREADS, QR_CUDA_KVQ_CTAS(D, G))
    attn_kvq_kernel(const cuda_attn_args a, int n_gtiles, unsigned int *__restrict__ counters) {
    constexpr int TPR = D / 8;    /* lanes a V row: 8 values each */
    constexpr int RPI = 32 / TPR; /* V rows a warp step: 4, 2, 1 for D = 64, 128, 256 */
    constexpr int VB = 8;         /* warp steps of V loads in flight (raw codes in registers) */
    __shared__ __align__(16) int32_t qc_s[G][D / 4]; /* q's Q8_0 codes (kvq_q_prep) */
    __shared__ float qd_s[G][D / 32];                /* their block scales (f16 values) */
    __shared__ int32_t qsum_s[G][D / 32];            /* Q4_0 K: their block sums (the -8 offset) */
    __shared__ float p_s[DEC_WARPS][G][32];
    __shared__ int32_t blk_s[DEC_WARPS][32], off_s[DEC_WARPS][32];
    __shared__ float m_s[DEC_WARPS][G], l_s[DEC_WARPS][G];
    __shared__ __align__(16) float acc_s[DEC_WARPS][G][D];
    __shared__ float o_s[G][D]; /* the tile's output before its rotation back */
    __shared__ float w_s[G][256], inv_s[G]; /* the combine's split weights (<= 256 splits), 1 / denominators */
    __shared__ int last_s;
    pdl_enter();
    const dec_geom g = dec_geometry<G>(a, n_gtiles);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, ns = a.n_splits;
    /* q rotated as the cache's K and quantized to Q8_0 (the CPU's activation rule: llama.cpp's flash-attention path
     * converts q to the K type's dot format) */
    KVQ_BY_CHUNK(a.rot_k ? a.rot_k : 32, kvq_q_prep<D, G, KQ, E>(a, g, a.rot_k != 0, warp, lane, qc_s, qd_s, qsum_s))
    __syncthreads();
    const int n = a.n_head_kv * D, bs = a.block_size;
    const float inv_cap = a.softcap > 0.0f ? __fdiv_rn(1.0f, a.softcap) : 0.0f;
    const int sub = lane / TPR, dl = lane % TPR;
    float m[G], l[G], acc[G][8];
#pragma unroll
    for (int gi = 0; gi < G; gi++) {
        m[gi] = -INFINITY, l[gi] = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; e++) acc[gi][e] = 0.0f;
    }
    for (int p0 = g.p_begin + warp * 32; p0 < g.p_end; p0 += DEC_WARPS * 32) {
        const int p = p0 + lane, nk = min(32, g.p_end - p0);
        const bool valid = p < g.p_end;
        const int pp = valid ? p : p0;
        const int blk = g.bt[pp / bs], off = pp % bs;
        blk_s[warp][lane] = blk, off_s[warp][lane] = off;
        const kvq_row kr = kvq_row_at<KQ>(a.k_cache, blk, off, n, bs);
        float dot[G];
#pragma unroll
        for (int gi = 0; gi < G; gi++) dot[gi] = 0.0f;
        /* per block of 32: the integer dot of the codes (dp4a), times d_k * d_q, as ggml's vec_dot */
#pragma unroll
        for (int b = 0; b < D / 32; b++) {
            const float dk = __half2float(kr.scales[(g.kvh * D >> 5) + b]);
            uint32_t w[8];
            if (KQ == CUDA_KVQ_Q8) {
                const uint4 *src = (const uint4 *)(kr.codes + g.kvh * D + b * 32);
                const uint4 u0 = src[0], u1 = src[1];
                w[0] = u0.x, w[1] = u0.y, w[2] = u0.z, w[3] = u0.w, w[4] = u1.x, w[5] = u1.y, w[6] = u1.z, w[7] = u1.w;
            } else { /* 8 values a word: the even ones (low nibbles) and the odd ones (high) */
                const uint4 u = *(const uint4 *)(kr.codes + (g.kvh * D + b * 32) / 2);
                const uint32_t x[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
                for (int i = 0; i < 4; i++) w[2 * i] = x[i] & 0x0F0F0F0Fu, w[2 * i + 1] = (x[i] >> 4) & 0x0F0F0F0Fu;
            }
#pragma unroll
            for (int gi = 0; gi < G; gi++) {
                int isum = 0;
#pragma unroll
                for (int i = 0; i < 8; i++) isum = __dp4a((int)w[i], qc_s[gi][b * 8 + i], isum);
                if (KQ == CUDA_KVQ_Q4) isum -= 8 * qsum_s[gi][b];
                dot[gi] = fmaf((float)isum, dk * qd_s[gi][b], dot[gi]);
            }
        }
#pragma unroll
        for (int gi = 0; gi < G; gi++) {
            const float s = valid ? dec_score(dot[gi], a, inv_cap) : -INFINITY;
            const float mn = fmaxf(m[gi], warp_max(s)); /* finite: lane 0's key is valid */
            const float corr = __expf(m[gi] - mn);     /* 0 while m is -inf */
            const float pr = valid ? __expf(s - mn) : 0.0f;
            l[gi] = l[gi] * corr + warp_sum(pr);
            m[gi] = mn;
            p_s[warp][gi][lane] = pr;
#pragma unroll
            for (int e = 0; e < 8; e++) acc[gi][e] *= corr;
        }
        __syncwarp();
        /* p * V: the raw codes (and scale) of VB rows in flight, dequantized as they are summed */
        for (int j0 = 0; j0 < nk; j0 += VB * RPI) {
            uint32_t w0[VB], w1[VB];
            float dv[VB];
#pragma unroll
            for (int jj = 0; jj < VB; jj++) {
                const int j = j0 + jj * RPI + sub;
                if (j < nk) {
                    const kvq_row vr = kvq_row_at<KQ>(a.v_cache, blk_s[warp][j], off_s[warp][j], n, bs);
                    const int c = g.kvh * D + dl * 8;
                    dv[jj] = __half2float(vr.scales[c >> 5]);
                    kvq_words8<KQ>(vr.codes, c, w0[jj], w1[jj]);
                }
            }
#pragma unroll
            for (int jj = 0; jj < VB; jj++) {
                const int j = j0 + jj * RPI + sub;
                if (j >= nk) break;
                float vf[8];
                kvq_dequant8<KQ>(w0[jj], w1[jj], dv[jj], vf);
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
    pv_warp_reduce_store<G, D, TPR>(acc, acc_s[warp], lane, dl);
    if (lane == 0) {
#pragma unroll
        for (int gi = 0; gi < G; gi++) m_s[warp][gi] = m[gi], l_s[warp][gi] = l[gi];
    }
    __syncthreads();
    /* merge the warps: sums rescaled to the CTA's max */
    for (int i = threadIdx.x; i < g.gn * D; i += DEC_THREADS) {
        const int gi = i / D, d = i % D;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < DEC_WARPS; w++) M = fmaxf(M, m_s[w][gi]);
        float sum = 0.0f, L = 0.0f;
#pragma unroll
        for (int w = 0; w < DEC_WARPS; w++)
            if (m_s[w][gi] != -INFINITY) {
                const float f = __expf(m_s[w][gi] - M);
                sum += acc_s[w][gi][d] * f, L += l_s[w][gi] * f;
            }
        if (ns == 1) {
            if (a.sinks && M != -INFINITY) { /* the sink: one more score with no value */
                const float sk = a.sinks[g.h0 + gi], M2 = fmaxf(M, sk), f = __expf(M - M2);
                sum *= f, L = L * f + __expf(sk - M2);
            }
            o_s[gi][d] = L > 0.0f ? sum / L : 0.0f;
        } else {
            a.partial[((g.rh0 + gi) * ns + blockIdx.y) * (int64_t)D + d] = sum;
            if (d == 0) {
                float *st = a.stats + ((g.rh0 + gi) * ns + blockIdx.y) * 2;
                st[0] = M, st[1] = L;
            }
        }
    }
    if (ns == 1) {
        __syncthreads();
        KVQ_BY_CHUNK(a.rot_v ? a.rot_v : 32, kvq_out<D, G, E>(o_s, a.out, g.rh0, g.gn, a.rot_v != 0, warp, lane))
        kvq_out_q8<D>(a, g, warp, lane);
        return;
    }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last_s = atomicAdd(&counters[blockIdx.x], 1u) == (unsigned)(ns - 1);
    __syncthreads();
    if (!last_s) return;
    __threadfence();
    /* the splits' weights exp(m_z - M) (a warp a head, lanes over the splits), then each output value's sum over the
     * splits with CB loads in flight (16-byte loads of 4 values) */
    for (int gi = warp; gi < g.gn; gi += DEC_WARPS) {
        const float *st = a.stats + (g.rh0 + gi) * ns * 2;
        float M = -INFINITY;
        for (int z = lane; z < ns; z += 32) M = fmaxf(M, __ldcg(st + 2 * z));
        M = warp_max(M);
        float L = 0.0f;
        for (int z = lane; z < ns; z += 32) {
            const float mz = __ldcg(st + 2 * z), f = mz == -INFINITY ? 0.0f : __expf(mz - M);
            w_s[gi][z] = f, L += __ldcg(st + 2 * z + 1) * f;
        }
        L = warp_sum(L);
        float fo = 1.0f;
        if (a.sinks && M != -INFINITY) { /* the sink: one more score with no value */
            const float sk = a.sinks[g.h0 + gi], M2 = fmaxf(M, sk);
            fo = __expf(M - M2), L = L * fo + __expf(sk - M2);
        }
        if (lane == 0) inv_s[gi] = L > 0.0f ? fo / L : 0.0f;
    }
    __syncthreads();
    constexpr int CB = 16; /* the tail of the step: as many partials in flight as the registers, free by now, hold */
    for (int i = threadIdx.x; i < g.gn * D / 4; i += DEC_THREADS) {
        const int gi = i / (D / 4), d = (i % (D / 4)) * 4;
        const float4 *pp = (const float4 *)(a.partial + (g.rh0 + gi) * ns * (int64_t)D + d);
        float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (int z0 = 0; z0 < ns; z0 += CB) {
            float4 v[CB];
#pragma unroll
            for (int z = 0; z < CB; z++) v[z] = z0 + z < ns ? __ldcg(pp + (int64_t)(z0 + z) * (D / 4)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
            for (int z = 0; z < CB; z++) {
                if (z0 + z >= ns) break;
                const float f = w_s[gi][z0 + z];
                sum.x += v[z].x * f, sum.y += v[z].y * f, sum.z += v[z].z * f, sum.w += v[z].w * f;
            }
        }
        const float inv = inv_s[gi];
        o_s[gi][d] = sum.x * inv, o_s[gi][d + 1] = sum.y * inv, o_s[gi][d + 2] = sum.z * inv, o_s[gi][d + 3] = sum.w * inv;
    }
    __syncthreads();
    KVQ_BY_CHUNK(a.rot_v ? a.rot_v : 32, kvq_out<D, G, E>(o_s, a.out, g.rh0, g.gn, a.rot_v != 0, warp, lane))
    kvq_out_q8<D>(a, g, warp, lane);
    if (threadIdx.x == 0) counters[blockIdx.x] = 0u;
}

template <int D, int G>
static cudaError_t launch_kvq(const cuda_attn_args *a, unsigned int *counters, bool pdl, cudaStream_t stream) {
    const int group = a->n_head / a->n_head_kv, n_gtiles = (group + G - 1) / G;
    const dim3 grid((unsigned)((int64_t)a->n_tok * a->n_head_kv * n_gtiles), (unsigned)a->n_splits);
    if (a->kvq == CUDA_KVQ_Q8)
        return launch_k(attn_kvq_kernel<D, G, CUDA_KVQ_Q8>, grid, dim3(DEC_THREADS), 0, stream, pdl, *a, n_gtiles, counters);
    return launch_k(attn_kvq_kernel<D, G, CUDA_KVQ_Q4>, grid, dim3(DEC_THREADS), 0, stream, pdl, *a, n_gtiles, counters);
}

extern "C" bool qr_cuda_attn_kvq_supported(const cuda_attn_args *a) {
    return (a->kvq == CUDA_KVQ_Q8 || a->kvq == CUDA_KVQ_Q4) && a->dk == a->dv && (a->dk == 64 || a->dk == 128 || a->dk == 256);
}

/* The query heads a CTA takes: as attention_decode.cu's dec_heads (qr_cuda_attn_decode_tiles counts its tiles). */
extern "C" cudaError_t qr_cuda_attention_kvq(const cuda_attn_args *a, unsigned int *counters, bool pdl, cudaStream_t stream) {
    if (a->n_tok <= 0) return cudaSuccess;
    if (!qr_cuda_attn_kvq_supported(a) || (a->n_splits > 1 && (!a->stats || !a->partial || !counters)))
        return cudaErrorInvalidValue;
    const bool g4 = a->dk == 256 || a->n_head / a->n_head_kv <= 4;
    if (a->dk == 64) return g4 ? launch_kvq<64, 4>(a, counters, pdl, stream) : launch_kvq<64, 8>(a, counters, pdl, stream);
    if (a->dk == 128) return g4 ? launch_kvq<128, 4>(a, counters, pdl, stream) : launch_kvq<128, 8>(a, counters, pdl, stream);
    return launch_kvq<256, 4>(a, counters, pdl, stream);
}
