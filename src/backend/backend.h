/* backend.h — the op table every compute backend implements (CPU now, CUDA next).
 *
 * A backend is a small table of function pointers (qr_backend_ops) plus the memory it owns.
 * The model code (src/model/) calls `be->ops->op(be, ...)`; it never touches backend memory itself.
 * be->ops is the checked table (backend_check.c, set up by qr_backend_init): each op's arguments are
 * validated there once (shapes against each other, NULL pointers, weight types against be->caps, the
 * batch plan's rows), then the backend's own table (be->impl_ops) runs; a bad argument is raised as
 * the op's error (last_error), never a crash. What a backend can do is described by be->caps and by
 * which optional slots it fills: callers ask these, never the backend's name (be->name is for logs).
 *
 * Memory. Activation buffers are plain pointers in the backend's address space, obtained from
 * ops->alloc (host memory on the CPU backend, device memory on CUDA). Only the CPU backend's
 * pointers may be dereferenced by the caller; use ops->write / ops->read to move data in and out.
 * All activation tensors are f32, row-major and contiguous: "[n_rows][dim]" means row r starts at
 * element r * dim. Weights are qr_weight views of GGUF data (rows of any quant type); a backend may
 * keep its own copy or repack (ops->weight_prepare), invisible to the caller.
 *
 * Batches. Every op that depends on token positions or sequences (get_rows, rope, kv_store,
 * attention, gather_outputs) reads the current batch plan, set once per forward pass with
 * ops->set_batch. A plan has n_tokens rows; row r is token tokens[r] at position pos[r] of
 * sequence seq[r]. Decoding one sequence is a plan with one row. The backend copies the plan's
 * arrays, so the caller may reuse them after set_batch returns.
 *
 * Paged KV cache. K and V rows live in fixed-size blocks of `block_size` token slots owned by the
 * backend (ops->kv_alloc). Slot s is block s / block_size, offset s % block_size. The bookkeeping
 * (which blocks a sequence uses, free list, refcounts) is the KV layer's (src/kv/kv_cache.h);
 * the backend only sees, per batch, the slot each row's K/V is written to (kv_slot) and each
 * sequence's block table. Invariant: position p of a sequence lives at logical index p of its
 * block table, i.e. in block block_table[seq][p / block_size], offset p % block_size.
 *
 * Threading and ordering. Ops are issued from one thread. A backend may run them asynchronously
 * (CUDA: one stream) but in issue order; ops->read and ops->synchronize wait for completion.
 * The CPU backend runs each op to completion on its thread pool before returning.
 *
 * Numerics (what the CPU scalar path defines and every other path must match within each op's
 * tolerance, tested in tests/unit/test_backend.c): matmul converts each activation row once to the
 * weight type's vec_dot_type (Q8_0/Q8_1 with the numerics of ggml's x86 activation quantizer,
 * cpu/act_quant.c) and then uses the quant module's vec_dot; rmsnorm accumulates the sum
 * of squares in double; rope uses ggml's frequency formula; attention follows ggml's non flash-attention
 * path bit for bit where it can (q and the softmax probabilities rounded to f16, f16 dot products
 * summed in tinyBLAS's lane order; see cpu/ops_scalar.c); geglu uses ggml's fp16-rounded tanh-GELU.
 * Small models amplify one-ulp differences into visible logit differences, hence the care.
 */
#ifndef QR_BACKEND_H
#define QR_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quarrel.h"
#include "quant/types.h"

typedef struct qr_backend qr_backend;

/* A weight tensor: a view of GGUF tensor data (normally inside the model's mmap, not owned). */
typedef struct qr_weight {
    const char *name;  /* tensor name, for messages (NUL-terminated, owned by the model) */
    qr_type type;      /* storage type of the rows */
    int64_t ne[4];     /* ne[0] = row length (the contiguous dim, k), ne[1] = number of rows (n); unused = 1 */
    size_t row_bytes;  /* bytes of one ne[0]-element row = qr_type_row_size(type, ne[0]) */
    const void *host;  /* [ne[3]][ne[2]][ne[1]] rows of row_bytes, host memory */
    void *device;      /* backend-private copy/repack made by weight_prepare (CPU: a load-time repack or NULL) */
    bool host_file;    /* host lies in the model file's read-only mapping (the CPU backend may drop its pages once
                        * repacked: they come back from the file if read again) */
    bool table;        /* bound as an embedding table (read by get_rows only): never repacked */
} qr_weight;

/* The rows of one forward pass. All arrays are host memory, read by set_batch only. */
typedef struct qr_batch_plan {
    int32_t n_tokens;           /* rows in this pass, >= 1 */
    const int32_t *tokens;      /* [n_tokens] token ids (used by get_rows) */
    const int32_t *pos;         /* [n_tokens] position of each row within its sequence, >= 0 */
    const int32_t *seq;         /* [n_tokens] row -> index into the block table, in [0, n_seqs) */
    const int32_t *kv_slot;     /* [n_tokens] cache slot receiving the row's K/V (block * block_size + offset) */
    int32_t n_seqs;             /* rows of block_table */
    int32_t max_blocks;         /* columns of block_table */
    const int32_t *block_table; /* [n_seqs][max_blocks] physical block of each logical block; -1 = none */
    int32_t n_outputs;          /* rows whose hidden state is gathered by gather_outputs, 0..n_tokens */
    const int32_t *output_rows; /* [n_outputs] row indices, each in [0, n_tokens) */
    bool row_exact;             /* compute every row with the kernels of a one-row pass (speculative
                                 * verification: each row's logits equal those of a decode pass of that row
                                 * alone); a backend whose kernels do not depend on the row count ignores it */
    const int32_t *exact_blocks;/* row_exact: [n_tokens] the block-table width (max_blocks) a one-row pass of each row
                                 * would have (launch shapes that depend on it follow it), else NULL */
    bool exact_graph;           /* row_exact: a one-row pass would replay a recorded graph (its launch shapes) */
} qr_batch_plan;

