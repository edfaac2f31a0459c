/* http.c — response helpers over CivetWeb: whole responses, JSON errors, chunked streams (SSE and
 * NDJSON), common headers (X-Request-Id, CORS). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/server_internal.h"
#include "util/util.h"

double srv_wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void srv_iso_time(double epoch_s, char *out, size_t cap) {
    const time_t sec = (time_t)epoch_s;
    struct tm tm;
    gmtime_r(&sec, &tm);
    char base[32];
    strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
    long ns = (long)((epoch_s - (double)sec) * 1e9);
    if (ns < 0) ns = 0;
    if (ns > 999999999) ns = 999999999;
    snprintf(out, cap, "%s.%09ldZ", base, ns);
}

static const char *reason(int status) {
    switch (status) {
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 415: return "Unsupported Media Type";
    case 426: return "Upgrade Required";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "Status";
    }
}

/* Status line + common headers (no blank line). */
static int head(srv_conn *rc, int status, const char *ctype) {
    rc->status = status;
    rc->headers_sent = true;
    int n = mg_printf(rc->c, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nX-Request-Id: %s\r\nCache-Control: no-store\r\n",
                      status, reason(status), ctype, rc->rid);
    if (n > 0 && rc->allow) n = mg_printf(rc->c, "Allow: %s\r\n", rc->allow);
    if (n > 0 && rc->cors_origin[0])
        n = mg_printf(rc->c, "Access-Control-Allow-Origin: %s\r\nVary: Origin\r\nAccess-Control-Expose-Headers: "
                             "X-Request-Id, Retry-After\r\n", rc->cors_origin);
    return n > 0 ? 0 : -1;
}

int srv_send(srv_conn *rc, int status, const char *ctype, const char *body, size_t len, const char *extra) {
    if (rc->headers_sent) return -1;
    if (head(rc, status, ctype) < 0) return -1;
    if (mg_printf(rc->c, "%sContent-Length: %zu\r\n\r\n", extra ? extra : "", len) <= 0) return -1;
    if (len && !rc->head_only && mg_write(rc->c, body, len) <= 0) return -1;
    return 0;
}

int srv_send_json(srv_conn *rc, int status, json_t *j) {
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!s) return srv_send(rc, 500, "application/json", "{\"error\":{\"code\":\"INFERENCE_ERROR\",\"message\":\"out of memory\"}}", 62, NULL);
    int r = srv_send(rc, status, "application/json", s, strlen(s), NULL);
    free(s);
    return r;
}

/* OpenAI's error type for an HTTP status. */
static const char *openai_error_type(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    case 400: case 405: case 413: case 426: return "invalid_request_error";
    default: return "server_error";
    }
}

/* Ollama's own routes (the Ollama API, not Quarrel's /api/models, /api/stream). */
static bool ollama_route(const char *path) {
    static const char *const routes[] = {"/api/generate", "/api/chat", "/api/embed", "/api/embeddings",
                                         "/api/tags", "/api/show", "/api/ps", "/api/version"};
    for (size_t i = 0; path && i < sizeof routes / sizeof routes[0]; i++)
        if (!strcmp(path, routes[i])) return true;
    return false;
}

/* OpenAI's "param" of an error: the field a request-validation message starts with ('name' ...,
 * e.g. 'messages[1].role'), else null. */
static json_t *error_param(const char *msg) {
    if (msg[0] != '\'') return json_null();
    size_t n = strspn(msg + 1, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.[]");
    return n > 0 && msg[1 + n] == '\'' ? json_stringn(msg + 1, n) : json_null();
}

/* Anthropic's error type for an HTTP status. */
static const char *anthropic_error_type(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    case 504: return "timeout_error";
    default: return status < 500 ? "invalid_request_error" : "api_error";
    }
}

/* The error body: {"error": {"code", "message"}} (docs/api.md); OpenAI routes (/v1/...) add OpenAI's
 * "type" and "param"; the Anthropic routes (/v1/messages...) are Anthropic's {"type": "error", "error":
 * {"type", "message"}} (plus "code"); a 429 on an Ollama route is Ollama's {"error": "message"} (plus "code"). */
