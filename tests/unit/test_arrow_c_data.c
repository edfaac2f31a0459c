/* test_arrow_c_data.c — Arrow C Data Interface export: formats, metadata, zero-copy buffers and
 * release semantics (including children moved out by a consumer), and embedding batches. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "flight/arrow_c_data.h"
#include "flight/embed_batch.h"

static int g_released; /* counts owner releases in this test process */

static void count_release(void *p) {
    (void)p;
    g_released++;
}

static void test_export_schema(void **state) {
    (void)state;
    qr_arrow_schema s;
    qr_arrow_schema_init(&s);
    qr_arrow_field *f;
    qr_arrow_schema_add(&s, "id", QR_ARROW_INT64, false, &f);
    qr_arrow_field_add_meta(f, "k", "vv");
    qr_arrow_schema_add(&s, "u", QR_ARROW_UINT64, true, NULL);
    qr_arrow_schema_add_list(&s, "vector", QR_ARROW_FLOAT32, 384, false, NULL);
    qr_arrow_schema_add(&s, "text", QR_ARROW_UTF8, true, NULL);
    qr_arrow_schema_add(&s, "h", QR_ARROW_FLOAT16, true, NULL);
    qr_arrow_schema_add_meta(&s, "longbow.metric", "dot_product");
    struct ArrowSchema out;
    char err[256];
    assert_int_equal(qr_arrow_export_schema(&s, &out, err, sizeof err), QR_OK);
    qr_arrow_schema_free(&s); /* the export is a deep copy */
    assert_string_equal(out.format, "+s");
    assert_int_equal(out.n_children, 5);
    assert_string_equal(out.children[0]->format, "l");
    assert_string_equal(out.children[0]->name, "id");
    assert_int_equal(out.children[0]->flags & ARROW_FLAG_NULLABLE, 0);
    assert_string_equal(out.children[1]->format, "L");
    assert_int_equal(out.children[1]->flags, ARROW_FLAG_NULLABLE);
    assert_string_equal(out.children[2]->format, "+w:384");
    assert_int_equal(out.children[2]->n_children, 1);
    assert_string_equal(out.children[2]->children[0]->format, "f");
    assert_string_equal(out.children[2]->children[0]->name, "item");
    assert_string_equal(out.children[3]->format, "u");
    assert_string_equal(out.children[4]->format, "e");
    /* metadata: int32 count, then (int32 len, bytes) for key and value */
    const char *m = out.metadata;
    int32_t v;
    memcpy(&v, m, 4);
    assert_int_equal(v, 1);
    memcpy(&v, m + 4, 4);
    assert_int_equal(v, 14);
    assert_memory_equal(m + 8, "longbow.metric", 14);
    memcpy(&v, m + 22, 4);
    assert_int_equal(v, 11);
    assert_memory_equal(m + 26, "dot_product", 11);
    assert_non_null(out.children[0]->metadata);
    assert_null(out.children[1]->metadata);
    /* a consumer may move a child schema out and release it on its own */
    struct ArrowSchema moved = *out.children[3];
    out.children[3]->release = NULL;
    out.release(&out);
    assert_null(out.release);
    assert_string_equal(moved.format, "u");
    moved.release(&moved);
}

/* A 4-row batch: id int64, vector FixedSizeList<float32, 2>, text utf8 with one null. */
typedef struct small {
    int64_t ids[4];
    float vec[8];
    int32_t offs[5];
    char chars[16];
    uint8_t valid;
    qr_arrow_array child, cols[3];
    qr_arrow_batch batch;
    qr_arrow_schema schema;
} small;

static void make_small(small *x) {
    memset(x, 0, sizeof(*x));
    for (int i = 0; i < 4; i++) x->ids[i] = 100 + i;
    for (int i = 0; i < 8; i++) x->vec[i] = (float)i / 8.0f;
    memcpy(x->chars, "aabbbdd", 7);
    int32_t offs[5] = {0, 2, 5, 5, 7};
    memcpy(x->offs, offs, sizeof offs);
    x->valid = 0x0B; /* row 2 null */
    x->child = (qr_arrow_array){.length = 8, .values = x->vec};
    x->cols[0] = (qr_arrow_array){.length = 4, .values = x->ids};
    x->cols[1] = (qr_arrow_array){.length = 4, .child = &x->child};
    x->cols[2] = (qr_arrow_array){.length = 4, .null_count = 1, .validity = &x->valid, .offsets = x->offs,
                                  .values = x->chars};
    x->batch = (qr_arrow_batch){.length = 4, .n_columns = 3, .columns = x->cols};
    qr_arrow_schema_init(&x->schema);
    qr_arrow_schema_add(&x->schema, "id", QR_ARROW_INT64, false, NULL);
    qr_arrow_schema_add_list(&x->schema, "vector", QR_ARROW_FLOAT32, 2, false, NULL);
    qr_arrow_schema_add(&x->schema, "text", QR_ARROW_UTF8, true, NULL);
}

