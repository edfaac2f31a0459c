/* test_synth.c — `quarrel synth` (determinism, shapes, types, tokenizer metadata, weight scales, errors),
 * the streaming GGUF writer, and llama-quantize's per-tensor type rules. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "gguf/gguf.h"
#include "convert/gguf_stream.h"
#include "convert/quantize_model.h"
#include "convert/synth.h"
#include "util/util.h"

static char tmpdir[256];

static int setup_dir(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/qr_test_synth_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_dir(void **state) {
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *tmp(const char *name) {
    static char paths[8][320];
    static int k;
    char *p = paths[k++ % 8];
    snprintf(p, 320, "%s/%s", tmpdir, name);
    return p;
}

static void synth_ok(const char *arch, const char *preset, const char *type, uint64_t seed, int threads, const char *path) {
    qr_synth_options o = {.arch = arch, .preset = preset, .type = type, .seed = seed, .n_threads = threads};
    char err[512];
    qr_status st = qr_synth_write(&o, path, NULL, err, sizeof err);
    if (st != QR_OK) fail_msg("synth %s/%s %s: %s", arch, preset, type, err);
}

static void *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc((size_t)len + 1);
    assert_int_equal(fread(buf, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return buf;
}

static bool same_file(const char *a, const char *b) {
    size_t na, nb;
    void *x = slurp(a, &na), *y = slurp(b, &nb);
    bool same = na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

static qr_gguf *open_ok(const char *path) {
    qr_gguf *g = NULL;
    char err[512];
    if (qr_gguf_open(path, &g, err, sizeof err) != QR_OK) fail_msg("open %s: %s", path, err);
    return g;
}

static const qr_gguf_tensor *tensor(const qr_gguf *g, const char *name) {
    const qr_gguf_tensor *t = qr_gguf_get_tensor(g, name);
    if (!t) fail_msg("tensor %s missing", name);
    return t;
}

/* Same arguments -> same bytes, whatever the thread count; another seed -> other bytes. */
static void test_deterministic(void **state) {
    (void)state;
    const char *types[] = {"F16", "Q4_K_M", "Q8_0"};
    for (int i = 0; i < 3; i++) {
        synth_ok("llama", "tiny", types[i], 7, 1, tmp("a.gguf"));
        synth_ok("llama", "tiny", types[i], 7, 3, tmp("b.gguf"));
        assert_true(same_file(tmp("a.gguf"), tmp("b.gguf")));
        synth_ok("llama", "tiny", types[i], 8, 2, tmp("c.gguf"));
        assert_false(same_file(tmp("a.gguf"), tmp("c.gguf")));
    }
    synth_ok("gemma3", "tiny", "Q5_K_M", 1, 1, tmp("a.gguf"));
    synth_ok("gemma3", "tiny", "Q5_K_M", 1, 2, tmp("b.gguf"));
    assert_true(same_file(tmp("a.gguf"), tmp("b.gguf")));
}

static void expect_shape(const qr_gguf *g, const char *name, qr_type type, int64_t ne0, int64_t ne1) {
    const qr_gguf_tensor *t = tensor(g, name);
    if (t->type != type) fail_msg("%s: type %s, expected %s", name, qr_type_name(t->type), qr_type_name(type));
    assert_int_equal(t->ne[0], ne0);
    assert_int_equal(t->ne[1], ne1);
    assert_int_equal(t->n_dims, ne1 == 1 ? 1 : 2);
}

