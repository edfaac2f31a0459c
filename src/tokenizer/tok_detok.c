/* tok_detok.c — token ids -> text: qr_detokenize (llama.cpp's llama_detokenize, including its
 * clean-up passes) and the streaming detokenizer that only releases whole UTF-8 characters. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

/* The piece of id as llama.cpp's token_to_piece(lstrip, special) gives it. */
static const char *piece_of(const qr_tokenizer *tok, int32_t id, bool lstrip, bool special, size_t *n) {
    if (!special && (tok->attr[id] & (QR_TOKEN_ATTR_UNKNOWN | QR_TOKEN_ATTR_CONTROL))) {
        *n = 0;
        return "";
    }
    const char *p = qr_token_piece(tok, id, n);
    if (lstrip && *n && p[0] == ' ') {
        p++;
        (*n)--;
    }
    return p;
}

/* llama.cpp's clean_up_tokenization passes over text[0..total); returns the new length. */
static size_t clean_spaces(char *text, size_t total) {
    /* first pass: " ?", " !", " .", " ," lose the space */
    size_t total1 = total;
    total = total ? 1 : 0;
    for (size_t i = 1; i < total1; ++i) {
        const char x = text[i];
        if (text[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) total--;
        text[total++] = x;
    }
    /* second pass: a lone apostrophe between spaces loses both spaces */
    size_t total2 = total;
    total = total ? 1 : 0;
    for (size_t i = 1; i < total2; ++i) {
        const char x = text[i];
        if (x == '\'' && i + 1 < total2 && text[i - 1] == ' ' && text[i + 1] == ' ') {
            total--;
            text[++i] = '\0';
        }
        text[total++] = x;
    }
    /* third pass: " 's", " 'm", " 're", " 've" lose the space */
    size_t total3 = total;
    total = total ? 1 : 0;
    for (size_t i = 1; i < total3; ++i) {
        const char x = text[i];
        if (text[i - 1] == ' ' && x == '\'' && i + 1 < total3) {
            const char x1 = text[i + 1];
            if (x1 == 's' || x1 == 'm') {
                total--;
            } else if (x1 != 't' && x1 != 'd' && i + 2 < total3) {
                const char x2 = text[i + 2];
                if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) total--;
            }
        }
        text[total++] = x;
    }
    return total;
}

qr_status qr_detokenize(const qr_tokenizer *tok, const int32_t *ids, size_t n_ids, bool remove_special,
                        bool unparse_special, char *buf, size_t cap, size_t *n_out) {
    if (!tok || (!ids && n_ids) || !n_out || (!buf && cap)) return QR_ERR_INVALID_ARG;
    *n_out = 0;
    for (size_t i = 0; i < n_ids; i++)
        if (ids[i] < 0 || (uint32_t)ids[i] >= tok->n_vocab) return QR_ERR_INVALID_ARG;
    const qr_tokenizer_info *info = &tok->info;
    bool remove_space = info->add_space_prefix;
    if (remove_special && info->add_bos && n_ids > 0 && ids[0] == info->special.bos) {
        remove_space = false;
        ids++;
        n_ids--;
    }
    if (remove_special && info->add_eos && n_ids > 0 && ids[n_ids - 1] == info->special.eos) n_ids--;
    qr_tok_bytes text = {0};
    for (size_t i = 0; i < n_ids; i++) {
        size_t n;
        const char *p = piece_of(tok, ids[i], remove_space, unparse_special, &n);
        remove_space = false;
        if (!qr_tok_bytes_append(&text, p, n)) {
            free(text.v);
            return QR_ERR_NOMEM;
        }
    }
    size_t total = text.n;
    if (info->clean_spaces && total) total = clean_spaces(text.v, total);
    *n_out = total;
    if (cap && total) memcpy(buf, text.v, total < cap ? total : cap);
    free(text.v);
    return QR_OK;
}

/* ---- streaming ----------------------------------------------------------------------------- */

struct qr_detok_stream {
    const qr_tokenizer *tok;
    bool special;       /* render control tokens */
    bool first;         /* no token pushed yet (the space prefix is stripped from the first) */
    qr_tok_bytes pending; /* bytes of an incomplete character */
    qr_tok_bytes out;     /* what the last call returned */
};

qr_detok_stream *qr_detok_stream_create(const qr_tokenizer *tok, bool special) {
    qr_detok_stream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->tok = tok;
    s->special = special;
    s->first = true;
    return s;
}

void qr_detok_stream_free(qr_detok_stream *s) {
    if (!s) return;
    free(s->pending.v);
    free(s->out.v);
    free(s);
}

void qr_detok_stream_reset(qr_detok_stream *s) {
    s->pending.n = 0;
    s->out.n = 0;
    s->first = true;
}

/* Classifies the bytes at p[0..n): returns the length of a complete valid character (> 0), 0 when
 * the bytes so far are a valid but incomplete start, or -k when the first k bytes are an invalid
 * sequence (its maximal valid-looking prefix, at least 1 byte). */
static int utf8_step(const unsigned char *p, size_t n) {
    unsigned char c = p[0];
    int need;
    unsigned char lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c < 0x80) return 1;
    if (c < 0xC2) return -1;
    if (c < 0xE0) need = 2;
    else if (c < 0xF0) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c < 0xF5) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return -1;
    }
    for (int i = 1; i < need; i++) {
        if ((size_t)i >= n) return 0;
        unsigned char b = p[i];
        bool ok = i == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
        if (!ok) return -i;
    }
    return need;
}

/* Moves every complete character (and U+FFFD for invalid bytes) from pending to out. */
static bool drain(qr_detok_stream *s, bool final) {
    const unsigned char *p = (const unsigned char *)s->pending.v;
    size_t n = s->pending.n, i = 0;
    while (i < n) {
        int k = utf8_step(p + i, n - i);
        if (k == 0 && !final) break;
        if (k > 0) {
            if (!qr_tok_bytes_append(&s->out, p + i, (size_t)k)) return false;
            i += (size_t)k;
        } else {
            if (!qr_tok_bytes_append(&s->out, "\xef\xbf\xbd", 3)) return false;
            i += k < 0 ? (size_t)-k : n - i;
        }
    }
    if (i > 0 && i < n) memmove(s->pending.v, s->pending.v + i, n - i);
    s->pending.n = n - i;
    return true;
}

qr_status qr_detok_stream_push(qr_detok_stream *s, int32_t id, const char **text, size_t *len) {
    *text = "";
    *len = 0;
    if (id < 0 || (uint32_t)id >= s->tok->n_vocab) return QR_ERR_INVALID_ARG;
    s->out.n = 0;
    size_t n;
    const char *p = piece_of(s->tok, id, s->first && s->tok->info.add_space_prefix, s->special, &n);
    s->first = false;
    if (!qr_tok_bytes_append(&s->pending, p, n) || !drain(s, false)) return QR_ERR_NOMEM;
    *text = s->out.n ? s->out.v : "";
    *len = s->out.n;
    return QR_OK;
}

qr_status qr_detok_stream_flush(qr_detok_stream *s, const char **text, size_t *len) {
    s->out.n = 0;
    if (!drain(s, true)) return QR_ERR_NOMEM;
    *text = s->out.n ? s->out.v : "";
    *len = s->out.n;
    s->pending.n = 0;
    s->first = true;
    return QR_OK;
}
