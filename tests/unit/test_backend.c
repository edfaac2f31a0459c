/* test_backend.c — CPU backend: every SIMD kernel against the scalar oracle on random inputs of
 * many sizes (odd sizes, tails), the scalar oracle against naive double-precision formulas, paged
 * attention against a dense reference, and multi-threaded matmul against single-threaded.
 *
 * Tolerances (per element, |got - want| <= atol + rtol * |want|):
 *   every elementwise/row kernel (add, mul, scale, geglu, swiglu, rmsnorm, rope, softmax, f32->f16)
 *   and attention: exact — the SIMD kernels do the same operations in the same order as the scalar
 *   ones (fused multiply-adds, the exp polynomial and the summation lanes included), because the
 *   CPU path reproduces ggml's rounding to match llama.cpp bit for bit where it can.
 *   matmul SIMD vs scalar quant traits: atol 1e-4 * max|y| (same integer dots, scales reordered)
 *   matmul path selection (llama.cpp's repacked / tiled / sgemm / vec_dot kernels per row): exact
 */
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
#include "backend/cpu/cpu.h"
#include "quant/quant.h"
#include "util/util.h"

/* ---- helpers ---- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) & 0xFFFFFF) / (float)(1 << 23) - 1.0f;
}
static void fill(float *x, int64_t n, float amp) {
    for (int64_t i = 0; i < n; i++) x[i] = frand() * amp;
}

/* Fails with a message at the first element outside atol + rtol * |want|. */
static void check_close(const char *what, const float *got, const float *want, int64_t n, float atol, float rtol) {
    for (int64_t i = 0; i < n; i++) {
        const float tol = atol + rtol * fabsf(want[i]);
        if (!(fabsf(got[i] - want[i]) <= tol)) {
            fail_msg("%s: element %lld: got %.9g want %.9g (tol %.3g)", what, (long long)i, got[i], want[i], tol);
        }
    }
}

static const cpu_kernels *simd(void) { return qr_cpu_has_avx2() ? &qr_cpu_kernels_avx2 : &qr_cpu_kernels_scalar; }

static const int64_t sizes[] = {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 127, 128, 255, 576, 640, 1000, 4099};
#define N_SIZES ((int)(sizeof sizes / sizeof sizes[0]))

/* The SIMD table is what a default backend picks on this machine. */
static void test_simd_selected(void **state) {
    (void)state;
    qr_backend *be = NULL;
    char err[256];
    qr_backend_cpu_params p = {.n_threads = 2};
    assert_int_equal(qr_backend_cpu_create(&p, &be, err, sizeof err), QR_OK);
    assert_string_equal(qr_backend_cpu_simd(be), qr_cpu_has_avx2() ? "avx2" : "scalar");
    qr_backend_free(be);
    p.force_scalar = true;
    assert_int_equal(qr_backend_cpu_create(&p, &be, err, sizeof err), QR_OK);
    assert_string_equal(qr_backend_cpu_simd(be), "scalar");
    qr_backend_free(be);
}

/* ---- elementwise kernels ---- */

static void test_elementwise(void **state) {
    (void)state;
    const cpu_kernels *S = &qr_cpu_kernels_scalar, *V = simd();
    float *tab = malloc(65536 * sizeof(float));
    qr_cpu_gelu_table_init(tab);
    for (int si = 0; si < N_SIZES; si++) {
        const int64_t n = sizes[si];
        float *a = malloc(n * 4), *b = malloc(n * 4), *o1 = malloc(n * 4), *o2 = malloc(n * 4);
        uint16_t *h1 = malloc(n * 2), *h2 = malloc(n * 2);
        fill(a, n, 12.0f); /* spans the geglu clamps at +-10 and silu's saturation */
        fill(b, n, 3.0f);
        S->add(a, b, n, o1), V->add(a, b, n, o2), check_close("add", o2, o1, n, 0, 0);
        S->mul(a, b, n, o1), V->mul(a, b, n, o2), check_close("mul", o2, o1, n, 0, 0);
        S->scale(a, 0.37f, n, o1), V->scale(a, 0.37f, n, o2), check_close("scale", o2, o1, n, 0, 0);
        S->geglu(a, b, n, o1, tab), V->geglu(a, b, n, o2, tab), check_close("geglu", o2, o1, n, 0, 0);
        S->swiglu(a, b, n, o1), V->swiglu(a, b, n, o2), check_close("swiglu", o2, o1, n, 0, 0);
        S->to_f16(a, h1, n), V->to_f16(a, h2, n);
        assert_memory_equal(h1, h2, n * 2);
        /* in place (out == a) gives the same result */
        memcpy(o2, a, n * 4);
        V->add(o2, b, n, o2);
        S->add(a, b, n, o1);
        check_close("add in place", o2, o1, n, 0, 0);
        free(a), free(b), free(o1), free(o2), free(h1), free(h2);
    }
    /* the oracle itself: silu and ggml's f16 GELU on known values */
    float g[4] = {0.0f, 1.0f, -2.0f, 20.0f}, u[4] = {1.0f, 1.0f, 1.0f, 0.5f}, o[4];
    S->swiglu(g, u, 4, o);
    assert_float_equal(o[0], 0.0f, 1e-7);
    assert_float_equal(o[1], 1.0f / (1.0f + expf(-1.0f)), 1e-7);
    assert_float_equal(o[2], -2.0f / (1.0f + expf(2.0f)), 1e-7);
    S->geglu(g, u, 4, o, tab);
    assert_float_equal(o[1], 0.8411920f, 1e-3); /* tanh-GELU(1) = 0.841192, f16-rounded */
    assert_float_equal(o[3], 10.0f, 0);        /* x >= 10 passes through: 20 * 0.5 */
    free(tab);
}

/* ---- rmsnorm / softmax ---- */

