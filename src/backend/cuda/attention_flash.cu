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
#include "backend/cuda/mma_dev.cuh"

#define FA_THREADS 128
#include "backend/cuda/kv_quant.cuh"
#define FA_BM 64 /* flat rows a CTA */
#define FA_PAD 8 /* halves of padding a shared row: 8 rows of a ldmatrix fall in different banks */
/* The launch forms (head size, keys a block, m16 tiles a warp, K/V pipeline stages): the backend picks MT
 * (qr_cuda_tune.attn_flash_mt; 1 for head size 256: the registers) and, where two forms differ only in them, the
 * stages (attn_flash_stages); 3 stages where two CTAs an SM still fit the shared memory. */
#define FA_FORMS(X) X(64, 64, 2, 3) X(64, 64, 1, 3) X(128, 32, 2, 3) X(128, 32, 2, 2) X(128, 64, 1, 2) X(256, 32, 1, 2)
/* The forms over a quantized cache (head size, keys a block, m16 tiles a warp, raw stages): one f16 K/V tile that each
 * block's raw rows are dequantized into (kv_quant.cuh); two m16 tiles a warp halve that work a row */
#define FA_QFORMS(X) X(64, 64, 2, 3) X(64, 64, 1, 3) X(128, 32, 2, 3) X(128, 32, 1, 3) X(256, 32, 1, 2)

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
static __device__ __forceinline__ float fa_quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
static __device__ __forceinline__ float fa_quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

/* Shared memory of a CTA (halves): Q [BM][D + PAD], then K and V [ST stages][BN][D + PAD] each. MT m16 tiles a
 * warp (BM = 64 MT flat rows a CTA): the warp's tiles share every K and V fragment it loads. */
template <int D, int BN, int MT, int ST, int KQ = 0> struct fa_cfg {
    static constexpr int BM = 16 * MT * (FA_THREADS / 32), P = D + FA_PAD;
    static constexpr int KST = KQ ? 1 : ST; /* f16 K/V tiles: a quantized cache dequantizes into one */
    static constexpr int O_K = BM * P, O_V = O_K + KST * BN * P;
    /* a quantized cache: ST stages of the blocks' raw rows (codes, then the head's scales), K then V, in bytes */
    static constexpr int CODES = KQ == CUDA_KVQ_Q8 ? D : D / 2, RAW = KQ ? ((CODES + D / 16 + 15) / 16) * 16 : 0;
    static constexpr int O_RAW = (O_V + KST * BN * P) * 2;
    static constexpr int SMEM = O_RAW + ST * 2 * BN * RAW;
};

/* Grid (tiles, n_head_kv, splits). tiles[b] = {first batch row of the run, rows in the run, first flat row, 0};
 * split z of n computes the z-th of n equal shares of the tile's key blocks. a: q [n_tok][n_head * D] f32, the
 * f16 cache, positions, sequences, block tables, window, softcap, scale, sinks; out [n_tok][n_head * D] f32.
 * dk == dv == D. One split: out = the normalised output. Several: part[split][n_tok * n_head][D] = the split's
 * unnormalised output and stats[split][n_tok * n_head] = {max (log2 domain), sum}, for attn_flash_combine. */
