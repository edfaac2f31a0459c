/* model.h — internals of the engine: the architecture table, the one model description (hyper-parameters
 * and per-layer weights of every family: dense, MoE, Mamba2 hybrids, encoders), the per-context forward
 * state, and the blocks and forward passes built on them. */
#ifndef QR_MODEL_H
#define QR_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "gguf/gguf.h"
#include "kv/ssm_state.h"
#include "quarrel.h"

/* ---- architecture table (arch.c): each architecture as data ---- */

typedef enum qr_arch {
    QR_ARCH_LLAMA = 0, /* llama 2/3, mistral, tinyllama, smollm2; with ffn_*_exps tensors: Mixtral */
    QR_ARCH_GEMMA3 = 1,
    QR_ARCH_BERT = 2,       /* BERT encoders (all-MiniLM, bge): learned positions, biases, post-norms */
    QR_ARCH_NOMIC_BERT = 3, /* nomic-embed-text: fused qkv, NeoX rope, SwiGLU, no biases */
    QR_ARCH_GRANITE = 4,        /* granite 3.x: llama + embedding/residual/attention/logit multipliers */
    QR_ARCH_GRANITE_HYBRID = 5, /* granite 4.0-H: Mamba2 + attention layers, MoE + shared expert */
    QR_ARCH_NEMOTRON_H = 6,     /* Mamba2 / attention / relu^2-FFN blocks */
    QR_ARCH_NEMOTRON_H_MOE = 7, /* nemotron-3-nano: nemotron_h with sigmoid-routed MoE blocks */
    QR_ARCH_GPT_OSS = 8,        /* gpt-oss: MXFP4 experts, attention sinks, alternating sliding window */
    QR_ARCH_NEMOTRON = 9,       /* Nemotron-Mini: LayerNorm with biases, partial NeoX rope, relu^2 FFN */
    /* the Qwen family: llama's forward pass (llama.c) with NeoX rope */
    QR_ARCH_QWEN2 = 10,         /* Qwen2 / 2.5 (Coder, Math): q/k/v biases */
    QR_ARCH_QWEN3 = 11,         /* Qwen3: per-head q/k RMS norms */
    QR_ARCH_QWEN3MOE = 12,      /* Qwen3-MoE: qwen3 attention, softmax top-k experts (normalised), no shared expert */
    QR_ARCH_QWEN2MOE = 13,      /* Qwen1.5-MoE / Qwen2-MoE: qwen2 attention, experts + sigmoid-gated shared expert */
    /* issue 30 part 2 */
    QR_ARCH_PHI3 = 14,          /* Phi-3 / Phi-4-mini: fused qkv and gate|up, LongRoPE factors, partial NeoX rope */
    QR_ARCH_GEMMA2 = 15,        /* Gemma 2: gemma3's blocks without q/k norms, attention and final softcapping */
    /* issue 30 part 3 */
    QR_ARCH_OLMO2 = 16,         /* OLMo 2 / OLMo 3: post-norms only, q/k norms over all heads, optional sliding window */
    QR_ARCH_GRANITE_MOE = 17,   /* Granite 3.x MoE: granite with softmax top-k experts (+ optional shared expert) */
    QR_ARCH_GLM4 = 18,          /* GLM-4-0414: pre- and post-norms, partial normal rope, fused gate|up */
    QR_ARCH_MISTRAL3 = 19,      /* Ministral 3 / Mistral Small 3.x text: llama + YaRN keys, attention temperature */
    QR_ARCH_DEEPSEEK2 = 20,     /* DeepSeek-V2 / V2-Lite, Moonlight: multi-head latent attention (mla.c), shared +
                                 * routed experts after leading dense blocks */
    QR_ARCH_EAGLE3 = 21,        /* EAGLE-3 speculative-decoding head (eagle3.c): loaded and paired with its target, not
                                 * run on its own (qr_arch_info.spec_head) */
    QR_ARCH_COUNT
} qr_arch;

/* A hyper-parameter "{arch}.<key>" and the qr_hparams field it fills (an int32_t, float or bool). An
 * absent optional key gives `dflt`; the loader derives the defaults that depend on other keys (head_count_kv,
 * key_length, rope.dimension_count, attention.scale, expert_feed_forward_length) where the key gave 0. Ints
 * may be per-layer arrays (equal values, or the maximum with the arch's per_layer_max). */
typedef enum qr_hp_type { QR_HP_INT, QR_HP_FLOAT, QR_HP_BOOL } qr_hp_type;
typedef enum qr_hp_need {
    QR_HP_OPT,     /* optional */
    QR_HP_REQ,     /* required: "missing metadata key {arch}.<key>" */
    QR_HP_REQ_MOE, /* required when expert_count > 0 */
} qr_hp_need;
typedef struct qr_hparam_spec {
    const char *key;   /* after "{arch}." */
    qr_hp_type type;
    qr_hp_need need;
    size_t field;      /* offsetof(qr_hparams, ...) */
    double lo, hi;     /* accepted range of a present int */
    double dflt;       /* value when absent */
} qr_hparam_spec;

/* Where a tensor lives: the model (0), or the layers with one of these parts (a mask). */
enum {
    QR_IN_MODEL = 0,
    QR_IN_ANY = 1,   /* every layer */
    QR_IN_ATTN = 2,  /* layers with self-attention */
    QR_IN_SSM = 4,   /* layers with a Mamba2 mixer */
    QR_IN_FFN = 8,   /* layers with a dense FFN */
    QR_IN_MOE = 16,  /* layers with an MoE FFN (those that have blk.N.ffn_gate_inp, when expert_count > 0) */
    QR_IN_SHEXP = 32,/* MoE layers with a shared expert (expert_shared_feed_forward_length > 0) */
};
/* How a tensor is bound. */
enum {
    QR_TS_OPT = 0,        /* optional: host NULL when absent */
    QR_TS_REQ = 1,        /* required: "missing tensor <name> (required by architecture <arch>)" */
    QR_TS_SPLIT3 = 2,     /* rows (vector: elements) cut into three views, q | k | v sizes, bound to the field
                           * and the two qr_weights after it (nomic-bert's fused attn_qkv) */
    QR_TS_REQ_SPLIT3 = 3,
    QR_TS_FLAT = 4,       /* optional F32 matrix bound as one vector of all its elements (ssm_norm's groups) */
    QR_TS_TIED = 8,       /* optional; absent: token_embd's data (tied embeddings), which must suit a matmul */
    QR_TS_SPLIT2 = 16,    /* rows cut into two equal halves, bound to the field and the qr_weight after it
                           * (phi3's fused ffn_up: gate | up) */
    QR_TS_REQ_SPLIT2 = 17,
};
/* What a tensor is used as: its types must suit that. QR_USE_IDS: a vector of token ids, I64 (eagle3's d2t), kept as
 * a host view (not prepared on the backend). */
