/* context.c — qr_context: the paged KV cache, activation buffers, and qr_decode, which validates a
 * batch, reserves cache blocks, splits it into passes of at most n_batch rows, runs the model's
 * forward pass on the backend and collects the requested logits. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/uio.h>
#include <unistd.h>

#include "model/model.h"
#include "kv/kv_cache.h"
#include "sampling/sampler.h"
#include "util/knobs.h"
#include "util/util.h"

#define KV_BLOCK_SIZE 32 /* token slots per KV block */

/* One rank's part of a context: the model it runs (a tensor-parallel model's shard, else the model), its backend,
 * activations and K/V storage. */
typedef struct ctx_rank {
    const qr_model *m;
    qr_backend *be;
    qr_fwd f;            /* activation buffers for n_batch rows (xo/logits grown on demand) */
    qr_kv_storage *kvs;  /* K/V data (backend memory): this rank's heads */
    int32_t dev_out_cap; /* rows f.xo / f.logits hold */
    qr_status st;        /* the last rank job's result, with its message */
    char err[256];
    bool remote;         /* a rank of another process (the driver's view: m, be NULL; its jobs go over tp_net) */
    void *tk_host;       /* world > 1: this rank's top-k rows of its vocabulary columns (topk_rows's layout) */
    size_t tk_cap;       /* rows of QR_SAMPLER_TOPK_MAX it holds */
} ctx_rank;

struct qr_context {
    qr_model *model;
    qr_backend *be;    /* rank 0's */
    int32_t n_ctx, n_batch, n_seq_max;
    uint64_t kv_bytes; /* bytes of the K/V storage (n_ctx slots of every layer, all ranks) */
    qr_kv_cache *kvc;  /* block bookkeeping (one for all ranks) */
    int32_t world;     /* ranks: 1, or the model's tensor-parallel ranks */
    uint32_t net_id;   /* ranks in several processes: this context's name in the commands to the other ranks */
    qr_tp_pool *pool;  /* world > 1: the ranks' threads (every rank's backend calls run there) */
    bool failed;       /* world > 1: a rank failed during a forward pass; the ranks may be out of step (qr_decode
                        * refuses to run: the model has to be loaded again) */
    atomic_bool lost;  /* ranks in several processes: a connection to a rank failed (set at once by the rank's
                        * thread, while the pass may still be waiting on the GPU): qr_context_failed */
    char failed_msg[256];
    bool layer_split;  /* world > 1, QR_SPLIT_LAYER: a pass runs the ranks in turn, handing x on through pipe_x */
    float *pipe_x;     /* layer split: host [n_batch][n_embd] */
    ctx_rank rk[QR_TP_MAX];
    /* host side */
    float *logits;        /* [n_out][n_vocab] logits of the last batch */
    bool logits_backend;  /* logits came from the backend's host_alloc (else malloc) */
    size_t logits_cap;    /* rows logits holds */
    int32_t *row_out;     /* [rows of the last batch] output index of each row, -1 = none */
    int32_t row_out_cap;
    int32_t n_rows_last;  /* rows in the last batch */
    int32_t last_out;     /* output index of the last row with logits, -1 = none */
    int32_t *next_pos;    /* [n_seq_max] scratch: next position per sequence */
    uint32_t *seq_pass;   /* [n_seq_max] scratch: the pass stamp that last had a row of the sequence */
    uint32_t pass_stamp;
    bool row_exact;   /* passes compute each row as a one-row pass would (qr_context_set_row_exact) */
    int32_t *p_tok, *p_pos, *p_seq, *p_slot, *p_out; /* [n_batch] plan arrays */
    int32_t *p_xb; /* [n_batch] row_exact passes: each row's one-row block-table width (plan_table) */
    int32_t *p_bt; /* [n_seq_max][max_blocks] the plan's block table (plan_table) */
    /* top-k rows (qr_context_set_topk): a one-pass batch's outputs come back as their k best candidates, and a row's
     * logits are read from the device only when asked for (qr_get_logits) */
    int32_t topk_k;       /* requested k; 0: off */
    int32_t topk_n;       /* k of the last batch's candidates; 0: it has none (its logits were read) */
    int32_t topk_rows;    /* output rows of those candidates */
    void *topk_host;      /* topk_rows's layout for topk_cap rows of QR_SAMPLER_TOPK_MAX: vals, ids, n_fin */
    bool topk_backend;    /* topk_host came from the backend's host_alloc */
    size_t topk_cap;
    uint8_t *row_host;    /* [row_host_cap] topk_n > 0: 1 once the row's logits were read */
    size_t row_host_cap;
    pthread_mutex_t lazy_mu; /* qr_get_logits may read rows from several threads (a step's rows sampled at once) */
    /* EAGLE-3's target side (qr_context_capture_layers): the captured rows of the last qr_decode, host
     * [cap_rows][n_cap * n_embd] (cap_cap rows allocated) */
    float *cap_host;
    int32_t n_cap, cap_rows, cap_cap;
    bool decoded; /* a qr_decode ran (capture is set before) */
    /* an EAGLE-3 head's context: the next qr_decode's row inputs (qr_context_set_row_input, caller's memory) and the
     * output rows' pre-norm states of the last one, host [pre_cap rows][n_embd] */
    const float *row_in;
    int32_t row_in_w;
    float *pre_host;
    int32_t pre_cap;
    double prof[6];   /* QUARREL_HOST_PROF=1: seconds in decode's host steps (prof_names), summed over passes */
    int64_t prof_n;   /* passes profiled; -1: profiling off */
};

/* The qr_type of each qr_cache_type, and its name. */
static const struct {
    qr_type type;
    const char *name;
} cache_types[] = {
    [QR_CACHE_F16] = {QR_TYPE_F16, "f16"},   [QR_CACHE_BF16] = {QR_TYPE_BF16, "bf16"},
    [QR_CACHE_Q8_0] = {QR_TYPE_Q8_0, "q8_0"}, [QR_CACHE_Q4_0] = {QR_TYPE_Q4_0, "q4_0"},
    [QR_CACHE_F32] = {QR_TYPE_F32, "f32"},
};
#define N_CACHE_TYPES (int)(sizeof cache_types / sizeof cache_types[0])

int qr_cache_type_from_name(const char *name) {
    for (int i = 0; name && i < N_CACHE_TYPES; i++)
        if (!strcasecmp(name, cache_types[i].name)) return i;
    return -1;
}

const char *qr_cache_type_name(qr_cache_type type) {
    return (unsigned)type < (unsigned)N_CACHE_TYPES ? cache_types[type].name : "?";
}

uint64_t qr_model_kv_bytes_per_token(const qr_model *model, qr_cache_type type_k, qr_cache_type type_v) {
    const qr_hparams *hp = &model->hp;
    if ((unsigned)type_k >= (unsigned)N_CACHE_TYPES || (unsigned)type_v >= (unsigned)N_CACHE_TYPES) return 0;
    /* a block type must split every head: each head's row is read on its own */
    const size_t hk = qr_type_row_size(cache_types[type_k].type, hp->head_dim_k);
    const size_t hv = qr_type_row_size(cache_types[type_v].type, hp->head_dim_v);
    if (!hk || !hv) return 0;
    return (uint64_t)hp->n_layer * (uint64_t)hp->n_head_kv * (uint64_t)(hk + hv);
}

/* llama.cpp's Walsh-Hadamard rotation of a quantized cache (its attn_rot_k / attn_rot_v): for a block type and a
 * head size that is a multiple of 64, K in chunks of the largest power of two >= 64 dividing the head size, V in
 * chunks of 64; 0 = none (F16, BF16, F32, or other head sizes). */
static int32_t kv_rotation(qr_type t, int32_t head_dim, bool is_k) {
    if (!qr_type_table[t].quantized || head_dim <= 0 || head_dim % 64) return 0;
    int32_t n = 64;
    while (is_k && head_dim % (2 * n) == 0) n *= 2;
    return n;
}

qr_context_params qr_context_default_params(void) {
    return (qr_context_params){.n_ctx = 0, .n_batch = 512, .n_seq_max = 1, .n_threads = 0};
}

int32_t qr_model_n_ctx_capped(const qr_model *model, int32_t cap) {
    const int32_t train = qr_model_n_ctx_train(model);
    return train > 0 && train < cap ? train : cap;
}

/* Bytes of memory available to this process (MemAvailable), 0 when unknown. */
static uint64_t mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    uint64_t kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", (unsigned long long *)&kb) == 1) break;
    fclose(f);
    return kb * 1024ull;
}

/* The host logits: memory the backend reads into fastest (page-locked for CUDA) up to 64 MiB (a decode
 * step's rows; all-row logits of a long pass over a big vocabulary stay pageable rather than pin the host),
 * and malloc'd memory when that is bigger or the backend has none to give. */
#define LOGITS_BACKEND_MAX ((size_t)64 << 20)
static void logits_alloc(qr_context *c, size_t bytes) {
    qr_backend *be = c->be;
    c->logits = NULL;
    c->logits_backend = false;
    if (be && be->ops->host_alloc && be->ops->host_free && bytes <= LOGITS_BACKEND_MAX) {
        c->logits = (float *)be->ops->host_alloc(be, bytes);
        c->logits_backend = c->logits != NULL;
    }
    if (!c->logits) c->logits = (float *)malloc(bytes);
}
static void logits_free(qr_context *c) {
    if (c->logits && c->logits_backend) c->be->ops->host_free(c->be, c->logits);
    else free(c->logits);
    c->logits = NULL;
    c->logits_backend = false;
}

