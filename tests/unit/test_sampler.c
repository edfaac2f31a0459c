/* test_sampler.c — the sampler chain's distributions, determinism, penalties, errors; stop strings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "sampling/sampler.h"

static qr_sampler *make(const qr_sampler_params *p, int32_t n_vocab) {
    qr_sampler *s = NULL;
    char err[256];
    qr_status st = qr_sampler_create(p, n_vocab, &s, err, sizeof err);
    if (st != QR_OK) fail_msg("qr_sampler_create: %s", err);
    return s;
}

static int32_t sample1(qr_sampler *s, const float *logits) {
    qr_sample_result r;
    char err[256];
    qr_status st = qr_sampler_sample(s, logits, &r, err, sizeof err);
    if (st != QR_OK) fail_msg("qr_sampler_sample: %s", err);
    return r.token;
}

/* Deterministic test logits from a tiny LCG. */
static void fill_logits(float *l, int32_t n, uint32_t seed) {
    uint32_t x = seed * 2654435761u + 1;
    for (int32_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        l[i] = (float)((x >> 8) & 0xffff) / 65536.0f * 8.0f - 4.0f;
    }
}

static void expect_invalid(const qr_sampler_params *p, const char *needle) {
    char err[256] = "";
    qr_sampler *s = NULL;
    assert_int_equal(qr_sampler_create(p, 100, &s, err, sizeof err), QR_ERR_INVALID_ARG);
    assert_null(s);
    if (!strstr(err, needle)) fail_msg("error '%s' does not mention '%s'", err, needle);
}

static void test_invalid_params(void **state) {
    (void)state;
    qr_sampler_params p;
    qr_sampler_params_default(&p);
    p.top_k = -1;
    expect_invalid(&p, "top_k");
    qr_sampler_params_default(&p);
    p.top_p = -0.01f;
    expect_invalid(&p, "top_p");
    p.top_p = 1.5f;
    expect_invalid(&p, "top_p");
    p.top_p = NAN;
    expect_invalid(&p, "top_p");
    qr_sampler_params_default(&p);
    p.temperature = -0.5f;
    expect_invalid(&p, "temperature");
    p.temperature = NAN;
    expect_invalid(&p, "temperature");
    qr_sampler_params_default(&p);
    p.min_p = 1.5f;
    expect_invalid(&p, "min_p");
    p.min_p = NAN;
    expect_invalid(&p, "min_p");
    qr_sampler_params_default(&p);
    p.repeat_penalty = 0.0f;
    expect_invalid(&p, "repeat_penalty");
    qr_sampler_params_default(&p);
    p.frequency_penalty = NAN;
    expect_invalid(&p, "frequency_penalty");
    qr_sampler_params_default(&p);
    p.penalty_last_n = -1;
    expect_invalid(&p, "penalty_last_n");
    qr_sampler_params_default(&p);
    p.n_logprobs = 21;
    expect_invalid(&p, "n_logprobs");
    qr_sampler_params_default(&p);
    qr_logit_bias b = {100, 1.0f};
    p.logit_bias = &b;
    p.n_logit_bias = 1;
    expect_invalid(&p, "token 100");
    b = (qr_logit_bias){3, NAN};
    expect_invalid(&p, "logit_bias");
    /* and n_vocab itself */
    qr_sampler_params_default(&p);
    qr_sampler *s = NULL;
    char err[128];
    assert_int_equal(qr_sampler_create(&p, 0, &s, err, sizeof err), QR_ERR_INVALID_ARG);
    /* a valid set passes */
    assert_int_equal(qr_sampler_params_validate(&p, 100, err, sizeof err), QR_OK);
}

