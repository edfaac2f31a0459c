/* jinja_eval.c — tree-walking evaluator: scopes, statements, expressions, attribute access,
 * calls, macros and loops, with jinja2's semantics (ImmutableSandboxedEnvironment, default
 * Undefined).
 *
 * Scoping mirrors jinja2: a for-loop iteration, macro call, block set, filter block and with
 * block each get a fresh scope whose writes never leak out; if/elif/else share the enclosing
 * scope. Reads walk the chain: local scopes -> template top level -> render context -> global
 * functions. Macros resolve free names in the scope where they were defined, at call time. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "template/jinja.h"

enum { FLOW_NORMAL = 0, FLOW_BREAK = 1, FLOW_CONTINUE = 2 };

#define JX_MAX_EVAL_DEPTH 1000

/* eval_inner with the step budget and a nesting guard. */
static jx_val eval(jx_rt *rt, jx_scope *sc, const jx_node *n);
/* Executes statements in order until one breaks or continues. */
static int exec_body(jx_rt *rt, jx_scope *sc, jx_node *const *body, size_t n);

/* See jinja.h. */
void jx_step(jx_rt *rt, int line) {
    if (++rt->steps > rt->max_steps)
        jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "template exceeded the step limit (%llu evaluation steps)",
                (unsigned long long)rt->max_steps);
}

/* See jinja.h. The message follows jinja2's Undefined._undefined_message. */
void jx_fail_undefined(jx_rt *rt, int line, jx_val v) {
    const jx_undef *u = v.u;
    jx_buf b;
    jx_buf_init(&b, &rt->mem, 0);
    if (!u || u->name.t == JX_UNDEF) {
        jx_buf_add(&b, u && u->hint ? u->hint : "value is undefined", strlen(u && u->hint ? u->hint : "value is undefined"));
    } else if (u->hint) {
        jx_buf_add(&b, u->hint, strlen(u->hint));
    } else if (!u->obj_desc) {
        jx_repr_into(rt, line, &b, u->name, 0);
        jx_buf_add(&b, " is undefined", 13);
    } else if (u->name.t != JX_STR) {
        jx_buf_addf(&b, "%s has no element ", u->obj_desc);
        jx_repr_into(rt, line, &b, u->name, 0);
    } else {
        jx_buf_addf(&b, "'%s' has no attribute ", u->obj_desc);
        jx_repr_into(rt, line, &b, u->name, 0);
    }
    jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "%s", b.data ? b.data : "");
}

/* ---- scopes -------------------------------------------------------------------------------- */

/* A new empty scope whose reads fall through to parent. */
static jx_scope *scope_new(jx_rt *rt, jx_scope *parent) {
    jx_scope *s = jx_alloc(&rt->mem, sizeof *s);
    s->parent = parent;
    return s;
}

/* Binds name in scope s itself (never in a parent). */
static void scope_set(jx_rt *rt, jx_scope *s, const char *name, jx_val v) {
    for (size_t i = 0; i < s->n; i++)
        if (s->names[i] == name || strcmp(s->names[i], name) == 0) {
            s->vals[i] = v;
            return;
        }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 8;
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
    s->names[s->n] = name;
    s->vals[s->n] = v;
    s->n++;
}

/* Finds name in s or its parents. */
static bool scope_get(const jx_scope *s, const char *name, jx_val *out) {
    for (; s; s = s->parent)
        for (size_t i = s->n; i-- > 0;)
            if (s->names[i] == name || strcmp(s->names[i], name) == 0) {
                *out = s->vals[i];
                return true;
            }
    return false;
}

/* Variable lookup: scopes, then global functions, else an undefined named `name`. */
static jx_val lookup(jx_rt *rt, jx_scope *sc, const char *name) {
    jx_val v;
    if (scope_get(sc, name, &v)) return v;
    if (jx_find_global(name, &v)) return v;
    return jx_undefined_name(&rt->mem, name);
}

/* ---- output ---------------------------------------------------------------------------------- */

/* Writes str(v) to the current output. */
static void write_val(jx_rt *rt, int line, jx_val v) {
    rt->out->line = line;
    jx_str_into(rt, line, rt->out, v);
}

/* Runs body in scope sc with output captured; returns the text. */
static jx_val capture(jx_rt *rt, jx_scope *sc, jx_node *const *body, size_t n, int *flow) {
    jx_buf *saved = rt->out, buf;
    jx_buf_init(&buf, &rt->mem, rt->max_output);
    rt->out = &buf;
    int f = exec_body(rt, sc, body, n);
    if (flow) *flow = f;
    rt->out = saved;
    return jx_buf_finish(&buf);
}

