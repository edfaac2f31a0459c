/* llama.c — forward pass of the llama family (Llama 2/3, Mistral, TinyLlama, SmolLM2; Mixtral with experts)
 * and of phi3 (Phi-3, Phi-4-mini: the same blocks with fused weights bound as views, NeoX rope, q scaled before
 * attention): pre-norm blocks, RMSNorm, GQA attention with the arch's rope, SwiGLU FFN or MoE. The Qwen family
 * runs through it too (arch.c rows): NeoX rope, with q/k/v biases (qwen2, qwen2moe) or per-head q/k norms
 * (qwen3, qwen3moe), which qr_block_attention applies where the layer has them, and experts (qwen3moe; qwen2moe
 * with a sigmoid-gated shared expert), which qr_block_ffn hands to qr_block_moe. */
#include "model/model.h"

void qr_llama_forward(const qr_model *m, qr_fwd *f) {
    const qr_hparams *hp = &m->hp;
    qr_backend *be = f->be;
    int64_t n = f->n_tokens, nx = n * hp->n_embd;

    f->n_rows = f->n_tokens;
    f->outputs_kept = false;
    if (qr_pipe_first(m)) be->ops->get_rows(be, &m->tok_embd, f->x); /* else x comes from the previous rank */ /* x = token embeddings */
    bool pending = false; /* the previous layer's FFN output (xb2) is still to be added to x */
    const float q_scale = m->arch->q_prescale ? hp->attn_scale : 1.0f;
    for (int il = 0; il < hp->n_layer; il++) {
        const qr_layer *l = &m->layers[il];
        /* x += attn(rmsnorm(x)), the previous residual add fused into the norm */
        qr_fused_add_rmsnorm(be, f->x, pending ? f->xb2 : NULL, 1.0f, &l->attn_norm, n, hp->n_embd, hp->norm_eps, f->xb,
                             &l->attn_q);
        pending = false;
        if (f->cap) qr_fwd_capture(m, f, il); /* EAGLE-3: x is this layer's input now */
        qr_block_attention(m, f, il, q_scale);
        if (il == hp->n_layer - 1 && qr_pipe_last(m) && !qr_fwd_capture_final(m, f)) { /* the rest: output rows only */
            qr_block_keep_outputs(m, f);
            n = f->n_rows;
            nx = n * hp->n_embd;
            if (n == 0) break;
        }
        /* x += ffn(rmsnorm(x)) */
        qr_ffn_norm(m, f, il, f->xb2, 1.0f, &l->ffn_norm, n, hp->norm_eps);
        qr_block_ffn(m, f, il, false);
        pending = true;
    }
    if (pending) be->ops->add(be, f->x, f->xb2, nx, f->x);
    if (f->cap) qr_fwd_capture(m, f, hp->n_layer); /* EAGLE-3: the final state before output_norm */
    qr_block_output(m, f); /* logits = output(rmsnorm(x)) of the requested rows */
}
