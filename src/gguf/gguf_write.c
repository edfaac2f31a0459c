/* gguf_write.c — GGUF v2/v3 writer.
 *
 * Key/values are serialised to their on-disk bytes when they are added (so a value read from another
 * file is deep-copied at once); tensors keep a pointer to the caller's data until the write. The file
 * layout is the one ggml writes: header, key/values, tensor infos, zero padding up to the alignment,
 * then each tensor's data followed by zero padding up to the alignment. Argument errors are
 * remembered (the first one wins) and reported by qr_gguf_writer_write with a message.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "util/util.h"

#define MAX_ARRAY_DEPTH 8 /* same bound as the reader */

/* A growable byte buffer. */
typedef struct bytes {
    uint8_t *p;
    size_t len; /* bytes used */
    size_t cap; /* bytes allocated */
} bytes;

typedef struct writer_kv {
    char *key;      /* [key_len] bytes, not NUL-terminated */
    uint64_t key_len;
    uint8_t *value; /* [value_len] bytes: u32 value type, then the payload as on disk */
    size_t value_len;
} writer_kv;

typedef struct writer_tensor {
    char *name; /* [name_len] bytes */
    uint64_t name_len;
    qr_type type;
    uint32_t n_dims;
    int64_t ne[QR_GGUF_MAX_DIMS]; /* unused dims = 1 */
    const void *data;             /* [nbytes], caller-owned */
    uint64_t nbytes;
} writer_tensor;

struct qr_gguf_writer {
    uint32_t version;
    uint32_t alignment;
    writer_kv *kvs; /* [n_kv] in insertion order */
    size_t n_kv, cap_kv;
    writer_tensor *tensors; /* [n_tensors] in insertion order */
    size_t n_tensors, cap_tensors;
    bool has_alignment_key; /* general.alignment was added */
    qr_status deferred;     /* first argument error, reported by write */
    char deferred_msg[256];
};

/* Records the first argument error; returns `status`. */
static qr_status defer(qr_gguf_writer *w, qr_status status, const char *fmt, ...) QR_PRINTF(3, 4);
static qr_status defer(qr_gguf_writer *w, qr_status status, const char *fmt, ...) {
    if (w->deferred == QR_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(w->deferred_msg, sizeof w->deferred_msg, fmt, ap);
        va_end(ap);
        w->deferred = status;
    }
    return status;
}

/* ---- byte buffer --------------------------------------------------------------------------------- */

/* Appends src[0..n); false on OOM. */
static bool bytes_put(bytes *b, const void *src, size_t n) {
    if (n > SIZE_MAX / 2 - b->len) return false;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) return false;
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, src, n);
    b->len += n;
    return true;
}

/* Appends the low `size` bytes of v, little-endian. */
static bool put_le(bytes *b, uint64_t v, unsigned size) {
    uint8_t tmp[8];
    for (unsigned i = 0; i < size; i++) tmp[i] = (uint8_t)(v >> (8 * i));
    return bytes_put(b, tmp, size);
}

/* Appends a GGUF string: u64 length, then the bytes. */
static bool put_str(bytes *b, const char *s, uint64_t len) { return put_le(b, len, 8) && bytes_put(b, s, len); }

/* ---- lifecycle ----------------------------------------------------------------------------------- */

qr_gguf_writer *qr_gguf_writer_create(uint32_t version, uint32_t alignment) {
    qr_gguf_writer *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->version = version;
    w->alignment = alignment;
    if (version != 2 && version != 3) defer(w, QR_ERR_INVALID_ARG, "GGUF version %u cannot be written (only 2 and 3)", version);
    if (alignment == 0 || (alignment & (alignment - 1)))
        defer(w, QR_ERR_INVALID_ARG, "alignment %u is not a nonzero power of two", alignment);
    return w;
}

void qr_gguf_writer_free(qr_gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kvs[i].key);
        free(w->kvs[i].value);
    }
    for (size_t i = 0; i < w->n_tensors; i++) free(w->tensors[i].name);
    free(w->kvs);
    free(w->tensors);
    free(w);
}

/* ---- key/values ---------------------------------------------------------------------------------- */

