/* synth.h — deterministic random-weight GGUF models with real shapes and a working tokenizer.
 *
 * `quarrel synth` writes a model that llama.cpp and quarrel both load: the hyper-parameter keys,
 * tensor names and shapes of a real architecture, random weights with a sensible scale (projection
 * weights ~ N(0, 1/fan_in), norms ~ 1 + N(0, 0.1^2)... bounded, so logits are neither flat nor
 * saturated) and a synthetic vocabulary (byte-level BPE, or SentencePiece-style for gemma3) of the
 * preset's size. The same arguments and seed give a byte-identical file on every run, whatever the
 * thread count. Quantized file types are produced as llama-quantize would produce them from the
 * F16 model: weights are rounded to F16 first, then quantized with the per-tensor rules of
 * quantize_model.h, so `synth --type Q4_K_M` equals `quantize (synth --type F16) Q4_K_M`.
 *
 * Presets are rows of a table (synth_presets.c); an architecture is a row of a second table that
 * knows its tensor list and hyper-parameter keys. New architectures are added as rows.
 */
#ifndef QR_CONVERT_SYNTH_H
#define QR_CONVERT_SYNTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quarrel.h"

typedef enum qr_synth_vocab_kind {
    QR_SYNTH_VOCAB_BPE = 0, /* tokenizer.ggml.model "gpt2": byte-level BPE with merges */
    QR_SYNTH_VOCAB_SPM = 1, /* tokenizer.ggml.model "llama": pieces with scores + <0xXX> byte fallback */
} qr_synth_vocab_kind;

typedef enum qr_synth_rope_scaling {
    QR_SYNTH_ROPE_NONE = 0,
    QR_SYNTH_ROPE_LLAMA3 = 1, /* Llama 3.1 frequency factors, stored as rope_freqs.weight */
    QR_SYNTH_ROPE_LONGROPE = 2, /* phi3's LongRoPE: rope_factors_long / rope_factors_short + attn_factor */
} qr_synth_rope_scaling;

/* One preset: the shapes of a model. */
typedef struct qr_synth_preset {
    const char *arch;            /* general.architecture: "llama", "gemma3" */
    const char *name;            /* "tiny", "smollm2-135m", ... */
    uint32_t n_layer;
    uint32_t n_embd;             /* d_model */
    uint32_t n_ff;               /* feed-forward width */
    uint32_t n_head, n_head_kv;  /* attention heads, key/value heads (GQA) */
    uint32_t head_dim;           /* per-head dimension */
    uint32_t n_vocab;
    uint32_t n_ctx;              /* context_length */
    float rope_theta;            /* rope.freq_base */
    float rms_eps;               /* attention.layer_norm_rms_epsilon */
    bool tied_output;            /* no output.weight: the token embedding is reused */
    qr_synth_rope_scaling rope_scaling;
    float rope_factor;           /* LLAMA3: factor (8); LONGROPE: the largest long factor */
    float rope_low_freq_factor;  /* LLAMA3: 1 */
    float rope_high_freq_factor; /* LLAMA3: 4 */
    uint32_t rope_orig_ctx;      /* LLAMA3, LONGROPE: original_max_position_embeddings (8192) */
    uint32_t sliding_window;     /* gemma3: attention.sliding_window */
    qr_synth_vocab_kind vocab;
    const char *bpe_pre;         /* tokenizer.ggml.pre */
    /* MoE and hybrid families (synth_hybrid.c); zero for the others */
    uint32_t n_expert, n_expert_used; /* expert_count, expert_used_count */
    uint32_t n_ff_exp, n_ff_shexp;    /* expert / shared-expert feed-forward widths (0 = none) */
    const char *layers;          /* per-layer kinds: 'M' Mamba2, 'A' attention, 'F' dense FFN, 'E' MoE FFN
                                  * (nemotron_h); granitehybrid: 'M' / 'A', each followed by the FFN */
    uint32_t ssm_d_conv, ssm_d_inner, ssm_d_state, ssm_n_head, ssm_n_group; /* Mamba2 */
    float embedding_scale, residual_scale, logit_scale, attention_scale; /* granite multipliers (0 = absent) */
    bool no_rope;                /* granite: rope.scaling.finetuned = false (NoPE) */
    float yarn_factor;           /* gpt-oss: rope.scaling.factor with type yarn (0 = none) */
    uint32_t yarn_orig_ctx;      /* gpt-oss: rope.scaling.original_context_length */
    /* issue 30 part 2 (phi3, gemma2, rope scaling) */
    uint32_t n_rot;              /* rope.dimension_count (0 = head_dim; phi-4-mini rotates 3/4 of each head) */
    float attn_softcap, final_softcap; /* gemma2: attn_logit_softcapping, final_logit_softcapping */
    /* issue 30 part 3 (mistral3) */
    float yarn_beta_fast, yarn_beta_slow; /* rope.scaling.yarn_beta_fast / _slow (written when > 0) */
    float yarn_log_mul;          /* rope.scaling.yarn_log_multiplier (written when > 0) */
    float attn_temp_scale;       /* attention.temperature_scale (written when > 0) */
    /* deepseek2 (multi-head latent attention; head_dim = key_length_mla, n_rot of it roped) */
    uint32_t q_lora, kv_lora;    /* attention.q_lora_rank (0: attn_q), attention.kv_lora_rank */
    uint32_t v_head_dim;         /* attention.value_length_mla */
    uint32_t n_expert_shared;    /* expert_shared_count (the shared expert is n_ff_exp * this wide) */
    uint32_t n_dense_lead;       /* leading_dense_block_count */
    uint32_t n_expert_groups, n_group_used; /* expert_group_count / expert_group_used_count (0: none) */
    uint32_t gating_func;        /* expert_gating_func: 1 softmax, 2 sigmoid (+ exp_probs_b) */
    bool expert_weights_norm;    /* expert_weights_norm */
    float expert_weights_scale;  /* expert_weights_scale (written when > 0) */
    /* EAGLE-3 heads (synth_eagle3.c): a head's preset is derived from its target's by qr_synth_write */
    uint32_t e3_target_embd;      /* eagle3.target_hidden_size: the target's n_embd */
    int32_t e3_target_layers[3];  /* eagle3.target_layers */
    uint32_t e3_draft_vocab;      /* the draft vocabulary Vd (output's rows, d2t's length); == n_vocab: no d2t */
    bool e3_no_token_embd;        /* no token_embd.weight (the target's is shared) */
    bool e3_no_output;            /* no output.weight (the target's is shared) */
    bool e3_norm_before_fc;       /* eagle3.norm_before_fc = true with enc.output_norm.weight */
} qr_synth_preset;

