/* check_norm.cpp — runs three decode kernels of the CUDA backend on the host (a CTA = up to 128 std::threads,
 * barriers and warp shuffles through simt.h) against the plain kernels they stand for:
 *   1. rmsnorm_post_vec8_kernel (norm.cu: a post-norm, the residual add and the next pre-norm in one launch, with the
 *      next mat-vec's Q8 codes) against rmsnorm_kernel on b, then rmsnorm_vec8_kernel<ADD> (the backend's two
 *      launches): x, y and every code and scale bit for bit;
 *   2. mla_prep_kernel (rope.cu: deepseek2's cached row and query rope parts) against rmsnorm_kernel and rope_kernel
 *      on copies of the same slices, the cache's f16 (and f32) rows and q_out bit for bit;
 *   3. rope_kv_store_heads_kernel (rope.cu: decode rope + K/V store, a CTA a head) with the per-head q / k norms
 *      (qwen3, gemma3; and gemma3's q scale) against rmsnorm_kernel over rows of head_dim, then the same kernel
 *      without them: q, k and the cache rows bit for bit;
 *   1d. rmsnorm_parts_vec8_kernel (a split-K GEMM's parts summed into b, then the add + norm) against the reduction
 *       and rmsnorm_vec8_kernel<ADD>: b, x, y and the codes bit for bit;
 *   1c. glu_f16_kernel (elementwise.cu: swiglu + down's f16 activations) against ew_kernel then act_q8_as_f16<2>;
 *   1b. the norms' QK 2 form (f16 activations for the batched-decode GEMM) against the norm then act_q8_as_f16<2>;
 *   4. attn_softmax_kernel (attention_gemm.cu: the masked softmax of the GEMM attention) against a double-precision
 *      softmax over the same keys (causal, with and without a window): within 2e-3 relative (f16 output), exactly 0
 *      off the mask.
 * Built and run by tests/cuda/host/run.sh.
 */
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <math.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include "simt.h"
#include "kernel_host.h"
#undef __shared__
#define __shared__ static
#undef __launch_bounds__
#define __launch_bounds__(...)
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
#include "backend/cuda/cuda_dev.cuh"
float __expf(float x) { return expf(x); }
using std::min; using std::max;
#include <algorithm>
#include <vector>
static float g_rope_smem[1024];
#include "backend/cuda/norm_dev.cuh"
#include "backend/cuda/rope_dev.cuh"
#include "backend/cuda/ew_dev.cuh"
#include "norm_kernel.inc"    /* rmsnorm kernels of src/backend/cuda/norm.cu, extracted by run.sh */
#include "ew_kernel.inc"      /* ew_kernel and glu_f16_kernel of src/backend/cuda/elementwise.cu */
#include "rope_kernel.inc"    /* rope_kernel and mla_prep_kernel of src/backend/cuda/rope.cu */
#include "softmax_kernel.inc" /* attn_softmax_kernel of src/backend/cuda/attention_gemm.cu */

static uint64_t rs = 99;
static float frand() { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (float)((rs >> 11) * 0x1p-53 * 2 - 1); }
static int fails = 0;
#define EXPECT(c, ...)                                                                                                  \
    do {                                                                                                                \
        if (!(c)) {                                                                                                     \
            fails++;                                                                                                    \
            printf("FAIL: " __VA_ARGS__);                                                                               \
            printf("\n");                                                                                               \
        }                                                                                                               \
    } while (0)

