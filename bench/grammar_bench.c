/* grammar_bench.c — what grammar-constrained sampling costs, against the decode step.
 *
 *   grammar-bench MODEL.gguf [-t THREADS] [-n TOKENS]
 *
 * 1. The vocabulary trie: build time, nodes.
 * 2. Per-step costs along a JSON output tokenized by the model's tokenizer, under a JSON schema:
 *      allows  the fast path (is the sampled token allowed: a walk over its bytes),
 *      mask    the full allowed-token mask of the state (DFA warm from earlier steps, mask not cached),
 *      cold    the same mask from a fresh matcher (every DFA state along the trie built anew).
 * 3. End to end: TOKENS greedy tokens (decode + sample) with and without a grammar (a JSON array of
 *    strings that never closes, so that both runs make TOKENS tokens), three runs of each in
 *    turn, the median tokens/s of each.
 * Times are medians (and maxima) in microseconds; the decode step is the median single-token
 * qr_decode of step 3. Prints one JSON object on stdout. Build: cmake --build build --target grammar-bench. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "quarrel.h"
#include "sampling/grammar.h"
#include "sampling/sampler.h"
#include "sched/grammar_vocab.h"
#include "tokenizer/tokenizer.h"
#include "util/util.h"

static const char k_schema[] =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"},"
    "\"email\":{\"type\":\"string\",\"format\":\"email\"},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}},"
    "\"score\":{\"type\":\"number\"},\"active\":{\"type\":\"boolean\"}},\"required\":[\"name\",\"age\"]}";
static const char k_output[] =
    "{\n  \"name\": \"Ada Lovelace, first programmer\",\n  \"age\": 36,\n  \"email\": \"ada@example.org\",\n"
    "  \"tags\": [\"math\", \"poetry\", \"engines\"],\n  \"score\": 97.25,\n  \"active\": true\n}";
/* never complete, so that both runs make the same number of tokens: a JSON array that never closes */
static const char k_long_gbnf[] =
    "root ::= \"[\" ws str ( ws \",\" ws str )*\n"
    "str ::= \"\\\"\" [^\"\\\\\\x00-\\x1F]{0,40} \"\\\"\"\n"
    "ws ::= [ \\n]?\n";

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n ? v[n / 2] : 0;
}

/* Generates n tokens greedily from prompt; with grammar g when non-NULL. Returns tokens/s of the
 * decode + sample loop; fills step_us[] with single decode times (may be NULL). */
