/* tp.c — tensor parallelism: a loaded model split into tp_world shards, Megatron-style. Rank r holds
 *   - its 1/W of the query heads and the K/V heads they read (q/k/v rows, their biases, attention sinks; when the
 *     K/V heads do not divide by W but W divides by them, each rank holds the one K/V head its query heads share),
 *     and the matching columns of attn_output (row-parallel: a partial sum, all-reduced);
 *   - its 1/W of each FFN's hidden columns: gate/up rows, down columns (all-reduced); experts likewise (every
 *     expert's n_ff_exp split, the router replicated) and the shared expert;
 *   - its 1/W of the output vocabulary (rows of the output matrix; the context gathers the logits);
 *   - everything else whole: embeddings, norms, Mamba2 mixers (they run whole on every rank).
 * Biases added after a row-parallel matmul (attn_output, ffn_down, the experts' down) stay on rank 0 only, so the
 * all-reduce adds them once. The forward passes are unchanged: they see a smaller model, and call
 * qr_tp_all_reduce after each row-parallel matmul. CPU ranks (tests, CI) sum through shared memory; CUDA ranks
 * through NCCL (the backend's all_reduce). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "util/util.h"

/* ---- the host all-reduce of CPU ranks ---- */

struct qr_tp_comm {
    int32_t world;
    pthread_barrier_t bar;
    float *buf[QR_TP_MAX]; /* each rank's buffer of the all-reduce in progress */
    qr_tp_net *net;        /* ranks in several processes: the sums go over their connections (not owned) */
};

static qr_tp_comm *comm_create(int32_t world, qr_tp_net *net) {
    qr_tp_comm *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->world = world;
    c->net = net;
    if (!net && pthread_barrier_init(&c->bar, NULL, (unsigned)world) != 0) {
        free(c);
        return NULL;
    }
    return c;
}

static void comm_free(qr_tp_comm *c) {
    if (!c) return;
    if (!c->net) pthread_barrier_destroy(&c->bar);
    free(c);
}

void qr_tp_all_reduce(qr_fwd *f, float *buf, int64_t n) {
    if (f->tp_world <= 1 || n <= 0) return;
    qr_backend *be = f->be;
    if (be->ops->all_reduce) {
        be->ops->all_reduce(be, buf, n);
        return;
    }
    qr_tp_comm *c = f->tp;
    if (!c) {
        be->ops->raise(be, QR_ERR_INTERNAL, "tensor parallelism: no all-reduce for this backend");
        return;
    }
    if (c->net) {
        char msg[256];
        if (!qr_tp_net_all_reduce(c->net, buf, n, msg, sizeof msg)) be->ops->raise(be, QR_ERR_IO, msg);
        return;
    }
    const int32_t W = c->world, r = f->tp_rank;
    c->buf[r] = buf;
    pthread_barrier_wait(&c->bar);
    /* rank r owns elements [i0, i1): it reads them from every buffer and writes the sum to every buffer; no
     * other rank touches them, and each element is summed in rank order (the same float on every rank) */
    const int64_t i0 = n * r / W, i1 = n * (r + 1) / W;
    for (int64_t i = i0; i < i1; i++) {
        float s = c->buf[0][i];
        for (int32_t k = 1; k < W; k++) s += c->buf[k][i];
        for (int32_t k = 0; k < W; k++) c->buf[k][i] = s;
    }
    pthread_barrier_wait(&c->bar);
}

/* ---- splitting the weights ---- */

typedef struct splitter {
    const qr_model *m; /* the full model */
    qr_model *s;       /* the shard being made */
    int32_t world, rank;
    char *err;
    size_t err_len;
} splitter;

static void *own(splitter *S, size_t bytes) {
    qr_model *s = S->s;
    if (s->n_tp_owned == s->cap_tp_owned) {
        const int32_t cap = s->cap_tp_owned ? 2 * s->cap_tp_owned : 64;
        void **nb = realloc(s->tp_owned, (size_t)cap * sizeof *nb);
        if (!nb) return NULL;
        s->tp_owned = nb;
        s->cap_tp_owned = cap;
    }
    void *p = malloc(bytes ? bytes : 1);
    if (p) s->tp_owned[s->n_tp_owned++] = p;
    return p;
}

