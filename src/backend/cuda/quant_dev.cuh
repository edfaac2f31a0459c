/* quant_dev.cuh — the quantized block formats as the CUDA kernels read them (after the plane repack
 * of dequant.cu), one traits struct per type:
 *
 *   CPB         chunks per block: a chunk is what one thread handles in one step of the mat-vec,
 *               16 bytes of codes (32 of Q8_0), with its scales.
 *   W           the chunk's weight data, loaded first (load), several chunks in flight per thread. W holds
 *               the bits as loaded (scales too: fp16 / e8m0 / int8 bits, converted in dot): a conversion in
 *               load made the warp wait there for that load before it issued the next chunk's wherever the
 *               compiler wrapped each chunk's guarded load in its own branch (the persistent expert gate/up
 *               and the pipelined down + combine: 4 round trips an item instead of 1; session 17).
 *   dot<NR>     adds the chunk's contribution to acc[t] for the NR activation rows, with the same
 *               integer sums and the same scale products as the CPU's scalar vec_dot.
 *   deq8        dequantizes 8 consecutive values (v0 a multiple of 8 inside the block) with the
 *               CPU's to_float float expressions, rounded the same way (explicit _rn intrinsics).
 *
 * Activation layout (cuda_xview): codes x.q[t * k + v], scales x.d per 32 (ACT = 0) or per 256
 * (ACT = 1) values, Q8_1 sums x.s per 32, sums of each 16 codes x.g.
 */
#ifndef QR_CUDA_QUANT_DEV_CUH
#define QR_CUDA_QUANT_DEV_CUH

#include "backend/cuda/cuda_dev.cuh"

#define M4 0x0F0F0F0Fu

/* Activation loads are plain (coherent) loads, never the read-only path (ld.global.nc): the
 * activations are written by the kernel just before, which under programmatic dependent launch is
 * still running when this kernel starts, and the compiler may move read-only loads above the
 * griddepcontrol.wait (measured: F32 decode, whose mat-vec reads the previous kernel's output
 * directly, went wrong that way). */

/* Sum of codes v .. v + 31 of activation row t (two 16-sums). */
static __device__ __forceinline__ int act_sum32(const cuda_xview &x, int t, int v) {
    return sum_i16x2(*(const uint32_t *)(x.g + (int64_t)t * (x.k / 16) + v / 16));
}
static __device__ __forceinline__ int act_sum16(const cuda_xview &x, int t, int v) {
    return (int)x.g[(int64_t)t * (x.k / 16) + v / 16];
}
static __device__ __forceinline__ int4 act_q16(const cuda_xview &x, int t, int v) {
    return *(const int4 *)(x.q + (int64_t)t * x.k + v);
}
static __device__ __forceinline__ float act_d32(const cuda_xview &x, int t, int b) {
    return x.d[(int64_t)t * (x.k / 32) + b];
}
static __device__ __forceinline__ float act_s32(const cuda_xview &x, int t, int b) {
    return x.s[(int64_t)t * (x.k / 32) + b];
}
static __device__ __forceinline__ float act_d256(const cuda_xview &x, int t, int b) {
    return x.d[(int64_t)t * (x.k / 256) + b];
}
/* dot of 4 code words with 16 activation codes */
static __device__ __forceinline__ int dot16(uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3, int4 a) {
    return dp4a(w3, a.w, dp4a(w2, a.z, dp4a(w1, a.y, dp4a(w0, a.x, 0))));
}

/* ---------------------------------------------------------------------------------------------- */
/* Q4_0: p0 = qs[16], p1 = d (fp16). */
struct TQ4_0 {
    static constexpr int CPB = 1, BS = 32, ACT = 0;
    struct W { uint4 q; uint32_t d; }; /* d: the fp16 bits (raw: see W in the header) */
    static __device__ __forceinline__ W load(const cuda_wview &w, int64_t g, int) {
        W r;
        r.q = ld_stream16(w.p0 + g * 16);
        r.d = ld_ro16b(w.p1 + g * 2);
        return r;
    }
    template <int NR> static __device__ __forceinline__ void dot(const W &c, const cuda_xview &x, int b, int, float *acc) {
        const float d = h2f((uint16_t)c.d);
#pragma unroll
        for (int t = 0; t < NR; t++) {
            const int4 a0 = act_q16(x, t, b * 32), a1 = act_q16(x, t, b * 32 + 16);
            int s = dot16(c.q.x & M4, c.q.y & M4, c.q.z & M4, c.q.w & M4, a0);
            s += dot16((c.q.x >> 4) & M4, (c.q.y >> 4) & M4, (c.q.z >> 4) & M4, (c.q.w >> 4) & M4, a1);
            s -= 8 * act_sum32(x, t, b * 32);
            acc[t] += (float)s * (d * act_d32(x, t, b));
        }
    }
    static __device__ __forceinline__ void deq8(const cuda_wview &w, int64_t g, int v0, float *o) {
        const float d = h2f(ld_ro16b(w.p1 + g * 2));
        const uint8_t *qs = w.p0 + g * 16 + (v0 & 15);
        const int sh = v0 >= 16 ? 4 : 0;
#pragma unroll
        for (int i = 0; i < 8; i++) o[i] = __fmul_rn((float)(((ld_ro8(qs + i) >> sh) & 0xF) - 8), d);
    }
};

