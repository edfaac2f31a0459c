/* lab_moe_ssm.c — the lab's checks of the MoE and Mamba2 ops (issue 9) against the CPU scalar oracle:
 * moe_route (softmax / sigmoid + selection bias / softmax over the selected, norm, scale), matmul_id
 * and moe_gate_up over 3-D expert weights of several types (with and without biases), moe_combine,
 * glu (SwiGLU, gpt-oss's clamped SwiGLU, relu^2, qwen2moe's sigmoid), ssm_conv and ssm_scan with rolling
 * per-sequence states over interleaved sequences and several passes, ssm_gate_norm, and attention with sinks.
 * Timings at the real models' shapes (gpt-oss-20b experts, nemotron-3-nano / granite-4.0-h mixers).
 *
 * Tolerances (lab_compare: max |gpu - cpu| / max |cpu| and the relative L2 error): the expert
 * matmuls 2e-2 for quantized weights (the oracle quantizes activations to Q8, the GPU dots f32
 * activations with dequantized weights), 5e-3 for F16; routing weights 1e-5 with identical expert
 * ids; elementwise, combine, conv 1e-5; the scan 1e-4 (softplus through double, FMA order); the
 * gated norm 1e-5; attention with sinks 2e-3 (f16 probabilities). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "lab.h"

typedef struct fbuf {
    float *h, *d;
    int64_t n;
} fbuf;

static fbuf fb_new(lab *L, int64_t n, float scale) {
    fbuf b = {.h = calloc((size_t)n + 16, 4), .d = lab_gpu_alloc(L, (size_t)n * 4 + 64), .n = n};
    if (scale != 0.0f) lab_fill(L, b.h, n, scale);
    lab_upload(L, b.d, b.h, (size_t)n * 4);
    return b;
}
static void fb_free(lab *L, fbuf *b) {
    free(b->h);
    lab_gpu_free(L, b->d);
}

/* Compares the device buffer with the host oracle result and records a line (timed when fn != NULL). */
static void compare(lab *L, const char *op, const char *cfg, const float *want, const float *dev, int64_t n, double tol,
                    lab_fn fn, void *ctx, double bytes) {
    lab_check_errors(L, op);
    float *g = malloc((size_t)n * 4);
    lab_download(L, g, dev, (size_t)n * 4);
    double mx, rel;
    const bool pass = lab_compare(g, want, n, tol, &mx, &rel);
    free(g);
    const double us = fn ? lab_time(L, fn, ctx, true) : 0.0;
    lab_record(L, op, cfg, mx, rel, tol, pass, us, bytes, 0);
}

/* A weight (any type) prepared on the GPU; ne = {k, n, n_expert}. */
static qr_weight gen_weight(lab *L, qr_type type, int64_t k, int64_t n, int64_t ne, const char *name) {
    const size_t rb = qr_type_row_size(type, k);
    void *buf = malloc(rb * (size_t)(n * ne));
    if (type == QR_TYPE_F32) lab_fill(L, buf, k * n * ne, 1.0f);
    else lab_gen_weight(L, type, n * ne, k, buf);
    qr_weight w = {.name = name, .type = type, .ne = {k, n, ne, 1}, .row_bytes = rb, .host = buf};
    char err[256];
    if (L->gpu->ops->weight_prepare(L->gpu, &w, err, sizeof err) != QR_OK) {
        printf("weight_prepare %s: %s\n", name, err);
        exit(2);
    }
    return w;
}
static void weight_free(lab *L, qr_weight *w) {
    L->gpu->ops->weight_release(L->gpu, w);
    free((void *)w->host);
}

static int32_t *ids_new(lab *L, int64_t rows, int32_t k, int32_t ne) {
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(rows * k));
    for (int64_t r = 0; r < rows; r++)
        for (int32_t j = 0; j < k; j++) {
            int32_t e;
            bool dup;
            do {
                e = (int32_t)(lab_u64(L) % (uint64_t)ne);
                dup = false;
                for (int32_t q = 0; q < j; q++) dup |= ids[r * k + q] == e;
            } while (dup);
            ids[r * k + j] = e;
        }
    return ids;
}

/* One plan of n rows on both backends with sequence ids seq (n_seq sequences). */
static void plan(lab *L, const int32_t *seq, int32_t n, int32_t n_seq) {
    int32_t *z = calloc((size_t)n, 4), *slot = malloc((size_t)n * 4), *bt = calloc((size_t)n_seq, 4);
    for (int32_t i = 0; i < n; i++) slot[i] = i;
    qr_batch_plan p = {.n_tokens = n, .tokens = z, .pos = slot, .seq = seq, .kv_slot = slot, .n_seqs = n_seq,
                       .max_blocks = 1, .block_table = bt};
    char err[256];
    if (L->cpu->ops->set_batch(L->cpu, &p, err, sizeof err) != QR_OK ||
        L->gpu->ops->set_batch(L->gpu, &p, err, sizeof err) != QR_OK) {
        printf("set_batch: %s\n", err);
        exit(2);
    }
    free(z);
    free(slot);
    free(bt);
}

/* ---- MoE ---- */

typedef struct mm_ctx {
    qr_backend *be;
    const qr_weight *w, *b, *g, *gb;
    const float *x;
    const int32_t *ids;
    int64_t rows;
    int32_t k;
    qr_glu_kind act;
    float *y;
    bool gate_up;
} mm_ctx;

static void run_mm(void *p) {
    mm_ctx *c = p;
    const qr_moe_matmul_args a = {.w = c->w, .w_b = c->b, .gate = c->g, .gate_b = c->gb, .act = c->act, .x = c->x,
                                  .ids = c->ids, .n_rows = c->rows, .n_used = c->k, .y = c->y};
    if (c->gate_up) c->be->ops->moe_gate_up(c->be, &a);
    else c->be->ops->matmul_id(c->be, &a);
}

/* The fused down projection + weighted sum against matmul_id + moe_combine on the CPU. */
typedef struct dc_ctx {
    qr_backend *be;
    const qr_weight *w, *b;
    const float *x, *wt, *add;
    const int32_t *ids;
    int64_t rows;
    int32_t k;
    float *out, *scratch;
} dc_ctx;

static void run_dc(void *p) {
    dc_ctx *c = p;
    c->be->ops->moe_down_combine(c->be, &(qr_moe_matmul_args){.w = c->w, .w_b = c->b, .x = c->x, .x_per_slot = true,
                                                              .ids = c->ids, .n_rows = c->rows, .n_used = c->k,
                                                              .y = c->out, .weights = c->wt, .add = c->add,
                                                              .scratch = c->scratch});
}

