/* ws.c — the /ws WebSocket protocol. Every message is {"type": ..., "payload": ...}:
 *   client -> server: inference {prompt|messages, model, temperature, top_k, top_p, max_tokens,
 *                     stream, ...}; stop; status; metrics; ping
 *   server -> client: inference {token, token_id, complete, tokens_per_sec} per token, then one
 *                     with complete = true (finish_reason, usage); status; metrics; error
 *                     {code, message}; pong
 * Every inference message verifies the connection's key again and takes a request from its rate
 * limits (the handshake took the first); a refusal is an in-band error {code, message}.
 * One generation at a time per connection; "stop" cancels it (its KV blocks free before the next
 * scheduler step). WebSocket ping frames are answered with pong frames. Frames larger than 1 MiB
 * close the connection with 1009, text that is not UTF-8 with 1007. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/api_common.h"
#include "util/util.h"

#define WS_MAX_MESSAGE (1u << 20)

json_t *srv_native_token_json(const srv_ev *e, double t_first, int32_t n_gen);
json_t *srv_native_done_json(const srv_ev *done, double t_first);

typedef struct ws_state {
    qr_server *s;
    struct mg_connection *c;
    pthread_mutex_t mu;
    bool busy;              /* a generation runs (writer thread alive) */
    bool joinable;          /* writer thread started and not joined */
    pthread_t writer;
    srv_job job;
    srv_auth auth;          /* the key and its limits */
    int auth_status;        /* != 0: refused at connect (sent in ready) */
    char rid[72];
    bool stopped;           /* the client sent "stop" for the running generation */
    struct ws_state *next;  /* s->ws_list, under s->ws_mu */
} ws_state;

static int ws_send_text(ws_state *w, const char *s, size_t n) {
    mg_lock_connection(w->c);
    const int r = mg_websocket_write(w->c, MG_WEBSOCKET_OPCODE_TEXT, s, n);
    mg_unlock_connection(w->c);
    return r > 0 ? 0 : -1;
}

/* Sends {"type": type, "payload": payload} (steals payload). */
static int ws_send(ws_state *w, const char *type, json_t *payload) {
    json_t *m = json_pack("{s:s, s:o}", "type", type, "payload", payload ? payload : json_null());
    char *s = m ? json_dumps(m, JSON_COMPACT) : NULL;
    json_decref(m);
    if (!s) return -1;
    const int r = ws_send_text(w, s, strlen(s));
    free(s);
    return r;
}

