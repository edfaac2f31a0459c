/* test_model.c — the engine on tiny random-weight models written with the GGUF writer:
 * batch of N rows == N single-row decodes (paged KV correctness), chunked passes == one pass, two
 * sequences in one batch == each alone, seq_rm + re-decode == first decode, tied embeddings,
 * gemma3's sliding window really limits what a row sees, and clear errors on bad files and batches. */
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
#include "model/model.h"
#include "quant/quant.h"
#include "quarrel.h"

/* ---- tiny model writer ---- */

typedef struct tiny_spec {
    const char *arch;     /* "llama" or "gemma3" */
    int n_embd, n_head, n_head_kv, head_dim, n_ff, n_layer, n_vocab;
    int n_swa, swa_pattern; /* gemma3: window and period (-1 = key absent) */
    qr_type wtype;        /* type of the matmul weights */
    bool tied;            /* no output.weight */
    /* corruptions for the error tests */
    const char *skip_key;    /* metadata suffix to leave out, e.g. "block_count" */
    const char *skip_tensor; /* full tensor name to leave out */
    const char *bad_shape;   /* full tensor name written with a wrong row count */
    const char *extra_tensor;/* full tensor name added (e.g. a bias) */
} tiny_spec;

typedef struct buf_list {
    void *p[256];
    int n;
} buf_list;

static uint64_t rng = 88172645463325252ull;
static float frand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) & 0xFFFFFF) / (float)(1 << 23) - 1.0f;
}

/* Adds tensor `name` [rows][cols] of `type` filled with uniform(-amp, amp) (or 1 + that for norms). */
static void add_tensor(qr_gguf_writer *w, buf_list *bl, const tiny_spec *s, const char *name, qr_type type, int64_t cols,
                       int64_t rows, float amp, float center) {
    if (s->skip_tensor && !strcmp(name, s->skip_tensor)) return;
    if (s->bad_shape && !strcmp(name, s->bad_shape)) rows += 1;
    float *f = malloc(sizeof(float) * (size_t)(cols * rows));
    for (int64_t i = 0; i < cols * rows; i++) f[i] = center + amp * frand();
    const size_t rb = qr_type_row_size(type, cols);
    void *data = malloc(rb * (size_t)rows);
    if (type == QR_TYPE_F32) memcpy(data, f, rb * (size_t)rows);
    else
        for (int64_t r = 0; r < rows; r++) qr_quant_traits_ref(type)->from_float(f + r * cols, (char *)data + r * rb, cols);
    free(f);
    bl->p[bl->n++] = data;
    const int64_t ne[2] = {cols, rows};
    assert_int_equal(qr_gguf_writer_add_tensor(w, name, type, rows > 1 ? 2 : 1, ne, data), QR_OK);
}

static void key_u32(qr_gguf_writer *w, const tiny_spec *s, const char *suffix, uint32_t v) {
    if (s->skip_key && !strcmp(s->skip_key, suffix)) return;
    char k[128];
    snprintf(k, sizeof k, "%s.%s", s->arch, suffix);
    assert_int_equal(qr_gguf_writer_set_u32(w, k, v), QR_OK);
}

static void key_f32(qr_gguf_writer *w, const tiny_spec *s, const char *suffix, float v) {
    if (s->skip_key && !strcmp(s->skip_key, suffix)) return;
    char k[128];
    snprintf(k, sizeof k, "%s.%s", s->arch, suffix);
    assert_int_equal(qr_gguf_writer_set_f32(w, k, v), QR_OK);
}

