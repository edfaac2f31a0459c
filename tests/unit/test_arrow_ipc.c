/* test_arrow_ipc.c — flatbuffer builder/reader, Arrow IPC schema and record batch round trips, and the
 * decoder's validation of malformed messages (crafted with the flatbuffer builder). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "flight/arrow_ipc.h"
#include "flight/flatbuf.h"

/* ---- flatbuffers -------------------------------------------------------------------------------- */

static void test_flatbuf_roundtrip(void **state) {
    (void)state;
    qr_fb_builder b;
    qr_fb_init(&b);
    qr_fb_ref name = qr_fb_string(&b, "hello", 5);
    int64_t pairs[4] = {1, -2, 3, INT64_MIN};
    qr_fb_ref vec = qr_fb_vector(&b, pairs, 2, 16, 8);
    qr_fb_table_start(&b);
    qr_fb_add_scalar(&b, 0, 7, 4);
    qr_fb_ref inner = qr_fb_table_end(&b);
    qr_fb_ref tables = qr_fb_vector_refs(&b, &inner, 1);
    qr_fb_table_start(&b);
    qr_fb_add_scalar(&b, 0, (uint64_t)-3, 1);
    qr_fb_add_scalar(&b, 1, 0xBEEF, 2);
    qr_fb_add_ref(&b, 2, name);
    qr_fb_add_scalar(&b, 4, (uint64_t)INT64_MIN, 8);
    qr_fb_add_ref(&b, 5, vec);
    qr_fb_add_ref(&b, 6, tables);
    qr_fb_ref root = qr_fb_table_end(&b);
    const uint8_t *buf;
    size_t len;
    assert_int_equal(qr_fb_finish(&b, root, &buf, &len), QR_OK);
    assert_int_equal(len % 8, 0);
    uint8_t *copy = aligned_alloc(8, len);
    memcpy(copy, buf, len);

    char err[256];
    qr_fb_table t;
    assert_int_equal(qr_fb_root(copy, len, &t, err, sizeof err), QR_OK);
    int64_t v;
    assert_int_equal(qr_fb_scalar(&t, 0, 1, true, 0, &v, "f0", err, sizeof err), QR_OK);
    assert_int_equal(v, -3);
    assert_int_equal(qr_fb_scalar(&t, 1, 2, false, 0, &v, "f1", err, sizeof err), QR_OK);
    assert_int_equal(v, 0xBEEF);
    assert_int_equal(qr_fb_scalar(&t, 3, 4, true, 42, &v, "absent", err, sizeof err), QR_OK);
    assert_int_equal(v, 42);
    assert_false(qr_fb_has(&t, 3));
    assert_int_equal(qr_fb_scalar(&t, 9, 4, true, -1, &v, "past vtable", err, sizeof err), QR_OK);
    assert_int_equal(v, -1);
    assert_int_equal(qr_fb_scalar(&t, 4, 8, true, 0, &v, "f4", err, sizeof err), QR_OK);
    assert_true(v == INT64_MIN);
    const char *s;
    size_t n;
    bool present;
    assert_int_equal(qr_fb_str(&t, 2, &s, &n, &present, "name", err, sizeof err), QR_OK);
    assert_true(present);
    assert_int_equal(n, 5);
    assert_memory_equal(s, "hello", 5);
    qr_fb_vec fv;
    assert_int_equal(qr_fb_vector_field(&t, 5, 16, &fv, &present, "vec", err, sizeof err), QR_OK);
    assert_int_equal(fv.n, 2);
    assert_int_equal(fv.elems % 8, 0); /* 8-byte structs are 8-aligned */
    assert_int_equal(qr_fb_vec_i64(&fv, 0, 0), 1);
    assert_int_equal(qr_fb_vec_i64(&fv, 0, 1), -2);
    assert_true(qr_fb_vec_i64(&fv, 1, 1) == INT64_MIN);
    assert_int_equal(qr_fb_vector_field(&t, 6, 4, &fv, &present, "tables", err, sizeof err), QR_OK);
    qr_fb_table it;
    assert_int_equal(qr_fb_vec_table(&fv, 0, &it, "inner", err, sizeof err), QR_OK);
    assert_int_equal(qr_fb_scalar(&it, 0, 4, true, 0, &v, "inner.f0", err, sizeof err), QR_OK);
    assert_int_equal(v, 7);

    /* corruptions are reported, never read past the end */
    uint8_t *bad = malloc(len);
    memcpy(bad, copy, len);
    uint32_t huge = (uint32_t)len;
    memcpy(bad, &huge, 4); /* root offset at the end of the buffer */
    assert_int_equal(qr_fb_root(bad, len, &t, err, sizeof err), QR_ERR_FORMAT);
    assert_non_null(strstr(err, "root"));
    assert_int_equal(qr_fb_root(copy, 4, &t, err, sizeof err), QR_ERR_FORMAT);
    for (size_t cut = 8; cut < len; cut += 4) { /* every truncation either fails or stays in bounds */
        memcpy(bad, copy, cut);
        qr_fb_table tt;
        if (qr_fb_root(bad, cut, &tt, err, sizeof err) == QR_OK) {
            (void)qr_fb_str(&tt, 2, &s, &n, &present, "name", err, sizeof err);
            (void)qr_fb_vector_field(&tt, 5, 16, &fv, &present, "vec", err, sizeof err);
        }
    }
    free(bad);
    free(copy);
    qr_fb_free(&b);
}