static json_t *error_json(const srv_conn *rc, int status, const char *code, const char *msg) {
    const char *path = rc->ri ? (rc->ri->local_uri ? rc->ri->local_uri : rc->ri->request_uri) : NULL;
    if (status == 429 && ollama_route(path)) return json_pack("{s:s, s:s}", "error", msg, "code", code);
    json_t *j = json_pack("{s:{s:s, s:s}}", "error", "code", code, "message", msg);
    if (j && path && (!strcmp(path, "/v1/messages") || !strncmp(path, "/v1/messages/", 13))) {
        json_object_set_new(j, "type", json_string("error"));
        json_object_set_new(json_object_get(j, "error"), "type", json_string(anthropic_error_type(status)));
    } else if (j && path && !strncmp(path, "/v1/", 4)) {
        json_t *e = json_object_get(j, "error");
        json_object_set_new(e, "type", json_string(openai_error_type(status)));
        json_object_set_new(e, "param", error_param(msg));
    }
    return j;
}

int srv_send_error(srv_conn *rc, int status, const char *code, int retry_after_s, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    rc->err_code = code;
    if (!rc->err_counted && rc->s) { /* counted before the bytes go out: a client that reads the answer and
                                      * then scrapes /metrics sees it */
        char lab[96];
        snprintf(lab, sizeof lab, "code=\"%s\"", code);
        srv_metrics_add(rc->s->metrics, "quarrel_errors_total", lab, 1);
        rc->err_counted = true;
    }
    json_t *j = error_json(rc, status, code, msg);
    if (!j) j = error_json(rc, status, code, "(message not UTF-8)");
    char extra[64] = "";
    if (retry_after_s > 0) snprintf(extra, sizeof extra, "Retry-After: %d\r\n", retry_after_s);
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (rc->headers_sent) { /* mid-stream: the caller reports in-band */
        free(s);
        return -1;
    }
    int r = s ? srv_send(rc, status, "application/json", s, strlen(s), extra) : -1;
    free(s);
    return r;
}

/* How a failed call is answered, by its status (statuses not listed: 500 INFERENCE_ERROR). */
static const struct {
    qr_status st;
    int http;
    const char *code;
} status_http[] = {
    {QR_ERR_INVALID_ARG, 400, "INVALID_REQUEST"},
    {QR_ERR_NOT_FOUND, 404, "MODEL_NOT_FOUND"},
    {QR_ERR_BUSY, 503, "OVERLOADED"},
    {QR_ERR_SHUTDOWN, 503, "SHUTTING_DOWN"},
};

int srv_status_http(qr_status st, const char **code) {
    for (size_t i = 0; i < sizeof status_http / sizeof status_http[0]; i++)
        if (status_http[i].st == st) {
            *code = status_http[i].code;
            return status_http[i].http;
        }
    *code = "INFERENCE_ERROR";
    return 500;
}

int srv_send_status(srv_conn *rc, qr_status st, int retry_after_s, const char *msg) {
    const char *code;
    const int http = srv_status_http(st, &code);
    return srv_send_error(rc, http, code, http == 503 ? retry_after_s : 0, "%s", msg);
}

int srv_stream_begin(srv_conn *rc, const char *ctype) {
    if (rc->headers_sent) return -1;
    if (head(rc, 200, ctype) < 0) return -1;
    return mg_printf(rc->c, "Transfer-Encoding: chunked\r\nX-Accel-Buffering: no\r\n\r\n") > 0 ? 0 : -1;
}

int srv_stream_write(srv_conn *rc, const char *data, size_t len) {
    if (len == 0) return 0;
    return mg_send_chunk(rc->c, data, (unsigned)len) > 0 ? 0 : -1;
}

int srv_stream_sse_json(srv_conn *rc, json_t *j) {
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!s) return -1;
    size_t n = strlen(s);
    char *buf = malloc(n + 9);
    if (!buf) {
        free(s);
        return -1;
    }
    memcpy(buf, "data: ", 6);
    memcpy(buf + 6, s, n);
    memcpy(buf + 6 + n, "\n\n", 2);
    int r = srv_stream_write(rc, buf, n + 8);
    free(buf);
    free(s);
    return r;
}

int srv_stream_sse_event(srv_conn *rc, const char *event, json_t *j) {
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!s) return -1;
    const size_t n = strlen(s), ne = strlen(event);
    char *buf = malloc(ne + n + 32);
    if (!buf) {
        free(s);
        return -1;
    }
    const int len = snprintf(buf, ne + n + 32, "event: %s\ndata: %s\n\n", event, s);
    const int r = srv_stream_write(rc, buf, (size_t)len);
    free(buf);
    free(s);
    return r;
}

int srv_stream_ndjson(srv_conn *rc, json_t *j) {
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!s) return -1;
    size_t n = strlen(s);
    s[n] = '\n'; /* the NUL becomes the line end (not sent as a C string) */
    int r = srv_stream_write(rc, s, n + 1);
    free(s);
    return r;
}

void srv_stream_end(srv_conn *rc) { mg_send_chunk(rc->c, "", 0); }