/* Q4_1: p0 = qs[16], p1 = {d, m} (fp16). */
struct TQ4_1 {
    static constexpr int CPB = 1, BS = 32, ACT = 0;
    struct W { uint4 q; uint32_t dm; }; /* {d, m} fp16 bits */
    static __device__ __forceinline__ W load(const cuda_wview &w, int64_t g, int) {
        W r;
        r.q = ld_stream16(w.p0 + g * 16);
        r.dm = ld_ro32(w.p1 + g * 4);
        return r;
    }
    template <int NR> static __device__ __forceinline__ void dot(const W &c, const cuda_xview &x, int b, int, float *acc) {
        const float d = h2f((uint16_t)(c.dm & 0xFFFF)), m = h2f((uint16_t)(c.dm >> 16));
#pragma unroll
        for (int t = 0; t < NR; t++) {
            const int4 a0 = act_q16(x, t, b * 32), a1 = act_q16(x, t, b * 32 + 16);
            int s = dot16(c.q.x & M4, c.q.y & M4, c.q.z & M4, c.q.w & M4, a0);
            s += dot16((c.q.x >> 4) & M4, (c.q.y >> 4) & M4, (c.q.z >> 4) & M4, (c.q.w >> 4) & M4, a1);
            acc[t] += (d * act_d32(x, t, b)) * (float)s + m * act_s32(x, t, b);
        }
    }
    static __device__ __forceinline__ void deq8(const cuda_wview &w, int64_t g, int v0, float *o) {
        const uint32_t dm = ld_ro32(w.p1 + g * 4);
        const float d = h2f((uint16_t)(dm & 0xFFFF)), m = h2f((uint16_t)(dm >> 16));
        const uint8_t *qs = w.p0 + g * 16 + (v0 & 15);
        const int sh = v0 >= 16 ? 4 : 0;
#pragma unroll
        for (int i = 0; i < 8; i++) o[i] = __fadd_rn(__fmul_rn(d, (float)((ld_ro8(qs + i) >> sh) & 0xF)), m);
    }
};

/* 5-bit codes of word i (values 4i..4i+3 low nibbles, 16+4i.. high nibbles) of a Q5 block. */
static __device__ __forceinline__ uint32_t q5_lo(uint32_t q, uint32_t qh, int i) {
    return (q & M4) | spread4_bit4((qh >> (4 * i)) & 0xF);
}
static __device__ __forceinline__ uint32_t q5_hi(uint32_t q, uint32_t qh, int i) {
    return ((q >> 4) & M4) | spread4_bit4((qh >> (16 + 4 * i)) & 0xF);
}

/* Q5_0: p0 = qs[16], p1 = qh (u32), p2 = d (fp16). */
struct TQ5_0 {
    static constexpr int CPB = 1, BS = 32, ACT = 0;
    struct W { uint4 q; uint32_t qh, d; }; /* d: fp16 bits */
    static __device__ __forceinline__ W load(const cuda_wview &w, int64_t g, int) {
        W r;
        r.q = ld_stream16(w.p0 + g * 16);
        r.qh = ld_ro32(w.p1 + g * 4);
        r.d = ld_ro16b(w.p2 + g * 2);
        return r;
    }
    template <int NR> static __device__ __forceinline__ void dot(const W &c, const cuda_xview &x, int b, int, float *acc) {
        const float d = h2f((uint16_t)c.d);
        const uint32_t l0 = q5_lo(c.q.x, c.qh, 0), l1 = q5_lo(c.q.y, c.qh, 1), l2 = q5_lo(c.q.z, c.qh, 2),
                       l3 = q5_lo(c.q.w, c.qh, 3);
        const uint32_t h0 = q5_hi(c.q.x, c.qh, 0), h1 = q5_hi(c.q.y, c.qh, 1), h2 = q5_hi(c.q.z, c.qh, 2),
                       h3 = q5_hi(c.q.w, c.qh, 3);
#pragma unroll
        for (int t = 0; t < NR; t++) {
            const int4 a0 = act_q16(x, t, b * 32), a1 = act_q16(x, t, b * 32 + 16);
            int s = dot16(l0, l1, l2, l3, a0) + dot16(h0, h1, h2, h3, a1);
            s -= 16 * act_sum32(x, t, b * 32);
            acc[t] += (float)s * (d * act_d32(x, t, b));
        }
    }
    static __device__ __forceinline__ void deq8(const cuda_wview &w, int64_t g, int v0, float *o) {
        const float d = h2f(ld_ro16b(w.p2 + g * 2));
        const uint32_t qh = ld_ro32(w.p1 + g * 4);
        const uint8_t *qs = w.p0 + g * 16 + (v0 & 15);
        const int sh = v0 >= 16 ? 4 : 0;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const int q = ((ld_ro8(qs + i) >> sh) & 0xF) | (int)(((qh >> (v0 + i)) & 1) << 4);
            o[i] = __fmul_rn((float)(q - 16), d);
        }
    }
};

