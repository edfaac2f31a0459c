/* jinja_lex.c — template tokenizer following jinja2's lexer with the Hugging Face settings
 * (trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False, newline_sequence="\n").
 *
 * The source is first normalized: "\r\n" and "\r" become "\n", and one trailing newline is
 * dropped. Text between tags becomes T_DATA; {{ }} and {% %} become BEGIN/END tokens around
 * expression tokens; comments vanish; {% raw %} bodies become T_DATA. */
#include <stdlib.h>
#include <string.h>

#include "template/jinja.h"

typedef struct lexer {
    jx_mem *m;
    const char *s; /* normalized source */
    size_t n;
    size_t pos;
    int line;
    jx_token *toks;
    size_t ntok, cap;
    char stack[JX_MAX_PARSE_DEPTH]; /* open brackets inside the current tag */
    int depth;
} lexer;

/* Fails with a syntax error at the current line. */
static _Noreturn void lex_fail(lexer *lx, const char *fmt, const char *arg) {
    jx_fail(lx->m->err, QR_ERR_FORMAT, lx->line, fmt, arg);
}

/* Appends a token of `type` at the current line. */
static jx_token *push(lexer *lx, jx_tok_type type) {
    if (lx->ntok == lx->cap) {
        size_t cap = lx->cap ? lx->cap * 2 : 256;
        jx_token *t = jx_alloc(lx->m, cap * sizeof *t);
        if (lx->ntok) memcpy(t, lx->toks, lx->ntok * sizeof *t);
        lx->toks = t;
        lx->cap = cap;
    }
    jx_token *t = &lx->toks[lx->ntok++];
    memset(t, 0, sizeof *t);
    t->type = type;
    t->line = lx->line;
    return t;
}

/* Advances the line counter over [from, to). */
static void count_lines(lexer *lx, size_t from, size_t to) {
    for (size_t i = from; i < to; i++)
        if (lx->s[i] == '\n') lx->line++;
}

/* Bytes of the Python whitespace character at i, or 0. */
static size_t space_at(const char *s, size_t n, size_t i) {
    if (i >= n) return 0;
    unsigned char c = (unsigned char)s[i];
    if (c < 0x80) return jx_is_space(c) ? 1 : 0;
    uint32_t cp;
    size_t j = jx_utf8_next(s, n, i, &cp);
    return jx_is_space(cp) ? j - i : 0;
}

/* Index after the run of Python whitespace at i. */
static size_t skip_space(const char *s, size_t n, size_t i) {
    size_t k;
    while ((k = space_at(s, n, i)) > 0) i += k;
    return i;
}

/* Whether the source has literal `lit` at i. */
static bool starts(const lexer *lx, size_t i, const char *lit) {
    size_t k = strlen(lit);
    return i + k <= lx->n && memcmp(lx->s + i, lit, k) == 0;
}

/* Emits text [a, b) after applying the whitespace control of the tag that follows it:
 * sign '-' strips all trailing whitespace; otherwise, for block and comment tags, lstrip_blocks
 * removes spaces/tabs between the last newline (or a line start) and the tag. */
static void emit_text(lexer *lx, size_t a, size_t b, char sign, bool is_variable, bool line_starting) {
    if (sign == '-') {
        size_t end = a, i = a;
        while (i < b) {
            size_t k = space_at(lx->s, b, i);
            if (k) {
                i += k;
            } else {
                uint32_t cp;
                i = jx_utf8_next(lx->s, b, i, &cp);
                end = i;
            }
        }
        b = end;
    } else if (sign != '+' && !is_variable) {
        size_t l_pos = a;
        for (size_t i = b; i > a; i--)
            if (lx->s[i - 1] == '\n') {
                l_pos = i;
                break;
            }
        if (l_pos > a || line_starting) {
            bool blank = true;
            for (size_t i = l_pos; i < b; i++)
                if (lx->s[i] != ' ' && lx->s[i] != '\t') {
                    blank = false;
                    break;
                }
            if (blank) b = l_pos;
        }
    }
    if (b > a) {
        jx_token *t = push(lx, T_DATA);
        t->s = jx_strndup(lx->m, lx->s + a, b - a);
        t->len = b - a;
    }
}

