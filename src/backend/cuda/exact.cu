/* exact.cu — the CUDA backend's exact mode (QUARREL_CUDA_EXACT=1): matmul, rmsnorm, rope, attention, the
 * GLUs, MoE routing and the Mamba2 ops computed with the CPU backend's arithmetic, operation for
 * operation, so that the GPU's logits equal the CPU's (and so llama.cpp's) bit for bit. The other ops
 * (get_rows, kv_store, add/mul/scale, swiglu, gather) already give the CPU's values in the normal
 * kernels; the backend turns its fusions off in this mode (backend_cuda.cu) and keeps graphs.
 *
 * Built without fast math (CMakeLists.txt: IEEE division and sqrt, no FMA contraction, no flush to
 * zero), so plain expressions round as the CPU's C code does. Where the CPU's order is sequential the
 * kernels find parallel work that cannot change the result: the matmul's exact integer records in
 * parallel and only its float chains in order (exact_dev.cuh), parallel double sums checked to round to
 * the sequential sum's float (qx_sum_settled), order-free quantizer steps. Rope reads a table of the
 * CPU's own cos/sin (computed on the host by the CPU code). docs/cuda-notes.md "Exact mode" has the
 * design, docs/performance.md the measurements.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/exact_dev.cuh"

extern "C" {
#include "quant/quant.h"
void qr_cpu_rope_cache(float pos, const qr_rope_params *p, const float *ff, float *cs);
void qr_cpu_gelu_table_init(float *tab);
void qr_cpu_moe_route(qr_backend *be, const float *logits, int64_t n_rows, const qr_moe_route_params *p, int32_t *ids,
                      float *weights);
}

/* ---- kernels ---- */

/* Activation formats of the exact matmul (the weight's vec_dot_type). */
enum { QXA_Q8_0, QXA_Q8_1, QXA_Q8_K, QXA_F16, QXA_BF16, QXA_F32 };

/* f16 / bf16 activations: a thread per value (f32 ones are used as they are). */
static __global__ void qx_act_kernel(const float *x, int64_t n, int kind, uint8_t *out) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    ((uint16_t *)out)[i] = kind == QXA_F16 ? qx_f2h(x[i]) : qx_f2bf(x[i]);
}

/* The quantized activation formats (qx_quant_q8_0 / q8_1 / q8_K, the CPU's) with a warp per block
 * (Q8_0 / Q8_1: a value per lane; Q8_K: 8 values per lane). Every step is order-free (max, the lowest
 * index, integer sums), so the bytes are the sequential quantizers'. Rows t < n_x4 of Q8_K use the 4-row
 * quantizer's tie rule (the repacked Q4_K GEMM's activations). */
static __global__ void qx_act_warp_kernel(const float *x, int64_t nr, int64_t k, int kind, int64_t n_x4, uint8_t *out,
                                          size_t row_bytes) {
    const int64_t bs = kind == QXA_Q8_K ? 256 : 32, per_row = k / bs;
    const int64_t g = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (g >= nr * per_row) return;
    const int64_t t = g / per_row, b = g % per_row;
    const float *xs = x + t * k + b * bs;
    uint8_t *row = out + (size_t)t * row_bytes;
    if (kind != QXA_Q8_K) {
        const float v = xs[lane];
        float amax = fabsf(v);
        for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        const float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
        const int q = (int)rintf(v * id);
        int sum = q;
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (kind == QXA_Q8_0) {
            qr_block_q8_0 *y = (qr_block_q8_0 *)row + b;
            y->qs[lane] = (int8_t)q;
            if (lane == 0) y->d = qx_f2h(d);
        } else {
            qr_block_q8_1 *y = (qr_block_q8_1 *)row + b;
            y->qs[lane] = (int8_t)q;
            if (lane == 0) y->d = qx_f2h(d), y->s = qx_f2h(d * (float)sum);
        }
        return;
    }
    qr_block_q8_K *y = (qr_block_q8_K *)row + b;
    float v[8];
    float amax = 0.0f;
    for (int i = 0; i < 8; i++) v[i] = xs[8 * lane + i], amax = fmaxf(amax, fabsf(v[i]));
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    if (amax == 0.0f) {
        for (int i = 0; i < 8; i++) y->qs[8 * lane + i] = 0;
        if (lane < 16) y->bsums[lane] = 0;
        if (lane == 0) y->d = 0.0f;
        return;
    }
    int first = 256; /* the lowest index of a value of magnitude amax */
    for (int i = 7; i >= 0; i--)
        if (fabsf(v[i]) == amax) first = 8 * lane + i;
    for (int o = 16; o > 0; o >>= 1) first = min(first, __shfl_xor_sync(0xffffffffu, first, o));
    float max = __shfl_sync(0xffffffffu, v[first % 8], first / 8);
    bool pos = false;
    for (int i = 0; i < 8; i++) pos = pos || v[i] == amax;
    if (t < n_x4 && max < 0.0f && __any_sync(0xffffffffu, pos)) max = amax;
    const float iscale = -127.f / max;
    int s = 0;
    for (int i = 0; i < 8; i++) {
        int q = (int)rintf(v[i] * iscale);
        q = q < 127 ? q : 127;
        y->qs[8 * lane + i] = (int8_t)q;
        s += q;
    }
    s += __shfl_down_sync(0xffffffffu, s, 1);
    if (lane % 2 == 0) y->bsums[lane / 2] = (int16_t)s;
    if (lane == 0) y->d = 1 / iscale;
}

/* Weight block i of one row, gathered from the planes into a GGUF block. */
struct qx_planes {
    const uint8_t *p[3];
    int32_t off[3], size[3], n;
    int64_t g0; /* first block of the row */
    __device__ void operator()(int64_t i, uint8_t *buf) const {
        for (int j = 0; j < n; j++) {
            const uint8_t *src = p[j] + (g0 + i) * size[j];
            for (int b = 0; b < size[j]; b++) buf[off[j] + b] = src[b];
        }
    }
};

/* The block source of weight row i (quantized types), and the raw row of a float type. */
static __device__ qx_planes qx_row(const cuda_wview &w, const cuda_plane_desc &pd, int64_t i) {
    qx_planes wb;
    wb.n = w.type == QR_TYPE_F32 || w.type == QR_TYPE_F16 || w.type == QR_TYPE_BF16 ? 0 : pd.n_planes;
    wb.p[0] = w.p0, wb.p[1] = w.p1, wb.p[2] = w.p2;
    for (int j = 0; j < 3; j++) wb.off[j] = pd.off[j], wb.size[j] = pd.size[j];
    wb.g0 = i * w.nb;
    return wb;
}
static __device__ const void *qx_row_f(const cuda_wview &w, int64_t i) {
    return w.p0 + (size_t)i * (size_t)w.k * (w.type == QR_TYPE_F32 ? 4 : 2);
}

/* ---- the matmuls: records and lanes in parallel ----
 *
 * A CTA of 128 threads takes 16 (weight row, activation row) pairs. For each chunk of 8 blocks, thread
 * (pair p, s) computes the record of block s of p (exact integers and scales, exact_dev.cuh), then
 * thread (p, lane s) folds the chunk's 8 records into its lane's chains in block order (lane 0 also
 * the scalar chains). The chains are the CPU's, element for element, so the order of the records'
 * computation does not matter. Float weights: a warp per pair, a thread per chain. */
#define QXM_THREADS 128  /* the float kernel: a warp per pair */
#define QXM_QTHREADS 256 /* the quantized kernel: pairs x chunk = 256 records per step */

struct qxm_args {
    cuda_wview w;
    cuda_plane_desc pd;
    const uint8_t *y;      /* activations in the weight's vec_dot_type, rows of row_bytes */
    size_t row_bytes;
    int64_t n;             /* outputs per activation row (weight rows, per expert for matmul_id) */
    int64_t n_t;           /* activation rows (matmul) or slots (matmul_id) */
    int32_t pw;            /* weight rows per CTA tile; the tile has pairs / pw activation rows */
    int32_t order, order_x4;
    int64_t n_x4;          /* rows t < n_x4 use order_x4 (the repacked GEMM's rows) */
    const int32_t *ids;    /* matmul_id: the expert of each slot */
    const int32_t *counts; /* matmul_id: slots per expert, when an expert of >= QR_TILED_MIN_ROWS slots takes the
                            * tiled order (the CPU's matmul_id over a K-quant it does not repack); else NULL */
    int32_t n_used;
    bool per_slot;
    const float *bias;
    int64_t bias_stride;
    float *out;
};