static void test_rmsnorm_softmax(void **state) {
    (void)state;
    const cpu_kernels *S = &qr_cpu_kernels_scalar, *V = simd();
    for (int si = 0; si < N_SIZES; si++) {
        const int64_t n = sizes[si];
        float *x = malloc(n * 4), *w = malloc(n * 4), *o1 = malloc(n * 4), *o2 = malloc(n * 4);
        fill(x, n, 4.0f);
        fill(w, n, 2.0f);
        S->rmsnorm_row(x, w, n, 1e-6f, o1);
        V->rmsnorm_row(x, w, n, 1e-6f, o2);
        check_close("rmsnorm", o2, o1, n, 0, 0);
        /* oracle vs double formula */
        double ss = 0;
        for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
        const double sc = 1.0 / sqrt(ss / n + 1e-6);
        for (int64_t i = 0; i < n; i++) assert_true(fabs(o1[i] - x[i] * sc * w[i]) <= 1e-5 * (1 + fabs(x[i] * sc * w[i])));
        S->rmsnorm_row(x, NULL, n, 1e-5f, o1);
        V->rmsnorm_row(x, NULL, n, 1e-5f, o2);
        check_close("rmsnorm no weight", o2, o1, n, 0, 0);

        fill(x, n, 30.0f);
        S->softmax_row(x, n, o1);
        V->softmax_row(x, n, o2);
        check_close("softmax", o2, o1, n, 0, 0);
        double sum = 0;
        for (int64_t i = 0; i < n; i++) sum += o1[i];
        assert_true(fabs(sum - 1.0) < 1e-5);
        free(x), free(w), free(o1), free(o2);
    }
}

/* ---- rope ---- */

static void rope_naive(double *x, int n_head, int head_dim, int n_rot, qr_rope_mode mode, double pos, double base,
                       double fscale, const float *ff) {
    for (int h = 0; h < n_head; h++) {
        double *xh = x + h * head_dim;
        for (int i = 0; i < n_rot / 2; i++) {
            double th = pos * pow(base, -2.0 * i / n_rot) / (ff ? ff[i] : 1.0) * fscale;
            int a = mode == QR_ROPE_NEOX ? i : 2 * i, b = mode == QR_ROPE_NEOX ? i + n_rot / 2 : 2 * i + 1;
            double x0 = xh[a], x1 = xh[b];
            xh[a] = x0 * cos(th) - x1 * sin(th);
            xh[b] = x0 * sin(th) + x1 * cos(th);
        }
    }
}

static void test_rope(void **state) {
    (void)state;
    const cpu_kernels *S = &qr_cpu_kernels_scalar, *V = simd();
    const int dims[][3] = {{64, 64, 3}, {256, 256, 1}, {128, 64, 4}, {24, 24, 2}, {80, 40, 5}, {6, 6, 3}};
    float ffv[128];
    for (int i = 0; i < 128; i++) ffv[i] = 1.0f + (float)i / 16.0f;
    qr_weight ffw = {.name = "rope_freqs", .type = QR_TYPE_F32, .ne = {128, 1, 1, 1}, .host = ffv};
    for (int di = 0; di < 6; di++) {
        const int head_dim = dims[di][0], n_rot = dims[di][1], n_head = dims[di][2], n = head_dim * n_head;
        for (int mode = 0; mode < 2; mode++) {
            for (int use_ff = 0; use_ff < 2; use_ff++) {
                const qr_rope_mode m = mode ? QR_ROPE_NEOX : QR_ROPE_NORMAL;
                qr_rope_params p = {.mode = m, .n_rot = n_rot, .freq_base = 10000.0f, .freq_scale = use_ff ? 1.0f : 0.25f,
                                    .freq_factors = use_ff ? &ffw : NULL, .attn_factor = 1.0f};
                const float positions[] = {0, 1, 17, 500, 4095};
                for (int pi = 0; pi < 5; pi++) {
                    float cs[QR_CPU_MAX_HEAD_DIM], x1[1024], x2[1024];
                    double xd[1024];
                    fill(x1, n, 2.0f);
                    memcpy(x2, x1, n * 4);
                    for (int i = 0; i < n; i++) xd[i] = x1[i];
                    qr_cpu_rope_cache(positions[pi], &p, use_ff ? ffv : NULL, cs);
                    S->rope_row(x1, n_head, head_dim, n_rot, m, cs);
                    V->rope_row(x2, n_head, head_dim, n_rot, m, cs);
                    check_close("rope simd", x2, x1, n, 0, 0);
                    rope_naive(xd, n_head, head_dim, n_rot, m, positions[pi], 10000.0, p.freq_scale, use_ff ? ffv : NULL);
                    /* f32 angle of up to 4095 rad: absolute error ~ pos * 2^-24 * a few */
                    for (int i = 0; i < n; i++)
                        if (fabs(x1[i] - xd[i]) > 2e-3 + 2e-6 * positions[pi])
                            fail_msg("rope vs naive: dim %d mode %d pos %g elem %d: %g vs %g", head_dim, mode,
                                     positions[pi], i, x1[i], xd[i]);
                }
            }
        }
    }
}

/* ---- attention over a paged cache ---- */

typedef struct attn_case {
    int n_head, n_head_kv, dk, dv, block_size, window;
    float softcap;
    qr_type kv_type;
    bool non_causal; /* every row sees its whole sequence (BERT) */
} attn_case;

