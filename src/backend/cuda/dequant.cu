/* dequant.cu — the weight repack done once by weight_prepare (GGUF blocks -> planes), and the
 * dequantizing kernels: get_rows (embedding lookup, f32 out) and the f16 tiles of the prefill GEMM.
 *
 * Why planes: most GGUF blocks are not a multiple of 16 bytes (Q4_0 is 18), so their codes cannot be
 * read with aligned 16-byte loads. Splitting each block into its codes (plane 0, 16/32/64/96/128/
 * 160/192 bytes) and its scales (planes 1 and 2) keeps the bytes the same and makes every code load
 * a coalesced, aligned 16-byte load.
 */
#include "backend/cuda/quant_dev.cuh"

#include <stddef.h>

#define PD(np, bsz, by, o0, s0, o1, s1, o2, s2) {np, bsz, by, {o0, o1, o2}, {s0, s1, s2}}
#define OFF(T, f) (int32_t) offsetof(T, f)
#define SZ(T, f) (int32_t) sizeof(((T *)0)->f)

/* The planes are read with the layouts quant_dev.cuh assumes: check them against blocks.h. */
static_assert(offsetof(qr_block_q3_K, qs) == offsetof(qr_block_q3_K, hmask) + sizeof(((qr_block_q3_K *)0)->hmask),
              "Q3_K: qs follows hmask");
static_assert(offsetof(qr_block_q5_K, qs) == offsetof(qr_block_q5_K, qh) + sizeof(((qr_block_q5_K *)0)->qh),
              "Q5_K: qs follows qh");
static_assert(offsetof(qr_block_q6_K, qh) == offsetof(qr_block_q6_K, ql) + sizeof(((qr_block_q6_K *)0)->ql),
              "Q6_K: qh follows ql");
static_assert(offsetof(qr_block_q4_K, scales) == 4 && offsetof(qr_block_q5_K, scales) == 4 &&
                  offsetof(qr_block_q4_K, d) == 0 && offsetof(qr_block_q5_K, d) == 0 &&
                  offsetof(qr_block_q4_K, dmin) == 2 && offsetof(qr_block_q5_K, dmin) == 2,
              "Q4_K/Q5_K: d, dmin, scales[12] are the first 16 bytes");
static_assert(offsetof(qr_block_q4_1, m) == offsetof(qr_block_q4_1, d) + 2 &&
                  offsetof(qr_block_q5_1, m) == offsetof(qr_block_q5_1, d) + 2 &&
                  offsetof(qr_block_q2_K, dmin) == offsetof(qr_block_q2_K, d) + 2,
              "d and m/dmin are adjacent");