template <int D, int BN, int MT, int ST, int KQ = 0>
static __global__ void __launch_bounds__(FA_THREADS, 2)
    attn_flash_kernel(const cuda_attn_args a, const int4 *__restrict__ tiles, float *__restrict__ part,
                      float2 *__restrict__ stats) {
    typedef fa_cfg<D, BN, MT, ST, KQ> C;
    constexpr int P = C::P, BM = C::BM;
    extern __shared__ __align__(16) __half fsm[];
    __shared__ int s_pos[BM], s_first[BM], s_kmin, s_kmax;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int4 tl = tiles[blockIdx.x];
    const int row0 = tl.x, n_run = tl.y, f0 = tl.z, kvh = blockIdx.y;
    const int G = a.n_head / a.n_head_kv, n_flat = n_run * G;
    const int64_t kdim = (int64_t)a.n_head_kv * D, qdim = (int64_t)a.n_head * D;
    if (tid == 0) s_kmin = 0x7fffffff, s_kmax = -1;
    __syncthreads();
    for (int i = tid; i < BM; i += FA_THREADS) {
        const int f = f0 + i;
        int pos = -1, first = 0x7fffffff;
        if (f < n_flat) {
            pos = a.pos[row0 + f / G];
            first = a.window > 0 && pos - a.window + 1 > 0 ? pos - a.window + 1 : 0;
            atomicMin(&s_kmin, first);
            atomicMax(&s_kmax, pos);
        }
        s_pos[i] = pos, s_first[i] = first;
    }
    /* Q: f32 -> f16 rows (the CPU rounds q to f16 too); flat rows past the run are zeros */
    __half *qs = fsm;
    for (int i = tid; i < BM * (D / 4); i += FA_THREADS) {
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
    const int kbase = (kmin / BN) * BN, n_all = kmax < kmin ? 0 : (kmax - kbase) / BN + 1;
    const int ns = gridDim.z, z = blockIdx.z;
    const int jb = (int)((int64_t)n_all * z / ns), je = (int)((int64_t)n_all * (z + 1) / ns);
    const __half *kc = (const __half *)a.k_cache + (int64_t)kvh * D, *vc = (const __half *)a.v_cache + (int64_t)kvh * D;

    /* K/V of key block j into stage j % ST, 16-byte chunks in row order (a warp reads whole cache rows); a power-of-2
     * block size divides by shifts */
    const int bs = a.block_size, bs_shift = (bs & (bs - 1)) == 0 ? __ffs(bs) - 1 : -1;
    auto load_kv = [&](int j) {
        const int k0 = kbase + j * BN;
        if (KQ) { /* the raw rows of block j into raw stage j % ST: 16-byte pieces of codes, 4-byte pieces of scales */
            uint8_t *rk = (uint8_t *)fsm + C::O_RAW + (j % ST) * 2 * BN * C::RAW, *rv = rk + BN * C::RAW;
            constexpr int CB = C::CODES / 16, SB = D / 64; /* pieces of a head's codes, of its scales */
            const int n = (int)kdim;
            for (int i = tid; i < BN * (CB + SB); i += FA_THREADS) {
                const int key = i / (CB + SB), c = i % (CB + SB);
                int p = k0 + key;
                p = p < kmin ? kmin : (p > kmax ? kmax : p);
                const int blk = bt[p / bs], off = p % bs;
                const kvq_row kr = kvq_row_at<KQ>(a.k_cache, blk, off, n, bs), vr = kvq_row_at<KQ>(a.v_cache, blk, off, n, bs);
                if (c < CB) {
                    cp_async16(rk + key * C::RAW + c * 16, kr.codes + kvh * C::CODES + c * 16);
                    cp_async16(rv + key * C::RAW + c * 16, vr.codes + kvh * C::CODES + c * 16);
                } else {
                    const int sp = (c - CB) * 4;
                    cp_async4(rk + key * C::RAW + C::CODES + sp, (const uint8_t *)(kr.scales + kvh * (D / 32)) + sp, 4);
                    cp_async4(rv + key * C::RAW + C::CODES + sp, (const uint8_t *)(vr.scales + kvh * (D / 32)) + sp, 4);
                }
            }
            return;
        }
        __half *ks = fsm + C::O_K + (j % ST) * BN * P, *vs = fsm + C::O_V + (j % ST) * BN * P;
#pragma unroll
        for (int i = tid; i < BN * (D / 8); i += FA_THREADS) {
            const int key = i / (D / 8), c = (i % (D / 8)) * 8;
            int p = k0 + key;
            p = p < kmin ? kmin : (p > kmax ? kmax : p); /* masked keys read a valid slot: finite values */
            const int64_t slot = bs_shift >= 0 ? ((int64_t)bt[p >> bs_shift] << bs_shift) + (p & (bs - 1))
                                               : (int64_t)bt[p / bs] * bs + p % bs;
            cp_async16(ks + key * P + c, kc + slot * kdim + c);
            cp_async16(vs + key * P + c, vc + slot * kdim + c);
        }
    };
    /* a quantized cache: raw stage j % ST -> the f16 K/V tiles */
    auto dequant_kv = [&](int j) {
        const uint8_t *rk = (const uint8_t *)fsm + C::O_RAW + (j % ST) * 2 * BN * C::RAW, *rv = rk + BN * C::RAW;
        __half *ks = fsm + C::O_K, *vs = fsm + C::O_V;
        for (int i = tid; i < BN * (D / 8); i += FA_THREADS) {
            const int key = i / (D / 8), c = (i % (D / 8)) * 8;
            float f[8];
            uint32_t w0, w1;
            const uint8_t *kr = rk + key * C::RAW, *vr = rv + key * C::RAW;
            kvq_words8<KQ>(kr, c, w0, w1);
            kvq_dequant8<KQ>(w0, w1, __half2float(((const __half *)(kr + C::CODES))[c >> 5]), f);
            uint4 u;
            u.x = qr_half2_bits(f[0], f[1]), u.y = qr_half2_bits(f[2], f[3]), u.z = qr_half2_bits(f[4], f[5]), u.w = qr_half2_bits(f[6], f[7]);
            *(uint4 *)(ks + key * P + c) = u;
            kvq_words8<KQ>(vr, c, w0, w1);
            kvq_dequant8<KQ>(w0, w1, __half2float(((const __half *)(vr + C::CODES))[c >> 5]), f);
            u.x = qr_half2_bits(f[0], f[1]), u.y = qr_half2_bits(f[2], f[3]), u.z = qr_half2_bits(f[4], f[5]), u.w = qr_half2_bits(f[6], f[7]);
            *(uint4 *)(vs + key * P + c) = u;
        }
    };

    /* this thread's rows: g and g + 8 of each of the warp's m16 tiles; the warp's key bounds over its valid
     * rows: some key visible to some row (wmin..wmax), every key visible to every row (wfull_lo..wfull_hi) */
    const int wr = warp * 16 * MT;
    int wmax = -1, wmin = 0x7fffffff, wlo = 0, whi = 0x7fffffff;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int r = wr + mt * 16 + g + 8 * h, pos = s_pos[r], first = s_first[r];
            if (pos >= 0) wmax = max(wmax, pos), wmin = min(wmin, first), whi = min(whi, pos), wlo = max(wlo, first);
        }
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        wmax = max(wmax, __shfl_xor_sync(0xffffffffu, wmax, o));
        wmin = min(wmin, __shfl_xor_sync(0xffffffffu, wmin, o));
        whi = min(whi, __shfl_xor_sync(0xffffffffu, whi, o));
        wlo = max(wlo, __shfl_xor_sync(0xffffffffu, wlo, o));
    }
    const float LOG2E = 1.4426950408889634f, scale2 = a.scale * LOG2E;
    const float inv_cap = a.softcap > 0.0f ? 1.0f / a.softcap : 0.0f;
    float o[MT][D / 8][4], m[MT][2], l[MT][2], c[MT][2]; /* m: running max of the raw (softcapped) scores */
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int j = 0; j < D / 8; j++) o[mt][j][0] = o[mt][j][1] = o[mt][j][2] = o[mt][j][3] = 0.0f;
        m[mt][0] = m[mt][1] = -INFINITY, l[mt][0] = l[mt][1] = 0.0f;
    }

    /* ST - 1 blocks in flight ahead of the one computed (a group committed every step, empty or not, keeps the
     * wait count fixed); the barrier at the top of a step also ends every warp's use of the stage it reloads */
