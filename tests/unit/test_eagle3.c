/* test_eagle3.c — EAGLE-3 speculative-decoding heads, phase 1 (issue 34): `synth --arch eagle3` heads load with their
 * hyper-parameters and weights bound as llama.cpp's converter lays them out (d2t, no token_embd / output, norm before
 * fc, quantized); the pairing check accepts the head's own target and names each mismatch (hidden size, layer ids,
 * vocabulary, a Mamba2 target, shared embeddings of another width); every run path refuses a head; and copies of a
 * good head with one defect each (keys, shapes, d2t's type and ids) fail to load with their own message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <math.h>

#include "convert/synth.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "model/spec.h"
#include "util/util.h"
#include "quarrel.h"

enum { M_TARGET, M_HEAD, M_HEAD_SHARED, M_HEAD_NARROW, M_HEAD_DEEP, M_HEAD_OTHER_VOCAB, M_TARGET_WIDE, M_HYBRID, M_COUNT };
static const qr_synth_options OPTS[M_COUNT] = {
    /* the tiny llama (2 layers, n_embd 256, 2000 tokens) and its head: d2t over 1000 draft tokens, own embeddings */
    {.arch = "llama", .preset = "tiny", .type = "F16", .seed = 1, .n_threads = 2},
    {.arch = "eagle3", .preset = "tiny", .type = "F16", .seed = 2, .n_threads = 2},
    /* the same target's head sharing its embeddings and output (no d2t), norm before fc, quantized */
    {.arch = "eagle3", .preset = "tiny", .type = "Q8_0", .seed = 3, .n_threads = 2,
     .eagle3 = {.no_token_embd = true, .no_output = true, .norm_before_fc = true}},
    /* a head narrower than the target that would share the target's token embeddings */
    {.arch = "eagle3", .preset = "tiny", .type = "F16", .seed = 4, .n_threads = 2,
     .eagle3 = {.n_embd = 128, .no_token_embd = true, .draft_vocab = 500}},
    /* a head for an 8-layer version of the target: reads layers 2, 4, 5 */
    {.arch = "eagle3", .preset = "tiny", .type = "F16", .seed = 5, .n_threads = 2, .n_layer = 8},
    /* a head for gemma2 tiny: n_embd 256 as the target, another tokenizer (SentencePiece, 1000 tokens) */
    {.arch = "eagle3", .preset = "tiny", .type = "F16", .seed = 6, .n_threads = 2, .eagle3 = {.target_arch = "gemma2"}},
    /* targets that do not fit the head: another width (128, 1000 tokens); Mamba2 layers (n_embd 256, 2000 tokens) */
    {.arch = "llama", .preset = "llama3-long-tiny", .type = "F16", .seed = 7, .n_threads = 2},
    {.arch = "granitehybrid", .preset = "tiny", .type = "F16", .seed = 8, .n_threads = 2},
};
static struct {
    char path[M_COUNT][64];
    qr_model *m[M_COUNT];
} F;

static qr_status load(const char *path, qr_model **out, char *err, size_t err_len) {
    qr_model_params mp = qr_model_default_params();
    mp.n_threads = 2;
    mp.backend = QR_BACKEND_CPU;
    return qr_model_load(path, &mp, out, err, err_len);
}