/* Rows [r0, r0 + n) of every matrix of w (ne[1] rows each, ne[2] matrices): a view of one matrix, a copy of
 * several. */
static qr_status slice_rows(splitter *S, qr_weight *w, int64_t r0, int64_t n) {
    if (!w->host) return QR_OK;
    const int64_t rows = w->ne[1], mats = w->ne[2] * w->ne[3];
    if (mats == 1) {
        w->host = (const char *)w->host + (size_t)r0 * w->row_bytes;
        w->ne[1] = n;
        return QR_OK;
    }
    char *dst = own(S, (size_t)n * w->row_bytes * (size_t)mats);
    if (!dst) return qr_errf(S->err, S->err_len, QR_ERR_NOMEM, "tensor parallelism: out of memory splitting %s", w->name);
    for (int64_t e = 0; e < mats; e++)
        memcpy(dst + (size_t)(e * n) * w->row_bytes, (const char *)w->host + (size_t)(e * rows + r0) * w->row_bytes,
               (size_t)n * w->row_bytes);
    w->host = dst;
    w->host_file = false;
    w->ne[1] = n;
    return QR_OK;
}

/* Columns [c0, c0 + n) of every row of w (a copy): whole quant blocks only. */
static qr_status slice_cols(splitter *S, qr_weight *w, int64_t c0, int64_t n) {
    if (!w->host) return QR_OK;
    const qr_type_info *ti = &qr_type_table[w->type];
    if (c0 % ti->block_size || n % ti->block_size)
        return qr_errf(S->err, S->err_len, QR_ERR_UNSUPPORTED,
                       "tensor parallelism over %d ranks: %s's %lld columns do not split into slices of whole %s blocks "
                       "(%u values each)", S->world, w->name, (long long)w->ne[0], ti->name, ti->block_size);
    const int64_t rows = w->ne[1] * w->ne[2] * w->ne[3];
    const size_t off = qr_type_row_size(w->type, c0), rb = qr_type_row_size(w->type, n);
    char *dst = own(S, rb * (size_t)rows);
    if (!dst) return qr_errf(S->err, S->err_len, QR_ERR_NOMEM, "tensor parallelism: out of memory splitting %s", w->name);
    for (int64_t r = 0; r < rows; r++) memcpy(dst + (size_t)r * rb, (const char *)w->host + (size_t)r * w->row_bytes + off, rb);
    w->host = dst;
    w->host_file = false;
    w->ne[0] = n;
    w->row_bytes = rb;
    return QR_OK;
}

/* Rank S->rank's part of `total` rows or columns: [*a, *a + *n). */
static qr_status part(splitter *S, const qr_weight *w, int64_t total, const char *what, int64_t *a, int64_t *n) {
    if (total % S->world)
        return qr_errf(S->err, S->err_len, QR_ERR_UNSUPPORTED,
                       "tensor parallelism over %d ranks: %s has %lld %s, which do not split evenly", S->world,
                       w->name, (long long)total, what);
    *n = total / S->world;
    *a = *n * S->rank;
    return QR_OK;
}

/* A matrix whose rows (per matrix) split evenly (column-parallel), with the bias vector(s) of those rows. */
static qr_status split_out(splitter *S, qr_weight *w, qr_weight *b) {
    if (!w->host) return QR_OK;
    int64_t a = 0, n = 0;
    qr_status st = part(S, w, w->ne[1], "rows", &a, &n);
    if (st == QR_OK) st = slice_rows(S, w, a, n);
    if (st == QR_OK && b && b->host) st = slice_cols(S, b, a, n);
    return st;
}

/* A matrix whose columns split evenly (row-parallel); its bias, added after the sum, stays on rank 0. */
static qr_status split_in(splitter *S, qr_weight *w, qr_weight *b) {
    if (!w->host) return QR_OK;
    int64_t a = 0, n = 0;
    qr_status st = part(S, w, w->ne[0], "columns", &a, &n);
    if (st == QR_OK) st = slice_cols(S, w, a, n);
    if (st == QR_OK && b && S->rank > 0) b->host = NULL;
    return st;
}

/* The query heads [q0, q0 + nq) and K/V heads [k0, k0 + nk) of rank S->rank. */
typedef struct head_split {
    int32_t q0, nq, k0, nk;
} head_split;

