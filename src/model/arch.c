/* arch.c — the architecture table: each supported family as data, in the style of llama.cpp's
 * llama-arch.cpp: its hyper-parameter keys ("{arch}.<key>": required or optional, ranges, defaults), its
 * tensors (llama.cpp's names, per layer kind, required or optional, shapes from the hyper-parameters,
 * the qr_weight each binds), its MoE constants and its forward pass. model_load.c loads every family
 * from these rows; adding an architecture is a row here (mostly from the groups below) and a forward
 * file (docs/architecture.md, "Adding an architecture"). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "model/model.h"

/* ---- hyper-parameter groups ---- */

#define HP(key, type, need, fld, lo, hi, dflt) {key, QR_HP_##type, QR_HP_##need, offsetof(qr_hparams, fld), lo, hi, dflt}

/* every architecture */
static const qr_hparam_spec hp_common[] = {
    HP("context_length", INT, REQ, n_ctx_train, 1, INT32_MAX, 0),
    HP("embedding_length", INT, REQ, n_embd, 1, 1 << 20, 0),
    HP("block_count", INT, REQ, n_layer, 1, 4096, 0),
    HP("nextn_predict_layers", INT, OPT, n_layer_nextn, 0, 4096, 0),
    HP("feed_forward_length", INT, REQ, n_ff, 1, 1 << 22, 0),
    HP("attention.head_count", INT, REQ, n_head, 1, 4096, 0),
    HP("attention.head_count_kv", INT, OPT, n_head_kv, 1, 4096, 0),   /* default n_head */
    HP("attention.key_length", INT, OPT, head_dim_k, 1, 576, 0),      /* default n_embd / n_head */
    HP("attention.value_length", INT, OPT, head_dim_v, 1, 576, 0),    /* default n_embd / n_head */
    HP("rope.dimension_count", INT, OPT, n_rot, 2, 512, 0),           /* default key_length */
    HP("pooling_type", INT, OPT, pooling_type, 0, 4, -1),
    HP("rope.freq_base", FLOAT, OPT, rope_base, 0, 0, 10000.0),
    HP("attention.sliding_window", INT, OPT, n_swa, 0, INT32_MAX, 0),
    HP("attn_logit_softcapping", FLOAT, OPT, attn_softcap, 0, 0, 0),
    HP("final_logit_softcapping", FLOAT, OPT, final_softcap, 0, 0, 0),
    HP("attention.scale", FLOAT, OPT, attn_scale, 0, 0, 0),           /* default 1 / sqrt(key_length) */
    {0},
};
static const qr_hparam_spec hp_rms_eps[] = {HP("attention.layer_norm_rms_epsilon", FLOAT, REQ, norm_eps, 0, 0, 0), {0}};
static const qr_hparam_spec hp_ln_eps[] = {HP("attention.layer_norm_epsilon", FLOAT, REQ, norm_eps, 0, 0, 0), {0}};
static const qr_hparam_spec hp_causal[] = {HP("attention.causal", BOOL, OPT, causal, 0, 0, 1), {0}};
static const qr_hparam_spec hp_non_causal[] = {HP("attention.causal", BOOL, OPT, causal, 0, 0, 0), {0}};
/* experts (llama.cpp sizes llama's and granite's experts by feed_forward_length: no key for them) */
static const qr_hparam_spec hp_moe[] = {
    HP("expert_count", INT, OPT, n_expert, 0, 4096, 0),
    HP("expert_used_count", INT, REQ_MOE, n_expert_used, 1, 4096, 0),
    HP("expert_shared_feed_forward_length", INT, OPT, n_ff_shexp, 0, 1 << 22, 0),
    {0},
};
/* experts sized by expert_feed_forward_length (gpt-oss, qwen3moe, qwen2moe: llama.cpp defaults the qwen ones'
 * to feed_forward_length / expert_used_count, but their converters always write it) */
