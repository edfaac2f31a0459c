/* embed_batch.h — a growable batch of embeddings in Arrow layout, ready to push over Flight or to hand
 * to any Arrow consumer through the C Data Interface without copying.
 *
 * Columns (in this order): `id` int64, `vector` FixedSizeList<float32, dim>, then optionally `text`
 * utf8 and `metadata` utf8 (a JSON document per row). All columns are non-null; a NULL text or
 * metadata string is stored as "".
 */
#ifndef QR_FLIGHT_EMBED_BATCH_H
#define QR_FLIGHT_EMBED_BATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "arrow_c_data.h"
#include "arrow_ipc.h"

typedef struct qr_embed_batch qr_embed_batch;

/* Creates an empty batch of `dim`-dimensional vectors (dim >= 1) with room for capacity_hint rows
 * (it grows as needed). with_text / with_metadata add the optional utf8 columns. */
qr_status qr_embed_batch_create(int32_t dim, int64_t capacity_hint, bool with_text, bool with_metadata,
                                qr_embed_batch **out);
/* Frees the batch (NULL is fine). Must not be called after a successful qr_embed_batch_export. */
void qr_embed_batch_free(qr_embed_batch *b);
/* Appends one row: `vec` holds dim floats (copied); text / metadata_json are NUL-terminated UTF-8
 * (copied; ignored when the batch has no such column; NULL means ""). */
qr_status qr_embed_batch_append(qr_embed_batch *b, int64_t id, const float *vec, const char *text,
                                const char *metadata_json);
/* Removes every row but keeps the memory (for streaming one batch after another). */
void qr_embed_batch_clear(qr_embed_batch *b);

/* Rows stored. */
int64_t qr_embed_batch_rows(const qr_embed_batch *b);
/* Vector dimension. */
int32_t qr_embed_batch_dim(const qr_embed_batch *b);
/* The row-major [rows * dim] vector storage (valid until the next append). */
const float *qr_embed_batch_vectors(const qr_embed_batch *b);
/* The [rows] id storage (valid until the next append). */
const int64_t *qr_embed_batch_ids(const qr_embed_batch *b);

/* Builds the Arrow schema of the batch into *out (free with qr_arrow_schema_free). When metric is not
 * NULL the schema carries the Longbow metadata longbow.metric = metric and
 * longbow.vector_type = float32. */
qr_status qr_embed_batch_schema(const qr_embed_batch *b, const char *metric, qr_arrow_schema *out);
/* An Arrow view of the rows (pointers into the batch, valid until the next append/clear/free). */
const qr_arrow_batch *qr_embed_batch_view(qr_embed_batch *b);

/* Hands the batch to an Arrow consumer without copying: fills *schema and *array (C Data Interface).
 * On success the batch belongs to the export (do not free it): it is freed when the consumer has
 * released the array and every child it moved out; on_release(user) runs just before (may be NULL).
 * On failure the caller still owns the batch. */
qr_status qr_embed_batch_export(qr_embed_batch *b, const char *metric, void (*on_release)(void *), void *user,
                                struct ArrowSchema *schema, struct ArrowArray *array, char *err, size_t err_len);

#endif /* QR_FLIGHT_EMBED_BATCH_H */
