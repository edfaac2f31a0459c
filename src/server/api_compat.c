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
    return strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") == n;
}

int srv_compat_tool_add(srv_compat_tools *t, const char *name, const char *description, json_t *parameters) {
    if (!t->list && !(t->list = json_array())) return -1;
    size_t i;
    json_t *e;
    json_array_foreach(t->list, i, e) if (!strcmp(json_string_value(json_object_get(e, "name")), name)) return 0;
    json_t *tool = json_pack("{s:s}", "name", name);
    if (!tool) return -1;
    if (description) json_object_set_new(tool, "description", json_string(description));
    json_object_set_new(tool, "parameters", parameters && !json_is_null(parameters) ? json_incref(parameters)
                                                                                      : json_pack("{s:s}", "type", "object"));
    return json_array_append_new(t->list, tool);
}

void srv_compat_tools_free(srv_compat_tools *t) {
    json_decref(t->list);
    memset(t, 0, sizeof *t);
}

static const char CALL_OPEN[] = "<tool_call>", CALL_CLOSE[] = "</tool_call>";

char *srv_compat_call_text(const char *name, const char *arguments) {
    json_t *args = json_loads(arguments, JSON_DECODE_ANY, NULL);
    json_t *call = json_pack("{s:s, s:o}", "name", name, "arguments", args ? args : json_string(arguments));
    char *js = call ? json_dumps(call, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(call);
    if (!js) return NULL;
    const size_t n = strlen(js) + sizeof CALL_OPEN + sizeof CALL_CLOSE + 2;
    char *out = malloc(n);
    if (out) snprintf(out, n, "%s\n%s\n%s", CALL_OPEN, js, CALL_CLOSE);
    free(js);
    return out;
}

/* The system text that describes the tools to the model. malloc'd, NULL on OOM. */
static char *tools_prompt(const srv_compat_tools *t) {
    srv_tbuf b = {0};
    static const char head[] =
        "# Tools\n\nYou may call functions to answer the user. The functions, one JSON signature a line:\n<tools>\n";
    srv_tbuf_add(&b, head, sizeof head - 1);
    size_t i;
    json_t *e;
    json_array_foreach(t->list, i, e) {
        json_t *sig = json_pack("{s:s, s:O}", "type", "function", "function", e);
        char *s = sig ? json_dumps(sig, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
        json_decref(sig);
        if (s) srv_tbuf_add(&b, s, strlen(s)), srv_tbuf_add(&b, "\n", 1);
        free(s);
    }
    static const char tail[] =
        "</tools>\n\nTo call a function, answer with its name and arguments as a JSON object inside "
        "<tool_call></tool_call> tags:\n<tool_call>\n{\"name\": <function name>, \"arguments\": <arguments object>}\n"
        "</tool_call>";
    srv_tbuf_add(&b, tail, sizeof tail - 1);
    if (t->mode == SRV_TOOLS_FORCED) {
        char must[160];
        if (t->forced[0]) snprintf(must, sizeof must, "\nYou must call the function %s now.", t->forced);
        else snprintf(must, sizeof must, "\nYou must call one of the functions now.");
        srv_tbuf_add(&b, must, strlen(must));
    }
    return b.p;
}

/* Puts the tools' description into messages: appended to the first system message, else a new one first. */
static int add_tools_prompt(json_t *messages, const srv_compat_tools *t) {
    char *text = tools_prompt(t);
    if (!text) return -1;
    json_t *first = json_array_get(messages, 0);
    const char *role = json_string_value(json_object_get(first, "role"));
    const char *content = json_string_value(json_object_get(first, "content"));
    int rc;
    if (role && !strcmp(role, "system") && content) {
        const size_t n = strlen(content) + strlen(text) + 3;
        char *joined = malloc(n);
        if (joined) snprintf(joined, n, "%s\n\n%s", content, text);
        rc = joined ? json_object_set_new(first, "content", json_string(joined)) : -1;
        free(joined);
    } else {
        rc = json_array_insert_new(messages, 0, json_pack("{s:s, s:s}", "role", "system", "content", text));
    }
    free(text);
    return rc;
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

/* Whether the grammar compiler takes schema. */
static bool schema_compiles(const json_t *schema) {
    qr_grammar *g = NULL;
    char msg[256];
    const bool ok = qr_json_schema_compile(schema, &g, msg, sizeof msg) == QR_OK;
    qr_grammar_free(g);
    return ok;
}

/* The schema of one call of tool e: {"name": const, "arguments": its parameters}; parameters the grammar
 * compiler does not take (a keyword it does not support) hold the arguments to a JSON object only. */
static json_t *call_schema(json_t *e) {
    json_t *params = json_object_get(e, "parameters"), *object = json_pack("{s:s}", "type", "object");
    json_t *s = json_pack("{s:s, s:{s:{s:O}, s:O}, s:[s, s], s:b}", "type", "object", "properties", "name", "const",
                          json_object_get(e, "name"), "arguments", schema_compiles(params) ? params : object,
                          "required", "name", "arguments", "additionalProperties", 0);
    json_decref(object);
    return s;
}

/* The grammar of a forced call: one tool's call, or any tool's (anyOf). */
static int forced_grammar(const srv_compat_tools *t, const char *field, qr_grammar **out, char *err, size_t err_len) {
    json_t *schema = NULL, *any = json_array();
    size_t i;
    json_t *e;
    json_array_foreach(t->list, i, e) {
        if (t->forced[0] && strcmp(json_string_value(json_object_get(e, "name")), t->forced)) continue;
        json_array_append_new(any, call_schema(e));
    }
    if (json_array_size(any) == 1) schema = json_incref(json_array_get(any, 0));
    else schema = json_pack("{s:O}", "anyOf", any);
    json_decref(any);
    if (!schema) FAIL("out of memory");
    const int rc = srv_compat_schema_grammar(schema, field, out, err, err_len);
    json_decref(schema);
    return rc;
}

int srv_compat_request(json_t *chat_body, const srv_compat_tools *t, const char *tools_field, qr_grammar *g,
                       srv_gen_req *req, char *err, size_t err_len) {
    memset(req, 0, sizeof *req);
    if (t->mode != SRV_TOOLS_OFF && t->list) {
        if (t->mode == SRV_TOOLS_FORCED) { /* the call's grammar replaces a text format */
            qr_grammar_free(g);
            g = NULL;
            if (forced_grammar(t, tools_field, &g, err, err_len) < 0) return -1;
        }
        if (add_tools_prompt(json_object_get(chat_body, "messages"), t) < 0) {
            qr_grammar_free(g);
            FAIL("out of memory");
        }
    }
    if (srv_gen_req_from_json(chat_body, SRV_API_OPENAI_CHAT, req, err, err_len) < 0) {
        qr_grammar_free(g);
        srv_gen_req_free(req);
        return -1;
    }
    qr_grammar_free(req->grammar); /* none: the body has no response_format */
    req->grammar = g;
    return 0;
}

/* ---- <tool_call> splitting ---- */

/* One call from the JSON text s[0..n): {"name", "arguments" (object, or JSON text of one; "parameters"
 * is taken too)}. Returns {name, arguments (compact JSON text)} or NULL when s is not a call. */
static json_t *parse_call(const char *s, size_t n) {
    json_t *j = json_loadb(s, n, 0, NULL);
    json_t *name = json_object_get(j, "name"), *args = json_object_get(j, "arguments");
    if (!args) args = json_object_get(j, "parameters");
    json_t *parsed = json_is_string(args) ? json_loads(json_string_value(args), 0, NULL) : NULL;
    if (parsed) args = parsed;
    json_t *out = NULL;
    if (json_is_string(name) && srv_compat_tool_name_ok(json_string_value(name)) && (!args || json_is_object(args))) {
        char *a = args ? json_dumps(args, JSON_COMPACT | JSON_PRESERVE_ORDER) : strdup("{}");
        if (a) out = json_pack("{s:O, s:s}", "name", name, "arguments", a);
        free(a);
    }
    json_decref(parsed);
    json_decref(j);
    return out;
}

/* Text out of the generation: into r->text, and to the client when streaming. */
static void emit(srv_compat_run *r, srv_job *j, const char *s, size_t n) {
    if (n == 0) return;
    srv_tbuf_add(&r->text, s, n);
    if (r->on_text && !r->gone && r->on_text(r->user, s, n) < 0) {
        r->gone = true; /* the client went away: cancel, its KV blocks free before the next step */
        srv_gen_cancel(&j->g);
    }
}

typedef struct splitter {
    srv_tbuf hold;  /* text not yet emitted: a possible start of CALL_OPEN, or a call's body */
    bool in_call;
} splitter;

/* Ends a call body hold[0..n): a call when it parses, else the text it was. */
static void close_call(srv_compat_run *r, srv_job *j, const char *body, size_t n) {
    json_t *call = parse_call(body, n);
    if (call) {
        json_array_append_new(r->calls, call);
        return;
    }
    emit(r, j, CALL_OPEN, sizeof CALL_OPEN - 1);
    emit(r, j, body, n);
}

static void split_feed(splitter *sp, srv_compat_run *r, srv_job *j, const char *s, size_t n) {
    srv_tbuf_add(&sp->hold, s, n);
    for (;;) {
        const char *h = srv_tbuf_str(&sp->hold);
        size_t used;
        if (!sp->in_call) {
            const char *at = strstr(h, CALL_OPEN);
            if (!at) { /* keep the longest end of hold that could still become CALL_OPEN */
                size_t keep = 0;
                for (size_t k = sizeof CALL_OPEN - 2; k > 0 && !keep; k--)
                    if (sp->hold.len >= k && !memcmp(h + sp->hold.len - k, CALL_OPEN, k)) keep = k;
                emit(r, j, h, sp->hold.len - keep);
                memmove(sp->hold.p, h + sp->hold.len - keep, keep + 1);
                sp->hold.len = keep;
                return;
            }
            emit(r, j, h, (size_t)(at - h));
            used = (size_t)(at - h) + sizeof CALL_OPEN - 1;
            sp->in_call = true;
        } else {
            const char *at = strstr(h, CALL_CLOSE);
            if (!at) return;
            close_call(r, j, h, (size_t)(at - h));
            used = (size_t)(at - h) + sizeof CALL_CLOSE - 1;
            sp->in_call = false;
        }
        memmove(sp->hold.p, sp->hold.p + used, sp->hold.len - used + 1);
        sp->hold.len -= used;
    }
}

static void split_finish(splitter *sp, srv_compat_run *r, srv_job *j) {
    if (sp->in_call) close_call(r, j, srv_tbuf_str(&sp->hold), sp->hold.len); /* no closing tag: EOS came first */
    else emit(r, j, srv_tbuf_str(&sp->hold), sp->hold.len);
    free(sp->hold.p);
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
    splitter sp = {0};
    srv_tbuf forced = {0}, raw = {0}, shown = {0};
    double ttft = -1;
    srv_ev *done = NULL;
    for (srv_ev *e; (e = srv_gen_next(&j->g));) {
        if (e->type == QR_SCHED_EV_DONE) {
            done = e;
            break;
        }
        if (ttft < 0) ttft = qr_time_s() - j->t_arrival;
        char piece[256];
        srv_token_piece(j->m, e->token, piece, sizeof piece);
        srv_tbuf_add(&raw, piece, strlen(piece));
        srv_tbuf_add(&shown, e->text, e->len);
        if (r->tools == SRV_TOOLS_FORCED) srv_tbuf_add(&forced, e->text, e->len);
        else if (r->tools == SRV_TOOLS_AUTO) split_feed(&sp, r, j, e->text, e->len);
        else emit(r, j, e->text, e->len);
        srv_ev_free(e);
    }
    if (done && done->len) {
        srv_tbuf_add(&shown, done->text, done->len);
        if (r->tools == SRV_TOOLS_FORCED) srv_tbuf_add(&forced, done->text, done->len);
        else if (r->tools == SRV_TOOLS_AUTO) split_feed(&sp, r, j, done->text, done->len);
        else emit(r, j, done->text, done->len);
    }
    if (r->tools == SRV_TOOLS_AUTO) split_finish(&sp, r, j);
    if (r->tools == SRV_TOOLS_FORCED) {
        json_t *call = parse_call(srv_tbuf_str(&forced), forced.len);
        if (call) json_array_append_new(r->calls, call);
        else emit(r, j, srv_tbuf_str(&forced), forced.len); /* cut short (max tokens): the text it got to */
        free(forced.p);
    }
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
    r->raw = raw.p;
    free(shown.p);
    srv_account_tokens(rc, r->n_prompt, r->n_gen, ttft);
}

void srv_compat_run_free(srv_compat_run *r) {
    free(r->text.p);
    json_decref(r->calls);
    srv_ev_free(r->done);
    free(r->raw);
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
    char lab[256];
    snprintf(lab, sizeof lab, "endpoint=\"%s\",feature=\"%s\"", rc->endpoint, feature);
    srv_metrics_add(rc->s->metrics, "quarrel_feature_requests_total", lab, 1);
}
