/* quantize_model.h — model file types (llama.cpp "ftypes"), per-tensor type choice as llama-quantize
 * makes it, and the `quarrel quantize` driver.
 *
 * File types follow llama-quantize's names and meaning: Q4_0 keeps output.weight at Q6_K, Q4_K_M
 * bumps attn_v/ffn_down of some layers to Q6_K, Q3_K / Q4_K / Q5_K are aliases of the _M mixes, and
 * a K-quant whose row length is not a multiple of 256 falls back (Q4_K -> Q5_0, Q5_K -> Q5_1,
 * Q6_K -> Q8_0, Q2_K/Q3_K -> Q4_0). `pure` (llama-quantize --pure) turns the mix rules off so that
 * every quantizable weight gets the base type (the fallback still applies). "MXFP4" is pure MXFP4
 * (llama.cpp's MXFP4_MOE would keep dense weights at Q8_0; that name is accepted too).
 * Which tensors are quantized at all: 2-D+ tensors whose name ends in "weight", except norms
 * ("_norm.weight"), MoE router inputs (ffn_gate_inp), position/type embeddings, ssm_conv1d and a
 * few other small ones; everything else keeps its type.
 */
#ifndef QR_CONVERT_QUANTIZE_MODEL_H
#define QR_CONVERT_QUANTIZE_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quant/types.h"
#include "quarrel.h"

/* One file type. */
typedef struct qr_ftype_info {
    const char *name;    /* "Q4_K_M" (what --type accepts, case-insensitive) */
    int32_t llama_ftype; /* value of general.file_type (llama.cpp's enum llama_ftype) */
    qr_type base;        /* default tensor type */
    bool pure;           /* no mix rules (MXFP4) */
    const char *alias_of; /* NULL, or the canonical name when this row is an alias */
} qr_ftype_info;

/* Looks a file type up by name (case-insensitive); aliases resolve to their canonical row.
 * NULL when unknown. */
const qr_ftype_info *qr_ftype_from_name(const char *name);
/* Comma-separated list of the accepted names, for usage messages. */
const char *qr_ftype_names(void);

/* Model facts the type rules need. */
typedef struct qr_quant_model_info {
    char arch[32];       /* general.architecture */
    int32_t n_layer;     /* {arch}.block_count */
    int32_t n_head;      /* {arch}.attention.head_count (layer 0) */
    int32_t n_head_kv;   /* {arch}.attention.head_count_kv (layer 0; = n_head when absent) */
    int32_t n_expert;    /* {arch}.expert_count (0 for dense) */
} qr_quant_model_info;

/* llama-quantize's per-model state. Feed the tensors to qr_quant_plan_pick in llama.cpp's order
 * (qr_quant_tensor_order_cmp): the counters follow that order. */
typedef struct qr_quant_plan {
    const qr_ftype_info *ftype;
    bool pure;
    qr_quant_model_info model;
    int32_t n_attention_wv;  /* attn_v / attn_qkv / attn_kv_b tensors in the model */
    bool has_output;         /* output.weight exists (else the embedding is tied and treated as output) */
    int32_t i_attention_wv, i_ffn_down, i_ffn_gate, i_ffn_up; /* counters, in pick order */
    int32_t n_fallback;      /* tensors that needed a fallback type */
} qr_quant_plan;

/* Prepares a plan for the tensors `names[0..n)` of a model. */
void qr_quant_plan_init(qr_quant_plan *p, const qr_ftype_info *ft, bool pure, const qr_quant_model_info *model,
                        const char *const *names, size_t n);

/* True when llama-quantize would quantize this tensor at all. */
bool qr_quant_tensor_allowed(const char *name, uint32_t n_dims);

/* The type this tensor gets. cur_type: its type in the source. ne: [n_dims] dims. When a fallback
 * happens and note != NULL, a one-line explanation is written to note (else note[0] = 0). */
qr_type qr_quant_plan_pick(qr_quant_plan *p, const char *name, uint32_t n_dims, const int64_t *ne, qr_type cur_type,
                           char *note, size_t note_len);

/* llama.cpp's tensor order (llama_model_loader::weight_name_comparer): tensors outside blocks first,
 * then by block number; by name within each group. strcmp-style result. */
int qr_quant_tensor_order_cmp(const char *a, const char *b);

/* ---- row conversion shared by synth and quantize --------------------------------------------- */

/* True when rows of `type` can be produced from floats (F32, F16, BF16 or a quant with from_float). */
bool qr_quant_can_encode(qr_type type);
/* True when rows of `type` can be turned into floats. */
bool qr_quant_can_decode(qr_type type);
/* Encodes n_rows rows of n_per_row floats into rows of `type` (reference quantizers). */
void qr_quant_encode_rows(qr_type type, const float *src, void *dst, int64_t n_rows, int64_t n_per_row);
/* Decodes n_rows rows of `type` into floats. */
void qr_quant_decode_rows(qr_type type, const void *src, float *dst, int64_t n_rows, int64_t n_per_row);

/* x[i] = the nearest F16 value of x[i] (what storing as F16 and reading back gives). */
void qr_quant_round_f16(float *x, int64_t n);

/* Runs fn(ctx, begin, end) over [0, n) split into contiguous ranges on up to n_threads threads
 * (the calling thread takes part). n_threads <= 1 runs inline. */
void qr_parallel_for(int n_threads, int64_t n, void (*fn)(void *ctx, int64_t begin, int64_t end), void *ctx);

/* ---- the driver ------------------------------------------------------------------------------ */

typedef struct qr_quantize_options {
    const char *ftype;       /* a name accepted by qr_ftype_from_name */
    bool pure;               /* --pure */
    bool allow_requantize;   /* accept already-quantized inputs (dequantized first; quality suffers) */
    int n_threads;           /* <= 0: all online CPUs */
    bool progress;           /* progress bar on stderr (only drawn when stderr is a TTY) */
    bool verbose;            /* one line per tensor on stderr */
} qr_quantize_options;

/* Summary of a run. */
typedef struct qr_quantize_stats {
    uint64_t bytes_in, bytes_out; /* tensor data bytes */
    uint64_t n_tensors, n_quantized, n_fallback;
    double seconds;
} qr_quantize_stats;

/* Reads GGUF `in_path`, writes `out_path` with every tensor converted as the plan says (streamed:
 * memory stays bounded by a few chunks of rows per thread). Key/values are copied; general.file_type
 * and general.quantization_version are set. stats may be NULL. */
qr_status qr_quantize_model(const char *in_path, const char *out_path, const qr_quantize_options *opt,
                            qr_quantize_stats *stats, char *err, size_t err_len);

#endif /* QR_CONVERT_QUANTIZE_MODEL_H */
