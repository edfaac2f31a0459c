/* synth.c — `quarrel synth`: architecture table (tensor lists + hyper-parameter keys), deterministic
 * weight generation, and the streaming writer loop. */
#define _POSIX_C_SOURCE 200809L
#include "convert/synth.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "convert/gguf_stream.h"
#include "convert/quantize_model.h"
#include "convert/synth_internal.h"
#include "util/util.h"

/* Floats generated per chunk of rows (bounded memory). */
#define CHUNK_FLOATS (8u << 20)
#define QUANTIZATION_VERSION 2

/* init_kind, synth_tensor, tensor_list: convert/synth_internal.h (shared with synth_hybrid.c) */

/* ---- architectures --------------------------------------------------------------------------- */

static bool add_tensor(tensor_list *l, init_kind init, float scale, uint32_t n_dims, int64_t ne0, int64_t ne1,
                       const char *fmt, int layer) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        synth_tensor *nt = realloc(l->t, cap * sizeof *nt);
        if (!nt) return false;
        l->t = nt;
        l->cap = cap;
    }
    synth_tensor *t = &l->t[l->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, fmt, layer);
    t->n_dims = n_dims;
    t->ne[0] = ne0;
    t->ne[1] = n_dims > 1 ? ne1 : 1;
    t->ne[2] = t->ne[3] = 1;
    t->init = init;
    t->scale = scale;
    t->center = 1.0f;
    t->type = QR_TYPE_F32;
    return true;
}

bool qr_synth_add(tensor_list *l, init_kind init, float scale, float center, uint32_t n_dims, int64_t ne0, int64_t ne1,
                  int64_t ne2, const char *name) {
    if (!add_tensor(l, init, scale, n_dims > 2 ? 2 : n_dims, ne0, ne1, "t", 0)) return false;
    synth_tensor *t = &l->t[l->n - 1];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = n_dims;
    t->ne[2] = n_dims > 2 ? ne2 : 1;
    t->center = center;
    return true;
}

static float inv_sqrt(uint32_t n) { return (float)(1.0 / sqrt((double)n)); }

#define NORM_SCALE 0.1f

/* llama: token_embd, [rope_freqs], per layer attn_norm q k v output ffn_norm gate up down, output_norm, output */
static bool llama_tensors(const qr_synth_preset *p, tensor_list *l) {
    if (p->n_expert > 0) return qr_synth_hybrid_tensors(p, l); /* Mixtral: synth_hybrid.c */
    int64_t d = p->n_embd, q = (int64_t)p->n_head * p->head_dim, kv = (int64_t)p->n_head_kv * p->head_dim, ff = p->n_ff;
    bool ok = add_tensor(l, INIT_NORMAL, p->tied_output ? inv_sqrt(p->n_embd) : 1.0f, 2, d, p->n_vocab,
                         "token_embd.weight", 0);
    if (p->rope_scaling == QR_SYNTH_ROPE_LLAMA3) ok &= add_tensor(l, INIT_ROPE_LLAMA3, 0, 1, p->head_dim / 2, 1, "rope_freqs.weight", 0);
    for (int i = 0; i < (int)p->n_layer; i++) {
        ok &= add_tensor(l, INIT_NORM, NORM_SCALE, 1, d, 1, "blk.%d.attn_norm.weight", i);
        ok &= add_tensor(l, INIT_NORMAL, inv_sqrt(p->n_embd), 2, d, q, "blk.%d.attn_q.weight", i);
        ok &= add_tensor(l, INIT_NORMAL, inv_sqrt(p->n_embd), 2, d, kv, "blk.%d.attn_k.weight", i);
        ok &= add_tensor(l, INIT_NORMAL, inv_sqrt(p->n_embd), 2, d, kv, "blk.%d.attn_v.weight", i);
        ok &= add_tensor(l, INIT_NORMAL, inv_sqrt((uint32_t)q), 2, q, d, "blk.%d.attn_output.weight", i);
        ok &= add_tensor(l, INIT_NORM, NORM_SCALE, 1, d, 1, "blk.%d.ffn_norm.weight", i);
        ok &= add_tensor(l, INIT_NORMAL, inv_sqrt(p->n_embd), 2, d, ff, "blk.%d.ffn_gate.weight", i);
        ok &= add_tensor(l, INIT_NORMAL, inv_sqrt(p->n_embd), 2, d, ff, "blk.%d.ffn_up.weight", i);
        ok &= add_tensor(l, INIT_NORMAL, inv_sqrt(p->n_ff), 2, ff, d, "blk.%d.ffn_down.weight", i);
    }
    ok &= add_tensor(l, INIT_NORM, NORM_SCALE, 1, d, 1, "output_norm.weight", 0);
    if (!p->tied_output) ok &= add_tensor(l, INIT_NORMAL, 2.0f * inv_sqrt(p->n_embd), 2, d, p->n_vocab, "output.weight", 0);
    return ok;
}

/* gemma3: like llama plus q/k norms over head_dim and post-attention / post-ffn norms. The embedding is
 * tied and the input is scaled by sqrt(d_model), so with unit gains each position's logits would be
 * dominated by its own input token; post-norm gains of ~4 let the layers decide the prediction. */
