/* scheduler.c — continuous batching: request queue, admission, chunked prefill, preemption by
 * recompute, sampling and streaming callbacks (see scheduler.h). */
#include "sched/scheduler.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv_cache.h"
#include "model/model.h"
#include "model/spec.h"
#include "sched/grammar_vocab.h"
#include "util/util.h"
#include "backend/cpu/cpu.h" /* cpu_pool: the sample pool */
#include "util/knobs.h"
#include <unistd.h>

typedef struct sreq {
    uint64_t id;
    struct sreq *next;       /* queue / running list link */
    qr_sched_priority prio;
    int32_t *tokens;         /* [cap] prompt then generated ids */
    int32_t n_tokens, cap;
    int32_t n_prompt;
    int32_t n_computed;      /* positions in the KV cache (tokens[0..n_computed)) */
    int32_t seq;             /* sequence slot, -1 while waiting */
    uint64_t admit_order;    /* larger = admitted later (preemption victim order) */
    bool prompt_committed;   /* prompt blocks registered in the prefix cache */
    bool attached;           /* prefix-cache lookup done for the current admission */
    bool cancel_seen;        /* thread copy of cancel taken at the step snapshot */
    bool ignore_eos;
    bool cancel;             /* guarded by the scheduler's lock */
    double deadline;
    qr_sampler *smp;
    qr_stop *stop;
    qr_detok_stream *ds;
    qr_sched_callback cb;
    void *user;
    qr_sched_timing timing;
    /* reasoning budget (qr_sched_request.think_*) */
    bool think_limit;
    int8_t think_state;      /* 0 = undecided (reply not begun), 1 = inside the section, 2 = outside */
    int32_t think_budget, think_used;
    int32_t n_think_end, think_forced; /* think_forced: next forced index, -1 = not forcing */
    int32_t *think_end;      /* [n_think_end] */
    char think_open[32], think_close[32];
    char think_tail[64];     /* the last bytes of the reply (tags are found across tokens) */
    size_t think_tail_len;
    /* speculative decoding */
    bool spec;               /* the request asked for it and the scheduler has a qr_spec */
    int32_t max_tokens;      /* the request's max_tokens (draft length bound) */
    int32_t draft[QR_SPEC_DRAFT_MAX], n_draft; /* this step's draft (rows after the decode row) */
    int32_t row0;            /* this step's decode row in the batch */
} sreq;

typedef struct sjob {
    qr_status (*fn)(void *arg, qr_context *ctx);
    void *arg;
    qr_status result;
    bool done;
    struct sjob *next;
} sjob;

/* An event on its way to its callback on the dispatcher thread: a copy of what the scheduler sent (its strings
 * and sample result included: the request may be freed before it is delivered). */
typedef struct sev {
    qr_sched_callback cb;
    void *user;
    qr_sched_event ev;
    qr_sample_result sample;
    char *error;
    struct sev *next;
    char text[]; /* ev.text_len + 1 */
} sev;

/* A row's sampling done ahead (pre_sample_rows): what qr_sampler_verify returned. */
typedef struct pre_sample {
    bool done;
    qr_status st;
    qr_sample_result res;
    char err[256];
} pre_sample;

struct qr_scheduler {
    qr_model *model;
    qr_context *ctx;
    const qr_tokenizer *tok;
    qr_kv_cache *kv;
    qr_sched_params p;
    int32_t n_vocab, max_seq_len;
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;       /* wakes the scheduler thread */
    pthread_cond_t idle_cv;  /* signalled when work finishes (drain, jobs) */
    bool stopping, draining;
    uint64_t next_id, admit_counter;
    sreq *waiting[2];        /* per priority, FIFO (head) */
    int32_t n_waiting;
    sreq *running;           /* admitted requests (owned by the thread; list guarded by mu) */
    int32_t n_running;
    uint8_t *seq_busy;       /* [n_seq] */
    sjob *jobs;
    qr_sched_stats stats;
    pthread_mutex_t gv_mu;   /* guards the lazy build of gvocab */
    qr_grammar_vocab *gvocab;/* the vocabulary trie for grammar requests (built on first use) */
    /* step scratch (thread only) */
    int32_t *b_tok, *b_pos, *b_seq;
    int8_t *b_logits;
    sreq **b_req;            /* [step_tokens] request of each row that wants logits */
    int32_t b_cap;
    /* the sampling of a step's rows, done at once on the sample pool before they stream in order */
    cpu_pool *sample_pool;   /* NULL: one thread */
    pre_sample *pre;         /* [b_cap] */
    int32_t *pre_rows;       /* [b_cap] the rows sampled ahead */
    bool no_topk;            /* QUARREL_SAMPLE_TOPK=0: every sampled row's logits come back (no top-k rows) */
    bool prof;               /* QUARREL_HOST_PROF: where the steps' host time goes, logged every 256 steps */
    double prof_s[4];        /* plan, decode, sample ahead, stream */
    int64_t prof_steps, prof_rows, prof_topk;
    double prof_t_last;      /* the start of the last step that had only decode rows (0: the last step had others) */
    double prof_dec_s;       /* the time from one such step's start to the next's, summed */
    int64_t prof_dec_n;
    /* the dispatcher (QUARREL_SCHED_DISPATCH): a step's events are collected on the scheduler thread (loc_*), then
     * handed over (ev_*) to a thread that calls the callbacks in order while the next step runs */
    bool dispatch;
    pthread_t ev_thread;
    bool ev_started, ev_stop;  /* ev_stop: guarded by ev_mu */
    pthread_mutex_t ev_mu;
    pthread_cond_t ev_cv;      /* wakes the dispatcher */
    pthread_cond_t ev_room_cv; /* the dispatcher delivered some (the scheduler waits past ev_cap pending) */
    sev *ev_head, *ev_tail;    /* handed over, not yet taken by the dispatcher (ev_mu) */
    sev *loc_head, *loc_tail;  /* this step's (scheduler thread only) */
    int64_t ev_cap;
    _Atomic int64_t ev_pending;/* events made and not yet delivered */
};

void qr_sched_params_default(qr_sched_params *p) {
    memset(p, 0, sizeof *p);
    p->n_seq = 4;
    p->max_queue = 64;
    p->step_tokens = 512;
    p->prefill_chunk = 256;
    p->default_timeout_s = 300.0;
}

static void req_free(sreq *r) {
    if (!r) return;
    qr_sampler_free(r->smp);
    qr_stop_free(r->stop);
    qr_detok_stream_free(r->ds);
    free(r->think_end);
    free(r->tokens);
    free(r);
}

/* Hands this step's events to the dispatcher (scheduler thread, without the scheduler's lock); waits while more
 * than ev_cap are pending (callbacks slower than the steps). */
