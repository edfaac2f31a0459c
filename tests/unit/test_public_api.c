/* test_public_api.c — the public wrappers of quarrel.h (issue 33 item 2) on a synthetic model: version and
 * log level, the sampler chain (defaults, validation, greedy, logit bias), the tokenizer (from the model and
 * from the file, special ids, round trip), the chat template, and qr_generate (its tokens equal a hand-written
 * loop of decode and sample; n_predict, the callback's cancel, a full context, a stop string, a prompt that does not fit). */
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
#include "quarrel.h"

static struct {
    char path[64];
    qr_model *model;
    qr_tokenizer *tok;
} F;

static int setup(void **state) {
    (void)state;
    snprintf(F.path, sizeof F.path, "/tmp/quarrel_test_api_XXXXXX");
    int fd = mkstemp(F.path);
    if (fd < 0) return -1;
    close(fd);
    qr_synth_options o = {.arch = "llama", .preset = "tiny", .type = "F16", .seed = 11, .n_threads = 2};
    char err[256];
    if (qr_synth_write(&o, F.path, NULL, err, sizeof err) != QR_OK) return -1;
    qr_model_params mp = qr_model_default_params();
    mp.n_threads = 2;
    mp.backend = QR_BACKEND_CPU;
    if (qr_model_load(F.path, &mp, &F.model, err, sizeof err) != QR_OK) return -1;
    return qr_tokenizer_from_model(F.model, &F.tok, err, sizeof err) == QR_OK ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    qr_tokenizer_free(F.tok);
    qr_model_free(F.model);
    unlink(F.path);
    return 0;
}

/* A context of n_ctx tokens for one sequence. */
static qr_context *make_ctx(int32_t n_ctx) {
    qr_context_params cp = qr_context_default_params();
    cp.n_ctx = n_ctx;
    qr_context *ctx = NULL;
    char err[256];
    assert_int_equal(qr_context_create(F.model, &cp, &ctx, err, sizeof err), QR_OK);
    return ctx;
}

static qr_sampler_chain *greedy_chain(void) {
    qr_sampler_chain_params p = qr_sampler_chain_default_params();
    p.temperature = 0;
    qr_sampler_chain *s = NULL;
    char err[256];
    assert_int_equal(qr_sampler_chain_create(qr_model_n_vocab(F.model), &p, &s, err, sizeof err), QR_OK);
    return s;
}

/* Generation parameters: n_predict tokens, through end-of-generation tokens. */
static qr_generate_params gen_params(int32_t n_predict) {
    qr_generate_params gp = qr_generate_default_params();
    gp.n_predict = n_predict;
    gp.ignore_eos = true;
    return gp;
}

static size_t tokenize(const char *text, qr_token *ids, size_t cap) {
    size_t n = 0;
    assert_int_equal(qr_tokenize(F.tok, text, strlen(text), true, false, ids, cap, &n), QR_OK);
    assert_true(n <= cap);
    return n;
}

static void test_version_and_log_level(void **state) {
    (void)state;
    assert_int_equal(qr_version_number(), QUARREL_VERSION_NUMBER);
    assert_string_equal(qr_version(), QUARREL_VERSION_STRING);
    qr_log_level old = qr_log_get_level();
    qr_log_set_level(QR_LOG_NONE);
    assert_int_equal(qr_log_get_level(), QR_LOG_NONE);
    qr_log_set_level(old);
    assert_string_equal(qr_status_str(QR_ERR_NOT_FOUND), "not found");
}

static void test_sampler_chain_params(void **state) {
    (void)state;
    qr_sampler_chain_params p = qr_sampler_chain_default_params();
    assert_true(p.temperature == 0.8f && p.top_k == 40 && p.top_p == 0.95f && p.min_p == 0.05f);
    assert_true(p.repeat_penalty == 1.0f && p.penalty_last_n == 64 && p.seed == QR_SEED_RANDOM);
    char err[256] = "";
    assert_int_equal(qr_sampler_chain_params_validate(&p, 0, err, sizeof err), QR_OK);
    p.temperature = -1;
    assert_int_equal(qr_sampler_chain_params_validate(&p, 0, err, sizeof err), QR_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "temperature"));
    p = qr_sampler_chain_default_params();
    qr_token_bias bias = {.token = 1000000, .bias = 1};
    p.logit_bias = &bias;
    p.n_logit_bias = 1;
    assert_int_equal(qr_sampler_chain_params_validate(&p, 0, err, sizeof err), QR_OK); /* no vocab yet */
    assert_int_equal(qr_sampler_chain_params_validate(&p, 100, err, sizeof err), QR_ERR_INVALID_ARG);
    qr_sampler_chain *s = NULL;
    assert_int_equal(qr_sampler_chain_create(100, &p, &s, err, sizeof err), QR_ERR_INVALID_ARG);
    assert_null(s);
    p.logit_bias = NULL; /* one entry, no array */
    assert_int_equal(qr_sampler_chain_create(100, &p, &s, err, sizeof err), QR_ERR_INVALID_ARG);
    p.n_logit_bias = 0;
    p.seed = 1234;
    assert_int_equal(qr_sampler_chain_create(100, &p, &s, err, sizeof err), QR_OK);
    assert_int_equal(qr_sampler_chain_seed(s), 1234);
    assert_int_equal(qr_sampler_chain_accept(s, 100), QR_ERR_INVALID_ARG);
    assert_int_equal(qr_sampler_chain_accept(s, 99), QR_OK);
    qr_sampler_chain_free(s);
}

