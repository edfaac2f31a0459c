/* attention_gemm.cu — the pieces of attention as two GEMMs for prompt batches whose head shape the flash kernel
 * does not take (MLA's 576-wide keys and 512-wide values, one cached head shared by every query head): the keys
 * and values of one sequence gathered from the paged cache into contiguous f16 rows, q converted to f16 (qr_cuda_to_half), the
 * scores S = q K^T by cuBLAS (f32), then this file's masked softmax into f16 probabilities, and P V by cuBLAS into
 * the output (backend_cuda.cu, attn_gemm). */
#include "backend/cuda/cuda_dev.cuh"

/* Keys k0 .. k0 + nk - 1 of sequence seq: K rows (n_head_kv * dk halves) into kc, V rows (n_head_kv * dv) into
 * vc. One CTA a key, 8 halves a thread (the widths are multiples of 8). */
static __global__ void attn_gather_kernel(const __half *__restrict__ k_cache, const __half *__restrict__ v_cache,
                                          const int32_t *__restrict__ bt, int32_t block_size, int32_t k0, int64_t kw,
                                          int64_t vw, __half *kc, __half *vc) {
    const int32_t key = k0 + (int32_t)blockIdx.x;
    const int64_t slot = (int64_t)bt[key / block_size] * block_size + key % block_size;
    for (int64_t i = (int64_t)threadIdx.x * 8; i < kw; i += (int64_t)blockDim.x * 8)
        *(uint4 *)(kc + (int64_t)blockIdx.x * kw + i) = *(const uint4 *)(k_cache + slot * kw + i);
    for (int64_t i = (int64_t)threadIdx.x * 8; i < vw; i += (int64_t)blockDim.x * 8)
        *(uint4 *)(vc + (int64_t)blockIdx.x * vw + i) = *(const uint4 *)(v_cache + slot * vw + i);
}

extern "C" cudaError_t qr_cuda_attn_gather(const cuda_attn_args *a, int32_t seq, int32_t k0, int32_t nk, void *kc,
                                           void *vc, cudaStream_t stream) {
    const int64_t kw = (int64_t)a->n_head_kv * a->dk, vw = (int64_t)a->n_head_kv * a->dv;
    if (nk <= 0) return cudaSuccess;
    if (!a->f16 || a->kvq || kw % 8 || vw % 8) return cudaErrorInvalidValue;
    attn_gather_kernel<<<(unsigned)nk, 128, 0, stream>>>((const __half *)a->k_cache, (const __half *)a->v_cache,
                                                         a->block_table + (int64_t)seq * a->max_blocks, a->block_size, k0,
                                                         kw, vw, (__half *)kc, (__half *)vc);
    QR_CUDA_CHECK_LAUNCH();
}

/* Row i of s ([n_rows][nk] f32 scores q . k of keys k0 ..) belongs to token row i / n_head of pos: its keys are
 * those at or before pos (within the window when window > 0); p = softmax(scale * s) over them in f16 (0
 * elsewhere). A CTA a row: the max, the sum of exps (f32), then the normalized probabilities. */
static __global__ void attn_softmax_kernel(const float *__restrict__ s, int32_t n_head, int32_t nk, int32_t k0,
                                           const int32_t *__restrict__ pos, float scale, int32_t window, __half *p) {
    __shared__ float sh[32];
    __shared__ double shd[32];
    const int64_t row = blockIdx.x;
    const int32_t ps = pos[row / n_head];
    const int32_t lo = window > 0 ? max(0, ps - window + 1) : 0;
    const int32_t j0 = max(lo - k0, 0), j1 = min(ps - k0 + 1, nk); /* valid keys [j0, j1) */
    const float *sr = s + row * nk;
    __half *pr = p + row * nk;
    float mx = -INFINITY;
    for (int32_t j = j0 + threadIdx.x; j < j1; j += blockDim.x) mx = fmaxf(mx, sr[j] * scale);
    mx = block_max(mx, sh);
    float sum = 0.0f;
    for (int32_t j = j0 + threadIdx.x; j < j1; j += blockDim.x) sum += __expf(sr[j] * scale - mx);
    sum = (float)block_sum_d((double)sum, shd);
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    for (int32_t j = threadIdx.x; j < nk; j += blockDim.x)
        pr[j] = __float2half_rn(j >= j0 && j < j1 ? __expf(sr[j] * scale - mx) * inv : 0.0f);
}

extern "C" cudaError_t qr_cuda_attn_softmax(const float *s, int64_t n_rows, int32_t n_head, int32_t nk, int32_t k0,
                                            const int32_t *pos, float scale, int32_t window, void *p,
                                            cudaStream_t stream) {
    if (n_rows <= 0 || nk <= 0) return cudaSuccess;
    attn_softmax_kernel<<<(unsigned)n_rows, 256, 0, stream>>>(s, n_head, nk, k0, pos, scale, window, (__half *)p);
    QR_CUDA_CHECK_LAUNCH();
}
