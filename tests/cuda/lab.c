/* lab.c — quarrel_cuda_lab: every CUDA op (and every launch variant) against the CPU backend's scalar
 * oracle on fresh random inputs, with the GPU output poisoned (NaN) before each run; then the
 * median time of repeated runs (CUDA events, L2 flushed before each) as GB/s and % of the measured
 * device-to-device copy bandwidth.
 *
 *   quarrel_cuda_lab [--quick] [--only SECTION] [--reps N]
 *
 * Sections: roofline, matmul (decode mat-vec, prefill GEMM), ops (norms, rope, elementwise, copies,
 * gather), attention (kv_store, paged attention, kv_copy_block). Exit status 1 when a check fails.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "lab.h"
#include "util/util.h"

static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stdout, "FATAL: ");
    vfprintf(stdout, fmt, ap);
    fprintf(stdout, "\n");
    va_end(ap);
    fflush(stdout);
    exit(2);
}

/* ---- random ---- */

uint64_t lab_u64(lab *L) {
    /* xorshift64* */
    uint64_t x = L->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    L->rng = x;
    return x * 0x2545F4914F6CDD1DULL;
}

float lab_frand(lab *L) { return (float)((double)(lab_u64(L) >> 11) * 0x1p-53 * 2.0 - 1.0); }

void lab_fill(lab *L, float *x, int64_t n, float scale) {
    for (int64_t i = 0; i < n; i++) x[i] = lab_frand(L) * scale;
    if (n > 0 && x[0] == 0.0f) x[0] = scale * 0.5f;
}

void lab_fill_bytes(lab *L, void *p, size_t n) {
    uint8_t *b = p;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const uint64_t v = lab_u64(L);
        memcpy(b + i, &v, 8);
    }
    for (; i < n; i++) b[i] = (uint8_t)lab_u64(L);
}

/* ---- GPU memory ---- */

float *lab_gpu_alloc(lab *L, size_t bytes) {
    void *p = L->gpu->ops->alloc(L->gpu, bytes);
    if (!p) die("GPU allocation of %zu bytes failed", bytes);
    return p;
}

void lab_gpu_free(lab *L, void *p) { L->gpu->ops->free(L->gpu, p); }
void lab_upload(lab *L, void *dst, const void *src, size_t bytes) { L->gpu->ops->write(L->gpu, dst, src, bytes); }
void lab_download(lab *L, void *dst, const void *src, size_t bytes) { L->gpu->ops->read(L->gpu, dst, src, bytes); }

void lab_poison(lab *L, void *p, size_t bytes) {
    if (cudaMemsetAsync(p, 0xFF, bytes, (cudaStream_t)L->stream) != cudaSuccess) die("poison: memset failed");
}

void lab_check_errors(lab *L, const char *what) {
    char err[512];
    if (L->gpu->ops->last_error(L->gpu, err, sizeof err) != QR_OK) die("%s: GPU: %s", what, err);
    if (L->cpu->ops->last_error(L->cpu, err, sizeof err) != QR_OK) die("%s: CPU: %s", what, err);
}

/* ---- comparison ---- */

bool lab_compare(const float *got, const float *want, int64_t n, double tol, double *max_err, double *rel_err) {
    double mx = 0.0, mw = 0.0, se = 0.0, sw = 0.0;
    bool nan = false;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(got[i]) && isfinite(want[i])) nan = true;
        const double e = fabs((double)got[i] - (double)want[i]);
        if (e > mx) mx = e;
        if (fabs(want[i]) > mw) mw = fabs(want[i]);
        se += e * e;
        sw += (double)want[i] * want[i];
    }
    *max_err = nan ? INFINITY : (mw > 0 ? mx / mw : mx);
    *rel_err = nan ? INFINITY : (sw > 0 ? sqrt(se / sw) : sqrt(se));
    return !nan && *max_err <= tol && *rel_err <= tol;
}

