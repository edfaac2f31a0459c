/* arrow_ipc_read.c — Arrow IPC decoder: message framing, Schema and RecordBatch messages.
 * Every count, offset and length is checked against the bytes given before it is used. */
#include <stdlib.h>
#include <string.h>

#include "arrow_internal.h"
#include "flatbuf.h"
#include "util/util.h"

enum { MSG_VERSION = 0, MSG_HEADER_TYPE = 1, MSG_HEADER = 2, MSG_BODY_LENGTH = 3 };
enum { SCHEMA_ENDIANNESS = 0, SCHEMA_FIELDS = 1, SCHEMA_METADATA = 2 };
enum { FIELD_NAME = 0, FIELD_NULLABLE = 1, FIELD_TYPE_TYPE = 2, FIELD_TYPE = 3, FIELD_DICTIONARY = 4,
       FIELD_CHILDREN = 5, FIELD_METADATA = 6 };
enum { RB_LENGTH = 0, RB_NODES = 1, RB_BUFFERS = 2, RB_COMPRESSION = 3 };

/* Opens the Message table and its header; checks version and body length. */
static qr_status open_message(const uint8_t *meta, size_t meta_len, int *kind, int64_t *body_len,
                              qr_fb_table *header, bool *has_header, char *err, size_t err_len) {
    qr_fb_table msg;
    qr_status st = qr_fb_root(meta, meta_len, &msg, err, err_len);
    if (st != QR_OK) return st;
    int64_t version = 0, tag = 0;
    if ((st = qr_fb_scalar(&msg, MSG_VERSION, 2, true, 0, &version, "Message.version", err, err_len)) ||
        (st = qr_fb_scalar(&msg, MSG_HEADER_TYPE, 1, false, 0, &tag, "Message.header_type", err, err_len)) ||
        (st = qr_fb_scalar(&msg, MSG_BODY_LENGTH, 8, true, 0, body_len, "Message.bodyLength", err, err_len)))
        return st;
    if (version < QR_ARROW_METADATA_V4 || version > QR_ARROW_METADATA_V5)
        return qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "arrow: metadata version V%lld is not supported (V4/V5 are)",
                       (long long)version + 1);
    if (*body_len < 0) return qr_errf(err, err_len, QR_ERR_FORMAT, "arrow: negative body length");
    *kind = (int)tag;
    return qr_fb_subtable(&msg, MSG_HEADER, header, has_header, "Message.header", err, err_len);
}

qr_status qr_arrow_message_peek(const uint8_t *meta, size_t meta_len, int *kind, int64_t *body_len, char *err,
                                size_t err_len) {
    qr_fb_table header;
    bool has_header = false;
    return open_message(meta, meta_len, kind, body_len, &header, &has_header, err, err_len);
}

/* Reads a vector of KeyValue tables into an owned list. */
static qr_status read_kvs(const qr_fb_table *t, int field, qr_arrow_kv **kv, size_t *n, const char *what, char *err,
                          size_t err_len) {
    qr_fb_vec v;
    bool present = false;
    qr_status st = qr_fb_vector_field(t, field, 4, &v, &present, what, err, err_len);
    if (st != QR_OK || !present) return st;
    for (size_t i = 0; i < v.n; i++) {
        qr_fb_table e;
        const char *k, *val;
        size_t kn, vn;
        bool kp, vp;
        if ((st = qr_fb_vec_table(&v, i, &e, what, err, err_len)) ||
            (st = qr_fb_str(&e, 0, &k, &kn, &kp, "KeyValue.key", err, err_len)) ||
            (st = qr_fb_str(&e, 1, &val, &vn, &vp, "KeyValue.value", err, err_len)))
            return st;
        if (qr_arrow_kv_append(kv, n, k, kn, val, vn) != QR_OK)
            return qr_errf(err, err_len, QR_ERR_NOMEM, "arrow: out of memory");
    }
    return QR_OK;
}

