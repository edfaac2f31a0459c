/* jinja_filters.c — jinja2's builtin filters and tests, plus Hugging Face's tojson override
 * (json.dumps with ensure_ascii=False). Filters that jinja2 has but chat templates do not use
 * are known by name and fail with "not supported" instead of being silently wrong. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <utf8proc.h>

#include "template/jinja.h"

typedef struct named {
    const char *name;
    int id;
} named;

enum {
    T_DEFINED, T_UNDEFINED, T_NONE, T_BOOLEAN, T_FALSE, T_TRUE, T_INTEGER, T_FLOAT_, T_NUMBER, T_STRING_,
    T_MAPPING, T_ITERABLE, T_SEQUENCE, T_CALLABLE, T_SAMEAS, T_ESCAPED, T_LOWER, T_UPPER, T_ODD, T_EVEN,
    T_DIVISIBLEBY, T_EQ, T_NE, T_LT, T_LE, T_GT, T_GE, T_IN, T_FILTER, T_TEST,
};

static const named test_names[] = {
    {"defined", T_DEFINED}, {"undefined", T_UNDEFINED}, {"none", T_NONE}, {"boolean", T_BOOLEAN},
    {"false", T_FALSE}, {"true", T_TRUE}, {"integer", T_INTEGER}, {"float", T_FLOAT_}, {"number", T_NUMBER},
    {"string", T_STRING_}, {"mapping", T_MAPPING}, {"iterable", T_ITERABLE}, {"sequence", T_SEQUENCE},
    {"callable", T_CALLABLE}, {"sameas", T_SAMEAS}, {"escaped", T_ESCAPED}, {"lower", T_LOWER},
    {"upper", T_UPPER}, {"odd", T_ODD}, {"even", T_EVEN}, {"divisibleby", T_DIVISIBLEBY}, {"eq", T_EQ},
    {"equalto", T_EQ}, {"==", T_EQ}, {"ne", T_NE}, {"!=", T_NE}, {"lt", T_LT}, {"lessthan", T_LT},
    {"<", T_LT}, {"le", T_LE}, {"<=", T_LE}, {"gt", T_GT}, {"greaterthan", T_GT}, {">", T_GT},
    {"ge", T_GE}, {">=", T_GE}, {"in", T_IN}, {"filter", T_FILTER}, {"test", T_TEST}, {NULL, 0},
};

/* Id of name in a NULL-terminated table, or -1. */
static int find_named(const named *t, const char *name) {
    for (; t->name; t++)
        if (!strcmp(t->name, name)) return t->id;
    return -1;
}

/* See jinja.h. */
int jx_test_id(const char *name) { return find_named(test_names, name); }

/* ---- helpers ----------------------------------------------------------------------------------- */

/* jinja2's soft_str: strings (and Markup) unchanged, others through str(). */
static jx_val soft_str(jx_rt *rt, int line, jx_val v) { return jx_to_str(rt, line, v); }

/* Fails with a filter-argument error. */
static _Noreturn void ferr(jx_rt *rt, int line, const char *fmt, const char *a) {
    jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, fmt, a);
}

/* v as an int (bools count), or an error naming `what`. */
static int64_t want_int(jx_rt *rt, int line, const char *what, jx_val v) {
    if (v.t == JX_INT) return v.i;
    if (v.t == JX_BOOL) return v.b;
    if (v.t == JX_UNDEF) jx_fail_undefined(rt, line, v);
    jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "%s: expected an integer, not %s", what, jx_type_name(v));
}

/* jinja2's ignore_case: lower-cases strings, leaves others. */
static jx_val ignore_case(jx_rt *rt, jx_val v) { return v.t == JX_STR ? jx_case(rt, v, 0) : v; }

/* jinja2's make_attrgetter: "a.b.0" walks getitem per part; default replaces undefined. */
typedef struct getter {
    jx_val *parts;
    size_t n;
    jx_val deflt;
    bool has_default;
    bool lower;
} getter;

/* Prepares make_attrgetter for attribute (None: identity). */
static getter make_getter(jx_rt *rt, jx_val attribute, jx_val deflt, bool lower) {
    getter g = {0};
    g.lower = lower;
    g.deflt = deflt;
    g.has_default = deflt.t != JX_UNDEF && deflt.t != JX_NONE;
    if (attribute.t == JX_UNDEF || attribute.t == JX_NONE) return g;
    if (attribute.t != JX_STR) {
        g.parts = jx_alloc(&rt->mem, sizeof(jx_val));
        g.parts[0] = attribute;
        g.n = 1;
        return g;
    }
    const jx_str *s = attribute.s;
    size_t count = 1;
    for (size_t i = 0; i < s->len; i++) count += s->data[i] == '.';
    g.parts = jx_alloc(&rt->mem, count * sizeof(jx_val));
    size_t a = 0;
    for (size_t i = 0; i <= s->len; i++) {
        if (i < s->len && s->data[i] != '.') continue;
        bool digits = i > a;
        int64_t v = 0;
        for (size_t k = a; k < i; k++) {
            if (s->data[k] < '0' || s->data[k] > '9' || v > INT64_MAX / 10 - 10) digits = false;
            else v = v * 10 + (s->data[k] - '0');
        }
        g.parts[g.n++] = digits ? jx_int(v) : jx_str_new(&rt->mem, s->data + a, i - a);
        a = i + 1;
    }
    return g;
}

/* Applies a getter to item. */
static jx_val get(jx_rt *rt, int line, const getter *g, jx_val item) {
    for (size_t i = 0; i < g->n; i++) {
        item = jx_getitem(rt, line, item, g->parts[i]);
        if (g->has_default && item.t == JX_UNDEF) item = g->deflt;
    }
    return g->lower ? ignore_case(rt, item) : item;
}

/* Stable merge sort of idx[0..n) by keys[idx]; reverse keeps equal elements in order. */
static void merge_sort(jx_rt *rt, int line, const jx_val *keys, size_t *idx, size_t *tmp, size_t n, bool reverse) {
    if (n < 2) return;
    size_t h = n / 2;
    merge_sort(rt, line, keys, idx, tmp, h, reverse);
    merge_sort(rt, line, keys, idx + h, tmp, n - h, reverse);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        jx_step(rt, line);
        /* take from the right half only when it sorts strictly before the left element */
        int c = reverse ? jx_compare(rt, line, keys[idx[i]], keys[idx[j]]) : jx_compare(rt, line, keys[idx[j]], keys[idx[i]]);
        if (c < 0) tmp[k++] = idx[j++];
        else tmp[k++] = idx[i++];
    }
    while (i < h) tmp[k++] = idx[i++];
    while (j < n) tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof(size_t));
}

/* Stable sort of items by keys (Python sorted with reverse). */
static jx_val sorted(jx_rt *rt, int line, const jx_list *items, const jx_val *keys, bool reverse) {
    size_t n = items->n;
    size_t *idx = jx_alloc(&rt->mem, (n + 1) * sizeof(size_t)), *tmp = jx_alloc(&rt->mem, (n + 1) * sizeof(size_t));
    for (size_t i = 0; i < n; i++) idx[i] = i;
    merge_sort(rt, line, keys, idx, tmp, n, reverse);
    jx_val out = jx_list_new(&rt->mem, n, false);
    for (size_t i = 0; i < n; i++) out.l->items[i] = items->items[idx[i]];
    return out;
}