static void test_greedy_is_argmax(void **state) {
    (void)state;
    qr_sampler_params p;
    qr_sampler_params_greedy(&p);
    enum { N = 1000 };
    float l[N];
    qr_sampler *s = make(&p, N);
    for (uint32_t t = 0; t < 50; t++) {
        fill_logits(l, N, t);
        int32_t best = 0;
        for (int32_t i = 1; i < N; i++)
            if (l[i] > l[best]) best = i;
        assert_int_equal(sample1(s, l), best);
    }
    /* ties go to the lowest id */
    for (int32_t i = 0; i < N; i++) l[i] = 0.0f;
    l[7] = l[3] = l[900] = 1.0f;
    assert_int_equal(sample1(s, l), 3);
    qr_sampler_free(s);
}

/* top-k = 1 with temperature 1 gives the argmax whatever the seed. */
static void test_top_k1_equals_greedy(void **state) {
    (void)state;
    enum { N = 3000 };
    float l[N];
    qr_sampler_params p, g;
    qr_sampler_params_default(&p);
    p.temperature = 1.0f;
    p.top_k = 1;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    qr_sampler_params_greedy(&g);
    for (uint64_t seed = 0; seed < 20; seed++) {
        p.seed = seed;
        qr_sampler *s = make(&p, N), *gs = make(&g, N);
        fill_logits(l, N, (uint32_t)seed + 100);
        assert_int_equal(sample1(s, l), sample1(gs, l));
        qr_sampler_free(s);
        qr_sampler_free(gs);
    }
}

static void test_seed_reproduces(void **state) {
    (void)state;
    enum { N = 500, STEPS = 200 };
    float l[N];
    fill_logits(l, N, 42);
    for (int32_t i = 0; i < N; i++) l[i] *= 0.3f; /* flat enough that draws vary */
    qr_sampler_params p;
    qr_sampler_params_default(&p);
    p.seed = 1234;
    p.repeat_penalty = 1.1f;
    int32_t a[STEPS], b[STEPS], c[STEPS];
    qr_sampler *s1 = make(&p, N), *s2 = make(&p, N);
    p.seed = 1235;
    qr_sampler *s3 = make(&p, N);
    for (int i = 0; i < STEPS; i++) {
        a[i] = sample1(s1, l);
        b[i] = sample1(s2, l);
        c[i] = sample1(s3, l);
    }
    assert_memory_equal(a, b, sizeof a);
    assert_memory_not_equal(a, c, sizeof a);
    /* reset restarts the PRNG and forgets the penalty history */
    qr_sampler_reset(s1);
    for (int i = 0; i < STEPS; i++) b[i] = sample1(s1, l);
    assert_memory_equal(a, b, sizeof a);
    assert_int_equal(qr_sampler_seed(s1), 1234);
    qr_sampler_free(s1);
    qr_sampler_free(s2);
    qr_sampler_free(s3);
    /* a random seed is reported and is not the sentinel */
    p.seed = QR_SAMPLER_SEED_RANDOM;
    qr_sampler *r = make(&p, N);
    assert_true(qr_sampler_seed(r) != QR_SAMPLER_SEED_RANDOM);
    qr_sampler_free(r);
}

/* Draws `draws` tokens and returns counts[n]. */
static void histogram(const qr_sampler_params *p, const float *l, int32_t n, int draws, int *counts) {
    qr_sampler *s = make(p, n);
    memset(counts, 0, sizeof *counts * (size_t)n);
    for (int i = 0; i < draws; i++) counts[sample1(s, l)]++;
    qr_sampler_free(s);
}

static void plain_params(qr_sampler_params *p, uint64_t seed) {
    qr_sampler_params_default(p);
    p->temperature = 1.0f;
    p->top_k = 0;
    p->top_p = 1.0f;
    p->min_p = 0.0f;
    p->seed = seed;
    p->penalty_last_n = 0;
}

