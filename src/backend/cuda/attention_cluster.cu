/* attention_cluster.cu — flash-decoding as one launch: the n_splits CTAs of a tile (row, kv head,
 * query-head tile) form a thread-block cluster (Hopper), each taking a contiguous range of <= CL_KMAX
 * keys, and exchange through distributed shared memory what the split kernels of attention_decode.cu
 * exchange through global memory. Same contract and numerics (the CPU oracle's: q rounded to f16,
 * score = scale * softcap(q . k), p = f16(exp(s - M) / L) with the row's final M and L, out = p . V).
 *
 *   1. Before waiting for the previous kernel (programmatic dependent launch): the keys' cache slots
 *      (plan data) into shared memory. After it: K and V rows stream into shared memory with cp.async
 *      (16 bytes a copy, no registers held): one tile of SUPER keys per buffer, two buffers. A CTA with
 *      <= SUPER keys (short contexts) issues all its K and V at once: one memory latency in all; longer
 *      ranges stream K, then V, double-buffered.
 *   2. Scores from shared memory (D / 32 lanes per key, 32 dims each) into sc_s; the CTA's (max,
 *      exp-sum) per head; cluster barrier; every CTA merges the cluster's stats in rank order (the
 *      same M and 1 / L everywhere) and turns its scores into the rounded probabilities.
 *   3. p * V from shared memory (D / 8 threads per V row), reduced over key groups and warps; cluster
 *      barrier; the CTAs sum the cluster's partial outputs in rank order, each for its share of the
 *      quantization blocks, write the output and quantize it for the output projection (q8_kind >= 0);
 *      a last barrier keeps every CTA's shared memory alive until all have read it.
 * CTAs of 8 query heads (GQA groups above 4) run steps 2-3 a warp per head instead (WPH, the kernel's
 * comment): fewer CTA barriers and no cross-warp reduction; tinyllama tg128 +4.5 %, gpt-oss-20b +0-2.5 %
 * (session 11). With 4 heads the thread-wide form stays (WPH measured 0 to -1 % on mistral and mixtral).
 * The phase clocks of CTA 0 of the first and last rank go to a.dbg when the lab asks (cuda_attn_args).
 */
#include "backend/cuda/attention_dev.cuh"

#include <cooperative_groups.h>

#define CL_KMAX 2048 /* keys per CTA */
#define CL_MAX 16    /* CTAs per cluster (above 8: the non-portable cluster sizes of H100) */

/* Keys per shared-memory tile: ~34 KB of K (or V) rows, each padded by 16 bytes so that the lanes of a
 * warp reading 8 different rows hit different banks. */
