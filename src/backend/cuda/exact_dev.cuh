/* exact_dev.cuh — the CPU backend's arithmetic, operation for operation, as code that compiles both for
 * the GPU (exact.cu, built without fast math: IEEE division/sqrt, no FMA contraction, no flush to
 * zero) and for the host (tests/cuda/host/check_exact.cpp, -ffp-contract=off), so that the GPU's
 * "exact" mode (QUARREL_CUDA_EXACT=1) gives the CPU backend's logits bit for bit.
 *
 * What has to match. The CPU matmul converts each activation row to the weight type's vec_dot_type
 * (Q8_0/Q8_1 with ggml's x86 rule, Q8_K, f16, bf16) and then runs one of several dot-product orders
 * (quant/quant.h: vec_dot, the repacked GEMV/GEMM, the tiled K-quant GEMM, llamafile's sgemm), picked
 * by weight type, weight rows and activation rows. Every order sums exact integers per 32-value group
 * (or super-block) and differs only in how the float products are accumulated: 8 SIMD lanes with FMA
 * and a fixed horizontal sum, or one scalar chain. The lane of a value is (index % 32) / 4 (the
 * maddubs + madd pairing of the AVX2 kernels), so each lane's integer is a plain sum here, and the
 * float steps are written out in the CPU kernels' order. quant_avx2.c / quant_kquants_avx2.c are the
 * definition; check_exact.cpp compares every order with them bit for bit on random rows.
 */
#ifndef QR_CUDA_EXACT_DEV_CUH
#define QR_CUDA_EXACT_DEV_CUH

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "quant/blocks.h"

#ifdef __CUDACC__
#define QX_FN static __device__ __forceinline__
#else
#define QX_FN static inline
#endif

/* The dot-product orders (quant.h's traits). */
enum { QX_VEC = 0, QX_GEMV = 1, QX_GEMM = 2, QX_TILED = 3, QX_SGEMM = 4 };

QX_FN float qx_bits_f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
QX_FN uint32_t qx_f_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* fp16 bits -> float (exact). */
QX_FN float qx_h2f(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ffu;
    if (e == 0x1f) return qx_bits_f(sign | 0x7f800000u | (m << 13));
    if (e) return qx_bits_f(sign | ((e + 112u) << 23) | (m << 13));
    if (!m) return qx_bits_f(sign);
    /* subnormal: m * 2^-24, exact in float */
    const float v = (float)m * qx_bits_f(0x33800000u);
    return sign ? -v : v;
}

/* float -> fp16 bits, round to nearest even (F16C's vcvtps2ph with the default mode). */
QX_FN uint16_t qx_f2h(float f) {
    const uint32_t x = qx_f_bits(f), sign = (x >> 16) & 0x8000u;
    const uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0u));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: inf */
    if (ax < 0x38800000u) {                                   /* result subnormal (or zero) */
        if (ax < 0x33000000u) return (uint16_t)sign;          /* < 2^-25: rounds to 0 */
        const uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u;
        const uint32_t shift = 126u - e; /* value = m * 2^(e-150); unit 2^-24 -> shift = 126 - e */
        uint32_t q = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t r = ((ax >> 13) - (112u << 10)); /* rebias: (e - 112) << 10 | m >> 13 */
    const uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) r++;
    return (uint16_t)(sign | r);
}

QX_FN float qx_round_f16(float f) { return qx_h2f(qx_f2h(f)); }

