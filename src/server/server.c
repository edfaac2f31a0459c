/* server.c — CivetWeb setup, routing, and the middleware every request goes through: request id,
 * CORS and preflight, API-key auth, per-key rate limits, body size limit, draining, structured JSON
 * access logs and request metrics. */
#include <arpa/inet.h>
#include <ctype.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/server_internal.h"
#include "util/util.h"

void qr_server_config_default(qr_server_config *c) {
    memset(c, 0, sizeof *c);
    qr_sched_params sp; /* the scheduler's defaults are the server's */
    qr_sched_params_default(&sp);
    c->host = "127.0.0.1";
    c->port = 8080;
    c->parallel = 0; /* from the KV memory (srv_kv_sizing): the scheduler's n_seq (4) for an f16 cache */
    c->max_queue = sp.max_queue;
    c->http_threads = 256;
    c->prefill_chunk = sp.prefill_chunk;
    c->max_body = 4u << 20;
    c->max_json_depth = 64;
    c->max_header_bytes = 16384;
    c->io_timeout_ms = 10000;
    c->request_timeout_s = sp.default_timeout_s;
    c->keep_alive_s = 300;
    c->allow_load = true;
    c->spec = qr_spec_default_params();
    c->drain_s = 30;
}

int32_t qr_server_port(const qr_server *s) { return s->port; }

/* ---- logging ---- */

/* One JSON line on stderr. */
static void log_json(json_t *j) {
    char ts[48];
    srv_iso_time(srv_wall_now(), ts, sizeof ts);
    json_object_set_new(j, "ts", json_string(ts));
    char *line = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(j);
    if (!line) return;
    fprintf(stderr, "%s\n", line);
    free(line);
}

static int log_message_cb(const struct mg_connection *c, const char *message) {
    (void)c;
    log_json(json_pack("{s:s, s:s, s:s}", "level", "warn", "msg", "http", "detail", message));
    return 1;
}

/* ---- middleware ---- */

/* True when the comma-separated list holds "*" or item[0..len) (case-insensitive when nocase). */
static bool in_list(const char *list, const char *item, size_t len, bool nocase) {
    for (const char *p = list; p && *p;) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        while (n && isspace((unsigned char)*p)) p++, n--;
        while (n && isspace((unsigned char)p[n - 1])) n--;
        if ((n == 1 && *p == '*') || (n == len && !(nocase ? strncasecmp(p, item, n) : strncmp(p, item, n)))) return true;
        if (!e) break;
        p = e + 1;
    }
    return false;
}

static bool origin_allowed(const qr_server *s, const char *origin) {
    return origin && in_list(s->cors, origin, strlen(origin), false);
}

/* True when name[0..n) is an IPv4 literal or a bracketed IPv6 literal. */
static bool ip_literal(const char *name, size_t n) {
    char buf[64];
    unsigned char addr[16];
    if (n < 2 || n >= sizeof buf) return false;
    const bool v6 = name[0] == '[' && name[n - 1] == ']';
    memcpy(buf, name + v6, n - 2 * v6);
    buf[n - 2 * v6] = 0;
    return inet_pton(v6 ? AF_INET6 : AF_INET, buf, addr) == 1;
}

/* DNS rebinding guard: a Host header must name this server. Accepted: no Host (not a browser); the
 * loopback names (any port); --allowed-host names ("*" = any); the listen address; and, when
 * listening on a wildcard address, any IP literal, or any name at all without --allowed-host. */
static bool host_allowed(const qr_server *s, const char *host) {
    if (!host) return true;
    size_t n = host[0] == '[' ? strcspn(host, "]") + 1 : strcspn(host, ":");
    if (n > strlen(host)) return false; /* "[" without "]" */
    const char *port = host + n;
    if (*port && (*port != ':' || port[1 + strspn(port + 1, "0123456789")])) return false;
    if (in_list("localhost,127.0.0.1,[::1]", host, n, true) || in_list(s->allowed_hosts, host, n, true)) return true;
    const char *listen = s->host;
    if (!strcmp(listen, "0.0.0.0") || !strcmp(listen, "::") || !strcmp(listen, "[::]") || !listen[0])
        return !s->allowed_hosts[0] || ip_literal(host, n);
    const size_t ln = strlen(listen);
    return (n == ln && !strncasecmp(host, listen, n)) || (n == ln + 2 && host[0] == '[' && !strncasecmp(host + 1, listen, ln));
}

/* Cross-site WebSocket hijacking guard: a browser's Origin must be the page's own (scheme://Host)
 * or in the CORS list; a client without Origin is not a browser. */
static bool ws_origin_allowed(const qr_server *s, const char *origin, const char *host) {
    if (!origin || origin_allowed(s, origin)) return true;
    const char *rest = !strncasecmp(origin, "http://", 7) ? origin + 7 : !strncasecmp(origin, "https://", 8) ? origin + 8 : NULL;
    return rest && host && !strcasecmp(rest, host);
}

