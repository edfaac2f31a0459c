/* matmul_dq.cu — the batched-decode GEMM of K-quant weights on f16 tensor cores, dequantizing in registers.
 *
 * A decode step of 9..256 sequences multiplies every weight matrix by that many activation rows. Through
 * cuBLAS that needs the weights as f16 (the f16 cache: 14.5 GB a step for mistral-7b Q4_K_M, 3.5x the
 * Q4_K bytes), and the step is bound by reading them. This kernel reads the weights once per step in their
 * block format (the plane repack of dequant.cu), turns each weight code into the f16 value the f16 cache
 * would hold (scale x code - min, rounded to f16) in registers, and multiplies with mma.sync m16n8k16
 * (f16 inputs, f32 accumulators) against the activations as f16 (the Q8_K rounding of the cuBLAS path,
 * qr_cuda_act_q8_as_f16). So the numbers are those of the f16-cache GEMM up to the order of the f32 sums
 * and the f16 rounding of the per-sub-block scale and min (a half-ulp of f16 each).
 *
 * CTA: 128 threads (4 warps), 128 output rows (a warp: 32 rows = 2 m-tiles of 16), up to 64 activation rows
 * (NT n-tiles of 8); the K dimension runs in stages of 128 values (half a 256-value super-block) through a
 * 3-stage cp.async pipeline (weight codes, block metadata, activations). After a stage lands, thread r turns
 * row r's metadata into (scale, -min) f16 pairs per 16 values, then the warps compute. Split-K (grid.z)
 * gives the machine enough CTAs for the narrow matrices: each split writes its partial sums and a second
 * kernel adds them in split order (deterministic).
 *
 * The k permutation: mma's k index 2t, 2t+1 (lane t's first A/B register) is value 4t, 4t+1 of the 16 and
 * k 2t+8, 2t+9 is value 4t+2, 4t+3; A and B use the same map, so the dot product is unchanged, and each
 * lane reads 4 consecutive codes of a weight row and 4 consecutive f16 activations (one 8-byte load).
 */
#include <cuda_fp16.h>
#include "backend/cuda/quant_dev.cuh"

#define DQ_THREADS 128
#define DQ_BM 128     /* output rows per CTA */
#define DQ_KS 128     /* values per stage */
#define DQ_STAGES 3
#define DQ_XP 288     /* activation row pitch in shared memory (256 bytes + 32: 16 lanes hit 32 banks) */

/* Per type: the bytes of one row's stage copied to shared memory (codes, then the 16 bytes of the stage's
 * scale-plane entries), the scale plane, and the codes of 4 consecutive values. */
template <qr_type TY> struct dq;

/* Q4_K: p0 = qs[128] per super-block (value 64c + l: byte 32c + l low nibble, 64c + 32 + l high nibble),
 * p1 = {d, dmin, scales[12]}. Stage h (values 128h..) = bytes 64h..64h+63 = sub-blocks 4h..4h+3. Scale plane:
 * per sub-block of 32 the f16 pair {d x sc, -(dmin x m)}, 8 (32 bytes) a super-block. */
