/*
 * quarrel.h — public C API of libquarrel.
 *
 * Conventions:
 *  - Every function that can fail returns a qr_status and, when `err` is non-NULL, writes a
 *    NUL-terminated message of at most `err_len` bytes describing the failure.
 *  - Whoever calls *_create / *_open calls the matching *_free / *_close.
 *  - The library never prints to stdout and never calls exit() or abort() on bad input.
 */
#ifndef QUARREL_H
#define QUARREL_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

#define QUARREL_VERSION_MAJOR 0
#define QUARREL_VERSION_MINOR 1
#define QUARREL_VERSION_PATCH 0
#define QUARREL_VERSION_STRING "0.1.0"

/* Result of every fallible call. QR_OK is zero; every error is non-zero. */
typedef enum qr_status {
    QR_OK = 0,
    QR_ERR_INVALID_ARG = 1,   /* a caller-supplied argument is out of range or malformed */
    QR_ERR_IO = 2,            /* open/read/write/mmap failed */
    QR_ERR_FORMAT = 3,        /* a file is malformed (bad magic, truncated, out-of-range field) */
    QR_ERR_UNSUPPORTED = 4,   /* well-formed, but a feature/version/type we do not implement */
    QR_ERR_NOMEM = 5,         /* allocation failed */
    QR_ERR_NOT_FOUND = 6,     /* a named key/tensor/model does not exist */
    QR_ERR_INTERNAL = 7,      /* a bug: an invariant did not hold */
    QR_ERR_BUSY = 8,          /* a bounded queue or budget is full right now: retry later */
    QR_ERR_SHUTDOWN = 9,      /* shutting down or draining: takes no new work */
} qr_status;

/* Static string naming a status ("ok", "invalid argument", ...). Never NULL. */
const char *qr_status_str(qr_status status);

/* Library version string, e.g. "0.1.0". */
const char *qr_version(void);

/* ---------------------------------------------------------------------------------------------
 * Models and contexts.
 *
 * A qr_model is a GGUF file mapped read-only (weights are used in place, zero-copy) plus its
 * hyper-parameters, all read from the file's metadata. A qr_context holds what one stream of work
 * needs on top: the paged KV cache (shared by up to n_seq_max sequences), activation buffers and
 * the logits of the last qr_decode. Contexts of one model share its compute backend and must not
 * decode at the same time. Token ids are int32.
 */
typedef int32_t qr_token;
typedef struct qr_model qr_model;
typedef struct qr_context qr_context;

/* Where a model's ops run. */
typedef enum qr_backend_kind {
    QR_BACKEND_AUTO = 0, /* CUDA when this build has it and the GPU can hold the model, else the CPU
                          * (qr_model_backend_note says why) */
    QR_BACKEND_CPU = 1,
    QR_BACKEND_CUDA = 2, /* CUDA or an error (no device, model too large, unsupported weight type) */
} qr_backend_kind;

typedef struct qr_model_params {
    int32_t n_threads; /* CPU threads for the model's backend; <= 0 = all online CPUs */
    bool force_scalar; /* CPU: use the scalar reference kernels only (testing) */
    qr_backend_kind backend; /* default QR_BACKEND_AUTO */
    int32_t gpu;       /* CUDA device index (0 = the first GPU) */
} qr_model_params;

/* Defaults: backend auto on GPU 0, all CPUs, SIMD kernels. */
qr_model_params qr_model_default_params(void);

/* Loads a GGUF model (llama, gemma3, bert, nomic-bert architectures). params may be NULL (defaults). On success
 * *out is owned by the caller (qr_model_free). Failures name the file and the problem: unknown
 * architecture, a missing metadata key, a missing tensor or one of the wrong shape or type. */
qr_status qr_model_load(const char *path, const qr_model_params *params, qr_model **out, char *err,
                        size_t err_len);
void qr_model_free(qr_model *model);

