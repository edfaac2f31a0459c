/* lab_ops.c — the lab's checks of get_rows, rmsnorm, layernorm, softmax, rope, the elementwise ops,
 * copy and gather_outputs: the same op-table call on the CPU scalar oracle (host buffers) and on the
 * GPU (device buffers, output poisoned first), compared; then, for the decode-sized cases, the GPU
 * call is timed (after the comparison, since timing repeats in-place ops). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab.h"
#include "util/util.h"

/* Host and device copies of one float array. */
typedef struct buf {
    float *h, *d;
    int64_t n;
} buf;

/* scale != 0: random values on both sides; scale == 0: host zeroed, device poisoned. */
static buf buf_new(lab *L, int64_t n, float scale) {
    buf b = {.h = malloc((size_t)n * 4 + 64), .d = lab_gpu_alloc(L, (size_t)n * 4 + 64), .n = n};
    if (!b.h) {
        printf("out of host memory\n");
        exit(2);
    }
    if (scale != 0.0f) {
        lab_fill(L, b.h, n, scale);
        lab_upload(L, b.d, b.h, (size_t)n * 4);
    } else {
        memset(b.h, 0, (size_t)n * 4);
        lab_poison(L, b.d, (size_t)n * 4);
    }
    return b;
}

static void buf_free(lab *L, buf *b) {
    free(b->h);
    lab_gpu_free(L, b->d);
}

/* A plan of n_tok rows: tokens random in [0, vocab), positions random in [0, max_pos) (or 0..n-1 when
 * max_pos == 0), one sequence, the given output rows. Set on both backends. */
static void set_plan(lab *L, int32_t n_tok, int32_t vocab, int32_t max_pos, const int32_t *outputs, int32_t n_out) {
    int32_t *tok = malloc((size_t)n_tok * 4), *pos = malloc((size_t)n_tok * 4), *seq = calloc((size_t)n_tok, 4),
            *slot = malloc((size_t)n_tok * 4);
    for (int32_t r = 0; r < n_tok; r++) {
        tok[r] = (int32_t)(lab_u64(L) % (uint64_t)vocab);
        pos[r] = max_pos ? (int32_t)(lab_u64(L) % (uint64_t)max_pos) : r;
        slot[r] = r;
    }
    const int32_t bt[1] = {0};
    qr_batch_plan p = {.n_tokens = n_tok, .tokens = tok, .pos = pos, .seq = seq, .kv_slot = slot, .n_seqs = 1,
                       .max_blocks = 1, .block_table = bt, .n_outputs = n_out, .output_rows = outputs};
    char err[256];
    if (L->cpu->ops->set_batch(L->cpu, &p, err, sizeof err) != QR_OK ||
        L->gpu->ops->set_batch(L->gpu, &p, err, sizeof err) != QR_OK) {
        printf("set_batch: %s\n", err);
        exit(2);
    }
    free(tok), free(pos), free(seq), free(slot);
}

/* An F32 [n] weight with values center +- spread, prepared on the GPU. */
static qr_weight vec_weight(lab *L, int64_t n, float center, float spread) {
    float *v = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) v[i] = center + spread * lab_frand(L);
    qr_weight w = {.name = "lab.vec", .type = QR_TYPE_F32, .ne = {n, 1, 1, 1}, .row_bytes = (size_t)n * 4, .host = v};
    char err[256];
    if (L->gpu->ops->weight_prepare(L->gpu, &w, err, sizeof err) != QR_OK) {
        printf("weight_prepare: %s\n", err);
        exit(2);
    }
    return w;
}

static void vec_weight_free(lab *L, qr_weight *w) {
    L->gpu->ops->weight_release(L->gpu, w);
    free((void *)w->host);
}

/* ---- one op call, on either backend ---- */

typedef enum op_kind {
    K_RMS, K_LN, K_SOFTMAX, K_ROPE, K_SWIGLU, K_GEGLU, K_ADD, K_MUL, K_SCALE, K_SOFTCAP, K_COPY, K_GATHER, K_GETROWS
} op_kind;