template <int QK> static void post_norm(int rows, int dim) {
    const float eps = 1e-6f;
    std::vector<float> x(rows * dim), b(rows * dim), bw(dim), w(dim);
    for (auto &v : x) v = frand() * 3;
    for (auto &v : b) v = frand() * 20;
    for (auto &v : bw) v = 1 + frand() * 0.5f;
    for (auto &v : w) v = 1 + frand() * 0.5f;
    const int64_t nb = (int64_t)rows * dim / 32;
    std::vector<float> x1 = x, x2 = x, y1(rows * dim), y2(rows * dim), b2 = b, d1(nb), d2(nb), s1(nb), s2(nb);
    std::vector<int8_t> q1(rows * dim * 2), q2(rows * dim * 2); /* codes, or f16 values (QK 2 / 3) */
    std::vector<int16_t> g1(nb * 2), g2(nb * 2); /* two 16-value sums a 32 block (Q8_0), sixteen a 256 block (Q8_K) */
    const unsigned th = (unsigned)(dim / 8 + 31) / 32 * 32;
    /* the plain launches: b = rmsnorm(b) * bw, then x += b, y = rmsnorm(x) * w (+ codes) */
    host_run_grid(rows, 1, 128, [&] {
        rmsnorm_kernel<false, -1>(b2.data(), NULL, 1.0f, bw.data(), dim, eps, b2.data(), NULL, NULL, NULL, NULL);
    });
    host_run_grid(rows, 1, th, [&] {
        rmsnorm_vec8_kernel<true, QK>(x1.data(), b2.data(), 1.0f, w.data(), dim, eps, y1.data(), q1.data(), d1.data(),
                                      s1.data(), g1.data());
    });
    host_run_grid(rows, 1, th, [&] {
        rmsnorm_post_vec8_kernel<QK>(x2.data(), b.data(), bw.data(), w.data(), dim, eps, y2.data(), q2.data(), d2.data(),
                                     s2.data(), g2.data());
    });
    bool same = !memcmp(x1.data(), x2.data(), x1.size() * 4) && !memcmp(y1.data(), y2.data(), y1.size() * 4);
    if (QK >= 0) {
        const int64_t nbk = QK == 0 ? nb : nb / 8;
        same = same && !memcmp(q1.data(), q2.data(), q1.size()) && !memcmp(d1.data(), d2.data(), nbk * 4);
        same = same && !memcmp(g1.data(), g2.data(), g1.size() * 2);
        if (QK == 0) same = same && !memcmp(s1.data(), s2.data(), nbk * 4);
    }
    printf("post-norm rows %d dim %d codes %d: %s\n", rows, dim, QK, same ? "bit for bit" : "DIFFERENT");
    EXPECT(same, "post-norm rows %d dim %d codes %d differs from rmsnorm + add_rmsnorm", rows, dim, QK);
}

/* QK 2 (the batched-decode GEMM's f16 activations written by the norm; QK 3: the f16 cache + cuBLAS GEMM's, act kind 1):
 * rmsnorm_vec8_kernel<ADD, QK> and rmsnorm_kernel<ADD, QK> against rmsnorm_vec8_kernel<ADD, -1> followed by
 * act_q8_as_f16<kind> (qr_cuda_act_q8_as_f16's kernel) on its y: x, y and every f16 value bit for bit. */
template <int QK> static void norm_f16(int rows, int dim) {
    constexpr int KIND = QK == 3 ? 1 : 2;
    const float eps = 1e-6f;
    std::vector<float> x(rows * dim), b(rows * dim), w(dim);
    for (auto &v : x) v = frand() * 3;
    for (auto &v : b) v = frand() * 2;
    for (auto &v : w) v = 1 + frand() * 0.5f;
    std::vector<float> x0 = x, x1 = x, x2 = x, y0(rows * dim), y1(rows * dim), y2(rows * dim);
    std::vector<__half> h0(rows * dim), h1(rows * dim), h2(rows * dim);
    const unsigned th = (unsigned)(dim / 8 + 31) / 32 * 32;
    host_run_grid(rows, 1, th, [&] {
        rmsnorm_vec8_kernel<true, -1>(x0.data(), b.data(), 1.0f, w.data(), dim, eps, y0.data(), NULL, NULL, NULL, NULL);
    });
    host_run_grid(rows * dim / 256, 1, 32, [&] { act_q8_as_f16<KIND>(y0.data(), blockIdx.x, threadIdx.x, h0.data()); });
    host_run_grid(rows, 1, th, [&] {
        rmsnorm_vec8_kernel<true, QK>(x1.data(), b.data(), 1.0f, w.data(), dim, eps, y1.data(), (int8_t *)h1.data(), NULL, NULL,
                                     NULL);
    });
    host_run_grid(rows, 1, 128, [&] {
        rmsnorm_kernel<true, QK>(x2.data(), b.data(), 1.0f, w.data(), dim, eps, y2.data(), (int8_t *)h2.data(), NULL, NULL, NULL);
    });
    const size_t n = (size_t)rows * dim;
    const bool same = !memcmp(x0.data(), x1.data(), n * 4) && !memcmp(y0.data(), y1.data(), n * 4) &&
                      !memcmp(h0.data(), h1.data(), n * 2) && !memcmp(x0.data(), x2.data(), n * 4) &&
                      !memcmp(y0.data(), y2.data(), n * 4) && !memcmp(h0.data(), h2.data(), n * 2);
    printf("norm + f16 activations (kind %d) rows %d dim %d: %s\n", KIND, rows, dim, same ? "bit for bit" : "DIFFERENT");
    EXPECT(same, "norm with QK %d rows %d dim %d differs from the norm + act_q8_as_f16<%d>", QK, rows, dim, KIND);
}

