/* tok_wpm.c — WordPiece (tokenizer.ggml.model "bert") as the Hugging Face BERT tokenizer runs it
 * (`tokenizers`' BertNormalizer + BertPreTokenizer + WordPiece, which sentence-transformers uses),
 * not as llama.cpp does (llama.cpp keeps only the first code point of each NFD decomposition and
 * drops every mark, so Devanagari vowel signs and Hangul jamo vanish):
 *   1. clean: drop U+0000, U+FFFD and "other" code points (Cc Cf Co Cs, except \t \n \r); map
 *      White_Space code points to ' ';
 *   2. put spaces around CJK ideographs (BERT's block list);
 *   3. strip accents (when the model lowercases, or says strip_accents): NFD, then drop nonspacing
 *      marks (Mn) only: spacing marks (Mc, e.g. Devanagari ा) and jamo stay;
 *   4. lowercase (full mapping per code point: U+0130 gives "i" + U+0307);
 *   5. split on spaces and isolate punctuation (ASCII punctuation or a P* category);
 *   6. per word: [UNK] when longer than 100 code points, else greedy longest match, first piece
 *      "▁" + prefix, then continuation pieces (the GGUF's phantom-space form of "##" pieces); a word
 *      with an unmatched position is one [UNK].
 * Normalization uses utf8proc (categories, NFD with canonical ordering, case mapping). */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer/tok_internal.h"

#define WPM_MAX_WORD_CPTS 100 /* HF WordPiece max_input_chars_per_word */

/* BERT's "Chinese character" blocks, as `tokenizers` lists them (including its 0x2B920 start). */
static bool is_chinese_char(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* BertNormalizer's is_control: Cc, Cf, Co or Cs, other than \t, \n, \r (unassigned code points,
 * Cn, stay: `tokenizers` keeps them, and they make their word [UNK]). */
static bool is_other(uint32_t c) {
    if (c == '\t' || c == '\n' || c == '\r') return false;
    switch (utf8proc_category((utf8proc_int32_t)c)) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CO: case UTF8PROC_CATEGORY_CS:
        return true;
    default:
        return false;
    }
}

/* BertPreTokenizer's punctuation: ASCII punctuation (symbols included) or a P* category. */
static bool is_bert_punct(uint32_t c) {
    if (c < 0x80) return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
                         (c >= 0x7B && c <= 0x7E);
    switch (utf8proc_category((utf8proc_int32_t)c)) {
    case UTF8PROC_CATEGORY_PC: case UTF8PROC_CATEGORY_PD: case UTF8PROC_CATEGORY_PS: case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI: case UTF8PROC_CATEGORY_PF: case UTF8PROC_CATEGORY_PO:
        return true;
    default:
        return false;
    }
}

/* A growable code point array. */
typedef struct cpt_buf {
    uint32_t *v;
    size_t n, cap;
} cpt_buf;

static bool cpt_push(cpt_buf *b, uint32_t c) {
    if (b->n == b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 64;
        uint32_t *nv = realloc(b->v, nc * sizeof *nv);
        if (!nv) return false;
        b->v = nv;
        b->cap = nc;
    }
    b->v[b->n++] = c;
    return true;
}

/* Steps 1-2: decodes text into out, cleaned, with spaces around CJK ideographs. */
static bool clean_text(const char *text, size_t len, cpt_buf *out) {
    for (size_t off = 0; off < len;) {
        uint32_t c = qr_tok_utf8_decode(text, len, &off);
        if (c == 0 || c == 0xFFFD || c > 0x10FFFF || is_other(c)) continue;
        if (qr_tok_cpt_flags(c) & QR_CPT_WHITESPACE) c = ' ';
        if (is_chinese_char(c)) {
            if (!cpt_push(out, ' ') || !cpt_push(out, c) || !cpt_push(out, ' ')) return false;
        } else if (!cpt_push(out, c)) {
            return false;
        }
    }
    return true;
}