#define GEMMA_POST_NORM_GAIN 4.0f
static bool gemma3_tensors(const qr_synth_preset *p, tensor_list *l) {
    const bool qk_norm = strcmp(p->arch, "gemma2") != 0; /* gemma2: the same blocks without q/k norms */
    int64_t d = p->n_embd, q = (int64_t)p->n_head * p->head_dim, kv = (int64_t)p->n_head_kv * p->head_dim, ff = p->n_ff;
    bool ok = add_tensor(l, INIT_NORMAL, p->tied_output ? inv_sqrt(p->n_embd) : 1.0f, 2, d, p->n_vocab,
                         "token_embd.weight", 0);
    for (int i = 0; i < (int)p->n_layer; i++) {
        ok &= add_tensor(l, INIT_NORM, NORM_SCALE, 1, d, 1, "blk.%d.attn_norm.weight", i);
        ok &= add_tensor(l, INIT_NORMAL, inv_sqrt(p->n_embd), 2, d, q, "blk.%d.attn_q.weight", i);
        ok &= add_tensor(l, INIT_NORMAL, inv_sqrt(p->n_embd), 2, d, kv, "blk.%d.attn_k.weight", i);
        ok &= add_tensor(l, INIT_NORMAL, inv_sqrt(p->n_embd), 2, d, kv, "blk.%d.attn_v.weight", i);
        if (qk_norm) ok &= add_tensor(l, INIT_NORM, NORM_SCALE, 1, p->head_dim, 1, "blk.%d.attn_q_norm.weight", i);
        if (qk_norm) ok &= add_tensor(l, INIT_NORM, NORM_SCALE, 1, p->head_dim, 1, "blk.%d.attn_k_norm.weight", i);
        ok &= add_tensor(l, INIT_NORMAL, inv_sqrt((uint32_t)q), 2, q, d, "blk.%d.attn_output.weight", i);
        ok &= add_tensor(l, INIT_NORM, NORM_SCALE * GEMMA_POST_NORM_GAIN, 1, d, 1, "blk.%d.post_attention_norm.weight", i);
        if (ok) l->t[l->n - 1].center = GEMMA_POST_NORM_GAIN;
        ok &= add_tensor(l, INIT_NORM, NORM_SCALE, 1, d, 1, "blk.%d.ffn_norm.weight", i);
        ok &= add_tensor(l, INIT_NORMAL, inv_sqrt(p->n_embd), 2, d, ff, "blk.%d.ffn_gate.weight", i);
        ok &= add_tensor(l, INIT_NORMAL, inv_sqrt(p->n_embd), 2, d, ff, "blk.%d.ffn_up.weight", i);
        ok &= add_tensor(l, INIT_NORMAL, inv_sqrt(p->n_ff), 2, ff, d, "blk.%d.ffn_down.weight", i);
        ok &= add_tensor(l, INIT_NORM, NORM_SCALE * GEMMA_POST_NORM_GAIN, 1, d, 1, "blk.%d.post_ffw_norm.weight", i);
        if (ok) l->t[l->n - 1].center = GEMMA_POST_NORM_GAIN;
    }
    ok &= add_tensor(l, INIT_NORM, NORM_SCALE, 1, d, 1, "output_norm.weight", 0);
    if (!p->tied_output) ok &= add_tensor(l, INIT_NORMAL, 2.0f * inv_sqrt(p->n_embd), 2, d, p->n_vocab, "output.weight", 0);
    return ok;
}

/* bert / nomic-bert: token_embd, token_types (2 rows), [position_embd], token_embd_norm (+bias), per layer
 * q k v (bert, with biases) or fused qkv (nomic-bert), attn_output (+bias), attn_output_norm (+bias),
 * ffn up/down (bert, with biases) or gate/up/down (nomic-bert), layer_output_norm (+bias). */