/* ---- attribute and item access ----------------------------------------------------------------- */

/* The undefined the sandbox returns for a forbidden attribute. */
static jx_val unsafe_undefined(jx_rt *rt, jx_val obj, const char *name) {
    char *hint = jx_alloc(&rt->mem, strlen(name) + 64);
    sprintf(hint, "access to attribute '%s' of '%s' object is unsafe.", name, jx_type_name(obj));
    return jx_undefined(&rt->mem, jx_cstr(&rt->mem, name), jx_obj_desc(&rt->mem, obj), hint);
}

/* A callable bound to obj (method id). */
static jx_val bound_method(jx_rt *rt, jx_val obj, int id, const char *name) {
    jx_func *f = jx_alloc(&rt->mem, sizeof *f);
    f->id = id;
    f->name = name;
    f->self = obj;
    return (jx_val){.t = JX_FUNC, .fn = f};
}

/* Whether name is a __dunder__ name (unsafe on builtin types). */
static bool is_dunder(const char *name) {
    size_t n = strlen(name);
    return n >= 4 && name[0] == '_' && name[1] == '_' && name[n - 1] == '_' && name[n - 2] == '_';
}

/* Python attribute lookup on obj (no item fallback); false when obj has no such attribute. */
static bool get_attribute(jx_rt *rt, jx_val obj, const char *name, jx_val *out) {
    int id;
    bool unsafe = false;
    if (obj.t == JX_NS) {
        return jx_ns_get(obj.ns, name, strlen(name), out);
    }
    if (obj.t == JX_LOOP) {
        const jx_loop *L = obj.loop;
        int64_t len = (int64_t)L->items->n, i0 = (int64_t)L->index0;
        if (!strcmp(name, "index")) *out = jx_int(i0 + 1);
        else if (!strcmp(name, "index0")) *out = jx_int(i0);
        else if (!strcmp(name, "revindex")) *out = jx_int(len - i0);
        else if (!strcmp(name, "revindex0")) *out = jx_int(len - i0 - 1);
        else if (!strcmp(name, "first")) *out = jx_bool(i0 == 0);
        else if (!strcmp(name, "last")) *out = jx_bool(i0 == len - 1);
        else if (!strcmp(name, "length")) *out = jx_int(len);
        else if (!strcmp(name, "depth")) *out = jx_int(L->depth0 + 1);
        else if (!strcmp(name, "depth0")) *out = jx_int(L->depth0);
        else if (!strcmp(name, "previtem"))
            *out = i0 > 0 ? L->items->items[i0 - 1]
                          : jx_undefined(&rt->mem, jx_cstr(&rt->mem, "previtem"), NULL, "there is no previous item");
        else if (!strcmp(name, "nextitem"))
            *out = i0 + 1 < len ? L->items->items[i0 + 1]
                                : jx_undefined(&rt->mem, jx_cstr(&rt->mem, "nextitem"), NULL, "there is no next item");
        else if (jx_find_method(obj, name, &id, &unsafe)) *out = bound_method(rt, obj, id, name);
        else return false;
        return true;
    }
    if (obj.t == JX_LIST && obj.l->group) {
        if (!strcmp(name, "grouper")) *out = obj.l->items[0];
        else if (!strcmp(name, "list")) *out = obj.l->items[1];
        else goto methods;
        return true;
    }
    if (obj.t == JX_INT || obj.t == JX_BOOL || obj.t == JX_FLOAT) { /* numbers' data attributes */
        bool is_int = obj.t != JX_FLOAT;
        jx_val self = obj.t == JX_BOOL ? jx_int(obj.b) : obj;
        if (!strcmp(name, "real")) *out = self;
        else if (!strcmp(name, "imag")) *out = is_int ? jx_int(0) : jx_float(0.0);
        else if (is_int && !strcmp(name, "numerator")) *out = self;
        else if (is_int && !strcmp(name, "denominator")) *out = jx_int(1);
        else goto methods;
        return true;
    }
    if (obj.t == JX_MACRO) {
        if (!strcmp(name, "name")) {
            *out = jx_cstr(&rt->mem, obj.m->name);
            return true;
        }
        return false;
    }
methods:
    if (jx_find_method(obj, name, &id, &unsafe)) {
        *out = unsafe ? unsafe_undefined(rt, obj, name) : bound_method(rt, obj, id, name);
        return true;
    }
    if (is_dunder(name) && obj.t != JX_UNDEF) {
        *out = unsafe_undefined(rt, obj, name);
        return true;
    }
    return false;
}

