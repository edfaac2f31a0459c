/* grammar_match.c — the pushdown matcher: which bytes, and so which tokens, may come next.
 *
 * A position in the grammar is a set of stacks. A stack is a list of element indices, one per
 * open rule, the top one being the next thing to match; after normalization every top is a
 * character class (references are expanded into one stack per alternative, a rule that ends pops
 * its frame, and a reference that ends its alternative replaces the frame instead of pushing: a
 * tail call, so right recursion and repetition keep the stack flat). The empty stack means
 * "complete".
 *
 * Stacks and stack sets are interned (hash tables of int32 arrays), and a DFA state is
 * (stack set, pending bytes of a UTF-8 character). Transitions over one byte are computed on first
 * use and cached per state (256 entries), so a walk over the vocabulary trie costs one table read
 * per trie node once the states it meets are known, and an impossible byte prunes its subtree.
 * Each state also caches its allowed-token bitset (a few of them, least recently used). When the
 * tables grow past their limits they are rebuilt around the current state. */
#include <stdlib.h>
#include <string.h>

#include "sampling/grammar_internal.h"
#include "util/util.h"

#define MAX_STACKS 4096       /* stacks in one set (an ambiguous grammar beyond this is refused) */
#define MAX_DEPTH 2048        /* frames in one stack (deeper nesting is not followed) */
#define MAX_EXPAND (1 << 16)  /* stacks visited while normalizing one transition */
#define FLUSH_STATES 4096     /* rebuild the tables beyond this many DFA states ... */
#define FLUSH_POOL (8 << 20)  /* ... or this many int32 in the interning pools */
#define N_MASKS 8             /* cached allowed-token bitsets */
#define T_UNKNOWN (-2)
#define T_DEAD (-1)

/* Interned int32 arrays. */
typedef struct itab {
    int32_t *pool;
    int64_t pool_n, pool_cap;
    int64_t *off;      /* [n] */
    int32_t *len;      /* [n] */
    int32_t n, cap;
    int32_t *hash;     /* [hash_cap] id + 1, 0 = empty */
    int32_t hash_cap;
} itab;

typedef struct dstate {
    int32_t set;       /* stack set id */
    uint32_t pval;     /* bits of the pending UTF-8 character so far */
    uint8_t prem;      /* continuation bytes still expected (0 = none pending) */
    uint8_t plen;      /* length of the pending character's encoding */
    bool accepting;    /* nothing pending and the set holds the empty stack */
    bool finished;     /* accepting and the empty stack is all there is */
    int32_t *trans;    /* [256] next state, T_UNKNOWN or T_DEAD; NULL until first used */
    int32_t mask;      /* slot in the mask cache, or -1 */
} dstate;

typedef struct ibuf {
    int32_t *v;
    int64_t n, cap;
} ibuf;

struct qr_grammar_matcher {
    qr_grammar *g;
    const qr_grammar_vocab *v;
    itab stacks, sets, keys;  /* keys: (set, pval, prem | plen << 8) -> state id */
    dstate *st;
    int32_t st_cap;
    int32_t cur;               /* current state */
    int32_t start;             /* the grammar's start state */
    bool ended;                /* an EOG token was accepted */
    int32_t words;             /* mask words */
    uint64_t *masks;           /* [N_MASKS][words] */
    int32_t mask_owner[N_MASKS];
    uint64_t mask_used[N_MASKS];
    uint64_t tick;
    uint64_t *zero_mask;       /* [words] all clear (after the end) */
    int32_t *walk;             /* [v->max_depth + 1] states along the trie path */
    /* scratch for transitions */
    ibuf cand;                 /* candidate stacks, each as (len, frames...) */
    ibuf work;                 /* normalization work list, same layout */
    ibuf ids;                  /* interned ids of a new set */
    ibuf starts;               /* offsets of the work list's records */
    int32_t frames[MAX_DEPTH + 2]; /* one stack being expanded */
    bool overflow;             /* a transition met MAX_STACKS or MAX_EXPAND */
    int64_t n_states_made, n_walks;
};

/* ---- interning ------------------------------------------------------------------------------ */

