/* act_quant.cuh — the activation quantizers' block rules as device functions, shared by the
 * stand-alone quantizer kernels (matmul_q.cu) and the fused add + rmsnorm + quantize kernel (norm.cu).
 * Both reproduce the CPU's quantizers value for value (see matmul_q.cu's header comment). */
#ifndef QR_CUDA_ACT_QUANT_CUH
#define QR_CUDA_ACT_QUANT_CUH

#include "backend/cuda/cuda_dev.cuh"

/* Block blk (32 values at x + 32 blk) by one whole warp (lane = 0..31): Q8_0 codes, d, s = d * sum(q)
 * and the two 16-value code sums. */
/* The Q8_0 code of this lane's value v in a warp of 32 (the rule: d = amax / 127, code =
 * round-half-even(v * (127 / amax))); *d gets the unrounded scale. */
static __device__ __forceinline__ int q8_32_code(float v, float *d) {
    const float amax = warp_max(fabsf(v));
    *d = __fdiv_rn(amax, 127.0f);
    const float id = amax != 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
    return __float2int_rn(__fmul_rn(v, id));
}

/* The Q8_K codes of this lane's 8 values v (lane l of a warp holds values 8l .. 8l + 7 of the 256):
 * the value of largest magnitude (the first on ties, as the CPU's strict > scan) gives
 * iscale = -127 / max, code = min(nearest(v * iscale), 127); returns d = 1 / iscale (0 for a zero block). */
static __device__ __forceinline__ float q8_K_codes(const float *v, int lane, int *qs) {
    float amax = 0.0f, mx = 0.0f;
    int idx = 1 << 30;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const float ax = fabsf(v[j]);
        if (ax > amax) {
            amax = ax;
            mx = v[j];
            idx = lane * 8 + j;
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float oa = __shfl_xor_sync(0xffffffffu, amax, o), om = __shfl_xor_sync(0xffffffffu, mx, o);
        const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
        if (oa > amax || (oa == amax && oi < idx)) {
            amax = oa;
            mx = om;
            idx = oi;
        }
    }
    if (amax == 0.0f) {
#pragma unroll
        for (int j = 0; j < 8; j++) qs[j] = 0;
        return 0.0f;
    }
    const float iscale = __fdiv_rn(-127.0f, mx);
#pragma unroll
    for (int j = 0; j < 8; j++) qs[j] = min(__float2int_rn(__fmul_rn(iscale, v[j])), 127);
    return __fdiv_rn(1.0f, iscale);
}

/* Q8_0 block blk from the value v this lane holds (lane = its index in the block, whole warp). */
static __device__ __forceinline__ void act_quant_val32(float v, int64_t blk, int lane, int8_t *q, float *d_out,
                                                       float *s_out, int16_t *g_out) {
    float d;
    const int qi = q8_32_code(v, &d);
    q[blk * 32 + lane] = (int8_t)qi;
    int s16 = qi;
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) s16 += __shfl_xor_sync(0xffffffffu, s16, o);
    const int s32 = s16 + __shfl_xor_sync(0xffffffffu, s16, 16);
    if ((lane & 15) == 0) g_out[blk * 2 + (lane >> 4)] = (int16_t)s16;
    if (lane == 0) {
        d_out[blk] = round_f16(d);
        s_out[blk] = round_f16(__fmul_rn((float)s32, d));
    }
}

static __device__ __forceinline__ void act_quant_block32(const float *x, int64_t blk, int lane, int8_t *q, float *d_out,
                                                         float *s_out, int16_t *g_out) {
    act_quant_val32(x[blk * 32 + lane], blk, lane, q, d_out, s_out, g_out);
}

/* Q8_0 block blk held by 4 consecutive lanes (aligned groups of 4, whole warp calling), 8 values each:
 * sub = lane & 3 holds values 8 sub .. 8 sub + 7. Same codes, scales and sums as act_quant_val32. Groups
 * with active false take part in the shuffles only. */
static __device__ __forceinline__ void act_quant_oct32(const float *v, int64_t blk, int sub, bool active, int8_t *q,
                                                       float *d_out, float *s_out, int16_t *g_out) {
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; j++) amax = fmaxf(amax, fabsf(v[j]));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
    const float d = __fdiv_rn(amax, 127.0f);
    const float id = amax != 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
    uint32_t w0 = 0, w1 = 0;
    int s = 0;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const int qi = __float2int_rn(__fmul_rn(v[j], id));
        s += qi;
        if (j < 4) w0 |= (uint32_t)(uint8_t)qi << (8 * j);
        else w1 |= (uint32_t)(uint8_t)qi << (8 * (j - 4));
    }
    const int s16 = s + __shfl_xor_sync(0xffffffffu, s, 1);
    const int s32 = s16 + __shfl_xor_sync(0xffffffffu, s16, 2);
    if (!active) return;
    *(uint2 *)(q + blk * 32 + sub * 8) = make_uint2(w0, w1);
    if ((sub & 1) == 0) g_out[blk * 2 + (sub >> 1)] = (int16_t)s16;
    if (sub == 0) {
        d_out[blk] = round_f16(d);
        s_out[blk] = round_f16(__fmul_rn((float)s32, d));
    }
}

