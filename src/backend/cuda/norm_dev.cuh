/* norm_dev.cuh — the decode rmsnorm row in registers (norm.cu's rmsnorm_vec8_kernel, and moe.cu's norm +
 * router + routing kernel): each thread owns 8 consecutive values (dim % 8 == 0, dim <= 8192). */
#pragma once
#include "backend/cuda/act_quant.cuh"

/* The norm weights of this thread's 8 values (1 without weights); loaded before the dependency wait. */
static __device__ __forceinline__ void rmsnorm8_weights(const float *__restrict__ w, int64_t dim, float *g) {
    const int64_t i0 = (int64_t)threadIdx.x * 8;
    if (w && i0 < dim) {
        const float4 g0 = __ldg((const float4 *)(w + i0)), g1 = __ldg((const float4 *)(w + i0 + 4));
        g[0] = g0.x, g[1] = g0.y, g[2] = g0.z, g[3] = g0.w, g[4] = g1.x, g[5] = g1.y, g[6] = g1.z, g[7] = g1.w;
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++) g[j] = 1.0f;
    }
}

/* Row blockIdx.x, first half: this thread's 8 values of x (+ b_scale * b with ADD) into v. */
template <bool ADD>
static __device__ __forceinline__ void rmsnorm8_load(const float *x, const float *__restrict__ b, float b_scale,
                                                     int64_t dim, float *v) {
    const int64_t i0 = (int64_t)threadIdx.x * 8;
    if (i0 < dim) {
        const float *xr = x + (int64_t)blockIdx.x * dim;
        const float4 a0 = *(const float4 *)(xr + i0), a1 = *(const float4 *)(xr + i0 + 4);
        v[0] = a0.x, v[1] = a0.y, v[2] = a0.z, v[3] = a0.w, v[4] = a1.x, v[5] = a1.y, v[6] = a1.z, v[7] = a1.w;
        if (ADD) {
            const float *br = b + (int64_t)blockIdx.x * dim + i0;
            const float4 c0 = *(const float4 *)br, c1 = *(const float4 *)(br + 4);
            const float bv[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
#pragma unroll
            for (int j = 0; j < 8; j++) v[j] = __fadd_rn(v[j], b_scale == 1.0f ? bv[j] : __fmul_rn(b_scale, bv[j]));
        }
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++) v[j] = 0.0f;
    }
}

/* 1 / sqrt(mean(v^2) + eps) over the CTA's row (each thread's 8 values in v): the sum of squares in double, the
 * scale with IEEE division and square root (as rmsnorm_kernel and the CPU). Every thread calls it. */
static __device__ __forceinline__ float rmsnorm8_scale(const float *v, int64_t dim, float eps, double *sh) {
    double sum = 0.0;
#pragma unroll
    for (int j = 0; j < 8; j++) sum += (double)__fmul_rn(v[j], v[j]);
    sum = block_sum_d(sum, sh);
    const float mean = (float)(sum / (double)dim);
    return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
}

/* Second half: x written back (ADD: the residual stream), v = rmsnorm(v) * g left in registers and written
 * to y; QK >= 0: y quantized for the next mat-vec (Q8_0 rule per 32 by groups of 4 lanes, Q8_K per 256 by
 * whole warps) into q/qd/qs/qg; QK 2: those Q8_K codes as f16 values in matmul_dq.cu's order into q (a half
 * array: qr_cuda_act_q8_as_f16 kind 2, for a batched-decode GEMM); QK 3: the same values in plain order (kind 1).
 * The sum of squares in double, the scale with IEEE division and square root (as rmsnorm_kernel and the CPU). Every thread of the CTA calls it (a block reduction). */
template <bool ADD, int QK>
static __device__ __forceinline__ void rmsnorm8_finish(float *x, bool has_w, const float *g, int64_t dim, float eps,
                                                       float *y, int8_t *q, float *qd, float *qs, int16_t *qg, double *sh,
                                                       float *v) {
    const int64_t i0 = (int64_t)threadIdx.x * 8;
    const bool on = i0 < dim;
    if (ADD && on) {
        float *xr = x + (int64_t)blockIdx.x * dim;
        *(float4 *)(xr + i0) = make_float4(v[0], v[1], v[2], v[3]);
        *(float4 *)(xr + i0 + 4) = make_float4(v[4], v[5], v[6], v[7]);
    }
    const float scale = rmsnorm8_scale(v, dim, eps, sh);
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const float t = __fmul_rn(v[j], scale);
        v[j] = has_w ? __fmul_rn(t, g[j]) : t;
    }
    if (on) {
        float *yr = y + (int64_t)blockIdx.x * dim + i0;
        *(float4 *)yr = make_float4(v[0], v[1], v[2], v[3]);
        *(float4 *)(yr + 4) = make_float4(v[4], v[5], v[6], v[7]);
    }
    if (QK < 0) return;
    const int lane = threadIdx.x & 31;
    if (QK == 0) { /* 4 lanes per 32-value block; a group of 4 is all on or all off (dim % 32 == 0) */
        const int64_t blk = ((int64_t)blockIdx.x * dim + i0) / 32;
        if ((int64_t)(threadIdx.x & ~31u) * 8 < dim) act_quant_oct32(v, blk, lane & 3, on, q, qd, qs, qg);
    } else if ((int64_t)(threadIdx.x & ~31u) * 8 < dim) { /* a whole warp per 256-value block (dim % 256 == 0) */
        if (QK == 2) /* f16 values of the Q8_K codes in the batched-decode GEMM's order (act kind 2) into q */
            act_q8_vals_as_f16<2>(v, ((int64_t)blockIdx.x * dim + i0) / 256, lane, (__half *)q);
        else if (QK == 3) /* the same in plain order (act kind 1: the f16 cache + cuBLAS GEMM's input) */
            act_q8_vals_as_f16<1>(v, ((int64_t)blockIdx.x * dim + i0) / 256, lane, (__half *)q);
        else act_quant_vals256(v, ((int64_t)blockIdx.x * dim + i0) / 256, lane, q, qd, qg);
    }
}

/* Both halves: x += b_scale * b (ADD; x written back), v = rmsnorm(x) * g in registers and in y (+ codes). */
template <bool ADD, int QK>
static __device__ __forceinline__ void rmsnorm8_row(float *x, const float *__restrict__ b, float b_scale, bool has_w,
                                                    const float *g, int64_t dim, float eps, float *y, int8_t *q, float *qd,
                                                    float *qs, int16_t *qg, double *sh, float *v) {
    rmsnorm8_load<ADD>(x, b, b_scale, dim, v);
    rmsnorm8_finish<ADD, QK>(x, has_w, g, dim, eps, y, q, qd, qs, qg, sh, v);
}
