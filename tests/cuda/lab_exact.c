/* lab_exact.c — the "exact" section of the lab: the exact mode (QUARREL_CUDA_EXACT=1,
 * src/backend/cuda/exact.cu) against the CPU backend's AVX2 path, bit for bit (a check passes only when
 * every output has the CPU's bits; max_err is reported for the failures' size):
 *   - matmul and matmul_id for every weight type and every dot-product order the CPU picks (1-3 rows:
 *     vec_dot or the repacked GEMV; 4-7: the repacked GEMM's 4-row groups; 8 and more: the tiled K-quant
 *     GEMM; 2 and more: sgemm where the traits have it), on weight row counts that are and are not a
 *     multiple of the repack rows, odd block counts and rows of >= 64 blocks; timings at the mistral-7b
 *     and SmolLM2 shapes;
 *   - rmsnorm, attention (lab_attention.c), rope and the elementwise ops (lab_ops.c), routing, the Mamba2
 *     ops and attention sinks (lab_moe_ssm.c), on the same oracle;
 *   - rmsnorm and attention again with QUARREL_CUDA_EXACT_SEQSUM=1 (every double sum in the CPU's order). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "lab.h"
#include "quant/quant.h"
#include "util/util.h"

typedef struct ex_ctx {
    lab *L;
    qr_backend *cpu, *gpu; /* the AVX2 CPU backend, the exact GPU backend */
} ex_ctx;

typedef struct ex_run {
    qr_backend *be;
    const qr_weight *w, *b;
    const float *x;
    const int32_t *ids;
    int64_t nr;
    int32_t n_used;
    float *y;
} ex_run;

static void run_ex(void *p) {
    ex_run *r = p;
    if (r->ids)
        r->be->ops->matmul_id(r->be, &(qr_moe_matmul_args){.w = r->w, .w_b = r->b, .x = r->x, .ids = r->ids,
                                                           .n_rows = r->nr, .n_used = r->n_used, .y = r->y});
    else r->be->ops->matmul(r->be, r->w, r->x, r->nr, r->y);
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        printf("exact: out of host memory\n");
        exit(2);
    }
    return p;
}

