/* chat_parse.c — splits a chat reply into reasoning, content and tool calls (see chat_parse.h).
 *
 * One scan function reads the text so far from its start and produces the content, reasoning and
 * calls that are certain (end = false holds back what may still change). The streaming parser runs
 * the scan over everything fed so far and releases the part of its result that is new: the scan is
 * deterministic and held-back text only grows, so released text is never taken back. Replies are
 * small next to the model's work per token, so rescanning costs nothing that shows. */
#include "sampling/chat_parse.h"

#include <stdlib.h>
#include <string.h>

#include "util/util.h"

/* ---- small buffers ----------------------------------------------------------------------------- */

typedef struct sbuf {
    char *p;
    size_t len, cap;
    bool oom;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n) {
    if (b->oom || (n == 0 && b->p)) return;
    if (b->len + n + 1 > b->cap) {
        size_t nc = (b->cap ? b->cap * 2 : 64) + n;
        char *np = realloc(b->p, nc);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

typedef struct call_list {
    qr_tool_call *v;
    int32_t n, cap;
    bool oom;
} call_list;

static void call_free(qr_tool_call *c) {
    free(c->name);
    free(c->arguments);
    free(c->id);
    memset(c, 0, sizeof *c);
}

static void calls_truncate(call_list *l, int32_t n) {
    while (l->n > n) call_free(&l->v[--l->n]);
}

/* The scan's result. */
typedef struct scan_out {
    sbuf content, reasoning;
    call_list calls;
} scan_out;

static void scan_out_free(scan_out *o) {
    free(o->content.p);
    free(o->reasoning.p);
    calls_truncate(&o->calls, 0);
    free(o->calls.v);
    memset(o, 0, sizeof *o);
}

static bool starts_with(const char *s, size_t n, const char *pre) {
    const size_t k = strlen(pre);
    return n >= k && !memcmp(s, pre, k);
}

/* First occurrence of needle in s[0..n), or NULL. */
static const char *find(const char *s, size_t n, const char *needle) {
    const size_t k = strlen(needle);
    if (k == 0 || n < k) return NULL;
    for (const char *p = s; (p = memchr(p, needle[0], n - (size_t)(p - s) - k + 1)); p++)
        if (!memcmp(p, needle, k)) return p;
    return NULL;
}

/* Length of the longest tail of s[0..n) that is a proper prefix of one of markers[0..nm): the text
 * that may still become a marker. */
static size_t hold_len(const char *s, size_t n, const char *const *markers, int nm) {
    size_t best = 0;
    for (int i = 0; i < nm; i++) {
        const size_t k = strlen(markers[i]);
        for (size_t t = k - 1; t > best; t--)
            if (t <= n && !memcmp(s + n - t, markers[i], t)) {
                best = t;
                break;
            }
    }
    return best;
}

static bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

static size_t skip_ws(const char *s, size_t pos, size_t n) {
    while (pos < n && is_ws(s[pos])) pos++;
    return pos;
}

/* End (one past) of the JSON object or array starting at s[pos], or 0 when it is not complete yet
 * (or s[pos] opens neither). Counts brackets outside strings. */
static size_t json_value_end(const char *s, size_t pos, size_t n) {
    if (pos >= n || (s[pos] != '{' && s[pos] != '[')) return 0;
    int depth = 0;
    bool in_str = false;
    for (size_t i = pos; i < n; i++) {
        const char c = s[i];
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') in_str = false;
        } else if (c == '"') {
            in_str = true;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            if (--depth == 0) return i + 1;
        }
    }
    return 0;
}

/* ---- call objects -------------------------------------------------------------------------------- */

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

/* Appends the call of JSON object o: {"name", "arguments"|"parameters"} or {"function": {...}}.
 * name_override (non-NULL) names the call whose o is only the arguments. Returns false when o is not a
 * call. */
static bool add_call(call_list *l, json_t *o, const char *name_override, size_t name_len) {
    json_t *args = o;
    const char *name = name_override;
    const char *id = NULL;
    if (!name) {
        if (!json_is_object(o)) return false;
        id = json_string_value(json_object_get(o, "id"));
        json_t *fn = json_object_get(o, "function");
        if (json_is_object(fn)) o = fn;
        json_t *jn = json_object_get(o, "name");
        if (!json_is_string(jn) || json_string_length(jn) == 0) return false;
        name = json_string_value(jn);
        name_len = json_string_length(jn);
        args = json_object_get(o, "arguments");
        if (!args) args = json_object_get(o, "parameters");
    }
    json_t *parsed = NULL;
    if (json_is_string(args)) { /* arguments as a JSON string of an object */
        parsed = json_loadb(json_string_value(args), json_string_length(args), 0, NULL);
        args = parsed;
    }
    if (args && !json_is_object(args)) {
        json_decref(parsed);
        return false;
    }
    char *text = args ? json_dumps(args, JSON_COMPACT) : dup_n("{}", 2);
    json_decref(parsed);
    if (l->n == l->cap) {
        int32_t nc = l->cap ? l->cap * 2 : 4;
        qr_tool_call *nv = realloc(l->v, sizeof *nv * (size_t)nc);
        if (!nv) {
            free(text);
            l->oom = true;
            return true;
        }
        l->v = nv;
        l->cap = nc;
    }
    qr_tool_call *c = &l->v[l->n];
    c->name = dup_n(name, name_len);
    c->arguments = text;
    c->id = id ? dup_n(id, strlen(id)) : NULL;
    if (!c->name || !c->arguments || (id && !c->id)) {
        call_free(c);
        l->oom = true;
        return true;
    }
    l->n++;
    return true;
}

/* Appends the calls of JSON text s[0..n): a call object, an array of them, or {"tool_calls": [...]}.
 * All or nothing: returns false (adding nothing) when any part is not a call. */
static bool add_calls_text(call_list *l, const char *s, size_t n) {
    json_t *v = json_loadb(s, n, 0, NULL);
    if (!v) return false;
    const int32_t n0 = l->n;
    bool ok = true;
    json_t *arr = json_is_object(v) ? json_object_get(v, "tool_calls") : NULL;
    if (json_is_array(arr) && json_object_size(v) == 1) {
        if (json_array_size(arr) == 0) ok = false;
        size_t i;
        json_t *e;
        json_array_foreach(arr, i, e) if (ok && !add_call(l, e, NULL, 0)) ok = false;
    } else if (json_is_array(v)) {
        if (json_array_size(v) == 0) ok = false;
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) if (ok && !add_call(l, e, NULL, 0)) ok = false;
    } else {
        ok = add_call(l, v, NULL, 0);
    }
    json_decref(v);
    if (!ok) calls_truncate(l, n0);
    return ok;
}

