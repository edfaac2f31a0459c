/*
 * quarrel.h — public C API of libquarrel: models, contexts and batched decoding, the tokenizer, chat
 * templates, a sampler chain, a generate loop with a per-token callback, embeddings, errors, logging and
 * the version. docs/api-c.md is the guide, with a complete example program (docs/examples/generate.c).
 *
 * Conventions:
 *  - Every function that can fail returns a qr_status and, when `err` is non-NULL, writes a
 *    NUL-terminated message of at most `err_len` bytes describing the failure.
 *  - Whoever calls *_create / *_load / *_open calls the matching *_free / *_close.
 *  - The library never prints to stdout and never calls exit() or abort() on bad input.
 *  - Every function of this header carries QR_API: those, and only those, are what the shared library
 *    libquarrel.so exports (tests/unit/check_public_exports.sh checks it).
 */
#ifndef QUARREL_H
#define QUARREL_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the public functions: the names libquarrel.so exports (its link keeps every other name local). */
#if defined(__GNUC__)
#define QR_API __attribute__((visibility("default")))
#else
#define QR_API
#endif

#define QUARREL_VERSION_MAJOR 0
#define QUARREL_VERSION_MINOR 1
#define QUARREL_VERSION_PATCH 0
#define QUARREL_VERSION_STRING "0.1.0"
/* MAJOR * 10000 + MINOR * 100 + PATCH, what qr_version_number() returns for the library this header
 * belongs to: a program can compare the two to catch a header / library mismatch. */
#define QUARREL_VERSION_NUMBER (QUARREL_VERSION_MAJOR * 10000 + QUARREL_VERSION_MINOR * 100 + QUARREL_VERSION_PATCH)

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
    QR_ERR_NUMERIC = 10,      /* a computation left the finite range (a recurrent state became NaN/Inf) */
} qr_status;

/* Static string naming a status ("ok", "invalid argument", ...). Never NULL. */
QR_API const char *qr_status_str(qr_status status);

/* Library version string, e.g. "0.1.0". */
QR_API const char *qr_version(void);
/* The library's QUARREL_VERSION_NUMBER (of the build that made it, not of the header in use). */
QR_API int32_t qr_version_number(void);

/* Verbosity of the library's own diagnostics, which go to stderr only ("quarrel: warn: ..."): warnings
 * such as a context capped to free memory or an embedding input cut to length. Process-wide. */
typedef enum { QR_LOG_DEBUG = 0, QR_LOG_INFO = 1, QR_LOG_WARN = 2, QR_LOG_ERROR = 3, QR_LOG_NONE = 4 } qr_log_level;
/* Messages below `level` are dropped; QR_LOG_NONE silences the library. Default QR_LOG_INFO. */
QR_API void qr_log_set_level(qr_log_level level);
QR_API qr_log_level qr_log_get_level(void);

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
#define QR_TOKEN_NULL (-1) /* "no token": a special token the model lacks */
typedef struct qr_model qr_model;
typedef struct qr_context qr_context;

/* Where a model's ops run. */
typedef enum qr_backend_kind {
    QR_BACKEND_AUTO = 0, /* CUDA when this build has it and the GPU can hold the model, else the CPU
                          * (qr_model_backend_note says why) */
    QR_BACKEND_CPU = 1,
    QR_BACKEND_CUDA = 2, /* CUDA or an error (no device, model too large, unsupported weight type) */
} qr_backend_kind;

/* How tp > 1 ranks share a model. */
typedef enum qr_split_mode {
    QR_SPLIT_TENSOR = 0, /* every layer split across the ranks (heads, FFN columns), an all-reduce after each
                          * sub-block: all ranks work on every token */
    QR_SPLIT_LAYER = 1,  /* each rank holds whole consecutive layers (llama.cpp's --split-mode layer); a pass runs
                          * the ranks one after the other, handing the hidden state on: for GPUs without a fast link */
} qr_split_mode;