/* rmsnorm_parts_vec8_kernel<QK> (a split-K GEMM's pending sum added from its parts: the FFN's down projection and the
 * next layer's add + norm, session 39) against the reduction (dq_reduce_kernel's order: part 0, then + part 1, ...) and
 * rmsnorm_vec8_kernel<true, QK>: b, x, y and every code / f16 value bit for bit. */
template <int QK> static void norm_parts(int rows, int dim, int splits) {
    const float eps = 1e-6f;
    const int64_t n = (int64_t)rows * dim, nb = n / 32;
    std::vector<float> x(n), part(n * splits), w(dim);
    for (auto &v : x) v = frand() * 3;
    for (auto &v : part) v = frand() * 0.7f;
    for (auto &v : w) v = 1 + frand() * 0.5f;
    std::vector<float> b0(n), b1(n), x0 = x, x1 = x, y0(n), y1(n), d0(nb), d1(nb), s0(nb), s1(nb);
    std::vector<int8_t> q0(n * 2), q1(n * 2);
    std::vector<int16_t> g0(nb * 2), g1(nb * 2);
    for (int64_t i = 0; i < n; i++) {
        float acc = part[i];
        for (int p = 1; p < splits; p++) acc += part[(int64_t)p * n + i];
        b0[i] = acc;
    }
    const unsigned th = (unsigned)(dim / 8 + 31) / 32 * 32;
    host_run_grid(rows, 1, th, [&] {
        rmsnorm_vec8_kernel<true, QK>(x0.data(), b0.data(), 1.0f, w.data(), dim, eps, y0.data(), q0.data(), d0.data(),
                                      s0.data(), g0.data());
    });
    host_run_grid(rows, 1, th, [&] {
        rmsnorm_parts_vec8_kernel<QK>(x1.data(), part.data(), splits, n, b1.data(), w.data(), dim, eps, y1.data(), q1.data(),
                                      d1.data(), s1.data(), g1.data());
    });
    bool same = !memcmp(b0.data(), b1.data(), n * 4) && !memcmp(x0.data(), x1.data(), n * 4) &&
                !memcmp(y0.data(), y1.data(), n * 4);
    if (QK == 2 || QK == 3) same = same && !memcmp(q0.data(), q1.data(), n * 2);
    else if (QK >= 0) same = same && !memcmp(q0.data(), q1.data(), n) && !memcmp(g0.data(), g1.data(), g0.size() * 2);
    printf("add + norm from %d split-K parts rows %d dim %d codes %d: %s\n", splits, rows, dim, QK,
           same ? "bit for bit" : "DIFFERENT");
    EXPECT(same, "add_rmsnorm from parts (splits %d, rows %d, dim %d, codes %d) differs from reduce + add_rmsnorm", splits,
           rows, dim, QK);
}

/* glu_f16_kernel (the swiglu that also writes down's f16 activations of act kind AK: 2, version 6's order, or 1, the
 * f16 cache + cuBLAS GEMM's) against ew_kernel<SWIGLU> then act_q8_as_f16<AK>: out and every f16 value bit for bit,
 * out aliasing the gate input as the backend calls it. */
