/* jinja_ops.c — Python operator semantics for the Jinja interpreter: arithmetic and
 * concatenation (+ - * / // % ** ~), printf-style string formatting (str % args), slicing and
 * markupsafe escaping. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/jinja.h"

static const char *op_symbol(int op) {
    static const char *s[] = {"+", "-", "*", "/", "//", "%", "**", "~"};
    return op >= 0 && op < 8 ? s[op] : "?";
}

/* Int value of an int or bool. */
static bool as_int(jx_val v, int64_t *out) {
    if (v.t == JX_INT) *out = v.i;
    else if (v.t == JX_BOOL) *out = v.b;
    else return false;
    return true;
}

/* Float value of an int, bool or float. */
static bool as_num(jx_val v, double *out) {
    if (v.t == JX_FLOAT) *out = v.f;
    else if (v.t == JX_INT) *out = (double)v.i;
    else if (v.t == JX_BOOL) *out = v.b;
    else return false;
    return true;
}

/* Fails: a result does not fit in 64 bits. */
static _Noreturn void overflow(jx_rt *rt, int line) {
    jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "integer overflow (values beyond 64 bits are not supported)");
}

/* See jinja.h. */
void jx_escape_into(jx_buf *b, const char *s, size_t n) {
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        const char *e = NULL;
        switch (s[i]) {
        case '&': e = "&amp;"; break;
        case '<': e = "&lt;"; break;
        case '>': e = "&gt;"; break;
        case '"': e = "&#34;"; break;
        case '\'': e = "&#39;"; break;
        default: break;
        }
        if (e) {
            jx_buf_add(b, s + run, i - run);
            jx_buf_add(b, e, strlen(e));
            run = i + 1;
        }
    }
    jx_buf_add(b, s + run, n - run);
}

/* seq * count for strings and lists. */
static jx_val repeat(jx_rt *rt, int line, jx_val seq, int64_t count) {
    if (count < 0) count = 0;
    if (seq.t == JX_STR) {
        if (seq.s->len && (uint64_t)count > (SIZE_MAX / 2) / seq.s->len)
            jx_fail(&rt->err, QR_ERR_NOMEM, line, "repeated string is too long");
        size_t total = seq.s->len * (size_t)count;
        jx_val r = jx_str_new(&rt->mem, "", 0);
        jx_str *s = jx_alloc(&rt->mem, sizeof *s + total + 1);
        s->ncp = -1;
        s->len = total;
        s->markup = seq.s->markup;
        for (int64_t k = 0; k < count; k++) memcpy(s->data + (size_t)k * seq.s->len, seq.s->data, seq.s->len);
        s->data[total] = 0;
        r.s = s;
        return r;
    }
    size_t n = seq.l->n;
    if (n && (uint64_t)count > (SIZE_MAX / 64) / n) jx_fail(&rt->err, QR_ERR_NOMEM, line, "repeated list is too long");
    jx_val r = jx_list_new(&rt->mem, n * (size_t)count, seq.l->tuple);
    for (int64_t k = 0; k < count; k++)
        if (n) memcpy(r.l->items + (size_t)k * n, seq.l->items, n * sizeof(jx_val));
    return r;
}

/* a + b, escaping the non-Markup side when either is Markup. */
static jx_val str_concat(jx_rt *rt, jx_str *a, jx_str *b) {
    jx_buf buf;
    jx_buf_init(&buf, &rt->mem, 0);
    bool markup = a->markup || b->markup;
    if (markup && !a->markup) jx_escape_into(&buf, a->data, a->len);
    else jx_buf_add(&buf, a->data, a->len);
    if (markup && !b->markup) jx_escape_into(&buf, b->data, b->len);
    else jx_buf_add(&buf, b->data, b->len);
    jx_val r = jx_buf_finish(&buf);
    r.s->markup = markup;
    return r;
}

