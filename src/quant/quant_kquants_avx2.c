/* quant_kquants_avx2.c — AVX2 + FMA + F16C dot products of the K-quants against Q8_K.
 *
 * Each super-block's integer sum (sum of scale * code * activation code) is computed exactly in
 * 8 int32 lanes with maddubs/madd (one helper per type, *_sb); the min / offset terms come from the
 * Q8_K block sums. Only the float accumulation differs between the variants, each of which follows
 * one of llama.cpp's x86 kernels operation for operation:
 *   qr_vec_dot_*_avx2        ggml_vec_dot_*_q8_K (8 float lanes per super-block, fma, then a sum);
 *   qr_vec_dot_*_tiled_avx2  the tiled GEMM of ggml-cpu tiled.cpp (whole super-block sums);
 *   qr_vec_dot_q4_K_*_gemv/gemm_avx2  the repacked Q4_K GEMV / GEMM (repack.cpp).
 */
#include <math.h>

#include "quant/quant_avx2_common.h"
#include "quant/quant_internal.h"

/* pshufb masks. k4[k]: broadcast int16 element k (0..7) to all 16 lanes of both halves.
 * q3k[k]: int16 element 2k in the low half, 2k+1 in the high half (the two 16-value sub-blocks of a
 * 32-value vector). pair[p] (16 bytes): byte 2p eight times, then byte 2p+1 eight times. */
static const struct {
    uint8_t k4[8][32];
    uint8_t q3k[4][32];
    uint8_t pair[8][16];
} shuffle_masks = {
    .k4 = {
        {0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1},
        {2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3},
        {4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5},
        {6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7},
        {8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9},
        {10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11},
        {12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13},
        {14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15}},
    .q3k = {
        {0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3},
        {4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7},
        {8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11},
        {12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15}},
    .pair = {
        {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1},
        {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
        {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5},
        {6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
        {8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9},
        {10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11},
        {12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13},
        {14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15}},
};

static inline __m256i load256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* Sum of the 4 int32 lanes (exact). */
static inline int hsum_epi32_128(__m128i r) {
    r = _mm_add_epi32(r, _mm_shuffle_epi32(r, _MM_SHUFFLE(1, 0, 3, 2)));
    r = _mm_add_epi32(r, _mm_shuffle_epi32(r, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(r);
}

/* One super-block step of ggml's tiled K-quant GEMM: res = dx * s1, minus dmin * s2 fused (0, 0
 * for types without mins), acc = fma(res, dy, acc). */
static inline float tiled_step(float acc, float dx, float dmin, int s1, int s2, float dy) {
    return fmaf(fmaf(-dmin, (float)s2, dx * (float)s1), dy, acc);
}

/* ------------------------------------------------------------------------------------------------
 * Q2_K
 * ---------------------------------------------------------------------------------------------- */

/* One Q2_K x Q8_K super-block: 8 lanes summing to sum(sc*q*qy); *mins: 8 lanes summing to
 * sum(m*bsum). Exact. */
static inline __m256i q2_K_sb(const qr_block_q2_K *x, const qr_block_q8_K *y, __m256i *mins) {
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m128i m4 = _mm_set1_epi8(0xF);
    const uint8_t *q2 = x->qs;
    const int8_t *q8 = y->qs;
    const __m128i packed = _mm_loadu_si128((const __m128i *)x->scales);
    *mins = _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), m4)), load256(y->bsums));
    const __m256i all = _mm256_cvtepi8_epi16(_mm_and_si128(packed, m4));
    const __m128i lo = _mm256_castsi256_si128(all), hi = _mm256_extracti128_si256(all, 1);
    const __m256i scales[2] = {_mm256_set_m128i(lo, lo), _mm256_set_m128i(hi, hi)};
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < 2; j++, q2 += 32) {
        const __m256i bits = load256(q2);
        for (int k = 0; k < 4; k++, q8 += 32) {
            const __m256i q = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * k), m3);
            const __m256i p = _mm256_maddubs_epi16(q, load256(q8));
            const __m256i sc = _mm256_shuffle_epi8(scales[j], load256(shuffle_masks.q3k[k]));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(sc, p));
        }
    }
    return sumi;
}

