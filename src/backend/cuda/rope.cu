/* rope.cu — rotary embedding in place on x[n_tok][n_head][head_dim], normal (adjacent pairs) and NeoX
 * (halves) modes, with frequency factors and YaRN, and the fused decode op rope(q) + rope(k) + K/V cache
 * store. One CTA per token row: the first n_rot / 2 threads
 * build the row's cos/sin table in shared memory with the CPU's float formula (theta iterated by
 * repeated multiplication, cos/sin through double so fast-math does not approximate them), then all
 * threads rotate the pairs of every head with separately rounded multiplies and adds. */
#include "backend/cuda/rope_dev.cuh"

#define ROPE_THREADS 256

/* Fills cs[2i], cs[2i + 1] = cos, sin of pair i's angle at position p (threads of the CTA split the pairs). */
static __device__ __forceinline__ void rope_table(float *cs, int32_t p, const cuda_rope_consts &c, const float *ff) {
    for (int i = threadIdx.x; i < c.n_rot / 2; i += blockDim.x) {
        const float2 v = rope_cs(i, p, c, ff);
        cs[2 * i] = v.x;
        cs[2 * i + 1] = v.y;
    }
    __syncthreads();
}

/* Rotates pair p (of n_head * n_rot / 2) of the row xr in place; returns the two rotated values and
 * their indices in the row. */
static __device__ __forceinline__ void rope_pair(float *xr, int p, int32_t head_dim, const float *cs,
                                                 const cuda_rope_consts &c, int64_t *ia, int64_t *ib, float *ya,
                                                 float *yb) {
    const int half = c.n_rot / 2;
    const int h = p / half, i = p % half;
    const int a = c.mode == QR_ROPE_NEOX ? i : 2 * i;
    const int b = c.mode == QR_ROPE_NEOX ? i + half : 2 * i + 1;
    *ia = (int64_t)h * head_dim + a;
    *ib = (int64_t)h * head_dim + b;
    const float co = cs[2 * i], si = cs[2 * i + 1];
    const float x0 = xr[*ia], x1 = xr[*ib];
    *ya = __fsub_rn(__fmul_rn(x0, co), __fmul_rn(x1, si));
    *yb = __fadd_rn(__fmul_rn(x0, si), __fmul_rn(x1, co));
    xr[*ia] = *ya;
    xr[*ib] = *yb;
}

static __global__ void rope_kernel(float *x, int32_t n_head, int32_t head_dim, const int32_t *__restrict__ pos,
                                   const cuda_rope_consts c, const float *__restrict__ ff) {
    extern __shared__ float cs[]; /* [n_rot] cos, sin pairs */
    const int r = blockIdx.x;
    rope_table(cs, pos[r], c, ff);
    float *xr = x + (int64_t)r * n_head * head_dim;
    const int n_pairs = n_head * (c.n_rot / 2);
    for (int p = threadIdx.x; p < n_pairs; p += blockDim.x) {
        int64_t ia, ib;
        float ya, yb;
        rope_pair(xr, p, head_dim, cs, c, &ia, &ib, &ya, &yb);
    }
}

/* rope of q [n_tok][n_head][hd] and k [n_tok][n_head_kv][hd] in place, then row r of k and v written
 * to cache slot slots[r] (as qr_cuda_kv_store), one CTA per token row. */
