/* json_schema.c — JSON schema (jansson) -> GBNF text (see grammar.h for what is supported).
 *
 * Every schema node becomes one rule; shared pieces (strings, numbers, whitespace, any value) are
 * emitted once. Objects keep the declared property order; with optional properties the rules are
 *   F(i) = first present property has index >= i:  kv(i) R(i+1)  |  F(i+1) (only if i is optional)
 *   R(i) = the rest after a property was written:  ("," kv(i))? R(i+1)  (optional)  or  "," kv(i) R(i+1)
 * so the grammar stays linear in the number of properties. `pattern` is translated from a
 * regular-expression subset to GBNF over the string's JSON-escaped content. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sampling/grammar.h"
#include "util/util.h"

#define MAX_DEPTH 64           /* nested schemas (not counting $ref hops) */
#define MAX_PROPS 1000         /* properties of one object */
#define MAX_ENUM 1000          /* enum values */
#define MAX_RULES 20000        /* rules in the output */
#define MAX_TEXT (4u << 20)    /* bytes of GBNF */
#define MAX_COUNT 10000        /* minItems/maxItems/minLength/maxLength (larger maxima read as unbounded) */
#define NAME_LEN 96

typedef struct sbuf {
    char *s;
    size_t n, cap;
    bool oom;
} sbuf;

static void QR_PRINTF(2, 3) sb_printf(sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        const int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->oom = true;
            return;
        }
        if (b->s && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        size_t nc = b->cap ? b->cap * 2 : 256;
        while (nc <= b->n + (size_t)k) nc *= 2;
        char *ns = realloc(b->s, nc);
        if (!ns) {
            b->oom = true;
            return;
        }
        b->s = ns;
        b->cap = nc;
    }
}

static void sb_put(sbuf *b, const char *s) { sb_printf(b, "%s", s); }

/* Empties b (keeps its memory). */
static void sb_reset(sbuf *b) {
    b->n = 0;
    if (b->s) b->s[0] = 0;
}

/* Appends bytes s[0..n) as a GBNF "literal". */
static void sb_lit(sbuf *b, const char *s, size_t n) {
    sb_put(b, "\"");
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)s[i];
        if (c == '"') sb_put(b, "\\\"");
        else if (c == '\\') sb_put(b, "\\\\");
        else if (c == '\n') sb_put(b, "\\n");
        else if (c == '\r') sb_put(b, "\\r");
        else if (c == '\t') sb_put(b, "\\t");
        else if (c < 0x20 || c == 0x7f) sb_printf(b, "\\x%02X", c);
        else sb_printf(b, "%c", c);
    }
    sb_put(b, "\"");
}

typedef struct ref_ent {
    char *ref;
    char name[NAME_LEN];
} ref_ent;

typedef struct jsc {
    const json_t *root;
    char prefix[48];
    sbuf out;
    int32_t n_rules;
    uint32_t have;        /* shared rules emitted (bits of enum shared_rule) */
    ref_ent *refs;
    int32_t n_refs, cap_refs;
    int depth;
    char *err;
    size_t err_len;
    qr_status st;
} jsc;

enum shared_rule { SH_WS = 1, SH_CHAR = 2, SH_STRING = 4, SH_INTEGER = 8, SH_NUMBER = 16, SH_BOOL = 32, SH_NULL = 64,
                   SH_VALUE = 128 };

static int QR_PRINTF(4, 5) fail(jsc *c, qr_status st, const char *path, const char *fmt, ...) {
    if (c->st != QR_OK) return -1;
    c->st = st;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    qr_errf(c->err, c->err_len, st, "json schema: %s at %.200s", msg, *path ? path : "#");
    return -1;
}

/* Writes a fresh rule name into name. */
static int new_name(jsc *c, char *name, const char *path) {
    if (++c->n_rules > MAX_RULES) return fail(c, QR_ERR_INVALID_ARG, path, "the schema needs more than %d rules", MAX_RULES);
    snprintf(name, NAME_LEN, "%s-r%d", c->prefix, c->n_rules);
    return 0;
}

/* Emits `name ::= body`. */
static int emit(jsc *c, const char *name, const sbuf *body, const char *path) {
    sb_printf(&c->out, "%s ::= %s\n", name, body->s && body->n ? body->s : "\"\"");
    if (body->oom || c->out.oom) return fail(c, QR_ERR_NOMEM, path, "out of memory");
    if (c->out.n > MAX_TEXT) return fail(c, QR_ERR_INVALID_ARG, path, "the grammar grows beyond %u bytes", MAX_TEXT);
    return 0;
}

/* Makes sure the shared rules in `bits` are emitted; they are referred to as "<prefix>-<name>". */
static void need(jsc *c, uint32_t bits) {
    if (bits & SH_VALUE) bits |= SH_STRING | SH_NUMBER | SH_BOOL | SH_NULL | SH_WS;
    if (bits & SH_STRING) bits |= SH_CHAR;
    const char *p = c->prefix;
    sbuf *o = &c->out;
    const uint32_t todo = bits & ~c->have;
    c->have |= bits;
    if (todo & SH_WS) sb_printf(o, "%s-ws ::= ( \" \" | \"\\n\" [ \\t]{0,16} )?\n", p);
    if (todo & SH_CHAR)
        sb_printf(o, "%s-char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n", p);
    if (todo & SH_STRING) sb_printf(o, "%s-string ::= \"\\\"\" %s-char* \"\\\"\"\n", p, p);
    if (todo & SH_INTEGER) sb_printf(o, "%s-integer ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} )\n", p);
    if (todo & SH_NUMBER)
        sb_printf(o, "%s-number ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?\n",
                  p);
    if (todo & SH_BOOL) sb_printf(o, "%s-boolean ::= \"true\" | \"false\"\n", p);
    if (todo & SH_NULL) sb_printf(o, "%s-null ::= \"null\"\n", p);
    if (todo & SH_VALUE) {
        sb_printf(o, "%s-value ::= %s-object | %s-array | %s-string | %s-number | %s-boolean | %s-null\n", p, p, p, p,
                  p, p, p);
        sb_printf(o, "%s-object ::= \"{\" %s-ws ( %s-string %s-ws \":\" %s-ws %s-value ( %s-ws \",\" %s-ws %s-string %s-ws \":\" "
                     "%s-ws %s-value )* )? %s-ws \"}\"\n",
                  p, p, p, p, p, p, p, p, p, p, p, p, p);
        sb_printf(o, "%s-array ::= \"[\" %s-ws ( %s-value ( %s-ws \",\" %s-ws %s-value )* )? %s-ws \"]\"\n", p, p, p, p, p,
                  p, p);
    }
}