/* Browsers cannot set headers on a WebSocket: the web UI offers the subprotocols "quarrel" and
 * "quarrel.key.KEY". Copies KEY out of a Sec-WebSocket-Protocol list; false when there is none. */
static bool ws_protocol_key(const char *list, char *out, size_t cap) {
    static const char prefix[] = "quarrel.key.";
    const size_t np = sizeof prefix - 1;
    for (const char *p = list; p && *p;) {
        while (*p == ' ' || *p == ',') p++;
        size_t n = strcspn(p, ", ");
        if (n > np && !strncmp(p, prefix, np) && n - np < cap) {
            memcpy(out, p + np, n - np);
            out[n - np] = 0;
            return true;
        }
        p += n;
    }
    return false;
}

const char *srv_auth_bucket(const srv_auth *a) { return a->key_id[0] ? a->key_id : "anonymous"; }

int srv_recheck_auth(qr_server *s, srv_auth *a) {
    a->retry_after = 0;
    a->rpm = s->cfg.rate_rpm, a->tpm = s->cfg.rate_tpm;
    if (s->keys) {
        srv_key_info ki;
        if (!a->key[0]) {
            a->status = 401, a->code = "UNAUTHORIZED";
            snprintf(a->msg, sizeof a->msg, "an API key is required (Authorization: Bearer KEY or X-API-Key: KEY)");
            return -1;
        }
        if (srv_keys_verify(s->keys, a->key, &ki) != 0) {
            a->status = 401, a->code = "UNAUTHORIZED";
            snprintf(a->msg, sizeof a->msg, "invalid or revoked API key");
            return -1;
        }
        snprintf(a->key_id, sizeof a->key_id, "%s", ki.id);
        if (ki.rpm > 0) a->rpm = ki.rpm;
        if (ki.tpm > 0) a->tpm = ki.tpm;
    }
    const int wait = srv_ratelimit_request(s->rl, srv_auth_bucket(a), a->rpm, a->tpm);
    if (wait > 0) {
        a->status = 429, a->code = "RATE_LIMITED", a->retry_after = wait;
        snprintf(a->msg, sizeof a->msg, "rate limit exceeded; retry in %d s", wait);
        return -1;
    }
    return 0;
}

int srv_check_auth(qr_server *s, const struct mg_connection *c, srv_auth *a) {
    memset(a, 0, sizeof *a);
    if (s->keys) {
        const char *auth = mg_get_header(c, "Authorization");
        const char *xkey = mg_get_header(c, "X-API-Key");
        const char *presented = NULL;
        if (auth && !strncasecmp(auth, "Bearer ", 7)) presented = auth + 7;
        else if (xkey) presented = xkey;
        char proto_key[128];
        if (!presented && ws_protocol_key(mg_get_header(c, "Sec-WebSocket-Protocol"), proto_key, sizeof proto_key))
            presented = proto_key;
        while (presented && *presented == ' ') presented++;
        if (presented && strlen(presented) < sizeof a->key) snprintf(a->key, sizeof a->key, "%s", presented);
        else if (presented) snprintf(a->key, sizeof a->key, "-"); /* too long to be a key: fails verification */
    }
    return srv_recheck_auth(s, a);
}

void srv_account_tokens(srv_conn *rc, int32_t n_prompt, int32_t n_gen, double ttft_s) {
    qr_server *s = rc->s;
    rc->n_prompt += n_prompt;
    rc->n_gen += n_gen;
    char lab[256], esc[200];
    srv_metrics_escape(rc->model, esc, sizeof esc);
    snprintf(lab, sizeof lab, "model=\"%s\",kind=\"prompt\"", esc);
    srv_metrics_add(s->metrics, "quarrel_tokens_total", lab, n_prompt);
    snprintf(lab, sizeof lab, "model=\"%s\",kind=\"generated\"", esc);
    srv_metrics_add(s->metrics, "quarrel_tokens_total", lab, n_gen);
    if (ttft_s >= 0) {
        snprintf(lab, sizeof lab, "model=\"%s\"", esc);
        srv_metrics_observe(s->metrics, "quarrel_time_to_first_token_seconds", lab, ttft_s);
    }
    srv_ratelimit_tokens(s->rl, rc->key_id[0] ? rc->key_id : "anonymous", n_prompt + n_gen, rc->tpm);
}

srv_model *srv_acquire_model(srv_conn *rc, const char *name, bool may_load) {
    qr_status why = QR_ERR_NOT_FOUND;
    char err[1024];
    srv_model *m = srv_registry_acquire(rc->s->reg, name ? name : "", may_load, &why, err, sizeof err);
    if (!m) {
        snprintf(rc->model, sizeof rc->model, "%s", name ? name : "");
        srv_send_status(rc, why, 30, err); /* 503: wait for busy models to go idle */
        return NULL;
    }
    snprintf(rc->model, sizeof rc->model, "%s", m->name);
    return m;
}