template <> struct dq<QR_TYPE_Q4_K> {
    static constexpr int WP = 80;    /* 64 code bytes + 16 scale bytes: 8 rows x 4 lanes in 32 distinct banks */
    static constexpr int CODE = 64, BLK = 128;
    static constexpr int OFF = 1024; /* the f16 magic: 0x6400 | q = 1024 + q */
    /* stage s of the row whose codes start at row (its 64 code bytes: the super-block s / 2, half s % 2) */
    static __device__ __forceinline__ void copy(uint8_t *dst, const uint8_t *row, int64_t s) {
        const uint8_t *src = row + s * 64;
#pragma unroll
        for (int i = 0; i < 4; i++) cp_async16(dst + 16 * i, src + 16 * i);
    }
    static __device__ __forceinline__ void make_scales(const cuda_wview &w, int64_t blk, uint32_t *out) {
        const uint4 m = *(const uint4 *)(w.p1 + blk * 16);
        const float d = h2f((uint16_t)(m.x & 0xFFFF)), dmin = h2f((uint16_t)(m.x >> 16));
#pragma unroll
        for (int s = 0; s < 8; s++) {
            int sc, mn;
            kscale_min(m.y, m.z, m.w, s, &sc, &mn);
            const __half2 e = __floats2half2_rn(__fmul_rn(d, (float)sc), -__fmul_rn(dmin, (float)mn));
            out[s] = *(const uint32_t *)&e;
        }
    }
    /* the {mul, add} pair of values 32s + 16j.. of the stage, from its 16 scale bytes */
    static __device__ __forceinline__ uint32_t scale(const uint8_t *sc, int s, int j) { return *(const uint32_t *)(sc + 4 * s); }
    static __device__ __forceinline__ uint32_t codes(const uint8_t *wrow, int s, int j, int t) {
        const uint32_t w = *(const uint32_t *)(wrow + 32 * (s >> 1) + 16 * j + 4 * t);
        return (w >> (4 * (s & 1))) & 0x0F0F0F0Fu;
    }
};

/* Q6_K: p0 = ql[128] | qh[64], p1 = scales[16] (int8, one per 16 values), p2 = d (f16). Value 128h + 32k + l:
 * ql byte 64h + 32 (k & 1) + l (nibble k >> 1), qh byte 32h + l (bits 2k, 2k + 1); q - 32. Stage h: ql bytes
 * 64h.. (64), qh bytes 32h.. (32). Scale plane: per 16 values the f16 d x sc, 16 (32 bytes) a super-block. */
template <> struct dq<QR_TYPE_Q6_K> {
    static constexpr int WP = 112; /* 96 code bytes + 16 scale bytes */
    static constexpr int CODE = 96, BLK = 192;
    static constexpr int OFF = 1056; /* 1024 + 32: q - 32 */
    static __device__ __forceinline__ void copy(uint8_t *dst, const uint8_t *row, int64_t s) {
        const uint8_t *ql = row + (s >> 1) * 192 + 64 * (s & 1), *qh = row + (s >> 1) * 192 + 128 + 32 * (s & 1);
#pragma unroll
        for (int i = 0; i < 4; i++) cp_async16(dst + 16 * i, ql + 16 * i);
        cp_async16(dst + 64, qh);
        cp_async16(dst + 80, qh + 16);
    }
    static __device__ __forceinline__ void make_scales(const cuda_wview &w, int64_t blk, uint32_t *out) {
        const float d = h2f(*(const uint16_t *)(w.p2 + blk * 2));
#pragma unroll
        for (int e = 0; e < 8; e++) {
            const __half2 v = __floats2half2_rn(__fmul_rn(d, (float)(int8_t)w.p1[blk * 16 + 2 * e]),
                                                __fmul_rn(d, (float)(int8_t)w.p1[blk * 16 + 2 * e + 1]));
            out[e] = *(const uint32_t *)&v;
        }
    }
    static __device__ __forceinline__ uint32_t scale(const uint8_t *sc, int s, int j) {
        const uint16_t m = *(const uint16_t *)(sc + 4 * s + 2 * j);
        return (uint32_t)m << 16 >> 16; /* {mul, add 0} */
    }
    static __device__ __forceinline__ uint32_t codes(const uint8_t *wrow, int s, int j, int t) {
        const uint32_t l = *(const uint32_t *)(wrow + 32 * (s & 1) + 16 * j + 4 * t);
        const uint32_t hb = *(const uint32_t *)(wrow + 64 + 16 * j + 4 * t);
        return ((l >> (4 * (s >> 1))) & 0x0F0F0F0Fu) | (((hb >> (2 * s)) & 0x03030303u) << 4);
    }
};

