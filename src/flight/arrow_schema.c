/* arrow_schema.c — Arrow types, schemas (build, copy, compare, describe) and batch validation. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arrow_internal.h"
#include "util/util.h"

const char *qr_arrow_type_name(qr_arrow_type type) {
    switch (type) {
    case QR_ARROW_INT8: return "int8";
    case QR_ARROW_INT16: return "int16";
    case QR_ARROW_INT32: return "int32";
    case QR_ARROW_INT64: return "int64";
    case QR_ARROW_UINT8: return "uint8";
    case QR_ARROW_UINT16: return "uint16";
    case QR_ARROW_UINT32: return "uint32";
    case QR_ARROW_UINT64: return "uint64";
    case QR_ARROW_FLOAT16: return "float16";
    case QR_ARROW_FLOAT32: return "float32";
    case QR_ARROW_FLOAT64: return "float64";
    case QR_ARROW_UTF8: return "utf8";
    case QR_ARROW_BINARY: return "binary";
    case QR_ARROW_FIXED_SIZE_LIST: return "fixed_size_list";
    }
    return "unknown";
}

size_t qr_arrow_type_width(qr_arrow_type type) {
    switch (type) {
    case QR_ARROW_INT8:
    case QR_ARROW_UINT8: return 1;
    case QR_ARROW_INT16:
    case QR_ARROW_UINT16:
    case QR_ARROW_FLOAT16: return 2;
    case QR_ARROW_INT32:
    case QR_ARROW_UINT32:
    case QR_ARROW_FLOAT32: return 4;
    case QR_ARROW_INT64:
    case QR_ARROW_UINT64:
    case QR_ARROW_FLOAT64: return 8;
    default: return 0;
    }
}

bool qr_arrow_type_is_primitive(qr_arrow_type type) { return qr_arrow_type_width(type) != 0; }

bool qr_arrow_utf8_valid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t len;
        uint32_t cp;
        if ((c & 0xE0) == 0xC0) {
            len = 2;
            cp = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            len = 3;
            cp = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            len = 4;
            cp = c & 0x07;
        } else {
            return false;
        }
        if (n - i < len) return false;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        /* reject overlong forms, surrogates and values past U+10FFFF */
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000)) return false;
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        i += len;
    }
    return true;
}

char *qr_arrow_strndup(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return NULL;
    if (n) memcpy(d, s, n);
    d[n] = 0;
    return d;
}

/* ---- schemas ------------------------------------------------------------------------------------- */

void qr_arrow_schema_init(qr_arrow_schema *s) { memset(s, 0, sizeof(*s)); }

static void kv_free(qr_arrow_kv *kv, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(kv[i].key);
        free(kv[i].value);
    }
    free(kv);
}

void qr_arrow_field_clear(qr_arrow_field *f) {
    if (!f) return;
    free(f->name);
    if (f->child) {
        qr_arrow_field_clear(f->child);
        free(f->child);
    }
    kv_free(f->metadata, f->n_metadata);
    memset(f, 0, sizeof(*f));
}

void qr_arrow_schema_free(qr_arrow_schema *s) {
    if (!s) return;
    for (size_t i = 0; i < s->n_fields; i++) qr_arrow_field_clear(&s->fields[i]);
    free(s->fields);
    kv_free(s->metadata, s->n_metadata);
    memset(s, 0, sizeof(*s));
}

qr_status qr_arrow_kv_append(qr_arrow_kv **kv, size_t *n, const char *key, size_t key_len, const char *value,
                             size_t value_len) {
    qr_arrow_kv *nk = realloc(*kv, (*n + 1) * sizeof(**kv));
    if (!nk) return QR_ERR_NOMEM;
    *kv = nk;
    qr_arrow_kv *e = &nk[*n];
    e->key = qr_arrow_strndup(key, key_len);
    e->value = qr_arrow_strndup(value, value_len);
    e->key_len = key_len;
    e->value_len = value_len;
    if (!e->key || !e->value) {
        free(e->key);
        free(e->value);
        return QR_ERR_NOMEM;
    }
    (*n)++;
    return QR_OK;
}

