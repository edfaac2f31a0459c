/* quant_tile_avx512.c — AVX-512 (F/BW/VL + VNNI) tiles of dot products for the 32-value block formats
 * Q8_0, Q4_0, Q5_0, Q4_1 and Q5_1: nr weight rows times nc activation rows in one call (qr_vec_dot_tile_fn,
 * quant.h), nr, nc <= QR_TILE_MAX.
 *
 * Each result is bit-identical to the AVX2 kernel of the same order (quant_avx2.c / quant_tile_avx2.c,
 * which reproduce llama.cpp's AVX2 build): the integer sum of a block is exact whichever way it is
 * formed, and the float steps are the same operations on the same values in the same order:
 *   vec_dot order (Q8_0, Q4_0, Q4_1): 8 float lanes per dot, lane l of block i gets the exact sum of
 *     products 4l..4l+3, acc = fma(dx * dy, sums, acc), then hsum_ps; here two dots (one weight row,
 *     two activation rows) share a zmm register, one per 256-bit half, so that every half computes
 *     exactly what the AVX2 register did;
 *   repacked order (Q4_0 weights llama.cpp repacks 8 rows at a time): acc = fmaf(isum, dx * dy, acc)
 *     per block, the block's integer sums reduced 8 dots at a time.
 * The integer products use vpdpbusd (unsigned x signed bytes, groups of 4 summed into int32, no int16
 * saturation): Q8_0 weights x + 128 as unsigned bytes, the 128 * sum(y) surplus taken off by starting
 * the accumulator at -128 * sum(y) (one per activation block, shared by all weight rows); Q4_0 codes
 * q in 0..15 with the accumulator starting at -8 * sum(y), Q5_0 codes 0..31 with -16 * sum(y); Q4_1 and
 * Q5_1 codes as they are.
 * Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512vnni (CMakeLists.txt); called only after
 * quant.c has confirmed those with cpuid.
 */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "quant/quant_avx2_common.h"
#include "quant/quant_internal.h"

#define T16 qr_avx2_fp16_table

enum tile_kind { K_Q4_0, K_Q5_0, K_Q8_0, K_Q4_1, K_Q5_1 };

/* The 32 bytes at p in both 256-bit halves. */
static inline __m512i bcast32(const void *p) { return _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)p)); }

/* 16 bytes of packed nibbles -> the 32 codes of a Q4 block (low nibbles, then high) in both halves. */
static inline __m512i nibbles_64(const uint8_t *p) {
    const __m512i v = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)p));
    return _mm512_and_si512(_mm512_mask_srli_epi16(v, 0xFF00FF00u, v, 4), _mm512_set1_epi8(0x0F));
}

/* The 32 codes 0..31 of a Q5_0 / Q5_1 block (nibbles plus 16 where the qh bit is set), both halves. */
static inline __m512i q5_codes_64(const uint8_t *qs, const uint8_t *qh) {
    uint32_t bits;
    memcpy(&bits, qh, 4);
    const __mmask64 high = (__mmask64)bits | ((__mmask64)bits << 32);
    const __m512i lo = nibbles_64(qs);
    return _mm512_or_si512(lo, _mm512_maskz_mov_epi8(high, _mm512_set1_epi8(0x10)));
}

/* Two activation blocks' 32 codes: row a's in the low half, row b's in the high half. */
static inline __m512i load_pair(const int8_t *a, const int8_t *b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a)),
                              _mm256_loadu_si256((const __m256i *)b), 1);
}

/* dy of row a in the low 8 lanes, of row b in the high 8 lanes. */
static inline __m512 scale_pair(float a, float b) {
    return _mm512_insertf32x8(_mm512_set1_ps(a), _mm256_set1_ps(b), 1);
}

/* The vec_dot order of the symmetric (Q8_0, Q4_0, Q5_0) and offset (Q4_1, Q5_1) formats. Activation rows are taken
 * in pairs (c0, c1); an odd last row is paired with itself and its second result dropped. */
