/* embed_ops.cu — the ops the encoder (BERT) forward pass adds: add_row, x[r] += one row of a table
 * (a bias, the token-type row) or row pos[r] of it (learned position embeddings). F32 and F16
 * tables (the types converters write for these tensors); the row is read as stored, f16 widened
 * exactly, so the result equals the CPU backend's bit for bit. */
#include "backend/cuda/cuda_dev.cuh"

template <bool F16>
static __global__ void add_row_kernel(const float *x, const uint8_t *table, size_t row_bytes, int64_t dim, int64_t row,
                                      const int32_t *pos, int64_t n_rows, float *out) {
    const int64_t r = blockIdx.y;
    if (r >= n_rows) return;
    const int64_t src = row >= 0 ? row : (int64_t)pos[r];
    const uint8_t *t = table + (size_t)src * row_bytes;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < dim; i += (int64_t)gridDim.x * blockDim.x) {
        const float b = F16 ? h2f(((const uint16_t *)t)[i]) : ((const float *)t)[i];
        out[r * dim + i] = __fadd_rn(x[r * dim + i], b);
    }
}

extern "C" cudaError_t qr_cuda_add_row(const float *x, const cuda_wview *t, int64_t row, const int32_t *pos,
                                       int64_t n_rows, float *out, cudaStream_t stream) {
    if (n_rows <= 0) return cudaSuccess;
    if (n_rows > 65535) return cudaErrorInvalidValue;
    const int64_t dim = t->k;
    const int threads = 256;
    const unsigned bx = (unsigned)((dim + threads - 1) / threads < 64 ? (dim + threads - 1) / threads : 64);
    const dim3 grid(bx, (unsigned)n_rows);
    if (t->type == QR_TYPE_F16) {
        add_row_kernel<true><<<grid, threads, 0, stream>>>(x, t->p0, (size_t)dim * 2, dim, row, pos, n_rows, out);
    } else if (t->type == QR_TYPE_F32) {
        add_row_kernel<false><<<grid, threads, 0, stream>>>(x, t->p0, (size_t)dim * 4, dim, row, pos, n_rows, out);
    } else {
        return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}