void qr_vec_dot_q2_K_q8_K_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const qr_block_q2_K *x = vx;
    const qr_block_q8_K *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QR_QK_K; i++) {
        const float d = y[i].d * f16c_to_fp32(x[i].d);
        const float dmin = -y[i].d * f16c_to_fp32(x[i].dmin);
        __m256i prod;
        const __m256i sumi = q2_K_sb(&x[i], &y[i], &prod);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(prod), acc);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *s = hsum_ps(acc);
}

void qr_vec_dot_q2_K_q8_K_tiled_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const qr_block_q2_K *x = vx;
    const qr_block_q8_K *y = vy;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QR_QK_K; i++) {
        __m256i prod;
        const __m256i sumi = q2_K_sb(&x[i], &y[i], &prod);
        acc = tiled_step(acc, f16c_to_fp32(x[i].d), f16c_to_fp32(x[i].dmin), hsum_epi32(sumi), hsum_epi32(prod), y[i].d);
    }
    *s = acc;
}

/* ------------------------------------------------------------------------------------------------
 * Q3_K
 * ---------------------------------------------------------------------------------------------- */

/* The 16 signed scales (sc - 32) of a Q3_K block as 16 int8 lanes. */
static inline __m128i q3_K_scales_128(const uint8_t *packed) {
    uint32_t a[3];
    memcpy(a, packed, 12);
    const uint32_t lo4 = 0x0f0f0f0fu, hi2 = 0x03030303u;
    const __m128i sc = _mm_set_epi32((int)(((a[1] >> 4) & lo4) | (((a[2] >> 6) & hi2) << 4)),
                                     (int)(((a[0] >> 4) & lo4) | (((a[2] >> 4) & hi2) << 4)),
                                     (int)((a[1] & lo4) | (((a[2] >> 2) & hi2) << 4)),
                                     (int)((a[0] & lo4) | ((a[2] & hi2) << 4)));
    return _mm_sub_epi8(sc, _mm_set1_epi8(32));
}

/* One Q3_K x Q8_K super-block: 8 lanes summing to sum(sc*q*qy). Exact. */
static inline __m256i q3_K_sb(const qr_block_q3_K *x, const qr_block_q8_K *y) {
    const __m256i m3 = _mm256_set1_epi8(3), m1 = _mm256_set1_epi8(1);
    const uint8_t *q3 = x->qs;
    const int8_t *q8 = y->qs;
    const __m256i all = _mm256_cvtepi8_epi16(q3_K_scales_128(x->scales));
    const __m128i lo = _mm256_castsi256_si128(all), hi = _mm256_extracti128_si256(all, 1);
    const __m256i scales[2] = {_mm256_set_m128i(lo, lo), _mm256_set_m128i(hi, hi)};
    /* a clear high bit means "minus 4" */
    const __m256i minus4 = _mm256_xor_si256(load256(x->hmask), _mm256_set1_epi8(-1));
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < 2; j++, q3 += 32) {
        const __m256i bits = load256(q3);
        for (int k = 0; k < 4; k++, q8 += 32) {
            const __m256i y8 = load256(q8);
            const __m256i ql = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * k), m3);
            const __m256i qh = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(minus4, 4 * j + k), m1), 2);
            const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(ql, y8), _mm256_maddubs_epi16(qh, y8));
            const __m256i sc = _mm256_shuffle_epi8(scales[j], load256(shuffle_masks.q3k[k]));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(sc, p));
        }
    }
    return sumi;
}

void qr_vec_dot_q3_K_q8_K_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const qr_block_q3_K *x = vx;
    const qr_block_q8_K *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QR_QK_K; i++) {
        const float d = y[i].d * f16c_to_fp32(x[i].d);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(q3_K_sb(&x[i], &y[i])), acc);
    }
    *s = hsum_ps(acc);
}

void qr_vec_dot_q3_K_q8_K_tiled_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const qr_block_q3_K *x = vx;
    const qr_block_q8_K *y = vy;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QR_QK_K; i++)
        acc = tiled_step(acc, f16c_to_fp32(x[i].d), 0.0f, hsum_epi32(q3_K_sb(&x[i], &y[i])), 0, y[i].d);
    *s = acc;
}

/* ------------------------------------------------------------------------------------------------
 * Q4_K / Q5_K
 * ---------------------------------------------------------------------------------------------- */