typedef enum qr_tensor_use { QR_USE_MATMUL, QR_USE_F32, QR_USE_TABLE, QR_USE_IDS } qr_tensor_use;
/* A tensor dimension, from the hyper-parameters. */
typedef enum qr_dim {
    QR_D_1 = 0,      /* 1: a dimension the tensor does not have */
    QR_D_EMBD,       /* n_embd */
    QR_D_VOCAB,      /* n_vocab */
    QR_D_Q,          /* n_head * head_dim_k */
    QR_D_K,          /* n_head_kv * head_dim_k */
    QR_D_V,          /* n_head_kv * head_dim_v */
    QR_D_O,          /* n_head * head_dim_v */
    QR_D_QKV,        /* Q + K + V */
    QR_D_HEAD,       /* n_head */
    QR_D_HEAD_K,     /* head_dim_k */
    QR_D_ROT_HALF,   /* n_rot / 2 */
    QR_D_FF,         /* the layer's n_ff */
    QR_D_FF2,        /* 2 * the layer's n_ff (a fused gate | up) */
    QR_D_FF_EXP,     /* n_ff_exp */
    QR_D_FF_SHEXP,   /* n_ff_shexp */
    QR_D_EXPERT,     /* n_expert */
    QR_D_CTX_TRAIN,  /* n_ctx_train */
    QR_D_FILE,       /* whatever the file has (token_types' rows) */
    QR_D_SSM_IN,     /* 2 d_inner + 2 n_group d_state + ssm n_head: z | xBC | dt */
    QR_D_SSM_CONV,   /* d_conv */
    QR_D_SSM_CONV_DIM, /* conv_dim */
    QR_D_SSM_HEAD,   /* ssm n_head */
    QR_D_SSM_INNER,  /* d_inner */
    QR_D_SSM_GROUP_SIZE, /* d_inner / n_group */
    QR_D_SSM_GROUP,  /* n_group */
    /* multi-head latent attention (deepseek2) */
    QR_D_Q_MLA,      /* n_head * head_dim_k_mla (a query head before absorption: nope | rope) */
    QR_D_Q_LORA,     /* q_lora */
    QR_D_KV_LORA,    /* kv_lora */
    QR_D_KV_A,       /* kv_lora + n_rot (the compressed KV | the shared rope key) */
    QR_D_QK_NOPE,    /* head_dim_k_mla - n_rot */
    QR_D_V_MLA,      /* head_dim_v_mla */
    QR_D_O_MLA,      /* n_head * head_dim_v_mla */
    /* EAGLE-3 heads */
    QR_D_EMBD2,      /* 2 * n_embd: the head's attention input, [normed token embedding | normed g] */
    QR_D_TARGET3,    /* 3 * eagle3_target_embd: the three captured target hidden states, concatenated */
    QR_D_VOCAB_DRAFT,/* n_vocab_draft: the head's draft vocabulary (d2t's length; n_vocab without d2t) */
} qr_dim;
/* A tensor: name, where, how, shape [dims[0] (row length), dims[1], dims[2]] and the qr_weight it binds. */
typedef struct qr_tensor_spec {
    const char *name;   /* "attn_q.weight"; per-layer tensors get "blk.N." in front */
    uint8_t in;         /* QR_IN_* */
    uint8_t flags;      /* QR_TS_* */
    uint8_t use;        /* qr_tensor_use */
    uint8_t dims[3];    /* qr_dim */
    size_t field;       /* offsetof(qr_model, ...) for QR_IN_MODEL, else offsetof(qr_layer, ...) */
} qr_tensor_spec;

/* Which layers are attention, Mamba2 or FFN-only blocks: read from the per-layer head_count_kv and
 * feed_forward_length arrays (as llama.cpp does), never from a hard-coded pattern. */
typedef enum qr_layer_rule {
    QR_LAYERS_ATTN = 0,       /* every layer: attention + FFN */
    QR_LAYERS_SSM_OR_ATTN,    /* head_count_kv 0: Mamba2, else attention; every layer has an FFN (granitehybrid) */
    QR_LAYERS_SSM_ATTN_FFN,   /* head_count_kv and feed_forward_length 0: Mamba2; feed_forward_length 0:
                               * attention; else an FFN-only block (nemotron_h) */
} qr_layer_rule;

typedef struct qr_model qr_model;
typedef struct qr_fwd qr_fwd;
/* A forward pass over the current batch plan (set on the backend); see qr_fwd. */
typedef void (*qr_forward_fn)(const qr_model *m, qr_fwd *f);

/* One architecture: everything model_load.c needs to load it, and the forward pass that runs it. */
typedef struct qr_arch_info {
    qr_arch arch;
    const char *name;        /* general.architecture value */
    qr_forward_fn forward;
    const qr_hparam_spec *const *hparams; /* groups of keys, NULL-terminated, read in order */
    const qr_tensor_spec *const *tensors; /* groups of tensors, NULL-terminated */
    qr_layer_rule layers;    /* attention / Mamba2 / FFN-only per layer */
    bool per_layer_max;      /* per-layer integer arrays (head_count_kv, feed_forward_length) may differ by
                              * layer (0 = no attention / FFN there): the loader keeps the maximum */
    bool encoder;            /* BERT family: LayerNorm with biases, non-causal attention, no output head */
    qr_rope_mode rope_mode;  /* normal (llama) or neox (gemma3) */
    bool scale_embd;         /* multiply embeddings by sqrt(n_embd) */
    int32_t swa_pattern;     /* default sliding-window period (gemma3: 6, every 6th layer global); 0 = none */
    float rope_base_swa;     /* rope base of sliding-window layers (gemma3: 10000; 0: rope.freq_base_swa when the
                              * row reads it, else rope.freq_base) */
    bool swa_plain_rope;     /* sliding-window layers rope with rope_base_swa and no scaling (gemma3, olmo2) */
    bool ffn_gelu;           /* the dense FFN is GeGLU, not SwiGLU (gemma) */
    bool ignore_swa;         /* the metadata's sliding window is not used (phi3: llama.cpp disables it) */
    bool q_prescale;         /* q *= attention scale after rope, attention at scale 1 (phi3, gemma; as llama.cpp) */
    /* MoE: how the router's choice is weighted (hyper-parameter keys may change norm_w and the scale) */
    bool moe_every_layer;    /* with expert_count > 0 every FFN must be an MoE (llama: Mixtral; gpt-oss) */
    qr_moe_gating gating;
    bool norm_w;
    qr_glu_kind expert_act;
    /* a speculative-decoding head (eagle3): loaded to draft for a target, never run as a model of its own
     * (qr_context_create and tensor parallelism refuse it; `forward` is never reached) */
    bool spec_head;
    /* optional steps of the architecture's own (NULL: none), each filling err with the file's path in front:
     * load_extra runs after the table's keys, before the weights are bound (what the table cannot say: eagle3's
     * target-layer array, its vocabulary sizes); check_weights runs after every weight is bound (contents,
     * combinations of optional weights) */
    qr_status (*load_extra)(qr_model *m, char *err, size_t err_len);
    qr_status (*check_weights)(const qr_model *m, char *err, size_t err_len);
} qr_arch_info;

