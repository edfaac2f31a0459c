/* lab_matmul.c — the matmul section of the lab: the decode mat-vec of every weight type at 1..8 rows
 * and every warps-per-row variant, the prefill path (dequantize + cuBLAS), and timings at the
 * mistral-7b and tinyllama decode shapes. Weights are random blocks (random codes, random but sane
 * fp16 scales), activations uniform in [-1, 1). */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab.h"
#include "quant/blocks.h"
#include "util/util.h"

/* A random fp16 scale of magnitude 2^-7..2^-6, random sign. */
static uint16_t rand_scale(lab *L, bool positive) {
    const float u = 0.5f + 0.25f * (lab_frand(L) + 1.0f);
    const float s = (positive || lab_frand(L) > 0.0f) ? u : -u;
    return qr_fp32_to_fp16(s * 0x1p-6f);
}

void lab_gen_weight(lab *L, qr_type type, int64_t n, int64_t k, void *buf) {
    const size_t total = (size_t)n * qr_type_row_size(type, k);
    if (type == QR_TYPE_F32) {
        lab_fill(L, buf, n * k, 1.0f);
        return;
    }
    if (type == QR_TYPE_F16 || type == QR_TYPE_BF16) {
        uint16_t *h = buf;
        for (int64_t i = 0; i < n * k; i++) {
            const float v = lab_frand(L);
            h[i] = type == QR_TYPE_F16 ? qr_fp32_to_fp16(v) : qr_fp32_to_bf16(v);
        }
        return;
    }
    lab_fill_bytes(L, buf, total);
    const int64_t nb = n * k / (int64_t)qr_type_table[type].block_size;
    for (int64_t i = 0; i < nb; i++) {
        switch (type) {
        case QR_TYPE_Q4_0: ((qr_block_q4_0 *)buf)[i].d = rand_scale(L, false); break;
        case QR_TYPE_Q4_1:
            ((qr_block_q4_1 *)buf)[i].d = rand_scale(L, true);
            ((qr_block_q4_1 *)buf)[i].m = qr_fp32_to_fp16(lab_frand(L) * 0.1f);
            break;
        case QR_TYPE_Q5_0: ((qr_block_q5_0 *)buf)[i].d = rand_scale(L, false); break;
        case QR_TYPE_Q5_1:
            ((qr_block_q5_1 *)buf)[i].d = rand_scale(L, true);
            ((qr_block_q5_1 *)buf)[i].m = qr_fp32_to_fp16(lab_frand(L) * 0.1f);
            break;
        case QR_TYPE_Q8_0: ((qr_block_q8_0 *)buf)[i].d = rand_scale(L, false); break;
        case QR_TYPE_MXFP4: ((qr_block_mxfp4 *)buf)[i].e = (uint8_t)(118 + lab_u64(L) % 8); break;
        case QR_TYPE_IQ4_NL: ((qr_block_iq4_nl *)buf)[i].d = rand_scale(L, false); break;
        case QR_TYPE_Q2_K:
            ((qr_block_q2_K *)buf)[i].d = rand_scale(L, true);
            ((qr_block_q2_K *)buf)[i].dmin = rand_scale(L, true);
            break;
        case QR_TYPE_Q3_K: ((qr_block_q3_K *)buf)[i].d = rand_scale(L, false); break;
        case QR_TYPE_Q4_K:
            ((qr_block_q4_K *)buf)[i].d = rand_scale(L, true);
            ((qr_block_q4_K *)buf)[i].dmin = rand_scale(L, true);
            break;
        case QR_TYPE_Q5_K:
            ((qr_block_q5_K *)buf)[i].d = rand_scale(L, true);
            ((qr_block_q5_K *)buf)[i].dmin = rand_scale(L, true);
            break;
        case QR_TYPE_Q6_K: ((qr_block_q6_K *)buf)[i].d = rand_scale(L, false); break;
        default: break;
        }
    }
}

typedef struct mm_case {
    qr_type type;
    int64_t n, k;        /* output rows (weight rows), row length */
    int nr;              /* activation rows */
    int wpr;             /* warps per row, 0 = backend's choice */
    int max_rows;        /* mat-vec up to this many rows (0 = backend default) */
    int64_t tile;        /* GEMM tile bytes (0 = default) */
    bool time;
    bool warm;           /* time without evicting L2 first (activations/weights L2-resident) */
    bool no_pdl;         /* launch the mat-vec without programmatic dependent launch */
    bool no_dq;          /* batches of K-quant weights through the f16 cache + cuBLAS, not matmul_dq.cu */
    bool no_wg;          /* matmul_dq.cu's mma.sync version, not the wgmma one */
    bool cross;          /* also every output row against the mma.sync version (the oracle checks 8 rows) */
    const char *shape;   /* label, e.g. "mistral ffn_up" */
} mm_case;