/* Layout of the paged KV storage. */
typedef struct qr_kv_desc {
    int32_t n_layer;    /* layers with a KV cache */
    int32_t n_blocks;   /* physical blocks */
    int32_t block_size; /* token slots per block */
    int32_t k_dim;      /* elements of one K row per layer = n_head_kv * head_dim_k */
    int32_t v_dim;      /* elements of one V row per layer = n_head_kv * head_dim_v */
    qr_type type_k;     /* storage of the K rows: QR_TYPE_F16 (default, as llama.cpp), F32, BF16, Q8_0, Q4_0
                         * (block types: k_dim a multiple of the block size; each row quantized on its own) */
    qr_type type_v;     /* storage of the V rows, the same choices */
    int32_t rot_k;      /* > 0: K rows are stored rotated by the orthonormal Walsh-Hadamard transform in chunks of
                         * rot_k values (a power of two dividing the head size: llama.cpp's attn_rot for quantized
                         * caches, which spreads outliers over a block); attention rotates q the same way. 0 = none */
    int32_t rot_v;      /* > 0: V rows stored rotated in chunks of rot_v values; attention rotates its output back */
    int32_t head_dim_k, head_dim_v; /* the heads' sizes attention will take (a backend may refuse a cache type for
                                     * them in kv_alloc); 0 = not given */
} qr_kv_desc;

/* Bytes of one K (V) row of a slot in storage of this layout: qr_type_row_size(type_k, k_dim). */
static inline size_t qr_kv_row_bytes_k(const qr_kv_desc *d) { return qr_type_row_size(d->type_k, d->k_dim); }
static inline size_t qr_kv_row_bytes_v(const qr_kv_desc *d) { return qr_type_row_size(d->type_v, d->v_dim); }

/* Opaque KV storage owned by a backend. Every backend's struct qr_kv_storage begins with its qr_kv_desc
 * (a _Static_assert in each says so), which the argument checks read through qr_kv_storage_desc. */
typedef struct qr_kv_storage qr_kv_storage;

/* The layout of KV storage made by any backend's kv_alloc. */
static inline const qr_kv_desc *qr_kv_storage_desc(const qr_kv_storage *kv) {
    return (const qr_kv_desc *)(const void *)kv;
}

typedef enum qr_rope_mode {
    QR_ROPE_NORMAL = 0, /* rotate adjacent pairs (x[2i], x[2i+1]): llama */
    QR_ROPE_NEOX = 2,   /* rotate halves (x[i], x[i + n_rot/2]): gemma, qwen, gpt-neox (ggml's value 2) */
} qr_rope_mode;

/* Rotary embedding parameters (ggml's rope with YaRN fields; ext_factor 0 disables YaRN). */
typedef struct qr_rope_params {
    qr_rope_mode mode;
    int32_t n_rot;                   /* rotated dims per head, even, <= head_dim; the rest pass through */
    float freq_base;                 /* theta base, e.g. 10000 */
    float freq_scale;                /* linear scaling: 1 / factor (1 = none) */
    const qr_weight *freq_factors;   /* F32 [n_rot / 2] divisors of each frequency (llama3 rope_freqs), or NULL */
    float ext_factor;                /* YaRN extrapolation mix (0 = off) */
    float attn_factor;               /* magnitude scale of cos/sin (1 = none) */
    float beta_fast, beta_slow;      /* YaRN ramp bounds (used when ext_factor != 0) */
    int32_t n_ctx_orig;              /* training context (YaRN) */
} qr_rope_params;

/* Attention over the paged cache for one layer. */
typedef struct qr_attn_params {
    int32_t n_head;    /* query heads */
    int32_t n_head_kv; /* key/value heads; n_head % n_head_kv == 0 (GQA: q head h reads kv head h / (n_head / n_head_kv)) */
    int32_t head_dim_k;/* q/k head size */
    int32_t head_dim_v;/* v head size (output head size) */
    float scale;       /* logits = scale * softcap(q.k) (llama.cpp's order: cap first, then kq_scale) */
    float softcap;     /* > 0: softcap(x) = softcap * tanh(x / softcap); 0 = off (identity) */
    int32_t window;    /* > 0: row at position p sees positions (p - window, p]; 0 = all of [0, p] */
    bool non_causal;   /* true: a row sees every position its sequence has in the current pass (encoders:
                        * BERT); false (zero value): causal, positions <= pos[r] */
    const qr_weight *sinks; /* F32 [n_head] attention sinks (gpt-oss): head h's softmax also counts exp(sinks[h])
                             * in its denominator (a virtual key with no value); NULL (zero value) = none */
    const qr_weight *next;  /* hint: the weight that multiplies the output next (the attention output
                             * projection), so the backend may prepare its activations; NULL = none */
} qr_attn_params;

/* ---- MoE and Mamba2 (SSM) op parameters ---- */

/* How router logits become expert weights (llama.cpp's expert gating functions). */
typedef enum qr_moe_gating {
    QR_MOE_SOFTMAX = 0,        /* probs = softmax(logits); top-k of probs; weights = the selected probs */
    QR_MOE_SIGMOID = 1,        /* probs = sigmoid(logits); top-k of probs (+ selection bias); weights = probs */
    QR_MOE_SOFTMAX_WEIGHT = 2, /* top-k of the logits; weights = softmax over the k selected logits (gpt-oss) */
} qr_moe_gating;