static void check_down_combine(lab *L, const qr_weight *w, const qr_weight *b, const char *name, int64_t rows, int32_t k,
                               const int32_t *ids, const int32_t *idd) {
    const int64_t n = w->ne[1], kin = w->ne[0];
    fbuf x = fb_new(L, rows * k * kin, 1.0f), wt = fb_new(L, rows * k, 1.0f), add = fb_new(L, rows * n, 1.0f);
    fbuf out = fb_new(L, rows * n, 0.0f), scr = fb_new(L, rows * k * n, 0.0f);
    L->cpu->ops->matmul_id(L->cpu, &(qr_moe_matmul_args){.w = w, .w_b = b, .x = x.h, .x_per_slot = true, .ids = ids,
                                                         .n_rows = rows, .n_used = k, .y = scr.h});
    L->cpu->ops->moe_combine(L->cpu, scr.h, wt.h, rows, k, n, add.h, out.h);
    dc_ctx gc = {.be = L->gpu, .w = w, .b = b, .x = x.d, .wt = wt.d, .add = add.d, .ids = idd, .rows = rows, .k = k,
                 .out = out.d, .scratch = scr.d};
    run_dc(&gc);
    char cfg[72];
    snprintf(cfg, sizeof cfg, "%s %lldx%lld k%d rows %lld", name, (long long)n, (long long)kin, k, (long long)rows);
    const double tol = w->type == QR_TYPE_F16 ? 5e-3 : 2e-2;
    compare(L, "moe_down_combine", cfg, out.h, out.d, rows * n, tol, run_dc, &gc,
            (double)w->row_bytes * (double)n * (double)(rows * k));
    fb_free(L, &x), fb_free(L, &wt), fb_free(L, &add), fb_free(L, &out), fb_free(L, &scr);
}

/* A decode MoE block as model/moe.c runs it: the input held (act_hold: its Q8 codes kept in one scratch while
 * the expert output's go to the other), gate+up (+ activation), then the down projection + weighted sum.
 * Against matmul_id + moe_combine on the CPU. */
typedef struct blk_ctx {
    qr_backend *be;
    const qr_weight *up, *gate, *down;
    const float *x, *wt;
    const int32_t *ids;
    int64_t rows;
    int32_t k;
    qr_glu_kind act;
    float *h, *out, *scratch;
} blk_ctx;

static void run_blk(void *p) {
    blk_ctx *c = p;
    const int64_t kin = c->up->ne[0];
    if (c->be->ops->act_hold) c->be->ops->act_hold(c->be, c->x, c->rows, kin);
    c->be->ops->moe_gate_up(c->be, &(qr_moe_matmul_args){.w = c->up, .gate = c->gate, .act = c->act, .x = c->x,
                                                         .ids = c->ids, .n_rows = c->rows, .n_used = c->k, .y = c->h});
    const qr_moe_matmul_args dn = {.w = c->down, .x = c->h, .x_per_slot = true, .ids = c->ids, .n_rows = c->rows,
                                   .n_used = c->k, .y = c->out, .weights = c->wt, .scratch = c->scratch};
    if (c->be->ops->moe_down_combine)
        c->be->ops->moe_down_combine(c->be, &dn);
    else {
        c->be->ops->matmul_id(c->be, &(qr_moe_matmul_args){.w = c->down, .x = c->h, .x_per_slot = true, .ids = c->ids,
                                                           .n_rows = c->rows, .n_used = c->k, .y = c->scratch});
        c->be->ops->moe_combine(c->be, c->scratch, c->wt, c->rows, c->k, c->down->ne[1], NULL, c->out);
    }
    if (c->be->ops->act_hold) c->be->ops->act_hold(c->be, NULL, 0, 0);
}

static void check_block(lab *L, const qr_weight *up, const qr_weight *gate, const char *name, int64_t rows, int32_t k,
                        int32_t ne, const int32_t *ids, const int32_t *idd, qr_glu_kind act) {
    const int64_t n = up->ne[1], kin = up->ne[0];
    qr_weight down = gen_weight(L, (qr_type)up->type, n, kin, ne, "down_exps");
    fbuf x = fb_new(L, rows * kin, 1.0f), wt = fb_new(L, rows * k, 1.0f), h = fb_new(L, rows * k * n, 0.0f);
    fbuf out = fb_new(L, rows * kin, 0.0f), scr = fb_new(L, rows * k * kin, 0.0f);
    blk_ctx cc = {.be = L->cpu, .up = up, .gate = gate, .down = &down, .x = x.h, .wt = wt.h, .ids = ids, .rows = rows,
                  .k = k, .act = act, .h = h.h, .out = out.h, .scratch = scr.h};
    blk_ctx gc = cc;
    gc.be = L->gpu, gc.x = x.d, gc.wt = wt.d, gc.ids = idd, gc.h = h.d, gc.out = out.d, gc.scratch = scr.d;
    cc.be->ops->moe_gate_up(cc.be, &(qr_moe_matmul_args){.w = up, .gate = gate, .act = act, .x = x.h, .ids = ids,
                                                         .n_rows = rows, .n_used = k, .y = h.h});
    cc.be->ops->matmul_id(cc.be, &(qr_moe_matmul_args){.w = &down, .x = h.h, .x_per_slot = true, .ids = ids,
                                                       .n_rows = rows, .n_used = k, .y = scr.h});
    cc.be->ops->moe_combine(cc.be, scr.h, wt.h, rows, k, kin, NULL, out.h);
    run_blk(&gc);
    char cfg[80];
    snprintf(cfg, sizeof cfg, "%s %s k%d rows %lld held", name, gate ? "gate+up" : "up", k, (long long)rows);
    const double tol = up->type == QR_TYPE_F16 ? 1e-2 : 4e-2;
    const double bytes = (double)up->row_bytes * (double)n * (double)(rows * k) * (gate ? 3.0 : 2.0);
    compare(L, "moe_block", cfg, out.h, out.d, rows * kin, tol, run_blk, &gc, bytes);
    /* the persistent gate/up kernel (QUARREL_CUDA_GU_PERSIST) and the pipelined down + combine
     * (QUARREL_CUDA_DC_PIPE) must give the other forms' bits, in the expert outputs h and after down + combine */
    qr_cuda_tune *tune = qr_cuda_backend_tune(L->gpu);
    const int32_t s_persist = tune->gu_persist, s_pipe = tune->dc_pipe;
    const int64_t nh = rows * k * n, no = rows * kin;
    float *ref = malloc((size_t)(nh + no) * 4), *got = malloc((size_t)(nh + no) * 4);
    tune->gu_persist = 0, tune->dc_pipe = 0;
    run_blk(&gc);
    lab_check_errors(L, "moe_block");
    lab_download(L, ref, h.d, (size_t)nh * 4), lab_download(L, ref + nh, out.d, (size_t)no * 4);
    tune->gu_persist = 6, tune->dc_pipe = 1;
    lab_poison(L, h.d, (size_t)nh * 4), lab_poison(L, out.d, (size_t)no * 4);
    run_blk(&gc);
    lab_check_errors(L, "moe_block variants");
    lab_download(L, got, h.d, (size_t)nh * 4), lab_download(L, got + nh, out.d, (size_t)no * 4);
    const bool same = memcmp(ref, got, (size_t)(nh + no) * 4) == 0;
    char cfg2[160];
    snprintf(cfg2, sizeof cfg2, "%s, gate/up persistent + down pipelined = not", cfg);
    lab_record(L, "moe_block", cfg2, same ? 0.0 : 1.0, same ? 0.0 : 1.0, 0.0, same, lab_time(L, run_blk, &gc, true), bytes,
               0);
    tune->gu_persist = s_persist, tune->dc_pipe = s_pipe;
    free(ref), free(got);
    weight_free(L, &down);
    fb_free(L, &x), fb_free(L, &wt), fb_free(L, &h), fb_free(L, &out), fb_free(L, &scr);
}

