/* chat.c — the public chat-template API (template.h): parsing into a reusable template,
 * building the render context the way transformers does, and converting JSON input. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "template/jinja.h"
#include "template/template.h"
#include "util/util.h"

struct qr_chat_template {
    jx_mem mem;     /* owns tokens and AST */
    jx_node **body; /* [n_body] top-level statements */
    size_t n_body;
};

#define TEMPLATE_PARSE_LIMIT (64u << 20) /* arena cap while parsing */

/* See template.h. Lexes and parses under a setjmp; on failure frees the arena and returns the status. */
qr_status qr_chat_template_parse(const char *src, size_t len, qr_chat_template **out, char *err, size_t err_len) {
    if (!out || (!src && len)) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "template: invalid arguments");
    *out = NULL;
    qr_chat_template *t = calloc(1, sizeof *t);
    jx_err *e = calloc(1, sizeof *e);
    if (!t || !e) {
        free(t);
        free(e);
        return qr_errf(err, err_len, QR_ERR_NOMEM, "template: out of memory");
    }
    e->msg = err;
    e->msg_len = err_len;
    t->mem.err = e;
    t->mem.limit = TEMPLATE_PARSE_LIMIT;
    if (setjmp(e->jb)) {
        qr_status st = e->status;
        jx_mem_free(&t->mem);
        free(t);
        free(e);
        return st;
    }
    jx_token *toks;
    size_t n;
    jx_lex(&t->mem, src ? src : "", len, &toks, &n);
    jx_parse(&t->mem, toks, n, &t->body, &t->n_body);
    t->mem.err = NULL; /* the arena is not grown after parsing */
    free(e);
    *out = t;
    return QR_OK;
}

/* See template.h. Safe on NULL. */
void qr_chat_template_free(qr_chat_template *t) {
    if (!t) return;
    jx_mem_free(&t->mem);
    free(t);
}

/* ---- JSON -> values ----------------------------------------------------------------------------- */

/* Deep-converts a jansson value into arena values (objects keep insertion order). */
static jx_val from_json(jx_rt *rt, const json_t *j, int depth) {
    if (depth > 500) jx_fail(&rt->err, QR_ERR_INVALID_ARG, 0, "input JSON nested too deeply");
    switch (json_typeof(j)) {
    case JSON_NULL: return jx_none();
    case JSON_TRUE: return jx_bool(true);
    case JSON_FALSE: return jx_bool(false);
    case JSON_INTEGER: return jx_int((int64_t)json_integer_value(j));
    case JSON_REAL: return jx_float(json_real_value(j));
    case JSON_STRING: {
        jx_val s = jx_str_new(&rt->mem, json_string_value(j), json_string_length(j));
        return s;
    }
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        jx_val l = jx_list_new(&rt->mem, n, false);
        for (size_t i = 0; i < n; i++) l.l->items[i] = from_json(rt, json_array_get(j, i), depth + 1);
        return l;
    }
    case JSON_OBJECT: {
        jx_val d = jx_dict_new(&rt->mem, json_object_size(j));
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)j, key, val) {
            jx_dict_set(&rt->mem, d.d, jx_cstr(&rt->mem, key), from_json(rt, val, depth + 1));
        }
        return d;
    }
    }
    return jx_none();
}

/* ---- context ------------------------------------------------------------------------------------ */

/* Sets or replaces a render-context variable in rt->globals. */
static void ctx_set(jx_rt *rt, const char *name, jx_val v) {
    jx_scope *s = rt->globals;
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->names[i], name)) {
            s->vals[i] = v;
            return;
        }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        const char **names = jx_alloc(&rt->mem, cap * sizeof *names);
        jx_val *vals = jx_alloc(&rt->mem, cap * sizeof *vals);
        if (s->n) {
            memcpy(names, s->names, s->n * sizeof *names);
            memcpy(vals, s->vals, s->n * sizeof *vals);
        }
        s->names = names;
        s->vals = vals;
        s->cap = cap;
    }
    s->names[s->n] = jx_strndup(&rt->mem, name, strlen(name));
    s->vals[s->n++] = v;
}

