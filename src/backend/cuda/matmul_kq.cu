/* matmul_kq.cu — the batched-decode GEMM of K-quant weights on int8 tensor cores (issue 29).
 *
 * A decode step of 9..256 sequences multiplies every weight matrix by that many activation rows. The f16-cache
 * GEMM reads 2 bytes a weight (14.5 GB a step for mistral-7b Q4_K_M); matmul_dq.cu reads the blocks but spends its
 * time turning codes into f16 for k16 f16 mma. This kernel keeps the integers: the weight codes (Q4_K: 0..15,
 * Q6_K: -32..31) and the activations' Q8_K codes (act_prepare, the mat-vec's activations) go straight into
 * mma.sync s8 (m16n8k32 for a Q4_K sub-block of 32 values, two m16n8k16 for Q6_K's 16-value scale groups); each
 * exact integer dot is scaled by the sub-block's 6-bit / 8-bit scale in int32, and every half super-block (128
 * values, one pipeline stage) the sums become floats as the CPU's vec_dot forms them:
 *     Q4_K: acc += (d_w d_x) isum - (dmin_w d_x) sum_s m_s asum_s      Q6_K: acc += (d_w d_x) isum
 * (asum_s: the sum of the activation codes of sub-block s, from Q8_K's 16-value sums). So the results are the
 * mat-vec's up to the order of the float sums.
 *
 * CTA: 128 threads (4 warps), 128 output rows (a warp: 32 rows = 2 m-tiles of 16), up to 64 activation rows (NT
 * n-tiles of 8); stages of 128 values through a 3-stage cp.async pipeline (weight codes and the super-block's
 * scales, activation codes, the activation sums and scale). Split-K (grid.z) for the narrow matrices: each split
 * writes its partial sums, a second kernel adds them in split order (deterministic).
 *
 * Fragment layout of mma m16n8k32 (s8), g = lane / 4, t = lane % 4: A a0 (row g, k 4t..4t+3), a1 (row g + 8),
 * a2 (row g, k 16 + 4t..), a3 (row g + 8, k 16 + 4t..); B b0 (k 4t.., column g), b1 (k 16 + 4t..); C c0, c1
 * (row g, columns 2t, 2t + 1), c2, c3 (row g + 8). m16n8k16: A a0 (row g, k 4t..), a1 (row g + 8); B b0.
 */
#include "backend/cuda/quant_dev.cuh"

#define KQ_THREADS 128
#define KQ_BM 128 /* output rows per CTA */
#define KQ_KS 128 /* values per stage */
#define KQ_STAGES 3
#define KQ_XP 144 /* activation code row pitch in shared memory (128 + 16: 8 rows x 4 lanes in 32 banks) */

template <qr_type TY> struct kq;

/* Q4_K: p0 = qs[128] per super-block (value 64c + l: byte 32c + l low nibble for l < 32, high nibble of byte
 * 32c + l - 32 above), p1 = {d, dmin, scales[12]}. Stage h of a super-block = its bytes 64h.. (sub-blocks 4h..4h+3);
 * the row's 16 metadata bytes follow its codes. */
template <> struct kq<QR_TYPE_Q4_K> {
    static constexpr int WP = 80, CODE = 64, BLK = 128;
    static __device__ __forceinline__ void copy(uint8_t *dst, const cuda_wview &w, int64_t row, int64_t s) {
        const uint8_t *src = w.p0 + (row * w.nb) * BLK + s * 64;
#pragma unroll
        for (int i = 0; i < 4; i++) cp_async16(dst + 16 * i, src + 16 * i);
        cp_async16(dst + CODE, w.p1 + (row * w.nb + (s >> 1)) * 16);
    }
};

/* Q6_K: p0 = ql[128] | qh[64], p1 = scales[16] (int8, one per 16 values), p2 = d (f16). Value 128h + 32k + l: ql
 * byte 64h + 32 (k & 1) + l (nibble k >> 1), qh byte 32h + l (bits 2k, 2k + 1); q - 32; scale 8h + 2k + l / 16.
 * A row's stage: ql bytes 64h.. (64), qh bytes 32h.. (32), the super-block's 16 scales; and (copy_d, into the
 * stage's row-scale array) the 4-byte word that holds d. */