/* ---- running a step on every rank ---- */

typedef void (*rank_fn)(qr_context *c, int32_t r, void *arg);
typedef struct rank_job {
    qr_context *c;
    rank_fn fn;
    void *arg;
} rank_job;
static void rank_job_run(void *a, int32_t r) {
    rank_job *j = a;
    j->fn(j->c, r, j->arg);
}
/* fn(c, r, arg) for every rank: in turn on this thread with one rank, at once on the rank threads with more. */
static void each_rank(qr_context *c, rank_fn fn, void *arg) {
    if (!c->pool) {
        for (int32_t r = 0; r < c->world; r++) fn(c, r, arg);
        return;
    }
    rank_job j = {.c = c, .fn = fn, .arg = arg};
    qr_tp_pool_run(c->pool, rank_job_run, &j);
}
/* The first rank's error of the last job (its message into err), else QR_OK. */
static qr_status rank_error(qr_context *c, char *err, size_t err_len) {
    for (int32_t r = 0; r < c->world; r++)
        if (c->rk[r].st != QR_OK) {
            if (err && err_len) snprintf(err, err_len, "%s", c->rk[r].err);
            return c->rk[r].st;
        }
    return QR_OK;
}

/* ---- ranks in other processes: each rank job as a command over tp_net (the worker's side: qr_tp_worker_serve) ---- */

enum { TP_CMD_CTX = 1, TP_CMD_DEV_OUT, TP_CMD_PASS, TP_CMD_SSM_RESET, TP_CMD_COW, TP_CMD_CTX_FREE };

typedef struct tp_ctx_msg {
    uint32_t id;
    int32_t n_ctx, n_batch, n_seq_max, n_threads;
    qr_kv_desc kd;
} tp_ctx_msg;

typedef struct tp_small_msg { /* DEV_OUT (a = rows), SSM_RESET (a = seq), COW (a = src, b = dst), CTX_FREE */
    uint32_t id;
    int32_t a, b;
} tp_small_msg;

typedef struct tp_pass_msg { /* then tokens, pos, seq, kv_slot [n_tokens], block_table, output_rows [n_outputs] */
    uint32_t id;
    int32_t n_tokens, n_seqs, max_blocks, n_outputs;
    uint8_t row_exact, graph, embd, pad;
    uint64_t key;
} tp_pass_msg;

static _Atomic uint32_t tp_next_ctx_id = 1;

static void remote_call(qr_context *c, int32_t r, uint32_t type, const struct iovec *parts, int n_parts,
                        const void **reply, size_t *reply_len) {
    ctx_rank *k = &c->rk[r];
    k->st = qr_tp_net_call(c->model->tp_net, r, type, parts, n_parts, reply, reply_len, k->err, sizeof k->err);
    if (k->st == QR_ERR_IO) atomic_store(&c->lost, true);
}

/* Ends this process's backend group from a thread of its own: NCCL's abort may itself wait for a kernel that waits
 * for the lost rank, and the rank's thread has to report the failure meanwhile. */
static void *tp_abort_main(void *arg) {
    qr_backend *be = arg;
    be->ops->tp_abort(be);
    return NULL;
}
static void tp_abort_async(qr_backend *be) {
    pthread_t th;
    if (!be || !be->ops->tp_abort) return;
    if (pthread_create(&th, NULL, tp_abort_main, be) == 0) pthread_detach(th);
    else be->ops->tp_abort(be);
}

static void remote_small(qr_context *c, int32_t r, uint32_t type, int32_t a, int32_t b) {
    tp_small_msg m = {.id = c->net_id, .a = a, .b = b};
    const struct iovec part = {.iov_base = &m, .iov_len = sizeof m};
    remote_call(c, r, type, &part, 1, NULL, NULL);
}

static void rank_release(qr_context *c, int32_t r, void *arg) {
    (void)arg;
    ctx_rank *k = &c->rk[r];
    if (k->remote) {
        if (k->dev_out_cap >= 0) remote_small(c, r, TP_CMD_CTX_FREE, 0, 0);
        return;
    }
    free(k->tk_host);
    k->tk_host = NULL;
    k->tk_cap = 0;
    if (!k->be) return;
    if (k->be->ops->graph_release) k->be->ops->graph_release(k->be, c);
    qr_fwd_free(k->be, &k->f);
    if (k->kvs) k->be->ops->kv_free(k->be, k->kvs);
    k->kvs = NULL;
}

static const char *const prof_names[6] = {"prepare", "set_batch", "forward / graph launch", "error check",
                                           "logits read (waits for the GPU)", "commit"};

void qr_context_free(qr_context *c) {
    if (!c) return;
    if (c->prof_n > 0) {
        fprintf(stderr, "quarrel: host profile over %lld passes (us a pass):", (long long)c->prof_n);
        for (int i = 0; i < 6; i++) fprintf(stderr, "%s %s %.1f", i ? "," : "", prof_names[i], c->prof[i] * 1e6 / (double)c->prof_n);
        fprintf(stderr, "\n");
    }
    if (c->world == 1 || c->pool) each_rank(c, rank_release, NULL);
    qr_tp_pool_free(c->pool);
    qr_kv_cache_free(c->kvc);
    logits_free(c);
    if (c->topk_backend) c->be->ops->host_free(c->be, c->topk_host);
    else free(c->topk_host);
    free(c->row_host);
    pthread_mutex_destroy(&c->lazy_mu);
    free(c->row_out);
    free(c->cap_host);
    free(c->pre_host);
    free(c->pipe_x);
    free(c->next_pos);
    free(c->seq_pass);
    free(c->p_tok), free(c->p_pos), free(c->p_seq), free(c->p_slot), free(c->p_out), free(c->p_bt), free(c->p_xb);
    free(c);
}

typedef struct rank_setup_args {
    const qr_context_params *p;
    const qr_kv_desc *kd; /* but k_dim / v_dim: the rank's heads */
} rank_setup_args;

/* A rank's threads, K/V storage and activations. */
static void rank_setup(qr_context *c, int32_t r, void *arg) {
    const rank_setup_args *a = arg;
    ctx_rank *k = &c->rk[r];
    k->st = QR_OK;
    if (k->remote) {
        tp_ctx_msg m = {.id = c->net_id, .n_ctx = c->n_ctx, .n_batch = c->n_batch, .n_seq_max = c->n_seq_max,
                        .n_threads = a->p->n_threads, .kd = *a->kd};
        const struct iovec part = {.iov_base = &m, .iov_len = sizeof m};
        remote_call(c, r, TP_CMD_CTX, &part, 1, NULL, NULL);
        if (k->st != QR_OK) k->dev_out_cap = -1; /* nothing to free there */
        return;
    }
    const qr_hparams *hp = &k->m->hp;
    qr_backend *be = k->be;
    int32_t nt = a->p->n_threads;
    if (nt > 0 && c->world > 1 && !c->model->tp_net) nt = nt / c->world > 0 ? nt / c->world : 1; /* one process's */
    if (nt > 0 && (k->st = be->ops->set_n_threads(be, nt, k->err, sizeof k->err)) != QR_OK) return;
    qr_kv_desc kd = *a->kd;
    kd.n_layer = hp->n_layer; /* a layer split's stage: its layers */
    kd.k_dim = hp->n_head_kv * hp->head_dim_k;
    kd.v_dim = hp->n_head_kv * hp->head_dim_v;
    kd.head_dim_k = hp->head_dim_k, kd.head_dim_v = hp->head_dim_v;
    k->kvs = be->ops->kv_alloc(be, &kd, k->err, sizeof k->err);
    if (!k->kvs) {
        k->st = QR_ERR_NOMEM;
        return;
    }
    k->f.kv = k->kvs;
    if ((k->st = qr_fwd_alloc(k->m, be, c->n_batch, c->n_seq_max, &k->f, k->err, sizeof k->err)) != QR_OK) return;
    k->f.rope_factors = qr_rope_factors(k->m, c->n_ctx); /* a sequence may hold n_ctx positions */
    k->f.tp_world = c->layer_split ? 1 : c->world; /* a layer split has nothing to sum */
    k->f.tp_rank = r;
    k->f.tp = c->model->tp_comm;
}