/* ---- formats ---------------------------------------------------------------------------------- */

qr_tool_format qr_tool_format_detect(const char *src) {
    if (!src) return QR_TOOL_FORMAT_GENERIC;
    const size_t n = strlen(src);
    if (find(src, n, "<|channel|>")) return QR_TOOL_FORMAT_HARMONY;
    if (find(src, n, "[TOOL_CALLS]")) return QR_TOOL_FORMAT_MISTRAL;
    if (find(src, n, "<|tool_call|>")) return QR_TOOL_FORMAT_GRANITE;
    if (find(src, n, "<tool_call>")) return QR_TOOL_FORMAT_HERMES;
    if (find(src, n, "<|python_tag|>") || (find(src, n, "<|start_header_id|>") && find(src, n, "ipython")))
        return QR_TOOL_FORMAT_LLAMA3;
    return QR_TOOL_FORMAT_GENERIC;
}

const char *qr_tool_format_name(qr_tool_format f) {
    switch (f) {
    case QR_TOOL_FORMAT_HERMES: return "hermes";
    case QR_TOOL_FORMAT_LLAMA3: return "llama3";
    case QR_TOOL_FORMAT_MISTRAL: return "mistral";
    case QR_TOOL_FORMAT_HARMONY: return "harmony";
    case QR_TOOL_FORMAT_GRANITE: return "granite";
    default: return "generic";
    }
}

