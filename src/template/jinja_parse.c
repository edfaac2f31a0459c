/* jinja_parse.c — recursive-descent parser producing the AST of jinja.h.
 *
 * The grammar and precedence follow jinja2's parser.py: condexpr > or > and > not > compare >
 * math1 (+ -) > concat (~) > math2 (* / // %) > pow (**, left-associative) > unary (- +) >
 * primary with postfix (. [] ()) and filter/test chains (| and is). */
#include <stdio.h>
#include <string.h>

#include "template/jinja.h"

typedef struct parser {
    jx_mem *m;
    const jx_token *t;
    size_t n, i;
    int depth;         /* expression / block nesting */
    int macro_names;   /* JX_MACRO_* names seen while parsing the current macro body */
    int loop_depth;    /* for loops enclosing the current statement (for break/continue) */
} parser;

typedef struct nodevec {
    jx_node **items;
    size_t n, cap;
} nodevec;

/* Current and next token. */
static const jx_token *cur(parser *p) { return &p->t[p->i]; }
static const jx_token *look(parser *p) { return &p->t[p->i + 1 < p->n ? p->i + 1 : p->i]; }
/* Moves to the next token (stays on T_EOF). */
static void advance(parser *p) {
    if (p->i + 1 < p->n) p->i++;
}

/* A token as jinja2 names it in messages. */
static const char *describe(const jx_token *t) {
    static const char *op_names[] = {
        "+", "-", "/", "//", "*", "%", "**", "~", "[", "]", "(", ")", "{", "}",
        "==", "!=", ">", ">=", "<", "<=", "=", ".", ":", "|", ",", ";",
    };
    switch (t->type) {
    case T_EOF: return "end of template";
    case T_DATA: return "template data";
    case T_VAR_BEGIN: return "begin of print statement";
    case T_VAR_END: return "end of print statement";
    case T_BLOCK_BEGIN: return "begin of statement block";
    case T_BLOCK_END: return "end of statement block";
    case T_NAME: return t->s;
    case T_STRING: return "string";
    case T_INT: return "integer";
    case T_FLOAT: return "float";
    case T_OP: return op_names[t->op];
    }
    return "?";
}

/* Fails with a syntax error at `line`. */
static _Noreturn void pfail(parser *p, int line, const char *fmt, const char *a, const char *b) {
    jx_fail(p->m->err, QR_ERR_FORMAT, line, fmt, a, b);
}

/* Token predicates. */
static bool is_op(parser *p, int op) { return cur(p)->type == T_OP && cur(p)->op == op; }
static bool is_name(const jx_token *t, const char *name) { return t->type == T_NAME && strcmp(t->s, name) == 0; }

/* Consumes operator `op` if it is next. */
static bool skip_op(parser *p, int op) {
    if (!is_op(p, op)) return false;
    advance(p);
    return true;
}

/* Consumes name `name` if it is next. */
static bool skip_name(parser *p, const char *name) {
    if (!is_name(cur(p), name)) return false;
    advance(p);
    return true;
}

/* Consumes operator `op` or fails. */
static void expect_op(parser *p, int op, const char *what) {
    if (!skip_op(p, op)) pfail(p, cur(p)->line, "expected '%s', got '%s'", what, describe(cur(p)));
}

/* Consumes a token of `type` or fails. */
static void expect_type(parser *p, jx_tok_type type, const char *what) {
    if (cur(p)->type != type) pfail(p, cur(p)->line, "expected %s, got '%s'", what, describe(cur(p)));
    advance(p);
}

/* Consumes a name token and returns it, or fails. */
static const char *expect_name(parser *p) {
    const jx_token *t = cur(p);
    if (t->type != T_NAME) pfail(p, t->line, "expected a name, got '%s'%s", describe(t), "");
    advance(p);
    return t->s;
}

/* Nesting guard: fails past JX_MAX_PARSE_DEPTH. */
static void enter(parser *p) {
    if (++p->depth > JX_MAX_PARSE_DEPTH)
        pfail(p, cur(p)->line, "template nested too deeply (more than %s levels)%s", "200", "");
}
static void leave(parser *p) { p->depth--; }

/* A new zeroed node. */
static jx_node *node(parser *p, jx_kind kind, int line) {
    jx_node *n = jx_alloc(p->m, sizeof *n);
    n->kind = kind;
    n->line = line;
    return n;
}

/* Appends to a node vector. */
static void vec_push(parser *p, nodevec *v, jx_node *x) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 4;
        jx_node **items = jx_alloc(p->m, cap * sizeof *items);
        if (v->n) memcpy(items, v->items, v->n * sizeof *items);
        v->items = items;
        v->cap = cap;
    }
    v->items[v->n++] = x;
}