/* One case: n_expert > 0 runs matmul_id with n_used experts per row (random ids), else matmul. */
static void ex_case(ex_ctx *E, qr_type type, int64_t n, int64_t k, int64_t nr, int n_expert, int n_used, bool time,
                    const char *label) {
    lab *L = E->L;
    char err[512], cfg[96];
    if (k % (int64_t)qr_type_table[type].block_size) return; /* e.g. K-quants at SmolLM2's 576 */
    const int ne = n_expert > 0 ? n_expert : 1;
    const size_t row_bytes = qr_type_row_size(type, k), wbytes = (size_t)ne * (size_t)n * row_bytes;
    const int64_t n_out = n_expert > 0 ? nr * n_used * n : nr * n;
    void *wbuf = xmalloc(wbytes);
    float *xh = xmalloc((size_t)(nr * k) * 4), *yg = xmalloc((size_t)n_out * 4), *yc = xmalloc((size_t)n_out * 4);
    float *bh = xmalloc((size_t)(ne * n) * 4);
    int32_t *ids = xmalloc((size_t)(nr * (n_used > 0 ? n_used : 1)) * 4);
    lab_gen_weight(L, type, (int64_t)ne * n, k, wbuf);
    lab_fill(L, xh, nr * k, 1.0f);
    for (int64_t i = 0; i < nr * k; i += 97) xh[i] *= 20.0f; /* outliers: the activation scales vary */
    for (int64_t r = 0; r < nr && r < 2 && k >= 256; r++) xh[r * k + 5] = -30.0f, xh[r * k + 7] = 30.0f; /* Q8_K sign ties */
    lab_fill(L, bh, ne * n, 0.5f);
    for (int64_t r = 0; r < nr && n_expert > 0; r++)
        for (int j = 0; j < n_used; j++) ids[r * n_used + j] = (int32_t)((r * 7 + j * 3 + (int64_t)(lab_u64(L) % 2)) % ne);
    qr_weight w = {.name = "lab.exact", .type = type, .ne = {k, n, ne, 1}, .row_bytes = row_bytes, .host = wbuf};
    qr_weight b = {.name = "lab.exact.bias", .type = QR_TYPE_F32, .ne = {n, ne, 1, 1}, .row_bytes = (size_t)n * 4, .host = bh};
    if (E->gpu->ops->weight_prepare(E->gpu, &w, err, sizeof err) != QR_OK ||
        (n_expert > 0 && E->gpu->ops->weight_prepare(E->gpu, &b, err, sizeof err) != QR_OK)) {
        printf("weight_prepare: %s\n", err);
        exit(2);
    }
    float *xd = lab_gpu_alloc(L, (size_t)(nr * k) * 4), *yd = lab_gpu_alloc(L, (size_t)n_out * 4);
    int32_t *idd = (int32_t *)lab_gpu_alloc(L, (size_t)(nr * (n_used > 0 ? n_used : 1)) * 4);
    lab_upload(L, xd, xh, (size_t)(nr * k) * 4);
    lab_upload(L, idd, ids, (size_t)(nr * (n_used > 0 ? n_used : 1)) * 4);
    lab_poison(L, yd, (size_t)n_out * 4);
    ex_run g = {.be = E->gpu, .w = &w, .b = n_expert > 0 ? &b : NULL, .x = xd, .ids = n_expert > 0 ? idd : NULL,
                .nr = nr, .n_used = n_used, .y = yd};
    ex_run c = {.be = E->cpu, .w = &w, .b = n_expert > 0 ? &b : NULL, .x = xh, .ids = n_expert > 0 ? ids : NULL,
                .nr = nr, .n_used = n_used, .y = yc};
    run_ex(&g);
    char e2[512];
    if (E->gpu->ops->last_error(E->gpu, e2, sizeof e2) != QR_OK) {
        printf("exact %s: %s\n", qr_type_name(type), e2);
        exit(2);
    }
    lab_download(L, yg, yd, (size_t)n_out * 4);
    run_ex(&c);
    int64_t diff = 0;
    for (int64_t i = 0; i < n_out; i++) diff += memcmp(&yg[i], &yc[i], 4) != 0;
    double max_err = 0, rel_err = 0;
    lab_compare(yg, yc, n_out, 1.0, &max_err, &rel_err);
    double us = 0;
    if (time) us = lab_time(L, run_ex, &g, true);
    snprintf(cfg, sizeof cfg, "%s %lldx%lld r%lld%s%s", qr_type_name(type), (long long)n, (long long)k, (long long)nr,
             n_expert > 0 ? " moe" : "", label ? label : "");
    if (diff) snprintf(cfg + strlen(cfg), sizeof cfg - strlen(cfg), " %lld/%lld differ", (long long)diff, (long long)n_out);
    const double bytes = (double)(n_expert > 0 ? (size_t)(nr * n_used) * n * row_bytes : (size_t)n * row_bytes) +
                         (double)(nr * k) * 4 + (double)n_out * 4;
    lab_record(L, n_expert > 0 ? "exact-mm-id" : (nr > 8 ? "exact-gemm" : "exact-mm"), cfg, max_err, rel_err, 0.0,
               diff == 0, us, nr > 8 ? 0 : bytes, nr > 8 ? 2.0 * (double)n * (double)k * (double)nr : 0);
    lab_gpu_free(L, xd);
    lab_gpu_free(L, yd);
    lab_gpu_free(L, idd);
    E->gpu->ops->weight_release(E->gpu, &w);
    if (n_expert > 0) E->gpu->ops->weight_release(E->gpu, &b);
    free(wbuf);
    free(xh);
    free(yg);
    free(yc);
    free(bh);
    free(ids);
}

/* rmsnorm of rows x dim on gpu against the CPU; wide: a third of the values 1e-4 smaller (a sum whose low
 * bits carry tiny squares: the parallel sum's check has to hold them). */