static qr_status split_heads(splitter *S, head_split *h) {
    const qr_hparams *hp = &S->m->hp;
    const int32_t W = S->world, Hq = hp->n_head, Hk = hp->n_head_kv;
    if (Hq % W)
        return qr_errf(S->err, S->err_len, QR_ERR_UNSUPPORTED,
                       "tensor parallelism over %d ranks: %d attention heads do not split evenly", W, Hq);
    h->nq = Hq / W;
    h->q0 = h->nq * S->rank;
    if (Hk % W == 0) {
        h->nk = Hk / W;
        h->k0 = h->nk * S->rank;
    } else if (W % Hk == 0) { /* each rank keeps the one K/V head its query heads share (a copy per rank) */
        h->nk = 1;
        h->k0 = h->q0 / (Hq / Hk);
    } else {
        return qr_errf(S->err, S->err_len, QR_ERR_UNSUPPORTED,
                       "tensor parallelism over %d ranks: %d K/V heads neither split evenly nor divide the ranks", W, Hk);
    }
    return QR_OK;
}

static qr_status split_attention(splitter *S, qr_layer *l, const head_split *h) {
    const qr_hparams *hp = &S->m->hp;
    const int64_t dk = hp->head_dim_k, dv = hp->head_dim_v;
    if (!l->attn_q.host) return QR_OK;
    if ((l->attn_q_norm.host && l->attn_q_norm.ne[0] != dk) || (l->attn_k_norm.host && l->attn_k_norm.ne[0] != dk))
        return qr_errf(S->err, S->err_len, QR_ERR_UNSUPPORTED,
                       "tensor parallelism: %s normalises q / k over all heads at once (not split yet)",
                       hp->arch_name);
    qr_status st = slice_rows(S, &l->attn_q, h->q0 * dk, h->nq * dk);
    if (st == QR_OK) st = slice_rows(S, &l->attn_k, h->k0 * dk, h->nk * dk);
    if (st == QR_OK) st = slice_rows(S, &l->attn_v, h->k0 * dv, h->nk * dv);
    if (st == QR_OK && l->attn_q_b.host) st = slice_cols(S, &l->attn_q_b, h->q0 * dk, h->nq * dk);
    if (st == QR_OK && l->attn_k_b.host) st = slice_cols(S, &l->attn_k_b, h->k0 * dk, h->nk * dk);
    if (st == QR_OK && l->attn_v_b.host) st = slice_cols(S, &l->attn_v_b, h->k0 * dv, h->nk * dv);
    if (st == QR_OK && l->attn_sinks.host) st = slice_cols(S, &l->attn_sinks, h->q0, h->nq);
    if (st == QR_OK) st = slice_cols(S, &l->attn_out, h->q0 * dv, h->nq * dv);
    if (st == QR_OK && S->rank > 0) l->attn_out_b.host = NULL;
    return st;
}

static qr_status split_layer(splitter *S, qr_layer *l, const head_split *h) {
    qr_status st = split_attention(S, l, h);
    /* the dense FFN (down's columns = gate / up rows) */
    if (st == QR_OK) st = split_out(S, &l->ffn_gate, NULL);
    if (st == QR_OK) st = split_out(S, &l->ffn_up, &l->ffn_up_b);
    if (st == QR_OK) st = split_in(S, &l->ffn_down, &l->ffn_down_b);
    /* experts: each expert's hidden columns; the router whole */
    if (st == QR_OK) st = split_out(S, &l->gate_exps, &l->gate_exps_b);
    if (st == QR_OK) st = split_out(S, &l->up_exps, &l->up_exps_b);
    if (st == QR_OK) st = split_in(S, &l->down_exps, &l->down_exps_b);
    if (st == QR_OK) st = split_out(S, &l->gate_shexp, NULL);
    if (st == QR_OK) st = split_out(S, &l->up_shexp, NULL);
    if (st == QR_OK) st = split_in(S, &l->down_shexp, NULL);
    if (st == QR_OK && l->n_ff % S->world)
        return qr_errf(S->err, S->err_len, QR_ERR_UNSUPPORTED,
                       "tensor parallelism over %d ranks: a feed-forward size of %d does not split evenly", S->world,
                       l->n_ff);
    l->n_ff /= S->world;
    return st;
}