/* Decodes the type of a field from its Type union. */
static qr_status read_type(const qr_fb_table *ft, qr_arrow_field *out, char *err, size_t err_len) {
    int64_t tag = 0;
    qr_status st = qr_fb_scalar(ft, FIELD_TYPE_TYPE, 1, false, 0, &tag, "Field.type_type", err, err_len);
    if (st != QR_OK) return st;
    qr_fb_table tt;
    bool present = false;
    if ((st = qr_fb_subtable(ft, FIELD_TYPE, &tt, &present, "Field.type", err, err_len))) return st;
    if (!present && tag != QR_FB_TYPE_UTF8 && tag != QR_FB_TYPE_BINARY)
        return qr_errf(err, err_len, QR_ERR_FORMAT, "arrow: field '%s' has no type table", out->name);
    switch (tag) {
    case QR_FB_TYPE_INT: {
        int64_t bits = 0, is_signed = 0;
        if ((st = qr_fb_scalar(&tt, 0, 4, true, 0, &bits, "Int.bitWidth", err, err_len)) ||
            (st = qr_fb_scalar(&tt, 1, 1, false, 0, &is_signed, "Int.is_signed", err, err_len)))
            return st;
        int k = bits == 8 ? 0 : bits == 16 ? 1 : bits == 32 ? 2 : bits == 64 ? 3 : -1;
        if (k < 0)
            return qr_errf(err, err_len, QR_ERR_FORMAT, "arrow: field '%s': bad integer width %lld", out->name,
                           (long long)bits);
        out->type = (qr_arrow_type)((is_signed ? QR_ARROW_INT8 : QR_ARROW_UINT8) + k);
        return QR_OK;
    }
    case QR_FB_TYPE_FLOATING_POINT: {
        int64_t precision = 0;
        if ((st = qr_fb_scalar(&tt, 0, 2, true, 0, &precision, "FloatingPoint.precision", err, err_len))) return st;
        if (precision < 0 || precision > 2)
            return qr_errf(err, err_len, QR_ERR_FORMAT, "arrow: field '%s': bad float precision %lld", out->name,
                           (long long)precision);
        out->type = (qr_arrow_type)(QR_ARROW_FLOAT16 + precision);
        return QR_OK;
    }
    case QR_FB_TYPE_UTF8: out->type = QR_ARROW_UTF8; return QR_OK;
    case QR_FB_TYPE_BINARY: out->type = QR_ARROW_BINARY; return QR_OK;
    case QR_FB_TYPE_FIXED_SIZE_LIST: {
        int64_t size = 0;
        if ((st = qr_fb_scalar(&tt, 0, 4, true, 0, &size, "FixedSizeList.listSize", err, err_len))) return st;
        if (size < 0)
            return qr_errf(err, err_len, QR_ERR_FORMAT, "arrow: field '%s': negative list size", out->name);
        if (size == 0)
            return qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "arrow: field '%s': empty fixed-size lists", out->name);
        out->type = QR_ARROW_FIXED_SIZE_LIST;
        out->list_size = (int32_t)size;
        return QR_OK;
    }
    case QR_FB_TYPE_NONE: return qr_errf(err, err_len, QR_ERR_FORMAT, "arrow: field '%s' has no type", out->name);
    default:
        return qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "arrow: field '%s' has unsupported type tag %lld",
                       out->name, (long long)tag);
    }
}

