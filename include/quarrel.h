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

typedef struct qr_model_params {
    int32_t n_threads; /* CPU threads for the model's backend; <= 0 = all online CPUs */
    bool force_scalar; /* CPU: use the scalar reference kernels only (testing) */
} qr_model_params;

/* Defaults: all CPUs, SIMD kernels. */
qr_model_params qr_model_default_params(void);

/* Loads a GGUF model (llama, gemma3 architectures). params may be NULL (defaults). On success
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

#ifdef __cplusplus
}
#endif

#endif /* QUARREL_H */
