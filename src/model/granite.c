/* granite.c — forward passes of granite (3.x: llama with multipliers) and granitehybrid (Granite
 * 4.0-H: Mamba2 and attention layers, per the per-layer head_count_kv, each followed by an FFN that
 * is MoE + shared expert or dense). llama.cpp's granite multipliers: embeddings *= embedding_scale,
 * each sub-block's output *= residual_scale before the residual add, q.k scaled by attention.scale,
 * logits /= logit_scale; rope only when rope.scaling.finetuned (default true). */
#include "model/hybrid.h"

/* x += residual_scale * ffn(rmsnorm(x)) for layer il (MoE or dense SwiGLU). */
static void granite_ffn(const qr_model *m, qr_fwd *f, int il, int64_t n) {
    const qr_hparams *hp = &m->hp;
    const qr_hparams_x *h = &m->ext->hp;
    qr_backend *be = f->be;
    const int64_t nx = n * hp->n_embd;
    be->ops->rmsnorm(be, f->x, &m->layers[il].ffn_norm, n, hp->n_embd, hp->norm_eps, f->xb);
    if (m->ext->layers[il].gate_inp.host) qr_block_moe(m, f, il);
    else qr_block_ffn(m, f, il, false);
    if (h->f_residual_scale != 0.0f) be->ops->scale(be, f->xb2, h->f_residual_scale, nx, f->xb2);
    be->ops->add(be, f->x, f->xb2, nx, f->x);
}

static void granite_forward(const qr_model *m, qr_fwd *f) {
    const qr_hparams *hp = &m->hp;
    const qr_hparams_x *h = &m->ext->hp;
    qr_backend *be = f->be;
    int64_t n = f->n_tokens;
    f->n_rows = f->n_tokens;
    f->outputs_kept = false;
    be->ops->get_rows(be, &m->tok_embd, f->x);
    if (h->f_embedding_scale != 0.0f) be->ops->scale(be, f->x, h->f_embedding_scale, n * hp->n_embd, f->x);
    for (int il = 0; il < hp->n_layer; il++) {
        const qr_layer *l = &m->layers[il];
        be->ops->rmsnorm(be, f->x, &l->attn_norm, n, hp->n_embd, hp->norm_eps, f->xb);
        if (m->ext->layers[il].kind == QR_LAYER_SSM) qr_block_mamba2(m, f, il);
        else qr_block_attention_x(m, f, il, h->use_rope, hp->attn_scale);
        if (il == hp->n_layer - 1) {
            qr_block_keep_outputs(m, f);
            n = f->n_rows;
            if (n == 0) break;
        }
        if (h->f_residual_scale != 0.0f) be->ops->scale(be, f->xb2, h->f_residual_scale, n * hp->n_embd, f->xb2);
        be->ops->add(be, f->x, f->xb2, n * hp->n_embd, f->x);
        granite_ffn(m, f, il, n);
    }
    qr_block_output(m, f);
    if (h->f_logit_scale != 0.0f && !f->embd && f->n_outputs > 0)
        be->ops->scale(be, f->logits, 1.0f / h->f_logit_scale, (int64_t)f->n_outputs * hp->n_vocab, f->logits);
}

void qr_granite_forward(const qr_model *m, qr_fwd *f) { granite_forward(m, f); }
void qr_granite_hybrid_forward(const qr_model *m, qr_fwd *f) { granite_forward(m, f); }