/* Decodes one Field table into a zeroed *out (recursively for its children). */
static qr_status read_field(const qr_fb_table *ft, qr_arrow_field *out, int depth, char *err, size_t err_len) {
    if (depth > QR_ARROW_MAX_DEPTH)
        return qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "arrow: fields nested deeper than %d levels",
                       QR_ARROW_MAX_DEPTH);
    const char *name;
    size_t name_len;
    bool present;
    qr_status st = qr_fb_str(ft, FIELD_NAME, &name, &name_len, &present, "Field.name", err, err_len);
    if (st != QR_OK) return st;
    if (!qr_arrow_utf8_valid((const uint8_t *)name, name_len) || memchr(name, 0, name_len))
        return qr_errf(err, err_len, QR_ERR_FORMAT, "arrow: a field name is not valid UTF-8");
    out->name = qr_arrow_strndup(name, name_len);
    if (!out->name) return qr_errf(err, err_len, QR_ERR_NOMEM, "arrow: out of memory");
    int64_t nullable = 0;
    if ((st = qr_fb_scalar(ft, FIELD_NULLABLE, 1, false, 0, &nullable, "Field.nullable", err, err_len))) return st;
    out->nullable = nullable != 0;
    if (qr_fb_has(ft, FIELD_DICTIONARY))
        return qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "arrow: field '%s' is dictionary-encoded", out->name);
    if ((st = read_type(ft, out, err, err_len))) return st;
    if ((st = read_kvs(ft, FIELD_METADATA, &out->metadata, &out->n_metadata, "Field.custom_metadata", err, err_len)))
        return st;
    qr_fb_vec children;
    if ((st = qr_fb_vector_field(ft, FIELD_CHILDREN, 4, &children, &present, "Field.children", err, err_len)))
        return st;
    size_t want = out->type == QR_ARROW_FIXED_SIZE_LIST ? 1 : 0;
    if (children.n != want)
        return qr_errf(err, err_len, QR_ERR_FORMAT, "arrow: field '%s' (%s) has %zu children, expected %zu",
                       out->name, qr_arrow_type_name(out->type), children.n, want);
    if (want) {
        qr_fb_table ct;
        if ((st = qr_fb_vec_table(&children, 0, &ct, "Field.children", err, err_len))) return st;
        out->child = calloc(1, sizeof(*out->child));
        if (!out->child) return qr_errf(err, err_len, QR_ERR_NOMEM, "arrow: out of memory");
        return read_field(&ct, out->child, depth + 1, err, err_len);
    }
    return QR_OK;
}

qr_status qr_arrow_decode_schema(const uint8_t *meta, size_t meta_len, qr_arrow_schema *out, char *err,
                                 size_t err_len) {
    qr_arrow_schema_init(out);
    int kind = 0;
    int64_t body_len = 0;
    qr_fb_table st_schema;
    bool present = false;
    qr_status st = open_message(meta, meta_len, &kind, &body_len, &st_schema, &present, err, err_len);
    if (st != QR_OK) return st;
    if (kind != QR_ARROW_MSG_SCHEMA || !present)
        return qr_errf(err, err_len, QR_ERR_FORMAT, "arrow: expected a Schema message, got message kind %d", kind);
    int64_t endianness = 0;
    if ((st = qr_fb_scalar(&st_schema, SCHEMA_ENDIANNESS, 2, true, 0, &endianness, "Schema.endianness", err,
                           err_len)))
        return st;
    if (endianness != 0) return qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "arrow: big-endian data is not supported");
    qr_fb_vec fields;
    if ((st = qr_fb_vector_field(&st_schema, SCHEMA_FIELDS, 4, &fields, &present, "Schema.fields", err, err_len)))
        return st;
    if (fields.n) {
        out->fields = calloc(fields.n, sizeof(*out->fields));
        if (!out->fields) return qr_errf(err, err_len, QR_ERR_NOMEM, "arrow: out of memory");
    }
    for (size_t i = 0; i < fields.n && st == QR_OK; i++) {
        qr_fb_table ft;
        out->n_fields = i + 1;
        st = qr_fb_vec_table(&fields, i, &ft, "Schema.fields", err, err_len);
        if (st == QR_OK) st = read_field(&ft, &out->fields[i], 1, err, err_len);
    }
    if (st == QR_OK)
        st = read_kvs(&st_schema, SCHEMA_METADATA, &out->metadata, &out->n_metadata, "Schema.custom_metadata", err,
                      err_len);
    if (st != QR_OK) qr_arrow_schema_free(out);
    return st;
}

/* ---- record batches ----------------------------------------------------------------------------- */

typedef struct batch_reader {
    qr_fb_vec nodes, buffers;
    size_t next_node, next_buffer;
    const uint8_t *body;
    int64_t body_len;
    qr_arrow_array *arrays; /* [n_arrays] pre-order storage */
    size_t n_arrays, next_array;
    char *err;
    size_t err_len;
} batch_reader;