/* Python int(str, base); false when the text is not an integer literal. */
static bool parse_int(jx_rt *rt, int line, const jx_str *s, int64_t base, int64_t *out) {
    jx_val st = jx_strip(rt, jx_str_val((jx_str *)s), NULL, true, true);
    const char *p = st.s->data, *e = p + st.s->len;
    bool neg = false;
    if (p < e && (*p == '+' || *p == '-')) neg = *p++ == '-';
    if (base == 0 || base == 16 || base == 8 || base == 2) {
        if (e - p >= 2 && p[0] == '0') {
            char c = (char)(p[1] | 0x20);
            int64_t pb = c == 'x' ? 16 : c == 'o' ? 8 : c == 'b' ? 2 : 0;
            if (pb && (base == 0 || base == pb)) {
                base = pb;
                p += 2;
                if (p < e && *p == '_') p++;
            }
        }
        if (base == 0) {
            base = 10;
            /* base 0 forbids leading zeros on non-zero decimals */
            if (e - p >= 2 && p[0] == '0') {
                for (const char *q = p; q < e; q++)
                    if (*q != '0' && *q != '_') return false;
            }
        }
    }
    if (base < 2 || base > 36) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "int() base must be >= 2 and <= 36, or 0");
    if (p >= e) return false;
    uint64_t v = 0;
    bool prev_digit = false;
    for (; p < e; p++) {
        if (*p == '_') {
            if (!prev_digit || p + 1 >= e) return false;
            prev_digit = false;
            continue;
        }
        int d = *p >= '0' && *p <= '9' ? *p - '0' : (*p | 0x20) >= 'a' && (*p | 0x20) <= 'z' ? (*p | 0x20) - 'a' + 10 : 99;
        if (d >= base) return false;
        if (v > ((uint64_t)INT64_MAX + 1u - (uint64_t)d) / (uint64_t)base)
            jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "integer overflow (values beyond 64 bits are not supported)");
        v = v * (uint64_t)base + (uint64_t)d;
        if (v > (uint64_t)INT64_MAX + (neg ? 1u : 0u))
            jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "integer overflow (values beyond 64 bits are not supported)");
        prev_digit = true;
    }
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

/* Python float(str); false when the text is not a float literal. */
static bool parse_float(jx_rt *rt, const jx_str *s, double *out) {
    jx_val st = jx_strip(rt, jx_str_val((jx_str *)s), NULL, true, true);
    const char *p = st.s->data, *e = p + st.s->len;
    char buf[512];
    size_t k = 0;
    const char *q = p;
    bool neg = q < e && *q == '-';
    if (q < e && (*q == '+' || *q == '-')) buf[k++] = *q++;
    size_t rest = (size_t)(e - q);
    const char *words[] = {"inf", "infinity", "nan"};
    for (int w = 0; w < 3; w++)
        if (rest == strlen(words[w]) && strncasecmp(q, words[w], rest) == 0) {
            *out = w == 2 ? NAN : (neg ? -INFINITY : INFINITY);
            return true;
        }
    bool digits = false, prev_digit = false, seen_dot = false, seen_e = false;
    for (; q < e; q++) {
        char c = *q;
        if (k >= sizeof buf - 2) return false;
        if (c >= '0' && c <= '9') {
            buf[k++] = c;
            digits = prev_digit = true;
        } else if (c == '_') {
            if (!prev_digit || q + 1 >= e || q[1] < '0' || q[1] > '9') return false;
            prev_digit = false;
        } else if (c == '.' && !seen_dot && !seen_e) {
            buf[k++] = c;
            seen_dot = true;
            prev_digit = false;
        } else if ((c == 'e' || c == 'E') && digits && !seen_e) {
            buf[k++] = c;
            seen_e = true;
            prev_digit = false;
            if (q + 1 < e && (q[1] == '+' || q[1] == '-')) buf[k++] = *++q;
            if (q + 1 >= e || q[1] < '0' || q[1] > '9') return false;
        } else {
            return false;
        }
    }
    if (!digits) return false;
    buf[k] = 0;
    *out = strtod(buf, NULL);
    return true;
}

/* jinja2's int filter. */
static jx_val int_of(jx_rt *rt, int line, jx_val v, jx_val deflt, int64_t base) {
    double f;
    int64_t i;
    switch (v.t) {
    case JX_UNDEF: jx_fail_undefined(rt, line, v);
    case JX_INT: return v;
    case JX_BOOL: return jx_int(v.b);
    case JX_FLOAT:
        if (isnan(v.f)) return deflt;
        if (isinf(v.f) || fabs(v.f) >= 9.2e18) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "cannot convert float to integer");
        return jx_int((int64_t)v.f);
    case JX_STR:
        if (parse_int(rt, line, v.s, base, &i)) return jx_int(i);
        if (parse_float(rt, v.s, &f)) return int_of(rt, line, jx_float(f), deflt, 10);
        return deflt;
    default: return deflt;
    }
}

/* jinja2's float filter. */
static jx_val float_of(jx_rt *rt, int line, jx_val v, jx_val deflt) {
    double f;
    switch (v.t) {
    case JX_UNDEF: jx_fail_undefined(rt, line, v);
    case JX_INT: return jx_float((double)v.i);
    case JX_BOOL: return jx_float(v.b);
    case JX_FLOAT: return v;
    case JX_STR: return parse_float(rt, v.s, &f) ? jx_float(f) : deflt;
    default: return deflt;
    }
}

/* Python round(x, ndigits) for floats: correctly rounded decimal, ties to even. */
static double round_float(double x, int64_t nd) {
    if (!isfinite(x) || nd > 320) return x;
    if (nd >= 0) {
        char buf[512];
        snprintf(buf, sizeof buf, "%.*f", (int)nd, x);
        return strtod(buf, NULL);
    }
    if (nd < -330) return copysign(0.0, x);
    double p = pow(10.0, (double)-nd);
    double y = x / p, z = nearbyint(y);
    return z * p;
}