typedef struct op_call {
    qr_backend *be;
    op_kind kind;
    const float *a, *b;
    float *out;
    int64_t rows, dim, n;
    float s;
    const qr_weight *w, *w2;
    const qr_rope_params *rp;
    int32_t n_head, head_dim;
} op_call;

static void call(void *p) {
    op_call *c = p;
    qr_backend *be = c->be;
    const qr_backend_ops *o = be->ops;
    switch (c->kind) {
    case K_RMS: o->rmsnorm(be, c->a, c->w, c->rows, c->dim, c->s, c->out); break;
    case K_LN: o->layernorm(be, c->a, c->w, c->w2, c->rows, c->dim, c->s, c->out); break;
    case K_SOFTMAX: o->softmax(be, c->a, c->rows, c->dim, c->out); break;
    case K_ROPE: o->rope(be, c->out, c->n_head, c->head_dim, c->rp); break;
    case K_SWIGLU: o->swiglu(be, c->a, c->b, c->n, c->out); break;
    case K_GEGLU: o->geglu(be, c->a, c->b, c->n, c->out); break;
    case K_ADD: o->add(be, c->a, c->b, c->n, c->out); break;
    case K_MUL: o->mul(be, c->a, c->b, c->n, c->out); break;
    case K_SCALE: o->scale(be, c->a, c->s, c->n, c->out); break;
    case K_SOFTCAP: o->softcap(be, c->a, c->s, c->n, c->out); break;
    case K_COPY: o->copy(be, c->a, c->n, c->out); break;
    case K_GATHER: o->gather_outputs(be, c->a, c->dim, c->out); break;
    case K_GETROWS: o->get_rows(be, c->w, c->out); break;
    }
}

/* Runs cpu_c on the CPU and gpu_c on the GPU, compares n floats of the outputs (cpu_out host,
 * gpu_out device), then (time) times gpu_c and records the line. */
static void check(lab *L, const char *op, const char *cfg, op_call *cpu_c, op_call *gpu_c, const float *cpu_out,
                  const float *gpu_out, int64_t n, double tol, bool time, double bytes) {
    cpu_c->be = L->cpu;
    gpu_c->be = L->gpu;
    call(cpu_c);
    call(gpu_c);
    lab_check_errors(L, op);
    float *g = malloc((size_t)n * 4);
    lab_download(L, g, gpu_out, (size_t)n * 4);
    double mx, rel;
    const bool pass = lab_compare(g, cpu_out, n, tol, &mx, &rel);
    free(g);
    const double us = time ? lab_time(L, call, gpu_c, true) : 0.0;
    lab_record(L, op, cfg, mx, rel, tol, pass, us, bytes, 0);
}

/* ---- sections ---- */

static void check_get_rows(lab *L) {
    const qr_type types[] = {QR_TYPE_Q4_0, QR_TYPE_Q4_1, QR_TYPE_Q5_0, QR_TYPE_Q5_1, QR_TYPE_Q8_0,
                             QR_TYPE_Q2_K, QR_TYPE_Q3_K, QR_TYPE_Q4_K, QR_TYPE_Q5_K, QR_TYPE_Q6_K,
                             QR_TYPE_MXFP4, QR_TYPE_IQ4_NL, QR_TYPE_F16, QR_TYPE_BF16, QR_TYPE_F32};
    char cfg[96], err[256];
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        for (int big = 0; big < 2; big++) {
            const qr_type t = types[ti];
            if (big && (L->quick || !(t == QR_TYPE_Q4_K || t == QR_TYPE_Q8_0 || t == QR_TYPE_F32 || t == QR_TYPE_F16)))
                continue;
            const int64_t n = big ? 32000 : 1000, k = big ? 4096 : (t == QR_TYPE_F32 ? 1003 : 1024);
            const int32_t n_tok = big ? 512 : 37;
            const size_t rb = qr_type_row_size(t, k);
            void *data = malloc((size_t)n * rb);
            lab_gen_weight(L, t, n, k, data);
            qr_weight w = {.name = "lab.table", .type = t, .ne = {k, n, 1, 1}, .row_bytes = rb, .host = data};
            if (L->gpu->ops->weight_prepare(L->gpu, &w, err, sizeof err) != QR_OK) {
                printf("weight_prepare: %s\n", err);
                exit(2);
            }
            set_plan(L, n_tok, (int32_t)n, 0, NULL, 0);
            buf o = buf_new(L, (int64_t)n_tok * k, 0.0f);
            op_call cc = {.kind = K_GETROWS, .w = &w, .out = o.h}, gc = {.kind = K_GETROWS, .w = &w, .out = o.d};
            snprintf(cfg, sizeof cfg, "%s %lldx%lld t%d", qr_type_name(t), (long long)n, (long long)k, n_tok);
            check(L, "get_rows", cfg, &cc, &gc, o.h, o.d, (int64_t)n_tok * k, 1e-6, big,
                  (double)n_tok * ((double)rb + (double)k * 4));
            buf_free(L, &o);
            L->gpu->ops->weight_release(L->gpu, &w);
            free(data);
        }
    }
}