bool qr_tool_format_needs_special(qr_tool_format f) {
    return f == QR_TOOL_FORMAT_LLAMA3 || f == QR_TOOL_FORMAT_MISTRAL || f == QR_TOOL_FORMAT_HARMONY ||
           f == QR_TOOL_FORMAT_GRANITE;
}

bool qr_template_knows_tools(const char *src) { return src && find(src, strlen(src), "tools"); }

void qr_chat_parse_params_default(qr_chat_parse_params *p) {
    memset(p, 0, sizeof *p);
    p->format = QR_TOOL_FORMAT_GENERIC;
    p->think = true;
}

/* ---- the scan ----------------------------------------------------------------------------------- */

typedef struct scan {
    const qr_chat_parse_params *p;
    const char *s;
    size_t n;
    bool end;
    scan_out *o;
} scan;

/* Adds s[a..b) to the content, less a held-back tail that may start one of markers. */
static void content_upto(scan *sc, size_t a, size_t b, const char *const *markers, int nm) {
    if (b <= a) return;
    if (!sc->end && b == sc->n) b -= hold_len(sc->s + a, b - a, markers, nm);
    sb_add(&sc->o->content, sc->s + a, b - a);
}

/* HARMONY from pos: messages framed by <|start|>ROLE, <|channel|>HEADER<|message|>BODY<|end|>. */
static void scan_harmony(scan *sc, size_t pos) {
    static const char *const frame[] = {"<|start|>", "<|channel|>", "<|end|>", "<|return|>", "<|call|>"};
    static const char *const term[] = {"<|end|>", "<|call|>", "<|return|>"};
    const char *s = sc->s;
    const size_t n = sc->n;
    const char *recipient = NULL; /* " to=..." of the role part */
    size_t recipient_len = 0;
    while (pos < n) {
        if (starts_with(s + pos, n - pos, "<|start|>")) {
            const char *h = find(s + pos, n - pos, "<|channel|>");
            const char *m = find(s + pos, n - pos, "<|message|>");
            if (!h || (m && m < h)) h = m;
            if (!h) return; /* the role part is not complete (or never will be: nothing to show) */
            const char *to = find(s + pos, (size_t)(h - (s + pos)), " to=");
            recipient = to ? to + 4 : NULL;
            recipient_len = to ? (size_t)(h - recipient) : 0;
            pos = (size_t)(h - s);
            continue;
        }
        if (starts_with(s + pos, n - pos, "<|message|>") || starts_with(s + pos, n - pos, "<|channel|>")) {
            const char *m = find(s + pos, n - pos, "<|message|>");
            if (!m) return;
            const char *hdr = s + pos, *hdr_end = m;
            if (starts_with(hdr, n - pos, "<|channel|>")) hdr += 11;
            else hdr = hdr_end;
            size_t chan_len = 0;
            while (hdr + chan_len < hdr_end && !is_ws(hdr[chan_len]) && hdr[chan_len] != '<') chan_len++;
            const char *to = find(hdr, (size_t)(hdr_end - hdr), " to=");
            const char *rcp = recipient;
            size_t rcp_len = recipient_len;
            if (to) {
                rcp = to + 4;
                rcp_len = (size_t)(hdr_end - rcp);
            }
            while (rcp && rcp_len && (is_ws(rcp[rcp_len - 1]))) rcp_len--;
            if (rcp) { /* the recipient ends at a space or a marker (" <|constrain|>json") */
                size_t k = 0;
                while (k < rcp_len && !is_ws(rcp[k]) && rcp[k] != '<') k++;
                rcp_len = k;
            }
            const size_t bs = (size_t)(m - s) + 11;
            const char *t = NULL;
            size_t tl = 0;
            for (int i = 0; i < 3; i++) {
                const char *x = find(s + bs, n - bs, term[i]);
                if (x && (!t || x < t)) t = x, tl = strlen(term[i]);
            }
            const size_t be = t ? (size_t)(t - s) : n;
            const bool done = t || sc->end;
            if (rcp && rcp_len > 10 && starts_with(rcp, rcp_len, "functions.")) {
                if (!done) return;
                const size_t a = skip_ws(s, bs, be);
                json_t *args = json_loadb(s + a, be - a, 0, NULL);
                bool ok = args && add_call(&sc->o->calls, args, rcp + 10, rcp_len - 10);
                json_decref(args);
                if (!ok) sb_add(&sc->o->content, s + pos, (t ? be + tl : n) - pos);
            } else {
                sbuf *dst = chan_len == 8 && !memcmp(hdr, "analysis", 8) ? &sc->o->reasoning : &sc->o->content;
                size_t stop = be;
                if (!done) stop -= hold_len(s + bs, be - bs, term, 3);
                if (stop > bs) sb_add(dst, s + bs, stop - bs);
                if (!done) return;
            }
            recipient = NULL;
            pos = t ? be + tl : n;
            continue;
        }
        /* text outside any frame: content up to the next frame marker (stray terminators dropped) */
        bool skipped = false;
        for (int i = 2; i < 5; i++)
            if (starts_with(s + pos, n - pos, frame[i])) {
                pos += strlen(frame[i]);
                skipped = true;
                break;
            }
        if (skipped) continue;
        size_t next = n;
        for (int i = 0; i < 5; i++) {
            const char *x = find(s + pos + 1, n - pos - 1, frame[i]);
            if (x && (size_t)(x - s) < next) next = (size_t)(x - s);
        }
        const char *const m2[] = {"<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>"};
        content_upto(sc, pos, next, m2, 6);
        if (next == n) return;
        pos = next;
    }
}