/* Table row for a general.architecture name; NULL when unsupported. */
/* The chat template of a model (api.c): the GGUF's tokenizer.chat_template, else the built-in one its vocabulary
 * fits (template/builtin.c: Gemma turns, ChatML; *builtin gets its name, NULL for the GGUF's own). False when
 * neither: the model has no chat template. src points into the model's mapping or static text. */
bool qr_model_chat_template_src(const qr_model *model, const qr_tokenizer *tok, const char **src, size_t *len,
                                const char **builtin);
const qr_arch_info *qr_arch_find(const char *name);
/* Writes the comma-separated names of the supported architectures (the table's rows) into buf. */
void qr_arch_list(char *buf, size_t cap);

/* ---- hyper-parameters and weights ---- */

typedef struct qr_hparams {
    char arch_name[32];
    int32_t n_vocab;      /* token_embd rows */
    int32_t n_ctx_train;  /* {arch}.context_length */
    int32_t n_embd;       /* {arch}.embedding_length */
    int32_t n_layer;      /* {arch}.block_count less the MTP blocks: the layers the forward pass runs */
    int32_t n_layer_nextn;/* {arch}.nextn_predict_layers: multi-token-prediction blocks after the trunk (DeepSeek-V3,
                           * GLM-4.5), counted in block_count and not run (llama.cpp's n_layer()) */
    int32_t n_head;       /* {arch}.attention.head_count */
    int32_t n_head_kv;    /* {arch}.attention.head_count_kv (default n_head) */
    int32_t head_dim_k;   /* {arch}.attention.key_length (default n_embd / n_head) */
    int32_t head_dim_v;   /* {arch}.attention.value_length (default n_embd / n_head) */
    int32_t n_ff;         /* {arch}.feed_forward_length */
    int32_t n_rot;        /* {arch}.rope.dimension_count (default head_dim_k) */
    float norm_eps;       /* {arch}.attention.layer_norm_rms_epsilon */
    float rope_base;      /* {arch}.rope.freq_base (default 10000) */
    float rope_scale;     /* 1 / {arch}.rope.scaling.factor (linear), 1 = none */
    float yarn_ext_factor;/* 1 when rope.scaling.type = yarn, else 0 */
    float yarn_attn_factor;/* rope's attn_factor: YaRN's magnitude correction (yarn) times
                            * {arch}.rope.scaling.attn_factor (default 1), as llama.cpp's context computes it */
    int32_t n_ctx_orig;   /* {arch}.rope.scaling.original_context_length (default n_ctx_train) */
    float yarn_beta_fast, yarn_beta_slow; /* {arch}.rope.scaling.yarn_beta_fast / _slow (default 32 / 1) */
    float yarn_log_mul;   /* {arch}.rope.scaling.yarn_log_multiplier: YaRN's mscale_all_dim (0 = none) */
    float attn_temp_scale;/* {arch}.attention.temperature_scale: llama 4's q scale 1 + t ln(floor(pos / n_ctx_orig)
                           * + 1), which is 1 below the original context, the only positions such a model runs at
                           * here (qr_decode refuses the others) */
    int32_t n_swa;        /* {arch}.attention.sliding_window (0 = none) */
    float rope_base_swa;  /* rope base of sliding-window layers */
    float attn_scale;     /* q.k scale */
    float attn_softcap;   /* {arch}.attn_logit_softcapping (0 = off) */
    float final_softcap;  /* {arch}.final_logit_softcapping (0 = off) */
    float embd_scale;     /* multiplier of the token embeddings (1 = none) */
    int32_t pooling_type; /* {arch}.pooling_type (llama.cpp numbering: 0 none, 1 mean, 2 cls, 3 last); -1 absent */
    bool causal;          /* {arch}.attention.causal (encoders: false) */
    /* MoE ({arch}.expert_*) */
    int32_t n_expert;         /* expert_count (0 = dense) */
    int32_t n_expert_used;    /* expert_used_count (top-k) */
    int32_t n_ff_exp;         /* expert_feed_forward_length (default: feed_forward_length) */
    int32_t n_ff_shexp;       /* expert_shared_feed_forward_length (0 = no shared expert) */
    qr_moe_gating gating;     /* per arch (softmax; gpt-oss softmax-weight; nemotron_h sigmoid) */
    bool norm_w;              /* normalise the selected weights (expert_weights_norm / per arch) */
    float w_scale;            /* expert_weights_scale (1 = none) */
    qr_glu_kind expert_act;   /* SwiGLU, gpt-oss's clamped SwiGLU, or relu^2 (nemotron_h: no gate) */
    /* Mamba2 ({arch}.ssm.*) */
    qr_ssm_params ssm;        /* d_conv, d_inner, d_state, n_head (time_step_rank), n_group */
    bool has_ssm;
    /* granite multipliers (0 = absent) */
    float f_embedding_scale;  /* {arch}.embedding_scale */
    float f_residual_scale;   /* {arch}.residual_scale */
    float f_logit_scale;      /* {arch}.logit_scale: logits /= it */
    bool use_rope;            /* granite: rope.scaling.finetuned (default true); true for the others */
    /* multi-head latent attention (deepseek2; kv_lora 0 = none). The cache holds one head of kv_lora + n_rot
     * (head_dim_k) per token, its first kv_lora values the value head (head_dim_v = kv_lora) */
    int32_t q_lora;           /* attention.q_lora_rank: q through attn_q_a / its norm / attn_q_b (0: attn_q) */
    int32_t kv_lora;          /* attention.kv_lora_rank */
    int32_t head_dim_k_mla;   /* attention.key_length_mla: a query head of attn_q (nope | rope) */
    int32_t head_dim_v_mla;   /* attention.value_length_mla: a value head after attn_v_b */
    int32_t n_expert_shared;  /* expert_shared_count: the shared expert is n_ff_exp * this wide */
    int32_t gating_func;      /* expert_gating_func (llama.cpp: 1 softmax, 2 sigmoid; 0 = absent: softmax) */
    int32_t n_dense_lead;     /* leading_dense_block_count */
    int32_t n_expert_groups;  /* expert_group_count: group-limited routing when > 1 */
    int32_t n_group_used;     /* expert_group_used_count */
    /* EAGLE-3 heads (eagle3.c; n_vocab is then the tokenizer's token count, the target's vocabulary) */
    int32_t eagle3_layers[3];       /* {arch}.target_layers (or the older extract_layers): the target layers whose
                                     * input hidden states are captured, in concatenation order; the target's n_layer
                                     * stands for its last layer's output before the final norm */
    int32_t eagle3_target_embd;     /* {arch}.target_hidden_size: the target's n_embd (fc reads 3 times it) */
    bool eagle3_norm_before_residual; /* {arch}.norm_before_residual: the residual is the normed g, not g */
    bool eagle3_norm_before_fc;     /* {arch}.norm_before_fc: RMS norm (enc.output_norm) of the features before fc */
    int32_t n_vocab_draft;          /* the draft vocabulary: d2t's length, else n_vocab */
} qr_hparams;

