/* test_server.c — the server's pieces that need no socket: request-body parsing (types, ranges,
 * defaults per API, depth limit), UTF-8 validation, durations, the Prometheus registry, token
 * buckets, and the SQLite key store (hashed keys, rotate, revoke). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "server/keys.h"
#include "server/metrics.h"
#include "server/ratelimit.h"
#include "server/registry.h"
#include "server/reqparse.h"

static int parse(const char *body, srv_api api, srv_gen_req *r, char *err) {
    return srv_gen_req_parse(body, strlen(body), api, 16, r, err, 256);
}

static void test_reqparse(void **state) {
    (void)state;
    srv_gen_req r;
    char err[256];
    /* OpenAI chat: defaults (temperature 1, no top-k), fields, stream off */
    assert_int_equal(parse("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stop\":[\"a\",\"b\"],"
                           "\"max_tokens\":7,\"seed\":9,\"logprobs\":true,\"top_logprobs\":3,\"logit_bias\":{\"5\":-100}}",
                           SRV_API_OPENAI_CHAT, &r, err), 0);
    assert_string_equal(r.model, "m");
    assert_false(r.stream);
    assert_true(r.sp.temperature == 1.0f && r.sp.top_k == 0);
    assert_int_equal(r.n_stops, 2);
    assert_int_equal(r.max_tokens, 7);
    assert_true(r.sp.seed == 9 && r.sp.logprobs && r.sp.n_logprobs == 3);
    assert_int_equal(r.sp.n_logit_bias, 1);
    assert_int_equal(r.sp.logit_bias[0].token, 5);
    srv_gen_req_free(&r);
    /* Ollama: options object, streaming by default, keep_alive durations */
    assert_int_equal(parse("{\"model\":\"m\",\"prompt\":\"p\",\"keep_alive\":\"1h30m\",\"options\":{\"temperature\":0,"
                           "\"num_predict\":5,\"top_k\":3}}", SRV_API_OLLAMA_GENERATE, &r, err), 0);
    assert_true(r.stream && r.sp.temperature == 0 && r.sp.top_k == 3 && r.max_tokens == 5);
    assert_true(r.has_keep_alive && r.keep_alive_s == 5400);
    srv_gen_req_free(&r);
    /* errors name the field */
    const char *bad[][2] = {
        {"{\"model\":\"m\",\"messages\":[]}", "messages"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":5}]}", "content"},
        {"{\"model\":5,\"messages\":[{\"role\":\"user\"}]}", "model"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\"}],\"temperature\":3}", "temperature"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\"}],\"n\":2}", "'n'"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\"}],\"top_logprobs\":2}", "logprobs"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\"}],\"logit_bias\":{\"x\":1}}", "logit_bias"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\"}],\"stop\":[1]}", "stop"},
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"wizard\"}]}", "role"},
        {"{\"model\":\"m\"", "malformed"},
        {"[1]", "object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(parse(bad[i][0], SRV_API_OPENAI_CHAT, &r, err), -1);
        assert_non_null(strstr(err, bad[i][1]));
        srv_gen_req_free(&r);
    }
    /* completions: token-id prompts, logprobs as a count */
    assert_int_equal(parse("{\"model\":\"m\",\"prompt\":[1,2,3],\"logprobs\":2}", SRV_API_OPENAI_COMPLETION, &r, err), 0);
    assert_non_null(r.prompt_ids);
    assert_true(r.sp.logprobs && r.sp.n_logprobs == 2);
    srv_gen_req_free(&r);
    /* depth limit */
    char deep[200] = "{\"a\":";
    for (int i = 0; i < 20; i++) strcat(deep, "[");
    for (int i = 0; i < 20; i++) strcat(deep, "]");
    strcat(deep, "}");
    assert_int_equal(parse(deep, SRV_API_NATIVE, &r, err), -1);
    assert_non_null(strstr(err, "nesting"));
    srv_gen_req_free(&r);
    /* native: prompt or messages required; priority */
    assert_int_equal(parse("{\"priority\":\"batch\",\"prompt\":\"x\"}", SRV_API_NATIVE, &r, err), 0);
    assert_int_equal(r.priority, 1);
    srv_gen_req_free(&r);
    assert_int_equal(parse("{\"priority\":\"urgent\",\"prompt\":\"x\"}", SRV_API_NATIVE, &r, err), -1);
    srv_gen_req_free(&r);
    assert_int_equal(parse("{}", SRV_API_NATIVE, &r, err), -1);
    srv_gen_req_free(&r);
}

