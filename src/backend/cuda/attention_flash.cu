/* attention_flash.cu — attention of prompt batches on f16 tensor cores (flash attention over the paged
 * KV cache): one kernel for every prompt length and depth, no score scratch.
 *
 * Geometry. The batch's rows form runs (consecutive rows of one sequence). For a run of n rows and a
 * GQA group of G query heads per kv head, a kv head has n * G "flat rows": flat row f is token f / G
 * of the run, query head kvh * G + f % G. A CTA (4 warps) computes 64 consecutive flat rows of one run
 * and one kv head (a tile, described by qr_cuda_attn_flash_tiles), so the group's query heads share
 * every K/V load. Warp w owns flat rows 16w..16w+15 (one m16 tile of mma.sync m16n8k16).
 *
 * Per key block of BN keys (positions [k0, k0 + BN) of the sequence, double-buffered through cp.async):
 * S = Q K^T (f16 in, f32 accumulate), then softcap and scale as the CPU's order (cap first), the causal
 * / window mask per row, the online softmax (running max and sum in f32, log2 domain), P rounded to f16
 * and O += P V. The output is O / sum (+ exp(sink) in the sum for gpt-oss). Numerics differ from the CPU
 * oracle (which rounds the probabilities normalised by the final max and sum) at the f16 rounding of P:
 * the GPU fast path's noise floor, as llama.cpp's own flash attention.
 *
 * Fragment layouts (PTX ISA, g = lane / 4, t = lane % 4): A (16 x 16, row) a0 (row g, k 2t, 2t+1), a1 (row
 * g+8), a2 (row g, k 2t+8, 2t+9), a3 (row g+8, k 2t+8..); B (16 x 8, col) b0 (k 2t, 2t+1, column g), b1 (k
 * 2t+8.., column g); C c0, c1 (row g, columns 2t, 2t+1), c2, c3 (row g+8). ldmatrix x4 loads four 8x8
 * matrices whose rows lanes 0-7, 8-15, 16-23, 24-31 address; register i holds matrix i's row g,
 * elements 2t, 2t+1 (.trans: its column g, rows 2t, 2t+1).
 */
#include <stdint.h>

#include "backend/cuda/cuda_dev.cuh"

#define FA_THREADS 128
#define FA_BM 64 /* flat rows a CTA */
#define FA_PAD 8 /* halves of padding a shared row: 8 rows of a ldmatrix fall in different banks */

static __device__ __forceinline__ void fa_ldsm_x4(uint32_t (&r)[4], const __half *p) {
#if defined(__CUDA_ARCH__)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"((unsigned)__cvta_generic_to_shared(p)));
#elif defined(QR_FA_HOST)
    fa_host_ldsm(r, p, false);
#endif
}
static __device__ __forceinline__ void fa_ldsm_x4_trans(uint32_t (&r)[4], const __half *p) {
#if defined(__CUDA_ARCH__)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"((unsigned)__cvta_generic_to_shared(p)));
#elif defined(QR_FA_HOST)
    fa_host_ldsm(r, p, true);
#endif
}
/* c += A B (m16n8k16, f16 inputs, f32 accumulators). */
static __device__ __forceinline__ void fa_mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#elif defined(QR_FA_HOST)
    fa_host_mma(c, a, b0, b1);
#endif
}
static __device__ __forceinline__ uint32_t fa_pack(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    uint32_t u;
    memcpy(&u, &h, 4);
    return u;
}
static __device__ __forceinline__ float fa_quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
static __device__ __forceinline__ float fa_quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

/* Shared memory of a CTA (halves): Q [64][D + PAD], then K and V [2 stages][BN][D + PAD] each. */
template <int D, int BN> struct fa_cfg {
    static constexpr int P = D + FA_PAD;
    static constexpr int O_K = FA_BM * P, O_V = O_K + 2 * BN * P;
    static constexpr int SMEM = (O_V + 2 * BN * P) * 2;
};

/* Grid (tiles, n_head_kv). tiles[b] = {first batch row of the run, rows in the run, first flat row, 0}.
 * a: q [n_tok][n_head * D] f32, the f16 cache, positions, sequences, block tables, window, softcap,
 * scale, sinks; out [n_tok][n_head * D] f32. dk == dv == D. */
