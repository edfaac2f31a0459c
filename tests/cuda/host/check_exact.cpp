/* check_exact.cpp — the exact mode's device arithmetic (src/backend/cuda/exact_dev.cuh) compiled for the
 * host and compared bit for bit with the CPU backend it reproduces: every weight type's dot product in
 * every order the CPU matmul uses (vec_dot, repacked GEMV/GEMM, tiled, sgemm: the best traits, i.e.
 * the AVX2 kernels) and the activation quantizers (the AVX2 Q8_0/Q8_1 of cpu/act_quant_avx2.c, Q8_K and
 * its 4-row variant). Needs an AVX2 machine (the CPU path the exact mode reproduces); prints SKIP
 * otherwise. Built and run by tests/cuda/host/run.sh. No GPU needed.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

extern "C" {
#include "backend/cpu/cpu.h"
#include "quant/quant.h"
#include "util/util.h"
}
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/exact_dev.cuh"
#include "pd.inc" /* qr_cuda_plane_desc of src/backend/cuda/dequant.cu, extracted by run.sh */

static uint64_t rs = 88172645463325252ull;
static float frand() {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (float)((rs >> 11) * 0x1p-53 * 2 - 1);
}

struct raw_blocks {
    const uint8_t *row;
    size_t bytes;
    void operator()(int64_t i, uint8_t *buf) const { memcpy(buf, row + (size_t)i * bytes, bytes); }
};

static size_t block_bytes(qr_type t) { return qr_type_row_size(t, (int64_t)qr_type_table[t].block_size); }

/* Activation row of the vec_dot_type the way cpu_matmul makes it (x4: the repacked GEMM's rows). */
static void cpu_act(const qr_quant_traits *tr, const float *x, int64_t k, uint8_t *out, bool x4) {
    if (tr->vec_dot_type == QR_TYPE_F32) {
        memcpy(out, x, (size_t)k * 4);
        return;
    }
    qr_from_float_fn f = qr_cpu_act_quantizer_avx2(tr->vec_dot_type);
    if (!f) f = qr_quant_traits_best(tr->vec_dot_type)->from_float;
    if (x4 && tr->from_float_gemm) f = tr->from_float_gemm;
    f(x, out, k);
}

static void exact_act(qr_type vt, const float *x, int64_t k, uint8_t *out, bool x4) {
    switch (vt) {
    case QR_TYPE_Q8_0:
        for (int64_t b = 0; b < k / 32; b++) qx_quant_q8_0(x + 32 * b, (qr_block_q8_0 *)out + b);
        break;
    case QR_TYPE_Q8_1:
        for (int64_t b = 0; b < k / 32; b++) qx_quant_q8_1(x + 32 * b, (qr_block_q8_1 *)out + b);
        break;
    case QR_TYPE_Q8_K:
        for (int64_t b = 0; b < k / 256; b++) qx_quant_q8_K(x + 256 * b, (qr_block_q8_K *)out + b, x4);
        break;
    case QR_TYPE_F16:
        for (int64_t i = 0; i < k; i++) ((uint16_t *)out)[i] = qx_f2h(x[i]);
        break;
    case QR_TYPE_BF16:
        for (int64_t i = 0; i < k; i++) ((uint16_t *)out)[i] = qx_f2bf(x[i]);
        break;
    default: memcpy(out, x, (size_t)k * 4);
    }
}