/* ---- routing ---- */

typedef struct route {
    const char *method; /* NULL = GET or POST */
    const char *path;
    int (*fn)(srv_conn *rc);
    bool public_;       /* no key needed */
    bool body;          /* reads a body */
} route;

static const route routes[] = {
    {"POST", "/api/generate", srv_h_ollama_generate, false, true},
    {"POST", "/api/chat", srv_h_ollama_chat, false, true},
    {"POST", "/api/embed", srv_h_ollama_embed, false, true},
    {"POST", "/api/embeddings", srv_h_ollama_embeddings, false, true},
    {"GET", "/api/tags", srv_h_ollama_tags, false, false},
    {"POST", "/api/show", srv_h_ollama_show, false, true},
    {"GET", "/api/ps", srv_h_ollama_ps, false, false},
    {"GET", "/api/version", srv_h_ollama_version, false, false},
    {"POST", "/v1/chat/completions", srv_h_openai_chat, false, true},
    {"POST", "/v1/completions", srv_h_openai_completions, false, true},
    {"POST", "/v1/embeddings", srv_h_openai_embeddings, false, true},
    {"GET", "/v1/models", srv_h_openai_models, false, false},
    {"POST", "/v1/responses", srv_h_responses, false, true},
    {"POST", "/v1/messages", srv_h_anthropic_messages, false, true},
    {"POST", "/v1/messages/count_tokens", srv_h_anthropic_count_tokens, false, true},
    {"GET", "/api/models", srv_h_models, false, false},
    {"POST", "/api/stream", srv_h_stream, false, true},
    {"POST", "/tokenize", srv_h_tokenize, false, true},
    {"POST", "/detokenize", srv_h_detokenize, false, true},
    {"GET", "/healthz", srv_h_healthz, true, false},
    {"GET", "/readyz", srv_h_readyz, true, false},
    {"GET", "/version", srv_h_version, true, false},
    {"GET", "/metrics", srv_h_metrics, true, false},
    {"GET", "/openapi.yaml", srv_h_openapi, true, false},
};

static void make_request_id(qr_server *s, const struct mg_connection *c, char *out, size_t cap) {
    const char *h = mg_get_header(c, "X-Request-Id");
    if (h) {
        size_t n = strlen(h);
        bool ok = n > 0 && n <= 64;
        for (size_t i = 0; ok && i < n; i++)
            ok = isalnum((unsigned char)h[i]) || h[i] == '-' || h[i] == '_' || h[i] == '.';
        if (ok) {
            snprintf(out, cap, "%s", h);
            return;
        }
    }
    const uint64_t n = atomic_fetch_add(&s->next_rid, 1);
    snprintf(out, cap, "req-%08x-%06llx", (unsigned)((uint64_t)(s->started_at * 1000) & 0xffffffffu),
             (unsigned long long)n);
}

/* Reads the body (bounded by max_body). 0, or -1 after sending 413/400. */
static int read_body(srv_conn *rc) {
    const size_t max = rc->s->cfg.max_body;
    const long long cl = rc->ri->content_length;
    if (cl > (long long)max) {
        srv_send_error(rc, 413, "INVALID_REQUEST", 0, "request body of %lld bytes exceeds the limit of %zu bytes", cl,
                       max);
        return -1;
    }
    size_t cap = cl > 0 ? (size_t)cl + 1 : 4096, len = 0;
    char *buf = malloc(cap);
    if (!buf) return srv_send_error(rc, 500, "INFERENCE_ERROR", 0, "out of memory"), -1;
    for (;;) {
        if (len + 1 >= cap) {
            if (cap > max + 1) break;
            size_t nc = cap * 2;
            char *nb = realloc(buf, nc);
            if (!nb) break;
            buf = nb;
            cap = nc;
        }
        const int r = mg_read(rc->c, buf + len, cap - 1 - len);
        if (r <= 0) break;
        len += (size_t)r;
        if (len > max) break;
    }
    if (len > max) {
        free(buf);
        srv_send_error(rc, 413, "INVALID_REQUEST", 0, "request body exceeds the limit of %zu bytes", max);
        return -1;
    }
    buf[len] = 0;
    rc->body = buf;
    rc->body_len = len;
    return 0;
}

