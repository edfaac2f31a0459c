/* arrow_ipc_write.c — Arrow IPC encoder: Schema and RecordBatch messages (flatbuffer + body). */
#include <stdlib.h>
#include <string.h>

#include "arrow_internal.h"
#include "flatbuf.h"
#include "util/util.h"

const uint8_t qr_arrow_eos[8] = {0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0};

/* Field indices of the tables we write (Schema.fbs / Message.fbs). */
enum { MSG_VERSION = 0, MSG_HEADER_TYPE = 1, MSG_HEADER = 2, MSG_BODY_LENGTH = 3 };
enum { SCHEMA_ENDIANNESS = 0, SCHEMA_FIELDS = 1, SCHEMA_METADATA = 2 };
enum { FIELD_NAME = 0, FIELD_NULLABLE = 1, FIELD_TYPE_TYPE = 2, FIELD_TYPE = 3, FIELD_CHILDREN = 5,
       FIELD_METADATA = 6 };
enum { RB_LENGTH = 0, RB_NODES = 1, RB_BUFFERS = 2 };

void qr_arrow_message_free(qr_arrow_message *m) {
    if (!m) return;
    free(m->metadata);
    free(m->body);
    memset(m, 0, sizeof(*m));
}

size_t qr_arrow_message_framed_size(const qr_arrow_message *m) { return 8 + m->metadata_len + m->body_len; }

void qr_arrow_message_frame(const qr_arrow_message *m, uint8_t *dst) {
    uint32_t cont = QR_ARROW_CONTINUATION;
    int32_t len = (int32_t)m->metadata_len;
    memcpy(dst, &cont, 4);
    memcpy(dst + 4, &len, 4);
    if (m->metadata_len) memcpy(dst + 8, m->metadata, m->metadata_len);
    if (m->body_len) memcpy(dst + 8 + m->metadata_len, m->body, m->body_len);
}

/* Writes a vector of KeyValue tables; returns 0 (no field) when n == 0. */
static qr_fb_ref write_kvs(qr_fb_builder *b, const qr_arrow_kv *kv, size_t n) {
    if (n == 0) return 0;
    qr_fb_ref *refs = malloc(n * sizeof(*refs));
    if (!refs) {
        b->failed = b->nomem = true;
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        qr_fb_ref k = qr_fb_string(b, kv[i].key, kv[i].key_len);
        qr_fb_ref v = qr_fb_string(b, kv[i].value, kv[i].value_len);
        qr_fb_table_start(b);
        qr_fb_add_ref(b, 0, k);
        qr_fb_add_ref(b, 1, v);
        refs[i] = qr_fb_table_end(b);
    }
    qr_fb_ref vec = qr_fb_vector_refs(b, refs, n);
    free(refs);
    return vec;
}

/* Writes the type table of a field; *tag receives the Type union tag. */
static qr_fb_ref write_type(qr_fb_builder *b, const qr_arrow_field *f, uint8_t *tag) {
    qr_fb_table_start(b);
    switch (f->type) {
    case QR_ARROW_INT8:
    case QR_ARROW_INT16:
    case QR_ARROW_INT32:
    case QR_ARROW_INT64:
    case QR_ARROW_UINT8:
    case QR_ARROW_UINT16:
    case QR_ARROW_UINT32:
    case QR_ARROW_UINT64:
        *tag = QR_FB_TYPE_INT;
        qr_fb_add_scalar(b, 0, (uint64_t)(8 * qr_arrow_type_width(f->type)), 4);      /* bitWidth */
        qr_fb_add_scalar(b, 1, f->type >= QR_ARROW_INT8 && f->type <= QR_ARROW_INT64, 1); /* is_signed */
        break;
    case QR_ARROW_FLOAT16:
    case QR_ARROW_FLOAT32:
    case QR_ARROW_FLOAT64:
        *tag = QR_FB_TYPE_FLOATING_POINT;
        qr_fb_add_scalar(b, 0, (uint64_t)(f->type - QR_ARROW_FLOAT16), 2); /* precision: HALF, SINGLE, DOUBLE */
        break;
    case QR_ARROW_UTF8: *tag = QR_FB_TYPE_UTF8; break;
    case QR_ARROW_BINARY: *tag = QR_FB_TYPE_BINARY; break;
    case QR_ARROW_FIXED_SIZE_LIST:
        *tag = QR_FB_TYPE_FIXED_SIZE_LIST;
        qr_fb_add_scalar(b, 0, (uint32_t)f->list_size, 4); /* listSize */
        break;
    }
    return qr_fb_table_end(b);
}