/* ---- string literals (Python unicode-escape semantics, as jinja2 decodes them) --------------- */

/* Value of a hex digit, or -1. */
static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Appends code point cp as UTF-8. */
static void add_cp(jx_buf *b, uint32_t cp) {
    char u[4];
    jx_buf_add(b, u, jx_utf8_encode(cp, u));
}

/* Decodes a string literal body [start, end) and pushes a T_STRING. */
static void lex_string(lexer *lx, size_t start, size_t end) {
    /* [start, end) is the body between the quotes */
    jx_buf b;
    jx_buf_init(&b, lx->m, 0);
    const char *s = lx->s;
    size_t i = start;
    while (i < end) {
        if (s[i] != '\\') {
            size_t j = i;
            while (j < end && s[j] != '\\') j++;
            jx_buf_add(&b, s + i, j - i);
            i = j;
            continue;
        }
        if (i + 1 >= end) { /* cannot happen: the closing quote would be escaped */
            jx_buf_addc(&b, '\\');
            break;
        }
        char c = s[i + 1];
        i += 2;
        switch (c) {
        case '\n': break;
        case '\\': jx_buf_addc(&b, '\\'); break;
        case '\'': jx_buf_addc(&b, '\''); break;
        case '"': jx_buf_addc(&b, '"'); break;
        case 'a': jx_buf_addc(&b, '\a'); break;
        case 'b': jx_buf_addc(&b, '\b'); break;
        case 'f': jx_buf_addc(&b, '\f'); break;
        case 'n': jx_buf_addc(&b, '\n'); break;
        case 'r': jx_buf_addc(&b, '\r'); break;
        case 't': jx_buf_addc(&b, '\t'); break;
        case 'v': jx_buf_addc(&b, '\v'); break;
        case 'x':
        case 'u':
        case 'U': {
            int want = c == 'x' ? 2 : c == 'u' ? 4 : 8;
            uint32_t v = 0;
            for (int k = 0; k < want; k++) {
                int h = i + (size_t)k < end ? hexval(s[i + (size_t)k]) : -1;
                if (h < 0) lex_fail(lx, "string literal: truncated \\%sXX escape", c == 'x' ? "x" : c == 'u' ? "u" : "U");
                v = v * 16 + (uint32_t)h;
            }
            i += (size_t)want;
            if (v > 0x10ffff) lex_fail(lx, "string literal: illegal Unicode character%s", "");
            add_cp(&b, v);
            break;
        }
        case 'N': lex_fail(lx, "string literal: \\N{...} escapes are not supported%s", "");
        default:
            if (c >= '0' && c <= '7') {
                uint32_t v = (uint32_t)(c - '0');
                for (int k = 0; k < 2 && i < end && s[i] >= '0' && s[i] <= '7'; k++) v = v * 8 + (uint32_t)(s[i++] - '0');
                add_cp(&b, v);
            } else if ((unsigned char)c >= 0x80) {
                /* jinja2 first backslash-escapes non-ASCII characters, so "\é" decodes to "\xe9" */
                uint32_t cp;
                size_t j = jx_utf8_next(s, end, i - 1, &cp);
                if (cp < 0x100) jx_buf_addf(&b, "\\x%02x", cp);
                else if (cp < 0x10000) jx_buf_addf(&b, "\\u%04x", cp);
                else jx_buf_addf(&b, "\\U%08x", cp);
                i = j;
            } else {
                jx_buf_addc(&b, '\\');
                jx_buf_addc(&b, c);
            }
        }
    }
    jx_token *t = push(lx, T_STRING);
    t->s = b.data ? b.data : "";
    t->len = b.len;
}

/* ---- numbers ---------------------------------------------------------------------------------- */

/* ASCII digit. */
static bool isdig(char c) { return c >= '0' && c <= '9'; }