/* Appends a zeroed field slot to s and returns it (NULL on allocation failure). */
static qr_arrow_field *schema_push(qr_arrow_schema *s) {
    qr_arrow_field *nf = realloc(s->fields, (s->n_fields + 1) * sizeof(*nf));
    if (!nf) return NULL;
    s->fields = nf;
    memset(&nf[s->n_fields], 0, sizeof(*nf));
    return &nf[s->n_fields++];
}

qr_status qr_arrow_schema_add(qr_arrow_schema *s, const char *name, qr_arrow_type type, bool nullable,
                              qr_arrow_field **out) {
    if (!name || type < QR_ARROW_INT8 || type > QR_ARROW_BINARY) return QR_ERR_INVALID_ARG;
    qr_arrow_field *f = schema_push(s);
    if (!f) return QR_ERR_NOMEM;
    f->name = qr_arrow_strndup(name, strlen(name));
    if (!f->name) {
        s->n_fields--;
        return QR_ERR_NOMEM;
    }
    f->type = type;
    f->nullable = nullable;
    if (out) *out = f;
    return QR_OK;
}

qr_status qr_arrow_schema_add_list(qr_arrow_schema *s, const char *name, qr_arrow_type child_type,
                                   int32_t list_size, bool nullable, qr_arrow_field **out) {
    if (!name || list_size < 1 || !qr_arrow_type_is_primitive(child_type)) return QR_ERR_INVALID_ARG;
    qr_arrow_field *f = schema_push(s);
    if (!f) return QR_ERR_NOMEM;
    f->name = qr_arrow_strndup(name, strlen(name));
    f->child = calloc(1, sizeof(*f->child));
    if (f->child) f->child->name = qr_arrow_strndup("item", 4);
    if (!f->name || !f->child || !f->child->name) {
        qr_arrow_field_clear(f);
        s->n_fields--;
        return QR_ERR_NOMEM;
    }
    f->type = QR_ARROW_FIXED_SIZE_LIST;
    f->list_size = list_size;
    f->nullable = nullable;
    f->child->type = child_type;
    f->child->nullable = true;
    if (out) *out = f;
    return QR_OK;
}

qr_status qr_arrow_schema_add_meta(qr_arrow_schema *s, const char *key, const char *value) {
    if (!key || !value) return QR_ERR_INVALID_ARG;
    return qr_arrow_kv_append(&s->metadata, &s->n_metadata, key, strlen(key), value, strlen(value));
}

qr_status qr_arrow_field_add_meta(qr_arrow_field *f, const char *key, const char *value) {
    if (!key || !value) return QR_ERR_INVALID_ARG;
    return qr_arrow_kv_append(&f->metadata, &f->n_metadata, key, strlen(key), value, strlen(value));
}

/* Deep copy of a field into a zeroed *dst. */
static qr_status field_copy(qr_arrow_field *dst, const qr_arrow_field *src) {
    memset(dst, 0, sizeof(*dst));
    dst->name = qr_arrow_strndup(src->name, strlen(src->name));
    if (!dst->name) return QR_ERR_NOMEM;
    dst->type = src->type;
    dst->list_size = src->list_size;
    dst->nullable = src->nullable;
    for (size_t i = 0; i < src->n_metadata; i++) {
        const qr_arrow_kv *kv = &src->metadata[i];
        if (qr_arrow_kv_append(&dst->metadata, &dst->n_metadata, kv->key, kv->key_len, kv->value, kv->value_len))
            return QR_ERR_NOMEM;
    }
    if (src->child) {
        dst->child = calloc(1, sizeof(*dst->child));
        if (!dst->child) return QR_ERR_NOMEM;
        return field_copy(dst->child, src->child);
    }
    return QR_OK;
}

