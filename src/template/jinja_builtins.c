/* jinja_builtins.c — methods of builtin types (str, dict, list, loop) and the global functions
 * of the Hugging Face chat-template environment (range, dict, namespace, raise_exception,
 * strftime_now), with Python semantics. Mutating methods are refused as the immutable sandbox
 * does. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <utf8proc.h>

#include "template/jinja.h"

enum {
    M_UNSAFE = 0,
    /* str */
    M_CAPITALIZE, M_CENTER, M_COUNT, M_ENDSWITH, M_FIND, M_FORMAT, M_INDEX, M_ISALNUM, M_ISALPHA, M_ISDIGIT,
    M_ISLOWER, M_ISSPACE, M_ISUPPER, M_JOIN, M_LJUST, M_LOWER, M_LSTRIP, M_PARTITION, M_REMOVEPREFIX,
    M_REMOVESUFFIX, M_REPLACE, M_RFIND, M_RINDEX, M_RJUST, M_RPARTITION, M_RSPLIT, M_RSTRIP, M_SPLIT,
    M_SPLITLINES, M_STARTSWITH, M_STRIP, M_SWAPCASE, M_TITLE, M_UPPER, M_ZFILL,
    /* dict */
    M_GET, M_ITEMS, M_KEYS, M_VALUES, M_DICT_COPY,
    /* list / tuple */
    M_LIST_COUNT, M_LIST_INDEX, M_LIST_COPY,
    /* loop */
    M_CYCLE, M_CHANGED,
    /* globals */
    G_RANGE, G_DICT, G_NAMESPACE, G_RAISE, G_STRFTIME, G_UNSUPPORTED,
};

typedef struct mentry {
    const char *name;
    int id;
} mentry;

static const mentry str_methods[] = {
    {"capitalize", M_CAPITALIZE}, {"center", M_CENTER}, {"count", M_COUNT}, {"endswith", M_ENDSWITH},
    {"find", M_FIND}, {"format", M_FORMAT}, {"index", M_INDEX}, {"isalnum", M_ISALNUM}, {"isalpha", M_ISALPHA},
    {"isdigit", M_ISDIGIT}, {"islower", M_ISLOWER}, {"isspace", M_ISSPACE}, {"isupper", M_ISUPPER},
    {"join", M_JOIN}, {"ljust", M_LJUST}, {"lower", M_LOWER}, {"lstrip", M_LSTRIP}, {"partition", M_PARTITION},
    {"removeprefix", M_REMOVEPREFIX}, {"removesuffix", M_REMOVESUFFIX}, {"replace", M_REPLACE},
    {"rfind", M_RFIND}, {"rindex", M_RINDEX}, {"rjust", M_RJUST}, {"rpartition", M_RPARTITION},
    {"rsplit", M_RSPLIT}, {"rstrip", M_RSTRIP}, {"split", M_SPLIT}, {"splitlines", M_SPLITLINES},
    {"startswith", M_STARTSWITH}, {"strip", M_STRIP}, {"swapcase", M_SWAPCASE}, {"title", M_TITLE},
    {"upper", M_UPPER}, {"zfill", M_ZFILL}, {NULL, 0},
};
static const mentry dict_methods[] = {
    {"get", M_GET}, {"items", M_ITEMS}, {"keys", M_KEYS}, {"values", M_VALUES}, {"copy", M_DICT_COPY},
    {"clear", M_UNSAFE}, {"pop", M_UNSAFE}, {"popitem", M_UNSAFE}, {"setdefault", M_UNSAFE},
    {"update", M_UNSAFE}, {NULL, 0},
};
static const mentry list_methods[] = {
    {"count", M_LIST_COUNT}, {"index", M_LIST_INDEX}, {"copy", M_LIST_COPY}, {"append", M_UNSAFE},
    {"clear", M_UNSAFE}, {"extend", M_UNSAFE}, {"insert", M_UNSAFE}, {"pop", M_UNSAFE}, {"remove", M_UNSAFE},
    {"reverse", M_UNSAFE}, {"sort", M_UNSAFE}, {NULL, 0},
};
static const mentry tuple_methods[] = {{"count", M_LIST_COUNT}, {"index", M_LIST_INDEX}, {NULL, 0}};
static const mentry loop_methods[] = {{"cycle", M_CYCLE}, {"changed", M_CHANGED}, {NULL, 0}};

/* Looks name up in a NULL-terminated method table; sets *id. */
static bool find_in(const mentry *t, const char *name, int *id) {
    for (; t->name; t++)
        if (!strcmp(t->name, name)) {
            *id = t->id;
            return true;
        }
    return false;
}

/* See jinja.h. */
bool jx_find_method(jx_val obj, const char *name, int *id, bool *unsafe) {
    bool found = false;
    switch (obj.t) {
    case JX_STR: found = find_in(str_methods, name, id); break;
    case JX_DICT: found = find_in(dict_methods, name, id); break;
    case JX_LIST: found = find_in(obj.l->tuple ? tuple_methods : list_methods, name, id); break;
    case JX_LOOP: found = find_in(loop_methods, name, id); break;
    default: break;
    }
    *unsafe = found && *id == M_UNSAFE;
    return found;
}

static jx_func g_funcs[] = {
    {G_RANGE, "range", {.t = JX_UNDEF}},          {G_DICT, "dict", {.t = JX_UNDEF}},
    {G_NAMESPACE, "namespace", {.t = JX_UNDEF}},  {G_RAISE, "raise_exception", {.t = JX_UNDEF}},
    {G_STRFTIME, "strftime_now", {.t = JX_UNDEF}}, {G_UNSUPPORTED, "lipsum", {.t = JX_UNDEF}},
    {G_UNSUPPORTED, "cycler", {.t = JX_UNDEF}},   {G_UNSUPPORTED, "joiner", {.t = JX_UNDEF}},
};

/* See jinja.h. Globals are static read-only jx_func objects. */
bool jx_find_global(const char *name, jx_val *out) {
    for (size_t i = 0; i < sizeof g_funcs / sizeof g_funcs[0]; i++)
        if (!strcmp(g_funcs[i].name, name)) {
            *out = (jx_val){.t = JX_FUNC, .fn = &g_funcs[i]};
            return true;
        }
    return false;
}

/* ---- code point helpers -------------------------------------------------------------------- */

typedef struct cps {
    uint32_t *cp;  /* [n] code points */
    size_t *off;   /* [n + 1] byte offsets */
    size_t n;
} cps;

