/* synth_hybrid.c — `quarrel synth` rows of the MoE and hybrid families: llama with experts (Mixtral),
 * granite (3.x), granitehybrid (Granite 4.0-H), nemotron_h / nemotron_h_moe (Nemotron-H,
 * Nemotron-3-Nano), gpt-oss, and the Qwen family (qwen2 and qwen2moe with q/k/v biases, qwen3 and
 * qwen3moe with per-head q/k norms, qwen2moe's gated shared expert), with llama.cpp's tensor names,
 * shapes and metadata keys. The layer
 * pattern is the preset's `layers` string, written to the file as the per-layer head_count_kv and
 * feed_forward_length arrays that llama.cpp reads it back from.
 *
 * Initialisation keeps the random models well-conditioned: routers ~ N(0, 1/d) so that routing is
 * neither uniform nor one-hot, A = -(exp-ish values in [0.5, 7.5]) so every state decays,
 * dt biases around log(0.01) (softplus(dt) of 1e-3 .. 1e-1, the range of trained Mamba2 models),
 * D around 1, conv weights of unit-ish size. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert/synth_internal.h"

#define NORM_SCALE 0.1f
#define BIAS_SCALE 0.1f

static float inv_sqrtf(int64_t n) { return (float)(1.0 / sqrt((double)n)); }

static char kind_of(const qr_synth_preset *p, uint32_t il) {
    if (!p->layers || il >= strlen(p->layers)) return 'A';
    return p->layers[il];
}

static bool is_nemotron_h(const qr_synth_preset *p) { return !strncmp(p->arch, "nemotron_h", 10); }

typedef struct tl_ctx {
    tensor_list *l;
    bool ok;
} tl_ctx;

static void add(tl_ctx *c, init_kind init, float scale, float center, uint32_t nd, int64_t a, int64_t b, int64_t d,
                const char *fmt, int il) {
    char name[64];
    snprintf(name, sizeof name, fmt, il);
    c->ok = c->ok && qr_synth_add(c->l, init, scale, center, nd, a, b, d, name);
}

#define W(scale, nd, a, b, d, fmt) add(c, INIT_NORMAL, scale, 0.0f, nd, a, b, d, fmt, il)
#define N(nd, a, fmt) add(c, INIT_NORM, NORM_SCALE, 1.0f, nd, a, 1, 1, fmt, il)

/* Which attention extras an architecture's files have. */
typedef struct attn_extras {
    bool qkv_bias; /* attn_q/k/v.bias (gpt-oss, qwen2, qwen2moe) */
    bool out_bias; /* attn_output.bias (gpt-oss) */
    bool qk_norm;  /* attn_q_norm / attn_k_norm over head_dim (qwen3, qwen3moe) */
} attn_extras;

static void attention(const qr_synth_preset *p, tl_ctx *c, int il, attn_extras x) {
    const int64_t d = p->n_embd, q = (int64_t)p->n_head * p->head_dim, kv = (int64_t)p->n_head_kv * p->head_dim;
    W(inv_sqrtf(d), 2, d, q, 1, "blk.%d.attn_q.weight");
    W(inv_sqrtf(d), 2, d, kv, 1, "blk.%d.attn_k.weight");
    W(inv_sqrtf(d), 2, d, kv, 1, "blk.%d.attn_v.weight");
    W(inv_sqrtf(q), 2, q, d, 1, "blk.%d.attn_output.weight");
    if (x.qkv_bias) {
        W(BIAS_SCALE, 1, q, 1, 1, "blk.%d.attn_q.bias");
        W(BIAS_SCALE, 1, kv, 1, 1, "blk.%d.attn_k.bias");
        W(BIAS_SCALE, 1, kv, 1, 1, "blk.%d.attn_v.bias");
    }
    if (x.out_bias) W(BIAS_SCALE, 1, d, 1, 1, "blk.%d.attn_output.bias");
    if (x.qk_norm) {
        N(1, p->head_dim, "blk.%d.attn_q_norm.weight");
        N(1, p->head_dim, "blk.%d.attn_k_norm.weight");
    }
}