struct qxm_pair {
    bool ok;
    int order;
    int64_t wrow, xr, o;
    const float *bias;
};

static __device__ qxm_pair qxm_pair_of(const qxm_args &A, int p, int pairs, int64_t tile_y) {
    const int pt = pairs / A.pw;
    const int64_t wi = (int64_t)blockIdx.x * A.pw + p % A.pw, t = tile_y * pt + p / A.pw;
    qxm_pair P = {wi < A.n && t < A.n_t, 0, 0, 0, 0, NULL};
    if (!P.ok) return P;
    P.order = t < A.n_x4 ? A.order_x4 : A.order;
    P.o = t * A.n + wi;
    if (A.ids) {
        const int64_t e = A.ids[t];
        if (A.counts && A.counts[e] >= QR_TILED_MIN_ROWS) P.order = QX_TILED;
        P.wrow = e * A.n + wi;
        P.xr = A.per_slot ? t : t / A.n_used;
        if (A.bias) P.bias = A.bias + e * A.bias_stride + wi;
    } else {
        P.wrow = wi;
        P.xr = t;
    }
    return P;
}

/* Folds records pr[0..m) (blocks c0..) into lane `lane`'s chains (lane 0: the scalar chains too), the loop
 * compiled per fold kind. */
template <int KIND>
static __device__ __forceinline__ void qx_fold_run(int type, int64_t c0, int64_t nb, const qx_rec *pr, int m, int lane,
                                                   qx_fold *f) {
#pragma unroll 4
    for (int b = 0; b < m; b++) {
        qx_fold_lane(KIND, type, c0 + b, nb, &pr[b], lane, f);
        if (lane == 0) qx_fold_scalar(KIND, type, &pr[b], f);
    }
}
static __device__ void qx_fold_chunk(int kind, int type, int64_t c0, int64_t nb, const qx_rec *pr, int m, int lane,
                                     qx_fold *f) {
    switch (kind) {
    case QXF_SYM: qx_fold_run<QXF_SYM>(type, c0, nb, pr, m, lane, f); return;
    case QXF_OFFSET: qx_fold_run<QXF_OFFSET>(type, c0, nb, pr, m, lane, f); return;
    case QXF_REPACK: qx_fold_run<QXF_REPACK>(type, c0, nb, pr, m, lane, f); return;
    case QXF_PAIRED: qx_fold_run<QXF_PAIRED>(type, c0, nb, pr, m, lane, f); return;
    case QXF_KVEC: qx_fold_run<QXF_KVEC>(type, c0, nb, pr, m, lane, f); return;
    case QXF_KGEMV: qx_fold_run<QXF_KGEMV>(type, c0, nb, pr, m, lane, f); return;
    case QXF_KGEMM: qx_fold_run<QXF_KGEMM>(type, c0, nb, pr, m, lane, f); return;
    default: qx_fold_run<QXF_KTILED>(type, c0, nb, pr, m, lane, f); return;
    }
}

/* FT: the weight type, compiled for it (the types qx_rec_planes reads), or -1 (any other type, through
 * the byte gather and the generic records). */
template <int FT>
static __global__ void __launch_bounds__(QXM_QTHREADS) qx_mmq_kernel(qxm_args A, int64_t tiles_y, int chunk) {
    __shared__ qx_rec rec[QXM_QTHREADS];
    __shared__ qx_fold fl[QXM_QTHREADS / 8][8];
    const int tid = threadIdx.x, type = FT >= 0 ? FT : A.w.type, pairs = QXM_QTHREADS / chunk;
    const int64_t nb = A.w.k / (qx_is_kquant(type) ? 256 : 32);
    const size_t yblk = qx_yblock_bytes(type);
    const uint8_t *pl[3] = {A.w.p0, A.w.p1, A.w.p2};
    /* record phase: thread (rp, rs) = block rs of the chunk of pair rp; fold phase: (fp, lane) */
    const int rp = tid / chunk, rs = tid % chunk, fp = tid / 8, lane = tid % 8;
    for (int64_t ty = blockIdx.y; ty < tiles_y; ty += gridDim.y) {
        const qxm_pair R = qxm_pair_of(A, rp, pairs, ty);
        const qxm_pair F = fp < pairs ? qxm_pair_of(A, fp, pairs, ty) : qxm_pair{false, 0, 0, 0, 0, NULL};
        const int kind = qx_fold_kind(type, F.order);
        const qx_planes wb = qx_row(A.w, A.pd, R.ok ? R.wrow : 0);
        const uint8_t *yrow = A.y + (size_t)R.xr * A.row_bytes;
        qx_fold f;
        qx_fold_init(&f);
        for (int64_t c0 = 0; c0 < nb; c0 += chunk) {
            const int64_t i = c0 + rs;
            if (R.ok && i < nb && (FT < 0 || !qx_rec_planes(type, pl, R.wrow * nb + i, yrow + (size_t)i * yblk, &rec[tid]))) {
                alignas(16) uint8_t buf[QX_MAX_BLOCK];
                wb(i, buf);
                qx_rec_of(type, buf, yrow, i, &rec[tid]);
            }
            __syncthreads();
            if (F.ok) {
                const int m = nb - c0 < chunk ? (int)(nb - c0) : chunk;
                qx_fold_chunk(kind, type, c0, nb, &rec[fp * chunk], m, lane, &f);
            }
            __syncthreads();
        }
        if (fp < pairs) fl[fp][lane] = f;
        __syncthreads();
        if (F.ok && lane == 0) {
            float v = qx_fold_final(kind, type, nb, fl[fp], &rec[fp * chunk + (nb - 1) % chunk]);
            if (F.bias) v += *F.bias;
            A.out[F.o] = v;
        }
        __syncthreads();
    }
}

#define QXF_PAIRS (QXM_THREADS / 32)

static __global__ void __launch_bounds__(QXM_THREADS) qx_mmf_kernel(qxm_args A, int64_t tiles_y) {
    __shared__ float ch[QXF_PAIRS][32];
    const int p = threadIdx.x / 32, c = threadIdx.x % 32, type = A.w.type;
    for (int64_t ty = blockIdx.y; ty < tiles_y; ty += gridDim.y) {
        const qxm_pair P = qxm_pair_of(A, p, QXF_PAIRS, ty);
        if (!P.ok) continue;
        const void *x = qx_row_f(A.w, P.wrow), *y = A.y + (size_t)P.xr * A.row_bytes;
        if (c < qx_dotf_chains(P.order)) ch[p][c] = qx_dotf_chain(type, P.order, A.w.k, x, y, c);
        __syncwarp();
        if (c == 0) {
            float v = qx_dotf_final(type, P.order, A.w.k, x, y, ch[p]);
            if (P.bias) v += *P.bias;
            A.out[P.o] = v;
        }
        __syncwarp();
    }
}

/* Launches the matmul kernel of A's weight type over A.n x A.n_t outputs. The quantized kernel takes
 * 8 weight rows x (1, 2 or 4 activation rows) with chunks of 32, 16 or 8 blocks at decode (4 rows x 64
 * blocks for one activation row of >= 64 blocks: twice the loads in flight), and 4 x 8 pairs of 8
 * blocks from 8 activation rows on (prefill). */