/* Model info. */
int32_t qr_model_n_vocab(const qr_model *model);     /* rows of the output matrix */
int32_t qr_model_n_ctx_train(const qr_model *model); /* {arch}.context_length */
int32_t qr_model_n_embd(const qr_model *model);      /* {arch}.embedding_length */
int32_t qr_model_n_layer(const qr_model *model);     /* {arch}.block_count */
const char *qr_model_arch(const qr_model *model);    /* general.architecture, e.g. "llama" */
/* The backend the model runs on: "cpu" or "cuda". */
const char *qr_model_backend_name(const qr_model *model);
/* Why a QR_BACKEND_AUTO load runs on the CPU although this build has CUDA, e.g. "no CUDA device
 * found" or "the model needs 14.2 GiB of GPU memory, 7.9 GiB are free"; "" when it runs where
 * asked (and in builds without CUDA). For one log line by the caller; the library prints nothing. */
const char *qr_model_backend_note(const qr_model *model);
/* One-line description ("llama: 30 layers, 576 embd, 9/3 heads, 49152 vocab, Q4_1"), into buf. */
void qr_model_desc(const qr_model *model, char *buf, size_t buf_len);

typedef struct qr_context_params {
    int32_t n_ctx;     /* KV cache size in tokens, shared by all sequences; 0 = n_ctx_train. Capped
                        * (with a warning on stderr) to what fits in available memory. */
    int32_t n_batch;   /* rows computed per forward pass (larger batches are split); 0 = 512 */
    int32_t n_seq_max; /* distinct sequence ids, 0 .. n_seq_max-1; 0 = 1 */
    int32_t n_threads; /* CPU threads for this context's passes; <= 0 = keep the model's */
} qr_context_params;

/* Defaults: n_ctx 0 (training context), n_batch 512, n_seq_max 1, n_threads 0. */
qr_context_params qr_context_default_params(void);

/* Creates a context. params may be NULL. Ownership: qr_context_free (before the model). */
qr_status qr_context_create(qr_model *model, const qr_context_params *params, qr_context **out, char *err,
                            size_t err_len);
void qr_context_free(qr_context *ctx);
/* The KV cache size in tokens actually used (after the memory cap). */
int32_t qr_context_n_ctx(const qr_context *ctx);

/* A batch of rows for qr_decode. Row i is token[i] at position pos[i] of sequence seq_id[i].
 * For each sequence, its rows must continue it in order: the first has position = the sequence's
 * current length (qr_kv_seq_len), the next one more, and so on. Rows of different sequences may
 * interleave. */
typedef struct qr_batch {
    int32_t n_tokens;      /* rows, >= 1 */
    const qr_token *token; /* [n_tokens] */
    const int32_t *pos;    /* [n_tokens] or NULL: continue each sequence in row order */
    const int32_t *seq_id; /* [n_tokens] or NULL: all rows belong to sequence 0 */
    const int8_t *logits;  /* [n_tokens] non-zero = compute this row's logits; NULL: last row only */
} qr_batch;

/* Runs the model on a batch, appending every row's K/V to its sequence's cache and computing the
 * logits of the requested rows. On error the sequences keep their previous length. */
qr_status qr_decode(qr_context *ctx, const qr_batch *batch, char *err, size_t err_len);

/* Logits ([n_vocab] floats, valid until the next qr_decode) of row `row` of the last batch;
 * row -1 = the last row that requested logits. NULL when that row did not request logits. */
const float *qr_get_logits(const qr_context *ctx, int32_t row);

/* Positions stored for sequence seq. */
int32_t qr_kv_seq_len(const qr_context *ctx, int32_t seq);
/* Removes positions [p0, p1) of sequence seq (seq < 0: all; p1 < 0: to the end). Only a suffix
 * can be removed; returns false otherwise. */
bool qr_kv_seq_rm(qr_context *ctx, int32_t seq, int32_t p0, int32_t p1);
/* Empties every sequence. */
void qr_kv_clear(qr_context *ctx);

/* ---------------------------------------------------------------------------------------------
 * Embeddings.
 *
 * qr_embed runs texts through a model and pools each text's final hidden states into one vector.
 * Encoders (bert, nomic-bert) and decoders (llama, gemma3: the hidden states after the output norm,
 * as llama.cpp's embeddings) are supported. Many texts go through one forward pass: each text is a
 * sequence of its own, and as many as fit in the context's n_batch rows and n_seq_max sequences
 * (and its KV cache) are packed together. The first call makes the model's tokenizer (kept with
 * the model): qr_embed calls on contexts of one model must not run at the same time.
 */