template <int AK> static void glu_f16(int rows, int n) {
    const int64_t nt = (int64_t)rows * n;
    std::vector<float> g(nt), u(nt);
    for (auto &v : g) v = frand() * 6;
    for (auto &v : u) v = frand() * 3;
    std::vector<float> o0 = g, o1 = g;
    std::vector<__half> h0(nt), h1(nt);
    host_run_grid((unsigned)(nt / 128), 1, 128, [&] {
        ew_kernel<CUDA_EW_SWIGLU, false>(o0.data(), u.data(), 0.0f, nt, o0.data());
    });
    host_run_grid((unsigned)(nt / 256), 1, 32, [&] { act_q8_as_f16<AK>(o0.data(), blockIdx.x, threadIdx.x, h0.data()); });
    host_run_grid((unsigned)((nt / 256 + 3) / 4), 1, 128, [&] {
        glu_f16_kernel<CUDA_EW_SWIGLU, AK>(o1.data(), u.data(), nt / 256, o1.data(), h1.data());
    });
    const bool same = !memcmp(o0.data(), o1.data(), nt * 4) && !memcmp(h0.data(), h1.data(), nt * 2);
    printf("swiglu + f16 activations (kind %d) rows %d n %d: %s\n", AK, rows, n, same ? "bit for bit" : "DIFFERENT");
    EXPECT(same, "glu_f16 rows %d n %d differs from swiglu + act_q8_as_f16<%d>", rows, n, AK);
}

template <bool F16> static void mla_prep(int n_tok, int H, int R, int dr, int dq, int mode) {
    const float eps = 1e-6f;
    const int dk = R + dr, n_slots = 64;
    std::vector<float> kv_a(n_tok * dk), q(n_tok * H * dq), w(R);
    for (auto &v : kv_a) v = frand() * 2;
    for (auto &v : q) v = frand() * 2;
    for (auto &v : w) v = 1 + frand() * 0.5f;
    std::vector<int32_t> pos(n_tok), slots(n_tok);
    for (int t = 0; t < n_tok; t++) pos[t] = 100 + 37 * t, slots[t] = (t * 13 + 5) % n_slots;
    cuda_rope_consts c = {};
    c.mode = mode, c.n_rot = dr, c.theta_scale = powf(10000.0f, -2.0f / dr), c.freq_scale = 0.25f, c.ext_factor = 1.0f;
    c.mscale = 1.1f, c.corr0 = 3.0f, c.corr1 = 20.0f; /* YaRN, as deepseek's */
    std::vector<float> ff(dr / 2);
    for (auto &v : ff) v = 1 + 0.5f * (frand() + 1);
    using E = typename std::conditional<F16, __half, float>::type;
    std::vector<E> kc(n_slots * dk), vc(n_slots * R), kc2(n_slots * dk), vc2(n_slots * R);
    memset(kc.data(), 0, kc.size() * sizeof(E)), memset(vc.data(), 0, vc.size() * sizeof(E));
    memset(kc2.data(), 0, kc2.size() * sizeof(E)), memset(vc2.data(), 0, vc2.size() * sizeof(E));
    std::vector<float> qo(n_tok * H * dk, 7.0f), qo2 = qo;
    host_run_grid(n_tok, H + 1, 128, [&] {
        mla_prep_kernel<F16>(kv_a.data(), q.data(), qo.data(), w.data(), eps, H, R, dq, pos.data(), slots.data(), c, ff.data(),
                             kc.data(), vc.data());
    });
    /* the plain ops: rmsnorm of the compressed part, rope of the key part and of each head's rope part */
    std::vector<float> cn(n_tok * R), pe(n_tok * dr), qpe(n_tok * H * dr);
    for (int t = 0; t < n_tok; t++) {
        memcpy(&cn[t * R], &kv_a[t * dk], R * 4);
        memcpy(&pe[t * dr], &kv_a[t * dk + R], dr * 4);
        for (int h = 0; h < H; h++) memcpy(&qpe[(t * H + h) * dr], &q[(t * H + h) * dq + dq - dr], dr * 4);
    }
    host_run_grid(n_tok, 1, 128, [&] { rmsnorm_kernel<false, -1>(cn.data(), NULL, 1.0f, w.data(), R, eps, cn.data(), NULL, NULL, NULL, NULL); });
    host_run_grid(n_tok, 1, 128, [&] { rope_kernel(pe.data(), 1, dr, pos.data(), c, ff.data()); });
    host_run_grid(n_tok, 1, 128, [&] { rope_kernel(qpe.data(), H, dr, pos.data(), c, ff.data()); });
    auto put = [](E *p, float v) { *p = (E)v; };
    for (int t = 0; t < n_tok; t++) {
        const int s = slots[t];
        for (int i = 0; i < R; i++) put(&kc2[s * dk + i], cn[t * R + i]), put(&vc2[s * R + i], cn[t * R + i]);
        for (int i = 0; i < dr; i++) put(&kc2[s * dk + R + i], pe[t * dr + i]);
        for (int h = 0; h < H; h++) memcpy(&qo2[(t * H + h) * dk + R], &qpe[(t * H + h) * dr], dr * 4);
    }
    const bool same = !memcmp(kc.data(), kc2.data(), kc.size() * sizeof(E)) && !memcmp(vc.data(), vc2.data(), vc.size() * sizeof(E)) &&
                      !memcmp(qo.data(), qo2.data(), qo.size() * 4);
    printf("mla_prep %s rows %d heads %d R %d rope %d (%s): %s\n", F16 ? "f16" : "f32", n_tok, H, R, dr,
           mode == QR_ROPE_NEOX ? "neox" : "normal", same ? "bit for bit" : "DIFFERENT");
    EXPECT(same, "mla_prep differs from rmsnorm + rope + store");
}