typedef struct qr_model_params {
    int32_t n_threads; /* CPU threads for the model's backend; <= 0 = all online CPUs */
    bool force_scalar; /* CPU: use the scalar reference kernels only (testing) */
    qr_backend_kind backend; /* default QR_BACKEND_AUTO */
    int32_t gpu;       /* CUDA device index (0 = the first GPU) */
    int32_t tp;        /* tensor parallelism: ranks (0 or 1 = none). CUDA: GPUs gpu .. gpu + tp - 1 joined by NCCL
                        * (loaded at run time); CPU: tp backends of n_threads / tp threads each, joined by a
                        * shared-memory all-reduce. Attention heads, FFN / expert columns and the output's vocabulary
                        * are split across the ranks (Megatron-style); Mamba2 mixers run whole on every rank */
    qr_split_mode split_mode; /* with tp > 1: QR_SPLIT_TENSOR (default) or QR_SPLIT_LAYER */
    float tensor_split[16];   /* QR_SPLIT_LAYER: each rank's share of the layers (all 0: even) */
    const char *tp_addr; /* with tp > 1: "HOST:PORT" where the tp ranks, one a process (on one host or several),
                          * meet over TCP; NULL = all ranks in this process. Rank 0 (the driver, which runs the
                          * model: contexts, qr_decode) listens there; ranks 1..tp-1 are loaded with tp_rank set
                          * and then run qr_tp_worker_serve. CUDA ranks join one NCCL group (gpu = this process's
                          * GPU); CPU ranks sum over the TCP connections. QR_SPLIT_TENSOR only */
    int32_t tp_rank;     /* with tp_addr: this process's rank, 0..tp-1 */
} qr_model_params;

/* Defaults: backend auto on GPU 0, all CPUs, SIMD kernels. */
QR_API qr_model_params qr_model_default_params(void);

/* Turns what a user typed as MODEL into a GGUF path, written to out[0..cap): an existing file path is
 * returned as is; anything else is read as an Ollama name ("smollm2:135m", "user/model:tag"; default
 * host registry.ollama.ai, namespace library, tag latest) and resolved through Ollama's manifest store
 * ($OLLAMA_MODELS, else ~/.ollama/models) to the blob of its model layer. Errors: QR_ERR_NOT_FOUND
 * naming what was looked for, QR_ERR_FORMAT for a manifest without a model layer. */
QR_API qr_status qr_model_resolve_path(const char *name, char *out, size_t cap, char *err, size_t err_len);

/* Loads a GGUF model (llama, gemma3, bert, nomic-bert architectures). params may be NULL (defaults). On success
 * *out is owned by the caller (qr_model_free). Failures name the file and the problem: unknown
 * architecture, a missing metadata key, a missing tensor or one of the wrong shape or type. */
QR_API qr_status qr_model_load(const char *path, const qr_model_params *params, qr_model **out, char *err,
                               size_t err_len);
QR_API void qr_model_free(qr_model *model);

/* Model info. */
QR_API int32_t qr_model_n_vocab(const qr_model *model);     /* rows of the output matrix */
QR_API int32_t qr_model_n_ctx_train(const qr_model *model); /* {arch}.context_length */
/* Context size (tokens, per sequence) of a client whose user sets none: quarrel run, chat, bench and
 * logits take qr_model_n_ctx_capped(model, QR_N_CTX_DEFAULT); quarrel serve this many per sequence. */
#define QR_N_CTX_DEFAULT 4096
/* The model's training context, or cap when that is larger or unknown (qr_context_params.n_ctx = 0
 * is the uncapped training context). */
QR_API int32_t qr_model_n_ctx_capped(const qr_model *model, int32_t cap);
QR_API int32_t qr_model_n_embd(const qr_model *model);      /* {arch}.embedding_length */
QR_API int32_t qr_model_n_layer(const qr_model *model);     /* {arch}.block_count */
QR_API const char *qr_model_arch(const qr_model *model);    /* general.architecture, e.g. "llama" */
/* The backend the model runs on: "cpu" or "cuda". */
QR_API const char *qr_model_backend_name(const qr_model *model);
/* Why a QR_BACKEND_AUTO load runs on the CPU although this build has CUDA, e.g. "no CUDA device
 * found" or "the model needs 14.2 GiB of GPU memory, 7.9 GiB are free"; "" when it runs where
 * asked (and in builds without CUDA). For one log line by the caller; the library prints nothing. */
QR_API const char *qr_model_backend_note(const qr_model *model);
/* A model loaded with tp_addr and tp_rank >= 1 (a worker): runs the driver's commands on this rank's shard until
 * the driver closes the connection (QR_OK) or the connection fails (QR_ERR_IO). The model is then unusable: free it. */
QR_API qr_status qr_tp_worker_serve(qr_model *model, char *err, size_t err_len);
/* Ranks the model runs on (1 without tensor parallelism). */
QR_API int32_t qr_model_tp(const qr_model *model);
/* Free and total bytes of the device memory rank `rank` (0..qr_model_tp - 1) runs in; false on the CPU (host
 * memory) or for a rank that does not exist. */