/* Integer arithmetic with Python semantics (floor division, sign of modulo). */
static jx_val int_op(jx_rt *rt, int line, int op, int64_t a, int64_t b) {
    int64_t r;
    switch (op) {
    case B_ADD:
        if (__builtin_add_overflow(a, b, &r)) overflow(rt, line);
        return jx_int(r);
    case B_SUB:
        if (__builtin_sub_overflow(a, b, &r)) overflow(rt, line);
        return jx_int(r);
    case B_MUL:
        if (__builtin_mul_overflow(a, b, &r)) overflow(rt, line);
        return jx_int(r);
    case B_DIV:
        if (b == 0) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "division by zero");
        return jx_float((double)a / (double)b);
    case B_FLOORDIV:
        if (b == 0) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "integer division or modulo by zero");
        if (a == INT64_MIN && b == -1) overflow(rt, line);
        r = a / b;
        if ((a % b != 0) && ((a < 0) != (b < 0))) r--;
        return jx_int(r);
    case B_MOD:
        if (b == 0) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "integer division or modulo by zero");
        if (b == -1) return jx_int(0);
        r = a % b;
        if (r != 0 && ((r < 0) != (b < 0))) r += b;
        return jx_int(r);
    case B_POW: {
        if (b < 0) {
            if (a == 0) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "0.0 cannot be raised to a negative power");
            return jx_float(pow((double)a, (double)b));
        }
        int64_t result = 1, base = a;
        while (b > 0) {
            if (b & 1)
                if (__builtin_mul_overflow(result, base, &result)) overflow(rt, line);
            b >>= 1;
            if (b && __builtin_mul_overflow(base, base, &base)) overflow(rt, line);
        }
        return jx_int(result);
    }
    default: jx_fail(&rt->err, QR_ERR_INTERNAL, line, "bad integer operator");
    }
}

/* Float arithmetic with Python semantics. */
static jx_val float_op(jx_rt *rt, int line, int op, double a, double b) {
    switch (op) {
    case B_ADD: return jx_float(a + b);
    case B_SUB: return jx_float(a - b);
    case B_MUL: return jx_float(a * b);
    case B_DIV:
        if (b == 0) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "float division by zero");
        return jx_float(a / b);
    case B_FLOORDIV:
    case B_MOD: {
        if (b == 0)
            jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "%s", op == B_MOD ? "float modulo" : "float floor division by zero");
        double mod = fmod(a, b), div;
        if (mod != 0) {
            if ((b < 0) != (mod < 0)) mod += b;
        } else {
            mod = copysign(0.0, b);
        }
        if (op == B_MOD) return jx_float(mod);
        div = (a - fmod(a, b)) / b;
        if (fmod(a, b) != 0 && ((b < 0) != (fmod(a, b) < 0))) div -= 1.0;
        double fl;
        if (div != 0) {
            fl = floor(div);
            if (div - fl > 0.5) fl += 1.0;
        } else {
            fl = copysign(0.0, a / b);
        }
        return jx_float(fl);
    }
    case B_POW: {
        if (a == 0 && b < 0) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "0.0 cannot be raised to a negative power");
        if (a < 0 && b != floor(b)) jx_fail(&rt->err, QR_ERR_UNSUPPORTED, line, "complex numbers are not supported");
        double r = pow(a, b);
        if (isinf(r) && !isinf(a) && !isinf(b)) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "numerical result out of range");
        return jx_float(r);
    }
    default: jx_fail(&rt->err, QR_ERR_INTERNAL, line, "bad float operator");
    }
}

/* See jinja.h. */
jx_val jx_binop_eval(jx_rt *rt, int line, int op, jx_val a, jx_val b) {
    if (op == B_CONCAT) {
        jx_buf buf;
        jx_buf_init(&buf, &rt->mem, 0);
        jx_str_into(rt, line, &buf, a);
        jx_str_into(rt, line, &buf, b);
        return jx_buf_finish(&buf);
    }
    if (op == B_MOD && a.t == JX_STR) return jx_percent_format(rt, line, a.s, b);
    if (a.t == JX_UNDEF) jx_fail_undefined(rt, line, a);
    if (b.t == JX_UNDEF) jx_fail_undefined(rt, line, b);
    int64_t ia, ib;
    double fa, fb;
    if (as_int(a, &ia) && as_int(b, &ib)) return int_op(rt, line, op, ia, ib);
    if (as_num(a, &fa) && as_num(b, &fb)) return float_op(rt, line, op, fa, fb);
    if (op == B_ADD) {
        if (a.t == JX_STR && b.t == JX_STR) return str_concat(rt, a.s, b.s);
        if (a.t == JX_LIST && b.t == JX_LIST && a.l->tuple == b.l->tuple) {
            jx_val r = jx_list_new(&rt->mem, a.l->n + b.l->n, a.l->tuple);
            if (a.l->n) memcpy(r.l->items, a.l->items, a.l->n * sizeof(jx_val));
            if (b.l->n) memcpy(r.l->items + a.l->n, b.l->items, b.l->n * sizeof(jx_val));
            return r;
        }
        if (a.t == JX_STR || a.t == JX_LIST)
            jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "can only concatenate %s (not \"%s\") to %s", jx_type_name(a),
                    jx_type_name(b), jx_type_name(a));
    }
    if (op == B_MUL) {
        if ((a.t == JX_STR || a.t == JX_LIST) && as_int(b, &ib)) return repeat(rt, line, a, ib);
        if ((b.t == JX_STR || b.t == JX_LIST) && as_int(a, &ia)) return repeat(rt, line, b, ia);
        if (a.t == JX_STR || a.t == JX_LIST || b.t == JX_STR || b.t == JX_LIST)
            jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "can't multiply sequence by non-int of type '%s'",
                    jx_type_name(a.t == JX_STR || a.t == JX_LIST ? b : a));
    }
    jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "unsupported operand type(s) for %s: '%s' and '%s'", op_symbol(op),
            jx_type_name(a), jx_type_name(b));
}

