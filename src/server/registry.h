/* registry.h — the models a server has loaded: one model + tokenizer + context + scheduler each,
 * looked up by name, loaded on demand within a memory budget (hot swap), unloaded after their
 * keep_alive when idle (as Ollama does). */
#ifndef QR_SERVER_REGISTRY_H
#define QR_SERVER_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quarrel.h"
#include "sched/scheduler.h"
#include "server/arch_metrics.h"
#include "template/template.h"
#include "tokenizer/tokenizer.h"

typedef struct srv_model {
    char name[256];        /* the name it is listed and addressed by */
    char source[1024];     /* what it was loaded from (path or Ollama name) */
    char path[4096];       /* resolved GGUF path */
    qr_model *model;
    qr_tokenizer *tok;
    qr_context *ctx;       /* owned by the scheduler thread */
    qr_scheduler *sched;
    qr_context *embed_ctx; /* embeddings scratch context, made on first use (scheduler thread only) */
    srv_arch_metrics *arch;/* MoE / SSM metrics of ctx + embed_ctx; NULL for other models */
    qr_chat_template *tmpl;/* NULL when the model has no chat template */
    char *tmpl_src;        /* the template text (for /api/show) or NULL */
    char bos[128], eos[128];
    bool can_generate;     /* causal model */
    char quant[24];        /* predominant weight type, e.g. "Q4_1" */
    uint64_t n_params;
    uint64_t file_bytes, kv_bytes;
    const char *kv_type_k, *kv_type_v; /* the KV cache's storage types ("f16", "q8_0", ...; static strings) */
    double load_seconds;
    double loaded_at, last_used;   /* qr_time_s clock */
    double keep_alive_s;   /* idle seconds before unloading; < 0 = never */
    double expires_at;     /* wall clock (epoch seconds) of the planned unload, 0 = never */
    int32_t refs;          /* in-flight requests (guarded by the registry lock) */
    bool pinned;           /* loaded at start (-m): never unloaded by keep_alive or the budget */
    qr_model *draft_model; /* speculative decoding's draft model (--draft-model) or NULL */
    qr_spec *spec;         /* the scheduler's drafter (--spec / --draft-model) or NULL */
    bool unloading;
} srv_model;

/* Server contexts: the KV cache of a generating model holds QR_N_CTX_DEFAULT tokens a sequence when
 * --ctx is not given, at most SRV_CTX_MAX_DEFAULT; embeddings run on a context of SRV_EMBED_SEQS
 * sequences of at most SRV_ENCODER_CTX (an encoder's own context) or SRV_EMBED_SCRATCH_CTX (the
 * scratch context of a generating model) tokens, or the model's training context when smaller. */
#define SRV_CTX_MAX_DEFAULT 32768
#define SRV_ENCODER_CTX 8192
#define SRV_EMBED_SCRATCH_CTX 2048
#define SRV_EMBED_SEQS 8

typedef struct srv_registry srv_registry;

/* The context and sequence count of a generating model (qr_server_config.kv_mem_bytes): given values stay;
 * the KV memory is kv_mem_bytes, else f16_per_tok * min(QR_N_CTX_DEFAULT * (parallel or 4), SRV_CTX_MAX_DEFAULT);
 * a missing ctx is that memory / per_tok (whole blocks of 32); a missing parallel (4 when ctx is given) is
 * ctx / QR_N_CTX_DEFAULT in [1, 256]. per_tok, f16_per_tok: bytes a token takes in the chosen / an F16 cache. */
void srv_kv_sizing(int32_t parallel, int32_t ctx, uint64_t kv_mem_bytes, uint64_t per_tok, uint64_t f16_per_tok,
                   int32_t *n_seq, int32_t *n_ctx);

/* The default --parallel of a model on GPUs (no --parallel, --ctx or --kv-mem-mb given): as many sequences of
 * QR_N_CTX_DEFAULT tokens as SRV_GPU_KV_SHARE of the GPU memory left after the weights holds (free_bytes of one
 * GPU, times `world` GPUs that each hold 1/world of the cache), at most SRV_GPU_PARALLEL; 0 when fewer than
 * SRV_GPU_PARALLEL_MIN fit (the CPU's default then applies). */
