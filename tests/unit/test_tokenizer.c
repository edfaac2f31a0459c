/* test_tokenizer.c — tokenizer unit tests on small in-memory vocabularies (SPM, BPE, WPM), the
 * special-token partition, pre-tokenizer splits, detokenization (plain and streaming) and bad
 * GGUF metadata. Real-model equality with llama.cpp lives in tests/ref/test_tokenizer.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "gguf/gguf.h"
#include "tokenizer/tok_internal.h"
#include "tokenizer/tokenizer.h"

/* ---- helpers ------------------------------------------------------------------------------- */

typedef struct vocab_builder {
    qr_tok_str tokens[600];
    float scores[600];
    int32_t types[600];
    uint32_t n;
    char store[600][16]; /* texts built at run time */
} vocab_builder;

static int32_t vb_add(vocab_builder *vb, const char *text, float score, int32_t type) {
    vb->tokens[vb->n] = (qr_tok_str){text, strlen(text)};
    vb->scores[vb->n] = score;
    vb->types[vb->n] = type;
    return (int32_t)vb->n++;
}

/* Tokenizes with a fixed buffer; fails the test on error. Returns the count. */
static size_t tok_ids(const qr_tokenizer *t, const char *text, bool add_special, bool parse_special, int32_t *out) {
    size_t n = 0;
    assert_int_equal(qr_tokenize(t, text, strlen(text), add_special, parse_special, out, 256, &n), QR_OK);
    assert_true(n <= 256);
    return n;
}

static void assert_ids(const int32_t *got, size_t n, const int32_t *want, size_t wn) {
    if (n != wn) {
        fprintf(stderr, "got %zu ids:", n);
        for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", got[i]);
        fprintf(stderr, "\n");
    }
    assert_int_equal(n, wn);
    for (size_t i = 0; i < n; i++) assert_int_equal(got[i], want[i]);
}

static void assert_detok(const qr_tokenizer *t, const int32_t *ids, size_t n, bool remove_special, bool special,
                         const char *want) {
    char buf[512];
    size_t len = 0;
    assert_int_equal(qr_detokenize(t, ids, n, remove_special, special, buf, sizeof buf, &len), QR_OK);
    assert_true(len < sizeof buf);
    buf[len] = 0;
    assert_string_equal(buf, want);
}

/* ---- SPM ----------------------------------------------------------------------------------- */

enum { SPM_UNK, SPM_BOS, SPM_EOS, SPM_SPACE = 3 + 256, SPM_A, SPM_B, SPM_C, SPM_AB, SPM_BC, SPM_ABC, SPM_SA, SPM_SAB,
       SPM_CTRL_XYZ, SPM_CTRL_WX, SPM_USER };

static qr_tokenizer *make_spm(vocab_builder *vb, bool add_space_prefix) {
    vb->n = 0;
    vb_add(vb, "<unk>", 0, 2);
    vb_add(vb, "<s>", 0, 3);
    vb_add(vb, "</s>", 0, 3);
    for (int b = 0; b < 256; b++) {
        snprintf(vb->store[b], sizeof vb->store[b], "<0x%02X>", b);
        vb_add(vb, vb->store[b], 0, 6);
    }
    vb_add(vb, "\xe2\x96\x81", -10, 1); /* ▁ */
    vb_add(vb, "a", -20, 1);
    vb_add(vb, "b", -20, 1);
    vb_add(vb, "c", -20, 1);
    vb_add(vb, "ab", -1, 1);
    vb_add(vb, "bc", -2, 1);
    vb_add(vb, "abc", -0.5f, 1);
    vb_add(vb, "\xe2\x96\x81" "a", -3, 1);
    vb_add(vb, "\xe2\x96\x81" "ab", -4, 1);
    vb_add(vb, "xyz", 0, 3);  /* control */
    vb_add(vb, "wx", 0, 3);   /* control, shorter: partitioned after xyz */
    vb_add(vb, "<u>", 0, 4);  /* user-defined */
    qr_tokenizer_desc d = {0};
    d.model = "llama";
    d.n_tokens = vb->n;
    d.tokens = vb->tokens;
    d.scores = vb->scores;
    d.token_types = vb->types;
    d.has_add_space_prefix = true;
    d.add_space_prefix = add_space_prefix;
    qr_tokenizer *t = NULL;
    char err[256] = "";
    assert_int_equal(qr_tokenizer_create_from_desc(&d, &t, err, sizeof err), QR_OK);
    return t;
}