typedef struct mm_run {
    lab *L;
    qr_weight *w;
    const float *x;
    int64_t nr;
    float *y;
} mm_run;

static void run_matmul(void *p) {
    mm_run *r = p;
    r->L->gpu->ops->matmul(r->L->gpu, r->w, r->x, r->nr, r->y);
}

static bool is_quant(qr_type t) { return t != QR_TYPE_F32 && t != QR_TYPE_F16 && t != QR_TYPE_BF16; }

static void matmul_case(lab *L, const mm_case *c) {
    char err[512], cfg[96];
    const size_t row_bytes = qr_type_row_size(c->type, c->k), wbytes = (size_t)c->n * row_bytes;
    void *wbuf = malloc(wbytes);
    float *xh = malloc((size_t)(c->nr * c->k) * 4), *yg = malloc((size_t)(c->nr * c->n) * 4);
    float *yc = malloc((size_t)(c->nr * c->n) * 4);
    if (!wbuf || !xh || !yg || !yc) {
        printf("matmul: out of host memory\n");
        exit(2);
    }
    lab_gen_weight(L, c->type, c->n, c->k, wbuf);
    lab_fill(L, xh, c->nr * c->k, 1.0f);
    qr_weight w = {.name = "lab.weight", .type = c->type, .ne = {c->k, c->n, 1, 1}, .row_bytes = row_bytes, .host = wbuf};
    if (L->gpu->ops->weight_prepare(L->gpu, &w, err, sizeof err) != QR_OK) {
        printf("weight_prepare: %s\n", err);
        exit(2);
    }
    qr_cuda_tune *tune = qr_cuda_backend_tune(L->gpu);
    const qr_cuda_tune saved = *tune;
    if (c->wpr) tune->mmvq_wpr = c->wpr;
    if (c->max_rows) tune->mmvq_max_rows = c->max_rows;
    if (c->tile) tune->gemm_tile_bytes = c->tile;
    if (c->no_pdl) tune->pdl = 0;
    if (c->no_dq) tune->dq_gemm = 0;
    if (c->no_wg) tune->dq_wg = 0;
    float *xd = lab_gpu_alloc(L, (size_t)(c->nr * c->k) * 4), *yd = lab_gpu_alloc(L, (size_t)(c->nr * c->n) * 4);
    lab_upload(L, xd, xh, (size_t)(c->nr * c->k) * 4);
    lab_poison(L, yd, (size_t)(c->nr * c->n) * 4);
    L->gpu->ops->matmul(L->gpu, &w, xd, c->nr, yd);
    lab_check_errors(L, "matmul");
    lab_download(L, yg, yd, (size_t)(c->nr * c->n) * 4);
    /* the oracle: every row when few, else the first 4 and the last 4 rows */
    /* version 6 of matmul_dq.cu takes dq_min_rows..mmvq_max_rows rows of Q4_K / Q6_K where it runs (f16 activations) */
    const bool v6 = (c->type == QR_TYPE_Q4_K || c->type == QR_TYPE_Q6_K) && tune->dq_gemm && tune->dq_tma && tune->dq_wg &&
                    c->nr >= tune->dq_min_rows && c->nr <= tune->mmvq_max_rows && c->k % 256 == 0;
    const bool gemm = c->nr > tune->mmvq_max_rows || v6 || (!is_quant(c->type) && c->k % (c->type == QR_TYPE_F32 ? 4 : 8));
    double max_err = 0, rel_err = 0;
    bool pass;
    const double tol = gemm && is_quant(c->type) ? 2e-2 : 1e-4;
    if (c->nr <= 16) {
        L->cpu->ops->matmul(L->cpu, &w, xh, c->nr, yc);
        pass = lab_compare(yg, yc, c->nr * c->n, tol, &max_err, &rel_err);
    } else {
        L->cpu->ops->matmul(L->cpu, &w, xh, 4, yc);
        L->cpu->ops->matmul(L->cpu, &w, xh + (c->nr - 4) * c->k, 4, yc + 4 * c->n);
        memmove(yg + 4 * c->n, yg + (c->nr - 4) * c->n, (size_t)(4 * c->n) * 4);
        pass = lab_compare(yg, yc, 8 * c->n, tol, &max_err, &rel_err);
    }
    lab_check_errors(L, "matmul oracle");
    if (c->cross && tune->dq_wg) { /* the wgmma version against the mma.sync one, every row */
        float *y1 = malloc((size_t)(c->nr * c->n) * 4), *y2 = malloc((size_t)(c->nr * c->n) * 4);
        double me = 0, re = 0;
        L->gpu->ops->matmul(L->gpu, &w, xd, c->nr, yd);
        lab_download(L, y1, yd, (size_t)(c->nr * c->n) * 4);
        tune->dq_wg = 0;
        L->gpu->ops->matmul(L->gpu, &w, xd, c->nr, yd);
        lab_download(L, y2, yd, (size_t)(c->nr * c->n) * 4);
        tune->dq_wg = saved.dq_wg;
        lab_check_errors(L, "matmul cross");
        const bool ok = lab_compare(y1, y2, c->nr * c->n, 1e-3, &me, &re);
        snprintf(cfg, sizeof cfg, "%s %lldx%lld r%d wg-vs-mma", qr_type_name(c->type), (long long)c->n, (long long)c->k,
                 c->nr);
        lab_record(L, "matmul-gemm", cfg, me, re, 1e-3, ok, 0, 0, 0);
        free(y1);
        free(y2);
    }
    double us = 0;
    if (c->time) {
        mm_run r = {.L = L, .w = &w, .x = xd, .nr = c->nr, .y = yd};
        us = lab_time(L, run_matmul, &r, !c->warm);
    }
    snprintf(cfg, sizeof cfg, "%s %lldx%lld r%d%s%s", qr_type_name(c->type), (long long)c->n, (long long)c->k, c->nr,
             gemm ? " gemm" : "", c->shape ? c->shape : "");
    if (c->wpr) snprintf(cfg + strlen(cfg), sizeof cfg - strlen(cfg), " wpr%d", c->wpr);
    if (c->tile) snprintf(cfg + strlen(cfg), sizeof cfg - strlen(cfg), " tile%lldM", (long long)(c->tile >> 20));
    if (c->warm) snprintf(cfg + strlen(cfg), sizeof cfg - strlen(cfg), " warm");
    if (c->no_pdl) snprintf(cfg + strlen(cfg), sizeof cfg - strlen(cfg), " no-pdl");
    if (c->no_dq) snprintf(cfg + strlen(cfg), sizeof cfg - strlen(cfg), " no-dq");
    if (c->no_wg) snprintf(cfg + strlen(cfg), sizeof cfg - strlen(cfg), " mma.sync");
    const double bytes = (double)wbytes + (double)(c->nr * c->k) * 4 + (double)(c->nr * c->n) * 4;
    lab_record(L, gemm ? "matmul-gemm" : "matmul", cfg, max_err, rel_err, tol, pass, us, gemm ? 0 : bytes,
               gemm ? 2.0 * (double)c->n * (double)c->k * (double)c->nr : 0);
    *tune = saved;
    lab_gpu_free(L, xd);
    lab_gpu_free(L, yd);
    L->gpu->ops->weight_release(L->gpu, &w);
    free(wbuf);
    free(xh);
    free(yg);
    free(yc);
}