static void run_attention_case(const attn_case *c) {
    char err[256];
    qr_backend *bs = NULL, *bv = NULL;
    qr_backend_cpu_params ps = {.n_threads = 1, .force_scalar = true}, pv = {.n_threads = 3};
    assert_int_equal(qr_backend_cpu_create(&ps, &bs, err, sizeof err), QR_OK);
    assert_int_equal(qr_backend_cpu_create(&pv, &bv, err, sizeof err), QR_OK);
    /* two sequences: seq 0 has 37 cached positions, seq 1 has 70; blocks shuffled */
    const int len[2] = {37, 70}, max_blocks = (70 + c->block_size - 1) / c->block_size + 1;
    const int n_blocks = 2 * max_blocks + 3;
    qr_kv_desc d = {.n_layer = 2, .n_blocks = n_blocks, .block_size = c->block_size, .k_dim = c->n_head_kv * c->dk,
                    .v_dim = c->n_head_kv * c->dv, .type_k = c->kv_type, .type_v = c->kv_type};
    qr_kv_storage *ks = bs->ops->kv_alloc(bs, &d, err, sizeof err), *kv2 = bv->ops->kv_alloc(bv, &d, err, sizeof err);
    assert_non_null(ks);
    assert_non_null(kv2);
    int32_t bt[2 * 64];
    int perm[256];
    for (int i = 0; i < n_blocks; i++) perm[i] = i;
    for (int i = n_blocks - 1; i > 0; i--) {
        int j = (int)((frand() + 1.0f) * 0.5f * (i + 1)) % (i + 1), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    for (int s = 0; s < 2; s++)
        for (int b = 0; b < max_blocks; b++) bt[s * max_blocks + b] = perm[s * max_blocks + b];
    /* one batch writing every position of both sequences, then queries on all rows */
    const int n_tok = len[0] + len[1];
    int32_t *tok = calloc(n_tok, 4), *pos = malloc(n_tok * 4), *seq = malloc(n_tok * 4), *slot = malloc(n_tok * 4);
    int r = 0;
    for (int s = 0; s < 2; s++)
        for (int p = 0; p < len[s]; p++, r++) {
            pos[r] = p, seq[r] = s;
            slot[r] = bt[s * max_blocks + p / c->block_size] * c->block_size + p % c->block_size;
        }
    qr_batch_plan plan = {.n_tokens = n_tok, .tokens = tok, .pos = pos, .seq = seq, .kv_slot = slot, .n_seqs = 2,
                          .max_blocks = max_blocks, .block_table = bt};
    assert_int_equal(bs->ops->set_batch(bs, &plan, err, sizeof err), QR_OK);
    assert_int_equal(bv->ops->set_batch(bv, &plan, err, sizeof err), QR_OK);
    const int qd = c->n_head * c->dk, od = c->n_head * c->dv;
    float *k = malloc((size_t)n_tok * d.k_dim * 4), *v = malloc((size_t)n_tok * d.v_dim * 4);
    float *q = malloc((size_t)n_tok * qd * 4), *o1 = malloc((size_t)n_tok * od * 4), *o2 = malloc((size_t)n_tok * od * 4);
    fill(k, (int64_t)n_tok * d.k_dim, 1.5f);
    fill(v, (int64_t)n_tok * d.v_dim, 1.0f);
    fill(q, (int64_t)n_tok * qd, 1.5f);
    bs->ops->kv_store(bs, ks, 1, k, v);
    bv->ops->kv_store(bv, kv2, 1, k, v);
    qr_attn_params ap = {.n_head = c->n_head, .n_head_kv = c->n_head_kv, .head_dim_k = c->dk, .head_dim_v = c->dv,
                         .scale = 1.0f / sqrtf((float)c->dk), .softcap = c->softcap, .window = c->window,
                         .non_causal = c->non_causal};
    bs->ops->attention(bs, ks, 1, q, &ap, o1);
    bv->ops->attention(bv, kv2, 1, q, &ap, o2);
    assert_int_equal(bs->ops->last_error(bs, err, sizeof err), QR_OK);
    assert_int_equal(bv->ops->last_error(bv, err, sizeof err), QR_OK);
    check_close("attention simd vs scalar", o2, o1, (int64_t)n_tok * od, 0, 0);
    /* dense double reference with f16-rounded q/k/v */
    const int group = c->n_head / c->n_head_kv;
    const bool h16 = c->kv_type == QR_TYPE_F16;
#define RND(x) (h16 ? (double)qr_fp16_to_fp32(qr_fp32_to_fp16(x)) : (double)(x))
    double *sc = malloc(sizeof(double) * 128);
    for (r = 0; r < n_tok; r++) {
        const int base = seq[r] == 0 ? 0 : len[0];
        const int first = c->window > 0 && pos[r] - c->window + 1 > 0 ? pos[r] - c->window + 1 : 0;
        const int last = c->non_causal ? len[seq[r]] - 1 : pos[r];
        for (int h = 0; h < c->n_head; h++) {
            const int kvh = h / group;
            double mx = -1e300;
            for (int p = first; p <= last; p++) {
                double dot = 0;
                for (int i = 0; i < c->dk; i++)
                    dot += (double)qr_fp16_to_fp32(qr_fp32_to_fp16(q[(size_t)r * qd + h * c->dk + i])) *
                           RND(k[(size_t)(base + p) * d.k_dim + kvh * c->dk + i]);
                double s = dot;
                if (c->softcap > 0) s = c->softcap * tanh(s / c->softcap);
                s *= ap.scale;
                sc[p] = s;
                if (s > mx) mx = s;
            }
            double sum = 0;
            for (int p = first; p <= last; p++) sum += (sc[p] = exp(sc[p] - mx));
            /* probabilities rounded to f16 as the kernels do; a probability next to an f16 rounding
             * boundary may round the other way here (5e-4 relative), hence the tolerance */
            for (int p = first; p <= last; p++) sc[p] = qr_fp16_to_fp32(qr_fp32_to_fp16((float)(sc[p] / sum)));
            for (int i = 0; i < c->dv; i++) {
                double acc = 0;
                for (int p = first; p <= last; p++) acc += sc[p] * RND(v[(size_t)(base + p) * d.v_dim + kvh * c->dv + i]);
                const double want = acc, got = o1[(size_t)r * od + h * c->dv + i];
                if (fabs(got - want) > 2e-4 + 1e-3 * fabs(want))
                    fail_msg("attention vs dense: row %d head %d dim %d: %g vs %g", r, h, i, got, want);
            }
        }
    }
    /* one-row passes (decode) sum in ggml's vec_dot_f16 order: same bits on both paths, and the
     * same values as the batch within rounding */
    for (r = 0; r < n_tok && !c->non_causal; r += 13) { /* (non-causal: a one-row pass sees only itself) */
        qr_batch_plan one = plan;
        one.n_tokens = 1, one.tokens = tok + r, one.pos = pos + r, one.seq = seq + r, one.kv_slot = slot + r;
        float o3[4096], o4[4096];
        assert_int_equal(bs->ops->set_batch(bs, &one, err, sizeof err), QR_OK);
        assert_int_equal(bv->ops->set_batch(bv, &one, err, sizeof err), QR_OK);
        bs->ops->attention(bs, ks, 1, q + (size_t)r * qd, &ap, o3);
        bv->ops->attention(bv, kv2, 1, q + (size_t)r * qd, &ap, o4);
        check_close("one-row attention simd vs scalar", o4, o3, od, 0, 0);
        check_close("one-row vs batch attention", o3, o1 + (size_t)r * od, od, 2e-4f, 1e-3f); /* an f16 p may round the other way */
    }
#undef RND
    free(sc);
    free(k), free(v), free(q), free(o1), free(o2), free(tok), free(pos), free(seq), free(slot);
    bs->ops->kv_free(bs, ks);
    bv->ops->kv_free(bv, kv2);
    qr_backend_free(bs);
    qr_backend_free(bv);
}

static void test_attention(void **state) {
    (void)state;
    const attn_case cases[] = {
        {.n_head = 9, .n_head_kv = 3, .dk = 64, .dv = 64, .block_size = 16, .kv_type = QR_TYPE_F16},        /* SmolLM2 */
        {.n_head = 4, .n_head_kv = 1, .dk = 256, .dv = 256, .block_size = 32, .window = 20, .kv_type = QR_TYPE_F16},
        {.n_head = 4, .n_head_kv = 4, .dk = 20, .dv = 12, .block_size = 7, .softcap = 5.0f, .kv_type = QR_TYPE_F32},
        {.n_head = 6, .n_head_kv = 2, .dk = 33, .dv = 33, .block_size = 5, .window = 9, .kv_type = QR_TYPE_F16},
        {.n_head = 2, .n_head_kv = 1, .dk = 8, .dv = 8, .block_size = 128, .kv_type = QR_TYPE_F16},
        /* F32 K/V, head sizes that are multiples of 8 (the four-key score loop and the register-blocked V sums) */
        {.n_head = 4, .n_head_kv = 2, .dk = 32, .dv = 48, .block_size = 16, .kv_type = QR_TYPE_F32},
        /* encoders (BERT): every row attends to its whole sequence */
        {.n_head = 12, .n_head_kv = 12, .dk = 32, .dv = 32, .block_size = 32, .kv_type = QR_TYPE_F16, .non_causal = true},
        {.n_head = 4, .n_head_kv = 2, .dk = 20, .dv = 12, .block_size = 7, .kv_type = QR_TYPE_F32, .non_causal = true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_attention_case(&cases[i]);
}

/* ---- add_row: biases, token-type rows and position embeddings ---- */

static void make_weight(qr_weight *w, qr_type type, int64_t k, int64_t n, float *src, void **buf);

static void test_add_row(void **state) {
    (void)state;
    char err[256];
    qr_backend *bs = NULL, *bv = NULL;
    qr_backend_cpu_params ps = {.n_threads = 1, .force_scalar = true}, pv = {.n_threads = 3};
    assert_int_equal(qr_backend_cpu_create(&ps, &bs, err, sizeof err), QR_OK);
    assert_int_equal(qr_backend_cpu_create(&pv, &bv, err, sizeof err), QR_OK);
    enum { DIM = 1000, ROWS = 7, NT = 300 };
    float *tab = malloc(sizeof(float) * DIM * ROWS), *x = malloc(sizeof(float) * DIM * NT);
    float *o1 = malloc(sizeof(float) * DIM * NT), *o2 = malloc(sizeof(float) * DIM * NT);
    fill(tab, DIM * ROWS, 2.0f);
    fill(x, DIM * NT, 3.0f);
    int32_t tok[NT], pos[NT], seq[NT], slot[NT], bt[1] = {0};
    for (int r = 0; r < NT; r++) tok[r] = 0, pos[r] = (r * 5) % ROWS, seq[r] = 0, slot[r] = r;
    qr_batch_plan plan = {.n_tokens = NT, .tokens = tok, .pos = pos, .seq = seq, .kv_slot = slot, .n_seqs = 1,
                          .max_blocks = 1, .block_table = bt};
    assert_int_equal(bs->ops->set_batch(bs, &plan, err, sizeof err), QR_OK);
    assert_int_equal(bv->ops->set_batch(bv, &plan, err, sizeof err), QR_OK);
    const qr_type types[] = {QR_TYPE_F32, QR_TYPE_F16};
    for (int ti = 0; ti < 2; ti++) {
        qr_weight w;
        void *buf;
        make_weight(&w, types[ti], DIM, ROWS, tab, &buf);
        for (int64_t row = -1; row < ROWS; row += 3) {
            bs->ops->add_row(bs, x, &w, row, NT, o1);
            bv->ops->add_row(bv, x, &w, row, NT, o2);
            assert_int_equal(bs->ops->last_error(bs, err, sizeof err), QR_OK);
            assert_int_equal(bv->ops->last_error(bv, err, sizeof err), QR_OK);
            check_close("add_row simd vs scalar", o2, o1, (int64_t)DIM * NT, 0, 0);
            for (int r = 0; r < NT; r++)
                for (int i = 0; i < DIM; i++) {
                    float t = tab[(row >= 0 ? row : pos[r]) * DIM + i];
                    if (types[ti] == QR_TYPE_F16) t = qr_fp16_to_fp32(qr_fp32_to_fp16(t));
                    if (o1[(size_t)r * DIM + i] != x[(size_t)r * DIM + i] + t)
                        fail_msg("add_row type %d row %lld: r %d i %d", ti, (long long)row, r, i);
                }
        }
        /* in place, and the range checks */
        memcpy(o1, x, sizeof(float) * DIM * NT);
        bv->ops->add_row(bv, o1, &w, 2, NT, o1);
        assert_true(o1[5] == x[5] + (types[ti] == QR_TYPE_F16 ? qr_fp16_to_fp32(qr_fp32_to_fp16(tab[2 * DIM + 5])) : tab[2 * DIM + 5]));
        bv->ops->add_row(bv, x, &w, ROWS, NT, o2);
        assert_int_equal(bv->ops->last_error(bv, err, sizeof err), QR_ERR_INVALID_ARG);
        free(buf);
    }
    /* a position beyond the table is refused */
    qr_weight w;
    void *buf;
    make_weight(&w, QR_TYPE_F32, DIM, 3, tab, &buf);
    bv->ops->add_row(bv, x, &w, -1, NT, o2);
    assert_int_equal(bv->ops->last_error(bv, err, sizeof err), QR_ERR_INVALID_ARG);
    free(buf);
    free(tab), free(x), free(o1), free(o2);
    qr_backend_free(bs);
    qr_backend_free(bv);
}

/* ---- matmul ---- */

static void make_weight(qr_weight *w, qr_type type, int64_t k, int64_t n, float *src, void **buf) {
    const qr_quant_traits *tr = qr_quant_traits_ref(type);
    assert_non_null(tr);
    const size_t rb = qr_type_row_size(type, k);
    assert_true(rb > 0);
    *buf = malloc(rb * n);
    for (int64_t i = 0; i < n; i++) {
        if (type == QR_TYPE_F32) memcpy((char *)*buf + i * rb, src + i * k, rb);
        else tr->from_float(src + i * k, (char *)*buf + i * rb, k);
    }
    *w = (qr_weight){.name = "w", .type = type, .ne = {k, n, 1, 1}, .row_bytes = rb, .host = *buf};
}

static void test_matmul(void **state) {
    (void)state;
    char err[256];
    qr_backend *b1 = NULL, *b4 = NULL, *bs = NULL;
    qr_backend_cpu_params p1 = {.n_threads = 1}, p4 = {.n_threads = 4}, ps = {.n_threads = 2, .force_scalar = true};
    assert_int_equal(qr_backend_cpu_create(&p1, &b1, err, sizeof err), QR_OK);
    assert_int_equal(qr_backend_cpu_create(&p4, &b4, err, sizeof err), QR_OK);
    assert_int_equal(qr_backend_cpu_create(&ps, &bs, err, sizeof err), QR_OK);
    const qr_type types[] = {QR_TYPE_F32, QR_TYPE_F16, QR_TYPE_Q8_0, QR_TYPE_Q4_0, QR_TYPE_Q4_1, QR_TYPE_Q5_0,
                             QR_TYPE_Q4_K, QR_TYPE_Q6_K};
    const int64_t shapes[][3] = {{256, 33, 1}, {256, 96, 5}, {512, 200, 40}, {768, 17, 3}};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        for (size_t si = 0; si < 4; si++) {
            const int64_t k = shapes[si][0], n = shapes[si][1], m = shapes[si][2];
            float *wf = malloc(k * n * 4), *x = malloc(k * m * 4);
            float *y1 = malloc(n * m * 4), *y4 = malloc(n * m * 4), *ys = malloc(n * m * 4);
            fill(wf, k * n, 1.0f);
            fill(x, k * m, 1.0f);
            qr_weight w;
            void *buf;
            make_weight(&w, types[ti], k, n, wf, &buf);
            b1->ops->matmul(b1, &w, x, m, y1);
            b4->ops->matmul(b4, &w, x, m, y4);
            bs->ops->matmul(bs, &w, x, m, ys);
            assert_int_equal(b1->ops->last_error(b1, err, sizeof err), QR_OK);
            assert_int_equal(b4->ops->last_error(b4, err, sizeof err), QR_OK);
            assert_int_equal(bs->ops->last_error(bs, err, sizeof err), QR_OK);
            /* threads only split the work: bit-identical */
            assert_memory_equal(y1, y4, n * m * 4);
            float mx = 0;
            for (int64_t i = 0; i < n * m; i++) mx = fmaxf(mx, fabsf(ys[i]));
            check_close(qr_type_name(types[ti]), y1, ys, n * m, 1e-4f * mx, 0);
            /* against the dequantized weights in double: activation quantization error only */
            const qr_quant_traits *tr = qr_quant_traits_ref(types[ti]);
            float *wd = malloc(k * 4);
            for (int64_t i = 0; i < n; i++) {
                if (types[ti] == QR_TYPE_F32) memcpy(wd, wf + i * k, k * 4);
                else tr->to_float((char *)buf + i * w.row_bytes, wd, k);
                for (int64_t t = 0; t < m; t++) {
                    double dot = 0, mag = 0;
                    for (int64_t j = 0; j < k; j++) dot += (double)wd[j] * x[t * k + j], mag += fabs((double)wd[j] * x[t * k + j]);
                    const double tol = types[ti] == QR_TYPE_F32 ? 1e-5 * mag : 1.5e-2 * mag;
                    if (fabs(ys[t * n + i] - dot) > tol)
                        fail_msg("%s matmul vs dequantized: row %lld tok %lld: %g vs %g", qr_type_name(types[ti]),
                                 (long long)i, (long long)t, ys[t * n + i], dot);
                }
            }
            free(wd), free(buf), free(wf), free(x), free(y1), free(y4), free(ys);
        }
    }
    qr_backend_free(b1);
    qr_backend_free(b4);
    qr_backend_free(bs);
}

/* matmul takes, row by row, the kernel llama.cpp's x86 CPU backend would: a weight type with a
 * repacked path and a row count multiple of repack_rows runs whole groups of 4 activation rows
 * through the GEMM order (with from_float_gemm's activations) and the rest through the GEMV order;
 * else a K-quant with >= QR_TILED_MIN_ROWS rows the tiled order; else, with >= 2 rows, a row
 * length multiple of sgemm_k and a weight row count multiple of sgemm_m, the sgemm order; else vec_dot. Checked bit for bit against the
 * traits' kernels applied by hand, on the SIMD and on the scalar backend. */
static void test_matmul_llama_cpp_paths(void **state) {
    (void)state;
    char err[256];
    typedef struct {
        qr_type type;
        int64_t k, n, m;
        char want; /* 'r' repacked, 't' tiled, 's' sgemm (where the traits have it), 'v' vec_dot */
    } mm_case;
    const mm_case cases[] = {
        {QR_TYPE_Q4_K, 512, 16, 6, 'r'}, {QR_TYPE_Q4_K, 512, 16, 1, 'r'},  {QR_TYPE_Q4_K, 512, 12, 9, 't'},
        {QR_TYPE_Q4_K, 512, 12, 5, 'v'}, {QR_TYPE_Q6_K, 512, 10, 8, 't'},  {QR_TYPE_Q6_K, 512, 10, 7, 'v'},
        {QR_TYPE_Q5_K, 256, 7, 11, 't'}, {QR_TYPE_Q2_K, 256, 7, 8, 't'},   {QR_TYPE_Q3_K, 256, 7, 8, 't'},
        {QR_TYPE_Q4_0, 256, 16, 7, 'r'}, {QR_TYPE_Q4_0, 256, 12, 7, 's'},  {QR_TYPE_MXFP4, 256, 8, 5, 'r'},
        {QR_TYPE_IQ4_NL, 256, 12, 3, 's'}, {QR_TYPE_IQ4_NL, 256, 12, 1, 'v'}, {QR_TYPE_IQ4_NL, 256, 24, 5, 'r'},
        {QR_TYPE_F16, 264, 8, 2, 's'},   {QR_TYPE_F16, 260, 8, 3, 'v'},    {QR_TYPE_F16, 264, 8, 1, 'v'},
        {QR_TYPE_F32, 72, 12, 4, 's'},   {QR_TYPE_Q8_0, 256, 9, 3, 's'},   {QR_TYPE_Q4_1, 256, 9, 3, 'v'},
        /* the float tinyBLAS takes only weights of a multiple of 4 rows (a one-row F32 weight: qwen2moe's
         * shared-expert gate) */
        {QR_TYPE_F16, 264, 5, 2, 'v'},   {QR_TYPE_F32, 72, 9, 4, 'v'},     {QR_TYPE_F32, 256, 1, 6, 'v'},
    };
    for (int scalar = 0; scalar < 2; scalar++) {
        qr_backend *be = NULL;
        qr_backend_cpu_params p = {.n_threads = 2, .force_scalar = scalar};
        assert_int_equal(qr_backend_cpu_create(&p, &be, err, sizeof err), QR_OK);
        for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
            const mm_case *c = &cases[ci];
            const qr_quant_traits *tr = scalar ? qr_quant_traits_ref(c->type) : qr_quant_traits_best(c->type);
            const qr_quant_traits *vt = scalar ? qr_quant_traits_ref(tr->vec_dot_type) : qr_quant_traits_best(tr->vec_dot_type);
            float *wf = malloc(c->k * c->n * 4), *x = malloc(c->k * c->m * 4), *y = malloc(c->n * c->m * 4);
            fill(wf, c->k * c->n, 1.0f);
            fill(x, c->k * c->m, 1.0f);
            qr_weight w;
            void *buf;
            make_weight(&w, c->type, c->k, c->n, wf, &buf);
            be->ops->matmul(be, &w, x, c->m, y);
            assert_int_equal(be->ops->last_error(be, err, sizeof err), QR_OK);
            /* the kernels by hand */
            qr_from_float_fn act = qr_cpu_act_quantizer(tr->vec_dot_type);
            if (!act && tr->vec_dot_type != QR_TYPE_F32) act = vt->from_float;
            const size_t xrow = tr->vec_dot_type == QR_TYPE_F32 ? (size_t)c->k * 4 : qr_type_row_size(tr->vec_dot_type, c->k);
            char *xq = malloc(xrow);
            const bool repacked = tr->vec_dot_gemm && c->n % tr->repack_rows == 0;
            const bool tiled = !repacked && tr->vec_dot_tiled && c->m >= QR_TILED_MIN_ROWS;
            const bool sgemm = !repacked && !tiled && qr_quant_sgemm_applies(tr, c->k, c->n, c->m);
            const char path = repacked ? 'r' : tiled ? 't' : sgemm ? 's' : 'v';
            /* the scalar traits have no sgemm order: vec_dot there */
            assert_int_equal(path, c->want == 's' && !tr->vec_dot_sgemm ? 'v' : c->want);
            for (int64_t t = 0; t < c->m; t++) {
                const bool gemm_row = repacked && t < c->m - c->m % 4;
                qr_from_float_fn a = gemm_row && tr->from_float_gemm ? tr->from_float_gemm : act;
                if (a) a(x + t * c->k, xq, c->k);
                else memcpy(xq, x + t * c->k, xrow);
                qr_vec_dot_fn dot = repacked ? (gemm_row ? tr->vec_dot_gemm : tr->vec_dot_gemv)
                                    : tiled  ? tr->vec_dot_tiled
                                    : sgemm  ? tr->vec_dot_sgemm
                                             : tr->vec_dot;
                for (int64_t i = 0; i < c->n; i++) {
                    float want;
                    dot(c->k, &want, (const char *)buf + i * w.row_bytes, xq);
                    if (memcmp(&want, &y[t * c->n + i], 4) != 0)
                        fail_msg("%s %s k=%lld n=%lld m=%lld path %c: row %lld out %lld: %.9g want %.9g",
                                 scalar ? "scalar" : "simd", qr_type_name(c->type), (long long)c->k, (long long)c->n,
                                 (long long)c->m, path, (long long)t, (long long)i, y[t * c->n + i], want);
                }
            }
            free(xq), free(buf), free(wf), free(x), free(y);
        }
        qr_backend_free(be);
    }
}

/* ---- whole ops through the table, threaded vs scalar ---- */

static void test_ops_threaded(void **state) {
    (void)state;
    char err[256];
    qr_backend *bs = NULL, *bv = NULL;
    qr_backend_cpu_params ps = {.n_threads = 1, .force_scalar = true}, pv = {.n_threads = 3};
    assert_int_equal(qr_backend_cpu_create(&ps, &bs, err, sizeof err), QR_OK);
    assert_int_equal(qr_backend_cpu_create(&pv, &bv, err, sizeof err), QR_OK);
    const int64_t rows = 70, dim = 1030, n = rows * dim; /* big enough to run on the pool */
    float *x = bv->ops->alloc(bv, n * 4), *g = malloc(n * 4), *o1 = malloc(n * 4), *o2 = malloc(n * 4);
    float wv[1030];
    fill(x, n, 3.0f);
    fill(g, n, 3.0f);
    fill(wv, dim, 1.0f);
    qr_weight w = {.name = "norm", .type = QR_TYPE_F32, .ne = {dim, 1, 1, 1}, .row_bytes = dim * 4, .host = wv};
    bs->ops->rmsnorm(bs, x, &w, rows, dim, 1e-5f, o1);
    bv->ops->rmsnorm(bv, x, &w, rows, dim, 1e-5f, o2);
    check_close("rmsnorm op", o2, o1, n, 0, 0);
    bs->ops->swiglu(bs, x, g, n, o1);
    bv->ops->swiglu(bv, x, g, n, o2);
    check_close("swiglu op", o2, o1, n, 0, 0);
    bs->ops->geglu(bs, x, g, n, o1);
    bv->ops->geglu(bv, x, g, n, o2);
    check_close("geglu op", o2, o1, n, 0, 0);
    bs->ops->softmax(bs, x, rows, dim, o1);
    bv->ops->softmax(bv, x, rows, dim, o2);
    check_close("softmax op", o2, o1, n, 0, 0);
    bs->ops->layernorm(bs, x, &w, &w, rows, dim, 1e-5f, o1);
    bv->ops->layernorm(bv, x, &w, &w, rows, dim, 1e-5f, o2);
    check_close("layernorm op", o2, o1, n, 0, 0);
    bv->ops->softcap(bv, x, 2.0f, n, o2);
    for (int64_t i = 0; i < n; i++) assert_true(fabsf(o2[i] - 2.0f * tanhf(x[i] / 2.0f)) < 1e-6f);
    bv->ops->copy(bv, x, n, o2);
    assert_memory_equal(o2, x, n * 4);
    /* rope through the batch plan: each row at its own position */
    int32_t pos[70], seq[70], slot[70], tok[70] = {0}, bt[1] = {0};
    for (int i = 0; i < 70; i++) pos[i] = i * 13, seq[i] = 0, slot[i] = 0;
    qr_batch_plan plan = {.n_tokens = 70, .tokens = tok, .pos = pos, .seq = seq, .kv_slot = slot, .n_seqs = 1,
                          .max_blocks = 1, .block_table = bt};
    assert_int_equal(bs->ops->set_batch(bs, &plan, err, sizeof err), QR_OK);
    assert_int_equal(bv->ops->set_batch(bv, &plan, err, sizeof err), QR_OK);
    qr_rope_params rp = {.mode = QR_ROPE_NEOX, .n_rot = 96, .freq_base = 1e6f, .freq_scale = 1.0f, .attn_factor = 1.0f};
    memcpy(o1, x, 70 * 1024 * 4);
    memcpy(o2, x, 70 * 1024 * 4);
    bs->ops->rope(bs, o1, 8, 128, &rp);
    bv->ops->rope(bv, o2, 8, 128, &rp);
    check_close("rope op", o2, o1, 70 * 1024, 0, 0);
    /* bad plan is rejected with a message */
    seq[3] = 5;
    assert_int_equal(bv->ops->set_batch(bv, &plan, err, sizeof err), QR_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "row 3"));
    /* an op error is sticky until read */
    w.ne[0] = 7;
    bv->ops->rmsnorm(bv, x, &w, rows, dim, 1e-5f, o2);
    assert_int_equal(bv->ops->last_error(bv, err, sizeof err), QR_ERR_INVALID_ARG);
    assert_int_equal(bv->ops->last_error(bv, err, sizeof err), QR_OK);
    bv->ops->free(bv, x);
    free(g), free(o1), free(o2);
    qr_backend_free(bs);
    qr_backend_free(bv);
}