/* Parses "YYYY-MM-DD[( |T)HH:MM[:SS]]" into *tm (fields normalized through timegm). */
static bool parse_now(const char *s, struct tm *tm) {
    int y, mo, d, h = 0, mi = 0, sec = 0;
    char sep = 0;
    int k = sscanf(s, "%4d-%2d-%2d%c%2d:%2d:%2d", &y, &mo, &d, &sep, &h, &mi, &sec);
    if (k != 3 && k < 6) return false;
    if (k >= 4 && sep != ' ' && sep != 'T') return false;
    if (mo < 1 || mo > 12 || d < 1 || d > 31 || h < 0 || h > 23 || mi < 0 || mi > 59 || sec < 0 || sec > 60) return false;
    struct tm t = {0};
    t.tm_year = y - 1900;
    t.tm_mon = mo - 1;
    t.tm_mday = d;
    t.tm_hour = h;
    t.tm_min = mi;
    t.tm_sec = sec;
    time_t tt = timegm(&t);
    if (!gmtime_r(&tt, tm)) return false;
    return true;
}

/* Builds the context and renders; runs under the caller's setjmp. */
static void render_body(jx_rt *rt, const qr_chat_template *t, const json_t *messages, const qr_chat_options *opt,
                        char **out, size_t *out_len) {
    rt->globals = jx_alloc(&rt->mem, sizeof(jx_scope));
    ctx_set(rt, "messages", messages ? from_json(rt, messages, 0) : jx_list_new(&rt->mem, 0, false));
    ctx_set(rt, "tools", opt->tools ? from_json(rt, opt->tools, 0) : jx_none());
    ctx_set(rt, "documents", opt->documents ? from_json(rt, opt->documents, 0) : jx_none());
    ctx_set(rt, "add_generation_prompt", jx_bool(opt->add_generation_prompt));
    if (opt->bos_token) ctx_set(rt, "bos_token", jx_cstr(&rt->mem, opt->bos_token));
    if (opt->eos_token) ctx_set(rt, "eos_token", jx_cstr(&rt->mem, opt->eos_token));
    if (opt->extra) {
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)opt->extra, key, val) {
            if (!strcmp(key, "messages") || !strcmp(key, "tools") || !strcmp(key, "documents") ||
                !strcmp(key, "add_generation_prompt"))
                jx_fail(&rt->err, QR_ERR_INVALID_ARG, 0, "extra context may not set '%s'", key);
            ctx_set(rt, key, from_json(rt, val, 0));
        }
    }
    jx_buf buf;
    jx_buf_init(&buf, &rt->mem, rt->max_output);
    rt->out = &buf;
    jx_exec_body(rt, t->body, t->n_body);
    char *res = malloc(buf.len + 1);
    if (!res) jx_fail(&rt->err, QR_ERR_NOMEM, 0, "out of memory");
    if (buf.len) memcpy(res, buf.data, buf.len);
    res[buf.len] = 0;
    *out = res;
    if (out_len) *out_len = buf.len;
}

/* setjmp boundary of a render: errors inside render_body longjmp back here. */
static qr_status render_protected(jx_rt *rt, const qr_chat_template *t, const json_t *messages,
                                  const qr_chat_options *o, char **out, size_t *out_len) {
    if (setjmp(rt->err.jb)) {
        free(*out);
        *out = NULL;
        if (out_len) *out_len = 0;
        return rt->err.status;
    }
    render_body(rt, t, messages, o, out, out_len);
    return QR_OK;
}