/* Appends key + serialised value (taking ownership of value->p). Tracks general.alignment. */
static qr_status add_kv(qr_gguf_writer *w, const char *key, uint64_t key_len, bytes *value) {
    if (!key) {
        free(value->p);
        return defer(w, QR_ERR_INVALID_ARG, "NULL key");
    }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? w->cap_kv * 2 : 16;
        writer_kv *p = realloc(w->kvs, cap * sizeof *p);
        if (!p) {
            free(value->p);
            return defer(w, QR_ERR_NOMEM, "out of memory adding a key");
        }
        w->kvs = p;
        w->cap_kv = cap;
    }
    char *k = malloc(key_len ? key_len : 1);
    if (!k) {
        free(value->p);
        return defer(w, QR_ERR_NOMEM, "out of memory adding a key");
    }
    if (key_len) memcpy(k, key, key_len);
    w->kvs[w->n_kv++] = (writer_kv){.key = k, .key_len = key_len, .value = value->p, .value_len = value->len};
    if (key_len == 17 && memcmp(key, "general.alignment", 17) == 0) {
        w->has_alignment_key = true;
        uint32_t type = (uint32_t)value->p[0] | (uint32_t)value->p[1] << 8 | (uint32_t)value->p[2] << 16 | (uint32_t)value->p[3] << 24;
        if (type != QR_GGUF_U32)
            return defer(w, QR_ERR_INVALID_ARG, "general.alignment must be uint32, not %s", qr_gguf_vtype_name(type));
        uint32_t a = (uint32_t)value->p[4] | (uint32_t)value->p[5] << 8 | (uint32_t)value->p[6] << 16 | (uint32_t)value->p[7] << 24;
        if (a == 0 || (a & (a - 1))) return defer(w, QR_ERR_INVALID_ARG, "general.alignment %u is not a nonzero power of two", a);
        w->alignment = a;
    }
    return QR_OK;
}

/* Serialises a scalar (type tag + bytes) and adds it. */
static qr_status add_scalar(qr_gguf_writer *w, const char *key, qr_gguf_vtype type, uint64_t bits) {
    bytes b = {0};
    if (!put_le(&b, type, 4) || !put_le(&b, bits, (unsigned)qr_gguf_vtype_size(type))) {
        free(b.p);
        return defer(w, QR_ERR_NOMEM, "out of memory adding key '%s'", key ? key : "(null)");
    }
    return add_kv(w, key, key ? strlen(key) : 0, &b);
}

qr_status qr_gguf_writer_set_u32(qr_gguf_writer *w, const char *key, uint32_t v) { return add_scalar(w, key, QR_GGUF_U32, v); }

qr_status qr_gguf_writer_set_i32(qr_gguf_writer *w, const char *key, int32_t v) {
    return add_scalar(w, key, QR_GGUF_I32, (uint32_t)v);
}

qr_status qr_gguf_writer_set_u64(qr_gguf_writer *w, const char *key, uint64_t v) { return add_scalar(w, key, QR_GGUF_U64, v); }

qr_status qr_gguf_writer_set_f32(qr_gguf_writer *w, const char *key, float v) {
    uint32_t bits;
    memcpy(&bits, &v, 4);
    return add_scalar(w, key, QR_GGUF_F32, bits);
}

qr_status qr_gguf_writer_set_bool(qr_gguf_writer *w, const char *key, bool v) { return add_scalar(w, key, QR_GGUF_BOOL, v ? 1 : 0); }

qr_status qr_gguf_writer_set_str(qr_gguf_writer *w, const char *key, const char *v) {
    if (!v) return defer(w, QR_ERR_INVALID_ARG, "NULL string value for key '%s'", key ? key : "(null)");
    bytes b = {0};
    if (!put_le(&b, QR_GGUF_STRING, 4) || !put_str(&b, v, strlen(v))) {
        free(b.p);
        return defer(w, QR_ERR_NOMEM, "out of memory adding key '%s'", key ? key : "(null)");
    }
    return add_kv(w, key, key ? strlen(key) : 0, &b);
}

/* True when every one of the n bytes is 0 or 1 (the only valid bool encodings). */
static bool bools_valid(const void *data, uint64_t n) {
    const uint8_t *p = data;
    for (uint64_t i = 0; i < n; i++)
        if (p[i] > 1) return false;
    return true;
}