/* ---- schemas and batches ------------------------------------------------------------------------- */

/* A schema with every supported type, schema metadata and field metadata. */
static void make_schema(qr_arrow_schema *s) {
    qr_arrow_schema_init(s);
    qr_arrow_field *f;
    assert_int_equal(qr_arrow_schema_add(s, "id", QR_ARROW_INT64, false, &f), QR_OK);
    assert_int_equal(qr_arrow_field_add_meta(f, "role", "primary key"), QR_OK);
    assert_int_equal(qr_arrow_schema_add(s, "u", QR_ARROW_UINT64, true, NULL), QR_OK);
    assert_int_equal(qr_arrow_schema_add(s, "f", QR_ARROW_FLOAT32, true, NULL), QR_OK);
    assert_int_equal(qr_arrow_schema_add(s, "text", QR_ARROW_UTF8, true, NULL), QR_OK);
    assert_int_equal(qr_arrow_schema_add_list(s, "vector", QR_ARROW_FLOAT32, 3, true, NULL), QR_OK);
    assert_int_equal(qr_arrow_schema_add(s, "i16", QR_ARROW_INT16, false, NULL), QR_OK);
    assert_int_equal(qr_arrow_schema_add(s, "bin", QR_ARROW_BINARY, false, NULL), QR_OK);
    assert_int_equal(qr_arrow_schema_add_meta(s, "longbow.metric", "cosine"), QR_OK);
    assert_int_equal(qr_arrow_schema_add_meta(s, "longbow.vector_type", "float32"), QR_OK);
}

static void test_schema_roundtrip(void **state) {
    (void)state;
    qr_arrow_schema s, d;
    make_schema(&s);
    qr_arrow_message m;
    char err[256];
    assert_int_equal(qr_arrow_encode_schema(&s, &m, err, sizeof err), QR_OK);
    assert_int_equal(m.metadata_len % 8, 0);
    assert_int_equal(m.body_len, 0);
    int kind;
    int64_t body_len;
    assert_int_equal(qr_arrow_message_peek(m.metadata, m.metadata_len, &kind, &body_len, err, sizeof err), QR_OK);
    assert_int_equal(kind, QR_ARROW_MSG_SCHEMA);
    assert_int_equal(qr_arrow_decode_schema(m.metadata, m.metadata_len, &d, err, sizeof err), QR_OK);
    assert_true(qr_arrow_schema_equal(&s, &d, true));
    assert_string_equal(qr_arrow_schema_meta(&d, "longbow.metric"), "cosine");
    assert_int_equal(qr_arrow_schema_find(&d, "vector"), 4);
    assert_int_equal(d.fields[4].list_size, 3);
    assert_string_equal(d.fields[4].child->name, "item");
    assert_string_equal(d.fields[0].metadata[0].value, "primary key");
    char desc[256];
    qr_arrow_schema_describe(&d, desc, sizeof desc);
    assert_non_null(strstr(desc, "vector: fixed_size_list<float32>[3]"));
    /* a copy compares equal; a change does not */
    qr_arrow_schema c;
    assert_int_equal(qr_arrow_schema_copy(&c, &d), QR_OK);
    assert_true(qr_arrow_schema_equal(&c, &s, true));
    c.fields[4].list_size = 4;
    assert_false(qr_arrow_schema_equal(&c, &s, false));
    qr_arrow_schema_free(&c);
    /* a batch message is not a schema */
    qr_arrow_schema_free(&d);
    qr_arrow_message_free(&m);
    qr_arrow_schema_free(&s);
}

/* Column data for make_batch: 5 rows, nulls in u (row 1), text (rows 2, 4) and vector (row 3). */
typedef struct sample {
    int64_t id[5];
    uint64_t u[5];
    float f[5];
    int32_t text_off[6];
    char text[64];
    float vec[15];
    int16_t i16[5];
    int32_t bin_off[6];
    uint8_t bin[16];
    uint8_t u_valid, text_valid, vec_valid;
    qr_arrow_array vec_child;
    qr_arrow_array cols[7];
    qr_arrow_batch batch;
} sample;