const qr_type lab_all_types[LAB_N_TYPES] = {QR_TYPE_Q4_0, QR_TYPE_Q4_1, QR_TYPE_Q5_0, QR_TYPE_Q5_1, QR_TYPE_Q8_0,
                                           QR_TYPE_Q2_K, QR_TYPE_Q3_K, QR_TYPE_Q4_K, QR_TYPE_Q5_K, QR_TYPE_Q6_K,
                                           QR_TYPE_MXFP4, QR_TYPE_IQ4_NL, QR_TYPE_F16, QR_TYPE_BF16, QR_TYPE_F32};
#define all_types lab_all_types
#define N_TYPES LAB_N_TYPES

typedef struct shape {
    int64_t n, k;
    const char *name;
} shape;

static const shape mistral[] = {{4096, 4096, " mistral.attn_q"}, {14336, 4096, " mistral.ffn_up"},
                                {4096, 14336, " mistral.ffn_down"}, {32000, 4096, " mistral.output"},
                                {1024, 4096, " mistral.attn_k"}};
static const shape tiny[] = {{2048, 2048, " tinyllama.attn_q"}, {256, 2048, " tinyllama.attn_k"},
                             {5632, 2048, " tinyllama.ffn_up"}, {2048, 5632, " tinyllama.ffn_down"},
                             {32000, 2048, " tinyllama.output"}};

/* q/k/v through matmul_multi (one launch where the types allow: one type, or a pair such as q in Q4_0 with
 * k / v in Q8_0) against three CPU matmuls; timed with the pair in one launch and with a launch per type. */
typedef struct mm3_run {
    lab *L;
    const qr_weight *const *w;
    const float *x;
    int64_t nr;
    float *const *y;
} mm3_run;

static void run_multi(void *p) {
    mm3_run *r = p;
    r->L->gpu->ops->matmul_multi(r->L->gpu, 3, r->w, NULL, r->x, r->nr, r->y);
}