/* ---- regular expressions (pattern) ------------------------------------------------------------ */

typedef struct rx {
    const char *s, *p, *end;
    sbuf *o;
    jsc *c;
    const char *path;
    int depth;
} rx;

static int rx_fail(rx *r, const char *what) {
    return fail(r->c, QR_ERR_UNSUPPORTED, r->path, "unsupported in 'pattern' (offset %d): %s", (int)(r->p - r->s), what);
}

/* Decodes one UTF-8 character (the pattern is valid UTF-8: jansson checked). */
static uint32_t rx_utf8(rx *r) {
    const unsigned char *s = (const unsigned char *)r->p;
    uint32_t c = s[0];
    int n = c < 0x80 ? 0 : c < 0xe0 ? 1 : c < 0xf0 ? 2 : 3;
    if (n) c &= 0x3f >> n;
    for (int k = 1; k <= n && r->p + k < r->end; k++) c = (c << 6) | (s[k] & 0x3f);
    r->p += n + 1;
    return c;
}

/* A code point inside a GBNF class. */
static void class_char(sbuf *o, uint32_t cp) {
    if (cp == '\\' || cp == ']' || cp == '[' || cp == '-' || cp == '^' || cp == '"') sb_printf(o, "\\%c", (char)cp);
    else if (cp < 0x20 || cp == 0x7f) sb_printf(o, "\\x%02X", cp);
    else if (cp < 0x80) sb_printf(o, "%c", (char)cp);
    else sb_printf(o, "\\U%08X", cp);
}

/* A literal code point of the pattern: the JSON text holds it escaped when it must be. */
static void rx_literal(sbuf *o, uint32_t cp) {
    char buf[8];
    if (cp == '"') sb_lit(o, "\\\"", 2);
    else if (cp == '\\') sb_lit(o, "\\\\", 2);
    else if (cp == '\n') sb_lit(o, "\\n", 2);
    else if (cp == '\t') sb_lit(o, "\\t", 2);
    else if (cp == '\r') sb_lit(o, "\\r", 2);
    else if (cp < 0x20) {
        snprintf(buf, sizeof buf, "\\u%04x", cp);
        sb_lit(o, buf, 6);
    } else {
        sb_put(o, "[");
        class_char(o, cp);
        sb_put(o, "]");
    }
}

/* Writes the ranges of a class escape (\d \w \s) into o (inside [...]); returns false for others. */
static bool class_escape_ranges(sbuf *o, char e) {
    if (e == 'd') sb_put(o, "0-9");
    else if (e == 'w') sb_put(o, "a-zA-Z0-9_");
    else if (e == 's') sb_put(o, " ");
    else return false;
    return true;
}

/* [class] of the pattern -> GBNF class without '"', '\' and control characters (a JSON string
 * holds those escaped only). */
static int rx_class(rx *r) {
    sbuf *o = r->o;
    r->p++; /* [ */
    bool neg = false;
    if (r->p < r->end && *r->p == '^') neg = true, r->p++;
    sb_put(o, neg ? "[^\"\\\\\\x00-\\x1F" : "[");
    bool any = neg, first = true;
    while (r->p < r->end && (*r->p != ']' || first)) {
        first = false;
        uint32_t lo, hi;
        if (*r->p == '\\') {
            if (r->p + 1 >= r->end) return rx_fail(r, "a trailing backslash");
            const char e = r->p[1];
            r->p += 2;
            if (class_escape_ranges(o, e)) {
                any = true;
                continue;
            }
            if (e == 'n' || e == 't' || e == 'r' || e == 'D' || e == 'W' || e == 'S' || e == 'b' || e == 'p' ||
                e == 'P')
                return rx_fail(r, "this escape inside a character class");
            lo = (unsigned char)e;
        } else {
            lo = rx_utf8(r);
        }
        hi = lo;
        if (r->p + 1 < r->end && *r->p == '-' && r->p[1] != ']') {
            r->p++;
            if (*r->p == '\\') {
                if (r->p + 1 >= r->end) return rx_fail(r, "a trailing backslash");
                hi = (unsigned char)r->p[1];
                r->p += 2;
            } else {
                hi = rx_utf8(r);
            }
            if (hi < lo) return rx_fail(r, "a backwards range");
        }
        /* cut out what JSON escapes: controls, '"' (0x22) and '\' (0x5c) */
        const uint32_t cuts[3][2] = {{0, 0x1f}, {0x22, 0x22}, {0x5c, 0x5c}};
        uint32_t a = lo;
        for (int k = 0; k < 3 && a <= hi; k++) {
            if (cuts[k][1] < a) continue;
            if (cuts[k][0] > a) {
                const uint32_t b = hi < cuts[k][0] - 1 ? hi : cuts[k][0] - 1;
                class_char(o, a);
                if (b > a) sb_put(o, "-"), class_char(o, b);
                any = true;
            }
            a = cuts[k][1] + 1;
        }
        if (a <= hi) {
            class_char(o, a);
            if (hi > a) sb_put(o, "-"), class_char(o, hi);
            any = true;
        }
    }
    if (r->p >= r->end) return rx_fail(r, "an unterminated character class");
    r->p++;
    if (!any) return rx_fail(r, "a character class that only holds characters JSON escapes");
    sb_put(o, "]");
    return 0;
}