extern "C" cuda_plane_desc qr_cuda_plane_desc(qr_type type) {
    switch (type) {
    case QR_TYPE_Q4_0:
        return (cuda_plane_desc)PD(2, QR_QK4_0, (int32_t)sizeof(qr_block_q4_0), OFF(qr_block_q4_0, qs), SZ(qr_block_q4_0, qs),
                                   OFF(qr_block_q4_0, d), 2, 0, 0);
    case QR_TYPE_Q4_1:
        return (cuda_plane_desc)PD(2, QR_QK4_1, (int32_t)sizeof(qr_block_q4_1), OFF(qr_block_q4_1, qs), SZ(qr_block_q4_1, qs),
                                   OFF(qr_block_q4_1, d), 4, 0, 0);
    case QR_TYPE_Q5_0:
        return (cuda_plane_desc)PD(3, QR_QK5_0, (int32_t)sizeof(qr_block_q5_0), OFF(qr_block_q5_0, qs), SZ(qr_block_q5_0, qs),
                                   OFF(qr_block_q5_0, qh), 4, OFF(qr_block_q5_0, d), 2);
    case QR_TYPE_Q5_1:
        return (cuda_plane_desc)PD(3, QR_QK5_1, (int32_t)sizeof(qr_block_q5_1), OFF(qr_block_q5_1, qs), SZ(qr_block_q5_1, qs),
                                   OFF(qr_block_q5_1, qh), 4, OFF(qr_block_q5_1, d), 4);
    case QR_TYPE_Q8_0:
        return (cuda_plane_desc)PD(2, QR_QK8_0, (int32_t)sizeof(qr_block_q8_0), OFF(qr_block_q8_0, qs), SZ(qr_block_q8_0, qs),
                                   OFF(qr_block_q8_0, d), 2, 0, 0);
    case QR_TYPE_MXFP4:
        return (cuda_plane_desc)PD(2, QR_QK_MXFP4, (int32_t)sizeof(qr_block_mxfp4), OFF(qr_block_mxfp4, qs),
                                   SZ(qr_block_mxfp4, qs), OFF(qr_block_mxfp4, e), 1, 0, 0);
    case QR_TYPE_IQ4_NL:
        return (cuda_plane_desc)PD(2, QR_QK4_NL, (int32_t)sizeof(qr_block_iq4_nl), OFF(qr_block_iq4_nl, qs),
                                   SZ(qr_block_iq4_nl, qs), OFF(qr_block_iq4_nl, d), 2, 0, 0);
    case QR_TYPE_Q2_K:
        return (cuda_plane_desc)PD(3, QR_QK_K, (int32_t)sizeof(qr_block_q2_K), OFF(qr_block_q2_K, qs), SZ(qr_block_q2_K, qs),
                                   OFF(qr_block_q2_K, scales), SZ(qr_block_q2_K, scales), OFF(qr_block_q2_K, d), 4);
    case QR_TYPE_Q3_K:
        return (cuda_plane_desc)PD(3, QR_QK_K, (int32_t)sizeof(qr_block_q3_K), OFF(qr_block_q3_K, hmask),
                                   SZ(qr_block_q3_K, hmask) + SZ(qr_block_q3_K, qs), OFF(qr_block_q3_K, scales),
                                   SZ(qr_block_q3_K, scales), OFF(qr_block_q3_K, d), 2);
    case QR_TYPE_Q4_K:
        return (cuda_plane_desc)PD(2, QR_QK_K, (int32_t)sizeof(qr_block_q4_K), OFF(qr_block_q4_K, qs), SZ(qr_block_q4_K, qs),
                                   0, 16, 0, 0);
    case QR_TYPE_Q5_K:
        return (cuda_plane_desc)PD(2, QR_QK_K, (int32_t)sizeof(qr_block_q5_K), OFF(qr_block_q5_K, qh),
                                   SZ(qr_block_q5_K, qh) + SZ(qr_block_q5_K, qs), 0, 16, 0, 0);
    case QR_TYPE_Q6_K:
        return (cuda_plane_desc)PD(3, QR_QK_K, (int32_t)sizeof(qr_block_q6_K), OFF(qr_block_q6_K, ql),
                                   SZ(qr_block_q6_K, ql) + SZ(qr_block_q6_K, qh), OFF(qr_block_q6_K, scales),
                                   SZ(qr_block_q6_K, scales), OFF(qr_block_q6_K, d), 2);
    case QR_TYPE_F32: return (cuda_plane_desc)PD(1, 1, 4, 0, 4, 0, 0, 0, 0);
    case QR_TYPE_F16: return (cuda_plane_desc)PD(1, 1, 2, 0, 2, 0, 0, 0, 0);
    case QR_TYPE_BF16: return (cuda_plane_desc)PD(1, 1, 2, 0, 2, 0, 0, 0, 0);
    default: return (cuda_plane_desc)PD(0, 0, 0, 0, 0, 0, 0, 0, 0);
    }
}

extern "C" bool qr_cuda_type_supported(qr_type type) { return qr_cuda_plane_desc(type).n_planes > 0; }

extern "C" int qr_cuda_act_kind(qr_type type) {
    switch (type) {
    case QR_TYPE_F16: return 2;
    case QR_TYPE_BF16: return 3;
    case QR_TYPE_F32: return 4;
    default: return qr_cuda_plane_desc(type).block == 256 ? 1 : 0;
    }
}

/* ---- repack: one thread per source byte ---- */

typedef struct repack_args {
    int32_t bytes, n_planes;
    int32_t off[3], size[3];
    uint8_t *dst[3];
} repack_args;

static __global__ void repack_kernel(const uint8_t *__restrict__ raw, int64_t nblocks, const repack_args a) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nblocks * a.bytes) return;
    const int64_t g = i / a.bytes;
    const int o = (int)(i - g * a.bytes);
    for (int p = 0; p < a.n_planes; p++) {
        if (o >= a.off[p] && o < a.off[p] + a.size[p]) {
            a.dst[p][g * a.size[p] + (o - a.off[p])] = raw[i];
            return;
        }
    }
}