/* Matches (\d+_)*\d+ at i; returns the end or i when no match. */
static size_t digits_us(const char *s, size_t n, size_t i) {
    if (i >= n || !isdig(s[i])) return i;
    size_t j = i;
    for (;;) {
        while (j < n && isdig(s[j])) j++;
        if (j + 1 < n && s[j] == '_' && isdig(s[j + 1])) {
            j++;
            continue;
        }
        return j;
    }
}

/* Copy of [a, b) without '_' digit separators. */
static char *strip_underscores(lexer *lx, size_t a, size_t b) {
    char *out = jx_alloc(lx->m, b - a + 1);
    size_t k = 0;
    for (size_t i = a; i < b; i++)
        if (lx->s[i] != '_') out[k++] = lx->s[i];
    out[k] = 0;
    return out;
}

/* Tries float then integer at p; returns the new position or p when neither matches. */
static size_t lex_number(lexer *lx, size_t p) {
    const char *s = lx->s;
    size_t n = lx->n;
    if (p >= n || !isdig(s[p])) return p;
    if (p == 0 || s[p - 1] != '.') { /* float: (?<!\.)D((\.D)?e[+-]?D|\.D) */
        size_t d = digits_us(s, n, p), e = d;
        if (e < n && s[e] == '.' && digits_us(s, n, e + 1) > e + 1) e = digits_us(s, n, e + 1);
        size_t f = 0;
        if (e < n && (s[e] == 'e' || s[e] == 'E')) {
            size_t x = e + 1;
            if (x < n && (s[x] == '+' || s[x] == '-')) x++;
            size_t y = digits_us(s, n, x);
            if (y > x) f = y;
        }
        if (!f && e > d) f = e;
        if (f) {
            jx_token *t = push(lx, T_FLOAT);
            t->f = strtod(strip_underscores(lx, p, f), NULL);
            return f;
        }
    }
    /* integer: 0b.., 0o.., 0x.., [1-9](_?\d)*, 0(_?0)* */
    size_t q = p;
    int base = 10;
    if (s[p] == '0' && p + 1 < n && strchr("bBoOxX", s[p + 1]) && s[p + 1]) {
        char c = (char)(s[p + 1] | 0x20);
        base = c == 'b' ? 2 : c == 'o' ? 8 : 16;
        size_t j = p + 2;
        for (;;) {
            size_t k = j < n && s[j] == '_' ? j + 1 : j;
            int h = k < n ? hexval(s[k]) : -1;
            if (h < 0 || h >= base) break;
            j = k + 1;
        }
        if (j > p + 2) q = j;
        else base = 10;
    }
    if (q == p) {
        char want = s[p] == '0' ? '0' : 0;
        size_t j = p + 1;
        for (;;) {
            size_t k = j < n && s[j] == '_' ? j + 1 : j;
            if (k >= n || !(want ? s[k] == '0' : isdig(s[k]))) break;
            j = k + 1;
        }
        q = j;
    }
    char *txt = strip_underscores(lx, base == 10 ? p : p + 2, q);
    uint64_t v = 0;
    for (const char *c = txt; *c; c++) {
        int h = hexval(*c);
        if (v > (UINT64_MAX - (uint64_t)h) / (uint64_t)base || v * (uint64_t)base + (uint64_t)h > (uint64_t)INT64_MAX)
            lex_fail(lx, "integer literal too large%s", "");
        v = v * (uint64_t)base + (uint64_t)h;
    }
    jx_token *t = push(lx, T_INT);
    t->i = (int64_t)v;
    return q;
}

/* ---- tags ------------------------------------------------------------------------------------- */

/* Tracks an opening bracket inside a tag (ends of tags are ignored while one is open). */
static void open_bracket(lexer *lx, char c) {
    if (lx->depth >= JX_MAX_PARSE_DEPTH) lex_fail(lx, "brackets nested too deeply%s", "");
    lx->stack[lx->depth++] = c;
}

/* Pops a bracket, failing on a mismatch. */
static void close_bracket(lexer *lx, char c) {
    char want = c == ')' ? '(' : c == ']' ? '[' : '{';
    if (lx->depth == 0) {
        char tmp[2] = {c, 0};
        lex_fail(lx, "unexpected '%s'", tmp);
    }
    if (lx->stack[lx->depth - 1] != want) {
        char tmp[2] = {c, 0};
        lex_fail(lx, "unexpected '%s': brackets do not match", tmp);
    }
    lx->depth--;
}

