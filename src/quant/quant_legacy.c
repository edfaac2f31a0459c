/* quant_legacy.c — scalar reference kernels for the plain float types (F32, F16, BF16) and the
 * 32-value block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, MXFP4, IQ4_NL).
 *
 * The quantizers follow ggml's reference quantizers step by step (same formulas, same order of
 * float operations, same tie rules), so a row quantized here is byte-identical to llama-quantize's
 * output without an importance matrix. The dot products sum exact integer products per block and
 * accumulate the scaled block sums in float, as ggml's generic kernels do.
 */
#include <float.h>
#include <math.h>

#include "quant/quant_internal.h"
#include "util/util.h"

const int8_t qr_kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
const int8_t qr_kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static inline int imin(int a, int b) { return a < b ? a : b; }

static inline uint32_t load_u32le(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline void store_u32le(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

/* ------------------------------------------------------------------------------------------------
 * F32, F16, BF16
 * ---------------------------------------------------------------------------------------------- */

/* dst = src (a copy). */
void qr_f32_to_float(const void *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * sizeof(float)); }

/* dst = src (a copy). */
void qr_f32_from_float(const float *src, void *dst, int64_t n) { memcpy(dst, src, (size_t)n * sizeof(float)); }

/* *s = sum x[i]*y[i], accumulated in double. */
void qr_vec_dot_f32(int64_t n, float *s, const void *x, const void *y) {
    const float *a = x, *b = y;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)(a[i] * b[i]);
    *s = (float)sum;
}

/* dst[i] = the fp16 src[i] widened (exact). */
void qr_f16_to_float(const void *src, float *dst, int64_t n) {
    const uint16_t *h = src;
    for (int64_t i = 0; i < n; i++) dst[i] = half_to_fp32(h[i]);
}

/* dst[i] = src[i] rounded to fp16 (nearest even; overflow -> inf). */
void qr_f16_from_float(const float *src, void *dst, int64_t n) {
    uint16_t *h = dst;
    for (int64_t i = 0; i < n; i++) h[i] = qr_fp32_to_fp16(src[i]);
}

/* *s = sum x[i]*y[i] over two fp16 rows; products in float, sum in double. */
void qr_vec_dot_f16(int64_t n, float *s, const void *x, const void *y) {
    const uint16_t *a = x, *b = y;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)(half_to_fp32(a[i]) * half_to_fp32(b[i]));
    *s = (float)sum;
}

/* dst[i] = the bf16 src[i] widened (exact). */
void qr_bf16_to_float(const void *src, float *dst, int64_t n) {
    const uint16_t *h = src;
    for (int64_t i = 0; i < n; i++) {
        uint32_t bits = (uint32_t)h[i] << 16;
        memcpy(&dst[i], &bits, 4);
    }
}

/* dst[i] = src[i] rounded to bf16 (nearest even; NaN stays a quiet NaN), as ggml does. */
void qr_bf16_from_float(const float *src, void *dst, int64_t n) {
    uint16_t *h = dst;
    for (int64_t i = 0; i < n; i++) h[i] = qr_fp32_to_bf16(src[i]);
}

/* *s = sum x[i]*y[i] over two bf16 rows; products in float, sum in double. */
void qr_vec_dot_bf16(int64_t n, float *s, const void *x, const void *y) {
    const uint16_t *a = x, *b = y;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t ba = (uint32_t)a[i] << 16, bb = (uint32_t)b[i] << 16;
        float fa, fb;
        memcpy(&fa, &ba, 4);
        memcpy(&fb, &bb, 4);
        sum += (double)(fa * fb);
    }
    *s = (float)sum;
}

/* ------------------------------------------------------------------------------------------------
 * Q4_0: symmetric 4-bit, scale chosen so that the largest-magnitude value maps to code 0 (-8).
 * ---------------------------------------------------------------------------------------------- */

