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
#include "backend/cuda/act_quant.cuh"

static __device__ __forceinline__ float silu_dev(float x) { return __fdiv_rn(x, __fadd_rn(1.0f, ggml_expf(-x))); }

/* ---- conv1d ---- */

static __global__ void ssm_conv_kernel(const float *__restrict__ x, int64_t x_stride, float *__restrict__ state,
                                       const float *__restrict__ w, const float *__restrict__ b,
                                       const int32_t *__restrict__ seq, int32_t n_tok, int32_t K, int32_t C,
                                       float *__restrict__ out) {
    pdl_enter();
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

/* The parallel conv of a batch whose sequences each form one contiguous run of rows (prefill): thread
 * (r, c) takes its window from the rows before it in the run and from the state before the run's
 * start; same operation order as the sequential kernel. The states are updated after (conv_state_kernel). */
static __global__ void ssm_conv_par_kernel(const float *__restrict__ x, int64_t x_stride, const float *__restrict__ state,
                                           const float *__restrict__ w, const float *__restrict__ b,
                                           const int32_t *__restrict__ seq, int32_t n_tok, int32_t K, int32_t C,
                                           float *__restrict__ out) {
    pdl_enter();
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int32_t r = blockIdx.y;
    if (c >= C) return;
    const int32_t s = seq[r];
    int32_t back = 0; /* rows of this run before r, up to K - 1 */
    while (back < K - 1 && r - back - 1 >= 0 && seq[r - back - 1] == s) back++;
    const float *wc = w + c * K;
    const float *st = state + (int64_t)s * (K - 1) * C + c;
    float sum = 0.0f;
    for (int32_t k = 0; k < K - 1; k++) { /* window slot k holds input t = r - (K - 1) + k */
        const int32_t d = K - 1 - k;       /* rows back */
        const float v = d <= back ? x[(int64_t)(r - d) * x_stride + c] : st[(int64_t)(k + back) * C];
        sum = __fadd_rn(sum, __fmul_rn(v, wc[k]));
    }
    sum = __fadd_rn(sum, __fmul_rn(x[(int64_t)r * x_stride + c], wc[K - 1]));
    if (b) sum = __fadd_rn(sum, b[c]);
    out[(int64_t)r * C + c] = silu_dev(sum);
}

/* The last row r of each run rolls its sequence's state forward by the run's rows. */
static __global__ void ssm_conv_state_kernel(const float *__restrict__ x, int64_t x_stride, float *__restrict__ state,
                                             const int32_t *__restrict__ seq, int32_t n_tok, int32_t K, int32_t C) {
    pdl_enter();
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int32_t r = blockIdx.y;
    if (c >= C || (r + 1 < n_tok && seq[r + 1] == seq[r])) return;
    const int32_t s = seq[r];
    int32_t len = 1;
    while (len < K - 1 && r - len >= 0 && seq[r - len] == s) len++;
    float *st = state + (int64_t)s * (K - 1) * C + c;
    float win[8];
    for (int32_t k = 0; k < K - 1; k++) { /* new slot k = input r - (K - 2) + k */
        const int32_t d = K - 2 - k;       /* rows back from r */
        win[k] = d < len ? x[(int64_t)(r - d) * x_stride + c] : st[(int64_t)(k + len) * C];
    }
    for (int32_t k = 0; k < K - 1; k++) st[(int64_t)k * C] = win[k];
}

extern "C" cudaError_t qr_cuda_ssm_conv(const float *x, int64_t x_stride, float *conv_state, const float *w,
                                        const float *b, const int32_t *seq, int32_t n_tok, const qr_ssm_params *p,
                                        bool runs, float *out, bool pdl, cudaStream_t stream) {
    if (n_tok <= 0) return cudaSuccess;
    const int threads = 128;
    const unsigned cb = (unsigned)((p->conv_dim + threads - 1) / threads);
    if (runs && p->d_conv >= 2 && p->d_conv <= 9 && n_tok <= 65535) {
        const cudaError_t e = launch_k(ssm_conv_par_kernel, dim3(cb, (unsigned)n_tok), dim3(threads), 0, stream, pdl, x,
                                       x_stride, (const float *)conv_state, w, b, seq, n_tok, p->d_conv, p->conv_dim, out);
        if (e != cudaSuccess) return e;
        return launch_k(ssm_conv_state_kernel, dim3(cb, (unsigned)n_tok), dim3(threads), 0, stream, pdl, x, x_stride,
                        conv_state, seq, n_tok, p->d_conv, p->conv_dim);
    }
    return launch_k(ssm_conv_kernel, dim3(cb), dim3(threads), 0, stream, pdl, x, x_stride, conv_state, w, b, seq, n_tok,
                    p->d_conv, p->conv_dim, out);
}

/* ---- scan ---- */

static __device__ __forceinline__ float softplus_dev(float x) {
    return x > 20.0f ? x : (float)log(1.0 + exp((double)x));
}

/* Thread t = h * head_dim + i (the general kernel, any d_state). */
static __global__ void ssm_scan_kernel(float *__restrict__ state, const float *__restrict__ xbc,
                                       const float *__restrict__ dt, int64_t dt_stride, const float *__restrict__ dt_bias,
                                       const float *__restrict__ A, const float *__restrict__ D,
                                       const int32_t *__restrict__ seq, int32_t n_tok, qr_ssm_params p,
                                       float *__restrict__ y, int *__restrict__ diverged) {
    pdl_enter();
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (int64_t)p.n_head * p.head_dim) return;
    const int32_t h = (int32_t)(t / p.head_dim), N = p.d_state, g = h / (p.n_head / p.n_group);
    const int64_t slot_sz = (int64_t)p.n_head * p.head_dim * N;
    const float a = A[h], dd = D ? D[h] : 0.0f, bias = dt_bias ? dt_bias[h] : 0.0f;
    bool bad = false;
    for (int32_t r = 0; r < n_tok; r++) {
        float *S = state + (int64_t)seq[r] * slot_sz + t * N;
        const float *row = xbc + (int64_t)r * p.conv_dim;
        const float *B = row + p.d_inner + (int64_t)g * N, *Cm = row + p.d_inner + (int64_t)p.n_group * N + (int64_t)g * N;
        const float sp = softplus_dev(__fadd_rn(dt[(int64_t)r * dt_stride + h], bias));
        const float dA = (float)exp((double)__fmul_rn(sp, a));
        const float xv = row[t], xdt = __fmul_rn(xv, sp);
        float sum = 0.0f;
        for (int32_t n = 0; n < N; n++) {
            const float v = __fmaf_rn(S[n], dA, __fmul_rn(B[n], xdt)); /* as the CPU (ggml's FMA) */
            S[n] = v;
            bad |= !isfinite(v);
            sum = fmaf(v, Cm[n], sum);
        }
        y[(int64_t)r * p.d_inner + t] = __fadd_rn(sum, __fmul_rn(xv, dd));
    }
    if (bad && diverged) *diverged = 1;
}

