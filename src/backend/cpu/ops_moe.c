/* ops_moe.c — the CPU backend's mixture-of-experts ops: routing (softmax / sigmoid / softmax over the
 * selected logits, top-k, weight normalisation), the indexed matmul that computes all tokens routed
 * to one expert together (gather -> one matmul per expert -> scatter), the fused expert
 * gate+up+activation, the weighted combination of the experts' outputs, and the GLU activations.
 * The per-expert matmuls go through the backend's own matmul, so they use the same kernels (and
 * threads) as dense layers. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu.h"

static inline cpu_backend *CB(qr_backend *be) { return (cpu_backend *)be->impl; }

/* ---- activations ---- */

static inline float silu_f(float x) { return x / (1.0f + cpu_expf(-x)); }

/* ggml's swiglu_oai with alpha 1.702 and limit 7 (llm_build_openai_moe). */
static inline float swiglu_oai_f(float g, float u) {
    const float x = fminf(g, 7.0f), y = fminf(fmaxf(u, -7.0f), 7.0f);
    return x / (1.0f + expf(-1.702f * x)) * (y + 1.0f);
}

static inline float relu2_f(float x) {
    const float r = x > 0.0f ? x : 0.0f;
    return r * r;
}

void qr_cpu_glu(qr_backend *be, const float *g, const float *u, int64_t n, qr_glu_kind act, float *out) {
    switch (act) {
    case QR_GLU_SWIGLU:
        be->ops->swiglu(be, g, u, n, out); /* the dense FFN's kernel: same bits */
        return;
    case QR_GLU_SWIGLU_OAI:
        for (int64_t i = 0; i < n; i++) out[i] = swiglu_oai_f(g[i], u[i]);
        return;
    case QR_GLU_RELU2:
        for (int64_t i = 0; i < n; i++) out[i] = relu2_f(g[i]);
        return;
    case QR_GLU_SIGMOID: /* ggml_div(ggml_silu(x), x) of a one-column tensor: ggml_silu_f32 (libm expf) */
        for (int64_t i = 0; i < n; i++) out[i] = g[i] / (1.0f + expf(-g[i])) / g[i];
        return;
    } /* act: one of the above (backend_check.c) */
}

/* ---- routing ---- */

/* ggml's soft_max of one row (ggml_vec_soft_max_f32 on AVX2): groups of 8 with the vector exp
 * (cpu_expf), each group's float sum added in double; the tail (n % 8) with libm expf; then times
 * the float reciprocal of the double sum. */
static void router_softmax(const float *x, int64_t n, float *y) {
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++) mx = fmaxf(mx, x[i]);
    double sum = 0.0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        float l[8];
        for (int k = 0; k < 8; k++) l[k] = y[i + k] = cpu_expf(x[i + k] - mx);
        const float a0 = l[0] + l[4], a1 = l[1] + l[5], a2 = l[2] + l[6], a3 = l[3] + l[7];
        sum += (double)((a0 + a2) + (a1 + a3));
    }
    for (; i < n; i++) {
        y[i] = expf(x[i] - mx);
        sum += (double)y[i];
    }
    const float inv = (float)(1.0 / sum);
    for (i = 0; i < n; i++) y[i] *= inv;
}

/* Group-limited routing (llama.cpp's build_moe_ffn, DeepSeek's group_limited_greedy / noaux_tc): a group's score is
 * the sum of its two best selection scores (the best plus the second); the n_used groups with the best scores (ties
 * to the lower group) keep their scores, the others' experts get -inf. */
static void mask_groups(float *sel, int32_t ne, int32_t n_groups, int32_t n_used) {
    const int32_t per = ne / n_groups;
    float score[4096];
    bool keep[4096];
    for (int32_t g = 0; g < n_groups; g++) {
        const float *x = sel + (int64_t)g * per;
        int32_t b1 = 0;
        for (int32_t i = 1; i < per; i++)
            if (x[i] > x[b1]) b1 = i;
        int32_t b2 = b1 == 0 ? 1 : 0;
        for (int32_t i = 0; i < per; i++)
            if (i != b1 && x[i] > x[b2]) b2 = i;
        score[g] = x[b1] + x[b2];
        keep[g] = false;
    }
    for (int32_t j = 0; j < n_used; j++) {
        int32_t best = -1;
        for (int32_t g = 0; g < n_groups; g++)
            if (!keep[g] && (best < 0 || score[g] > score[best])) best = g;
        keep[best] = true;
    }
    for (int32_t g = 0; g < n_groups; g++)
        if (!keep[g])
            for (int32_t i = 0; i < per; i++) sel[(int64_t)g * per + i] = -INFINITY;
}