static void finish_request(srv_conn *rc, const char *method, const char *path) {
    qr_server *s = rc->s;
    const double dur = qr_time_s() - rc->t0;
    char lab[512], esc_model[200];
    srv_metrics_escape(rc->model, esc_model, sizeof esc_model);
    snprintf(lab, sizeof lab, "model=\"%s\",endpoint=\"%s\",code=\"%d\"", esc_model, rc->endpoint, rc->status);
    srv_metrics_add(s->metrics, "quarrel_requests_total", lab, 1);
    snprintf(lab, sizeof lab, "endpoint=\"%s\"", rc->endpoint);
    srv_metrics_observe(s->metrics, "quarrel_request_duration_seconds", lab, dur);
    if (rc->err_code && !rc->err_counted) { /* in-band stream errors; srv_send_error counted its own */
        snprintf(lab, sizeof lab, "code=\"%s\"", rc->err_code);
        srv_metrics_add(s->metrics, "quarrel_errors_total", lab, 1);
    }
    json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:s, s:i, s:f}", "level", rc->status >= 500 ? "error" : "info", "msg",
                          "request", "request_id", rc->rid, "method", method, "path", path, "status", rc->status,
                          "duration_ms", dur * 1e3);
    if (j) {
        if (rc->err_code) json_object_set_new(j, "code", json_string(rc->err_code));
        if (rc->model[0]) json_object_set_new(j, "model", json_string(rc->model));
        if (rc->key_id[0]) json_object_set_new(j, "key_id", json_string(rc->key_id));
        if (rc->n_prompt || rc->n_gen) {
            json_object_set_new(j, "prompt_tokens", json_integer(rc->n_prompt));
            json_object_set_new(j, "generated_tokens", json_integer(rc->n_gen));
        }
        if (s->cfg.log_prompts && rc->body && rc->body_len < 65536)
            json_object_set_new(j, "body", json_stringn(rc->body, rc->body_len));
        log_json(j);
    }
}

/* CivetWeb's begin_request: runs before every handler, the WebSocket upgrade included. Refuses
 * with 403 FORBIDDEN a Host that does not name this server and a /ws upgrade from a foreign
 * Origin; 0 lets the request through. */
static int begin_request(struct mg_connection *c) {
    const struct mg_request_info *ri = mg_get_request_info(c);
    qr_server *s = ri->user_data;
    const char *host = mg_get_header(c, "Host"), *origin = mg_get_header(c, "Origin");
    const char *path = ri->local_uri ? ri->local_uri : "/", *upgrade = mg_get_header(c, "Upgrade");
    srv_conn rc = {.c = c, .s = s, .ri = ri, .endpoint = "forbidden", .t0 = qr_time_s()};
    if (host_allowed(s, host)) {
        if (strcmp(path, "/ws") || !upgrade || !strcasestr(upgrade, "websocket") || ws_origin_allowed(s, origin, host))
            return 0;
        make_request_id(s, c, rc.rid, sizeof rc.rid);
        srv_send_error(&rc, 403, "FORBIDDEN", 0, "Origin '%.200s' may not open /ws (see --cors-origin)", origin);
    } else {
        make_request_id(s, c, rc.rid, sizeof rc.rid);
        srv_send_error(&rc, 403, "FORBIDDEN", 0, "Host '%.200s' does not name this server (see --allowed-host)", host);
    }
    finish_request(&rc, ri->request_method, path);
    return 403;
}

#define ALLOW_GET "GET, HEAD, OPTIONS"
#define ALLOW_POST "POST, OPTIONS"
#define ALLOW_GET_DELETE "GET, HEAD, DELETE, OPTIONS"

/* 405 INVALID_REQUEST with the path's Allow header (allow: NULL = none). */
static void send_405(srv_conn *rc, const char *method, const char *path, const char *allow) {
    rc->allow = allow;
    srv_send_error(rc, 405, "INVALID_REQUEST", 0, "method %s is not allowed on %s", method, path);
}

/* The Allow header of a path (route table, model routes, web UI), NULL for an unknown path. */
static const char *path_allow(const char *path) {
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (!strcmp(routes[i].path, path)) return strcmp(routes[i].method, "GET") ? ALLOW_POST : ALLOW_GET;
    if ((!strncmp(path, "/api/models/", 12) && path[12]) || (!strncmp(path, "/v1/models/", 11) && path[11]))
        return ALLOW_GET;
    if (!strncmp(path, "/v1/responses/", 14) && path[14]) return ALLOW_GET_DELETE;
    return srv_static_known(path) || !strcmp(path, "/ws") ? ALLOW_GET : NULL;
}

/* Whether m is an RFC 9110 method token (1-32 of A-Z, a-z, 0-9 and !#$%&'*+-.^_`|~). */
static bool method_token(const char *m) {
    size_t n = strlen(m);
    if (n == 0 || n > 32) return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)m[i]) && !strchr("!#$%&'*+-.^_`|~", m[i])) return false;
    return true;
}

/* CivetWeb's http_error: an error CivetWeb answers itself, before any handler (a request line it
 * cannot parse, an unknown method such as TRACE, headers over max_request_size). Answers it in our
 * JSON shape instead of CivetWeb's text page: TRACE (which CivetWeb does not implement) is 405 with
 * the path's Allow, as is any other well-formed method it does not know (QUERY, ...) on a known path;
 * anything else keeps CivetWeb's status with its message. The connection closes. */
