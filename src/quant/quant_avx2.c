/* quant_avx2.c — AVX2 + FMA + F16C kernels for the plain float types and the 32-value block formats,
 * and the activation quantizers (Q8_0, Q8_1, Q8_K). Selected at run time by quant.c.
 *
 * Accuracy against the scalar reference (checked by tests/unit/test_quant.c):
 *  - dot products: the per-block integer sums are exact and equal to the reference's; only the order
 *    of the float accumulation differs (8 lanes, FMA), so results agree to a few ulp of sum |x*y|.
 *    That order is ggml's x86 one, operation for operation (vec_dot, and the sgemm / repacked-kernel
 *    variants of quant.h), which is what makes our logits bit-identical to llama.cpp's.
 *  - Q8_0 / Q8_1 / Q8_K / F16 from_float and F16 to_float: bit-identical to the reference (same scale
 *    computed in scalar, same products, same rounding rule emulated exactly).
 */
#include <stdbool.h>

#include "quant/quant_avx2_common.h"
#include "quant/quant_internal.h"
#include <math.h>

/* ------------------------------------------------------------------------------------------------
 * F32 / F16 / BF16
 * ---------------------------------------------------------------------------------------------- */

/* ggml's reduction of its 4 x 8 accumulators (GGML_F32x8_REDUCE): a0 + a2 and a1 + a3, then their
 * sum; then the two 128-bit halves, and two horizontal adds. */
static inline float reduce4_ps(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    const __m256 v = _mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3));
    const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 t1 = _mm_hadd_ps(t0, t0);
    return _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
}

/* *s = dot of two f32 rows in ggml_vec_dot_f32's order: 4 x 8 lanes over the whole multiples of
 * 32, reduced as reduce4_ps, the rest added one product at a time (in float). */
void qr_vec_dot_f32_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const float *x = vx, *y = vy;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), acc1);
        acc2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 16), _mm256_loadu_ps(y + i + 16), acc2);
        acc3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 24), _mm256_loadu_ps(y + i + 24), acc3);
    }
    float sum = reduce4_ps(acc0, acc1, acc2, acc3);
    for (; i < n; i++) sum += x[i] * y[i];
    *s = sum;
}

/* 8 fp16 values at p -> 8 floats. */
static inline __m256 load_f16x8(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

/* *s = dot of two fp16 rows widened with F16C, in ggml_vec_dot_f16's order: as qr_vec_dot_f32_avx2,
 * but the rest is added in double. */
void qr_vec_dot_f16_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const uint16_t *x = vx, *y = vy;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm256_fmadd_ps(load_f16x8(x + i), load_f16x8(y + i), acc0);
        acc1 = _mm256_fmadd_ps(load_f16x8(x + i + 8), load_f16x8(y + i + 8), acc1);
        acc2 = _mm256_fmadd_ps(load_f16x8(x + i + 16), load_f16x8(y + i + 16), acc2);
        acc3 = _mm256_fmadd_ps(load_f16x8(x + i + 24), load_f16x8(y + i + 24), acc3);
    }
    double sum = reduce4_ps(acc0, acc1, acc2, acc3);
    for (; i < n; i++) sum += f16c_to_fp32(x[i]) * f16c_to_fp32(y[i]);
    *s = (float)sum;
}

/* A sub-tile of RR (1..2) weight rows x NC (1..4) activation rows for qr_vec_dot_tile_f16_avx2: every pair's four
 * accumulators of qr_vec_dot_f16_avx2, accumulator j (the 8-value chunks at 32 m + 8 j) of all pairs in one pass. */