static uint32_t hash_ints(const int32_t *v, int32_t n) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)n;
    for (int32_t i = 0; i < n; i++) {
        h ^= (uint32_t)v[i];
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 29;
    }
    return (uint32_t)(h ^ (h >> 32));
}

static void itab_free(itab *t) {
    free(t->pool);
    free(t->off);
    free(t->len);
    free(t->hash);
    memset(t, 0, sizeof *t);
}

static void itab_clear(itab *t) {
    t->pool_n = 0;
    t->n = 0;
    if (t->hash) memset(t->hash, 0, sizeof(int32_t) * (size_t)t->hash_cap);
}

static bool itab_rehash(itab *t, int32_t cap) {
    int32_t *h = calloc((size_t)cap, sizeof *h);
    if (!h) return false;
    for (int32_t id = 0; id < t->n; id++) {
        uint32_t k = hash_ints(t->pool + t->off[id], t->len[id]) & (uint32_t)(cap - 1);
        while (h[k]) k = (k + 1) & (uint32_t)(cap - 1);
        h[k] = id + 1;
    }
    free(t->hash);
    t->hash = h;
    t->hash_cap = cap;
    return true;
}

/* The id of v[0..n) in t (added when new), or -1 out of memory. */
static int32_t itab_intern(itab *t, const int32_t *v, int32_t n) {
    if ((t->n + 1) * 2 > t->hash_cap && !itab_rehash(t, t->hash_cap ? t->hash_cap * 2 : 1024)) return -1;
    const uint32_t h = hash_ints(v, n);
    uint32_t k = h & (uint32_t)(t->hash_cap - 1);
    while (t->hash[k]) {
        const int32_t id = t->hash[k] - 1;
        if (t->len[id] == n && (n == 0 || !memcmp(t->pool + t->off[id], v, sizeof(int32_t) * (size_t)n)))
            return id;
        k = (k + 1) & (uint32_t)(t->hash_cap - 1);
    }
    if (t->n == t->cap) {
        const int32_t nc = t->cap ? t->cap * 2 : 256;
        int64_t *no = realloc(t->off, sizeof *no * (size_t)nc);
        if (!no) return -1;
        t->off = no;
        int32_t *nl = realloc(t->len, sizeof *nl * (size_t)nc);
        if (!nl) return -1;
        t->len = nl;
        t->cap = nc;
    }
    if (t->pool_n + n > t->pool_cap) {
        int64_t nc = t->pool_cap ? t->pool_cap * 2 : 4096;
        while (nc < t->pool_n + n) nc *= 2;
        int32_t *np = realloc(t->pool, sizeof *np * (size_t)nc);
        if (!np) return -1;
        t->pool = np;
        t->pool_cap = nc;
    }
    if (n) memcpy(t->pool + t->pool_n, v, sizeof(int32_t) * (size_t)n);
    t->off[t->n] = t->pool_n;
    t->len[t->n] = n;
    t->pool_n += n;
    t->hash[k] = t->n + 1;
    return t->n++;
}

static bool ibuf_reserve(ibuf *b, int64_t extra) {
    if (b->n + extra <= b->cap) return true;
    int64_t nc = b->cap ? b->cap * 2 : 1024;
    while (nc < b->n + extra) nc *= 2;
    int32_t *nv = realloc(b->v, sizeof *nv * (size_t)nc);
    if (!nv) return false;
    b->v = nv;
    b->cap = nc;
    return true;
}

/* ---- stacks ------------------------------------------------------------------------------ */

/* Pushes stack frames[0..n) onto the work list (a record: n, frames...). */
static bool work_push(qr_grammar_matcher *m, const int32_t *frames, int32_t n, int32_t extra_top) {
    const int32_t total = n + (extra_top >= 0);
    if (!ibuf_reserve(&m->work, total + 1)) return false;
    int32_t *w = m->work.v + m->work.n;
    w[0] = total;
    if (n) memcpy(w + 1, frames, sizeof(int32_t) * (size_t)n);
    if (extra_top >= 0) w[1 + n] = extra_top;
    m->work.n += total + 1;
    return true;
}