/* What a layer's mixer is. */
typedef enum qr_layer_kind {
    QR_LAYER_ATTN = 0, /* self-attention (+ FFN for every arch but nemotron_h) */
    QR_LAYER_SSM = 1,  /* Mamba2 mixer */
    QR_LAYER_FFN = 2,  /* nemotron_h: an FFN-only block (dense or MoE) */
} qr_layer_kind;

/* One layer of any family. A weight a layer does not have keeps host == NULL (biases, norms, the
 * experts of a dense FFN, the attention weights of a Mamba2 layer...). */
typedef struct qr_layer {
    qr_layer_kind kind;    /* attention, Mamba2 or FFN-only */
    bool swa;              /* sliding-window layer (window n_swa, rope_base_swa) */
    int32_t n_ff;          /* this layer's feed_forward_length (hybrids: per layer; 0 = no FFN) */
    qr_weight attn_norm;   /* F32 [n_embd] (eagle3: the norm of the token embedding) */
    qr_weight attn_norm_b; /* F32 [n_embd] (nemotron's LayerNorm) */
    qr_weight attn_norm_2; /* F32 [n_embd] eagle3: the norm of g (the fused target features, or the fed-back state) */
    qr_weight attn_q;      /* [n_head * head_dim_k rows][n_embd] */
    qr_weight attn_k;      /* [n_head_kv * head_dim_k][n_embd] */
    qr_weight attn_v;      /* [n_head_kv * head_dim_v][n_embd] */
    qr_weight attn_out;    /* [n_embd][n_head * head_dim_v] */
    /* attention biases, F32 (bert, gpt-oss, granite, nemotron, qwen2); nomic-bert's fused attn_qkv (and its bias)
     * is bound as three row views: attn_q, attn_k, attn_v (attn_q_b, attn_k_b, attn_v_b) */
    qr_weight attn_q_b, attn_k_b, attn_v_b; /* [n_head * head_dim_k], [n_head_kv * head_dim_k], [n_head_kv * head_dim_v] */
    qr_weight attn_out_b;  /* [n_embd] */
    qr_weight attn_sinks;  /* F32 [n_head] (gpt-oss) */
    qr_weight attn_q_norm; /* F32 [head_dim_k] per head (gemma3, qwen3), or [n_head * head_dim_k] over all (olmo2) */
    qr_weight attn_k_norm; /* F32 [head_dim_k] per head (gemma3, qwen3), or [n_head_kv * head_dim_k] (olmo2) */
    qr_weight attn_post_norm; /* F32 [n_embd] (gemma3, gemma2, olmo2, glm4; gpt-oss: the FFN's norm) */
    qr_weight ffn_norm;    /* F32 [n_embd] */
    qr_weight ffn_norm_b;  /* F32 [n_embd] (nemotron's LayerNorm) */
    qr_weight ffn_gate;    /* [n_ff][n_embd] */
    qr_weight ffn_up;      /* [n_ff][n_embd] */
    qr_weight ffn_down;    /* [n_embd][n_ff] */
    qr_weight ffn_up_b;    /* F32 [n_ff] */
    qr_weight ffn_down_b;  /* F32 [n_embd] */
    qr_weight ffn_post_norm; /* F32 [n_embd] (gemma3, gemma2, olmo2, glm4) */
    /* encoders (bert.c): LayerNorms after the sub-blocks, F32 [n_embd] */
    qr_weight attn_out_norm, attn_out_norm_b;
    qr_weight layer_out_norm, layer_out_norm_b;
    /* MoE FFN; gate_inp.host == NULL: a dense FFN (the ffn_* weights above) */
    qr_weight gate_inp;           /* router [n_expert][n_embd] */
    qr_weight gate_inp_b;         /* F32 [n_expert] (gpt-oss) */
    qr_weight exp_probs_b;        /* F32 [n_expert] selection bias (nemotron_h_moe) */
    qr_weight gate_exps, up_exps; /* [n_expert][n_ff_exp][n_embd]; gate_exps absent for relu^2 experts */
    qr_weight down_exps;          /* [n_expert][n_embd][n_ff_exp] */
    qr_weight gate_exps_b, up_exps_b, down_exps_b; /* F32 [n_expert][n_ff_exp] / [n_expert][n_embd] (gpt-oss) */
    qr_weight gate_shexp, up_shexp; /* shared expert [n_ff_shexp][n_embd]; gate absent for relu^2 */
    qr_weight down_shexp;         /* [n_embd][n_ff_shexp] */
    qr_weight gate_inp_shexp;     /* [1][n_embd] the shared expert's gate: its output *= sigmoid(x . w) (qwen2moe) */
    /* multi-head latent attention (deepseek2, mla.c) */
    qr_weight mla_q_a;            /* [q_lora][n_embd] (q_lora > 0; else attn_q: [n_head * head_dim_k_mla][n_embd]) */
    qr_weight mla_q_a_norm;       /* F32 [q_lora] */
    qr_weight mla_q_b;            /* [n_head * head_dim_k_mla][q_lora] */
    qr_weight mla_kv_a;           /* attn_kv_a_mqa [kv_lora + n_rot][n_embd] */
    qr_weight mla_kv_a_norm;      /* F32 [kv_lora] */
    qr_weight mla_k_b;            /* [n_head][kv_lora][qk_nope]: q_nope -> the compressed space, per head */
    qr_weight mla_v_b;            /* [n_head][head_dim_v_mla][kv_lora]: attention output -> value head, per head */
    /* Mamba2 */
    qr_weight ssm_in;             /* [2 d_inner + 2 n_group d_state + n_head][n_embd]: z | xBC | dt */
    qr_weight ssm_conv1d;         /* F32 [conv_dim][d_conv] */
    qr_weight ssm_conv1d_b;       /* F32 [conv_dim] */
    qr_weight ssm_dt_b;           /* F32 [n_head] */
    qr_weight ssm_a;              /* F32 [n_head] (= -exp(A_log)) */
    qr_weight ssm_d;              /* F32 [n_head] */
    qr_weight ssm_norm;           /* F32 [d_inner] (n_group groups) */
    qr_weight ssm_out;            /* [n_embd][d_inner] */
} qr_layer;

