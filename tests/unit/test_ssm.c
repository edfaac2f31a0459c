/* test_ssm.c — the CPU backend's MoE and Mamba2 ops and the SSM state pool (issue 9):
 *   - moe_route: softmax / sigmoid (+ selection bias) / softmax-over-selected against hand-computed
 *     values, normalisation and scale, bad parameters raise an error;
 *   - matmul_id and moe_gate_up against per-row dense matmuls of the expert views (exact: the grouped
 *     kernel must use the one-row arithmetic of ggml's mul_mat_id), with and without biases;
 *   - moe_combine and the GLU activations against formulas;
 *   - ssm_conv / ssm_scan: one pass equals row-by-row passes (bitwise), interleaved sequences equal
 *     separate runs, and a NaN input raises "diverged";
 *   - ssm_gate_norm against a double-precision formula;
 *   - qr_ssm_state: zeroed at creation, reset per sequence.
 * (The float64 reference of the recurrence itself is tests/ref/test_ssm_numpy.py.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "backend/backend.h"
#include "quant/quant.h"
#include "convert/quantize_model.h"
#include "kv/ssm_state.h"

static uint64_t rng = 0x243F6A8885A308D3ull;
static float frand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) & 0xFFFFFF) / (float)(1 << 23) - 1.0f;
}
static void fill(float *x, int64_t n, float amp) {
    for (int64_t i = 0; i < n; i++) x[i] = frand() * amp;
}

static qr_backend *cpu(bool scalar) {
    qr_backend *be = NULL;
    char err[256];
    qr_backend_cpu_params p = {.n_threads = 2, .force_scalar = scalar};
    assert_int_equal(qr_backend_cpu_create(&p, &be, err, sizeof err), QR_OK);
    return be;
}

static int32_t plan_tok[4096], plan_pos[4096], plan_slot[4096], plan_out[4096], plan_bt[8];

/* A plan of n rows with sequence ids seq (the SSM ops only read seq). */
static void set_plan(qr_backend *be, const int32_t *seq, int32_t n, int32_t n_seq) {
    for (int32_t i = 0; i < n; i++) plan_tok[i] = plan_pos[i] = plan_slot[i] = plan_out[i] = i;
    const qr_batch_plan p = {.n_tokens = n, .tokens = plan_tok, .pos = plan_pos, .seq = seq, .kv_slot = plan_slot,
                             .n_seqs = n_seq, .max_blocks = 1, .block_table = plan_bt, .n_outputs = 0,
                             .output_rows = plan_out};
    char err[256];
    assert_int_equal(be->ops->set_batch(be, &p, err, sizeof err), QR_OK);
}

static qr_weight f32w(const float *p, int64_t ne0, int64_t ne1, int64_t ne2) {
    return (qr_weight){.name = "w", .type = QR_TYPE_F32, .ne = {ne0, ne1, ne2, 1}, .row_bytes = (size_t)ne0 * 4,
                       .host = p};
}

static void expect_ok(qr_backend *be) {
    char err[256];
    assert_int_equal(be->ops->last_error(be, err, sizeof err), QR_OK);
}

/* ---- routing ---- */

static void test_route_softmax_norm(void **state) {
    (void)state;
    qr_backend *be = cpu(false);
    const float lg[2][4] = {{1.0f, 3.0f, 2.0f, 0.0f}, {0.5f, 0.5f, -1.0f, 2.0f}};
    int32_t ids[4];
    float w[4];
    qr_moe_route_params p = {.n_expert = 4, .n_used = 2, .gating = QR_MOE_SOFTMAX, .norm = true, .scale = 1.0f};
    be->ops->moe_route(be, &lg[0][0], 2, &p, ids, w);
    expect_ok(be);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 2);
    /* normalised over the two selected: e^3 / (e^3 + e^2) */
    assert_true(fabs(w[0] - exp(3.0) / (exp(3.0) + exp(2.0))) < 1e-6);
    assert_true(fabs(w[0] + w[1] - 1.0) < 1e-6);
    assert_int_equal(ids[2], 3);
    assert_int_equal(ids[3], 0); /* a tie: the lower id first */
    /* without norm: the softmax probabilities themselves, then scaled */
    p.norm = false;
    p.scale = 2.0f;
    be->ops->moe_route(be, &lg[0][0], 1, &p, ids, w);
    const double z = exp(1.0) + exp(3.0) + exp(2.0) + exp(0.0);
    assert_true(fabs(w[0] - 2.0 * exp(3.0) / z) < 1e-6);
    qr_backend_free(be);
}