/* Writes the model to a fresh temp file; returns its path (static buffer per call site). */
static void write_tiny(const tiny_spec *s, char *path, size_t cap) {
    snprintf(path, cap, "/tmp/quarrel_test_model_XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    qr_gguf_writer *w = qr_gguf_writer_create(3, QR_GGUF_DEFAULT_ALIGNMENT);
    assert_non_null(w);
    buf_list bl = {.n = 0};
    rng = 88172645463325252ull; /* the same weights for the same spec */
    const bool gemma = !strcmp(s->arch, "gemma3");
    assert_int_equal(qr_gguf_writer_set_str(w, "general.architecture", s->arch), QR_OK);
    key_u32(w, s, "context_length", 256);
    key_u32(w, s, "embedding_length", (uint32_t)s->n_embd);
    key_u32(w, s, "block_count", (uint32_t)s->n_layer);
    key_u32(w, s, "feed_forward_length", (uint32_t)s->n_ff);
    key_u32(w, s, "attention.head_count", (uint32_t)s->n_head);
    key_u32(w, s, "attention.head_count_kv", (uint32_t)s->n_head_kv);
    key_f32(w, s, "attention.layer_norm_rms_epsilon", 1e-5f);
    key_f32(w, s, "rope.freq_base", gemma ? 1000000.0f : 10000.0f);
    if (gemma) {
        key_u32(w, s, "attention.key_length", (uint32_t)s->head_dim);
        key_u32(w, s, "attention.value_length", (uint32_t)s->head_dim);
        if (s->n_swa > 0) key_u32(w, s, "attention.sliding_window", (uint32_t)s->n_swa);
        if (s->swa_pattern >= 0) key_u32(w, s, "attention.sliding_window_pattern", (uint32_t)s->swa_pattern);
    } else {
        key_u32(w, s, "rope.dimension_count", (uint32_t)s->head_dim);
    }
    const int E = s->n_embd, QD = s->n_head * s->head_dim, KD = s->n_head_kv * s->head_dim;
    add_tensor(w, &bl, s, "token_embd.weight", QR_TYPE_Q8_0, E, s->n_vocab, 1.0f, 0.0f);
    add_tensor(w, &bl, s, "output_norm.weight", QR_TYPE_F32, E, 1, 0.2f, 1.0f);
    if (!s->tied) add_tensor(w, &bl, s, "output.weight", s->wtype, E, s->n_vocab, 0.5f, 0.0f);
    for (int il = 0; il < s->n_layer; il++) {
        char n[96];
#define T(name, type, cols, rows, amp, center)                                                                         \
    snprintf(n, sizeof n, "blk.%d.%s.weight", il, name), add_tensor(w, &bl, s, n, type, cols, rows, amp, center)
        T("attn_norm", QR_TYPE_F32, E, 1, 0.2f, 1.0f);
        T("attn_q", s->wtype, E, QD, 0.3f, 0.0f);
        T("attn_k", s->wtype, E, KD, 0.3f, 0.0f);
        T("attn_v", s->wtype, E, KD, 0.3f, 0.0f);
        T("attn_output", s->wtype, QD, E, 0.3f, 0.0f);
        T("ffn_norm", QR_TYPE_F32, E, 1, 0.2f, 1.0f);
        T("ffn_gate", s->wtype, E, s->n_ff, 0.3f, 0.0f);
        T("ffn_up", s->wtype, E, s->n_ff, 0.3f, 0.0f);
        T("ffn_down", s->wtype, s->n_ff, E, 0.3f, 0.0f);
        if (gemma) {
            T("attn_q_norm", QR_TYPE_F32, s->head_dim, 1, 0.2f, 1.0f);
            T("attn_k_norm", QR_TYPE_F32, s->head_dim, 1, 0.2f, 1.0f);
            T("post_attention_norm", QR_TYPE_F32, E, 1, 0.2f, 1.0f);
            T("post_ffw_norm", QR_TYPE_F32, E, 1, 0.2f, 1.0f);
        }
#undef T
    }
    if (s->extra_tensor) add_tensor(w, &bl, s, s->extra_tensor, QR_TYPE_F32, E, 1, 0.1f, 0.0f);
    char err[256];
    assert_int_equal(qr_gguf_writer_write(w, path, err, sizeof err), QR_OK);
    qr_gguf_writer_free(w);
    for (int i = 0; i < bl.n; i++) free(bl.p[i]);
}

static const tiny_spec llama_spec = {.arch = "llama", .n_embd = 64, .n_head = 4, .n_head_kv = 2, .head_dim = 16,
                                     .n_ff = 96, .n_layer = 2, .n_vocab = 50, .swa_pattern = -1, .wtype = QR_TYPE_Q8_0};
static const tiny_spec gemma_spec = {.arch = "gemma3", .n_embd = 64, .n_head = 2, .n_head_kv = 1, .head_dim = 32,
                                     .n_ff = 64, .n_layer = 3, .n_vocab = 40, .n_swa = 4, .swa_pattern = 2,
                                     .wtype = QR_TYPE_Q8_0, .tied = true};

/* ---- helpers ---- */

typedef struct loaded {
    char path[64];
    qr_model *m;
    qr_context *c;
} loaded;

static void load(const tiny_spec *s, int n_batch, int n_seq, loaded *L) {
    write_tiny(s, L->path, sizeof L->path);
    char err[256];
    qr_model_params mp = qr_model_default_params();
    mp.n_threads = 2;
    assert_int_equal(qr_model_load(L->path, &mp, &L->m, err, sizeof err), QR_OK);
    qr_context_params cp = qr_context_default_params();
    cp.n_ctx = 128;
    cp.n_batch = n_batch;
    cp.n_seq_max = n_seq;
    assert_int_equal(qr_context_create(L->m, &cp, &L->c, err, sizeof err), QR_OK);
}

static void unload(loaded *L) {
    qr_context_free(L->c);
    qr_model_free(L->m);
    unlink(L->path);
}

/* Decodes toks[0..n) of sequence seq in one qr_decode, all rows wanting logits; copies them. */
static void decode_all(qr_context *c, const int32_t *toks, int n, int32_t seq, float *out, int V) {
    int32_t seqs[64];
    int8_t lg[64];
    for (int i = 0; i < n; i++) seqs[i] = seq, lg[i] = 1;
    qr_batch b = {.n_tokens = n, .token = toks, .seq_id = seqs, .logits = lg};
    char err[256] = "";
    const qr_status st = qr_decode(c, &b, err, sizeof err);
    if (st != QR_OK) fail_msg("decode: %s", err);
    for (int i = 0; i < n; i++) memcpy(out + (size_t)i * V, qr_get_logits(c, i), sizeof(float) * V);
}

static float max_abs(const float *a, int n) {
    float m = 0;
    for (int i = 0; i < n; i++) m = fmaxf(m, fabsf(a[i]));
    return m;
}

/* |a - b| <= tol * max|b| element-wise. */
static void assert_close(const char *what, const float *a, const float *b, int n, float tol) {
    const float lim = tol * max_abs(b, n);
    for (int i = 0; i < n; i++)
        if (!(fabsf(a[i] - b[i]) <= lim)) fail_msg("%s: element %d: %g vs %g (limit %g)", what, i, a[i], b[i], lim);
}

static const int32_t toks[20] = {3, 17, 32, 5, 5, 9, 33, 1, 0, 28, 11, 7, 19, 2, 30, 14, 8, 25, 36, 4};

/* One pass of N rows == N one-row passes (paged cache across passes); chunked == unchunked. */
static void check_batch_vs_single(const tiny_spec *s) {
    const int N = 20;
    loaded A, B, C;
    load(s, 512, 1, &A);
    load(s, 512, 1, &B);
    load(s, 7, 1, &C); /* passes of 7, 7, 6 rows */
    const int V = qr_model_n_vocab(A.m);
    assert_int_equal(V, s->n_vocab);
    float *la = malloc(sizeof(float) * N * V), *lb = malloc(sizeof(float) * N * V), *lc = malloc(sizeof(float) * N * V);
    decode_all(A.c, toks, N, 0, la, V);
    for (int i = 0; i < N; i++) {
        qr_batch b = {.n_tokens = 1, .token = &toks[i]};
        char err[256];
        assert_int_equal(qr_decode(B.c, &b, err, sizeof err), QR_OK);
        memcpy(lb + (size_t)i * V, qr_get_logits(B.c, 0), sizeof(float) * V);
        assert_ptr_equal(qr_get_logits(B.c, -1), qr_get_logits(B.c, 0));
    }
    assert_int_equal(qr_kv_seq_len(B.c, 0), N);
    /* one-row passes sum the attention in another order (as llama.cpp does): ulps, not more */
    assert_close("batch vs single", la, lb, N * V, 1e-4f);
    decode_all(C.c, toks, N, 0, lc, V);
    assert_memory_equal(la, lc, sizeof(float) * N * V); /* multi-row passes: same bits */
    free(la), free(lb), free(lc);
    unload(&A), unload(&B), unload(&C);
}

static void test_llama_batch_vs_single(void **state) {
    (void)state;
    check_batch_vs_single(&llama_spec);
}

static void test_gemma3_batch_vs_single(void **state) {
    (void)state;
    check_batch_vs_single(&gemma_spec);
}

/* Two sequences interleaved in one batch == each decoded alone. */
static void test_two_sequences(void **state) {
    (void)state;
    loaded A, B;
    load(&llama_spec, 512, 2, &A);
    load(&llama_spec, 512, 1, &B);
    const int V = qr_model_n_vocab(A.m), n0 = 9, n1 = 12;
    const int32_t *t0 = toks, *t1 = toks + 5;
    int32_t bt[21], bs[21];
    int8_t lg[21];
    int i0 = 0, i1 = 0, n = 0;
    while (i0 < n0 || i1 < n1) { /* interleave: 1 of seq 0, 2 of seq 1 */
        if (i0 < n0) bt[n] = t0[i0++], bs[n++] = 0;
        for (int k = 0; k < 2 && i1 < n1; k++) bt[n] = t1[i1++], bs[n++] = 1;
    }
    for (int i = 0; i < n; i++) lg[i] = 1;
    qr_batch b = {.n_tokens = n, .token = bt, .seq_id = bs, .logits = lg};
    char err[256];
    assert_int_equal(qr_decode(A.c, &b, err, sizeof err), QR_OK);
    assert_int_equal(qr_kv_seq_len(A.c, 0), n0);
    assert_int_equal(qr_kv_seq_len(A.c, 1), n1);
    float *alone = malloc(sizeof(float) * 16 * V);
    for (int s = 0; s < 2; s++) {
        const int ns = s ? n1 : n0;
        qr_kv_clear(B.c);
        decode_all(B.c, s ? t1 : t0, ns, 0, alone, V);
        int k = 0;
        for (int i = 0; i < n; i++) {
            if (bs[i] != s) continue;
            assert_memory_equal(qr_get_logits(A.c, i), alone + (size_t)k * V, sizeof(float) * V);
            k++;
        }
        assert_int_equal(k, ns);
    }
    free(alone);
    unload(&A), unload(&B);
}

/* Removing a suffix and decoding it again reproduces the logits; only the last row by default. */
static void test_seq_rm_redecode(void **state) {
    (void)state;
    loaded A;
    load(&llama_spec, 512, 1, &A);
    const int V = qr_model_n_vocab(A.m), N = 12;
    float *first = malloc(sizeof(float) * N * V), *again = malloc(sizeof(float) * N * V);
    decode_all(A.c, toks, N, 0, first, V);
    assert_true(qr_kv_seq_rm(A.c, 0, 7, -1));
    assert_int_equal(qr_kv_seq_len(A.c, 0), 7);
    assert_false(qr_kv_seq_rm(A.c, 0, 2, 4)); /* a hole is refused */
    qr_batch b = {.n_tokens = N - 7, .token = toks + 7}; /* pos NULL: continue; logits NULL: last row */
    char err[256];
    assert_int_equal(qr_decode(A.c, &b, err, sizeof err), QR_OK);
    assert_null(qr_get_logits(A.c, 0));
    assert_memory_equal(qr_get_logits(A.c, N - 8), first + (size_t)(N - 1) * V, sizeof(float) * V);
    assert_ptr_equal(qr_get_logits(A.c, -1), qr_get_logits(A.c, N - 8));
    free(first), free(again);
    unload(&A);
}

/* Gemma3 with every layer sliding (pattern 0 => all layers use the window): a row at position p
 * sees nothing before p - (window-1) * n_layer, so changing token 0 leaves late rows unchanged. */
static void test_gemma3_window(void **state) {
    (void)state;
    tiny_spec s = gemma_spec;
    s.swa_pattern = 0;
    s.n_swa = 2;
    loaded A, B;
    load(&s, 512, 1, &A);
    load(&s, 512, 1, &B);
    const int V = qr_model_n_vocab(A.m), N = 8;
    int32_t t2[8];
    memcpy(t2, toks, sizeof t2);
    t2[0] = 39;
    float *la = malloc(sizeof(float) * N * V), *lb = malloc(sizeof(float) * N * V);
    decode_all(A.c, toks, N, 0, la, V);
    decode_all(B.c, t2, N, 0, lb, V);
    /* window 2, 3 layers: token 0 reaches positions 0..3 at most */
    assert_true(memcmp(la, lb, sizeof(float) * V) != 0);
    for (int p = 4; p < N; p++) assert_memory_equal(la + (size_t)p * V, lb + (size_t)p * V, sizeof(float) * V);
    free(la), free(lb);
    unload(&A), unload(&B);
    /* with a global layer (pattern 2: layer 1 global) token 0 reaches every row */
    s.swa_pattern = 2;
    load(&s, 512, 1, &A);
    load(&s, 512, 1, &B);
    la = malloc(sizeof(float) * N * V), lb = malloc(sizeof(float) * N * V);
    decode_all(A.c, toks, N, 0, la, V);
    decode_all(B.c, t2, N, 0, lb, V);
    assert_true(memcmp(la + (size_t)(N - 1) * V, lb + (size_t)(N - 1) * V, sizeof(float) * V) != 0);
    free(la), free(lb);
    unload(&A), unload(&B);
}

/* Model info getters, tied embeddings, the description. */
static void test_info(void **state) {
    (void)state;
    loaded A;
    load(&gemma_spec, 512, 1, &A);
    assert_string_equal(qr_model_arch(A.m), "gemma3");
    assert_int_equal(qr_model_n_vocab(A.m), 40);
    assert_int_equal(qr_model_n_ctx_train(A.m), 256);
    assert_int_equal(qr_model_n_embd(A.m), 64);
    assert_int_equal(qr_model_n_layer(A.m), 3);
    assert_int_equal(qr_context_n_ctx(A.c), 128);
    assert_ptr_equal(A.m->output.host, A.m->tok_embd.host); /* tied */
    /* gemma3: attention scale 1/sqrt(key_length), embeddings scaled by sqrt(n_embd), layer 1 global */
    assert_float_equal(A.m->hp.attn_scale, 1.0f / sqrtf(32.0f), 1e-7);
    assert_float_equal(A.m->hp.embd_scale, 8.0f, 1e-6);
    assert_true(A.m->layers[0].swa && !A.m->layers[1].swa && A.m->layers[2].swa);
    const qr_rope_params r0 = qr_layer_rope(A.m, NULL, 0), r1 = qr_layer_rope(A.m, NULL, 1);
    assert_float_equal(r0.freq_base, 10000.0f, 0);
    assert_float_equal(r1.freq_base, 1000000.0f, 0);
    assert_int_equal(r0.mode, QR_ROPE_NEOX);
    char desc[256];
    qr_model_desc(A.m, desc, sizeof desc);
    assert_non_null(strstr(desc, "gemma3"));
    assert_non_null(strstr(desc, "tied"));
    unload(&A);
}

/* Bad batches are refused with a message and leave the cache as it was. */
static void test_bad_batches(void **state) {
    (void)state;
    loaded A;
    load(&llama_spec, 512, 2, &A);
    char err[256];
    const int32_t bad_tok = 50, ok_tok[2] = {1, 2}, pos_gap[2] = {0, 2}, seq_bad[1] = {2};
    qr_batch b = {.n_tokens = 1, .token = &bad_tok};
    assert_int_equal(qr_decode(A.c, &b, err, sizeof err), QR_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "vocabulary"));
    b = (qr_batch){.n_tokens = 2, .token = ok_tok, .pos = pos_gap};
    assert_int_equal(qr_decode(A.c, &b, err, sizeof err), QR_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "position"));
    b = (qr_batch){.n_tokens = 1, .token = ok_tok, .seq_id = seq_bad};
    assert_int_equal(qr_decode(A.c, &b, err, sizeof err), QR_ERR_INVALID_ARG);
    b = (qr_batch){.n_tokens = 0, .token = ok_tok};
    assert_int_equal(qr_decode(A.c, &b, err, sizeof err), QR_ERR_INVALID_ARG);
    assert_int_equal(qr_kv_seq_len(A.c, 0), 0);
    /* the cache holds 128 tokens: 129 rows do not fit, and nothing is committed */
    int32_t many[129];
    for (int i = 0; i < 129; i++) many[i] = i % 50;
    b = (qr_batch){.n_tokens = 129, .token = many};
    assert_int_equal(qr_decode(A.c, &b, err, sizeof err), QR_ERR_INVALID_ARG);
    assert_int_equal(qr_kv_seq_len(A.c, 0), 0);
    b = (qr_batch){.n_tokens = 128, .token = many};
    assert_int_equal(qr_decode(A.c, &b, err, sizeof err), QR_OK);
    /* now full: one more row for sequence 1 finds no free block */
    b = (qr_batch){.n_tokens = 1, .token = ok_tok, .seq_id = (const int32_t[]){1}};
    assert_int_equal(qr_decode(A.c, &b, err, sizeof err), QR_ERR_NOMEM);
    assert_non_null(strstr(err, "KV cache full"));
    unload(&A);
}