static int rx_alt(rx *r);

/* One atom with its quantifier. */
static int rx_atom(rx *r) {
    sbuf *o = r->o;
    const char c = *r->p;
    if (c == '(') {
        if (++r->depth > 32) return rx_fail(r, "groups nested deeper than 32");
        r->p++;
        if (r->p < r->end && *r->p == '?') {
            if (r->p + 1 < r->end && r->p[1] == ':') r->p += 2;
            else if (r->p + 2 < r->end && (r->p[1] == 'P' || r->p[1] == '<') && r->p[2] != '=' && r->p[2] != '!') {
                while (r->p < r->end && *r->p != '>') r->p++; /* named group */
                if (r->p >= r->end) return rx_fail(r, "an unterminated group name");
                r->p++;
            } else {
                return rx_fail(r, "lookaround or group flags");
            }
        }
        sb_put(o, "( ");
        if (rx_alt(r) < 0) return -1;
        if (r->p >= r->end || *r->p != ')') return rx_fail(r, "a missing ')'");
        r->p++;
        r->depth--;
        sb_put(o, " )");
    } else if (c == '[') {
        if (rx_class(r) < 0) return -1;
    } else if (c == '.') {
        r->p++;
        sb_printf(o, "%s-char", r->c->prefix);
    } else if (c == '\\') {
        if (r->p + 1 >= r->end) return rx_fail(r, "a trailing backslash");
        const char e = r->p[1];
        r->p += 2;
        if (e == 'd' || e == 'w') {
            sb_put(o, "[");
            class_escape_ranges(o, e);
            sb_put(o, "]");
        } else if (e == 's') {
            sb_put(o, "( \" \" | \"\\\\t\" | \"\\\\n\" | \"\\\\r\" )");
        } else if (e == 'D') {
            sb_put(o, "[^0-9\"\\\\\\x00-\\x1F]");
        } else if (e == 'W') {
            sb_put(o, "[^a-zA-Z0-9_\"\\\\\\x00-\\x1F]");
        } else if (e == 'n' || e == 't' || e == 'r') {
            rx_literal(o, e == 'n' ? '\n' : e == 't' ? '\t' : '\r');
        } else if (strchr(".*+?()[]{}|^$\\/-\"", e)) {
            rx_literal(o, (unsigned char)e);
        } else {
            char what[64];
            snprintf(what, sizeof what, "the escape '\\%c'", e);
            return rx_fail(r, what);
        }
    } else if (c == '^' || c == '$') {
        return rx_fail(r, "an anchor that is not at the start or end of the pattern");
    } else if (c == '*' || c == '+' || c == '?') {
        return rx_fail(r, "a quantifier with nothing to repeat");
    } else {
        rx_literal(o, rx_utf8(r));
    }
    /* quantifier */
    if (r->p < r->end) {
        const char q = *r->p;
        if (q == '*' || q == '+' || q == '?') {
            r->p++;
            sb_printf(o, "%c", q);
        } else if (q == '{') {
            const char *save = r->p;
            long lo = -1, hi = -1;
            char *end;
            r->p++;
            if (r->p < r->end && *r->p >= '0' && *r->p <= '9') lo = strtol(r->p, &end, 10), r->p = end;
            bool comma = false;
            if (r->p < r->end && *r->p == ',') {
                comma = true;
                r->p++;
                if (r->p < r->end && *r->p >= '0' && *r->p <= '9') hi = strtol(r->p, &end, 10), r->p = end;
            }
            if (lo < 0 || r->p >= r->end || *r->p != '}') {
                r->p = save; /* not a quantifier: a literal '{' follows as the next atom */
                return 0;
            }
            r->p++;
            if (lo > MAX_COUNT || hi > MAX_COUNT) return rx_fail(r, "a repetition count above 10000");
            if (!comma) sb_printf(o, "{%ld}", lo);
            else if (hi < 0) sb_printf(o, "{%ld,}", lo);
            else sb_printf(o, "{%ld,%ld}", lo, hi);
        }
        if (r->p < r->end && *r->p == '?') r->p++; /* lazy: same language */
        else if (r->p < r->end && *r->p == '+' && (q == '*' || q == '+' || q == '?' || q == '{'))
            return rx_fail(r, "a possessive quantifier");
    }
    return 0;
}

static int rx_alt(rx *r) {
    for (;;) {
        while (r->p < r->end && *r->p != '|' && *r->p != ')') {
            if (r->p + 1 == r->end && *r->p == '$' && r->depth == 0) return 0;
            if (rx_atom(r) < 0) return -1;
            sb_put(r->o, " ");
        }
        if (r->p < r->end && *r->p == '|') {
            r->p++;
            sb_put(r->o, "| ");
            continue;
        }
        return 0;
    }
}

/* pattern -> GBNF expression for the whole JSON string (quotes included). */
static int gen_pattern(jsc *c, const char *pat, sbuf *o, const char *path) {
    need(c, SH_CHAR);
    const size_t n = strlen(pat);
    rx r = {.s = pat, .p = pat, .end = pat + n, .o = o, .c = c, .path = path};
    const bool start = n > 0 && pat[0] == '^';
    const bool end = n > 0 && pat[n - 1] == '$' && (n < 2 || pat[n - 2] != '\\');
    if (start) r.p++;
    sb_put(o, "\"\\\"\" ( ");
    if (!start) sb_printf(o, "%s-char* ", c->prefix);
    sb_put(o, "( ");
    if (rx_alt(&r) < 0) return -1;
    if (r.p < r.end && *r.p == ')') return rx_fail(&r, "an unbalanced ')'");
    sb_put(o, ") ");
    if (!end) sb_printf(o, "%s-char* ", c->prefix);
    sb_put(o, ") \"\\\"\"");
    return 0;
}