/* Lexes the inside of a {{ }} or {% %} tag starting at p; returns the position after the end
 * marker (including whitespace or newline it swallows). */
static size_t lex_tag(lexer *lx, size_t p, bool is_block) {
    const char *s = lx->s;
    size_t n = lx->n;
    lx->depth = 0;
    for (;;) {
        size_t q = skip_space(s, n, p);
        count_lines(lx, p, q);
        p = q;
        if (p >= n) lex_fail(lx, "unexpected end of template inside a %s", is_block ? "{% ... %} tag" : "{{ ... }} tag");
        if (lx->depth == 0) {
            size_t end = 0;
            if (is_block) {
                if (starts(lx, p, "+%}")) end = p + 3;
                else if (starts(lx, p, "-%}")) end = skip_space(s, n, p + 3);
                else if (starts(lx, p, "%}")) end = p + 2 < n && s[p + 2] == '\n' ? p + 3 : p + 2;
            } else {
                if (starts(lx, p, "-}}")) end = skip_space(s, n, p + 3);
                else if (starts(lx, p, "}}")) end = p + 2;
            }
            if (end) {
                push(lx, is_block ? T_BLOCK_END : T_VAR_END);
                count_lines(lx, p, end);
                return end;
            }
        }
        char c = s[p];
        size_t q2 = lex_number(lx, p);
        if (q2 > p) {
            p = q2;
            continue;
        }
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') {
            size_t j = p + 1;
            while (j < n && ((s[j] >= 'a' && s[j] <= 'z') || (s[j] >= 'A' && s[j] <= 'Z') || isdig(s[j]) || s[j] == '_'))
                j++;
            jx_token *t = push(lx, T_NAME);
            t->s = jx_strndup(lx->m, s + p, j - p);
            t->len = j - p;
            p = j;
            continue;
        }
        if (c == '\'' || c == '"') {
            size_t j = p + 1;
            while (j < n && s[j] != c) j += s[j] == '\\' ? 2 : 1;
            if (j >= n) lex_fail(lx, "unterminated string literal%s", "");
            lex_string(lx, p + 1, j);
            count_lines(lx, p, j + 1);
            p = j + 1;
            continue;
        }
        static const struct { const char *lit; int op; } ops[] = {
            {"//", O_FLOORDIV}, {"**", O_POW}, {"==", O_EQ}, {"!=", O_NE}, {">=", O_GTEQ}, {"<=", O_LTEQ},
            {"+", O_ADD}, {"-", O_SUB}, {"/", O_DIV}, {"*", O_MUL}, {"%", O_MOD}, {"~", O_TILDE},
            {"[", O_LBRACKET}, {"]", O_RBRACKET}, {"(", O_LPAREN}, {")", O_RPAREN}, {"{", O_LBRACE},
            {"}", O_RBRACE}, {">", O_GT}, {"<", O_LT}, {"=", O_ASSIGN}, {".", O_DOT}, {":", O_COLON},
            {"|", O_PIPE}, {",", O_COMMA}, {";", O_SEMICOLON},
        };
        int op = -1;
        size_t oplen = 0;
        for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
            if (starts(lx, p, ops[k].lit)) {
                op = ops[k].op;
                oplen = strlen(ops[k].lit);
                break;
            }
        if (op < 0) {
            char tmp[8] = {0};
            uint32_t cp;
            size_t j = jx_utf8_next(s, n, p, &cp);
            memcpy(tmp, s + p, j - p < 4 ? j - p : 4);
            lex_fail(lx, "unexpected character '%s'", tmp);
        }
        if (op == O_LPAREN || op == O_LBRACKET || op == O_LBRACE) open_bracket(lx, c);
        if (op == O_RPAREN || op == O_RBRACKET || op == O_RBRACE) close_bracket(lx, c);
        jx_token *t = push(lx, T_OP);
        t->op = op;
        p += oplen;
    }
}

