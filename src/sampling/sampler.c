/* sampler.c — the sampler chain: logit bias, penalties, top-k, top-p, min-p, temperature, draw.
 * The stop-string checker lives in sampler_stop.c. */
#include "sampling/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util/util.h"

/* Top-k at or below this size uses a bounded heap (one comparison per token for most tokens);
 * larger selections use an in-place quickselect. */
#define HEAP_SELECT_MAX 512

typedef struct cand {
    int32_t id;
    float logit;
} cand;

struct qr_sampler {
    qr_sampler_params p;  /* copy; p.logit_bias points at `bias` */
    qr_logit_bias *bias;  /* [p.n_logit_bias] */
    int32_t n_vocab;
    uint64_t seed;        /* the seed in use */
    uint64_t rng[4];      /* xoshiro256** state */
    int32_t *hist;        /* [p.penalty_last_n] ring of accepted tokens */
    int32_t hist_len;     /* valid entries in hist */
    int32_t hist_pos;     /* next write position */
    int32_t *counts;      /* [n_vocab] occurrences of each token in hist */
    float *work;          /* [n_vocab] biased, penalised logits */
    cand *cands;          /* [n_vocab] candidate set */
    cand *tmp;            /* [n_vocab] scratch for heap selection and logprobs */
    qr_grammar_matcher *grammar; /* owned; NULL = unconstrained */
};

/* ---- PRNG: splitmix64 for seeding, xoshiro256** for the stream ---------------------------- */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(uint64_t s[4]) {
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* Uniform double in [0, 1) with 53 random bits. */
static double rng_uniform(uint64_t s[4]) { return (double)(rng_next(s) >> 11) * 0x1.0p-53; }

static void rng_seed(uint64_t s[4], uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) s[i] = splitmix64(&x);
}

static uint64_t random_seed(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32);
    uint64_t v = splitmix64(&x);
    return v == QR_SAMPLER_SEED_RANDOM ? 0 : v;
}

/* ---- parameters --------------------------------------------------------------------------- */

void qr_sampler_params_default(qr_sampler_params *p) {
    memset(p, 0, sizeof *p);
    p->temperature = 0.8f;
    p->top_k = 40;
    p->top_p = 0.95f;
    p->min_p = 0.05f;
    p->repeat_penalty = 1.0f;
    p->frequency_penalty = 0.0f;
    p->presence_penalty = 0.0f;
    p->penalty_last_n = 64;
    p->seed = QR_SAMPLER_SEED_RANDOM;
}

void qr_sampler_params_greedy(qr_sampler_params *p) {
    qr_sampler_params_default(p);
    p->temperature = 0.0f;
    p->top_k = 0;
    p->top_p = 1.0f;
    p->min_p = 0.0f;
    p->seed = 0;
}