static int check_type(qr_type t, int64_t k, int rows) {
    const qr_quant_traits *tr = qr_quant_traits_best(t), *ref = qr_quant_traits_ref(t);
    const size_t rb = qr_type_row_size(t, k), yb = qr_type_row_size(tr->vec_dot_type, k);
    std::vector<float> w(k), x(k);
    std::vector<uint8_t> wq(rb), y1(yb + 64), y2(yb + 64);
    int bad = 0, n = 0;
    struct { int ord; qr_vec_dot_fn fn; bool x4; } orders[5] = {
        {QX_VEC, tr->vec_dot, false}, {QX_GEMV, tr->vec_dot_gemv, false}, {QX_GEMM, tr->vec_dot_gemm, true},
        {QX_TILED, tr->vec_dot_tiled, false}, {QX_SGEMM, tr->vec_dot_sgemm, false}};
    for (int r = 0; r < rows; r++) {
        const float wscale = r % 3 == 0 ? 1e-3f : (r % 3 == 1 ? 1.0f : 50.0f);
        for (auto &v : w) v = frand() * wscale;
        for (int64_t i = 0; i < k; i++) x[i] = frand() * (r % 2 ? 3.0f : 0.2f) * (i % 97 == 0 ? 20.0f : 1.0f);
        if (r == 1) x[5] = 4.0f, x[7] = -4.0f; /* a +/- tie for the Q8_K sign rules */
        if (t == QR_TYPE_F32) memcpy(wq.data(), w.data(), rb);
        else (ref->from_float ? ref->from_float : tr->from_float)(w.data(), wq.data(), k);
        raw_blocks wb = {wq.data(), block_bytes(t)};
        for (auto &o : orders) {
            if (!o.fn) continue;
            if (o.ord == QX_SGEMM && tr->sgemm_k > 0 && k % tr->sgemm_k) continue;
            cpu_act(tr, x.data(), k, y1.data(), o.x4);
            exact_act(tr->vec_dot_type, x.data(), k, y2.data(), o.x4);
            n++;
            if (memcmp(y1.data(), y2.data(), yb) != 0) {
                if (bad++ < 5) printf("  %s order %d: activations differ\n", qr_type_name(t), o.ord);
                continue;
            }
            float a = 0.0f;
            o.fn(k, &a, wq.data(), y1.data());
            const float b = qx_dot(t, o.ord, k, wb, wq.data(), y2.data());
            if (memcmp(&a, &b, 4) != 0 && bad++ < 5)
                printf("  %s order %d row %d: cpu %.9g exact %.9g\n", qr_type_name(t), o.ord, r, a, b);
        }
    }
    printf("%-7s k=%-5ld %3d dots: %s\n", qr_type_name(t), (long)k, n, bad ? "FAIL" : "ok");
    return bad ? 1 : 0;
}

/* The fast records (qx_rec_planes: dp4a words from the device's planes) against the generic ones. */
static int check_planes(qr_type t) {
    const qr_quant_traits *tr = qr_quant_traits_best(t), *ref = qr_quant_traits_ref(t);
    const cuda_plane_desc pd = qr_cuda_plane_desc(t);
    const int64_t k = pd.block;
    const size_t bb = block_bytes(t), yb = qr_type_row_size(tr->vec_dot_type, k);
    std::vector<float> w(k), x(k);
    std::vector<uint8_t> blk(bb), y(yb);
    alignas(16) static uint8_t planes[3][4 * 256];
    int bad = 0, n = 0;
    for (int it = 0; it < 300; it++) {
        const float ws = it % 3 == 0 ? 1e-3f : (it % 3 == 1 ? 1.0f : 50.0f);
        for (auto &v : w) v = frand() * ws;
        for (int64_t i = 0; i < k; i++) x[i] = frand() * (it % 2 ? 3.0f : 0.2f) * (i % 37 == 0 ? 20.0f : 1.0f);
        (ref->from_float ? ref->from_float : tr->from_float)(w.data(), blk.data(), k);
        exact_act(tr->vec_dot_type, x.data(), k, y.data(), it % 4 == 0);
        const uint8_t *pl[3];
        for (int j = 0; j < pd.n_planes; j++) { /* the block as block 1 of each plane */
            memcpy(planes[j] + pd.size[j], blk.data() + pd.off[j], (size_t)pd.size[j]);
            pl[j] = planes[j];
        }
        qx_rec a, b;
        memset(&a, 0, sizeof a);
        memset(&b, 0, sizeof b);
        if (!qx_rec_planes(t, pl, 1, y.data(), &a)) return 0; /* no fast form */
        qx_rec_of(t, blk.data(), y.data(), 0, &b);
        const bool kq = qx_is_kquant(t);
        bool same = memcmp(a.lanes, b.lanes, sizeof a.lanes) == 0 && a.sl == b.sl && a.sm == b.sm &&
                    memcmp(&a.wd, &b.wd, 4) == 0 && memcmp(&a.wm, &b.wm, 4) == 0 && memcmp(&a.yd, &b.yd, 4) == 0 &&
                    memcmp(&a.ys, &b.ys, 4) == 0;
        if (kq) same = same && memcmp(a.mins, b.mins, sizeof a.mins) == 0 && memcmp(a.pairs, b.pairs, sizeof a.pairs) == 0;
        n++;
        if (!same && bad++ < 3) printf("  %s block %d: fast record differs (sl %d vs %d)\n", qr_type_name(t), it, a.sl, b.sl);
    }
    printf("%-7s %3d plane records: %s\n", qr_type_name(t), n, bad ? "FAIL" : "ok");
    return bad ? 1 : 0;
}

