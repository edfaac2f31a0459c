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
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/act_quant.cuh"
#include "backend/cuda/ew_dev.cuh"
#include "backend/cuda/quant_dev.cuh"

#define MMV_THREADS 128
/* Every weight type of the mat-vec kernels, as X(qr_type, traits) (the launchers' type dispatch). */
#define MMV_TYPES(X)                                                                                            \
    X(QR_TYPE_Q4_0, TQ4_0) X(QR_TYPE_Q4_1, TQ4_1) X(QR_TYPE_Q5_0, TQ5_0) X(QR_TYPE_Q5_1, TQ5_1)               \
    X(QR_TYPE_Q8_0, TQ8_0) X(QR_TYPE_MXFP4, TMXFP4) X(QR_TYPE_IQ4_NL, TIQ4_NL) X(QR_TYPE_Q2_K, TQ2_K)         \
    X(QR_TYPE_Q3_K, TQ3_K) X(QR_TYPE_Q4_K, TQ4_K) X(QR_TYPE_Q5_K, TQ5_K) X(QR_TYPE_Q6_K, TQ6_K)               \
    X(QR_TYPE_F16, TF16) X(QR_TYPE_BF16, TBF16) X(QR_TYPE_F32, TF32)
/* Chunks loaded per thread before computing: 4 for the 32-value formats at up to 4 rows, 2 for the
 * K-quants (bigger chunk state) and for 5..8 rows, so that everything fits in 64 registers (8 CTAs
 * of 128 threads per SM) without spilling. */
template <class T, int NR> struct mmv_unroll {
    static constexpr int U = (T::CPB > 1 || NR > 4) ? 2 : 4;
};

/* ---- activation quantizers (the block rules live in act_quant.cuh) ---- */

/* One warp per 32 values. */
static __global__ void quantize_q8_32_kernel(const float *__restrict__ x, int64_t n_blocks, int8_t *__restrict__ q,
                                             float *__restrict__ d_out, float *__restrict__ s_out,
                                             int16_t *__restrict__ g_out) {
    pdl_enter();
    const int64_t blk = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (blk >= n_blocks) return;
    act_quant_block32(x, blk, threadIdx.x & 31, q, d_out, s_out, g_out);
}

/* One warp per 256 values. */
static __global__ void quantize_q8_K_kernel(const float *__restrict__ x, int64_t n_blocks, int8_t *__restrict__ q,
                                            float *__restrict__ d_out, int16_t *__restrict__ g_out) {
    pdl_enter();
    const int64_t blk = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (blk >= n_blocks) return;
    act_quant_block256(x, blk, threadIdx.x & 31, q, d_out, g_out);
}

extern "C" cudaError_t qr_cuda_quantize_act(const float *x, int32_t nr, int32_t k, int kind, int8_t *q, float *d,
                                            float *s, int16_t *g, bool pdl, cudaStream_t stream) {
    const int bs = kind == 0 ? 32 : 256;
    const int64_t n_blocks = (int64_t)nr * (k / bs);
    if (n_blocks <= 0) return cudaSuccess;
    const int threads = 256;
    const unsigned grid = (unsigned)((n_blocks * 32 + threads - 1) / threads);
    if (kind == 0) return launch_k(quantize_q8_32_kernel, dim3(grid), dim3(threads), 0, stream, pdl, x, n_blocks, q, d, s, g);
    return launch_k(quantize_q8_K_kernel, dim3(grid), dim3(threads), 0, stream, pdl, x, n_blocks, q, d, g);
}

/* ---- the prefill GEMM's activations: quantized as the CPU does, then as f16 ---- */

template <int KIND>
static __global__ void q8_as_f16_kernel(const float *__restrict__ x, int64_t n_blocks, __half *__restrict__ out) {
    const int64_t blk = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (blk >= n_blocks) return;
    act_q8_as_f16<KIND>(x, blk, threadIdx.x & 31, out);
}

extern "C" cudaError_t qr_cuda_act_q8_as_f16(const float *x, int64_t n, int kind, void *out, cudaStream_t stream) {
    const int bs = kind == 0 ? 32 : 256;
    if (n <= 0) return cudaSuccess;
    if (kind < 0 || kind > 2 || n % bs) return cudaErrorInvalidValue;
    const int64_t n_blocks = n / bs;
    const unsigned grid = (unsigned)((n_blocks * 32 + 255) / 256);
    if (kind == 0) q8_as_f16_kernel<0><<<grid, 256, 0, stream>>>(x, n_blocks, (__half *)out);
    else if (kind == 1) q8_as_f16_kernel<1><<<grid, 256, 0, stream>>>(x, n_blocks, (__half *)out);
    else q8_as_f16_kernel<2><<<grid, 256, 0, stream>>>(x, n_blocks, (__half *)out);
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

/* The partial dot products of one output row of NM matrices of one shape (NM 2: the gate and up rows of a GLU,
 * streamed together): this warp's share (part of wpr) of the row's chunks, acc[m][t] for matrix m and activation
 * row t. Issues its first weight loads, then waits for the kernel before it (programmatic dependent launch); every
 * thread of the CTA must call it (the wait is per thread). A lane's chunks are c = part * 32 + lane + j * 32 wpr:
 * the stride is a multiple of T::CPB, so the lane always holds chunk ci of a block (hoisted: the K-quant scale
 * selection is per lane, not per chunk) and walks the blocks bstep apart. U chunks (per matrix) a lane in flight. */
template <class T, int NR, int U, int NM>
static __device__ __forceinline__ void matvec_rows_part(const cuda_wview &wa, const cuda_wview &wb, const cuda_xview &x,
                                                        int64_t row, int part, int wpr, int lane, float (*acc)[NR]) {
    pdl_launch_dependents(); /* the next kernel waits for this whole grid anyway: let it launch */
#pragma unroll
    for (int m = 0; m < NM; m++)
#pragma unroll
        for (int t = 0; t < NR; t++) acc[m][t] = 0.0f;
    bool waited = false;
    if (row < wa.n) {
        const int c0 = part * 32 + lane, ci = c0 % T::CPB, bstep = 32 * wpr / T::CPB;
        const int nb = (int)wa.nb;
        const int64_t ga = row * wa.nb, gb = row * wb.nb;
        for (int b0 = c0 / T::CPB; b0 < nb; b0 += bstep * U) {
            typename T::W wd[NM][U];
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int b = b0 + u * bstep;
                if (b < nb) {
                    wd[0][u] = T::load(wa, ga + b, ci);
                    if (NM == 2) wd[NM - 1][u] = T::load(wb, gb + b, ci);
                }
            }
            if (!waited) { /* the weights are in flight: now wait for the activations */
                pdl_wait();
                waited = true;
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int b = b0 + u * bstep;
                if (b < nb) {
                    T::template dot<NR>(wd[0][u], x, b, ci, acc[0]);
                    if (NM == 2) T::template dot<NR>(wd[NM - 1][u], x, b, ci, acc[NM - 1]);
                }
            }
        }
    }
    if (!waited) pdl_wait();
#pragma unroll
    for (int m = 0; m < NM; m++)
#pragma unroll
        for (int t = 0; t < NR; t++) acc[m][t] = warp_sum(acc[m][t]);
}