qr_status qr_context_create(qr_model *model, const qr_context_params *params, qr_context **out, char *err,
                            size_t err_len) {
    *out = NULL;
    qr_context_params p = params ? *params : qr_context_default_params();
    const qr_hparams *hp = &model->hp;
    if (model->arch->spec_head && !model->e3_target) /* an EAGLE-3 head drafts for a target; not a model of its own */
        return qr_errf(err, err_len, QR_ERR_UNSUPPORTED,
                       "%s: %s is a speculative-decoding head (EAGLE-3), not a model to run: use it as --draft-model "
                       "with --spec eagle3 next to its target model", model->path, hp->arch_name);
    if (p.n_ctx < 0 || p.n_batch < 0 || p.n_seq_max < 0)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "context: n_ctx %d, n_batch %d, n_seq_max %d must be >= 0",
                       p.n_ctx, p.n_batch, p.n_seq_max);
    if (p.n_ctx == 0) p.n_ctx = hp->n_ctx_train;
    if (p.n_batch == 0) p.n_batch = 512;
    if (p.n_seq_max == 0) p.n_seq_max = 1;
    if (p.n_seq_max > 4096) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "context: n_seq_max %d > 4096", p.n_seq_max);
    if ((unsigned)p.type_k >= (unsigned)N_CACHE_TYPES || (unsigned)p.type_v >= (unsigned)N_CACHE_TYPES)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "context: KV cache types %d/%d: not a qr_cache_type",
                       (int)p.type_k, (int)p.type_v);

    /* cap the cache to what fits in memory (80% of MemAvailable) */
    const uint64_t per_tok = qr_model_kv_bytes_per_token(model, p.type_k, p.type_v);
    const int32_t world = model->tp_world > 1 ? model->tp_world : 1;
    if (hp->n_layer > 0 && per_tok == 0)
        return qr_errf(err, err_len, QR_ERR_UNSUPPORTED,
                       "context: a %s K / %s V cache stores each head in blocks of 32 values, and this model's heads "
                       "have %d (K) and %d (V) values",
                       qr_cache_type_name(p.type_k), qr_cache_type_name(p.type_v), hp->head_dim_k, hp->head_dim_v);
    int64_t n_ctx = ((int64_t)p.n_ctx + KV_BLOCK_SIZE - 1) / KV_BLOCK_SIZE * KV_BLOCK_SIZE;
    uint64_t avail = mem_available();
    size_t dev_free = 0, dev_total = 0; /* the cache lives in the backend's memory where it has its own (GPU) */
    if (model->be->ops->mem_info) avail = model->be->ops->mem_info(model->be, &dev_free, &dev_total) ? dev_free : 0;
    if (world > 1 && model->be->ops->mem_info) avail *= (uint64_t)world; /* each GPU holds 1 / world of it */
    if (avail > 0 && per_tok > 0 && (uint64_t)n_ctx * per_tok > avail / 10 * 8) {
        const int64_t fit = (int64_t)(avail / 10 * 8 / per_tok) / KV_BLOCK_SIZE * KV_BLOCK_SIZE;
        if (fit < KV_BLOCK_SIZE)
            return qr_errf(err, err_len, QR_ERR_NOMEM,
                           "context: not even %d tokens of KV cache (%llu bytes each) fit in the %.1f GiB of available "
                           "memory", KV_BLOCK_SIZE, (unsigned long long)per_tok, (double)avail / (1 << 30));
        qr_log(QR_LOG_WARN, "n_ctx %lld needs %.2f GiB of KV cache but only %.2f GiB of memory is available; using n_ctx %lld",
               (long long)n_ctx, (double)n_ctx * (double)per_tok / (1 << 30), (double)avail / (1 << 30), (long long)fit);
        n_ctx = fit;
    }
    if (n_ctx > INT32_MAX / 2) n_ctx = INT32_MAX / 2 / KV_BLOCK_SIZE * KV_BLOCK_SIZE;

    qr_context *c = calloc(1, sizeof *c);
    if (!c) return qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory");
    c->model = model;
    c->be = model->be;
    c->n_ctx = (int32_t)n_ctx;
    c->n_batch = p.n_batch;
    c->n_seq_max = p.n_seq_max;
    c->kv_bytes = (uint64_t)n_ctx * per_tok;
    c->prof_n = qr_knob_int(QR_KNOB_HOST_PROF) ? 0 : -1;
    c->last_out = -1;
    pthread_mutex_init(&c->lazy_mu, NULL);
    qr_status st;
    c->world = world;
    c->layer_split = world > 1 && model->tp_split == QR_SPLIT_LAYER;
    if (c->layer_split && !(c->pipe_x = malloc((size_t)c->n_batch * hp->n_embd * sizeof(float)))) {
        st = qr_errf(err, err_len, QR_ERR_NOMEM, "context: out of memory");
        goto fail;
    }
    c->net_id = atomic_fetch_add(&tp_next_ctx_id, 1);
    for (int32_t r = 0; r < world; r++) {
        c->rk[r].m = world > 1 ? model->tp_shards[r] : model;
        c->rk[r].be = c->rk[r].m ? c->rk[r].m->be : NULL;
        c->rk[r].remote = !c->rk[r].m; /* another process's rank */
    }
    if (world > 1 && (st = qr_tp_pool_create(model, &c->pool, err, err_len)) != QR_OK) goto fail;
    const int32_t n_blocks = c->n_ctx / KV_BLOCK_SIZE;
    if ((st = qr_kv_cache_create(n_blocks, KV_BLOCK_SIZE, c->n_seq_max, c->n_ctx, &c->kvc, err, err_len)) != QR_OK)
        goto fail;
    const qr_kv_desc kd = {.n_layer = hp->n_layer, .n_blocks = n_blocks, .block_size = KV_BLOCK_SIZE,
                           .type_k = cache_types[p.type_k].type, .type_v = cache_types[p.type_v].type,
                           .rot_k = kv_rotation(cache_types[p.type_k].type, hp->head_dim_k, true),
                           .rot_v = kv_rotation(cache_types[p.type_v].type, hp->head_dim_v, false)};
    rank_setup_args sa = {.p = &p, .kd = &kd};
    each_rank(c, rank_setup, &sa);
    if ((st = rank_error(c, err, err_len)) != QR_OK) goto fail;
    const size_t nb = (size_t)c->n_batch;
    c->next_pos = calloc((size_t)c->n_seq_max, sizeof(int32_t));
    c->seq_pass = calloc((size_t)c->n_seq_max, sizeof(uint32_t));
    c->p_tok = malloc(nb * sizeof(int32_t));
    c->p_pos = malloc(nb * sizeof(int32_t));
    c->p_seq = malloc(nb * sizeof(int32_t));
    c->p_slot = malloc(nb * sizeof(int32_t));
    c->p_out = malloc(nb * sizeof(int32_t));
    c->p_xb = malloc(nb * sizeof(int32_t));
    c->p_bt = malloc((size_t)c->n_seq_max * (size_t)c->kvc->max_blocks * sizeof(int32_t));
    if (!c->next_pos || !c->seq_pass || !c->p_tok || !c->p_pos || !c->p_seq || !c->p_slot || !c->p_out || !c->p_bt ||
        !c->p_xb) {
        st = qr_errf(err, err_len, QR_ERR_NOMEM, "context: cannot allocate activation buffers for n_batch %d", c->n_batch);
        goto fail;
    }
    *out = c;
    return QR_OK;
fail:
    qr_context_free(c);
    return st;
}

/* The plan's block table: the columns the rows of a pass reach (their last positions' blocks), rounded up to a
 * power of two of at least PLAN_MIN_KEYS keys' worth and at most the cache's, copied from the cache's table into
 * c->p_bt. A decode graph is keyed by that width, so a short context gets launch shapes sized for it (the
 * attention's split count, the short kernel) instead of the whole context's; a sequence that grows moves to the
 * next size class (a few classes: a capture each). Returns it. */
#define PLAN_MIN_KEYS 256
/* The width for rows whose last position is max_pos. */
static int32_t table_width(const qr_kv_cache *kvc, int32_t max_pos) {
    int32_t need = (PLAN_MIN_KEYS + kvc->block_size - 1) / kvc->block_size;
    if (max_pos / kvc->block_size + 1 > need) need = max_pos / kvc->block_size + 1;
    int32_t mb = 1;
    while (mb < need && mb < kvc->max_blocks) mb <<= 1;
    return mb > kvc->max_blocks ? kvc->max_blocks : mb;
}

static int32_t plan_table(qr_context *c, const qr_kv_cache *kvc, const int32_t *pos, int32_t n) {
    int32_t need = (PLAN_MIN_KEYS + kvc->block_size - 1) / kvc->block_size;
    for (int32_t r = 0; r < n; r++)
        if (pos[r] / kvc->block_size + 1 > need) need = pos[r] / kvc->block_size + 1;
    int32_t mb = 1;
    while (mb < need && mb < kvc->max_blocks) mb <<= 1;
    if (mb > kvc->max_blocks) mb = kvc->max_blocks;
    for (int32_t s = 0; s < kvc->n_seq_max; s++)
        memcpy(c->p_bt + (size_t)s * mb, kvc->block_table + (size_t)s * kvc->max_blocks, (size_t)mb * sizeof(int32_t));
    return mb;
}

int32_t qr_context_n_ctx(const qr_context *c) { return c->n_ctx; }

uint64_t qr_context_kv_bytes(const qr_context *c) { return c->kv_bytes; }

