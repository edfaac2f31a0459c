/* quant_kquants_avx512.c — AVX-512 (F/BW/VL/DQ + VNNI) tiles of K-quant dot products against Q8_K:
 * the repacked Q4_K GEMM / GEMV orders and the tiled Q6_K order (qr_vec_dot_tile_fn, quant.h).
 *
 * Each result is bit-identical to the AVX2 tile of the same order (quant_kquants_avx2.c, llama.cpp's
 * AVX2 build): the integer sums of a super-block are exact whichever way they are formed (here 64
 * bytes per instruction, vpdpbusd / vpdpwssd), and the float steps are the same operations on the same
 * values in the same order, done for up to 4 activation rows at once in the lanes of one register (a
 * vector fma rounds each lane as fmaf does).
 * Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni (CMakeLists.txt); called only
 * after quant.c has confirmed those with cpuid.
 */
#include <string.h>

#include "quant/quant_avx2_common.h"
#include "quant/quant_internal.h"

static inline __m512i load512(const void *p) { return _mm512_loadu_si512(p); }

/* Sums of the halves of 4 vectors of 16 int32: [a.lo, b.lo, c.lo, d.lo, a.hi, b.hi, c.hi, d.hi]
 * (lo = lanes 0..7, hi = lanes 8..15). Exact. */
static inline __m256i half_sums4(__m512i a, __m512i b, __m512i c, __m512i d) {
    const __m512i ab = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
    const __m512i cd = _mm512_add_epi32(_mm512_unpacklo_epi32(c, d), _mm512_unpackhi_epi32(c, d));
    const __m512i v = _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd));
    const __m512i w = _mm512_add_epi32(v, _mm512_shuffle_i32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm512_castsi512_si256(_mm512_shuffle_i32x4(w, w, _MM_SHUFFLE(2, 0, 2, 0)));
}

/* Transposes 4 vectors of 4 int32 (rows) into columns: out[k] = [a[k], b[k], c[k], d[k]]. */
static inline void transpose4_epi32(const __m128i in[4], __m128i out[4]) {
    const __m128i t0 = _mm_unpacklo_epi32(in[0], in[1]), t1 = _mm_unpackhi_epi32(in[0], in[1]);
    const __m128i t2 = _mm_unpacklo_epi32(in[2], in[3]), t3 = _mm_unpackhi_epi32(in[2], in[3]);
    out[0] = _mm_unpacklo_epi64(t0, t2);
    out[1] = _mm_unpackhi_epi64(t0, t2);
    out[2] = _mm_unpacklo_epi64(t1, t3);
    out[3] = _mm_unpackhi_epi64(t1, t3);
}

/* Q4_K, repacked GEMM (gemm = 1: per super-block and pair k of sub-blocks acc = fma(isum_k, d, acc),
 * acc_min = fma(imin_k, dmin, acc_min)) or GEMV (gemm = 0: one fma of the super-block's sums) order,
 * *s = acc - acc_min, d = xd * yd, dmin = xdmin * yd: qr_vec_dot_q4_K_q8_K_gemm / _gemv. Lane c of the
 * float vectors is activation row c. */