/* The 4 codes (bytes of c, each < 64) as f16 (code + OFF - OFF) x mul + add, sc = {mul, add}: two half2
 * (values 0,1 and 2,3). */
template <int OFF>
static __device__ __forceinline__ void deq4(uint32_t c, uint32_t sc, uint32_t &lo, uint32_t &hi) {
    const uint32_t h01 = __byte_perm(c, 0x64646464u, 0x5140), h23 = __byte_perm(c, 0x64646464u, 0x7362);
    const uint32_t mw = __byte_perm(sc, 0, 0x1010), aw = __byte_perm(sc, 0, 0x3232);
    const __half2 off = __float2half2_rn((float)OFF);
    const __half2 mul = *(const __half2 *)&mw, add = *(const __half2 *)&aw;
    const __half2 a = __hfma2(__hsub2(*(const __half2 *)&h01, off), mul, add);
    const __half2 b = __hfma2(__hsub2(*(const __half2 *)&h23, off), mul, add);
    lo = *(const uint32_t *)&a;
    hi = *(const uint32_t *)&b;
}

/* No volatile: the compiler may move it among the loads and the dequantization of the next k16 step. */
static __device__ __forceinline__ void mma_f16(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

template <qr_type TY, int NT> struct dq_cfg {
    static constexpr int NTOK = NT * 8;
    static constexpr int O_X = DQ_BM * dq<TY>::WP; /* activations after the weight rows */
    static constexpr int STAGE = O_X + NTOK * DQ_XP;
    static constexpr int SMEM = DQ_STAGES * STAGE;
};

/* The scale plane of a weight: one thread per super-block. */
template <qr_type TY>
static __global__ void dq_scales_kernel(const cuda_wview w, int64_t n_blk, uint32_t *__restrict__ out) {
    const int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= n_blk) return;
    uint32_t e[8];
    dq<TY>::make_scales(w, b, e);
    uint4 *o = (uint4 *)(out + b * 8);
    o[0] = make_uint4(e[0], e[1], e[2], e[3]);
    o[1] = make_uint4(e[4], e[5], e[6], e[7]);
}