/* float -> bf16 bits as util's qr_fp32_to_bf16 (round to nearest even; NaN kept quiet). */
QX_FN uint16_t qx_f2bf(float f) {
    const uint32_t u = qx_f_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 64u);
    return (uint16_t)((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}
QX_FN float qx_bf2f(uint16_t b) { return qx_bits_f((uint32_t)b << 16); }

/* E8M0 -> 2^(e - 128) (half the scale: the MXFP4 codes are doubled). */
QX_FN float qx_e8m0_half(uint8_t e) { return qx_bits_f(e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23); }

/* ggml's horizontal sum of 8 lanes (hsum_ps / tinyBLAS reduce): ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)). */
QX_FN float qx_hsum8(const float *l) {
    const float r0 = l[0] + l[4], r1 = l[1] + l[5], r2 = l[2] + l[6], r3 = l[3] + l[7];
    return (r0 + r2) + (r1 + r3);
}
/* Of 4 lanes (hsum_ps128): (l0+l2) + (l1+l3). */
QX_FN float qx_hsum4(const float *l) { return (l[0] + l[2]) + (l[1] + l[3]); }
/* ggml's GGML_F32x8_REDUCE of 4 accumulators: v = (a0+a2) + (a1+a3) lane-wise, t = v_lo + v_hi,
 * then two horizontal adds: (t0+t1) + (t2+t3). */
QX_FN float qx_reduce4x8(const float a[4][8]) {
    float v[8];
    for (int l = 0; l < 8; l++) v[l] = (a[0][l] + a[2][l]) + (a[1][l] + a[3][l]);
    const float t0 = v[0] + v[4], t1 = v[1] + v[5], t2 = v[2] + v[6], t3 = v[3] + v[7];
    return (t0 + t1) + (t2 + t3);
}

/* The CPU backend's e^x (cpu/cpu.h cpu_expf, ggml's SIMD exp; its 8-lane form is identical lane by lane). */
QX_FN float qx_expf(float x) {
    const float z = fmaf(x, 0x1.715476p+0f, 0x1.8p23f);
    const float n = z - 0x1.8p23f;
    const float r = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    const uint32_t e = qx_f_bits(z) << 23;
    const float scale = qx_bits_f(e + qx_f_bits(1.0f));
    const float r2 = r * r;
    const float poly = fmaf(fmaf(fmaf(0x1.0e4020p-7f, r, 0x1.573e2ep-5f), r2, fmaf(0x1.555e66p-3f, r, 0x1.fffdb6p-2f)), r2,
                            0x1.ffffecp-1f * r);
    if (!(fabsf(n) > 126.0f)) return fmaf(poly, scale, scale);
    const uint32_t g = n <= 0.0f ? 0x82000000u : 0u;
    const float s1 = qx_bits_f(g + 0x7f000000u), s2 = qx_bits_f(e - g);
    if (fabsf(n) > 192.0f) return s1 * s1;
    return fmaf(s2, poly, s2) * s1;
}

/* ---- activation quantizers (one block) ---- */

/* ggml's x86 Q8_0 / Q8_1 rule (cpu/act_quant.c): d = amax / 127, codes = round-half-even(x * 127/amax). */
QX_FN void qx_quant_q8_0(const float *x, qr_block_q8_0 *y) {
    float amax = 0.0f;
    for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[i]));
    const float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
    for (int i = 0; i < 32; i++) y->qs[i] = (int8_t)(int)rintf(x[i] * id);
    y->d = qx_f2h(d);
}
QX_FN void qx_quant_q8_1(const float *x, qr_block_q8_1 *y) {
    float amax = 0.0f;
    for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[i]));
    const float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int s = 0;
    for (int i = 0; i < 32; i++) {
        const int q = (int)rintf(x[i] * id);
        y->qs[i] = (int8_t)q;
        s += q;
    }
    y->d = qx_f2h(d);
    y->s = qx_f2h(d * (float)s);
}
/* Q8_K (quant_avx2.c q8_K_rows_avx2): the first value of largest magnitude sets the sign; any_positive
 * (ggml's 4-row quantizer) lets +amax win a tie. */