/* Random q / k / v weights of types t and n[i] rows of k, prepared on the GPU; their outputs of nr rows (yd) and the
 * activations xh uploaded (returned). */
static float *qkv_setup(lab *L, const qr_type t[3], const int64_t n[3], int64_t k, int nr, const float *xh, qr_weight w[3],
                        const qr_weight *wp[3], float *yd[3]) {
    for (int i = 0; i < 3; i++) {
        const size_t rb = qr_type_row_size(t[i], k);
        void *buf = malloc(rb * (size_t)n[i]);
        lab_gen_weight(L, t[i], n[i], k, buf);
        w[i] = (qr_weight){.name = "lab.qkv", .type = t[i], .ne = {k, n[i], 1, 1}, .row_bytes = rb, .host = buf};
        char err[256];
        if (L->gpu->ops->weight_prepare(L->gpu, &w[i], err, sizeof err) != QR_OK) {
            printf("weight_prepare: %s\n", err);
            exit(2);
        }
        wp[i] = &w[i];
        yd[i] = lab_gpu_alloc(L, (size_t)(nr * n[i]) * 4);
    }
    float *xd = lab_gpu_alloc(L, (size_t)(nr * k) * 4);
    lab_upload(L, xd, xh, (size_t)(nr * k) * 4);
    return xd;
}

static void multi_case(lab *L, qr_type tq, qr_type tkv, int64_t nq, int64_t nkv, int64_t k, int nr, bool pair) {
    const int64_t n[3] = {nq, nkv, nkv};
    const qr_type t[3] = {tq, tkv, tkv};
    qr_weight w[3];
    const qr_weight *wp[3];
    float *yd[3], *yh = malloc((size_t)(nr * (nq + 2 * nkv)) * 4), *yc = malloc((size_t)(nr * (nq + 2 * nkv)) * 4);
    float *xh = malloc((size_t)(nr * k) * 4);
    lab_fill(L, xh, nr * k, 1.0f);
    float *xd = qkv_setup(L, t, n, k, nr, xh, w, wp, yd);
    qr_cuda_tune *tune = qr_cuda_backend_tune(L->gpu);
    const qr_cuda_tune saved = *tune;
    tune->multi_pair = pair;
    L->gpu->ops->matmul_multi(L->gpu, 3, wp, NULL, xd, nr, yd);
    lab_check_errors(L, "matmul_multi");
    int64_t o = 0;
    for (int i = 0; i < 3; i++) {
        L->cpu->ops->matmul(L->cpu, &w[i], xh, nr, yc + o);
        lab_download(L, yh + o, yd[i], (size_t)(nr * n[i]) * 4);
        o += nr * n[i];
    }
    double mx, rel;
    const bool pass = lab_compare(yh, yc, o, 1e-4, &mx, &rel);
    mm3_run r = {.L = L, .w = wp, .x = xd, .nr = nr, .y = yd};
    const double us = lab_time(L, run_multi, &r, true);
    double bytes = 0;
    for (int i = 0; i < 3; i++) bytes += (double)w[i].row_bytes * (double)n[i];
    char cfg[96];
    snprintf(cfg, sizeof cfg, "%s q %lld + %s k/v %lld x%lld r%d%s", qr_type_name(tq), (long long)nq, qr_type_name(tkv),
             (long long)nkv, (long long)k, nr, tq == tkv ? "" : pair ? " one launch" : " per type");
    lab_record(L, "matmul_multi", cfg, mx, rel, 1e-4, pass, us, bytes, 0);
    *tune = saved;
    for (int i = 0; i < 3; i++) {
        lab_gpu_free(L, yd[i]);
        L->gpu->ops->weight_release(L->gpu, &w[i]);
        free((void *)w[i].host);
    }
    lab_gpu_free(L, xd);
    free(xh), free(yh), free(yc);
}

static void swiglu_case(lab *L, qr_type t, int64_t n, int64_t k, int nr);

/* q / k / v at batched decode through matmul_multi: version 6 of matmul_dq.cu takes each run of one K-quant type as
 * one launch (QUARREL_CUDA_DQ_MULTI; q / k alone where v has another type). Against the CPU oracle (the first and the
 * last 4 rows), every row against one matmul each (QUARREL_CUDA_DQ_MULTI=0), and timed both ways. */
