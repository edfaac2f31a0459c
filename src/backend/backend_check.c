/* backend_check.c — the argument checks of the op table, done once above every backend: qr_backend_init
 * sets be->ops to a copy of the backend's table in which each op that has checks is wrapped by them. A
 * wrapper validates what the op contract in backend.h states about its arguments (NULL pointers, shapes
 * against each other and against the KV layout, weight types against be->caps, the batch plan), raises a
 * bad argument as the op's error (impl_ops->raise, reported by last_error) and returns without running the
 * op; else it calls the backend's own op. The checks are integer compares (the batch plan's rows are
 * scanned once, by set_batch), so they cost nothing next to an op. What stays in a backend is what only it
 * knows: its own limits and memory (a weight it did not prepare, a scratch it cannot grow). */
#include <stdarg.h>
#include <stdio.h>

#include "backend/backend.h"
#include "util/util.h"

/* Raises a formatted error on be (as an op would) for the checks below. */
static void bad(qr_backend *be, qr_status st, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    be->impl_ops->raise(be, st, msg);
}

#define CHECK(be, cond, ...)                                  \
    do {                                                      \
        if (!(cond)) {                                        \
            bad((be), QR_ERR_INVALID_ARG, __VA_ARGS__);       \
            return;                                           \
        }                                                     \
    } while (0)

/* The same for the ops that return a bool (true: the op was taken, here with an error raised). */
#define CHECK_B(be, cond, ...)                                \
    do {                                                      \
        if (!(cond)) {                                        \
            bad((be), QR_ERR_INVALID_ARG, __VA_ARGS__);       \
            return true;                                      \
        }                                                     \
    } while (0)

static const char *wname(const qr_weight *w) { return w && w->name ? w->name : "?"; }

/* An F32 vector of at least n elements in its first row (NULL allowed when optional). */
static bool f32_vec(const qr_weight *w, int64_t n, bool optional) {
    if (!w) return optional;
    return w->type == QR_TYPE_F32 && w->ne[0] == n;
}

/* An F32 tensor of n elements in its first two dims (a vector, or [groups][n / groups]). */
static bool f32_count(const qr_weight *w, int64_t n, bool optional) {
    if (!w) return optional;
    return w->type == QR_TYPE_F32 && w->ne[0] * w->ne[1] == n;
}

/* A weight type the backend multiplies (caps.matmul_types); raises QR_ERR_UNSUPPORTED otherwise. */
static bool mm_type_ok(qr_backend *be, const qr_weight *w, const char *op) {
    if ((unsigned)w->type < 64 && (be->caps.matmul_types & QR_TYPE_BIT(w->type))) return true;
    bad(be, QR_ERR_UNSUPPORTED, "%s: weight %s of type %s has no dot product on this backend", op, wname(w),
        qr_type_name(w->type));
    return false;
}

/* The shape checks of qr_ssm_params (d_conv up to 16: the conv state both backends keep). */
static bool ssm_params_ok(const qr_ssm_params *p) {
    return p && p->d_conv >= 2 && p->d_conv <= 16 && p->n_head >= 1 && p->head_dim >= 1 && p->n_group >= 1 &&
           p->d_state >= 1 && p->n_head % p->n_group == 0 && p->d_inner == p->n_head * p->head_dim &&
           p->conv_dim == p->d_inner + 2 * p->n_group * p->d_state;
}

/* The routing parameters: expert counts and the selection bias. */
static bool route_ok(const qr_moe_route_params *p) {
    return p && p->n_expert >= 1 && p->n_used >= 1 && p->n_used <= p->n_expert &&
           (unsigned)p->gating <= QR_MOE_SOFTMAX_WEIGHT && f32_vec(p->sel_bias, p->n_expert, true) &&
           (p->n_groups <= 1 || (p->n_expert % p->n_groups == 0 && p->n_expert / p->n_groups >= 2 &&
                                 p->n_group_used >= 1 && p->n_group_used <= p->n_groups &&
                                 p->n_used <= p->n_group_used * (p->n_expert / p->n_groups)));
}