/* Normalizes every stack on the work list (expanding references until each top is a class, or the
 * stack is empty) and appends the results to m->cand. The work list is a stack of records
 * (n, frames...) and m->starts holds their offsets, so the last record is popped first. Returns
 * false out of memory or past MAX_EXPAND expansions (m->overflow is set then). */
static bool normalize_all(qr_grammar_matcher *m) {
    const qr_grammar *g = m->g;
    int64_t budget = MAX_EXPAND;
    bool ok = false;
    m->starts.n = 0;
    for (int64_t i = 0; i < m->work.n; i += m->work.v[i] + 1) {
        if (!ibuf_reserve(&m->starts, 1)) goto out;
        m->starts.v[m->starts.n++] = (int32_t)i;
    }
    int32_t *frames = m->frames;
    while (m->starts.n > 0) {
        if (--budget < 0) {
            m->overflow = true;
            goto out;
        }
        const int64_t at = m->starts.v[--m->starts.n];
        const int32_t n = m->work.v[at];
        memcpy(frames, m->work.v + at + 1, sizeof(int32_t) * (size_t)n);
        m->work.n = at; /* it was the last record */
        const int32_t top = n ? frames[n - 1] : -1;
        if (n == 0 || GE_KIND(g->elems[top]) == GE_CLASS) {
            if (!ibuf_reserve(&m->cand, n + 1)) goto out;
            m->cand.v[m->cand.n] = n;
            memcpy(m->cand.v + m->cand.n + 1, frames, sizeof(int32_t) * (size_t)n);
            m->cand.n += n + 1;
            continue;
        }
        /* a reference: the frame moves past it (or pops when that ends its alternative) */
        const int32_t rule = GE_ARG(g->elems[top]);
        const int32_t base_n = GE_KIND(g->elems[top + 1]) == GE_END ? n - 1 : n;
        if (base_n == n) frames[n - 1] = top + 1;
        if (base_n + 1 > MAX_DEPTH) continue; /* too deep: this path is not followed */
        for (int32_t a = g->rule_alt[rule]; a < g->rule_alt[rule + 1]; a++) {
            const int32_t first = g->alt_start[a];
            const int64_t rec = m->work.n;
            if (!work_push(m, frames, base_n, GE_KIND(g->elems[first]) == GE_END ? -1 : first) ||
                !ibuf_reserve(&m->starts, 1))
                goto out;
            m->starts.v[m->starts.n++] = (int32_t)rec;
        }
    }
    ok = true;
out:
    m->work.n = 0;
    return ok;
}