static void test_sampler_chain_greedy_and_bias(void **state) {
    (void)state;
    float logits[8] = {0.1f, 2.0f, 0.5f, 3.0f, -1.0f, 2.9f, 0.0f, 1.0f};
    qr_sampler_chain_params p = qr_sampler_chain_default_params();
    p.temperature = 0;
    qr_sampler_chain *s = NULL;
    char err[256];
    assert_int_equal(qr_sampler_chain_create(8, &p, &s, err, sizeof err), QR_OK);
    qr_token t = -1;
    assert_int_equal(qr_sampler_chain_sample(s, logits, &t, err, sizeof err), QR_OK);
    assert_int_equal(t, 3);
    qr_sampler_chain_free(s);
    qr_token_bias ban = {.token = 3, .bias = -INFINITY}; /* copied at create: the caller's array may go */
    p.logit_bias = &ban;
    p.n_logit_bias = 1;
    assert_int_equal(qr_sampler_chain_create(8, &p, &s, err, sizeof err), QR_OK);
    ban.token = 5;
    assert_int_equal(qr_sampler_chain_sample(s, logits, &t, err, sizeof err), QR_OK);
    assert_int_equal(t, 5);
    logits[0] = NAN;
    assert_int_equal(qr_sampler_chain_sample(s, logits, &t, err, sizeof err), QR_ERR_INVALID_ARG);
    qr_sampler_chain_free(s);
}

static void test_tokenizer(void **state) {
    (void)state;
    assert_int_equal(qr_tokenizer_n_vocab(F.tok), qr_model_n_vocab(F.model));
    qr_token ids[64];
    size_t n = tokenize("hello world", ids, 64);
    assert_true(n >= 2);
    assert_true(qr_tokenizer_add_bos(F.tok));
    assert_int_equal(ids[0], qr_tokenizer_special(F.tok, QR_SPECIAL_BOS));
    assert_true(qr_token_is_eog(F.tok, qr_tokenizer_special(F.tok, QR_SPECIAL_EOS)));
    assert_int_equal(qr_tokenizer_special(F.tok, (qr_special_token)99), QR_TOKEN_NULL);
    char text[64];
    size_t len = 0;
    assert_int_equal(qr_detokenize(F.tok, ids, n, true, false, text, sizeof text, &len), QR_OK);
    assert_int_equal(len, strlen("hello world"));
    assert_memory_equal(text, "hello world", len);
    /* the same vocabulary read from the file alone */
    qr_tokenizer *file_tok = NULL;
    char err[256];
    assert_int_equal(qr_tokenizer_load(F.path, &file_tok, err, sizeof err), QR_OK);
    qr_token ids2[64];
    size_t n2 = 0;
    assert_int_equal(qr_tokenize(file_tok, "hello world", 11, true, false, ids2, 64, &n2), QR_OK);
    assert_int_equal(n2, n);
    assert_memory_equal(ids2, ids, n * sizeof *ids);
    qr_tokenizer_free(file_tok);
    assert_int_equal(qr_tokenizer_load("/nonexistent/model.gguf", &file_tok, err, sizeof err), QR_ERR_IO);
    assert_null(file_tok);
}

static void test_chat_template(void **state) {
    (void)state;
    const qr_chat_message msgs[] = {{.role = "user", .content = "hi"}};
    char *out = NULL, err[256];
    size_t len = 0;
    assert_int_equal(qr_chat_apply_template(F.model, F.tok, msgs, 1, true, &out, &len, err, sizeof err), QR_OK);
    assert_int_equal(len, strlen(out));
    assert_non_null(strstr(out, "hi"));
    char *again = NULL; /* without a tokenizer: one is made for the call, same text */
    assert_int_equal(qr_chat_apply_template(F.model, NULL, msgs, 1, true, &again, NULL, err, sizeof err), QR_OK);
    assert_string_equal(again, out);
    free(again);
    assert_int_equal(qr_chat_apply_template(F.model, F.tok, msgs, 1, false, &again, NULL, err, sizeof err), QR_OK);
    assert_true(strlen(again) < len); /* no assistant header */
    free(again);
    free(out);
}