/* Shared min term of Q4_K / Q5_K: 4 int32 lanes whose sum is sum_j m_j * (bsums of sub-block j). */
static inline __m128i k4_min_products(__m256i mins_and_scales, const int16_t *bsums) {
    const __m256i b = load256(bsums);
    const __m128i per32 = _mm_hadd_epi16(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
    return _mm_madd_epi16(_mm256_extracti128_si256(mins_and_scales, 1), per32);
}

void qr_vec_dot_q4_K_q8_K_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const qr_block_q4_K *x = vx;
    const qr_block_q8_K *y = vy;
    const __m256i m4 = _mm256_set1_epi8(0xF);
    __m256 acc = _mm256_setzero_ps();
    __m128 acc_m = _mm_setzero_ps();
    for (int64_t i = 0; i < n / QR_QK_K; i++) {
        const float d = y[i].d * f16c_to_fp32(x[i].d);
        const float dmin = -y[i].d * f16c_to_fp32(x[i].dmin);
        const __m256i mins_and_scales = _mm256_cvtepu8_epi16(k4_scales_mins(x[i].scales));
        acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(k4_min_products(mins_and_scales, y[i].bsums)), acc_m);
        const __m128i sc128 = _mm256_castsi256_si128(mins_and_scales);
        const __m256i scales = _mm256_set_m128i(sc128, sc128);
        const uint8_t *q4 = x[i].qs;
        const int8_t *q8 = y[i].qs;
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < 4; j++, q4 += 32, q8 += 64) {
            const __m256i bits = load256(q4);
            const __m256i lo = _mm256_and_si256(bits, m4);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
            const __m256i pl = _mm256_madd_epi16(_mm256_shuffle_epi8(scales, load256(shuffle_masks.k4[2 * j])),
                                                 _mm256_maddubs_epi16(lo, load256(q8)));
            const __m256i ph = _mm256_madd_epi16(_mm256_shuffle_epi8(scales, load256(shuffle_masks.k4[2 * j + 1])),
                                                 _mm256_maddubs_epi16(hi, load256(q8 + 32)));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *s = hsum_ps(acc) + hsum_ps128(acc_m);
}

/* Integer sums of one Q4_K x Q8_K super-block per pair c (lane c) of 32-value sub-blocks:
 * *isum = sum of sc * q * qy, *imin = sum of m * bsum. Exact. */
static inline void q4_K_pair_sums(const qr_block_q4_K *x, const qr_block_q8_K *y, __m128i *isum, __m128i *imin) {
    const __m256i m4 = _mm256_set1_epi8(0xF);
    const __m256i mins_and_scales = _mm256_cvtepu8_epi16(k4_scales_mins(x->scales));
    *imin = k4_min_products(mins_and_scales, y->bsums);
    const __m128i sc128 = _mm256_castsi256_si128(mins_and_scales);
    const __m256i scales = _mm256_set_m128i(sc128, sc128);
    const uint8_t *q4 = x->qs;
    const int8_t *q8 = y->qs;
    __m256i p[4];
    for (int j = 0; j < 4; j++, q4 += 32, q8 += 64) {
        const __m256i bits = load256(q4);
        const __m256i lo = _mm256_and_si256(bits, m4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
        const __m256i pl = _mm256_madd_epi16(_mm256_shuffle_epi8(scales, load256(shuffle_masks.k4[2 * j])),
                                             _mm256_maddubs_epi16(lo, load256(q8)));
        const __m256i ph = _mm256_madd_epi16(_mm256_shuffle_epi8(scales, load256(shuffle_masks.k4[2 * j + 1])),
                                             _mm256_maddubs_epi16(hi, load256(q8 + 32)));
        p[j] = _mm256_add_epi32(pl, ph);
    }
    /* lane c of each half <- partial sums of p[c]; then add the halves */
    const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
    *isum = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

/* ggml's repacked Q4_K GEMV order (see qr_vec_dot_q4_K_q8_K_gemv): one fma per super-block. */
void qr_vec_dot_q4_K_q8_K_gemv_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const qr_block_q4_K *x = vx;
    const qr_block_q8_K *y = vy;
    float acc = 0.0f, acc_min = 0.0f;
    for (int64_t i = 0; i < n / QR_QK_K; i++) {
        __m128i isum, imin;
        q4_K_pair_sums(&x[i], &y[i], &isum, &imin);
        const float d = f16c_to_fp32(x[i].d) * y[i].d, dmin = f16c_to_fp32(x[i].dmin) * y[i].d;
        acc = fmaf((float)hsum_epi32_128(isum), d, acc);
        acc_min = fmaf((float)hsum_epi32_128(imin), dmin, acc_min);
    }
    *s = acc - acc_min;
}

/* ggml's repacked Q4_K GEMM order (see qr_vec_dot_q4_K_q8_K_gemm): one fma per sub-block pair. */
void qr_vec_dot_q4_K_q8_K_gemm_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const qr_block_q4_K *x = vx;
    const qr_block_q8_K *y = vy;
    float acc = 0.0f, acc_min = 0.0f;
    for (int64_t i = 0; i < n / QR_QK_K; i++) {
        __m128i isum, imin;
        q4_K_pair_sums(&x[i], &y[i], &isum, &imin);
        const float d = f16c_to_fp32(x[i].d) * y[i].d, dmin = f16c_to_fp32(x[i].dmin) * y[i].d;
        float fs[4], fm[4];
        _mm_storeu_ps(fs, _mm_cvtepi32_ps(isum));
        _mm_storeu_ps(fm, _mm_cvtepi32_ps(imin));
        for (int c = 0; c < 4; c++) {
            acc = fmaf(fs[c], d, acc);
            acc_min = fmaf(fm[c], dmin, acc_min);
        }
    }
    *s = acc - acc_min;
}