static void make_batch(sample *x) {
    memset(x, 0, sizeof(*x));
    const char *words[5] = {"alpha", "b\xc3\xa9ta", "", "delta", ""};
    for (int i = 0; i < 5; i++) {
        x->id[i] = (int64_t)i * 4000000000LL - 7;
        x->u[i] = UINT64_MAX - (uint64_t)i;
        x->f[i] = (float)i * -1.5f;
        size_t n = strlen(words[i]);
        memcpy(x->text + x->text_off[i], words[i], n);
        x->text_off[i + 1] = x->text_off[i] + (int32_t)n;
        for (int j = 0; j < 3; j++) x->vec[3 * i + j] = (float)(i * 10 + j) + 0.125f;
        x->i16[i] = (int16_t)(-300 * i);
        x->bin[2 * i] = 0;
        x->bin[2 * i + 1] = (uint8_t)(0xF0 + i);
        x->bin_off[i + 1] = 2 * (i + 1);
    }
    x->u_valid = 0x1F & ~(1u << 1);
    x->text_valid = 0x1F & ~(1u << 2) & ~(1u << 4);
    x->vec_valid = 0x1F & ~(1u << 3);
    x->vec_child = (qr_arrow_array){.length = 15, .values = x->vec};
    x->cols[0] = (qr_arrow_array){.length = 5, .values = x->id};
    x->cols[1] = (qr_arrow_array){.length = 5, .null_count = 1, .validity = &x->u_valid, .values = x->u};
    x->cols[2] = (qr_arrow_array){.length = 5, .values = x->f};
    x->cols[3] = (qr_arrow_array){.length = 5, .null_count = 2, .validity = &x->text_valid, .offsets = x->text_off,
                                  .values = x->text};
    x->cols[4] = (qr_arrow_array){.length = 5, .null_count = 1, .validity = &x->vec_valid, .child = &x->vec_child};
    x->cols[5] = (qr_arrow_array){.length = 5, .values = x->i16};
    x->cols[6] = (qr_arrow_array){.length = 5, .offsets = x->bin_off, .values = x->bin};
    x->batch = (qr_arrow_batch){.length = 5, .n_columns = 7, .columns = x->cols};
}

static void test_batch_roundtrip(void **state) {
    (void)state;
    qr_arrow_schema s;
    make_schema(&s);
    sample x;
    make_batch(&x);
    char err[256];
    qr_arrow_message m;
    assert_int_equal(qr_arrow_encode_batch(&s, &x.batch, &m, err, sizeof err), QR_OK);
    assert_int_equal(m.body_len % 8, 0);
    qr_arrow_batch d;
    assert_int_equal(qr_arrow_decode_batch(&s, m.metadata, m.metadata_len, m.body, m.body_len, &d, err, sizeof err),
                     QR_OK);
    assert_null(d.owned_body); /* malloc'ed body is aligned: zero-copy */
    assert_int_equal(d.length, 5);
    assert_int_equal(d.n_columns, 7);
    assert_memory_equal(d.columns[0].values, x.id, sizeof x.id);
    assert_null(d.columns[0].validity);
    assert_memory_equal(d.columns[1].values, x.u, sizeof x.u);
    assert_int_equal(d.columns[1].null_count, 1);
    assert_false(qr_arrow_array_is_valid(&d.columns[1], 1));
    assert_true(qr_arrow_array_is_valid(&d.columns[1], 2));
    assert_memory_equal(d.columns[2].values, x.f, sizeof x.f);
    assert_memory_equal(d.columns[3].offsets, x.text_off, sizeof x.text_off);
    assert_memory_equal(d.columns[3].values, x.text, (size_t)x.text_off[5]);
    assert_int_equal(d.columns[3].null_count, 2);
    assert_false(qr_arrow_array_is_valid(&d.columns[3], 4));
    assert_non_null(d.columns[4].child);
    assert_int_equal(d.columns[4].child->length, 15);
    assert_memory_equal(d.columns[4].child->values, x.vec, sizeof x.vec);
    assert_false(qr_arrow_array_is_valid(&d.columns[4], 3));
    assert_memory_equal(d.columns[5].values, x.i16, sizeof x.i16);
    assert_memory_equal(d.columns[6].values, x.bin, 10);
    /* the decoded batch re-encodes to the same bytes */
    qr_arrow_message m2;
    assert_int_equal(qr_arrow_encode_batch(&s, &d, &m2, err, sizeof err), QR_OK);
    assert_int_equal(m2.metadata_len, m.metadata_len);
    assert_memory_equal(m2.metadata, m.metadata, m.metadata_len);
    assert_int_equal(m2.body_len, m.body_len);
    assert_memory_equal(m2.body, m.body, m.body_len);
    qr_arrow_message_free(&m2);
    qr_arrow_batch_free(&d);

    /* a misaligned body is copied, and reads the same */
    uint8_t *odd = malloc(m.body_len + 1);
    memcpy(odd + 1, m.body, m.body_len);
    assert_int_equal(qr_arrow_decode_batch(&s, m.metadata, m.metadata_len, odd + 1, m.body_len, &d, err, sizeof err),
                     QR_OK);
    assert_non_null(d.owned_body);
    assert_memory_equal(d.columns[4].child->values, x.vec, sizeof x.vec);
    qr_arrow_batch_free(&d);
    free(odd);

    /* a truncated body is refused */
    assert_int_equal(qr_arrow_decode_batch(&s, m.metadata, m.metadata_len, m.body, m.body_len - 1, &d, err, sizeof err),
                     QR_ERR_FORMAT);
    assert_non_null(strstr(err, "body"));
    /* a schema that does not match is refused */
    qr_arrow_schema other;
    qr_arrow_schema_init(&other);
    qr_arrow_schema_add(&other, "id", QR_ARROW_INT64, false, NULL);
    assert_int_equal(qr_arrow_decode_batch(&other, m.metadata, m.metadata_len, m.body, m.body_len, &d, err, sizeof err),
                     QR_ERR_FORMAT);
    assert_non_null(strstr(err, "nodes"));
    qr_arrow_schema_free(&other);
    /* the schema message is not a record batch */
    qr_arrow_message sm;
    assert_int_equal(qr_arrow_encode_schema(&s, &sm, err, sizeof err), QR_OK);
    assert_int_equal(qr_arrow_decode_batch(&s, sm.metadata, sm.metadata_len, NULL, 0, &d, err, sizeof err),
                     QR_ERR_FORMAT);
    qr_arrow_message_free(&sm);
    qr_arrow_message_free(&m);
    qr_arrow_schema_free(&s);
}