/* The experts' activations (moe_gate_up); the glu op also takes QR_GLU_SIGMOID. */
static bool glu_ok(qr_glu_kind act) { return (unsigned)act <= QR_GLU_RELU2; }

/* ---- memory, KV storage, batch plan ---- */

/* A KV storage type of this backend (caps.kv_types). */
static bool kv_type_ok(const qr_backend *be, qr_type t) {
    return (unsigned)t < 64 && (be->caps.kv_types & QR_TYPE_BIT(t));
}

static qr_kv_storage *chk_kv_alloc(qr_backend *be, const qr_kv_desc *d, char *err, size_t err_len) {
    if (!d || d->n_layer < 0 || d->n_blocks < 1 || d->block_size < 1 || d->k_dim < 1 || d->v_dim < 1) {
        if (d)
            qr_errf(err, err_len, QR_ERR_INVALID_ARG, "bad kv layout: n_layer %d, n_blocks %d, block_size %d, k_dim %d, v_dim %d",
                    d->n_layer, d->n_blocks, d->block_size, d->k_dim, d->v_dim);
        else qr_errf(err, err_len, QR_ERR_INVALID_ARG, "kv_alloc: no layout");
        return NULL;
    }
    if (!kv_type_ok(be, d->type_k) || !kv_type_ok(be, d->type_v)) {
        qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "the %s backend cannot store a KV cache of type %s",
                be->name ? be->name : "?", qr_type_name(kv_type_ok(be, d->type_k) ? d->type_v : d->type_k));
        return NULL;
    }
    if (!qr_kv_row_bytes_k(d) || !qr_kv_row_bytes_v(d)) {
        qr_errf(err, err_len, QR_ERR_UNSUPPORTED,
                "KV cache types %s/%s need K and V rows that are whole blocks of %u/%u values (k_dim %d, v_dim %d)",
                qr_type_name(d->type_k), qr_type_name(d->type_v), (unsigned)qr_type_table[d->type_k].block_size,
                (unsigned)qr_type_table[d->type_v].block_size, d->k_dim, d->v_dim);
        return NULL;
    }
    const int32_t rots[2] = {d->rot_k, d->rot_v}, dims[2] = {d->k_dim, d->v_dim};
    for (int i = 0; i < 2; i++)
        if (rots[i] < 0 || (rots[i] && (rots[i] > 256 || rots[i] % 32 || (rots[i] & (rots[i] - 1)) || dims[i] % rots[i]))) {
            qr_errf(err, err_len, QR_ERR_INVALID_ARG, "bad kv layout: rotation chunk %d of a %d-value row", rots[i], dims[i]);
            return NULL;
        }
    return be->impl_ops->kv_alloc(be, d, err, err_len);
}

static void chk_kv_copy_block(qr_backend *be, qr_kv_storage *kv, int32_t src, int32_t dst) {
    CHECK(be, kv, "kv_copy_block: no KV storage");
    const qr_kv_desc *d = qr_kv_storage_desc(kv);
    CHECK(be, src >= 0 && dst >= 0 && src < d->n_blocks && dst < d->n_blocks, "kv_copy_block: block id out of range");
    be->impl_ops->kv_copy_block(be, kv, src, dst);
}