/* json.dumps(ensure_ascii=True): rewrites non-ASCII as \\uXXXX (surrogate pairs above U+FFFF). */
static void ascii_escape(jx_rt *rt, jx_buf *b) {
    jx_buf out;
    jx_buf_init(&out, &rt->mem, 0);
    size_t i = 0;
    while (i < b->len) {
        unsigned char c = (unsigned char)b->data[i];
        if (c < 0x80) {
            jx_buf_addc(&out, (char)c);
            i++;
            continue;
        }
        uint32_t cp;
        i = jx_utf8_next(b->data, b->len, i, &cp);
        if (cp >= 0x10000) {
            cp -= 0x10000;
            jx_buf_addf(&out, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
        } else {
            jx_buf_addf(&out, "\\u%04x", cp);
        }
    }
    *b = out;
}

/* transformers' tojson: json.dumps(x, ensure_ascii, indent, separators, sort_keys). */
static jx_val tojson(jx_rt *rt, int line, jx_val x, const jx_val *v, const bool *has) {
    bool ensure_ascii = has[0] && jx_truthy(v[0]);
    const char *indent = NULL;
    bool use_indent = false;
    if (has[1] && v[1].t != JX_NONE) {
        use_indent = true;
        if (v[1].t == JX_STR) {
            indent = v[1].s->data;
        } else {
            int64_t n = want_int(rt, line, "tojson indent", v[1]);
            if (n > 1000) n = 1000;
            char *s = jx_alloc(&rt->mem, (size_t)(n > 0 ? n : 0) + 1);
            for (int64_t k = 0; k < n; k++) s[k] = ' ';
            indent = s;
        }
    }
    const char *item_sep = use_indent ? "," : ", ", *key_sep = ": ";
    if (has[2] && v[2].t != JX_NONE) {
        jx_list *l = jx_iterate(rt, line, v[2]);
        if (l->n != 2 || l->items[0].t != JX_STR || l->items[1].t != JX_STR)
            jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "tojson: separators must be a pair of strings");
        item_sep = l->items[0].s->data;
        key_sep = l->items[1].s->data;
    }
    bool sort_keys = has[3] && jx_truthy(v[3]);
    jx_buf b;
    jx_buf_init(&b, &rt->mem, 0);
    jx_json_dump(rt, line, &b, x, indent ? indent : "", use_indent, item_sep, key_sep, sort_keys, 0);
    if (ensure_ascii) ascii_escape(rt, &b);
    return jx_buf_finish(&b);
}

/* jinja2's do_indent. */
static jx_val indent(jx_rt *rt, int line, jx_val s, const jx_val *v, const bool *has) {
    jx_val ind;
    if (has[0] && v[0].t == JX_STR) {
        ind = v[0];
    } else {
        int64_t w = has[0] ? want_int(rt, line, "indent width", v[0]) : 4;
        if (w > 100000) w = 100000;
        char *sp = jx_alloc(&rt->mem, (size_t)(w > 0 ? w : 0) + 1);
        for (int64_t k = 0; k < w; k++) sp[k] = ' ';
        ind = jx_cstr(&rt->mem, sp);
    }
    bool first = has[1] && jx_truthy(v[1]), blank = has[2] && jx_truthy(v[2]);
    if (s.t == JX_UNDEF) jx_fail_undefined(rt, line, s);
    if (s.t != JX_STR)
        jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "indent: unsupported operand type(s) for +=: '%s' and 'str'",
                jx_type_name(s));
    jx_buf tmp;
    jx_buf_init(&tmp, &rt->mem, 0);
    jx_buf_add(&tmp, s.s->data, s.s->len);
    jx_buf_addc(&tmp, '\n');
    jx_val withnl = jx_buf_finish(&tmp);
    /* splitlines */
    jx_vec lines;
    jx_vec_init(&lines, &rt->mem);
    {
        const jx_str *ss = withnl.s;
        size_t i = 0;
        while (i < ss->len) {
            size_t j = i, eol;
            uint32_t cp = 0;
            size_t nx = j;
            for (;;) {
                if (j >= ss->len) break;
                nx = jx_utf8_next(ss->data, ss->len, j, &cp);
                if (cp == '\n' || cp == '\r' || cp == 0x0b || cp == 0x0c || cp == 0x1c || cp == 0x1d || cp == 0x1e ||
                    cp == 0x85 || cp == 0x2028 || cp == 0x2029)
                    break;
                j = nx;
            }
            eol = j;
            if (j < ss->len) {
                j = nx;
                if (cp == '\r' && j < ss->len && ss->data[j] == '\n') j++;
            }
            jx_vec_push(&lines, jx_str_new(&rt->mem, ss->data + i, eol - i));
            i = j;
        }
    }
    jx_buf out;
    jx_buf_init(&out, &rt->mem, 0);
    if (first) jx_buf_add(&out, ind.s->data, ind.s->len);
    for (size_t i = 0; i < lines.n; i++) {
        const jx_str *ln = lines.items[i].s;
        if (i > 0) {
            jx_buf_addc(&out, '\n');
            if (blank || ln->len) jx_buf_add(&out, ind.s->data, ind.s->len);
        }
        jx_buf_add(&out, ln->data, ln->len);
    }
    jx_val r = jx_buf_finish(&out);
    r.s->markup = s.s->markup;
    return r;
}

/* Python regex \\w for one code point. */
static bool is_word_cp(uint32_t cp) {
    if (cp == '_') return true;
    if (cp < 0x80) return (cp >= '0' && cp <= '9') || ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z');
    if (cp > 0x10ffff) return false;
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) ||
           (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO);
}

/* jinja2's do_title: uppercase after "-", whitespace, "(", "{", "[", "<" or at the start. */
static jx_val title(jx_rt *rt, jx_val s) {
    jx_val lower = jx_case(rt, s, 0);
    jx_buf out;
    jx_buf_init(&out, &rt->mem, 0);
    const jx_str *l = lower.s;
    size_t i = 0;
    bool start = true;
    while (i < l->len) {
        uint32_t cp;
        size_t j = jx_utf8_next(l->data, l->len, i, &cp);
        bool sep = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || jx_is_space(cp);
        if (start && !sep) {
            jx_val one = jx_str_new(&rt->mem, l->data + i, j - i);
            jx_val up = jx_case(rt, one, 1);
            jx_buf_add(&out, up.s->data, up.s->len);
        } else {
            jx_buf_add(&out, l->data + i, j - i);
        }
        start = sep;
        i = j;
    }
    return jx_buf_finish(&out);
}

/* select / reject / selectattr / rejectattr */
static jx_val select_items(jx_rt *rt, int line, jx_val seq, const jx_args *args, bool attr, bool keep) {
    jx_list *l = jx_iterate(rt, line, seq);
    size_t off = 0;
    getter g = {0};
    if (attr) {
        if (args->n < 1) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "Missing parameter for attribute name");
        g = make_getter(rt, args->pos[0], (jx_val){.t = JX_UNDEF}, false);
        off = 1;
    }
    int test = -1;
    const char *tname = NULL;
    jx_args targs = {0};
    if (args->n > off) {
        jx_val tn = args->pos[off];
        if (tn.t != JX_STR) ferr(rt, line, "test name must be a string%s", "");
        tname = tn.s->data;
        test = jx_test_id(tname);
        if (test < 0) jx_fail(&rt->err, QR_ERR_UNSUPPORTED, line, "no test named '%s'", tname);
        targs.n = args->n - off - 1;
        targs.pos = args->pos + off + 1;
        targs.nkw = args->nkw;
        targs.kwnames = args->kwnames;
        targs.kw = args->kw;
    }
    jx_vec out;
    jx_vec_init(&out, &rt->mem);
    for (size_t i = 0; i < l->n; i++) {
        jx_val x = attr ? get(rt, line, &g, l->items[i]) : l->items[i];
        bool r = tname ? jx_apply_test(rt, line, test, tname, x, &targs) : jx_truthy(x);
        if (r == keep) jx_vec_push(&out, l->items[i]);
    }
    return jx_vec_finish(&out, false);
}

