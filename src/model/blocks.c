/* blocks.c — building blocks shared by the forward passes: self-attention over the paged cache,
 * the gated FFN and the output head. Each is a straight sequence of backend ops on qr_fwd buffers. */
#include "model/model.h"

const qr_weight *qr_rope_factors(const qr_model *m, int32_t n_ctx_seq) {
    if (m->rope_freqs.host) return &m->rope_freqs;
    if (m->rope_long.host && n_ctx_seq > m->hp.n_ctx_orig) return &m->rope_long;
    return m->rope_short.host ? &m->rope_short : NULL;
}

qr_rope_params qr_layer_rope(const qr_model *m, const qr_fwd *f, int il) {
    const qr_hparams *hp = &m->hp;
    const bool swa = m->layers[il].swa;
    /* sliding-window layers of gemma3 and olmo2 (OLMo 3) use their own base and no scaling (llama.cpp's *_swa
     * values); for llama (Mistral) and gemma2 they rope as the others */
    const bool own = swa && m->arch->swa_plain_rope;
    return (qr_rope_params){
        .mode = m->arch->rope_mode,
        .n_rot = hp->n_rot,
        .freq_base = own ? hp->rope_base_swa : hp->rope_base,
        .freq_scale = own ? 1.0f : hp->rope_scale,
        .freq_factors = f ? f->rope_factors : qr_rope_factors(m, hp->n_ctx_train),
        .ext_factor = own ? 0.0f : hp->yarn_ext_factor,
        .attn_factor = own ? 1.0f : hp->yarn_attn_factor,
        .beta_fast = hp->yarn_beta_fast,
        .beta_slow = hp->yarn_beta_slow,
        .n_ctx_orig = hp->n_ctx_orig,
    };
}

/* ---- fused ops: the backend's when it has them, else the plain ops they stand for ---- */

void qr_fused_add_rmsnorm(qr_backend *be, float *x, const float *b, float b_scale, const qr_weight *w, int64_t n_rows,
                          int64_t dim, float eps, float *y, const qr_weight *next) {
    if (be->ops->add_rmsnorm) {
        const qr_add_rmsnorm_args a = {.x = x, .b = b, .b_scale = b_scale, .w = w, .n_rows = n_rows, .dim = dim,
                                       .eps = eps, .y = y, .next = next};
        be->ops->add_rmsnorm(be, &a); /* the unrouted form is always taken */
        return;
    }
    if (b && b_scale != 1.0f) { /* y is free until the norm writes it */
        be->ops->scale(be, b, b_scale, n_rows * dim, y);
        b = y;
    }
    if (b) be->ops->add(be, x, b, n_rows * dim, x);
    be->ops->rmsnorm(be, x, w, n_rows, dim, eps, y);
}

void qr_fused_post_add_rmsnorm(qr_backend *be, float *x, float *b, const qr_weight *b_norm, const qr_weight *w,
                               int64_t n_rows, int64_t dim, float eps, float *y, const qr_weight *next) {
    if (be->ops->add_rmsnorm) {
        const qr_add_rmsnorm_args a = {.x = x, .b = b, .b_scale = 1.0f, .b_norm = b_norm, .w = w, .n_rows = n_rows,
                                       .dim = dim, .eps = eps, .y = y, .next = next};
        if (be->ops->add_rmsnorm(be, &a)) return;
    }
    be->ops->rmsnorm(be, b, b_norm, n_rows, dim, eps, b);
    qr_fused_add_rmsnorm(be, x, b, 1.0f, w, n_rows, dim, eps, y, next);
}

void qr_fused_matmul_multi(qr_backend *be, int32_t n_w, const qr_weight *const *w, const qr_weight *const *b,
                           const float *x, int64_t n_rows, float *const *y) {
    if (be->ops->matmul_multi) {
        be->ops->matmul_multi(be, n_w, w, b, x, n_rows, y);
        return;
    }
    for (int32_t i = 0; i < n_w; i++) {
        be->ops->matmul(be, w[i], x, n_rows, y[i]);
        if (b && b[i]) be->ops->add_row(be, y[i], b[i], 0, n_rows, y[i]);
    }
}