/* Arena copy of a name array. */
static const char **names_of(parser *p, const char **src, size_t n) {
    const char **out = jx_alloc(p->m, (n ? n : 1) * sizeof *out);
    if (n) memcpy(out, src, n * sizeof *out);
    return out;
}

/* ---- expressions ------------------------------------------------------------------------- */

static jx_node *parse_expression(parser *p, bool with_condexpr);
/* Comma-separated expressions (a bare tuple) or a single expression. */
static jx_node *parse_tuple(parser *p, bool simplified, bool with_condexpr, const char *extra_end,
                            bool explicit_parens);
static jx_node *parse_unary(parser *p, bool with_filter);
static jx_node *parse_primary(parser *p);
static jx_node *parse_postfix(parser *p, jx_node *n);
static jx_node *parse_filter(parser *p, jx_node *n, bool start_inline);

/* Parses "(args, kw=v, *a, **k)" into n (items, names/items2, c, d). */
static void parse_call_args(parser *p, jx_node *n) {
    int line = cur(p)->line;
    expect_op(p, O_LPAREN, "(");
    nodevec args = {0}, kwvals = {0};
    const char *kwnames[256];
    size_t nkw = 0;
    bool require_comma = false;
    while (!is_op(p, O_RPAREN)) {
        if (require_comma) {
            expect_op(p, O_COMMA, ",");
            if (is_op(p, O_RPAREN)) break;
        }
        if (is_op(p, O_MUL)) {
            if (n->c || n->d) pfail(p, line, "invalid syntax for function call expression%s%s", "", "");
            advance(p);
            n->c = parse_expression(p, true);
        } else if (is_op(p, O_POW)) {
            if (n->d) pfail(p, line, "invalid syntax for function call expression%s%s", "", "");
            advance(p);
            n->d = parse_expression(p, true);
        } else if (cur(p)->type == T_NAME && look(p)->type == T_OP && look(p)->op == O_ASSIGN) {
            if (n->d) pfail(p, line, "invalid syntax for function call expression%s%s", "", "");
            if (nkw >= 256) pfail(p, line, "too many keyword arguments%s%s", "", "");
            kwnames[nkw++] = cur(p)->s;
            advance(p);
            advance(p);
            vec_push(p, &kwvals, parse_expression(p, true));
        } else {
            if (n->c || n->d || nkw) pfail(p, line, "invalid syntax for function call expression%s%s", "", "");
            vec_push(p, &args, parse_expression(p, true));
        }
        require_comma = true;
    }
    expect_op(p, O_RPAREN, ")");
    n->items = args.items;
    n->n_items = args.n;
    n->items2 = kwvals.items;
    n->n_items2 = kwvals.n;
    n->names = names_of(p, kwnames, nkw);
    n->n_names = nkw;
}

/* Dotted names (a.b) of filters and tests. */
static const char *dotted_name(parser *p) {
    const char *name = expect_name(p);
    while (is_op(p, O_DOT)) {
        advance(p);
        const char *more = expect_name(p);
        size_t a = strlen(name), b = strlen(more);
        char *s = jx_alloc(p->m, a + b + 2);
        memcpy(s, name, a);
        s[a] = '.';
        memcpy(s + a + 1, more, b + 1);
        name = s;
    }
    return name;
}

/* One or more `| name(args)` applied to n (n may be NULL for block filters). */
static jx_node *parse_filter(parser *p, jx_node *n, bool start_inline) {
    while (is_op(p, O_PIPE) || start_inline) {
        if (!start_inline) advance(p);
        int line = cur(p)->line;
        jx_node *f = node(p, N_FILTER, line);
        f->name = dotted_name(p);
        f->op = jx_filter_id(f->name);
        f->a = n;
        if (is_op(p, O_LPAREN)) parse_call_args(p, f);
        n = f;
        start_inline = false;
    }
    return n;
}

/* `is [not] name [arg | (args)]` applied to n. */
static jx_node *parse_test(parser *p, jx_node *n) {
    int line = cur(p)->line;
    advance(p); /* 'is' */
    bool negated = skip_name(p, "not");
    jx_node *t = node(p, N_TEST, line);
    t->name = dotted_name(p);
    t->op = jx_test_id(t->name);
    t->a = n;
    const jx_token *c = cur(p);
    if (is_op(p, O_LPAREN)) {
        parse_call_args(p, t);
    } else if ((c->type == T_NAME || c->type == T_STRING || c->type == T_INT || c->type == T_FLOAT ||
                (c->type == T_OP && (c->op == O_LPAREN || c->op == O_LBRACKET || c->op == O_LBRACE))) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is")) pfail(p, line, "you cannot chain multiple tests with 'is'%s%s", "", "");
        enter(p);
        jx_node *arg = parse_postfix(p, parse_primary(p));
        leave(p);
        t->items = jx_alloc(p->m, sizeof(jx_node *));
        t->items[0] = arg;
        t->n_items = 1;
    }
    if (negated) {
        jx_node *nn = node(p, N_NOT, line);
        nn->a = t;
        return nn;
    }
    return t;
}