/* Runs filter `id` on `in` with its arguments. */
static jx_val apply_filter_id(jx_rt *rt, int line, int id, const char *name, jx_val in, const jx_args *args);

/* map(attribute=..., default=...) or map('filter', args...). */
static jx_val map_items(jx_rt *rt, int line, jx_val seq, const jx_args *args) {
    jx_list *l = jx_iterate(rt, line, seq);
    jx_vec out;
    jx_vec_init(&out, &rt->mem);
    bool by_attr = args->n == 0;
    if (by_attr) {
        jx_val attribute = {.t = JX_UNDEF}, deflt = {.t = JX_UNDEF};
        for (size_t k = 0; k < args->nkw; k++) {
            if (!strcmp(args->kwnames[k], "attribute")) attribute = args->kw[k];
            else if (!strcmp(args->kwnames[k], "default")) deflt = args->kw[k];
            else ferr(rt, line, "map: unexpected keyword argument '%s'", args->kwnames[k]);
        }
        if (attribute.t == JX_UNDEF) ferr(rt, line, "map requires a filter argument%s", "");
        getter g = make_getter(rt, attribute, deflt, false);
        for (size_t i = 0; i < l->n; i++) jx_vec_push(&out, get(rt, line, &g, l->items[i]));
        return jx_vec_finish(&out, false);
    }
    jx_val fname = args->pos[0];
    if (fname.t != JX_STR) ferr(rt, line, "map: the filter name must be a string%s", "");
    int id = jx_filter_id(fname.s->data);
    if (id == -1) jx_fail(&rt->err, QR_ERR_UNSUPPORTED, line, "no filter named '%s'", fname.s->data);
    if (id == -2) jx_fail(&rt->err, QR_ERR_UNSUPPORTED, line, "the '%s' filter is not supported", fname.s->data);
    jx_args fargs = *args;
    fargs.n--;
    fargs.pos++;
    for (size_t i = 0; i < l->n; i++) jx_vec_push(&out, apply_filter_id(rt, line, id, fname.s->data, l->items[i], &fargs));
    return jx_vec_finish(&out, false);
}

/* min/max filters: first extreme element by key. */
static jx_val min_max(jx_rt *rt, int line, jx_val seq, const jx_val *v, const bool *has, bool want_max) {
    jx_list *l = jx_iterate(rt, line, seq);
    if (l->n == 0) return jx_undefined(&rt->mem, (jx_val){.t = JX_UNDEF}, NULL, "No aggregated item, sequence was empty.");
    bool cs = has[0] && jx_truthy(v[0]);
    getter g = make_getter(rt, has[1] ? v[1] : (jx_val){.t = JX_UNDEF}, (jx_val){.t = JX_UNDEF}, !cs);
    size_t best = 0;
    jx_val bk = get(rt, line, &g, l->items[0]);
    for (size_t i = 1; i < l->n; i++) {
        jx_val k = get(rt, line, &g, l->items[i]);
        int c = jx_compare(rt, line, k, bk);
        if (want_max ? c > 0 : c < 0) {
            best = i;
            bk = k;
        }
    }
    return l->items[best];
}

/* first/last filters; undefined when empty. */
static jx_val first_last(jx_rt *rt, int line, jx_val seq, bool last) {
    if (seq.t != JX_UNDEF && seq.t != JX_STR && seq.t != JX_LIST && seq.t != JX_DICT)
        jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "'%s' object is not iterable", jx_type_name(seq));
    jx_list *l = jx_iterate(rt, line, seq);
    if (l->n == 0)
        return jx_undefined(&rt->mem, (jx_val){.t = JX_UNDEF}, NULL,
                            last ? "No last item, sequence was empty." : "No first item, sequence was empty.");
    return l->items[last ? l->n - 1 : 0];
}

/* escape (Markup passes through unless force) and forceescape. */
static jx_val escape_val(jx_rt *rt, int line, jx_val v, bool force) {
    if (v.t == JX_STR && v.s->markup && !force) return v;
    jx_val s = soft_str(rt, line, v);
    jx_buf b;
    jx_buf_init(&b, &rt->mem, 0);
    jx_escape_into(&b, s.s->data, s.s->len);
    jx_val r = jx_buf_finish(&b);
    r.s->markup = true;
    return r;
}

/* A filter: its input and arguments; `name` as the template wrote it (an alias: "d", "e", "count"). */
typedef jx_val (*filter_fn)(jx_rt *rt, int line, const char *name, jx_val in, const jx_args *args);
#define FILTER(fn) static jx_val fn(jx_rt *rt, int line, const char *name, jx_val in, const jx_args *args)

/* Binds the arguments by jinja2's parameter names into v[] and has[] (declared here, one per name). */
#define ARGS(...)                                                                                              \
    static const char *params_[] = {__VA_ARGS__};                                                             \
    jx_val v[sizeof params_ / sizeof params_[0]];                                                              \
    bool has[sizeof params_ / sizeof params_[0]];                                                              \
    jx_bind(rt, line, name, args, params_, sizeof params_ / sizeof params_[0], v, has)
/* The same into existing v[] and has[] (the tests' switch). */
#define BIND(...)                                                                                              \
    do {                                                                                                       \
        static const char *params_[] = {__VA_ARGS__};                                                         \
        jx_bind(rt, line, name, args, params_, sizeof params_ / sizeof params_[0], v, has);                   \
    } while (0)
/* No arguments allowed. */
#define NOARGS() jx_bind(rt, line, name, args, NULL, 0, NULL, NULL)

/* x|abs: the absolute value of an int, bool or float. */
FILTER(f_abs) {
    NOARGS();
    if (in.t == JX_INT) {
        if (in.i == INT64_MIN) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "integer overflow");
        return jx_int(in.i < 0 ? -in.i : in.i);
    }
    if (in.t == JX_BOOL) return jx_int(in.b);
    if (in.t == JX_FLOAT) return jx_float(fabs(in.f));
    jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "bad operand type for abs(): '%s'", jx_type_name(in));
}

/* x|attr(name): the attribute `name` (never a dict key). */
FILTER(f_attr) {
    ARGS("name");
    if (!has[0]) ferr(rt, line, "attr() missing required argument 'name'%s", "");
    jx_val nm = soft_str(rt, line, v[0]);
    if (in.t == JX_UNDEF) jx_fail_undefined(rt, line, in);
    if (in.t == JX_DICT) { /* attributes only: a dict's keys are not attributes */
        int mid;
        bool unsafe;
        if (!jx_find_method(in, nm.s->data, &mid, &unsafe))
            return jx_undefined(&rt->mem, nm, jx_obj_desc(&rt->mem, in), NULL);
    }
    return jx_getattr(rt, line, in, nm.s->data);
}