static cudaError_t qxm_launch(const qxm_args &A0, cudaStream_t st) {
    qxm_args A = A0;
    const bool fl = A.w.type == QR_TYPE_F32 || A.w.type == QR_TYPE_F16 || A.w.type == QR_TYPE_BF16;
    int chunk = 0;
    if (fl) A.pw = QXF_PAIRS;
    else if (A.n_t >= 8) chunk = 8, A.pw = 4;
    else if (A.n_t == 1 && A.w.k / (qx_is_kquant(A.w.type) ? 256 : 32) >= 64) chunk = 64, A.pw = 4; /* long rows */
    else chunk = A.n_t >= 4 ? 8 : (A.n_t >= 2 ? 16 : 32), A.pw = 8;
    const int pairs = fl ? QXF_PAIRS : QXM_QTHREADS / chunk, pt = pairs / A.pw;
    const int64_t tiles_y = (A.n_t + pt - 1) / pt;
    const dim3 grid((unsigned)((A.n + A.pw - 1) / A.pw), (unsigned)(tiles_y < 65535 ? tiles_y : 65535));
    if (fl) qx_mmf_kernel<<<grid, QXM_THREADS, 0, st>>>(A, tiles_y);
    else {
        void (*k)(qxm_args, int64_t, int) = qx_mmq_kernel<-1>;
        switch (A.w.type) {
        case QR_TYPE_Q4_0: k = qx_mmq_kernel<QR_TYPE_Q4_0>; break;
        case QR_TYPE_Q4_1: k = qx_mmq_kernel<QR_TYPE_Q4_1>; break;
        case QR_TYPE_Q5_0: k = qx_mmq_kernel<QR_TYPE_Q5_0>; break;
        case QR_TYPE_Q5_1: k = qx_mmq_kernel<QR_TYPE_Q5_1>; break;
        case QR_TYPE_Q8_0: k = qx_mmq_kernel<QR_TYPE_Q8_0>; break;
        case QR_TYPE_Q4_K: k = qx_mmq_kernel<QR_TYPE_Q4_K>; break;
        case QR_TYPE_Q6_K: k = qx_mmq_kernel<QR_TYPE_Q6_K>; break;
        default: break;
        }
        k<<<grid, QXM_QTHREADS, 0, st>>>(A, tiles_y, chunk);
    }
    return cudaGetLastError();
}

/* ---- Mamba2 (cpu/ops_ssm.c) ---- */

QX_FN float qx_silu(float x) { return x / (1.0f + qx_expf(-x)); }

/* Thread per channel: every row in order, the rolling state of the row's sequence. */
static __global__ void qx_ssm_conv_kernel(const float *x, int64_t x_stride, float *state, const float *w, const float *b,
                                          const int32_t *seq, int32_t n_tok, int32_t K, int32_t C, float *out) {
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int64_t slot_sz = (int64_t)(K - 1) * C;
    const float *wc = w + c * K;
    for (int32_t r = 0; r < n_tok; r++) {
        float *st = state + (int64_t)seq[r] * slot_sz + c;
        const float xin = x[(int64_t)r * x_stride + c];
        float sum = 0.0f;
        for (int32_t k = 0; k < K - 1; k++) sum += st[(int64_t)k * C] * wc[k];
        sum += xin * wc[K - 1];
        for (int32_t k = 0; k < K - 2; k++) st[(int64_t)k * C] = st[(int64_t)(k + 1) * C];
        st[(int64_t)(K - 2) * C] = xin;
        if (b) sum += b[c];
        out[(int64_t)r * C + c] = qx_silu(sum);
    }
}

/* Thread per (head, channel): the recurrent scan over the rows in order; dtv / dAv = the CPU's softplus(dt +
 * bias) and expf(dt A) per [row][head] (libm, computed on the host). */
static __global__ void qx_ssm_scan_kernel(float *state, const float *xbc, const float *dtv, const float *dAv,
                                          const float *D, qr_ssm_params p, const int32_t *seq, int32_t n_tok, float *y,
                                          int *diverged) {
    const int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= (int64_t)p.n_head * p.head_dim) return;
    const int32_t h = (int32_t)(g / p.head_dim), i = (int32_t)(g % p.head_dim), N = p.d_state;
    const int32_t grp = h / (p.n_head / p.n_group), np = N & ~31;
    const int64_t slot_sz = (int64_t)p.n_head * p.head_dim * N;
    const float Dh = D ? D[h] : 0.0f;
    bool bad = false; /* a NaN/Inf state value: raises the backend's divergence flag, as the fast scan does */
    for (int32_t r = 0; r < n_tok; r++) {
        const float *row = xbc + (int64_t)r * p.conv_dim;
        const float *x = row + (int64_t)h * p.head_dim, *B = row + p.d_inner + (int64_t)grp * N,
                    *Cm = row + p.d_inner + (int64_t)p.n_group * N + (int64_t)grp * N;
        const float dt = dtv[(int64_t)r * p.n_head + h], dA = dAv[(int64_t)r * p.n_head + h];
        float *s = state + (int64_t)seq[r] * slot_sz + ((int64_t)h * p.head_dim + i) * N;
        const float xdt = x[i] * dt;
        float lane[32];
        for (int l = 0; l < 32; l++) lane[l] = 0.0f;
        for (int32_t n0 = 0; n0 < np; n0 += 32)
            for (int l = 0; l < 32; l++) {
                const float v = fmaf(s[n0 + l], dA, B[n0 + l] * xdt); /* the CPU's (ggml's) FMA */
                s[n0 + l] = v;
                bad |= !isfinite(v);
                lane[l] = fmaf(v, Cm[n0 + l], lane[l]);
            }
        float sum = 0.0f;
        if (np > 0) {
            float x8[8];
            for (int k = 0; k < 8; k++) x8[k] = (lane[k] + lane[16 + k]) + (lane[8 + k] + lane[24 + k]);
            const float t0 = x8[0] + x8[4], t1 = x8[1] + x8[5], t2 = x8[2] + x8[6], t3 = x8[3] + x8[7];
            sum = (t0 + t1) + (t2 + t3);
        }
        for (int32_t n = np; n < N; n++) {
            const float v = fmaf(s[n], dA, B[n] * xdt);
            s[n] = v;
            bad |= !isfinite(v);
            sum = fmaf(v, Cm[n], sum);
        }
        y[(int64_t)r * p.d_inner + (int64_t)h * p.head_dim + i] = sum + x[i] * Dh;
    }
    if (bad && diverged) *diverged = 1;
}

/* Thread per (row, group): t = silu(z) y, then the CPU's rmsnorm of the group (t recomputed, same bits). */
static __global__ void qx_gate_norm_kernel(const float *y, const float *z, int64_t z_stride, const float *w, int64_t n_rows,
                                           int64_t di, int32_t n_group, float eps, float *out) {
    const int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= n_rows * n_group) return;
    const int64_t r = g / n_group, gs = di / n_group, o = (g % n_group) * gs;
    const float *yr = y + r * di + o, *zr = z + r * z_stride + o;
    float *orow = out + r * di + o;
    if (!w) {
        for (int64_t i = 0; i < gs; i++) orow[i] = qx_silu(zr[i]) * yr[i];
        return;
    }
    double sum = 0.0;
    for (int64_t i = 0; i < gs; i++) {
        const float t = qx_silu(zr[i]) * yr[i];
        sum += (double)(t * t);
    }
    const float mean = (float)(sum / (double)gs), scale = 1.0f / sqrtf(mean + eps);
    for (int64_t i = 0; i < gs; i++) orow[i] = qx_silu(zr[i]) * yr[i] * scale * w[o + i];
}

/* ---- sums in double without the CPU's sequence ----
 *
 * The CPU sums n values in double one by one and uses only f(sum), a float that is a monotonic function
 * of the sum (rmsnorm: (float)(sum / n); attention: (float)(1 / sum)). A sum in another order differs
 * from the sequential one by at most 2 (n - 1) u sum(|t|) (u = 2^-53, the standard bound for both), so
 * when f takes the same value at both ends of [par - B, par + B] (B = 4 n u |par|), f(sequential) is that
 * value. That holds except when the sum lies within ~1e-13 relative of a float rounding boundary; then
 * one thread sums in the CPU's order. qx_sum_settled says which case it is. */
#define QX_RED_THREADS 256

/* Block-wide sum of v (double) in any order; every thread gets it. */
static __device__ double qx_block_sum(double v, double *red) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int w = threadIdx.x / 32, nw = blockDim.x / 32;
    __syncthreads();
    if (threadIdx.x % 32 == 0) red[w] = v;
    __syncthreads();
    double t = 0.0;
    for (int i = 0; i < nw; i++) t += red[i];
    return t;
}