static void check_route(lab *L) {
    const int ne_list[] = {8, 32, 128, 8, 32, 128};
    const int k_list[] = {2, 4, 6, 2, 4, 8};
    /* the last three: group-limited routing (deepseek2): groups / groups used */
    const int g_list[] = {0, 0, 0, 4, 8, 8}, gu_list[] = {0, 0, 0, 2, 3, 4};
    for (int a = 0; a < 6; a++)
        for (int gating = 0; gating < 3; gating++) {
            const int32_t ne = ne_list[a], k = k_list[a];
            const int64_t rows = L->quick ? 17 : 257;
            fbuf lg = fb_new(L, rows * ne, 3.0f), bias = fb_new(L, ne, 0.5f), wc = fb_new(L, rows * k, 0.0f),
                 wg = fb_new(L, rows * k, 0.0f);
            qr_weight bw = {.name = "sel_bias", .type = QR_TYPE_F32, .ne = {ne, 1, 1, 1}, .row_bytes = (size_t)ne * 4,
                            .host = bias.h};
            char err[256];
            if (L->gpu->ops->weight_prepare(L->gpu, &bw, err, sizeof err) != QR_OK) exit(2);
            const qr_moe_route_params p = {.n_expert = ne, .n_used = k, .gating = (qr_moe_gating)gating,
                                           .norm = gating != 2, .scale = gating == 1 ? 2.5f : 1.0f,
                                           .sel_bias = gating == 1 ? &bw : NULL, .n_groups = g_list[a],
                                           .n_group_used = gu_list[a]};
            int32_t *ic = malloc(sizeof(int32_t) * (size_t)(rows * k)), *ig = malloc(sizeof(int32_t) * (size_t)(rows * k));
            int32_t *igd = (int32_t *)lab_gpu_alloc(L, sizeof(int32_t) * (size_t)(rows * k));
            L->cpu->ops->moe_route(L->cpu, lg.h, rows, &p, ic, wc.h);
            L->gpu->ops->moe_route(L->gpu, lg.d, rows, &p, igd, wg.d);
            lab_download(L, ig, igd, sizeof(int32_t) * (size_t)(rows * k));
            int64_t diff = 0;
            for (int64_t i = 0; i < rows * k; i++) diff += ic[i] != ig[i];
            char cfg[72];
            snprintf(cfg, sizeof cfg, "%s E%d k%d g%d/%d rows %lld (ids differ: %lld)",
                     gating == 0 ? "softmax" : gating == 1 ? "sigmoid+bias" : "softmax-w", ne, k, g_list[a], gu_list[a],
                     (long long)rows, (long long)diff);
            compare(L, "moe_route", cfg, wc.h, wg.d, rows * k, diff ? -1.0 : 1e-5, NULL, NULL, 0);
            free(ic), free(ig);
            lab_gpu_free(L, igd);
            L->gpu->ops->weight_release(L->gpu, &bw);
            fb_free(L, &lg), fb_free(L, &bias), fb_free(L, &wc), fb_free(L, &wg);
        }
}

/* add_rmsnorm_route (the MoE norm, router and routing in one launch) against the CPU's plain ops: scale +
 * add, rmsnorm, the F32 router matmul (+ bias), moe_route. The residual, the norm's output, the logits and
 * the weights within 1e-5 (the logits sum in another order than the CPU's), the ids equal. */