/* The shard's own copy of the weight list: the full model's pointers moved into the shard (a layer field, for the
 * shard's layers [l0, l0 + shard's n_layer), or a model field; the embeddings only where the pipeline starts, the
 * output head only where it ends), plus the output matrix of tied embeddings as a weight of its own. */
static qr_status shard_weights(splitter *S, int32_t l0) {
    const qr_model *m = S->m;
    qr_model *s = S->s;
    s->weights = calloc((size_t)m->n_weights + 1, sizeof *s->weights);
    if (!s->weights) return qr_errf(S->err, S->err_len, QR_ERR_NOMEM, "out of memory");
    s->n_weights = 0;
    s->cap_weights = m->n_weights + 1;
    const char *lb = (const char *)(m->layers + l0), *le = (const char *)(m->layers + l0 + s->hp.n_layer);
    const char *all_lb = (const char *)m->layers, *all_le = (const char *)(m->layers + m->hp.n_layer);
    for (int32_t i = 0; i < m->n_weights; i++) {
        const char *p = (const char *)m->weights[i];
        if (p >= all_lb && p < all_le && (p < lb || p >= le)) continue; /* another rank's layer */
        qr_weight *w = p >= lb && p < le ? (qr_weight *)((char *)s->layers + (p - lb))
                                         : (qr_weight *)((char *)s + (p - (const char *)m));
        if ((w == &s->tok_embd && !qr_pipe_first(s)) ||
            ((w == &s->output || w == &s->output_norm || w == &s->output_norm_b) && !qr_pipe_last(s)))
            continue;
        if (w->host) s->weights[s->n_weights++] = w; /* a bias left to rank 0 is no longer bound here */
    }
    /* tied embeddings: the output (slice) is a weight of its own (a backend's prepared copy of tok_embd has every row) */
    if (m->output.host == m->tok_embd.host && s->output.host && qr_pipe_last(s)) s->weights[s->n_weights++] = &s->output;
    return QR_OK;
}

static void shard_free(qr_model *s) {
    if (!s) return;
    for (int32_t i = 0; s->be && i < s->n_weights; i++)
        if (s->weights[i]->device) s->be->ops->weight_release(s->be, s->weights[i]);
    qr_backend_free(s->be);
    for (int32_t i = 0; i < s->n_tp_owned; i++) free(s->tp_owned[i]);
    free(s->tp_owned);
    free(s->weights);
    free(s->layers);
    free(s);
}

/* A shard's model struct: a copy of m's without what the copy does not own, with its own copy of layers [l0, l1);
 * NULL when out of memory. */
static qr_model *shard_alloc(const qr_model *m, int32_t world, int32_t rank, int32_t l0, int32_t l1) {
    qr_model *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    *s = *m;
    s->be = NULL;
    s->embed_tok = NULL;
    s->tp_shards = NULL;
    s->tp_comm = NULL;
    s->tp_owned = NULL;
    s->n_tp_owned = s->cap_tp_owned = 0;
    s->weights = NULL;
    s->layers = NULL;
    s->tp_is_shard = true;
    s->tp_rank = rank;
    s->tp_world = world;
    s->hp.n_layer = l1 - l0;
    if (!(s->layers = malloc((size_t)(l1 - l0) * sizeof *s->layers))) {
        free(s);
        return NULL;
    }
    memcpy(s->layers, m->layers + l0, (size_t)(l1 - l0) * sizeof *s->layers);
    return s;
}

/* Rank `rank`'s stage of a layer split: layers [l0, l1) whole. */
static qr_status shard_make_layers(const qr_model *m, int32_t world, int32_t rank, int32_t l0, int32_t l1,
                                   qr_model **out, char *err, size_t err_len) {
    *out = NULL;
    qr_model *s = shard_alloc(m, world, rank, l0, l1);
    if (!s) return qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory");
    s->tp_split = QR_SPLIT_LAYER;
    s->pipe_stage = rank;
    s->pipe_more = rank < world - 1;
    splitter S = {.m = m, .s = s, .world = world, .rank = rank, .err = err, .err_len = err_len};
    const qr_status st = shard_weights(&S, l0);
    if (st != QR_OK) {
        shard_free(s);
        return st;
    }
    *out = s;
    return QR_OK;
}