qr_status qr_sampler_params_validate(const qr_sampler_params *p, int32_t n_vocab, char *err, size_t err_len) {
    if (!p) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "sampler: params is NULL");
    if (!(p->temperature >= 0.0f) || isinf(p->temperature))
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "sampler: temperature must be a finite number >= 0 (got %g)",
                       (double)p->temperature);
    if (p->top_k < 0)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "sampler: top_k must be >= 0 (0 = off), got %d", p->top_k);
    if (!(p->top_p >= 0.0f && p->top_p <= 1.0f))
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "sampler: top_p must be in [0, 1] (1 = off), got %g",
                       (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "sampler: min_p must be in [0, 1] (0 = off), got %g",
                       (double)p->min_p);
    if (!(p->repeat_penalty > 0.0f) || isinf(p->repeat_penalty))
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG,
                       "sampler: repeat_penalty must be a finite number > 0 (1 = off), got %g", (double)p->repeat_penalty);
    if (!isfinite(p->frequency_penalty))
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "sampler: frequency_penalty must be finite, got %g",
                       (double)p->frequency_penalty);
    if (!isfinite(p->presence_penalty))
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "sampler: presence_penalty must be finite, got %g",
                       (double)p->presence_penalty);
    if (p->penalty_last_n < 0 || p->penalty_last_n > (1 << 24))
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "sampler: penalty_last_n must be in [0, %d], got %d", 1 << 24,
                       p->penalty_last_n);
    if (p->n_logprobs < 0 || p->n_logprobs > QR_SAMPLER_MAX_LOGPROBS)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "sampler: n_logprobs must be in [0, %d], got %d",
                       QR_SAMPLER_MAX_LOGPROBS, p->n_logprobs);
    if (p->n_logit_bias < 0 || (p->n_logit_bias > 0 && !p->logit_bias))
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "sampler: logit_bias has %d entries but no array",
                       p->n_logit_bias);
    for (int32_t i = 0; i < p->n_logit_bias; i++) {
        const qr_logit_bias *b = &p->logit_bias[i];
        if (b->token < 0 || (n_vocab > 0 && b->token >= n_vocab))
            return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "sampler: logit_bias[%d]: token %d outside [0, %d)", i,
                           b->token, n_vocab);
        if (isnan(b->bias) || (isinf(b->bias) && b->bias > 0))
            return qr_errf(err, err_len, QR_ERR_INVALID_ARG,
                           "sampler: logit_bias[%d] for token %d must be finite or -inf, got %g", i, b->token,
                           (double)b->bias);
    }
    return QR_OK;
}

/* ---- lifetime ----------------------------------------------------------------------------- */

qr_status qr_sampler_create(const qr_sampler_params *p, int32_t n_vocab, qr_sampler **out, char *err, size_t err_len) {
    *out = NULL;
    if (n_vocab <= 0) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "sampler: n_vocab must be > 0, got %d", n_vocab);
    qr_status st = qr_sampler_params_validate(p, n_vocab, err, err_len);
    if (st != QR_OK) return st;
    qr_sampler *s = calloc(1, sizeof *s);
    if (!s) goto nomem;
    s->p = *p;
    s->n_vocab = n_vocab;
    if (p->n_logit_bias > 0) {
        s->bias = malloc(sizeof *s->bias * (size_t)p->n_logit_bias);
        if (!s->bias) goto nomem;
        memcpy(s->bias, p->logit_bias, sizeof *s->bias * (size_t)p->n_logit_bias);
    }
    s->p.logit_bias = s->bias;
    if (p->penalty_last_n > 0) {
        s->hist = malloc(sizeof *s->hist * (size_t)p->penalty_last_n);
        if (!s->hist) goto nomem;
    }
    s->counts = calloc((size_t)n_vocab, sizeof *s->counts);
    s->work = malloc(sizeof *s->work * (size_t)n_vocab);
    s->cands = malloc(sizeof *s->cands * (size_t)n_vocab);
    s->tmp = malloc(sizeof *s->tmp * (size_t)n_vocab);
    if (!s->counts || !s->work || !s->cands || !s->tmp) goto nomem;
    s->seed = p->seed == QR_SAMPLER_SEED_RANDOM ? random_seed() : p->seed;
    rng_seed(s->rng, s->seed);
    *out = s;
    return QR_OK;
nomem:
    qr_sampler_free(s);
    return qr_errf(err, err_len, QR_ERR_NOMEM, "sampler: out of memory (n_vocab %d)", n_vocab);
}

void qr_sampler_free(qr_sampler *s) {
    if (!s) return;
    free(s->bias);
    free(s->hist);
    free(s->counts);
    free(s->work);
    free(s->cands);
    free(s->tmp);
    qr_grammar_matcher_free(s->grammar);
    free(s);
}

void qr_sampler_set_grammar(qr_sampler *s, qr_grammar_matcher *m) {
    if (s->grammar != m) qr_grammar_matcher_free(s->grammar);
    s->grammar = m;
}

qr_grammar_matcher *qr_sampler_grammar(qr_sampler *s) { return s->grammar; }

uint64_t qr_sampler_seed(const qr_sampler *s) { return s->seed; }

