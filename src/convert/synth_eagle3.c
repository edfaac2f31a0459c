/* synth_eagle3.c — `quarrel synth --arch eagle3`: an EAGLE-3 speculative-decoding head for a synth target preset,
 * laid out as llama.cpp's converter writes one (general.architecture "eagle3"; docs/architecture.md, "Speculative
 * decoding"): fc {3 Ht, E}, [enc.output_norm {3 Ht}], [token_embd {E, Vt}], one layer (attn_norm, attn_norm_2, q / k
 * / v reading 2 E, attn_output, ffn_norm, gate / up / down), output_norm, [output {E, Vd}], [d2t {Vd} I64], and the
 * target preset's tokenizer, so that the head pairs with `synth --arch TARGET --preset P`. Weights are random (the
 * writer's deterministic generator), so the head drafts nothing useful: it exists to test loading and pairing. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "convert/synth_internal.h"
#include "util/util.h"

#define NORM_SCALE 0.1f

static float inv_sqrtf(int64_t n) { return (float)(1.0 / sqrt((double)n)); }

qr_status qr_synth_eagle3_preset(const qr_synth_preset *t, const qr_synth_eagle3_options *o, qr_synth_preset *h,
                                 char *err, size_t err_len) {
    const uint32_t L = t->n_layer, vt = t->n_vocab;
    if (o->n_embd < 0 || o->n_embd > (1 << 16))
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "synth: eagle3: head width %d is outside 1..65536", o->n_embd);
    if (o->draft_vocab < 0 || (uint32_t)o->draft_vocab > vt)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG,
                       "synth: eagle3: a draft vocabulary of %d tokens: 1 to %u (the target preset %s/%s's) expected",
                       o->draft_vocab, vt, t->arch, t->name);
    if (o->no_output && o->draft_vocab > 0 && (uint32_t)o->draft_vocab != vt)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG,
                       "synth: eagle3: without an output matrix the head shares the target's over its whole vocabulary "
                       "(%u tokens): no draft vocabulary of %d", vt, o->draft_vocab);
    const uint32_t vd = o->draft_vocab > 0 ? (uint32_t)o->draft_vocab : o->no_output ? vt : vt / 2;
    /* the converter's [2, L/2, L-3], which leaves the layers for L < 6: then the first, middle and last */
    const int32_t n = (int32_t)L;
    const int32_t layers[3] = {n >= 6 ? 2 : 0, n / 2, n >= 6 ? n - 3 : n - 1};
    *h = (qr_synth_preset){
        .arch = "eagle3", .name = t->name, .n_layer = 1, .n_embd = o->n_embd > 0 ? (uint32_t)o->n_embd : t->n_embd,
        .n_ff = t->n_ff, .n_head = t->n_head, .n_head_kv = t->n_head_kv, .head_dim = t->head_dim, .n_vocab = vt,
        .n_ctx = t->n_ctx, .rope_theta = t->rope_theta > 1.0f ? t->rope_theta : 10000.0f, .rms_eps = t->rms_eps,
        .vocab = t->vocab, .bpe_pre = t->bpe_pre, .e3_target_embd = t->n_embd,
        .e3_target_layers = {layers[0], layers[1], layers[2]}, .e3_draft_vocab = vd,
        .e3_no_token_embd = o->no_token_embd, .e3_no_output = o->no_output, .e3_norm_before_fc = o->norm_before_fc};
    if (t->rope_scaling == QR_SYNTH_ROPE_LLAMA3) { /* llama3 rope scaling: the head's rope_freqs, as the converter's */
        h->rope_scaling = t->rope_scaling;
        h->rope_factor = t->rope_factor;
        h->rope_low_freq_factor = t->rope_low_freq_factor;
        h->rope_high_freq_factor = t->rope_high_freq_factor;
        h->rope_orig_ctx = t->rope_orig_ctx;
    }
    return QR_OK;
}