qr_status qr_arrow_schema_copy(qr_arrow_schema *dst, const qr_arrow_schema *src) {
    qr_arrow_schema_init(dst);
    qr_status st = QR_OK;
    if (src->n_fields) {
        dst->fields = calloc(src->n_fields, sizeof(*dst->fields));
        if (!dst->fields) return QR_ERR_NOMEM;
    }
    for (size_t i = 0; i < src->n_fields && st == QR_OK; i++) {
        dst->n_fields = i + 1;
        st = field_copy(&dst->fields[i], &src->fields[i]);
    }
    for (size_t i = 0; i < src->n_metadata && st == QR_OK; i++) {
        const qr_arrow_kv *kv = &src->metadata[i];
        st = qr_arrow_kv_append(&dst->metadata, &dst->n_metadata, kv->key, kv->key_len, kv->value, kv->value_len);
    }
    if (st != QR_OK) qr_arrow_schema_free(dst);
    return st;
}

const char *qr_arrow_schema_meta(const qr_arrow_schema *s, const char *key) {
    for (size_t i = 0; i < s->n_metadata; i++)
        if (strcmp(s->metadata[i].key, key) == 0) return s->metadata[i].value;
    return NULL;
}

int qr_arrow_schema_find(const qr_arrow_schema *s, const char *name) {
    for (size_t i = 0; i < s->n_fields; i++)
        if (strcmp(s->fields[i].name, name) == 0) return (int)i;
    return -1;
}

static bool kv_equal(const qr_arrow_kv *a, size_t na, const qr_arrow_kv *b, size_t nb) {
    if (na != nb) return false;
    for (size_t i = 0; i < na; i++) {
        if (a[i].key_len != b[i].key_len || a[i].value_len != b[i].value_len) return false;
        if (memcmp(a[i].key, b[i].key, a[i].key_len) || memcmp(a[i].value, b[i].value, a[i].value_len)) return false;
    }
    return true;
}

static bool field_equal(const qr_arrow_field *a, const qr_arrow_field *b, bool with_metadata) {
    if (strcmp(a->name, b->name) || a->type != b->type || a->list_size != b->list_size || a->nullable != b->nullable)
        return false;
    if (with_metadata && !kv_equal(a->metadata, a->n_metadata, b->metadata, b->n_metadata)) return false;
    if (!a->child != !b->child) return false;
    return !a->child || field_equal(a->child, b->child, with_metadata);
}

bool qr_arrow_schema_equal(const qr_arrow_schema *a, const qr_arrow_schema *b, bool with_metadata) {
    if (a->n_fields != b->n_fields) return false;
    for (size_t i = 0; i < a->n_fields; i++)
        if (!field_equal(&a->fields[i], &b->fields[i], with_metadata)) return false;
    return !with_metadata || kv_equal(a->metadata, a->n_metadata, b->metadata, b->n_metadata);
}

/* Appends "type" of a field (recursively for lists) to buf at *at. */
static void describe_type(const qr_arrow_field *f, char *buf, size_t buf_len, size_t *at) {
    int n;
    if (f->type == QR_ARROW_FIXED_SIZE_LIST && f->child)
        n = snprintf(buf + *at, buf_len - *at, "fixed_size_list<%s>[%d]", qr_arrow_type_name(f->child->type),
                     (int)f->list_size);
    else
        n = snprintf(buf + *at, buf_len - *at, "%s", qr_arrow_type_name(f->type));
    if (n > 0) *at += (size_t)n < buf_len - *at ? (size_t)n : buf_len - *at - 1;
}

void qr_arrow_schema_describe(const qr_arrow_schema *s, char *buf, size_t buf_len) {
    if (!buf || buf_len == 0) return;
    size_t at = 0;
    buf[0] = 0;
    for (size_t i = 0; i < s->n_fields && at + 1 < buf_len; i++) {
        int n = snprintf(buf + at, buf_len - at, "%s%s: ", i ? ", " : "", s->fields[i].name);
        if (n > 0) at += (size_t)n < buf_len - at ? (size_t)n : buf_len - at - 1;
        if (at + 1 < buf_len) describe_type(&s->fields[i], buf, buf_len, &at);
    }
}

/* ---- batches ------------------------------------------------------------------------------------- */

bool qr_arrow_array_is_valid(const qr_arrow_array *a, int64_t i) {
    if (!a->validity) return true;
    return (a->validity[i >> 3] >> (i & 7)) & 1;
}