/* Grows rank r's output buffers to *(int32_t *)arg rows. */
static void rank_dev_out(qr_context *c, int32_t r, void *arg) {
    const int32_t rows = *(const int32_t *)arg;
    ctx_rank *k = &c->rk[r];
    k->st = QR_OK;
    if (rows <= k->dev_out_cap) return;
    if (k->remote) {
        remote_small(c, r, TP_CMD_DEV_OUT, rows, 0);
        if (k->st == QR_OK) k->dev_out_cap = rows;
        return;
    }
    qr_backend *be = k->be;
    if (be->ops->graph_release) be->ops->graph_release(be, c); /* recorded passes use the old buffers */
    const size_t nv = qr_pipe_last(k->m) ? (size_t)qr_model_n_logits(k->m) : 1; /* a layer split: the last rank's */
    if (k->f.xo) be->ops->free(be, k->f.xo);
    if (k->f.logits) be->ops->free(be, k->f.logits);
    k->f.xo = be->ops->alloc(be, (size_t)rows * k->m->hp.n_embd * sizeof(float));
    k->f.logits = be->ops->alloc(be, (size_t)rows * nv * sizeof(float));
    if (!k->f.xo || !k->f.logits) {
        k->dev_out_cap = 0;
        k->st = qr_errf(k->err, sizeof k->err, QR_ERR_NOMEM, "cannot allocate logits for %d rows", rows);
        return;
    }
    k->dev_out_cap = rows;
}

/* Grows every rank's output buffers to `rows` rows. */
static qr_status ensure_dev_out(qr_context *c, int32_t rows, char *err, size_t err_len) {
    bool grow = false;
    int32_t cap = 0;
    for (int32_t r = 0; r < c->world; r++) {
        grow = grow || rows > c->rk[r].dev_out_cap;
        if (c->rk[r].dev_out_cap > cap) cap = c->rk[r].dev_out_cap;
    }
    if (!grow) return QR_OK;
    /* geometric growth (up to a micro-batch): a server's steps gain output rows one at a time, and each growth
     * drops the recorded graphs */
    if (rows < 2 * cap) rows = 2 * cap < c->n_batch ? 2 * cap : (rows > c->n_batch ? rows : c->n_batch);
    each_rank(c, rank_dev_out, &rows);
    return rank_error(c, err, err_len);
}

/* Floats of a host logits row: the vocabulary (an EAGLE-3 head's: its draft vocabulary, mapped by spec.c). */
static size_t logits_width(const qr_context *c) {
    return c->model->arch->spec_head ? (size_t)qr_model_n_logits(c->model) : (size_t)c->model->hp.n_vocab;
}

typedef struct graph_pass {
    const qr_model *m;
    qr_fwd *f;
} graph_pass;

/* run_graph's callback: one forward pass. */
static void run_forward(void *arg) {
    graph_pass *gp = arg;
    gp->m->arch->forward(gp->m, gp->f);
}

/* One pass of qr_decode on a rank: plan, forward (a recorded graph where it may), error check, logits. */
typedef struct pass_args {
    const qr_batch_plan *plan;
    bool graph;           /* replay / record a graph keyed by key */
    uint64_t key;
    int32_t out_done;     /* rows of c->logits already written */
    bool topk;            /* the outputs' top-k candidates into c->topk_host instead of their logits */
    int32_t row0;         /* the pass's first row in the batch (where its captured rows go in c->cap_host) */
    bool embd;            /* qr_context_embd_pass: the hidden states into `hidden` (rank 0) instead of logits */
    float *hidden;
    double *prof;         /* rank 0's split of the time (set_batch, forward, error check, read), or NULL */
    int32_t stage;        /* a layer split: the rank that runs now */
    float *cols;          /* a worker process: its rank's vocabulary columns of the rows, [n_outputs][its rows] */
} pass_args;

/* A rank of another process: the pass as a command, its vocabulary columns of the logits back. */
static void remote_pass(qr_context *c, int32_t r, const pass_args *a) {
    ctx_rank *k = &c->rk[r];
    const qr_batch_plan *p = a->plan;
    tp_pass_msg m = {.id = c->net_id, .n_tokens = p->n_tokens, .n_seqs = p->n_seqs, .max_blocks = p->max_blocks,
                     .n_outputs = p->n_outputs, .row_exact = p->row_exact, .graph = a->graph, .embd = a->embd,
                     .key = a->key};
    const size_t nt = (size_t)p->n_tokens * sizeof(int32_t);
    const struct iovec parts[] = {
        {&m, sizeof m}, {(void *)p->tokens, nt}, {(void *)p->pos, nt}, {(void *)p->seq, nt}, {(void *)p->kv_slot, nt},
        {(void *)p->block_table, (size_t)p->n_seqs * (size_t)p->max_blocks * sizeof(int32_t)},
        {(void *)p->output_rows, (size_t)p->n_outputs * sizeof(int32_t)}};
    const void *reply = NULL;
    size_t len = 0;
    remote_call(c, r, TP_CMD_PASS, parts, (int)(sizeof parts / sizeof parts[0]), &reply, &len);
    if (k->st != QR_OK) { /* this rank may not take part in the pass's sums: end the group so that ours return */
        atomic_store(&c->lost, true);
        tp_abort_async(c->rk[c->model->tp_self].be);
        return;
    }
    if (a->embd) return;
    const int64_t V = c->model->hp.n_vocab, v0 = V * r / c->world, nv = V * (r + 1) / c->world - v0;
    const size_t no = (size_t)p->n_outputs;
    if (len != no * (size_t)nv * sizeof(float)) {
        k->st = qr_errf(k->err, sizeof k->err, QR_ERR_INTERNAL, "rank %d sent %zu bytes of logits, not %zu", r, len,
                        no * (size_t)nv * sizeof(float));
        return;
    }
    for (size_t i = 0; i < no; i++)
        memcpy(c->logits + ((size_t)a->out_done + i) * (size_t)V + v0, (const float *)reply + i * (size_t)nv,
               (size_t)nv * sizeof(float));
}

static void rank_pass(qr_context *c, int32_t r, void *arg) {
    const pass_args *a = arg;
    ctx_rank *k = &c->rk[r];
    k->st = QR_OK;
    qr_backend *be = k->be;
    const qr_batch_plan *plan = a->plan;
    double t = a->prof && r == 0 ? qr_time_s() : 0.0;
#define RANK_PROF(i) \
    if (a->prof && r == 0) qr_prof_lap(&a->prof[i], &t)
    if (c->layer_split && r != a->stage) return; /* a layer split runs one stage at a time */
    if (k->remote) {
        remote_pass(c, r, a);
        return;
    }
    if ((k->st = be->ops->set_batch(be, plan, k->err, sizeof k->err)) != QR_OK) return;
    const size_t x_bytes = (size_t)plan->n_tokens * k->m->hp.n_embd * sizeof(float);
    if (c->layer_split && !qr_pipe_first(k->m)) be->ops->write(be, k->f.x, c->pipe_x, x_bytes); /* the previous stage's */
    RANK_PROF(1);
    k->f.n_tokens = plan->n_tokens;
    k->f.n_outputs = plan->n_outputs;
    k->f.embd = a->embd;
    if (k->f.e3.in) { /* an EAGLE-3 head: the rows' captured states or g */
        const size_t w = (size_t)c->row_in_w;
        k->f.e3.in_w = c->row_in_w;
        be->ops->write(be, k->f.e3.in, c->row_in + (size_t)a->row0 * w, (size_t)plan->n_tokens * w * sizeof(float));
    }
    if (a->graph) {
        graph_pass gp = {.m = k->m, .f = &k->f};
        if ((k->st = be->ops->run_graph(be, c, a->key, run_forward, &gp, k->err, sizeof k->err)) != QR_OK) return;
    } else {
        k->m->arch->forward(k->m, &k->f);
    }
    k->f.embd = false;
    RANK_PROF(2);
    if ((k->st = be->ops->last_error(be, k->err, sizeof k->err)) != QR_OK) {
        if (k->f.mamba.ssm) { /* recurrent states may have advanced: the sequences start over */
            if (k->st == QR_ERR_NUMERIC) k->f.stats.ssm_divergence_total++;
            for (int32_t j = 0; j < plan->n_tokens; j++) qr_ssm_state_reset(k->f.mamba.ssm, plan->seq[j]);
        }
        return;
    }
    RANK_PROF(3);
    if (k->f.cap && c->cap_host && !a->embd) { /* EAGLE-3: the captured layer inputs (one rank: qr_context_capture_layers) */
        const size_t w = (size_t)k->f.n_cap * (size_t)k->m->hp.n_embd;
        be->ops->read(be, c->cap_host + (size_t)a->row0 * w, k->f.cap, (size_t)plan->n_tokens * w * sizeof(float));
    }
    const int32_t no = plan->n_outputs, V = (int32_t)logits_width(c);
    if (k->f.e3.pre && no > 0)
        be->ops->read(be, c->pre_host + (size_t)a->out_done * k->m->hp.n_embd, k->f.e3.pre,
                      (size_t)no * k->m->hp.n_embd * sizeof(float));
    if (!qr_pipe_last(k->m)) { /* a layer split's stage before the last: hand x on */
        be->ops->read(be, c->pipe_x, k->f.x, x_bytes);
    } else if (a->cols) {
        if (no > 0) be->ops->read(be, a->cols, k->f.logits, (size_t)no * (size_t)qr_model_n_logits(k->m) * sizeof(float));
    } else if (a->embd) {
        if (r == 0 || c->layer_split) be->ops->read(be, a->hidden, k->f.xo, (size_t)no * k->m->hp.n_embd * sizeof(float));
    } else if (no > 0 && a->topk) { /* world > 1: this rank's columns, merged by qr_decode */
        be->ops->topk_rows(be, k->f.logits, no, qr_model_n_logits(k->m), c->topk_n, c->world == 1 ? c->topk_host : k->tk_host);
    } else if (no > 0 && (c->world == 1 || c->layer_split)) {
        be->ops->read(be, c->logits + (size_t)a->out_done * V, k->f.logits, (size_t)no * V * sizeof(float));
    } else if (no > 0) { /* this rank's vocabulary columns of the rows, in one strided copy */
        const size_t nv = (size_t)qr_model_n_logits(k->m), fs = sizeof(float);
        be->ops->read_rows(be, c->logits + (size_t)a->out_done * V + k->m->tp_vocab0, (size_t)V * fs, k->f.logits,
                           nv * fs, nv * fs, (size_t)no);
    }
    RANK_PROF(4);
#undef RANK_PROF
}