#define BIAS_SCALE 0.1f
static bool bert_tensors(const qr_synth_preset *p, tensor_list *l) {
    const bool nomic = !strcmp(p->arch, "nomic-bert");
    const int64_t d = p->n_embd, ff = p->n_ff;
    bool ok = add_tensor(l, INIT_NORMAL, 1.0f, 2, d, p->n_vocab, "token_embd.weight", 0);
    ok &= add_tensor(l, INIT_NORMAL, 0.5f, 2, d, 2, "token_types.weight", 0);
    if (!nomic) ok &= add_tensor(l, INIT_NORMAL, 0.5f, 2, d, p->n_ctx, "position_embd.weight", 0);
    ok &= add_tensor(l, INIT_NORM, NORM_SCALE, 1, d, 1, "token_embd_norm.weight", 0);
    ok &= add_tensor(l, INIT_NORMAL, BIAS_SCALE, 1, d, 1, "token_embd_norm.bias", 0);
    for (int i = 0; i < (int)p->n_layer; i++) {
        if (nomic) {
            ok &= add_tensor(l, INIT_NORMAL, inv_sqrt(p->n_embd), 2, d, 3 * d, "blk.%d.attn_qkv.weight", i);
        } else {
            static const char *const qkv[3] = {"blk.%d.attn_q.weight", "blk.%d.attn_k.weight", "blk.%d.attn_v.weight"};
            static const char *const qkv_b[3] = {"blk.%d.attn_q.bias", "blk.%d.attn_k.bias", "blk.%d.attn_v.bias"};
            for (int j = 0; j < 3; j++) {
                ok &= add_tensor(l, INIT_NORMAL, inv_sqrt(p->n_embd), 2, d, d, qkv[j], i);
                ok &= add_tensor(l, INIT_NORMAL, BIAS_SCALE, 1, d, 1, qkv_b[j], i);
            }
        }
        ok &= add_tensor(l, INIT_NORMAL, inv_sqrt(p->n_embd), 2, d, d, "blk.%d.attn_output.weight", i);
        if (!nomic) ok &= add_tensor(l, INIT_NORMAL, BIAS_SCALE, 1, d, 1, "blk.%d.attn_output.bias", i);
        ok &= add_tensor(l, INIT_NORM, NORM_SCALE, 1, d, 1, "blk.%d.attn_output_norm.weight", i);
        ok &= add_tensor(l, INIT_NORMAL, BIAS_SCALE, 1, d, 1, "blk.%d.attn_output_norm.bias", i);
        if (nomic) ok &= add_tensor(l, INIT_NORMAL, inv_sqrt(p->n_embd), 2, d, ff, "blk.%d.ffn_gate.weight", i);
        ok &= add_tensor(l, INIT_NORMAL, inv_sqrt(p->n_embd), 2, d, ff, "blk.%d.ffn_up.weight", i);
        if (!nomic) ok &= add_tensor(l, INIT_NORMAL, BIAS_SCALE, 1, ff, 1, "blk.%d.ffn_up.bias", i);
        ok &= add_tensor(l, INIT_NORMAL, inv_sqrt(p->n_ff), 2, ff, d, "blk.%d.ffn_down.weight", i);
        if (!nomic) ok &= add_tensor(l, INIT_NORMAL, BIAS_SCALE, 1, d, 1, "blk.%d.ffn_down.bias", i);
        ok &= add_tensor(l, INIT_NORM, NORM_SCALE, 1, d, 1, "blk.%d.layer_output_norm.weight", i);
        ok &= add_tensor(l, INIT_NORMAL, BIAS_SCALE, 1, d, 1, "blk.%d.layer_output_norm.bias", i);
    }
    return ok;
}

static void key(char *buf, size_t n, const char *arch, const char *suffix) { snprintf(buf, n, "%s.%s", arch, suffix); }

static void bert_hparams(const qr_synth_preset *p, qr_gguf_stream *s) {
    char k[128];
    const char *a = p->arch;
    key(k, sizeof k, a, "context_length"), qr_gguf_stream_set_u32(s, k, p->n_ctx);
    key(k, sizeof k, a, "embedding_length"), qr_gguf_stream_set_u32(s, k, p->n_embd);
    key(k, sizeof k, a, "block_count"), qr_gguf_stream_set_u32(s, k, p->n_layer);
    key(k, sizeof k, a, "feed_forward_length"), qr_gguf_stream_set_u32(s, k, p->n_ff);
    key(k, sizeof k, a, "attention.head_count"), qr_gguf_stream_set_u32(s, k, p->n_head);
    key(k, sizeof k, a, "attention.head_count_kv"), qr_gguf_stream_set_u32(s, k, p->n_head_kv);
    key(k, sizeof k, a, "attention.layer_norm_epsilon"), qr_gguf_stream_set_f32(s, k, p->rms_eps);
    key(k, sizeof k, a, "attention.causal"), qr_gguf_stream_set_bool(s, k, false);
    if (!strcmp(a, "nomic-bert")) key(k, sizeof k, a, "rope.freq_base"), qr_gguf_stream_set_f32(s, k, p->rope_theta);
    qr_gguf_stream_set_u32(s, "tokenizer.ggml.token_type_count", 2);
}