static void check_norms(lab *L) {
    const int64_t shapes[][2] = {{1, 4096}, {7, 1000}, {512, 4096}, {3, 5120}};
    char cfg[96];
    for (int si = 0; si < 4; si++) {
        const int64_t rows = shapes[si][0], dim = shapes[si][1], n = rows * dim;
        for (int variant = 0; variant < 3; variant++) { /* 0: weight (+ bias), 1: none, 2: weight, in place */
            const bool inplace = variant == 2, time = variant == 0 && si != 1 && si != 3;
            qr_weight w = vec_weight(L, dim, 1.0f, 0.5f), b = vec_weight(L, dim, 0.0f, 0.5f);
            /* rmsnorm */
            buf x = buf_new(L, n, 2.0f), y = buf_new(L, n, 0.0f);
            op_call cc = {.kind = K_RMS, .a = x.h, .out = inplace ? x.h : y.h, .rows = rows, .dim = dim, .s = 1e-5f,
                          .w = variant == 1 ? NULL : &w};
            op_call gc = cc;
            gc.a = x.d;
            gc.out = inplace ? x.d : y.d;
            snprintf(cfg, sizeof cfg, "%lldx%lld%s", (long long)rows, (long long)dim,
                     variant == 1 ? " no-w" : (inplace ? " w in-place" : " w"));
            check(L, "rmsnorm", cfg, &cc, &gc, cc.out, gc.out, n, 1e-5, time, (double)n * 8);
            buf_free(L, &x);
            buf_free(L, &y);
            /* layernorm */
            x = buf_new(L, n, 3.0f), y = buf_new(L, n, 0.0f);
            op_call lc = {.kind = K_LN, .a = x.h, .out = inplace ? x.h : y.h, .rows = rows, .dim = dim, .s = 1e-5f,
                          .w = variant == 1 ? NULL : &w, .w2 = variant == 0 ? &b : NULL};
            op_call lg = lc;
            lg.a = x.d;
            lg.out = inplace ? x.d : y.d;
            snprintf(cfg, sizeof cfg, "%lldx%lld%s", (long long)rows, (long long)dim,
                     variant == 1 ? " no-w" : (inplace ? " w in-place" : " w+b"));
            check(L, "layernorm", cfg, &lc, &lg, lc.out, lg.out, n, 1e-5, time, (double)n * 8);
            buf_free(L, &x);
            buf_free(L, &y);
            vec_weight_free(L, &w);
            vec_weight_free(L, &b);
        }
    }
}

static void check_softmax(lab *L) {
    const int64_t shapes[][2] = {{1, 32000}, {8, 32000}, {64, 100}, {5, 151936}};
    char cfg[96];
    for (int si = 0; si < 4; si++) {
        for (int inplace = 0; inplace < 2; inplace++) {
            const int64_t rows = shapes[si][0], dim = shapes[si][1], n = rows * dim;
            buf x = buf_new(L, n, 8.0f), y = buf_new(L, n, 0.0f);
            op_call cc = {.kind = K_SOFTMAX, .a = x.h, .out = inplace ? x.h : y.h, .rows = rows, .dim = dim};
            op_call gc = cc;
            gc.a = x.d;
            gc.out = inplace ? x.d : y.d;
            snprintf(cfg, sizeof cfg, "%lldx%lld%s", (long long)rows, (long long)dim, inplace ? " in-place" : "");
            check(L, "softmax", cfg, &cc, &gc, cc.out, gc.out, n, 1e-5, !inplace && si <= 1, (double)n * 8);
            buf_free(L, &x);
            buf_free(L, &y);
        }
    }
}