qr_status qr_gguf_writer_set_arr(qr_gguf_writer *w, const char *key, qr_gguf_vtype elem_type, const void *data, uint64_t count) {
    const char *k = key ? key : "(null)";
    size_t esz = qr_gguf_vtype_size(elem_type);
    if (!esz) return defer(w, QR_ERR_INVALID_ARG, "key '%s': set_arr needs a scalar element type, not %s", k, qr_gguf_vtype_name(elem_type));
    if (count > SIZE_MAX / esz || (count && !data)) return defer(w, QR_ERR_INVALID_ARG, "key '%s': bad array (count %llu)", k, (unsigned long long)count);
    if (elem_type == QR_GGUF_BOOL && !bools_valid(data, count)) return defer(w, QR_ERR_INVALID_ARG, "key '%s': bool array element not 0 or 1", k);
    bytes b = {0};
    if (!put_le(&b, QR_GGUF_ARRAY, 4) || !put_le(&b, elem_type, 4) || !put_le(&b, count, 8) || !bytes_put(&b, data, count * esz)) {
        free(b.p);
        return defer(w, QR_ERR_NOMEM, "out of memory adding key '%s'", k);
    }
    return add_kv(w, key, key ? strlen(key) : 0, &b);
}

qr_status qr_gguf_writer_set_arr_str(qr_gguf_writer *w, const char *key, const char *const *strs, uint64_t count) {
    const char *k = key ? key : "(null)";
    if (count && !strs) return defer(w, QR_ERR_INVALID_ARG, "key '%s': NULL string array", k);
    bytes b = {0};
    bool ok = put_le(&b, QR_GGUF_ARRAY, 4) && put_le(&b, QR_GGUF_STRING, 4) && put_le(&b, count, 8);
    for (uint64_t i = 0; ok && i < count; i++) {
        if (!strs[i]) {
            free(b.p);
            return defer(w, QR_ERR_INVALID_ARG, "key '%s': string %llu is NULL", k, (unsigned long long)i);
        }
        ok = put_str(&b, strs[i], strlen(strs[i]));
    }
    if (!ok) {
        free(b.p);
        return defer(w, QR_ERR_NOMEM, "out of memory adding key '%s'", k);
    }
    return add_kv(w, key, key ? strlen(key) : 0, &b);
}

/* Appends the on-disk payload of v (no type tag). Returns a status; *why says what was wrong. */
static qr_status put_payload(bytes *b, const qr_gguf_value *v, int depth, const char **why) {
    if ((uint32_t)v->type >= QR_GGUF_VTYPE_COUNT) return *why = "unknown value type", QR_ERR_INVALID_ARG;
    size_t sz = qr_gguf_vtype_size(v->type);
    bool ok = true;
    switch (v->type) {
    case QR_GGUF_STRING:
        if (v->str.len && !v->str.data) return *why = "NULL string data", QR_ERR_INVALID_ARG;
        ok = put_str(b, v->str.data, v->str.len);
        break;
    case QR_GGUF_ARRAY: {
        if (depth >= MAX_ARRAY_DEPTH) return *why = "arrays nested too deep", QR_ERR_INVALID_ARG;
        uint32_t et = v->arr.elem_type;
        uint64_t n = v->arr.count;
        if (et >= QR_GGUF_VTYPE_COUNT) return *why = "unknown array element type", QR_ERR_INVALID_ARG;
        ok = put_le(b, et, 4) && put_le(b, n, 8);
        size_t esz = qr_gguf_vtype_size(et);
        if (esz) {
            if (n > SIZE_MAX / esz || (n && !v->arr.data)) return *why = "bad scalar array", QR_ERR_INVALID_ARG;
            if (et == QR_GGUF_BOOL && !bools_valid(v->arr.data, n)) return *why = "bool array element not 0 or 1", QR_ERR_INVALID_ARG;
            ok = ok && bytes_put(b, v->arr.data, n * esz);
        } else if (et == QR_GGUF_STRING) {
            if (n && !v->arr.strs) return *why = "NULL string array", QR_ERR_INVALID_ARG;
            for (uint64_t i = 0; ok && i < n; i++) {
                if (v->arr.strs[i].len && !v->arr.strs[i].data) return *why = "NULL string data", QR_ERR_INVALID_ARG;
                ok = put_str(b, v->arr.strs[i].data, v->arr.strs[i].len);
            }
        } else {
            if (n && !v->arr.items) return *why = "NULL nested array", QR_ERR_INVALID_ARG;
            for (uint64_t i = 0; ok && i < n; i++) {
                if (v->arr.items[i].type != QR_GGUF_ARRAY) return *why = "array of arrays holds a non-array", QR_ERR_INVALID_ARG;
                qr_status st = put_payload(b, &v->arr.items[i], depth + 1, why);
                if (st) return st;
            }
        }
        break;
    }
    case QR_GGUF_F32: {
        float f = (float)v->f64;
        uint32_t bits;
        memcpy(&bits, &f, 4);
        ok = put_le(b, bits, 4);
        break;
    }
    case QR_GGUF_F64: {
        uint64_t bits;
        memcpy(&bits, &v->f64, 8);
        ok = put_le(b, bits, 8);
        break;
    }
    case QR_GGUF_I8:
    case QR_GGUF_I16:
    case QR_GGUF_I32:
    case QR_GGUF_I64: ok = put_le(b, (uint64_t)v->i64, (unsigned)sz); break;
    case QR_GGUF_BOOL:
        if (v->u64 > 1) return *why = "bool value not 0 or 1", QR_ERR_INVALID_ARG;
        ok = put_le(b, v->u64, 1);
        break;
    default: ok = put_le(b, v->u64, (unsigned)sz); break; /* unsigned */
    }
    if (!ok) return *why = "out of memory", QR_ERR_NOMEM;
    return QR_OK;
}