typedef struct qr_moe_route_params {
    int32_t n_expert;          /* experts, >= 1 */
    int32_t n_used;            /* experts per token (top-k), 1..n_expert */
    qr_moe_gating gating;
    bool norm;                 /* divide the k weights by their sum (clamped to >= 2^-14, as llama.cpp) */
    float scale;               /* then multiply them by scale (1 = none) */
    const qr_weight *sel_bias; /* F32 [n_expert] added to probs for the selection only (nemotron-h), or NULL */
    int32_t n_groups;          /* > 1: group-limited routing (DeepSeek): the experts form n_groups groups of
                                * n_expert / n_groups (>= 2), a group scores the sum of its two best selection scores,
                                * and the top-k is taken within the n_group_used best groups; 0 or 1: none */
    int32_t n_group_used;
} qr_moe_route_params;

/* Activation of a gated (or plain) FFN: h = act(g, u). */
typedef enum qr_glu_kind {
    QR_GLU_SWIGLU = 0,     /* silu(g) * u */
    QR_GLU_SWIGLU_OAI = 1, /* gpt-oss: g' = min(g, 7), u' = clamp(u, -7, 7), g' * sigmoid(1.702 g') * (u' + 1) */
    QR_GLU_RELU2 = 2,      /* relu(g)^2, no u (nemotron, nemotron-h) */
    QR_GLU_SIGMOID = 3,    /* sigmoid(g) as llama.cpp's qwen2moe computes it, silu(g) / g with the C library's
                            * expf; no u; the glu op only (qwen2moe's shared-expert gate) */
} qr_glu_kind;

/* Shapes of a Mamba2 mixer (llama.cpp's ssm_* hyper-parameters). */
typedef struct qr_ssm_params {
    int32_t d_conv;   /* conv kernel width (4) */
    int32_t d_inner;  /* n_head * head_dim */
    int32_t d_state;  /* state size per head channel (N) */
    int32_t n_head;   /* SSM heads (ssm.time_step_rank) */
    int32_t head_dim; /* d_inner / n_head */
    int32_t n_group;  /* groups sharing B and C; n_head % n_group == 0 */
    int32_t conv_dim; /* channels through the conv: d_inner + 2 * n_group * d_state (x | B | C) */
} qr_ssm_params;

/* What a backend can do, filled once by its create (qr_backend_init) and read by the model and by the
 * argument checks. Which optional ops (fusions, graphs, MoE, Mamba2) it has is told by the op table's
 * non-NULL slots, not repeated here. */
typedef struct qr_backend_caps {
    bool host_memory;      /* true: alloc'd buffers are host memory the caller may read directly (CPU);
                            * false: device memory, reached through read / write only */
    bool exact;            /* true: the ops follow the CPU oracle's arithmetic order (CPU; CUDA's exact mode,
                            * QUARREL_CUDA_EXACT=1: no fusions, logits equal to the AVX2 CPU path's) */
    int32_t max_head_dim;  /* largest head_dim_k / head_dim_v attention takes */
    uint64_t matmul_types; /* bit t set: matmul, matmul_id and the fused matmuls take weights of qr_type t */
    uint64_t kv_types;     /* bit t set: kv_alloc takes K or V storage of qr_type t (a backend may still refuse a
                            * combination of type_k and type_v, or a head size, in kv_alloc, with a message) */
    int32_t row_exact_rows;/* a row_exact pass may hold at most this many rows (contexts split longer batches); 0: any */
} qr_backend_caps;

/* The bit of qr_type t in a caps type mask. */
#define QR_TYPE_BIT(t) ((uint64_t)1 << (unsigned)(t))

/* A summary of the current batch plan, kept by the checked set_batch for the O(1) checks of the ops
 * that read it (get_rows' token ids, kv_store's slots, add_row's positions). */
typedef struct qr_plan_summary {
    int32_t n_tokens;             /* rows; 0 before the first set_batch */
    int32_t min_token, max_token; /* range of tokens[] */
    int32_t max_pos;              /* largest pos[] */
    int32_t max_slot;             /* largest kv_slot[] */
} qr_plan_summary;

/* ---- parameters of the ops with many arguments ---- */

/* add_rmsnorm: x += b_scale * b, then y = rmsnorm(x) * w; with router set, also the MoE router and routing
 * on y (logits = y . router^T (+ router_b), then moe_route(logits, route) into ids / weights). */
typedef struct qr_add_rmsnorm_args {
    float *x;                        /* [n_rows][dim] residual, updated in place */
    const float *b;                  /* [n_rows][dim] added to x first, or NULL: none */
    float b_scale;                   /* b's factor (1 = plain add; != 1: as scale then add) */
    const qr_weight *b_norm;         /* F32 [dim], or NULL: b is first replaced by rmsnorm(b) * b_norm (eps), as
                                      * the rmsnorm op computes it (a post-norm: gemma's post_attention_norm);
                                      * b_scale 1, no router. The op may decline this form (false) */
    const qr_weight *w;              /* F32 [dim] norm weight, or NULL: none */
    int64_t n_rows, dim;
    float eps;
    float *y;                        /* [n_rows][dim] the normed rows; may not alias x */
    const qr_weight *next;           /* hint: the weight y is multiplied with next (the backend may prepare
                                      * y's activations for it), or NULL */
    /* the MoE routing (all NULL: none) */
    const qr_weight *router;         /* F32 [n_expert][dim] */
    const qr_weight *router_b;       /* F32 [n_expert] or NULL */
    const qr_moe_route_params *route;
    float *logits;                   /* [n_rows][n_expert] */
    int32_t *ids;                    /* [n_rows][n_used] */
    float *weights;                  /* [n_rows][n_used] */
} qr_add_rmsnorm_args;