static inline __attribute__((always_inline)) void tile_lanes(int64_t n, float *s, int64_t bs, const char *vx, size_t bx,
                                                             const char *vy, size_t by, const int NR, const int NC,
                                                             const enum tile_kind kind) {
    const int NP = (NC + 1) / 2;
    const int64_t nb = n / QR_QK8_0;
    const __m512i zero = _mm512_setzero_si512();
    const __m512i bias = _mm512_set1_epi8(kind == K_Q8_0 ? (char)0x80 : kind == K_Q5_0 ? 16 : 8);
    const bool offset = kind == K_Q4_1 || kind == K_Q5_1;
    __m512 acc[4][2];
    float summs[4][4];
    for (int r = 0; r < NR; r++) {
        for (int p = 0; p < NP; p++) acc[r][p] = _mm512_setzero_ps();
        for (int c = 0; c < NC; c++) summs[r][c] = 0.0f;
    }
    for (int64_t i = 0; i < nb; i++) {
        __m512i yv[2], start[2];
        __m512 dyv[2];
        float sy[4];
        for (int p = 0; p < NP; p++) {
            const int c0 = 2 * p, c1 = 2 * p + 1 < NC ? 2 * p + 1 : 2 * p;
            if (offset) {
                const qr_block_q8_1 *y0 = (const qr_block_q8_1 *)(vy + (size_t)c0 * by) + i;
                const qr_block_q8_1 *y1 = (const qr_block_q8_1 *)(vy + (size_t)c1 * by) + i;
                yv[p] = load_pair(y0->qs, y1->qs);
                dyv[p] = scale_pair(T16[y0->d], T16[y1->d]);
                sy[c0] = T16[y0->s];
                sy[c1] = T16[y1->s];
                start[p] = zero;
            } else {
                const qr_block_q8_0 *y0 = (const qr_block_q8_0 *)(vy + (size_t)c0 * by) + i;
                const qr_block_q8_0 *y1 = (const qr_block_q8_0 *)(vy + (size_t)c1 * by) + i;
                yv[p] = load_pair(y0->qs, y1->qs);
                dyv[p] = scale_pair(T16[y0->d], T16[y1->d]);
                /* -bias * (sum of each group of 4 activation codes) */
                start[p] = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, bias, yv[p]));
            }
        }
        for (int r = 0; r < NR; r++) {
            const char *row = vx + (size_t)r * bx;
            __m512i wx;
            float dx;
            if (kind == K_Q8_0) {
                const qr_block_q8_0 *b = (const qr_block_q8_0 *)row + i;
                wx = _mm512_xor_si512(bcast32(b->qs), bias); /* x + 128 as unsigned bytes */
                dx = T16[b->d];
            } else if (kind == K_Q4_0) {
                const qr_block_q4_0 *b = (const qr_block_q4_0 *)row + i;
                wx = nibbles_64(b->qs);
                dx = T16[b->d];
            } else if (kind == K_Q5_0) {
                const qr_block_q5_0 *b = (const qr_block_q5_0 *)row + i;
                wx = q5_codes_64(b->qs, b->qh); /* q in 0..31, the accumulator starts at -16 * sum(y) */
                dx = T16[b->d];
            } else {
                float mx;
                if (kind == K_Q4_1) {
                    const qr_block_q4_1 *b = (const qr_block_q4_1 *)row + i;
                    wx = nibbles_64(b->qs);
                    dx = T16[b->d];
                    mx = T16[b->m];
                } else {
                    const qr_block_q5_1 *b = (const qr_block_q5_1 *)row + i;
                    wx = q5_codes_64(b->qs, b->qh);
                    dx = T16[b->d];
                    mx = T16[b->m];
                }
                for (int c = 0; c < NC; c++) summs[r][c] = fmaf(mx, sy[c], summs[r][c]);
            }
            const __m512 dxv = _mm512_set1_ps(dx);
            for (int p = 0; p < NP; p++) {
                const __m512 dot = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start[p], wx, yv[p]));
                acc[r][p] = _mm512_fmadd_ps(_mm512_mul_ps(dxv, dyv[p]), dot, acc[r][p]);
            }
        }
    }
    for (int r = 0; r < NR; r++)
        for (int p = 0; p < NP; p++) {
            const int c0 = 2 * p, c1 = 2 * p + 1;
            const float add0 = offset ? summs[r][c0] : 0.0f;
            s[(int64_t)c0 * bs + r] = hsum_ps(_mm512_castps512_ps256(acc[r][p])) + add0;
            if (c1 < NC) {
                const float add1 = offset ? summs[r][c1] : 0.0f;
                s[(int64_t)c1 * bs + r] = hsum_ps(_mm512_extractf32x8_ps(acc[r][p], 1)) + add1;
            }
        }
}

/* Sums of the halves of 4 vectors of 16 int32: [a.lo, b.lo, c.lo, d.lo, a.hi, b.hi, c.hi, d.hi]
 * (lo = lanes 0..7, hi = lanes 8..15). Exact. */
static inline __m256i half_sums4(__m512i a, __m512i b, __m512i c, __m512i d) {
    const __m512i ab = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
    const __m512i cd = _mm512_add_epi32(_mm512_unpacklo_epi32(c, d), _mm512_unpackhi_epi32(c, d));
    /* per 128-bit lane L: [sum of a's lane L, b's, c's, d's] */
    const __m512i v = _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd));
    /* lanes 0 + 1 (the low halves) and 2 + 3 (the high halves) */
    const __m512i w = _mm512_add_epi32(v, _mm512_shuffle_i32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm512_castsi512_si256(_mm512_shuffle_i32x4(w, w, _MM_SHUFFLE(2, 0, 2, 0)));
}

