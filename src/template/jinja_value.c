/* jinja_value.c — arena, errors, values, UTF-8 helpers and Python's str()/repr()/json.dumps()
 * conversions for the Jinja interpreter. */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "template/jinja.h"

/* ---- errors ------------------------------------------------------------------------------ */

/* See jinja.h. */
void jx_fail(jx_err *e, qr_status status, int line, const char *fmt, ...) {
    e->status = status;
    if (e->msg && e->msg_len > 0) {
        int k = line > 0 ? snprintf(e->msg, e->msg_len, "template line %d: ", line)
                         : snprintf(e->msg, e->msg_len, "template: ");
        if (k < 0) k = 0;
        if ((size_t)k < e->msg_len) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(e->msg + k, e->msg_len - (size_t)k, fmt, ap);
            va_end(ap);
        }
    }
    longjmp(e->jb, 1);
}

/* ---- arena ------------------------------------------------------------------------------- */

struct jx_chunk {
    jx_chunk *next;
    size_t size; /* usable bytes in data */
    size_t used; /* bytes handed out */
    _Alignas(16) unsigned char data[];
};

#define JX_CHUNK_SIZE (256u * 1024u)

/* n bytes from the arena, not zeroed. */
static void *alloc_raw(jx_mem *m, size_t n) {
    n = (n + 15u) & ~(size_t)15u;
    if (n == 0) n = 16;
    jx_chunk *c = m->head;
    if (!c || c->size - c->used < n) {
        size_t size = n > JX_CHUNK_SIZE / 4 ? n : JX_CHUNK_SIZE;
        if (m->limit && (m->total + size > m->limit || size > m->limit))
            jx_fail(m->err, QR_ERR_NOMEM, 0, "memory limit exceeded (%zu MiB)", m->limit >> 20);
        c = malloc(sizeof *c + size);
        if (!c) jx_fail(m->err, QR_ERR_NOMEM, 0, "out of memory");
        c->size = size;
        c->used = 0;
        m->total += size;
        if (size == n && m->head) { /* a big block: keep the current chunk on top for small ones */
            c->next = m->head->next;
            m->head->next = c;
        } else {
            c->next = m->head;
            m->head = c;
        }
    }
    void *p = c->data + c->used;
    c->used += n;
    return p;
}

/* See jinja.h. */
void *jx_alloc(jx_mem *m, size_t n) {
    void *p = alloc_raw(m, n);
    memset(p, 0, n);
    return p;
}

/* Grows the allocation p (old bytes) to n bytes, in place when p is the newest allocation. */
static void *jx_realloc(jx_mem *m, void *p, size_t old, size_t n) {
    jx_chunk *c = m->head;
    size_t old_r = (old + 15u) & ~(size_t)15u, n_r = (n + 15u) & ~(size_t)15u;
    if (p && c && (unsigned char *)p + old_r == c->data + c->used && (unsigned char *)p >= c->data &&
        c->used - old_r + n_r <= c->size) {
        c->used = c->used - old_r + n_r;
        return p;
    }
    void *q = alloc_raw(m, n);
    if (old) memcpy(q, p, old);
    return q;
}

/* See jinja.h. */
void jx_mem_free(jx_mem *m) {
    jx_chunk *c = m->head;
    while (c) {
        jx_chunk *next = c->next;
        free(c);
        c = next;
    }
    m->head = NULL;
    m->total = 0;
}