/* Decodes s into code points and their byte offsets (arena memory). */
static cps decode(jx_rt *rt, const jx_str *s) {
    cps c;
    c.cp = jx_alloc(&rt->mem, (s->len + 1) * sizeof(uint32_t));
    c.off = jx_alloc(&rt->mem, (s->len + 1) * sizeof(size_t));
    size_t i = 0, k = 0;
    while (i < s->len) {
        c.off[k] = i;
        i = jx_utf8_next(s->data, s->len, i, &c.cp[k]);
        k++;
    }
    c.off[k] = s->len;
    c.n = k;
    return c;
}

/* Appends code point cp as UTF-8. */
static void add_cp(jx_buf *b, uint32_t cp) {
    char u[4];
    jx_buf_add(b, u, jx_utf8_encode(cp, u));
}

/* Python's notion of a cased character (has upper/lower/title forms). */
static bool is_cased(uint32_t cp) {
    if (cp > 0x10ffff) return false;
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT ||
           utf8proc_toupper((utf8proc_int32_t)cp) != (utf8proc_int32_t)cp ||
           utf8proc_tolower((utf8proc_int32_t)cp) != (utf8proc_int32_t)cp;
}

/* Simple one-to-one case mappings (utf8proc); out-of-range values pass through. */
static uint32_t to_upper(uint32_t cp) { return cp > 0x10ffff ? cp : (uint32_t)utf8proc_toupper((utf8proc_int32_t)cp); }
static uint32_t to_lower(uint32_t cp) { return cp > 0x10ffff ? cp : (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp); }
static uint32_t to_title(uint32_t cp) { return cp > 0x10ffff ? cp : (uint32_t)utf8proc_totitle((utf8proc_int32_t)cp); }

/* Python lowers capital sigma at the end of a word to final sigma: Σ at byte i..j becomes ς when
 * a cased letter precedes it and none follows (case-ignorable marks are skipped both ways). */
static bool case_ignorable(uint32_t cp) {
    if (cp == '\'' || cp == '.' || cp == ':' || cp == '^' || cp == '`' || cp == 0xb7 || cp == 0x2019) return true;
    if (cp > 0x10ffff) return false;
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_ME || c == UTF8PROC_CATEGORY_CF ||
           c == UTF8PROC_CATEGORY_LM || c == UTF8PROC_CATEGORY_SK;
}

static bool is_cased(uint32_t cp);

static uint32_t lower_sigma(const jx_str *s, size_t i, size_t j) {
    bool before = false, after = false;
    size_t k = i;
    while (k > 0) {
        size_t b = k - 1;
        while (b > 0 && ((unsigned char)s->data[b] & 0xc0) == 0x80) b--;
        uint32_t cp;
        jx_utf8_next(s->data, s->len, b, &cp);
        k = b;
        if (case_ignorable(cp)) continue;
        before = is_cased(cp);
        break;
    }
    k = j;
    while (k < s->len) {
        uint32_t cp;
        k = jx_utf8_next(s->data, s->len, k, &cp);
        if (case_ignorable(cp)) continue;
        after = is_cased(cp);
        break;
    }
    return before && !after ? 0x03c2 : 0x03c3;
}

/* Python's full (multi-character) case mappings for the characters where they differ from the
 * simple one-to-one mapping (SpecialCasing.txt, unconditional, common subset). */
typedef struct special_case {
    uint32_t cp;
    const char *upper, *title, *lower; /* UTF-8; NULL = use the simple mapping */
} special_case;

static const special_case special_cases[] = {
    {0x00df, "SS", "Ss", NULL},                   /* ß */
    {0x0130, NULL, NULL, "i\xcc\x87"},            /* İ -> i + combining dot */
    {0x0149, "\xca\xbcN", "\xca\xbcN", NULL},     /* ŉ */
    {0x01f0, "J\xcc\x8c", "J\xcc\x8c", NULL},     /* ǰ */
    {0x0587, "\xd4\xb5\xd5\x92", "\xd4\xb5\xd6\x82", NULL}, /* և */
    {0x1e96, "H\xcc\xb1", "H\xcc\xb1", NULL},
    {0x1e97, "T\xcc\x88", "T\xcc\x88", NULL},
    {0x1e98, "W\xcc\x8a", "W\xcc\x8a", NULL},
    {0x1e99, "Y\xcc\x8a", "Y\xcc\x8a", NULL},
    {0x1e9a, "A\xca\xbe", "A\xca\xbe", NULL},
    {0xfb00, "FF", "Ff", NULL},
    {0xfb01, "FI", "Fi", NULL},
    {0xfb02, "FL", "Fl", NULL},
    {0xfb03, "FFI", "Ffi", NULL},
    {0xfb04, "FFL", "Ffl", NULL},
    {0xfb05, "ST", "St", NULL},
    {0xfb06, "ST", "St", NULL},
};

static const special_case *find_special(uint32_t cp) {
    if (cp < 0xdf) return NULL;
    for (size_t i = 0; i < sizeof special_cases / sizeof special_cases[0]; i++)
        if (special_cases[i].cp == cp) return &special_cases[i];
    return NULL;
}

/* See jinja.h: mode 0 lower, 1 upper, 2 capitalize, 3 str.title, 4 swapcase. */
jx_val jx_case(jx_rt *rt, jx_val sv, int mode) {
    const jx_str *s = sv.s;
    jx_buf b;
    jx_buf_init(&b, &rt->mem, 0);
    size_t i = 0;
    bool prev_cased = false, first = true;
    while (i < s->len) {
        unsigned char c = (unsigned char)s->data[i];
        uint32_t cp;
        size_t j;
        if (c < 0x80) {
            cp = c;
            j = i + 1;
        } else {
            j = jx_utf8_next(s->data, s->len, i, &cp);
            if (j == i + 1) { /* invalid byte: copy through */
                jx_buf_addc(&b, (char)c);
                i = j;
                first = false;
                continue;
            }
        }
        uint32_t o = cp;
        int want = 0; /* 0 keep, 1 upper, 2 title, 3 lower */
        switch (mode) {
        case 0: want = 3; break;
        case 1: want = 1; break;
        case 2: want = first ? 2 : 3; break;
        case 3:
            if (is_cased(cp)) {
                want = prev_cased ? 3 : 2;
                prev_cased = true;
            } else {
                prev_cased = false;
            }
            break;
        case 4: want = to_upper(cp) != cp || find_special(cp) ? 1 : 3; break;
        default: break;
        }
        const special_case *sc = want ? find_special(cp) : NULL;
        const char *full = !sc ? NULL : want == 1 ? sc->upper : want == 2 ? sc->title : want == 3 ? sc->lower : NULL;
        if (full) {
            jx_buf_add(&b, full, strlen(full));
            first = false;
            i = j;
            continue;
        }
        if (want == 1) o = to_upper(cp);
        else if (want == 2) o = to_title(cp);
        else if (want == 3) o = cp == 0x03a3 ? lower_sigma(s, i, j) : to_lower(cp);
        if (cp == 0xdf && want != 3) o = cp; /* utf8proc maps ß to ẞ; Python has no simple mapping */
        if (o == cp) jx_buf_add(&b, s->data + i, j - i);
        else add_cp(&b, o);
        first = false;
        i = j;
    }
    jx_val r = jx_buf_finish(&b);
    r.s->markup = s->markup;
    return r;
}

