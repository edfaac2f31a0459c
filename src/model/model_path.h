/* model_path.h — turns what a user typed as MODEL into a GGUF path: a file path, a short name of a
 * file in the model directory ($QUARREL_MODELS_DIR, else ~/.cache/quarrel/models: "smollm2" for
 * SmolLM2-135M-Instruct.Q4_1.gguf), or an Ollama name ("smollm2:135m", "mistral", "user/model:tag",
 * "host/ns/model:tag") resolved through Ollama's manifest store ($OLLAMA_MODELS, else
 * ~/.ollama/models); and lists the models both places hold (`quarrel list`). */
#ifndef QR_MODEL_MODEL_PATH_H
#define QR_MODEL_MODEL_PATH_H

#include <stddef.h>

#include "quarrel.h"

/* qr_model_resolve_path is public: declared (and documented) in quarrel.h. */

#include <stdbool.h>
#include <stdint.h>

#include "gguf/gguf.h"

/* One model the model directory or the Ollama store holds. */
typedef struct qr_model_entry {
    char name[600];  /* what resolves to it: the file name without .gguf, or the Ollama name (model:tag,
                        ns/model:tag outside the library namespace, host/ns/model:tag off the default host) */
    char path[4096]; /* the GGUF file */
    bool ollama;     /* from the Ollama store */
} qr_model_entry;

/* The model directory: $QUARREL_MODELS_DIR, else $HOME/.cache/quarrel/models. */
void qr_models_dir(char *out, size_t cap);

/* Lists the *.gguf files of the model directory (sorted by name), then the models of the Ollama store
 * whose blob is present (sorted); *out malloc'd [*n] (NULL when 0). A missing directory or store lists
 * nothing. Errors: QR_ERR_NOMEM. */
qr_status qr_model_list(qr_model_entry **out, size_t *n, char *err, size_t err_len);

/* A GGUF's weights: the parameter count and the predominant type of its matrices (by bytes; a
 * qr_type_name such as "Q4_1"). */
void qr_model_weight_stats(const qr_gguf *g, uint64_t *n_params, const char **type_name);

#endif /* QR_MODEL_MODEL_PATH_H */