static void test_llama_readback(void **state) {
    (void)state;
    const char *path = tmp("llama.gguf");
    synth_ok("llama", "tiny", "F16", 0, 2, path);
    qr_gguf *g = open_ok(path);
    const qr_synth_preset *p = qr_synth_find_preset("llama", "tiny");
    assert_non_null(p);
    qr_gguf_str s;
    assert_true(qr_gguf_get_str(g, "general.architecture", &s) && qr_gguf_str_eq(s, "llama"));
    uint32_t u;
    assert_true(qr_gguf_get_u32(g, "llama.block_count", &u) && u == p->n_layer);
    assert_true(qr_gguf_get_u32(g, "llama.attention.head_count_kv", &u) && u == p->n_head_kv);
    assert_true(qr_gguf_get_u32(g, "general.file_type", &u) && u == 1);
    float f;
    assert_true(qr_gguf_get_f32(g, "llama.rope.freq_base", &f) && f == p->rope_theta);
    assert_int_equal(g->n_tensors, 3 + 9 * p->n_layer);
    int64_t d = p->n_embd, kv = p->n_head_kv * p->head_dim, q = p->n_head * p->head_dim;
    expect_shape(g, "token_embd.weight", QR_TYPE_F16, d, p->n_vocab);
    expect_shape(g, "output.weight", QR_TYPE_F16, d, p->n_vocab);
    expect_shape(g, "output_norm.weight", QR_TYPE_F32, d, 1);
    expect_shape(g, "blk.1.attn_q.weight", QR_TYPE_F16, d, q);
    expect_shape(g, "blk.1.attn_k.weight", QR_TYPE_F16, d, kv);
    expect_shape(g, "blk.1.attn_v.weight", QR_TYPE_F16, d, kv);
    expect_shape(g, "blk.0.attn_output.weight", QR_TYPE_F16, q, d);
    expect_shape(g, "blk.0.ffn_gate.weight", QR_TYPE_F16, d, p->n_ff);
    expect_shape(g, "blk.0.ffn_down.weight", QR_TYPE_F16, p->n_ff, d);
    expect_shape(g, "blk.0.attn_norm.weight", QR_TYPE_F32, d, 1);
    /* --layers: the same shapes, fewer layers */
    {
        qr_synth_options o = {.arch = "llama", .preset = "tiny", .type = "F16", .n_threads = 2, .n_layer = 1};
        const char *p1 = tmp("llama1.gguf");
        char err[512];
        if (qr_synth_write(&o, p1, NULL, err, sizeof err) != QR_OK) fail_msg("synth --layers 1: %s", err);
        qr_gguf *g1 = open_ok(p1);
        assert_true(qr_gguf_get_u32(g1, "llama.block_count", &u) && u == 1);
        assert_int_equal(g1->n_tensors, 3 + 9);
        expect_shape(g1, "blk.0.ffn_gate.weight", QR_TYPE_F16, d, p->n_ff);
        qr_gguf_close(g1);
    }

    /* weights: projection std ~ 1/sqrt(fan_in), norms ~ 1, all finite */
    const qr_gguf_tensor *t = tensor(g, "blk.0.ffn_down.weight");
    int64_t n = qr_gguf_tensor_nelements(t);
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, (const uint8_t *)t->data + 2 * i, 2);
        double x = qr_fp16_to_fp32(h);
        assert_true(isfinite(x));
        sum += x;
        sq += x * x;
    }
    double mean = sum / (double)n, sd = sqrt(sq / (double)n - mean * mean), want = 1.0 / sqrt((double)p->n_ff);
    if (fabs(sd / want - 1.0) > 0.03 || fabs(mean) > 0.01 * want * 10) fail_msg("ffn_down mean %g sd %g (want sd %g)", mean, sd, want);
    t = tensor(g, "blk.1.ffn_norm.weight");
    const float *nw = t->data;
    double nm = 0;
    for (int64_t i = 0; i < t->ne[0]; i++) {
        assert_true(nw[i] > 0.6f && nw[i] < 1.4f);
        nm += nw[i];
    }
    assert_true(fabs(nm / (double)t->ne[0] - 1.0) < 0.03);
    qr_gguf_close(g);
}

