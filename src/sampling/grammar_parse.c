/* grammar_parse.c — GBNF text -> qr_grammar (see grammar.h for the accepted syntax).
 *
 * Recursive descent over the text. Groups and repetitions are lowered into generated rules:
 *   X*      ->  S ::= X S |            (right recursion: the matcher's tail call keeps the stack flat)
 *   X+      ->  X S
 *   X?      ->  O ::= X |
 *   X{m,n}  ->  m copies of X, then O(n-m) where O(k) ::= X O(k-1) |
 * Afterwards every referenced rule must be defined, and no rule may reach itself through a chain
 * of leftmost references (left recursion), which the pushdown matcher could never expand. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sampling/grammar_internal.h"
#include "util/util.h"

#define MAX_NEST 128        /* nested parentheses */
#define MAX_REPEAT 10000    /* m and n of {m,n} */
#define MAX_RULES (1 << 20) /* rules after lowering */
#define MAX_ELEMS (1 << 24) /* elements after lowering */

typedef struct ivec {
    int32_t *v;
    int32_t n, cap;
} ivec;

typedef struct brule {
    char *name;
    ivec *alts;      /* [n_alts] element runs (no END yet) */
    int32_t n_alts, cap_alts;
    int32_t def_line; /* 0 = not defined yet */
    int32_t use_line; /* first reference */
    int32_t n_sub;    /* generated sub-rules so far (for their names) */
} brule;

typedef struct parser {
    const char *p, *end;
    int32_t line;
    const char *line_start;
    brule *rules;
    int32_t n_rules, cap_rules;
    int32_t *hash;    /* [hash_cap] rule id + 1 of user-named rules, 0 = empty */
    int32_t hash_cap;
    gclass *classes;
    int32_t n_classes, cap_classes;
    ivec ranges;      /* pairs lo, hi */
    int64_t n_elems;
    int32_t depth;
    char *err;
    size_t err_len;
    qr_status st;     /* QR_OK until the first error */
} parser;

static bool ivec_push(ivec *a, int32_t x) {
    if (a->n == a->cap) {
        const int32_t nc = a->cap ? a->cap * 2 : 8;
        int32_t *nv = realloc(a->v, sizeof *nv * (size_t)nc);
        if (!nv) return false;
        a->v = nv;
        a->cap = nc;
    }
    a->v[a->n++] = x;
    return true;
}

/* Records the first error: "grammar: line L, column C: message". Returns -1. */
static int QR_PRINTF(2, 3) perr(parser *P, const char *fmt, ...) {
    if (P->st != QR_OK) return -1;
    P->st = QR_ERR_INVALID_ARG;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    qr_errf(P->err, P->err_len, QR_ERR_INVALID_ARG, "grammar: line %d, column %d: %s", P->line,
            (int)(P->p - P->line_start) + 1, msg);
    return -1;
}

static int nomem(parser *P) {
    if (P->st == QR_OK) {
        P->st = QR_ERR_NOMEM;
        qr_errf(P->err, P->err_len, QR_ERR_NOMEM, "grammar: out of memory");
    }
    return -1;
}

/* ---- rules ---------------------------------------------------------------------------------- */