static void multi_dq_case(lab *L, qr_type tq, qr_type tv, int64_t nq, int64_t nkv, int64_t k, int nr, bool time) {
    const int64_t n[3] = {nq, nkv, nkv};
    const qr_type t[3] = {tq, tq, tv};
    qr_weight w[3];
    const qr_weight *wp[3];
    float *yd[3];
    const int64_t n_all = nq + 2 * nkv;
    float *xh = malloc((size_t)(nr * k) * 4), *y1 = malloc((size_t)(nr * n_all) * 4), *y2 = malloc((size_t)(nr * n_all) * 4);
    float *yc = malloc((size_t)(8 * n_all) * 4), *yg = malloc((size_t)(8 * n_all) * 4);
    if (!xh || !y1 || !y2 || !yc || !yg) {
        printf("matmul_multi: out of host memory\n");
        exit(2);
    }
    lab_fill(L, xh, nr * k, 1.0f);
    float *xd = qkv_setup(L, t, n, k, nr, xh, w, wp, yd);
    qr_cuda_tune *tune = qr_cuda_backend_tune(L->gpu);
    const qr_cuda_tune saved = *tune;
    for (int pass = 0; pass < 2; pass++) { /* one launch a run, then one matmul each */
        tune->dq_multi = pass == 0;
        for (int i = 0; i < 3; i++) lab_poison(L, yd[i], (size_t)(nr * n[i]) * 4);
        L->gpu->ops->matmul_multi(L->gpu, 3, wp, NULL, xd, nr, yd);
        lab_check_errors(L, "matmul_multi (dq)");
        int64_t o = 0;
        for (int i = 0; i < 3; i++) {
            lab_download(L, (pass ? y2 : y1) + o, yd[i], (size_t)(nr * n[i]) * 4);
            o += nr * n[i];
        }
    }
    int64_t o = 0, oc = 0;
    for (int i = 0; i < 3; i++) { /* the oracle's rows 0..3 and nr-4..nr-1 of each */
        L->cpu->ops->matmul(L->cpu, &w[i], xh, 4, yc + oc);
        L->cpu->ops->matmul(L->cpu, &w[i], xh + (nr - 4) * k, 4, yc + oc + 4 * n[i]);
        memcpy(yg + oc, y1 + o, (size_t)(4 * n[i]) * 4);
        memcpy(yg + oc + 4 * n[i], y1 + o + (nr - 4) * n[i], (size_t)(4 * n[i]) * 4);
        o += nr * n[i];
        oc += 8 * n[i];
    }
    double mx, rel, mx2, rel2;
    const bool pass = lab_compare(yg, yc, oc, 2e-2, &mx, &rel);
    const bool same = lab_compare(y1, y2, o, 1e-3, &mx2, &rel2);
    char cfg[112];
    const char *tn = qr_type_name(tq), *vn = qr_type_name(tv);
    snprintf(cfg, sizeof cfg, "%s q %lld + k/v %lld (v %s) x%lld r%d dq one launch a type", tn, (long long)nq,
             (long long)nkv, vn, (long long)k, nr);
    double bytes = 0;
    for (int i = 0; i < 3; i++) bytes += (double)w[i].row_bytes * (double)n[i];
    mm3_run r = {.L = L, .w = wp, .x = xd, .nr = nr, .y = yd};
    tune->dq_multi = 1;
    double us = time ? lab_time(L, run_multi, &r, true) : 0;
    lab_record(L, "matmul_multi", cfg, mx, rel, 2e-2, pass, us, bytes, 0);
    snprintf(cfg, sizeof cfg, "%s q %lld + k/v %lld (v %s) x%lld r%d dq one launch vs one each", tn, (long long)nq,
             (long long)nkv, vn, (long long)k, nr);
    lab_record(L, "matmul_multi", cfg, mx2, rel2, 1e-3, same, 0, 0, 0);
    if (time) {
        tune->dq_multi = 0;
        us = lab_time(L, run_multi, &r, true);
        snprintf(cfg, sizeof cfg, "%s q %lld + k/v %lld (v %s) x%lld r%d dq one each", tn, (long long)nq, (long long)nkv,
                 vn, (long long)k, nr);
        lab_record(L, "matmul_multi", cfg, 0, 0, 2e-2, true, us, bytes, 0);
    }
    *tune = saved;
    for (int i = 0; i < 3; i++) {
        lab_gpu_free(L, yd[i]);
        L->gpu->ops->weight_release(L->gpu, &w[i]);
        free((void *)w[i].host);
    }
    lab_gpu_free(L, xd);
    free(xh), free(y1), free(y2), free(yc), free(yg);
}