/* The tokenizer metadata: right sizes, every merge joins two tokens into a third. */
static void test_tokenizer_metadata(void **state) {
    (void)state;
    const char *path = tmp("tok.gguf");
    synth_ok("llama", "tiny", "Q8_0", 0, 1, path);
    qr_gguf *g = open_ok(path);
    const qr_synth_preset *p = qr_synth_find_preset("llama", "tiny");
    const qr_gguf_value *toks = qr_gguf_get_arr(g, "tokenizer.ggml.tokens", QR_GGUF_STRING);
    const qr_gguf_value *merges = qr_gguf_get_arr(g, "tokenizer.ggml.merges", QR_GGUF_STRING);
    const qr_gguf_value *types = qr_gguf_get_arr(g, "tokenizer.ggml.token_type", QR_GGUF_I32);
    assert_non_null(toks);
    assert_non_null(merges);
    assert_non_null(types);
    assert_int_equal(toks->arr.count, p->n_vocab);
    assert_int_equal(types->arr.count, p->n_vocab);
    assert_int_equal(merges->arr.count, p->n_vocab - 260);
    qr_gguf_str s;
    assert_true(qr_gguf_get_str(g, "tokenizer.ggml.model", &s) && qr_gguf_str_eq(s, "gpt2"));
    uint32_t bos, eos;
    assert_true(qr_gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &bos));
    assert_true(qr_gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &eos));
    assert_true(qr_gguf_str_eq(qr_gguf_arr_str(toks, bos), "<|begin_of_text|>"));
    assert_int_equal(qr_gguf_arr_i64(types, eos), 3);
    /* all tokens distinct; a merge "a b" has a and b in the vocab, and a+b is token 260 + index */
    qr_synth_vocab v;
    assert_int_equal(qr_synth_vocab_build(QR_SYNTH_VOCAB_BPE, p->n_vocab, &v, NULL, 0), QR_OK);
    for (uint32_t i = 0; i < v.n_tokens; i++) assert_true(qr_gguf_str_eq(qr_gguf_arr_str(toks, i), v.tokens[i]));
    for (uint32_t m = 0; m < v.n_merges; m++) {
        const char *sp = strchr(v.merges[m], ' ');
        assert_non_null(sp);
        char left[64], right[64], joined[128];
        snprintf(left, sizeof left, "%.*s", (int)(sp - v.merges[m]), v.merges[m]);
        snprintf(right, sizeof right, "%s", sp + 1);
        snprintf(joined, sizeof joined, "%s%s", left, right);
        assert_string_equal(joined, v.tokens[260 + m]);
        bool fl = false, fr = false;
        for (uint32_t i = 0; i < 260 + m && !(fl && fr); i++) {
            fl |= !strcmp(v.tokens[i], left);
            fr |= !strcmp(v.tokens[i], right);
        }
        if (!fl || !fr) fail_msg("merge %u '%s': a half is not an earlier token", m, v.merges[m]);
    }
    for (uint32_t i = 0; i < v.n_tokens; i++)
        for (uint32_t j = i + 1; j < v.n_tokens; j++)
            if (!strcmp(v.tokens[i], v.tokens[j])) fail_msg("tokens %u and %u are both '%s'", i, j, v.tokens[i]);
    qr_synth_vocab_free(&v);
    qr_gguf_close(g);

    /* the SPM vocabulary: byte tokens, scores falling with rank */
    assert_int_equal(qr_synth_vocab_build(QR_SYNTH_VOCAB_SPM, 1000, &v, NULL, 0), QR_OK);
    assert_string_equal(v.model, "llama");
    assert_string_equal(v.tokens[6 + 0x41], "<0x41>");
    assert_int_equal(v.token_types[6 + 0x41], 6);
    assert_string_equal(v.tokens[v.bos], "<bos>");
    assert_string_equal(v.tokens[262], "\xE2\x96\x81");
    for (uint32_t i = 263; i < v.n_tokens; i++) assert_true(v.scores[i] < v.scores[i - 1]);
    qr_synth_vocab_free(&v);
    char err[256];
    assert_int_equal(qr_synth_vocab_build(QR_SYNTH_VOCAB_BPE, 100, &v, err, sizeof err), QR_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "n_vocab"));
}