/* One warp per (head, channel) t; lane l holds state values n = l * NPL .. l * NPL + NPL - 1 (d_state =
 * 32 * NPL) in registers across the rows of a sequence (16-byte loads for NPL = 4), y through a warp
 * sum. The per-row, per-head factors (softplus(dt), exp(dt A): double-precision math, as the CPU)
 * are computed 32 rows at a time, one row per lane, and handed to the rows by shuffles; each row's
 * inputs are loaded one row ahead. */
template <int NPL>
static __global__ void __launch_bounds__(128) ssm_scan_warp_kernel(float *__restrict__ state, const float *__restrict__ xbc,
                                            const float *__restrict__ dt, int64_t dt_stride,
                                            const float *__restrict__ dt_bias, const float *__restrict__ A,
                                            const float *__restrict__ D, const int32_t *__restrict__ seq, int32_t n_tok,
                                            qr_ssm_params p, float *__restrict__ y, int *__restrict__ diverged) {
    pdl_enter();
    const int lane = threadIdx.x & 31;
    const int64_t t = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (t >= (int64_t)p.n_head * p.head_dim) return;
    constexpr int N = 32 * NPL;
    const int32_t h = (int32_t)(t / p.head_dim), g = h / (p.n_head / p.n_group);
    const int64_t slot_sz = (int64_t)p.n_head * p.head_dim * N;
    const float a = A[h], dd = D ? D[h] : 0.0f, bias = dt_bias ? dt_bias[h] : 0.0f;
    const int64_t boff = p.d_inner + (int64_t)g * N + lane * NPL, coff = boff + (int64_t)p.n_group * N;
    float st[NPL], Bn[NPL], Cn[NPL];
    int32_t cur = -1;
    bool bad = false;
    float xv = xbc[t]; /* inputs of row 0 */
#pragma unroll
    for (int j = 0; j < NPL; j++) Bn[j] = xbc[boff + j], Cn[j] = xbc[coff + j];
    for (int32_t r0 = 0; r0 < n_tok; r0 += 32) {
        float my_sp = 0.0f, my_dA = 0.0f; /* row r0 + lane's factors */
        if (r0 + lane < n_tok) {
            my_sp = softplus_dev(__fadd_rn(dt[(int64_t)(r0 + lane) * dt_stride + h], bias));
            my_dA = (float)exp((double)__fmul_rn(my_sp, a));
        }
        const int nr = n_tok - r0 < 32 ? n_tok - r0 : 32;
        for (int u = 0; u < nr; u++) {
            const int32_t r = r0 + u, s = seq[r];
            if (s != cur) {
                if (cur >= 0) {
                    float *S = state + (int64_t)cur * slot_sz + t * N + lane * NPL;
#pragma unroll
                    for (int j = 0; j < NPL; j++) S[j] = st[j];
                }
                const float *S = state + (int64_t)s * slot_sz + t * N + lane * NPL;
#pragma unroll
                for (int j = 0; j < NPL; j++) st[j] = S[j];
                cur = s;
            }
            float Bc[NPL], Cc[NPL];
#pragma unroll
            for (int j = 0; j < NPL; j++) Bc[j] = Bn[j], Cc[j] = Cn[j];
            const float xc = xv;
            if (r + 1 < n_tok) { /* prefetch the next row */
                const float *row = xbc + (int64_t)(r + 1) * p.conv_dim;
                xv = row[t];
#pragma unroll
                for (int j = 0; j < NPL; j++) Bn[j] = row[boff + j], Cn[j] = row[coff + j];
            }
            const float sp = __shfl_sync(0xffffffffu, my_sp, u), dA = __shfl_sync(0xffffffffu, my_dA, u);
            const float xdt = __fmul_rn(xc, sp);
            float sum = 0.0f;
#pragma unroll
            for (int j = 0; j < NPL; j++) {
                const float v = __fmaf_rn(st[j], dA, __fmul_rn(Bc[j], xdt));
                st[j] = v;
                bad |= !isfinite(v);
                sum = fmaf(v, Cc[j], sum);
            }
            sum = warp_sum(sum);
            if (lane == 0) y[(int64_t)r * p.d_inner + t] = __fadd_rn(sum, __fmul_rn(xc, dd));
        }
    }
    if (cur >= 0) {
        float *S = state + (int64_t)cur * slot_sz + t * N + lane * NPL;
#pragma unroll
        for (int j = 0; j < NPL; j++) S[j] = st[j];
    }
    if (bad && diverged) *diverged = 1;
}