static const qr_hparam_spec hp_moe_sized[] = {
    HP("expert_count", INT, REQ, n_expert, 1, 4096, 0),
    HP("expert_used_count", INT, REQ, n_expert_used, 1, 4096, 0),
    HP("expert_feed_forward_length", INT, REQ, n_ff_exp, 1, 1 << 22, 0),
    HP("expert_shared_feed_forward_length", INT, OPT, n_ff_shexp, 0, 1 << 22, 0),
    {0},
};
/* qwen2moe's shared expert (llama.cpp defaults its width to feed_forward_length; converters write it) */
static const qr_hparam_spec hp_shexp_qwen2moe[] = {
    HP("expert_shared_feed_forward_length", INT, REQ, n_ff_shexp, 1, 1 << 22, 0),
    {0},
};
static const qr_hparam_spec hp_moe_nemotron_h[] = {
    HP("expert_feed_forward_length", INT, OPT, n_ff_exp, 1, 1 << 22, 0), /* default feed_forward_length */
    HP("expert_weights_norm", BOOL, OPT, norm_w, 0, 0, 0),
    HP("expert_weights_scale", FLOAT, OPT, w_scale, 0, 0, 1.0), /* 0 = 1 */
    {0},
};
static const qr_hparam_spec hp_ssm[] = {
    HP("ssm.conv_kernel", INT, REQ, ssm.d_conv, 2, 16, 0),
    HP("ssm.inner_size", INT, REQ, ssm.d_inner, 1, 1 << 20, 0),
    HP("ssm.state_size", INT, REQ, ssm.d_state, 1, 1024, 0),
    HP("ssm.time_step_rank", INT, REQ, ssm.n_head, 1, 1 << 16, 0),
    HP("ssm.group_count", INT, REQ, ssm.n_group, 1, 1 << 16, 0),
    {0},
};
static const qr_hparam_spec hp_granite[] = {
    HP("embedding_scale", FLOAT, OPT, f_embedding_scale, 0, 0, 0),
    HP("residual_scale", FLOAT, OPT, f_residual_scale, 0, 0, 0),
    HP("logit_scale", FLOAT, OPT, f_logit_scale, 0, 0, 0),
    HP("rope.scaling.finetuned", BOOL, OPT, use_rope, 0, 0, 1),
    {0},
};
/* issue 30 part 2: gemma2's defaults when the keys are absent (llama.cpp's) */
static const qr_hparam_spec hp_gemma2[] = {
    HP("attention.sliding_window", INT, OPT, n_swa, 0, INT32_MAX, 4096),
    HP("attn_logit_softcapping", FLOAT, OPT, attn_softcap, 0, 0, 50.0),
    HP("final_logit_softcapping", FLOAT, OPT, final_softcap, 0, 0, 30.0),
    {0},
};
/* olmo2 (OLMo 3): an optional sliding window on 3 layers of 4, whose rope has its own base and no scaling */
static const qr_hparam_spec hp_olmo2[] = {HP("rope.freq_base_swa", FLOAT, OPT, rope_base_swa, 0, 0, 0), {0}};
/* mistral3: YaRN's ramp bounds and magnitude keys, llama 4's attention temperature */
static const qr_hparam_spec hp_mistral3[] = {
    HP("rope.scaling.yarn_beta_fast", FLOAT, OPT, yarn_beta_fast, 0, 0, 32.0),
    HP("rope.scaling.yarn_beta_slow", FLOAT, OPT, yarn_beta_slow, 0, 0, 1.0),
    HP("rope.scaling.yarn_log_multiplier", FLOAT, OPT, yarn_log_mul, 0, 0, 0),
    HP("attention.temperature_scale", FLOAT, OPT, attn_temp_scale, 0, 0, 0),
    {0},
};
/* deepseek2: multi-head latent attention, shared + routed experts after leading dense blocks (llama.cpp's keys; the
 * shared expert is expert_shared_count experts wide, group-limited routing when expert_group_count > 1) */
static const qr_hparam_spec hp_deepseek2[] = {
    HP("attention.q_lora_rank", INT, OPT, q_lora, 0, 1 << 20, 0),
    HP("attention.kv_lora_rank", INT, REQ, kv_lora, 1, 512, 0),
    HP("attention.key_length_mla", INT, OPT, head_dim_k_mla, 0, 1024, 0),
    HP("attention.value_length_mla", INT, OPT, head_dim_v_mla, 0, 1024, 0),
    HP("leading_dense_block_count", INT, OPT, n_dense_lead, 0, 4096, 0),
    HP("expert_count", INT, OPT, n_expert, 0, 4096, 0),
    HP("expert_used_count", INT, REQ_MOE, n_expert_used, 1, 4096, 0),
    HP("expert_feed_forward_length", INT, REQ_MOE, n_ff_exp, 1, 1 << 22, 0),
    HP("expert_shared_count", INT, REQ_MOE, n_expert_shared, 0, 64, 0),
    HP("expert_weights_scale", FLOAT, OPT, w_scale, 0, 0, 0),
    HP("expert_weights_norm", BOOL, OPT, norm_w, 0, 0, 0),
    HP("expert_gating_func", INT, OPT, gating_func, 0, 2, 0),
    HP("expert_group_count", INT, OPT, n_expert_groups, 0, 4096, 0),
    HP("expert_group_used_count", INT, OPT, n_group_used, 0, 4096, 0),
    HP("rope.scaling.yarn_log_multiplier", FLOAT, OPT, yarn_log_mul, 0, 0, 0),
    {0},
};
/* EAGLE-3 heads (eagle3.c reads the target-layer array and sets the vocabulary sizes) */
static const qr_hparam_spec hp_eagle3[] = {
    HP("target_hidden_size", INT, REQ, eagle3_target_embd, 1, 1 << 20, 0),
    HP("norm_before_residual", BOOL, OPT, eagle3_norm_before_residual, 0, 0, 0),
    HP("norm_before_fc", BOOL, OPT, eagle3_norm_before_fc, 0, 0, 0),
    {0},
};
#undef HP

/* ---- tensor groups ---- */

