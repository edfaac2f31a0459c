/* attention_short.cu — rope + K/V store + attention of a one-row decode pass over a short context, as one
 * launch: a CTA per (kv head, tile of <= 4 query heads) holds every key of the row in shared memory.
 * Same contract and numerics as the flash-decoding kernels (q rounded to f16, score = scale * softcap(q . k),
 * p = f16(exp(s - M) / L) with the row's final M and L, out = p . V) and the same rope arithmetic as
 * rope.cu (rope_dev.cuh).
 *
 *   1. Before the dependency wait: the cos/sin of the row's position (the last two warps) and, by the other
 *      threads, (kv_early: the keys before the row were complete before the launch, a graph replay) the
 *      cached K and V rows of the span into shared memory by cp.async. After it (or there, otherwise):
 *      the tile's q heads and the new key are rotated from the q/k/v output, q rounded to f16, the new K
 *      and V rows rounded to f16 into shared memory and (first tile) into the cache slot.
 *   2. Scores: warp w takes head w / WH, keys in rounds of KPW * WH, D / 32 lanes a key (32 dims each, the
 *      chunks interleaved so that a step's rows hit different banks; q broadcast from shared memory); the
 *      warp's (max, exp-sum); barrier; each warp merges its head's WH pairs and writes the rounded
 *      probabilities; barrier.
 *   3. p * V: a thread per (key group, 8 dims); warp shuffles, then the 16 warps' sums through shared
 *      memory; the output written and quantized for the output projection (q8_kind 0 or 1).
 * Five block barriers after the wait, against ~12 phases for the cluster kernel; the rope + K/V store
 * kernel before it goes away. The host takes it for one-row passes whose span (in a graph: every key the
 * block table can address, or the window) fits KMAX; 2 query heads a CTA by default (QUARREL_CUDA_ATTN_SHORT_G).
 * H100, session 14: mixtral 8-layer tg128 +4.3 %, tinyllama +16.6 % against the pair it replaces. */
#include "backend/cuda/attention_dev.cuh"
#include "backend/cuda/rope_dev.cuh"

#define SH_THREADS 512
#define SH_WARPS 16
#define SH_LOADERS (SH_THREADS - 64) /* threads that load the slots and issue the copies before the wait */

template <int D> struct sh_cfg {
    static constexpr int KMAX = D == 64 ? 512 : 256; /* keys */
    static constexpr int PITCH = D * 2 + D / 2;      /* bytes per K / V row in shared memory: the rows of a score
                                                      * step's keys start 16 (D 128) or 8 (D 64) banks apart */
    static constexpr size_t BUF = (size_t)KMAX * PITCH;
};

/* dynamic shared memory: K rows (then the warps' partial outputs), V rows, probabilities [G][KMAX], q [G][D],
 * cos/sin [D / 2] */
template <int D, int G> static constexpr size_t sh_smem() {
    return 2 * sh_cfg<D>::BUF + (size_t)G * sh_cfg<D>::KMAX * 4 + (size_t)G * D * 4 + (size_t)D / 2 * 8;
}

