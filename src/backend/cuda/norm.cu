/* norm.cu — row-wise rmsnorm, layernorm and softmax: one CTA per row, sums in double as the CPU's
 * scalar path does, the final scale with IEEE-rounded division and square root. In place is fine:
 * every thread reads only the elements it later writes, and all reductions finish first. */
#include "backend/cuda/cuda_dev.cuh"

#define NORM_THREADS 256

/* y = x / sqrt(mean(x^2) + eps) (* w). */
static __global__ void rmsnorm_kernel(const float *x, const float *__restrict__ w, int64_t dim, float eps, float *y) {
    __shared__ double sh[32];
    const float *xr = x + (int64_t)blockIdx.x * dim;
    float *yr = y + (int64_t)blockIdx.x * dim;
    double sum = 0.0;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) sum += (double)__fmul_rn(xr[i], xr[i]);
    sum = block_sum_d(sum, sh);
    const float mean = (float)(sum / (double)dim);
    const float scale = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
        const float v = __fmul_rn(xr[i], scale);
        yr[i] = w ? __fmul_rn(v, w[i]) : v;
    }
}

/* y = (x - mean) / sqrt(var + eps) (* w) (+ b). */
static __global__ void layernorm_kernel(const float *x, const float *__restrict__ w, const float *__restrict__ b,
                                        int64_t dim, float eps, float *y) {
    __shared__ double sh[32];
    const float *xr = x + (int64_t)blockIdx.x * dim;
    float *yr = y + (int64_t)blockIdx.x * dim;
    double sum = 0.0;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) sum += (double)xr[i];
    sum = block_sum_d(sum, sh);
    const float mean = (float)(sum / (double)dim);
    double sum2 = 0.0;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
        const float v = __fsub_rn(xr[i], mean);
        sum2 += (double)__fmul_rn(v, v);
    }
    sum2 = block_sum_d(sum2, sh);
    const float scale = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn((float)(sum2 / (double)dim), eps)));
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
        float v = __fmul_rn(__fsub_rn(xr[i], mean), scale);
        if (w) v = __fmul_rn(v, w[i]);
        if (b) v = __fadd_rn(v, b[i]);
        yr[i] = v;
    }
}

/* y = exp(x - max) / sum(exp(x - max)). */
static __global__ void softmax_kernel(const float *x, int64_t dim, float *y) {
    __shared__ double shd[32];
    __shared__ float shf[32];
    const float *xr = x + (int64_t)blockIdx.x * dim;
    float *yr = y + (int64_t)blockIdx.x * dim;
    float mx = -INFINITY;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) mx = fmaxf(mx, xr[i]);
    mx = block_max(mx, shf);
    double sum = 0.0;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
        const float e = expf(xr[i] - mx);
        yr[i] = e;
        sum += (double)e;
    }
    sum = block_sum_d(sum, shd);
    const float inv = (float)(1.0 / sum);
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) yr[i] = __fmul_rn(yr[i], inv);
}

extern "C" cudaError_t qr_cuda_rmsnorm(const float *x, const float *w, int64_t n_rows, int64_t dim, float eps,
                                       float *y, cudaStream_t stream) {
    if (n_rows <= 0 || dim <= 0) return cudaSuccess;
    rmsnorm_kernel<<<(unsigned)n_rows, NORM_THREADS, 0, stream>>>(x, w, dim, eps, y);
    QR_CUDA_CHECK_LAUNCH();
}

extern "C" cudaError_t qr_cuda_layernorm(const float *x, const float *w, const float *b, int64_t n_rows, int64_t dim,
                                         float eps, float *y, cudaStream_t stream) {
    if (n_rows <= 0 || dim <= 0) return cudaSuccess;
    layernorm_kernel<<<(unsigned)n_rows, NORM_THREADS, 0, stream>>>(x, w, b, dim, eps, y);
    QR_CUDA_CHECK_LAUNCH();
}

extern "C" cudaError_t qr_cuda_softmax(const float *x, int64_t n_rows, int64_t dim, float *y, cudaStream_t stream) {
    if (n_rows <= 0 || dim <= 0) return cudaSuccess;
    softmax_kernel<<<(unsigned)n_rows, NORM_THREADS, 0, stream>>>(x, dim, y);
    QR_CUDA_CHECK_LAUNCH();
}