static void check_rope(lab *L) {
    typedef struct rc {
        int head_dim, n_rot, n_head;
        qr_rope_mode mode;
        bool ff, yarn;
        int n_tok;
        float attn; /* attn_factor (0: 1) */
    } rc;
    const rc cases[] = {
        {128, 128, 32, QR_ROPE_NORMAL, false, false, 1, 0}, {128, 128, 32, QR_ROPE_NORMAL, false, false, 512, 0},
        {128, 128, 8, QR_ROPE_NEOX, false, false, 33, 0},   {64, 64, 4, QR_ROPE_NEOX, true, false, 17, 0},
        {128, 64, 8, QR_ROPE_NORMAL, true, false, 9, 0},    {256, 256, 8, QR_ROPE_NEOX, false, false, 5, 0},
        {80, 40, 5, QR_ROPE_NORMAL, false, false, 7, 0},    {128, 128, 32, QR_ROPE_NORMAL, false, true, 11, 0},
        {64, 32, 6, QR_ROPE_NEOX, true, true, 13, 0},
        /* issue 30 part 2: phi3's LongRoPE (factors, 3/4 of the head, attn_factor), YaRN with an attn_factor */
        {128, 96, 24, QR_ROPE_NEOX, true, false, 64, 1.1902f}, {128, 128, 8, QR_ROPE_NORMAL, false, true, 64, 0.93f},
    };
    char cfg[96];
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const rc *c = &cases[ci];
        set_plan(L, c->n_tok, 1, 32768, NULL, 0);
        qr_weight ff = vec_weight(L, c->n_rot / 2, 1.5f, 0.5f);
        qr_rope_params p = {.mode = c->mode, .n_rot = c->n_rot, .freq_base = c->yarn ? 1000000.0f : 10000.0f,
                            .freq_scale = c->yarn ? 0.25f : 1.0f, .freq_factors = c->ff ? &ff : NULL,
                            .ext_factor = c->yarn ? 1.0f : 0.0f, .attn_factor = c->attn ? c->attn : 1.0f, .beta_fast = 32.0f,
                            .beta_slow = 1.0f, .n_ctx_orig = 4096};
        const int64_t n = (int64_t)c->n_tok * c->n_head * c->head_dim;
        buf x = buf_new(L, n, 2.0f);
        op_call cc = {.kind = K_ROPE, .out = x.h, .rp = &p, .n_head = c->n_head, .head_dim = c->head_dim};
        op_call gc = cc;
        gc.out = x.d;
        snprintf(cfg, sizeof cfg, "%s d%d rot%d h%d t%d%s%s%s", c->mode == QR_ROPE_NEOX ? "neox" : "norm", c->head_dim,
                 c->n_rot, c->n_head, c->n_tok, c->ff ? " ff" : "", c->yarn ? " yarn" : "", c->attn ? " attn" : "");
        check(L, "rope", cfg, &cc, &gc, x.h, x.d, n, 1e-5, ci < 2, (double)n * 8);
        buf_free(L, &x);
        vec_weight_free(L, &ff);
    }
}

