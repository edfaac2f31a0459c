/* cuda_stub.c — the CUDA backend's entry points in a build without CUDA (QUARREL_HAVE_CUDA undefined),
 * so that callers link and fall back to the CPU at run time. In a CUDA build this file is empty and
 * backend_cuda.cu defines the same functions. */
#include "backend/backend.h"

#ifndef QUARREL_HAVE_CUDA

#include "util/util.h"

qr_status qr_backend_cuda_create(const qr_backend_cuda_params *params, qr_backend **out, char *err, size_t err_len) {
    (void)params;
    if (out) *out = NULL;
    return qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "built without CUDA");
}

int qr_cuda_device_count(void) { return 0; }

qr_status qr_backend_cuda_tp_init(qr_backend *const *bes, int32_t n, char *err, size_t err_len) {
    (void)bes, (void)n;
    return qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "built without CUDA");
}

qr_status qr_backend_cuda_nccl_id(uint8_t *id, char *err, size_t err_len) {
    (void)id;
    return qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "built without CUDA");
}

qr_status qr_backend_cuda_tp_join(qr_backend *be, int32_t world, int32_t rank, const uint8_t *id, char *err,
                                  size_t err_len) {
    (void)be, (void)world, (void)rank, (void)id;
    return qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "built without CUDA");
}

bool qr_cuda_mem_info(int gpu, size_t *free_bytes, size_t *total_bytes) {
    (void)gpu;
    if (free_bytes) *free_bytes = 0;
    if (total_bytes) *total_bytes = 0;
    return false;
}

#else

/* Keeps the translation unit non-empty (ISO C). */
typedef int qr_cuda_stub_unused;

#endif