/* Q5_1: p0 = qs[16], p1 = qh (u32), p2 = {d, m} (fp16). */
struct TQ5_1 {
    static constexpr int CPB = 1, BS = 32, ACT = 0;
    struct W { uint4 q; uint32_t qh, dm; }; /* {d, m} fp16 bits */
    static __device__ __forceinline__ W load(const cuda_wview &w, int64_t g, int) {
        W r;
        r.q = ld_stream16(w.p0 + g * 16);
        r.qh = ld_ro32(w.p1 + g * 4);
        r.dm = ld_ro32(w.p2 + g * 4);
        return r;
    }
    template <int NR> static __device__ __forceinline__ void dot(const W &c, const cuda_xview &x, int b, int, float *acc) {
        const float d = h2f((uint16_t)(c.dm & 0xFFFF)), m = h2f((uint16_t)(c.dm >> 16));
        const uint32_t l0 = q5_lo(c.q.x, c.qh, 0), l1 = q5_lo(c.q.y, c.qh, 1), l2 = q5_lo(c.q.z, c.qh, 2),
                       l3 = q5_lo(c.q.w, c.qh, 3);
        const uint32_t h0 = q5_hi(c.q.x, c.qh, 0), h1 = q5_hi(c.q.y, c.qh, 1), h2 = q5_hi(c.q.z, c.qh, 2),
                       h3 = q5_hi(c.q.w, c.qh, 3);
#pragma unroll
        for (int t = 0; t < NR; t++) {
            const int4 a0 = act_q16(x, t, b * 32), a1 = act_q16(x, t, b * 32 + 16);
            const int s = dot16(l0, l1, l2, l3, a0) + dot16(h0, h1, h2, h3, a1);
            acc[t] += (d * act_d32(x, t, b)) * (float)s + m * act_s32(x, t, b);
        }
    }
    static __device__ __forceinline__ void deq8(const cuda_wview &w, int64_t g, int v0, float *o) {
        const uint32_t dm = ld_ro32(w.p2 + g * 4);
        const float d = h2f((uint16_t)(dm & 0xFFFF)), m = h2f((uint16_t)(dm >> 16));
        const uint32_t qh = ld_ro32(w.p1 + g * 4);
        const uint8_t *qs = w.p0 + g * 16 + (v0 & 15);
        const int sh = v0 >= 16 ? 4 : 0;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const int q = ((ld_ro8(qs + i) >> sh) & 0xF) | (int)(((qh >> (v0 + i)) & 1) << 4);
            o[i] = __fadd_rn(__fmul_rn(d, (float)q), m);
        }
    }
};

/* Q8_0: p0 = qs[32], p1 = d (fp16). One chunk is the whole block (two 16-byte loads). */
struct TQ8_0 {
    static constexpr int CPB = 1, BS = 32, ACT = 0;
    struct W { uint4 q0, q1; uint32_t d; }; /* d: fp16 bits */
    static __device__ __forceinline__ W load(const cuda_wview &w, int64_t g, int) {
        W r;
        r.q0 = ld_stream16(w.p0 + g * 32);
        r.q1 = ld_stream16(w.p0 + g * 32 + 16);
        r.d = ld_ro16b(w.p1 + g * 2);
        return r;
    }
    template <int NR> static __device__ __forceinline__ void dot(const W &c, const cuda_xview &x, int b, int, float *acc) {
        const float d = h2f((uint16_t)c.d);
#pragma unroll
        for (int t = 0; t < NR; t++) {
            const int4 a0 = act_q16(x, t, b * 32), a1 = act_q16(x, t, b * 32 + 16);
            const int s = dot16(c.q0.x, c.q0.y, c.q0.z, c.q0.w, a0) + dot16(c.q1.x, c.q1.y, c.q1.z, c.q1.w, a1);
            acc[t] += (float)s * (d * act_d32(x, t, b));
        }
    }
    static __device__ __forceinline__ void deq8(const cuda_wview &w, int64_t g, int v0, float *o) {
        const float d = h2f(ld_ro16b(w.p1 + g * 2));
        const int8_t *qs = (const int8_t *)(w.p0 + g * 32 + v0);
#pragma unroll
        for (int i = 0; i < 8; i++) o[i] = __fmul_rn((float)(int8_t)ld_ro8(qs + i), d);
    }
};