/* Whether cp is stripped: whitespace when set is NULL, else membership in set. */
static bool strippable(uint32_t cp, const cps *set) {
    if (!set) return jx_is_space(cp);
    for (size_t k = 0; k < set->n; k++)
        if (set->cp[k] == cp) return true;
    return false;
}

/* Start of the code point that ends at byte `end` (the one jx_utf8_next would decode there). */
static size_t prev_cp_start(const char *s, size_t lo, size_t end, uint32_t *cp) {
    size_t k = end - 1;
    while (k > lo && end - k < 4 && ((unsigned char)s[k] & 0xc0) == 0x80) k--;
    if (jx_utf8_next(s, end, k, cp) == end) return k;
    *cp = (unsigned char)s[end - 1]; /* invalid sequence: the last byte stands alone */
    return end - 1;
}

/* See jinja.h. Scans from both ends without decoding the whole string. */
jx_val jx_strip(jx_rt *rt, jx_val sv, const jx_str *chars, bool left, bool right) {
    jx_str *s = sv.s;
    cps set = {0};
    if (chars) set = decode(rt, chars);
    const cps *setp = chars ? &set : NULL;
    size_t a = 0, b = s->len;
    while (left && a < b) {
        uint32_t cp;
        size_t next = jx_utf8_next(s->data, b, a, &cp);
        if (!strippable(cp, setp)) break;
        a = next;
    }
    while (right && b > a) {
        uint32_t cp;
        size_t start = prev_cp_start(s->data, a, b, &cp);
        if (!strippable(cp, setp)) break;
        b = start;
    }
    if (a == 0 && b == s->len) return sv;
    jx_val r = jx_str_new(&rt->mem, s->data + a, b - a);
    r.s->markup = s->markup;
    return r;
}

/* See jinja.h. count < 0 replaces all; an empty `old` inserts between code points. */
jx_val jx_str_replace(jx_rt *rt, int line, jx_str *s, jx_str *old, jx_str *new_, int64_t count) {
    jx_buf b;
    jx_buf_init(&b, &rt->mem, 0);
    if (count < 0) count = INT64_MAX;
    if (old->len == 0) {
        size_t i = 0;
        uint32_t cp;
        int64_t done = 0;
        while (i <= s->len) {
            if (done < count) {
                jx_buf_add(&b, new_->data, new_->len);
                done++;
                jx_step(rt, line);
            }
            if (i == s->len) break;
            size_t j = jx_utf8_next(s->data, s->len, i, &cp);
            jx_buf_add(&b, s->data + i, j - i);
            i = j;
        }
        return jx_buf_finish(&b);
    }
    size_t i = 0;
    int64_t done = 0;
    while (done < count) {
        const char *hit = memmem(s->data + i, s->len - i, old->data, old->len);
        if (!hit) break;
        size_t k = (size_t)(hit - s->data);
        jx_buf_add(&b, s->data + i, k - i);
        jx_buf_add(&b, new_->data, new_->len);
        i = k + old->len;
        done++;
    }
    jx_buf_add(&b, s->data + i, s->len - i);
    return jx_buf_finish(&b);
}

/* ---- argument helpers ------------------------------------------------------------------------- */

/* Fails with "WHAT: expected WANT, not TYPE" (or the undefined error). */
static _Noreturn void type_err(jx_rt *rt, int line, const char *what, const char *want, jx_val got) {
    if (got.t == JX_UNDEF) jx_fail_undefined(rt, line, got);
    jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "%s: expected %s, not %s", what, want, jx_type_name(got));
}

/* v as a string, or a type error. */
static jx_str *want_str(jx_rt *rt, int line, const char *what, jx_val v) {
    if (v.t != JX_STR) type_err(rt, line, what, "str", v);
    return v.s;
}

/* v as an int (bools count), or a type error. */
static int64_t want_int(jx_rt *rt, int line, const char *what, jx_val v) {
    if (v.t == JX_INT) return v.i;
    if (v.t == JX_BOOL) return v.b;
    type_err(rt, line, what, "int", v);
}

/* Optional code point bounds [start, end) of str.find/count/startswith, clamped like Python. */
static void bounds(jx_rt *rt, int line, const char *what, const jx_val *vals, const bool *has, size_t n,
                   int64_t *start, int64_t *end) {
    *start = 0;
    *end = (int64_t)n;
    if (has[0] && vals[0].t != JX_NONE) {
        int64_t v = want_int(rt, line, what, vals[0]);
        if (v < 0) v = v + (int64_t)n < 0 ? 0 : v + (int64_t)n;
        *start = v;
    }
    if (has[1] && vals[1].t != JX_NONE) {
        int64_t v = want_int(rt, line, what, vals[1]);
        if (v < 0) v = v + (int64_t)n < 0 ? 0 : v + (int64_t)n;
        *end = v > (int64_t)n ? (int64_t)n : v;
    }
}

/* Byte offset -> code point index within c. */
static int64_t cp_index(const cps *c, size_t byte) {
    size_t lo = 0, hi = c->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c->off[mid] < byte) lo = mid + 1;
        else hi = mid;
    }
    return (int64_t)lo;
}

/* Copy of bytes [a, b) of s. */
static jx_val substr(jx_rt *rt, jx_str *s, size_t a, size_t b) { return jx_str_new(&rt->mem, s->data + a, b - a); }

/* Python ljust (align < 0), rjust (> 0) or center (0) to width code points. */
static jx_val pad(jx_rt *rt, int line, jx_str *s, int64_t width, uint32_t fill, int align) {
    int64_t len = jx_str_ncp(s);
    if (width <= len) return jx_str_val(s);
    if (width > 10000000) jx_fail(&rt->err, QR_ERR_NOMEM, line, "padding width too large");
    int64_t marg = width - len, left;
    if (align < 0) left = 0;
    else if (align > 0) left = marg;
    else left = marg / 2 + (marg & width & 1);
    jx_buf b;
    jx_buf_init(&b, &rt->mem, 0);
    for (int64_t k = 0; k < left; k++) add_cp(&b, fill);
    jx_buf_add(&b, s->data, s->len);
    for (int64_t k = left; k < marg; k++) add_cp(&b, fill);
    return jx_buf_finish(&b);
}

