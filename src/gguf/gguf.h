/* gguf.h — GGUF v2/v3 reader (mmap, zero-copy) and writer.
 *
 * Reader: every string and scalar array points into the mapping; nothing is copied except small
 * index arrays (one qr_gguf_str per element of a string array, one qr_gguf_value per element of an
 * array of arrays). All multi-byte values in the file are little-endian and may be unaligned, so read
 * array elements through the accessors below, never by casting `data`.
 *
 * Every failure names the problem and the byte offset where it was found, e.g.
 *   "model.gguf: offset 24: string length 9223372036854775807 runs past end of file (size 1024)".
 */
#ifndef QR_GGUF_H
#define QR_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quarrel.h"
#include "quant/types.h"

#define QR_GGUF_MAGIC 0x46554747u /* "GGUF" read as a little-endian u32 */
#define QR_GGUF_DEFAULT_ALIGNMENT 32u
#define QR_GGUF_MAX_DIMS 4

/* Metadata value types, as stored on disk. */
typedef enum qr_gguf_vtype {
    QR_GGUF_U8 = 0,
    QR_GGUF_I8 = 1,
    QR_GGUF_U16 = 2,
    QR_GGUF_I16 = 3,
    QR_GGUF_U32 = 4,
    QR_GGUF_I32 = 5,
    QR_GGUF_F32 = 6,
    QR_GGUF_BOOL = 7,
    QR_GGUF_STRING = 8,
    QR_GGUF_ARRAY = 9,
    QR_GGUF_U64 = 10,
    QR_GGUF_I64 = 11,
    QR_GGUF_F64 = 12,
    QR_GGUF_VTYPE_COUNT = 13,
} qr_gguf_vtype;

/* "uint32", "string", "array", ... as gguf-py names them; "?" when invalid. */
const char *qr_gguf_vtype_name(uint32_t t);
/* Size in bytes of a scalar type (0 for STRING, ARRAY, invalid). */
size_t qr_gguf_vtype_size(uint32_t t);

/* A string inside the mapping. NOT NUL-terminated. */
typedef struct qr_gguf_str {
    const char *data; /* [len] bytes */
    uint64_t len;
} qr_gguf_str;

/* A metadata value. */
typedef struct qr_gguf_value {
    qr_gguf_vtype type;
    union {
        uint64_t u64;    /* U8, U16, U32, U64 (zero-extended) and BOOL (0/1) */
        int64_t i64;     /* I8, I16, I32, I64 (sign-extended) */
        double f64;      /* F32 (widened), F64 */
        qr_gguf_str str; /* STRING */
        struct {
            qr_gguf_vtype elem_type;
            uint64_t count;
            const uint8_t *data;          /* scalar elements: raw little-endian bytes in the mapping */
            qr_gguf_str *strs;            /* STRING elements: [count], owned by the qr_gguf */
            struct qr_gguf_value *items;  /* ARRAY elements (arrays of arrays): [count], owned */
        } arr;
    };
} qr_gguf_value;

typedef struct qr_gguf_kv {
    qr_gguf_str key;
    qr_gguf_value value;
    uint64_t offset; /* byte offset of this key/value pair in the file */
} qr_gguf_kv;

typedef struct qr_gguf_tensor {
    qr_gguf_str name;
    qr_type type;
    uint32_t n_dims;
    int64_t ne[QR_GGUF_MAX_DIMS]; /* elements per dim, ne[0] is the contiguous dim; unused dims = 1 */
    uint64_t offset;              /* relative to the start of the data section */
    uint64_t nbytes;              /* size of the data in bytes */
    const void *data;             /* == base + data_offset + offset, inside the mapping */
} qr_gguf_tensor;

typedef struct qr_gguf {
    uint32_t version;        /* 2 or 3 */
    uint64_t n_kv;
    qr_gguf_kv *kv;          /* [n_kv], in file order */
    uint64_t n_tensors;
    qr_gguf_tensor *tensors; /* [n_tensors], in file order */
    uint32_t alignment;      /* general.alignment or 32 */
    uint64_t data_offset;    /* byte offset of the tensor data section */
    const uint8_t *base;     /* the mapping, [size] bytes */
    uint64_t size;
    void *internal;          /* reader bookkeeping (mapping, arenas, hash index) */
} qr_gguf;

/* Opens and validates `path` (mmap). On success *out owns the mapping; free with qr_gguf_close. */
qr_status qr_gguf_open(const char *path, qr_gguf **out, char *err, size_t err_len);
/* Same, over a caller-owned buffer that must outlive the result (used by tests and the fuzzer). */
qr_status qr_gguf_open_memory(const void *buf, size_t size, qr_gguf **out, char *err, size_t err_len);
void qr_gguf_close(qr_gguf *g);

/* Lookups by NUL-terminated name. NULL / -1 when absent. O(1) average (hash index). */
int64_t qr_gguf_find_key(const qr_gguf *g, const char *key);
const qr_gguf_value *qr_gguf_get(const qr_gguf *g, const char *key);
int64_t qr_gguf_find_tensor(const qr_gguf *g, const char *name);
const qr_gguf_tensor *qr_gguf_get_tensor(const qr_gguf *g, const char *name);

/* Typed getters. They return false (and leave *out untouched) when the key is absent or the value
 * cannot be represented: any integer type converts to the requested one if it is in range; F32/F64
 * convert to float/double; integers also convert to float. */