/* matvec_rows_part over four matrices of one shape (the GLU's pair form: gate and up rows r and r + n/2), one chunk
 * of each in flight; acc[m][t] as there (each matrix's sums in the same chunk order). */
template <class T, int NR>
static __device__ __forceinline__ void matvec_rows_part4(const cuda_wview (&w)[4], const cuda_xview &x, int64_t row,
                                                         int part, int wpr, int lane, float (*acc)[NR]) {
    pdl_launch_dependents();
#pragma unroll
    for (int m = 0; m < 4; m++)
#pragma unroll
        for (int t = 0; t < NR; t++) acc[m][t] = 0.0f;
    bool waited = false;
    if (row < w[0].n) {
        const int c0 = part * 32 + lane, ci = c0 % T::CPB, bstep = 32 * wpr / T::CPB, nb = (int)w[0].nb;
        for (int b = c0 / T::CPB; b < nb; b += bstep) {
            typename T::W wd[4];
#pragma unroll
            for (int m = 0; m < 4; m++) wd[m] = T::load(w[m], row * w[m].nb + b, ci);
            if (!waited) {
                pdl_wait();
                waited = true;
            }
#pragma unroll
            for (int m = 0; m < 4; m++) T::template dot<NR>(wd[m], x, b, ci, acc[m]);
        }
    }
    if (!waited) pdl_wait();
#pragma unroll
    for (int m = 0; m < 4; m++)
#pragma unroll
        for (int t = 0; t < NR; t++) acc[m][t] = warp_sum(acc[m][t]);
}

/* One matrix's row part (matvec_rows_part with NM 1), mmv_unroll's chunks in flight unless UF says. */
template <class T, int NR, int UF = 0>
static __device__ __forceinline__ void matvec_row_part(const cuda_wview &w, const cuda_xview &x, int64_t row, int part,
                                                       int wpr, int lane, float *acc) {
    matvec_rows_part<T, NR, UF ? UF : mmv_unroll<T, NR>::U, 1>(w, w, x, row, part, wpr, lane, (float(*)[NR])acc);
}

/* Writes row `row` of y ([NR][n]) from the row's wpr warps' partial sums (reduced through shared
 * memory when wpr > 1; every thread of the CTA calls it). */
template <int NR>
static __device__ __forceinline__ void matvec_store(const float *acc, float *y, int64_t n, int64_t row, int warp,
                                                    int lane, int part, int wpr, const float *bias = nullptr) {
    if (wpr == 1) {
        if (lane == 0 && row < n) {
            const float b = bias ? bias[row] : 0.0f;
#pragma unroll
            for (int t = 0; t < NR; t++) y[(int64_t)t * n + row] = bias ? __fadd_rn(acc[t], b) : acc[t];
        }
        return;
    }
    __shared__ float red[MMV_THREADS / 32][NR];
    if (lane == 0) {
#pragma unroll
        for (int t = 0; t < NR; t++) red[warp][t] = acc[t];
    }
    __syncthreads();
    if (part == 0 && lane < NR && row < n) {
        float s = 0.0f;
        for (int p = 0; p < wpr; p++) s += red[warp + p][lane];
        y[(int64_t)lane * n + row] = bias ? __fadd_rn(s, bias[row]) : s;
    }
}

/* 64 registers (8 CTAs per SM) for 1-2 rows; 128 (4 CTAs) above, where the per-row activation
 * loads the compiler hoists would otherwise spill. */
template <class T, int NR>
static __global__ void __launch_bounds__(MMV_THREADS, NR <= 2 ? 8 : 4)
    matvec_kernel(const cuda_wview w, const cuda_xview x, float *__restrict__ y, int wpr) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int rpc = (MMV_THREADS / 32) / wpr;
    const int64_t row = (int64_t)blockIdx.x * rpc + warp / wpr;
    const int part = warp % wpr;
    float acc[NR];
    matvec_row_part<T, NR>(w, x, row, part, wpr, lane, acc);
    matvec_store<NR>(acc, y, w.n, row, warp, lane, part, wpr);
}

/* Several matrices of one type against the same activations in one launch (the q/k/v projections):
 * CTAs [cta_end[m-1], cta_end[m]) compute matrix m into y[m], as matvec_kernel would, plus the bias
 * b[m] when there is one (the sum rounded, then the bias added: as matmul then add_row). With glu set
 * (two matrices of the same shape, the FFN gate and up) every CTA computes the same rows of both,
 * and writes swiglu(gate row, up row) (glu 1) or geglu (glu 2) to y[0] instead. */
typedef struct mv_multi_args {
    cuda_wview w[QR_CUDA_MULTI_MAX];
    float *y[QR_CUDA_MULTI_MAX];
    const float *b[QR_CUDA_MULTI_MAX];
    int32_t cta_end[QR_CUDA_MULTI_MAX];
} mv_multi_args;

template <class T, int NR, int GLU, int UF = 0>
static __global__ void __launch_bounds__(MMV_THREADS, UF == 2 ? 12 : (NR <= 2 ? 8 : 4))
    matvec_multi_kernel(const mv_multi_args a, const cuda_xview x, int wpr) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int part = warp % wpr, sub = warp / wpr;
    const int rpc = (MMV_THREADS / 32) / wpr;
    if (GLU == 0) {
        float acc[NR];
        const int b = (int)blockIdx.x;
        const int m = b < a.cta_end[0] ? 0 : (b < a.cta_end[1] ? 1 : 2);
        const int b0 = m == 0 ? 0 : a.cta_end[m - 1];
        const cuda_wview &w = a.w[m];
        float *y = a.y[m];
        const int64_t row = (int64_t)(b - b0) * rpc + sub;
        matvec_row_part<T, NR, UF>(w, x, row, part, wpr, lane, acc);
        matvec_store<NR>(acc, y, w.n, row, warp, lane, part, wpr, a.b[m]);
        return;
    }
    /* GLU: the wpr warps of sub-group sub stream rows blockIdx.x * rpc + sub of gate and up together (half the
     * chunks a matrix in flight, so the lane holds as many as a plain mat-vec) */
    constexpr int U1 = UF ? UF : mmv_unroll<T, NR>::U, U2 = U1 > 1 ? U1 / 2 : 1;
    const int64_t row = (int64_t)blockIdx.x * rpc + sub;
    float gu[2][NR];
    matvec_rows_part<T, NR, U2, 2>(a.w[0], a.w[1], x, row, part, wpr, lane, gu);
    const int64_t n = a.w[0].n;
    if (wpr == 1) {
        if (lane < NR && row < n) {
            float g = gu[0][0], u = gu[1][0];
#pragma unroll
            for (int t = 1; t < NR; t++)
                if (lane == t) g = gu[0][t], u = gu[1][t];
            a.y[0][(int64_t)lane * n + row] = GLU == 1 ? ew_op<CUDA_EW_SWIGLU>(g, u, 0.0f) : ew_op<CUDA_EW_GEGLU>(g, u, 0.0f);
        }
        return;
    }
    __shared__ float red[2][MMV_THREADS / 32][NR];
    if (lane == 0) {
#pragma unroll
        for (int t = 0; t < NR; t++) red[0][warp][t] = gu[0][t], red[1][warp][t] = gu[1][t];
    }
    __syncthreads();
    if (part == 0 && lane < NR && row < n) {
        float g = 0.0f, u = 0.0f;
        for (int p = 0; p < wpr; p++) {
            g += red[0][warp + p][lane];
            u += red[1][warp + p][lane];
        }
        a.y[0][(int64_t)lane * n + row] = GLU == 1 ? ew_op<CUDA_EW_SWIGLU>(g, u, 0.0f) : ew_op<CUDA_EW_GEGLU>(g, u, 0.0f);
    }
}

