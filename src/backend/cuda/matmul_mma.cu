/* matmul_mma.cu — the grouped expert matmul of prefill on int8 tensor cores (mma.sync m16n8k32).
 *
 * The MoE prefill multiplies each expert by the few activation rows routed to it (nemotron-3-nano at
 * pp512: 128 experts, ~24 rows each). At that size the weights dominate the traffic, so the kernel reads
 * them once, in their repacked block format (dequant.cu planes), with no f16 copy: a CTA computes 128
 * output rows of one expert for a tile of up to 32 sorted activation rows (the same tiles as the
 * grouped mat-vec, matmul_q.cu), streaming the weight codes, the weight scales, the activation codes and
 * the activation scales through a 3-stage cp.async pipeline in shared memory.
 *
 * Numerics: the activations are the CPU's Q8_0 codes (act_prepare), so each (row, token, 32-block) is
 * one exact integer dot product of weight codes and activation codes (one k32 mma), scaled by
 * (weight scale x activation scale) in f32 and summed over the blocks, as the CPU's vec_dot does; only
 * the order of the float sum differs. Types: the 32-value formats whose values are integers times one
 * scale per block (Q4_0, Q8_0, MXFP4, IQ4_NL).
 *
 * Fragment layout of mma.m16n8k32 (s8, row.col), g = lane / 4, t = lane % 4: A regs a0 (row g, k 4t..4t+3),
 * a1 (row g + 8, same k), a2 (row g, k 16 + 4t..), a3 (row g + 8, k 16 + 4t..); B regs b0 (k 4t..4t+3,
 * column g), b1 (k 16 + 4t.., column g); C c0, c1 (row g, columns 2t, 2t + 1), c2, c3 (row g + 8). A
 * 4-bit block's byte j holds values j (low nibble) and j + 16 (high nibble): the 4 bytes 4t..4t+3 give
 * a0 (low nibbles) and a2 (high nibbles) of a row directly.
 */
#include "backend/cuda/quant_dev.cuh"

#define MMQ_THREADS 128 /* 4 warps */
#define MMQ_BM 128      /* output rows per CTA: 4 warps x 2 m-tiles of 16 */
#define MMQ_KB 4        /* 32-value blocks per pipeline stage */
#define MMQ_STAGES 3

/* The block formats as the mma kernel reads them: CB code bytes and SB scale bytes per block; unpack
 * gives the int8 values of elements 4t..4t+3 (lo) and 16+4t..16+4t+3 (hi) of a block's codes. */
template <class T> struct mq;
template <> struct mq<TQ4_0> {
    static constexpr int CB = 16, SB = 2;
    static __device__ __forceinline__ void unpack(const uint8_t *c, int t, uint32_t &lo, uint32_t &hi) {
        const uint32_t w = *(const uint32_t *)(c + 4 * t);
        lo = __vsub4(w & M4, 0x08080808u);
        hi = __vsub4((w >> 4) & M4, 0x08080808u);
    }
    static __device__ __forceinline__ float scale(const uint8_t *s) { return h2f(*(const uint16_t *)s); }
};
template <> struct mq<TQ8_0> {
    static constexpr int CB = 32, SB = 2;
    static __device__ __forceinline__ void unpack(const uint8_t *c, int t, uint32_t &lo, uint32_t &hi) {
        lo = *(const uint32_t *)(c + 4 * t);
        hi = *(const uint32_t *)(c + 16 + 4 * t);
    }
    static __device__ __forceinline__ float scale(const uint8_t *s) { return h2f(*(const uint16_t *)s); }
};
template <bool MX> struct mq<TLut4<MX>> {
    static constexpr int CB = 16, SB = MX ? 1 : 2;
    static __device__ __forceinline__ void unpack(const uint8_t *c, int t, uint32_t &lo, uint32_t &hi) {
        typedef TLut4<MX> L;
        lut16x8(*(const uint32_t *)(c + 4 * t), L::T0, L::T1, L::T2, L::T3, &lo, &hi);
    }
    static __device__ __forceinline__ float scale(const uint8_t *s) {
        return MX ? e8m0_half(*s) : h2f(*(const uint16_t *)s);
    }
};