/* The marker that opens calls in format f (NULL: none, the reply itself is JSON). */
static const char *call_marker(qr_tool_format f) {
    switch (f) {
    case QR_TOOL_FORMAT_HERMES: return "<tool_call>";
    case QR_TOOL_FORMAT_MISTRAL: return "[TOOL_CALLS]";
    case QR_TOOL_FORMAT_GRANITE: return "<|tool_call|>";
    case QR_TOOL_FORMAT_LLAMA3: return "<|python_tag|>";
    default: return NULL;
    }
}

/* GENERIC and LLAMA3: a reply that starts (after blanks) with a JSON value or a ```json fence may be
 * calls. Returns the position after what it took (pos when it took nothing), or (size_t)-1 when the
 * scan must wait for more text. */
static size_t scan_json_reply(scan *sc, size_t pos) {
    const char *s = sc->s;
    const size_t n = sc->n;
    size_t k = skip_ws(s, pos, n);
    if (k == n) return sc->end ? n : (size_t)-1;
    if (!sc->end && (n - k < 7 && !memcmp(s + k, "```json", n - k))) return (size_t)-1;
    bool fenced = false;
    size_t v = k;
    if (starts_with(s + k, n - k, "```")) {
        fenced = true;
        v = k + 3;
        if (starts_with(s + v, n - v, "json")) v += 4;
        v = skip_ws(s, v, n);
        if (v == n) return sc->end ? pos : (size_t)-1;
    }
    if (s[v] != '{' && s[v] != '[') return pos;
    const size_t e = json_value_end(s, v, n);
    if (!e) return sc->end ? pos : (size_t)-1;
    size_t after = e;
    if (fenced) {
        size_t f = skip_ws(s, e, n);
        if (!sc->end && n - f < 3 && !memcmp(s + f, "```", n - f)) return (size_t)-1;
        if (!starts_with(s + f, n - f, "```")) return pos;
        after = f + 3;
    }
    if (!add_calls_text(&sc->o->calls, s + v, e - v)) return pos;
    return skip_ws(s, after, n);
}

