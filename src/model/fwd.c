/* fwd.c — the per-context forward state (qr_fwd): the activation buffers of every architecture, the
 * MoE block's and the Mamba2 mixer's scratch and the per-sequence SSM state, sized from the model's
 * hyper-parameters for n_batch rows. */
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "util/util.h"

void qr_fwd_free(qr_backend *be, qr_fwd *f) {
    float *bufs[] = {f->x, f->xb, f->xb2, f->q, f->k, f->v, f->att, f->ff_g, f->ff_u, f->xo, f->logits,
                     f->moe.router, f->moe.weights, f->moe.eh, f->moe.eo, f->moe.sh,
                     f->mamba.zxbcdt, f->mamba.xbc, f->mamba.y, f->mla.q, f->mla.q_a, f->mla.kv_a, f->mla.pe,
                     f->mla.o, f->cap, f->e3.in, f->e3.g, f->e3.pre};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) be->ops->free(be, bufs[i]);
    if (f->moe.ids) be->ops->free(be, f->moe.ids);
    qr_ssm_state_free(f->mamba.ssm);
    free(f->moe.sel_counts);
    free(f->moe.ids_host);
    qr_kv_storage *kv = f->kv;
    memset(f, 0, sizeof *f);
    f->be = be;
    f->kv = kv;
    f->moe.routed_layer = -1;
}

bool qr_fwd_capture_final(const qr_model *m, const qr_fwd *f) {
    for (int32_t i = 0; f->cap && i < f->n_cap; i++)
        if (f->cap_layers[i] == m->hp.n_layer) return true;
    return false;
}

void qr_fwd_capture(const qr_model *m, qr_fwd *f, int il) {
    const int64_t E = m->hp.n_embd, width = (int64_t)f->n_cap * E;
    for (int32_t i = 0; f->cap && i < f->n_cap; i++)
        if (f->cap_layers[i] == il) f->be->ops->copy_rows(f->be, f->x, E, f->cap + i * E, width, f->n_tokens, E);
}

/* The MoE scratch and counters (experts) and the Mamba2 scratch and state (SSM layers). */
static qr_status alloc_blocks(const qr_model *m, qr_backend *be, int32_t n_seq_max, qr_fwd *f, char *err,
                              size_t err_len) {
    const qr_hparams *h = &m->hp;
    const int64_t nb = f->n_batch, E = h->n_embd, fs = sizeof(float);
    bool ok = true;
    if (h->n_expert > 0) {
        qr_moe_scratch *x = &f->moe;
        const int64_t k = h->n_expert_used, F = h->n_ff_exp;
        x->router = be->ops->alloc(be, (size_t)(nb * h->n_expert * fs));
        x->ids = be->ops->alloc(be, (size_t)(nb * k) * sizeof(int32_t));
        x->weights = be->ops->alloc(be, (size_t)(nb * k * fs));
        x->eh = be->ops->alloc(be, (size_t)(nb * k * F * fs));
        x->eo = be->ops->alloc(be, (size_t)(nb * k * E * fs));
        if (h->n_ff_shexp > 0) x->sh = be->ops->alloc(be, (size_t)(2 * nb * h->n_ff_shexp * fs));
        x->sel_counts = calloc((size_t)h->n_layer * (size_t)h->n_expert, sizeof(uint64_t));
        x->ids_host = malloc((size_t)(nb * k) * sizeof(int32_t));
        ok = x->router && x->ids && x->weights && x->eh && x->eo && (h->n_ff_shexp == 0 || x->sh) && x->sel_counts &&
             x->ids_host;
        f->stats.n_layer = h->n_layer;
        f->stats.n_expert = h->n_expert;
        f->stats.expert_selection = x->sel_counts;
    }
    if (ok && h->kv_lora > 0) { /* multi-head latent attention */
        qr_mla_scratch *x = &f->mla;
        x->q = be->ops->alloc(be, (size_t)(nb * h->n_head * h->head_dim_k_mla * fs));
        if (h->q_lora > 0) x->q_a = be->ops->alloc(be, (size_t)(nb * h->q_lora * fs));
        x->kv_a = be->ops->alloc(be, (size_t)(nb * (h->kv_lora + h->n_rot) * fs));
        x->pe = be->ops->alloc(be, (size_t)(nb * h->n_head * h->n_rot * fs));
        x->o = be->ops->alloc(be, (size_t)(nb * h->n_head * h->head_dim_v_mla * fs));
        ok = x->q && (h->q_lora == 0 || x->q_a) && x->kv_a && x->pe && x->o;
    }
    if (ok && h->has_ssm) {
        qr_mamba_scratch *x = &f->mamba;
        const qr_ssm_params *p = &h->ssm;
        const int64_t d_in_proj = 2 * (int64_t)p->d_inner + 2 * (int64_t)p->n_group * p->d_state + p->n_head;
        x->zxbcdt = be->ops->alloc(be, (size_t)(nb * d_in_proj * fs));
        x->xbc = be->ops->alloc(be, (size_t)(nb * p->conv_dim * fs));
        x->y = be->ops->alloc(be, (size_t)(nb * p->d_inner * fs));
        bool *is_ssm = calloc((size_t)h->n_layer, sizeof(bool));
        ok = x->zxbcdt && x->xbc && x->y && is_ssm;
        if (ok) {
            for (int il = 0; il < h->n_layer; il++) is_ssm[il] = m->layers[il].kind == QR_LAYER_SSM;
            const qr_status st = qr_ssm_state_create(be, h->n_layer, is_ssm, p, n_seq_max, &x->ssm, err, err_len);
            free(is_ssm);
            if (st != QR_OK) return st;
            f->stats.ssm_state_bytes = qr_ssm_state_bytes(x->ssm);
        } else {
            free(is_ssm);
        }
    }
    if (!ok)
        return qr_errf(err, err_len, QR_ERR_NOMEM, "context: cannot allocate the MoE / SSM / MLA buffers for n_batch %d",
                       f->n_batch);
    return QR_OK;
}