static qr_status chk_set_batch(qr_backend *be, const qr_batch_plan *p, char *err, size_t err_len) {
    if (!p) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "bad batch plan: none");
    if (p->n_tokens < 1 || p->n_seqs < 1 || p->max_blocks < 1 || p->n_outputs < 0 || p->n_outputs > p->n_tokens)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "bad batch plan: n_tokens %d, n_seqs %d, max_blocks %d, n_outputs %d",
                       p->n_tokens, p->n_seqs, p->max_blocks, p->n_outputs);
    if (!p->tokens || !p->pos || !p->seq || !p->kv_slot || !p->block_table || (p->n_outputs && !p->output_rows))
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "bad batch plan: an array is missing");
    qr_plan_summary s = {.n_tokens = p->n_tokens, .min_token = p->tokens[0], .max_token = p->tokens[0]};
    for (int32_t r = 0; r < p->n_tokens; r++) {
        if (p->seq[r] < 0 || p->seq[r] >= p->n_seqs || p->pos[r] < 0 || p->kv_slot[r] < 0)
            return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "bad batch plan row %d: seq %d, pos %d, kv_slot %d", r,
                           p->seq[r], p->pos[r], p->kv_slot[r]);
        if (p->tokens[r] < s.min_token) s.min_token = p->tokens[r];
        if (p->tokens[r] > s.max_token) s.max_token = p->tokens[r];
        if (p->pos[r] > s.max_pos) s.max_pos = p->pos[r];
        if (p->kv_slot[r] > s.max_slot) s.max_slot = p->kv_slot[r];
    }
    for (int32_t o = 0; o < p->n_outputs; o++)
        if (p->output_rows[o] < 0 || p->output_rows[o] >= p->n_tokens)
            return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "bad batch plan: output row %d out of range", p->output_rows[o]);
    const qr_status st = be->impl_ops->set_batch(be, p, err, err_len);
    if (st == QR_OK) be->plan = s; /* else the backend keeps its plan, and so do the checks */
    return st;
}

/* ---- the plain ops ---- */

static void chk_get_rows(qr_backend *be, const qr_weight *table, float *out) {
    CHECK(be, table && out, "get_rows: no table or output");
    CHECK(be, be->plan.n_tokens > 0, "get_rows: no batch plan");
    CHECK(be, be->plan.min_token >= 0 && be->plan.max_token < table->ne[1], "get_rows: token id out of range");
    be->impl_ops->get_rows(be, table, out);
}

static void chk_matmul(qr_backend *be, const qr_weight *w, const float *x, int64_t n_rows, float *y) {
    CHECK(be, w && (n_rows <= 0 || (x && y)), "matmul: no weight, input or output");
    if (!mm_type_ok(be, w, "matmul")) return;
    be->impl_ops->matmul(be, w, x, n_rows, y);
}

static void chk_rmsnorm(qr_backend *be, const float *x, const qr_weight *w, int64_t n_rows, int64_t dim, float eps,
                        float *y) {
    CHECK(be, f32_vec(w, dim, true), "rmsnorm: weight must be F32 [dim]");
    CHECK(be, n_rows <= 0 || (x && y && dim > 0), "rmsnorm: no input or output, or dim < 1");
    be->impl_ops->rmsnorm(be, x, w, n_rows, dim, eps, y);
}

static void chk_layernorm(qr_backend *be, const float *x, const qr_weight *w, const qr_weight *b, int64_t n_rows,
                          int64_t dim, float eps, float *y) {
    CHECK(be, f32_vec(w, dim, true) && f32_vec(b, dim, true), "layernorm: weight and bias must be F32 [dim]");
    CHECK(be, n_rows <= 0 || (x && y && dim > 0), "layernorm: no input or output, or dim < 1");
    be->impl_ops->layernorm(be, x, w, b, n_rows, dim, eps, y);
}

/* The rope parameters for heads of head_dim. */
static bool rope_ok(const qr_rope_params *p, int32_t head_dim) {
    return p && p->n_rot >= 2 && p->n_rot % 2 == 0 && p->n_rot <= head_dim &&
           (!p->freq_factors || (p->freq_factors->type == QR_TYPE_F32 && p->freq_factors->ne[0] >= p->n_rot / 2));
}

static void chk_rope(qr_backend *be, float *x, int32_t n_head, int32_t head_dim, const qr_rope_params *p) {
    CHECK(be, x && n_head >= 1 && rope_ok(p, head_dim), "rope: bad n_rot/head_dim/freq_factors");
    be->impl_ops->rope(be, x, n_head, head_dim, p);
}