template <bool F16>
static __global__ void rope_kv_store_kernel(float *q, float *k, const float *__restrict__ v, int32_t n_head,
                                            int32_t n_head_kv, int32_t head_dim, int32_t v_dim,
                                            const int32_t *__restrict__ pos, const int32_t *__restrict__ slots,
                                            const cuda_rope_consts c, const float *__restrict__ ff, void *k_cache,
                                            void *v_cache, float q_scale) {
    extern __shared__ float cs[];
    pdl_enter();
    const int r = blockIdx.x;
    rope_table(cs, pos[r], c, ff);
    const int half = c.n_rot / 2;
    float *qr = q + (int64_t)r * n_head * head_dim;
    for (int p = threadIdx.x; p < n_head * half; p += blockDim.x) {
        int64_t ia, ib;
        float ya, yb;
        rope_pair(qr, p, head_dim, cs, c, &ia, &ib, &ya, &yb);
    }
    if (q_scale != 1.0f) { /* then q *= q_scale, every value (the scale op's rounding) */
        __syncthreads();
        for (int64_t i = threadIdx.x; i < (int64_t)n_head * head_dim; i += blockDim.x) qr[i] = __fmul_rn(qr[i], q_scale);
    }
    const int64_t k_dim = (int64_t)n_head_kv * head_dim, s = slots[r];
    float *kr = k + (int64_t)r * k_dim;
    const float *vr = v + (int64_t)r * v_dim;
    /* k: the rotated pairs, then (n_rot < head_dim) the untouched tail of each head */
    for (int p = threadIdx.x; p < n_head_kv * half; p += blockDim.x) {
        int64_t ia, ib;
        float ya, yb;
        rope_pair(kr, p, head_dim, cs, c, &ia, &ib, &ya, &yb);
        if (F16) {
            ((__half *)k_cache)[s * k_dim + ia] = __float2half_rn(ya);
            ((__half *)k_cache)[s * k_dim + ib] = __float2half_rn(yb);
        } else {
            ((float *)k_cache)[s * k_dim + ia] = ya;
            ((float *)k_cache)[s * k_dim + ib] = yb;
        }
    }
    if (c.n_rot < head_dim) {
        const int rest = head_dim - c.n_rot;
        for (int i = threadIdx.x; i < n_head_kv * rest; i += blockDim.x) {
            const int64_t e = (int64_t)(i / rest) * head_dim + c.n_rot + i % rest;
            if (F16) ((__half *)k_cache)[s * k_dim + e] = __float2half_rn(kr[e]);
            else ((float *)k_cache)[s * k_dim + e] = kr[e];
        }
    }
    for (int i = threadIdx.x; i < v_dim; i += blockDim.x) {
        if (F16) ((__half *)v_cache)[s * v_dim + i] = __float2half_rn(vr[i]);
        else ((float *)v_cache)[s * v_dim + i] = vr[i];
    }
}

/* rope_kv_store_kernel for decode-sized passes: CTA (row, unit) where units [0, n_head) are q heads,
 * [n_head, n_head + n_head_kv) k heads (rotated, then stored in the cache), the rest slices of v (8
 * values per thread). A thread owns one rotated pair: it loads the pair, computes its own angle (no
 * shared table, no barrier; the position and factors are read before waiting for the previous
 * kernel), rotates and stores. Same arithmetic as rope_kv_store_kernel. With qn / kn (per-head RMS norm weights
 * [head_dim], qwen3 / gemma3): each q / k head first normed as rmsnorm_kernel rounds it (its sum of squares in double,
 * IEEE division and square root, (x * scale) * w), in place. */
/* q / k / v as the split-K parts of their GEMM (PARTS): p + s * stride is split s's copy of the matrix's [n_tok][n] output,
 * summed in split order as dq_reduce_multi_kernel sums them (4 loads in flight). */
struct rope_parts {
    const float *q, *k, *v;
    int32_t splits;
    int64_t stride;
};
static __device__ __forceinline__ float parts_sum(const float *p, int32_t splits, int64_t stride) {
    float s = p[0];
    for (int p0 = 1; p0 < splits; p0 += 4) {
        float c[4];
#pragma unroll
        for (int u = 0; u < 4; u++) c[u] = p0 + u < splits ? p[(int64_t)(p0 + u) * stride] : 0.0f;
#pragma unroll
        for (int u = 0; u < 4; u++)
            if (p0 + u < splits) s += c[u];
    }
    return s;
}
static __device__ __forceinline__ float4 parts_sum4(const float *p, int32_t splits, int64_t stride) {
    float4 s = *(const float4 *)p;
    for (int p0 = 1; p0 < splits; p0 += 4) {
        float4 c[4];
#pragma unroll
        for (int u = 0; u < 4; u++)
            if (p0 + u < splits) c[u] = *(const float4 *)(p + (int64_t)(p0 + u) * stride);
#pragma unroll
        for (int u = 0; u < 4; u++)
            if (p0 + u < splits) s.x += c[u].x, s.y += c[u].y, s.z += c[u].z, s.w += c[u].w;
    }
    return s;
}

