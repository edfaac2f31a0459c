/* tok_models.c — two of the tokenization algorithms (WordPiece: tok_wpm.c), each over one text fragment:
 *   SPM: merge the adjacent pair whose concatenation is the highest-scoring token, repeatedly;
 *        leftovers fall back to <0xXX> byte tokens.
 *   BPE: pre-split into words, map bytes to GPT-2's printable code points, merge the pair with
 *        the lowest merge rank, repeatedly.
 * The merge order (and its tie-breaking: leftmost pair first) is llama.cpp's. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

/* ---- a binary heap of candidate merges: smallest key first, then leftmost ------------------ */

typedef struct bigram {
    double key;     /* SPM: -score; BPE: rank */
    int32_t left;   /* symbol index */
    int32_t right;  /* symbol index */
    int32_t result; /* token id the merge produces (-1: not a token) */
    uint32_t size;  /* bytes of left + right when queued (stale entries no longer match) */
} bigram;

typedef struct heap {
    bigram *v;
    size_t n, cap;
} heap;

static bool before(const bigram *a, const bigram *b) {
    return a->key < b->key || (a->key == b->key && a->left < b->left);
}

static bool heap_push(heap *h, bigram x) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        bigram *v = realloc(h->v, cap * sizeof *v);
        if (!v) return false;
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!before(&x, &h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = x;
    return true;
}

static bigram heap_pop(heap *h) {
    bigram top = h->v[0];
    bigram last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && before(&h->v[c + 1], &h->v[c])) c++;
        if (!before(&h->v[c], &last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n) h->v[i] = last;
    return top;
}

/* ---- symbols: a doubly linked list over the fragment's bytes ------------------------------- */

typedef struct symbols {
    uint32_t *start; /* [n] byte offset of the symbol's text */
    uint32_t *len;   /* [n] bytes; 0 once merged into its left neighbour */
    int32_t *prev;   /* [n] */
    int32_t *next;   /* [n] */
    int32_t *id;     /* [n] token id of the symbol's text, or -1 */
    size_t n, cap;
} symbols;

static bool symbols_reserve(symbols *s, size_t n) {
    if (n <= s->cap) return true;
    size_t cap = s->cap ? s->cap : 64;
    while (cap < n) cap *= 2;
    uint32_t *a = realloc(s->start, cap * sizeof *a);
    if (a) s->start = a;
    uint32_t *b = realloc(s->len, cap * sizeof *b);
    if (b) s->len = b;
    int32_t *c = realloc(s->prev, cap * sizeof *c);
    if (c) s->prev = c;
    int32_t *d = realloc(s->next, cap * sizeof *d);
    if (d) s->next = d;
    int32_t *e = realloc(s->id, cap * sizeof *e);
    if (e) s->id = e;
    if (!a || !b || !c || !d || !e) return false;
    s->cap = cap;
    return true;
}

static void symbols_free(symbols *s) {
    free(s->start);
    free(s->len);
    free(s->prev);
    free(s->next);
    free(s->id);
}

/* Unlinks the right symbol after a merge into `left`. */
static void merge_into(symbols *s, int32_t left, int32_t right) {
    s->len[left] += s->len[right];
    s->len[right] = 0;
    s->next[left] = s->next[right];
    if (s->next[right] >= 0) s->prev[s->next[right]] = left;
}

/* ---- SPM ----------------------------------------------------------------------------------- */

static bool spm_try_bigram(const qr_tokenizer *tok, const char *text, symbols *s, heap *h, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return true;
    uint32_t size = s->len[l] + s->len[r];
    int32_t id = qr_tok_strmap_find(&tok->map, text + s->start[l], size);
    if (id < 0) return true;
    bigram b = {-(double)tok->score[id], l, r, id, size};
    return heap_push(h, b);
}

/* Byte fallback for a piece of text that is not a token. */
static qr_status push_bytes(const qr_tokenizer *tok, const char *p, size_t n, qr_tok_ids *out) {
    for (size_t i = 0; i < n; i++) {
        int32_t id = tok->byte_token[(unsigned char)p[i]];
        if (id < 0) return QR_ERR_NOT_FOUND;
        if (!qr_tok_ids_push(out, id)) return QR_ERR_NOMEM;
    }
    return QR_OK;
}

qr_status qr_tok_spm_fragment(const qr_tokenizer *tok, const char *text, size_t len, qr_tok_ids *out) {
    if (len == 0) return QR_OK;
    if (len > INT32_MAX) return QR_ERR_INVALID_ARG;
    symbols s = {0};
    heap h = {0};
    qr_status st = QR_ERR_NOMEM;
    if (!symbols_reserve(&s, len)) goto done;
    for (size_t off = 0; off < len;) {
        size_t n = qr_tok_utf8_len((unsigned char)text[off]);
        if (n > len - off) n = len - off;
        size_t i = s.n++;
        s.start[i] = (uint32_t)off;
        s.len[i] = (uint32_t)n;
        s.prev[i] = (int32_t)i - 1;
        off += n;
        s.next[i] = off == len ? -1 : (int32_t)i + 1;
    }
    for (size_t i = 1; i < s.n; i++)
        if (!spm_try_bigram(tok, text, &s, &h, (int32_t)i - 1, (int32_t)i)) goto done;
    while (h.n) {
        bigram b = heap_pop(&h);
        if (s.len[b.left] == 0 || s.len[b.right] == 0 || s.len[b.left] + s.len[b.right] != b.size) continue;
        merge_into(&s, b.left, b.right);
        if (!spm_try_bigram(tok, text, &s, &h, s.prev[b.left], b.left)) goto done;
        if (!spm_try_bigram(tok, text, &s, &h, b.left, s.next[b.left])) goto done;
    }
    for (int32_t i = 0; i != -1; i = s.next[i]) {
        int32_t id = qr_tok_strmap_find(&tok->map, text + s.start[i], s.len[i]);
        if (id >= 0) {
            if (!qr_tok_ids_push(out, id)) goto done;
        } else {
            st = push_bytes(tok, text + s.start[i], s.len[i], out);
            if (st != QR_OK) goto done;
            st = QR_ERR_NOMEM;
        }
    }
    st = QR_OK;
done:
    symbols_free(&s);
    free(h.v);
    return st;
}