/* Table-indexed 4-bit formats (MXFP4, IQ4_NL): p0 = qs[16], p1 = scale (E8M0 byte or fp16). */
template <bool MX> struct TLut4 {
    static constexpr int CPB = 1, BS = 32, ACT = 0;
    static constexpr uint32_t T0 = MX ? QR_PK4(0, 1, 2, 3) : QR_PK4(-127, -104, -83, -65);
    static constexpr uint32_t T1 = MX ? QR_PK4(4, 6, 8, 12) : QR_PK4(-49, -35, -22, -10);
    static constexpr uint32_t T2 = MX ? QR_PK4(0, -1, -2, -3) : QR_PK4(1, 13, 25, 38);
    static constexpr uint32_t T3 = MX ? QR_PK4(-4, -6, -8, -12) : QR_PK4(53, 69, 89, 113);
    struct W { uint4 q; uint32_t d; }; /* d: the e8m0 byte (MX) or the fp16 bits */
    static __device__ __forceinline__ uint32_t scale_bits(const cuda_wview &w, int64_t g) {
        return MX ? (uint32_t)ld_ro8(w.p1 + g) : (uint32_t)ld_ro16b(w.p1 + g * 2);
    }
    static __device__ __forceinline__ float scale_of(uint32_t v) { return MX ? e8m0_half((uint8_t)v) : h2f((uint16_t)v); }
    static __device__ __forceinline__ float scale(const cuda_wview &w, int64_t g) { return scale_of(scale_bits(w, g)); }
    static __device__ __forceinline__ W load(const cuda_wview &w, int64_t g, int) {
        W r;
        r.q = ld_stream16(w.p0 + g * 16);
        r.d = scale_bits(w, g);
        return r;
    }
    static __device__ __forceinline__ uint32_t lu(uint32_t v) { return lut16(v, T0, T1, T2, T3); }
    template <int NR> static __device__ __forceinline__ void dot(const W &c, const cuda_xview &x, int b, int, float *acc) {
        const float d = scale_of(c.d);
        uint32_t l0, l1, l2, l3, h0, h1, h2, h3;
        lut16x8(c.q.x, T0, T1, T2, T3, &l0, &h0);
        lut16x8(c.q.y, T0, T1, T2, T3, &l1, &h1);
        lut16x8(c.q.z, T0, T1, T2, T3, &l2, &h2);
        lut16x8(c.q.w, T0, T1, T2, T3, &l3, &h3);
#pragma unroll
        for (int t = 0; t < NR; t++) {
            const int4 a0 = act_q16(x, t, b * 32), a1 = act_q16(x, t, b * 32 + 16);
            const int s = dot16(l0, l1, l2, l3, a0) + dot16(h0, h1, h2, h3, a1);
            acc[t] += (act_d32(x, t, b) * d) * (float)s;
        }
    }
    static __device__ __forceinline__ void deq8(const cuda_wview &w, int64_t g, int v0, float *o) {
        const float d = scale(w, g);
        const uint8_t *qs = w.p0 + g * 16 + (v0 & 15);
        const int sh = v0 >= 16 ? 4 : 0;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint32_t idx = (ld_ro8(qs + i) >> sh) & 0xF;
            const int kv = (int)(int8_t)((lu(idx) & 0xFF));
            o[i] = MX ? __fmul_rn((float)kv, d) : __fmul_rn(d, (float)kv);
        }
    }
};
typedef TLut4<true> TMXFP4;
typedef TLut4<false> TIQ4_NL;

/* ---------------------------------------------------------------------------------------------- */
/* Q2_K: p0 = qs[64] (4 chunks), p1 = scales[16], p2 = {d, dmin} (fp16).
 * Chunk i: qs bytes 16i..16i+15 (h = i / 2, l0 = 16 * (i & 1)); its 64 values are 128h + 32k + l0 + l
 * (k < 4, l < 16), sub-block 8h + 2k + (i & 1). */