qr_status qr_gguf_writer_set_value(qr_gguf_writer *w, qr_gguf_str key, const qr_gguf_value *v) {
    if (!v || (key.len && !key.data)) return defer(w, QR_ERR_INVALID_ARG, "set_value: NULL key or value");
    bytes b = {0};
    const char *why = "out of memory";
    qr_status st = put_le(&b, (uint32_t)v->type, 4) ? put_payload(&b, v, 0, &why) : QR_ERR_NOMEM;
    if (st) {
        free(b.p);
        return defer(w, st, "key '%.*s': %s", (int)(key.len > 80 ? 80 : key.len), key.data ? key.data : "", why);
    }
    return add_kv(w, key.data ? key.data : "", key.len, &b);
}

/* ---- tensors ------------------------------------------------------------------------------------- */

/* Validates and appends a tensor named name[0..name_len). */
static qr_status add_tensor(qr_gguf_writer *w, const char *name, uint64_t name_len, qr_type type, uint32_t n_dims, const int64_t *ne,
                            const void *data) {
    int nl = (int)(name_len > 80 ? 80 : name_len);
    if (!name) return defer(w, QR_ERR_INVALID_ARG, "tensor with NULL name");
    if (n_dims < 1 || n_dims > QR_GGUF_MAX_DIMS || !ne)
        return defer(w, QR_ERR_INVALID_ARG, "tensor '%.*s': n_dims %u out of range 1..%d", nl, name, n_dims, QR_GGUF_MAX_DIMS);
    if (!qr_type_valid((uint32_t)type)) return defer(w, QR_ERR_INVALID_ARG, "tensor '%.*s': unknown type %d", nl, name, (int)type);
    writer_tensor t = {.type = type, .n_dims = n_dims, .data = data, .ne = {1, 1, 1, 1}};
    int64_t nel = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] < 1) return defer(w, QR_ERR_INVALID_ARG, "tensor '%.*s': ne[%u] = %lld", nl, name, d, (long long)ne[d]);
        if (__builtin_mul_overflow(nel, ne[d], &nel)) return defer(w, QR_ERR_INVALID_ARG, "tensor '%.*s': size overflows", nl, name);
        t.ne[d] = ne[d];
    }
    const qr_type_info *ti = &qr_type_table[type];
    if (ne[0] % ti->block_size)
        return defer(w, QR_ERR_INVALID_ARG, "tensor '%.*s': ne[0] = %lld is not a multiple of %s's block size %u", nl, name,
                     (long long)ne[0], ti->name, ti->block_size);
    uint64_t row;
    if (__builtin_mul_overflow((uint64_t)(ne[0] / ti->block_size), (uint64_t)ti->type_size, &row) ||
        __builtin_mul_overflow(row, (uint64_t)(nel / ne[0]), &t.nbytes))
        return defer(w, QR_ERR_INVALID_ARG, "tensor '%.*s': size overflows", nl, name);
    if (!data) return defer(w, QR_ERR_INVALID_ARG, "tensor '%.*s': NULL data", nl, name);
    if (w->n_tensors == w->cap_tensors) {
        size_t cap = w->cap_tensors ? w->cap_tensors * 2 : 16;
        writer_tensor *p = realloc(w->tensors, cap * sizeof *p);
        if (!p) return defer(w, QR_ERR_NOMEM, "out of memory adding a tensor");
        w->tensors = p;
        w->cap_tensors = cap;
    }
    if (!(t.name = malloc(name_len ? name_len : 1))) return defer(w, QR_ERR_NOMEM, "out of memory adding a tensor");
    if (name_len) memcpy(t.name, name, name_len);
    t.name_len = name_len;
    w->tensors[w->n_tensors++] = t;
    return QR_OK;
}

