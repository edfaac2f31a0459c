/* server_internal.h — what the server's files share: the server object, the per-request context
 * and the response helpers (http.c), the generation glue (gen.c), the route handlers. */
#ifndef QR_SERVER_INTERNAL_H
#define QR_SERVER_INTERNAL_H

#include <civetweb.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/keys.h"
#include "server/metrics.h"
#include "server/ratelimit.h"
#include "server/registry.h"
#include "server/reqparse.h"
#include "server/respstore.h"
#include "server/server.h"

struct qr_server {
    qr_server_config cfg;
    char host[256], cors[2048], key_db[4096], model_dir[4096], allowed_hosts[2048];
    struct mg_context *mg;
    srv_registry *reg;
    srv_metrics *metrics;
    srv_keys *keys;          /* NULL = auth off */
    srv_ratelimit *rl;
    srv_resp_store *resp_store; /* /v1/responses objects (store, previous_response_id) */
    int32_t port;
    atomic_bool draining;
    atomic_int inflight;     /* HTTP requests inside the handler (drain waits for them) */
    atomic_uint_fast64_t next_rid;
    pthread_t janitor;
    bool janitor_started;
    atomic_bool stop_janitor;
    /* (cfg.max_tokens caps every request's generation length; 0 = no cap) */
    double started_at;
    pthread_mutex_t ws_mu;   /* guards ws_list */
    struct ws_state *ws_list; /* open /ws connections (ws.c), for the close frame on shutdown */
};

/* One HTTP request being handled. */
typedef struct srv_conn {
    struct mg_connection *c;
    qr_server *s;
    const struct mg_request_info *ri;
    char rid[72];            /* request id (X-Request-Id, echoed) */
    const char *endpoint;    /* route label for metrics */
    char model[256];         /* model label for metrics ("" when none) */
    int status;              /* status sent */
    const char *err_code;    /* error code sent, or NULL */
    bool err_counted;        /* err_code is in quarrel_errors_total already (counted before the response went out) */
    double t0;
    char *body;              /* request body (NUL-terminated), NULL when none */
    size_t body_len;
    char key_id[40];         /* authenticated key id, "" when auth is off */
    double tpm;              /* the token limit charged (the key's own, else --rate-tpm; 0 = none) */
    bool headers_sent;
    bool head_only;          /* a HEAD request: headers (Content-Length of the GET body) without the body */
    const char *allow;       /* Allow header to send (HEAD, OPTIONS and 405 answers), NULL = none */
    char cors_origin[512];   /* Access-Control-Allow-Origin to send, "" = none */
    int32_t n_prompt, n_gen; /* tokens, for metrics and rate limits */
} srv_conn;

