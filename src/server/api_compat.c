/* api_compat.c — the pieces the Responses API and the Anthropic Messages API share (see api_compat.h):
 * field readers, function tools (system prompt, forced-call grammar, <tool_call> splitting) and the
 * generation loop with its per-text callback. */
#include "server/api_compat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "util/util.h"

void srv_tbuf_add(srv_tbuf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        const size_t nc = (b->cap ? b->cap * 2 : 256) + n;
        char *np = realloc(b->p, nc);
        if (!np) return;
        b->p = np;
        b->cap = nc;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

const char *srv_tbuf_str(const srv_tbuf *b) { return b->p ? b->p : ""; }

/* ---- request fields ---- */

#define FAIL(...) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, __VA_ARGS__), -1

int srv_compat_str(json_t *o, const char *key, const char **out, char *err, size_t err_len) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v)) FAIL("'%s' must be a string", key);
    *out = json_string_value(v);
    return 1;
}

int srv_compat_int(json_t *o, const char *key, int64_t lo, int64_t hi, int64_t *out, char *err, size_t err_len) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v)) FAIL("'%s' must be an integer", key);
    const json_int_t x = json_integer_value(v);
    if (x < lo || x > hi) FAIL("'%s' must be in [%lld, %lld]", key, (long long)lo, (long long)hi);
    *out = x;
    return 1;
}

int srv_compat_bool(json_t *o, const char *key, bool *out, char *err, size_t err_len) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) FAIL("'%s' must be a boolean", key);
    *out = json_is_true(v);
    return 1;
}

int srv_compat_parts_text(json_t *c, const char *field, const char *const *types, const char *sep, srv_tbuf *out,
                          char *err, size_t err_len) {
    if (!c || json_is_null(c)) return 0;
    if (json_is_string(c)) {
        srv_tbuf_add(out, json_string_value(c), json_string_length(c));
        return 0;
    }
    if (!json_is_array(c)) FAIL("'%s' must be a string or an array of %s parts", field, types[0]);
    size_t k;
    json_t *part;
    json_array_foreach(c, k, part) {
        const char *type = json_string_value(json_object_get(part, "type"));
        json_t *text = json_object_get(part, "text");
        bool ok = false;
        for (const char *const *t = types; *t && type; t++) ok = ok || !strcmp(type, *t);
        if (!json_is_object(part) || !ok)
            FAIL("'%s[%zu].type' must be %s%s%s (images, files and other parts are not supported)", field, k,
                 types[0], types[1] ? " or " : "", types[1] ? types[1] : "");
        if (!json_is_string(text)) FAIL("'%s[%zu].text' must be a string", field, k);
        if (k) srv_tbuf_add(out, sep, strlen(sep));
        srv_tbuf_add(out, json_string_value(text), json_string_length(text));
    }
    return 0;
}

void srv_compat_copy(json_t *dst, json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    if (v && !json_is_null(v)) json_object_set(dst, key, v);
}

/* ---- tools ---- */

bool srv_compat_tool_name_ok(const char *name) {
    const size_t n = strlen(name);
    if (n == 0 || n > 64) return false;
    return strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") == n;
}

int srv_compat_tool_add(json_t *tools, const char *name, const char *description, json_t *parameters) {
    json_t *fn = json_pack("{s:s}", "name", name);
    if (!fn) return -1;
    if (description) json_object_set_new(fn, "description", json_string(description));
    if (parameters && !json_is_null(parameters)) json_object_set(fn, "parameters", parameters);
    return json_array_append_new(tools, json_pack("{s:s, s:o}", "type", "function", "function", fn));
}

int srv_compat_add_text(json_t *msgs, const char *role, const char *text, size_t first) {
    const size_t n = json_array_size(msgs);
    json_t *last = n > first ? json_array_get(msgs, n - 1) : NULL;
    const char *lr = json_string_value(json_object_get(last, "role"));
    const char *prev = json_string_value(json_object_get(last, "content"));
    if (lr && !strcmp(lr, role) && strcmp(role, "tool") && prev && !json_object_get(last, "tool_calls")) {
        const size_t len = strlen(prev) + strlen(text) + 2;
        char *joined = malloc(len);
        if (!joined) return -1;
        snprintf(joined, len, "%s%s%s", prev, *prev && *text ? "\n" : "", text);
        const int rc = json_object_set_new(last, "content", json_string(joined));
        free(joined);
        return rc;
    }
    return json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", role, "content", text));
}