#pragma unroll
    for (int i = 0; i < ST - 1; i++) {
        if (jb + i < je) load_kv(jb + i);
        cp_async_commit();
    }
    for (int j = jb; j < je; j++) {
        cp_async_wait<ST - 2>();
        __syncthreads();
        if (j + ST - 1 < je) load_kv(j + ST - 1);
        cp_async_commit();
        if (KQ) { /* the tiles' last readers passed the barrier above */
            dequant_kv(j);
            __syncthreads();
        }
        const int k0 = kbase + j * BN;
        if (k0 <= wmax && k0 + BN > wmin) { /* some key of the block is visible to some row of the warp */
            const int ts = KQ ? 0 : j % ST;
            const __half *ks = fsm + C::O_K + ts * BN * P, *vs = fsm + C::O_V + ts * BN * P;
            float s[MT][BN / 8][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int n = 0; n < BN / 8; n++) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                uint32_t qa[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
                    fa_ldsm_x4(qa[mt], qs + (wr + mt * 16 + (lane & 15)) * P + kk * 16 + (lane >> 4) * 8);
#pragma unroll
                for (int nn = 0; nn < BN / 16; nn++) {
                    uint32_t kb[4];
                    fa_ldsm_x4(kb, ks + (nn * 16 + (lane & 7) + ((lane >> 4) << 3)) * P + kk * 16 + ((lane >> 3) & 1) * 8);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        qr_mma16816(s[mt][2 * nn], qa[mt], kb[0], kb[1]);
                        qr_mma16816(s[mt][2 * nn + 1], qa[mt], kb[2], kb[3]);
                    }
                }
            }
            /* scores (softcapped; the scale applies in the exponent), the mask unless every key of the block is
             * visible to every row, the block max; m and the exponents in units of the raw score */
            const bool full = k0 >= wlo && k0 + BN - 1 <= whi;
            bool same = true; /* no row's max moved: the output needs no rescale */
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                float bm[2] = {-INFINITY, -INFINITY};
#pragma unroll
                for (int n = 0; n < BN / 8; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        float v = s[mt][n][e];
                        if (a.softcap > 0.0f) v = tanhf(v * inv_cap) * a.softcap;
                        if (!full) { /* the row's bounds from shared memory: registers are scarce */
                            const int key = k0 + n * 8 + 2 * t + (e & 1), r = wr + mt * 16 + g + 8 * (e >> 1);
                            v = key >= s_first[r] && key <= s_pos[r] ? v : -INFINITY;
                        }
                        s[mt][n][e] = v;
                        bm[e >> 1] = fmaxf(bm[e >> 1], v);
                    }
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const float mn = fmaxf(m[mt][h], fa_quad_max(bm[h]));
                    same = same && mn == m[mt][h];
                    /* a row with no visible key yet keeps max -inf: exponents against 0 give zeros */
                    const float mu = mn == -INFINITY ? 0.0f : mn * scale2;
                    c[mt][h] = exp2f(fmaf(m[mt][h], scale2, -mu));
                    m[mt][h] = mn, l[mt][h] *= c[mt][h], bm[h] = mu;
                }