/* Makes rank `rank`'s shard of m (host weights; no backend). */
static qr_status shard_make(const qr_model *m, int32_t world, int32_t rank, qr_model **out, char *err, size_t err_len) {
    *out = NULL;
    qr_model *s = shard_alloc(m, world, rank, 0, m->hp.n_layer);
    if (!s) return qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory");
    splitter S = {.m = m, .s = s, .world = world, .rank = rank, .err = err, .err_len = err_len};
    qr_status st = QR_OK;
    head_split h = {0};
    bool any_attn = false;
    for (int il = 0; il < m->hp.n_layer; il++) any_attn = any_attn || m->layers[il].attn_q.host;
    if (any_attn) st = split_heads(&S, &h);
    for (int il = 0; st == QR_OK && il < m->hp.n_layer; il++) st = split_layer(&S, &s->layers[il], &h);
    /* the output's vocabulary rows: as even as the count allows */
    if (st == QR_OK && !m->arch->encoder) {
        const int64_t V = m->output.ne[1], v0 = V * rank / world, v1 = V * (rank + 1) / world;
        st = slice_rows(&S, &s->output, v0, v1 - v0);
        s->tp_vocab0 = (int32_t)v0;
    }
    if (st == QR_OK) {
        qr_hparams *hp = &s->hp;
        if (any_attn) {
            hp->n_head = h.nq;
            hp->n_head_kv = h.nk;
        }
        hp->n_ff /= world;
        hp->n_ff_exp /= world;
        hp->n_ff_shexp /= world;
        st = shard_weights(&S, 0);
    }
    if (st != QR_OK) {
        shard_free(s);
        return st;
    }
    *out = s;
    return QR_OK;
}

void qr_tp_free(qr_model *m) {
    if (!m->tp_shards) return;
    /* the connections first: a driver closing them lets its workers leave and tear down their NCCL communicators
     * while it tears down its own (each teardown may wait for the peers') */
    qr_tp_net_free(m->tp_net);
    m->tp_net = NULL;
    for (int32_t r = 0; r < m->tp_world; r++) shard_free(m->tp_shards[r]);
    free(m->tp_shards);
    m->tp_shards = NULL;
    comm_free(m->tp_comm);
    m->tp_comm = NULL;
    m->be = NULL; /* rank 0's, freed with its shard */
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
    return h;
}

uint64_t qr_tp_fingerprint(const qr_model *m) {
    uint64_t h = 14695981039346656037ull;
    const qr_hparams *hp = &m->hp;
    const int32_t dims[] = {hp->n_layer, hp->n_embd, hp->n_vocab, hp->n_head, hp->n_head_kv, hp->n_ff, m->n_weights};
    h = fnv(h, hp->arch_name, strlen(hp->arch_name));
    h = fnv(h, dims, sizeof dims);
    for (int32_t i = 0; i < m->n_weights; i++) {
        const qr_weight *w = m->weights[i];
        if (w->name) h = fnv(h, w->name, strlen(w->name));
        h = fnv(h, &w->type, sizeof w->type);
        h = fnv(h, w->ne, sizeof w->ne);
    }
    return h;
}

/* Ranks in several processes: the driver (rank 0) waits for the others at p->tp_addr, a worker joins it; CUDA
 * ranks get the driver's NCCL unique id in `id`. */
static qr_status tp_meet(qr_model *m, const qr_model_params *p, bool cuda, uint8_t *id, char *err, size_t err_len) {
    const uint64_t fp = qr_tp_fingerprint(m);
    if (p->tp_rank > 0) return qr_tp_net_connect(p->tp_addr, p->tp, p->tp_rank, cuda, fp, id, &m->tp_net, err, err_len);
    qr_status st = cuda ? qr_backend_cuda_nccl_id(id, err, err_len) : QR_OK;
    if (st == QR_OK) st = qr_tp_net_listen(p->tp_addr, p->tp, cuda, fp, cuda ? id : NULL, &m->tp_net, err, err_len);
    return st;
}