/* ---- formats ------------------------------------------------------------------------------ */

#define DATE_G "[0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] )"
#define TIME_G                                                                                          \
    "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,9} )? ( \"Z\" | [+-] ( [01] " \
    "[0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )"
#define HEX "[0-9a-fA-F]"
#define OCTET "( \"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9] [0-9] | [0-9] )"

static int gen_format(jsc *c, const char *fmt, sbuf *o, const char *path) {
    const char *g = NULL;
    if (!strcmp(fmt, "date")) g = DATE_G;
    else if (!strcmp(fmt, "time")) g = TIME_G;
    else if (!strcmp(fmt, "date-time")) g = DATE_G " \"T\" " TIME_G;
    else if (!strcmp(fmt, "uuid")) g = HEX "{8} \"-\" " HEX "{4} \"-\" " HEX "{4} \"-\" " HEX "{4} \"-\" " HEX "{12}";
    else if (!strcmp(fmt, "email")) /* RFC 5321's limits: a local part of <= 64 characters, DNS labels of <= 63 */
        g = "[a-zA-Z0-9._%+-]{1,64} \"@\" [a-zA-Z0-9-]{1,63} ( \".\" [a-zA-Z0-9-]{1,63} )+";
    else if (!strcmp(fmt, "ipv4")) g = OCTET " \".\" " OCTET " \".\" " OCTET " \".\" " OCTET;
    else if (!strcmp(fmt, "uri")) g = "[a-zA-Z] [a-zA-Z0-9+.-]* \":\" [^\"\\\\\\x00-\\x20]+";
    if (!g) return fail(c, QR_ERR_UNSUPPORTED, path, "unsupported format '%.64s'", fmt);
    sb_printf(o, "\"\\\"\" %s \"\\\"\"", g);
    return 0;
}

/* ---- schemas ------------------------------------------------------------------------------ */

static int gen(jsc *c, const json_t *s, const char *path, char *name);
static int gen_into(jsc *c, const json_t *s, const char *path, const char *name);

static const char *const known_keys[] = {
    "type", "enum", "const", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems",
    "maxItems", "minLength", "maxLength", "pattern", "format", "minimum", "exclusiveMinimum", "$ref", "$defs",
    "definitions", "anyOf", "oneOf", "allOf", "nullable", "title", "description", "examples", "default", "$schema",
    "$id", "$comment", "readOnly", "writeOnly", "deprecated", "strict", NULL};

/* Keywords that only annotate (allowed next to $ref / anyOf). */
static bool is_annotation(const char *k) {
    static const char *const ann[] = {"title", "description", "examples", "default", "$schema", "$id", "$comment",
                                      "$defs", "definitions", "readOnly", "writeOnly", "deprecated", "strict", NULL};
    for (int i = 0; ann[i]; i++)
        if (!strcmp(k, ann[i])) return true;
    return false;
}

/* Child path "path/key" (JSON-pointer style, for messages). */
static void sub_path(char *out, size_t cap, const char *path, const char *key) {
    snprintf(out, cap, "%s/%.60s", path, key);
}

/* Resolves a local $ref ("#", "#/$defs/x", any "#/a/b" pointer). NULL when it does not resolve. */
static const json_t *resolve(const jsc *c, const char *ref) {
    if (ref[0] != '#') return NULL;
    const json_t *cur = c->root;
    const char *p = ref + 1;
    while (*p == '/') {
        p++;
        char key[256];
        size_t n = 0;
        while (*p && *p != '/' && n < sizeof key - 1) {
            if (p[0] == '~' && p[1] == '0') key[n++] = '~', p += 2;
            else if (p[0] == '~' && p[1] == '1') key[n++] = '/', p += 2;
            else key[n++] = *p++;
        }
        key[n] = 0;
        if (json_is_object(cur)) cur = json_object_get(cur, key);
        else if (json_is_array(cur)) {
            char *end;
            const long i = strtol(key, &end, 10);
            cur = *end || i < 0 ? NULL : json_array_get(cur, (size_t)i);
        } else cur = NULL;
        if (!cur) return NULL;
    }
    return *p ? NULL : cur;
}

/* Gets a non-negative integer keyword (absent: def). -1 on a bad value. */
static int get_count(jsc *c, const json_t *s, const char *key, long def, long *out, const char *path) {
    const json_t *v = json_object_get(s, key);
    *out = def;
    if (!v) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return fail(c, QR_ERR_INVALID_ARG, path, "'%s' must be a non-negative integer", key);
    *out = json_integer_value(v) > MAX_COUNT ? (def < 0 ? -1 : MAX_COUNT) : (long)json_integer_value(v);
    if (def >= 0 && json_integer_value(v) > MAX_COUNT)
        return fail(c, QR_ERR_UNSUPPORTED, path, "'%s' above %d", key, MAX_COUNT);
    return 0;
}

/* The JSON text of v as a GBNF literal. */
static int lit_value(jsc *c, const json_t *v, sbuf *o, const char *path) {
    char *t = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!t) return fail(c, QR_ERR_NOMEM, path, "out of memory");
    sb_lit(o, t, strlen(t));
    free(t);
    return 0;
}

/* Whether JSON value v has type t (JSON-schema names). */
static bool value_has_type(const json_t *v, const char *t) {
    if (!strcmp(t, "string")) return json_is_string(v);
    if (!strcmp(t, "integer")) return json_is_integer(v) || (json_is_real(v) && json_real_value(v) == (double)(long long)json_real_value(v));
    if (!strcmp(t, "number")) return json_is_number(v);
    if (!strcmp(t, "boolean")) return json_is_boolean(v);
    if (!strcmp(t, "null")) return json_is_null(v);
    if (!strcmp(t, "object")) return json_is_object(v);
    if (!strcmp(t, "array")) return json_is_array(v);
    return false;
}