bool qr_synth_eagle3_tensors(const qr_synth_preset *p, tensor_list *l) {
    const int64_t d = p->n_embd, f3 = 3 * (int64_t)p->e3_target_embd, q = (int64_t)p->n_head * p->head_dim,
                  kv = (int64_t)p->n_head_kv * p->head_dim, ff = p->n_ff;
    bool ok = qr_synth_add(l, INIT_NORMAL, inv_sqrtf(f3), 0.0f, 2, f3, d, 1, "fc.weight");
    if (p->e3_norm_before_fc) ok = ok && qr_synth_add(l, INIT_NORM, NORM_SCALE, 1.0f, 1, f3, 1, 1, "enc.output_norm.weight");
    if (!p->e3_no_token_embd) ok = ok && qr_synth_add(l, INIT_NORMAL, 1.0f, 0.0f, 2, d, p->n_vocab, 1, "token_embd.weight");
    if (p->rope_scaling == QR_SYNTH_ROPE_LLAMA3)
        ok = ok && qr_synth_add(l, INIT_ROPE_LLAMA3, 0.0f, 0.0f, 1, p->head_dim / 2, 1, 1, "rope_freqs.weight");
    ok = ok && qr_synth_add(l, INIT_NORM, NORM_SCALE, 1.0f, 1, d, 1, 1, "blk.0.attn_norm.weight");
    ok = ok && qr_synth_add(l, INIT_NORM, NORM_SCALE, 1.0f, 1, d, 1, 1, "blk.0.attn_norm_2.weight");
    ok = ok && qr_synth_add(l, INIT_NORMAL, inv_sqrtf(2 * d), 0.0f, 2, 2 * d, q, 1, "blk.0.attn_q.weight");
    ok = ok && qr_synth_add(l, INIT_NORMAL, inv_sqrtf(2 * d), 0.0f, 2, 2 * d, kv, 1, "blk.0.attn_k.weight");
    ok = ok && qr_synth_add(l, INIT_NORMAL, inv_sqrtf(2 * d), 0.0f, 2, 2 * d, kv, 1, "blk.0.attn_v.weight");
    ok = ok && qr_synth_add(l, INIT_NORMAL, inv_sqrtf(q), 0.0f, 2, q, d, 1, "blk.0.attn_output.weight");
    ok = ok && qr_synth_add(l, INIT_NORM, NORM_SCALE, 1.0f, 1, d, 1, 1, "blk.0.ffn_norm.weight");
    ok = ok && qr_synth_add(l, INIT_NORMAL, inv_sqrtf(d), 0.0f, 2, d, ff, 1, "blk.0.ffn_gate.weight");
    ok = ok && qr_synth_add(l, INIT_NORMAL, inv_sqrtf(d), 0.0f, 2, d, ff, 1, "blk.0.ffn_up.weight");
    ok = ok && qr_synth_add(l, INIT_NORMAL, inv_sqrtf(ff), 0.0f, 2, ff, d, 1, "blk.0.ffn_down.weight");
    ok = ok && qr_synth_add(l, INIT_NORM, NORM_SCALE, 1.0f, 1, d, 1, 1, "output_norm.weight");
    if (!p->e3_no_output)
        ok = ok && qr_synth_add(l, INIT_NORMAL, 2.0f * inv_sqrtf(d), 0.0f, 2, d, p->e3_draft_vocab, 1, "output.weight");
    if (p->e3_draft_vocab != p->n_vocab) ok = ok && qr_synth_add(l, INIT_D2T, 0.0f, 0.0f, 1, p->e3_draft_vocab, 1, 1, "d2t");
    return ok;
}

void qr_synth_eagle3_hparams(const qr_synth_preset *p, qr_gguf_stream *s) {
    char k[128];
#define KEY(suffix) (snprintf(k, sizeof k, "%s.%s", p->arch, suffix), k)
    qr_synth_llama_hparams(p, s); /* context_length ... vocab_size, as the converter's llama class writes them */
    qr_gguf_stream_set_arr(s, KEY("target_layers"), QR_GGUF_I32, p->e3_target_layers, 3);
    qr_gguf_stream_set_u32(s, KEY("target_hidden_size"), p->e3_target_embd);
    qr_gguf_stream_set_bool(s, KEY("norm_before_residual"), false);
    if (p->e3_norm_before_fc) qr_gguf_stream_set_bool(s, KEY("norm_before_fc"), true);
#undef KEY
}

void qr_synth_eagle3_d2t(const qr_synth_preset *p, uint8_t *out, int64_t n) {
    /* an ascending spread over the target's vocabulary (a real d2t holds the most frequent tokens in id order):
     * draft id i -> target id floor(i * Vt / Vd), distinct because Vd <= Vt */
    for (int64_t i = 0; i < n; i++) {
        const int64_t id = i * (int64_t)p->n_vocab / (int64_t)p->e3_draft_vocab;
        memcpy(out + (size_t)i * sizeof id, &id, sizeof id); /* little-endian hosts, as GGUF stores it */
    }
}