#pragma unroll
                for (int n = 0; n < BN / 8; n++) {
                    s[mt][n][0] = exp2f(fmaf(s[mt][n][0], scale2, -bm[0]));
                    s[mt][n][1] = exp2f(fmaf(s[mt][n][1], scale2, -bm[0]));
                    s[mt][n][2] = exp2f(fmaf(s[mt][n][2], scale2, -bm[1]));
                    s[mt][n][3] = exp2f(fmaf(s[mt][n][3], scale2, -bm[1]));
                    l[mt][0] += s[mt][n][0] + s[mt][n][1], l[mt][1] += s[mt][n][2] + s[mt][n][3];
                }
            }
            if (!__all_sync(0xffffffffu, same)) {
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int n = 0; n < D / 8; n++)
                        o[mt][n][0] *= c[mt][0], o[mt][n][1] *= c[mt][0], o[mt][n][2] *= c[mt][1], o[mt][n][3] *= c[mt][1];
            }
            /* O += P V: P's accumulator layout is the A layout of the next mma */
#pragma unroll
            for (int kk = 0; kk < BN / 16; kk++) {
                uint32_t pa[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    pa[mt][0] = qr_half2_bits(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                    pa[mt][1] = qr_half2_bits(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                    pa[mt][2] = qr_half2_bits(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                    pa[mt][3] = qr_half2_bits(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
                }
#pragma unroll
                for (int dn = 0; dn < D / 16; dn++) {
                    uint32_t vb[4];
                    fa_ldsm_x4_trans(vb, vs + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * P + dn * 16 + (lane >> 4) * 8);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        qr_mma16816(o[mt][2 * dn], pa[mt], vb[0], vb[1]);
                        qr_mma16816(o[mt][2 * dn + 1], pa[mt], vb[2], vb[3]);
                    }
                }
            }
        }
    }
    cp_async_wait<0>(); /* no copy outlives the CTA's shared memory */
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const float lsum = fa_quad_sum(l[mt][h]);
            const int f = f0 + wr + mt * 16 + g + 8 * h;
            if (f >= n_flat) continue;
            const int64_t rh = (int64_t)(row0 + f / G) * a.n_head + kvh * G + f % G; /* row * n_head + head */
            if (ns > 1) { /* the split's share: unnormalised, with its max and sum */
                float *dst = part + ((int64_t)z * a.n_tok * a.n_head + rh) * D;
#pragma unroll
                for (int n = 0; n < D / 8; n++)
                    *(float2 *)(dst + n * 8 + 2 * t) = make_float2(o[mt][n][2 * h], o[mt][n][2 * h + 1]);
                if (t == 0) stats[(int64_t)z * a.n_tok * a.n_head + rh] = make_float2(m[mt][h] * scale2, lsum);
                continue;
            }
            float den = lsum;
            if (a.sinks && m[mt][h] != -INFINITY) den += exp2f(a.sinks[kvh * G + f % G] * LOG2E - m[mt][h] * scale2);
            const float inv = den > 0.0f ? 1.0f / den : 0.0f;
            float *dst = a.out + rh * D;
#pragma unroll
            for (int n = 0; n < D / 8; n++)
                *(float2 *)(dst + n * 8 + 2 * t) = make_float2(o[mt][n][2 * h] * inv, o[mt][n][2 * h + 1] * inv);
        }
}