static void check_elementwise(lab *L) {
    const struct {
        op_kind k;
        const char *name;
        float in_scale, s;
        double tol;
    } ops[] = {
        {K_SWIGLU, "swiglu", 6.0f, 0, 1e-5}, {K_GEGLU, "geglu", 12.0f, 0, 2e-3},      {K_ADD, "add", 1.0f, 0, 1e-7},
        {K_MUL, "mul", 1.0f, 0, 1e-7},       {K_SCALE, "scale", 1.0f, 0.37f, 1e-7},    {K_SOFTCAP, "softcap", 80.0f, 30.0f, 1e-6},
    };
    const int64_t sizes[] = {14336, 14336 * 64, 1001};
    char cfg[96];
    for (size_t oi = 0; oi < sizeof ops / sizeof ops[0]; oi++) {
        const bool binary = ops[oi].k != K_SCALE && ops[oi].k != K_SOFTCAP;
        for (int si = 0; si < 3; si++) {
            for (int variant = 0; variant < 3; variant++) { /* 0: plain, 1: misaligned (+1 float), 2: in place */
                const int64_t n = sizes[si];
                const int off = variant == 1 ? 1 : 0;
                buf a = buf_new(L, n + 1, ops[oi].in_scale), b = buf_new(L, n + 1, 1.5f), o = buf_new(L, n + 1, 0.0f);
                op_call cc = {.kind = ops[oi].k, .a = a.h + off, .b = b.h + off, .out = (variant == 2 ? a.h : o.h) + off,
                              .n = n, .s = ops[oi].s};
                op_call gc = cc;
                gc.a = a.d + off;
                gc.b = b.d + off;
                gc.out = (variant == 2 ? a.d : o.d) + off;
                snprintf(cfg, sizeof cfg, "n%lld%s", (long long)n,
                         variant == 1 ? " misaligned" : (variant == 2 ? " in-place" : ""));
                check(L, ops[oi].name, cfg, &cc, &gc, cc.out, gc.out, n, ops[oi].tol, variant == 0 && si < 2,
                      (double)n * 4 * (binary ? 3 : 2));
                buf_free(L, &a);
                buf_free(L, &b);
                buf_free(L, &o);
            }
        }
    }
}

static void check_copy_gather(lab *L) {
    char cfg[96];
    const int64_t n = 1 << 20;
    /* copy: disjoint, then overlapping both ways (memmove semantics), checked over the whole buffer */
    for (int variant = 0; variant < 3; variant++) {
        const int64_t sh = variant == 0 ? 0 : (variant == 1 ? 1000 : -1000);
        buf a = buf_new(L, n + 2000, 1.0f), o = buf_new(L, n + 2000, 1.0f);
        lab_upload(L, o.d, o.h, (size_t)(n + 2000) * 4);
        op_call cc, gc;
        if (variant == 0) {
            cc = (op_call){.kind = K_COPY, .a = a.h, .out = o.h, .n = n};
            gc = (op_call){.kind = K_COPY, .a = a.d, .out = o.d, .n = n};
            snprintf(cfg, sizeof cfg, "n%lld disjoint", (long long)n);
            check(L, "copy", cfg, &cc, &gc, o.h, o.d, n + 2000, 0, true, (double)n * 8);
        } else {
            cc = (op_call){.kind = K_COPY, .a = a.h + 1000, .out = a.h + 1000 + sh, .n = n};
            gc = (op_call){.kind = K_COPY, .a = a.d + 1000, .out = a.d + 1000 + sh, .n = n};
            snprintf(cfg, sizeof cfg, "n%lld overlap %+lld", (long long)n, (long long)sh);
            check(L, "copy", cfg, &cc, &gc, a.h, a.d, n + 2000, 0, false, 0);
        }
        buf_free(L, &a);
        buf_free(L, &o);
    }
    /* gather_outputs: into a separate buffer, and in place */
    const int32_t n_tok = 64, dim = 4096;
    const int32_t outs[5] = {3, 17, 18, 40, 63};
    set_plan(L, n_tok, 1, 0, outs, 5);
    for (int inplace = 0; inplace < 2; inplace++) {
        buf s = buf_new(L, (int64_t)n_tok * dim, 1.0f), o = buf_new(L, 5 * dim, 0.0f);
        op_call cc = {.kind = K_GATHER, .a = s.h, .out = inplace ? s.h : o.h, .dim = dim};
        op_call gc = {.kind = K_GATHER, .a = s.d, .out = inplace ? s.d : o.d, .dim = dim};
        check(L, "gather_outputs", inplace ? "64x4096 -> 5 in-place" : "64x4096 -> 5", &cc, &gc, cc.out, gc.out,
              5 * dim, 0, !inplace, (double)5 * dim * 8);
        buf_free(L, &s);
        buf_free(L, &o);
    }
}