QX_FN void qx_quant_q8_K(const float *x, qr_block_q8_K *y, bool any_positive) {
    float amax = 0.0f;
    for (int i = 0; i < 256; i++) amax = fmaxf(amax, fabsf(x[i]));
    if (amax == 0.0f) {
        y->d = 0.0f;
        for (int i = 0; i < 256; i++) y->qs[i] = 0;
        for (int i = 0; i < 16; i++) y->bsums[i] = 0;
        return;
    }
    float max = 0.0f;
    for (int i = 0; i < 256; i++)
        if (fabsf(x[i]) == amax) {
            max = x[i];
            break;
        }
    if (any_positive && max < 0.0f)
        for (int i = 0; i < 256; i++)
            if (x[i] == amax) {
                max = amax;
                break;
            }
    const float iscale = -127.f / max;
    for (int j = 0; j < 16; j++) {
        int s = 0;
        for (int i = 16 * j; i < 16 * j + 16; i++) {
            int q = (int)rintf(x[i] * iscale);
            q = q < 127 ? q : 127;
            y->qs[i] = (int8_t)q;
            s += q;
        }
        y->bsums[j] = (int16_t)s;
    }
    y->d = 1 / iscale;
}

/* ---- the 32-value formats ---- */

/* Signed (or unsigned, for the offset formats) code of value e (0..31) of a block. */
QX_FN int qx_nib(const uint8_t *qs, int e) { return e < 16 ? qs[e] & 0xF : qs[e - 16] >> 4; }
QX_FN int qx_hbit(const uint8_t *qh, int e) { return (qh[e >> 3] >> (e & 7)) & 1; }

