/* matmul_dq.cu — the batched-decode GEMM of K-quant weights on f16 tensor cores, dequantizing in registers.
 *
 * A decode step of 9..256 sequences multiplies every weight matrix by that many activation rows. Through
 * cuBLAS that needs the weights as f16 (the f16 cache: 14.5 GB a step for mistral-7b Q4_K_M, 3.5x the
 * Q4_K bytes), and the step is bound by reading them. This kernel reads the weights once per step in their
 * block format (the plane repack of dequant.cu), turns each weight code into the f16 value the f16 cache
 * would hold (scale x code - min, rounded to f16) in registers, and multiplies with mma.sync m16n8k16
 * (f16 inputs, f32 accumulators) against the activations as f16 (the Q8_K rounding of the cuBLAS path,
 * qr_cuda_act_q8_as_f16). So the numbers are those of the f16-cache GEMM up to the order of the f32 sums
 * and the f16 rounding of the per-sub-block scale and min (a half-ulp of f16 each).
 *
 * CTA: 128 threads (4 warps), 128 output rows (a warp: 32 rows = 2 m-tiles of 16), up to 64 activation rows
 * (NT n-tiles of 8); the K dimension runs in stages of 128 values (half a 256-value super-block) through a
 * 3-stage cp.async pipeline (weight codes, block metadata, activations). After a stage lands, thread r turns
 * row r's metadata into (scale, -min) f16 pairs per 16 values, then the warps compute. Split-K (grid.z)
 * gives the machine enough CTAs for the narrow matrices: each split writes its partial sums and a second
 * kernel adds them in split order (deterministic).
 *
 * The k permutation: mma's k index 2t, 2t+1 (lane t's first A/B register) is value 4t, 4t+1 of the 16 and
 * k 2t+8, 2t+9 is value 4t+2, 4t+3; A and B use the same map, so the dot product is unchanged, and each
 * lane reads 4 consecutive codes of a weight row and 4 consecutive f16 activations (one 8-byte load).
 */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_fp16.h>
#include "backend/cuda/quant_dev.cuh"

/* A register's bits as two halves and back (memcpy: the defined pun in C++; the same instructions as a pointer cast) */
static __device__ __forceinline__ __half2 dq_h2(uint32_t u) {
    __half2 h;
    memcpy(&h, &u, 4);
    return h;
}
static __device__ __forceinline__ uint32_t dq_u32(__half2 h) {
    uint32_t u;
    memcpy(&u, &h, 4);
    return u;
}

#define DQ_THREADS 128
#define DQ_BM 128     /* output rows per CTA */
#define DQ_KS 128     /* values per stage */
#define DQ_STAGES 3
#define DQ_XP 288     /* activation row pitch in shared memory (256 bytes + 32: 16 lanes hit 32 banks) */

/* Per type: the bytes of one row's stage copied to shared memory (codes, then the 16 bytes of the stage's
 * scale-plane entries), the scale plane, and the codes of 4 consecutive values. */
template <qr_type TY> struct dq;

/* Q4_K: p0 = qs[128] per super-block (value 64c + l: byte 32c + l low nibble, 64c + 32 + l high nibble),
 * p1 = {d, dmin, scales[12]}. Stage h (values 128h..) = bytes 64h..64h+63 = sub-blocks 4h..4h+3. Scale plane:
 * per sub-block of 32 the f16 pair {d x sc, -(dmin x m)}, 8 (32 bytes) a super-block. */
template <> struct dq<QR_TYPE_Q4_K> {
    static constexpr int WP = 80;    /* 64 code bytes + 16 scale bytes: 8 rows x 4 lanes in 32 distinct banks */
    static constexpr int CODE = 64, BLK = 128;
    static constexpr int OFF = 1024; /* the f16 magic: 0x6400 | q = 1024 + q */
    /* stage s of the row whose codes start at row (its 64 code bytes: the super-block s / 2, half s % 2) */
    static __device__ __forceinline__ const uint8_t *chunk(const uint8_t *row, int64_t s, int i) { return row + s * 64 + 16 * i; }
    static __device__ __forceinline__ void copy(uint8_t *dst, const uint8_t *row, int64_t s) {
#pragma unroll
        for (int i = 0; i < 4; i++) cp_async16(dst + 16 * i, chunk(row, s, i));
    }
    static __device__ __forceinline__ void make_scales(const cuda_wview &w, int64_t blk, uint32_t *out) {
        const uint4 m = *(const uint4 *)(w.p1 + blk * 16);
        const float d = h2f((uint16_t)(m.x & 0xFFFF)), dmin = h2f((uint16_t)(m.x >> 16));
#pragma unroll
        for (int s = 0; s < 8; s++) {
            int sc, mn;
            kscale_min(m.y, m.z, m.w, s, &sc, &mn);
            const __half2 e = __floats2half2_rn(__fmul_rn(d, (float)sc), -__fmul_rn(dmin, (float)mn));
            out[s] = dq_u32(e);
        }
    }
    /* the {mul, add} pair of values 32s + 16j.. of the stage, from its 16 scale bytes */
    static __device__ __forceinline__ uint32_t scale(const uint8_t *sc, int s, int j) { return *(const uint32_t *)(sc + 4 * s); }
    static __device__ __forceinline__ uint32_t codes(const uint8_t *wrow, int s, int j, int t) {
        return (word(wrow, s >> 1, j, t) >> (4 * (s & 1))) & 0x0F0F0F0Fu;
    }
    /* version 6: sub-blocks 2u and 2u + 1 share a code word (low / high nibbles) and a scale serves both halves j */
    static constexpr bool PAIRS = true;
    static __device__ __forceinline__ uint32_t word(const uint8_t *wrow, int u, int j, int t) {
        return *(const uint32_t *)(wrow + 32 * u + 16 * j + 4 * t);
    }
    /* values 8 kc .. 8 kc + 7 of the stage (the SS kernel): their codes as bytes (c0: the first 4), and {mul, add} */
    static __device__ __forceinline__ void codes8(const uint8_t *wrow, int kc, uint32_t &c0, uint32_t &c1) {
        const int sb = kc >> 2;
        const uint2 w = *(const uint2 *)(wrow + 32 * (sb >> 1) + 8 * (kc & 3));
        c0 = (w.x >> (4 * (sb & 1))) & 0x0F0F0F0Fu;
        c1 = (w.y >> (4 * (sb & 1))) & 0x0F0F0F0Fu;
    }
    static __device__ __forceinline__ uint32_t scale8(const uint8_t *sc, int kc) { return *(const uint32_t *)(sc + 4 * (kc >> 2)); }
};

/* Q6_K: p0 = ql[128] | qh[64], p1 = scales[16] (int8, one per 16 values), p2 = d (f16). Value 128h + 32k + l:
 * ql byte 64h + 32 (k & 1) + l (nibble k >> 1), qh byte 32h + l (bits 2k, 2k + 1); q - 32. Stage h: ql bytes
 * 64h.. (64), qh bytes 32h.. (32). Scale plane: per 16 values the f16 d x sc, 16 (32 bytes) a super-block. */
template <> struct dq<QR_TYPE_Q6_K> {
    static constexpr int WP = 112; /* 96 code bytes + 16 scale bytes */
    static constexpr int CODE = 96, BLK = 192;
    static constexpr int OFF = 1056; /* 1024 + 32: q - 32 */
    static constexpr bool PAIRS = false;
    static __device__ __forceinline__ uint32_t word(const uint8_t *, int, int, int) { return 0; }
    static __device__ __forceinline__ const uint8_t *chunk(const uint8_t *row, int64_t s, int i) {
        return row + (s >> 1) * 192 + (i < 4 ? 64 * (s & 1) + 16 * i : 128 + 32 * (s & 1) + 16 * (i - 4));
    }
    static __device__ __forceinline__ void copy(uint8_t *dst, const uint8_t *row, int64_t s) {
#pragma unroll
        for (int i = 0; i < 6; i++) cp_async16(dst + 16 * i, chunk(row, s, i));
    }
    static __device__ __forceinline__ void make_scales(const cuda_wview &w, int64_t blk, uint32_t *out) {
        const float d = h2f(*(const uint16_t *)(w.p2 + blk * 2));
#pragma unroll
        for (int e = 0; e < 8; e++) {
            const __half2 v = __floats2half2_rn(__fmul_rn(d, (float)(int8_t)w.p1[blk * 16 + 2 * e]),
                                                __fmul_rn(d, (float)(int8_t)w.p1[blk * 16 + 2 * e + 1]));
            out[e] = dq_u32(v);
        }
    }
    static __device__ __forceinline__ uint32_t scale(const uint8_t *sc, int s, int j) {
        const uint16_t m = *(const uint16_t *)(sc + 4 * s + 2 * j);
        return (uint32_t)m << 16 >> 16; /* {mul, add 0} */
    }
    static __device__ __forceinline__ uint32_t codes(const uint8_t *wrow, int s, int j, int t) {
        const uint32_t l = *(const uint32_t *)(wrow + 32 * (s & 1) + 16 * j + 4 * t);
        const uint32_t hb = *(const uint32_t *)(wrow + 64 + 16 * j + 4 * t);
        return ((l >> (4 * (s >> 1))) & 0x0F0F0F0Fu) | (((hb >> (2 * s)) & 0x03030303u) << 4);
    }
    static __device__ __forceinline__ void codes8(const uint8_t *wrow, int kc, uint32_t &c0, uint32_t &c1) {
        const int s = kc >> 2;
        const uint2 l = *(const uint2 *)(wrow + 32 * (s & 1) + 8 * (kc & 3));
        const uint2 hb = *(const uint2 *)(wrow + 64 + 8 * (kc & 3));
        c0 = ((l.x >> (4 * (s >> 1))) & 0x0F0F0F0Fu) | (((hb.x >> (2 * s)) & 0x03030303u) << 4);
        c1 = ((l.y >> (4 * (s >> 1))) & 0x0F0F0F0Fu) | (((hb.y >> (2 * s)) & 0x03030303u) << 4);
    }
    static __device__ __forceinline__ uint32_t scale8(const uint8_t *sc, int kc) {
        return (uint32_t)*(const uint16_t *)(sc + 2 * (kc >> 1)); /* {mul, add 0} */
    }
};

/* The 4 codes (bytes of c, each < 64) as f16 (code + OFF - OFF) x mul + add, sc = {mul, add}: two half2
 * (values 0,1 and 2,3). Q6_K (OFF 1056) has no add: its sc is {mul, 0} and the add is the constant +0. */
template <int OFF>
static __device__ __forceinline__ void deq4(uint32_t c, uint32_t sc, uint32_t &lo, uint32_t &hi) {
    const uint32_t h01 = __byte_perm(c, 0x64646464u, 0x5140), h23 = __byte_perm(c, 0x64646464u, 0x7362);
    const __half2 off = __float2half2_rn((float)OFF);
    /* {mul, mul} and {add, add} as operand selectors of the HFMA2 (.H0_H0 / .H1_H1), not two PRMTs. (With Q6_K's
     * {mul, 0} read through the selector, nvcc 13.0 fused the 16-bit scale loads of two steps into one 32-bit load
     * and took the next step's scale as the add: the mma.sync kernel's Q6_K sums went wrong in the lab.) */
    const __half2 ma = dq_h2(sc), mul = __low2half2(ma), add = OFF == 1024 ? __high2half2(ma) : __float2half2_rn(0.0f);
    lo = dq_u32(__hfma2(__hsub2(dq_h2(h01), off), mul, add));
    hi = dq_u32(__hfma2(__hsub2(dq_h2(h23), off), mul, add));
}