static inline __attribute__((always_inline)) void tile_q4_K(int64_t n, float *s, int64_t bs, const char *vx, size_t bx,
                                                            const char *vy, size_t by, const int NR, const int NC,
                                                            const int gemm) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), zero = _mm512_setzero_si512();
    const __m256i pair_order = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    __m128 acc[4], acc_min[4];
    for (int r = 0; r < NR; r++) acc[r] = acc_min[r] = _mm_setzero_ps();
    for (int64_t i = 0; i < n / QR_QK_K; i++) {
        const qr_block_q8_K *y[4];
        __m128i per32[4];
        float yd[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int c = 0; c < NC; c++) {
            y[c] = (const qr_block_q8_K *)(vy + (size_t)c * by) + i;
            const __m256i b = _mm256_loadu_si256((const __m256i *)y[c]->bsums);
            per32[c] = _mm_hadd_epi16(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
            yd[c] = y[c]->d;
        }
        const __m128 ydv = _mm_loadu_ps(yd);
        for (int r = 0; r < NR; r++) {
            const qr_block_q4_K *x = (const qr_block_q4_K *)(vx + (size_t)r * bx) + i;
            const __m128i sm = k4_scales_mins(x->scales);
            /* scales of sub-blocks 0 2 4 6 1 3 5 7 (the order of half_sums4's lanes), mins as int16 */
            const __m256i sc = _mm256_permutevar8x32_epi32(_mm256_cvtepu8_epi32(sm), pair_order);
            const __m128i mins = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
            __m512i w[4]; /* 32 bytes of codes: low nibbles (sub-block 2j) then high nibbles (2j + 1) */
            for (int j = 0; j < 4; j++) {
                const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x->qs + 32 * j)));
                w[j] = _mm512_and_si512(_mm512_mask_srli_epi16(v, 0xFFFF0000u, v, 4), m4);
            }
            __m128i isum[4] = {_mm_setzero_si128(), _mm_setzero_si128(), _mm_setzero_si128(), _mm_setzero_si128()};
            __m128i imin[4] = {_mm_setzero_si128(), _mm_setzero_si128(), _mm_setzero_si128(), _mm_setzero_si128()};
            for (int c = 0; c < NC; c++) {
                __m512i raw[4];
                for (int j = 0; j < 4; j++) raw[j] = _mm512_dpbusd_epi32(zero, w[j], load512(y[c]->qs + 64 * j));
                const __m256i sub = _mm256_mullo_epi32(half_sums4(raw[0], raw[1], raw[2], raw[3]), sc);
                isum[c] = _mm_add_epi32(_mm256_castsi256_si128(sub), _mm256_extracti128_si256(sub, 1));
                imin[c] = _mm_madd_epi16(mins, per32[c]);
            }
            __m128i ti[4], tm[4]; /* ti[k] lane c: pair k's sum of activation row c */
            transpose4_epi32(isum, ti);
            transpose4_epi32(imin, tm);
            const __m128 d = _mm_mul_ps(_mm_set1_ps(f16c_to_fp32(x->d)), ydv);
            const __m128 dmin = _mm_mul_ps(_mm_set1_ps(f16c_to_fp32(x->dmin)), ydv);
            if (gemm) {
                for (int k = 0; k < 4; k++) {
                    acc[r] = _mm_fmadd_ps(_mm_cvtepi32_ps(ti[k]), d, acc[r]);
                    acc_min[r] = _mm_fmadd_ps(_mm_cvtepi32_ps(tm[k]), dmin, acc_min[r]);
                }
            } else {
                const __m128i hs = _mm_add_epi32(_mm_add_epi32(ti[0], ti[1]), _mm_add_epi32(ti[2], ti[3]));
                const __m128i hm = _mm_add_epi32(_mm_add_epi32(tm[0], tm[1]), _mm_add_epi32(tm[2], tm[3]));
                acc[r] = _mm_fmadd_ps(_mm_cvtepi32_ps(hs), d, acc[r]);
                acc_min[r] = _mm_fmadd_ps(_mm_cvtepi32_ps(hm), dmin, acc_min[r]);
            }
        }
    }
    for (int r = 0; r < NR; r++) {
        float out[4];
        _mm_storeu_ps(out, _mm_sub_ps(acc[r], acc_min[r]));
        for (int c = 0; c < NC; c++) s[(int64_t)c * bs + r] = out[c];
    }
}

/* Q6_K, tiled order (qr_vec_dot_q6_K_q8_K_tiled): per super-block the exact sum of sc * (q - 32) * qy,
 * then acc = fma(fma(-0, 0, dx * isum), yd, acc). The codes 0..63 times the activations (vpmaddubsw, no
 * saturation: 2 * 63 * 127 < 2^15) are scaled and summed by vpdpwssd; 32 * sum(sc * bsum) comes off. */
