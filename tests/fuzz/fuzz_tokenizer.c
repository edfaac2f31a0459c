/* fuzz_tokenizer.c — libFuzzer target for tokenize / detokenize / streaming detokenize.
 *
 * LLVMFuzzerInitialize loads SmolLM2's byte-level BPE tokenizer from $QR_FUZZ_MODEL (default
 * ~/.cache/quarrel/models/SmolLM2-135M-Instruct.Q4_1.gguf), Gemma 3's SPM tokenizer from
 * $QR_FUZZ_MODEL2 (default: the gemma-3-270m file next to it; skipped when absent) and a small
 * WordPiece vocabulary built in memory. The input bytes are the text; a hash of them picks the
 * tokenizer and the add_special / parse_special flags.
 *
 * Checked (a violation traps): tokenize succeeds and every id is in range; the size query
 * (cap = 0) agrees; for valid UTF-8 input (SPM: without "▁"; BPE: bytes that all have a byte token)
 * detokenize gives the input back; the streaming detokenizer's output is valid UTF-8 and equals the detokenized text
 * whenever that text is valid UTF-8.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "tokenizer/tok_internal.h"
#include "tokenizer/tokenizer.h"

static qr_tokenizer *g_bpe, *g_spm, *g_wpm; /* loaded once in LLVMFuzzerInitialize */

static qr_tokenizer *load(const char *path, bool required) {
    char err[512];
    qr_gguf *g = NULL;
    if (qr_gguf_open(path, &g, err, sizeof err) != QR_OK) {
        if (required) {
            fprintf(stderr, "fuzz_tokenizer: %s (set QR_FUZZ_MODEL)\n", err);
            exit(1);
        }
        return NULL;
    }
    qr_tokenizer *t = NULL;
    if (qr_tokenizer_create(g, &t, err, sizeof err) != QR_OK) {
        fprintf(stderr, "fuzz_tokenizer: %s: %s\n", path, err);
        exit(1);
    }
    qr_gguf_close(g);
    return t;
}

static qr_tokenizer *make_wpm(void) {
    static const char *words[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "\xe2\x96\x81the", "\xe2\x96\x81" "a",
                                  "\xe2\x96\x81un", "aff", "able", "s", "ing", "\xe2\x96\x81!", "\xe2\x96\x81,",
                                  "\xe2\x96\x81\xe4\xb8\xad", "\xe2\x96\x81" "cafe", "e", "t", "\xe2\x96\x81x"};
    static qr_tok_str toks[sizeof words / sizeof words[0]];
    static int32_t types[sizeof words / sizeof words[0]];
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        toks[i] = (qr_tok_str){words[i], strlen(words[i])};
        types[i] = i < 5 ? 3 : 1;
    }
    types[1] = 2;
    qr_tokenizer_desc d = {0};
    d.model = "bert";
    d.n_tokens = sizeof words / sizeof words[0];
    d.tokens = toks;
    d.token_types = types;
    d.has_bos = d.has_sep = d.has_unk = d.has_pad = d.has_mask = true;
    d.bos = 2, d.sep = 3, d.unk = 1, d.pad = 0, d.mask = 4;
    qr_tokenizer *t = NULL;
    char err[256];
    if (qr_tokenizer_create_from_desc(&d, &t, err, sizeof err) != QR_OK) {
        fprintf(stderr, "fuzz_tokenizer: wpm: %s\n", err);
        exit(1);
    }
    return t;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *home = getenv("HOME") ? getenv("HOME") : "/root";
    char def1[1024], def2[1024];
    snprintf(def1, sizeof def1, "%s/.cache/quarrel/models/SmolLM2-135M-Instruct.Q4_1.gguf", home);
    snprintf(def2, sizeof def2, "%s/.cache/quarrel/models/gemma-3-270m-q4_k_m.gguf", home);
    g_bpe = load(getenv("QR_FUZZ_MODEL") ? getenv("QR_FUZZ_MODEL") : def1, true);
    g_spm = load(getenv("QR_FUZZ_MODEL2") ? getenv("QR_FUZZ_MODEL2") : def2, false);
    g_wpm = make_wpm();
    return 0;
}

