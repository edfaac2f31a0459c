/* elementwise.cu — swiglu, geglu, add, mul, scale, softcap (one kernel, the op a template parameter;
 * 4 elements per thread with 16-byte accesses when every pointer is 16-byte aligned), and the row
 * gather of gather_outputs. Aliasing between inputs and output is fine: each thread reads its
 * elements before writing them.
 *
 * GELU follows ggml's f16 table exactly: the input is rounded to f16, GELU is evaluated in f32 with
 * the CPU's expression order (tanh through double) and the result rounded to f16.
 */
#include "backend/cuda/act_quant.cuh"
#include "backend/cuda/ew_dev.cuh"

template <int K, bool VEC>
static __global__ void ew_kernel(const float *a, const float *b, float s, int64_t n, float *out) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (VEC) {
        if (i * 4 >= n) return;
        const float4 x = ((const float4 *)a)[i];
        float4 y = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (b) y = ((const float4 *)b)[i];
        ((float4 *)out)[i] = make_float4(ew_op<K>(x.x, y.x, s), ew_op<K>(x.y, y.y, s), ew_op<K>(x.z, y.z, s),
                                         ew_op<K>(x.w, y.w, s));
    } else {
        if (i >= n) return;
        out[i] = ew_op<K>(a[i], b ? b[i] : 0.0f, s);
    }
}

template <int K>
static cudaError_t launch_ew(const float *a, const float *b, float s, int64_t n, float *out, cudaStream_t stream) {
    const bool vec = n % 4 == 0 && ((uintptr_t)a & 15) == 0 && ((uintptr_t)b & 15) == 0 && ((uintptr_t)out & 15) == 0;
    const int threads = 256;
    if (vec) ew_kernel<K, true><<<(unsigned)((n / 4 + threads - 1) / threads), threads, 0, stream>>>(a, b, s, n, out);
    else ew_kernel<K, false><<<(unsigned)((n + threads - 1) / threads), threads, 0, stream>>>(a, b, s, n, out);
    QR_CUDA_CHECK_LAUNCH();
}

extern "C" cudaError_t qr_cuda_elementwise(cuda_ew_kind kind, const float *a, const float *b, float s, int64_t n,
                                           float *out, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    switch (kind) {
    case CUDA_EW_SWIGLU: return launch_ew<CUDA_EW_SWIGLU>(a, b, s, n, out, stream);
    case CUDA_EW_GEGLU: return launch_ew<CUDA_EW_GEGLU>(a, b, s, n, out, stream);
    case CUDA_EW_ADD: return launch_ew<CUDA_EW_ADD>(a, b, s, n, out, stream);
    case CUDA_EW_MUL: return launch_ew<CUDA_EW_MUL>(a, b, s, n, out, stream);
    case CUDA_EW_SCALE: return launch_ew<CUDA_EW_SCALE>(a, NULL, s, n, out, stream);
    case CUDA_EW_SOFTCAP: return launch_ew<CUDA_EW_SOFTCAP>(a, NULL, s, n, out, stream);
    }
    return cudaErrorInvalidValue;
}

/* ---- a GLU that also writes the next GEMM's f16 activations ---- */

/* out = glu(a, b) as ew_kernel, and xh = out's Q8_K values as f16 in matmul_dq.cu's order (qr_cuda_act_q8_as_f16 kind 2):
 * a warp per 256-value block, a lane 8 values held in registers from the loads to both stores. */
template <int K, int AK>
static __global__ void glu_f16_kernel(const float *a, const float *b, int64_t n_blocks, float *out, __half *xh) {
    pdl_enter(); /* (launched with PDL where version 6 is: tune.dq_pdl) */
    const int64_t blk = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (blk >= n_blocks) return;
    const int lane = threadIdx.x & 31;
    const int64_t i = blk * 256 + lane * 8;
    const float4 a0 = *(const float4 *)(a + i), a1 = *(const float4 *)(a + i + 4);
    const float4 b0 = *(const float4 *)(b + i), b1 = *(const float4 *)(b + i + 4);
    const float v[8] = {ew_op<K>(a0.x, b0.x, 0.0f), ew_op<K>(a0.y, b0.y, 0.0f), ew_op<K>(a0.z, b0.z, 0.0f),
                        ew_op<K>(a0.w, b0.w, 0.0f), ew_op<K>(a1.x, b1.x, 0.0f), ew_op<K>(a1.y, b1.y, 0.0f),
                        ew_op<K>(a1.z, b1.z, 0.0f), ew_op<K>(a1.w, b1.w, 0.0f)};
    *(float4 *)(out + i) = make_float4(v[0], v[1], v[2], v[3]);
    *(float4 *)(out + i + 4) = make_float4(v[4], v[5], v[6], v[7]);
    act_q8_vals_as_f16<AK>(v, blk, lane, xh);
}