static void test_route_sigmoid_bias_and_softmax_weight(void **state) {
    (void)state;
    qr_backend *be = cpu(false);
    const float lg[4] = {0.0f, 1.0f, 0.5f, -2.0f};
    const float bias[4] = {0.0f, -1.0f, 0.0f, 5.0f}; /* selection only: picks 3, then 2 */
    const qr_weight bw = f32w(bias, 4, 1, 1);
    int32_t ids[2];
    float w[2];
    qr_moe_route_params p = {.n_expert = 4, .n_used = 2, .gating = QR_MOE_SIGMOID, .scale = 1.0f, .sel_bias = &bw};
    be->ops->moe_route(be, lg, 1, &p, ids, w);
    expect_ok(be);
    assert_int_equal(ids[0], 3);
    assert_int_equal(ids[1], 2);
    assert_true(fabs(w[0] - 1.0 / (1.0 + exp(2.0))) < 1e-6); /* weights from the unbiased probabilities */
    assert_true(fabs(w[1] - 1.0 / (1.0 + exp(-0.5))) < 1e-6);
    /* gpt-oss: softmax over the selected logits */
    qr_moe_route_params q = {.n_expert = 4, .n_used = 2, .gating = QR_MOE_SOFTMAX_WEIGHT, .scale = 1.0f};
    be->ops->moe_route(be, lg, 1, &q, ids, w);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 2);
    assert_true(fabs(w[0] - exp(1.0) / (exp(1.0) + exp(0.5))) < 1e-6);
    /* top-k > experts is refused */
    q.n_used = 5;
    be->ops->moe_route(be, lg, 1, &q, ids, w);
    char err[256];
    assert_int_not_equal(be->ops->last_error(be, err, sizeof err), QR_OK);
    qr_backend_free(be);
}

/* Group-limited routing (deepseek2): a group scores the sum of its two best selection scores; the top-k is taken
 * within the best groups only. */
static void test_route_groups(void **state) {
    (void)state;
    qr_backend *be = cpu(false);
    /* sigmoid gating over logits whose probabilities are these scores (selection bias 0): groups of 2 score
     * 0.9 + 0.1, 0.5 + 0.45, 0.8 + 0.0, 0.3 + 0.3 */
    const float want[8] = {0.9f, 0.1f, 0.5f, 0.45f, 0.8f, 0.0001f, 0.3f, 0.3f};
    float lg[8];
    for (int e = 0; e < 8; e++) lg[e] = logf(want[e] / (1.0f - want[e]));
    int32_t ids[2];
    float w[2];
    qr_moe_route_params p = {.n_expert = 8, .n_used = 2, .gating = QR_MOE_SIGMOID, .scale = 1.0f};
    be->ops->moe_route(be, lg, 1, &p, ids, w);
    expect_ok(be);
    assert_int_equal(ids[0], 0); /* without groups: the two best experts */
    assert_int_equal(ids[1], 4);
    p.n_groups = 4;
    p.n_group_used = 2; /* groups 0 (1.0) and 1 (0.95) kept, group 2 (0.8001) masked: expert 4 is out */
    be->ops->moe_route(be, lg, 1, &p, ids, w);
    expect_ok(be);
    assert_int_equal(ids[0], 0);
    assert_int_equal(ids[1], 2);
    assert_true(fabs(w[1] - 0.5) < 1e-6);
    p.n_group_used = 3; /* group 2 back in */
    be->ops->moe_route(be, lg, 1, &p, ids, w);
    assert_int_equal(ids[1], 4);
    /* a group of one expert cannot be scored: refused */
    p.n_groups = 8;
    be->ops->moe_route(be, lg, 1, &p, ids, w);
    char err[256];
    assert_int_not_equal(be->ops->last_error(be, err, sizeof err), QR_OK);
    qr_backend_free(be);
}

/* ---- experts ---- */