template <bool F16, bool PARTS = false>
static __global__ void __launch_bounds__(128) rope_kv_store_heads_kernel(
    float *q, float *k, const float *__restrict__ v, int32_t n_head, int32_t n_head_kv, int32_t head_dim, int32_t v_dim,
    const int32_t *__restrict__ pos, const int32_t *__restrict__ slots, const cuda_rope_consts c,
    const float *__restrict__ ff, void *k_cache, void *v_cache, float q_scale, const float *__restrict__ qn,
    const float *__restrict__ kn, float eps, const rope_parts pp = rope_parts{}) {
    const int r = blockIdx.x, u = blockIdx.y, half = c.n_rot / 2;
    const int64_t k_dim = (int64_t)n_head_kv * head_dim;
    const int64_t s = slots[r];
    if (u >= n_head + n_head_kv) { /* v slice */
        pdl_enter();
        const int64_t i0 = ((int64_t)(u - n_head - n_head_kv) * blockDim.x + threadIdx.x) * 8;
        if (i0 >= v_dim) return;
        const float *vr = v + (int64_t)r * v_dim + i0;
        if (PARTS) { /* v's sums first, written to v as the reduction would */
            const float *src = pp.v + (int64_t)r * v_dim + i0;
            float *vw = (float *)vr;
            if (i0 + 8 <= v_dim && v_dim % 8 == 0) {
                *(float4 *)vw = parts_sum4(src, pp.splits, pp.stride);
                *(float4 *)(vw + 4) = parts_sum4(src + 4, pp.splits, pp.stride);
            } else {
                for (int64_t i = 0; i < 8 && i0 + i < v_dim; i++) vw[i] = parts_sum(src + i, pp.splits, pp.stride);
            }
        }
        if (i0 + 8 <= v_dim && v_dim % 8 == 0) {
            const float4 a = *(const float4 *)vr, b = *(const float4 *)(vr + 4);
            if (F16) {
                const __half2 h0 = __floats2half2_rn(a.x, a.y), h1 = __floats2half2_rn(a.z, a.w);
                const __half2 h2 = __floats2half2_rn(b.x, b.y), h3 = __floats2half2_rn(b.z, b.w);
                uint4 o;
                o.x = *(const uint32_t *)&h0, o.y = *(const uint32_t *)&h1, o.z = *(const uint32_t *)&h2,
                o.w = *(const uint32_t *)&h3;
                *(uint4 *)((__half *)v_cache + s * v_dim + i0) = o;
            } else {
                float *o = (float *)v_cache + s * v_dim + i0;
                *(float4 *)o = a;
                *(float4 *)(o + 4) = b;
            }
        } else {
            for (int64_t i = i0; i < i0 + 8 && i < v_dim; i++) {
                if (F16) ((__half *)v_cache)[s * v_dim + i] = __float2half_rn(v[(int64_t)r * v_dim + i]);
                else ((float *)v_cache)[s * v_dim + i] = v[(int64_t)r * v_dim + i];
            }
        }
        return;
    }
    const bool is_k = u >= n_head;
    const int h = is_k ? u - n_head : u;
    float2 cs[2];
    rope_head_cs(cs, pos[r], half, c, ff);
    pdl_enter();
    float *xr = (is_k ? k + (int64_t)r * k_dim : q + (int64_t)r * n_head * head_dim) + (int64_t)h * head_dim;
    if (PARTS) { /* the head's sums first, written in place as the reduction would (the pairs are other threads') */
        const float *src = (is_k ? pp.k + (int64_t)r * k_dim : pp.q + (int64_t)r * n_head * head_dim) + (int64_t)h * head_dim;
        for (int i = threadIdx.x; i < head_dim; i += blockDim.x) xr[i] = parts_sum(src + i, pp.splits, pp.stride);
        __syncthreads();
    }
    const float *nw = is_k ? kn : qn;
    if (nw) { /* the head's RMS norm first (the whole CTA: uniform) */
        __shared__ double sh[32];
        double ss = 0.0;
        for (int i = threadIdx.x; i < head_dim; i += blockDim.x) ss += (double)__fmul_rn(xr[i], xr[i]);
        ss = block_sum_d(ss, sh);
        const float scale = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn((float)(ss / (double)head_dim), eps)));
        for (int i = threadIdx.x; i < head_dim; i += blockDim.x) xr[i] = __fmul_rn(__fmul_rn(xr[i], scale), nw[i]);
        __syncthreads(); /* the pairs below are other threads' values */
    }
    rope_head_rotate(xr, cs, half, c, [&](int a, int b, float ya, float yb) {
        if (!is_k) {
            if (q_scale != 1.0f) xr[a] = __fmul_rn(ya, q_scale), xr[b] = __fmul_rn(yb, q_scale);
            return;
        }
        const int64_t e = s * k_dim + (int64_t)h * head_dim;
        if (F16) {
            ((__half *)k_cache)[e + a] = __float2half_rn(ya);
            ((__half *)k_cache)[e + b] = __float2half_rn(yb);
        } else {
            ((float *)k_cache)[e + a] = ya;
            ((float *)k_cache)[e + b] = yb;
        }
    });
    if (!is_k && q_scale != 1.0f) /* q's tail past the rotated pairs, scaled too */
        for (int i = c.n_rot + threadIdx.x; i < head_dim; i += blockDim.x) xr[i] = __fmul_rn(xr[i], q_scale);
    if (is_k && c.n_rot < head_dim) { /* the untouched tail of the head */
        const int64_t e = s * k_dim + (int64_t)h * head_dim;
        for (int i = c.n_rot + threadIdx.x; i < head_dim; i += blockDim.x) {
            if (F16) ((__half *)k_cache)[e + i] = __float2half_rn(xr[i]);
            else ((float *)k_cache)[e + i] = xr[i];
        }
    }
}

