/* moe.c — the MoE FFN block (router -> top-k -> fused expert gate+up+activation -> expert down ->
 * weighted sum, + the shared expert) with its counters, and the relu^2 dense FFN. Follows llama.cpp's
 * build_moe_ffn: weights are taken from the unbiased probabilities, normalised and scaled per arch
 * (the arch table), and the experts' outputs are summed in the order of selection; a shared expert's output
 * is added to them, multiplied first by its sigmoid gate where the layer has one (qwen2moe). */
#include <string.h>

#include "model/model.h"
#include "util/util.h"

/* Counts the experts each row was routed to (host ids; reads them back from non-CPU backends). */
static void count_selection(const qr_model *m, qr_fwd *f, int il, int64_t n) {
    qr_moe_scratch *x = &f->moe;
    const qr_hparams *h = &m->hp;
    if (!x->sel_counts) return;
    const int32_t *ids = x->ids;
    if (!f->be->caps.host_memory) {
        if (!f->stats_enabled || !x->ids_host) return; /* a device read is a sync: only when asked */
        f->be->ops->read(f->be, x->ids_host, x->ids, (size_t)n * (size_t)h->n_expert_used * sizeof(int32_t));
        ids = x->ids_host;
    }
    uint64_t *c = x->sel_counts + (int64_t)il * h->n_expert;
    for (int64_t i = 0; i < n * h->n_expert_used; i++)
        if (ids[i] >= 0 && ids[i] < h->n_expert) c[ids[i]]++;
}

const qr_weight *qr_ffn_in(const qr_model *m, int il) {
    const qr_layer *lx = &m->layers[il];
    if (!lx->gate_inp.host) return &lx->ffn_gate;
    if (lx->up_shexp.host) return lx->gate_shexp.host ? &lx->gate_shexp : &lx->up_shexp;
    return lx->gate_exps.host ? &lx->gate_exps : &lx->up_exps;
}

static qr_moe_route_params route_params(const qr_model *m, int il) {
    const qr_hparams *h = &m->hp;
    const qr_layer *lx = &m->layers[il];
    return (qr_moe_route_params){.n_expert = h->n_expert, .n_used = h->n_expert_used, .gating = h->gating,
                                 .norm = h->norm_w, .scale = h->w_scale,
                                 .sel_bias = lx->exp_probs_b.host ? &lx->exp_probs_b : NULL,
                                 .n_groups = h->n_expert_groups, .n_group_used = h->n_group_used};
}

void qr_ffn_norm(const qr_model *m, qr_fwd *f, int il, const float *b, float b_scale, const qr_weight *w, int64_t n,
                 float eps) {
    qr_backend *be = f->be;
    qr_moe_scratch *x = &f->moe;
    const qr_layer *lx = &m->layers[il];
    const int64_t E = m->hp.n_embd;
    x->routed_layer = -1;
    /* the fused op's routing is not timed on its own: with the MoE counters on, the plain ops run */
    if (lx->gate_inp.host && be->ops->add_rmsnorm && !f->stats_enabled) {
        const qr_moe_route_params rp = route_params(m, il);
        const qr_weight *gb = lx->gate_inp_b.host ? &lx->gate_inp_b : NULL;
        const qr_add_rmsnorm_args a = {.x = f->x, .b = b, .b_scale = b_scale, .w = w, .n_rows = n, .dim = E, .eps = eps,
                                       .y = f->xb, .next = qr_ffn_in(m, il), .router = &lx->gate_inp, .router_b = gb,
                                       .route = &rp, .logits = x->router, .ids = x->ids, .weights = x->weights};
        if (be->ops->add_rmsnorm(be, &a)) {
            x->routed_layer = il;
            return;
        }
    }
    qr_fused_add_rmsnorm(be, f->x, b, b_scale, w, n, E, eps, f->xb, qr_ffn_in(m, il));
}