/* Grid (token tiles, row tiles, splits). y (splits == 1) or part[split] = [n_tok][n_out] f32. sp: the scale plane. */
template <qr_type TY, int NT>
static __global__ void __launch_bounds__(DQ_THREADS, 2)
    dq_gemm_kernel(const cuda_wview w, const uint8_t *__restrict__ sp, const __half *__restrict__ x, int64_t n_tok,
                   int64_t n_out, float *__restrict__ y) {
    typedef dq<TY> D;
    typedef dq_cfg<TY, NT> C;
    extern __shared__ __align__(16) uint8_t sm[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int64_t tok0 = (int64_t)blockIdx.x * C::NTOK, row0 = (int64_t)blockIdx.y * DQ_BM;
    const int64_t k = w.k, nb = w.nb, n_st = k / DQ_KS;
    const int64_t st0 = n_st * blockIdx.z / gridDim.z, st1 = n_st * (blockIdx.z + 1) / gridDim.z;
    const int n_it = (int)(st1 - st0);
    float *out = y + (int64_t)blockIdx.z * n_tok * n_out;

    /* what this thread copies each stage: row tid's codes and scale-plane entries, and the 16-byte chunk xq of the
     * activation rows xj0, xj0 + 8, ... (fixed bases: a stage only adds its offset) */
    const int64_t my_row = row0 + tid < n_out ? row0 + tid : n_out - 1;
    const uint8_t *wbase = w.p0 + my_row * nb * D::BLK, *sbase = sp + my_row * nb * 32;
    const int xq = tid & 15, xj0 = tid >> 4;
    const __half *xbase = x + (tok0 + xj0) * k + xq * 8;
    auto load_stage = [&](int it) {
        uint8_t *st = sm + (it % DQ_STAGES) * C::STAGE;
        const int64_t s = st0 + it;
        D::copy(st + tid * D::WP, wbase, s);
        cp_async16(st + tid * D::WP + D::CODE, sbase + s * 16);
#pragma unroll
        for (int i = 0; i < NT; i++) {
            const bool ok = tok0 + xj0 + 8 * i < n_tok;
            cp_async16(st + C::O_X + (xj0 + 8 * i) * DQ_XP + xq * 16, ok ? xbase + (int64_t)i * 8 * k + s * DQ_KS : x, ok ? 16 : 0);
        }
    };

    float acc[2][NT][4] = {};

#pragma unroll
    for (int s = 0; s < DQ_STAGES - 1; s++) {
        if (s < n_it) load_stage(s);
        cp_async_commit();
    }
    for (int it = 0; it < n_it; it++) {
        cp_async_wait<DQ_STAGES - 2>();
        __syncthreads(); /* stage it landed for all; stage it - 1 is no longer read */
        if (it + DQ_STAGES - 1 < n_it) load_stage(it + DQ_STAGES - 1);
        cp_async_commit();
        const uint8_t *st = sm + (it % DQ_STAGES) * C::STAGE;
#pragma unroll
        for (int s = 0; s < 4; s++)
#pragma unroll
            for (int j = 0; j < 2; j++) {
                uint32_t b[NT][2];
#pragma unroll
                for (int n = 0; n < NT; n++) {
                    const uint2 v = *(const uint2 *)(st + C::O_X + (n * 8 + g) * DQ_XP + (32 * s + 16 * j + 4 * t) * 2);
                    b[n][0] = v.x;
                    b[n][1] = v.y;
                }
#pragma unroll
                for (int m = 0; m < 2; m++) {
                    const uint8_t *r0 = st + (warp * 32 + m * 16 + g) * D::WP, *r1 = r0 + 8 * D::WP;
                    uint32_t a[4];
                    deq4<D::OFF>(D::codes(r0, s, j, t), D::scale(r0 + D::CODE, s, j), a[0], a[2]);
                    deq4<D::OFF>(D::codes(r1, s, j, t), D::scale(r1 + D::CODE, s, j), a[1], a[3]);
#pragma unroll
                    for (int n = 0; n < NT; n++) mma_f16(acc[m][n], a, b[n][0], b[n][1]);
                }
            }
    }
    cp_async_wait<0>();

#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const int64_t row = row0 + warp * 32 + m * 16 + hh * 8 + g;
            if (row >= n_out) continue;
#pragma unroll
            for (int n = 0; n < NT; n++)
#pragma unroll
                for (int u = 0; u < 2; u++) {
                    const int64_t tok = tok0 + n * 8 + 2 * t + u;
                    if (tok < n_tok) out[tok * n_out + row] = acc[m][n][2 * hh + u];
                }
        }
}

/* y[i] = sum over the splits of part[s][i], in split order (y may be any float offset: scalar accesses). */
static __global__ void dq_reduce_kernel(const float *__restrict__ part, int splits, int64_t n, float *__restrict__ y) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float s = part[i];
    for (int p = 1; p < splits; p++) s += part[(int64_t)p * n + i];
    y[i] = s;
}

extern "C" bool qr_cuda_dq_gemm_supported(qr_type type) { return type == QR_TYPE_Q4_K || type == QR_TYPE_Q6_K; }

extern "C" int32_t qr_cuda_dq_gemm_splits(int64_t n_tok, int64_t n_out, int64_t k, int32_t sms) {
    const int64_t ctas = ((n_tok + 63) / 64) * ((n_out + DQ_BM - 1) / DQ_BM), n_st = k / DQ_KS;
    int64_t s = (2 * (int64_t)sms + ctas - 1) / ctas;
    if (s > 8) s = 8;
    if (s > n_st / 4) s = n_st / 4; /* at least 4 stages a split */
    return s < 1 ? 1 : (int32_t)s;
}

