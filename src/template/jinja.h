/* jinja.h — internals of the Jinja-subset interpreter behind template.h.
 *
 * Pipeline: source -> jx_lex (tokens, jinja2's lexer rules with trim_blocks/lstrip_blocks) ->
 * jx_parse (AST) -> jx_render (tree-walking evaluator over jx_val values).
 *
 * Memory: every object made while parsing lives in the template's arena; every object made while
 * rendering lives in the render's arena, freed in one go when the render ends. Values are immutable
 * except namespaces and loop objects, so sharing them needs no reference counts.
 *
 * Errors: parser and evaluator report failures with jx_fail(), which formats the message and
 * longjmps back to the entry point (jx_parse / jx_render). Nothing outside the arena is allocated
 * between setjmp and longjmp, so an error leaks nothing.
 */
#ifndef QR_JINJA_H
#define QR_JINJA_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "quarrel.h"

/* ---- errors and memory ------------------------------------------------------------------ */

typedef struct jx_err {
    jmp_buf jb;       /* where jx_fail jumps to */
    char *msg;        /* [msg_len] caller-owned message buffer (may be NULL) */
    size_t msg_len;
    qr_status status; /* set by jx_fail */
} jx_err;

typedef struct jx_chunk jx_chunk;

/* A bump allocator with a byte cap; allocation failure (cap or OOM) calls jx_fail. */
typedef struct jx_mem {
    jx_chunk *head;  /* newest chunk first */
    size_t total;    /* bytes obtained from malloc so far */
    size_t limit;    /* cap on total bytes (0 = no cap) */
    jx_err *err;     /* where allocation failures are reported */
} jx_mem;

