/* ew_dev.cuh — the elementwise functions as device helpers (elementwise.cu's kernels and the fused
 * gate/up mat-vec of matmul_q.cu share them, so both give the CPU's values bit for bit).
 *
 * GELU follows ggml's f16 table exactly: the input is rounded to f16, GELU is evaluated in f32 with
 * the CPU's expression order (tanh through double) and the result rounded to f16.
 */
#ifndef QR_CUDA_EW_DEV_CUH
#define QR_CUDA_EW_DEV_CUH

#include "backend/cuda/cuda_dev.cuh"

#define GELU_COEF_A 0.044715f
#define SQRT_2_OVER_PI 0.79788456080286535587989211986876f

static __device__ __forceinline__ float gelu_f16(float x) {
    const float h = round_f16(x);
    /* 1 + a h^2 as one fma, as the CPU's table (qr_cpu_gelu_f32) computes it */
    const float inner = __fmul_rn(__fmul_rn(SQRT_2_OVER_PI, h), fmaf(__fmul_rn(GELU_COEF_A, h), h, 1.0f));
    const float g = __fmul_rn(__fmul_rn(0.5f, h), __fadd_rn(1.0f, tanh_precise(inner)));
    return round_f16(g);
}

template <int K>
static __device__ __forceinline__ float ew_op(float a, float b, float s) {
    switch (K) {
    case CUDA_EW_SWIGLU: return __fmul_rn(__fdiv_rn(a, __fadd_rn(1.0f, ggml_expf(-a))), b); /* the CPU's expression */
    case CUDA_EW_GEGLU: return a <= -10.0f ? 0.0f : (a >= 10.0f ? __fmul_rn(a, b) : __fmul_rn(gelu_f16(a), b));
    case CUDA_EW_ADD: return __fadd_rn(a, b);
    case CUDA_EW_MUL: return __fmul_rn(a, b);
    case CUDA_EW_SCALE: return __fmul_rn(a, s);
    default: return __fmul_rn(tanh_precise(__fmul_rn(a, __fdiv_rn(1.0f, s))), s); /* CUDA_EW_SOFTCAP: the CPU's order */
    }
}

/* The activations (qr_glu_kind) as the CPU's qr_cpu_glu computes them: SwiGLU, gpt-oss's clamped SwiGLU
 * (alpha 1.702, limit 7), qwen2moe's sigmoid as silu(a) / a, and relu^2 (u unused), with CUDA's expf where the
 * CPU calls the C library's (exact.cu has those bit for bit). */
static __device__ __forceinline__ float glu_act(int act, float a, float u) {
    if (act == QR_GLU_SWIGLU) return ew_op<CUDA_EW_SWIGLU>(a, u, 0.0f);
    if (act == QR_GLU_SWIGLU_OAI) {
        const float xg = fminf(a, 7.0f), yu = fminf(fmaxf(u, -7.0f), 7.0f);
        return __fmul_rn(__fdiv_rn(xg, __fadd_rn(1.0f, expf(__fmul_rn(-1.702f, xg)))), __fadd_rn(yu, 1.0f));
    }
    if (act == QR_GLU_SIGMOID) return __fdiv_rn(__fdiv_rn(a, __fadd_rn(1.0f, expf(-a))), a);
    const float p = a > 0.0f ? a : 0.0f;
    return __fmul_rn(p, p);
}

#endif /* QR_CUDA_EW_DEV_CUH */