/* Caller-built batches are validated before encoding. */
static void test_batch_validate(void **state) {
    (void)state;
    qr_arrow_schema s;
    make_schema(&s);
    sample x;
    char err[256];
    qr_arrow_message m;

    make_batch(&x);
    x.batch.n_columns = 6;
    assert_int_equal(qr_arrow_encode_batch(&s, &x.batch, &m, err, sizeof err), QR_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "columns"));

    make_batch(&x);
    x.cols[2].length = 4;
    assert_int_equal(qr_arrow_encode_batch(&s, &x.batch, &m, err, sizeof err), QR_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "'f'"));

    make_batch(&x);
    x.text_off[2] = x.text_off[1] - 1;
    assert_int_equal(qr_arrow_encode_batch(&s, &x.batch, &m, err, sizeof err), QR_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "decrease"));

    make_batch(&x);
    x.text[0] = (char)0xC3; /* starts a 2-byte sequence that "l" does not continue */
    assert_int_equal(qr_arrow_encode_batch(&s, &x.batch, &m, err, sizeof err), QR_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "UTF-8"));

    make_batch(&x);
    x.cols[1].null_count = 2; /* the bitmap has one null */
    assert_int_equal(qr_arrow_encode_batch(&s, &x.batch, &m, err, sizeof err), QR_ERR_INVALID_ARG);

    make_batch(&x);
    uint8_t id_valid = 0x1E;
    x.cols[0].validity = &id_valid; /* id is not nullable */
    x.cols[0].null_count = 1;
    assert_int_equal(qr_arrow_encode_batch(&s, &x.batch, &m, err, sizeof err), QR_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "not nullable"));

    make_batch(&x);
    x.vec_child.length = 14;
    assert_int_equal(qr_arrow_encode_batch(&s, &x.batch, &m, err, sizeof err), QR_ERR_INVALID_ARG);
    qr_arrow_schema_free(&s);
}

/* ---- crafted malformed messages ------------------------------------------------------------------ */

typedef struct craft {
    int64_t length;
    int64_t nodes[8][2];
    int n_nodes;
    int64_t buffers[8][2];
    int n_buffers;
    bool compression;
    int version;
} craft;

/* Builds a RecordBatch Message flatbuffer from raw nodes and buffers. Caller frees *out. */
static size_t craft_batch(const craft *c, uint8_t **out) {
    qr_fb_builder b;
    qr_fb_init(&b);
    qr_fb_ref comp = 0;
    if (c->compression) {
        qr_fb_table_start(&b);
        qr_fb_add_scalar(&b, 0, 1, 1); /* ZSTD */
        comp = qr_fb_table_end(&b);
    }
    qr_fb_ref bufs = qr_fb_vector(&b, c->buffers, (size_t)c->n_buffers, 16, 8);
    qr_fb_ref nodes = qr_fb_vector(&b, c->nodes, (size_t)c->n_nodes, 16, 8);
    qr_fb_table_start(&b);
    qr_fb_add_scalar(&b, 0, (uint64_t)c->length, 8);
    qr_fb_add_ref(&b, 1, nodes);
    qr_fb_add_ref(&b, 2, bufs);
    if (comp) qr_fb_add_ref(&b, 3, comp);
    qr_fb_ref rb = qr_fb_table_end(&b);
    qr_fb_table_start(&b);
    qr_fb_add_scalar(&b, 0, (uint64_t)(c->version ? c->version : 4), 2);
    qr_fb_add_scalar(&b, 1, QR_ARROW_MSG_RECORD_BATCH, 1);
    qr_fb_add_ref(&b, 2, rb);
    qr_fb_add_scalar(&b, 3, 64, 8); /* bodyLength */
    qr_fb_ref msg = qr_fb_table_end(&b);
    const uint8_t *p;
    size_t len;
    assert_int_equal(qr_fb_finish(&b, msg, &p, &len), QR_OK);
    *out = malloc(len);
    memcpy(*out, p, len);
    qr_fb_free(&b);
    return len;
}