static void test_matmul_id_matches_dense(void **state) {
    (void)state;
    const int64_t NE = 5, K = 64, N = 48, R = 9;
    const int32_t KU = 3;
    float *wf = malloc(sizeof(float) * NE * N * K), *x = malloc(sizeof(float) * R * K), *bias = malloc(sizeof(float) * NE * N);
    fill(wf, NE * N * K, 1.0f);
    fill(x, R * K, 1.0f);
    fill(bias, NE * N, 0.5f);
    int32_t ids[9 * 3];
    for (int i = 0; i < R * KU; i++) ids[i] = (int32_t)((i * 7 + i / 3) % NE);
    for (int t = 0; t < 2; t++) { /* F32 and Q8_0 experts */
        const qr_type type = t == 0 ? QR_TYPE_F32 : QR_TYPE_Q8_0;
        const size_t rb = qr_type_row_size(type, K);
        void *wq = malloc(rb * NE * N);
        qr_quant_encode_rows(type, wf, wq, NE * N, K);
        const qr_weight w = {.name = "exps", .type = type, .ne = {K, N, NE, 1}, .row_bytes = rb, .host = wq};
        const qr_weight bw = f32w(bias, N, NE, 1);
        for (int sc = 0; sc < 2; sc++) {
            qr_backend *be = cpu(sc == 1);
            float *y = malloc(sizeof(float) * R * KU * N), *yr = malloc(sizeof(float) * N);
            be->ops->matmul_id(be, &(qr_moe_matmul_args){.w = &w, .w_b = &bw, .x = x, .ids = ids, .n_rows = R, .n_used = KU, .y = y});
            expect_ok(be);
            for (int64_t s = 0; s < R * KU; s++) {
                qr_weight we = w;
                we.ne[2] = 1;
                we.host = (const char *)wq + (size_t)ids[s] * N * rb;
                be->ops->matmul(be, &we, x + (s / KU) * K, 1, yr); /* one row: ggml's mul_mat_id arithmetic */
                for (int64_t i = 0; i < N; i++)
                    if (y[s * N + i] != yr[i] + bias[ids[s] * N + i])
                        fail_msg("type %d slot %lld row %lld: %g vs %g", t, (long long)s, (long long)i, y[s * N + i],
                                 yr[i] + bias[ids[s] * N + i]);
            }
            free(y);
            free(yr);
            qr_backend_free(be);
        }
        free(wq);
    }
    free(wf);
    free(x);
    free(bias);
}

/* A K-quant llama.cpp does not repack on x86 (Q6_K): an expert with >= 8 tokens routed to it goes through its
 * tiled GEMM, one with fewer through vec_dot, as a dense matmul of that many rows does. matmul_id must give,
 * per expert, the dense matmul of the rows routed to it, bit for bit; on the SIMD backend the two paths
 * differ somewhere, so the check tells them apart. */
static void test_matmul_id_tiled_kquant(void **state) {
    (void)state;
    enum { NE = 2, K = 512, N = 16, R = 12 };
    static float wf[NE * N * K], x[R * K], y[R * N], yd[R * N], xe[R * K], y1[N];
    fill(wf, NE * N * K, 1.0f);
    fill(x, R * K, 1.0f);
    int32_t ids[R];
    for (int i = 0; i < R; i++) ids[i] = i % 4 == 3 ? 1 : 0; /* expert 0: 9 tokens, expert 1: 3 */
    const size_t rb = qr_type_row_size(QR_TYPE_Q6_K, K);
    void *wq = malloc(rb * NE * N);
    qr_quant_encode_rows(QR_TYPE_Q6_K, wf, wq, NE * N, K);
    const qr_weight w = {.name = "exps", .type = QR_TYPE_Q6_K, .ne = {K, N, NE, 1}, .row_bytes = rb, .host = wq};
    for (int sc = 0; sc < 2; sc++) {
        qr_backend *be = cpu(sc == 1);
        be->ops->matmul_id(be, &(qr_moe_matmul_args){.w = &w, .x = x, .ids = ids, .n_rows = R, .n_used = 1, .y = y});
        expect_ok(be);
        int tiled_differs = 0;
        for (int e = 0; e < NE; e++) {
            int32_t rows[R], n = 0;
            for (int i = 0; i < R; i++)
                if (ids[i] == e) rows[n++] = i;
            for (int j = 0; j < n; j++) memcpy(xe + j * K, x + rows[j] * K, sizeof(float) * K);
            qr_weight we = w;
            we.ne[2] = 1;
            we.host = (const char *)wq + (size_t)e * N * rb;
            be->ops->matmul(be, &we, xe, n, yd);
            for (int j = 0; j < n; j++) {
                assert_memory_equal(y + rows[j] * N, yd + j * N, sizeof(float) * N);
                be->ops->matmul(be, &we, xe + j * K, 1, y1);
                tiled_differs += memcmp(y1, yd + j * N, sizeof y1) != 0;
            }
        }
        if (sc == 0) assert_true(tiled_differs > 0); /* the 9-row expert took another path than one row */
        qr_backend_free(be);
    }
    free(wq);
}

