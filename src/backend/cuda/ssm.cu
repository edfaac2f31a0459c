/* ssm.cu — Mamba2 kernels: the causal depthwise conv1d with its per-sequence rolling state (one thread
 * per channel, rows in order), the selective scan (one thread per (head, channel) of the head, the
 * d_state values of its state row updated in place, rows in order: the recurrent form), and the
 * gated grouped RMSNorm (one block per (row, group)).
 *
 * Correctness-first versions (issue 9, CPU half): prefill runs the recurrence row by row like decode;
 * the chunked SSD scan for long prefills is the GPU speed half. Numerics follow the CPU oracle's
 * order of operations with explicitly rounded float ops (the target builds with fast math); softplus
 * goes through double, so results match the oracle within the lab's tolerance.
 */
#include "backend/cuda/cuda_dev.cuh"

static __device__ __forceinline__ float silu_dev(float x) { return __fdiv_rn(x, __fadd_rn(1.0f, ggml_expf(-x))); }

/* ---- conv1d ---- */

static __global__ void ssm_conv_kernel(const float *__restrict__ x, int64_t x_stride, float *__restrict__ state,
                                       const float *__restrict__ w, const float *__restrict__ b,
                                       const int32_t *__restrict__ seq, int32_t n_tok, int32_t K, int32_t C,
                                       float *__restrict__ out) {
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const float *wc = w + c * K;
    const int64_t slot_sz = (int64_t)(K - 1) * C;
    for (int32_t r = 0; r < n_tok; r++) {
        float *st = state + (int64_t)seq[r] * slot_sz + c;
        const float xin = x[(int64_t)r * x_stride + c];
        float sum = 0.0f;
        for (int32_t k = 0; k < K - 1; k++) sum = __fadd_rn(sum, __fmul_rn(st[(int64_t)k * C], wc[k]));
        sum = __fadd_rn(sum, __fmul_rn(xin, wc[K - 1]));
        for (int32_t k = 0; k < K - 2; k++) st[(int64_t)k * C] = st[(int64_t)(k + 1) * C];
        st[(int64_t)(K - 2) * C] = xin;
        if (b) sum = __fadd_rn(sum, b[c]);
        out[(int64_t)r * C + c] = silu_dev(sum);
    }
}

extern "C" cudaError_t qr_cuda_ssm_conv(const float *x, int64_t x_stride, float *conv_state, const float *w,
                                        const float *b, const int32_t *seq, int32_t n_tok, const qr_ssm_params *p,
                                        float *out, cudaStream_t stream) {
    if (n_tok <= 0) return cudaSuccess;
    const int threads = 128;
    ssm_conv_kernel<<<(unsigned)((p->conv_dim + threads - 1) / threads), threads, 0, stream>>>(
        x, x_stride, conv_state, w, b, seq, n_tok, p->d_conv, p->conv_dim, out);
    QR_CUDA_CHECK_LAUNCH();
}

/* ---- scan ---- */

static __device__ __forceinline__ float softplus_dev(float x) {
    return x > 20.0f ? x : (float)log(1.0 + exp((double)x));
}