static void flush_events(qr_scheduler *s) {
    if (!s->loc_head) return;
    pthread_mutex_lock(&s->ev_mu);
    while (atomic_load(&s->ev_pending) > s->ev_cap && s->ev_head) pthread_cond_wait(&s->ev_room_cv, &s->ev_mu);
    if (s->ev_tail) s->ev_tail->next = s->loc_head;
    else s->ev_head = s->loc_head;
    s->ev_tail = s->loc_tail;
    pthread_cond_signal(&s->ev_cv);
    pthread_mutex_unlock(&s->ev_mu);
    s->loc_head = s->loc_tail = NULL;
}

/* Every event made so far delivered (the scheduler thread calls a callback itself only after this). */
static void drain_events(qr_scheduler *s) {
    flush_events(s);
    pthread_mutex_lock(&s->ev_mu);
    while (atomic_load(&s->ev_pending) > 0) pthread_cond_wait(&s->ev_room_cv, &s->ev_mu);
    pthread_mutex_unlock(&s->ev_mu);
}

/* ev for request r's callback: queued for the dispatcher, or (no dispatcher, or no memory for the copy) called
 * here once every earlier event is out. */
static void emit(qr_scheduler *s, sreq *r, const qr_sched_event *ev) {
    if (s->dispatch) {
        sev *e = malloc(sizeof *e + ev->text_len + 1);
        char *error = ev->error ? strdup(ev->error) : NULL;
        if (e && (!ev->error || error)) {
            e->cb = r->cb;
            e->user = r->user;
            e->ev = *ev;
            memcpy(e->text, ev->text, ev->text_len);
            e->text[ev->text_len] = 0;
            e->ev.text = e->text;
            e->error = error;
            e->ev.error = error;
            if (ev->sample) {
                e->sample = *ev->sample;
                e->ev.sample = &e->sample;
            }
            e->next = NULL;
            atomic_fetch_add(&s->ev_pending, 1);
            if (s->loc_tail) s->loc_tail->next = e;
            else s->loc_head = e;
            s->loc_tail = e;
            return;
        }
        free(e);
        free(error);
        drain_events(s);
    }
    r->cb(r->user, ev);
}

static void *ev_main(void *arg) {
    qr_scheduler *s = arg;
    pthread_mutex_lock(&s->ev_mu);
    for (;;) {
        while (!s->ev_head && !s->ev_stop) pthread_cond_wait(&s->ev_cv, &s->ev_mu);
        sev *list = s->ev_head;
        if (!list) break; /* stopping, and everything delivered */
        s->ev_head = s->ev_tail = NULL;
        pthread_mutex_unlock(&s->ev_mu);
        int64_t n = 0;
        while (list) {
            sev *e = list;
            list = e->next;
            e->cb(e->user, &e->ev);
            free(e->error);
            free(e);
            n++;
        }
        pthread_mutex_lock(&s->ev_mu);
        atomic_fetch_sub(&s->ev_pending, n);
        pthread_cond_broadcast(&s->ev_room_cv);
        pthread_mutex_unlock(&s->ev_mu);
        pthread_mutex_lock(&s->mu); /* qr_sched_drain waits for the events too */
        pthread_cond_broadcast(&s->idle_cv);
        pthread_mutex_unlock(&s->mu);
        pthread_mutex_lock(&s->ev_mu);
    }
    pthread_mutex_unlock(&s->ev_mu);
    return NULL;
}

/* Sends DONE and frees the request (the caller has released its sequence). */
static void finish(qr_scheduler *s, sreq *r, qr_sched_end end, qr_finish_reason reason, const char *error) {
    qr_stop_result sr = {0};
    qr_stop_flush(r->stop, reason == QR_FINISH_NONE ? QR_FINISH_STOP : reason, &sr);
    r->timing.t_end = qr_time_s();
    qr_sched_event ev = {.type = QR_SCHED_EV_DONE, .id = r->id, .token = -1, .text = sr.emit ? sr.emit : "",
                         .text_len = sr.emit_len, .finish = reason == QR_FINISH_NONE ? QR_FINISH_STOP : reason,
                         .end = end, .error = error, .timing = r->timing};
    pthread_mutex_lock(&s->mu);
    if (end == QR_SCHED_END_CANCELLED) s->stats.cancelled++;
    pthread_mutex_unlock(&s->mu);
    emit(s, r, &ev);
    req_free(r);
    pthread_mutex_lock(&s->mu);
    pthread_cond_broadcast(&s->idle_cv);
    pthread_mutex_unlock(&s->mu);
}

static void update_kv_stats(qr_scheduler *s);

/* Releases r's sequence slot and its KV blocks (thread only, r is on the running list); the
 * counters reflect it before the request's DONE event is sent. */
static void release_seq(qr_scheduler *s, sreq *r) {
    if (r->seq < 0) return;
    /* keep what was computed for later prompts with the same start */
    if (!s->p.no_prefix_cache && r->n_computed > 0)
        qr_kv_cache_prefix_commit(s->kv, r->seq, r->tokens, r->n_computed);
    qr_kv_seq_rm(s->ctx, r->seq, 0, -1);
    if (s->p.spec) qr_spec_seq_reset(s->p.spec, r->seq);
    pthread_mutex_lock(&s->mu);
    s->seq_busy[r->seq] = 0;
    sreq **pp = &s->running;
    while (*pp && *pp != r) pp = &(*pp)->next;
    if (*pp) *pp = r->next, s->n_running--;
    pthread_mutex_unlock(&s->mu);
    r->seq = -1;
    r->next = NULL;
    update_kv_stats(s);
}

/* Gives r's sampler a matcher of grammar g over the model's vocabulary trie (built once, on the
 * first grammar request, by whichever thread submits it). */
static qr_status attach_grammar(qr_scheduler *s, sreq *r, qr_grammar *g, char *err, size_t err_len) {
    qr_status st = QR_OK;
    pthread_mutex_lock(&s->gv_mu);
    if (!s->gvocab) st = qr_grammar_vocab_from_tokenizer(s->tok, &s->gvocab, err, err_len);
    pthread_mutex_unlock(&s->gv_mu);
    if (st != QR_OK) return st;
    qr_grammar_matcher *m = NULL;
    if ((st = qr_grammar_matcher_create(g, s->gvocab, &m, err, err_len)) != QR_OK) return st;
    qr_sampler_set_grammar(r->smp, m);
    return QR_OK;
}