static void ex_rmsnorm(ex_ctx *E, int64_t rows, int64_t dim, bool wide, const char *tag) {
    lab *L = E->L;
    char err[512], cfg[96];
    float *xh = xmalloc((size_t)(rows * dim) * 4), *wh = xmalloc((size_t)dim * 4);
    float *yg = xmalloc((size_t)(rows * dim) * 4), *yc = xmalloc((size_t)(rows * dim) * 4);
    lab_fill(L, xh, rows * dim, 2.0f);
    lab_fill(L, wh, dim, 1.0f);
    if (wide)
        for (int64_t i = 0; i < rows * dim; i++)
            if (lab_u64(L) % 3 == 0) xh[i] *= 1e-4f;
    qr_weight w = {.name = "lab.exact.norm", .type = QR_TYPE_F32, .ne = {dim, 1, 1, 1}, .row_bytes = (size_t)dim * 4,
                   .host = wh};
    if (E->gpu->ops->weight_prepare(E->gpu, &w, err, sizeof err) != QR_OK) {
        printf("weight_prepare: %s\n", err);
        exit(2);
    }
    float *xd = lab_gpu_alloc(L, (size_t)(rows * dim) * 4), *yd = lab_gpu_alloc(L, (size_t)(rows * dim) * 4);
    lab_upload(L, xd, xh, (size_t)(rows * dim) * 4);
    lab_poison(L, yd, (size_t)(rows * dim) * 4);
    E->gpu->ops->rmsnorm(E->gpu, xd, &w, rows, dim, 1e-6f, yd);
    lab_check_errors(L, "rmsnorm (exact)");
    lab_download(L, yg, yd, (size_t)(rows * dim) * 4);
    E->cpu->ops->rmsnorm(E->cpu, xh, &w, rows, dim, 1e-6f, yc);
    double mx = 0, rel = 0;
    const bool ok = lab_compare(yg, yc, rows * dim, 1.0, &mx, &rel) && memcmp(yg, yc, (size_t)(rows * dim) * 4) == 0;
    snprintf(cfg, sizeof cfg, "%s%lld x %lld%s", tag, (long long)rows, (long long)dim, wide ? " wide range" : "");
    lab_record(L, "exact-rmsnorm", cfg, mx, rel, 0.0, ok, 0, 0, 0);
    lab_gpu_free(L, xd);
    lab_gpu_free(L, yd);
    E->gpu->ops->weight_release(E->gpu, &w);
    free(xh), free(wh), free(yg), free(yc);
}

/* The non-matmul exact ops on backend gpu (its stream taking the lab's): rmsnorm and attention; with
 * all, rope, the elementwise ops, routing, the Mamba2 ops and attention sinks too. */
static void ex_ops(ex_ctx *E, const char *tag, bool all) {
    lab *L = E->L;
    L->gpu = E->gpu;
    L->stream = qr_cuda_backend_stream(E->gpu);
    const int64_t dims[] = {576, 640, 2048, 4096, 1001};
    for (int d = 0; d < 5; d++)
        for (int wide = 0; wide < 2; wide++) {
            ex_rmsnorm(E, 1, dims[d], wide, tag);
            ex_rmsnorm(E, 37, dims[d], wide, tag);
        }
    lab_attention_exact(L, tag);
    if (all) {
        lab_ops_exact(L);
        lab_moe_ssm_exact(L);
    }
}