/* rope_attention: rope(q, n_head), rope(k, n_head_kv), kv_store(kv, layer, k, v), then (out set) attention
 * over the layer into out. */
typedef struct qr_rope_attn_args {
    float *q;                    /* [n_tok][n_head * head_dim_k], roped in place (then unspecified with out) */
    float *k;                    /* [n_tok][n_head_kv * head_dim_k], roped in place */
    const float *v;              /* [n_tok][n_head_kv * head_dim_v] */
    const qr_rope_params *rope;
    qr_kv_storage *kv;
    int32_t layer;
    const qr_attn_params *attn;  /* the heads (n_head, n_head_kv, head_dim_k: also of the rope and the store);
                                  * with out NULL only those three are read */
    float *out;                  /* [n_tok][n_head * head_dim_v], or NULL: rope + kv_store only */
    float q_scale;               /* with out: q multiplied by q_scale after its rope, before attention, as the
                                  * scale op would (gemma's query_pre_attn_scalar, phi3); 0 or 1: not */
    const qr_weight *q_norm;     /* with out: F32 [head_dim_k] per-head RMS norms of q and of k (eps norm_eps) */
    const qr_weight *k_norm;     /* before their rope, as rmsnorm over rows of head_dim_k (qwen3, gemma3), or
                                  * NULL: none. Both or neither; the op may decline this form (false). */
    float norm_eps;
} qr_rope_attn_args;

/* mla_prep (deepseek2's multi-head latent attention, between the input projections and the per-head attn_k_b): for
 * each row t of the pass, c = kv_a[t][0, R) and pe = kv_a[t][R, R + dr] (one rope head of dr values):
 * kv_store(kv, layer, k = [rmsnorm(c) * norm | rope(pe)], v = rmsnorm(c) * norm), and for each query head h < H,
 * q_out[t][h][R + i] = rope(q[t][h][dq - dr + i]) (i < dr; the first R values of each q_out head are left alone):
 * what mla.c composes of copy_rows, rmsnorm, rope and kv_store otherwise, with their rounding. */
typedef struct qr_mla_prep_args {
    const float *kv_a;           /* [n_tok][R + dr] */
    const float *q;              /* [n_tok][H][dq] */
    float *q_out;                /* [n_tok][H][R + dr] */
    const qr_weight *norm;       /* F32 [R] */
    float eps;
    int32_t n_head, kv_lora, n_rot, head_dim_q; /* H, R, dr, dq */
    const qr_rope_params *rope;  /* of dr values a head */
    qr_kv_storage *kv;
    int32_t layer;
} qr_mla_prep_args;

/* The expert matmuls (matmul_id, moe_gate_up, moe_down_combine): slot (r, j) of row r < n_rows,
 * j < n_used uses expert e = ids[r][j]. Weights are [n_expert][n_out][n_in] (ne = {n_in, n_out, n_expert});
 * biases F32 [n_expert][n_out] or NULL. */
typedef struct qr_moe_matmul_args {
    const qr_weight *w, *w_b;       /* the expert matrix (moe_gate_up: up) and its bias */
    const qr_weight *gate, *gate_b; /* moe_gate_up: the gate matrix and its bias (gate NULL: QR_GLU_RELU2 only) */
    qr_glu_kind act;                /* moe_gate_up: h = act(gate x + gate_b, w x + w_b) */
    const float *x;                 /* [n_rows][n_in], or with x_per_slot [n_rows][n_used][n_in] */
    bool x_per_slot;                /* matmul_id: slot (r, j) reads x[r][j] (moe_down_combine: always) */
    const int32_t *ids;             /* [n_rows][n_used] expert ids (backend memory) */
    int64_t n_rows;
    int32_t n_used;
    float *y;                       /* matmul_id, moe_gate_up: [n_rows][n_used][n_out];
                                     * moe_down_combine: [n_rows][n_out], may be add */
    /* moe_down_combine only */
    const float *weights;           /* [n_rows][n_used] slot weights */
    const float *add;               /* [n_rows][n_out] added after the sum (the shared expert), or NULL */
    float *scratch;                 /* [n_rows][n_used][n_out], may be written */
} qr_moe_matmul_args;

/* matmul_heads: one matrix per head over a strided activation (multi-head latent attention's attn_k_b / attn_v_b):
 * y[r][h * y_head + i] = sum_c W[h][i][c] x[r][h * x_head + c] for r < n_rows, h < w->ne[2], i < w->ne[1],
 * c < w->ne[0]; rows x_row / y_row floats apart. Each head is computed as matmul computes a 2-D weight of that
 * head's rows over the n_rows contiguous rows of its slice (llama.cpp's mul_mat of a 3-D weight, which its CPU
 * backend never repacks). */
typedef struct qr_matmul_heads_args {
    const qr_weight *w; /* [n_head][n_out][n_in] (ne = {n_in, n_out, n_head}) */
    const float *x;
    int64_t x_row, x_head;
    int64_t n_rows;
    float *y;           /* may not overlap x */
    int64_t y_row, y_head;
} qr_matmul_heads_args;

/* ssm_scan (see the op). */
typedef struct qr_ssm_scan_args {
    float *state;                  /* [n_slots][n_head][head_dim][d_state], updated */
    const float *xbc;              /* [n_tok][conv_dim] = x | B | C */
    const float *dt;               /* [n_tok][dt_stride], n_head values from dt[r][0] */
    int64_t dt_stride;
    const qr_weight *dt_bias, *A, *D; /* F32 [n_head] each; dt_bias and D may be NULL (0) */
    const qr_ssm_params *p;
    float *y;                      /* [n_tok][d_inner] */
} qr_ssm_scan_args;

