/* arrow_ipc.h — Arrow columnar types and the Arrow IPC (encapsulated message) encoder/decoder.
 *
 * Supported column types: signed/unsigned integers (8..64 bit), float16/32/64, utf8, binary and
 * FixedSizeList of any of these (e.g. FixedSizeList<float32, dim> for embeddings; lists may nest, up
 * to QR_ARROW_MAX_DEPTH levels in all). Validity bitmaps (nulls) are supported in both directions, as
 * are schema and field key/value metadata. Not supported (clear QR_ERR_UNSUPPORTED): other types,
 * dictionary encoding, compressed bodies, big-endian data, batches over INT32_MAX rows.
 *
 * Encapsulated IPC message (the stream format is a sequence of these, ended by an EOS marker):
 *   u32 0xFFFFFFFF (continuation) | i32 metadata length L | L bytes flatbuffer Message (padded to 8)
 *   | body (Message.bodyLength bytes: the buffers, each padded to 8).
 * In Arrow Flight the same Message flatbuffer travels as FlightData.data_header and the body as
 * FlightData.data_body (no continuation/length prefix).
 *
 * The decoder validates every offset, length, count and nesting level against the bytes it was given
 * and never reads outside them; errors come back as QR_ERR_FORMAT (malformed) or
 * QR_ERR_UNSUPPORTED (well-formed but outside the list above) with a message.
 */
#ifndef QR_FLIGHT_ARROW_IPC_H
#define QR_FLIGHT_ARROW_IPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quarrel.h"

typedef enum qr_arrow_type {
    QR_ARROW_INT8 = 1,
    QR_ARROW_INT16,
    QR_ARROW_INT32,
    QR_ARROW_INT64,
    QR_ARROW_UINT8,
    QR_ARROW_UINT16,
    QR_ARROW_UINT32,
    QR_ARROW_UINT64,
    QR_ARROW_FLOAT16,
    QR_ARROW_FLOAT32,
    QR_ARROW_FLOAT64,
    QR_ARROW_UTF8,
    QR_ARROW_BINARY,
    QR_ARROW_FIXED_SIZE_LIST,
} qr_arrow_type;

#define QR_ARROW_MAX_DEPTH 4 /* nesting levels the decoder accepts (a FixedSizeList is 2) */

/* One key/value metadata pair. Both are owned, NUL-terminated byte strings (the lengths exclude the
 * NUL; the bytes may in principle contain NULs). */
typedef struct qr_arrow_kv {
    char *key;
    size_t key_len;
    char *value;
    size_t value_len;
} qr_arrow_kv;

typedef struct qr_arrow_field {
    char *name;                   /* owned, NUL-terminated UTF-8 ("" allowed) */
    qr_arrow_type type;
    int32_t list_size;            /* FIXED_SIZE_LIST: values per list, >= 1; else 0 */
    bool nullable;
    struct qr_arrow_field *child; /* FIXED_SIZE_LIST: its one child field (owned); else NULL */
    qr_arrow_kv *metadata;        /* [n_metadata] owned */
    size_t n_metadata;
} qr_arrow_field;

typedef struct qr_arrow_schema {
    qr_arrow_field *fields;       /* [n_fields] owned */
    size_t n_fields;
    qr_arrow_kv *metadata;        /* [n_metadata] owned */
    size_t n_metadata;
} qr_arrow_schema;

/* A column's data (a view: it does not own its buffers). Slots start at element 0 of each buffer. */
typedef struct qr_arrow_array {
    int64_t length;               /* number of slots */
    int64_t null_count;           /* number of null slots; must be 0 when validity is NULL */
    const uint8_t *validity;      /* [ceil(length / 8)] bits, LSB first, 1 = valid; NULL = all valid */
    const void *values;           /* fixed width: [length * byte width]; utf8/binary: the character
                                     data [offsets[length]] bytes; FIXED_SIZE_LIST: NULL */
    const int32_t *offsets;       /* utf8/binary: [length + 1], non-decreasing from 0; else NULL */
    const struct qr_arrow_array *child; /* FIXED_SIZE_LIST: values, length * list_size slots */
} qr_arrow_array;

