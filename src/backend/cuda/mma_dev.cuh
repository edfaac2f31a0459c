/* mma_dev.cuh — the warp-level f16 tensor-core instructions the attention kernels share (attention_flash.cu,
 * attention_decode_mma.cu). Fragment layouts (PTX ISA, g = lane / 4, t = lane % 4): A (16 x 16, row) a0 (row g, k 2t,
 * 2t+1), a1 (row g+8), a2 (row g, k 2t+8, 2t+9), a3 (row g+8, k 2t+8..); B (16 x 8, col) b0 (k 2t, 2t+1, column g), b1
 * (k 2t+8.., column g); C c0, c1 (row g, columns 2t, 2t+1), c2, c3 (row g+8). The host checks (tests/cuda/host,
 * QR_MMA_HOST) emulate them per warp (tests/cuda/host/mma_host.h). */
#ifndef QR_CUDA_MMA_DEV_CUH
#define QR_CUDA_MMA_DEV_CUH

#include <stdint.h>
#include <string.h>

#include <cuda_fp16.h>

/* c += A B (m16n8k16, f16 inputs, f32 accumulators). */
static __device__ __forceinline__ void qr_mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#elif defined(QR_MMA_HOST)
    qr_host_mma(c, a, b0, b1);
#endif
}
/* The 8 x 8 b16 matrix whose row g, elements 2t, 2t + 1 lane (g, t) holds, transposed (same layout): movmatrix. */
static __device__ __forceinline__ uint32_t qr_movmatrix_t(uint32_t x) {
#if defined(__CUDA_ARCH__)
    uint32_t y;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(y) : "r"(x));
    return y;
#elif defined(QR_MMA_HOST)
    return qr_host_trans(x);
#else
    return x;
#endif
}
/* Two floats rounded to f16, lo in the low half. */
static __device__ __forceinline__ uint32_t qr_half2_bits(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    uint32_t u;
    memcpy(&u, &h, 4);
    return u;
}

#endif /* QR_CUDA_MMA_DEV_CUH */