/* Writes a Field table (children first). */
static qr_fb_ref write_field(qr_fb_builder *b, const qr_arrow_field *f, int depth) {
    if (depth > QR_ARROW_MAX_DEPTH) {
        b->failed = true;
        return 0;
    }
    qr_fb_ref child = 0;
    size_t n_children = 0;
    if (f->type == QR_ARROW_FIXED_SIZE_LIST) {
        if (!f->child) {
            b->failed = true;
            return 0;
        }
        child = write_field(b, f->child, depth + 1);
        n_children = 1;
    }
    qr_fb_ref children = qr_fb_vector_refs(b, &child, n_children);
    qr_fb_ref name = qr_fb_string(b, f->name, strlen(f->name));
    qr_fb_ref meta = write_kvs(b, f->metadata, f->n_metadata);
    uint8_t tag = 0;
    qr_fb_ref type = write_type(b, f, &tag);
    qr_fb_table_start(b);
    qr_fb_add_ref(b, FIELD_NAME, name);
    qr_fb_add_scalar(b, FIELD_NULLABLE, f->nullable, 1);
    qr_fb_add_scalar(b, FIELD_TYPE_TYPE, tag, 1);
    qr_fb_add_ref(b, FIELD_TYPE, type);
    qr_fb_add_ref(b, FIELD_CHILDREN, children);
    if (meta) qr_fb_add_ref(b, FIELD_METADATA, meta);
    return qr_fb_table_end(b);
}

/* Wraps `header` (of union tag `kind`) in a Message, finishes the buffer and copies it to out. */
static qr_status finish_message(qr_fb_builder *b, uint8_t kind, qr_fb_ref header, int64_t body_len,
                                qr_arrow_message *out, char *err, size_t err_len) {
    qr_fb_table_start(b);
    qr_fb_add_scalar(b, MSG_VERSION, QR_ARROW_METADATA_V5, 2);
    qr_fb_add_scalar(b, MSG_HEADER_TYPE, kind, 1);
    qr_fb_add_ref(b, MSG_HEADER, header);
    qr_fb_add_scalar(b, MSG_BODY_LENGTH, (uint64_t)body_len, 8);
    qr_fb_ref msg = qr_fb_table_end(b);
    const uint8_t *data = NULL;
    size_t len = 0;
    qr_status st = qr_fb_finish(b, msg, &data, &len);
    if (st != QR_OK)
        return qr_errf(err, err_len, st, "arrow: building the message flatbuffer failed (%s)", qr_status_str(st));
    out->metadata = malloc(qr_arrow_pad8(len));
    if (!out->metadata) return qr_errf(err, err_len, QR_ERR_NOMEM, "arrow: out of memory");
    memcpy(out->metadata, data, len);
    memset(out->metadata + len, 0, qr_arrow_pad8(len) - len);
    out->metadata_len = qr_arrow_pad8(len);
    return QR_OK;
}

/* Checks that every field can be encoded (types known, lists well-formed, depth bounded). */
static qr_status check_field(const qr_arrow_field *f, int depth, char *err, size_t err_len) {
    if (depth > QR_ARROW_MAX_DEPTH)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "arrow: field '%s' nested too deeply", f->name);
    if (!f->name) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "arrow: field without a name");
    if (f->type < QR_ARROW_INT8 || f->type > QR_ARROW_FIXED_SIZE_LIST)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "arrow: field '%s' has unknown type %d", f->name,
                       (int)f->type);
    if (f->type == QR_ARROW_FIXED_SIZE_LIST) {
        if (!f->child || f->list_size < 1)
            return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "arrow: list field '%s' needs a child and size >= 1",
                           f->name);
        return check_field(f->child, depth + 1, err, err_len);
    }
    if (f->child) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "arrow: field '%s' cannot have a child", f->name);
    return QR_OK;
}

