/* grammar_internal.h — the compiled grammar's layout, shared by grammar_parse.c (which builds it)
 * and grammar_match.c (which runs it). Not part of the contract in grammar.h.
 *
 * A grammar is a list of rules; a rule is a list of alternatives; an alternative is a run of
 * elements in elems[] closed by an END element. An element is an int32: kind in the low 2 bits,
 * argument above (a character class id or a rule id). */
#ifndef QR_SAMPLING_GRAMMAR_INTERNAL_H
#define QR_SAMPLING_GRAMMAR_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "sampling/grammar.h"

enum { GE_END = 0, GE_CLASS = 1, GE_REF = 2 };
#define GE_KIND(e) ((e) & 3)
#define GE_ARG(e) ((e) >> 2)
#define GE_MAKE(kind, arg) ((int32_t)(((uint32_t)(arg) << 2) | (uint32_t)(kind)))

/* A set of code points: the union of ranges [lo, hi], or its complement when negated. */
typedef struct gclass {
    int32_t range_off;  /* first range in ranges[] (pairs lo, hi) */
    int32_t n_ranges;
    bool negated;
    uint64_t ascii[2];  /* membership of code points 0..127 (negation applied) */
} gclass;

struct qr_grammar {
    atomic_int refs;
    int32_t n_rules;
    char **names;        /* [n_rules] rule names (generated ones carry a suffix) */
    int32_t *rule_alt;   /* [n_rules + 1]: alternatives of rule r are alt_start[rule_alt[r] .. rule_alt[r+1]) */
    int32_t *alt_start;  /* [n_alts] index into elems of each alternative's first element */
    int32_t n_alts;
    int32_t *elems;      /* [n_elems] */
    int32_t n_elems;
    gclass *classes;     /* [n_classes] */
    int32_t n_classes;
    uint32_t *ranges;    /* [2 * n_ranges] */
    int32_t n_ranges;
    int32_t root;        /* start rule */
};

/* A vocabulary as a byte trie in preorder: node i has the byte node_byte[i] at depth node_depth[i]
 * (1 = a child of the root), its subtree is [i, node_end[i]), and the tokens whose bytes end at it
 * are tok_ids[node_tok[i] .. node_tok[i+1]). Special tokens and empty tokens are not in the trie. */
struct qr_grammar_vocab {
    int32_t n_vocab;
    uint8_t *flags;       /* [n_vocab] QR_GRAMMAR_TOKEN_* */
    uint32_t *piece_off;  /* [n_vocab + 1] token i's bytes are bytes[piece_off[i] .. piece_off[i+1]) */
    uint8_t *bytes;
    int32_t n_nodes;
    int32_t max_depth;    /* longest token in the trie */
    uint8_t *node_byte;   /* [n_nodes] */
    uint16_t *node_depth; /* [n_nodes] */
    int32_t *node_end;    /* [n_nodes] */
    int32_t *node_tok;    /* [n_nodes + 1] */
    int32_t *tok_ids;     /* [tokens in the trie] */
    int32_t *eog;         /* [n_eog] EOG token ids */
    int32_t n_eog;
};

/* Whether code point cp is in class c of g. */
static inline bool gclass_has(const qr_grammar *g, const gclass *c, uint32_t cp) {
    if (cp < 128) return (c->ascii[cp >> 6] >> (cp & 63)) & 1;
    if (c->n_ranges == 0) return c->negated;
    const uint32_t *r = g->ranges + 2 * c->range_off;
    bool in = false;
    for (int32_t i = 0; i < c->n_ranges && !in; i++) in = cp >= r[2 * i] && cp <= r[2 * i + 1];
    return in != c->negated;
}

/* Whether class c of g holds some code point in [lo, hi]. */
static inline bool gclass_meets(const qr_grammar *g, const gclass *c, uint32_t lo, uint32_t hi) {
    if (c->n_ranges == 0) return c->negated;
    const uint32_t *r = g->ranges + 2 * c->range_off;
    if (!c->negated) {
        for (int32_t i = 0; i < c->n_ranges; i++)
            if (r[2 * i] <= hi && r[2 * i + 1] >= lo) return true;
        return false;
    }
    /* the complement meets [lo, hi] unless the ranges cover it whole: walk lo upward */
    uint32_t x = lo;
    for (bool moved = true; moved;) {
        moved = false;
        for (int32_t i = 0; i < c->n_ranges; i++)
            if (r[2 * i] <= x && r[2 * i + 1] >= x) {
                if (r[2 * i + 1] >= hi) return false;
                x = r[2 * i + 1] + 1;
                moved = true;
            }
    }
    return true;
}

#endif /* QR_SAMPLING_GRAMMAR_INTERNAL_H */