/* No volatile: the compiler may move it among the loads and the dequantization of the next k16 step. */
static __device__ __forceinline__ void mma_f16(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

template <qr_type TY, int NT> struct dq_cfg {
    static constexpr int NTOK = NT * 8;
    static constexpr int O_X = DQ_BM * dq<TY>::WP; /* activations after the weight rows */
    static constexpr int STAGE = O_X + NTOK * DQ_XP;
    static constexpr int SMEM = DQ_STAGES * STAGE;
};

/* The scale plane of a weight: one thread per super-block. */
template <qr_type TY>
static __global__ void dq_scales_kernel(const cuda_wview w, int64_t n_blk, uint32_t *__restrict__ out) {
    const int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= n_blk) return;
    uint32_t e[8];
    dq<TY>::make_scales(w, b, e);
    uint4 *o = (uint4 *)(out + b * 8);
    o[0] = make_uint4(e[0], e[1], e[2], e[3]);
    o[1] = make_uint4(e[4], e[5], e[6], e[7]);
}

/* Grid (token tiles, row tiles, splits). y (splits == 1) or part[split] = [n_tok][n_out] f32. sp: the scale plane. */
template <qr_type TY, int NT>
static __global__ void __launch_bounds__(DQ_THREADS, 2)
    dq_gemm_kernel(const cuda_wview w, const uint8_t *__restrict__ sp, const __half *__restrict__ x, int64_t n_tok,
                   int64_t n_out, float *__restrict__ y) {
    typedef dq<TY> D;
    typedef dq_cfg<TY, NT> C;
    extern __shared__ __align__(16) uint8_t sm[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int64_t tok0 = (int64_t)blockIdx.x * C::NTOK, row0 = (int64_t)blockIdx.y * DQ_BM;
    const int64_t k = w.k, nb = w.nb, n_st = k / DQ_KS;
    const int64_t st0 = n_st * blockIdx.z / gridDim.z, st1 = n_st * (blockIdx.z + 1) / gridDim.z;
    const int n_it = (int)(st1 - st0);
    float *out = y + (int64_t)blockIdx.z * n_tok * n_out;

    /* what this thread copies each stage: row tid's codes and scale-plane entries, and the 16-byte chunk xq of the
     * activation rows xj0, xj0 + 8, ... (fixed bases: a stage only adds its offset) */
    const int64_t my_row = row0 + tid < n_out ? row0 + tid : n_out - 1;
    const uint8_t *wbase = w.p0 + my_row * nb * D::BLK, *sbase = sp + my_row * nb * 32;
    const int xq = tid & 15, xj0 = tid >> 4;
    const __half *xbase = x + (tok0 + xj0) * k + xq * 8;
    auto load_stage = [&](int it) {
        uint8_t *st = sm + (it % DQ_STAGES) * C::STAGE;
        const int64_t s = st0 + it;
        D::copy(st + tid * D::WP, wbase, s);
        cp_async16(st + tid * D::WP + D::CODE, sbase + s * 16);
#pragma unroll
        for (int i = 0; i < NT; i++) {
            const bool ok = tok0 + xj0 + 8 * i < n_tok;
            cp_async16(st + C::O_X + (xj0 + 8 * i) * DQ_XP + xq * 16, ok ? xbase + (int64_t)i * 8 * k + s * DQ_KS : x, ok ? 16 : 0);
        }
    };

    float acc[2][NT][4] = {};

#pragma unroll
    for (int s = 0; s < DQ_STAGES - 1; s++) {
        if (s < n_it) load_stage(s);
        cp_async_commit();
    }
    for (int it = 0; it < n_it; it++) {
        cp_async_wait<DQ_STAGES - 2>();
        __syncthreads(); /* stage it landed for all; stage it - 1 is no longer read */
        if (it + DQ_STAGES - 1 < n_it) load_stage(it + DQ_STAGES - 1);
        cp_async_commit();
        const uint8_t *st = sm + (it % DQ_STAGES) * C::STAGE;
#pragma unroll
        for (int s = 0; s < 4; s++)
#pragma unroll
            for (int j = 0; j < 2; j++) {
                uint32_t b[NT][2];
#pragma unroll
                for (int n = 0; n < NT; n++) {
                    const uint2 v = *(const uint2 *)(st + C::O_X + (n * 8 + g) * DQ_XP + (32 * s + 16 * j + 4 * t) * 2);
                    b[n][0] = v.x;
                    b[n][1] = v.y;
                }
#pragma unroll
                for (int m = 0; m < 2; m++) {
                    const uint8_t *r0 = st + (warp * 32 + m * 16 + g) * D::WP, *r1 = r0 + 8 * D::WP;
                    uint32_t a[4];
                    deq4<D::OFF>(D::codes(r0, s, j, t), D::scale(r0 + D::CODE, s, j), a[0], a[2]);
                    deq4<D::OFF>(D::codes(r1, s, j, t), D::scale(r1 + D::CODE, s, j), a[1], a[3]);
#pragma unroll
                    for (int n = 0; n < NT; n++) mma_f16(acc[m][n], a, b[n][0], b[n][1]);
                }
            }
    }
    cp_async_wait<0>();

#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const int64_t row = row0 + warp * 32 + m * 16 + hh * 8 + g;
            if (row >= n_out) continue;
#pragma unroll
            for (int n = 0; n < NT; n++)
#pragma unroll
                for (int u = 0; u < 2; u++) {
                    const int64_t tok = tok0 + n * 8 + 2 * t + u;
                    if (tok < n_tok) out[tok * n_out + row] = acc[m][n][2 * hh + u];
                }
        }
}

/* y[i] = sum over the splits of part[s][i], in split order (y may be any float offset: scalar accesses). */
static __global__ void dq_reduce_kernel(const float *__restrict__ part, int splits, int64_t n, float *__restrict__ y) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float s = part[i];
    for (int p = 1; p < splits; p++) s += part[(int64_t)p * n + i];
    y[i] = s;
}

extern "C" cudaError_t qr_cuda_dq_reduce(const float *part, int32_t splits, int64_t n, float *y, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    if (splits < 1 || !part || !y) return cudaErrorInvalidValue;
    dq_reduce_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(part, splits, n, y);
    return cudaGetLastError();
}

/* ---- version 3: Hopper's warpgroup MMA (wgmma, sm_90a) ----
 *
 * The same numbers as dq_gemm_kernel (the same dequantization in registers, the same f16 products with f32 sums),
 * but the multiply is wgmma.mma_async m64nNk16: A = 64 weight rows from registers (the dequantized codes, the
 * mma.sync fragment layout per warp), B = the N activation rows from shared memory through a matrix descriptor.
 * The tensor cores then run beside the warps instead of taking an issue slot per m16n8k16, which is what bound the
 * mma.sync versions at 32+ rows (session 25's profile: 0.32 instructions issued a cycle, tensor pipes at ~25 %).
 *
 * CTA: 2 warpgroups (256 threads), each 64 x MT weight rows, all N (8 x NT) activation rows of the token tile.
 * Stages of 128 values through a cp.async ring as in version 1; the activations of a stage sit in the canonical
 * no-swizzle K-major layout: 8-value chunk c of token n at (c N + n) x 16 bytes, so a k16 step's B is chunks 2q
 * and 2q + 1 (leading byte offset N x 16 between them, stride byte offset 128 between 8-token groups). The
 * activations come permuted within every 16 values (qr_cuda_act_q8_as_f16 kind 2: mma position 2t, 2t+1 = value
 * 4t, 4t+1; position 2t+8, 2t+9 = value 4t+2, 4t+3), the k map of version 1, so lane t still reads 4 consecutive
 * codes a row. Per k16 step: dequantize into one of two A register sets, fence, issue the MT wgmmas, commit, and
 * wait until the previous step's group is done (its A set is free); the stage ends with every group done, before
 * the next __syncthreads lets the ring overwrite that stage. Without sm_90a code (an older build or GPU) the
 * kernel is empty and qr_cuda_dq_wg_available says no. */
#define WG_THREADS 256
#define WG_KS 128

#if defined(__CUDA_ARCH_FEAT_SM90_ALL) /* the helpers exist only where the kernel body does */
static __device__ __forceinline__ void wg_mma_n16(float *d, const uint32_t *a, uint64_t desc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7"
                 "}, {%8, %9, %10, %11}, %12, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1));
}

static __device__ __forceinline__ void wg_mma_n32(float *d, const uint32_t *a, uint64_t desc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
                 "}, {%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1));
}

static __device__ __forceinline__ void wg_mma_n64(float *d, const uint32_t *a, uint64_t desc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
                 "}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1));
}

static __device__ __forceinline__ void wg_mma_n128(float *d, const uint32_t *a, uint64_t desc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
                 "}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1));
}

template <int N> static __device__ __forceinline__ void wg_mma(float *d, const uint32_t *a, uint64_t desc) {
    if (N == 16) wg_mma_n16(d, a, desc);
    else if (N == 32) wg_mma_n32(d, a, desc);
    else if (N == 64) wg_mma_n64(d, a, desc);
    else wg_mma_n128(d, a, desc);
}

/* No memory clobber on the per-step fence / commit / wait: the next step's shared-memory loads of codes may move
 * above them (wgmma writes no memory; ptxas keeps the A registers of an in-flight group alive). The stage's last
 * wait (wg_wait_all) keeps it: the ring's next cp.async into that stage must come after it. */