struct qr_model {
    char path[512];
    qr_gguf *gguf;              /* the mapping; weights point into it */
    const qr_arch_info *arch;
    qr_hparams hp;
    qr_weight tok_embd;         /* [n_vocab][n_embd] */
    qr_weight output_norm;      /* F32 [n_embd] */
    qr_weight output_norm_b;    /* F32 [n_embd] bias of the final LayerNorm (nemotron), host NULL when absent */
    qr_weight output;           /* [n_vocab][n_embd]; == tok_embd's data when tied */
    qr_weight rope_freqs;       /* F32 [n_rot / 2], host == NULL when absent */
    qr_weight rope_long, rope_short; /* F32 [n_rot / 2] LongRoPE factors (phi3), host == NULL when absent */
    qr_weight type_embd;        /* encoders: [n_token_types][n_embd] (row 0 is added), host NULL when absent */
    qr_weight pos_embd;         /* bert: [n_ctx_train][n_embd] learned positions */
    qr_weight tok_norm, tok_norm_b; /* encoders: LayerNorm of the input embeddings, F32 [n_embd] */
    /* EAGLE-3 heads (host NULL elsewhere); the head's tok_embd [n_vocab][n_embd] and output [n_vocab_draft][n_embd]
     * are optional (absent: the target's, which then must be n_embd wide) */
    qr_weight fc;               /* [n_embd][3 * eagle3_target_embd]: the captured features -> g */
    qr_weight enc_norm;         /* F32 [3 * eagle3_target_embd] enc.output_norm (with eagle3_norm_before_fc) */
    qr_weight d2t;              /* I64 [n_vocab_draft] draft id -> target token id (absolute), host view only; host
                                 * NULL: the draft vocabulary is the target's */
    const struct qr_model *e3_target; /* a head bound to its target (qr_eagle3_bind): tok_embd / output absent from
                                       * the file are then copies of the target's (not in weights[], not owned) */
    bool e3_shared_embd, e3_shared_out;
    struct qr_tokenizer *embed_tok; /* the tokenizer qr_embed made (lazily, owned), or NULL */
    qr_layer *layers;           /* [n_layer] */
    qr_backend *be;             /* owned */
    char backend_note[192];     /* why an auto load runs on the CPU ("" otherwise); qr_model_backend_note */
    int32_t gpu;                /* CUDA device index asked for (used when be is "cuda") */
    char *name_arena;           /* tensor names referenced by the qr_weights */
    int32_t name_used, name_cap;/* slots of name_arena */
    qr_weight **weights;        /* [n_weights] every bound weight (the tied output matrix left out): what the
                                 * backend prepares and releases */
    int32_t n_weights, cap_weights;
    /* tensor parallelism (tp.c) */
    int32_t tp_world;           /* ranks (1: none) */
    int32_t tp_rank;            /* a shard's rank (0 for the full model) */
    struct qr_model **tp_shards;/* the full model with tp_world > 1: [tp_world] shards (owned), rank r's weights
                                 * and hyper-parameters (heads, FFN columns, output vocabulary: 1 / tp_world each) on
                                 * its own backend; the full model's own weights are host views only */
    struct qr_tp_comm *tp_comm; /* the full model: the host all-reduce of CPU ranks (owned), or NULL */
    bool tp_is_shard;           /* a shard: the mapping, names and tokenizer are the full model's */
    int32_t tp_vocab0;          /* a shard: its first output row (vocabulary id) */
    qr_split_mode tp_split;     /* how the shards share the model */
    int32_t pipe_stage;         /* layer split: this shard's place (0: the first, which embeds the tokens) */
    bool pipe_more;             /* layer split: more layers follow on the next rank (no output head here) */
    void **tp_owned;            /* a shard: host copies of column / expert slices (owned) */
    int32_t n_tp_owned, cap_tp_owned;
    struct qr_tp_net *tp_net;   /* the full model, ranks in several processes (tp_addr): the connections (owned), or
                                 * NULL; only rank tp_self's shard is here, the other tp_shards[r] are NULL */
    int32_t tp_self;            /* with tp_net: this process's rank (0: the driver) */
};

/* ---- forward state ---- */

/* Scratch of the MoE FFN block (moe.c), backend memory for n_batch rows; NULL when the model has no experts. */
typedef struct qr_moe_scratch {
    float *router;         /* [n_batch][n_expert] */
    int32_t *ids;          /* [n_batch][n_used] */
    float *weights;        /* [n_batch][n_used] */
    float *eh;             /* [n_batch][n_used][n_ff_exp] expert hidden */
    float *eo;             /* [n_batch][n_used][n_embd] expert outputs */
    float *sh;             /* [2][n_batch][n_ff_shexp] shared expert gate | up */
    int32_t *ids_host;     /* [n_batch][n_used] host copy of ids (non-CPU backends) */
    uint64_t *sel_counts;  /* [n_layer][n_expert] (host) */
    int32_t routed_layer;  /* the layer whose router and routing qr_ffn_norm already ran with the norm, or -1 */
} qr_moe_scratch;

/* Scratch of the Mamba2 mixer (mamba2.c), backend memory for n_batch rows, and the recurrent state;
 * NULL when the model has no SSM layers. */
typedef struct qr_mamba_scratch {
    float *zxbcdt;         /* [n_batch][d_in_proj] */
    float *xbc;            /* [n_batch][conv_dim] after the conv */
    float *y;              /* [n_batch][d_inner] */
    qr_ssm_state *ssm;     /* per-sequence conv and scan state */
} qr_mamba_scratch;

/* Scratch of multi-head latent attention (mla.c), backend memory for n_batch rows; NULL without MLA. */
typedef struct qr_mla_scratch {
    float *q;              /* [n_batch][n_head * head_dim_k_mla] attn_q's output (nope | rope per head) */
    float *q_a;            /* [n_batch][q_lora] (q_lora > 0) */
    float *kv_a;           /* [n_batch][kv_lora + n_rot] attn_kv_a_mqa's output */
    float *pe;             /* [n_batch][n_head][n_rot] the rope parts of q (then of k) */
    float *o;              /* [n_batch][n_head * head_dim_v_mla] the value heads */
} qr_mla_scratch;

/* The per-context forward state: buffers (backend memory, rows = the plan's n_tokens, allocated for
 * n_batch rows by qr_fwd_alloc) and sizes of one forward pass. */