/* The optional one-character fill argument (default space). */
static uint32_t fillchar(jx_rt *rt, int line, const bool *has, const jx_val *v) {
    if (!has[0]) return ' ';
    jx_str *f = want_str(rt, line, "fillchar", v[0]);
    if (jx_str_ncp(f) != 1) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "the fill character must be exactly one character long");
    uint32_t cp;
    jx_utf8_next(f->data, f->len, 0, &cp);
    return cp;
}

/* str.split / str.rsplit */
static jx_val split(jx_rt *rt, int line, jx_str *s, jx_val sepv, int64_t maxsplit, bool from_right) {
    jx_vec out;
    jx_vec_init(&out, &rt->mem);
    if (maxsplit < 0) maxsplit = INT64_MAX;
    if (sepv.t == JX_NONE || sepv.t == JX_UNDEF) {
        cps c = decode(rt, s);
        if (!from_right) {
            size_t i = 0;
            int64_t done = 0;
            while (i < c.n) {
                while (i < c.n && jx_is_space(c.cp[i])) i++;
                if (i >= c.n) break;
                if (done == maxsplit) {
                    jx_vec_push(&out, substr(rt, s, c.off[i], s->len));
                    break;
                }
                size_t j = i;
                while (j < c.n && !jx_is_space(c.cp[j])) j++;
                jx_vec_push(&out, substr(rt, s, c.off[i], c.off[j]));
                done++;
                i = j;
            }
        } else {
            size_t i = c.n;
            int64_t done = 0;
            while (i > 0) {
                while (i > 0 && jx_is_space(c.cp[i - 1])) i--;
                if (i == 0) break;
                if (done == maxsplit) {
                    jx_vec_push(&out, substr(rt, s, 0, c.off[i]));
                    break;
                }
                size_t j = i;
                while (j > 0 && !jx_is_space(c.cp[j - 1])) j--;
                jx_vec_push(&out, substr(rt, s, c.off[j], c.off[i]));
                done++;
                i = j;
            }
            for (size_t k = 0; k < out.n / 2; k++) {
                jx_val t = out.items[k];
                out.items[k] = out.items[out.n - 1 - k];
                out.items[out.n - 1 - k] = t;
            }
        }
        return jx_vec_finish(&out, false);
    }
    jx_str *sep = want_str(rt, line, "split() separator", sepv);
    if (sep->len == 0) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "empty separator");
    if (!from_right) {
        size_t i = 0;
        int64_t done = 0;
        while (done < maxsplit) {
            const char *hit = memmem(s->data + i, s->len - i, sep->data, sep->len);
            if (!hit) break;
            size_t k = (size_t)(hit - s->data);
            jx_vec_push(&out, substr(rt, s, i, k));
            i = k + sep->len;
            done++;
        }
        jx_vec_push(&out, substr(rt, s, i, s->len));
    } else {
        size_t end = s->len;
        int64_t done = 0;
        while (done < maxsplit && end >= sep->len) {
            size_t k = end - sep->len;
            bool found = false;
            for (;;) {
                if (memcmp(s->data + k, sep->data, sep->len) == 0) {
                    found = true;
                    break;
                }
                if (k == 0) break;
                k--;
            }
            if (!found) break;
            jx_vec_push(&out, substr(rt, s, k + sep->len, end));
            end = k;
            done++;
        }
        jx_vec_push(&out, substr(rt, s, 0, end));
        for (size_t k = 0; k < out.n / 2; k++) {
            jx_val t = out.items[k];
            out.items[k] = out.items[out.n - 1 - k];
            out.items[out.n - 1 - k] = t;
        }
    }
    return jx_vec_finish(&out, false);
}

/* Code points str.splitlines() breaks on. */
static bool is_linebreak(uint32_t cp) {
    return cp == '\n' || cp == '\r' || cp == 0x0b || cp == 0x0c || cp == 0x1c || cp == 0x1d || cp == 0x1e ||
           cp == 0x85 || cp == 0x2028 || cp == 0x2029;
}

/* Python str.splitlines(keepends). */
static jx_val splitlines(jx_rt *rt, jx_str *s, bool keepends) {
    cps c = decode(rt, s);
    jx_vec out;
    jx_vec_init(&out, &rt->mem);
    size_t i = 0;
    while (i < c.n) {
        size_t j = i;
        while (j < c.n && !is_linebreak(c.cp[j])) j++;
        size_t eol = j;
        if (j < c.n) {
            if (c.cp[j] == '\r' && j + 1 < c.n && c.cp[j + 1] == '\n') j += 2;
            else j++;
        }
        jx_vec_push(&out, substr(rt, s, c.off[i], c.off[keepends ? j : eol]));
        i = j;
    }
    return jx_vec_finish(&out, false);
}

/* startswith / endswith with a str or tuple of str. */
static bool affix(jx_rt *rt, int line, jx_str *s, jx_val what, int64_t start, int64_t end, bool suffix) {
    if (what.t == JX_LIST && what.l->tuple) {
        for (size_t i = 0; i < what.l->n; i++)
            if (affix(rt, line, s, what.l->items[i], start, end, suffix)) return true;
        return false;
    }
    if (what.t != JX_STR) type_err(rt, line, suffix ? "endswith" : "startswith", "str or a tuple of str", what);
    if (start > end) return false;
    size_t a = jx_str_cp_offset(s, start), b = jx_str_cp_offset(s, end);
    if (what.s->len > b - a) return false;
    return suffix ? memcmp(s->data + b - what.s->len, what.s->data, what.s->len) == 0
                  : memcmp(s->data + a, what.s->data, what.s->len) == 0;
}

/* str.isalnum/isalpha/isdigit/isspace/islower/isupper (kind 0..5). */
static bool all_cps(jx_rt *rt, jx_str *s, int kind) {
    cps c = decode(rt, s);
    if (c.n == 0) return false;
    bool any_cased = false;
    for (size_t i = 0; i < c.n; i++) {
        uint32_t cp = c.cp[i];
        utf8proc_category_t cat = cp <= 0x10ffff ? utf8proc_category((utf8proc_int32_t)cp) : UTF8PROC_CATEGORY_CN;
        bool alpha = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
        bool digit = cat == UTF8PROC_CATEGORY_ND || (cp >= 0xb2 && cp <= 0xb3) || cp == 0xb9;
        bool numeric = digit || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
        switch (kind) {
        case 0: if (!alpha && !numeric) return false; break;
        case 1: if (!alpha) return false; break;
        case 2: if (!digit) return false; break;
        case 3: if (!jx_is_space(cp)) return false; break;
        case 4: /* islower */
        case 5: /* isupper */
            if (is_cased(cp)) {
                any_cased = true;
                if (kind == 4 && to_lower(cp) != cp) return false;
                if (kind == 5 && to_upper(cp) != cp) return false;
                if (cat == UTF8PROC_CATEGORY_LT) return false;
            }
            break;
        }
    }
    return kind >= 4 ? any_cased : true;
}

