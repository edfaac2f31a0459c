/* arch.c — the architecture table: which tensors and options each supported family has, in the
 * style of llama.cpp's llama-arch.cpp. Hyper-parameter keys are "{arch}.<suffix>" (model_load.c). */
#include <stdio.h>
#include <string.h>

#include "model/model.h"

static const char *const tensor_names[QR_T_COUNT] = {
    [QR_T_TOKEN_EMBD] = "token_embd",
    [QR_T_OUTPUT_NORM] = "output_norm",
    [QR_T_OUTPUT] = "output",
    [QR_T_ROPE_FREQS] = "rope_freqs",
    [QR_T_ATTN_NORM] = "attn_norm",
    [QR_T_ATTN_Q] = "attn_q",
    [QR_T_ATTN_K] = "attn_k",
    [QR_T_ATTN_V] = "attn_v",
    [QR_T_ATTN_OUT] = "attn_output",
    [QR_T_ATTN_Q_NORM] = "attn_q_norm",
    [QR_T_ATTN_K_NORM] = "attn_k_norm",
    [QR_T_ATTN_POST_NORM] = "post_attention_norm",
    [QR_T_FFN_NORM] = "ffn_norm",
    [QR_T_FFN_GATE] = "ffn_gate",
    [QR_T_FFN_UP] = "ffn_up",
    [QR_T_FFN_DOWN] = "ffn_down",
    [QR_T_FFN_POST_NORM] = "post_ffw_norm",
    [QR_T_ATTN_QKV] = "attn_qkv",
    [QR_T_ATTN_OUT_NORM] = "attn_output_norm",
    [QR_T_LAYER_OUT_NORM] = "layer_output_norm",
    [QR_T_TOKEN_TYPES] = "token_types",
    [QR_T_POS_EMBD] = "position_embd",
    [QR_T_TOKEN_EMBD_NORM] = "token_embd_norm",
};

const char *qr_tensor_base_name(qr_tensor_id id) { return id < QR_T_COUNT ? tensor_names[id] : "?"; }

bool qr_tensor_per_layer(qr_tensor_id id) {
    if (id == QR_T_TOKEN_TYPES || id == QR_T_POS_EMBD || id == QR_T_TOKEN_EMBD_NORM) return false;
    return id >= QR_T_ATTN_NORM && id < QR_T_COUNT;
}

void qr_tensor_name(qr_tensor_id id, int layer, char *buf, size_t cap) {
    if (qr_tensor_per_layer(id)) snprintf(buf, cap, "blk.%d.%s.weight", layer, qr_tensor_base_name(id));
    else snprintf(buf, cap, "%s.weight", qr_tensor_base_name(id));
}

static const qr_arch_info arch_table[QR_ARCH_COUNT] = {
    [QR_ARCH_LLAMA] =
        {
            .arch = QR_ARCH_LLAMA,
            .name = "llama",
            .rope_mode = QR_ROPE_NORMAL,
            .has_qk_norm = false,
            .has_post_norms = false,
            .gelu_ffn = false,
            .scale_embd = false,
            .swa_pattern = 0,
            .rope_base_swa = 0.0f,
            .extended = true, /* with ffn_*_exps tensors: Mixtral (hybrid_load.c) */
            .forward = qr_llama_forward,
        },
    [QR_ARCH_GEMMA3] =
        {
            .arch = QR_ARCH_GEMMA3,
            .name = "gemma3",
            .rope_mode = QR_ROPE_NEOX,
            .has_qk_norm = true,
            .has_post_norms = true,
            .gelu_ffn = true,
            .scale_embd = true,
            .swa_pattern = 6,
            .rope_base_swa = 10000.0f,
            .forward = qr_gemma3_forward,
        },
    [QR_ARCH_BERT] =
        {
            .arch = QR_ARCH_BERT,
            .name = "bert",
            .rope_mode = QR_ROPE_NORMAL, /* unused: learned positions */
            .encoder = true,
            .forward = qr_bert_forward,
        },
    [QR_ARCH_NOMIC_BERT] =
        {
            .arch = QR_ARCH_NOMIC_BERT,
            .name = "nomic-bert",
            .rope_mode = QR_ROPE_NEOX,
            .encoder = true,
            .forward = qr_bert_forward,
        },
    /* MoE and hybrid families: weights loaded by hybrid_load.c (hybrid.h) */
    [QR_ARCH_GRANITE] = {.arch = QR_ARCH_GRANITE, .name = "granite", .rope_mode = QR_ROPE_NORMAL, .extended = true,
                         .forward = qr_granite_forward},
    [QR_ARCH_GRANITE_HYBRID] = {.arch = QR_ARCH_GRANITE_HYBRID, .name = "granitehybrid", .rope_mode = QR_ROPE_NORMAL,
                                .extended = true, .per_layer_max = true, .forward = qr_granite_hybrid_forward},
    [QR_ARCH_NEMOTRON_H] = {.arch = QR_ARCH_NEMOTRON_H, .name = "nemotron_h", .rope_mode = QR_ROPE_NORMAL,
                            .extended = true, .per_layer_max = true, .forward = qr_nemotron_h_forward},
    [QR_ARCH_NEMOTRON_H_MOE] = {.arch = QR_ARCH_NEMOTRON_H_MOE, .name = "nemotron_h_moe", .rope_mode = QR_ROPE_NORMAL,
                                .extended = true, .per_layer_max = true, .forward = qr_nemotron_h_forward},
    [QR_ARCH_GPT_OSS] = {.arch = QR_ARCH_GPT_OSS, .name = "gpt-oss", .rope_mode = QR_ROPE_NEOX, .swa_pattern = 2,
                         .extended = true, .forward = qr_gpt_oss_forward},
    [QR_ARCH_NEMOTRON] = {.arch = QR_ARCH_NEMOTRON, .name = "nemotron", .rope_mode = QR_ROPE_NEOX, .extended = true,
                          .forward = qr_nemotron_forward},
};

const qr_arch_info *qr_arch_find(const char *name) {
    for (int i = 0; i < QR_ARCH_COUNT; i++)
        if (!strcmp(arch_table[i].name, name)) return &arch_table[i];
    return NULL;
}

const char *qr_arch_list(void) { return "llama, gemma3, bert, nomic-bert, granite, granitehybrid, nemotron_h, nemotron_h_moe, gpt-oss, nemotron"; }
