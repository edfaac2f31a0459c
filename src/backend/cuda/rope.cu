/* rope.cu — rotary embedding in place on x[n_tok][n_head][head_dim], normal (adjacent pairs) and NeoX
 * (halves) modes, with frequency factors and YaRN. One CTA per token row: the first n_rot / 2 threads
 * build the row's cos/sin table in shared memory with the CPU's float formula (theta iterated by
 * repeated multiplication, cos/sin through double so fast-math does not approximate them), then all
 * threads rotate the pairs of every head with separately rounded multiplies and adds. */
#include "backend/cuda/cuda_dev.cuh"

#define ROPE_THREADS 256

static __device__ __forceinline__ float yarn_ramp_dev(float low, float high, int i0) {
    const float y = __fdiv_rn((float)(i0 / 2) - low, fmaxf(0.001f, high - low));
    return 1.0f - fminf(1.0f, fmaxf(0.0f, y));
}

static __global__ void rope_kernel(float *x, int32_t n_head, int32_t head_dim, const int32_t *__restrict__ pos,
                                   const cuda_rope_consts c, const float *__restrict__ ff) {
    extern __shared__ float cs[]; /* [n_rot] cos, sin pairs */
    const int r = blockIdx.x;
    const int half = c.n_rot / 2;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        float theta = (float)pos[r];
        for (int j = 0; j < i; j++) theta = __fmul_rn(theta, c.theta_scale);
        const float f = ff ? ff[i] : 1.0f;
        const float theta_extrap = __fdiv_rn(theta, f);
        const float theta_interp = __fmul_rn(c.freq_scale, theta_extrap);
        float th = theta_interp;
        if (c.ext_factor != 0.0f) {
            const float mix = __fmul_rn(yarn_ramp_dev(c.corr0, c.corr1, 2 * i), c.ext_factor);
            th = __fadd_rn(__fmul_rn(theta_interp, __fsub_rn(1.0f, mix)), __fmul_rn(theta_extrap, mix));
        }
        cs[2 * i] = __fmul_rn((float)cos((double)th), c.mscale);
        cs[2 * i + 1] = __fmul_rn((float)sin((double)th), c.mscale);
    }
    __syncthreads();
    float *xr = x + (int64_t)r * n_head * head_dim;
    const int n_pairs = n_head * half;
    for (int p = threadIdx.x; p < n_pairs; p += blockDim.x) {
        const int h = p / half, i = p % half;
        float *xh = xr + (int64_t)h * head_dim;
        const int a = c.mode == QR_ROPE_NEOX ? i : 2 * i;
        const int b = c.mode == QR_ROPE_NEOX ? i + half : 2 * i + 1;
        const float co = cs[2 * i], si = cs[2 * i + 1];
        const float x0 = xh[a], x1 = xh[b];
        xh[a] = __fsub_rn(__fmul_rn(x0, co), __fmul_rn(x1, si));
        xh[b] = __fadd_rn(__fmul_rn(x0, si), __fmul_rn(x1, co));
    }
}

extern "C" cudaError_t qr_cuda_rope(float *x, int32_t n_tok, int32_t n_head, int32_t head_dim, const int32_t *pos,
                                    const cuda_rope_consts *c, const float *freq_factors, cudaStream_t stream) {
    if (n_tok <= 0) return cudaSuccess;
    rope_kernel<<<(unsigned)n_tok, ROPE_THREADS, (size_t)c->n_rot * sizeof(float), stream>>>(x, n_head, head_dim, pos,
                                                                                              *c, freq_factors);
    QR_CUDA_CHECK_LAUNCH();
}