/* The same with two weight types of one activation kind (glu 0): matrices m < na of type TA, the rest TB
 * (q in Q4_0 with k / v in Q8_0, a Q4_K_M file's Q6_K v): q/k/v stay one launch. The branch is uniform per
 * CTA. */
template <class TA, class TB, int NR, int UF>
static __global__ void __launch_bounds__(MMV_THREADS, UF == 2 ? 12 : (NR <= 2 ? 8 : 4))
    matvec_multi2_kernel(const mv_multi_args a, const cuda_xview x, int wpr, int na) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int part = warp % wpr, sub = warp / wpr;
    const int rpc = (MMV_THREADS / 32) / wpr;
    const int b = (int)blockIdx.x;
    const int m = b < a.cta_end[0] ? 0 : (b < a.cta_end[1] ? 1 : 2);
    const int b0 = m == 0 ? 0 : a.cta_end[m - 1];
    const int64_t row = (int64_t)(b - b0) * rpc + sub;
    float acc[NR];
    if (m < na) matvec_row_part<TA, NR, UF>(a.w[m], x, row, part, wpr, lane, acc);
    else matvec_row_part<TB, NR, UF>(a.w[m], x, row, part, wpr, lane, acc);
    matvec_store<NR>(acc, a.y[m], a.w[m].n, row, warp, lane, part, wpr, a.b[m]);
}

/* Two output rows a warp at 2..8 activation rows: row r and row r + half of the same matrix (w1: the view of its
 * second half), streamed as the GLU streams gate and up, so that each activation value a lane loads serves both
 * rows; at several rows the activation loads, not the weights, bound the mat-vec (H200 at 2 rows: +34 % on a
 * one-row step). Each row's sums are matvec_kernel's: the lane's chunks in the same order, the same reductions. */
template <class T, int NR>
static __global__ void __launch_bounds__(MMV_THREADS, NR <= 2 ? 8 : 4)
    matvec_pair_kernel(const cuda_wview w0, const cuda_wview w1, const cuda_xview x, float *__restrict__ y, int wpr) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int rpc = (MMV_THREADS / 32) / wpr;
    const int64_t row = (int64_t)blockIdx.x * rpc + warp / wpr, half = w0.n, n = 2 * half;
    const int part = warp % wpr;
    constexpr int U1 = mmv_unroll<T, NR>::U, U2 = U1 > 1 ? U1 / 2 : 1;
    float acc[2][NR];
    matvec_rows_part<T, NR, U2, 2>(w0, w1, x, row, part, wpr, lane, acc);
    if (wpr == 1) {
        if (lane == 0 && row < half) {
#pragma unroll
            for (int t = 0; t < NR; t++) y[(int64_t)t * n + row] = acc[0][t], y[(int64_t)t * n + half + row] = acc[1][t];
        }
        return;
    }
    __shared__ float red[2][MMV_THREADS / 32][NR];
    if (lane == 0) {
#pragma unroll
        for (int t = 0; t < NR; t++) red[0][warp][t] = acc[0][t], red[1][warp][t] = acc[1][t];
    }
    __syncthreads();
    if (part == 0 && lane < NR && row < half) {
        float s0 = 0.0f, s1 = 0.0f;
        for (int p = 0; p < wpr; p++) s0 += red[0][warp + p][lane], s1 += red[1][warp + p][lane];
        y[(int64_t)lane * n + row] = s0;
        y[(int64_t)lane * n + half + row] = s1;
    }
}
template <class T> struct mmv_pair_type { static constexpr bool ok = false; };
template <> struct mmv_pair_type<TQ4_0> { static constexpr bool ok = true; };
template <> struct mmv_pair_type<TQ8_0> { static constexpr bool ok = true; };
template <> struct mmv_pair_type<TQ4_K> { static constexpr bool ok = true; };
template <> struct mmv_pair_type<TQ5_K> { static constexpr bool ok = true; };
template <> struct mmv_pair_type<TQ6_K> { static constexpr bool ok = true; };

/* The pair form for a launch of nr rows (QUARREL_CUDA_MMV_PAIR=0: never): the types above, 2..8 rows, an even row
 * count; *w1 is the second half's view (each plane's blocks moved on by half the rows). */
template <class T>
static bool matvec_pair_views(const cuda_wview *w, int32_t nr, cuda_wview *w0, cuda_wview *w1) {
    if (!mmv_pair_type<T>::ok || nr < 2 || nr > 8 || w->n % 2 || !cuda_tune_mmv_pair()) return false;
    const cuda_plane_desc pd = qr_cuda_plane_desc((qr_type)w->type);
    if (pd.n_planes == 0 || pd.block <= 1) return false;
    *w0 = *w1 = *w;
    w0->n = w1->n = w->n / 2;
    const int64_t shift = w0->n * w->nb; /* blocks */
    w1->p0 = w->p0 + shift * pd.size[0];
    w1->p1 = w->p1 ? w->p1 + shift * pd.size[1] : nullptr;
    w1->p2 = w->p2 ? w->p2 + shift * pd.size[2] : nullptr;
    return true;
}

template <class T>
static cudaError_t launch_matvec(const cuda_wview *w, const cuda_xview *x, int32_t nr, float *y, int32_t wpr, bool pdl,
                                 cudaStream_t stream) {
    const int rpc = (MMV_THREADS / 32) / wpr;
    cuda_wview p0, p1;
    if constexpr (mmv_pair_type<T>::ok)
    if (matvec_pair_views<T>(w, nr, &p0, &p1)) {
        const dim3 pgrid((unsigned)((p0.n + rpc - 1) / rpc)), pblock(MMV_THREADS);
        const cuda_xview xv = *x;
        switch (nr) {
#define CASE(N) \
    case N: return launch_k(matvec_pair_kernel<T, N>, pgrid, pblock, 0, stream, pdl, p0, p1, xv, y, (int)wpr);
            CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7) CASE(8)
#undef CASE
        default: break;
        }
    }
    const dim3 grid((unsigned)((w->n + rpc - 1) / rpc)), block(MMV_THREADS);
    const cuda_wview wv = *w;
    const cuda_xview xv = *x;
    switch (nr) {
#define CASE(N) \
    case N: return launch_k(matvec_kernel<T, N>, grid, block, 0, stream, pdl, wv, xv, y, (int)wpr);
        CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7) CASE(8)
#undef CASE
    default: return cudaErrorInvalidValue;
    }
}

extern "C" cudaError_t qr_cuda_matvec(const cuda_wview *w, const cuda_xview *x, int32_t nr, float *y, int32_t wpr,
                                      bool pdl, cudaStream_t stream) {
    if (wpr != 1 && wpr != 2 && wpr != 4) return cudaErrorInvalidValue;
    switch ((qr_type)w->type) {
#define TY(E, T) \
    case E: return launch_matvec<T>(w, x, nr, y, wpr, pdl, stream);
    MMV_TYPES(TY)
#undef TY
    default: return cudaErrorInvalidValue;
    }
}