template <> struct kq<QR_TYPE_Q6_K> {
    static constexpr int WP = 112, CODE = 96, BLK = 192;
    static __device__ __forceinline__ void copy(uint8_t *dst, const cuda_wview &w, int64_t row, int64_t s) {
        const int64_t blk = row * w.nb + (s >> 1);
        const uint8_t *sb = w.p0 + blk * BLK, *ql = sb + 64 * (s & 1), *qh = sb + 128 + 32 * (s & 1);
#pragma unroll
        for (int i = 0; i < 4; i++) cp_async16(dst + 16 * i, ql + 16 * i);
        cp_async16(dst + 64, qh);
        cp_async16(dst + 80, qh + 16);
        cp_async16(dst + 96, w.p1 + blk * 16);
    }
    static __device__ __forceinline__ void copy_d(uint8_t *dst, const cuda_wview &w, int64_t row, int64_t s) {
        const int64_t blk = row * w.nb + (s >> 1);
        cp_async4(dst, w.p2 + (blk * 2 & ~(int64_t)3), 4);
    }
};

static __device__ __forceinline__ void mma_k32(int *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

static __device__ __forceinline__ void mma_k16(int *c, uint32_t a0, uint32_t a1, uint32_t b0) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a0), "r"(a1), "r"(b0));
#endif
}

template <qr_type TY, int NT> struct kq_cfg {
    static constexpr int NTOK = NT * 8;
    static constexpr int O_WD = KQ_BM * kq<TY>::WP;       /* Q6_K: each row's word holding d */
    static constexpr int O_X = O_WD + (TY == QR_TYPE_Q6_K ? KQ_BM * 4 : 0); /* activation codes */
    static constexpr int O_G = O_X + NTOK * KQ_XP;        /* the stage's 8 sums of 16 codes a token (int16) */
    static constexpr int O_D = O_G + NTOK * 16;           /* the token's Q8_K scale of this super-block */
    static constexpr int STAGE = (O_D + NTOK * 4 + 15) / 16 * 16;
    static constexpr int SMEM = KQ_STAGES * STAGE;
};

/* Grid (token tiles, row tiles, splits). y (splits == 1) or part[split] = [n_tok][n_out] f32. x: Q8_K codes
 * [n_tok][k], xd: scales [n_tok][k / 256], xg: sums of 16 codes [n_tok][k / 16]. */