extern "C" cudaError_t qr_cuda_ssm_scan(float *state, const float *xbc, const float *dt, int64_t dt_stride,
                                        const float *dt_bias, const float *A, const float *D, const int32_t *seq,
                                        int32_t n_tok, const qr_ssm_params *p, float *y, int *diverged, bool pdl,
                                        cudaStream_t stream) {
    if (n_tok <= 0) return cudaSuccess;
    const int64_t n = (int64_t)p->n_head * p->head_dim;
    const int threads = 128;
    const unsigned wgrid = (unsigned)((n * 32 + threads - 1) / threads);
    switch (p->d_state) {
#define W(NPL) \
    case 32 * NPL: \
        return launch_k(ssm_scan_warp_kernel<NPL>, dim3(wgrid), dim3(threads), 0, stream, pdl, state, xbc, dt, dt_stride, \
                        dt_bias, A, D, seq, n_tok, *p, y, diverged);
    W(1) W(2) W(4) W(8)
#undef W
    default: break;
    }
    return launch_k(ssm_scan_kernel, dim3((unsigned)((n + threads - 1) / threads)), dim3(threads), 0, stream, pdl, state,
                    xbc, dt, dt_stride, dt_bias, A, D, seq, n_tok, *p, y, diverged);
}

/* ---- the chunked (SSD) scan of a prefill run ---- */