void qr_sampler_reset(qr_sampler *s) {
    for (int32_t i = 0; i < s->hist_len; i++) s->counts[s->hist[i]] = 0;
    s->hist_len = 0;
    s->hist_pos = 0;
    rng_seed(s->rng, s->seed);
    if (s->grammar) qr_grammar_matcher_reset(s->grammar);
}

qr_status qr_sampler_accept(qr_sampler *s, int32_t token) {
    if (token < 0 || token >= s->n_vocab) return QR_ERR_INVALID_ARG;
    int32_t cap = s->p.penalty_last_n;
    if (cap == 0) return QR_OK;
    if (s->hist_len == cap) s->counts[s->hist[s->hist_pos]]--;
    else s->hist_len++;
    s->hist[s->hist_pos] = token;
    s->counts[token]++;
    s->hist_pos = (s->hist_pos + 1) % cap;
    return QR_OK;
}

/* ---- chain links -------------------------------------------------------------------------- */

void qr_sampler_apply_penalties(qr_sampler *s, float *logits) {
    for (int32_t i = 0; i < s->p.n_logit_bias; i++) logits[s->bias[i].token] += s->bias[i].bias;
    const qr_sampler_params *p = &s->p;
    if (s->hist_len == 0 || (p->repeat_penalty == 1.0f && p->frequency_penalty == 0.0f && p->presence_penalty == 0.0f))
        return;
    /* Each distinct token once: mark visited tokens by negating their count, then restore. */
    for (int32_t i = 0; i < s->hist_len; i++) {
        int32_t t = s->hist[i];
        int32_t c = s->counts[t];
        if (c <= 0) continue;
        float l = logits[t];
        if (l <= 0.0f) l *= p->repeat_penalty;
        else l /= p->repeat_penalty;
        l -= (float)c * p->frequency_penalty + p->presence_penalty;
        logits[t] = l;
        s->counts[t] = -c;
    }
    for (int32_t i = 0; i < s->hist_len; i++) {
        int32_t t = s->hist[i];
        if (s->counts[t] < 0) s->counts[t] = -s->counts[t];
    }
}

/* The first logit that is NaN or +inf, or -1: a pass the compiler vectorizes (integer tests of the bits: an all-ones
 * exponent is inf or NaN, and of those only -inf, 0xff800000, is allowed), then the index when one is found. */
static int32_t first_bad_logit(const float *logits, int32_t n) {
    uint32_t bad = 0;
    for (int32_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &logits[i], sizeof b);
        bad |= (uint32_t)((b & 0x7f800000u) == 0x7f800000u) & (uint32_t)(b != 0xff800000u);
    }
    if (!bad) return -1;
    for (int32_t i = 0; i < n; i++)
        if (isnan(logits[i]) || (isinf(logits[i]) && logits[i] > 0)) return i;
    return -1;
}

/* The argmax of x[0..n) (ties: the lowest index), -1 when every value is -inf: the maximum first (a reduction the
 * compiler vectorizes on finite / -inf values), then its first index. */
static int32_t argmax_f(const float *x, int32_t n) {
    float best = -INFINITY;
    for (int32_t i = 0; i < n; i++) best = x[i] > best ? x[i] : best;
    if (best == -INFINITY) return -1;
    for (int32_t i = 0; i < n; i++)
        if (x[i] == best) return i;
    return -1;
}

/* Total order: higher logit first, ties to the lower id. */
static inline bool cand_before(cand a, cand b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); }

static int cand_cmp(const void *pa, const void *pb) {
    cand a = *(const cand *)pa, b = *(const cand *)pb;
    return cand_before(a, b) ? -1 : cand_before(b, a) ? 1 : 0;
}

static inline void cand_swap(cand *a, cand *b) {
    cand t = *a;
    *a = *b;
    *b = t;
}

/* Rearranges c[0..n) so that c[0..m) holds the m first elements of the total order, sorted; the
 * rest follow in any order. Quickselect with median-of-three, falling back to a full sort when the
 * recursion degenerates. */