/* ---- timing ---- */

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double lab_time(lab *L, lab_fn fn, void *ctx, bool flush) {
    cudaStream_t s = (cudaStream_t)L->stream;
    for (int i = 0; i < 3; i++) fn(ctx);
    double *t = malloc(sizeof(double) * (size_t)L->reps);
    for (int i = 0; i < L->reps; i++) {
        if (flush) cudaMemsetAsync(L->flush, i & 0xFF, L->flush_bytes, s);
        else lab_spin_kernel(50.0, L->stream);
        cudaEventRecord((cudaEvent_t)L->ev0, s);
        fn(ctx);
        cudaEventRecord((cudaEvent_t)L->ev1, s);
        cudaEventSynchronize((cudaEvent_t)L->ev1);
        float ms = 0.0f;
        cudaEventElapsedTime(&ms, (cudaEvent_t)L->ev0, (cudaEvent_t)L->ev1);
        t[i] = ms * 1000.0;
    }
    qsort(t, (size_t)L->reps, sizeof(double), cmp_double);
    const double med = t[L->reps / 2];
    free(t);
    lab_check_errors(L, "timing");
    return med;
}

/* ---- results ---- */

void lab_record(lab *L, const char *op, const char *config, double max_err, double rel_err, double tol, bool pass,
                double us, double bytes, double flops) {
    if (L->n_rows == L->cap_rows) {
        L->cap_rows = L->cap_rows ? 2 * L->cap_rows : 256;
        L->rows = realloc(L->rows, sizeof(lab_row) * (size_t)L->cap_rows);
        if (!L->rows) die("out of memory");
    }
    if (L->exact) pass = pass && max_err == 0.0, tol = 0.0;
    lab_row *r = &L->rows[L->n_rows++];
    memset(r, 0, sizeof *r);
    snprintf(r->op, sizeof r->op, "%s", op);
    snprintf(r->config, sizeof r->config, "%s", config);
    r->max_err = max_err;
    r->rel_err = rel_err;
    r->tol = tol;
    r->pass = pass;
    r->us = us;
    r->gbs = us > 0 && bytes > 0 ? bytes / (us * 1e3) : 0.0;
    r->tflops = us > 0 && flops > 0 ? flops / (us * 1e6) : 0.0;
    L->checks++;
    if (!pass) L->fails++;
    printf("%-14s %-44s max %.2e rel %.2e tol %.0e %s", op, config, max_err, rel_err, tol, pass ? "ok  " : "FAIL");
    if (us > 0) {
        printf(" %9.2f us", us);
        if (r->gbs > 0) printf(" %7.1f GB/s %5.1f%%copy", r->gbs, 100.0 * r->gbs / L->copy_gbs);
        if (r->tflops > 0) printf(" %7.2f TFLOP/s", r->tflops);
    }
    printf("\n");
    fflush(stdout);
}

bool lab_section(lab *L, const char *name) {
    if (L->only && !strstr(name, L->only)) return false;
    printf("\n== %s ==\n", name);
    return true;
}

/* ---- roofline ---- */

typedef struct copy_ctx {
    lab *L;
    void *a, *b;
    size_t bytes;
    float *out;
} copy_ctx;

static void run_copy(void *p) {
    copy_ctx *c = p;
    cudaMemcpyAsync(c->b, c->a, c->bytes, cudaMemcpyDeviceToDevice, (cudaStream_t)c->L->stream);
}

static void run_read(void *p) {
    copy_ctx *c = p;
    lab_read_kernel(c->a, c->bytes, c->out, c->L->stream);
}

static void roofline(lab *L) {
    const size_t bytes = (size_t)1 << 30;
    copy_ctx c = {.L = L, .bytes = bytes};
    c.a = lab_gpu_alloc(L, bytes);
    c.b = lab_gpu_alloc(L, bytes);
    c.out = lab_gpu_alloc(L, 1 << 20);
    cudaMemsetAsync(c.a, 1, bytes, (cudaStream_t)L->stream);
    cudaMemsetAsync(c.b, 2, bytes, (cudaStream_t)L->stream);
    const double us_copy = lab_time(L, run_copy, &c, false);
    const double us_read = lab_time(L, run_read, &c, false);
    L->copy_gbs = 2.0 * (double)bytes / (us_copy * 1e3);
    L->read_gbs = (double)bytes / (us_read * 1e3);
    printf("roofline: device-to-device copy of 1 GiB: %.1f us = %.1f GB/s (read + write); streaming read: %.1f GB/s\n",
           us_copy, L->copy_gbs, L->read_gbs);
    lab_gpu_free(L, c.a);
    lab_gpu_free(L, c.b);
    lab_gpu_free(L, c.out);
}

/* ---- summary ---- */