static int http_error_cb(struct mg_connection *c, int status, const char *errmsg) {
    const struct mg_request_info *ri = mg_get_request_info(c);
    qr_server *s = mg_get_user_data(mg_get_context(c));
    if (!ri || !s) return 1;
    srv_conn rc = {.c = c, .s = s, .ri = ri, .endpoint = "other", .t0 = qr_time_s()};
    make_request_id(s, c, rc.rid, sizeof rc.rid);
    const char *method = ri->request_method ? ri->request_method : "";
    const char *path = ri->local_uri ? ri->local_uri : ri->request_uri ? ri->request_uri : "";
    if (status == 400 && !strcmp(method, "TRACE")) {
        rc.allow = path_allow(path);
        if (!rc.allow) rc.allow = ALLOW_GET;
        status = 405;
    } else if (status == 400 && method_token(method) && path_allow(path)) {
        rc.allow = path_allow(path); /* a well-formed method CivetWeb does not know (QUERY, ...) on a route */
        status = 405;
    }
    if (status == 405) srv_send_error(&rc, 405, "INVALID_REQUEST", 0, "method %s is not allowed on %.200s", method, path);
    else if (status == 400) /* CivetWeb says "Bad request" / "Malformed message" alike for all of these */
        srv_send_error(&rc, 400, "INVALID_REQUEST", 0,
                       "%s: the request line or headers cannot be parsed, the method is unknown, or the headers "
                       "exceed %d bytes (--max-header-bytes)", errmsg ? errmsg : "Bad request",
                       s->cfg.max_header_bytes > 0 ? (int)s->cfg.max_header_bytes : 16384);
    else srv_send_error(&rc, status, status >= 500 ? "INFERENCE_ERROR" : "INVALID_REQUEST", 0, "%s", errmsg ? errmsg : "");
    finish_request(&rc, method[0] ? method : "-", path[0] ? path : "-");
    return 0;
}

static int handle(struct mg_connection *c, void *cbdata) {
    qr_server *s = cbdata;
    const struct mg_request_info *ri = mg_get_request_info(c);
    srv_conn rc = {.c = c, .s = s, .ri = ri, .endpoint = "other", .t0 = qr_time_s()};
    make_request_id(s, c, rc.rid, sizeof rc.rid);
    srv_metrics_add(s->metrics, "quarrel_connections_active", "kind=\"http\"", 1);
    atomic_fetch_add(&s->inflight, 1);
    const char *origin = mg_get_header(c, "Origin");
    if (origin && origin_allowed(s, origin))
        snprintf(rc.cors_origin, sizeof rc.cors_origin, "%s", strchr(s->cors, '*') ? "*" : origin);
    const char *method = ri->request_method, *path = ri->local_uri ? ri->local_uri : "/";
    const route *rt = NULL;
    bool path_known = false;
    const char *model_name = NULL;
    /* HEAD is GET without the body (the same headers and Content-Length) */
    const bool head_req = !strcmp(method, "HEAD"), get_like = head_req || !strcmp(method, "GET");
    rc.head_only = head_req;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (!strcmp(routes[i].path, path)) {
            path_known = true;
            if (!strcmp(routes[i].method, method) || (head_req && !strcmp(routes[i].method, "GET"))) rt = &routes[i];
        }
    /* GET /api/models/{name}, GET /v1/models/{id}, GET and DELETE /v1/responses/{id} */
    int (*model_fn)(srv_conn *, const char *) = NULL;
    const char *model_route = NULL;
    if (!strncmp(path, "/api/models/", 12) && path[12]) {
        path_known = true;
        model_name = path + 12;
        model_fn = srv_h_model_info, model_route = "/api/models/{name}";
    } else if (!strncmp(path, "/v1/models/", 11) && path[11]) {
        path_known = true;
        model_name = path + 11;
        model_fn = srv_h_openai_model, model_route = "/v1/models/{id}";
    } else if (!strncmp(path, "/v1/responses/", 14) && path[14]) {
        path_known = true;
        model_name = path + 14;
        model_fn = srv_h_response_item, model_route = "/v1/responses/{id}";
    }
    const bool delete_ok = model_fn == srv_h_response_item && !strcmp(method, "DELETE");
    const char *allow = path_allow(path); /* the Allow header of the path */
    if (head_req || !strcmp(method, "OPTIONS")) rc.allow = allow;
    if (!strcmp(method, "OPTIONS")) { /* CORS preflight */
        rc.endpoint = "preflight";
        char extra[512] = "";
        if (rc.cors_origin[0])
            snprintf(extra, sizeof extra,
                     "Access-Control-Allow-Methods: GET, POST, DELETE, OPTIONS\r\nAccess-Control-Allow-Headers: "
                     "Authorization, Content-Type, X-API-Key, X-Request-Id, anthropic-version\r\n"
                     "Access-Control-Max-Age: 600\r\n");
        srv_send(&rc, 204, "text/plain", "", 0, extra);
        goto done;
    }
    if (!strcmp(path, "/ws")) { /* a WebSocket upgrade never reaches this handler */
        rc.endpoint = "/ws";
        if (!get_like) send_405(&rc, method, path, ALLOW_GET);
        else srv_send_error(&rc, 426, "INVALID_REQUEST", 0, "/ws is a WebSocket endpoint: send an Upgrade: websocket request");
        goto done;
    }
    if (!path_known && srv_static_known(path)) { /* the web UI: public, GET only */
        rc.endpoint = "/ui";
        if (get_like) srv_h_static(&rc);
        else send_405(&rc, method, path, allow);
        goto done;
    }
    if (!path_known) {
        srv_send_error(&rc, 404, "INVALID_REQUEST", 0, "no route %s %s", method, path);
        goto done;
    }
    if (!rt && !(model_name && (get_like || delete_ok))) {
        send_405(&rc, method, path, allow);
        goto done;
    }
    rc.endpoint = rt ? rt->path : model_route;
    if (!rt || !rt->public_) {
        srv_auth a;
        const int ok = srv_check_auth(s, c, &a);
        snprintf(rc.key_id, sizeof rc.key_id, "%s", a.key_id);
        rc.tpm = a.tpm;
        if (ok < 0) {
            srv_send_error(&rc, a.status, a.code, a.retry_after, "%s", a.msg);
            goto done;
        }
        if (atomic_load(&s->draining)) {
            srv_send_error(&rc, 503, "SHUTTING_DOWN", 5, "the server is shutting down");
            goto done;
        }
    }
    if (rt && rt->body && read_body(&rc) < 0) goto done;
    if (rt) rt->fn(&rc);
    else model_fn(&rc, model_name);
    if (!rc.headers_sent) srv_send_error(&rc, 500, "INFERENCE_ERROR", 0, "no response");
done:
    finish_request(&rc, method, path);
    srv_metrics_add(s->metrics, "quarrel_connections_active", "kind=\"http\"", -1);
    free(rc.body);
    atomic_fetch_sub(&s->inflight, 1);
    return rc.status > 0 ? rc.status : 500;
}