static void select_top_inplace(cand *c, size_t n, size_t m) {
    if (m >= n) {
        qsort(c, n, sizeof *c, cand_cmp);
        return;
    }
    size_t lo = 0, hi = n; /* the m-th boundary lies in [lo, hi) */
    int budget = 64;
    while (hi - lo > 16) {
        if (--budget == 0) {
            qsort(c + lo, hi - lo, sizeof *c, cand_cmp);
            lo = hi;
            break;
        }
        size_t mid = lo + (hi - lo) / 2;
        if (cand_before(c[hi - 1], c[lo])) cand_swap(&c[hi - 1], &c[lo]);
        if (cand_before(c[mid], c[lo])) cand_swap(&c[mid], &c[lo]);
        if (cand_before(c[hi - 1], c[mid])) cand_swap(&c[hi - 1], &c[mid]);
        cand pivot = c[mid];
        cand_swap(&c[mid], &c[hi - 1]);
        size_t store = lo;
        for (size_t i = lo; i < hi - 1; i++)
            if (cand_before(c[i], pivot)) cand_swap(&c[i], &c[store++]);
        cand_swap(&c[store], &c[hi - 1]);
        /* c[lo..store) before pivot, c[store] = pivot, c[store+1..hi) after */
        if (store + 1 == m || store == m) {
            lo = hi = store;
            break;
        }
        if (store > m) hi = store;
        else lo = store + 1;
    }
    if (hi > lo) qsort(c + lo, hi - lo, sizeof *c, cand_cmp);
    qsort(c, m, sizeof *c, cand_cmp);
}

/* A bounded heap of candidates under cand_before, heap[0] the one that comes last in the order: heap_add puts x in
 * (size < cap: grows; else x replaces heap[0] when it comes before it, or is dropped). */
static void heap_add(cand *heap, size_t *size, size_t cap, cand x) {
    size_t j;
    if (*size < cap) {
        j = (*size)++;
        while (j > 0) { /* sift up */
            const size_t parent = (j - 1) / 2;
            if (!cand_before(heap[parent], x)) break;
            heap[j] = heap[parent];
            j = parent;
        }
    } else {
        if (!cand_before(x, heap[0])) return;
        j = 0;
        for (;;) { /* sift down */
            const size_t l = 2 * j + 1, r = l + 1;
            if (l >= *size) break;
            const size_t worst = r < *size && cand_before(heap[l], heap[r]) ? r : l;
            if (!cand_before(x, heap[worst])) break;
            heap[j] = heap[worst];
            j = worst;
        }
    }
    heap[j] = x;
}

/* Writes the first m (< n) elements of c[0..n) in order into c[0..m), using heap[0..m) as a heap.
 * The rest of c is left undefined. */
static void select_top_heap(cand *c, size_t n, size_t m, cand *heap) {
    size_t size = 0;
    for (size_t i = 0; i < n; i++) heap_add(heap, &size, m, c[i]);
    memcpy(c, heap, size * sizeof *c);
    qsort(c, size, sizeof *c, cand_cmp);
}

/* select_top_heap straight from a row of logits: the first m (in order) of the finite entries of x[0..n) into
 * c[0..m), sorted, read in one pass (an entry that cannot enter the full heap costs one compare: ids only grow, so a
 * tie never displaces the heap's last). Returns the number of finite entries when that is more than m (c then holds
 * m), else 0 and c is unspecified (the caller keeps them all, in id order). */
static size_t select_top_heap_row(const float *x, int32_t n, size_t m, cand *heap, cand *c) {
    size_t size = 0, finite = 0;
    for (int32_t i = 0; i < n; i++) {
        const float v = x[i];
        if (!(v > -INFINITY)) continue;
        finite++;
        if (size == m && !(v > heap[0].logit)) continue;
        heap_add(heap, &size, m, (cand){i, v});
    }
    if (finite <= m) return 0;
    memcpy(c, heap, m * sizeof *c);
    qsort(c, m, sizeof *c, cand_cmp);
    return finite;
}

/* Keeps the smallest prefix (in order) whose probability mass reaches top_p. c[0..n) unsorted
 * unless *sorted. Returns the new n; c[0..new n) is sorted afterwards. */