/* kv_store's checks: the storage, the layer and every slot of the plan. */
static bool kv_store_ok(qr_backend *be, const qr_kv_storage *kv, int32_t layer, const char *op) {
    if (!kv) {
        bad(be, QR_ERR_INVALID_ARG, "%s: no KV storage", op);
        return false;
    }
    const qr_kv_desc *d = qr_kv_storage_desc(kv);
    if (layer < 0 || layer >= d->n_layer) {
        bad(be, QR_ERR_INVALID_ARG, "%s: layer out of range", op);
        return false;
    }
    if (be->plan.n_tokens > 0 && be->plan.max_slot >= (int64_t)d->n_blocks * d->block_size) {
        bad(be, QR_ERR_INVALID_ARG, "%s: slot out of range", op);
        return false;
    }
    return true;
}

static void chk_kv_store(qr_backend *be, qr_kv_storage *kv, int32_t layer, const float *k, const float *v) {
    if (!kv_store_ok(be, kv, layer, "kv_store")) return;
    CHECK(be, k && v, "kv_store: no k or v");
    be->impl_ops->kv_store(be, kv, layer, k, v);
}

/* attention's checks: the head layout against the KV layout and caps, the sinks. */
static bool attn_ok(qr_backend *be, const qr_kv_storage *kv, int32_t layer, const qr_attn_params *p) {
    const qr_kv_desc *d = kv ? qr_kv_storage_desc(kv) : NULL;
    const int32_t hmax = be->caps.max_head_dim;
    if (!p || !d || layer < 0 || layer >= d->n_layer || p->n_head < 1 || p->n_head_kv < 1 || p->n_head % p->n_head_kv ||
        p->head_dim_k < 1 || p->head_dim_v < 1 || p->head_dim_k > hmax || p->head_dim_v > hmax ||
        (int64_t)p->n_head_kv * p->head_dim_k != d->k_dim || (int64_t)p->n_head_kv * p->head_dim_v != d->v_dim) {
        bad(be, QR_ERR_INVALID_ARG, "attention: head layout does not match the KV cache");
        return false;
    }
    if (p->sinks && (p->sinks->type != QR_TYPE_F32 || p->sinks->ne[0] < p->n_head)) {
        bad(be, QR_ERR_INVALID_ARG, "attention: sinks must be F32 [n_head]");
        return false;
    }
    return true;
}

static void chk_attention(qr_backend *be, qr_kv_storage *kv, int32_t layer, const float *q, const qr_attn_params *p,
                          float *out) {
    if (!attn_ok(be, kv, layer, p)) return;
    CHECK(be, q && out, "attention: no q or output");
    be->impl_ops->attention(be, kv, layer, q, p, out);
}

/* The elementwise ops: both inputs (b where used) and the output, for n > 0. */
#define EW_CHECK(be, op, a, b, out, n) CHECK(be, (n) <= 0 || ((a) && (b) && (out)), op ": no input or output")

/* The ops of two inputs: out[i] = op(a[i], b[i]). */
#define CHK_BINARY(op)                                                                               \
    static void chk_##op(qr_backend *be, const float *a, const float *b, int64_t n, float *out) { \
        EW_CHECK(be, #op, a, b, out, n);                                                             \
        be->impl_ops->op(be, a, b, n, out);                                                          \
    }
CHK_BINARY(swiglu)
CHK_BINARY(geglu)
CHK_BINARY(add)
CHK_BINARY(mul)

static void chk_scale(qr_backend *be, const float *x, float s, int64_t n, float *out) {
    EW_CHECK(be, "scale", x, x, out, n);
    be->impl_ops->scale(be, x, s, n, out);
}
static void chk_softcap(qr_backend *be, const float *x, float cap, int64_t n, float *out) {
    CHECK(be, cap > 0.0f, "softcap: cap must be > 0");
    EW_CHECK(be, "softcap", x, x, out, n);
    be->impl_ops->softcap(be, x, cap, n, out);
}
static void chk_softmax(qr_backend *be, const float *x, int64_t n_rows, int64_t dim, float *out) {
    CHECK(be, n_rows <= 0 || (x && out && dim > 0), "softmax: no input or output, or dim < 1");
    be->impl_ops->softmax(be, x, n_rows, dim, out);
}
static void chk_copy(qr_backend *be, const float *src, int64_t n, float *dst) {
    EW_CHECK(be, "copy", src, src, dst, n);
    be->impl_ops->copy(be, src, n, dst);
}

