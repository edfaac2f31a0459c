/* model_path.h — turns what a user typed as MODEL into a GGUF path: a file path, or an Ollama name
 * ("smollm2:135m", "mistral", "user/model:tag", "host/ns/model:tag") resolved through Ollama's
 * manifest store ($OLLAMA_MODELS, else ~/.ollama/models). */
#ifndef QR_MODEL_MODEL_PATH_H
#define QR_MODEL_MODEL_PATH_H

#include <stddef.h>

#include "quarrel.h"

/* Writes the GGUF path for `name` into out[0..cap). An existing file path is returned as is.
 * Otherwise `name` is parsed as an Ollama name (default host registry.ollama.ai, namespace
 * library, tag latest), its manifest is read from <store>/manifests/<host>/<ns>/<model>/<tag> and
 * the blob of the layer whose mediaType is application/vnd.ollama.image.model is returned
 * (<store>/blobs/sha256-<hex>). Errors: QR_ERR_NOT_FOUND naming what was looked for,
 * QR_ERR_FORMAT for a manifest that is not valid JSON or has no model layer. */
qr_status qr_model_resolve_path(const char *name, char *out, size_t cap, char *err, size_t err_len);

#endif /* QR_MODEL_MODEL_PATH_H */