/* A record batch: one array per schema field. Built by the caller (views into its own memory) or by
 * qr_arrow_decode_batch (then the batch owns its storage: release it with qr_arrow_batch_free). */
typedef struct qr_arrow_batch {
    int64_t length;               /* rows */
    size_t n_columns;
    const qr_arrow_array *columns; /* [n_columns] in schema order */
    /* storage owned by a decoded batch; NULL for caller-built batches */
    qr_arrow_array *owned_arrays; /* [all arrays, children included] */
    uint8_t *owned_body;          /* an aligned copy of the body, when the input was misaligned */
} qr_arrow_batch;

/* An encoded IPC message: the flatbuffer Message and the body, both owned. */
typedef struct qr_arrow_message {
    uint8_t *metadata;            /* [metadata_len] flatbuffer Message, zero-padded to a multiple of 8 */
    size_t metadata_len;
    uint8_t *body;                /* [body_len] buffers, each padded to 8 bytes; NULL when empty */
    size_t body_len;
} qr_arrow_message;

/* Message header kinds (the MessageHeader union's type tags). */
enum {
    QR_ARROW_MSG_NONE = 0,
    QR_ARROW_MSG_SCHEMA = 1,
    QR_ARROW_MSG_DICTIONARY_BATCH = 2,
    QR_ARROW_MSG_RECORD_BATCH = 3,
    QR_ARROW_MSG_TENSOR = 4,
    QR_ARROW_MSG_SPARSE_TENSOR = 5,
};

/* ---- types and schemas -------------------------------------------------------------------------- */

/* Static name of a type ("int64", "fixed_size_list", ...). */
const char *qr_arrow_type_name(qr_arrow_type type);
/* Bytes per slot of a fixed-width type; 0 for utf8/binary/lists. */
size_t qr_arrow_type_width(qr_arrow_type type);

/* Empties *s (no allocation). */
void qr_arrow_schema_init(qr_arrow_schema *s);
/* Frees everything *s owns and empties it. */
void qr_arrow_schema_free(qr_arrow_schema *s);
/* Appends a field of a non-list type. On success *out (optional) points at the new field (valid until
 * the next add). */
qr_status qr_arrow_schema_add(qr_arrow_schema *s, const char *name, qr_arrow_type type, bool nullable,
                              qr_arrow_field **out);
/* Appends a FixedSizeList<child_type, list_size> field whose child is named "item" (nullable). */
qr_status qr_arrow_schema_add_list(qr_arrow_schema *s, const char *name, qr_arrow_type child_type,
                                   int32_t list_size, bool nullable, qr_arrow_field **out);
/* Appends a schema-level metadata pair (copied). */
qr_status qr_arrow_schema_add_meta(qr_arrow_schema *s, const char *key, const char *value);
/* Appends a field-level metadata pair (copied). */
qr_status qr_arrow_field_add_meta(qr_arrow_field *f, const char *key, const char *value);
/* Deep copy of src into *dst (which is overwritten, not freed). */
qr_status qr_arrow_schema_copy(qr_arrow_schema *dst, const qr_arrow_schema *src);
/* Schema-level metadata value for `key`, or NULL. */
const char *qr_arrow_schema_meta(const qr_arrow_schema *s, const char *key);
/* Index of the field named `name`, or -1. */
int qr_arrow_schema_find(const qr_arrow_schema *s, const char *name);
/* True when both schemas have the same fields (names, types, list sizes, nullability; children
 * included). Metadata is compared too when with_metadata is true. */
bool qr_arrow_schema_equal(const qr_arrow_schema *a, const qr_arrow_schema *b, bool with_metadata);
/* Writes a one-line description such as "id: int64, vector: fixed_size_list<float32>[4]". */
void qr_arrow_schema_describe(const qr_arrow_schema *s, char *buf, size_t buf_len);