struct qr_fwd {
    qr_backend *be;
    qr_kv_storage *kv;
    int32_t n_tokens;   /* rows in the plan */
    int32_t n_outputs;  /* rows gathered for logits */
    int32_t n_rows;     /* rows held in x / xb / xb2: n_tokens, or n_outputs once the last layer keeps
                         * only the output rows (qr_block_keep_outputs); set by the forward pass */
    bool outputs_kept;  /* x holds just the output rows, in output order (qr_block_keep_outputs) */
    bool embd;          /* embeddings pass: qr_block_output stops after the final norm, leaving the
                         * [n_outputs][n_embd] normed hidden states in xo (no logits) */
    float *x;           /* [n_tokens][n_embd] residual stream */
    float *xb;          /* [n_tokens][n_embd] normed input of a sub-block */
    float *xb2;         /* [n_tokens][n_embd] output of a sub-block */
    float *q;           /* [n_tokens][n_head * head_dim_k] */
    float *k;           /* [n_tokens][n_head_kv * head_dim_k] */
    float *v;           /* [n_tokens][n_head_kv * head_dim_v] */
    float *att;         /* [n_tokens][n_head * head_dim_v] */
    float *ff_g;        /* [n_tokens][n_ff] */
    float *ff_u;        /* [n_tokens][n_ff] */
    float *xo;          /* [n_outputs][n_embd] gathered rows */
    float *logits;      /* [n_outputs][n_vocab] */
    int32_t n_batch;    /* rows the buffers above (but xo / logits) hold */
    const qr_weight *rope_factors; /* the rope frequency factors of this context (qr_rope_factors), or NULL */
    qr_moe_scratch moe;     /* the MoE block's scratch */
    qr_mamba_scratch mamba; /* the Mamba2 block's scratch and state */
    qr_mla_scratch mla;     /* multi-head latent attention's scratch */
    qr_arch_stats stats;    /* MoE / SSM counters (expert_selection points into moe.sel_counts) */
    bool stats_enabled;     /* non-CPU backends: read the routing back to count expert selection */
    int32_t tp_world;       /* tensor parallelism: ranks (0 or 1: none) */
    int32_t tp_rank;        /* this pass's rank */
    struct qr_tp_comm *tp;  /* the host all-reduce of CPU ranks (NULL when the backend has all_reduce) */
    /* EAGLE-3's target side (qr_context_capture_layers): the inputs of layers cap_layers[0..n_cap) of every row,
     * cap[n_tokens][n_cap * n_embd] (layer i at column i * n_embd); NULL: off */
    float *cap;
    int32_t n_cap;
    int32_t cap_layers[3];
    /* EAGLE-3 heads (eagle3.c): each row's second input besides its token, written before the pass: the target's
     * three captured states (in_w = 3 * eagle3_target_embd: fc makes g of them) or g itself (in_w = n_embd: the
     * head's own pre-norm output, fed back); the output rows' pre-norm states come back in pre */
    struct {
        float *in;      /* [n_batch][3 * eagle3_target_embd] */
        int32_t in_w;   /* this pass's width of in's rows */
        float *g;       /* [n_batch][n_embd] fc's output */
        float *pre;     /* [n_batch][n_embd] the output rows' state before output_norm */
    } e3;
};

/* ---- tensor parallelism (tp.c) ---- */

/* Most ranks a model is split into. */
#define QR_TP_MAX 16
typedef struct qr_tp_comm qr_tp_comm;
/* Splits m (loaded, weights bound as host views, no backend yet) into p->tp shards on their own backends (CUDA:
 * GPUs p->gpu + r, joined by NCCL; CPU: p->n_threads / tp threads each, a host all-reduce), prepares their weights
 * and sets m->be to rank 0's backend. Errors name what does not split (heads, a weight's columns that are not whole
 * quant blocks, an architecture without tensor parallelism). */
qr_status qr_tp_build(qr_model *m, const qr_model_params *p, char *err, size_t err_len);
/* Frees the shards, their backends and the communicator (m->be is then NULL). */
void qr_tp_free(qr_model *m);
/* In place: buf[0..n) (f's backend memory) = its sum over the ranks (nothing with one rank): the backend's
 * all_reduce, else the host all-reduce of CPU ranks (a barrier, every element summed in rank order by one rank). */
void qr_tp_all_reduce(qr_fwd *f, float *buf, int64_t n);
/* Worker threads, one a rank of a tensor-parallel model (each bound to its rank's device). */
typedef struct qr_tp_pool qr_tp_pool;
qr_status qr_tp_pool_create(const qr_model *m, qr_tp_pool **out, char *err, size_t err_len);
/* Runs fn(arg, r) on every rank's thread at once; returns when all have returned. */
void qr_tp_pool_run(qr_tp_pool *p, void (*fn)(void *arg, int32_t rank), void *arg);
void qr_tp_pool_free(qr_tp_pool *p);
/* ---- ranks in several processes (tp_net.c): TCP between the driver (rank 0) and the workers ---- */
typedef struct qr_tp_net qr_tp_net;
struct iovec;
#define QR_TP_NCCL_ID_BYTES 128
/* The driver: listens at addr until world - 1 ranks joined (each checked: world, rank, backend 0 CPU / 1 CUDA, the
 * model's fingerprint), then sends each the welcome (with nccl_id when not NULL). Bounded by QUARREL_TP_TIMEOUT. */
qr_status qr_tp_net_listen(const char *addr, int32_t world, uint32_t backend, uint64_t fingerprint,
                           const uint8_t *nccl_id, qr_tp_net **out, char *err, size_t err_len);
/* A worker: joins the driver at addr as rank `rank`; the welcome's NCCL id into nccl_id (when not NULL). */
qr_status qr_tp_net_connect(const char *addr, int32_t world, int32_t rank, uint32_t backend, uint64_t fingerprint,
                            uint8_t *nccl_id, qr_tp_net **out, char *err, size_t err_len);
void qr_tp_net_free(qr_tp_net *n);
/* The driver: command `type` (payload: the parts) to rank r, and its reply's payload (valid until the next call for
 * r). A rank's error comes back as its status and message; a lost connection as QR_ERR_IO. */
qr_status qr_tp_net_call(qr_tp_net *n, int32_t r, uint32_t type, const struct iovec *parts, int n_parts,
                         const void **reply, size_t *reply_len, char *err, size_t err_len);
/* A worker: the next command (QR_ERR_NOT_FOUND when the driver closed the connection), then its reply. */
qr_status qr_tp_net_next(qr_tp_net *n, uint32_t *type, const void **payload, size_t *bytes);
bool qr_tp_net_reply(qr_tp_net *n, qr_status st, const char *msg, const void *payload, size_t bytes);
/* A worker: whether the driver closed its connection (waits up to ms for a sign; reads nothing). */
bool qr_tp_net_peer_gone(qr_tp_net *n, int ms);
/* In place: buf = the sum over the ranks' buffers, in rank order (the driver sums, the workers send and receive). */
bool qr_tp_net_all_reduce(qr_tp_net *n, float *buf, int64_t count, char *err, size_t err_len);
/* The model's tensors (names, types, shapes) and hyper-parameters, hashed: ranks of several processes must agree. */
uint64_t qr_tp_fingerprint(const qr_model *m);

/* Layer split: whether the model (a shard) begins with the token embeddings and ends with the output head (true for
 * every model that is not a later / earlier stage of a layer split). */