/* str.format: {} {0} {name} with attribute/index lookups, !r/!s conversions and a format spec of
 * [[fill]align][width][.precision] for strings (numbers go through printf-style formatting). */
static jx_val str_format(jx_rt *rt, int line, jx_str *fmt, const jx_args *args) {
    jx_buf out;
    jx_buf_init(&out, &rt->mem, 0);
    const char *s = fmt->data;
    size_t n = fmt->len, i = 0, auto_idx = 0;
    while (i < n) {
        char c = s[i];
        if (c == '{' && i + 1 < n && s[i + 1] == '{') {
            jx_buf_addc(&out, '{');
            i += 2;
            continue;
        }
        if (c == '}' && i + 1 < n && s[i + 1] == '}') {
            jx_buf_addc(&out, '}');
            i += 2;
            continue;
        }
        if (c == '}') jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "format: single '}' encountered in format string");
        if (c != '{') {
            jx_buf_addc(&out, c);
            i++;
            continue;
        }
        size_t j = i + 1;
        int depth = 1;
        while (j < n && depth) {
            if (s[j] == '{') depth++;
            else if (s[j] == '}') depth--;
            if (depth) j++;
        }
        if (j >= n) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "format: expected '}' before end of string");
        /* field = name[!conv][:spec] */
        size_t a = i + 1, e = a;
        while (e < j && s[e] != '!' && s[e] != ':' && s[e] != '.' && s[e] != '[') e++;
        jx_val v;
        if (e == a) {
            if (auto_idx >= args->n) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "format: index %zu out of range", auto_idx);
            v = args->pos[auto_idx++];
        } else if (s[a] >= '0' && s[a] <= '9') {
            size_t k = 0;
            for (size_t q = a; q < e; q++) {
                if (s[q] < '0' || s[q] > '9')
                    jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "format: bad field name '%.*s'", (int)(e - a), s + a);
                k = k < 100000000 ? k * 10 + (size_t)(s[q] - '0') : k; /* saturate: out of range anyway */
            }
            if (k >= args->n) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "format: index %zu out of range", k);
            v = args->pos[k];
        } else {
            size_t q = 0;
            while (q < args->nkw && !(strlen(args->kwnames[q]) == e - a && !memcmp(args->kwnames[q], s + a, e - a))) q++;
            if (q == args->nkw) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "format: KeyError '%.*s'", (int)(e - a), s + a);
            v = args->kw[q];
        }
        while (e < j && (s[e] == '.' || s[e] == '[')) {
            if (s[e] == '.') {
                size_t q = ++e;
                while (e < j && s[e] != '!' && s[e] != ':' && s[e] != '.' && s[e] != '[') e++;
                v = jx_getattr(rt, line, v, jx_strndup(&rt->mem, s + q, e - q));
            } else {
                size_t q = ++e;
                while (e < j && s[e] != ']') e++;
                bool digits = e > q;
                if (digits && e - q > 18) {
                    bool all = true;
                    for (size_t t = q; t < e; t++) all = all && s[t] >= '0' && s[t] <= '9';
                    if (all) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "format: too many decimal digits in format string");
                }
                int64_t k = 0;
                for (size_t t = q; t < e; t++) {
                    if (s[t] < '0' || s[t] > '9') digits = false;
                    else if (k < 100000000000000000) k = k * 10 + (s[t] - '0'); /* saturates */
                }
                v = jx_getitem(rt, line, v, digits ? jx_int(k) : jx_str_new(&rt->mem, s + q, e - q));
                if (e < j) e++;
            }
        }
        char conv = 0;
        if (e < j && s[e] == '!') {
            conv = e + 1 < j ? s[e + 1] : 0;
            e += 2;
        }
        jx_buf vb;
        jx_buf_init(&vb, &rt->mem, 0);
        if (conv == 'r' || conv == 'a') jx_repr_into(rt, line, &vb, v, 0);
        else if (conv == 's' || v.t == JX_STR || v.t == JX_UNDEF || v.t == JX_LIST || v.t == JX_DICT || v.t == JX_NONE)
            jx_str_into(rt, line, &vb, v);
        jx_val sv = vb.data ? jx_buf_finish(&vb) : jx_str_new(&rt->mem, "", 0);
        if (e < j && s[e] == ':') {
            /* spec */
            const char *sp = s + e + 1;
            size_t sn = j - e - 1, k = 0;
            uint32_t fill = ' ';
            int align = 0; /* 0 none, '<' '>' '^' */
            if (sn >= 2 && strchr("<>^=", sp[1])) {
                fill = (unsigned char)sp[0];
                align = sp[1];
                k = 2;
            } else if (sn >= 1 && strchr("<>^=", sp[0])) {
                align = sp[0];
                k = 1;
            }
            char rest[64];
            size_t rl = sn - k < sizeof rest - 1 ? sn - k : sizeof rest - 1;
            memcpy(rest, sp + k, rl);
            rest[rl] = 0;
            bool numeric = v.t == JX_INT || v.t == JX_FLOAT || v.t == JX_BOOL;
            char group = 0; /* ',' or '_' thousands separator */
            for (size_t q = 0; q < rl; q++)
                if (rest[q] == ',' || rest[q] == '_') {
                    group = rest[q];
                    memmove(rest + q, rest + q + 1, rl - q);
                    rl--;
                    break;
                }
            if (numeric && conv == 0) {
                /* translate "[sign][0][width][.prec][type]" into a printf-style spec */
                char pf[80];
                char type = rl ? rest[rl - 1] : 0;
                bool has_type = type && strchr("bcdeEfFgGnoxX%", type);
                if (!has_type) type = v.t == JX_FLOAT ? 'g' : 'd';
                snprintf(pf, sizeof pf, "%%%.*s%c", (int)(has_type ? rl - 1 : rl), rest, type == 'n' ? 'g' : type);
                if (v.t == JX_FLOAT && !has_type && !strchr(rest, '.')) {
                    char tmp[32];
                    jx_float_repr(v.f, tmp);
                    sv = jx_cstr(&rt->mem, tmp);
                } else {
                    sv = jx_percent_format(rt, line, jx_cstr(&rt->mem, pf).s, v);
                }
                if (group) { /* insert separators into the integer digits */
                    const char *d = sv.s->data;
                    size_t a = 0;
                    while (d[a] && !(d[a] >= '0' && d[a] <= '9')) a++;
                    size_t e2 = a;
                    while (d[e2] >= '0' && d[e2] <= '9') e2++;
                    jx_buf gb;
                    jx_buf_init(&gb, &rt->mem, 0);
                    jx_buf_add(&gb, d, a);
                    for (size_t q = a; q < e2; q++) {
                        if (q > a && (e2 - q) % 3 == 0) jx_buf_addc(&gb, group);
                        jx_buf_addc(&gb, d[q]);
                    }
                    jx_buf_add(&gb, d + e2, sv.s->len - e2);
                    sv = jx_buf_finish(&gb);
                }
                if (!align) align = '>';
            } else {
                const char *r = rest;
                int64_t width = 0, prec = -1;
                for (; *r >= '0' && *r <= '9'; r++) width = width < 100000000 ? width * 10 + (*r - '0') : width;
                if (*r == '.') {
                    prec = 0;
                    for (r++; *r >= '0' && *r <= '9'; r++) prec = prec < 100000000 ? prec * 10 + (*r - '0') : prec;
                }
                if (sv.t == JX_STR && prec >= 0 && prec < jx_str_ncp(sv.s))
                    sv = jx_str_new(&rt->mem, sv.s->data, jx_str_cp_offset(sv.s, prec));
                if (!align) align = '<';
                sv = pad(rt, line, sv.s, width, fill, align == '<' ? -1 : align == '>' ? 1 : 0);
                jx_buf_add(&out, sv.s->data, sv.s->len);
                i = j + 1;
                continue;
            }
            jx_buf_add(&out, sv.s->data, sv.s->len);
        } else {
            if (!vb.data && v.t != JX_STR) {
                jx_buf tb;
                jx_buf_init(&tb, &rt->mem, 0);
                jx_str_into(rt, line, &tb, v);
                sv = jx_buf_finish(&tb);
            }
            jx_buf_add(&out, sv.s->data, sv.s->len);
        }
        i = j + 1;
    }
    return jx_buf_finish(&out);
}