#define MMQ_TYPES(X) X(QR_TYPE_Q4_0, TQ4_0) X(QR_TYPE_Q8_0, TQ8_0) X(QR_TYPE_MXFP4, TMXFP4) X(QR_TYPE_IQ4_NL, TIQ4_NL)

extern "C" bool qr_cuda_mmq_supported(qr_type type) {
    switch (type) {
#define TY(E, T) case E:
        MMQ_TYPES(TY)
#undef TY
        return true;
    default: return false;
    }
}

static __device__ __forceinline__ void mma_s8(int *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

/* Shared-memory layout of one stage (bytes). Pitches pad each row by 16 bytes so that the 8 rows a warp
 * reads at once fall in different banks. */
template <class T, int NT> struct mmq_cfg {
    static constexpr int SCW = (MMQ_KB * mq<T>::SB + 6) / 4; /* words of weight scales per row (aligned window) */
    static constexpr int CB = mq<T>::CB, NTOK = NT * 8;
    static constexpr int WP = MMQ_KB * CB + 16, XP = MMQ_KB * 32 + 16;
    static constexpr int O_S = MMQ_BM * WP;                 /* weight scale windows */
    static constexpr int O_X = O_S + MMQ_BM * SCW * 4;      /* activation codes */
    static constexpr int O_D = O_X + NTOK * XP;             /* activation scales */
    static constexpr int DP = MMQ_KB + 1;                   /* activation scale pitch (floats, no bank conflicts) */
    static constexpr int STAGE = O_D + NTOK * DP * 4;
    static constexpr int SMEM = MMQ_STAGES * STAGE;
};

/* Grid (ceil(n_out / 128), tiles). Tile b = (expert, first sorted row p0, rows nr <= 8 NT): y[p0 + j][i] =
 * W[expert][i] . x[p0 + j] for j < nr, i < n_out; x holds the sorted rows with 8 NT rows of slack after
 * the last (they are read, their results dropped). Tried on the H100 (nemotron-3-nano pp512,
 * docs/cuda-notes.md): MMQ_KB 8 and 16 (longer contiguous weight runs) were not
 * faster (11438 and 9939 vs 11644 t/s); fewer CTAs each running one pipeline through several tiles was
 * slower (634 vs 476 us in the lab); an exact int -> float trick instead of I2F made no difference. */
template <class T, int NT>
static __global__ void __launch_bounds__(MMQ_THREADS)
    mmq_tiles_kernel(const cuda_wview w, const cuda_xview x, const int4 *__restrict__ tiles, int64_t n_out,
                     float *__restrict__ y) {
    typedef mmq_cfg<T, NT> C;
    constexpr int CB = C::CB, SB = mq<T>::SB, SCW = C::SCW;
    extern __shared__ __align__(16) uint8_t sm[];
    const int4 tl = tiles[blockIdx.y];
    const int64_t e = tl.x, p0 = tl.y;
    const int64_t row0 = (int64_t)blockIdx.x * MMQ_BM;
    const int64_t nb = w.nb, xnb = x.k / 32;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const uint8_t *const s_end = w.p1 + (size_t)(w.n * nb) * SB;
    const int n_it = (int)((nb + MMQ_KB - 1) / MMQ_KB);

    auto load_stage = [&](int it) {
        uint8_t *st = sm + (it % MMQ_STAGES) * C::STAGE;
        const int64_t kb0 = (int64_t)it * MMQ_KB;
        constexpr int WC = MMQ_KB * CB / 16; /* 16-byte chunks per row */
#pragma unroll
        for (int c = tid; c < MMQ_BM * WC; c += MMQ_THREADS) {
            const int r = c / WC, q = c % WC, blk = q / (CB / 16), part = q % (CB / 16);
            const int64_t row = row0 + r < n_out ? row0 + r : n_out - 1, b = kb0 + blk;
            const bool ok = b < nb;
            cp_async16(st + r * C::WP + q * 16, w.p0 + ((e * n_out + row) * nb + (ok ? b : 0)) * CB + part * 16, ok ? 16 : 0);
        }
        for (int c = tid; c < MMQ_BM * SCW; c += MMQ_THREADS) {
            const int r = c / SCW, q = c % SCW;
            const int64_t row = row0 + r < n_out ? row0 + r : n_out - 1;
            const size_t a = (size_t)((e * n_out + row) * nb + kb0) * SB;
            const uint8_t *src = w.p1 + (a & ~(size_t)3) + 4 * q;
            const int n = src >= s_end ? 0 : (s_end - src >= 4 ? 4 : (int)(s_end - src));
            cp_async4(st + C::O_S + c * 4, n ? src : w.p1, n);
        }
        constexpr int XC = MMQ_KB * 2; /* 16-byte chunks per activation row */
#pragma unroll
        for (int c = tid; c < C::NTOK * XC; c += MMQ_THREADS) {
            const int j = c / XC, q = c % XC;
            const int64_t v = kb0 * 32 + q * 16;
            const bool ok = v < x.k;
            cp_async16(st + C::O_X + j * C::XP + q * 16, x.q + (p0 + j) * x.k + (ok ? v : 0), ok ? 16 : 0);
        }
        for (int c = tid; c < C::NTOK * MMQ_KB; c += MMQ_THREADS) {
            const int j = c / MMQ_KB, q = c % MMQ_KB;
            const bool ok = kb0 + q < xnb;
            cp_async4(st + C::O_D + (j * C::DP + q) * 4, x.d + (p0 + j) * xnb + (ok ? kb0 + q : 0), ok ? 4 : 0);
        }
    };

    float acc[2][NT][4];
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[m][j][i] = 0.0f;

#pragma unroll
    for (int s = 0; s < MMQ_STAGES - 1; s++) {
        if (s < n_it) load_stage(s);
        cp_async_commit();
    }
    for (int it = 0; it < n_it; it++) {
        cp_async_wait<MMQ_STAGES - 2>();
        __syncthreads(); /* stage it is visible to all; stage it - 1 is no longer read */
        if (it + MMQ_STAGES - 1 < n_it) load_stage(it + MMQ_STAGES - 1);
        cp_async_commit();
        const uint8_t *st = sm + (it % MMQ_STAGES) * C::STAGE;
        const int64_t kb0 = (int64_t)it * MMQ_KB;
        const int nkb = nb - kb0 < MMQ_KB ? (int)(nb - kb0) : MMQ_KB;
        /* the weight scale windows of this thread's 4 rows (byte offset inside each window) */
        const uint8_t *sw[2][2];
#pragma unroll
        for (int m = 0; m < 2; m++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int r = warp * 32 + m * 16 + h * 8 + g;
                const int64_t row = row0 + r < n_out ? row0 + r : n_out - 1;
                const size_t a = (size_t)((e * n_out + row) * nb + kb0) * SB;
                sw[m][h] = st + C::O_S + r * (SCW * 4) + (a & 3);
            }
#pragma unroll
        for (int kb = 0; kb < MMQ_KB; kb++) {
            if (kb >= nkb) break;
            uint32_t b[NT][2];
            float dx[NT][2];
#pragma unroll
            for (int j = 0; j < NT; j++) {
                const uint8_t *xr = st + C::O_X + (j * 8 + g) * C::XP + kb * 32;
                b[j][0] = *(const uint32_t *)(xr + 4 * t);
                b[j][1] = *(const uint32_t *)(xr + 16 + 4 * t);
                const float *dr = (const float *)(st + C::O_D) + (j * 8 + 2 * t) * C::DP + kb;
                dx[j][0] = dr[0];
                dx[j][1] = dr[C::DP];
            }
#pragma unroll
            for (int m = 0; m < 2; m++) {
                const int r = warp * 32 + m * 16 + g;
                uint32_t a[4];
                mq<T>::unpack(st + r * C::WP + kb * CB, t, a[0], a[2]);
                mq<T>::unpack(st + (r + 8) * C::WP + kb * CB, t, a[1], a[3]);
                const float d0 = mq<T>::scale(sw[m][0] + kb * SB), d1 = mq<T>::scale(sw[m][1] + kb * SB);
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    /* the accumulator starts at 2^23 + 2^22, so its bits hold 2^23 + 2^22 + the sum (|sum| <
                     * 2^22: 32 products of int8 values): one subtraction makes it an exact float, with no
                     * int -> float conversion (a quarter-rate instruction) */
                    int c[4] = {0x4B400000, 0x4B400000, 0x4B400000, 0x4B400000};
                    mma_s8(c, a, b[j][0], b[j][1]);
                    acc[m][j][0] += (__int_as_float(c[0]) - 12582912.0f) * (d0 * dx[j][0]);
                    acc[m][j][1] += (__int_as_float(c[1]) - 12582912.0f) * (d0 * dx[j][1]);
                    acc[m][j][2] += (__int_as_float(c[2]) - 12582912.0f) * (d1 * dx[j][0]);
                    acc[m][j][3] += (__int_as_float(c[3]) - 12582912.0f) * (d1 * dx[j][1]);
                }
            }
        }
    }
    cp_async_wait<0>();

#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int64_t row = row0 + warp * 32 + m * 16 + h * 8 + g;
            if (row >= n_out) continue;
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int u = 0; u < 2; u++) {
                    const int tok = j * 8 + 2 * t + u;
                    if (tok < tl.z) y[(p0 + tok) * n_out + row] = acc[m][j][2 * h + u];
                }
        }
}