/* ---- BPE ----------------------------------------------------------------------------------- */

static bool bpe_try_bigram(const qr_tokenizer *tok, symbols *s, heap *h, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return true;
    const qr_tok_merge_entry *e = qr_tok_merge_find(&tok->merges, s->id[l], s->id[r]);
    if (!e) return true;
    bigram b = {(double)e->rank, l, r, e->result, s->len[l] + s->len[r]};
    return heap_push(h, b);
}

/* Appends the GPT-2 byte-level encoding of bytes p[0..n) to enc. */
static bool byte_encode(const char *p, size_t n, qr_tok_bytes *enc) {
    for (size_t i = 0; i < n; i++) {
        char u[4];
        size_t k = qr_tok_utf8_encode(qr_tok_byte_to_cpt((uint8_t)p[i]), u);
        if (!qr_tok_bytes_append(enc, u, k)) return false;
    }
    return true;
}

/* A final symbol that is not a token: each byte of its encoded text, when that byte is a token. */
static qr_status bpe_push_leftover(const qr_tokenizer *tok, const char *p, size_t n, bool encode, qr_tok_ids *out) {
    for (size_t i = 0; i < n; i++) {
        char u[4];
        size_t k = 1;
        u[0] = p[i];
        if (encode) k = qr_tok_utf8_encode(qr_tok_byte_to_cpt((uint8_t)p[i]), u);
        for (size_t j = 0; j < k; j++) {
            int32_t id = qr_tok_strmap_find(&tok->map, &u[j], 1);
            if (id >= 0 && !qr_tok_ids_push(out, id)) return QR_ERR_NOMEM;
        }
    }
    return QR_OK;
}

/* Merges one word w[0..n) (raw bytes; each byte is one initial symbol). */
static qr_status bpe_word(const qr_tokenizer *tok, const char *w, size_t n, symbols *s, heap *h, qr_tok_bytes *enc,
                          qr_tok_ids *out) {
    if (tok->info.ignore_merges) {
        enc->n = 0;
        if (!byte_encode(w, n, enc)) return QR_ERR_NOMEM;
        int32_t id = qr_tok_strmap_find(&tok->map, enc->v, enc->n);
        if (id >= 0) return qr_tok_ids_push(out, id) ? QR_OK : QR_ERR_NOMEM;
    }
    if (!symbols_reserve(s, n)) return QR_ERR_NOMEM;
    s->n = n;
    h->n = 0;
    for (size_t i = 0; i < n; i++) {
        s->start[i] = (uint32_t)i;
        s->len[i] = 1;
        s->prev[i] = (int32_t)i - 1;
        s->next[i] = i + 1 == n ? -1 : (int32_t)i + 1;
        s->id[i] = tok->byte_token[(unsigned char)w[i]];
    }
    for (size_t i = 1; i < n; i++)
        if (!bpe_try_bigram(tok, s, h, (int32_t)i - 1, (int32_t)i)) return QR_ERR_NOMEM;
    while (h->n) {
        bigram b = heap_pop(h);
        if (s->len[b.left] == 0 || s->len[b.right] == 0 || s->len[b.left] + s->len[b.right] != b.size) continue;
        merge_into(s, b.left, b.right);
        s->id[b.left] = b.result;
        if (!bpe_try_bigram(tok, s, h, s->prev[b.left], b.left)) return QR_ERR_NOMEM;
        if (!bpe_try_bigram(tok, s, h, b.left, s->next[b.left])) return QR_ERR_NOMEM;
    }
    for (int32_t i = 0; i != -1; i = s->next[i]) {
        if (s->id[i] >= 0) {
            if (!qr_tok_ids_push(out, s->id[i])) return QR_ERR_NOMEM;
        } else {
            qr_status st = bpe_push_leftover(tok, w + s->start[i], s->len[i], tok->byte_encode, out);
            if (st != QR_OK) return st;
        }
    }
    return QR_OK;
}

qr_status qr_tok_bpe_fragment(const qr_tokenizer *tok, const char *text, size_t len, qr_tok_ids *out) {
    if (len == 0) return QR_OK;
    if (len > INT32_MAX / 4) return QR_ERR_INVALID_ARG;
    qr_tok_words words;
    qr_status st = qr_tok_pretok_split(&tok->pre, text, len, &words);
    if (st != QR_OK) return st;
    symbols s = {0};
    heap h = {0};
    qr_tok_bytes enc = {0};
    char *wbuf = malloc(words.n_cpts * 4 + 1);
    st = QR_ERR_NOMEM;
    if (!wbuf) goto done;
    size_t c = 0;
    for (size_t wi = 0; wi < words.n_words; wi++) {
        size_t m = 0;
        for (size_t k = 0; k < words.lens[wi]; k++) m += qr_tok_utf8_encode(words.cpts[c + k], wbuf + m);
        c += words.lens[wi];
        st = bpe_word(tok, wbuf, m, &s, &h, &enc, out);
        if (st != QR_OK) goto done;
    }
    st = QR_OK;
done:
    free(wbuf);
    free(enc.v);
    symbols_free(&s);
    free(h.v);
    qr_tok_words_free(&words);
    return st;
}
