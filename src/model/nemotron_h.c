/* nemotron_h.c — forward pass of nemotron_h and nemotron_h_moe (Nemotron-H, Nemotron-3-Nano): every
 * block is one of a Mamba2 mixer, an attention layer (no rope) or an FFN (relu^2 up/down, or an MoE
 * with sigmoid routing, a selection bias and a relu^2 shared expert), chosen per layer from the
 * per-layer head_count_kv / feed_forward_length, each as x += block(rmsnorm(x)). */
#include "model/model.h"

/* The first weight that multiplies layer il's normed input (the fused norm's hint). */
static const qr_weight *block_in(const qr_model *m, int il) {
    const qr_layer *l = &m->layers[il];
    if (l->kind == QR_LAYER_SSM) return &l->ssm_in;
    if (l->kind == QR_LAYER_ATTN) return &l->attn_q;
    if (l->gate_inp.host) return l->up_shexp.host ? &l->up_shexp : &l->up_exps;
    return &l->ffn_up;
}

void qr_nemotron_h_forward(const qr_model *m, qr_fwd *f) {
    const qr_hparams *hp = &m->hp;
    qr_backend *be = f->be;
    int64_t n = f->n_tokens;
    f->n_rows = f->n_tokens;
    f->outputs_kept = false;
    if (qr_pipe_first(m)) be->ops->get_rows(be, &m->tok_embd, f->x); /* else x comes from the previous rank */
    bool pending = false; /* the previous block's output (xb2) is still to be added to x */
    for (int il = 0; il < hp->n_layer; il++) {
        const qr_layer *l = &m->layers[il];
        /* x += the previous block's output, xb = rmsnorm(x): one op where the backend fuses them */
        qr_fused_add_rmsnorm(be, f->x, pending ? f->xb2 : NULL, 1.0f, &l->attn_norm, n, hp->n_embd,
                             hp->norm_eps, f->xb, block_in(m, il));
        pending = false;
        if (l->kind == QR_LAYER_SSM) qr_block_mamba2(m, f, il);
        else if (l->kind == QR_LAYER_ATTN) qr_block_attention_x(m, f, il, false, hp->attn_scale);
        else if (l->gate_inp.host) qr_block_moe(m, f, il);
        else qr_block_ffn_relu2(m, f, il);
        if (il == hp->n_layer - 1 && qr_pipe_last(m)) {
            qr_block_keep_outputs(m, f);
            n = f->n_rows;
            if (n == 0) break;
        }
        pending = true;
    }
    if (pending) be->ops->add(be, f->x, f->xb2, n * hp->n_embd, f->x);
    qr_block_output(m, f);
}