static int cmp_i32(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* Interns the candidate stacks as a set. Returns the set id, T_DEAD for an empty set, or -3 on
 * failure (out of memory, too many stacks: m->overflow). */
static int32_t intern_candidates(qr_grammar_matcher *m) {
    m->ids.n = 0;
    for (int64_t i = 0; i < m->cand.n; i += m->cand.v[i] + 1) {
        const int32_t id = itab_intern(&m->stacks, m->cand.v + i + 1, m->cand.v[i]);
        if (id < 0 || !ibuf_reserve(&m->ids, 1)) return -3;
        m->ids.v[m->ids.n++] = id;
    }
    m->cand.n = 0;
    if (m->ids.n == 0) return T_DEAD;
    qsort(m->ids.v, (size_t)m->ids.n, sizeof(int32_t), cmp_i32);
    int64_t k = 1;
    for (int64_t i = 1; i < m->ids.n; i++)
        if (m->ids.v[i] != m->ids.v[k - 1]) m->ids.v[k++] = m->ids.v[i];
    if (k > MAX_STACKS) {
        m->overflow = true;
        return -3;
    }
    const int32_t set = itab_intern(&m->sets, m->ids.v, (int32_t)k);
    return set < 0 ? -3 : set;
}

/* ---- states and transitions ---------------------------------------------------------------- */

static int32_t n_states(const qr_grammar_matcher *m) { return m->keys.n; }

/* Creates or finds the state for (set, pending bytes). -3 on failure. */
static int32_t make_state(qr_grammar_matcher *m, int32_t set, uint32_t pval, uint8_t prem, uint8_t plen) {
    const int32_t before = n_states(m);
    if (before >= m->st_cap) { /* room for a new state before its key is entered */
        const int32_t nc = m->st_cap ? m->st_cap * 2 : 256;
        dstate *ns = realloc(m->st, sizeof *ns * (size_t)nc);
        if (!ns) return -3;
        m->st = ns;
        m->st_cap = nc;
    }
    const int32_t key[3] = {set, (int32_t)pval, prem | plen << 8};
    const int32_t id = itab_intern(&m->keys, key, 3);
    if (id < 0) return -3;
    if (id < before) return id;
    dstate *s = &m->st[id];
    memset(s, 0, sizeof *s);
    s->set = set;
    s->pval = pval;
    s->prem = prem;
    s->plen = plen;
    s->mask = -1;
    bool has_empty = false;
    const int32_t *ids = m->sets.pool + m->sets.off[set];
    const int32_t n = m->sets.len[set];
    for (int32_t i = 0; i < n; i++)
        if (m->stacks.len[ids[i]] == 0) has_empty = true;
    s->accepting = prem == 0 && has_empty;
    s->finished = s->accepting && n == 1;
    m->n_states_made++;
    return id;
}

/* Stacks of `set` whose top class matches code point cp, advanced past it and normalized, as a
 * new set (T_DEAD when none, -3 on failure). */
static int32_t advance_set(qr_grammar_matcher *m, int32_t set, uint32_t cp) {
    const qr_grammar *g = m->g;
    const int32_t n = m->sets.len[set];
    m->work.n = 0;
    m->cand.n = 0;
    for (int32_t i = 0; i < n; i++) {
        const int32_t sid = m->sets.pool[m->sets.off[set] + i];
        const int32_t len = m->stacks.len[sid];
        if (len == 0) continue;
        const int32_t *fr = m->stacks.pool + m->stacks.off[sid];
        const int32_t top = fr[len - 1];
        if (!gclass_has(g, &g->classes[GE_ARG(g->elems[top])], cp)) continue;
        if (!work_push(m, fr, len - 1, GE_KIND(g->elems[top + 1]) == GE_END ? -1 : top + 1)) return -3;
    }
    if (!normalize_all(m)) return -3;
    return intern_candidates(m);
}

/* Stacks of `set` whose top class meets [lo, hi] (a pending UTF-8 character's possible values). */
static int32_t filter_set(qr_grammar_matcher *m, int32_t set, uint32_t lo, uint32_t hi) {
    const qr_grammar *g = m->g;
    const int32_t n = m->sets.len[set];
    m->ids.n = 0;
    for (int32_t i = 0; i < n; i++) {
        const int32_t sid = m->sets.pool[m->sets.off[set] + i];
        const int32_t len = m->stacks.len[sid];
        if (len == 0) continue;
        const int32_t top = m->stacks.pool[m->stacks.off[sid] + len - 1];
        if (!gclass_meets(g, &g->classes[GE_ARG(g->elems[top])], lo, hi)) continue;
        if (!ibuf_reserve(&m->ids, 1)) return -3;
        m->ids.v[m->ids.n++] = sid;
    }
    if (m->ids.n == 0) return T_DEAD;
    if (m->ids.n == n) return set;
    const int32_t r = itab_intern(&m->sets, m->ids.v, (int32_t)m->ids.n);
    return r < 0 ? -3 : r;
}

/* Smallest code point of each UTF-8 length (shorter encodings are overlong). */
static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};

/* filter_set for a pending character: value bits so far pval, prem continuation bytes to come,
 * plen bytes in all; the possible code points are clamped to those that encoding can hold. */
static int32_t filter_pending(qr_grammar_matcher *m, int32_t set, uint32_t pval, uint8_t prem, uint8_t plen) {
    uint32_t lo = pval << (6 * prem), hi = lo | ((1u << (6 * prem)) - 1);
    if (lo < min_cp[plen]) lo = min_cp[plen];
    if (hi > 0x10ffff) hi = 0x10ffff;
    return lo > hi ? T_DEAD : filter_set(m, set, lo, hi);
}