static inline __attribute__((always_inline)) void tile_q6_K(int64_t n, float *s, int64_t bs, const char *vx, size_t bx,
                                                            const char *vy, size_t by, const int NR, const int NC) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m3 = _mm512_set1_epi8(3);
    __m128 acc[4];
    for (int r = 0; r < NR; r++) acc[r] = _mm_setzero_ps();
    /* int16 lane t of the products of 64-byte chunk m covers codes 64m + 2t, + 1: scale 4m + t / 8 */
    __m512i sc_idx[4];
    for (int m = 0; m < 4; m++) {
        int16_t idx[32];
        for (int t = 0; t < 32; t++) idx[t] = (int16_t)(4 * m + t / 8);
        sc_idx[m] = load512(idx);
    }
    for (int64_t i = 0; i < n / QR_QK_K; i++) {
        const qr_block_q8_K *y[4];
        float yd[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int c = 0; c < NC; c++) {
            y[c] = (const qr_block_q8_K *)(vy + (size_t)c * by) + i;
            yd[c] = y[c]->d;
        }
        const __m128 ydv = _mm_loadu_ps(yd);
        for (int r = 0; r < NR; r++) {
            const qr_block_q6_K *x = (const qr_block_q6_K *)(vx + (size_t)r * bx) + i;
            const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x->scales));
            __m512i q[4], sc[4]; /* q[m]: codes 64m .. 64m + 63 as bytes 0..63 */
            for (int j = 0; j < 2; j++) {
                const uint8_t *ql = x->ql + 64 * j, *qh = x->qh + 32 * j;
                /* low half: the codes of ql[0..31], high half: of ql[32..63]; qh shifted per pair */
                const __m512i l = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)ql)),
                                                     _mm256_loadu_si256((const __m256i *)(ql + 32)), 1);
                const __m512i hb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)qh));
                const __m512i h = _mm512_mask_srli_epi16(hb, 0xFFFF0000u, hb, 2); /* high half: qh >> 2 */
                q[2 * j] = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_slli_epi16(_mm512_and_si512(h, m3), 4));
                q[2 * j + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                                               _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(h, 4), m3), 4));
            }
            for (int m = 0; m < 4; m++) sc[m] = _mm512_permutexvar_epi16(sc_idx[m], _mm512_castsi256_si512(sc16));
            int32_t isum[4] = {0, 0, 0, 0};
            for (int c = 0; c < NC; c++) {
                __m512i sumi = _mm512_setzero_si512();
                for (int m = 0; m < 4; m++)
                    sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(q[m], load512(y[c]->qs + 64 * m)), sc[m]);
                const __m256i offset =
                    _mm256_slli_epi32(_mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)y[c]->bsums)), 5);
                const __m256i s8 = _mm256_sub_epi32(
                    _mm256_add_epi32(_mm512_castsi512_si256(sumi), _mm512_extracti64x4_epi64(sumi, 1)), offset);
                isum[c] = hsum_epi32(s8);
            }
            const __m128 s1 = _mm_cvtepi32_ps(_mm_loadu_si128((const __m128i *)isum));
            const __m128 res = _mm_fmadd_ps(_mm_set1_ps(-0.0f), _mm_setzero_ps(),
                                            _mm_mul_ps(_mm_set1_ps(f16c_to_fp32(x->d)), s1));
            acc[r] = _mm_fmadd_ps(res, ydv, acc[r]);
        }
    }
    for (int r = 0; r < NR; r++) {
        float out[4];
        _mm_storeu_ps(out, acc[r]);
        for (int c = 0; c < NC; c++) s[(int64_t)c * bs + r] = out[c];
    }
}

/* The tile entry points: one specialisation per (nr, nc) (QR_TILE_FN, quant_avx2_common.h). */
#define CALL_Q4_K_GEMM(R, C) tile_q4_K(n, s, bs, vx, bx, vy, by, R, C, 1)
#define CALL_Q4_K_GEMV(R, C) tile_q4_K(n, s, bs, vx, bx, vy, by, R, C, 0)
#define CALL_Q6_K(R, C) tile_q6_K(n, s, bs, vx, bx, vy, by, R, C)

QR_TILE_FN(qr_vec_dot_tile_q4_K_q8_K_gemm_avx512, CALL_Q4_K_GEMM)
QR_TILE_FN(qr_vec_dot_tile_q4_K_q8_K_gemv_avx512, CALL_Q4_K_GEMV)
QR_TILE_FN(qr_vec_dot_tile_q6_K_q8_K_tiled_avx512, CALL_Q6_K)

/* ---- Q4_K repacked 16 rows at a time (rows in lanes) -------------------------------------------------------
 * The repacked GEMM / GEMV orders above need, for every (weight row, activation row, super-block), the integer sum
 * of each sub-block pair, which a zmm of one row's products yields only after a 16-lane reduction (~5x the
 * vpdpbusd work). With 16 weight rows interleaved (qr_q4_K_rp16_pack, at load time), lane r of a vpdpbusd is
 * weight row r: 4 bytes of its codes times 4 activation bytes broadcast to every lane, so the 8 vpdpbusd of a
 * sub-block leave row r's sub-block sum in lane r with nothing to reduce; the scales, mins and the float steps
 * (the same fma chains, 16 weight rows wide) follow per lane. Layout of a group of 16 rows, per super-block
 * (QR_Q4_K_RP16_SB bytes, super-blocks consecutive):
 *   [0, 2048)     codes: [pair k 0..3][t 0..7][row r 0..15][4 bytes]: row r's qs[32k + 4t .. + 3] (the low
 *                 nibbles are sub-block 2k's values 4t.., the high ones sub-block 2k + 1's)
 *   [2048, 2176)  scales: [sub-block 0..7][row] u8
 *   [2176, 2304)  mins: [pair k][row][2] u8 (sub-blocks 2k, 2k + 1; widened to int16 pairs for vpmaddwd)
 *   [2304, 2336)  d: [row] f16;  [2336, 2368) dmin: [row] f16 */
#define RP16_CODES 0
#define RP16_SC 2048
#define RP16_MN 2176
#define RP16_D 2304
#define RP16_DMIN 2336

static inline int32_t load_i32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* s[c * bs + r] for the 16 rows r of the group at vx and NC activation rows: the GEMM (gemm = 1) or GEMV order of
 * qr_vec_dot_q4_K_q8_K_gemm / _gemv, each lane bit for bit. */
