/* synth_deepseek2.c — the `quarrel synth` row of deepseek2 (DeepSeek-V2 / V2-Lite, Moonlight) with llama.cpp's tensor
 * names, shapes and metadata keys as its current converter writes them: the MLA form (attn_kv_b split into per-head
 * attn_k_b [n_head][kv_lora][qk_nope] and attn_v_b [n_head][v_head][kv_lora], key_length = kv_lora + rope with one kv
 * head, key_length_mla / value_length_mla), q through attn_q or the attn_q_a | norm | attn_q_b pair, leading dense
 * blocks, then routed experts + a shared expert of n_ff_exp * expert_shared_count, with DeepSeek's YaRN keys
 * (rope.scaling.yarn_log_multiplier = 0.1 * mscale_all_dim). */
#include <math.h>
#include <stdio.h>

#include "convert/synth_internal.h"

#define NORM_SCALE 0.1f

static float inv_sqrtf(int64_t n) { return (float)(1.0 / sqrt((double)n)); }

bool qr_synth_deepseek2_tensors(const qr_synth_preset *p, tensor_list *l) {
    const int64_t d = p->n_embd, H = p->n_head, dq = p->head_dim, dr = p->n_rot, dn = dq - dr, R = p->kv_lora,
                  dv = p->v_head_dim, ql = p->q_lora, F = p->n_ff, Fe = p->n_ff_exp, E = p->n_expert,
                  S = (int64_t)p->n_ff_exp * p->n_expert_shared;
    char name[64];
    bool ok = qr_synth_add(l, INIT_NORMAL, 1.0f, 0.0f, 2, d, p->n_vocab, 1, "token_embd.weight");
#define T(init, scale, center, nd, a, b, c, fmt) \
    (snprintf(name, sizeof name, fmt, il), ok = ok && qr_synth_add(l, init, scale, center, nd, a, b, c, name))
#define W(scale, nd, a, b, c, fmt) T(INIT_NORMAL, scale, 0.0f, nd, a, b, c, fmt)
#define N(n, fmt) T(INIT_NORM, NORM_SCALE, 1.0f, 1, n, 1, 1, fmt)
    for (int il = 0; il < (int)p->n_layer; il++) {
        N(d, "blk.%d.attn_norm.weight");
        if (ql > 0) {
            W(inv_sqrtf(d), 2, d, ql, 1, "blk.%d.attn_q_a.weight");
            N(ql, "blk.%d.attn_q_a_norm.weight");
            W(inv_sqrtf(ql), 2, ql, H * dq, 1, "blk.%d.attn_q_b.weight");
        } else {
            W(inv_sqrtf(d), 2, d, H * dq, 1, "blk.%d.attn_q.weight");
        }
        W(inv_sqrtf(d), 2, d, R + dr, 1, "blk.%d.attn_kv_a_mqa.weight");
        N(R, "blk.%d.attn_kv_a_norm.weight");
        W(inv_sqrtf(dn), 3, dn, R, H, "blk.%d.attn_k_b.weight");
        W(inv_sqrtf(R), 3, R, dv, H, "blk.%d.attn_v_b.weight");
        W(inv_sqrtf(H * dv), 2, H * dv, d, 1, "blk.%d.attn_output.weight");
        N(d, "blk.%d.ffn_norm.weight");
        if (E == 0 || il < (int)p->n_dense_lead) {
            W(inv_sqrtf(d), 2, d, F, 1, "blk.%d.ffn_gate.weight");
            W(inv_sqrtf(d), 2, d, F, 1, "blk.%d.ffn_up.weight");
            W(inv_sqrtf(F), 2, F, d, 1, "blk.%d.ffn_down.weight");
            continue;
        }
        W(inv_sqrtf(d), 2, d, E, 1, "blk.%d.ffn_gate_inp.weight");
        if (p->gating_func == 2) W(0.1f, 1, E, 1, 1, "blk.%d.exp_probs_b.bias");
        W(inv_sqrtf(d), 3, d, Fe, E, "blk.%d.ffn_gate_exps.weight");
        W(inv_sqrtf(d), 3, d, Fe, E, "blk.%d.ffn_up_exps.weight");
        W(inv_sqrtf(Fe), 3, Fe, d, E, "blk.%d.ffn_down_exps.weight");
        if (S > 0) {
            W(inv_sqrtf(d), 2, d, S, 1, "blk.%d.ffn_gate_shexp.weight");
            W(inv_sqrtf(d), 2, d, S, 1, "blk.%d.ffn_up_shexp.weight");
            W(inv_sqrtf(S), 2, S, d, 1, "blk.%d.ffn_down_shexp.weight");
        }
    }
#undef T
#undef W
#undef N
    ok = ok && qr_synth_add(l, INIT_NORM, NORM_SCALE, 1.0f, 1, d, 1, 1, "output_norm.weight");
    /* a sharper head than the dense rows (4/sqrt(d)): routing round-off must not decide near-ties */
    ok = ok && qr_synth_add(l, INIT_NORMAL, 4.0f * inv_sqrtf(d), 0.0f, 2, d, p->n_vocab, 1, "output.weight");
    return ok;
}