/* ssm_gate_norm (see the op). */
typedef struct qr_ssm_gate_norm_args {
    const float *y;        /* [n_rows][d_inner] */
    const float *z;        /* [n_rows][z_stride], the gate at z[r][0..d_inner) */
    int64_t z_stride;
    const qr_weight *w;    /* F32 [d_inner] (or [n_group][d_inner / n_group]), or NULL: out = y * silu(z) */
    int64_t n_rows;
    const qr_ssm_params *p;
    float eps;
    float *out;            /* [n_rows][d_inner], may alias y */
    const qr_weight *next; /* hint: the weight out is multiplied with next, or NULL */
} qr_ssm_gate_norm_args;

typedef struct qr_backend_ops {
    /* ---- lifetime and memory ---- */
    /* Frees the backend, its pools and everything it allocated. */
    void (*destroy)(qr_backend *be);
    /* Allocates `bytes` (64-byte aligned) of backend memory; NULL on failure. */
    void *(*alloc)(qr_backend *be, size_t bytes);
    void (*free)(qr_backend *be, void *ptr);
    /* Copies host -> backend memory, and backend -> host (waits for pending ops). */
    void (*write)(qr_backend *be, void *dst, const void *src_host, size_t bytes);
    void (*read)(qr_backend *be, void *dst_host, const void *src, size_t bytes);
    /* Host memory that read fills fastest (CUDA: page-locked, 128 KB of logits in ~10 us instead of ~29),
     * or NULL when it has none to give (the caller then uses malloc / free); host_free releases only what
     * host_alloc gave. Both NULL: malloc / free. */
    void *(*host_alloc)(qr_backend *be, size_t bytes);
    void (*host_free)(qr_backend *be, void *ptr);
    /* Waits until every issued op has finished. */
    void (*synchronize)(qr_backend *be);
    /* Makes `w` usable by this backend's ops (upload / repack into w->device). CPU: no-op. */
    qr_status (*weight_prepare)(qr_backend *be, qr_weight *w, char *err, size_t err_len);
    /* Releases what weight_prepare made (w->device = NULL). */
    void (*weight_release)(qr_backend *be, qr_weight *w);
    /* Returns QR_OK, or the first error an op raised since the last call (ops return void: an
     * allocation failure inside an op, or an asynchronous device error, is reported here), and
     * clears it. Call once after a forward pass. */
    qr_status (*last_error)(qr_backend *be, char *err, size_t err_len);
    /* Changes the worker count (CPU); ignored by backends without threads. n_threads >= 1. */
    qr_status (*set_n_threads)(qr_backend *be, int32_t n_threads, char *err, size_t err_len);
    /* Records an op error as the ops do (the first since last_error is kept); the argument checks use it. */
    void (*raise)(qr_backend *be, qr_status st, const char *msg);
    /* Free and total bytes of the memory this backend allocates from; NULL where that is host memory
     * (the caller then asks the OS). False when unavailable. */
    bool (*mem_info)(qr_backend *be, size_t *free_bytes, size_t *total_bytes);

    /* ---- KV storage ---- */
    /* Allocates zeroed paged K/V storage; NULL with a message on failure. */
    qr_kv_storage *(*kv_alloc)(qr_backend *be, const qr_kv_desc *desc, char *err, size_t err_len);
    void (*kv_free)(qr_backend *be, qr_kv_storage *kv);
    /* Copies every layer's K and V rows of physical block src into block dst (copy-on-write). */
    void (*kv_copy_block)(qr_backend *be, qr_kv_storage *kv, int32_t src, int32_t dst);

    /* ---- per-pass state ---- */
    /* Sets the batch plan used by the position/sequence-aware ops below (copied). */
    qr_status (*set_batch)(qr_backend *be, const qr_batch_plan *plan, char *err, size_t err_len);

    /* ---- ops (n_tok = the plan's n_tokens unless a count is passed) ---- */
    /* out[n_tok][table->ne[0]] = dequantized rows table[tokens[r]]. */
    void (*get_rows)(qr_backend *be, const qr_weight *table, float *out);
    /* out[n_outputs][dim] = src[output_rows[o]][dim]. */
    void (*gather_outputs)(qr_backend *be, const float *src, int64_t dim, float *out);
    /* y[n_rows][w->ne[1]] = x[n_rows][w->ne[0]] . w^T (w 2-D, any type with a vec_dot). */
    void (*matmul)(qr_backend *be, const qr_weight *w, const float *x, int64_t n_rows, float *y);
    /* y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w (w: F32 [dim], or NULL for none). y may equal x. */
    void (*rmsnorm)(qr_backend *be, const float *x, const qr_weight *w, int64_t n_rows, int64_t dim, float eps,
                    float *y);
    /* y[r] = (x[r] - mean) / sqrt(var + eps) * w + b (w, b: F32 [dim] or NULL). y may equal x. */
    void (*layernorm)(qr_backend *be, const float *x, const qr_weight *w, const qr_weight *b, int64_t n_rows,
                      int64_t dim, float eps, float *y);
    /* In place on x[n_tok][n_head][head_dim]: rotates the first n_rot dims of every head by the
     * row's position. */
    void (*rope)(qr_backend *be, float *x, int32_t n_head, int32_t head_dim, const qr_rope_params *p);
    /* Writes k[n_tok][k_dim] and v[n_tok][v_dim] of layer `layer` into the rows' kv slots. */
    void (*kv_store)(qr_backend *be, qr_kv_storage *kv, int32_t layer, const float *k, const float *v);
    /* out[n_tok][n_head * head_dim_v] = softmax(scale * softcap(q.K^T)) V over the row's sequence, causal
     * (positions <= pos[r]) and windowed; q: [n_tok][n_head * head_dim_k]. Call kv_store first.
     * CPU: scores and V sums are summed in llama.cpp's order, which differs between one-row passes
     * (decode) and multi-row passes, so a row's output can differ in the last bits between the two. */
    void (*attention)(qr_backend *be, qr_kv_storage *kv, int32_t layer, const float *q, const qr_attn_params *p,
                      float *out);
    /* out[i] = silu(g[i]) * u[i], i < n. */
    void (*swiglu)(qr_backend *be, const float *g, const float *u, int64_t n, float *out);
    /* out[i] = gelu_tanh(g[i]) * u[i], i < n (ggml's GELU: input and result rounded to f16). */
    void (*geglu)(qr_backend *be, const float *g, const float *u, int64_t n, float *out);
    /* out[i] = a[i] + b[i]; out[i] = a[i] * b[i]; out[i] = s * x[i]; any may alias. */
    void (*add)(qr_backend *be, const float *a, const float *b, int64_t n, float *out);
    void (*mul)(qr_backend *be, const float *a, const float *b, int64_t n, float *out);
    void (*scale)(qr_backend *be, const float *x, float s, int64_t n, float *out);
    /* out[i] = cap * tanh(x[i] / cap) (final-logit softcapping). */
    void (*softcap)(qr_backend *be, const float *x, float cap, int64_t n, float *out);
    /* Row-wise softmax of x[n_rows][dim]. out may equal x. */
    void (*softmax)(qr_backend *be, const float *x, int64_t n_rows, int64_t dim, float *out);
    /* dst[0..n) = src[0..n) (floats). */
    void (*copy)(qr_backend *be, const float *src, int64_t n, float *dst);
    /* dst[r * dst_stride + i] = src[r * src_stride + i] for r < n_rows, i < width (a strided copy: a column
     * range of rows into another); the ranges may not overlap. */
    void (*copy_rows)(qr_backend *be, const float *src, int64_t src_stride, float *dst, int64_t dst_stride,
                      int64_t n_rows, int64_t width);
    /* One matrix per head (qr_matmul_heads_args). */
    void (*matmul_heads)(qr_backend *be, const qr_matmul_heads_args *a);
    /* x[r][i] += table row of r, for r < n_rows and i < table->ne[0] (dequantized from any type with a
     * to_float): row >= 0 adds that one row to every r (a bias: an F32 [dim] vector with row 0; token type
     * 0), row == -1 adds row pos[r] of the batch plan (learned position embeddings). out may equal x. */
    void (*add_row)(qr_backend *be, const float *x, const qr_weight *table, int64_t row, int64_t n_rows, float *out);

    /* ---- optional (NULL when a backend does not have them) ---- */
    /* Runs fn(arg), a sequence of the ops above on the current batch plan, as one replayable unit
     * (CUDA: a graph) cached under (owner, key): the first call runs it plainly (a warm-up that sizes
     * every scratch buffer), the second records and launches it, later calls replay the record.
     * The ops must depend on the plan only through its device-side arrays: same buffers, same row
     * counts, same n_seqs / max_blocks for one key (the caller puts them in the key). Returns QR_OK
     * when fn's work was issued (replayed, or run plainly when recording is unavailable). */
    qr_status (*run_graph)(qr_backend *be, const void *owner, uint64_t key, void (*fn)(void *arg), void *arg,
                           char *err, size_t err_len);
    /* Forgets the records of `owner` (call before freeing the buffers they use). */
    void (*graph_release)(qr_backend *be, const void *owner);

    /* ---- optional fusions (NULL: the model composes the plain ops; model/blocks.c qr_fused_*) ---- */
    /* add + rmsnorm as one op, and with a->router also the MoE router and moe_route (qr_add_rmsnorm_args).
     * Returns false, having done nothing, where the backend does not take the routed form or the post-normed
     * one (a->b_norm; the caller then runs the plain ops); the plain form is always taken. */
    bool (*add_rmsnorm)(qr_backend *be, const qr_add_rmsnorm_args *a);
    /* y[i] = x . w[i]^T for i < n_w (1..3), as n_w matmul calls on the same x; b (may be NULL, as may
     * each b[i]): then add_row(y[i], b[i], 0) for each bias (F32 [w[i]->ne[1]]). */
    void (*matmul_multi)(qr_backend *be, int32_t n_w, const qr_weight *const *w, const qr_weight *const *b,
                         const float *x, int64_t n_rows, float *const *y);
    /* out = swiglu(x . gate^T, x . up^T) as matmul, matmul, swiglu (gelu: geglu); scratch [n_rows][n] may be
     * written. */
    void (*matmul_glu)(qr_backend *be, const qr_weight *gate, const qr_weight *up, const float *x, int64_t n_rows,
                       bool gelu, float *out, float *scratch);
    /* out = glu(x . w^T, NULL, act) as matmul then glu, for an activation of one input (QR_GLU_RELU2);
     * scratch [n_rows][n] may be written. */
    void (*matmul_act)(qr_backend *be, const qr_weight *w, const float *x, int64_t n_rows, qr_glu_kind act, float *out,
                       float *scratch);
    /* rope + kv_store, then (a->out set) attention, as one op (qr_rope_attn_args). Returns false, having
     * done nothing, where the backend does not take the pass with attention (the caller then runs the plain
     * ops); the form without attention is always taken. After true with out, q and k hold unspecified values. */
    bool (*rope_attention)(qr_backend *be, const qr_rope_attn_args *a);
    /* deepseek2's cached row and query rope parts in one op (qr_mla_prep_args); false, having done nothing, where
     * the backend does not take it (the model runs the plain ops). */
    bool (*mla_prep)(qr_backend *be, const qr_mla_prep_args *a);
    /* A hint: x[n_rows][k] is not written until act_hold(be, NULL, 0, 0), so the backend may keep the
     * activations it prepares for x's matmuls (e.g. quantized) across the ops in between (the MoE block:
     * the shared expert, the router and the routed experts all multiply the normed input). */
    void (*act_hold)(qr_backend *be, const float *x, int64_t n_rows, int64_t k);
    /* matmul_id(a->w, a->w_b, a->x, x_per_slot = true, a->ids, ...) into a->scratch, then moe_combine(scratch,
     * a->weights, a->add, a->y) (qr_moe_matmul_args). */
    void (*moe_down_combine)(qr_backend *be, const qr_moe_matmul_args *a);

    /* ---- MoE (cpu/ops_moe.c, cuda/moe.cu) ---- */
    /* Routing: logits[n_rows][n_expert] -> ids[n_rows][n_used] (int32, backend memory; expert ids in the
     * order of decreasing score) and weights[n_rows][n_used], per p (see qr_moe_gating). */
    void (*moe_route)(qr_backend *be, const float *logits, int64_t n_rows, const qr_moe_route_params *p, int32_t *ids,
                      float *weights);
    /* Indexed matmul (ggml's mul_mat_id, qr_moe_matmul_args): y[r][j][n_out] = W[e] . x_r (+ w_b[e]),
     * e = ids[r][j]; x_r = x[r] or, with x_per_slot, x[r][j]. Tokens routed to the same expert are computed
     * together. */
    void (*matmul_id)(qr_backend *be, const qr_moe_matmul_args *a);
    /* The fused expert up-projection: y[r][j][n_out] = act(G[e] x[r] + gate_b[e], W[e] x[r] + w_b[e]),
     * e = ids[r][j]; gate may be NULL for QR_GLU_RELU2 (then act applies to W[e] x[r]). */
    void (*moe_gate_up)(qr_backend *be, const qr_moe_matmul_args *a);
    /* out[r][i] = sum_j w[r][j] * y[r][j][i] (j in order) [+ add[r][i] after the sum, when add is not NULL:
     * the shared expert], r < n_rows, i < dim. out may not alias y; it may be add. */
    void (*moe_combine)(qr_backend *be, const float *y, const float *w, int64_t n_rows, int32_t n_used, int64_t dim,
                        const float *add, float *out);
    /* out[i] = act(g[i], u[i]) (u unused, may be NULL, for QR_GLU_RELU2 and QR_GLU_SIGMOID), i < n. out may
     * alias g. */
    void (*glu)(qr_backend *be, const float *g, const float *u, int64_t n, qr_glu_kind act, float *out);

    /* ---- Mamba2 (cpu/ops_ssm.c, cuda/ssm.cu). Row r of the plan uses state slot seq[r]; rows are
     * applied in row order, so one sequence's rows may interleave with others'. ---- */
    /* Causal depthwise conv1d with rolling state: for channel c < conv_dim, window = the d_conv - 1
     * previous inputs (from conv_state[seq] and earlier rows) and x[r][c]; out[r][c] = silu(sum_k
     * window[k] * w[c][k] + b[c]). x: [n_tok][x_stride] (channels at x[r][0..conv_dim)); conv_state:
     * [n_slots][d_conv - 1][conv_dim], updated to the last d_conv - 1 inputs; w: F32 [conv_dim][d_conv];
     * b: F32 [conv_dim] or NULL. */
    void (*ssm_conv)(qr_backend *be, const float *x, int64_t x_stride, float *conv_state, const qr_weight *w,
                     const qr_weight *b, const qr_ssm_params *p, float *out);
    /* Selective scan (Mamba2, scalar A per head): for head h (group g = h / (n_head / n_group)),
     * dt' = softplus(dt[r][h] + dt_bias[h]), dA = exp(dt' * A[h]),
     * S[h][i][n] = S[h][i][n] * dA + B[r][g][n] * x[r][h][i] * dt',  y[r][h][i] = sum_n S[h][i][n] C[r][g][n]
     *              + D[h] * x[r][h][i].
     * xbc: [n_tok][conv_dim] = x (d_inner) | B (n_group * d_state) | C (n_group * d_state); dt: [n_tok][dt_stride]
     * (n_head values from dt[r][0]); state: [n_slots][n_head][head_dim][d_state], updated; y: [n_tok][d_inner].
     * A, D, dt_bias: F32 [n_head]. A state that becomes NaN/Inf raises an error ("ssm state diverged").
     * Arguments: qr_ssm_scan_args. */
    void (*ssm_scan)(qr_backend *be, const qr_ssm_scan_args *a);
    /* Gated grouped RMSNorm (qr_ssm_gate_norm_args): t = y * silu(z); out[r][g] = t[r][g] / sqrt(mean(t[r][g]^2)
     * + eps) * w[g] over groups of d_inner / n_group (w NULL: out = t, no norm). next: a hint, as add_rmsnorm's. */
    void (*ssm_gate_norm)(qr_backend *be, const qr_ssm_gate_norm_args *a);

    /* ---- tensor parallelism (optional) ---- */
    /* Makes the calling thread use this backend's device (CUDA: cudaSetDevice); NULL: nothing to do. A
     * tensor-parallel context calls it once on each rank's worker thread. */
    void (*thread_bind)(qr_backend *be);
    /* buf[0..n) = the sum of buf over every rank of the group the backend joined (qr_backend_cuda_tp_init), in
     * place, issued in order like any op (a graph may record it); NULL: the caller sums host memory itself. */
    void (*all_reduce)(qr_backend *be, float *buf, int64_t n);
    /* Another rank is gone (ranks in several processes): ends this backend's group so that an all-reduce waiting for
     * that rank returns (CUDA: ncclCommAbort, callable from another thread while a kernel waits); later all-reduces
     * raise an error. NULL: nothing to end (the CPU's sums fail on their own connections). */
    void (*tp_abort)(qr_backend *be);
    /* Copies n_rows rows of row_bytes from backend memory (rows src_pitch bytes apart) into host memory (dst_pitch
     * apart), waiting for pending ops: a rank's columns of the logits straight into the context's rows (required
     * for tensor parallelism). */
    void (*read_rows)(qr_backend *be, void *dst_host, size_t dst_pitch, const void *src, size_t src_pitch,
                      size_t row_bytes, size_t n_rows);
    /* The k (1..64, <= n) largest of each of the n_rows rows of src (backend memory, [n_rows][n] f32) in the
     * sampler's order (value descending, ties: the lower index first; -0 equals +0), waiting for pending ops, into
     * host memory out: vals [n_rows][k] f32, then ids [n_rows][k] int32, then n_fin [n_rows] int32 (the row's
     * count of values above -inf, -1 when it holds a NaN or +inf). NULL: the caller reads the rows (a batched
     * step's sampling then scans them on the host). */
    void (*topk_rows)(qr_backend *be, const float *src, int64_t n_rows, int64_t n, int32_t k, void *out);
} qr_backend_ops;

