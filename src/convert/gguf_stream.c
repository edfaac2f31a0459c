/* gguf_stream.c — streaming GGUF v3 writer: header first (offsets precomputed), then tensor data. */
#define _POSIX_C_SOURCE 200809L
#include "convert/gguf_stream.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/util.h"

typedef struct stream_tensor {
    char *name;                   /* owned */
    qr_type type;
    uint32_t n_dims;
    int64_t ne[QR_GGUF_MAX_DIMS]; /* unused dims = 1 */
    uint64_t offset;              /* relative to the data section */
    uint64_t nbytes;              /* unpadded */
} stream_tensor;

typedef struct byte_buf {
    uint8_t *data;
    size_t len, cap;
} byte_buf;

struct qr_gguf_stream {
    uint32_t alignment;
    byte_buf kv;              /* serialized key/values */
    uint64_t n_kv;
    char **keys;              /* [n_kv] owned, for duplicate checks */
    size_t keys_cap;
    stream_tensor *tensors;   /* [n_tensors] */
    size_t n_tensors, tensors_cap;
    uint64_t data_size;       /* padded size of the data section */
    char sticky[256];         /* first describe-phase error, "" if none */
    /* streaming phase */
    FILE *f;
    char *path, *tmp_path;    /* owned */
    size_t cur;               /* tensor being written */
    uint64_t cur_written;     /* bytes of it written so far */
    bool finished;
};