void qr_synth_llama_hparams(const qr_synth_preset *p, qr_gguf_stream *s) {
    char k[128];
    const char *a = p->arch;
    key(k, sizeof k, a, "context_length"), qr_gguf_stream_set_u32(s, k, p->n_ctx);
    key(k, sizeof k, a, "embedding_length"), qr_gguf_stream_set_u32(s, k, p->n_embd);
    key(k, sizeof k, a, "block_count"), qr_gguf_stream_set_u32(s, k, p->n_layer);
    key(k, sizeof k, a, "feed_forward_length"), qr_gguf_stream_set_u32(s, k, p->n_ff);
    key(k, sizeof k, a, "attention.head_count"), qr_gguf_stream_set_u32(s, k, p->n_head);
    key(k, sizeof k, a, "attention.head_count_kv"), qr_gguf_stream_set_u32(s, k, p->n_head_kv);
    key(k, sizeof k, a, "rope.freq_base"), qr_gguf_stream_set_f32(s, k, p->rope_theta);
    key(k, sizeof k, a, "attention.layer_norm_rms_epsilon"), qr_gguf_stream_set_f32(s, k, p->rms_eps);
    key(k, sizeof k, a, "rope.dimension_count"), qr_gguf_stream_set_u32(s, k, p->head_dim);
    key(k, sizeof k, a, "vocab_size"), qr_gguf_stream_set_u32(s, k, p->n_vocab);
    if (p->head_dim * p->n_head != p->n_embd) {
        key(k, sizeof k, a, "attention.key_length"), qr_gguf_stream_set_u32(s, k, p->head_dim);
        key(k, sizeof k, a, "attention.value_length"), qr_gguf_stream_set_u32(s, k, p->head_dim);
    }
    if (p->yarn_factor > 0.0f) { /* YaRN on any llama model (as Qwen 2.5 / Mistral files declare it) */
        key(k, sizeof k, a, "rope.scaling.type"), qr_gguf_stream_set_str(s, k, "yarn");
        key(k, sizeof k, a, "rope.scaling.factor"), qr_gguf_stream_set_f32(s, k, p->yarn_factor);
        key(k, sizeof k, a, "rope.scaling.original_context_length"), qr_gguf_stream_set_u32(s, k, p->yarn_orig_ctx);
    }
    /* mistral3's YaRN and temperature keys */
    if (p->yarn_beta_fast > 0.0f) key(k, sizeof k, a, "rope.scaling.yarn_beta_fast"), qr_gguf_stream_set_f32(s, k, p->yarn_beta_fast);
    if (p->yarn_beta_slow > 0.0f) key(k, sizeof k, a, "rope.scaling.yarn_beta_slow"), qr_gguf_stream_set_f32(s, k, p->yarn_beta_slow);
    if (p->yarn_log_mul > 0.0f) key(k, sizeof k, a, "rope.scaling.yarn_log_multiplier"), qr_gguf_stream_set_f32(s, k, p->yarn_log_mul);
    if (p->attn_temp_scale > 0.0f) key(k, sizeof k, a, "attention.temperature_scale"), qr_gguf_stream_set_f32(s, k, p->attn_temp_scale);
    if (p->n_expert > 0) qr_synth_hybrid_hparams(p, s); /* Mixtral: expert keys (synth_hybrid.c) */
}

static void gemma3_hparams(const qr_synth_preset *p, qr_gguf_stream *s) {
    char k[128];
    const char *a = p->arch;
    key(k, sizeof k, a, "context_length"), qr_gguf_stream_set_u32(s, k, p->n_ctx);
    key(k, sizeof k, a, "embedding_length"), qr_gguf_stream_set_u32(s, k, p->n_embd);
    key(k, sizeof k, a, "block_count"), qr_gguf_stream_set_u32(s, k, p->n_layer);
    key(k, sizeof k, a, "feed_forward_length"), qr_gguf_stream_set_u32(s, k, p->n_ff);
    key(k, sizeof k, a, "attention.head_count"), qr_gguf_stream_set_u32(s, k, p->n_head);
    key(k, sizeof k, a, "attention.head_count_kv"), qr_gguf_stream_set_u32(s, k, p->n_head_kv);
    key(k, sizeof k, a, "attention.key_length"), qr_gguf_stream_set_u32(s, k, p->head_dim);
    key(k, sizeof k, a, "attention.value_length"), qr_gguf_stream_set_u32(s, k, p->head_dim);
    key(k, sizeof k, a, "attention.layer_norm_rms_epsilon"), qr_gguf_stream_set_f32(s, k, p->rms_eps);
    key(k, sizeof k, a, "rope.freq_base"), qr_gguf_stream_set_f32(s, k, p->rope_theta);
    key(k, sizeof k, a, "attention.sliding_window"), qr_gguf_stream_set_u32(s, k, p->sliding_window);
    if (p->attn_softcap > 0.0f) key(k, sizeof k, a, "attn_logit_softcapping"), qr_gguf_stream_set_f32(s, k, p->attn_softcap);
    if (p->final_softcap > 0.0f)
        key(k, sizeof k, a, "final_logit_softcapping"), qr_gguf_stream_set_f32(s, k, p->final_softcap);
}

typedef struct synth_arch {
    const char *name;
    bool (*tensors)(const qr_synth_preset *p, tensor_list *l);
    void (*hparams)(const qr_synth_preset *p, qr_gguf_stream *s);
} synth_arch;

