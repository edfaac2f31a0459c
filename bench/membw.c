/* bench/membw.c — host memory bandwidth at N threads, the roofline of CPU decode (issue 36).
 *
 *   cc -O2 -mavx2 -pthread bench/membw.c -o /tmp/membw && /tmp/membw [threads=2] [MiB per thread=512] [reps=10]
 *
 * Each thread owns a source and a destination buffer (first touched by itself) far larger than the caches, and runs:
 *   copy: memcpy(dst, src) — STREAM's "Copy": bytes read + bytes written per second;
 *   read: a sum over src with 256-bit loads — bytes read per second (what a decode step does with the weights).
 * Prints the median and the best of `reps` timed runs of each (after one warm-up) as JSON on one line. */
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct job {
    size_t bytes;
    char *src, *dst;
    int mode; /* 0 copy, 1 read */
    double sink;
    pthread_barrier_t *bar;
    int reps;
    double *t; /* [reps + 1] seconds of each run (thread 0 writes) */
} job;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double read_sum(const char *p, size_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 128 <= n; i += 128) {
        a0 = _mm256_add_ps(a0, _mm256_load_ps((const float *)(p + i)));
        a1 = _mm256_add_ps(a1, _mm256_load_ps((const float *)(p + i + 32)));
        a2 = _mm256_add_ps(a2, _mm256_load_ps((const float *)(p + i + 64)));
        a3 = _mm256_add_ps(a3, _mm256_load_ps((const float *)(p + i + 96)));
    }
    float o[8];
    _mm256_storeu_ps(o, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    return (double)(o[0] + o[1] + o[2] + o[3] + o[4] + o[5] + o[6] + o[7]);
}

static void *run(void *arg) {
    job *j = arg;
    memset(j->src, 1, j->bytes); /* first touch here: the pages live near this thread */
    memset(j->dst, 0, j->bytes);
    for (int r = 0; r <= j->reps; r++) {
        pthread_barrier_wait(j->bar);
        const double t0 = now();
        if (j->mode == 0) memcpy(j->dst, j->src, j->bytes);
        else j->sink += read_sum(j->src, j->bytes);
        pthread_barrier_wait(j->bar);
        if (j->t) j->t[r] = now() - t0; /* the slowest thread ends the run: measured after the barrier */
    }
    return NULL;
}

static int cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    const int nt = argc > 1 ? atoi(argv[1]) : 2;
    const size_t mib = argc > 2 ? (size_t)atol(argv[2]) : 512;
    const int reps = argc > 3 ? atoi(argv[3]) : 10;
    if (nt < 1 || nt > 1024 || mib < 1 || reps < 1) {
        fprintf(stderr, "usage: membw [threads] [MiB per thread] [reps]\n");
        return 2;
    }
    const size_t bytes = mib << 20;
    double res[2][2];
    for (int mode = 0; mode < 2; mode++) {
        pthread_t th[1024];
        job jobs[1024];
        pthread_barrier_t bar;
        pthread_barrier_init(&bar, NULL, (unsigned)nt);
        double *t = calloc((size_t)reps + 1, sizeof *t);
        for (int i = 0; i < nt; i++) {
            jobs[i] = (job){.bytes = bytes, .mode = mode, .bar = &bar, .reps = reps, .t = i == 0 ? t : NULL};
            jobs[i].src = aligned_alloc(64, bytes);
            jobs[i].dst = aligned_alloc(64, bytes);
            if (!jobs[i].src || !jobs[i].dst) {
                fprintf(stderr, "membw: out of memory\n");
                return 1;
            }
            pthread_create(&th[i], NULL, run, &jobs[i]);
        }
        for (int i = 0; i < nt; i++) pthread_join(th[i], NULL);
        qsort(t + 1, (size_t)reps, sizeof *t, cmp); /* t[0]: the warm-up */
        const double moved = (double)bytes * nt * (mode == 0 ? 2.0 : 1.0);
        res[mode][0] = moved / t[1 + reps / 2] / 1e9;
        res[mode][1] = moved / t[1] / 1e9;
        for (int i = 0; i < nt; i++) free(jobs[i].src), free(jobs[i].dst);
        free(t);
        pthread_barrier_destroy(&bar);
    }
    printf("{\"threads\": %d, \"mib_per_thread\": %zu, \"copy_gbs_median\": %.2f, \"copy_gbs_best\": %.2f, "
           "\"read_gbs_median\": %.2f, \"read_gbs_best\": %.2f}\n", nt, mib, res[0][0], res[0][1], res[1][0], res[1][1]);
    return 0;
}
