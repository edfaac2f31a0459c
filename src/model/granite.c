/* granite.c — forward passes of granite (3.x: llama with multipliers) and granitehybrid (Granite
 * 4.0-H: Mamba2 and attention layers, per the per-layer head_count_kv, each followed by an FFN that
 * is MoE + shared expert or dense). llama.cpp's granite multipliers: embeddings *= embedding_scale,
 * each sub-block's output *= residual_scale before the residual add, q.k scaled by attention.scale,
 * logits /= logit_scale; rope only when rope.scaling.finetuned (default true). */
#include "model/model.h"

/* The first weight that multiplies a layer's normed input (the fused norm's hint). */
static const qr_weight *mixer_in(const qr_model *m, int il) {
    return m->layers[il].kind == QR_LAYER_SSM ? &m->layers[il].ssm_in : &m->layers[il].attn_q;
}

/* Each sub-block's output (xb2) is scaled by residual_scale and added to x inside the next norm
 * (scale, add, rmsnorm and the next matmul's activation quantization in one op where the backend
 * fuses them), as llama.cpp's x + residual_scale * block(x) with the same roundings. */
static void granite_forward(const qr_model *m, qr_fwd *f) {
    const qr_hparams *hp = &m->hp;
    const qr_hparams *h = &m->hp;
    qr_backend *be = f->be;
    int64_t n = f->n_tokens;
    const float rs = h->f_residual_scale != 0.0f ? h->f_residual_scale : 1.0f;
    f->n_rows = f->n_tokens;
    f->outputs_kept = false;
    if (qr_pipe_first(m)) { /* else x comes from the previous rank */
        be->ops->get_rows(be, &m->tok_embd, f->x);
        if (h->f_embedding_scale != 0.0f) be->ops->scale(be, f->x, h->f_embedding_scale, n * hp->n_embd, f->x);
    }
    bool pending = false; /* the previous FFN's output (xb2) is still to be added to x */
    for (int il = 0; il < hp->n_layer; il++) {
        const qr_layer *l = &m->layers[il];
        qr_fused_add_rmsnorm(be, f->x, pending ? f->xb2 : NULL, rs, &l->attn_norm, n, hp->n_embd, hp->norm_eps, f->xb,
                             mixer_in(m, il));
        if (l->kind == QR_LAYER_SSM) qr_block_mamba2(m, f, il);
        else qr_block_attention_x(m, f, il, h->use_rope, hp->attn_scale);
        if (il == hp->n_layer - 1 && qr_pipe_last(m)) {
            qr_block_keep_outputs(m, f);
            n = f->n_rows;
            if (n == 0) break;
        }
        qr_ffn_norm(m, f, il, f->xb2, rs, &l->ffn_norm, n, hp->norm_eps);
        if (l->gate_inp.host) qr_block_moe(m, f, il);
        else qr_block_ffn(m, f, il, false);
        pending = true;
    }
    if (pending && n > 0) {
        if (rs != 1.0f) be->ops->scale(be, f->xb2, rs, n * hp->n_embd, f->xb2);
        be->ops->add(be, f->x, f->xb2, n * hp->n_embd, f->x);
    }
    qr_block_output(m, f);
    if (h->f_logit_scale != 0.0f && !f->embd && f->n_outputs > 0 && qr_pipe_last(m))
        be->ops->scale(be, f->logits, 1.0f / h->f_logit_scale, (int64_t)f->n_outputs * qr_model_n_logits(m), f->logits);
}

void qr_granite_forward(const qr_model *m, qr_fwd *f) { granite_forward(m, f); }
void qr_granite_hybrid_forward(const qr_model *m, qr_fwd *f) { granite_forward(m, f); }