static inline __attribute__((always_inline)) void f16_tile_sub(int64_t n, float *s, int64_t bs, const uint16_t *x0,
                                                               const uint16_t *x1, const uint8_t *y, size_t by, int RR,
                                                               int NC) {
    const int64_t n32 = n / 32 * 32;
    __m256 acc[4][2][4];
    for (int j = 0; j < 4; j++) {
        __m256 a[2][4];
        for (int r = 0; r < 2; r++)
            for (int c = 0; c < 4; c++) a[r][c] = _mm256_setzero_ps();
        for (int64_t i = 8 * j; i < n32; i += 32) {
            const __m256 w0 = load_f16x8(x0 + i), w1 = RR > 1 ? load_f16x8(x1 + i) : w0;
            for (int c = 0; c < NC; c++) {
                const __m256 v = load_f16x8((const uint16_t *)(y + c * by) + i);
                a[0][c] = _mm256_fmadd_ps(w0, v, a[0][c]);
                if (RR > 1) a[1][c] = _mm256_fmadd_ps(w1, v, a[1][c]);
            }
        }
        for (int r = 0; r < RR; r++)
            for (int c = 0; c < NC; c++) acc[j][r][c] = a[r][c];
    }
    for (int r = 0; r < RR; r++)
        for (int c = 0; c < NC; c++) {
            const uint16_t *xr = r ? x1 : x0, *yc = (const uint16_t *)(y + c * by);
            double sum = reduce4_ps(acc[0][r][c], acc[1][r][c], acc[2][r][c], acc[3][r][c]);
            for (int64_t i = n32; i < n; i++) sum += f16c_to_fp32(xr[i]) * f16c_to_fp32(yc[i]);
            s[c * bs + r] = (float)sum;
        }
}

/* vec_dot_tile for F16 weights: each dot qr_vec_dot_f16_avx2's bit for bit, each row's and column's 8-value chunk
 * converted once a sub-tile of 2 x 4 instead of once a pair (a row-exact verification pass of several rows then
 * reads and widens each weight once for 4 of its rows); one column: qr_vec_dot_f16_avx2 a row, as before. */
void qr_vec_dot_tile_f16_avx2(int64_t n, float *s, int64_t bs, const void *vx, size_t bx, const void *vy, size_t by,
                              int nr, int nc) {
    const uint8_t *x = vx, *y = vy;
    if (nc == 1) {
        for (int r = 0; r < nr; r++) qr_vec_dot_f16_avx2(n, s + r, x + r * bx, vy);
        return;
    }
    for (int r0 = 0; r0 < nr; r0 += 2) {
        const uint16_t *x0 = (const uint16_t *)(x + r0 * bx), *x1 = (const uint16_t *)(x + (r0 + 1) * bx);
        float *sr = s + r0;
        const bool two = nr - r0 >= 2;
        switch (nc) {
        case 2: two ? f16_tile_sub(n, sr, bs, x0, x1, y, by, 2, 2) : f16_tile_sub(n, sr, bs, x0, x0, y, by, 1, 2); break;
        case 3: two ? f16_tile_sub(n, sr, bs, x0, x1, y, by, 2, 3) : f16_tile_sub(n, sr, bs, x0, x0, y, by, 1, 3); break;
        default: two ? f16_tile_sub(n, sr, bs, x0, x1, y, by, 2, 4) : f16_tile_sub(n, sr, bs, x0, x0, y, by, 1, 4); break;
        }
    }
}

/* One 8-lane accumulator over the row, then ggml's 8-lane horizontal sum: llama.cpp's tinyBLAS
 * (llamafile sgemm) order for f32 / f16 weights in matmuls of 2 or more rows (n a multiple of 8). */
void qr_vec_dot_f32_sgemm_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const float *x = vx, *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc);
    *s = hsum_ps(acc);
}

void qr_vec_dot_f16_sgemm_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const uint16_t *x = vx, *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(load_f16x8(x + i), load_f16x8(y + i), acc);
    *s = hsum_ps(acc);
}

/* dst = src rounded to fp16 (nearest even), bit-identical to qr_f16_from_float for non-NaN input. */
void qr_f16_from_float_avx2(const float *src, void *dst, int64_t n) {
    uint16_t *h = dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(h + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) h[i] = _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
}

/* dst = the fp16 row widened (exact). */
void qr_f16_to_float_avx2(const void *src, float *dst, int64_t n) {
    const uint16_t *h = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load_f16x8(h + i));
    for (; i < n; i++) dst[i] = f16c_to_fp32(h[i]);
}