/* The rows of one sequence in chunks of SSD_Q, as the CPU's scan_ssd_run (cpu/ops_ssm.c; the Mamba2
 * paper's state-space duality): with a_j = dt_j A and cum_t = a_0 + .. + a_t (double, restarting each
 * chunk),
 *   y_t = sum_{s <= t} (C_t . B_s) exp(cum_t - cum_s) dt_s x_s  +  exp(cum_t) (S_prev . C_t)  +  D x_t
 *   S   = exp(cum_last) S_prev  +  sum_s exp(cum_last - cum_s) dt_s x_s (outer) B_s.
 * CTA (head h, channels e0 .. e0 + SSD_PS - 1, run z: one sequence's contiguous rows): its channels' state rows
 * stay in shared memory across the
 * chunks (channels are independent; the C . B products are recomputed per CTA). Per chunk: B, C, x and
 * the dt factors to shared memory; G[i][j] = (C_i . B_j) exp(cum_i - cum_j) dt_j (warp per row i, lane
 * per j); y (lane per channel, warp per row); then the state update in the CPU's order (x scaled, one
 * fma per earlier row). The serial work per CTA is the number of chunks instead of the number of rows. */
#define SSD_Q 64
#define SSD_PS 32
#define SSD_THREADS 256
template <int N> struct ssd_cfg {
    static constexpr int BP = N + 4; /* B and S row pitch (floats): 16-byte rows, and the 8 lanes of a 16-byte
                                      * load phase reading rows r .. r + 7 at one n hit 32 different banks */
    static constexpr int O_B = 0, O_C = O_B + SSD_Q * BP, O_X = O_C + SSD_Q * N, O_G = O_X + SSD_Q * SSD_PS,
                         O_S = O_G + SSD_Q * SSD_Q, O_DT = O_S + SSD_PS * BP, O_W = O_DT + SSD_Q, O_DEC = O_W + SSD_Q,
                         O_CUM = O_DEC + SSD_Q + 1; /* doubles from here (8-byte aligned: O_CUM even) */
    static constexpr size_t SMEM = (size_t)(O_CUM + (O_CUM & 1)) * 4 + SSD_Q * 8;
};