/* The pool survives many tiny runs (decode-size ops) and thread count changes. */
static void test_pool(void **state) {
    (void)state;
    char err[256];
    qr_backend *be = NULL;
    qr_backend_cpu_params p = {.n_threads = 4};
    assert_int_equal(qr_backend_cpu_create(&p, &be, err, sizeof err), QR_OK);
    float wf[64 * 64], x[64], y1[64], y2[64];
    fill(wf, 64 * 64, 1.0f);
    fill(x, 64, 1.0f);
    qr_weight w = {.name = "w", .type = QR_TYPE_F32, .ne = {64, 64, 1, 1}, .row_bytes = 256, .host = wf};
    be->ops->matmul(be, &w, x, 1, y1);
    for (int it = 0; it < 2000; it++) {
        be->ops->matmul(be, &w, x, 1, y2);
        if (it % 500 == 0) assert_int_equal(be->ops->set_n_threads(be, 1 + it / 500, err, sizeof err), QR_OK);
    }
    assert_memory_equal(y1, y2, sizeof y1);
    assert_int_equal(be->ops->set_n_threads(be, 0, err, sizeof err), QR_ERR_INVALID_ARG);
    qr_backend_free(be);
}

/* topk_rows (the contract the CUDA kernel shares): each row's k largest in the sampler's order (value descending,
 * ties to the lower index, -0 equal to +0), the count of values above -inf, -1 for a row with a NaN or +inf. */