/* ---- dispatch ---------------------------------------------------------------------------------- */

/* Dispatches a bound str method. */
static jx_val str_method(jx_rt *rt, int line, const jx_func *fn, const jx_args *args) {
    jx_str *s = fn->self.s;
    jx_val v[4];
    bool has[4];
    const char *what = fn->name;
    switch (fn->id) {
    case M_CAPITALIZE: jx_bind(rt, line, what, args, NULL, 0, v, has); return jx_case(rt, fn->self, 2);
    case M_LOWER: jx_bind(rt, line, what, args, NULL, 0, v, has); return jx_case(rt, fn->self, 0);
    case M_UPPER: jx_bind(rt, line, what, args, NULL, 0, v, has); return jx_case(rt, fn->self, 1);
    case M_TITLE: jx_bind(rt, line, what, args, NULL, 0, v, has); return jx_case(rt, fn->self, 3);
    case M_SWAPCASE: jx_bind(rt, line, what, args, NULL, 0, v, has); return jx_case(rt, fn->self, 4);
    case M_STRIP:
    case M_LSTRIP:
    case M_RSTRIP: {
        static const char *p[] = {"chars"};
        jx_bind(rt, line, what, args, p, 1, v, has);
        const jx_str *chars = NULL;
        if (has[0] && v[0].t != JX_NONE) chars = want_str(rt, line, what, v[0]);
        return jx_strip(rt, fn->self, chars, fn->id != M_RSTRIP, fn->id != M_LSTRIP);
    }
    case M_SPLIT:
    case M_RSPLIT: {
        static const char *p[] = {"sep", "maxsplit"};
        jx_bind(rt, line, what, args, p, 2, v, has);
        return split(rt, line, s, has[0] ? v[0] : jx_none(), has[1] ? want_int(rt, line, what, v[1]) : -1,
                     fn->id == M_RSPLIT);
    }
    case M_SPLITLINES: {
        static const char *p[] = {"keepends"};
        jx_bind(rt, line, what, args, p, 1, v, has);
        return splitlines(rt, s, has[0] && jx_truthy(v[0]));
    }
    case M_STARTSWITH:
    case M_ENDSWITH: {
        static const char *p[] = {"prefix", "start", "end"};
        jx_bind(rt, line, what, args, p, 3, v, has);
        if (!has[0]) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "%s() takes at least 1 argument", what);
        int64_t a, b;
        bounds(rt, line, what, v + 1, has + 1, (size_t)jx_str_ncp(s), &a, &b);
        return jx_bool(affix(rt, line, s, v[0], a, b, fn->id == M_ENDSWITH));
    }
    case M_FIND:
    case M_RFIND:
    case M_INDEX:
    case M_RINDEX:
    case M_COUNT: {
        static const char *p[] = {"sub", "start", "end"};
        jx_bind(rt, line, what, args, p, 3, v, has);
        if (!has[0]) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "%s() takes at least 1 argument", what);
        jx_str *sub = want_str(rt, line, what, v[0]);
        cps c = decode(rt, s);
        int64_t a, b;
        bounds(rt, line, what, v + 1, has + 1, c.n, &a, &b);
        if (fn->id == M_COUNT) {
            if (a > b) return jx_int(0);
            if (sub->len == 0) return jx_int(b - a + 1);
            int64_t cnt = 0;
            size_t i = c.off[a], end = c.off[b];
            while (i + sub->len <= end) {
                const char *hit = memmem(s->data + i, end - i, sub->data, sub->len);
                if (!hit) break;
                cnt++;
                i = (size_t)(hit - s->data) + sub->len;
            }
            return jx_int(cnt);
        }
        int64_t found = -1;
        if (a <= b) {
            size_t lo = c.off[a], hi = c.off[b];
            if (fn->id == M_FIND || fn->id == M_INDEX) {
                const char *hit = sub->len ? memmem(s->data + lo, hi - lo, sub->data, sub->len) : s->data + lo;
                if (hit) found = cp_index(&c, (size_t)(hit - s->data));
            } else if (sub->len <= hi - lo) {
                for (size_t k = hi - sub->len + 1; k-- > lo;)
                    if (memcmp(s->data + k, sub->data, sub->len) == 0) {
                        found = cp_index(&c, k);
                        break;
                    }
            }
        }
        if (found < 0 && (fn->id == M_INDEX || fn->id == M_RINDEX))
            jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "substring not found");
        return jx_int(found);
    }
    case M_REPLACE: {
        static const char *p[] = {"old", "new", "count"};
        jx_bind(rt, line, what, args, p, 3, v, has);
        if (!has[0] || !has[1]) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "replace() takes at least 2 arguments");
        return jx_str_replace(rt, line, s, want_str(rt, line, what, v[0]), want_str(rt, line, what, v[1]),
                              has[2] ? want_int(rt, line, what, v[2]) : -1);
    }
    case M_JOIN: {
        static const char *p[] = {"iterable"};
        jx_bind(rt, line, what, args, p, 1, v, has);
        if (!has[0]) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "join() takes exactly one argument");
        jx_list *l = jx_iterate(rt, line, v[0]);
        jx_buf b;
        jx_buf_init(&b, &rt->mem, 0);
        for (size_t i = 0; i < l->n; i++) {
            if (l->items[i].t != JX_STR)
                jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "sequence item %zu: expected str instance, %s found", i,
                        jx_type_name(l->items[i]));
            if (i) jx_buf_add(&b, s->data, s->len);
            jx_buf_add(&b, l->items[i].s->data, l->items[i].s->len);
        }
        return jx_buf_finish(&b);
    }
    case M_CENTER:
    case M_LJUST:
    case M_RJUST: {
        static const char *p[] = {"width", "fillchar"};
        jx_bind(rt, line, what, args, p, 2, v, has);
        if (!has[0]) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "%s() takes at least 1 argument", what);
        return pad(rt, line, s, want_int(rt, line, what, v[0]), fillchar(rt, line, has + 1, v + 1),
                   fn->id == M_CENTER ? 0 : fn->id == M_LJUST ? -1 : 1);
    }
    case M_ZFILL: {
        static const char *p[] = {"width"};
        jx_bind(rt, line, what, args, p, 1, v, has);
        if (!has[0]) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "zfill() takes exactly one argument");
        int64_t width = want_int(rt, line, what, v[0]), len = jx_str_ncp(s);
        if (width <= len) return fn->self;
        if (width > 10000000) jx_fail(&rt->err, QR_ERR_NOMEM, line, "zfill width too large");
        jx_buf b;
        jx_buf_init(&b, &rt->mem, 0);
        size_t start = 0;
        if (s->len && (s->data[0] == '+' || s->data[0] == '-')) {
            jx_buf_addc(&b, s->data[0]);
            start = 1;
        }
        for (int64_t k = len; k < width; k++) jx_buf_addc(&b, '0');
        jx_buf_add(&b, s->data + start, s->len - start);
        return jx_buf_finish(&b);
    }
    case M_PARTITION:
    case M_RPARTITION: {
        static const char *p[] = {"sep"};
        jx_bind(rt, line, what, args, p, 1, v, has);
        if (!has[0]) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "%s() takes exactly one argument", what);
        jx_str *sep = want_str(rt, line, what, v[0]);
        if (sep->len == 0) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "empty separator");
        jx_val r = jx_list_new(&rt->mem, 3, true);
        const char *hit = NULL;
        if (fn->id == M_PARTITION) {
            hit = memmem(s->data, s->len, sep->data, sep->len);
        } else if (sep->len <= s->len) {
            for (size_t k = s->len - sep->len + 1; k-- > 0;)
                if (memcmp(s->data + k, sep->data, sep->len) == 0) {
                    hit = s->data + k;
                    break;
                }
        }
        jx_val empty = jx_str_new(&rt->mem, "", 0);
        if (!hit) {
            r.l->items[0] = fn->id == M_PARTITION ? fn->self : empty;
            r.l->items[1] = empty;
            r.l->items[2] = fn->id == M_PARTITION ? empty : fn->self;
        } else {
            size_t k = (size_t)(hit - s->data);
            r.l->items[0] = substr(rt, s, 0, k);
            r.l->items[1] = jx_str_val(sep);
            r.l->items[2] = substr(rt, s, k + sep->len, s->len);
        }
        return r;
    }
    case M_REMOVEPREFIX:
    case M_REMOVESUFFIX: {
        static const char *p[] = {"affix"};
        jx_bind(rt, line, what, args, p, 1, v, has);
        if (!has[0]) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "%s() takes exactly one argument", what);
        jx_str *a = want_str(rt, line, what, v[0]);
        if (a->len > s->len) return fn->self;
        if (fn->id == M_REMOVEPREFIX)
            return memcmp(s->data, a->data, a->len) == 0 ? substr(rt, s, a->len, s->len) : fn->self;
        return memcmp(s->data + s->len - a->len, a->data, a->len) == 0 ? substr(rt, s, 0, s->len - a->len) : fn->self;
    }
    case M_ISALNUM: jx_bind(rt, line, what, args, NULL, 0, v, has); return jx_bool(all_cps(rt, s, 0));
    case M_ISALPHA: jx_bind(rt, line, what, args, NULL, 0, v, has); return jx_bool(all_cps(rt, s, 1));
    case M_ISDIGIT: jx_bind(rt, line, what, args, NULL, 0, v, has); return jx_bool(all_cps(rt, s, 2));
    case M_ISSPACE: jx_bind(rt, line, what, args, NULL, 0, v, has); return jx_bool(all_cps(rt, s, 3));
    case M_ISLOWER: jx_bind(rt, line, what, args, NULL, 0, v, has); return jx_bool(all_cps(rt, s, 4));
    case M_ISUPPER: jx_bind(rt, line, what, args, NULL, 0, v, has); return jx_bool(all_cps(rt, s, 5));
    case M_FORMAT: return str_format(rt, line, s, args);
    default: jx_fail(&rt->err, QR_ERR_INTERNAL, line, "unknown str method");
    }
}