/* With no truncation and temperature 1, frequencies follow the softmax. */
static void test_distribution_matches_softmax(void **state) {
    (void)state;
    const float probs[4] = {0.1f, 0.2f, 0.3f, 0.4f};
    float l[4];
    for (int i = 0; i < 4; i++) l[i] = logf(probs[i]) + 3.0f;
    qr_sampler_params p;
    plain_params(&p, 7);
    enum { DRAWS = 200000 };
    int counts[4];
    histogram(&p, l, 4, DRAWS, counts);
    for (int i = 0; i < 4; i++) {
        double f = (double)counts[i] / DRAWS;
        double sd = sqrt(probs[i] * (1 - probs[i]) / DRAWS);
        if (fabs(f - probs[i]) > 5 * sd) fail_msg("token %d: frequency %.4f, expected %.4f", i, f, (double)probs[i]);
    }
    /* temperature 2 flattens: p_i ∝ sqrt(probs_i) */
    p.temperature = 2.0f;
    histogram(&p, l, 4, DRAWS, counts);
    double z = 0;
    for (int i = 0; i < 4; i++) z += sqrt(probs[i]);
    for (int i = 0; i < 4; i++) {
        double e = sqrt(probs[i]) / z, f = (double)counts[i] / DRAWS, sd = sqrt(e * (1 - e) / DRAWS);
        if (fabs(f - e) > 5 * sd) fail_msg("T=2 token %d: frequency %.4f, expected %.4f", i, f, e);
    }
}

/* top-p keeps the smallest most-likely set whose mass reaches p, then renormalises. */
static void test_top_p_small(void **state) {
    (void)state;
    const float probs[4] = {0.05f, 0.5f, 0.15f, 0.3f};
    float l[4];
    for (int i = 0; i < 4; i++) l[i] = logf(probs[i]);
    qr_sampler_params p;
    plain_params(&p, 11);
    enum { DRAWS = 100000 };
    int counts[4];
    p.top_p = 0.75f; /* 0.5 + 0.3 = 0.8 >= 0.75: keeps tokens 1 and 3 */
    histogram(&p, l, 4, DRAWS, counts);
    assert_int_equal(counts[0], 0);
    assert_int_equal(counts[2], 0);
    double f1 = (double)counts[1] / DRAWS;
    assert_true(fabs(f1 - 0.5 / 0.8) < 0.01);
    p.top_p = 0.85f; /* needs token 2 as well */
    histogram(&p, l, 4, DRAWS, counts);
    assert_int_equal(counts[0], 0);
    assert_true(counts[2] > 0);
    p.top_p = 0.4f; /* the top token alone */
    histogram(&p, l, 4, 1000, counts);
    assert_int_equal(counts[1], 1000);
    p.top_p = 0.0f; /* OpenAI's and llama.cpp's top_p 0: the top token alone */
    histogram(&p, l, 4, 1000, counts);
    assert_int_equal(counts[1], 1000);
}

static int cmp_desc(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x > y ? -1 : x < y ? 1 : 0;
}

/* On a large vocabulary (exercises the incremental partial sort), the sampled support of top-p with
 * a huge temperature (nearly uniform over what survives) is exactly the expected nucleus. */
static void test_top_p_large_vocab_support(void **state) {
    (void)state;
    enum { N = 2000 };
    static float l[N], sorted[N];
    fill_logits(l, N, 9);
    memcpy(sorted, l, sizeof l);
    qsort(sorted, N, sizeof *sorted, cmp_desc);
    double z = 0;
    for (int i = 0; i < N; i++) z += exp((double)sorted[i] - sorted[0]);
    double cum = 0;
    int keep = 0;
    while (keep < N) {
        cum += exp((double)sorted[keep] - sorted[0]) / z;
        keep++;
        if (cum >= 0.3) break;
    }
    assert_true(keep > 64); /* beyond the first partial-sort window */
    float thresh = sorted[keep - 1];
    qr_sampler_params p;
    plain_params(&p, 3);
    p.top_p = 0.3f;
    p.temperature = 1000.0f;
    static int counts[N];
    histogram(&p, l, N, 40 * keep, counts); /* ~40 draws per kept token: all of them show up */
    int support = 0;
    for (int i = 0; i < N; i++) {
        if (counts[i]) {
            support++;
            assert_true(l[i] >= thresh);
        } else {
            assert_true(l[i] < thresh);
        }
    }
    assert_int_equal(support, keep);
}