static int gen_object(jsc *c, const json_t *s, sbuf *o, const char *path) {
    const char *p = c->prefix;
    const json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    const json_t *addl = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) return fail(c, QR_ERR_INVALID_ARG, path, "'properties' must be an object");
    if (req && !json_is_array(req)) return fail(c, QR_ERR_INVALID_ARG, path, "'required' must be an array");
    if (addl && !json_is_boolean(addl) && !json_is_object(addl))
        return fail(c, QR_ERR_INVALID_ARG, path, "'additionalProperties' must be a boolean or a schema");
    const size_t n = props ? json_object_size(props) : 0;
    if (n > MAX_PROPS)
        return fail(c, QR_ERR_UNSUPPORTED, path, "an object with %zu properties (at most %d)", n, MAX_PROPS);
    size_t i;
    const json_t *e;
    json_array_foreach(req, i, e) {
        if (!json_is_string(e)) return fail(c, QR_ERR_INVALID_ARG, path, "'required' must hold strings");
        if (!props || !json_object_get(props, json_string_value(e)))
            return fail(c, QR_ERR_UNSUPPORTED, path, "required property '%.64s' is not declared in 'properties'",
                        json_string_value(e));
    }
    need(c, SH_WS);
    /* the extra-property rule, when additionalProperties allows them */
    char extra[NAME_LEN] = "";
    if (!props && !addl) addl = json_true(); /* a bare object schema: any members */
    if (addl && !json_is_false(addl)) {
        char vname[NAME_LEN], ap[600];
        sub_path(ap, sizeof ap, path, "additionalProperties");
        if (json_is_true(addl) || json_object_size(addl) == 0) {
            need(c, SH_VALUE);
            snprintf(vname, sizeof vname, "%s-value", p);
        } else if (gen(c, addl, ap, vname) < 0) {
            return -1;
        }
        need(c, SH_STRING);
        if (new_name(c, extra, path) < 0) return -1;
        sbuf b = {0};
        sb_printf(&b, "%s-string %s-ws \":\" %s-ws %s", p, p, p, vname);
        const int rc = emit(c, extra, &b, path);
        free(b.s);
        if (rc < 0) return -1;
    }
    /* kv(i) rules, then R(n) .. R(0) and F(n) .. F(0) */
    char (*kv)[NAME_LEN] = calloc(n + 1, NAME_LEN);
    bool *required = calloc(n + 1, 1);
    char (*R)[NAME_LEN] = calloc(n + 1, NAME_LEN), (*F)[NAME_LEN] = calloc(n + 1, NAME_LEN);
    int rc = -1;
    sbuf b = {0};
    if (!kv || !required || !R || !F) {
        fail(c, QR_ERR_NOMEM, path, "out of memory");
        goto out;
    }
    const char *key;
    json_t *ps;
    i = 0;
    json_object_foreach((json_t *)props, key, ps) {
        char pp[600], vname[NAME_LEN];
        snprintf(pp, sizeof pp, "%s/properties/%.60s", path, key);
        size_t j;
        json_array_foreach(req, j, e) if (!strcmp(json_string_value(e), key)) required[i] = true;
        if (gen(c, ps, pp, vname) < 0 || new_name(c, kv[i], pp) < 0) goto out;
        sb_reset(&b);
        json_t *ks = json_string(key);
        if (!ks || lit_value(c, ks, &b, pp) < 0) {
            json_decref(ks);
            goto out;
        }
        json_decref(ks);
        sb_printf(&b, " %s-ws \":\" %s-ws %s", p, p, vname);
        if (emit(c, kv[i], &b, pp) < 0) goto out;
        i++;
    }
    rc = -1;
    /* R(n): extra properties after the declared ones */
    if (new_name(c, R[n], path) < 0) goto out;
    sb_reset(&b);
    if (*extra) sb_printf(&b, "( %s-ws \",\" %s-ws %s )*", p, p, extra);
    if (emit(c, R[n], &b, path) < 0) goto out;
    for (size_t k = n; k-- > 0;) {
        if (new_name(c, R[k], path) < 0) goto out;
        sb_reset(&b);
        if (required[k]) sb_printf(&b, "%s-ws \",\" %s-ws %s %s", p, p, kv[k], R[k + 1]);
        else sb_printf(&b, "( %s-ws \",\" %s-ws %s )? %s", p, p, kv[k], R[k + 1]);
        if (emit(c, R[k], &b, path) < 0) goto out;
    }
    if (new_name(c, F[n], path) < 0) goto out;
    sb_reset(&b);
    if (*extra) sb_printf(&b, "%s %s | \"\"", extra, R[n]);
    if (emit(c, F[n], &b, path) < 0) goto out;
    for (size_t k = n; k-- > 0;) {
        if (new_name(c, F[k], path) < 0) goto out;
        sb_reset(&b);
        sb_printf(&b, "%s %s", kv[k], R[k + 1]);
        if (!required[k]) sb_printf(&b, " | %s", F[k + 1]);
        if (emit(c, F[k], &b, path) < 0) goto out;
    }
    sb_printf(o, "\"{\" %s-ws %s %s-ws \"}\"", p, F[0], p);
    rc = 0;
out:
    free(b.s);
    free(kv);
    free(required);
    free(R);
    free(F);
    return rc;
}

