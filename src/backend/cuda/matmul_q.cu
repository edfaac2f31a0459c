/* matmul_q.cu — the decode matmul: a bandwidth-bound mat-vec over weights in their plane-repacked
 * block format (dequant.cu), for 1..8 activation rows, plus the activation quantizers.
 *
 * Mat-vec layout: a CTA of 4 warps computes 4 / wpr output rows; wpr warps share a row, splitting its
 * chunks (quant_dev.cuh). Each thread loads U chunks (16-byte loads, L1 bypassed) before it computes
 * any, then dots them against the activation codes (dp4a) of every row; the partial sums are reduced
 * across the warp with shuffles and across the row's warps through shared memory.
 *
 * Activation quantization reproduces the CPU's quantizers value for value: Q8_0/Q8_1 as ggml's x86
 * activation quantizer (cpu/act_quant.c: per 32 values d = amax / 127, q = round-half-even(x * (127 /
 * amax)), d stored as fp16, s = fp16(d * sum(q))) and Q8_K as the reference quantizer (per 256:
 * iscale = -127 / max, q = nearest(x * iscale) capped at 127, d = 1 / iscale), so the integer dot
 * products match the CPU's exactly and only the order of the float accumulation differs.
 *
 * Launch overlap (Hopper): the quantizer lets its dependent start at once, and the mat-vec is
 * launched with programmatic stream serialization: its CTAs issue their first weight loads, then
 * wait (griddepcontrol.wait) for the quantized activations. The weight stream so overlaps the
 * quantizer and the launch latency instead of following them.
 */
#include "backend/cuda/quant_dev.cuh"

#define MMV_THREADS 128
/* Chunks loaded per thread before computing: 4 for the 32-value formats at up to 4 rows, 2 for the
 * K-quants (bigger chunk state) and for 5..8 rows, so that everything fits in 64 registers (8 CTAs
 * of 128 threads per SM) without spilling. */
template <class T, int NR> struct mmv_unroll {
    static constexpr int U = (T::CPB > 1 || NR > 4) ? 2 : 4;
};

/* ---- activation quantizers ---- */

/* One warp per 32 values. */
static __global__ void quantize_q8_32_kernel(const float *__restrict__ x, int64_t n_blocks, int8_t *__restrict__ q,
                                             float *__restrict__ d_out, float *__restrict__ s_out,
                                             int16_t *__restrict__ g_out) {
    const int64_t blk = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (blk >= n_blocks) return;
    pdl_launch_dependents();
    const float v = x[blk * 32 + lane];
    const float amax = warp_max(fabsf(v));
    const float d = __fdiv_rn(amax, 127.0f);
    const float id = amax != 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
    const int qi = __float2int_rn(__fmul_rn(v, id));
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

/* One warp per 256 values; lane l holds values 8l .. 8l + 7. */
static __global__ void quantize_q8_K_kernel(const float *__restrict__ x, int64_t n_blocks, int8_t *__restrict__ q,
                                            float *__restrict__ d_out, int16_t *__restrict__ g_out) {
    const int64_t blk = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    pdl_launch_dependents();
    if (blk >= n_blocks) return;
    const float4 *xp = (const float4 *)(x + blk * 256 + lane * 8);
    const float4 p0 = xp[0], p1 = xp[1];
    const float v[8] = {p0.x, p0.y, p0.z, p0.w, p1.x, p1.y, p1.z, p1.w};
    /* the value of largest magnitude, the first one on ties (as the CPU's strict > scan) */
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
    int qs[8];
    float d = 0.0f;
    if (amax == 0.0f) {
#pragma unroll
        for (int j = 0; j < 8; j++) qs[j] = 0;
    } else {
        const float iscale = __fdiv_rn(-127.0f, mx);
#pragma unroll
        for (int j = 0; j < 8; j++) qs[j] = min(__float2int_rn(__fmul_rn(iscale, v[j])), 127);
        d = __fdiv_rn(1.0f, iscale);
    }
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

extern "C" cudaError_t qr_cuda_quantize_act(const float *x, int32_t nr, int32_t k, int kind, int8_t *q, float *d,
                                            float *s, int16_t *g, cudaStream_t stream) {
    const int bs = kind == 0 ? 32 : 256;
    const int64_t n_blocks = (int64_t)nr * (k / bs);
    if (n_blocks <= 0) return cudaSuccess;
    const int threads = 256;
    const unsigned grid = (unsigned)((n_blocks * 32 + threads - 1) / threads);
    if (kind == 0) quantize_q8_32_kernel<<<grid, threads, 0, stream>>>(x, n_blocks, q, d, s, g);
    else quantize_q8_K_kernel<<<grid, threads, 0, stream>>>(x, n_blocks, q, d, g);
    QR_CUDA_CHECK_LAUNCH();
}

/* ---- f32 -> f16 / bf16 ---- */

static __global__ void to_half_kernel(const float *__restrict__ x, int64_t n, uint16_t *__restrict__ out, bool bf16) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    pdl_launch_dependents();
    if (i >= n) return;
    out[i] = bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(x[i])) : __half_as_ushort(__float2half_rn(x[i]));
}

extern "C" cudaError_t qr_cuda_to_half(const float *x, int64_t n, void *out, bool bf16, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    to_half_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, n, (uint16_t *)out, bf16);
    QR_CUDA_CHECK_LAUNCH();
}

/* ---- the mat-vec ---- */