extern "C" bool qr_cuda_rope_qk_norm_supported(int32_t n_tok, int32_t n_head, int32_t n_head_kv, int32_t n_rot) {
    return n_tok <= 8 && n_rot / 2 <= 256 && n_head + n_head_kv < 60000; /* the heads kernel's passes */
}

extern "C" cudaError_t qr_cuda_rope_kv_store(float *q, float *k, const float *v, int32_t n_tok, int32_t n_head,
                                            int32_t n_head_kv, int32_t head_dim, int32_t v_dim, const int32_t *pos,
                                            const int32_t *slots, const cuda_rope_consts *c, const float *freq_factors,
                                            void *k_cache, void *v_cache, bool f16, float q_scale, const float *qn,
                                            const float *kn, float eps, int32_t heads_rows, const float *part,
                                            int32_t splits, int64_t part_stride, bool pdl, cudaStream_t stream) {
    if (n_tok <= 0) return cudaSuccess;
    const size_t sm = (size_t)c->n_rot * sizeof(float);
    if ((qn || kn) && !qr_cuda_rope_qk_norm_supported(n_tok, n_head, n_head_kv, c->n_rot)) return cudaErrorInvalidValue;
    /* decode and small batches: a CTA a (row, head) (at 64 rows on the H200 the CTA-a-row kernel took ~6.5 us: 64 CTAs) */
    const bool heads = (n_tok <= 8 || n_tok <= heads_rows) && c->n_rot / 2 <= 256 && n_head + n_head_kv < 60000 &&
                       n_tok <= 65535;
    if (part && (!heads || splits < 1 || part_stride < (int64_t)n_tok * ((n_head + n_head_kv) * (int64_t)head_dim + v_dim)))
        return cudaErrorInvalidValue;
    if (heads) {
        const int vs = (int)((v_dim + 8 * 128 - 1) / (8 * 128));
        const dim3 grid((unsigned)n_tok, (unsigned)(n_head + n_head_kv + vs));
        if (part) { /* q / k / v still in their GEMM's split-K parts: [n_tok][q | k | v] blocks of each split */
            rope_parts pp;
            pp.q = part;
            pp.k = part + (int64_t)n_tok * n_head * head_dim;
            pp.v = pp.k + (int64_t)n_tok * n_head_kv * head_dim;
            pp.splits = splits;
            pp.stride = part_stride;
            return launch_k(f16 ? rope_kv_store_heads_kernel<true, true> : rope_kv_store_heads_kernel<false, true>, grid,
                            dim3(128), 0, stream, pdl, q, k, v, n_head, n_head_kv, head_dim, v_dim, pos, slots, *c,
                            freq_factors, k_cache, v_cache, q_scale, qn, kn, eps, pp);
        }
        return launch_k(f16 ? rope_kv_store_heads_kernel<true> : rope_kv_store_heads_kernel<false>, grid, dim3(128), 0,
                        stream, pdl, q, k, v, n_head, n_head_kv, head_dim, v_dim, pos, slots, *c, freq_factors, k_cache,
                        v_cache, q_scale, qn, kn, eps, rope_parts{});
    }
    return launch_k(f16 ? rope_kv_store_kernel<true> : rope_kv_store_kernel<false>, dim3((unsigned)n_tok),
                    dim3(ROPE_THREADS), sm, stream, pdl, q, k, v, n_head, n_head_kv, head_dim, v_dim, pos, slots, *c,
                    freq_factors, k_cache, v_cache, q_scale);
}