/* top-k with k above the heap limit (quickselect path): support is exactly the k largest. */
static void test_top_k_large(void **state) {
    (void)state;
    enum { N = 1500, K = 600, DRAWS = 30 * K };
    static float l[N], sorted[N];
    fill_logits(l, N, 5);
    memcpy(sorted, l, sizeof l);
    qsort(sorted, N, sizeof *sorted, cmp_desc);
    assert_true(sorted[K - 1] > sorted[K]);
    qr_sampler_params p;
    plain_params(&p, 99);
    p.top_k = K;
    p.temperature = 1000.0f;
    static int counts[N];
    histogram(&p, l, N, DRAWS, counts);
    int support = 0;
    for (int i = 0; i < N; i++) {
        if (counts[i]) support++;
        if (l[i] >= sorted[K - 1]) assert_true(counts[i] > 0);
        else assert_int_equal(counts[i], 0);
    }
    assert_int_equal(support, K);
    /* small k (heap path) too */
    p.top_k = 5;
    histogram(&p, l, N, 2000, counts);
    support = 0;
    for (int i = 0; i < N; i++) {
        if (counts[i]) support++;
        if (l[i] < sorted[4]) assert_int_equal(counts[i], 0);
    }
    assert_int_equal(support, 5);
}

static void test_min_p(void **state) {
    (void)state;
    const float probs[4] = {0.5f, 0.3f, 0.15f, 0.05f};
    float l[4];
    for (int i = 0; i < 4; i++) l[i] = logf(probs[i]);
    qr_sampler_params p;
    plain_params(&p, 5);
    int counts[4];
    p.min_p = 0.2f; /* keeps p >= 0.1 */
    histogram(&p, l, 4, 50000, counts);
    assert_true(counts[0] > 0 && counts[1] > 0 && counts[2] > 0);
    assert_int_equal(counts[3], 0);
    p.min_p = 0.5f; /* keeps p >= 0.25 */
    histogram(&p, l, 4, 50000, counts);
    assert_true(counts[0] > 0 && counts[1] > 0);
    assert_int_equal(counts[2] + counts[3], 0);
}

static void test_penalties(void **state) {
    (void)state;
    qr_sampler_params p;
    plain_params(&p, 1);
    p.repeat_penalty = 2.0f;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    p.penalty_last_n = 3;
    qr_sampler *s = make(&p, 5);
    /* history 4,0,0,1: the window of 3 holds 0,0,1 */
    assert_int_equal(qr_sampler_accept(s, 4), QR_OK);
    assert_int_equal(qr_sampler_accept(s, 0), QR_OK);
    assert_int_equal(qr_sampler_accept(s, 0), QR_OK);
    assert_int_equal(qr_sampler_accept(s, 1), QR_OK);
    assert_int_equal(qr_sampler_accept(s, 5), QR_ERR_INVALID_ARG);
    float l[5] = {2.0f, -2.0f, 1.0f, 0.5f, 3.0f};
    qr_sampler_apply_penalties(s, l);
    assert_float_equal(l[0], 2.0f / 2 - 2 * 0.5f - 0.25f, 1e-6);
    assert_float_equal(l[1], -2.0f * 2 - 1 * 0.5f - 0.25f, 1e-6);
    assert_float_equal(l[2], 1.0f, 0);
    assert_float_equal(l[3], 0.5f, 0);
    assert_float_equal(l[4], 3.0f, 0); /* slid out of the window */
    /* applying twice with the same history gives the same result (counts restored) */
    float l2[5] = {2.0f, -2.0f, 1.0f, 0.5f, 3.0f};
    qr_sampler_apply_penalties(s, l2);
    assert_memory_equal(l, l2, sizeof l);
    qr_sampler_free(s);

    /* greedy with a repeat penalty moves off a repeated token */
    qr_sampler_params g;
    qr_sampler_params_greedy(&g);
    g.repeat_penalty = 1.5f;
    s = make(&g, 3);
    float l3[3] = {1.0f, 0.8f, 0.1f};
    assert_int_equal(sample1(s, l3), 0); /* accepted into the history */
    assert_int_equal(sample1(s, l3), 1); /* 1/1.5 < 0.8 */
    qr_sampler_free(s);
}

