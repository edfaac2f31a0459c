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
#define QX_FN static __host__ __device__ __forceinline__
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

/* The C library's expf as the CPU backend calls it (glibc on x86-64; the attention sinks, gpt-oss's
 * clamped SwiGLU): x / ln2 * 32 = k + r, e^x = 2^(k/32) 2^(r/32) with 2^(i/32) from a table of doubles
 * and 2^(r/32) a cubic, all in double, rounded to float once. The table is 2^(i/32) rounded to double,
 * minus i << 47 (the exponent bits k adds back); the cubic's coefficients are those of the published
 * algorithm (Szabolcs Nagy's, in glibc 2.28 on). check_exact compares it with the host's expf; all 2^32
 * inputs were compared once (docs/cuda-notes.md). */
QX_FN float qx_libm_expf(float x) {
    const uint64_t tab[32] = {
        0x3ff0000000000000ull, 0x3fefd9b0d3158574ull, 0x3fefb5586cf9890full, 0x3fef9301d0125b51ull,
        0x3fef72b83c7d517bull, 0x3fef54873168b9aaull, 0x3fef387a6e756238ull, 0x3fef1e9df51fdee1ull,
        0x3fef06fe0a31b715ull, 0x3feef1a7373aa9cbull, 0x3feedea64c123422ull, 0x3feece086061892dull,
        0x3feebfdad5362a27ull, 0x3feeb42b569d4f82ull, 0x3feeab07dd485429ull, 0x3feea47eb03a5585ull,
        0x3feea09e667f3bcdull, 0x3fee9f75e8ec5f74ull, 0x3feea11473eb0187ull, 0x3feea589994cce13ull,
        0x3feeace5422aa0dbull, 0x3feeb737b0cdc5e5ull, 0x3feec49182a3f090ull, 0x3feed503b23e255dull,
        0x3feee89f995ad3adull, 0x3feeff76f2fb5e47ull, 0x3fef199bdd85529cull, 0x3fef3720dcef9069ull,
        0x3fef5818dcfba487ull, 0x3fef7c97337b9b5full, 0x3fefa4afa2a490daull, 0x3fefd0765b6e4540ull};
    const double inv = 0x1.71547652b82fep0 * 32.0, shift = 0x1.8p52;
    const double c0 = 0x1.c6af84b912394p-5 / 32768.0, c1 = 0x1.ebfce50fac4f3p-3 / 1024.0, c2 = 0x1.62e42ff0c52d6p-1 / 32.0;
    const uint32_t ux = qx_f_bits(x), top = (ux >> 20) & 0x7ff;
    if (top >= 0x42b) { /* |x| >= 88, inf, nan */
        if (ux == 0xff800000u) return 0.0f;
        if (top >= 0x7f8) return x + x;
        if (x > 0x1.62e42ep6f) return qx_bits_f(0x7f800000u);
        if (x < -0x1.9fe368p6f) return 0.0f;
    }
    const double xd = (double)x, z = inv * xd;
    double kd = z + shift;
    uint64_t ki;
    memcpy(&ki, &kd, 8);
    kd -= shift;
    const double r = fma(inv, xd, -kd);
    const uint64_t t = tab[ki % 32] + (ki << 47);
    double sc;
    memcpy(&sc, &t, 8);
    const double r2 = r * r, y = fma(fma(c0, r, c1), r2, fma(c2, r, 1.0));
    return (float)(y * sc);
}

/* e^x - 1 in float as glibc 2.36's expm1f computes it on x86-64 (the fdlibm algorithm: reduction by k ln2 in
 * two parts, a degree-5 rational correction, k folded back into the exponent bits), for qx_libm_tanhf. */