static void check_norm_route(lab *L) {
    typedef struct { int64_t dim; int32_t ne, k, gating; bool add, rbias, sbias; float bs; } cfg_t;
    const cfg_t cfgs[] = {
        {4096, 8, 2, 0, true, false, false, 1.0f},  /* mixtral */
        {2880, 8, 4, 2, true, true, false, 1.0f},   /* gpt-oss's gating, a router bias */
        {1536, 8, 8, 0, true, false, false, 0.22f}, /* a residual scale (granite), every expert used */
        {256, 5, 2, 1, false, false, true, 1.0f},   /* sigmoid + selection bias, no add, 5 experts */
    };
    for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
        const cfg_t *f = &cfgs[c];
        for (int64_t rows = 1; rows <= 3; rows += 2) {
            const int64_t D = f->dim;
            fbuf x = fb_new(L, rows * D, 1.0f), b = fb_new(L, rows * D, 0.5f), y = fb_new(L, rows * D, 0.0f),
                 lg = fb_new(L, rows * f->ne, 0.0f), wt = fb_new(L, rows * f->k, 0.0f);
            float *xc = malloc((size_t)(rows * D) * 4), *bc = malloc((size_t)(rows * D) * 4),
                  *yc = malloc((size_t)(rows * D) * 4), *lc = malloc((size_t)(rows * f->ne) * 4),
                  *wc = malloc((size_t)(rows * f->k) * 4);
            memcpy(xc, x.h, (size_t)(rows * D) * 4);
            memcpy(bc, b.h, (size_t)(rows * D) * 4);
            qr_weight nw = gen_weight(L, QR_TYPE_F32, D, 1, 1, "norm");
            qr_weight rw = gen_weight(L, QR_TYPE_F32, D, f->ne, 1, "router");
            qr_weight rb = gen_weight(L, QR_TYPE_F32, f->ne, 1, 1, "router_b");
            qr_weight sb = gen_weight(L, QR_TYPE_F32, f->ne, 1, 1, "sel_bias");
            qr_weight nx = gen_weight(L, QR_TYPE_Q4_0, D, 64, 2, "next"); /* the experts: codes for them */
            const qr_moe_route_params p = {.n_expert = f->ne, .n_used = f->k, .gating = (qr_moe_gating)f->gating,
                                           .norm = f->gating != 2, .scale = f->gating == 1 ? 2.5f : 1.0f,
                                           .sel_bias = f->sbias ? &sb : NULL};
            /* the CPU's plain ops */
            qr_backend *C = L->cpu;
            if (f->add) {
                C->ops->scale(C, bc, f->bs, rows * D, bc);
                C->ops->add(C, xc, bc, rows * D, xc);
            }
            C->ops->rmsnorm(C, xc, &nw, rows, D, 1e-5f, yc);
            C->ops->matmul(C, &rw, yc, rows, lc);
            if (f->rbias) C->ops->add_row(C, lc, &rb, 0, rows, lc);
            int32_t *ic = malloc(sizeof(int32_t) * (size_t)(rows * f->k)), *ig = malloc(sizeof(int32_t) * (size_t)(rows * f->k));
            C->ops->moe_route(C, lc, rows, &p, ic, wc);
            /* the fused op */
            int32_t *igd = (int32_t *)lab_gpu_alloc(L, sizeof(int32_t) * (size_t)(rows * f->k));
            const qr_add_rmsnorm_args na = {.x = x.d, .b = f->add ? b.d : NULL, .b_scale = f->bs, .w = &nw, .n_rows = rows,
                                            .dim = D, .eps = 1e-5f, .y = y.d, .next = &nx, .router = &rw,
                                            .router_b = f->rbias ? &rb : NULL, .route = &p, .logits = lg.d, .ids = igd,
                                            .weights = wt.d};
            const bool done = L->gpu->ops->add_rmsnorm(L->gpu, &na);
            lab_download(L, ig, igd, sizeof(int32_t) * (size_t)(rows * f->k));
            int64_t diff = 0;
            for (int64_t i = 0; i < rows * f->k; i++) diff += ic[i] != ig[i];
            char cfg[96];
            snprintf(cfg, sizeof cfg, "D%lld E%d k%d g%d rows %lld%s (ids differ: %lld)", (long long)D, f->ne, f->k,
                     f->gating, (long long)rows, done ? "" : " NOT TAKEN", (long long)diff);
            const double tol = done ? 1e-5 : -1.0;
            compare(L, "norm_route x", cfg, xc, x.d, rows * D, tol, NULL, NULL, 0);
            compare(L, "norm_route y", cfg, yc, y.d, rows * D, tol, NULL, NULL, 0);
            compare(L, "norm_route logits", cfg, lc, lg.d, rows * f->ne, tol, NULL, NULL, 0);
            compare(L, "norm_route weights", cfg, wc, wt.d, rows * f->k, diff ? -1.0 : tol, NULL, NULL, 0);
            free(ic), free(ig), free(xc), free(bc), free(yc), free(lc), free(wc);
            lab_gpu_free(L, igd);
            weight_free(L, &nw), weight_free(L, &rw), weight_free(L, &rb), weight_free(L, &sb), weight_free(L, &nx);
            fb_free(L, &x), fb_free(L, &b), fb_free(L, &y), fb_free(L, &lg), fb_free(L, &wt);
        }
    }
}