QR_API bool qr_model_rank_memory(const qr_model *model, int32_t rank, size_t *free_bytes, size_t *total_bytes);
/* One-line description ("llama: 30 layers, 576 embd, 9/3 heads, 49152 vocab, Q4_1"), into buf. */
QR_API void qr_model_desc(const qr_model *model, char *buf, size_t buf_len);

/* Storage of the KV cache's K or V rows (qr_context_params.type_k / type_v). Block types hold each
 * head's row in blocks of 32 values (the head size must be a multiple of 32). The CPU takes every
 * type; quantized and BF16 caches run its attention with llama.cpp's flash-attention numerics. */
typedef enum qr_cache_type {
    QR_CACHE_F16 = 0,  /* 2 bytes a value (default, as llama.cpp) */
    QR_CACHE_BF16 = 1, /* 2 bytes a value, the f32 exponent range */
    QR_CACHE_Q8_0 = 2, /* 34 bytes per 32 values: 0.53 of F16 */
    QR_CACHE_Q4_0 = 3, /* 18 bytes per 32 values: 0.28 of F16 */
    QR_CACHE_F32 = 4,  /* 4 bytes a value */
} qr_cache_type;
/* The type of a name: "f16", "bf16", "q8_0", "q4_0", "f32" (case-insensitive); -1 when unknown. */
QR_API int qr_cache_type_from_name(const char *name);
/* The name of a type ("q8_0"), "?" when out of range. */
QR_API const char *qr_cache_type_name(qr_cache_type type);
/* Bytes one token takes in the KV cache of a model with these K and V types (all layers, K and V);
 * 0 when the model has no KV cache or a type does not fit its head size. */
QR_API uint64_t qr_model_kv_bytes_per_token(const qr_model *model, qr_cache_type type_k, qr_cache_type type_v);

typedef struct qr_context_params {
    int32_t n_ctx;     /* KV cache size in tokens, shared by all sequences; 0 = n_ctx_train. Capped
                        * (with a warning on stderr) to what fits in available memory. */
    int32_t n_batch;   /* rows computed per forward pass (larger batches are split); 0 = 512 */
    int32_t n_seq_max; /* distinct sequence ids, 0 .. n_seq_max-1; 0 = 1 */
    int32_t n_threads; /* CPU threads for this context's passes; <= 0 = keep the model's */
    qr_cache_type type_k; /* storage of the cached K rows (default QR_CACHE_F16) */
    qr_cache_type type_v; /* storage of the cached V rows (default QR_CACHE_F16) */
} qr_context_params;

/* Defaults: n_ctx 0 (training context), n_batch 512, n_seq_max 1, n_threads 0, F16 K and V. */
QR_API qr_context_params qr_context_default_params(void);

/* Creates a context. params may be NULL. Ownership: qr_context_free (before the model). */
QR_API qr_status qr_context_create(qr_model *model, const qr_context_params *params, qr_context **out,
                                   char *err, size_t err_len);
QR_API void qr_context_free(qr_context *ctx);
/* The KV cache size in tokens actually used (after the memory cap). */
QR_API int32_t qr_context_n_ctx(const qr_context *ctx);
/* Bytes of the context's KV cache (every layer's K and V storage of its n_ctx slots). */
QR_API uint64_t qr_context_kv_bytes(const qr_context *ctx);

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
QR_API qr_status qr_decode(qr_context *ctx, const qr_batch *batch, char *err, size_t err_len);

/* Logits ([n_vocab] floats, valid until the next qr_decode) of row `row` of the last batch;
 * row -1 = the last row that requested logits. NULL when that row did not request logits. */
QR_API const float *qr_get_logits(const qr_context *ctx, int32_t row);

/* The target side of EAGLE-3 speculation: from now on each qr_decode keeps, for every row, the inputs of up to 3
 * layers (the residual stream before the layer's first norm: llama.cpp's t_layer_inp), side by side. layers[i] in
 * [0, n_layer). Call before the first qr_decode; the llama family of architectures (llama, mistral, qwen2/3, phi3,
 * ...) on one device (no tensor parallelism). */
QR_API qr_status qr_context_capture_layers(qr_context *ctx, int32_t n, const int32_t *layers, char *err, size_t err_len);
/* Those rows of the last qr_decode: [*n_rows][*width] floats (width = n x n_embd, layer i at column i x n_embd), valid
 * until the next qr_decode; NULL when capture is off or nothing ran. */