void qr_fused_rope_kv_store(qr_backend *be, float *q, float *k, const float *v, int32_t n_head, int32_t n_head_kv,
                                int32_t head_dim, const qr_rope_params *rope, qr_kv_storage *kv, int32_t layer) {
    if (be->ops->rope_attention) {
        const qr_attn_params heads = {.n_head = n_head, .n_head_kv = n_head_kv, .head_dim_k = head_dim};
        const qr_rope_attn_args a = {.q = q, .k = k, .v = v, .rope = rope, .kv = kv, .layer = layer, .attn = &heads};
        be->ops->rope_attention(be, &a); /* without out: always taken */
        return;
    }
    be->ops->rope(be, q, n_head, head_dim, rope);
    be->ops->rope(be, k, n_head_kv, head_dim, rope);
    be->ops->kv_store(be, kv, layer, k, v);
}

void qr_rope_store_attend(qr_backend *be, float *q, float *k, const float *v, const qr_rope_params *rope,
                          qr_kv_storage *kv, int32_t layer, const qr_attn_params *p, int64_t n_tok, float q_scale,
                          const qr_weight *q_norm, const qr_weight *k_norm, float eps, float *out) {
    qr_rope_attn_args a = {.q = q, .k = k, .v = v, .rope = rope, .kv = kv, .layer = layer, .attn = p, .out = out,
                           .q_scale = q_scale, .q_norm = q_norm, .k_norm = k_norm, .norm_eps = eps};
    if (be->ops->rope_attention && be->ops->rope_attention(be, &a)) return;
    if (q_norm) { /* declined with the per-head norms: the norms as their own ops, then without them */
        be->ops->rmsnorm(be, q, q_norm, n_tok * p->n_head, p->head_dim_k, eps, q);
        be->ops->rmsnorm(be, k, k_norm, n_tok * p->n_head_kv, p->head_dim_k, eps, k);
        a.q_norm = a.k_norm = NULL;
        if (be->ops->rope_attention && be->ops->rope_attention(be, &a)) return;
    }
    qr_fused_rope_kv_store(be, q, k, v, p->n_head, p->n_head_kv, p->head_dim_k, rope, kv, layer);
    if (q_scale != 1.0f) be->ops->scale(be, q, q_scale, n_tok * p->n_head * p->head_dim_k, q);
    be->ops->attention(be, kv, layer, q, p, out);
}

void qr_block_attention(const qr_model *m, qr_fwd *f, int il, float q_scale) {
    if (m->hp.kv_lora > 0) { /* deepseek2's multi-head latent attention (mla.c) */
        qr_block_mla(m, f, il);
        return;
    }
    const qr_hparams *hp = &m->hp;
    const qr_layer *l = &m->layers[il];
    qr_backend *be = f->be;
    const int64_t n = f->n_tokens;

    const qr_weight *qkv[3] = {&l->attn_q, &l->attn_k, &l->attn_v};
    const qr_weight *qkv_b[3] = {l->attn_q_b.host ? &l->attn_q_b : NULL, l->attn_k_b.host ? &l->attn_k_b : NULL,
                                 l->attn_v_b.host ? &l->attn_v_b : NULL}; /* qwen2 */
    float *const qkv_out[3] = {f->q, f->k, f->v};
    qr_fused_matmul_multi(be, 3, qkv, l->attn_q_b.host || l->attn_k_b.host || l->attn_v_b.host ? qkv_b : NULL, f->xb,
                          n, qkv_out);
    /* q/k RMS norms: per head (rows of head_dim: with the rope below, where the backend fuses them), or over all
     * heads of a row (olmo2: the norm's width) */
    const bool head_norms = l->attn_q_norm.host && l->attn_k_norm.host && l->attn_q_norm.ne[0] == hp->head_dim_k &&
                            l->attn_k_norm.ne[0] == hp->head_dim_k;
    if (l->attn_q_norm.host && !head_norms) {
        const int64_t w = l->attn_q_norm.ne[0];
        be->ops->rmsnorm(be, f->q, &l->attn_q_norm, n * hp->n_head * hp->head_dim_k / w, w, hp->norm_eps, f->q);
    }
    if (l->attn_k_norm.host && !head_norms) {
        const int64_t w = l->attn_k_norm.ne[0];
        be->ops->rmsnorm(be, f->k, &l->attn_k_norm, n * hp->n_head_kv * hp->head_dim_k / w, w, hp->norm_eps, f->k);
    }

    const qr_rope_params rope = qr_layer_rope(m, f, il);
    const qr_attn_params ap = {
        .n_head = hp->n_head,
        .n_head_kv = hp->n_head_kv,
        .head_dim_k = hp->head_dim_k,
        .head_dim_v = hp->head_dim_v,
        .scale = q_scale != 1.0f ? 1.0f : hp->attn_scale,
        .softcap = hp->attn_softcap,
        .window = l->swa ? hp->n_swa : 0,
        .next = &l->attn_out,
    };
    /* q scaled between rope and attention where q_scale != 1 (gemma's query_pre_attn_scalar, phi3) */
    qr_rope_store_attend(be, f->q, f->k, f->v, &rope, f->kv, il, &ap, n, q_scale, head_norms ? &l->attn_q_norm : NULL,
                         head_norms ? &l->attn_k_norm : NULL, hp->norm_eps, f->att);
    const qr_weight *o = &l->attn_out, *o_b = &l->attn_out_b;
    if (o_b->host) qr_fused_matmul_multi(be, 1, &o, &o_b, f->att, n, &f->xb2);
    else be->ops->matmul(be, o, f->att, n, f->xb2);
    qr_tp_all_reduce(f, f->xb2, n * hp->n_embd); /* tensor parallelism: the ranks' partial sums */
}