qr_status qr_fwd_alloc(const qr_model *m, qr_backend *be, int32_t n_batch, int32_t n_seq_max, qr_fwd *f, char *err,
                       size_t err_len) {
    const qr_hparams *hp = &m->hp;
    const size_t nb = (size_t)n_batch, fs = sizeof(float);
    const size_t kdim = (size_t)hp->n_head_kv * hp->head_dim_k, vdim = (size_t)hp->n_head_kv * hp->head_dim_v;
    f->be = be;
    f->n_batch = n_batch;
    f->moe.routed_layer = -1;
    f->x = be->ops->alloc(be, nb * hp->n_embd * fs);
    /* an EAGLE-3 head's attention reads [normed embedding | normed g] rows from xb: twice the width */
    f->xb = be->ops->alloc(be, nb * hp->n_embd * fs * (m->arch->spec_head ? 2 : 1));
    f->xb2 = be->ops->alloc(be, nb * hp->n_embd * fs);
    f->q = be->ops->alloc(be, nb * hp->n_head * hp->head_dim_k * fs);
    f->k = be->ops->alloc(be, nb * kdim * fs);
    f->v = be->ops->alloc(be, nb * vdim * fs);
    f->att = be->ops->alloc(be, nb * hp->n_head * hp->head_dim_v * fs);
    f->ff_g = be->ops->alloc(be, nb * hp->n_ff * fs);
    f->ff_u = be->ops->alloc(be, nb * hp->n_ff * fs);
    qr_status st = QR_OK;
    bool e3_ok = true;
    if (m->arch->spec_head) {
        const size_t w3 = 3 * (size_t)hp->eagle3_target_embd, in_w = w3 > (size_t)hp->n_embd ? w3 : (size_t)hp->n_embd;
        f->e3.in = be->ops->alloc(be, nb * in_w * fs);
        f->e3.g = be->ops->alloc(be, nb * hp->n_embd * fs);
        f->e3.pre = be->ops->alloc(be, nb * hp->n_embd * fs);
        e3_ok = f->e3.in && f->e3.g && f->e3.pre;
    }
    if (!f->x || !f->xb || !f->xb2 || !f->q || !f->k || !f->v || !f->att || !f->ff_g || !f->ff_u || !e3_ok)
        st = qr_errf(err, err_len, QR_ERR_NOMEM, "context: cannot allocate activation buffers for n_batch %d", n_batch);
    else
        st = alloc_blocks(m, be, n_seq_max, f, err, err_len);
    if (st != QR_OK) qr_fwd_free(be, f);
    return st;
}