static int setup(void **state) {
    (void)state;
    char err[512];
    for (int i = 0; i < M_COUNT; i++) {
        snprintf(F.path[i], sizeof F.path[i], "/tmp/quarrel_test_eagle3_XXXXXX");
        int fd = mkstemp(F.path[i]);
        if (fd < 0) return -1;
        close(fd);
        if (qr_synth_write(&OPTS[i], F.path[i], NULL, err, sizeof err) != QR_OK ||
            load(F.path[i], &F.m[i], err, sizeof err) != QR_OK) {
            fprintf(stderr, "setup %d: %s\n", i, err);
            return -1;
        }
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    for (int i = 0; i < M_COUNT; i++) {
        qr_model_free(F.m[i]);
        unlink(F.path[i]);
    }
    return 0;
}

static int64_t d2t_at(const qr_model *m, int32_t i) {
    int64_t v;
    memcpy(&v, (const char *)m->d2t.host + (size_t)i * sizeof v, sizeof v);
    return v;
}

static bool in_weight_list(const qr_model *m, const qr_weight *w) {
    for (int32_t i = 0; i < m->n_weights; i++)
        if (m->weights[i] == w) return true;
    return false;
}

/* The default head: everything bound where llama.cpp's loader finds it. */
static void test_head_loads(void **state) {
    (void)state;
    const qr_model *h = F.m[M_HEAD];
    const qr_hparams *hp = &h->hp;
    assert_string_equal(qr_model_arch(h), "eagle3");
    assert_true(h->arch->spec_head);
    assert_int_equal(hp->n_layer, 1);
    assert_int_equal(hp->n_embd, 256);
    assert_int_equal(hp->eagle3_target_embd, 256);
    /* a 2-layer target: the first, middle and last layer (the converter's [2, L/2, L-3] needs L >= 6) */
    assert_int_equal(hp->eagle3_layers[0], 0);
    assert_int_equal(hp->eagle3_layers[1], 1);
    assert_int_equal(hp->eagle3_layers[2], 1);
    assert_false(hp->eagle3_norm_before_residual);
    assert_false(hp->eagle3_norm_before_fc);
    assert_int_equal(hp->n_vocab, 2000);
    assert_int_equal(hp->n_vocab_draft, 1000);
    assert_int_equal(h->fc.ne[0], 768);
    assert_int_equal(h->fc.ne[1], 256);
    assert_null(h->enc_norm.host);
    assert_non_null(h->tok_embd.host);
    assert_int_equal(h->tok_embd.ne[1], 2000);
    assert_int_equal(h->output.ne[0], 256);
    assert_int_equal(h->output.ne[1], 1000);
    assert_non_null(h->output_norm.host);
    const qr_layer *l = &h->layers[0];
    assert_non_null(l->attn_norm.host);
    assert_non_null(l->attn_norm_2.host);
    assert_int_equal(l->attn_q.ne[0], 512); /* [normed embedding | normed g] */
    assert_int_equal(l->attn_q.ne[1], 256);
    assert_int_equal(l->attn_k.ne[0], 512);
    assert_int_equal(l->attn_k.ne[1], 128);
    assert_int_equal(l->attn_v.ne[0], 512);
    assert_int_equal(l->attn_out.ne[0], 256);
    assert_int_equal(l->ffn_down.ne[0], 768);
    /* d2t: I64 absolute target ids, a host view the backend does not prepare; synth spreads them i -> 2 i */
    assert_non_null(h->d2t.host);
    assert_int_equal(h->d2t.type, QR_TYPE_I64);
    assert_int_equal(h->d2t.ne[0], 1000);
    assert_false(in_weight_list(h, &h->d2t));
    assert_true(in_weight_list(h, &h->fc));
    for (int32_t i = 0; i < 1000; i++) assert_int_equal(d2t_at(h, i), 2 * i);
    char err[512];
    assert_int_equal(qr_eagle3_check_target(h, F.m[M_TARGET], err, sizeof err), QR_OK);
}

/* No d2t, no token_embd, no output (the target's), norm before fc, Q8_0 weights. */
static void test_shared_head_loads(void **state) {
    (void)state;
    const qr_model *h = F.m[M_HEAD_SHARED];
    assert_null(h->tok_embd.host);
    assert_null(h->output.host);
    assert_null(h->d2t.host);
    assert_int_equal(h->hp.n_vocab, 2000);
    assert_int_equal(h->hp.n_vocab_draft, 2000);
    assert_true(h->hp.eagle3_norm_before_fc);
    assert_non_null(h->enc_norm.host);
    assert_int_equal(h->enc_norm.ne[0], 768);
    assert_int_equal(h->enc_norm.type, QR_TYPE_F32);
    assert_int_equal(h->fc.type, QR_TYPE_Q8_0);
    assert_int_equal(h->layers[0].attn_q.type, QR_TYPE_Q8_0);
    char err[512];
    assert_int_equal(qr_eagle3_check_target(h, F.m[M_TARGET], err, sizeof err), QR_OK);
    assert_int_equal(F.m[M_HEAD_DEEP]->hp.eagle3_layers[0], 2); /* 8 layers: the converter's own [2, 4, 5] */
    assert_int_equal(F.m[M_HEAD_DEEP]->hp.eagle3_layers[1], 4);
    assert_int_equal(F.m[M_HEAD_DEEP]->hp.eagle3_layers[2], 5);
}

static void expect_pair_error(int head, int target, qr_status want, const char *needle) {
    char err[512] = "";
    assert_int_equal(qr_eagle3_check_target(F.m[head], F.m[target], err, sizeof err), want);
    if (!strstr(err, needle)) fail_msg("pairing %d with %d: '%s' lacks '%s'", head, target, err, needle);
}

static void test_pairing_mismatches(void **state) {
    (void)state;
    /* a target of another width (the head reads 3 x 256 features) */
    expect_pair_error(M_HEAD, M_TARGET_WIDE, QR_ERR_INVALID_ARG, "hidden size 256");
    /* a target with Mamba2 layers */
    expect_pair_error(M_HEAD, M_HYBRID, QR_ERR_UNSUPPORTED, "Mamba2");
    /* layer 4 of a 2-layer target (2 itself is the last layer's output, allowed) */
    expect_pair_error(M_HEAD_DEEP, M_TARGET, QR_ERR_INVALID_ARG, "reads target layer 4");
    /* the target's 256-wide token embeddings for a 128-wide head */
    expect_pair_error(M_HEAD_NARROW, M_TARGET, QR_ERR_INVALID_ARG, "share the target's");
    /* another tokenizer, the same width and layers */
    expect_pair_error(M_HEAD_OTHER_VOCAB, M_TARGET, QR_ERR_INVALID_ARG, "EAGLE-3 head's vocabulary is incompatible");
    /* the arguments the wrong way round; a head as the target */
    expect_pair_error(M_TARGET, M_HEAD, QR_ERR_INVALID_ARG, "is not an EAGLE-3 head");
    expect_pair_error(M_HEAD, M_HEAD_SHARED, QR_ERR_INVALID_ARG, "not a decoder model");
}

/* A head is not a model to run: contexts (run, chat, serve, bench, perplexity, logits, embed) and draft models refuse
 * it. */
static void test_run_paths_refuse(void **state) {
    (void)state;
    char err[512];
    qr_context *ctx = NULL;
    assert_int_equal(qr_context_create(F.m[M_HEAD], NULL, &ctx, err, sizeof err), QR_ERR_UNSUPPORTED);
    assert_null(ctx);
    assert_non_null(strstr(err, "speculative-decoding head"));
    assert_non_null(strstr(err, "--spec eagle3"));
    qr_context_params cp = qr_context_default_params();
    cp.n_ctx = 256;
    assert_int_equal(qr_context_create(F.m[M_TARGET], &cp, &ctx, err, sizeof err), QR_OK);
    qr_spec_params sp = qr_spec_default_params();
    sp.kind = QR_SPEC_DRAFT; /* a head as a draft model */
    sp.draft_model = F.m[M_HEAD];
    qr_spec *spec = NULL;
    assert_int_equal(qr_spec_create(ctx, &sp, &spec, err, sizeof err), QR_ERR_INVALID_ARG);
    assert_null(spec);
    assert_non_null(strstr(err, "EAGLE-3 head"));
    assert_non_null(strstr(err, "--spec eagle3"));
    sp.kind = QR_SPEC_EAGLE3; /* a draft model as a head */
    sp.draft_model = F.m[M_TARGET_WIDE];
    assert_int_equal(qr_spec_create(ctx, &sp, &spec, err, sizeof err), QR_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "not an EAGLE-3 head"));
    qr_context_free(ctx);
}