/* Reports an error "template line LINE: MSG" (or "template: MSG" when line <= 0) and longjmps. */
_Noreturn void jx_fail(jx_err *e, qr_status status, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Returns n bytes (16-byte aligned, zeroed) from the arena; fails via m->err. */
void *jx_alloc(jx_mem *m, size_t n);
/* Releases every chunk. Safe on a zeroed jx_mem. */
void jx_mem_free(jx_mem *m);
/* Copies [s, s+n) into the arena, NUL-terminated. */
char *jx_strndup(jx_mem *m, const char *s, size_t n);

/* ---- values ------------------------------------------------------------------------------ */

typedef enum jx_type {
    JX_UNDEF = 0, /* jinja2 Undefined: prints as "", falsy, fails on arithmetic/attribute access */
    JX_NONE,
    JX_BOOL,
    JX_INT,   /* Python int limited to int64 (overflow is an error) */
    JX_FLOAT, /* Python float */
    JX_STR,   /* Python str, stored as UTF-8; indexing and length count code points */
    JX_LIST,  /* list or tuple (jx_list.tuple), immutable once built */
    JX_DICT,  /* dict with insertion order, immutable once built */
    JX_NS,    /* jinja2 namespace(): mutable attribute bag */
    JX_FUNC,  /* builtin function or bound method */
    JX_MACRO, /* {% macro %} or a call block's caller */
    JX_LOOP,  /* the `loop` object of a for loop */
    JX_SLICE, /* a[b:c:d] index */
} jx_type;

typedef struct jx_str jx_str;
typedef struct jx_list jx_list;
typedef struct jx_dict jx_dict;
typedef struct jx_ns jx_ns;
typedef struct jx_func jx_func;
typedef struct jx_macro jx_macro;
typedef struct jx_loop jx_loop;
typedef struct jx_undef jx_undef;
typedef struct jx_slice jx_slice;

typedef struct jx_val {
    jx_type t;
    union {
        bool b;
        int64_t i;
        double f;
        jx_str *s;
        jx_list *l;
        jx_dict *d;
        jx_ns *ns;
        jx_func *fn;
        jx_macro *m;
        jx_loop *loop;
        jx_undef *u; /* may be NULL for an anonymous undefined */
        jx_slice *sl;
    };
} jx_val;

struct jx_str {
    size_t len;    /* bytes, excluding the NUL terminator */
    int64_t ncp;   /* code points, or -1 when not yet counted */
    bool markup;   /* jinja2 Markup (from |safe or |escape): `+` escapes the other operand */
    char data[];   /* [len + 1], NUL-terminated UTF-8 */
};

struct jx_list {
    size_t n;       /* items */
    bool tuple;     /* prints as (a, b) and concatenates only with tuples */
    bool group;     /* a groupby() result pair: .grouper is items[0], .list is items[1] */
    jx_val *items;  /* [n] */
};

struct jx_dict {
    size_t n, cap;
    jx_val *keys; /* [n], hashable scalars or tuples */
    jx_val *vals; /* [n] */
};

struct jx_ns {
    size_t n, cap;
    jx_str **keys; /* [n] */
    jx_val *vals;  /* [n] */
};

struct jx_undef {
    jx_val name;          /* the missing name or key (JX_UNDEF when anonymous) */
    const char *obj_desc; /* "dict object", "None", ... or NULL when a variable is missing */
    const char *hint;     /* full message overriding the generated one, or NULL */
};

struct jx_func {
    int id;            /* jx_builtin_id */
    const char *name;  /* method or function name, for messages */
    jx_val self;       /* bound object for methods (JX_UNDEF for globals) */
};

struct jx_slice {
    jx_val start, stop, step; /* JX_NONE when omitted */
};

/* Builders and accessors. All allocation goes to m. */
jx_val jx_undefined(jx_mem *m, jx_val name, const char *obj_desc, const char *hint);
jx_val jx_undefined_name(jx_mem *m, const char *name);
jx_val jx_none(void);
jx_val jx_bool(bool b);
jx_val jx_int(int64_t i);
jx_val jx_float(double f);
jx_val jx_str_new(jx_mem *m, const char *s, size_t len);
jx_val jx_cstr(jx_mem *m, const char *s);
jx_val jx_str_val(jx_str *s);
jx_val jx_list_new(jx_mem *m, size_t n, bool tuple); /* items zeroed (undefined) */
jx_val jx_dict_new(jx_mem *m, size_t cap);
/* Inserts or replaces key (Python dict semantics: position of first insertion kept). */
void jx_dict_set(jx_mem *m, jx_dict *d, jx_val key, jx_val val);
/* Looks up key with Python equality; returns false when absent. */
bool jx_dict_get(const jx_dict *d, jx_val key, jx_val *out);
/* String-key lookup. */
bool jx_dict_get_str(const jx_dict *d, const char *key, size_t len, jx_val *out);
jx_val jx_ns_new(jx_mem *m);
void jx_ns_set(jx_mem *m, jx_ns *ns, jx_str *key, jx_val val);
bool jx_ns_get(const jx_ns *ns, const char *key, size_t len, jx_val *out);

/* A growable byte buffer in the arena; `max` caps its length (0 = no cap beyond the arena). */
typedef struct jx_buf {
    char *data;
    size_t len, cap;
    size_t max;       /* bytes */
    jx_mem *m;
    int line;         /* for the overflow message */
} jx_buf;
void jx_buf_init(jx_buf *b, jx_mem *m, size_t max);
void jx_buf_add(jx_buf *b, const char *s, size_t n);
void jx_buf_addc(jx_buf *b, char c);
void jx_buf_addf(jx_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
jx_val jx_buf_finish(jx_buf *b); /* the buffer's bytes as a string value */

/* A growable list builder. */
typedef struct jx_vec {
    jx_val *items;
    size_t n, cap;
    jx_mem *m;
} jx_vec;
void jx_vec_init(jx_vec *v, jx_mem *m);
void jx_vec_push(jx_vec *v, jx_val x);
jx_val jx_vec_finish(jx_vec *v, bool tuple);

/* UTF-8 helpers (invalid bytes count as one code point each). */
size_t jx_utf8_next(const char *s, size_t len, size_t i, uint32_t *cp); /* returns next index */
size_t jx_utf8_encode(uint32_t cp, char out[4]);
int64_t jx_str_ncp(jx_str *s);
/* Byte offset of code point index k (0 <= k <= ncp). */
size_t jx_str_cp_offset(jx_str *s, int64_t k);
/* Python str.isspace() for one code point. */
bool jx_is_space(uint32_t cp);

/* Python semantics. */
bool jx_truthy(jx_val v);
bool jx_eq(jx_val a, jx_val b);
const char *jx_type_name(jx_val v); /* Python type name: "str", "int", "NoneType", "dict", ... */
const char *jx_obj_desc(jx_mem *m, jx_val v); /* jinja2 object_type_repr: "dict object", "None" */

/* ---- AST --------------------------------------------------------------------------------- */

typedef enum jx_kind {
    /* expressions */
    N_CONST,    /* value */
    N_NAME,     /* name */
    N_LIST,     /* items */
    N_TUPLE,    /* items */
    N_DICT,     /* items = keys, items2 = values */
    N_GETATTR,  /* a = object, name = attribute */
    N_GETITEM,  /* a = object, b = index (maybe N_SLICE) */
    N_SLICE,    /* a, b, c = start, stop, step (NULL = omitted) */
    N_CALL,     /* a = callee; items = positional; names/items2 = keywords; c = *args; d = **kwargs */
    N_FILTER,   /* a = input (NULL in filter chains), op = filter id, name, args as N_CALL */
    N_TEST,     /* a = input, op = test id, name, args as N_CALL */
    N_NOT,      /* a */
    N_NEG,      /* a */
    N_POS,      /* a */
    N_BINOP,    /* op = jx_binop, a, b */
    N_AND,      /* a, b */
    N_OR,       /* a, b */
    N_COMPARE,  /* a = first operand; items = further operands, ops[n_items] */
    N_COND,     /* a = test, b = value if true, c = value if false (NULL: undefined) */
    /* statements */
    S_TEXT,     /* value (string) */
    S_PRINT,    /* a */
    S_IF,       /* a = test, items = body, items2 = else body (elif: one nested S_IF) */
    S_FOR,      /* names = targets (op & 1: tuple target); a = iterable; b = filter test;
                   items = body; items2 = else body; op & 2: recursive */
    S_SET,      /* target (see below); b = value */
    S_SETBLOCK, /* target; items = body; items2 = filter chain */
    S_MACRO,    /* name; names = params; items2 = defaults for the last n_items2 params; items = body;
                   op: JX_MACRO_VARARGS | JX_MACRO_KWARGS | JX_MACRO_CALLER */
    S_CALLBLOCK,/* a = N_CALL; names = caller params; items2 = defaults; items = body; op as S_MACRO */
    S_FILTERBLOCK, /* items2 = filter chain; items = body */
    S_WITH,     /* names = targets; items2 = values; items = body */
    S_BLOCK,    /* items = body (used for {% generation %}: renders its body) */
    S_BREAK,
    S_CONTINUE,
} jx_kind;

/* Assignment targets of S_SET / S_SETBLOCK: name (single), name + name2 (namespace attribute
 * name.name2), or names[n_names] (tuple unpacking, op & 1). */

enum { JX_MACRO_VARARGS = 1, JX_MACRO_KWARGS = 2, JX_MACRO_CALLER = 4 };

typedef enum jx_binop {
    B_ADD, B_SUB, B_MUL, B_DIV, B_FLOORDIV, B_MOD, B_POW, B_CONCAT,
} jx_binop;

typedef enum jx_cmpop { C_EQ, C_NE, C_LT, C_LE, C_GT, C_GE, C_IN, C_NOTIN } jx_cmpop;

typedef struct jx_node jx_node;
struct jx_node {
    jx_kind kind;
    int line;           /* 1-based source line */
    int op;             /* operator / filter or test id / flags, per kind */
    const char *name;   /* per kind (see jx_kind) */
    const char *name2;  /* namespace attribute of a set target */
    jx_val value;       /* N_CONST, S_TEXT */
    jx_node *a, *b, *c, *d;
    jx_node **items;    /* [n_items] */
    size_t n_items;
    jx_node **items2;   /* [n_items2] */
    size_t n_items2;
    const char **names; /* [n_names] */
    size_t n_names;
    int *ops;           /* N_COMPARE: [n_items] jx_cmpop */
};

/* ---- lexer ------------------------------------------------------------------------------- */

typedef enum jx_tok_type {
    T_EOF, T_DATA, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END,
    T_NAME, T_STRING, T_INT, T_FLOAT, T_OP,
} jx_tok_type;

typedef enum jx_opkind {
    O_ADD, O_SUB, O_DIV, O_FLOORDIV, O_MUL, O_MOD, O_POW, O_TILDE,
    O_LBRACKET, O_RBRACKET, O_LPAREN, O_RPAREN, O_LBRACE, O_RBRACE,
    O_EQ, O_NE, O_GT, O_GTEQ, O_LT, O_LTEQ, O_ASSIGN, O_DOT, O_COLON, O_PIPE, O_COMMA, O_SEMICOLON,
} jx_opkind;

typedef struct jx_token {
    jx_tok_type type;
    int op;          /* T_OP: jx_opkind */
    int line;
    const char *s;   /* T_DATA, T_NAME, T_STRING: arena text (NUL-terminated) */
    size_t len;
    int64_t i;       /* T_INT */
    double f;        /* T_FLOAT */
} jx_token;

/* Tokenizes src[0..len) into m's arena. Errors via m->err. */
void jx_lex(jx_mem *m, const char *src, size_t len, jx_token **out, size_t *n_out);

/* ---- parser ------------------------------------------------------------------------------ */

#define JX_MAX_PARSE_DEPTH 200 /* nesting of expressions and blocks */

/* Parses the token list into a statement list (the template body). */
void jx_parse(jx_mem *m, const jx_token *toks, size_t n, jx_node ***body, size_t *n_body);

/* ---- filters, tests, builtins (ids resolved at parse time) --------------------------------- */

/* Filter id for name, -1 when jinja2 has no such filter, -2 when jinja2 has it but we do not. */
int jx_filter_id(const char *name);
int jx_test_id(const char *name);

/* ---- runtime ----------------------------------------------------------------------------- */

typedef struct jx_scope jx_scope;
struct jx_scope {
    jx_scope *parent;
    size_t n, cap;
    const char **names; /* [n] */
    jx_val *vals;       /* [n] */
};

struct jx_macro {
    const jx_node *def;  /* S_MACRO, or S_CALLBLOCK for a call block's `caller` */
    jx_scope *closure;   /* scope the macro was defined in; free names resolve there at call time */
    const char *name;    /* "caller" for call blocks */
    jx_val caller;       /* the `caller` passed to this macro (JX_UNDEF when none) */
};

struct jx_loop {
    jx_list *items;       /* the iterated items, after the loop's `if` filter */
    size_t index0;        /* current position in items */
    int depth0;           /* 0 for the outermost loop level of a recursive loop */
    bool has_changed;     /* loop.changed(): whether last_changed holds a value */
    jx_val last_changed;
    const jx_node *node;  /* the S_FOR, for recursive loop(...) calls */
    jx_scope *scope;      /* scope the S_FOR runs in, for recursive calls */
};

typedef struct jx_rt {
    jx_mem mem;          /* render arena */
    jx_err err;
    uint64_t steps;      /* evaluation steps so far */
    uint64_t max_steps;
    int depth;           /* current macro / recursion depth */
    int eval_depth;      /* current expression nesting while evaluating */
    int max_depth;
    size_t max_output;   /* bytes of final output */
    jx_buf *out;         /* the buffer being written */
    jx_scope *globals;   /* render context (messages, tools, ...) */
    struct tm now;       /* strftime_now clock */
} jx_rt;

/* Evaluated call arguments. */
typedef struct jx_args {
    size_t n;
    jx_val *pos;            /* [n] */
    size_t nkw;
    const char **kwnames;   /* [nkw] */
    jx_val *kw;             /* [nkw] */
} jx_args;

/* Binds args to params[0..np) Python-style (positional first, then keywords by name). Sets
 * vals[i] and has[i]; extra or unknown arguments fail naming `what`. */
void jx_bind(jx_rt *rt, int line, const char *what, const jx_args *args, const char *const *params,
             size_t np, jx_val *vals, bool *has);

/* Fails with the message of an undefined value (jinja2's UndefinedError). */
_Noreturn void jx_fail_undefined(jx_rt *rt, int line, jx_val u);
/* Python str(v) and repr(v) into b (depth-guarded). */
void jx_str_into(jx_rt *rt, int line, jx_buf *b, jx_val v);
void jx_repr_into(jx_rt *rt, int line, jx_buf *b, jx_val v, int depth);
/* str(v) as a string value (returns v itself when it is a string). */
jx_val jx_to_str(jx_rt *rt, int line, jx_val v);
/* Python repr of a float (shortest round-trip). */
void jx_float_repr(double f, char out[32]);
/* json.dumps(v, ensure_ascii=False, ...) into b: with use_indent, items go on new lines indented
 * by `indent_str` per level; item_sep/key_sep are the separators (", "/": " by default); depth is
 * the current nesting level (start at 0). Fails for values JSON cannot encode. */
void jx_json_dump(jx_rt *rt, int line, jx_buf *b, jx_val v, const char *indent_str, bool use_indent,
                  const char *item_sep, const char *key_sep, bool sort_keys, int depth);
/* Python ordering; fails with TypeError-style message for unorderable types. Returns <0, 0, >0. */
int jx_compare(jx_rt *rt, int line, jx_val a, jx_val b);
/* len(v) in Python terms; fails for objects without len. */
int64_t jx_len(jx_rt *rt, int line, jx_val v);
/* Iterates v into a list (dict -> keys, str -> chars, undefined -> empty); fails when not iterable. */
jx_list *jx_iterate(jx_rt *rt, int line, jx_val v);
/* Attribute and item access with jinja2's sandboxed semantics. */
jx_val jx_getattr(jx_rt *rt, int line, jx_val obj, const char *name);
jx_val jx_getitem(jx_rt *rt, int line, jx_val obj, jx_val key);
/* Calls a callable value with evaluated arguments. */
jx_val jx_call(jx_rt *rt, int line, jx_val fn, const jx_args *args);
/* Calls a method or attribute of a builtin type. */
jx_val jx_call_builtin(jx_rt *rt, int line, const jx_func *fn, const jx_args *args);
/* Looks up a builtin method `name` of obj; returns false when obj has none. Sets *unsafe when the
 * method exists but the immutable sandbox forbids it. */
bool jx_find_method(jx_val obj, const char *name, int *id, bool *unsafe);
/* Global functions (range, namespace, dict, raise_exception, strftime_now, ...). */
bool jx_find_global(const char *name, jx_val *out);
/* Applies a filter (n->op) to input with arguments evaluated by the caller. */
jx_val jx_apply_filter(jx_rt *rt, const jx_node *n, jx_val input, const jx_args *args);
/* Applies a test (by id) to v. */
bool jx_apply_test(jx_rt *rt, int line, int id, const char *name, jx_val v, const jx_args *args);
/* `item in container` and comparison operators (jx_cmpop) with Python semantics. */
bool jx_contains(jx_rt *rt, int line, jx_val container, jx_val item);
bool jx_compare_op(jx_rt *rt, int line, int op, jx_val a, jx_val b);
/* Binary operator with Python semantics. */
jx_val jx_binop_eval(jx_rt *rt, int line, int op, jx_val a, jx_val b);
/* Python str methods used by filters: strip with optional chars (NULL = whitespace). */
jx_val jx_strip(jx_rt *rt, jx_val s, const jx_str *chars, bool left, bool right);
jx_val jx_case(jx_rt *rt, jx_val s, int mode); /* 0 lower, 1 upper, 2 capitalize, 3 str.title */
jx_val jx_str_replace(jx_rt *rt, int line, jx_str *s, jx_str *old, jx_str *new_, int64_t count);
/* Python slice of a list or string. */
jx_val jx_slice_apply(jx_rt *rt, int line, jx_val obj, const jx_slice *sl);

/* Counts one evaluation step; fails past the step budget. */
void jx_step(jx_rt *rt, int line);

/* Renders the template body with rt->globals as context into rt->out. */
void jx_exec_body(jx_rt *rt, jx_node **body, size_t n);

/* HTML-escapes s (markupsafe.escape) into b. */
void jx_escape_into(jx_buf *b, const char *s, size_t n);
/* Python printf-style formatting: fmt % args (args: tuple, dict or a single value). */
jx_val jx_percent_format(jx_rt *rt, int line, jx_str *fmt, jx_val args);

#endif /* QR_JINJA_H */