/* See jinja.h: attribute first, then item (sandbox getattr). */
jx_val jx_getattr(jx_rt *rt, int line, jx_val obj, const char *name) {
    if (obj.t == JX_UNDEF) jx_fail_undefined(rt, line, obj);
    jx_val v;
    if (get_attribute(rt, obj, name, &v)) return v;
    if (obj.t == JX_DICT && jx_dict_get_str(obj.d, name, strlen(name), &v)) return v;
    return jx_undefined(&rt->mem, jx_cstr(&rt->mem, name), jx_obj_desc(&rt->mem, obj), NULL);
}

/* Whether k may be a dict key (lists, dicts, namespaces and slices may not). */
static bool hashable(jx_val k) {
    if (k.t == JX_LIST) {
        if (!k.l->tuple) return false;
        for (size_t i = 0; i < k.l->n; i++)
            if (!hashable(k.l->items[i])) return false;
        return true;
    }
    return k.t != JX_DICT && k.t != JX_NS && k.t != JX_SLICE;
}

/* See jinja.h: item first, then attribute for string keys (sandbox getitem). */
jx_val jx_getitem(jx_rt *rt, int line, jx_val obj, jx_val key) {
    if (obj.t == JX_UNDEF) jx_fail_undefined(rt, line, obj);
    jx_val v;
    switch (obj.t) {
    case JX_DICT:
        if (hashable(key) && jx_dict_get(obj.d, key, &v)) return v;
        break;
    case JX_LIST:
    case JX_STR:
        if (key.t == JX_INT || key.t == JX_BOOL) {
            int64_t i = key.t == JX_BOOL ? key.b : key.i;
            int64_t len = jx_len(rt, line, obj);
            if (i < 0) i += len;
            if (i >= 0 && i < len) {
                if (obj.t == JX_LIST) return obj.l->items[i];
                size_t a = jx_str_cp_offset(obj.s, i), b = jx_str_cp_offset(obj.s, i + 1);
                jx_val c = jx_str_new(&rt->mem, obj.s->data + a, b - a);
                c.s->markup = obj.s->markup;
                return c;
            }
        } else if (key.t == JX_SLICE) {
            return jx_slice_apply(rt, line, obj, key.sl);
        }
        break;
    default: break;
    }
    if (key.t == JX_STR && get_attribute(rt, obj, key.s->data, &v)) return v;
    return jx_undefined(&rt->mem, key, jx_obj_desc(&rt->mem, obj), NULL);
}

/* ---- operators --------------------------------------------------------------------------------- */

/* See jinja.h. */
bool jx_contains(jx_rt *rt, int line, jx_val container, jx_val item) {
    switch (container.t) {
    case JX_UNDEF: return false;
    case JX_STR:
        if (item.t == JX_UNDEF) jx_fail_undefined(rt, line, item);
        if (item.t != JX_STR)
            jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "'in <string>' requires string as left operand, not %s",
                    jx_type_name(item));
        if (item.s->len == 0) return true;
        return memmem(container.s->data, container.s->len, item.s->data, item.s->len) != NULL;
    case JX_LIST:
        for (size_t i = 0; i < container.l->n; i++)
            if (jx_eq(container.l->items[i], item)) return true;
        return false;
    case JX_DICT:
        if (!hashable(item)) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "unhashable type: '%s'", jx_type_name(item));
        return jx_dict_get(container.d, item, NULL);
    default:
        jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "argument of type '%s' is not iterable", jx_type_name(container));
    }
}

/* See jinja.h. NaN is unordered, as in Python. */
bool jx_compare_op(jx_rt *rt, int line, int op, jx_val a, jx_val b) {
    switch (op) {
    case C_EQ: return jx_eq(a, b);
    case C_NE: return !jx_eq(a, b);
    case C_IN: return jx_contains(rt, line, b, a);
    case C_NOTIN: return !jx_contains(rt, line, b, a);
    default: break;
    }
    if ((a.t == JX_FLOAT && isnan(a.f)) || (b.t == JX_FLOAT && isnan(b.f))) {
        if ((a.t == JX_FLOAT || a.t == JX_INT || a.t == JX_BOOL) && (b.t == JX_FLOAT || b.t == JX_INT || b.t == JX_BOOL))
            return false;
    }
    int c = jx_compare(rt, line, a, b);
    switch (op) {
    case C_LT: return c < 0;
    case C_LE: return c <= 0;
    case C_GT: return c > 0;
    default: return c >= 0;
    }
}