static size_t apply_top_p(cand *c, size_t n, bool sorted, float top_p) {
    float maxl = c[0].logit;
    for (size_t i = 1; i < n; i++)
        if (c[i].logit > maxl) maxl = c[i].logit;
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) sum += exp((double)(c[i].logit - maxl));
    size_t m = sorted ? n : (n < 64 ? n : 64);
    size_t done = 0; /* c[0..done) sorted and accumulated */
    double cum = 0.0;
    for (;;) {
        if (!sorted) select_top_inplace(c + done, n - done, m - done);
        for (size_t i = done; i < m; i++) {
            cum += exp((double)(c[i].logit - maxl)) / sum;
            if (cum >= (double)top_p) return i + 1;
        }
        if (m == n) return n;
        done = m;
        m = m * 8 < n ? m * 8 : n;
    }
}

/* log-softmax of raw logits: fills out->logprob for `token` and the top n alternatives. */
static void compute_logprobs(qr_sampler *s, const float *logits, int32_t token, qr_sample_result *out) {
    int32_t n = s->n_vocab;
    float maxl = -INFINITY;
    for (int32_t i = 0; i < n; i++)
        if (logits[i] > maxl) maxl = logits[i];
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) sum += exp((double)(logits[i] - maxl));
    double lse = (double)maxl + log(sum);
    out->logprob = (float)((double)logits[token] - lse);
    int32_t k = s->p.n_logprobs < n ? s->p.n_logprobs : n;
    out->n_top = k;
    if (k == 0) return;
    for (int32_t i = 0; i < n; i++) s->cands[i] = (cand){i, logits[i]};
    select_top_heap(s->cands, (size_t)n, (size_t)k, s->tmp);
    for (int32_t i = 0; i < k; i++)
        out->top[i] = (qr_token_logprob){s->cands[i].id, (float)((double)s->cands[i].logit - lse)};
}

/* ---- the chain ---------------------------------------------------------------------------- */

/* No logit bias and no penalty in effect: the chain sees the logits as they are. */
static bool plain_logits(const qr_sampler *s) {
    const qr_sampler_params *p = &s->p;
    return p->n_logit_bias == 0 && (s->hist_len == 0 || (p->repeat_penalty == 1.0f && p->frequency_penalty == 0.0f &&
                                                          p->presence_penalty == 0.0f));
}

static size_t truncate_rest(qr_sampler *s, size_t n, bool sorted);

/* The truncation links of a sampling chain (top-k -> top-p -> min-p -> temperature) on s->work (not
 * modified): s->cands[0..n) get the surviving tokens with their logits divided by the temperature.
 * Returns n (0 when every logit is -inf). */
static size_t truncate_cands(qr_sampler *s) {
    const qr_sampler_params *p = &s->p;
    const int32_t nv = s->n_vocab;
    size_t n = 0;
    cand *c = s->cands;
    bool sorted = false;
    if (p->top_k > 0 && p->top_k <= HEAP_SELECT_MAX &&
        select_top_heap_row(s->work, nv, (size_t)p->top_k, s->tmp, c) > 0) { /* one pass, no full candidate list */
        n = (size_t)p->top_k;
        sorted = true;
    } else {
        for (int32_t i = 0; i < nv; i++)
            if (s->work[i] > -INFINITY) s->cands[n++] = (cand){i, s->work[i]};
    }
    if (n == 0) return 0;
    if (!sorted && p->top_k > 0 && (size_t)p->top_k < n) {
        if (p->top_k <= HEAP_SELECT_MAX) select_top_heap(c, n, (size_t)p->top_k, s->tmp);
        else select_top_inplace(c, n, (size_t)p->top_k);
        n = (size_t)p->top_k;
        sorted = true;
    }
    return truncate_rest(s, n, sorted);
}

/* The links after top-k (top-p -> min-p -> temperature) on s->cands[0..n) (sorted: in the total order). Returns
 * the new n. */