/* Grid n_tok * n_head, D threads: out[row][head] = the splits' shares merged (sums rescaled to the largest
 * max, the sink in the denominator). */
template <int D>
static __global__ void __launch_bounds__(D) attn_flash_combine(const cuda_attn_args a, int ns, const float *__restrict__ part,
                                                                const float2 *__restrict__ stats) {
    const int64_t rh = blockIdx.x, nrh = (int64_t)a.n_tok * a.n_head;
    const int d = threadIdx.x;
    float mx = -INFINITY;
    for (int z = 0; z < ns; z++) mx = fmaxf(mx, stats[z * nrh + rh].x);
    const float mu = mx == -INFINITY ? 0.0f : mx;
    float acc = 0.0f, den = 0.0f;
    for (int z = 0; z < ns; z++) {
        const float2 st = stats[z * nrh + rh];
        const float w = exp2f(st.x - mu);
        den += st.y * w;
        acc += part[(z * nrh + rh) * D + d] * w;
    }
    if (a.sinks && mx != -INFINITY) den += exp2f(a.sinks[rh % a.n_head] * 1.4426950408889634f - mx);
    a.out[rh * D + d] = den > 0.0f ? acc / den : 0.0f;
}

template <int D, int BN, int MT, int ST, int KQ = 0>
static cudaError_t launch_flash(const cuda_attn_args *a, const int4 *tiles, int32_t n_tiles, int32_t ns, float *part,
                                cudaStream_t stream) {
    typedef fa_cfg<D, BN, MT, ST, KQ> C;
    static unsigned long long attr_set = 0; /* per instantiation, a bit per device (function attributes are per
                                             * device context): the dynamic shared memory above 48 KiB */
    int dev = 0;
    cudaError_t ge = cudaGetDevice(&dev);
    if (ge != cudaSuccess) return ge;
    const unsigned long long bit = dev < 64 ? 1ull << dev : 0;
    if (!(attr_set & bit)) {
        const cudaError_t e = cudaFuncSetAttribute(attn_flash_kernel<D, BN, MT, ST, KQ>, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM);
        if (e != cudaSuccess) return e;
        attr_set |= bit;
    }
    float2 *stats = ns > 1 ? (float2 *)(part + (size_t)ns * a->n_tok * a->n_head * D) : NULL;
    attn_flash_kernel<D, BN, MT, ST, KQ><<<dim3((unsigned)n_tiles, (unsigned)a->n_head_kv, (unsigned)ns), FA_THREADS, C::SMEM, stream>>>(
        *a, tiles, part, stats);
    if (ns > 1) {
        const cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
        attn_flash_combine<D><<<(unsigned)((int64_t)a->n_tok * a->n_head), D, 0, stream>>>(*a, ns, part, stats);
    }
    QR_CUDA_CHECK_LAUNCH();
}