extern "C" cudaError_t qr_cuda_repack(const cuda_plane_desc *d, const uint8_t *raw, int64_t nblocks,
                                      uint8_t *const dst[3], cudaStream_t stream) {
    repack_args a;
    a.bytes = d->bytes;
    a.n_planes = d->n_planes;
    for (int p = 0; p < 3; p++) {
        a.off[p] = d->off[p];
        a.size[p] = d->size[p];
        a.dst[p] = dst[p];
    }
    const int64_t n = nblocks * d->bytes;
    if (n <= 0) return cudaSuccess;
    repack_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(raw, nblocks, a);
    QR_CUDA_CHECK_LAUNCH();
}

/* ---- dequantization: one thread per 8 values ---- */

/* 8 values of row `row` starting at element e (a multiple of 8). */
template <class T>
static __device__ __forceinline__ void deq_row8(const cuda_wview &w, int64_t row, int64_t e, float *o) {
    const int64_t b = e / T::BS;
    T::deq8(w, row * w.nb + b, (int)(e - b * T::BS), o);
}

template <int KIND> /* float types: 0 = F16, 1 = BF16, 2 = F32 */
static __device__ __forceinline__ void deq_float8(const cuda_wview &w, int64_t row, int64_t e, float *o) {
    if (KIND == 2) {
        const float *p = (const float *)w.p0 + row * w.k + e;
#pragma unroll
        for (int i = 0; i < 8; i++) o[i] = e + i < w.k ? __ldg(p + i) : 0.0f;
    } else {
        const uint16_t *p = (const uint16_t *)w.p0 + row * w.k + e;
#pragma unroll
        for (int i = 0; i < 8; i++) o[i] = e + i < w.k ? (KIND == 0 ? h2f(ld_ro16b(p + i)) : bf2f(ld_ro16b(p + i))) : 0.0f;
    }
}

/* out[r][k] f32 = row ids[r]. Grid: (ceil(k / 8 / 128), n_ids). */
template <class T, int FK>
static __global__ void get_rows_kernel(const cuda_wview w, const int32_t *__restrict__ ids, float *__restrict__ out) {
    const int64_t e = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    const int r = blockIdx.y;
    if (e >= w.k) return;
    const int64_t row = ids[r];
    float o[8];
    if (FK >= 0) deq_float8<FK>(w, row, e, o);
    else deq_row8<T>(w, row, e, o);
    float *dst = out + (int64_t)r * w.k + e;
    if (e + 8 <= w.k && (w.k & 3) == 0) {
        *(float4 *)dst = make_float4(o[0], o[1], o[2], o[3]);
        *(float4 *)(dst + 4) = make_float4(o[4], o[5], o[6], o[7]);
    } else {
        for (int i = 0; i < 8 && e + i < w.k; i++) dst[i] = o[i];
    }
}

/* out[r][k] f16 = rows r0 + r. Grid: (ceil(k / 8 / 128), n_rows). Quantized types (k % 32 == 0). */
template <class T>
static __global__ void dequant_f16_kernel(const cuda_wview w, int64_t r0, uint4 *__restrict__ out) {
    const int64_t e = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    const int64_t r = blockIdx.y;
    if (e >= w.k) return;
    float o[8];
    deq_row8<T>(w, r0 + r, e, o);
    uint32_t h[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const __half2 v = __floats2half2_rn(o[2 * i], o[2 * i + 1]);
        h[i] = *reinterpret_cast<const uint32_t *>(&v);
    }
    out[(r * w.k + e) / 8] = make_uint4(h[0], h[1], h[2], h[3]);
}

template <class T, int FK>
static cudaError_t launch_get_rows(const cuda_wview *w, const int32_t *ids, int32_t n_ids, float *out,
                                   cudaStream_t stream) {
    const dim3 grid((unsigned)(((w->k + 7) / 8 + 127) / 128), (unsigned)n_ids);
    get_rows_kernel<T, FK><<<grid, 128, 0, stream>>>(*w, ids, out);
    QR_CUDA_CHECK_LAUNCH();
}