/* The target side (qr_context_capture_layers): layer 0's input is the token embeddings; a batch split into passes of
 * 3 rows (n_batch 3) captures what one pass of 8 rows does; bad requests are refused. */
static void decode_captured(int32_t n_batch, float *out) {
    char err[512];
    qr_context_params cp = qr_context_default_params();
    cp.n_ctx = 64;
    cp.n_batch = n_batch;
    qr_context *ctx = NULL;
    assert_int_equal(qr_context_create(F.m[M_TARGET], &cp, &ctx, err, sizeof err), QR_OK);
    assert_null(qr_get_captured(ctx, NULL, NULL));
    const int32_t layers[3] = {1, 0, 1};
    assert_int_equal(qr_context_capture_layers(ctx, 3, layers, err, sizeof err), QR_OK);
    assert_int_equal(qr_context_capture_layers(ctx, 1, layers, err, sizeof err), QR_ERR_INVALID_ARG); /* twice */
    const qr_token tok[8] = {1, 17, 300, 5, 1999, 42, 7, 64};
    const qr_batch b = {.n_tokens = 8, .token = tok};
    assert_int_equal(qr_decode(ctx, &b, err, sizeof err), QR_OK);
    int32_t rows = 0, width = 0;
    const float *h = qr_get_captured(ctx, &rows, &width);
    assert_non_null(h);
    assert_int_equal(rows, 8);
    assert_int_equal(width, 3 * 256);
    memcpy(out, h, sizeof(float) * 8 * 3 * 256);
    qr_context_free(ctx);
}