qr_status qr_gguf_writer_add_tensor(qr_gguf_writer *w, const char *name, qr_type type, uint32_t n_dims, const int64_t *ne,
                                    const void *data) {
    return add_tensor(w, name, name ? strlen(name) : 0, type, n_dims, ne, data);
}

qr_status qr_gguf_writer_copy_tensor(qr_gguf_writer *w, const qr_gguf_tensor *t) {
    if (!t) return defer(w, QR_ERR_INVALID_ARG, "copy_tensor: NULL tensor");
    return add_tensor(w, t->name.data ? t->name.data : "", t->name.len, t->type, t->n_dims, t->ne, t->data);
}

/* ---- output -------------------------------------------------------------------------------------- */

/* n rounded up to a multiple of a. */
static uint64_t pad_to(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

/* Reports the first duplicate key or tensor name, if any. */
static qr_status check_duplicates(const qr_gguf_writer *w, char *err, size_t err_len) {
    for (size_t i = 0; i < w->n_kv; i++)
        for (size_t j = 0; j < i; j++)
            if (w->kvs[i].key_len == w->kvs[j].key_len && memcmp(w->kvs[i].key, w->kvs[j].key, w->kvs[i].key_len) == 0)
                return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "duplicate key '%.*s' (added as #%zu and #%zu)",
                               (int)(w->kvs[i].key_len > 80 ? 80 : w->kvs[i].key_len), w->kvs[i].key, j, i);
    for (size_t i = 0; i < w->n_tensors; i++)
        for (size_t j = 0; j < i; j++)
            if (w->tensors[i].name_len == w->tensors[j].name_len &&
                memcmp(w->tensors[i].name, w->tensors[j].name, w->tensors[i].name_len) == 0)
                return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "duplicate tensor name '%.*s' (added as #%zu and #%zu)",
                               (int)(w->tensors[i].name_len > 80 ? 80 : w->tensors[i].name_len), w->tensors[i].name, j, i);
    return QR_OK;
}

/* Writes n zero bytes. */
static bool put_zeros(FILE *f, uint64_t n) {
    static const uint8_t zeros[256];
    while (n) {
        size_t k = n < sizeof zeros ? (size_t)n : sizeof zeros;
        if (fwrite(zeros, 1, k, f) != k) return false;
        n -= k;
    }
    return true;
}