/* Tiles of the repacked Q4_K GEMM / GEMV orders (qr_vec_dot_tile_fn): nr rows x nc activation rows,
 * each dot with exactly the integer sums of q4_K_pair_sums and the float steps of the _gemm / _gemv
 * kernels above (bit-identical), the weight unpacking done once per row and block for all nc. */
static inline __attribute__((always_inline)) void tile_q4_K(int64_t n, float *s, int64_t bs, const char *vx, size_t bx,
                                                            const char *vy, size_t by, const int NR, const int NC,
                                                            const int gemm) {
    const __m256i m4 = _mm256_set1_epi8(0xF);
    float acc[4][4], acc_min[4][4];
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) acc[r][c] = acc_min[r][c] = 0.0f;
    for (int64_t i = 0; i < n / QR_QK_K; i++) {
        for (int r = 0; r < NR; r++) {
            const qr_block_q4_K *x = (const qr_block_q4_K *)(vx + (size_t)r * bx) + i;
            const __m256i mins_and_scales = _mm256_cvtepu8_epi16(k4_scales_mins(x->scales));
            const __m128i sc128 = _mm256_castsi256_si128(mins_and_scales);
            const __m256i scales = _mm256_set_m128i(sc128, sc128);
            __m256i lo[4], hi[4], sl[4], sh[4];
            for (int j = 0; j < 4; j++) {
                const __m256i bits = load256(x->qs + 32 * j);
                lo[j] = _mm256_and_si256(bits, m4);
                hi[j] = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
                sl[j] = _mm256_shuffle_epi8(scales, load256(shuffle_masks.k4[2 * j]));
                sh[j] = _mm256_shuffle_epi8(scales, load256(shuffle_masks.k4[2 * j + 1]));
            }
            const float xd = f16c_to_fp32(x->d), xdmin = f16c_to_fp32(x->dmin);
            for (int c = 0; c < NC; c++) {
                const qr_block_q8_K *y = (const qr_block_q8_K *)(vy + (size_t)c * by) + i;
                const __m128i imin = k4_min_products(mins_and_scales, y->bsums);
                __m256i p[4];
                for (int j = 0; j < 4; j++) {
                    const __m256i pl = _mm256_madd_epi16(sl[j], _mm256_maddubs_epi16(lo[j], load256(y->qs + 64 * j)));
                    const __m256i ph = _mm256_madd_epi16(sh[j], _mm256_maddubs_epi16(hi[j], load256(y->qs + 64 * j + 32)));
                    p[j] = _mm256_add_epi32(pl, ph);
                }
                const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
                const __m128i isum = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
                const float d = xd * y->d, dmin = xdmin * y->d;
                if (gemm) {
                    float fs[4], fm[4];
                    _mm_storeu_ps(fs, _mm_cvtepi32_ps(isum));
                    _mm_storeu_ps(fm, _mm_cvtepi32_ps(imin));
                    for (int k = 0; k < 4; k++) {
                        acc[r][c] = fmaf(fs[k], d, acc[r][c]);
                        acc_min[r][c] = fmaf(fm[k], dmin, acc_min[r][c]);
                    }
                } else {
                    acc[r][c] = fmaf((float)hsum_epi32_128(isum), d, acc[r][c]);
                    acc_min[r][c] = fmaf((float)hsum_epi32_128(imin), dmin, acc_min[r][c]);
                }
            }
        }
    }
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) s[(int64_t)c * bs + r] = acc[r][c] - acc_min[r][c];
}

