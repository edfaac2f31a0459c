/* embed_batch.c — growable embedding batches in Arrow layout (+ zero-copy C Data export). */
#include "embed_batch.h"

#include <stdlib.h>
#include <string.h>

#include "arrow_internal.h"
#include "util/util.h"

/* A utf8 column under construction. */
typedef struct utf8_column {
    int32_t *offsets; /* [cap_rows + 1] */
    char *data;       /* [data_cap] */
    size_t data_cap;
} utf8_column;

struct qr_embed_batch {
    int32_t dim;            /* values per vector */
    int64_t n_rows;         /* rows stored */
    int64_t cap_rows;       /* rows allocated */
    int64_t *ids;           /* [cap_rows] */
    float *vectors;         /* [cap_rows * dim] row-major */
    bool with_text;
    bool with_metadata;
    utf8_column text;       /* when with_text */
    utf8_column metadata;   /* when with_metadata */
    qr_arrow_array arrays[5];  /* views: id, vector, vector values, text, metadata */
    qr_arrow_array columns[4]; /* columns in schema order (copies of the views above) */
    qr_arrow_batch view;
    void (*on_release)(void *); /* export hook */
    void *on_release_user;
};

/* Grows every per-row array to hold at least `rows` rows. */
static qr_status reserve_rows(qr_embed_batch *b, int64_t rows) {
    if (rows <= b->cap_rows) return QR_OK;
    int64_t cap = b->cap_rows ? b->cap_rows : 64;
    while (cap < rows) cap *= 2;
    if (cap > INT32_MAX || (uint64_t)cap > SIZE_MAX / sizeof(float) / (uint64_t)b->dim) return QR_ERR_NOMEM;
    int64_t *ids = realloc(b->ids, (size_t)cap * sizeof(*ids));
    if (!ids) return QR_ERR_NOMEM;
    b->ids = ids;
    float *v = realloc(b->vectors, (size_t)cap * (size_t)b->dim * sizeof(float));
    if (!v) return QR_ERR_NOMEM;
    b->vectors = v;
    utf8_column *cols[2] = {b->with_text ? &b->text : NULL, b->with_metadata ? &b->metadata : NULL};
    for (int i = 0; i < 2; i++) {
        if (!cols[i]) continue;
        int32_t *o = realloc(cols[i]->offsets, ((size_t)cap + 1) * sizeof(int32_t));
        if (!o) return QR_ERR_NOMEM;
        if (!cols[i]->offsets) o[0] = 0;
        cols[i]->offsets = o;
    }
    b->cap_rows = cap;
    return QR_OK;
}

qr_status qr_embed_batch_create(int32_t dim, int64_t capacity_hint, bool with_text, bool with_metadata,
                                qr_embed_batch **out) {
    *out = NULL;
    if (dim < 1 || capacity_hint < 0) return QR_ERR_INVALID_ARG;
    qr_embed_batch *b = calloc(1, sizeof(*b));
    if (!b) return QR_ERR_NOMEM;
    b->dim = dim;
    b->with_text = with_text;
    b->with_metadata = with_metadata;
    qr_status st = reserve_rows(b, capacity_hint > 0 ? capacity_hint : 1);
    if (st != QR_OK) {
        qr_embed_batch_free(b);
        return st;
    }
    *out = b;
    return QR_OK;
}

void qr_embed_batch_free(qr_embed_batch *b) {
    if (!b) return;
    free(b->ids);
    free(b->vectors);
    free(b->text.offsets);
    free(b->text.data);
    free(b->metadata.offsets);
    free(b->metadata.data);
    free(b);
}

/* Appends one string to a utf8 column (row = the index being written). */
static qr_status utf8_append(utf8_column *c, int64_t row, const char *s) {
    size_t n = s ? strlen(s) : 0;
    size_t used = (size_t)c->offsets[row];
    if (n > (size_t)INT32_MAX - used) return QR_ERR_INVALID_ARG; /* int32 offsets */
    if (s && !qr_arrow_utf8_valid((const uint8_t *)s, n)) return QR_ERR_INVALID_ARG;
    if (used + n > c->data_cap) {
        size_t cap = c->data_cap ? c->data_cap : 256;
        while (cap < used + n) cap *= 2;
        char *d = realloc(c->data, cap);
        if (!d) return QR_ERR_NOMEM;
        c->data = d;
        c->data_cap = cap;
    }
    if (n) memcpy(c->data + used, s, n);
    c->offsets[row + 1] = (int32_t)(used + n);
    return QR_OK;
}