static void test_utf8_and_duration(void **state) {
    (void)state;
    const char *ok = "h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80";
    assert_true(srv_utf8_valid(ok, strlen(ok)));
    assert_false(srv_utf8_valid("\xff", 1));
    assert_false(srv_utf8_valid("\xc3", 1));            /* truncated */
    assert_false(srv_utf8_valid("\xc0\xaf", 2));        /* overlong */
    assert_false(srv_utf8_valid("\xed\xa0\x80", 3));    /* surrogate */
    assert_false(srv_utf8_valid("\xf4\x90\x80\x80", 4)); /* > U+10FFFF */
    double s;
    json_t *v = json_string("5m");
    assert_int_equal(srv_parse_duration(v, &s), 0);
    assert_true(s == 300);
    json_decref(v);
    v = json_string("-1");
    assert_int_equal(srv_parse_duration(v, &s), 0);
    assert_true(s == -1);
    json_decref(v);
    v = json_string("5x");
    assert_int_equal(srv_parse_duration(v, &s), -1);
    json_decref(v);
    v = json_integer(42);
    assert_int_equal(srv_parse_duration(v, &s), 0);
    assert_true(s == 42);
    json_decref(v);
}

static void test_metrics(void **state) {
    (void)state;
    srv_metrics *m = srv_metrics_create();
    const double b[] = {0.1, 1};
    srv_metrics_declare(m, "x_total", SRV_COUNTER, "help x", NULL, 0);
    srv_metrics_declare(m, "lat_seconds", SRV_HISTOGRAM, "help lat", b, 2);
    srv_metrics_add(m, "x_total", "code=\"200\"", 2);
    srv_metrics_add(m, "x_total", "code=\"200\"", 1);
    srv_metrics_add(m, "undeclared", "", 1);
    srv_metrics_observe(m, "lat_seconds", "", 0.05);
    srv_metrics_observe(m, "lat_seconds", "", 0.5);
    srv_metrics_observe(m, "lat_seconds", "", 5);
    assert_true(srv_metrics_get(m, "x_total", "code=\"200\"") == 3);
    size_t n;
    char *t = srv_metrics_render(m, &n);
    assert_non_null(strstr(t, "# TYPE x_total counter\nx_total{code=\"200\"} 3\n"));
    assert_non_null(strstr(t, "lat_seconds_bucket{le=\"0.1\"} 1\n"));
    assert_non_null(strstr(t, "lat_seconds_bucket{le=\"1\"} 2\n"));
    assert_non_null(strstr(t, "lat_seconds_bucket{le=\"+Inf\"} 3\n"));
    assert_non_null(strstr(t, "lat_seconds_count 3\n"));
    assert_null(strstr(t, "undeclared"));
    free(t);
    char esc[32];
    srv_metrics_escape("a\"b\\c\n", esc, sizeof esc);
    assert_string_equal(esc, "a\\\"b\\\\c\\n");
    srv_metrics_free(m);
}

static void test_ratelimit(void **state) {
    (void)state;
    srv_ratelimit *rl = srv_ratelimit_create();
    assert_int_equal(srv_ratelimit_request(rl, "k", 0, 0), 0); /* unlimited */
    assert_int_equal(srv_ratelimit_request(rl, "a", 2, 0), 0);
    assert_int_equal(srv_ratelimit_request(rl, "a", 2, 0), 0);
    const int wait = srv_ratelimit_request(rl, "a", 2, 0);
    assert_true(wait >= 1 && wait <= 30);
    assert_int_equal(srv_ratelimit_request(rl, "b", 2, 0), 0); /* per key */
    /* tokens: a 100 tokens/min bucket charged 150 is in debt for ~30 s */
    assert_int_equal(srv_ratelimit_request(rl, "t", 0, 100), 0);
    srv_ratelimit_tokens(rl, "t", 150, 100);
    const int tw = srv_ratelimit_request(rl, "t", 0, 100);
    assert_true(tw >= 29 && tw <= 31);
    srv_ratelimit_free(rl);
}