/* Decodes a crafted batch against schema {s: utf8} with a 64-byte body; returns the status. */
static qr_status decode_crafted(const craft *c, const uint8_t *body, char *err, size_t err_len) {
    qr_arrow_schema s;
    qr_arrow_schema_init(&s);
    qr_arrow_schema_add(&s, "s", QR_ARROW_UTF8, true, NULL);
    uint8_t *meta;
    size_t len = craft_batch(c, &meta);
    qr_arrow_batch b;
    qr_status st = qr_arrow_decode_batch(&s, meta, len, body, 64, &b, err, err_len);
    if (st == QR_OK) qr_arrow_batch_free(&b);
    free(meta);
    qr_arrow_schema_free(&s);
    return st;
}

static void test_decode_crafted_batches(void **state) {
    (void)state;
    _Alignas(8) uint8_t body[64] = {0};
    int32_t offs[4] = {0, 2, 5, 7};
    memcpy(body, offs, sizeof offs);
    memcpy(body + 16, "abcdefg", 7);
    char err[256];
    /* the good one: 3 strings "ab", "cde", "fg" */
    craft ok = {.length = 3, .nodes = {{3, 0}}, .n_nodes = 1, .buffers = {{0, 0}, {0, 16}, {16, 7}}, .n_buffers = 3};
    assert_int_equal(decode_crafted(&ok, body, err, sizeof err), QR_OK);

    craft c = ok;
    c.buffers[2][0] = 60; /* data runs past the body */
    assert_int_equal(decode_crafted(&c, body, err, sizeof err), QR_ERR_FORMAT);
    assert_non_null(strstr(err, "outside"));

    c = ok;
    c.buffers[1][0] = -8;
    assert_int_equal(decode_crafted(&c, body, err, sizeof err), QR_ERR_FORMAT);

    c = ok;
    c.buffers[1][0] = 2; /* offsets not 4-aligned */
    assert_int_equal(decode_crafted(&c, body, err, sizeof err), QR_ERR_FORMAT);
    assert_non_null(strstr(err, "aligned"));

    c = ok;
    c.buffers[1][1] = 12; /* needs (3 + 1) * 4 bytes */
    assert_int_equal(decode_crafted(&c, body, err, sizeof err), QR_ERR_FORMAT);
    assert_non_null(strstr(err, "offsets"));

    c = ok;
    c.buffers[2][1] = 6; /* last offset 7 > 6 bytes of data */
    assert_int_equal(decode_crafted(&c, body, err, sizeof err), QR_ERR_FORMAT);

    c = ok;
    c.n_nodes = 2;
    c.nodes[1][0] = 3;
    assert_int_equal(decode_crafted(&c, body, err, sizeof err), QR_ERR_FORMAT);
    assert_non_null(strstr(err, "nodes"));

    c = ok;
    c.nodes[0][0] = 4; /* node length differs from the batch length */
    assert_int_equal(decode_crafted(&c, body, err, sizeof err), QR_ERR_FORMAT);

    c = ok;
    c.nodes[0][1] = 5; /* more nulls than slots */
    assert_int_equal(decode_crafted(&c, body, err, sizeof err), QR_ERR_FORMAT);

    c = ok;
    c.nodes[0][1] = 1; /* a null but no bitmap */
    assert_int_equal(decode_crafted(&c, body, err, sizeof err), QR_ERR_FORMAT);
    assert_non_null(strstr(err, "bitmap"));

    c = ok;
    c.length = c.nodes[0][0] = (int64_t)1 << 30; /* huge length with tiny buffers */
    assert_int_equal(decode_crafted(&c, body, err, sizeof err), QR_ERR_FORMAT);

    c = ok;
    c.length = c.nodes[0][0] = INT64_MAX / 2; /* past what 32-bit offsets can address */
    assert_int_equal(decode_crafted(&c, body, err, sizeof err), QR_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "too long"));

    c = ok;
    c.length = -1;
    assert_int_equal(decode_crafted(&c, body, err, sizeof err), QR_ERR_FORMAT);

    c = ok;
    c.compression = true;
    assert_int_equal(decode_crafted(&c, body, err, sizeof err), QR_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "compress"));

    c = ok;
    c.version = 2; /* V3 */
    assert_int_equal(decode_crafted(&c, body, err, sizeof err), QR_ERR_UNSUPPORTED);

    /* decreasing offsets and invalid UTF-8 */
    _Alignas(8) uint8_t bad[64];
    memcpy(bad, body, 64);
    int32_t dec[4] = {0, 3, 2, 7};
    memcpy(bad, dec, sizeof dec);
    assert_int_equal(decode_crafted(&ok, bad, err, sizeof err), QR_ERR_FORMAT);
    assert_non_null(strstr(err, "decrease"));
    memcpy(bad, body, 64);
    bad[16 + 3] = 0xFF;
    assert_int_equal(decode_crafted(&ok, bad, err, sizeof err), QR_ERR_FORMAT);
    assert_non_null(strstr(err, "UTF-8"));
}