static void check_experts(lab *L) {
    typedef struct { const char *name; qr_type type; int64_t k, n, ne; int32_t used; bool bias; } cfg_t;
    const cfg_t cfgs[] = {
        {"tiny q8_0", QR_TYPE_Q8_0, 256, 128, 4, 2, false},
        {"mixtral-like q4_k", QR_TYPE_Q4_K, 1024, 512, 8, 2, false},
        /* small experts, every slot's down row in flight at once (matvec_id_combine_wide_kernel) */
        {"qwen3moe-like q4_k", QR_TYPE_Q4_K, 1024, 768, 32, 8, false},
        {"qwen3moe-like q6_k", QR_TYPE_Q6_K, 1024, 768, 32, 8, false},
        {"deepseek2-lite-like q8_0", QR_TYPE_Q8_0, 1024, 1408, 16, 6, false},
        {"gpt-oss-20b mxfp4", QR_TYPE_MXFP4, 2880, 2880, 32, 4, true},
        {"nemotron-3 q8_0", QR_TYPE_Q8_0, 2688, 1856, 128, 6, false}, /* 2688 is not a multiple of 256 */
        {"nemotron-3 q4_0", QR_TYPE_Q4_0, 2688, 1856, 128, 6, false},
        {"iq4_nl", QR_TYPE_IQ4_NL, 512, 200, 8, 2, false}, /* n_out not a multiple of the CTA's 128 rows */
        {"f16", QR_TYPE_F16, 512, 256, 8, 2, true},
    };
    for (size_t ci = 0; ci < sizeof cfgs / sizeof cfgs[0]; ci++) {
        const cfg_t *c = &cfgs[ci];
        if (L->quick && c->k > 1024) continue;
        qr_weight up = gen_weight(L, c->type, c->k, c->n, c->ne, "up_exps");
        qr_weight gate = gen_weight(L, c->type, c->k, c->n, c->ne, "gate_exps");
        float *bh = malloc(sizeof(float) * (size_t)(c->n * c->ne));
        lab_fill(L, bh, c->n * c->ne, 0.1f);
        qr_weight b = {.name = "exps_b", .type = QR_TYPE_F32, .ne = {c->n, c->ne, 1, 1}, .row_bytes = (size_t)c->n * 4,
                       .host = bh};
        char err[256];
        if (L->gpu->ops->weight_prepare(L->gpu, &b, err, sizeof err) != QR_OK) exit(2);
        const double tol = c->type == QR_TYPE_F16 ? 5e-3 : 2e-2;
        /* the expert mat-vec (1, 5 rows) and the prefill paths: the int8 tensor-core tiles (mma; 64 rows, and
         * 200 rows: several tiles per expert at E <= 32), the tiled mat-vec, the f16 GEMM zero-padded and
         * strided-batched, one GEMM per expert (the last four fall back to the next where a type lacks one) */
        const int64_t rows_list[] = {1, 5, 64, 200, 64, 64, 64};
        static const char *const variant[] = {"", "", " mma", " mma", " tiles", " padded", " loop"};
        for (int ri = 0; ri < 7; ri++) {
            /* nemotron q4_0: mma and padded also at pp512 sizes (~24 rows an expert), timed against each other */
            const bool big = c->type == QR_TYPE_Q4_0 && c->ne == 128 && !L->quick;
            const int64_t rows = big && (ri == 3 || ri == 5) ? 512 : rows_list[ri];
            if (rows > 64 && (L->quick || (c->ne > 32 && !big))) continue;
            qr_cuda_backend_tune(L->gpu)->moe_mma = ri < 4;
            qr_cuda_backend_tune(L->gpu)->moe_tiles = ri < 5;
            qr_cuda_backend_tune(L->gpu)->moe_grouped = ri != 6;
            fbuf x = fb_new(L, rows * c->k, 1.0f), y = fb_new(L, rows * c->used * c->n, 0.0f);
            int32_t *ids = ids_new(L, rows, c->used, (int32_t)c->ne);
            int32_t *idd = (int32_t *)lab_gpu_alloc(L, sizeof(int32_t) * (size_t)(rows * c->used));
            lab_upload(L, idd, ids, sizeof(int32_t) * (size_t)(rows * c->used));
            for (int gu = 0; gu < 2; gu++) {
                mm_ctx cc = {.be = L->cpu, .w = &up, .b = c->bias ? &b : NULL, .g = &gate, .gb = c->bias ? &b : NULL,
                             .x = x.h, .ids = ids, .rows = rows, .k = c->used,
                             .act = c->type == QR_TYPE_MXFP4 ? QR_GLU_SWIGLU_OAI : QR_GLU_SWIGLU, .y = y.h,
                             .gate_up = gu == 1};
                mm_ctx gc = cc;
                gc.be = L->gpu, gc.x = x.d, gc.ids = idd, gc.y = y.d;
                run_mm(&cc);
                run_mm(&gc);
                char cfg[72];
                snprintf(cfg, sizeof cfg, "%s %lldx%lld E%lld k%d rows %lld%s", c->name, (long long)c->n,
                         (long long)c->k, (long long)c->ne, c->used, (long long)rows, variant[ri]);
                const double wbytes = (double)(gu ? 2 : 1) * (double)up.row_bytes * (double)c->n *
                                      (double)(rows * c->used < c->ne ? rows * c->used : c->ne);
                /* gate_up multiplies two such errors (and gpt-oss's clamp has a kink at 7): twice the margin */
                compare(L, gu ? "moe_gate_up" : "matmul_id", cfg, y.h, y.d, rows * c->used * c->n, gu ? 2 * tol : tol,
                        run_mm, &gc, wbytes);
            }
            if (rows <= 8) {
                check_down_combine(L, &up, c->bias ? &b : NULL, c->name, rows, c->used, ids, idd);
            }
            if (rows <= 8 && c->n % 32 == 0) { /* the down projection's rows are n long */
                check_block(L, &up, &gate, c->name, rows, c->used, (int32_t)c->ne, ids, idd,
                            c->type == QR_TYPE_MXFP4 ? QR_GLU_SWIGLU_OAI : QR_GLU_SWIGLU);
                check_block(L, &up, NULL, c->name, rows, c->used, (int32_t)c->ne, ids, idd, QR_GLU_RELU2);
            }
            free(ids);
            lab_gpu_free(L, idd);
            fb_free(L, &x), fb_free(L, &y);
        }
        weight_free(L, &up), weight_free(L, &gate);
        L->gpu->ops->weight_release(L->gpu, &b);
        free(bh);
    }
    qr_cuda_backend_tune(L->gpu)->moe_grouped = 1;
    qr_cuda_backend_tune(L->gpu)->moe_tiles = 1;
    qr_cuda_backend_tune(L->gpu)->moe_mma = 1;
    /* matmul_act (nemotron's shared expert: relu^2(up x), then down) with the input held, as model/moe.c runs
     * it: on the GPU the expert mat-vec on one matrix, relu^2 in its epilogue */
    for (int ti = 0; ti < 2; ti++) {
        const qr_type ty = ti == 0 ? QR_TYPE_Q4_0 : QR_TYPE_Q8_0;
        qr_weight up = gen_weight(L, ty, 2688, 3712, 1, "up_shexp"), down = gen_weight(L, ty, 3712, 2688, 1, "down_shexp");
        for (int64_t rows = 1; rows <= 4; rows += 3) {
            fbuf x = fb_new(L, rows * 2688, 1.0f), g = fb_new(L, rows * 3712, 0.0f), sc = fb_new(L, rows * 3712, 0.0f);
            fbuf o = fb_new(L, rows * 2688, 0.0f);
            L->cpu->ops->matmul(L->cpu, &up, x.h, rows, sc.h);
            L->cpu->ops->glu(L->cpu, sc.h, NULL, rows * 3712, QR_GLU_RELU2, g.h);
            L->cpu->ops->matmul(L->cpu, &down, g.h, rows, o.h);
            qr_backend *G = L->gpu;
            G->ops->act_hold(G, x.d, rows, 2688);
            G->ops->matmul_act(G, &up, x.d, rows, QR_GLU_RELU2, g.d, sc.d);
            G->ops->matmul(G, &down, g.d, rows, o.d);
            G->ops->act_hold(G, NULL, 0, 0);
            char cfg[72];
            snprintf(cfg, sizeof cfg, "relu^2 %s 3712x2688 then down, rows %lld held", ti == 0 ? "q4_0" : "q8_0",
                     (long long)rows);
            compare(L, "matmul_act", cfg, o.h, o.d, rows * 2688, 4e-2, NULL, NULL, 0);
            fb_free(L, &x), fb_free(L, &g), fb_free(L, &sc), fb_free(L, &o);
        }
        weight_free(L, &up), weight_free(L, &down);
    }
    /* relu^2 experts (no gate), combine, glu */
    {
        qr_weight up = gen_weight(L, QR_TYPE_Q8_0, 512, 256, 8, "up_exps");
        fbuf x = fb_new(L, 9 * 512, 1.0f), y = fb_new(L, 9 * 3 * 256, 0.0f);
        int32_t *ids = ids_new(L, 9, 3, 8);
        int32_t *idd = (int32_t *)lab_gpu_alloc(L, sizeof(int32_t) * 27);
        lab_upload(L, idd, ids, sizeof(int32_t) * 27);
        L->cpu->ops->moe_gate_up(L->cpu, &(qr_moe_matmul_args){.w = &up, .act = QR_GLU_RELU2, .x = x.h, .ids = ids,
                                                               .n_rows = 9, .n_used = 3, .y = y.h});
        L->gpu->ops->moe_gate_up(L->gpu, &(qr_moe_matmul_args){.w = &up, .act = QR_GLU_RELU2, .x = x.d, .ids = idd,
                                                               .n_rows = 9, .n_used = 3, .y = y.d});
        compare(L, "moe_gate_up", "relu^2 q8_0 256x512 E8 k3 rows 9", y.h, y.d, 9 * 3 * 256, 4e-2, NULL, NULL, 0);
        free(ids);
        lab_gpu_free(L, idd);
        fb_free(L, &x), fb_free(L, &y);
        weight_free(L, &up);
    }
    {
        const int64_t rows = 33, dim = 2880;
        const int32_t k = 4;
        fbuf y = fb_new(L, rows * k * dim, 1.0f), w = fb_new(L, rows * k, 1.0f), o = fb_new(L, rows * dim, 0.0f);
        L->cpu->ops->moe_combine(L->cpu, y.h, w.h, rows, k, dim, NULL, o.h);
        L->gpu->ops->moe_combine(L->gpu, y.d, w.d, rows, k, dim, NULL, o.d);
        compare(L, "moe_combine", "rows 33 k4 dim 2880", o.h, o.d, rows * dim, 1e-5, NULL, NULL, 0);
        /* with the shared expert's output added in place (out == add) */
        fbuf a = fb_new(L, rows * dim, 1.0f);
        L->cpu->ops->moe_combine(L->cpu, y.h, w.h, rows, k, dim, a.h, a.h);
        L->gpu->ops->moe_combine(L->gpu, y.d, w.d, rows, k, dim, a.d, a.d);
        compare(L, "moe_combine", "rows 33 k4 dim 2880 + add in place", a.h, a.d, rows * dim, 1e-5, NULL, NULL, 0);
        fb_free(L, &a);
        fb_free(L, &y), fb_free(L, &w), fb_free(L, &o);
    }
    for (int a = 0; a < 4; a++) {
        static const char *const names[] = {"swiglu n 100003", "swiglu_oai n 100003", "relu2 n 100003",
                                            "sigmoid (qwen2moe) n 100003"};
        const int64_t n = 100003;
        fbuf g = fb_new(L, n, 9.0f), u = fb_new(L, n, 9.0f), o = fb_new(L, n, 0.0f);
        L->cpu->ops->glu(L->cpu, g.h, u.h, n, (qr_glu_kind)a, o.h);
        L->gpu->ops->glu(L->gpu, g.d, u.d, n, (qr_glu_kind)a, o.d);
        compare(L, "glu", names[a], o.h, o.d, n, 1e-5, NULL, NULL, 0);
        fb_free(L, &g), fb_free(L, &u), fb_free(L, &o);
    }
}