int srv_compat_add_call(json_t *msgs, const char *id, const char *name, const char *arguments) {
    json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
    const char *lr = json_string_value(json_object_get(last, "role"));
    if (!lr || strcmp(lr, "assistant")) {
        last = json_pack("{s:s, s:s}", "role", "assistant", "content", "");
        if (json_array_append_new(msgs, last) < 0) return -1;
    }
    json_t *calls = json_object_get(last, "tool_calls");
    if (!calls && json_object_set_new(last, "tool_calls", calls = json_array()) < 0) return -1;
    return json_array_append_new(calls, json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "function", "function",
                                                  "name", name, "arguments", arguments));
}

int srv_compat_add_result(json_t *msgs, const char *call_id, const char *content) {
    return json_array_append_new(msgs, json_pack("{s:s, s:s, s:s}", "role", "tool", "tool_call_id", call_id, "content",
                                                 content));
}

void srv_compat_name_results(json_t *msgs) {
    size_t i, k, n;
    json_t *msg, *call, *m;
    json_array_foreach(msgs, i, msg) {
        const char *id = json_string_value(json_object_get(msg, "tool_call_id"));
        if (!id || json_object_get(msg, "name")) continue;
        json_array_foreach(msgs, n, m) json_array_foreach(json_object_get(m, "tool_calls"), k, call) {
            if (!strcmp(json_string_value(json_object_get(call, "id")), id))
                json_object_set(msg, "name", json_object_get(json_object_get(call, "function"), "name"));
        }
    }
}

int srv_compat_schema_grammar(const json_t *schema, const char *field, qr_grammar **out, char *err, size_t err_len) {
    char msg[512];
    if (!schema || json_is_null(schema)) {
        if (qr_json_object_grammar(out, msg, sizeof msg) != QR_OK) FAIL("%s", msg);
        return 0;
    }
    if (!json_is_object(schema) && !json_is_boolean(schema)) FAIL("'%s' must be a JSON schema object", field);
    if (qr_json_schema_compile(schema, out, msg, sizeof msg) != QR_OK) FAIL("'%s': %s", field, msg);
    return 0;
}

int srv_compat_request(json_t *chat_body, qr_grammar *g, srv_gen_req *req, char *err, size_t err_len) {
    if (srv_gen_req_from_json(chat_body, SRV_API_OPENAI_CHAT, req, err, err_len) < 0) {
        qr_grammar_free(g);
        srv_gen_req_free(req);
        return -1;
    }
    if (req->tools && req->tool_choice >= SRV_TOOLS_REQUIRED) { /* srv_chat_prepare makes the call's grammar */
        qr_grammar_free(g);
        g = NULL;
    }
    qr_grammar_free(req->grammar); /* none: the body has no response_format */
    req->grammar = g;
    return 0;
}

/* ---- the generation ---- */

/* What the parser released: into r, and to the client when streaming. */
static void take(srv_compat_run *r, srv_job *j, const qr_chat_delta *d) {
    const struct {
        srv_part part;
        const char *s;
        size_t n;
    } parts[2] = {{SRV_PART_REASONING, d->reasoning, d->reasoning_len}, {SRV_PART_TEXT, d->content, d->content_len}};
    for (int k = 0; k < 2; k++) {
        if (parts[k].n == 0) continue;
        srv_tbuf_add(parts[k].part == SRV_PART_TEXT ? &r->text : &r->reasoning, parts[k].s, parts[k].n);
        if (r->on_delta && !r->gone && r->on_delta(r->user, parts[k].part, parts[k].s, parts[k].n) < 0) {
            r->gone = true; /* the client went away: cancel, its KV blocks free before the next step */
            srv_gen_cancel(&j->g);
        }
    }
    for (int32_t k = 0; k < d->n_calls; k++)
        json_array_append_new(r->calls, json_pack("{s:s, s:s}", "name", d->calls[k].name, "arguments",
                                                  d->calls[k].arguments));
}