QX_FN float qx_libm_expm1f(float x) {
    const float huge = 1.0e+30f, tiny = 1.0e-30f, ln2_hi = 6.9313812256e-01f, ln2_lo = 9.0580006145e-06f,
                invln2 = 1.4426950216e+00f, q1 = -3.3333335072e-02f, q2 = 1.5873016091e-03f, q3 = -7.9365076090e-05f,
                q4 = 4.0082177293e-06f, q5 = -2.0109921195e-07f;
    const uint32_t hx = qx_f_bits(x) & 0x7fffffffu;
    const bool neg = qx_f_bits(x) >> 31;
    float hi, lo, c = 0.0f, t, y;
    int32_t k;
    if (hx >= 0x4195b844u) { /* |x| >= 27 ln2 */
        if (hx >= 0x42b17218u) {
            if (hx > 0x7f800000u) return x + x;
            if (hx == 0x7f800000u) return neg ? -1.0f : x;
            if (x > 8.8721679688e+01f) return huge * huge;
        }
        if (neg) return tiny - 1.0f;
    }
    if (hx > 0x3eb17218u) { /* |x| > ln2 / 2: x = k ln2 + (hi - lo) */
        if (hx < 0x3F851592u) {
            hi = neg ? x + ln2_hi : x - ln2_hi;
            lo = neg ? -ln2_lo : ln2_lo;
            k = neg ? -1 : 1;
        } else {
            k = (int32_t)(invln2 * x + (neg ? -0.5f : 0.5f));
            t = (float)k;
            hi = x - t * ln2_hi;
            lo = t * ln2_lo;
        }
        x = hi - lo;
        c = (hi - x) - lo;
    } else if (hx < 0x33000000u) { /* |x| < 2^-25 */
        t = huge + x;
        return x - (t - (huge + x));
    } else {
        k = 0;
    }
    const float hfx = 0.5f * x, hxs = x * hfx;
    const float r1 = 1.0f + hxs * (q1 + hxs * (q2 + hxs * (q3 + hxs * (q4 + hxs * q5))));
    t = 3.0f - r1 * hfx;
    float e = hxs * ((r1 - t) / (6.0f - x * t));
    if (k == 0) return x - (x * e - hxs);
    e = x * (e - c) - c;
    e -= hxs;
    if (k == -1) return 0.5f * (x - e) - 0.5f;
    if (k == 1) return x < -0.25f ? -2.0f * (e - (x + 0.5f)) : 1.0f + 2.0f * (x - e);
    if (k <= -2 || k > 56) {
        y = 1.0f - (e - x);
        y = k == 128 ? y * 2.0f * 0x1p127f : qx_bits_f(qx_f_bits(y) + ((uint32_t)k << 23));
        return y - 1.0f;
    }
    if (k < 23) {
        t = qx_bits_f(0x3f800000u - (0x1000000u >> k)); /* 1 - 2^-k */
        y = t - (e - x);
    } else {
        t = qx_bits_f((uint32_t)(0x7f - k) << 23); /* 2^-k */
        y = x - (e + t);
        y += 1.0f;
    }
    return qx_bits_f(qx_f_bits(y) + ((uint32_t)k << 23));
}

/* The C library's tanhf as the CPU backend and ggml call it (gemma2's softcaps): glibc 2.36's, the fdlibm
 * algorithm (1 - 2 / (e^2|x| + 1) through expm1f for |x| >= 1, -t / (t + 2) with t = expm1f(-2|x|) below,
 * x for tiny |x|, +-1 from 22 on), which is not correctly rounded (2.8 % of floats differ from the rounded
 * tanh). Needs IEEE float arithmetic without contraction (exact.cu's flags). check_exact compares it with
 * the host's tanhf on every 61st float; all 2^32 were compared once (docs/cuda-notes.md). */