/* Whether a one-row multi-matrix launch of `ctas` CTAs over a 32-value format takes the light form: 2 chunks a
 * lane in flight instead of 4, 40 registers, 12 CTAs an SM instead of 8, for launches of up to two such waves
 * (q/k/v; a small model's gate/up): more of the grid resident, issuing its first loads before the dependency
 * wait. H100 tg128: tinyllama Q4_0 +3.8 % (q/k/v) and +4.6 % more (gate/up), mistral-7b Q4_0 +1.7 % (q/k/v;
 * its gate/up, 7168 CTAs, lost 0.8 %), mixtral q/k/v +1.5 %. QUARREL_CUDA_MMV_U2=0 turns it off. */
/* The current device's SM count (0 when it cannot be read), looked up once. */
static int sm_count() {
    static int n = -1;
    if (n < 0) {
        int d = 0, v = 0;
        const bool ok = cudaGetDevice(&d) == cudaSuccess &&
                        cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, d) == cudaSuccess;
        n = ok ? v : 0;
    }
    return n;
}

static bool mmv_u2(int32_t ctas) {
    const int n_sm = sm_count();
    return cuda_tune_mmv_u2() && n_sm > 0 && ctas <= 2 * 12 * n_sm;
}

/* The arguments of a multi-matrix launch of rpc rows per CTA; returns the CTA count. */
static int32_t multi_args(const cuda_wview *w, int32_t n_mat, float *const *y, const float *const *b, int rpc, int glu,
                          mv_multi_args *a) {
    *a = mv_multi_args{};
    int32_t ctas = 0;
    for (int m = 0; m < n_mat; m++) {
        a->w[m] = w[m];
        a->y[m] = y[m];
        a->b[m] = b ? b[m] : nullptr;
        ctas += glu && m > 0 ? 0 : (int32_t)((w[m].n + rpc - 1) / rpc); /* GLU: rows of gate and up together */
        a->cta_end[m] = ctas;
    }
    for (int m = n_mat; m < QR_CUDA_MULTI_MAX; m++) a->cta_end[m] = ctas;
    return ctas;
}

/* The GLU (gate / up, glu 1 swiglu or 2 geglu) in the pair form at 2..4 activation rows: rows r and r + n/2 of both
 * matrices in one warp (g1 / u1: the second halves' views), every activation load serving four rows; y as
 * matvec_multi_kernel's GLU writes it, each value from the same sums. */
template <class T, int NR, int GLU>
static __global__ void __launch_bounds__(MMV_THREADS, 4)
    matvec_glu_pair_kernel(const cuda_wview g0, const cuda_wview u0, const cuda_wview g1, const cuda_wview u1,
                           const cuda_xview x, float *__restrict__ y, int wpr) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int rpc = (MMV_THREADS / 32) / wpr, part = warp % wpr;
    const int64_t row = (int64_t)blockIdx.x * rpc + warp / wpr, half = g0.n, n = 2 * half;
    const cuda_wview w[4] = {g0, u0, g1, u1};
    float acc[4][NR];
    matvec_rows_part4<T, NR>(w, x, row, part, wpr, lane, acc);
    __shared__ float red[4][MMV_THREADS / 32][NR];
    if (wpr > 1) {
        if (lane == 0) {
#pragma unroll
            for (int m = 0; m < 4; m++)
#pragma unroll
                for (int t = 0; t < NR; t++) red[m][warp][t] = acc[m][t];
        }
        __syncthreads();
    }
    if (part != 0 || lane >= NR || row >= half) return;
    float v[4];
    if (wpr == 1) {
#pragma unroll
        for (int m = 0; m < 4; m++) {
            v[m] = acc[m][0];
#pragma unroll
            for (int t = 1; t < NR; t++)
                if (lane == t) v[m] = acc[m][t];
        }
    } else {
        for (int m = 0; m < 4; m++) {
            v[m] = 0.0f;
            for (int p = 0; p < wpr; p++) v[m] += red[m][warp + p][lane];
        }
    }
    y[(int64_t)lane * n + row] = GLU == 1 ? ew_op<CUDA_EW_SWIGLU>(v[0], v[1], 0.0f) : ew_op<CUDA_EW_GEGLU>(v[0], v[1], 0.0f);
    y[(int64_t)lane * n + half + row] =
        GLU == 1 ? ew_op<CUDA_EW_SWIGLU>(v[2], v[3], 0.0f) : ew_op<CUDA_EW_GEGLU>(v[2], v[3], 0.0f);
}

template <class T>
static cudaError_t launch_matvec_multi(const cuda_wview *w, int32_t n_mat, const cuda_xview *x, int32_t nr,
                                       float *const *y, const float *const *b, int32_t wpr, int glu, bool pdl,
                                       cudaStream_t stream) {
    mv_multi_args a;
    const int32_t ctas = multi_args(w, n_mat, y, b, (MMV_THREADS / 32) / wpr, glu, &a);
    const dim3 grid((unsigned)ctas), block(MMV_THREADS);
    const cuda_xview xv = *x;
    cuda_wview g0, g1, u0, u1;
    if constexpr (mmv_pair_type<T>::ok)
    if (glu && n_mat == 2 && w[0].n == w[1].n && matvec_pair_views<T>(&w[0], nr, &g0, &g1) &&
        matvec_pair_views<T>(&w[1], nr, &u0, &u1)) { /* the pair form */
        const dim3 pgrid((unsigned)((g0.n + (MMV_THREADS / 32) / wpr - 1) / ((MMV_THREADS / 32) / wpr)));
        switch (nr * 4 + glu) {
#define CASE(N) \
    case N * 4 + 1: return launch_k(matvec_glu_pair_kernel<T, N, 1>, pgrid, block, 0, stream, pdl, g0, u0, g1, u1, xv, y[0], (int)wpr); \
    case N * 4 + 2: return launch_k(matvec_glu_pair_kernel<T, N, 2>, pgrid, block, 0, stream, pdl, g0, u0, g1, u1, xv, y[0], (int)wpr);
            CASE(2) CASE(3) CASE(4)
#undef CASE
        default: break;
        }
    }
    switch (nr * 4 + glu) { /* instantiated for the decode sizes only: qr_cuda_multi_supported */
#define CASE(N) \
    case N * 4 + 0:                                                                                                   \
        if (N == 1 && T::CPB == 1 && mmv_u2(ctas))                                                                   \
            return launch_k(matvec_multi_kernel<T, 1, 0, 2>, grid, block, 0, stream, pdl, a, xv, (int)wpr);        \
        return launch_k(matvec_multi_kernel<T, N, 0>, grid, block, 0, stream, pdl, a, xv, (int)wpr);                 \
    case N * 4 + 1:                                                                                                   \
        if (N == 1 && T::CPB == 1 && mmv_u2(ctas))                                                                   \
            return launch_k(matvec_multi_kernel<T, 1, 1, 2>, grid, block, 0, stream, pdl, a, xv, (int)wpr);        \
        return launch_k(matvec_multi_kernel<T, N, 1>, grid, block, 0, stream, pdl, a, xv, (int)wpr);        \
    case N * 4 + 2:                                                                                                   \
        if (N == 1 && T::CPB == 1 && mmv_u2(ctas))                                                                   \
            return launch_k(matvec_multi_kernel<T, 1, 2, 2>, grid, block, 0, stream, pdl, a, xv, (int)wpr);        \
        return launch_k(matvec_multi_kernel<T, N, 2>, grid, block, 0, stream, pdl, a, xv, (int)wpr);
        CASE(1) CASE(2) CASE(3) CASE(4)
#undef CASE
    default: return cudaErrorInvalidValue;
    }
}