static void test_logit_bias(void **state) {
    (void)state;
    qr_sampler_params p;
    qr_sampler_params_greedy(&p);
    qr_logit_bias b[2] = {{2, -INFINITY}, {0, 0.5f}};
    p.logit_bias = b;
    p.n_logit_bias = 2;
    qr_sampler *s = make(&p, 3);
    b[0].token = 1; /* the sampler copied the array: changing it now has no effect */
    float l[3] = {1.0f, 1.2f, 5.0f};
    assert_int_equal(sample1(s, l), 0); /* 2 banned, token 0 biased to 1.5 > 1.2 */
    qr_sampler_free(s);
}

static void test_logit_bias_values(void **state) {
    (void)state;
    qr_sampler_params p;
    qr_sampler_params_greedy(&p);
    qr_logit_bias b[2] = {{2, -INFINITY}, {0, 0.5f}};
    p.logit_bias = b;
    p.n_logit_bias = 2;
    qr_sampler *s = make(&p, 3);
    float l[3] = {1.0f, 1.2f, 5.0f};
    qr_sampler_apply_penalties(s, l);
    assert_float_equal(l[0], 1.5f, 1e-6);
    assert_true(isinf(l[2]) && l[2] < 0);
    float l2[3] = {1.0f, 1.2f, 5.0f};
    assert_int_equal(sample1(s, l2), 0);
    qr_sampler_free(s);
    /* sampling with everything banned is an error, for greedy and for the full chain */
    qr_logit_bias all[2] = {{0, -INFINITY}, {1, -INFINITY}};
    p.logit_bias = all;
    for (int mode = 0; mode < 2; mode++) {
        if (mode) plain_params(&p, 1), p.logit_bias = all;
        p.n_logit_bias = 2;
        s = make(&p, 2);
        float l3[2] = {0.0f, 1.0f};
        qr_sample_result r;
        char err[128];
        assert_int_equal(qr_sampler_sample(s, l3, &r, err, sizeof err), QR_ERR_INVALID_ARG);
        assert_non_null(strstr(err, "-inf"));
        qr_sampler_free(s);
    }
}

static void test_nan_logit(void **state) {
    (void)state;
    qr_sampler_params p;
    qr_sampler_params_default(&p);
    qr_sampler *s = make(&p, 4);
    float l[4] = {0.0f, NAN, 1.0f, 2.0f};
    qr_sample_result r;
    char err[128];
    assert_int_equal(qr_sampler_sample(s, l, &r, err, sizeof err), QR_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "token 1"));
    qr_sampler_free(s);
}

static void test_logprobs(void **state) {
    (void)state;
    enum { N = 300 };
    float l[N];
    fill_logits(l, N, 77);
    qr_sampler_params p;
    plain_params(&p, 5);
    p.logprobs = true;
    p.n_logprobs = 5;
    p.repeat_penalty = 1.3f; /* logprobs are reported under the raw logits, not the penalised ones */
    p.penalty_last_n = 8;
    qr_sampler *s = make(&p, N);
    double z = 0;
    float mx = -INFINITY;
    for (int i = 0; i < N; i++) mx = fmaxf(mx, l[i]);
    for (int i = 0; i < N; i++) z += exp((double)l[i] - mx);
    double lse = mx + log(z);
    for (int step = 0; step < 5; step++) {
        qr_sample_result r;
        char err[128];
        assert_int_equal(qr_sampler_sample(s, l, &r, err, sizeof err), QR_OK);
        assert_float_equal(r.logprob, l[r.token] - lse, 1e-4);
        assert_int_equal(r.n_top, 5);
        for (int i = 0; i < 5; i++) {
            assert_float_equal(r.top[i].logprob, l[r.top[i].token] - lse, 1e-4);
            if (i) assert_true(r.top[i].logprob <= r.top[i - 1].logprob);
        }
        int32_t best = 0;
        for (int i = 1; i < N; i++)
            if (l[i] > l[best]) best = i;
        assert_int_equal(r.top[0].token, best);
    }
    qr_sampler_free(s);
    /* without logprobs nothing is reported */
    p.logprobs = false;
    s = make(&p, N);
    qr_sample_result r;
    assert_int_equal(qr_sampler_sample(s, l, &r, NULL, 0), QR_OK);
    assert_int_equal(r.n_top, 0);
    qr_sampler_free(s);
}