/* f(lo) == f(hi) for f = (float)(x / div) (inv false) or (float)(1 / x) (inv true). */
static __device__ bool qx_sum_settled(double par, int64_t n, double div, bool inv) {
    const double b = fabs(par) * 4.0 * (double)(n + 1) * 0x1p-53, lo = par - b, hi = par + b;
    if (!(lo == lo) || !(hi == hi) || isinf(lo) || isinf(hi)) return false;
    const float flo = inv ? (float)(1.0 / lo) : (float)(lo / div), fhi = inv ? (float)(1.0 / hi) : (float)(hi / div);
    return flo == fhi && !(inv && lo <= 0.0);
}

/* CTA per row: the squares (float), their double sum, then the CPU's float steps. */
static __global__ void __launch_bounds__(QX_RED_THREADS) qx_rmsnorm_kernel(const float *x, const float *w, int64_t dim,
                                                                          float eps, bool seq, float *y) {
    __shared__ double red[QX_RED_THREADS / 32];
    __shared__ float s_scale;
    const int64_t r = blockIdx.x;
    const float *xr = x + r * dim;
    float *yr = y + r * dim;
    double part = 0.0;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) part += (double)(xr[i] * xr[i]);
    const double par = qx_block_sum(part, red);
    if (threadIdx.x == 0) {
        double sum = par;
        if (seq || !qx_sum_settled(par, dim, (double)dim, false)) { /* the CPU's order */
            sum = 0.0;
            for (int64_t i = 0; i < dim; i++) sum += (double)(xr[i] * xr[i]);
        }
        const float mean = (float)(sum / (double)dim);
        s_scale = 1.0f / sqrtf(mean + eps);
    }
    __syncthreads();
    const float scale = s_scale;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
        const float v = xr[i] * scale;
        yr[i] = w ? v * w[i] : v;
    }
}

/* Thread per (row, head, rotated pair); cs = the CPU's [position][n_rot] cos/sin table. */
static __global__ void qx_rope_kernel(float *x, int32_t n_tok, int32_t n_head, int32_t head_dim, int32_t n_rot, int mode,
                                      const int32_t *pos, const float *cs) {
    const int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, half = n_rot / 2;
    if (g >= (int64_t)n_tok * n_head * half) return;
    const int64_t r = g / ((int64_t)n_head * half), h = g / half % n_head, i = g % half;
    const float *c = cs + (int64_t)pos[r] * n_rot + 2 * i;
    float *xh = x + (r * n_head + h) * head_dim;
    const int64_t a = mode == QR_ROPE_NEOX ? i : 2 * i, b = mode == QR_ROPE_NEOX ? i + half : 2 * i + 1;
    const float x0 = xh[a], x1 = xh[b];
    xh[a] = fmaf(x0, c[0], -(x1 * c[1]));
    xh[b] = fmaf(x0, c[1], x1 * c[0]);
}

/* GEGLU through the CPU's own f16 GELU table (built by the CPU code: its tanhf is the C library's). */
static __global__ void qx_geglu_kernel(const float *g, const float *u, int64_t n, const float *tab, float *out) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float x = g[i];
    out[i] = x <= -10.0f ? 0.0f : (x >= 10.0f ? x * u[i] : tab[qx_f2h(x)] * u[i]);
}

/* The GLUs that call the C library's expf (cpu/ops_moe.c qr_cpu_glu): gpt-oss's clamped SwiGLU and
 * qwen2moe's sigmoid (silu(x) / x, u unused). */
static __global__ void qx_glu_libm_kernel(const float *g, const float *u, int64_t n, int act, float *out) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (act == QR_GLU_SIGMOID) {
        out[i] = g[i] / (1.0f + qx_libm_expf(-g[i])) / g[i];
        return;
    }
    const float x = fminf(g[i], 7.0f), y = fminf(fmaxf(u[i], -7.0f), 7.0f);
    out[i] = x / (1.0f + qx_libm_expf(-1.702f * x)) * (y + 1.0f);
}

/* gemma2's final softcap in the CPU's order with the C library's tanhf: tanh(x * (1 / cap)) * cap. */
static __global__ void qx_softcap_kernel(const float *x, float inv, float cap, int64_t n, float *out) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = qx_libm_tanhf(x[i] * inv) * cap;
}

#define QX_ATT_THREADS 256

static __device__ float qx_kv(const void *base, bool f16, int64_t i) {
    return f16 ? qx_h2f(((const uint16_t *)base)[i]) : ((const float *)base)[i];
}

/* ggml's 8-lane sum of the exp values of positions c..c+7 (those outside [first, last] count 0). */
static __device__ float qx_group8(const float *s, int32_t c, int32_t first, int32_t last) {
    float l[8];
    for (int k = 0; k < 8; k++) l[k] = c + k >= first && c + k <= last ? s[c + k - first] : 0.0f;
    return qx_hsum8(l);
}

/* Lane L's chain of dim d in the values pass: prob[p] * V[p][d] over the positions p % lanes == L, in order
 * (the loads of 4 steps issued before their FMAs). */
static __device__ float qx_attn_chain(const cuda_attn_args &a, const int32_t *bt, const float *s, int32_t first,
                                      int32_t last, int32_t kvh, int lanes, int32_t L, int32_t d) {
    const int64_t vstride = (int64_t)a.n_head_kv * a.dv, off = (int64_t)kvh * a.dv + d;
    float acc = 0.0f;
    int32_t p = first + ((L - first % lanes) + lanes) % lanes;
    for (; p + 3 * lanes <= last; p += 4 * lanes) {
        float v[4];
        for (int u = 0; u < 4; u++) {
            const int32_t q = p + u * lanes;
            v[u] = qx_kv(a.v_cache, a.f16, ((int64_t)bt[q / a.block_size] * a.block_size + q % a.block_size) * vstride + off);
        }
        for (int u = 0; u < 4; u++) acc = fmaf(s[p + u * lanes - first], v[u], acc);
    }
    for (; p <= last; p += lanes)
        acc = fmaf(s[p - first],
                   qx_kv(a.v_cache, a.f16, ((int64_t)bt[p / a.block_size] * a.block_size + p % a.block_size) * vstride + off),
                   acc);
    return acc;
}

/* A dim's output from its lanes' chains acc[l * stride], added in the CPU's order (32 lanes for one row,
 * 8 for a batch). */
static __device__ float qx_attn_combine(const float *acc, int64_t stride, bool single) {
    if (single) {
        float x8[8];
        for (int b = 0; b < 8; b++)
            x8[b] = (acc[b * stride] + acc[(16 + b) * stride]) + (acc[(8 + b) * stride] + acc[(24 + b) * stride]);
        const float t0 = x8[0] + x8[4], t1 = x8[1] + x8[5], t2 = x8[2] + x8[6], t3 = x8[3] + x8[7];
        return (t0 + t1) + (t2 + t3);
    }
    const float t0 = acc[0] + acc[4 * stride], t1 = acc[stride] + acc[5 * stride], t2 = acc[2 * stride] + acc[6 * stride],
                t3 = acc[3 * stride] + acc[7 * stride];
    return (t0 + t2) + (t1 + t3);
}

/* The score of position p against the query q (f16-rounded, in shared memory): the CPU's dot order
 * (tinyBLAS: one 8-lane accumulator for batches; vec_dot_f16: 4 x 8 lanes, the rest in double, for one
 * row), softcap, scale. */