template <int N>
static __global__ void __launch_bounds__(SSD_THREADS)
    ssm_scan_ssd_kernel(float *__restrict__ state, const float *__restrict__ xbc, const float *__restrict__ dt,
                        int64_t dt_stride, const float *__restrict__ dt_bias, const float *__restrict__ A,
                        const float *__restrict__ D, const qr_cuda_ssd_runs runs, qr_ssm_params p, float *__restrict__ y,
                        int *__restrict__ diverged) {
    /* run blockIdx.z: rows r0 .. r0 + n_tok - 1, all of sequence seq */
    const int32_t seq = runs.seq[blockIdx.z], n_tok = runs.len[blockIdx.z], r0 = runs.r0[blockIdx.z];
    xbc += (int64_t)r0 * p.conv_dim;
    dt += (int64_t)r0 * dt_stride;
    y += (int64_t)r0 * p.d_inner;
    typedef ssd_cfg<N> C;
    extern __shared__ __align__(16) float sm[];
    float *Bs = sm + C::O_B, *Cs = sm + C::O_C, *xs = sm + C::O_X, *G = sm + C::O_G, *S = sm + C::O_S;
    float *dts = sm + C::O_DT, *wv = sm + C::O_W, *dec = sm + C::O_DEC;
    double *cum = (double *)(sm + C::O_CUM + (C::O_CUM & 1));
    pdl_enter();
    const int h = (int)blockIdx.x, e0 = (int)blockIdx.y * SSD_PS, tid = (int)threadIdx.x;
    const int warp = tid >> 5, lane = tid & 31;
    const int P = p.head_dim, g = h / (p.n_head / p.n_group);
    const float a = A[h], dd = D ? D[h] : 0.0f, bias = dt_bias ? dt_bias[h] : 0.0f;
    const int64_t cd = p.conv_dim, bo = p.d_inner + (int64_t)g * N, co = bo + (int64_t)p.n_group * N;
    float *gS = state + (int64_t)seq * p.n_head * P * N + ((int64_t)h * P + e0) * N;
    for (int k = tid; k < SSD_PS * N; k += SSD_THREADS) S[(k / N) * C::BP + k % N] = gS[k];
    for (int32_t c0 = 0; c0 < n_tok; c0 += SSD_Q) {
        const int L = n_tok - c0 < SSD_Q ? n_tok - c0 : SSD_Q;
        const float *rows = xbc + (int64_t)c0 * cd;
        for (int k = tid; k < L * N; k += SSD_THREADS) {
            const int j = k / N, n = k % N;
            Bs[j * C::BP + n] = rows[(int64_t)j * cd + bo + n];
            Cs[j * N + n] = rows[(int64_t)j * cd + co + n];
        }
        for (int k = tid; k < L * SSD_PS; k += SSD_THREADS) {
            const int j = k / SSD_PS, e = k % SSD_PS;
            xs[k] = rows[(int64_t)j * cd + (int64_t)h * P + e0 + e];
        }
        if (tid < L) dts[tid] = softplus_dev(__fadd_rn(dt[(int64_t)(c0 + tid) * dt_stride + h], bias));
        __syncthreads();
        if (tid == 0) { /* the decays' cumulative sums, in order and in double as the CPU */
            double acc = 0.0;
            for (int j = 0; j < L; j++) {
                acc += (double)dts[j] * (double)a;
                cum[j] = acc;
            }
        }
        __syncthreads();
        if (tid < L) {
            dec[tid] = (float)exp((double)(float)cum[tid]);
            wv[tid] = __fmul_rn((float)exp((double)(float)(cum[L - 1] - cum[tid])), dts[tid]);
        }
        /* G[i][j], j <= i: warp per row i, lane per j */
        for (int i = warp; i < L; i += SSD_THREADS / 32) {
            const float *Ci = Cs + i * N;
            for (int j = lane; j <= i; j += 32) {
                const float *Bj = Bs + j * C::BP;
                float d = 0.0f;
#pragma unroll 4
                for (int n = 0; n < N; n += 4) {
                    const float4 c = *(const float4 *)(Ci + n), b = *(const float4 *)(Bj + n);
                    d = fmaf(c.x, b.x, d), d = fmaf(c.y, b.y, d), d = fmaf(c.z, b.z, d), d = fmaf(c.w, b.w, d);
                }
                G[i * SSD_Q + j] = __fmul_rn(__fmul_rn(d, (float)exp((double)(float)(cum[i] - cum[j]))), dts[j]);
            }
        }
        __syncthreads();
        /* y: lane = channel, warp per row; the state carried in is the one before this chunk */
        for (int i = warp; i < L; i += SSD_THREADS / 32) {
            float acc = 0.0f;
            for (int j = 0; j <= i; j++) acc = fmaf(G[i * SSD_Q + j], xs[j * SSD_PS + lane], acc);
            const float *Ci = Cs + i * N, *Se = S + lane * C::BP;
            float sc = 0.0f;
#pragma unroll 4
            for (int n = 0; n < N; n += 4) {
                const float4 sv = *(const float4 *)(Se + n), c = *(const float4 *)(Ci + n);
                sc = fmaf(sv.x, c.x, sc), sc = fmaf(sv.y, c.y, sc), sc = fmaf(sv.z, c.z, sc), sc = fmaf(sv.w, c.w, sc);
            }
            const float out = __fadd_rn(__fadd_rn(acc, __fmul_rn(dec[i], sc)), __fmul_rn(xs[i * SSD_PS + lane], dd));
            y[(int64_t)(c0 + i) * p.d_inner + (int64_t)h * P + e0 + lane] = out;
        }
        __syncthreads();
        /* S[e][n] = S[e][n] exp(cum_last) + sum_j (x_j[e] w_j) B_j[n], j in order */
        const float decL = (float)exp((double)(float)cum[L - 1]);
        for (int k = tid * 4; k < SSD_PS * N; k += SSD_THREADS * 4) { /* 4 consecutive n of one channel e */
            const int e = k / N, n = k % N;
            float4 v = *(float4 *)(S + e * C::BP + n);
            v.x = __fmul_rn(v.x, decL), v.y = __fmul_rn(v.y, decL), v.z = __fmul_rn(v.z, decL), v.w = __fmul_rn(v.w, decL);
            for (int j = 0; j < L; j++) {
                const float xw = __fmul_rn(xs[j * SSD_PS + e], wv[j]);
                const float4 b = *(const float4 *)(Bs + j * C::BP + n);
                v.x = fmaf(xw, b.x, v.x), v.y = fmaf(xw, b.y, v.y), v.z = fmaf(xw, b.z, v.z), v.w = fmaf(xw, b.w, v.w);
            }
            *(float4 *)(S + e * C::BP + n) = v;
        }
        __syncthreads();
    }
    bool bad = false;
    for (int k = tid; k < SSD_PS * N; k += SSD_THREADS) {
        const float v = S[(k / N) * C::BP + k % N];
        bad |= !isfinite(v);
        gS[k] = v;
    }
    if (bad && diverged) *diverged = 1;
}