#define KTILE_CASE(G, R, C) \
    case (R) * 8 + (C): tile_q4_K(n, s, bs, vx, bx, vy, by, R, C, G); return;
#define KTILE_ROW(G, R) KTILE_CASE(G, R, 1) KTILE_CASE(G, R, 2) KTILE_CASE(G, R, 3) KTILE_CASE(G, R, 4)

void qr_vec_dot_tile_q4_K_q8_K_gemm_avx2(int64_t n, float *s, int64_t bs, const void *x, size_t bx, const void *y,
                                         size_t by, int nr, int nc) {
    const char *vx = x, *vy = y;
    switch (nr * 8 + nc) {
        KTILE_ROW(1, 1) KTILE_ROW(1, 2) KTILE_ROW(1, 3) KTILE_ROW(1, 4)
    default: return;
    }
}

void qr_vec_dot_tile_q4_K_q8_K_gemv_avx2(int64_t n, float *s, int64_t bs, const void *x, size_t bx, const void *y,
                                         size_t by, int nr, int nc) {
    const char *vx = x, *vy = y;
    switch (nr * 8 + nc) {
        KTILE_ROW(0, 1) KTILE_ROW(0, 2) KTILE_ROW(0, 3) KTILE_ROW(0, 4)
    default: return;
    }
}

/* ggml's tiled order for Q4_K (weights it does not repack). */
void qr_vec_dot_q4_K_q8_K_tiled_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const qr_block_q4_K *x = vx;
    const qr_block_q8_K *y = vy;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QR_QK_K; i++) {
        __m128i isum, imin;
        q4_K_pair_sums(&x[i], &y[i], &isum, &imin);
        acc = tiled_step(acc, f16c_to_fp32(x[i].d), f16c_to_fp32(x[i].dmin), hsum_epi32_128(isum), hsum_epi32_128(imin),
                         y[i].d);
    }
    *s = acc;
}

/* One Q5_K x Q8_K super-block: 8 lanes summing to sum(sc*q*qy); *mins: 4 lanes summing to
 * sum(m*bsum). Exact. */
static inline __m256i q5_K_sb(const qr_block_q5_K *x, const qr_block_q8_K *y, __m128i *mins) {
    const __m256i m4 = _mm256_set1_epi8(0xF), m1 = _mm256_set1_epi8(1);
    const __m256i mins_and_scales = _mm256_cvtepu8_epi16(k4_scales_mins(x->scales));
    *mins = k4_min_products(mins_and_scales, y->bsums);
    const __m128i sc128 = _mm256_castsi256_si128(mins_and_scales);
    const __m256i scales = _mm256_set_m128i(sc128, sc128);
    const __m256i hbits = load256(x->qh);
    const uint8_t *q5 = x->qs;
    const int8_t *q8 = y->qs;
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < 4; j++, q5 += 32, q8 += 64) {
        const __m256i bits = load256(q5);
        const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 2 * j), m1), 4);
        const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 2 * j + 1), m1), 4);
        const __m256i lo = _mm256_or_si256(_mm256_and_si256(bits, m4), h0);
        const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 4), m4), h1);
        const __m256i pl = _mm256_madd_epi16(_mm256_shuffle_epi8(scales, load256(shuffle_masks.k4[2 * j])),
                                             _mm256_maddubs_epi16(lo, load256(q8)));
        const __m256i ph = _mm256_madd_epi16(_mm256_shuffle_epi8(scales, load256(shuffle_masks.k4[2 * j + 1])),
                                             _mm256_maddubs_epi16(hi, load256(q8 + 32)));
        sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
    }
    return sumi;
}

