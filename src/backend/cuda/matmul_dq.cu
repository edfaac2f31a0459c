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
 * The weights are read once and used by one warp only, so they skip shared memory: lane t of a warp loads, per
 * stage of 128 values and per weight row of its four (rows g, g + 8 of its two m-tiles of 16), one 16-byte piece
 * of the row's codes (the 4 lanes of a row read its 64 stage bytes whole) and the scale-plane entries of those
 * codes, into a ring of NB register buffers filled NB - 1 stages ahead. Only the activations, which all warps
 * share, go through shared memory (a 4-stage cp.async pipeline). A CTA: 8 warps, 256 weight rows, up to 64
 * activation rows; one CTA an SM (the registers). Split-K (grid.z) by waves: each split writes its partial sums
 * and a second kernel adds them in split order (deterministic).
 *
 * The k map: lane t's 16 code bytes hold 32 values; in k16 step q (0..7 a stage) it gives the 4 values from
 * pos(t, q) on (the same 4 code bytes, the low nibbles for q < 4) as mma's k 2t, 2t + 1, 2t + 8, 2t + 9; the B
 * fragment takes the activations at the same positions (A and B use the same map, so the dot product is
 * unchanged). In shared memory an activation row of a stage is laid out in 16-byte pieces (q / 2, t) holding
 * values pos(t, q) .. + 7 (steps q and q + 1 of lane t), so a lane reads two steps' B fragments with one
 * LDS.128, and the pitch (320 bytes) puts the two tokens of each 8-lane phase in different bank halves.
 */
#include <cuda_fp16.h>
#include "backend/cuda/quant_dev.cuh"

/* The 4 codes (bytes of c, each < 64) as f16 (code + OFF - OFF) x mul + add, sc = {mul, add}: two half2
 * (values 0,1 and 2,3). */
