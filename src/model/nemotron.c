/* nemotron.c — forward pass of nemotron (Nemotron-Mini, llama.cpp's llm_build_nemotron): LayerNorm
 * with weight and bias before attention, before the FFN and at the output; attention with optional
 * biases and NeoX rope on the first rope.dimension_count dims of each head (partial rotary); the FFN is
 * up -> relu^2 -> down, with optional biases. */
#include "model/model.h"

void qr_nemotron_forward(const qr_model *m, qr_fwd *f) {
    const qr_hparams *hp = &m->hp;
    qr_backend *be = f->be;
    int64_t n = f->n_tokens;
    f->n_rows = f->n_tokens;
    f->outputs_kept = false;
    if (qr_pipe_first(m)) be->ops->get_rows(be, &m->tok_embd, f->x); /* else x comes from the previous rank */
    for (int il = 0; il < hp->n_layer; il++) {
        const qr_layer *l = &m->layers[il];
        be->ops->layernorm(be, f->x, &l->attn_norm, &l->attn_norm_b, n, hp->n_embd, hp->norm_eps, f->xb);
        qr_block_attention_x(m, f, il, true, hp->attn_scale);
        if (il == hp->n_layer - 1 && qr_pipe_last(m)) {
            qr_block_keep_outputs(m, f);
            n = f->n_rows;
            if (n == 0) break;
        }
        be->ops->add(be, f->x, f->xb2, n * hp->n_embd, f->x);
        be->ops->layernorm(be, f->x, &l->ffn_norm, &l->ffn_norm_b, n, hp->n_embd, hp->norm_eps, f->xb);
        qr_block_ffn_relu2(m, f, il);
        be->ops->add(be, f->x, f->xb2, n * hp->n_embd, f->x);
    }
    /* output: LayerNorm (with bias) of the requested rows, then the head */
    if (f->n_outputs == 0 || !qr_pipe_last(m)) return;
    const float *src = f->x;
    if (!f->outputs_kept) {
        be->ops->gather_outputs(be, f->x, hp->n_embd, f->xo);
        src = f->xo;
    }
    be->ops->layernorm(be, src, &m->output_norm, m->output_norm_b.host ? &m->output_norm_b : NULL, f->n_outputs,
                       hp->n_embd, hp->norm_eps, f->xo);
    if (f->embd) return;
    be->ops->matmul(be, &m->output, f->xo, f->n_outputs, f->logits);
}