/* Copies the reasoning budget of q into r. */
static qr_status think_setup(sreq *r, const qr_sched_request *q, int32_t n_vocab, char *err, size_t err_len) {
    r->think_forced = -1;
    if (!q->think_limit) return QR_OK;
    const char *open = q->think_open ? q->think_open : "<think>", *close = q->think_close ? q->think_close : "</think>";
    if (q->think_budget < 0 || q->n_think_end < 1 || !q->think_end || strlen(open) >= sizeof r->think_open ||
        strlen(close) >= sizeof r->think_close || !*open || !*close)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "request: bad reasoning budget or tags");
    for (int32_t i = 0; i < q->n_think_end; i++)
        if (q->think_end[i] < 0 || q->think_end[i] >= n_vocab)
            return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "request: think_end token outside the vocabulary");
    r->think_end = malloc(sizeof(int32_t) * (size_t)q->n_think_end);
    if (!r->think_end) return qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory");
    memcpy(r->think_end, q->think_end, sizeof(int32_t) * (size_t)q->n_think_end);
    r->n_think_end = q->n_think_end;
    r->think_limit = true;
    r->think_budget = q->think_budget;
    r->think_state = q->think_started ? 1 : 0;
    snprintf(r->think_open, sizeof r->think_open, "%s", open);
    snprintf(r->think_close, sizeof r->think_close, "%s", close);
    if (q->think_started && q->think_budget == 0) r->think_forced = 0;
    return QR_OK;
}

/* Follows the reply's text through the reasoning section (piece: the token's text) and starts forcing
 * the closing tokens when the budget is spent. */
static void think_track(sreq *r, const char *piece, size_t len) {
    if (!r->think_limit || r->think_state == 2) return;
    const bool was_inside = r->think_state == 1;
    /* keep the last bytes: enough for a tag split over tokens */
    const size_t cap = sizeof r->think_tail - 1;
    if (len >= cap) {
        memcpy(r->think_tail, piece + len - cap, cap);
        r->think_tail_len = cap;
    } else {
        if (r->think_tail_len + len > cap) {
            const size_t drop = r->think_tail_len + len - cap;
            memmove(r->think_tail, r->think_tail + drop, r->think_tail_len - drop);
            r->think_tail_len -= drop;
        }
        memcpy(r->think_tail + r->think_tail_len, piece, len);
        r->think_tail_len += len;
    }
    r->think_tail[r->think_tail_len] = 0;
    if (r->think_state == 0) {
        const char *t = r->think_tail;
        while (*t == ' ' || *t == '\n' || *t == '\t' || *t == '\r') t++;
        const size_t tl = strlen(t), ol = strlen(r->think_open);
        if (tl >= ol && !memcmp(t, r->think_open, ol)) {
            r->think_state = 1;
            memmove(r->think_tail, t + ol, tl - ol + 1);
            r->think_tail_len = tl - ol;
        } else if (tl > 0 && memcmp(t, r->think_open, tl < ol ? tl : ol)) {
            r->think_state = 2; /* the reply does not open with the tag */
            return;
        } else {
            return;
        }
    }
    if (strstr(r->think_tail, r->think_close)) {
        r->think_state = 2;
        return;
    }
    if (was_inside) r->think_used++;
    if (r->think_forced < 0 && r->think_used >= r->think_budget) r->think_forced = 0;
}

qr_status qr_sched_submit(qr_scheduler *s, const qr_sched_request *q, uint64_t *id, char *err, size_t err_len) {
    *id = 0;
    if (!q->cb || !q->prompt || q->n_prompt < 1 || q->max_tokens < 1 || q->n_stops < 0)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "request: empty prompt, max_tokens < 1 or no callback");
    if (q->n_prompt > qr_sched_max_prompt(s))
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG,
                       "the prompt is %d tokens but the context holds at most %d per request", q->n_prompt,
                       qr_sched_max_prompt(s));
    for (int32_t i = 0; i < q->n_prompt; i++)
        if (q->prompt[i] < 0 || q->prompt[i] >= s->n_vocab)
            return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "prompt token %d (%d) is outside the vocabulary [0, %d)",
                           i, q->prompt[i], s->n_vocab);
    qr_status st;
    sreq *r = calloc(1, sizeof *r);
    if (!r) return qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory");
    r->cap = q->n_prompt + (q->max_tokens < 1024 ? q->max_tokens : 1024) + 1;
    r->tokens = malloc(sizeof(int32_t) * (size_t)r->cap);
    r->ds = qr_detok_stream_create(s->tok, q->special_text);
    if (!r->tokens || !r->ds) {
        st = qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if ((st = think_setup(r, q, s->n_vocab, err, err_len)) != QR_OK) goto fail;
    if ((st = qr_sampler_create(&q->sampler, s->n_vocab, &r->smp, err, err_len)) != QR_OK) goto fail;
    if ((st = qr_stop_create(q->stops, q->n_stops, q->max_tokens, &r->stop, err, err_len)) != QR_OK) goto fail;
    if (q->grammar && (st = attach_grammar(s, r, q->grammar, err, err_len)) != QR_OK) goto fail;
    memcpy(r->tokens, q->prompt, sizeof(int32_t) * (size_t)q->n_prompt);
    r->n_tokens = r->n_prompt = q->n_prompt;
    for (int32_t i = 0; i < q->n_prompt; i++) qr_sampler_accept(r->smp, q->prompt[i]);
    r->seq = -1;
    r->prio = q->priority == QR_SCHED_BATCH ? QR_SCHED_BATCH : QR_SCHED_INTERACTIVE;
    r->ignore_eos = q->ignore_eos;
    r->spec = q->speculative && s->p.spec;
    r->max_tokens = q->max_tokens;
    r->cb = q->cb;
    r->user = q->user;
    r->timing.n_prompt = q->n_prompt;
    r->timing.t_submit = qr_time_s();
    r->deadline = r->timing.t_submit + (q->timeout_s > 0 ? q->timeout_s : s->p.default_timeout_s);
    pthread_mutex_lock(&s->mu);
    if (s->stopping || s->draining) {
        pthread_mutex_unlock(&s->mu);
        st = qr_errf(err, err_len, QR_ERR_SHUTDOWN, "the server is shutting down");
        goto fail;
    }
    if (s->n_waiting >= s->p.max_queue) {
        pthread_mutex_unlock(&s->mu);
        st = qr_errf(err, err_len, QR_ERR_BUSY, "queue full: %d requests are waiting", s->p.max_queue);
        goto fail;
    }
    r->id = ++s->next_id;
    sreq **pp = &s->waiting[r->prio];
    while (*pp) pp = &(*pp)->next;
    *pp = r;
    s->n_waiting++;
    *id = r->id;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return QR_OK;
fail:
    req_free(r);
    return st;
}

