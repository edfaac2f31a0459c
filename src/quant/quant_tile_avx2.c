/* quant_tile_avx2.c — tiles of dot products for the 32-value block formats (Q4_0, Q4_1, Q5_0, Q5_1,
 * Q8_0): nr weight rows times nc activation rows in one call (qr_vec_dot_tile_fn, quant.h).
 *
 * Each of the nr * nc dots is computed in exactly the order of that type's single AVX2 vec_dot in
 * quant_avx2.c: the same per-block integer sums (exact), the same scale product per block, one FMA
 * accumulator per dot fed block after block, the same final reduction. The results are therefore
 * bit-identical to vec_dot (tests/unit/test_quant.c checks it), which is what keeps the logits equal
 * to llama.cpp's. What the tile saves: a weight block is unpacked once for nc activation rows, an
 * activation block loaded once for nr weight rows, and nr * nc independent FMA chains hide the
 * latency that a single dot's one accumulator exposes.
 */
#include <math.h>

#include "quant/quant_avx2_common.h"
#include "quant/quant_internal.h"

#define T16 qr_avx2_fp16_table

enum tile_kind { K_Q4_0, K_Q5_0, K_Q8_0, K_Q4_1, K_Q5_1 };

/* The symmetric formats against Q8_0 (acc += (dx * dy) * dot per block; *s = hsum(acc)). */
static inline __attribute__((always_inline)) void tile_sym(int64_t n, float *s, int64_t bs, const char *vx, size_t bx,
                                                           const char *vy, size_t by, const int NR, const int NC,
                                                           const enum tile_kind kind) {
    const int64_t nb = n / QR_QK8_0;
    const __m256i ones16 = _mm256_set1_epi16(1);
    __m256 acc[4][4];
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) acc[r][c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        __m256i wx[4], ax[4];
        float dx[4];
        for (int r = 0; r < NR; r++) {
            const char *row = vx + (size_t)r * bx;
            if (kind == K_Q4_0) {
                const qr_block_q4_0 *b = (const qr_block_q4_0 *)row + i;
                wx[r] = nibbles_32(b->qs);
                dx[r] = T16[b->d];
            } else if (kind == K_Q5_0) {
                const qr_block_q5_0 *b = (const qr_block_q5_0 *)row + i;
                wx[r] = q5_0_codes(b);
                dx[r] = T16[b->d];
            } else {
                const qr_block_q8_0 *b = (const qr_block_q8_0 *)row + i;
                wx[r] = load_q8(b->qs);
                dx[r] = T16[b->d];
            }
            if (kind != K_Q4_0) ax[r] = _mm256_sign_epi8(wx[r], wx[r]);
        }
        for (int c = 0; c < NC; c++) {
            const qr_block_q8_0 *yb = (const qr_block_q8_0 *)(vy + (size_t)c * by) + i;
            const __m256i yv = load_q8(yb->qs);
            const float dy = T16[yb->d];
            /* Q4_0: (q - 8) . y = q . y - 8 * (sums of y), the second term shared by the rows */
            const __m256i off = kind == K_Q4_0 ? _mm256_maddubs_epi16(_mm256_set1_epi8(8), yv) : _mm256_setzero_si256();
            for (int r = 0; r < NR; r++) {
                __m256i p;
                if (kind == K_Q4_0) p = _mm256_sub_epi16(_mm256_maddubs_epi16(wx[r], yv), off);
                else p = _mm256_maddubs_epi16(ax[r], _mm256_sign_epi8(yv, wx[r]));
                const __m256 dot = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones16));
                acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(dx[r] * dy), dot, acc[r][c]);
            }
        }
    }
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) s[(int64_t)c * bs + r] = hsum_ps(acc[r][c]);
}

/* The offset formats against Q8_1 (summs = fma(m, s_y, summs); acc += (dx * dy) * dot; *s = hsum(acc)
 * + summs). */
static inline __attribute__((always_inline)) void tile_off(int64_t n, float *s, int64_t bs, const char *vx, size_t bx,
                                                           const char *vy, size_t by, const int NR, const int NC,
                                                           const enum tile_kind kind) {
    const int64_t nb = n / QR_QK8_1;
    __m256 acc[4][4];
    float summs[4][4];
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) {
            acc[r][c] = _mm256_setzero_ps();
            summs[r][c] = 0.0f;
        }
    for (int64_t i = 0; i < nb; i++) {
        __m256i wx[4];
        float dx[4], mx[4];
        for (int r = 0; r < NR; r++) {
            const char *row = vx + (size_t)r * bx;
            if (kind == K_Q4_1) {
                const qr_block_q4_1 *b = (const qr_block_q4_1 *)row + i;
                wx[r] = nibbles_32(b->qs);
                dx[r] = T16[b->d];
                mx[r] = T16[b->m];
            } else {
                const qr_block_q5_1 *b = (const qr_block_q5_1 *)row + i;
                wx[r] = q5_1_codes(b);
                dx[r] = T16[b->d];
                mx[r] = T16[b->m];
            }
        }
        for (int c = 0; c < NC; c++) {
            const qr_block_q8_1 *yb = (const qr_block_q8_1 *)(vy + (size_t)c * by) + i;
            const __m256i yv = load_q8(yb->qs);
            const float dy = T16[yb->d], sy = T16[yb->s];
            for (int r = 0; r < NR; r++) {
                summs[r][c] = fmaf(mx[r], sy, summs[r][c]);
                acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(dx[r] * dy), dot_u8i8_ps(wx[r], yv), acc[r][c]);
            }
        }
    }
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) s[(int64_t)c * bs + r] = hsum_ps(acc[r][c]) + summs[r][c];
}

/* One specialisation per (nr, nc) in 1..4 x 1..4, so that the loops above unroll. */
#define TILE_CASE(FN, KIND, R, C) \
    case (R) * 8 + (C): FN(n, s, bs, vx, bx, vy, by, R, C, KIND); return;
#define TILE_ROW(FN, KIND, R) \
    TILE_CASE(FN, KIND, R, 1) TILE_CASE(FN, KIND, R, 2) TILE_CASE(FN, KIND, R, 3) TILE_CASE(FN, KIND, R, 4)
#define TILE_DISPATCH(FN, KIND)                                                                            \
    switch (nr * 8 + nc) {                                                                                 \
        TILE_ROW(FN, KIND, 1) TILE_ROW(FN, KIND, 2) TILE_ROW(FN, KIND, 3) TILE_ROW(FN, KIND, 4)            \
    default: return;                                                                                       \
    }
#define TILE_FN(NAME, FN, KIND)                                                                            \
    void NAME(int64_t n, float *s, int64_t bs, const void *x, size_t bx, const void *y, size_t by, int nr, \
              int nc) {                                                                                    \
        const char *vx = x, *vy = y;                                                                       \
        TILE_DISPATCH(FN, KIND)                                                                            \
    }

TILE_FN(qr_vec_dot_tile_q4_0_q8_0_avx2, tile_sym, K_Q4_0)
TILE_FN(qr_vec_dot_tile_q5_0_q8_0_avx2, tile_sym, K_Q5_0)
TILE_FN(qr_vec_dot_tile_q8_0_q8_0_avx2, tile_sym, K_Q8_0)
TILE_FN(qr_vec_dot_tile_q4_1_q8_1_avx2, tile_off, K_Q4_1)
TILE_FN(qr_vec_dot_tile_q5_1_q8_1_avx2, tile_off, K_Q5_1)