/* Number of arrays (= field nodes) of a field, children included. */
static size_t count_nodes(const qr_arrow_field *f) { return 1 + (f->child ? count_nodes(f->child) : 0); }
/* Number of buffers of a field, children included. */
static size_t count_buffers(const qr_arrow_field *f) {
    if (f->type == QR_ARROW_FIXED_SIZE_LIST) return 1 + (f->child ? count_buffers(f->child) : 0);
    if (f->type == QR_ARROW_UTF8 || f->type == QR_ARROW_BINARY) return 3;
    return 2;
}

/* Takes the next buffer; checks that it lies inside the body and that a non-empty buffer starts on an
 * `align`-byte boundary. An empty buffer gives a valid pointer to zero bytes (never NULL). */
static qr_status take_buffer(batch_reader *r, const char *name, size_t align, const uint8_t **data, int64_t *len) {
    size_t i = r->next_buffer++;
    int64_t off = qr_fb_vec_i64(&r->buffers, i, 0), n = qr_fb_vec_i64(&r->buffers, i, 1);
    if (off < 0 || n < 0 || off > r->body_len || n > r->body_len - off)
        return qr_errf(r->err, r->err_len, QR_ERR_FORMAT,
                       "arrow: column '%s': buffer %zu [%lld, +%lld) outside the %lld-byte body", name, i,
                       (long long)off, (long long)n, (long long)r->body_len);
    if (n > 0 && (off % (int64_t)align) != 0)
        return qr_errf(r->err, r->err_len, QR_ERR_FORMAT, "arrow: column '%s': buffer %zu offset %lld not %zu-aligned",
                       name, i, (long long)off, align);
    static const uint64_t empty[1] = {0}; /* an aligned stand-in for empty buffers */
    *data = n > 0 ? r->body + off : (const uint8_t *)(const void *)empty;
    *len = n;
    return QR_OK;
}

/* Decodes the array of field f (expected `length` slots) into *a, and its children (taken from the
 * storage after the top-level columns), pre-order. */
