/* llama.c — forward pass of the llama family (Llama 2/3, Mistral, TinyLlama, SmolLM2):
 * pre-norm blocks, RMSNorm, GQA attention with normal (adjacent-pair) rope, SwiGLU FFN. */
#include "model/model.h"

void qr_llama_forward(const qr_model *m, qr_fwd *f) {
    const qr_hparams *hp = &m->hp;
    qr_backend *be = f->be;
    int64_t n = f->n_tokens, nx = n * hp->n_embd;

    f->n_rows = f->n_tokens;
    f->outputs_kept = false;
    be->ops->get_rows(be, &m->tok_embd, f->x); /* x = token embeddings */
    for (int il = 0; il < hp->n_layer; il++) {
        const qr_layer *l = &m->layers[il];
        /* x += attn(rmsnorm(x)) */
        be->ops->rmsnorm(be, f->x, &l->attn_norm, n, hp->n_embd, hp->norm_eps, f->xb);
        qr_block_attention(m, f, il, 1.0f);
        if (il == hp->n_layer - 1) { /* the rest of the last layer: output rows only */
            qr_block_keep_outputs(m, f);
            n = f->n_rows;
            nx = n * hp->n_embd;
            if (n == 0) break;
        }
        be->ops->add(be, f->x, f->xb2, nx, f->x);
        /* x += ffn(rmsnorm(x)) */
        be->ops->rmsnorm(be, f->x, &l->ffn_norm, n, hp->n_embd, hp->norm_eps, f->xb);
        qr_block_ffn(m, f, il, false);
        be->ops->add(be, f->x, f->xb2, nx, f->x);
    }
    qr_block_output(m, f); /* logits = output(rmsnorm(x)) of the requested rows */
}
