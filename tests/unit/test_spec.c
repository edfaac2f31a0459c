/* test_spec.c — speculative decoding (issue 34) on synthetic models: the n-gram lookup, greedy speculative
 * output token for token equal to plain greedy decoding (n-gram drafter, draft model, EAGLE-3 head), the vocabulary and
 * rollback checks at load time, and a chi-square test over 10,000 verifications that the sampled tokens
 * follow the target's distribution (with a control showing the test rejects the draft's own distribution). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "convert/synth.h"
#include "model/spec.h"
#include "quarrel.h"
#include "sampling/sampler.h"

enum { M_TARGET, M_DRAFT_Q8, M_DRAFT_OTHER, M_GEMMA, M_HYBRID, M_HEAD, M_COUNT };
static const qr_synth_options OPTS[M_COUNT] = {
    {.arch = "llama", .preset = "tiny", .type = "F16", .seed = 11, .n_threads = 2},
    {.arch = "llama", .preset = "tiny", .type = "Q8_0", .seed = 11, .n_threads = 2}, /* the target, quantized */
    {.arch = "llama", .preset = "tiny", .type = "F16", .seed = 12, .n_threads = 2},  /* other weights */
    {.arch = "gemma3", .preset = "tiny", .type = "F16", .seed = 11, .n_threads = 2},
    {.arch = "granitehybrid", .preset = "tiny", .type = "F16", .seed = 11, .n_threads = 2},
    {.arch = "eagle3", .preset = "tiny", .type = "F16", .seed = 13, .n_threads = 2}, /* an EAGLE-3 head for the target */
};
static struct {
    char path[M_COUNT][64];
    qr_model *m[M_COUNT];
    qr_tokenizer *tok;
} F;

static int setup(void **state) {
    (void)state;
    char err[256];
    for (int i = 0; i < M_COUNT; i++) {
        snprintf(F.path[i], sizeof F.path[i], "/tmp/quarrel_test_spec_XXXXXX");
        int fd = mkstemp(F.path[i]);
        if (fd < 0) return -1;
        close(fd);
        if (qr_synth_write(&OPTS[i], F.path[i], NULL, err, sizeof err) != QR_OK) return -1;
        qr_model_params mp = qr_model_default_params();
        mp.n_threads = 2;
        mp.backend = QR_BACKEND_CPU;
        if (qr_model_load(F.path[i], &mp, &F.m[i], err, sizeof err) != QR_OK) return -1;
    }
    return qr_tokenizer_from_model(F.m[M_TARGET], &F.tok, err, sizeof err) == QR_OK ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    qr_tokenizer_free(F.tok);
    for (int i = 0; i < M_COUNT; i++) {
        qr_model_free(F.m[i]);
        unlink(F.path[i]);
    }
    return 0;
}

static qr_context *make_ctx(qr_model *m, int32_t n_ctx) {
    qr_context_params cp = qr_context_default_params();
    cp.n_ctx = n_ctx;
    qr_context *ctx = NULL;
    char err[256];
    assert_int_equal(qr_context_create(m, &cp, &ctx, err, sizeof err), QR_OK);
    return ctx;
}

static void test_ngram_lookup(void **state) {
    (void)state;
    const int32_t h[] = {1, 2, 3, 4, 9, 1, 2, 3};
    int32_t d[8];
    /* the 3-gram "1 2 3" occurred at 0: what followed it, up to the end of the history */
    assert_int_equal(qr_spec_ngram_lookup(h, 8, 2, 4, 8, d), 5);
    const int32_t want[] = {4, 9, 1, 2, 3};
    assert_memory_equal(d, want, sizeof want);
    assert_int_equal(qr_spec_ngram_lookup(h, 8, 2, 4, 2, d), 2); /* max */
    const int32_t none[] = {5, 6, 7, 8};
    assert_int_equal(qr_spec_ngram_lookup(none, 4, 1, 4, 8, d), 0);
    /* the latest occurrence wins: "7 8" was followed by 1, then by 2 */
    const int32_t two[] = {7, 8, 1, 7, 8, 2, 7, 8};
    assert_int_equal(qr_spec_ngram_lookup(two, 8, 2, 2, 1, d), 1);
    assert_int_equal(d[0], 2);
    /* n-grams shorter than ngram_min are not looked up */
    const int32_t one[] = {5, 1, 6, 1};
    assert_int_equal(qr_spec_ngram_lookup(one, 4, 2, 4, 4, d), 0);
    assert_int_equal(qr_spec_ngram_lookup(one, 4, 1, 4, 4, d), 2);
}