/* Resets sequence *(int32_t *)arg's recurrent state on a rank (-1: every sequence's). */
static void rank_ssm_reset(qr_context *c, int32_t r, void *arg) {
    if (c->rk[r].remote) remote_small(c, r, TP_CMD_SSM_RESET, *(const int32_t *)arg, 0);
    else qr_ssm_state_reset(c->rk[r].f.mamba.ssm, *(const int32_t *)arg);
}

/* Whether any rank keeps recurrent (Mamba2) states (a layer split's stage may have none). */
static bool has_ssm(const qr_context *c) {
    for (int32_t r = 0; r < c->world; r++)
        if (c->rk[r].f.mamba.ssm) return true;
    return false;
}

typedef struct cow_args {
    int32_t src, dst;
} cow_args;
static void rank_cow(qr_context *c, int32_t r, void *arg) {
    const cow_args *a = arg;
    if (c->rk[r].remote) remote_small(c, r, TP_CMD_COW, a->src, a->dst);
    else c->rk[r].be->ops->kv_copy_block(c->rk[r].be, c->rk[r].kvs, a->src, a->dst);
}

static void topk_merge(qr_context *c);

qr_status qr_decode(qr_context *c, const qr_batch *b, char *err, size_t err_len) {
    const qr_model *m = c->model;
    const qr_hparams *hp = &m->hp;
    qr_backend *be = c->be;
    qr_fwd *f0 = &c->rk[0].f;
    qr_kv_cache *kvc = c->kvc;
    qr_status st;
    if (!b || b->n_tokens < 1 || !b->token)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "decode: empty batch");
    const int32_t n = b->n_tokens;
    if (c->failed || atomic_load(&c->lost))
        return qr_errf(err, err_len, QR_ERR_INTERNAL, "tensor parallelism: a rank failed (%s); load the model again",
                       c->failed ? c->failed_msg : "a rank of another process is gone");
    const bool prof = c->prof_n >= 0;
    double t_mark = prof ? qr_time_s() : 0.0;
#define PROF(i) \
    if (prof) qr_prof_lap(&c->prof[i], &t_mark)
    /* validate: token ids, sequence ids, positions continuing each sequence in order */
    for (int32_t s = 0; s < c->n_seq_max; s++) c->next_pos[s] = qr_kv_cache_seq_len(kvc, s);
    int32_t n_out = 0;
    for (int32_t i = 0; i < n; i++) {
        const int32_t s = b->seq_id ? b->seq_id[i] : 0;
        if (b->token[i] < 0 || b->token[i] >= hp->n_vocab)
            return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "decode: row %d: token id %d is outside the vocabulary [0, %d)",
                           i, b->token[i], hp->n_vocab);
        if (s < 0 || s >= c->n_seq_max)
            return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "decode: row %d: sequence id %d is outside [0, %d)", i, s,
                           c->n_seq_max);
        if (b->pos && b->pos[i] != c->next_pos[s])
            return qr_errf(err, err_len, QR_ERR_INVALID_ARG,
                           "decode: row %d: sequence %d continues at position %d, got %d (remove positions with "
                           "qr_kv_seq_rm first)", i, s, c->next_pos[s], b->pos[i]);
        if (hp->attn_temp_scale != 0.0f && c->next_pos[s] >= hp->n_ctx_orig) /* mistral3: 1 below n_ctx_orig */
            return qr_errf(err, err_len, QR_ERR_UNSUPPORTED,
                           "decode: row %d: position %d is past the model's original context %d, where its attention "
                           "temperature scaling (attention.temperature_scale) would start: not supported", i,
                           c->next_pos[s], hp->n_ctx_orig);
        c->next_pos[s]++;
        if (b->logits ? b->logits[i] != 0 : i == n - 1) n_out++;
    }
    /* reserve cache blocks (copy-on-write of shared blocks) */
    for (int32_t s = 0; s < c->n_seq_max; s++) {
        if (c->next_pos[s] == qr_kv_cache_seq_len(kvc, s)) continue;
        qr_kv_copy cow;
        if ((st = qr_kv_cache_reserve(kvc, s, c->next_pos[s], &cow, err, err_len)) != QR_OK) return st;
        if (cow.src >= 0) {
            cow_args ca = {.src = cow.src, .dst = cow.dst};
            each_rank(c, rank_cow, &ca);
        }
    }
    /* host outputs */
    if ((size_t)n_out > c->logits_cap) { /* the old rows are not kept: this pass rewrites them */
        /* geometric growth: a server's steps gain output rows one at a time (page-locked buffers are slow to make) */
        const size_t row_bytes = logits_width(c) * sizeof(float);
        size_t cap = (size_t)n_out > 2 * c->logits_cap ? (size_t)n_out : 2 * c->logits_cap;
        if (cap * row_bytes > LOGITS_BACKEND_MAX && (size_t)n_out * row_bytes <= LOGITS_BACKEND_MAX)
            cap = LOGITS_BACKEND_MAX / row_bytes; /* keep it in the backend's fast memory */
        logits_free(c);
        c->logits_cap = 0;
        logits_alloc(c, cap * row_bytes);
        if (!c->logits) return qr_errf(err, err_len, QR_ERR_NOMEM, "decode: cannot allocate logits for %d rows", n_out);
        c->logits_cap = cap;
    }
    /* top-k rows: a batch of one pass on one rank whose backend finds them */
    c->topk_n = 0;
    const int32_t K = c->topk_k;
    bool tk_ok = K > 0 && n_out > 0 && n <= c->n_batch && !c->layer_split;
    for (int32_t r = 0; r < c->world && tk_ok; r++) { /* every rank finds its columns' candidates */
        ctx_rank *k = &c->rk[r];
        tk_ok = !k->remote && k->be->ops->topk_rows && K <= qr_model_n_logits(k->m);
        if (tk_ok && c->world > 1 && k->tk_cap < (size_t)n_out) {
            free(k->tk_host);
            k->tk_cap = 0;
            if ((k->tk_host = malloc((size_t)n_out * ((size_t)QR_SAMPLER_TOPK_MAX * 8 + 4)))) k->tk_cap = (size_t)n_out;
            tk_ok = k->tk_host != NULL;
        }
    }
    if (tk_ok) {
        if ((size_t)n_out > c->topk_cap) {
            const size_t cap = (size_t)n_out > 2 * c->topk_cap ? (size_t)n_out : 2 * c->topk_cap;
            const size_t bytes = cap * ((size_t)QR_SAMPLER_TOPK_MAX * 8 + 4);
            if (c->topk_backend) be->ops->host_free(be, c->topk_host);
            else free(c->topk_host);
            c->topk_cap = 0;
            c->topk_host = be->ops->host_alloc ? be->ops->host_alloc(be, bytes) : NULL;
            c->topk_backend = c->topk_host != NULL;
            if (!c->topk_host) c->topk_host = malloc(bytes);
            if (c->topk_host) c->topk_cap = cap;
        }
        if (c->topk_cap && c->logits_cap > c->row_host_cap) {
            uint8_t *rh = realloc(c->row_host, c->logits_cap);
            if (rh) c->row_host = rh, c->row_host_cap = c->logits_cap;
        }
        if (c->topk_cap && c->row_host_cap >= (size_t)n_out) {
            memset(c->row_host, 0, (size_t)n_out);
            c->topk_n = K;
            c->topk_rows = n_out;
        }
    }
    if (n > c->row_out_cap) {
        int32_t *nr = realloc(c->row_out, (size_t)n * sizeof(int32_t));
        if (!nr) return qr_errf(err, err_len, QR_ERR_NOMEM, "decode: out of memory");
        c->row_out = nr;
        c->row_out_cap = n;
    }
    if (c->n_cap > 0 && n > c->cap_cap) { /* the captured rows of this batch */
        free(c->cap_host);
        c->cap_cap = 0;
        if (!(c->cap_host = malloc((size_t)n * (size_t)c->n_cap * (size_t)hp->n_embd * sizeof(float))))
            return qr_errf(err, err_len, QR_ERR_NOMEM, "decode: out of memory for the captured hidden states");
        c->cap_cap = n;
    }
    if (c->rk[0].f.e3.in) { /* an EAGLE-3 head: every row's second input, and room for the output rows' states */
        const int32_t w3 = 3 * hp->eagle3_target_embd;
        if (!c->row_in || (c->row_in_w != w3 && c->row_in_w != hp->n_embd))
            return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "decode: an EAGLE-3 head's rows need their captured states "
                           "(%d wide) or g (%d wide) (qr_context_set_row_input)", w3, hp->n_embd);
        if (n_out > c->pre_cap) {
            free(c->pre_host);
            c->pre_cap = 0;
            if (!(c->pre_host = malloc((size_t)n_out * (size_t)hp->n_embd * sizeof(float))))
                return qr_errf(err, err_len, QR_ERR_NOMEM, "decode: out of memory");
            c->pre_cap = n_out;
        }
    }
    c->cap_rows = 0;
    c->decoded = true;
    c->n_rows_last = 0;
    c->last_out = -1;
    /* restore the running positions for the passes */
    for (int32_t s = 0; s < c->n_seq_max; s++) c->next_pos[s] = qr_kv_cache_seq_len(kvc, s);
    int32_t out_done = 0;
    /* a row-exact batch goes in passes of at most the rows the backend computes row-exactly */
    const int32_t xr = be->caps.row_exact_rows, pass_rows = c->row_exact && xr > 0 && xr < c->n_batch ? xr : c->n_batch;
    for (int32_t r0 = 0; r0 < n; r0 += pass_rows) {
        const int32_t nt = n - r0 < pass_rows ? n - r0 : pass_rows;
        int32_t no = 0;
        bool one_per_seq = true; /* every row a different sequence's: a batched decode step */
        if (++c->pass_stamp == 0) memset(c->seq_pass, 0, sizeof(uint32_t) * (size_t)c->n_seq_max), c->pass_stamp = 1;
        for (int32_t j = 0; j < nt; j++) {
            const int32_t i = r0 + j, s = b->seq_id ? b->seq_id[i] : 0;
            one_per_seq = one_per_seq && c->seq_pass[s] != c->pass_stamp;
            c->seq_pass[s] = c->pass_stamp;
            c->p_tok[j] = b->token[i];
            c->p_seq[j] = s;
            c->p_pos[j] = c->next_pos[s]++;
            c->p_slot[j] = qr_kv_cache_slot(kvc, s, c->p_pos[j]);
            if (c->p_slot[j] < 0) return qr_errf(err, err_len, QR_ERR_INTERNAL, "decode: no cache slot for row %d", i);
            const bool want = b->logits ? b->logits[i] != 0 : i == n - 1;
            c->row_out[i] = want ? out_done + no : -1;
            if (want) c->p_out[no++] = j;
        }
        if ((st = ensure_dev_out(c, no > 0 ? no : 1, err, err_len)) != QR_OK) return st;
        const int32_t mb = plan_table(c, kvc, c->p_pos, nt);
        const bool exact = c->row_exact && nt > 1;
        bool exact_mb = true; /* every row's one-row width is the pass's (a graph's launch shapes then fit each) */
        for (int32_t j = 0; exact && j < nt; j++) exact_mb = (c->p_xb[j] = table_width(kvc, c->p_pos[j])) == mb && exact_mb;
        const bool graph_ok = be->ops->run_graph && !m->arch->encoder && !f0->stats_enabled;
        PROF(0);
        const qr_batch_plan plan = {.n_tokens = nt, .tokens = c->p_tok, .pos = c->p_pos, .seq = c->p_seq,
                                    .kv_slot = c->p_slot, .n_seqs = c->n_seq_max, .max_blocks = mb,
                                    .block_table = c->p_bt, .n_outputs = no, .output_rows = c->p_out,
                                    .row_exact = exact, .exact_blocks = exact ? c->p_xb : NULL,
                                    .exact_graph = graph_ok};
        /* MoE / SSM models too, unless their stats are on (the expert counts read the routing back, and
         * the block counters advance only when the forward pass runs on the host) */
        /* Decode passes replay a recorded graph per (rows, outputs, block-table shape): passes of up to 8
         * rows, and batched decode steps (one row per sequence) up to QUARREL_GRAPH_MAX_ROWS rows. Prompt
         * passes of other shapes run op by op: their lengths vary, and each new shape would be captured. */
        const bool graph_rows = nt <= 8 || (one_per_seq && nt <= qr_knob_int(QR_KNOB_GRAPH_MAX_ROWS));
        pass_args pa = {.plan = &plan, .out_done = out_done, .row0 = r0, .prof = prof ? c->prof : NULL, .topk = c->topk_n > 0,
                        .graph = graph_ok && graph_rows && exact_mb,
                        .key = (uint64_t)(uint16_t)(nt | (exact ? 0x8000 : 0)) | (uint64_t)(uint16_t)no << 16 |
                               (uint64_t)(uint16_t)mb << 32 |
                               (uint64_t)(c->n_seq_max & 0x7fff) << 48 |
                               (uint64_t)(c->row_in_w == hp->n_embd) << 63}; /* a head: g rows (no fc) */
        for (pa.stage = 0; pa.stage < (c->layer_split ? c->world : 1); pa.stage++) {
            each_rank(c, rank_pass, &pa);
            if (rank_error(c, NULL, 0) != QR_OK) break;
        }
        if (prof) t_mark = qr_time_s();
        if ((st = rank_error(c, err, err_len)) != QR_OK) {
            if (c->world > 1 && !c->layer_split && (st = rank_error(c, c->failed_msg, sizeof c->failed_msg)) != QR_OK)
                c->failed = true;
            if (has_ssm(c)) /* recurrent states may have advanced: the sequences start over */
                for (int32_t j = 0; j < nt; j++) {
                    int32_t sq = c->p_seq[j];
                    each_rank(c, rank_ssm_reset, &sq);
                    qr_kv_cache_seq_rm(kvc, sq, 0, -1);
                }
            return st;
        }
        out_done += no;
        PROF(4);
    }
    if (c->topk_n > 0 && c->world > 1) topk_merge(c);
    /* commit */
    for (int32_t s = 0; s < c->n_seq_max; s++) qr_kv_cache_set_seq_len(kvc, s, c->next_pos[s]);
    c->n_rows_last = n;
    c->last_out = out_done - 1;
    if (c->n_cap > 0) c->cap_rows = n;
    c->row_in = NULL;
    PROF(5);
    if (prof) c->prof_n++;