/* ---- Mamba2 ---- */

typedef struct ssm_ctx {
    qr_backend *be;
    const float *x, *dt;
    int64_t stride;
    float *cs, *ss, *xbc, *y;
    const qr_weight *cw, *cb, *dtb, *A, *D, *nw;
    const qr_ssm_params *p;
    int part;
} ssm_ctx;

static void run_ssm(void *v) {
    ssm_ctx *c = v;
    if (c->part == 0) c->be->ops->ssm_conv(c->be, c->x, c->stride, c->cs, c->cw, c->cb, c->p, c->xbc);
    else c->be->ops->ssm_scan(c->be, &(qr_ssm_scan_args){.state = c->ss, .xbc = c->xbc, .dt = c->dt, .dt_stride = c->stride,
                                                         .dt_bias = c->dtb, .A = c->A, .D = c->D, .p = c->p, .y = c->y});
}

static qr_weight vec_w(lab *L, int64_t n, int64_t n1, float center, float spread, const char *name) {
    float *v = malloc(sizeof(float) * (size_t)(n * n1));
    for (int64_t i = 0; i < n * n1; i++) v[i] = center + spread * lab_frand(L);
    qr_weight w = {.name = name, .type = QR_TYPE_F32, .ne = {n, n1, 1, 1}, .row_bytes = (size_t)n * 4, .host = v};
    char err[256];
    if (L->gpu->ops->weight_prepare(L->gpu, &w, err, sizeof err) != QR_OK) exit(2);
    return w;
}