/* 8 bf16 values at p -> 8 floats. */
static inline __m256 load_bf16x8(const uint16_t *p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

/* *s = dot of two bf16 rows, accumulated in float. */
void qr_vec_dot_bf16_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const uint16_t *x = vx, *y = vy;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm256_fmadd_ps(load_bf16x8(x + i), load_bf16x8(y + i), acc0);
        acc1 = _mm256_fmadd_ps(load_bf16x8(x + i + 8), load_bf16x8(y + i + 8), acc1);
        acc2 = _mm256_fmadd_ps(load_bf16x8(x + i + 16), load_bf16x8(y + i + 16), acc2);
        acc3 = _mm256_fmadd_ps(load_bf16x8(x + i + 24), load_bf16x8(y + i + 24), acc3);
    }
    for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(load_bf16x8(x + i), load_bf16x8(y + i), acc0);
    float sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
    for (; i < n; i++) {
        uint32_t a = (uint32_t)x[i] << 16, b = (uint32_t)y[i] << 16;
        float fa, fb;
        memcpy(&fa, &a, 4);
        memcpy(&fb, &b, 4);
        sum += fa * fb;
    }
    *s = sum;
}

/* ------------------------------------------------------------------------------------------------
 * 32-value block formats against Q8_0 / Q8_1. The per-block scales are the expensive part next to the
 * integer work (two or four fp16 conversions per 32 values); the symmetric formats look them up in a
 * table, the offset formats (four scales per block) widen those of four blocks with one vcvtph2ps per
 * row. Two accumulators overlap the FMA latency. (Variants were measured with tools/bench_quant.sh.)
 * ---------------------------------------------------------------------------------------------- */

/* The two fp16 words at the start of 4 consecutive blocks `stride` bytes apart, as 8 floats
 * [w0(b0) w1(b0) w0(b1) w1(b1) .. w1(b3)]. Reads 4 bytes per block. */
static inline __m256 scale_pairs4(const void *base, size_t stride) {
    const uint8_t *p = base;
    uint32_t w[4];
    for (int k = 0; k < 4; k++) memcpy(&w[k], p + (size_t)k * stride, 4);
    /* pair the words in general registers (idle integer ALUs), then two moves into the vector unit */
    const uint64_t lo = w[0] | (uint64_t)w[1] << 32, hi = w[2] | (uint64_t)w[3] << 32;
    return _mm256_cvtph_ps(_mm_insert_epi64(_mm_cvtsi64_si128((long long)lo), (long long)hi, 1));
}

/* Lane `k` of v broadcast to all lanes. */
static inline __m256 lane_ps(__m256 v, int k) { return _mm256_permutevar8x32_ps(v, _mm256_set1_epi32(k)); }


/* (q - off) . y for unsigned codes q (0..31) and signed y, as 8 float sums of 4 products: q.y minus
 * off * (sums of y), both with maddubs (cheaper than sign-flipping the codes). */
static inline __m256 dot_offset_ps(__m256i q, __m256i y, int off) {
    const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(q, y), _mm256_maddubs_epi16(_mm256_set1_epi8((char)off), y));
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}

/* fp16 -> fp32 for every bit pattern, and E8M0 -> 2^(e-128), filled once by qr_quant_avx2_init.
 * In the symmetric kernels below a scalar scale per block from these tables (two loads, which run on
 * the load ports) is cheaper than any conversion on the vector ports, which the integer work keeps
 * busy; this is also what ggml does. 256 KiB + 1 KiB, read-only after initialisation. */
float qr_avx2_fp16_table[65536];
static float e8m0_half_table[256];

void qr_quant_avx2_init(void) {
    for (uint32_t h = 0; h < 65536; h++) qr_avx2_fp16_table[h] = _cvtsh_ss((uint16_t)h);
    for (uint32_t e = 0; e < 256; e++) e8m0_half_table[e] = e8m0_to_fp32_half((uint8_t)e);
}

/* A symmetric format against Q8_0, two blocks per iteration: XSCALE(b) is the float scale of
 * weight block b, DOT(b, y codes) the 8 partial integer sums (as floats) of block b. */
