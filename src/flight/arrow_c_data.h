/* arrow_c_data.h — export of schemas and record batches through the Arrow C Data Interface.
 *
 * The structs below are the ones the Arrow specification defines (guarded by ARROW_C_DATA_INTERFACE
 * so that they can coexist with another definition). A record batch is exported as a struct array
 * ("+s") whose children are the columns; consumers such as pyarrow
 * (`pyarrow.RecordBatch._import_from_c(array_addr, schema_addr)`) take ownership by calling the
 * release callbacks when done.
 *
 * Batch export is zero-copy: the exported buffers are the batch's own buffers. The memory stays alive
 * until the last exported ArrowArray (the parent, or a child a consumer moved out) is released; then
 * the owner's release function runs.
 */
#ifndef QR_FLIGHT_ARROW_C_DATA_H
#define QR_FLIGHT_ARROW_C_DATA_H

#include <stdint.h>

#include "arrow_ipc.h"

#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE

#define ARROW_FLAG_DICTIONARY_ORDERED 1
#define ARROW_FLAG_NULLABLE 2
#define ARROW_FLAG_MAP_KEYS_SORTED 4

struct ArrowSchema {
    const char *format;
    const char *name;
    const char *metadata;
    int64_t flags;
    int64_t n_children;
    struct ArrowSchema **children;
    struct ArrowSchema *dictionary;
    void (*release)(struct ArrowSchema *);
    void *private_data;
};

struct ArrowArray {
    int64_t length;
    int64_t null_count;
    int64_t offset;
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};

#endif /* ARROW_C_DATA_INTERFACE */

/* Exports `s` as a struct-typed ArrowSchema (format "+s", one child per field, metadata encoded as
 * the spec says). Everything is copied; out->release frees it. On failure *out is untouched. */
qr_status qr_arrow_export_schema(const qr_arrow_schema *s, struct ArrowSchema *out, char *err, size_t err_len);

/* Exports batch `b` (validated against `s`) as a struct ArrowArray without copying any buffer.
 * On success the exported arrays take over `owner`: release_owner(owner) is called (from whichever
 * thread releases last) once the parent and every child moved out by the consumer are released. On
 * failure nothing is taken over and *out is untouched. `b` and `s` themselves need not outlive the
 * call, only the buffers that b's arrays point at (which `owner` keeps alive). */
qr_status qr_arrow_export_batch(const qr_arrow_schema *s, const qr_arrow_batch *b, void (*release_owner)(void *),
                                void *owner, struct ArrowArray *out, char *err, size_t err_len);

/* Exports a decoded batch (from qr_arrow_decode_batch, whose buffers may point into `body`): the batch
 * storage is moved into the export (*b is emptied) and `body_free(body)` runs at release (body_free
 * may be NULL when the batch owns a copy of the body or the body is static). */
qr_status qr_arrow_export_decoded(const qr_arrow_schema *s, qr_arrow_batch *b, void *body, void (*body_free)(void *),
                                  struct ArrowArray *out, char *err, size_t err_len);

#endif /* QR_FLIGHT_ARROW_C_DATA_H */
