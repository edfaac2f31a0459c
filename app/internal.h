/* internal.h — the one door from app/ into the library's insides (src/), for the tools that need more
 * than the public API of quarrel.h: `quarrel serve` and `keys` (the HTTP server, its key store), `push` /
 * `search` (the Arrow Flight client), `synth` / `quantize` (the GGUF writers), `inspect`, `list` and `template`
 * (GGUF metadata, the template interpreter's tools/documents/extra variables), `tokenize --info` (the
 * tokenizer's internals) and `bench` (the CUDA backend's graph counters). Every other app/ file uses
 * quarrel.h alone; tools/check_layers.py fails when an app/ file other than this one includes a src/
 * header. The quarrel binary links libquarrel.a, quarrel_dyn links libquarrel_dev.so: both have these
 * names (the installed libquarrel.so does not export them). */
#ifndef QR_APP_INTERNAL_H
#define QR_APP_INTERNAL_H

#include "quarrel.h"

#include "convert/quantize_model.h" /* qr_quantize_model, qr_ftype_names */
#include "convert/synth.h"          /* qr_synth_write, presets */
#include "flight/embed_batch.h"     /* Arrow record batches of embeddings */
#include "flight/flight_client.h"   /* DoPut / DoGet / search against Longbow */
#include "gguf/gguf.h"              /* GGUF metadata and tensor directory */
#include "model/model.h"            /* qr_model_backend (bench) */
#include "model/model_path.h"       /* qr_model_list, qr_models_dir (list, the --help model names) */
#include "server/keys.h"            /* the SQLite API key store */
#include "server/server.h"          /* qr_server_start / qr_server_stop */
#include "template/template.h"      /* qr_chat_render_json with tools, documents, extra variables */
#include "tokenizer/tokenizer.h"    /* qr_tokenizer_get_info, qr_tokenizer_eog_ids */
#include "util/util.h"              /* qr_errf */
#include "util/knobs.h"             /* QUARREL_FLIGHT_KEY */
#ifdef QUARREL_HAVE_CUDA
#include "backend/cuda/cuda_internal.h" /* qr_cuda_backend_device_name, qr_cuda_backend_graph_stats */
#endif

#endif /* QR_APP_INTERNAL_H */