qr_status qr_tp_build(qr_model *m, const qr_model_params *p, char *err, size_t err_len) {
    const int32_t W = p->tp;
    if (W < 2 || W > QR_TP_MAX)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "tensor parallelism: %d ranks (2..%d allowed)", W, QR_TP_MAX);
    if (m->hp.kv_lora > 0 && p->split_mode != QR_SPLIT_LAYER)
        return qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "tensor parallelism: %s's multi-head latent attention is not "
                       "split across ranks yet (use --split-mode layer, one GPU or the CPU)", m->arch->name);
    if (m->arch->encoder)
        return qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "tensor parallelism: %s is an encoder (embeddings run on one "
                       "rank)", m->hp.arch_name);
    if (m->arch->spec_head)
        return qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "tensor parallelism: %s is a speculative-decoding head, not a "
                       "model to split", m->hp.arch_name);
    /* ranks in several processes: this process builds and runs rank `self` only */
    const bool net = p->tp_addr && p->tp_addr[0];
    const int32_t self = net ? p->tp_rank : 0;
    if (net && p->split_mode != QR_SPLIT_TENSOR)
        return qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "--tp-addr: ranks in several processes split by tensor only "
                       "(--split-mode tensor)");
    if (net && (self < 0 || self >= W))
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "--tp-rank %d: outside 0..%d (--tp %d)", self, W - 1, W);
    if (!net && p->tp_rank != 0)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "--tp-rank %d needs --tp-addr (where the ranks meet)", p->tp_rank);
    m->tp_world = W;
    m->tp_self = self;
    m->tp_shards = calloc((size_t)W, sizeof *m->tp_shards);
    if (!m->tp_shards) return qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory");
    qr_status st = QR_OK;
    const bool layers = p->split_mode == QR_SPLIT_LAYER;
    if (p->split_mode != QR_SPLIT_TENSOR && !layers)
        st = qr_errf(err, err_len, QR_ERR_INVALID_ARG, "unknown split mode %d", (int)p->split_mode);
    /* auto: the GPUs when there are enough of them (one a process with --tp-addr), else CPU ranks */
    const int32_t gpus_needed = net ? p->gpu + 1 : p->gpu + W;
    const bool cuda = p->backend == QR_BACKEND_CUDA ||
                      (p->backend == QR_BACKEND_AUTO && qr_cuda_device_count() >= gpus_needed);
    if (st == QR_OK && cuda && qr_cuda_device_count() < gpus_needed)
        st = net ? qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "tensor parallelism: rank %d on GPU %d: this machine has %d",
                           self, p->gpu, qr_cuda_device_count())
                 : qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "tensor parallelism over %d GPUs from GPU %d: this machine "
                           "has %d", W, p->gpu, qr_cuda_device_count());
    uint8_t nccl_id[QR_TP_NCCL_ID_BYTES] = {0};
    if (st == QR_OK && net) st = tp_meet(m, p, cuda, nccl_id, err, err_len);
    if (st == QR_OK && layers) { /* consecutive layers, as many a rank as its share of tensor_split (all 0: even) */
        double total = 0.0, acc = 0.0;
        for (int32_t r = 0; r < W; r++) total += p->tensor_split[r] > 0.0f ? p->tensor_split[r] : 0.0f;
        int32_t l0 = 0;
        for (int32_t r = 0; r < W && st == QR_OK; r++) {
            acc += total > 0.0 ? (p->tensor_split[r] > 0.0f ? p->tensor_split[r] : 0.0f) : 1.0;
            const int32_t l1 = r == W - 1 ? m->hp.n_layer : (int32_t)(m->hp.n_layer * acc / (total > 0.0 ? total : W) + 0.5);
            if (l1 <= l0)
                st = qr_errf(err, err_len, QR_ERR_INVALID_ARG,
                             "layer split over %d ranks: rank %d gets no layer of %d (--tensor-split)", W, r, m->hp.n_layer);
            else st = shard_make_layers(m, W, r, l0, l1, &m->tp_shards[r], err, err_len);
            l0 = l1;
        }
    }
    for (int32_t r = 0; r < W && st == QR_OK && !layers; r++)
        if (!net || r == self) st = shard_make(m, W, r, &m->tp_shards[r], err, err_len);
    for (int32_t r = 0; r < W && st == QR_OK; r++) {
        qr_model *s = m->tp_shards[r];
        if (!s) continue; /* another process's rank */
        if (cuda) {
            const qr_backend_cuda_params cp = {.gpu = net ? p->gpu : p->gpu + r};
            st = qr_backend_cuda_create(&cp, &s->be, err, err_len);
        } else {
            int32_t nt = p->n_threads > 0 ? p->n_threads : (int32_t)sysconf(_SC_NPROCESSORS_ONLN);
            if (!net) nt = nt / W > 0 ? nt / W : 1; /* the ranks of one process share its cores */
            const qr_backend_cpu_params cp = {.n_threads = nt, .force_scalar = p->force_scalar};
            st = qr_backend_cpu_create(&cp, &s->be, err, err_len);
        }
        if (st == QR_OK && !s->be->ops->read_rows)
            st = qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "tensor parallelism: backend %s cannot read rows", s->be->name);
        for (int32_t i = 0; i < s->n_weights && st == QR_OK; i++)
            st = s->be->ops->weight_prepare(s->be, s->weights[i], err, err_len);
    }
    if (st == QR_OK && cuda && net) st = qr_backend_cuda_tp_join(m->tp_shards[self]->be, W, self, nccl_id, err, err_len);
    if (st == QR_OK && cuda && !layers && !net) {
        qr_backend *bes[QR_TP_MAX];
        for (int32_t r = 0; r < W; r++) bes[r] = m->tp_shards[r]->be;
        st = qr_backend_cuda_tp_init(bes, W, err, err_len);
    }
    if (st == QR_OK && !cuda && !layers && !(m->tp_comm = comm_create(W, m->tp_net)))
        st = qr_errf(err, err_len, QR_ERR_NOMEM, "tensor parallelism: cannot make the host all-reduce");
    if (st != QR_OK) {
        qr_tp_free(m);
        m->tp_world = 1;
        return st;
    }
    m->be = m->tp_shards[self]->be;
    m->tp_split = p->split_mode;
    return QR_OK;
}

