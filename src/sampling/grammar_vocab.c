/* grammar_vocab.c — a model's vocabulary as a byte trie for grammar mask walks (see grammar.h).
 *
 * The tokens are sorted by their bytes; walking them in that order, each token shares a prefix
 * with the one before (their longest common prefix) and adds one node per remaining byte. Nodes
 * are thus created in preorder, a node's subtree is a contiguous range, and a mask walk that finds
 * a byte impossible skips the whole range at once. */
#include <stdlib.h>
#include <string.h>

#include "sampling/grammar_internal.h"
#include "util/util.h"

typedef struct tok_ref {
    const uint8_t *p;
    uint32_t len;
    int32_t id;
} tok_ref;

/* Lexicographic by bytes, then by id (duplicates stay in id order). */
static int tok_ref_cmp(const void *a, const void *b) {
    const tok_ref *x = a, *y = b;
    const uint32_t n = x->len < y->len ? x->len : y->len;
    const int c = n ? memcmp(x->p, y->p, n) : 0;
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

qr_status qr_grammar_vocab_create(const char *const *pieces, const uint32_t *lens, const uint8_t *flags,
                                  int32_t n_vocab, qr_grammar_vocab **out, char *err, size_t err_len) {
    *out = NULL;
    if (n_vocab <= 0 || !lens || !pieces)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "grammar vocab: n_vocab must be > 0 (got %d)", n_vocab);
    qr_status st = QR_ERR_NOMEM;
    tok_ref *refs = NULL;
    int32_t *path = NULL, *count = NULL;
    qr_grammar_vocab *v = calloc(1, sizeof *v);
    if (!v) goto fail;
    v->n_vocab = n_vocab;
    uint64_t total = 0;
    int32_t n_eog = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        if (lens[i] > 65535) {
            st = qr_errf(err, err_len, QR_ERR_INVALID_ARG, "grammar vocab: token %d is %u bytes (at most 65535)", i,
                         lens[i]);
            goto fail;
        }
        if (lens[i] && !pieces[i]) {
            st = qr_errf(err, err_len, QR_ERR_INVALID_ARG, "grammar vocab: token %d has no bytes", i);
            goto fail;
        }
        total += lens[i];
        if (flags && (flags[i] & QR_GRAMMAR_TOKEN_EOG)) n_eog++;
    }
    if (total > INT32_MAX / 2) {
        st = qr_errf(err, err_len, QR_ERR_INVALID_ARG, "grammar vocab: %llu bytes of tokens is too many",
                     (unsigned long long)total);
        goto fail;
    }
    v->flags = calloc((size_t)n_vocab, 1);
    v->piece_off = malloc(sizeof(uint32_t) * ((size_t)n_vocab + 1));
    v->bytes = malloc(total ? total : 1);
    v->eog = malloc(sizeof(int32_t) * (size_t)(n_eog ? n_eog : 1));
    refs = malloc(sizeof *refs * (size_t)n_vocab);
    if (!v->flags || !v->piece_off || !v->bytes || !v->eog || !refs) goto fail;
    uint32_t off = 0;
    int32_t n_refs = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        const uint8_t f = flags ? flags[i] : 0;
        v->flags[i] = f;
        v->piece_off[i] = off;
        if (lens[i]) memcpy(v->bytes + off, pieces[i], lens[i]);
        if (f & QR_GRAMMAR_TOKEN_EOG) v->eog[v->n_eog++] = i;
        if (!(f & (QR_GRAMMAR_TOKEN_SPECIAL | QR_GRAMMAR_TOKEN_EOG)) && lens[i] > 0)
            refs[n_refs++] = (tok_ref){v->bytes + off, lens[i], i};
        off += lens[i];
    }
    v->piece_off[n_vocab] = off;
    qsort(refs, (size_t)n_refs, sizeof *refs, tok_ref_cmp);
    /* at most one node per byte of the trie's tokens */
    uint64_t max_nodes = 0;
    for (int32_t i = 0; i < n_refs; i++) max_nodes += refs[i].len;
    v->node_byte = malloc(max_nodes ? max_nodes : 1);
    v->node_depth = malloc(sizeof(uint16_t) * (max_nodes ? max_nodes : 1));
    v->node_end = malloc(sizeof(int32_t) * (max_nodes ? max_nodes : 1));
    count = calloc(max_nodes + 1, sizeof(int32_t));
    v->tok_ids = malloc(sizeof(int32_t) * (size_t)(n_refs ? n_refs : 1));
    path = malloc(sizeof(int32_t) * 65537);
    if (!v->node_byte || !v->node_depth || !v->node_end || !count || !v->tok_ids || !path) goto fail;
    int32_t n_nodes = 0, depth = 0; /* path[1..depth] = nodes of the previous token */
    const tok_ref *prev = NULL;
    for (int32_t i = 0; i < n_refs; i++) {
        const tok_ref *t = &refs[i];
        uint32_t lcp = 0;
        if (prev) {
            const uint32_t n = prev->len < t->len ? prev->len : t->len;
            while (lcp < n && prev->p[lcp] == t->p[lcp]) lcp++;
        }
        for (; depth > (int32_t)lcp; depth--) v->node_end[path[depth]] = n_nodes;
        for (uint32_t j = lcp; j < t->len; j++) {
            v->node_byte[n_nodes] = t->p[j];
            v->node_depth[n_nodes] = (uint16_t)(j + 1);
            path[++depth] = n_nodes++;
        }
        count[path[t->len]]++;
        v->tok_ids[i] = t->id;
        if ((int32_t)t->len > v->max_depth) v->max_depth = (int32_t)t->len;
        prev = t;
    }
    for (; depth > 0; depth--) v->node_end[path[depth]] = n_nodes;
    v->n_nodes = n_nodes;
    v->node_tok = malloc(sizeof(int32_t) * ((size_t)n_nodes + 1));
    if (!v->node_tok) goto fail;
    int32_t acc = 0;
    for (int32_t i = 0; i < n_nodes; i++) {
        v->node_tok[i] = acc;
        acc += count[i];
    }
    v->node_tok[n_nodes] = acc;
    free(refs);
    free(path);
    free(count);
    *out = v;
    return QR_OK;
fail:
    free(refs);
    free(path);
    free(count);
    qr_grammar_vocab_free(v);
    return st == QR_ERR_NOMEM ? qr_errf(err, err_len, QR_ERR_NOMEM, "grammar vocab: out of memory") : st;
}

void qr_grammar_vocab_free(qr_grammar_vocab *v) {
    if (!v) return;
    free(v->flags);
    free(v->piece_off);
    free(v->bytes);
    free(v->node_byte);
    free(v->node_depth);
    free(v->node_end);
    free(v->node_tok);
    free(v->tok_ids);
    free(v->eog);
    free(v);
}

int32_t qr_grammar_vocab_n_vocab(const qr_grammar_vocab *v) { return v->n_vocab; }

int64_t qr_grammar_vocab_n_nodes(const qr_grammar_vocab *v) { return v->n_nodes; }