static __device__ __forceinline__ void wg_fence(void) {
    asm volatile("wgmma.fence.sync.aligned;\n");
}
static __device__ __forceinline__ void wg_commit(void) {
    asm volatile("wgmma.commit_group.sync.aligned;\n");
}
template <int N> static __device__ __forceinline__ void wg_wait(void) {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N));
}
static __device__ __forceinline__ void wg_wait_all(void) {
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}
/* cp.async wrote the stage through the generic proxy; wgmma reads it through the async proxy */
static __device__ __forceinline__ void fence_proxy_async(void) {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* A-from-registers epilogue: the accumulators of weight row `row` (hh: the fragment's rows g / g + 8) for the N tokens
 * from tok0 (lane t: tokens 8 i + 2 t, + 1) */
template <int N>
static __device__ __forceinline__ void wg_store_row(float *out, const float *acc, int64_t row, int hh, int64_t tok0, int t,
                                                    int64_t n_tok, int64_t n_out) {
    if (row >= n_out) return;
#pragma unroll
    for (int i = 0; i < N / 8; i++)
#pragma unroll
        for (int u = 0; u < 2; u++) {
            const int64_t tok = tok0 + i * 8 + 2 * t + u;
            if (tok < n_tok) out[tok * n_out + row] = acc[4 * i + 2 * hh + u];
        }
}

/* both operands from shared memory (the SS form): A = activations (m64 tokens), B = dequantized weights */
static __device__ __forceinline__ void wg_mma_ss_n64(float *d, uint64_t da, uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
                 "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(da), "l"(db), "r"(1));
}

static __device__ __forceinline__ void wg_mma_ss_n128(float *d, uint64_t da, uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
                 "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(da), "l"(db), "r"(1));
}
#endif

/* Token tiles of up to 64 run 2 CTAs an SM (16 warps to hide the dequantization's latencies; at most 128
 * registers) where 3 stages of each fit in half the shared memory, wider ones 1. */
template <qr_type TY, int NT, int MT> struct wg_occ {
    static constexpr int STAGE = (128 * MT * dq<TY>::WP + 127) / 128 * 128 + NT * 8 * WG_KS * 2;
    static constexpr int CTAS = NT <= 8 && 3 * STAGE <= 112 * 1024 ? 2 : 1;
};

template <qr_type TY, int NT, int MT> struct wg_cfg {
    static constexpr int N = NT * 8, BM = 128 * MT;
    static constexpr int O_X = (BM * dq<TY>::WP + 127) / 128 * 128; /* activations after the weight rows */
    static constexpr int STAGE = O_X + N * WG_KS * 2;
    static constexpr int FIT = (wg_occ<TY, NT, MT>::CTAS == 2 ? 112 : 200) * 1024 / STAGE;
    static constexpr int STAGES = FIT < 4 ? FIT : 4;
    static constexpr int SMEM = STAGES * STAGE;
};

/* Grid (token tiles, row tiles, splits); y or part[split] = [n_tok][n_out] f32 as dq_gemm_kernel. */
/* The tiles: tile (rt, s) = rows 128 rt.. (the last row repeated past n), values 128 s..; row r of it at r x WP:
 * the stage's codes as D::copy lays them out, then its 16 bytes of the scale plane. One thread a (row, stage). */
/* Thread i of a tile builder: row r of tile ts = (row tile, stage s), the weight row it copies (the last past n). */
struct tile_pos {
    int r;
    int64_t ts, s, row;
};
static __device__ __forceinline__ bool tile_at(int64_t i, int64_t n_rt, int64_t n_st, int64_t n, tile_pos *p) {
    if (i >= n_rt * n_st * 128) return false;
    p->r = (int)(i & 127);
    p->ts = i >> 7;
    p->s = p->ts % n_st;
    const int64_t row = p->ts / n_st * 128 + p->r;
    p->row = row < n ? row : n - 1;
    return true;
}

template <qr_type TY>
static __global__ void dq_wg_tiles_kernel(const cuda_wview w, const uint8_t *__restrict__ sp, int64_t n_rt, int64_t n_st,
                                          uint8_t *__restrict__ out) {
    typedef dq<TY> D;
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    tile_pos p;
    if (!tile_at(i, n_rt, n_st, w.n, &p)) return;
    const int64_t s = p.s, row = p.row;
    uint8_t *dst = out + i * D::WP;
    const uint8_t *rp = w.p0 + row * w.nb * D::BLK;
#pragma unroll
    for (int c = 0; c < D::CODE / 16; c++) *(uint4 *)(dst + 16 * c) = *(const uint4 *)D::chunk(rp, s, c);
    *(uint4 *)(dst + D::CODE) = *(const uint4 *)(sp + row * w.nb * 32 + s * 16);
}

template <qr_type TY, int NT, int MT>
static __global__ void __launch_bounds__(WG_THREADS, wg_occ<TY, NT, MT>::CTAS)
    dq_wg_kernel(const cuda_wview w, const uint8_t *__restrict__ tiles, const __half *__restrict__ x, int64_t n_tok,
                 int64_t n_out, float *__restrict__ y) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    typedef dq<TY> D;
    typedef wg_cfg<TY, NT, MT> C;
    constexpr int N = C::N;
    extern __shared__ __align__(16) uint8_t sm[];
    const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int64_t tok0 = (int64_t)blockIdx.x * N, row0 = (int64_t)blockIdx.y * C::BM;
    const int64_t k = w.k, n_st = k / WG_KS;
    const int64_t st0 = n_st * blockIdx.z / gridDim.z, st1 = n_st * (blockIdx.z + 1) / gridDim.z;
    const int n_it = (int)(st1 - st0);
    float *out = y + (int64_t)blockIdx.z * n_tok * n_out;

    /* What this thread copies each stage, as pointers that step by one stage: weight chunks tid + 256 j of the
     * CTA's MT tiles (each tile's stage one sequential read; past the last tile the last again, its rows are not
     * stored), and the activations' chunk c = (tid >> 3) & 15 of tokens n0 + 16 j (8 lanes write one 128-byte row
     * of 8 tokens and read 4 chunks a token). */
    const int64_t n_rt = (n_out + 127) / 128, rt0 = row0 / 128;
    constexpr int TB = 128 * D::WP, TCH = TB / 16, WCH = (MT * TCH + WG_THREADS - 1) / WG_THREADS, XCH = N / 16;
    const uint8_t *wp[WCH];
#pragma unroll
    for (int j = 0; j < WCH; j++) {
        const int i = tid + WG_THREADS * j < MT * TCH ? tid + WG_THREADS * j : 0, m = i / TCH;
        const int64_t rt = rt0 + m < n_rt ? rt0 + m : n_rt - 1;
        wp[j] = tiles + (rt * n_st + st0) * TB + (int64_t)(i - m * TCH) * 16;
    }
    const int xc = (tid >> 3) & 15, n0 = (tid & 7) | ((tid >> 7) << 3);
    const __half *xp = x + (tok0 + n0) * k + st0 * WG_KS + xc * 8;
    const int64_t xstride = 16 * k;
    uint32_t xok = 0;
#pragma unroll
    for (int j = 0; j < XCH; j++) xok |= (uint32_t)(tok0 + n0 + 16 * j < n_tok) << j;
    auto load_stage = [&](int it) {
        uint8_t *st = sm + (it % C::STAGES) * C::STAGE;
#pragma unroll
        for (int j = 0; j < WCH; j++)
            if (MT * TCH % WG_THREADS == 0 || tid + WG_THREADS * j < MT * TCH)
                cp_async16(st + (tid + WG_THREADS * j) * 16, wp[j] + (int64_t)it * TB);
#pragma unroll
        for (int j = 0; j < XCH; j++) {
            const bool ok = (xok >> j) & 1;
            cp_async16(st + C::O_X + (xc * N + n0 + 16 * j) * 16, ok ? xp + j * xstride + (int64_t)it * WG_KS : x, ok ? 16 : 0);
        }
    };

    float acc[MT][N / 2];
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int i = 0; i < N / 2; i++) acc[m][i] = 0.0f;
    const uint32_t sbase = (uint32_t)__cvta_generic_to_shared(sm);
    /* leading byte offset N x 16 (the k16 step's second chunk), stride byte offset 128; layout type 0: no swizzle */
    const uint64_t dhi = ((uint64_t)(N * 16 >> 4) << 16) | ((uint64_t)(128 >> 4) << 32);

#pragma unroll
    for (int s = 0; s < C::STAGES - 1; s++) {
        if (s < n_it) load_stage(s);
        cp_async_commit();
    }
    for (int it = 0; it < n_it; it++) {
        cp_async_wait<C::STAGES - 2>();
        fence_proxy_async();
        __syncthreads(); /* stage it landed for all; every wgmma of stage it - 1 is done */
        if (it + C::STAGES - 1 < n_it) load_stage(it + C::STAGES - 1);
        cp_async_commit();
        const int buf = it % C::STAGES;
        const uint8_t *st = sm + buf * C::STAGE;
        const uint32_t xs = sbase + (uint32_t)(buf * C::STAGE + C::O_X);
        /* Three A register sets: step q + 1's codes are read from shared memory right after step q's group is
         * issued, then (once at most 2 groups are in flight: the set it takes was step q - 2's) dequantized while
         * the groups of steps q - 1 and q run. */
        uint32_t a[3][MT][4], cw[MT][4];
        auto load_step = [&](int q) {
            const int s = q >> 1, j = q & 1;
#pragma unroll
            for (int m = 0; m < MT; m++) {
                const uint8_t *r0 = st + ((wg * MT + m) * 64 + warp * 16 + g) * D::WP, *r1 = r0 + 8 * D::WP;
                cw[m][0] = D::codes(r0, s, j, t);
                cw[m][1] = D::scale(r0 + D::CODE, s, j);
                cw[m][2] = D::codes(r1, s, j, t);
                cw[m][3] = D::scale(r1 + D::CODE, s, j);
            }
        };
        auto deq_step = [&](uint32_t(*as)[4]) {
#pragma unroll
            for (int m = 0; m < MT; m++) {
                deq4<D::OFF>(cw[m][0], cw[m][1], as[m][0], as[m][2]);
                deq4<D::OFF>(cw[m][2], cw[m][3], as[m][1], as[m][3]);
            }
        };
        load_step(0);
        deq_step(a[0]);
#pragma unroll
        for (int q = 0; q < 8; q++) {
            const uint64_t desc = dhi | (uint64_t)(((xs + (uint32_t)(q * 2 * N * 16)) >> 4) & 0x3FFF);
            wg_fence();
#pragma unroll
            for (int m = 0; m < MT; m++) wg_mma<N>(acc[m], a[q % 3][m], desc);
            wg_commit();
            if (q + 1 < 8) {
                load_step(q + 1);
                wg_wait<2>();
                deq_step(a[(q + 1) % 3]);
            }
        }
        wg_wait_all();
    }
    cp_async_wait<0>();
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int i = 0; i < N / 2; i++) asm volatile("" : "+f"(acc[m][i])::"memory");

#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++)
            wg_store_row<N>(out, acc[m], row0 + (wg * MT + m) * 64 + warp * 16 + hh * 8 + g, hh, tok0, t, n_tok, n_out);
#endif
}

static __global__ void dq_wg_probe_kernel(int *out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    *out = 1;
#else
    *out = 0;
#endif
}