static void summary(lab *L) {
    printf("\n== summary: %d checks, %d failed; copy %.1f GB/s, read %.1f GB/s ==\n", L->checks, L->fails,
           L->copy_gbs, L->read_gbs);
    /* per op: checks, failures, worst error */
    for (int i = 0; i < L->n_rows; i++) {
        bool seen = false;
        for (int j = 0; j < i; j++) seen = seen || strcmp(L->rows[j].op, L->rows[i].op) == 0;
        if (seen) continue;
        int n = 0, bad = 0;
        double worst_max = 0, worst_rel = 0;
        for (int j = i; j < L->n_rows; j++) {
            if (strcmp(L->rows[j].op, L->rows[i].op) != 0) continue;
            n++;
            bad += !L->rows[j].pass;
            if (L->rows[j].max_err > worst_max) worst_max = L->rows[j].max_err;
            if (L->rows[j].rel_err > worst_rel) worst_rel = L->rows[j].rel_err;
        }
        printf("%-14s %3d checks %s  worst max %.2e rel %.2e\n", L->rows[i].op, n, bad ? "FAILED" : "all ok", worst_max,
               worst_rel);
    }
    printf("\ntimed (median):\n");
    printf("%-14s %-44s %10s %9s %7s %7s %8s\n", "op", "config", "us", "GB/s", "%copy", "%read", "TFLOP/s");
    for (int i = 0; i < L->n_rows; i++) {
        const lab_row *r = &L->rows[i];
        if (r->us <= 0) continue;
        printf("%-14s %-44s %10.2f %9.1f %7.1f %7.1f %8.2f%s\n", r->op, r->config, r->us, r->gbs,
               100.0 * r->gbs / L->copy_gbs, 100.0 * r->gbs / L->read_gbs, r->tflops, r->pass ? "" : "  FAIL");
    }
}

int main(int argc, char **argv) {
    lab L;
    memset(&L, 0, sizeof L);
    L.reps = 25;
    L.rng = 0x9E3779B97F4A7C15ULL ^ (uint64_t)time(NULL);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) L.quick = true;
        else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) L.only = argv[++i];
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) L.reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) L.rng = strtoull(argv[++i], NULL, 0);
        else die("usage: %s [--quick] [--only SECTION] [--reps N] [--seed S]", argv[0]);
    }
    if (L.reps < 1) L.reps = 1;
    printf("quarrel_cuda_lab seed 0x%llx\n", (unsigned long long)L.rng);
    char err[512];
    const qr_backend_cpu_params cp = {.n_threads = 0, .force_scalar = true};
    if (qr_backend_cpu_create(&cp, &L.cpu, err, sizeof err) != QR_OK) die("cpu backend: %s", err);
    const qr_backend_cuda_params gp = {.gpu = 0};
    const qr_status st = qr_backend_cuda_create(&gp, &L.gpu, err, sizeof err);
    if (st != QR_OK) {
        printf("no GPU: %s (%s)\n", err, qr_status_str(st));
        return st == QR_ERR_UNSUPPORTED ? 3 : 2;
    }
    printf("GPU: %s; CPU oracle: %s, %ld threads\n", qr_cuda_backend_device_name(L.gpu), qr_backend_cpu_simd(L.cpu),
           sysconf(_SC_NPROCESSORS_ONLN));
    L.stream = qr_cuda_backend_stream(L.gpu);
    /* the lab writes inputs with its own copies: no reuse of the previous matmul's activations, and
     * every timed matmul includes its activation conversion */
    qr_cuda_backend_tune(L.gpu)->act_reuse = 0;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    L.ev0 = e0;
    L.ev1 = e1;
    L.flush_bytes = (size_t)256 << 20;
    L.flush = lab_gpu_alloc(&L, L.flush_bytes);
    roofline(&L);
    if (lab_section(&L, "matmul")) lab_matmul(&L);
    if (lab_section(&L, "ops")) lab_ops(&L);
    if (lab_section(&L, "attention")) lab_attention(&L);
    lab_moe_ssm(&L); /* its sections: moe, ssm, sinks */
    if (lab_section(&L, "exact")) lab_exact(&L);
    summary(&L);
    lab_gpu_free(&L, L.flush);
    qr_backend_free(L.gpu);
    qr_backend_free(L.cpu);
    free(L.rows);
    return L.fails ? 1 : 0;
}