struct TQ2_K {
    static constexpr int CPB = 4, BS = 256, ACT = 1;
    struct W { uint4 q; uint2 sc; uint32_t dm; }; /* {d, dmin} fp16 bits */
    static __device__ __forceinline__ W load(const cuda_wview &w, int64_t g, int i) {
        W r;
        r.q = ld_stream16(w.p0 + g * 64 + i * 16);
        r.sc = __ldg((const uint2 *)(w.p1 + g * 16 + 8 * (i >> 1)));
        r.dm = ld_ro32(w.p2 + g * 4);
        return r;
    }
    template <int NR> static __device__ __forceinline__ void dot(const W &c, const cuda_xview &x, int b, int i, float *acc) {
        const float d = h2f((uint16_t)(c.dm & 0xFFFF)), dmin = h2f((uint16_t)(c.dm >> 16));
        const int h = i >> 1, j1 = i & 1;
        uint32_t sc[4];
#pragma unroll
        for (int k = 0; k < 4; k++) sc[k] = ((k < 2 ? c.sc.x : c.sc.y) >> (8 * ((2 * k + j1) & 3))) & 0xFF;
#pragma unroll
        for (int t = 0; t < NR; t++) {
            int isum = 0, summs = 0;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const int v = b * 256 + 128 * h + 32 * k + 16 * j1;
                const int4 a = act_q16(x, t, v);
                const int s = dot16((c.q.x >> (2 * k)) & 0x03030303u, (c.q.y >> (2 * k)) & 0x03030303u,
                                    (c.q.z >> (2 * k)) & 0x03030303u, (c.q.w >> (2 * k)) & 0x03030303u, a);
                isum += (int)(sc[k] & 0xF) * s;
                summs += (int)(sc[k] >> 4) * act_sum16(x, t, v);
            }
            const float dy = act_d256(x, t, b);
            acc[t] += (dy * d) * (float)isum - (dy * dmin) * (float)summs;
        }
    }
    static __device__ __forceinline__ void deq8(const cuda_wview &w, int64_t g, int v0, float *o) {
        const uint32_t dm = ld_ro32(w.p2 + g * 4);
        const float d = h2f((uint16_t)(dm & 0xFFFF)), dmin = h2f((uint16_t)(dm >> 16));
        const int h = v0 / 128, k = (v0 % 128) / 32, l0 = v0 % 32;
        const uint8_t sc = ld_ro8(w.p1 + g * 16 + v0 / 16);
        const float dl = __fmul_rn(d, (float)(sc & 0xF)), ml = __fmul_rn(dmin, (float)(sc >> 4));
        const uint8_t *q = w.p0 + g * 64 + 32 * h + l0;
#pragma unroll
        for (int l = 0; l < 8; l++) o[l] = __fsub_rn(__fmul_rn(dl, (float)((ld_ro8(q + l) >> (2 * k)) & 3)), ml);
    }
};

/* Q3_K: p0 = hmask[32] | qs[64] (4 chunks over qs), p1 = scales[12], p2 = d (fp16). */
struct TQ3_K {
    static constexpr int CPB = 4, BS = 256, ACT = 1;
    struct W { uint4 q, hm; uint32_t s0, s1, s2, d; }; /* d: fp16 bits */
    static __device__ __forceinline__ W load(const cuda_wview &w, int64_t g, int i) {
        W r;
        const uint8_t *m = w.p0 + g * 96;
        r.q = ld_stream16(m + 32 + 16 * i);
        r.hm = ld_stream16(m + 16 * (i & 1));
        const uint8_t *s = w.p1 + g * 12;
        r.s0 = ld_ro32(s);
        r.s1 = ld_ro32(s + 4);
        r.s2 = ld_ro32(s + 8);
        r.d = ld_ro16b(w.p2 + g * 2);
        return r;
    }
    /* The signed 6-bit scale of sub-block j (= 8h + 2k + j1). */
    static __device__ __forceinline__ int scale_of(const W &c, int h, int k, int j1) {
        const int jb = 2 * k + j1; /* byte of the low nibble, 0..7 */
        const uint32_t wlo = jb < 4 ? c.s0 : c.s1;
        const int lo = (int)((wlo >> (8 * (jb & 3) + 4 * h)) & 0xF);
        const int hi = (int)((c.s2 >> (8 * (jb & 3) + 2 * (2 * h + (k >> 1)))) & 3);
        return (lo | (hi << 4)) - 32;
    }
    template <int NR> static __device__ __forceinline__ void dot(const W &c, const cuda_xview &x, int b, int i, float *acc) {
        const int h = i >> 1, j1 = i & 1;
        int sc[4];
        uint32_t v[4][4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            sc[k] = scale_of(c, h, k, j1);
            const int hb = 4 * h + k;
            v[k][0] = ((c.q.x >> (2 * k)) & 0x03030303u) | (((c.hm.x >> hb) & 0x01010101u) << 2);
            v[k][1] = ((c.q.y >> (2 * k)) & 0x03030303u) | (((c.hm.y >> hb) & 0x01010101u) << 2);
            v[k][2] = ((c.q.z >> (2 * k)) & 0x03030303u) | (((c.hm.z >> hb) & 0x01010101u) << 2);
            v[k][3] = ((c.q.w >> (2 * k)) & 0x03030303u) | (((c.hm.w >> hb) & 0x01010101u) << 2);
        }
#pragma unroll
        for (int t = 0; t < NR; t++) {
            int isum = 0;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const int vv = b * 256 + 128 * h + 32 * k + 16 * j1;
                const int s = dot16(v[k][0], v[k][1], v[k][2], v[k][3], act_q16(x, t, vv)) - 4 * act_sum16(x, t, vv);
                isum += sc[k] * s;
            }
            acc[t] += (h2f((uint16_t)c.d) * act_d256(x, t, b)) * (float)isum;
        }
    }
    static __device__ __forceinline__ void deq8(const cuda_wview &w, int64_t g, int v0, float *o) {
        const uint8_t *m = w.p0 + g * 96, *s = w.p1 + g * 12;
        const float d = h2f(ld_ro16b(w.p2 + g * 2));
        const int j = v0 / 16;
        const int lo = j < 8 ? ld_ro8(s + j) & 0xF : ld_ro8(s + j - 8) >> 4;
        const int hi = (ld_ro8(s + 8 + j % 4) >> (2 * (j / 4))) & 3;
        const float dl = __fmul_rn(d, (float)((lo | (hi << 4)) - 32));
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const int v = v0 + i, h = v / 128, k = (v % 128) / 32, l = v % 32;
            const int low = (ld_ro8(m + 32 + 32 * h + l) >> (2 * k)) & 3;
            const int high = (ld_ro8(m + l) >> (v / 32)) & 1;
            o[i] = __fmul_rn(dl, (float)(low - (high ? 0 : 4)));
        }
    }
};