/* 64 registers (8 CTAs per SM) for 1-2 rows; 128 (4 CTAs) above, where the per-row activation
 * loads the compiler hoists would otherwise spill. */
template <class T, int NR>
static __global__ void __launch_bounds__(MMV_THREADS, NR <= 2 ? 8 : 4)
    matvec_kernel(const cuda_wview w, const cuda_xview x, float *__restrict__ y, int wpr) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int rpc = (MMV_THREADS / 32) / wpr;
    const int64_t row = (int64_t)blockIdx.x * rpc + warp / wpr;
    const int part = warp % wpr;
    constexpr int U = mmv_unroll<T, NR>::U;
    float acc[NR];
#pragma unroll
    for (int t = 0; t < NR; t++) acc[t] = 0.0f;
    bool waited = false;
    if (row < w.n) {
        const int nch = (int)w.nb * T::CPB;
        const int stride = 32 * wpr;
        const int64_t gbase = row * w.nb;
        for (int c0 = part * 32 + lane; c0 < nch; c0 += stride * U) {
            typename T::W wd[U];
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int c = c0 + u * stride;
                if (c < nch) wd[u] = T::load(w, gbase + c / T::CPB, c % T::CPB);
            }
            if (!waited) { /* the weights are in flight: now wait for the activations */
                pdl_wait();
                waited = true;
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int c = c0 + u * stride;
                if (c < nch) T::template dot<NR>(wd[u], x, c / T::CPB, c % T::CPB, acc);
            }
        }
    }
    if (!waited) pdl_wait();
#pragma unroll
    for (int t = 0; t < NR; t++) acc[t] = warp_sum(acc[t]);
    if (wpr == 1) {
        if (lane == 0 && row < w.n) {
#pragma unroll
            for (int t = 0; t < NR; t++) y[(int64_t)t * w.n + row] = acc[t];
        }
        return;
    }
    __shared__ float red[MMV_THREADS / 32][NR];
    if (lane == 0) {
#pragma unroll
        for (int t = 0; t < NR; t++) red[warp][t] = acc[t];
    }
    __syncthreads();
    if (part == 0 && lane < NR && row < w.n) {
        float s = 0.0f;
        for (int p = 0; p < wpr; p++) s += red[warp + p][lane];
        y[(int64_t)lane * w.n + row] = s;
    }
}

template <class T>
static cudaError_t launch_matvec(const cuda_wview *w, const cuda_xview *x, int32_t nr, float *y, int32_t wpr, bool pdl,
                                 cudaStream_t stream) {
    const int rpc = (MMV_THREADS / 32) / wpr;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)((w->n + rpc - 1) / rpc));
    cfg.blockDim = dim3(MMV_THREADS);
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 1 : 0;
    const cuda_wview wv = *w;
    const cuda_xview xv = *x;
    switch (nr) {
#define CASE(N) \
    case N: return cudaLaunchKernelEx(&cfg, matvec_kernel<T, N>, wv, xv, y, (int)wpr);
        CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7) CASE(8)
#undef CASE
    default: return cudaErrorInvalidValue;
    }
}

extern "C" cudaError_t qr_cuda_matvec(const cuda_wview *w, const cuda_xview *x, int32_t nr, float *y, int32_t wpr,
                                      bool pdl, cudaStream_t stream) {
    if (wpr != 1 && wpr != 2 && wpr != 4) return cudaErrorInvalidValue;
    switch ((qr_type)w->type) {
    case QR_TYPE_Q4_0: return launch_matvec<TQ4_0>(w, x, nr, y, wpr, pdl, stream);
    case QR_TYPE_Q4_1: return launch_matvec<TQ4_1>(w, x, nr, y, wpr, pdl, stream);
    case QR_TYPE_Q5_0: return launch_matvec<TQ5_0>(w, x, nr, y, wpr, pdl, stream);
    case QR_TYPE_Q5_1: return launch_matvec<TQ5_1>(w, x, nr, y, wpr, pdl, stream);
    case QR_TYPE_Q8_0: return launch_matvec<TQ8_0>(w, x, nr, y, wpr, pdl, stream);
    case QR_TYPE_MXFP4: return launch_matvec<TMXFP4>(w, x, nr, y, wpr, pdl, stream);
    case QR_TYPE_IQ4_NL: return launch_matvec<TIQ4_NL>(w, x, nr, y, wpr, pdl, stream);
    case QR_TYPE_Q2_K: return launch_matvec<TQ2_K>(w, x, nr, y, wpr, pdl, stream);
    case QR_TYPE_Q3_K: return launch_matvec<TQ3_K>(w, x, nr, y, wpr, pdl, stream);
    case QR_TYPE_Q4_K: return launch_matvec<TQ4_K>(w, x, nr, y, wpr, pdl, stream);
    case QR_TYPE_Q5_K: return launch_matvec<TQ5_K>(w, x, nr, y, wpr, pdl, stream);
    case QR_TYPE_Q6_K: return launch_matvec<TQ6_K>(w, x, nr, y, wpr, pdl, stream);
    case QR_TYPE_F16: return launch_matvec<TF16>(w, x, nr, y, wpr, pdl, stream);
    case QR_TYPE_BF16: return launch_matvec<TBF16>(w, x, nr, y, wpr, pdl, stream);
    case QR_TYPE_F32: return launch_matvec<TF32>(w, x, nr, y, wpr, pdl, stream);
    default: return cudaErrorInvalidValue;
    }
}
