/* quant_internal.h — helpers and per-type kernels shared by the files of src/quant/ (not a public API).
 *
 * Every kernel follows the signatures of quant.h:
 *   to_float(src, dst, n), from_float(src, dst, n), vec_dot(n, s, x, y)
 * with n a multiple of the type's block size. The scalar ones (quant_legacy.c, quant_kquants.c,
 * quant_kquants_quantize.c) are the oracle; the *_avx2 ones (quant_avx2.c, quant_kquants_avx2.c)
 * are compiled with -mavx2 -mfma -mf16c and are only called after a cpuid check (quant.c).
 */
#ifndef QR_QUANT_INTERNAL_H
#define QR_QUANT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "quant/blocks.h"
#include "quant/quant.h"

/* IEEE binary16 -> binary32, exact (subnormals, inf and NaN included). */
static inline float half_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t em = h & 0x7fffu;
    uint32_t bits;
    if (em >= 0x7c00u) {
        bits = sign | 0x7f800000u | ((em & 0x3ffu) << 13); /* inf / NaN */
    } else if (em >= 0x0400u) {
        bits = sign | ((em << 13) + ((127u - 15u) << 23)); /* normal: rebias the exponent */
    } else {
        float f = (float)em * 0x1p-24f; /* subnormal or zero: mantissa * 2^-24 is exact */
        return sign ? -f : f;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Round to the nearest integer, ties to even, for |x| < 2^22 (the magic-number trick: adding
 * 1.5 * 2^23 leaves the rounded integer in the low mantissa bits). Same rounding as ggml's
 * nearest_int and as _mm256_round_ps(.., _MM_FROUND_TO_NEAREST_INT). */
static inline int nearest_int(float x) {
    float v = x + 12582912.f;
    int32_t i;
    memcpy(&i, &v, 4);
    return (i & 0x007fffff) - 0x00400000;
}

/* E8M0 exponent -> 2^(e - 128), i.e. half of the MX scale 2^(e - 127) (the kvalues are doubled). */
static inline float e8m0_to_fp32_half(uint8_t e) {
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Unpacks the j-th (j < 8) 6-bit scale and min of a Q4_K / Q5_K scales[12] array. */
static inline void kquant_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Unpacks the 16 signed 6-bit scales (already minus 32) of a Q3_K block. */
static inline void q3_K_scales(const uint8_t *packed, int8_t out[16]) {
    for (int j = 0; j < 16; j++) {
        int lo = j < 8 ? packed[j] & 0xF : packed[j - 8] >> 4;
        int hi = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
        out[j] = (int8_t)((lo | (hi << 4)) - 32);
    }
}

/* The 16 doubled E2M1 values of MXFP4 and the 16 values of IQ4_NL, both sorted by code. */
extern const int8_t qr_kvalues_mxfp4[16];
extern const int8_t qr_kvalues_iq4nl[16];

/* ---- scalar kernels: plain float types and the 32-value block formats (quant_legacy.c) ---- */
void qr_f32_to_float(const void *src, float *dst, int64_t n);
void qr_f32_from_float(const float *src, void *dst, int64_t n);
void qr_vec_dot_f32(int64_t n, float *s, const void *x, const void *y);
void qr_f16_to_float(const void *src, float *dst, int64_t n);
void qr_f16_from_float(const float *src, void *dst, int64_t n);
void qr_vec_dot_f16(int64_t n, float *s, const void *x, const void *y);
void qr_bf16_to_float(const void *src, float *dst, int64_t n);
void qr_bf16_from_float(const float *src, void *dst, int64_t n);
void qr_vec_dot_bf16(int64_t n, float *s, const void *x, const void *y);

void qr_q4_0_to_float(const void *src, float *dst, int64_t n);
void qr_q4_0_from_float(const float *src, void *dst, int64_t n);
void qr_vec_dot_q4_0_q8_0(int64_t n, float *s, const void *x, const void *y);
void qr_q4_1_to_float(const void *src, float *dst, int64_t n);
void qr_q4_1_from_float(const float *src, void *dst, int64_t n);
void qr_vec_dot_q4_1_q8_1(int64_t n, float *s, const void *x, const void *y);
void qr_q5_0_to_float(const void *src, float *dst, int64_t n);
void qr_q5_0_from_float(const float *src, void *dst, int64_t n);
void qr_vec_dot_q5_0_q8_0(int64_t n, float *s, const void *x, const void *y);
void qr_q5_1_to_float(const void *src, float *dst, int64_t n);
void qr_q5_1_from_float(const float *src, void *dst, int64_t n);
void qr_vec_dot_q5_1_q8_1(int64_t n, float *s, const void *x, const void *y);
void qr_q8_0_to_float(const void *src, float *dst, int64_t n);
void qr_q8_0_from_float(const float *src, void *dst, int64_t n);
void qr_vec_dot_q8_0_q8_0(int64_t n, float *s, const void *x, const void *y);
void qr_q8_1_to_float(const void *src, float *dst, int64_t n);
void qr_q8_1_from_float(const float *src, void *dst, int64_t n);
void qr_mxfp4_to_float(const void *src, float *dst, int64_t n);
void qr_mxfp4_from_float(const float *src, void *dst, int64_t n);
void qr_vec_dot_mxfp4_q8_0(int64_t n, float *s, const void *x, const void *y);
void qr_iq4_nl_to_float(const void *src, float *dst, int64_t n);
void qr_iq4_nl_from_float(const float *src, void *dst, int64_t n);
void qr_vec_dot_iq4_nl_q8_0(int64_t n, float *s, const void *x, const void *y);
/* ggml's repacked-kernel order (see quant.h, vec_dot_gemv / vec_dot_gemm) */
void qr_vec_dot_q4_0_q8_0_rp(int64_t n, float *s, const void *x, const void *y);
void qr_vec_dot_iq4_nl_q8_0_rp(int64_t n, float *s, const void *x, const void *y);
void qr_vec_dot_mxfp4_q8_0_rp(int64_t n, float *s, const void *x, const void *y);

/* ---- scalar kernels: K-quants (quant_kquants.c: to_float + vec_dot; quant_kquants_quantize.c) ---- */
void qr_q2_K_to_float(const void *src, float *dst, int64_t n);
void qr_q2_K_from_float(const float *src, void *dst, int64_t n);
void qr_vec_dot_q2_K_q8_K(int64_t n, float *s, const void *x, const void *y);
void qr_q3_K_to_float(const void *src, float *dst, int64_t n);
void qr_q3_K_from_float(const float *src, void *dst, int64_t n);
void qr_vec_dot_q3_K_q8_K(int64_t n, float *s, const void *x, const void *y);
void qr_q4_K_to_float(const void *src, float *dst, int64_t n);
void qr_q4_K_from_float(const float *src, void *dst, int64_t n);
void qr_vec_dot_q4_K_q8_K(int64_t n, float *s, const void *x, const void *y);
void qr_q5_K_to_float(const void *src, float *dst, int64_t n);
void qr_q5_K_from_float(const float *src, void *dst, int64_t n);
void qr_vec_dot_q5_K_q8_K(int64_t n, float *s, const void *x, const void *y);
void qr_q6_K_to_float(const void *src, float *dst, int64_t n);
void qr_q6_K_from_float(const float *src, void *dst, int64_t n);
void qr_vec_dot_q6_K_q8_K(int64_t n, float *s, const void *x, const void *y);
void qr_q8_K_to_float(const void *src, float *dst, int64_t n);
void qr_q8_K_from_float(const float *src, void *dst, int64_t n);
void qr_q8_K_from_float_x4(const float *src, void *dst, int64_t n);
void qr_vec_dot_q4_K_q8_K_gemv(int64_t n, float *s, const void *x, const void *y);
void qr_vec_dot_q2_K_q8_K_tiled(int64_t n, float *s, const void *x, const void *y);
void qr_vec_dot_q3_K_q8_K_tiled(int64_t n, float *s, const void *x, const void *y);
void qr_vec_dot_q4_K_q8_K_tiled(int64_t n, float *s, const void *x, const void *y);
void qr_vec_dot_q5_K_q8_K_tiled(int64_t n, float *s, const void *x, const void *y);
void qr_vec_dot_q6_K_q8_K_tiled(int64_t n, float *s, const void *x, const void *y);
void qr_vec_dot_q4_K_q8_K_gemm(int64_t n, float *s, const void *x, const void *y);

/* ---- AVX2 + FMA + F16C kernels (quant_avx2.c, quant_kquants_avx2.c) ---- */
/* Fills the AVX2 kernels' scale lookup tables; call once (quant.c does, under pthread_once) before
 * any of them runs. */
void qr_quant_avx2_init(void);
void qr_vec_dot_tile_q4_0_q8_0_avx2(int64_t n, float *s, int64_t bs, const void *x, size_t bx, const void *y, size_t by, int nr, int nc);
void qr_vec_dot_tile_q5_0_q8_0_avx2(int64_t n, float *s, int64_t bs, const void *x, size_t bx, const void *y, size_t by, int nr, int nc);
void qr_vec_dot_tile_q8_0_q8_0_avx2(int64_t n, float *s, int64_t bs, const void *x, size_t bx, const void *y, size_t by, int nr, int nc);
void qr_vec_dot_tile_q4_1_q8_1_avx2(int64_t n, float *s, int64_t bs, const void *x, size_t bx, const void *y, size_t by, int nr, int nc);
void qr_vec_dot_tile_q4_K_q8_K_gemm_avx2(int64_t n, float *s, int64_t bs, const void *x, size_t bx, const void *y, size_t by, int nr, int nc);
void qr_vec_dot_tile_q4_K_q8_K_gemv_avx2(int64_t n, float *s, int64_t bs, const void *x, size_t bx, const void *y, size_t by, int nr, int nc);
void qr_vec_dot_tile_q6_K_q8_K_tiled_avx2(int64_t n, float *s, int64_t bs, const void *x, size_t bx, const void *y, size_t by, int nr, int nc);
void qr_vec_dot_tile_q5_1_q8_1_avx2(int64_t n, float *s, int64_t bs, const void *x, size_t bx, const void *y, size_t by, int nr, int nc);
void qr_vec_dot_f32_avx2(int64_t n, float *s, const void *x, const void *y);
void qr_vec_dot_f16_avx2(int64_t n, float *s, const void *x, const void *y);
void qr_vec_dot_tile_f16_avx2(int64_t n, float *s, int64_t bs, const void *x, size_t bx, const void *y, size_t by,
                              int nr, int nc);
void qr_vec_dot_tile_f16_avx512(int64_t n, float *s, int64_t bs, const void *x, size_t bx, const void *y, size_t by,
                                int nr, int nc);
void qr_vec_dot_bf16_avx2(int64_t n, float *s, const void *x, const void *y);
void qr_f16_from_float_avx2(const float *src, void *dst, int64_t n);
void qr_f16_to_float_avx2(const void *src, float *dst, int64_t n);
void qr_vec_dot_q4_0_q8_0_avx2(int64_t n, float *s, const void *x, const void *y);
void qr_vec_dot_q4_1_q8_1_avx2(int64_t n, float *s, const void *x, const void *y);
void qr_vec_dot_q5_0_q8_0_avx2(int64_t n, float *s, const void *x, const void *y);
void qr_vec_dot_q5_1_q8_1_avx2(int64_t n, float *s, const void *x, const void *y);
void qr_vec_dot_q8_0_q8_0_avx2(int64_t n, float *s, const void *x, const void *y);
void qr_vec_dot_mxfp4_q8_0_avx2(int64_t n, float *s, const void *x, const void *y);
void qr_vec_dot_iq4_nl_q8_0_avx2(int64_t n, float *s, const void *x, const void *y);
void qr_q8_0_from_float_avx2(const float *src, void *dst, int64_t n);
void qr_vec_dot_f32_sgemm_avx2(int64_t n, float *s, const void *x, const void *y);
void qr_vec_dot_f16_sgemm_avx2(int64_t n, float *s, const void *x, const void *y);
void qr_vec_dot_iq4_nl_q8_0_sgemm_avx2(int64_t n, float *s, const void *x, const void *y);
void qr_vec_dot_q4_0_q8_0_rp_avx2(int64_t n, float *s, const void *x, const void *y);
void qr_vec_dot_iq4_nl_q8_0_rp_avx2(int64_t n, float *s, const void *x, const void *y);
void qr_vec_dot_mxfp4_q8_0_rp_avx2(int64_t n, float *s, const void *x, const void *y);
void qr_q8_1_from_float_avx2(const float *src, void *dst, int64_t n);
void qr_q8_K_from_float_avx2(const float *src, void *dst, int64_t n);
void qr_q8_K_from_float_x4_avx2(const float *src, void *dst, int64_t n);
void qr_vec_dot_q4_K_q8_K_gemv_avx2(int64_t n, float *s, const void *x, const void *y);
void qr_vec_dot_q2_K_q8_K_tiled_avx2(int64_t n, float *s, const void *x, const void *y);
void qr_vec_dot_q3_K_q8_K_tiled_avx2(int64_t n, float *s, const void *x, const void *y);
void qr_vec_dot_q4_K_q8_K_tiled_avx2(int64_t n, float *s, const void *x, const void *y);
void qr_vec_dot_q5_K_q8_K_tiled_avx2(int64_t n, float *s, const void *x, const void *y);
void qr_vec_dot_q6_K_q8_K_tiled_avx2(int64_t n, float *s, const void *x, const void *y);
void qr_vec_dot_q4_K_q8_K_gemm_avx2(int64_t n, float *s, const void *x, const void *y);
void qr_vec_dot_q2_K_q8_K_avx2(int64_t n, float *s, const void *x, const void *y);
void qr_vec_dot_q3_K_q8_K_avx2(int64_t n, float *s, const void *x, const void *y);
void qr_vec_dot_q4_K_q8_K_avx2(int64_t n, float *s, const void *x, const void *y);
void qr_vec_dot_q5_K_q8_K_avx2(int64_t n, float *s, const void *x, const void *y);
void qr_vec_dot_q6_K_q8_K_avx2(int64_t n, float *s, const void *x, const void *y);

/* ---- AVX-512 F/BW/VL/DQ + VNNI kernels (quant_tile_avx512.c, quant_kquants_avx512.c), used after the
 * AVX2 init; each bit-identical to the AVX2 kernel of the same order ---- */
void qr_vec_dot_tile_q8_0_q8_0_avx512(int64_t n, float *s, int64_t bs, const void *x, size_t bx, const void *y, size_t by, int nr, int nc);
void qr_vec_dot_tile_q4_0_q8_0_avx512(int64_t n, float *s, int64_t bs, const void *x, size_t bx, const void *y, size_t by, int nr, int nc);
void qr_vec_dot_tile_q5_0_q8_0_avx512(int64_t n, float *s, int64_t bs, const void *x, size_t bx, const void *y, size_t by, int nr, int nc);
void qr_vec_dot_tile_q5_1_q8_1_avx512(int64_t n, float *s, int64_t bs, const void *x, size_t bx, const void *y, size_t by, int nr, int nc);
void qr_vec_dot_tile_q4_1_q8_1_avx512(int64_t n, float *s, int64_t bs, const void *x, size_t bx, const void *y, size_t by, int nr, int nc);
void qr_vec_dot_q4_0_q8_0_rp_avx512(int64_t n, float *s, const void *x, const void *y);
void qr_vec_dot_tile_q4_0_q8_0_rp_avx2(int64_t n, float *s, int64_t bs, const void *x, size_t bx, const void *y, size_t by, int nr, int nc);
void qr_vec_dot_tile_q4_0_q8_0_rp_avx512(int64_t n, float *s, int64_t bs, const void *x, size_t bx, const void *y, size_t by, int nr, int nc);
void qr_vec_dot_tile_q4_K_q8_K_gemm_avx512(int64_t n, float *s, int64_t bs, const void *x, size_t bx, const void *y, size_t by, int nr, int nc);
void qr_vec_dot_tile_q4_K_q8_K_gemv_avx512(int64_t n, float *s, int64_t bs, const void *x, size_t bx, const void *y, size_t by, int nr, int nc);
/* Q4_K repacked 16 rows at a time (quant_kquants_avx512.c): QR_Q4_K_RP16_SB bytes per group per super-block */
#define QR_Q4_K_RP16_SB 2368
#define QR_Q4_K_RP16_NC 4
void qr_q4_K_rp16_pack(const void *src, size_t row_bytes, int64_t n_rows, int64_t k, void *dst);
void qr_q4_K_rp16_unpack_row(const void *group, int r, int64_t k, void *dst);
void qr_q4_0_rp16_unpack_row(const void *group, int r, int64_t k, void *dst);
void qr_q8_0_rp16_unpack_row(const void *group, int r, int64_t k, void *dst);
void qr_vec_dot_tile_q4_K_q8_K_gemm_rp16_avx512(int64_t n, float *s, int64_t bs, const void *x, size_t bx, const void *y, size_t by, int nr, int nc);
void qr_vec_dot_tile_q4_K_q8_K_gemv_rp16_avx512(int64_t n, float *s, int64_t bs, const void *x, size_t bx, const void *y, size_t by, int nr, int nc);
void qr_q4_K_rp8_pack(const void *src, size_t row_bytes, int64_t n_rows, int64_t k, void *dst);
void qr_q4_K_rp8_unpack_row(const void *group, int r, int64_t k, void *dst);
void qr_vec_dot_tile_q4_K_q8_K_gemm_rp8_avx2(int64_t n, float *s, int64_t bs, const void *x, size_t bx, const void *y, size_t by, int nr, int nc);
void qr_vec_dot_tile_q4_K_q8_K_gemv_rp8_avx2(int64_t n, float *s, int64_t bs, const void *x, size_t bx, const void *y, size_t by, int nr, int nc);
void qr_q4_0_rp8_pack(const void *src, size_t row_bytes, int64_t n_rows, int64_t k, void *dst);
void qr_q4_0_rp8_unpack_row(const void *group, int r, int64_t k, void *dst);
void qr_vec_dot_tile_q4_0_q8_0_rp8_avx2(int64_t n, float *s, int64_t bs, const void *x, size_t bx, const void *y, size_t by, int nr, int nc);
void qr_q4_0_rp16_pack(const void *src, size_t row_bytes, int64_t n_rows, int64_t k, void *dst);
void qr_q4_0_rp_act_extra(const void *yrow, int64_t k, void *extra);
void qr_vec_dot_tile_q4_0_q8_0_rp16_avx512(int64_t n, float *s, int64_t bs, const void *x, size_t bx, const void *y, size_t by, int nr, int nc);
void qr_q4_1_rp16_pack(const void *src, size_t row_bytes, int64_t n_rows, int64_t k, void *dst);
void qr_q4_1_rp16_unpack_row(const void *group, int r, int64_t k, void *dst);
void qr_vec_dot_tile_q4_1_q8_1_rp16_avx512(int64_t n, float *s, int64_t bs, const void *x, size_t bx, const void *y, size_t by, int nr, int nc);
void qr_q5_0_rp16_pack(const void *src, size_t row_bytes, int64_t n_rows, int64_t k, void *dst);
void qr_q5_0_rp16_unpack_row(const void *group, int r, int64_t k, void *dst);
void qr_q5_0_rp16_act_extra(const void *yrow, int64_t k, void *extra);
void qr_vec_dot_tile_q5_0_q8_0_rp16_avx512(int64_t n, float *s, int64_t bs, const void *x, size_t bx, const void *y, size_t by, int nr, int nc);
void qr_q8_0_rp16_pack(const void *src, size_t row_bytes, int64_t n_rows, int64_t k, void *dst);
void qr_q8_0_rp16_act_extra(const void *yrow, int64_t k, void *extra);
void qr_vec_dot_tile_q8_0_q8_0_rp16_avx512(int64_t n, float *s, int64_t bs, const void *x, size_t bx, const void *y, size_t by, int nr, int nc);
void qr_vec_dot_tile_q6_K_q8_K_tiled_avx512(int64_t n, float *s, int64_t bs, const void *x, size_t bx, const void *y, size_t by, int nr, int nc);

#endif /* QR_QUANT_INTERNAL_H */