template <int D, int BN>
static __global__ void __launch_bounds__(FA_THREADS, 2)
    attn_flash_kernel(const cuda_attn_args a, const int4 *__restrict__ tiles) {
    typedef fa_cfg<D, BN> C;
    constexpr int P = C::P;
    extern __shared__ __align__(16) __half fsm[];
    __shared__ int s_pos[FA_BM], s_first[FA_BM], s_kmin, s_kmax;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int4 tl = tiles[blockIdx.x];
    const int row0 = tl.x, n_run = tl.y, f0 = tl.z, kvh = blockIdx.y;
    const int G = a.n_head / a.n_head_kv, n_flat = n_run * G;
    const int64_t kdim = (int64_t)a.n_head_kv * D, qdim = (int64_t)a.n_head * D;
    if (tid == 0) s_kmin = 0x7fffffff, s_kmax = -1;
    __syncthreads();
    if (tid < FA_BM) {
        const int f = f0 + tid;
        int pos = -1, first = 0x7fffffff;
        if (f < n_flat) {
            pos = a.pos[row0 + f / G];
            first = a.window > 0 && pos - a.window + 1 > 0 ? pos - a.window + 1 : 0;
            atomicMin(&s_kmin, first);
            atomicMax(&s_kmax, pos);
        }
        s_pos[tid] = pos, s_first[tid] = first;
    }
    /* Q: f32 -> f16 rows (the CPU rounds q to f16 too); flat rows past the run are zeros */
    __half *qs = fsm;
    for (int i = tid; i < FA_BM * (D / 4); i += FA_THREADS) {
        const int r = i / (D / 4), c = (i % (D / 4)) * 4, f = f0 + r;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (f < n_flat) v = *(const float4 *)(a.q + (int64_t)(row0 + f / G) * qdim + (int64_t)(kvh * G + f % G) * D + c);
        __half2 *dst = (__half2 *)(qs + r * P + c);
        dst[0] = __floats2half2_rn(v.x, v.y);
        dst[1] = __floats2half2_rn(v.z, v.w);
    }
    __syncthreads();
    const int kmin = s_kmin, kmax = s_kmax;
    const int32_t *bt = a.block_table + (int64_t)a.seq[row0] * a.max_blocks;
    const int kbase = (kmin / BN) * BN, n_blk = kmax < kmin ? 0 : (kmax - kbase) / BN + 1;
    const __half *kc = (const __half *)a.k_cache + (int64_t)kvh * D, *vc = (const __half *)a.v_cache + (int64_t)kvh * D;

    auto load_kv = [&](int j) {
        __half *ks = fsm + C::O_K + (j & 1) * BN * P, *vs = fsm + C::O_V + (j & 1) * BN * P;
        const int k0 = kbase + j * BN;
#pragma unroll
        for (int i = tid; i < BN * (D / 8); i += FA_THREADS) {
            const int key = i / (D / 8), c = (i % (D / 8)) * 8;
            int p = k0 + key;
            p = p < kmin ? kmin : (p > kmax ? kmax : p); /* masked keys read a valid slot: finite values */
            const int64_t slot = (int64_t)bt[p / a.block_size] * a.block_size + p % a.block_size;
            cp_async16(ks + key * P + c, kc + slot * kdim + c);
            cp_async16(vs + key * P + c, vc + slot * kdim + c);
        }
        cp_async_commit();
    };

    /* this thread's two rows (g and g + 8 of the warp's m16 tile) */
    const int ra = warp * 16 + g, rb = ra + 8;
    const int pos_a = s_pos[ra], pos_b = s_pos[rb], first_a = s_first[ra], first_b = s_first[rb];
    int wmax = max(pos_a, pos_b), wmin = min(first_a, first_b);
#pragma unroll
    for (int o = 4; o < 32; o <<= 1) {
        wmax = max(wmax, __shfl_xor_sync(0xffffffffu, wmax, o));
        wmin = min(wmin, __shfl_xor_sync(0xffffffffu, wmin, o));
    }
    const float LOG2E = 1.4426950408889634f, scale2 = a.scale * LOG2E;
    const float inv_cap = a.softcap > 0.0f ? 1.0f / a.softcap : 0.0f;
    float o[D / 8][4];
#pragma unroll
    for (int j = 0; j < D / 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;

    if (n_blk > 0) load_kv(0);
    for (int j = 0; j < n_blk; j++) {
        if (j + 1 < n_blk) {
            load_kv(j + 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const int k0 = kbase + j * BN;
        if (k0 <= wmax && k0 + BN > wmin) { /* some key of the block is visible to some row of the warp */
            const __half *ks = fsm + C::O_K + (j & 1) * BN * P, *vs = fsm + C::O_V + (j & 1) * BN * P;
            float s[BN / 8][4];
#pragma unroll
            for (int n = 0; n < BN / 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                uint32_t qa[4];
                fa_ldsm_x4(qa, qs + (warp * 16 + (lane & 15)) * P + kk * 16 + (lane >> 4) * 8);
#pragma unroll
                for (int nn = 0; nn < BN / 16; nn++) {
                    uint32_t kb[4];
                    fa_ldsm_x4(kb, ks + (nn * 16 + (lane & 7) + ((lane >> 4) << 3)) * P + kk * 16 + ((lane >> 3) & 1) * 8);
                    fa_mma(s[2 * nn], qa, kb[0], kb[1]);
                    fa_mma(s[2 * nn + 1], qa, kb[2], kb[3]);
                }
            }
            /* scores (log2 domain), mask, block max */
            float bm_a = -INFINITY, bm_b = -INFINITY;
#pragma unroll
            for (int n = 0; n < BN / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int key = k0 + n * 8 + 2 * t + (e & 1);
                    float v = s[n][e];
                    if (a.softcap > 0.0f) v = tanhf(v * inv_cap) * a.softcap;
                    v *= scale2;
                    const bool vis = e < 2 ? (key >= first_a && key <= pos_a) : (key >= first_b && key <= pos_b);
                    v = vis ? v : -INFINITY;
                    s[n][e] = v;
                    if (e < 2) bm_a = fmaxf(bm_a, v);
                    else bm_b = fmaxf(bm_b, v);
                }
            bm_a = fa_quad_max(bm_a), bm_b = fa_quad_max(bm_b);
            const float mn_a = fmaxf(m_a, bm_a), mn_b = fmaxf(m_b, bm_b);
            /* a row with no visible key yet keeps max -inf: exponents against 0 give zeros */
            const float mu_a = mn_a == -INFINITY ? 0.0f : mn_a, mu_b = mn_b == -INFINITY ? 0.0f : mn_b;
            const float c_a = exp2f(m_a - mu_a), c_b = exp2f(m_b - mu_b);
            m_a = mn_a, m_b = mn_b;
            l_a *= c_a, l_b *= c_b;
#pragma unroll
            for (int n = 0; n < D / 8; n++) o[n][0] *= c_a, o[n][1] *= c_a, o[n][2] *= c_b, o[n][3] *= c_b;
#pragma unroll
            for (int n = 0; n < BN / 8; n++) {
                s[n][0] = exp2f(s[n][0] - mu_a), s[n][1] = exp2f(s[n][1] - mu_a);
                s[n][2] = exp2f(s[n][2] - mu_b), s[n][3] = exp2f(s[n][3] - mu_b);
                l_a += s[n][0] + s[n][1], l_b += s[n][2] + s[n][3];
            }
            /* O += P V: P's accumulator layout is the A layout of the next mma */
#pragma unroll
            for (int kk = 0; kk < BN / 16; kk++) {
                uint32_t pa[4];
                pa[0] = fa_pack(s[2 * kk][0], s[2 * kk][1]);
                pa[1] = fa_pack(s[2 * kk][2], s[2 * kk][3]);
                pa[2] = fa_pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
                pa[3] = fa_pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
                for (int dn = 0; dn < D / 16; dn++) {
                    uint32_t vb[4];
                    fa_ldsm_x4_trans(vb, vs + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * P + dn * 16 + (lane >> 4) * 8);
                    fa_mma(o[2 * dn], pa, vb[0], vb[1]);
                    fa_mma(o[2 * dn + 1], pa, vb[2], vb[3]);
                }
            }
        }
        __syncthreads(); /* the next iteration's load overwrites this buffer */
    }
    l_a = fa_quad_sum(l_a), l_b = fa_quad_sum(l_b);
    const int fa = f0 + ra, fb = f0 + rb;
    if (a.sinks) {
        if (fa < n_flat && m_a != -INFINITY) l_a += exp2f(a.sinks[kvh * G + fa % G] * LOG2E - m_a);
        if (fb < n_flat && m_b != -INFINITY) l_b += exp2f(a.sinks[kvh * G + fb % G] * LOG2E - m_b);
    }
    const float ia = l_a > 0.0f ? 1.0f / l_a : 0.0f, ib = l_b > 0.0f ? 1.0f / l_b : 0.0f;
    float *oa = fa < n_flat ? a.out + (int64_t)(row0 + fa / G) * qdim + (int64_t)(kvh * G + fa % G) * D : NULL;
    float *ob = fb < n_flat ? a.out + (int64_t)(row0 + fb / G) * qdim + (int64_t)(kvh * G + fb % G) * D : NULL;
#pragma unroll
    for (int n = 0; n < D / 8; n++) {
        if (oa) *(float2 *)(oa + n * 8 + 2 * t) = make_float2(o[n][0] * ia, o[n][1] * ia);
        if (ob) *(float2 *)(ob + n * 8 + 2 * t) = make_float2(o[n][2] * ib, o[n][3] * ib);
    }
}

template <int D, int BN>
static cudaError_t launch_flash(const cuda_attn_args *a, const int4 *tiles, int32_t n_tiles, cudaStream_t stream) {
    typedef fa_cfg<D, BN> C;
    static bool attr_set = false; /* per instantiation; the dynamic shared memory above 48 KiB */
    if (!attr_set) {
        const cudaError_t e = cudaFuncSetAttribute(attn_flash_kernel<D, BN>, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM);
        if (e != cudaSuccess) return e;
        attr_set = true;
    }
    attn_flash_kernel<D, BN><<<dim3((unsigned)n_tiles, (unsigned)a->n_head_kv), FA_THREADS, C::SMEM, stream>>>(*a, tiles);
    QR_CUDA_CHECK_LAUNCH();
}

extern "C" bool qr_cuda_attn_flash_supported(const cuda_attn_args *a) {
    return a->f16 && a->dk == a->dv && (a->dk == 64 || a->dk == 128 || a->dk == 256);
}

extern "C" int32_t qr_cuda_attn_flash_tiles(const int32_t *seq, int32_t n_tok, int32_t group, int32_t *tiles,
                                            int32_t cap) {
    int32_t n = 0;
    for (int32_t r0 = 0; r0 < n_tok;) {
        int32_t r1 = r0 + 1;
        while (r1 < n_tok && seq[r1] == seq[r0]) r1++;
        const int64_t flat = (int64_t)(r1 - r0) * group;
        for (int64_t f = 0; f < flat; f += FA_BM) {
            if (tiles && n < cap) {
                tiles[4 * n] = r0, tiles[4 * n + 1] = r1 - r0, tiles[4 * n + 2] = (int32_t)f, tiles[4 * n + 3] = 0;
            }
            n++;
        }
        r0 = r1;
    }
    return n;
}

extern "C" cudaError_t qr_cuda_attention_flash(const cuda_attn_args *a, const int32_t *tiles, int32_t n_tiles,
                                               cudaStream_t stream) {
    if (!qr_cuda_attn_flash_supported(a) || n_tiles < 1) return cudaErrorInvalidValue;
    const int4 *t = (const int4 *)tiles;
    switch (a->dk) {
    case 64: return launch_flash<64, 64>(a, t, n_tiles, stream);
    case 128: return launch_flash<128, 64>(a, t, n_tiles, stream);
    default: return launch_flash<256, 32>(a, t, n_tiles, stream);
    }
}