static int gen_array(jsc *c, const json_t *s, sbuf *o, const char *path) {
    const char *p = c->prefix;
    const json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    long min, max;
    if (get_count(c, s, "minItems", 0, &min, path) < 0 || get_count(c, s, "maxItems", -1, &max, path) < 0) return -1;
    if (max >= 0 && max < min) return fail(c, QR_ERR_INVALID_ARG, path, "'maxItems' is below 'minItems'");
    need(c, SH_WS);
    char item[NAME_LEN] = "", ip[600];
    if (items && !json_is_false(items)) {
        if (!json_is_object(items) && !json_is_true(items))
            return fail(c, QR_ERR_UNSUPPORTED, path, "'items' must be a schema (an array of schemas is 'prefixItems')");
        sub_path(ip, sizeof ip, path, "items");
        if (gen(c, items, ip, item) < 0) return -1;
    } else if (!items && !prefix) {
        need(c, SH_VALUE);
        snprintf(item, sizeof item, "%s-value", p);
    }
    if (prefix) {
        if (!json_is_array(prefix) || json_array_size(prefix) == 0)
            return fail(c, QR_ERR_INVALID_ARG, path, "'prefixItems' must be a non-empty array");
        const long k = (long)json_array_size(prefix);
        if (min < k && json_object_get(s, "minItems"))
            return fail(c, QR_ERR_UNSUPPORTED, path, "'minItems' below the number of 'prefixItems'");
        if (max >= 0 && max < k) return fail(c, QR_ERR_UNSUPPORTED, path, "'maxItems' below the number of 'prefixItems'");
        sb_put(o, "\"[\" ");
        size_t i;
        const json_t *e;
        json_array_foreach(prefix, i, e) {
            char pp[600], nm[NAME_LEN];
            snprintf(pp, sizeof pp, "%s/prefixItems/%zu", path, i);
            if (gen(c, e, pp, nm) < 0) return -1;
            sb_printf(o, "%s%s-ws %s ", i ? "\",\" " : "", p, nm);
        }
        if (*item) {
            const long more_min = min > k ? min - k : 0, more_max = max < 0 ? -1 : max - k;
            if (more_max < 0) sb_printf(o, "( %s-ws \",\" %s-ws %s ){%ld,} ", p, p, item, more_min);
            else if (more_max > 0) sb_printf(o, "( %s-ws \",\" %s-ws %s ){%ld,%ld} ", p, p, item, more_min, more_max);
        }
        sb_printf(o, "%s-ws \"]\"", p);
        return 0;
    }
    if (!*item) { /* items: false -> only [] */
        if (min > 0) return fail(c, QR_ERR_INVALID_ARG, path, "'items': false with 'minItems' > 0");
        sb_printf(o, "\"[\" %s-ws \"]\"", p);
        return 0;
    }
    if (max == 0) {
        sb_printf(o, "\"[\" %s-ws \"]\"", p);
        return 0;
    }
    sbuf more = {0};
    const long mmin = min > 0 ? min - 1 : 0;
    if (max < 0) sb_printf(&more, "( %s-ws \",\" %s-ws %s ){%ld,}", p, p, item, mmin);
    else sb_printf(&more, "( %s-ws \",\" %s-ws %s ){%ld,%ld}", p, p, item, mmin, max - 1);
    if (min > 0) sb_printf(o, "\"[\" %s-ws %s %s %s-ws \"]\"", p, item, more.s ? more.s : "", p);
    else sb_printf(o, "\"[\" %s-ws ( %s %s )? %s-ws \"]\"", p, item, more.s ? more.s : "", p);
    free(more.s);
    return 0;
}

static int gen_string(jsc *c, const json_t *s, sbuf *o, const char *path) {
    const json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    long min, max;
    if (get_count(c, s, "minLength", 0, &min, path) < 0 || get_count(c, s, "maxLength", -1, &max, path) < 0) return -1;
    if (max >= 0 && max < min) return fail(c, QR_ERR_INVALID_ARG, path, "'maxLength' is below 'minLength'");
    const bool lengths = json_object_get(s, "minLength") || json_object_get(s, "maxLength");
    if ((pat != NULL) + (fmt != NULL) + lengths > 1)
        return fail(c, QR_ERR_UNSUPPORTED, path, "'pattern', 'format' and 'minLength'/'maxLength' together");
    if (pat) {
        if (!json_is_string(pat)) return fail(c, QR_ERR_INVALID_ARG, path, "'pattern' must be a string");
        return gen_pattern(c, json_string_value(pat), o, path);
    }
    if (fmt) {
        if (!json_is_string(fmt)) return fail(c, QR_ERR_INVALID_ARG, path, "'format' must be a string");
        return gen_format(c, json_string_value(fmt), o, path);
    }
    need(c, SH_STRING);
    if (!lengths) sb_printf(o, "%s-string", c->prefix);
    else if (max < 0) sb_printf(o, "\"\\\"\" %s-char{%ld,} \"\\\"\"", c->prefix, min);
    else sb_printf(o, "\"\\\"\" %s-char{%ld,%ld} \"\\\"\"", c->prefix, min, max);
    return 0;
}

/* integer / number with the sign bounds we support (minimum 0, exclusiveMinimum 0 for integers,
 * minimum 1 for integers). */
static int gen_numeric(jsc *c, const json_t *s, bool integer, sbuf *o, const char *path) {
    const json_t *mn = json_object_get(s, "minimum"), *xmn = json_object_get(s, "exclusiveMinimum");
    const char *p = c->prefix;
    if (mn && xmn) return fail(c, QR_ERR_UNSUPPORTED, path, "'minimum' with 'exclusiveMinimum'");
    const json_t *b = mn ? mn : xmn;
    if (!b) {
        need(c, integer ? SH_INTEGER : SH_NUMBER);
        sb_printf(o, "%s-%s", p, integer ? "integer" : "number");
        return 0;
    }
    if (!json_is_number(b)) return fail(c, QR_ERR_INVALID_ARG, path, "'%s' must be a number", mn ? "minimum" : "exclusiveMinimum");
    const double v = json_number_value(b);
    if (mn && v == 0) {
        sb_put(o, integer ? "( \"0\" | [1-9] [0-9]{0,15} )"
                          : "( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?");
        return 0;
    }
    if (integer && ((mn && v == 1) || (xmn && v == 0))) {
        sb_put(o, "[1-9] [0-9]{0,15}");
        return 0;
    }
    return fail(c, QR_ERR_UNSUPPORTED, path, "'%s': %g (only minimum 0, or minimum 1 / exclusiveMinimum 0 for integers)",
                mn ? "minimum" : "exclusiveMinimum", v);
}