template <int D, int G>
static __global__ void __launch_bounds__(SH_THREADS) attn_short_kernel(const cuda_rope_attn_args r, int n_gtiles) {
    typedef sh_cfg<D> C;
    constexpr int KMAX = C::KMAX, PITCH = C::PITCH, CPR = D / 8;
    constexpr int LPK = D / 32, KPW = 32 / LPK; /* score pass: lanes a key (32 dims each), keys a warp */
    constexpr int WH = SH_WARPS / G;            /* warps a head */
    constexpr int R = (KMAX + WH * KPW - 1) / (WH * KPW); /* rounds */
    constexpr int TPR = D / 8, KG = SH_THREADS / TPR; /* p * V: threads per V row, key groups */
    static_assert(SH_WARPS * G * D * 4 <= (int)C::BUF, "partial outputs alias the K rows");
    extern __shared__ __align__(16) uint8_t smem[];
    uint8_t *const kbuf = smem, *const vbuf = smem + C::BUF;
    float(*p_s)[KMAX] = (float(*)[KMAX])(smem + 2 * C::BUF);
    float(*q_s)[D] = (float(*)[D])(smem + 2 * C::BUF + (size_t)G * KMAX * 4);
    float2 *cs_s = (float2 *)(smem + 2 * C::BUF + (size_t)G * KMAX * 4 + (size_t)G * D * 4);
    float(*red_s)[G][D] = (float(*)[G][D])kbuf; /* after the scores */
    __shared__ float st_s[SH_WARPS][2];
    const cuda_attn_args &a = r.a;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int gt = (int)blockIdx.x % n_gtiles, kvh = (int)blockIdx.x / n_gtiles;
    const int group = a.n_head / a.n_head_kv, h0 = kvh * group + gt * G, gn = min(G, group - gt * G);
    const int pos = a.pos[0];
    int first = a.window > 0 ? max(0, pos - a.window + 1) : 0;
    if (pos - first + 1 > KMAX) first = pos - KMAX + 1; /* never: the host keeps every span within KMAX */
    const int nk = pos - first + 1, np = nk - 1;       /* keys; those in the cache already */
    const int32_t *bt = a.block_table + (int64_t)a.seq[0] * a.max_blocks;
    const int64_t kvstride = (int64_t)a.n_head_kv * D; /* halves */
    const __half *kc = (const __half *)a.k_cache + (int64_t)kvh * D;
    const __half *vc = (const __half *)a.v_cache + (int64_t)kvh * D;
    long long *dbg = a.dbg && blockIdx.x == 0 && tid == 0 ? a.dbg : NULL; /* the lab's phase clocks */
#define STAMP(i) \
    if (dbg) dbg[i] = clock64()
    STAMP(0);
    /* the cached keys' slots (one block-table load a key), then their K and V rows by cp.async, by the first
     * SH_LOADERS threads (a named barrier between); meanwhile the last two warps compute the angles (~1k cycles
     * of serial float and double arithmetic a pair: D / 2 <= 64 pairs) */
    int32_t *slot_s = (int32_t *)&p_s[0][0]; /* the probabilities come much later */
    auto issue = [&](int t0, int nt) {
        for (int i = t0; i < np * CPR; i += nt) {
            const int key = i / CPR, ch = i % CPR;
            const int64_t s = slot_s[key];
            cp_async16(kbuf + key * PITCH + ch * 16, kc + s * kvstride + ch * 8);
            cp_async16(vbuf + key * PITCH + ch * 16, vc + s * kvstride + ch * 8);
        }
        cp_async_commit();
    };
    const int half = r.rope.n_rot / 2;
    if (tid < SH_LOADERS) {
        for (int key = tid; key < np; key += SH_LOADERS) {
            const int p = first + key;
            slot_s[key] = bt[p / a.block_size] * a.block_size + p % a.block_size;
        }
        asm volatile("bar.sync 1, %0;" ::"r"(SH_LOADERS) : "memory");
        if (r.kv_early) issue(tid, SH_LOADERS);
    } else if (SH_THREADS - 1 - tid < half) {
        const int i = SH_THREADS - 1 - tid;
        cs_s[i] = rope_cs(i, pos, r.rope, r.ff);
    }
    const int64_t slot = r.slot[0];
    STAMP(1);
    pdl_wait();
    pdl_launch_dependents();
    STAMP(2);
    __syncthreads(); /* slot_s, cs_s */
    if (!r.kv_early) issue(tid, SH_THREADS);

    /* with qn / kn: the RMS norm scale of each head of the tile and of the new key (a warp each; the sum of squares in
     * double, IEEE division and square root, as rmsnorm_kernel and rope_kv_store_heads_kernel round it) */
    __shared__ float nscale_s[G + 1];
    if (r.qn) {
        if (warp <= gn) {
            const float *src = warp < gn ? a.q + (int64_t)(h0 + warp) * a.dk : r.k_new + (int64_t)kvh * D;
            double ss = 0.0;
            for (int i = lane; i < D; i += 32) ss += (double)__fmul_rn(src[i], src[i]);
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
            if (lane == 0) nscale_s[warp] = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn((float)(ss / (double)D), r.norm_eps)));
        }
        __syncthreads();
    }
    /* rope of the tile's q heads (hh < gn) and of the new key (hh == gn), pair by pair */
    const bool neox = r.rope.mode == QR_ROPE_NEOX;
    __half *const knew = (__half *)(kbuf + np * PITCH), *const vnew = (__half *)(vbuf + np * PITCH);
    __half *const kdst = (__half *)a.k_cache + slot * kvstride + (int64_t)kvh * D;
    __half *const vdst = (__half *)a.v_cache + slot * kvstride + (int64_t)kvh * D;
    for (int i = tid; i < (gn + 1) * (D / 2); i += SH_THREADS) {
        const int hh = i / (D / 2), j = i % (D / 2);
        const bool rot = j < half;
        const int da = neox ? (rot ? j : r.rope.n_rot + 2 * (j - half)) : 2 * j;
        const int db = neox && rot ? j + half : da + 1;
        const float *src = hh < gn ? a.q + (int64_t)(h0 + hh) * a.dk : r.k_new + (int64_t)kvh * D;
        float x0 = src[da], x1 = src[db];
        if (r.qn) {
            const float sc = nscale_s[hh], *nw = hh < gn ? r.qn : r.kn;
            x0 = __fmul_rn(__fmul_rn(x0, sc), nw[da]);
            x1 = __fmul_rn(__fmul_rn(x1, sc), nw[db]);
        }
        float ya = x0, yb = x1;
        if (rot) {
            const float2 c = cs_s[j];
            ya = __fsub_rn(__fmul_rn(x0, c.x), __fmul_rn(x1, c.y));
            yb = __fadd_rn(__fmul_rn(x0, c.y), __fmul_rn(x1, c.x));
        }
        if (hh < gn) {
            if (r.q_scale != 1.0f) ya = __fmul_rn(ya, r.q_scale), yb = __fmul_rn(yb, r.q_scale);
            q_s[hh][da] = round_f16(ya);
            q_s[hh][db] = round_f16(yb);
        } else {
            const __half ha = __float2half_rn(ya), hb = __float2half_rn(yb);
            knew[da] = ha, knew[db] = hb;
            if (gt == 0) kdst[da] = ha, kdst[db] = hb;
        }
    }
    if (tid >= SH_THREADS - CPR) { /* the new V row, 8 values a thread */
        const int ch = tid - (SH_THREADS - CPR);
        const float *vs = r.v_new + (int64_t)kvh * D + ch * 8;
        const float4 x0 = *(const float4 *)vs, x1 = *(const float4 *)(vs + 4);
        const __half2 h0_ = __floats2half2_rn(x0.x, x0.y), h1 = __floats2half2_rn(x0.z, x0.w);
        const __half2 h2 = __floats2half2_rn(x1.x, x1.y), h3 = __floats2half2_rn(x1.z, x1.w);
        uint4 o;
        o.x = *(const uint32_t *)&h0_, o.y = *(const uint32_t *)&h1, o.z = *(const uint32_t *)&h2, o.w = *(const uint32_t *)&h3;
        *(uint4 *)(vnew + ch * 8) = o;
        if (gt == 0) *(uint4 *)(vdst + ch * 8) = o;
    }
    STAMP(3);
    cp_async_wait<0>();
    __syncthreads();
    STAMP(4);

    /* scores: warp (head gi, part wj), round i: keys (i * WH + wj) * KPW + kq, LPK lanes a key (dims part kj) */
    const int gi = warp / WH, wj = warp % WH, kq = lane / LPK, kj = lane % LPK;
    const bool live = gi < gn;
    float s[R];
