/* synth_presets.c — the preset table for `quarrel synth`. One row per (architecture, preset).
 * Shapes of the real-model presets follow /work/shared/anchors.md and the models' configs. */
#include <string.h>

#include "runtime/synth.h"

#define BPE QR_SYNTH_VOCAB_BPE
#define SPM QR_SYNTH_VOCAB_SPM

static const qr_synth_preset presets[] = {
    /* llama: a 2-layer model with GQA (2 query heads per kv head) and K-quant friendly widths */
    {.arch = "llama", .name = "tiny", .n_layer = 2, .n_embd = 256, .n_ff = 768, .n_head = 4, .n_head_kv = 2,
     .head_dim = 64, .n_vocab = 2000, .n_ctx = 2048, .rope_theta = 10000.0f, .rms_eps = 1e-5f, .vocab = BPE,
     .bpe_pre = "llama-bpe"},
    {.arch = "llama", .name = "smollm2-135m", .n_layer = 30, .n_embd = 576, .n_ff = 1536, .n_head = 9,
     .n_head_kv = 3, .head_dim = 64, .n_vocab = 49152, .n_ctx = 8192, .rope_theta = 100000.0f, .rms_eps = 1e-5f,
     .vocab = BPE, .bpe_pre = "llama-bpe"},
    {.arch = "llama", .name = "tinyllama-1.1b", .n_layer = 22, .n_embd = 2048, .n_ff = 5632, .n_head = 32,
     .n_head_kv = 4, .head_dim = 64, .n_vocab = 32000, .n_ctx = 2048, .rope_theta = 10000.0f, .rms_eps = 1e-5f,
     .vocab = BPE, .bpe_pre = "llama-bpe"},
    {.arch = "llama", .name = "mistral-7b", .n_layer = 32, .n_embd = 4096, .n_ff = 14336, .n_head = 32,
     .n_head_kv = 8, .head_dim = 128, .n_vocab = 32000, .n_ctx = 32768, .rope_theta = 1000000.0f, .rms_eps = 1e-5f,
     .vocab = BPE, .bpe_pre = "llama-bpe"},
    {.arch = "llama", .name = "llama3-8b", .n_layer = 32, .n_embd = 4096, .n_ff = 14336, .n_head = 32,
     .n_head_kv = 8, .head_dim = 128, .n_vocab = 128256, .n_ctx = 131072, .rope_theta = 500000.0f,
     .rms_eps = 1e-5f, .rope_scaling = QR_SYNTH_ROPE_LLAMA3, .rope_factor = 8.0f, .rope_low_freq_factor = 1.0f,
     .rope_high_freq_factor = 4.0f, .rope_orig_ctx = 8192, .vocab = BPE, .bpe_pre = "llama-bpe"},
    /* gemma3: 2 sliding-window layers, 4 query heads on 1 kv head, d_model 128 (not a multiple of 256,
     * so K-quants fall back as on the real 270m model), tied embeddings, SentencePiece vocabulary */
    {.arch = "gemma3", .name = "tiny", .n_layer = 2, .n_embd = 128, .n_ff = 512, .n_head = 4, .n_head_kv = 1,
     .head_dim = 64, .n_vocab = 1000, .n_ctx = 2048, .rope_theta = 1000000.0f, .rms_eps = 1e-6f,
     .tied_output = true, .sliding_window = 64, .vocab = SPM, .bpe_pre = "default"},
    /* more architectures (granite, mixtral, gpt-oss, nemotron_h, bert, ...) are added here as rows,
     * together with a row in synth.c's architecture table */
};

size_t qr_synth_n_presets(void) { return sizeof presets / sizeof presets[0]; }

const qr_synth_preset *qr_synth_preset_at(size_t i) { return i < qr_synth_n_presets() ? &presets[i] : NULL; }

const qr_synth_preset *qr_synth_find_preset(const char *arch, const char *name) {
    if (!name) return NULL;
    const qr_synth_preset *found = NULL;
    for (size_t i = 0; i < qr_synth_n_presets(); i++) {
        if (strcmp(presets[i].name, name)) continue;
        if (arch) {
            if (!strcmp(presets[i].arch, arch)) return &presets[i];
        } else {
            if (found) return NULL; /* ambiguous without an architecture */
            found = &presets[i];
        }
    }
    return found;
}