/* Loading a file with a problem fails with a message naming it. */
static void expect_load_error(const tiny_spec *s, qr_status want, const char *needle) {
    char path[64], err[512] = "";
    write_tiny(s, path, sizeof path);
    qr_model *m = NULL;
    qr_status st = qr_model_load(path, NULL, &m, err, sizeof err);
    unlink(path);
    if (st != want || !strstr(err, needle))
        fail_msg("load: status %s, message '%s' (wanted %s with '%s')", qr_status_str(st), err, qr_status_str(want), needle);
    assert_null(m);
}

/* The context's logits come from the backend's host_alloc when it has one (CUDA: page-locked memory), go
 * back through its host_free, and fall back to malloc when it gives none: a CPU backend with a counting
 * allocator stands in for the GPU. */
static int g_host_allocs, g_host_frees, g_host_fail;
static void *count_host_alloc(qr_backend *be, size_t bytes) {
    (void)be;
    if (g_host_fail) return NULL;
    g_host_allocs++;
    return malloc(bytes);
}
static void count_host_free(qr_backend *be, void *p) {
    (void)be;
    g_host_frees++;
    free(p);
}

static void test_logits_host_alloc(void **state) {
    (void)state;
    for (int fail = 0; fail < 2; fail++) {
        loaded A;
        load(&llama_spec, 512, 1, &A);
        const qr_backend_ops *saved = A.m->be->ops;
        qr_backend_ops ops = *saved;
        ops.host_alloc = count_host_alloc;
        ops.host_free = count_host_free;
        A.m->be->ops = &ops;
        g_host_allocs = g_host_frees = 0;
        g_host_fail = fail;
        const int V = qr_model_n_vocab(A.m);
        float *l1 = malloc(sizeof(float) * V), *l3 = malloc(sizeof(float) * 3 * V);
        decode_all(A.c, toks, 1, 0, l1, V);     /* one row of logits */
        decode_all(A.c, toks + 1, 3, 0, l3, V); /* three: the buffer grows (the first goes back) */
        assert_int_equal(g_host_allocs, fail ? 0 : 2);
        assert_int_equal(g_host_frees, fail ? 0 : 1);
        for (int i = 0; i < 3 * V; i++) assert_true(isfinite(l3[i]));
        qr_context_free(A.c);
        A.c = NULL;
        assert_int_equal(g_host_frees, fail ? 0 : 2); /* every host_alloc buffer went back through host_free */
        A.m->be->ops = saved;
        free(l1), free(l3);
        qr_model_free(A.m);
        unlink(A.path);
    }
}