/* Normalizes newlines and drops one trailing newline (keep_trailing_newline=False). */
static void normalize(lexer *lx, const char *src, size_t len) {
    char *out = jx_alloc(lx->m, len + 1);
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            out[k++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            out[k++] = src[i];
        }
    }
    if (k > 0 && out[k - 1] == '\n') k--;
    out[k] = 0;
    lx->s = out;
    lx->n = k;
}

/* See jinja.h. */
void jx_lex(jx_mem *m, const char *src, size_t len, jx_token **out, size_t *n_out) {
    lexer lx = {.m = m, .line = 1};
    normalize(&lx, src, len);
    const char *s = lx.s;
    size_t n = lx.n, pos = 0;
    bool line_starting = true;
    while (pos < n) {
        size_t q = pos;
        while (q + 1 < n && !(s[q] == '{' && (s[q + 1] == '{' || s[q + 1] == '%' || s[q + 1] == '#'))) q++;
        if (q + 1 >= n) {
            emit_text(&lx, pos, n, 0, true, false);
            count_lines(&lx, pos, n);
            break;
        }
        char kind = s[q + 1];
        size_t p = q + 2;
        char sign = 0;
        if (p < n && (s[p] == '-' || s[p] == '+')) sign = s[p++];
        /* {% raw %} ... {% endraw %} */
        size_t raw_end = 0;
        if (kind == '%') {
            size_t k = skip_space(s, n, p);
            if (starts(&lx, k, "raw")) {
                k = skip_space(s, n, k + 3);
                if (starts(&lx, k, "-%}")) raw_end = skip_space(s, n, k + 3);
                else if (starts(&lx, k, "%}")) raw_end = k + 2;
            }
        }
        emit_text(&lx, pos, q, sign, kind == '{', line_starting);
        count_lines(&lx, pos, q);
        if (raw_end) {
            count_lines(&lx, q, raw_end);
            bool ls = s[raw_end - 1] == '\n';
            size_t x = raw_end, after = 0, body_end = 0;
            char sign2 = 0;
            for (; x + 1 < n; x++) {
                if (!(s[x] == '{' && s[x + 1] == '%')) continue;
                size_t k = x + 2;
                char sg = 0;
                if (k < n && (s[k] == '-' || s[k] == '+')) sg = s[k++];
                k = skip_space(s, n, k);
                if (!starts(&lx, k, "endraw")) continue;
                k = skip_space(s, n, k + 6);
                if (starts(&lx, k, "+%}")) after = k + 3;
                else if (starts(&lx, k, "-%}")) after = skip_space(s, n, k + 3);
                else if (starts(&lx, k, "%}")) after = k + 2 < n && s[k + 2] == '\n' ? k + 3 : k + 2;
                if (after) {
                    body_end = x;
                    sign2 = sg;
                    break;
                }
            }
            if (!after) lex_fail(&lx, "missing end of raw directive (expected {%% endraw %%})%s", "");
            emit_text(&lx, raw_end, body_end, sign2, false, ls);
            count_lines(&lx, raw_end, after);
            pos = after;
            line_starting = s[after - 1] == '\n';
            continue;
        }
        if (kind == '#') {
            size_t e = p;
            while (e + 1 < n && !(s[e] == '#' && s[e + 1] == '}')) e++;
            if (e + 1 >= n) lex_fail(&lx, "missing end of comment tag%s", "");
            size_t after;
            if (e > p && s[e - 1] == '-') after = skip_space(s, n, e + 2);
            else if (e > p && s[e - 1] == '+') after = e + 2;
            else after = e + 2 < n && s[e + 2] == '\n' ? e + 3 : e + 2;
            count_lines(&lx, q, after);
            pos = after;
            line_starting = s[after - 1] == '\n';
            continue;
        }
        push(&lx, kind == '%' ? T_BLOCK_BEGIN : T_VAR_BEGIN);
        count_lines(&lx, q, p);
        size_t after = lex_tag(&lx, p, kind == '%');
        pos = after;
        line_starting = s[after - 1] == '\n';
    }
    push(&lx, T_EOF);
    *out = lx.toks;
    *n_out = lx.ntok;
}