/* The rope checks' inputs: q / k / v at random, positions p0 + dp t, cache slots (s_mul t + s_add) % n_slots. */
struct rope_in {
    std::vector<float> q, k, v;
    std::vector<int32_t> pos, slots;
    cuda_rope_consts c;
};
static rope_in rope_inputs(int n_tok, int nq, int nk, int vd, int n_rot, int mode, float base, int n_slots, int p0, int dp,
                           int s_mul, int s_add) {
    rope_in r;
    r.q.resize((size_t)n_tok * nq), r.k.resize((size_t)n_tok * nk), r.v.resize((size_t)n_tok * vd);
    for (auto &x : r.q) x = frand() * 4;
    for (auto &x : r.k) x = frand() * 4;
    for (auto &x : r.v) x = frand();
    r.pos.resize(n_tok), r.slots.resize(n_tok);
    for (int t = 0; t < n_tok; t++) r.pos[t] = p0 + dp * t, r.slots[t] = (t * s_mul + s_add) % n_slots;
    r.c = cuda_rope_consts{};
    r.c.mode = mode, r.c.n_rot = n_rot, r.c.theta_scale = powf(base, -2.0f / n_rot), r.c.freq_scale = 1.0f, r.c.mscale = 1.0f;
    return r;
}

/* Two runs' q, k and f16 cache rows equal bit for bit. */
static bool rope_same(const std::vector<float> &q1, const std::vector<float> &q2, const std::vector<float> &k1,
                      const std::vector<float> &k2, const std::vector<__half> &kc1, const std::vector<__half> &kc2,
                      const std::vector<__half> &vc1, const std::vector<__half> &vc2) {
    return !memcmp(q1.data(), q2.data(), q1.size() * 4) && !memcmp(k1.data(), k2.data(), k1.size() * 4) &&
           !memcmp(kc1.data(), kc2.data(), kc1.size() * 2) && !memcmp(vc1.data(), vc2.data(), vc1.size() * 2);
}