struct qr_backend {
    const char *name;               /* "cpu" or "cuda" (static string): for logs and messages only */
    const qr_backend_ops *ops;      /* the op table callers use: &checked (qr_backend_init) */
    qr_backend_caps caps;           /* what the backend can do */
    void *impl;                     /* backend-private state */
    const qr_backend_ops *impl_ops; /* the backend's own op table (static), run after the checks */
    qr_backend_ops checked;         /* impl_ops with each op that has checks wrapped by them (NULL stays NULL) */
    qr_plan_summary plan;           /* the current batch plan, as far as the checks need it */
};

/* Sets up be for a backend's create: name, caps, impl_ops = ops and be->ops = the checked table over
 * them (backend_check.c). Call again to switch to another op table (e.g. CUDA's exact one). */
void qr_backend_init(qr_backend *be, const char *name, const qr_backend_ops *ops, const qr_backend_caps *caps);

/* Frees a backend (NULL is fine). */
static inline void qr_backend_free(qr_backend *be) {
    if (be) be->ops->destroy(be);
}

/* ---- the CPU backend (src/backend/cpu/) ------------------------------------------------------ */

typedef struct qr_backend_cpu_params {
    int32_t n_threads; /* worker threads incl. the caller; <= 0 = number of online CPUs */
    bool force_scalar; /* true: scalar reference ops only (the oracle); false: best SIMD (cpuid) */
} qr_backend_cpu_params;