static void test_capture(void **state) {
    (void)state;
    static float one[8 * 768], split[8 * 768], emb[256];
    decode_captured(64, one);
    decode_captured(3, split);
    const qr_token tok[8] = {1, 17, 300, 5, 1999, 42, 7, 64};
    const qr_model *m = F.m[M_TARGET];
    assert_true(m->tok_embd.type == QR_TYPE_F16 || m->tok_embd.type == QR_TYPE_F32);
    for (int r = 0; r < 8; r++) { /* layer 0's input: the token's embedding row */
        const char *row = (const char *)m->tok_embd.host + (size_t)tok[r] * m->tok_embd.row_bytes;
        for (int i = 0; i < 256; i++) {
            uint16_t h16;
            memcpy(&h16, row + 2 * i, 2);
            if (m->tok_embd.type == QR_TYPE_F16) emb[i] = qr_fp16_to_fp32(h16);
            else memcpy(&emb[i], row + 4 * i, 4);
        }
        for (int i = 0; i < 256; i++) {
            assert_float_equal(one[r * 768 + 256 + i], emb[i], 0.0f);
            assert_float_equal(one[r * 768 + i], one[r * 768 + 512 + i], 0.0f); /* layer 1 twice */
        }
    }
    double diff = 0, mag = 0, moved = 0;
    for (int i = 0; i < 8 * 768; i++) {
        diff = fmax(diff, fabs((double)one[i] - split[i]));
        mag = fmax(mag, fabs((double)one[i]));
    }
    for (int r = 0; r < 8; r++)
        for (int i = 0; i < 256; i++) moved = fmax(moved, fabs((double)one[r * 768 + i] - one[r * 768 + 256 + i]));
    assert_true(diff <= 1e-5 * mag);
    assert_true(moved > 1e-2); /* layer 1's input is not the embeddings */
    char err[512];
    qr_context *ctx = NULL;
    qr_context_params cp = qr_context_default_params();
    cp.n_ctx = 64;
    assert_int_equal(qr_context_create(F.m[M_TARGET], &cp, &ctx, err, sizeof err), QR_OK);
    const int32_t bad[1] = {3}; /* the tiny target has 2 layers (2: the final state) */
    assert_int_equal(qr_context_capture_layers(ctx, 1, bad, err, sizeof err), QR_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "outside [0, 2]"));
    assert_int_equal(qr_context_capture_layers(ctx, 4, bad, err, sizeof err), QR_ERR_INVALID_ARG);
    const qr_token t1 = 3;
    const qr_batch b = {.n_tokens = 1, .token = &t1};
    assert_int_equal(qr_decode(ctx, &b, err, sizeof err), QR_OK);
    const int32_t ok[1] = {0};
    assert_int_equal(qr_context_capture_layers(ctx, 1, ok, err, sizeof err), QR_ERR_INVALID_ARG); /* after a decode */
    assert_non_null(strstr(err, "before the context's first decode"));
    qr_context_free(ctx);
    assert_int_equal(qr_context_create(F.m[M_HYBRID], &cp, &ctx, err, sizeof err), QR_OK);
    assert_int_equal(qr_context_capture_layers(ctx, 1, ok, err, sizeof err), QR_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "not supported yet"));
    qr_context_free(ctx);
}

/* ---- bad files: copies of the good head with one edit each ---- */