static void ws_error(ws_state *w, const char *code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void ws_error(ws_state *w, const char *code, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *p = json_pack("{s:s, s:s}", "code", code, "message", msg);
    ws_send(w, "error", p ? p : json_pack("{s:s}", "code", code));
    char lab[64];
    snprintf(lab, sizeof lab, "code=\"%s\"", code);
    srv_metrics_add(w->s->metrics, "quarrel_errors_total", lab, 1);
}

static void ws_close(ws_state *w, int code, const char *reason) {
    unsigned char buf[128];
    buf[0] = (unsigned char)(code >> 8);
    buf[1] = (unsigned char)(code & 0xff);
    size_t n = strlen(reason);
    if (n > sizeof buf - 2) n = sizeof buf - 2;
    memcpy(buf + 2, reason, n);
    mg_lock_connection(w->c);
    mg_websocket_write(w->c, MG_WEBSOCKET_OPCODE_CONNECTION_CLOSE, (const char *)buf, n + 2);
    mg_unlock_connection(w->c);
}

/* Streams one generation to the socket; runs on its own thread so the connection's thread keeps
 * reading (a "stop" must get through while tokens flow). */
static void *writer_main(void *arg) {
    ws_state *w = arg;
    srv_job *j = &w->job;
    bool gone = false;
    double t_first = 0, ttft = -1;
    int32_t n = 0;
    srv_ev *done = NULL;
    char *text = NULL;
    size_t text_len = 0;
    for (srv_ev *e; (e = srv_gen_next(&j->g));) {
        if (e->type == QR_SCHED_EV_DONE) {
            done = e;
            break;
        }
        if (!n) t_first = qr_time_s(), ttft = t_first - j->t_arrival;
        n++;
        if (j->req.stream) {
            if (!gone && ws_send(w, "inference", srv_native_token_json(e, t_first, n)) < 0) {
                gone = true;
                srv_gen_cancel(&j->g);
            }
        } else {
            char *nt = realloc(text, text_len + e->len + 1);
            if (nt) {
                text = nt;
                memcpy(text + text_len, e->text, e->len);
                text_len += e->len;
                text[text_len] = 0;
            }
        }
        srv_ev_free(e);
    }
    int http = 200;
    const char *ecode = done ? srv_done_error_code(w->s, done, &http) : "INFERENCE_ERROR";
    /* "stop" is a normal end (cut by a shutdown is SHUTTING_DOWN, above) */
    pthread_mutex_lock(&w->mu);
    const bool stopped = w->stopped;
    pthread_mutex_unlock(&w->mu);
    if (done && done->end == QR_SCHED_END_CANCELLED && (stopped || !atomic_load(&w->s->draining))) ecode = NULL;
    char lab[300], esc[200];
    srv_metrics_escape(j->m ? j->m->name : "", esc, sizeof esc);
    if (done) {
        snprintf(lab, sizeof lab, "model=\"%s\",kind=\"prompt\"", esc);
        srv_metrics_add(w->s->metrics, "quarrel_tokens_total", lab, done->timing.n_prompt);
        snprintf(lab, sizeof lab, "model=\"%s\",kind=\"generated\"", esc);
        srv_metrics_add(w->s->metrics, "quarrel_tokens_total", lab, done->timing.n_gen);
        srv_ratelimit_tokens(w->s->rl, srv_auth_bucket(&w->auth), done->timing.n_prompt + done->timing.n_gen,
                             w->auth.tpm);
    }
    if (ttft >= 0) {
        snprintf(lab, sizeof lab, "model=\"%s\"", esc);
        srv_metrics_observe(w->s->metrics, "quarrel_time_to_first_token_seconds", lab, ttft);
    }
    snprintf(lab, sizeof lab, "model=\"%s\",endpoint=\"/ws\",code=\"%d\"", esc, gone ? 499 : ecode ? http : 200);
    srv_metrics_add(w->s->metrics, "quarrel_requests_total", lab, 1);
    srv_metrics_observe(w->s->metrics, "quarrel_request_duration_seconds", "endpoint=\"/ws\"", qr_time_s() - j->t_arrival);
    /* Not busy before the final message goes out: a client may send its next inference as soon as it
     * reads it (on_inference then joins this thread before reusing the job). From here on "stop" no
     * longer touches the job. */
    pthread_mutex_lock(&w->mu);
    w->busy = false;
    pthread_mutex_unlock(&w->mu);
    if (!gone) {
        if (ecode) {
            ws_error(w, ecode, "%s", srv_done_error_message(done, ecode));
        } else if (done) {
            json_t *p = srv_native_done_json(done, t_first);
            if (p && !j->req.stream) json_object_set_new(p, "token", json_stringn(text ? text : "", text_len));
            if (p && done->end == QR_SCHED_END_CANCELLED) json_object_set_new(p, "finish_reason", json_string("cancelled"));
            ws_send(w, "inference", p);
        }
    }
    free(text);
    srv_ev_free(done);
    srv_job_end(NULL, j, w->s);
    return NULL;
}

static void join_writer(ws_state *w) {
    pthread_mutex_lock(&w->mu);
    const bool j = w->joinable;
    w->joinable = false;
    pthread_mutex_unlock(&w->mu);
    if (j) pthread_join(w->writer, NULL);
}

static void on_inference(ws_state *w, json_t *payload) {
    pthread_mutex_lock(&w->mu);
    const bool busy = w->busy;
    pthread_mutex_unlock(&w->mu);
    if (busy) return ws_error(w, "INVALID_REQUEST", "a generation is already running on this connection; send stop first");
    join_writer(w); /* the previous one finished */
    if (atomic_load(&w->s->draining)) return ws_error(w, "SHUTTING_DOWN", "the server is shutting down");
    /* every inference message is a request: the key is verified again (revoked or rotated keys stop
     * here) and its rpm / tpm apply; a refusal is an error message, the socket stays open */
    if (srv_recheck_auth(w->s, &w->auth) < 0) return ws_error(w, w->auth.code, "%s", w->auth.msg);
    if (!json_is_object(payload)) return ws_error(w, "INVALID_REQUEST", "'payload' of an inference message must be an object");
    srv_gen_req req;
    char err[1024];
    if (srv_gen_req_from_json(payload, SRV_API_NATIVE, &req, err, sizeof err) < 0) {
        srv_gen_req_free(&req);
        return ws_error(w, "INVALID_REQUEST", "%s", err);
    }
    int status = 0;
    const char *code = "INFERENCE_ERROR";
    if (srv_job_begin_req(NULL, SRV_API_NATIVE, &req, &w->job, w->s, &status, &code, err, sizeof err) < 0)
        return ws_error(w, code, "%s", err);
    pthread_mutex_lock(&w->mu);
    w->busy = true;
    w->stopped = false;
    if (pthread_create(&w->writer, NULL, writer_main, w) == 0) {
        w->joinable = true;
        pthread_mutex_unlock(&w->mu);
    } else {
        w->busy = false;
        pthread_mutex_unlock(&w->mu);
        srv_job_end(NULL, &w->job, w->s);
        ws_error(w, "INFERENCE_ERROR", "cannot start the stream");
    }
}

static void status_model(void *arg, srv_model *m) {
    qr_sched_stats st;
    qr_sched_get_stats(m->sched, &st);
    json_array_append_new(arg, json_pack("{s:s, s:i, s:i, s:i, s:i}", "name", m->name, "running", st.running,
                                         "queue_depth", st.queue_depth, "kv_blocks_used", st.kv_blocks_used,
                                         "kv_blocks_free", st.kv_blocks_free));
}

static void on_message(ws_state *w, const char *data, size_t len) {
    json_t *root;
    char err[512];
    if (srv_json_parse(data, len, w->s->cfg.max_json_depth, &root, err, sizeof err) < 0)
        return ws_error(w, "INVALID_REQUEST", "%s", err);
    json_t *type = json_object_get(root, "type"), *payload = json_object_get(root, "payload");
    const char *t = json_is_string(type) ? json_string_value(type) : "";
    if (!strcmp(t, "inference")) {
        on_inference(w, payload);
    } else if (!strcmp(t, "stop")) {
        pthread_mutex_lock(&w->mu);
        const bool busy = w->busy;
        if (busy) srv_gen_cancel(&w->job.g), w->stopped = true;
        pthread_mutex_unlock(&w->mu);
        if (!busy) ws_send(w, "status", json_pack("{s:b, s:s}", "busy", 0, "message", "nothing to stop"));
    } else if (!strcmp(t, "status")) {
        pthread_mutex_lock(&w->mu);
        const bool busy = w->busy;
        pthread_mutex_unlock(&w->mu);
        json_t *models = json_array();
        srv_registry_foreach(w->s->reg, status_model, models);
        ws_send(w, "status", json_pack("{s:b, s:o, s:s}", "busy", busy, "models", models, "version", qr_version()));
    } else if (!strcmp(t, "metrics")) {
        size_t n;
        char *txt = srv_render_metrics(w->s, &n);
        json_t *models = json_array();
        srv_registry_foreach(w->s->reg, status_model, models);
        json_t *p = json_pack("{s:o, s:s%}", "models", models, "prometheus", txt ? txt : "", txt ? n : 0);
        ws_send(w, "metrics", p);
        free(txt);
    } else if (!strcmp(t, "ping")) {
        ws_send(w, "pong", json_incref(payload ? payload : json_null()));
    } else {
        ws_error(w, "INVALID_REQUEST", "unknown message type '%.64s' (inference, stop, status, metrics, ping)", t);
    }
    json_decref(root);
}

static int ws_connect(const struct mg_connection *c, void *cbdata) {
    qr_server *s = cbdata;
    ws_state *w = calloc(1, sizeof *w);
    if (!w) return 1;
    w->s = s;
    pthread_mutex_init(&w->mu, NULL);
    /* a refused one is accepted so that the client reads a clear error message before the close */
    w->auth_status = srv_check_auth(s, c, &w->auth) < 0 ? w->auth.status : 0;
    mg_set_user_connection_data(c, w);
    return 0;
}

static void ws_ready(struct mg_connection *c, void *cbdata) {
    (void)cbdata;
    ws_state *w = mg_get_user_connection_data(c);
    if (!w) return;
    w->c = c;
    pthread_mutex_lock(&w->s->ws_mu);
    w->next = w->s->ws_list;
    w->s->ws_list = w;
    pthread_mutex_unlock(&w->s->ws_mu);
    srv_metrics_add(w->s->metrics, "quarrel_connections_active", "kind=\"ws\"", 1);
    if (w->auth_status) {
        ws_error(w, w->auth.code, "%s", w->auth.msg);
        ws_close(w, 1008, "unauthorized");
    }
}

static int ws_data(struct mg_connection *c, int bits, char *data, size_t len, void *cbdata) {
    (void)cbdata;
    ws_state *w = mg_get_user_connection_data(c);
    if (!w) return 0;
    const int op = bits & 0x0f;
    if (op == MG_WEBSOCKET_OPCODE_CONNECTION_CLOSE) return 0;
    if (op == MG_WEBSOCKET_OPCODE_PING) {
        mg_lock_connection(c);
        mg_websocket_write(c, MG_WEBSOCKET_OPCODE_PONG, data, len);
        mg_unlock_connection(c);
        return 1;
    }
    if (op == MG_WEBSOCKET_OPCODE_PONG) return 1;
    if (w->auth_status) return 0;
    if (len > WS_MAX_MESSAGE) {
        ws_error(w, "INVALID_REQUEST", "message of %zu bytes exceeds the limit of %u bytes", len, WS_MAX_MESSAGE);
        ws_close(w, 1009, "message too big");
        return 0;
    }
    if (op == MG_WEBSOCKET_OPCODE_BINARY) {
        ws_error(w, "INVALID_REQUEST", "binary messages are not supported; send JSON text");
        return 1;
    }
    if (op == MG_WEBSOCKET_OPCODE_TEXT || op == MG_WEBSOCKET_OPCODE_CONTINUATION) {
        if (!srv_utf8_valid(data, len)) {
            ws_error(w, "INVALID_REQUEST", "text message is not valid UTF-8");
            ws_close(w, 1007, "invalid UTF-8");
            return 0;
        }
        on_message(w, data, len);
    }
    return 1;
}

static void ws_closed(const struct mg_connection *c, void *cbdata) {
    (void)cbdata;
    ws_state *w = mg_get_user_connection_data(c);
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    if (w->busy) srv_gen_cancel(&w->job.g); /* the client went away: free its KV blocks now */
    pthread_mutex_unlock(&w->mu);
    join_writer(w);
    pthread_mutex_lock(&w->s->ws_mu);
    for (ws_state **p = &w->s->ws_list; *p; p = &(*p)->next)
        if (*p == w) {
            *p = w->next;
            break;
        }
    pthread_mutex_unlock(&w->s->ws_mu);
    if (w->c) srv_metrics_add(w->s->metrics, "quarrel_connections_active", "kind=\"ws\"", -1);
    pthread_mutex_destroy(&w->mu);
    free(w);
    mg_set_user_connection_data(c, NULL);
}

/* The subprotocol "quarrel" is accepted (and echoed) so that a browser can offer it together with
 * "quarrel.key.KEY", its only way to present an API key (see srv_check_auth). */
static const char *ws_protocol_names[] = {"quarrel"};
static struct mg_websocket_subprotocols ws_protocols = {1, ws_protocol_names};

void srv_ws_register(qr_server *s) {
    mg_set_websocket_handler_with_subprotocols(s->mg, "/ws", &ws_protocols, ws_connect, ws_ready, ws_data, ws_closed, s);
}

void srv_ws_close_all(qr_server *s) {
    for (int i = 0; i < 50; i++) { /* the cancelled generations' last messages */
        bool busy = false;
        pthread_mutex_lock(&s->ws_mu);
        for (ws_state *w = s->ws_list; w && !busy; w = w->next) {
            pthread_mutex_lock(&w->mu);
            busy = w->busy;
            pthread_mutex_unlock(&w->mu);
        }
        pthread_mutex_unlock(&s->ws_mu);
        if (!busy) break;
        usleep(20 * 1000);
    }
    pthread_mutex_lock(&s->ws_mu);
    for (ws_state *w = s->ws_list; w; w = w->next) ws_close(w, 1001, "server shutting down");
    pthread_mutex_unlock(&s->ws_mu);
}