/* Unary minus (neg) or plus on numbers. */
static jx_val unary_minus(jx_rt *rt, int line, jx_val v, bool neg) {
    switch (v.t) {
    case JX_UNDEF: jx_fail_undefined(rt, line, v);
    case JX_BOOL: return jx_int(neg ? -(int64_t)v.b : (int64_t)v.b);
    case JX_INT:
        if (neg && v.i == INT64_MIN) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "integer overflow");
        return jx_int(neg ? -v.i : v.i);
    case JX_FLOAT: return jx_float(neg ? -v.f : v.f);
    default:
        jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "bad operand type for unary %c: '%s'", neg ? '-' : '+',
                jx_type_name(v));
    }
}

/* ---- calls ------------------------------------------------------------------------------------- */

/* Evaluates the arguments of a call/filter/test node (items, names/items2, c, d). */
static void eval_args(jx_rt *rt, jx_scope *sc, const jx_node *n, jx_args *args, size_t extra_kw) {
    jx_vec pos;
    jx_vec_init(&pos, &rt->mem);
    for (size_t i = 0; i < n->n_items; i++) jx_vec_push(&pos, eval(rt, sc, n->items[i]));
    if (n->c) {
        jx_val star = eval(rt, sc, n->c);
        jx_list *l = jx_iterate(rt, n->line, star);
        for (size_t i = 0; i < l->n; i++) jx_vec_push(&pos, l->items[i]);
    }
    size_t nkw = n->n_names;
    jx_dict *dd = NULL;
    if (n->d) {
        jx_val dv = eval(rt, sc, n->d);
        if (dv.t != JX_DICT)
            jx_fail(&rt->err, QR_ERR_INVALID_ARG, n->line, "argument after ** must be a mapping, not %s",
                    jx_type_name(dv));
        dd = dv.d;
        nkw += dd->n;
    }
    args->n = pos.n;
    args->pos = pos.items;
    args->kwnames = jx_alloc(&rt->mem, (nkw + extra_kw + 1) * sizeof(const char *));
    args->kw = jx_alloc(&rt->mem, (nkw + extra_kw + 1) * sizeof(jx_val));
    args->nkw = 0;
    for (size_t i = 0; i < n->n_names; i++) {
        args->kwnames[args->nkw] = n->names[i];
        args->kw[args->nkw++] = eval(rt, sc, n->items2[i]);
    }
    if (dd)
        for (size_t i = 0; i < dd->n; i++) {
            if (dd->keys[i].t != JX_STR)
                jx_fail(&rt->err, QR_ERR_INVALID_ARG, n->line, "keywords must be strings");
            args->kwnames[args->nkw] = dd->keys[i].s->data;
            args->kw[args->nkw++] = dd->vals[i];
        }
}

/* See jinja.h. */
void jx_bind(jx_rt *rt, int line, const char *what, const jx_args *args, const char *const *params, size_t np,
             jx_val *vals, bool *has) {
    for (size_t i = 0; i < np; i++) {
        has[i] = false;
        vals[i] = (jx_val){.t = JX_UNDEF};
    }
    if (args->n > np)
        jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "%s takes at most %zu argument(s) (%zu given)", what, np, args->n);
    for (size_t i = 0; i < args->n; i++) {
        vals[i] = args->pos[i];
        has[i] = true;
    }
    for (size_t k = 0; k < args->nkw; k++) {
        size_t i = 0;
        while (i < np && strcmp(params[i], args->kwnames[k]) != 0) i++;
        if (i == np)
            jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "%s got an unexpected keyword argument '%s'", what,
                    args->kwnames[k]);
        if (has[i])
            jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "%s got multiple values for argument '%s'", what,
                    args->kwnames[k]);
        vals[i] = args->kw[k];
        has[i] = true;
    }
}