/* The body for one type name. */
static int gen_type(jsc *c, const json_t *s, const char *t, sbuf *o, const char *path) {
    if (!strcmp(t, "object")) return gen_object(c, s, o, path);
    if (!strcmp(t, "array")) return gen_array(c, s, o, path);
    if (!strcmp(t, "string")) return gen_string(c, s, o, path);
    if (!strcmp(t, "integer")) return gen_numeric(c, s, true, o, path);
    if (!strcmp(t, "number")) return gen_numeric(c, s, false, o, path);
    if (!strcmp(t, "boolean")) {
        need(c, SH_BOOL);
        sb_printf(o, "%s-boolean", c->prefix);
        return 0;
    }
    if (!strcmp(t, "null")) {
        need(c, SH_NULL);
        sb_printf(o, "%s-null", c->prefix);
        return 0;
    }
    return fail(c, QR_ERR_INVALID_ARG, path, "unknown type '%.32s'", t);
}

/* Body of schema s (written to o). */
static int gen_body(jsc *c, const json_t *s, sbuf *o, const char *path) {
    if (json_is_true(s)) {
        need(c, SH_VALUE);
        sb_printf(o, "%s-value", c->prefix);
        return 0;
    }
    if (json_is_false(s)) return fail(c, QR_ERR_INVALID_ARG, path, "the schema false accepts no value");
    if (!json_is_object(s)) return fail(c, QR_ERR_INVALID_ARG, path, "a schema must be an object or a boolean");
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        bool ok = false;
        for (int i = 0; known_keys[i] && !ok; i++) ok = !strcmp(k, known_keys[i]);
        if (!ok) return fail(c, QR_ERR_UNSUPPORTED, path, "unsupported keyword '%.64s'", k);
    }
    const json_t *ref = json_object_get(s, "$ref");
    const json_t *any = json_object_get(s, "anyOf");
    if (!any) any = json_object_get(s, "oneOf");
    const json_t *all = json_object_get(s, "allOf");
    if (ref || any || all) {
        const char *which = ref ? "$ref" : all ? "allOf" : json_object_get(s, "anyOf") ? "anyOf" : "oneOf";
        json_object_foreach((json_t *)s, k, v) if (strcmp(k, which) && !is_annotation(k)) return fail(
            c, QR_ERR_UNSUPPORTED, path, "'%s' next to '%.64s'", which, k);
    }
    if (ref) {
        if (!json_is_string(ref)) return fail(c, QR_ERR_INVALID_ARG, path, "'$ref' must be a string");
        const char *r = json_string_value(ref);
        for (int32_t i = 0; i < c->n_refs; i++)
            if (!strcmp(c->refs[i].ref, r)) {
                sb_put(o, c->refs[i].name);
                return 0;
            }
        const json_t *target = resolve(c, r);
        if (!target)
            return fail(c, r[0] == '#' ? QR_ERR_INVALID_ARG : QR_ERR_UNSUPPORTED, path,
                        r[0] == '#' ? "'$ref' '%.100s' does not resolve" : "'$ref' '%.100s' is not local (only #/...)",
                        r);
        if (c->n_refs == c->cap_refs) {
            const int32_t nc = c->cap_refs ? c->cap_refs * 2 : 16;
            ref_ent *nr = realloc(c->refs, sizeof *nr * (size_t)nc);
            if (!nr) return fail(c, QR_ERR_NOMEM, path, "out of memory");
            c->refs = nr;
            c->cap_refs = nc;
        }
        ref_ent *re = &c->refs[c->n_refs];
        re->ref = strdup(r);
        if (!re->ref) return fail(c, QR_ERR_NOMEM, path, "out of memory");
        if (new_name(c, re->name, path) < 0) {
            free(re->ref);
            return -1;
        }
        c->n_refs++;
        char name[NAME_LEN];
        memcpy(name, re->name, NAME_LEN);
        char rp[600];
        snprintf(rp, sizeof rp, "%.300s", r);
        if (gen_into(c, target, rp, name) < 0) return -1;
        sb_put(o, name);
        return 0;
    }
    if (any || all) {
        const json_t *arr = any ? any : all;
        const char *which = any ? (json_object_get(s, "anyOf") ? "anyOf" : "oneOf") : "allOf";
        if (!json_is_array(arr) || json_array_size(arr) == 0)
            return fail(c, QR_ERR_INVALID_ARG, path, "'%s' must be a non-empty array", which);
        if (all && json_array_size(arr) != 1)
            return fail(c, QR_ERR_UNSUPPORTED, path, "'allOf' with more than one schema");
        size_t i;
        const json_t *e;
        sb_put(o, "( ");
        json_array_foreach(arr, i, e) {
            char pp[600], nm[NAME_LEN];
            snprintf(pp, sizeof pp, "%s/%s/%zu", path, which, i);
            if (gen(c, e, pp, nm) < 0) return -1;
            sb_printf(o, "%s%s", i ? " | " : "", nm);
        }
        sb_put(o, " )");
        return 0;
    }
    const json_t *cst = json_object_get(s, "const"), *en = json_object_get(s, "enum");
    const json_t *type = json_object_get(s, "type");
    const json_t *nullable = json_object_get(s, "nullable");
    if (type && !json_is_string(type) && !json_is_array(type))
        return fail(c, QR_ERR_INVALID_ARG, path, "'type' must be a string or an array of strings");
    if (cst || en) {
        if (cst && en) return fail(c, QR_ERR_UNSUPPORTED, path, "'const' with 'enum'");
        if (en && (!json_is_array(en) || json_array_size(en) == 0))
            return fail(c, QR_ERR_INVALID_ARG, path, "'enum' must be a non-empty array");
        if (en && json_array_size(en) > MAX_ENUM)
            return fail(c, QR_ERR_UNSUPPORTED, path, "'enum' with more than %d values", MAX_ENUM);
        int n = 0;
        sb_put(o, "( ");
        const size_t cnt = cst ? 1 : json_array_size(en);
        for (size_t i = 0; i < cnt; i++) {
            const json_t *val = cst ? cst : json_array_get(en, i);
            bool typed = !type;
            if (json_is_string(type)) typed = value_has_type(val, json_string_value(type));
            for (size_t t = 0; json_is_array(type) && t < json_array_size(type); t++)
                if (json_is_string(json_array_get(type, t)) &&
                    value_has_type(val, json_string_value(json_array_get(type, t))))
                    typed = true;
            if (!typed) continue;
            if (n++) sb_put(o, " | ");
            if (lit_value(c, val, o, path) < 0) return -1;
        }
        sb_put(o, " )");
        if (n == 0) return fail(c, QR_ERR_INVALID_ARG, path, "no 'enum'/'const' value has the schema's 'type'");
        return 0;
    }
    if (type) {
        const size_t nt = json_is_array(type) ? json_array_size(type) : 1;
        if (nt == 0) return fail(c, QR_ERR_INVALID_ARG, path, "'type' is an empty array");
        const bool alt = nt > 1 || json_is_true(nullable);
        if (alt) sb_put(o, "( ");
        for (size_t i = 0; i < nt; i++) {
            const json_t *t = json_is_array(type) ? json_array_get(type, i) : type;
            if (!json_is_string(t)) return fail(c, QR_ERR_INVALID_ARG, path, "'type' must hold strings");
            if (i) sb_put(o, " | ");
            if (gen_type(c, s, json_string_value(t), o, path) < 0) return -1;
        }
        if (json_is_true(nullable)) {
            need(c, SH_NULL);
            sb_printf(o, " | %s-null", c->prefix);
        }
        if (alt) sb_put(o, " )");
        return 0;
    }
    /* no type: guess from the keywords, else any value */
    if (json_object_get(s, "properties") || json_object_get(s, "required") ||
        json_object_get(s, "additionalProperties"))
        return gen_type(c, s, "object", o, path);
    if (json_object_get(s, "items") || json_object_get(s, "prefixItems") || json_object_get(s, "minItems") ||
        json_object_get(s, "maxItems"))
        return gen_type(c, s, "array", o, path);
    if (json_object_get(s, "pattern") || json_object_get(s, "format") || json_object_get(s, "minLength") ||
        json_object_get(s, "maxLength"))
        return gen_type(c, s, "string", o, path);
    if (json_object_get(s, "minimum") || json_object_get(s, "exclusiveMinimum"))
        return gen_type(c, s, "number", o, path);
    need(c, SH_VALUE);
    sb_printf(o, "%s-value", c->prefix);
    return 0;
}