extern "C" cudaError_t qr_cuda_rope(float *x, int32_t n_tok, int32_t n_head, int32_t head_dim, const int32_t *pos,
                                    const cuda_rope_consts *c, const float *freq_factors, cudaStream_t stream) {
    if (n_tok <= 0) return cudaSuccess;
    rope_kernel<<<(unsigned)n_tok, ROPE_THREADS, (size_t)c->n_rot * sizeof(float), stream>>>(x, n_head, head_dim, pos,
                                                                                              *c, freq_factors);
    QR_CUDA_CHECK_LAUNCH();
}

/* One cache value: f16 (rounded to nearest) or f32. */
template <bool F16> static __device__ __forceinline__ void cache_put(void *cache, int64_t i, float y) {
    if (F16) ((__half *)cache)[i] = __float2half_rn(y);
    else ((float *)cache)[i] = y;
}

/* mla_prep (deepseek2): CTA (row r, unit u). Unit 0: the cached row: c = kv_a[r][0, R) normed as rmsnorm_kernel
 * rounds it (sum of squares in double, IEEE division and square root, (c * scale) * w), stored as the V row and as
 * the K row's first R values, and pe = kv_a[r][R, R + dr] roped (one head) into the K row's last dr values. Units
 * 1..H: query head u - 1's rope part, q[r][h][dq - dr ..] roped into q_out[r][h][R ..]. The rope as rope_kernel. */
template <bool F16>
static __global__ void __launch_bounds__(128) mla_prep_kernel(const float *__restrict__ kv_a, const float *__restrict__ q,
                                                              float *q_out, const float *__restrict__ w, float eps, int32_t H,
                                                              int32_t R, int32_t dq, const int32_t *__restrict__ pos,
                                                              const int32_t *__restrict__ slots, const cuda_rope_consts c,
                                                              const float *__restrict__ ff, void *k_cache, void *v_cache) {
    __shared__ double sh[32];
    const int r = blockIdx.x, u = blockIdx.y, half = c.n_rot / 2, dk = R + c.n_rot;
    float2 cs[2];
    rope_head_cs(cs, pos[r], half, c, ff);
    pdl_enter();
    if (u > 0) { /* a query head's rope part */
        const int h = u - 1;
        const float *src = q + ((int64_t)r * H + h) * dq + (dq - c.n_rot);
        float *dst = q_out + ((int64_t)r * H + h) * dk + R;
        rope_head_pairs(src, cs, half, c, [&](int a, int b, float ya, float yb) {
            dst[a] = ya;
            dst[b] = yb;
        });
        return;
    }
    const float *row = kv_a + (int64_t)r * dk;
    const int64_t s = slots[r];
    double sum = 0.0;
    for (int i = threadIdx.x; i < R; i += blockDim.x) sum += (double)__fmul_rn(row[i], row[i]);
    sum = block_sum_d(sum, sh);
    const float scale = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn((float)(sum / (double)R), eps)));
    for (int i = threadIdx.x; i < R; i += blockDim.x) {
        const float y = __fmul_rn(__fmul_rn(row[i], scale), w[i]);
        cache_put<F16>(k_cache, s * dk + i, y);
        cache_put<F16>(v_cache, s * R + i, y);
    }
    rope_head_pairs(row + R, cs, half, c, [&](int a, int b, float ya, float yb) {
        cache_put<F16>(k_cache, s * dk + R + a, ya);
        cache_put<F16>(k_cache, s * dk + R + b, yb);
    });
}

extern "C" cudaError_t qr_cuda_mla_prep(const float *kv_a, const float *q, float *q_out, const float *w, float eps,
                                        int32_t n_tok, int32_t H, int32_t R, int32_t dq, const int32_t *pos,
                                        const int32_t *slots, const cuda_rope_consts *c, const float *freq_factors,
                                        void *k_cache, void *v_cache, bool f16, bool pdl, cudaStream_t stream) {
    if (n_tok <= 0) return cudaSuccess;
    if (c->n_rot / 2 > 256 || H + 1 > 65535 || dq < c->n_rot) return cudaErrorInvalidValue;
    return launch_k(f16 ? mla_prep_kernel<true> : mla_prep_kernel<false>, dim3((unsigned)n_tok, (unsigned)(H + 1)),
                    dim3(128), 0, stream, pdl, kv_a, q, q_out, w, eps, H, R, dq, pos, slots, *c, freq_factors, k_cache,
                    v_cache);
}