static uint64_t pad_to(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

static bool buf_reserve(byte_buf *b, size_t extra) {
    if (b->len + extra <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) cap *= 2;
    uint8_t *nd = realloc(b->data, cap);
    if (!nd) return false;
    b->data = nd;
    b->cap = cap;
    return true;
}

static bool buf_put(byte_buf *b, const void *p, size_t n) {
    if (!buf_reserve(b, n)) return false;
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    return true;
}

static bool put_u32(byte_buf *b, uint32_t v) { return buf_put(b, &v, 4); }
static bool put_u64(byte_buf *b, uint64_t v) { return buf_put(b, &v, 8); }
static bool put_str(byte_buf *b, const char *p, uint64_t n) { return put_u64(b, n) && buf_put(b, p, (size_t)n); }

qr_gguf_stream *qr_gguf_stream_create(uint32_t alignment) {
    if (alignment == 0 || (alignment & (alignment - 1))) return NULL;
    qr_gguf_stream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->alignment = alignment;
    return s;
}

void qr_gguf_stream_free(qr_gguf_stream *s) {
    if (!s) return;
    if (s->f) fclose(s->f);
    if (s->tmp_path && !s->finished) unlink(s->tmp_path);
    free(s->tmp_path);
    free(s->path);
    for (size_t i = 0; i < s->n_tensors; i++) free(s->tensors[i].name);
    free(s->tensors);
    for (uint64_t i = 0; i < s->n_kv; i++) free(s->keys[i]);
    free(s->keys);
    free(s->kv.data);
    free(s);
}

static qr_status stick(qr_gguf_stream *s, qr_status st, const char *msg, const char *key) {
    if (!s->sticky[0]) snprintf(s->sticky, sizeof s->sticky, "gguf stream: %s%s%s", msg, key ? ": " : "", key ? key : "");
    return st;
}

bool qr_gguf_stream_has_key(const qr_gguf_stream *s, const char *key) {
    for (uint64_t i = 0; i < s->n_kv; i++)
        if (!strcmp(s->keys[i], key)) return true;
    return false;
}

/* Checks the key, records it and writes it with its type tag. */
static qr_status kv_begin(qr_gguf_stream *s, const char *key, size_t key_len, qr_gguf_vtype type) {
    if (s->f) return stick(s, QR_ERR_INVALID_ARG, "key added after begin", NULL);
    char *k = strndup(key, key_len);
    if (!k) return stick(s, QR_ERR_NOMEM, "out of memory", NULL);
    if (strlen(k) != key_len || key_len == 0) {
        free(k);
        return stick(s, QR_ERR_INVALID_ARG, "empty key or key with a NUL byte", NULL);
    }
    if (qr_gguf_stream_has_key(s, k)) {
        qr_status st = stick(s, QR_ERR_INVALID_ARG, "duplicate key", k);
        free(k);
        return st;
    }
    if (s->n_kv == s->keys_cap) {
        size_t cap = s->keys_cap ? s->keys_cap * 2 : 32;
        char **nk = realloc(s->keys, cap * sizeof *nk);
        if (!nk) {
            free(k);
            return stick(s, QR_ERR_NOMEM, "out of memory", NULL);
        }
        s->keys = nk;
        s->keys_cap = cap;
    }
    if (!put_str(&s->kv, key, key_len) || !put_u32(&s->kv, (uint32_t)type)) {
        free(k);
        return stick(s, QR_ERR_NOMEM, "out of memory", NULL);
    }
    s->keys[s->n_kv++] = k;
    return QR_OK;
}

static qr_status kv_scalar(qr_gguf_stream *s, const char *key, qr_gguf_vtype type, const void *v, size_t n) {
    qr_status st = kv_begin(s, key, strlen(key), type);
    if (st != QR_OK) return st;
    if (!buf_put(&s->kv, v, n)) return stick(s, QR_ERR_NOMEM, "out of memory", NULL);
    return QR_OK;
}

qr_status qr_gguf_stream_set_u32(qr_gguf_stream *s, const char *key, uint32_t v) {
    if (!strcmp(key, "general.alignment")) {
        if (v == 0 || (v & (v - 1)) || s->n_tensors) return stick(s, QR_ERR_INVALID_ARG, "bad general.alignment", NULL);
        s->alignment = v;
    }
    return kv_scalar(s, key, QR_GGUF_U32, &v, 4);
}
qr_status qr_gguf_stream_set_i32(qr_gguf_stream *s, const char *key, int32_t v) { return kv_scalar(s, key, QR_GGUF_I32, &v, 4); }
qr_status qr_gguf_stream_set_u64(qr_gguf_stream *s, const char *key, uint64_t v) { return kv_scalar(s, key, QR_GGUF_U64, &v, 8); }
qr_status qr_gguf_stream_set_f32(qr_gguf_stream *s, const char *key, float v) { return kv_scalar(s, key, QR_GGUF_F32, &v, 4); }
qr_status qr_gguf_stream_set_bool(qr_gguf_stream *s, const char *key, bool v) {
    uint8_t b = v ? 1 : 0;
    return kv_scalar(s, key, QR_GGUF_BOOL, &b, 1);
}

qr_status qr_gguf_stream_set_str(qr_gguf_stream *s, const char *key, const char *v) {
    qr_status st = kv_begin(s, key, strlen(key), QR_GGUF_STRING);
    if (st != QR_OK) return st;
    if (!put_str(&s->kv, v, strlen(v))) return stick(s, QR_ERR_NOMEM, "out of memory", NULL);
    return QR_OK;
}

qr_status qr_gguf_stream_set_arr(qr_gguf_stream *s, const char *key, qr_gguf_vtype elem_type, const void *data,
                                 uint64_t count) {
    size_t es = qr_gguf_vtype_size(elem_type);
    if (es == 0) return stick(s, QR_ERR_INVALID_ARG, "scalar array with a non-scalar element type", key);
    qr_status st = kv_begin(s, key, strlen(key), QR_GGUF_ARRAY);
    if (st != QR_OK) return st;
    if (!put_u32(&s->kv, (uint32_t)elem_type) || !put_u64(&s->kv, count) || !buf_put(&s->kv, data, (size_t)count * es))
        return stick(s, QR_ERR_NOMEM, "out of memory", NULL);
    return QR_OK;
}

qr_status qr_gguf_stream_set_arr_str(qr_gguf_stream *s, const char *key, const char *const *strs, uint64_t count) {
    qr_status st = kv_begin(s, key, strlen(key), QR_GGUF_ARRAY);
    if (st != QR_OK) return st;
    if (!put_u32(&s->kv, QR_GGUF_STRING) || !put_u64(&s->kv, count)) return stick(s, QR_ERR_NOMEM, "out of memory", NULL);
    for (uint64_t i = 0; i < count; i++)
        if (!put_str(&s->kv, strs[i], strlen(strs[i]))) return stick(s, QR_ERR_NOMEM, "out of memory", NULL);
    return QR_OK;
}

/* Serializes the body of a value (no type tag) into b. */
static bool put_value_body(byte_buf *b, const qr_gguf_value *v) {
    switch (v->type) {
    case QR_GGUF_U8: case QR_GGUF_I8: case QR_GGUF_BOOL: { uint8_t x = (uint8_t)v->u64; return buf_put(b, &x, 1); }
    case QR_GGUF_U16: case QR_GGUF_I16: { uint16_t x = (uint16_t)v->u64; return buf_put(b, &x, 2); }
    case QR_GGUF_U32: case QR_GGUF_I32: { uint32_t x = (uint32_t)v->u64; return buf_put(b, &x, 4); }
    case QR_GGUF_U64: case QR_GGUF_I64: return put_u64(b, v->u64);
    case QR_GGUF_F32: { float x = (float)v->f64; return buf_put(b, &x, 4); }
    case QR_GGUF_F64: return buf_put(b, &v->f64, 8);
    case QR_GGUF_STRING: return put_str(b, v->str.data, v->str.len);
    case QR_GGUF_ARRAY: {
        if (!put_u32(b, (uint32_t)v->arr.elem_type) || !put_u64(b, v->arr.count)) return false;
        if (v->arr.elem_type == QR_GGUF_STRING) {
            for (uint64_t i = 0; i < v->arr.count; i++)
                if (!put_str(b, v->arr.strs[i].data, v->arr.strs[i].len)) return false;
            return true;
        }
        if (v->arr.elem_type == QR_GGUF_ARRAY) {
            for (uint64_t i = 0; i < v->arr.count; i++)
                if (!put_value_body(b, &v->arr.items[i])) return false;
            return true;
        }
        size_t es = qr_gguf_vtype_size(v->arr.elem_type);
        return es && buf_put(b, v->arr.data, (size_t)v->arr.count * es);
    }
    default: return false;
    }
}

qr_status qr_gguf_stream_set_value(qr_gguf_stream *s, qr_gguf_str key, const qr_gguf_value *v) {
    if (v->type == QR_GGUF_U32 && qr_gguf_str_eq(key, "general.alignment")) {
        uint32_t a = (uint32_t)v->u64;
        if (a == 0 || (a & (a - 1)) || s->n_tensors) return stick(s, QR_ERR_INVALID_ARG, "bad general.alignment", NULL);
        s->alignment = a;
    }
    qr_status st = kv_begin(s, key.data, (size_t)key.len, v->type);
    if (st != QR_OK) return st;
    if (!put_value_body(&s->kv, v)) return stick(s, QR_ERR_INVALID_ARG, "value cannot be serialized", s->keys[s->n_kv - 1]);
    return QR_OK;
}

qr_status qr_gguf_stream_add_tensor(qr_gguf_stream *s, const char *name, qr_type type, uint32_t n_dims,
                                    const int64_t *ne) {
    if (s->f) return stick(s, QR_ERR_INVALID_ARG, "tensor added after begin", name);
    if (n_dims < 1 || n_dims > QR_GGUF_MAX_DIMS) return stick(s, QR_ERR_INVALID_ARG, "bad n_dims", name);
    if (!qr_type_valid((uint32_t)type)) return stick(s, QR_ERR_INVALID_ARG, "bad tensor type", name);
    for (size_t i = 0; i < s->n_tensors; i++)
        if (!strcmp(s->tensors[i].name, name)) return stick(s, QR_ERR_INVALID_ARG, "duplicate tensor", name);
    uint64_t rows = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] <= 0) return stick(s, QR_ERR_INVALID_ARG, "non-positive dimension", name);
        if (d) rows *= (uint64_t)ne[d];
    }
    size_t row = qr_type_row_size(type, ne[0]);
    if (row == 0) return stick(s, QR_ERR_INVALID_ARG, "row length not a multiple of the type's block size", name);
    if (s->n_tensors == s->tensors_cap) {
        size_t cap = s->tensors_cap ? s->tensors_cap * 2 : 64;
        stream_tensor *nt = realloc(s->tensors, cap * sizeof *nt);
        if (!nt) return stick(s, QR_ERR_NOMEM, "out of memory", NULL);
        s->tensors = nt;
        s->tensors_cap = cap;
    }
    stream_tensor *t = &s->tensors[s->n_tensors];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    if (!t->name) return stick(s, QR_ERR_NOMEM, "out of memory", NULL);
    t->type = type;
    t->n_dims = n_dims;
    for (uint32_t d = 0; d < QR_GGUF_MAX_DIMS; d++) t->ne[d] = d < n_dims ? ne[d] : 1;
    t->nbytes = (uint64_t)row * rows;
    t->offset = s->data_size;
    s->data_size += pad_to(t->nbytes, s->alignment);
    s->n_tensors++;
    return QR_OK;
}