void qr_vec_dot_q5_K_q8_K_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const qr_block_q5_K *x = vx;
    const qr_block_q8_K *y = vy;
    __m256 acc = _mm256_setzero_ps();
    float summs = 0.0f; /* ggml's order: the min term as one scalar fma per super-block */
    for (int64_t i = 0; i < n / QR_QK_K; i++) {
        const float d = y[i].d * f16c_to_fp32(x[i].d);
        const float dmin = -y[i].d * f16c_to_fp32(x[i].dmin);
        __m128i mins;
        const __m256i sumi = q5_K_sb(&x[i], &y[i], &mins);
        summs = fmaf((float)hsum_epi32_128(mins), dmin, summs);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *s = hsum_ps(acc) + summs;
}

void qr_vec_dot_q5_K_q8_K_tiled_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const qr_block_q5_K *x = vx;
    const qr_block_q8_K *y = vy;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QR_QK_K; i++) {
        __m128i mins;
        const __m256i sumi = q5_K_sb(&x[i], &y[i], &mins);
        acc = tiled_step(acc, f16c_to_fp32(x[i].d), f16c_to_fp32(x[i].dmin), hsum_epi32(sumi), hsum_epi32_128(mins),
                         y[i].d);
    }
    *s = acc;
}

/* ------------------------------------------------------------------------------------------------
 * Q6_K
 * ---------------------------------------------------------------------------------------------- */

/* One Q6_K x Q8_K super-block: 8 lanes summing to sum(sc*(q-32)*qy), exact, in ggml's lanes: the
 * codes taken unsigned (0..63), then lane l minus 32 * (sc[2l] * bsum[2l] + sc[2l+1] * bsum[2l+1]). */
static inline __m256i q6_K_sb(const qr_block_q6_K *x, const qr_block_q8_K *y) {
    const __m256i m4 = _mm256_set1_epi8(0xF), m3 = _mm256_set1_epi8(3);
    const __m128i sc8 = _mm_loadu_si128((const __m128i *)x->scales);
    const uint8_t *ql = x->ql, *qh = x->qh;
    const int8_t *q8 = y->qs;
    const __m256i offset =
        _mm256_slli_epi32(_mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8), load256(y->bsums)), 5);
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < 2; j++, ql += 64, qh += 32, q8 += 128) {
        const __m256i l1 = load256(ql), l2 = load256(ql + 32), h = load256(qh);
        __m256i q[4];
        q[0] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_slli_epi16(_mm256_and_si256(h, m3), 4));
        q[1] = _mm256_or_si256(_mm256_and_si256(l2, m4),
                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m3), 4));
        q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m3), 4));
        q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l2, 4), m4),
                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m3), 4));
        for (int k = 0; k < 4; k++) {
            const __m256i p = _mm256_maddubs_epi16(q[k], load256(q8 + 32 * k)); /* codes 0..63, no overflow */
            const __m128i sc_pair = _mm_shuffle_epi8(sc8, _mm_loadu_si128((const __m128i *)shuffle_masks.pair[4 * j + k]));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc_pair), p));
        }
    }
    return _mm256_sub_epi32(sumi, offset);
}

void qr_vec_dot_q6_K_q8_K_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const qr_block_q6_K *x = vx;
    const qr_block_q8_K *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QR_QK_K; i++) {
        const float d = y[i].d * f16c_to_fp32(x[i].d);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(q6_K_sb(&x[i], &y[i])), acc);
    }
    *s = hsum_ps(acc);
}

void qr_vec_dot_q6_K_q8_K_tiled_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const qr_block_q6_K *x = vx;
    const qr_block_q8_K *y = vy;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QR_QK_K; i++)
        acc = tiled_step(acc, f16c_to_fp32(x[i].d), 0.0f, hsum_epi32(q6_K_sb(&x[i], &y[i])), 0, y[i].d);
    *s = acc;
}

/* Tiles of the tiled-GEMM Q6_K order (qr_vec_dot_tile_fn): each dot bit-identical to
 * qr_vec_dot_q6_K_q8_K_tiled_avx2 (same exact integer sums, same tiled_step), the codes and scales of
 * a weight block unpacked once for all nc activation rows. */