/* The 6-bit scale and min of sub-block j (< 8) of a Q4_K/Q5_K block from its scales bytes held in
 * three words (bytes 0..3, 4..7, 8..11). */
static __device__ __forceinline__ uint32_t kbyte(uint32_t s0, uint32_t s1, uint32_t s2, int idx) {
    const uint32_t w = idx < 4 ? s0 : (idx < 8 ? s1 : s2);
    return (w >> (8 * (idx & 3))) & 0xFF;
}
static __device__ __forceinline__ void kscale_min(uint32_t s0, uint32_t s1, uint32_t s2, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = (int)(kbyte(s0, s1, s2, j) & 63);
        *m = (int)(kbyte(s0, s1, s2, j + 4) & 63);
    } else {
        *sc = (int)((kbyte(s0, s1, s2, j + 4) & 0xF) | ((kbyte(s0, s1, s2, j - 4) >> 6) << 4));
        *m = (int)((kbyte(s0, s1, s2, j + 4) >> 4) | ((kbyte(s0, s1, s2, j) >> 6) << 4));
    }
}

/* The scales and mins of sub-blocks 2 cc and 2 cc + 1 (cc < 4) together, without a branch on cc (kscale_min's
 * j < 4 test splits a warp whose lanes hold different chunks of a block): byte 0 of *sc / *m for sub-block 2 cc,
 * byte 1 for 2 cc + 1. For cc < 2 the six bits are bytes 2 cc (+1) of s0 (scales) and s1 (mins); for cc >= 2 the low
 * four come from byte 2 cc (+1) of s2 (scales low, mins high nibble) and the top two from bits 6-7 of the same bytes
 * of s0 / s1 as for cc - 2. */
static __device__ __forceinline__ void kscale_pair(uint32_t s0, uint32_t s1, uint32_t s2, int cc, uint32_t *sc,
                                                   uint32_t *m) {
    const int sh = (cc & 1) * 16;
    const uint32_t a = s0 >> sh, b = s1 >> sh, c = s2 >> sh;
    const uint32_t hs = (c & 0x0F0Fu) | ((a >> 2) & 0x3030u), hm = ((c >> 4) & 0x0F0Fu) | ((b >> 2) & 0x3030u);
    *sc = cc >= 2 ? hs : (a & 0x3F3Fu);
    *m = cc >= 2 ? hm : (b & 0x3F3Fu);
}

/* Q4_K: p0 = qs[128] (8 chunks), p1 = {d, dmin, scales[12]} (16 bytes).
 * Chunk i: qs bytes 16i.. (c = i / 2, l0 = 16 (i & 1)): low nibbles are values 64c + l0 + l (sub-block
 * 2c), high nibbles 64c + 32 + l0 + l (sub-block 2c + 1). */
