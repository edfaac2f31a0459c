/* quant_avx2_common.h — small AVX2 building blocks shared by the *_avx2.c and *_avx512.c kernels.
 * Include only from files compiled with at least -mavx2 -mfma -mf16c (the *_avx2.c and *_avx512.c files). */
#ifndef QR_QUANT_AVX2_COMMON_H
#define QR_QUANT_AVX2_COMMON_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "quant/blocks.h"

/* fp16 -> fp32 of every bit pattern (quant_avx2.c, filled by qr_quant_avx2_init): a load instead of a
 * conversion on the vector ports. */
extern float qr_avx2_fp16_table[65536];

/* fp16 bit pattern -> float with the F16C instruction (exact). */
static inline float f16c_to_fp32(uint16_t h) { return _cvtsh_ss(h); }

/* Sum of the 8 lanes. */
static inline float hsum_ps(__m256 x) {
    __m128 r = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

/* Sum of the 4 lanes. */
static inline float hsum_ps128(__m128 r) {
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

/* Sum of the 8 int32 lanes. */
static inline int hsum_epi32(__m256i x) {
    __m128i r = _mm_add_epi32(_mm256_extracti128_si256(x, 1), _mm256_castsi256_si128(x));
    r = _mm_add_epi32(r, _mm_shuffle_epi32(r, _MM_SHUFFLE(1, 0, 3, 2)));
    r = _mm_add_epi32(r, _mm_shuffle_epi32(r, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(r);
}

/* 16 bytes of packed nibbles -> 32 bytes: the low nibbles in bytes 0..15, the high ones in 16..31
 * (the order of the 32 values of a Q4_0-style block). */
static inline __m256i nibbles_32(const uint8_t *p) {
    /* broadcast-load + blend rather than vinserti128: keeps the shuffle ports free */
    const __m256i packed = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p));
    const __m256i both = _mm256_blend_epi32(packed, _mm256_srli_epi16(packed, 4), 0xF0);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

/* 32 bits (little-endian u32 at p) -> 32 bytes, byte j = 0xFF when bit j is set, else 0. */
static inline __m256i bits_to_bytes_32(const uint8_t *p) {
    uint32_t bits;
    memcpy(&bits, p, 4);
    /* byte j takes source byte j/8 ... */
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits),
                                               _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL,
                                                                 0x0101010101010101LL, 0x0000000000000000LL));
    /* ... and is all ones after or-ing every bit but bit j%8 */
    const __m256i others = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfeLL);
    return _mm256_cmpeq_epi8(_mm256_or_si256(spread, others), _mm256_set1_epi64x(-1));
}

/* Unsigned bytes a (0..255) times signed bytes b, all 32 products summed in adjacent groups of 4,
 * as 8 floats. Exact while each adjacent pair of products stays within int16 (true for our codes). */
static inline __m256 dot_u8i8_ps(__m256i a, __m256i b) {
    const __m256i pairs = _mm256_maddubs_epi16(a, b);
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}

/* Signed bytes a times signed bytes b (b != -128), as dot_u8i8_ps. */
static inline __m256 dot_i8i8_ps(__m256i a, __m256i b) {
    return dot_u8i8_ps(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
}

/* The 32 signed activation codes of a Q8 block. */
static inline __m256i load_q8(const int8_t *qs) { return _mm256_loadu_si256((const __m256i *)qs); }

/* Q5_0 codes of a block as signed bytes (q - 16): a clear fifth bit sets the high nibble 0xF0. */
static inline __m256i q5_0_codes(const qr_block_q5_0 *b) {
    const __m256i high = _mm256_andnot_si256(bits_to_bytes_32(b->qh), _mm256_set1_epi8((char)0xF0));
    return _mm256_or_si256(nibbles_32(b->qs), high);
}

/* Q5_1 codes of a block as unsigned bytes 0..31. */
static inline __m256i q5_1_codes(const qr_block_q5_1 *b) {
    const __m256i high = _mm256_and_si256(bits_to_bytes_32(b->qh), _mm256_set1_epi8(0x10));
    return _mm256_or_si256(nibbles_32(b->qs), high);
}

/* Unpacks the 12 scale bytes of a Q4_K / Q5_K block into 8 scales (bytes 0..7) and 8 mins (8..15). */
static inline __m128i k4_scales_mins(const uint8_t *packed) {
    uint32_t a[3];
    memcpy(a, packed, 12);
    const uint32_t low6 = 0x3f3f3f3fu, lo4 = 0x0f0f0f0fu, hi2 = 0x03030303u;
    const uint32_t sc03 = a[0] & low6;
    const uint32_t m03 = a[1] & low6;
    const uint32_t sc47 = (a[2] & lo4) | (((a[0] >> 6) & hi2) << 4);
    const uint32_t m47 = ((a[2] >> 4) & lo4) | (((a[1] >> 6) & hi2) << 4);
    return _mm_set_epi32((int)m47, (int)m03, (int)sc47, (int)sc03);
}

/* A tile entry point NAME(n, s, bs, x, bx, y, by, nr, nc) that calls CALL(R, C) with constant R = nr, C = nc in
 * 1..4 x 1..4 (one specialisation each, so the kernels' loops unroll; vx, vy are x and y as char pointers). */
#define QR_TILE_CASE(CALL, R, C) \
    case (R) * 8 + (C): CALL(R, C); return;
#define QR_TILE_ROW(CALL, R) \
    QR_TILE_CASE(CALL, R, 1) QR_TILE_CASE(CALL, R, 2) QR_TILE_CASE(CALL, R, 3) QR_TILE_CASE(CALL, R, 4)
#define QR_TILE_FN(NAME, CALL)                                                                             \
    void NAME(int64_t n, float *s, int64_t bs, const void *x, size_t bx, const void *y, size_t by, int nr, \
              int nc) {                                                                                    \
        const char *vx = x, *vy = y;                                                                       \
        switch (nr * 8 + nc) {                                                                             \
            QR_TILE_ROW(CALL, 1) QR_TILE_ROW(CALL, 2) QR_TILE_ROW(CALL, 3) QR_TILE_ROW(CALL, 4)            \
        default: return;                                                                                   \
        }                                                                                                  \
    }

#endif /* QR_QUANT_AVX2_COMMON_H */