/* gate/up + swiglu through matmul_glu (one launch at decode sizes) against two CPU matmuls and swiglu. */
static void swiglu_case(lab *L, qr_type t, int64_t n, int64_t k, int nr) {
    qr_weight w[2];
    for (int i = 0; i < 2; i++) {
        const size_t rb = qr_type_row_size(t, k);
        void *buf = malloc(rb * (size_t)n);
        lab_gen_weight(L, t, n, k, buf);
        w[i] = (qr_weight){.name = i ? "lab.up" : "lab.gate", .type = t, .ne = {k, n, 1, 1}, .row_bytes = rb, .host = buf};
        char err[256];
        if (L->gpu->ops->weight_prepare(L->gpu, &w[i], err, sizeof err) != QR_OK) {
            printf("weight_prepare: %s\n", err);
            exit(2);
        }
    }
    float *xh = malloc((size_t)(nr * k) * 4), *g = malloc((size_t)(nr * n) * 4), *u = malloc((size_t)(nr * n) * 4),
          *got = malloc((size_t)(nr * n) * 4);
    lab_fill(L, xh, nr * k, 1.0f);
    float *xd = lab_gpu_alloc(L, (size_t)(nr * k) * 4), *od = lab_gpu_alloc(L, (size_t)(nr * n) * 4),
          *sd = lab_gpu_alloc(L, (size_t)(nr * n) * 4);
    lab_upload(L, xd, xh, (size_t)(nr * k) * 4);
    L->gpu->ops->matmul_glu(L->gpu, &w[0], &w[1], xd, nr, false, od, sd);
    lab_check_errors(L, "matmul_glu");
    lab_download(L, got, od, (size_t)(nr * n) * 4);
    L->cpu->ops->matmul(L->cpu, &w[0], xh, nr, g);
    L->cpu->ops->matmul(L->cpu, &w[1], xh, nr, u);
    L->cpu->ops->swiglu(L->cpu, g, u, nr * n, g);
    double mx, rel;
    const double tol = nr > 8 ? 2e-2 : 1e-4; /* past the mat-vec's rows: f16 activations (GEMM) */
    const bool pass = lab_compare(got, g, nr * n, tol, &mx, &rel);
    char cfg[96];
    snprintf(cfg, sizeof cfg, "%s gate/up %lldx%lld r%d", qr_type_name(t), (long long)n, (long long)k, nr);
    lab_record(L, "matmul_glu", cfg, mx, rel, tol, pass, 0, 0, 0);
    for (int i = 0; i < 2; i++) {
        L->gpu->ops->weight_release(L->gpu, &w[i]);
        free((void *)w[i].host);
    }
    lab_gpu_free(L, xd), lab_gpu_free(L, od), lab_gpu_free(L, sd);
    free(xh), free(g), free(u), free(got);
}