/* Compares our replica of a C library function with the host's on every 61st float; the count of
 * differences (the first five printed). */
static int libm_sweep(const char *name, float (*libm)(float), float (*ours)(float)) {
    int bad = 0;
    for (uint64_t u = 0; u < 0x100000000ull; u += 61) {
        const uint32_t w = (uint32_t)u;
        float f;
        memcpy(&f, &w, 4);
        if (isnan(f)) continue;
        const float a = libm(f), b = ours(f);
        if (memcmp(&a, &b, 4) != 0 && bad++ < 5) printf("  libm %s(%a): %a vs %a\n", name, f, a, b);
    }
    return bad;
}

int main(void) {
    if (!qr_cpu_has_avx2() || strcmp(qr_quant_simd_level(), "avx2") != 0) {
        printf("SKIP: no AVX2 (the exact mode reproduces the AVX2 CPU path)\n");
        return 0;
    }
    /* fp16 conversions over every pattern / a sweep */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const float a = qr_fp16_to_fp32((uint16_t)h), b = qx_h2f((uint16_t)h);
        if (memcmp(&a, &b, 4) != 0 && !(isnan(a) && isnan(b)) && bad++ < 5) printf("  h2f %04x\n", h);
    }
    for (uint32_t u = 0; u < 0xFFFFFFFFu - 4093u; u += 4093u) {
        float f;
        memcpy(&f, &u, 4);
        if (isnan(f)) continue;
        if (qr_fp32_to_fp16(f) != qx_f2h(f) && bad++ < 5) printf("  f2h %08x: %04x vs %04x\n", u, qr_fp32_to_fp16(f), qx_f2h(f));
        if (qr_fp32_to_bf16(f) != qx_f2bf(f) && bad++ < 5) printf("  f2bf %08x\n", u);
    }
    for (int i = -2000000; i < 1000000; i++) {
        const float v = (float)i * 1.37e-4f + frand() * 1e-4f, e = qx_expf(v), c = cpu_expf(v);
        if (memcmp(&e, &c, 4) != 0 && bad++ < 5) printf("  expf(%g)\n", v);
    }
    /* the C library's expf and tanhf (gemma2's softcaps): every 61st float (all 2^32 were compared once,
     * docs/cuda-notes.md) */
    bad += libm_sweep("expf", expf, qx_libm_expf);
    bad += libm_sweep("tanhf", tanhf, qx_libm_tanhf);
    printf("conversions, exp and tanh: %s\n", bad ? "FAIL" : "ok");
    const qr_type types[] = {QR_TYPE_F32, QR_TYPE_F16, QR_TYPE_BF16, QR_TYPE_Q4_0, QR_TYPE_Q4_1, QR_TYPE_Q5_0,
                             QR_TYPE_Q5_1, QR_TYPE_Q8_0, QR_TYPE_IQ4_NL, QR_TYPE_MXFP4, QR_TYPE_Q2_K, QR_TYPE_Q3_K,
                             QR_TYPE_Q4_K, QR_TYPE_Q5_K, QR_TYPE_Q6_K};
    int rc = bad ? 1 : 0;
    for (qr_type t : types) {
        const bool kq = (int64_t)qr_type_table[t].block_size == 256;
        rc |= check_type(t, kq ? 1024 : 576, 12);
        rc |= check_type(t, kq ? 256 : 96, 6); /* odd block counts: the paired / tail paths */
        if ((int64_t)qr_type_table[t].block_size == 1) rc |= check_type(t, 83, 4);
    }
    for (qr_type t : types)
        if (t != QR_TYPE_F32 && t != QR_TYPE_F16 && t != QR_TYPE_BF16) rc |= check_planes(t);
    printf(rc ? "check_exact: FAIL\n" : "check_exact: all bit-identical\n");
    return rc;
}