static inline bool qr_pipe_first(const qr_model *m) { return m->pipe_stage == 0; }
static inline bool qr_pipe_last(const qr_model *m) { return !m->pipe_more; }
/* Rows of the output matrix the model (or shard) computes logits for. */
static inline int32_t qr_model_n_logits(const qr_model *m) { return (int32_t)m->output.ne[1]; }

/* Allocates f's buffers on be for n_batch rows and n_seq_max sequences (the MoE / Mamba2 scratch and
 * the SSM state only when the model has such layers; xo and logits are left to the caller). On failure
 * what was allocated is freed. */
qr_status qr_fwd_alloc(const qr_model *m, qr_backend *be, int32_t n_batch, int32_t n_seq_max, qr_fwd *f, char *err,
                       size_t err_len);
/* Frees what qr_fwd_alloc allocated, and xo / logits (safe on a partial or zeroed f). */
void qr_fwd_free(qr_backend *be, qr_fwd *f);
/* Copies x (the input of layer il: the residual stream before its first norm) into f->cap for each captured layer il;
 * nothing when capture is off. Forward passes call it at the top of every layer, and with il = n_layer after the last
 * (the final state before output_norm: then the last layer keeps every row, qr_fwd_capture_final). */
void qr_fwd_capture(const qr_model *m, qr_fwd *f, int il);
/* Whether n_layer (the final pre-norm state) is among the captured layers. */
bool qr_fwd_capture_final(const qr_model *m, const qr_fwd *f);

/* ---- shared blocks (blocks.c) ---- */

/* The rope frequency factors of a context whose sequences hold n_ctx_seq positions: rope_freqs (llama3)
 * when the model has it, else LongRoPE's long factors when n_ctx_seq > the original context, its short
 * ones otherwise (llama.cpp's get_rope_factors), or NULL. */
const qr_weight *qr_rope_factors(const qr_model *m, int32_t n_ctx_seq);
/* Rope parameters of layer il (base/scale differ between sliding-window and global layers); the frequency
 * factors are f->rope_factors (f NULL: those of the training context). */
qr_rope_params qr_layer_rope(const qr_model *m, const qr_fwd *f, int il);

/* Self-attention of layer il on f->xb (normed input), result (after attn_output) in f->xb2.
 * Adds the q/k/v/output biases and applies the per-head q/k norms when the layer has them, rope,
 * optional q pre-scaling (q_scale != 1, and then the attention itself uses scale 1, as llama.cpp does
 * for gemma), stores K/V, attends. */
void qr_block_attention(const qr_model *m, qr_fwd *f, int il, float q_scale);
/* x += b_scale * b (b NULL: nothing to add), y = rmsnorm(x) * w: the backend's fused add_rmsnorm when it
 * has one (next: the weight that multiplies y, a hint), else [scale into y +] add + rmsnorm. */
void qr_fused_add_rmsnorm(qr_backend *be, float *x, const float *b, float b_scale, const qr_weight *w, int64_t n_rows,
                          int64_t dim, float eps, float *y, const qr_weight *next);
/* x += rmsnorm(b) * b_norm, y = rmsnorm(x) * w (a post-norm, the residual add and the next pre-norm: gemma's
 * blocks): the backend's add_rmsnorm with b_norm when it takes it, else rmsnorm(b) in place, then
 * qr_fused_add_rmsnorm. b is overwritten. */
void qr_fused_post_add_rmsnorm(qr_backend *be, float *x, float *b, const qr_weight *b_norm, const qr_weight *w,
                               int64_t n_rows, int64_t dim, float eps, float *y, const qr_weight *next);
/* y[i] = x . w[i]^T (+ bias b[i] when b and b[i]) for i < n_w (1..3): the backend's matmul_multi when
 * it has one, else matmul (+ add_row) per weight. */
void qr_fused_matmul_multi(qr_backend *be, int32_t n_w, const qr_weight *const *w, const qr_weight *const *b,
                           const float *x, int64_t n_rows, float *const *y);
/* rope(q), rope(k), kv_store(k, v): the backend's rope_kv_store when it has one, else the three ops. */
void qr_fused_rope_kv_store(qr_backend *be, float *q, float *k, const float *v, int32_t n_head, int32_t n_head_kv,
                            int32_t head_dim, const qr_rope_params *rope, qr_kv_storage *kv, int32_t layer);
/* [per-head RMS norms of q and k (q_norm / k_norm: F32 [head_dim_k], eps; NULL: none),] rope + K/V store
 * (qr_fused_rope_kv_store with p's heads), [q *= q_scale where q_scale != 1: the scale op over n_tok rows,] then
 * attention: one op where the backend takes the pass (rope_attention), else the plain ops. q and k hold unspecified
 * values afterwards. */
void qr_rope_store_attend(qr_backend *be, float *q, float *k, const float *v, const qr_rope_params *rope,
                          qr_kv_storage *kv, int32_t layer, const qr_attn_params *p, int64_t n_tok, float q_scale,
                          const qr_weight *q_norm, const qr_weight *k_norm, float eps, float *out);

/* Gated FFN of layer il on the f->n_rows rows of f->xb, result in f->xb2: down(act(gate(x)) * up(x)),
 * act = SiLU or GELU. */
void qr_block_ffn(const qr_model *m, qr_fwd *f, int il, bool gelu);

/* The first weight that multiplies layer il's FFN input (the `next` hint of the norm before it): the shared
 * expert's gate (or up) where there is one, else the routed experts' gate (or up); ffn_gate for a dense FFN.
 * (The router, F32, reads the f32 input; the expert mat-vec then reuses the norm's quantized activations.) */
const qr_weight *qr_ffn_in(const qr_model *m, int il);
/* The norm before layer il's FFN: x += b_scale * b (b may be NULL), f->xb = rmsnorm(x) * w, as
 * qr_fused_add_rmsnorm with qr_ffn_in's hint. For a MoE layer the backend may also run the router and the
 * routing in the same op (add_rmsnorm_route); qr_block_moe then skips them. */
void qr_ffn_norm(const qr_model *m, qr_fwd *f, int il, const float *b, float b_scale, const qr_weight *w, int64_t n,
                 float eps);
/* MoE FFN of layer il on the f->n_rows rows of f->xb, result in f->xb2 (+ the shared expert). */
void qr_block_moe(const qr_model *m, qr_fwd *f, int il);
/* Dense FFN of layer il for the relu^2 archs (nemotron, nemotron_h: up/down with optional biases, no gate). */
void qr_block_ffn_relu2(const qr_model *m, qr_fwd *f, int il);
/* Mamba2 mixer of layer il on f->xb (normed input, n_tokens rows), result in f->xb2. */
void qr_block_mamba2(const qr_model *m, qr_fwd *f, int il);
/* Multi-head latent attention of layer il (deepseek2; mla.c), f->xb -> f->xb2, in llama.cpp's absorbed form: the
 * cache holds one head per token, [normed compressed KV (kv_lora) | roped shared key (n_rot)]; each query head's nope
 * part goes through attn_k_b into the compressed space, attention reads the compressed KV as the value, and attn_v_b
 * takes each head back to its value head before attn_output. */
