/* flatbuf.h — a minimal FlatBuffers builder and a bounds-checked reader, enough for the Arrow IPC
 * metadata (Schema.fbs / Message.fbs). Our own code: there is no flatbuffers C library in Debian.
 *
 * Wire format reminders (all little-endian):
 *  - the buffer starts with a uoffset (u32) to the root table, relative to its own position;
 *  - a table starts with an soffset (i32): vtable position = table position - soffset;
 *  - a vtable is u16 vtable_bytes, u16 table_bytes, then one u16 per field: the field's offset from
 *    the table start, 0 when absent;
 *  - reference fields (table, string, vector) hold a uoffset relative to the field's own position;
 *  - a vector is a u32 element count followed by the elements; a string is a vector of bytes plus a
 *    NUL terminator that the count does not include.
 */
#ifndef QR_FLIGHT_FLATBUF_H
#define QR_FLIGHT_FLATBUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quarrel.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "flatbuf.c assumes a little-endian host"
#endif

#define QR_FB_MAX_FIELDS 16 /* the most fields one table may have in our schemas */

/* A reference to a finished object inside a builder: its distance from the END of the buffer. */
typedef uint32_t qr_fb_ref;

/* Back-to-front builder. Objects are written children-first; a table being built may not contain
 * another table being built (finish children first, then reference them). */
typedef struct qr_fb_builder {
    uint8_t *buf;       /* [cap] bytes; the live data is buf[cap - size, cap) */
    size_t cap;         /* allocated bytes */
    size_t size;        /* bytes written so far */
    size_t minalign;    /* largest alignment requested so far (bytes) */
    size_t table_start; /* `size` when the open table was started */
    uint32_t field_at[QR_FB_MAX_FIELDS]; /* open table: each field's distance from the end, 0 = unset */
    int n_fields;       /* open table: highest field index set + 1 */
    bool in_table;      /* a table is open */
    bool failed;        /* an allocation failed or the API was misused: every later call is a no-op */
    bool nomem;         /* the failure was an allocation failure */
} qr_fb_builder;

/* Initialises an empty builder (no allocation yet). */
void qr_fb_init(qr_fb_builder *b);
/* Frees the builder's memory. */
void qr_fb_free(qr_fb_builder *b);

/* Writes a string (len bytes, plus the NUL terminator). Returns its reference. */
qr_fb_ref qr_fb_string(qr_fb_builder *b, const char *s, size_t len);
/* Writes a vector of n inline elements of elem_size bytes each (scalars or structs, already in
 * little-endian layout), aligned to `align` (a power of two, <= 8). */
qr_fb_ref qr_fb_vector(qr_fb_builder *b, const void *elems, size_t n, size_t elem_size, size_t align);
/* Writes a vector of n references (to tables or strings) in the given order. */
qr_fb_ref qr_fb_vector_refs(qr_fb_builder *b, const qr_fb_ref *refs, size_t n);

/* Opens a table. Then add fields (any order), then qr_fb_table_end. */
void qr_fb_table_start(qr_fb_builder *b);
/* Adds a scalar field of `size` bytes (1, 2, 4 or 8) holding the little-endian `value`. */
void qr_fb_add_scalar(qr_fb_builder *b, int field, uint64_t value, size_t size);
/* Adds a reference field (table, string or vector written earlier). */
void qr_fb_add_ref(qr_fb_builder *b, int field, qr_fb_ref ref);
/* Closes the open table (writes its vtable). Returns the table's reference. */
qr_fb_ref qr_fb_table_end(qr_fb_builder *b);

/* Writes the root offset. On success *out points at the finished buffer (owned by the builder, valid
 * until qr_fb_free) and *out_len is its length, a multiple of 8. Returns QR_ERR_NOMEM or
 * QR_ERR_INTERNAL when an earlier step failed. */
qr_status qr_fb_finish(qr_fb_builder *b, qr_fb_ref root, const uint8_t **out, size_t *out_len);

/* ---- reader ------------------------------------------------------------------------------------
 * Every accessor checks bounds against the whole buffer and returns QR_ERR_FORMAT with a message
 * naming `what` when the data is malformed. Nothing reads outside buf[0, len). */

typedef struct qr_fb_table {
    const uint8_t *buf; /* [len] the whole flatbuffer */
    size_t len;
    size_t pos;         /* table start (byte offset into buf) */
    size_t vtable;      /* vtable start */
    uint16_t vt_bytes;  /* vtable size in bytes (>= 4) */
    uint16_t obj_bytes; /* table size in bytes (>= 4) */
} qr_fb_table;

typedef struct qr_fb_vec {
    const uint8_t *buf; /* [len] the whole flatbuffer */
    size_t len;
    size_t elems;       /* byte offset of element 0 */
    size_t n;           /* element count */
    size_t elem_size;   /* bytes per element */
} qr_fb_vec;

/* Reads the root table of buf[0, len). */
qr_status qr_fb_root(const uint8_t *buf, size_t len, qr_fb_table *out, char *err, size_t err_len);
/* True when the field is present in the table's vtable. */
bool qr_fb_has(const qr_fb_table *t, int field);
/* Reads a scalar field of `size` bytes (1, 2, 4, 8) as a sign-extended (is_signed) or zero-extended
 * integer. Absent fields give `def`. */
qr_status qr_fb_scalar(const qr_fb_table *t, int field, size_t size, bool is_signed, int64_t def,
                       int64_t *out, const char *what, char *err, size_t err_len);
/* Reads a sub-table field. *present is false (and *out untouched) when absent. */
qr_status qr_fb_subtable(const qr_fb_table *t, int field, qr_fb_table *out, bool *present,
                         const char *what, char *err, size_t err_len);
/* Reads a string field: *s points into the buffer (NUL-terminated there), *n excludes the NUL.
 * *present is false when absent. */
qr_status qr_fb_str(const qr_fb_table *t, int field, const char **s, size_t *n, bool *present,
                    const char *what, char *err, size_t err_len);
/* Reads a vector field with elements of elem_size bytes (4 for vectors of references). *present is
 * false (and out->n == 0) when absent. */
qr_status qr_fb_vector_field(const qr_fb_table *t, int field, size_t elem_size, qr_fb_vec *out,
                             bool *present, const char *what, char *err, size_t err_len);
/* Element i (< v->n) of a vector of tables. */
qr_status qr_fb_vec_table(const qr_fb_vec *v, size_t i, qr_fb_table *out, const char *what, char *err,
                          size_t err_len);
/* Reads the little-endian 64-bit word `word` (0-based) of inline element i (< v->n). */
int64_t qr_fb_vec_i64(const qr_fb_vec *v, size_t i, size_t word);

#endif /* QR_FLIGHT_FLATBUF_H */