QX_FN int qx_code32(int type, const void *blk, int e) {
    switch (type) {
    case QR_TYPE_Q4_0: return qx_nib(((const qr_block_q4_0 *)blk)->qs, e) - 8;
    case QR_TYPE_Q4_1: return qx_nib(((const qr_block_q4_1 *)blk)->qs, e);
    case QR_TYPE_Q5_0: {
        const qr_block_q5_0 *b = (const qr_block_q5_0 *)blk;
        return (qx_nib(b->qs, e) | qx_hbit(b->qh, e) << 4) - 16;
    }
    case QR_TYPE_Q5_1: {
        const qr_block_q5_1 *b = (const qr_block_q5_1 *)blk;
        return qx_nib(b->qs, e) | qx_hbit(b->qh, e) << 4;
    }
    case QR_TYPE_Q8_0: return ((const qr_block_q8_0 *)blk)->qs[e];
    case QR_TYPE_IQ4_NL: {
        const int8_t t[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
        return t[qx_nib(((const qr_block_iq4_nl *)blk)->qs, e)];
    }
    default: { /* MXFP4 */
        const int8_t t[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
        return t[qx_nib(((const qr_block_mxfp4 *)blk)->qs, e)];
    }
    }
}

/* The weight scale of a 32-value block as the CPU reads it. */
QX_FN float qx_scale32(int type, const void *blk) {
    if (type == QR_TYPE_MXFP4) return qx_e8m0_half(((const qr_block_mxfp4 *)blk)->e);
    return qx_h2f(*(const uint16_t *)blk); /* d is the first member of the others */
}

/* The 8 lane sums of a block against Q8 codes yq. */
QX_FN void qx_lanes32(int type, const void *blk, const int8_t *yq, int lanes[8]) {
    for (int l = 0; l < 8; l++) {
        int s = 0;
        for (int e = 4 * l; e < 4 * l + 4; e++) s += qx_code32(type, blk, e) * yq[e];
        lanes[l] = s;
    }
}

/* Block sizes of the GGUF formats (bytes), for the block buffers below. */
#define QX_MAX_BLOCK 256

/* One weight row of a 32-value format against its Q8_0 / Q8_1 activation row y, in `order`.
 * wb(i, buf) copies weight block i into buf. */
template <class WB>
QX_FN float qx_dot32(int type, int order, int64_t n, const WB &wb, const void *vy) {
    const int64_t nb = n / 32;
    alignas(8) uint8_t buf[QX_MAX_BLOCK];
    int lanes[8];
    if (type == QR_TYPE_Q4_1 || type == QR_TYPE_Q5_1) { /* DOT_OFFSET_Q8_1 */
        const qr_block_q8_1 *y = (const qr_block_q8_1 *)vy;
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0}, summs = 0.0f;
        for (int64_t i = 0; i < nb; i++) {
            wb(i, buf);
            const uint16_t *hd = (const uint16_t *)buf; /* d, m */
            summs = fmaf(qx_h2f(hd[1]), qx_h2f(y[i].s), summs);
            const float d = qx_h2f(hd[0]) * qx_h2f(y[i].d);
            qx_lanes32(type, buf, y[i].qs, lanes);
            for (int l = 0; l < 8; l++) acc[l] = fmaf(d, (float)lanes[l], acc[l]);
        }
        return qx_hsum8(acc) + summs;
    }
    const qr_block_q8_0 *y = (const qr_block_q8_0 *)vy;
    if (order == QX_GEMV || order == QX_GEMM) { /* DOT_REPACKED_Q8_0 */
        float acc = 0.0f;
        for (int64_t i = 0; i < nb; i++) {
            wb(i, buf);
            qx_lanes32(type, buf, y[i].qs, lanes);
            int isum = 0;
            for (int l = 0; l < 8; l++) isum += lanes[l];
            acc = fmaf((float)isum, qx_scale32(type, buf) * qx_h2f(y[i].d), acc);
        }
        return acc;
    }
    if ((type == QR_TYPE_IQ4_NL || type == QR_TYPE_MXFP4) && order != QX_SGEMM) { /* DOT_PAIRED_Q8_0 */
        float acc[2][8] = {{0, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0, 0}};
        int64_t i = 0;
        for (; i + 1 < nb; i += 2)
            for (int h = 0; h < 2; h++) {
                wb(i + h, buf);
                const float d = qx_scale32(type, buf) * qx_h2f(y[i + h].d);
                qx_lanes32(type, buf, y[i + h].qs, lanes);
                for (int l = 0; l < 8; l++) acc[h][l] = fmaf(d, (float)lanes[l], acc[h][l]);
            }
        float s8[8];
        for (int l = 0; l < 8; l++) s8[l] = acc[0][l] + acc[1][l];
        float sumf = qx_hsum8(s8);
        for (; i < nb; i++) {
            wb(i, buf);
            qx_lanes32(type, buf, y[i].qs, lanes);
            int isum = 0;
            for (int l = 0; l < 8; l++) isum += lanes[l];
            sumf += (float)isum * (qx_scale32(type, buf) * qx_h2f(y[i].d));
        }
        return sumf;
    }
    /* DOT_SYMMETRIC_Q8_0 (Q4_0, Q5_0, Q8_0 vec_dot; IQ4_NL sgemm) */
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t i = 0; i < nb; i++) {
        wb(i, buf);
        const float d = qx_scale32(type, buf) * qx_h2f(y[i].d);
        qx_lanes32(type, buf, y[i].qs, lanes);
        for (int l = 0; l < 8; l++) acc[l] = fmaf(d, (float)lanes[l], acc[l]);
    }
    return qx_hsum8(acc);
}

/* ---- K-quants (256-value super-blocks against Q8_K) ---- */