static qr_status read_array(batch_reader *r, const qr_arrow_field *f, int64_t length, qr_arrow_array *a) {
    size_t ni = r->next_node++;
    int64_t node_len = qr_fb_vec_i64(&r->nodes, ni, 0), nulls = qr_fb_vec_i64(&r->nodes, ni, 1);
    if (node_len != length)
        return qr_errf(r->err, r->err_len, QR_ERR_FORMAT, "arrow: column '%s': node length %lld, expected %lld",
                       f->name, (long long)node_len, (long long)length);
    if (nulls < 0 || nulls > length)
        return qr_errf(r->err, r->err_len, QR_ERR_FORMAT, "arrow: column '%s': null count %lld out of range",
                       f->name, (long long)nulls);
    if (nulls > 0 && !f->nullable)
        return qr_errf(r->err, r->err_len, QR_ERR_FORMAT, "arrow: column '%s' is not nullable but has %lld nulls",
                       f->name, (long long)nulls);
    a->length = length;
    a->null_count = nulls;
    const uint8_t *data;
    int64_t n;
    qr_status st = take_buffer(r, f->name, 1, &data, &n);
    if (st != QR_OK) return st;
    if (nulls > 0) {
        if (n < (length + 7) / 8)
            return qr_errf(r->err, r->err_len, QR_ERR_FORMAT, "arrow: column '%s': validity bitmap too short",
                           f->name);
        if (qr_arrow_count_nulls(data, length) != nulls)
            return qr_errf(r->err, r->err_len, QR_ERR_FORMAT,
                           "arrow: column '%s': null count %lld disagrees with the bitmap", f->name, (long long)nulls);
        a->validity = data;
    }
    size_t width = qr_arrow_type_width(f->type);
    if (width) {
        if ((st = take_buffer(r, f->name, width, &data, &n))) return st;
        if (length > INT64_MAX / (int64_t)width || n < length * (int64_t)width)
            return qr_errf(r->err, r->err_len, QR_ERR_FORMAT, "arrow: column '%s': values buffer too short (%lld bytes)",
                           f->name, (long long)n);
        a->values = data;
        return QR_OK;
    }
    if (f->type == QR_ARROW_UTF8 || f->type == QR_ARROW_BINARY) {
        const uint8_t *offs, *chars;
        int64_t n_offs, n_chars;
        if ((st = take_buffer(r, f->name, 4, &offs, &n_offs)) || (st = take_buffer(r, f->name, 1, &chars, &n_chars)))
            return st;
        if (length == 0 && n_offs == 0) return QR_OK;
        if (length > (INT64_MAX / 4) - 1 || n_offs < (length + 1) * 4)
            return qr_errf(r->err, r->err_len, QR_ERR_FORMAT, "arrow: column '%s': offsets buffer too short", f->name);
        const int32_t *o = (const int32_t *)(const void *)offs;
        if (o[0] < 0)
            return qr_errf(r->err, r->err_len, QR_ERR_FORMAT, "arrow: column '%s': negative offset", f->name);
        for (int64_t i = 0; i < length; i++)
            if (o[i + 1] < o[i])
                return qr_errf(r->err, r->err_len, QR_ERR_FORMAT, "arrow: column '%s': offsets decrease at row %lld",
                               f->name, (long long)i);
        if (o[length] > n_chars)
            return qr_errf(r->err, r->err_len, QR_ERR_FORMAT,
                           "arrow: column '%s': offset %d past the %lld-byte character data", f->name, o[length],
                           (long long)n_chars);
        if (f->type == QR_ARROW_UTF8)
            for (int64_t i = 0; i < length; i++)
                if (!qr_arrow_utf8_valid(chars + o[i], (size_t)(o[i + 1] - o[i])))
                    return qr_errf(r->err, r->err_len, QR_ERR_FORMAT, "arrow: column '%s': invalid UTF-8 in row %lld",
                                   f->name, (long long)i);
        a->offsets = o;
        a->values = chars;
        return QR_OK;
    }
    /* FIXED_SIZE_LIST */
    if (length > INT64_MAX / f->list_size)
        return qr_errf(r->err, r->err_len, QR_ERR_FORMAT, "arrow: column '%s': list values overflow", f->name);
    if (r->next_array >= r->n_arrays)
        return qr_errf(r->err, r->err_len, QR_ERR_INTERNAL, "arrow: array storage exhausted");
    qr_arrow_array *child = &r->arrays[r->next_array++];
    a->child = child;
    return read_array(r, f->child, length * f->list_size, child);
}