/* Types in the mixes follow llama-quantize's choices. */
static void test_mix_types(void **state) {
    (void)state;
    const char *path = tmp("mix.gguf");
    synth_ok("llama", "tiny", "Q4_K_M", 0, 2, path);
    qr_gguf *g = open_ok(path);
    uint32_t ft;
    assert_true(qr_gguf_get_u32(g, "general.file_type", &ft) && ft == 15);
    assert_int_equal(tensor(g, "output.weight")->type, QR_TYPE_Q6_K);
    assert_int_equal(tensor(g, "token_embd.weight")->type, QR_TYPE_Q4_K);
    /* 2 layers: use_more_bits(i, 2) is true for layer 1 only */
    assert_int_equal(tensor(g, "blk.0.attn_v.weight")->type, QR_TYPE_Q4_K);
    assert_int_equal(tensor(g, "blk.1.attn_v.weight")->type, QR_TYPE_Q6_K);
    assert_int_equal(tensor(g, "blk.0.ffn_down.weight")->type, QR_TYPE_Q4_K);
    assert_int_equal(tensor(g, "blk.1.ffn_down.weight")->type, QR_TYPE_Q6_K);
    assert_int_equal(tensor(g, "blk.0.attn_q.weight")->type, QR_TYPE_Q4_K);
    assert_int_equal(tensor(g, "blk.0.ffn_norm.weight")->type, QR_TYPE_F32);
    qr_gguf_close(g);

    /* gemma3 tiny (d_model 128, tied): K-quants fall back, the embedding is treated as the output */
    synth_ok("gemma3", "tiny", "Q4_K_M", 0, 2, path);
    g = open_ok(path);
    assert_null(qr_gguf_get_tensor(g, "output.weight"));
    assert_int_equal(tensor(g, "token_embd.weight")->type, QR_TYPE_Q8_0);
    assert_int_equal(tensor(g, "blk.0.attn_q.weight")->type, QR_TYPE_Q5_0);
    assert_int_equal(tensor(g, "blk.1.attn_v.weight")->type, QR_TYPE_Q8_0);
    assert_int_equal(tensor(g, "blk.0.attn_output.weight")->type, QR_TYPE_Q4_K); /* 256-wide rows */
    assert_int_equal(tensor(g, "blk.1.ffn_down.weight")->type, QR_TYPE_Q6_K);
    assert_int_equal(tensor(g, "blk.0.attn_q_norm.weight")->type, QR_TYPE_F32);
    qr_gguf_close(g);

    /* Q4_0: output.weight goes to Q6_K; --pure keeps it Q4_0 */
    synth_ok("llama", "tiny", "Q4_0", 0, 1, path);
    g = open_ok(path);
    assert_int_equal(tensor(g, "output.weight")->type, QR_TYPE_Q6_K);
    assert_int_equal(tensor(g, "token_embd.weight")->type, QR_TYPE_Q4_0);
    qr_gguf_close(g);
    qr_synth_options o = {.arch = "llama", .preset = "tiny", .type = "Q4_0", .pure = true};
    assert_int_equal(qr_synth_write(&o, path, NULL, NULL, 0), QR_OK);
    g = open_ok(path);
    assert_int_equal(tensor(g, "output.weight")->type, QR_TYPE_Q4_0);
    qr_gguf_close(g);
}

/* synth T == quantize(synth F16, T): the same bytes. */
static void test_synth_equals_quantize(void **state) {
    (void)state;
    const char *types[] = {"Q4_0", "Q5_K_M", "Q8_0"};
    const char *archs[] = {"llama", "gemma3"};
    for (int a = 0; a < 2; a++) {
        synth_ok(archs[a], "tiny", "F16", 3, 2, tmp("f16.gguf"));
        for (int i = 0; i < 3; i++) {
            synth_ok(archs[a], "tiny", types[i], 3, 2, tmp("direct.gguf"));
            qr_quantize_options qo = {.ftype = types[i], .n_threads = 2};
            qr_quantize_stats st;
            char err[512];
            if (qr_quantize_model(tmp("f16.gguf"), tmp("quant.gguf"), &qo, &st, err, sizeof err) != QR_OK)
                fail_msg("quantize: %s", err);
            assert_true(st.n_quantized > 0);
            if (!same_file(tmp("direct.gguf"), tmp("quant.gguf"))) fail_msg("%s %s: synth != quantize(F16)", archs[a], types[i]);
        }
    }
    /* an already-quantized input is refused without allow_requantize */
    qr_quantize_options qo = {.ftype = "Q4_0", .n_threads = 1};
    char err[512];
    assert_int_equal(qr_quantize_model(tmp("direct.gguf"), tmp("re.gguf"), &qo, NULL, err, sizeof err), QR_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "requantize"));
    qo.allow_requantize = true;
    assert_int_equal(qr_quantize_model(tmp("direct.gguf"), tmp("re.gguf"), &qo, NULL, err, sizeof err), QR_OK);
    qo.ftype = "Q9_9";
    assert_int_equal(qr_quantize_model(tmp("f16.gguf"), tmp("re.gguf"), &qo, NULL, err, sizeof err), QR_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "Q4_K_M"));
}

