/* kv_quant.cuh — the CUDA backend's quantized KV cache (Q8_0, Q4_0): where a slot's codes and scales lie,
 * and the dequantization of 8 values, shared by the store (kv_quant.cu), the decode kernel (kv_quant.cu)
 * and the flash prefill kernel (attention_flash.cu).
 *
 * Layout (the backend's own; only its byte count per slot is the file format's, qr_type_row_size): a paged block
 * of bs slots of an n-value row (n = n_head_kv * head size) holds first the codes of its bs rows, [bs][code_row]
 * (Q8_0: n int8, Q4_0: n / 2 bytes, byte b of a 32-value block holding values 2b (low nibble) and 2b + 1 (high)),
 * then their scales, [bs][n / 32] f16. A head's codes and scales are contiguous within its row, so one 16-byte
 * load gives 16 (Q8_0) or 32 (Q4_0) values, and a block's bytes are blk_bytes = bs * (code_row + n / 16): the
 * same as bs rows of ggml blocks, so copy-on-write copies whole blocks as for f16.
 */
#ifndef QR_CUDA_KV_QUANT_CUH
#define QR_CUDA_KV_QUANT_CUH

#include "backend/cuda/cuda_dev.cuh"

/* Where one (block, slot) row's codes and scales begin. */
struct kvq_row {
    const uint8_t *codes;
    const __half *scales;
};

/* The row of slot off of paged block blk in a cache of kind KQ (CUDA_KVQ_Q8 / CUDA_KVQ_Q4), n values a row. */
template <int KQ>
static __device__ __forceinline__ kvq_row kvq_row_at(const void *cache, int64_t blk, int off, int n, int bs) {
    const int code_row = KQ == CUDA_KVQ_Q8 ? n : n / 2;
    const uint8_t *b = (const uint8_t *)cache + blk * (int64_t)bs * (code_row + n / 16);
    kvq_row r;
    r.codes = b + (int64_t)off * code_row;
    r.scales = (const __half *)(b + (int64_t)bs * code_row) + (int64_t)off * (n / 32);
    return r;
}


/* 8 values from their codes: w0 (Q8_0: values 0-3 a byte each, w1 values 4-7; Q4_0: all 8, value j in bits 4j..4j+3,
 * w1 unused) times the block's scale d, as ggml dequantizes: d * code (Q8_0), d * (code - 8) (Q4_0). */
template <int KQ>
static __device__ __forceinline__ void kvq_dequant8(uint32_t w0, uint32_t w1, float d, float *f) {
#pragma unroll
    for (int j = 0; j < 8; j++)
        f[j] = KQ == CUDA_KVQ_Q8 ? d * (float)(int8_t)((j < 4 ? w0 : w1) >> (8 * (j & 3)))
                                 : d * (float)((int)((w0 >> (4 * j)) & 15u) - 8);
}

/* The code words of values c .. c + 7 (c a multiple of 8) of codes at p (global or shared memory). */
template <int KQ>
static __device__ __forceinline__ void kvq_words8(const uint8_t *p, int c, uint32_t &w0, uint32_t &w1) {
    if (KQ == CUDA_KVQ_Q8) {
        const uint2 u = *(const uint2 *)(p + c);
        w0 = u.x, w1 = u.y;
    } else {
        w0 = *(const uint32_t *)(p + c / 2), w1 = 0;
    }
}

/* ---- a warp's chunk of 32 E values of a row, lane l holding values l E .. l E + E - 1 ---- */

/* The orthonormal Walsh-Hadamard transform of the chunk in the CPU's order (qr_cpu_fwht: every value times
 * 1 / sqrt(32 E), then butterflies of length 1, 2, ..., 16 E; the lower index gets u + v, the upper u - v). */
template <int E>
static __device__ __forceinline__ void kvq_fwht_warp(float (&v)[E], int lane) {
    constexpr int C = 32 * E;
    const float scale = __fdiv_rn(1.0f, __fsqrt_rn((float)C));
#pragma unroll
    for (int e = 0; e < E; e++) v[e] = __fmul_rn(v[e], scale);
#pragma unroll
    for (int len = 1; len < E; len <<= 1)
#pragma unroll
        for (int i = 0; i < E; i += 2 * len)
#pragma unroll
            for (int j = 0; j < len; j++) {
                const float u = v[i + j], t = v[i + len + j];
                v[i + j] = __fadd_rn(u, t);
                v[i + len + j] = __fsub_rn(u, t);
            }
#pragma unroll
    for (int len = E; len < C; len <<= 1) {
        const int pl = len / E; /* the partner lane */
#pragma unroll
        for (int e = 0; e < E; e++) {
            const float o = __shfl_xor_sync(0xffffffffu, v[e], pl);
            v[e] = (lane & pl) ? __fsub_rn(o, v[e]) : __fadd_rn(v[e], o);
        }
    }
}