/* See jinja.h. */
char *jx_strndup(jx_mem *m, const char *s, size_t n) {
    char *p = alloc_raw(m, n + 1);
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* ---- constructors ------------------------------------------------------------------------ */

/* Scalar constructors (no allocation). */
jx_val jx_none(void) { return (jx_val){.t = JX_NONE}; }
jx_val jx_bool(bool b) { return (jx_val){.t = JX_BOOL, .b = b}; }
jx_val jx_int(int64_t i) { return (jx_val){.t = JX_INT, .i = i}; }
jx_val jx_float(double f) { return (jx_val){.t = JX_FLOAT, .f = f}; }
jx_val jx_str_val(jx_str *s) { return (jx_val){.t = JX_STR, .s = s}; }

/* See jinja.h. */
jx_val jx_undefined(jx_mem *m, jx_val name, const char *obj_desc, const char *hint) {
    jx_undef *u = jx_alloc(m, sizeof *u);
    u->name = name;
    u->obj_desc = obj_desc;
    u->hint = hint;
    return (jx_val){.t = JX_UNDEF, .u = u};
}

/* An undefined for a missing variable `name`. */
jx_val jx_undefined_name(jx_mem *m, const char *name) {
    return jx_undefined(m, jx_cstr(m, name), NULL, NULL);
}

/* See jinja.h (the copy is NUL-terminated). */
jx_val jx_str_new(jx_mem *m, const char *s, size_t len) {
    jx_str *p = alloc_raw(m, sizeof *p + len + 1);
    p->len = len;
    p->ncp = -1;
    p->markup = false;
    if (len) memcpy(p->data, s, len);
    p->data[len] = 0;
    return jx_str_val(p);
}

/* A string value copied from a NUL-terminated C string. */
jx_val jx_cstr(jx_mem *m, const char *s) { return jx_str_new(m, s, strlen(s)); }

/* See jinja.h. */
jx_val jx_list_new(jx_mem *m, size_t n, bool tuple) {
    jx_list *l = jx_alloc(m, sizeof *l);
    l->n = n;
    l->tuple = tuple;
    l->items = n ? jx_alloc(m, n * sizeof(jx_val)) : NULL;
    return (jx_val){.t = JX_LIST, .l = l};
}

/* An empty dict with room for cap entries. */
jx_val jx_dict_new(jx_mem *m, size_t cap) {
    jx_dict *d = jx_alloc(m, sizeof *d);
    d->cap = cap;
    if (cap) {
        d->keys = jx_alloc(m, cap * sizeof(jx_val));
        d->vals = jx_alloc(m, cap * sizeof(jx_val));
    }
    return (jx_val){.t = JX_DICT, .d = d};
}

/* See jinja.h. */
bool jx_dict_get(const jx_dict *d, jx_val key, jx_val *out) {
    for (size_t i = 0; i < d->n; i++)
        if (jx_eq(d->keys[i], key)) {
            if (out) *out = d->vals[i];
            return true;
        }
    return false;
}

/* See jinja.h. */
bool jx_dict_get_str(const jx_dict *d, const char *key, size_t len, jx_val *out) {
    for (size_t i = 0; i < d->n; i++) {
        const jx_val *k = &d->keys[i];
        if (k->t == JX_STR && k->s->len == len && memcmp(k->s->data, key, len) == 0) {
            if (out) *out = d->vals[i];
            return true;
        }
    }
    return false;
}

/* See jinja.h. */
void jx_dict_set(jx_mem *m, jx_dict *d, jx_val key, jx_val val) {
    for (size_t i = 0; i < d->n; i++)
        if (jx_eq(d->keys[i], key)) {
            d->vals[i] = val;
            return;
        }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        d->keys = jx_realloc(m, d->keys, d->n * sizeof(jx_val), cap * sizeof(jx_val));
        d->vals = jx_realloc(m, d->vals, d->n * sizeof(jx_val), cap * sizeof(jx_val));
        d->cap = cap;
    }
    d->keys[d->n] = key;
    d->vals[d->n] = val;
    d->n++;
}

/* An empty namespace. */
jx_val jx_ns_new(jx_mem *m) {
    jx_ns *ns = jx_alloc(m, sizeof *ns);
    return (jx_val){.t = JX_NS, .ns = ns};
}

/* Looks up attribute key[0..len) of a namespace. */
bool jx_ns_get(const jx_ns *ns, const char *key, size_t len, jx_val *out) {
    for (size_t i = 0; i < ns->n; i++)
        if (ns->keys[i]->len == len && memcmp(ns->keys[i]->data, key, len) == 0) {
            *out = ns->vals[i];
            return true;
        }
    return false;
}

/* Sets (or replaces) an attribute of a namespace. */
void jx_ns_set(jx_mem *m, jx_ns *ns, jx_str *key, jx_val val) {
    for (size_t i = 0; i < ns->n; i++)
        if (ns->keys[i]->len == key->len && memcmp(ns->keys[i]->data, key->data, key->len) == 0) {
            ns->vals[i] = val;
            return;
        }
    if (ns->n == ns->cap) {
        size_t cap = ns->cap ? ns->cap * 2 : 4;
        ns->keys = jx_realloc(m, ns->keys, ns->n * sizeof(jx_str *), cap * sizeof(jx_str *));
        ns->vals = jx_realloc(m, ns->vals, ns->n * sizeof(jx_val), cap * sizeof(jx_val));
        ns->cap = cap;
    }
    ns->keys[ns->n] = key;
    ns->vals[ns->n] = val;
    ns->n++;
}