/* Builds a Schema message with one field described by the arguments. */
typedef struct field_craft {
    int type_tag;
    int int_bits;      /* for Int */
    int list_size;     /* for FixedSizeList */
    int n_children;    /* children, each a float32 field (or nested lists when nest > 0) */
    int nest;          /* FixedSizeList nesting depth of the child chain */
    bool dictionary;
    int endianness;
} field_craft;

static qr_fb_ref craft_field(qr_fb_builder *b, const field_craft *f, int nest) {
    qr_fb_ref children[2] = {0, 0};
    int n_children = nest > 0 ? 1 : f->n_children;
    for (int i = 0; i < n_children; i++) {
        field_craft child = {.type_tag = 3};
        if (nest > 0) child = (field_craft){.type_tag = 16, .list_size = 2, .n_children = 1};
        children[i] = craft_field(b, &child, nest - 1);
    }
    qr_fb_ref kids = qr_fb_vector_refs(b, children, (size_t)n_children);
    qr_fb_ref name = qr_fb_string(b, "x", 1);
    qr_fb_ref dict = 0;
    if (f->dictionary) {
        qr_fb_table_start(b);
        qr_fb_add_scalar(b, 0, 1, 8);
        dict = qr_fb_table_end(b);
    }
    qr_fb_table_start(b);
    if (f->type_tag == 2) {
        qr_fb_add_scalar(b, 0, (uint64_t)f->int_bits, 4);
        qr_fb_add_scalar(b, 1, 1, 1);
    } else if (f->type_tag == 3) {
        qr_fb_add_scalar(b, 0, 1, 2);
    } else if (f->type_tag == 16) {
        qr_fb_add_scalar(b, 0, (uint64_t)(uint32_t)f->list_size, 4);
    }
    qr_fb_ref type = qr_fb_table_end(b);
    qr_fb_table_start(b);
    qr_fb_add_ref(b, 0, name);
    qr_fb_add_scalar(b, 1, 1, 1);
    qr_fb_add_scalar(b, 2, (uint64_t)f->type_tag, 1);
    qr_fb_add_ref(b, 3, type);
    if (dict) qr_fb_add_ref(b, 4, dict);
    qr_fb_add_ref(b, 5, kids);
    return qr_fb_table_end(b);
}

static qr_status decode_schema_craft(const field_craft *f, char *err, size_t err_len) {
    qr_fb_builder b;
    qr_fb_init(&b);
    qr_fb_ref field = craft_field(&b, f, f->nest);
    qr_fb_ref fields = qr_fb_vector_refs(&b, &field, 1);
    qr_fb_table_start(&b);
    qr_fb_add_scalar(&b, 0, (uint64_t)f->endianness, 2);
    qr_fb_add_ref(&b, 1, fields);
    qr_fb_ref schema = qr_fb_table_end(&b);
    qr_fb_table_start(&b);
    qr_fb_add_scalar(&b, 0, 4, 2);
    qr_fb_add_scalar(&b, 1, QR_ARROW_MSG_SCHEMA, 1);
    qr_fb_add_ref(&b, 2, schema);
    qr_fb_ref msg = qr_fb_table_end(&b);
    const uint8_t *p;
    size_t len;
    assert_int_equal(qr_fb_finish(&b, msg, &p, &len), QR_OK);
    uint8_t *copy = malloc(len);
    memcpy(copy, p, len);
    qr_fb_free(&b);
    qr_arrow_schema s;
    qr_status st = qr_arrow_decode_schema(copy, len, &s, err, err_len);
    if (st == QR_OK) qr_arrow_schema_free(&s);
    free(copy);
    return st;
}