static void check_ssm(lab *L) {
    /* sorted: each pass's rows grouped by sequence (the parallel conv); else random interleaving (sequential) */
    /* wide_dt: dt biases spread so that softplus(dt) covers ~1e-4 .. 1e2 (the extreme dt) */
    typedef struct {
        const char *name;
        int32_t nh, hp, ng, ns;
        int32_t rows, n_seq, step;
        bool sorted, wide_dt;
    } cfg_t;
    const cfg_t cfgs[] = {
        {"tiny", 8, 64, 2, 32, 40, 3, 7, false, false},
        {"tiny runs", 8, 64, 2, 32, 48, 3, 16, true, false},
        {"N16 (general scan)", 4, 32, 2, 16, 20, 2, 10, true, false},
        {"N96 (general scan)", 4, 32, 1, 96, 9, 2, 3, false, false},
        {"granite-4.0-h-tiny decode", 48, 64, 1, 128, 1, 1, 1, false, false},
        {"nemotron-3-nano decode", 64, 64, 8, 128, 4, 4, 4, false, false},
        {"nemotron-3-nano prefill 256", 64, 64, 8, 128, 256, 1, 256, false, false},
        {"granite-4.0-h-tiny prefill 512", 48, 64, 1, 128, 512, 1, 512, false, false},
        {"granite long 4096, extreme dt", 48, 64, 1, 128, 4096, 1, 4096, false, true},
        {"tiny 4096 rows, extreme dt, 2 runs", 8, 64, 2, 32, 4096, 2, 4096, true, true},
    };
    for (size_t ci = 0; ci < sizeof cfgs / sizeof cfgs[0]; ci++) {
        const cfg_t *c = &cfgs[ci];
        if (L->quick && c->rows > 64) continue;
        const int32_t di = c->nh * c->hp, cd = di + 2 * c->ng * c->ns;
        const qr_ssm_params p = {.d_conv = 4, .d_inner = di, .d_state = c->ns, .n_head = c->nh, .head_dim = c->hp,
                                 .n_group = c->ng, .conv_dim = cd};
        const int64_t stride = 2 * (int64_t)di + 2 * (int64_t)c->ng * c->ns + c->nh; /* z | xBC | dt */
        fbuf zx = fb_new(L, c->rows * stride, 1.0f);
        fbuf cs = fb_new(L, (int64_t)c->n_seq * 3 * cd, 0.5f), ss = fb_new(L, (int64_t)c->n_seq * di * c->ns, 0.1f);
        fbuf xbc = fb_new(L, (int64_t)c->rows * cd, 0.0f), y = fb_new(L, (int64_t)c->rows * di, 0.0f);
        fbuf yn = fb_new(L, (int64_t)c->rows * di, 0.0f);
        qr_weight cw = vec_w(L, 4, cd, 0.0f, 0.5f, "conv1d"), cb = vec_w(L, cd, 1, 0.0f, 0.1f, "conv1d_b");
        qr_weight dtb = c->wide_dt ? vec_w(L, c->nh, 1, 45.0f, 55.0f, "dt_b") : vec_w(L, c->nh, 1, -3.0f, 2.0f, "dt_b"), A = vec_w(L, c->nh, 1, -4.0f, 3.5f, "A");
        qr_weight D = vec_w(L, c->nh, 1, 1.0f, 0.2f, "D"), nw = vec_w(L, di, 1, 1.0f, 0.1f, "ssm_norm");
        int32_t *seq = malloc(sizeof(int32_t) * (size_t)c->rows);
        for (int32_t i = 0; i < c->rows; i++) seq[i] = (int32_t)(lab_u64(L) % (uint64_t)c->n_seq);
        if (c->sorted) /* rows of each pass grouped by sequence, sequences in order */
            for (int32_t r0 = 0; r0 < c->rows; r0 += c->step) {
                const int32_t n = c->rows - r0 < c->step ? c->rows - r0 : c->step;
                for (int32_t i = 0; i < n; i++) seq[r0 + i] = (int32_t)((int64_t)i * c->n_seq / n);
            }
        ssm_ctx cc = {.be = L->cpu, .stride = stride, .cw = &cw, .cb = &cb, .dtb = &dtb, .A = &A, .D = &D, .nw = &nw,
                      .p = &p};
        ssm_ctx gc = cc;
        gc.be = L->gpu;
        for (int32_t r0 = 0; r0 < c->rows; r0 += c->step) {
            const int32_t n = c->rows - r0 < c->step ? c->rows - r0 : c->step;
            plan(L, seq + r0, n, c->n_seq);
            for (int part = 0; part < 2; part++) {
                cc.part = gc.part = part;
                cc.x = zx.h + r0 * stride + di, gc.x = zx.d + r0 * stride + di;
                cc.dt = zx.h + r0 * stride + di + cd, gc.dt = zx.d + r0 * stride + di + cd;
                cc.cs = cs.h, gc.cs = cs.d, cc.ss = ss.h, gc.ss = ss.d;
                cc.xbc = xbc.h + (int64_t)r0 * cd, gc.xbc = xbc.d + (int64_t)r0 * cd;
                cc.y = y.h + (int64_t)r0 * di, gc.y = y.d + (int64_t)r0 * di;
                run_ssm(&cc);
                run_ssm(&gc);
            }
        }
        char cfg[72];
        snprintf(cfg, sizeof cfg, "%s: H%d P%d G%d N%d rows %d seqs %d", c->name, c->nh, c->hp, c->ng, c->ns, c->rows,
                 c->n_seq);
        compare(L, "ssm_conv", cfg, xbc.h, xbc.d, (int64_t)c->rows * cd, 1e-5, NULL, NULL, 0);
        compare(L, "ssm_conv state", cfg, cs.h, cs.d, cs.n, 0.0, NULL, NULL, 0);
        compare(L, "ssm_scan state", cfg, ss.h, ss.d, ss.n, 1e-4, NULL, NULL, 0);
        compare(L, "ssm_scan", cfg, y.h, y.d, y.n, 1e-4, NULL, NULL, 0);
        L->cpu->ops->ssm_gate_norm(L->cpu, &(qr_ssm_gate_norm_args){.y = y.h, .z = zx.h, .z_stride = stride, .w = &nw,
                                                                    .n_rows = c->step, .p = &p, .eps = 1e-5f, .out = yn.h});
        L->gpu->ops->ssm_gate_norm(L->gpu, &(qr_ssm_gate_norm_args){.y = y.d, .z = zx.d, .z_stride = stride, .w = &nw,
                                                                    .n_rows = c->step, .p = &p, .eps = 1e-5f, .out = yn.d});
        compare(L, "ssm_gate_norm", cfg, yn.h, yn.d, (int64_t)c->step * di, 1e-5, NULL, NULL, 0);
        /* timing: the last pass again (after the checks: it advances the GPU state and rewrites y) */
        gc.part = 1;
        const double us = lab_time(L, run_ssm, &gc, true);
        const int32_t last_rows = c->rows % c->step ? c->rows % c->step : c->step;
        const int32_t states = last_rows < c->n_seq ? last_rows : c->n_seq;
        lab_record(L, "ssm_scan (timed)", cfg, 0.0, 0.0, 0.0, true, us,
                   (double)last_rows * (double)cd * 4.0 + 8.0 * (double)di * c->ns * states, 0);
        free(seq);
        fb_free(L, &zx), fb_free(L, &cs), fb_free(L, &ss), fb_free(L, &xbc), fb_free(L, &y), fb_free(L, &yn);
        qr_weight *ws[] = {&cw, &cb, &dtb, &A, &D, &nw};
        for (int i = 0; i < 6; i++) weight_free(L, ws[i]);
    }
}

/* An Inf input makes the state non-finite: both backends must report "diverged" (the request then fails
 * cleanly and quarrel_ssm_divergence_total counts it), the GPU in its fast and in its exact mode. */