static void mamba2(const qr_synth_preset *p, tl_ctx *c, int il) {
    const int64_t d = p->n_embd, di = p->ssm_d_inner, ng = p->ssm_n_group, ds = p->ssm_d_state, nh = p->ssm_n_head;
    const int64_t conv_dim = di + 2 * ng * ds, d_in_proj = 2 * di + 2 * ng * ds + nh;
    W(inv_sqrtf(d), 2, d, d_in_proj, 1, "blk.%d.ssm_in.weight");
    W(0.5f, 2, p->ssm_d_conv, conv_dim, 1, "blk.%d.ssm_conv1d.weight");
    W(BIAS_SCALE, 1, conv_dim, 1, 1, "blk.%d.ssm_conv1d.bias");
    add(c, INIT_NORM, 1.0f, -4.6f, 1, nh, 1, 1, "blk.%d.ssm_dt.bias", il); /* softplus: ~1e-3 .. 0.3 */
    add(c, INIT_NORM, 1.0f, -4.0f, 2, 1, nh, 1, "blk.%d.ssm_a", il);       /* A in [-7.5, -0.5] */
    add(c, INIT_NORM, 0.1f, 1.0f, 2, 1, nh, 1, "blk.%d.ssm_d", il);
    add(c, INIT_NORM, NORM_SCALE, 1.0f, 2, di / ng, ng, 1, "blk.%d.ssm_norm.weight", il);
    W(inv_sqrtf(di), 2, di, d, 1, "blk.%d.ssm_out.weight");
}

/* MoE FFN: router, experts (gate only when gated), optional shared expert (with qwen2moe's sigmoid gate, a
 * [n_embd, 1] matrix as its converter writes it), gpt-oss biases. */
static void moe(const qr_synth_preset *p, tl_ctx *c, int il, bool gated, bool biases, bool sel_bias) {
    const int64_t d = p->n_embd, ne = p->n_expert, f = p->n_ff_exp ? p->n_ff_exp : p->n_ff, s = p->n_ff_shexp;
    W(inv_sqrtf(d), 2, d, ne, 1, "blk.%d.ffn_gate_inp.weight");
    if (biases) W(BIAS_SCALE, 1, ne, 1, 1, "blk.%d.ffn_gate_inp.bias");
    if (sel_bias) W(BIAS_SCALE, 1, ne, 1, 1, "blk.%d.exp_probs_b.bias");
    if (gated) W(inv_sqrtf(d), 3, d, f, ne, "blk.%d.ffn_gate_exps.weight");
    W(inv_sqrtf(d), 3, d, f, ne, "blk.%d.ffn_up_exps.weight");
    W(inv_sqrtf(f), 3, f, d, ne, "blk.%d.ffn_down_exps.weight");
    if (biases) {
        W(BIAS_SCALE, 2, f, ne, 1, "blk.%d.ffn_gate_exps.bias");
        W(BIAS_SCALE, 2, f, ne, 1, "blk.%d.ffn_up_exps.bias");
        W(BIAS_SCALE, 2, d, ne, 1, "blk.%d.ffn_down_exps.bias");
    }
    if (s > 0) {
        if (gated) W(inv_sqrtf(d), 2, d, s, 1, "blk.%d.ffn_gate_shexp.weight");
        W(inv_sqrtf(d), 2, d, s, 1, "blk.%d.ffn_up_shexp.weight");
        W(inv_sqrtf(s), 2, s, d, 1, "blk.%d.ffn_down_shexp.weight");
        if (!strcmp(p->arch, "qwen2moe")) W(inv_sqrtf(d), 2, d, 1, 1, "blk.%d.ffn_gate_inp_shexp.weight");
    }
}

static void dense(const qr_synth_preset *p, tl_ctx *c, int il, bool gated) {
    const int64_t d = p->n_embd, f = p->n_ff;
    if (gated) W(inv_sqrtf(d), 2, d, f, 1, "blk.%d.ffn_gate.weight");
    W(inv_sqrtf(d), 2, d, f, 1, "blk.%d.ffn_up.weight");
    W(inv_sqrtf(f), 2, f, d, 1, "blk.%d.ffn_down.weight");
}