void qr_block_moe(const qr_model *m, qr_fwd *f, int il) {
    const qr_hparams *h = &m->hp;
    const qr_layer *lx = &m->layers[il];
    qr_moe_scratch *x = &f->moe;
    qr_backend *be = f->be;
    const int64_t n = f->n_rows, E = m->hp.n_embd;
    const int32_t k = h->n_expert_used;
    const double t0 = qr_time_s();
    /* nothing below writes xb: the backend may keep its prepared activations for every matmul on it */
    if (be->ops->act_hold) be->ops->act_hold(be, f->xb, n, E);
    /* router (it writes only router / ids / weights: the shared expert below does not read them) */
    const double tr = qr_time_s();
    if (x->routed_layer != il) { /* else qr_ffn_norm's op routed with the norm */
        const qr_weight *gate_inp = &lx->gate_inp, *gate_inp_b = lx->gate_inp_b.host ? &lx->gate_inp_b : NULL;
        qr_fused_matmul_multi(be, 1, &gate_inp, &gate_inp_b, f->xb, n, &x->router);
        const qr_moe_route_params rp = route_params(m, il);
        be->ops->moe_route(be, x->router, n, &rp, x->ids, x->weights);
    }
    x->routed_layer = -1;
    const double t1 = qr_time_s();
    count_selection(m, f, il, n);
    /* the shared expert, into xb2 (it reads the normed input while the backend may still hold its
     * prepared activations: the norm's `next` hint); the routed experts' sum is added to it last,
     * shared + routed in the order llama.cpp adds them (routed + shared: the same bits). It runs after
     * the routing: a backend may then start the routed experts before the shared expert's last kernel
     * ends (the CUDA expert mat-vec reads its ids before its dependency wait when a kernel that waits
     * sits between it and the routing) */
    if (lx->up_shexp.host) {
        const int64_t S = h->n_ff_shexp;
        float *g = x->sh, *u = x->sh + (int64_t)f->n_batch * S;
        if (lx->gate_shexp.host && h->expert_act == QR_GLU_SWIGLU && be->ops->matmul_glu) {
            be->ops->matmul_glu(be, &lx->gate_shexp, &lx->up_shexp, f->xb, n, false, g, u);
        } else if (lx->gate_shexp.host) {
            be->ops->matmul(be, &lx->up_shexp, f->xb, n, u);
            be->ops->matmul(be, &lx->gate_shexp, f->xb, n, g);
            be->ops->glu(be, g, u, n * S, h->expert_act, g);
        } else if (be->ops->matmul_act) {
            be->ops->matmul_act(be, &lx->up_shexp, f->xb, n, QR_GLU_RELU2, g, u);
        } else {
            be->ops->matmul(be, &lx->up_shexp, f->xb, n, u);
            be->ops->glu(be, u, NULL, n * S, QR_GLU_RELU2, g);
        }
        if (lx->gate_inp_shexp.host) { /* qwen2moe: xb2 = down(...) * sigmoid(x . gate_inp_shexp) per row */
            float *gate = u; /* [n] free once the GLU has read it */
            be->ops->matmul(be, &lx->down_shexp, g, n, x->eo);
            be->ops->matmul(be, &lx->gate_inp_shexp, f->xb, n, gate);
            be->ops->glu(be, gate, NULL, n, QR_GLU_SIGMOID, gate);
            be->ops->moe_combine(be, x->eo, gate, n, 1, E, NULL, f->xb2); /* one product a value: ggml_mul's */
        } else {
            be->ops->matmul(be, &lx->down_shexp, g, n, f->xb2);
        }
    }
    /* experts: fused gate+up+act, then down, then the weighted sum (+ the shared expert's output) */
    const qr_moe_matmul_args gu = {.w = &lx->up_exps, .w_b = lx->up_exps_b.host ? &lx->up_exps_b : NULL,
                                   .gate = lx->gate_exps.host ? &lx->gate_exps : NULL,
                                   .gate_b = lx->gate_exps_b.host ? &lx->gate_exps_b : NULL, .act = h->expert_act,
                                   .x = f->xb, .ids = x->ids, .n_rows = n, .n_used = k, .y = x->eh};
    be->ops->moe_gate_up(be, &gu);
    const qr_weight *db = lx->down_exps_b.host ? &lx->down_exps_b : NULL;
    const float *add = lx->up_shexp.host ? f->xb2 : NULL;
    if (be->ops->moe_down_combine) {
        const qr_moe_matmul_args dc = {.w = &lx->down_exps, .w_b = db, .x = x->eh, .x_per_slot = true, .ids = x->ids,
                                       .n_rows = n, .n_used = k, .y = f->xb2, .weights = x->weights, .add = add,
                                       .scratch = x->eo};
        be->ops->moe_down_combine(be, &dc);
    } else {
        const qr_moe_matmul_args dn = {.w = &lx->down_exps, .w_b = db, .x = x->eh, .x_per_slot = true, .ids = x->ids,
                                       .n_rows = n, .n_used = k, .y = x->eo};
        be->ops->matmul_id(be, &dn);
        be->ops->moe_combine(be, x->eo, x->weights, n, k, E, add, f->xb2);
    }
    if (be->ops->act_hold) be->ops->act_hold(be, NULL, 0, 0);
    qr_tp_all_reduce(f, f->xb2, n * E); /* tensor parallelism: the ranks' partial sums */
    f->stats.moe_layer_calls++;
    f->stats.moe_routing_seconds += t1 - tr;
    f->stats.moe_layer_seconds += qr_time_s() - t0;
}

void qr_block_ffn_relu2(const qr_model *m, qr_fwd *f, int il) {
    const qr_layer *l = &m->layers[il];
    qr_backend *be = f->be;
    const int64_t n = f->n_rows, F = l->ffn_up.ne[1];
    be->ops->matmul(be, &l->ffn_up, f->xb, n, f->ff_g);
    if (l->ffn_up_b.host) be->ops->add_row(be, f->ff_g, &l->ffn_up_b, 0, n, f->ff_g);
    be->ops->glu(be, f->ff_g, NULL, n * F, QR_GLU_RELU2, f->ff_g);
    be->ops->matmul(be, &l->ffn_down, f->ff_g, n, f->xb2);
    if (l->ffn_down_b.host) be->ops->add_row(be, f->xb2, &l->ffn_down_b, 0, n, f->xb2);
    qr_tp_all_reduce(f, f->xb2, n * m->hp.n_embd);
}