template <bool Q5> struct TQ45_K {
    static constexpr int CPB = 8, BS = 256, ACT = 1;
    static constexpr int MAIN = Q5 ? 160 : 128; /* Q5_K: qh[32] | qs[128] */
    struct W { uint4 q, qh, meta; };
    static __device__ __forceinline__ W load(const cuda_wview &w, int64_t g, int i) {
        W r;
        const uint8_t *m = w.p0 + g * MAIN;
        r.q = ld_stream16(m + (Q5 ? 32 : 0) + 16 * i);
        if (Q5) r.qh = ld_stream16(m + 16 * (i & 1));
        else r.qh = make_uint4(0, 0, 0, 0);
        r.meta = __ldg((const uint4 *)(w.p1 + g * 16));
        return r;
    }
    template <int NR> static __device__ __forceinline__ void dot(const W &c, const cuda_xview &x, int b, int i, float *acc) {
        const int cc = i >> 1, j1 = i & 1;
        uint32_t scp, mp;
        kscale_pair(c.meta.y, c.meta.z, c.meta.w, cc, &scp, &mp);
        const int sc1 = (int)(scp & 0xFF), sc2 = (int)(scp >> 8 & 0xFF), m1 = (int)(mp & 0xFF), m2 = (int)(mp >> 8 & 0xFF);
        uint32_t lo[4] = {c.q.x & M4, c.q.y & M4, c.q.z & M4, c.q.w & M4};
        uint32_t hi[4] = {(c.q.x >> 4) & M4, (c.q.y >> 4) & M4, (c.q.z >> 4) & M4, (c.q.w >> 4) & M4};
        if (Q5) {
            const uint32_t qh[4] = {c.qh.x, c.qh.y, c.qh.z, c.qh.w};
#pragma unroll
            for (int m = 0; m < 4; m++) {
                lo[m] |= ((qh[m] >> (2 * cc)) & 0x01010101u) << 4;
                hi[m] |= ((qh[m] >> (2 * cc + 1)) & 0x01010101u) << 4;
            }
        }
        const float d = h2f((uint16_t)(c.meta.x & 0xFFFF)), dmin = h2f((uint16_t)(c.meta.x >> 16));
#pragma unroll
        for (int t = 0; t < NR; t++) {
            const int v1 = b * 256 + 64 * cc + 16 * j1, v2 = v1 + 32;
            const int s1 = dot16(lo[0], lo[1], lo[2], lo[3], act_q16(x, t, v1));
            const int s2 = dot16(hi[0], hi[1], hi[2], hi[3], act_q16(x, t, v2));
            const int isum = sc1 * s1 + sc2 * s2;
            const int summs = m1 * act_sum16(x, t, v1) + m2 * act_sum16(x, t, v2);
            const float dy = act_d256(x, t, b);
            acc[t] += (dy * d) * (float)isum - (dy * dmin) * (float)summs;
        }
    }
    static __device__ __forceinline__ void deq8(const cuda_wview &w, int64_t g, int v0, float *o) {
        const uint4 meta = __ldg((const uint4 *)(w.p1 + g * 16));
        const float d = h2f((uint16_t)(meta.x & 0xFFFF)), dmin = h2f((uint16_t)(meta.x >> 16));
        const int cc = v0 / 64, hi = (v0 % 64) >= 32, l0 = v0 % 32;
        int sc, m;
        kscale_min(meta.y, meta.z, meta.w, 2 * cc + hi, &sc, &m);
        const float d1 = __fmul_rn(d, (float)sc), m1 = __fmul_rn(dmin, (float)m);
        const uint8_t *base = w.p0 + g * MAIN;
        const uint8_t *qs = base + (Q5 ? 32 : 0) + 32 * cc + l0;
#pragma unroll
        for (int l = 0; l < 8; l++) {
            int q = hi ? ld_ro8(qs + l) >> 4 : ld_ro8(qs + l) & 0xF;
            if (Q5 && (ld_ro8(base + l0 + l) & (1u << (2 * cc + hi)))) q += 16;
            o[l] = __fsub_rn(__fmul_rn(d1, (float)q), m1);
        }
    }
};
typedef TQ45_K<false> TQ4_K;
typedef TQ45_K<true> TQ5_K;

/* Q6_K: p0 = ql[128] | qh[64] (8 chunks over ql), p1 = scales[16] (int8), p2 = d (fp16).
 * Chunk i: h = i / 4, jj = i % 4, ql bytes 64h + 16jj; low nibbles have k = jj / 2, high k + 2;
 * l0 = 16 (jj & 1); qh bytes 32h + l0..; values 128h + 32k + l0 + l, sub-block 8h + 2k + (jj & 1). */