typedef struct ids {
    int32_t v[256];
    int32_t n;
} ids;

static bool collect(qr_token t, const char *text, size_t len, void *user) {
    (void)text, (void)len;
    ids *o = user;
    if (t != QR_TOKEN_NULL && o->n < 256) o->v[o->n++] = t;
    return true;
}

/* Greedy generation of n tokens after a repetitive prompt, with spec or without. */
static void greedy_run(qr_context *ctx, qr_spec *spec, int32_t n, ids *out, qr_generate_result *res) {
    qr_token prompt[64];
    size_t np = 0;
    const char *text = "one two three four one two three four one two three";
    assert_int_equal(qr_tokenize(F.tok, text, strlen(text), true, false, prompt, 64, &np), QR_OK);
    qr_sampler_chain_params sp = qr_sampler_chain_default_params();
    sp.temperature = 0;
    qr_sampler_chain *smp = NULL;
    char err[256];
    assert_int_equal(qr_sampler_chain_create(qr_model_n_vocab(F.m[M_TARGET]), &sp, &smp, err, sizeof err), QR_OK);
    qr_generate_params gp = qr_generate_default_params();
    gp.n_predict = n;
    gp.ignore_eos = true;
    gp.spec = spec;
    qr_kv_clear(ctx);
    out->n = 0;
    assert_int_equal(qr_generate(ctx, F.tok, smp, prompt, np, &gp, collect, out, res, err, sizeof err), QR_OK);
    assert_int_equal(out->n, n);
    qr_sampler_chain_free(smp);
}

static void check_identity(qr_spec_params *p, bool need_accepted) {
    qr_context *ctx = make_ctx(F.m[M_TARGET], 512);
    qr_spec *spec = NULL;
    char err[512];
    assert_int_equal(qr_spec_create(ctx, p, &spec, err, sizeof err), QR_OK);
    ids a, b;
    qr_generate_result ra, rb;
    greedy_run(ctx, NULL, 160, &a, &ra);
    greedy_run(ctx, spec, 160, &b, &rb);
    assert_int_equal(ra.n_drafted, 0);
    assert_true(rb.n_drafted > 0); /* speculation happened */
    if (need_accepted) assert_true(rb.n_accepted > 0);
    assert_memory_equal(a.v, b.v, sizeof(int32_t) * 160);
    qr_spec_stats st;
    qr_spec_get_stats(spec, &st);
    assert_int_equal(st.n_drafted, rb.n_drafted);
    assert_int_equal(st.n_accepted, rb.n_accepted);
    /* the sequence holds the prompt and every generated token but the last, as without speculation */
    assert_int_equal(qr_kv_seq_len(ctx, 0), rb.n_prompt + 159);
    qr_spec_free(spec);
    qr_context_free(ctx);
}

static void test_greedy_identity_ngram(void **state) {
    (void)state;
    qr_spec_params p = qr_spec_default_params();
    p.ngram_min = 1;
    check_identity(&p, true);
}

static void test_greedy_identity_draft(void **state) {
    (void)state;
    qr_spec_params p = qr_spec_default_params();
    p.kind = QR_SPEC_DRAFT;
    p.draft_model = F.m[M_DRAFT_Q8];
    p.draft_p_min = 0.0f;
    check_identity(&p, true);
}

/* An EAGLE-3 head with random weights: it drafts (what it drafts is checked against llama.cpp's own drafting in
 * tests/ref/test_eagle3_head.py), the target rejects nearly all of it, and the output stays plain greedy's. */
static void test_greedy_identity_eagle3(void **state) {
    (void)state;
    qr_spec_params p = qr_spec_default_params();
    p.kind = QR_SPEC_EAGLE3;
    p.draft_model = F.m[M_HEAD];
    p.draft_p_min = 0.0f;
    check_identity(&p, false);
}

