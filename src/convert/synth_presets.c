/* synth_presets.c — the preset table for `quarrel synth`. One row per (architecture, preset).
 * Shapes of the real-model presets follow /work/shared/anchors.md and the models' configs. */
#include <string.h>

#include "convert/synth.h"

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
    /* Llama-3-70B's shape (tensor-parallel speed runs, issue 37): 80 layers, 64 query heads on 8 kv heads */
    {.arch = "llama", .name = "llama3-70b", .n_layer = 80, .n_embd = 8192, .n_ff = 28672, .n_head = 64,
     .n_head_kv = 8, .head_dim = 128, .n_vocab = 128256, .n_ctx = 131072, .rope_theta = 500000.0f,
     .rms_eps = 1e-5f, .rope_scaling = QR_SYNTH_ROPE_LLAMA3, .rope_factor = 8.0f, .rope_low_freq_factor = 1.0f,
     .rope_high_freq_factor = 4.0f, .rope_orig_ctx = 8192, .vocab = BPE, .bpe_pre = "llama-bpe"},
    /* gemma3: 2 sliding-window layers, 4 query heads on 1 kv head, d_model 128 (not a multiple of 256,
     * so K-quants fall back as on the real 270m model), tied embeddings, SentencePiece vocabulary */
    {.arch = "gemma3", .name = "tiny", .n_layer = 2, .n_embd = 128, .n_ff = 512, .n_head = 4, .n_head_kv = 1,
     .head_dim = 64, .n_vocab = 1000, .n_ctx = 2048, .rope_theta = 1000000.0f, .rms_eps = 1e-6f,
     .tied_output = true, .sliding_window = 64, .vocab = SPM, .bpe_pre = "default"},
    /* Gemma 3 270M's shapes (a draft or EAGLE-3 head for the real model: synth --tokenizer-from it) */
    {.arch = "gemma3", .name = "gemma3-270m", .n_layer = 18, .n_embd = 640, .n_ff = 2048, .n_head = 4, .n_head_kv = 1,
     .head_dim = 256, .n_vocab = 262144, .n_ctx = 32768, .rope_theta = 1000000.0f, .rms_eps = 1e-6f,
     .tied_output = true, .sliding_window = 512, .vocab = SPM, .bpe_pre = "default"},
    /* encoders for embeddings: bert (learned positions, biases; MiniLM-like widths) and nomic-bert
     * (fused qkv, NeoX rope base 1000, SwiGLU); byte-level BPE vocabulary (llama.cpp does not tie
     * the tokenizer to the architecture), rms_eps is the LayerNorm epsilon */
    {.arch = "bert", .name = "tiny", .n_layer = 2, .n_embd = 128, .n_ff = 512, .n_head = 4, .n_head_kv = 4,
     .head_dim = 32, .n_vocab = 1000, .n_ctx = 512, .rope_theta = 10000.0f, .rms_eps = 1e-12f, .vocab = BPE,
     .bpe_pre = "llama-bpe"},
    {.arch = "nomic-bert", .name = "tiny", .n_layer = 2, .n_embd = 128, .n_ff = 384, .n_head = 4, .n_head_kv = 4,
     .head_dim = 32, .n_vocab = 1000, .n_ctx = 2048, .rope_theta = 1000.0f, .rms_eps = 1e-12f, .vocab = BPE,
     .bpe_pre = "llama-bpe"},
    /* ---- MoE and hybrid families (synth_hybrid.c). tiny: reference tests; the others: the real models'
     * shapes (docs/models.md) for speed runs. ---- */
    /* Mixtral = llama + experts: 4 experts, top-2 */
    {.arch = "llama", .name = "mixtral-tiny", .n_layer = 2, .n_embd = 256, .n_ff = 512, .n_head = 4, .n_head_kv = 2,
     .head_dim = 64, .n_vocab = 2000, .n_ctx = 2048, .rope_theta = 1000000.0f, .rms_eps = 1e-5f, .vocab = BPE,
     .bpe_pre = "llama-bpe", .n_expert = 4, .n_expert_used = 2, .n_ff_exp = 512},
    {.arch = "llama", .name = "mixtral-8x7b", .n_layer = 32, .n_embd = 4096, .n_ff = 14336, .n_head = 32,
     .n_head_kv = 8, .head_dim = 128, .n_vocab = 32000, .n_ctx = 32768, .rope_theta = 1000000.0f, .rms_eps = 1e-5f,
     .vocab = BPE, .bpe_pre = "llama-bpe", .n_expert = 8, .n_expert_used = 2, .n_ff_exp = 14336},
    /* Mixtral-8x22B's shape (tensor-parallel speed runs): 56 layers, 48 query heads on 8 kv heads, 8 experts top-2 */
    {.arch = "llama", .name = "mixtral-8x22b", .n_layer = 56, .n_embd = 6144, .n_ff = 16384, .n_head = 48,
     .n_head_kv = 8, .head_dim = 128, .n_vocab = 32768, .n_ctx = 65536, .rope_theta = 1000000.0f, .rms_eps = 1e-5f,
     .vocab = BPE, .bpe_pre = "llama-bpe", .n_expert = 8, .n_expert_used = 2, .n_ff_exp = 16384},
    /* gpt-oss: biases, sinks, sliding window 32 on even layers, 4 experts top-2 with the clamped SwiGLU */
    {.arch = "gpt-oss", .name = "tiny", .n_layer = 2, .n_embd = 256, .n_ff = 256, .n_head = 4, .n_head_kv = 2,
     .head_dim = 64, .n_vocab = 2000, .n_ctx = 4096, .rope_theta = 150000.0f, .rms_eps = 1e-5f, .sliding_window = 32,
     .vocab = BPE, .bpe_pre = "llama-bpe", .n_expert = 4, .n_expert_used = 2, .n_ff_exp = 256},
    {.arch = "gpt-oss", .name = "gpt-oss-20b", .n_layer = 24, .n_embd = 2880, .n_ff = 2880, .n_head = 64,
     .n_head_kv = 8, .head_dim = 64, .n_vocab = 201088, .n_ctx = 131072, .rope_theta = 150000.0f, .rms_eps = 1e-5f,
     .sliding_window = 128, .vocab = BPE, .bpe_pre = "llama-bpe", .n_expert = 32, .n_expert_used = 4,
     .n_ff_exp = 2880, .yarn_factor = 32.0f, .yarn_orig_ctx = 4096},
    /* granite 3.x: llama + multipliers */
    {.arch = "granite", .name = "tiny", .n_layer = 2, .n_embd = 256, .n_ff = 512, .n_head = 4, .n_head_kv = 2,
     .head_dim = 64, .n_vocab = 2000, .n_ctx = 4096, .rope_theta = 10000.0f, .rms_eps = 1e-5f, .vocab = BPE,
     .bpe_pre = "llama-bpe", .embedding_scale = 12.0f, .residual_scale = 0.22f, .logit_scale = 0.5f,
     .attention_scale = 0.015625f},
    /* granitehybrid (Granite 4.0-H): Mamba2 + NoPE attention, MoE + shared expert after every mixer (expert and
     * shared widths differ, as in the real model, so that a mix-up of the two shows) */
    {.arch = "granitehybrid", .name = "tiny", .n_layer = 4, .n_embd = 256, .n_ff = 256, .n_head = 4, .n_head_kv = 1,
     .head_dim = 64, .n_vocab = 2000, .n_ctx = 4096, .rope_theta = 10000.0f, .rms_eps = 1e-5f, .vocab = BPE,
     .bpe_pre = "llama-bpe", .n_expert = 4, .n_expert_used = 2, .n_ff_exp = 256, .n_ff_shexp = 384,
     .layers = "MMAM", .ssm_d_conv = 4, .ssm_d_inner = 512, .ssm_d_state = 32, .ssm_n_head = 8, .ssm_n_group = 2,
     .embedding_scale = 12.0f, .residual_scale = 0.22f, .logit_scale = 0.5f, .attention_scale = 0.015625f,
     .no_rope = true},
    /* llama.cpp sizes granitehybrid's experts by feed_forward_length (512 here), the shared expert by
     * expert_shared_feed_forward_length */
    {.arch = "granitehybrid", .name = "granite-4.0-h-tiny", .n_layer = 40, .n_embd = 1536, .n_ff = 512, .n_head = 12,
     .n_head_kv = 4, .head_dim = 128, .n_vocab = 100352, .n_ctx = 131072, .rope_theta = 10000.0f, .rms_eps = 1e-5f,
     .vocab = BPE, .bpe_pre = "llama-bpe", .n_expert = 64, .n_expert_used = 6, .n_ff_exp = 512, .n_ff_shexp = 1024,
     .layers = "MMMMMAMMMMMMMMMAMMMMMMMMMAMMMMMMMMMAMMMM", .ssm_d_conv = 4, .ssm_d_inner = 3072, .ssm_d_state = 128,
     .ssm_n_head = 48, .ssm_n_group = 1, .embedding_scale = 12.0f, .residual_scale = 0.22f, .logit_scale = 6.0f,
     .attention_scale = 0.0078125f, .no_rope = true},
    /* nemotron (Nemotron-Mini): LayerNorm with biases, rope on half of each head, relu^2 FFN; rms_eps is the
     * LayerNorm epsilon */
    {.arch = "nemotron", .name = "tiny", .n_layer = 2, .n_embd = 256, .n_ff = 512, .n_head = 4, .n_head_kv = 2,
     .head_dim = 64, .n_vocab = 2000, .n_ctx = 4096, .rope_theta = 10000.0f, .rms_eps = 1e-5f, .vocab = BPE,
     .bpe_pre = "llama-bpe"},
    /* nemotron_h: Mamba2 / relu^2 FFN / attention (no rope) blocks */
    {.arch = "nemotron_h", .name = "tiny", .n_layer = 4, .n_embd = 256, .n_ff = 512, .n_head = 4, .n_head_kv = 2,
     .head_dim = 64, .n_vocab = 2000, .n_ctx = 4096, .rms_eps = 1e-5f, .vocab = BPE, .bpe_pre = "llama-bpe",
     .layers = "MFAF", .ssm_d_conv = 4, .ssm_d_inner = 512, .ssm_d_state = 32, .ssm_n_head = 8, .ssm_n_group = 2},
    /* nemotron_h_moe (Nemotron-3-Nano): sigmoid-routed MoE blocks with a selection bias and a shared expert */
    {.arch = "nemotron_h_moe", .name = "tiny", .n_layer = 4, .n_embd = 256, .n_ff = 256, .n_head = 4, .n_head_kv = 2,
     .head_dim = 64, .n_vocab = 2000, .n_ctx = 4096, .rms_eps = 1e-5f, .vocab = BPE, .bpe_pre = "llama-bpe",
     .n_expert = 8, .n_expert_used = 2, .n_ff_exp = 256, .n_ff_shexp = 384, .layers = "MEAE", .ssm_d_conv = 4,
     .ssm_d_inner = 512, .ssm_d_state = 32, .ssm_n_head = 8, .ssm_n_group = 2},
    {.arch = "nemotron_h_moe", .name = "nemotron-3-nano-30b-a3b", .n_layer = 52, .n_embd = 2688, .n_ff = 1856,
     .n_head = 32, .n_head_kv = 2, .head_dim = 128, .n_vocab = 131072, .n_ctx = 262144, .rms_eps = 1e-5f,
     .vocab = BPE, .bpe_pre = "llama-bpe", .n_expert = 128, .n_expert_used = 6, .n_ff_exp = 1856, .n_ff_shexp = 3712,
     .layers = "MEMEMAEMEMEMAEMEMEMAEMEMEMAEMEMEMAEMEMEMEMAEMEMEMEME", .ssm_d_conv = 4, .ssm_d_inner = 4096,
     .ssm_d_state = 128, .ssm_n_head = 64, .ssm_n_group = 8},
    /* ---- the Qwen family (synth_hybrid.c): NeoX rope, the qwen2 pre-tokenizer. tiny: reference tests
     * (K-quant friendly widths); the others: the real models' shapes (docs/models.md) for speed runs ---- */
    /* qwen2: q/k/v biases, tied embeddings (as Qwen2.5 0.5B-3B) */
    {.arch = "qwen2", .name = "tiny", .n_layer = 2, .n_embd = 256, .n_ff = 768, .n_head = 4, .n_head_kv = 2,
     .head_dim = 64, .n_vocab = 2000, .n_ctx = 4096, .rope_theta = 1000000.0f, .rms_eps = 1e-6f, .tied_output = true,
     .vocab = BPE, .bpe_pre = "qwen2"},
    {.arch = "qwen2", .name = "qwen2.5-7b", .n_layer = 28, .n_embd = 3584, .n_ff = 18944, .n_head = 28,
     .n_head_kv = 4, .head_dim = 128, .n_vocab = 152064, .n_ctx = 32768, .rope_theta = 1000000.0f, .rms_eps = 1e-6f,
     .vocab = BPE, .bpe_pre = "qwen2"},
    /* qwen3: per-head q/k norms; head_dim 128 is not n_embd / n_head (as Qwen3-0.6B's) */
    {.arch = "qwen3", .name = "tiny", .n_layer = 2, .n_embd = 256, .n_ff = 768, .n_head = 4, .n_head_kv = 2,
     .head_dim = 128, .n_vocab = 2000, .n_ctx = 4096, .rope_theta = 1000000.0f, .rms_eps = 1e-6f, .vocab = BPE,
     .bpe_pre = "qwen2"},
    {.arch = "qwen3", .name = "qwen3-8b", .n_layer = 36, .n_embd = 4096, .n_ff = 12288, .n_head = 32,
     .n_head_kv = 8, .head_dim = 128, .n_vocab = 151936, .n_ctx = 40960, .rope_theta = 1000000.0f, .rms_eps = 1e-6f,
     .vocab = BPE, .bpe_pre = "qwen2"},
    /* qwen3moe: qwen3 attention, top-8 of 128 experts, normalised weights, no shared expert */
    {.arch = "qwen3moe", .name = "tiny", .n_layer = 2, .n_embd = 256, .n_ff = 768, .n_head = 4, .n_head_kv = 2,
     .head_dim = 128, .n_vocab = 2000, .n_ctx = 4096, .rope_theta = 1000000.0f, .rms_eps = 1e-6f, .vocab = BPE,
     .bpe_pre = "qwen2", .n_expert = 128, .n_expert_used = 8, .n_ff_exp = 256},
    {.arch = "qwen3moe", .name = "qwen3-30b-a3b", .n_layer = 48, .n_embd = 2048, .n_ff = 6144, .n_head = 32,
     .n_head_kv = 4, .head_dim = 128, .n_vocab = 151936, .n_ctx = 40960, .rope_theta = 1000000.0f, .rms_eps = 1e-6f,
     .vocab = BPE, .bpe_pre = "qwen2", .n_expert = 128, .n_expert_used = 8, .n_ff_exp = 768},
    /* qwen2moe: qwen2 attention (here without GQA, as Qwen1.5-MoE), top-4 experts with unnormalised weights and a
     * sigmoid-gated shared expert of another width */
    {.arch = "qwen2moe", .name = "tiny", .n_layer = 2, .n_embd = 256, .n_ff = 768, .n_head = 4, .n_head_kv = 4,
     .head_dim = 64, .n_vocab = 2000, .n_ctx = 4096, .rope_theta = 1000000.0f, .rms_eps = 1e-6f, .vocab = BPE,
     .bpe_pre = "qwen2", .n_expert = 16, .n_expert_used = 4, .n_ff_exp = 256, .n_ff_shexp = 512},
    {.arch = "qwen2moe", .name = "qwen1.5-moe-a2.7b", .n_layer = 24, .n_embd = 2048, .n_ff = 5632, .n_head = 16,
     .n_head_kv = 16, .head_dim = 128, .n_vocab = 151936, .n_ctx = 8192, .rope_theta = 1000000.0f, .rms_eps = 1e-6f,
     .vocab = BPE, .bpe_pre = "qwen2", .n_expert = 60, .n_expert_used = 4, .n_ff_exp = 1408, .n_ff_shexp = 5632},
    /* ---- issue 30 part 2: phi3, gemma2, rope scaling. tiny: reference tests; the others: the real models'
     * shapes (docs/models.md) for speed runs ---- */
    /* phi3: fused qkv / gate|up, LongRoPE (original context 1024 < 4096: a context over 1024 takes the long
     * factors, in llama.cpp as here), 3/4 of each head rotated as in Phi-4-mini, window in the metadata only */
    {.arch = "phi3", .name = "tiny", .n_layer = 2, .n_embd = 256, .n_ff = 512, .n_head = 4, .n_head_kv = 2,
     .head_dim = 64, .n_vocab = 2000, .n_ctx = 4096, .rope_theta = 10000.0f, .rms_eps = 1e-5f, .vocab = BPE,
     .bpe_pre = "llama-bpe", .rope_scaling = QR_SYNTH_ROPE_LONGROPE, .rope_factor = 16.0f, .rope_orig_ctx = 1024,
     .n_rot = 48, .sliding_window = 262144},
    /* the long-context rope checks (tests/ref/test_long_rope.py): one layer, 32k context */
    {.arch = "phi3", .name = "long-tiny", .n_layer = 1, .n_embd = 128, .n_ff = 256, .n_head = 2, .n_head_kv = 1,
     .head_dim = 64, .n_vocab = 1000, .n_ctx = 32768, .rope_theta = 10000.0f, .rms_eps = 1e-5f, .vocab = BPE,
     .bpe_pre = "llama-bpe", .rope_scaling = QR_SYNTH_ROPE_LONGROPE, .rope_factor = 32.0f, .rope_orig_ctx = 4096,
     .n_rot = 48},
    {.arch = "phi3", .name = "phi-4-mini", .n_layer = 32, .n_embd = 3072, .n_ff = 8192, .n_head = 24, .n_head_kv = 8,
     .head_dim = 128, .n_vocab = 200064, .n_ctx = 131072, .rope_theta = 10000.0f, .rms_eps = 1e-5f, .vocab = BPE,
     .bpe_pre = "llama-bpe", .tied_output = true, .rope_scaling = QR_SYNTH_ROPE_LONGROPE, .rope_factor = 64.0f,
     .rope_orig_ctx = 4096, .n_rot = 96, .sliding_window = 262144},
    /* gemma2: sliding window on even layers, attention and final softcapping, tied embeddings, SentencePiece */
    {.arch = "gemma2", .name = "tiny", .n_layer = 2, .n_embd = 256, .n_ff = 512, .n_head = 4, .n_head_kv = 2,
     .head_dim = 64, .n_vocab = 1000, .n_ctx = 8192, .rope_theta = 10000.0f, .rms_eps = 1e-6f, .tied_output = true,
     .sliding_window = 64, .vocab = SPM, .bpe_pre = "default", .attn_softcap = 50.0f, .final_softcap = 30.0f},
    {.arch = "gemma2", .name = "gemma2-9b", .n_layer = 42, .n_embd = 3584, .n_ff = 14336, .n_head = 16,
     .n_head_kv = 8, .head_dim = 256, .n_vocab = 256000, .n_ctx = 8192, .rope_theta = 10000.0f, .rms_eps = 1e-6f,
     .tied_output = true, .sliding_window = 4096, .vocab = SPM, .bpe_pre = "default", .attn_softcap = 50.0f,
     .final_softcap = 30.0f},
    /* Llama 3.1's rope_freqs and YaRN on the tiny llama (factor 8 over an original context of 1024; the long
     * variants: one layer, 32k context, for positions 8k-32k) */
    {.arch = "llama", .name = "llama3-tiny", .n_layer = 2, .n_embd = 256, .n_ff = 768, .n_head = 4, .n_head_kv = 2,
     .head_dim = 64, .n_vocab = 2000, .n_ctx = 8192, .rope_theta = 500000.0f, .rms_eps = 1e-5f, .vocab = BPE,
     .bpe_pre = "llama-bpe", .rope_scaling = QR_SYNTH_ROPE_LLAMA3, .rope_factor = 8.0f, .rope_low_freq_factor = 1.0f,
     .rope_high_freq_factor = 4.0f, .rope_orig_ctx = 1024},
    {.arch = "llama", .name = "yarn-tiny", .n_layer = 2, .n_embd = 256, .n_ff = 768, .n_head = 4, .n_head_kv = 2,
     .head_dim = 64, .n_vocab = 2000, .n_ctx = 8192, .rope_theta = 10000.0f, .rms_eps = 1e-5f, .vocab = BPE,
     .bpe_pre = "llama-bpe", .yarn_factor = 8.0f, .yarn_orig_ctx = 1024},
    {.arch = "llama", .name = "llama3-long-tiny", .n_layer = 1, .n_embd = 128, .n_ff = 256, .n_head = 2,
     .n_head_kv = 1, .head_dim = 64, .n_vocab = 1000, .n_ctx = 32768, .rope_theta = 500000.0f, .rms_eps = 1e-5f,
     .vocab = BPE, .bpe_pre = "llama-bpe", .rope_scaling = QR_SYNTH_ROPE_LLAMA3, .rope_factor = 8.0f,
     .rope_low_freq_factor = 1.0f, .rope_high_freq_factor = 4.0f, .rope_orig_ctx = 4096},
    {.arch = "llama", .name = "yarn-long-tiny", .n_layer = 1, .n_embd = 128, .n_ff = 256, .n_head = 2, .n_head_kv = 1,
     .head_dim = 64, .n_vocab = 1000, .n_ctx = 32768, .rope_theta = 10000.0f, .rms_eps = 1e-5f, .vocab = BPE,
     .bpe_pre = "llama-bpe", .yarn_factor = 8.0f, .yarn_orig_ctx = 4096},
    /* ---- issue 30 part 3: olmo2, granitemoe, glm4. tiny: reference tests; the others: the real models' shapes
     * (docs/models.md) for speed runs ---- */
    /* olmo2: no input norms, q/k norms over all heads; olmo3-tiny: OLMo 3's sliding window (3 layers of 4) with
     * YaRN on the full-attention layers only */
    {.arch = "olmo2", .name = "tiny", .n_layer = 2, .n_embd = 256, .n_ff = 768, .n_head = 4, .n_head_kv = 4,
     .head_dim = 64, .n_vocab = 2000, .n_ctx = 4096, .rope_theta = 500000.0f, .rms_eps = 1e-6f, .vocab = BPE,
     .bpe_pre = "dbrx"},
    {.arch = "olmo2", .name = "olmo3-tiny", .n_layer = 4, .n_embd = 256, .n_ff = 768, .n_head = 4, .n_head_kv = 2,
     .head_dim = 64, .n_vocab = 2000, .n_ctx = 8192, .rope_theta = 500000.0f, .rms_eps = 1e-6f, .vocab = BPE,
     .bpe_pre = "dbrx", .sliding_window = 64, .yarn_factor = 8.0f, .yarn_orig_ctx = 1024},
    {.arch = "olmo2", .name = "olmo2-7b", .n_layer = 32, .n_embd = 4096, .n_ff = 11008, .n_head = 32,
     .n_head_kv = 32, .head_dim = 128, .n_vocab = 100352, .n_ctx = 4096, .rope_theta = 500000.0f, .rms_eps = 1e-6f,
     .vocab = BPE, .bpe_pre = "dbrx"},
    /* granitemoe (Granite 3.x MoE): granite's multipliers, experts sized by feed_forward_length, top-8 */
    {.arch = "granitemoe", .name = "tiny", .n_layer = 2, .n_embd = 256, .n_ff = 256, .n_head = 4, .n_head_kv = 2,
     .head_dim = 64, .n_vocab = 2000, .n_ctx = 4096, .rope_theta = 10000.0f, .rms_eps = 1e-6f, .vocab = BPE,
     .bpe_pre = "refact", .n_expert = 16, .n_expert_used = 4, .n_ff_exp = 256, .embedding_scale = 12.0f,
     .residual_scale = 0.22f, .logit_scale = 6.0f, .attention_scale = 0.015625f},
    {.arch = "granitemoe", .name = "granite-3.1-3b-a800m", .n_layer = 32, .n_embd = 1536, .n_ff = 512, .n_head = 24,
     .n_head_kv = 8, .head_dim = 64, .n_vocab = 49155, .n_ctx = 131072, .rope_theta = 10000000.0f, .rms_eps = 1e-6f,
     .vocab = BPE, .bpe_pre = "refact", .tied_output = true, .n_expert = 40, .n_expert_used = 8, .n_ff_exp = 512,
     .embedding_scale = 12.0f, .residual_scale = 0.22f, .logit_scale = 6.0f, .attention_scale = 0.015625f},
    /* glm4 (GLM-4-0414): pre- and post-norms, q/k/v biases, normal rope on half of each head, fused gate|up */
    {.arch = "glm4", .name = "tiny", .n_layer = 2, .n_embd = 256, .n_ff = 768, .n_head = 4, .n_head_kv = 2,
     .head_dim = 64, .n_vocab = 2000, .n_ctx = 4096, .rope_theta = 10000.0f, .rms_eps = 1e-5f, .vocab = BPE,
     .bpe_pre = "glm4", .n_rot = 32},
    {.arch = "glm4", .name = "glm4-9b", .n_layer = 40, .n_embd = 4096, .n_ff = 13696, .n_head = 32, .n_head_kv = 2,
     .head_dim = 128, .n_vocab = 151552, .n_ctx = 32768, .rope_theta = 10000.0f, .rms_eps = 1e-5f, .vocab = BPE,
     .bpe_pre = "glm4", .n_rot = 64},
    /* mistral3 (Ministral 3): llama with YaRN (its own ramp bounds and mscale_all_dim; other values than the real
     * 32 / 1 / 1 here, so that reading them shows) and llama 4's attention temperature, tekken pre-tokenizer */
    {.arch = "mistral3", .name = "tiny", .n_layer = 2, .n_embd = 256, .n_ff = 768, .n_head = 4, .n_head_kv = 2,
     .head_dim = 64, .n_vocab = 2000, .n_ctx = 8192, .rope_theta = 1000000.0f, .rms_eps = 1e-5f, .vocab = BPE,
     .bpe_pre = "tekken", .yarn_factor = 8.0f, .yarn_orig_ctx = 1024, .yarn_beta_fast = 24.0f, .yarn_beta_slow = 2.0f,
     .yarn_log_mul = 0.8f, .attn_temp_scale = 0.1f},
    {.arch = "mistral3", .name = "ministral-3-8b", .n_layer = 34, .n_embd = 4096, .n_ff = 14336, .n_head = 32,
     .n_head_kv = 8, .head_dim = 128, .n_vocab = 131072, .n_ctx = 262144, .rope_theta = 1000000.0f, .rms_eps = 1e-5f,
     .vocab = BPE, .bpe_pre = "tekken", .yarn_factor = 16.0f, .yarn_orig_ctx = 16384, .yarn_beta_fast = 32.0f,
     .yarn_beta_slow = 1.0f, .yarn_log_mul = 1.0f, .attn_temp_scale = 0.1f},
    /* more architectures are added here as rows,
     * together with a row in synth.c's architecture table */
    /* ---- deepseek2 (synth_deepseek2.c): multi-head latent attention. tiny: q through the low-rank pair, sigmoid
     * routing with a selection bias over 4 groups of 2 experts (2 used), normalised and scaled weights, YaRN with
     * DeepSeek's mscale (V3 / Moonlight-style); lite-tiny: attn_q, softmax routing, two shared experts (V2-Lite-style);
     * deepseek-v2-lite: the real model's shape. head_dim = key_length_mla (nope + rope). ---- */
    {.arch = "deepseek2", .name = "tiny", .n_layer = 3, .n_embd = 256, .n_ff = 512, .n_head = 4, .n_head_kv = 1,
     .head_dim = 96, .n_rot = 32, .v_head_dim = 64, .q_lora = 128, .kv_lora = 128, .n_vocab = 2000, .n_ctx = 4096,
     .rope_theta = 10000.0f, .rms_eps = 1e-6f, .vocab = BPE, .bpe_pre = "llama-bpe", .n_expert = 8,
     .n_expert_used = 2, .n_ff_exp = 256, .n_expert_shared = 1, .n_dense_lead = 1, .n_expert_groups = 4,
     .n_group_used = 2, .gating_func = 2, .expert_weights_norm = true, .expert_weights_scale = 2.5f,
     .yarn_factor = 4.0f, .yarn_orig_ctx = 1024, .yarn_log_mul = 0.0707f},
    {.arch = "deepseek2", .name = "lite-tiny", .n_layer = 2, .n_embd = 256, .n_ff = 512, .n_head = 4, .n_head_kv = 1,
     .head_dim = 96, .n_rot = 32, .v_head_dim = 64, .q_lora = 0, .kv_lora = 128, .n_vocab = 2000, .n_ctx = 4096,
     .rope_theta = 10000.0f, .rms_eps = 1e-6f, .vocab = BPE, .bpe_pre = "llama-bpe", .n_expert = 8,
     .n_expert_used = 3, .n_ff_exp = 128, .n_expert_shared = 2, .n_dense_lead = 1, .gating_func = 1},
    {.arch = "deepseek2", .name = "deepseek-v2-lite", .n_layer = 27, .n_embd = 2048, .n_ff = 10944, .n_head = 16,
     .n_head_kv = 1, .head_dim = 192, .n_rot = 64, .v_head_dim = 128, .q_lora = 0, .kv_lora = 512, .n_vocab = 102400,
     .n_ctx = 163840, .rope_theta = 10000.0f, .rms_eps = 1e-6f, .vocab = BPE, .bpe_pre = "deepseek-llm",
     .n_expert = 64, .n_expert_used = 6, .n_ff_exp = 1408, .n_expert_shared = 2, .n_dense_lead = 1,
     .gating_func = 1, .yarn_factor = 40.0f, .yarn_orig_ctx = 4096, .yarn_log_mul = 0.0707f},
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