bool qr_gguf_get_u32(const qr_gguf *g, const char *key, uint32_t *out);
bool qr_gguf_get_i32(const qr_gguf *g, const char *key, int32_t *out);
bool qr_gguf_get_u64(const qr_gguf *g, const char *key, uint64_t *out);
bool qr_gguf_get_f32(const qr_gguf *g, const char *key, float *out);
bool qr_gguf_get_bool(const qr_gguf *g, const char *key, bool *out);
bool qr_gguf_get_str(const qr_gguf *g, const char *key, qr_gguf_str *out);
/* Array with elements of `elem_type` (any if elem_type == QR_GGUF_VTYPE_COUNT); NULL otherwise. */
const qr_gguf_value *qr_gguf_get_arr(const qr_gguf *g, const char *key, qr_gguf_vtype elem_type);

/* Array element accessors (i < v->arr.count, v->type == QR_GGUF_ARRAY; unchecked beyond an assert). */
int64_t qr_gguf_arr_i64(const qr_gguf_value *v, uint64_t i);  /* integer/bool elements */
uint64_t qr_gguf_arr_u64(const qr_gguf_value *v, uint64_t i); /* integer/bool elements */
double qr_gguf_arr_f64(const qr_gguf_value *v, uint64_t i);   /* any numeric element */
qr_gguf_str qr_gguf_arr_str(const qr_gguf_value *v, uint64_t i);

/* True when s equals the NUL-terminated c string. */
bool qr_gguf_str_eq(qr_gguf_str s, const char *c);
/* Copies s into buf (NUL-terminated, truncated to cap-1). Returns buf. */
char *qr_gguf_str_copy(qr_gguf_str s, char *buf, size_t cap);

/* Total number of elements of a tensor. */
int64_t qr_gguf_tensor_nelements(const qr_gguf_tensor *t);

/* ---------------------------------------------------------------------------------------------
 * Writer. Key/values and tensors are written in the order they are added. Tensor data offsets are
 * assigned sequentially, each padded to `alignment` with zero bytes, exactly as ggml does, so that a
 * read -> write -> read round trip reproduces the file byte for byte.
 */
typedef struct qr_gguf_writer qr_gguf_writer;

/* version: 2 or 3. alignment: a power of two (use QR_GGUF_DEFAULT_ALIGNMENT). NULL on OOM. An
 * invalid version or alignment is reported by qr_gguf_writer_write. When the alignment is not 32
 * and no "general.alignment" key was set, the write appends that key (uint32) after the others so
 * that readers find the tensor data. */
qr_gguf_writer *qr_gguf_writer_create(uint32_t version, uint32_t alignment);
void qr_gguf_writer_free(qr_gguf_writer *w);

/* Add a key/value. Key and value bytes are copied. Adding a key twice is an error reported by
 * qr_gguf_writer_write. Setting "general.alignment" also changes the writer's alignment. */
qr_status qr_gguf_writer_set_u32(qr_gguf_writer *w, const char *key, uint32_t v);
qr_status qr_gguf_writer_set_i32(qr_gguf_writer *w, const char *key, int32_t v);
qr_status qr_gguf_writer_set_u64(qr_gguf_writer *w, const char *key, uint64_t v);
qr_status qr_gguf_writer_set_f32(qr_gguf_writer *w, const char *key, float v);
qr_status qr_gguf_writer_set_bool(qr_gguf_writer *w, const char *key, bool v);
qr_status qr_gguf_writer_set_str(qr_gguf_writer *w, const char *key, const char *v);
/* Scalar array: `data` holds `count` elements of elem_type in native (little-endian) layout. */
qr_status qr_gguf_writer_set_arr(qr_gguf_writer *w, const char *key, qr_gguf_vtype elem_type,
                                 const void *data, uint64_t count);
/* String array from NUL-terminated strings. */
qr_status qr_gguf_writer_set_arr_str(qr_gguf_writer *w, const char *key, const char *const *strs,
                                     uint64_t count);
/* Any value, deep-copied (used for round trips); key may not be NUL-terminated. */
qr_status qr_gguf_writer_set_value(qr_gguf_writer *w, qr_gguf_str key, const qr_gguf_value *v);

/* Add a tensor. `data` (nbytes = qr_type_row_size(type, ne[0]) * ne[1] * ne[2] * ne[3]) is NOT
 * copied: it must stay valid until qr_gguf_writer_write returns. n_dims in 1..4. */
qr_status qr_gguf_writer_add_tensor(qr_gguf_writer *w, const char *name, qr_type type, uint32_t n_dims,
                                    const int64_t *ne, const void *data);

/* Adds a tensor read from another file (name, type, shape and data; the name need not be
 * NUL-terminated). Same rules as qr_gguf_writer_add_tensor. */
qr_status qr_gguf_writer_copy_tensor(qr_gguf_writer *w, const qr_gguf_tensor *t);

/* Writes the whole file to `path` (via a temporary file renamed into place). Argument errors from
 * the set/add calls (the first one), duplicate keys and duplicate tensor names are reported here
 * as QR_ERR_INVALID_ARG with a message. */
qr_status qr_gguf_writer_write(qr_gguf_writer *w, const char *path, char *err, size_t err_len);
/* Same, into a malloc'ed buffer: *out ([*size] bytes) is the caller's to free(). */
qr_status qr_gguf_writer_write_memory(qr_gguf_writer *w, void **out, size_t *size, char *err, size_t err_len);

#endif /* QR_GGUF_H */