/* ---- printf-style formatting ----------------------------------------------------------------- */

/* Appends s padded to width code points. */
static void pad_into(jx_buf *out, const char *s, size_t n, int64_t ncp, int width, bool left, char fill) {
    int64_t padn = width > ncp ? width - ncp : 0;
    if (!left)
        for (int64_t k = 0; k < padn; k++) jx_buf_addc(out, fill);
    jx_buf_add(out, s, n);
    if (left)
        for (int64_t k = 0; k < padn; k++) jx_buf_addc(out, ' ');
}

/* See jinja.h. */
jx_val jx_percent_format(jx_rt *rt, int line, jx_str *fmt, jx_val args) {
    const jx_val *pos;
    size_t npos, next = 0;
    bool is_tuple = args.t == JX_LIST && args.l->tuple;
    bool is_map = args.t == JX_DICT;
    if (is_tuple) {
        pos = args.l->items;
        npos = args.l->n;
    } else {
        pos = &args;
        npos = 1;
    }
    jx_buf out;
    jx_buf_init(&out, &rt->mem, 0);
    const char *s = fmt->data;
    size_t n = fmt->len, i = 0;
    bool used_key = false;
    while (i < n) {
        if (s[i] != '%') {
            size_t j = i;
            while (j < n && s[j] != '%') j++;
            jx_buf_add(&out, s + i, j - i);
            i = j;
            continue;
        }
        i++;
        if (i >= n) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "incomplete format");
        jx_val v = {.t = JX_UNDEF};
        bool have_v = false;
        if (s[i] == '(') {
            if (!is_map) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "format requires a mapping");
            int depth = 1;
            size_t k0 = ++i;
            while (i < n && depth) {
                if (s[i] == '(') depth++;
                else if (s[i] == ')') depth--;
                i++;
            }
            if (depth) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "incomplete format key");
            if (!jx_dict_get_str(args.d, s + k0, i - 1 - k0, &v))
                jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "KeyError: '%.*s'", (int)(i - 1 - k0), s + k0);
            have_v = true;
            used_key = true;
        }
        bool left = false, plus = false, space = false, alt = false, zero = false;
        for (; i < n && strchr("-+ #0", s[i]); i++) {
            if (s[i] == '-') left = true;
            else if (s[i] == '+') plus = true;
            else if (s[i] == ' ') space = true;
            else if (s[i] == '#') alt = true;
            else zero = true;
        }
        int width = -1, prec = -1;
        if (i < n && s[i] == '*') {
            int64_t w;
            if (next >= npos || !(pos[next].t == JX_INT || pos[next].t == JX_BOOL))
                jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "* wants int");
            w = pos[next].t == JX_INT ? pos[next].i : pos[next].b;
            next++;
            if (w > 100000 || w < -100000) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "width too big");
            if (w < 0) {
                left = true;
                w = -w;
            }
            width = (int)w;
            i++;
        } else {
            while (i < n && s[i] >= '0' && s[i] <= '9') {
                width = (width < 0 ? 0 : width) * 10 + (s[i++] - '0');
                if (width > 100000) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "width too big");
            }
        }
        if (i < n && s[i] == '.') {
            i++;
            prec = 0;
            if (i < n && s[i] == '*') {
                if (next >= npos || pos[next].t != JX_INT) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "* wants int");
                prec = pos[next].i < 0 ? 0 : pos[next].i > 100000 ? 100000 : (int)pos[next].i;
                next++;
                i++;
            } else {
                while (i < n && s[i] >= '0' && s[i] <= '9') {
                    prec = prec * 10 + (s[i++] - '0');
                    if (prec > 100000) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "precision too big");
                }
            }
        }
        while (i < n && (s[i] == 'h' || s[i] == 'l' || s[i] == 'L')) i++;
        if (i >= n) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "incomplete format");
        char conv = s[i++];
        if (conv == '%') {
            jx_buf_addc(&out, '%');
            continue;
        }
        if (!have_v) {
            if (next >= npos) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "not enough arguments for format string");
            v = pos[next++];
        }
        char spec[32], tmp[1024];
        int sl = 0;
        spec[sl++] = '%';
        if (left) spec[sl++] = '-';
        if (plus) spec[sl++] = '+';
        if (space) spec[sl++] = ' ';
        if (alt && conv != 'o') spec[sl++] = '#';
        if (zero && !left) spec[sl++] = '0';
        if (width >= 0) sl += snprintf(spec + sl, sizeof spec - (size_t)sl, "%d", width > 400 ? 400 : width);
        switch (conv) {
        case 's':
        case 'r':
        case 'a': {
            jx_buf b;
            jx_buf_init(&b, &rt->mem, 0);
            if (conv == 's') jx_str_into(rt, line, &b, v);
            else jx_repr_into(rt, line, &b, v, 0);
            jx_val sv = jx_buf_finish(&b);
            size_t bytes = sv.s->len;
            int64_t ncp = jx_str_ncp(sv.s);
            if (prec >= 0 && prec < ncp) {
                bytes = jx_str_cp_offset(sv.s, prec);
                ncp = prec;
            }
            pad_into(&out, sv.s->data, bytes, ncp, width, left, ' ');
            break;
        }
        case 'd':
        case 'i':
        case 'u':
        case 'o':
        case 'x':
        case 'X': {
            int64_t iv;
            if (v.t == JX_INT) iv = v.i;
            else if (v.t == JX_BOOL) iv = v.b;
            else if (v.t == JX_FLOAT && (conv == 'd' || conv == 'i' || conv == 'u')) {
                if (!isfinite(v.f) || fabs(v.f) >= 9.2e18)
                    jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "cannot convert float to integer");
                iv = (int64_t)v.f;
            } else {
                if (v.t == JX_UNDEF) jx_fail_undefined(rt, line, v);
                jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "%%%c format: a%s number is required, not %s", conv,
                        conv == 'd' || conv == 'i' || conv == 'u' ? " real" : "n integer", jx_type_name(v));
            }
            char c = conv == 'i' || conv == 'u' ? 'd' : conv;
            if (c == 'd') {
                if (prec >= 0) sl += snprintf(spec + sl, sizeof spec - (size_t)sl, ".%d", prec > 400 ? 400 : prec);
                snprintf(spec + sl, sizeof spec - (size_t)sl, "lld");
                snprintf(tmp, sizeof tmp, spec, (long long)iv);
                jx_buf_add(&out, tmp, strlen(tmp));
            } else {
                /* Python prints the sign and, with '#', the 0o/0x prefix itself */
                uint64_t mag = iv < 0 ? (uint64_t)0 - (uint64_t)iv : (uint64_t)iv;
                char digits[80];
                snprintf(digits, sizeof digits, c == 'o' ? "%llo" : c == 'x' ? "%llx" : "%llX", (unsigned long long)mag);
                jx_buf b;
                jx_buf_init(&b, &rt->mem, 0);
                if (iv < 0) jx_buf_addc(&b, '-');
                else if (plus) jx_buf_addc(&b, '+');
                else if (space) jx_buf_addc(&b, ' ');
                if (alt) jx_buf_add(&b, c == 'o' ? "0o" : c == 'x' ? "0x" : "0X", 2);
                size_t prefix = b.len;
                for (int k = (int)strlen(digits); k < prec; k++) jx_buf_addc(&b, '0');
                jx_buf_add(&b, digits, strlen(digits));
                if (zero && !left && width > (int)b.len) {
                    jx_buf z;
                    jx_buf_init(&z, &rt->mem, 0);
                    jx_buf_add(&z, b.data, prefix);
                    for (int k = (int)b.len; k < width; k++) jx_buf_addc(&z, '0');
                    jx_buf_add(&z, b.data + prefix, b.len - prefix);
                    b = z;
                }
                pad_into(&out, b.data, b.len, (int64_t)b.len, width, left, ' ');
            }
            break;
        }
        case 'e':
        case 'E':
        case 'f':
        case 'F':
        case 'g':
        case 'G': {
            double fv;
            if (!as_num(v, &fv)) {
                if (v.t == JX_UNDEF) jx_fail_undefined(rt, line, v);
                jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "must be real number, not %s", jx_type_name(v));
            }
            snprintf(spec + sl, sizeof spec - (size_t)sl, ".%d%c", prec < 0 ? 6 : (prec > 100 ? 100 : prec), conv);
            snprintf(tmp, sizeof tmp, spec, fv);
            if (isnan(fv)) { /* C may print "-nan"; Python prints "nan" */
                char *dash = strstr(tmp, "-nan");
                if (!dash) dash = strstr(tmp, "-NAN");
                if (dash) *dash = ' ';
            }
            jx_buf_add(&out, tmp, strlen(tmp));
            break;
        }
        case 'c': {
            char u[4];
            size_t k;
            if (v.t == JX_INT && v.i >= 0 && v.i <= 0x10ffff) {
                k = jx_utf8_encode((uint32_t)v.i, u);
                pad_into(&out, u, k, 1, width, left, ' ');
            } else if (v.t == JX_STR && jx_str_ncp(v.s) == 1) {
                pad_into(&out, v.s->data, v.s->len, 1, width, left, ' ');
            } else {
                jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "%%c requires int or char");
            }
            break;
        }
        default:
            jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "unsupported format character '%c' (0x%x)", conv,
                    (unsigned char)conv);
        }
    }
    if (next < npos && !is_map && !(used_key && !is_tuple))
        jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "not all arguments converted during string formatting");
    jx_val r = jx_buf_finish(&out);
    r.s->markup = fmt->markup;
    return r;
}