/* "abc" -> "▁abc": ab (-1) merges first, then abc (-0.5); ▁abc is no token so ▁ stays alone. */
static void test_spm_merge_by_score(void **state) {
    (void)state;
    vocab_builder *vb = calloc(1, sizeof *vb);
    qr_tokenizer *t = make_spm(vb, true);
    int32_t ids[256];
    size_t n = tok_ids(t, "abc", false, false, ids);
    assert_ids(ids, n, (int32_t[]){SPM_SPACE, SPM_ABC}, 2);
    n = tok_ids(t, "abc", true, false, ids); /* llama defaults: add_bos */
    assert_ids(ids, n, (int32_t[]){SPM_BOS, SPM_SPACE, SPM_ABC}, 3);
    /* bc (-2) beats ▁a (-3) only after ab is gone: "ab" wins first anyway */
    n = tok_ids(t, "a bc", false, false, ids);
    assert_ids(ids, n, (int32_t[]){SPM_SA, SPM_SPACE, SPM_BC}, 3);
    assert_detok(t, ids, n, false, true, "a bc"); /* the prefix space is dropped */
    qr_tokenizer_free(t);
    t = make_spm(vb, false);
    n = tok_ids(t, "abc", false, false, ids);
    assert_ids(ids, n, (int32_t[]){SPM_ABC}, 1);
    qr_tokenizer_free(t);
    free(vb);
}

/* Unknown characters fall back to <0xXX> byte tokens, one per UTF-8 byte. */
static void test_spm_byte_fallback(void **state) {
    (void)state;
    vocab_builder *vb = calloc(1, sizeof *vb);
    qr_tokenizer *t = make_spm(vb, false);
    int32_t ids[256];
    size_t n = tok_ids(t, "a\xc3\xa9z", false, false, ids); /* aéz */
    assert_ids(ids, n, (int32_t[]){SPM_A, 3 + 0xC3, 3 + 0xA9, 3 + 'z'}, 4);
    assert_detok(t, ids, n, false, true, "a\xc3\xa9z");
    n = tok_ids(t, "\xff\x80", false, false, ids); /* invalid UTF-8 stays bytes */
    assert_ids(ids, n, (int32_t[]){3 + 0xFF, 3 + 0x80}, 2);
    qr_tokenizer_free(t);
    free(vb);
}

/* Control tokens split only with parse_special; longer special texts are split out first
 * (llama.cpp's order), so "wxyz" gives w + xyz even though "wx" starts earlier. User-defined
 * tokens are always split out. */
static void test_special_partition(void **state) {
    (void)state;
    vocab_builder *vb = calloc(1, sizeof *vb);
    qr_tokenizer *t = make_spm(vb, false);
    int32_t ids[256];
    size_t n = tok_ids(t, "wxyz", false, true, ids);
    assert_ids(ids, n, (int32_t[]){3 + 'w', SPM_CTRL_XYZ}, 2);
    /* without parse_special the text is plain; SPM still merges "w"+"x" into the token "wx" (it
     * looks tokens up by text, whatever their type, as llama.cpp does) */
    n = tok_ids(t, "wxyz", false, false, ids);
    assert_ids(ids, n, (int32_t[]){SPM_CTRL_WX, 3 + 'y', 3 + 'z'}, 3);
    n = tok_ids(t, "a<u>b", false, false, ids);
    assert_ids(ids, n, (int32_t[]){SPM_A, SPM_USER, SPM_B}, 3);
    n = tok_ids(t, "wxwx", false, true, ids);
    assert_ids(ids, n, (int32_t[]){SPM_CTRL_WX, SPM_CTRL_WX}, 2);
    /* control tokens render only with special */
    assert_detok(t, (int32_t[]){SPM_A, SPM_CTRL_XYZ, SPM_B}, 3, false, true, "axyzb");
    assert_detok(t, (int32_t[]){SPM_A, SPM_CTRL_XYZ, SPM_B}, 3, false, false, "ab");
    /* the output buffer contract: a short cap still reports the full count */
    size_t need = 0;
    assert_int_equal(qr_tokenize(t, "wxyzwxyz", 8, false, true, ids, 1, &need), QR_OK);
    assert_int_equal(need, 4);
    assert_int_equal(ids[0], 3 + 'w');
    assert_int_equal(qr_tokenize(t, "wxyz", 4, false, true, NULL, 0, &need), QR_OK);
    assert_int_equal(need, 2);
    qr_tokenizer_free(t);
    free(vb);
}