/* ---- buffers and vectors ----------------------------------------------------------------- */

/* See jinja.h. */
void jx_buf_init(jx_buf *b, jx_mem *m, size_t max) {
    memset(b, 0, sizeof *b);
    b->m = m;
    b->max = max;
}

/* Makes room for `extra` more bytes plus a NUL, failing past b->max. */
static void buf_reserve(jx_buf *b, size_t extra) {
    if (b->max && (extra > b->max || b->len > b->max - extra))
        jx_fail(b->m->err, QR_ERR_INVALID_ARG, b->line, "output exceeds the limit of %zu bytes", b->max);
    if (b->len + extra + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap * 2 : 64;
    while (cap < b->len + extra + 1) cap *= 2;
    b->data = jx_realloc(b->m, b->data, b->cap, cap);
    b->cap = cap;
}

/* Appends n bytes (kept NUL-terminated). */
void jx_buf_add(jx_buf *b, const char *s, size_t n) {
    if (!n) return;
    buf_reserve(b, n);
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = 0;
}

/* Appends one byte. */
void jx_buf_addc(jx_buf *b, char c) { jx_buf_add(b, &c, 1); }

/* Appends printf-formatted text. */
void jx_buf_addf(jx_buf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if ((size_t)k < sizeof tmp) {
        jx_buf_add(b, tmp, (size_t)k);
        return;
    }
    buf_reserve(b, (size_t)k);
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)k + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)k;
}

/* See jinja.h. */
jx_val jx_buf_finish(jx_buf *b) { return jx_str_new(b->m, b->data ? b->data : "", b->len); }

/* See jinja.h. */
void jx_vec_init(jx_vec *v, jx_mem *m) {
    memset(v, 0, sizeof *v);
    v->m = m;
}

/* Appends x. */
void jx_vec_push(jx_vec *v, jx_val x) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 8;
        v->items = jx_realloc(v->m, v->items, v->n * sizeof(jx_val), cap * sizeof(jx_val));
        v->cap = cap;
    }
    v->items[v->n++] = x;
}

/* The vector's items as a list (or tuple) value; the vector must not be used after. */
jx_val jx_vec_finish(jx_vec *v, bool tuple) {
    jx_list *l = jx_alloc(v->m, sizeof *l);
    l->n = v->n;
    l->tuple = tuple;
    l->items = v->items;
    return (jx_val){.t = JX_LIST, .l = l};
}

/* ---- UTF-8 ------------------------------------------------------------------------------- */

/* See jinja.h: decodes the code point at i (invalid bytes stand alone as their byte value). */
size_t jx_utf8_next(const char *s, size_t len, size_t i, uint32_t *cp) {
    const unsigned char *u = (const unsigned char *)s;
    unsigned c = u[i];
    if (c < 0x80) {
        *cp = c;
        return i + 1;
    }
    int n;
    if (c >= 0xc2 && c < 0xe0) n = 1;
    else if (c >= 0xe0 && c < 0xf0) n = 2;
    else if (c >= 0xf0 && c < 0xf5) n = 3;
    else n = -1;
    if (n < 0 || i + (size_t)n >= len) {
        *cp = c; /* invalid lead byte or truncated sequence: one byte */
        return i + 1;
    }
    uint32_t v = c & (0x3f >> n);
    for (int k = 1; k <= n; k++) {
        unsigned cc = u[i + (size_t)k];
        if ((cc & 0xc0) != 0x80) {
            *cp = c;
            return i + 1;
        }
        v = (v << 6) | (cc & 0x3f);
    }
    if ((n == 2 && (v < 0x800 || (v >= 0xd800 && v < 0xe000))) || (n == 3 && (v < 0x10000 || v > 0x10ffff))) {
        *cp = c;
        return i + 1;
    }
    *cp = v;
    return i + 1 + (size_t)n;
}

/* Encodes cp (<= 0x10FFFF) as UTF-8; returns the byte count. */
size_t jx_utf8_encode(uint32_t cp, char out[4]) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* See jinja.h (cached in s->ncp). */
int64_t jx_str_ncp(jx_str *s) {
    if (s->ncp >= 0) return s->ncp;
    int64_t n = 0;
    size_t i = 0;
    uint32_t cp;
    while (i < s->len) {
        if ((unsigned char)s->data[i] < 0x80) {
            i++;
        } else {
            i = jx_utf8_next(s->data, s->len, i, &cp);
        }
        n++;
    }
    s->ncp = n;
    return n;
}