static void test_gate_up_combine_glu(void **state) {
    (void)state;
    qr_backend *be = cpu(false);
    const int64_t NE = 4, K = 32, F = 16, R = 6, E = K;
    const int32_t KU = 2;
    float *g = malloc(sizeof(float) * NE * F * K), *u = malloc(sizeof(float) * NE * F * K), *x = malloc(sizeof(float) * R * K);
    fill(g, NE * F * K, 1.0f);
    fill(u, NE * F * K, 1.0f);
    fill(x, R * K, 1.0f);
    const qr_weight gw = f32w(g, K, F, NE), uw = f32w(u, K, F, NE);
    int32_t ids[12] = {0, 1, 2, 3, 1, 1, 3, 0, 2, 2, 0, 3};
    float h[6 * 2 * 16], hg[6 * 2 * 16], hu[6 * 2 * 16];
    for (int a = 0; a < 3; a++) {
        const qr_glu_kind act = (qr_glu_kind)a;
        be->ops->moe_gate_up(be, &(qr_moe_matmul_args){.w = &uw, .gate = act == QR_GLU_RELU2 ? NULL : &gw, .act = act,
                                                       .x = x, .ids = ids, .n_rows = R, .n_used = KU, .y = h});
        be->ops->matmul_id(be, &(qr_moe_matmul_args){.w = &gw, .x = x, .ids = ids, .n_rows = R, .n_used = KU, .y = hg});
        be->ops->matmul_id(be, &(qr_moe_matmul_args){.w = &uw, .x = x, .ids = ids, .n_rows = R, .n_used = KU, .y = hu});
        expect_ok(be);
        for (int64_t i = 0; i < R * KU * F; i++) {
            double want;
            if (act == QR_GLU_SWIGLU) want = hg[i] / (1.0 + exp(-hg[i])) * hu[i];
            else if (act == QR_GLU_SWIGLU_OAI) {
                const double xg = fmin(hg[i], 7.0), yu = fmin(fmax(hu[i], -7.0), 7.0);
                want = xg / (1.0 + exp(-1.702 * xg)) * (yu + 1.0);
            } else want = hu[i] > 0 ? (double)hu[i] * hu[i] : 0.0;
            if (fabs(h[i] - want) > 1e-5 * (1.0 + fabs(want))) fail_msg("act %d elem %lld: %g vs %g", a, (long long)i, h[i], want);
        }
    }
    /* qwen2moe's shared-expert gate: silu(x) / x with the C library's expf, bit for bit; u unused */
    float sg[6] = {-30.0f, -2.5f, -1e-3f, 0.7f, 3.0f, 40.0f}, so[6];
    be->ops->glu(be, sg, NULL, 6, QR_GLU_SIGMOID, so);
    expect_ok(be);
    for (int i = 0; i < 6; i++) {
        const float silu = sg[i] / (1.0f + expf(-sg[i]));
        assert_true(so[i] == silu / sg[i]);
        assert_true(fabs(so[i] - 1.0 / (1.0 + exp(-(double)sg[i]))) < 1e-6);
    }
    /* combine: out = sum_j w_j y_j */
    float y[6 * 2 * 32], wt[12], out[6 * 32];
    fill(y, R * KU * E, 1.0f);
    fill(wt, R * KU, 1.0f);
    be->ops->moe_combine(be, y, wt, R, KU, E, NULL, out);
    for (int64_t r = 0; r < R; r++)
        for (int64_t i = 0; i < E; i++) {
            const float want = y[(r * KU) * E + i] * wt[r * KU] + y[(r * KU + 1) * E + i] * wt[r * KU + 1];
            assert_true(out[r * E + i] == want);
        }
    free(g);
    free(u);
    free(x);
    qr_backend_free(be);
}