#define G(flags, use, name, d0, d1, fld)                                                                              \
    {name, QR_IN_MODEL, QR_TS_##flags, QR_USE_##use, {QR_D_##d0, QR_D_##d1, QR_D_1}, offsetof(qr_model, fld)}
#define L(in, flags, use, name, d0, d1, d2, fld)                                                                      \
    {name, in, QR_TS_##flags, QR_USE_##use, {QR_D_##d0, QR_D_##d1, QR_D_##d2}, offsetof(qr_layer, fld)}
#define ATTN QR_IN_ATTN
#define FFN QR_IN_FFN
#define MOE QR_IN_MOE
#define FFN_ANY (QR_IN_FFN | QR_IN_MOE)

/* the decoder's model tensors (every decoder row, through t_decoder or, without pre-norms, t_decoder_head) */
#define T_DECODER_HEAD                                                                                                 \
    G(REQ, TABLE, "token_embd.weight", EMBD, VOCAB, tok_embd), G(REQ, F32, "output_norm.weight", EMBD, 1, output_norm), \
        G(TIED, MATMUL, "output.weight", EMBD, VOCAB, output),                                                        \
        G(OPT, F32, "rope_freqs.weight", ROT_HALF, 1, rope_freqs)
static const qr_tensor_spec t_decoder[] = {
    T_DECODER_HEAD,
    L(QR_IN_ANY, REQ, F32, "attn_norm.weight", EMBD, 1, 1, attn_norm),
    {0},
};
static const qr_tensor_spec t_decoder_head[] = {T_DECODER_HEAD, {0}};
#undef T_DECODER_HEAD
static const qr_tensor_spec t_attention[] = {
    L(ATTN, REQ, MATMUL, "attn_q.weight", EMBD, Q, 1, attn_q),
    L(ATTN, REQ, MATMUL, "attn_k.weight", EMBD, K, 1, attn_k),
    L(ATTN, REQ, MATMUL, "attn_v.weight", EMBD, V, 1, attn_v),
    L(ATTN, REQ, MATMUL, "attn_output.weight", O, EMBD, 1, attn_out),
    {0},
};
/* optional biases and sinks of qr_block_attention_x */
static const qr_tensor_spec t_attn_bias[] = {
    L(ATTN, OPT, F32, "attn_q.bias", Q, 1, 1, attn_q_b),
    L(ATTN, OPT, F32, "attn_k.bias", K, 1, 1, attn_k_b),
    L(ATTN, OPT, F32, "attn_v.bias", V, 1, 1, attn_v_b),
    L(ATTN, OPT, F32, "attn_output.bias", EMBD, 1, 1, attn_out_b),
    {0},
};
static const qr_tensor_spec t_attn_sinks[] = {L(ATTN, OPT, F32, "attn_sinks.weight", HEAD, 1, 1, attn_sinks), {0}};
static const qr_tensor_spec t_ffn_norm[] = {L(FFN_ANY, REQ, F32, "ffn_norm.weight", EMBD, 1, 1, ffn_norm), {0}};
static const qr_tensor_spec t_ffn_glu[] = { /* down(act(gate(x)) * up(x)) */
    L(FFN, REQ, MATMUL, "ffn_gate.weight", EMBD, FF, 1, ffn_gate),
    L(FFN, REQ, MATMUL, "ffn_up.weight", EMBD, FF, 1, ffn_up),
    L(FFN, REQ, MATMUL, "ffn_down.weight", FF, EMBD, 1, ffn_down),
    {0},
};
static const qr_tensor_spec t_ffn_relu2[] = { /* down(relu(up(x) + b)^2) + b */
    L(FFN, REQ, MATMUL, "ffn_up.weight", EMBD, FF, 1, ffn_up),
    L(FFN, REQ, MATMUL, "ffn_down.weight", FF, EMBD, 1, ffn_down),
    L(FFN, OPT, F32, "ffn_up.bias", FF, 1, 1, ffn_up_b),
    L(FFN, OPT, F32, "ffn_down.bias", EMBD, 1, 1, ffn_down_b),
    {0},
};
/* the MoE FFN; `GATE` is REQ for gated experts, OPT for relu^2 ones */
#define T_MOE(GATE)                                                                                                    \
    L(MOE, REQ, MATMUL, "ffn_gate_inp.weight", EMBD, EXPERT, 1, gate_inp),                                             \
    L(MOE, OPT, F32, "ffn_gate_inp.bias", EXPERT, 1, 1, gate_inp_b),                                                   \
    L(MOE, OPT, F32, "exp_probs_b.bias", EXPERT, 1, 1, exp_probs_b),                                                   \
    L(MOE, REQ, MATMUL, "ffn_up_exps.weight", EMBD, FF_EXP, EXPERT, up_exps),                                         \
    L(MOE, GATE, MATMUL, "ffn_gate_exps.weight", EMBD, FF_EXP, EXPERT, gate_exps),                                    \
    L(MOE, REQ, MATMUL, "ffn_down_exps.weight", FF_EXP, EMBD, EXPERT, down_exps),                                     \
    L(MOE, OPT, F32, "ffn_up_exps.bias", FF_EXP, EXPERT, 1, up_exps_b),                                               \
    L(MOE, OPT, F32, "ffn_gate_exps.bias", FF_EXP, EXPERT, 1, gate_exps_b),                                           \
    L(MOE, OPT, F32, "ffn_down_exps.bias", EMBD, EXPERT, 1, down_exps_b),                                             \
    L(QR_IN_SHEXP, REQ, MATMUL, "ffn_up_shexp.weight", EMBD, FF_SHEXP, 1, up_shexp),                                  \
    L(QR_IN_SHEXP, GATE, MATMUL, "ffn_gate_shexp.weight", EMBD, FF_SHEXP, 1, gate_shexp),                             \
    L(QR_IN_SHEXP, REQ, MATMUL, "ffn_down_shexp.weight", FF_SHEXP, EMBD, 1, down_shexp)
static const qr_tensor_spec t_moe_glu[] = {T_MOE(REQ), {0}};
static const qr_tensor_spec t_moe_relu2[] = {T_MOE(OPT), {0}};
#undef T_MOE
static const qr_tensor_spec t_mamba2[] = {
    L(QR_IN_SSM, REQ, MATMUL, "ssm_in.weight", EMBD, SSM_IN, 1, ssm_in),
    L(QR_IN_SSM, REQ, F32, "ssm_conv1d.weight", SSM_CONV, SSM_CONV_DIM, 1, ssm_conv1d),
    L(QR_IN_SSM, OPT, F32, "ssm_conv1d.bias", SSM_CONV_DIM, 1, 1, ssm_conv1d_b),
    L(QR_IN_SSM, REQ, F32, "ssm_dt.bias", SSM_HEAD, 1, 1, ssm_dt_b),
    L(QR_IN_SSM, REQ, F32, "ssm_a", SSM_HEAD, 1, 1, ssm_a),
    L(QR_IN_SSM, REQ, F32, "ssm_d", SSM_HEAD, 1, 1, ssm_d),
    L(QR_IN_SSM, FLAT, F32, "ssm_norm.weight", SSM_GROUP_SIZE, SSM_GROUP, 1, ssm_norm),
    L(QR_IN_SSM, REQ, MATMUL, "ssm_out.weight", SSM_INNER, EMBD, 1, ssm_out),
    {0},
};
static const qr_tensor_spec t_gemma3[] = {
    L(ATTN, REQ, F32, "attn_q_norm.weight", HEAD_K, 1, 1, attn_q_norm),
    L(ATTN, REQ, F32, "attn_k_norm.weight", HEAD_K, 1, 1, attn_k_norm),
    L(ATTN, REQ, F32, "post_attention_norm.weight", EMBD, 1, 1, attn_post_norm),
    L(FFN, REQ, F32, "post_ffw_norm.weight", EMBD, 1, 1, ffn_post_norm),
    {0},
};
/* the Qwen family: per-head q/k RMS norms (qwen3, qwen3moe); the shared expert's sigmoid gate (qwen2moe) */
static const qr_tensor_spec t_qk_norm[] = {
    L(ATTN, REQ, F32, "attn_q_norm.weight", HEAD_K, 1, 1, attn_q_norm),
    L(ATTN, REQ, F32, "attn_k_norm.weight", HEAD_K, 1, 1, attn_k_norm),
    {0},
};
static const qr_tensor_spec t_shexp_gate[] = {
    L(QR_IN_SHEXP, REQ, MATMUL, "ffn_gate_inp_shexp.weight", EMBD, 1, 1, gate_inp_shexp),
    {0},
};
/* issue 30 part 2: phi3's fused q|k|v and gate|up, LongRoPE's long / short frequency factors */
static const qr_tensor_spec t_phi3[] = {
    G(OPT, F32, "rope_factors_long.weight", ROT_HALF, 1, rope_long),
    G(OPT, F32, "rope_factors_short.weight", ROT_HALF, 1, rope_short),
    L(ATTN, REQ_SPLIT3, MATMUL, "attn_qkv.weight", EMBD, QKV, 1, attn_q), /* -> attn_q, attn_k, attn_v */
    L(ATTN, REQ, MATMUL, "attn_output.weight", O, EMBD, 1, attn_out),
    L(FFN, REQ_SPLIT2, MATMUL, "ffn_up.weight", EMBD, FF2, 1, ffn_gate),  /* -> ffn_gate, ffn_up */
    L(FFN, REQ, MATMUL, "ffn_down.weight", FF, EMBD, 1, ffn_down),
    {0},
};
/* gemma2: gemma3's post-norms without the q/k norms */
static const qr_tensor_spec t_gemma2[] = {
    L(ATTN, REQ, F32, "post_attention_norm.weight", EMBD, 1, 1, attn_post_norm),
    L(FFN, REQ, F32, "post_ffw_norm.weight", EMBD, 1, 1, ffn_post_norm),
    {0},
};
/* issue 30 part 3. olmo2: no pre-norms; q/k RMS norms over all heads at once; post-norms */
static const qr_tensor_spec t_olmo2[] = {
    L(ATTN, REQ, F32, "attn_q_norm.weight", Q, 1, 1, attn_q_norm),
    L(ATTN, REQ, F32, "attn_k_norm.weight", K, 1, 1, attn_k_norm),
    L(ATTN, REQ, F32, "post_attention_norm.weight", EMBD, 1, 1, attn_post_norm),
    L(FFN, REQ, F32, "post_ffw_norm.weight", EMBD, 1, 1, ffn_post_norm),
    {0},
};
/* glm4: pre- and post-norms, gate | up fused into ffn_up */
static const qr_tensor_spec t_glm4[] = {
    L(ATTN, REQ, F32, "post_attention_norm.weight", EMBD, 1, 1, attn_post_norm),
    L(FFN, REQ, F32, "post_ffw_norm.weight", EMBD, 1, 1, ffn_post_norm),
    L(FFN, REQ_SPLIT2, MATMUL, "ffn_up.weight", EMBD, FF2, 1, ffn_gate), /* -> ffn_gate, ffn_up */
    L(FFN, REQ, MATMUL, "ffn_down.weight", FF, EMBD, 1, ffn_down),
    {0},
};
/* deepseek2's multi-head latent attention (llama.cpp's MLA form: attn_kv_b split into per-head attn_k_b / attn_v_b);
 * attn_q or attn_q_a | attn_q_a_norm | attn_q_b by attention.q_lora_rank (model_load.c checks which) */
static const qr_tensor_spec t_mla[] = {
    L(ATTN, OPT, MATMUL, "attn_q.weight", EMBD, Q_MLA, 1, attn_q),
    L(ATTN, OPT, MATMUL, "attn_q_a.weight", EMBD, Q_LORA, 1, mla_q_a),
    L(ATTN, OPT, F32, "attn_q_a_norm.weight", Q_LORA, 1, 1, mla_q_a_norm),
    L(ATTN, OPT, MATMUL, "attn_q_b.weight", Q_LORA, Q_MLA, 1, mla_q_b),
    L(ATTN, REQ, MATMUL, "attn_kv_a_mqa.weight", EMBD, KV_A, 1, mla_kv_a),
    L(ATTN, REQ, F32, "attn_kv_a_norm.weight", KV_LORA, 1, 1, mla_kv_a_norm),
    L(ATTN, REQ, MATMUL, "attn_k_b.weight", QK_NOPE, KV_LORA, HEAD, mla_k_b),
    L(ATTN, REQ, MATMUL, "attn_v_b.weight", KV_LORA, V_MLA, HEAD, mla_v_b),
    L(ATTN, REQ, MATMUL, "attn_output.weight", O_MLA, EMBD, 1, attn_out),
    {0},
};
static const qr_tensor_spec t_gpt_oss[] = {
    L(ATTN, REQ, F32, "attn_sinks.weight", HEAD, 1, 1, attn_sinks),
    L(ATTN, REQ, F32, "post_attention_norm.weight", EMBD, 1, 1, attn_post_norm), /* the FFN's norm */
    {0},
};
static const qr_tensor_spec t_nemotron[] = { /* LayerNorm biases */
    G(REQ, F32, "output_norm.bias", EMBD, 1, output_norm_b),
    L(QR_IN_ANY, REQ, F32, "attn_norm.bias", EMBD, 1, 1, attn_norm_b),
    L(FFN_ANY, REQ, F32, "ffn_norm.bias", EMBD, 1, 1, ffn_norm_b),
    {0},
};
/* encoders: embeddings and their LayerNorm, post-norm blocks with optional biases */
static const qr_tensor_spec t_encoder[] = {
    G(REQ, TABLE, "token_embd.weight", EMBD, VOCAB, tok_embd),
    G(OPT, TABLE, "token_types.weight", EMBD, FILE, type_embd),
    G(REQ, F32, "token_embd_norm.weight", EMBD, 1, tok_norm),
    G(OPT, F32, "token_embd_norm.bias", EMBD, 1, tok_norm_b),
    L(ATTN, REQ, MATMUL, "attn_output.weight", O, EMBD, 1, attn_out),
    L(ATTN, OPT, F32, "attn_output.bias", EMBD, 1, 1, attn_out_b),
    L(ATTN, REQ, F32, "attn_output_norm.weight", EMBD, 1, 1, attn_out_norm),
    L(ATTN, OPT, F32, "attn_output_norm.bias", EMBD, 1, 1, attn_out_norm_b),
    L(FFN, REQ, MATMUL, "ffn_up.weight", EMBD, FF, 1, ffn_up),
    L(FFN, OPT, F32, "ffn_up.bias", FF, 1, 1, ffn_up_b),
    L(FFN, REQ, MATMUL, "ffn_down.weight", FF, EMBD, 1, ffn_down),
    L(FFN, OPT, F32, "ffn_down.bias", EMBD, 1, 1, ffn_down_b),
    L(FFN, REQ, F32, "layer_output_norm.weight", EMBD, 1, 1, layer_out_norm),
    L(FFN, OPT, F32, "layer_output_norm.bias", EMBD, 1, 1, layer_out_norm_b),
    {0},
};
static const qr_tensor_spec t_bert[] = {
    G(REQ, TABLE, "position_embd.weight", EMBD, CTX_TRAIN, pos_embd),
    L(ATTN, REQ, MATMUL, "attn_q.weight", EMBD, Q, 1, attn_q),
    L(ATTN, REQ, MATMUL, "attn_k.weight", EMBD, K, 1, attn_k),
    L(ATTN, REQ, MATMUL, "attn_v.weight", EMBD, V, 1, attn_v),
    L(ATTN, OPT, F32, "attn_q.bias", Q, 1, 1, attn_q_b),
    L(ATTN, OPT, F32, "attn_k.bias", K, 1, 1, attn_k_b),
    L(ATTN, OPT, F32, "attn_v.bias", V, 1, 1, attn_v_b),
    {0},
};
static const qr_tensor_spec t_nomic_bert[] = {
    L(ATTN, REQ_SPLIT3, MATMUL, "attn_qkv.weight", EMBD, QKV, 1, attn_q), /* -> attn_q, attn_k, attn_v */
    L(ATTN, SPLIT3, F32, "attn_qkv.bias", QKV, 1, 1, attn_q_b),          /* -> attn_q_b, attn_k_b, attn_v_b */
    L(FFN, REQ, MATMUL, "ffn_gate.weight", EMBD, FF, 1, ffn_gate),
    {0},
};
/* EAGLE-3 heads (llama.cpp's loader): fc fuses the three captured target states into g; one layer whose attention
 * reads [normed token embedding | normed g]; token_embd and output optional (the target's), d2t the draft
 * vocabulary's target ids; the FFN is t_ffn_norm + t_ffn_glu */
static const qr_tensor_spec t_eagle3[] = {
    G(REQ, MATMUL, "fc.weight", TARGET3, EMBD, fc),
    G(OPT, F32, "enc.output_norm.weight", TARGET3, 1, enc_norm),
    G(OPT, TABLE, "token_embd.weight", EMBD, VOCAB, tok_embd),
    G(REQ, F32, "output_norm.weight", EMBD, 1, output_norm),
    G(OPT, MATMUL, "output.weight", EMBD, VOCAB_DRAFT, output),
    G(OPT, IDS, "d2t", VOCAB_DRAFT, 1, d2t),
    G(OPT, F32, "rope_freqs.weight", ROT_HALF, 1, rope_freqs),
    L(QR_IN_ANY, REQ, F32, "attn_norm.weight", EMBD, 1, 1, attn_norm),
    L(QR_IN_ANY, REQ, F32, "attn_norm_2.weight", EMBD, 1, 1, attn_norm_2),
    L(ATTN, REQ, MATMUL, "attn_q.weight", EMBD2, Q, 1, attn_q),
    L(ATTN, REQ, MATMUL, "attn_k.weight", EMBD2, K, 1, attn_k),
    L(ATTN, REQ, MATMUL, "attn_v.weight", EMBD2, V, 1, attn_v),
    L(ATTN, REQ, MATMUL, "attn_output.weight", O, EMBD, 1, attn_out),
    {0},
};
_Static_assert(offsetof(qr_layer, ffn_up) == offsetof(qr_layer, ffn_gate) + sizeof(qr_weight),
               "QR_TS_SPLIT2 fields must follow each other");
_Static_assert(offsetof(qr_layer, attn_k) == offsetof(qr_layer, attn_q) + sizeof(qr_weight) &&
                   offsetof(qr_layer, attn_v) == offsetof(qr_layer, attn_k) + sizeof(qr_weight) &&
                   offsetof(qr_layer, attn_k_b) == offsetof(qr_layer, attn_q_b) + sizeof(qr_weight) &&
                   offsetof(qr_layer, attn_v_b) == offsetof(qr_layer, attn_k_b) + sizeof(qr_weight),
               "QR_TS_SPLIT3 fields must follow each other");
#undef G
#undef L
#undef ATTN
#undef FFN
#undef MOE
#undef FFN_ANY

/* ---- the architectures ---- */

#define HPS(...) (const qr_hparam_spec *const[]){__VA_ARGS__, NULL}
#define TS(...) (const qr_tensor_spec *const[]){__VA_ARGS__, NULL}

static const qr_arch_info arch_table[QR_ARCH_COUNT] = {
    [QR_ARCH_LLAMA] = {.arch = QR_ARCH_LLAMA, .name = "llama", .forward = qr_llama_forward,
                       .hparams = HPS(hp_common, hp_rms_eps, hp_causal, hp_moe),
                       .tensors = TS(t_decoder, t_attention, t_ffn_norm, t_ffn_glu, t_moe_glu),
                       .rope_mode = QR_ROPE_NORMAL, .moe_every_layer = true, .gating = QR_MOE_SOFTMAX,
                       .norm_w = true, .expert_act = QR_GLU_SWIGLU},
    [QR_ARCH_GEMMA3] = {.arch = QR_ARCH_GEMMA3, .name = "gemma3", .forward = qr_gemma3_forward,
                        .hparams = HPS(hp_common, hp_rms_eps, hp_causal),
                        .tensors = TS(t_decoder, t_attention, t_gemma3, t_ffn_norm, t_ffn_glu),
                        .rope_mode = QR_ROPE_NEOX, .scale_embd = true, .swa_pattern = 6, .rope_base_swa = 10000.0f,
                        .swa_plain_rope = true, .q_prescale = true, .ffn_gelu = true},
    [QR_ARCH_BERT] = {.arch = QR_ARCH_BERT, .name = "bert", .forward = qr_bert_forward,
                      .hparams = HPS(hp_common, hp_ln_eps, hp_non_causal), .tensors = TS(t_encoder, t_bert),
                      .encoder = true, .rope_mode = QR_ROPE_NORMAL /* unused: learned positions */},
    [QR_ARCH_NOMIC_BERT] = {.arch = QR_ARCH_NOMIC_BERT, .name = "nomic-bert", .forward = qr_bert_forward,
                            .hparams = HPS(hp_common, hp_ln_eps, hp_non_causal),
                            .tensors = TS(t_encoder, t_nomic_bert), .encoder = true, .rope_mode = QR_ROPE_NEOX},
    [QR_ARCH_GRANITE] = {.arch = QR_ARCH_GRANITE, .name = "granite", .forward = qr_granite_forward,
                         .hparams = HPS(hp_common, hp_rms_eps, hp_causal, hp_moe, hp_granite),
                         .tensors = TS(t_decoder, t_attention, t_attn_bias, t_attn_sinks, t_ffn_norm, t_ffn_glu,
                                       t_moe_glu),
                         .rope_mode = QR_ROPE_NORMAL, .gating = QR_MOE_SOFTMAX, .norm_w = true,
                         .expert_act = QR_GLU_SWIGLU},
    [QR_ARCH_GRANITE_HYBRID] = {.arch = QR_ARCH_GRANITE_HYBRID, .name = "granitehybrid",
                                .forward = qr_granite_hybrid_forward,
                                .hparams = HPS(hp_common, hp_rms_eps, hp_causal, hp_moe, hp_ssm, hp_granite),
                                .tensors = TS(t_decoder, t_attention, t_attn_bias, t_attn_sinks, t_mamba2,
                                              t_ffn_norm, t_ffn_glu, t_moe_glu),
                                .layers = QR_LAYERS_SSM_OR_ATTN, .per_layer_max = true, .rope_mode = QR_ROPE_NORMAL,
                                .gating = QR_MOE_SOFTMAX, .norm_w = true, .expert_act = QR_GLU_SWIGLU},
    [QR_ARCH_NEMOTRON_H] = {.arch = QR_ARCH_NEMOTRON_H, .name = "nemotron_h", .forward = qr_nemotron_h_forward,
                            .hparams = HPS(hp_common, hp_rms_eps, hp_causal, hp_moe, hp_moe_nemotron_h, hp_ssm),
                            .tensors = TS(t_decoder, t_attention, t_attn_bias, t_attn_sinks, t_mamba2, t_ffn_relu2,
                                          t_moe_relu2),
                            .layers = QR_LAYERS_SSM_ATTN_FFN, .per_layer_max = true, .rope_mode = QR_ROPE_NORMAL,
                            .gating = QR_MOE_SIGMOID, .expert_act = QR_GLU_RELU2},
    [QR_ARCH_NEMOTRON_H_MOE] = {.arch = QR_ARCH_NEMOTRON_H_MOE, .name = "nemotron_h_moe",
                                .forward = qr_nemotron_h_forward,
                                .hparams = HPS(hp_common, hp_rms_eps, hp_causal, hp_moe, hp_moe_nemotron_h, hp_ssm),
                                .tensors = TS(t_decoder, t_attention, t_attn_bias, t_attn_sinks, t_mamba2,
                                              t_ffn_relu2, t_moe_relu2),
                                .layers = QR_LAYERS_SSM_ATTN_FFN, .per_layer_max = true, .rope_mode = QR_ROPE_NORMAL,
                                .gating = QR_MOE_SIGMOID, .expert_act = QR_GLU_RELU2},
    [QR_ARCH_GPT_OSS] = {.arch = QR_ARCH_GPT_OSS, .name = "gpt-oss", .forward = qr_gpt_oss_forward,
                         .hparams = HPS(hp_common, hp_rms_eps, hp_causal, hp_moe_sized),
                         .tensors = TS(t_decoder, t_attention, t_attn_bias, t_gpt_oss, t_moe_glu),
                         .rope_mode = QR_ROPE_NEOX, .swa_pattern = 2, .moe_every_layer = true,
                         .gating = QR_MOE_SOFTMAX_WEIGHT, .norm_w = false, .expert_act = QR_GLU_SWIGLU_OAI},
    [QR_ARCH_NEMOTRON] = {.arch = QR_ARCH_NEMOTRON, .name = "nemotron", .forward = qr_nemotron_forward,
                          .hparams = HPS(hp_common, hp_ln_eps, hp_causal),
                          .tensors = TS(t_decoder, t_nemotron, t_attention, t_attn_bias, t_attn_sinks, t_ffn_norm,
                                        t_ffn_relu2),
                          .rope_mode = QR_ROPE_NEOX},
    /* the Qwen family: llama's forward pass with NeoX rope; q/k/v biases are optional in every row (llama.cpp's
     * create_tensor_qkv), qwen2 files have them */
    [QR_ARCH_QWEN2] = {.arch = QR_ARCH_QWEN2, .name = "qwen2", .forward = qr_llama_forward,
                       .hparams = HPS(hp_common, hp_rms_eps, hp_causal),
                       .tensors = TS(t_decoder, t_attention, t_attn_bias, t_ffn_norm, t_ffn_glu),
                       .rope_mode = QR_ROPE_NEOX},
    [QR_ARCH_QWEN3] = {.arch = QR_ARCH_QWEN3, .name = "qwen3", .forward = qr_llama_forward,
                       .hparams = HPS(hp_common, hp_rms_eps, hp_causal),
                       .tensors = TS(t_decoder, t_attention, t_attn_bias, t_qk_norm, t_ffn_norm, t_ffn_glu),
                       .rope_mode = QR_ROPE_NEOX},
    [QR_ARCH_QWEN3MOE] = {.arch = QR_ARCH_QWEN3MOE, .name = "qwen3moe", .forward = qr_llama_forward,
                          .hparams = HPS(hp_common, hp_rms_eps, hp_causal, hp_moe_sized),
                          .tensors = TS(t_decoder, t_attention, t_attn_bias, t_qk_norm, t_ffn_norm, t_moe_glu),
                          .rope_mode = QR_ROPE_NEOX, .moe_every_layer = true, .gating = QR_MOE_SOFTMAX,
                          .norm_w = true, .expert_act = QR_GLU_SWIGLU},
    [QR_ARCH_QWEN2MOE] = {.arch = QR_ARCH_QWEN2MOE, .name = "qwen2moe", .forward = qr_llama_forward,
                          .hparams = HPS(hp_common, hp_rms_eps, hp_causal, hp_moe_sized, hp_shexp_qwen2moe),
                          .tensors = TS(t_decoder, t_attention, t_attn_bias, t_ffn_norm, t_moe_glu, t_shexp_gate),
                          .rope_mode = QR_ROPE_NEOX, .moe_every_layer = true, .gating = QR_MOE_SOFTMAX,
                          .norm_w = false, .expert_act = QR_GLU_SWIGLU},
    /* issue 30 part 2 */
    [QR_ARCH_PHI3] = {.arch = QR_ARCH_PHI3, .name = "phi3", .forward = qr_llama_forward,
                      .hparams = HPS(hp_common, hp_rms_eps, hp_causal),
                      .tensors = TS(t_decoder, t_phi3, t_ffn_norm), .rope_mode = QR_ROPE_NEOX, .q_prescale = true,
                      .ignore_swa = true},
    [QR_ARCH_GEMMA2] = {.arch = QR_ARCH_GEMMA2, .name = "gemma2", .forward = qr_gemma3_forward,
                        .hparams = HPS(hp_common, hp_gemma2, hp_rms_eps, hp_causal),
                        .tensors = TS(t_decoder, t_attention, t_gemma2, t_ffn_norm, t_ffn_glu),
                        .rope_mode = QR_ROPE_NEOX, .scale_embd = true, .swa_pattern = 2, .q_prescale = true,
                        .ffn_gelu = true},
    /* issue 30 part 3: olmo2 and glm4 run gemma3's post-norm blocks (olmo2 without the pre-norms), granitemoe is
     * granite with its experts */
    [QR_ARCH_OLMO2] = {.arch = QR_ARCH_OLMO2, .name = "olmo2", .forward = qr_gemma3_forward,
                       .hparams = HPS(hp_common, hp_rms_eps, hp_causal, hp_olmo2),
                       .tensors = TS(t_decoder_head, t_attention, t_attn_bias, t_olmo2, t_ffn_glu),
                       .rope_mode = QR_ROPE_NEOX, .swa_pattern = 4, .swa_plain_rope = true},
    [QR_ARCH_GRANITE_MOE] = {.arch = QR_ARCH_GRANITE_MOE, .name = "granitemoe", .forward = qr_granite_forward,
                             .hparams = HPS(hp_common, hp_rms_eps, hp_causal, hp_moe, hp_granite),
                             .tensors = TS(t_decoder, t_attention, t_attn_bias, t_ffn_norm, t_ffn_glu, t_moe_glu),
                             .rope_mode = QR_ROPE_NORMAL, .moe_every_layer = true, .gating = QR_MOE_SOFTMAX,
                             .norm_w = true, .expert_act = QR_GLU_SWIGLU},
    [QR_ARCH_GLM4] = {.arch = QR_ARCH_GLM4, .name = "glm4", .forward = qr_gemma3_forward,
                      .hparams = HPS(hp_common, hp_rms_eps, hp_causal),
                      .tensors = TS(t_decoder, t_attention, t_attn_bias, t_glm4, t_ffn_norm),
                      .rope_mode = QR_ROPE_NORMAL},
    /* mistral3's text part: llama's blocks (dense, or experts), its own YaRN and temperature keys */
    [QR_ARCH_MISTRAL3] = {.arch = QR_ARCH_MISTRAL3, .name = "mistral3", .forward = qr_llama_forward,
                          .hparams = HPS(hp_common, hp_rms_eps, hp_causal, hp_moe, hp_mistral3),
                          .tensors = TS(t_decoder, t_attention, t_attn_bias, t_ffn_norm, t_ffn_glu, t_moe_glu),
                          .rope_mode = QR_ROPE_NORMAL, .moe_every_layer = true, .gating = QR_MOE_SOFTMAX,
                          .norm_w = true, .expert_act = QR_GLU_SWIGLU},
    /* deepseek2: llama's forward pass, whose attention block hands MLA layers to mla.c; dense FFNs in the leading
     * blocks, experts + shared expert after */
    [QR_ARCH_DEEPSEEK2] = {.arch = QR_ARCH_DEEPSEEK2, .name = "deepseek2", .forward = qr_llama_forward,
                           .hparams = HPS(hp_common, hp_rms_eps, hp_causal, hp_deepseek2),
                           .tensors = TS(t_decoder, t_mla, t_ffn_norm, t_ffn_glu, t_moe_glu),
                           .rope_mode = QR_ROPE_NORMAL, .gating = QR_MOE_SOFTMAX, .norm_w = false,
                           .expert_act = QR_GLU_SWIGLU},
    /* EAGLE-3 heads: loaded and checked against a target (eagle3.c), refused as a model to run (spec_head) */
    [QR_ARCH_EAGLE3] = {.arch = QR_ARCH_EAGLE3, .name = "eagle3", .forward = qr_eagle3_forward,
                        .hparams = HPS(hp_common, hp_rms_eps, hp_causal, hp_eagle3),
                        .tensors = TS(t_eagle3, t_ffn_norm, t_ffn_glu), .rope_mode = QR_ROPE_NORMAL,
                        .spec_head = true, .load_extra = qr_eagle3_load_extra,
                        .check_weights = qr_eagle3_check_weights},
};
#undef HPS
#undef TS

const qr_arch_info *qr_arch_find(const char *name) {
    for (int i = 0; i < QR_ARCH_COUNT; i++)
        if (!strcmp(arch_table[i].name, name)) return &arch_table[i];
    return NULL;
}

void qr_arch_list(char *buf, size_t cap) {
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < QR_ARCH_COUNT && used < cap; i++) {
        const int n = snprintf(buf + used, cap - used, "%s%s", i ? ", " : "", arch_table[i].name);
        used += n > 0 ? (size_t)n : 0;
    }
}