/* ---- the ranks' worker threads ---- */

struct qr_tp_pool {
    int32_t world;
    qr_backend *be[QR_TP_MAX];
    pthread_t th[QR_TP_MAX];
    int32_t n_started;
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    uint64_t gen;   /* bumped per job */
    int32_t n_done; /* ranks done with job gen */
    bool quit;
    void (*fn)(void *arg, int32_t rank);
    void *arg;
};

typedef struct worker_arg {
    qr_tp_pool *p;
    int32_t rank;
} worker_arg;

static void *pool_main(void *arg) {
    const worker_arg wa = *(worker_arg *)arg;
    free(arg);
    qr_tp_pool *p = wa.p;
    qr_backend *be = p->be[wa.rank]; /* NULL: a rank of another process (its thread waits on the connection) */
    if (be && be->ops->thread_bind) be->ops->thread_bind(be);
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->quit && p->gen == seen) pthread_cond_wait(&p->go, &p->mu);
        if (p->quit) break;
        seen = p->gen;
        pthread_mutex_unlock(&p->mu);
        p->fn(p->arg, wa.rank);
        pthread_mutex_lock(&p->mu);
        if (++p->n_done == p->world) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

void qr_tp_pool_free(qr_tp_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->quit = true;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    for (int32_t r = 0; r < p->n_started; r++) pthread_join(p->th[r], NULL);
    pthread_cond_destroy(&p->go);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

qr_status qr_tp_pool_create(const qr_model *m, qr_tp_pool **out, char *err, size_t err_len) {
    *out = NULL;
    qr_tp_pool *p = calloc(1, sizeof *p);
    if (!p) return qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory");
    p->world = m->tp_world;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    for (int32_t r = 0; r < p->world; r++) {
        p->be[r] = m->tp_shards[r] ? m->tp_shards[r]->be : NULL;
        worker_arg *wa = malloc(sizeof *wa);
        if (wa) *wa = (worker_arg){.p = p, .rank = r};
        if (!wa || pthread_create(&p->th[r], NULL, pool_main, wa) != 0) {
            free(wa);
            qr_tp_pool_free(p);
            return qr_errf(err, err_len, QR_ERR_NOMEM, "tensor parallelism: cannot start the rank threads");
        }
        p->n_started++;
    }
    *out = p;
    return QR_OK;
}

void qr_tp_pool_run(qr_tp_pool *p, void (*fn)(void *arg, int32_t rank), void *arg) {
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->arg = arg;
    p->n_done = 0;
    p->gen++;
    pthread_cond_broadcast(&p->go);
    while (p->n_done < p->world) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