qr_status qr_arrow_encode_schema(const qr_arrow_schema *s, qr_arrow_message *out, char *err, size_t err_len) {
    memset(out, 0, sizeof(*out));
    for (size_t i = 0; i < s->n_fields; i++) {
        qr_status st = check_field(&s->fields[i], 1, err, err_len);
        if (st != QR_OK) return st;
    }
    qr_fb_builder b;
    qr_fb_init(&b);
    qr_fb_ref *refs = malloc((s->n_fields ? s->n_fields : 1) * sizeof(*refs));
    if (!refs) return qr_errf(err, err_len, QR_ERR_NOMEM, "arrow: out of memory");
    for (size_t i = 0; i < s->n_fields; i++) refs[i] = write_field(&b, &s->fields[i], 1);
    qr_fb_ref fields = qr_fb_vector_refs(&b, refs, s->n_fields);
    free(refs);
    qr_fb_ref meta = write_kvs(&b, s->metadata, s->n_metadata);
    qr_fb_table_start(&b);
    qr_fb_add_scalar(&b, SCHEMA_ENDIANNESS, 0, 2); /* Little */
    qr_fb_add_ref(&b, SCHEMA_FIELDS, fields);
    if (meta) qr_fb_add_ref(&b, SCHEMA_METADATA, meta);
    qr_fb_ref schema = qr_fb_table_end(&b);
    qr_status st = finish_message(&b, QR_ARROW_MSG_SCHEMA, schema, 0, out, err, err_len);
    qr_fb_free(&b);
    return st;
}

/* ---- record batches ------------------------------------------------------------------------------ */

typedef struct fieldnode_wire {
    int64_t length;
    int64_t null_count;
} fieldnode_wire;

typedef struct buffer_wire {
    int64_t offset;
    int64_t length;
} buffer_wire;

/* One buffer to copy into the body. */
typedef struct body_part {
    const void *src; /* NULL = write `length` zero bytes (e.g. the offsets of an empty array) */
    size_t length;
} body_part;

typedef struct batch_plan {
    fieldnode_wire *nodes;
    size_t n_nodes, cap_nodes;
    buffer_wire *buffers;
    body_part *parts; /* [n_buffers], parallel to buffers */
    size_t n_buffers, cap_buffers;
    size_t body_len; /* running padded size */
    bool nomem;
} batch_plan;

static void plan_node(batch_plan *p, int64_t length, int64_t null_count) {
    if (p->n_nodes == p->cap_nodes) {
        size_t cap = p->cap_nodes ? 2 * p->cap_nodes : 16;
        fieldnode_wire *n = realloc(p->nodes, cap * sizeof(*n));
        if (!n) {
            p->nomem = true;
            return;
        }
        p->nodes = n;
        p->cap_nodes = cap;
    }
    p->nodes[p->n_nodes++] = (fieldnode_wire){length, null_count};
}

static void plan_buffer(batch_plan *p, const void *src, size_t length) {
    if (p->n_buffers == p->cap_buffers) {
        size_t cap = p->cap_buffers ? 2 * p->cap_buffers : 16;
        buffer_wire *b = realloc(p->buffers, cap * sizeof(*b));
        if (b) p->buffers = b;
        body_part *q = b ? realloc(p->parts, cap * sizeof(*q)) : NULL;
        if (!b || !q) {
            p->nomem = true;
            return;
        }
        p->parts = q;
        p->cap_buffers = cap;
    }
    p->buffers[p->n_buffers] = (buffer_wire){(int64_t)p->body_len, (int64_t)length};
    p->parts[p->n_buffers] = (body_part){src, length};
    p->n_buffers++;
    p->body_len += qr_arrow_pad8(length);
}

static const int32_t zero_offset = 0;

/* Appends the nodes and buffers of one (validated) array, pre-order. */
static void plan_array(batch_plan *p, const qr_arrow_field *f, const qr_arrow_array *a) {
    plan_node(p, a->length, a->null_count);
    if (a->null_count > 0)
        plan_buffer(p, a->validity, (size_t)((a->length + 7) / 8));
    else
        plan_buffer(p, NULL, 0);
    size_t width = qr_arrow_type_width(f->type);
    if (width) {
        plan_buffer(p, a->values, (size_t)a->length * width);
    } else if (f->type == QR_ARROW_UTF8 || f->type == QR_ARROW_BINARY) {
        if (!a->offsets) { /* empty array without offsets: write the single 0 offset */
            plan_buffer(p, &zero_offset, 4);
            plan_buffer(p, NULL, 0);
        } else {
            plan_buffer(p, a->offsets, (size_t)(a->length + 1) * 4);
            plan_buffer(p, a->values, (size_t)a->offsets[a->length]);
        }
    } else if (f->type == QR_ARROW_FIXED_SIZE_LIST) {
        plan_array(p, f->child, a->child);
    }
}