/* llama.cpp's repacked Q4_0 order (qr_vec_dot_q4_0_q8_0_rp): per block acc = fmaf(isum, dx * dy, acc).
 * The NR x NP vectors of a block (row r, activation pair p at index r * NP + p) are reduced 4 at a time. */
static inline __attribute__((always_inline)) void tile_rp(int64_t n, float *s, int64_t bs, const char *vx, size_t bx,
                                                          const char *vy, size_t by, const int NR, const int NC) {
    const int NP = (NC + 1) / 2, NV = NR * NP;
    const int64_t nb = n / QR_QK8_0;
    const __m512i zero = _mm512_setzero_si512(), eight = _mm512_set1_epi8(8);
    float acc[4][4];
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) acc[r][c] = 0.0f;
    /* NC == 4: lane l of accv is the dot of row rp_lane_row[l] and column rp_lane_col[l] (half_sums4's order over
     * the vectors r * 2 + p: lanes 0-3 the low halves (column 2p) of vectors 0-3, lanes 4-7 their high halves, lanes
     * 8-15 the same for vectors 4-7) */
    const __m512i rp_lane_row = _mm512_setr_epi32(0, 0, 1, 1, 0, 0, 1, 1, 2, 2, 3, 3, 2, 2, 3, 3);
    const __m512i rp_lane_col = _mm512_setr_epi32(0, 2, 0, 2, 1, 3, 1, 3, 0, 2, 0, 2, 1, 3, 1, 3);
    __m512 accv = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        __m512i yv[2], start[2], d[8];
        float dy[4] = {0.0f, 0.0f, 0.0f, 0.0f}, dx[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int p = 0; p < NP; p++) {
            const int c0 = 2 * p, c1 = 2 * p + 1 < NC ? 2 * p + 1 : 2 * p;
            const qr_block_q8_0 *y0 = (const qr_block_q8_0 *)(vy + (size_t)c0 * by) + i;
            const qr_block_q8_0 *y1 = (const qr_block_q8_0 *)(vy + (size_t)c1 * by) + i;
            yv[p] = load_pair(y0->qs, y1->qs);
            dy[c0] = T16[y0->d];
            dy[c1] = T16[y1->d];
            start[p] = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, eight, yv[p]));
        }
        for (int r = 0; r < NR; r++) {
            const qr_block_q4_0 *b = (const qr_block_q4_0 *)(vx + (size_t)r * bx) + i;
            const __m512i wx = nibbles_64(b->qs);
            dx[r] = T16[b->d];
            for (int p = 0; p < NP; p++) d[r * NP + p] = _mm512_dpbusd_epi32(start[p], wx, yv[p]);
        }
        if (NC == 4) { /* the NR x 4 dots a lane each: the same fma per dot, in one register */
            const __m256i h0 = half_sums4(d[0], d[1], NV > 2 ? d[2] : zero, NV > 3 ? d[3] : zero);
            const __m256i h1 = NV > 4 ? half_sums4(d[4], NV > 5 ? d[5] : zero, NV > 6 ? d[6] : zero, NV > 7 ? d[7] : zero)
                                      : _mm256_setzero_si256();
            const __m512i isum = _mm512_inserti64x4(_mm512_castsi256_si512(h0), h1, 1);
            /* (from registers: a vector load of the scalars just stored would stall on the store forwarding) */
            const __m512 dxv = _mm512_permutexvar_ps(rp_lane_row, _mm512_castps128_ps512(_mm_setr_ps(dx[0], dx[1], dx[2], dx[3])));
            const __m512 dyv = _mm512_permutexvar_ps(rp_lane_col, _mm512_castps128_ps512(_mm_setr_ps(dy[0], dy[1], dy[2], dy[3])));
            accv = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dxv, dyv), accv);
            continue;
        }
        for (int g = 0; g < NV; g += 4) {
            int32_t isum[8];
            _mm256_storeu_si256((__m256i *)isum, half_sums4(d[g], g + 1 < NV ? d[g + 1] : zero,
                                                            g + 2 < NV ? d[g + 2] : zero, g + 3 < NV ? d[g + 3] : zero));
            for (int k = 0; k < 4 && g + k < NV; k++) {
                const int r = (g + k) / NP, p = (g + k) % NP, c0 = 2 * p, c1 = 2 * p + 1;
                acc[r][c0] = fmaf((float)isum[k], dx[r] * dy[c0], acc[r][c0]);
                if (c1 < NC) acc[r][c1] = fmaf((float)isum[4 + k], dx[r] * dy[c1], acc[r][c1]);
            }
        }
    }
    if (NC == 4) {
        float lanes[16];
        _mm512_storeu_ps(lanes, accv);
        for (int l = 0; l < 16; l++) {
            const int r = ((l & 3) >> 1) + 2 * (l >> 3), c = 2 * (l & 1) + ((l >> 2) & 1);
            if (r < NR) acc[r][c] = lanes[l];
        }
    }
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) s[(int64_t)c * bs + r] = acc[r][c];
}