static __device__ float qx_attn_score(const cuda_attn_args &a, const float *q, const int32_t *bt, int32_t p, int32_t kvh,
                                      bool single) {
    const int32_t dk = a.dk;
    const int64_t slot = (int64_t)bt[p / a.block_size] * a.block_size + p % a.block_size;
    const int64_t kb = slot * (int64_t)a.n_head_kv * dk + (int64_t)kvh * dk;
    float sc;
    if (!single && dk % 8 == 0) {
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int32_t i = 0; i < dk; i += 8)
            for (int l = 0; l < 8; l++) acc[l] = fmaf(qx_kv(a.k_cache, a.f16, kb + i + l), q[i + l], acc[l]);
        sc = qx_hsum8(acc);
    } else {
        float acc[4][8];
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 8; l++) acc[j][l] = 0.0f;
        const int32_t np = dk & ~31;
        for (int32_t i = 0; i < np; i += 32)
            for (int j = 0; j < 4; j++)
                for (int l = 0; l < 8; l++)
                    acc[j][l] = fmaf(qx_kv(a.k_cache, a.f16, kb + i + 8 * j + l), q[i + 8 * j + l], acc[j][l]);
        double sum = qx_reduce4x8(acc);
        for (int32_t i = np; i < dk; i++) sum += (double)(qx_kv(a.k_cache, a.f16, kb + i) * q[i]);
        sc = (float)sum;
    }
    if (a.softcap > 0.0f) sc = qx_libm_tanhf(sc * (1.0f / a.softcap)) * a.softcap; /* the C library's tanhf */
    return sc * a.scale;
}

/* The scores of few rows over many CTAs: block (row x head, part), a thread per key. */
static __global__ void qx_attn_scores_kernel(cuda_attn_args a, int32_t span, bool single, float *scores) {
    __shared__ float q[QR_CUDA_MAX_HEAD_DIM];
    const int32_t rh = blockIdx.x, r = rh / a.n_head, h = rh % a.n_head;
    const int32_t last = a.pos[r], first = a.window > 0 && last - a.window + 1 > 0 ? last - a.window + 1 : 0;
    const int32_t t = blockIdx.y * blockDim.x + threadIdx.x;
    if (first + (int32_t)(blockIdx.y * blockDim.x) > last) return; /* the whole CTA is past the keys */
    for (int32_t i = threadIdx.x; i < a.dk; i += blockDim.x) q[i] = qx_round_f16(a.q[(int64_t)rh * a.dk + i]);
    __syncthreads();
    if (first + t > last) return;
    const int32_t *bt = a.block_table + (int64_t)a.seq[r] * a.max_blocks;
    scores[(int64_t)rh * span + t] = qx_attn_score(a, q, bt, first + t, h / (a.n_head / a.n_head_kv), single);
}

/* CTA per (row, head): the CPU's attn_head (cpu/ops_avx2.c). scores: [n_tok][n_head][span] scratch. */
static __global__ void qx_attention_kernel(cuda_attn_args a, int32_t span, bool single, bool seq, bool values,
                                           bool have_scores, float *scores) {
    const int32_t r = blockIdx.x / a.n_head, h = blockIdx.x % a.n_head, tid = threadIdx.x;
    const int32_t kvh = h / (a.n_head / a.n_head_kv), dk = a.dk, dv = a.dv;
    __shared__ float q[QR_CUDA_MAX_HEAD_DIM];
    __shared__ float red[QX_ATT_THREADS];
    __shared__ double dsum, dred[QX_ATT_THREADS / 32];
    extern __shared__ float lacc[]; /* [lanes][dv] */
    for (int32_t i = tid; i < dk; i += blockDim.x) q[i] = qx_round_f16(a.q[((int64_t)r * a.n_head + h) * dk + i]);
    const int32_t last = a.pos[r];
    const int32_t first = a.window > 0 && last - a.window + 1 > 0 ? last - a.window + 1 : 0;
    float *out = a.out + ((int64_t)r * a.n_head + h) * dv;
    const int32_t *bt = a.block_table + (int64_t)a.seq[r] * a.max_blocks;
    __syncthreads();
    if (first > last) {
        for (int32_t i = tid; i < dv; i += blockDim.x) out[i] = 0.0f;
        return;
    }
    const int32_t n = last - first + 1;
    float *s = scores + ((int64_t)r * a.n_head + h) * span;
    /* pass 1: scores (few rows: already written by qx_attn_scores_kernel) */
    float mx = -INFINITY;
    for (int32_t t = tid; t < n; t += blockDim.x) {
        const float sc = have_scores ? s[t] : qx_attn_score(a, q, bt, first + t, kvh, single);
        if (!have_scores) s[t] = sc;
        mx = sc > mx ? sc : mx;
    }
    red[tid] = mx;
    __syncthreads();
    for (int o = blockDim.x / 2; o > 0; o >>= 1) {
        if (tid < o) red[tid] = red[tid + o] > red[tid] ? red[tid + o] : red[tid];
        __syncthreads();
    }
    mx = red[0];
    const float sink = a.sinks ? a.sinks[h] : 0.0f;
    if (a.sinks) mx = fmaxf(mx, sink);
    /* pass 2: exp; the sum over aligned groups of 8 positions (a float each), in double */
    for (int32_t t = tid; t < n; t += blockDim.x) s[t] = qx_expf(s[t] - mx);
    __syncthreads();
    const int32_t g0 = first & ~7, n_groups = (last - g0) / 8 + 1;
    double part = 0.0;
    for (int32_t gi = tid; gi < n_groups; gi += blockDim.x) part += (double)qx_group8(s, g0 + 8 * gi, first, last);
    const double par = qx_block_sum(part, dred);
    if (tid == 0) {
        double sum = par;
        if (a.sinks) sum += (double)qx_libm_expf(sink - mx); /* the CPU's libm expf */
        if (seq || !qx_sum_settled(sum, n_groups + 1, 1.0, true)) { /* the CPU's order */
            sum = 0.0;
            for (int32_t c = g0; c <= last; c += 8) sum += (double)qx_group8(s, c, first, last);
            if (a.sinks) sum += (double)qx_libm_expf(sink - mx);
        }
        dsum = sum;
    }
    __syncthreads();
    /* pass 3: probabilities rounded to f16; position p accumulates into lane p % lanes: a thread per
     * (lane, dim) runs that lane's chain, then the lanes are added in the CPU's order (few rows: in two
     * more kernels over more CTAs) */
    const float inv = (float)(1.0 / dsum);
    for (int32_t t = tid; t < n; t += blockDim.x) s[t] = qx_round_f16(s[t] * inv);
    __syncthreads();
    if (!values) return; /* few rows: qx_attn_values_kernel and qx_attn_combine_kernel take it from here */
    const int lanes = single ? 32 : 8;
    for (int32_t idx = tid; idx < lanes * dv; idx += blockDim.x)
        lacc[idx] = qx_attn_chain(a, bt, s, first, last, kvh, lanes, idx / dv, idx % dv);
    __syncthreads();
    for (int32_t d = tid; d < dv; d += blockDim.x) out[d] = qx_attn_combine(lacc + d, dv, single);
}

/* The values pass of few rows over many CTAs: block (row x head, part), a thread per (lane, dim) chain,
 * into lacc [row x head][lanes][dv]. */
static __global__ void qx_attn_values_kernel(cuda_attn_args a, int32_t span, bool single, const float *scores, float *lacc) {
    const int32_t rh = blockIdx.x, r = rh / a.n_head, h = rh % a.n_head, lanes = single ? 32 : 8;
    const int32_t idx = blockIdx.y * blockDim.x + threadIdx.x;
    if (idx >= lanes * a.dv) return;
    const int32_t last = a.pos[r], first = a.window > 0 && last - a.window + 1 > 0 ? last - a.window + 1 : 0;
    const int32_t *bt = a.block_table + (int64_t)a.seq[r] * a.max_blocks;
    lacc[(int64_t)rh * lanes * a.dv + idx] = qx_attn_chain(a, bt, scores + (int64_t)rh * span, first, last,
                                                           h / (a.n_head / a.n_head_kv), lanes, idx / a.dv, idx % a.dv);
}

static __global__ void qx_attn_combine_kernel(cuda_attn_args a, bool single, const float *lacc) {
    const int32_t rh = blockIdx.x, lanes = single ? 32 : 8;
    for (int32_t d = threadIdx.x; d < a.dv; d += blockDim.x)
        a.out[(int64_t)rh * a.dv + d] = qx_attn_combine(lacc + (int64_t)rh * lanes * a.dv + d, a.dv, single);
}

/* ---- host side ---- */

#define QX_ROPE_TABS 8

struct qx_rope_tab {
    qr_rope_params p; /* the parameters (freq_factors as the host pointer of its data) */
    const void *ff;
    int32_t n_pos;    /* positions in the table */
    float *d;         /* device [n_pos][n_rot] */
};