template <qr_type TY, int NT>
static cudaError_t launch_dq(const cuda_wview &w, const uint8_t *sp, const __half *x, int64_t n_tok, int64_t n_out,
                             int32_t splits, float *y, cudaStream_t stream) {
    constexpr int smem = dq_cfg<TY, NT>::SMEM;
    const cudaError_t e = cudaFuncSetAttribute(dq_gemm_kernel<TY, NT>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    const dim3 grid((unsigned)((n_tok + NT * 8 - 1) / (NT * 8)), (unsigned)((n_out + DQ_BM - 1) / DQ_BM), (unsigned)splits);
    dq_gemm_kernel<TY, NT><<<grid, DQ_THREADS, smem, stream>>>(w, sp, x, n_tok, n_out, y);
    return cudaGetLastError();
}

template <qr_type TY>
static cudaError_t launch_dq_nt(const cuda_wview &w, const uint8_t *sp, const __half *x, int64_t n_tok, int64_t n_out,
                                int32_t splits, float *y, cudaStream_t stream) {
    if (n_tok <= 8) return launch_dq<TY, 1>(w, sp, x, n_tok, n_out, splits, y, stream);
    if (n_tok <= 16) return launch_dq<TY, 2>(w, sp, x, n_tok, n_out, splits, y, stream);
    if (n_tok <= 32) return launch_dq<TY, 4>(w, sp, x, n_tok, n_out, splits, y, stream);
    return launch_dq<TY, 8>(w, sp, x, n_tok, n_out, splits, y, stream);
}

extern "C" size_t qr_cuda_dq_scales_bytes(const cuda_wview *w) { return (size_t)(w->n * w->nb) * 32; }

extern "C" cudaError_t qr_cuda_dq_scales(const cuda_wview *w, void *out, cudaStream_t stream) {
    if (!qr_cuda_dq_gemm_supported((qr_type)w->type) || w->nb <= 0) return cudaErrorInvalidValue;
    const int64_t n_blk = w->n * w->nb;
    const unsigned grid = (unsigned)((n_blk + 255) / 256);
    if (w->type == QR_TYPE_Q4_K) dq_scales_kernel<QR_TYPE_Q4_K><<<grid, 256, 0, stream>>>(*w, n_blk, (uint32_t *)out);
    else dq_scales_kernel<QR_TYPE_Q6_K><<<grid, 256, 0, stream>>>(*w, n_blk, (uint32_t *)out);
    return cudaGetLastError();
}

extern "C" cudaError_t qr_cuda_dq_gemm(const cuda_wview *w, const void *scales, const void *xh, int64_t n_tok, int64_t n_out,
                                       int32_t splits, float *part, float *y, cudaStream_t stream) {
    if (n_tok <= 0) return cudaSuccess;
    if (!qr_cuda_dq_gemm_supported((qr_type)w->type) || w->k % 256 || w->nb != w->k / 256 || n_out <= 0 || splits < 1 ||
        splits > 8 || (splits > 1 && !part) || (n_tok + 63) / 64 > 65535 || (n_out + DQ_BM - 1) / DQ_BM > 65535)
        return cudaErrorInvalidValue;
    float *dst = splits > 1 ? part : y;
    const __half *x = (const __half *)xh;
    const uint8_t *sp = (const uint8_t *)scales;
    cudaError_t e = w->type == QR_TYPE_Q4_K ? launch_dq_nt<QR_TYPE_Q4_K>(*w, sp, x, n_tok, n_out, splits, dst, stream)
                                            : launch_dq_nt<QR_TYPE_Q6_K>(*w, sp, x, n_tok, n_out, splits, dst, stream);
    if (e != cudaSuccess || splits == 1) return e;
    const int64_t n = n_tok * n_out;
    dq_reduce_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(part, splits, n, y);
    return cudaGetLastError();
}