/* topk_rows: each row's k best (value descending, ties to the lower index, -0 = +0) and its count above -inf (-1 with a
 * NaN or +inf), the same bytes as the CPU backend's; rows of a vocabulary with ties, signed zeros, -inf halves, a NaN
 * and a +inf; timed at a batched step's rows. */
typedef struct topk_call {
    qr_backend *be;
    const float *x;
    int64_t rows, n;
    int32_t k;
    void *out;
} topk_call;

static void call_topk(void *p) {
    topk_call *c = p;
    c->be->ops->topk_rows(c->be, c->x, c->rows, c->n, c->k, c->out);
}

static void check_topk(lab *L) {
    char cfg[96];
    /* the last two: an odd row length, so that k = 1's 16-byte loads start off a row's first value */
    const int64_t ns[] = {32000, 32000, 32000, 32003, 1001};
    const int32_t rows_l[] = {5, 64, 256, 7, 6}, ks[] = {1, 40, 64};
    for (size_t ri = 0; ri < sizeof rows_l / sizeof rows_l[0]; ri++)
        for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
            const int64_t rows = rows_l[ri], n = ns[ri];
            const int32_t k = ks[ki];
            buf x = buf_new(L, rows * n, 4.0f);
            for (int64_t i = 0; i < rows * n; i++) x.h[i] = roundf(x.h[i] * 16.0f) / 16.0f; /* many ties */
            x.h[0] = x.h[7] = -0.0f, x.h[3] = 0.0f;
            for (int64_t i = 0; i < n; i += 2) x.h[n + i] = -INFINITY;
            if (rows > 2) x.h[2 * n + 10] = NAN;
            if (rows > 3) x.h[3 * n + 20] = INFINITY;
            if (rows > 4) for (int64_t i = 0; i < n; i++) x.h[4 * n + i] = 1.0f; /* one value: the lowest ids */
            lab_upload(L, x.d, x.h, (size_t)(rows * n) * 4);
            const size_t bytes = (size_t)rows * ((size_t)k * 8 + 4);
            uint8_t *oc = malloc(bytes), *og = malloc(bytes);
            topk_call cc = {.be = L->cpu, .x = x.h, .rows = rows, .n = n, .k = k, .out = oc};
            topk_call gc = {.be = L->gpu, .x = x.d, .rows = rows, .n = n, .k = k, .out = og};
            call_topk(&cc);
            call_topk(&gc);
            lab_check_errors(L, "topk_rows");
            /* rows with a NaN / +inf: only the flag is defined */
            const float *vc = (const float *)oc, *vg = (const float *)og;
            const int32_t *ic = (const int32_t *)(vc + rows * k), *ig = (const int32_t *)(vg + rows * k);
            const int32_t *fc = ic + rows * k, *fg = ig + rows * k;
            int64_t bad = 0;
            for (int64_t r = 0; r < rows; r++) {
                bad += fc[r] != fg[r];
                if (fc[r] < 0) continue;
                for (int32_t j = 0; j < k; j++)
                    bad += ic[r * k + j] != ig[r * k + j] || memcmp(&vc[r * k + j], &vg[r * k + j], 4) != 0;
            }
            snprintf(cfg, sizeof cfg, "%lld rows x %lld, k %d", (long long)rows, (long long)n, k);
            const double us = rows >= 64 ? lab_time(L, call_topk, &gc, false) : 0.0;
            lab_record(L, "topk_rows", cfg, (double)bad, (double)bad, 0, bad == 0, us, (double)rows * n * 4, 0);
            free(oc);
            free(og);
            buf_free(L, &x);
        }
}

void lab_ops(lab *L) {
    check_topk(L);
    check_get_rows(L);
    check_norms(L);
    check_softmax(L);
    check_rope(L);
    check_elementwise(L);
    check_copy_gather(L);
}

void lab_ops_exact(lab *L) {
    check_rope(L);
    check_elementwise(L);
}