void qr_block_mla(const qr_model *m, qr_fwd *f, int il);
/* Self-attention with the optional extras (biases, sinks, no rope, own scale), f->xb -> f->xb2. */
void qr_block_attention_x(const qr_model *m, qr_fwd *f, int il, bool rope, float scale);

/* llama.cpp's last-layer pruning: after the last layer's attention, keeps only the output rows of
 * f->x and f->xb2 (compacted to rows 0..n_outputs-1; f->xb is clobbered) and sets f->n_rows =
 * n_outputs, so that the rest of the layer runs on the same row counts, hence through the same
 * kernels, as llama.cpp's, and sets f->outputs_kept. No-op when every row is an output (llama.cpp
 * then keeps every row too). */
void qr_block_keep_outputs(const qr_model *m, qr_fwd *f);

/* Final norm and output projection of the gathered rows: f->logits (with final softcap); with
 * f->embd, only the final norm (into f->xo). */
void qr_block_output(const qr_model *m, qr_fwd *f);

/* ---- forward passes ---- */
void qr_llama_forward(const qr_model *m, qr_fwd *f);
/* Post-norm blocks (gemma3.c): gemma3, gemma2, glm4, and olmo2 (no pre-norms). */
void qr_gemma3_forward(const qr_model *m, qr_fwd *f);
/* BERT and nomic-bert (bert.c): always an embeddings pass; the final hidden states of all rows are
 * left in f->xo ([n_tokens][n_embd]); the plan must have n_outputs == n_tokens. */
void qr_bert_forward(const qr_model *m, qr_fwd *f);
/* MoE and hybrid families */
void qr_granite_forward(const qr_model *m, qr_fwd *f);
void qr_granite_hybrid_forward(const qr_model *m, qr_fwd *f);
void qr_nemotron_h_forward(const qr_model *m, qr_fwd *f);
void qr_gpt_oss_forward(const qr_model *m, qr_fwd *f);
void qr_nemotron_forward(const qr_model *m, qr_fwd *f);
void qr_phi3_forward(const qr_model *m, qr_fwd *f);
/* EAGLE-3 heads (eagle3.c): one pass of the draft layer over rows (token, f->e3.in row): g = fc(features) when the
 * rows are the target's captured states, else the row is g; the output rows' logits over the draft vocabulary
 * (output's rows; d2t maps them to target ids, spec.c) and their pre-norm states in f->e3.pre. Runs only in a head's
 * context (qr_context_create takes a head bound to its target by qr_eagle3_bind). */
void qr_eagle3_forward(const qr_model *m, qr_fwd *f);
/* Binds head to target (after qr_eagle3_check_target): the token embeddings and output matrix the head lacks become
 * copies of the target's prepared weights (both models on the same backend kind); once per head, the same target. */
qr_status qr_eagle3_bind(qr_model *head, const qr_model *target, char *err, size_t err_len);
/* The head context's row inputs for its next qr_decode: rows[n_tokens][width] (host), width 3 * target n_embd
 * (captured states) or the head's n_embd (g); read during that qr_decode, then forgotten. */
void qr_context_set_row_input(qr_context *ctx, const float *rows, int32_t width);
/* The pre-norm states [n_outputs][n_embd] of the output rows of a head context's last qr_decode (NULL elsewhere). */
const float *qr_context_pre_rows(const qr_context *ctx);
/* The eagle3 row's steps (qr_arch_info.load_extra, check_weights): block_count 1, the target-layer array, n_vocab
 * from the tokenizer and n_vocab_draft from d2t; enc.output_norm with norm_before_fc only, an output matrix where
 * d2t shrinks the vocabulary, d2t's ids inside the vocabulary and unique. */
qr_status qr_eagle3_load_extra(qr_model *m, char *err, size_t err_len);
qr_status qr_eagle3_check_weights(const qr_model *m, char *err, size_t err_len);

/* ---- embeddings (context.c, used by embed.c) ---- */

/* One embeddings pass over whole sequences: empties the KV cache, runs rows r < n (token tok[r] of
 * sequence seq[r] in [0, n_seq_max), positions counting from 0 in row order per sequence; n <= the
 * context's n_batch) and copies the final hidden state of every row (decoders: after the output
 * norm) into hidden[n][n_embd] (host). The cache is empty again afterwards. */
qr_status qr_context_embd_pass(qr_context *ctx, const int32_t *tok, const int32_t *seq, int32_t n, float *hidden,
                               char *err, size_t err_len);
/* The context's model, rows per pass and sequence count. */
qr_model *qr_context_model(const qr_context *ctx);
int32_t qr_context_n_batch(const qr_context *ctx);
/* The bookkeeping of a context's KV cache (kv/kv_cache.h). The caller may use the prefix-cache functions
 * on it between qr_decode calls, from the thread that decodes. */
struct qr_kv_cache *qr_context_kv_cache(qr_context *ctx);
int32_t qr_context_n_seq_max(const qr_context *ctx);
/* Row-exact passes (on: until turned off): every row of a qr_decode pass is computed with the kernels a
 * pass of that row alone would use, so its logits equal a one-row decode's bit for bit on backends whose
 * kernels depend on the row count (the CPU); the weights are still read once per pass. Speculative
 * verification turns it on around its passes, so that greedy speculative output equals plain decoding. */
void qr_context_set_row_exact(qr_context *ctx, bool on);
/* Top-k rows (k 1..QR_SAMPLER_TOPK_MAX; 0: off, the default): a later qr_decode of one pass on a backend that has
 * topk_rows brings each output row back as its k best candidates (qr_context_topk) instead of its logits; qr_get_logits
 * still gives any row (read from the device when first asked for, until the next pass). For batched decode steps
 * whose samplers need only a row's best candidates (qr_sampler_topk_need). */
void qr_context_set_topk(qr_context *ctx, int32_t k);
/* Output row `row`'s candidates of the last qr_decode (vals / ids[0..*k) in the sampler's order, *n_fin the row's
 * count of logits above -inf, -1 with a NaN or +inf); false when it brought back no candidates (use qr_get_logits). */
bool qr_context_topk(const qr_context *ctx, int32_t row, const float **vals, const int32_t **ids, int32_t *k,
                     int32_t *n_fin);
/* True once a rank of a tensor-parallel context failed during a forward pass (a device error, an all-reduce that
 * timed out): its ranks may be out of step, so qr_decode refuses further passes. */
bool qr_context_failed(const qr_context *ctx);

/* The model's GGUF (for the tokenizer and templates). */
const qr_gguf *qr_model_gguf(const qr_model *m);
/* The model's backend. */
qr_backend *qr_model_backend(const qr_model *m);

#endif /* QR_MODEL_H */