/* Checks that a caller-built batch matches the schema: column count, lengths, non-NULL buffers,
 * utf8/binary offsets (monotonic, inside the data), null counts vs. bitmaps. */
qr_status qr_arrow_batch_validate(const qr_arrow_schema *s, const qr_arrow_batch *b, char *err, size_t err_len);
/* Frees the storage of a decoded batch (no-op for caller-built batches) and empties it. */
void qr_arrow_batch_free(qr_arrow_batch *b);
/* True when slot i of the array is valid (not null). */
bool qr_arrow_array_is_valid(const qr_arrow_array *a, int64_t i);

/* ---- encoding ----------------------------------------------------------------------------------- */

/* Encodes a Schema message (metadata only, empty body). */
qr_status qr_arrow_encode_schema(const qr_arrow_schema *s, qr_arrow_message *out, char *err, size_t err_len);
/* Encodes a RecordBatch message for `b` (validated against `s` first). */
qr_status qr_arrow_encode_batch(const qr_arrow_schema *s, const qr_arrow_batch *b, qr_arrow_message *out,
                                char *err, size_t err_len);
/* Encodes only the metadata of a RecordBatch message: out->body stays NULL and out->body_len is the
 * body size; write the body with qr_arrow_write_body (e.g. straight into a network buffer). */
qr_status qr_arrow_encode_batch_header(const qr_arrow_schema *s, const qr_arrow_batch *b, qr_arrow_message *out,
                                       char *err, size_t err_len);
/* Writes the body of batch b into dst[0, dst_len), where dst_len is the body_len that
 * qr_arrow_encode_batch_header reported for the same batch. */
qr_status qr_arrow_write_body(const qr_arrow_schema *s, const qr_arrow_batch *b, uint8_t *dst, size_t dst_len,
                              char *err, size_t err_len);
/* Frees an encoded message and empties it. */
void qr_arrow_message_free(qr_arrow_message *m);
/* Size in bytes of the encapsulated form of m (prefix + metadata + body). */
size_t qr_arrow_message_framed_size(const qr_arrow_message *m);
/* Writes the encapsulated form of m into dst[0, qr_arrow_message_framed_size(m)). */
void qr_arrow_message_frame(const qr_arrow_message *m, uint8_t *dst);
/* The 8-byte end-of-stream marker (continuation + zero length). */
extern const uint8_t qr_arrow_eos[8];

/* ---- decoding ----------------------------------------------------------------------------------- */

/* Reads the header of a flatbuffer Message: its kind (QR_ARROW_MSG_*) and declared body length. */
qr_status qr_arrow_message_peek(const uint8_t *meta, size_t meta_len, int *kind, int64_t *body_len, char *err,
                                size_t err_len);
/* Decodes a Schema message into *out (owned; free with qr_arrow_schema_free). */
qr_status qr_arrow_decode_schema(const uint8_t *meta, size_t meta_len, qr_arrow_schema *out, char *err,
                                 size_t err_len);
/* Decodes a RecordBatch message whose columns follow `s`. The arrays point into `body` when it is
 * 8-byte aligned (keep it alive while *out is used), else into an owned aligned copy.
 * Free with qr_arrow_batch_free. */
qr_status qr_arrow_decode_batch(const qr_arrow_schema *s, const uint8_t *meta, size_t meta_len, const uint8_t *body,
                                size_t body_len, qr_arrow_batch *out, char *err, size_t err_len);

/* Splits one encapsulated message off the front of buf[0, len). On success *consumed is the number of
 * bytes it took and *meta and *body point into buf; an end-of-stream marker (or clean end of input) gives
 * *meta == NULL. Accepts the legacy form without the continuation marker. */
qr_status qr_arrow_next_message(const uint8_t *buf, size_t len, size_t *consumed, const uint8_t **meta,
                                size_t *meta_len, const uint8_t **body, size_t *body_len, char *err,
                                size_t err_len);

#endif /* QR_FLIGHT_ARROW_IPC_H */