/* Phi-3 models (by general.name) strip whitespace after special tokens; <|endoftext|> keeps it. */
static void test_phi3_rstrip(void **state) {
    (void)state;
    vocab_builder *vb = calloc(1, sizeof *vb);
    for (int b = 0; b < 256; b++) {
        snprintf(vb->store[b], sizeof vb->store[b], "<0x%02X>", b);
        vb_add(vb, vb->store[b], 0, 6);
    }
    int32_t user = vb_add(vb, "<|user|>", 0, 3);
    int32_t eot = vb_add(vb, "<|endoftext|>", 0, 3);
    int32_t a = vb_add(vb, "a", 0, 1);
    qr_tokenizer_desc d = {0};
    d.model = "llama";
    d.general_name = "Phi-3 Mini";
    d.n_tokens = vb->n;
    d.tokens = vb->tokens;
    d.scores = vb->scores;
    d.token_types = vb->types;
    d.has_add_space_prefix = true;
    d.add_space_prefix = false;
    qr_tokenizer *t = NULL;
    char err[256] = "";
    assert_int_equal(qr_tokenizer_create_from_desc(&d, &t, err, sizeof err), QR_OK);
    assert_true(qr_token_get_attr(t, user) & QR_TOKEN_ATTR_RSTRIP);
    assert_false(qr_token_get_attr(t, eot) & QR_TOKEN_ATTR_RSTRIP);
    int32_t ids[256];
    size_t n = tok_ids(t, "<|user|> \n a", false, true, ids);
    assert_ids(ids, n, (int32_t[]){user, a}, 2);
    n = tok_ids(t, "<|endoftext|> a", false, true, ids); /* the space stays: "▁" falls back to bytes */
    assert_ids(ids, n, (int32_t[]){eot, 0xE2, 0x96, 0x81, a}, 5);
    qr_tokenizer_free(t);
    free(vb);
}

/* ---- BPE ----------------------------------------------------------------------------------- */

typedef struct bpe_vocab {
    vocab_builder vb;
    char bytes[256][4];
    int32_t id_he, id_ll, id_hell, id_hello, id_lo, id_123;
} bpe_vocab;

static qr_tokenizer *make_bpe(bpe_vocab *v, const char *pre, const char *const *merges, size_t n_merges,
                              char *err, size_t err_len, qr_status *st) {
    vocab_builder *vb = &v->vb;
    vb->n = 0;
    for (int b = 0; b < 256; b++) {
        size_t k = qr_tok_utf8_encode(qr_tok_byte_to_cpt((uint8_t)b), v->bytes[b]);
        v->bytes[b][k] = 0;
        vb_add(vb, v->bytes[b], 0, 1);
    }
    v->id_he = vb_add(vb, "he", 0, 1);
    v->id_ll = vb_add(vb, "ll", 0, 1);
    v->id_hell = vb_add(vb, "hell", 0, 1);
    v->id_hello = vb_add(vb, "hello", 0, 1);
    v->id_lo = vb_add(vb, "lo", 0, 1);
    v->id_123 = vb_add(vb, "123", 0, 1);
    vb_add(vb, "12", 0, 1);
    vb_add(vb, "<|im_start|>", 0, 3);
    vb_add(vb, "<|im_end|>", 0, 3);
    qr_tok_str ms[16];
    for (size_t i = 0; i < n_merges; i++) ms[i] = (qr_tok_str){merges[i], strlen(merges[i])};
    qr_tokenizer_desc d = {0};
    d.model = "gpt2";
    d.pre = pre;
    d.n_tokens = vb->n;
    d.tokens = vb->tokens;
    d.token_types = vb->types;
    d.n_merges = (uint32_t)n_merges;
    d.merges = ms;
    qr_tokenizer *t = NULL;
    *st = qr_tokenizer_create_from_desc(&d, &t, err, err_len);
    return t;
}

