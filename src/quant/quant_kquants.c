/* quant_kquants.c — scalar reference dequantization and dot products of the K-quants
 * (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K against Q8_K) and Q8_K itself.
 *
 * The dequantizers use the same float expressions as ggml and gguf-py ((d*sc)*q - dmin*m), so
 * their output is bit-identical to both. The dot products sum exact integer products per super-block
 * and scale once per super-block. The *_tiled, *_gemv and *_gemm variants do the float operations of
 * llama.cpp's tiled K-quant GEMM and repacked Q4_K kernels in their order (see quant.h), so the
 * AVX2 versions must equal them bit for bit; and the Q8_K quantizer comes in ggml's two tie rules.
 */
#include <math.h>
#include <stdbool.h>

#include "quant/quant_internal.h"

/* ------------------------------------------------------------------------------------------------
 * Q2_K
 * ---------------------------------------------------------------------------------------------- */

/* dst = d*sc*q - dmin*m per 16-value sub-block. */
void qr_q2_K_to_float(const void *src, float *dst, int64_t n) {
    const qr_block_q2_K *b = src;
    for (int64_t i = 0; i < n / QR_QK_K; i++) {
        const float d = half_to_fp32(b[i].d), dmin = half_to_fp32(b[i].dmin);
        const uint8_t *q = b[i].qs;
        int is = 0;
        for (int h = 0; h < 2; h++, q += 32) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int half = 0; half < 2; half++) {
                    const uint8_t sc = b[i].scales[is++];
                    const float dl = d * (float)(sc & 0xF), ml = dmin * (float)(sc >> 4);
                    for (int l = 0; l < 16; l++) *dst++ = dl * (float)((q[16 * half + l] >> shift) & 3) - ml;
                }
            }
        }
    }
}

/* Integer sums of one Q2_K x Q8_K super-block: returns sum(sc*q*qy), *mins = sum(m*bsum). Exact. */
static int q2_K_block_sums(const qr_block_q2_K *x, const qr_block_q8_K *y, int *mins) {
    int summs = 0;
    for (int j = 0; j < 16; j++) summs += y->bsums[j] * (x->scales[j] >> 4);
    const uint8_t *q2 = x->qs;
    const int8_t *q8 = y->qs;
    int isum = 0, is = 0;
    for (int h = 0; h < 2; h++, q2 += 32) {
        for (int shift = 0; shift < 8; shift += 2) {
            for (int half = 0; half < 2; half++, q8 += 16) {
                int sub = 0;
                for (int l = 0; l < 16; l++) sub += q8[l] * ((q2[16 * half + l] >> shift) & 3);
                isum += (x->scales[is++] & 0xF) * sub;
            }
        }
    }
    *mins = summs;
    return isum;
}

/* *s = sum over super-blocks of dy*dx*sum(sc*q*qy) - dy*dmin*sum(m*bsum). */
void qr_vec_dot_q2_K_q8_K(int64_t n, float *s, const void *vx, const void *vy) {
    const qr_block_q2_K *x = vx;
    const qr_block_q8_K *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QR_QK_K; i++) {
        int summs;
        const int isum = q2_K_block_sums(&x[i], &y[i], &summs);
        const float dall = y[i].d * half_to_fp32(x[i].d);
        const float dmin = y[i].d * half_to_fp32(x[i].dmin);
        sumf += dall * (float)isum - dmin * (float)summs;
    }
    *s = sumf;
}

/* One super-block step of ggml's tiled K-quant GEMM (ggml-cpu tiled.cpp, x86 AVX2 microkernel):
 * res = dx * s1, minus dmin * s2 fused (types without mins pass 0, 0), acc = fma(res, dy, acc). */
static inline float tiled_step(float acc, float dx, float dmin, int s1, int s2, float dy) {
    return fmaf(fmaf(-dmin, (float)s2, dx * (float)s1), dy, acc);
}

/* ggml's tiled order for Q2_K (see tiled_step), super-blocks in order. */
void qr_vec_dot_q2_K_q8_K_tiled(int64_t n, float *s, const void *vx, const void *vy) {
    const qr_block_q2_K *x = vx;
    const qr_block_q8_K *y = vy;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QR_QK_K; i++) {
        int s2;
        const int s1 = q2_K_block_sums(&x[i], &y[i], &s2);
        acc = tiled_step(acc, half_to_fp32(x[i].d), half_to_fp32(x[i].dmin), s1, s2, y[i].d);
    }
    *s = acc;
}