/* seq|batch(linecount, fill_with): lists of linecount items, the last padded with fill_with. */
FILTER(f_batch) {
    ARGS("linecount", "fill_with");
    int64_t n = has[0] ? want_int(rt, line, name, v[0]) : 0;
    if (n <= 0) ferr(rt, line, "batch: linecount must be positive%s", "");
    jx_list *l = jx_iterate(rt, line, in);
    jx_vec out, cur;
    jx_vec_init(&out, &rt->mem);
    jx_vec_init(&cur, &rt->mem);
    for (size_t i = 0; i < l->n; i++) {
        if ((int64_t)cur.n == n) {
            jx_vec_push(&out, jx_vec_finish(&cur, false));
            jx_vec_init(&cur, &rt->mem);
        }
        jx_vec_push(&cur, l->items[i]);
    }
    if (cur.n) {
        if (has[1] && v[1].t != JX_NONE)
            while ((int64_t)cur.n < n) jx_vec_push(&cur, v[1]);
        jx_vec_push(&out, jx_vec_finish(&cur, false));
    }
    return jx_vec_finish(&out, false);
}

/* s|capitalize: first character upper case, the rest lower. */
FILTER(f_capitalize) {
    NOARGS();
    return jx_case(rt, soft_str(rt, line, in), 2);
}

/* s|center(width=80): str.center. */
FILTER(f_center) {
    ARGS("width");
    jx_args a = {.n = 1, .pos = v};
    v[0] = has[0] ? v[0] : jx_int(80);
    jx_val s = soft_str(rt, line, in);
    jx_val m = jx_getattr(rt, line, s, "center");
    return jx_call(rt, line, m, &a);
}

/* x|default(default_value="", boolean=false) (alias d): the default when x is undefined (or falsy). */
FILTER(f_default) {
    ARGS("default_value", "boolean");
    if (in.t == JX_UNDEF || (has[1] && jx_truthy(v[1]) && !jx_truthy(in)))
        return has[0] ? v[0] : jx_str_new(&rt->mem, "", 0);
    return in;
}

/* d|dictsort(case_sensitive, by="key", reverse): the (key, value) pairs sorted. */
FILTER(f_dictsort) {
    ARGS("case_sensitive", "by", "reverse");
    if (in.t != JX_DICT) {
        if (in.t == JX_UNDEF) jx_fail_undefined(rt, line, in);
        jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "dictsort: expected a mapping, not %s", jx_type_name(in));
    }
    int pos = 0;
    if (has[1]) {
        jx_val by = soft_str(rt, line, v[1]);
        if (!strcmp(by.s->data, "value")) pos = 1;
        else if (strcmp(by.s->data, "key") != 0) ferr(rt, line, "You can only sort by either \"key\" or \"value\"%s", "");
    }
    bool cs = has[0] && jx_truthy(v[0]);
    jx_val items = jx_list_new(&rt->mem, in.d->n, false);
    jx_val *keys = jx_alloc(&rt->mem, (in.d->n + 1) * sizeof(jx_val));
    for (size_t i = 0; i < in.d->n; i++) {
        jx_val pair = jx_list_new(&rt->mem, 2, true);
        pair.l->items[0] = in.d->keys[i];
        pair.l->items[1] = in.d->vals[i];
        items.l->items[i] = pair;
        keys[i] = cs ? pair.l->items[pos] : ignore_case(rt, pair.l->items[pos]);
    }
    return sorted(rt, line, items.l, keys, has[2] && jx_truthy(v[2]));
}

/* x|escape (alias e): HTML-escaped Markup; Markup passes through. */
FILTER(f_escape) {
    NOARGS();
    return escape_val(rt, line, in, false);
}

/* x|forceescape: HTML-escaped Markup, Markup included. */
FILTER(f_forceescape) {
    NOARGS();
    return escape_val(rt, line, in, true);
}

/* seq|first: the first item, undefined when empty. */
FILTER(f_first) {
    NOARGS();
    return first_last(rt, line, in, false);
}

/* seq|last: the last item, undefined when empty. */
FILTER(f_last) {
    NOARGS();
    return first_last(rt, line, in, true);
}

/* x|float(default=0.0): x as a float, the default when it does not convert. */
FILTER(f_float) {
    ARGS("default");
    return float_of(rt, line, in, has[0] ? v[0] : jx_float(0.0));
}

/* x|int(default=0, base=10): x as an int, the default when it does not convert. */
FILTER(f_int) {
    ARGS("default", "base");
    return int_of(rt, line, in, has[0] ? v[0] : jx_int(0), has[1] ? want_int(rt, line, name, v[1]) : 10);
}

/* s|format(args...): printf-style formatting (positional or keyword arguments). */
FILTER(f_format) {
    if (args->n && args->nkw) ferr(rt, line, "can't handle positional and keyword arguments at the same time%s", "");
    jx_val fmt = soft_str(rt, line, in);
    jx_val a;
    if (args->nkw) {
        a = jx_dict_new(&rt->mem, args->nkw);
        for (size_t k = 0; k < args->nkw; k++) jx_dict_set(&rt->mem, a.d, jx_cstr(&rt->mem, args->kwnames[k]), args->kw[k]);
    } else {
        a = jx_list_new(&rt->mem, args->n, true);
        if (args->n) memcpy(a.l->items, args->pos, args->n * sizeof(jx_val));
    }
    return jx_percent_format(rt, line, fmt.s, a);
}

/* seq|groupby(attribute, default, case_sensitive): (grouper, list) pairs, sorted by the attribute. */
FILTER(f_groupby) {
    ARGS("attribute", "default", "case_sensitive");
    if (!has[0]) ferr(rt, line, "groupby() missing required argument 'attribute'%s", "");
    bool cs = has[2] && jx_truthy(v[2]);
    jx_val deflt = has[1] ? v[1] : (jx_val){.t = JX_UNDEF};
    getter g = make_getter(rt, v[0], deflt, !cs), og = make_getter(rt, v[0], deflt, false);
    jx_list *l = jx_iterate(rt, line, in);
    jx_val *keys = jx_alloc(&rt->mem, (l->n + 1) * sizeof(jx_val));
    for (size_t i = 0; i < l->n; i++) keys[i] = get(rt, line, &g, l->items[i]);
    jx_val s = sorted(rt, line, l, keys, false);
    jx_vec groups;
    jx_vec_init(&groups, &rt->mem);
    size_t i = 0;
    while (i < s.l->n) {
        jx_val k = get(rt, line, &g, s.l->items[i]);
        jx_vec members;
        jx_vec_init(&members, &rt->mem);
        size_t j = i;
        while (j < s.l->n && jx_eq(get(rt, line, &g, s.l->items[j]), k)) jx_vec_push(&members, s.l->items[j++]);
        jx_val pair = jx_list_new(&rt->mem, 2, true);
        pair.l->group = true;
        pair.l->items[0] = cs ? k : get(rt, line, &og, s.l->items[i]);
        pair.l->items[1] = jx_vec_finish(&members, false);
        jx_vec_push(&groups, pair);
        i = j;
    }
    return jx_vec_finish(&groups, false);
}

/* s|indent(width=4, first=false, blank=false): lines after the first (or all) indented. */
FILTER(f_indent) {
    ARGS("width", "first", "blank");
    return indent(rt, line, in, v, has);
}