void qr_cpu_moe_route(qr_backend *be, const float *logits, int64_t n_rows, const qr_moe_route_params *p, int32_t *ids,
                      float *weights) {
    const int32_t ne = p->n_expert, k = p->n_used;
    if (ne > 4096) { /* the counts and the bias: checked by backend_check.c; this, the buffers below */
        qr_cpu_raise(be, QR_ERR_INVALID_ARG, "moe_route: bad expert counts or selection bias");
        return;
    }
    const float *bias = p->sel_bias ? p->sel_bias->host : NULL;
    float probs[4096], sel[4096];
    for (int64_t r = 0; r < n_rows; r++) {
        const float *lg = logits + r * ne;
        if (p->gating == QR_MOE_SOFTMAX) {
            router_softmax(lg, ne, probs);
        } else if (p->gating == QR_MOE_SIGMOID) {
            for (int32_t e = 0; e < ne; e++) probs[e] = 1.0f / (1.0f + expf(-lg[e]));
        } else {
            for (int32_t e = 0; e < ne; e++) probs[e] = lg[e];
        }
        for (int32_t e = 0; e < ne; e++) sel[e] = bias ? probs[e] + bias[e] : probs[e];
        if (p->n_groups > 1) mask_groups(sel, ne, p->n_groups, p->n_group_used);
        /* top-k by selection score, ties to the lower expert id */
        int32_t *id = ids + r * k;
        float *w = weights + r * k;
        for (int32_t j = 0; j < k; j++) {
            int32_t best = -1;
            for (int32_t e = 0; e < ne; e++) {
                bool taken = false;
                for (int32_t q = 0; q < j; q++) taken |= id[q] == e;
                if (taken) continue;
                if (best < 0 || sel[e] > sel[best] || (isnan(sel[best]) && !isnan(sel[e]))) best = e;
            }
            id[j] = best;
            w[j] = probs[best];
        }
        if (p->gating == QR_MOE_SOFTMAX_WEIGHT) { /* softmax over the selected logits */
            float tmp[4096];
            memcpy(tmp, w, (size_t)k * sizeof(float));
            router_softmax(tmp, k, w);
        }
        if (p->norm) { /* ggml: sum_rows in double, clamp, divide */
            double sum = 0.0;
            for (int32_t j = 0; j < k; j++) sum += (double)w[j];
            float fs = (float)sum;
            if (fs < 6.103515625e-5f) fs = 6.103515625e-5f;
            for (int32_t j = 0; j < k; j++) w[j] /= fs;
        }
        if (p->scale != 1.0f && p->scale != 0.0f)
            for (int32_t j = 0; j < k; j++) w[j] *= p->scale;
    }
}

/* ---- grouping tokens by expert ---- */

typedef struct expert_groups {
    int32_t n_expert;
    int32_t *start; /* [n_expert + 1] offsets into slot */
    int32_t *slot;  /* [n_rows * n_used] r * n_used + j, grouped by expert, in row order */
} expert_groups;

static bool group_by_expert(qr_backend *be, const int32_t *ids, int64_t n_rows, int32_t n_used, int32_t n_expert,
                            expert_groups *g) {
    const int64_t n = n_rows * n_used;
    g->n_expert = n_expert;
    g->start = calloc((size_t)n_expert + 1, sizeof(int32_t));
    g->slot = malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
    if (!g->start || !g->slot) {
        free(g->start), free(g->slot);
        qr_cpu_raise(be, QR_ERR_NOMEM, "moe: out of memory");
        return false;
    }
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= n_expert) {
            free(g->start), free(g->slot);
            qr_cpu_raise(be, QR_ERR_INVALID_ARG, "moe: expert id out of range");
            return false;
        }
        g->start[ids[i] + 1]++;
    }
    for (int32_t e = 0; e < n_expert; e++) g->start[e + 1] += g->start[e];
    int32_t *fill = malloc((size_t)n_expert * sizeof(int32_t));
    if (!fill) {
        free(g->start), free(g->slot);
        qr_cpu_raise(be, QR_ERR_NOMEM, "moe: out of memory");
        return false;
    }
    memcpy(fill, g->start, (size_t)n_expert * sizeof(int32_t));
    for (int64_t i = 0; i < n; i++) g->slot[fill[ids[i]]++] = (int32_t)i;
    free(fill);
    return true;
}