static void chk_copy_rows(qr_backend *be, const float *src, int64_t src_stride, float *dst, int64_t dst_stride,
                          int64_t n_rows, int64_t width) {
    CHECK(be, n_rows <= 0 || width <= 0 || (src && dst && src_stride >= width && dst_stride >= width),
          "copy_rows: no input or output, or a stride below the width");
    be->impl_ops->copy_rows(be, src, src_stride, dst, dst_stride, n_rows, width);
}

static void chk_matmul_heads(qr_backend *be, const qr_matmul_heads_args *a) {
    CHECK(be, a && a->w && a->w->ne[2] >= 1 && a->w->ne[3] == 1, "matmul_heads: no weight, or not [n_head][n][k]");
    CHECK(be, a->n_rows <= 0 || (a->x && a->y && a->x_head >= 0 && a->y_head >= 0 &&
                                 a->x_row >= (a->w->ne[2] - 1) * a->x_head + a->w->ne[0] &&
                                 a->y_row >= (a->w->ne[2] - 1) * a->y_head + a->w->ne[1]),
          "matmul_heads: no input or output, or strides that do not hold the heads");
    if (!mm_type_ok(be, a->w, "matmul_heads")) return;
    be->impl_ops->matmul_heads(be, a);
}

static void chk_add_row(qr_backend *be, const float *x, const qr_weight *table, int64_t row, int64_t n_rows,
                        float *out) {
    CHECK(be, table && (n_rows <= 0 || (x && out)), "add_row: no table, input or output");
    CHECK(be, row >= -1 && row < table->ne[1] && (row != -1 || n_rows <= be->plan.n_tokens), "add_row: row out of range");
    CHECK(be, row != -1 || n_rows <= 0 || be->plan.max_pos < table->ne[1],
          "add_row: position beyond the table (text longer than the model's context)");
    be->impl_ops->add_row(be, x, table, row, n_rows, out);
}

/* ---- fusions ---- */

static bool chk_add_rmsnorm(qr_backend *be, const qr_add_rmsnorm_args *a) {
    CHECK_B(be, a && a->x && a->y && a->dim > 0, "add_rmsnorm: no input or output, or dim < 1");
    CHECK_B(be, f32_vec(a->w, a->dim, true), "add_rmsnorm: weight must be F32 [dim]");
    CHECK_B(be, !a->b_norm || (f32_vec(a->b_norm, a->dim, false) && a->b && a->b_scale == 1.0f && !a->router),
            "add_rmsnorm: the post-norm weight must be F32 [dim], with b, b_scale 1 and no router");
    if (a->router) {
        const qr_moe_route_params *p = a->route;
        CHECK_B(be, route_ok(p), "add_rmsnorm: bad expert counts or selection bias");
        CHECK_B(be, a->router->ne[0] == a->dim && a->router->ne[1] == p->n_expert &&
                        (!a->router_b || a->router_b->ne[0] == p->n_expert),
                "add_rmsnorm: router must be [n_expert][dim], its bias [n_expert]");
        CHECK_B(be, a->logits && a->ids && a->weights, "add_rmsnorm: no routing outputs");
    }
    return be->impl_ops->add_rmsnorm(be, a);
}

static void chk_matmul_multi(qr_backend *be, int32_t n_w, const qr_weight *const *w, const qr_weight *const *b,
                             const float *x, int64_t n_rows, float *const *y) {
    CHECK(be, n_w >= 1 && n_w <= 3 && w && y && x, "matmul_multi: 1..3 weights, with input and outputs");
    for (int32_t i = 0; i < n_w; i++) {
        CHECK(be, w[i] && y[i], "matmul_multi: no weight or output %d", i);
        if (!mm_type_ok(be, w[i], "matmul_multi")) return;
    }
    be->impl_ops->matmul_multi(be, n_w, w, b, x, n_rows, y);
}

