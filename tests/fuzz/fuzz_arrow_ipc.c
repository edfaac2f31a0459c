/* fuzz_arrow_ipc.c — libFuzzer target for the Arrow IPC decoder (and, on what it accepts, the encoder
 * and the C Data Interface export).
 *
 * The input is read as an IPC stream from an exact-size copy (so ASan catches any read past the end):
 * the first message must be a Schema, the next ones RecordBatches. Whatever decodes is read in full,
 * then re-encoded; the re-encoded message must decode again and re-encode to the same bytes (encoding
 * is a fixed point after one pass), and a decoded schema must survive encode + decode unchanged. Each
 * decoded batch is also exported through the C Data Interface and released. The whole input is also
 * tried as a bare flatbuffer Schema message. Any violated invariant traps.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "flight/arrow_c_data.h"
#include "flight/arrow_ipc.h"

static volatile uint64_t sink; /* keeps the reads from being optimised away */

/* Reads every byte an array refers to. */
static void touch(const qr_arrow_field *f, const qr_arrow_array *a) {
    if (a->validity)
        for (int64_t i = 0; i < (a->length + 7) / 8; i++) sink += a->validity[i];
    size_t w = qr_arrow_type_width(f->type);
    if (w) {
        const uint8_t *v = a->values;
        for (int64_t i = 0; i < a->length * (int64_t)w; i += 61) sink += v[i];
        if (a->length) sink += v[a->length * (int64_t)w - 1];
    } else if (a->offsets) {
        const uint8_t *v = a->values;
        for (int64_t i = 0; i <= a->length; i++) sink += (uint64_t)a->offsets[i];
        for (int32_t j = a->offsets[0]; j < a->offsets[a->length]; j += 13) sink += v[j];
        if (a->offsets[a->length] > a->offsets[0]) sink += v[a->offsets[a->length] - 1];
    } else if (a->child) {
        touch(f->child, a->child);
    }
}

/* A schema must round-trip through the encoder unchanged. */
static void check_schema(const qr_arrow_schema *s) {
    char err[256];
    qr_arrow_message m;
    if (qr_arrow_encode_schema(s, &m, err, sizeof err) != QR_OK) __builtin_trap();
    qr_arrow_schema d;
    if (qr_arrow_decode_schema(m.metadata, m.metadata_len, &d, err, sizeof err) != QR_OK) __builtin_trap();
    if (!qr_arrow_schema_equal(s, &d, true)) __builtin_trap();
    qr_arrow_schema_free(&d);
    qr_arrow_message_free(&m);
}

/* A decoded batch re-encodes, decodes again, and re-encodes to the same bytes; it also exports. */
static void check_batch(const qr_arrow_schema *s, const qr_arrow_batch *b) {
    char err[256];
    for (size_t i = 0; i < b->n_columns; i++) touch(&s->fields[i], &b->columns[i]);
    qr_arrow_message m1, m2;
    if (qr_arrow_encode_batch(s, b, &m1, err, sizeof err) != QR_OK) __builtin_trap();
    qr_arrow_batch d;
    if (qr_arrow_decode_batch(s, m1.metadata, m1.metadata_len, m1.body, m1.body_len, &d, err, sizeof err) != QR_OK)
        __builtin_trap();
    if (qr_arrow_encode_batch(s, &d, &m2, err, sizeof err) != QR_OK) __builtin_trap();
    if (m1.metadata_len != m2.metadata_len || m1.body_len != m2.body_len ||
        memcmp(m1.metadata, m2.metadata, m1.metadata_len) ||
        (m1.body_len && memcmp(m1.body, m2.body, m1.body_len)))
        __builtin_trap();
    struct ArrowArray out;
    if (qr_arrow_export_batch(s, &d, NULL, NULL, &out, err, sizeof err) != QR_OK) __builtin_trap();
    out.release(&out);
    qr_arrow_batch_free(&d);
    qr_arrow_message_free(&m1);
    qr_arrow_message_free(&m2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    if (size) memcpy(buf, data, size);
    char err[256];

    /* the input as a stream */
    qr_arrow_schema schema;
    qr_arrow_schema_init(&schema);
    bool have_schema = false;
    size_t at = 0;
    for (int n = 0; n < 64; n++) {
        size_t used, meta_len, body_len;
        const uint8_t *meta, *body;
        if (qr_arrow_next_message(buf + at, size - at, &used, &meta, &meta_len, &body, &body_len, err, sizeof err) !=
                QR_OK ||
            !meta)
            break;
        at += used;
        if (!have_schema) {
            if (qr_arrow_decode_schema(meta, meta_len, &schema, err, sizeof err) != QR_OK) break;
            have_schema = true;
            check_schema(&schema);
            continue;
        }
        qr_arrow_batch b;
        if (qr_arrow_decode_batch(&schema, meta, meta_len, body, body_len, &b, err, sizeof err) == QR_OK) {
            check_batch(&schema, &b);
            qr_arrow_batch_free(&b);
        }
    }
    qr_arrow_schema_free(&schema);

    /* the input as a bare Schema message */
    qr_arrow_schema s2;
    if (qr_arrow_decode_schema(buf, size, &s2, err, sizeof err) == QR_OK) {
        check_schema(&s2);
        qr_arrow_schema_free(&s2);
    }
    free(buf);
    return 0;
}