/* The type pairs of matvec_multi2_kernel, as X(type A, traits A, type B, traits B). */
#define MMV_PAIRS(X)                                                                                            \
    X(QR_TYPE_Q4_0, TQ4_0, QR_TYPE_Q8_0, TQ8_0) X(QR_TYPE_Q4_K, TQ4_K, QR_TYPE_Q6_K, TQ6_K)                   \
    X(QR_TYPE_Q5_K, TQ5_K, QR_TYPE_Q6_K, TQ6_K)

extern "C" bool qr_cuda_multi_pair_supported(int32_t type_a, int32_t type_b) {
#define PAIR(EA, TA, EB, TB) if (type_a == EA && type_b == EB) return true;
    MMV_PAIRS(PAIR)
#undef PAIR
    return false;
}

template <class TA, class TB>
static cudaError_t launch_matvec_multi2(const cuda_wview *w, int32_t n_mat, int32_t na, const cuda_xview *x, int32_t nr,
                                        float *const *y, const float *const *b, int32_t wpr, bool pdl,
                                        cudaStream_t stream) {
    mv_multi_args a;
    const int32_t ctas = multi_args(w, n_mat, y, b, (MMV_THREADS / 32) / wpr, 0, &a);
    const dim3 grid((unsigned)ctas), block(MMV_THREADS);
    const cuda_xview xv = *x;
    switch (nr) {
#define CASE(N) \
    case N: return launch_k(matvec_multi2_kernel<TA, TB, N, 0>, grid, block, 0, stream, pdl, a, xv, (int)wpr, (int)na);
        CASE(2) CASE(3) CASE(4)
    case 1:
        if (TA::CPB == 1 && TB::CPB == 1 && mmv_u2(ctas))
            return launch_k(matvec_multi2_kernel<TA, TB, 1, 2>, grid, block, 0, stream, pdl, a, xv, (int)wpr, (int)na);
        return launch_k(matvec_multi2_kernel<TA, TB, 1, 0>, grid, block, 0, stream, pdl, a, xv, (int)wpr, (int)na);
#undef CASE
    default: return cudaErrorInvalidValue;
    }
}

extern "C" cudaError_t qr_cuda_matvec_multi(const cuda_wview *w, int32_t n_mat, const cuda_xview *x, int32_t nr,
                                            float *const *y, const float *const *b, int32_t wpr, int glu, bool pdl,
                                            cudaStream_t stream) {
    if (!qr_cuda_multi_supported(nr, glu) || n_mat < 1 || n_mat > QR_CUDA_MULTI_MAX) return cudaErrorInvalidValue;
    if (glu && (n_mat != 2 || w[0].n != w[1].n || (wpr != 1 && wpr != 2) || b)) return cudaErrorInvalidValue;
    if (wpr != 1 && wpr != 2 && wpr != 4) return cudaErrorInvalidValue;
    int32_t na = 1; /* the leading matrices of w[0]'s type; the rest must share one other type (a pair) */
    while (na < n_mat && w[na].type == w[0].type) na++;
    for (int m = 1; m < n_mat; m++)
        if (w[m].k != w[0].k || (m > na && w[m].type != w[na].type)) return cudaErrorInvalidValue;
    if (na < n_mat) {
        if (glu) return cudaErrorInvalidValue;
#define PAIR(EA, TA, EB, TB) \
    if (w[0].type == EA && w[na].type == EB) return launch_matvec_multi2<TA, TB>(w, n_mat, na, x, nr, y, b, wpr, pdl, stream);
        MMV_PAIRS(PAIR)
#undef PAIR
        return cudaErrorInvalidValue;
    }
    switch ((qr_type)w[0].type) {
#define TY(E, T) \
    case E: return launch_matvec_multi<T>(w, n_mat, x, nr, y, b, wpr, glu, pdl, stream);
    MMV_TYPES(TY)
#undef TY
    default: return cudaErrorInvalidValue;
    }
}

extern "C" bool qr_cuda_multi_supported(int32_t nr, int glu) { return nr >= 1 && nr <= 4 && glu >= 0 && glu <= 2; }

/* ---- the expert mat-vec (MoE decode) ---- */

/* Activation row t of a prepared view (the layout of quant_dev.cuh: rows of k codes, scales per 32 or
 * 256, Q8_1 sums per 32, 16-sums; or k f16 / bf16 / f32 values). */
template <class T>
static __device__ __forceinline__ cuda_xview xview_row(cuda_xview x, int64_t t) {
    const int64_t k = x.k;
    if (T::ACT <= 1) {
        x.q += t * k;
        x.d += t * (T::ACT == 0 ? k / 32 : k / 256);
        x.s += t * (k / 32);
        x.g += t * (k / 16);
    } else {
        x.h = (const uint8_t *)x.h + t * k * (T::ACT == 4 ? 4 : 2);
    }
    return x;
}

/* Grid (CTAs over the n_out rows, slots). Slot s uses expert ids[s] (rows e * n_out .. of every w[m],
 * whose n is n_expert * n_out) and activation row s (x_per_slot) or s / n_used. GLU: sub-groups
 * alternate gate (even) and up (odd) of the same rows, and y = act(gate + bg, up + bu); otherwise
 * y = w[0] x + b[0], then act when act >= 0 (relu^2 experts without a gate). */
template <class T, int GLU>
static __global__ void __launch_bounds__(MMV_THREADS, 8)
    matvec_id_kernel(const qr_cuda_mv_id_args a, const cuda_xview x, int wpr) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int part = warp % wpr, sub = warp / wpr, rpc = (MMV_THREADS / 32) / wpr;
    const int s = (int)blockIdx.y;
    /* the expert ids come from the routing kernel: unless they are known complete, nothing can be
     * loaded before them (early: read through L2, the routing kernel's writes are there) */
    if (!a.ids_early) pdl_wait();
    pdl_launch_dependents();
    const int e = a.ids_early ? __ldcg(a.ids + s) : a.ids[s];
    const int m = GLU ? (sub & 1) : 0;
    const int64_t i = GLU ? (int64_t)blockIdx.x * (rpc / 2) + (sub >> 1) : (int64_t)blockIdx.x * rpc + sub;
    const cuda_wview &w = a.w[m];
    const bool valid = i < a.n_out && e >= 0 && (int64_t)e * a.n_out < w.n;
    const int64_t row = valid ? (int64_t)e * a.n_out + i : w.n;
    const cuda_xview xs = xview_row<T>(x, a.x_per_slot ? s : s / a.n_used);
    float acc[1];
    matvec_row_part<T, 1>(w, xs, row, part, wpr, lane, acc);
    __shared__ float red[MMV_THREADS / 32];
    if (lane == 0) red[warp] = acc[0];
    __syncthreads();
    if (m != 0 || part != 0 || lane != 0 || !valid) return;
    float g = 0.0f;
    for (int p = 0; p < wpr; p++) g += red[warp + p];
    const int64_t bi = (int64_t)e * a.n_out + i;
    if (a.bias[0]) g = __fadd_rn(g, a.bias[0][bi]);
    float r = g;
    if (GLU) {
        float u = 0.0f;
        for (int p = 0; p < wpr; p++) u += red[warp + wpr + p];
        if (a.bias[1]) u = __fadd_rn(u, a.bias[1][bi]);
        r = glu_act(a.act, g, u);
    } else if (a.act >= 0) {
        r = glu_act(a.act, g, 0.0f);
    }
    a.y[(int64_t)s * a.n_out + i] = r;
}