static void test_export_batch_zero_copy(void **state) {
    (void)state;
    small x;
    make_small(&x);
    struct ArrowArray out;
    char err[256];
    g_released = 0;
    assert_int_equal(qr_arrow_export_batch(&x.schema, &x.batch, count_release, NULL, &out, err, sizeof err), QR_OK);
    assert_int_equal(out.length, 4);
    assert_int_equal(out.n_children, 3);
    assert_int_equal(out.n_buffers, 1);
    assert_null(out.buffers[0]);
    struct ArrowArray *id = out.children[0], *vec = out.children[1], *text = out.children[2];
    assert_int_equal(id->n_buffers, 2);
    assert_ptr_equal(id->buffers[1], x.ids); /* zero-copy */
    assert_null(id->buffers[0]);
    assert_int_equal(vec->n_buffers, 1);
    assert_int_equal(vec->n_children, 1);
    assert_int_equal(vec->children[0]->length, 8);
    assert_ptr_equal(vec->children[0]->buffers[1], x.vec);
    assert_int_equal(text->n_buffers, 3);
    assert_int_equal(text->null_count, 1);
    assert_ptr_equal(text->buffers[0], &x.valid);
    assert_ptr_equal(text->buffers[1], x.offs);
    assert_ptr_equal(text->buffers[2], x.chars);

    /* move the vector column out, release the parent: the owner must stay alive */
    struct ArrowArray moved = *vec;
    vec->release = NULL;
    out.release(&out);
    assert_null(out.release);
    assert_int_equal(g_released, 0);
    assert_ptr_equal(moved.children[0]->buffers[1], x.vec);
    moved.release(&moved);
    assert_int_equal(g_released, 1);

    /* plain release */
    assert_int_equal(qr_arrow_export_batch(&x.schema, &x.batch, count_release, NULL, &out, err, sizeof err), QR_OK);
    out.release(&out);
    assert_int_equal(g_released, 2);

    /* an invalid batch is refused and the owner is not released */
    x.cols[1].length = 3;
    assert_int_equal(qr_arrow_export_batch(&x.schema, &x.batch, count_release, NULL, &out, err, sizeof err),
                     QR_ERR_INVALID_ARG);
    assert_int_equal(g_released, 2);
    qr_arrow_schema_free(&x.schema);
}

static void test_export_decoded(void **state) {
    (void)state;
    small x;
    make_small(&x);
    char err[256];
    qr_arrow_message m;
    assert_int_equal(qr_arrow_encode_batch(&x.schema, &x.batch, &m, err, sizeof err), QR_OK);
    qr_arrow_batch d;
    assert_int_equal(qr_arrow_decode_batch(&x.schema, m.metadata, m.metadata_len, m.body, m.body_len, &d, err,
                                           sizeof err),
                     QR_OK);
    struct ArrowArray out;
    uint8_t *body = m.body;
    m.body = NULL; /* the export takes the body over */
    assert_int_equal(qr_arrow_export_decoded(&x.schema, &d, body, free, &out, err, sizeof err), QR_OK);
    assert_null(d.owned_arrays); /* moved into the export */
    const float *vals = out.children[1]->children[0]->buffers[1];
    assert_true(vals >= (const float *)(const void *)body && vals < (const float *)(const void *)(body + m.body_len));
    assert_memory_equal(vals, x.vec, sizeof x.vec);
    out.release(&out); /* frees the arrays and the body (ASan checks) */
    qr_arrow_message_free(&m);
    qr_arrow_schema_free(&x.schema);
}

static int g_hook_calls;
static void hook(void *user) { g_hook_calls += *(int *)user; }

static void test_embed_batch(void **state) {
    (void)state;
    qr_embed_batch *b;
    assert_int_equal(qr_embed_batch_create(4, 1, true, true, &b), QR_OK);
    float v[4];
    for (int r = 0; r < 100; r++) { /* grows past the capacity hint */
        for (int j = 0; j < 4; j++) v[j] = (float)(r * 4 + j);
        char text[32];
        snprintf(text, sizeof text, "row %d", r);
        assert_int_equal(qr_embed_batch_append(b, 1000 + r, v, text, r % 2 ? "{\"odd\":true}" : NULL), QR_OK);
    }
    assert_int_equal(qr_embed_batch_append(b, 1, v, "\xff", NULL), QR_ERR_INVALID_ARG); /* not UTF-8 */
    assert_int_equal(qr_embed_batch_rows(b), 100);
    const qr_arrow_batch *view = qr_embed_batch_view(b);
    qr_arrow_schema s;
    assert_int_equal(qr_embed_batch_schema(b, "cosine", &s), QR_OK);
    char err[256];
    assert_int_equal(qr_arrow_batch_validate(&s, view, err, sizeof err), QR_OK);
    assert_int_equal(view->columns[3].offsets[2] - view->columns[3].offsets[1], 12);
    assert_int_equal(view->columns[3].offsets[1], 0); /* NULL metadata is "" */
    qr_arrow_schema_free(&s);

    const float *vectors = qr_embed_batch_vectors(b);
    const int64_t *ids = qr_embed_batch_ids(b);
    struct ArrowSchema as;
    struct ArrowArray aa;
    int weight = 1;
    g_hook_calls = 0;
    assert_int_equal(qr_embed_batch_export(b, "cosine", hook, &weight, &as, &aa, err, sizeof err), QR_OK);
    assert_string_equal(as.format, "+s");
    assert_int_equal(as.n_children, 4);
    assert_string_equal(as.children[1]->format, "+w:4");
    assert_string_equal(as.children[3]->name, "metadata");
    assert_non_null(strstr(as.metadata + 8, "longbow.metric"));
    assert_ptr_equal(aa.children[0]->buffers[1], ids);
    assert_ptr_equal(aa.children[1]->children[0]->buffers[1], vectors);
    assert_int_equal(aa.children[1]->children[0]->length, 400);
    assert_float_equal(((const float *)aa.children[1]->children[0]->buffers[1])[399], 399.0f, 0);
    as.release(&as);
    assert_int_equal(g_hook_calls, 0);
    aa.release(&aa); /* frees the embed batch */
    assert_int_equal(g_hook_calls, 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_export_schema),
        cmocka_unit_test(test_export_batch_zero_copy),
        cmocka_unit_test(test_export_decoded),
        cmocka_unit_test(test_embed_batch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