/* The streamed file equals what the regular GGUF writer produces from the same content. */
static void test_stream_matches_writer(void **state) {
    (void)state;
    const char *path = tmp("g3.gguf");
    synth_ok("gemma3", "tiny", "Q4_K_M", 0, 2, path);
    qr_gguf *g = open_ok(path);
    qr_gguf_writer *w = qr_gguf_writer_create(3, QR_GGUF_DEFAULT_ALIGNMENT);
    for (uint64_t i = 0; i < g->n_kv; i++) assert_int_equal(qr_gguf_writer_set_value(w, g->kv[i].key, &g->kv[i].value), QR_OK);
    for (uint64_t i = 0; i < g->n_tensors; i++) assert_int_equal(qr_gguf_writer_copy_tensor(w, &g->tensors[i]), QR_OK);
    void *buf = NULL;
    size_t n = 0;
    char err[256];
    assert_int_equal(qr_gguf_writer_write_memory(w, &buf, &n, err, sizeof err), QR_OK);
    size_t fn;
    void *file = slurp(path, &fn);
    assert_int_equal(n, fn);
    assert_memory_equal(buf, file, n);
    free(buf);
    free(file);
    qr_gguf_writer_free(w);
    qr_gguf_close(g);
}

static void test_stream_errors(void **state) {
    (void)state;
    char err[256];
    int64_t ne[2] = {32, 2};
    /* duplicate key: reported by begin */
    qr_gguf_stream *s = qr_gguf_stream_create(32);
    assert_int_equal(qr_gguf_stream_set_u32(s, "a.b", 1), QR_OK);
    assert_int_equal(qr_gguf_stream_set_u32(s, "a.b", 2), QR_ERR_INVALID_ARG);
    assert_int_equal(qr_gguf_stream_begin(s, tmp("x.gguf"), err, sizeof err), QR_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "duplicate key"));
    qr_gguf_stream_free(s);
    /* row length not a multiple of the block */
    s = qr_gguf_stream_create(32);
    int64_t bad[2] = {48, 2};
    assert_int_equal(qr_gguf_stream_add_tensor(s, "t", QR_TYPE_Q4_0, 2, bad), QR_ERR_INVALID_ARG);
    qr_gguf_stream_free(s);
    /* incomplete data: finish fails and no file appears */
    s = qr_gguf_stream_create(32);
    assert_int_equal(qr_gguf_stream_add_tensor(s, "t", QR_TYPE_F32, 2, ne), QR_OK);
    assert_int_equal(qr_gguf_stream_tensor_nbytes(s, 0), 256);
    assert_int_equal(qr_gguf_stream_begin(s, tmp("inc.gguf"), err, sizeof err), QR_OK);
    float x[64] = {0};
    assert_int_equal(qr_gguf_stream_write(s, x, 100, err, sizeof err), QR_OK);
    assert_int_equal(qr_gguf_stream_finish(s, err, sizeof err), QR_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "incomplete"));
    qr_gguf_stream_free(s);
    assert_int_equal(access(tmp("inc.gguf"), F_OK), -1);
    /* too much data */
    s = qr_gguf_stream_create(32);
    assert_int_equal(qr_gguf_stream_add_tensor(s, "t", QR_TYPE_F32, 2, ne), QR_OK);
    assert_int_equal(qr_gguf_stream_begin(s, tmp("big.gguf"), err, sizeof err), QR_OK);
    float y[80] = {0};
    assert_int_equal(qr_gguf_stream_write(s, y, sizeof y, err, sizeof err), QR_ERR_INVALID_ARG);
    qr_gguf_stream_free(s);
    /* unwritable directory */
    s = qr_gguf_stream_create(32);
    assert_int_equal(qr_gguf_stream_begin(s, "/nonexistent-dir/x.gguf", err, sizeof err), QR_ERR_IO);
    qr_gguf_stream_free(s);
    assert_null(qr_gguf_stream_create(24)); /* not a power of two */
}