extern "C" bool qr_cuda_attn_flash_supported(const cuda_attn_args *a) {
    return (a->kvq == CUDA_KVQ_Q8 || a->kvq == CUDA_KVQ_Q4 || (!a->kvq && a->f16)) && a->dk == a->dv &&
           (a->dk == 64 || a->dk == 128 || a->dk == 256);
}

extern "C" int32_t qr_cuda_attn_flash_rows(int32_t head_dim, int32_t mt) {
    if (head_dim == 256) mt = 1;
#define FORM(D, BN, MT, ST) if (head_dim == D && mt == MT) return fa_cfg<D, BN, MT, ST>::BM;
    FA_FORMS(FORM)
#undef FORM
    return 0;
}

extern "C" int32_t qr_cuda_attn_flash_tiles(const int32_t *seq, int32_t n_tok, int32_t group, int32_t rows_per_tile,
                                            int32_t *tiles, int32_t cap) {
    int32_t n = 0;
    for (int32_t r0 = 0; r0 < n_tok;) {
        int32_t r1 = r0 + 1;
        while (r1 < n_tok && seq[r1] == seq[r0]) r1++;
        const int64_t flat = (int64_t)(r1 - r0) * group;
        for (int64_t f = 0; f < flat; f += rows_per_tile) {
            if (tiles && n < cap) {
                tiles[4 * n] = r0, tiles[4 * n + 1] = r1 - r0, tiles[4 * n + 2] = (int32_t)f, tiles[4 * n + 3] = 0;
            }
            n++;
        }
        r0 = r1;
    }
    return n;
}

extern "C" cudaError_t qr_cuda_attention_flash(const cuda_attn_args *a, int32_t mt, int32_t stages, const int32_t *tiles,
                                               int32_t n_tiles, int32_t n_splits, float *part, cudaStream_t stream) {
    if (!qr_cuda_attn_flash_supported(a) || n_tiles < 1 || n_splits < 1 || (n_splits > 1 && !part))
        return cudaErrorInvalidValue;
    const int4 *t = (const int4 *)tiles;
    if (a->dk == 256) mt = 1;
    if (a->kvq) { /* the form of FA_QFORMS for (head size, mt) */
#define FORM(D, BN, MT, ST)                                                                                             \
    if (a->dk == D && mt == MT)                                                                                       \
        return a->kvq == CUDA_KVQ_Q8 ? launch_flash<D, BN, MT, ST, CUDA_KVQ_Q8>(a, t, n_tiles, n_splits, part, stream) \
                                     : launch_flash<D, BN, MT, ST, CUDA_KVQ_Q4>(a, t, n_tiles, n_splits, part, stream);
        FA_QFORMS(FORM)
#undef FORM
        return cudaErrorInvalidValue;
    }
    /* the form of (head size, mt) with these stages, else the first of (head size, mt) */
#define FORM(D, BN, MT, ST) \
    if (a->dk == D && mt == MT && ST == stages) return launch_flash<D, BN, MT, ST>(a, t, n_tiles, n_splits, part, stream);
    FA_FORMS(FORM)
#undef FORM
#define FORM(D, BN, MT, ST) if (a->dk == D && mt == MT) return launch_flash<D, BN, MT, ST>(a, t, n_tiles, n_splits, part, stream);
    FA_FORMS(FORM)
#undef FORM
    return cudaErrorInvalidValue;
}