qr_status qr_embed_batch_append(qr_embed_batch *b, int64_t id, const float *vec, const char *text,
                                const char *metadata_json) {
    if (!b || !vec) return QR_ERR_INVALID_ARG;
    qr_status st = reserve_rows(b, b->n_rows + 1);
    if (st != QR_OK) return st;
    int64_t r = b->n_rows;
    if (b->with_text && (st = utf8_append(&b->text, r, text))) return st;
    if (b->with_metadata && (st = utf8_append(&b->metadata, r, metadata_json))) {
        if (b->with_text) b->text.offsets[r + 1] = b->text.offsets[r]; /* undo: the row is not added */
        return st;
    }
    b->ids[r] = id;
    memcpy(b->vectors + (size_t)r * (size_t)b->dim, vec, (size_t)b->dim * sizeof(float));
    b->n_rows = r + 1;
    return QR_OK;
}

void qr_embed_batch_clear(qr_embed_batch *b) { b->n_rows = 0; }

int64_t qr_embed_batch_rows(const qr_embed_batch *b) { return b->n_rows; }
int32_t qr_embed_batch_dim(const qr_embed_batch *b) { return b->dim; }
const float *qr_embed_batch_vectors(const qr_embed_batch *b) { return b->vectors; }
const int64_t *qr_embed_batch_ids(const qr_embed_batch *b) { return b->ids; }

qr_status qr_embed_batch_schema(const qr_embed_batch *b, const char *metric, qr_arrow_schema *out) {
    qr_arrow_schema_init(out);
    qr_status st = qr_arrow_schema_add(out, "id", QR_ARROW_INT64, false, NULL);
    if (!st) st = qr_arrow_schema_add_list(out, "vector", QR_ARROW_FLOAT32, b->dim, false, NULL);
    if (!st && b->with_text) st = qr_arrow_schema_add(out, "text", QR_ARROW_UTF8, true, NULL);
    if (!st && b->with_metadata) st = qr_arrow_schema_add(out, "metadata", QR_ARROW_UTF8, true, NULL);
    if (!st && metric) st = qr_arrow_schema_add_meta(out, "longbow.metric", metric);
    if (!st && metric) st = qr_arrow_schema_add_meta(out, "longbow.vector_type", "float32");
    if (st != QR_OK) qr_arrow_schema_free(out);
    return st;
}

const qr_arrow_batch *qr_embed_batch_view(qr_embed_batch *b) {
    int64_t n = b->n_rows;
    memset(b->arrays, 0, sizeof(b->arrays));
    b->arrays[0] = (qr_arrow_array){.length = n, .values = b->ids};
    b->arrays[2] = (qr_arrow_array){.length = n * b->dim, .values = b->vectors};
    b->arrays[1] = (qr_arrow_array){.length = n, .child = &b->arrays[2]};
    size_t nc = 0;
    b->columns[nc++] = b->arrays[0];
    b->columns[nc++] = b->arrays[1];
    if (b->with_text) {
        b->arrays[3] = (qr_arrow_array){.length = n, .offsets = b->text.offsets, .values = b->text.data};
        b->columns[nc++] = b->arrays[3];
    }
    if (b->with_metadata) {
        b->arrays[4] = (qr_arrow_array){.length = n, .offsets = b->metadata.offsets, .values = b->metadata.data};
        b->columns[nc++] = b->arrays[4];
    }
    b->view = (qr_arrow_batch){.length = n, .n_columns = nc, .columns = b->columns};
    return &b->view;
}

/* Owner release of an exported batch: runs the hook, then frees the batch. */
static void export_release(void *p) {
    qr_embed_batch *b = p;
    if (b->on_release) b->on_release(b->on_release_user);
    qr_embed_batch_free(b);
}

qr_status qr_embed_batch_export(qr_embed_batch *b, const char *metric, void (*on_release)(void *), void *user,
                                struct ArrowSchema *schema, struct ArrowArray *array, char *err, size_t err_len) {
    if (!b || !schema || !array) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "embed export: null argument");
    qr_arrow_schema s;
    qr_status st = qr_embed_batch_schema(b, metric, &s);
    if (st != QR_OK) return qr_errf(err, err_len, st, "embed export: building the schema failed");
    struct ArrowSchema out_schema;
    st = qr_arrow_export_schema(&s, &out_schema, err, err_len);
    if (st == QR_OK) {
        const qr_arrow_batch *view = qr_embed_batch_view(b);
        b->on_release = on_release;
        b->on_release_user = user;
        st = qr_arrow_export_batch(&s, view, export_release, b, array, err, err_len);
        if (st == QR_OK)
            *schema = out_schema;
        else
            out_schema.release(&out_schema);
    }
    qr_arrow_schema_free(&s);
    return st;
}