bool qr_synth_hybrid_tensors(const qr_synth_preset *p, tensor_list *l) {
    tl_ctx cc = {.l = l, .ok = true}, *c = &cc;
    const int64_t d = p->n_embd;
    const bool gpt_oss = !strcmp(p->arch, "gpt-oss"), nemo = is_nemotron_h(p), mini = !strcmp(p->arch, "nemotron");
    const attn_extras ax = {.qkv_bias = gpt_oss || !strcmp(p->arch, "qwen2") || !strcmp(p->arch, "qwen2moe"),
                            .out_bias = gpt_oss, .qk_norm = !strncmp(p->arch, "qwen3", 5)};
    int il = 0;
    W(p->tied_output ? inv_sqrtf(d) : 1.0f, 2, d, p->n_vocab, 1, "token_embd.weight");
    for (il = 0; il < (int)p->n_layer; il++) {
        const char k = kind_of(p, (uint32_t)il);
        N(1, d, "blk.%d.attn_norm.weight");
        if (mini) W(BIAS_SCALE, 1, d, 1, 1, "blk.%d.attn_norm.bias");
        if (k == 'M') mamba2(p, c, il);
        else if (k == 'A') attention(p, c, il, ax);
        if (gpt_oss) add(c, INIT_NORMAL, 1.0f, 0.0f, 1, p->n_head, 1, 1, "blk.%d.attn_sinks.weight", il);
        if (nemo) { /* FFN-only blocks */
            if (k == 'F') dense(p, c, il, false);
            else if (k == 'E') moe(p, c, il, false, false, true);
            continue;
        }
        if (gpt_oss) N(1, d, "blk.%d.post_attention_norm.weight");
        else N(1, d, "blk.%d.ffn_norm.weight");
        if (mini) W(BIAS_SCALE, 1, d, 1, 1, "blk.%d.ffn_norm.bias");
        if (p->n_expert > 0) moe(p, c, il, true, gpt_oss, false);
        else dense(p, c, il, !mini);
    }
    il = 0;
    N(1, d, "output_norm.weight");
    if (mini) W(BIAS_SCALE, 1, d, 1, 1, "output_norm.bias");
    /* a sharper head than the dense rows (2/sqrt(d)): routing and scan round-off must not decide near-ties */
    if (!p->tied_output) W(4.0f * inv_sqrtf(d), 2, d, p->n_vocab, 1, "output.weight");
    return c->ok;
}

static void key(char *buf, size_t n, const char *arch, const char *suffix) { snprintf(buf, n, "%s.%s", arch, suffix); }