uint64_t qr_gguf_stream_tensor_nbytes(const qr_gguf_stream *s, size_t i) { return i < s->n_tensors ? s->tensors[i].nbytes : 0; }
size_t qr_gguf_stream_n_tensors(const qr_gguf_stream *s) { return s->n_tensors; }
size_t qr_gguf_stream_current_tensor(const qr_gguf_stream *s) { return s->cur; }

/* Serializes header + key/values + tensor infos (unpadded) into b. */
static bool build_header(const qr_gguf_stream *s, byte_buf *b) {
    if (!put_u32(b, QR_GGUF_MAGIC) || !put_u32(b, 3) || !put_u64(b, s->n_tensors) || !put_u64(b, s->n_kv)) return false;
    if (!buf_put(b, s->kv.data, s->kv.len)) return false;
    for (size_t i = 0; i < s->n_tensors; i++) {
        const stream_tensor *t = &s->tensors[i];
        if (!put_str(b, t->name, strlen(t->name)) || !put_u32(b, t->n_dims)) return false;
        for (uint32_t d = 0; d < t->n_dims; d++)
            if (!put_u64(b, (uint64_t)t->ne[d])) return false;
        if (!put_u32(b, (uint32_t)t->type) || !put_u64(b, t->offset)) return false;
    }
    return true;
}

