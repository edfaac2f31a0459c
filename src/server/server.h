/* server.h — `quarrel serve`: an HTTP/1.1 + WebSocket server (CivetWeb) in front of one scheduler per
 * loaded model. Routes: Ollama (/api/generate, /api/chat, /api/embed, /api/embeddings, /api/tags,
 * /api/show, /api/ps, /api/version), OpenAI (/v1/chat/completions, /v1/completions, /v1/embeddings,
 * /v1/models), Quarrel's own (/api/models, /api/models/{name}, /api/stream, /tokenize, /detokenize,
 * /ws, /healthz, /readyz, /version, /metrics, /openapi.yaml). docs/api.md describes them. */
#ifndef QR_SERVER_H
#define QR_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quarrel.h"

#define QR_SERVER_MAX_MODELS 8

typedef struct qr_server_config {
    const char *host;               /* listen address; default "127.0.0.1" */
    int32_t port;                   /* 0 = any free port (qr_server_port tells which); default 8080 */
    const char *models[QR_SERVER_MAX_MODELS]; /* paths or Ollama names, loaded at start */
    int32_t n_models;
    int32_t parallel;               /* sequences decoded together per model; 0 (default) = from the KV memory
                                       (kv_mem_bytes): 4 for the default F16 cache */
    int32_t ctx;                    /* KV cache tokens per model (shared by its sequences); 0 = what the KV memory
                                       holds (kv_mem_bytes below) */
    uint64_t kv_mem_bytes;          /* KV cache memory per model; 0 = what QR_N_CTX_DEFAULT (4096) * parallel
                                       tokens of an F16 cache take, at most SRV_CTX_MAX_DEFAULT (32768) tokens' worth.
                                       Without --ctx the context is what this holds in the cache types below, and
                                       without --parallel the sequences are that context / 4096 (a smaller cache:
                                       more of both); see srv_kv_sizing */
    qr_cache_type cache_type_k, cache_type_v; /* KV cache storage (default F16) */
    int32_t n_threads;              /* CPU threads; <= 0 = all */
    int32_t max_queue;              /* waiting requests per model before 503; default 64 */
    int32_t http_threads;           /* CivetWeb worker threads (one per open connection); default 256 */
    int32_t prefill_chunk;          /* prompt rows per sequence per step; default 256 */
    bool no_prefix_cache;
    bool spec_on;                   /* speculative decoding for every generating model (requests may turn it
                                       off with "speculative": false) */
    qr_spec_params spec;            /* its parameters; default qr_spec_default_params() */
    const char *draft_path;         /* the draft model (path or Ollama name) of QR_SPEC_DRAFT */
    qr_backend_kind backend;        /* passed to qr_model_load */
    int32_t gpu;
    int32_t tp;                     /* tensor-parallel ranks (qr_model_params.tp; 0 / 1 = none) */
    const char *tp_addr;            /* qr_model_params.tp_addr (rank 0): the startup models only */
    qr_split_mode split_mode;       /* qr_model_params.split_mode, tensor_split */
    float tensor_split[16];
    const char *api_key_db;         /* SQLite key store; NULL = auth off */
    const char *cors_origins;       /* comma-separated allowed origins, "*" = any; NULL = no CORS headers */
    const char *allowed_hosts;      /* comma-separated Host names accepted besides the listen address,
                                       localhost, 127.0.0.1 and [::1]; "*" = any; NULL = none */
    size_t max_body;                /* bytes; default 4 MiB (413 above) */
    int32_t max_json_depth;         /* default 64 */
    int32_t max_header_bytes;       /* default 16384 */
    int32_t io_timeout_ms;          /* a request's headers+body must arrive within this; default 10000 */
    double request_timeout_s;       /* generation timeout; default 300 */
    double rate_rpm;                /* per-key requests per minute; 0 = unlimited */
    double rate_tpm;                /* per-key tokens (prompt + generated) per minute; 0 = unlimited */
    uint64_t mem_budget;            /* bytes for loaded models (weights + KV); 0 = 80% of MemTotal */
    double keep_alive_s;            /* default idle time before an on-demand model unloads; default 300; < 0 forever */
    bool allow_load;                /* requests may load models not loaded at start (hot swap); default true */
    bool log_prompts;               /* include prompts in logs */
    double drain_s;                 /* SIGTERM: wait this long for in-flight requests; default 30 */
    int32_t max_tokens;             /* cap on generated tokens per request (finish_reason length); 0 = none */
    const char *model_dir;          /* extra directory searched for `model` names (NAME.gguf); may be NULL */
} qr_server_config;

typedef struct qr_server qr_server;

/* Fills *c with the defaults above. */
void qr_server_config_default(qr_server_config *c);

/* Loads the models, opens the key store and starts listening. On success *out runs until
 * qr_server_stop. Errors name the model, the key store or the address that failed. */
qr_status qr_server_start(const qr_server_config *c, qr_server **out, char *err, size_t err_len);

/* The TCP port listened on. */
int32_t qr_server_port(const qr_server *s);

/* Stops accepting requests, waits up to drain_s for in-flight requests, then closes everything and
 * frees s. */
void qr_server_stop(qr_server *s, double drain_s);

#endif /* QR_SERVER_H */