/* The tile entry points: one specialisation per (nr, nc) (QR_TILE_FN, quant_avx2_common.h). */
#define CALL_Q8_0(R, C) tile_lanes(n, s, bs, vx, bx, vy, by, R, C, K_Q8_0)
#define CALL_Q4_0(R, C) tile_lanes(n, s, bs, vx, bx, vy, by, R, C, K_Q4_0)
#define CALL_Q4_1(R, C) tile_lanes(n, s, bs, vx, bx, vy, by, R, C, K_Q4_1)
#define CALL_Q5_0(R, C) tile_lanes(n, s, bs, vx, bx, vy, by, R, C, K_Q5_0)
#define CALL_Q5_1(R, C) tile_lanes(n, s, bs, vx, bx, vy, by, R, C, K_Q5_1)
#define CALL_Q4_0_RP(R, C) tile_rp(n, s, bs, vx, bx, vy, by, R, C)

QR_TILE_FN(qr_vec_dot_tile_q8_0_q8_0_avx512, CALL_Q8_0)
QR_TILE_FN(qr_vec_dot_tile_q4_0_q8_0_avx512, CALL_Q4_0)
QR_TILE_FN(qr_vec_dot_tile_q4_1_q8_1_avx512, CALL_Q4_1)
QR_TILE_FN(qr_vec_dot_tile_q5_0_q8_0_avx512, CALL_Q5_0)
QR_TILE_FN(qr_vec_dot_tile_q5_1_q8_1_avx512, CALL_Q5_1)
QR_TILE_FN(qr_vec_dot_tile_q4_0_q8_0_rp_avx512, CALL_Q4_0_RP)

/* The repacked Q4_0 order for one weight row and one activation row (the decode GEMV), two consecutive blocks a zmm
 * register: [low nibbles of block i, high nibbles of i, low of i + 1, high of i + 1] against the activation blocks
 * i, i + 1; the 8 block sums of four registers reduced at once, then acc = fmaf(isum, dx * dy, acc) in block order
 * (bit-identical to qr_vec_dot_q4_0_q8_0_rp_avx2). Several weight rows a call (the activation blocks loaded once
 * for them) measured 14 % slower on the Zen 5 (llama-1b Q4_0 tg64 39.9 against 46.2 t/s at 2 threads). */
void qr_vec_dot_q4_0_q8_0_rp_avx512(int64_t n, float *s, const void *vx, const void *vy) {
    const qr_block_q4_0 *x = vx;
    const qr_block_q8_0 *y = vy;
    const int64_t nb = n / QR_QK8_0;
    const __m512i zero = _mm512_setzero_si512(), eight = _mm512_set1_epi8(8), m4 = _mm512_set1_epi8(0x0F);
    const __m512i dup = _mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3);
    float acc = 0.0f;
    int64_t i = 0;
    for (; i + 8 <= nb; i += 8) {
        __m512i d[4];
        for (int k = 0; k < 4; k++) {
            const __m512i yv = load_pair(y[i + 2 * k].qs, y[i + 2 * k + 1].qs);
            const __m256i qs = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)x[i + 2 * k + 1].qs),
                                                _mm_loadu_si128((const __m128i *)x[i + 2 * k].qs));
            const __m512i v = _mm512_permutexvar_epi64(dup, _mm512_castsi256_si512(qs));
            const __m512i st = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, eight, yv)); /* -8 * sum(y) */
            d[k] = _mm512_dpbusd_epi32(st, _mm512_and_si512(_mm512_mask_srli_epi16(v, 0xFF00FF00u, v, 4), m4), yv);
        }
        int32_t isum[8]; /* [blocks 0, 2, 4, 6, then 1, 3, 5, 7] */
        _mm256_storeu_si256((__m256i *)isum, half_sums4(d[0], d[1], d[2], d[3]));
        for (int j = 0; j < 8; j++) acc = fmaf((float)isum[(j >> 1) + 4 * (j & 1)], T16[x[i + j].d] * T16[y[i + j].d], acc);
    }
    for (; i < nb; i++) { /* the last blocks one at a time (the block in both halves; the low half's sum) */
        const __m512i yv = bcast32(y[i].qs), st = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, eight, yv));
        int32_t is[8];
        _mm256_storeu_si256((__m256i *)is, half_sums4(_mm512_dpbusd_epi32(st, nibbles_64(x[i].qs), yv), zero, zero, zero));
        acc = fmaf((float)is[0], T16[x[i].d] * T16[y[i].d], acc);
    }
    *s = acc;
}