/* Strict UTF-8 validity (no overlongs, surrogates or code points above U+10FFFF). */
static bool valid_utf8(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t k;
        uint8_t lo = 0x80, hi = 0xBF;
        if (c < 0x80) { i++; continue; }
        if (c < 0xC2) return false;
        if (c < 0xE0) k = 2;
        else if (c < 0xF0) { k = 3; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
        else if (c < 0xF5) { k = 4; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
        else return false;
        if (i + k > n || s[i + 1] < lo || s[i + 1] > hi) return false;
        for (size_t j = 2; j < k; j++)
            if ((s[i + j] & 0xC0) != 0x80) return false;
        i += k;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 1 << 16) return 0;
    uint32_t h = qr_tok_hash((const char *)data, size);
    qr_tokenizer *t = (h % 5 == 0 && g_spm) ? g_spm : (h % 5 == 1) ? g_wpm : g_bpe;
    bool add_special = (h >> 8) & 1, parse_special = (h >> 9) & 1;
    uint32_t n_vocab = qr_tokenizer_get_info(t)->n_vocab;

    size_t cap = size + 8, n = 0, n_query = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) return 0;
    qr_status st = qr_tokenize(t, (const char *)data, size, add_special, parse_special, ids, cap, &n);
    if (st != QR_OK) __builtin_trap();
    if (n > cap) { /* invalid UTF-8 can grow: each bad byte is U+FFFD (3 bytes) for BPE */
        int32_t *more = realloc(ids, n * sizeof *ids);
        if (!more) {
            free(ids);
            return 0;
        }
        ids = more;
        size_t n2 = 0;
        if (qr_tokenize(t, (const char *)data, size, add_special, parse_special, ids, n, &n2) != QR_OK || n2 != n)
            __builtin_trap();
    }
    if (qr_tokenize(t, (const char *)data, size, add_special, parse_special, NULL, 0, &n_query) != QR_OK ||
        n_query != n)
        __builtin_trap();
    size_t pieces = 0; /* total bytes of all pieces */
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || (uint32_t)ids[i] >= n_vocab) __builtin_trap();
        char piece[8];
        int32_t plen = qr_token_to_piece(t, ids[i], true, piece, sizeof piece);
        if (plen < 0) __builtin_trap();
        pieces += (size_t)plen;
    }

    size_t len = 0;
    if (qr_detokenize(t, ids, n, true, true, NULL, 0, &len) != QR_OK) __builtin_trap();
    char *text = malloc(len + 1);
    if (!text) {
        free(ids);
        return 0;
    }
    size_t len2 = 0;
    if (qr_detokenize(t, ids, n, true, true, text, len + 1, &len2) != QR_OK || len2 != len) __builtin_trap();

    const qr_tokenizer_info *info = qr_tokenizer_get_info(t);
    /* BPE: lossless for valid UTF-8 whose bytes all have a byte token (SmolLM2 lacks a few controls) */
    bool all_bytes = true;
    for (size_t i = 0; i < size && all_bytes; i++) all_bytes = t->byte_token[data[i]] >= 0;
    if (t == g_bpe && all_bytes && valid_utf8(data, size) && (len != size || memcmp(text, data, size) != 0))
        __builtin_trap();
    /* SPM: spaces become "▁" before byte fallback, so only valid UTF-8 without "▁" comes back */
    if (t == g_spm && !info->add_space_prefix && valid_utf8(data, size) && !memmem(data, size, "\xe2\x96\x81", 3) &&
        (len != size || memcmp(text, data, size) != 0))
        __builtin_trap();

    /* streaming: the same bytes as qr_detokenize (without its BOS removal) whenever that is valid */
    qr_detok_stream *s = qr_detok_stream_create(t, true);
    if (s) {
        char *streamed = malloc(3 * pieces + 16); /* each byte at worst becomes U+FFFD */
        size_t total = 0;
        const char *out;
        size_t olen;
        for (size_t i = 0; streamed && i < n; i++) {
            if (qr_detok_stream_push(s, ids[i], &out, &olen) != QR_OK) __builtin_trap();
            memcpy(streamed + total, out, olen);
            total += olen;
        }
        if (streamed && qr_detok_stream_flush(s, &out, &olen) == QR_OK) {
            memcpy(streamed + total, out, olen);
            total += olen;
            if (!valid_utf8((const uint8_t *)streamed, total)) __builtin_trap();
            size_t flen = 0;
            char *full = malloc(pieces + 1);
            if (full && !info->clean_spaces && !info->add_space_prefix &&
                qr_detokenize(t, ids, n, false, true, full, pieces + 1, &flen) == QR_OK && flen <= pieces + 1 &&
                valid_utf8((const uint8_t *)full, flen) && (flen != total || memcmp(full, streamed, total) != 0))
                __builtin_trap();
            free(full);
        }
        free(streamed);
        qr_detok_stream_free(s);
    }
    free(text);
    free(ids);
    return 0;
}
