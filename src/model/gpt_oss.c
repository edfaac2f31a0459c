/* gpt_oss.c — forward pass of gpt-oss (llama.cpp's llm_build_openai_moe): pre-norm blocks; GQA
 * attention with q/k/v/o biases, NeoX rope (YaRN when the file says so), learned attention sinks and
 * a sliding window on every other layer; the FFN is an MoE (softmax over the top-k router logits,
 * experts with biases and the clamped SwiGLU) normed by post_attention_norm. Also the attention
 * block with those extras, shared by the granite and nemotron_h forward passes. */
#include "model/model.h"

void qr_block_attention_x(const qr_model *m, qr_fwd *f, int il, bool rope, float scale) {
    const qr_hparams *hp = &m->hp;
    const qr_layer *l = &m->layers[il];
    qr_backend *be = f->be;
    const int64_t n = f->n_tokens;
    /* q/k/v with their biases (one launch where the backend fuses them), then rope + K/V store */
    const qr_weight *qkv[3] = {&l->attn_q, &l->attn_k, &l->attn_v};
    const qr_weight *qkv_b[3] = {l->attn_q_b.host ? &l->attn_q_b : NULL, l->attn_k_b.host ? &l->attn_k_b : NULL,
                                 l->attn_v_b.host ? &l->attn_v_b : NULL};
    float *const qkv_out[3] = {f->q, f->k, f->v};
    qr_fused_matmul_multi(be, 3, qkv, qkv_b, f->xb, n, qkv_out);
    const qr_attn_params ap = {
        .n_head = hp->n_head,
        .n_head_kv = hp->n_head_kv,
        .head_dim_k = hp->head_dim_k,
        .head_dim_v = hp->head_dim_v,
        .scale = scale,
        .softcap = hp->attn_softcap,
        .window = l->swa ? hp->n_swa : 0,
        .sinks = l->attn_sinks.host ? &l->attn_sinks : NULL,
        .next = &l->attn_out,
    };
    if (rope) {
        const qr_rope_params rp = qr_layer_rope(m, f, il);
        qr_rope_store_attend(be, f->q, f->k, f->v, &rp, f->kv, il, &ap, n, 1.0f, NULL, NULL, 0.0f, f->att);
    } else {
        be->ops->kv_store(be, f->kv, il, f->k, f->v);
        be->ops->attention(be, f->kv, il, f->q, &ap, f->att);
    }
    const qr_weight *o = &l->attn_out, *o_b = l->attn_out_b.host ? &l->attn_out_b : NULL;
    qr_fused_matmul_multi(be, 1, &o, &o_b, f->att, n, &f->xb2);
    qr_tp_all_reduce(f, f->xb2, n * hp->n_embd); /* tensor parallelism: the ranks' partial sums */
}

void qr_gpt_oss_forward(const qr_model *m, qr_fwd *f) {
    const qr_hparams *hp = &m->hp;
    qr_backend *be = f->be;
    int64_t n = f->n_tokens;
    f->n_rows = f->n_tokens;
    f->outputs_kept = false;
    if (qr_pipe_first(m)) be->ops->get_rows(be, &m->tok_embd, f->x); /* else x comes from the previous rank */
    bool pending = false; /* the previous layer's MoE output (xb2) is still to be added to x */
    for (int il = 0; il < hp->n_layer; il++) {
        const qr_layer *l = &m->layers[il];
        /* x += moe (the previous layer's), xb = rmsnorm(x): one op where the backend fuses them */
        qr_fused_add_rmsnorm(be, f->x, pending ? f->xb2 : NULL, 1.0f, &l->attn_norm, n, hp->n_embd, hp->norm_eps,
                             f->xb, &l->attn_q);
        pending = false;
        qr_block_attention_x(m, f, il, true, hp->attn_scale);
        if (il == hp->n_layer - 1 && qr_pipe_last(m)) {
            qr_block_keep_outputs(m, f);
            n = f->n_rows;
            if (n == 0) break;
        }
        qr_ffn_norm(m, f, il, f->xb2, 1.0f, &l->attn_post_norm, n, hp->norm_eps);
        qr_block_moe(m, f, il);
        pending = true;
    }
    if (pending) be->ops->add(be, f->x, f->xb2, n * hp->n_embd, f->x);
    qr_block_output(m, f);
}
