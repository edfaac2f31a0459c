/* quant_kquants_quantize.c — reference quantizers of the K-quants (Q2_K .. Q6_K).
 *
 * These follow ggml's reference quantizers (the ones llama-quantize runs when no importance matrix is
 * given) step by step: the same per-sub-block scale searches (make_qx_quants / make_q3_quants /
 * make_qkx2_quants), the same candidate grids, the same float expression order and the same tie
 * rules, so the output is byte-identical to ggml's. Everything is deterministic and single-threaded.
 */
#include <math.h>

#include "quant/quant_internal.h"
#include "util/util.h"

#define GROUP_MAX_EPS 1e-15f

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }

/* Symmetric scale search for n values into codes -nmax..nmax-1, error weights w = x^2.
 * Tries the plain scale (largest-magnitude value -> -nmax) and 18 nearby ones, keeps the one with the
 * best weighted least-squares fit. Writes L[i] = code + nmax (0..2*nmax-1); returns the scale. */
static float make_qx_quants(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        const float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < GROUP_MAX_EPS) {
        for (int i = 0; i < n; i++) L[i] = 0;
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest_int(iscale * x[i]);
        l = imax(-nmax, imin(nmax - 1, l));
        L[i] = (int8_t)(l + nmax);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = nearest_int(iscale * x[i]);
            l = imax(-nmax, imin(nmax - 1, l));
            const float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) {
                const int l = nearest_int(iscale * x[i]);
                L[i] = (int8_t)(nmax + imax(-nmax, imin(nmax - 1, l)));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Symmetric scale search for Q3_K sub-blocks: start from the plain scale, then up to 5 passes of
 * coordinate descent moving one code at a time while the weighted (w = x^2) fit improves.
 * Writes L[i] = code + nmax; returns the least-squares scale. All-zero input gives L = 0, scale 0. */
static float make_q3_quants(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        const float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < GROUP_MAX_EPS) {
        for (int i = 0; i < n; i++) L[i] = 0;
        return 0.f;
    }
    const float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest_int(iscale * x[i]);
        l = imax(-nmax, imin(nmax - 1, l));
        L[i] = (int8_t)l;
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * L[i] * L[i];
                int new_l = nearest_int(x[i] * sl2 / slx);
                new_l = imax(-nmax, imin(nmax - 1, new_l));
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Asymmetric (scale + min) search for n values into codes 0..nmax with error weights `weights`:
 * the plain min/max fit, then nstep+1 candidate scales (rmin + rdelta*is + nmax)/(max - min), each
 * refit by weighted least squares for scale and min (min clamped to <= 0); keeps the lowest weighted
 * error (|diff| when use_mad, else diff^2). Writes codes to L (Laux is scratch), -min to *the_min;
 * returns the scale. */
static float make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *the_min,
                              uint8_t *Laux, float rmin, float rdelta, int nstep, bool use_mad) {
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        const float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        for (int i = 0; i < n; i++) L[i] = 0;
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; i++) {
        const int l = nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)imax(0, imin(nmax, l));
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_error += weights[i] * diff;
    }
    if (nstep < 1) {
        *the_min = -min;
        return scale;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = nearest_int(iscale * (x[i] - min));
            l = imax(0, imin(nmax, l));
            Laux[i] = (uint8_t)l;
            const float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                cur_error += weights[i] * diff;
            }
            if (cur_error < best_error) {
                for (int i = 0; i < n; i++) L[i] = Laux[i];
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* Packs codes L[0..256) (2 bits each) into qs[64] in the Q2_K / Q3_K order. */
static void pack_2bit(const uint8_t *L, uint8_t *qs) {
    for (int j = 0; j < QR_QK_K; j += 128)
        for (int l = 0; l < 32; l++)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

/* Stores the j-th 6-bit scale and min of a Q4_K / Q5_K block (j ascending; scales[] starts zeroed
 * for the j >= 4 high bits, which are or-ed in). */
static void pack_scale_min_k4(int j, uint8_t ls, uint8_t lm, uint8_t *scales) {
    if (j < 4) {
        scales[j] = ls;
        scales[j + 4] = lm;
    } else {
        scales[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
        scales[j - 4] |= (uint8_t)((ls >> 4) << 6);
        scales[j] |= (uint8_t)((lm >> 4) << 6);
    }
}

/* Reference Q2_K quantizer. */
void qr_q2_K_from_float(const float *src, void *dst, int64_t n) {
    qr_block_q2_K *y = dst;
    const float q4scale = 15.f;
    for (int64_t i = 0; i < n / QR_QK_K; i++) {
        const float *x = src + i * QR_QK_K;
        uint8_t L[QR_QK_K], Laux[16];
        float weights[16], mins[16], scales[16];
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < 16; j++) {
            for (int l = 0; l < 16; l++) weights[l] = fabsf(x[16 * j + l]);
            scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        if (max_scale > 0) {
            const float iscale = q4scale / max_scale;
            for (int j = 0; j < 16; j++) y[i].scales[j] = (uint8_t)nearest_int(iscale * scales[j]);
            y[i].d = qr_fp32_to_fp16(max_scale / q4scale);
        } else {
            for (int j = 0; j < 16; j++) y[i].scales[j] = 0;
            y[i].d = qr_fp32_to_fp16(0.f);
        }
        if (max_min > 0) {
            const float iscale = q4scale / max_min;
            for (int j = 0; j < 16; j++) y[i].scales[j] |= (uint8_t)(nearest_int(iscale * mins[j]) << 4);
            y[i].dmin = qr_fp32_to_fp16(max_min / q4scale);
        } else {
            y[i].dmin = qr_fp32_to_fp16(0.f);
        }
        for (int j = 0; j < 16; j++) {
            const float d = half_to_fp32(y[i].d) * (float)(y[i].scales[j] & 0xF);
            if (!d) continue;
            const float dm = half_to_fp32(y[i].dmin) * (float)(y[i].scales[j] >> 4);
            for (int ii = 0; ii < 16; ii++) {
                const int l = nearest_int((x[16 * j + ii] + dm) / d);
                L[16 * j + ii] = (uint8_t)imax(0, imin(3, l));
            }
        }
        pack_2bit(L, y[i].qs);
    }
}

/* Reference Q3_K quantizer. */
void qr_q3_K_from_float(const float *src, void *dst, int64_t n) {
    qr_block_q3_K *y = dst;
    for (int64_t i = 0; i < n / QR_QK_K; i++) {
        const float *x = src + i * QR_QK_K;
        int8_t L[QR_QK_K];
        float scales[16];
        float max_scale = 0, amax = 0;
        for (int j = 0; j < 16; j++) {
            scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
            const float scale = fabsf(scales[j]);
            if (scale > amax) {
                amax = scale;
                max_scale = scales[j];
            }
        }
        memset(y[i].scales, 0, 12);
        if (max_scale) {
            const float iscale = -32.f / max_scale;
            for (int j = 0; j < 16; j++) {
                int l = nearest_int(iscale * scales[j]);
                l = imax(-32, imin(31, l)) + 32;
                if (j < 8) {
                    y[i].scales[j] = (uint8_t)(l & 0xF);
                } else {
                    y[i].scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
                }
                l >>= 4;
                y[i].scales[j % 4 + 8] |= (uint8_t)(l << (2 * (j / 4)));
            }
            y[i].d = qr_fp32_to_fp16(1 / iscale);
        } else {
            y[i].d = qr_fp32_to_fp16(0.f);
        }
        int8_t sc[16];
        q3_K_scales(y[i].scales, sc);
        for (int j = 0; j < 16; j++) {
            const float d = half_to_fp32(y[i].d) * (float)sc[j];
            if (!d) continue;
            for (int ii = 0; ii < 16; ii++) {
                int l = nearest_int(x[16 * j + ii] / d);
                l = imax(-4, imin(3, l));
                L[16 * j + ii] = (int8_t)(l + 4);
            }
        }
        memset(y[i].hmask, 0, sizeof y[i].hmask);
        uint8_t Lu[QR_QK_K];
        for (int j = 0; j < QR_QK_K; j++) {
            int l = L[j];
            if (l > 3) {
                y[i].hmask[j % 32] |= (uint8_t)(1u << (j / 32));
                l -= 4;
            }
            Lu[j] = (uint8_t)l;
        }
        pack_2bit(Lu, y[i].qs);
    }
}

/* Shared by Q4_K and Q5_K: per 32-value sub-block (scale, min) search with weights av_x + |x|,
 * 6-bit quantization of the scales and mins, then re-quantization of every value with the rounded
 * scales. Writes L[256] (codes 0..nmax), the packed scales, d and dmin. */
static void quantize_k4_like(const float *x, int nmax, float rmin, float rdelta, int nstep, uint8_t *L,
                             uint8_t scales_out[QR_K_SCALE_SIZE], uint16_t *d_out, uint16_t *dmin_out) {
    uint8_t Laux[32];
    float weights[32], mins[8], scales[8];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
        const float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, rdelta, nstep, false);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    memset(scales_out, 0, QR_K_SCALE_SIZE);
    for (int j = 0; j < 8; j++) {
        uint8_t ls = (uint8_t)nearest_int(inv_scale * scales[j]);
        uint8_t lm = (uint8_t)nearest_int(inv_min * mins[j]);
        ls = ls < 63 ? ls : 63;
        lm = lm < 63 ? lm : 63;
        pack_scale_min_k4(j, ls, lm, scales_out);
    }
    *d_out = qr_fp32_to_fp16(max_scale / 63.f);
    *dmin_out = qr_fp32_to_fp16(max_min / 63.f);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        kquant_scale_min(j, scales_out, &sc, &m);
        const float d = half_to_fp32(*d_out) * (float)sc;
        if (!d) continue;
        const float dm = half_to_fp32(*dmin_out) * (float)m;
        for (int ii = 0; ii < 32; ii++) {
            const int l = nearest_int((x[32 * j + ii] + dm) / d);
            L[32 * j + ii] = (uint8_t)imax(0, imin(nmax, l));
        }
    }
}

/* Reference Q4_K quantizer. */
void qr_q4_K_from_float(const float *src, void *dst, int64_t n) {
    qr_block_q4_K *y = dst;
    for (int64_t i = 0; i < n / QR_QK_K; i++) {
        uint8_t L[QR_QK_K];
        quantize_k4_like(src + i * QR_QK_K, 15, -1.f, 0.1f, 20, L, y[i].scales, &y[i].d, &y[i].dmin);
        uint8_t *q = y[i].qs;
        for (int j = 0; j < QR_QK_K; j += 64, q += 32)
            for (int l = 0; l < 32; l++) q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
    }
}

/* Reference Q5_K quantizer. */
void qr_q5_K_from_float(const float *src, void *dst, int64_t n) {
    qr_block_q5_K *y = dst;
    for (int64_t i = 0; i < n / QR_QK_K; i++) {
        uint8_t L[QR_QK_K];
        quantize_k4_like(src + i * QR_QK_K, 31, -0.5f, 0.1f, 15, L, y[i].scales, &y[i].d, &y[i].dmin);
        uint8_t *qh = y[i].qh, *ql = y[i].qs;
        memset(qh, 0, QR_QK_K / 8);
        uint8_t m1 = 1, m2 = 2;
        for (int c = 0; c < QR_QK_K; c += 64, ql += 32) {
            for (int j = 0; j < 32; j++) {
                int l1 = L[c + j], l2 = L[c + j + 32];
                if (l1 > 15) {
                    l1 -= 16;
                    qh[j] |= m1;
                }
                if (l2 > 15) {
                    l2 -= 16;
                    qh[j] |= m2;
                }
                ql[j] = (uint8_t)(l1 | (l2 << 4));
            }
            m1 = (uint8_t)(m1 << 2);
            m2 = (uint8_t)(m2 << 2);
        }
    }
}

/* Reference Q6_K quantizer. */
void qr_q6_K_from_float(const float *src, void *dst, int64_t n) {
    qr_block_q6_K *y = dst;
    for (int64_t i = 0; i < n / QR_QK_K; i++) {
        const float *x = src + i * QR_QK_K;
        int8_t L[QR_QK_K];
        float scales[16];
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < 16; ib++) {
            const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
            scales[ib] = scale;
            const float abs_scale = fabsf(scale);
            if (abs_scale > max_abs_scale) {
                max_abs_scale = abs_scale;
                max_scale = scale;
            }
        }
        if (max_abs_scale < GROUP_MAX_EPS) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -128.f / max_scale;
        y[i].d = qr_fp32_to_fp16(1 / iscale);
        for (int ib = 0; ib < 16; ib++) y[i].scales[ib] = (int8_t)imin(127, nearest_int(iscale * scales[ib]));
        for (int j = 0; j < 16; j++) {
            const float d = half_to_fp32(y[i].d) * (float)y[i].scales[j];
            if (!d) continue;
            for (int ii = 0; ii < 16; ii++) {
                int l = nearest_int(x[16 * j + ii] / d);
                l = imax(-32, imin(31, l));
                L[16 * j + ii] = (int8_t)(l + 32);
            }
        }
        uint8_t *ql = y[i].ql, *qh = y[i].qh;
        for (int j = 0; j < QR_QK_K; j += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; l++) {
                const uint8_t q1 = L[j + l + 0] & 0xF, q2 = L[j + l + 32] & 0xF;
                const uint8_t q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
                ql[l] = (uint8_t)(q1 | (q3 << 4));
                ql[l + 32] = (uint8_t)(q2 | (q4 << 4));
                qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                                  ((L[j + l + 96] >> 4) << 6));
            }
        }
    }
}