/* Creates the CPU backend. Ownership: qr_backend_free. */
qr_status qr_backend_cpu_create(const qr_backend_cpu_params *params, qr_backend **out, char *err, size_t err_len);

/* "avx2" or "scalar": the op set the CPU backend picked. */
const char *qr_backend_cpu_simd(const qr_backend *be);

/* ---- the CUDA backend (src/backend/cuda/) ---------------------------------------------------- */

typedef struct qr_backend_cuda_params {
    int32_t gpu; /* CUDA device index, 0 = the first GPU */
} qr_backend_cuda_params;

/* Creates the CUDA backend on GPU params->gpu (params NULL = GPU 0). Returns QR_ERR_UNSUPPORTED with
 * "built without CUDA" or "no CUDA device found" when it cannot run here (the caller logs one line
 * and falls back to the CPU). Every qr_weight passed to its ops must have been weight_prepare'd by
 * it. Ownership: qr_backend_free. */
qr_status qr_backend_cuda_create(const qr_backend_cuda_params *params, qr_backend **out, char *err, size_t err_len);

/* Number of CUDA devices usable by this build: 0 when built without CUDA or when none is present. */
int qr_cuda_device_count(void);

/* Free and total memory of CUDA device `gpu` in bytes (cudaMemGetInfo); false when unavailable
 * (no CUDA build, no such device). */
bool qr_cuda_mem_info(int gpu, size_t *free_bytes, size_t *total_bytes);

/* Joins n CUDA backends (one a GPU, rank r = bes[r]) into one NCCL group: loads libnccl (QUARREL_NCCL_LIB, else
 * libnccl.so.2 from the library path) and makes their communicators, after which each backend's all_reduce sums
 * over the group. Errors: no NCCL library, a symbol missing, NCCL's own failure (its message). */
qr_status qr_backend_cuda_tp_init(qr_backend *const *bes, int32_t n, char *err, size_t err_len);
/* Ranks in several processes: a new NCCL unique id (128 bytes, made by rank 0 and sent to the others), and one
 * backend joining the group of `world` ranks as rank `rank` (ncclCommInitRank: every rank calls it at once). */
qr_status qr_backend_cuda_nccl_id(uint8_t *id, char *err, size_t err_len);
qr_status qr_backend_cuda_tp_join(qr_backend *be, int32_t world, int32_t rank, const uint8_t *id, char *err,
                                  size_t err_len);

#endif /* QR_BACKEND_H */