static void test_topk_rows(void **state) {
    (void)state;
    char err[256];
    qr_backend *be = NULL;
    qr_backend_cpu_params p = {.n_threads = 2};
    assert_int_equal(qr_backend_cpu_create(&p, &be, err, sizeof err), QR_OK);
    assert_non_null(be->ops->topk_rows);
    enum { R = 5, N = 300, K = 16 };
    static float x[R * N];
    fill(x, R * N, 2.0f);
    for (int i = 0; i < R * N; i++) x[i] = roundf(x[i] * 8.0f) / 8.0f; /* ties */
    x[0] = x[7] = -0.0f, x[3] = 0.0f;               /* row 0: signed zeros */
    for (int i = 0; i < N; i += 2) x[N + i] = -INFINITY; /* row 1: half -inf */
    x[2 * N + 10] = NAN;                            /* row 2: NaN */
    x[3 * N + 20] = INFINITY;                       /* row 3: +inf */
    static uint8_t out[R * (K * 8 + 4)];
    be->ops->topk_rows(be, x, R, N, K, out);
    const float *vals = (const float *)out;
    const int32_t *ids = (const int32_t *)(vals + R * K), *nfin = ids + R * K;
    assert_int_equal(nfin[2], -1);
    assert_int_equal(nfin[3], -1);
    assert_int_equal(nfin[1], N / 2);
    assert_int_equal(nfin[0], N);
    for (int r = 0; r < R; r++) {
        if (r == 2 || r == 3) continue;
        const float *row = x + r * N;
        bool used[N] = {false};
        for (int j = 0; j < K; j++) { /* the reference: the first of the best left */
            int best = -1;
            for (int i = 0; i < N; i++)
                if (!used[i] && (best < 0 || row[i] > row[best])) best = i;
            used[best] = true;
            assert_int_equal(ids[r * K + j], best);
            assert_true(vals[r * K + j] == row[best]);
        }
    }
    qr_backend_free(be);
}