static void expect_synth_error(qr_synth_options o, const char *path, qr_status want, const char *needle) {
    char err[512] = "";
    qr_status st = qr_synth_write(&o, path, NULL, err, sizeof err);
    if (st != want) fail_msg("status %d (%s), expected %d", st, err, want);
    if (!strstr(err, needle)) fail_msg("error '%s' does not mention '%s'", err, needle);
}

static void test_bad_arguments(void **state) {
    (void)state;
    const char *path = tmp("bad.gguf");
    expect_synth_error((qr_synth_options){.arch = "llama", .preset = "nope"}, path, QR_ERR_INVALID_ARG, "mistral-7b");
    expect_synth_error((qr_synth_options){.arch = "gpt9", .preset = "tiny"}, path, QR_ERR_INVALID_ARG, "gpt9");
    expect_synth_error((qr_synth_options){.arch = "llama", .preset = "tiny", .type = "Q7_K"}, path, QR_ERR_INVALID_ARG, "Q7_K");
    /* "tiny" exists for two architectures */
    expect_synth_error((qr_synth_options){.preset = "tiny"}, path, QR_ERR_INVALID_ARG, "tiny");
    expect_synth_error((qr_synth_options){.arch = "llama"}, path, QR_ERR_INVALID_ARG, "preset");
    expect_synth_error((qr_synth_options){.arch = "llama", .preset = "tiny"}, "", QR_ERR_INVALID_ARG, "output");
    expect_synth_error((qr_synth_options){.arch = "llama", .preset = "tiny"}, "/nonexistent-dir/m.gguf", QR_ERR_IO,
                       "/nonexistent-dir");
    expect_synth_error((qr_synth_options){.arch = "llama", .preset = "tiny", .n_layer = 5000}, path, QR_ERR_INVALID_ARG,
                       "4096");
    /* a hybrid preset's layer pattern bounds --layers */
    expect_synth_error((qr_synth_options){.preset = "granite-4.0-h-tiny", .n_layer = 41}, path, QR_ERR_INVALID_ARG,
                       "40-layer pattern");
    assert_int_equal(access(path, F_OK), -1);
    /* a unique preset name needs no architecture */
    qr_synth_options o = {.preset = "tiny", .arch = "gemma3", .type = "q8_0"};
    assert_int_equal(qr_synth_write(&o, path, NULL, NULL, 0), QR_OK);
    assert_non_null(qr_synth_find_preset(NULL, "mistral-7b"));
    assert_null(qr_synth_find_preset(NULL, "tiny"));
}