static const synth_arch archs[] = {
    {"llama", llama_tensors, qr_synth_llama_hparams},
    {"gemma3", gemma3_tensors, gemma3_hparams},
    {"bert", bert_tensors, bert_hparams},
    {"nomic-bert", bert_tensors, bert_hparams},
    /* MoE and hybrid rows: synth_hybrid.c */
    {"granite", qr_synth_hybrid_tensors, qr_synth_hybrid_hparams},
    {"granitehybrid", qr_synth_hybrid_tensors, qr_synth_hybrid_hparams},
    {"nemotron_h", qr_synth_hybrid_tensors, qr_synth_hybrid_hparams},
    {"nemotron_h_moe", qr_synth_hybrid_tensors, qr_synth_hybrid_hparams},
    {"gpt-oss", qr_synth_hybrid_tensors, qr_synth_hybrid_hparams},
    {"nemotron", qr_synth_hybrid_tensors, qr_synth_hybrid_hparams},
    /* the Qwen family (synth_hybrid.c) */
    {"qwen2", qr_synth_hybrid_tensors, qr_synth_hybrid_hparams},
    {"qwen3", qr_synth_hybrid_tensors, qr_synth_hybrid_hparams},
    {"qwen3moe", qr_synth_hybrid_tensors, qr_synth_hybrid_hparams},
    {"qwen2moe", qr_synth_hybrid_tensors, qr_synth_hybrid_hparams},
    /* issue 30 part 2 */
    {"phi3", qr_synth_phi3_tensors, qr_synth_phi3_hparams},
    {"gemma2", gemma3_tensors, gemma3_hparams},
    /* issue 30 part 3 */
    {"olmo2", qr_synth_post_tensors, qr_synth_post_hparams},
    {"glm4", qr_synth_post_tensors, qr_synth_post_hparams},
    {"granitemoe", qr_synth_hybrid_tensors, qr_synth_hybrid_hparams},
    {"mistral3", llama_tensors, qr_synth_llama_hparams},
    {"deepseek2", qr_synth_deepseek2_tensors, qr_synth_deepseek2_hparams},
    /* EAGLE-3 heads (synth_eagle3.c): the preset is the target's */
    {"eagle3", qr_synth_eagle3_tensors, qr_synth_eagle3_hparams},
};

static const synth_arch *find_arch(const char *name) {
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (!strcmp(archs[i].name, name)) return &archs[i];
    return NULL;
}

bool qr_synth_arch_supported(const char *arch) { return arch && find_arch(arch) != NULL; }

/* ---- values ---------------------------------------------------------------------------------- */

static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t name_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* Irwin-Hall(4): the sum of four 16-bit uniforms, centred and scaled to unit variance. Exact integer
 * arithmetic and one float multiply, so every build produces the same bits. */
static inline float approx_normal(uint64_t r) {
    int32_t s = (int32_t)(r & 0xffff) + (int32_t)((r >> 16) & 0xffff) + (int32_t)((r >> 32) & 0xffff) + (int32_t)(r >> 48);
    /* each 16-bit value k stands for (k + 0.5) / 65536; the mean of the sum is 2 */
    return (float)(2 * s + 4 - 4 * 65536) * (float)(1.7320508075688772 / 131072.0);
}

/* LongRoPE factors for n rotary pairs, smooth in the pair index as trained ones are: long from 1 (the fast
 * pairs) up to rope_factor (the slow ones), short within a few percent of 1. */
static void rope_longrope(const qr_synth_preset *p, bool long_f, float *out, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const double t = n > 1 ? (double)i / (double)(n - 1) : 0.0;
        out[i] = (float)(long_f ? 1.0 + (p->rope_factor - 1.0) * t * t : 1.0 + 0.05 * t);
    }
}

/* Llama 3.1 frequency factors for head_dim/2 rotary pairs. */
static void rope_llama3(const qr_synth_preset *p, float *out, int64_t n) {
    double lo_wavelen = (double)p->rope_orig_ctx / p->rope_low_freq_factor;
    double hi_wavelen = (double)p->rope_orig_ctx / p->rope_high_freq_factor;
    for (int64_t i = 0; i < n; i++) {
        double freq = 1.0 / pow((double)p->rope_theta, (double)(2 * i) / (double)p->head_dim);
        double wavelen = 2.0 * M_PI / freq;
        double f;
        if (wavelen < hi_wavelen) f = 1.0;
        else if (wavelen > lo_wavelen) f = p->rope_factor;
        else {
            double smooth = ((double)p->rope_orig_ctx / wavelen - p->rope_low_freq_factor) /
                            (p->rope_high_freq_factor - p->rope_low_freq_factor);
            f = 1.0 / ((1.0 - smooth) / p->rope_factor + smooth);
        }
        out[i] = (float)f;
    }
}

typedef struct gen_ctx {
    const qr_synth_preset *preset;
    const synth_tensor *t;
    uint64_t tensor_seed;
    int64_t row0;        /* first row of the chunk */
    int64_t n_per_row;
    float *f32;          /* [chunk rows][n_per_row] */
    uint8_t *enc;        /* encoded chunk */
    size_t enc_row;      /* bytes per encoded row */
    bool round_f16;      /* round through F16 first (the "converted to F16, then quantized" path) */
} gen_ctx;