/* Calls a macro (or call-block caller): binds arguments, defaults, varargs/kwargs/caller, renders the body. */
static jx_val call_macro(jx_rt *rt, int line, const jx_macro *m, const jx_args *args) {
    const jx_node *def = m->def;
    if (rt->depth >= rt->max_depth)
        jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "maximum recursion depth exceeded (%d nested macro calls)",
                rt->max_depth);
    jx_step(rt, line);
    jx_scope *sc = scope_new(rt, m->closure);
    size_t np = def->n_names;
    bool *has = jx_alloc(&rt->mem, (np + 1) * sizeof(bool));
    jx_vec varargs;
    jx_vec_init(&varargs, &rt->mem);
    jx_val kwargs = jx_dict_new(&rt->mem, 0);
    jx_val caller = m->caller;
    for (size_t i = 0; i < args->n; i++) {
        if (i < np) {
            scope_set(rt, sc, def->names[i], args->pos[i]);
            has[i] = true;
        } else if (def->op & JX_MACRO_VARARGS) {
            jx_vec_push(&varargs, args->pos[i]);
        } else {
            jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "macro '%s' takes not more than %zu argument(s)", m->name, np);
        }
    }
    for (size_t k = 0; k < args->nkw; k++) {
        const char *name = args->kwnames[k];
        size_t i = 0;
        while (i < np && strcmp(def->names[i], name) != 0) i++;
        if (i < np) {
            if (has[i])
                jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "macro '%s' got multiple values for argument '%s'",
                        m->name, name);
            scope_set(rt, sc, def->names[i], args->kw[k]);
            has[i] = true;
        } else if (!strcmp(name, "caller") && (def->op & JX_MACRO_CALLER)) {
            caller = args->kw[k];
        } else if (def->op & JX_MACRO_KWARGS) {
            jx_dict_set(&rt->mem, kwargs.d, jx_cstr(&rt->mem, name), args->kw[k]);
        } else {
            jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "macro '%s' takes no keyword argument '%s'", m->name, name);
        }
    }
    size_t first_default = np - def->n_items2;
    for (size_t i = 0; i < np; i++) {
        if (has[i]) continue;
        jx_val v;
        if (i >= first_default) {
            v = eval(rt, sc, def->items2[i - first_default]);
        } else {
            char *hint = jx_alloc(&rt->mem, strlen(def->names[i]) + 40);
            sprintf(hint, "parameter '%s' was not provided", def->names[i]);
            v = jx_undefined(&rt->mem, jx_cstr(&rt->mem, def->names[i]), NULL, hint);
        }
        scope_set(rt, sc, def->names[i], v);
    }
    if (def->op & JX_MACRO_VARARGS) scope_set(rt, sc, "varargs", jx_vec_finish(&varargs, true));
    if (def->op & JX_MACRO_KWARGS) scope_set(rt, sc, "kwargs", kwargs);
    if (def->op & JX_MACRO_CALLER)
        scope_set(rt, sc, "caller",
                  caller.t != JX_UNDEF ? caller
                                       : jx_undefined(&rt->mem, jx_cstr(&rt->mem, "caller"), NULL, "No caller defined"));
    rt->depth++;
    jx_val out = capture(rt, sc, def->items, def->n_items, NULL);
    rt->depth--;
    return out;
}

static jx_val run_loop(jx_rt *rt, jx_scope *sc, const jx_node *n, jx_list *items, int depth0, bool capture_out);

/* See jinja.h. A loop object is callable only in a recursive loop. */
jx_val jx_call(jx_rt *rt, int line, jx_val fn, const jx_args *args) {
    switch (fn.t) {
    case JX_FUNC: return jx_call_builtin(rt, line, fn.fn, args);
    case JX_MACRO: return call_macro(rt, line, fn.m, args);
    case JX_LOOP: {
        const jx_loop *L = fn.loop;
        if (!(L->node->op & 2))
            jx_fail(&rt->err, QR_ERR_INVALID_ARG, line,
                    "the loop must have the 'recursive' marker to be called recursively");
        if (args->n != 1 || args->nkw)
            jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "loop() takes exactly one argument");
        if (rt->depth >= rt->max_depth)
            jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "maximum recursion depth exceeded in recursive loop");
        rt->depth++;
        jx_val r = run_loop(rt, L->scope, L->node, jx_iterate(rt, line, args->pos[0]), L->depth0 + 1, true);
        rt->depth--;
        return r;
    }
    case JX_UNDEF: jx_fail_undefined(rt, line, fn);
    default: jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "'%s' object is not callable", jx_type_name(fn));
    }
}

/* ---- expressions ------------------------------------------------------------------------------- */

