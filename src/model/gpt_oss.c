/* gpt_oss.c — forward pass of gpt-oss (llama.cpp's llm_build_openai_moe): pre-norm blocks; GQA
 * attention with q/k/v/o biases, NeoX rope (YaRN when the file says so), learned attention sinks and
 * a sliding window on every other layer; the FFN is an MoE (softmax over the top-k router logits,
 * experts with biases and the clamped SwiGLU) normed by post_attention_norm. Also the attention
 * block with those extras, shared by the granite and nemotron_h forward passes. */
#include "model/hybrid.h"

void qr_block_attention_x(const qr_model *m, qr_fwd *f, int il, bool rope, float scale) {
    const qr_hparams *hp = &m->hp;
    const qr_layer *l = &m->layers[il];
    const qr_layer_x *lx = &m->ext->layers[il];
    qr_backend *be = f->be;
    const int64_t n = f->n_tokens;
    be->ops->matmul(be, &l->attn_q, f->xb, n, f->q);
    be->ops->matmul(be, &l->attn_k, f->xb, n, f->k);
    be->ops->matmul(be, &l->attn_v, f->xb, n, f->v);
    if (lx->q_b.host) be->ops->add_row(be, f->q, &lx->q_b, 0, n, f->q);
    if (lx->k_b.host) be->ops->add_row(be, f->k, &lx->k_b, 0, n, f->k);
    if (lx->v_b.host) be->ops->add_row(be, f->v, &lx->v_b, 0, n, f->v);
    if (rope) {
        const qr_rope_params rp = qr_layer_rope(m, il);
        be->ops->rope(be, f->q, hp->n_head, hp->head_dim_k, &rp);
        be->ops->rope(be, f->k, hp->n_head_kv, hp->head_dim_k, &rp);
    }
    be->ops->kv_store(be, f->kv, il, f->k, f->v);
    const qr_attn_params ap = {
        .n_head = hp->n_head,
        .n_head_kv = hp->n_head_kv,
        .head_dim_k = hp->head_dim_k,
        .head_dim_v = hp->head_dim_v,
        .scale = scale,
        .softcap = hp->attn_softcap,
        .window = l->swa ? hp->n_swa : 0,
        .sinks = lx->attn_sinks.host ? &lx->attn_sinks : NULL,
    };
    be->ops->attention(be, f->kv, il, f->q, &ap, f->att);
    be->ops->matmul(be, &l->attn_out, f->att, n, f->xb2);
    if (lx->o_b.host) be->ops->add_row(be, f->xb2, &lx->o_b, 0, n, f->xb2);
}

void qr_gpt_oss_forward(const qr_model *m, qr_fwd *f) {
    const qr_hparams *hp = &m->hp;
    qr_backend *be = f->be;
    int64_t n = f->n_tokens, nx = n * hp->n_embd;
    f->n_rows = f->n_tokens;
    f->outputs_kept = false;
    be->ops->get_rows(be, &m->tok_embd, f->x);
    for (int il = 0; il < hp->n_layer; il++) {
        const qr_layer *l = &m->layers[il];
        be->ops->rmsnorm(be, f->x, &l->attn_norm, n, hp->n_embd, hp->norm_eps, f->xb);
        qr_block_attention_x(m, f, il, true, hp->attn_scale);
        if (il == hp->n_layer - 1) {
            qr_block_keep_outputs(m, f);
            n = f->n_rows;
            nx = n * hp->n_embd;
            if (n == 0) break;
        }
        be->ops->add(be, f->x, f->xb2, nx, f->x);
        be->ops->rmsnorm(be, f->x, &l->attn_post_norm, n, hp->n_embd, hp->norm_eps, f->xb);
        qr_block_moe(m, f, il);
        be->ops->add(be, f->x, f->xb2, nx, f->x);
    }
    qr_block_output(m, f);
}