/* Computes (and caches) the transition of state s over byte b. */
static int32_t trans_slow(qr_grammar_matcher *m, int32_t s, uint8_t b) {
    if (!m->st[s].trans) {
        int32_t *t = malloc(sizeof(int32_t) * 256);
        if (!t) return T_DEAD;
        for (int i = 0; i < 256; i++) t[i] = T_UNKNOWN;
        m->st[s].trans = t;
    }
    const dstate d = m->st[s];
    int32_t next = T_DEAD, set = T_DEAD;
    uint32_t pval = 0;
    uint8_t prem = 0, plen = 0;
    if (d.prem > 0) {
        if ((b & 0xc0) == 0x80) {
            pval = (d.pval << 6) | (b & 0x3f);
            prem = (uint8_t)(d.prem - 1);
            plen = d.plen;
            if (prem == 0) {
                const bool bad = pval < min_cp[plen] || pval > 0x10ffff || (pval >= 0xd800 && pval <= 0xdfff);
                set = bad ? T_DEAD : advance_set(m, d.set, pval);
                plen = 0;
                pval = 0;
            } else {
                set = filter_pending(m, d.set, pval, prem, plen);
            }
        }
    } else if (b < 0x80) {
        set = advance_set(m, d.set, b);
    } else if (b >= 0xc2 && b <= 0xf4) {
        plen = b <= 0xdf ? 2 : b <= 0xef ? 3 : 4;
        prem = (uint8_t)(plen - 1);
        pval = b & (plen == 2 ? 0x1f : plen == 3 ? 0x0f : 0x07);
        set = filter_pending(m, d.set, pval, prem, plen);
    }
    if (set >= 0) next = make_state(m, set, pval, prem, plen);
    if (next < 0) next = T_DEAD; /* failures (-3) read as impossible; m->overflow tells */
    m->st[s].trans[b] = next;
    return next;
}

static inline int32_t trans(qr_grammar_matcher *m, int32_t s, uint8_t b) {
    const int32_t *t = m->st[s].trans;
    if (t && t[b] != T_UNKNOWN) return t[b];
    return trans_slow(m, s, b);
}

/* ---- lifetime -------------------------------------------------------------------------------- */

/* The start state: every way of expanding the start rule. -3 on failure. */
static int32_t start_state(qr_grammar_matcher *m) {
    const qr_grammar *g = m->g;
    m->work.n = 0;
    m->cand.n = 0;
    for (int32_t a = g->rule_alt[g->root]; a < g->rule_alt[g->root + 1]; a++) {
        const int32_t first = g->alt_start[a];
        if (!work_push(m, NULL, 0, GE_KIND(g->elems[first]) == GE_END ? -1 : first)) return -3;
    }
    if (!normalize_all(m)) return -3;
    const int32_t set = intern_candidates(m);
    if (set == T_DEAD) return -3;
    return set < 0 ? -3 : make_state(m, set, 0, 0, 0);
}

/* Drops every cached state and rebuilds the start state and the current one. */
static bool rebuild(qr_grammar_matcher *m) {
    /* save the current state's stacks */
    const dstate cur = m->st[m->cur];
    ibuf saved = {0};
    const int32_t n = m->sets.len[cur.set];
    for (int32_t i = 0; i < n; i++) {
        const int32_t sid = m->sets.pool[m->sets.off[cur.set] + i];
        const int32_t len = m->stacks.len[sid];
        if (!ibuf_reserve(&saved, len + 1)) {
            free(saved.v);
            return false;
        }
        saved.v[saved.n] = len;
        if (len) memcpy(saved.v + saved.n + 1, m->stacks.pool + m->stacks.off[sid], sizeof(int32_t) * (size_t)len);
        saved.n += len + 1;
    }
    for (int32_t i = 0; i < n_states(m); i++) free(m->st[i].trans);
    itab_clear(&m->stacks);
    itab_clear(&m->sets);
    itab_clear(&m->keys);
    for (int i = 0; i < N_MASKS; i++) m->mask_owner[i] = -1;
    m->start = start_state(m);
    bool ok = m->start >= 0;
    if (ok) {
        m->cand.n = 0;
        if (!ibuf_reserve(&m->cand, saved.n)) ok = false;
        else {
            memcpy(m->cand.v, saved.v, sizeof(int32_t) * (size_t)saved.n);
            m->cand.n = saved.n;
            const int32_t set = intern_candidates(m);
            m->cur = set >= 0 ? make_state(m, set, cur.pval, cur.prem, cur.plen) : -3;
            ok = m->cur >= 0;
        }
    }
    free(saved.v);
    return ok;
}