#undef PROF
    return QR_OK;
}

void qr_context_set_row_input(qr_context *c, const float *rows, int32_t width) {
    c->row_in = rows;
    c->row_in_w = width;
}

const float *qr_context_pre_rows(const qr_context *c) {
    return c && c->rk[0].f.e3.pre && c->last_out >= 0 ? c->pre_host : NULL;
}

qr_status qr_context_capture_layers(qr_context *c, int32_t n, const int32_t *layers, char *err, size_t err_len) {
    if (!c || !layers || n < 1 || n > 3)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "capture: 1 to 3 layers (got %d)", n);
    const qr_model *m = c->model;
    if (c->n_cap > 0) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "capture: the context captures layers already");
    if (c->decoded)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "capture: set it before the context's first decode");
    if (m->arch->forward != qr_llama_forward && m->arch->forward != qr_gemma3_forward)
        return qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "capture of hidden states (EAGLE-3's target side): "
                       "architecture %s is not supported yet (the llama and gemma families are)", m->hp.arch_name);
    if (c->world > 1 || c->rk[0].remote)
        return qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "capture of hidden states: not with a model split over "
                       "%d devices", c->world);
    for (int32_t i = 0; i < n; i++)
        if (layers[i] < 0 || layers[i] > m->hp.n_layer)
            return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "capture: layer %d is outside [0, %d] (%d: the last layer's "
                           "output before the final norm)", layers[i], m->hp.n_layer, m->hp.n_layer);
    qr_fwd *f = &c->rk[0].f;
    qr_backend *be = c->rk[0].be;
    const size_t bytes = (size_t)c->n_batch * (size_t)n * (size_t)m->hp.n_embd * sizeof(float);
    if (!(f->cap = be->ops->alloc(be, bytes)))
        return qr_errf(err, err_len, QR_ERR_NOMEM, "capture: cannot allocate %zu bytes for the hidden states", bytes);
    for (int32_t i = 0; i < n; i++) f->cap_layers[i] = layers[i];
    f->n_cap = n;
    c->n_cap = n;
    return QR_OK;
}

const float *qr_get_captured(const qr_context *c, int32_t *n_rows, int32_t *width) {
    if (!c || c->n_cap <= 0 || c->cap_rows <= 0 || !c->cap_host) return NULL;
    if (n_rows) *n_rows = c->cap_rows;
    if (width) *width = c->n_cap * c->model->hp.n_embd;
    return c->cap_host;
}

/* world > 1: each rank's top-k rows of its vocabulary columns merged into c->topk_host (the k best of the union in
 * the sampler's order: the ranks hold increasing id ranges, so on equal values the earlier rank's id is the lower). */