static uint32_t name_hash(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

/* Appends a rule named name[0..n) (not entered in the name table). Returns its id or -1. */
static int32_t rule_new(parser *P, const char *name, size_t n) {
    if (P->n_rules >= MAX_RULES) return perr(P, "more than %d rules", MAX_RULES);
    if (P->n_rules == P->cap_rules) {
        const int32_t nc = P->cap_rules ? P->cap_rules * 2 : 64;
        brule *nr = realloc(P->rules, sizeof *nr * (size_t)nc);
        if (!nr) return nomem(P);
        P->rules = nr;
        P->cap_rules = nc;
    }
    brule *r = &P->rules[P->n_rules];
    memset(r, 0, sizeof *r);
    r->name = malloc(n + 1);
    if (!r->name) return nomem(P);
    memcpy(r->name, name, n);
    r->name[n] = 0;
    return P->n_rules++;
}

static bool hash_grow(parser *P) {
    const int32_t nc = P->hash_cap ? P->hash_cap * 2 : 256;
    int32_t *nh = calloc((size_t)nc, sizeof *nh);
    if (!nh) return false;
    for (int32_t i = 0; i < P->hash_cap; i++) {
        const int32_t id = P->hash[i] - 1;
        if (id < 0) continue;
        uint32_t h = name_hash(P->rules[id].name, strlen(P->rules[id].name)) & (uint32_t)(nc - 1);
        while (nh[h]) h = (h + 1) & (uint32_t)(nc - 1);
        nh[h] = id + 1;
    }
    free(P->hash);
    P->hash = nh;
    P->hash_cap = nc;
    return true;
}

/* The id of the user rule name[0..n), created on first sight. -1 on error. */
static int32_t rule_get(parser *P, const char *name, size_t n) {
    if (P->hash_cap == 0 || (P->n_rules + 1) * 2 > P->hash_cap)
        if (!hash_grow(P)) return nomem(P);
    uint32_t h = name_hash(name, n) & (uint32_t)(P->hash_cap - 1);
    while (P->hash[h]) {
        const brule *r = &P->rules[P->hash[h] - 1];
        if (strlen(r->name) == n && !memcmp(r->name, name, n)) return P->hash[h] - 1;
        h = (h + 1) & (uint32_t)(P->hash_cap - 1);
    }
    const int32_t id = rule_new(P, name, n);
    if (id < 0) return -1;
    P->hash[h] = id + 1;
    return id;
}

/* A generated rule named after `parent` ("parent/N"). */
static int32_t rule_sub(parser *P, int32_t parent) {
    char name[96];
    const int k = ++P->rules[parent].n_sub;
    snprintf(name, sizeof name, "%.80s/%d", P->rules[parent].name, k);
    return rule_new(P, name, strlen(name));
}

/* Adds alternative seq (moved: *seq is emptied) to rule id. */
static int rule_add_alt(parser *P, int32_t id, ivec *seq) {
    brule *r = &P->rules[id];
    if (r->n_alts == r->cap_alts) {
        const int32_t nc = r->cap_alts ? r->cap_alts * 2 : 2;
        ivec *na = realloc(r->alts, sizeof *na * (size_t)nc);
        if (!na) return nomem(P);
        r->alts = na;
        r->cap_alts = nc;
    }
    P->n_elems += seq->n + 1;
    if (P->n_elems > MAX_ELEMS) return perr(P, "the grammar is too large (more than %d elements)", MAX_ELEMS);
    r->alts[r->n_alts++] = *seq;
    memset(seq, 0, sizeof *seq);
    return 0;
}

/* ---- character classes ---------------------------------------------------------------------- */

/* Adds a class of ranges[0..2n) and returns its element, or -1. */
static int32_t class_new(parser *P, const uint32_t *ranges, int32_t n, bool negated) {
    if (P->n_classes == P->cap_classes) {
        const int32_t nc = P->cap_classes ? P->cap_classes * 2 : 64;
        gclass *ncl = realloc(P->classes, sizeof *ncl * (size_t)nc);
        if (!ncl) return nomem(P);
        P->classes = ncl;
        P->cap_classes = nc;
    }
    gclass *c = &P->classes[P->n_classes];
    memset(c, 0, sizeof *c);
    c->range_off = P->ranges.n / 2;
    c->n_ranges = n;
    c->negated = negated;
    for (int32_t i = 0; i < 2 * n; i++)
        if (!ivec_push(&P->ranges, (int32_t)ranges[i])) return nomem(P);
    for (uint32_t cp = 0; cp < 128; cp++) {
        bool in = false;
        for (int32_t i = 0; i < n && !in; i++) in = cp >= ranges[2 * i] && cp <= ranges[2 * i + 1];
        if (in != negated) c->ascii[cp >> 6] |= 1ull << (cp & 63);
    }
    return GE_MAKE(GE_CLASS, P->n_classes++);
}

/* ---- lexing ------------------------------------------------------------------------------- */

static bool at_end(const parser *P) { return P->p >= P->end; }

static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

static void newline(parser *P) {
    P->p++;
    P->line++;
    P->line_start = P->p;
}

/* Skips blanks and comments; newlines too when `nl`. */
static void skip_space(parser *P, bool nl) {
    while (!at_end(P)) {
        const char c = *P->p;
        if (c == ' ' || c == '\t' || c == '\r') P->p++;
        else if (c == '#')
            while (!at_end(P) && *P->p != '\n') P->p++;
        else if (c == '\n' && nl) newline(P);
        else break;
    }
}

/* Decodes one UTF-8 character at P->p into *cp. -1 on invalid UTF-8. */
static int utf8_next(parser *P, uint32_t *cp) {
    const unsigned char *s = (const unsigned char *)P->p;
    const size_t left = (size_t)(P->end - P->p);
    unsigned c = s[0];
    int n;
    uint32_t v, min;
    if (c < 0x80) {
        *cp = c;
        P->p++;
        return 0;
    }
    if (c >= 0xc2 && c <= 0xdf) n = 1, v = c & 0x1f, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef) n = 2, v = c & 0x0f, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4) n = 3, v = c & 0x07, min = 0x10000;
    else return perr(P, "invalid UTF-8 byte 0x%02x", c);
    if ((size_t)n >= left) return perr(P, "truncated UTF-8 sequence");
    for (int k = 1; k <= n; k++) {
        if ((s[k] & 0xc0) != 0x80) return perr(P, "invalid UTF-8 sequence");
        v = (v << 6) | (s[k] & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return perr(P, "invalid UTF-8 sequence");
    *cp = v;
    P->p += n + 1;
    return 0;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One character of a literal or class (escapes resolved) into *cp. -1 on error. */
static int parse_char(parser *P, uint32_t *cp) {
    if (at_end(P)) return perr(P, "unexpected end of the grammar");
    if (*P->p != '\\') return utf8_next(P, cp);
    if (P->p + 1 >= P->end) return perr(P, "unexpected end after '\\'");
    const char e = P->p[1];
    P->p += 2;
    int digits = 0;
    switch (e) {
    case 'n': *cp = '\n'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 't': *cp = '\t'; return 0;
    case '0': *cp = 0; return 0;
    case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/': case '.': case '|':
    case '(': case ')': case '*': case '+': case '?': case '{': case '}':
        *cp = (uint32_t)(unsigned char)e;
        return 0;
    case 'x': digits = 2; break;
    case 'u': digits = 4; break;
    case 'U': digits = 8; break;
    default:
        P->p -= 2;
        return perr(P, "unknown escape '\\%c'", e);
    }
    uint32_t v = 0;
    for (int i = 0; i < digits; i++) {
        const int h = P->p < P->end ? hexval(*P->p) : -1;
        if (h < 0) return perr(P, "'\\%c' needs %d hex digits", e, digits);
        v = v * 16 + (uint32_t)h;
        P->p++;
    }
    if (v > 0x10ffff) return perr(P, "code point U+%X is beyond U+10FFFF", v);
    *cp = v;
    return 0;
}

/* ---- syntax ------------------------------------------------------------------------------- */

static int parse_alternates(parser *P, int32_t rule, bool nested);

/* "literal" -> one single-character class per code point, appended to item. */
static int parse_literal(parser *P, ivec *item) {
    P->p++; /* opening quote */
    for (;;) {
        if (at_end(P) || *P->p == '\n') return perr(P, "unterminated string literal");
        if (*P->p == '"') break;
        uint32_t cp;
        if (parse_char(P, &cp) < 0) return -1;
        const uint32_t r[2] = {cp, cp};
        const int32_t e = class_new(P, r, 1, false);
        if (e < 0 || !ivec_push(item, e)) return e < 0 ? -1 : nomem(P);
    }
    P->p++;
    return 0;
}

/* [class] -> one class element. */
static int parse_class(parser *P, ivec *item) {
    P->p++; /* [ */
    bool neg = false;
    if (!at_end(P) && *P->p == '^') neg = true, P->p++;
    ivec rg = {0};
    int rc = -1;
    for (;;) {
        if (at_end(P) || *P->p == '\n') {
            perr(P, "unterminated character class (missing ']')");
            goto out;
        }
        if (*P->p == ']') break;
        uint32_t lo, hi;
        if (parse_char(P, &lo) < 0) goto out;
        hi = lo;
        if (P->p + 1 < P->end && *P->p == '-' && P->p[1] != ']') {
            P->p++;
            if (parse_char(P, &hi) < 0) goto out;
            if (hi < lo) {
                perr(P, "character range is backwards (U+%04X-U+%04X)", lo, hi);
                goto out;
            }
        }
        if (!ivec_push(&rg, (int32_t)lo) || !ivec_push(&rg, (int32_t)hi)) {
            nomem(P);
            goto out;
        }
    }
    P->p++;
    if (rg.n == 0 && !neg) {
        perr(P, "empty character class []");
        goto out;
    }
    const int32_t e = class_new(P, (const uint32_t *)rg.v, rg.n / 2, neg);
    if (e < 0) goto out;
    if (!ivec_push(item, e)) {
        nomem(P);
        goto out;
    }
    rc = 0;
out:
    free(rg.v);
    return rc;
}

/* Reads a non-negative integer (for {m,n}); -1 when absent. */
static int64_t parse_count(parser *P) {
    if (at_end(P) || *P->p < '0' || *P->p > '9') return -1;
    int64_t v = 0;
    while (!at_end(P) && *P->p >= '0' && *P->p <= '9') {
        v = v * 10 + (*P->p - '0');
        if (v > MAX_REPEAT) v = MAX_REPEAT + 1;
        P->p++;
    }
    return v;
}

/* Appends X repeated [min, max] times (max < 0: unbounded) to seq, creating helper rules under
 * `owner`. */
static int repeat(parser *P, int32_t owner, int32_t x, int64_t min, int64_t max, ivec *seq) {
    if (min > MAX_REPEAT || max > MAX_REPEAT) return perr(P, "repetition count above %d", MAX_REPEAT);
    if (max >= 0 && max < min) return perr(P, "repetition {%lld,%lld}: the maximum is below the minimum",
                                           (long long)min, (long long)max);
    for (int64_t i = 0; i < min; i++)
        if (!ivec_push(seq, x)) return nomem(P);
    if (max < 0) {
        const int32_t s = rule_sub(P, owner);
        if (s < 0) return -1;
        ivec a = {0}, b = {0};
        if (!ivec_push(&a, x) || !ivec_push(&a, GE_MAKE(GE_REF, s))) {
            free(a.v);
            return nomem(P);
        }
        if (rule_add_alt(P, s, &a) < 0 || rule_add_alt(P, s, &b) < 0) {
            free(a.v);
            return -1;
        }
        return ivec_push(seq, GE_MAKE(GE_REF, s)) ? 0 : nomem(P);
    }
    int32_t prev = -1;
    for (int64_t k = 0; k < max - min; k++) {
        const int32_t o = rule_sub(P, owner);
        if (o < 0) return -1;
        ivec a = {0}, b = {0};
        if (!ivec_push(&a, x) || (prev >= 0 && !ivec_push(&a, GE_MAKE(GE_REF, prev)))) {
            free(a.v);
            return nomem(P);
        }
        if (rule_add_alt(P, o, &a) < 0 || rule_add_alt(P, o, &b) < 0) {
            free(a.v);
            return -1;
        }
        prev = o;
    }
    if (prev >= 0 && !ivec_push(seq, GE_MAKE(GE_REF, prev))) return nomem(P);
    return 0;
}

/* One item (literal, class, '.', group or rule name) with its optional postfix, appended to seq. */
static int parse_item(parser *P, int32_t rule, ivec *seq) {
    ivec item = {0};
    const char c = *P->p;
    int rc = -1;
    if (c == '"') {
        if (parse_literal(P, &item) < 0) goto out;
    } else if (c == '[') {
        if (parse_class(P, &item) < 0) goto out;
    } else if (c == '.') {
        P->p++;
        const int32_t e = class_new(P, NULL, 0, true);
        if (e < 0) goto out;
        if (!ivec_push(&item, e)) goto oom;
    } else if (c == '(') {
        if (++P->depth > MAX_NEST) {
            perr(P, "parentheses nested deeper than %d", MAX_NEST);
            goto out;
        }
        P->p++;
        const int32_t sub = rule_sub(P, rule);
        if (sub < 0) goto out;
        skip_space(P, true);
        if (parse_alternates(P, sub, true) < 0) goto out;
        skip_space(P, true);
        if (at_end(P) || *P->p != ')') {
            perr(P, "expected ')'");
            goto out;
        }
        P->p++;
        P->depth--;
        if (!ivec_push(&item, GE_MAKE(GE_REF, sub))) goto oom;
    } else if (is_name_char(c)) {
        const char *s = P->p;
        while (!at_end(P) && is_name_char(*P->p)) P->p++;
        const size_t n = (size_t)(P->p - s);
        const char *save = P->p;
        skip_space(P, false);
        if (P->end - P->p >= 3 && !memcmp(P->p, "::=", 3)) {
            P->p = s;
            perr(P, "a new rule '%.*s' starts before the line ends (one rule per line)", (int)(n > 64 ? 64 : n), s);
            goto out;
        }
        P->p = save;
        const int32_t id = rule_get(P, s, n);
        if (id < 0) goto out;
        if (!P->rules[id].use_line) P->rules[id].use_line = P->line;
        if (!ivec_push(&item, GE_MAKE(GE_REF, id))) goto oom;
    } else {
        if ((unsigned char)c >= 0x20 && (unsigned char)c < 0x7f) perr(P, "unexpected character '%c'", c);
        else perr(P, "unexpected byte 0x%02x", (unsigned char)c);
        goto out;
    }
    /* postfix */
    if (!at_end(P) && (*P->p == '*' || *P->p == '+' || *P->p == '?' || *P->p == '{')) {
        int32_t x;
        if (item.n == 1) {
            x = item.v[0];
        } else { /* a multi-character literal: wrap it in a rule */
            const int32_t w = rule_sub(P, rule);
            if (w < 0) goto out;
            if (rule_add_alt(P, w, &item) < 0) goto out;
            x = GE_MAKE(GE_REF, w);
        }
        int64_t min = 0, max = -1;
        const char op = *P->p++;
        if (op == '+') min = 1;
        else if (op == '?') max = 1;
        else if (op == '{') {
            skip_space(P, false);
            min = parse_count(P);
            skip_space(P, false);
            if (!at_end(P) && *P->p == ',') {
                P->p++;
                skip_space(P, false);
                max = parse_count(P);
                if (min < 0 && max < 0) {
                    perr(P, "'{,}' needs a count");
                    goto out;
                }
                if (min < 0) min = 0;
            } else {
                if (min < 0) {
                    perr(P, "expected a count after '{'");
                    goto out;
                }
                max = min;
            }
            skip_space(P, false);
            if (at_end(P) || *P->p != '}') {
                perr(P, "expected '}' to close the repetition");
                goto out;
            }
            P->p++;
        }
        if (repeat(P, rule, x, min, max, seq) < 0) goto out;
    } else {
        for (int32_t i = 0; i < item.n; i++)
            if (!ivec_push(seq, item.v[i])) goto oom;
    }
    rc = 0;
    goto out;
oom:
    nomem(P);
out:
    free(item.v);
    return rc;
}

/* A run of items up to '|', ')', the end, or (at the top level) the end of the line. */
static int parse_sequence(parser *P, int32_t rule, bool nested, ivec *seq) {
    for (;;) {
        skip_space(P, nested);
        if (at_end(P)) return 0;
        const char c = *P->p;
        if (c == '|' || c == ')' || c == '\n') return 0;
        if (parse_item(P, rule, seq) < 0) return -1;
    }
}

/* Alternatives of `rule`. At the top level a following line that starts with '|' continues it. */
static int parse_alternates(parser *P, int32_t rule, bool nested) {
    for (;;) {
        ivec seq = {0};
        if (parse_sequence(P, rule, nested, &seq) < 0 || rule_add_alt(P, rule, &seq) < 0) {
            free(seq.v);
            return -1;
        }
        skip_space(P, nested);
        if (!at_end(P) && *P->p == '|') {
            P->p++;
            skip_space(P, true);
            continue;
        }
        if (nested) return 0;
        /* look past blank lines and comments for a continuation line */
        const char *sp = P->p, *sls = P->line_start;
        const int32_t sl = P->line;
        skip_space(P, true);
        if (!at_end(P) && *P->p == '|') {
            P->p++;
            skip_space(P, true);
            continue;
        }
        P->p = sp, P->line_start = sls, P->line = sl;
        return 0;
    }
}

static int parse_rule(parser *P) {
    const char *s = P->p;
    while (!at_end(P) && is_name_char(*P->p)) P->p++;
    const size_t n = (size_t)(P->p - s);
    if (n == 0) {
        if ((unsigned char)*P->p >= 0x20 && (unsigned char)*P->p < 0x7f)
            return perr(P, "expected a rule name, found '%c'", *P->p);
        return perr(P, "expected a rule name");
    }
    skip_space(P, false);
    if (P->end - P->p < 3 || memcmp(P->p, "::=", 3))
        return perr(P, "expected '::=' after the rule name '%.*s'", (int)(n > 64 ? 64 : n), s);
    P->p += 3;
    const int32_t id = rule_get(P, s, n);
    if (id < 0) return -1;
    if (P->rules[id].def_line) {
        P->p = s;
        return perr(P, "rule '%s' is defined twice (first on line %d)", P->rules[id].name, P->rules[id].def_line);
    }
    P->rules[id].def_line = P->line;
    skip_space(P, true);
    if (parse_alternates(P, id, false) < 0) return -1;
    skip_space(P, false);
    if (!at_end(P) && *P->p != '\n') return perr(P, "unexpected character '%c'", *P->p);
    return 0;
}

/* ---- checks and lowering ------------------------------------------------------------------- */

/* Fills nullable[r] for every rule of g (linear worklist over the alternatives). */
static int compute_nullable(const qr_grammar *g, bool *nullable) {
    int rc = -1;
    int32_t *pending = malloc(sizeof(int32_t) * (size_t)g->n_alts);     /* refs left per alternative */
    int32_t *alt_rule = malloc(sizeof(int32_t) * (size_t)g->n_alts);
    int32_t *occ_head = malloc(sizeof(int32_t) * (size_t)g->n_rules);   /* linked lists of (alt) per rule */
    int32_t *occ_next = malloc(sizeof(int32_t) * (size_t)(g->n_elems + 1));
    int32_t *occ_alt = malloc(sizeof(int32_t) * (size_t)(g->n_elems + 1));
    int32_t *work = malloc(sizeof(int32_t) * (size_t)g->n_rules);
    if (!pending || !alt_rule || !occ_head || !occ_next || !occ_alt || !work) goto out;
    int32_t n_work = 0, n_occ = 0;
    for (int32_t r = 0; r < g->n_rules; r++) occ_head[r] = -1, nullable[r] = false;
    for (int32_t r = 0; r < g->n_rules; r++)
        for (int32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++) {
            alt_rule[a] = r;
            pending[a] = 0;
            bool has_class = false;
            for (int32_t e = g->alt_start[a]; GE_KIND(g->elems[e]) != GE_END; e++)
                if (GE_KIND(g->elems[e]) == GE_CLASS) has_class = true;
            if (has_class) continue;
            for (int32_t e = g->alt_start[a]; GE_KIND(g->elems[e]) != GE_END; e++) {
                const int32_t t = GE_ARG(g->elems[e]);
                pending[a]++;
                occ_alt[n_occ] = a;
                occ_next[n_occ] = occ_head[t];
                occ_head[t] = n_occ++;
            }
            if (pending[a] == 0 && !nullable[r]) nullable[r] = true, work[n_work++] = r;
        }
    while (n_work > 0) {
        const int32_t t = work[--n_work];
        for (int32_t o = occ_head[t]; o >= 0; o = occ_next[o]) {
            const int32_t a = occ_alt[o];
            if (--pending[a] == 0 && !nullable[alt_rule[a]]) {
                nullable[alt_rule[a]] = true;
                work[n_work++] = alt_rule[a];
            }
        }
    }
    rc = 0;
out:
    free(pending);
    free(alt_rule);
    free(occ_head);
    free(occ_next);
    free(occ_alt);
    free(work);
    return rc;
}

/* Finds a cycle of leftmost references (iterative DFS). Returns 0 when none, 1 with the cycle
 * described in err, -1 out of memory. */
static int find_left_recursion(const qr_grammar *g, const bool *nullable, char *err, size_t err_len) {
    int rc = -1;
    uint8_t *color = calloc((size_t)g->n_rules, 1); /* 0 new, 1 on the path, 2 done */
    int32_t *path = malloc(sizeof(int32_t) * (size_t)g->n_rules);
    int32_t *cursor = malloc(sizeof(int32_t) * (size_t)g->n_rules); /* next element index to look at */
    int32_t *alt = malloc(sizeof(int32_t) * (size_t)g->n_rules);
    if (!color || !path || !cursor || !alt) goto out;
    rc = 0;
    for (int32_t start = 0; start < g->n_rules && rc == 0; start++) {
        if (color[start]) continue;
        int32_t depth = 0;
        path[0] = start, alt[0] = g->rule_alt[start], cursor[0] = -1, color[start] = 1;
        while (depth >= 0 && rc == 0) {
            const int32_t r = path[depth];
            /* advance to the next leftmost reference of r */
            int32_t next = -1;
            while (alt[depth] < g->rule_alt[r + 1] && next < 0) {
                int32_t e = cursor[depth] < 0 ? g->alt_start[alt[depth]] : cursor[depth];
                const int32_t el = g->elems[e];
                if (GE_KIND(el) != GE_REF) { /* END or CLASS: this alternative is done */
                    alt[depth]++;
                    cursor[depth] = -1;
                    continue;
                }
                next = GE_ARG(el);
                cursor[depth] = nullable[next] ? e + 1 : -1;
                if (!nullable[next]) alt[depth]++;
            }
            if (next < 0) {
                color[r] = 2;
                depth--;
                continue;
            }
            if (color[next] == 1) {
                int32_t from = depth;
                while (path[from] != next) from--;
                char buf[512];
                size_t used = 0;
                for (int32_t i = from; i <= depth + 1 && used < sizeof buf - 80; i++) {
                    const int32_t id = i <= depth ? path[i] : next;
                    used += (size_t)snprintf(buf + used, sizeof buf - used, "%s%.64s", i == from ? "" : " -> ",
                                             g->names[id]);
                }
                qr_errf(err, err_len, QR_ERR_INVALID_ARG,
                        "grammar: rule '%.64s' is left-recursive (%s); rewrite it with repetition", g->names[next],
                        buf);
                rc = 1;
            } else if (color[next] == 0) {
                color[next] = 1;
                depth++;
                path[depth] = next, alt[depth] = g->rule_alt[next], cursor[depth] = -1;
            }
        }
    }
out:
    free(color);
    free(path);
    free(cursor);
    free(alt);
    return rc;
}

/* Moves the parser's rules into a flat qr_grammar. */
static qr_grammar *flatten(parser *P) {
    qr_grammar *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    atomic_init(&g->refs, 1);
    int64_t n_alts = 0;
    for (int32_t r = 0; r < P->n_rules; r++) n_alts += P->rules[r].n_alts;
    g->n_rules = P->n_rules;
    g->n_alts = (int32_t)n_alts;
    g->n_elems = (int32_t)P->n_elems;
    const size_t n_rules = (size_t)(uint32_t)P->n_rules;
    g->names = calloc(n_rules ? n_rules : 1, sizeof *g->names);
    g->rule_alt = malloc(sizeof(int32_t) * (n_rules + 1));
    g->alt_start = malloc(sizeof(int32_t) * (size_t)(n_alts ? n_alts : 1));
    g->elems = malloc(sizeof(int32_t) * (size_t)(P->n_elems ? P->n_elems : 1));
    if (!g->names || !g->rule_alt || !g->alt_start || !g->elems) {
        qr_grammar_free(g);
        return NULL;
    }
    int32_t a = 0, e = 0;
    for (int32_t r = 0; r < P->n_rules; r++) {
        brule *br = &P->rules[r];
        g->names[r] = br->name;
        br->name = NULL;
        g->rule_alt[r] = a;
        for (int32_t i = 0; i < br->n_alts; i++) {
            g->alt_start[a++] = e;
            if (br->alts[i].n) memcpy(g->elems + e, br->alts[i].v, sizeof(int32_t) * (size_t)br->alts[i].n);
            e += br->alts[i].n;
            g->elems[e++] = GE_MAKE(GE_END, 0);
        }
    }
    g->rule_alt[P->n_rules] = a;
    g->classes = P->classes;
    g->n_classes = P->n_classes;
    P->classes = NULL;
    g->ranges = (uint32_t *)P->ranges.v;
    g->n_ranges = P->ranges.n / 2;
    P->ranges.v = NULL;
    return g;
}

static void parser_free(parser *P) {
    for (int32_t r = 0; r < P->n_rules; r++) {
        for (int32_t i = 0; i < P->rules[r].n_alts; i++) free(P->rules[r].alts[i].v);
        free(P->rules[r].alts);
        free(P->rules[r].name);
    }
    free(P->rules);
    free(P->hash);
    free(P->classes);
    free(P->ranges.v);
}

qr_status qr_grammar_parse(const char *text, size_t len, const char *root, qr_grammar **out, char *err,
                           size_t err_len) {
    *out = NULL;
    if (!text) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "grammar: no text");
    if (len > QR_GRAMMAR_MAX_TEXT)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "grammar: the text is %zu bytes (at most %u)", len,
                       QR_GRAMMAR_MAX_TEXT);
    if (!root) root = "root";
    parser P = {.p = text, .end = text + len, .line = 1, .line_start = text, .err = err, .err_len = err_len};
    qr_grammar *g = NULL;
    bool *nullable = NULL;
    for (;;) {
        skip_space(&P, true);
        if (at_end(&P)) break;
        if (parse_rule(&P) < 0) goto fail;
    }
    for (int32_t r = 0; r < P.n_rules; r++) {
        if (P.rules[r].def_line || strchr(P.rules[r].name, '/')) continue;
        P.st = QR_ERR_INVALID_ARG;
        qr_errf(err, err_len, QR_ERR_INVALID_ARG, "grammar: rule '%.64s' is used (line %d) but never defined",
                P.rules[r].name, P.rules[r].use_line);
        goto fail;
    }
    int32_t root_id = -1;
    for (int32_t r = 0; r < P.n_rules && root_id < 0; r++)
        if (!strcmp(P.rules[r].name, root)) root_id = r;
    if (root_id < 0) {
        P.st = QR_ERR_INVALID_ARG;
        qr_errf(err, err_len, QR_ERR_INVALID_ARG, "grammar: no rule named '%.64s' (the start rule)", root);
        goto fail;
    }
    g = flatten(&P);
    if (!g) goto oom;
    g->root = root_id;
    nullable = malloc((size_t)g->n_rules);
    if (!nullable || compute_nullable(g, nullable) < 0) goto oom;
    const int lr = find_left_recursion(g, nullable, err, err_len);
    if (lr < 0) goto oom;
    if (lr > 0) {
        P.st = QR_ERR_INVALID_ARG;
        goto fail;
    }
    free(nullable);
    parser_free(&P);
    *out = g;
    return QR_OK;
oom:
    P.st = QR_ERR_NOMEM;
    qr_errf(err, err_len, QR_ERR_NOMEM, "grammar: out of memory");
fail:
    free(nullable);
    qr_grammar_free(g);
    parser_free(&P);
    return P.st != QR_OK ? P.st : QR_ERR_INVALID_ARG;
}

qr_grammar *qr_grammar_retain(qr_grammar *g) {
    if (g) atomic_fetch_add(&g->refs, 1);
    return g;
}

void qr_grammar_free(qr_grammar *g) {
    if (!g || atomic_fetch_sub(&g->refs, 1) != 1) return;
    if (g->names)
        for (int32_t r = 0; r < g->n_rules; r++) free(g->names[r]);
    free(g->names);
    free(g->rule_alt);
    free(g->alt_start);
    free(g->elems);
    free(g->classes);
    free(g->ranges);
    free(g);
}

int32_t qr_grammar_n_rules(const qr_grammar *g) { return g->n_rules; }