static double generate(qr_model *model, qr_context *ctx, const qr_grammar_vocab *v, qr_grammar *g,
                       const int32_t *prompt, int32_t n_prompt, int n, double *step_us, int *n_made) {
    char err[512];
    qr_kv_seq_rm(ctx, 0, 0, -1);
    qr_sampler_params sp;
    qr_sampler_params_greedy(&sp);
    qr_sampler *smp = NULL;
    if (qr_sampler_create(&sp, qr_model_n_vocab(model), &smp, err, sizeof err) != QR_OK) return 0;
    if (g) {
        qr_grammar_matcher *m = NULL;
        if (qr_grammar_matcher_create(g, v, &m, err, sizeof err) != QR_OK) return 0;
        qr_sampler_set_grammar(smp, m);
    }
    qr_batch b = {.n_tokens = n_prompt, .token = (int32_t *)prompt};
    if (qr_decode(ctx, &b, err, sizeof err) != QR_OK) return 0;
    const double t0 = qr_time_s();
    int made = 0;
    for (; made < n; made++) {
        qr_sample_result r;
        if (qr_sampler_sample(smp, qr_get_logits(ctx, -1), &r, err, sizeof err) != QR_OK) break;
        if (g && qr_grammar_matcher_done(qr_sampler_grammar(smp))) break;
        qr_batch nb = {.n_tokens = 1, .token = &r.token};
        const double ts = qr_time_s();
        if (qr_decode(ctx, &nb, err, sizeof err) != QR_OK) break;
        if (step_us) step_us[made] = (qr_time_s() - ts) * 1e6;
    }
    const double dt = qr_time_s() - t0;
    qr_sampler_free(smp);
    *n_made = made;
    return made / dt;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: grammar-bench MODEL.gguf [-t THREADS] [-n TOKENS]\n");
        return 2;
    }
    const char *path = argv[1];
    int threads = 2, n_gen = 64;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-t")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-n")) n_gen = atoi(argv[i + 1]);
    }
    char err[1024];
    qr_gguf *gg = NULL;
    qr_tokenizer *tok = NULL;
    if (qr_gguf_open(path, &gg, err, sizeof err) != QR_OK || qr_tokenizer_create(gg, &tok, err, sizeof err) != QR_OK) {
        fprintf(stderr, "grammar-bench: %s\n", err);
        return 1;
    }
    qr_gguf_close(gg);
    /* 1. trie */
    double t = qr_time_s();
    qr_grammar_vocab *v = NULL;
    if (qr_grammar_vocab_from_tokenizer(tok, &v, err, sizeof err) != QR_OK) {
        fprintf(stderr, "grammar-bench: %s\n", err);
        return 1;
    }
    const double vocab_ms = (qr_time_s() - t) * 1e3;
    /* 2. per step */
    json_error_t je;
    json_t *schema = json_loads(k_schema, 0, &je);
    qr_grammar *g = NULL, *gl = NULL;
    t = qr_time_s();
    if (qr_json_schema_compile(schema, &g, err, sizeof err) != QR_OK ||
        qr_grammar_parse(k_long_gbnf, strlen(k_long_gbnf), NULL, &gl, err, sizeof err) != QR_OK) {
        fprintf(stderr, "grammar-bench: %s\n", err);
        return 1;
    }
    const double compile_ms = (qr_time_s() - t) * 1e3;
    size_t n_ids = 0;
    qr_tokenize(tok, k_output, strlen(k_output), false, false, NULL, 0, &n_ids);
    int32_t *ids = malloc(sizeof(int32_t) * (n_ids + 1));
    qr_tokenize(tok, k_output, strlen(k_output), false, false, ids, n_ids, &n_ids);
    double *allow_us = calloc(n_ids + 1, sizeof(double)), *mask_us = calloc(n_ids + 1, sizeof(double));
    double *cold_us = calloc(n_ids + 1, sizeof(double));
    qr_grammar_matcher *m = NULL;
    qr_grammar_matcher_create(g, v, &m, err, sizeof err);
    size_t off = 0;
    int steps = 0;
    for (size_t i = 0; i < n_ids; i++, steps++) {
        t = qr_time_s();
        const bool ok = qr_grammar_matcher_allows(m, ids[i]);
        allow_us[i] = (qr_time_s() - t) * 1e6;
        /* cold: a fresh matcher that has seen the prefix (its DFA holds only the prefix's path) */
        qr_grammar_matcher *w = NULL;
        qr_grammar_matcher_create(g, v, &w, err, sizeof err);
        qr_grammar_matcher_accept_bytes(w, k_output, off);
        t = qr_time_s();
        qr_grammar_matcher_mask(w);
        cold_us[i] = (qr_time_s() - t) * 1e6;
        /* warm: the matcher of the whole run (DFA states of earlier steps kept) */
        t = qr_time_s();
        const uint64_t *mk = qr_grammar_matcher_mask(m);
        mask_us[i] = (qr_time_s() - t) * 1e6;
        qr_grammar_matcher_free(w);
        if (!ok || !((mk[ids[i] >> 6] >> (ids[i] & 63)) & 1)) {
            fprintf(stderr, "grammar-bench: token %zu (%d) of the sample output is not allowed\n", i, ids[i]);
            return 1;
        }
        qr_grammar_matcher_accept(m, ids[i], err, sizeof err);
        size_t len = 0;
        qr_token_piece(tok, ids[i], &len);
        off += len;
    }
    int64_t n_states = 0, n_walks = 0;
    qr_grammar_matcher_stats(m, &n_states, &n_walks);
    qr_grammar_matcher_free(m);
    double allow_max = 0, mask_max = 0, cold_max = 0;
    for (int i = 0; i < steps; i++) {
        if (allow_us[i] > allow_max) allow_max = allow_us[i];
        if (mask_us[i] > mask_max) mask_max = mask_us[i];
        if (cold_us[i] > cold_max) cold_max = cold_us[i];
    }
    double mask_sum = 0;
    for (int i = 0; i < steps; i++) mask_sum += mask_us[i];
    /* 3. end to end */
    qr_model_params mp = qr_model_default_params();
    mp.n_threads = threads;
    mp.backend = QR_BACKEND_CPU;
    qr_model *model = NULL;
    qr_context *ctx = NULL;
    qr_context_params cp = qr_context_default_params();
    cp.n_ctx = 1024;
    if (qr_model_load(path, &mp, &model, err, sizeof err) != QR_OK ||
        qr_context_create(model, &cp, &ctx, err, sizeof err) != QR_OK) {
        fprintf(stderr, "grammar-bench: %s\n", err);
        return 1;
    }
    const char *prompt = "A JSON array of fruit names: ";
    size_t np = 0;
    qr_tokenize(tok, prompt, strlen(prompt), true, false, NULL, 0, &np);
    int32_t *pids = malloc(sizeof(int32_t) * np);
    qr_tokenize(tok, prompt, strlen(prompt), true, false, pids, np, &np);
    double *step_us = calloc((size_t)n_gen + 1, sizeof(double));
    int made_plain = 0, made_g = 0;
    generate(model, ctx, v, NULL, pids, (int32_t)np, 8, NULL, &made_plain); /* warm-up */
    double tp[3], tg[3], step_med = 0;
    for (int r = 0; r < 3; r++) {
        tp[r] = generate(model, ctx, v, NULL, pids, (int32_t)np, n_gen, step_us, &made_plain);
        if (r == 0) step_med = median(step_us, made_plain);
        tg[r] = generate(model, ctx, v, gl, pids, (int32_t)np, n_gen, NULL, &made_g);
    }
    const double tps_plain = median(tp, 3), tps_g = median(tg, 3);
    printf("{\"model\": \"%s\", \"n_vocab\": %d, \"trie_nodes\": %lld, \"vocab_build_ms\": %.2f, \"schema_compile_ms\": %.3f,"
           " \"steps\": %d, \"allows_us_median\": %.2f, \"allows_us_max\": %.2f, \"mask_us_median\": %.1f,"
           " \"mask_us_mean\": %.1f, \"mask_us_max\": %.1f, \"cold_mask_us_median\": %.1f, \"cold_mask_us_max\": %.1f,"
           " \"dfa_states\": %lld, \"mask_walks\": %lld, \"threads\": %d, \"decode_step_us_median\": %.1f,"
           " \"tokens_plain\": %d, \"tps_plain\": %.2f, \"tokens_grammar\": %d, \"tps_grammar\": %.2f}\n",
           path, qr_grammar_vocab_n_vocab(v), (long long)qr_grammar_vocab_n_nodes(v), vocab_ms, compile_ms, steps,
           median(allow_us, steps), allow_max, median(mask_us, steps), steps ? mask_sum / steps : 0, mask_max,
           median(cold_us, steps), cold_max, (long long)n_states, (long long)n_walks, threads, step_med, made_plain,
           tps_plain, made_g, tps_g);
    free(step_us);
    free(pids);
    free(ids);
    free(allow_us);
    free(mask_us);
    free(cold_us);
    qr_context_free(ctx);
    qr_model_free(model);
    qr_grammar_free(g);
    qr_grammar_free(gl);
    json_decref(schema);
    qr_grammar_vocab_free(v);
    qr_tokenizer_free(tok);
    return 0;
}