static void qk_norm(int n_tok, int H, int Hkv, int hd, int n_rot, float q_scale) {
    const float eps = 1e-6f;
    const int n_slots = 32, vd = Hkv * hd;
    const rope_in in = rope_inputs(n_tok, H * hd, Hkv * hd, vd, n_rot, QR_ROPE_NEOX, 1e6f, n_slots, 50, 11, 7, 3);
    const std::vector<float> &q = in.q, &k = in.k, &v = in.v;
    const std::vector<int32_t> &pos = in.pos, &slots = in.slots;
    const cuda_rope_consts c = in.c;
    std::vector<float> qn(hd), kn(hd);
    for (auto &x : qn) x = 1 + frand() * 0.5f;
    for (auto &x : kn) x = 1 + frand() * 0.5f;
    std::vector<__half> kc1(n_slots * vd), vc1(n_slots * vd), kc2(n_slots * vd), vc2(n_slots * vd);
    std::vector<float> q1 = q, k1 = k, q2 = q, k2 = k;
    const unsigned units = (unsigned)(H + Hkv + (vd + 8 * 128 - 1) / (8 * 128));
    host_run_grid(n_tok, units, 128, [&] {
        rope_kv_store_heads_kernel<true>(q1.data(), k1.data(), v.data(), H, Hkv, hd, vd, pos.data(), slots.data(), c, NULL,
                                         kc1.data(), vc1.data(), q_scale, qn.data(), kn.data(), eps);
    });
    host_run_grid(n_tok * H, 1, 128, [&] { rmsnorm_kernel<false, -1>(q2.data(), NULL, 1.0f, qn.data(), hd, eps, q2.data(), NULL, NULL, NULL, NULL); });
    host_run_grid(n_tok * Hkv, 1, 128, [&] { rmsnorm_kernel<false, -1>(k2.data(), NULL, 1.0f, kn.data(), hd, eps, k2.data(), NULL, NULL, NULL, NULL); });
    host_run_grid(n_tok, units, 128, [&] {
        rope_kv_store_heads_kernel<true>(q2.data(), k2.data(), v.data(), H, Hkv, hd, vd, pos.data(), slots.data(), c, NULL,
                                         kc2.data(), vc2.data(), q_scale, NULL, NULL, eps);
    });
    const bool same = rope_same(q1, q2, k1, k2, kc1, kc2, vc1, vc2);
    printf("q/k norms in the rope launch: rows %d heads %d/%d of %d (rope %d, q scale %g): %s\n", n_tok, H, Hkv, hd, n_rot,
           q_scale, same ? "bit for bit" : "DIFFERENT");
    EXPECT(same, "the fused per-head q / k norms differ from rmsnorm + rope");
}

/* rope_kv_store_heads_kernel (a CTA a row and head: batches up to tune.rope_heads_rows since session 39) against
 * rope_kv_store_kernel (a CTA a row, its angles in a shared table): q, k and the f16 cache rows bit for bit. */
static void rope_heads_rows(int n_tok, int H, int Hkv, int hd, int n_rot, float q_scale, int mode) {
    const int n_slots = 2 * n_tok + 5, vd = Hkv * hd;
    const rope_in in = rope_inputs(n_tok, H * hd, Hkv * hd, vd, n_rot, mode, 1e4f, n_slots, 7, 13, 5, 1);
    const std::vector<float> &q = in.q, &k = in.k, &v = in.v;
    const std::vector<int32_t> &pos = in.pos, &slots = in.slots;
    const cuda_rope_consts c = in.c;
    std::vector<__half> kc1(n_slots * vd), vc1(n_slots * vd), kc2(n_slots * vd), vc2(n_slots * vd);
    std::vector<float> q1 = q, k1 = k, q2 = q, k2 = k;
    const unsigned units = (unsigned)(H + Hkv + (vd + 8 * 128 - 1) / (8 * 128));
    host_run_grid(n_tok, units, 128, [&] {
        rope_kv_store_heads_kernel<true>(q1.data(), k1.data(), v.data(), H, Hkv, hd, vd, pos.data(), slots.data(), c, NULL,
                                         kc1.data(), vc1.data(), q_scale, NULL, NULL, 0.0f);
    });
    host_run_grid(n_tok, 1, 128, [&] {
        rope_kv_store_kernel<true>(q2.data(), k2.data(), v.data(), H, Hkv, hd, vd, pos.data(), slots.data(), c, NULL,
                                   kc2.data(), vc2.data(), q_scale);
    });
    const bool same = rope_same(q1, q2, k1, k2, kc1, kc2, vc1, vc2);
    printf("rope + K/V store a CTA a head against a CTA a row: rows %d heads %d/%d of %d (rope %d, mode %d, q scale %g): %s\n",
           n_tok, H, Hkv, hd, n_rot, mode, q_scale, same ? "bit for bit" : "DIFFERENT");
    EXPECT(same, "rope_kv_store_heads_kernel differs from rope_kv_store_kernel");
}