#pragma unroll
    for (int i = 0; i < R; i++) s[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < R; i++) {
        const int key = (i * WH + wj) * KPW + kq;
        if (!live || (i * WH + wj) * KPW >= nk) continue; /* uniform over the warp; no break: s stays in registers */
        if (key < nk) {
            float t = 0.0f;
#pragma unroll
            for (int c = 0; c < 4; c++) { /* chunks interleaved over the key's lanes: no bank conflicts (PITCH) */
                const int ch = kj + LPK * c;
                const float4 qa = *(const float4 *)&q_s[gi][ch * 8], qb = *(const float4 *)&q_s[gi][ch * 8 + 4];
                float kf[8];
                half8_to_f32(*(const uint4 *)(kbuf + key * PITCH + ch * 16), kf);
                t = fmaf(qa.x, kf[0], t), t = fmaf(qa.y, kf[1], t), t = fmaf(qa.z, kf[2], t), t = fmaf(qa.w, kf[3], t);
                t = fmaf(qb.x, kf[4], t), t = fmaf(qb.y, kf[5], t), t = fmaf(qb.z, kf[6], t), t = fmaf(qb.w, kf[7], t);
            }
            s[i] = t;
        }
#pragma unroll
        for (int o = 1; o < LPK; o <<= 1) s[i] += __shfl_xor_sync(0xffffffffu, s[i], o);
    }
    const float inv_cap = a.softcap > 0.0f ? __fdiv_rn(1.0f, a.softcap) : 0.0f;
    float m = -INFINITY;