struct TQ6_K {
    static constexpr int CPB = 8, BS = 256, ACT = 1;
    struct W { uint4 ql, qh; uint32_t sc_lo, sc_hi, d; }; /* the scale bytes and the fp16 bits, raw */
    static __device__ __forceinline__ W load(const cuda_wview &w, int64_t g, int i) {
        W r;
        const int h = i >> 2, jj = i & 3, k = jj >> 1, j1 = jj & 1;
        const uint8_t *m = w.p0 + g * 192;
        r.ql = ld_stream16(m + 16 * i);
        r.qh = ld_stream16(m + 128 + 32 * h + 16 * j1);
        const int8_t *sc = (const int8_t *)(w.p1 + g * 16);
        r.sc_lo = ld_ro8(sc + 8 * h + 2 * k + j1);
        r.sc_hi = ld_ro8(sc + 8 * h + 2 * (k + 2) + j1);
        r.d = ld_ro16b(w.p2 + g * 2);
        return r;
    }
    template <int NR> static __device__ __forceinline__ void dot(const W &c, const cuda_xview &x, int b, int i, float *acc) {
        const int h = i >> 2, jj = i & 3, k = jj >> 1, j1 = jj & 1;
        const uint32_t ql[4] = {c.ql.x, c.ql.y, c.ql.z, c.ql.w}, qh[4] = {c.qh.x, c.qh.y, c.qh.z, c.qh.w};
        uint32_t lo[4], hi[4];
#pragma unroll
        for (int m = 0; m < 4; m++) {
            lo[m] = (ql[m] & M4) | (((qh[m] >> (2 * k)) & 0x03030303u) << 4);
            hi[m] = ((ql[m] >> 4) & M4) | (((qh[m] >> (2 * k + 4)) & 0x03030303u) << 4);
        }
#pragma unroll
        for (int t = 0; t < NR; t++) {
            const int v1 = b * 256 + 128 * h + 32 * k + 16 * j1, v2 = v1 + 64;
            const int s1 = dot16(lo[0], lo[1], lo[2], lo[3], act_q16(x, t, v1)) - 32 * act_sum16(x, t, v1);
            const int s2 = dot16(hi[0], hi[1], hi[2], hi[3], act_q16(x, t, v2)) - 32 * act_sum16(x, t, v2);
            acc[t] += (h2f((uint16_t)c.d) * act_d256(x, t, b)) * (float)((int)(int8_t)c.sc_lo * s1 + (int)(int8_t)c.sc_hi * s2);
        }
    }
    static __device__ __forceinline__ void deq8(const cuda_wview &w, int64_t g, int v0, float *o) {
        const uint8_t *m = w.p0 + g * 192;
        const float d = h2f(ld_ro16b(w.p2 + g * 2));
        const float dl = __fmul_rn(d, (float)(int8_t)ld_ro8(w.p1 + g * 16 + v0 / 16));
        const int h = v0 / 128, k = (v0 % 128) / 32, l0 = v0 % 32;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const int l = l0 + i;
            const uint8_t lb = ld_ro8(m + 64 * h + l + 32 * (k & 1));
            const int low = k < 2 ? lb & 0xF : lb >> 4;
            const int high = (ld_ro8(m + 128 + 32 * h + l) >> (2 * k)) & 3;
            o[i] = __fmul_rn(dl, (float)((low | (high << 4)) - 32));
        }
    }
};

/* ---------------------------------------------------------------------------------------------- */
/* Float weights: a "block" is 16 bytes of a row (8 halves or 4 floats); p0 = the rows as stored. The
 * activations are f16 / bf16 (rounded as the CPU's vec_dot_type conversion) or f32 in x.h. */
template <int KIND> struct TFloat { /* KIND: 0 = F16, 1 = BF16, 2 = F32 */
    static constexpr int CPB = 1, BS = KIND == 2 ? 4 : 8, ACT = 2 + KIND;
    struct W { uint4 q; };
    static __device__ __forceinline__ W load(const cuda_wview &w, int64_t g, int) {
        W r;
        r.q = ld_stream16(w.p0 + g * 16);
        return r;
    }
    static __device__ __forceinline__ float2 pair(uint32_t v) {
        if (KIND == 0) return __half22float2(*reinterpret_cast<const __half2 *>(&v));
        return make_float2(__uint_as_float(v << 16), __uint_as_float(v & 0xFFFF0000u));
    }
    template <int NR> static __device__ __forceinline__ void dot(const W &c, const cuda_xview &x, int b, int, float *acc) {
#pragma unroll
        for (int t = 0; t < NR; t++) {
            const uint4 a = *(const uint4 *)((const uint8_t *)x.h + ((int64_t)t * x.k + (int64_t)b * BS) * (KIND == 2 ? 4 : 2));
            float s = acc[t];
            if (KIND == 2) {
                s = fmaf(__uint_as_float(c.q.x), __uint_as_float(a.x), s);
                s = fmaf(__uint_as_float(c.q.y), __uint_as_float(a.y), s);
                s = fmaf(__uint_as_float(c.q.z), __uint_as_float(a.z), s);
                s = fmaf(__uint_as_float(c.q.w), __uint_as_float(a.w), s);
            } else {
                const uint32_t wq[4] = {c.q.x, c.q.y, c.q.z, c.q.w}, aq[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
                for (int m = 0; m < 4; m++) {
                    const float2 wf = pair(wq[m]), af = pair(aq[m]);
                    s = fmaf(wf.x, af.x, s);
                    s = fmaf(wf.y, af.y, s);
                }
            }
            acc[t] = s;
        }
    }
};
typedef TFloat<0> TF16;
typedef TFloat<1> TBF16;
typedef TFloat<2> TF32;

#endif /* QR_CUDA_QUANT_DEV_CUH */
