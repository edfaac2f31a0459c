/* cuda_dev.cuh — device helpers shared by the kernels: loads, conversions, reductions.
 *
 * Numerics note: the target is built with --use_fast_math (approximate division, exp, sin, tanh and
 * flush-to-zero). Where the CPU oracle's exact float result matters (quantizer scales, rope angles,
 * norm scales, dequantization) the code uses the explicitly rounded intrinsics (__fdiv_rn,
 * __fmul_rn, __fadd_rn, __fsqrt_rn) or double precision, which fast-math does not touch.
 */
#ifndef QR_CUDA_DEV_CUH
#define QR_CUDA_DEV_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <string.h>

#include "backend/cuda/cuda_ops.h"
#include "quant/blocks.h"

#define QR_CUDA_CHECK_LAUNCH() return cudaGetLastError()

/* fp16 bits -> float (exact). */
static __device__ __forceinline__ float h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
/* bf16 bits -> float (exact). */
static __device__ __forceinline__ float bf2f(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
/* float -> fp16 -> float (round to nearest even), the value the CPU's qr_fp32_to_fp16 stores. */
static __device__ __forceinline__ float round_f16(float x) { return __half2float(__float2half_rn(x)); }

/* 16 bytes of streamed weights: read-only path, not kept in L1 (activations are). */
static __device__ __forceinline__ uint4 ld_stream16(const void *p) {
#ifdef __CUDA_ARCH__
    uint4 r; /* volatile: stays before griddepcontrol.wait (matmul_q.cu issues weight loads early) */
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
        : "l"(p));
    return r;
#else /* host builds of this header (a host-side check of the block decoders) */
    return *(const uint4 *)p;
#endif
}
/* cp.async (sm_80+): global -> shared memory without a register round trip. cp_async16 copies 16 bytes (L2
 * only), or with n the first n of them and zeros for the rest (n = 0: zeros, nothing read); cp_async4
 * the same for 4 bytes (through L1); commit closes a group, wait<N> waits until at most N groups are in
 * flight. Host builds of this header (the host checks, tests/cuda/host) copy at once. */
static __device__ __forceinline__ void cp_async16(void *s, const void *g) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"((unsigned)__cvta_generic_to_shared(s)), "l"(g) : "memory");
#elif !defined(__CUDA_ARCH__)
    memcpy(s, g, 16);
#endif
}
static __device__ __forceinline__ void cp_async16(void *s, const void *g, int n) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"((unsigned)__cvta_generic_to_shared(s)), "l"(g),
                 "r"(n)
                 : "memory");
#elif !defined(__CUDA_ARCH__)
    memset(s, 0, 16);
    memcpy(s, g, (size_t)n);
#endif
}
static __device__ __forceinline__ void cp_async4(void *s, const void *g, int n) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"((unsigned)__cvta_generic_to_shared(s)), "l"(g),
                 "r"(n)
                 : "memory");
#elif !defined(__CUDA_ARCH__)
    memset(s, 0, 4);
    memcpy(s, g, (size_t)n);
#endif
}
static __device__ __forceinline__ void cp_async_commit(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int N> static __device__ __forceinline__ void cp_async_wait(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}
/* Read-only loads through the texture/L1 path. */
static __device__ __forceinline__ int4 ld_ro16(const void *p) { return __ldg((const int4 *)p); }
static __device__ __forceinline__ uint32_t ld_ro32(const void *p) { return __ldg((const unsigned int *)p); }
static __device__ __forceinline__ uint16_t ld_ro16b(const void *p) { return __ldg((const unsigned short *)p); }
static __device__ __forceinline__ uint8_t ld_ro8(const void *p) { return __ldg((const unsigned char *)p); }

/* Sum of the two int16 values packed in one 32-bit word. */
static __device__ __forceinline__ int sum_i16x2(uint32_t v) { return (int)(int16_t)(v & 0xFFFFu) + ((int)v >> 16); }

/* Signed 4 x int8 dot product plus c. */
static __device__ __forceinline__ int dp4a(uint32_t a, int b, int c) { return __dp4a((int)a, b, c); }

/* Spreads the low 4 bits of b into bit 4 of each byte (bit i -> bit 8i + 4). */
static __device__ __forceinline__ uint32_t spread4_bit4(uint32_t b) { return ((b * 0x00204081u) & 0x01010101u) << 4; }

/* Looks up 4 byte-indices (each 0..15) in a 16-entry int8 table packed into 4 words. */
static __device__ __forceinline__ uint32_t lut16(uint32_t v, uint32_t t0, uint32_t t1, uint32_t t2, uint32_t t3) {
    const uint32_t sel = (v & 0xFu) | ((v >> 4) & 0xF0u) | ((v >> 8) & 0xF00u) | ((v >> 12) & 0xF000u);
    const uint32_t s3 = sel & 0x7777u;
    const uint32_t lo = __byte_perm(t0, t1, s3), hi = __byte_perm(t2, t3, s3);
    const uint32_t mask = ((v & 0x08080808u) >> 3) * 0xFFu;
    return (lo & ~mask) | (hi & mask);
}
/* The 16-entry table t0..t3 (byte i of the 16 = entry i) looked up for all 8 nibbles of w at once:
 * *lo gets the entries of the low nibbles of w's 4 bytes, *hi those of the high nibbles (byte n of
 * each for byte n of w). __byte_perm reads 3 bits of each selector nibble, so the raw nibbles index
 * the entries 0-7 of (t0, t1) and 8-15 of (t2, t3); a third permute keeps, per byte, the one the
 * nibble's bit 3 names, and two more split the interleaved low/high results. 8 permutes per 8 values
 * (lut16 needs a nibble gather per 4). */
static __device__ __forceinline__ void lut16x8(uint32_t w, uint32_t t0, uint32_t t1, uint32_t t2, uint32_t t3,
                                               uint32_t *lo, uint32_t *hi) {
    const uint32_t wb = w >> 16;
    const uint32_t a = __byte_perm(__byte_perm(t0, t1, w), __byte_perm(t2, t3, w), 0x3210u | ((w & 0x8888u) >> 1));
    const uint32_t b = __byte_perm(__byte_perm(t0, t1, wb), __byte_perm(t2, t3, wb), 0x3210u | ((wb & 0x8888u) >> 1));
    *lo = __byte_perm(a, b, 0x6420u);
    *hi = __byte_perm(a, b, 0x7531u);
}
#define QR_PK4(a, b, c, d) \
    ((uint32_t)(uint8_t)(a) | ((uint32_t)(uint8_t)(b) << 8) | ((uint32_t)(uint8_t)(c) << 16) | ((uint32_t)(uint8_t)(d) << 24))

/* E8M0 exponent -> 2^(e - 128) (half the MX scale; the MXFP4 table is doubled), as the CPU computes it. */
static __device__ __forceinline__ float e8m0_half(uint8_t e) {
    const uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    return __uint_as_float(bits);
}

static __device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
static __device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
static __device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Block-wide double sum (blockDim.x a multiple of 32, <= 1024); every thread gets the result. */
static __device__ __forceinline__ double block_sum_d(double v, double *sh /* [32] */) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum_d(v);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    double t = lane < nw ? sh[lane] : 0.0;
    return warp_sum_d(t);
}
static __device__ __forceinline__ float block_max(float v, float *sh /* [32] */) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    float t = lane < nw ? sh[lane] : -INFINITY;
    return warp_max(t);
}

