/* topk.cu — the k best logits of each output row, on the GPU (issue 29).
 *
 * A batched decode step of 256 sequences would read 256 x n_vocab floats back (32 MB for a 32,000-token
 * vocabulary, ~1.5 ms over PCIe) and scan them on the host, when greedy decoding needs one token a row and the
 * default sampling chain (top-k 40 first) needs 40 candidates. This kernel finds, per row, the k (<= 64) largest
 * logits in the sampler's total order (value descending, ties: the lower index first, -0 equal to +0), and the
 * row's count of values above -inf (-1 when it holds a NaN or +inf, which the host's sampler reports as an error
 * from the whole row).
 *
 * One CTA a row: a radix select over order-preserving 32-bit keys (4 passes of 8 bits, a shared histogram)
 * finds the k-th largest key T and how many of the keys equal to T are taken; the keys above T are gathered in
 * any order, those equal to T in index order (the lowest indices), then the k are ranked in shared memory.
 * The rows stay in L2 between the passes (128 KB a row).
 */
#include "backend/cuda/cuda_dev.cuh"

#define TK_THREADS 256
#define TK_MAX 64

/* An unsigned key in the order of the floats (-0 as +0; NaN: any key, the row is flagged). */
static __device__ __forceinline__ uint32_t tk_key(float v) {
    const uint32_t u = __float_as_uint(v == 0.0f ? 0.0f : v);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

static __global__ void __launch_bounds__(TK_THREADS)
    topk_kernel(const float *__restrict__ logits, int64_t n, int k, float *__restrict__ vals, int32_t *__restrict__ ids,
                int32_t *__restrict__ n_fin) {
    const int64_t row = blockIdx.x;
    const float *x = logits + row * n;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    __shared__ uint32_t hist[256];
    __shared__ uint32_t s_prefix, s_need, s_gt;
    __shared__ int s_bad, s_fin;
    __shared__ int s_warp[TK_THREADS / 32];
    __shared__ float s_val[TK_MAX];
    __shared__ int32_t s_id[TK_MAX];
    if (tid == 0) s_bad = 0, s_fin = 0, s_gt = 0;
    __syncthreads();
    int bad = 0, fin = 0;
    for (int64_t i = tid; i < n; i += TK_THREADS) {
        const float v = x[i];
        bad |= isnan(v) || v == INFINITY;
        fin += v > -INFINITY;
    }
    bad = __any_sync(0xffffffffu, bad);
    for (int o = 16; o > 0; o >>= 1) fin += __shfl_xor_sync(0xffffffffu, fin, o);
    if (lane == 0) {
        if (bad) atomicOr(&s_bad, 1);
        atomicAdd(&s_fin, fin);
    }
    /* radix select of the k-th largest key */
    uint32_t prefix = 0, mask = 0, need = (uint32_t)k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        hist[tid] = 0;
        __syncthreads();
        for (int64_t i = tid; i < n; i += TK_THREADS) {
            const uint32_t key = tk_key(x[i]);
            if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (tid == 0) {
            uint32_t cum = 0;
            int b = 255;
            for (; b > 0; b--) {
                if (cum + hist[b] >= need) break;
                cum += hist[b];
            }
            s_prefix = prefix | ((uint32_t)b << shift);
            s_need = need - cum;
        }
        __syncthreads();
        prefix = s_prefix;
        need = s_need;
        mask |= 255u << shift;
    }
    /* T = prefix; k - need keys lie above it: gather them, then `need` keys equal to T in index order */
    for (int64_t i = tid; i < n; i += TK_THREADS) {
        const float v = x[i];
        if (tk_key(v) > prefix) {
            const uint32_t slot = atomicAdd(&s_gt, 1u);
            if (slot < TK_MAX) s_val[slot] = v, s_id[slot] = (int32_t)i;
        }
    }
    __syncthreads();
    const uint32_t base = s_gt;
    uint32_t taken = 0;
    for (int64_t c0 = 0; c0 < n && taken < need; c0 += TK_THREADS) {
        const int64_t i = c0 + tid;
        const bool eq = i < n && tk_key(x[i]) == prefix;
        const uint32_t bal = __ballot_sync(0xffffffffu, eq);
        if (lane == 0) s_warp[warp] = __popc(bal);
        __syncthreads();
        uint32_t before = __popc(bal & ((1u << lane) - 1u)), total = 0;
        for (int w = 0; w < TK_THREADS / 32; w++) {
            if (w < warp) before += (uint32_t)s_warp[w];
            total += (uint32_t)s_warp[w];
        }
        const uint32_t slot = base + taken + before;
        if (eq && taken + before < need && slot < TK_MAX) s_val[slot] = x[i], s_id[slot] = (int32_t)i;
        taken += total;
        __syncthreads(); /* s_warp is rewritten next round */
    }
    __syncthreads();
    if (tid < k) { /* rank in the total order */
        const float v = s_val[tid];
        const int32_t id = s_id[tid];
        int r = 0;
        for (int j = 0; j < k; j++) {
            const float w = s_val[j];
            r += w > v || (w == v && s_id[j] < id);
        }
        vals[row * k + r] = v;
        ids[row * k + r] = id;
    }
    if (tid == 0) n_fin[row] = s_bad ? -1 : s_fin;
}

/* k = 1 (greedy rows): the argmax in the same order (ties: the lower index; -0 == +0 compares equal already) and the
 * row's finite count / NaN-or-+inf flag, in one pass over the row with 16-byte loads (the radix select above reads
 * the row five times: ~75 us for 64 rows of 32,000 where this is a few). */
#define AM_THREADS 512
static __device__ __forceinline__ void am_take(float v, int32_t i, float &bv, int32_t &bi, int &bad, int &fin) {
    bad |= isnan(v) || v == INFINITY;
    fin += v > -INFINITY;
    if (v > bv || (v == bv && i < bi)) bv = v, bi = i;
}

static __global__ void __launch_bounds__(AM_THREADS)
    argmax_kernel(const float *__restrict__ logits, int64_t n, float *__restrict__ vals, int32_t *__restrict__ ids,
                  int32_t *__restrict__ n_fin) {
    const int64_t row = blockIdx.x;
    const float *x = logits + row * n;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    float bv = -INFINITY;
    int32_t bi = 0x7fffffff;
    int bad = 0, fin = 0;
    /* the unaligned head (a row of odd length leaves the next row's start off 16 bytes), the float4 body, the tail */
    const int64_t off = (int64_t)((16 - ((uintptr_t)x & 15)) & 15) / 4, head = off < n ? off : n;
    if (tid < head) am_take(x[tid], tid, bv, bi, bad, fin);
    const int64_t n4 = (n - head) / 4;
    const float4 *x4 = (const float4 *)(x + head);
    for (int64_t j = tid; j < n4; j += AM_THREADS) {
        const float4 v = x4[j];
        const int32_t i = (int32_t)(head + 4 * j);
        am_take(v.x, i, bv, bi, bad, fin);
        am_take(v.y, i + 1, bv, bi, bad, fin);
        am_take(v.z, i + 2, bv, bi, bad, fin);
        am_take(v.w, i + 3, bv, bi, bad, fin);
    }
    for (int64_t i = head + 4 * n4 + tid; i < n; i += AM_THREADS) am_take(x[i], (int32_t)i, bv, bi, bad, fin);
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int32_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (ov > bv || (ov == bv && oi < bi)) bv = ov, bi = oi;
        fin += __shfl_xor_sync(0xffffffffu, fin, o);
    }
    bad = __any_sync(0xffffffffu, bad);
    __shared__ float s_v[AM_THREADS / 32];
    __shared__ int32_t s_i[AM_THREADS / 32], s_fin[AM_THREADS / 32], s_bad[AM_THREADS / 32];
    if (lane == 0) s_v[warp] = bv, s_i[warp] = bi, s_fin[warp] = fin, s_bad[warp] = bad;
    __syncthreads();
    if (tid == 0) {
        for (int w = 1; w < AM_THREADS / 32; w++) {
            if (s_v[w] > bv || (s_v[w] == bv && s_i[w] < bi)) bv = s_v[w], bi = s_i[w];
            fin += s_fin[w];
            bad |= s_bad[w];
        }
        if (bi == 0x7fffffff) bi = 0; /* every value -inf or NaN: the lowest index, as the radix select gives */
        vals[row] = x[bi];
        ids[row] = bi;
        n_fin[row] = bad ? -1 : fin;
    }
}

extern "C" cudaError_t qr_cuda_topk_rows(const float *logits, int64_t n_rows, int64_t n, int32_t k, float *vals,
                                         int32_t *ids, int32_t *n_fin, cudaStream_t stream) {
    if (n_rows <= 0) return cudaSuccess;
    if (k < 1 || k > TK_MAX || k > n || n_rows > 0x7fffffff) return cudaErrorInvalidValue;
    if (k == 1 && n <= 0x7fffffff) argmax_kernel<<<(unsigned)n_rows, AM_THREADS, 0, stream>>>(logits, n, vals, ids, n_fin);
    else topk_kernel<<<(unsigned)n_rows, TK_THREADS, 0, stream>>>(logits, n, k, vals, ids, n_fin);
    return cudaGetLastError();
}
