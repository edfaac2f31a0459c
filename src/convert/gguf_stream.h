/* gguf_stream.h — a streaming GGUF v3 writer with bounded memory.
 *
 * The regular writer (gguf/gguf.h) keeps a data pointer per tensor until it writes the whole file.
 * Model generators and quantizers produce tensors one at a time, often larger than memory would
 * comfortably hold all together, so this writer works in two phases:
 *
 *   1. describe: add key/values and tensor infos (name, type, shape; no data). Offsets are assigned
 *      sequentially, each tensor padded to the alignment, exactly as ggml lays them out.
 *   2. stream: qr_gguf_stream_begin writes the header, then qr_gguf_stream_write appends each
 *      tensor's bytes in the order the tensors were added (any chunking); padding is inserted
 *      automatically when a tensor is complete. qr_gguf_stream_finish renames the temporary file
 *      into place.
 *
 * Output bytes equal what ggml's gguf writer produces for the same key/values and tensors.
 */
#ifndef QR_CONVERT_GGUF_STREAM_H
#define QR_CONVERT_GGUF_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "quarrel.h"

typedef struct qr_gguf_stream qr_gguf_stream;

/* alignment: a power of two (QR_GGUF_DEFAULT_ALIGNMENT). NULL on OOM or a bad alignment. */
qr_gguf_stream *qr_gguf_stream_create(uint32_t alignment);
/* Frees everything; an unfinished output file (the temporary) is removed. */
void qr_gguf_stream_free(qr_gguf_stream *s);

/* Key/values, in order. Errors (duplicate key, bad value) are sticky: qr_gguf_stream_begin reports
 * the first one. Setting "general.alignment" changes the alignment (before any tensor is added). */
qr_status qr_gguf_stream_set_u32(qr_gguf_stream *s, const char *key, uint32_t v);
qr_status qr_gguf_stream_set_i32(qr_gguf_stream *s, const char *key, int32_t v);
qr_status qr_gguf_stream_set_u64(qr_gguf_stream *s, const char *key, uint64_t v);
qr_status qr_gguf_stream_set_f32(qr_gguf_stream *s, const char *key, float v);
qr_status qr_gguf_stream_set_bool(qr_gguf_stream *s, const char *key, bool v);
qr_status qr_gguf_stream_set_str(qr_gguf_stream *s, const char *key, const char *v);
/* Scalar array: data holds count elements of elem_type, little-endian. */
qr_status qr_gguf_stream_set_arr(qr_gguf_stream *s, const char *key, qr_gguf_vtype elem_type, const void *data,
                                 uint64_t count);
/* String array of NUL-terminated strings. */
qr_status qr_gguf_stream_set_arr_str(qr_gguf_stream *s, const char *key, const char *const *strs, uint64_t count);
/* Any value read by the GGUF reader (deep copy, arrays of arrays included). */
qr_status qr_gguf_stream_set_value(qr_gguf_stream *s, qr_gguf_str key, const qr_gguf_value *v);
/* True when `key` was already added. */
bool qr_gguf_stream_has_key(const qr_gguf_stream *s, const char *key);

/* Describes the next tensor. ne[0] must be a multiple of the type's block size; n_dims in 1..4. */
qr_status qr_gguf_stream_add_tensor(qr_gguf_stream *s, const char *name, qr_type type, uint32_t n_dims,
                                    const int64_t *ne);
/* Bytes of data of tensor i (unpadded), or 0 if i is out of range. */
uint64_t qr_gguf_stream_tensor_nbytes(const qr_gguf_stream *s, size_t i);
size_t qr_gguf_stream_n_tensors(const qr_gguf_stream *s);
/* Size of the complete file as described so far (header + padded data). */
uint64_t qr_gguf_stream_file_size(const qr_gguf_stream *s);

/* Opens a temporary file next to `path` and writes the header (key/values + tensor infos +
 * padding). No key/value or tensor may be added afterwards. */
qr_status qr_gguf_stream_begin(qr_gguf_stream *s, const char *path, char *err, size_t err_len);
/* Appends n bytes of tensor data (they may span several tensors). Writing more bytes than the
 * tensors need is an error. */
qr_status qr_gguf_stream_write(qr_gguf_stream *s, const void *data, size_t n, char *err, size_t err_len);
/* Index of the tensor the next qr_gguf_stream_write bytes go to (n_tensors when all are complete). */
size_t qr_gguf_stream_current_tensor(const qr_gguf_stream *s);
/* Checks that every tensor is complete, flushes, and renames the file to `path`. */
qr_status qr_gguf_stream_finish(qr_gguf_stream *s, char *err, size_t err_len);

#endif /* QR_CONVERT_GGUF_STREAM_H */
