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
};

const char *qr_tensor_base_name(qr_tensor_id id) { return id < QR_T_COUNT ? tensor_names[id] : "?"; }

bool qr_tensor_per_layer(qr_tensor_id id) { return id >= QR_T_ATTN_NORM && id < QR_T_COUNT; }

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
};

const qr_arch_info *qr_arch_find(const char *name) {
    for (int i = 0; i < QR_ARCH_COUNT; i++)
        if (!strcmp(arch_table[i].name, name)) return &arch_table[i];
    return NULL;
}

const char *qr_arch_list(void) { return "llama, gemma3"; }