static void test_bad_files(void **state) {
    (void)state;
    tiny_spec s = llama_spec;
    s.skip_key = "block_count";
    expect_load_error(&s, QR_ERR_FORMAT, "missing metadata key llama.block_count");
    s = llama_spec;
    s.skip_key = "attention.layer_norm_rms_epsilon";
    expect_load_error(&s, QR_ERR_FORMAT, "llama.attention.layer_norm_rms_epsilon");
    s = llama_spec;
    s.arch = "mamba99";
    expect_load_error(&s, QR_ERR_UNSUPPORTED, "architecture 'mamba99' is not supported");
    s = llama_spec;
    s.skip_tensor = "blk.1.ffn_down.weight";
    expect_load_error(&s, QR_ERR_FORMAT, "missing tensor blk.1.ffn_down.weight");
    s = llama_spec;
    s.bad_shape = "blk.0.attn_k.weight";
    expect_load_error(&s, QR_ERR_FORMAT, "blk.0.attn_k.weight has shape [64, 33");
    s = llama_spec;
    s.extra_tensor = "blk.0.attn_q.bias";
    expect_load_error(&s, QR_ERR_UNSUPPORTED, "bias");
    s = gemma_spec;
    s.skip_tensor = "blk.2.attn_q_norm.weight";
    expect_load_error(&s, QR_ERR_FORMAT, "missing tensor blk.2.attn_q_norm.weight");
    s = llama_spec;
    s.n_head_kv = 3; /* 4 heads are not a multiple of 3 */
    expect_load_error(&s, QR_ERR_FORMAT, "head_count_kv");
    char err[256];
    qr_model *m = NULL;
    assert_int_not_equal(qr_model_load("/nonexistent/model.gguf", NULL, &m, err, sizeof err), QR_OK);
    assert_null(m);
}