/* One subscript: an expression or a slice a:b:c. */
static jx_node *parse_subscribed(parser *p) {
    int line = cur(p)->line;
    jx_node *parts[3] = {0};
    if (is_op(p, O_COLON)) {
        advance(p);
    } else {
        jx_node *e = parse_expression(p, true);
        if (!is_op(p, O_COLON)) return e;
        advance(p);
        parts[0] = e;
    }
    if (!is_op(p, O_COLON) && !is_op(p, O_RBRACKET) && !is_op(p, O_COMMA)) parts[1] = parse_expression(p, true);
    if (is_op(p, O_COLON)) {
        advance(p);
        if (!is_op(p, O_RBRACKET) && !is_op(p, O_COMMA)) parts[2] = parse_expression(p, true);
    }
    jx_node *s = node(p, N_SLICE, line);
    s->a = parts[0];
    s->b = parts[1];
    s->c = parts[2];
    return s;
}

/* `.name`, `.0`, `[...]` and `(...)` after a primary. */
static jx_node *parse_postfix(parser *p, jx_node *n) {
    for (;;) {
        int line = cur(p)->line;
        if (is_op(p, O_DOT)) {
            advance(p);
            const jx_token *t = cur(p);
            if (t->type == T_NAME) {
                advance(p);
                jx_node *g = node(p, N_GETATTR, line);
                g->a = n;
                g->name = t->s;
                n = g;
            } else if (t->type == T_INT) {
                advance(p);
                jx_node *g = node(p, N_GETITEM, line);
                g->a = n;
                g->b = node(p, N_CONST, line);
                g->b->value = jx_int(t->i);
                n = g;
            } else {
                pfail(p, t->line, "expected name or number after '.', got '%s'%s", describe(t), "");
            }
        } else if (is_op(p, O_LBRACKET)) {
            advance(p);
            nodevec args = {0};
            while (!is_op(p, O_RBRACKET)) {
                if (args.n) expect_op(p, O_COMMA, ",");
                vec_push(p, &args, parse_subscribed(p));
            }
            expect_op(p, O_RBRACKET, "]");
            jx_node *g = node(p, N_GETITEM, line);
            g->a = n;
            if (args.n == 1) {
                g->b = args.items[0];
            } else {
                g->b = node(p, N_TUPLE, line);
                g->b->items = args.items;
                g->b->n_items = args.n;
            }
            n = g;
        } else if (is_op(p, O_LPAREN)) {
            jx_node *c = node(p, N_CALL, line);
            c->a = n;
            parse_call_args(p, c);
            n = c;
        } else {
            return n;
        }
    }
}

/* Filters, tests and calls after a unary expression. */
static jx_node *parse_filter_expr(parser *p, jx_node *n) {
    for (;;) {
        if (is_op(p, O_PIPE)) {
            n = parse_filter(p, n, false);
        } else if (is_name(cur(p), "is")) {
            n = parse_test(p, n);
        } else if (is_op(p, O_LPAREN)) {
            jx_node *c = node(p, N_CALL, cur(p)->line);
            c->a = n;
            parse_call_args(p, c);
            n = c;
        } else {
            return n;
        }
    }
}