#define DOT_SYMMETRIC_Q8_0(XTYPE, XSCALE, DOT)                                                             \
    const XTYPE *x = vx;                                                                                   \
    const qr_block_q8_0 *y = vy;                                                                           \
    const int64_t nb = n / QR_QK8_0;                                                                       \
    __m256 acc0 = _mm256_setzero_ps();                                                                     \
    for (int64_t i = 0; i < nb; i++) {                                                                     \
        const __m256 d0 = _mm256_set1_ps(XSCALE(x + i) * qr_avx2_fp16_table[y[i].d]);                              \
        acc0 = _mm256_fmadd_ps(d0, DOT(x + i, load_q8(y[i].qs)), acc0);                                    \
    }                                                                                                      \
    *s = hsum_ps(acc0)

#define FP16_SCALE(b) qr_avx2_fp16_table[(b)->d]
#define E8M0_SCALE(b) e8m0_half_table[(b)->e]

/* An offset format (fp16 d then fp16 m first in the block) against Q8_1: `codes(x + i)` gives the
 * unsigned codes of weight block i; the offsets contribute m * s per block. */
#define DOT_OFFSET_Q8_1(XTYPE, CODES)                                                                      \
    const XTYPE *x = vx;                                                                                   \
    const qr_block_q8_1 *y = vy;                                                                           \
    const int64_t nb = n / QR_QK8_1;                                                                       \
    __m256 acc0 = _mm256_setzero_ps();                                                                     \
    float summs = 0.0f;                                                                                    \
    for (int64_t i = 0; i < nb; i++) {                                                                     \
        summs = fmaf(f16c_to_fp32(x[i].m), f16c_to_fp32(y[i].s), summs);                                   \
        const __m256 d = _mm256_mul_ps(_mm256_set1_ps(f16c_to_fp32(x[i].d)), _mm256_set1_ps(f16c_to_fp32(y[i].d))); \
        acc0 = _mm256_fmadd_ps(d, dot_u8i8_ps(CODES(x + i), load_q8(y[i].qs)), acc0);                      \
    }                                                                                                      \
    *s = hsum_ps(acc0) + summs

#define Q4_1_CODES(b) nibbles_32((b)->qs)
#define Q4_0_DOT(b, yv) dot_offset_ps(nibbles_32((b)->qs), (yv), 8)
#define Q5_0_DOT(b, yv) dot_i8i8_ps(q5_0_codes(b), (yv))
#define Q8_0_DOT(b, yv) dot_i8i8_ps(load_q8((b)->qs), (yv))

/* Codes of a 4-bit table format (IQ4_NL, MXFP4): table values looked up with pshufb. */
static inline __m256i table4_codes(const int8_t *table16, const uint8_t *qs) {
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)table16));
    return _mm256_shuffle_epi8(table, nibbles_32(qs));
}
#define IQ4_NL_DOT(b, yv) dot_i8i8_ps(table4_codes(qr_kvalues_iq4nl, (b)->qs), (yv))
#define MXFP4_DOT(b, yv) dot_i8i8_ps(table4_codes(qr_kvalues_mxfp4, (b)->qs), (yv))

void qr_vec_dot_q4_0_q8_0_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    DOT_SYMMETRIC_Q8_0(qr_block_q4_0, FP16_SCALE, Q4_0_DOT);
}

void qr_vec_dot_q4_1_q8_1_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    DOT_OFFSET_Q8_1(qr_block_q4_1, Q4_1_CODES);
}

void qr_vec_dot_q5_0_q8_0_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    DOT_SYMMETRIC_Q8_0(qr_block_q5_0, FP16_SCALE, Q5_0_DOT);
}

void qr_vec_dot_q5_1_q8_1_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    DOT_OFFSET_Q8_1(qr_block_q5_1, q5_1_codes);
}

void qr_vec_dot_q8_0_q8_0_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    DOT_SYMMETRIC_Q8_0(qr_block_q8_0, FP16_SCALE, Q8_0_DOT);
}

/* ggml's order for the table formats (IQ4_NL, MXFP4): blocks in pairs, the even ones into one
 * accumulator and the odd ones into another, added before the horizontal sum; an odd last block
 * in scalar, sum += isum * d (a separate multiply and add). */