/* See jinja.h. */
size_t jx_str_cp_offset(jx_str *s, int64_t k) {
    if (jx_str_ncp(s) == (int64_t)s->len) return (size_t)k; /* ASCII */
    size_t i = 0;
    uint32_t cp;
    for (int64_t j = 0; j < k && i < s->len; j++) i = jx_utf8_next(s->data, s->len, i, &cp);
    return i;
}

/* See jinja.h. */
bool jx_is_space(uint32_t cp) {
    if (cp == ' ' || (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x1f)) return true;
    if (cp < 0x85) return false;
    return cp == 0x85 || cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

/* ---- Python semantics -------------------------------------------------------------------- */

/* See jinja.h: Python truthiness; undefined is falsy. */
bool jx_truthy(jx_val v) {
    switch (v.t) {
    case JX_UNDEF:
    case JX_NONE: return false;
    case JX_BOOL: return v.b;
    case JX_INT: return v.i != 0;
    case JX_FLOAT: return v.f != 0.0;
    case JX_STR: return v.s->len != 0;
    case JX_LIST: return v.l->n != 0;
    case JX_DICT: return v.d->n != 0;
    default: return true;
    }
}

/* Whether v is a bool, int or float (Python numbers). */
static bool is_num(jx_val v) { return v.t == JX_BOOL || v.t == JX_INT || v.t == JX_FLOAT; }
/* v as long double (exact for int64). */
static long double num_ld(jx_val v) {
    return v.t == JX_BOOL ? (long double)v.b : v.t == JX_INT ? (long double)v.i : (long double)v.f;
}

/* Python ==, with recursion capped at depth 1000 (deeper counts as unequal). */
static bool eq_depth(jx_val a, jx_val b, int depth) {
    if (depth > 1000) return false;
    if (is_num(a) && is_num(b)) {
        if (a.t != JX_FLOAT && b.t != JX_FLOAT) {
            int64_t x = a.t == JX_BOOL ? a.b : a.i, y = b.t == JX_BOOL ? b.b : b.i;
            return x == y;
        }
        return num_ld(a) == num_ld(b);
    }
    if (a.t != b.t) return false;
    switch (a.t) {
    case JX_UNDEF:
    case JX_NONE: return true;
    case JX_STR: return a.s->len == b.s->len && memcmp(a.s->data, b.s->data, a.s->len) == 0;
    case JX_LIST:
        if (a.l->tuple != b.l->tuple || a.l->n != b.l->n) return false;
        for (size_t i = 0; i < a.l->n; i++)
            if (!eq_depth(a.l->items[i], b.l->items[i], depth + 1)) return false;
        return true;
    case JX_DICT:
        if (a.d->n != b.d->n) return false;
        for (size_t i = 0; i < a.d->n; i++) {
            jx_val other;
            bool found = false;
            for (size_t j = 0; j < b.d->n; j++)
                if (eq_depth(a.d->keys[i], b.d->keys[j], depth + 1)) {
                    other = b.d->vals[j];
                    found = true;
                    break;
                }
            if (!found || !eq_depth(a.d->vals[i], other, depth + 1)) return false;
        }
        return true;
    case JX_NS: return a.ns == b.ns;
    case JX_FUNC: return a.fn->id == b.fn->id && eq_depth(a.fn->self, b.fn->self, depth + 1);
    case JX_MACRO: return a.m == b.m;
    case JX_LOOP: return a.loop == b.loop;
    case JX_SLICE:
        return eq_depth(a.sl->start, b.sl->start, depth + 1) && eq_depth(a.sl->stop, b.sl->stop, depth + 1) &&
               eq_depth(a.sl->step, b.sl->step, depth + 1);
    default: return false;
    }
}

/* See jinja.h. */
bool jx_eq(jx_val a, jx_val b) { return eq_depth(a, b, 0); }

/* See jinja.h. */
const char *jx_type_name(jx_val v) {
    switch (v.t) {
    case JX_UNDEF: return "Undefined";
    case JX_NONE: return "NoneType";
    case JX_BOOL: return "bool";
    case JX_INT: return "int";
    case JX_FLOAT: return "float";
    case JX_STR: return v.s->markup ? "Markup" : "str";
    case JX_LIST: return v.l->tuple ? "tuple" : "list";
    case JX_DICT: return "dict";
    case JX_NS: return "Namespace";
    case JX_FUNC: return "builtin_function_or_method";
    case JX_MACRO: return "Macro";
    case JX_LOOP: return "LoopContext";
    case JX_SLICE: return "slice";
    }
    return "object";
}

/* See jinja.h. */
const char *jx_obj_desc(jx_mem *m, jx_val v) {
    if (v.t == JX_NONE) return "None";
    if (v.t == JX_NS) return "jinja2.utils.Namespace object";
    if (v.t == JX_LOOP) return "jinja2.runtime.LoopContext object";
    if (v.t == JX_MACRO) return "jinja2.runtime.Macro object";
    if (v.t == JX_STR && v.s->markup) return "markupsafe.Markup object";
    const char *t = jx_type_name(v);
    char *s = jx_alloc(m, strlen(t) + 8);
    sprintf(s, "%s object", t);
    return s;
}

/* See jinja.h. */
int64_t jx_len(jx_rt *rt, int line, jx_val v) {
    switch (v.t) {
    case JX_UNDEF: return 0;
    case JX_STR: return jx_str_ncp(v.s);
    case JX_LIST: return (int64_t)v.l->n;
    case JX_DICT: return (int64_t)v.d->n;
    default: jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "object of type '%s' has no len()", jx_type_name(v));
    }
}