/* Evaluates one expression node. */
static jx_val eval_inner(jx_rt *rt, jx_scope *sc, const jx_node *n) {
    switch (n->kind) {
    case N_CONST: return n->value;
    case N_NAME: return lookup(rt, sc, n->name);
    case N_LIST:
    case N_TUPLE: {
        jx_val l = jx_list_new(&rt->mem, n->n_items, n->kind == N_TUPLE);
        for (size_t i = 0; i < n->n_items; i++) l.l->items[i] = eval(rt, sc, n->items[i]);
        return l;
    }
    case N_DICT: {
        jx_val d = jx_dict_new(&rt->mem, n->n_items);
        for (size_t i = 0; i < n->n_items; i++) {
            jx_val k = eval(rt, sc, n->items[i]);
            if (!hashable(k))
                jx_fail(&rt->err, QR_ERR_INVALID_ARG, n->line, "unhashable type: '%s'", jx_type_name(k));
            jx_dict_set(&rt->mem, d.d, k, eval(rt, sc, n->items2[i]));
        }
        return d;
    }
    case N_GETATTR: return jx_getattr(rt, n->line, eval(rt, sc, n->a), n->name);
    case N_GETITEM: {
        jx_val obj = eval(rt, sc, n->a);
        jx_val key;
        if (n->b->kind == N_SLICE) {
            jx_slice *s = jx_alloc(&rt->mem, sizeof *s);
            s->start = n->b->a ? eval(rt, sc, n->b->a) : jx_none();
            s->stop = n->b->b ? eval(rt, sc, n->b->b) : jx_none();
            s->step = n->b->c ? eval(rt, sc, n->b->c) : jx_none();
            key = (jx_val){.t = JX_SLICE, .sl = s};
        } else {
            key = eval(rt, sc, n->b);
        }
        return jx_getitem(rt, n->line, obj, key);
    }
    case N_SLICE: jx_fail(&rt->err, QR_ERR_INTERNAL, n->line, "slice outside of a subscript");
    case N_CALL: {
        jx_val fn = eval(rt, sc, n->a);
        jx_args args;
        eval_args(rt, sc, n, &args, 0);
        return jx_call(rt, n->line, fn, &args);
    }
    case N_FILTER: {
        if (n->op == -1) jx_fail(&rt->err, QR_ERR_UNSUPPORTED, n->line, "unknown filter '%s'", n->name);
        if (n->op == -2)
            jx_fail(&rt->err, QR_ERR_UNSUPPORTED, n->line, "the '%s' filter is not supported", n->name);
        jx_val input = n->a ? eval(rt, sc, n->a) : (jx_val){.t = JX_UNDEF};
        jx_args args;
        eval_args(rt, sc, n, &args, 0);
        return jx_apply_filter(rt, n, input, &args);
    }
    case N_TEST: {
        if (n->op == -1) jx_fail(&rt->err, QR_ERR_UNSUPPORTED, n->line, "unknown test '%s'", n->name);
        if (n->op == -2) jx_fail(&rt->err, QR_ERR_UNSUPPORTED, n->line, "the '%s' test is not supported", n->name);
        jx_val input = eval(rt, sc, n->a);
        jx_args args;
        eval_args(rt, sc, n, &args, 0);
        return jx_bool(jx_apply_test(rt, n->line, n->op, n->name, input, &args));
    }
    case N_NOT: return jx_bool(!jx_truthy(eval(rt, sc, n->a)));
    case N_NEG: return unary_minus(rt, n->line, eval(rt, sc, n->a), true);
    case N_POS: return unary_minus(rt, n->line, eval(rt, sc, n->a), false);
    case N_BINOP: {
        jx_val a = eval(rt, sc, n->a);
        jx_val b = eval(rt, sc, n->b);
        return jx_binop_eval(rt, n->line, n->op, a, b);
    }
    case N_AND: {
        jx_val a = eval(rt, sc, n->a);
        return jx_truthy(a) ? eval(rt, sc, n->b) : a;
    }
    case N_OR: {
        jx_val a = eval(rt, sc, n->a);
        return jx_truthy(a) ? a : eval(rt, sc, n->b);
    }
    case N_COMPARE: {
        jx_val left = eval(rt, sc, n->a);
        for (size_t i = 0; i < n->n_items; i++) {
            jx_val right = eval(rt, sc, n->items[i]);
            if (!jx_compare_op(rt, n->line, n->ops[i], left, right)) return jx_bool(false);
            left = right;
        }
        return jx_bool(true);
    }
    case N_COND: {
        if (jx_truthy(eval(rt, sc, n->a))) return eval(rt, sc, n->b);
        if (n->c) return eval(rt, sc, n->c);
        char hint[128];
        snprintf(hint, sizeof hint,
                 "the inline if-expression on line %d evaluated to false and no else section was defined.", n->line);
        return jx_undefined(&rt->mem, (jx_val){.t = JX_UNDEF}, NULL, jx_strndup(&rt->mem, hint, strlen(hint)));
    }
    default: jx_fail(&rt->err, QR_ERR_INTERNAL, n->line, "statement used as an expression");
    }
}