/* ---- Mamba2 ---- */

enum { NH = 4, HP = 8, NG = 2, NS = 32, DI = NH * HP, CD = DI + 2 * NG * NS, KC = 4 };
static const qr_ssm_params SP = {.d_conv = KC, .d_inner = DI, .d_state = NS, .n_head = NH, .head_dim = HP,
                                 .n_group = NG, .conv_dim = CD};

/* Runs conv + scan over rows [0, n) in passes of `step` rows; states given. */
static void run_mixer(qr_backend *be, const float *x, const int32_t *seq, int32_t n, int32_t n_seq, int32_t step,
                      const qr_weight *cw, const qr_weight *cb, const float *dt, const qr_weight *dtb, const qr_weight *A,
                      const qr_weight *D, float *conv_state, float *scan_state, float *xbc, float *y) {
    for (int32_t r0 = 0; r0 < n; r0 += step) {
        const int32_t m = n - r0 < step ? n - r0 : step;
        set_plan(be, seq + r0, m, n_seq);
        be->ops->ssm_conv(be, x + (int64_t)r0 * CD, CD, conv_state, cw, cb, &SP, xbc + (int64_t)r0 * CD);
        be->ops->ssm_scan(be, &(qr_ssm_scan_args){.state = scan_state, .xbc = xbc + (int64_t)r0 * CD,
                                                  .dt = dt + (int64_t)r0 * NH, .dt_stride = NH, .dt_bias = dtb, .A = A,
                                                  .D = D, .p = &SP, .y = y + (int64_t)r0 * DI});
    }
}

static void test_ssm_passes_and_sequences(void **state) {
    (void)state;
    enum { T = 40 };
    static float x[T * CD], dt[T * NH], w[CD * KC], b[CD], dtbv[NH], Av[NH], Dv[NH];
    fill(x, T * CD, 1.0f);
    fill(dt, T * NH, 2.0f);
    fill(w, CD * KC, 0.5f);
    fill(b, CD, 0.1f);
    fill(dtbv, NH, 1.0f);
    for (int h = 0; h < NH; h++) Av[h] = -0.5f - (float)h, Dv[h] = 1.0f + 0.1f * (float)h;
    const qr_weight cw = f32w(w, KC, CD, 1), cb = f32w(b, CD, 1, 1), dtb = f32w(dtbv, NH, 1, 1), A = f32w(Av, NH, 1, 1),
                    D = f32w(Dv, NH, 1, 1);
    int32_t seq[T], seq0[T];
    for (int i = 0; i < T; i++) seq[i] = (i * 5 + i / 3) % 2, seq0[i] = 0;
    for (int sc = 0; sc < 2; sc++) {
        qr_backend *be = cpu(sc == 1);
        static float cs1[2 * (KC - 1) * CD], ss1[2 * DI * NS], xbc1[T * CD], y1[T * DI];
        static float cs2[2 * (KC - 1) * CD], ss2[2 * DI * NS], xbc2[T * CD], y2[T * DI];
        memset(cs1, 0, sizeof cs1), memset(ss1, 0, sizeof ss1), memset(cs2, 0, sizeof cs2), memset(ss2, 0, sizeof ss2);
        /* one pass vs one row per pass: bitwise equal */
        run_mixer(be, x, seq, T, 2, T, &cw, &cb, dt, &dtb, &A, &D, cs1, ss1, xbc1, y1);
        run_mixer(be, x, seq, T, 2, 1, &cw, &cb, dt, &dtb, &A, &D, cs2, ss2, xbc2, y2);
        expect_ok(be);
        assert_memory_equal(y1, y2, sizeof y1);
        assert_memory_equal(ss1, ss2, sizeof ss1);
        assert_memory_equal(cs1, cs2, sizeof cs1);
        /* interleaved sequences vs each sequence alone (its rows gathered, slot 0) */
        for (int s = 0; s < 2; s++) {
            static float xs[T * CD], dts[T * NH], cs3[(KC - 1) * CD], ss3[DI * NS], xbc3[T * CD], y3[T * DI];
            int32_t rows[T], n = 0;
            for (int i = 0; i < T; i++)
                if (seq[i] == s) rows[n++] = i;
            for (int j = 0; j < n; j++) {
                memcpy(xs + j * CD, x + rows[j] * CD, sizeof(float) * CD);
                memcpy(dts + j * NH, dt + rows[j] * NH, sizeof(float) * NH);
            }
            memset(cs3, 0, sizeof cs3), memset(ss3, 0, sizeof ss3);
            run_mixer(be, xs, seq0, n, 1, 3, &cw, &cb, dts, &dtb, &A, &D, cs3, ss3, xbc3, y3);
            for (int j = 0; j < n; j++) assert_memory_equal(y3 + j * DI, y1 + rows[j] * DI, sizeof(float) * DI);
            assert_memory_equal(ss3, ss1 + s * DI * NS, sizeof ss3);
        }
        /* a NaN input: the scan reports a diverged state */
        x[5] = NAN;
        run_mixer(be, x, seq, T, 2, T, &cw, &cb, dt, &dtb, &A, &D, cs1, ss1, xbc1, y1);
        char err[256];
        assert_int_equal(be->ops->last_error(be, err, sizeof err), QR_ERR_NUMERIC);
        assert_non_null(strstr(err, "diverged"));
        x[5] = 0.25f;
        qr_backend_free(be);
    }
}