static const char *const k_merges[] = {"l l", "h e", "he ll", "hell o", "l o", "1 2", "12 3"};

/* Merges go by rank; of two equal-rank pairs the leftmost merges first. */
static void test_bpe_merge_ranks(void **state) {
    (void)state;
    bpe_vocab *v = calloc(1, sizeof *v);
    char err[256] = "";
    qr_status st;
    qr_tokenizer *t = make_bpe(v, "gpt-2", k_merges, 7, err, sizeof err, &st);
    assert_int_equal(st, QR_OK);
    int32_t ids[256];
    size_t n = tok_ids(t, "hello hello", false, false, ids);
    assert_ids(ids, n, (int32_t[]){v->id_hello, ' ' + 0, v->id_hello}, 3); /* Ġ is byte token 32 */
    n = tok_ids(t, "lll", false, false, ids);
    assert_ids(ids, n, (int32_t[]){v->id_ll, 'l'}, 2);
    /* "llo": l l (rank 0) beats l o (rank 4) */
    n = tok_ids(t, "llo", false, false, ids);
    assert_ids(ids, n, (int32_t[]){v->id_ll, 'o'}, 2);
    assert_detok(t, (int32_t[]){v->id_hello, ' ', v->id_hello}, 3, false, true, "hello hello");
    /* control text is parsed only with parse_special */
    n = tok_ids(t, "<|im_start|>hello", false, true, ids);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], v->vb.n - 2);
    assert_int_equal(ids[1], v->id_hello);
    /* EOG detection by text */
    assert_true(qr_token_is_eog(t, (int32_t)v->vb.n - 1));
    assert_false(qr_token_is_eog(t, v->id_hello));
    /* invalid UTF-8 becomes U+FFFD (EF BF BD) before byte-level BPE, as in llama.cpp */
    n = tok_ids(t, "\xff", false, false, ids);
    assert_ids(ids, n, (int32_t[]){0xEF, 0xBF, 0xBD}, 3);
    qr_tokenizer_free(t);
    free(v);
}

/* Word lengths (in code points) of a pre-tokenizer split. */
static void assert_split(const char *pre, const char *text, const size_t *want, size_t wn) {
    qr_tok_pretok p;
    qr_tok_pre_flags f;
    char err[256] = "";
    assert_int_equal(qr_tok_pretok_init(&p, pre, &f, err, sizeof err), QR_OK);
    qr_tok_words w;
    assert_int_equal(qr_tok_pretok_split(&p, text, strlen(text), &w), QR_OK);
    if (w.n_words != wn) {
        fprintf(stderr, "%s: got %zu words:", pre, w.n_words);
        for (size_t i = 0; i < w.n_words; i++) fprintf(stderr, " %zu", w.lens[i]);
        fprintf(stderr, "\n");
    }
    assert_int_equal(w.n_words, wn);
    for (size_t i = 0; i < wn; i++) assert_int_equal(w.lens[i], want[i]);
    qr_tok_words_free(&w);
    qr_tok_pretok_free(&p);
}

/* The regex splits of the main pre-tokenizers, including \s+(?!\S) and digit grouping. */
static void test_pretokenizer_splits(void **state) {
    (void)state;
    const char *text = "Hello world 12345\n\n  x";
    /* llama3: Hello | " world" | " " | 123 | 45 | \n\n | " " | " x" */
    assert_split("llama-bpe", text, (size_t[]){5, 6, 1, 3, 2, 2, 1, 2}, 8);
    /* qwen2: single digits */
    assert_split("qwen2", text, (size_t[]){5, 6, 1, 1, 1, 1, 1, 1, 2, 1, 2}, 11);
    /* gpt-2: " 12345" stays one number; "\n\n " then " x" */
    assert_split("gpt-2", text, (size_t[]){5, 6, 6, 3, 2}, 5);
    /* smollm: every digit alone first, then gpt-2 on the pieces */
    assert_split("smollm", "a12 b", (size_t[]){1, 1, 1, 2}, 4);
    /* contractions: llama3 is case-insensitive, gpt-2 is not */
    assert_split("llama-bpe", "I'M", (size_t[]){1, 2}, 2);
    assert_split("gpt-2", "I'M", (size_t[]){1, 1, 1}, 3);
    /* non-ASCII letters and whitespace: "é" is a letter, U+3000 is whitespace */
    assert_split("gpt-2", "\xc3\xa9t\xc3\xa9\xe3\x80\x80x", (size_t[]){3, 1, 1}, 3);
    /* gpt-4o: a lower-case run ends a word; an upper-case run may take one lower-case run */
    assert_split("gpt-4o", "camelCase HTTPServer", (size_t[]){5, 4, 11}, 3);
    qr_tok_pretok p;
    qr_tok_pre_flags f;
    char err[256] = "";
    assert_int_equal(qr_tok_pretok_init(&p, "no-such-pre", &f, err, sizeof err), QR_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "no-such-pre"));
}