/* Step 3: NFD (canonical decomposition and ordering, utf8proc) of in, without its Mn marks, into out. */
static bool strip_accents(const cpt_buf *in, cpt_buf *out) {
    qr_tok_bytes u8 = {0};
    utf8proc_int32_t *dec = NULL;
    bool ok = false, ascii = true;
    for (size_t i = 0; i < in->n && ascii; i++) ascii = in->v[i] < 0xC0; /* nothing below U+00C0 decomposes */
    if (ascii) {
        for (size_t i = 0; i < in->n; i++)
            if (!cpt_push(out, in->v[i])) return false;
        return true;
    }
    for (size_t i = 0; i < in->n; i++) {
        char u[4];
        if (!qr_tok_bytes_append(&u8, u, qr_tok_utf8_encode(in->v[i], u))) goto done;
    }
    if (!u8.n) {
        ok = true;
        goto done;
    }
    const utf8proc_ssize_t n = utf8proc_decompose((const utf8proc_uint8_t *)u8.v, (utf8proc_ssize_t)u8.n, NULL, 0,
                                                  UTF8PROC_DECOMPOSE);
    if (n < 0 || !(dec = malloc((size_t)(n ? n : 1) * sizeof *dec))) goto done;
    if (utf8proc_decompose((const utf8proc_uint8_t *)u8.v, (utf8proc_ssize_t)u8.n, dec, n, UTF8PROC_DECOMPOSE) != n)
        goto done;
    for (utf8proc_ssize_t i = 0; i < n; i++)
        if (utf8proc_category(dec[i]) != UTF8PROC_CATEGORY_MN && !cpt_push(out, (uint32_t)dec[i])) goto done;
    ok = true;
done:
    free(u8.v);
    free(dec);
    return ok;
}

/* Greedy longest match of one word (UTF-8 in buf after its "▁" prefix): pushes the pieces, or
 * [UNK] when some position has no match. */
static qr_status wpm_word(const qr_tokenizer *tok, qr_tok_bytes *buf, qr_tok_ids *out) {
    static const size_t prefix = 3; /* "▁" */
    const char *w = buf->v;
    const size_t n = buf->n;
    const size_t mark = out->n;
    for (size_t i = 0; i < n;) {
        size_t j = i + tok->max_token_len;
        if (j > n) j = n;
        /* the first piece must hold more than the prefix */
        const size_t jmin = i == 0 ? prefix + 1 : i + 1;
        int32_t id = -1;
        for (; j >= jmin; j--)
            if ((id = qr_tok_strmap_find(&tok->map, w + i, j - i)) >= 0) break;
        if (id < 0) {
            out->n = mark;
            if (tok->info.special.unk < 0) return QR_ERR_NOT_FOUND;
            return qr_tok_ids_push(out, tok->info.special.unk) ? QR_OK : QR_ERR_NOMEM;
        }
        if (!qr_tok_ids_push(out, id)) return QR_ERR_NOMEM;
        i = j;
    }
    return QR_OK;
}

/* Steps 5-6 over the normalized code points. */
static qr_status split_and_match(const qr_tokenizer *tok, const cpt_buf *t, qr_tok_ids *out) {
    qr_tok_bytes buf = {0};
    qr_status st = QR_OK;
    size_t word_cpts = 0;
    for (size_t i = 0; i <= t->n && st == QR_OK; i++) {
        const uint32_t c = i < t->n ? t->v[i] : ' ';
        const bool space = c == ' ', punct = !space && is_bert_punct(c);
        if ((space || punct) && word_cpts) { /* end of a word */
            if (word_cpts > WPM_MAX_WORD_CPTS) {
                if (tok->info.special.unk < 0) st = QR_ERR_NOT_FOUND;
                else if (!qr_tok_ids_push(out, tok->info.special.unk)) st = QR_ERR_NOMEM;
            } else {
                st = wpm_word(tok, &buf, out);
            }
            word_cpts = 0;
        }
        if (space || st != QR_OK) continue;
        char u[4];
        const size_t k = qr_tok_utf8_encode(c, u);
        if (word_cpts == 0) buf.n = 0;
        if ((word_cpts == 0 && !qr_tok_bytes_append(&buf, "\xe2\x96\x81", 3)) || !qr_tok_bytes_append(&buf, u, k)) {
            st = QR_ERR_NOMEM;
            break;
        }
        word_cpts++;
        if (punct) { /* a punctuation code point is a word of its own */
            st = wpm_word(tok, &buf, out);
            word_cpts = 0;
        }
    }
    free(buf.v);
    return st;
}

qr_status qr_tok_wpm_fragment(const qr_tokenizer *tok, const char *text, size_t len, qr_tok_ids *out) {
    cpt_buf a = {0}, b = {0};
    qr_status st = QR_ERR_NOMEM;
    if (!clean_text(text, len, &a)) goto done;
    cpt_buf *t = &a;
    if (tok->strip_accents) {
        if (!strip_accents(&a, &b)) goto done;
        t = &b;
    }
    if (tok->lowercase) {
        cpt_buf *o = t == &a ? &b : &a;
        o->n = 0;
        for (size_t i = 0; i < t->n; i++) {
            const uint32_t c = t->v[i];
            if (c == 0x130) { /* the one unconditional multi-code-point lowercase mapping */
                if (!cpt_push(o, 'i') || !cpt_push(o, 0x307)) goto done;
            } else if (!cpt_push(o, qr_tok_tolower(c))) {
                goto done;
            }
        }
        t = o;
    }
    st = split_and_match(tok, t, out);
done:
    free(a.v);
    free(b.v);
    return st;
}