/* Q8_K block blk from the 8 values v this lane holds (values 8 lane .. 8 lane + 7; whole warp): the
 * Q8_K reference rule, d and the sixteen 16-value code sums. */
static __device__ __forceinline__ void act_quant_vals256(const float *v, int64_t blk, int lane, int8_t *q, float *d_out,
                                                         int16_t *g_out) {
    int qs[8];
    const float d = q8_K_codes(v, lane, qs);
    uint32_t w0 = 0, w1 = 0;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        w0 |= (uint32_t)(uint8_t)qs[j] << (8 * j);
        w1 |= (uint32_t)(uint8_t)qs[j + 4] << (8 * j);
    }
    *(uint2 *)(q + blk * 256 + lane * 8) = make_uint2(w0, w1);
    int s = 0;
#pragma unroll
    for (int j = 0; j < 8; j++) s += qs[j];
    s += __shfl_xor_sync(0xffffffffu, s, 1);
    if ((lane & 1) == 0) g_out[blk * 16 + (lane >> 1)] = (int16_t)s;
    if (lane == 0) d_out[blk] = d;
}

/* Block blk (256 values at x + 256 blk) by one whole warp; lane l holds values 8l .. 8l + 7. */
static __device__ __forceinline__ void act_quant_block256(const float *x, int64_t blk, int lane, int8_t *q,
                                                          float *d_out, int16_t *g_out) {
    const float4 *xp = (const float4 *)(x + blk * 256 + lane * 8);
    const float4 p0 = xp[0], p1 = xp[1];
    const float v[8] = {p0.x, p0.y, p0.z, p0.w, p1.x, p1.y, p1.z, p1.w};
    act_quant_vals256(v, blk, lane, q, d_out, g_out);
}

/* act_q8_as_f16 (kind 1 / 2) of Q8_K block blk from the 8 values v this lane holds (values 8 lane .. 8 lane + 7;
 * whole warp): the fused norms' form (norm.cu, QK 2). */
template <int KIND>
static __device__ __forceinline__ void act_q8_vals_as_f16(const float *v, int64_t blk, int lane, __half *out) {
    int qs[8];
    const float d = q8_K_codes(v, lane, qs);
    if (KIND == 2) { /* permuted within 16 values: value 4t + r goes to 2t + r (r < 2) or 8 + 2t + r - 2 */
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const int v16 = (lane & 1) * 8 + j, p = (v16 & 3) < 2 ? 2 * (v16 >> 2) + (v16 & 3) : 6 + 2 * (v16 >> 2) + (v16 & 3);
            out[blk * 256 + (lane >> 1) * 16 + p] = __float2half_rn(__fmul_rn((float)qs[j], d));
        }
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++) out[blk * 256 + lane * 8 + j] = __float2half_rn(__fmul_rn((float)qs[j], d));
    }
}

/* Block blk as the CPU sees it after quantizing (codes times scale, the Q8_0 scale fp16-rounded
 * as stored), rounded to f16: out[32 blk + lane] (kind 0) or out[256 blk + 8 lane + j] (kind 1; kind 2: the same values in
 * matmul_dq.cu's wgmma order, permuted within every 16). */
template <int KIND>
static __device__ __forceinline__ void act_q8_as_f16(const float *x, int64_t blk, int lane, __half *out) {
    if (KIND == 0) {
        float d;
        const int qi = q8_32_code(x[blk * 32 + lane], &d);
        out[blk * 32 + lane] = __float2half_rn(__fmul_rn((float)qi, round_f16(d)));
        return;
    }
    const float4 *xp = (const float4 *)(x + blk * 256 + lane * 8);
    const float4 p0 = xp[0], p1 = xp[1];
    const float v[8] = {p0.x, p0.y, p0.z, p0.w, p1.x, p1.y, p1.z, p1.w};
    act_q8_vals_as_f16<KIND>(v, blk, lane, out);
}

#endif /* QR_CUDA_ACT_QUANT_CUH */