/* dst = d * (q - 8) per block. */
void qr_q4_0_to_float(const void *src, float *dst, int64_t n) {
    const qr_block_q4_0 *b = src;
    for (int64_t i = 0; i < n / QR_QK4_0; i++, dst += QR_QK4_0) {
        const float d = half_to_fp32(b[i].d);
        for (int j = 0; j < QR_QK4_0 / 2; j++) {
            dst[j] = (float)((b[i].qs[j] & 0x0F) - 8) * d;
            dst[j + QR_QK4_0 / 2] = (float)((b[i].qs[j] >> 4) - 8) * d;
        }
    }
}

/* Reference Q4_0 quantizer: d = (value of largest magnitude) / -8, q = trunc(x/d + 8.5) clamped to 15. */
void qr_q4_0_from_float(const float *src, void *dst, int64_t n) {
    qr_block_q4_0 *y = dst;
    for (int64_t i = 0; i < n / QR_QK4_0; i++) {
        const float *x = src + i * QR_QK4_0;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QR_QK4_0; j++) {
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        const float d = max / -8;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = qr_fp32_to_fp16(d);
        for (int j = 0; j < QR_QK4_0 / 2; j++) {
            const float x0 = x[j] * id;
            const float x1 = x[j + QR_QK4_0 / 2] * id;
            const int q0 = imin(15, (int)(x0 + 8.5f));
            const int q1 = imin(15, (int)(x1 + 8.5f));
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* *s = sum over blocks of dx*dy*sum((qx-8)*qy). */
void qr_vec_dot_q4_0_q8_0(int64_t n, float *s, const void *vx, const void *vy) {
    const qr_block_q4_0 *x = vx;
    const qr_block_q8_0 *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QR_QK8_0; i++) {
        int sumi = 0;
        for (int j = 0; j < QR_QK8_0 / 2; j++) {
            sumi += ((x[i].qs[j] & 0x0F) - 8) * y[i].qs[j];
            sumi += ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + QR_QK8_0 / 2];
        }
        sumf += (float)sumi * (half_to_fp32(x[i].d) * half_to_fp32(y[i].d));
    }
    *s = sumf;
}

/* ------------------------------------------------------------------------------------------------
 * Q4_1: asymmetric 4-bit, d = (max - min) / 15, m = min.
 * ---------------------------------------------------------------------------------------------- */

/* dst = d * q + m per block. */
void qr_q4_1_to_float(const void *src, float *dst, int64_t n) {
    const qr_block_q4_1 *b = src;
    for (int64_t i = 0; i < n / QR_QK4_1; i++, dst += QR_QK4_1) {
        const float d = half_to_fp32(b[i].d), m = half_to_fp32(b[i].m);
        for (int j = 0; j < QR_QK4_1 / 2; j++) {
            dst[j] = d * (float)(b[i].qs[j] & 0x0F) + m;
            dst[j + QR_QK4_1 / 2] = d * (float)(b[i].qs[j] >> 4) + m;
        }
    }
}

/* Reference Q4_1 quantizer: q = trunc((x - min)/d + 0.5) clamped to 15. */
void qr_q4_1_from_float(const float *src, void *dst, int64_t n) {
    qr_block_q4_1 *y = dst;
    for (int64_t i = 0; i < n / QR_QK4_1; i++) {
        const float *x = src + i * QR_QK4_1;
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < QR_QK4_1; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        const float d = (max - min) / ((1 << 4) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = qr_fp32_to_fp16(d);
        y[i].m = qr_fp32_to_fp16(min);
        for (int j = 0; j < QR_QK4_1 / 2; j++) {
            const float x0 = (x[j] - min) * id;
            const float x1 = (x[j + QR_QK4_1 / 2] - min) * id;
            const int q0 = imin(15, (int)(x0 + 0.5f));
            const int q1 = imin(15, (int)(x1 + 0.5f));
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* *s = sum over blocks of dx*dy*sum(qx*qy) + mx*sy (sy = dy*sum(qy) folds the offset). */
void qr_vec_dot_q4_1_q8_1(int64_t n, float *s, const void *vx, const void *vy) {
    const qr_block_q4_1 *x = vx;
    const qr_block_q8_1 *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QR_QK8_1; i++) {
        int sumi = 0;
        for (int j = 0; j < QR_QK8_1 / 2; j++) {
            sumi += (x[i].qs[j] & 0x0F) * y[i].qs[j];
            sumi += (x[i].qs[j] >> 4) * y[i].qs[j + QR_QK8_1 / 2];
        }
        sumf += (half_to_fp32(x[i].d) * half_to_fp32(y[i].d)) * (float)sumi +
                half_to_fp32(x[i].m) * half_to_fp32(y[i].s);
    }
    *s = sumf;
}

/* ------------------------------------------------------------------------------------------------
 * Q5_0 / Q5_1: as Q4_0 / Q4_1 with a fifth bit per value in qh.
 * ---------------------------------------------------------------------------------------------- */

/* dst = d * (q - 16) per block. */
void qr_q5_0_to_float(const void *src, float *dst, int64_t n) {
    const qr_block_q5_0 *b = src;
    for (int64_t i = 0; i < n / QR_QK5_0; i++, dst += QR_QK5_0) {
        const float d = half_to_fp32(b[i].d);
        const uint32_t qh = load_u32le(b[i].qh);
        for (int j = 0; j < QR_QK5_0 / 2; j++) {
            const int q0 = (b[i].qs[j] & 0x0F) | (int)(((qh >> j) & 1) << 4);
            const int q1 = (b[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            dst[j] = (float)(q0 - 16) * d;
            dst[j + QR_QK5_0 / 2] = (float)(q1 - 16) * d;
        }
    }
}

/* Reference Q5_0 quantizer: d = (value of largest magnitude) / -16, q = trunc(x/d + 16.5) clamped to 31. */
void qr_q5_0_from_float(const float *src, void *dst, int64_t n) {
    qr_block_q5_0 *y = dst;
    for (int64_t i = 0; i < n / QR_QK5_0; i++) {
        const float *x = src + i * QR_QK5_0;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QR_QK5_0; j++) {
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        const float d = max / -16;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = qr_fp32_to_fp16(d);
        uint32_t qh = 0;
        for (int j = 0; j < QR_QK5_0 / 2; j++) {
            const float x0 = x[j] * id;
            const float x1 = x[j + QR_QK5_0 / 2] * id;
            const int q0 = imin(31, (int)(x0 + 16.5f));
            const int q1 = imin(31, (int)(x1 + 16.5f));
            y[i].qs[j] = (uint8_t)((q0 & 0x0F) | ((q1 & 0x0F) << 4));
            qh |= (uint32_t)((q0 >> 4) & 1) << j;
            qh |= (uint32_t)((q1 >> 4) & 1) << (j + QR_QK5_0 / 2);
        }
        store_u32le(y[i].qh, qh);
    }
}

/* *s = sum over blocks of dx*dy*sum((qx-16)*qy). */
void qr_vec_dot_q5_0_q8_0(int64_t n, float *s, const void *vx, const void *vy) {
    const qr_block_q5_0 *x = vx;
    const qr_block_q8_0 *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QR_QK8_0; i++) {
        const uint32_t qh = load_u32le(x[i].qh);
        int sumi = 0;
        for (int j = 0; j < QR_QK8_0 / 2; j++) {
            const int q0 = ((x[i].qs[j] & 0x0F) | (int)(((qh >> j) & 1) << 4)) - 16;
            const int q1 = ((x[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4)) - 16;
            sumi += q0 * y[i].qs[j] + q1 * y[i].qs[j + QR_QK8_0 / 2];
        }
        sumf += (half_to_fp32(x[i].d) * half_to_fp32(y[i].d)) * (float)sumi;
    }
    *s = sumf;
}

/* dst = d * q + m per block. */
void qr_q5_1_to_float(const void *src, float *dst, int64_t n) {
    const qr_block_q5_1 *b = src;
    for (int64_t i = 0; i < n / QR_QK5_1; i++, dst += QR_QK5_1) {
        const float d = half_to_fp32(b[i].d), m = half_to_fp32(b[i].m);
        const uint32_t qh = load_u32le(b[i].qh);
        for (int j = 0; j < QR_QK5_1 / 2; j++) {
            const int q0 = (b[i].qs[j] & 0x0F) | (int)(((qh >> j) & 1) << 4);
            const int q1 = (b[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            dst[j] = d * (float)q0 + m;
            dst[j + QR_QK5_1 / 2] = d * (float)q1 + m;
        }
    }
}

/* Reference Q5_1 quantizer: d = (max - min) / 31, q = trunc((x - min)/d + 0.5). */
void qr_q5_1_from_float(const float *src, void *dst, int64_t n) {
    qr_block_q5_1 *y = dst;
    for (int64_t i = 0; i < n / QR_QK5_1; i++) {
        const float *x = src + i * QR_QK5_1;
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < QR_QK5_1; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        const float d = (max - min) / ((1 << 5) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = qr_fp32_to_fp16(d);
        y[i].m = qr_fp32_to_fp16(min);
        uint32_t qh = 0;
        for (int j = 0; j < QR_QK5_1 / 2; j++) {
            const float x0 = (x[j] - min) * id;
            const float x1 = (x[j + QR_QK5_1 / 2] - min) * id;
            const int q0 = imin(31, (int)(x0 + 0.5f));
            const int q1 = imin(31, (int)(x1 + 0.5f));
            y[i].qs[j] = (uint8_t)((q0 & 0x0F) | ((q1 & 0x0F) << 4));
            qh |= (uint32_t)((q0 >> 4) & 1) << j;
            qh |= (uint32_t)((q1 >> 4) & 1) << (j + QR_QK5_1 / 2);
        }
        store_u32le(y[i].qh, qh);
    }
}

/* *s = sum over blocks of dx*dy*sum(qx*qy) + mx*sy. */
void qr_vec_dot_q5_1_q8_1(int64_t n, float *s, const void *vx, const void *vy) {
    const qr_block_q5_1 *x = vx;
    const qr_block_q8_1 *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QR_QK8_1; i++) {
        const uint32_t qh = load_u32le(x[i].qh);
        int sumi = 0;
        for (int j = 0; j < QR_QK8_1 / 2; j++) {
            const int q0 = (x[i].qs[j] & 0x0F) | (int)(((qh >> j) & 1) << 4);
            const int q1 = (x[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            sumi += q0 * y[i].qs[j] + q1 * y[i].qs[j + QR_QK8_1 / 2];
        }
        sumf += (half_to_fp32(x[i].d) * half_to_fp32(y[i].d)) * (float)sumi +
                half_to_fp32(x[i].m) * half_to_fp32(y[i].s);
    }
    *s = sumf;
}

/* ------------------------------------------------------------------------------------------------
 * Q8_0 / Q8_1: symmetric 8-bit, d = amax / 127, q = roundf(x / d) (ties away from zero).
 * ---------------------------------------------------------------------------------------------- */

/* dst = q * d per block. */
void qr_q8_0_to_float(const void *src, float *dst, int64_t n) {
    const qr_block_q8_0 *b = src;
    for (int64_t i = 0; i < n / QR_QK8_0; i++, dst += QR_QK8_0) {
        const float d = half_to_fp32(b[i].d);
        for (int j = 0; j < QR_QK8_0; j++) dst[j] = (float)b[i].qs[j] * d;
    }
}

/* Reference Q8_0 quantizer. */
void qr_q8_0_from_float(const float *src, void *dst, int64_t n) {
    qr_block_q8_0 *y = dst;
    for (int64_t i = 0; i < n / QR_QK8_0; i++) {
        const float *x = src + i * QR_QK8_0;
        float amax = 0.0f;
        for (int j = 0; j < QR_QK8_0; j++) amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]);
        const float d = amax / ((1 << 7) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = qr_fp32_to_fp16(d);
        for (int j = 0; j < QR_QK8_0; j++) y[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

/* *s = sum over blocks of dx*dy*sum(qx*qy). */
void qr_vec_dot_q8_0_q8_0(int64_t n, float *s, const void *vx, const void *vy) {
    const qr_block_q8_0 *x = vx;
    const qr_block_q8_0 *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QR_QK8_0; i++) {
        int sumi = 0;
        for (int j = 0; j < QR_QK8_0; j++) sumi += x[i].qs[j] * y[i].qs[j];
        sumf += (float)sumi * (half_to_fp32(x[i].d) * half_to_fp32(y[i].d));
    }
    *s = sumf;
}

/* dst = q * d per block (s is not needed to dequantize). */
void qr_q8_1_to_float(const void *src, float *dst, int64_t n) {
    const qr_block_q8_1 *b = src;
    for (int64_t i = 0; i < n / QR_QK8_1; i++, dst += QR_QK8_1) {
        const float d = half_to_fp32(b[i].d);
        for (int j = 0; j < QR_QK8_1; j++) dst[j] = (float)b[i].qs[j] * d;
    }
}

/* Reference Q8_1 quantizer: Q8_0's codes plus s = fp16(d * sum(q)). */
void qr_q8_1_from_float(const float *src, void *dst, int64_t n) {
    qr_block_q8_1 *y = dst;
    for (int64_t i = 0; i < n / QR_QK8_1; i++) {
        const float *x = src + i * QR_QK8_1;
        float amax = 0.0f;
        for (int j = 0; j < QR_QK8_1; j++) amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]);
        const float d = amax / ((1 << 7) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = qr_fp32_to_fp16(d);
        int sum = 0;
        for (int j = 0; j < QR_QK8_1; j++) {
            y[i].qs[j] = (int8_t)roundf(x[j] * id);
            sum += y[i].qs[j];
        }
        y[i].s = qr_fp32_to_fp16((float)sum * d);
    }
}

/* ------------------------------------------------------------------------------------------------
 * MXFP4: 4-bit E2M1 codes with a shared power-of-two scale.
 * ---------------------------------------------------------------------------------------------- */

/* dst = kvalue[q] * 2^(e-128) per block. */
void qr_mxfp4_to_float(const void *src, float *dst, int64_t n) {
    const qr_block_mxfp4 *b = src;
    for (int64_t i = 0; i < n / QR_QK_MXFP4; i++, dst += QR_QK_MXFP4) {
        const float d = e8m0_to_fp32_half(b[i].e);
        for (int j = 0; j < QR_QK_MXFP4 / 2; j++) {
            dst[j] = (float)qr_kvalues_mxfp4[b[i].qs[j] & 0x0F] * d;
            dst[j + QR_QK_MXFP4 / 2] = (float)qr_kvalues_mxfp4[b[i].qs[j] >> 4] * d;
        }
    }
}

/* Index of the first kvalue k minimising |k*d - x| (linear scan, as ggml). */
static int mxfp4_best_index(float x, float d) {
    int best = 0;
    float best_err = fabsf((float)qr_kvalues_mxfp4[0] * d - x);
    for (int i = 1; i < 16; i++) {
        const float err = fabsf((float)qr_kvalues_mxfp4[i] * d - x);
        if (err < best_err) {
            best = i;
            best_err = err;
        }
    }
    return best;
}

/* Reference MXFP4 quantizer: e = floor(log2(amax)) - 2 + 127 (so amax lands near the top code 6),
 * then each value takes the nearest code. An exponent below 0 wraps modulo 256, as in ggml and
 * numpy (only for amax < 2^-125). */
void qr_mxfp4_from_float(const float *src, void *dst, int64_t n) {
    qr_block_mxfp4 *y = dst;
    for (int64_t i = 0; i < n / QR_QK_MXFP4; i++) {
        const float *x = src + i * QR_QK_MXFP4;
        float amax = 0.0f;
        for (int j = 0; j < QR_QK_MXFP4; j++)
            if (amax < fabsf(x[j])) amax = fabsf(x[j]);
        const uint8_t e = amax > 0.0f ? (uint8_t)(int)(floorf(log2f(amax)) - 2 + 127) : 0;
        const float d = e8m0_to_fp32_half(e);
        y[i].e = e;
        for (int j = 0; j < QR_QK_MXFP4 / 2; j++) {
            const int q0 = mxfp4_best_index(x[j], d);
            const int q1 = mxfp4_best_index(x[j + QR_QK_MXFP4 / 2], d);
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* *s = sum over blocks of 2^(e-128)*dy*sum(kvalue[qx]*qy). */
void qr_vec_dot_mxfp4_q8_0(int64_t n, float *s, const void *vx, const void *vy) {
    const qr_block_mxfp4 *x = vx;
    const qr_block_q8_0 *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QR_QK_MXFP4; i++) {
        const float d = half_to_fp32(y[i].d) * e8m0_to_fp32_half(x[i].e);
        int sumi = 0;
        for (int j = 0; j < QR_QK_MXFP4 / 2; j++) {
            sumi += y[i].qs[j] * qr_kvalues_mxfp4[x[i].qs[j] & 0x0F];
            sumi += y[i].qs[j + QR_QK_MXFP4 / 2] * qr_kvalues_mxfp4[x[i].qs[j] >> 4];
        }
        sumf += d * (float)sumi;
    }
    *s = sumf;
}

/* ------------------------------------------------------------------------------------------------
 * IQ4_NL: 4-bit indices into a fixed non-linear table, one fp16 scale per 32 values.
 * ---------------------------------------------------------------------------------------------- */

/* dst = d * kvalues_iq4nl[q] per block. */
void qr_iq4_nl_to_float(const void *src, float *dst, int64_t n) {
    const qr_block_iq4_nl *b = src;
    for (int64_t i = 0; i < n / QR_QK4_NL; i++, dst += QR_QK4_NL) {
        const float d = half_to_fp32(b[i].d);
        for (int j = 0; j < QR_QK4_NL / 2; j++) {
            dst[j] = d * (float)qr_kvalues_iq4nl[b[i].qs[j] & 0x0F];
            dst[j + QR_QK4_NL / 2] = d * (float)qr_kvalues_iq4nl[b[i].qs[j] >> 4];
        }
    }
}

/* Index of the table entry nearest to x in the sorted 16-entry table `val` (ties go up). Compares
 * 2x with the sum of neighbours, which is exact, by a branch-free binary search. */
static int best_index_int8(const int8_t *val, float x) {
    const float x2 = x + x;
    int idx = 0;
    for (int step = 8; step > 0; step >>= 1) {
        const int j = idx + step;
        idx = x2 >= (float)(val[j - 1] + val[j]) ? j : idx;
    }
    return idx;
}

/* IQ4_NL quantizer as llama-quantize runs it without an importance matrix (weights x^2, scale
 * search over 15 candidates, then every value re-mapped with the final unrounded scale). */
void qr_iq4_nl_from_float(const float *src, void *dst, int64_t n) {
    qr_block_iq4_nl *y = dst;
    const int8_t *values = qr_kvalues_iq4nl;
    const int ntry = 7;
    for (int64_t ib = 0; ib < n / QR_QK4_NL; ib++) {
        const float *x = src + ib * QR_QK4_NL;
        uint8_t L[QR_QK4_NL];
        float weight[QR_QK4_NL];
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QR_QK4_NL; j++) {
            weight[j] = x[j] * x[j];
            const float ax = fabsf(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        float scale = 0.0f; /* an all-zero block keeps scale 0: every code then maps 0 -> index 8 */
        if (!(amax < 1e-15f)) {
            float d = -max / values[0];
            float id = 1 / d;
            float sumqx = 0, sumq2 = 0;
            for (int j = 0; j < QR_QK4_NL; j++) {
                const int l = best_index_int8(values, id * x[j]);
                const float q = values[l];
                sumqx += weight[j] * q * x[j];
                sumq2 += weight[j] * q * q;
            }
            d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
            float best = d * sumqx;
            for (int itry = -ntry; itry <= ntry; itry++) {
                id = (itry + values[0]) / max;
                sumqx = sumq2 = 0;
                for (int j = 0; j < QR_QK4_NL; j++) {
                    const int l = best_index_int8(values, id * x[j]);
                    const float q = values[l];
                    sumqx += weight[j] * q * x[j];
                    sumq2 += weight[j] * q * q;
                }
                if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                    d = sumqx / sumq2;
                    best = d * sumqx;
                }
            }
            scale = d;
        }
        const float inv = scale ? 1 / scale : 0;
        for (int j = 0; j < QR_QK4_NL; j++) L[j] = (uint8_t)best_index_int8(values, inv * x[j]);
        y[ib].d = qr_fp32_to_fp16(scale);
        for (int j = 0; j < QR_QK4_NL / 2; j++) y[ib].qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
    }
}

/* *s = sum over blocks of dx*dy*sum(kvalues_iq4nl[qx]*qy). */
void qr_vec_dot_iq4_nl_q8_0(int64_t n, float *s, const void *vx, const void *vy) {
    const qr_block_iq4_nl *x = vx;
    const qr_block_q8_0 *y = vy;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / QR_QK4_NL; i++) {
        const float d = half_to_fp32(y[i].d) * half_to_fp32(x[i].d);
        int sumi = 0;
        for (int j = 0; j < QR_QK4_NL / 2; j++) {
            sumi += y[i].qs[j] * qr_kvalues_iq4nl[x[i].qs[j] & 0x0F];
            sumi += y[i].qs[j + QR_QK4_NL / 2] * qr_kvalues_iq4nl[x[i].qs[j] >> 4];
        }
        sumf += d * (float)sumi;
    }
    *s = sumf;
}

/* ------------------------------------------------------------------------------------------------
 * ggml's repacked 8-row kernels of the 32-value formats (ggml_gemv / ggml_gemm_{q4_0,iq4_nl,mxfp4}_
 * 8x8_q8_0 on x86, one order for both): per block one fma of the block's integer sum,
 * acc = fma(isum, dx * dy, acc).
 * ---------------------------------------------------------------------------------------------- */

/* sum over a block of table[code] * qy, with the 4-bit codes of qs (low nibbles first). */
static int table4_block_isum(const int8_t *table, const uint8_t *qs, const int8_t *q8) {
    int sumi = 0;
    for (int j = 0; j < 16; j++) sumi += table[qs[j] & 0x0F] * q8[j] + table[qs[j] >> 4] * q8[j + 16];
    return sumi;
}

void qr_vec_dot_q4_0_q8_0_rp(int64_t n, float *s, const void *vx, const void *vy) {
    static const int8_t minus8[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};
    const qr_block_q4_0 *x = vx;
    const qr_block_q8_0 *y = vy;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QR_QK8_0; i++)
        acc = fmaf((float)table4_block_isum(minus8, x[i].qs, y[i].qs), half_to_fp32(x[i].d) * half_to_fp32(y[i].d), acc);
    *s = acc;
}

void qr_vec_dot_iq4_nl_q8_0_rp(int64_t n, float *s, const void *vx, const void *vy) {
    const qr_block_iq4_nl *x = vx;
    const qr_block_q8_0 *y = vy;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QR_QK4_NL; i++)
        acc = fmaf((float)table4_block_isum(qr_kvalues_iq4nl, x[i].qs, y[i].qs),
                   half_to_fp32(x[i].d) * half_to_fp32(y[i].d), acc);
    *s = acc;
}

void qr_vec_dot_mxfp4_q8_0_rp(int64_t n, float *s, const void *vx, const void *vy) {
    const qr_block_mxfp4 *x = vx;
    const qr_block_q8_0 *y = vy;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QR_QK_MXFP4; i++)
        acc = fmaf((float)table4_block_isum(qr_kvalues_mxfp4, x[i].qs, y[i].qs),
                   e8m0_to_fp32_half(x[i].e) * half_to_fp32(y[i].d), acc);
    *s = acc;
}