struct cuda_exact {
    qx_rope_tab rope[QX_ROPE_TABS];
    int n_rope;
    void *y;          /* converted activations */
    size_t y_cap;
    float *gelu;      /* device copy of the CPU's GELU table [65536] */
    bool seq_sums;    /* QUARREL_CUDA_EXACT_SEQSUM=1: every double sum in the CPU's order (tests the fallback) */
    void *lacc;       /* attention's values pass of few rows: [row x head][lanes][dv] */
    size_t lacc_cap;
    void *counts;     /* matmul_id: slots per expert [n_expert] */
    size_t counts_cap;
};

static cuda_exact *exact_state(cuda_backend *cb) {
    if (!cb->ex) {
        cb->ex = (cuda_exact *)calloc(1, sizeof(cuda_exact));
        if (cb->ex) cb->ex->seq_sums = cb->tune.exact_seq_sums != 0;
    }
    if (!cb->ex) raise_error(cb, QR_ERR_NOMEM, "exact mode: out of memory");
    return cb->ex;
}

void cuda_exact_free(cuda_backend *cb) {
    cuda_exact *ex = cb->ex;
    if (!ex) return;
    for (int i = 0; i < ex->n_rope; i++) cudaFree(ex->rope[i].d);
    cudaFree(ex->y);
    cudaFree(ex->gelu);
    cudaFree(ex->lacc);
    cudaFree(ex->counts);
    free(ex);
    cb->ex = NULL;
}

static unsigned blocks_for(int64_t n, int threads) { return (unsigned)((n + threads - 1) / threads); }

/* The CPU's traits of w's type (the AVX2 ones, as cpu_matmul uses), or NULL with an error raised. */
static const qr_quant_traits *exact_traits(cuda_backend *cb, const qr_weight *w, const char *op) {
    const qr_quant_traits *tr = qr_quant_traits_best(w->type);
    if (tr && tr->vec_dot) return tr;
    raise_error(cb, QR_ERR_UNSUPPORTED, "%s: weight type has no dot product", op);
    return NULL;
}

/* x[n_rows][k] converted to the weight's vec_dot_type as the CPU converts it, into ex->y (rows of
 * *row_bytes); rows below n_x4 with the 4-row Q8_K quantizer. */
static bool exact_act(cuda_backend *cb, cuda_exact *ex, const qr_quant_traits *tr, const float *x, int64_t n_rows, int64_t k,
                      int64_t n_x4, size_t *row_bytes_out, const uint8_t **act) {
    int kind;
    switch (tr->vec_dot_type) {
    case QR_TYPE_Q8_0: kind = QXA_Q8_0; break;
    case QR_TYPE_Q8_1: kind = QXA_Q8_1; break;
    case QR_TYPE_Q8_K: kind = QXA_Q8_K; break;
    case QR_TYPE_F16: kind = QXA_F16; break;
    case QR_TYPE_BF16: kind = QXA_BF16; break;
    default: kind = QXA_F32; break;
    }
    const size_t row_bytes = kind == QXA_F32 ? (size_t)k * 4 : qr_type_row_size(tr->vec_dot_type, k);
    if (row_bytes == 0) {
        raise_error(cb, QR_ERR_INVALID_ARG, "matmul (exact): row length is not a multiple of the block size");
        return false;
    }
    *row_bytes_out = row_bytes;
    if (kind == QXA_F32) { /* the rows as they are */
        *act = (const uint8_t *)x;
        return true;
    }
    if (!ensure_scratch(cb, &ex->y, &ex->y_cap, row_bytes * (size_t)n_rows, "exact matmul activations")) return false;
    *act = (const uint8_t *)ex->y;
    const int64_t bs = kind == QXA_Q8_0 || kind == QXA_Q8_1 ? 32 : (kind == QXA_Q8_K ? 256 : 1);
    const int64_t n_act = n_rows * (k / bs);
    if (bs > 1)
        qx_act_warp_kernel<<<blocks_for(n_act * 32, 128), 128, 0, cb->stream>>>(x, n_rows, k, kind, kind == QXA_Q8_K ? n_x4 : 0,
                                                                               (uint8_t *)ex->y, row_bytes);
    else
        qx_act_kernel<<<blocks_for(n_act, 256), 256, 0, cb->stream>>>(x, n_act, kind, (uint8_t *)ex->y);
    return cuda_ok(cb, cudaGetLastError(), "matmul (exact activations)");
}

/* y[n_rows][n] = x . w^T with the order cpu_matmul (backend/cpu/backend_cpu.c) picks for this weight
 * and row count, on activations converted as the CPU converts them. */
void cuda_exact_matmul(cuda_backend *cb, const qr_weight *w, const cuda_weight *cw, const float *x, int64_t n_rows,
                       float *y) {
    cuda_exact_matmul_view(cb, w, &cw->v, x, n_rows, y, false);
}

void cuda_exact_matmul_view(cuda_backend *cb, const qr_weight *w, const cuda_wview *v, const float *x, int64_t n_rows,
                            float *y, bool no_repack) {
    const qr_quant_traits *tr = exact_traits(cb, w, "matmul (exact)");
    cuda_exact *ex = tr ? exact_state(cb) : NULL;
    if (!ex) return;
    const int64_t k = v->k, n = w->ne[1];
    int ord = QX_VEC, ord_x4 = QX_VEC;
    int64_t n_x4 = 0;
    if (!no_repack && tr->vec_dot_gemm && tr->vec_dot_gemv && tr->repack_rows > 0 && n % tr->repack_rows == 0) {
        ord = QX_GEMV;
        ord_x4 = QX_GEMM;
        n_x4 = n_rows - n_rows % 4;
    } else if (tr->vec_dot_tiled && n_rows >= QR_TILED_MIN_ROWS) {
        ord = QX_TILED;
    } else if (qr_quant_sgemm_applies(tr, k, n, n_rows)) {
        ord = QX_SGEMM;
    }
    size_t row_bytes;
    const uint8_t *act;
    if (!exact_act(cb, ex, tr, x, n_rows, k, tr->from_float_gemm ? n_x4 : 0, &row_bytes, &act)) return;
    qxm_args A = {};
    A.w = *v;
    A.w.n = n;
    A.pd = qr_cuda_plane_desc(w->type);
    A.y = act, A.row_bytes = row_bytes;
    A.n = n, A.n_t = n_rows;
    A.order = ord, A.order_x4 = ord_x4, A.n_x4 = n_x4;
    A.out = y;
    cuda_ok(cb, qxm_launch(A, cb->stream), "matmul (exact)");
}

void cuda_exact_rmsnorm(cuda_backend *cb, const float *x, const float *w, int64_t n_rows, int64_t dim, float eps,
                        float *y) {
    if (n_rows <= 0) return;
    const cuda_exact *ex = exact_state(cb);
    if (!ex) return;
    qx_rmsnorm_kernel<<<(unsigned)n_rows, QX_RED_THREADS, 0, cb->stream>>>(x, w, dim, eps, ex->seq_sums, y);
    cuda_ok(cb, cudaGetLastError(), "rmsnorm (exact)");
}

static bool rope_same(const qx_rope_tab *t, const qr_rope_params *p, const void *ff) {
    return t->p.mode == p->mode && t->p.n_rot == p->n_rot && t->p.freq_base == p->freq_base &&
           t->p.freq_scale == p->freq_scale && t->ff == ff && t->p.ext_factor == p->ext_factor &&
           t->p.attn_factor == p->attn_factor && t->p.beta_fast == p->beta_fast && t->p.beta_slow == p->beta_slow &&
           t->p.n_ctx_orig == p->n_ctx_orig;
}

/* The device table of the CPU's cos/sin (qr_cpu_rope_cache) for positions [0, need); rebuilt larger
 * when a later position appears. */