/* llama-quantize's rules on a 32-layer GQA model (mistral-7b's tensor list). */
static void test_rules_mistral(void **state) {
    (void)state;
    static char names_buf[400][48];
    const char *names[400];
    size_t n = 0;
    snprintf(names_buf[n], 48, "token_embd.weight"), names[n] = names_buf[n], n++;
    snprintf(names_buf[n], 48, "output.weight"), names[n] = names_buf[n], n++;
    const char *per[] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
    for (int l = 0; l < 32; l++)
        for (int k = 0; k < 7; k++) snprintf(names_buf[n], 48, "blk.%d.%s.weight", l, per[k]), names[n] = names_buf[n], n++;
    qr_quant_model_info mi = {.arch = "llama", .n_layer = 32, .n_head = 32, .n_head_kv = 8};
    qr_quant_plan plan;
    const qr_ftype_info *ft = qr_ftype_from_name("q4_k_m");
    assert_non_null(ft);
    assert_int_equal(ft->llama_ftype, 15);
    assert_ptr_equal(qr_ftype_from_name("Q4_K"), ft); /* alias */
    qr_quant_plan_init(&plan, ft, false, &mi, names, n);
    assert_int_equal(plan.n_attention_wv, 32);
    int64_t ne_d[2] = {4096, 4096}, ne_down[2] = {14336, 4096}, ne_emb[2] = {4096, 32000};
    assert_int_equal(qr_quant_plan_pick(&plan, "output.weight", 2, ne_emb, QR_TYPE_F16, NULL, 0), QR_TYPE_Q6_K);
    assert_int_equal(qr_quant_plan_pick(&plan, "token_embd.weight", 2, ne_emb, QR_TYPE_F16, NULL, 0), QR_TYPE_Q4_K);
    int n_q6_v = 0, n_q6_down = 0;
    for (int l = 0; l < 32; l++) {
        char nm[48];
        bool more = l < 4 || l >= 28 || (l - 4) % 3 == 2;
        snprintf(nm, sizeof nm, "blk.%d.attn_v.weight", l);
        qr_type tv = qr_quant_plan_pick(&plan, nm, 2, ne_d, QR_TYPE_F16, NULL, 0);
        assert_int_equal(tv, more ? QR_TYPE_Q6_K : QR_TYPE_Q4_K);
        snprintf(nm, sizeof nm, "blk.%d.ffn_down.weight", l);
        qr_type td = qr_quant_plan_pick(&plan, nm, 2, ne_down, QR_TYPE_F16, NULL, 0);
        assert_int_equal(td, more ? QR_TYPE_Q6_K : QR_TYPE_Q4_K);
        n_q6_v += tv == QR_TYPE_Q6_K;
        n_q6_down += td == QR_TYPE_Q6_K;
        snprintf(nm, sizeof nm, "blk.%d.attn_q.weight", l);
        assert_int_equal(qr_quant_plan_pick(&plan, nm, 2, ne_d, QR_TYPE_F16, NULL, 0), QR_TYPE_Q4_K);
    }
    assert_int_equal(n_q6_v, 16);
    assert_int_equal(n_q6_down, 16);
    /* norms and 1-D tensors keep their type; a [n, 1] tensor counts as 1-D */
    int64_t ne_norm[2] = {4096, 1};
    assert_int_equal(qr_quant_plan_pick(&plan, "blk.0.attn_norm.weight", 1, ne_norm, QR_TYPE_F32, NULL, 0), QR_TYPE_F32);
    assert_int_equal(qr_quant_plan_pick(&plan, "blk.0.attn_v.weight", 2, ne_norm, QR_TYPE_F32, NULL, 0), QR_TYPE_F32);
    assert_false(qr_quant_tensor_allowed("blk.0.ffn_gate_inp.weight", 2));
    assert_false(qr_quant_tensor_allowed("blk.0.attn_q_norm.weight", 2));
    assert_false(qr_quant_tensor_allowed("blk.0.attn_q.bias", 2));
    assert_true(qr_quant_tensor_allowed("blk.0.ffn_up_exps.weight", 3));

    /* Q2_K: attn_v gets Q4_K with GQA >= 4, ffn_down Q3_K, attn_output Q3_K; fallback to Q4_0 */
    qr_quant_plan_init(&plan, qr_ftype_from_name("Q2_K"), false, &mi, names, n);
    assert_int_equal(qr_quant_plan_pick(&plan, "blk.0.attn_v.weight", 2, ne_d, QR_TYPE_F16, NULL, 0), QR_TYPE_Q4_K);
    assert_int_equal(qr_quant_plan_pick(&plan, "blk.0.ffn_down.weight", 2, ne_down, QR_TYPE_F16, NULL, 0), QR_TYPE_Q3_K);
    assert_int_equal(qr_quant_plan_pick(&plan, "blk.0.attn_output.weight", 2, ne_d, QR_TYPE_F16, NULL, 0), QR_TYPE_Q3_K);
    int64_t ne_odd[2] = {576, 64};
    char note[256];
    assert_int_equal(qr_quant_plan_pick(&plan, "blk.0.attn_q.weight", 2, ne_odd, QR_TYPE_F16, note, sizeof note), QR_TYPE_Q4_0);
    assert_non_null(strstr(note, "576"));
    assert_int_equal(plan.n_fallback, 1);
    /* rows that fit no block at all end as F16 */
    int64_t ne_tiny[2] = {40, 4};
    assert_int_equal(qr_quant_plan_pick(&plan, "blk.0.attn_k.weight", 2, ne_tiny, QR_TYPE_F32, NULL, 0), QR_TYPE_F16);
    /* tied embeddings take the output rule */
    qr_quant_plan_init(&plan, qr_ftype_from_name("Q4_0"), false, &mi, names + 2, n - 2);
    assert_false(plan.has_output);
    assert_int_equal(qr_quant_plan_pick(&plan, "token_embd.weight", 2, ne_emb, QR_TYPE_F16, NULL, 0), QR_TYPE_Q6_K);
    /* F16 file type: every quantizable weight F16, whatever its shape */
    qr_quant_plan_init(&plan, qr_ftype_from_name("F16"), false, &mi, names, n);
    assert_int_equal(qr_quant_plan_pick(&plan, "output.weight", 2, ne_emb, QR_TYPE_F32, NULL, 0), QR_TYPE_F16);
    assert_int_equal(qr_quant_plan_pick(&plan, "blk.0.attn_k.weight", 2, ne_tiny, QR_TYPE_F32, NULL, 0), QR_TYPE_F16);
    /* order: non-block tensors first, then by block number (numerically), then by name */
    assert_true(qr_quant_tensor_order_cmp("output.weight", "blk.0.attn_q.weight") < 0);
    assert_true(qr_quant_tensor_order_cmp("blk.2.attn_q.weight", "blk.10.attn_k.weight") < 0);
    assert_true(qr_quant_tensor_order_cmp("blk.2.attn_v.weight", "blk.2.attn_k.weight") > 0);
    assert_null(qr_ftype_from_name("Q4_K_X"));
}