/* ---- http.c: responses ---- */
/* Sends a whole response. extra: additional "Name: value\r\n" lines or NULL. Returns 0 or -1. */
int srv_send(srv_conn *rc, int status, const char *ctype, const char *body, size_t len, const char *extra);
/* Sends a JSON body (steals j). */
int srv_send_json(srv_conn *rc, int status, json_t *j);
/* Sends {"error":{"code":code,"message":...}}; 429/503 carry Retry-After: retry_after_s (> 0). */
int srv_send_error(srv_conn *rc, int status, const char *code, int retry_after_s, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* The HTTP status (returned) and API error code (*code) that answer a call failed with st; the one
 * table of every route: QR_ERR_INVALID_ARG 400 INVALID_REQUEST, QR_ERR_NOT_FOUND 404 MODEL_NOT_FOUND,
 * QR_ERR_BUSY 503 OVERLOADED, QR_ERR_SHUTDOWN 503 SHUTTING_DOWN, any other 500 INFERENCE_ERROR. */
int srv_status_http(qr_status st, const char **code);
/* srv_send_error with st's status and code (srv_status_http); a 503 carries Retry-After: retry_after_s. */
int srv_send_status(srv_conn *rc, qr_status st, int retry_after_s, const char *msg);
/* Starts a chunked streaming response. */
int srv_stream_begin(srv_conn *rc, const char *ctype);
/* Writes one chunk; -1 when the client is gone. */
int srv_stream_write(srv_conn *rc, const char *data, size_t len);
/* Writes a JSON value as an SSE frame ("data: ...\n\n"), or as one NDJSON line; steals j. */
int srv_stream_sse_json(srv_conn *rc, json_t *j);
int srv_stream_ndjson(srv_conn *rc, json_t *j);
/* Writes a named SSE event ("event: NAME\ndata: ...\n\n"), as the Responses and Anthropic APIs
 * stream; steals j. -1 when the client is gone. */
int srv_stream_sse_event(srv_conn *rc, const char *event, json_t *j);
void srv_stream_end(srv_conn *rc);
/* ISO 8601 UTC time with nanoseconds, as Ollama writes it. */
void srv_iso_time(double epoch_s, char *out, size_t cap);
double srv_wall_now(void);

/* ---- gen.c: one generation through a model's scheduler ---- */
typedef struct srv_ev {
    int type;                /* QR_SCHED_EV_TOKEN / DONE */
    int32_t token;
    char *text;
    size_t len;
    float logprob;
    int32_t n_top;
    qr_token_logprob top[QR_SAMPLER_MAX_LOGPROBS];
    qr_finish_reason finish;
    qr_sched_end end;
    char *error;
    qr_sched_timing timing;
    struct srv_ev *next;
} srv_ev;

typedef struct srv_gen {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv_ev *head, *tail;
    int32_t n_pending;
    bool done_queued;        /* DONE arrived */
    bool cancelled;
    uint64_t id;
    srv_model *m;
    int32_t *prompt;         /* [n_prompt] */
    int32_t n_prompt;
    double t_start;          /* qr_time_s at srv_gen_start */
    srv_ev *done_ev;         /* preallocated DONE event (the scheduler's callback cannot fail on it) */
} srv_gen;

/* Builds the prompt ids of req for model m (chat template / plain / ids; notes in req whether the
 * rendered prompt opened a reasoning section). 0, or -1 with an HTTP status (400) and message. */
int srv_build_prompt(const srv_model *m, srv_gen_req *req, srv_api api, int32_t **ids, int32_t *n,
                     char *err, size_t err_len);
/* Submits. Errors (srv_status_http answers them): QR_ERR_INVALID_ARG (an embedding model, a bad
 * request), QR_ERR_BUSY (queue full), QR_ERR_SHUTDOWN (draining), QR_ERR_NOMEM; message in err. */
qr_status srv_gen_start(srv_gen *g, srv_model *m, int32_t *prompt, int32_t n_prompt, const srv_gen_req *req,
                        double timeout_s, char *err, size_t err_len);
/* Next event (blocks); NULL after DONE was returned. Free with srv_ev_free. */
srv_ev *srv_gen_next(srv_gen *g);
void srv_ev_free(srv_ev *e);
void srv_gen_cancel(srv_gen *g);
/* Cancels if still running, waits for DONE, frees everything (not g itself). */
void srv_gen_close(srv_gen *g);

/* ---- per-route handlers (return the HTTP status sent) ---- */
int srv_h_ollama_generate(srv_conn *rc);
int srv_h_ollama_chat(srv_conn *rc);
int srv_h_ollama_tags(srv_conn *rc);
int srv_h_ollama_show(srv_conn *rc);
int srv_h_ollama_ps(srv_conn *rc);
int srv_h_ollama_version(srv_conn *rc);
int srv_h_ollama_embed(srv_conn *rc);
int srv_h_ollama_embeddings(srv_conn *rc);
int srv_h_openai_chat(srv_conn *rc);
int srv_h_openai_completions(srv_conn *rc);
int srv_h_openai_models(srv_conn *rc);
/* GET /v1/models/{id}: one OpenAI model object; 404 MODEL_NOT_FOUND for an id not loaded. */
int srv_h_openai_model(srv_conn *rc, const char *id);
int srv_h_openai_embeddings(srv_conn *rc);
/* api_responses.c: POST /v1/responses; GET and DELETE /v1/responses/{id} (404 RESPONSE_NOT_FOUND). */
int srv_h_responses(srv_conn *rc);
int srv_h_response_item(srv_conn *rc, const char *id);
/* api_anthropic.c: POST /v1/messages and /v1/messages/count_tokens (Anthropic's Messages API). */
int srv_h_anthropic_messages(srv_conn *rc);
int srv_h_anthropic_count_tokens(srv_conn *rc);
int srv_h_models(srv_conn *rc);
int srv_h_model_info(srv_conn *rc, const char *name);
int srv_h_stream(srv_conn *rc);
int srv_h_tokenize(srv_conn *rc);
int srv_h_detokenize(srv_conn *rc);
int srv_h_healthz(srv_conn *rc);
int srv_h_readyz(srv_conn *rc);
int srv_h_version(srv_conn *rc);
int srv_h_metrics(srv_conn *rc);
/* The /metrics text (the registry, refreshed from the models' schedulers, then the models' MoE /
 * SSM metrics); malloc'd, *len bytes; NULL on OOM. */
char *srv_render_metrics(qr_server *s, size_t *len);
int srv_h_openapi(srv_conn *rc);

/* Model info object shared by /api/models, /api/tags, /api/show, /api/ps. */
json_t *srv_model_details(const srv_model *m);

/* Acquires the model named in a request; sends the error itself and returns NULL on failure. */
srv_model *srv_acquire_model(srv_conn *rc, const char *name, bool may_load);

/* Records the outcome of a generation for metrics / rate limits. */
void srv_account_tokens(srv_conn *rc, int32_t n_prompt, int32_t n_gen, double ttft_s);

/* ---- static.c: the embedded web UI ---- */
/* True when path names a UI asset ("/", "/app.js", ...). */
bool srv_static_known(const char *path);
/* Sends the asset named by the request path, with the UI's Content-Security-Policy. */
int srv_h_static(srv_conn *rc);

/* ---- ws.c ---- */
void srv_ws_register(qr_server *s);
/* Shutdown: waits (up to 1 s) for the /ws generations to send their last message, then sends every
 * open /ws a close frame 1001 (going away). */
void srv_ws_close_all(qr_server *s);

/* ---- server.c: middleware used by ws.c ---- */
/* Who a request or a WebSocket message runs as, and the outcome of the last check. */
typedef struct srv_auth {
    char key[128];           /* the key presented ("" when auth is off or none was sent) */
    char key_id[40];         /* its id once verified; "" when auth is off */
    double rpm, tpm;         /* the limits that apply: the key's own, else --rate-rpm / --rate-tpm */
    int status;              /* on failure: 401 or 429 */
    const char *code;        /* on failure: UNAUTHORIZED or RATE_LIMITED */
    char msg[256];
    int retry_after;         /* seconds, with 429 */
} srv_auth;

/* Authenticates a request's headers (key store) and applies the request rate limit; fills *a (on
 * failure status/code/msg/retry_after). 0 ok, -1 refused. */
int srv_check_auth(qr_server *s, const struct mg_connection *c, srv_auth *a);
/* Verifies a->key again (revoked or rotated keys fail; the key's limits are read again) and applies
 * the request rate limit: what srv_check_auth does, for one more request on a WebSocket. */
int srv_recheck_auth(qr_server *s, srv_auth *a);
/* The rate-limit bucket of a: its key id, or "anonymous". */
const char *srv_auth_bucket(const srv_auth *a);

/* The embedded OpenAPI document. */
extern const char qr_openapi_yaml[];
extern const size_t qr_openapi_yaml_len;

#endif