template <qr_type TY, int NT>
static __global__ void __launch_bounds__(KQ_THREADS, 2)
    kq_gemm_kernel(const cuda_wview w, const int8_t *__restrict__ x, const float *__restrict__ xd,
                   const int16_t *__restrict__ xg, int64_t n_tok, int64_t n_out, float *__restrict__ y) {
    typedef kq<TY> D;
    typedef kq_cfg<TY, NT> C;
    extern __shared__ __align__(16) uint8_t sm[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int64_t tok0 = (int64_t)blockIdx.x * C::NTOK, row0 = (int64_t)blockIdx.y * KQ_BM;
    const int64_t k = w.k, n_st = k / KQ_KS;
    const int64_t st0 = n_st * blockIdx.z / gridDim.z, st1 = n_st * (blockIdx.z + 1) / gridDim.z;
    const int n_it = (int)(st1 - st0);
    float *out = y + (int64_t)blockIdx.z * n_tok * n_out;
    const int64_t my_row = row0 + tid < n_out ? row0 + tid : n_out - 1;

    auto load_stage = [&](int it) {
        uint8_t *st = sm + (it % KQ_STAGES) * C::STAGE;
        const int64_t s = st0 + it;
        D::copy(st + tid * D::WP, w, my_row, s);
        if constexpr (TY == QR_TYPE_Q6_K) D::copy_d(st + C::O_WD + tid * 4, w, my_row, s);
        /* activation codes: NTOK rows x 8 chunks of 16 */
#pragma unroll
        for (int i = 0; i < C::NTOK * 8 / KQ_THREADS; i++) {
            const int c = tid + i * KQ_THREADS, r = c >> 3, q = c & 7;
            const bool ok = tok0 + r < n_tok;
            cp_async16(st + C::O_X + r * KQ_XP + q * 16, ok ? x + (tok0 + r) * k + s * KQ_KS + q * 16 : x, ok ? 16 : 0);
        }
        if (tid < C::NTOK) {
            const bool ok = tok0 + tid < n_tok;
            const int64_t tr = ok ? tok0 + tid : 0;
            if constexpr (TY == QR_TYPE_Q4_K) cp_async16(st + C::O_G + tid * 16, xg + tr * (k / 16) + s * 8, ok ? 16 : 0);
            cp_async4(st + C::O_D + tid * 4, xd + tr * (k / 256) + (s >> 1), ok ? 4 : 0);
        }
    };

    float acc[2][NT][4];
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[m][n][i] = 0.0f;

#pragma unroll
    for (int s = 0; s < KQ_STAGES - 1; s++) {
        if (s < n_it) load_stage(s);
        cp_async_commit();
    }
    for (int it = 0; it < n_it; it++) {
        cp_async_wait<KQ_STAGES - 2>();
        __syncthreads(); /* stage it landed for all; stage it - 1 is no longer read */
        if (it + KQ_STAGES - 1 < n_it) load_stage(it + KQ_STAGES - 1);
        cp_async_commit();
        const uint8_t *st = sm + (it % KQ_STAGES) * C::STAGE;
        const int h = (int)((st0 + it) & 1); /* which half of its super-block */
        int isum[2][NT][4];
#pragma unroll
        for (int m = 0; m < 2; m++)
#pragma unroll
            for (int n = 0; n < NT; n++)
#pragma unroll
                for (int i = 0; i < 4; i++) isum[m][n][i] = 0;
        /* this thread's rows: warp * 32 + m * 16 + hh * 8 + g */
        const uint8_t *wr[2][2];
#pragma unroll
        for (int m = 0; m < 2; m++)
#pragma unroll
            for (int hh = 0; hh < 2; hh++) wr[m][hh] = st + (warp * 32 + m * 16 + hh * 8 + g) * D::WP;
        if constexpr (TY == QR_TYPE_Q4_K) {
            uint32_t scw[2][2], mnw[2][2]; /* the 4 sub-blocks' 6-bit scales and mins, a byte each */
#pragma unroll
            for (int m = 0; m < 2; m++)
#pragma unroll
                for (int hh = 0; hh < 2; hh++) {
                    const uint4 meta = *(const uint4 *)(wr[m][hh] + D::CODE);
                    uint32_t a = 0, b = 0;
#pragma unroll
                    for (int j = 0; j < 4; j++) {
                        int sc, mn;
                        kscale_min(meta.y, meta.z, meta.w, 4 * h + j, &sc, &mn);
                        a |= (uint32_t)sc << (8 * j);
                        b |= (uint32_t)mn << (8 * j);
                    }
                    scw[m][hh] = a;
                    mnw[m][hh] = b;
                }
#pragma unroll
            for (int s = 0; s < 4; s++) {
                uint32_t b[NT][2];
#pragma unroll
                for (int n = 0; n < NT; n++) {
                    const uint8_t *xr = st + C::O_X + (n * 8 + g) * KQ_XP + 32 * s + 4 * t;
                    b[n][0] = *(const uint32_t *)xr;
                    b[n][1] = *(const uint32_t *)(xr + 16);
                }
                const int off = 32 * (s >> 1) + 4 * t, sh = 4 * (s & 1);
#pragma unroll
                for (int m = 0; m < 2; m++) {
                    uint32_t a[4];
                    a[0] = (*(const uint32_t *)(wr[m][0] + off) >> sh) & M4;
                    a[1] = (*(const uint32_t *)(wr[m][1] + off) >> sh) & M4;
                    a[2] = (*(const uint32_t *)(wr[m][0] + off + 16) >> sh) & M4;
                    a[3] = (*(const uint32_t *)(wr[m][1] + off + 16) >> sh) & M4;
                    const int sc0 = (int)((scw[m][0] >> (8 * s)) & 0xFF), sc1 = (int)((scw[m][1] >> (8 * s)) & 0xFF);
#pragma unroll
                    for (int n = 0; n < NT; n++) {
                        int c[4] = {0, 0, 0, 0};
                        mma_k32(c, a, b[n][0], b[n][1]);
                        isum[m][n][0] += sc0 * c[0];
                        isum[m][n][1] += sc0 * c[1];
                        isum[m][n][2] += sc1 * c[2];
                        isum[m][n][3] += sc1 * c[3];
                    }
                }
            }
            /* to floats: (d_w d_x) isum - (dmin_w d_x) sum_s m_s asum_s */
#pragma unroll
            for (int n = 0; n < NT; n++)
#pragma unroll
                for (int u = 0; u < 2; u++) {
                    const int tk = n * 8 + 2 * t + u;
                    const uint4 gs = *(const uint4 *)(st + C::O_G + tk * 16);
                    const float dx = *(const float *)(st + C::O_D + tk * 4);
                    /* asum of sub-block j = the two 16-sums 2j, 2j + 1, as int16 pairs for dp2a */
                    const int s0 = (int)(int16_t)(gs.x & 0xFFFF) + (int)(int16_t)(gs.x >> 16);
                    const int s1 = (int)(int16_t)(gs.y & 0xFFFF) + (int)(int16_t)(gs.y >> 16);
                    const int s2 = (int)(int16_t)(gs.z & 0xFFFF) + (int)(int16_t)(gs.z >> 16);
                    const int s3 = (int)(int16_t)(gs.w & 0xFFFF) + (int)(int16_t)(gs.w >> 16);
                    const int p01 = (s0 & 0xFFFF) | (s1 << 16), p23 = (s2 & 0xFFFF) | (s3 << 16);
#pragma unroll
                    for (int m = 0; m < 2; m++)
#pragma unroll
                        for (int hh = 0; hh < 2; hh++) {
                            const uint4 meta = *(const uint4 *)(wr[m][hh] + D::CODE);
                            const float dw = h2f((uint16_t)(meta.x & 0xFFFF)), dmin = h2f((uint16_t)(meta.x >> 16));
                            const int imin = __dp2a_lo(p01, (int)mnw[m][hh], __dp2a_hi(p23, (int)mnw[m][hh], 0));
                            float &o = acc[m][n][2 * hh + u];
                            o += (dx * dw) * (float)isum[m][n][2 * hh + u] - (dx * dmin) * (float)imin;
                        }
                }
        } else { /* Q6_K */
#pragma unroll
            for (int s = 0; s < 4; s++) {
                uint32_t b[NT][2];
#pragma unroll
                for (int n = 0; n < NT; n++) {
                    const uint8_t *xr = st + C::O_X + (n * 8 + g) * KQ_XP + 32 * s + 4 * t;
                    b[n][0] = *(const uint32_t *)xr;
                    b[n][1] = *(const uint32_t *)(xr + 16);
                }
#pragma unroll
                for (int m = 0; m < 2; m++) {
                    uint32_t a[2][2]; /* [16-group][row g, g + 8] */
                    int sc[2][2];
#pragma unroll
                    for (int hh = 0; hh < 2; hh++) {
                        const uint8_t *r = wr[m][hh];
#pragma unroll
                        for (int j = 0; j < 2; j++) {
                            const uint32_t l = *(const uint32_t *)(r + 32 * (s & 1) + 16 * j + 4 * t);
                            const uint32_t qh = *(const uint32_t *)(r + 64 + 16 * j + 4 * t);
                            const uint32_t q = ((l >> (4 * (s >> 1))) & M4) | (((qh >> (2 * s)) & 0x03030303u) << 4);
                            a[j][hh] = __vsub4(q, 0x20202020u);
                            sc[j][hh] = (int)*(const int8_t *)(r + 96 + 8 * h + 2 * s + j);
                        }
                    }
#pragma unroll
                    for (int n = 0; n < NT; n++) {
                        int c0[4] = {0, 0, 0, 0}, c1[4] = {0, 0, 0, 0};
                        mma_k16(c0, a[0][0], a[0][1], b[n][0]);
                        mma_k16(c1, a[1][0], a[1][1], b[n][1]);
                        isum[m][n][0] += sc[0][0] * c0[0] + sc[1][0] * c1[0];
                        isum[m][n][1] += sc[0][0] * c0[1] + sc[1][0] * c1[1];
                        isum[m][n][2] += sc[0][1] * c0[2] + sc[1][1] * c1[2];
                        isum[m][n][3] += sc[0][1] * c0[3] + sc[1][1] * c1[3];
                    }
                }
            }
            float dw[2][2];
#pragma unroll
            for (int m = 0; m < 2; m++)
#pragma unroll
                for (int hh = 0; hh < 2; hh++) {
                    const int rr = warp * 32 + m * 16 + hh * 8 + g; /* the row copied by thread rr (clamped) */
                    const int64_t crow = row0 + rr < n_out ? row0 + rr : n_out - 1;
                    const int64_t blk = crow * w.nb + ((st0 + it) >> 1);
                    dw[m][hh] = h2f(*(const uint16_t *)(st + C::O_WD + rr * 4 + 2 * (int)(blk & 1)));
                }
#pragma unroll
            for (int n = 0; n < NT; n++)
#pragma unroll
                for (int u = 0; u < 2; u++) {
                    const float dx = *(const float *)(st + C::O_D + (n * 8 + 2 * t + u) * 4);
#pragma unroll
                    for (int m = 0; m < 2; m++)
#pragma unroll
                        for (int hh = 0; hh < 2; hh++)
                            acc[m][n][2 * hh + u] += (dx * dw[m][hh]) * (float)isum[m][n][2 * hh + u];
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

/* y[i] = sum over the splits of part[s][i], in split order. */
static __global__ void kq_reduce_kernel(const float *__restrict__ part, int splits, int64_t n, float *__restrict__ y) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float s = part[i];
    for (int p = 1; p < splits; p++) s += part[(int64_t)p * n + i];
    y[i] = s;
}

extern "C" bool qr_cuda_kq_gemm_supported(qr_type type) { return type == QR_TYPE_Q4_K || type == QR_TYPE_Q6_K; }

extern "C" int32_t qr_cuda_kq_gemm_splits(int64_t n_tok, int64_t n_out, int64_t k, int32_t sms) {
    const int64_t nt = n_tok <= 16 ? 16 : n_tok <= 32 ? 32 : 64;
    const int64_t ctas = ((n_tok + nt - 1) / nt) * ((n_out + KQ_BM - 1) / KQ_BM), n_st = k / KQ_KS;
    /* enough CTAs for two waves of two an SM, in whole waves where it can */
    int64_t s = (2 * (int64_t)sms + ctas - 1) / ctas;
    if (s > 8) s = 8;
    if (s > n_st / 4) s = n_st / 4; /* at least 4 stages a split */
    return s < 1 ? 1 : (int32_t)s;
}

template <qr_type TY, int NT>
static cudaError_t launch_kq(const cuda_wview &w, const int8_t *x, const float *xd, const int16_t *xg, int64_t n_tok,
                             int64_t n_out, int32_t splits, float *y, cudaStream_t stream) {
    constexpr int smem = kq_cfg<TY, NT>::SMEM;
    const cudaError_t e = cudaFuncSetAttribute(kq_gemm_kernel<TY, NT>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    const dim3 grid((unsigned)((n_tok + NT * 8 - 1) / (NT * 8)), (unsigned)((n_out + KQ_BM - 1) / KQ_BM), (unsigned)splits);
    kq_gemm_kernel<TY, NT><<<grid, KQ_THREADS, smem, stream>>>(w, x, xd, xg, n_tok, n_out, y);
    return cudaGetLastError();
}

template <qr_type TY>
static cudaError_t launch_kq_nt(const cuda_wview &w, const int8_t *x, const float *xd, const int16_t *xg, int64_t n_tok,
                                int64_t n_out, int32_t splits, float *y, cudaStream_t stream) {
    if (n_tok <= 16) return launch_kq<TY, 2>(w, x, xd, xg, n_tok, n_out, splits, y, stream);
    if (n_tok <= 32) return launch_kq<TY, 4>(w, x, xd, xg, n_tok, n_out, splits, y, stream);
    return launch_kq<TY, 8>(w, x, xd, xg, n_tok, n_out, splits, y, stream);
}

extern "C" cudaError_t qr_cuda_kq_gemm(const cuda_wview *w, const cuda_xview *x, int64_t n_tok, int64_t n_out,
                                       int32_t splits, float *part, float *y, cudaStream_t stream) {
    if (n_tok <= 0) return cudaSuccess;
    if (!qr_cuda_kq_gemm_supported((qr_type)w->type) || w->k % 256 || w->nb != w->k / 256 || n_out <= 0 || splits < 1 ||
        splits > 8 || (splits > 1 && !part) || (n_tok + 63) / 64 > 65535 || (n_out + KQ_BM - 1) / KQ_BM > 65535)
        return cudaErrorInvalidValue;
    float *dst = splits > 1 ? part : y;
    cudaError_t e = w->type == QR_TYPE_Q4_K
                        ? launch_kq_nt<QR_TYPE_Q4_K>(*w, x->q, x->d, x->g, n_tok, n_out, splits, dst, stream)
                        : launch_kq_nt<QR_TYPE_Q6_K>(*w, x->q, x->d, x->g, n_tok, n_out, splits, dst, stream);
    if (e != cudaSuccess || splits == 1) return e;
    const int64_t n = n_tok * n_out;
    kq_reduce_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(part, splits, n, y);
    return cudaGetLastError();
}