static inline __attribute__((always_inline)) void tile_q4_K_rp16(int64_t n, float *s, int64_t bs, const char *vx,
                                                                 const char *vy, size_t by, const int NC,
                                                                 const int gemm) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), zero = _mm512_setzero_si512();
    __m512 acc[QR_Q4_K_RP16_NC], accm[QR_Q4_K_RP16_NC];
    for (int c = 0; c < NC; c++) acc[c] = accm[c] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / QR_QK_K; i++) {
        const char *xb = vx + (size_t)i * QR_Q4_K_RP16_SB;
        const int8_t *yq[QR_Q4_K_RP16_NC];
        int32_t pb[QR_Q4_K_RP16_NC][4]; /* per pair k: the two sub-blocks' activation sums as int16 x 2 */
        __m512 dc[QR_Q4_K_RP16_NC], dmc[QR_Q4_K_RP16_NC];
        const __m512 dx = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(xb + RP16_D)));
        const __m512 dmx = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(xb + RP16_DMIN)));
        for (int c = 0; c < NC; c++) {
            const qr_block_q8_K *y = (const qr_block_q8_K *)(vy + (size_t)c * by) + i;
            yq[c] = y->qs;
            const __m512 yd = _mm512_set1_ps(y->d);
            dc[c] = _mm512_mul_ps(dx, yd);
            dmc[c] = _mm512_mul_ps(dmx, yd);
            const __m256i b = _mm256_loadu_si256((const __m256i *)y->bsums);
            _mm_storeu_si128((__m128i *)pb[c], _mm_hadd_epi16(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1)));
        }
        __m512i ist[QR_Q4_K_RP16_NC], imt[QR_Q4_K_RP16_NC];
        for (int c = 0; c < NC; c++) ist[c] = imt[c] = zero;
        for (int k = 0; k < 4; k++) {
            __m512i a[QR_Q4_K_RP16_NC], b[QR_Q4_K_RP16_NC];
            for (int c = 0; c < NC; c++) a[c] = b[c] = zero;
            for (int t = 0; t < 8; t++) {
                const __m512i v = load512(xb + RP16_CODES + (k * 8 + t) * 64);
                const __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                for (int c = 0; c < NC; c++) {
                    a[c] = _mm512_dpbusd_epi32(a[c], lo, _mm512_set1_epi32(load_i32(yq[c] + 64 * k + 4 * t)));
                    b[c] = _mm512_dpbusd_epi32(b[c], hi, _mm512_set1_epi32(load_i32(yq[c] + 64 * k + 32 + 4 * t)));
                }
            }
            const __m512i sca = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(xb + RP16_SC + 32 * k)));
            const __m512i scb = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(xb + RP16_SC + 32 * k + 16)));
            const __m512i mn = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(xb + RP16_MN + 32 * k)));
            for (int c = 0; c < NC; c++) {
                const __m512i is = _mm512_add_epi32(_mm512_mullo_epi32(a[c], sca), _mm512_mullo_epi32(b[c], scb));
                const __m512i im = _mm512_madd_epi16(mn, _mm512_set1_epi32(pb[c][k]));
                if (gemm) {
                    acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), dc[c], acc[c]);
                    accm[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(im), dmc[c], accm[c]);
                } else {
                    ist[c] = _mm512_add_epi32(ist[c], is);
                    imt[c] = _mm512_add_epi32(imt[c], im);
                }
            }
        }
        if (!gemm)
            for (int c = 0; c < NC; c++) {
                acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ist[c]), dc[c], acc[c]);
                accm[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(imt[c]), dmc[c], accm[c]);
            }
    }
    for (int c = 0; c < NC; c++) _mm512_storeu_ps(s + (int64_t)c * bs, _mm512_sub_ps(acc[c], accm[c]));
}

#define RP16_CASE(C, G) \
    case C: tile_q4_K_rp16(n, s, bs, x, y, by, C, G); return;
#define RP16_FN(NAME, G)                                                                                      \
    void NAME(int64_t n, float *s, int64_t bs, const void *x, size_t bx, const void *y, size_t by, int nr,   \
              int nc) {                                                                                       \
        (void)bx;                                                                                             \
        (void)nr;                                                                                             \
        switch (nc) {                                                                                         \
            RP16_CASE(1, G) RP16_CASE(2, G) RP16_CASE(3, G) RP16_CASE(4, G)                                   \
        default: return;                                                                                      \
        }                                                                                                     \
    }
RP16_FN(qr_vec_dot_tile_q4_K_q8_K_gemm_rp16_avx512, 1)
RP16_FN(qr_vec_dot_tile_q4_K_q8_K_gemv_rp16_avx512, 0)
