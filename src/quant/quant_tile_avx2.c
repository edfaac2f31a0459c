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
#include <string.h>

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

/* The 8 block sums of 8 dots' partial sums at once: [hsum(p[0]), ..., hsum(p[7])] (p[k] NULL-free). */
static inline __m256i hsum8_rp(const __m256i p[8]) {
    const __m256i h01 = _mm256_hadd_epi32(p[0], p[1]), h23 = _mm256_hadd_epi32(p[2], p[3]);
    const __m256i h45 = _mm256_hadd_epi32(p[4], p[5]), h67 = _mm256_hadd_epi32(p[6], p[7]);
    const __m256i g0 = _mm256_hadd_epi32(h01, h23), g1 = _mm256_hadd_epi32(h45, h67);
    return _mm256_add_epi32(_mm256_permute2x128_si256(g0, g1, 0x20), _mm256_permute2x128_si256(g0, g1, 0x31));
}

/* llama.cpp's repacked Q4_0 order (qr_vec_dot_q4_0_q8_0_rp_avx2: per block acc = fmaf(isum, dx * dy, acc)) for a
 * tile: dot l = r * NC + c is lane l % 8 of accumulator l / 8, and each block's step is that fma on the lane's own
 * isum and dx * dy: the same float operations as the single dot's. */
static inline __attribute__((always_inline)) void tile_rp(int64_t n, float *s, int64_t bs, const char *vx, size_t bx,
                                                          const char *vy, size_t by, const int NR, const int NC) {
    const int64_t nb = n / QR_QK8_0;
    const int ND = NR * NC;
    const __m256i ones16 = _mm256_set1_epi16(1), eight = _mm256_set1_epi8(8);
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t i = 0; i < nb; i++) {
        __m256i wx[4], p[16];
        float dx[4], dy[4];
        for (int r = 0; r < NR; r++) {
            const qr_block_q4_0 *b = (const qr_block_q4_0 *)(vx + (size_t)r * bx) + i;
            wx[r] = nibbles_32(b->qs);
            dx[r] = T16[b->d];
        }
        for (int c = 0; c < NC; c++) {
            const qr_block_q8_0 *yb = (const qr_block_q8_0 *)(vy + (size_t)c * by) + i;
            const __m256i yv = load_q8(yb->qs);
            const __m256i off = _mm256_maddubs_epi16(eight, yv); /* (q - 8) . y = q . y - 8 * (sums of y) */
            dy[c] = T16[yb->d];
            for (int r = 0; r < NR; r++)
                p[r * NC + c] = _mm256_madd_epi16(_mm256_sub_epi16(_mm256_maddubs_epi16(wx[r], yv), off), ones16);
        }
        for (int l = ND; l < 16; l++) p[l] = _mm256_setzero_si256();
        for (int g = 0; g < (ND + 7) / 8; g++) {
            float d[8];
            for (int k = 0; k < 8; k++) {
                const int l = 8 * g + k;
                d[k] = l < ND ? dx[l / NC] * dy[l % NC] : 0.0f;
            }
            const __m256 dd = _mm256_setr_ps(d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]);
            acc[g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hsum8_rp(p + 8 * g)), dd, acc[g]);
        }
    }
    float out[16];
    _mm256_storeu_ps(out, acc[0]);
    _mm256_storeu_ps(out + 8, acc[1]);
    for (int l = 0; l < ND; l++) s[(int64_t)(l % NC) * bs + l / NC] = out[l];
}

#define TILE_RP(n, s, bs, vx, bx, vy, by, R, C, KIND) tile_rp(n, s, bs, vx, bx, vy, by, R, C)

TILE_FN(qr_vec_dot_tile_q4_0_q8_0_avx2, tile_sym, K_Q4_0)
TILE_FN(qr_vec_dot_tile_q4_0_q8_0_rp_avx2, TILE_RP, K_Q4_0)
TILE_FN(qr_vec_dot_tile_q5_0_q8_0_avx2, tile_sym, K_Q5_0)
TILE_FN(qr_vec_dot_tile_q8_0_q8_0_avx2, tile_sym, K_Q8_0)
TILE_FN(qr_vec_dot_tile_q4_1_q8_1_avx2, tile_off, K_Q4_1)
TILE_FN(qr_vec_dot_tile_q5_1_q8_1_avx2, tile_off, K_Q5_1)

