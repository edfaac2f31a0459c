/* lab.h — shared infrastructure of the CUDA lab (quarrel_cuda_lab): the two backends, random inputs,
 * output poisoning, comparison against the CPU scalar oracle, timing with CUDA events, and the
 * result table. */
#ifndef QR_CUDA_LAB_H
#define QR_CUDA_LAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_internal.h"

#define LAB_MAX_ROWS 512

/* One line of the final summary. */
typedef struct lab_row {
    char op[24];
    char config[72];
    double max_err;   /* max |gpu - cpu| / max |cpu| */
    double rel_err;   /* ||gpu - cpu|| / ||cpu|| */
    double tol;       /* limit applied to both */
    bool pass;
    double us;        /* median time, 0 when not timed */
    double gbs;       /* achieved GB/s (bytes / time), 0 when not timed */
    double tflops;    /* for GEMMs */
} lab_row;

typedef struct lab {
    qr_backend *cpu, *gpu;
    void *stream;          /* cudaStream_t of the GPU backend */
    void *ev0, *ev1;       /* cudaEvent_t */
    void *flush;           /* device buffer overwritten before each timed run (evicts L2) */
    size_t flush_bytes;
    double copy_gbs;       /* measured device-to-device copy, read + write bytes */
    double read_gbs;       /* measured streaming read */
    int reps;              /* timed repetitions (median) */
    bool quick;            /* small shapes only */
    bool exact;            /* a check passes only when every output has the oracle's bits (section "exact") */
    const char *only;      /* run only the sections whose name contains this */
    uint64_t rng;
    lab_row *rows;
    int n_rows, cap_rows;
    int fails, checks;
} lab;

/* Uniform float in [-1, 1). */
float lab_frand(lab *L);
uint64_t lab_u64(lab *L);
/* Fills x[0..n) with uniform values in [-scale, scale) (never all zero). */
void lab_fill(lab *L, float *x, int64_t n, float scale);
/* Random bytes. */
void lab_fill_bytes(lab *L, void *p, size_t n);
/* Fills n rows of k values of `type` (any type the CUDA backend supports) with random data: random
 * bytes for the codes, then every scale field set to a finite value of a sensible size. */
void lab_gen_weight(lab *L, qr_type type, int64_t n, int64_t k, void *buf);

/* GPU memory through the backend (aborts the lab on failure: it is a test program). */
float *lab_gpu_alloc(lab *L, size_t bytes);
void lab_gpu_free(lab *L, void *p);
void lab_upload(lab *L, void *dst, const void *src, size_t bytes);
void lab_download(lab *L, void *dst, const void *src, size_t bytes);
/* Fills a GPU buffer with 0xFF bytes (NaN floats) on the backend's stream. */
void lab_poison(lab *L, void *p, size_t bytes);
/* Aborts with a message when either backend has a sticky error. */
void lab_check_errors(lab *L, const char *what);

/* Compares got with want (n floats): fills max_err / rel_err, pass when both <= tol and no NaN. */
bool lab_compare(const float *got, const float *want, int64_t n, double tol, double *max_err, double *rel_err);

/* Median time in microseconds of fn(ctx) over L->reps runs on the GPU stream (after 3 warm-ups).
 * Before each run the GPU is kept busy (outside the timed region) so that the run's launches are
 * queued when its first event fires: with flush by overwriting L2 (cold: weights come from HBM),
 * without by a spinning kernel (warm: L2 keeps what the last run left). */
typedef void (*lab_fn)(void *ctx);
double lab_time(lab *L, lab_fn fn, void *ctx, bool flush);

/* Records a result line (printed at once and again in the summary). */
void lab_record(lab *L, const char *op, const char *config, double max_err, double rel_err, double tol, bool pass,
                double us, double bytes, double flops);
bool lab_section(lab *L, const char *name);

/* Every weight type the CUDA backend supports (lab_matmul.c). */
#define LAB_N_TYPES 15
extern const qr_type lab_all_types[LAB_N_TYPES];

/* ---- sections ---- */
void lab_matmul(lab *L);
void lab_ops(lab *L);
void lab_attention(lab *L);
/* MoE routing / expert matmuls / GLUs, the Mamba2 conv, scan and gated norm, attention sinks
 * (lab_moe_ssm.c; sections "moe", "ssm", "sinks"). */
void lab_moe_ssm(lab *L);
/* The exact mode's matmuls against the AVX2 CPU path, bit for bit (lab_exact.c; section "exact"). */
void lab_exact(lab *L);
/* Attention on f16 caches without softcap (what exact mode reproduces), prefill and decode rows, for the
 * exact section (lab_attention.c); tag prefixes the labels. */
void lab_attention_exact(lab *L, const char *tag);
/* Rope and the elementwise ops but softcap (lab_ops.c), MoE routing, the Mamba2 conv / scan / gated norm
 * and attention sinks (lab_moe_ssm.c), for the exact section. */
void lab_ops_exact(lab *L);
void lab_moe_ssm_exact(lab *L);

/* ---- lab_kernels.cu ---- */
/* Streaming-read bandwidth of `bytes` at p (16-byte loads, a sum written to out), for the roofline. */
int lab_read_kernel(const void *p, size_t bytes, float *out, void *stream);
/* A kernel that keeps the GPU busy for about `us` microseconds (no memory traffic). */
int lab_spin_kernel(double us, void *stream);

#endif /* QR_CUDA_LAB_H */