static bool chk_mla_prep(qr_backend *be, const qr_mla_prep_args *a) {
    CHECK_B(be, a && a->kv_a && a->q && a->q_out && a->rope && a->kv, "mla_prep: no input, output, rope or cache");
    CHECK_B(be, a->n_head > 0 && a->kv_lora > 0 && a->n_rot > 0 && a->n_rot % 2 == 0 && a->head_dim_q >= a->n_rot,
            "mla_prep: bad head sizes");
    CHECK_B(be, f32_vec(a->norm, a->kv_lora, false), "mla_prep: the norm weight must be F32 [kv_lora]");
    CHECK_B(be, rope_ok(a->rope, a->n_rot), "rope: bad n_rot/head_dim/freq_factors");
    if (!kv_store_ok(be, a->kv, a->layer, "mla_prep")) return true;
    const qr_kv_desc *d = qr_kv_storage_desc(a->kv);
    CHECK_B(be, d->k_dim == a->kv_lora + a->n_rot && d->v_dim == a->kv_lora,
            "mla_prep: the cache's rows are not [kv_lora + n_rot] / [kv_lora]");
    return be->impl_ops->mla_prep(be, a);
}

static void chk_matmul_glu(qr_backend *be, const qr_weight *gate, const qr_weight *up, const float *x, int64_t n_rows,
                           bool gelu, float *out, float *scratch) {
    CHECK(be, gate && up && x && out && scratch, "matmul_glu: no weight, input, output or scratch");
    CHECK(be, gate->ne[0] == up->ne[0] && gate->ne[1] == up->ne[1], "matmul_glu: gate and up shapes differ");
    if (!mm_type_ok(be, gate, "matmul_glu") || !mm_type_ok(be, up, "matmul_glu")) return;
    be->impl_ops->matmul_glu(be, gate, up, x, n_rows, gelu, out, scratch);
}

static void chk_matmul_act(qr_backend *be, const qr_weight *w, const float *x, int64_t n_rows, qr_glu_kind act,
                           float *out, float *scratch) {
    CHECK(be, w && x && out && scratch, "matmul_act: no weight, input, output or scratch");
    CHECK(be, act == QR_GLU_RELU2, "matmul_act: an activation of one input (relu2)");
    if (!mm_type_ok(be, w, "matmul_act")) return;
    be->impl_ops->matmul_act(be, w, x, n_rows, act, out, scratch);
}

static bool chk_rope_attention(qr_backend *be, const qr_rope_attn_args *a) {
    CHECK_B(be, a && a->q && a->k && a->v && a->attn, "rope_attention: no q, k, v or heads");
    const qr_attn_params *p = a->attn;
    CHECK_B(be, p->n_head >= 1 && p->n_head_kv >= 1 && rope_ok(a->rope, p->head_dim_k),
            "rope: bad n_rot/head_dim/freq_factors");
    CHECK_B(be, !a->q_norm == !a->k_norm && f32_vec(a->q_norm, p->head_dim_k, true) && f32_vec(a->k_norm, p->head_dim_k, true) &&
                    (!a->q_norm || a->out),
            "rope_attention: the q / k norms must both be F32 [head_dim_k], with attention");
    if (!kv_store_ok(be, a->kv, a->layer, a->out ? "rope_attention" : "rope_kv_store")) return true;
    if (a->out) {
        if (!attn_ok(be, a->kv, a->layer, p)) return true;
    } else {
        CHECK_B(be, (int64_t)p->n_head_kv * p->head_dim_k == qr_kv_storage_desc(a->kv)->k_dim,
                "rope_kv_store: k heads do not match the KV cache");
    }
    return be->impl_ops->rope_attention(be, a);
}