template <int N>
static cudaError_t launch_ssd(float *state, const float *xbc, const float *dt, int64_t dt_stride, const float *dt_bias,
                              const float *A, const float *D, const qr_cuda_ssd_runs *runs, const qr_ssm_params *p, float *y,
                              int *diverged, bool pdl, cudaStream_t stream) {
    const size_t smem = ssd_cfg<N>::SMEM;
    const cudaError_t e = cudaFuncSetAttribute(ssm_scan_ssd_kernel<N>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return e;
    return launch_k(ssm_scan_ssd_kernel<N>, dim3((unsigned)p->n_head, (unsigned)(p->head_dim / SSD_PS), (unsigned)runs->n),
                    dim3(SSD_THREADS), smem, stream, pdl, state, xbc, dt, dt_stride, dt_bias, A, D, *runs, *p, y, diverged);
}

extern "C" bool qr_cuda_ssm_ssd_supported(const qr_ssm_params *p) {
    return (p->d_state == 64 || p->d_state == 128) && p->head_dim % SSD_PS == 0 && p->n_group > 0 &&
           p->n_head % p->n_group == 0;
}

extern "C" cudaError_t qr_cuda_ssm_scan_ssd(float *state, const float *xbc, const float *dt, int64_t dt_stride,
                                            const float *dt_bias, const float *A, const float *D,
                                            const qr_cuda_ssd_runs *runs, const qr_ssm_params *p, float *y, int *diverged,
                                            bool pdl, cudaStream_t stream) {
    if (runs->n <= 0) return cudaSuccess;
    if (!qr_cuda_ssm_ssd_supported(p) || runs->n > QR_CUDA_SSD_MAX_RUNS) return cudaErrorInvalidValue;
    for (int i = 0; i < runs->n; i++)
        if (runs->seq[i] < 0 || runs->len[i] < 1 || runs->r0[i] < 0) return cudaErrorInvalidValue;
    if (p->d_state == 64) return launch_ssd<64>(state, xbc, dt, dt_stride, dt_bias, A, D, runs, p, y, diverged, pdl, stream);
    return launch_ssd<128>(state, xbc, dt, dt_stride, dt_bias, A, D, runs, p, y, diverged, pdl, stream);
}

/* ---- gated grouped RMSNorm ---- */

/* Block (row r, group g); each thread's values of silu(z) * y stay in registers (up to NPT of them,
 * stride blockDim.x) between the sum of squares and the output. */
template <int NPT, int QK>
static __global__ void ssm_gate_norm_kernel(const float *__restrict__ y, const float *__restrict__ z, int64_t z_stride,
                                            const float *__restrict__ w, int32_t d_inner, int32_t gs, float eps,
                                            float *out, int8_t *q, float *qd, float *qs, int16_t *qg) {
    pdl_enter();
    __shared__ double part[32];
    const int64_t r = blockIdx.x;
    const int32_t g = blockIdx.y;
    const float *yr = y + r * d_inner + (int64_t)g * gs, *zr = z + r * z_stride + (int64_t)g * gs;
    float *o = out + r * d_inner + (int64_t)g * gs;
    float t[NPT];
    double ss = 0.0;
#pragma unroll
    for (int u = 0; u < NPT; u++) {
        const int32_t i = threadIdx.x + u * blockDim.x;
        t[u] = i < gs ? __fmul_rn(silu_dev(zr[i]), yr[i]) : 0.0f;
        ss += (double)__fmul_rn(t[u], t[u]);
    }
    ss = warp_sum_d(ss);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0) part[warp] = ss;
    __syncthreads();
    double tot = 0.0;
    for (int k = 0; k < nw; k++) tot += part[k];
    const float mean = (float)(tot / (double)gs);
    const float scale = w ? __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps))) : 1.0f;
    __syncthreads(); /* every thread has read its inputs before any output (out may alias y) */
