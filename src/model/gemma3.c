/* gemma3.c — forward pass of Gemma 3 and Gemma 2: embeddings scaled by sqrt(n_embd), pre- and post-norms
 * around attention and FFN, per-head q/k RMS norms (gemma3 only), NeoX rope (gemma3: a local base of 10000
 * on the sliding-window layers, the global base on every sw_pattern-th layer), q pre-scaled by the
 * attention scale (as llama.cpp does), GeGLU FFN; gemma2 softcaps the attention scores
 * (qr_attn_params.softcap) and the logits (qr_block_output). */
#include "model/model.h"

void qr_gemma3_forward(const qr_model *m, qr_fwd *f) {
    const qr_hparams *hp = &m->hp;
    qr_backend *be = f->be;
    int64_t n = f->n_tokens, nx = n * hp->n_embd;

    f->n_rows = f->n_tokens;
    f->outputs_kept = false;
    be->ops->get_rows(be, &m->tok_embd, f->x);
    be->ops->scale(be, f->x, hp->embd_scale, nx, f->x); /* x *= sqrt(n_embd) */
    for (int il = 0; il < hp->n_layer; il++) {
        const qr_layer *l = &m->layers[il];
        /* x += post_norm(attn(pre_norm(x))) */
        be->ops->rmsnorm(be, f->x, &l->attn_norm, n, hp->n_embd, hp->norm_eps, f->xb);
        qr_block_attention(m, f, il, hp->attn_scale);
        if (il == hp->n_layer - 1) { /* the rest of the last layer: output rows only */
            qr_block_keep_outputs(m, f);
            n = f->n_rows;
            nx = n * hp->n_embd;
            if (n == 0) break;
        }
        be->ops->rmsnorm(be, f->xb2, &l->attn_post_norm, n, hp->n_embd, hp->norm_eps, f->xb2);
        be->ops->add(be, f->x, f->xb2, nx, f->x);
        /* x += post_norm(ffn(pre_norm(x))) */
        be->ops->rmsnorm(be, f->x, &l->ffn_norm, n, hp->n_embd, hp->norm_eps, f->xb);
        qr_block_ffn(m, f, il, true);
        be->ops->rmsnorm(be, f->xb2, &l->ffn_post_norm, n, hp->n_embd, hp->norm_eps, f->xb2);
        be->ops->add(be, f->x, f->xb2, nx, f->x);
    }
    qr_block_output(m, f);
}