/* rope_kv_store_heads_kernel<F16, PARTS> (q / k / v still the split-K parts of their GEMM, session 39) against the
 * reduction (dq_reduce_multi_kernel's order) and the kernel on the sums: q, k, v and the cache rows bit for bit. */
static void rope_from_parts(int n_tok, int H, int Hkv, int hd, int vd, int splits, float q_scale) {
    const int n_slots = n_tok + 3, nq = H * hd, nk = Hkv * hd, n_all = nq + nk + vd;
    const int64_t stride = (int64_t)n_tok * n_all;
    std::vector<float> part(stride * splits);
    for (auto &x : part) x = frand() * 2;
    std::vector<float> q0(n_tok * nq), k0(n_tok * nk), v0(n_tok * vd);
    for (int64_t e = 0; e < stride; e++) { /* the reduction: part 0, then + part 1, ... */
        float s = part[e];
        for (int p = 1; p < splits; p++) s += part[(int64_t)p * stride + e];
        if (e < (int64_t)n_tok * nq) q0[e] = s;
        else if (e < (int64_t)n_tok * (nq + nk)) k0[e - (int64_t)n_tok * nq] = s;
        else v0[e - (int64_t)n_tok * (nq + nk)] = s;
    }
    const rope_in in = rope_inputs(n_tok, 0, 0, 0, hd, 0, 1e4f, n_slots, 3, 17, 3, 2); /* positions and slots only */
    const std::vector<int32_t> &pos = in.pos, &slots = in.slots;
    const cuda_rope_consts c = in.c;
    std::vector<__half> kc0(n_slots * nk), vc0(n_slots * vd), kc1(n_slots * nk), vc1(n_slots * vd);
    std::vector<float> q1(q0.size(), -7.0f), k1(k0.size(), -7.0f), v1(v0.size(), -7.0f); /* overwritten from the parts */
    const unsigned units = (unsigned)(H + Hkv + (vd + 8 * 128 - 1) / (8 * 128));
    host_run_grid(n_tok, units, 128, [&] {
        rope_kv_store_heads_kernel<true>(q0.data(), k0.data(), v0.data(), H, Hkv, hd, vd, pos.data(), slots.data(), c, NULL,
                                         kc0.data(), vc0.data(), q_scale, NULL, NULL, 0.0f);
    });
    struct rope_parts pp;
    pp.q = part.data(), pp.k = pp.q + (int64_t)n_tok * nq, pp.v = pp.k + (int64_t)n_tok * nk, pp.splits = splits,
    pp.stride = stride;
    host_run_grid(n_tok, units, 128, [&] {
        rope_kv_store_heads_kernel<true, true>(q1.data(), k1.data(), v1.data(), H, Hkv, hd, vd, pos.data(), slots.data(), c,
                                               NULL, kc1.data(), vc1.data(), q_scale, NULL, NULL, 0.0f, pp);
    });
    const bool same = rope_same(q0, q1, k0, k1, kc0, kc1, vc0, vc1) && !memcmp(v0.data(), v1.data(), v0.size() * 4);
    printf("rope + K/V store from %d split-K parts: rows %d heads %d/%d of %d, v %d: %s\n", splits, n_tok, H, Hkv, hd, vd,
           same ? "bit for bit" : "DIFFERENT");
    EXPECT(same, "the rope + K/V store from split-K parts differs from the reduction + rope");
}