/* ---- WPM ----------------------------------------------------------------------------------- */

static void test_wpm_wordpiece(void **state) {
    (void)state;
    vocab_builder *vb = calloc(1, sizeof *vb);
    vb_add(vb, "[PAD]", 0, 3);
    int32_t unk = vb_add(vb, "[UNK]", 0, 2);
    int32_t cls = vb_add(vb, "[CLS]", 0, 3);
    int32_t sep = vb_add(vb, "[SEP]", 0, 3);
    int32_t hello = vb_add(vb, "\xe2\x96\x81hello", 0, 1);
    int32_t world = vb_add(vb, "\xe2\x96\x81world", 0, 1);
    int32_t un = vb_add(vb, "\xe2\x96\x81un", 0, 1);
    int32_t aff = vb_add(vb, "aff", 0, 1);
    int32_t able = vb_add(vb, "able", 0, 1);
    int32_t bang = vb_add(vb, "\xe2\x96\x81!", 0, 1);
    int32_t cafe = vb_add(vb, "\xe2\x96\x81" "cafe", 0, 1);
    int32_t zhong = vb_add(vb, "\xe2\x96\x81\xe4\xb8\xad", 0, 1);
    int32_t ka = vb_add(vb, "\xe2\x96\x81\xe0\xa4\x95", 0, 1);      /* ▁क */
    int32_t ii = vb_add(vb, "\xe0\xa5\x80", 0, 1);                     /* ##ी */
    int32_t jh = vb_add(vb, "\xe2\x96\x81\xe1\x84\x92", 0, 1);      /* ▁ᄒ */
    int32_t ja = vb_add(vb, "\xe1\x85\xa1", 0, 1);                     /* ##ᅡ */
    int32_t jn = vb_add(vb, "\xe1\x86\xab", 0, 1);                     /* ##ᆫ */
    int32_t idot = vb_add(vb, "\xe2\x96\x81i", 0, 1);                   /* ▁i */
    int32_t a1 = vb_add(vb, "\xe2\x96\x81" "a", 0, 1);
    int32_t a2 = vb_add(vb, "a", 0, 1);
    qr_tokenizer_desc d = {0};
    d.model = "bert";
    d.n_tokens = vb->n;
    d.tokens = vb->tokens;
    d.token_types = vb->types;
    d.has_bos = d.has_sep = d.has_unk = d.has_pad = true;
    d.bos = (uint32_t)cls, d.sep = (uint32_t)sep, d.unk = (uint32_t)unk, d.pad = 0;
    qr_tokenizer *t = NULL;
    char err[256] = "";
    assert_int_equal(qr_tokenizer_create_from_desc(&d, &t, err, sizeof err), QR_OK);
    int32_t ids[256];
    /* lowercase, strip accents (café -> cafe), punctuation alone, CJK alone, [UNK] per word */
    size_t n = tok_ids(t, "Hello, WORLD! unaffable caf\xc3\xa9 \xe4\xb8\xad xyz", true, false, ids);
    assert_ids(ids, n, (int32_t[]){cls, hello, unk, world, bang, un, aff, able, cafe, zhong, unk, sep}, 12);
    /* Hugging Face's BertNormalizer, not llama.cpp's: only nonspacing marks go (the Devanagari
     * vowel sign ी is Mc and stays), Hangul syllables become their jamo (NFD), control and format
     * code points vanish, U+0130 decomposes to I + U+0307 (then stripped and lowercased), and a word
     * over 100 code points is one [UNK] */
    n = tok_ids(t, "\xe0\xa4\x95\xe0\xa5\x80", false, false, ids); /* की */
    assert_ids(ids, n, (int32_t[]){ka, ii}, 2);
    n = tok_ids(t, "\xed\x95\x9c", false, false, ids); /* 한 -> ᄒ ##ᅡ ##ᆫ */
    assert_ids(ids, n, (int32_t[]){jh, ja, jn}, 3);
    n = tok_ids(t, "he\xe2\x80\x8bl\x01lo\xc2\xa0" "cafe\xcc\x81", false, false, ids); /* ZWSP, ^A, NBSP, e + U+0301 */
    assert_ids(ids, n, (int32_t[]){hello, cafe}, 2);
    n = tok_ids(t, "\xc4\xb0", false, false, ids);
    assert_ids(ids, n, (int32_t[]){idot}, 1);
    char longw[160];
    memset(longw, 'a', 101);
    longw[101] = 0;
    n = tok_ids(t, longw, false, false, ids);
    assert_ids(ids, n, (int32_t[]){unk}, 1);
    longw[100] = 0; /* 100 a's: "a" then 99 continuation pieces */
    n = tok_ids(t, longw, false, false, ids);
    assert_int_equal(n, 100);
    assert_int_equal(ids[0], a1);
    assert_int_equal(ids[99], a2);
    /* pieces " hello", " world", " !"; clean_spaces removes the space before "!" */
    assert_detok(t, (int32_t[]){hello, world, bang}, 3, false, true, " hello world!");
    qr_tokenizer_free(t);
    free(vb);
}