static void topk_merge(qr_context *c) {
    const int32_t K = c->topk_n, R = c->topk_rows;
    float *ov = (float *)c->topk_host;
    int32_t *oi = (int32_t *)(ov + (size_t)R * K), *of = oi + (size_t)R * K;
    for (int32_t j = 0; j < R; j++) {
        int32_t at[QR_TP_MAX] = {0}, fin = 0;
        bool bad = false;
        for (int32_t r = 0; r < c->world; r++) {
            const int32_t *nf = (const int32_t *)((const float *)c->rk[r].tk_host + (size_t)R * K * 2);
            if (nf[j] < 0) bad = true;
            else fin += nf[j];
        }
        for (int32_t o = 0; o < K; o++) {
            int32_t best = -1;
            float bv = 0.0f;
            for (int32_t r = 0; r < c->world; r++) {
                if (at[r] >= K) continue;
                const float v = ((const float *)c->rk[r].tk_host)[(size_t)j * K + at[r]];
                if (best < 0 || v > bv) best = r, bv = v;
            }
            const float *rv = (const float *)c->rk[best].tk_host;
            const int32_t *ri = (const int32_t *)(rv + (size_t)R * K);
            ov[(size_t)j * K + o] = bv;
            oi[(size_t)j * K + o] = ri[(size_t)j * K + at[best]] + c->rk[best].m->tp_vocab0;
            at[best]++;
        }
        of[j] = bad ? -1 : fin;
    }
}

/* Reads output row *(int32_t *)arg's columns of a rank (of one rank: the whole row) into the context's logits row. */
static void rank_read_row(qr_context *c, int32_t r, void *arg) {
    const int32_t j = *(const int32_t *)arg;
    ctx_rank *k = &c->rk[r];
    const size_t nv = (size_t)qr_model_n_logits(k->m), V = logits_width(c);
    k->be->ops->read(k->be, c->logits + (size_t)j * V + k->m->tp_vocab0, k->f.logits + (size_t)j * nv, nv * sizeof(float));
    char e[8];
    k->st = k->be->ops->last_error(k->be, e, sizeof e);
}

/* Output j's logits row on the host: read from the device first when the batch came back as top-k rows. */
static const float *out_row(const qr_context *cc, int32_t j) {
    qr_context *c = (qr_context *)cc; /* the lazy read fills the host copy (the caller sees the logits as they were) */
    const size_t V = logits_width(c);
    float *dst = c->logits + (size_t)j * V;
    if (c->topk_n == 0) return dst;
    const float *res = dst;
    pthread_mutex_lock(&c->lazy_mu);
    if (!c->row_host[j]) { /* every rank's columns (one rank: the whole row) */
        each_rank(c, rank_read_row, &j);
        if (rank_error(c, NULL, 0) == QR_OK) c->row_host[j] = 1;
        else res = NULL;
    }
    pthread_mutex_unlock(&c->lazy_mu);
    return res;
}

const float *qr_get_logits(const qr_context *c, int32_t row) {
    if (row == -1) return c->last_out >= 0 ? out_row(c, c->last_out) : NULL;
    if (row < 0 || row >= c->n_rows_last || c->row_out[row] < 0) return NULL;
    return out_row(c, c->row_out[row]);
}

void qr_context_set_topk(qr_context *c, int32_t k) {
    c->topk_k = k < 0 ? 0 : k > QR_SAMPLER_TOPK_MAX ? QR_SAMPLER_TOPK_MAX : k;
}

bool qr_context_topk(const qr_context *c, int32_t row, const float **vals, const int32_t **ids, int32_t *k,
                     int32_t *n_fin) {
    if (c->topk_n == 0 || row < 0 || row >= c->n_rows_last || c->row_out[row] < 0) return false;
    const int32_t j = c->row_out[row], K = c->topk_n, R = c->topk_rows;
    const float *v = (const float *)c->topk_host;
    const int32_t *id = (const int32_t *)(v + (size_t)R * K), *nf = id + (size_t)R * K;
    *vals = v + (size_t)j * K;
    *ids = id + (size_t)j * K;
    *k = K;
    *n_fin = nf[j];
    return true;
}

int32_t qr_kv_seq_len(const qr_context *c, int32_t seq) { return qr_kv_cache_seq_len(c->kvc, seq); }

bool qr_kv_seq_rm(qr_context *c, int32_t seq, int32_t p0, int32_t p1) {
    if (has_ssm(c)) { /* a recurrent state can only be kept whole or reset (to position 0) */
        const int32_t len = seq >= 0 ? qr_kv_cache_seq_len(c->kvc, seq) : 0;
        if (p0 > 0 && (seq < 0 || p0 < len)) return false;
        if (p0 <= 0 && !qr_kv_cache_seq_rm(c->kvc, seq, p0, p1)) return false;
        if (p0 <= 0) each_rank(c, rank_ssm_reset, &seq);
        return true;
    }
    return qr_kv_cache_seq_rm(c->kvc, seq, p0, p1);
}

void qr_kv_clear(qr_context *c) {
    qr_kv_cache_clear(c->kvc);
    int32_t all = -1;
    if (has_ssm(c)) each_rank(c, rank_ssm_reset, &all);
}

const qr_arch_stats *qr_context_arch_stats(const qr_context *c) { return &c->rk[0].f.stats; }

void qr_context_set_arch_stats(qr_context *c, bool on) {
    const qr_hparams *hp = &c->model->hp; /* only MoE / SSM models have counters to keep */
    for (int32_t r = 0; r < c->world; r++) c->rk[r].f.stats_enabled = on && (hp->n_expert > 0 || hp->has_ssm);
}

qr_kv_cache *qr_context_kv_cache(qr_context *c) { return c->kvc; }

void qr_context_set_row_exact(qr_context *c, bool on) { c->row_exact = on; }

bool qr_context_failed(const qr_context *c) { return c->failed || atomic_load(&c->lost); }

qr_model *qr_context_model(const qr_context *c) { return c->model; }
int32_t qr_context_n_batch(const qr_context *c) { return c->n_batch; }
int32_t qr_context_n_seq_max(const qr_context *c) { return c->n_seq_max; }

qr_status qr_context_embd_pass(qr_context *c, const int32_t *tok, const int32_t *seq, int32_t n, float *hidden,
                               char *err, size_t err_len) {
    const qr_model *m = c->model;
    const qr_hparams *hp = &m->hp;
    qr_kv_cache *kvc = c->kvc;
    qr_status st = QR_OK;
    if (n < 1 || n > c->n_batch)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "embeddings pass: %d rows (1..%d allowed)", n, c->n_batch);
    qr_kv_cache_clear(kvc);
    for (int32_t s = 0; s < c->n_seq_max; s++) c->next_pos[s] = 0;
    for (int32_t i = 0; i < n; i++) {
        if (seq[i] < 0 || seq[i] >= c->n_seq_max)
            return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "embeddings pass: sequence id %d is outside [0, %d)", seq[i],
                           c->n_seq_max);
        if (tok[i] < 0 || tok[i] >= hp->n_vocab)
            return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "embeddings pass: token id %d is outside the vocabulary",
                           tok[i]);
        c->next_pos[seq[i]]++;
    }
    for (int32_t s = 0; s < c->n_seq_max; s++) {
        if (!c->next_pos[s]) continue;
        qr_kv_copy cow;
        if ((st = qr_kv_cache_reserve(kvc, s, c->next_pos[s], &cow, err, err_len)) != QR_OK) goto done;
        c->next_pos[s] = 0;
    }
    for (int32_t i = 0; i < n; i++) {
        c->p_tok[i] = tok[i];
        c->p_seq[i] = seq[i];
        c->p_pos[i] = c->next_pos[seq[i]]++;
        c->p_slot[i] = qr_kv_cache_slot(kvc, seq[i], c->p_pos[i]);
        c->p_out[i] = i;
        if (c->p_slot[i] < 0) {
            st = qr_errf(err, err_len, QR_ERR_INTERNAL, "embeddings pass: no cache slot for row %d", i);
            goto done;
        }
    }
    if ((st = ensure_dev_out(c, n, err, err_len)) != QR_OK) goto done;
    const qr_batch_plan plan = {.n_tokens = n, .tokens = c->p_tok, .pos = c->p_pos, .seq = c->p_seq,
                                .kv_slot = c->p_slot, .n_seqs = c->n_seq_max, .max_blocks = kvc->max_blocks,
                                .block_table = kvc->block_table, .n_outputs = n, .output_rows = c->p_out};
    pass_args pa = {.plan = &plan, .embd = true, .hidden = hidden};
    for (pa.stage = 0; pa.stage < (c->layer_split ? c->world : 1); pa.stage++) {
        each_rank(c, rank_pass, &pa);
        if ((st = rank_error(c, err, err_len)) != QR_OK) break;
    }
done:
    qr_kv_cache_clear(kvc);
    c->n_rows_last = 0;
    c->last_out = -1;
    return st;
}

/* ---- a worker process's side of the commands (ranks in several processes) ---- */

#define TP_WORKER_MAX_CTX 64

/* The worker's context for the driver's context `id`: rank `self` alone (the others are other processes). */
static qr_status worker_ctx_create(qr_model *m, const tp_ctx_msg *msg, qr_context **out, char *err, size_t err_len) {
    const int32_t R = m->tp_self;
    qr_context *c = calloc(1, sizeof *c);
    if (!c) return qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory");
    c->model = m;
    c->be = m->be;
    c->n_ctx = msg->n_ctx;
    c->n_batch = msg->n_batch;
    c->n_seq_max = msg->n_seq_max;
    c->world = m->tp_world;
    c->net_id = msg->id;
    c->prof_n = -1;
    c->last_out = -1;
    pthread_mutex_init(&c->lazy_mu, NULL);
    c->rk[R].m = m->tp_shards[R];
    c->rk[R].be = m->tp_shards[R]->be;
    const qr_context_params p = {.n_threads = 0}; /* this rank's threads: its own -t (at load), not the driver's */
    rank_setup_args sa = {.p = &p, .kd = &msg->kd};
    rank_setup(c, R, &sa);
    if (c->rk[R].st != QR_OK) {
        const qr_status st = qr_errf(err, err_len, c->rk[R].st, "%s", c->rk[R].err);
        rank_release(c, R, NULL);
        free(c);
        return st;
    }
    *out = c;
    return QR_OK;
}