static inline __attribute__((always_inline)) void tile_q6_K(int64_t n, float *s, int64_t bs, const char *vx, size_t bx,
                                                            const char *vy, size_t by, const int NR, const int NC) {
    const __m256i m4 = _mm256_set1_epi8(0xF), m3 = _mm256_set1_epi8(3);
    float acc[4][4];
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) acc[r][c] = 0.0f;
    for (int64_t i = 0; i < n / QR_QK_K; i++) {
        for (int r = 0; r < NR; r++) {
            const qr_block_q6_K *x = (const qr_block_q6_K *)(vx + (size_t)r * bx) + i;
            const __m128i sc8 = _mm_loadu_si128((const __m128i *)x->scales);
            const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
            __m256i q[8], sc[8];
            for (int j = 0; j < 2; j++) {
                const uint8_t *ql = x->ql + 64 * j, *qh = x->qh + 32 * j;
                const __m256i l1 = load256(ql), l2 = load256(ql + 32), h = load256(qh);
                q[4 * j + 0] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_slli_epi16(_mm256_and_si256(h, m3), 4));
                q[4 * j + 1] = _mm256_or_si256(_mm256_and_si256(l2, m4),
                                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m3), 4));
                q[4 * j + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m3), 4));
                q[4 * j + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l2, 4), m4),
                                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m3), 4));
                for (int k = 0; k < 4; k++)
                    sc[4 * j + k] = _mm256_cvtepi8_epi16(
                        _mm_shuffle_epi8(sc8, _mm_loadu_si128((const __m128i *)shuffle_masks.pair[4 * j + k])));
            }
            const float dx = f16c_to_fp32(x->d);
            for (int c = 0; c < NC; c++) {
                const qr_block_q8_K *y = (const qr_block_q8_K *)(vy + (size_t)c * by) + i;
                const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(sc16, load256(y->bsums)), 5);
                __m256i sumi = _mm256_setzero_si256();
                for (int e = 0; e < 8; e++)
                    sumi = _mm256_add_epi32(
                        sumi, _mm256_madd_epi16(sc[e], _mm256_maddubs_epi16(q[e], load256(y->qs + 32 * e))));
                acc[r][c] = tiled_step(acc[r][c], dx, 0.0f, hsum_epi32(_mm256_sub_epi32(sumi, offset)), 0, y->d);
            }
        }
    }
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) s[(int64_t)c * bs + r] = acc[r][c];
}

#define Q6TILE_CASE(R, C) \
    case (R) * 8 + (C): tile_q6_K(n, s, bs, vx, bx, vy, by, R, C); return;
#define Q6TILE_ROW(R) Q6TILE_CASE(R, 1) Q6TILE_CASE(R, 2) Q6TILE_CASE(R, 3) Q6TILE_CASE(R, 4)

void qr_vec_dot_tile_q6_K_q8_K_tiled_avx2(int64_t n, float *s, int64_t bs, const void *x, size_t bx, const void *y,
                                          size_t by, int nr, int nc) {
    const char *vx = x, *vy = y;
    switch (nr * 8 + nc) {
        Q6TILE_ROW(1) Q6TILE_ROW(2) Q6TILE_ROW(3) Q6TILE_ROW(4)
    default: return;
    }
}

/* ---- Q4_K repacked 8 rows at a time (AVX2; rows in the ymm lanes) ---------------------------------------------
 * quant_kquants_avx512.c's 16-row form with 8 rows a ymm register and no VNNI: lane r of a vpmaddubsw is row r's 4
 * codes times 4 activation bytes broadcast (two int16 pair sums); the 8 of a 32-value sub-block add up exactly in
 * int16 (|sum| <= 8 * 2 * 15 * 128), and one vpmaddwd with the sub-block's scale in both halves of the lane gives
 * scale * (the sub-block sum) in int32: the pair sums, the mins and the float steps are the GEMM / GEMV orders'.
 * Layout of a group of 8 rows, per super-block (1184 bytes, super-blocks consecutive):
 *   [0, 1024)     codes: [pair k][t 0..7][row r][4 bytes]: row r's qs[32k + 4t .. + 3]
 *   [1024, 1088)  scales: [sub-block 0..7][row] u8
 *   [1088, 1152)  mins: [pair k][row][2] u8
 *   [1152, 1168)  d: [row] f16;  [1168, 1184) dmin: [row] f16 */
#define RP8_SB 1184

static inline int32_t rp8k_load_i32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* The 8 rows' scales of sub-block j as int16 pairs (sc, sc) a lane. */
static inline __m256i rp8_scale_pairs(const uint8_t *p) {
    const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
    return _mm256_or_si256(v, _mm256_slli_epi32(v, 16));
}