extern "C" bool qr_cuda_dq_wg_available(void) {
    static int have = -1;
    if (have >= 0) return have == 1;
    int *d = NULL, h = 0;
    have = 0;
    if (cudaMalloc(&d, sizeof(int)) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    dq_wg_probe_kernel<<<1, 1>>>(d);
    if (cudaGetLastError() == cudaSuccess && cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess)
        have = h == 1;
    (void)cudaGetLastError();
    cudaFree(d);
    return have == 1;
}

/* The split-K count that fills `slots` CTA slots in the fewest waves: the smallest that reaches 80 % of them, at
 * most 8 and at least 4 of the n_st stages a split. */
static int32_t fill_splits(int64_t tiles, int64_t n_st, int64_t slots) {
    int32_t best = 1;
    double best_eff = 0;
    for (int32_t s = 1; s <= 8 && s <= (n_st / 4 > 0 ? n_st / 4 : 1); s++) {
        const int64_t ctas = tiles * s, waves = (ctas + slots - 1) / slots;
        const double eff = (double)ctas / (double)(waves * slots);
        if (eff > best_eff + 1e-9) best_eff = eff, best = s;
        if (eff >= 0.8) break;
    }
    return best;
}

/* The shape of a call: NT from the batch, MT = 2 (256 weight rows a CTA) for wide matrices, and the split-K count
 * that fills the SMs in the fewest waves (the smallest count that reaches 80 % of the slots, at most 8 and at
 * least 4 stages a split). */
template <qr_type TY> static int wg_ctas(int nt, int mt) {
#define WG_OCC(NT_, MT_)                                                                                               \
    if (nt == NT_ && mt == MT_) return wg_occ<TY, NT_, MT_>::CTAS;
    WG_OCC(2, 1) WG_OCC(4, 1) WG_OCC(8, 1) WG_OCC(16, 1) WG_OCC(2, 2) WG_OCC(4, 2) WG_OCC(8, 2) WG_OCC(16, 2)
#undef WG_OCC
    return 1;
}

static void wg_shape(qr_type type, int64_t n_tok, int64_t n_out, int64_t k, int32_t sms, int mt_force, int *nt, int *mt,
                     int32_t *splits) {
    *nt = n_tok <= 16 ? 2 : n_tok <= 32 ? 4 : n_tok <= 64 ? 8 : 16;
    *mt = mt_force == 1 || mt_force == 2 ? mt_force : n_out >= 8192 ? 2 : 1;
    const int occ = type == QR_TYPE_Q4_K ? wg_ctas<QR_TYPE_Q4_K>(*nt, *mt) : wg_ctas<QR_TYPE_Q6_K>(*nt, *mt);
    const int64_t tiles = ((n_tok + *nt * 8 - 1) / (*nt * 8)) * ((n_out + 128 * *mt - 1) / (128 * *mt));
    *splits = fill_splits(tiles, k / WG_KS, (int64_t)sms * occ); /* wg_occ */
}

/* Version 6's token tile (16, 32 or 64) and split-K count (256 rows a CTA, one CTA an SM). */
static int wr_ntok(int64_t n_tok) { return n_tok <= 16 ? 16 : n_tok <= 32 ? 32 : 64; }
static int32_t wr_splits(int64_t n_tok, int64_t n_out, int64_t k, int32_t sms) {
    const int64_t nt = wr_ntok(n_tok);
    return fill_splits(((n_tok + nt - 1) / nt) * ((n_out + 255) / 256), k / WG_KS, sms);
}

extern "C" int32_t qr_cuda_dq_wg_splits(qr_type type, int64_t n_tok, int64_t n_out, int64_t k, int32_t sms,
                                        int mt_force, bool tma) {
    if (tma) return wr_splits(n_tok, n_out, k, sms);
    int nt, mt;
    int32_t s;
    wg_shape(type, n_tok, n_out, k, sms, mt_force, &nt, &mt, &s);
    return s;
}

template <qr_type TY, int NT, int MT>
static cudaError_t launch_wg(const cuda_wview &w, const uint8_t *tiles, const __half *x, int64_t n_tok, int64_t n_out,
                             int32_t splits, float *y, cudaStream_t stream) {
    constexpr int smem = wg_cfg<TY, NT, MT>::SMEM;
    const cudaError_t e = cudaFuncSetAttribute(dq_wg_kernel<TY, NT, MT>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    const dim3 grid((unsigned)((n_tok + NT * 8 - 1) / (NT * 8)), (unsigned)((n_out + 128 * MT - 1) / (128 * MT)),
                    (unsigned)splits);
    dq_wg_kernel<TY, NT, MT><<<grid, WG_THREADS, smem, stream>>>(w, tiles, x, n_tok, n_out, y);
    return cudaGetLastError();
}

template <qr_type TY>
static cudaError_t launch_wg_shape(const cuda_wview &w, const uint8_t *sp, const __half *x, int64_t n_tok, int64_t n_out,
                                   int nt, int mt, int32_t splits, float *y, cudaStream_t stream) {
#define WG_CASE(NT_, MT_)                                                                                              \
    if (nt == NT_ && mt == MT_) return launch_wg<TY, NT_, MT_>(w, sp, x, n_tok, n_out, splits, y, stream);
    WG_CASE(2, 1) WG_CASE(4, 1) WG_CASE(8, 1) WG_CASE(16, 1)
    WG_CASE(2, 2) WG_CASE(4, 2) WG_CASE(8, 2) WG_CASE(16, 2)
#undef WG_CASE
    return cudaErrorInvalidValue;
}

extern "C" bool qr_cuda_dq_gemm_supported(qr_type type) { return type == QR_TYPE_Q4_K || type == QR_TYPE_Q6_K; }

extern "C" int32_t qr_cuda_dq_gemm_splits(int64_t n_tok, int64_t n_out, int64_t k, int32_t sms) {
    const int64_t ctas = ((n_tok + 63) / 64) * ((n_out + DQ_BM - 1) / DQ_BM), n_st = k / DQ_KS;
    int64_t s = (2 * (int64_t)sms + ctas - 1) / ctas;
    if (s > 8) s = 8;
    if (s > n_st / 4) s = n_st / 4; /* at least 4 stages a split */
    return s < 1 ? 1 : (int32_t)s;
}

template <qr_type TY, int NT>
static cudaError_t launch_dq(const cuda_wview &w, const uint8_t *sp, const __half *x, int64_t n_tok, int64_t n_out,
                             int32_t splits, float *y, cudaStream_t stream) {
    constexpr int smem = dq_cfg<TY, NT>::SMEM;
    const cudaError_t e = cudaFuncSetAttribute(dq_gemm_kernel<TY, NT>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    const dim3 grid((unsigned)((n_tok + NT * 8 - 1) / (NT * 8)), (unsigned)((n_out + DQ_BM - 1) / DQ_BM), (unsigned)splits);
    dq_gemm_kernel<TY, NT><<<grid, DQ_THREADS, smem, stream>>>(w, sp, x, n_tok, n_out, y);
    return cudaGetLastError();
}

template <qr_type TY>
static cudaError_t launch_dq_nt(const cuda_wview &w, const uint8_t *sp, const __half *x, int64_t n_tok, int64_t n_out,
                                int32_t splits, float *y, cudaStream_t stream) {
    if (n_tok <= 8) return launch_dq<TY, 1>(w, sp, x, n_tok, n_out, splits, y, stream);
    if (n_tok <= 16) return launch_dq<TY, 2>(w, sp, x, n_tok, n_out, splits, y, stream);
    if (n_tok <= 32) return launch_dq<TY, 4>(w, sp, x, n_tok, n_out, splits, y, stream);
    return launch_dq<TY, 8>(w, sp, x, n_tok, n_out, splits, y, stream);
}

extern "C" size_t qr_cuda_dq_scales_bytes(const cuda_wview *w) { return (size_t)(w->n * w->nb) * 32; }

extern "C" cudaError_t qr_cuda_dq_scales(const cuda_wview *w, void *out, cudaStream_t stream) {
    if (!qr_cuda_dq_gemm_supported((qr_type)w->type) || w->nb <= 0) return cudaErrorInvalidValue;
    const int64_t n_blk = w->n * w->nb;
    const unsigned grid = (unsigned)((n_blk + 255) / 256);
    if (w->type == QR_TYPE_Q4_K) dq_scales_kernel<QR_TYPE_Q4_K><<<grid, 256, 0, stream>>>(*w, n_blk, (uint32_t *)out);
    else dq_scales_kernel<QR_TYPE_Q6_K><<<grid, 256, 0, stream>>>(*w, n_blk, (uint32_t *)out);
    return cudaGetLastError();
}


/* ---- version 4: the weights dequantized once into shared memory, both wgmma operands from there (SS) ----
 *
 * Version 3 (A from registers) spends ~3.4 instructions a weight value and its wgmma is as small as the batch
 * (m64 x n = tokens), so the warps' issue bounds it from ~32 rows. Here the 256 threads turn each stage's codes
 * (the same tiles) into f16 in shared memory once — a thread 8 consecutive values of one row: one LDS.64, 8 f16
 * values by deq4, one STS.128 into the K-major layout with the 128-byte swizzle — and the tokens become
 * wgmma's M side (A = the activations, m64 a warpgroup, from the staged ring in the same layout), the weight
 * rows its N side (B = the dequantized tile). Both operands use the 128-byte swizzle (sw128): the no-swizzle
 * layout of version 3 left the tensor pipe at ~25 %. MTOK = 1: up to 64 tokens, warpgroup w takes weight rows 64 w..
 * (m64n64); MTOK = 2: up to 128 tokens, warpgroup w takes tokens 64 w.. and all 128 rows (m64n128). The ring
 * loads S - 2 stages ahead, so the stage it overwrites (it - 2) is no longer read by a wgmma still in flight; two
 * dequantization buffers alternate the same way. The activations are kind 1 (natural order). */
#define WS_BM 128

/* The byte offset of 8-value chunk c (0..15 of a 128-value stage) of row r (of `rows`) in the K-major layout with the
 * 128-byte swizzle: two panels of 64 values (rows x 128 bytes each), 8-row atoms of 1024 bytes, the chunk's slot in
 * its 128-byte row XORed with the row's place in the atom. */
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
static __device__ __forceinline__ uint32_t sw128(int c, int r, int rows) {
    return (uint32_t)((c >> 3) * rows * 128 + (r >> 3) * 1024 + (r & 7) * 128 + (((c & 7) ^ (r & 7)) << 4));
}
#endif

/* The SS kernel's tiles. Q6_K: version 3's rows (dq<Q6_K>: codes, then the scale plane; row r at r x WP). Q4_K:
 * its own (qr_cuda_dq_ws_tiles), column-major so that consecutive rows are consecutive words (no bank conflicts):
 * word (c, r) at (128 c + r) x 4 = the codes of values 8c..8c+7 of row r as nibbles v0 v2 v4 v6 v1 v3 v5 v7 (bit 0
 * up), so that a mask with 0x000F000F (after a shift by 0, 4, 8, 12) gives the pair (v2i, v2i+1) in the low
 * nibbles of two halves; then from byte 8192 per sub-block sb of 32 the pairs {mul, mul}, {add, add} of row r at
 * 8192 + (128 sb + r) x 8. 8 values: one LDS.32, 3 shifts, 4 LOP3, 4 HSUB2, 4 HFMA2 — deq4's f16 values. */
template <qr_type TY> struct ws_fmt;
template <> struct ws_fmt<QR_TYPE_Q6_K> {
    typedef dq<QR_TYPE_Q6_K> D;
    static constexpr int TILE = 128 * D::WP;
    static __device__ __forceinline__ void deq8(const uint8_t *tile, int r, int kc, uint4 &v) {
        const uint8_t *wr = tile + r * D::WP;
        uint32_t c0, c1;
        D::codes8(wr, kc, c0, c1);
        const uint32_t sc = D::scale8(wr + D::CODE, kc);
        deq4<D::OFF>(c0, sc, v.x, v.y);
        deq4<D::OFF>(c1, sc, v.z, v.w);
    }
};
template <> struct ws_fmt<QR_TYPE_Q4_K> {
    static constexpr int TILE = 128 * 96, SCALES = 8192;
    static __device__ __forceinline__ uint32_t pair(uint32_t w, uint32_t mul, uint32_t add) {
        const uint32_t h = (w & 0x000F000Fu) | 0x64006400u;
        return dq_u32(__hfma2(__hsub2(dq_h2(h), __float2half2_rn(1024.0f)), dq_h2(mul), dq_h2(add)));
    }
    static __device__ __forceinline__ void deq8(const uint8_t *tile, int r, int kc, uint4 &v) {
        const uint32_t w = *(const uint32_t *)(tile + (128 * kc + r) * 4);
        const uint2 sc = *(const uint2 *)(tile + SCALES + (128 * (kc >> 2) + r) * 8);
        v.x = pair(w, sc.x, sc.y);
        v.y = pair(w >> 4, sc.x, sc.y);
        v.z = pair(w >> 8, sc.x, sc.y);
        v.w = pair(w >> 12, sc.x, sc.y);
    }
};

template <qr_type TY, int MTOK> struct ws_cfg {
    static constexpr int NTOK = 64 * MTOK;
    static constexpr int TILE = ws_fmt<TY>::TILE;               /* codes + scales of the stage */
    static constexpr int O_X = (TILE + 1023) / 1024 * 1024;    /* the activations' two panels, 1024-aligned */
    static constexpr int SLOT = O_X + NTOK * WG_KS * 2;
    static constexpr int DQB = WS_BM * WG_KS * 2;              /* one dequantized stage: 32 KB, two panels */
    static constexpr int FIT = (223 * 1024 - 2 * DQB) / SLOT;
    static constexpr int S = FIT < 5 ? FIT : 5;
    static constexpr int SMEM = 1024 + 2 * DQB + S * SLOT;     /* + the alignment of the base */
};

template <qr_type TY, int MTOK>
static __global__ void __launch_bounds__(WG_THREADS, 1)
    dq_ws_kernel(const uint8_t *__restrict__ tiles, const __half *__restrict__ x, int64_t k, int64_t n_tok, int64_t n_out,
                 float *__restrict__ y) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    typedef ws_cfg<TY, MTOK> C;
    static_assert(C::S >= 3, "the ring needs 3 slots");
    constexpr int NTOK = C::NTOK, XCH = NTOK / 16, TCH = C::TILE / 16, WCH = (TCH + WG_THREADS - 1) / WG_THREADS;
    extern __shared__ __align__(16) uint8_t sm[];
    /* 128-byte swizzle needs 1024-byte aligned panels */
    const uint32_t raw = (uint32_t)__cvta_generic_to_shared(sm), pad = (1024u - (raw & 1023u)) & 1023u;
    uint8_t *base = sm + pad, *dqb = base, *ring = base + 2 * C::DQB;
    const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int64_t tok0 = (int64_t)blockIdx.x * NTOK, row0 = (int64_t)blockIdx.y * WS_BM, n_st = k / WG_KS;
    const int64_t st0 = n_st * blockIdx.z / gridDim.z, st1 = n_st * (blockIdx.z + 1) / gridDim.z;
    const int n_it = (int)(st1 - st0);
    float *out = y + (int64_t)blockIdx.z * n_tok * n_out;

    /* copies: the tile's chunks tid + 256 j (one sequential read), the activations' chunk xc of tokens n0 + 16 j */
    const uint8_t *wsrc = tiles + (row0 / WS_BM * n_st + st0) * C::TILE;
    const int xc = (tid >> 3) & 15, n0 = (tid & 7) | ((tid >> 7) << 3);
    const __half *xp = x + (tok0 + n0) * k + st0 * WG_KS + xc * 8;
    const int64_t xstride = 16 * k;
    uint32_t xok = 0;
#pragma unroll
    for (int j = 0; j < XCH; j++) xok |= (uint32_t)(tok0 + n0 + 16 * j < n_tok) << j;
    auto load_stage = [&](int it) {
        uint8_t *sl = ring + (it % C::S) * C::SLOT;
#pragma unroll
        for (int j = 0; j < WCH; j++)
            if (TCH % WG_THREADS == 0 || tid + WG_THREADS * j < TCH)
                cp_async16(sl + (tid + WG_THREADS * j) * 16, wsrc + (int64_t)it * C::TILE + (tid + WG_THREADS * j) * 16);
#pragma unroll
        for (int j = 0; j < XCH; j++) {
            const bool ok = (xok >> j) & 1;
            cp_async16(sl + C::O_X + sw128(xc, n0 + 16 * j, NTOK), ok ? xp + j * xstride + (int64_t)it * WG_KS : x, ok ? 16 : 0);
        }
    };

    constexpr int NW = MTOK == 1 ? 64 : 128; /* weight rows a warpgroup's wgmma covers */
    float acc[NW / 2];
#pragma unroll
    for (int i = 0; i < NW / 2; i++) acc[i] = 0.0f;
    const uint32_t sbase = raw + pad;
    /* both operands K-major with the 128-byte swizzle: stride byte offset 1024 (8 rows), leading offset unused */
    const uint64_t dhi = ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
    const uint32_t a_off = MTOK == 1 ? 0 : wg * 64 * 128, b_off = MTOK == 1 ? wg * 64 * 128 : 0;
    /* the dequantization: row r = tid & 127, chunks kc = (tid >> 7) + 2 j */
    const int dr = tid & 127, dk0 = tid >> 7;

#pragma unroll
    for (int s = 0; s < C::S - 2; s++) {
        if (s < n_it) load_stage(s);
        cp_async_commit();
    }
    for (int it = 0; it < n_it; it++) {
        cp_async_wait<C::S - 3>();
        wg_wait<1>(); /* the wgmma of stage it - 2 is done: its ring slot and dequantization buffer are free */
        __syncthreads();
        if (it + C::S - 2 < n_it) load_stage(it + C::S - 2);
        cp_async_commit();
        const uint8_t *sl = ring + (it % C::S) * C::SLOT;
        uint8_t *db = dqb + (it & 1) * C::DQB;
        /* every value first, then the stores (the compiler cannot tell the two buffers apart) */
        uint4 v[8];
#pragma unroll
        for (int j = 0; j < 8; j++) ws_fmt<TY>::deq8(sl, dr, dk0 + 2 * j, v[j]);
#pragma unroll
        for (int j = 0; j < 8; j++) *(uint4 *)(db + sw128(dk0 + 2 * j, dr, WS_BM)) = v[j];
        fence_proxy_async();
        __syncthreads(); /* the stage's f16 weights written by all; its activations landed (cp.async + fence) */
        /* the descriptors of step 0; step q adds its byte offset / 16 to the 14-bit start field (no carry: every
         * address is below 256 KB) */
        const uint64_t da0 = dhi | (uint64_t)((sbase + (uint32_t)(2 * C::DQB + (it % C::S) * C::SLOT + C::O_X) + a_off) >> 4);
        const uint64_t db0 = dhi | (uint64_t)((sbase + (uint32_t)((it & 1) * C::DQB) + b_off) >> 4);
        wg_fence();
#pragma unroll
        for (int q = 0; q < 8; q++) {
            const uint64_t da = da0 + (uint64_t)(((q >> 2) * NTOK * 128 + (q & 3) * 32) >> 4);
            const uint64_t dbd = db0 + (uint64_t)(((q >> 2) * WS_BM * 128 + (q & 3) * 32) >> 4);
            if (MTOK == 1) wg_mma_ss_n64(acc, da, dbd);
            else wg_mma_ss_n128(acc, da, dbd);
        }
        wg_commit();
    }
    wg_wait_all();
    cp_async_wait<0>();
#pragma unroll
    for (int i = 0; i < NW / 2; i++) asm volatile("" : "+f"(acc[i])::"memory");

    /* D[token][weight row]: token 16 warp + g (+ 8), rows 8 i + 2 t, + 1 (a float2 a token) */
    const int64_t tb = tok0 + (MTOK == 1 ? 0 : wg * 64) + warp * 16 + g;
    const int64_t rb = row0 + (MTOK == 1 ? wg * 64 : 0) + 2 * t;
    const bool pairs = (n_out & 1) == 0 && ((uintptr_t)out & 7) == 0;
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        const int64_t tok = tb + 8 * hh;
        if (tok >= n_tok) continue;
#pragma unroll
        for (int i = 0; i < NW / 8; i++) {
            const int64_t row = rb + 8 * i;
            const float v0 = acc[4 * i + 2 * hh], v1 = acc[4 * i + 2 * hh + 1];
            if (pairs && row + 1 < n_out) *(float2 *)(out + tok * n_out + row) = make_float2(v0, v1);
            else {
                if (row < n_out) out[tok * n_out + row] = v0;
                if (row + 1 < n_out) out[tok * n_out + row + 1] = v1;
            }
        }
    }
#endif
}

template <qr_type TY, int MTOK>
static cudaError_t launch_ws(const uint8_t *tiles, const __half *x, int64_t k, int64_t n_tok, int64_t n_out, int32_t splits,
                             float *y, cudaStream_t stream) {
    constexpr int smem = ws_cfg<TY, MTOK>::SMEM;
    const cudaError_t e = cudaFuncSetAttribute(dq_ws_kernel<TY, MTOK>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    const dim3 grid((unsigned)((n_tok + 64 * MTOK - 1) / (64 * MTOK)), (unsigned)((n_out + WS_BM - 1) / WS_BM), (unsigned)splits);
    dq_ws_kernel<TY, MTOK><<<grid, WG_THREADS, smem, stream>>>(tiles, x, k, n_tok, n_out, y);
    return cudaGetLastError();
}

/* ---- the TMA pieces of version 6 (below) ---- */
#define WT_CONS 512                /* 4 consumer warpgroups */
#define WT_THREADS (WT_CONS + 32)  /* + the producer warp */

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
static __device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
static __device__ __forceinline__ void mbar_expect_tx(uint32_t bar, int bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
static __device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
static __device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    asm volatile("{\n.reg .pred p;\nWAIT_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra WAIT_%=;\n}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}
/* n bytes (a multiple of 16) from global to shared memory, completing on bar */
static __device__ __forceinline__ void tma_bulk(uint32_t dst, const void *src, int n, uint32_t bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
                 "l"(src), "r"(n), "r"(bar)
                 : "memory");
}
/* the box of the tensor map at (c0 = value, c1 = token), completing on bar */
static __device__ __forceinline__ void tma_2d(uint32_t dst, const CUtensorMap *map, int c0, int c1, uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
                 "[%4];" ::"r"(dst),
                 "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(bar)
                 : "memory");
}
/* Thread-block clusters (version 6 with the activations multicast, wr_cfg's CL > 1): this CTA's rank, a cluster-wide
 * barrier, a shared address of the CTA of rank r, an arrival on a barrier there, a wait that acquires at cluster scope,
 * and the TMA box written at the same offset of every CTA of mask, completing on each one's barrier at bar. */
static __device__ __forceinline__ uint32_t cl_rank(void) {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
static __device__ __forceinline__ void cl_sync(void) {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
static __device__ __forceinline__ uint32_t cl_map(uint32_t addr, uint32_t rank) {
    uint32_t r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
    return r;
}
static __device__ __forceinline__ void mbar_arrive_remote(uint32_t cluster_addr) {
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(cluster_addr) : "memory");
}
static __device__ __forceinline__ void mbar_wait_cluster(uint32_t bar, uint32_t parity) {
    uint32_t done = 0;
    while (!done)
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
}
static __device__ __forceinline__ void tma_2d_mc(uint32_t dst, const CUtensorMap *map, int c0, int c1, uint32_t bar,
                                                 uint16_t mask) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster "
                 "[%0], [%1, {%2, %3}], [%4], %5;" ::"r"(dst),
                 "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(bar), "h"(mask)
                 : "memory");
}

#endif

/* The tensor map of the activations [n_tok][k] f16 for the TMA: boxes of 64 values x box_rows tokens, the 128-byte
 * swizzle, zeros past the last token. False where the driver has no cuTensorMapEncodeTiled or refuses the shape. */
static PFN_cuTensorMapEncodeTiled_v12000 wt_encoder(void) {
    cudaDriverEntryPointQueryResult q;
    void *fn = NULL;
    const bool ok = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) ==
                        cudaSuccess &&
                    q == cudaDriverEntryPointSuccess;
    (void)cudaGetLastError();
    return ok ? (PFN_cuTensorMapEncodeTiled_v12000)fn : NULL;
}