static void groups_free(expert_groups *g) {
    free(g->start);
    free(g->slot);
}

/* How one expert matrix is multiplied: ggml's mul_mat_id computes each token row on its own (the
 * repacked GEMV, or vec_dot), never the multi-row GEMM/sgemm orders, except that an expert with at
 * least QR_TILED_MIN_ROWS tokens routed to it over a K-quant it does not repack goes through its tiled
 * GEMM, as a dense matmul of that many rows does (dot_tiled: its one-row arithmetic). Each weight row
 * is dotted with every routed token here; each weight row is read once per group (tokens routed to
 * one expert are computed together). */
typedef struct xmm_kind {
    const qr_quant_traits *tr;
    qr_vec_dot_fn dot;
    qr_vec_dot_fn dot_tiled; /* NULL: no tiled path for this weight */
    qr_from_float_fn act; /* NULL: vec_dot_type F32, activations used as they are */
    size_t xq_row;        /* bytes of one converted activation row */
} xmm_kind;

static bool xmm_kind_of(qr_backend *be, const qr_weight *w, xmm_kind *kd) {
    cpu_backend *cb = CB(be);
    const qr_quant_traits *tr = cb->scalar ? qr_quant_traits_ref(w->type) : qr_quant_traits_best(w->type);
    if (!tr || !tr->vec_dot) return false;
    kd->tr = tr;
    kd->dot = tr->vec_dot;
    kd->dot_tiled = tr->vec_dot_tiled;
    if (tr->vec_dot_gemm && tr->vec_dot_gemv && tr->repack_rows > 0 && w->ne[1] % tr->repack_rows == 0) {
        kd->dot = tr->vec_dot_gemv;
        kd->dot_tiled = NULL; /* repacked weights take the repacked kernels */
    }
    kd->act = NULL;
    kd->xq_row = (size_t)w->ne[0] * sizeof(float);
    if (tr->vec_dot_type != QR_TYPE_F32) {
        kd->act = qr_cpu_act_quantizer(tr->vec_dot_type);
        if (!kd->act) {
            const qr_quant_traits *vt = cb->scalar ? qr_quant_traits_ref(tr->vec_dot_type)
                                                   : qr_quant_traits_best(tr->vec_dot_type);
            kd->act = vt ? vt->from_float : NULL;
        }
        if (!kd->act) return false;
        kd->xq_row = qr_type_row_size(tr->vec_dot_type, w->ne[0]);
        if (kd->xq_row == 0) return false;
    }
    return true;
}

typedef struct xmm_task {
    const char *w1, *w2;  /* expert rows of up to two matrices of equal shape (gate, up), w2 may be NULL */
    size_t wrow;
    qr_vec_dot_fn dot;
    int64_t k, n, cnt;
    const char *xq;
    size_t xq_row;
    float *y1, *y2;       /* [cnt][n] */
} xmm_task;

static void xmm_fn(void *arg, int64_t lo, int64_t hi, int ith) {
    xmm_task *t = arg;
    (void)ith;
    for (int64_t i = lo; i < hi; i++) {
        const char *r1 = t->w1 + (size_t)i * t->wrow, *r2 = t->w2 ? t->w2 + (size_t)i * t->wrow : NULL;
        for (int64_t j = 0; j < t->cnt; j++) {
            const char *xr = t->xq + (size_t)j * t->xq_row;
            t->dot(t->k, t->y1 + j * t->n + i, r1, xr);
            if (r2) t->dot(t->k, t->y2 + j * t->n + i, r2, xr);
        }
    }
}