static uint64_t header_size(const qr_gguf_stream *s) {
    uint64_t n = 4 + 4 + 8 + 8 + s->kv.len;
    for (size_t i = 0; i < s->n_tensors; i++) n += 8 + strlen(s->tensors[i].name) + 4 + 8ull * s->tensors[i].n_dims + 4 + 8;
    return n;
}

uint64_t qr_gguf_stream_file_size(const qr_gguf_stream *s) { return pad_to(header_size(s), s->alignment) + s->data_size; }

static qr_status write_zeros(FILE *f, uint64_t n) {
    static const uint8_t zeros[64];
    while (n) {
        size_t k = n < sizeof zeros ? (size_t)n : sizeof zeros;
        if (fwrite(zeros, 1, k, f) != k) return QR_ERR_IO;
        n -= k;
    }
    return QR_OK;
}

qr_status qr_gguf_stream_begin(qr_gguf_stream *s, const char *path, char *err, size_t err_len) {
    if (s->sticky[0]) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "%s", s->sticky);
    if (s->f || s->finished) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "gguf stream: begin called twice");
    size_t plen = strlen(path);
    s->path = strdup(path);
    s->tmp_path = malloc(plen + 16);
    if (!s->path || !s->tmp_path) return qr_errf(err, err_len, QR_ERR_NOMEM, "gguf stream: out of memory");
    memcpy(s->tmp_path, path, plen);
    memcpy(s->tmp_path + plen, ".tmp.XXXXXX", 12);
    int fd = mkstemp(s->tmp_path);
    if (fd < 0) {
        qr_status st = qr_errf(err, err_len, QR_ERR_IO, "%s: cannot create output file: %s", path, strerror(errno));
        free(s->tmp_path);
        s->tmp_path = NULL;
        return st;
    }
    fchmod(fd, 0644);
    s->f = fdopen(fd, "wb");
    if (!s->f) {
        close(fd);
        return qr_errf(err, err_len, QR_ERR_IO, "%s: %s", s->tmp_path, strerror(errno));
    }
    setvbuf(s->f, NULL, _IOFBF, 1 << 20);
    byte_buf h = {0};
    if (!build_header(s, &h)) {
        free(h.data);
        return qr_errf(err, err_len, QR_ERR_NOMEM, "gguf stream: out of memory building the header");
    }
    bool ok = fwrite(h.data, 1, h.len, s->f) == h.len && write_zeros(s->f, pad_to(h.len, s->alignment) - h.len) == QR_OK;
    free(h.data);
    if (!ok) return qr_errf(err, err_len, QR_ERR_IO, "%s: write failed: %s", s->tmp_path, strerror(errno));
    s->cur = 0;
    s->cur_written = 0;
    return QR_OK;
}

qr_status qr_gguf_stream_write(qr_gguf_stream *s, const void *data, size_t n, char *err, size_t err_len) {
    if (!s->f) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "gguf stream: write before begin");
    const uint8_t *p = data;
    while (n) {
        if (s->cur >= s->n_tensors)
            return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "gguf stream: %zu bytes more than the tensors hold", n);
        stream_tensor *t = &s->tensors[s->cur];
        uint64_t left = t->nbytes - s->cur_written;
        size_t k = n < left ? n : (size_t)left;
        if (fwrite(p, 1, k, s->f) != k)
            return qr_errf(err, err_len, QR_ERR_IO, "%s: write failed: %s", s->tmp_path, strerror(errno));
        p += k;
        n -= k;
        s->cur_written += k;
        if (s->cur_written == t->nbytes) {
            if (write_zeros(s->f, pad_to(t->nbytes, s->alignment) - t->nbytes) != QR_OK)
                return qr_errf(err, err_len, QR_ERR_IO, "%s: write failed: %s", s->tmp_path, strerror(errno));
            s->cur++;
            s->cur_written = 0;
        }
    }
    return QR_OK;
}

qr_status qr_gguf_stream_finish(qr_gguf_stream *s, char *err, size_t err_len) {
    if (!s->f) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "gguf stream: finish before begin");
    if (s->cur < s->n_tensors)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "gguf stream: tensor '%s' incomplete (%llu of %llu bytes)",
                       s->tensors[s->cur].name, (unsigned long long)s->cur_written,
                       (unsigned long long)s->tensors[s->cur].nbytes);
    int rc = fclose(s->f);
    s->f = NULL;
    if (rc != 0) return qr_errf(err, err_len, QR_ERR_IO, "%s: close failed: %s", s->tmp_path, strerror(errno));
    if (rename(s->tmp_path, s->path) != 0)
        return qr_errf(err, err_len, QR_ERR_IO, "rename %s -> %s: %s", s->tmp_path, s->path, strerror(errno));
    s->finished = true;
    return QR_OK;
}