/* See jinja.h. */
jx_list *jx_iterate(jx_rt *rt, int line, jx_val v) {
    switch (v.t) {
    case JX_UNDEF: return jx_list_new(&rt->mem, 0, false).l;
    case JX_LIST: return v.l;
    case JX_DICT: {
        jx_val l = jx_list_new(&rt->mem, v.d->n, false);
        for (size_t i = 0; i < v.d->n; i++) l.l->items[i] = v.d->keys[i];
        return l.l;
    }
    case JX_STR: {
        jx_vec vec;
        jx_vec_init(&vec, &rt->mem);
        size_t i = 0;
        uint32_t cp;
        while (i < v.s->len) {
            size_t j = jx_utf8_next(v.s->data, v.s->len, i, &cp);
            jx_val c = jx_str_new(&rt->mem, v.s->data + i, j - i);
            c.s->markup = v.s->markup;
            jx_vec_push(&vec, c);
            i = j;
        }
        return jx_vec_finish(&vec, false).l;
    }
    default: jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "'%s' object is not iterable", jx_type_name(v));
    }
}

/* See jinja.h. */
int jx_compare(jx_rt *rt, int line, jx_val a, jx_val b) {
    if (a.t == JX_UNDEF) jx_fail_undefined(rt, line, a);
    if (b.t == JX_UNDEF) jx_fail_undefined(rt, line, b);
    if (is_num(a) && is_num(b)) {
        if (a.t != JX_FLOAT && b.t != JX_FLOAT) {
            int64_t x = a.t == JX_BOOL ? a.b : a.i, y = b.t == JX_BOOL ? b.b : b.i;
            return x < y ? -1 : x > y;
        }
        long double x = num_ld(a), y = num_ld(b);
        return x < y ? -1 : x > y; /* NaN compares as equal here; callers check NaN first */
    }
    if (a.t == JX_STR && b.t == JX_STR) {
        size_t n = a.s->len < b.s->len ? a.s->len : b.s->len;
        int c = memcmp(a.s->data, b.s->data, n);
        if (c) return c < 0 ? -1 : 1;
        return a.s->len < b.s->len ? -1 : a.s->len > b.s->len;
    }
    if (a.t == JX_LIST && b.t == JX_LIST && a.l->tuple == b.l->tuple) {
        size_t n = a.l->n < b.l->n ? a.l->n : b.l->n;
        for (size_t i = 0; i < n; i++) {
            if (jx_eq(a.l->items[i], b.l->items[i])) continue;
            return jx_compare(rt, line, a.l->items[i], b.l->items[i]);
        }
        return a.l->n < b.l->n ? -1 : a.l->n > b.l->n;
    }
    jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "'<' not supported between instances of '%s' and '%s'",
            jx_type_name(a), jx_type_name(b));
}

/* ---- float repr ---------------------------------------------------------------------------- */