/* Q4_K / Q5_K: scale j and min j (6 bits) of the packed 12 bytes. */
QX_FN void qx_k4_scale_min(const uint8_t *q, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* Q3_K: the 16 signed scales (sc - 32). */
QX_FN void qx_q3_scales(const uint8_t *packed, int sc[16]) {
    uint32_t a[3];
    memcpy(a, packed, 12);
    const uint32_t lo4 = 0x0f0f0f0fu, hi2 = 0x03030303u;
    const uint32_t w[4] = {(a[0] & lo4) | ((a[2] & hi2) << 4), (a[1] & lo4) | (((a[2] >> 2) & hi2) << 4),
                           ((a[0] >> 4) & lo4) | (((a[2] >> 4) & hi2) << 4),
                           ((a[1] >> 4) & lo4) | (((a[2] >> 6) & hi2) << 4)};
    for (int b = 0; b < 16; b++) sc[b] = (int)((w[b / 4] >> (8 * (b % 4))) & 0xFF) - 32;
}

/* Code (as the AVX2 kernel multiplies it) and scale of value i of a K-quant super-block. */
QX_FN void qx_kcode(int type, const void *blk, const int *sc16, int i, int *q, int *sc) {
    const int c = i / 32, e = i % 32; /* 32-value chunk, position in it */
    switch (type) {
    case QR_TYPE_Q2_K: {
        const qr_block_q2_K *b = (const qr_block_q2_K *)blk;
        *q = (b->qs[32 * (c / 4) + e] >> (2 * (c % 4))) & 3;
        *sc = b->scales[i / 16] & 0xF;
        return;
    }
    case QR_TYPE_Q3_K: {
        const qr_block_q3_K *b = (const qr_block_q3_K *)blk;
        const int lo = (b->qs[32 * (c / 4) + e] >> (2 * (c % 4))) & 3, h = (b->hmask[e] >> c) & 1;
        *q = lo - (h ? 0 : 4);
        *sc = sc16[i / 16];
        return;
    }
    case QR_TYPE_Q4_K: {
        const qr_block_q4_K *b = (const qr_block_q4_K *)blk;
        *q = c % 2 ? b->qs[32 * (c / 2) + e] >> 4 : b->qs[32 * (c / 2) + e] & 0xF;
        *sc = sc16[c];
        return;
    }
    case QR_TYPE_Q5_K: {
        const qr_block_q5_K *b = (const qr_block_q5_K *)blk;
        const int lo = c % 2 ? b->qs[32 * (c / 2) + e] >> 4 : b->qs[32 * (c / 2) + e] & 0xF;
        *q = lo | ((b->qh[e] >> c) & 1) << 4;
        *sc = sc16[c];
        return;
    }
    default: { /* Q6_K: chunk c = 4 j + k */
        const qr_block_q6_K *b = (const qr_block_q6_K *)blk;
        const int j = c / 4, k = c % 4;
        const uint8_t l = b->ql[64 * j + 32 * (k % 2) + e], h = b->qh[32 * j + e];
        *q = (k < 2 ? l & 0xF : l >> 4) | ((h >> (2 * k)) & 3) << 4;
        *sc = b->scales[i / 16];
        return;
    }
    }
}

/* Integer parts of one super-block: lanes[8] (sum of sc * q * y over the values of lane (i % 32) / 4),
 * and for the types with mins their min term: Q2_K mins8[8] (lane l: m[2l] bsum[2l] + m[2l+1] bsum[2l+1]);
 * Q4_K / Q5_K mins4[4] (lane c: m[2c] (b[4c]+b[4c+1]) + m[2c+1] (b[4c+2]+b[4c+3])); pairs[4] (Q4_K: the
 * integer of each pair of 32-value sub-blocks). */
QX_FN void qx_ksums(int type, const void *blk, const qr_block_q8_K *y, int lanes[8], int mins[8], int pairs[4]) {
    int sc16[16];
    if (type == QR_TYPE_Q3_K) qx_q3_scales(((const qr_block_q3_K *)blk)->scales, sc16);
    if (type == QR_TYPE_Q4_K || type == QR_TYPE_Q5_K) {
        const uint8_t *packed = type == QR_TYPE_Q4_K ? ((const qr_block_q4_K *)blk)->scales : ((const qr_block_q5_K *)blk)->scales;
        for (int j = 0; j < 8; j++) qx_k4_scale_min(packed, j, &sc16[j], &sc16[8 + j]);
        for (int c = 0; c < 4; c++)
            mins[c] = sc16[8 + 2 * c] * (y->bsums[4 * c] + y->bsums[4 * c + 1]) +
                      sc16[8 + 2 * c + 1] * (y->bsums[4 * c + 2] + y->bsums[4 * c + 3]);
    }
    if (type == QR_TYPE_Q2_K) {
        const qr_block_q2_K *b = (const qr_block_q2_K *)blk;
        for (int l = 0; l < 8; l++)
            mins[l] = (b->scales[2 * l] >> 4) * y->bsums[2 * l] + (b->scales[2 * l + 1] >> 4) * y->bsums[2 * l + 1];
    }
    for (int l = 0; l < 8; l++) lanes[l] = 0;
    for (int c = 0; c < 4; c++) pairs[c] = 0;
    for (int i = 0; i < 256; i++) {
        int q, sc;
        qx_kcode(type, blk, sc16, i, &q, &sc);
        const int v = sc * q * y->qs[i];
        lanes[(i % 32) / 4] += v;
        pairs[i / 64] += v;
    }
    if (type == QR_TYPE_Q6_K) {
        const qr_block_q6_K *b = (const qr_block_q6_K *)blk;
        for (int l = 0; l < 8; l++) lanes[l] -= 32 * (b->scales[2 * l] * y->bsums[2 * l] + b->scales[2 * l + 1] * y->bsums[2 * l + 1]);
    }
}

/* ggml's tiled K-quant GEMM step. */
QX_FN float qx_tiled_step(float acc, float dx, float dmin, int s1, int s2, float dy) {
    return fmaf(fmaf(-dmin, (float)s2, dx * (float)s1), dy, acc);
}

template <class WB>
QX_FN float qx_dotk(int type, int order, int64_t n, const WB &wb, const void *vy) {
    const qr_block_q8_K *y = (const qr_block_q8_K *)vy;
    const int64_t nb = n / 256;
    alignas(8) uint8_t buf[QX_MAX_BLOCK];
    int lanes[8], mins[8], pairs[4];
    float acc8[8] = {0, 0, 0, 0, 0, 0, 0, 0}, accm[4] = {0, 0, 0, 0};
    float acc = 0.0f, acc_min = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        wb(i, buf);
        qx_ksums(type, buf, &y[i], lanes, mins, pairs);
        int sl = 0, sm = 0;
        for (int l = 0; l < 8; l++) sl += lanes[l];
        const int nm = type == QR_TYPE_Q2_K ? 8 : 4;
        if (type == QR_TYPE_Q2_K || type == QR_TYPE_Q4_K || type == QR_TYPE_Q5_K)
            for (int l = 0; l < nm; l++) sm += mins[l];
        /* the fp16 super-scales: Q2_K keeps d, dmin last; Q3_K / Q6_K d last; Q4_K / Q5_K d, dmin first */
        float xd, xdmin = 0.0f;
        if (type == QR_TYPE_Q2_K) xd = qx_h2f(((const qr_block_q2_K *)buf)->d), xdmin = qx_h2f(((const qr_block_q2_K *)buf)->dmin);
        else if (type == QR_TYPE_Q3_K) xd = qx_h2f(((const qr_block_q3_K *)buf)->d);
        else if (type == QR_TYPE_Q6_K) xd = qx_h2f(((const qr_block_q6_K *)buf)->d);
        else xd = qx_h2f(((const uint16_t *)buf)[0]), xdmin = qx_h2f(((const uint16_t *)buf)[1]);
        if (order == QX_TILED) {
            acc = qx_tiled_step(acc, xd, xdmin, sl, sm, y[i].d);
            continue;
        }
        if (order == QX_GEMV || order == QX_GEMM) { /* repacked Q4_K */
            const float d = xd * y[i].d, dmin = xdmin * y[i].d;
            if (order == QX_GEMV) {
                acc = fmaf((float)sl, d, acc);
                acc_min = fmaf((float)sm, dmin, acc_min);
            } else
                for (int c = 0; c < 4; c++) {
                    acc = fmaf((float)pairs[c], d, acc);
                    acc_min = fmaf((float)mins[c], dmin, acc_min);
                }
            continue;
        }
        const float d = y[i].d * xd;
        const float dmin = -y[i].d * xdmin;
        if (type == QR_TYPE_Q2_K)
            for (int l = 0; l < 8; l++) acc8[l] = fmaf(dmin, (float)mins[l], acc8[l]);
        if (type == QR_TYPE_Q4_K)
            for (int c = 0; c < 4; c++) accm[c] = fmaf(dmin, (float)mins[c], accm[c]);
        if (type == QR_TYPE_Q5_K) acc = fmaf((float)sm, dmin, acc); /* summs */
        for (int l = 0; l < 8; l++) acc8[l] = fmaf(d, (float)lanes[l], acc8[l]);
    }
    if (order == QX_TILED) return acc;
    if (order == QX_GEMV || order == QX_GEMM) return acc - acc_min;
    if (type == QR_TYPE_Q4_K) return qx_hsum8(acc8) + qx_hsum4(accm);
    if (type == QR_TYPE_Q5_K) return qx_hsum8(acc8) + acc;
    return qx_hsum8(acc8);
}