/* ---- stop strings ---------------------------------------------------------------------------- */

static void test_safe_prefix(void **state) {
    (void)state;
    const char *stops[] = {"</s>", "STOP"};
    int32_t m;
    assert_int_equal(qr_stop_safe_prefix(stops, 2, "hello", 5, &m), 5);
    assert_int_equal(m, -1);
    assert_int_equal(qr_stop_safe_prefix(stops, 2, "hello</", 7, &m), 5);
    assert_int_equal(qr_stop_safe_prefix(stops, 2, "hello</s>world", 14, &m), 5);
    assert_int_equal(m, 0);
    assert_int_equal(qr_stop_safe_prefix(stops, 2, "aSTOPb</s>", 10, &m), 1);
    assert_int_equal(m, 1);
    assert_int_equal(qr_stop_safe_prefix(stops, 2, "xST", 3, &m), 1);
    /* incomplete UTF-8 at the end is held back: "é" is C3 A9, "€" is E2 82 AC */
    assert_int_equal(qr_stop_safe_prefix(stops, 0, "ab\xC3", 3, &m), 2);
    assert_int_equal(qr_stop_safe_prefix(stops, 0, "ab\xC3\xA9", 4, &m), 4);
    assert_int_equal(qr_stop_safe_prefix(stops, 0, "\xE2\x82", 2, &m), 0);
    assert_int_equal(qr_stop_safe_prefix(stops, 0, "\xE2\x82\xAC", 3, &m), 3);
}

typedef struct collected {
    char text[256];
    size_t len;
} collected;

static qr_stop_result feed(qr_stop *s, const char *piece, bool eog, collected *c) {
    qr_stop_result r;
    assert_int_equal(qr_stop_feed(s, piece, strlen(piece), eog, &r), QR_OK);
    assert_true(c->len + r.emit_len < sizeof c->text);
    memcpy(c->text + c->len, r.emit, r.emit_len);
    c->len += r.emit_len;
    c->text[c->len] = 0;
    return r;
}

static void test_stop_across_tokens(void **state) {
    (void)state;
    const char *stops[] = {"<|end|>", "\n\n"};
    qr_stop *s = NULL;
    char err[128];
    assert_int_equal(qr_stop_create(stops, 2, 0, &s, err, sizeof err), QR_OK);
    collected c = {0};
    qr_stop_result r = feed(s, "Hello", false, &c);
    assert_int_equal(r.finish, QR_FINISH_NONE);
    assert_string_equal(c.text, "Hello");
    r = feed(s, " wor<|", false, &c);
    assert_string_equal(c.text, "Hello wor"); /* "<|" held back */
    r = feed(s, "x", false, &c);              /* "<|x" cannot become a stop: released */
    assert_string_equal(c.text, "Hello wor<|x");
    r = feed(s, "ld<|en", false, &c);
    assert_string_equal(c.text, "Hello wor<|xld");
    r = feed(s, "d|> trailing", false, &c);
    assert_int_equal(r.finish, QR_FINISH_STOP);
    assert_int_equal(r.stop_index, 0);
    assert_string_equal(c.text, "Hello wor<|xld");
    assert_string_equal(qr_finish_reason_str(r.finish), "stop");
    /* after a finish nothing more comes out */
    r = feed(s, "more", false, &c);
    assert_int_equal(r.finish, QR_FINISH_STOP);
    assert_int_equal(r.emit_len, 0);
    qr_stop_free(s);
}