void qr_block_ffn(const qr_model *m, qr_fwd *f, int il, bool gelu) {
    if (m->layers[il].gate_inp.host) { /* a layer with experts (Mixtral): the MoE FFN (moe.c) */
        qr_block_moe(m, f, il);
        return;
    }
    const qr_layer *l = &m->layers[il];
    qr_backend *be = f->be;
    const int64_t n = f->n_rows, nff = (int64_t)n * m->hp.n_ff;
    if (be->ops->matmul_glu) {
        be->ops->matmul_glu(be, &l->ffn_gate, &l->ffn_up, f->xb, n, gelu, f->ff_g, f->ff_u);
    } else {
        be->ops->matmul(be, &l->ffn_gate, f->xb, n, f->ff_g);
        be->ops->matmul(be, &l->ffn_up, f->xb, n, f->ff_u);
        if (gelu) be->ops->geglu(be, f->ff_g, f->ff_u, nff, f->ff_g);
        else be->ops->swiglu(be, f->ff_g, f->ff_u, nff, f->ff_g);
    }
    be->ops->matmul(be, &l->ffn_down, f->ff_g, n, f->xb2);
    qr_tp_all_reduce(f, f->xb2, n * m->hp.n_embd);
}

void qr_block_keep_outputs(const qr_model *m, qr_fwd *f) {
    if (f->n_rows == f->n_outputs) return;
    qr_backend *be = f->be;
    const int64_t dim = m->hp.n_embd, no = f->n_outputs;
    be->ops->gather_outputs(be, f->x, dim, f->xb);
    be->ops->copy(be, f->xb, no * dim, f->x);
    be->ops->gather_outputs(be, f->xb2, dim, f->xb);
    be->ops->copy(be, f->xb, no * dim, f->xb2);
    f->n_rows = f->n_outputs;
    f->outputs_kept = true;
}

void qr_block_output(const qr_model *m, qr_fwd *f) {
    const qr_hparams *hp = &m->hp;
    qr_backend *be = f->be;
    if (f->n_outputs == 0 || !qr_pipe_last(m)) return; /* layer split: the last rank's */
    const float *src = f->x; /* already the output rows when kept */
    if (!f->outputs_kept) {
        be->ops->gather_outputs(be, f->x, hp->n_embd, f->xo);
        src = f->xo;
    }
    be->ops->rmsnorm(be, src, &m->output_norm, f->n_outputs, hp->n_embd, hp->norm_eps, f->xo);
    if (f->embd) return; /* embeddings: the normed hidden states are the result */
    be->ops->matmul(be, &m->output, f->xo, f->n_outputs, f->logits);
    if (hp->final_softcap > 0.0f)
        be->ops->softcap(be, f->logits, hp->final_softcap, (int64_t)f->n_outputs * qr_model_n_logits(m), f->logits);
}