/* See template.h. Validates options, sets limits, then renders under render_protected. */
qr_status qr_chat_template_render(const qr_chat_template *t, const json_t *messages, const qr_chat_options *opt,
                                  char **out, size_t *out_len, char *err, size_t err_len) {
    if (!t || !out) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "template: invalid arguments");
    *out = NULL;
    if (out_len) *out_len = 0;
    static const qr_chat_options defaults = {0};
    const qr_chat_options *const o = opt ? opt : &defaults;
    struct tm now;
    if (o->now) {
        if (!parse_now(o->now, &now))
            return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "template: bad date '%s' (want YYYY-MM-DD[ HH:MM:SS])",
                           o->now);
    } else {
        time_t tt = time(NULL);
        localtime_r(&tt, &now);
    }
    if (o->extra && !json_is_object(o->extra))
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "template: extra context must be a JSON object");
    jx_rt *const rt = calloc(1, sizeof *rt);
    if (!rt) return qr_errf(err, err_len, QR_ERR_NOMEM, "template: out of memory");
    rt->err.msg = err;
    rt->err.msg_len = err_len;
    rt->mem.err = &rt->err;
    rt->mem.limit = o->max_memory ? o->max_memory : QR_CHAT_DEFAULT_MAX_MEMORY;
    rt->max_output = o->max_output ? o->max_output : QR_CHAT_DEFAULT_MAX_OUTPUT;
    rt->max_steps = o->max_steps ? o->max_steps : QR_CHAT_DEFAULT_MAX_STEPS;
    rt->max_depth = o->max_depth ? o->max_depth : QR_CHAT_DEFAULT_MAX_DEPTH;
    rt->now = now;
    qr_status st = render_protected(rt, t, messages, o, out, out_len);
    jx_mem_free(&rt->mem);
    free(rt);
    return st;
}

/* See template.h. */
qr_status qr_chat_render_json(const char *src, size_t len, const json_t *messages, const qr_chat_options *opt,
                              char **out, size_t *out_len, char *err, size_t err_len) {
    qr_chat_template *t;
    qr_status st = qr_chat_template_parse(src, len, &t, err, err_len);
    if (st != QR_OK) return st;
    st = qr_chat_template_render(t, messages, opt, out, out_len, err, err_len);
    qr_chat_template_free(t);
    return st;
}

/* See template.h. Builds a JSON message array from the structs, then renders it. */
qr_status qr_chat_render(const char *src, size_t len, const qr_chat_message *msgs, size_t n,
                         const qr_chat_options *opt, char **out, size_t *out_len, char *err, size_t err_len) {
    if (out) *out = NULL;
    if (!msgs && n) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "template: invalid arguments");
    qr_status st = QR_OK;
    json_t *arr = json_array();
    if (!arr) return qr_errf(err, err_len, QR_ERR_NOMEM, "template: out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *m;
        if (msgs[i].extra_json) {
            json_error_t je;
            m = json_loads(msgs[i].extra_json, JSON_ALLOW_NUL, &je);
            if (!m || !json_is_object(m)) {
                st = qr_errf(err, err_len, QR_ERR_INVALID_ARG, "template: message %zu: extra_json is not a JSON object%s%s",
                             i, m ? "" : ": ", m ? "" : je.text);
                json_decref(m);
                break;
            }
        } else {
            m = json_object();
        }
        bool ok = m && json_object_set_new(m, "role", json_string(msgs[i].role ? msgs[i].role : "")) == 0;
        if (ok && msgs[i].content) ok = json_object_set_new(m, "content", json_string(msgs[i].content)) == 0;
        else if (ok && !json_object_get(m, "content")) ok = json_object_set_new(m, "content", json_null()) == 0;
        if (!ok || json_array_append_new(arr, m) != 0) {
            if (!ok) json_decref(m);
            st = qr_errf(err, err_len, QR_ERR_INVALID_ARG, "template: message %zu: role/content must be valid UTF-8", i);
            break;
        }
    }
    if (st == QR_OK) st = qr_chat_render_json(src, len, arr, opt, out, out_len, err, err_len);
    json_decref(arr);
    return st;
}