/* ---- Q4_0 repacked 16 rows at a time (rows in lanes; see quant_kquants_avx512.c's Q4_K form) -----------------
 * llama.cpp's repacked Q4_0 order is per block acc = fmaf(isum, dx * dy, acc) (qr_vec_dot_q4_0_q8_0_rp). With 16
 * weight rows interleaved (qr_q4_0_rp16_pack), lane r of a vpdpbusd is row r: 4 of its codes (0..15) times 4
 * activation bytes broadcast, started at -8 * (the activation block's sum) so that the lane ends at the exact
 * isum; then the same fma, 16 rows wide. Layout of a group of 16 rows, per block (288 bytes, blocks consecutive):
 *   [0, 256)    codes: [t 0..3][row r][4 bytes]: row r's qs[4t .. 4t + 3] (low nibbles: values 4t.., high: 16 + 4t..)
 *   [256, 288)  d: [row] f16
 * The activation rows carry, after their blocks, -8 * each block's sum as int32 (qr_q4_0_rp_act_extra). */
static inline int32_t rp_load_i32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline __attribute__((always_inline)) void tile_q4_0_rp16(int64_t n, float *s, int64_t bs, const char *vx,
                                                                 const char *vy, size_t by, const int NC) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const int64_t nb = n / QR_QK4_0;
    __m512 acc[4];
    for (int c = 0; c < NC; c++) acc[c] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const char *xb = vx + (size_t)i * 288;
        __m512i code[8]; /* code[t]: values 4t.. (t < 4), 16 + 4(t - 4).. (t >= 4) */
        for (int t = 0; t < 4; t++) {
            const __m512i v = _mm512_loadu_si512(xb + 64 * t);
            code[t] = _mm512_and_si512(v, m4);
            code[t + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        }
        const __m512 dx = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(xb + 256)));
        for (int c = 0; c < NC; c++) {
            const char *yr = vy + (size_t)c * by;
            const qr_block_q8_0 *y = (const qr_block_q8_0 *)yr + i;
            __m512i a = _mm512_set1_epi32(rp_load_i32(yr + nb * sizeof(qr_block_q8_0) + 4 * i));
            for (int t = 0; t < 4; t++) {
                a = _mm512_dpbusd_epi32(a, code[t], _mm512_set1_epi32(rp_load_i32(y->qs + 4 * t)));
                a = _mm512_dpbusd_epi32(a, code[t + 4], _mm512_set1_epi32(rp_load_i32(y->qs + 16 + 4 * t)));
            }
            const __m512 d = _mm512_mul_ps(dx, _mm512_set1_ps(f16c_to_fp32(y->d)));
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a), d, acc[c]);
        }
    }
    for (int c = 0; c < NC; c++) _mm512_storeu_ps(s + (int64_t)c * bs, acc[c]);
}

void qr_vec_dot_tile_q4_0_q8_0_rp16_avx512(int64_t n, float *s, int64_t bs, const void *x, size_t bx, const void *y,
                                           size_t by, int nr, int nc) {
    (void)bx;
    (void)nr;
    switch (nc) {
    case 1: tile_q4_0_rp16(n, s, bs, x, y, by, 1); return;
    case 2: tile_q4_0_rp16(n, s, bs, x, y, by, 2); return;
    case 3: tile_q4_0_rp16(n, s, bs, x, y, by, 3); return;
    case 4: tile_q4_0_rp16(n, s, bs, x, y, by, 4); return;
    default: return;
    }
}

/* ---- Q8_0 repacked 16 rows at a time (rows in lanes) ----------------------------------------------------------
 * ggml's Q8_0 vec_dot order: per block acc = fma(dx * dy, (float)quad sums, acc) on 8 lanes (lane k: the block's
 * values 4k .. 4k + 3), then hsum_ps. Here lane r of 8 accumulators acc[k] is weight row r's lane k: a vpdpbusd of
 * row r's 4 codes (stored + 128, unsigned) times 4 activation bytes broadcast, started at -128 * their sum (the
 * activation rows' extra, qr_q8_0_rp16_act_extra) ends at the exact quad sum; the same fma per lane and block; the
 * same horizontal sum per lane at the end. Layout of a group of 16 rows, per block (544 bytes, blocks consecutive):
 *   [0, 512)    codes: [quad k 0..7][row r][4 bytes]: row r's qs[4k .. 4k + 3] + 128
 *   [512, 544)  d: [row] f16 */