/* Names, constants, literals and parenthesized tuples. */
static jx_node *parse_primary(parser *p) {
    const jx_token *t = cur(p);
    jx_node *n;
    if (t->type == T_NAME) {
        n = node(p, N_CONST, t->line);
        if (!strcmp(t->s, "true") || !strcmp(t->s, "True")) {
            n->value = jx_bool(true);
        } else if (!strcmp(t->s, "false") || !strcmp(t->s, "False")) {
            n->value = jx_bool(false);
        } else if (!strcmp(t->s, "none") || !strcmp(t->s, "None")) {
            n->value = jx_none();
        } else {
            n->kind = N_NAME;
            n->name = t->s;
            if (!strcmp(t->s, "varargs")) p->macro_names |= JX_MACRO_VARARGS;
            if (!strcmp(t->s, "kwargs")) p->macro_names |= JX_MACRO_KWARGS;
            if (!strcmp(t->s, "caller")) p->macro_names |= JX_MACRO_CALLER;
        }
        advance(p);
    } else if (t->type == T_STRING) {
        jx_buf b;
        jx_buf_init(&b, p->m, 0);
        int line = t->line;
        while (cur(p)->type == T_STRING) {
            jx_buf_add(&b, cur(p)->s, cur(p)->len);
            advance(p);
        }
        n = node(p, N_CONST, line);
        n->value = jx_buf_finish(&b);
        jx_str_ncp(n->value.s); /* count now: the AST is shared read-only between renders */
    } else if (t->type == T_INT || t->type == T_FLOAT) {
        n = node(p, N_CONST, t->line);
        n->value = t->type == T_INT ? jx_int(t->i) : jx_float(t->f);
        advance(p);
    } else if (is_op(p, O_LPAREN)) {
        advance(p);
        n = parse_tuple(p, false, true, NULL, true);
        expect_op(p, O_RPAREN, ")");
    } else if (is_op(p, O_LBRACKET)) {
        n = node(p, N_LIST, t->line);
        advance(p);
        nodevec items = {0};
        while (!is_op(p, O_RBRACKET)) {
            if (items.n) expect_op(p, O_COMMA, ",");
            if (is_op(p, O_RBRACKET)) break;
            vec_push(p, &items, parse_expression(p, true));
        }
        expect_op(p, O_RBRACKET, "]");
        n->items = items.items;
        n->n_items = items.n;
    } else if (is_op(p, O_LBRACE)) {
        n = node(p, N_DICT, t->line);
        advance(p);
        nodevec keys = {0}, vals = {0};
        while (!is_op(p, O_RBRACE)) {
            if (keys.n) expect_op(p, O_COMMA, ",");
            if (is_op(p, O_RBRACE)) break;
            vec_push(p, &keys, parse_expression(p, true));
            expect_op(p, O_COLON, ":");
            vec_push(p, &vals, parse_expression(p, true));
        }
        expect_op(p, O_RBRACE, "}");
        n->items = keys.items;
        n->n_items = keys.n;
        n->items2 = vals.items;
        n->n_items2 = vals.n;
    } else {
        pfail(p, t->line, "unexpected '%s'%s", describe(t), "");
    }
    return n;
}

/* Unary - and +; filters bind after them (so -x|abs is abs(-x)). */
static jx_node *parse_unary(parser *p, bool with_filter) {
    enter(p);
    const jx_token *t = cur(p);
    jx_node *n;
    if (is_op(p, O_SUB) || is_op(p, O_ADD)) {
        advance(p);
        n = node(p, t->op == O_SUB ? N_NEG : N_POS, t->line);
        n->a = parse_unary(p, false);
    } else {
        n = parse_primary(p);
    }
    n = parse_postfix(p, n);
    if (with_filter) n = parse_filter_expr(p, n);
    leave(p);
    return n;
}