/* Programmatic dependent launch (Hopper): a kernel launched with the programmatic-serialization
 * attribute may start while the previous kernel on the stream still runs; pdl_wait() blocks until
 * that kernel has finished and its writes are visible, pdl_launch_dependents() lets the next kernel
 * start early. Both are no-ops without the attribute and before sm_90. */
static __device__ __forceinline__ void pdl_wait(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
static __device__ __forceinline__ void pdl_launch_dependents(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* Top of every kernel on the decode path: waits for the kernel before it (when launched with PDL),
 * then lets the next one start launching. Every thread calls it before touching global memory, so
 * the chain of waits orders each kernel after all earlier ones. */
static __device__ __forceinline__ void pdl_enter(void) {
    pdl_wait();
    pdl_launch_dependents();
}

#ifdef __CUDACC__
/* Launches kernel<<<grid, block, smem, stream>>>(args...), with programmatic stream serialization when pdl (sm_90+: the
 * kernel may start during the previous one's tail; it must pdl_wait first), in thread-block clusters of cl CTAs along
 * grid.y where cl > 1 (launch_k: none). */
template <typename... KArgs, typename... Args>
static cudaError_t launch_kc(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, bool pdl,
                             int cl, Args... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[2];
    unsigned na = 0;
    if (pdl) {
        attr[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[na++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (cl > 1) {
        attr[na].id = cudaLaunchAttributeClusterDimension;
        attr[na].val.clusterDim.x = 1;
        attr[na].val.clusterDim.y = (unsigned)cl;
        attr[na++].val.clusterDim.z = 1;
    }
    cfg.attrs = attr;
    cfg.numAttrs = na;
    return cudaLaunchKernelEx(&cfg, kernel, args...);
}
template <typename... KArgs, typename... Args>
static cudaError_t launch_k(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, bool pdl,
                            Args... args) {
    return launch_kc(kernel, grid, block, smem, stream, pdl, 1, args...);
}
#endif

/* The CPU backend's expf (cpu/cpu.h cpu_expf, ggml's SIMD exp polynomial), operation for operation,
 * so that softmax weights match the oracle's before they are rounded to f16. */
static __device__ __forceinline__ float ggml_expf(float x) {
    const float shift = 0x1.8p23f, inv_ln2 = 0x1.715476p+0f, ln2_hi = 0x1.62e4p-1f, ln2_lo = 0x1.7f7d1cp-20f;
    const float c0 = 0x1.ffffecp-1f, c1 = 0x1.fffdb6p-2f, c2 = 0x1.555e66p-3f, c3 = 0x1.573e2ep-5f, c4 = 0x1.0e4020p-7f;
    const float z = fmaf(x, inv_ln2, shift);
    const float n = __fsub_rn(z, shift);
    const float r = fmaf(-n, ln2_lo, fmaf(-n, ln2_hi, x));
    const uint32_t e = __float_as_uint(z) << 23;
    const float scale = __uint_as_float(e + __float_as_uint(1.0f));
    const float r2 = __fmul_rn(r, r);
    const float poly = fmaf(fmaf(fmaf(c4, r, c3), r2, fmaf(c2, r, c1)), r2, __fmul_rn(c0, r));
    if (!(fabsf(n) > 126.0f)) return fmaf(poly, scale, scale);
    const uint32_t g = n <= 0.0f ? 0x82000000u : 0u;
    const float s1 = __uint_as_float(g + 0x7f000000u), s2 = __uint_as_float(e - g);
    if (fabsf(n) > 192.0f) return __fmul_rn(s1, s1);
    return __fmul_rn(fmaf(s2, poly, s2), s1);
}

/* tanh of a float through double precision (fast-math leaves double math alone): matches the
 * C library's tanhf to the last bit in all but rare double-rounding cases. */
static __device__ __forceinline__ float tanh_precise(float x) { return (float)tanh((double)x); }

#endif /* QR_CUDA_DEV_CUH */