/* Q5_0 (the same vec_dot order with codes 0..31 and a start of -16 * the quad's sum, qr_q5_0_rp16_act_extra) in a
 * layout of the file's size, per block of a group (352 bytes):
 *   [0, 256)    low 4 bits: [t 0..3][row r][4 bytes]: row r's qs[4t .. 4t + 3] (low nibbles: values 4t.., high: 16 + 4t..)
 *   [256, 320)  5th bits: [quad k 0..7] u64, bit 4r + b = row r's value 4k + b's (added as 16 through a byte mask)
 *   [320, 352)  d: [row] f16 */
enum rp16_sym { RP16_Q8_0, RP16_Q5_0 };

static inline __attribute__((always_inline)) void tile_sym_rp16(int64_t n, float *s, int64_t bs, const char *vx,
                                                                const char *vy, size_t by, const int NC,
                                                                const enum rp16_sym kind) {
    const int64_t nb = n / QR_QK8_0;
    const size_t bstride = kind == RP16_Q8_0 ? 544 : 352, doff = kind == RP16_Q8_0 ? 512 : 320;
    const __m512i m4 = _mm512_set1_epi8(0x0F), sixteen = _mm512_set1_epi8(16);
    __m512 acc[4][8];
    for (int c = 0; c < NC; c++)
        for (int q = 0; q < 8; q++) acc[c][q] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const char *xb = vx + (size_t)i * bstride;
        const __m512 dx = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(xb + doff)));
        const qr_block_q8_0 *y[4];
        const char *ex[4];
        __m512 d[4];
        for (int c = 0; c < NC; c++) {
            const char *yr = vy + (size_t)c * by;
            y[c] = (const qr_block_q8_0 *)yr + i;
            ex[c] = yr + nb * sizeof(qr_block_q8_0) + 32 * i;
            d[c] = _mm512_mul_ps(dx, _mm512_set1_ps(f16c_to_fp32(y[c]->d)));
        }
        for (int q = 0; q < 8; q++) { /* (one quad's codes live at a time: room for more columns' accumulators) */
            __m512i code;
            if (kind == RP16_Q8_0) code = _mm512_loadu_si512(xb + 64 * q);
            else {
                const __m512i v = _mm512_loadu_si512(xb + 64 * (q & 3));
                code = _mm512_and_si512(q < 4 ? v : _mm512_srli_epi16(v, 4), m4);
                uint64_t hb;
                memcpy(&hb, xb + 256 + 8 * q, 8);
                code = _mm512_mask_add_epi8(code, _cvtu64_mask64(hb), code, sixteen);
            }
            for (int c = 0; c < NC; c++) {
                const __m512i a = _mm512_dpbusd_epi32(_mm512_set1_epi32(rp_load_i32(ex[c] + 4 * q)), code,
                                                      _mm512_set1_epi32(rp_load_i32(y[c]->qs + 4 * q)));
                acc[c][q] = _mm512_fmadd_ps(d[c], _mm512_cvtepi32_ps(a), acc[c][q]);
            }
        }
    }
    for (int c = 0; c < NC; c++) {
        const __m512 t0 = _mm512_add_ps(acc[c][0], acc[c][4]), t1 = _mm512_add_ps(acc[c][1], acc[c][5]);
        const __m512 t2 = _mm512_add_ps(acc[c][2], acc[c][6]), t3 = _mm512_add_ps(acc[c][3], acc[c][7]);
        _mm512_storeu_ps(s + (int64_t)c * bs, _mm512_add_ps(_mm512_add_ps(t0, t2), _mm512_add_ps(t1, t3)));
    }
}

void qr_vec_dot_tile_q8_0_q8_0_rp16_avx512(int64_t n, float *s, int64_t bs, const void *x, size_t bx, const void *y,
                                           size_t by, int nr, int nc) {
    (void)bx;
    (void)nr;
    switch (nc) {
    case 1: tile_sym_rp16(n, s, bs, x, y, by, 1, RP16_Q8_0); return;
    case 2: tile_sym_rp16(n, s, bs, x, y, by, 2, RP16_Q8_0); return;
    case 3: tile_sym_rp16(n, s, bs, x, y, by, 3, RP16_Q8_0); return;
    case 4: tile_sym_rp16(n, s, bs, x, y, by, 4, RP16_Q8_0); return;
    default: return;
    }
}