/* Validates the batch and builds its plan (nodes, buffers, body layout). */
static qr_status plan_batch(const qr_arrow_schema *s, const qr_arrow_batch *b, batch_plan *p, char *err,
                            size_t err_len) {
    memset(p, 0, sizeof(*p));
    for (size_t i = 0; i < s->n_fields; i++) {
        qr_status st = check_field(&s->fields[i], 1, err, err_len);
        if (st != QR_OK) return st;
    }
    qr_status st = qr_arrow_batch_validate(s, b, err, err_len);
    if (st != QR_OK) return st;
    for (size_t i = 0; i < s->n_fields; i++) plan_array(p, &s->fields[i], &b->columns[i]);
    if (p->nomem) return qr_errf(err, err_len, QR_ERR_NOMEM, "arrow: out of memory");
    return QR_OK;
}

static void plan_free(batch_plan *p) {
    free(p->nodes);
    free(p->buffers);
    free(p->parts);
    memset(p, 0, sizeof(*p));
}

/* Copies the planned buffers (zero padding included) into dst[0, p->body_len). */
static void plan_write_body(const batch_plan *p, uint8_t *dst) {
    for (size_t i = 0; i < p->n_buffers; i++) {
        uint8_t *d = dst + p->buffers[i].offset;
        size_t n = p->parts[i].length, padded = qr_arrow_pad8(n);
        if (p->parts[i].src && n)
            memcpy(d, p->parts[i].src, n);
        else if (n)
            memset(d, 0, n);
        if (padded > n) memset(d + n, 0, padded - n);
    }
}

qr_status qr_arrow_encode_batch_header(const qr_arrow_schema *s, const qr_arrow_batch *b, qr_arrow_message *out,
                                       char *err, size_t err_len) {
    memset(out, 0, sizeof(*out));
    batch_plan p;
    qr_status st = plan_batch(s, b, &p, err, err_len);
    if (st != QR_OK) {
        plan_free(&p);
        return st;
    }
    qr_fb_builder fb;
    qr_fb_init(&fb);
    qr_fb_ref buffers = qr_fb_vector(&fb, p.buffers, p.n_buffers, sizeof(buffer_wire), 8);
    qr_fb_ref nodes = qr_fb_vector(&fb, p.nodes, p.n_nodes, sizeof(fieldnode_wire), 8);
    qr_fb_table_start(&fb);
    qr_fb_add_scalar(&fb, RB_LENGTH, (uint64_t)b->length, 8);
    qr_fb_add_ref(&fb, RB_NODES, nodes);
    qr_fb_add_ref(&fb, RB_BUFFERS, buffers);
    qr_fb_ref rb = qr_fb_table_end(&fb);
    st = finish_message(&fb, QR_ARROW_MSG_RECORD_BATCH, rb, (int64_t)p.body_len, out, err, err_len);
    if (st == QR_OK) out->body_len = p.body_len;
    qr_fb_free(&fb);
    plan_free(&p);
    if (st != QR_OK) qr_arrow_message_free(out);
    return st;
}

qr_status qr_arrow_write_body(const qr_arrow_schema *s, const qr_arrow_batch *b, uint8_t *dst, size_t dst_len,
                              char *err, size_t err_len) {
    batch_plan p;
    qr_status st = plan_batch(s, b, &p, err, err_len);
    if (st == QR_OK && p.body_len != dst_len)
        st = qr_errf(err, err_len, QR_ERR_INVALID_ARG, "arrow: body is %zu bytes, destination %zu", p.body_len,
                     dst_len);
    if (st == QR_OK) plan_write_body(&p, dst);
    plan_free(&p);
    return st;
}

qr_status qr_arrow_encode_batch(const qr_arrow_schema *s, const qr_arrow_batch *b, qr_arrow_message *out,
                                char *err, size_t err_len) {
    qr_status st = qr_arrow_encode_batch_header(s, b, out, err, err_len);
    if (st != QR_OK || out->body_len == 0) return st;
    out->body = malloc(out->body_len);
    if (!out->body) {
        qr_arrow_message_free(out);
        return qr_errf(err, err_len, QR_ERR_NOMEM, "arrow: out of memory for the body");
    }
    st = qr_arrow_write_body(s, b, out->body, out->body_len, err, err_len);
    if (st != QR_OK) qr_arrow_message_free(out);
    return st;
}