/* eval_inner with the step budget and a nesting guard. */
static jx_val eval(jx_rt *rt, jx_scope *sc, const jx_node *n) {
    jx_step(rt, n->line);
    if (++rt->eval_depth > JX_MAX_EVAL_DEPTH)
        jx_fail(&rt->err, QR_ERR_INVALID_ARG, n->line, "expression nested too deeply");
    jx_val v = eval_inner(rt, sc, n);
    rt->eval_depth--;
    return v;
}

/* ---- statements -------------------------------------------------------------------------------- */

/* Tuple assignment: v must yield exactly n_names items. */
static void unpack(jx_rt *rt, jx_scope *sc, const jx_node *n, jx_val v) {
    jx_list *l = jx_iterate(rt, n->line, v);
    if (l->n > n->n_names)
        jx_fail(&rt->err, QR_ERR_INVALID_ARG, n->line, "too many values to unpack (expected %zu)", n->n_names);
    if (l->n < n->n_names)
        jx_fail(&rt->err, QR_ERR_INVALID_ARG, n->line, "not enough values to unpack (expected %zu, got %zu)",
                n->n_names, l->n);
    for (size_t i = 0; i < n->n_names; i++) scope_set(rt, sc, n->names[i], l->items[i]);
}

/* Binds a for-loop target (name or tuple) in sc. */
static void bind_target(jx_rt *rt, jx_scope *sc, const jx_node *n, jx_val v) {
    if (n->op & 1) unpack(rt, sc, n, v);
    else scope_set(rt, sc, n->names[0], v);
}

/* {% set %} target: name, namespace attribute or tuple. */
static void assign(jx_rt *rt, jx_scope *sc, const jx_node *n, jx_val v) {
    if (n->name2) {
        jx_val ns = lookup(rt, sc, n->name);
        if (ns.t != JX_NS)
            jx_fail(&rt->err, QR_ERR_INVALID_ARG, n->line, "cannot assign attribute on non-namespace object");
        jx_ns_set(&rt->mem, ns.ns, jx_cstr(&rt->mem, n->name2).s, v);
    } else if (n->op & 1) {
        unpack(rt, sc, n, v);
    } else {
        scope_set(rt, sc, n->name, v);
    }
}

/* Applies a {% set x | f %} / {% filter f %} chain (innermost first) to v. */
static jx_val apply_chain(jx_rt *rt, jx_scope *sc, jx_node *const *chain, size_t n, jx_val v) {
    for (size_t i = 0; i < n; i++) {
        const jx_node *f = chain[i];
        if (f->op == -1) jx_fail(&rt->err, QR_ERR_UNSUPPORTED, f->line, "unknown filter '%s'", f->name);
        if (f->op == -2) jx_fail(&rt->err, QR_ERR_UNSUPPORTED, f->line, "the '%s' filter is not supported", f->name);
        jx_args args;
        eval_args(rt, sc, f, &args, 0);
        v = jx_apply_filter(rt, f, v, &args);
    }
    return v;
}

static jx_val run_loop(jx_rt *rt, jx_scope *sc, const jx_node *n, jx_list *items, int depth0, bool capture_out) {
    jx_buf *saved = rt->out, buf;
    if (capture_out) {
        jx_buf_init(&buf, &rt->mem, rt->max_output);
        rt->out = &buf;
    }
    if (n->b) { /* {% for x in xs if cond %}: filter first; loop.* counts the kept items */
        jx_vec kept;
        jx_vec_init(&kept, &rt->mem);
        jx_scope *fs = scope_new(rt, sc);
        for (size_t i = 0; i < items->n; i++) {
            fs->n = 0;
            bind_target(rt, fs, n, items->items[i]);
            if (jx_truthy(eval(rt, fs, n->b))) jx_vec_push(&kept, items->items[i]);
        }
        items = jx_vec_finish(&kept, false).l;
    }
    if (items->n == 0) {
        exec_body(rt, scope_new(rt, sc), n->items2, n->n_items2);
    } else {
        jx_loop *L = jx_alloc(&rt->mem, sizeof *L);
        L->items = items;
        L->depth0 = depth0;
        L->node = n;
        L->scope = sc;
        jx_val loopv = {.t = JX_LOOP, .loop = L};
        jx_scope *body = scope_new(rt, sc);
        for (size_t i = 0; i < items->n; i++) {
            jx_step(rt, n->line);
            body->n = 0;
            L->index0 = i;
            scope_set(rt, body, "loop", loopv);
            bind_target(rt, body, n, items->items[i]);
            if (exec_body(rt, body, n->items, n->n_items) == FLOW_BREAK) break;
        }
    }
    if (!capture_out) return (jx_val){.t = JX_UNDEF};
    rt->out = saved;
    return jx_buf_finish(&buf);
}

