/* model_path.h — turns what a user typed as MODEL into a GGUF path: a file path, or an Ollama name
 * ("smollm2:135m", "mistral", "user/model:tag", "host/ns/model:tag") resolved through Ollama's
 * manifest store ($OLLAMA_MODELS, else ~/.ollama/models). */
#ifndef QR_MODEL_MODEL_PATH_H
#define QR_MODEL_MODEL_PATH_H

#include <stddef.h>

#include "quarrel.h"

/* qr_model_resolve_path is public: declared (and documented) in quarrel.h. */

#endif /* QR_MODEL_MODEL_PATH_H */