/* ---- lifecycle ---- */

static void *janitor_main(void *arg) {
    qr_server *s = arg;
    while (!atomic_load(&s->stop_janitor)) {
        for (int i = 0; i < 10 && !atomic_load(&s->stop_janitor); i++) usleep(100 * 1000);
        srv_registry_tick(s->reg);
    }
    return NULL;
}

static void declare_metrics(srv_metrics *m) {
    static const double dur_b[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
    static const double ttft_b[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
    srv_metrics_declare(m, "quarrel_requests_total", SRV_COUNTER, "HTTP requests by model, endpoint and status code.",
                        NULL, 0);
    srv_metrics_declare(m, "quarrel_tokens_total", SRV_COUNTER, "Tokens processed by model and kind (prompt|generated).",
                        NULL, 0);
    srv_metrics_declare(m, "quarrel_request_duration_seconds", SRV_HISTOGRAM, "Request duration by endpoint.", dur_b,
                        (int)(sizeof dur_b / sizeof dur_b[0]));
    srv_metrics_declare(m, "quarrel_time_to_first_token_seconds", SRV_HISTOGRAM,
                        "Time from request arrival to the first generated token.", ttft_b,
                        (int)(sizeof ttft_b / sizeof ttft_b[0]));
    srv_metrics_declare(m, "quarrel_connections_active", SRV_GAUGE, "Open connections being served (http|ws).", NULL, 0);
    srv_metrics_declare(m, "quarrel_queue_depth", SRV_GAUGE, "Requests waiting for a sequence slot.", NULL, 0);
    srv_metrics_declare(m, "quarrel_requests_running", SRV_GAUGE, "Requests holding a sequence slot.", NULL, 0);
    srv_metrics_declare(m, "quarrel_kv_blocks_used", SRV_GAUGE, "KV cache blocks held by sequences.", NULL, 0);
    srv_metrics_declare(m, "quarrel_kv_blocks_free", SRV_GAUGE, "KV cache blocks allocatable now (free + evictable cached).",
                        NULL, 0);
    srv_metrics_declare(m, "quarrel_kv_blocks_cached", SRV_GAUGE, "KV cache blocks registered in the prefix cache.", NULL,
                        0);
    srv_metrics_declare(m, "quarrel_kv_cache_bytes", SRV_GAUGE, "Bytes of the KV cache (all layers, K and V).", NULL, 0);
    srv_metrics_declare(m, "quarrel_kv_bytes_used", SRV_GAUGE, "KV cache bytes held by sequences.", NULL, 0);
    srv_metrics_declare(m, "quarrel_kv_bytes_free", SRV_GAUGE, "KV cache bytes allocatable now (free + evictable cached).",
                        NULL, 0);
    srv_metrics_declare(m, "quarrel_prefix_cache_hits_total", SRV_COUNTER,
                        "Requests that reused cached KV blocks of an earlier prompt.", NULL, 0);
    srv_metrics_declare(m, "quarrel_prefix_cache_tokens_total", SRV_COUNTER,
                        "Prompt tokens whose prefill the prefix cache saved.", NULL, 0);
    srv_metrics_declare(m, "quarrel_preemptions_total", SRV_COUNTER, "Requests preempted under KV pressure (recomputed).",
                        NULL, 0);
    srv_metrics_declare(m, "quarrel_spec_draft_tokens_total", SRV_COUNTER,
                        "Speculative decoding: drafted tokens verified by the target.", NULL, 0);
    srv_metrics_declare(m, "quarrel_spec_accepted_tokens_total", SRV_COUNTER,
                        "Speculative decoding: drafted tokens the target kept.", NULL, 0);
    srv_metrics_declare(m, "quarrel_spec_verifications_total", SRV_COUNTER,
                        "Speculative decoding: verification steps (a sequence's step with a draft).", NULL, 0);
    srv_metrics_declare(m, "quarrel_spec_acceptance_ratio", SRV_GAUGE,
                        "Speculative decoding: accepted / drafted tokens since the model loaded.", NULL, 0);
    srv_metrics_declare(m, "quarrel_cancellations_total", SRV_COUNTER,
                        "Requests cancelled (client disconnect, stop message).", NULL, 0);
    srv_metrics_declare(m, "quarrel_errors_total", SRV_COUNTER, "Error responses by error code.", NULL, 0);
    srv_metrics_declare(m, "quarrel_requests_by_feature_total", SRV_COUNTER,
                        "Generation requests by feature used (tools, tool_choice_required, json_schema, reasoning, "
                        "previous_response_id).", NULL, 0);
    srv_metrics_declare(m, "quarrel_models_loaded", SRV_GAUGE, "Models loaded.", NULL, 0);
    srv_metrics_declare(m, "quarrel_tp_ranks", SRV_GAUGE, "Tensor-parallel ranks a model runs on (1: none).", NULL, 0);
    srv_metrics_declare(m, "quarrel_gpu_memory_free_bytes", SRV_GAUGE,
                        "Free memory of the GPU each rank of a model runs on (CUDA only).", NULL, 0);
    srv_metrics_declare(m, "quarrel_gpu_memory_total_bytes", SRV_GAUGE,
                        "Total memory of the GPU each rank of a model runs on (CUDA only).", NULL, 0);
}

qr_status qr_server_start(const qr_server_config *cfg, qr_server **out, char *err, size_t err_len) {
    *out = NULL;
    qr_server *s = calloc(1, sizeof *s);
    if (!s) return qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory");
    s->cfg = *cfg;
    pthread_mutex_init(&s->ws_mu, NULL);
    snprintf(s->host, sizeof s->host, "%s", cfg->host ? cfg->host : "127.0.0.1");
    snprintf(s->cors, sizeof s->cors, "%s", cfg->cors_origins ? cfg->cors_origins : "");
    snprintf(s->allowed_hosts, sizeof s->allowed_hosts, "%s", cfg->allowed_hosts ? cfg->allowed_hosts : "");
    s->cfg.allowed_hosts = s->allowed_hosts;
    s->cfg.host = s->host;
    s->cfg.cors_origins = s->cors;
    s->started_at = srv_wall_now();
    qr_status st = QR_OK;
    s->metrics = srv_metrics_create();
    s->rl = srv_ratelimit_create();
    s->resp_store = srv_resp_store_create(SRV_RESP_STORE_MAX, SRV_RESP_STORE_BYTES, SRV_RESP_STORE_TTL_S);
    if (!s->metrics || !s->rl || !s->resp_store) {
        st = qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory");
        goto fail;
    }
    declare_metrics(s->metrics);
    srv_metrics_set(s->metrics, "quarrel_connections_active", "kind=\"http\"", 0);
    srv_metrics_set(s->metrics, "quarrel_connections_active", "kind=\"ws\"", 0);
    if (cfg->api_key_db) {
        s->keys = srv_keys_open(cfg->api_key_db, false, err, err_len);
        if (!s->keys) {
            st = QR_ERR_IO;
            goto fail;
        }
    }
    srv_registry_opts ro = {.parallel = cfg->parallel, .ctx = cfg->ctx, .kv_mem_bytes = cfg->kv_mem_bytes,
                            .cache_type_k = cfg->cache_type_k, .cache_type_v = cfg->cache_type_v, .n_threads = cfg->n_threads,
                            .max_queue = cfg->max_queue, .prefill_chunk = cfg->prefill_chunk,
                            .no_prefix_cache = cfg->no_prefix_cache, .backend = cfg->backend, .gpu = cfg->gpu,
                            .tp = cfg->tp, .tp_addr = cfg->tp_addr, .split_mode = cfg->split_mode, .request_timeout_s = cfg->request_timeout_s, .mem_budget = cfg->mem_budget,
                            .keep_alive_s = cfg->keep_alive_s, .allow_load = cfg->allow_load,
                            .model_dir = cfg->model_dir, .spec_on = cfg->spec_on, .spec = cfg->spec,
                            .draft_path = cfg->draft_path};
    memcpy(ro.tensor_split, cfg->tensor_split, sizeof ro.tensor_split);
    s->reg = srv_registry_create(&ro);
    if (!s->reg) {
        st = qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (int32_t i = 0; i < cfg->n_models; i++) {
        const double t0 = qr_time_s();
        if ((st = srv_registry_load(s->reg, cfg->models[i], err, err_len)) != QR_OK) goto fail;
        log_json(json_pack("{s:s, s:s, s:s, s:f}", "level", "info", "msg", "model loaded", "model", cfg->models[i],
                           "seconds", qr_time_s() - t0));
    }
    mg_init_library(MG_FEATURES_WEBSOCKET);
    char ports[300], threads[16], tmo[16], hdr[16], queue[16];
    snprintf(ports, sizeof ports, "%s:%d", s->host, cfg->port);
    snprintf(threads, sizeof threads, "%d", cfg->http_threads > 0 ? cfg->http_threads : 256);
    snprintf(tmo, sizeof tmo, "%d", cfg->io_timeout_ms > 0 ? cfg->io_timeout_ms : 10000);
    snprintf(hdr, sizeof hdr, "%d", cfg->max_header_bytes > 0 ? cfg->max_header_bytes : 16384);
    snprintf(queue, sizeof queue, "%d", 512);
    const char *opts[] = {"listening_ports", ports, "num_threads", threads, "request_timeout_ms", tmo,
                          "max_request_size", hdr, "enable_keep_alive", "yes", "keep_alive_timeout_ms", "15000",
                          "websocket_timeout_ms", "300000", "enable_websocket_ping_pong", "no",
                          "connection_queue", queue, "listen_backlog", queue, "decode_url", "yes",
                          "access_control_allow_origin", "", NULL}; /* CORS is ours, not CivetWeb's "*" */
    struct mg_callbacks cb;
    memset(&cb, 0, sizeof cb);
    cb.log_message = log_message_cb;
    cb.begin_request = begin_request;
    cb.http_error = http_error_cb;
    s->mg = mg_start(&cb, s, opts);
    if (!s->mg) {
        st = qr_errf(err, err_len, QR_ERR_IO, "cannot listen on %s (address in use or not available?)", ports);
        goto fail;
    }
    struct mg_server_port sp[4];
    const int np = mg_get_server_ports(s->mg, 4, sp);
    s->port = np > 0 ? sp[0].port : cfg->port;
    mg_set_request_handler(s->mg, "/", handle, s);
    srv_ws_register(s);
    if (pthread_create(&s->janitor, NULL, janitor_main, s) == 0) s->janitor_started = true;
    log_json(json_pack("{s:s, s:s, s:s, s:i, s:i, s:b}", "level", "info", "msg", "listening", "host", s->host, "port",
                       s->port, "models", cfg->n_models, "auth", s->keys != NULL));
    *out = s;
    return QR_OK;
fail:
    srv_registry_free(s->reg);
    srv_keys_close(s->keys);
    srv_metrics_free(s->metrics);
    srv_ratelimit_free(s->rl);
    srv_resp_store_free(s->resp_store);
    free(s);
    return st;
}

void qr_server_stop(qr_server *s, double drain_s) {
    if (!s) return;
    atomic_store(&s->draining, true);
    /* in-flight HTTP requests (also those still being read or tokenized), then WS generations */
    const double end = qr_time_s() + drain_s;
    while (atomic_load(&s->inflight) > 0 && qr_time_s() < end) usleep(20 * 1000);
    const double rem = end - qr_time_s();
    const int32_t left = srv_registry_drain(s->reg, rem > 0 ? rem : 0) + atomic_load(&s->inflight);
    log_json(json_pack("{s:s, s:s, s:i}", "level", "info", "msg", "drained", "unfinished", left));
    atomic_store(&s->stop_janitor, true);
    if (s->janitor_started) pthread_join(s->janitor, NULL);
    /* unfinished requests are cancelled so their handlers return; then the listener threads are
     * joined, and only then the models go */
    srv_registry_cancel_all(s->reg);
    for (int i = 0; i < 250 && atomic_load(&s->inflight) > 0; i++) usleep(20 * 1000); /* their error replies */
    srv_ws_close_all(s); /* 1001 "going away" to every open /ws, after its generation's last message */
    mg_stop(s->mg);
    srv_registry_free(s->reg);
    s->reg = NULL;
    srv_keys_close(s->keys);
    srv_metrics_free(s->metrics);
    srv_ratelimit_free(s->rl);
    srv_resp_store_free(s->resp_store);
    pthread_mutex_destroy(&s->ws_mu);
    free(s);
}