/* Executes one statement; returns FLOW_NORMAL, FLOW_BREAK or FLOW_CONTINUE. */
static int exec_stmt(jx_rt *rt, jx_scope *sc, const jx_node *n) {
    jx_step(rt, n->line);
    switch (n->kind) {
    case S_TEXT:
        rt->out->line = n->line;
        jx_buf_add(rt->out, n->value.s->data, n->value.s->len);
        return FLOW_NORMAL;
    case S_PRINT: write_val(rt, n->line, eval(rt, sc, n->a)); return FLOW_NORMAL;
    case S_IF:
        if (jx_truthy(eval(rt, sc, n->a))) return exec_body(rt, sc, n->items, n->n_items);
        return exec_body(rt, sc, n->items2, n->n_items2);
    case S_FOR: run_loop(rt, sc, n, jx_iterate(rt, n->line, eval(rt, sc, n->a)), 0, false); return FLOW_NORMAL;
    case S_SET: assign(rt, sc, n, eval(rt, sc, n->b)); return FLOW_NORMAL;
    case S_SETBLOCK: {
        jx_val v = capture(rt, scope_new(rt, sc), n->items, n->n_items, NULL);
        assign(rt, sc, n, apply_chain(rt, sc, n->items2, n->n_items2, v));
        return FLOW_NORMAL;
    }
    case S_MACRO: {
        jx_macro *m = jx_alloc(&rt->mem, sizeof *m);
        m->def = n;
        m->closure = sc;
        m->name = n->name;
        scope_set(rt, sc, n->name, (jx_val){.t = JX_MACRO, .m = m});
        return FLOW_NORMAL;
    }
    case S_CALLBLOCK: {
        jx_macro *m = jx_alloc(&rt->mem, sizeof *m);
        m->def = n;
        m->closure = sc;
        m->name = "caller";
        const jx_node *call = n->a;
        jx_val fn = eval(rt, sc, call->a);
        jx_args args;
        eval_args(rt, sc, call, &args, 1);
        args.kwnames[args.nkw] = "caller";
        args.kw[args.nkw++] = (jx_val){.t = JX_MACRO, .m = m};
        write_val(rt, n->line, jx_call(rt, n->line, fn, &args));
        return FLOW_NORMAL;
    }
    case S_FILTERBLOCK: {
        jx_val v = capture(rt, scope_new(rt, sc), n->items, n->n_items, NULL);
        write_val(rt, n->line, apply_chain(rt, sc, n->items2, n->n_items2, v));
        return FLOW_NORMAL;
    }
    case S_WITH: {
        jx_scope *ws = scope_new(rt, sc);
        jx_val *vals = jx_alloc(&rt->mem, (n->n_names + 1) * sizeof(jx_val));
        for (size_t i = 0; i < n->n_names; i++) vals[i] = eval(rt, sc, n->items2[i]);
        for (size_t i = 0; i < n->n_names; i++) scope_set(rt, ws, n->names[i], vals[i]);
        return exec_body(rt, ws, n->items, n->n_items);
    }
    case S_BLOCK: return exec_body(rt, scope_new(rt, sc), n->items, n->n_items);
    case S_BREAK: return FLOW_BREAK;
    case S_CONTINUE: return FLOW_CONTINUE;
    default: write_val(rt, n->line, eval(rt, sc, n)); return FLOW_NORMAL;
    }
}

/* Executes statements in order until one breaks or continues. */
static int exec_body(jx_rt *rt, jx_scope *sc, jx_node *const *body, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int f = exec_stmt(rt, sc, body[i]);
        if (f != FLOW_NORMAL) return f;
    }
    return FLOW_NORMAL;
}

/* See jinja.h. */
void jx_exec_body(jx_rt *rt, jx_node **body, size_t n) {
    jx_scope *root = scope_new(rt, rt->globals);
    exec_body(rt, root, body, n);
}
