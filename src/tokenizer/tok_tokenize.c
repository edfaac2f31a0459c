/* tok_tokenize.c — qr_tokenize: split out special-token text (llama.cpp's tokenizer_st_partition),
 * then run the model's algorithm on each remaining text fragment and add BOS/EOS/SEP. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

/* A piece of the input: raw text [off, off+len) or one special token. */
typedef struct fragment {
    size_t off, len;
    int32_t token; /* -1 for raw text */
} fragment;

typedef struct frag_list {
    fragment *v;
    size_t n, cap;
} frag_list;

static bool frag_push(frag_list *l, size_t off, size_t len, int32_t token) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        fragment *v = realloc(l->v, cap * sizeof *v);
        if (!v) return false;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = (fragment){off, len, token};
    return true;
}

/* C-locale isspace, as llama.cpp's lstrip/rstrip use. */
static bool c_isspace(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/* Splits every raw fragment of `in` at each occurrence of token id's text, searching left to right
 * from the end of the previous occurrence, into `out`. */
static bool split_on_token(const qr_tokenizer *tok, const char *text, int32_t id, const frag_list *in, frag_list *out) {
    const char *pat = tok->text[id];
    size_t plen = tok->text_len[id];
    uint32_t attr = tok->attr[id];
    out->n = 0;
    for (size_t f = 0; f < in->n; f++) {
        fragment fr = in->v[f];
        if (fr.token >= 0) {
            if (!frag_push(out, fr.off, fr.len, fr.token)) return false;
            continue;
        }
        size_t base = fr.off, blen = fr.len;
        for (;;) {
            const char *hit = blen >= plen ? memmem(text + base, blen, pat, plen) : NULL;
            if (!hit) {
                if (blen && !frag_push(out, base, blen, -1)) return false;
                break;
            }
            size_t match = (size_t)(hit - text);
            if (match > base) {
                size_t left_len = match - base;
                if (attr & QR_TOKEN_ATTR_LSTRIP)
                    while (left_len > 0 && c_isspace(text[base + left_len - 1])) left_len--;
                if (left_len && !frag_push(out, base, left_len, -1)) return false;
            }
            if (!frag_push(out, 0, 0, id)) return false;
            size_t end = base + blen;
            size_t right = match + plen;
            if (right >= end) break;
            if (attr & QR_TOKEN_ATTR_RSTRIP)
                while (right < end && c_isspace(text[right])) right++;
            base = right;
            blen = end - right;
        }
    }
    return true;
}

/* Marks in `present` (indexed like special_cache) each special token whose text occurs in
 * text[0..len) and that this call may match (control/unknown tokens only when parse_special). */
static void find_present(const qr_tokenizer *tok, const char *text, size_t len, bool parse_special, uint8_t *present) {
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i < len; i++) {
        int32_t node = tok->trie_root[s[i]];
        for (size_t j = i; node;) {
            int32_t k = tok->trie[node].special;
            if (k >= 0) {
                uint32_t a = tok->attr[tok->special_cache[k]];
                if (parse_special || !(a & (QR_TOKEN_ATTR_CONTROL | QR_TOKEN_ATTR_UNKNOWN))) present[k] = 1;
            }
            if (++j >= len) break;
            int32_t c = tok->trie[node].child;
            while (c && tok->trie[c].byte != s[j]) c = tok->trie[c].sibling;
            node = c;
        }
    }
}

/* Appends " "-to-"▁" escaped text (with an optional leading space) to b. */
static bool escape_spaces(qr_tok_bytes *b, bool lead_space, const char *s, size_t n) {
    b->n = 0;
    if (lead_space && !qr_tok_bytes_append(b, "\xe2\x96\x81", 3)) return false;
    size_t start = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != ' ') continue;
        if (!qr_tok_bytes_append(b, s + start, i - start) || !qr_tok_bytes_append(b, "\xe2\x96\x81", 3)) return false;
        start = i + 1;
    }
    return qr_tok_bytes_append(b, s + start, n - start);
}