/* Feeds text[0..n) through the parser (none: all of it is reply text). */
static void feed(srv_compat_run *r, srv_job *j, qr_chat_parser *cp, const char *text, size_t n, bool end) {
    qr_chat_delta d = {.content = text, .content_len = n, .reasoning = ""};
    char perr[128];
    if (cp && qr_chat_parser_feed(cp, text, n, end, &d, perr, sizeof perr) != QR_OK)
        d = (qr_chat_delta){.content = "", .reasoning = ""};
    take(r, j, &d);
}

/* The stop sequence that ended the reply: the one that follows the reply's text in the raw pieces, else the
 * first one found in them. */
static const char *which_stop(const srv_job *j, const char *raw, size_t text_len) {
    const srv_gen_req *q = &j->req;
    const size_t raw_len = strlen(raw);
    for (int32_t i = 0; i < q->n_stops; i++)
        if (text_len <= raw_len && !strncmp(raw + text_len, q->stops[i], strlen(q->stops[i]))) return q->stops[i];
    const char *best = NULL, *best_at = NULL;
    for (int32_t i = 0; i < q->n_stops; i++) {
        const char *at = strstr(raw, q->stops[i]);
        if (at && (!best_at || at < best_at)) best = q->stops[i], best_at = at;
    }
    return best;
}

void srv_compat_generate(srv_conn *rc, srv_job *j, srv_compat_run *r) {
    r->calls = json_array();
    qr_chat_parser *cp = NULL;
    char perr[128];
    if (j->req.split && qr_chat_parser_create(&j->req.parse, &cp, perr, sizeof perr) != QR_OK) cp = NULL;
    srv_tbuf raw = {0}, shown = {0};
    double ttft = -1;
    srv_ev *done = NULL;
    for (srv_ev *e; (e = srv_gen_next(&j->g));) {
        if (e->type == QR_SCHED_EV_DONE) {
            done = e;
            break;
        }
        if (ttft < 0) ttft = qr_time_s() - j->t_arrival;
        if (j->req.n_stops > 0) {
            char piece[256];
            srv_token_piece(j->m, e->token, piece, sizeof piece);
            srv_tbuf_add(&raw, piece, strlen(piece));
        }
        srv_tbuf_add(&shown, e->text, e->len);
        feed(r, j, cp, e->text, e->len, false);
        srv_ev_free(e);
    }
    if (done) srv_tbuf_add(&shown, done->text, done->len);
    feed(r, j, cp, done ? done->text : "", done ? done->len : 0, true);
    qr_chat_parser_free(cp);
    r->http = 200;
    r->ecode = done ? srv_done_error_code(rc->s, done, &r->http) : "INFERENCE_ERROR";
    if (!done) r->http = 500;
    if (r->ecode) r->emsg = srv_done_error_message(done, r->ecode);
    r->length = done && done->finish == QR_FINISH_LENGTH;
    if (done && !r->ecode && !r->length && j->req.n_stops > 0)
        r->stop_seq = which_stop(j, srv_tbuf_str(&raw), shown.len);
    r->n_prompt = done ? done->timing.n_prompt : 0;
    r->n_gen = done ? done->timing.n_gen : 0;
    r->n_cached = done ? done->timing.n_cached : 0;
    r->done = done;
    free(raw.p);
    free(shown.p);
    srv_account_tokens(rc, r->n_prompt, r->n_gen, ttft);
}

void srv_compat_run_free(srv_compat_run *r) {
    free(r->text.p);
    free(r->reasoning.p);
    json_decref(r->calls);
    srv_ev_free(r->done);
    memset(r, 0, sizeof *r);
}

/* ---- misc ---- */

void srv_compat_id(const char *prefix, char *out, size_t cap) {
    unsigned char rnd[12];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) { /* no entropy: time and a counter */
        static _Atomic unsigned long long counter;
        const unsigned long long c = ++counter, t = (unsigned long long)(qr_time_s() * 1e9);
        memcpy(rnd, &t, 8);
        memcpy(rnd + 8, &c, 4);
    }
    int n = snprintf(out, cap, "%s", prefix);
    for (size_t i = 0; i < sizeof rnd && n > 0 && (size_t)n + 2 < cap; i++)
        n += snprintf(out + n, cap - (size_t)n, "%02x", rnd[i]);
}

void srv_compat_feature(srv_conn *rc, const char *feature) {
    char lab[96];
    snprintf(lab, sizeof lab, "feature=\"%s\"", feature);
    srv_metrics_add(rc->s->metrics, "quarrel_requests_by_feature_total", lab, 1);
}