void qr_synth_deepseek2_hparams(const qr_synth_preset *p, qr_gguf_stream *s) {
    char k[128];
#define KEY(suffix) (snprintf(k, sizeof k, "%s.%s", p->arch, suffix), k)
    qr_gguf_stream_set_u32(s, KEY("context_length"), p->n_ctx);
    qr_synth_shape_keys(p, s); /* head_count_kv is 1: the MLA cache's one head */
    qr_gguf_stream_set_u32(s, KEY("vocab_size"), p->n_vocab);
    qr_gguf_stream_set_u32(s, KEY("rope.dimension_count"), p->n_rot);
    qr_gguf_stream_set_f32(s, KEY("rope.freq_base"), p->rope_theta);
    qr_gguf_stream_set_u32(s, KEY("attention.q_lora_rank"), p->q_lora);
    qr_gguf_stream_set_u32(s, KEY("attention.kv_lora_rank"), p->kv_lora);
    qr_gguf_stream_set_u32(s, KEY("attention.key_length"), p->kv_lora + p->n_rot);
    qr_gguf_stream_set_u32(s, KEY("attention.value_length"), p->kv_lora);
    qr_gguf_stream_set_u32(s, KEY("attention.key_length_mla"), p->head_dim);
    qr_gguf_stream_set_u32(s, KEY("attention.value_length_mla"), p->v_head_dim);
    qr_gguf_stream_set_u32(s, KEY("leading_dense_block_count"), p->n_dense_lead);
    if (p->n_expert > 0) {
        qr_gguf_stream_set_u32(s, KEY("expert_count"), p->n_expert);
        qr_gguf_stream_set_u32(s, KEY("expert_used_count"), p->n_expert_used);
        qr_gguf_stream_set_u32(s, KEY("expert_feed_forward_length"), p->n_ff_exp);
        qr_gguf_stream_set_u32(s, KEY("expert_shared_count"), p->n_expert_shared);
        qr_gguf_stream_set_f32(s, KEY("expert_weights_scale"),
                               p->expert_weights_scale > 0.0f ? p->expert_weights_scale : 1.0f);
        qr_gguf_stream_set_bool(s, KEY("expert_weights_norm"), p->expert_weights_norm);
        qr_gguf_stream_set_u32(s, KEY("expert_gating_func"), p->gating_func ? p->gating_func : 1);
        if (p->n_expert_groups > 1) {
            qr_gguf_stream_set_u32(s, KEY("expert_group_count"), p->n_expert_groups);
            qr_gguf_stream_set_u32(s, KEY("expert_group_used_count"), p->n_group_used);
        }
    }
    if (p->yarn_factor > 0.0f) {
        qr_gguf_stream_set_str(s, KEY("rope.scaling.type"), "yarn");
        qr_gguf_stream_set_f32(s, KEY("rope.scaling.factor"), p->yarn_factor);
        qr_gguf_stream_set_u32(s, KEY("rope.scaling.original_context_length"), p->yarn_orig_ctx);
        if (p->yarn_log_mul > 0.0f) qr_gguf_stream_set_f32(s, KEY("rope.scaling.yarn_log_multiplier"), p->yarn_log_mul);
    }
#undef KEY
}