/* A binary-operator node. */
static jx_node *binop(parser *p, int op, jx_node *a, jx_node *b, int line) {
    jx_node *n = node(p, N_BINOP, line);
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

/* Binary levels, lowest to highest precedence below: or, and, not, compare, + -, ~, * / // %, **. */
static jx_node *parse_pow(parser *p) {
    jx_node *left = parse_unary(p, true);
    while (is_op(p, O_POW)) {
        int line = cur(p)->line;
        advance(p);
        left = binop(p, B_POW, left, parse_unary(p, true), line);
    }
    return left;
}

static jx_node *parse_math2(parser *p) {
    jx_node *left = parse_pow(p);
    for (;;) {
        int op = is_op(p, O_MUL) ? B_MUL : is_op(p, O_DIV) ? B_DIV : is_op(p, O_FLOORDIV) ? B_FLOORDIV
                 : is_op(p, O_MOD) ? B_MOD : -1;
        if (op < 0) return left;
        int line = cur(p)->line;
        advance(p);
        left = binop(p, op, left, parse_pow(p), line);
    }
}

static jx_node *parse_concat(parser *p) {
    jx_node *left = parse_math2(p);
    while (is_op(p, O_TILDE)) {
        int line = cur(p)->line;
        advance(p);
        left = binop(p, B_CONCAT, left, parse_math2(p), line);
    }
    return left;
}

static jx_node *parse_math1(parser *p) {
    jx_node *left = parse_concat(p);
    for (;;) {
        int op = is_op(p, O_ADD) ? B_ADD : is_op(p, O_SUB) ? B_SUB : -1;
        if (op < 0) return left;
        int line = cur(p)->line;
        advance(p);
        left = binop(p, op, left, parse_concat(p), line);
    }
}

/* Chained comparisons, `in` and `not in`. */
static jx_node *parse_compare(parser *p) {
    int line = cur(p)->line;
    jx_node *first = parse_math1(p);
    nodevec operands = {0};
    int ops[64];
    for (;;) {
        int op = -1;
        const jx_token *t = cur(p);
        if (t->type == T_OP) {
            switch (t->op) {
            case O_EQ: op = C_EQ; break;
            case O_NE: op = C_NE; break;
            case O_LT: op = C_LT; break;
            case O_LTEQ: op = C_LE; break;
            case O_GT: op = C_GT; break;
            case O_GTEQ: op = C_GE; break;
            default: break;
            }
            if (op >= 0) advance(p);
        } else if (is_name(t, "in")) {
            op = C_IN;
            advance(p);
        } else if (is_name(t, "not") && is_name(look(p), "in")) {
            op = C_NOTIN;
            advance(p);
            advance(p);
        }
        if (op < 0) break;
        if (operands.n >= 64) pfail(p, line, "comparison chain too long%s%s", "", "");
        ops[operands.n] = op;
        vec_push(p, &operands, parse_math1(p));
    }
    if (!operands.n) return first;
    jx_node *n = node(p, N_COMPARE, line);
    n->a = first;
    n->items = operands.items;
    n->n_items = operands.n;
    n->ops = jx_alloc(p->m, operands.n * sizeof(int));
    memcpy(n->ops, ops, operands.n * sizeof(int));
    return n;
}

/* Prefix `not`. */
static jx_node *parse_not(parser *p) {
    if (is_name(cur(p), "not")) {
        int line = cur(p)->line;
        advance(p);
        enter(p);
        jx_node *n = node(p, N_NOT, line);
        n->a = parse_not(p);
        leave(p);
        return n;
    }
    return parse_compare(p);
}

/* `and` chains. */
static jx_node *parse_and(parser *p) {
    jx_node *left = parse_not(p);
    while (is_name(cur(p), "and")) {
        int line = cur(p)->line;
        advance(p);
        jx_node *n = node(p, N_AND, line);
        n->a = left;
        n->b = parse_not(p);
        left = n;
    }
    return left;
}

/* `or` chains. */
static jx_node *parse_or(parser *p) {
    jx_node *left = parse_and(p);
    while (is_name(cur(p), "or")) {
        int line = cur(p)->line;
        advance(p);
        jx_node *n = node(p, N_OR, line);
        n->a = left;
        n->b = parse_and(p);
        left = n;
    }
    return left;
}

/* `a if cond [else b]`. */
static jx_node *parse_condexpr(parser *p) {
    int line = cur(p)->line;
    jx_node *expr1 = parse_or(p);
    while (skip_name(p, "if")) {
        jx_node *n = node(p, N_COND, line);
        n->a = parse_or(p);
        n->b = expr1;
        if (skip_name(p, "else")) {
            enter(p);
            n->c = parse_condexpr(p);
            leave(p);
        }
        expr1 = n;
        line = cur(p)->line;
    }
    return expr1;
}

/* An expression, with or without a trailing conditional. */
static jx_node *parse_expression(parser *p, bool with_condexpr) {
    enter(p);
    jx_node *n = with_condexpr ? parse_condexpr(p) : parse_or(p);
    leave(p);
    return n;
}

/* Whether the current token ends a bare tuple. */
static bool is_tuple_end(parser *p, const char *extra_end) {
    const jx_token *t = cur(p);
    if (t->type == T_VAR_END || t->type == T_BLOCK_END || (t->type == T_OP && t->op == O_RPAREN)) return true;
    return extra_end && is_name(t, extra_end);
}

static jx_node *parse_tuple(parser *p, bool simplified, bool with_condexpr, const char *extra_end,
                            bool explicit_parens) {
    int line = cur(p)->line;
    nodevec args = {0};
    bool is_tuple = false;
    for (;;) {
        if (args.n) expect_op(p, O_COMMA, ",");
        if (is_tuple_end(p, extra_end)) break;
        jx_node *e;
        if (simplified) {
            enter(p);
            e = parse_primary(p);
            leave(p);
        } else {
            e = parse_expression(p, with_condexpr);
        }
        vec_push(p, &args, e);
        if (is_op(p, O_COMMA)) is_tuple = true;
        else break;
    }
    if (!is_tuple) {
        if (args.n) return args.items[0];
        if (!explicit_parens) pfail(p, cur(p)->line, "expected an expression, got '%s'%s", describe(cur(p)), "");
    }
    jx_node *t = node(p, N_TUPLE, line);
    t->items = args.items;
    t->n_items = args.n;
    return t;
}

/* ---- statements -------------------------------------------------------------------------- */

static jx_node *parse_statement(parser *p);

/* Parses statements until a {% NAME %} with NAME in ends (NULL-terminated) and leaves the
 * stream on that NAME. At the end of the template, fails unless ends is NULL. */
static void parse_body(parser *p, const char *const *ends, const char *block, int block_line, jx_node ***out,
                       size_t *n_out) {
    nodevec body = {0};
    for (;;) {
        const jx_token *t = cur(p);
        if (t->type == T_EOF) {
            if (ends)
                jx_fail(p->m->err, QR_ERR_FORMAT, t->line,
                        "unexpected end of template: the '%s' block opened on line %d is not closed (expected "
                        "'%s')",
                        block, block_line, ends[0]);
            break;
        }
        if (t->type == T_DATA) {
            jx_node *n = node(p, S_TEXT, t->line);
            n->value = jx_str_new(p->m, t->s, t->len);
            jx_str_ncp(n->value.s);
            vec_push(p, &body, n);
            advance(p);
        } else if (t->type == T_VAR_BEGIN) {
            advance(p);
            jx_node *n = node(p, S_PRINT, t->line);
            n->a = parse_tuple(p, false, true, NULL, false);
            expect_type(p, T_VAR_END, "'}}'");
            vec_push(p, &body, n);
        } else if (t->type == T_BLOCK_BEGIN) {
            advance(p);
            if (ends && cur(p)->type == T_NAME)
                for (const char *const *e = ends; *e; e++)
                    if (!strcmp(cur(p)->s, *e)) goto done;
            jx_node *n = parse_statement(p);
            if (n) vec_push(p, &body, n);
            expect_type(p, T_BLOCK_END, "'%}'");
        } else {
            pfail(p, t->line, "unexpected '%s'%s", describe(t), "");
        }
    }
done:
    *out = body.items;
    *n_out = body.n;
}

/* The header of a statement ends with '%}' (an optional ':' before it is allowed). */
static void parse_statements(parser *p, const char *const *ends, const char *block, int line, jx_node ***out,
                             size_t *n_out) {
    skip_op(p, O_COLON);
    expect_type(p, T_BLOCK_END, "'%}'");
    enter(p);
    parse_body(p, ends, block, line, out, n_out);
    leave(p);
}

/* Assignment target: a name or a tuple of names. Sets names/n_names and op bit 1 for a tuple. */
static void parse_target(parser *p, jx_node *n, const char *extra_end) {
    int line = cur(p)->line;
    jx_node *t = parse_tuple(p, true, true, extra_end, false);
    const char *names[64];
    size_t k = 0;
    if (t->kind == N_NAME) {
        names[k++] = t->name;
    } else if (t->kind == N_TUPLE) {
        for (size_t i = 0; i < t->n_items; i++) {
            if (t->items[i]->kind != N_NAME)
                pfail(p, line, "can only unpack into plain names (nested tuples are not supported)%s%s", "", "");
            if (k >= 64) pfail(p, line, "too many names to unpack%s%s", "", "");
            names[k++] = t->items[i]->name;
        }
        n->op |= 1;
    } else {
        pfail(p, line, "can't assign to '%s'%s", t->kind == N_CONST ? "const" : "expression", "");
    }
    n->names = names_of(p, names, k);
    n->n_names = k;
}

static const char *parse_plain_name(parser *p) {
    const jx_token *t = cur(p);
    const char *name = expect_name(p);
    if (!strcmp(name, "true") || !strcmp(name, "false") || !strcmp(name, "none") || !strcmp(name, "True") ||
        !strcmp(name, "False") || !strcmp(name, "None"))
        pfail(p, t->line, "can't assign to '%s'%s", name, "");
    return name;
}

/* Macro / call-block signature "(a, b=1)". */
static void parse_signature(parser *p, jx_node *n) {
    expect_op(p, O_LPAREN, "(");
    const char *names[128];
    nodevec defaults = {0};
    size_t k = 0;
    while (!is_op(p, O_RPAREN)) {
        if (k) expect_op(p, O_COMMA, ",");
        if (k >= 128) pfail(p, cur(p)->line, "too many macro parameters%s%s", "", "");
        names[k++] = parse_plain_name(p);
        if (skip_op(p, O_ASSIGN)) vec_push(p, &defaults, parse_expression(p, true));
        else if (defaults.n) pfail(p, cur(p)->line, "non-default argument follows default argument%s%s", "", "");
    }
    expect_op(p, O_RPAREN, ")");
    n->names = names_of(p, names, k);
    n->n_names = k;
    n->items2 = defaults.items;
    n->n_items2 = defaults.n;
}

/* {% for targets in iter [if cond] [recursive] %}...[{% else %}...]{% endfor %} */
static jx_node *parse_for(parser *p, int line) {
    jx_node *n = node(p, S_FOR, line);
    parse_target(p, n, "in");
    if (!skip_name(p, "in")) pfail(p, cur(p)->line, "expected 'in', got '%s'%s", describe(cur(p)), "");
    n->a = parse_tuple(p, false, false, "recursive", false);
    if (skip_name(p, "if")) n->b = parse_expression(p, true);
    if (skip_name(p, "recursive")) n->op |= 2;
    static const char *const ends[] = {"endfor", "else", NULL};
    static const char *const ends2[] = {"endfor", NULL};
    p->loop_depth++;
    parse_statements(p, ends, "for", line, &n->items, &n->n_items);
    p->loop_depth--;
    if (is_name(cur(p), "else")) {
        advance(p);
        parse_statements(p, ends2, "for", line, &n->items2, &n->n_items2);
    }
    advance(p); /* endfor */
    return n;
}

/* {% if %}...{% elif %}...{% else %}...{% endif %}; elif nests as an S_IF in items2. */
static jx_node *parse_if(parser *p, int line) {
    jx_node *n = node(p, S_IF, line);
    n->a = parse_tuple(p, false, false, NULL, false);
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    static const char *const ends2[] = {"endif", NULL};
    parse_statements(p, ends, "if", line, &n->items, &n->n_items);
    if (is_name(cur(p), "elif")) {
        int l2 = cur(p)->line;
        advance(p);
        enter(p);
        jx_node *e = parse_if(p, l2); /* consumes through endif */
        leave(p);
        n->items2 = jx_alloc(p->m, sizeof(jx_node *));
        n->items2[0] = e;
        n->n_items2 = 1;
        return n;
    }
    if (is_name(cur(p), "else")) {
        advance(p);
        parse_statements(p, ends2, "if", line, &n->items2, &n->n_items2);
    }
    advance(p); /* endif */
    return n;
}

/* {% set target = expr %} or the block form {% set target [| filters] %}...{% endset %}. */
static jx_node *parse_set(parser *p, int line) {
    jx_node *n = node(p, S_SET, line);
    if (cur(p)->type == T_NAME && look(p)->type == T_OP && look(p)->op == O_DOT) {
        n->name = cur(p)->s;
        advance(p);
        advance(p);
        n->name2 = expect_name(p);
    } else {
        parse_target(p, n, NULL);
        if (!(n->op & 1)) n->name = n->names[0];
    }
    if (skip_op(p, O_ASSIGN)) {
        n->b = parse_tuple(p, false, true, NULL, false);
        return n;
    }
    n->kind = S_SETBLOCK;
    jx_node *chain = parse_filter(p, NULL, false);
    nodevec filters = {0};
    for (jx_node *f = chain; f; f = f->a) vec_push(p, &filters, f);
    /* the chain is nested outermost-first; store it innermost-first */
    for (size_t i = 0; i < filters.n / 2; i++) {
        jx_node *tmp = filters.items[i];
        filters.items[i] = filters.items[filters.n - 1 - i];
        filters.items[filters.n - 1 - i] = tmp;
    }
    n->items2 = filters.items;
    n->n_items2 = filters.n;
    static const char *const ends[] = {"endset", NULL};
    parse_statements(p, ends, "set", line, &n->items, &n->n_items);
    advance(p);
    return n;
}

/* {% macro name(params) %}...{% endmacro %}. */
static jx_node *parse_macro(parser *p, int line) {
    jx_node *n = node(p, S_MACRO, line);
    n->name = parse_plain_name(p);
    parse_signature(p, n);
    int saved = p->macro_names, saved_loops = p->loop_depth;
    p->macro_names = 0;
    p->loop_depth = 0;
    static const char *const ends[] = {"endmacro", NULL};
    parse_statements(p, ends, "macro", line, &n->items, &n->n_items);
    n->op = p->macro_names;
    p->macro_names = saved;
    p->loop_depth = saved_loops;
    advance(p);
    return n;
}

/* {% call[(params)] macro(args) %}...{% endcall %}. */
static jx_node *parse_call_block(parser *p, int line) {
    jx_node *n = node(p, S_CALLBLOCK, line);
    if (is_op(p, O_LPAREN)) parse_signature(p, n);
    n->a = parse_expression(p, true);
    if (n->a->kind != N_CALL) pfail(p, line, "expected a call after {%% call %%}%s%s", "", "");
    int saved = p->macro_names, saved_loops = p->loop_depth;
    p->macro_names = 0;
    p->loop_depth = 0;
    static const char *const ends[] = {"endcall", NULL};
    parse_statements(p, ends, "call", line, &n->items, &n->n_items);
    n->op = p->macro_names;
    p->macro_names = saved;
    p->loop_depth = saved_loops;
    advance(p);
    return n;
}

/* {% filter f | g %}...{% endfilter %}. */
static jx_node *parse_filter_block(parser *p, int line) {
    jx_node *n = node(p, S_FILTERBLOCK, line);
    jx_node *chain = parse_filter(p, NULL, true);
    nodevec filters = {0};
    for (jx_node *f = chain; f; f = f->a) vec_push(p, &filters, f);
    for (size_t i = 0; i < filters.n / 2; i++) {
        jx_node *tmp = filters.items[i];
        filters.items[i] = filters.items[filters.n - 1 - i];
        filters.items[filters.n - 1 - i] = tmp;
    }
    n->items2 = filters.items;
    n->n_items2 = filters.n;
    static const char *const ends[] = {"endfilter", NULL};
    parse_statements(p, ends, "filter", line, &n->items, &n->n_items);
    advance(p);
    return n;
}

/* {% with a = x, b = y %}...{% endwith %}. */
static jx_node *parse_with(parser *p, int line) {
    jx_node *n = node(p, S_WITH, line);
    const char *names[64];
    nodevec vals = {0};
    size_t k = 0;
    while (cur(p)->type != T_BLOCK_END) {
        if (k) expect_op(p, O_COMMA, ",");
        if (k >= 64) pfail(p, line, "too many names in {%% with %%}%s%s", "", "");
        names[k++] = parse_plain_name(p);
        expect_op(p, O_ASSIGN, "=");
        vec_push(p, &vals, parse_expression(p, true));
    }
    n->names = names_of(p, names, k);
    n->n_names = k;
    n->items2 = vals.items;
    n->n_items2 = vals.n;
    static const char *const ends[] = {"endwith", NULL};
    parse_statements(p, ends, "with", line, &n->items, &n->n_items);
    advance(p);
    return n;
}

/* A statement after {%; dispatches on the tag name. */
static jx_node *parse_statement(parser *p) {
    const jx_token *t = cur(p);
    if (t->type != T_NAME) pfail(p, t->line, "tag name expected, got '%s'%s", describe(t), "");
    const char *tag = t->s;
    int line = t->line;
    advance(p);
    enter(p);
    jx_node *n = NULL;
    if (!strcmp(tag, "for")) {
        n = parse_for(p, line);
    } else if (!strcmp(tag, "if")) {
        n = parse_if(p, line);
    } else if (!strcmp(tag, "set")) {
        n = parse_set(p, line);
    } else if (!strcmp(tag, "macro")) {
        n = parse_macro(p, line);
    } else if (!strcmp(tag, "call")) {
        n = parse_call_block(p, line);
    } else if (!strcmp(tag, "filter")) {
        n = parse_filter_block(p, line);
    } else if (!strcmp(tag, "with")) {
        n = parse_with(p, line);
    } else if (!strcmp(tag, "print")) {
        n = node(p, S_BLOCK, line);
        nodevec items = {0};
        while (cur(p)->type != T_BLOCK_END) {
            if (items.n) expect_op(p, O_COMMA, ",");
            jx_node *o = node(p, S_PRINT, cur(p)->line);
            o->a = parse_expression(p, true);
            vec_push(p, &items, o);
        }
        n->items = items.items;
        n->n_items = items.n;
    } else if (!strcmp(tag, "break") || !strcmp(tag, "continue")) {
        if (p->loop_depth == 0) pfail(p, line, "'%s' outside of a for loop%s", tag, "");
        n = node(p, tag[0] == 'b' ? S_BREAK : S_CONTINUE, line);
    } else if (!strcmp(tag, "generation")) {
        n = node(p, S_BLOCK, line);
        static const char *const ends[] = {"endgeneration", NULL};
        parse_statements(p, ends, "generation", line, &n->items, &n->n_items);
        advance(p);
    } else if (!strcmp(tag, "block") || !strcmp(tag, "extends") || !strcmp(tag, "include") ||
               !strcmp(tag, "import") || !strcmp(tag, "from") || !strcmp(tag, "autoescape")) {
        pfail(p, line, "the '%s' tag is not supported in chat templates%s", tag, "");
    } else {
        pfail(p, line, "encountered unknown tag '%s'%s", tag, "");
    }
    leave(p);
    return n;
}

/* See jinja.h. */
void jx_parse(jx_mem *m, const jx_token *toks, size_t n, jx_node ***body, size_t *n_body) {
    parser p = {.m = m, .t = toks, .n = n};
    parse_body(&p, NULL, NULL, 0, body, n_body);
}