qr_status qr_arrow_decode_batch(const qr_arrow_schema *s, const uint8_t *meta, size_t meta_len, const uint8_t *body,
                                size_t body_len, qr_arrow_batch *out, char *err, size_t err_len) {
    memset(out, 0, sizeof(*out));
    int kind = 0;
    int64_t declared = 0;
    qr_fb_table rb;
    bool present = false;
    qr_status st = open_message(meta, meta_len, &kind, &declared, &rb, &present, err, err_len);
    if (st != QR_OK) return st;
    if (kind != QR_ARROW_MSG_RECORD_BATCH || !present)
        return qr_errf(err, err_len, kind == QR_ARROW_MSG_DICTIONARY_BATCH ? QR_ERR_UNSUPPORTED : QR_ERR_FORMAT,
                       "arrow: expected a RecordBatch message, got message kind %d", kind);
    if ((uint64_t)declared > body_len)
        return qr_errf(err, err_len, QR_ERR_FORMAT, "arrow: body is %zu bytes, the message declares %lld", body_len,
                       (long long)declared);
    if (qr_fb_has(&rb, RB_COMPRESSION))
        return qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "arrow: compressed record batches are not supported");
    int64_t length = 0;
    if ((st = qr_fb_scalar(&rb, RB_LENGTH, 8, true, 0, &length, "RecordBatch.length", err, err_len))) return st;
    if (length < 0) return qr_errf(err, err_len, QR_ERR_FORMAT, "arrow: negative record batch length");
    if (length > INT32_MAX) /* the encoder's limit too (utf8 offsets are 32-bit) */
        return qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "arrow: record batch of %lld rows is too long",
                       (long long)length);

    batch_reader r = {0};
    r.err = err;
    r.err_len = err_len;
    if ((st = qr_fb_vector_field(&rb, RB_NODES, 16, &r.nodes, &present, "RecordBatch.nodes", err, err_len)) ||
        (st = qr_fb_vector_field(&rb, RB_BUFFERS, 16, &r.buffers, &present, "RecordBatch.buffers", err, err_len)))
        return st;
    size_t want_nodes = 0, want_buffers = 0;
    for (size_t i = 0; i < s->n_fields; i++) {
        want_nodes += count_nodes(&s->fields[i]);
        want_buffers += count_buffers(&s->fields[i]);
    }
    if (r.nodes.n != want_nodes || r.buffers.n != want_buffers)
        return qr_errf(err, err_len, QR_ERR_FORMAT,
                       "arrow: record batch has %zu nodes and %zu buffers; the schema needs %zu and %zu", r.nodes.n,
                       r.buffers.n, want_nodes, want_buffers);

    if (declared > 0 && ((uintptr_t)body & 7)) { /* keep typed access aligned */
        out->owned_body = malloc((size_t)declared);
        if (!out->owned_body) return qr_errf(err, err_len, QR_ERR_NOMEM, "arrow: out of memory");
        memcpy(out->owned_body, body, (size_t)declared);
        body = out->owned_body;
    }
    r.body = body;
    r.body_len = declared;
    r.n_arrays = want_nodes;
    r.arrays = calloc(want_nodes ? want_nodes : 1, sizeof(*r.arrays));
    out->owned_arrays = r.arrays;
    if (!r.arrays) {
        qr_arrow_batch_free(out);
        return qr_errf(err, err_len, QR_ERR_NOMEM, "arrow: out of memory");
    }
    /* top-level arrays first (columns[] is contiguous), children after them */
    r.next_array = s->n_fields;
    for (size_t i = 0; i < s->n_fields && st == QR_OK; i++) st = read_array(&r, &s->fields[i], length, &r.arrays[i]);
    if (st == QR_OK) {
        out->columns = r.arrays;
        out->n_columns = s->n_fields;
        out->length = length;
    }
    if (st != QR_OK) qr_arrow_batch_free(out);
    return st;
}

qr_status qr_arrow_next_message(const uint8_t *buf, size_t len, size_t *consumed, const uint8_t **meta,
                                size_t *meta_len, const uint8_t **body, size_t *body_len, char *err,
                                size_t err_len) {
    *consumed = 0;
    *meta = NULL;
    *body = NULL;
    *meta_len = *body_len = 0;
    if (len == 0) return QR_OK;
    if (len < 4) return qr_errf(err, err_len, QR_ERR_FORMAT, "arrow: truncated message prefix (%zu bytes)", len);
    uint32_t first;
    memcpy(&first, buf, 4);
    size_t prefix = 4;
    int32_t mlen = (int32_t)first;
    if (first == QR_ARROW_CONTINUATION) {
        if (len < 8) return qr_errf(err, err_len, QR_ERR_FORMAT, "arrow: truncated message prefix (%zu bytes)", len);
        memcpy(&mlen, buf + 4, 4);
        prefix = 8;
    }
    if (mlen == 0) {
        *consumed = prefix;
        return QR_OK;
    }
    if (mlen < 0 || (size_t)mlen > len - prefix)
        return qr_errf(err, err_len, QR_ERR_FORMAT, "arrow: truncated message: metadata length %d exceeds the %zu bytes left",
                       (int)mlen, len - prefix);
    int kind = 0;
    int64_t blen = 0;
    qr_status st = qr_arrow_message_peek(buf + prefix, (size_t)mlen, &kind, &blen, err, err_len);
    if (st != QR_OK) return st;
    if ((uint64_t)blen > len - prefix - (size_t)mlen)
        return qr_errf(err, err_len, QR_ERR_FORMAT, "arrow: message body of %lld bytes is truncated", (long long)blen);
    *meta = buf + prefix;
    *meta_len = (size_t)mlen;
    *body = buf + prefix + (size_t)mlen;
    *body_len = (size_t)blen;
    *consumed = prefix + (size_t)mlen + (size_t)blen;
    return QR_OK;
}