static inline __attribute__((always_inline)) void tile_q4_K_rp8(int64_t n, float *s, int64_t bs, const char *vx,
                                                                const char *vy, size_t by, const int NC, const int gemm) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), zero = _mm256_setzero_si256();
    __m256 acc[4], accm[4];
    for (int c = 0; c < NC; c++) acc[c] = accm[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QR_QK_K; i++) {
        const uint8_t *xb = (const uint8_t *)vx + (size_t)i * RP8_SB;
        const int8_t *yq[4];
        int32_t pb[4][4];
        __m256 dc[4], dmc[4];
        const __m256 dx = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(xb + 1152)));
        const __m256 dmx = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(xb + 1168)));
        for (int c = 0; c < NC; c++) {
            const qr_block_q8_K *y = (const qr_block_q8_K *)(vy + (size_t)c * by) + i;
            yq[c] = y->qs;
            const __m256 yd = _mm256_set1_ps(y->d);
            dc[c] = _mm256_mul_ps(dx, yd);
            dmc[c] = _mm256_mul_ps(dmx, yd);
            const __m256i b = _mm256_loadu_si256((const __m256i *)y->bsums);
            _mm_storeu_si128((__m128i *)pb[c], _mm_hadd_epi16(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1)));
        }
        __m256i ist[4], imt[4];
        for (int c = 0; c < NC; c++) ist[c] = imt[c] = zero;
        for (int k = 0; k < 4; k++) {
            __m256i a[4], b[4];
            for (int c = 0; c < NC; c++) a[c] = b[c] = zero;
            for (int t = 0; t < 8; t++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(xb + (k * 8 + t) * 32));
                const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                for (int c = 0; c < NC; c++) {
                    a[c] = _mm256_add_epi16(a[c], _mm256_maddubs_epi16(lo, _mm256_set1_epi32(rp8k_load_i32(yq[c] + 64 * k + 4 * t))));
                    b[c] = _mm256_add_epi16(
                        b[c], _mm256_maddubs_epi16(hi, _mm256_set1_epi32(rp8k_load_i32(yq[c] + 64 * k + 32 + 4 * t))));
                }
            }
            const __m256i sca = rp8_scale_pairs(xb + 1024 + 16 * k), scb = rp8_scale_pairs(xb + 1024 + 16 * k + 8);
            const __m256i mn = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(xb + 1088 + 16 * k)));
            for (int c = 0; c < NC; c++) {
                const __m256i is = _mm256_add_epi32(_mm256_madd_epi16(a[c], sca), _mm256_madd_epi16(b[c], scb));
                const __m256i im = _mm256_madd_epi16(mn, _mm256_set1_epi32(pb[c][k]));
                if (gemm) {
                    acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), dc[c], acc[c]);
                    accm[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(im), dmc[c], accm[c]);
                } else {
                    ist[c] = _mm256_add_epi32(ist[c], is);
                    imt[c] = _mm256_add_epi32(imt[c], im);
                }
            }
        }
        if (!gemm)
            for (int c = 0; c < NC; c++) {
                acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ist[c]), dc[c], acc[c]);
                accm[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(imt[c]), dmc[c], accm[c]);
            }
    }
    for (int c = 0; c < NC; c++) _mm256_storeu_ps(s + (int64_t)c * bs, _mm256_sub_ps(acc[c], accm[c]));
}

#define RP8_CASE(C, G) \
    case C: tile_q4_K_rp8(n, s, bs, x, y, by, C, G); return;
#define RP8_FN(NAME, G)                                                                                     \
    void NAME(int64_t n, float *s, int64_t bs, const void *x, size_t bx, const void *y, size_t by, int nr, \
              int nc) {                                                                                     \
        (void)bx;                                                                                           \
        (void)nr;                                                                                           \
        switch (nc) {                                                                                       \
            RP8_CASE(1, G) RP8_CASE(2, G) RP8_CASE(3, G) RP8_CASE(4, G)                                     \
        default: return;                                                                                    \
        }                                                                                                   \
    }
RP8_FN(qr_vec_dot_tile_q4_K_q8_K_gemm_rp8_avx2, 1)
RP8_FN(qr_vec_dot_tile_q4_K_q8_K_gemv_rp8_avx2, 0)