/* d|items: the (key, value) pairs; an empty list for undefined. */
FILTER(f_items) {
    NOARGS();
    if (in.t == JX_UNDEF) return jx_list_new(&rt->mem, 0, false);
    if (in.t != JX_DICT) ferr(rt, line, "Can only get item pairs from a mapping.%s", "");
    jx_val l = jx_list_new(&rt->mem, in.d->n, false);
    for (size_t i = 0; i < in.d->n; i++) {
        jx_val pair = jx_list_new(&rt->mem, 2, true);
        pair.l->items[0] = in.d->keys[i];
        pair.l->items[1] = in.d->vals[i];
        l.l->items[i] = pair;
    }
    return l;
}

/* seq|join(d="", attribute): the items (or their attribute) as strings, joined. */
FILTER(f_join) {
    ARGS("d", "attribute");
    jx_list *l = jx_iterate(rt, line, in);
    getter g = make_getter(rt, has[1] ? v[1] : (jx_val){.t = JX_UNDEF}, (jx_val){.t = JX_UNDEF}, false);
    jx_val sep = has[0] ? soft_str(rt, line, v[0]) : jx_str_new(&rt->mem, "", 0);
    jx_buf b;
    jx_buf_init(&b, &rt->mem, 0);
    for (size_t i = 0; i < l->n; i++) {
        if (i) jx_buf_add(&b, sep.s->data, sep.s->len);
        jx_str_into(rt, line, &b, get(rt, line, &g, l->items[i]));
    }
    return jx_buf_finish(&b);
}

/* x|length (alias count): len(x). */
FILTER(f_length) {
    NOARGS();
    return jx_int(jx_len(rt, line, in));
}

/* x|list: the items of x as a new list. */
FILTER(f_list) {
    NOARGS();
    jx_list *l = jx_iterate(rt, line, in);
    jx_val r = jx_list_new(&rt->mem, l->n, false);
    if (l->n) memcpy(r.l->items, l->items, l->n * sizeof(jx_val));
    return r;
}

/* s|lower: lower case. */
FILTER(f_lower) {
    NOARGS();
    return jx_case(rt, soft_str(rt, line, in), 0);
}

/* s|upper: upper case. */
FILTER(f_upper) {
    NOARGS();
    return jx_case(rt, soft_str(rt, line, in), 1);
}

/* seq|map(attribute=..., default=...) or seq|map('filter', args...). */
FILTER(f_map) {
    return map_items(rt, line, in, args);
}

/* seq|max(case_sensitive, attribute): the largest item. */
FILTER(f_max) {
    ARGS("case_sensitive", "attribute");
    return min_max(rt, line, in, v, has, true);
}

/* seq|min(case_sensitive, attribute): the smallest item. */
FILTER(f_min) {
    ARGS("case_sensitive", "attribute");
    return min_max(rt, line, in, v, has, false);
}

/* seq|select('test', args...): the items that pass the test. */
FILTER(f_select) {
    return select_items(rt, line, in, args, false, true);
}

/* seq|reject('test', args...): the items that fail the test. */
FILTER(f_reject) {
    return select_items(rt, line, in, args, false, false);
}

/* seq|selectattr(attribute, 'test', args...): the items whose attribute passes the test. */
FILTER(f_selectattr) {
    return select_items(rt, line, in, args, true, true);
}

/* seq|rejectattr(attribute, 'test', args...): the items whose attribute fails the test. */
FILTER(f_rejectattr) {
    return select_items(rt, line, in, args, true, false);
}

/* s|replace(old, new, count): str.replace. */
FILTER(f_replace) {
    ARGS("old", "new", "count");
    if (!has[0] || !has[1]) ferr(rt, line, "replace() missing required arguments%s", "");
    int64_t count = has[2] && v[2].t != JX_NONE ? want_int(rt, line, name, v[2]) : -1;
    return jx_str_replace(rt, line, soft_str(rt, line, in).s, soft_str(rt, line, v[0]).s,
                          soft_str(rt, line, v[1]).s, count);
}

/* x|reverse: a string reversed, or the items in reverse order. */
FILTER(f_reverse) {
    NOARGS();
    if (in.t == JX_STR) {
        jx_slice sl = {jx_none(), jx_none(), jx_int(-1)};
        return jx_slice_apply(rt, line, in, &sl);
    }
    jx_list *l = jx_iterate(rt, line, in);
    jx_val r = jx_list_new(&rt->mem, l->n, false);
    for (size_t i = 0; i < l->n; i++) r.l->items[i] = l->items[l->n - 1 - i];
    return r;
}

/* x|round(precision=0, method="common"): Python round (ties to even), or ceil / floor at that precision. */
FILTER(f_round) {
    ARGS("precision", "method");
    int64_t p = has[0] ? want_int(rt, line, name, v[0]) : 0;
    const char *method = "common";
    if (has[1]) method = soft_str(rt, line, v[1]).s->data;
    if (strcmp(method, "common") && strcmp(method, "ceil") && strcmp(method, "floor"))
        ferr(rt, line, "method must be common, ceil or floor%s", "");
    if (in.t != JX_INT && in.t != JX_BOOL && in.t != JX_FLOAT) {
        if (in.t == JX_UNDEF) jx_fail_undefined(rt, line, in);
        jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "type %s doesn't define __round__ method", jx_type_name(in));
    }
    if (!strcmp(method, "common")) {
        if (in.t != JX_FLOAT) {
            int64_t x = in.t == JX_BOOL ? in.b : in.i;
            if (p >= 0) return jx_int(x);
            if (p < -18) return jx_int(0);
            int64_t m = 1;
            for (int64_t k = 0; k < -p; k++) m *= 10;
            int64_t q = x / m, r = x % m;
            if (r < 0) {
                r += m;
                q--;
            }
            if (2 * r > m || (2 * r == m && (q & 1))) q++;
            int64_t res;
            if (__builtin_mul_overflow(q, m, &res))
                jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "integer overflow (values beyond 64 bits are not supported)");
            return jx_int(res);
        }
        return jx_float(round_float(in.f, p));
    }
    double x = in.t == JX_FLOAT ? in.f : (double)(in.t == JX_BOOL ? in.b : in.i);
    double scale = pow(10.0, (double)p);
    double r = !strcmp(method, "ceil") ? ceil(x * scale) : floor(x * scale);
    return jx_float(r / scale);
}

/* s|safe: s as Markup (not escaped again). */
FILTER(f_safe) {
    NOARGS();
    jx_val s = soft_str(rt, line, in);
    jx_val r = jx_str_new(&rt->mem, s.s->data, s.s->len);
    r.s->markup = true;
    return r;
}

/* seq|slice(slices, fill_with): the items in that many columns. */
FILTER(f_slice) {
    ARGS("slices", "fill_with");
    int64_t slices = has[0] ? want_int(rt, line, name, v[0]) : 0;
    if (slices <= 0 || slices > 100000) ferr(rt, line, "slice: slices must be positive%s", "");
    jx_list *l = jx_iterate(rt, line, in);
    int64_t len = (int64_t)l->n, per = len / slices, extra = len % slices, offset = 0;
    jx_vec out;
    jx_vec_init(&out, &rt->mem);
    for (int64_t k = 0; k < slices; k++) {
        int64_t start = offset + k * per;
        if (k < extra) offset++;
        int64_t end = offset + (k + 1) * per;
        jx_vec part;
        jx_vec_init(&part, &rt->mem);
        for (int64_t i = start; i < end; i++) jx_vec_push(&part, l->items[i]);
        if (has[1] && v[1].t != JX_NONE && k >= extra) jx_vec_push(&part, v[1]);
        jx_vec_push(&out, jx_vec_finish(&part, false));
    }
    return jx_vec_finish(&out, false);
}