/* Rebuilds the tables when they grew past their limits (between operations only). */
static void maybe_rebuild(qr_grammar_matcher *m) {
    if (n_states(m) <= FLUSH_STATES && m->stacks.pool_n + m->sets.pool_n <= FLUSH_POOL) return;
    if (!rebuild(m)) m->overflow = true;
}

qr_status qr_grammar_matcher_create(qr_grammar *g, const qr_grammar_vocab *v, qr_grammar_matcher **out,
                                    char *err, size_t err_len) {
    *out = NULL;
    qr_grammar_matcher *m = calloc(1, sizeof *m);
    if (!m) return qr_errf(err, err_len, QR_ERR_NOMEM, "grammar: out of memory");
    m->g = qr_grammar_retain(g);
    m->v = v;
    m->words = (v->n_vocab + 63) / 64;
    m->masks = calloc((size_t)m->words * N_MASKS, sizeof(uint64_t));
    m->zero_mask = calloc((size_t)m->words, sizeof(uint64_t));
    m->walk = malloc(sizeof(int32_t) * ((size_t)v->max_depth + 1));
    for (int i = 0; i < N_MASKS; i++) m->mask_owner[i] = -1;
    if (!m->masks || !m->zero_mask || !m->walk) {
        qr_grammar_matcher_free(m);
        return qr_errf(err, err_len, QR_ERR_NOMEM, "grammar: out of memory");
    }
    m->start = start_state(m);
    if (m->start < 0) {
        const bool ovf = m->overflow;
        qr_grammar_matcher_free(m);
        if (ovf)
            return qr_errf(err, err_len, QR_ERR_INVALID_ARG,
                           "grammar: the start rule expands into more than %d alternatives (too ambiguous)",
                           MAX_STACKS);
        return qr_errf(err, err_len, QR_ERR_NOMEM, "grammar: out of memory");
    }
    m->cur = m->start;
    *out = m;
    return QR_OK;
}

void qr_grammar_matcher_free(qr_grammar_matcher *m) {
    if (!m) return;
    for (int32_t i = 0; i < n_states(m) && m->st; i++) free(m->st[i].trans);
    free(m->st);
    itab_free(&m->stacks);
    itab_free(&m->sets);
    itab_free(&m->keys);
    free(m->masks);
    free(m->zero_mask);
    free(m->walk);
    free(m->cand.v);
    free(m->work.v);
    free(m->ids.v);
    free(m->starts.v);
    qr_grammar_free(m->g);
    free(m);
}

void qr_grammar_matcher_reset(qr_grammar_matcher *m) {
    m->cur = m->start;
    m->ended = false;
}

/* ---- queries ------------------------------------------------------------------------------- */

/* The state after the bytes of token t from state s, or T_DEAD. */
static int32_t walk_token(qr_grammar_matcher *m, int32_t s, int32_t t) {
    const qr_grammar_vocab *v = m->v;
    const uint8_t *p = v->bytes + v->piece_off[t];
    const uint32_t n = v->piece_off[t + 1] - v->piece_off[t];
    if (n == 0) return T_DEAD;
    for (uint32_t i = 0; i < n && s >= 0; i++) s = trans(m, s, p[i]);
    return s;
}