typedef enum qr_pooling {
    QR_POOLING_MODEL = -1, /* the model's {arch}.pooling_type; when absent or none: mean for
                            * encoders, last for decoders */
    QR_POOLING_NONE = 0,   /* per-token embeddings: not a qr_embed result (QR_ERR_INVALID_ARG) */
    QR_POOLING_MEAN = 1,   /* mean over the text's tokens (special tokens included, as llama.cpp) */
    QR_POOLING_CLS = 2,    /* the first token's state */
    QR_POOLING_LAST = 3,   /* the last token's state */
} qr_pooling;              /* llama.cpp's pooling_type numbering */

typedef struct qr_embed_params {
    qr_pooling pooling; /* QR_POOLING_MODEL = from <arch>.pooling_type */
    bool normalize;     /* L2-normalize each embedding (default true) */
    bool truncate;      /* true (default): a text longer than min(n_ctx_train, n_batch) tokens is cut to
                         * that length (keeping a trailing [SEP]/EOS the tokenizer adds) with a warning
                         * through the library log (stderr, level WARN); false: QR_ERR_INVALID_ARG */
} qr_embed_params;

/* Defaults: pooling from the model, normalize, truncate. */
qr_embed_params qr_embed_default_params(void);

/* Length of one embedding (n_embd). */
int32_t qr_model_n_embd_out(const qr_model *m);

/* Embeds n_texts >= 1 NUL-terminated UTF-8 texts (tokenized with the model's special tokens, e.g.
 * [CLS] ... [SEP] or BOS ...) into out[n_texts][qr_model_n_embd_out]. p may be NULL (defaults). The
 * context's KV cache is used as scratch: it is empty afterwards. Errors: QR_ERR_INVALID_ARG (no texts,
 * a text with no tokens, a text too long without truncate, pooling none), or a backend error. */
qr_status qr_embed(qr_context *ctx, const char *const *texts, int32_t n_texts, const qr_embed_params *p, float *out,
                   char *err, size_t err_len);

/* Counters of the MoE and Mamba2 (SSM) blocks of a context, accumulated over its qr_decode calls
 * (the server's /metrics and `quarrel run --stats` print them). Times are wall-clock seconds of
 * the blocks as issued (on CUDA, without a device sync: launch time). All zero for other models. */
typedef struct qr_arch_stats {
    uint64_t moe_layer_calls;        /* MoE FFN blocks run (layers x passes) */
    double moe_layer_seconds;        /* quarrel_moe_layer_latency_seconds (sum) */
    double moe_routing_seconds;      /* quarrel_moe_routing_latency_seconds (sum) */
    int32_t n_layer, n_expert;       /* shape of expert_selection */
    const uint64_t *expert_selection;/* [n_layer][n_expert] tokens routed to each expert
                                      * (quarrel_moe_expert_selection{layer,expert}); NULL without experts */
    uint64_t ssm_calls;              /* Mamba2 mixer blocks run */
    double ssm_scan_seconds;         /* quarrel_ssm_scan_latency_seconds (sum) */
    double ssm_conv_seconds;         /* quarrel_ssm_conv_latency_seconds (sum) */
    uint64_t ssm_state_bytes;        /* quarrel_ssm_state_bytes: recurrent state held */
    uint64_t ssm_divergence_total;   /* quarrel_ssm_divergence_total: passes failed on a NaN/Inf state */
} qr_arch_stats;

/* The context's MoE / SSM counters (valid until the context is freed); never NULL. */
const qr_arch_stats *qr_context_arch_stats(const qr_context *ctx);

/* Turns the expert-selection counts (qr_arch_stats.expert_selection) on or off for non-CPU
 * backends, where each MoE layer of each pass then reads its routing back from the device (a small
 * read that waits for the device), and every pass runs the forward function on the host (no
 * recorded decode graph), so that all the counters advance. The CPU backend always counts. Off by
 * default; a no-op for models without experts or SSM layers. */
void qr_context_set_arch_stats(qr_context *ctx, bool on);

#ifdef __cplusplus
}
#endif

#endif /* QUARREL_H */