static size_t truncate_rest(qr_sampler *s, size_t n, bool sorted) {
    const qr_sampler_params *p = &s->p;
    cand *c = s->cands;
    if (p->top_p < 1.0f && n > 1) {
        n = apply_top_p(c, n, sorted, p->top_p);
        sorted = true;
    }
    if (p->min_p > 0.0f && n > 1) {
        float maxl = c[0].logit;
        for (size_t i = 1; i < n; i++)
            if (c[i].logit > maxl) maxl = c[i].logit;
        float thresh = maxl + logf(p->min_p);
        size_t kept = 0;
        for (size_t i = 0; i < n; i++)
            if (c[i].logit >= thresh) c[kept++] = c[i];
        n = kept;
    }
    for (size_t i = 0; i < n; i++) c[i].logit /= p->temperature;
    return n;
}

/* The greedy choice on s->work: the argmax (ties: the lowest id), -1 when every logit is -inf. */
static int32_t argmax_work(const qr_sampler *s) { return argmax_f(s->work, s->n_vocab); }

static int32_t draw(qr_sampler *s, size_t n);

/* Runs the chain after penalties (greedy, or top-k -> top-p -> min-p -> temperature -> draw) on
 * s->work (not modified) and writes the token. QR_ERR_INVALID_ARG when every logit is -inf. */
static qr_status pick(qr_sampler *s, int32_t *out_token) {
    int32_t token = -1;
    if (s->p.temperature <= 0.0f) {
        token = argmax_work(s);
        if (token < 0) return QR_ERR_INVALID_ARG;
    } else {
        const size_t n = truncate_cands(s);
        if (n == 0) return QR_ERR_INVALID_ARG;
        token = draw(s, n);
    }
    *out_token = token;
    return QR_OK;
}

/* A draw from the softmax of s->cands[0..n) (n >= 1). */
static int32_t draw(qr_sampler *s, size_t n) {
    const cand *c = s->cands;
    float maxl = -INFINITY;
    for (size_t i = 0; i < n; i++)
        if (c[i].logit > maxl) maxl = c[i].logit;
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) sum += exp((double)(c[i].logit - maxl));
    const double u = rng_uniform(s->rng) * sum;
    double cum = 0.0;
    for (size_t i = 0; i < n; i++) {
        cum += exp((double)(c[i].logit - maxl));
        if (u < cum) return c[i].id;
    }
    return c[n - 1].id;
}

int32_t qr_sampler_topk_need(const qr_sampler *s) {
    const qr_sampler_params *p = &s->p;
    const bool plain = plain_logits(s);
    if (!plain || s->grammar || p->logprobs) return 0;
    if (p->temperature <= 0.0f) return 1;
    return p->top_k > 0 && p->top_k < QR_SAMPLER_TOPK_MAX ? p->top_k + 1 : 0;
}

bool qr_sampler_sample_topk(qr_sampler *s, const float *vals, const int32_t *ids, int32_t k, int32_t n_finite,
                            qr_sample_result *out) {
    const int32_t need = qr_sampler_topk_need(s);
    if (need == 0 || k < need || n_finite < need) return false; /* (n_finite -1: a NaN or +inf: the row's error) */
    memset(out, 0, sizeof *out);
    int32_t token;
    if (s->p.temperature <= 0.0f) {
        token = ids[0]; /* the argmax, ties to the lowest id, as argmax_f */
    } else {
        /* more than top_k finite logits: the chain's top-k is candidates [0, top_k) in this order */
        const size_t n0 = (size_t)s->p.top_k;
        for (size_t i = 0; i < n0; i++) s->cands[i] = (cand){ids[i], vals[i]};
        const size_t n = truncate_rest(s, n0, true);
        if (n == 0) return false;
        token = draw(s, n);
    }
    out->token = token;
    qr_sampler_accept(s, token);
    return true;
}