/* EAGLE-3 after a gap: the head has no states for the sequence's first positions (as after a prefix-cache hit, whose
 * rows the target never recomputes): it restarts at the first position it is handed and drafts from there; and a
 * draft asked for where the target's states are not at hand is none (not an error). */
static void test_eagle3_gap(void **state) {
    (void)state;
    qr_context *ctx = make_ctx(F.m[M_TARGET], 256);
    qr_spec_params p = qr_spec_default_params();
    p.kind = QR_SPEC_EAGLE3;
    p.draft_model = F.m[M_HEAD];
    p.draft_p_min = 0.0f;
    qr_spec *spec = NULL;
    char err[512];
    assert_int_equal(qr_spec_create(ctx, &p, &spec, err, sizeof err), QR_OK);
    int32_t hist[16];
    for (int i = 0; i < 16; i++) hist[i] = 40 + 7 * i;
    const qr_batch b = {.n_tokens = 10, .token = hist}; /* positions 0..9, without telling the drafter */
    assert_int_equal(qr_decode(ctx, &b, err, sizeof err), QR_OK);
    int32_t draft[4];
    assert_int_equal(qr_spec_draft(spec, 0, hist, 11, 4, NULL, draft, err, sizeof err), 0); /* no states: none */
    qr_spec_seq_reset(spec, 0);
    const qr_batch b2 = {.n_tokens = 2, .token = hist + 10}; /* positions 10, 11: the drafter's first */
    assert_int_equal(qr_decode(ctx, &b2, err, sizeof err), QR_OK);
    assert_int_equal(qr_spec_observe(spec, &b2, err, sizeof err), QR_OK);
    const int32_t k = qr_spec_draft(spec, 0, hist, 13, 4, NULL, draft, err, sizeof err);
    assert_true(k > 0);
    for (int32_t i = 0; i < k; i++) assert_true(draft[i] >= 0 && draft[i] < qr_model_n_vocab(F.m[M_TARGET]));
    /* the head holds position 11's row from the draft's seed on, nothing before 10 */
    assert_true(qr_kv_seq_len(spec->dctx, 0) >= 2 && qr_kv_seq_len(spec->dctx, 0) <= 2 + k);
    qr_spec_free(spec);
    qr_context_free(ctx);
}

static void test_load_checks(void **state) {
    (void)state;
    qr_context *ctx = make_ctx(F.m[M_TARGET], 256);
    qr_spec *spec = NULL;
    char err[512];
    qr_spec_params p = qr_spec_default_params();
    p.kind = QR_SPEC_DRAFT;
    p.draft_model = F.m[M_GEMMA];
    assert_int_equal(qr_spec_create(ctx, &p, &spec, err, sizeof err), QR_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "vocabulary is incompatible"));
    assert_null(spec);
    p.draft_model = F.m[M_HYBRID];
    assert_int_equal(qr_spec_create(ctx, &p, &spec, err, sizeof err), QR_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "rolled back"));
    p.draft_model = NULL;
    assert_int_equal(qr_spec_create(ctx, &p, &spec, err, sizeof err), QR_ERR_INVALID_ARG);
    p = qr_spec_default_params();
    p.draft_max = QR_SPEC_DRAFT_MAX + 1;
    assert_int_equal(qr_spec_create(ctx, &p, &spec, err, sizeof err), QR_ERR_INVALID_ARG);
    qr_context_free(ctx);
    /* a target whose state cannot be rolled back */
    qr_context *hc = make_ctx(F.m[M_HYBRID], 256);
    assert_int_equal(qr_spec_create(hc, NULL, &spec, err, sizeof err), QR_ERR_UNSUPPORTED);
    qr_context_free(hc);
}

/* Upper tail of the chi-square distribution with df degrees of freedom at x: Q(df/2, x/2), the regularized
 * upper incomplete gamma function (series below a + 1, continued fraction above). */