/* seq|sort(reverse, case_sensitive, attribute): the items sorted (stable), attribute "a,b" by several. */
FILTER(f_sort) {
    ARGS("reverse", "case_sensitive", "attribute");
    jx_list *l = jx_iterate(rt, line, in);
    bool cs = has[1] && jx_truthy(v[1]);
    jx_val attrs = has[2] ? v[2] : (jx_val){.t = JX_NONE};
    /* make_multi_attrgetter: "a,b" sorts by several attributes */
    jx_vec specs;
    jx_vec_init(&specs, &rt->mem);
    if (attrs.t == JX_STR) {
        size_t a = 0;
        for (size_t i = 0; i <= attrs.s->len; i++)
            if (i == attrs.s->len || attrs.s->data[i] == ',') {
                jx_vec_push(&specs, jx_str_new(&rt->mem, attrs.s->data + a, i - a));
                a = i + 1;
            }
    } else {
        jx_vec_push(&specs, attrs);
    }
    getter *gs = jx_alloc(&rt->mem, specs.n * sizeof(getter));
    for (size_t k = 0; k < specs.n; k++) gs[k] = make_getter(rt, specs.items[k], (jx_val){.t = JX_UNDEF}, !cs);
    jx_val *keys = jx_alloc(&rt->mem, (l->n + 1) * sizeof(jx_val));
    for (size_t i = 0; i < l->n; i++) {
        jx_val key = jx_list_new(&rt->mem, specs.n, false);
        for (size_t k = 0; k < specs.n; k++) key.l->items[k] = get(rt, line, &gs[k], l->items[i]);
        keys[i] = key;
    }
    return sorted(rt, line, l, keys, has[0] && jx_truthy(v[0]));
}

/* x|string: str(x), Markup kept. */
FILTER(f_string) {
    NOARGS();
    return soft_str(rt, line, in);
}

/* seq|sum(attribute, start=0): the sum of the items (or their attribute). */
FILTER(f_sum) {
    ARGS("attribute", "start");
    jx_list *l = jx_iterate(rt, line, in);
    getter g = make_getter(rt, has[0] ? v[0] : (jx_val){.t = JX_UNDEF}, (jx_val){.t = JX_UNDEF}, false);
    jx_val acc = has[1] ? v[1] : jx_int(0);
    if (acc.t == JX_STR) ferr(rt, line, "sum() can't sum strings [use ''.join(seq) instead]%s", "");
    for (size_t i = 0; i < l->n; i++) acc = jx_binop_eval(rt, line, B_ADD, acc, get(rt, line, &g, l->items[i]));
    return acc;
}

/* s|title: jinja2's title case. */
FILTER(f_title) {
    NOARGS();
    return title(rt, soft_str(rt, line, in));
}

/* x|tojson(ensure_ascii, indent, separators, sort_keys): JSON text (Hugging Face's override). */
FILTER(f_tojson) {
    ARGS("ensure_ascii", "indent", "separators", "sort_keys");
    return tojson(rt, line, in, v, has);
}

/* s|trim(chars): str.strip. */
FILTER(f_trim) {
    ARGS("chars");
    const jx_str *chars = NULL;
    if (has[0] && v[0].t != JX_NONE) {
        if (v[0].t != JX_STR) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "strip arg must be None or str");
        chars = v[0].s;
    }
    return jx_strip(rt, soft_str(rt, line, in), chars, true, true);
}

/* s|truncate(length=255, killwords=false, end="...", leeway=5): s cut to length, at a word unless killwords. */
FILTER(f_truncate) {
    ARGS("length", "killwords", "end", "leeway");
    if (in.t == JX_UNDEF) return in; /* len(Undefined) == 0: returned unchanged */
    if (in.t != JX_STR) {
        jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "object of type '%s' has no len()", jx_type_name(in));
    }
    int64_t length = has[0] ? want_int(rt, line, name, v[0]) : 255;
    jx_val end = has[2] ? v[2] : jx_cstr(&rt->mem, "...");
    if (end.t != JX_STR) ferr(rt, line, "truncate: end must be a string%s", "");
    int64_t leeway = has[3] && v[3].t != JX_NONE ? want_int(rt, line, name, v[3]) : 5;
    int64_t endlen = jx_str_ncp(end.s), slen = jx_str_ncp(in.s);
    if (length < endlen) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "expected length >= %lld, got %lld", (long long)endlen, (long long)length);
    if (leeway < 0) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "expected leeway >= 0, got %lld", (long long)leeway);
    if (slen <= length || slen - length <= leeway) return in;
    size_t cut = jx_str_cp_offset(in.s, length - endlen);
    jx_buf b;
    jx_buf_init(&b, &rt->mem, 0);
    if (has[1] && jx_truthy(v[1])) {
        jx_buf_add(&b, in.s->data, cut);
    } else {
        size_t k = cut;
        while (k > 0 && in.s->data[k - 1] != ' ') k--;
        jx_buf_add(&b, in.s->data, k > 0 ? k - 1 : cut);
    }
    jx_buf_add(&b, end.s->data, end.s->len);
    return jx_buf_finish(&b);
}

/* seq|unique(case_sensitive, attribute): the first item of each distinct value. */
FILTER(f_unique) {
    ARGS("case_sensitive", "attribute");
    jx_list *l = jx_iterate(rt, line, in);
    getter g = make_getter(rt, has[1] ? v[1] : (jx_val){.t = JX_UNDEF}, (jx_val){.t = JX_UNDEF},
                           !(has[0] && jx_truthy(v[0])));
    jx_vec out, seen;
    jx_vec_init(&out, &rt->mem);
    jx_vec_init(&seen, &rt->mem);
    for (size_t i = 0; i < l->n; i++) {
        jx_val k = get(rt, line, &g, l->items[i]);
        if (k.t == JX_DICT || (k.t == JX_LIST && !k.l->tuple))
            jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "unhashable type: '%s'", jx_type_name(k));
        bool dup = false;
        for (size_t j = 0; j < seen.n && !dup; j++) dup = jx_eq(seen.items[j], k);
        if (!dup) {
            jx_vec_push(&seen, k);
            jx_vec_push(&out, l->items[i]);
        }
    }
    return jx_vec_finish(&out, false);
}

/* s|wordcount: the number of words. */
FILTER(f_wordcount) {
    NOARGS();
    jx_val s = soft_str(rt, line, in);
    int64_t count = 0;
    bool inword = false;
    size_t i = 0;
    while (i < s.s->len) {
        uint32_t cp;
        i = jx_utf8_next(s.s->data, s.s->len, i, &cp);
        bool w = is_word_cp(cp);
        if (w && !inword) count++;
        inword = w;
    }
    return jx_int(count);
}