void qr_arrow_batch_free(qr_arrow_batch *b) {
    if (!b) return;
    free(b->owned_arrays);
    free(b->owned_body);
    memset(b, 0, sizeof(*b));
}

int64_t qr_arrow_count_nulls(const uint8_t *validity, int64_t length) {
    int64_t valid = 0;
    int64_t full = length >> 3;
    for (int64_t i = 0; i < full; i++) valid += __builtin_popcount(validity[i]);
    for (int64_t i = full << 3; i < length; i++) valid += (validity[i >> 3] >> (i & 7)) & 1;
    return length - valid;
}

/* Validates one caller-built array against its field (recursively), expecting `length` slots. */
static qr_status validate_array(const qr_arrow_field *f, const qr_arrow_array *a, int64_t length, int depth,
                                char *err, size_t err_len) {
    if (depth > QR_ARROW_MAX_DEPTH)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "column '%s': nested too deeply", f->name);
    if (!a) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "column '%s': missing array", f->name);
    if (a->length != length)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "column '%s': length %lld, expected %lld", f->name,
                       (long long)a->length, (long long)length);
    if (a->null_count < 0 || a->null_count > length || (a->null_count > 0 && !a->validity))
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "column '%s': null_count %lld without a matching bitmap",
                       f->name, (long long)a->null_count);
    if (a->validity && qr_arrow_count_nulls(a->validity, length) != a->null_count)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "column '%s': null_count %lld disagrees with the bitmap",
                       f->name, (long long)a->null_count);
    if (a->null_count > 0 && !f->nullable)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "column '%s' is not nullable but has %lld nulls", f->name,
                       (long long)a->null_count);
    size_t width = qr_arrow_type_width(f->type);
    if (width) {
        if (length > 0 && !a->values)
            return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "column '%s': no values buffer", f->name);
        return QR_OK;
    }
    if (f->type == QR_ARROW_UTF8 || f->type == QR_ARROW_BINARY) {
        if (length == 0 && !a->offsets) return QR_OK;
        if (!a->offsets)
            return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "column '%s': no offsets buffer", f->name);
        if (a->offsets[0] < 0)
            return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "column '%s': negative first offset", f->name);
        for (int64_t i = 0; i < length; i++)
            if (a->offsets[i + 1] < a->offsets[i])
                return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "column '%s': offsets decrease at row %lld",
                               f->name, (long long)i);
        if (a->offsets[length] > 0 && !a->values)
            return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "column '%s': no character data", f->name);
        if (f->type == QR_ARROW_UTF8)
            for (int64_t i = 0; i < length; i++)
                if (a->offsets[i + 1] > a->offsets[i] && !qr_arrow_utf8_valid((const uint8_t *)a->values + a->offsets[i],
                                         (size_t)(a->offsets[i + 1] - a->offsets[i])))
                    return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "column '%s': invalid UTF-8 in row %lld",
                                   f->name, (long long)i);
        return QR_OK;
    }
    if (f->type == QR_ARROW_FIXED_SIZE_LIST && f->child && f->list_size >= 1) {
        if (length > INT64_MAX / f->list_size)
            return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "column '%s': too many values", f->name);
        return validate_array(f->child, a->child, length * f->list_size, depth + 1, err, err_len);
    }
    return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "column '%s': bad type %d", f->name, (int)f->type);
}

qr_status qr_arrow_batch_validate(const qr_arrow_schema *s, const qr_arrow_batch *b, char *err, size_t err_len) {
    if (!s || !b) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "null schema or batch");
    if (b->length < 0 || b->length > INT32_MAX)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "batch length %lld out of range", (long long)b->length);
    if (b->n_columns != s->n_fields)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "batch has %zu columns, schema has %zu fields",
                       b->n_columns, s->n_fields);
    for (size_t i = 0; i < s->n_fields; i++) {
        qr_status st = validate_array(&s->fields[i], &b->columns[i], b->length, 1, err, err_len);
        if (st != QR_OK) return st;
    }
    return QR_OK;
}