/* Q8_0 codes of the chunk's blocks of 32 (32 / E consecutive lanes each) by ggml's x86 rule (d = amax / 127, code =
 * round-half-even(v * (127 / amax))); returns the lane's block scale d, unrounded. */
template <int E>
static __device__ __forceinline__ float kvq_q8_codes(const float (&v)[E], int (&c)[E]) {
    constexpr int L = 32 / E;
    float amax = 0.0f;
#pragma unroll
    for (int e = 0; e < E; e++) amax = fmaxf(amax, fabsf(v[e]));
#pragma unroll
    for (int o = 1; o < L; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float id = amax != 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
#pragma unroll
    for (int e = 0; e < E; e++) c[e] = __float2int_rn(__fmul_rn(v[e], id));
    return __fdiv_rn(amax, 127.0f);
}

/* Stores the chunk as values c0 .. c0 + 32 E - 1 of slot `slot`'s row (dim values) of a cache of kind kvq (Q8_0 by
 * kvq_q8_codes, Q4_0 by the reference rule: the value of largest magnitude, the first on ties, d = max / -8, code =
 * min(15, trunc(v / d + 8.5))). Whole warp. */
template <int E>
static __device__ __forceinline__ void kvq_put_warp(const float (&v)[E], int lane, int c0, int64_t slot, int dim, int bs,
                                                     uint8_t *cache, int kvq) {
    constexpr int L = 32 / E;
    const int64_t blk = slot / bs;
    const int off = (int)(slot % bs), cl = c0 + lane * E;
    const int code_row = kvq == CUDA_KVQ_Q8 ? dim : dim / 2;
    uint8_t *b = cache + blk * (int64_t)bs * (code_row + dim / 16);
    uint8_t *codes = b + (int64_t)off * code_row;
    __half *scales = (__half *)(b + (int64_t)bs * code_row) + (int64_t)off * (dim / 32);
    if (kvq == CUDA_KVQ_Q8) {
        int q[E];
        const float d = kvq_q8_codes<E>(v, q);
#pragma unroll
        for (int e = 0; e < E; e++) codes[cl + e] = (uint8_t)(int8_t)q[e];
        if (lane % L == 0) scales[cl / 32] = __float2half_rn(d);
        return;
    }
    float amax = 0.0f, mx = 0.0f;
    int idx = 1 << 30;
#pragma unroll
    for (int e = 0; e < E; e++)
        if (fabsf(v[e]) > amax) amax = fabsf(v[e]), mx = v[e], idx = cl + e;
#pragma unroll
    for (int o = 1; o < L; o <<= 1) {
        const float oa = __shfl_xor_sync(0xffffffffu, amax, o), om = __shfl_xor_sync(0xffffffffu, mx, o);
        const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
        if (oa > amax || (oa == amax && oi < idx)) amax = oa, mx = om, idx = oi;
    }
    const float d = __fdiv_rn(mx, -8.0f), id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
    int q[E];
#pragma unroll
    for (int e = 0; e < E; e++) q[e] = min(15, __float2int_rz(__fadd_rn(__fmul_rn(v[e], id), 8.5f)));
    if (lane % L == 0) scales[cl / 32] = __float2half_rn(d);
    if constexpr (E == 1) { /* pairs across lanes: the even lane writes */
        const int hi = __shfl_down_sync(0xffffffffu, q[0], 1);
        if (!(lane & 1)) codes[cl / 2] = (uint8_t)(q[0] | (hi << 4));
    } else {
#pragma unroll
        for (int e = 0; e < E; e += 2) codes[(cl + e) / 2] = (uint8_t)(q[e] | (q[e + 1] << 4));
    }
}

/* Runs the statement __VA_ARGS__ with constexpr int E = C / 32 (a chunk of C values: 32, 64, 128 or 256). */
#define KVQ_BY_CHUNK(C, ...)                              \
    switch (C) {                                          \
    case 32: { constexpr int E = 1; __VA_ARGS__; } break;  \
    case 64: { constexpr int E = 2; __VA_ARGS__; } break;  \
    case 128: { constexpr int E = 4; __VA_ARGS__; } break; \
    default: { constexpr int E = 8; __VA_ARGS__; } break;  \
    }

#endif /* QR_CUDA_KV_QUANT_CUH */