static void test_stop_length_and_eog(void **state) {
    (void)state;
    const char *stops[] = {"###"};
    qr_stop *s = NULL;
    assert_int_equal(qr_stop_create(stops, 1, 3, &s, NULL, 0), QR_OK);
    collected c = {0};
    feed(s, "a", false, &c);
    feed(s, "#", false, &c); /* held */
    assert_string_equal(c.text, "a");
    qr_stop_result r = feed(s, "#", false, &c); /* third token: length; held text is released */
    assert_int_equal(r.finish, QR_FINISH_LENGTH);
    assert_string_equal(c.text, "a##");
    assert_int_equal(qr_stop_n_tokens(s), 3);
    assert_string_equal(qr_finish_reason_str(r.finish), "length");
    qr_stop_free(s);

    assert_int_equal(qr_stop_create(stops, 1, 0, &s, NULL, 0), QR_OK);
    memset(&c, 0, sizeof c);
    feed(s, "x\xC3", false, &c); /* half a UTF-8 character is held */
    assert_string_equal(c.text, "x");
    feed(s, "\xA9#", false, &c);
    assert_string_equal(c.text, "x\xC3\xA9");
    r = feed(s, "</eos>", true, &c); /* the EOG token's own text is not emitted */
    assert_int_equal(r.finish, QR_FINISH_STOP);
    assert_int_equal(r.stop_index, -1);
    assert_string_equal(c.text, "x\xC3\xA9#");
    qr_stop_free(s);

    /* flush releases what is held, with the given reason */
    assert_int_equal(qr_stop_create(stops, 1, 0, &s, NULL, 0), QR_OK);
    memset(&c, 0, sizeof c);
    feed(s, "ok##", false, &c);
    assert_string_equal(c.text, "ok");
    qr_stop_flush(s, QR_FINISH_LENGTH, &r);
    assert_int_equal(r.finish, QR_FINISH_LENGTH);
    assert_int_equal(r.emit_len, 2);
    assert_memory_equal(r.emit, "##", 2);
    qr_stop_free(s);

    /* bad arguments */
    const char *bad[] = {""};
    char err[128];
    assert_int_equal(qr_stop_create(bad, 1, 0, &s, err, sizeof err), QR_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "empty"));
    assert_int_equal(qr_stop_create(NULL, 0, -1, &s, err, sizeof err), QR_ERR_INVALID_ARG);
}

/* The k best of l[0..n) in the sampler's order (value descending, ties: the lower id), and the count of finite ones. */
static int32_t ref_topk(const float *l, int32_t n, int32_t k, float *vals, int32_t *ids) {
    int32_t fin = 0;
    for (int32_t i = 0; i < n; i++) fin += l[i] > -INFINITY;
    for (int32_t j = 0; j < k; j++) {
        int32_t best = -1;
        for (int32_t i = 0; i < n; i++) {
            bool used = false;
            for (int32_t u = 0; u < j && !used; u++) used = ids[u] == i;
            if (!used && (best < 0 || l[i] > l[best])) best = i;
        }
        vals[j] = l[best];
        ids[j] = best;
    }
    return fin;
}

/* qr_sampler_sample_topk gives qr_sampler_sample's tokens (and keeps the PRNG in step) wherever it accepts, and
 * declines (changing nothing) where the whole row is needed. */