/* ---- streaming detokenizer ----------------------------------------------------------------- */

static void test_detok_stream_utf8(void **state) {
    (void)state;
    bpe_vocab *v = calloc(1, sizeof *v);
    char err[256] = "";
    qr_status st;
    qr_tokenizer *t = make_bpe(v, "gpt-2", k_merges, 7, err, sizeof err, &st);
    assert_int_equal(st, QR_OK);
    qr_detok_stream *s = qr_detok_stream_create(t, true);
    assert_non_null(s);
    const char *out;
    size_t len;
    /* é = C3 A9 split over two byte tokens */
    assert_int_equal(qr_detok_stream_push(s, 0xC3, &out, &len), QR_OK);
    assert_int_equal(len, 0);
    assert_int_equal(qr_detok_stream_push(s, 0xA9, &out, &len), QR_OK);
    assert_int_equal(len, 2);
    assert_memory_equal(out, "\xc3\xa9", 2);
    /* 😀 = F0 9F 98 80 over four tokens, then "hello" releases everything */
    int32_t emoji[4] = {0xF0, 0x9F, 0x98, 0x80};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(qr_detok_stream_push(s, emoji[i], &out, &len), QR_OK);
        assert_int_equal(len, 0);
    }
    assert_int_equal(qr_detok_stream_push(s, emoji[3], &out, &len), QR_OK);
    assert_int_equal(len, 4);
    assert_memory_equal(out, "\xf0\x9f\x98\x80", 4);
    /* a byte that can never be valid comes out as U+FFFD, followed by the text */
    assert_int_equal(qr_detok_stream_push(s, 0xFF, &out, &len), QR_OK);
    assert_int_equal(len, 3);
    assert_memory_equal(out, "\xef\xbf\xbd", 3);
    /* an incomplete tail is held, and a non-continuation byte ends it as U+FFFD */
    assert_int_equal(qr_detok_stream_push(s, 0xE2, &out, &len), QR_OK);
    assert_int_equal(len, 0);
    assert_int_equal(qr_detok_stream_push(s, v->id_hello, &out, &len), QR_OK);
    assert_int_equal(len, 8);
    assert_memory_equal(out, "\xef\xbf\xbdhello", 8);
    /* flush turns a pending partial character into U+FFFD */
    assert_int_equal(qr_detok_stream_push(s, 0xC3, &out, &len), QR_OK);
    assert_int_equal(len, 0);
    assert_int_equal(qr_detok_stream_flush(s, &out, &len), QR_OK);
    assert_int_equal(len, 3);
    assert_memory_equal(out, "\xef\xbf\xbd", 3);
    assert_int_equal(qr_detok_stream_push(s, -1, &out, &len), QR_ERR_INVALID_ARG);
    qr_detok_stream_free(s);
    qr_tokenizer_free(t);
    free(v);
}