/* GLU at decode sizes, persistent: a grid of QR_CUDA_GU_PERSIST_CTAS (6) CTAs an SM (one wave; 80 registers, no
 * spills; 7 CTAs, 72 registers with a few spilled, measured -2.3 % on mixtral and was removed, session 17); warp gw
 * takes the items (slot, row) gw, gw + GW, ... in order, streaming the item's gate row and up row together (twice the
 * loads in flight a lane of matvec_id_kernel), and writes act(gate + bg, up + bu). No CTA launches or
 * ramps between rows: on the H200 the one-row-a-warp grid (14 waves of short CTAs for mixtral) left the
 * memory system idle between CTAs (docs/cuda-notes.md). The same sums bit for bit (each lane visits its
 * chunks in matvec_row_part's order). */
#define QR_CUDA_GU_PERSIST_CTAS 6

template <class T>
static __global__ void __launch_bounds__(MMV_THREADS, QR_CUDA_GU_PERSIST_CTAS)
    matvec_id_glu_persist_kernel(const qr_cuda_mv_id_args a, const cuda_xview x, int32_t n_slots) {
    constexpr int U = mmv_unroll<T, 1>::U;
    const int lane = threadIdx.x & 31;
    if (!a.ids_early) pdl_wait(); /* as matvec_id_kernel */
    pdl_launch_dependents();
    const int64_t GW = (int64_t)gridDim.x * (MMV_THREADS / 32);
    const cuda_wview &wg = a.w[0], &wu = a.w[1];
    const int nch = (int)wg.nb * T::CPB;
    bool waited = false;
    /* item gw: slot s, row i; the next item is GW rows on (n_out may be smaller than GW) */
    int64_t i = (int64_t)blockIdx.x * (MMV_THREADS / 32) + (threadIdx.x >> 5);
    int s = 0, es = -1, e = -1;
    while (i >= a.n_out) i -= a.n_out, s++;
    for (; s < n_slots;) {
        if (s != es) { /* the slot's expert, read once per slot */
            es = s;
            e = a.ids_early ? __ldcg(a.ids + s) : a.ids[s];
        }
        const bool valid = e >= 0 && (int64_t)e * a.n_out < wg.n;
        const cuda_xview xs = xview_row<T>(x, a.x_per_slot ? s : s / a.n_used);
        float ag[1] = {0.0f}, au[1] = {0.0f};
        if (valid) {
            const int64_t gbase = ((int64_t)e * a.n_out + i) * wg.nb;
            for (int c0 = lane; c0 < nch; c0 += 32 * U) {
                typename T::W g[U], u[U];
#pragma unroll
                for (int k = 0; k < U; k++) {
                    const int c = c0 + k * 32;
                    if (c < nch) {
                        g[k] = T::load(wg, gbase + c / T::CPB, c % T::CPB);
                        u[k] = T::load(wu, gbase + c / T::CPB, c % T::CPB);
                    }
                }
                if (!waited) { /* the weights are in flight: now wait for the activations */
                    pdl_wait();
                    waited = true;
                }
#pragma unroll
                for (int k = 0; k < U; k++) {
                    const int c = c0 + k * 32;
                    if (c < nch) {
                        T::template dot<1>(g[k], xs, c / T::CPB, c % T::CPB, ag);
                        T::template dot<1>(u[k], xs, c / T::CPB, c % T::CPB, au);
                    }
                }
            }
        }
        float gs = warp_sum(ag[0]), us = warp_sum(au[0]);
        if (lane == 0 && valid) {
            const int64_t bi = (int64_t)e * a.n_out + i;
            if (a.bias[0]) gs = __fadd_rn(gs, a.bias[0][bi]);
            if (a.bias[1]) us = __fadd_rn(us, a.bias[1][bi]);
            a.y[(int64_t)s * a.n_out + i] = glu_act(a.act, gs, us);
        }
        i += GW;
        while (i >= a.n_out) i -= a.n_out, s++;
    }
    if (!waited) pdl_wait();
}

template <class T>
static cudaError_t launch_matvec_id(const qr_cuda_mv_id_args *a, int glu, const cuda_xview *x, int32_t n_slots,
                                    int32_t wpr, bool pdl, cudaStream_t stream) {
    const int rpc = (MMV_THREADS / 32) / wpr / (glu ? 2 : 1);
    const dim3 grid((unsigned)((a->n_out + rpc - 1) / rpc), (unsigned)n_slots), block(MMV_THREADS);
    const cuda_xview xv = *x;
    if (glu && wpr == 1 && a->variant == QR_CUDA_GU_PERSIST_CTAS) { /* the persistent kernel */
        const int64_t warps = a->n_out * n_slots;
        const int64_t need = (warps + MMV_THREADS / 32 - 1) / (MMV_THREADS / 32),
                      wave = (int64_t)(sm_count() > 0 ? sm_count() : 1) * QR_CUDA_GU_PERSIST_CTAS,
                      ctas = need < wave ? need : wave;
        return launch_k(matvec_id_glu_persist_kernel<T>, dim3((unsigned)ctas), block, 0, stream, pdl, *a, xv, n_slots);
    }
    if (glu) return launch_k(matvec_id_kernel<T, 1>, grid, block, 0, stream, pdl, *a, xv, (int)wpr);
    return launch_k(matvec_id_kernel<T, 0>, grid, block, 0, stream, pdl, *a, xv, (int)wpr);
}

extern "C" cudaError_t qr_cuda_matvec_id(const qr_cuda_mv_id_args *a, int glu, const cuda_xview *x, int32_t n_slots,
                                         int32_t wpr, bool pdl, cudaStream_t stream) {
    if (n_slots <= 0) return cudaSuccess;
    if (n_slots > 65535 || (wpr != 1 && wpr != 2 && (glu || wpr != 4)) || a->n_out <= 0) return cudaErrorInvalidValue;
    if (glu && (a->w[1].type != a->w[0].type || a->w[1].k != a->w[0].k || a->w[1].n != a->w[0].n))
        return cudaErrorInvalidValue;
    switch ((qr_type)a->w[0].type) {
#define TY(E, T) \
    case E: return launch_matvec_id<T>(a, glu, x, n_slots, wpr, pdl, stream);
    MMV_TYPES(TY)
#undef TY
    default: return cudaErrorInvalidValue;
    }
}

/* ---- the grouped expert mat-vec of prefill: tiles of up to 8 sorted activation rows of one expert ---- */

/* Grid (CTAs over the n_out rows, tiles). Tile b = (expert, first sorted row p0, rows nr <= 8): y[p0 + t] =
 * W[expert] . x[p0 + t] for t < nr; x holds the sorted rows with 7 rows of slack after the last. */