static void test_decode_crafted_schemas(void **state) {
    (void)state;
    char err[256];
    assert_int_equal(decode_schema_craft(&(field_craft){.type_tag = 2, .int_bits = 32}, err, sizeof err), QR_OK);
    assert_int_equal(decode_schema_craft(&(field_craft){.type_tag = 2, .int_bits = 7}, err, sizeof err), QR_ERR_FORMAT);
    assert_non_null(strstr(err, "width"));
    assert_int_equal(decode_schema_craft(&(field_craft){.type_tag = 6}, err, sizeof err), QR_ERR_UNSUPPORTED); /* Bool */
    assert_int_equal(decode_schema_craft(&(field_craft){.type_tag = 0}, err, sizeof err), QR_ERR_FORMAT);
    assert_int_equal(decode_schema_craft(&(field_craft){.type_tag = 16, .list_size = 4, .n_children = 1}, err,
                                         sizeof err),
                     QR_OK);
    assert_int_equal(decode_schema_craft(&(field_craft){.type_tag = 16, .list_size = 4, .n_children = 0}, err,
                                         sizeof err),
                     QR_ERR_FORMAT);
    assert_non_null(strstr(err, "children"));
    assert_int_equal(decode_schema_craft(&(field_craft){.type_tag = 16, .list_size = 4, .n_children = 2}, err,
                                         sizeof err),
                     QR_ERR_FORMAT);
    assert_int_equal(decode_schema_craft(&(field_craft){.type_tag = 16, .list_size = -1, .n_children = 1}, err,
                                         sizeof err),
                     QR_ERR_FORMAT);
    assert_int_equal(decode_schema_craft(&(field_craft){.type_tag = 3, .n_children = 1}, err, sizeof err),
                     QR_ERR_FORMAT); /* a float with a child */
    assert_int_equal(decode_schema_craft(&(field_craft){.type_tag = 3, .dictionary = true}, err, sizeof err),
                     QR_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "dictionary"));
    assert_int_equal(decode_schema_craft(&(field_craft){.type_tag = 3, .endianness = 1}, err, sizeof err),
                     QR_ERR_UNSUPPORTED);
    /* nesting: 3 list levels + a float = depth 4 is fine, one more is refused */
    assert_int_equal(decode_schema_craft(&(field_craft){.type_tag = 16, .list_size = 2, .nest = 2}, err, sizeof err),
                     QR_OK);
    assert_int_equal(decode_schema_craft(&(field_craft){.type_tag = 16, .list_size = 2, .nest = 3}, err, sizeof err),
                     QR_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "nested"));
}

static volatile unsigned g_touched; /* keeps the reads of touch() from being optimised away */

/* Reads every byte a decoded array refers to (so that ASan catches a bad bound). */
static unsigned touch(const qr_arrow_field *f, const qr_arrow_array *a) {
    unsigned acc = 0;
    if (a->validity)
        for (int64_t i = 0; i < (a->length + 7) / 8; i++) acc += a->validity[i];
    size_t w = qr_arrow_type_width(f->type);
    if (w) {
        for (int64_t i = 0; i < a->length * (int64_t)w; i++) acc += ((const uint8_t *)a->values)[i];
    } else if (a->offsets) {
        for (int64_t i = 0; i <= a->length; i++) acc += (unsigned)a->offsets[i];
        for (int32_t j = a->offsets[0]; j < a->offsets[a->length]; j++) acc += ((const uint8_t *)a->values)[j];
    } else if (a->child) {
        acc += touch(f->child, a->child);
    }
    return acc;
}

/* Flipping any byte of valid messages never makes the decoder crash or read out of bounds (ASan). */
static void test_decode_mutations(void **state) {
    (void)state;
    qr_arrow_schema s;
    make_schema(&s);
    sample x;
    make_batch(&x);
    char err[256];
    qr_arrow_message sm, bm;
    assert_int_equal(qr_arrow_encode_schema(&s, &sm, err, sizeof err), QR_OK);
    assert_int_equal(qr_arrow_encode_batch(&s, &x.batch, &bm, err, sizeof err), QR_OK);
    uint8_t *buf = malloc(sm.metadata_len > bm.metadata_len ? sm.metadata_len : bm.metadata_len);
    int failures = 0;
    for (size_t i = 0; i < sm.metadata_len; i++) {
        for (int k = 0; k < 2; k++) {
            memcpy(buf, sm.metadata, sm.metadata_len);
            buf[i] ^= k ? 0xFF : 0x01;
            qr_arrow_schema d;
            if (qr_arrow_decode_schema(buf, sm.metadata_len, &d, err, sizeof err) == QR_OK) qr_arrow_schema_free(&d);
            else failures++;
        }
    }
    for (size_t cut = 0; cut < sm.metadata_len; cut++) {
        qr_arrow_schema d;
        memcpy(buf, sm.metadata, cut);
        if (qr_arrow_decode_schema(buf, cut, &d, err, sizeof err) == QR_OK) qr_arrow_schema_free(&d);
    }
    for (size_t i = 0; i < bm.metadata_len; i++) {
        for (int k = 0; k < 2; k++) {
            memcpy(buf, bm.metadata, bm.metadata_len);
            buf[i] ^= k ? 0xFF : 0x80;
            qr_arrow_batch d;
            if (qr_arrow_decode_batch(&s, buf, bm.metadata_len, bm.body, bm.body_len, &d, err, sizeof err) == QR_OK) {
                /* whatever decoded must be readable in full */
                for (size_t c = 0; c < d.n_columns; c++) g_touched += touch(&s.fields[c], &d.columns[c]);
                qr_arrow_batch_free(&d);
            } else {
                failures++;
            }
        }
    }
    assert_true(failures > 0);
    free(buf);
    qr_arrow_message_free(&sm);
    qr_arrow_message_free(&bm);
    qr_arrow_schema_free(&s);
}

