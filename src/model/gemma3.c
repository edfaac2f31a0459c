/* gemma3.c — forward pass of the post-norm families: Gemma 3, Gemma 2, GLM-4 and OLMo 2 / OLMo 3. Each
 * sub-block's output goes through its own RMS norm before the residual add (post_attention_norm,
 * post_ffw_norm); the input norms are there when the layer has them (olmo2 has none: attention and FFN read
 * the residual stream itself). The arch row decides the rest: embeddings scaled by sqrt(n_embd) (gemma), per-head
 * q/k norms (gemma3) or norms over all heads (olmo2), q/k/v biases (glm4), the rope (gemma3: a local base of
 * 10000 on the sliding-window layers, the global base on every sw_pattern-th layer; olmo2's sliding-window
 * layers likewise without rope scaling), q pre-scaled by the attention scale (gemma, as llama.cpp does), GeGLU
 * (gemma) or SwiGLU FFN; gemma2 softcaps the attention scores (qr_attn_params.softcap) and the logits
 * (qr_block_output). */
#include "model/model.h"

/* x += rmsnorm(b) * post (b NULL: nothing pending), then f->xb = rmsnorm(x) * w, or a copy of x when the layer has
 * no such norm (olmo2). With a norm: one fused op where the backend has it (next: the weight that reads f->xb). */
static void post_pre_norm(const qr_model *m, qr_fwd *f, float *b, const qr_weight *post, const qr_weight *w,
                          const qr_weight *next, int64_t n) {
    qr_backend *be = f->be;
    const int64_t E = m->hp.n_embd;
    if (w->host) {
        if (b) qr_fused_post_add_rmsnorm(be, f->x, b, post, w, n, E, m->hp.norm_eps, f->xb, next);
        else qr_fused_add_rmsnorm(be, f->x, NULL, 1.0f, w, n, E, m->hp.norm_eps, f->xb, next);
        return;
    }
    if (b) {
        be->ops->rmsnorm(be, b, post, n, E, m->hp.norm_eps, b);
        be->ops->add(be, f->x, b, n * E, f->x);
    }
    be->ops->copy(be, f->x, n * E, f->xb);
}

void qr_gemma3_forward(const qr_model *m, qr_fwd *f) {
    const qr_hparams *hp = &m->hp;
    qr_backend *be = f->be;
    int64_t n = f->n_tokens, nx = n * hp->n_embd;

    f->n_rows = f->n_tokens;
    f->outputs_kept = false;
    if (qr_pipe_first(m)) { /* else x comes from the previous rank */
        be->ops->get_rows(be, &m->tok_embd, f->x);
        if (m->arch->scale_embd) be->ops->scale(be, f->x, hp->embd_scale, nx, f->x); /* x *= sqrt(n_embd) */
    }
    const float q_scale = m->arch->q_prescale ? hp->attn_scale : 1.0f;
    const qr_weight *pending = NULL; /* the previous layer's ffn_post_norm: its FFN output (xb2) still to add */
    for (int il = 0; il < hp->n_layer; il++) {
        const qr_layer *l = &m->layers[il];
        /* x += post_norm(attn(pre_norm(x))), the previous layer's x += post_norm(ffn) fused into the pre-norm */
        post_pre_norm(m, f, pending ? f->xb2 : NULL, pending, &l->attn_norm, &l->attn_q, n);
        pending = NULL;
        if (f->cap) qr_fwd_capture(m, f, il); /* EAGLE-3: x is this layer's input now */
        qr_block_attention(m, f, il, q_scale);
        if (il == hp->n_layer - 1 && qr_pipe_last(m) && !qr_fwd_capture_final(m, f)) { /* the rest: output rows only */
            qr_block_keep_outputs(m, f);
            n = f->n_rows;
            nx = n * hp->n_embd;
            if (n == 0) break;
        }
        /* x += post_norm(ffn(pre_norm(x))) */
        post_pre_norm(m, f, f->xb2, &l->attn_post_norm, &l->ffn_norm, qr_ffn_in(m, il), n);
        qr_block_ffn(m, f, il, m->arch->ffn_gelu);
        pending = &l->ffn_post_norm;
    }
    if (pending) {
        be->ops->rmsnorm(be, f->xb2, pending, n, hp->n_embd, hp->norm_eps, f->xb2);
        be->ops->add(be, f->x, f->xb2, nx, f->x);
    }
    if (f->cap) qr_fwd_capture(m, f, hp->n_layer); /* EAGLE-3: the final state before output_norm */
    qr_block_output(m, f);
}