void qr_synth_hybrid_hparams(const qr_synth_preset *p, qr_gguf_stream *s) {
    char k[128];
    const char *a = p->arch;
    const bool llama = !strcmp(a, "llama"), gpt_oss = !strcmp(a, "gpt-oss"), nemo = is_nemotron_h(p);
    const bool granite = !strncmp(a, "granite", 7), hybrid = p->layers != NULL, mini = !strcmp(a, "nemotron");
    if (p->n_expert > 0) {
        key(k, sizeof k, a, "expert_count"), qr_gguf_stream_set_u32(s, k, p->n_expert);
        key(k, sizeof k, a, "expert_used_count"), qr_gguf_stream_set_u32(s, k, p->n_expert_used);
        if (!llama) key(k, sizeof k, a, "expert_feed_forward_length"), qr_gguf_stream_set_u32(s, k, p->n_ff_exp);
        if (p->n_ff_shexp)
            key(k, sizeof k, a, "expert_shared_feed_forward_length"), qr_gguf_stream_set_u32(s, k, p->n_ff_shexp);
        if (nemo) {
            key(k, sizeof k, a, "expert_shared_count"), qr_gguf_stream_set_u32(s, k, 1);
            key(k, sizeof k, a, "expert_weights_norm"), qr_gguf_stream_set_bool(s, k, true);
            key(k, sizeof k, a, "expert_weights_scale"), qr_gguf_stream_set_f32(s, k, 2.5f);
        }
    }
    if (llama) return; /* the rest is written by synth.c's llama row */
    key(k, sizeof k, a, "context_length"), qr_gguf_stream_set_u32(s, k, p->n_ctx);
    key(k, sizeof k, a, "embedding_length"), qr_gguf_stream_set_u32(s, k, p->n_embd);
    key(k, sizeof k, a, "block_count"), qr_gguf_stream_set_u32(s, k, p->n_layer);
    key(k, sizeof k, a, "attention.head_count"), qr_gguf_stream_set_u32(s, k, p->n_head);
    key(k, sizeof k, a, "attention.key_length"), qr_gguf_stream_set_u32(s, k, p->head_dim);
    key(k, sizeof k, a, "attention.value_length"), qr_gguf_stream_set_u32(s, k, p->head_dim);
    if (!mini) key(k, sizeof k, a, "attention.layer_norm_rms_epsilon"), qr_gguf_stream_set_f32(s, k, p->rms_eps);
    key(k, sizeof k, a, "vocab_size"), qr_gguf_stream_set_u32(s, k, p->n_vocab);
    if (nemo || mini) /* nemotron: LayerNorm; llama.cpp's nemotron_h loader also requires this key */
        key(k, sizeof k, a, "attention.layer_norm_epsilon"), qr_gguf_stream_set_f32(s, k, p->rms_eps);
    if (!nemo) {
        key(k, sizeof k, a, "rope.freq_base"), qr_gguf_stream_set_f32(s, k, p->rope_theta);
        /* Nemotron-Mini rotates half of each head (partial_rotary_factor 0.5) */
        key(k, sizeof k, a, "rope.dimension_count"), qr_gguf_stream_set_u32(s, k, mini ? p->head_dim / 2 : p->head_dim);
    }
    if (hybrid) { /* per-layer head_count_kv (0 = no attention) and feed_forward_length (0 = no FFN) */
        uint32_t *kv = calloc(p->n_layer, sizeof(uint32_t)), *ff = calloc(p->n_layer, sizeof(uint32_t));
        if (kv && ff) {
            for (uint32_t il = 0; il < p->n_layer; il++) {
                const char c = kind_of(p, il);
                kv[il] = c == 'A' ? p->n_head_kv : 0;
                ff[il] = nemo ? (c == 'F' || c == 'E' ? (c == 'E' ? p->n_ff_exp : p->n_ff) : 0) : p->n_ff;
            }
            key(k, sizeof k, a, "attention.head_count_kv"), qr_gguf_stream_set_arr(s, k, QR_GGUF_U32, kv, p->n_layer);
            key(k, sizeof k, a, "feed_forward_length"), qr_gguf_stream_set_arr(s, k, QR_GGUF_U32, ff, p->n_layer);
        }
        free(kv);
        free(ff);
        key(k, sizeof k, a, "ssm.conv_kernel"), qr_gguf_stream_set_u32(s, k, p->ssm_d_conv);
        key(k, sizeof k, a, "ssm.inner_size"), qr_gguf_stream_set_u32(s, k, p->ssm_d_inner);
        key(k, sizeof k, a, "ssm.state_size"), qr_gguf_stream_set_u32(s, k, p->ssm_d_state);
        key(k, sizeof k, a, "ssm.time_step_rank"), qr_gguf_stream_set_u32(s, k, p->ssm_n_head);
        key(k, sizeof k, a, "ssm.group_count"), qr_gguf_stream_set_u32(s, k, p->ssm_n_group);
    } else {
        key(k, sizeof k, a, "attention.head_count_kv"), qr_gguf_stream_set_u32(s, k, p->n_head_kv);
        key(k, sizeof k, a, "feed_forward_length"), qr_gguf_stream_set_u32(s, k, p->n_ff);
    }
    if (granite) {
        key(k, sizeof k, a, "embedding_scale"), qr_gguf_stream_set_f32(s, k, p->embedding_scale);
        key(k, sizeof k, a, "residual_scale"), qr_gguf_stream_set_f32(s, k, p->residual_scale);
        key(k, sizeof k, a, "logit_scale"), qr_gguf_stream_set_f32(s, k, p->logit_scale);
        key(k, sizeof k, a, "attention.scale"), qr_gguf_stream_set_f32(s, k, p->attention_scale);
        if (p->no_rope) key(k, sizeof k, a, "rope.scaling.finetuned"), qr_gguf_stream_set_bool(s, k, false);
    }
    if (gpt_oss) {
        key(k, sizeof k, a, "attention.sliding_window"), qr_gguf_stream_set_u32(s, k, p->sliding_window);
        if (p->yarn_factor > 0.0f) {
            key(k, sizeof k, a, "rope.scaling.type"), qr_gguf_stream_set_str(s, k, "yarn");
            key(k, sizeof k, a, "rope.scaling.factor"), qr_gguf_stream_set_f32(s, k, p->yarn_factor);
            key(k, sizeof k, a, "rope.scaling.original_context_length"), qr_gguf_stream_set_u32(s, k, p->yarn_orig_ctx);
        }
    }
}
