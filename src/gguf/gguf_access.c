/* gguf_access.c — value type table, typed getters, array element accessors, string helpers. */
#include <assert.h>
#include <string.h>

#include "gguf/gguf.h"

/* Per value type: gguf-py's name (lower case) and the scalar size in bytes (0: string/array). */
static const struct {
    const char *name;
    size_t size;
} vtypes[QR_GGUF_VTYPE_COUNT] = {
    [QR_GGUF_U8] = {"uint8", 1},     [QR_GGUF_I8] = {"int8", 1},     [QR_GGUF_U16] = {"uint16", 2},
    [QR_GGUF_I16] = {"int16", 2},    [QR_GGUF_U32] = {"uint32", 4},  [QR_GGUF_I32] = {"int32", 4},
    [QR_GGUF_F32] = {"float32", 4},  [QR_GGUF_BOOL] = {"bool", 1},   [QR_GGUF_STRING] = {"string", 0},
    [QR_GGUF_ARRAY] = {"array", 0},  [QR_GGUF_U64] = {"uint64", 8},  [QR_GGUF_I64] = {"int64", 8},
    [QR_GGUF_F64] = {"float64", 8},
};

const char *qr_gguf_vtype_name(uint32_t t) { return t < QR_GGUF_VTYPE_COUNT ? vtypes[t].name : "?"; }

size_t qr_gguf_vtype_size(uint32_t t) { return t < QR_GGUF_VTYPE_COUNT ? vtypes[t].size : 0; }

/* Type classes: unsigned / signed integers (bool is neither), floats. */
static bool is_unsigned(qr_gguf_vtype t) { return t == QR_GGUF_U8 || t == QR_GGUF_U16 || t == QR_GGUF_U32 || t == QR_GGUF_U64; }
static bool is_signed(qr_gguf_vtype t) { return t == QR_GGUF_I8 || t == QR_GGUF_I16 || t == QR_GGUF_I32 || t == QR_GGUF_I64; }
static bool is_float(qr_gguf_vtype t) { return t == QR_GGUF_F32 || t == QR_GGUF_F64; }

/* An integer value as a signed range check: fills *u (when non-negative) or *i and says which. */
typedef struct int_value {
    bool negative;
    uint64_t u; /* magnitude when !negative */
    int64_t i;  /* value when negative */
} int_value;

/* Reads an integer (not bool) value; false when v is not an integer type. */
static bool get_int(const qr_gguf_value *v, int_value *out) {
    if (is_unsigned(v->type)) {
        out->negative = false;
        out->u = v->u64;
        return true;
    }
    if (is_signed(v->type)) {
        out->negative = v->i64 < 0;
        out->i = v->i64;
        out->u = v->i64 < 0 ? 0 : (uint64_t)v->i64;
        return true;
    }
    return false;
}

bool qr_gguf_get_u32(const qr_gguf *g, const char *key, uint32_t *out) {
    const qr_gguf_value *v = qr_gguf_get(g, key);
    int_value iv;
    if (!v || !get_int(v, &iv) || iv.negative || iv.u > UINT32_MAX) return false;
    *out = (uint32_t)iv.u;
    return true;
}

bool qr_gguf_get_i32(const qr_gguf *g, const char *key, int32_t *out) {
    const qr_gguf_value *v = qr_gguf_get(g, key);
    int_value iv;
    if (!v || !get_int(v, &iv)) return false;
    if (iv.negative ? iv.i < INT32_MIN : iv.u > INT32_MAX) return false;
    *out = iv.negative ? (int32_t)iv.i : (int32_t)iv.u;
    return true;
}

bool qr_gguf_get_u64(const qr_gguf *g, const char *key, uint64_t *out) {
    const qr_gguf_value *v = qr_gguf_get(g, key);
    int_value iv;
    if (!v || !get_int(v, &iv) || iv.negative) return false;
    *out = iv.u;
    return true;
}

bool qr_gguf_get_f32(const qr_gguf *g, const char *key, float *out) {
    const qr_gguf_value *v = qr_gguf_get(g, key);
    if (!v) return false;
    if (is_float(v->type)) *out = (float)v->f64;
    else if (is_unsigned(v->type)) *out = (float)v->u64;
    else if (is_signed(v->type)) *out = (float)v->i64;
    else return false;
    return true;
}