/* ------------------------------------------------------------------------------------------------
 * Q3_K
 * ---------------------------------------------------------------------------------------------- */

/* The 3-bit code (-4..3) of value v of a Q3_K block. */
static inline int q3_K_code(const qr_block_q3_K *b, int v) {
    const int h = v / 128, k = (v % 128) / 32, l = v % 32;
    const int low = (b->qs[32 * h + l] >> (2 * k)) & 3;
    const int high = (b->hmask[l] >> (v / 32)) & 1;
    return low - (high ? 0 : 4);
}

/* dst = d*(sc-32)*q per 16-value sub-block. */
void qr_q3_K_to_float(const void *src, float *dst, int64_t n) {
    const qr_block_q3_K *b = src;
    for (int64_t i = 0; i < n / QR_QK_K; i++, dst += QR_QK_K) {
        const float d = half_to_fp32(b[i].d);
        int8_t sc[16];
        q3_K_scales(b[i].scales, sc);
        for (int g = 0; g < 16; g++) {
            const float dl = d * (float)sc[g];
            for (int l = 0; l < 16; l++) dst[16 * g + l] = dl * (float)q3_K_code(&b[i], 16 * g + l);
        }
    }
}

/* sum(sc*q*qy) of one Q3_K x Q8_K super-block. Exact. */
static int q3_K_block_sum(const qr_block_q3_K *x, const qr_block_q8_K *y) {
    int8_t sc[16];
    q3_K_scales(x->scales, sc);
    int isum = 0;
    for (int g = 0; g < 16; g++) {
        int sub = 0;
        for (int l = 0; l < 16; l++) sub += q3_K_code(x, 16 * g + l) * y->qs[16 * g + l];
        isum += sc[g] * sub;
    }
    return isum;
}

/* *s = sum over super-blocks of dx*dy*sum(sc*q*qy). */
void qr_vec_dot_q3_K_q8_K(int64_t n, float *s, const void *vx, const void *vy) {
    const qr_block_q3_K *x = vx;
    const qr_block_q8_K *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QR_QK_K; i++)
        sumf += (half_to_fp32(x[i].d) * y[i].d) * (float)q3_K_block_sum(&x[i], &y[i]);
    *s = sumf;
}

/* ggml's tiled order for Q3_K (see tiled_step). */
void qr_vec_dot_q3_K_q8_K_tiled(int64_t n, float *s, const void *vx, const void *vy) {
    const qr_block_q3_K *x = vx;
    const qr_block_q8_K *y = vy;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QR_QK_K; i++)
        acc = tiled_step(acc, half_to_fp32(x[i].d), 0.0f, q3_K_block_sum(&x[i], &y[i]), 0, y[i].d);
    *s = acc;
}

/* ------------------------------------------------------------------------------------------------
 * Q4_K / Q5_K
 * ---------------------------------------------------------------------------------------------- */