/* ---- slicing ------------------------------------------------------------------------------------ */

/* See jinja.h. Non-integer bounds give undefined, as jinja2's getitem does. */
jx_val jx_slice_apply(jx_rt *rt, int line, jx_val obj, const jx_slice *sl) {
    int64_t start = 0, stop = 0, step = 1;
    bool has_start = false, has_stop = false;
    const jx_val *parts[3] = {&sl->start, &sl->stop, &sl->step};
    int64_t *dst[3] = {&start, &stop, &step};
    bool *has[3] = {&has_start, &has_stop, NULL};
    for (int k = 0; k < 3; k++) {
        const jx_val *p = parts[k];
        if (p->t == JX_NONE) continue;
        if (p->t == JX_INT) *dst[k] = p->i;
        else if (p->t == JX_BOOL) *dst[k] = p->b;
        else return jx_undefined(&rt->mem, (jx_val){.t = JX_SLICE, .sl = (jx_slice *)sl}, jx_obj_desc(&rt->mem, obj), NULL);
        if (has[k]) *has[k] = true;
    }
    if (step == 0) jx_fail(&rt->err, QR_ERR_INVALID_ARG, line, "slice step cannot be zero");
    int64_t len = jx_len(rt, line, obj);
    int64_t lower = step > 0 ? 0 : -1, upper = step > 0 ? len : len - 1;
    if (!has_start) {
        start = step > 0 ? lower : upper;
    } else if (start < 0) {
        start += len;
        if (start < lower) start = lower;
    } else if (start > upper) {
        start = upper;
    }
    if (!has_stop) {
        stop = step > 0 ? upper : lower;
    } else if (stop < 0) {
        stop += len;
        if (stop < lower) stop = lower;
    } else if (stop > upper) {
        stop = upper;
    }
    int64_t count = 0; /* bounds are clamped to [-1, len], so only the step can be extreme */
    if (step > 0 && start < stop) count = (int64_t)((uint64_t)(stop - start - 1) / (uint64_t)step) + 1;
    if (step < 0 && start > stop) count = (int64_t)((uint64_t)(start - stop - 1) / ((uint64_t)0 - (uint64_t)step)) + 1;
    if (obj.t == JX_LIST) {
        jx_val r = jx_list_new(&rt->mem, (size_t)count, obj.l->tuple);
        for (int64_t k = 0; k < count; k++) r.l->items[k] = obj.l->items[start + k * step];
        return r;
    }
    jx_str *s = obj.s;
    if (step == 1) {
        size_t a = jx_str_cp_offset(s, start), b = count ? jx_str_cp_offset(s, start + count) : a;
        jx_val r = jx_str_new(&rt->mem, s->data + a, b - a);
        r.s->markup = s->markup;
        return r;
    }
    /* general step: index code point offsets once */
    size_t *offs = jx_alloc(&rt->mem, ((size_t)len + 1) * sizeof(size_t));
    size_t i = 0;
    uint32_t cp;
    for (int64_t k = 0; k < len; k++) {
        offs[k] = i;
        i = jx_utf8_next(s->data, s->len, i, &cp);
    }
    offs[len] = s->len;
    jx_buf b;
    jx_buf_init(&b, &rt->mem, 0);
    for (int64_t k = 0; k < count; k++) {
        int64_t idx = start + k * step;
        jx_buf_add(&b, s->data + offs[idx], offs[idx + 1] - offs[idx]);
    }
    jx_val r = jx_buf_finish(&b);
    r.s->markup = s->markup;
    return r;
}