/* dict.items() (which 0), keys() (1) or values() (2) as a list. */
static jx_val dict_items(jx_rt *rt, const jx_dict *d, int which) {
    jx_val l = jx_list_new(&rt->mem, d->n, false);
    for (size_t i = 0; i < d->n; i++) {
        if (which == 0) {
            jx_val pair = jx_list_new(&rt->mem, 2, true);
            pair.l->items[0] = d->keys[i];
            pair.l->items[1] = d->vals[i];
            l.l->items[i] = pair;
        } else {
            l.l->items[i] = which == 1 ? d->keys[i] : d->vals[i];
        }
    }
    return l;
}

/* dict(...) / namespace(...) arguments: positional mappings or pair lists, then keywords. */
static void fill_mapping(jx_rt *rt, int line, const char *what, const jx_args *args, jx_dict *d) {
    if (args->n > 1) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "%s expected at most 1 positional argument", what);
    if (args->n == 1) {
        jx_val a = args->pos[0];
        if (a.t == JX_DICT) {
            for (size_t i = 0; i < a.d->n; i++) jx_dict_set(&rt->mem, d, a.d->keys[i], a.d->vals[i]);
        } else {
            jx_list *l = jx_iterate(rt, line, a);
            for (size_t i = 0; i < l->n; i++) {
                jx_list *pair = jx_iterate(rt, line, l->items[i]);
                if (pair->n != 2)
                    jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "%s: sequence element #%zu has length %zu; 2 is required",
                            what, i, pair->n);
                jx_dict_set(&rt->mem, d, pair->items[0], pair->items[1]);
            }
        }
    }
    for (size_t k = 0; k < args->nkw; k++) jx_dict_set(&rt->mem, d, jx_cstr(&rt->mem, args->kwnames[k]), args->kw[k]);
}