void qr_vec_dot_tile_q5_0_q8_0_rp16_avx512(int64_t n, float *s, int64_t bs, const void *x, size_t bx, const void *y,
                                           size_t by, int nr, int nc) {
    (void)bx;
    (void)nr;
    switch (nc) {
    case 1: tile_sym_rp16(n, s, bs, x, y, by, 1, RP16_Q5_0); return;
    case 2: tile_sym_rp16(n, s, bs, x, y, by, 2, RP16_Q5_0); return;
    case 3: tile_sym_rp16(n, s, bs, x, y, by, 3, RP16_Q5_0); return;
    case 4: tile_sym_rp16(n, s, bs, x, y, by, 4, RP16_Q5_0); return;
    default: return;
    }
}

/* ---- Q4_1 repacked 16 rows at a time (rows in lanes) ----------------------------------------------------------
 * ggml's Q4_1 x Q8_1 vec_dot order: per block summs = fmaf(m, s_y, summs) and acc = fma(dx * dy, (float)quad sums,
 * acc) on 8 lanes (lane k: values 4k .. 4k + 3), then hsum_ps(acc) + summs. Lane r of 8 accumulators acc[k] and of
 * summs is weight row r: the codes 0..15 are unsigned, so a vpdpbusd of row r's 4 codes and 4 activation bytes
 * broadcast gives the quad sum exactly with no start. Layout of a group of 16 rows, per block (320 bytes):
 *   [0, 256)    codes: [t 0..3][row r][4 bytes]: row r's qs[4t .. 4t + 3] (low nibbles: values 4t.., high: 16 + 4t..)
 *   [256, 288)  d: [row] f16;  [288, 320) m: [row] f16 */
static inline __attribute__((always_inline)) void tile_q4_1_rp16(int64_t n, float *s, int64_t bs, const char *vx,
                                                                 const char *vy, size_t by, const int NC) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), zero = _mm512_setzero_si512();
    const int64_t nb = n / QR_QK4_1;
    __m512 acc[2][8], summs[2];
    for (int c = 0; c < NC; c++) {
        summs[c] = _mm512_setzero_ps();
        for (int q = 0; q < 8; q++) acc[c][q] = _mm512_setzero_ps();
    }
    for (int64_t i = 0; i < nb; i++) {
        const char *xb = vx + (size_t)i * 320;
        const __m512 dx = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(xb + 256)));
        const __m512 mx = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(xb + 288)));
        const qr_block_q8_1 *y[2];
        __m512 d[2];
        for (int c = 0; c < NC; c++) {
            y[c] = (const qr_block_q8_1 *)(vy + (size_t)c * by) + i;
            summs[c] = _mm512_fmadd_ps(mx, _mm512_set1_ps(f16c_to_fp32(y[c]->s)), summs[c]);
            d[c] = _mm512_mul_ps(dx, _mm512_set1_ps(f16c_to_fp32(y[c]->d)));
        }
        for (int t = 0; t < 4; t++) {
            const __m512i v = _mm512_loadu_si512(xb + 64 * t);
            const __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
            for (int c = 0; c < NC; c++) {
                const __m512i a = _mm512_dpbusd_epi32(zero, lo, _mm512_set1_epi32(rp_load_i32(y[c]->qs + 4 * t)));
                const __m512i b = _mm512_dpbusd_epi32(zero, hi, _mm512_set1_epi32(rp_load_i32(y[c]->qs + 16 + 4 * t)));
                acc[c][t] = _mm512_fmadd_ps(d[c], _mm512_cvtepi32_ps(a), acc[c][t]);
                acc[c][t + 4] = _mm512_fmadd_ps(d[c], _mm512_cvtepi32_ps(b), acc[c][t + 4]);
            }
        }
    }
    for (int c = 0; c < NC; c++) {
        const __m512 t0 = _mm512_add_ps(acc[c][0], acc[c][4]), t1 = _mm512_add_ps(acc[c][1], acc[c][5]);
        const __m512 t2 = _mm512_add_ps(acc[c][2], acc[c][6]), t3 = _mm512_add_ps(acc[c][3], acc[c][7]);
        _mm512_storeu_ps(s + (int64_t)c * bs,
                         _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(t0, t2), _mm512_add_ps(t1, t3)), summs[c]));
    }
}

void qr_vec_dot_tile_q4_1_q8_1_rp16_avx512(int64_t n, float *s, int64_t bs, const void *x, size_t bx, const void *y,
                                           size_t by, int nr, int nc) {
    (void)bx;
    (void)nr;
    switch (nc) {
    case 1: tile_q4_1_rp16(n, s, bs, x, y, by, 1); return;
    case 2: tile_q4_1_rp16(n, s, bs, x, y, by, 2); return;
    default: return;
    }
}