static void chk_ssm_gate_norm(qr_backend *be, const qr_ssm_gate_norm_args *a) {
    CHECK(be, a && ssm_params_ok(a->p), "ssm_gate_norm: bad shapes");
    CHECK(be, a->n_rows <= 0 || (a->y && a->z && a->out && a->z_stride >= a->p->d_inner),
          "ssm_gate_norm: no input or output, or z_stride < d_inner");
    CHECK(be, f32_count(a->w, a->p->d_inner, true), "ssm_gate_norm: weight must be F32 [d_inner]");
    be->impl_ops->ssm_gate_norm(be, a);
}

/* ---- MoE ---- */

static void chk_moe_route(qr_backend *be, const float *logits, int64_t n_rows, const qr_moe_route_params *p,
                          int32_t *ids, float *weights) {
    CHECK(be, route_ok(p), "moe_route: bad expert counts or selection bias");
    CHECK(be, n_rows <= 0 || (logits && ids && weights), "moe_route: no logits or outputs");
    be->impl_ops->moe_route(be, logits, n_rows, p, ids, weights);
}

/* An expert matrix [n_expert][n_out][n_in] and its optional F32 [n_expert][n_out] bias. */
static bool expert_ok(qr_backend *be, const qr_weight *w, const qr_weight *bias, const char *what) {
    if (!w || w->ne[2] < 1 || w->ne[3] != 1 ||
        (bias && (bias->type != QR_TYPE_F32 || bias->ne[0] != w->ne[1] || bias->ne[1] < w->ne[2]))) {
        bad(be, QR_ERR_INVALID_ARG, "%s", what);
        return false;
    }
    return true;
}

/* What every expert matmul needs: the weight w, the routing and the rows. */
static bool moe_mm_ok(qr_backend *be, const qr_moe_matmul_args *a, const char *op, const char *bad_w) {
    if (!a || !expert_ok(be, a->w, a->w_b, bad_w) || !mm_type_ok(be, a->w, op)) {
        if (!a) bad(be, QR_ERR_INVALID_ARG, "%s: no arguments", op);
        return false;
    }
    if (a->n_rows > 0 && (!a->x || !a->ids || !a->y || a->n_used < 1)) {
        bad(be, QR_ERR_INVALID_ARG, "%s: no input, ids or output, or n_used < 1", op);
        return false;
    }
    return true;
}

static void chk_matmul_id(qr_backend *be, const qr_moe_matmul_args *a) {
    if (!moe_mm_ok(be, a, "matmul_id", "matmul_id: bad expert weight or bias")) return;
    be->impl_ops->matmul_id(be, a);
}

static void chk_moe_gate_up(qr_backend *be, const qr_moe_matmul_args *a) {
    if (!moe_mm_ok(be, a, "moe_gate_up", "moe_gate_up: bad up weight")) return;
    const qr_weight *g = a->gate, *u = a->w;
    if (g && (!expert_ok(be, g, a->gate_b, "moe_gate_up: bad gate weight") || !mm_type_ok(be, g, "moe_gate_up"))) return;
    CHECK(be, glu_ok(a->act) && (g || a->act == QR_GLU_RELU2) &&
                  (!g || (g->ne[0] == u->ne[0] && g->ne[1] == u->ne[1] && g->ne[2] == u->ne[2])),
          "moe_gate_up: gate and up shapes differ (or a gated act without gate)");
    be->impl_ops->moe_gate_up(be, a);
}

static void chk_moe_down_combine(qr_backend *be, const qr_moe_matmul_args *a) {
    if (!moe_mm_ok(be, a, "moe_down_combine", "moe_down_combine: bad expert weight or bias")) return;
    CHECK(be, a->n_rows <= 0 || (a->weights && a->scratch), "moe_down_combine: no weights or scratch");
    be->impl_ops->moe_down_combine(be, a);
}

static void chk_moe_combine(qr_backend *be, const float *y, const float *w, int64_t n_rows, int32_t n_used, int64_t dim,
                            const float *add, float *out) {
    CHECK(be, n_rows <= 0 || (y && w && out && n_used >= 1 && dim >= 1), "moe_combine: no input or output, or n_used < 1");
    be->impl_ops->moe_combine(be, y, w, n_rows, n_used, dim, add, out);
}

