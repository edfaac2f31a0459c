/* hybrid.h — what the MoE and hybrid (Mamba2 + attention) architectures add to a model: expert
 * and SSM hyper-parameters and weights (qr_model_x, loaded by hybrid_load.c), the per-pass scratch
 * and per-sequence SSM state (qr_fwd_x, ssm_state.c), and the blocks built on them (moe.c: the MoE
 * FFN; mamba2.c: the Mamba2 mixer). The forward passes are granite.c (granite, granitehybrid),
 * nemotron_h.c (nemotron_h, nemotron_h_moe) and gpt_oss.c; mixtral runs through llama.c, whose FFN
 * block hands layers with experts to qr_block_moe. */
#ifndef QR_MODEL_HYBRID_H
#define QR_MODEL_HYBRID_H

#include "model/model.h"
#include "kv/ssm_state.h"

/* What a layer's mixer and FFN are. */
typedef enum qr_layer_kind {
    QR_LAYER_ATTN = 0, /* self-attention (+ FFN for every arch but nemotron_h) */
    QR_LAYER_SSM = 1,  /* Mamba2 mixer */
    QR_LAYER_FFN = 2,  /* nemotron_h: an FFN-only block (dense or MoE) */
} qr_layer_kind;

typedef struct qr_hparams_x {
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
    float f_attention_scale;  /* {arch}.attention.scale */
    bool use_rope;            /* granite: rope.scaling.finetuned (default true); nemotron_h: false */
} qr_hparams_x;

typedef struct qr_layer_x {
    qr_layer_kind kind;
    int32_t n_ff;                 /* this layer's feed_forward_length (nemotron_h: per layer; 0 = none) */
    /* attention extras (gpt-oss, granite may have biases): F32, host NULL when absent */
    qr_weight q_b, k_b, v_b, o_b; /* [n_head * head_dim], [n_kv * head_dim] x2, [n_embd] */
    qr_weight attn_sinks;         /* [n_head] (gpt-oss) */
    /* nemotron: LayerNorm biases and FFN biases, F32, host NULL when absent */
    qr_weight attn_norm_b, ffn_norm_b; /* [n_embd] */
    qr_weight ffn_up_b;           /* [n_ff] */
    qr_weight ffn_down_b;         /* [n_embd] */
    /* MoE FFN; ffn_gate_inp.host == NULL: dense FFN (the qr_layer's ffn_* weights) */
    qr_weight gate_inp;           /* router [n_expert][n_embd] */
    qr_weight gate_inp_b;         /* F32 [n_expert] (gpt-oss) */
    qr_weight exp_probs_b;        /* F32 [n_expert] selection bias (nemotron_h_moe) */
    qr_weight gate_exps, up_exps; /* [n_expert][n_ff_exp][n_embd]; gate_exps absent for relu^2 experts */
    qr_weight down_exps;          /* [n_expert][n_embd][n_ff_exp] */
    qr_weight gate_exps_b, up_exps_b, down_exps_b; /* F32 [n_expert][n_ff_exp] / [n_expert][n_embd] (gpt-oss) */
    qr_weight gate_shexp, up_shexp; /* shared expert [n_ff_shexp][n_embd]; gate absent for relu^2 */
    qr_weight down_shexp;         /* [n_embd][n_ff_shexp] */
    /* Mamba2 */
    qr_weight ssm_in;             /* [2 d_inner + 2 n_group d_state + n_head][n_embd]: z | xBC | dt */
    qr_weight ssm_conv1d;         /* F32 [conv_dim][d_conv] */
    qr_weight ssm_conv1d_b;       /* F32 [conv_dim] */
    qr_weight ssm_dt_b;           /* F32 [n_head] */
    qr_weight ssm_a;              /* F32 [n_head] (= -exp(A_log)) */
    qr_weight ssm_d;              /* F32 [n_head] */
    qr_weight ssm_norm;           /* F32 [d_inner] (n_group groups) */
    qr_weight ssm_out;            /* [n_embd][d_inner] */
} qr_layer_x;

struct qr_model_x {
    qr_hparams_x hp;
    qr_layer_x *layers;    /* [n_layer] */
    qr_weight output_norm_b; /* nemotron: F32 [n_embd] bias of the final LayerNorm, host NULL when absent */
    qr_weight **weights;   /* every bound weight of the layers above (for prepare/release) */
    int64_t n_weights, cap_weights;
    char *names;           /* tensor name storage */
    size_t names_used, names_cap;
};

/* Per-context scratch of the MoE and SSM blocks (backend memory, rows = n_batch) and the SSM state. */
struct qr_fwd_x {
    int32_t n_batch;
    float *router;   /* [n_batch][n_expert] */
    int32_t *ids;    /* [n_batch][n_used] */
    float *weights;  /* [n_batch][n_used] */
    float *eh;       /* [n_batch][n_used][max(n_ff_exp, n_ff_shexp)] expert hidden */
    float *eo;       /* [n_batch][n_used][n_embd] expert outputs */
    float *sh;       /* [n_batch][n_ff_shexp] shared expert hidden */
    float *zxbcdt;   /* [n_batch][d_in_proj] */
    float *xbc;      /* [n_batch][conv_dim] after the conv */
    float *y;        /* [n_batch][d_inner] */
    qr_ssm_state *ssm; /* per-sequence conv and scan state (NULL without SSM layers) */
    qr_arch_stats stats;     /* counters (expert_selection points into sel_counts) */
    uint64_t *sel_counts;    /* [n_layer][n_expert] (host) */
    int32_t *ids_host;       /* [n_batch][n_used] host copy of ids (non-CPU backends) */
    bool stats_enabled;      /* non-CPU backends: read the routing back to count expert selection */
    int32_t routed_layer;    /* the layer whose router and routing qr_ffn_norm already ran with the norm, or -1 */
};

/* ---- loading (hybrid_load.c) ---- */

/* Loads the MoE / SSM hyper-parameters and every weight of an architecture that has a loader hook
 * into m (m->hp already holds the common hyper-parameters, n_vocab included). Returns
 * QR_ERR_NOT_FOUND (no message) when the model is a plain llama (no experts) to be loaded by the
 * generic path. Bad metadata (missing ssm keys, expert_count 0, top-k > experts) gives a clear
 * error naming the key. */
qr_status qr_model_x_load(qr_model *m, char *err, size_t err_len);
void qr_model_x_free(struct qr_model_x *x);

/* ---- per-context state (ssm_state.c in kv/, qr_fwd_x in moe.c) ---- */

/* Allocates f->x for a context of n_batch rows and n_seq_max sequences (NULL when the model has no
 * experts and no SSM layers). */
qr_status qr_fwd_x_create(const qr_model *m, qr_backend *be, int32_t n_batch, int32_t n_seq_max, struct qr_fwd_x **out,
                          char *err, size_t err_len);
void qr_fwd_x_free(qr_backend *be, struct qr_fwd_x *x);

/* ---- blocks ---- */

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
/* Self-attention with the optional extras (biases, sinks, no rope, own scale), f->xb -> f->xb2. */
void qr_block_attention_x(const qr_model *m, qr_fwd *f, int il, bool rope, float scale);

#endif /* QR_MODEL_HYBRID_H */