typedef struct variant {
    const char *drop_key, *drop_tensor;
    const char *u32_key;        /* (re)set to u32 */
    uint32_t u32;
    const char *bool_key;       /* (re)set to true */
    const char *arr_key;        /* (re)set to arr[0..arr_n) of arr_type */
    qr_gguf_vtype arr_type;
    const void *arr;
    uint64_t arr_n;
    const char *tensor;         /* replaced (or added) by ne0 x ne1 of ttype from tdata */
    qr_type ttype;
    int64_t ne0, ne1;
    const void *tdata;
    const char *expect;         /* in the load error; NULL: the copy loads */
} variant;

static bool is(qr_gguf_str s, const char *c) { return c && qr_gguf_str_eq(s, c); }

static void write_variant(const variant *v, const char *path) {
    char err[512];
    qr_gguf *g = NULL;
    assert_int_equal(qr_gguf_open(F.path[M_HEAD], &g, err, sizeof err), QR_OK);
    qr_gguf_writer *w = qr_gguf_writer_create(3, g->alignment);
    assert_non_null(w);
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const qr_gguf_kv *kv = &g->kv[i];
        if (is(kv->key, v->drop_key) || is(kv->key, v->u32_key) || is(kv->key, v->bool_key) || is(kv->key, v->arr_key))
            continue;
        assert_int_equal(qr_gguf_writer_set_value(w, kv->key, &kv->value), QR_OK);
    }
    if (v->u32_key) assert_int_equal(qr_gguf_writer_set_u32(w, v->u32_key, v->u32), QR_OK);
    if (v->bool_key) assert_int_equal(qr_gguf_writer_set_bool(w, v->bool_key, true), QR_OK);
    if (v->arr_key) assert_int_equal(qr_gguf_writer_set_arr(w, v->arr_key, v->arr_type, v->arr, v->arr_n), QR_OK);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const qr_gguf_tensor *t = &g->tensors[i];
        if (is(t->name, v->drop_tensor) || is(t->name, v->tensor)) continue;
        assert_int_equal(qr_gguf_writer_copy_tensor(w, t), QR_OK);
    }
    if (v->tensor) {
        const int64_t ne[2] = {v->ne0, v->ne1};
        assert_int_equal(qr_gguf_writer_add_tensor(w, v->tensor, v->ttype, v->ne1 > 1 ? 2 : 1, ne, v->tdata), QR_OK);
    }
    assert_int_equal(qr_gguf_writer_write(w, path, err, sizeof err), QR_OK);
    qr_gguf_writer_free(w);
    qr_gguf_close(g);
}