static void check_multi(lab *L) {
    /* tinyllama's gate/up (the light one-row form), mistral's (the default form), a K-quant, 3 rows */
    swiglu_case(L, QR_TYPE_Q4_0, 5632, 2048, 1);
    swiglu_case(L, QR_TYPE_Q8_0, 14336, 1024, 1);
    swiglu_case(L, QR_TYPE_Q4_K, 1536, 1024, 1);
    swiglu_case(L, QR_TYPE_Q4_0, 1024, 512, 3);
    /* mixtral (q Q4_0, k / v Q8_0), a Q4_K_M layer with a Q6_K v, one type, and 3 rows */
    const struct { qr_type q, kv; int64_t nq, nkv, k; int nr; } c[] = {
        {QR_TYPE_Q4_0, QR_TYPE_Q8_0, 4096, 1024, 4096, 1}, {QR_TYPE_Q4_K, QR_TYPE_Q6_K, 4096, 1024, 4096, 1},
        {QR_TYPE_Q5_K, QR_TYPE_Q6_K, 2048, 256, 2048, 1},  {QR_TYPE_Q4_0, QR_TYPE_Q4_0, 4096, 1024, 4096, 1},
        {QR_TYPE_Q4_0, QR_TYPE_Q8_0, 2048, 256, 2048, 3},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
        for (int pair = 1; pair >= (c[i].q == c[i].kv ? 1 : 0); pair--)
            multi_case(L, c[i].q, c[i].kv, c[i].nq, c[i].nkv, c[i].k, c[i].nr, pair);
}

void lab_matmul(lab *L) {
    const bool dq_only = getenv("QUARREL_LAB_DQ_ONLY") != NULL; /* only the K-quant batched-decode cases */
    if (!dq_only) check_multi(L);
    /* 1. correctness of every type, every row count 1..8 (one launch each), every warps-per-row */
    for (int ti = 0; ti < N_TYPES && !dq_only; ti++) {
        for (int nr = 1; nr <= 8; nr++) {
            mm_case c = {.type = all_types[ti], .n = 999, .k = 1024, .nr = nr};
            matmul_case(L, &c);
        }
        for (int wpr = 1; wpr <= 4; wpr *= 2) {
            mm_case c1 = {.type = all_types[ti], .n = 37, .k = 2048, .nr = 1, .wpr = wpr};
            mm_case c3 = {.type = all_types[ti], .n = 515, .k = 3072, .nr = 3, .wpr = wpr};
            matmul_case(L, &c1);
            matmul_case(L, &c3);
        }
        /* prefill path (dequantize + cuBLAS) and the mat-vec looped over groups of 8 rows */
        const int pre[] = {9, 16, 64};
        for (int i = 0; i < 3; i++) {
            mm_case c = {.type = all_types[ti], .n = 777, .k = 1024, .nr = pre[i]};
            matmul_case(L, &c);
        }
        mm_case cl = {.type = all_types[ti], .n = 777, .k = 1024, .nr = 21, .max_rows = 64};
        matmul_case(L, &cl);
    }
    /* float rows whose length is not a multiple of 16 bytes take cuBLAS even for one row */
    const qr_type odd_types[] = {QR_TYPE_F32, QR_TYPE_F16, QR_TYPE_BF16};
    for (int i = 0; i < 3 && !dq_only; i++) {
        mm_case c = {.type = odd_types[i], .n = 300, .k = 1001, .nr = 2};
        matmul_case(L, &c);
    }
    /* batched decode of K-quant weights (matmul_dq.cu) against the f16 cache + cuBLAS: odd shapes, every
     * token-tile width, split-K on and off */
    const qr_type kq[] = {QR_TYPE_Q4_K, QR_TYPE_Q6_K};
    if (dq_only && strcmp(getenv("QUARREL_LAB_DQ_ONLY"), "2") == 0) { /* one timed shape (profiling) */
        const char *nr = getenv("QUARREL_LAB_DQ_ROWS"); /* default 64 */
        mm_case c = {.type = QR_TYPE_Q4_K, .n = 14336, .k = 4096, .nr = nr ? atoi(nr) : 64, .time = true,
                     .shape = " mistral.ffn_up"};
        matmul_case(L, &c);
        return;
    }
    for (int ti = 0; ti < 2; ti++) {
        const int rows[] = {9, 23, 40, 64, 100, 256};
        for (int i = 0; i < 6; i++) {
            mm_case c = {.type = kq[ti], .n = 1000, .k = 2816, .nr = rows[i], .cross = true};
            matmul_case(L, &c);
        }
        /* the small shapes of the tiny test models: fewer rows than one tile, a single stage pair */
        for (int i = 0; i < 6; i += 3) {
            mm_case c = {.type = kq[ti], .n = 64, .k = 256, .nr = rows[i], .cross = true};
            matmul_case(L, &c);
            mm_case d = {.type = kq[ti], .n = 300, .k = 768, .nr = rows[i + 2], .cross = true};
            matmul_case(L, &d);
        }
        /* 5..8 rows: version 6 (the default where it runs) against the mat-vec (no-dq) */
        for (int nr = 5; nr <= 8; nr += 3)
            for (int s = 0; s < 2; s++)
                for (int dq = 0; dq < 2; dq++) {
                    mm_case c = {.type = kq[ti], .n = mistral[s].n, .k = mistral[s].k, .nr = nr, .time = true,
                                 .no_dq = dq == 1, .shape = mistral[s].name};
                    matmul_case(L, &c);
                }
        /* q / k / v in one launch: odd shapes (tiny models), then mistral's (timed) */
        multi_dq_case(L, QR_TYPE_Q4_K, kq[ti], 300, 64, 768, rows[1], false);
        multi_dq_case(L, QR_TYPE_Q4_K, kq[ti], 576, 192, 2816, rows[3], false);
        swiglu_case(L, kq[ti], 1280, 2816, rows[2]); /* gate / up in one launch */
        multi_dq_case(L, QR_TYPE_Q4_K, kq[ti], 4096, 1024, 4096, 6, true); /* 5..8 rows: version 6 too */
        for (int nr = 16; nr <= 64; nr *= 2)
            if (!L->quick || nr == 64) multi_dq_case(L, QR_TYPE_Q4_K, kq[ti], 4096, 1024, 4096, nr, true);
        /* the wgmma version (default where it runs), the mma.sync one, the f16 cache + cuBLAS */
        for (int s = 0; s < 5; s++)
            for (int nr = 16; nr <= 256; nr *= 2)
                for (int dq = 0; dq < 3; dq++) {
                    if (L->quick && (nr != 64 || s > 2)) continue;
                    if (dq_only && dq == 1 && getenv("QUARREL_CUDA_DQ_SPLITS")) continue; /* the baseline once */
                    mm_case c = {.type = kq[ti], .n = mistral[s].n, .k = mistral[s].k, .nr = nr, .time = true,
                                 .no_dq = dq == 1, .no_wg = dq == 2, .shape = mistral[s].name};
                    matmul_case(L, &c);
                }
    }
    if (dq_only) return;
    if (L->quick) {
        mm_case c = {.type = QR_TYPE_Q4_0, .n = 4096, .k = 4096, .nr = 1, .time = true, .shape = " mistral.attn_q"};
        matmul_case(L, &c);
        return;
    }
    /* 2. decode, one row: every type at the mistral-7b shapes */
    for (int ti = 0; ti < N_TYPES; ti++)
        for (int s = 0; s < 5; s++) {
            mm_case c = {.type = all_types[ti], .n = mistral[s].n, .k = mistral[s].k, .nr = 1, .time = true,
                         .shape = mistral[s].name};
            matmul_case(L, &c);
        }
    /* the fixed cost of one matmul call (activation quantization + a launch): 8 output rows, cold
     * (L2 flushed) and warm; and the effect of programmatic dependent launch */
    const qr_type ovh[] = {QR_TYPE_Q4_0, QR_TYPE_Q4_K, QR_TYPE_F16};
    for (int ti = 0; ti < 3; ti++)
        for (int s = 0; s < 2; s++)
            for (int v = 0; v < 3; v++) {
                mm_case c = {.type = ovh[ti], .n = 8, .k = s ? 14336 : 4096, .nr = 1, .time = true, .warm = v == 1,
                             .no_pdl = v == 2, .shape = " overhead"};
                matmul_case(L, &c);
            }
    for (int ti = 0; ti < 3; ti++)
        for (int s = 0; s < 4; s++) {
            mm_case c = {.type = ovh[ti], .n = mistral[s].n, .k = mistral[s].k, .nr = 1, .time = true, .no_pdl = true,
                         .shape = mistral[s].name};
            matmul_case(L, &c);
            mm_case w = {.type = ovh[ti], .n = mistral[s].n, .k = mistral[s].k, .nr = 1, .time = true, .warm = true,
                         .shape = mistral[s].name};
            if (s == 0) matmul_case(L, &w);
        }
    /* 3. tinyllama shapes */
    const qr_type main_types[] = {QR_TYPE_Q4_0, QR_TYPE_Q8_0, QR_TYPE_Q4_K, QR_TYPE_Q6_K, QR_TYPE_F16};
    for (int ti = 0; ti < 5; ti++)
        for (int s = 0; s < 5; s++) {
            mm_case c = {.type = main_types[ti], .n = tiny[s].n, .k = tiny[s].k, .nr = 1, .time = true,
                         .shape = tiny[s].name};
            matmul_case(L, &c);
        }
    /* 4. batched decode: 2, 4, 8 rows */
    for (int ti = 0; ti < 5; ti++)
        for (int nr = 2; nr <= 8; nr *= 2) {
            mm_case c = {.type = main_types[ti], .n = 14336, .k = 4096, .nr = nr, .time = true, .shape = " mistral.ffn_up"};
            matmul_case(L, &c);
        }
    /* 5. warps per row */
    const qr_type wt[] = {QR_TYPE_Q4_0, QR_TYPE_Q4_K, QR_TYPE_F16};
    for (int ti = 0; ti < 3; ti++)
        for (int s = 0; s < 5; s += 4)
            for (int wpr = 1; wpr <= 4; wpr *= 2) {
                mm_case c = {.type = wt[ti], .n = mistral[s].n, .k = mistral[s].k, .nr = 1, .wpr = wpr, .time = true,
                             .shape = mistral[s].name};
                matmul_case(L, &c);
            }
    /* 6. mat-vec looped over 8-row groups vs dequantize + cuBLAS, 16..64 rows */
    for (int ti = 0; ti < 2; ti++)
        for (int nr = 16; nr <= 64; nr *= 2)
            for (int mv = 0; mv < 2; mv++) {
                mm_case c = {.type = wt[ti], .n = 4096, .k = 4096, .nr = nr, .max_rows = mv ? 64 : 8, .time = true,
                             .shape = mv ? " mistral.attn_q mmv" : " mistral.attn_q"};
                matmul_case(L, &c);
            }
    /* 7. prefill GEMM: 512 rows */
    const qr_type gt[] = {QR_TYPE_Q4_0, QR_TYPE_Q8_0, QR_TYPE_Q4_K, QR_TYPE_Q6_K, QR_TYPE_F16, QR_TYPE_BF16, QR_TYPE_F32};
    for (int ti = 0; ti < 7; ti++)
        for (int s = 1; s <= 2; s++) {
            mm_case c = {.type = gt[ti], .n = mistral[s].n, .k = mistral[s].k, .nr = 512, .time = true,
                         .shape = mistral[s].name};
            matmul_case(L, &c);
        }
    const int64_t tiles[] = {8 << 20, 32 << 20};
    for (int i = 0; i < 2; i++) {
        mm_case c = {.type = QR_TYPE_Q4_K, .n = 14336, .k = 4096, .nr = 512, .tile = tiles[i], .time = true,
                     .shape = " mistral.ffn_up"};
        matmul_case(L, &c);
    }
}