/* Thread t = h * head_dim + i. */
static __global__ void ssm_scan_kernel(float *__restrict__ state, const float *__restrict__ xbc,
                                       const float *__restrict__ dt, int64_t dt_stride, const float *__restrict__ dt_bias,
                                       const float *__restrict__ A, const float *__restrict__ D,
                                       const int32_t *__restrict__ seq, int32_t n_tok, qr_ssm_params p,
                                       float *__restrict__ y) {
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (int64_t)p.n_head * p.head_dim) return;
    const int32_t h = (int32_t)(t / p.head_dim), N = p.d_state, g = h / (p.n_head / p.n_group);
    const int64_t slot_sz = (int64_t)p.n_head * p.head_dim * N;
    const float a = A[h], dd = D ? D[h] : 0.0f, bias = dt_bias ? dt_bias[h] : 0.0f;
    for (int32_t r = 0; r < n_tok; r++) {
        float *S = state + (int64_t)seq[r] * slot_sz + t * N;
        const float *row = xbc + (int64_t)r * p.conv_dim;
        const float *B = row + p.d_inner + (int64_t)g * N, *Cm = row + p.d_inner + (int64_t)p.n_group * N + (int64_t)g * N;
        const float sp = softplus_dev(__fadd_rn(dt[(int64_t)r * dt_stride + h], bias));
        const float dA = (float)exp((double)__fmul_rn(sp, a));
        const float xv = row[t], xdt = __fmul_rn(xv, sp);
        float sum = 0.0f;
        for (int32_t n = 0; n < N; n++) {
            const float v = __fadd_rn(__fmul_rn(S[n], dA), __fmul_rn(B[n], xdt));
            S[n] = v;
            sum = fmaf(v, Cm[n], sum);
        }
        y[(int64_t)r * p.d_inner + t] = __fadd_rn(sum, __fmul_rn(xv, dd));
    }
}

extern "C" cudaError_t qr_cuda_ssm_scan(float *state, const float *xbc, const float *dt, int64_t dt_stride,
                                        const float *dt_bias, const float *A, const float *D, const int32_t *seq,
                                        int32_t n_tok, const qr_ssm_params *p, float *y, cudaStream_t stream) {
    if (n_tok <= 0) return cudaSuccess;
    const int64_t n = (int64_t)p->n_head * p->head_dim;
    const int threads = 128;
    ssm_scan_kernel<<<(unsigned)((n + threads - 1) / threads), threads, 0, stream>>>(state, xbc, dt, dt_stride, dt_bias,
                                                                                       A, D, seq, n_tok, *p, y);
    QR_CUDA_CHECK_LAUNCH();
}

/* ---- gated grouped RMSNorm ---- */

/* Block (row r, group g), 256 threads. */
static __global__ void ssm_gate_norm_kernel(const float *__restrict__ y, const float *__restrict__ z, int64_t z_stride,
                                            const float *__restrict__ w, int32_t d_inner, int32_t gs, float eps,
                                            float *out) {
    __shared__ double part[32];
    const int64_t r = blockIdx.x;
    const int32_t g = blockIdx.y;
    const float *yr = y + r * d_inner + (int64_t)g * gs, *zr = z + r * z_stride + (int64_t)g * gs;
    float *o = out + r * d_inner + (int64_t)g * gs;
    double ss = 0.0;
    for (int32_t i = threadIdx.x; i < gs; i += blockDim.x) {
        const float t = __fmul_rn(silu_dev(zr[i]), yr[i]);
        ss += (double)__fmul_rn(t, t);
    }
    ss = warp_sum_d(ss);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0) part[warp] = ss;
    __syncthreads();
    double tot = 0.0;
    for (int k = 0; k < nw; k++) tot += part[k];
    const float mean = (float)(tot / (double)gs);
    const float scale = w ? __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps))) : 1.0f;
    __syncthreads(); /* every thread has read part[] before any output (out may alias y) */
    for (int32_t i = threadIdx.x; i < gs; i += blockDim.x) {
        const float t = __fmul_rn(silu_dev(zr[i]), yr[i]);
        o[i] = w ? __fmul_rn(__fmul_rn(t, scale), w[(int64_t)g * gs + i]) : t;
    }
}

extern "C" cudaError_t qr_cuda_ssm_gate_norm(const float *y, const float *z, int64_t z_stride, const float *w,
                                             int64_t n_rows, const qr_ssm_params *p, float eps, float *out,
                                             cudaStream_t stream) {
    if (n_rows <= 0) return cudaSuccess;
    if (n_rows > 65535 * 1024LL) return cudaErrorInvalidValue;
    const dim3 grid((unsigned)n_rows, (unsigned)p->n_group);
    ssm_gate_norm_kernel<<<grid, 256, 0, stream>>>(y, z, z_stride, w, p->d_inner, p->d_inner / p->n_group, eps, out);
    QR_CUDA_CHECK_LAUNCH();
}