static bool wt_map(CUtensorMap *map, const __half *x, int64_t k, int64_t n_tok, int box_rows) {
    static const PFN_cuTensorMapEncodeTiled_v12000 enc = wt_encoder(); /* once, thread-safe (the tensor-parallel ranks) */
    if (!enc || ((uintptr_t)x & 15) || (k * 2) % 16) return false;
    const cuuint64_t dims[2] = {(cuuint64_t)k, (cuuint64_t)n_tok}, strides[1] = {(cuuint64_t)k * 2};
    const cuuint32_t box[2] = {64, (cuuint32_t)box_rows}, estr[2] = {1, 1};
    return enc(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, (void *)x, dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
               CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/* ---- version 6: version 3's registers-as-A form with the copies on the TMA and the warps specialized ----
 *
 * Version 4 / 5 (weights dequantized into shared memory, both operands from there) are bound by shared memory's
 * bandwidth: a stage of 128 rows moves ~170 KB through it (the dequantized tile written and read, the
 * activations read by every warpgroup), 1,300 cycles at 128 bytes a cycle (Nsight Compute: L1/TEX 80 % busy,
 * the same time at 16 and at 64 rows). Here the dequantized codes never touch shared memory: as in version 3
 * they are wgmma's A operand from registers (64 weight rows a warpgroup), the activations B (N tokens) through
 * a descriptor; a CTA is 256 weight rows (4 consumer warpgroups, 16 warps) and one producer warp whose lane 0
 * copies each stage with the TMA: the two 128-row weight tiles of version 3 (bulk copies) and the activations'
 * two 64-value panels through a 2-D tensor map with the 128-byte swizzle (kind 2's order, rows past n_tok
 * zero-filled). Per stage a warpgroup runs 8 k16 steps with 4 A register sets (step q + 1 is dequantized once
 * step q - 3's group is done), so the groups run on across stages; a stage's ring slot is handed back (one
 * arrival a warpgroup on its "empty" mbarrier) once step 2 of the next stage finds it done. The sums are version
 * 3's: the same values in the same k16 order into the same f32 accumulators, so bit for bit version 1's. */
template <qr_type TY, int NT> struct wr_cfg {
    static constexpr int N = NT * 8, TB = 128 * dq<TY>::WP;
    static constexpr int O_X = (2 * TB + 1023) / 1024 * 1024;  /* the two tiles, then the activations' panels */
    static constexpr int SLOT = O_X + N * WG_KS * 2;
    static constexpr int FIT = (227 * 1024 - 1024 - 256) / SLOT;
    static constexpr int S = FIT < 6 ? FIT : 6;
    static constexpr int O_BAR = S * SLOT;
    static constexpr int SMEM = 1024 + O_BAR + 16 * S;
};

/* Up to 3 weights with the same input (q / k / v) in one launch: grid.y runs over their 256-row tiles in turn. */
#define WR_MATS 3
struct wr_mats {
    const uint8_t *tiles[WR_MATS]; /* v3's tiles of each */
    float *y[WR_MATS];             /* the outputs [n_tok][n_out] (no split-K) */
    int64_t n_out[WR_MATS];
    int64_t off[WR_MATS];          /* with split-K: matrix i's block [n_tok][n_out] at n_tok x off[i] of a split's part */
    int32_t t0[WR_MATS + 1];       /* its first 256-row tile; t0[n] = all of them */
    int32_t n;
    uint32_t q6;                   /* dq_wr_mix_kernel: bit i set where matrix i is Q6_K (else Q4_K) */
    int32_t pdl;                   /* launched with programmatic dependent launch: first stages' weights before the wait */
};

/* The body of version 6 for a CTA whose matrix is of type TY (sm: the dynamic shared memory, at least wr_cfg's SMEM).
 * CL 2: launched in clusters of 2 CTAs along grid.y (two 256-row tiles of the same token tile and k range, same type):
 * each CTA's producer copies its own weights and one of the stage's two activation panels, multicast into both CTAs
 * (the activations cross from L2 once a pair instead of once a CTA); a slot is free for the next copy once the
 * consumers of both CTAs are done with it (each warpgroup arrives on the "empty" barriers of both), and neither CTA
 * exits before its partner has made its last arrival on it (a cluster barrier at the end). The same sums. */
template <qr_type TY, int NT, int CL = 1>
static __device__ __forceinline__ void wr_body(const CUtensorMap &xmap, const wr_mats &m, int64_t k, int64_t n_tok,
                                               int64_t n_all, float *__restrict__ part, uint8_t *sm) {
    static_assert(CL == 1 || CL == 2, "clusters of 1 or 2 CTAs");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    typedef dq<TY> D;
    typedef wr_cfg<TY, NT> C;
    static_assert(C::S >= 3, "the ring needs 3 slots");
    constexpr int N = C::N;
    const uint32_t raw = (uint32_t)__cvta_generic_to_shared(sm), pad = (1024u - (raw & 1023u)) & 1023u;
    const uint8_t *ring = sm + pad;
    const uint32_t sring = raw + pad, sfull = sring + C::O_BAR, sempty = sfull + 8 * C::S;
    const int tid = threadIdx.x, by = (int)blockIdx.y, mi = (m.n > 1 && by >= m.t0[1]) + (m.n > 2 && by >= m.t0[2]);
    const uint8_t *tiles = mi == 0 ? m.tiles[0] : mi == 1 ? m.tiles[1] : m.tiles[2];
    const int64_t n_out = mi == 0 ? m.n_out[0] : mi == 1 ? m.n_out[1] : m.n_out[2];
    const int64_t tok0 = (int64_t)blockIdx.x * N, row0 = (int64_t)(by - (mi == 0 ? 0 : mi == 1 ? m.t0[1] : m.t0[2])) * 256;
    const int64_t n_st = k / WG_KS, st0 = n_st * blockIdx.z / gridDim.z, st1 = n_st * (blockIdx.z + 1) / gridDim.z;
    const int n_it = (int)(st1 - st0);
    if (tid == 0) {
        for (int s = 0; s < C::S; s++) {
            mbar_init(sfull + 8 * s, 1);
            mbar_init(sempty + 8 * s, 4 * CL);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        fence_proxy_async();
    }
    if (CL > 1) cl_sync(); /* the partner's barriers exist before any arrival or multicast reaches them */
    else __syncthreads();
    const uint32_t rank = CL > 1 ? cl_rank() : 0;

    if (tid >= WT_CONS) { /* the producer */
        if (tid == WT_CONS) {
            const int64_t n_rt = (n_out + 127) / 128, rt0 = row0 / 128, rt1 = rt0 + 1 < n_rt ? rt0 + 1 : n_rt - 1;
            const uint8_t *w0 = tiles + (rt0 * n_st + st0) * C::TB, *w1 = tiles + (rt1 * n_st + st0) * C::TB;
            /* launched with programmatic dependent launch: the weights of the ring's first stages before the kernel
             * ahead has finished (only the activations are its output); else each stage's copies in turn */
            const int pre = !m.pdl || CL > 1 ? 0 : n_it < C::S ? n_it : C::S;
            for (int it = 0; it < pre; it++) {
                const uint32_t full = sfull + 8 * it, dst = sring + it * C::SLOT;
                mbar_expect_tx(full, 2 * C::TB + N * WG_KS * 2);
                tma_bulk(dst, w0 + (int64_t)it * C::TB, C::TB, full);
                tma_bulk(dst + C::TB, w1 + (int64_t)it * C::TB, C::TB, full);
            }
            pdl_wait();
            for (int it = 0; it < n_it; it++) {
                const int s = it % C::S;
                const uint32_t full = sfull + 8 * s, dst = sring + s * C::SLOT;
                if (it >= pre) {
                    if (it >= C::S) {
                        if (CL > 1) mbar_wait_cluster(sempty + 8 * s, (uint32_t)((it / C::S - 1) & 1));
                        else mbar_wait(sempty + 8 * s, (uint32_t)((it / C::S - 1) & 1));
                    }
                    mbar_expect_tx(full, 2 * C::TB + N * WG_KS * 2); /* (CL 2: one panel comes from the partner) */
                    tma_bulk(dst, w0 + (int64_t)it * C::TB, C::TB, full);
                    tma_bulk(dst + C::TB, w1 + (int64_t)it * C::TB, C::TB, full);
                }
                const int c0 = (int)((st0 + it) * WG_KS);
                if (CL > 1) { /* panel `rank` into both CTAs */
                    tma_2d_mc(dst + C::O_X + rank * (N * 128), &xmap, c0 + 64 * (int)rank, (int)tok0, full, (uint16_t)3);
                } else {
                    tma_2d(dst + C::O_X, &xmap, c0, (int)tok0, full);
                    tma_2d(dst + C::O_X + N * 128, &xmap, c0 + 64, (int)tok0, full);
                }
            }
            pdl_launch_dependents();
        }
        return;
    }

    const int wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int r0 = wg * 64 + warp * 16 + g; /* this thread's rows r0, r0 + 8 of the CTA's 256 */
    const uint32_t rempty = CL > 1 ? cl_map(sempty, rank ^ 1u) : 0u; /* the partner's "empty" barriers (CL 2) */
    float acc[N / 2];
#pragma unroll
    for (int i = 0; i < N / 2; i++) acc[i] = 0.0f;
    /* B: the activations K-major with the 128-byte swizzle (stride byte offset 1024, leading offset unused) */
    const uint64_t dhi = ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
    uint32_t a[4][4], cw[4];
    uint32_t cwr[4]; /* Q4_K: the code words of steps q..q + 3 (q % 4 == 0): rows p0 / p1 x j 0 / 1 */
    auto load_step = [&](const uint8_t *st, int q) { /* q is a constant once unrolled: the branches fold */
        const int s = q >> 1, j = q & 1;
        const uint8_t *p0 = st + r0 * D::WP, *p1 = p0 + 8 * D::WP;
        if (D::PAIRS) { /* a word holds sub-blocks 2u (low nibbles) and 2u + 1 (high); a scale serves j = 0 and 1 */
            if ((q & 3) == 0)
#pragma unroll
                for (int i = 0; i < 4; i++) cwr[i] = D::word(i < 2 ? p0 : p1, s >> 1, i & 1, t);
            cw[0] = (cwr[j] >> (4 * (s & 1))) & 0x0F0F0F0Fu;
            cw[2] = (cwr[2 + j] >> (4 * (s & 1))) & 0x0F0F0F0Fu;
            if (j == 0) {
                cw[1] = D::scale(p0 + D::CODE, s, j);
                cw[3] = D::scale(p1 + D::CODE, s, j);
            }
            return;
        }
        cw[0] = D::codes(p0, s, j, t);
        cw[1] = D::scale(p0 + D::CODE, s, j);
        cw[2] = D::codes(p1, s, j, t);
        cw[3] = D::scale(p1 + D::CODE, s, j);
    };
    auto deq_step = [&](uint32_t *as) {
        deq4<D::OFF>(cw[0], cw[1], as[0], as[2]);
        deq4<D::OFF>(cw[2], cw[3], as[1], as[3]);
    };
    for (int it = 0; it < n_it; it++) {
        const int s = it % C::S;
        mbar_wait(sfull + 8 * s, (uint32_t)((it / C::S) & 1));
        const uint8_t *st = ring + s * C::SLOT;
        const uint32_t xs = sring + (uint32_t)(s * C::SLOT + C::O_X);
        const uint64_t d0 = dhi | (uint64_t)(xs >> 4); /* xs and the step offsets are multiples of 16 */
        load_step(st, 0);
        wg_wait<3>(); /* set 0's last group (step 4 of the stage before) is done */
        deq_step(a[0]);
#pragma unroll
        for (int q = 0; q < 8; q++) {
            /* the start address field (14 bits, no carry out: shared memory < 256 KB) of the stage's first step plus
             * a constant: one uniform add a step */
            const uint64_t desc = d0 + (uint64_t)(((q >> 2) * N * 128 + (q & 3) * 32) >> 4);
            wg_fence();
            wg_mma<N>(acc, a[q & 3], desc);
            wg_commit();
            if (q + 1 < 8) {
                load_step(st, q + 1);
                wg_wait<3>(); /* step q - 3's group is done: its A set is free */
                if (q == 2 && it > 0 && (tid & 127) == 0) { /* all of it - 1 */
                    mbar_arrive(sempty + 8 * ((it - 1) % C::S));
                    if (CL > 1) mbar_arrive_remote(rempty + 8 * ((it - 1) % C::S));
                }
                deq_step(a[(q + 1) & 3]);
            }
        }
    }
    wg_wait_all();
#pragma unroll
    for (int i = 0; i < N / 2; i++) asm volatile("" : "+f"(acc[i])::"memory");
    pdl_wait(); /* (the stores after the kernel ahead, whatever n_it) */

    float *out = part ? part + ((int64_t)blockIdx.z * n_all + (mi == 0 ? m.off[0] : mi == 1 ? m.off[1] : m.off[2])) * n_tok
                      : mi == 0 ? m.y[0] : mi == 1 ? m.y[1] : m.y[2];
#pragma unroll
    for (int hh = 0; hh < 2; hh++) wg_store_row<N>(out, acc, row0 + r0 + hh * 8, hh, tok0, t, n_tok, n_out);
    if (CL > 1) cl_sync(); /* the partner's last arrivals on this CTA's barriers are done (the producer warp has exited) */
#endif
}

template <qr_type TY, int NT, int CL = 1>
static __global__ void __launch_bounds__(WT_THREADS, 1)
    dq_wr_kernel(const __grid_constant__ CUtensorMap xmap, const wr_mats m, int64_t k, int64_t n_tok, int64_t n_all,
                 float *__restrict__ part) {
    extern __shared__ __align__(16) uint8_t sm[];
    wr_body<TY, NT, CL>(xmap, m, k, n_tok, n_all, part, sm);
}


/* Q4_K and Q6_K matrices in one launch (a Q4_K_M layer's q / k with its Q6_K v): a CTA takes its matrix's body (the
 * branch is uniform over the CTA); the shared memory is the larger of the two rings. */
template <int NT>
static __global__ void __launch_bounds__(WT_THREADS, 1)
    dq_wr_mix_kernel(const __grid_constant__ CUtensorMap xmap, const wr_mats m, int64_t k, int64_t n_tok, int64_t n_all,
                     float *__restrict__ part) {
    extern __shared__ __align__(16) uint8_t sm[];
    const int by = (int)blockIdx.y, mi = (m.n > 1 && by >= m.t0[1]) + (m.n > 2 && by >= m.t0[2]);
    if ((m.q6 >> mi) & 1u) wr_body<QR_TYPE_Q6_K, NT>(xmap, m, k, n_tok, n_all, part, sm);
    else wr_body<QR_TYPE_Q4_K, NT>(xmap, m, k, n_tok, n_all, part, sm);
}

/* part: the split-K parts ([split][n_tok x n_all]), NULL for one split */
template <qr_type TY, int NT>
static cudaError_t launch_wr(const wr_mats &m, const __half *x, int64_t k, int64_t n_tok, int64_t n_all, int32_t splits,
                             float *part, bool pdl, cudaStream_t stream, int cl = 1) {
    CUtensorMap map;
    if (!wt_map(&map, x, k, n_tok, NT * 8)) return cudaErrorNotSupported;
    constexpr int smem = wr_cfg<TY, NT>::SMEM;
    /* pairs of 256-row tiles only; Q4_K only (Q6_K's 8-token-group form with the partner's barrier address had ptxas
     * serialize its wgmmas: C7513) */
    constexpr int CLX = TY == QR_TYPE_Q4_K ? 2 : 1;
    if (cl > 1 && (m.t0[m.n] % 2 || CLX == 1)) cl = 1;
    const dim3 grid((unsigned)((n_tok + NT * 8 - 1) / (NT * 8)), (unsigned)m.t0[m.n], (unsigned)splits);
    float *pp = splits > 1 ? part : (float *)NULL;
    if (cl > 1) { /* a cluster launch the GPU refuses falls back to one CTA each */
        cudaError_t e = cudaFuncSetAttribute(dq_wr_kernel<TY, NT, CLX>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (e == cudaSuccess)
            e = launch_kc(dq_wr_kernel<TY, NT, CLX>, grid, dim3(WT_THREADS), smem, stream, pdl, CLX, map, m, k, n_tok, n_all,
                          pp);
        if (e == cudaSuccess) return e;
        (void)cudaGetLastError();
    }
    const cudaError_t e = cudaFuncSetAttribute(dq_wr_kernel<TY, NT, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    return launch_kc(dq_wr_kernel<TY, NT, 1>, grid, dim3(WT_THREADS), smem, stream, pdl, 1, map, m, k, n_tok, n_all, pp);
}

/* Q4_K and Q6_K matrices in one launch (dq_wr_mix_kernel) */
template <int NT>
static cudaError_t launch_wr_mix(const wr_mats &m, const __half *x, int64_t k, int64_t n_tok, int64_t n_all,
                                 int32_t splits, float *part, bool pdl, cudaStream_t stream) {
    CUtensorMap map;
    if (!wt_map(&map, x, k, n_tok, NT * 8)) return cudaErrorNotSupported;
    constexpr int s4 = wr_cfg<QR_TYPE_Q4_K, NT>::SMEM, s6 = wr_cfg<QR_TYPE_Q6_K, NT>::SMEM, smem = s4 > s6 ? s4 : s6;
    const cudaError_t e = cudaFuncSetAttribute(dq_wr_mix_kernel<NT>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    const dim3 grid((unsigned)((n_tok + NT * 8 - 1) / (NT * 8)), (unsigned)m.t0[m.n], (unsigned)splits);
    return launch_k(dq_wr_mix_kernel<NT>, grid, dim3(WT_THREADS), smem, stream, pdl, map, m, k, n_tok, n_all,
                    splits > 1 ? part : (float *)NULL);
}

template <qr_type TY>
static cudaError_t launch_wr_nt(const wr_mats &m, const __half *x, int64_t k, int64_t n_tok, int64_t n_all, int32_t splits,
                                float *part, bool pdl, cudaStream_t stream, int cl) {
    if (n_tok <= 16) return launch_wr<TY, 2>(m, x, k, n_tok, n_all, splits, part, pdl, stream, cl);
    if (n_tok <= 32) return launch_wr<TY, 4>(m, x, k, n_tok, n_all, splits, part, pdl, stream, cl);
    return launch_wr<TY, 8>(m, x, k, n_tok, n_all, splits, part, pdl, stream, cl); /* 128 tokens: too few registers (120) */
}

/* y_i = the sum over the splits of matrix i's block of the parts, in split order */
static __global__ void dq_reduce_multi_kernel(const float *__restrict__ part, int splits, int64_t n_tok, int64_t n_all,
                                              const wr_mats m) {
    pdl_enter(); /* (launched with PDL after a version 6 launched so: tune.dq_pdl) */
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= n_tok * n_all) return;
    const int mi = (m.n > 1 && e >= m.off[1] * n_tok) + (m.n > 2 && e >= m.off[2] * n_tok);
    float s = part[e];
    for (int p = 1; p < splits; p++) s += part[(int64_t)p * n_tok * n_all + e];
    float *y = mi == 0 ? m.y[0] : mi == 1 ? m.y[1] : m.y[2];
    y[e - (mi == 0 ? 0 : mi == 1 ? m.off[1] : m.off[2]) * n_tok] = s;
}

/* Version 6 over n_w weights of one type and one k with the same activations: their rows in one grid. */
static cudaError_t wr_run(int32_t n_w, const cuda_wview *w, const void *const *tiles, const void *xh, int64_t n_tok,
                          float *const *y, int32_t splits, float *part, bool pdl, cudaStream_t stream, bool reduce = true,
                          int cl = 1) {
    wr_mats m = {};
    int64_t n_all = 0;
    m.n = n_w;
    for (int32_t i = 0; i < n_w; i++) {
        m.tiles[i] = (const uint8_t *)tiles[i];
        m.y[i] = y[i];
        m.n_out[i] = w[i].n;
        m.off[i] = n_all;
        m.t0[i + 1] = m.t0[i] + (int32_t)((w[i].n + 255) / 256);
        n_all += w[i].n;
    }
    const __half *x = (const __half *)xh;
    for (int32_t i = 0; i < n_w; i++) m.q6 |= (uint32_t)(w[i].type == QR_TYPE_Q6_K) << i;
    m.pdl = pdl;
    const int64_t k = w[0].k;
    cudaError_t e = m.q6 != 0 && m.q6 != (1u << n_w) - 1
                        ? (n_tok <= 16   ? launch_wr_mix<2>(m, x, k, n_tok, n_all, splits, part, pdl, stream)
                           : n_tok <= 32 ? launch_wr_mix<4>(m, x, k, n_tok, n_all, splits, part, pdl, stream)
                                         : launch_wr_mix<8>(m, x, k, n_tok, n_all, splits, part, pdl, stream))
                    : w[0].type == QR_TYPE_Q4_K ? launch_wr_nt<QR_TYPE_Q4_K>(m, x, k, n_tok, n_all, splits, part, pdl, stream, cl)
                                                : launch_wr_nt<QR_TYPE_Q6_K>(m, x, k, n_tok, n_all, splits, part, pdl, stream, cl);
    if (e != cudaSuccess || splits == 1 || !reduce) return e;
    const int64_t n = n_tok * n_all;
    return launch_k(dq_reduce_multi_kernel, dim3((unsigned)((n + 255) / 256)), dim3(256), 0, stream, pdl, (const float *)part,
                    (int)splits, n_tok, n_all, m);
}

extern "C" int32_t qr_cuda_dq_wr_multi_splits(int32_t n_w, const cuda_wview *w, int64_t n_tok, int32_t sms) {
    int64_t tiles = 0;
    for (int32_t i = 0; i < n_w; i++) tiles += (w[i].n + 255) / 256;
    const int64_t nt = wr_ntok(n_tok);
    return fill_splits(((n_tok + nt - 1) / nt) * tiles, w[0].k / WG_KS, sms);
}

extern "C" cudaError_t qr_cuda_dq_reduce_multi(const float *part, int32_t splits, int64_t n_tok, int32_t n_w,
                                               const int64_t *n_out, float *const *y, cudaStream_t stream) {
    if (n_tok <= 0) return cudaSuccess;
    if (n_w < 1 || n_w > WR_MATS || splits < 1 || !part) return cudaErrorInvalidValue;
    wr_mats m = {};
    int64_t n_all = 0;
    m.n = n_w;
    for (int32_t i = 0; i < n_w; i++) {
        if (n_out[i] <= 0 || !y[i]) return cudaErrorInvalidValue;
        m.y[i] = y[i];
        m.n_out[i] = n_out[i];
        m.off[i] = n_all;
        n_all += n_out[i];
    }
    const int64_t n = n_tok * n_all;
    return launch_k(dq_reduce_multi_kernel, dim3((unsigned)((n + 255) / 256)), dim3(256), 0, stream, false, part,
                    (int)splits, n_tok, n_all, m);
}

extern "C" cudaError_t qr_cuda_dq_wr_multi(int32_t n_w, const cuda_wview *w, const void *const *tiles, const void *xh,
                                           int64_t n_tok, float *const *y, int32_t splits, float *part, bool pdl,
                                           bool defer, int32_t cl, cudaStream_t stream) {
    if (n_tok <= 0) return cudaSuccess;
    if (n_w < 1 || n_w > WR_MATS || splits < 1 || splits > 8 || (splits > 1 && !part) || (n_tok + 63) / 64 > 65535)
        return cudaErrorInvalidValue;
    for (int32_t i = 0; i < n_w; i++) /* Q4_K / Q6_K, mixed or not (dq_wr_mix_kernel) */
        if (!qr_cuda_dq_gemm_supported((qr_type)w[i].type) || w[i].k != w[0].k || w[i].k % 256 ||
            w[i].nb != w[i].k / 256 || w[i].n <= 0 || !tiles[i] || !y[i])
            return cudaErrorInvalidValue;
    return wr_run(n_w, w, tiles, xh, n_tok, y, splits, part, pdl, stream, !defer, cl);
}

/* The SS kernel's split-K count (1 CTA an SM). */
extern "C" int32_t qr_cuda_dq_ws_splits(int64_t n_tok, int64_t n_out, int64_t k, int32_t sms) {
    const int64_t ntok = n_tok <= 64 ? 64 : 128;
    return fill_splits(((n_tok + ntok - 1) / ntok) * ((n_out + WS_BM - 1) / WS_BM), k / WG_KS, sms);
}

extern "C" cudaError_t qr_cuda_dq_ws_gemm(const cuda_wview *w, const void *tiles, const void *xh, int64_t n_tok,
                                          int64_t n_out, int32_t splits, float *part, float *y, cudaStream_t stream) {
    if (n_tok <= 0) return cudaSuccess;
    if (!qr_cuda_dq_gemm_supported((qr_type)w->type) || w->k % 256 || w->nb != w->k / 256 || n_out <= 0 || splits < 1 ||
        splits > 8 || (splits > 1 && !part) || (n_tok + 63) / 64 > 65535 || (n_out + WS_BM - 1) / WS_BM > 65535)
        return cudaErrorInvalidValue;
    float *dst = splits > 1 ? part : y;
    const __half *x = (const __half *)xh;
    const uint8_t *tp = (const uint8_t *)tiles;
    const bool q4 = w->type == QR_TYPE_Q4_K, one = n_tok <= 64;
    cudaError_t e = q4 ? (one ? launch_ws<QR_TYPE_Q4_K, 1>(tp, x, w->k, n_tok, n_out, splits, dst, stream)
                              : launch_ws<QR_TYPE_Q4_K, 2>(tp, x, w->k, n_tok, n_out, splits, dst, stream))
                       : (one ? launch_ws<QR_TYPE_Q6_K, 1>(tp, x, w->k, n_tok, n_out, splits, dst, stream)
                              : launch_ws<QR_TYPE_Q6_K, 2>(tp, x, w->k, n_tok, n_out, splits, dst, stream));
    if (e != cudaSuccess || splits == 1) return e;
    return qr_cuda_dq_reduce(part, splits, n_tok * n_out, y, stream);
}

/* The SS kernel's Q4_K tiles (ws_fmt<Q4_K>) from the plane layout and the scale plane: one thread a (row, stage). */
static __global__ void dq_ws_tiles_q4k_kernel(const cuda_wview w, const uint8_t *__restrict__ sp, int64_t n_rt,
                                              int64_t n_st, uint8_t *__restrict__ out) {
    typedef dq<QR_TYPE_Q4_K> D;
    tile_pos p;
    if (!tile_at((int64_t)blockIdx.x * blockDim.x + threadIdx.x, n_rt, n_st, w.n, &p)) return;
    const int r = p.r;
    const int64_t s = p.s, row = p.row;
    const uint8_t *rp = w.p0 + row * w.nb * D::BLK + s * 64; /* the stage's 64 code bytes */
    uint8_t *dst = out + p.ts * ws_fmt<QR_TYPE_Q4_K>::TILE;
    for (int c = 0; c < 16; c++) {
        uint32_t word = 0;
        for (int e = 0; e < 8; e++) {
            const int v = 8 * c + e, sb = v >> 5, pos = v & 31;
            const uint32_t q = (rp[32 * (sb >> 1) + pos] >> (4 * (sb & 1))) & 15u;
            const int slot = (e & 1) ? 4 + (e >> 1) : (e >> 1); /* v0 v2 v4 v6 v1 v3 v5 v7 */
            word |= q << (4 * slot);
        }
        *(uint32_t *)(dst + (128 * c + r) * 4) = word;
    }
    const uint8_t *sc = sp + row * w.nb * 32 + s * 16;
    for (int sb = 0; sb < 4; sb++) {
        const uint32_t e = *(const uint32_t *)(sc + 4 * sb);
        uint8_t *o = dst + ws_fmt<QR_TYPE_Q4_K>::SCALES + (128 * sb + r) * 8;
        *(uint32_t *)o = __byte_perm(e, 0, 0x1010);
        *(uint32_t *)(o + 4) = __byte_perm(e, 0, 0x3232);
    }
}

extern "C" size_t qr_cuda_dq_ws_tiles_bytes(const cuda_wview *w) {
    return (size_t)(((w->n + 127) / 128) * (w->k / WG_KS)) * ws_fmt<QR_TYPE_Q4_K>::TILE;
}

extern "C" cudaError_t qr_cuda_dq_ws_tiles(const cuda_wview *w, const void *scales, void *out, cudaStream_t stream) {
    if (w->type != QR_TYPE_Q4_K || w->nb <= 0 || w->k % 256 || !scales) return cudaErrorInvalidValue;
    const int64_t n_rt = (w->n + 127) / 128, n_st = w->k / WG_KS, n = n_rt * n_st * 128;
    dq_ws_tiles_q4k_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(*w, (const uint8_t *)scales, n_rt, n_st,
                                                                           (uint8_t *)out);
    return cudaGetLastError();
}

extern "C" size_t qr_cuda_dq_wg_tiles_bytes(const cuda_wview *w) {
    const int64_t n_rt = (w->n + 127) / 128, n_st = w->k / WG_KS;
    return (size_t)(n_rt * n_st * 128) * (size_t)(w->type == QR_TYPE_Q4_K ? dq<QR_TYPE_Q4_K>::WP : dq<QR_TYPE_Q6_K>::WP);
}

extern "C" cudaError_t qr_cuda_dq_wg_tiles(const cuda_wview *w, const void *scales, void *out, cudaStream_t stream) {
    if (!qr_cuda_dq_gemm_supported((qr_type)w->type) || w->nb <= 0 || w->k % 256 || !scales) return cudaErrorInvalidValue;
    const int64_t n_rt = (w->n + 127) / 128, n_st = w->k / WG_KS, n = n_rt * n_st * 128;
    const unsigned grid = (unsigned)((n + 255) / 256);
    const uint8_t *sp = (const uint8_t *)scales;
    if (w->type == QR_TYPE_Q4_K) dq_wg_tiles_kernel<QR_TYPE_Q4_K><<<grid, 256, 0, stream>>>(*w, sp, n_rt, n_st, (uint8_t *)out);
    else dq_wg_tiles_kernel<QR_TYPE_Q6_K><<<grid, 256, 0, stream>>>(*w, sp, n_rt, n_st, (uint8_t *)out);
    return cudaGetLastError();
}

extern "C" cudaError_t qr_cuda_dq_wg_gemm(const cuda_wview *w, const void *tiles, const void *xh, int64_t n_tok,
                                          int64_t n_out, int32_t splits, float *part, float *y, int32_t sms,
                                          int mt_force, bool tma, bool pdl, int32_t *defer, int32_t cl,
                                          cudaStream_t stream) {
    const bool may_defer = defer && *defer;
    if (defer) *defer = 0;
    if (n_tok <= 0) return cudaSuccess;
    int nt, mt;
    int32_t s;
    wg_shape((qr_type)w->type, n_tok, n_out, w->k, sms, mt_force, &nt, &mt, &s);
    if (splits <= 0) splits = tma ? wr_splits(n_tok, n_out, w->k, sms) : s;
    if (!qr_cuda_dq_gemm_supported((qr_type)w->type) || w->k % 256 || w->nb != w->k / 256 || n_out <= 0 || splits > 8 ||
        (splits > 1 && !part) || (n_tok + 127) / 128 > 65535 || (n_out + 127) / 128 > 65535)
        return cudaErrorInvalidValue;
    float *dst = splits > 1 ? part : y;
    const __half *x = (const __half *)xh;
    const uint8_t *sp = (const uint8_t *)tiles;
    if (tma) { /* version 6; without a tensor map version 3 */
        cuda_wview wv = *w;
        wv.n = n_out;
        const cudaError_t e6 = wr_run(1, &wv, &tiles, xh, n_tok, &y, splits, part, pdl, stream, !may_defer, cl);
        if (e6 == cudaSuccess && may_defer && splits > 1) *defer = 1; /* y = the sum of the parts: the caller's */
        if (e6 != cudaErrorNotSupported) return e6;
    }
    const bool q4 = w->type == QR_TYPE_Q4_K;
    cudaError_t e = q4 ? launch_wg_shape<QR_TYPE_Q4_K>(*w, sp, x, n_tok, n_out, nt, mt, splits, dst, stream)
                       : launch_wg_shape<QR_TYPE_Q6_K>(*w, sp, x, n_tok, n_out, nt, mt, splits, dst, stream);
    if (e != cudaSuccess || splits == 1) return e;
    return qr_cuda_dq_reduce(part, splits, n_tok * n_out, y, stream);
}

extern "C" cudaError_t qr_cuda_dq_gemm(const cuda_wview *w, const void *scales, const void *xh, int64_t n_tok, int64_t n_out,
                                       int32_t splits, float *part, float *y, cudaStream_t stream) {
    if (n_tok <= 0) return cudaSuccess;
    if (!qr_cuda_dq_gemm_supported((qr_type)w->type) || w->k % 256 || w->nb != w->k / 256 || n_out <= 0 || splits < 1 ||
        splits > 8 || (splits > 1 && !part) || (n_tok + 63) / 64 > 65535 || (n_out + DQ_BM - 1) / DQ_BM > 65535)
        return cudaErrorInvalidValue;
    float *dst = splits > 1 ? part : y;
    const __half *x = (const __half *)xh;
    const uint8_t *sp = (const uint8_t *)scales;
    cudaError_t e = w->type == QR_TYPE_Q4_K ? launch_dq_nt<QR_TYPE_Q4_K>(*w, sp, x, n_tok, n_out, splits, dst, stream)
                                            : launch_dq_nt<QR_TYPE_Q6_K>(*w, sp, x, n_tok, n_out, splits, dst, stream);
    if (e != cudaSuccess || splits == 1) return e;
    return qr_cuda_dq_reduce(part, splits, n_tok * n_out, y, stream);
}