extern "C" cudaError_t qr_cuda_get_rows(const cuda_wview *w, const int32_t *ids, int32_t n_ids, float *out,
                                        cudaStream_t stream) {
    if (n_ids <= 0) return cudaSuccess;
    switch ((qr_type)w->type) {
    case QR_TYPE_Q4_0: return launch_get_rows<TQ4_0, -1>(w, ids, n_ids, out, stream);
    case QR_TYPE_Q4_1: return launch_get_rows<TQ4_1, -1>(w, ids, n_ids, out, stream);
    case QR_TYPE_Q5_0: return launch_get_rows<TQ5_0, -1>(w, ids, n_ids, out, stream);
    case QR_TYPE_Q5_1: return launch_get_rows<TQ5_1, -1>(w, ids, n_ids, out, stream);
    case QR_TYPE_Q8_0: return launch_get_rows<TQ8_0, -1>(w, ids, n_ids, out, stream);
    case QR_TYPE_MXFP4: return launch_get_rows<TMXFP4, -1>(w, ids, n_ids, out, stream);
    case QR_TYPE_IQ4_NL: return launch_get_rows<TIQ4_NL, -1>(w, ids, n_ids, out, stream);
    case QR_TYPE_Q2_K: return launch_get_rows<TQ2_K, -1>(w, ids, n_ids, out, stream);
    case QR_TYPE_Q3_K: return launch_get_rows<TQ3_K, -1>(w, ids, n_ids, out, stream);
    case QR_TYPE_Q4_K: return launch_get_rows<TQ4_K, -1>(w, ids, n_ids, out, stream);
    case QR_TYPE_Q5_K: return launch_get_rows<TQ5_K, -1>(w, ids, n_ids, out, stream);
    case QR_TYPE_Q6_K: return launch_get_rows<TQ6_K, -1>(w, ids, n_ids, out, stream);
    case QR_TYPE_F16: return launch_get_rows<TQ4_0, 0>(w, ids, n_ids, out, stream);
    case QR_TYPE_BF16: return launch_get_rows<TQ4_0, 1>(w, ids, n_ids, out, stream);
    case QR_TYPE_F32: return launch_get_rows<TQ4_0, 2>(w, ids, n_ids, out, stream);
    default: return cudaErrorInvalidValue;
    }
}

template <class T>
static cudaError_t launch_dequant(const cuda_wview *w, int64_t r0, int64_t r1, void *out, cudaStream_t stream) {
    const dim3 grid((unsigned)((w->k / 8 + 127) / 128), (unsigned)(r1 - r0));
    dequant_f16_kernel<T><<<grid, 128, 0, stream>>>(*w, r0, (uint4 *)out);
    QR_CUDA_CHECK_LAUNCH();
}

static cudaError_t dequant_f16_rows(const cuda_wview *w, int64_t r0, int64_t r1, void *out, cudaStream_t stream) {
    switch ((qr_type)w->type) {
    case QR_TYPE_Q4_0: return launch_dequant<TQ4_0>(w, r0, r1, out, stream);
    case QR_TYPE_Q4_1: return launch_dequant<TQ4_1>(w, r0, r1, out, stream);
    case QR_TYPE_Q5_0: return launch_dequant<TQ5_0>(w, r0, r1, out, stream);
    case QR_TYPE_Q5_1: return launch_dequant<TQ5_1>(w, r0, r1, out, stream);
    case QR_TYPE_Q8_0: return launch_dequant<TQ8_0>(w, r0, r1, out, stream);
    case QR_TYPE_MXFP4: return launch_dequant<TMXFP4>(w, r0, r1, out, stream);
    case QR_TYPE_IQ4_NL: return launch_dequant<TIQ4_NL>(w, r0, r1, out, stream);
    case QR_TYPE_Q2_K: return launch_dequant<TQ2_K>(w, r0, r1, out, stream);
    case QR_TYPE_Q3_K: return launch_dequant<TQ3_K>(w, r0, r1, out, stream);
    case QR_TYPE_Q4_K: return launch_dequant<TQ4_K>(w, r0, r1, out, stream);
    case QR_TYPE_Q5_K: return launch_dequant<TQ5_K>(w, r0, r1, out, stream);
    case QR_TYPE_Q6_K: return launch_dequant<TQ6_K>(w, r0, r1, out, stream);
    default: return cudaErrorInvalidValue;
    }
}

/* Rows [r0, r1) into out (row r0 first), in launches of at most 65535 rows (the grid's y limit: an output matrix of a
 * 102400- or 152064-token vocabulary is more). */
extern "C" cudaError_t qr_cuda_dequant_f16(const cuda_wview *w, int64_t r0, int64_t r1, void *out,
                                           cudaStream_t stream) {
    for (int64_t c = r0; c < r1; c += 65535) {
        const int64_t c1 = r1 - c > 65535 ? c + 65535 : r1;
        const cudaError_t e = dequant_f16_rows(w, c, c1, (uint8_t *)out + (size_t)((c - r0) * w->k) * 2, stream);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}