void qr_sched_cancel(qr_scheduler *s, uint64_t id) {
    pthread_mutex_lock(&s->mu);
    for (int p = 0; p < 2; p++)
        for (sreq *r = s->waiting[p]; r; r = r->next)
            if (r->id == id) r->cancel = true;
    for (sreq *r = s->running; r; r = r->next)
        if (r->id == id) r->cancel = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void qr_sched_cancel_all(qr_scheduler *s) {
    pthread_mutex_lock(&s->mu);
    for (int p = 0; p < 2; p++)
        for (sreq *r = s->waiting[p]; r; r = r->next) r->cancel = true;
    for (sreq *r = s->running; r; r = r->next) r->cancel = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* Appends a token to r->tokens (grows the array). */
static bool push_token(sreq *r, int32_t t) {
    if (r->n_tokens == r->cap) {
        const int32_t nc = r->cap * 2;
        int32_t *nt = realloc(r->tokens, sizeof(int32_t) * (size_t)nc);
        if (!nt) return false;
        r->tokens = nt;
        r->cap = nc;
    }
    r->tokens[r->n_tokens++] = t;
    return true;
}

/* Removes cancelled and timed-out requests from the waiting queues (under mu) into *out. */
static void collect_dead_waiting(qr_scheduler *s, double now, sreq **out) {
    for (int p = 0; p < 2; p++)
        for (sreq **pp = &s->waiting[p]; *pp;) {
            sreq *r = *pp;
            if (r->cancel || now > r->deadline || s->stopping) {
                r->cancel_seen = r->cancel;
                *pp = r->next;
                s->n_waiting--;
                r->next = *out;
                *out = r;
            } else {
                pp = &r->next;
            }
        }
}

/* Blocks needed to hold n positions. */
static int32_t blocks_for(const qr_kv_cache *kv, int32_t n) { return (n + kv->block_size - 1) / kv->block_size; }

/* Admits waiting requests into free slots, interactive first (under mu). A request is admitted only
 * when its whole prompt fits in the blocks available now, or when nothing runs (so that an
 * oversized request still starts and fails with a clear error instead of waiting forever). */
static void admit(qr_scheduler *s) {
    int32_t avail = qr_kv_cache_n_available(s->kv) - s->n_running; /* one growth block per running seq */
    for (int p = 0; p < 2; p++)
        while (s->waiting[p] && s->n_running < s->p.n_seq) {
            sreq *r = s->waiting[p];
            const int32_t need = blocks_for(s->kv, r->n_tokens + 1);
            if (s->n_running > 0 && need > avail) return;
            avail -= need;
            int32_t seq = 0;
            while (s->seq_busy[seq]) seq++;
            s->waiting[p] = r->next;
            s->n_waiting--;
            s->seq_busy[seq] = 1;
            r->seq = seq;
            r->attached = false;
            r->admit_order = ++s->admit_counter;
            r->next = s->running;
            s->running = r;
            s->n_running++;
        }
}

/* Puts a running request back at the front of its queue; its KV blocks are freed and its tokens
 * (prompt + generated) are computed again when it is admitted next. */
static void preempt(qr_scheduler *s, sreq *r) {
    release_seq(s, r);
    r->n_computed = 0;
    r->attached = false;
    pthread_mutex_lock(&s->mu);
    r->next = s->waiting[r->prio];
    s->waiting[r->prio] = r;
    s->n_waiting++;
    s->stats.preemptions++;
    pthread_mutex_unlock(&s->mu);
}

/* Blocks the kv cache must hand out to append k rows to r's sequence (with copy-on-write). */
static int32_t blocks_to_grow(const qr_scheduler *s, const sreq *r, int32_t k) {
    const qr_kv_cache *kv = s->kv;
    const int32_t have = kv->seq_blocks[r->seq];
    int32_t need = blocks_for(kv, r->n_computed + k) - have;
    if (need < 0) need = 0;
    const int32_t wblk = r->n_computed / kv->block_size;
    if (wblk < have) {
        const int32_t b = kv->block_table[(int64_t)r->seq * kv->max_blocks + wblk];
        if (kv->refcount[b] > 1 || (kv->prefix_on && kv->blk_cached[b])) need++;
    }
    return need;
}

static int cmp_admit(const void *a, const void *b) {
    const sreq *x = *(const sreq *const *)a, *y = *(const sreq *const *)b;
    return x->admit_order < y->admit_order ? -1 : x->admit_order > y->admit_order;
}

/* Samples row `row` for request r from its top-k candidates (qr_context_set_topk) where those give the sampler's
 * token exactly; false: sample from the logits. */
static bool sample_topk(qr_scheduler *s, sreq *r, int32_t row, qr_sample_result *res) {
    const float *vals;
    const int32_t *ids;
    int32_t k, n_fin;
    return qr_context_topk(s->ctx, row, &vals, &ids, &k, &n_fin) &&
           qr_sampler_sample_topk(r->smp, vals, ids, k, n_fin, res);
}

/* True while r's reasoning budget is spent and the end of its reasoning is being forced, a token a step. */
static bool forcing_end(const sreq *r) { return r->think_forced >= 0 && r->think_forced < r->n_think_end; }

/* Samples the next token of r from the logits of batch row `row`, streams it, and ends r when a
 * stop rule fires. Returns true when r ended (it is freed). draft >= 0: the row verifies drafted token
 * `draft` (qr_sampler_verify with the drafter's distribution q[0..n_q)); *accepted tells whether it stood. */
static bool sample_and_stream(qr_scheduler *s, sreq *r, int32_t row, int32_t draft, const qr_token_prob *q,
                              int32_t n_q, bool *accepted) {
    char err[512];
    const float *logits = NULL;
    qr_sample_result res;
    bool forced = false;
    pre_sample *pre = draft < 0 && !q && s->pre[row].done ? &s->pre[row] : NULL; /* sampled ahead */
    const char *why = err;
    bool ok = false, have = true;
    *accepted = false;
    const bool forcing = forcing_end(r);
    if (pre) {
        pre->done = false;
        ok = pre->st == QR_OK;
        res = pre->res;
        why = pre->err;
    } else if (draft < 0 && !q && !forcing && sample_topk(s, r, row, &res)) {
        ok = true;
    } else if ((logits = qr_get_logits(s->ctx, row)) == NULL) {
        have = false;
    } else {
        if (forcing) { /* the reasoning budget is spent */
            forced = qr_sampler_force(r->smp, logits, r->think_end[r->think_forced], &res, err, sizeof err) == QR_OK;
            r->think_forced = forced ? r->think_forced + 1 : r->n_think_end; /* a grammar that refuses: stop forcing */
            if (r->think_forced == r->n_think_end) r->think_state = 2;
        }
        ok = forced || qr_sampler_verify(r->smp, logits, draft, q, n_q, &res, accepted, err, sizeof err) == QR_OK;
    }
    if (!have || !ok) {
        release_seq(s, r);
        finish(s, r, QR_SCHED_END_ERROR, QR_FINISH_STOP, have ? why : "no logits for the sequence");
        return true;
    }
    if (!push_token(r, res.token)) {
        release_seq(s, r);
        finish(s, r, QR_SCHED_END_ERROR, QR_FINISH_STOP, "out of memory");
        return true;
    }
    r->timing.n_gen++;
    if (r->timing.t_first == 0) r->timing.t_first = qr_time_s();
    const bool eog = !r->ignore_eos && qr_token_is_eog(s->tok, res.token);
    const char *piece = "";
    size_t piece_len = 0;
    if (!eog && qr_detok_stream_push(r->ds, res.token, &piece, &piece_len) != QR_OK) piece = "", piece_len = 0;
    if (!forced) think_track(r, piece, piece_len);
    qr_stop_result sr;
    if (qr_stop_feed(r->stop, piece, piece_len, eog, &sr) != QR_OK) {
        release_seq(s, r);
        finish(s, r, QR_SCHED_END_ERROR, QR_FINISH_STOP, "out of memory");
        return true;
    }
    qr_sched_event ev = {.type = QR_SCHED_EV_TOKEN, .id = r->id, .token = res.token, .text = sr.emit ? sr.emit : "",
                         .text_len = sr.emit_len, .sample = &res, .timing = r->timing};
    emit(s, r, &ev);
    qr_finish_reason fin = sr.finish;
    if (fin == QR_FINISH_NONE && r->n_tokens >= s->max_seq_len) fin = QR_FINISH_LENGTH; /* context full */
    qr_grammar_matcher *gm = qr_sampler_grammar(r->smp);
    if (fin == QR_FINISH_NONE && gm && qr_grammar_matcher_done(gm)) fin = QR_FINISH_STOP; /* nothing can follow */
    if (fin != QR_FINISH_NONE) {
        release_seq(s, r);
        finish(s, r, QR_SCHED_END_FINISHED, fin, NULL);
        return true;
    }
    return false;
}

/* The rows [0, rows) of a step that sample one plain token (no draft to verify, no forced reasoning end), sampled
 * on the sample pool at once: each row is its own request's sampler (no state shared between rows), and
 * sample_and_stream then streams them in order with the results. */
typedef struct pre_args {
    qr_scheduler *s;
    const int32_t *rows; /* the rows to sample */
} pre_args;

static void pre_sample_range(void *arg, int64_t lo, int64_t hi, int ith) {
    (void)ith;
    const pre_args *a = arg;
    qr_scheduler *s = a->s;
    for (int64_t i = lo; i < hi; i++) {
        const int32_t row = a->rows[i];
        sreq *r = s->b_req[row];
        pre_sample *p = &s->pre[row];
        p->done = true;
        if (sample_topk(s, r, row, &p->res)) {
            p->st = QR_OK;
            continue;
        }
        const float *logits = qr_get_logits(s->ctx, row);
        bool acc;
        p->st = logits ? qr_sampler_verify(r->smp, logits, -1, NULL, 0, &p->res, &acc, p->err, sizeof p->err)
                       : QR_ERR_INTERNAL;
    }
}

static void pre_sample_rows(qr_scheduler *s, int32_t rows, int32_t *list) {
    if (!s->sample_pool) return;
    int32_t n = 0;
    for (int32_t row = 0; row < rows; row++) {
        const sreq *r = s->b_req[row];
        if (!r || r->n_draft > 0 || forcing_end(r)) continue;
        list[n++] = row;
    }
    if (n < 2) return; /* one row: sampled in turn */
    pre_args a = {.s = s, .rows = list};
    cpu_pool_for(s->sample_pool, n, 2, pre_sample_range, &a);
}

/* Drafts for the speculative requests among act[0..n) that decode this step (take[i] == 1 after their
 * last token): each draft is at most what the step's row budget, the request's remaining tokens and the
 * context leave; take[i] grows by the draft's length. A reasoning budget that is forcing tokens drafts
 * nothing. A drafter error only drops the draft. */
static void draft_all(qr_scheduler *s, sreq **act, int32_t n, int32_t *take, int32_t *budget) {
    char err[256];
    for (int32_t i = 0; i < n; i++) {
        sreq *r = act[i];
        if (!r) continue;
        r->n_draft = 0;
        if (!r->spec || take[i] != 1 || r->n_tokens - r->n_computed != 1 || r->think_forced >= 0 || *budget <= 0)
            continue;
        int32_t room = r->max_tokens - r->timing.n_gen - 1, ctx_room = s->max_seq_len - r->n_tokens - 1;
        if (room > ctx_room) room = ctx_room;
        if (room > *budget) room = *budget;
        const int32_t k = qr_spec_draft(s->p.spec, r->seq, r->tokens, r->n_tokens, room, r->smp, r->draft, err,
                                        sizeof err);
        if (k <= 0) continue;
        r->n_draft = k;
        take[i] += k;
        *budget -= k;
    }
}

/* Counts a verification of k drafted tokens of sequence seq of which n_acc stood (drafter and /metrics). */
static void count_spec(qr_scheduler *s, int32_t seq, int32_t k, int32_t n_acc) {
    qr_spec_count(s->p.spec, seq, k, n_acc);
    pthread_mutex_lock(&s->mu);
    s->stats.spec_drafted += (uint64_t)k;
    s->stats.spec_accepted += (uint64_t)n_acc;
    s->stats.spec_steps++;
    pthread_mutex_unlock(&s->mu);
}

/* Verifies r's draft after the pass: rows row0 .. row0 + n_draft, in order, until one is rejected (its
 * token is the target's own) or r ends; cuts r's KV back to the kept tokens. *n_reported: the tokens
 * reported. Returns true when r ended (it is freed). */
static bool verify_rows(qr_scheduler *s, sreq *r, uint64_t *n_reported) {
    const int32_t k = r->n_draft, seq = r->seq;
    int32_t n_acc = 0;
    for (int32_t i = 0; i <= k; i++) {
        int32_t n_q = 0;
        const qr_token_prob *q = i < k ? qr_spec_q(s->p.spec, seq, i, &n_q) : NULL;
        bool acc = false;
        r->timing.n_drafted += i == 0 ? k : 0;
        ++*n_reported;
        if (sample_and_stream(s, r, r->row0 + i, i < k ? r->draft[i] : -1, q, n_q, &acc)) {
            count_spec(s, seq, k, n_acc + acc);
            return true;
        }
        if (!acc) break;
        n_acc++;
        r->timing.n_accepted++;
    }
    r->n_computed += n_acc;
    qr_kv_seq_rm(s->ctx, seq, r->n_computed, -1);
    r->n_draft = 0;
    count_spec(s, seq, k, n_acc);
    return false;
}

/* The candidates a step's sampled rows need (qr_sampler_topk_need), 0 when a row needs its whole logits row. */
static int32_t topk_need(const qr_scheduler *s, int32_t rows) {
    int32_t k = 0;
    for (int32_t row = 0; row < rows; row++) {
        const sreq *r = s->b_req[row];
        if (!r) continue;
        const int32_t need = forcing_end(r) ? 0 : qr_sampler_topk_need(r->smp);
        if (need == 0) return 0;
        if (need > k) k = need;
    }
    return k;
}

/* One iteration over the running requests act[0..n) (sorted by admission). */
static void step(qr_scheduler *s, sreq **act, int32_t n) {
    int32_t *take = calloc((size_t)(n ? n : 1), sizeof(int32_t));
    if (!take) return;
    char err[512];
    double t_mark = s->prof ? qr_time_s() : 0.0;
    const double t_step = t_mark;
#define SPROF(i) \
    if (s->prof) qr_prof_lap(&s->prof_s[i], &t_mark)
    for (;;) {
        /* plan: decode rows first, then prompt chunks, oldest first */
        int32_t budget = s->p.step_tokens, grow = 0, n_live = 0;
        for (int32_t i = 0; i < n; i++) {
            take[i] = 0;
            if (!act[i]) continue;
            n_live++;
            if (act[i]->n_tokens - act[i]->n_computed == 1) take[i] = 1, budget--;
        }
        if (n_live == 0) break;
        draft_all(s, act, n, take, &budget);
        for (int32_t i = 0; i < n; i++) {
            if (!act[i] || take[i] || budget <= 0) continue;
            int32_t k = act[i]->n_tokens - act[i]->n_computed;
            if (k > s->p.prefill_chunk) k = s->p.prefill_chunk;
            if (k > budget) k = budget;
            take[i] = k;
            budget -= k;
        }
        for (int32_t i = 0; i < n; i++)
            if (act[i] && take[i]) grow += blocks_to_grow(s, act[i], take[i]);
        if (grow > qr_kv_cache_n_available(s->kv)) {
            /* preempt the most recently admitted request; the last one left ends instead */
            int32_t v = -1;
            for (int32_t i = n - 1; i >= 0 && v < 0; i--)
                if (act[i]) v = i;
            if (n_live > 1) {
                preempt(s, act[v]);
            } else {
                sreq *r = act[v];
                const bool gen = r->n_tokens > r->n_prompt;
                release_seq(s, r);
                if (gen) finish(s, r, QR_SCHED_END_FINISHED, QR_FINISH_LENGTH, NULL);
                else finish(s, r, QR_SCHED_END_ERROR, QR_FINISH_STOP, "the prompt does not fit in the KV cache");
            }
            act[v] = NULL;
            continue;
        }
        /* build the batch */
        int32_t rows = 0;
        bool any_draft = false, all_decode = true;
        for (int32_t i = 0; i < n; i++) {
            sreq *r = act[i];
            if (!r || !take[i]) continue;
            r->row0 = rows;
            for (int32_t j = 0; j < take[i]; j++, rows++) {
                const bool drafted = j > 0 && r->n_draft > 0; /* a draft row: verified after the pass */
                s->b_tok[rows] = drafted ? r->draft[j - 1] : r->tokens[r->n_computed + j];
                s->b_pos[rows] = r->n_computed + j;
                s->b_seq[rows] = r->seq;
                const bool last = r->n_draft > 0 ? j == 0 : j == take[i] - 1 && r->n_computed + take[i] == r->n_tokens;
                s->b_logits[rows] = last || drafted;
                s->b_req[rows] = last ? r : NULL;
            }
            if (r->n_draft == 0) all_decode = all_decode && take[i] == 1 && r->n_computed + 1 == r->n_tokens;
            any_draft = any_draft || r->n_draft > 0;
        }
        if (rows == 0) break;
        qr_batch b = {.n_tokens = rows, .token = s->b_tok, .pos = s->b_pos, .seq_id = s->b_seq, .logits = s->b_logits};
        /* draft rows verify bit for bit what one-row passes would compute, unless prompt rows share the pass
         * (their prefill would lose the multi-row kernels) or the step has more rows than the backend computes
         * row-exactly in one pass (CUDA: 8; a larger batched step is not one-row passes' arithmetic anyway) */
        const int32_t xr = qr_context_model(s->ctx)->be->caps.row_exact_rows;
        qr_context_set_row_exact(s->ctx, any_draft && all_decode && (xr == 0 || rows <= xr));
        const int32_t topk = any_draft || s->no_topk ? 0 : topk_need(s, rows);
        qr_context_set_topk(s->ctx, topk);
        s->prof_topk += topk > 0;
        SPROF(0);
        const qr_status st = qr_decode(s->ctx, &b, err, sizeof err);
        qr_context_set_row_exact(s->ctx, false);
        if (st == QR_OK && s->p.spec && qr_spec_observe(s->p.spec, &b, err, sizeof err) != QR_OK) /* drafts lost only */
            qr_log(QR_LOG_WARN, "speculative decoding: %s", err);
        if (s->p.step_hook) s->p.step_hook(s->p.step_hook_user); /* before the step's events */
        SPROF(1);
        uint64_t n_prompt_rows = 0, n_sampled = 0;
        for (int32_t i = 0; i < n; i++) {
            sreq *r = act[i];
            if (!r || !take[i]) continue;
            if (st != QR_OK) {
                if (qr_context_failed(s->ctx)) { /* the model cannot run any more: /readyz says so */
                    pthread_mutex_lock(&s->mu);
                    s->stats.alive = false;
                    pthread_mutex_unlock(&s->mu);
                }
                release_seq(s, r);
                finish(s, r, QR_SCHED_END_ERROR, QR_FINISH_STOP, err);
                act[i] = NULL;
                continue;
            }
            if (r->n_computed < r->n_prompt) n_prompt_rows += (uint64_t)take[i];
            r->n_computed += r->n_draft > 0 ? 1 : take[i]; /* draft rows count once they are kept */
            if (!r->prompt_committed && r->n_computed >= r->n_prompt && !s->p.no_prefix_cache) {
                qr_kv_cache_prefix_commit(s->kv, r->seq, r->tokens, r->n_prompt);
                r->prompt_committed = true;
            }
        }
        if (st == QR_OK) pre_sample_rows(s, rows, s->pre_rows);
        SPROF(2);
        if (st == QR_OK)
            for (int32_t row = 0; row < rows; row++) {
                sreq *r = s->b_req[row];
                if (!r) continue;
                bool acc, ended;
                if (r->n_draft > 0) {
                    ended = verify_rows(s, r, &n_sampled);
                } else {
                    n_sampled++;
                    ended = sample_and_stream(s, r, row, -1, NULL, 0, &acc);
                }
                if (ended)
                    for (int32_t i = 0; i < n; i++)
                        if (act[i] == r) act[i] = NULL;
            }
        for (int32_t row = 0; row < rows; row++) s->pre[row].done = false; /* (each was consumed above) */
        flush_events(s);
        SPROF(3);
        if (s->prof) {
            s->prof_rows += rows;
            if (all_decode && !any_draft) { /* a decode-only step: its start to the previous one's, when that was one */
                if (s->prof_t_last > 0.0) s->prof_dec_s += t_step - s->prof_t_last, s->prof_dec_n++;
                s->prof_t_last = t_step;
            } else {
                s->prof_t_last = 0.0;
            }
            if (++s->prof_steps % 256 == 0) {
                const double k = 1e6 / (double)s->prof_steps;
                fprintf(stderr, "quarrel: scheduler host profile, %lld steps of %.1f rows (us a step): plan %.1f, decode "
                        "%.1f, sample ahead %.1f, stream %.1f; %lld steps asked for top-k rows; decode-only steps one after another: "
                        "%lld, %.1f us start to start\n", (long long)s->prof_steps,
                        (double)s->prof_rows / (double)s->prof_steps, s->prof_s[0] * k, s->prof_s[1] * k,
                        s->prof_s[2] * k, s->prof_s[3] * k, (long long)s->prof_topk, (long long)s->prof_dec_n,
                        s->prof_dec_n ? s->prof_dec_s * 1e6 / (double)s->prof_dec_n : 0.0);
            }
        }
        pthread_mutex_lock(&s->mu);
        s->stats.steps++;
        s->stats.tokens_prompt += n_prompt_rows;
        s->stats.tokens_generated += n_sampled;
        pthread_mutex_unlock(&s->mu);
        break;
    }
    free(take);
#undef SPROF
}

static void update_kv_stats(qr_scheduler *s) {
    const qr_kv_cache *kv = s->kv;
    pthread_mutex_lock(&s->mu);
    s->stats.kv_blocks_total = kv->n_blocks;
    s->stats.kv_blocks_free = qr_kv_cache_n_available(kv);
    s->stats.kv_blocks_used = kv->n_blocks - kv->n_free - (kv->prefix_on ? kv->n_lru : 0);
    s->stats.kv_blocks_cached = kv->prefix_on ? kv->n_cached : 0;
    s->stats.kv_block_size = kv->block_size;
    s->stats.queue_depth = s->n_waiting;
    s->stats.running = s->n_running;
    pthread_mutex_unlock(&s->mu);
}

static void *thread_main(void *arg) {
    qr_scheduler *s = arg;
    sreq **act = malloc(sizeof(sreq *) * (size_t)s->p.n_seq);
    for (;;) {
        sreq *dead = NULL;
        pthread_mutex_lock(&s->mu);
        while (!s->stopping && !s->n_running && !s->n_waiting && !s->jobs) pthread_cond_wait(&s->cv, &s->mu);
        const double now = qr_time_s();
        const bool stopping = s->stopping;
        collect_dead_waiting(s, now, &dead);
        sjob *jobs = s->jobs;
        s->jobs = NULL;
        if (!stopping) admit(s);
        int32_t n = 0;
        for (sreq *r = s->running; r && n < s->p.n_seq; r = r->next) {
            r->cancel_seen = r->cancel;
            act[n++] = r;
        }
        pthread_mutex_unlock(&s->mu);
        while (dead) {
            sreq *r = dead;
            dead = r->next;
            finish(s, r, stopping ? QR_SCHED_END_SHUTDOWN : r->cancel_seen ? QR_SCHED_END_CANCELLED : QR_SCHED_END_TIMEOUT,
                   QR_FINISH_STOP, NULL);
        }
        for (sjob *j = jobs; j;) {
            sjob *next = j->next;
            const qr_status res = stopping ? QR_ERR_SHUTDOWN : j->fn(j->arg, s->ctx);
            pthread_mutex_lock(&s->mu);
            j->result = res;
            j->done = true;
            pthread_cond_broadcast(&s->idle_cv);
            pthread_mutex_unlock(&s->mu);
            j = next;
        }
        qsort(act, (size_t)n, sizeof *act, cmp_admit);
        for (int32_t i = 0; i < n; i++) {
            sreq *r = act[i];
            qr_sched_end end = QR_SCHED_END_FINISHED;
            if (stopping) end = QR_SCHED_END_SHUTDOWN;
            else if (r->cancel_seen) end = QR_SCHED_END_CANCELLED;
            else if (now > r->deadline) end = QR_SCHED_END_TIMEOUT;
            if (end != QR_SCHED_END_FINISHED) {
                release_seq(s, r);
                finish(s, r, end, QR_FINISH_STOP, NULL);
                act[i] = NULL;
                continue;
            }
            if (!r->attached) {
                r->attached = true;
                if (r->timing.t_admit == 0) r->timing.t_admit = now;
                int32_t got = 0;
                if (!s->p.no_prefix_cache) got = qr_kv_cache_prefix_attach(s->kv, r->seq, r->tokens, r->n_tokens);
                r->n_computed = got;
                if (got > 0 && r->n_tokens == r->n_prompt) {
                    if (r->timing.n_cached == 0) r->timing.n_cached = got;
                    pthread_mutex_lock(&s->mu);
                    s->stats.prefix_hits++;
                    s->stats.prefix_tokens_reused += (uint64_t)got;
                    pthread_mutex_unlock(&s->mu);
                }
            }
        }
        if (stopping) {
            update_kv_stats(s);
            flush_events(s);
            break;
        }
        flush_events(s); /* the ends found above */
        step(s, act, n);
        update_kv_stats(s);
        flush_events(s);
    }
    free(act);
    return NULL;
}

qr_status qr_sched_create(qr_model *model, qr_context *ctx, const qr_tokenizer *tok, const qr_sched_params *params,
                          qr_scheduler **out, char *err, size_t err_len) {
    *out = NULL;
    qr_sched_params p;
    qr_sched_params_default(&p);
    if (params) {
        if (params->n_seq > 0) p.n_seq = params->n_seq;
        if (params->max_queue > 0) p.max_queue = params->max_queue;
        if (params->step_tokens > 0) p.step_tokens = params->step_tokens;
        if (params->prefill_chunk > 0) p.prefill_chunk = params->prefill_chunk;
        if (params->default_timeout_s > 0) p.default_timeout_s = params->default_timeout_s;
        p.no_prefix_cache = params->no_prefix_cache;
        p.spec = params->spec;
        p.step_hook = params->step_hook;
        p.step_hook_user = params->step_hook_user;
        p.dispatch = params->dispatch;
    }
    const int64_t step_knob = qr_knob_int(QR_KNOB_STEP_TOKENS);
    if (step_knob > 0) p.step_tokens = (int32_t)step_knob;
    if (p.step_tokens < p.n_seq) p.step_tokens = p.n_seq; /* every sequence's decode row fits a step */
    if (p.n_seq > 4096)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "scheduler: n_seq %d must be <= 4096", p.n_seq);
    qr_scheduler *s = calloc(1, sizeof *s);
    if (!s) return qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory");
    s->model = model;
    s->ctx = ctx;
    s->tok = tok;
    s->kv = qr_context_kv_cache(ctx);
    s->p = p;
    s->n_vocab = qr_model_n_vocab(model);
    s->max_seq_len = s->kv->max_blocks * s->kv->block_size;
    if (s->max_seq_len > qr_context_n_ctx(ctx)) s->max_seq_len = qr_context_n_ctx(ctx);
    if (s->kv->n_seq_max < p.n_seq) {
        const int32_t have = s->kv->n_seq_max;
        free(s);
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "scheduler: n_seq %d exceeds the context's n_seq_max %d",
                       p.n_seq, have);
    }
    qr_status st;
    if (!p.no_prefix_cache && (st = qr_kv_cache_prefix_enable(s->kv, err, err_len)) != QR_OK) {
        free(s);
        return st;
    }
    s->b_cap = p.step_tokens + p.n_seq * (p.spec ? QR_SPEC_DRAFT_MAX : 0);
    s->b_tok = malloc(sizeof(int32_t) * (size_t)s->b_cap);
    s->b_pos = malloc(sizeof(int32_t) * (size_t)s->b_cap);
    s->b_seq = malloc(sizeof(int32_t) * (size_t)s->b_cap);
    s->b_logits = malloc((size_t)s->b_cap);
    s->b_req = malloc(sizeof(sreq *) * (size_t)s->b_cap);
    s->pre = calloc((size_t)s->b_cap, sizeof *s->pre);
    s->pre_rows = malloc(sizeof(int32_t) * (size_t)s->b_cap);
    s->prof = qr_knob_int(QR_KNOB_HOST_PROF) != 0;
    s->no_topk = qr_knob_int(QR_KNOB_SAMPLE_TOPK) == 0;
    { /* the sample pool: up to 8 threads, only when rows come in numbers */
        const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        const int knob = (int)qr_knob_int(QR_KNOB_SAMPLE_THREADS);
        const int nt = knob > 0 ? knob : ncpu > 8 ? 8 : (int)ncpu;
        if (nt > 1 && p.n_seq >= 2) s->sample_pool = cpu_pool_create(nt);
    }
    s->seq_busy = calloc((size_t)p.n_seq, 1);
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->gv_mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_cond_init(&s->idle_cv, NULL);
    s->stats.n_seq = p.n_seq;
    s->stats.alive = true;
    const int32_t dk = p.dispatch ? p.dispatch : qr_knob_int(QR_KNOB_SCHED_DISPATCH); /* -1 knob: where on a GPU */
    s->dispatch = p.dispatch ? p.dispatch > 0 : dk > 0 || (dk < 0 && strcmp(qr_model_backend_name(model), "cpu") != 0);
    s->ev_cap = 64 * (int64_t)p.n_seq + 1024;
    pthread_mutex_init(&s->ev_mu, NULL);
    pthread_cond_init(&s->ev_cv, NULL);
    pthread_cond_init(&s->ev_room_cv, NULL);
    if (s->dispatch) {
        if (pthread_create(&s->ev_thread, NULL, ev_main, s) != 0) {
            qr_sched_free(s);
            return qr_errf(err, err_len, QR_ERR_INTERNAL, "scheduler: cannot start its dispatcher thread");
        }
        s->ev_started = true;
    }
    if (!s->b_tok || !s->b_pos || !s->b_seq || !s->b_logits || !s->b_req || !s->seq_busy || !s->pre || !s->pre_rows) {
        qr_sched_free(s);
        return qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory");
    }
    update_kv_stats(s);
    if (pthread_create(&s->thread, NULL, thread_main, s) != 0) {
        qr_sched_free(s);
        return qr_errf(err, err_len, QR_ERR_INTERNAL, "scheduler: cannot start its thread");
    }
    s->thread_started = true;
    *out = s;
    return QR_OK;
}