extern "C" cudaError_t qr_cuda_glu_f16(cuda_ew_kind kind, const float *a, const float *b, int64_t n, float *out, void *xh,
                                       int akind, bool pdl, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    if ((kind != CUDA_EW_SWIGLU && kind != CUDA_EW_GEGLU) || (akind != 1 && akind != 2) || n % 256 ||
        ((uintptr_t)a & 15) || ((uintptr_t)b & 15) || ((uintptr_t)out & 15))
        return cudaErrorInvalidValue;
    const int64_t nb = n / 256;
    const unsigned grid = (unsigned)((nb + 7) / 8);
    __half *h = (__half *)xh;
    const auto k = kind == CUDA_EW_SWIGLU ? (akind == 2 ? glu_f16_kernel<CUDA_EW_SWIGLU, 2> : glu_f16_kernel<CUDA_EW_SWIGLU, 1>)
                                          : (akind == 2 ? glu_f16_kernel<CUDA_EW_GEGLU, 2> : glu_f16_kernel<CUDA_EW_GEGLU, 1>);
    const cudaError_t e = launch_k(k, dim3(grid), dim3(256), 0, stream, pdl, a, b, nb, out, h);
    if (e != cudaSuccess) return e;
    QR_CUDA_CHECK_LAUNCH();
}

/* ---- gather_outputs ---- */

/* Parallel: one CTA per output row (out does not overlap src). */
static __global__ void gather_kernel(const float *__restrict__ src, int64_t dim, const int32_t *__restrict__ rows,
                                     float *__restrict__ out) {
    const float *s = src + (int64_t)rows[blockIdx.x] * dim;
    float *o = out + (int64_t)blockIdx.x * dim;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) o[i] = s[i];
}

/* In place (out overlaps src): one CTA copies the rows in order, as the CPU's memmove loop does. */
static __global__ void gather_seq_kernel(const float *src, int64_t dim, const int32_t *__restrict__ rows, int32_t n_out,
                                         float *out) {
    for (int32_t o = 0; o < n_out; o++) {
        const float *s = src + (int64_t)rows[o] * dim;
        float *d = out + (int64_t)o * dim;
        float buf[8];
        for (int64_t i0 = 0; i0 < dim; i0 += (int64_t)blockDim.x * 8) {
            /* read a whole stretch before anyone writes it (memmove semantics inside a row) */
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const int64_t i = i0 + (int64_t)j * blockDim.x + threadIdx.x;
                buf[j] = i < dim ? s[i] : 0.0f;
            }
            __syncthreads();
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const int64_t i = i0 + (int64_t)j * blockDim.x + threadIdx.x;
                if (i < dim) d[i] = buf[j];
            }
            __syncthreads();
        }
    }
}

extern "C" cudaError_t qr_cuda_gather_rows(const float *src, int64_t dim, const int32_t *rows, int32_t n_out,
                                           float *out, bool in_place, cudaStream_t stream) {
    if (n_out <= 0 || dim <= 0) return cudaSuccess;
    if (in_place) gather_seq_kernel<<<1, 1024, 0, stream>>>(src, dim, rows, n_out, out);
    else gather_kernel<<<(unsigned)n_out, 256, 0, stream>>>(src, dim, rows, out);
    QR_CUDA_CHECK_LAUNCH();
}

/* ---- copy_rows ---- */

/* dst row r = src row r (width floats), a CTA a row and up to 1024 values (grid y for the rest); float4 where both
 * strides and pointers allow. A kernel, not cudaMemcpy2DAsync: inside a decode graph a memcpy node costs several
 * microseconds and breaks the chain of programmatic dependent launches. */
static __global__ void copy_rows_kernel(const float *__restrict__ src, int64_t ss, float *__restrict__ dst, int64_t ds,
                                        int64_t width, bool v4) {
    pdl_enter();
    const float *s = src + (int64_t)blockIdx.x * ss;
    float *d = dst + (int64_t)blockIdx.x * ds;
    const int64_t c0 = (int64_t)blockIdx.y * 1024;
    if (v4) {
        const int64_t i = c0 + (int64_t)threadIdx.x * 4;
        if (i < width) *(float4 *)(d + i) = *(const float4 *)(s + i);
        return;
    }
    for (int64_t i = c0 + threadIdx.x; i < width && i < c0 + 1024; i += blockDim.x) d[i] = s[i];
}

extern "C" cudaError_t qr_cuda_copy_rows(const float *src, int64_t src_stride, float *dst, int64_t dst_stride,
                                         int64_t n_rows, int64_t width, bool pdl, cudaStream_t stream) {
    if (n_rows <= 0 || width <= 0) return cudaSuccess;
    if (n_rows > 0x7fffffff || width > (int64_t)65535 * 1024) return cudaErrorInvalidValue;
    const bool v4 = width % 4 == 0 && src_stride % 4 == 0 && dst_stride % 4 == 0 && ((uintptr_t)src & 15) == 0 &&
                    ((uintptr_t)dst & 15) == 0;
    const dim3 grid((unsigned)n_rows, (unsigned)((width + 1023) / 1024));
    return launch_k(copy_rows_kernel, grid, dim3(v4 ? 256 : 256), 0, stream, pdl, src, src_stride, dst, dst_stride, width, v4);
}