static void softmax(int n_tok, int H, int nk, int k0, int window) {
    std::vector<float> s(n_tok * H * nk);
    for (auto &v : s) v = frand() * 30;
    std::vector<int32_t> pos(n_tok);
    for (int t = 0; t < n_tok; t++) pos[t] = k0 + nk - n_tok + t; /* the last n_tok keys are the rows' own */
    const float scale = 0.125f;
    std::vector<__half> p(n_tok * H * nk);
    host_run_grid(n_tok * H, 1, 128, [&] { attn_softmax_kernel(s.data(), H, nk, k0, pos.data(), scale, window, p.data()); });
    double worst = 0;
    bool mask_ok = true;
    for (int r = 0; r < n_tok * H; r++) {
        const int ps = pos[r / H], lo = window > 0 ? std::max(0, ps - window + 1) : 0;
        double mx = -1e300, sum = 0;
        for (int j = 0; j < nk; j++)
            if (k0 + j >= lo && k0 + j <= ps) mx = std::max(mx, (double)s[r * nk + j] * scale);
        for (int j = 0; j < nk; j++)
            if (k0 + j >= lo && k0 + j <= ps) sum += exp((double)s[r * nk + j] * scale - mx);
        for (int j = 0; j < nk; j++) {
            const double got = (double)__half2float(p[r * nk + j]);
            if (k0 + j >= lo && k0 + j <= ps) {
                const double want = exp((double)s[r * nk + j] * scale - mx) / sum;
                worst = std::max(worst, fabs(got - want) / std::max(want, 1e-4));
            } else if (got != 0.0) {
                mask_ok = false;
            }
        }
    }
    printf("attn softmax rows %d heads %d keys %d from %d window %d: max rel err %.2e, mask %s\n", n_tok, H, nk, k0, window,
           worst, mask_ok ? "ok" : "BROKEN");
    EXPECT(worst <= 2e-3 && mask_ok, "attention softmax off the double reference");
}

int main() {
    post_norm<-1>(3, 640);  /* gemma3-270m's width, no codes */
    post_norm<0>(2, 1024);  /* Q8_0 codes */
    post_norm<1>(2, 768);   /* Q8_K codes */
    post_norm<1>(1, 1024);
    post_norm<3>(2, 768);   /* the f16 cache + cuBLAS GEMM's f16 activations */
    norm_f16<2>(3, 1024);   /* the batched-decode GEMM's f16 activations from the norm */
    norm_f16<2>(2, 768);
    norm_f16<3>(3, 1024);   /* the f16 cache + cuBLAS GEMM's (act kind 1) */
    norm_f16<3>(2, 768);
    norm_parts<2>(3, 1024, 7); /* the down projection's split-K sum added by the next norm (version 6's f16 act.) */
    norm_parts<-1>(2, 768, 2);
    norm_parts<3>(2, 1024, 8);
    norm_parts<1>(1, 768, 1);
    glu_f16<2>(3, 1280);    /* the swiglu that writes down's f16 activations */
    glu_f16<2>(2, 2816);    /* (the host runs CTAs of <= 128 threads: dim <= 1024 for the vec8 form) */
    glu_f16<1>(3, 1280);
    glu_f16<1>(2, 2816);
    mla_prep<true>(3, 4, 512, 64, 192, 0);
    mla_prep<false>(2, 3, 256, 64, 96, 0);
    mla_prep<true>(2, 2, 128, 32, 48, QR_ROPE_NEOX);
    qk_norm(2, 8, 2, 128, 128, 1.0f);     /* qwen3's heads (fewer) */
    qk_norm(1, 4, 1, 256, 256, 0.0625f);  /* gemma3: head 256, q pre-scaled */
    qk_norm(3, 6, 3, 64, 32, 1.0f);       /* partial rope: the tails */
    rope_heads_rows(12, 8, 2, 128, 128, 1.0f, 0);           /* llama (normal rope) */
    rope_heads_rows(9, 6, 3, 64, 64, 0.125f, QR_ROPE_NEOX);  /* neox, q scaled */
    rope_heads_rows(5, 4, 4, 64, 32, 1.0f, QR_ROPE_NEOX);    /* partial rope: the tails */
    rope_from_parts(6, 8, 2, 128, 256, 5, 1.0f);  /* mistral's q / k / v (4 / 1 heads a group), 5 splits */
    rope_from_parts(3, 4, 4, 64, 252, 8, 0.125f); /* v not a multiple of 8 a row: the scalar tail */
    rope_from_parts(2, 2, 1, 64, 64, 1, 1.0f);
    softmax(5, 4, 300, 0, 0);
    softmax(7, 2, 200, 40, 64);
    softmax(1, 16, 1000, 0, 0);
    printf(fails ? "check_norm: %d FAILED\n" : "check_norm: all passed\n", fails);
    return fails ? 1 : 0;
}