/* See jinja.h. */
jx_val jx_call_builtin(jx_rt *rt, int line, const jx_func *fn, const jx_args *args) {
    jx_val v[4];
    bool has[4];
    const char *what = fn->name;
    jx_step(rt, line);
    if (fn->self.t == JX_STR) return str_method(rt, line, fn, args);
    switch (fn->id) {
    case M_GET: {
        static const char *p[] = {"key", "default"};
        jx_bind(rt, line, what, args, p, 2, v, has);
        if (!has[0]) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "get expected at least 1 argument, got 0");
        jx_val out;
        if (jx_dict_get(fn->self.d, v[0], &out)) return out;
        return has[1] ? v[1] : jx_none();
    }
    case M_ITEMS: jx_bind(rt, line, what, args, NULL, 0, v, has); return dict_items(rt, fn->self.d, 0);
    case M_KEYS: jx_bind(rt, line, what, args, NULL, 0, v, has); return dict_items(rt, fn->self.d, 1);
    case M_VALUES: jx_bind(rt, line, what, args, NULL, 0, v, has); return dict_items(rt, fn->self.d, 2);
    case M_DICT_COPY: {
        jx_bind(rt, line, what, args, NULL, 0, v, has);
        jx_val d = jx_dict_new(&rt->mem, fn->self.d->n);
        for (size_t i = 0; i < fn->self.d->n; i++) jx_dict_set(&rt->mem, d.d, fn->self.d->keys[i], fn->self.d->vals[i]);
        return d;
    }
    case M_LIST_COPY: {
        jx_bind(rt, line, what, args, NULL, 0, v, has);
        jx_val l = jx_list_new(&rt->mem, fn->self.l->n, false);
        if (fn->self.l->n) memcpy(l.l->items, fn->self.l->items, fn->self.l->n * sizeof(jx_val));
        return l;
    }
    case M_LIST_COUNT:
    case M_LIST_INDEX: {
        static const char *p[] = {"value"};
        jx_bind(rt, line, what, args, p, 1, v, has);
        if (!has[0]) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "%s() takes exactly one argument", what);
        int64_t cnt = 0;
        for (size_t i = 0; i < fn->self.l->n; i++)
            if (jx_eq(fn->self.l->items[i], v[0])) {
                if (fn->id == M_LIST_INDEX) return jx_int((int64_t)i);
                cnt++;
            }
        if (fn->id == M_LIST_INDEX) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "list.index(x): x not in list");
        return jx_int(cnt);
    }
    case M_CYCLE: {
        if (args->nkw) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "cycle() takes no keyword arguments");
        if (args->n == 0) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "no items for cycling given");
        return args->pos[fn->self.loop->index0 % args->n];
    }
    case M_CHANGED: {
        jx_val cur = jx_list_new(&rt->mem, args->n, true);
        if (args->n) memcpy(cur.l->items, args->pos, args->n * sizeof(jx_val));
        jx_loop *L = fn->self.loop;
        if (!L->has_changed || !jx_eq(L->last_changed, cur)) {
            L->has_changed = true;
            L->last_changed = cur;
            return jx_bool(true);
        }
        return jx_bool(false);
    }
    case G_RANGE: {
        if (args->nkw) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "range() takes no keyword arguments");
        if (args->n < 1 || args->n > 3)
            jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "range expected 1 to 3 arguments, got %zu", args->n);
        int64_t a = 0, b, step = 1;
        if (args->n == 1) {
            b = want_int(rt, line, "range()", args->pos[0]);
        } else {
            a = want_int(rt, line, "range()", args->pos[0]);
            b = want_int(rt, line, "range()", args->pos[1]);
            if (args->n == 3) step = want_int(rt, line, "range()", args->pos[2]);
        }
        if (step == 0) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "range() arg 3 must not be zero");
        int64_t count = 0;
        if (step > 0 && a < b) count = (int64_t)(((uint64_t)b - (uint64_t)a - 1) / (uint64_t)step) + 1;
        if (step < 0 && a > b) count = (int64_t)(((uint64_t)a - (uint64_t)b - 1) / ((uint64_t)0 - (uint64_t)step)) + 1;
        if (count > 100000)
            jx_fail(&rt->err, QR_ERR_INVALID_ARG, line,
                    "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
        jx_val l = jx_list_new(&rt->mem, (size_t)count, false);
        for (int64_t k = 0; k < count; k++) l.l->items[k] = jx_int(a + k * step);
        return l;
    }
    case G_DICT: {
        jx_val d = jx_dict_new(&rt->mem, 0);
        fill_mapping(rt, line, "dict", args, d.d);
        return d;
    }
    case G_NAMESPACE: {
        jx_val d = jx_dict_new(&rt->mem, 0);
        fill_mapping(rt, line, "namespace", args, d.d);
        jx_val ns = jx_ns_new(&rt->mem);
        for (size_t i = 0; i < d.d->n; i++) {
            if (d.d->keys[i].t != JX_STR) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "namespace keys must be strings");
            jx_ns_set(&rt->mem, ns.ns, d.d->keys[i].s, d.d->vals[i]);
        }
        return ns;
    }
    case G_RAISE: {
        static const char *p[] = {"message"};
        jx_bind(rt, line, what, args, p, 1, v, has);
        jx_val msg = has[0] ? jx_to_str(rt, line, v[0]) : jx_str_new(&rt->mem, "", 0);
        jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "raise_exception: %s", msg.s->data);
    }
    case G_STRFTIME: {
        static const char *p[] = {"format"};
        jx_bind(rt, line, what, args, p, 1, v, has);
        if (!has[0]) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "strftime_now() missing 1 required argument: 'format'");
        jx_str *f = want_str(rt, line, what, v[0]);
        if (f->len == 0 || memchr(f->data, 0, f->len)) return jx_str_new(&rt->mem, "", 0);
        for (size_t cap = 256; cap <= 65536; cap *= 4) {
            char *buf = jx_alloc(&rt->mem, cap);
            size_t k = strftime(buf, cap, f->data, &rt->now);
            if (k > 0) return jx_str_new(&rt->mem, buf, k);
        }
        return jx_str_new(&rt->mem, "", 0);
    }
    case G_UNSUPPORTED: jx_fail(&rt->err, QR_ERR_UNSUPPORTED, line, "the global function '%s' is not supported", what);
    case M_UNSAFE:
    default: jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "'%s' is not callable here", what);
    }
}