/* y1[cnt][n] = W1_e x^T (and y2 with W2_e), xq: cnt converted rows. */
static void expert_mm(qr_backend *be, const qr_weight *w1, const qr_weight *w2, int32_t e, const xmm_kind *kd,
                      const void *xq, int64_t cnt, float *y1, float *y2) {
    cpu_backend *cb = CB(be);
    const size_t off = (size_t)e * (size_t)w1->ne[1] * w1->row_bytes;
    const qr_vec_dot_fn dot = kd->dot_tiled && cnt >= QR_TILED_MIN_ROWS && !cb->row_exact ? kd->dot_tiled : kd->dot;
    xmm_task t = {.w1 = (const char *)w1->host + off, .w2 = w2 ? (const char *)w2->host + off : NULL,
                  .wrow = w1->row_bytes, .dot = dot, .k = w1->ne[0], .n = w1->ne[1], .cnt = cnt, .xq = xq,
                  .xq_row = kd->xq_row, .y1 = y1, .y2 = y2};
    const int nth = cpu_pool_n_threads(cb->pool);
    const int64_t work = t.n * t.k * cnt * (w2 ? 2 : 1);
    if (nth == 1 || work < 65536) {
        xmm_fn(&t, 0, t.n, 0);
        return;
    }
    int64_t grain = t.n / (nth * 8);
    if (grain < 4) grain = 4;
    cpu_pool_for(cb->pool, t.n, grain, xmm_fn, &t);
}

/* Gathers the cnt rows of slots slot[0..cnt) (row s / n_used of x, or row s with per_slot) converted
 * for kd into xq. */
static void gather_convert(const xmm_kind *kd, const float *x, int64_t k, bool per_slot, int32_t n_used,
                           const int32_t *slot, int32_t cnt, char *xq) {
    for (int32_t i = 0; i < cnt; i++) {
        const float *src = x + (int64_t)(per_slot ? slot[i] : slot[i] / n_used) * k;
        if (kd->act) kd->act(src, xq + (size_t)i * kd->xq_row, k);
        else memcpy(xq + (size_t)i * kd->xq_row, src, (size_t)k * sizeof(float));
    }
}

/* Adds bias row e to y[n] (a no-op without bias). */
static void add_bias(const qr_weight *bias, int32_t e, float *y, int64_t n) {
    if (!bias) return;
    const float *b = (const float *)bias->host + (int64_t)e * bias->ne[0];
    for (int64_t i = 0; i < n; i++) y[i] += b[i];
}

static int32_t max_group(const expert_groups *g) {
    int32_t m = 0;
    for (int32_t e = 0; e < g->n_expert; e++)
        if (g->start[e + 1] - g->start[e] > m) m = g->start[e + 1] - g->start[e];
    return m;
}

/* The expert weights' shapes and types: checked by backend_check.c. */
void qr_cpu_matmul_id(qr_backend *be, const qr_moe_matmul_args *a) {
    const qr_weight *w = a->w, *bias = a->w_b;
    const float *x = a->x;
    const bool x_per_slot = a->x_per_slot;
    const int32_t *ids = a->ids;
    const int64_t n_rows = a->n_rows;
    const int32_t n_used = a->n_used;
    float *y = a->y;
    if (n_rows <= 0) return;
    xmm_kind kd;
    if (!xmm_kind_of(be, w, &kd)) {
        qr_cpu_raise(be, QR_ERR_UNSUPPORTED, "matmul_id: weight type has no dot product");
        return;
    }
    const int64_t k = w->ne[0], n = w->ne[1];
    expert_groups g;
    if (!group_by_expert(be, ids, n_rows, n_used, (int32_t)w->ne[2], &g)) return;
    const int32_t mc = max_group(&g);
    char *xq = malloc((size_t)mc * kd.xq_row);
    float *yg = malloc((size_t)mc * (size_t)n * sizeof(float));
    if (!xq || !yg) {
        qr_cpu_raise(be, QR_ERR_NOMEM, "matmul_id: out of memory");
        goto done;
    }
    for (int32_t e = 0; e < g.n_expert; e++) {
        const int32_t c0 = g.start[e], cnt = g.start[e + 1] - c0;
        if (cnt == 0) continue;
        gather_convert(&kd, x, k, x_per_slot, n_used, g.slot + c0, cnt, xq);
        expert_mm(be, w, NULL, e, &kd, xq, cnt, yg, NULL);
        for (int32_t i = 0; i < cnt; i++) {
            float *dst = y + (int64_t)g.slot[c0 + i] * n;
            memcpy(dst, yg + (int64_t)i * n, (size_t)n * sizeof(float));
            add_bias(bias, e, dst, n);
        }
    }
done:
    free(xq);
    free(yg);
    groups_free(&g);
}