template <int OFF>
static __device__ __forceinline__ void deq4(uint32_t c, uint32_t sc, uint32_t &lo, uint32_t &hi) {
    const uint32_t h01 = __byte_perm(c, 0x64646464u, 0x5140), h23 = __byte_perm(c, 0x64646464u, 0x7362);
    const uint32_t mw = __byte_perm(sc, 0, 0x1010), aw = __byte_perm(sc, 0, 0x3232);
    const __half2 off = __float2half2_rn((float)OFF);
    const __half2 mul = *(const __half2 *)&mw, add = *(const __half2 *)&aw;
    const __half2 a = __hfma2(__hsub2(*(const __half2 *)&h01, off), mul, add);
    const __half2 b = __hfma2(__hsub2(*(const __half2 *)&h23, off), mul, add);
    lo = *(const uint32_t *)&a;
    hi = *(const uint32_t *)&b;
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

#define DQ_WARPS 8
#define DQ_THREADS (32 * DQ_WARPS)
#define DQ_BM (32 * DQ_WARPS) /* weight rows a CTA */
#define DQ_XP 320             /* activation row pitch in shared memory */
#define DQ_AST 4              /* activation stages */

template <qr_type TY> struct dq;

/* Q4_K: lane t's piece is stage bytes 16t.. (32-byte chunk t / 2: values 64 (t / 2) + 16 (t % 2) + i in the low
 * nibbles, + 32 in the high ones); its scale-plane entries are those of sub-blocks 4h + 2 (t / 2) and the next. */
template <> struct dq<QR_TYPE_Q4_K> {
    static constexpr int NB = 3, OFF = 1024, BLK = 128;
    struct R {
        uint4 c;
        uint2 s;
    };
    static __device__ __forceinline__ int pos(int t, int q) { return 64 * (t >> 1) + 16 * (t & 1) + 32 * (q >> 2) + 4 * (q & 3); }
    static __device__ __forceinline__ void load(R &r, const uint8_t *row, const uint8_t *srow, int64_t s, int t) {
        r.c = __ldg((const uint4 *)(row + s * 64 + 16 * t));
        r.s = __ldg((const uint2 *)(srow + s * 16 + 8 * (t >> 1)));
    }
    static __device__ __forceinline__ uint32_t codes(const R &r, int q, int) {
        const uint32_t w = (q & 3) == 0 ? r.c.x : (q & 3) == 1 ? r.c.y : (q & 3) == 2 ? r.c.z : r.c.w;
        return (w >> (4 * (q >> 2))) & 0x0F0F0F0Fu;
    }
    static __device__ __forceinline__ uint32_t scale(const R &r, int q) { return q < 4 ? r.s.x : r.s.y; }
};

/* Q6_K: lane t's piece is the stage's ql bytes 16t.. (value 32k + l with k % 2 = t / 2, l = 16 (t % 2) + i: k =
 * t / 2 in the low nibbles, + 2 in the high ones) and the 16 qh bytes of the same l; its scale-plane word holds
 * the scales of its two 16-value groups (t and t + 4 of the stage). */
template <> struct dq<QR_TYPE_Q6_K> {
    static constexpr int NB = 2, OFF = 1056, BLK = 192;
    struct R {
        uint4 l, h;
        uint32_t s;
    };
    static __device__ __forceinline__ int pos(int t, int q) { return 32 * (t >> 1) + 64 * (q >> 2) + 16 * (t & 1) + 4 * (q & 3); }
    static __device__ __forceinline__ void load(R &r, const uint8_t *row, const uint8_t *srow, int64_t s, int t) {
        const uint8_t *b = row + (s >> 1) * 192;
        r.l = __ldg((const uint4 *)(b + 64 * (s & 1) + 16 * t));
        r.h = __ldg((const uint4 *)(b + 128 + 32 * (s & 1) + 16 * (t & 1)));
        r.s = __ldg((const uint32_t *)(srow + s * 16 + 4 * t));
    }
    static __device__ __forceinline__ uint32_t codes(const R &r, int q, int t) {
        const uint32_t lw = (q & 3) == 0 ? r.l.x : (q & 3) == 1 ? r.l.y : (q & 3) == 2 ? r.l.z : r.l.w;
        const uint32_t hw = (q & 3) == 0 ? r.h.x : (q & 3) == 1 ? r.h.y : (q & 3) == 2 ? r.h.z : r.h.w;
        const int k = (t >> 1) + 2 * (q >> 2);
        return ((lw >> (4 * (q >> 2))) & 0x0F0F0F0Fu) | (((hw >> (2 * k)) & 0x03030303u) << 4);
    }
    static __device__ __forceinline__ uint32_t scale(const R &r, int q) { return q < 4 ? (r.s & 0xFFFFu) : (r.s >> 16); }
};

/* The scale plane of Q4_K: per sub-block of 32 the f16 pair {d x sc, -(dmin x m)}, 8 words a super-block. */
static __global__ void dq_scales_q4k_kernel(const cuda_wview w, int64_t n_blk, uint32_t *__restrict__ out) {
    const int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= n_blk) return;
    const uint4 m = *(const uint4 *)(w.p1 + b * 16);
    const float d = h2f((uint16_t)(m.x & 0xFFFF)), dmin = h2f((uint16_t)(m.x >> 16));
    uint32_t e[8];
#pragma unroll
    for (int s = 0; s < 8; s++) {
        int sc, mn;
        kscale_min(m.y, m.z, m.w, s, &sc, &mn);
        const __half2 v = __floats2half2_rn(__fmul_rn(d, (float)sc), -__fmul_rn(dmin, (float)mn));
        e[s] = *(const uint32_t *)&v;
    }
    uint4 *o = (uint4 *)(out + b * 8);
    o[0] = make_uint4(e[0], e[1], e[2], e[3]);
    o[1] = make_uint4(e[4], e[5], e[6], e[7]);
}

/* The scale plane of Q6_K: per super-block 8 words, word 4h + t = {d x sc[8h + t], d x sc[8h + 4 + t]}. */
static __global__ void dq_scales_q6k_kernel(const cuda_wview w, int64_t n_blk, uint32_t *__restrict__ out) {
    const int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= n_blk) return;
    const float d = h2f(*(const uint16_t *)(w.p2 + b * 2));
    uint32_t e[8];
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int g = 8 * (i >> 2) + (i & 3);
        const __half2 v = __floats2half2_rn(__fmul_rn(d, (float)(int8_t)w.p1[b * 16 + g]),
                                            __fmul_rn(d, (float)(int8_t)w.p1[b * 16 + g + 4]));
        e[i] = *(const uint32_t *)&v;
    }
    uint4 *o = (uint4 *)(out + b * 8);
    o[0] = make_uint4(e[0], e[1], e[2], e[3]);
    o[1] = make_uint4(e[4], e[5], e[6], e[7]);
}