static void check_ssm_divergence(lab *L) {
    const int32_t nh = 4, hp = 32, ng = 1, ns = 32, rows = 3, di = nh * hp, cd = di + 2 * ng * ns;
    const qr_ssm_params p = {.d_conv = 4, .d_inner = di, .d_state = ns, .n_head = nh, .head_dim = hp, .n_group = ng,
                             .conv_dim = cd};
    const int64_t stride = 2 * (int64_t)di + 2 * (int64_t)ng * ns + nh;
    fbuf zx = fb_new(L, rows * stride, 1.0f), ss = fb_new(L, (int64_t)di * ns, 0.1f);
    fbuf xbc = fb_new(L, (int64_t)rows * cd, 1.0f), y = fb_new(L, (int64_t)rows * di, 0.0f);
    xbc.h[(int64_t)cd + 5] = INFINITY; /* row 1, channel 5 */
    lab_upload(L, xbc.d, xbc.h, (size_t)xbc.n * 4);
    qr_weight dtb = vec_w(L, nh, 1, -3.0f, 2.0f, "dt_b"), A = vec_w(L, nh, 1, -4.0f, 3.5f, "A");
    qr_weight D = vec_w(L, nh, 1, 1.0f, 0.2f, "D");
    int32_t seq[3] = {0, 0, 0};
    plan(L, seq, rows, 1);
    char cerr[512] = "", gerr[512] = "";
    L->cpu->ops->ssm_scan(L->cpu, &(qr_ssm_scan_args){.state = ss.h, .xbc = xbc.h, .dt = zx.h + di + cd, .dt_stride = stride,
                                                      .dt_bias = &dtb, .A = &A, .D = &D, .p = &p, .y = y.h});
    L->gpu->ops->ssm_scan(L->gpu, &(qr_ssm_scan_args){.state = ss.d, .xbc = xbc.d, .dt = zx.d + di + cd, .dt_stride = stride,
                                                      .dt_bias = &dtb, .A = &A, .D = &D, .p = &p, .y = y.d});
    const qr_status cs = L->cpu->ops->last_error(L->cpu, cerr, sizeof cerr);
    const qr_status gs = L->gpu->ops->last_error(L->gpu, gerr, sizeof gerr);
    const bool pass = cs == QR_ERR_NUMERIC && gs == QR_ERR_NUMERIC && strstr(cerr, "diverged") && strstr(gerr, "diverged");
    if (!pass) printf("ssm divergence: CPU '%s', GPU '%s'\n", cerr, gerr);
    lab_record(L, "ssm_scan divergence", "Inf input: both backends report diverged", 0.0, 0.0, 0.0, pass, 0.0, 0, 0);
    fb_free(L, &zx), fb_free(L, &ss), fb_free(L, &xbc), fb_free(L, &y);
    qr_weight *ws[] = {&dtb, &A, &D};
    for (int i = 0; i < 3; i++) weight_free(L, ws[i]);
}

/* ---- attention sinks ---- */

static void check_sinks(lab *L) {
    const int n_head = 8, n_kv = 2, dk = 64, bs = 32, n_tok = 70, n_blocks = 4;
    const qr_kv_desc d = {.n_layer = 1, .n_blocks = n_blocks, .block_size = bs, .k_dim = n_kv * dk, .v_dim = n_kv * dk,
                          .type_k = QR_TYPE_F16, .type_v = QR_TYPE_F16};
    char err[256];
    qr_kv_storage *kc = L->cpu->ops->kv_alloc(L->cpu, &d, err, sizeof err), *kg = L->gpu->ops->kv_alloc(L->gpu, &d, err, sizeof err);
    if (!kc || !kg) exit(2);
    int32_t tok[70] = {0}, pos[70], seq[70] = {0}, slot[70], bt[4] = {2, 0, 3, 1}, outr[1] = {0};
    for (int r = 0; r < n_tok; r++) pos[r] = r, slot[r] = bt[r / bs] * bs + r % bs;
    const qr_batch_plan p = {.n_tokens = n_tok, .tokens = tok, .pos = pos, .seq = seq, .kv_slot = slot, .n_seqs = 1,
                             .max_blocks = 4, .block_table = bt, .n_outputs = 0, .output_rows = outr};
    if (L->cpu->ops->set_batch(L->cpu, &p, err, sizeof err) != QR_OK || L->gpu->ops->set_batch(L->gpu, &p, err, sizeof err) != QR_OK)
        exit(2);
    fbuf q = fb_new(L, n_tok * n_head * dk, 1.0f), k = fb_new(L, n_tok * n_kv * dk, 1.0f), v = fb_new(L, n_tok * n_kv * dk, 1.0f);
    fbuf o = fb_new(L, n_tok * n_head * dk, 0.0f);
    qr_weight sinks = vec_w(L, n_head, 1, 0.0f, 3.0f, "attn_sinks");
    L->cpu->ops->kv_store(L->cpu, kc, 0, k.h, v.h);
    L->gpu->ops->kv_store(L->gpu, kg, 0, k.d, v.d);
    for (int win = 0; win < 2; win++) {
        const qr_attn_params ap = {.n_head = n_head, .n_head_kv = n_kv, .head_dim_k = dk, .head_dim_v = dk,
                                   .scale = 0.125f, .window = win ? 16 : 0, .sinks = &sinks};
        L->cpu->ops->attention(L->cpu, kc, 0, q.h, &ap, o.h);
        L->gpu->ops->attention(L->gpu, kg, 0, q.d, &ap, o.d);
        compare(L, "attention", win ? "sinks, window 16, 70 rows" : "sinks, 70 rows", o.h, o.d, o.n, 2e-3, NULL, NULL,
                0);
    }
    weight_free(L, &sinks);
    fb_free(L, &q), fb_free(L, &k), fb_free(L, &v), fb_free(L, &o);
    L->cpu->ops->kv_free(L->cpu, kc);
    L->gpu->ops->kv_free(L->gpu, kg);
}

void lab_moe_ssm(lab *L) {
    if (lab_section(L, "moe")) {
        check_route(L);
        check_norm_route(L);
        check_experts(L);
    }
    if (lab_section(L, "ssm")) {
        check_ssm(L);
        check_ssm_divergence(L);
    }
    if (lab_section(L, "sinks")) check_sinks(L);
}

void lab_moe_ssm_exact(lab *L) {
    check_route(L);
    check_ssm(L);
    check_ssm_divergence(L);
    check_sinks(L);
}