#pragma unroll
    for (int u = 0; u < NPT; u++) {
        const int32_t i = threadIdx.x + u * blockDim.x;
        if (i < gs) o[i] = w ? __fmul_rn(__fmul_rn(t[u], scale), w[(int64_t)g * gs + i]) : t[u];
    }
    if (QK < 0) return;
    __syncthreads(); /* the group's outputs are written: quantize them for the next mat-vec, a warp per block */
    const int64_t bs = QK == 0 ? 32 : 256, b0 = (r * d_inner + (int64_t)g * gs) / bs;
    for (int64_t j = warp; j < gs / bs; j += nw) {
        if (QK == 0) act_quant_block32(out, b0 + j, lane, q, qd, qs, qg);
        else act_quant_block256(out, b0 + j, lane, q, qd, qg);
    }
}

/* The same with 8 consecutive values of the group per thread (float4 loads, the norm weights loaded
 * before the PDL wait) and the activation codes made from registers (Q8_0: 4 lanes per block, Q8_K: a
 * warp per block), as rmsnorm_vec8_kernel does: no second pass over the output. Needs 16-byte aligned
 * rows (d_inner, gs, z_stride multiples of 8 / 4) and gs <= 8192. */
template <int QK>
static __global__ void __launch_bounds__(1024)
    ssm_gate_norm_vec8_kernel(const float *__restrict__ y, const float *__restrict__ z, int64_t z_stride,
                              const float *__restrict__ w, int32_t d_inner, int32_t gs, float eps, float *out, int8_t *q,
                              float *qd, float *qs, int16_t *qg) {
    __shared__ double sh[32];
    const int64_t r = blockIdx.x;
    const int32_t g = blockIdx.y;
    const int32_t i0 = (int32_t)threadIdx.x * 8;
    const bool on = i0 < gs;
    float wv[8];
    if (w && on) {
        const float4 w0 = __ldg((const float4 *)(w + (int64_t)g * gs + i0)), w1 = __ldg((const float4 *)(w + (int64_t)g * gs + i0 + 4));
        wv[0] = w0.x, wv[1] = w0.y, wv[2] = w0.z, wv[3] = w0.w, wv[4] = w1.x, wv[5] = w1.y, wv[6] = w1.z, wv[7] = w1.w;
    }
    pdl_enter();
    const int64_t base = r * d_inner + (int64_t)g * gs + i0;
    float t[8];
    double ss = 0.0;
    if (on) {
        const float *zr = z + r * z_stride + (int64_t)g * gs + i0;
        const float4 y0 = *(const float4 *)(y + base), y1 = *(const float4 *)(y + base + 4);
        const float4 z0 = *(const float4 *)zr, z1 = *(const float4 *)(zr + 4);
        const float yv[8] = {y0.x, y0.y, y0.z, y0.w, y1.x, y1.y, y1.z, y1.w};
        const float zv[8] = {z0.x, z0.y, z0.z, z0.w, z1.x, z1.y, z1.z, z1.w};
#pragma unroll
        for (int j = 0; j < 8; j++) {
            t[j] = __fmul_rn(silu_dev(zv[j]), yv[j]);
            ss += (double)__fmul_rn(t[j], t[j]);
        }
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++) t[j] = 0.0f;
    }
    const double tot = block_sum_d(ss, sh); /* every thread has read its inputs (out may alias y) */
    const float mean = (float)(tot / (double)gs);
    const float scale = w ? __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps))) : 1.0f;
