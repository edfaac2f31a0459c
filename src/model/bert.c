/* bert.c — forward pass of the BERT encoder family, for embeddings:
 *   bert:       x = tok_embd[t] + token_types[0] + position_embd[pos]; LayerNorm; per layer
 *               post-norm blocks: x = LN(x + attn_out(attn(q, k, v)) + b), x = LN(x + down(gelu(up(x)))),
 *               with biases on every projection;
 *   nomic-bert: the same without learned positions: fused qkv (bound as three row views), NeoX rope
 *               on q and k, SwiGLU FFN, no projection biases.
 * Attention is non-causal within each sequence (hp->causal false): every row sees all the rows of
 * its sequence in the pass, so a sequence must not be split across passes (context.c's embeddings
 * pass runs whole sequences). GELU is ggml's (tanh approximation through the f16 table, as llama.cpp
 * runs BERT), applied as geglu(x, 1). The final hidden states of all rows land in f->xo. */
#include "model/model.h"

/* y = x . w^T (+ b when the bias is present), n rows. */
static void linear(qr_backend *be, const qr_weight *w, const qr_weight *b, const float *x, int64_t n, float *y) {
    be->ops->matmul(be, w, x, n, y);
    if (b->host) be->ops->add_row(be, y, b, 0, n, y);
}

/* LayerNorm with optional bias. */
static void layer_norm(qr_backend *be, const float *x, const qr_weight *w, const qr_weight *b, int64_t n, int64_t dim,
                       float eps, float *y) {
    be->ops->layernorm(be, x, w->host ? w : NULL, b->host ? b : NULL, n, dim, eps, y);
}

void qr_bert_forward(const qr_model *m, qr_fwd *f) {
    const qr_hparams *hp = &m->hp;
    qr_backend *be = f->be;
    const bool nomic = m->arch->arch == QR_ARCH_NOMIC_BERT;
    const int64_t n = f->n_tokens, E = hp->n_embd, nx = n * E, nff = n * hp->n_ff;

    f->n_rows = f->n_tokens;
    f->outputs_kept = false;
    be->ops->get_rows(be, &m->tok_embd, f->x);
    if (m->type_embd.host) be->ops->add_row(be, f->x, &m->type_embd, 0, n, f->x); /* token type 0 ("sentence A") */
    if (m->pos_embd.host) be->ops->add_row(be, f->x, &m->pos_embd, -1, n, f->x);  /* learned positions */
    layer_norm(be, f->x, &m->tok_norm, &m->tok_norm_b, n, E, hp->norm_eps, f->x);

    if (!nomic) { /* GELU = geglu(x, 1): ones in ff_u, which the GELU FFN does not otherwise use */
        float ones[4096];
        for (int i = 0; i < 4096; i++) ones[i] = 1.0f;
        for (int64_t i = 0; i < nff; i += 4096)
            be->ops->write(be, f->ff_u + i, ones, (size_t)(nff - i < 4096 ? nff - i : 4096) * sizeof(float));
    }
    const qr_rope_params rope = {.mode = QR_ROPE_NEOX, .n_rot = hp->n_rot, .freq_base = hp->rope_base,
                                 .freq_scale = hp->rope_scale, .attn_factor = 1.0f, .beta_fast = 32.0f,
                                 .beta_slow = 1.0f, .n_ctx_orig = hp->n_ctx_orig};
    const qr_attn_params ap = {.n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .head_dim_k = hp->head_dim_k,
                               .head_dim_v = hp->head_dim_v, .scale = hp->attn_scale, .non_causal = !hp->causal};
    for (int il = 0; il < hp->n_layer; il++) {
        const qr_layer *l = &m->layers[il];
        /* self-attention on x */
        linear(be, &l->attn_q, &l->attn_q_b, f->x, n, f->q);
        linear(be, &l->attn_k, &l->attn_k_b, f->x, n, f->k);
        linear(be, &l->attn_v, &l->attn_v_b, f->x, n, f->v);
        if (nomic) {
            be->ops->rope(be, f->q, hp->n_head, hp->head_dim_k, &rope);
            be->ops->rope(be, f->k, hp->n_head_kv, hp->head_dim_k, &rope);
        }
        be->ops->kv_store(be, f->kv, il, f->k, f->v);
        be->ops->attention(be, f->kv, il, f->q, &ap, f->att);
        linear(be, &l->attn_out, &l->attn_out_b, f->att, n, f->xb2);
        /* xb = LN(x + attn) */
        be->ops->add(be, f->xb2, f->x, nx, f->xb2);
        layer_norm(be, f->xb2, &l->attn_out_norm, &l->attn_out_norm_b, n, E, hp->norm_eps, f->xb);
        /* xb2 = ffn(xb) */
        if (nomic) {
            qr_block_ffn(m, f, il, false); /* down(silu(gate(xb)) * up(xb)) */
        } else {
            linear(be, &l->ffn_up, &l->ffn_up_b, f->xb, n, f->ff_g);
            be->ops->geglu(be, f->ff_g, f->ff_u, nff, f->ff_g);
            linear(be, &l->ffn_down, &l->ffn_down_b, f->ff_g, n, f->xb2);
        }
        /* x = LN(xb + ffn) */
        be->ops->add(be, f->xb2, f->xb, nx, f->xb2);
        layer_norm(be, f->xb2, &l->layer_out_norm, &l->layer_out_norm_b, n, E, hp->norm_eps, f->x);
    }
    be->ops->copy(be, f->x, nx, f->xo); /* every row is an output */
}