static double chi2_sf(double x, int df) {
    const double a = df / 2.0, z = x / 2.0;
    if (z <= 0) return 1.0;
    const double lg = lgamma(a);
    if (z < a + 1) {
        double sum = 1.0 / a, term = sum;
        for (int n = 1; n < 1000; n++) {
            term *= z / (a + n);
            sum += term;
            if (term < sum * 1e-15) break;
        }
        return 1.0 - sum * exp(-z + a * log(z) - lg);
    }
    double b = z + 1 - a, c = 1e300, d = 1 / b, h = d;
    for (int i = 1; i < 1000; i++) {
        const double an = -i * (i - a);
        b += 2;
        d = an * d + b;
        if (fabs(d) < 1e-300) d = 1e-300;
        c = b + an / c;
        if (fabs(c) < 1e-300) c = 1e-300;
        d = 1 / d;
        const double del = d * c;
        h *= del;
        if (fabs(del - 1) < 1e-15) break;
    }
    return exp(-z + a * log(z) - lg) * h;
}

/* Chi-square p-value of counts[0..nv) (n samples) against probabilities prob[0..nv): cells with an
 * expected count below 5 are pooled into one. */
static double chi2_p(const int32_t *counts, const double *prob, int32_t nv, int32_t n) {
    double stat = 0, pool_e = 0, pool_o = 0;
    int cells = 0;
    for (int32_t t = 0; t < nv; t++) {
        const double e = prob[t] * n;
        if (e < 5) {
            pool_e += e, pool_o += counts[t];
            continue;
        }
        stat += (counts[t] - e) * (counts[t] - e) / e;
        cells++;
    }
    if (pool_e > 0) stat += (pool_o - pool_e) * (pool_o - pool_e) / pool_e, cells++;
    if (cells < 2) return pool_o == pool_e ? 1.0 : 0.0; /* one cell: the counts match or they do not */
    return chi2_sf(stat, cells - 1);
}

/* N verifications from one state with draft model `draft` at temperature temp: the first token out of each
 * must follow the target's distribution. */