static void gen_range(void *arg, int64_t begin, int64_t end) {
    gen_ctx *c = arg;
    const synth_tensor *t = c->t;
    int64_t n = c->n_per_row;
    if (t->init == INIT_D2T) { /* token ids, written as stored (a 1-D tensor: one row) */
        for (int64_t r = begin; r < end; r++) qr_synth_eagle3_d2t(c->preset, c->enc + (size_t)r * c->enc_row, n);
        return;
    }
    for (int64_t r = begin; r < end; r++) {
        float *x = c->f32 + r * n;
        if (t->init == INIT_ROPE_LLAMA3) {
            rope_llama3(c->preset, x, n);
            continue;
        }
        if (t->init == INIT_ROPE_LONG || t->init == INIT_ROPE_SHORT) {
            rope_longrope(c->preset, t->init == INIT_ROPE_LONG, x, n);
            continue;
        }
        uint64_t st = c->tensor_seed ^ ((uint64_t)(c->row0 + r) * 0xd1b54a32d192ed03ull);
        splitmix(&st);
        for (int64_t i = 0; i < n; i++) {
            float z = approx_normal(splitmix(&st));
            x[i] = t->init == INIT_NORM ? t->center + t->scale * z : t->scale * z;
        }
        if (c->round_f16) qr_quant_round_f16(x, n);
    }
    qr_quant_encode_rows(t->type, c->f32 + begin * n, c->enc + (size_t)begin * c->enc_row, end - begin, n);
}

static int cmp_synth_tensor(const void *a, const void *b) {
    return qr_quant_tensor_order_cmp(((const synth_tensor *)a)->name, ((const synth_tensor *)b)->name);
}

/* ---- the writer ------------------------------------------------------------------------------ */