static void test_topk_equals_full(void **state) {
    (void)state;
    enum { N = 700, K = QR_SAMPLER_TOPK_MAX, STEPS = 60 };
    static float l[N];
    float vals[K];
    int32_t ids[K];
    struct { float temp, top_p, min_p; int32_t top_k; bool expect; } cases[] = {
        {0.0f, 1.0f, 0.0f, 0, true},    {0.8f, 0.95f, 0.05f, 40, true}, {1.0f, 1.0f, 0.0f, 1, true},
        {1.3f, 0.5f, 0.0f, 63, true},   {0.7f, 1.0f, 0.2f, 5, true},    {1.0f, 0.9f, 0.0f, 0, false},
        {1.0f, 1.0f, 0.0f, 64, false},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        qr_sampler_params p;
        qr_sampler_params_default(&p);
        p.temperature = cases[c].temp;
        p.top_p = cases[c].top_p;
        p.min_p = cases[c].min_p;
        p.top_k = cases[c].top_k;
        p.seed = 77 + c;
        qr_sampler *a = make(&p, N), *b = make(&p, N);
        for (int step = 0; step < STEPS; step++) {
            fill_logits(l, N, (uint32_t)(step * 31 + (int)c));
            for (int32_t i = 0; i < N; i++) l[i] = roundf(l[i] * 4.0f) * 0.25f; /* ties */
            if (step % 3 == 0) l[0] = l[5] = l[N - 1] = -0.0f, l[3] = 0.0f;
            if (step % 4 == 1)
                for (int32_t i = 0; i < N; i += 3) l[i] = -INFINITY;
            const int32_t fin = ref_topk(l, N, K, vals, ids);
            qr_sample_result ra, rb;
            const bool used = qr_sampler_sample_topk(b, vals, ids, K, fin, &rb);
            assert_int_equal(used, cases[c].expect);
            if (!used) {
                char err[64];
                assert_int_equal(qr_sampler_sample(b, l, &rb, err, sizeof err), QR_OK);
            }
            char err[64];
            assert_int_equal(qr_sampler_sample(a, l, &ra, err, sizeof err), QR_OK);
            assert_int_equal(ra.token, rb.token);
        }
        /* too few candidates or finite logits, a NaN row: declined */
        const int32_t need = qr_sampler_topk_need(b);
        qr_sample_result r;
        if (need > 0) {
            assert_false(qr_sampler_sample_topk(b, vals, ids, need - 1, N, &r));
            assert_false(qr_sampler_sample_topk(b, vals, ids, K, need - 1, &r));
            assert_false(qr_sampler_sample_topk(b, vals, ids, K, -1, &r));
        }
        qr_sampler_free(a);
        qr_sampler_free(b);
    }
    /* what needs the whole row: logprobs, logit bias, penalties with a history */
    qr_sampler_params p;
    qr_sampler_params_greedy(&p);
    p.logprobs = true;
    qr_sampler *s = make(&p, N);
    assert_int_equal(qr_sampler_topk_need(s), 0);
    qr_sampler_free(s);
    qr_sampler_params_greedy(&p);
    qr_logit_bias bias = {3, 1.0f};
    p.logit_bias = &bias;
    p.n_logit_bias = 1;
    s = make(&p, N);
    assert_int_equal(qr_sampler_topk_need(s), 0);
    qr_sampler_free(s);
    qr_sampler_params_greedy(&p);
    p.repeat_penalty = 1.2f;
    p.penalty_last_n = 8;
    s = make(&p, N);
    assert_int_equal(qr_sampler_topk_need(s), 1); /* no history yet */
    assert_int_equal(qr_sampler_accept(s, 4), QR_OK);
    assert_int_equal(qr_sampler_topk_need(s), 0);
    qr_sampler_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_invalid_params),
        cmocka_unit_test(test_greedy_is_argmax),
        cmocka_unit_test(test_top_k1_equals_greedy),
        cmocka_unit_test(test_seed_reproduces),
        cmocka_unit_test(test_distribution_matches_softmax),
        cmocka_unit_test(test_top_p_small),
        cmocka_unit_test(test_top_p_large_vocab_support),
        cmocka_unit_test(test_top_k_large),
        cmocka_unit_test(test_min_p),
        cmocka_unit_test(test_penalties),
        cmocka_unit_test(test_logit_bias),
        cmocka_unit_test(test_logit_bias_values),
        cmocka_unit_test(test_nan_logit),
        cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_safe_prefix),
        cmocka_unit_test(test_stop_across_tokens),
        cmocka_unit_test(test_stop_length_and_eog),
        cmocka_unit_test(test_topk_equals_full),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
