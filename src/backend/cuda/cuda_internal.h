/* cuda_internal.h — knobs and handles of the CUDA backend for the lab (tests/cuda/) and benchmarks;
 * not part of the op-table contract. C and C++. Only defined in builds with QUARREL_HAVE_CUDA. */
#ifndef QR_CUDA_INTERNAL_H
#define QR_CUDA_INTERNAL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "backend/backend.h"

/* Launch choices the lab varies; the backend's defaults are what the lab measured best. */
typedef struct qr_cuda_tune {
    int32_t mmvq_max_rows;   /* matmul runs the mat-vec kernels (in groups of 8 rows) up to this many rows,
                              * dequantize + cuBLAS above; default 8 */
    int32_t mmvq_wpr;        /* warps per output row of the mat-vec: 1, 2 or 4; 0 = chosen by the row count */
    int64_t gemm_tile_bytes; /* f16 weight tile of the prefill GEMM (bytes), default 128 MiB */
    int32_t attn_splits;     /* KV splits per (row, kv head) in attention; 0 = chosen by the context length */
    int32_t pdl;             /* 1: launch the mat-vec with programmatic dependent launch (sm_90+), 0: plainly */
} qr_cuda_tune;

/* The backend's knobs (writable; read at each op). be must be a CUDA backend. */
qr_cuda_tune *qr_cuda_backend_tune(qr_backend *be);
/* The cudaStream_t every op is issued on. */
void *qr_cuda_backend_stream(qr_backend *be);
/* "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)". */
const char *qr_cuda_backend_device_name(qr_backend *be);

#ifdef __cplusplus
}
#endif

#endif /* QR_CUDA_INTERNAL_H */