/* See jinja.h: shortest round-trip digits, fixed notation for 1e-4 <= |f| < 1e16. */
void jx_float_repr(double f, char out[32]) {
    if (isnan(f)) {
        strcpy(out, "nan");
        return;
    }
    if (isinf(f)) {
        strcpy(out, f < 0 ? "-inf" : "inf");
        return;
    }
    char buf[40];
    for (int p = 0; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p, f);
        if (strtod(buf, NULL) == f) break;
    }
    /* buf: [-]d[.ddd]e(+|-)XX */
    const char *s = buf;
    bool neg = *s == '-';
    if (neg) s++;
    char digits[24];
    int nd = 0;
    while (*s && *s != 'e') {
        if (*s != '.' && nd < 23) digits[nd++] = *s;
        s++;
    }
    int exp10 = atoi(s + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--; /* %.*e may pad with zeros */
    digits[nd] = 0;
    int decpt = exp10 + 1;
    char *o = out;
    if (neg) *o++ = '-';
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            *o++ = '0';
            *o++ = '.';
            for (int k = 0; k < -decpt; k++) *o++ = '0';
            memcpy(o, digits, (size_t)nd);
            o += nd;
        } else if (decpt >= nd) {
            memcpy(o, digits, (size_t)nd);
            o += nd;
            for (int k = nd; k < decpt; k++) *o++ = '0';
            *o++ = '.';
            *o++ = '0';
        } else {
            memcpy(o, digits, (size_t)decpt);
            o += decpt;
            *o++ = '.';
            memcpy(o, digits + decpt, (size_t)(nd - decpt));
            o += nd - decpt;
        }
        *o = 0;
    } else {
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            memcpy(o, digits + 1, (size_t)(nd - 1));
            o += nd - 1;
        }
        sprintf(o, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    }
}

/* ---- str() / repr() ------------------------------------------------------------------------ */

/* Python str.isprintable() for one code point. */
static bool is_printable(uint32_t cp) {
    if (cp < 0x20 || cp == 0x7f) return false;
    if (cp < 0x7f) return true;
    if (cp > 0x10ffff) return false;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS: return false;
    default: return true;
    }
}

/* Python repr() of a string: quotes chosen as Python does, non-printables escaped. */
static void repr_str(jx_buf *b, const jx_str *s) {
    bool has_sq = memchr(s->data, '\'', s->len) != NULL, has_dq = memchr(s->data, '"', s->len) != NULL;
    char quote = has_sq && !has_dq ? '"' : '\'';
    jx_buf_addc(b, quote);
    size_t i = 0;
    while (i < s->len) {
        uint32_t cp;
        size_t j = jx_utf8_next(s->data, s->len, i, &cp);
        if (cp == (uint32_t)quote || cp == '\\') {
            jx_buf_addc(b, '\\');
            jx_buf_addc(b, (char)cp);
        } else if (cp == '\t') {
            jx_buf_add(b, "\\t", 2);
        } else if (cp == '\n') {
            jx_buf_add(b, "\\n", 2);
        } else if (cp == '\r') {
            jx_buf_add(b, "\\r", 2);
        } else if (is_printable(cp) && !(j - i == 1 && cp >= 0x80)) {
            jx_buf_add(b, s->data + i, j - i);
        } else if (cp < 0x100) {
            jx_buf_addf(b, "\\x%02x", cp);
        } else if (cp < 0x10000) {
            jx_buf_addf(b, "\\u%04x", cp);
        } else {
            jx_buf_addf(b, "\\U%08x", cp);
        }
        i = j;
    }
    jx_buf_addc(b, quote);
}