/* Tool calls of the marker formats from pos; the text around them is content. */
static void scan_calls(scan *sc, size_t pos) {
    const qr_tool_format f = sc->p->format;
    const char *s = sc->s;
    const size_t n = sc->n;
    if (f == QR_TOOL_FORMAT_GENERIC || f == QR_TOOL_FORMAT_LLAMA3) {
        const size_t r = scan_json_reply(sc, pos);
        if (r == (size_t)-1) return;
        pos = r;
    }
    const char *marker = call_marker(f);
    if (!marker) {
        sb_add(&sc->o->content, s + pos, n - pos);
        return;
    }
    const size_t ml = strlen(marker);
    while (pos < n) {
        const char *m = find(s + pos, n - pos, marker);
        if (!m) {
            content_upto(sc, pos, n, &marker, 1);
            return;
        }
        const size_t mp = (size_t)(m - s);
        sb_add(&sc->o->content, s + pos, mp - pos);
        size_t b = skip_ws(s, mp + ml, n), body_end, after;
        const char *name = NULL;
        size_t name_len = 0;
        if (f == QR_TOOL_FORMAT_HERMES) {
            const char *c = find(s + b, n - b, "</tool_call>");
            if (!c && !sc->end) return;
            body_end = c ? (size_t)(c - s) : n;
            after = c ? body_end + 12 : n;
        } else {
            if (f == QR_TOOL_FORMAT_MISTRAL && b < n && s[b] != '[' && s[b] != '{') { /* NAME[ARGS]{...} */
                const char *a = find(s + b, n - b, "[ARGS]");
                if (!a) {
                    if (!sc->end) return;
                    sb_add(&sc->o->content, s + mp, n - mp);
                    return;
                }
                name = s + b;
                name_len = (size_t)(a - name);
                b = skip_ws(s, (size_t)(a - s) + 6, n);
            }
            if (b == n && !sc->end) return;
            const size_t e = json_value_end(s, b, n);
            if (!e && !sc->end) return;
            body_end = e ? e : n;
            after = body_end;
        }
        while (body_end > b && is_ws(s[body_end - 1])) body_end--;
        bool ok;
        if (name) {
            json_t *args = json_loadb(s + b, body_end - b, 0, NULL);
            ok = args && add_call(&sc->o->calls, args, name, name_len);
            json_decref(args);
        } else {
            ok = add_calls_text(&sc->o->calls, s + b, body_end - b);
        }
        if (!ok) sb_add(&sc->o->content, s + mp, after - mp);
        pos = ok ? skip_ws(s, after, n) : after;
    }
}

/* The whole scan of s[0..n) into o. */
static void run_scan(const qr_chat_parse_params *p, const char *s, size_t n, bool end, scan_out *o) {
    scan sc = {.p = p, .s = s, .n = n, .end = end, .o = o};
    size_t pos = 0;
    if (p->format == QR_TOOL_FORMAT_HARMONY) {
        scan_harmony(&sc, pos);
        return;
    }
    if (p->think) {
        const char *open = p->think_open ? p->think_open : "<think>";
        const char *close = p->think_close ? p->think_close : "</think>";
        bool in = p->think_started;
        if (!in) {
            const size_t k = skip_ws(s, 0, n);
            const size_t ol = strlen(open);
            if (starts_with(s + k, n - k, open)) {
                in = true;
                pos = k + ol;
            } else if (!end && n - k < ol && !memcmp(s + k, open, n - k)) {
                return; /* may still become the opening tag */
            }
        }
        if (in) {
            pos = skip_ws(s, pos, n);
            const char *c = find(s + pos, n - pos, close);
            const size_t ce = c ? (size_t)(c - s) : n;
            size_t stop = ce;
            if (!c && !end) stop -= hold_len(s + pos, n - pos, &close, 1);
            if (stop > pos) sb_add(&o->reasoning, s + pos, stop - pos);
            if (!c) return;
            pos = skip_ws(s, ce + strlen(close), n);
            if (pos == n && !end) return;
        }
    }
    if (p->tools) scan_calls(&sc, pos);
    else sb_add(&o->content, s + pos, n - pos);
}

static bool scan_oom(const scan_out *o) { return o->content.oom || o->reasoning.oom || o->calls.oom; }

/* ---- one-shot and streaming -------------------------------------------------------------------- */

