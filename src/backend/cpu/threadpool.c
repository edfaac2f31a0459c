/* threadpool.c — persistent pthread workers for the CPU backend, with a parallel-for that never
 * waits for a thread that is not running.
 *
 * A job is a range [0, n) cut into chunks of `grain` items, claimed with an atomic counter by
 * whichever threads are running: the caller always takes part, and workers join when they get a
 * CPU. The caller returns once every chunk is done and no worker is inside the job. A worker that
 * has not started yet (descheduled on a busy machine) is simply not waited for: the caller does its
 * share. This keeps decode latency sane when the machine is oversubscribed, where a fork-join pool
 * that waits for all N threads at each of the hundreds of ops per token would crawl.
 *
 * Publication protocol: the caller writes the job, then bumps `gen`. A worker that sees a new gen
 * registers in `active`, then re-reads gen and `closed`; it touches the job only if the job is
 * still open. The caller, when all chunks are done, sets closed = gen and waits for active == 0
 * (seq_cst on both sides: either the worker sees the close, or the caller sees the worker).
 * Between jobs workers spin briefly (with a pause hint), then sleep on a condition variable.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "backend/cpu/cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

/* Spin iterations before a worker goes to sleep (a few hundred microseconds). */
#define SPIN_ITERS 20000

typedef struct pool_job {
    cpu_range_fn fn;
    void *arg;
    int64_t n, grain;
    _Atomic int64_t next; /* next unclaimed item */
    _Atomic int64_t done; /* items finished */
} pool_job;

struct cpu_pool {
    int n_threads;
    pthread_t *threads;   /* [n_threads - 1] */
    pool_job job;         /* the current job; written only while no worker is inside */
    _Atomic uint64_t gen;    /* job generation, bumped to publish a job */
    _Atomic uint64_t closed; /* generation of the last finished job */
    _Atomic int active;      /* workers inside the current job */
    _Atomic int sleepers;    /* workers blocked on cond */
    _Atomic bool stop;
    pthread_mutex_t mu;
    pthread_cond_t cond;
};

typedef struct worker_arg {
    cpu_pool *pool;
    int ith;
} worker_arg;

/* Claims and runs chunks of the current job until none is left. */
static void run_chunks(pool_job *job, int ith) {
    for (;;) {
        const int64_t lo = atomic_fetch_add_explicit(&job->next, job->grain, memory_order_relaxed);
        if (lo >= job->n) return;
        const int64_t hi = lo + job->grain < job->n ? lo + job->grain : job->n;
        job->fn(job->arg, lo, hi, ith);
        atomic_fetch_add_explicit(&job->done, hi - lo, memory_order_release);
    }
}

static void *worker_main(void *p) {
    worker_arg wa = *(worker_arg *)p;
    free(p);
    cpu_pool *pool = wa.pool;
    uint64_t seen = 0;
    for (;;) {
        uint64_t g;
        int spins = 0;
        while ((g = atomic_load(&pool->gen)) == seen && !atomic_load(&pool->stop)) {
            if (++spins < SPIN_ITERS) {
                CPU_RELAX();
                continue;
            }
            pthread_mutex_lock(&pool->mu);
            atomic_fetch_add(&pool->sleepers, 1);
            while (atomic_load(&pool->gen) == seen && !atomic_load(&pool->stop)) pthread_cond_wait(&pool->cond, &pool->mu);
            atomic_fetch_sub(&pool->sleepers, 1);
            pthread_mutex_unlock(&pool->mu);
            spins = 0;
        }
        if (atomic_load(&pool->stop)) break;
        atomic_fetch_add(&pool->active, 1);
        const uint64_t g2 = atomic_load(&pool->gen);
        if (g2 == g && atomic_load(&pool->closed) != g) run_chunks(&pool->job, wa.ith);
        atomic_fetch_sub(&pool->active, 1);
        seen = g2 == g ? g : seen; /* a newer job appeared meanwhile: look again */
    }
    return NULL;
}

cpu_pool *cpu_pool_create(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    cpu_pool *pool = calloc(1, sizeof *pool);
    if (!pool) return NULL;
    pool->n_threads = 1;
    atomic_init(&pool->gen, 0);
    atomic_init(&pool->closed, 0);
    atomic_init(&pool->active, 0);
    atomic_init(&pool->sleepers, 0);
    atomic_init(&pool->stop, false);
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->cond, NULL);
    if (n_threads > 1) {
        pool->threads = calloc((size_t)n_threads - 1, sizeof(pthread_t));
        if (!pool->threads) goto fail;
        for (int i = 1; i < n_threads; i++) {
            worker_arg *wa = malloc(sizeof *wa);
            if (!wa) goto fail;
            wa->pool = pool;
            wa->ith = i;
            if (pthread_create(&pool->threads[i - 1], NULL, worker_main, wa) != 0) {
                free(wa);
                goto fail;
            }
            pool->n_threads = i + 1; /* threads started so far, joined by cpu_pool_free */
        }
    }
    return pool;
fail:
    cpu_pool_free(pool);
    return NULL;
}

void cpu_pool_free(cpu_pool *pool) {
    if (!pool) return;
    pthread_mutex_lock(&pool->mu);
    atomic_store(&pool->stop, true);
    pthread_cond_broadcast(&pool->cond);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 1; i < pool->n_threads; i++) pthread_join(pool->threads[i - 1], NULL);
    free(pool->threads);
    pthread_mutex_destroy(&pool->mu);
    pthread_cond_destroy(&pool->cond);
    free(pool);
}

int cpu_pool_n_threads(const cpu_pool *pool) { return pool->n_threads; }

void cpu_pool_for(cpu_pool *pool, int64_t n, int64_t grain, cpu_range_fn fn, void *arg) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (pool->n_threads == 1 || n <= grain) {
        for (int64_t lo = 0; lo < n; lo += grain) fn(arg, lo, lo + grain < n ? lo + grain : n, 0);
        return;
    }
    pool_job *job = &pool->job;
    job->fn = fn;
    job->arg = arg;
    job->n = n;
    job->grain = grain;
    atomic_store_explicit(&job->next, 0, memory_order_relaxed);
    atomic_store_explicit(&job->done, 0, memory_order_relaxed);
    const uint64_t g = atomic_fetch_add(&pool->gen, 1) + 1; /* publishes the job */
    if (atomic_load(&pool->sleepers) > 0) {
        pthread_mutex_lock(&pool->mu);
        pthread_cond_broadcast(&pool->cond);
        pthread_mutex_unlock(&pool->mu);
    }
    run_chunks(job, 0);
    /* chunks claimed by workers are being run by threads that are running: short waits */
    int spins = 0;
    while (atomic_load_explicit(&job->done, memory_order_acquire) < n) {
        if (++spins < SPIN_ITERS) CPU_RELAX();
        else sched_yield();
    }
    atomic_store(&pool->closed, g);
    spins = 0;
    while (atomic_load(&pool->active) > 0) {
        if (++spins < SPIN_ITERS) CPU_RELAX();
        else sched_yield();
    }
}