void lab_exact(lab *L) {
    if (!qr_cpu_has_avx2() || strcmp(qr_quant_simd_level(), "avx2") != 0) {
        printf("exact: SKIP, this CPU does not run the AVX2 path the exact mode reproduces\n");
        return;
    }
    char err[512];
    ex_ctx E = {.L = L};
    const qr_backend_cpu_params cp = {.n_threads = 0};
    if (qr_backend_cpu_create(&cp, &E.cpu, err, sizeof err) != QR_OK) {
        printf("exact: cpu backend: %s\n", err);
        exit(2);
    }
    setenv("QUARREL_CUDA_EXACT", "1", 1);
    const qr_backend_cuda_params gp = {.gpu = 0};
    const qr_status st = qr_backend_cuda_create(&gp, &E.gpu, err, sizeof err);
    unsetenv("QUARREL_CUDA_EXACT");
    if (st != QR_OK) {
        printf("exact: gpu backend: %s\n", err);
        exit(2);
    }
    /* everything below on the exact backend: its allocations, copies, stream (poison, timing events) */
    qr_backend *saved_gpu = L->gpu;
    void *saved_stream = L->stream;
    L->gpu = E.gpu;
    L->stream = qr_cuda_backend_stream(E.gpu);
    /* 1. every type x order, bit for bit */
    const int64_t rows[] = {1, 3, 4, 7, 9, 21};
    for (int ti = 0; ti < LAB_N_TYPES; ti++) {
        const qr_type t = lab_all_types[ti];
        const int64_t bs = (int64_t)qr_type_table[t].block_size, k1 = bs == 256 ? 1280 : (bs == 1 ? 1000 : 1184);
        const int64_t k2 = bs == 256 ? 768 : (bs == 1 ? 83 : 96);
        for (int r = 0; r < 6; r++) {
            ex_case(&E, t, 512, k1, rows[r], 0, 0, false, NULL); /* a multiple of every repack row count */
            ex_case(&E, t, 515, k1, rows[r], 0, 0, false, NULL);
        }
        const int64_t k3 = bs == 256 ? 256 * 70 : (bs == 1 ? 3000 : 32 * 100); /* >= 64 blocks, a partial last chunk */
        ex_case(&E, t, 133, k3, 1, 0, 0, false, NULL);
        ex_case(&E, t, 96, k2, 1, 0, 0, false, NULL);
        ex_case(&E, t, 96, k2, 12, 0, 0, false, NULL);
        ex_case(&E, t, 256, k1, 3, 8, 2, false, NULL); /* matmul_id: 8 experts, 2 per row, bias */
        ex_case(&E, t, 256, k1, 1, 4, 4, false, NULL);
    }
    if (!L->quick) {
        /* 2. timings: decode at the mistral-7b and SmolLM2 shapes, a 512-row prefill */
        const qr_type tt[] = {QR_TYPE_Q4_0, QR_TYPE_Q4_1, QR_TYPE_Q8_0, QR_TYPE_Q4_K, QR_TYPE_Q6_K, QR_TYPE_F16};
        for (int ti = 0; ti < 6; ti++) {
            ex_case(&E, tt[ti], 4096, 4096, 1, 0, 0, true, " mistral.attn_q");
            ex_case(&E, tt[ti], 14336, 4096, 1, 0, 0, true, " mistral.ffn_up");
            ex_case(&E, tt[ti], 1536, 576, 1, 0, 0, true, " smollm2.ffn_up");
            ex_case(&E, tt[ti], 49152, 576, 1, 0, 0, true, " smollm2.output");
            ex_case(&E, tt[ti], 1536, 576, 512, 0, 0, true, " smollm2.ffn_up");
        }
        ex_case(&E, QR_TYPE_Q4_0, 4096, 4096, 512, 0, 0, true, " mistral.attn_q");
    }
    /* 3. the other ops, bit for bit, against the AVX2 CPU backend; then rmsnorm and attention again with
     * every double sum in the CPU's order (the fallback of the parallel sums' check, forced) */
    qr_backend *saved_cpu = L->cpu;
    L->cpu = E.cpu;
    L->exact = true;
    ex_ops(&E, "", true);
    setenv("QUARREL_CUDA_EXACT", "1", 1);
    setenv("QUARREL_CUDA_EXACT_SEQSUM", "1", 1);
    qr_backend *gpu_par = E.gpu;
    const qr_status st2 = qr_backend_cuda_create(&gp, &E.gpu, err, sizeof err);
    unsetenv("QUARREL_CUDA_EXACT");
    unsetenv("QUARREL_CUDA_EXACT_SEQSUM");
    if (st2 != QR_OK) {
        printf("exact: gpu backend (sequential sums): %s\n", err);
        exit(2);
    }
    ex_ops(&E, "seq-sums ", false);
    qr_backend_free(E.gpu);
    E.gpu = gpu_par;
    L->exact = false;
    L->cpu = saved_cpu;
    L->gpu = saved_gpu;
    L->stream = saved_stream;
    qr_backend_free(E.gpu);
    qr_backend_free(E.cpu);
}