static void chi_square_run(int draft_model, float temp) {
    const bool eagle3 = draft_model == M_HEAD;
    enum { N = 10000 };
    const int32_t nv = qr_model_n_vocab(F.m[M_TARGET]);
    qr_context *ctx = make_ctx(F.m[M_TARGET], 256);
    qr_spec *spec = NULL;
    char err[512];
    qr_spec_params p = qr_spec_default_params();
    p.kind = eagle3 ? QR_SPEC_EAGLE3 : QR_SPEC_DRAFT;
    p.draft_model = F.m[draft_model];
    p.draft_max = 2;
    p.draft_p_min = 0.0f;
    assert_int_equal(qr_spec_create(ctx, &p, &spec, err, sizeof err), QR_OK);
    qr_sampler_params sp;
    qr_sampler_params_default(&sp);
    sp.temperature = temp;
    sp.top_k = 0, sp.top_p = 1.0f, sp.min_p = 0.0f;
    sp.seed = 7; /* fixed: the test is deterministic */
    qr_sampler *smp = NULL;
    assert_int_equal(qr_sampler_create(&sp, nv, &smp, err, sizeof err), QR_OK);
    int32_t prompt[16];
    size_t np = 0;
    assert_int_equal(qr_tokenize(F.tok, "the cat sat on", 14, true, false, prompt, 16, &np), QR_OK);
    /* the target's distribution after the prompt: a plain one-row decode of its last token */
    qr_batch b = {.n_tokens = (int32_t)np - 1, .token = prompt};
    assert_int_equal(qr_decode(ctx, &b, err, sizeof err), QR_OK);
    assert_int_equal(qr_spec_observe(spec, &b, err, sizeof err), QR_OK); /* an EAGLE-3 head's states */
    qr_batch last = {.n_tokens = 1, .token = prompt + np - 1};
    assert_int_equal(qr_decode(ctx, &last, err, sizeof err), QR_OK);
    qr_token_prob *dist = malloc(sizeof *dist * (size_t)nv);
    double *prob = calloc((size_t)nv, sizeof *prob), *qprob = calloc((size_t)nv, sizeof *qprob);
    int32_t *counts = calloc((size_t)nv, sizeof *counts), *qcounts = calloc((size_t)nv, sizeof *qcounts);
    int32_t n_dist = 0;
    assert_int_equal(qr_sampler_dist(smp, qr_get_logits(ctx, -1), dist, &n_dist, err, sizeof err), QR_OK);
    for (int32_t i = 0; i < n_dist; i++) prob[dist[i].token] = dist[i].p;
    qr_kv_seq_rm(ctx, 0, (int32_t)np - 1, -1);
    int32_t n_rejected = 0;
    for (int i = 0; i < N; i++) {
        int32_t draft[2], out[3], n_out = 0;
        /* every sample from the same state, with a draft: no pause or shorter draft after a rejection (the draft
         * model's cache keeps the prompt; the PRNG runs on; no penalties, so the sampler's history is moot) */
        spec->skip[0] = spec->fails[0] = 0;
        spec->cur_max[0] = 2;
        const int32_t k = qr_spec_draft(spec, 0, prompt, (int32_t)np, 2, smp, draft, err, sizeof err);
        assert_int_equal(k, 2);
        int32_t nq = 0;
        const qr_token_prob *q = qr_spec_q(spec, 0, 0, &nq);
        assert_non_null(q); /* a sampled draft with its distribution */
        if (i == 0)
            for (int32_t t = 0; t < nq; t++) qprob[q[t].token] = q[t].p;
        if (i == 0) print_message("draft distribution: %d tokens, top %.4f\n", nq, q[0].p);
        qcounts[draft[0]]++;
        assert_int_equal(qr_spec_verify(spec, smp, 0, prompt[np - 1], draft, k, out, &n_out, err, sizeof err), QR_OK);
        counts[out[0]]++;
        n_rejected += out[0] != draft[0];
        assert_int_equal(qr_kv_seq_len(ctx, 0), (int32_t)np + n_out - 1);
        qr_kv_seq_rm(ctx, 0, (int32_t)np - 1, -1);
        if (eagle3) { /* the head drafts from the target's states at the prompt's last decoded row: again */
            qr_kv_seq_rm(ctx, 0, (int32_t)np - 2, -1);
            const qr_batch again = {.n_tokens = 1, .token = prompt + np - 2};
            assert_int_equal(qr_decode(ctx, &again, err, sizeof err), QR_OK);
            assert_int_equal(qr_spec_observe(spec, &again, err, sizeof err), QR_OK);
        }
    }
    const double pv = chi2_p(counts, prob, nv, N);
    print_message("chi-square: p = %.4f over %d samples (%d drafts rejected)\n", pv, N, n_rejected);
    assert_true(pv > 0.01);
    assert_true(n_rejected > N / 20);         /* the residual draw was exercised */
    assert_true(n_rejected < N - N / 20 || draft_model != M_DRAFT_Q8); /* and acceptance */
    /* control: the drafts themselves follow q, and the same test rejects them as samples of the target's p */
    print_message("control: drafts against q: p = %.4f, against the target: p = %.3g\n", chi2_p(qcounts, qprob, nv, N),
                  chi2_p(qcounts, prob, nv, N));
    assert_true(chi2_p(qcounts, qprob, nv, N) > 0.01);
    assert_true(chi2_p(qcounts, prob, nv, N) < 0.01);
    free(dist);
    free(prob);
    free(qprob);
    free(counts);
    free(qcounts);
    qr_sampler_free(smp);
    qr_spec_free(spec);
    qr_context_free(ctx);
}

static void test_chi_square(void **state) {
    (void)state;
    chi_square_run(M_DRAFT_Q8, 0.5f);    /* a close draft: most drafts accepted */
    chi_square_run(M_DRAFT_OTHER, 0.5f); /* another model's weights: mostly the residual draw */
    chi_square_run(M_HEAD, 0.5f);        /* an EAGLE-3 head's drafts (d2t-mapped), mostly the residual draw */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ngram_lookup),
        cmocka_unit_test(test_greedy_identity_ngram),
        cmocka_unit_test(test_greedy_identity_draft),
        cmocka_unit_test(test_greedy_identity_eagle3),
        cmocka_unit_test(test_eagle3_gap),
        cmocka_unit_test(test_load_checks),
        cmocka_unit_test(test_chi_square),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