static void test_bad_files(void **state) {
    (void)state;
    static const int32_t two_layers[2] = {0, 1}, old_layers[3] = {0, 1, 1};
    static const float float_layers[3] = {0, 1, 1};
    static float zeros[768 * 256];       /* F32 tensors of the wrong shape */
    static int64_t ids[2001];
    static int64_t ids_far[1000], ids_twice[1000];
    for (int i = 0; i < 2001; i++) ids[i] = i;
    for (int i = 0; i < 1000; i++) ids_far[i] = ids_twice[i] = 2 * i;
    ids_far[999] = 2000;  /* one past the vocabulary */
    ids_twice[7] = ids_twice[6]; /* the same target token twice */
    const variant cases[] = {
        {.drop_key = "eagle3.target_layers", .expect = "missing metadata key eagle3.target_layers"},
        {.arr_key = "eagle3.target_layers", .arr_type = QR_GGUF_I32, .arr = two_layers, .arr_n = 2,
         .expect = "eagle3.target_layers has 2 entries"},
        {.arr_key = "eagle3.target_layers", .arr_type = QR_GGUF_F32, .arr = float_layers, .arr_n = 3,
         .expect = "expected an array of 3 integers"},
        /* the pre-release key name is accepted */
        {.drop_key = "eagle3.target_layers", .arr_key = "eagle3.extract_layers", .arr_type = QR_GGUF_I32,
         .arr = old_layers, .arr_n = 3, .expect = NULL},
        {.drop_key = "eagle3.target_hidden_size", .expect = "missing metadata key eagle3.target_hidden_size"},
        {.u32_key = "eagle3.block_count", .u32 = 2, .expect = "eagle3.block_count = 2: an EAGLE-3 head has exactly one"},
        /* fc for a target of another width; attention reading E instead of 2 E */
        {.u32_key = "eagle3.target_hidden_size", .u32 = 128,
         .expect = "tensor fc.weight has shape [768, 256, 1, 1], expected [384, 256]"},
        {.tensor = "fc.weight", .ttype = QR_TYPE_F32, .ne0 = 512, .ne1 = 256, .tdata = zeros,
         .expect = "tensor fc.weight has shape [512, 256, 1, 1], expected [768, 256]"},
        {.tensor = "blk.0.attn_q.weight", .ttype = QR_TYPE_F32, .ne0 = 256, .ne1 = 256, .tdata = zeros,
         .expect = "tensor blk.0.attn_q.weight has shape [256, 256, 1, 1], expected [512, 256]"},
        {.tensor = "blk.0.attn_v.weight", .ttype = QR_TYPE_F32, .ne0 = 256, .ne1 = 128, .tdata = zeros,
         .expect = "tensor blk.0.attn_v.weight has shape [256, 128, 1, 1], expected [512, 128]"},
        {.drop_tensor = "fc.weight", .expect = "missing tensor fc.weight"},
        {.drop_tensor = "blk.0.attn_norm_2.weight", .expect = "missing tensor blk.0.attn_norm_2.weight"},
        /* d2t: its type, its ids, its length against the vocabulary and the output matrix */
        {.tensor = "d2t", .ttype = QR_TYPE_F32, .ne0 = 1000, .ne1 = 1, .tdata = zeros,
         .expect = "tensor d2t has type F32, expected I64"},
        {.tensor = "d2t", .ttype = QR_TYPE_I64, .ne0 = 1000, .ne1 = 1, .tdata = ids_far,
         .expect = "d2t[999] = 2000 is outside the vocabulary [0, 2000)"},
        {.tensor = "d2t", .ttype = QR_TYPE_I64, .ne0 = 1000, .ne1 = 1, .tdata = ids_twice,
         .expect = "d2t[7] = 12 repeats d2t[6]"},
        {.tensor = "d2t", .ttype = QR_TYPE_I64, .ne0 = 2001, .ne1 = 1, .tdata = ids,
         .expect = "tensor d2t has 2001 entries"},
        {.tensor = "d2t", .ttype = QR_TYPE_I64, .ne0 = 999, .ne1 = 1, .tdata = ids,
         .expect = "tensor output.weight has shape [256, 1000, 1, 1], expected [256, 999]"},
        {.drop_tensor = "output.weight", .expect = "d2t maps a draft vocabulary of 1000 tokens, but the file has no "
                                                   "output.weight"},
        /* norm before fc: the flag and enc.output_norm go together */
        {.bool_key = "eagle3.norm_before_fc", .expect = "missing tensor enc.output_norm.weight (required by "
                                                        "eagle3.norm_before_fc = true)"},
        {.tensor = "enc.output_norm.weight", .ttype = QR_TYPE_F32, .ne0 = 768, .ne1 = 1, .tdata = zeros,
         .expect = "enc.output_norm.weight is only read with eagle3.norm_before_fc = true"},
        {.drop_key = "tokenizer.ggml.tokens", .expect = "missing metadata key tokenizer.ggml.tokens"},
    };
    char path[64];
    snprintf(path, sizeof path, "/tmp/quarrel_test_eagle3_bad_XXXXXX");
    const int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const variant *v = &cases[i];
        write_variant(v, path);
        char err[512] = "";
        qr_model *m = NULL;
        const qr_status st = load(path, &m, err, sizeof err);
        if (!v->expect) {
            if (st != QR_OK) fail_msg("case %zu should load: %s", i, err);
            assert_int_equal(m->hp.eagle3_layers[1], 1);
            qr_model_free(m);
            continue;
        }
        assert_null(m);
        if (st == QR_OK || !strstr(err, v->expect)) fail_msg("case %zu: status %d, '%s' lacks '%s'", i, st, err, v->expect);
    }
    unlink(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_head_loads),         cmocka_unit_test(test_shared_head_loads),
        cmocka_unit_test(test_pairing_mismatches), cmocka_unit_test(test_run_paths_refuse),
        cmocka_unit_test(test_bad_files),          cmocka_unit_test(test_capture),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