typedef struct lst {
    int n, revoked;
} lst;

static void count_keys(void *arg, const srv_key_info *k) {
    lst *l = arg;
    l->n++;
    l->revoked += k->revoked;
}

/* The GPU default of --parallel: 64 sequences of 4096 tokens where 40 % of the free memory holds them, fewer
 * where it holds fewer, none (the CPU default) under 8. */
static void test_gpu_parallel(void **state) {
    (void)state;
    const uint64_t mistral = 131072, gib = 1ull << 30; /* f16 bytes a token of a mistral-7b cache */
    assert_int_equal(srv_gpu_parallel(130 * gib, 1, mistral), 64); /* an H200 after the weights */
    assert_int_equal(srv_gpu_parallel(18 * gib, 1, mistral), 14);  /* a 24 GB card: 7.2 GiB / 0.5 GiB */
    assert_int_equal(srv_gpu_parallel(18 * gib, 2, mistral), 28);  /* two of them: each holds half the cache */
    assert_int_equal(srv_gpu_parallel(4 * gib, 1, mistral), 0);    /* 3 sequences: the CPU default */
    assert_int_equal(srv_gpu_parallel(130 * gib, 1, 0), 0);
}

static void test_keys(void **state) {
    (void)state;
    char path[] = "/tmp/quarrel_test_keys_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    char err[256], key[SRV_KEY_LEN], key2[SRV_KEY_LEN];
    assert_null(srv_keys_open("/nonexistent/dir/keys.db", true, err, sizeof err));
    srv_keys *k = srv_keys_open(path, true, err, sizeof err);
    assert_non_null(k);
    srv_key_info ki, got;
    assert_int_equal(srv_keys_create(k, "alice", 10, 0, key, &ki, err, sizeof err), 0);
    assert_int_equal(strlen(key), SRV_KEY_LEN - 1);
    assert_int_equal(srv_keys_verify(k, key, &got), 0);
    assert_string_equal(got.id, ki.id);
    assert_string_equal(got.name, "alice");
    assert_true(got.rpm == 10);
    /* one changed character, a truncated key, garbage */
    char bad[SRV_KEY_LEN];
    memcpy(bad, key, sizeof bad);
    bad[SRV_KEY_LEN - 2] = bad[SRV_KEY_LEN - 2] == 'a' ? 'b' : 'a';
    assert_int_equal(srv_keys_verify(k, bad, NULL), -1);
    key[20] = 0;
    assert_int_equal(srv_keys_verify(k, key, NULL), -1);
    assert_int_equal(srv_keys_verify(k, "Bearer", NULL), -1);
    assert_int_equal(srv_keys_verify(k, NULL, NULL), -1);
    /* rotate: new key works, old does not */
    assert_int_equal(srv_keys_rotate(k, ki.id, key2, err, sizeof err), 0);
    assert_int_equal(srv_keys_verify(k, key2, NULL), 0);
    assert_int_equal(srv_keys_rotate(k, "000000000000", key, err, sizeof err), -1);
    /* revoke */
    assert_int_equal(srv_keys_revoke(k, ki.id, err, sizeof err), 0);
    assert_int_equal(srv_keys_verify(k, key2, NULL), -1);
    assert_int_equal(srv_keys_revoke(k, "nope", err, sizeof err), -1);
    lst l = {0};
    assert_int_equal(srv_keys_list(k, count_keys, &l), 1);
    assert_int_equal(l.revoked, 1);
    srv_keys_close(k);
    /* the file holds no plain key */
    FILE *f = fopen(path, "rb");
    char buf[65536];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    assert_null(memmem(buf, n, key2 + 16, 40));
    char hex[65];
    srv_sha256_hex("abc", 3, hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    unlink(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reqparse), cmocka_unit_test(test_utf8_and_duration), cmocka_unit_test(test_metrics),
        cmocka_unit_test(test_ratelimit), cmocka_unit_test(test_keys), cmocka_unit_test(test_gpu_parallel),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