#pragma unroll
    for (int i = 0; i < R; i++) {
        const int key = (i * WH + wj) * KPW + kq;
        s[i] = live && key < nk ? dec_score(s[i], a, inv_cap) : -INFINITY;
        m = fmaxf(m, s[i]);
    }
    m = warp_max(m);
    float l = 0.0f;
    if (m > -INFINITY && kj == 0)
#pragma unroll
        for (int i = 0; i < R; i++) l += s[i] > -INFINITY ? ggml_expf(s[i] - m) : 0.0f;
    l = warp_sum(l);
    if (lane == 0) st_s[warp][0] = m, st_s[warp][1] = l;
    STAMP(5);
    __syncthreads();
    if (live) { /* the head's M and L from its WH warps, then this warp's probabilities */
        float M = -INFINITY, L = 0.0f;
#pragma unroll
        for (int j = 0; j < WH; j++) M = fmaxf(M, st_s[gi * WH + j][0]);
#pragma unroll
        for (int j = 0; j < WH; j++) {
            const float lj = st_s[gi * WH + j][1];
            if (lj > 0.0f) L += lj * ggml_expf(st_s[gi * WH + j][0] - M);
        }
        if (a.sinks) {
            const float sk = a.sinks[h0 + gi], M2 = fmaxf(M, sk);
            L = (L > 0.0f ? L * ggml_expf(M - M2) : 0.0f) + ggml_expf(sk - M2);
            M = M2;
        }
        const float iL = __frcp_rn(L);
#pragma unroll
        for (int i = 0; i < R; i++) {
            const int key = (i * WH + wj) * KPW + kq;
            if (key < nk && kj == 0) p_s[gi][key] = round_f16(__fmul_rn(ggml_expf(s[i] - M), iL));
        }
    }
    __syncthreads(); /* the probabilities are written; the K rows are free */
    STAMP(6);

    /* p * V: thread (key group kg, dims dc * 8 ..), keys kg, kg + KG, .. */
    const int kg = tid / TPR, dc = tid % TPR;
    float acc[G][8];
#pragma unroll
    for (int g = 0; g < G; g++)