template <int D, int G_> struct cl_cfg {
    static constexpr int SUPER = D == 64 ? 256 : (D == 128 ? 128 : 64);
    static constexpr int PITCH = D * 2 + 16; /* bytes per row in shared memory */
    static constexpr int G = G_;             /* query heads per CTA: 4 or 8 */
    static constexpr size_t BUF = (size_t)SUPER * PITCH;
    /* dynamic shared memory: two row buffers, scores [G][CL_KMAX], partial outputs [warps][G][D],
     * q [G][D], slots [CL_KMAX] */
    static constexpr size_t SMEM = 2 * BUF + (size_t)G * CL_KMAX * 4 + (size_t)DEC_WARPS * G * D * 4 + (size_t)G * D * 4 +
                                   (size_t)CL_KMAX * 4;
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 /* used by the Hopper-only kernel below */

/* DPL (2, 4 or 8) halves of a V row from shared memory -> floats. */
template <int DPL>
static __device__ __forceinline__ void wph_vrow(const uint8_t *p, float *vf) {
    if (DPL == 8) {
        half8_to_f32(*(const uint4 *)p, vf);
    } else if (DPL == 4) {
        const uint2 raw = *(const uint2 *)p;
        const float2 v0 = __half22float2(*(const __half2 *)&raw.x), v1 = __half22float2(*(const __half2 *)&raw.y);
        vf[0] = v0.x, vf[1] = v0.y, vf[2 % DPL] = v1.x, vf[3 % DPL] = v1.y;
    } else {
        const float2 v0 = __half22float2(*(const __half2 *)p);
        vf[0] = v0.x, vf[1 % DPL] = v0.y;
    }
}

/* Copies the rows of keys [t * SUPER, ...) (< nk) of one cache (this kv head's columns) into buf. */
template <int D>
static __device__ __forceinline__ void cl_issue(uint8_t *buf, const __half *cache, int64_t stride, const int32_t *slot_s,
                                                int t, int nk) {
    constexpr int CPR = D / 8, SUPER = cl_cfg<D, 4>::SUPER; /* 16-byte chunks per row */
    const int k0 = t * SUPER, n = min(SUPER, nk - k0);
    for (int i = threadIdx.x; i < n * CPR; i += DEC_THREADS) {
        const int key = i / CPR, ch = i % CPR;
        cp_async16(buf + key * cl_cfg<D, 4>::PITCH + ch * 16, cache + (int64_t)slot_s[k0 + key] * stride + ch * 8);
    }
    cp_async_commit();
}

#endif

/* WPH (warp per head): warp w takes query heads w, w + DEC_WARPS, .. through every phase: a lane scores
 * whole keys (all D dims), the merge and the probabilities stay in the warp, and a lane accumulates D / 32
 * dims of p * V over every key of the CTA, so no CTA barrier separates scores, statistics, probabilities
 * and values and no cross-warp reduction follows (otherwise: 4 lanes a key, thread-wide phases). */
template <int D, int GQ, bool WPH>
static __global__ void __launch_bounds__(DEC_THREADS) attn_dec_cluster(const cuda_attn_args a, int n_gtiles) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 /* clusters: Hopper on (the host launches it only there) */
    namespace cg = cooperative_groups;
    typedef cl_cfg<D, GQ> C;
    constexpr int G = C::G, SUPER = C::SUPER, PITCH = C::PITCH;
    constexpr int LPK = D / 32;            /* lanes per key in the score pass: 4 chunks of 8 halves each */
    constexpr int KPR = DEC_THREADS / LPK; /* keys per score round */
    constexpr int TPR = D / 8;             /* threads per V row (8 halves each) */
    constexpr int KG = DEC_THREADS / TPR;  /* key groups of the value pass */
    extern __shared__ __align__(16) uint8_t smem[];
#define buf(i) (smem + (size_t)(i) * C::BUF)
    float(*sc_s)[CL_KMAX] = (float(*)[CL_KMAX])(smem + 2 * C::BUF);
    float(*red_s)[G][D] = (float(*)[G][D])(smem + 2 * C::BUF + (size_t)G * CL_KMAX * 4);
    float *q_s = (float *)(smem + 2 * C::BUF + (size_t)G * CL_KMAX * 4 + (size_t)DEC_WARPS * G * D * 4);
    int32_t *slot_s = (int32_t *)(q_s + G * D);
    __shared__ float st_s[2][G];
    __shared__ float mi_s[2][G];
    cg::cluster_group cl = cg::this_cluster();
    const int cs = (int)cl.num_blocks();
    long long *dbg = a.dbg && blockIdx.x == 0 && threadIdx.x == 0 && (blockIdx.y == 0 || (int)blockIdx.y == cs - 1)
                         ? a.dbg + (blockIdx.y == 0 ? 0 : 16)
                         : NULL;
#define STAMP(i) \
    if (dbg) dbg[i] = clock64()
    STAMP(0);
    const dec_geom g = dec_geometry<G>(a, n_gtiles);
    const int nk = max(0, g.p_end - g.p_begin), ntile = (nk + SUPER - 1) / SUPER;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    for (int i = tid; i < nk; i += DEC_THREADS) slot_s[i] = (int32_t)dec_slot(g, a, g.p_begin + i);
    __syncthreads();
    STAMP(1);
    pdl_enter();
    STAMP(2);
    const int64_t kvstride = (int64_t)a.n_head_kv * D; /* halves */
    const __half *kc = (const __half *)a.k_cache + (int64_t)g.kvh * D;
    const __half *vc = (const __half *)a.v_cache + (int64_t)g.kvh * D;
    if (ntile > 0) cl_issue<D>(buf(0), kc, kvstride, slot_s, 0, nk);
    if (ntile == 1) cl_issue<D>(buf(1), vc, kvstride, slot_s, 0, nk); /* V now too: one latency in all */
    for (int i = tid; i < G * D; i += DEC_THREADS) {
        const int gi = i / D, d = i % D;
        q_s[i] = gi < g.gn ? round_f16(a.q[(g.rh0 + gi) * a.dk + d]) : 0.0f;
    }
    STAMP(3);
    /* scores */
    const float inv_cap = a.softcap > 0.0f ? __fdiv_rn(1.0f, a.softcap) : 0.0f;
    const int kq = tid / LPK, kj = tid % LPK;
    for (int t = 0; t < ntile; t++) {
        if (ntile == 1) cp_async_wait<1>(); /* K; V may still be in flight */
        else if (t + 1 < ntile) {
            cl_issue<D>(buf((t + 1) & 1), kc, kvstride, slot_s, t + 1, nk);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const uint8_t *kb = buf(t & 1);
        const int n = min(SUPER, nk - t * SUPER);
        if (WPH) {
            for (int gi = warp; gi < G; gi += DEC_WARPS) {
                const float *qh = q_s + gi * D;
                for (int kl = lane; kl < n; kl += 32) {
                    const uint8_t *kr = kb + kl * PITCH;
                    float s = 0.0f;
#pragma unroll 4
                    for (int ch = 0; ch < D / 8; ch++) {
                        const uint4 raw = *(const uint4 *)(kr + ch * 16);
                        float kf[8];
                        half8_to_f32(raw, kf);
                        const float4 qa = *(const float4 *)(qh + ch * 8), qb = *(const float4 *)(qh + ch * 8 + 4);
                        s = fmaf(qa.x, kf[0], s), s = fmaf(qa.y, kf[1], s), s = fmaf(qa.z, kf[2], s);
                        s = fmaf(qa.w, kf[3], s), s = fmaf(qb.x, kf[4], s), s = fmaf(qb.y, kf[5], s);
                        s = fmaf(qb.z, kf[6], s), s = fmaf(qb.w, kf[7], s);
                    }
                    sc_s[gi][t * SUPER + kl] = gi < g.gn ? dec_score(s, a, inv_cap) : -INFINITY;
                }
            }
        }
        for (int k0 = 0; k0 < n && !WPH; k0 += KPR) {
            const int kl = k0 + kq;
            float dot[G];
#pragma unroll
            for (int gi = 0; gi < G; gi++) dot[gi] = 0.0f;
            if (kl < n) {
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    const int ch = kj + LPK * c;
                    const uint4 raw = *(const uint4 *)(kb + kl * PITCH + ch * 16);
                    float kf[8];
                    half8_to_f32(raw, kf);
#pragma unroll
                    for (int gi = 0; gi < G; gi++) {
                        const float4 qa = *(const float4 *)(q_s + gi * D + ch * 8);
                        const float4 qb = *(const float4 *)(q_s + gi * D + ch * 8 + 4);
                        float s = dot[gi];
                        s = fmaf(qa.x, kf[0], s), s = fmaf(qa.y, kf[1], s), s = fmaf(qa.z, kf[2], s);
                        s = fmaf(qa.w, kf[3], s), s = fmaf(qb.x, kf[4], s), s = fmaf(qb.y, kf[5], s);
                        s = fmaf(qb.z, kf[6], s), s = fmaf(qb.w, kf[7], s);
                        dot[gi] = s;
                    }
                }
            }
#pragma unroll
            for (int gi = 0; gi < G; gi++)
#pragma unroll
                for (int o = 1; o < LPK; o <<= 1) dot[gi] += __shfl_xor_sync(0xffffffffu, dot[gi], o);
            if (kl < n && kj == 0) {
#pragma unroll
                for (int gi = 0; gi < G; gi++)
                    sc_s[gi][t * SUPER + kl] = gi < g.gn ? dec_score(dot[gi], a, inv_cap) : -INFINITY;
            }
        }
        __syncthreads(); /* the buffer is refilled two tiles later */
    }
    STAMP(4);
    /* this CTA's (max, exp-sum) per head (WPH: the warp's own scores; the tile loop's barrier made them visible) */
    for (int gi = warp; gi < G; gi += DEC_WARPS) {
        float m = -INFINITY, l = 0.0f;
        if (gi < g.gn) {
            for (int i = lane; i < nk; i += 32) m = fmaxf(m, sc_s[gi][i]);
            m = warp_max(m);
            if (m > -INFINITY)
                for (int i = lane; i < nk; i += 32) l += ggml_expf(sc_s[gi][i] - m);
            l = warp_sum(l);
        }
        if (lane == 0) st_s[0][gi] = m, st_s[1][gi] = l;
    }
    if (ntile > 1) cl_issue<D>(buf(0), vc, kvstride, slot_s, 0, nk); /* the first V tile during the merge */
    STAMP(5);
    if (cs > 1) cl.sync(); /* one CTA: its own shared memory, a CTA barrier is enough */
    else __syncthreads();
    STAMP(6);
    /* the cluster's M and 1 / L per head, merged in rank order by every CTA */
    for (int gi = warp; gi < g.gn; gi += DEC_WARPS) {
        float m = -INFINITY, l = 0.0f;
        if (lane < cs) {
            const float *pst = cl.map_shared_rank(&st_s[0][0], lane);
            m = pst[gi];
            l = pst[G + gi];
        }
        const float M0 = warp_max(m);
        float L = warp_sum(l > 0.0f ? l * __expf(m - M0) : 0.0f), M = M0;
        if (a.sinks) {
            const float sk = a.sinks[g.h0 + gi], M2 = fmaxf(M, sk);
            L = (L > 0.0f ? L * __expf(M - M2) : 0.0f) + __expf(sk - M2);
            M = M2;
        }
        if (lane == 0) mi_s[0][gi] = M, mi_s[1][gi] = (float)(1.0 / (double)L);
        if (WPH) { /* this head's probabilities, by this warp (M and L are the same in every lane) */
            const float iL = (float)(1.0 / (double)L);
            for (int kl = lane; kl < nk; kl += 32) sc_s[gi][kl] = round_f16(__fmul_rn(ggml_expf(sc_s[gi][kl] - M), iL));
        }
    }
    if (!WPH) {
        __syncthreads();
        for (int i = tid; i < G * nk; i += DEC_THREADS) {
            const int gi = i / nk, kl = i % nk;
            sc_s[gi][kl] = gi < g.gn ? round_f16(__fmul_rn(ggml_expf(sc_s[gi][kl] - mi_s[0][gi]), mi_s[1][gi])) : 0.0f;
        }
    }
    STAMP(7);
    /* V tile t has landed in the buffer returned (once every thread passed a barrier after this call): a
     * single tile came with K; else tile t + 1 is issued first */
    auto v_tile = [&](int t) -> const uint8_t * {
        if (ntile == 1) {
            cp_async_wait<0>();
            return buf(1);
        }
        if (t + 1 < ntile) {
            cl_issue<D>(buf((t + 1) & 1), vc, kvstride, slot_s, t + 1, nk);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        return buf(t & 1);
    };
    if (WPH) {
        /* p * V: lane l of warp w holds dims l * DPL .. of heads w, w + DEC_WARPS, .. over every key */
        constexpr int DPL = D / 32, HPW = (G + DEC_WARPS - 1) / DEC_WARPS;
        float acc[HPW][DPL];
#pragma unroll
        for (int h = 0; h < HPW; h++)
#pragma unroll
            for (int e = 0; e < DPL; e++) acc[h][e] = 0.0f;
        for (int t = 0; t < ntile; t++) {
            const uint8_t *vb = v_tile(t);
            __syncthreads(); /* the tile has landed (every warp reads every row) */
            const int n = min(SUPER, nk - t * SUPER);
            /* four keys a step: their rows and probabilities are loaded before the FMAs (one shared-memory
             * latency per step); each lane's sums stay in key order */
            int kl = 0;
            for (; kl + 4 <= n; kl += 4) {
                float v[4][DPL], pk[HPW][4];
#pragma unroll
                for (int j = 0; j < 4; j++) wph_vrow<DPL>(vb + (kl + j) * PITCH + lane * DPL * 2, v[j]);
#pragma unroll
                for (int h = 0; h < HPW; h++) {
                    const int gi = warp + h * DEC_WARPS;
#pragma unroll
                    for (int j = 0; j < 4; j++) pk[h][j] = gi < g.gn ? sc_s[gi][t * SUPER + kl + j] : 0.0f;
                }
#pragma unroll
                for (int j = 0; j < 4; j++)
#pragma unroll
                    for (int h = 0; h < HPW; h++)
#pragma unroll
                        for (int e = 0; e < DPL; e++) acc[h][e] = fmaf(pk[h][j], v[j][e], acc[h][e]);
            }
            for (; kl < n; kl++) {
                float v0[DPL];
                wph_vrow<DPL>(vb + kl * PITCH + lane * DPL * 2, v0);
#pragma unroll
                for (int h = 0; h < HPW; h++) {
                    const int gi = warp + h * DEC_WARPS;
                    const float p0 = gi < g.gn ? sc_s[gi][t * SUPER + kl] : 0.0f;
#pragma unroll
                    for (int e = 0; e < DPL; e++) acc[h][e] = fmaf(p0, v0[e], acc[h][e]);
                }
            }
            __syncthreads();
        }
        STAMP(8);
#pragma unroll
        for (int h = 0; h < HPW; h++) {
            const int gi = warp + h * DEC_WARPS;
            if (gi < G)
#pragma unroll
                for (int e = 0; e < DPL; e++) red_s[0][gi][lane * DPL + e] = acc[h][e];
        }
    } else {
        /* p * V: thread (key group, 8 dims), keys kgi, kgi + KG, ... of each tile */
        const int kgi = tid / TPR, dc = tid % TPR;
        float acc[G][8];
#pragma unroll
        for (int gi = 0; gi < G; gi++)
#pragma unroll
            for (int e = 0; e < 8; e++) acc[gi][e] = 0.0f;
        for (int t = 0; t < ntile; t++) {
            const uint8_t *vb = v_tile(t);
            __syncthreads(); /* the tile has landed (and, first time round, every probability is written) */
            const int n = min(SUPER, nk - t * SUPER);
            for (int kl = kgi; kl < n; kl += KG) {
                const uint4 raw = *(const uint4 *)(vb + kl * PITCH + dc * 16);
                float vf[8];
                half8_to_f32(raw, vf);
#pragma unroll
                for (int gi = 0; gi < G; gi++) {
                    const float pv = sc_s[gi][t * SUPER + kl];
#pragma unroll
                    for (int e = 0; e < 8; e++) acc[gi][e] = fmaf(pv, vf[e], acc[gi][e]);
                }
            }
            __syncthreads();
        }
        STAMP(8);
        /* reduce the key groups: inside the warp, then across the warps */
        pv_warp_reduce_store<G, D, TPR>(acc, red_s[warp], lane, dc);
        __syncthreads();
        for (int i = tid; i < G * D; i += DEC_THREADS) {
            const int gi = i / D, d = i % D;
            float sum = 0.0f;
#pragma unroll
            for (int w = 0; w < DEC_WARPS; w++) sum += red_s[w][gi][d];
            red_s[0][gi][d] = sum;
        }
    }
    STAMP(9);
    if (cs > 1) cl.sync();
    else __syncthreads();
    STAMP(10);
    /* the cluster's sum, block by block (32 or 256 values: the quantization blocks), blocks spread
     * over the ranks and their warps */
    const int rank = (int)cl.block_rank();
    float *const part0 = &red_s[0][0][0];
    const int64_t base = g.rh0 * D;
    if (a.q8_kind == 1) {
        const int nu = g.gn * D / 256;
        for (int u = rank + cs * warp; u < nu; u += cs * DEC_WARPS) {
            const int f = u * 256 + lane * 8;
            float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            for (int r = 0; r < cs; r++) {
                const float *pr = cl.map_shared_rank(part0, r);
                const float4 x0 = *(const float4 *)(pr + f), x1 = *(const float4 *)(pr + f + 4);
                v[0] += x0.x, v[1] += x0.y, v[2] += x0.z, v[3] += x0.w, v[4] += x1.x, v[5] += x1.y, v[6] += x1.z,
                    v[7] += x1.w;
            }
            *(float4 *)(a.out + base + f) = make_float4(v[0], v[1], v[2], v[3]);
            *(float4 *)(a.out + base + f + 4) = make_float4(v[4], v[5], v[6], v[7]);
            act_quant_vals256(v, base / 256 + u, lane, a.q8, a.q8d, a.q8g);
        }
    } else {
        const int nu = (g.gn * D + 31) / 32;
        for (int u = rank + cs * warp; u < nu; u += cs * DEC_WARPS) {
            const int f = u * 32 + lane;
            float v = 0.0f;
            if (f < g.gn * D)
                for (int r = 0; r < cs; r++) v += cl.map_shared_rank(part0, r)[f];
            if (f < g.gn * D) a.out[base + f] = v;
            if (a.q8_kind == 0) act_quant_val32(v, base / 32 + u, lane, a.q8, a.q8d, a.q8s, a.q8g);
        }
    }
    STAMP(11);
    if (cs > 1) cl.sync(); /* keep this CTA's shared memory alive until the cluster has read it */
    STAMP(12);
#undef STAMP
#undef buf
#endif
}

template <int D, int G, bool WPH>
static cudaError_t launch_cluster(const cuda_attn_args *a, bool pdl, cudaStream_t stream) {
    typedef cl_cfg<D, G> C;
    static unsigned long long configured = 0; /* per instantiation: a bit per device (function attributes are
                                               * per device context) */
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return e;
    const unsigned long long bit = dev < 64 ? 1ull << dev : 0;
    if (!(configured & bit)) {
        e = cudaFuncSetAttribute(attn_dec_cluster<D, G, WPH>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)C::SMEM);
        if (e == cudaSuccess) e = cudaFuncSetAttribute(attn_dec_cluster<D, G, WPH>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
        if (e != cudaSuccess) return e;
        configured |= bit;
    }
    const int group = a->n_head / a->n_head_kv, n_gtiles = (group + C::G - 1) / C::G;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)((int64_t)a->n_tok * a->n_head_kv * n_gtiles), (unsigned)a->n_splits);
    cfg.blockDim = dim3(DEC_THREADS);
    cfg.dynamicSmemBytes = C::SMEM;
    cfg.stream = stream;
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 1;
    attr[0].val.clusterDim.y = (unsigned)a->n_splits;
    attr[0].val.clusterDim.z = 1;
    attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 2 : 1;
    return cudaLaunchKernelEx(&cfg, attn_dec_cluster<D, G, WPH>, *a, n_gtiles);
}