QR_API const float *qr_get_captured(const qr_context *ctx, int32_t *n_rows, int32_t *width);

/* Positions stored for sequence seq. */
QR_API int32_t qr_kv_seq_len(const qr_context *ctx, int32_t seq);
/* Removes positions [p0, p1) of sequence seq (seq < 0: all; p1 < 0: to the end). Only a suffix
 * can be removed; returns false otherwise. */
QR_API bool qr_kv_seq_rm(qr_context *ctx, int32_t seq, int32_t p0, int32_t p1);
/* Empties every sequence. */
QR_API void qr_kv_clear(qr_context *ctx);

/* ---------------------------------------------------------------------------------------------
 * Tokenizer.
 *
 * Text <-> token ids exactly as llama.cpp tokenizes (SPM, byte-level BPE and WordPiece vocabularies),
 * built from the model's `tokenizer.ggml.*` metadata. A qr_tokenizer is immutable: every function
 * below may be called from several threads at once on one tokenizer. Token ids are qr_token.
 */
typedef struct qr_tokenizer qr_tokenizer;

/* Makes the tokenizer of a loaded model (the model may be freed before the tokenizer: everything is
 * copied). Ownership: qr_tokenizer_free. Errors name the offending metadata key. */
QR_API qr_status qr_tokenizer_from_model(const qr_model *model, qr_tokenizer **out, char *err, size_t err_len);
/* Makes the tokenizer of the GGUF file at path without loading its weights (a vocabulary-only read).
 * Ownership: qr_tokenizer_free. */
QR_API qr_status qr_tokenizer_load(const char *path, qr_tokenizer **out, char *err, size_t err_len);
QR_API void qr_tokenizer_free(qr_tokenizer *tok);

/* Number of tokens; ids are 0 .. n_vocab-1. */
QR_API int32_t qr_tokenizer_n_vocab(const qr_tokenizer *tok);

/* The special tokens a model may name. */
typedef enum qr_special_token {
    QR_SPECIAL_BOS = 0,  /* beginning of sequence (also BERT's [CLS]) */
    QR_SPECIAL_EOS = 1,  /* end of sequence */
    QR_SPECIAL_EOT = 2,  /* end of turn (e.g. <|eot_id|>) */
    QR_SPECIAL_EOM = 3,  /* end of message */
    QR_SPECIAL_UNK = 4,  /* unknown */
    QR_SPECIAL_SEP = 5,  /* separator ([SEP]) */
    QR_SPECIAL_PAD = 6,  /* padding */
    QR_SPECIAL_MASK = 7, /* [MASK] */
    QR_SPECIAL_NL = 8,   /* the token of "\n" */
} qr_special_token;

/* The id of a special token, or QR_TOKEN_NULL when the model has none (or `which` is unknown). */
QR_API qr_token qr_tokenizer_special(const qr_tokenizer *tok, qr_special_token which);
/* Whether qr_tokenize with add_special puts BOS in front / EOS at the end (the model's add_* flags). */
QR_API bool qr_tokenizer_add_bos(const qr_tokenizer *tok);
QR_API bool qr_tokenizer_add_eos(const qr_tokenizer *tok);

/* Tokenizes text[0..len) (any bytes; invalid UTF-8 is handled as llama.cpp does).
 * add_special: add BOS/EOS/SEP as the model's add_* flags say. parse_special: text that spells a
 * control token (e.g. "<|im_start|>") becomes that token; user-defined tokens are always matched.
 * Writes min(n, cap) ids to out (out may be NULL when cap == 0) and sets *n_out = n, the total
 * number of tokens; a caller whose cap was too small calls again with cap >= *n_out.
 * Errors: QR_ERR_NOMEM; QR_ERR_NOT_FOUND when a byte has no token to fall back to. */
QR_API qr_status qr_tokenize(const qr_tokenizer *tok, const char *text, size_t len, bool add_special,
                             bool parse_special, qr_token *out, size_t cap, size_t *n_out);

/* Token ids -> text, as llama.cpp's llama_detokenize: remove_special drops a leading BOS / trailing
 * EOS that the model adds; unparse_special renders control tokens as their text. SPM models drop
 * the space that tokenization put before the first word; clean_spaces models tidy " ." etc.
 * Writes min(n, cap) bytes (no NUL) and sets *n_out = n. Errors: QR_ERR_INVALID_ARG for an id out
 * of range (with no output). */
QR_API qr_status qr_detokenize(const qr_tokenizer *tok, const qr_token *ids, size_t n_ids, bool remove_special,
                               bool unparse_special, char *buf, size_t cap, size_t *n_out);