void qr_sched_free(qr_scheduler *s) {
    if (!s) return;
    if (s->thread_started) {
        pthread_mutex_lock(&s->mu);
        s->stopping = true;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
    }
    if (s->ev_started) { /* every event out first */
        pthread_mutex_lock(&s->ev_mu);
        s->ev_stop = true;
        pthread_cond_signal(&s->ev_cv);
        pthread_mutex_unlock(&s->ev_mu);
        pthread_join(s->ev_thread, NULL);
    }
    pthread_mutex_destroy(&s->ev_mu);
    pthread_cond_destroy(&s->ev_cv);
    pthread_cond_destroy(&s->ev_room_cv);
    cpu_pool_free(s->sample_pool);
    free(s->pre);
    free(s->pre_rows);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->gv_mu);
    qr_grammar_vocab_free(s->gvocab);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->idle_cv);
    free(s->b_tok);
    free(s->b_pos);
    free(s->b_seq);
    free(s->b_logits);
    free(s->b_req);
    free(s->seq_busy);
    free(s);
}

qr_status qr_sched_run_job(qr_scheduler *s, qr_status (*fn)(void *arg, qr_context *ctx), void *arg) {
    sjob j = {.fn = fn, .arg = arg};
    pthread_mutex_lock(&s->mu);
    if (s->stopping) {
        pthread_mutex_unlock(&s->mu);
        return QR_ERR_SHUTDOWN;
    }
    sjob **pp = &s->jobs;
    while (*pp) pp = &(*pp)->next;
    *pp = &j;
    pthread_cond_signal(&s->cv);
    while (!j.done) pthread_cond_wait(&s->idle_cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    return j.result;
}

int32_t qr_sched_drain(qr_scheduler *s, double timeout_s) {
    const double end = qr_time_s() + timeout_s;
    pthread_mutex_lock(&s->mu);
    s->draining = true;
    while ((s->n_running + s->n_waiting > 0 || atomic_load(&s->ev_pending) > 0) && qr_time_s() < end) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&s->idle_cv, &s->mu, &ts);
    }
    int32_t left = s->n_running + s->n_waiting;
    if (left == 0 && atomic_load(&s->ev_pending) > 0) left = 1; /* every request ended, some DONE not yet delivered */
    pthread_mutex_unlock(&s->mu);
    return left;
}

void qr_sched_get_stats(qr_scheduler *s, qr_sched_stats *out) {
    pthread_mutex_lock(&s->mu);
    *out = s->stats;
    /* a tensor-parallel rank lost mid-step: not alive although the step may still be waiting on the device */
    if (s->ctx && qr_context_failed(s->ctx)) out->alive = false;
    out->queue_depth = s->n_waiting;
    out->running = s->n_running;
    pthread_mutex_unlock(&s->mu);
}

int32_t qr_sched_max_prompt(const qr_scheduler *s) { return s->max_seq_len - 1; }