/* ---- float weights (x the weight row, y the activation row in the weight's vec_dot_type) ---- */

QX_FN float qx_fval(int type, const void *p, int64_t i) {
    if (type == QR_TYPE_F32) return ((const float *)p)[i];
    if (type == QR_TYPE_F16) return qx_h2f(((const uint16_t *)p)[i]);
    return qx_bf2f(((const uint16_t *)p)[i]);
}

QX_FN float qx_dotf(int type, int order, int64_t n, const void *x, const void *y) {
    if (order == QX_SGEMM) { /* one 8-lane accumulator, n a multiple of 8 */
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int64_t i = 0; i + 8 <= n; i += 8)
            for (int l = 0; l < 8; l++) acc[l] = fmaf(qx_fval(type, x, i + l), qx_fval(type, y, i + l), acc[l]);
        return qx_hsum8(acc);
    }
    float a[4][8];
    for (int j = 0; j < 4; j++)
        for (int l = 0; l < 8; l++) a[j][l] = 0.0f;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 8; l++)
                a[j][l] = fmaf(qx_fval(type, x, i + 8 * j + l), qx_fval(type, y, i + 8 * j + l), a[j][l]);
    if (type == QR_TYPE_BF16) {
        for (; i + 8 <= n; i += 8)
            for (int l = 0; l < 8; l++) a[0][l] = fmaf(qx_fval(type, x, i + l), qx_fval(type, y, i + l), a[0][l]);
        float s8[8];
        for (int l = 0; l < 8; l++) s8[l] = (a[0][l] + a[1][l]) + (a[2][l] + a[3][l]);
        float sum = qx_hsum8(s8);
        for (; i < n; i++) sum += qx_fval(type, x, i) * qx_fval(type, y, i);
        return sum;
    }
    if (type == QR_TYPE_F16) {
        double sum = qx_reduce4x8(a);
        for (; i < n; i++) sum += (double)(qx_fval(type, x, i) * qx_fval(type, y, i));
        return (float)sum;
    }
    float sum = qx_reduce4x8(a);
    for (; i < n; i++) sum += qx_fval(type, x, i) * qx_fval(type, y, i);
    return sum;
}

/* One output of the exact matmul: weight row (blocks through wb, or the raw float row xf) against the
 * activation row y (the weight's vec_dot_type). */
template <class WB>
QX_FN float qx_dot(int type, int order, int64_t n, const WB &wb, const void *xf, const void *y) {
    switch (type) {
    case QR_TYPE_F32:
    case QR_TYPE_F16:
    case QR_TYPE_BF16: return qx_dotf(type, order, n, xf, y);
    case QR_TYPE_Q2_K:
    case QR_TYPE_Q3_K:
    case QR_TYPE_Q4_K:
    case QR_TYPE_Q5_K:
    case QR_TYPE_Q6_K: return qx_dotk(type, order, n, wb, y);
    default: return qx_dot32(type, order, n, wb, y);
    }
}

#endif /* QR_CUDA_EXACT_DEV_CUH */