template <qr_type TY, int NT>
static __global__ void __launch_bounds__(DQ_THREADS, 1)
    dq_gemm_kernel(const cuda_wview w, const uint8_t *__restrict__ sp, const __half *__restrict__ x, int64_t n_tok,
                    int64_t n_out, float *__restrict__ y) {
    typedef dq<TY> D;
    typedef typename D::R R;
    constexpr int NTOK = NT * 8, XSTAGE = NTOK * DQ_XP, NB = D::NB;
    extern __shared__ __align__(16) uint8_t sm[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int64_t tok0 = (int64_t)blockIdx.x * NTOK, row0 = (int64_t)blockIdx.y * DQ_BM;
    const int64_t k = w.k, nb = w.nb, n_st = k / 128;
    const int64_t st0 = n_st * blockIdx.z / gridDim.z, st1 = n_st * (blockIdx.z + 1) / gridDim.z;
    const int n_it = (int)(st1 - st0);
    float *out = y + (int64_t)blockIdx.z * n_tok * n_out;

    /* this lane's 4 weight rows (2 m-tiles x rows g, g + 8; rows past the end read the last one) */
    const uint8_t *wrow[2][2], *srow[2][2];
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            int64_t r = row0 + warp * 32 + m * 16 + hh * 8 + g;
            if (r >= n_out) r = n_out - 1;
            wrow[m][hh] = w.p0 + r * nb * D::BLK;
            srow[m][hh] = sp + r * nb * 32;
        }
    /* the activation pieces this thread copies: piece pi of rows xj, xj + 16, ... */
    const int pi = tid & 15, xj = tid >> 4;
    const int xoff = D::pos(pi & 3, 2 * (pi >> 2));
    auto load_x = [&](int it) {
        uint8_t *st = sm + (it % DQ_AST) * XSTAGE;
        const int64_t s = st0 + it;
#pragma unroll
        for (int i = 0; i < (NTOK + DQ_THREADS / 16 - 1) / (DQ_THREADS / 16); i++) {
            const int j = xj + i * (DQ_THREADS / 16);
            if (j >= NTOK) break;
            const bool ok = tok0 + j < n_tok;
            cp_async16(st + j * DQ_XP + pi * 16, ok ? x + (tok0 + j) * k + s * 128 + xoff : x, ok ? 16 : 0);
        }
    };
    auto load_w = [&](R(&b)[2][2], int it) {
#pragma unroll
        for (int m = 0; m < 2; m++)
#pragma unroll
            for (int hh = 0; hh < 2; hh++) D::load(b[m][hh], wrow[m][hh], srow[m][hh], st0 + it, t);
    };

    float acc[2][NT][4] = {};
    /* one stage: refill `nxt` with stage it + NB - 1, then multiply stage it (weights in `cur`) */
    auto body = [&](R(&cur)[2][2], R(&nxt)[2][2], int it) {
        if (it + NB - 1 < n_it) load_w(nxt, it + NB - 1);
        cp_async_wait<DQ_AST - 2>();
        __syncthreads(); /* stage it landed for all; stage it - 1 is no longer read */
        if (it + DQ_AST - 1 < n_it) load_x(it + DQ_AST - 1);
        cp_async_commit();
        const uint8_t *xs = sm + (it % DQ_AST) * XSTAGE + g * DQ_XP + t * 16;
#pragma unroll
        for (int qq = 0; qq < 4; qq++) {
            uint4 b[NT];
#pragma unroll
            for (int n = 0; n < NT; n++) b[n] = *(const uint4 *)(xs + n * 8 * DQ_XP + qq * 64);
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int q = 2 * qq + h;
#pragma unroll
                for (int m = 0; m < 2; m++) {
                    uint32_t a[4];
                    deq4<D::OFF>(D::codes(cur[m][0], q, t), D::scale(cur[m][0], q), a[0], a[2]);
                    deq4<D::OFF>(D::codes(cur[m][1], q, t), D::scale(cur[m][1], q), a[1], a[3]);
#pragma unroll
                    for (int n = 0; n < NT; n++) mma_f16(acc[m][n], a, h ? b[n].z : b[n].x, h ? b[n].w : b[n].y);
                }
            }
        }
    };

    R b0[2][2], b1[2][2], b2[2][2];
