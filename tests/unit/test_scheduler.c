/* test_scheduler.c — continuous batching on a synthetic tiny llama: concurrent greedy requests give
 * the tokens of a plain one-sequence decode loop, cancellation frees the KV blocks, the queue is
 * bounded, the prefix cache skips a shared prompt prefix, and preemption under KV pressure still
 * gives the right tokens. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "model/model.h"
#include "kv/kv_cache.h"
#include "sampling/sampler.h"
#include "sched/scheduler.h"
#include "convert/synth.h"
#include "model/spec.h"
#include "tokenizer/tokenizer.h"
#include "util/util.h"

#define MAX_GEN 64

typedef struct fixture {
    char path[64], head_path[64];
    qr_model *model;
    qr_model *head; /* an EAGLE-3 head for model (random weights) */
    qr_tokenizer *tok;
} fixture;

static fixture F;

/* Collects one request's events. */
typedef struct result {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t tokens[MAX_GEN];
    int32_t n;
    bool done;
    qr_sched_end end;
    qr_finish_reason finish;
    qr_sched_timing timing;
} result;

static void on_event(void *user, const qr_sched_event *ev) {
    result *r = user;
    pthread_mutex_lock(&r->mu);
    if (ev->type == QR_SCHED_EV_TOKEN && r->n < MAX_GEN) r->tokens[r->n++] = ev->token;
    if (ev->type == QR_SCHED_EV_DONE) {
        r->done = true;
        r->end = ev->end;
        r->finish = ev->finish;
        r->timing = ev->timing;
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
}

/* Where each event of a request ran (test_event_threads) */
typedef struct thread_log {
    pthread_mutex_t mu;
    pthread_t hook_thread; /* the step hook's (the scheduler thread) */
    int hooks;
    int n_cb, n_on_hook_thread, after_done;
    bool done;
    int32_t tokens[MAX_GEN];
    int32_t n;
} thread_log;

static void log_hook(void *user) {
    thread_log *t = user;
    pthread_mutex_lock(&t->mu);
    t->hook_thread = pthread_self();
    t->hooks++;
    pthread_mutex_unlock(&t->mu);
}

static void log_event(void *user, const qr_sched_event *ev) {
    thread_log *t = user;
    pthread_mutex_lock(&t->mu);
    t->n_cb++;
    t->n_on_hook_thread += t->hooks > 0 && pthread_equal(t->hook_thread, pthread_self());
    t->after_done += t->done;
    if (ev->type == QR_SCHED_EV_TOKEN && t->n < MAX_GEN) t->tokens[t->n++] = ev->token;
    if (ev->type == QR_SCHED_EV_DONE) t->done = true;
    pthread_mutex_unlock(&t->mu);
}

static void result_init(result *r) {
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
}

static void result_wait(result *r) {
    pthread_mutex_lock(&r->mu);
    while (!r->done) pthread_cond_wait(&r->cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
}

/* A deterministic prompt of n tokens (ids >= 300 avoid the specials and byte tokens). */
static void make_prompt(int32_t *p, int32_t n, uint32_t seed) {
    for (int32_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = 300 + (int32_t)((seed >> 8) % 1000);
    }
}

/* Greedy reference: a fresh one-sequence context, prompt in one batch, then one token at a time. */
static int32_t reference(const int32_t *prompt, int32_t n_prompt, int32_t n_gen, int32_t *out) {
    qr_context_params cp = qr_context_default_params();
    cp.n_ctx = 512;
    qr_context *ctx;
    char err[256];
    assert_int_equal(qr_context_create(F.model, &cp, &ctx, err, sizeof err), QR_OK);
    qr_batch b = {.n_tokens = n_prompt, .token = prompt};
    assert_int_equal(qr_decode(ctx, &b, err, sizeof err), QR_OK);
    int32_t n = 0;
    for (; n < n_gen; n++) {
        const float *l = qr_get_logits(ctx, -1);
        int32_t best = 0;
        for (int32_t v = 1; v < qr_model_n_vocab(F.model); v++)
            if (l[v] > l[best]) best = v;
        out[n] = best;
        qr_batch nb = {.n_tokens = 1, .token = &out[n]};
        assert_int_equal(qr_decode(ctx, &nb, err, sizeof err), QR_OK);
    }
    qr_context_free(ctx);
    return n;
}

static qr_context *make_ctx(int32_t n_ctx, int32_t n_seq) {
    qr_context_params cp = qr_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_seq_max = n_seq;
    char err[256];
    qr_context *ctx;
    assert_int_equal(qr_context_create(F.model, &cp, &ctx, err, sizeof err), QR_OK);
    return ctx;
}

static qr_scheduler *make_sched(int32_t n_ctx, int32_t n_seq, int32_t max_queue, int32_t chunk, qr_context **ctx) {
    *ctx = make_ctx(n_ctx, n_seq);
    char err[256];
    qr_sched_params sp;
    qr_sched_params_default(&sp);
    sp.n_seq = n_seq;
    sp.max_queue = max_queue;
    sp.prefill_chunk = chunk;
    qr_scheduler *s;
    assert_int_equal(qr_sched_create(F.model, *ctx, F.tok, &sp, &s, err, sizeof err), QR_OK);
    return s;
}

static uint64_t submit(qr_scheduler *s, const int32_t *prompt, int32_t n, int32_t max_tokens, result *r) {
    qr_sched_request q = {.prompt = prompt, .n_prompt = n, .max_tokens = max_tokens, .ignore_eos = true,
                          .cb = on_event, .user = r};
    qr_sampler_params_greedy(&q.sampler);
    uint64_t id;
    char err[256];
    assert_int_equal(qr_sched_submit(s, &q, &id, err, sizeof err), QR_OK);
    return id;
}

static int setup(void **state) {
    (void)state;
    snprintf(F.path, sizeof F.path, "/tmp/quarrel_test_sched_XXXXXX");
    int fd = mkstemp(F.path);
    assert_true(fd >= 0);
    close(fd);
    qr_synth_options o = {.arch = "llama", .preset = "tiny", .type = "F16", .seed = 7, .n_threads = 2};
    char err[256];
    assert_int_equal(qr_synth_write(&o, F.path, NULL, err, sizeof err), QR_OK);
    qr_model_params mp = qr_model_default_params();
    mp.n_threads = 2;
    assert_int_equal(qr_model_load(F.path, &mp, &F.model, err, sizeof err), QR_OK);
    assert_int_equal(qr_tokenizer_create(qr_model_gguf(F.model), &F.tok, err, sizeof err), QR_OK);
    snprintf(F.head_path, sizeof F.head_path, "/tmp/quarrel_test_sched_XXXXXX");
    fd = mkstemp(F.head_path);
    assert_true(fd >= 0);
    close(fd);
    qr_synth_options h = {.arch = "eagle3", .preset = "tiny", .type = "F16", .seed = 8, .n_threads = 2};
    assert_int_equal(qr_synth_write(&h, F.head_path, NULL, err, sizeof err), QR_OK);
    assert_int_equal(qr_model_load(F.head_path, &mp, &F.head, err, sizeof err), QR_OK);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    qr_tokenizer_free(F.tok);
    qr_model_free(F.head);
    qr_model_free(F.model);
    unlink(F.path);
    unlink(F.head_path);
    return 0;
}

/* Four requests of different lengths run at once (prefill chunks of 16 rows interleave with the
 * decode rows of the others) and each gets exactly the greedy tokens of a lone decode loop. */
static void test_concurrent_equals_reference(void **state) {
    (void)state;
    qr_context *ctx;
    qr_scheduler *s = make_sched(1024, 4, 16, 16, &ctx);
    const int32_t lens[4] = {5, 37, 70, 12}, gen = 12;
    int32_t prompts[4][80];
    result res[4];
    for (int i = 0; i < 4; i++) {
        make_prompt(prompts[i], lens[i], 100u + (uint32_t)i);
        result_init(&res[i]);
        submit(s, prompts[i], lens[i], gen, &res[i]);
    }
    for (int i = 0; i < 4; i++) result_wait(&res[i]); /* the model's backend serves one decoder at a time */
    for (int i = 0; i < 4; i++) {
        assert_int_equal(res[i].end, QR_SCHED_END_FINISHED);
        assert_int_equal(res[i].finish, QR_FINISH_LENGTH);
        assert_int_equal(res[i].n, gen);
        int32_t ref[MAX_GEN];
        reference(prompts[i], lens[i], gen, ref);
        assert_memory_equal(res[i].tokens, ref, sizeof(int32_t) * (size_t)gen);
        assert_int_equal(res[i].timing.n_prompt, lens[i]);
        assert_true(res[i].timing.t_first >= res[i].timing.t_admit && res[i].timing.t_end >= res[i].timing.t_first);
    }
    qr_sched_stats st;
    qr_sched_get_stats(s, &st);
    assert_int_equal(st.kv_blocks_used, 0);
    assert_int_equal(st.running, 0);
    assert_true(st.tokens_generated >= 4 * (uint64_t)gen);
    qr_sched_free(s);
    qr_context_free(ctx);
}

/* Events reach the callbacks on the dispatcher thread (not the scheduler thread, where the step hook runs), in order
 * (the tokens, then DONE, nothing after it), with the reference tokens; with dispatch -1 on the scheduler thread. And
 * qr_sched_free returns only after every event is out: a request running at shutdown has its DONE by then. */
static void test_event_threads(void **state) {
    (void)state;
    int32_t prompt[9], ref[10];
    make_prompt(prompt, 9, 41);
    reference(prompt, 9, 10, ref);
    for (int mode = 0; mode < 2; mode++) {
        qr_context *ctx = make_ctx(512, 2);
        char err[256];
        thread_log t = {.mu = PTHREAD_MUTEX_INITIALIZER}, t2 = {.mu = PTHREAD_MUTEX_INITIALIZER};
        qr_sched_params sp;
        qr_sched_params_default(&sp);
        sp.n_seq = 2;
        sp.step_hook = log_hook;
        sp.step_hook_user = &t;
        sp.dispatch = mode == 0 ? 1 : -1;
        qr_scheduler *s;
        assert_int_equal(qr_sched_create(F.model, ctx, F.tok, &sp, &s, err, sizeof err), QR_OK);
        qr_sched_request q = {.prompt = prompt, .n_prompt = 9, .max_tokens = 10, .ignore_eos = true, .cb = log_event, .user = &t};
        qr_sampler_params_greedy(&q.sampler);
        uint64_t id;
        assert_int_equal(qr_sched_submit(s, &q, &id, err, sizeof err), QR_OK);
        for (int i = 0; i < 5000; i++) { /* wait for DONE */
            pthread_mutex_lock(&t.mu);
            const bool d = t.done;
            pthread_mutex_unlock(&t.mu);
            if (d) break;
            usleep(1000);
        }
        q.max_tokens = 1000000; /* a second request still running at shutdown */
        q.user = &t2;
        assert_int_equal(qr_sched_submit(s, &q, &id, err, sizeof err), QR_OK);
        for (int i = 0; i < 5000; i++) { /* until it has a token */
            pthread_mutex_lock(&t2.mu);
            const int n = t2.n;
            pthread_mutex_unlock(&t2.mu);
            if (n > 0) break;
            usleep(1000);
        }
        qr_sched_free(s);
        assert_true(t2.done); /* delivered before qr_sched_free returned */
        assert_int_equal(t2.after_done, 0);
        assert_true(t.done);
        assert_int_equal(t.after_done, 0);
        assert_int_equal(t.n, 10);
        assert_memory_equal(t.tokens, ref, sizeof ref);
        assert_true(t.hooks > 0);
        assert_int_equal(t.n_cb, 11);
        if (mode == 0) assert_int_equal(t.n_on_hook_thread, 0);      /* the dispatcher's thread */
        else assert_int_equal(t.n_on_hook_thread, t.n_cb);             /* the scheduler's */
        qr_context_free(ctx);
    }
}

/* A cancelled request ends with CANCELLED and its blocks are released before the next step. */
static void test_cancel_frees_blocks(void **state) {
    (void)state;
    qr_context *ctx;
    qr_scheduler *s = make_sched(1024, 2, 16, 64, &ctx);
    int32_t prompt[100];
    make_prompt(prompt, 100, 5);
    result r;
    result_init(&r);
    const uint64_t id = submit(s, prompt, 100, 100000, &r);
    qr_sched_stats st = {0};
    for (int i = 0; i < 2000; i++) { /* wait until it holds blocks and generates */
        qr_sched_get_stats(s, &st);
        pthread_mutex_lock(&r.mu);
        const int32_t n = r.n;
        pthread_mutex_unlock(&r.mu);
        if (n >= 2) break;
        usleep(2000);
    }
    assert_true(st.kv_blocks_used >= 4);
    qr_sched_cancel(s, id);
    result_wait(&r);
    assert_int_equal(r.end, QR_SCHED_END_CANCELLED);
    qr_sched_get_stats(s, &st);
    assert_int_equal(st.kv_blocks_used, 0);
    assert_int_equal(st.cancelled, 1);
    qr_sched_cancel(s, id); /* finished ids are ignored */
    qr_sched_free(s);
    qr_context_free(ctx);
}

/* With one slot and a queue of one, the third request is refused with QR_ERR_BUSY (the server's 503
 * OVERLOADED); freeing the scheduler ends the others with SHUTDOWN. Timeouts end a request with TIMEOUT.
 * A draining scheduler refuses new requests with QR_ERR_SHUTDOWN. */
static void test_queue_bound_and_timeout(void **state) {
    (void)state;
    qr_context *ctx;
    qr_scheduler *s = make_sched(512, 1, 1, 64, &ctx);
    int32_t prompt[8];
    make_prompt(prompt, 8, 9);
    result a, b;
    result_init(&a);
    result_init(&b);
    submit(s, prompt, 8, 100000, &a);
    for (int i = 0; i < 1000; i++) { /* a is admitted */
        qr_sched_stats st;
        qr_sched_get_stats(s, &st);
        if (st.running == 1) break;
        usleep(1000);
    }
    submit(s, prompt, 8, 5, &b);
    qr_sched_request q = {.prompt = prompt, .n_prompt = 8, .max_tokens = 5, .cb = on_event, .user = &b};
    qr_sampler_params_greedy(&q.sampler);
    uint64_t id;
    char err[256];
    assert_int_equal(qr_sched_submit(s, &q, &id, err, sizeof err), QR_ERR_BUSY);
    assert_non_null(strstr(err, "queue full"));
    /* a prompt longer than the context is refused up front */
    int32_t *big = calloc(600, sizeof(int32_t));
    make_prompt(big, 600, 3);
    q.prompt = big;
    q.n_prompt = 600;
    assert_int_equal(qr_sched_submit(s, &q, &id, err, sizeof err), QR_ERR_INVALID_ARG);
    free(big);
    qr_sched_free(s);
    result_wait(&a);
    result_wait(&b);
    assert_int_equal(a.end, QR_SCHED_END_SHUTDOWN);
    assert_int_equal(b.end, QR_SCHED_END_SHUTDOWN);
    qr_context_free(ctx);
    /* timeout */
    s = make_sched(512, 1, 4, 64, &ctx);
    result c;
    result_init(&c);
    q.prompt = prompt;
    q.n_prompt = 8;
    q.max_tokens = 1000000;
    q.timeout_s = 0.002; /* far less than 500 tokens take on any machine (0.05 s did not always: the context filled first) */
    q.ignore_eos = true;
    q.user = &c;
    assert_int_equal(qr_sched_submit(s, &q, &id, err, sizeof err), QR_OK);
    result_wait(&c);
    assert_int_equal(c.end, QR_SCHED_END_TIMEOUT);
    /* draining (nothing left to wait for): new work is refused with QR_ERR_SHUTDOWN, not BUSY */
    assert_int_equal(qr_sched_drain(s, 5.0), 0);
    q.timeout_s = 0;
    assert_int_equal(qr_sched_submit(s, &q, &id, err, sizeof err), QR_ERR_SHUTDOWN);
    qr_sched_free(s);
    qr_context_free(ctx);
}

/* The same 100-token prompt twice: the second takes 96 positions (3 full blocks) from the cache
 * and gives the same tokens. */
static void test_prefix_cache_hit(void **state) {
    (void)state;
    qr_context *ctx;
    qr_scheduler *s = make_sched(1024, 2, 16, 256, &ctx);
    int32_t prompt[100];
    make_prompt(prompt, 100, 11);
    result a, b;
    result_init(&a);
    result_init(&b);
    submit(s, prompt, 100, 8, &a);
    result_wait(&a);
    assert_int_equal(a.timing.n_cached, 0);
    submit(s, prompt, 100, 8, &b);
    result_wait(&b);
    assert_int_equal(b.timing.n_cached, 96);
    assert_memory_equal(a.tokens, b.tokens, sizeof(int32_t) * 8);
    qr_sched_stats st;
    qr_sched_get_stats(s, &st);
    assert_int_equal(st.prefix_hits, 1);
    assert_int_equal(st.kv_blocks_used, 0);
    assert_true(st.kv_blocks_cached >= 3);
    qr_sched_free(s);
    qr_context_free(ctx);
}

/* Holds the scheduler thread (a job that waits for a gate) so that requests submitted meanwhile are
 * admitted in the same step. */
typedef struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool entered, open;
    qr_scheduler *s;
} gate;

static qr_status gate_job(void *arg, qr_context *ctx) {
    (void)ctx;
    gate *g = arg;
    pthread_mutex_lock(&g->mu);
    g->entered = true;
    pthread_cond_broadcast(&g->cv);
    while (!g->open) pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
    return QR_OK;
}

static void *gate_thread(void *arg) {
    gate *g = arg;
    qr_sched_run_job(g->s, gate_job, g);
    return NULL;
}

/* A KV cache of 4 blocks (128 tokens) and two requests that each need 3 blocks, submitted while the
 * scheduler thread is held so both start together: one is preempted, recomputed later, and both still
 * produce the reference tokens. */
static void test_preemption(void **state) {
    (void)state;
    qr_context *ctx;
    qr_scheduler *s = make_sched(128, 2, 16, 256, &ctx);
    gate g = {.entered = false, .open = false, .s = s};
    pthread_mutex_init(&g.mu, NULL);
    pthread_cond_init(&g.cv, NULL);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, gate_thread, &g), 0);
    pthread_mutex_lock(&g.mu);
    while (!g.entered) pthread_cond_wait(&g.cv, &g.mu);
    pthread_mutex_unlock(&g.mu);
    int32_t p1[40], p2[40];
    make_prompt(p1, 40, 21);
    make_prompt(p2, 40, 22);
    result a, b;
    result_init(&a);
    result_init(&b);
    submit(s, p1, 40, 40, &a);
    submit(s, p2, 40, 40, &b);
    pthread_mutex_lock(&g.mu);
    g.open = true;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
    pthread_join(th, NULL);
    result_wait(&a);
    result_wait(&b);
    int32_t ref[MAX_GEN];
    reference(p1, 40, 40, ref);
    assert_int_equal(a.n, 40);
    assert_memory_equal(a.tokens, ref, sizeof(int32_t) * 40);
    reference(p2, 40, 40, ref);
    assert_int_equal(b.n, 40);
    assert_memory_equal(b.tokens, ref, sizeof(int32_t) * 40);
    qr_sched_stats st;
    qr_sched_get_stats(s, &st);
    assert_true(st.preemptions >= 1);
    assert_int_equal(st.kv_blocks_used, 0);
    qr_sched_free(s);
    qr_context_free(ctx);
    pthread_mutex_destroy(&g.mu);
    pthread_cond_destroy(&g.cv);
}