/* The scan bit for bit against llama.cpp's x86 order of operations, written out here: dt = logf(1 + expf(dt +
 * bias)), dA = expf(dt * A), state = fma(state, dA, B * (x * dt)) (its compiler contracts the vector mul + add),
 * 32 FMA lanes of state * C reduced as ggml's AVX2 tree, then + x * D. A state update rounded twice instead
 * (mul, then add) moves some outputs by an ulp from the second row on, and this check fails. */
static void test_scan_matches_ggml_order(void **state) {
    (void)state;
    enum { T = 12 };
    static float xbc[T * CD], dt[T * NH], dtbv[NH], Av[NH], Dv[NH], st[DI * NS], want_st[DI * NS], y[T * DI],
        want_y[T * DI];
    fill(xbc, T * CD, 1.0f);
    fill(dt, T * NH, 2.0f);
    fill(dtbv, NH, 1.0f);
    for (int h = 0; h < NH; h++) Av[h] = -0.5f - (float)h, Dv[h] = 1.0f + 0.1f * (float)h;
    memset(want_st, 0, sizeof want_st);
    for (int r = 0; r < T; r++)
        for (int h = 0; h < NH; h++) {
            const int g = h / (NH / NG);
            const float *row = xbc + r * CD, *B = row + DI + g * NS, *C = row + DI + NG * NS + g * NS;
            const float d = logf(1.0f + expf(dt[r * NH + h] + dtbv[h])), dA = expf(d * Av[h]);
            for (int i = 0; i < HP; i++) {
                const float xv = row[h * HP + i], xdt = xv * d;
                float *s = want_st + (h * HP + i) * NS, lane[32];
                for (int n = 0; n < NS; n++) {
                    s[n] = fmaf(s[n], dA, B[n] * xdt);
                    lane[n] = s[n] * C[n];
                }
                float v8[8];
                for (int k = 0; k < 8; k++) v8[k] = (lane[k] + lane[16 + k]) + (lane[8 + k] + lane[24 + k]);
                const float t0 = v8[0] + v8[4], t1 = v8[1] + v8[5], t2 = v8[2] + v8[6], t3 = v8[3] + v8[7];
                want_y[r * DI + h * HP + i] = ((t0 + t1) + (t2 + t3)) + xv * Dv[h];
            }
        }
    const qr_weight dtb = f32w(dtbv, NH, 1, 1), A = f32w(Av, NH, 1, 1), D = f32w(Dv, NH, 1, 1);
    int32_t seq[T] = {0};
    for (int sc = 0; sc < 2; sc++) {
        qr_backend *be = cpu(sc == 1);
        memset(st, 0, sizeof st);
        set_plan(be, seq, T, 1);
        be->ops->ssm_scan(be, &(qr_ssm_scan_args){.state = st, .xbc = xbc, .dt = dt, .dt_stride = NH, .dt_bias = &dtb, .A = &A,
                                                  .D = &D, .p = &SP, .y = y});
        expect_ok(be);
        assert_memory_equal(y, want_y, sizeof y);
        assert_memory_equal(st, want_st, sizeof st);
        qr_backend_free(be);
    }
}