#pragma unroll
    for (int u = 0; u < DQ_AST - 1; u++) {
        if (u < n_it) load_x(u);
        cp_async_commit();
    }
    if (n_it > 0) load_w(b0, 0);
    if constexpr (NB == 3) {
        if (n_it > 1) load_w(b1, 1);
        for (int it = 0; it < n_it; it += 3) { /* the conditions are uniform over the CTA */
            body(b0, b2, it);
            if (it + 1 < n_it) body(b1, b0, it + 1);
            if (it + 2 < n_it) body(b2, b1, it + 2);
        }
    } else {
        (void)b2;
        for (int it = 0; it < n_it; it += 2) {
            body(b0, b1, it);
            if (it + 1 < n_it) body(b1, b0, it + 1);
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
extern "C" bool qr_cuda_dq_gemm_supported(qr_type type) { return type == QR_TYPE_Q4_K || type == QR_TYPE_Q6_K; }

/* One CTA an SM: the count with the fewest waves x (stages a split + ~2 stages of pipeline fill), ties to fewer. */
extern "C" int32_t qr_cuda_dq_gemm_splits(int64_t n_tok, int64_t n_out, int64_t k, int32_t sms) {
    const int64_t tiles = ((n_tok + 63) / 64) * ((n_out + DQ_BM - 1) / DQ_BM), n_st = k / 128;
    int64_t best = 1, best_cost = -1;
    for (int64_t s = 1; s <= 16 && (s == 1 || n_st / s >= 2); s++) {
        const int64_t waves = (tiles * s + sms - 1) / sms, cost = waves * (4 * ((n_st + s - 1) / s) + 8);
        if (best_cost < 0 || cost < best_cost) best = s, best_cost = cost;
    }
    return (int32_t)best;
}

template <qr_type TY, int NT>
static cudaError_t launch_dq(const cuda_wview &w, const uint8_t *sp, const __half *x, int64_t n_tok, int64_t n_out,
                             int32_t splits, float *y, cudaStream_t stream) {
    constexpr int smem = DQ_AST * NT * 8 * DQ_XP;
    const cudaError_t e = cudaFuncSetAttribute(dq_gemm_kernel<TY, NT>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    const dim3 grid((unsigned)((n_tok + NT * 8 - 1) / (NT * 8)), (unsigned)((n_out + DQ_BM - 1) / DQ_BM), (unsigned)splits);
    dq_gemm_kernel<TY, NT><<<grid, DQ_THREADS, smem, stream>>>(w, sp, x, n_tok, n_out, y);
    return cudaGetLastError();
}

/* 16 activation rows a CTA up to 16 rows (verification of drafted tokens), else 64 */
template <qr_type TY>
static cudaError_t launch_dq_nt(const cuda_wview &w, const uint8_t *sp, const __half *x, int64_t n_tok, int64_t n_out,
                                int32_t splits, float *y, cudaStream_t stream) {
    if (n_tok <= 16) return launch_dq<TY, 2>(w, sp, x, n_tok, n_out, splits, y, stream);
    return launch_dq<TY, 8>(w, sp, x, n_tok, n_out, splits, y, stream);
}

extern "C" size_t qr_cuda_dq_scales_bytes(const cuda_wview *w) { return (size_t)(w->n * w->nb) * 32; }

extern "C" cudaError_t qr_cuda_dq_scales(const cuda_wview *w, void *out, cudaStream_t stream) {
    if (!qr_cuda_dq_gemm_supported((qr_type)w->type) || w->nb <= 0) return cudaErrorInvalidValue;
    const int64_t n_blk = w->n * w->nb;
    const unsigned grid = (unsigned)((n_blk + 255) / 256);
    if (w->type == QR_TYPE_Q4_K) dq_scales_q4k_kernel<<<grid, 256, 0, stream>>>(*w, n_blk, (uint32_t *)out);
    else dq_scales_q6k_kernel<<<grid, 256, 0, stream>>>(*w, n_blk, (uint32_t *)out);
    return cudaGetLastError();
}

extern "C" cudaError_t qr_cuda_dq_gemm(const cuda_wview *w, const void *scales, const void *xh, int64_t n_tok, int64_t n_out,
                                       int32_t splits, float *part, float *y, cudaStream_t stream) {
    if (n_tok <= 0) return cudaSuccess;
    if (!qr_cuda_dq_gemm_supported((qr_type)w->type) || w->k % 256 || w->nb != w->k / 256 || n_out <= 0 || splits < 1 ||
        splits > 16 || (splits > 1 && !part) || (n_tok + 63) / 64 > 65535 || (n_out + DQ_BM - 1) / DQ_BM > 65535)
        return cudaErrorInvalidValue;
    float *dst = splits > 1 ? part : y;
    const __half *x = (const __half *)xh;
    const uint8_t *sp = (const uint8_t *)scales;
    cudaError_t e = w->type == QR_TYPE_Q4_K ? launch_dq_nt<QR_TYPE_Q4_K>(*w, sp, x, n_tok, n_out, splits, dst, stream)
                                            : launch_dq_nt<QR_TYPE_Q6_K>(*w, sp, x, n_tok, n_out, splits, dst, stream);
    if (e != cudaSuccess || splits == 1) return e;
    const int64_t n = n_tok * n_out;
    dq_reduce_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(part, splits, n, y);
    return cudaGetLastError();
}