template <class T>
static __global__ void __launch_bounds__(MMV_THREADS, 4)
    matvec_tiles_kernel(const cuda_wview w, const cuda_xview x, const int4 *__restrict__ tiles, int64_t n_out,
                        float *__restrict__ y, int wpr) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int part = warp % wpr, rpc = (MMV_THREADS / 32) / wpr;
    const int4 tl = tiles[blockIdx.y];
    const int64_t i = (int64_t)blockIdx.x * rpc + warp / wpr;
    const int64_t row = i < n_out ? (int64_t)tl.x * n_out + i : w.n;
    const cuda_xview xs = xview_row<T>(x, tl.y);
    float acc[8];
    matvec_row_part<T, 8>(w, xs, row, part, wpr, lane, acc);
    __shared__ float red[MMV_THREADS / 32][8];
    if (lane == 0) {
#pragma unroll
        for (int t = 0; t < 8; t++) red[warp][t] = acc[t];
    }
    __syncthreads();
    if (part == 0 && lane < tl.z && i < n_out) {
        float s = 0.0f;
        for (int p = 0; p < wpr; p++) s += red[warp + p][lane];
        y[(int64_t)(tl.y + lane) * n_out + i] = s;
    }
}

extern "C" cudaError_t qr_cuda_matvec_tiles(const cuda_wview *w, const cuda_xview *x, const int32_t *tiles,
                                            int32_t n_tiles, int64_t n_out, float *y, int32_t wpr, cudaStream_t stream) {
    if (n_tiles <= 0) return cudaSuccess;
    if (n_tiles > 65535 || (wpr != 1 && wpr != 2 && wpr != 4)) return cudaErrorInvalidValue;
    const int rpc = (MMV_THREADS / 32) / wpr;
    const dim3 grid((unsigned)((n_out + rpc - 1) / rpc), (unsigned)n_tiles), block(MMV_THREADS);
    const cuda_wview wv = *w;
    const cuda_xview xv = *x;
    switch ((qr_type)w->type) {
#define TY(E, T) \
    case E: matvec_tiles_kernel<T><<<grid, block, 0, stream>>>(wv, xv, (const int4 *)tiles, n_out, y, (int)wpr); break;
    MMV_TYPES(TY)
#undef TY
    default: return cudaErrorInvalidValue;
    }
    QR_CUDA_CHECK_LAUNCH();
}

/* ---- the expert down projection + weighted sum (MoE decode) ---- */

/* The down + combine kernels' epilogue: slot j's row sum yj (+ its expert's bias), weighted, folded into the token's
 * sum in slot order (as moe_combine sums); then lane 0 stores the sum (+ add). */
static __device__ __forceinline__ float dc_fold(const qr_cuda_mv_id_args &a, float yj, bool ok, int e, int64_t i,
                                                const float *weights, int s, int j, float sum) {
    if (a.bias[0] && ok) yj = __fadd_rn(yj, a.bias[0][(int64_t)e * a.n_out + i]);
    const float wy = __fmul_rn(yj, weights[s]);
    return j == 0 ? wy : __fadd_rn(sum, wy);
}
static __device__ __forceinline__ void dc_store(const qr_cuda_mv_id_args &a, int r, int64_t i, int lane, float sum,
                                                const float *add) {
    if (lane != 0 || i >= a.n_out) return;
    const int64_t o = (int64_t)r * a.n_out + i;
    a.y[o] = add ? __fadd_rn(sum, add[o]) : sum;
}

/* The start of the slot-unrolled down + combine kernels: the ids' dependency wait (as matvec_id_kernel), then token
 * slots s0 .. s0 + NU - 1's experts ev, whether row i of each exists (ok) and its first block (rb; 0 when not). */
template <int NU>
static __device__ __forceinline__ void dc_slots(const qr_cuda_mv_id_args &a, int s0, int64_t i, int *ev, bool *ok,
                                                int64_t *rb) {
    if (!a.ids_early) pdl_wait(); /* the expert ids come from the routing kernel */
    pdl_launch_dependents();
    const cuda_wview &w = a.w[0];
#pragma unroll
    for (int j = 0; j < NU; j++) {
        const int e = a.ids_early ? __ldcg(a.ids + s0 + j) : a.ids[s0 + j];
        ev[j] = e;
        ok[j] = i < a.n_out && e >= 0 && (int64_t)e * a.n_out < w.n;
        rb[j] = ok[j] ? ((int64_t)e * a.n_out + i) * w.nb : 0;
    }
}

/* Grid (CTAs of 4 output rows, tokens); one warp per output row i of token r: for each slot j in order,
 * the row of expert ids[r][j] dotted with activation row r * n_used + j (+ bias), weighted and summed as
 * moe_combine sums (then + add[r][i]). */
template <class T>
static __global__ void __launch_bounds__(MMV_THREADS, 8)
    matvec_id_combine_kernel(const qr_cuda_mv_id_args a, const cuda_xview x, const float *__restrict__ weights,
                             const float *add) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int r = (int)blockIdx.y;
    if (!a.ids_early) pdl_wait(); /* the expert ids come from the routing kernel (as matvec_id_kernel) */
    pdl_launch_dependents();
    const int64_t i = (int64_t)blockIdx.x * (MMV_THREADS / 32) + warp;
    const cuda_wview &w = a.w[0];
    float acc_sum = 0.0f;
    for (int j = 0; j < a.n_used; j++) {
        const int s = r * a.n_used + j, e = a.ids_early ? __ldcg(a.ids + s) : a.ids[s];
        const bool valid = i < a.n_out && e >= 0 && (int64_t)e * a.n_out < w.n;
        const int64_t row = valid ? (int64_t)e * a.n_out + i : w.n;
        float acc[1];
        matvec_row_part<T, 1>(w, xview_row<T>(x, s), row, 0, 1, lane, acc);
        acc_sum = dc_fold(a, acc[0], valid, e, i, weights, s, j, acc_sum);
    }
    dc_store(a, r, i, lane, acc_sum, add);
}

/* The same sums for NU slots a token, software-pipelined: each warp walks its slots in order, U chunks a lane a
 * step, the next step's loads (the next slot's first step after a slot's last) issued before this step's dot
 * products, so that a warp always has loads in flight. The slots are unrolled (their rows, validity and sums
 * stay in registers). Each lane visits its chunks in matvec_row_part's order: bit-identical to the plain kernel
 * (QUARREL_CUDA_DC_PIPE). */