qr_status qr_synth_write(const qr_synth_options *o, const char *path, qr_synth_stats *stats, char *err, size_t err_len) {
    qr_status st = QR_OK;
    tensor_list tl = {0};
    qr_synth_vocab vocab = {0};
    qr_gguf *tok_src = NULL; /* --tokenizer-from */
    qr_gguf_stream *out = NULL;
    const char **names = NULL;
    float *f32 = NULL;
    uint8_t *enc = NULL;
    qr_synth_stats local = {0};
    double t0 = qr_time_s();

    if (!o || !o->preset) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "synth: no preset given");
    if (!path || !path[0]) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "synth: no output path given");
    if (o->arch && !qr_synth_arch_supported(o->arch)) {
        char known[512] = "";
        for (size_t i = 0, used = 0; i < sizeof archs / sizeof archs[0] && used < sizeof known; i++)
            used += (size_t)snprintf(known + used, sizeof known - used, "%s%s", i ? ", " : "", archs[i].name);
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "synth: unknown architecture '%s' (known: %s)", o->arch, known);
    }
    /* an EAGLE-3 head: the preset is its target's (of eagle3.target_arch) */
    const bool eagle3 = o->arch && !strcmp(o->arch, "eagle3");
    const char *preset_arch = eagle3 ? (o->eagle3.target_arch ? o->eagle3.target_arch : "llama") : o->arch;
    if (eagle3 && (!qr_synth_arch_supported(preset_arch) || !strcmp(preset_arch, "eagle3")))
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "synth: eagle3: unknown target architecture '%s'", preset_arch);
    const qr_synth_preset *p = qr_synth_find_preset(preset_arch, o->preset);
    if (!p && !o->arch) {
        for (size_t i = 0; i < qr_synth_n_presets(); i++)
            if (!strcmp(qr_synth_preset_at(i)->name, o->preset))
                return qr_errf(err, err_len, QR_ERR_INVALID_ARG,
                               "synth: preset '%s' exists for several architectures; pass --arch", o->preset);
    }
    if (!p) {
        char list[512] = "";
        size_t used = 0;
        for (size_t i = 0; i < qr_synth_n_presets(); i++) {
            const qr_synth_preset *q = qr_synth_preset_at(i);
            if (preset_arch && strcmp(q->arch, preset_arch)) continue;
            used += (size_t)snprintf(list + used, used < sizeof list ? sizeof list - used : 0, "%s%s/%s", used ? ", " : "",
                                     q->arch, q->name);
            if (used >= sizeof list) break;
        }
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "synth: unknown preset '%s'%s%s%s (known: %s)", o->preset,
                       preset_arch ? " for architecture '" : "", preset_arch ? preset_arch : "", preset_arch ? "'" : "",
                       list);
    }
    qr_synth_preset resized;
    if (o->n_layer > 0) {
        if (o->n_layer > 4096) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "synth: --layers %d is over 4096", o->n_layer);
        if (p->layers && strlen(p->layers) < (size_t)o->n_layer)
            return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "synth: preset %s has a %zu-layer pattern: --layers %d is over it",
                           p->name, strlen(p->layers), o->n_layer);
        resized = *p;
        resized.n_layer = (uint32_t)o->n_layer;
        p = &resized;
    }
    qr_synth_preset head;
    if (eagle3) {
        if ((st = qr_synth_eagle3_preset(p, &o->eagle3, &head, err, err_len)) != QR_OK) return st;
        p = &head;
    }
    const char *type_name = o->type ? o->type : "F16";
    const qr_ftype_info *ft = qr_ftype_from_name(type_name);
    if (!ft) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "synth: unknown type '%s'; expected one of: %s", type_name,
                            qr_ftype_names());
    if (!qr_quant_can_encode(ft->base))
        return qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "synth: no quantizer for %s", qr_type_name(ft->base));
    const synth_arch *arch = find_arch(p->arch);
    if (!arch) return qr_errf(err, err_len, QR_ERR_INTERNAL, "synth: preset %s has no architecture row", p->name);
    int n_threads = o->n_threads > 0 ? o->n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n_threads < 1) n_threads = 1;

    /* tensors, in llama.cpp's order, with their types */
    if (!arch->tensors(p, &tl)) goto nomem;
    qsort(tl.t, tl.n, sizeof *tl.t, cmp_synth_tensor);
    names = malloc(sizeof *names * tl.n);
    if (!names) goto nomem;
    for (size_t i = 0; i < tl.n; i++) names[i] = tl.t[i].name;
    qr_quant_model_info mi = {.n_layer = (int32_t)p->n_layer, .n_head = (int32_t)p->n_head,
                              .n_head_kv = (int32_t)p->n_head_kv, .n_expert = (int32_t)p->n_expert};
    snprintf(mi.arch, sizeof mi.arch, "%s", p->arch);
    qr_quant_plan plan;
    qr_quant_plan_init(&plan, ft, o->pure, &mi, names, tl.n);
    for (size_t i = 0; i < tl.n; i++) {
        synth_tensor *t = &tl.t[i];
        if (t->init == INIT_D2T) { /* token ids: never quantized */
            t->type = QR_TYPE_I64;
            continue;
        }
        char note[256];
        t->type = qr_quant_plan_pick(&plan, t->name, t->n_dims, t->ne, QR_TYPE_F32, note, sizeof note);
        if (note[0]) qr_log(QR_LOG_DEBUG, "synth: %s", note);
        if (!qr_quant_can_encode(t->type)) {
            st = qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "synth: no quantizer for %s (tensor %s)",
                         qr_type_name(t->type), t->name);
            goto done;
        }
    }

    if (o->tokenizer_from) {
        if ((st = qr_gguf_open(o->tokenizer_from, &tok_src, err, err_len)) != QR_OK) goto done;
        const qr_gguf_value *toks = qr_gguf_get_arr(tok_src, "tokenizer.ggml.tokens", QR_GGUF_STRING);
        if (!toks || toks->arr.count != p->n_vocab) {
            st = qr_errf(err, err_len, QR_ERR_INVALID_ARG, "synth: --tokenizer-from %s: %s %llu tokens, the preset %s/%s "
                         "has %u", o->tokenizer_from, toks ? "its tokenizer has" : "no tokenizer.ggml.tokens:",
                         toks ? (unsigned long long)toks->arr.count : 0ULL, p->arch, p->name, p->n_vocab);
            goto done;
        }
    } else {
        st = qr_synth_vocab_build(p->vocab, p->n_vocab, &vocab, err, err_len);
        if (st != QR_OK) goto done;
    }

    /* key/values: general, architecture, tokenizer, then the quantization keys last (as llama-quantize
     * leaves them, so that synth Q == quantize(synth F16) byte for byte) */
    out = qr_gguf_stream_create(QR_GGUF_DEFAULT_ALIGNMENT);
    if (!out) goto nomem;
    char name[128];
    /* phi3: not "phi3" in the name, where llama.cpp's vocabulary loader looks for Phi-3's special tokens
     * (</s>, <unk>, <s>, <|endoftext|>), which the synthetic vocabularies do not have */
    snprintf(name, sizeof name, "quarrel synth %s %s", strcmp(p->arch, "phi3") ? p->arch : "phi 3", p->name);
    qr_gguf_stream_set_str(out, "general.architecture", p->arch);
    qr_gguf_stream_set_str(out, "general.type", "model");
    qr_gguf_stream_set_str(out, "general.name", name);
    qr_gguf_stream_set_str(out, "quarrel.synth.preset", p->name);
    qr_gguf_stream_set_u64(out, "quarrel.synth.seed", o->seed);
    arch->hparams(p, out);
    if (o->pooling_type > 0 || arch->tensors == bert_tensors) { /* embedding models */
        char pk[96];
        key(pk, sizeof pk, p->arch, "pooling_type");
        qr_gguf_stream_set_u32(out, pk, (uint32_t)(o->pooling_type > 0 ? o->pooling_type : 1));
    }
    if (tok_src) { /* a real model's tokenizer, key for key */
        for (uint64_t i = 0; i < tok_src->n_kv; i++)
            if (tok_src->kv[i].key.len > 10 && !memcmp(tok_src->kv[i].key.data, "tokenizer.", 10))
                qr_gguf_stream_set_value(out, tok_src->kv[i].key, &tok_src->kv[i].value);
    } else {
        qr_gguf_stream_set_str(out, "tokenizer.ggml.model", vocab.model);
        qr_gguf_stream_set_str(out, "tokenizer.ggml.pre", p->bpe_pre ? p->bpe_pre : "default");
        qr_gguf_stream_set_arr_str(out, "tokenizer.ggml.tokens", (const char *const *)vocab.tokens, vocab.n_tokens);
        if (vocab.scores) qr_gguf_stream_set_arr(out, "tokenizer.ggml.scores", QR_GGUF_F32, vocab.scores, vocab.n_tokens);
        qr_gguf_stream_set_arr(out, "tokenizer.ggml.token_type", QR_GGUF_I32, vocab.token_types, vocab.n_tokens);
        if (vocab.n_merges)
            qr_gguf_stream_set_arr_str(out, "tokenizer.ggml.merges", (const char *const *)vocab.merges, vocab.n_merges);
        qr_gguf_stream_set_u32(out, "tokenizer.ggml.bos_token_id", (uint32_t)vocab.bos);
        qr_gguf_stream_set_u32(out, "tokenizer.ggml.eos_token_id", (uint32_t)vocab.eos);
        /* Explicit, as real converters write it: with several end-of-turn texts in the vocabulary,
         * llama.cpp's own auto-detection depends on its hash map's iteration order. */
        qr_gguf_stream_set_u32(out, "tokenizer.ggml.eot_token_id", (uint32_t)vocab.eot);
        if (vocab.unk >= 0) qr_gguf_stream_set_u32(out, "tokenizer.ggml.unknown_token_id", (uint32_t)vocab.unk);
        qr_gguf_stream_set_u32(out, "tokenizer.ggml.padding_token_id", (uint32_t)vocab.pad);
        qr_gguf_stream_set_bool(out, "tokenizer.ggml.add_bos_token", true);
        qr_gguf_stream_set_bool(out, "tokenizer.ggml.add_eos_token", false);
        qr_gguf_stream_set_bool(out, "tokenizer.ggml.add_space_prefix", false);
        qr_gguf_stream_set_str(out, "tokenizer.chat_template", vocab.chat_template);
    }
    qr_gguf_stream_set_u32(out, "general.quantization_version", QUANTIZATION_VERSION);
    qr_gguf_stream_set_u32(out, "general.file_type", (uint32_t)ft->llama_ftype);
    for (size_t i = 0; i < tl.n; i++) {
        qr_gguf_stream_add_tensor(out, tl.t[i].name, tl.t[i].type, tl.t[i].n_dims, tl.t[i].ne);
        local.n_params += (uint64_t)(tl.t[i].ne[0] * tl.t[i].ne[1] * tl.t[i].ne[2] * tl.t[i].ne[3]);
    }
    local.n_tensors = tl.n;
    qr_synth_vocab_free(&vocab); /* copied into the header buffer */
    st = qr_gguf_stream_begin(out, path, err, err_len);
    if (st != QR_OK) goto done;

    qr_progress prog;
    qr_progress_begin(&prog, "synth", local.n_params);
    if (!o->progress) prog.enabled = false;
    uint64_t done_params = 0;
    f32 = malloc(sizeof *f32 * CHUNK_FLOATS);
    if (!f32) goto nomem;
    size_t enc_cap = 0;
    uint64_t seed_mix = o->seed * 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < tl.n; i++) {
        const synth_tensor *t = &tl.t[i];
        int64_t n_per_row = t->ne[0], n_rows = t->ne[1] * t->ne[2] * t->ne[3];
        int64_t chunk_rows = (int64_t)(CHUNK_FLOATS / (uint64_t)n_per_row);
        if (chunk_rows < 1) {
            float *nf = realloc(f32, sizeof *f32 * (size_t)n_per_row);
            if (!nf) goto nomem;
            f32 = nf;
            chunk_rows = 1;
        }
        if (chunk_rows > n_rows) chunk_rows = n_rows;
        gen_ctx c = {.preset = p, .t = t, .n_per_row = n_per_row, .f32 = f32,
                     .enc_row = qr_type_row_size(t->type, n_per_row),
                     .round_f16 = qr_type_table[t->type].quantized};
        uint64_t hs = name_hash(t->name) ^ seed_mix;
        c.tensor_seed = splitmix(&hs);
        size_t need = c.enc_row * (size_t)chunk_rows;
        if (need > enc_cap) {
            uint8_t *ne = realloc(enc, need);
            if (!ne) goto nomem;
            enc = ne;
            enc_cap = need;
        }
        c.enc = enc;
        for (int64_t r0 = 0; r0 < n_rows; r0 += chunk_rows) {
            int64_t rows = n_rows - r0 < chunk_rows ? n_rows - r0 : chunk_rows;
            c.row0 = r0;
            qr_parallel_for(n_threads, rows, gen_range, &c);
            st = qr_gguf_stream_write(out, enc, c.enc_row * (size_t)rows, err, err_len);
            if (st != QR_OK) goto done;
            done_params += (uint64_t)(rows * n_per_row);
            qr_progress_update(&prog, done_params);
        }
    }
    st = qr_gguf_stream_finish(out, err, err_len);
    qr_progress_end(&prog);
    if (st == QR_OK) local.file_size = qr_gguf_stream_file_size(out);
    goto done;

nomem:
    st = qr_errf(err, err_len, QR_ERR_NOMEM, "synth: out of memory");
done:
    local.seconds = qr_time_s() - t0;
    if (stats) *stats = local;
    qr_synth_vocab_free(&vocab);
    qr_gguf_close(tok_src);
    qr_gguf_stream_free(out);
    free(names);
    free(tl.t);
    free(f32);
    free(enc);
    return st;
}