#define SRV_GPU_PARALLEL 64
#define SRV_GPU_PARALLEL_MIN 8
#define SRV_GPU_KV_SHARE 0.4
int32_t srv_gpu_parallel(uint64_t free_bytes, int32_t world, uint64_t per_tok);

typedef struct srv_registry_opts {
    int32_t parallel, ctx, n_threads, max_queue, prefill_chunk;
    uint64_t kv_mem_bytes;                  /* qr_server_config's */
    qr_cache_type cache_type_k, cache_type_v;
    bool no_prefix_cache;
    qr_backend_kind backend;
    int32_t gpu, tp;
    const char *tp_addr; /* ranks in several processes (the startup models; on-demand loads are refused) */
    qr_split_mode split_mode;
    float tensor_split[16];
    double request_timeout_s;
    uint64_t mem_budget;   /* bytes; 0 = 80% of MemTotal */
    double keep_alive_s;   /* default for models loaded on demand */
    bool allow_load;
    const char *model_dir;
    /* speculative decoding: spec_on gives every generating model a drafter with spec's parameters (a draft
     * model loaded from draft_path, which must share its vocabulary), used by requests that do not turn it
     * off ("speculative": false) */
    bool spec_on;
    qr_spec_params spec;
    const char *draft_path;
} srv_registry_opts;

/* NULL on OOM. */
srv_registry *srv_registry_create(const srv_registry_opts *o);
/* Unloads everything (schedulers end their requests with SHUTDOWN). */
void srv_registry_free(srv_registry *r);

/* Loads a model now and pins it (keep_alive forever). Errors name the model. */
qr_status srv_registry_load(srv_registry *r, const char *source, char *err, size_t err_len);

/* Finds (or, when allowed, loads) a model by name, path or Ollama name and takes a reference.
 * name "" means the first loaded model; may_load = false never loads. On failure *why is QR_ERR_NOT_FOUND
 * or QR_ERR_BUSY (does not fit the memory budget while other models are busy or pinned), with a message. */
srv_model *srv_registry_acquire(srv_registry *r, const char *name, bool may_load, qr_status *why, char *err,
                                size_t err_len);
/* Drops the reference; keep_alive_s (when has_keep_alive) replaces the keep-alive of a model
 * loaded on demand (0 = unload as soon as idle); models loaded at start stay. */
void srv_registry_release(srv_registry *r, srv_model *m, bool has_keep_alive, double keep_alive_s);

/* Unloads models whose keep-alive passed and that are idle. Called periodically. */
void srv_registry_tick(srv_registry *r);

/* Calls fn for each loaded model (under the registry lock: fn must not call the registry). */
void srv_registry_foreach(srv_registry *r, void (*fn)(void *arg, srv_model *m), void *arg);

/* Number of loaded models; true when every scheduler thread is alive. */
int32_t srv_registry_count(srv_registry *r, bool *all_alive);

/* Drains every scheduler (stop accepting, wait up to timeout_s). Returns requests left. */
int32_t srv_registry_drain(srv_registry *r, double timeout_s);

/* Cancels every in-flight request of every model. */
void srv_registry_cancel_all(srv_registry *r);

/* The model's scheduler thread only (its callbacks and jobs): folds what the MoE / SSM counters of
 * m->ctx and m->embed_ctx gained into m->arch, for /metrics. A no-op for other models. */
void srv_model_sync_arch(srv_model *m);

/* Unloads a model by name now if it is idle (refs == 0). Returns 0, or -1 when not found/busy. */
int srv_registry_unload(srv_registry *r, const char *name);

/* Tokenizes text with the model's tokenizer; *ids malloc'd. 0 or -1. */
int srv_tokenize(const srv_model *m, const char *text, size_t len, bool add_special, bool parse_special,
                 int32_t **ids, size_t *n);

/* Renders messages (JSON array) with the model's chat template (add_generation_prompt); tools (a JSON
 * array or NULL) is the template's `tools`, extra (a JSON object or NULL) more template variables; *out
 * malloc'd. 0 or -1 with a message (no template, template error). */
int srv_render_chat(const srv_model *m, const void *messages_json, const void *tools, const void *extra, char **out,
                    char *err, size_t err_len);

#endif