extern "C" cudaError_t qr_cuda_attention_cluster(const cuda_attn_args *a, bool pdl, cudaStream_t stream) {
    if (a->n_splits < 1 || a->n_splits > CL_MAX || !a->f16 || a->dk != a->dv) return cudaErrorInvalidValue;
    const bool g4 = a->n_head / a->n_head_kv <= 4; /* smaller GQA groups: 4 heads per CTA, no idle half */
    /* 8 heads a CTA: a warp per head (WPH; tinyllama tg128 +5 %); 4: thread-wide phases (WPH measured 0 to -1 %
     * on mistral / mixtral) */
    if (a->dk == 64) return g4 ? launch_cluster<64, 4, false>(a, pdl, stream) : launch_cluster<64, 8, true>(a, pdl, stream);
    if (a->dk == 128) return g4 ? launch_cluster<128, 4, false>(a, pdl, stream) : launch_cluster<128, 8, true>(a, pdl, stream);
    if (a->dk == 256) return launch_cluster<256, 4, false>(a, pdl, stream);
    return cudaErrorInvalidValue;
}

/* Splits: about keys_per_cta (default 64) keys per CTA, up to 8 CTAs; spans above 2048 keys go to the global-memory split
 * kernels (measured on H100, mistral shapes, one row: cluster / split kernels 13.1 / 20.8 us at 64
 * keys, 14.4 / 27.0 at 512, 41.5 / 38.5 at 4096, 142.6 / 74.1 at 16384 with 16 CTAs per cluster). */
extern "C" int qr_cuda_attn_cluster_splits(int64_t span, int32_t forced, int32_t keys_per_cta) {
    if (forced > 0) return forced <= CL_MAX && span <= (int64_t)forced * CL_KMAX ? forced : 0;
    if (span > 2048) return 0;
    const int64_t kpc = keys_per_cta > 0 ? keys_per_cta : 64;
    const int64_t ns = (span + kpc - 1) / kpc;
    return ns < 1 ? 1 : (ns > 8 ? 8 : (int)ns);
}