static void chk_glu(qr_backend *be, const float *g, const float *u, int64_t n, qr_glu_kind act, float *out) {
    CHECK(be, glu_ok(act) || act == QR_GLU_SIGMOID, "glu: unknown activation");
    CHECK(be, n <= 0 || (g && out && (u || act == QR_GLU_RELU2 || act == QR_GLU_SIGMOID)), "glu: no input or output");
    be->impl_ops->glu(be, g, u, n, act, out);
}

/* ---- Mamba2 ---- */

static void chk_ssm_conv(qr_backend *be, const float *x, int64_t x_stride, float *conv_state, const qr_weight *w,
                         const qr_weight *b, const qr_ssm_params *p, float *out) {
    CHECK(be, ssm_params_ok(p), "ssm_conv: bad shapes");
    CHECK(be, w && w->type == QR_TYPE_F32 && w->ne[0] == p->d_conv && w->ne[1] == p->conv_dim &&
                  f32_vec(b, p->conv_dim, true) && x_stride >= p->conv_dim,
          "ssm_conv: weight must be F32 [conv_dim][d_conv], bias F32 [conv_dim]");
    CHECK(be, x && conv_state && out, "ssm_conv: no input, state or output");
    be->impl_ops->ssm_conv(be, x, x_stride, conv_state, w, b, p, out);
}

static void chk_ssm_scan(qr_backend *be, const qr_ssm_scan_args *a) {
    CHECK(be, a && ssm_params_ok(a->p), "ssm_scan: bad shapes");
    const int64_t nh = a->p->n_head;
    CHECK(be, f32_count(a->A, nh, false) && f32_count(a->D, nh, true) && f32_count(a->dt_bias, nh, true),
          "ssm_scan: A, D and dt_bias must be F32 [n_head]");
    CHECK(be, a->state && a->xbc && a->dt && a->y && a->dt_stride >= nh, "ssm_scan: no input, state or output");
    be->impl_ops->ssm_scan(be, a);
}

/* ---- the table ---- */

/* Wraps slot `op` of o when the backend has it (NULL stays NULL: an optional op it lacks). */
#define WRAP(o, op)                   \
    do {                              \
        if ((o)->op) (o)->op = chk_##op; \
    } while (0)

void qr_backend_init(qr_backend *be, const char *name, const qr_backend_ops *ops, const qr_backend_caps *caps) {
    be->name = name;
    be->impl_ops = ops;
    be->caps = *caps;
    be->plan = (qr_plan_summary){0};
    qr_backend_ops *o = &be->checked;
    *o = *ops; /* the ops without checks (lifetime, memory, graphs, hints) run as they are */
    WRAP(o, kv_alloc);
    WRAP(o, kv_copy_block);
    WRAP(o, set_batch);
    WRAP(o, get_rows);
    WRAP(o, matmul);
    WRAP(o, rmsnorm);
    WRAP(o, layernorm);
    WRAP(o, rope);
    WRAP(o, kv_store);
    WRAP(o, attention);
    WRAP(o, swiglu);
    WRAP(o, geglu);
    WRAP(o, add);
    WRAP(o, mul);
    WRAP(o, scale);
    WRAP(o, softcap);
    WRAP(o, softmax);
    WRAP(o, copy);
    WRAP(o, copy_rows);
    WRAP(o, matmul_heads);
    WRAP(o, add_row);
    WRAP(o, add_rmsnorm);
    WRAP(o, matmul_multi);
    WRAP(o, matmul_glu);
    WRAP(o, matmul_act);
    WRAP(o, rope_attention);
    WRAP(o, mla_prep);
    WRAP(o, ssm_gate_norm);
    WRAP(o, moe_down_combine);
    WRAP(o, moe_route);
    WRAP(o, matmul_id);
    WRAP(o, moe_gate_up);
    WRAP(o, moe_combine);
    WRAP(o, glu);
    WRAP(o, ssm_conv);
    WRAP(o, ssm_scan);
    be->ops = o;
}