/* The text of token `id` (special = true: control/unknown tokens give their text; false: they give
 * ""). Writes min(n, cap) bytes to buf (no NUL) and returns n, the piece's full length; returns -1
 * when id is out of range. */
QR_API int32_t qr_token_to_piece(const qr_tokenizer *tok, qr_token id, bool special, char *buf, size_t cap);
/* End of generation (eos, eot, eom, <|im_end|>, ... as llama.cpp decides). */
QR_API bool qr_token_is_eog(const qr_tokenizer *tok, qr_token id);
/* A control token (rendered as "" unless asked for its text). */
QR_API bool qr_token_is_control(const qr_tokenizer *tok, qr_token id);

/* Streaming detokenizer: feed tokens one at a time and get back only whole UTF-8 characters.
 * Bytes of a character split across tokens are held until the character is complete; bytes that
 * can never form a valid character come out as U+FFFD. The first token loses its leading space
 * when the model adds a space prefix (as qr_detokenize does). No clean_spaces pass. The stream
 * borrows tok, which must outlive it. */
typedef struct qr_detok_stream qr_detok_stream;

/* special: render control tokens as their text. NULL on OOM. Ownership: qr_detok_stream_free. */
QR_API qr_detok_stream *qr_detok_stream_create(const qr_tokenizer *tok, bool special);
QR_API void qr_detok_stream_free(qr_detok_stream *s);
/* Adds token `id`; *text and *len receive the bytes that are now complete (valid until the next call
 * on s). Errors: QR_ERR_INVALID_ARG for an id out of range, QR_ERR_NOMEM. */
QR_API qr_status qr_detok_stream_push(qr_detok_stream *s, qr_token id, const char **text, size_t *len);
/* Ends the stream: a pending incomplete character comes out as U+FFFD. The stream is reset. */
QR_API qr_status qr_detok_stream_flush(qr_detok_stream *s, const char **text, size_t *len);
QR_API void qr_detok_stream_reset(qr_detok_stream *s);

/* ---------------------------------------------------------------------------------------------
 * Chat templates.
 *
 * A model's `tokenizer.chat_template` (Jinja) rendered byte for byte as Hugging Face transformers'
 * apply_chat_template(tokenize=False) renders it, with bos_token / eos_token from the tokenizer.
 */

/* One chat message. */
typedef struct qr_chat_message {
    const char *role;       /* "system", "user", "assistant", "tool", ... (NUL-terminated UTF-8) */
    const char *content;    /* NUL-terminated UTF-8; NULL makes content None */
    const char *extra_json; /* optional JSON object text whose fields are added to the message
                               (tool_calls, tool_call_id, name, thinking, or a list-valued
                               content); NULL for none */
} qr_chat_message;

/* Renders msgs[0..n_msgs) with the model's chat template; add_generation_prompt ends the text with the
 * header of an assistant turn. tok (may be NULL: made for the call) gives bos_token and eos_token. On
 * success *out is a malloc'd NUL-terminated string of *out_len bytes (out_len may be NULL); the caller
 * free()s it. The result is text: tokenize it with parse_special = true. Errors: QR_ERR_NOT_FOUND when
 * the model has no chat template; QR_ERR_FORMAT / QR_ERR_UNSUPPORTED for a template that does not parse,
 * raises, or uses what the interpreter lacks (the message names the template line). */
QR_API qr_status qr_chat_apply_template(const qr_model *model, const qr_tokenizer *tok, const qr_chat_message *msgs,
                                        size_t n_msgs, bool add_generation_prompt, char **out, size_t *out_len,
                                        char *err, size_t err_len);

/* ---------------------------------------------------------------------------------------------
 * Sampler chain.
 *
 * Turns a row of logits into the next token, in llama.cpp's default order:
 *     logit bias -> penalties (repeat, frequency, presence over the last penalty_last_n tokens)
 *       -> top-k -> top-p -> min-p -> temperature -> a draw from the softmax (own seeded PRNG)
 * temperature 0 makes it greedy: the argmax of the biased, penalised logits (ties: the lowest id).
 * The same seed, parameters, accepted history and logits give the same tokens on every machine.
 * A chain is not thread-safe; use one per generation stream.
 */
typedef struct qr_sampler_chain qr_sampler_chain;

#define QR_SEED_RANDOM UINT64_MAX /* qr_sampler_chain_params.seed: pick a random seed at create time */