/* ---- F16 weights (vec_dot_type F16): qr_vec_dot_f16_avx2's order, two of its 8-lane accumulators a zmm ----
 * The AVX2 dot keeps 4 accumulators; accumulator j takes the 8-value chunks at 32 m + 8 j. Here zmm acc01 holds
 * accumulators 0 (low half) and 1 (high half) and takes the 16 values at 32 m, acc23 those at 32 m + 16: the same
 * fused multiply-adds lane for lane, then the halves are reduced exactly as the AVX2 kernel reduces its four. A
 * sub-tile of up to 2 weight rows x 4 activation rows widens each row's values once for all its pairs (the
 * row-exact verification passes of speculative decoding: several activation rows through the one-row order). */
static inline __attribute__((always_inline)) __m512 f16x16(const uint16_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

static inline float f16_reduce4(__m512 a01, __m512 a23) { /* reduce4_ps of quant_avx2.c on the four halves */
    const __m256 a0 = _mm512_castps512_ps256(a01), a1 = _mm512_extractf32x8_ps(a01, 1);
    const __m256 a2 = _mm512_castps512_ps256(a23), a3 = _mm512_extractf32x8_ps(a23, 1);
    const __m256 v = _mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3));
    const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 t1 = _mm_hadd_ps(t0, t0);
    return _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
}

static inline __attribute__((always_inline)) void f16_tile_sub512(int64_t n, float *s, int64_t bs, const uint16_t *x0,
                                                                  const uint16_t *x1, const uint8_t *y, size_t by,
                                                                  int RR, int NC) {
    const int64_t n32 = n / 32 * 32;
    __m512 lo[2][4], hi[2][4];
    for (int r = 0; r < 2; r++)
        for (int c = 0; c < 4; c++) lo[r][c] = hi[r][c] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n32; i += 32) {
        const __m512 w0l = f16x16(x0 + i), w0h = f16x16(x0 + i + 16);
        const __m512 w1l = RR > 1 ? f16x16(x1 + i) : w0l, w1h = RR > 1 ? f16x16(x1 + i + 16) : w0h;
        for (int c = 0; c < NC; c++) {
            const uint16_t *yc = (const uint16_t *)(y + c * by) + i;
            const __m512 vl = f16x16(yc), vh = f16x16(yc + 16);
            lo[0][c] = _mm512_fmadd_ps(w0l, vl, lo[0][c]);
            hi[0][c] = _mm512_fmadd_ps(w0h, vh, hi[0][c]);
            if (RR > 1) {
                lo[1][c] = _mm512_fmadd_ps(w1l, vl, lo[1][c]);
                hi[1][c] = _mm512_fmadd_ps(w1h, vh, hi[1][c]);
            }
        }
    }
    for (int r = 0; r < RR; r++)
        for (int c = 0; c < NC; c++) {
            const uint16_t *xr = r ? x1 : x0, *yc = (const uint16_t *)(y + c * by);
            double sum = f16_reduce4(lo[r][c], hi[r][c]);
            for (int64_t i = n32; i < n; i++) sum += f16c_to_fp32(xr[i]) * f16c_to_fp32(yc[i]);
            s[c * bs + r] = (float)sum;
        }
}

void qr_vec_dot_tile_f16_avx512(int64_t n, float *s, int64_t bs, const void *vx, size_t bx, const void *vy, size_t by,
                                int nr, int nc) {
    const uint8_t *x = vx, *y = vy;
    for (int r0 = 0; r0 < nr; r0 += 2) {
        const uint16_t *x0 = (const uint16_t *)(x + r0 * bx), *x1 = (const uint16_t *)(x + (r0 + 1) * bx);
        float *sr = s + r0;
        const bool two = nr - r0 >= 2;
        switch (nc) {
        case 1: two ? f16_tile_sub512(n, sr, bs, x0, x1, y, by, 2, 1) : f16_tile_sub512(n, sr, bs, x0, x0, y, by, 1, 1); break;
        case 2: two ? f16_tile_sub512(n, sr, bs, x0, x1, y, by, 2, 2) : f16_tile_sub512(n, sr, bs, x0, x0, y, by, 1, 2); break;
        case 3: two ? f16_tile_sub512(n, sr, bs, x0, x1, y, by, 2, 3) : f16_tile_sub512(n, sr, bs, x0, x0, y, by, 1, 3); break;
        default: two ? f16_tile_sub512(n, sr, bs, x0, x1, y, by, 2, 4) : f16_tile_sub512(n, sr, bs, x0, x0, y, by, 1, 4); break;
        }
    }
}
