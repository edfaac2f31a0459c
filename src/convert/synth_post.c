/* synth_post.c — the `quarrel synth` rows of olmo2 (OLMo 2 / OLMo 3) and glm4 (GLM-4-0414), with llama.cpp's
 * tensor names, shapes and metadata keys as their converters write them. Both put an RMS norm after each
 * sub-block (post_attention_norm, post_ffw_norm). olmo2 has no input norms and RMS-normalises q and k over all
 * heads (attn_q_norm [n_head * head_dim], attn_k_norm [n_head_kv * head_dim]); OLMo 3 adds a sliding window on
 * three layers of four (written, as its converter does, as attention.sliding_window_pattern booleans). glm4
 * has the input norms too, q/k/v biases, gate | up fused into ffn_up (2 * n_ff rows, gate first) and normal
 * (GPT-J) rope over rope.dimension_count dimensions of each head (half of them in GLM-4). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert/synth_internal.h"

#define NORM_SCALE 0.1f
#define BIAS_SCALE 0.1f

static float inv_sqrtf(int64_t n) { return (float)(1.0 / sqrt((double)n)); }

bool qr_synth_post_tensors(const qr_synth_preset *p, tensor_list *l) {
    const bool glm4 = !strcmp(p->arch, "glm4");
    const int64_t d = p->n_embd, q = (int64_t)p->n_head * p->head_dim, kv = (int64_t)p->n_head_kv * p->head_dim,
                  ff = p->n_ff;
    char name[64];
    bool ok = qr_synth_add(l, INIT_NORMAL, p->tied_output ? inv_sqrtf(d) : 1.0f, 0.0f, 2, d, p->n_vocab, 1,
                           "token_embd.weight");
#define T(init, scale, center, nd, a, b, fmt) \
    (snprintf(name, sizeof name, fmt, il), ok = ok && qr_synth_add(l, init, scale, center, nd, a, b, 1, name))
    for (int il = 0; il < (int)p->n_layer; il++) {
        if (glm4) T(INIT_NORM, NORM_SCALE, 1.0f, 1, d, 1, "blk.%d.attn_norm.weight");
        T(INIT_NORMAL, inv_sqrtf(d), 0.0f, 2, d, q, "blk.%d.attn_q.weight");
        T(INIT_NORMAL, inv_sqrtf(d), 0.0f, 2, d, kv, "blk.%d.attn_k.weight");
        T(INIT_NORMAL, inv_sqrtf(d), 0.0f, 2, d, kv, "blk.%d.attn_v.weight");
        if (glm4) {
            T(INIT_NORMAL, BIAS_SCALE, 0.0f, 1, q, 1, "blk.%d.attn_q.bias");
            T(INIT_NORMAL, BIAS_SCALE, 0.0f, 1, kv, 1, "blk.%d.attn_k.bias");
            T(INIT_NORMAL, BIAS_SCALE, 0.0f, 1, kv, 1, "blk.%d.attn_v.bias");
        } else {
            T(INIT_NORM, NORM_SCALE, 1.0f, 1, q, 1, "blk.%d.attn_q_norm.weight");
            T(INIT_NORM, NORM_SCALE, 1.0f, 1, kv, 1, "blk.%d.attn_k_norm.weight");
        }
        T(INIT_NORMAL, inv_sqrtf(q), 0.0f, 2, q, d, "blk.%d.attn_output.weight");
        T(INIT_NORM, NORM_SCALE, 1.0f, 1, d, 1, "blk.%d.post_attention_norm.weight");
        if (glm4) {
            T(INIT_NORM, NORM_SCALE, 1.0f, 1, d, 1, "blk.%d.ffn_norm.weight");
            T(INIT_NORMAL, inv_sqrtf(d), 0.0f, 2, d, 2 * ff, "blk.%d.ffn_up.weight");
        } else {
            T(INIT_NORMAL, inv_sqrtf(d), 0.0f, 2, d, ff, "blk.%d.ffn_gate.weight");
            T(INIT_NORMAL, inv_sqrtf(d), 0.0f, 2, d, ff, "blk.%d.ffn_up.weight");
        }
        T(INIT_NORMAL, inv_sqrtf(ff), 0.0f, 2, ff, d, "blk.%d.ffn_down.weight");
        T(INIT_NORM, NORM_SCALE, 1.0f, 1, d, 1, "blk.%d.post_ffw_norm.weight");
    }
#undef T
    ok = ok && qr_synth_add(l, INIT_NORM, NORM_SCALE, 1.0f, 1, d, 1, 1, "output_norm.weight");
    if (!p->tied_output) ok = ok && qr_synth_add(l, INIT_NORMAL, 2.0f * inv_sqrtf(d), 0.0f, 2, d, p->n_vocab, 1, "output.weight");
    return ok;
}

void qr_synth_post_hparams(const qr_synth_preset *p, qr_gguf_stream *s) {
    char k[128];
#define KEY(suffix) (snprintf(k, sizeof k, "%s.%s", p->arch, suffix), k)
    qr_gguf_stream_set_u32(s, KEY("context_length"), p->n_ctx);
    qr_synth_shape_keys(p, s);
    qr_gguf_stream_set_f32(s, KEY("rope.freq_base"), p->rope_theta);
    qr_gguf_stream_set_u32(s, KEY("rope.dimension_count"), p->n_rot ? p->n_rot : p->head_dim);
    if (p->head_dim * p->n_head != p->n_embd) {
        qr_gguf_stream_set_u32(s, KEY("attention.key_length"), p->head_dim);
        qr_gguf_stream_set_u32(s, KEY("attention.value_length"), p->head_dim);
    }
    if (p->sliding_window > 0) { /* OLMo 3: the window on every layer but each 4th */
        qr_gguf_stream_set_u32(s, KEY("attention.sliding_window"), p->sliding_window);
        bool *swa = calloc(p->n_layer, sizeof *swa);
        if (swa) {
            for (uint32_t il = 0; il < p->n_layer; il++) swa[il] = (il + 1) % 4 != 0;
            qr_gguf_stream_set_arr(s, KEY("attention.sliding_window_pattern"), QR_GGUF_BOOL, swa, p->n_layer);
        }
        free(swa);
    }
    if (p->yarn_factor > 0.0f) {
        qr_gguf_stream_set_str(s, KEY("rope.scaling.type"), "yarn");
        qr_gguf_stream_set_f32(s, KEY("rope.scaling.factor"), p->yarn_factor);
        qr_gguf_stream_set_u32(s, KEY("rope.scaling.original_context_length"), p->yarn_orig_ctx);
    }
#undef KEY
}