/* Encapsulated framing: schema, batch, EOS; the legacy prefix; truncations. */
static void test_message_framing(void **state) {
    (void)state;
    qr_arrow_schema s;
    make_schema(&s);
    sample x;
    make_batch(&x);
    char err[256];
    qr_arrow_message sm, bm;
    assert_int_equal(qr_arrow_encode_schema(&s, &sm, err, sizeof err), QR_OK);
    assert_int_equal(qr_arrow_encode_batch(&s, &x.batch, &bm, err, sizeof err), QR_OK);
    size_t n1 = qr_arrow_message_framed_size(&sm), n2 = qr_arrow_message_framed_size(&bm);
    uint8_t *stream = malloc(n1 + n2 + 8);
    qr_arrow_message_frame(&sm, stream);
    qr_arrow_message_frame(&bm, stream + n1);
    memcpy(stream + n1 + n2, qr_arrow_eos, 8);
    size_t used, ml, bl;
    const uint8_t *meta, *body;
    assert_int_equal(qr_arrow_next_message(stream, n1 + n2 + 8, &used, &meta, &ml, &body, &bl, err, sizeof err), QR_OK);
    assert_int_equal(used, n1);
    assert_int_equal(ml, sm.metadata_len);
    assert_int_equal(bl, 0);
    assert_int_equal(qr_arrow_next_message(stream + n1, n2 + 8, &used, &meta, &ml, &body, &bl, err, sizeof err), QR_OK);
    assert_int_equal(used, n2);
    assert_int_equal(bl, bm.body_len);
    assert_ptr_equal(body, stream + n1 + 8 + bm.metadata_len);
    assert_int_equal(qr_arrow_next_message(stream + n1 + n2, 8, &used, &meta, &ml, &body, &bl, err, sizeof err), QR_OK);
    assert_null(meta);
    assert_int_equal(used, 8);
    assert_int_equal(qr_arrow_next_message(stream, 0, &used, &meta, &ml, &body, &bl, err, sizeof err), QR_OK);
    assert_null(meta);
    /* truncated anywhere inside the batch message */
    assert_int_equal(qr_arrow_next_message(stream + n1, n2 - 1, &used, &meta, &ml, &body, &bl, err, sizeof err),
                     QR_ERR_FORMAT);
    assert_int_equal(qr_arrow_next_message(stream + n1, 6, &used, &meta, &ml, &body, &bl, err, sizeof err),
                     QR_ERR_FORMAT);
    /* negative metadata length */
    uint8_t neg[8] = {0xFF, 0xFF, 0xFF, 0xFF, 0xF0, 0xFF, 0xFF, 0xFF};
    assert_int_equal(qr_arrow_next_message(neg, 8, &used, &meta, &ml, &body, &bl, err, sizeof err), QR_ERR_FORMAT);
    /* legacy: a bare length without the continuation marker */
    uint8_t *legacy = malloc(4 + sm.metadata_len);
    int32_t len32 = (int32_t)sm.metadata_len;
    memcpy(legacy, &len32, 4);
    memcpy(legacy + 4, sm.metadata, sm.metadata_len);
    assert_int_equal(qr_arrow_next_message(legacy, 4 + sm.metadata_len, &used, &meta, &ml, &body, &bl, err, sizeof err),
                     QR_OK);
    assert_int_equal(used, 4 + sm.metadata_len);
    qr_arrow_schema d;
    assert_int_equal(qr_arrow_decode_schema(meta, ml, &d, err, sizeof err), QR_OK);
    assert_true(qr_arrow_schema_equal(&d, &s, true));
    qr_arrow_schema_free(&d);
    free(legacy);
    free(stream);
    qr_arrow_message_free(&sm);
    qr_arrow_message_free(&bm);
    qr_arrow_schema_free(&s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flatbuf_roundtrip),      cmocka_unit_test(test_schema_roundtrip),
        cmocka_unit_test(test_batch_roundtrip),        cmocka_unit_test(test_batch_validate),
        cmocka_unit_test(test_decode_crafted_batches), cmocka_unit_test(test_decode_crafted_schemas),
        cmocka_unit_test(test_decode_mutations),       cmocka_unit_test(test_message_framing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
