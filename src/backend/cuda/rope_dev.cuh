/* rope_dev.cuh — the angle of one rotary pair as the CPU computes it (ggml's frequency formula: theta
 * iterated by repeated multiplication, YaRN ramp, cos/sin through double so fast-math does not approximate
 * them), shared by rope.cu and the fused rope + attention kernel (attention_short.cu). */
#ifndef QR_CUDA_ROPE_DEV_CUH
#define QR_CUDA_ROPE_DEV_CUH

#include "backend/cuda/cuda_dev.cuh"

static __device__ __forceinline__ float yarn_ramp_dev(float low, float high, int i0) {
    const float y = __fdiv_rn((float)(i0 / 2) - low, fmaxf(0.001f, high - low));
    return 1.0f - fminf(1.0f, fmaxf(0.0f, y));
}

/* The angle's cos and sin of pair i at position p (one pair of rope_table, computed by its own thread). */
static __device__ __forceinline__ float2 rope_cs(int i, int32_t p, const cuda_rope_consts &c, const float *ff) {
    float theta = (float)p;
    for (int j = 0; j < i; j++) theta = __fmul_rn(theta, c.theta_scale);
    const float f = ff ? ff[i] : 1.0f;
    const float theta_extrap = __fdiv_rn(theta, f);
    const float theta_interp = __fmul_rn(c.freq_scale, theta_extrap);
    float th = theta_interp;
    if (c.ext_factor != 0.0f) {
        const float mix = __fmul_rn(yarn_ramp_dev(c.corr0, c.corr1, 2 * i), c.ext_factor);
        th = __fmaf_rn(theta_interp, __fsub_rn(1.0f, mix), __fmul_rn(theta_extrap, mix)); /* the CPU's FMA */
    }
    double sn, cn; /* one range reduction for both (the values of sin() and cos()) */
    sincos((double)th, &sn, &cn);
    return make_float2(__fmul_rn((float)cn, c.mscale), __fmul_rn((float)sn, c.mscale));
}

/* A CTA of one head (rope_kv_store_heads_kernel, rope_kvq_store_kernel): thread t owns pairs t and t + blockDim.x.
 * rope_head_cs: their angles' cos / sin at position p (before the kernel's dependency wait: no global data but the
 * position and the factors); rope_head_rotate: the pairs of head row xr rotated in place, then put(a, b, ya, yb) for
 * each (the element indices and their new values). */
static __device__ __forceinline__ void rope_head_cs(float2 (&cs)[2], int32_t p, int half, const cuda_rope_consts &c,
                                                    const float *ff) {
#pragma unroll
    for (int t = 0; t < 2; t++) {
        const int i = threadIdx.x + t * blockDim.x;
        cs[t] = i < half ? rope_cs(i, p, c, ff) : make_float2(0.0f, 0.0f);
    }
}
/* rope_head_pairs: this thread's pairs of head row src rotated, put(a, b, ya, yb) for each (src is read before put
 * is called for the pair: put may write over it). */
template <class F>
static __device__ __forceinline__ void rope_head_pairs(const float *src, const float2 (&cs)[2], int half,
                                                       const cuda_rope_consts &c, F &&put) {
#pragma unroll
    for (int t = 0; t < 2; t++) {
        const int i = threadIdx.x + t * blockDim.x;
        if (i >= half) break;
        const int a = c.mode == QR_ROPE_NEOX ? i : 2 * i;
        const int b = c.mode == QR_ROPE_NEOX ? i + half : 2 * i + 1;
        const float x0 = src[a], x1 = src[b];
        put(a, b, __fsub_rn(__fmul_rn(x0, cs[t].x), __fmul_rn(x1, cs[t].y)),
            __fadd_rn(__fmul_rn(x0, cs[t].y), __fmul_rn(x1, cs[t].x)));
    }
}
template <class F>
static __device__ __forceinline__ void rope_head_rotate(float *xr, const float2 (&cs)[2], int half, const cuda_rope_consts &c,
                                                        F &&put) {
    rope_head_pairs(xr, cs, half, c, [&](int a, int b, float ya, float yb) {
        xr[a] = ya;
        xr[b] = yb;
        put(a, b, ya, yb);
    });
}

#endif /* QR_CUDA_ROPE_DEV_CUH */