static const float *rope_table(cuda_backend *cb, const qr_rope_params *p, int32_t need) {
    cuda_exact *ex = exact_state(cb);
    if (!ex) return NULL;
    const void *ff = p->freq_factors ? p->freq_factors->host : NULL;
    qx_rope_tab *t = NULL;
    for (int i = 0; i < ex->n_rope && !t; i++)
        if (rope_same(&ex->rope[i], p, ff)) t = &ex->rope[i];
    if (!t) {
        if (ex->n_rope == QX_ROPE_TABS) {
            raise_error(cb, QR_ERR_UNSUPPORTED, "rope (exact): more than %d rope configurations", QX_ROPE_TABS);
            return NULL;
        }
        t = &ex->rope[ex->n_rope++];
        memset(t, 0, sizeof *t);
        t->p = *p;
        t->p.freq_factors = NULL;
        t->ff = ff;
    }
    if (need <= t->n_pos) return t->d;
    if (cb->capturing) { /* the table is built on the host: fail the capture (then ops run one by one) */
        raise_error(cb, QR_ERR_UNSUPPORTED, "rope (exact): the table grows on the host, not in a CUDA graph");
        return NULL;
    }
    int32_t n_pos = t->n_pos * 2 > need ? t->n_pos * 2 : need;
    if (n_pos < 1024) n_pos = 1024;
    float *h = (float *)malloc((size_t)n_pos * (size_t)p->n_rot * 4);
    if (!h) {
        raise_error(cb, QR_ERR_NOMEM, "rope (exact): out of memory");
        return NULL;
    }
    for (int32_t q = 0; q < n_pos; q++) qr_cpu_rope_cache((float)q, p, (const float *)ff, h + (size_t)q * p->n_rot);
    float *d = NULL;
    cudaError_t e = cudaStreamSynchronize(cb->stream); /* the old table may still be read */
    if (e == cudaSuccess) e = cudaMalloc(&d, (size_t)n_pos * (size_t)p->n_rot * 4);
    if (e == cudaSuccess) e = cudaMemcpy(d, h, (size_t)n_pos * (size_t)p->n_rot * 4, cudaMemcpyHostToDevice);
    free(h);
    if (!cuda_ok(cb, e, "rope (exact table)")) {
        cudaFree(d);
        return NULL;
    }
    cudaFree(t->d);
    t->d = d;
    t->n_pos = n_pos;
    cb->scratch_gen++;
    return d;
}

void cuda_exact_rope(cuda_backend *cb, float *x, int32_t n_head, int32_t head_dim, const qr_rope_params *p) {
    int32_t need = 1;
    for (int32_t r = 0; r < cb->n_tokens; r++)
        if (cb->h_pos[r] + 1 > need) need = cb->h_pos[r] + 1;
    /* a graph replays this launch at later positions: cover every position its block table reaches */
    if (cb->graph_mode && (int64_t)cb->max_blocks * cb->kv_block_size > need)
        need = (int32_t)((int64_t)cb->max_blocks * cb->kv_block_size);
    const float *cs = rope_table(cb, p, need);
    if (!cs) return;
    const int64_t n = (int64_t)cb->n_tokens * n_head * (p->n_rot / 2);
    qx_rope_kernel<<<blocks_for(n, 128), 128, 0, cb->stream>>>(x, cb->n_tokens, n_head, head_dim, p->n_rot, p->mode,
                                                                cb->d_pos, cs);
    cuda_ok(cb, cudaGetLastError(), "rope (exact)");
}

