/* scheduler.h — iteration-level continuous batching over one qr_context.
 *
 * One scheduler thread owns the context (it alone calls qr_decode). Requests are submitted from
 * any thread into a bounded two-priority queue (interactive before batch, FIFO within a priority).
 * Every step the thread:
 *   1. drops cancelled / timed-out requests (their sequence's KV blocks are released at once),
 *   2. admits waiting requests into free sequence slots (a prompt that shares full blocks with an
 *      earlier one takes them from the prefix cache and skips their prefill),
 *   3. builds one batch: one row per decoding sequence, then prompt chunks of at most
 *      prefill_chunk rows per sequence until step_tokens rows (chunked prefill keeps the decode
 *      latency of running requests bounded while long prompts are computed),
 *   4. when the KV cache cannot hold the step, preempts the most recently admitted request
 *      (its blocks are freed, it goes back to the front of the queue and is recomputed later),
 *   5. runs qr_decode, samples every sequence that produced logits, detokenizes, applies stop rules
 *      and reports tokens through the request's callback.
 * A speculative request's decode row is followed by its draft's rows (drafted before the batch is built);
 * after the pass its rows are verified in order (rejection sampling, qr_sampler_verify), each kept token is
 * reported as a sampled one, and the sequence's KV is cut back past the first rejection. A pass with draft
 * rows and no prompt rows is row-exact (each row as a one-row pass computes it).
 *
 * Callbacks run on the scheduler's dispatcher thread (QUARREL_SCHED_DISPATCH=0: the scheduler thread),
 * one at a time, each request's events in order, while the scheduler thread runs the next step; never under
 * the scheduler's lock, and they must not block: they copy what they need (the event's pointers live until
 * the callback returns). After the QR_SCHED_EV_DONE event of a request, the scheduler never touches its
 * callback or user pointer again; every accepted request gets exactly one DONE event, and qr_sched_free
 * delivers every event before it returns.
 */
#ifndef QR_SCHED_SCHEDULER_H
#define QR_SCHED_SCHEDULER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quarrel.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

typedef struct qr_scheduler qr_scheduler;

typedef enum qr_sched_priority {
    QR_SCHED_INTERACTIVE = 0, /* served first */
    QR_SCHED_BATCH = 1,
} qr_sched_priority;

typedef struct qr_sched_params {
    int32_t n_seq;           /* concurrent sequences (<= the context's n_seq_max); 0 = 4 */
    int32_t max_queue;       /* waiting requests before submit refuses; 0 = 64 */
    int32_t step_tokens;     /* batch rows per step (decode + prefill); 0 = 512 */
    int32_t prefill_chunk;   /* prompt rows per sequence per step; 0 = 256 */
    bool no_prefix_cache;    /* disable prefix caching */
    qr_spec *spec;           /* speculative decoding for the requests that ask for it (made for the same
                              * context; owned by the caller, outlives the scheduler); NULL = none */
    double default_timeout_s;/* request timeout when the request gives none; 0 = 300 s */
    /* called on the scheduler thread after each step, before that step's events go out (the server syncs the
     * context's MoE / SSM counters there); NULL = none */
    void (*step_hook)(void *user);
    void *step_hook_user;
    int32_t dispatch;        /* 1: callbacks on the dispatcher thread; -1: on the scheduler thread between steps;
                              * 0: QUARREL_SCHED_DISPATCH's choice (by default the dispatcher where the model runs on a
                              * GPU) */
} qr_sched_params;

typedef enum qr_sched_event_type {
    QR_SCHED_EV_TOKEN = 1, /* one generated token */
    QR_SCHED_EV_DONE = 2,  /* the request ended (always the last event) */
} qr_sched_event_type;

typedef enum qr_sched_end {
    QR_SCHED_END_FINISHED = 0,  /* stop string, end-of-generation token, max_tokens or context full */
    QR_SCHED_END_CANCELLED = 1, /* qr_sched_cancel */
    QR_SCHED_END_TIMEOUT = 2,   /* the request's timeout passed */
    QR_SCHED_END_ERROR = 3,     /* decode or sampling failed; see error */
    QR_SCHED_END_SHUTDOWN = 4,  /* the scheduler was freed before the request finished */
} qr_sched_end;

/* Counts and times of one request (times on the qr_time_s clock, seconds; 0 = not reached). */
typedef struct qr_sched_timing {
    int32_t n_prompt;     /* prompt tokens */
    int32_t n_cached;     /* prompt tokens taken from the prefix cache (first admission) */
    int32_t n_gen;        /* tokens generated so far */
    double t_submit;      /* accepted by qr_sched_submit */
    double t_admit;       /* first given a sequence slot */
    double t_first;       /* first token sampled (end of prefill) */
    double t_end;         /* DONE */
    int32_t n_drafted;    /* speculative decoding: drafted tokens verified */
    int32_t n_accepted;   /* of which the target kept */
} qr_sched_timing;

typedef struct qr_sched_event {
    qr_sched_event_type type;
    uint64_t id;                   /* the request */
    int32_t token;                 /* TOKEN: the sampled id */
    const char *text;              /* TOKEN: text now safe to emit (may be empty); DONE: the last of it */
    size_t text_len;
    const qr_sample_result *sample;/* TOKEN: logprob of the token (+ alternatives when asked) */
    qr_finish_reason finish;       /* DONE: stop / length (QR_FINISH_STOP for cancel/timeout/error) */
    qr_sched_end end;              /* DONE */
    const char *error;             /* DONE with QR_SCHED_END_ERROR: message */
    qr_sched_timing timing;
} qr_sched_event;

typedef void (*qr_sched_callback)(void *user, const qr_sched_event *ev);