/* dst = d*sc*q - dmin*m per 32-value sub-block. */
void qr_q4_K_to_float(const void *src, float *dst, int64_t n) {
    const qr_block_q4_K *b = src;
    for (int64_t i = 0; i < n / QR_QK_K; i++) {
        const float d = half_to_fp32(b[i].d), dmin = half_to_fp32(b[i].dmin);
        const uint8_t *q = b[i].qs;
        for (int c = 0; c < 4; c++, q += 32) {
            uint8_t sc, m;
            kquant_scale_min(2 * c, b[i].scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            kquant_scale_min(2 * c + 1, b[i].scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = dmin * (float)m;
            for (int l = 0; l < 32; l++) *dst++ = d1 * (float)(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++) *dst++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

/* *s = sum over super-blocks of dy*dx*sum(sc*q*qy) - dy*dmin*sum(m*bsum). */
void qr_vec_dot_q4_K_q8_K(int64_t n, float *s, const void *vx, const void *vy) {
    const qr_block_q4_K *x = vx;
    const qr_block_q8_K *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QR_QK_K; i++) {
        const uint8_t *q4 = x[i].qs;
        const int8_t *q8 = y[i].qs;
        int isum = 0, summs = 0;
        for (int c = 0; c < 4; c++, q4 += 32, q8 += 64) {
            uint8_t sc1, m1, sc2, m2;
            kquant_scale_min(2 * c, x[i].scales, &sc1, &m1);
            kquant_scale_min(2 * c + 1, x[i].scales, &sc2, &m2);
            int s1 = 0, s2 = 0;
            for (int l = 0; l < 32; l++) {
                s1 += (q4[l] & 0xF) * q8[l];
                s2 += (q4[l] >> 4) * q8[l + 32];
            }
            isum += sc1 * s1 + sc2 * s2;
            summs += m1 * (y[i].bsums[4 * c] + y[i].bsums[4 * c + 1]) + m2 * (y[i].bsums[4 * c + 2] + y[i].bsums[4 * c + 3]);
        }
        const float d = y[i].d * half_to_fp32(x[i].d);
        const float dmin = y[i].d * half_to_fp32(x[i].dmin);
        sumf += d * (float)isum - dmin * (float)summs;
    }
    *s = sumf;
}

/* Integer parts of one Q4_K x Q8_K super-block, per pair of 32-value sub-blocks c (0..3):
 * isum[c] = sum over the pair of sc * q * qy, imin[c] = sum over the pair of m * (its bsums). Exact. */
static void q4_K_pair_sums(const qr_block_q4_K *x, const qr_block_q8_K *y, int isum[4], int imin[4]) {
    const uint8_t *q4 = x->qs;
    const int8_t *q8 = y->qs;
    for (int c = 0; c < 4; c++, q4 += 32, q8 += 64) {
        uint8_t sc1, m1, sc2, m2;
        kquant_scale_min(2 * c, x->scales, &sc1, &m1);
        kquant_scale_min(2 * c + 1, x->scales, &sc2, &m2);
        int s1 = 0, s2 = 0;
        for (int l = 0; l < 32; l++) {
            s1 += (q4[l] & 0xF) * q8[l];
            s2 += (q4[l] >> 4) * q8[l + 32];
        }
        isum[c] = sc1 * s1 + sc2 * s2;
        imin[c] = m1 * (y->bsums[4 * c] + y->bsums[4 * c + 1]) + m2 * (y->bsums[4 * c + 2] + y->bsums[4 * c + 3]);
    }
}

/* ggml's repacked Q4_K GEMV order (ggml_gemv_q4_K_8x8_q8_K): per super-block one fused multiply-add
 * of the whole integer sum, acc = fma(isum, dx*dy, acc), and of the min sum into a second
 * accumulator; *s = acc - acc_min. */
void qr_vec_dot_q4_K_q8_K_gemv(int64_t n, float *s, const void *vx, const void *vy) {
    const qr_block_q4_K *x = vx;
    const qr_block_q8_K *y = vy;
    float acc = 0.0f, acc_min = 0.0f;
    for (int64_t i = 0; i < n / QR_QK_K; i++) {
        int isum[4], imin[4];
        q4_K_pair_sums(&x[i], &y[i], isum, imin);
        const float d = half_to_fp32(x[i].d) * y[i].d, dmin = half_to_fp32(x[i].dmin) * y[i].d;
        acc = fmaf((float)(isum[0] + isum[1] + isum[2] + isum[3]), d, acc);
        acc_min = fmaf((float)(imin[0] + imin[1] + imin[2] + imin[3]), dmin, acc_min);
    }
    *s = acc - acc_min;
}

/* ggml's repacked Q4_K GEMM order (ggml_gemm_q4_K_8x8_q8_K): as the GEMV, but one fused
 * multiply-add per pair of sub-blocks (four per super-block) into each accumulator. */
void qr_vec_dot_q4_K_q8_K_gemm(int64_t n, float *s, const void *vx, const void *vy) {
    const qr_block_q4_K *x = vx;
    const qr_block_q8_K *y = vy;
    float acc = 0.0f, acc_min = 0.0f;
    for (int64_t i = 0; i < n / QR_QK_K; i++) {
        int isum[4], imin[4];
        q4_K_pair_sums(&x[i], &y[i], isum, imin);
        const float d = half_to_fp32(x[i].d) * y[i].d, dmin = half_to_fp32(x[i].dmin) * y[i].d;
        for (int c = 0; c < 4; c++) {
            acc = fmaf((float)isum[c], d, acc);
            acc_min = fmaf((float)imin[c], dmin, acc_min);
        }
    }
    *s = acc - acc_min;
}

/* ggml's tiled order for Q4_K (see tiled_step; used for weights it does not repack). */
void qr_vec_dot_q4_K_q8_K_tiled(int64_t n, float *s, const void *vx, const void *vy) {
    const qr_block_q4_K *x = vx;
    const qr_block_q8_K *y = vy;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QR_QK_K; i++) {
        int isum[4], imin[4];
        q4_K_pair_sums(&x[i], &y[i], isum, imin);
        acc = tiled_step(acc, half_to_fp32(x[i].d), half_to_fp32(x[i].dmin), isum[0] + isum[1] + isum[2] + isum[3],
                         imin[0] + imin[1] + imin[2] + imin[3], y[i].d);
    }
    *s = acc;
}

/* dst = d*sc*q - dmin*m per 32-value sub-block, q with its fifth bit from qh. */
void qr_q5_K_to_float(const void *src, float *dst, int64_t n) {
    const qr_block_q5_K *b = src;
    for (int64_t i = 0; i < n / QR_QK_K; i++) {
        const float d = half_to_fp32(b[i].d), dmin = half_to_fp32(b[i].dmin);
        const uint8_t *ql = b[i].qs, *qh = b[i].qh;
        for (int c = 0; c < 4; c++, ql += 32) {
            uint8_t sc, m;
            kquant_scale_min(2 * c, b[i].scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            kquant_scale_min(2 * c + 1, b[i].scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = dmin * (float)m;
            const uint8_t u1 = (uint8_t)(1u << (2 * c)), u2 = (uint8_t)(2u << (2 * c));
            for (int l = 0; l < 32; l++) *dst++ = d1 * (float)((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++) *dst++ = d2 * (float)((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}

/* Integer sums of one Q5_K x Q8_K super-block: returns sum(sc*q*qy), *mins = sum(m*bsum). Exact. */
static int q5_K_block_sums(const qr_block_q5_K *x, const qr_block_q8_K *y, int *mins) {
    const uint8_t *ql = x->qs, *qh = x->qh;
    const int8_t *q8 = y->qs;
    int isum = 0, summs = 0;
    for (int c = 0; c < 4; c++, ql += 32, q8 += 64) {
        uint8_t sc1, m1, sc2, m2;
        kquant_scale_min(2 * c, x->scales, &sc1, &m1);
        kquant_scale_min(2 * c + 1, x->scales, &sc2, &m2);
        int s1 = 0, s2 = 0;
        for (int l = 0; l < 32; l++) {
            s1 += ((ql[l] & 0xF) | (((qh[l] >> (2 * c)) & 1) << 4)) * q8[l];
            s2 += ((ql[l] >> 4) | (((qh[l] >> (2 * c + 1)) & 1) << 4)) * q8[l + 32];
        }
        isum += sc1 * s1 + sc2 * s2;
        summs += m1 * (y->bsums[4 * c] + y->bsums[4 * c + 1]) + m2 * (y->bsums[4 * c + 2] + y->bsums[4 * c + 3]);
    }
    *mins = summs;
    return isum;
}

/* *s = sum over super-blocks of dy*dx*sum(sc*q*qy) - dy*dmin*sum(m*bsum). */
void qr_vec_dot_q5_K_q8_K(int64_t n, float *s, const void *vx, const void *vy) {
    const qr_block_q5_K *x = vx;
    const qr_block_q8_K *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QR_QK_K; i++) {
        int summs;
        const int isum = q5_K_block_sums(&x[i], &y[i], &summs);
        const float d = y[i].d * half_to_fp32(x[i].d);
        const float dmin = y[i].d * half_to_fp32(x[i].dmin);
        sumf += d * (float)isum - dmin * (float)summs;
    }
    *s = sumf;
}

/* ggml's tiled order for Q5_K (see tiled_step). */
void qr_vec_dot_q5_K_q8_K_tiled(int64_t n, float *s, const void *vx, const void *vy) {
    const qr_block_q5_K *x = vx;
    const qr_block_q8_K *y = vy;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QR_QK_K; i++) {
        int s2;
        const int s1 = q5_K_block_sums(&x[i], &y[i], &s2);
        acc = tiled_step(acc, half_to_fp32(x[i].d), half_to_fp32(x[i].dmin), s1, s2, y[i].d);
    }
    *s = acc;
}

/* ------------------------------------------------------------------------------------------------
 * Q6_K
 * ---------------------------------------------------------------------------------------------- */

/* The 6-bit code (-32..31) of value v of a Q6_K block. */
static inline int q6_K_code(const qr_block_q6_K *b, int v) {
    const int h = v / 128, k = (v % 128) / 32, l = v % 32;
    const uint8_t lo = b->ql[64 * h + l + 32 * (k & 1)];
    const int low = k < 2 ? lo & 0xF : lo >> 4;
    const int high = (b->qh[32 * h + l] >> (2 * k)) & 3;
    return (low | (high << 4)) - 32;
}

/* dst = d*sc*q per 16-value sub-block. */
void qr_q6_K_to_float(const void *src, float *dst, int64_t n) {
    const qr_block_q6_K *b = src;
    for (int64_t i = 0; i < n / QR_QK_K; i++, dst += QR_QK_K) {
        const float d = half_to_fp32(b[i].d);
        for (int g = 0; g < 16; g++) {
            const float dl = d * (float)b[i].scales[g];
            for (int l = 0; l < 16; l++) dst[16 * g + l] = dl * (float)q6_K_code(&b[i], 16 * g + l);
        }
    }
}

/* sum(sc*q*qy) of one Q6_K x Q8_K super-block. Exact. */
static int q6_K_block_sum(const qr_block_q6_K *x, const qr_block_q8_K *y) {
    int isum = 0;
    for (int g = 0; g < 16; g++) {
        int sub = 0;
        for (int l = 0; l < 16; l++) sub += q6_K_code(x, 16 * g + l) * y->qs[16 * g + l];
        isum += x->scales[g] * sub;
    }
    return isum;
}

/* *s = sum over super-blocks of dx*dy*sum(sc*q*qy). */
void qr_vec_dot_q6_K_q8_K(int64_t n, float *s, const void *vx, const void *vy) {
    const qr_block_q6_K *x = vx;
    const qr_block_q8_K *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QR_QK_K; i++)
        sumf += (half_to_fp32(x[i].d) * y[i].d) * (float)q6_K_block_sum(&x[i], &y[i]);
    *s = sumf;
}

/* ggml's tiled order for Q6_K (see tiled_step). */
void qr_vec_dot_q6_K_q8_K_tiled(int64_t n, float *s, const void *vx, const void *vy) {
    const qr_block_q6_K *x = vx;
    const qr_block_q8_K *y = vy;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QR_QK_K; i++)
        acc = tiled_step(acc, half_to_fp32(x[i].d), 0.0f, q6_K_block_sum(&x[i], &y[i]), 0, y[i].d);
    *s = acc;
}

/* ------------------------------------------------------------------------------------------------
 * Q8_K
 * ---------------------------------------------------------------------------------------------- */

/* dst = d * q per super-block. */
void qr_q8_K_to_float(const void *src, float *dst, int64_t n) {
    const qr_block_q8_K *b = src;
    for (int64_t i = 0; i < n / QR_QK_K; i++, dst += QR_QK_K) {
        for (int j = 0; j < QR_QK_K; j++) dst[j] = b[i].d * (float)b[i].qs[j];
    }
}

/* Q8_K block of x: iscale = -127 / max, q = nearest_int(x*iscale) capped at 127, d = 1/iscale,
 * bsums = sums of each 16 codes; an all-zero block is all zero. `max` is the value of largest
 * magnitude: the first one (any_positive false), or +amax whenever +amax occurs (any_positive true,
 * the tie rule of ggml's x86 quantize_mat_q8_K_4x8). */
static void q8_K_rows(const float *src, void *dst, int64_t n, bool any_positive) {
    qr_block_q8_K *y = dst;
    for (int64_t i = 0; i < n / QR_QK_K; i++) {
        const float *x = src + i * QR_QK_K;
        float max = 0, amax = 0;
        for (int j = 0; j < QR_QK_K; j++) {
            const float ax = x[j] < 0 ? -x[j] : x[j];
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        if (!amax) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        if (any_positive)
            for (int j = 0; j < QR_QK_K; j++)
                if (x[j] == amax) max = amax;
        const float iscale = -127.f / max;
        for (int j = 0; j < QR_QK_K; j++) {
            const int v = nearest_int(iscale * x[j]);
            y[i].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int j = 0; j < QR_QK_K / 16; j++) {
            int sum = 0;
            for (int l = 0; l < 16; l++) sum += y[i].qs[16 * j + l];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

/* Reference Q8_K quantizer (ggml's quantize_row_q8_K): see q8_K_rows, first value of largest magnitude. */
void qr_q8_K_from_float(const float *src, void *dst, int64_t n) { q8_K_rows(src, dst, n, false); }

/* The Q8_K quantizer of ggml's x86 4-row groups (quantize_mat_q8_K_4x8), row by row: as
 * qr_q8_K_from_float but +amax wins a tie of magnitudes. */
void qr_q8_K_from_float_x4(const float *src, void *dst, int64_t n) { q8_K_rows(src, dst, n, true); }