bool qr_grammar_matcher_allows(qr_grammar_matcher *m, int32_t token) {
    if (m->ended || token < 0 || token >= m->v->n_vocab) return false;
    maybe_rebuild(m);
    const uint8_t f = m->v->flags[token];
    if (f & QR_GRAMMAR_TOKEN_EOG) return m->st[m->cur].accepting;
    if (f & QR_GRAMMAR_TOKEN_SPECIAL) return false;
    return walk_token(m, m->cur, token) >= 0;
}

qr_status qr_grammar_matcher_accept(qr_grammar_matcher *m, int32_t token, char *err, size_t err_len) {
    if (m->ended) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "grammar: the output already ended");
    if (token < 0 || token >= m->v->n_vocab)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "grammar: token %d is outside the vocabulary", token);
    maybe_rebuild(m);
    const uint8_t f = m->v->flags[token];
    if (f & QR_GRAMMAR_TOKEN_EOG) {
        if (!m->st[m->cur].accepting)
            return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "grammar: token %d ends the output too early", token);
        m->ended = true;
        return QR_OK;
    }
    const int32_t s = (f & QR_GRAMMAR_TOKEN_SPECIAL) ? T_DEAD : walk_token(m, m->cur, token);
    if (s < 0)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "grammar: token %d cannot continue the output%s", token,
                       m->overflow ? " (the grammar is too ambiguous or nested too deeply)" : "");
    m->cur = s;
    return QR_OK;
}

bool qr_grammar_matcher_accept_bytes(qr_grammar_matcher *m, const char *s, size_t n) {
    if (m->ended) return n == 0;
    maybe_rebuild(m);
    int32_t st = m->cur;
    for (size_t i = 0; i < n && st >= 0; i++) st = trans(m, st, (uint8_t)s[i]);
    if (st < 0) return false;
    m->cur = st;
    return true;
}

const uint64_t *qr_grammar_matcher_mask(qr_grammar_matcher *m) {
    if (m->ended) return m->zero_mask;
    maybe_rebuild(m);
    const int32_t cur = m->cur;
    m->tick++;
    if (m->st[cur].mask >= 0) {
        m->mask_used[m->st[cur].mask] = m->tick;
        return m->masks + (size_t)m->st[cur].mask * (size_t)m->words;
    }
    int slot = 0;
    for (int i = 1; i < N_MASKS; i++)
        if (m->mask_used[i] < m->mask_used[slot]) slot = i;
    if (m->mask_owner[slot] >= 0 && m->mask_owner[slot] < n_states(m)) m->st[m->mask_owner[slot]].mask = -1;
    uint64_t *mask = m->masks + (size_t)slot * (size_t)m->words;
    memset(mask, 0, sizeof(uint64_t) * (size_t)m->words);
    const qr_grammar_vocab *v = m->v;
    int32_t *ws = m->walk;
    ws[0] = cur;
    for (int32_t i = 0; i < v->n_nodes;) {
        const int32_t d = v->node_depth[i];
        const int32_t t = trans(m, ws[d - 1], v->node_byte[i]);
        if (t < 0) {
            i = v->node_end[i];
            continue;
        }
        ws[d] = t;
        for (int32_t k = v->node_tok[i]; k < v->node_tok[i + 1]; k++) {
            const int32_t id = v->tok_ids[k];
            mask[id >> 6] |= 1ull << (id & 63);
        }
        i++;
    }
    if (m->st[cur].accepting)
        for (int32_t k = 0; k < v->n_eog; k++) mask[v->eog[k] >> 6] |= 1ull << (v->eog[k] & 63);
    m->st[cur].mask = slot;
    m->mask_owner[slot] = cur;
    m->mask_used[slot] = m->tick;
    m->n_walks++;
    return mask;
}

bool qr_grammar_matcher_can_end(qr_grammar_matcher *m) { return !m->ended && m->st[m->cur].accepting; }

bool qr_grammar_matcher_done(qr_grammar_matcher *m) { return m->ended || m->st[m->cur].finished; }

void qr_grammar_matcher_stats(const qr_grammar_matcher *m, int64_t *n_states_made, int64_t *n_mask_walks) {
    if (n_states_made) *n_states_made = m->n_states_made;
    if (n_mask_walks) *n_mask_walks = m->n_walks;
}