static int gen_into(jsc *c, const json_t *s, const char *path, const char *name) {
    if (++c->depth > MAX_DEPTH) return fail(c, QR_ERR_INVALID_ARG, path, "schemas nested deeper than %d", MAX_DEPTH);
    sbuf b = {0};
    int rc = gen_body(c, s, &b, path);
    if (rc == 0) rc = emit(c, name, &b, path);
    free(b.s);
    c->depth--;
    return rc;
}

/* Compiles s into a new rule; its name goes to name. */
static int gen(jsc *c, const json_t *s, const char *path, char *name) {
    if (new_name(c, name, path) < 0) return -1;
    return gen_into(c, s, path, name);
}

qr_status qr_json_schema_to_gbnf(const json_t *schema, const char *prefix, char **gbnf, char *err, size_t err_len) {
    *gbnf = NULL;
    if (!prefix) prefix = "root";
    const size_t pl = strlen(prefix);
    if (pl == 0 || pl > 40 || strspn(prefix, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != pl)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "json schema: the rule prefix must be 1-40 name characters");
    if (!schema) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "json schema: no schema");
    jsc c = {.root = schema, .err = err, .err_len = err_len};
    memcpy(c.prefix, prefix, pl + 1);
    char top[NAME_LEN];
    const int rc = gen(&c, schema, "#", top);
    if (rc == 0) sb_printf(&c.out, "%s ::= %s\n", prefix, top);
    for (int32_t i = 0; i < c.n_refs; i++) free(c.refs[i].ref);
    free(c.refs);
    if (rc == 0 && c.out.oom) {
        c.st = QR_ERR_NOMEM;
        qr_errf(err, err_len, QR_ERR_NOMEM, "json schema: out of memory");
    }
    if (rc < 0 || c.st != QR_OK) {
        free(c.out.s);
        return c.st != QR_OK ? c.st : QR_ERR_INVALID_ARG;
    }
    *gbnf = c.out.s;
    return QR_OK;
}

qr_status qr_json_schema_compile(const json_t *schema, qr_grammar **out, char *err, size_t err_len) {
    *out = NULL;
    char *text = NULL;
    qr_status st = qr_json_schema_to_gbnf(schema, "root", &text, err, err_len);
    if (st != QR_OK) return st;
    char gerr[512];
    st = qr_grammar_parse(text, strlen(text), "root", out, gerr, sizeof gerr);
    free(text);
    if (st == QR_ERR_INVALID_ARG && strstr(gerr, "left-recursive"))
        return qr_errf(err, err_len, st, "json schema: a $ref cycle never produces a value (%s)", gerr);
    if (st != QR_OK) return qr_errf(err, err_len, st, "json schema: %s", gerr);
    return QR_OK;
}

qr_status qr_json_object_grammar(qr_grammar **out, char *err, size_t err_len) {
    json_t *s = json_pack("{s:s}", "type", "object");
    if (!s) return qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory");
    const qr_status st = qr_json_schema_compile(s, out, err, err_len);
    json_decref(s);
    return st;
}