#pragma unroll
    for (int j = 0; j < 8; j++) t[j] = w ? __fmul_rn(__fmul_rn(t[j], scale), wv[j]) : t[j];
    if (on) {
        *(float4 *)(out + base) = make_float4(t[0], t[1], t[2], t[3]);
        *(float4 *)(out + base + 4) = make_float4(t[4], t[5], t[6], t[7]);
    }
    if (QK < 0) return;
    const int lane = threadIdx.x & 31;
    if ((int32_t)(threadIdx.x & ~31u) * 8 >= gs) return; /* a warp wholly past the group */
    if (QK == 0) act_quant_oct32(t, base / 32, lane & 3, on, q, qd, qs, qg);
    else act_quant_vals256(t, (base - (int64_t)lane * 8) / 256, lane, q, qd, qg);
}

extern "C" cudaError_t qr_cuda_ssm_gate_norm(const float *y, const float *z, int64_t z_stride, const float *w,
                                             int64_t n_rows, const qr_ssm_params *p, float eps, float *out, int qkind,
                                             int8_t *q, float *qd, float *qs, int16_t *qg, bool pdl,
                                             cudaStream_t stream) {
    if (n_rows <= 0) return cudaSuccess;
    if (n_rows > 65535 * 1024LL) return cudaErrorInvalidValue;
    const dim3 grid((unsigned)n_rows, (unsigned)p->n_group);
    const int32_t gs = p->d_inner / p->n_group;
    int threads = (gs + 31) / 32 * 32;
    if (threads > 1024) threads = 1024;
    const int npt = (gs + threads - 1) / threads;
    if (qkind > 1 || (qkind >= 0 && gs % (qkind == 0 ? 32 : 256))) return cudaErrorInvalidValue;
    const bool vec8 = gs % 8 == 0 && gs <= 8192 && p->d_inner % 8 == 0 && z_stride % 4 == 0 &&
                      ((uintptr_t)y | (uintptr_t)z | (uintptr_t)out | (uintptr_t)w) % 16 == 0;
    if (vec8) {
        const dim3 block((unsigned)((gs / 8 + 31) / 32 * 32));
        if (qkind == 0)
            return launch_k(ssm_gate_norm_vec8_kernel<0>, grid, block, 0, stream, pdl, y, z, z_stride, w, p->d_inner, gs,
                            eps, out, q, qd, qs, qg);
        if (qkind == 1)
            return launch_k(ssm_gate_norm_vec8_kernel<1>, grid, block, 0, stream, pdl, y, z, z_stride, w, p->d_inner, gs,
                            eps, out, q, qd, qs, qg);
        return launch_k(ssm_gate_norm_vec8_kernel<-1>, grid, block, 0, stream, pdl, y, z, z_stride, w, p->d_inner, gs,
                        eps, out, q, qd, qs, qg);
    }
#define G(N)                                                                                                       \
    do {                                                                                                           \
        if (qkind == 0)                                                                                            \
            return launch_k(ssm_gate_norm_kernel<N, 0>, grid, dim3(threads), 0, stream, pdl, y, z, z_stride, w,    \
                            p->d_inner, gs, eps, out, q, qd, qs, qg);                                              \
        if (qkind == 1)                                                                                            \
            return launch_k(ssm_gate_norm_kernel<N, 1>, grid, dim3(threads), 0, stream, pdl, y, z, z_stride, w,    \
                            p->d_inner, gs, eps, out, q, qd, qs, qg);                                              \
        return launch_k(ssm_gate_norm_kernel<N, -1>, grid, dim3(threads), 0, stream, pdl, y, z, z_stride, w,       \
                        p->d_inner, gs, eps, out, q, qd, qs, qg);                                                  \
    } while (0)
    if (npt <= 1) G(1);
    if (npt <= 2) G(2);
    if (npt <= 4) G(4);
    if (npt <= 8) G(8);
    if (npt <= 16) G(16);
#undef G
    return cudaErrorInvalidValue; /* groups of more than 16384 channels */
}