qr_status qr_chat_parse(const qr_chat_parse_params *p, const char *text, size_t len, qr_chat_result *out,
                        char *err, size_t err_len) {
    memset(out, 0, sizeof *out);
    scan_out o = {0};
    run_scan(p, text ? text : "", text ? len : 0, true, &o);
    sb_add(&o.content, "", 0);
    sb_add(&o.reasoning, "", 0);
    if (scan_oom(&o)) {
        scan_out_free(&o);
        return qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory");
    }
    out->content = o.content.p;
    out->content_len = o.content.len;
    out->reasoning = o.reasoning.p;
    out->reasoning_len = o.reasoning.len;
    out->calls = o.calls.v;
    out->n_calls = o.calls.n;
    return QR_OK;
}

void qr_chat_result_free(qr_chat_result *r) {
    if (!r) return;
    free(r->content);
    free(r->reasoning);
    for (int32_t i = 0; i < r->n_calls; i++) call_free(&r->calls[i]);
    free(r->calls);
    memset(r, 0, sizeof *r);
}

struct qr_chat_parser {
    qr_chat_parse_params p;
    char *open, *close; /* owned copies of the tags */
    sbuf text;          /* everything fed */
    scan_out cur;       /* the last scan (the delta points into it) */
    size_t sent_content, sent_reasoning;
    int32_t sent_calls;
    bool ended;
};

qr_status qr_chat_parser_create(const qr_chat_parse_params *p, qr_chat_parser **out, char *err, size_t err_len) {
    *out = NULL;
    qr_chat_parser *ps = calloc(1, sizeof *ps);
    if (!ps) return qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory");
    ps->p = *p;
    ps->open = dup_n(p->think_open ? p->think_open : "<think>", strlen(p->think_open ? p->think_open : "<think>"));
    ps->close = dup_n(p->think_close ? p->think_close : "</think>", strlen(p->think_close ? p->think_close : "</think>"));
    if (!ps->open || !ps->close) {
        qr_chat_parser_free(ps);
        return qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory");
    }
    ps->p.think_open = ps->open;
    ps->p.think_close = ps->close;
    *out = ps;
    return QR_OK;
}

void qr_chat_parser_free(qr_chat_parser *ps) {
    if (!ps) return;
    free(ps->open);
    free(ps->close);
    free(ps->text.p);
    scan_out_free(&ps->cur);
    free(ps);
}

int32_t qr_chat_parser_n_calls(const qr_chat_parser *ps) { return ps->sent_calls; }

qr_status qr_chat_parser_feed(qr_chat_parser *ps, const char *text, size_t len, bool end, qr_chat_delta *out,
                              char *err, size_t err_len) {
    memset(out, 0, sizeof *out);
    out->content = out->reasoning = "";
    out->first_call = ps->sent_calls;
    if (ps->ended) return QR_OK;
    sb_add(&ps->text, text ? text : "", text ? len : 0);
    if (ps->text.oom) return qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory");
    scan_out o = {0};
    run_scan(&ps->p, ps->text.p, ps->text.len, end, &o);
    if (scan_oom(&o)) {
        scan_out_free(&o);
        return qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory");
    }
    scan_out_free(&ps->cur);
    ps->cur = o;
    if (o.content.len > ps->sent_content) {
        out->content = o.content.p + ps->sent_content;
        out->content_len = o.content.len - ps->sent_content;
        ps->sent_content = o.content.len;
    }
    if (o.reasoning.len > ps->sent_reasoning) {
        out->reasoning = o.reasoning.p + ps->sent_reasoning;
        out->reasoning_len = o.reasoning.len - ps->sent_reasoning;
        ps->sent_reasoning = o.reasoning.len;
    }
    if (o.calls.n > ps->sent_calls) {
        out->calls = o.calls.v + ps->sent_calls;
        out->n_calls = o.calls.n - ps->sent_calls;
        ps->sent_calls = o.calls.n;
    }
    ps->ended = end;
    return QR_OK;
}