/* The F16 row encoder (F16C when available) gives exactly the scalar conversion's bits. */
static void test_f16_encode_exact(void **state) {
    (void)state;
    enum { N = 1 << 16 };
    static float x[N];
    static uint16_t a[N];
    uint64_t r = 12345;
    for (int i = 0; i < N; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t bits = (uint32_t)(r >> 32);
        memcpy(&x[i], &bits, 4);
        if (isnan(x[i])) x[i] = 0.5f; /* NaN payloads may differ */
    }
    x[0] = 65504.0f, x[1] = 65520.0f, x[2] = 5.9604645e-8f, x[3] = 2.9802322e-8f, x[4] = -0.0f, x[5] = 1e-10f;
    x[6] = 1.0f + 0.00048828125f, x[7] = INFINITY;
    qr_quant_encode_rows(QR_TYPE_F16, x, a, 1, N);
    for (int i = 0; i < N; i++)
        if (a[i] != qr_fp32_to_fp16(x[i])) fail_msg("x=%a: encoder %04x, scalar %04x", (double)x[i], a[i], qr_fp32_to_fp16(x[i]));
    static float back[N];
    qr_quant_decode_rows(QR_TYPE_F16, a, back, 1, N);
    for (int i = 0; i < N; i++) assert_memory_equal(&back[i], &(float){qr_fp16_to_fp32(a[i])}, 4);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_llama_readback),
        cmocka_unit_test(test_tokenizer_metadata),
        cmocka_unit_test(test_mix_types),
        cmocka_unit_test(test_synth_equals_quantize),
        cmocka_unit_test(test_stream_matches_writer),
        cmocka_unit_test(test_stream_errors),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_rules_mistral),
        cmocka_unit_test(test_f16_encode_exact),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