/* ---- bad metadata -------------------------------------------------------------------------- */

/* Builds a GGUF in memory from a writer, opens it and tries to build a tokenizer. */
static qr_status try_gguf(qr_gguf_writer *w, char *err, size_t err_len) {
    void *buf = NULL;
    size_t size = 0;
    char werr[256];
    assert_int_equal(qr_gguf_writer_write_memory(w, &buf, &size, werr, sizeof werr), QR_OK);
    qr_gguf_writer_free(w);
    qr_gguf *g = NULL;
    assert_int_equal(qr_gguf_open_memory(buf, size, &g, werr, sizeof werr), QR_OK);
    qr_tokenizer *t = NULL;
    err[0] = 0;
    qr_status st = qr_tokenizer_create(g, &t, err, err_len);
    if (st == QR_OK) assert_non_null(t);
    else assert_null(t);
    qr_tokenizer_free(t);
    qr_gguf_close(g);
    free(buf);
    return st;
}

static const char *const k_small_tokens[] = {"a", "b", "ab", "\xc4\xa0"};

static qr_gguf_writer *small_writer(const char *model, bool with_tokens) {
    qr_gguf_writer *w = qr_gguf_writer_create(3, QR_GGUF_DEFAULT_ALIGNMENT);
    assert_non_null(w);
    qr_gguf_writer_set_str(w, "general.architecture", "llama");
    qr_gguf_writer_set_str(w, "tokenizer.ggml.model", model);
    if (with_tokens) qr_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", k_small_tokens, 4);
    return w;
}

static void test_bad_metadata(void **state) {
    (void)state;
    char err[256];
    /* a good one first */
    qr_gguf_writer *w = small_writer("gpt2", true);
    const char *merges[] = {"a b"};
    qr_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, 1);
    qr_gguf_writer_set_str(w, "tokenizer.ggml.pre", "gpt-2");
    assert_int_equal(try_gguf(w, err, sizeof err), QR_OK);
    /* missing tokens */
    w = small_writer("llama", false);
    assert_int_equal(try_gguf(w, err, sizeof err), QR_ERR_NOT_FOUND);
    assert_non_null(strstr(err, "tokenizer.ggml.tokens: missing"));
    /* missing model */
    w = qr_gguf_writer_create(3, QR_GGUF_DEFAULT_ALIGNMENT);
    qr_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", k_small_tokens, 4);
    assert_int_equal(try_gguf(w, err, sizeof err), QR_ERR_NOT_FOUND);
    assert_non_null(strstr(err, "tokenizer.ggml.model: missing"));
    /* tokens of the wrong type */
    w = small_writer("llama", false);
    int32_t nums[3] = {1, 2, 3};
    qr_gguf_writer_set_arr(w, "tokenizer.ggml.tokens", QR_GGUF_I32, nums, 3);
    assert_int_equal(try_gguf(w, err, sizeof err), QR_ERR_FORMAT);
    assert_non_null(strstr(err, "tokenizer.ggml.tokens: expected an array of strings, found array of int32"));
    /* merges referencing a string that is not a token */
    w = small_writer("gpt2", true);
    const char *bad_merges[] = {"a b", "ab zz"};
    qr_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", bad_merges, 2);
    assert_int_equal(try_gguf(w, err, sizeof err), QR_ERR_FORMAT);
    assert_non_null(strstr(err, "tokenizer.ggml.merges: entry 1 ('ab zz'): 'zz' is not a token"));
    /* a merge without a separator */
    w = small_writer("gpt2", true);
    const char *nosep[] = {"ab"};
    qr_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", nosep, 1);
    assert_int_equal(try_gguf(w, err, sizeof err), QR_ERR_FORMAT);
    assert_non_null(strstr(err, "is not 'left right'"));
    /* gpt2 without merges */
    w = small_writer("gpt2", true);
    assert_int_equal(try_gguf(w, err, sizeof err), QR_ERR_NOT_FOUND);
    assert_non_null(strstr(err, "tokenizer.ggml.merges: missing"));
    /* token types of the wrong element type */
    w = small_writer("llama", true);
    float f4[4] = {1, 1, 1, 1};
    qr_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", QR_GGUF_F32, f4, 4);
    assert_int_equal(try_gguf(w, err, sizeof err), QR_ERR_FORMAT);
    assert_non_null(strstr(err, "tokenizer.ggml.token_type: expected an array of int32, found array of float32"));
    /* too few scores */
    w = small_writer("llama", true);
    qr_gguf_writer_set_arr(w, "tokenizer.ggml.scores", QR_GGUF_F32, f4, 2);
    assert_int_equal(try_gguf(w, err, sizeof err), QR_ERR_FORMAT);
    assert_non_null(strstr(err, "tokenizer.ggml.scores: 2 entries for 4 tokens"));
    /* a special id of the wrong type */
    w = small_writer("llama", true);
    qr_gguf_writer_set_str(w, "tokenizer.ggml.bos_token_id", "one");
    assert_int_equal(try_gguf(w, err, sizeof err), QR_ERR_FORMAT);
    assert_non_null(strstr(err, "tokenizer.ggml.bos_token_id: expected an integer token id, found string"));
    /* a flag of the wrong type */
    w = small_writer("llama", true);
    qr_gguf_writer_set_u32(w, "tokenizer.ggml.add_bos_token", 1);
    assert_int_equal(try_gguf(w, err, sizeof err), QR_ERR_FORMAT);
    assert_non_null(strstr(err, "tokenizer.ggml.add_bos_token: expected a bool, found uint32"));
    /* unsupported model and pre-tokenizer */
    w = small_writer("t5", true);
    assert_int_equal(try_gguf(w, err, sizeof err), QR_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "'t5' is not supported"));
    w = small_writer("gpt2", true);
    qr_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, 1);
    qr_gguf_writer_set_str(w, "tokenizer.ggml.pre", "martian");
    assert_int_equal(try_gguf(w, err, sizeof err), QR_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "unknown pre-tokenizer type 'martian'"));
    /* duplicate tokens */
    w = small_writer("llama", false);
    const char *dups[] = {"x", "y", "x"};
    qr_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", dups, 3);
    assert_int_equal(try_gguf(w, err, sizeof err), QR_ERR_FORMAT);
    assert_non_null(strstr(err, "token 2 ('x') duplicates token 0"));
}