/* cpu_expf (the exp of the SIMD softmax and SiLU) is within 2 ulp of exp over its whole range,
 * including the split-scale paths for tiny and huge results. */
/* The AVX2 activation quantizers write the same bytes as the plain C ones (act_quant.c), ties (x * id
 * exactly halfway between two codes), zeros and all-zero blocks included. */
static void test_act_quant_avx2(void **state) {
    (void)state;
    if (!qr_cpu_has_avx2()) return;
    const qr_type types[] = {QR_TYPE_Q8_0, QR_TYPE_Q8_1};
    for (int ti = 0; ti < 2; ti++) {
        qr_from_float_fn ref = qr_cpu_act_quantizer(types[ti]), fast = qr_cpu_act_quantizer_avx2(types[ti]);
        assert_non_null(ref);
        assert_non_null(fast);
        for (int rep = 0; rep < 200; rep++) {
            const int64_t n = 32 * (1 + rep % 24);
            float x[32 * 24];
            fill(x, n, rep % 3 == 0 ? 1e-3f : 30.0f);
            if (rep % 5 == 0) /* ties: amax 127 makes id 1, so k + 0.5 lands exactly halfway */
                for (int64_t i = 0; i < n; i++) x[i] = i % 32 == 0 ? 127.0f : (float)((int)(x[i] * 3.0f)) + 0.5f;
            if (rep % 7 == 0) memset(x, 0, 32 * sizeof(float));
            unsigned char a[34 * 24 + 64], b[34 * 24 + 64];
            memset(a, 0xAB, sizeof a);
            memset(b, 0xAB, sizeof b);
            ref(x, a, n);
            fast(x, b, n);
            assert_memory_equal(a, b, sizeof a);
        }
    }
}

static void test_expf(void **state) {
    (void)state;
    double worst = 0;
    for (float x = -103.0f; x < 88.7f; x += 0.00731f) {
        const double want = exp((double)x), got = cpu_expf(x);
        if (want < 1.2e-38) continue; /* subnormal results: flushed or approximate, like ggml */
        const double ulp = ldexp(1.0, ilogb(want) - 23);
        const double err = fabs(got - want) / ulp;
        if (err > worst) worst = err;
    }
    if (worst > 2.0) fail_msg("cpu_expf: %.2f ulp", worst);
    assert_true(cpu_expf(0.0f) == 1.0f);
    assert_true(cpu_expf(-INFINITY) == 0.0f);
    assert_true(isinf(cpu_expf(100.0f)));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_simd_selected),   cmocka_unit_test(test_elementwise), cmocka_unit_test(test_rmsnorm_softmax),
        cmocka_unit_test(test_rope),            cmocka_unit_test(test_attention),   cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_matmul_llama_cpp_paths), cmocka_unit_test(test_add_row),
        cmocka_unit_test(test_ops_threaded),    cmocka_unit_test(test_pool),        cmocka_unit_test(test_topk_rows),        cmocka_unit_test(test_expf), cmocka_unit_test(test_act_quant_avx2),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