typedef struct sink {
    qr_token ids[256];
    int n;
    int stop_after; /* return false at this call (0: never) */
    char text[4096];
    size_t len;
} sink;

static bool collect(qr_token token, const char *text, size_t len, void *user_data) {
    sink *k = user_data;
    if (token != QR_TOKEN_NULL) k->ids[k->n++] = token;
    if (k->len + len < sizeof k->text) {
        memcpy(k->text + k->len, text, len);
        k->len += len;
    }
    return !(k->stop_after && k->n == k->stop_after);
}

static void test_generate_equals_a_greedy_loop(void **state) {
    (void)state;
    qr_token prompt[64];
    size_t n_prompt = tokenize("the quick brown fox", prompt, 64);
    /* by hand: decode, sample with the chain, decode ... */
    qr_context *ctx = make_ctx(128);
    qr_sampler_chain *s = greedy_chain();
    qr_token want[12];
    char err[256];
    qr_batch b = {.n_tokens = (int32_t)n_prompt, .token = prompt};
    assert_int_equal(qr_decode(ctx, &b, err, sizeof err), QR_OK);
    for (int i = 0; i < 12; i++) {
        assert_int_equal(qr_sampler_chain_sample(s, qr_get_logits(ctx, -1), &want[i], err, sizeof err), QR_OK);
        qr_batch one = {.n_tokens = 1, .token = &want[i]};
        assert_int_equal(qr_decode(ctx, &one, err, sizeof err), QR_OK);
    }
    qr_context_free(ctx);
    /* qr_generate */
    ctx = make_ctx(128);
    qr_sampler_chain_reset(s);
    qr_generate_params gp = gen_params(12);
    sink k = {0};
    qr_generate_result r;
    assert_int_equal(qr_generate(ctx, F.tok, s, prompt, n_prompt, &gp, collect, &k, &r, err, sizeof err), QR_OK);
    assert_int_equal(r.end, QR_GENERATE_LENGTH);
    assert_int_equal(r.n_prompt, (int32_t)n_prompt);
    assert_int_equal(r.n_generated, 12);
    assert_int_equal(k.n, 12);
    assert_memory_equal(k.ids, want, sizeof want);
    assert_int_equal(qr_kv_seq_len(ctx, 0), (int32_t)n_prompt + 11); /* the last token is not decoded */
    /* the streamed text is the detokenized ids */
    char text[4096];
    size_t len = 0;
    assert_int_equal(qr_detokenize(F.tok, want, 12, false, false, text, sizeof text, &len), QR_OK);
    assert_int_equal(k.len, len);
    assert_memory_equal(k.text, text, len);
    /* the callback cancels */
    qr_kv_clear(ctx);
    qr_sampler_chain_reset(s);
    sink c = {.stop_after = 3};
    assert_int_equal(qr_generate(ctx, F.tok, s, prompt, n_prompt, &gp, collect, &c, &r, err, sizeof err), QR_OK);
    assert_int_equal(r.end, QR_GENERATE_CANCELLED);
    assert_int_equal(r.n_generated, 3);
    assert_memory_equal(c.ids, want, 3 * sizeof *want);
    /* a stop string made of the text generated so far: nothing of it (or after it) is emitted */
    assert_true(k.len >= 4);
    {
        char stop[5];
        memcpy(stop, k.text + k.len - 4, 4);
        stop[4] = 0;
        const char *stops[] = {stop};
        gp.stops = stops;
        gp.n_stops = 1;
        qr_kv_clear(ctx);
        sink t = {0};
        assert_int_equal(qr_generate(ctx, F.tok, s, prompt, n_prompt, &gp, collect, &t, &r, err, sizeof err), QR_OK);
        assert_int_equal(r.end, QR_GENERATE_STOP_STRING);
        assert_null(strstr(t.text, stop));
        assert_true(t.len <= k.len - 4);
        assert_memory_equal(t.text, k.text, t.len);
        gp.stops = NULL;
        gp.n_stops = 0;
    }
    qr_sampler_chain_free(s);
    qr_context_free(ctx);
}

/* qr_sampler_chain_set_grammar: a JSON schema makes greedy generation produce exactly a valid instance,
 * ending with an end-of-generation token; bad grammars get INVALID_ARG with a message; NULL detaches. */