template <class T, int NT>
static cudaError_t launch_mmq(const cuda_wview &w, const cuda_xview &x, const int4 *tiles, int32_t n_tiles,
                              int64_t n_out, float *y, cudaStream_t stream) {
    constexpr int smem = mmq_cfg<T, NT>::SMEM;
    /* above the default 48 KiB: opt in (per device, so on every call; prefill launches are few) */
    const cudaError_t e = cudaFuncSetAttribute(mmq_tiles_kernel<T, NT>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    const dim3 grid((unsigned)((n_out + MMQ_BM - 1) / MMQ_BM), (unsigned)n_tiles);
    mmq_tiles_kernel<T, NT><<<grid, MMQ_THREADS, smem, stream>>>(w, x, tiles, n_out, y);
    QR_CUDA_CHECK_LAUNCH();
}

extern "C" cudaError_t qr_cuda_mmq_tiles(const cuda_wview *w, const cuda_xview *x, const int32_t *tiles, int32_t n_tiles,
                                         int32_t max_rows, int64_t n_out, float *y, cudaStream_t stream) {
    if (n_tiles <= 0) return cudaSuccess;
    if (n_tiles > 65535 || max_rows < 1 || max_rows > QR_CUDA_MMQ_TILE_ROWS || n_out <= 0 || w->nb <= 0 ||
        w->k % 32 || x->k != w->k)
        return cudaErrorInvalidValue;
    const int nt = max_rows <= 8 ? 1 : max_rows <= 16 ? 2 : max_rows <= 32 ? 4 : 8;
    const int4 *tv = (const int4 *)tiles;
    switch ((qr_type)w->type) {
#define TY(E, T)                                                              \
    case E:                                                                   \
        if (nt == 1) return launch_mmq<T, 1>(*w, *x, tv, n_tiles, n_out, y, stream); \
        if (nt == 2) return launch_mmq<T, 2>(*w, *x, tv, n_tiles, n_out, y, stream); \
        if (nt == 4) return launch_mmq<T, 4>(*w, *x, tv, n_tiles, n_out, y, stream); \
        return launch_mmq<T, 8>(*w, *x, tv, n_tiles, n_out, y, stream);
        MMQ_TYPES(TY)
#undef TY
    default: return cudaErrorInvalidValue;
    }
}