/* The preset `name` of `arch`; arch may be NULL when the name is unique. NULL when not found. */
const qr_synth_preset *qr_synth_find_preset(const char *arch, const char *name);
/* All presets, for listings. */
size_t qr_synth_n_presets(void);
const qr_synth_preset *qr_synth_preset_at(size_t i);
/* True when synth knows how to lay out tensors for `arch`. */
bool qr_synth_arch_supported(const char *arch);

/* ---- vocabulary ------------------------------------------------------------------------------ */

typedef struct qr_synth_vocab {
    uint32_t n_tokens;
    char **tokens;        /* [n_tokens] NUL-terminated UTF-8 (GGUF display form) */
    int32_t *token_types; /* [n_tokens] 1 normal, 2 unknown, 3 control, 6 byte */
    float *scores;        /* [n_tokens] SPM scores, NULL for BPE */
    uint32_t n_merges;
    char **merges;        /* [n_merges] "left right" (BPE only) */
    int32_t bos, eos, unk, pad; /* special ids; unk = -1 when absent */
    int32_t eot;                /* end-of-turn id of the chat template (written explicitly, as converters do) */
    const char *model;    /* "gpt2" or "llama" */
    const char *chat_template;
    void *storage;        /* owned string storage */
} qr_synth_vocab;

/* Builds the deterministic vocabulary of n_vocab tokens (it depends only on kind and n_vocab).
 * QR_ERR_INVALID_ARG when n_vocab is too small to hold the specials and the byte tokens. */
qr_status qr_synth_vocab_build(qr_synth_vocab_kind kind, uint32_t n_vocab, qr_synth_vocab *out, char *err,
                               size_t err_len);
void qr_synth_vocab_free(qr_synth_vocab *v);

/* ---- writing a model ------------------------------------------------------------------------- */

/* An EAGLE-3 head (arch "eagle3", synth_eagle3.c): its options name its target preset's parts. The head has one layer
 * of the target's heads and FFN width, reads target layers [2, L/2, L-3] of an L-layer target (L < 6: [0, L/2, L-1])
 * and carries the target preset's tokenizer, so that it pairs with `synth --arch TARGET_ARCH --preset P`. */
typedef struct qr_synth_eagle3_options {
    const char *target_arch; /* the architecture of the target preset (options.preset names it); NULL: llama */
    int32_t draft_vocab;     /* the draft vocabulary Vd, written with a d2t table (0: half the target's vocabulary, or
                              * all of it with no_output); the target's vocabulary size: no d2t */
    int32_t n_embd;          /* the head's width E (0: the target's n_embd) */
    bool no_token_embd;      /* no token_embd.weight: the target's is shared */
    bool no_output;          /* no output.weight: the target's is shared (no d2t then) */
    bool norm_before_fc;     /* eagle3.norm_before_fc = true, with enc.output_norm.weight */
} qr_synth_eagle3_options;

typedef struct qr_synth_options {
    const char *arch;   /* may be NULL when the preset name is unique */
    const char *preset; /* preset name */
    const char *type;   /* file type name (quantize_model.h), e.g. "F16", "Q4_K_M"; NULL = F16 */
    bool pure;          /* no mix rules: every quantizable weight gets the base type */
    uint64_t seed;      /* weights seed */
    int n_threads;      /* <= 0: all online CPUs (the output does not depend on it) */
    bool progress;      /* progress bar on stderr when it is a TTY */
    int32_t pooling_type; /* > 0: write {arch}.pooling_type (1 mean, 2 cls, 3 last: embedding models);
                           * 0: only encoders (bert, nomic-bert) write one, mean */
    int32_t n_layer;      /* > 0: this many layers instead of the preset's (quick speed probes; eagle3: the target's) */
    qr_synth_eagle3_options eagle3; /* arch "eagle3": the head's options; the preset is its target's */
    const char *tokenizer_from;     /* a GGUF whose tokenizer.* keys are written instead of the synthetic vocabulary
                                     * (its token count must be the preset's): a draft or head for a real model */
} qr_synth_options;

typedef struct qr_synth_stats {
    uint64_t file_size;  /* bytes written */
    uint64_t n_params;   /* elements over all tensors */
    uint64_t n_tensors;
    double seconds;
} qr_synth_stats;

/* Writes the model to `path` (via a temporary file renamed into place), streaming tensor by tensor
 * so memory stays bounded (a few chunks of rows per thread). stats may be NULL. */
qr_status qr_synth_write(const qr_synth_options *o, const char *path, qr_synth_stats *stats, char *err, size_t err_len);

#endif /* QR_CONVERT_SYNTH_H */