/* Speculative requests (n-gram drafter; an EAGLE-3 head) next to a plain one in the same batches: every request's
 * tokens equal plain greedy decoding, drafts were verified (and, n-gram, kept: the random head's are rejected), the
 * plain request drafted nothing, the cache is empty at the end. */
static void speculative_mixed(qr_spec_kind kind) {
    qr_context *ctx = make_ctx(1024, 3);
    char err[256];
    qr_spec_params pp = qr_spec_default_params();
    pp.ngram_min = 1;
    if (kind == QR_SPEC_EAGLE3) pp.kind = kind, pp.draft_model = F.head, pp.draft_p_min = 0.0f;
    qr_spec *spec;
    assert_int_equal(qr_spec_create(ctx, &pp, &spec, err, sizeof err), QR_OK);
    qr_sched_params sp;
    qr_sched_params_default(&sp);
    sp.n_seq = 3;
    sp.spec = spec;
    qr_scheduler *s;
    assert_int_equal(qr_sched_create(F.model, ctx, F.tok, &sp, &s, err, sizeof err), QR_OK);
    const int32_t gen = 48;
    int32_t prompts[3][40];
    result res[3];
    for (int i = 0; i < 3; i++) {
        make_prompt(prompts[i], 8, 200u + (uint32_t)i);
        for (int32_t j = 8; j < 40; j++) prompts[i][j] = prompts[i][j % 8]; /* a repeated phrase */
        result_init(&res[i]);
        qr_sched_request q = {.prompt = prompts[i], .n_prompt = 40, .max_tokens = gen, .ignore_eos = true,
                              .cb = on_event, .user = &res[i], .speculative = i != 1};
        qr_sampler_params_greedy(&q.sampler);
        uint64_t id;
        assert_int_equal(qr_sched_submit(s, &q, &id, err, sizeof err), QR_OK);
    }
    for (int i = 0; i < 3; i++) result_wait(&res[i]);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(res[i].end, QR_SCHED_END_FINISHED);
        assert_int_equal(res[i].n, gen);
        int32_t ref[MAX_GEN];
        reference(prompts[i], 40, gen, ref);
        assert_memory_equal(res[i].tokens, ref, sizeof(int32_t) * (size_t)gen);
        assert_int_equal(res[i].timing.n_gen, gen);
        if (i == 1) assert_int_equal(res[i].timing.n_drafted, 0);
        else assert_true(res[i].timing.n_drafted > 0 && (res[i].timing.n_accepted > 0 || kind == QR_SPEC_EAGLE3));
        assert_true(res[i].timing.n_accepted <= res[i].timing.n_drafted);
    }
    qr_sched_stats st;
    qr_sched_get_stats(s, &st);
    assert_int_equal(st.kv_blocks_used, 0);
    assert_int_equal(st.spec_drafted, (uint64_t)(res[0].timing.n_drafted + res[2].timing.n_drafted));
    assert_int_equal(st.spec_accepted, (uint64_t)(res[0].timing.n_accepted + res[2].timing.n_accepted));
    assert_int_equal(st.tokens_generated, 3u * (uint64_t)gen);
    qr_sched_free(s);
    qr_spec_free(spec);
    qr_context_free(ctx);
}

static void test_speculative_mixed(void **state) {
    (void)state;
    speculative_mixed(QR_SPEC_NGRAM);
    speculative_mixed(QR_SPEC_EAGLE3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concurrent_equals_reference), cmocka_unit_test(test_cancel_frees_blocks),
        cmocka_unit_test(test_speculative_mixed),
        cmocka_unit_test(test_queue_bound_and_timeout),     cmocka_unit_test(test_prefix_cache_hit),
        cmocka_unit_test(test_preemption),         cmocka_unit_test(test_event_threads),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