/* Every filter name jinja2 knows (aliases included), with its function; NULL: jinja2 has it, we do not. */
static const struct filter {
    const char *name;
    filter_fn fn;
} filters[] = {
    {"abs", f_abs}, {"attr", f_attr}, {"batch", f_batch}, {"capitalize", f_capitalize}, {"center", f_center},
    {"count", f_length}, {"d", f_default}, {"default", f_default}, {"dictsort", f_dictsort}, {"e", f_escape},
    {"escape", f_escape}, {"filesizeformat", NULL}, {"first", f_first}, {"float", f_float},
    {"forceescape", f_forceescape}, {"format", f_format}, {"groupby", f_groupby}, {"indent", f_indent},
    {"int", f_int}, {"items", f_items}, {"join", f_join}, {"last", f_last}, {"length", f_length}, {"list", f_list},
    {"lower", f_lower}, {"map", f_map}, {"max", f_max}, {"min", f_min}, {"pprint", NULL}, {"random", NULL},
    {"reject", f_reject}, {"rejectattr", f_rejectattr}, {"replace", f_replace}, {"reverse", f_reverse},
    {"round", f_round}, {"safe", f_safe}, {"select", f_select}, {"selectattr", f_selectattr}, {"slice", f_slice},
    {"sort", f_sort}, {"string", f_string}, {"striptags", NULL}, {"sum", f_sum}, {"title", f_title},
    {"tojson", f_tojson}, {"trim", f_trim}, {"truncate", f_truncate}, {"unique", f_unique}, {"upper", f_upper},
    {"urlencode", NULL}, {"urlize", NULL}, {"wordcount", f_wordcount}, {"wordwrap", NULL}, {"xmlattr", NULL},
};

/* See jinja.h: the id is the position in filters[]. */
int jx_filter_id(const char *name) {
    for (size_t i = 0; i < sizeof filters / sizeof filters[0]; i++)
        if (!strcmp(filters[i].name, name)) return filters[i].fn ? (int)i : -2;
    return -1;
}

/* Runs filter `id` on `in` with its arguments. */
static jx_val apply_filter_id(jx_rt *rt, int line, int id, const char *name, jx_val in, const jx_args *args) {
    jx_step(rt, line);
    if (id < 0) jx_fail(&rt->err, QR_ERR_UNSUPPORTED, line, "the '%s' filter is not supported", name);
    return filters[id].fn(rt, line, name, in, args);
}

/* See jinja.h. */
jx_val jx_apply_filter(jx_rt *rt, const jx_node *n, jx_val input, const jx_args *args) {
    return apply_filter_id(rt, n->line, n->op, n->name, input, args);
}

/* ---- tests -------------------------------------------------------------------------------------- */

/* Python `is` as far as it is observable from templates. */
static bool identical(jx_val a, jx_val b) {
    if (a.t != b.t) return false;
    switch (a.t) {
    case JX_NONE:
    case JX_UNDEF: return a.t == JX_NONE || a.u == b.u;
    case JX_BOOL: return a.b == b.b;
    case JX_INT: return a.i == b.i && a.i >= -5 && a.i <= 256; /* CPython's small-int cache */
    case JX_FLOAT: return false;
    case JX_STR: return a.s == b.s;
    case JX_LIST: return a.l == b.l;
    case JX_DICT: return a.d == b.d;
    case JX_NS: return a.ns == b.ns;
    case JX_FUNC: return a.fn == b.fn;
    case JX_MACRO: return a.m == b.m;
    case JX_LOOP: return a.loop == b.loop;
    case JX_SLICE: return a.sl == b.sl;
    }
    return false;
}

/* See jinja.h. */
bool jx_apply_test(jx_rt *rt, int line, int id, const char *name, jx_val x, const jx_args *args) {
    jx_val v[2];
    bool has[2];
    jx_step(rt, line);
    switch (id) {
    case T_DEFINED: NOARGS(); return x.t != JX_UNDEF;
    case T_UNDEFINED: NOARGS(); return x.t == JX_UNDEF;
    case T_NONE: NOARGS(); return x.t == JX_NONE;
    case T_BOOLEAN: NOARGS(); return x.t == JX_BOOL;
    case T_FALSE: NOARGS(); return x.t == JX_BOOL && !x.b;
    case T_TRUE: NOARGS(); return x.t == JX_BOOL && x.b;
    case T_INTEGER: NOARGS(); return x.t == JX_INT;
    case T_FLOAT_: NOARGS(); return x.t == JX_FLOAT;
    case T_NUMBER: NOARGS(); return x.t == JX_INT || x.t == JX_FLOAT || x.t == JX_BOOL;
    case T_STRING_: NOARGS(); return x.t == JX_STR;
    case T_MAPPING: NOARGS(); return x.t == JX_DICT;
    case T_ITERABLE: NOARGS(); return x.t == JX_STR || x.t == JX_LIST || x.t == JX_DICT || x.t == JX_UNDEF || x.t == JX_LOOP;
    case T_SEQUENCE: NOARGS(); return x.t == JX_STR || x.t == JX_LIST || x.t == JX_DICT || x.t == JX_UNDEF;
    case T_CALLABLE: NOARGS(); return x.t == JX_FUNC || x.t == JX_MACRO || x.t == JX_LOOP || x.t == JX_UNDEF;
    case T_ESCAPED: NOARGS(); return x.t == JX_STR && x.s->markup;
    case T_LOWER:
    case T_UPPER: {
        NOARGS();
        jx_val s = soft_str(rt, line, x);
        jx_val m = jx_getattr(rt, line, s, id == T_LOWER ? "islower" : "isupper");
        jx_args none = {0};
        return jx_truthy(jx_call(rt, line, m, &none));
    }
    case T_ODD:
    case T_EVEN: {
        NOARGS();
        jx_val r = jx_binop_eval(rt, line, B_MOD, x, jx_int(2));
        return jx_eq(r, jx_int(id == T_ODD ? 1 : 0));
    }
    case T_DIVISIBLEBY:
        BIND("num");
        if (!has[0]) ferr(rt, line, "divisibleby() missing required argument 'num'%s", "");
        return jx_eq(jx_binop_eval(rt, line, B_MOD, x, v[0]), jx_int(0));
    case T_SAMEAS:
        BIND("other");
        if (!has[0]) ferr(rt, line, "sameas() missing required argument 'other'%s", "");
        return identical(x, v[0]);
    case T_EQ:
    case T_NE:
    case T_LT:
    case T_LE:
    case T_GT:
    case T_GE: {
        BIND("other");
        if (!has[0]) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "test '%s' missing required argument 'other'", name);
        static const int ops[] = {C_EQ, C_NE, C_LT, C_LE, C_GT, C_GE};
        return jx_compare_op(rt, line, ops[id - T_EQ], x, v[0]);
    }
    case T_IN:
        BIND("seq");
        if (!has[0]) ferr(rt, line, "in() missing required argument 'seq'%s", "");
        return jx_contains(rt, line, v[0], x);
    case T_FILTER:
    case T_TEST:
        NOARGS();
        if (x.t != JX_STR) return false;
        return id == T_FILTER ? jx_filter_id(x.s->data) != -1 : jx_test_id(x.s->data) != -1;
    default: jx_fail(&rt->err, QR_ERR_UNSUPPORTED, line, "the '%s' test is not supported", name);
    }
}