void cuda_exact_attention(cuda_backend *cb, const cuda_attn_args *a, int32_t span) {
    cuda_exact *ex = exact_state(cb);
    if (!ex) return;
    const size_t need = (size_t)a->n_tok * (size_t)a->n_head * (size_t)span * 4;
    if (!ensure_scratch(cb, &cb->attn, &cb->attn_cap, need, "exact attention scores")) return;
    const bool single = a->n_tok == 1, split = a->n_tok <= 8; /* few (row, head) CTAs: the values pass apart */
    const int lanes = single ? 32 : 8;
    const unsigned n_rh = (unsigned)(a->n_tok * a->n_head);
    const size_t lacc_bytes = (size_t)n_rh * (size_t)lanes * (size_t)a->dv * 4;
    if (split && !ensure_scratch(cb, &ex->lacc, &ex->lacc_cap, lacc_bytes, "exact attention lanes")) return;
    const size_t smem = split ? 0 : (size_t)lanes * (size_t)a->dv * 4;
    if (smem > 48 * 1024 &&
        !cuda_ok(cb, cudaFuncSetAttribute(qx_attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
                 "attention (exact, shared memory)"))
        return;
    if (split) {
        const dim3 grid(n_rh, (unsigned)((span + 127) / 128));
        qx_attn_scores_kernel<<<grid, 128, 0, cb->stream>>>(*a, span, single, (float *)cb->attn);
    }
    qx_attention_kernel<<<n_rh, QX_ATT_THREADS, smem, cb->stream>>>(*a, span, single, ex->seq_sums, !split, split,
                                                                   (float *)cb->attn);
    if (split) {
        const dim3 grid(n_rh, (unsigned)((lanes * a->dv + 127) / 128));
        qx_attn_values_kernel<<<grid, 128, 0, cb->stream>>>(*a, span, single, (const float *)cb->attn, (float *)ex->lacc);
        qx_attn_combine_kernel<<<n_rh, 128, 0, cb->stream>>>(*a, single, (const float *)ex->lacc);
    }
    cuda_ok(cb, cudaGetLastError(), "attention (exact)");
}

void cuda_exact_geglu(cuda_backend *cb, const float *g, const float *u, int64_t n, float *out) {
    cuda_exact *ex = exact_state(cb);
    if (!ex || n <= 0) return;
    if (!ex->gelu && cb->capturing) {
        raise_error(cb, QR_ERR_UNSUPPORTED, "geglu (exact): the table is built on the host, not in a CUDA graph");
        return;
    }
    if (!ex->gelu) {
        float *h = (float *)malloc(65536 * 4);
        if (!h) {
            raise_error(cb, QR_ERR_NOMEM, "geglu (exact): out of memory");
            return;
        }
        qr_cpu_gelu_table_init(h);
        cudaError_t e = cudaMalloc(&ex->gelu, 65536 * 4);
        if (e == cudaSuccess) e = cudaMemcpy(ex->gelu, h, 65536 * 4, cudaMemcpyHostToDevice);
        free(h);
        if (!cuda_ok(cb, e, "geglu (exact table)")) {
            cudaFree(ex->gelu);
            ex->gelu = NULL;
            return;
        }
    }
    qx_geglu_kernel<<<blocks_for(n, 256), 256, 0, cb->stream>>>(g, u, n, ex->gelu, out);
    cuda_ok(cb, cudaGetLastError(), "geglu (exact)");
}

void cuda_exact_softcap(cuda_backend *cb, const float *x, float cap, int64_t n, float *out) {
    if (n <= 0) return;
    qx_softcap_kernel<<<blocks_for(n, 256), 256, 0, cb->stream>>>(x, 1.0f / cap, cap, n, out);
    cuda_ok(cb, cudaGetLastError(), "softcap (exact)");
}

void cuda_exact_glu_libm(cuda_backend *cb, const float *g, const float *u, int64_t n, qr_glu_kind act, float *out) {
    if (n <= 0) return;
    qx_glu_libm_kernel<<<blocks_for(n, 256), 256, 0, cb->stream>>>(g, u, n, (int)act, out);
    cuda_ok(cb, cudaGetLastError(), "glu (exact)");
}

/* counts[e] += 1 for every slot routed to expert e (counts zeroed before). */
static __global__ void qx_expert_counts_kernel(const int32_t *ids, int64_t n_slots, int32_t n_expert, int32_t *counts) {
    const int64_t s = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (s < n_slots && ids[s] >= 0 && ids[s] < n_expert) atomicAdd(&counts[ids[s]], 1);
}

void cuda_exact_matmul_id(cuda_backend *cb, const qr_weight *w, const cuda_weight *cw, const qr_weight *bias,
                          const float *b, const float *x, bool per_slot, const int32_t *ids, int64_t n_rows,
                          int32_t n_used, float *y) {
    const qr_quant_traits *tr = exact_traits(cb, w, "matmul_id (exact)");
    cuda_exact *ex = tr ? exact_state(cb) : NULL;
    if (!ex) return;
    const int64_t k = cw->v.k, n = w->ne[1], n_slots = n_rows * n_used;
    const int ord = tr->vec_dot_gemm && tr->vec_dot_gemv && tr->repack_rows > 0 && n % tr->repack_rows == 0 ? QX_GEMV : QX_VEC;
    size_t row_bytes;
    const uint8_t *act;
    if (!exact_act(cb, ex, tr, x, per_slot ? n_slots : n_rows, k, 0, &row_bytes, &act)) return;
    qxm_args A = {};
    A.w = cw->v;
    A.pd = qr_cuda_plane_desc(w->type);
    A.y = act, A.row_bytes = row_bytes;
    A.n = n, A.n_t = n_slots;
    A.order = ord, A.order_x4 = ord;
    A.ids = ids, A.n_used = n_used, A.per_slot = per_slot;
    /* as the CPU's matmul_id (ops_moe.c): an expert with >= QR_TILED_MIN_ROWS slots over a K-quant that is
     * not repacked takes the tiled GEMM's order */
    if (ord == QX_VEC && tr->vec_dot_tiled && n_slots >= QR_TILED_MIN_ROWS) {
        const int32_t ne = (int32_t)w->ne[2];
        const size_t bytes = (size_t)ne * sizeof(int32_t);
        if (!ensure_scratch(cb, &ex->counts, &ex->counts_cap, bytes, "exact expert counts")) return;
        int32_t *counts = (int32_t *)ex->counts;
        if (!cuda_ok(cb, cudaMemsetAsync(counts, 0, bytes, cb->stream), "exact expert counts")) return;
        qx_expert_counts_kernel<<<blocks_for(n_slots, 256), 256, 0, cb->stream>>>(ids, n_slots, ne, counts);
        if (!cuda_ok(cb, cudaGetLastError(), "exact expert counts")) return;
        A.counts = counts;
    }
    A.bias = b, A.bias_stride = bias ? bias->ne[0] : 0;
    A.out = y;
    cuda_ok(cb, qxm_launch(A, cb->stream), "matmul_id (exact)");
}

/* Routing on the host with the CPU's own function (its softmax tail and sigmoid use libm's expf). */
void cuda_exact_moe_route(qr_backend *be, const float *logits, int64_t n_rows, const qr_moe_route_params *p, int32_t *ids,
                          float *weights) {
    cuda_backend *cb = CB(be);
    const int32_t ne = p->n_expert, k = p->n_used;
    if (ne < 1 || k < 1 || k > ne || ne > 4096 ||
        (p->sel_bias && (p->sel_bias->type != QR_TYPE_F32 || p->sel_bias->ne[0] != ne || !p->sel_bias->host))) {
        raise_error(cb, QR_ERR_INVALID_ARG, "moe_route: bad expert counts or selection bias");
        return;
    }
    if (n_rows <= 0) return;
    if (cb->capturing) { /* fails the capture: the backend then runs op by op */
        raise_error(cb, QR_ERR_UNSUPPORTED, "moe_route (exact): routes on the host, not in a CUDA graph");
        return;
    }
    float *hl = (float *)malloc((size_t)n_rows * ne * 4), *hw = (float *)malloc((size_t)n_rows * k * 4);
    int32_t *hi = (int32_t *)malloc((size_t)n_rows * k * 4);
    cudaError_t e = hl && hw && hi ? cudaSuccess : cudaErrorMemoryAllocation;
    if (e == cudaSuccess) e = cudaStreamSynchronize(cb->stream);
    if (e == cudaSuccess) e = cudaMemcpy(hl, logits, (size_t)n_rows * ne * 4, cudaMemcpyDeviceToHost);
    if (e == cudaSuccess) {
        qr_cpu_moe_route(be, hl, n_rows, p, hi, hw); /* the checks above are its own: it raises nothing */
        e = cudaMemcpy(ids, hi, (size_t)n_rows * k * 4, cudaMemcpyHostToDevice);
    }
    if (e == cudaSuccess) e = cudaMemcpy(weights, hw, (size_t)n_rows * k * 4, cudaMemcpyHostToDevice);
    free(hl);
    free(hw);
    free(hi);
    cuda_ok(cb, e, "moe_route (exact, host)");
}

void cuda_exact_ssm_conv(cuda_backend *cb, const float *x, int64_t x_stride, float *state, const float *w, const float *b,
                         const qr_ssm_params *p, float *out) {
    qx_ssm_conv_kernel<<<blocks_for(p->conv_dim, 64), 64, 0, cb->stream>>>(x, x_stride, state, w, b, cb->d_seq,
                                                                           cb->n_tokens, p->d_conv, p->conv_dim, out);
    cuda_ok(cb, cudaGetLastError(), "ssm_conv (exact)");
}

static float qx_softplus_host(float x) { return x > 20.0f ? x : logf(1.0f + expf(x)); } /* as ops_ssm.c */

void cuda_exact_ssm_scan(cuda_backend *cb, float *state, const float *xbc, const float *dt, int64_t dt_stride,
                         const qr_weight *dt_bias, const qr_weight *A, const float *D, const qr_ssm_params *p, float *y) {
    const int64_t n = (int64_t)cb->n_tokens * p->n_head;
    if (n <= 0) return;
    if (cb->capturing) { /* fails the capture: the backend then runs op by op */
        raise_error(cb, QR_ERR_UNSUPPORTED, "ssm_scan (exact): softplus on the host, not in a CUDA graph");
        return;
    }
    cuda_exact *ex = exact_state(cb);
    if (!ex) return;
    float *h = (float *)malloc((size_t)cb->n_tokens * (size_t)dt_stride * 4 + 2 * (size_t)n * 4);
    if (!h || !A->host || (dt_bias && !dt_bias->host)) {
        free(h);
        raise_error(cb, QR_ERR_NOMEM, "ssm_scan (exact): out of memory or no host copy of A / dt_bias");
        return;
    }
    float *hdt = h, *hv = h + (size_t)cb->n_tokens * (size_t)dt_stride;
    cudaError_t e = cudaStreamSynchronize(cb->stream);
    if (e == cudaSuccess)
        e = cudaMemcpy(hdt, dt, ((size_t)(cb->n_tokens - 1) * (size_t)dt_stride + (size_t)p->n_head) * 4,
                       cudaMemcpyDeviceToHost);
    const float *ah = (const float *)A->host, *bh = dt_bias ? (const float *)dt_bias->host : NULL;
    for (int32_t r = 0; r < cb->n_tokens && e == cudaSuccess; r++)
        for (int32_t hh = 0; hh < p->n_head; hh++) {
            const float d = qx_softplus_host(hdt[(int64_t)r * dt_stride + hh] + (bh ? bh[hh] : 0.0f));
            hv[(int64_t)r * p->n_head + hh] = d;
            hv[n + (int64_t)r * p->n_head + hh] = expf(d * ah[hh]);
        }
    if (e == cudaSuccess &&
        ensure_scratch(cb, &ex->y, &ex->y_cap, 2 * (size_t)n * 4, "exact scan scratch"))
        e = cudaMemcpy(ex->y, hv, 2 * (size_t)n * 4, cudaMemcpyHostToDevice);
    free(h);
    if (!cuda_ok(cb, e, "ssm_scan (exact, host dt)")) return;
    const float *dtv = (const float *)ex->y;
    qx_ssm_scan_kernel<<<blocks_for((int64_t)p->n_head * p->head_dim, 64), 64, 0, cb->stream>>>(
        state, xbc, dtv, dtv + n, D, *p, cb->d_seq, cb->n_tokens, y, cb->diverged_d);
    cuda_ok(cb, cudaGetLastError(), "ssm_scan (exact)");
}

void cuda_exact_ssm_gate_norm(cuda_backend *cb, const float *y, const float *z, int64_t z_stride, const float *w,
                              int64_t n_rows, const qr_ssm_params *p, float eps, float *out) {
    qx_gate_norm_kernel<<<blocks_for(n_rows * p->n_group, 64), 64, 0, cb->stream>>>(y, z, z_stride, w, n_rows, p->d_inner,
                                                                                    p->n_group, eps, out);
    cuda_ok(cb, cudaGetLastError(), "ssm_gate_norm (exact)");
}