bool qr_gguf_get_bool(const qr_gguf *g, const char *key, bool *out) {
    const qr_gguf_value *v = qr_gguf_get(g, key);
    if (!v || v->type != QR_GGUF_BOOL) return false;
    *out = v->u64 != 0;
    return true;
}

bool qr_gguf_get_str(const qr_gguf *g, const char *key, qr_gguf_str *out) {
    const qr_gguf_value *v = qr_gguf_get(g, key);
    if (!v || v->type != QR_GGUF_STRING) return false;
    *out = v->str;
    return true;
}

const qr_gguf_value *qr_gguf_get_arr(const qr_gguf *g, const char *key, qr_gguf_vtype elem_type) {
    const qr_gguf_value *v = qr_gguf_get(g, key);
    if (!v || v->type != QR_GGUF_ARRAY) return NULL;
    if (elem_type != QR_GGUF_VTYPE_COUNT && v->arr.elem_type != elem_type) return NULL;
    return v;
}

/* Raw little-endian bits of scalar element i (zero-extended to 64 bits). */
static uint64_t elem_bits(const qr_gguf_value *v, uint64_t i) {
    size_t sz = qr_gguf_vtype_size(v->arr.elem_type);
    const uint8_t *p = v->arr.data + i * sz;
    uint64_t bits = 0;
    for (size_t b = 0; b < sz; b++) bits |= (uint64_t)p[b] << (8 * b);
    return bits;
}

/* Element i of a scalar array as a signed integer (sign-extending the signed types). */
static int64_t elem_signed(const qr_gguf_value *v, uint64_t i) {
    uint64_t bits = elem_bits(v, i);
    switch (v->arr.elem_type) {
    case QR_GGUF_I8: return (int8_t)bits;
    case QR_GGUF_I16: return (int16_t)bits;
    case QR_GGUF_I32: return (int32_t)bits;
    default: return (int64_t)bits;
    }
}

int64_t qr_gguf_arr_i64(const qr_gguf_value *v, uint64_t i) {
    assert(v->type == QR_GGUF_ARRAY && i < v->arr.count);
    qr_gguf_vtype t = v->arr.elem_type;
    if (!is_unsigned(t) && !is_signed(t) && t != QR_GGUF_BOOL) return 0;
    return elem_signed(v, i);
}

uint64_t qr_gguf_arr_u64(const qr_gguf_value *v, uint64_t i) {
    assert(v->type == QR_GGUF_ARRAY && i < v->arr.count);
    qr_gguf_vtype t = v->arr.elem_type;
    if (is_unsigned(t) || t == QR_GGUF_BOOL) return elem_bits(v, i);
    if (is_signed(t)) return (uint64_t)elem_signed(v, i);
    return 0;
}

double qr_gguf_arr_f64(const qr_gguf_value *v, uint64_t i) {
    assert(v->type == QR_GGUF_ARRAY && i < v->arr.count);
    qr_gguf_vtype t = v->arr.elem_type;
    if (t == QR_GGUF_F32) {
        uint32_t b = (uint32_t)elem_bits(v, i);
        float f;
        memcpy(&f, &b, 4);
        return f;
    }
    if (t == QR_GGUF_F64) {
        uint64_t b = elem_bits(v, i);
        double d;
        memcpy(&d, &b, 8);
        return d;
    }
    if (is_unsigned(t) || t == QR_GGUF_BOOL) return (double)elem_bits(v, i);
    if (is_signed(t)) return (double)elem_signed(v, i);
    return 0.0;
}

qr_gguf_str qr_gguf_arr_str(const qr_gguf_value *v, uint64_t i) {
    assert(v->type == QR_GGUF_ARRAY && i < v->arr.count);
    if (v->arr.elem_type != QR_GGUF_STRING || !v->arr.strs) return (qr_gguf_str){"", 0};
    return v->arr.strs[i];
}

bool qr_gguf_str_eq(qr_gguf_str s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && (n == 0 || memcmp(s.data, c, n) == 0);
}

char *qr_gguf_str_copy(qr_gguf_str s, char *buf, size_t cap) {
    if (!cap) return buf;
    size_t n = s.len < cap - 1 ? (size_t)s.len : cap - 1;
    if (n) memcpy(buf, s.data, n);
    buf[n] = 0;
    return buf;
}

int64_t qr_gguf_tensor_nelements(const qr_gguf_tensor *t) {
    int64_t n = 1;
    for (uint32_t d = 0; d < t->n_dims && d < QR_GGUF_MAX_DIMS; d++) n *= t->ne[d];
    return n;
}