/* Serialises the whole file to f. */
static qr_status write_stream(const qr_gguf_writer *w, FILE *f, char *err, size_t err_len) {
    bytes meta = {0};
    const uint64_t a = w->alignment;
    /* a reader assumes 32 unless told otherwise: record any other alignment as the last key */
    bool add_alignment = a != QR_GGUF_DEFAULT_ALIGNMENT && !w->has_alignment_key;
    bool ok = put_le(&meta, QR_GGUF_MAGIC, 4) && put_le(&meta, w->version, 4) && put_le(&meta, w->n_tensors, 8) &&
              put_le(&meta, w->n_kv + add_alignment, 8);
    for (size_t i = 0; ok && i < w->n_kv; i++)
        ok = put_str(&meta, w->kvs[i].key, w->kvs[i].key_len) && bytes_put(&meta, w->kvs[i].value, w->kvs[i].value_len);
    if (add_alignment)
        ok = ok && put_str(&meta, "general.alignment", 17) && put_le(&meta, QR_GGUF_U32, 4) && put_le(&meta, a, 4);
    uint64_t offset = 0;
    for (size_t i = 0; ok && i < w->n_tensors; i++) {
        const writer_tensor *t = &w->tensors[i];
        ok = put_str(&meta, t->name, t->name_len) && put_le(&meta, t->n_dims, 4);
        for (uint32_t d = 0; ok && d < t->n_dims; d++) ok = put_le(&meta, (uint64_t)t->ne[d], 8);
        ok = ok && put_le(&meta, (uint32_t)t->type, 4) && put_le(&meta, offset, 8);
        offset += pad_to(t->nbytes, a);
    }
    if (!ok) {
        free(meta.p);
        return qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory serialising the GGUF header");
    }
    ok = fwrite(meta.p, 1, meta.len, f) == meta.len && put_zeros(f, pad_to(meta.len, a) - meta.len);
    free(meta.p);
    for (size_t i = 0; ok && i < w->n_tensors; i++) {
        const writer_tensor *t = &w->tensors[i];
        ok = fwrite(t->data, 1, t->nbytes, f) == t->nbytes && put_zeros(f, pad_to(t->nbytes, a) - t->nbytes);
    }
    if (!ok || fflush(f) != 0) return qr_errf(err, err_len, QR_ERR_IO, "write failed: %s", strerror(errno));
    return QR_OK;
}

/* Checks the deferred error and duplicates before any output. */
static qr_status check_writable(const qr_gguf_writer *w, char *err, size_t err_len) {
    if (!w) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "NULL writer");
    if (w->deferred) return qr_errf(err, err_len, w->deferred, "%s", w->deferred_msg);
    return check_duplicates(w, err, err_len);
}

qr_status qr_gguf_writer_write(qr_gguf_writer *w, const char *path, char *err, size_t err_len) {
    qr_status st = check_writable(w, err, err_len);
    if (st) return st;
    size_t n = strlen(path) + 16;
    char *tmp = malloc(n);
    if (!tmp) return qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory");
    snprintf(tmp, n, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        st = qr_errf(err, err_len, QR_ERR_IO, "%s: cannot create temporary file: %s", tmp, strerror(errno));
        free(tmp);
        return st;
    }
    fchmod(fd, 0644);
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        st = qr_errf(err, err_len, QR_ERR_IO, "%s: fdopen failed: %s", tmp, strerror(errno));
        close(fd);
        goto fail;
    }
    setvbuf(f, NULL, _IOFBF, 1 << 20);
    char msg[256] = "";
    st = write_stream(w, f, msg, sizeof msg);
    if (fclose(f) != 0 && !st) st = qr_errf(msg, sizeof msg, QR_ERR_IO, "close failed: %s", strerror(errno));
    if (st) {
        qr_errf(err, err_len, st, "%s: %s", path, msg);
        goto fail;
    }
    if (rename(tmp, path) != 0) {
        st = qr_errf(err, err_len, QR_ERR_IO, "%s: cannot rename %s into place: %s", path, tmp, strerror(errno));
        goto fail;
    }
    free(tmp);
    return QR_OK;
fail:
    unlink(tmp);
    free(tmp);
    return st;
}

qr_status qr_gguf_writer_write_memory(qr_gguf_writer *w, void **out, size_t *size, char *err, size_t err_len) {
    *out = NULL;
    *size = 0;
    qr_status st = check_writable(w, err, err_len);
    if (st) return st;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return qr_errf(err, err_len, QR_ERR_NOMEM, "open_memstream failed: %s", strerror(errno));
    st = write_stream(w, f, err, err_len);
    if (fclose(f) != 0 && !st) st = qr_errf(err, err_len, QR_ERR_NOMEM, "in-memory write failed");
    if (st) {
        free(buf);
        return st;
    }
    *out = buf;
    *size = len;
    return QR_OK;
}
