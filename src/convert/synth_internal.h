/* synth_internal.h — what the architecture rows of `quarrel synth` share between synth.c (the
 * writer, llama / gemma3 / bert rows) and synth_hybrid.c (the MoE and hybrid rows): the tensor list
 * and how each tensor is initialised. */
#ifndef QR_CONVERT_SYNTH_INTERNAL_H
#define QR_CONVERT_SYNTH_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "quant/types.h"
#include "convert/gguf_stream.h"
#include "convert/synth.h"

typedef enum init_kind {
    INIT_NORMAL,     /* scale * z, z ~ approximately N(0, 1), bounded to |z| < 3.47 */
    INIT_NORM,       /* center + scale * z (RMSNorm gains; also any value around a center) */
    INIT_ROPE_LLAMA3, /* Llama 3.1 rope frequency factors */
    INIT_ROPE_LONG,   /* LongRoPE long factors (phi3) */
    INIT_ROPE_SHORT,  /* LongRoPE short factors (phi3) */
    INIT_D2T,         /* eagle3's d2t: I64 target token ids of the draft vocabulary (qr_synth_eagle3_d2t) */
} init_kind;

typedef struct synth_tensor {
    char name[64];
    uint32_t n_dims;
    int64_t ne[QR_GGUF_MAX_DIMS]; /* unused dims = 1 */
    init_kind init;
    float scale;                  /* standard deviation of the random part */
    float center;                 /* INIT_NORM: mean gain */
    qr_type type;                 /* chosen by the quantization plan */
} synth_tensor;

typedef struct tensor_list {
    synth_tensor *t;
    size_t n, cap;
} tensor_list;

/* Appends a tensor named `name` of n_dims (1..3) dims {ne0, ne1, ne2} (unused = 1), initialised as
 * center + scale * z (INIT_NORM) or scale * z (INIT_NORMAL). False when out of memory. */
bool qr_synth_add(tensor_list *l, init_kind init, float scale, float center, uint32_t n_dims, int64_t ne0, int64_t ne1,
                  int64_t ne2, const char *name);

/* The MoE / hybrid rows (synth_hybrid.c): tensors and hyper-parameter keys of granite,
 * granitehybrid, nemotron_h, nemotron_h_moe, gpt-oss and llama with experts (Mixtral). */
bool qr_synth_hybrid_tensors(const qr_synth_preset *p, tensor_list *l);
void qr_synth_hybrid_hparams(const qr_synth_preset *p, qr_gguf_stream *s);

/* Writes {arch}.embedding_length, feed_forward_length, block_count, attention.head_count, head_count_kv and
 * layer_norm_rms_epsilon, in that order (synth_phi3.c). */
void qr_synth_shape_keys(const qr_synth_preset *p, qr_gguf_stream *s);

/* phi3 (synth_phi3.c): fused attn_qkv and gate|up ffn_up, LongRoPE factors and keys. */
bool qr_synth_phi3_tensors(const qr_synth_preset *p, tensor_list *l);
void qr_synth_phi3_hparams(const qr_synth_preset *p, qr_gguf_stream *s);

/* olmo2 and glm4 (synth_post.c): post-norm blocks; olmo2's q/k norms over all heads, glm4's fused gate|up. */
bool qr_synth_post_tensors(const qr_synth_preset *p, tensor_list *l);
void qr_synth_post_hparams(const qr_synth_preset *p, qr_gguf_stream *s);

/* deepseek2 (synth_deepseek2.c): multi-head latent attention (attn_kv_a_mqa, per-head attn_k_b / attn_v_b), leading
 * dense blocks, routed + shared experts. */
bool qr_synth_deepseek2_tensors(const qr_synth_preset *p, tensor_list *l);
void qr_synth_deepseek2_hparams(const qr_synth_preset *p, qr_gguf_stream *s);

/* llama's hyper-parameter keys under p->arch (synth.c; the eagle3 head's too). */
void qr_synth_llama_hparams(const qr_synth_preset *p, qr_gguf_stream *s);

/* EAGLE-3 heads (synth_eagle3.c). The head's preset from its target's preset and the options (QR_ERR_INVALID_ARG
 * naming a bad option); its tensors and keys; d2t's n ids (little-endian int64) into out. */
qr_status qr_synth_eagle3_preset(const qr_synth_preset *target, const qr_synth_eagle3_options *o, qr_synth_preset *head,
                                 char *err, size_t err_len);
bool qr_synth_eagle3_tensors(const qr_synth_preset *p, tensor_list *l);
void qr_synth_eagle3_hparams(const qr_synth_preset *p, qr_gguf_stream *s);
void qr_synth_eagle3_d2t(const qr_synth_preset *p, uint8_t *out, int64_t n);

#endif /* QR_CONVERT_SYNTH_INTERNAL_H */