#define DOT_PAIRED_Q8_0(XTYPE, XSCALE, DOT, KVALUES)                                                       \
    const XTYPE *x = vx;                                                                                   \
    const qr_block_q8_0 *y = vy;                                                                           \
    const int64_t nb = n / QR_QK8_0;                                                                       \
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();                                         \
    int64_t i = 0;                                                                                         \
    for (; i + 1 < nb; i += 2) {                                                                           \
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(XSCALE(x + i) * qr_avx2_fp16_table[y[i].d]), DOT(x + i, load_q8(y[i].qs)), acc0); \
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(XSCALE(x + i + 1) * qr_avx2_fp16_table[y[i + 1].d]),                 \
                               DOT(x + i + 1, load_q8(y[i + 1].qs)), acc1);                                \
    }                                                                                                      \
    float sumf = hsum_ps(_mm256_add_ps(acc0, acc1));                                                       \
    for (; i < nb; i++) {                                                                                  \
        int isum = 0;                                                                                      \
        for (int j = 0; j < 16; j++)                                                                       \
            isum += y[i].qs[j] * KVALUES[x[i].qs[j] & 0xF] + y[i].qs[j + 16] * KVALUES[x[i].qs[j] >> 4];   \
        sumf += (float)isum * (XSCALE(x + i) * qr_avx2_fp16_table[y[i].d]);                                        \
    }                                                                                                      \
    *s = sumf

void qr_vec_dot_iq4_nl_q8_0_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    DOT_PAIRED_Q8_0(qr_block_iq4_nl, FP16_SCALE, IQ4_NL_DOT, qr_kvalues_iq4nl);
}

void qr_vec_dot_mxfp4_q8_0_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    DOT_PAIRED_Q8_0(qr_block_mxfp4, E8M0_SCALE, MXFP4_DOT, qr_kvalues_mxfp4);
}

/* llama.cpp's tinyBLAS order for IQ4_NL weights it does not repack, in matmuls of 2 or more rows:
 * a single accumulator (ggml's own vec_dot pairs the blocks, see DOT_PAIRED_Q8_0). */
void qr_vec_dot_iq4_nl_q8_0_sgemm_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    DOT_SYMMETRIC_Q8_0(qr_block_iq4_nl, FP16_SCALE, IQ4_NL_DOT);
}

/* Exact integer dot of 32 signed codes with 32 signed activation codes (b != -128). */
/* The 8 int32 partial sums of the dot of two blocks of 32 signed bytes (their total is isum_i8i8). */
static inline __m256i pair_sums_i8i8(__m256i a, __m256i b) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a)), _mm256_set1_epi16(1));
}

/* [hsum(p[0]), ..., hsum(p[7])] */
static inline __m256i hsum8_epi32(const __m256i p[8]) {
    const __m256i h01 = _mm256_hadd_epi32(p[0], p[1]), h23 = _mm256_hadd_epi32(p[2], p[3]);
    const __m256i h45 = _mm256_hadd_epi32(p[4], p[5]), h67 = _mm256_hadd_epi32(p[6], p[7]);
    const __m256i g0 = _mm256_hadd_epi32(h01, h23), g1 = _mm256_hadd_epi32(h45, h67); /* lane sums of 0-3 / 4-7 */
    return _mm256_add_epi32(_mm256_permute2x128_si256(g0, g1, 0x20), _mm256_permute2x128_si256(g0, g1, 0x31));
}