/* A bias added to one token's logit before anything else; -INFINITY bans the token. */
typedef struct qr_token_bias {
    qr_token token; /* 0 <= token < n_vocab */
    float bias;     /* finite or -INFINITY, never NaN */
} qr_token_bias;

typedef struct qr_sampler_chain_params {
    float temperature;       /* >= 0; 0 = greedy. default 0.8 */
    int32_t top_k;           /* >= 0; 0 = off. default 40 */
    float top_p;             /* in (0, 1]; 1 = off. default 0.95 */
    float min_p;             /* in [0, 1]; 0 = off. default 0.05 */
    float repeat_penalty;    /* > 0; 1 = off (default). positive logits are divided by it, negative multiplied */
    float frequency_penalty; /* finite; 0 = off (default). subtracted once per occurrence in the window */
    float presence_penalty;  /* finite; 0 = off (default). subtracted once if the token is in the window */
    int32_t penalty_last_n;  /* >= 0: the penalty window of most recent accepted tokens; 0 = off. default 64 */
    uint64_t seed;           /* PRNG seed; QR_SEED_RANDOM (default) = random */
    const qr_token_bias *logit_bias; /* [n_logit_bias], copied by qr_sampler_chain_create; may be NULL */
    int32_t n_logit_bias;
} qr_sampler_chain_params;

/* llama.cpp's defaults: temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, no penalties, window 64,
 * random seed, no bias. */
QR_API qr_sampler_chain_params qr_sampler_chain_default_params(void);

/* Checks every field of p: QR_ERR_INVALID_ARG names a field out of range or NaN, or a bias token outside
 * [0, n_vocab) (n_vocab <= 0 skips that check, for a check before the model is loaded). */
QR_API qr_status qr_sampler_chain_params_validate(const qr_sampler_chain_params *p, int32_t n_vocab, char *err,
                                                  size_t err_len);

/* Creates a chain for logits rows of n_vocab floats (qr_model_n_vocab). p may be NULL (defaults). Every
 * field is checked first: QR_ERR_INVALID_ARG names a field out of range, NaN, or a bias token outside
 * [0, n_vocab). Ownership: qr_sampler_chain_free. */
QR_API qr_status qr_sampler_chain_create(int32_t n_vocab, const qr_sampler_chain_params *p, qr_sampler_chain **out,
                                         char *err, size_t err_len);
QR_API void qr_sampler_chain_free(qr_sampler_chain *s);

/* Picks the next token from logits[0..n_vocab) (not modified) and accepts it into the penalty history.
 * Errors: QR_ERR_INVALID_ARG when a logit is NaN or no token has a finite biased logit. */
QR_API qr_status qr_sampler_chain_sample(qr_sampler_chain *s, const float *logits, qr_token *out, char *err,
                                         size_t err_len);
/* Appends a token to the penalty history without sampling (prompt tokens). QR_ERR_INVALID_ARG when
 * token is outside [0, n_vocab). */
QR_API qr_status qr_sampler_chain_accept(qr_sampler_chain *s, qr_token token);
/* Forgets the penalty history and restarts the PRNG from the seed. */
QR_API void qr_sampler_chain_reset(qr_sampler_chain *s);
/* The seed in use (the random one when params.seed was QR_SEED_RANDOM). */
QR_API uint64_t qr_sampler_chain_seed(const qr_sampler_chain *s);
/* Constrains what s samples to a grammar: gbnf (GBNF rules, start rule "root") or json_schema (a JSON
 * schema as JSON text), at most one of them non-NULL; both NULL removes the grammar. The vocabulary is
 * tok's (the model's the chain samples for). From then on every token qr_sampler_chain_sample returns
 * continues an output the grammar accepts, and end-of-generation tokens come only once it is complete
 * (then only they). qr_sampler_chain_reset restarts the grammar. QR_ERR_INVALID_ARG with a message
 * naming the line/column or the schema construct for a bad grammar or an unsupported schema. */
QR_API qr_status qr_sampler_chain_set_grammar(qr_sampler_chain *s, const qr_tokenizer *tok, const char *gbnf,
                                              const char *json_schema, char *err, size_t err_len);