/* ---- Q4_0 repacked 8 rows at a time (AVX2; rows in the ymm lanes) ---------------------------------------------
 * The AVX-512 form's idea (quant_tile_avx512.c) with 8 rows a ymm register and no VNNI: lane r of a vpmaddubsw is
 * row r's 4 codes (0..15) times 4 activation bytes broadcast, as two int16 pair sums; 8 of them (one 32-value block)
 * add up in int16 exactly (|sum| <= 8 * 2 * 15 * 128 = 30720), vpmaddwd folds each lane's pair and the block's
 * -8 * (activation sum) (the rows' extra, qr_q4_0_rp_act_extra) is added: the exact isum in lane r, then the same
 * fma as ggml's repacked order. Layout of a group of 8 rows, per block (144 bytes, blocks consecutive):
 *   [0, 128)    codes: [t 0..3][row r][4 bytes]: row r's qs[4t .. 4t + 3]
 *   [128, 144)  d: [row] f16 */
/* -8 x each Q8_0 block's sum, as int32 after the row: the repacked Q4_0 tiles' lane starts (AVX2 and AVX-512). */
static inline int32_t rp8_load_i32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline __attribute__((always_inline)) void tile_q4_0_rp8(int64_t n, float *s, int64_t bs, const char *vx,
                                                                const char *vy, size_t by, const int NC) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    const int64_t nb = n / QR_QK4_0;
    __m256 acc[4];
    for (int c = 0; c < NC; c++) acc[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const char *xb = vx + (size_t)i * 144;
        __m256i code[8]; /* code[t]: values 4t.. (t < 4), 16 + 4(t - 4).. (t >= 4) */
        for (int t = 0; t < 4; t++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(xb + 32 * t));
            code[t] = _mm256_and_si256(v, m4);
            code[t + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        }
        const __m256 dx = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(xb + 128)));
        for (int c = 0; c < NC; c++) {
            const char *yr = vy + (size_t)c * by;
            const qr_block_q8_0 *y = (const qr_block_q8_0 *)yr + i;
            __m256i s16 = _mm256_setzero_si256();
            for (int t = 0; t < 4; t++) {
                s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(code[t], _mm256_set1_epi32(rp8_load_i32(y->qs + 4 * t))));
                s16 = _mm256_add_epi16(
                    s16, _mm256_maddubs_epi16(code[t + 4], _mm256_set1_epi32(rp8_load_i32(y->qs + 16 + 4 * t))));
            }
            const __m256i isum = _mm256_add_epi32(_mm256_madd_epi16(s16, ones),
                                                  _mm256_set1_epi32(rp8_load_i32(yr + nb * sizeof(qr_block_q8_0) + 4 * i)));
            const __m256 d = _mm256_mul_ps(dx, _mm256_set1_ps(f16c_to_fp32(y->d)));
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), d, acc[c]);
        }
    }
    for (int c = 0; c < NC; c++) _mm256_storeu_ps(s + (int64_t)c * bs, acc[c]);
}

void qr_vec_dot_tile_q4_0_q8_0_rp8_avx2(int64_t n, float *s, int64_t bs, const void *x, size_t bx, const void *y,
                                        size_t by, int nr, int nc) {
    (void)bx;
    (void)nr;
    switch (nc) {
    case 1: tile_q4_0_rp8(n, s, bs, x, y, by, 1); return;
    case 2: tile_q4_0_rp8(n, s, bs, x, y, by, 2); return;
    case 3: tile_q4_0_rp8(n, s, bs, x, y, by, 3); return;
    case 4: tile_q4_0_rp8(n, s, bs, x, y, by, 4); return;
    default: return;
    }
}