qr_status qr_sampler_dist(qr_sampler *s, const float *logits, qr_token_prob *out, int32_t *n_out, char *err,
                          size_t err_len) {
    const int32_t nv = s->n_vocab;
    *n_out = 0;
    const int32_t bad = first_bad_logit(logits, nv);
    if (bad >= 0)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "sampler: logit for token %d is %g", bad, (double)logits[bad]);
    memcpy(s->work, logits, sizeof *s->work * (size_t)nv);
    qr_sampler_apply_penalties(s, s->work);
    if (s->p.temperature <= 0.0f) {
        const int32_t token = argmax_work(s);
        if (token < 0) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "sampler: every token's logit is -inf");
        out[0] = (qr_token_prob){token, 1.0f};
        *n_out = 1;
        return QR_OK;
    }
    const size_t n = truncate_cands(s);
    if (n == 0) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "sampler: every token's logit is -inf");
    float maxl = -INFINITY;
    for (size_t i = 0; i < n; i++)
        if (s->cands[i].logit > maxl) maxl = s->cands[i].logit;
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) sum += exp((double)(s->cands[i].logit - maxl));
    for (size_t i = 0; i < n; i++)
        out[i] = (qr_token_prob){s->cands[i].id, (float)(exp((double)(s->cands[i].logit - maxl)) / sum)};
    *n_out = (int32_t)n;
    return QR_OK;
}

double qr_sampler_uniform(qr_sampler *s) { return rng_uniform(s->rng); }

const qr_sampler_params *qr_sampler_get_params(const qr_sampler *s) { return &s->p; }

int32_t qr_sampler_n_vocab(const qr_sampler *s) { return s->n_vocab; }

qr_status qr_sampler_sample(qr_sampler *s, const float *logits, qr_sample_result *out, char *err, size_t err_len) {
    const qr_sampler_params *p = &s->p;
    int32_t nv = s->n_vocab;
    memset(out, 0, sizeof *out);
    const int32_t bad = first_bad_logit(logits, nv);
    if (bad >= 0)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "sampler: logit for token %d is %g", bad, (double)logits[bad]);
    int32_t token = -1;
    qr_status st;
    const bool plain = plain_logits(s);
    if (p->temperature <= 0.0f && plain && !s->grammar) { /* greedy on the logits as they are: no copy */
        token = argmax_f(logits, nv);
        st = token < 0 ? QR_ERR_INVALID_ARG : QR_OK;
    } else {
        memcpy(s->work, logits, sizeof *s->work * (size_t)nv);
        qr_sampler_apply_penalties(s, s->work);
        st = pick(s, &token);
    }
    if (s->grammar && (st != QR_OK || !qr_grammar_matcher_allows(s->grammar, token))) {
        /* the unconstrained pick is not allowed: mask and pick again */
        const uint64_t *mask = qr_grammar_matcher_mask(s->grammar);
        if (!mask) return qr_errf(err, err_len, QR_ERR_NOMEM, "grammar: out of memory");
        for (int32_t i = 0; i < nv; i++)
            if (!((mask[i >> 6] >> (i & 63)) & 1)) s->work[i] = -INFINITY;
        st = pick(s, &token);
        if (st != QR_OK)
            return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "grammar: no token that the grammar allows has a finite logit");
    }
    if (st != QR_OK) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "sampler: every token's logit is -inf");
    if (s->grammar && (st = qr_grammar_matcher_accept(s->grammar, token, err, err_len)) != QR_OK) return st;
    out->token = token;
    if (p->logprobs) compute_logprobs(s, logits, token, out);
    qr_sampler_accept(s, token);
    return QR_OK;
}

qr_status qr_sampler_force(qr_sampler *s, const float *logits, int32_t token, qr_sample_result *out, char *err,
                           size_t err_len) {
    memset(out, 0, sizeof *out);
    if (token < 0 || token >= s->n_vocab)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "sampler: forced token %d is outside the vocabulary", token);
    if (s->grammar) {
        if (!qr_grammar_matcher_allows(s->grammar, token))
            return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "grammar: the forced token %d is not allowed", token);
        const qr_status st = qr_grammar_matcher_accept(s->grammar, token, err, err_len);
        if (st != QR_OK) return st;
    }
    out->token = token;
    if (s->p.logprobs) compute_logprobs(s, logits, token, out);
    qr_sampler_accept(s, token);
    return QR_OK;
}