QX_FN float qx_libm_tanhf(float x) {
    const uint32_t jx = qx_f_bits(x), ix = jx & 0x7fffffffu;
    float z;
    if (ix >= 0x7f800000u) return (jx >> 31) ? 1.0f / x - 1.0f : 1.0f / x + 1.0f;
    if (ix < 0x41b00000u) { /* |x| < 22 */
        if (ix == 0) return x;
        if (ix < 0x24000000u) return x * (1.0f + x); /* |x| < 2^-55 */
        if (ix >= 0x3f800000u) {
            const float t = qx_libm_expm1f(2.0f * fabsf(x));
            z = 1.0f - 2.0f / (t + 2.0f);
        } else {
            const float t = qx_libm_expm1f(-2.0f * fabsf(x));
            z = -t / (t + 2.0f);
        }
    } else {
        z = 1.0f - 1.0e-30f;
    }
    return (jx >> 31) ? -z : z;
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

/* ggml's tiled K-quant GEMM step. */
QX_FN float qx_tiled_step(float acc, float dx, float dmin, int s1, int s2, float dy) {
    return fmaf(fmaf(-dmin, (float)s2, dx * (float)s1), dy, acc);
}

/* ---- the dot product as integer records and float folds ----
 *
 * Every order is: per block i, exact integers and the block's float scales (a record), then float
 * chains folded over i in order. The chains are per lane l (0..7: a, and b for the paired order's odd
 * blocks or the Q4_K VEC mins of lanes 0..3) plus at most two scalar chains (e0, e1). Records can be
 * computed in any order and in parallel; each chain is one sequence of FMAs over the blocks, so lane l's
 * chain can run on its own thread. qx_dot below runs it all in one thread (the reference check_exact
 * compares with the CPU); exact.cu runs records and lanes in parallel. */
struct qx_rec {
    int lanes[8];   /* lane l: the integer over the values (i % 32) / 4 == l */
    int mins[8];    /* Q2_K: 8 lanes; Q4_K / Q5_K: 4 */
    int pairs[4];   /* Q4_K: the integer of each pair of 32-value sub-blocks */
    int sl, sm;     /* sum of lanes, sum of mins */
    float wd, wm;   /* the weight block's scale and min / offset */
    float yd, ys;   /* the activation block's scale and (Q8_1) sum */
};

/* The fold kinds: how the chains consume a record (picked from type and order by qx_fold_kind). */
enum { QXF_SYM, QXF_OFFSET, QXF_REPACK, QXF_PAIRED, QXF_KVEC, QXF_KGEMV, QXF_KGEMM, QXF_KTILED };

QX_FN int qx_fold_kind(int type, int order) {
    const bool kq = type == QR_TYPE_Q2_K || type == QR_TYPE_Q3_K || type == QR_TYPE_Q4_K || type == QR_TYPE_Q5_K ||
                    type == QR_TYPE_Q6_K;
    if (kq) return order == QX_TILED ? QXF_KTILED : order == QX_GEMV ? QXF_KGEMV : order == QX_GEMM ? QXF_KGEMM : QXF_KVEC;
    if (type == QR_TYPE_Q4_1 || type == QR_TYPE_Q5_1) return QXF_OFFSET; /* DOT_OFFSET_Q8_1 */
    if (order == QX_GEMV || order == QX_GEMM) return QXF_REPACK;         /* DOT_REPACKED_Q8_0 */
    if ((type == QR_TYPE_IQ4_NL || type == QR_TYPE_MXFP4) && order != QX_SGEMM) return QXF_PAIRED; /* DOT_PAIRED_Q8_0 */
    return QXF_SYM;                                                      /* DOT_SYMMETRIC_Q8_0 */
}

/* The record of a 32-value block against its Q8_0 / Q8_1 activation block. */
QX_FN void qx_rec32(int type, const uint8_t *blk, const void *vy, qx_rec *r) {
    const bool off = type == QR_TYPE_Q4_1 || type == QR_TYPE_Q5_1;
    const int8_t *yq = off ? ((const qr_block_q8_1 *)vy)->qs : ((const qr_block_q8_0 *)vy)->qs;
    qx_lanes32(type, blk, yq, r->lanes);
    r->sl = 0;
    for (int l = 0; l < 8; l++) r->sl += r->lanes[l];
    r->sm = 0;
    if (off) {
        const uint16_t *hd = (const uint16_t *)blk; /* d, m */
        r->wd = qx_h2f(hd[0]), r->wm = qx_h2f(hd[1]);
        r->yd = qx_h2f(((const qr_block_q8_1 *)vy)->d), r->ys = qx_h2f(((const qr_block_q8_1 *)vy)->s);
    } else {
        r->wd = qx_scale32(type, blk), r->wm = 0.0f;
        r->yd = qx_h2f(((const qr_block_q8_0 *)vy)->d), r->ys = 0.0f;
    }
}

/* The float state of one lane (a, b) and the scalar chains (e0, e1; lane 0 runs them). */
struct qx_fold {
    float a, b, e0, e1;
};
QX_FN void qx_fold_init(qx_fold *f) { f->a = f->b = f->e0 = f->e1 = 0.0f; }

/* Lane l's chains take block i (of nb) of the record. */
QX_FN void qx_fold_lane(int kind, int type, int64_t i, int64_t nb, const qx_rec *r, int l, qx_fold *f) {
    switch (kind) {
    case QXF_SYM:
    case QXF_OFFSET: f->a = fmaf(r->wd * r->yd, (float)r->lanes[l], f->a); return;
    case QXF_PAIRED:
        if (i >= nb - (nb & 1)) return; /* the odd block at the end: the scalar tail */
        if (i & 1) f->b = fmaf(r->wd * r->yd, (float)r->lanes[l], f->b);
        else f->a = fmaf(r->wd * r->yd, (float)r->lanes[l], f->a);
        return;
    case QXF_KVEC: {
        const float d = r->yd * r->wd, dmin = -r->yd * r->wm;
        if (type == QR_TYPE_Q2_K) f->a = fmaf(dmin, (float)r->mins[l], f->a);
        if (type == QR_TYPE_Q4_K && l < 4) f->b = fmaf(dmin, (float)r->mins[l], f->b);
        f->a = fmaf(d, (float)r->lanes[l], f->a);
        return;
    }
    default: return;
    }
}

/* The scalar chains take block i. */
QX_FN void qx_fold_scalar(int kind, int type, const qx_rec *r, qx_fold *f) {
    switch (kind) {
    case QXF_OFFSET: f->e0 = fmaf(r->wm, r->ys, f->e0); return;
    case QXF_REPACK: f->e0 = fmaf((float)r->sl, r->wd * r->yd, f->e0); return;
    case QXF_KTILED: f->e0 = qx_tiled_step(f->e0, r->wd, r->wm, r->sl, r->sm, r->yd); return;
    case QXF_KGEMV:
        f->e0 = fmaf((float)r->sl, r->wd * r->yd, f->e0);
        f->e1 = fmaf((float)r->sm, r->wm * r->yd, f->e1);
        return;
    case QXF_KGEMM: {
        const float d = r->wd * r->yd, dmin = r->wm * r->yd;
        for (int c = 0; c < 4; c++) {
            f->e0 = fmaf((float)r->pairs[c], d, f->e0);
            f->e1 = fmaf((float)r->mins[c], dmin, f->e1);
        }
        return;
    }
    case QXF_KVEC:
        if (type == QR_TYPE_Q5_K) f->e0 = fmaf((float)r->sm, -r->yd * r->wm, f->e0); /* summs */
        return;
    default: return;
    }
}

/* The result from the 8 lanes' states (f[l]; the scalar chains in f[0]); last = the record of block
 * nb - 1 (the paired order's tail). */
QX_FN float qx_fold_final(int kind, int type, int64_t nb, const qx_fold *f, const qx_rec *last) {
    float a8[8];
    for (int l = 0; l < 8; l++) a8[l] = f[l].a;
    switch (kind) {
    case QXF_SYM: return qx_hsum8(a8);
    case QXF_OFFSET: return qx_hsum8(a8) + f[0].e0;
    case QXF_REPACK:
    case QXF_KTILED: return f[0].e0;
    case QXF_KGEMV:
    case QXF_KGEMM: return f[0].e0 - f[0].e1;
    case QXF_PAIRED: {
        float s8[8];
        for (int l = 0; l < 8; l++) s8[l] = f[l].a + f[l].b;
        float sumf = qx_hsum8(s8);
        if (nb & 1) sumf += (float)last->sl * (last->wd * last->yd);
        return sumf;
    }
    default: { /* QXF_KVEC */
        if (type == QR_TYPE_Q4_K) {
            const float m4[4] = {f[0].b, f[1].b, f[2].b, f[3].b};
            return qx_hsum8(a8) + qx_hsum4(m4);
        }
        if (type == QR_TYPE_Q5_K) return qx_hsum8(a8) + f[0].e0;
        return qx_hsum8(a8);
    }
    }
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

/* The record of a K-quant super-block against its Q8_K activation block. */
QX_FN void qx_reck(int type, const uint8_t *blk, const qr_block_q8_K *y, qx_rec *r) {
    for (int l = 0; l < 8; l++) r->mins[l] = 0;
    qx_ksums(type, blk, y, r->lanes, r->mins, r->pairs);
    r->sl = 0, r->sm = 0;
    for (int l = 0; l < 8; l++) r->sl += r->lanes[l];
    const int nm = type == QR_TYPE_Q2_K ? 8 : 4;
    if (type == QR_TYPE_Q2_K || type == QR_TYPE_Q4_K || type == QR_TYPE_Q5_K)
        for (int l = 0; l < nm; l++) r->sm += r->mins[l];
    /* the fp16 super-scales: Q2_K keeps d, dmin last; Q3_K / Q6_K d last; Q4_K / Q5_K d, dmin first */
    r->wm = 0.0f;
    if (type == QR_TYPE_Q2_K) r->wd = qx_h2f(((const qr_block_q2_K *)blk)->d), r->wm = qx_h2f(((const qr_block_q2_K *)blk)->dmin);
    else if (type == QR_TYPE_Q3_K) r->wd = qx_h2f(((const qr_block_q3_K *)blk)->d);
    else if (type == QR_TYPE_Q6_K) r->wd = qx_h2f(((const qr_block_q6_K *)blk)->d);
    else r->wd = qx_h2f(((const uint16_t *)blk)[0]), r->wm = qx_h2f(((const uint16_t *)blk)[1]);
    r->yd = y->d, r->ys = 0.0f;
}

QX_FN bool qx_is_kquant(int type) {
    return type == QR_TYPE_Q2_K || type == QR_TYPE_Q3_K || type == QR_TYPE_Q4_K || type == QR_TYPE_Q5_K ||
           type == QR_TYPE_Q6_K;
}

/* The record of weight block blk against activation block i of the row vy (the weight's vec_dot_type). */
QX_FN void qx_rec_of(int type, const uint8_t *blk, const void *vy, int64_t i, qx_rec *r) {
    if (qx_is_kquant(type)) qx_reck(type, blk, (const qr_block_q8_K *)vy + i, r);
    else if (type == QR_TYPE_Q4_1 || type == QR_TYPE_Q5_1) qx_rec32(type, blk, (const qr_block_q8_1 *)vy + i, r);
    else qx_rec32(type, blk, (const qr_block_q8_0 *)vy + i, r);
}

/* ---- records straight from the device's weight planes (exact.cu's fast path) ----
 *
 * The same integers as qx_rec_of, computed 4 values at a time: lane l of a 32-value group is exactly the
 * 4 bytes 4l..4l+3, so each lane is one 4-way byte dot product (dp4a) of the weight codes against the
 * activation codes. Weight blocks come from the planes of qr_cuda_plane_desc (codes 16-byte aligned);
 * check_exact compares these with qx_rec_of on random blocks. Types without a fast form return false. */
QX_FN int qx_dp4a(int a, int b, int c) {
#ifdef __CUDA_ARCH__
    return __dp4a(a, b, c);
#else
    for (int k = 0; k < 4; k++) c += (int)(int8_t)(a >> 8 * k) * (int)(int8_t)(b >> 8 * k);
    return c;
#endif
}

/* n 32-bit words from p (16-byte aligned, n a multiple of 4). */
QX_FN void qx_ld16(const uint8_t *p, uint32_t *w, int n) {
#ifdef __CUDA_ARCH__
    for (int i = 0; i < n; i += 4) {
        const uint4 v = *(const uint4 *)(p + 4 * i);
        w[i] = v.x, w[i + 1] = v.y, w[i + 2] = v.z, w[i + 3] = v.w;
    }
#else
    memcpy(w, p, (size_t)n * 4);
#endif
}
QX_FN uint32_t qx_ld32(const uint8_t *p) { return *(const uint32_t *)p; }
QX_FN uint16_t qx_ld16b(const uint8_t *p) { return *(const uint16_t *)p; }

/* Activation codes 4l..4l+3 of a Q8_0 block (2-byte aligned) / Q8_1 block as one word. */
QX_FN int qx_y8_0(const qr_block_q8_0 *y, int l) {
    const uint16_t *h = (const uint16_t *)y->qs;
    return (int)((uint32_t)h[2 * l] | (uint32_t)h[2 * l + 1] << 16);
}

/* The 5th bits of values 4l..4l+3 (bits 4l.. of qh) as 0x10 bytes. */
QX_FN uint32_t qx_hbits(uint32_t qh, int l) {
    const uint32_t hb = (qh >> (4 * l)) & 0xF;
    return ((hb & 1) | (hb & 2) << 7 | (hb & 4) << 14 | (hb & 8) << 21) << 4;
}

/* pl: the weight's planes, g: the block's index in them, vy: its activation block. */
QX_FN bool qx_rec_planes(int type, const uint8_t *const *pl, int64_t g, const void *vy, qx_rec *r) {
    const int ones = 0x01010101;
    switch (type) {
    case QR_TYPE_Q4_0:
    case QR_TYPE_Q4_1:
    case QR_TYPE_Q5_0:
    case QR_TYPE_Q5_1:
    case QR_TYPE_Q8_0: {
        const bool off = type == QR_TYPE_Q4_1 || type == QR_TYPE_Q5_1;
        const qr_block_q8_0 *y0 = (const qr_block_q8_0 *)vy;
        const qr_block_q8_1 *y1 = (const qr_block_q8_1 *)vy;
        uint32_t q[8], qh = 0;
        int bias = 0;
        if (type == QR_TYPE_Q8_0) qx_ld16(pl[0] + g * 32, q, 8);
        else qx_ld16(pl[0] + g * 16, q, 4);
        if (type == QR_TYPE_Q5_0 || type == QR_TYPE_Q5_1) qh = qx_ld32(pl[1] + g * 4);
        if (type == QR_TYPE_Q4_0) bias = 8;
        if (type == QR_TYPE_Q5_0) bias = 16;
        r->sl = 0, r->sm = 0;
        for (int l = 0; l < 8; l++) {
            const int yw = off ? ((const int *)y1->qs)[l] : qx_y8_0(y0, l);
            uint32_t code;
            if (type == QR_TYPE_Q8_0) code = q[l];
            else code = (l < 4 ? q[l] : q[l - 4] >> 4) & 0x0F0F0F0Fu;
            if (type == QR_TYPE_Q5_0 || type == QR_TYPE_Q5_1) code |= qx_hbits(qh, l);
            int v = qx_dp4a((int)code, yw, 0);
            if (bias) v -= bias * qx_dp4a(ones, yw, 0);
            r->lanes[l] = v;
            r->sl += v;
        }
        if (off) {
            const uint32_t dm = qx_ld32(pl[type == QR_TYPE_Q4_1 ? 1 : 2] + g * 4);
            r->wd = qx_h2f((uint16_t)dm), r->wm = qx_h2f((uint16_t)(dm >> 16));
            r->yd = qx_h2f(y1->d), r->ys = qx_h2f(y1->s);
        } else {
            r->wd = qx_h2f(qx_ld16b(pl[type == QR_TYPE_Q5_0 ? 2 : 1] + g * 2)), r->wm = 0.0f;
            r->yd = qx_h2f(y0->d), r->ys = 0.0f;
        }
        return true;
    }
    case QR_TYPE_Q4_K: {
        const qr_block_q8_K *y = (const qr_block_q8_K *)vy;
        const int *yq = (const int *)y->qs;
        uint32_t q[32], hd[4];
        qx_ld16(pl[0] + g * 128, q, 32);
        qx_ld16(pl[1] + g * 16, hd, 4); /* d, dmin, scales[12] */
        const uint8_t *sc8 = (const uint8_t *)&hd[1];
        int sc[8], mn[8];
        for (int j = 0; j < 8; j++) qx_k4_scale_min(sc8, j, &sc[j], &mn[j]);
        for (int l = 0; l < 8; l++) r->lanes[l] = 0;
        for (int c = 0; c < 4; c++) r->pairs[c] = 0;
        for (int c = 0; c < 8; c++)
            for (int l = 0; l < 8; l++) {
                const uint32_t code = (q[8 * (c / 2) + l] >> (4 * (c & 1))) & 0x0F0F0F0Fu;
                const int v = sc[c] * qx_dp4a((int)code, yq[8 * c + l], 0);
                r->lanes[l] += v;
                r->pairs[c / 2] += v;
            }
        r->sl = 0, r->sm = 0;
        for (int l = 0; l < 8; l++) r->sl += r->lanes[l];
        for (int c = 4; c < 8; c++) r->mins[c] = 0;
        for (int c = 0; c < 4; c++) {
            r->mins[c] = mn[2 * c] * (y->bsums[4 * c] + y->bsums[4 * c + 1]) +
                         mn[2 * c + 1] * (y->bsums[4 * c + 2] + y->bsums[4 * c + 3]);
            r->sm += r->mins[c];
        }
        r->wd = qx_h2f((uint16_t)hd[0]), r->wm = qx_h2f((uint16_t)(hd[0] >> 16));
        r->yd = y->d, r->ys = 0.0f;
        return true;
    }
    case QR_TYPE_Q6_K: {
        const qr_block_q8_K *y = (const qr_block_q8_K *)vy;
        const int *yq = (const int *)y->qs;
        uint32_t q[48], s4[4];
        qx_ld16(pl[0] + g * 192, q, 48); /* ql[128], qh[64] */
        qx_ld16(pl[1] + g * 16, s4, 4);
        const int8_t *sc = (const int8_t *)s4;
        for (int l = 0; l < 8; l++) r->lanes[l] = 0;
        for (int c = 0; c < 4; c++) r->pairs[c] = 0;
        for (int c = 0; c < 8; c++) {
            const int j = c / 4, k = c % 4;
            for (int l = 0; l < 8; l++) {
                const uint32_t lo = (q[16 * j + 8 * (k % 2) + l] >> (4 * (k / 2))) & 0x0F0F0F0Fu;
                const uint32_t hi = (q[32 + 8 * j + l] >> (2 * k)) & 0x03030303u;
                const int v = sc[2 * c + (l >= 4)] * qx_dp4a((int)(lo | hi << 4), yq[8 * c + l], 0);
                r->lanes[l] += v;
                r->pairs[c / 2] += v;
            }
        }
        for (int l = 0; l < 8; l++) {
            r->lanes[l] -= 32 * (sc[2 * l] * y->bsums[2 * l] + sc[2 * l + 1] * y->bsums[2 * l + 1]);
            r->mins[l] = 0;
        }
        r->sl = 0, r->sm = 0;
        for (int l = 0; l < 8; l++) r->sl += r->lanes[l];
        r->wd = qx_h2f(qx_ld16b(pl[2] + g * 2)), r->wm = 0.0f;
        r->yd = y->d, r->ys = 0.0f;
        return true;
    }
    default: return false;
    }
}

/* Bytes of one activation block of a quantized weight type (its vec_dot_type's block). */
QX_FN size_t qx_yblock_bytes(int type) {
    if (qx_is_kquant(type)) return sizeof(qr_block_q8_K);
    return type == QR_TYPE_Q4_1 || type == QR_TYPE_Q5_1 ? sizeof(qr_block_q8_1) : sizeof(qr_block_q8_0);
}

/* One weight row of a quantized type against its activation row y, in `order`, in one thread: the
 * records in block order, each lane's chain and the scalar chains as the parallel kernel runs them.
 * wb(i, buf) copies weight block i into buf. */
template <class WB>
QX_FN float qx_dotq(int type, int order, int64_t n, const WB &wb, const void *vy) {
    const int64_t nb = n / (qx_is_kquant(type) ? 256 : 32);
    const int kind = qx_fold_kind(type, order);
    alignas(8) uint8_t buf[QX_MAX_BLOCK];
    qx_fold f[8];
    for (int l = 0; l < 8; l++) qx_fold_init(&f[l]);
    qx_rec r;
    for (int64_t i = 0; i < nb; i++) {
        wb(i, buf);
        qx_rec_of(type, buf, vy, i, &r);
        for (int l = 0; l < 8; l++) qx_fold_lane(kind, type, i, nb, &r, l, &f[l]);
        qx_fold_scalar(kind, type, &r, &f[0]);
    }
    return qx_fold_final(kind, type, nb, f, &r);
}

/* ---- float weights (x the weight row, y the activation row in the weight's vec_dot_type) ---- */

QX_FN float qx_fval(int type, const void *p, int64_t i) {
    if (type == QR_TYPE_F32) return ((const float *)p)[i];
    if (type == QR_TYPE_F16) return qx_h2f(((const uint16_t *)p)[i]);
    return qx_bf2f(((const uint16_t *)p)[i]);
}

/* The float dot products as chains: VEC order 32 chains (chain c = 8 j + l of ggml's 4 x 8 lanes takes
 * the values i + c, i a multiple of 32; BF16's chains 0..7 then take the rest in steps of 8), SGEMM
 * order 8 chains (values i + c, i a multiple of 8). */
QX_FN int qx_dotf_chains(int order) { return order == QX_SGEMM ? 8 : 32; }

QX_FN float qx_dotf_chain(int type, int order, int64_t n, const void *x, const void *y, int c) {
    float a = 0.0f;
    if (order == QX_SGEMM) {
        for (int64_t i = 0; i + 8 <= n; i += 8) a = fmaf(qx_fval(type, x, i + c), qx_fval(type, y, i + c), a);
        return a;
    }
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) a = fmaf(qx_fval(type, x, i + c), qx_fval(type, y, i + c), a);
    if (type == QR_TYPE_BF16 && c < 8)
        for (; i + 8 <= n; i += 8) a = fmaf(qx_fval(type, x, i + c), qx_fval(type, y, i + c), a);
    return a;
}

/* The result from the chains ch[] (and the values no chain takes). */
QX_FN float qx_dotf_final(int type, int order, int64_t n, const void *x, const void *y, const float *ch) {
    if (order == QX_SGEMM) return qx_hsum8(ch);
    float a[4][8];
    for (int j = 0; j < 4; j++)
        for (int l = 0; l < 8; l++) a[j][l] = ch[8 * j + l];
    int64_t i = n & ~(int64_t)31;
    if (type == QR_TYPE_BF16) {
        i = n & ~(int64_t)7;
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

QX_FN float qx_dotf(int type, int order, int64_t n, const void *x, const void *y) {
    float ch[32];
    for (int c = 0; c < qx_dotf_chains(order); c++) ch[c] = qx_dotf_chain(type, order, n, x, y, c);
    return qx_dotf_final(type, order, n, x, y, ch);
}

/* One output of the exact matmul: weight row (blocks through wb, or the raw float row xf) against the
 * activation row y (the weight's vec_dot_type). */
template <class WB>
QX_FN float qx_dot(int type, int order, int64_t n, const WB &wb, const void *xf, const void *y) {
    switch (type) {
    case QR_TYPE_F32:
    case QR_TYPE_F16:
    case QR_TYPE_BF16: return qx_dotf(type, order, n, xf, y);
    default: return qx_dotq(type, order, n, wb, y);
    }
}

#endif /* QR_CUDA_EXACT_DEV_CUH */