static inline int isum_i8i8(__m256i a, __m256i b) {
    const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
    return hsum_epi32(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}

/* ggml's repacked 8-row kernels of the 32-value formats (ggml_gemv / ggml_gemm_{q4_0,iq4_nl,mxfp4}_
 * 8x8_q8_0, the same order for both): per block one fma of the block's integer sum,
 * acc = fma(isum, dx * dy, acc). CODES(b) gives the 32 signed codes of weight block b. */
/* Eight blocks at a time: their 8 x 8 partial sums reduced together into one vector of the 8 integer block
 * sums (exact, as one hsum each), then the same fma chain in block order: the results are unchanged. */
#define DOT_REPACKED_Q8_0(XTYPE, XSCALE, CODES)                                                            \
    const XTYPE *x = vx;                                                                                   \
    const qr_block_q8_0 *y = vy;                                                                           \
    const int64_t nb = n / QR_QK8_0;                                                                       \
    float acc = 0.0f;                                                                                      \
    int64_t i = 0;                                                                                         \
    for (; i + 8 <= nb; i += 8) {                                                                          \
        __m256i p[8];                                                                                      \
        for (int j = 0; j < 8; j++) p[j] = pair_sums_i8i8(CODES(x + i + j), load_q8(y[i + j].qs));        \
        float is[8];                                                                                       \
        _mm256_storeu_ps(is, _mm256_cvtepi32_ps(hsum8_epi32(p)));                                          \
        for (int j = 0; j < 8; j++) acc = fmaf(is[j], XSCALE(x + i + j) * qr_avx2_fp16_table[y[i + j].d], acc); \
    }                                                                                                      \
    for (; i < nb; i++)                                                                                    \
        acc = fmaf((float)isum_i8i8(CODES(x + i), load_q8(y[i].qs)), XSCALE(x + i) * qr_avx2_fp16_table[y[i].d], acc); \
    *s = acc

#define Q4_0_SIGNED(b) _mm256_sub_epi8(nibbles_32((b)->qs), _mm256_set1_epi8(8))
#define IQ4_NL_CODES(b) table4_codes(qr_kvalues_iq4nl, (b)->qs)
#define MXFP4_CODES(b) table4_codes(qr_kvalues_mxfp4, (b)->qs)

void qr_vec_dot_q4_0_q8_0_rp_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    DOT_REPACKED_Q8_0(qr_block_q4_0, FP16_SCALE, Q4_0_SIGNED);
}

void qr_vec_dot_iq4_nl_q8_0_rp_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    DOT_REPACKED_Q8_0(qr_block_iq4_nl, FP16_SCALE, IQ4_NL_CODES);
}

void qr_vec_dot_mxfp4_q8_0_rp_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    DOT_REPACKED_Q8_0(qr_block_mxfp4, E8M0_SCALE, MXFP4_CODES);
}

/* ------------------------------------------------------------------------------------------------
 * Activation quantizers, bit-identical to the scalar references.
 * ---------------------------------------------------------------------------------------------- */

/* roundf (ties away from zero) of every lane, exactly: trunc, then step away when |frac| >= 0.5. */
static inline __m256 round_away_ps(__m256 v) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 frac = _mm256_andnot_ps(sign, _mm256_sub_ps(v, t)); /* exact: |v| < 2^23 */
    const __m256 step = _mm256_or_ps(_mm256_and_ps(v, sign), _mm256_set1_ps(1.0f));
    const __m256 away = _mm256_and_ps(_mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ), step);
    return _mm256_add_ps(t, away);
}