typedef struct qr_sched_request {
    const qr_token *prompt;    /* [n_prompt] ids (copied), n_prompt >= 1 */
    int32_t n_prompt;
    qr_sampler_params sampler; /* validated at submit */
    const char *const *stops;  /* [n_stops] stop strings (copied) */
    int32_t n_stops;
    int32_t max_tokens;        /* > 0; generation also ends when the sequence fills the context */
    bool ignore_eos;           /* keep going through end-of-generation tokens */
    qr_grammar *grammar;       /* NULL, or a grammar the output must follow (the request takes its own
                                  reference); the generation ends when the grammar can take nothing
                                  more; the model's vocabulary trie is built on the first use */
    bool special_text;         /* the event text shows control tokens (<|channel|>, [TOOL_CALLS], ...) */
    bool speculative;          /* decode with the scheduler's qr_spec (ignored without one): each step of the
                                  sequence verifies a draft in the shared batch (its rows next to the other
                                  sequences' rows) and rolls its KV back past the first rejection */
    /* Reasoning budget (when think_limit): think_budget >= 0 tokens may be generated inside a reasoning
     * section (opened by think_open at the start of the reply, or by the prompt when think_started)
     * before the scheduler forces think_end (the token ids of the closing tag) as the next tokens.
     * Forced tokens go through the grammar when there is one (a grammar that refuses them ends the
     * forcing). */
    bool think_limit;
    int32_t think_budget;
    const char *think_open;    /* NULL = "<think>" */
    const char *think_close;   /* NULL = "</think>" (how the section's end is recognized in the text) */
    bool think_started;
    const qr_token *think_end; /* [n_think_end] (copied) */
    int32_t n_think_end;
    qr_sched_priority priority;
    double timeout_s;          /* <= 0: the scheduler's default */
    qr_sched_callback cb;      /* required */
    void *user;
} qr_sched_request;

/* Counters for /metrics (a consistent snapshot). */
typedef struct qr_sched_stats {
    int32_t queue_depth;          /* waiting requests */
    int32_t running;              /* requests holding a sequence */
    int32_t n_seq;                /* sequence slots */
    int32_t kv_blocks_total;
    int32_t kv_blocks_used;       /* held by sequences */
    int32_t kv_blocks_free;       /* allocatable now (free + evictable cached) */
    int32_t kv_blocks_cached;     /* registered in the prefix cache (in use or evictable) */
    int32_t kv_block_size;        /* tokens per block */
    uint64_t prefix_hits;         /* requests that reused at least one cached block */
    uint64_t prefix_tokens_reused;/* prompt tokens not computed thanks to the cache */
    uint64_t preemptions;         /* requests preempted (recomputed later) */
    uint64_t steps;               /* qr_decode calls */
    uint64_t tokens_prompt;       /* prompt rows computed */
    uint64_t tokens_generated;    /* tokens sampled */
    uint64_t cancelled;           /* requests ended by cancel */
    uint64_t spec_drafted;        /* speculative decoding: drafted tokens verified */
    uint64_t spec_accepted;       /* drafted tokens kept */
    uint64_t spec_steps;          /* verifications (sequence steps that had a draft) */
    bool alive;                   /* the thread runs */
} qr_sched_stats;

/* Fills *p with the defaults documented above. */
void qr_sched_params_default(qr_sched_params *p);

/* Starts a scheduler thread over ctx (which must have n_seq_max >= params.n_seq and must not be used
 * by anyone else while the scheduler lives). model, ctx and tok stay owned by the caller and must
 * outlive the scheduler. */
qr_status qr_sched_create(qr_model *model, qr_context *ctx, const qr_tokenizer *tok, const qr_sched_params *params,
                          qr_scheduler **out, char *err, size_t err_len);

/* Stops the thread: running and waiting requests get DONE with QR_SCHED_END_SHUTDOWN. */
void qr_sched_free(qr_scheduler *s);

/* Queues a request; *id receives its id (> 0). Errors: QR_ERR_INVALID_ARG (bad params, a prompt
 * longer than the context can hold; message says which), QR_ERR_BUSY when max_queue requests
 * already wait (the caller answers 503), QR_ERR_SHUTDOWN when the scheduler is draining or
 * stopping. On error no callback is ever made. */
qr_status qr_sched_submit(qr_scheduler *s, const qr_sched_request *r, uint64_t *id, char *err, size_t err_len);

/* Asks the scheduler to end request id (DONE with QR_SCHED_END_CANCELLED follows from the thread,
 * its KV blocks are released before the next step). Unknown or finished ids are ignored. */
void qr_sched_cancel(qr_scheduler *s, uint64_t id);

/* Cancels every running and waiting request (each gets DONE with QR_SCHED_END_CANCELLED). */
void qr_sched_cancel_all(qr_scheduler *s);

/* Runs fn(arg, ctx) on the scheduler thread between two steps (for work that needs the context,
 * such as embeddings) and waits for it. Returns fn's status, or QR_ERR_SHUTDOWN when the
 * scheduler is stopping. */
qr_status qr_sched_run_job(qr_scheduler *s, qr_status (*fn)(void *arg, qr_context *ctx), void *arg);

/* Stops accepting requests and waits up to timeout_s for the running and waiting ones to finish;
 * returns the number still unfinished (they keep running until qr_sched_free). */
int32_t qr_sched_drain(qr_scheduler *s, double timeout_s);

/* Snapshot of the counters. */
void qr_sched_get_stats(qr_scheduler *s, qr_sched_stats *out);

/* Longest prompt (tokens) a request may have: the per-sequence context minus one. */
int32_t qr_sched_max_prompt(const qr_scheduler *s);

#endif /* QR_SCHED_SCHEDULER_H */