qr_status qr_tokenize(const qr_tokenizer *tok, const char *text, size_t len, bool add_special, bool parse_special,
                      int32_t *out, size_t cap, size_t *n_out) {
    if (!tok || (!text && len) || !n_out || (!out && cap)) return QR_ERR_INVALID_ARG;
    *n_out = 0;
    qr_status st = QR_ERR_NOMEM;
    frag_list a = {0}, b = {0};
    qr_tok_ids ids = {0};
    qr_tok_bytes esc = {0};
    uint8_t *present = NULL;
    const qr_tokenizer_info *info = &tok->info;

    if (len) {
        if (!frag_push(&a, 0, len, -1)) goto done;
        if (tok->n_special) {
            present = calloc(tok->n_special, 1);
            if (!present) goto done;
            find_present(tok, text, len, parse_special, present);
            for (uint32_t k = 0; k < tok->n_special; k++) {
                if (!present[k]) continue;
                if (!split_on_token(tok, text, tok->special_cache[k], &a, &b)) goto done;
                frag_list t = a;
                a = b;
                b = t;
            }
        }
    }

    switch (info->type) {
    case QR_VOCAB_SPM: {
        bool prev_special = true; /* a space prefix goes before the first text */
        if (add_special && info->add_bos) {
            if (info->special.bos < 0) { st = QR_ERR_NOT_FOUND; goto done; }
            if (!qr_tok_ids_push(&ids, info->special.bos)) goto done;
        }
        for (size_t f = 0; f < a.n; f++) {
            if (a.v[f].token >= 0) {
                if (!qr_tok_ids_push(&ids, a.v[f].token)) goto done;
                prev_special = true;
                continue;
            }
            if (!escape_spaces(&esc, info->add_space_prefix && prev_special, text + a.v[f].off, a.v[f].len)) goto done;
            st = qr_tok_spm_fragment(tok, esc.v, esc.n, &ids);
            if (st != QR_OK) goto done;
            st = QR_ERR_NOMEM;
            prev_special = false;
        }
        if (add_special && info->add_eos) {
            if (info->special.eos < 0) { st = QR_ERR_NOT_FOUND; goto done; }
            if (!qr_tok_ids_push(&ids, info->special.eos)) goto done;
        }
        break;
    }
    case QR_VOCAB_BPE:
    case QR_VOCAB_WPM: {
        bool wpm = info->type == QR_VOCAB_WPM;
        if (add_special && (wpm || info->add_bos)) {
            if (info->special.bos < 0) { st = QR_ERR_NOT_FOUND; goto done; }
            if (!qr_tok_ids_push(&ids, info->special.bos)) goto done;
        }
        for (size_t f = 0; f < a.n; f++) {
            if (a.v[f].token >= 0) {
                if (!qr_tok_ids_push(&ids, a.v[f].token)) goto done;
                continue;
            }
            st = wpm ? qr_tok_wpm_fragment(tok, text + a.v[f].off, a.v[f].len, &ids)
                     : qr_tok_bpe_fragment(tok, text + a.v[f].off, a.v[f].len, &ids);
            if (st != QR_OK) goto done;
            st = QR_ERR_NOMEM;
        }
        if (add_special && (wpm || info->add_eos)) {
            int32_t last = wpm ? info->special.sep : info->special.eos;
            if (last < 0) { st = QR_ERR_NOT_FOUND; goto done; }
            if (!qr_tok_ids_push(&ids, last)) goto done;
        }
        break;
    }
    default:
        st = QR_ERR_INTERNAL;
        goto done;
    }
    *n_out = ids.n;
    if (out && cap && ids.n) memcpy(out, ids.v, (ids.n < cap ? ids.n : cap) * sizeof *out);
    st = QR_OK;
done:
    free(a.v);
    free(b.v);
    free(ids.v);
    free(esc.v);
    free(present);
    return st;
}
