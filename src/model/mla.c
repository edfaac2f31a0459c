/* mla.c — multi-head latent attention (DeepSeek-V2 / V2-Lite, Moonlight: deepseek2), in llama.cpp's absorbed form.
 * Per token the cache holds one head: the compressed KV (kv_lora values, RMS-normed) and the rope key shared by all
 * heads (n_rot values, roped). A query head is [nope (qk_nope) | rope (n_rot)]: its nope part goes through the head's
 * attn_k_b into the compressed space, so that q = [absorbed (kv_lora) | roped rope part] dots the cached row; the
 * value is the compressed KV itself (the first kv_lora values of the row, stored as the V row here), and each head's
 * attention output goes through its attn_v_b to a value head before attn_output. The kq scale is
 * mscale^2 / sqrt(key_length_mla) (model_load.c). */
#include "model/model.h"

void qr_block_mla(const qr_model *m, qr_fwd *f, int il) {
    const qr_hparams *hp = &m->hp;
    const qr_layer *l = &m->layers[il];
    qr_backend *be = f->be;
    const qr_mla_scratch *x = &f->mla;
    const int64_t n = f->n_tokens, H = hp->n_head, R = hp->kv_lora, dr = hp->n_rot, dq = hp->head_dim_k_mla,
                  dn = dq - dr, dk = R + dr, dv = hp->head_dim_v_mla;

    /* q (through the low-rank pair when the model has one) and the compressed KV | rope key, from one input */
    const qr_weight *w_in[2] = {hp->q_lora > 0 ? &l->mla_q_a : &l->attn_q, &l->mla_kv_a};
    float *const y_in[2] = {hp->q_lora > 0 ? x->q_a : x->q, x->kv_a};
    qr_fused_matmul_multi(be, 2, w_in, NULL, f->xb, n, y_in);
    if (hp->q_lora > 0) {
        be->ops->rmsnorm(be, x->q_a, &l->mla_q_a_norm, n, hp->q_lora, hp->norm_eps, x->q_a);
        be->ops->matmul(be, &l->mla_q_b, x->q_a, n, x->q);
    }
    const qr_rope_params rope = qr_layer_rope(m, f, il);
    const qr_mla_prep_args mp = {.kv_a = x->kv_a, .q = x->q, .q_out = f->q, .norm = &l->mla_kv_a_norm,
                                 .eps = hp->norm_eps, .n_head = (int32_t)H, .kv_lora = (int32_t)R, .n_rot = (int32_t)dr,
                                 .head_dim_q = (int32_t)dq, .rope = &rope, .kv = f->kv, .layer = il};
    if (!be->ops->mla_prep || !be->ops->mla_prep(be, &mp)) {
        /* the cached row: K = [rmsnorm(compressed) | rope(k_pe)] into f->k, the value (the normed compressed KV) f->v */
        be->ops->copy_rows(be, x->kv_a, dk, f->v, R, n, R);
        be->ops->rmsnorm(be, f->v, &l->mla_kv_a_norm, n, R, hp->norm_eps, f->v);
        be->ops->copy_rows(be, x->kv_a + R, dk, x->pe, dr, n, dr);
        be->ops->rope(be, x->pe, 1, (int32_t)dr, &rope);
        be->ops->copy_rows(be, f->v, R, f->k, dk, n, R);
        be->ops->copy_rows(be, x->pe, dr, f->k + R, dk, n, dr);
        be->ops->kv_store(be, f->kv, il, f->k, f->v);
        /* the query heads' rope parts: rope(q_pe) into f->q[.][h][R ..] ([n][H][dk]) */
        be->ops->copy_rows(be, x->q + dn, dq, x->pe, dr, n * H, dr);
        be->ops->rope(be, x->pe, (int32_t)H, (int32_t)dr, &rope);
        be->ops->copy_rows(be, x->pe, dr, f->q + R, dk, n * H, dr);
    }
    /* the query heads' absorbed parts: attn_k_b . q_nope into f->q[.][h][0, R) */
    const qr_matmul_heads_args kb = {.w = &l->mla_k_b, .x = x->q, .x_row = H * dq, .x_head = dq, .n_rows = n,
                                     .y = f->q, .y_row = H * dk, .y_head = dk};
    be->ops->matmul_heads(be, &kb);
    /* attention over the one cached head (MQA), then each head's attn_v_b and the output projection */
    const qr_attn_params ap = {.n_head = (int32_t)H, .n_head_kv = 1, .head_dim_k = (int32_t)dk,
                               .head_dim_v = (int32_t)R, .scale = hp->attn_scale};
    be->ops->attention(be, f->kv, il, f->q, &ap, f->att);
    const qr_matmul_heads_args vb = {.w = &l->mla_v_b, .x = f->att, .x_row = H * R, .x_head = R, .n_rows = n,
                                     .y = x->o, .y_row = H * dv, .y_head = dv};
    be->ops->matmul_heads(be, &vb);
    be->ops->matmul(be, &l->attn_out, x->o, n, f->xb2);
}