/* ---- UTF-8 decoding, llama.cpp style ------------------------------------------------------- */

static void test_utf8_decode_lenient(void **state) {
    (void)state;
    size_t off = 0;
    assert_int_equal(qr_tok_utf8_decode("\xc3\xa9", 2, &off), 0xE9);
    assert_int_equal(off, 2);
    off = 0; /* overlong: accepted as is */
    assert_int_equal(qr_tok_utf8_decode("\xc0\x80", 2, &off), 0);
    assert_int_equal(off, 2);
    off = 0; /* surrogate: accepted as is */
    assert_int_equal(qr_tok_utf8_decode("\xed\xa0\x80", 3, &off), 0xD800);
    off = 0; /* truncated: U+FFFD, one byte */
    assert_int_equal(qr_tok_utf8_decode("\xe2\x82", 2, &off), 0xFFFD);
    assert_int_equal(off, 1);
    off = 0; /* continuation byte as a lead */
    assert_int_equal(qr_tok_utf8_decode("\x80", 1, &off), 0xFFFD);
    assert_int_equal(off, 1);
    for (int b = 0; b < 256; b++) assert_int_equal(qr_tok_cpt_to_byte(qr_tok_byte_to_cpt((uint8_t)b)), b);
    assert_int_equal(qr_tok_byte_to_cpt(' '), 0x120);
    assert_int_equal(qr_tok_cpt_flags(0x3000) & QR_CPT_WHITESPACE, QR_CPT_WHITESPACE);
    assert_int_equal(qr_tok_cpt_flags(0x200B) & QR_CPT_WHITESPACE, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spm_merge_by_score),  cmocka_unit_test(test_spm_byte_fallback),
        cmocka_unit_test(test_special_partition),   cmocka_unit_test(test_phi3_rstrip),
        cmocka_unit_test(test_bpe_merge_ranks),
        cmocka_unit_test(test_pretokenizer_splits), cmocka_unit_test(test_wpm_wordpiece),
        cmocka_unit_test(test_detok_stream_utf8),   cmocka_unit_test(test_bad_metadata),
        cmocka_unit_test(test_utf8_decode_lenient),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