/* Packs 4 x 8 int32 (values in int8 range) into 32 int8 in the original order. */
static inline __m256i pack_i32x32_i8(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i ab = _mm256_packs_epi32(a, b); /* a0-3 b0-3 | a4-7 b4-7 */
    const __m256i cd = _mm256_packs_epi32(c, d);
    const __m256i abcd = _mm256_packs_epi16(ab, cd); /* a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7 */
    return _mm256_permutevar8x32_epi32(abcd, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* Largest |x| of 32 floats (no NaN expected). */
static inline float absmax_32(const __m256 v[4]) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                             _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
    __m128 r = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
    r = _mm_max_ps(r, _mm_movehl_ps(r, r));
    r = _mm_max_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

/* One Q8_0-style block: stores the 32 codes, returns the scale d and the code sum in *sum. */
static inline float quantize_block_q8(const float *x, int8_t *qs, int *sum) {
    __m256 v[4];
    for (int k = 0; k < 4; k++) v[k] = _mm256_loadu_ps(x + 8 * k);
    const float amax = absmax_32(v);
    const float d = amax / 127.0f;
    const float id = d ? 1.0f / d : 0.0f;
    const __m256 mul = _mm256_set1_ps(id);
    __m256i q[4];
    for (int k = 0; k < 4; k++) q[k] = _mm256_cvtps_epi32(round_away_ps(_mm256_mul_ps(v[k], mul)));
    _mm256_storeu_si256((__m256i *)qs, pack_i32x32_i8(q[0], q[1], q[2], q[3]));
    if (sum) *sum = hsum_epi32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
    return d;
}

void qr_q8_0_from_float_avx2(const float *src, void *dst, int64_t n) {
    qr_block_q8_0 *y = dst;
    for (int64_t i = 0; i < n / QR_QK8_0; i++) {
        const float d = quantize_block_q8(src + i * QR_QK8_0, y[i].qs, NULL);
        y[i].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    }
}

void qr_q8_1_from_float_avx2(const float *src, void *dst, int64_t n) {
    qr_block_q8_1 *y = dst;
    for (int64_t i = 0; i < n / QR_QK8_1; i++) {
        int sum = 0;
        const float d = quantize_block_q8(src + i * QR_QK8_1, y[i].qs, &sum);
        y[i].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        y[i].s = _cvtss_sh((float)sum * d, _MM_FROUND_TO_NEAREST_INT);
    }
}

/* Q8_K rows as qr_q8_K_from_float (any_positive false) or qr_q8_K_from_float_x4 (true). */
static void q8_K_rows_avx2(const float *src, void *dst, int64_t n, bool any_positive) {
    qr_block_q8_K *y = dst;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / QR_QK_K; i++) {
        const float *x = src + i * QR_QK_K;
        __m256 m = _mm256_setzero_ps();
        for (int j = 0; j < QR_QK_K; j += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)));
        __m128 r = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
        r = _mm_max_ps(r, _mm_movehl_ps(r, r));
        r = _mm_max_ss(r, _mm_movehdup_ps(r));
        const float amax = _mm_cvtss_f32(r);
        if (!amax) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        /* the reference takes the sign of the first value of largest magnitude */
        float max = 0.0f;
        const __m256 vmax = _mm256_set1_ps(amax);
        for (int j = 0; j < QR_QK_K; j += 8) {
            const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)), vmax, _CMP_EQ_OQ));
            if (hit) {
                max = x[j + __builtin_ctz((unsigned)hit)];
                break;
            }
        }
        if (any_positive && max < 0.0f) { /* ggml's 4-row quantizer: +amax wins a tie */
            for (int j = 0; j < QR_QK_K; j += 8)
                if (_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + j), vmax, _CMP_EQ_OQ))) {
                    max = amax;
                    break;
                }
        }
        const float iscale = -127.f / max;
        const __m256 mul = _mm256_set1_ps(iscale);
        const __m256i cap = _mm256_set1_epi32(127);
        const __m256i ones8 = _mm256_set1_epi8(1);
        const __m256i ones16 = _mm256_set1_epi16(1);
        for (int j = 0; j < QR_QK_K; j += 32) {
            __m256i q[4];
            for (int k = 0; k < 4; k++)
                q[k] = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + j + 8 * k), mul)), cap);
            const __m256i q8 = pack_i32x32_i8(q[0], q[1], q[2], q[3]);
            _mm256_storeu_si256((__m256i *)(y[i].qs + j), q8);
            /* sums of 4 consecutive codes, then of 16: lane 0 of each half holds one bsum */
            __m256i s4 = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q8), ones16);
            s4 = _mm256_hadd_epi32(s4, s4);
            s4 = _mm256_hadd_epi32(s4, s4);
            y[i].bsums[j / 16] = (int16_t)_mm256_extract_epi32(s4, 0);
            y[i].bsums[j / 16 + 1] = (int16_t)_mm256_extract_epi32(s4, 4);
        }
        y[i].d = 1 / iscale;
    }
}

void qr_q8_K_from_float_avx2(const float *src, void *dst, int64_t n) { q8_K_rows_avx2(src, dst, n, false); }

void qr_q8_K_from_float_x4_avx2(const float *src, void *dst, int64_t n) { q8_K_rows_avx2(src, dst, n, true); }