/* The weights' shapes and types, the activation: checked by backend_check.c. */
void qr_cpu_moe_gate_up(qr_backend *be, const qr_moe_matmul_args *a) {
    const qr_weight *gate = a->gate, *gate_b = a->gate_b, *up = a->w, *up_b = a->w_b;
    const float *x = a->x;
    const int32_t *ids = a->ids;
    const int64_t n_rows = a->n_rows;
    const int32_t n_used = a->n_used;
    const qr_glu_kind act = a->act;
    float *h = a->y;
    if (n_rows <= 0) return;
    xmm_kind ku, kg;
    if (!xmm_kind_of(be, up, &ku) || (gate && !xmm_kind_of(be, gate, &kg))) {
        qr_cpu_raise(be, QR_ERR_UNSUPPORTED, "moe_gate_up: weight type has no dot product");
        return;
    }
    /* one pass over both matrices when they share a type (the usual case), else two */
    const bool fused = gate && gate->type == up->type && kg.dot == ku.dot;
    const int64_t k = up->ne[0], n = up->ne[1];
    expert_groups g;
    if (!group_by_expert(be, ids, n_rows, n_used, (int32_t)up->ne[2], &g)) return;
    const int32_t mc = max_group(&g);
    char *xq = malloc((size_t)mc * ku.xq_row), *xq2 = gate && !fused ? malloc((size_t)mc * kg.xq_row) : NULL;
    float *gg = malloc((size_t)mc * (size_t)n * sizeof(float));
    float *ug = malloc((size_t)mc * (size_t)n * sizeof(float));
    if (!xq || !gg || !ug || (gate && !fused && !xq2)) {
        qr_cpu_raise(be, QR_ERR_NOMEM, "moe_gate_up: out of memory");
        goto done;
    }
    for (int32_t e = 0; e < g.n_expert; e++) {
        const int32_t c0 = g.start[e], cnt = g.start[e + 1] - c0;
        if (cnt == 0) continue;
        gather_convert(&ku, x, k, false, n_used, g.slot + c0, cnt, xq);
        if (fused) {
            expert_mm(be, up, gate, e, &ku, xq, cnt, ug, gg);
        } else {
            expert_mm(be, up, NULL, e, &ku, xq, cnt, ug, NULL);
            if (gate) {
                gather_convert(&kg, x, k, false, n_used, g.slot + c0, cnt, xq2);
                expert_mm(be, gate, NULL, e, &kg, xq2, cnt, gg, NULL);
            }
        }
        for (int32_t i = 0; i < cnt; i++) {
            add_bias(up_b, e, ug + (int64_t)i * n, n);
            if (gate) add_bias(gate_b, e, gg + (int64_t)i * n, n);
        }
        if (gate) qr_cpu_glu(be, gg, ug, (int64_t)cnt * n, act, gg);
        else qr_cpu_glu(be, ug, NULL, (int64_t)cnt * n, act, gg);
        for (int32_t i = 0; i < cnt; i++)
            memcpy(h + (int64_t)g.slot[c0 + i] * n, gg + (int64_t)i * n, (size_t)n * sizeof(float));
    }
done:
    free(xq);
    free(xq2);
    free(gg);
    free(ug);
    groups_free(&g);
}

void qr_cpu_moe_combine(qr_backend *be, const float *y, const float *w, int64_t n_rows, int32_t n_used, int64_t dim,
                        const float *add, float *out) {
    (void)be;
    for (int64_t r = 0; r < n_rows; r++) {
        float *o = out + r * dim;
        const float *yr = y + r * n_used * dim, *wr = w + r * n_used, *ar = add ? add + r * dim : NULL;
        for (int64_t i = 0; i < dim; i++) {
            float acc = yr[i] * wr[0];
            for (int32_t j = 1; j < n_used; j++) acc += yr[(int64_t)j * dim + i] * wr[j];
            o[i] = ar ? acc + ar[i] : acc;
        }
    }
}