static void test_sampler_chain_grammar(void **state) {
    (void)state;
    qr_token prompt[64];
    size_t n_prompt = tokenize("the quick brown fox", prompt, 64);
    qr_sampler_chain *s = greedy_chain();
    char err[256];
    assert_int_equal(qr_sampler_chain_set_grammar(s, F.tok, NULL, "{\"type\": \"boolean\"}", err, sizeof err), QR_OK);
    qr_context *ctx = make_ctx(128);
    qr_generate_params gp = gen_params(24);
    gp.ignore_eos = false;
    sink k = {0};
    qr_generate_result r;
    assert_int_equal(qr_generate(ctx, F.tok, s, prompt, n_prompt, &gp, collect, &k, &r, err, sizeof err), QR_OK);
    assert_int_equal(r.end, QR_GENERATE_EOG);
    k.text[k.len] = 0;
    assert_true(!strcmp(k.text, "true") || !strcmp(k.text, "false"));
    /* the same with a GBNF grammar, after a reset */
    qr_kv_clear(ctx);
    assert_int_equal(qr_sampler_chain_set_grammar(s, F.tok, "root ::= \"[\" [0-9] \"]\"", NULL, err, sizeof err), QR_OK);
    sink g = {0};
    assert_int_equal(qr_generate(ctx, F.tok, s, prompt, n_prompt, &gp, collect, &g, &r, err, sizeof err), QR_OK);
    assert_int_equal(r.end, QR_GENERATE_EOG);
    assert_int_equal(g.len, 3);
    assert_true(g.text[0] == '[' && g.text[1] >= '0' && g.text[1] <= '9' && g.text[2] == ']');
    /* errors */
    assert_int_equal(qr_sampler_chain_set_grammar(s, F.tok, "root ::= (", NULL, err, sizeof err), QR_ERR_INVALID_ARG);
    assert_true(strlen(err) > 0);
    assert_int_equal(qr_sampler_chain_set_grammar(s, F.tok, NULL, "{\"type\": ", err, sizeof err), QR_ERR_INVALID_ARG);
    assert_int_equal(qr_sampler_chain_set_grammar(s, F.tok, "root ::= \"a\"", "{}", err, sizeof err), QR_ERR_INVALID_ARG);
    /* detached: back to the unconstrained greedy output */
    assert_int_equal(qr_sampler_chain_set_grammar(s, NULL, NULL, NULL, err, sizeof err), QR_OK);
    qr_kv_clear(ctx);
    qr_sampler_chain_reset(s);
    sink u = {0};
    gp.ignore_eos = true;
    gp.n_predict = 4;
    assert_int_equal(qr_generate(ctx, F.tok, s, prompt, n_prompt, &gp, collect, &u, &r, err, sizeof err), QR_OK);
    assert_int_equal(r.n_generated, 4);
    qr_sampler_chain_free(s);
    qr_context_free(ctx);
}

static void test_generate_limits(void **state) {
    (void)state;
    qr_token prompt[64];
    size_t n_prompt = tokenize("the quick brown fox", prompt, 64);
    qr_context *ctx = make_ctx(32);
    const int32_t n_ctx = qr_context_n_ctx(ctx);
    qr_sampler_chain *s = greedy_chain();
    qr_generate_params gp = gen_params(1000);
    sink k = {0};
    qr_generate_result r;
    char err[256];
    assert_int_equal(qr_generate(ctx, F.tok, s, prompt, n_prompt, &gp, collect, &k, &r, err, sizeof err), QR_OK);
    assert_int_equal(r.end, QR_GENERATE_CONTEXT_FULL);
    assert_int_equal(qr_kv_seq_len(ctx, 0), n_ctx - 1);
    assert_int_equal(r.n_generated, n_ctx - (int32_t)n_prompt);
    /* the sequence is nearly full: a prompt that does not fit is refused before anything runs */
    assert_int_equal(qr_generate(ctx, F.tok, s, prompt, n_prompt, &gp, collect, &k, &r, err, sizeof err),
                     QR_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "the prompt is"));
    assert_int_equal(r.n_generated, 0);
    qr_kv_clear(ctx);
    gp.n_predict = 0;
    assert_int_equal(qr_generate(ctx, F.tok, s, prompt, n_prompt, &gp, NULL, NULL, NULL, err, sizeof err),
                     QR_ERR_INVALID_ARG);
    gp.n_predict = 4; /* no callback, no result: fine */
    assert_int_equal(qr_generate(ctx, F.tok, s, prompt, n_prompt, &gp, NULL, NULL, NULL, err, sizeof err), QR_OK);
    assert_int_equal(qr_generate(ctx, F.tok, s, prompt, 0, &gp, NULL, NULL, NULL, err, sizeof err), QR_ERR_INVALID_ARG);
    qr_sampler_chain_free(s);
    qr_context_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version_and_log_level),
        cmocka_unit_test(test_sampler_chain_params),
        cmocka_unit_test(test_sampler_chain_greedy_and_bias),
        cmocka_unit_test(test_tokenizer),
        cmocka_unit_test(test_chat_template),
        cmocka_unit_test(test_generate_equals_a_greedy_loop),
        cmocka_unit_test(test_generate_limits),
        cmocka_unit_test(test_sampler_chain_grammar),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