template <class T, int NU>
static __global__ void __launch_bounds__(MMV_THREADS, 8)
    matvec_id_combine_pipe_kernel(const qr_cuda_mv_id_args a, const cuda_xview x, const float *__restrict__ weights,
                                  const float *add) {
    constexpr int U = 2;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int r = (int)blockIdx.y, s0 = r * NU;
    const int64_t i = (int64_t)blockIdx.x * (MMV_THREADS / 32) + warp;
    const cuda_wview &w = a.w[0];
    int64_t rb[NU];
    int ev[NU];
    bool ok[NU];
    dc_slots<NU>(a, s0, i, ev, ok, rb);
    const int nch = (int)w.nb * T::CPB, steps = (nch + 32 * U - 1) / (32 * U);
    typename T::W cur[U], nxt[U];
    auto issue = [&](int64_t base, bool valid, int st, typename T::W *buf) {
        if (!valid) return;
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = st * 32 * U + u * 32 + lane;
            if (c < nch) buf[u] = T::load(w, base + c / T::CPB, c % T::CPB);
        }
    };
    issue(rb[0], ok[0], 0, cur);
    pdl_wait(); /* the weights are in flight: now wait for the activations */
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < NU; j++) {
        const cuda_xview xs = xview_row<T>(x, s0 + j);
        float acc[1] = {0.0f};
        for (int st = 0; st < steps; st++) {
            if (st + 1 < steps) issue(rb[j], ok[j], st + 1, nxt);
            else if (j + 1 < NU) /* the next slot's first step (the index clamp only keeps the unrolled last slot's
                                  * dead branch in bounds) */
                issue(rb[j + 1 < NU ? j + 1 : j], ok[j + 1 < NU ? j + 1 : j], 0, nxt);
            if (ok[j]) {
#pragma unroll
                for (int u = 0; u < U; u++) {
                    const int c = st * 32 * U + u * 32 + lane;
                    if (c < nch) T::template dot<1>(cur[u], xs, c / T::CPB, c % T::CPB, acc);
                }
            }
#pragma unroll
            for (int u = 0; u < U; u++) cur[u] = nxt[u];
        }
        sum = dc_fold(a, warp_sum(acc[0]), ok[j], ev[j], i, weights, s0 + j, j, sum);
    }
    dc_store(a, r, i, lane, sum, add);
}

/* The same sums when a row is at most 32 M chunks (small experts: qwen3moe's k = 768 is 24 K-quant chunks, a
 * deepseek2-lite row of 1408 is 44 of a 32-value format): every slot's chunks are loaded before any is used, so a
 * lane has NU x M loads in flight where the plain kernel waits one round trip a slot; then every slot's dot
 * products (no shuffle between them, so that the activation loads of all slots go out together), then the warp
 * sums. An invalid slot's chunks stay zero (its products add +0, as the plain kernel's skipped row). Each lane
 * holds the plain kernel's chunks (c = lane + 32 m) and adds them in its order, the slots summed in order:
 * bit-identical to it (QUARREL_CUDA_DC_PIPE=0 gives the plain kernel). */
template <class T, int NU, int M>
static __global__ void __launch_bounds__(MMV_THREADS, 4)
    matvec_id_combine_wide_kernel(const qr_cuda_mv_id_args a, const cuda_xview x, const float *__restrict__ weights,
                                  const float *add) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int r = (int)blockIdx.y, s0 = r * NU;
    const int64_t i = (int64_t)blockIdx.x * (MMV_THREADS / 32) + warp;
    const cuda_wview &w = a.w[0];
    const int nch = (int)w.nb * T::CPB;
    int64_t rb[NU];
    int ev[NU];
    bool ok[NU];
    dc_slots<NU>(a, s0, i, ev, ok, rb);
    typename T::W buf[NU][M] = {};
#pragma unroll
    for (int j = 0; j < NU; j++)
#pragma unroll
        for (int m = 0; m < M; m++) {
            const int c = m * 32 + lane;
            if (ok[j] && c < nch) buf[j][m] = T::load(w, rb[j] + c / T::CPB, c % T::CPB);
        }
    pdl_wait(); /* the weights are in flight: now wait for the activations */
    float acc[NU][1];
#pragma unroll
    for (int j = 0; j < NU; j++) acc[j][0] = 0.0f;
#pragma unroll
    for (int m = 0; m < M; m++) {
        const int c = m * 32 + lane;
        if (c < nch) {
#pragma unroll
            for (int j = 0; j < NU; j++)
                T::template dot<1>(buf[j][m], xview_row<T>(x, s0 + j), c / T::CPB, c % T::CPB, acc[j]);
        }
    }
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < NU; j++) sum = dc_fold(a, warp_sum(acc[j][0]), ok[j], ev[j], i, weights, s0 + j, j, sum);
    dc_store(a, r, i, lane, sum, add);
}

/* The types small experts ship in (the others keep the plain kernel: fewer instantiations). */
template <class T> struct dc_wide_type { static constexpr bool ok = false; };
template <> struct dc_wide_type<TQ4_0> { static constexpr bool ok = true; };
template <> struct dc_wide_type<TQ5_0> { static constexpr bool ok = true; };
template <> struct dc_wide_type<TQ8_0> { static constexpr bool ok = true; };
template <> struct dc_wide_type<TQ4_K> { static constexpr bool ok = true; };
template <> struct dc_wide_type<TQ5_K> { static constexpr bool ok = true; };
template <> struct dc_wide_type<TQ6_K> { static constexpr bool ok = true; };

/* The wide kernel's (slots, chunks a lane) forms; false where none fits. */
template <class T>
static bool launch_dc_wide(const qr_cuda_mv_id_args *a, const cuda_xview &xv, const float *weights, const float *add,
                           dim3 grid, bool pdl, cudaStream_t stream, cudaError_t *err) {
    const int64_t nch = a->w[0].nb * T::CPB;
#define DCW(NU, M)                                                                                                        if (a->n_used == NU && nch <= 32 * M) {                                                                                   *err = launch_k(matvec_id_combine_wide_kernel<T, NU, M>, grid, dim3(MMV_THREADS), 0, stream, pdl, *a, xv,                            weights, add);                                                                                        return true;                                                                                                      }
    DCW(8, 1) DCW(6, 1) DCW(4, 1)
    if constexpr (T::CPB == 1) { /* the K-quants' chunk state spills at 12 a lane */
        DCW(6, 2) DCW(4, 2)
    }
#undef DCW
    return false;
}

extern "C" cudaError_t qr_cuda_matvec_id_combine(const qr_cuda_mv_id_args *a, const cuda_xview *x, const float *weights,
                                                 const float *add, int32_t n_rows, bool pdl, cudaStream_t stream) {
    if (n_rows <= 0) return cudaSuccess;
    if (n_rows > 65535 || a->n_used < 1 || a->n_used > QR_CUDA_COMBINE_MAX_USED) return cudaErrorInvalidValue;
    const dim3 grid((unsigned)((a->n_out + MMV_THREADS / 32 - 1) / (MMV_THREADS / 32)), (unsigned)n_rows);
    const cuda_xview xv = *x;
    switch ((qr_type)a->w[0].type) {
#define TY(E, T) \
    case E:                                                                                                           \
        if (a->variant == 2 && a->n_used == 2)                                                                        \
            return launch_k(matvec_id_combine_pipe_kernel<T, 2>, grid, dim3(MMV_THREADS), 0, stream, pdl, *a, xv,    \
                            weights, add);                                                                            \
        if constexpr (dc_wide_type<T>::ok) {                                                                          \
            cudaError_t err = cudaSuccess;                                                                            \
            if (a->variant == 2 && launch_dc_wide<T>(a, xv, weights, add, grid, pdl, stream, &err)) return err;       \
        }                                                                                                             \
        return launch_k(matvec_id_combine_kernel<T>, grid, dim3(MMV_THREADS), 0, stream, pdl, *a, xv, weights, add);
    MMV_TYPES(TY)
#undef TY
    default: return cudaErrorInvalidValue;
    }
}

