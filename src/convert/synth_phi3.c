/* synth_phi3.c — the `quarrel synth` row of phi3 (Phi-3, Phi-3.5, Phi-4-mini) with llama.cpp's tensor names,
 * shapes and metadata keys, as its converter writes them: q | k | v fused into attn_qkv, gate | up fused into
 * ffn_up (2 * n_ff rows, gate first), NeoX rope over rope.dimension_count dimensions of each head, and for
 * LongRoPE models the rope_factors_long / rope_factors_short tensors with rope.scaling.attn_factor =
 * sqrt(1 + ln(context_length / original) / ln(original)) and rope.scaling.original_context_length. */
#include <math.h>
#include <stdio.h>

#include "convert/synth_internal.h"

#define NORM_SCALE 0.1f

static float inv_sqrtf(int64_t n) { return (float)(1.0 / sqrt((double)n)); }

static uint32_t n_rot(const qr_synth_preset *p) { return p->n_rot ? p->n_rot : p->head_dim; }

bool qr_synth_phi3_tensors(const qr_synth_preset *p, tensor_list *l) {
    const int64_t d = p->n_embd, q = (int64_t)p->n_head * p->head_dim, kv = (int64_t)p->n_head_kv * p->head_dim,
                  ff = p->n_ff;
    char name[64];
    bool ok = qr_synth_add(l, INIT_NORMAL, p->tied_output ? inv_sqrtf(d) : 1.0f, 0.0f, 2, d, p->n_vocab, 1,
                           "token_embd.weight");
    if (p->rope_scaling == QR_SYNTH_ROPE_LONGROPE) {
        ok = ok && qr_synth_add(l, INIT_ROPE_LONG, 0.0f, 0.0f, 1, n_rot(p) / 2, 1, 1, "rope_factors_long.weight");
        ok = ok && qr_synth_add(l, INIT_ROPE_SHORT, 0.0f, 0.0f, 1, n_rot(p) / 2, 1, 1, "rope_factors_short.weight");
    }
#define T(init, scale, center, nd, a, b, fmt) \
    (snprintf(name, sizeof name, fmt, il), ok = ok && qr_synth_add(l, init, scale, center, nd, a, b, 1, name))
    for (int il = 0; il < (int)p->n_layer; il++) {
        T(INIT_NORM, NORM_SCALE, 1.0f, 1, d, 1, "blk.%d.attn_norm.weight");
        T(INIT_NORMAL, inv_sqrtf(d), 0.0f, 2, d, q + 2 * kv, "blk.%d.attn_qkv.weight");
        T(INIT_NORMAL, inv_sqrtf(q), 0.0f, 2, q, d, "blk.%d.attn_output.weight");
        T(INIT_NORM, NORM_SCALE, 1.0f, 1, d, 1, "blk.%d.ffn_norm.weight");
        T(INIT_NORMAL, inv_sqrtf(d), 0.0f, 2, d, 2 * ff, "blk.%d.ffn_up.weight");
        T(INIT_NORMAL, inv_sqrtf(ff), 0.0f, 2, ff, d, "blk.%d.ffn_down.weight");
    }
#undef T
    ok = ok && qr_synth_add(l, INIT_NORM, NORM_SCALE, 1.0f, 1, d, 1, 1, "output_norm.weight");
    if (!p->tied_output) ok = ok && qr_synth_add(l, INIT_NORMAL, 2.0f * inv_sqrtf(d), 0.0f, 2, d, p->n_vocab, 1, "output.weight");
    return ok;
}

void qr_synth_shape_keys(const qr_synth_preset *p, qr_gguf_stream *s) {
    char k[128];
#define KEY(suffix) (snprintf(k, sizeof k, "%s.%s", p->arch, suffix), k)
    qr_gguf_stream_set_u32(s, KEY("embedding_length"), p->n_embd);
    qr_gguf_stream_set_u32(s, KEY("feed_forward_length"), p->n_ff);
    qr_gguf_stream_set_u32(s, KEY("block_count"), p->n_layer);
    qr_gguf_stream_set_u32(s, KEY("attention.head_count"), p->n_head);
    qr_gguf_stream_set_u32(s, KEY("attention.head_count_kv"), p->n_head_kv);
    qr_gguf_stream_set_f32(s, KEY("attention.layer_norm_rms_epsilon"), p->rms_eps);
#undef KEY
}

void qr_synth_phi3_hparams(const qr_synth_preset *p, qr_gguf_stream *s) {
    char k[128];
#define KEY(suffix) (snprintf(k, sizeof k, "%s.%s", p->arch, suffix), k)
    qr_gguf_stream_set_u32(s, KEY("context_length"), p->n_ctx);
    qr_gguf_stream_set_u32(s, KEY("rope.scaling.original_context_length"), p->rope_orig_ctx ? p->rope_orig_ctx : p->n_ctx);
    qr_synth_shape_keys(p, s);
    qr_gguf_stream_set_u32(s, KEY("rope.dimension_count"), n_rot(p));
    qr_gguf_stream_set_f32(s, KEY("rope.freq_base"), p->rope_theta);
    qr_gguf_stream_set_u32(s, KEY("attention.sliding_window"), p->sliding_window);
    if (p->rope_scaling == QR_SYNTH_ROPE_LONGROPE && p->rope_orig_ctx && p->n_ctx > p->rope_orig_ctx) {
        const double scale = (double)p->n_ctx / (double)p->rope_orig_ctx;
        qr_gguf_stream_set_f32(s, KEY("rope.scaling.attn_factor"),
                               (float)sqrt(1.0 + log(scale) / log((double)p->rope_orig_ctx)));
    }
#undef KEY
}