static void worker_ctx_free(qr_context *c) {
    rank_release(c, c->model->tp_self, NULL);
    free(c);
}

/* One PASS command on the worker's context: the plan from the message, the rank's pass, its logits columns. */
static qr_status worker_pass(qr_context *c, const void *payload, size_t bytes, float **cols, size_t *cols_cap,
                             size_t *out_bytes, char *err, size_t err_len) {
    const int32_t R = c->model->tp_self;
    ctx_rank *k = &c->rk[R];
    tp_pass_msg m;
    if (bytes < sizeof m) return qr_errf(err, err_len, QR_ERR_FORMAT, "a short pass command");
    memcpy(&m, payload, sizeof m);
    const size_t nt = (size_t)m.n_tokens, nbt = (size_t)m.n_seqs * (size_t)m.max_blocks;
    if (m.n_tokens < 1 || m.n_tokens > c->n_batch || m.n_outputs < 0 || m.n_outputs > m.n_tokens ||
        m.n_seqs != c->n_seq_max || m.max_blocks < 1 ||
        bytes != sizeof m + (4 * nt + nbt + (size_t)m.n_outputs) * sizeof(int32_t))
        return qr_errf(err, err_len, QR_ERR_FORMAT, "a malformed pass command (%d rows, %d outputs)", m.n_tokens,
                       m.n_outputs);
    const int32_t *a = (const int32_t *)((const char *)payload + sizeof m);
    const qr_batch_plan plan = {.n_tokens = m.n_tokens, .tokens = a, .pos = a + nt, .seq = a + 2 * nt,
                                .kv_slot = a + 3 * nt, .n_seqs = m.n_seqs, .max_blocks = m.max_blocks,
                                .block_table = a + 4 * nt, .n_outputs = m.n_outputs,
                                .output_rows = a + 4 * nt + nbt, .row_exact = m.row_exact};
    if (m.n_outputs > k->dev_out_cap) /* the driver grows the output buffers (DEV_OUT) before such a pass */
        return qr_errf(err, err_len, QR_ERR_FORMAT, "a pass of %d outputs on buffers of %d rows", m.n_outputs,
                       k->dev_out_cap);
    const size_t need = (size_t)m.n_outputs * (size_t)qr_model_n_logits(k->m) * sizeof(float);
    if (need > *cols_cap) {
        float *nb = realloc(*cols, need);
        if (!nb) return qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory for %d rows of logits", m.n_outputs);
        *cols = nb;
        *cols_cap = need;
    }
    float hidden_sink = 0.0f;
    pass_args pa = {.plan = &plan, .graph = m.graph && k->be->ops->run_graph, .key = m.key, .embd = m.embd,
                    .hidden = &hidden_sink, .cols = m.embd ? NULL : *cols};
    rank_pass(c, R, &pa);
    if (k->st != QR_OK) return qr_errf(err, err_len, k->st, "%s", k->err);
    *out_bytes = m.embd ? 0 : need;
    return QR_OK;
}

/* A worker's watch over its driver during a pass: a driver that dies while this rank waits inside a GPU all-reduce
 * for it would leave the rank waiting for ever; the watch sees the connection close and ends the backend's group. */
typedef struct worker_watch {
    qr_tp_net *net;
    qr_backend *be;
    atomic_bool in_pass, stop;
} worker_watch;

static void *worker_watch_main(void *arg) {
    worker_watch *w = arg;
    while (!atomic_load(&w->stop)) {
        if (!atomic_load(&w->in_pass)) {
            usleep(50 * 1000);
        } else if (qr_tp_net_peer_gone(w->net, 200) && atomic_load(&w->in_pass)) {
            qr_log(QR_LOG_WARN, "tensor parallelism: the driver is gone during a pass");
            w->be->ops->tp_abort(w->be);
            break;
        }
    }
    return NULL;
}

qr_status qr_tp_worker_serve(qr_model *m, char *err, size_t err_len) {
    if (!m || !m->tp_net || m->tp_self < 1)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "not a worker rank (load the model with tp_addr and tp_rank >= 1)");
    qr_tp_net *net = m->tp_net;
    worker_watch watch = {.net = net, .be = m->be};
    pthread_t watch_th;
    const bool watching = m->be->ops->tp_abort && pthread_create(&watch_th, NULL, worker_watch_main, &watch) == 0;
    struct {
        uint32_t id;
        qr_context *c;
    } ctxs[TP_WORKER_MAX_CTX] = {{0}};
    float *cols = NULL;
    size_t cols_cap = 0;
    qr_status st = QR_OK;
    for (;;) {
        uint32_t type = 0;
        const void *pl = NULL;
        size_t bytes = 0;
        st = qr_tp_net_next(net, &type, &pl, &bytes);
        if (st == QR_ERR_NOT_FOUND) { /* the driver closed the connection: done */
            st = QR_OK;
            break;
        }
        if (st != QR_OK) {
            st = qr_errf(err, err_len, st, "tensor parallelism: rank %d lost the driver", m->tp_self);
            break;
        }
        const uint32_t id = bytes >= sizeof(uint32_t) ? *(const uint32_t *)pl : 0;
        int slot = -1;
        for (int i = 0; i < TP_WORKER_MAX_CTX && slot < 0; i++)
            if (ctxs[i].c && ctxs[i].id == id) slot = i;
        char msg[512] = "";
        qr_status rs = QR_OK;
        const void *out = NULL;
        size_t out_bytes = 0;
        tp_small_msg sm = {0};
        if (type != TP_CMD_CTX && type != TP_CMD_PASS) {
            if (bytes != sizeof sm) rs = qr_errf(msg, sizeof msg, QR_ERR_FORMAT, "a malformed command %u", type);
            else memcpy(&sm, pl, sizeof sm);
        }
        if (rs == QR_OK && type != TP_CMD_CTX && slot < 0)
            rs = qr_errf(msg, sizeof msg, QR_ERR_INVALID_ARG, "no context %u on this rank", id);
        qr_context *c = slot >= 0 ? ctxs[slot].c : NULL;
        ctx_rank *k = c ? &c->rk[m->tp_self] : NULL;
        if (rs == QR_OK) switch (type) {
            case TP_CMD_CTX: {
                int free_slot = -1;
                for (int i = 0; i < TP_WORKER_MAX_CTX && free_slot < 0; i++)
                    if (!ctxs[i].c) free_slot = i;
                if (bytes != sizeof(tp_ctx_msg)) rs = qr_errf(msg, sizeof msg, QR_ERR_FORMAT, "a malformed context command");
                else if (slot >= 0) rs = qr_errf(msg, sizeof msg, QR_ERR_INVALID_ARG, "context %u exists", id);
                else if (free_slot < 0)
                    rs = qr_errf(msg, sizeof msg, QR_ERR_BUSY, "more than %d contexts on one rank", TP_WORKER_MAX_CTX);
                else {
                    tp_ctx_msg cm;
                    memcpy(&cm, pl, sizeof cm);
                    rs = worker_ctx_create(m, &cm, &ctxs[free_slot].c, msg, sizeof msg);
                    if (rs == QR_OK) ctxs[free_slot].id = id;
                }
                break;
            }
            case TP_CMD_DEV_OUT:
                rank_dev_out(c, m->tp_self, &sm.a);
                if ((rs = k->st) != QR_OK) snprintf(msg, sizeof msg, "%s", k->err);
                break;
            case TP_CMD_PASS:
                atomic_store(&watch.in_pass, true);
                rs = worker_pass(c, pl, bytes, &cols, &cols_cap, &out_bytes, msg, sizeof msg);
                atomic_store(&watch.in_pass, false);
                out = cols;
                break;
            case TP_CMD_SSM_RESET: rank_ssm_reset(c, m->tp_self, &sm.a); break;
            case TP_CMD_COW: {
                cow_args ca = {.src = sm.a, .dst = sm.b};
                rank_cow(c, m->tp_self, &ca);
                break;
            }
            case TP_CMD_CTX_FREE:
                worker_ctx_free(c);
                ctxs[slot].c = NULL;
                break;
            default: rs = qr_errf(msg, sizeof msg, QR_ERR_UNSUPPORTED, "unknown command %u", type);
            }
        if (!qr_tp_net_reply(net, rs, msg, rs == QR_OK ? out : NULL, rs == QR_OK ? out_bytes : 0)) {
            st = qr_errf(err, err_len, QR_ERR_IO, "tensor parallelism: rank %d lost the driver", m->tp_self);
            break;
        }
    }
    atomic_store(&watch.stop, true);
    if (watching) pthread_join(watch_th, NULL);
    for (int i = 0; i < TP_WORKER_MAX_CTX; i++)
        if (ctxs[i].c) worker_ctx_free(ctxs[i].c);
    free(cols);
    return st;
}