/* See jinja.h. */
void jx_repr_into(jx_rt *rt, int line, jx_buf *b, jx_val v, int depth) {
    if (depth > 500) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "maximum recursion depth exceeded in repr");
    char tmp[32];
    switch (v.t) {
    case JX_UNDEF: jx_buf_add(b, "Undefined", 9); return;
    case JX_NONE: jx_buf_add(b, "None", 4); return;
    case JX_BOOL: jx_buf_add(b, v.b ? "True" : "False", v.b ? 4 : 5); return;
    case JX_INT: jx_buf_addf(b, "%lld", (long long)v.i); return;
    case JX_FLOAT: jx_float_repr(v.f, tmp); jx_buf_add(b, tmp, strlen(tmp)); return;
    case JX_STR:
        if (v.s->markup) jx_buf_add(b, "Markup(", 7);
        repr_str(b, v.s);
        if (v.s->markup) jx_buf_addc(b, ')');
        return;
    case JX_LIST:
        jx_buf_addc(b, v.l->tuple ? '(' : '[');
        for (size_t i = 0; i < v.l->n; i++) {
            if (i) jx_buf_add(b, ", ", 2);
            jx_repr_into(rt, line, b, v.l->items[i], depth + 1);
        }
        if (v.l->tuple && v.l->n == 1) jx_buf_addc(b, ',');
        jx_buf_addc(b, v.l->tuple ? ')' : ']');
        return;
    case JX_DICT:
        jx_buf_addc(b, '{');
        for (size_t i = 0; i < v.d->n; i++) {
            if (i) jx_buf_add(b, ", ", 2);
            jx_repr_into(rt, line, b, v.d->keys[i], depth + 1);
            jx_buf_add(b, ": ", 2);
            jx_repr_into(rt, line, b, v.d->vals[i], depth + 1);
        }
        jx_buf_addc(b, '}');
        return;
    case JX_NS:
        jx_buf_add(b, "<Namespace {", 12);
        for (size_t i = 0; i < v.ns->n; i++) {
            if (i) jx_buf_add(b, ", ", 2);
            repr_str(b, v.ns->keys[i]);
            jx_buf_add(b, ": ", 2);
            jx_repr_into(rt, line, b, v.ns->vals[i], depth + 1);
        }
        jx_buf_add(b, "}>", 2);
        return;
    case JX_FUNC:
        if (v.fn->self.t != JX_UNDEF)
            jx_buf_addf(b, "<built-in method %s of %s object>", v.fn->name, jx_type_name(v.fn->self));
        else
            jx_buf_addf(b, "<built-in function %s>", v.fn->name);
        return;
    case JX_MACRO: jx_buf_addf(b, "<Macro '%s'>", v.m->name); return;
    case JX_LOOP: jx_buf_addf(b, "<LoopContext %zu/%zu>", v.loop->index0 + 1, v.loop->items->n); return;
    case JX_SLICE:
        jx_buf_add(b, "slice(", 6);
        jx_repr_into(rt, line, b, v.sl->start, depth + 1);
        jx_buf_add(b, ", ", 2);
        jx_repr_into(rt, line, b, v.sl->stop, depth + 1);
        jx_buf_add(b, ", ", 2);
        jx_repr_into(rt, line, b, v.sl->step, depth + 1);
        jx_buf_addc(b, ')');
        return;
    }
}

/* See jinja.h. */
void jx_str_into(jx_rt *rt, int line, jx_buf *b, jx_val v) {
    switch (v.t) {
    case JX_UNDEF: return;
    case JX_STR: jx_buf_add(b, v.s->data, v.s->len); return;
    default: jx_repr_into(rt, line, b, v, 0); return;
    }
}

/* See jinja.h. */
jx_val jx_to_str(jx_rt *rt, int line, jx_val v) {
    if (v.t == JX_STR) return v;
    if (v.t == JX_UNDEF) return jx_str_new(&rt->mem, "", 0);
    jx_buf b;
    jx_buf_init(&b, &rt->mem, 0);
    jx_str_into(rt, line, &b, v);
    return jx_buf_finish(&b);
}

/* ---- json.dumps ---------------------------------------------------------------------------- */

/* A JSON string literal with json.dumps's escapes (non-ASCII kept). */
static void json_str(jx_buf *b, const char *s, size_t len) {
    jx_buf_addc(b, '"');
    size_t run = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char tmp[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20) {
                snprintf(tmp, sizeof tmp, "\\u%04x", c);
                esc = tmp;
            }
        }
        if (esc) {
            jx_buf_add(b, s + run, i - run);
            jx_buf_add(b, esc, strlen(esc));
            run = i + 1;
        }
    }
    jx_buf_add(b, s + run, len - run);
    jx_buf_addc(b, '"');
}

/* Newline plus `level` copies of indent. */
static void json_newline(jx_buf *b, const char *indent, int level) {
    jx_buf_addc(b, '\n');
    size_t il = strlen(indent);
    for (int k = 0; k < level; k++) jx_buf_add(b, indent, il);
}