#pragma unroll
        for (int e = 0; e < 8; e++) acc[g][e] = 0.0f;
    for (int key = kg; key < nk; key += KG) {
        float vf[8];
        half8_to_f32(*(const uint4 *)(vbuf + key * PITCH + dc * 16), vf);
#pragma unroll
        for (int g = 0; g < G; g++) {
            const float pv = g < gn ? p_s[g][key] : 0.0f;
#pragma unroll
            for (int e = 0; e < 8; e++) acc[g][e] = fmaf(pv, vf[e], acc[g][e]);
        }
    }
    STAMP(7);
    pv_warp_reduce_store<G, D, TPR>(acc, red_s[warp], lane, dc);
    __syncthreads();
    STAMP(8);

    /* the warps' sums; output and its quantization for the output projection */
    const int64_t base = (int64_t)h0 * D; /* row 0: out[h0 * dv ..] */
    float *const sum_s = &p_s[0][0]; /* the probabilities are spent: Q8_K blocks gather here */
    for (int i = tid; i < gn * D; i += SH_THREADS) { /* whole warps: gn * D is a multiple of 32 */
        const int g = i / D, d = i % D;
        float v = 0.0f;
#pragma unroll
        for (int w = 0; w < SH_WARPS; w++) v += red_s[w][g][d];
        a.out[base + i] = v;
        if (a.q8_kind == 0) act_quant_val32(v, (base + i) / 32, lane, a.q8, a.q8d, a.q8s, a.q8g);
        else if (a.q8_kind == 1) sum_s[i] = v;
    }
    if (a.q8_kind == 1) {
        __syncthreads();
        for (int u = warp; u < gn * D / 256; u += SH_WARPS) {
            float v[8];
#pragma unroll
            for (int e = 0; e < 8; e++) v[e] = sum_s[u * 256 + lane * 8 + e];
            act_quant_vals256(v, base / 256 + u, lane, a.q8, a.q8d, a.q8g);
        }
    }
    STAMP(9);
#undef STAMP
}

extern "C" int32_t qr_cuda_attn_short_keys(int32_t head_dim) {
    return head_dim == 64 ? sh_cfg<64>::KMAX : (head_dim == 128 ? sh_cfg<128>::KMAX : 0);
}

template <int D, int G>
static cudaError_t launch_short(const cuda_rope_attn_args *r, bool pdl, cudaStream_t stream) {
    constexpr size_t SMEM = sh_smem<D, G>();
    static unsigned long long configured = 0; /* a bit per device (function attributes are per context) */
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return e;
    const unsigned long long bit = dev < 64 ? 1ull << dev : 0;
    if (!(configured & bit)) {
        e = cudaFuncSetAttribute(attn_short_kernel<D, G>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM);
        if (e != cudaSuccess) return e;
        configured |= bit;
    }
    const int group = r->a.n_head / r->a.n_head_kv, n_gtiles = (group + G - 1) / G;
    return launch_k(attn_short_kernel<D, G>, dim3((unsigned)(r->a.n_head_kv * n_gtiles)), dim3(SH_THREADS), SMEM, stream,
                    pdl, *r, n_gtiles);
}

/* Query heads a CTA: the group rounded up to a power of two, at most gmax (1, 2 or 4; tiles of the group
 * beyond). */
template <int D>
static cudaError_t launch_short_d(const cuda_rope_attn_args *r, int group, int gmax, bool pdl, cudaStream_t stream) {
    if (group == 1 || gmax == 1) return launch_short<D, 1>(r, pdl, stream);
    if (group == 2 || gmax == 2) return launch_short<D, 2>(r, pdl, stream);
    return launch_short<D, 4>(r, pdl, stream);
}

extern "C" bool qr_cuda_attn_short_supported(const cuda_attn_args *a) {
    const int group = a->n_head_kv > 0 ? a->n_head / a->n_head_kv : 0;
    return a->n_tok == 1 && a->f16 && a->dk == a->dv && qr_cuda_attn_short_keys(a->dk) > 0 && group >= 1 &&
           a->n_head % a->n_head_kv == 0 && a->n_splits == 1;
}

extern "C" cudaError_t qr_cuda_rope_attention(const cuda_rope_attn_args *r, bool pdl, cudaStream_t stream) {
    if (!qr_cuda_attn_short_supported(&r->a) || r->rope.n_rot > r->a.dk || r->rope.n_rot < 2 || r->rope.n_rot % 2 ||
        r->a.q8_kind > 1)
        return cudaErrorInvalidValue;
    const int group = r->a.n_head / r->a.n_head_kv;
    if (r->a.dk == 64) return launch_short_d<64>(r, group, r->gmax, pdl, stream);
    return launch_short_d<128>(r, group, r->gmax, pdl, stream);
}