/* ---------------------------------------------------------------------------------------------
 * Speculative decoding.
 *
 * A qr_spec drafts tokens cheaply and lets the target model check a whole draft in one batched forward
 * pass: the target's logits of every drafted row decide, token by token, whether the draft stands
 * (rejection sampling, so the output is distributed exactly as plain sampling's; greedy output is the same
 * tokens as plain greedy decoding), and the sequence's KV cache is rolled back past the first rejection.
 * Drafters: n-gram lookup over the prompt and the text so far (no model), or a smaller draft model with
 * the same vocabulary, whose own KV cache follows the target's sequences, or an EAGLE-3 head (one layer that
 * reads hidden states of three target layers, as llama.cpp's converter writes it), whose KV cache follows the
 * target's sequences too. Models whose state cannot be rolled back (Mamba2 hybrids) and encoders are refused.
 */
typedef enum qr_spec_kind {
    QR_SPEC_NGRAM = 1, /* prompt lookup: the tokens that followed the latest earlier occurrence of the last n-gram */
    QR_SPEC_DRAFT = 2, /* a draft model */
    QR_SPEC_EAGLE3 = 3,/* an EAGLE-3 head (draft_model: general.architecture "eagle3"); chain drafting, greedy at
                        * temperature 0; the target captures its layers' inputs from then on (the llama family) */
} qr_spec_kind;

#define QR_SPEC_DRAFT_MAX 64 /* most tokens one draft may have */

typedef struct qr_spec_params {
    qr_spec_kind kind;
    int32_t draft_max;    /* most tokens drafted per step, 1..QR_SPEC_DRAFT_MAX. default 16 */
    int32_t draft_min;    /* a shorter draft is not verified (the step decodes one token): 0..draft_max. default 0 */
    float draft_p_min;    /* QR_SPEC_DRAFT, _EAGLE3: drafting stops before a token the draft model gives less than this
                           * probability (softmax of its top 32 logits), in [0, 1]. default 0.75 */
    int32_t ngram_min;    /* QR_SPEC_NGRAM: shortest n-gram looked up, >= 1. default 2 */
    int32_t ngram_max;    /* QR_SPEC_NGRAM: longest n-gram looked up, ngram_min..16. default 4 */
    qr_model *draft_model;/* QR_SPEC_DRAFT: the draft model; QR_SPEC_EAGLE3: the head, loaded on the target's backend
                           * (bound to the target for good: qr_spec_create). Caller-owned; outlives the qr_spec */
} qr_spec_params;

/* Defaults as documented above (kind QR_SPEC_NGRAM, no draft model). */
QR_API qr_spec_params qr_spec_default_params(void);

typedef struct qr_spec qr_spec;

/* Makes a speculative decoder for the sequences of ctx (the target). QR_SPEC_DRAFT creates the draft
 * model's context (same size and sequence count as ctx) and checks the vocabularies: a draft whose
 * vocabulary differs (token texts, special tokens, more than 128 tokens of size difference) is refused with
 * QR_ERR_INVALID_ARG naming the first difference. QR_ERR_UNSUPPORTED for a target or draft whose state
 * cannot be rolled back. QR_SPEC_EAGLE3 checks the head against the target (hidden size, layer ids, tokenizer),
 * turns on ctx's capture of the head's three layers (ctx must not have decoded yet) and creates the head's context.
 * Ownership: qr_spec_free (before ctx and the draft model). */
QR_API qr_status qr_spec_create(qr_context *ctx, const qr_spec_params *p, qr_spec **out, char *err, size_t err_len);
QR_API void qr_spec_free(qr_spec *spec);

/* Counters since qr_spec_create (all sequences). */
typedef struct qr_spec_stats {
    int64_t n_steps;    /* verification passes (steps that had a draft) */
    int64_t n_drafted;  /* tokens drafted and verified */
    int64_t n_accepted; /* drafted tokens the target kept */
} qr_spec_stats;
QR_API void qr_spec_get_stats(const qr_spec *spec, qr_spec_stats *out);

/* ---------------------------------------------------------------------------------------------
 * Generation.
 *
 * qr_generate runs the whole loop on one sequence of a context: prefill the prompt, then sample, stream
 * text and decode one token at a time until a stop rule holds. Every sampled token is handed to a
 * callback together with the text that became safe to show: whole UTF-8 characters, with anything that
 * could still turn into a stop string held back until it is decided.
 */

/* Why qr_generate ended. */
typedef enum qr_generate_end {
    QR_GENERATE_EOG = 1,          /* an end-of-generation token came (its text is not emitted) */
    QR_GENERATE_STOP_STRING = 2,  /* a stop string matched (it and what follows are not emitted) */
    QR_GENERATE_LENGTH = 3,       /* n_predict tokens were generated */
    QR_GENERATE_CONTEXT_FULL = 4, /* the sequence filled the context */
    QR_GENERATE_CANCELLED = 5,    /* the callback returned false */
} qr_generate_end;