static void test_gate_norm(void **state) {
    (void)state;
    qr_backend *be = cpu(false);
    enum { R = 3 };
    static float y[R * DI], z[R * 2 * DI], w[DI], out[R * DI];
    fill(y, R * DI, 2.0f);
    fill(z, R * 2 * DI, 2.0f);
    fill(w, DI, 1.0f);
    const qr_weight ww = f32w(w, DI, 1, 1);
    be->ops->ssm_gate_norm(be, &(qr_ssm_gate_norm_args){.y = y, .z = z, .z_stride = 2 * DI, .w = &ww, .n_rows = R, .p = &SP,
                                                       .eps = 1e-5f, .out = out});
    expect_ok(be);
    const int gs = DI / NG;
    for (int r = 0; r < R; r++)
        for (int g = 0; g < NG; g++) {
            double t[DI], ss = 0.0;
            for (int i = 0; i < gs; i++) {
                const double zz = z[r * 2 * DI + g * gs + i];
                t[i] = zz / (1.0 + exp(-zz)) * y[r * DI + g * gs + i];
                ss += t[i] * t[i];
            }
            const double sc = 1.0 / sqrt(ss / gs + 1e-5);
            for (int i = 0; i < gs; i++) {
                const double want = t[i] * sc * w[g * gs + i];
                if (fabs(out[r * DI + g * gs + i] - want) > 1e-5 * (1.0 + fabs(want)))
                    fail_msg("row %d group %d elem %d: %g vs %g", r, g, i, out[r * DI + g * gs + i], want);
            }
        }
    qr_backend_free(be);
}

static void test_state_pool(void **state) {
    (void)state;
    qr_backend *be = cpu(false);
    const bool is_ssm[3] = {true, false, true};
    qr_ssm_state *s = NULL;
    char err[256];
    assert_int_equal(qr_ssm_state_create(be, 3, is_ssm, &SP, 2, &s, err, sizeof err), QR_OK);
    assert_null(qr_ssm_state_conv(s, 1));
    float *sc = qr_ssm_state_scan(s, 2), *cv = qr_ssm_state_conv(s, 0);
    assert_non_null(sc);
    assert_non_null(cv);
    for (int i = 0; i < 2 * DI * NS; i++) assert_true(sc[i] == 0.0f);
    assert_int_equal(qr_ssm_state_bytes(s), 2 * 2 * ((KC - 1) * CD + DI * NS) * sizeof(float));
    for (int i = 0; i < 2 * DI * NS; i++) sc[i] = 1.0f;
    qr_ssm_state_reset(s, 1); /* sequence 1 only */
    assert_true(sc[0] == 1.0f && sc[DI * NS - 1] == 1.0f);
    assert_true(sc[DI * NS] == 0.0f && sc[2 * DI * NS - 1] == 0.0f);
    qr_ssm_state_reset(s, -1);
    assert_true(sc[0] == 0.0f);
    qr_ssm_state *bad = NULL;
    assert_int_not_equal(qr_ssm_state_create(be, 0, is_ssm, &SP, 2, &bad, err, sizeof err), QR_OK);
    assert_null(bad);
    qr_ssm_state_free(s);
    qr_backend_free(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_route_softmax_norm),
        cmocka_unit_test(test_route_sigmoid_bias_and_softmax_weight),
        cmocka_unit_test(test_route_groups),
        cmocka_unit_test(test_matmul_id_matches_dense),
        cmocka_unit_test(test_matmul_id_tiled_kquant),
        cmocka_unit_test(test_gate_up_combine_glu),
        cmocka_unit_test(test_ssm_passes_and_sequences),
        cmocka_unit_test(test_scan_matches_ggml_order),
        cmocka_unit_test(test_gate_norm),
        cmocka_unit_test(test_state_pool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