/* A dict key as json.dumps converts it: str stays, numbers/bools/None become strings. */
static bool json_key(jx_rt *rt, jx_val k, jx_val *out) {
    char tmp[32];
    switch (k.t) {
    case JX_STR: *out = k; return true;
    case JX_BOOL: *out = jx_cstr(&rt->mem, k.b ? "true" : "false"); return true;
    case JX_NONE: *out = jx_cstr(&rt->mem, "null"); return true;
    case JX_INT: snprintf(tmp, sizeof tmp, "%lld", (long long)k.i); *out = jx_cstr(&rt->mem, tmp); return true;
    case JX_FLOAT:
        if (isnan(k.f)) strcpy(tmp, "NaN");
        else if (isinf(k.f)) strcpy(tmp, k.f < 0 ? "-Infinity" : "Infinity");
        else jx_float_repr(k.f, tmp);
        *out = jx_cstr(&rt->mem, tmp);
        return true;
    default: return false;
    }
}

/* See jinja.h. */
void jx_json_dump(jx_rt *rt, int line, jx_buf *b, jx_val v, const char *indent, bool use_indent,
                  const char *item_sep, const char *key_sep, bool sort_keys, int depth) {
    if (depth > 500) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "tojson: maximum recursion depth exceeded");
    jx_step(rt, line);
    char tmp[32];
    switch (v.t) {
    case JX_NONE: jx_buf_add(b, "null", 4); return;
    case JX_BOOL: jx_buf_add(b, v.b ? "true" : "false", v.b ? 4 : 5); return;
    case JX_INT: jx_buf_addf(b, "%lld", (long long)v.i); return;
    case JX_FLOAT:
        if (isnan(v.f)) jx_buf_add(b, "NaN", 3);
        else if (isinf(v.f)) jx_buf_add(b, v.f < 0 ? "-Infinity" : "Infinity", v.f < 0 ? 9 : 8);
        else {
            jx_float_repr(v.f, tmp);
            jx_buf_add(b, tmp, strlen(tmp));
        }
        return;
    case JX_STR: json_str(b, v.s->data, v.s->len); return;
    case JX_LIST:
        if (v.l->n == 0) {
            jx_buf_add(b, "[]", 2);
            return;
        }
        jx_buf_addc(b, '[');
        for (size_t i = 0; i < v.l->n; i++) {
            if (i) jx_buf_add(b, item_sep, strlen(item_sep));
            if (use_indent) json_newline(b, indent, depth + 1);
            jx_json_dump(rt, line, b, v.l->items[i], indent, use_indent, item_sep, key_sep, sort_keys, depth + 1);
        }
        if (use_indent) json_newline(b, indent, depth);
        jx_buf_addc(b, ']');
        return;
    case JX_DICT: {
        if (v.d->n == 0) {
            jx_buf_add(b, "{}", 2);
            return;
        }
        size_t n = v.d->n;
        jx_val *keys = jx_alloc(&rt->mem, n * sizeof(jx_val));
        size_t *order = jx_alloc(&rt->mem, n * sizeof(size_t));
        for (size_t i = 0; i < n; i++) {
            if (!json_key(rt, v.d->keys[i], &keys[i]))
                jx_fail(&rt->err, QR_ERR_INVALID_ARG, line,
                        "tojson: keys must be str, int, float, bool or None, not %s", jx_type_name(v.d->keys[i]));
            order[i] = i;
        }
        if (sort_keys) /* insertion sort: stable, n is small */
            for (size_t i = 1; i < n; i++) {
                size_t k = order[i], j = i;
                while (j > 0 && jx_compare(rt, line, keys[order[j - 1]], keys[k]) > 0) {
                    order[j] = order[j - 1];
                    j--;
                }
                order[j] = k;
            }
        jx_buf_addc(b, '{');
        for (size_t i = 0; i < n; i++) {
            if (i) jx_buf_add(b, item_sep, strlen(item_sep));
            if (use_indent) json_newline(b, indent, depth + 1);
            json_str(b, keys[order[i]].s->data, keys[order[i]].s->len);
            jx_buf_add(b, key_sep, strlen(key_sep));
            jx_json_dump(rt, line, b, v.d->vals[order[i]], indent, use_indent, item_sep, key_sep, sort_keys,
                         depth + 1);
        }
        if (use_indent) json_newline(b, indent, depth);
        jx_buf_addc(b, '}');
        return;
    }
    default:
        jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "tojson: Object of type %s is not JSON serializable",
                jx_type_name(v));
    }
}