/* Called once per sampled token with the text[0..len) that is now safe to emit (often the token's own
 * text, sometimes empty, sometimes more: text held back earlier). text is not NUL-terminated and is valid
 * only during the call. When generation ends for a reason the stop rules do not see (context full), one
 * last call with token == QR_TOKEN_NULL hands over the text still held back. Return false to stop. */
typedef bool (*qr_token_callback)(qr_token token, const char *text, size_t len, void *user_data);

typedef struct qr_generate_params {
    int32_t n_predict;        /* most tokens to generate, >= 1. default 128 */
    int32_t seq_id;           /* the context's sequence to continue, 0 .. n_seq_max-1. default 0 */
    bool ignore_eos;          /* keep going through end-of-generation tokens. default false */
    bool special;             /* render control tokens as their text. default false */
    const char *const *stops; /* [n_stops] non-empty stop strings (default none) */
    int32_t n_stops;
    qr_spec *spec;            /* speculative decoding with this drafter (made for the same context); NULL
                               * (default) = one token per decode pass */
} qr_generate_params;

/* Defaults: n_predict 128, sequence 0, stop at end-of-generation tokens, no stop strings. */
QR_API qr_generate_params qr_generate_default_params(void);

/* What qr_generate did. */
typedef struct qr_generate_result {
    qr_generate_end end;
    int32_t n_prompt;       /* prompt tokens decoded */
    int32_t n_generated;    /* tokens sampled (each one was passed to the callback) */
    double prefill_seconds; /* wall-clock time of the prompt's qr_decode */
    double decode_seconds;  /* wall-clock time of the sampling / decoding loop */
    int32_t n_drafted;      /* speculative decoding: drafted tokens verified (0 without a spec) */
    int32_t n_accepted;     /* of which the target kept */
} qr_generate_result;

/* Appends prompt[0..n_prompt) (n_prompt >= 1) to sequence p->seq_id of ctx (after what it holds), feeds
 * the prompt to the sampler's penalty history, then generates up to p->n_predict tokens with smp, calling
 * cb (may be NULL) for each. The sequence keeps every token decoded (the prompt and the generated tokens
 * but the last, which was not decoded); continue it with another call, or clear it (qr_kv_seq_rm).
 * tok detokenizes and tells end-of-generation tokens; smp must have been made for the model's n_vocab.
 * p may be NULL (defaults); res may be NULL. Errors: QR_ERR_INVALID_ARG for a bad parameter or a prompt
 * that does not fit in the context with room for one more token; a decode or sampling error (the
 * message says which). res is filled on success and on errors after the prompt was decoded. */
QR_API qr_status qr_generate(qr_context *ctx, const qr_tokenizer *tok, qr_sampler_chain *smp, const qr_token *prompt,
                             size_t n_prompt, const qr_generate_params *p, qr_token_callback cb, void *user_data,
                             qr_generate_result *res, char *err, size_t err_len);

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
QR_API qr_embed_params qr_embed_default_params(void);

/* Length of one embedding (n_embd). */
QR_API int32_t qr_model_n_embd_out(const qr_model *m);

/* Embeds n_texts >= 1 NUL-terminated UTF-8 texts (tokenized with the model's special tokens, e.g.
 * [CLS] ... [SEP] or BOS ...) into out[n_texts][qr_model_n_embd_out]. p may be NULL (defaults). The
 * context's KV cache is used as scratch: it is empty afterwards. Errors: QR_ERR_INVALID_ARG (no texts,
 * a text with no tokens, a text too long without truncate, pooling none), or a backend error. */
QR_API qr_status qr_embed(qr_context *ctx, const char *const *texts, int32_t n_texts, const qr_embed_params *p,
                          float *out, char *err, size_t err_len);

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
QR_API const qr_arch_stats *qr_context_arch_stats(const qr_context *ctx);

/* Turns the expert-selection counts (qr_arch_stats.expert_selection) on or off for non-CPU
 * backends, where each MoE layer of each pass then reads its routing back from the device (a small
 * read that waits for the device), and every pass runs the forward function on the host (no
 * recorded decode graph), so that all the counters advance. The CPU backend always counts. Off by
 * default; a no-op for models without experts or SSM layers. */
QR_API void qr_context_set_arch_stats(qr_context *ctx, bool on);

#ifdef __cplusplus
}
#endif

#endif /* QUARREL_H */