/* The arch table is well formed: every listed name finds its row, which has a forward pass, keys and
 * tensors; no two tensors of a row bind the same qr_weight in the same layers (a weight bound twice would be
 * prepared twice) or share a name where they overlap; fields lie inside their struct. */
static void test_arch_table(void **state) {
    (void)state;
    char list[256], *save = NULL;
    qr_arch_list(list, sizeof list);
    int n_arch = 0;
    for (char *name = strtok_r(list, ", ", &save); name; name = strtok_r(NULL, ", ", &save), n_arch++) {
        const qr_arch_info *ai = qr_arch_find(name);
        assert_non_null(ai);
        assert_string_equal(ai->name, name);
        assert_non_null(ai->forward);
        assert_non_null(ai->hparams);
        assert_non_null(ai->tensors);
        for (const qr_hparam_spec *const *g = ai->hparams; *g; g++)
            for (const qr_hparam_spec *h = *g; h->key; h++) assert_true(h->field < sizeof(qr_hparams));
        const qr_tensor_spec *all[128];
        int n = 0;
        for (const qr_tensor_spec *const *g = ai->tensors; *g; g++)
            for (const qr_tensor_spec *t = *g; t->name; t++) {
                assert_true(n < 128);
                /* a split tensor binds 3 (q | k | v) or 2 (gate | up) consecutive weights */
#define SPAN(t) (((t)->flags & QR_TS_SPLIT3) ? 3u : ((t)->flags & QR_TS_SPLIT2) ? 2u : 1u) * sizeof(qr_weight)
                assert_true(t->field + SPAN(t) <= (t->in ? sizeof(qr_layer) : sizeof(qr_model)));
                for (int j = 0; j < n; j++) {
                    const bool overlap = (all[j]->in == 0 && t->in == 0) || (all[j]->in & t->in);
                    const bool same = all[j]->field < t->field + SPAN(t) && t->field < all[j]->field + SPAN(all[j]);
                    if (overlap && (same || !strcmp(all[j]->name, t->name)))
                        fail_msg("%s: tensors %s and %s bind the same weight", name, all[j]->name, t->name);
                }
#undef SPAN
                all[n++] = t;
            }
    }
    assert_int_equal(n_arch, QR_ARCH_COUNT);
    assert_null(qr_arch_find("mamba99"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama_batch_vs_single), cmocka_unit_test(test_gemma3_batch_vs_single),
        cmocka_unit_test(test_two_sequences),         cmocka_unit_test(test_seq_rm_redecode),
        cmocka_unit_test(test_gemma3_window),         cmocka_unit_test(test_info),
        cmocka_unit_test(test_bad_batches),           cmocka_unit_test(test_bad_files), cmocka_unit_test(test_arch_table),
        cmocka_unit_test(test_logits_host_alloc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
