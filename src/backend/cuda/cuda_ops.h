/* cuda_ops.h — internals of the CUDA backend shared by its .cu files: the device views of weights and
 * activations, and the extern "C" launchers of every kernel (one .cu file per op family).
 *
 * Every launcher enqueues its work on `stream` and returns the launch status (cudaGetLastError()), so
 * the backend can record the first failure without a host synchronisation. No launcher allocates.
 */
#ifndef QR_CUDA_OPS_H
#define QR_CUDA_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "backend/backend.h"

/* A weight as the kernels see it after weight_prepare. Quantized rows are split into "planes": the
 * packed codes of every block (p0, a multiple of 16 bytes per block, so they load with 16-byte
 * loads) and its scales (p1, p2). Block g of the matrix (g = row * nb + block) has its codes at
 * p0 + g * sizes[0], and so on. F32/F16/BF16 rows are kept as they are in p0. */
typedef struct cuda_wview {
    int32_t type;          /* qr_type */
    int64_t k;             /* row length (elements) */
    int64_t n;             /* rows (ne[1] * ne[2] * ne[3]) */
    int64_t nb;            /* blocks per row (k / block size; for float types k / 8 (F16, BF16) or k / 4 (F32)) */
    const uint8_t *p0;     /* [n * nb][sizes[0]] codes (or the raw rows of a float type) */
    const uint8_t *p1;     /* [n * nb][sizes[1]] scales, or NULL */
    const uint8_t *p2;     /* [n * nb][sizes[2]] second scale plane, or NULL */
} cuda_wview;

/* Activations prepared for a mat-vec: quantized to 8 bits (q, d, s, g) for the quantized weight
 * types, or converted (h) for the float types. nr rows of k values. */
typedef struct cuda_xview {
    const int8_t *q;   /* [nr][k] codes */
    const float *d;    /* [nr][k / 32] (Q8_0 family, fp16-rounded) or [nr][k / 256] (Q8_K family) scales */
    const float *s;    /* [nr][k / 32] fp16-rounded d * sum(q) (what Q8_1 stores), Q8_0 family only */
    const int16_t *g;  /* [nr][k / 16] sums of each 16 codes */
    const void *h;     /* [nr][k] f16 (F16 weights), bf16 (BF16) or f32 (F32) activations */
    int32_t k;         /* row length */
} cuda_xview;

/* Plane layout of a type's repacked blocks. */
typedef struct cuda_plane_desc {
    int32_t n_planes;  /* 1..3; 0 = the type is not supported by the CUDA kernels */
    int32_t block;     /* values per block */
    int32_t bytes;     /* bytes per GGUF block */
    int32_t off[3];    /* offset of each plane's bytes inside a GGUF block */
    int32_t size[3];   /* bytes per block in each plane */
} cuda_plane_desc;

/* The plane layout of `type`; n_planes == 0 when the quantized kernels do not support it. Float
 * types (F32, F16, BF16) report one plane holding the row as is. */
cuda_plane_desc qr_cuda_plane_desc(qr_type type);
/* True for the types matmul/get_rows support (the quantized ones of qr_cuda_plane_desc and F32/F16/BF16). */
bool qr_cuda_type_supported(qr_type type);
/* The activation format a weight type needs: 0 = Q8 per 32 values, 1 = Q8_K per 256, 2 = f16, 3 = bf16, 4 = f32. */
int qr_cuda_act_kind(qr_type type);

/* ---- dequant.cu ---- */
/* Splits nblocks GGUF blocks at raw (device) into the planes dst[0..n_planes) of `d`. */
cudaError_t qr_cuda_repack(const cuda_plane_desc *d, const uint8_t *raw, int64_t nblocks, uint8_t *const dst[3],
                           cudaStream_t stream);
/* out[r][k] (f32) = dequantized row ids[r] of w, r < n_ids (ids on the device). */
cudaError_t qr_cuda_get_rows(const cuda_wview *w, const int32_t *ids, int32_t n_ids, float *out, cudaStream_t stream);
/* out[r - r0][k] (f16) = dequantized row r of w for r in [r0, r1) (quantized types only). */
cudaError_t qr_cuda_dequant_f16(const cuda_wview *w, int64_t r0, int64_t r1, void *out, cudaStream_t stream);

/* ---- matmul_q.cu / matmul_f.cu ---- */
/* Quantizes x[nr][k] (f32) into q/d/s/g (Q8_0 rule per 32 values when kind == 0, Q8_K rule per 256 when
 * kind == 1). The output pointers are the members of a cuda_xview (cast away const by the caller). */
cudaError_t qr_cuda_quantize_act(const float *x, int32_t nr, int32_t k, int kind, int8_t *q, float *d, float *s,
                                 int16_t *g, bool pdl, cudaStream_t stream);
/* n floats (a multiple of the block) quantized as the CPU quantizes activations (kind 0: Q8_0 rule per 32,
 * 1: Q8_K per 256, 2: kind 1 permuted within every 16 values for qr_cuda_dq_wg_gemm), then written as f16
 * (code x scale): the prefill GEMM's activations for quantized weights, so that it sees the values the CPU's
 * integer dot products see. */
cudaError_t qr_cuda_act_q8_as_f16(const float *x, int64_t n, int kind, void *out, cudaStream_t stream);
/* Converts n floats to f16 (bf16 == false) or bf16, round to nearest even. */
cudaError_t qr_cuda_to_half(const float *x, int64_t n, void *out, bool bf16, cudaStream_t stream);
/* y[t][w->n] = row t of the prepared activations . w^T for t < nr (1..8). wpr = warps per output row (1, 2, 4).
 * pdl: launch with programmatic stream serialization (sm_90+): the kernel starts streaming weights
 * while the kernel before it (the activation conversion) finishes. */
cudaError_t qr_cuda_matvec(const cuda_wview *w, const cuda_xview *x, int32_t nr, float *y, int32_t wpr, bool pdl,
                           cudaStream_t stream);

/* Most matrices of one fused mat-vec launch. */
#define QR_CUDA_MULTI_MAX 3
/* One launch for n_mat (1..3) matrices of the same type (or of a pair: qr_cuda_multi_pair_supported) and k
 * against the same prepared activations:
 * y[m][t][w[m].n] as qr_cuda_matvec would write them, plus the F32 bias b[m][w[m].n] where b and b[m]
 * are not NULL (added to the rounded sum, as add_row after the matmul). glu != 0 (b NULL) (n_mat == 2, equal shapes, wpr 1 or 2):
 * y[0][t][n] = swiglu(gate . x, up . x) (glu 1; glu 2: geglu) with w[0] = gate, w[1] = up, as the swiglu /
 * geglu op computes it. Only for qr_cuda_multi_supported(nr, glu) (1..4 rows; glu 0, 1 or 2). */
bool qr_cuda_multi_supported(int32_t nr, int glu);
/* Whether matrices of type_a followed by matrices of type_b (one activation kind) can share that launch (glu 0):
 * q in Q4_0 with k / v in Q8_0; Q4_K or Q5_K with Q6_K. */
bool qr_cuda_multi_pair_supported(int32_t type_a, int32_t type_b);
cudaError_t qr_cuda_matvec_multi(const cuda_wview *w, int32_t n_mat, const cuda_xview *x, int32_t nr, float *const *y,
                                 const float *const *b, int32_t wpr, int glu, bool pdl, cudaStream_t stream);
/* QUARREL_CUDA_MMV_U2 is not "0": one-row multi mat-vecs may take their light form (these launchers see
 * no backend, so not a qr_cuda_tune field); read once per process (tune.cu, with the other switches). */
bool cuda_tune_mmv_u2(void);
/* QUARREL_CUDA_MMV_PAIR (read once a process): the mat-vec's two-rows-a-warp form at 2..8 activation rows (0: off). */
bool cuda_tune_mmv_pair(void);

/* ---- topk.cu ---- */
/* The k (1..64, <= n) largest of each row of logits[n_rows][n] in the sampler's order into vals / ids [n_rows][k],
 * and each row's count of values above -inf into n_fin (-1: a NaN or +inf in the row). */
cudaError_t qr_cuda_topk_rows(const float *logits, int64_t n_rows, int64_t n, int32_t k, float *vals, int32_t *ids,
                              int32_t *n_fin, cudaStream_t stream);

/* ---- norm.cu ---- */
cudaError_t qr_cuda_rmsnorm(const float *x, const float *w, int64_t n_rows, int64_t dim, float eps, float *y,
                            cudaStream_t stream);
/* x[r] += b_scale * b[r] (when b; the product rounded first, as scale then add; b_scale 1: plain add), then
 * y = rmsnorm(x) * w as qr_cuda_rmsnorm; with qkind 0/1 (qr_cuda_act_kind) also quantizes y into q/d/s/g
 * as qr_cuda_quantize_act would (dim a multiple of the block); qkind 2: y's Q8_K values as f16 in the batched-decode
 * GEMM's order into q (a half array [n_rows][dim], as qr_cuda_act_q8_as_f16 kind 2; dim % 256 == 0; d/s/g unused);
 * qkind 3: the same values in plain order (act kind 1, the f16 cache + cuBLAS GEMM's input).
 * bw (a post-norm weight, or NULL): b is first
 * replaced by rmsnorm(b) * bw as qr_cuda_rmsnorm computes it (b_scale 1; only where qr_cuda_post_norm_supported). */
bool qr_cuda_post_norm_supported(int64_t dim);
cudaError_t qr_cuda_add_rmsnorm(float *x, const float *b, float b_scale, const float *bw, const float *w, int64_t n_rows,
                                int64_t dim, float eps, float *y, int qkind, int8_t *q, float *d, float *s, int16_t *g,
                                bool pdl, cudaStream_t stream);
/* qr_cuda_add_rmsnorm with b_scale 1, no bw, where b is the pending sum of a split-K GEMM: b = the sum over the splits
 * of part[s] ([n_rows][dim] each, in split order: qr_cuda_dq_reduce's values), written to b as well (dim % 8 == 0,
 * dim <= 8192: qr_cuda_post_norm_supported). */
cudaError_t qr_cuda_add_rmsnorm_parts(float *x, const float *part, int32_t splits, float *b, const float *w, int64_t n_rows,
                                      int64_t dim, float eps, float *y, int qkind, int8_t *q, float *d, float *s, int16_t *g,
                                      bool pdl, cudaStream_t stream);
cudaError_t qr_cuda_layernorm(const float *x, const float *w, const float *b, int64_t n_rows, int64_t dim, float eps,
                              float *y, cudaStream_t stream);
cudaError_t qr_cuda_softmax(const float *x, int64_t n_rows, int64_t dim, float *y, cudaStream_t stream);

/* ---- rope.cu ---- */
/* Host-side constants of a rope call (computed with the CPU's float formulas). */
typedef struct cuda_rope_consts {
    int32_t mode, n_rot;
    float theta_scale;   /* freq_base^(-2/n_rot) */
    float freq_scale;
    float ext_factor;
    float mscale;        /* attn_factor, times the YaRN magnitude factor when ext_factor != 0 */
    float corr0, corr1;  /* YaRN ramp bounds */
} cuda_rope_consts;
cudaError_t qr_cuda_rope(float *x, int32_t n_tok, int32_t n_head, int32_t head_dim, const int32_t *pos,
                         const cuda_rope_consts *c, const float *freq_factors, cudaStream_t stream);

/* rope of q [n_tok][n_head * head_dim] and k [n_tok][n_head_kv * head_dim] in place (as two qr_cuda_rope
 * calls), then row r of k and v ([n_tok][v_dim]) stored in cache slot slots[r] (as qr_cuda_kv_store); q_scale
 * != 1: then q *= q_scale (as the scale op). qn / kn (F32 [head_dim] or NULL): q's / k's heads RMS-normed with eps
 * first, as qr_cuda_rmsnorm over rows of head_dim would (only where qr_cuda_rope_qk_norm_supported). Up to heads_rows
 * rows (or 8) a CTA a (row, head), past that a CTA a row: the same arithmetic. part (or NULL; the (row, head) kernel
 * only): q, k and v are still the split-K parts of their GEMM (qr_cuda_dq_wr_multi without its reduction: split s at
 * part + s * part_stride, [n_tok][q] then [n_tok][k] then [n_tok][v]): summed as the reduction sums them and written to
 * q / k / v first. */
bool qr_cuda_rope_qk_norm_supported(int32_t n_tok, int32_t n_head, int32_t n_head_kv, int32_t n_rot);
cudaError_t qr_cuda_rope_kv_store(float *q, float *k, const float *v, int32_t n_tok, int32_t n_head, int32_t n_head_kv,
                                  int32_t head_dim, int32_t v_dim, const int32_t *pos, const int32_t *slots,
                                  const cuda_rope_consts *c, const float *freq_factors, void *k_cache, void *v_cache,
                                  bool f16, float q_scale, const float *qn, const float *kn, float eps,
                                  int32_t heads_rows, const float *part, int32_t splits, int64_t part_stride, bool pdl,
                                  cudaStream_t stream);

/* deepseek2's mla_prep (backend.h qr_mla_prep_args) for n_tok rows: kv_a [n_tok][R + n_rot], q [n_tok][H][dq],
 * q_out [n_tok][H][R + n_rot], the norm weight w [R]; the K rows (R + n_rot) and V rows (R) into cache slots[r]. */
cudaError_t qr_cuda_mla_prep(const float *kv_a, const float *q, float *q_out, const float *w, float eps, int32_t n_tok,
                             int32_t H, int32_t R, int32_t dq, const int32_t *pos, const int32_t *slots,
                             const cuda_rope_consts *c, const float *freq_factors, void *k_cache, void *v_cache, bool f16,
                             bool pdl, cudaStream_t stream);

/* ---- attention.cu ---- */
#define CUDA_KVQ_Q8 1 /* cuda_attn_args.kvq: Q8_0 K and V */
#define CUDA_KVQ_Q4 2 /* Q4_0 K and V */
typedef struct cuda_attn_args {
    const float *q;             /* [n_tok][n_head * dk] */
    const void *k_cache;        /* this layer's K: [n_slots][n_head_kv * dk] of f16 or f32 */
    const void *v_cache;        /* this layer's V: [n_slots][n_head_kv * dv] */
    bool f16;                   /* cache element type: f16 (true) or f32 (kvq 0) */
    int32_t kvq;                /* CUDA_KVQ_Q8 / CUDA_KVQ_Q4: a quantized cache of that type in K and V (kv_quant.cuh's
                                 * layout), 0: f16 / f32 */
    int32_t rot_k, rot_v;       /* kvq: the cache's rotations (qr_kv_desc); the kvq decode kernel rotates q and its
                                 * output itself, the flash kernel takes q rotated and leaves its output rotated */
    const int32_t *pos;         /* [n_tok] device */
    const int32_t *seq;         /* [n_tok] device */
    const int32_t *block_table; /* [n_seqs][max_blocks] device */
    int32_t max_blocks, block_size;
    int32_t n_tok, n_head, n_head_kv, dk, dv;
    float scale, softcap;
    int32_t window;
    int32_t n_splits;           /* KV splits per row (>= 1) */
    int32_t cluster;            /* attention_decode: the splits of a tile form one thread-block cluster
                                 * (n_splits <= 8, <= 512 keys each: qr_cuda_attn_cluster_splits) */
    float *stats;               /* [n_tok][n_head][n_splits][2] scratch: each split's score max and exp-sum */
    float *partial;             /* [n_tok][n_head][n_splits][dv] scratch when n_splits > 1 */
    float *out;                 /* [n_tok][n_head * dv] */
    const float *sinks;         /* [n_head] device attention sinks (gpt-oss): exp(sink) joins each head's
                                 * softmax denominator; NULL = none */
    int32_t q8_kind;            /* flash-decoding with one split: also quantize out for the next mat-vec
                                 * (0: Q8_0 rule per 32, 1: Q8_K per 256, as qr_cuda_quantize_act); -1 = no */
    int8_t *q8;                 /* [n_tok][n_head * dv] codes, with q8d / q8s / q8g: the act scratch */
    float *q8d, *q8s;
    int16_t *q8g;
    long long *dbg;             /* lab only (NULL otherwise): the cluster kernel's phase clocks, CTA 0 of the
                                 * first and last rank, [2][16] */
} cuda_attn_args;
/* attention_gemm.cu: attention of prompt batches as two cuBLAS GEMMs (backend_cuda.cu attn_gemm) for head shapes
 * the flash kernel does not take. qr_cuda_attn_gather: keys k0 .. k0 + nk - 1 of sequence seq from a's f16 cache
 * into contiguous rows kc [nk][n_head_kv * dk] and vc [nk][n_head_kv * dv];
 * qr_cuda_attn_softmax: p[i] = softmax(scale * s[i]) in f16 over the keys row i / n_head of pos sees (causal,
 * within window when > 0), 0 at the others; s [n_rows][nk] f32 of keys k0 .. */
cudaError_t qr_cuda_attn_gather(const cuda_attn_args *a, int32_t seq, int32_t k0, int32_t nk, void *kc, void *vc,
                                cudaStream_t stream);
cudaError_t qr_cuda_attn_softmax(const float *s, int64_t n_rows, int32_t n_head, int32_t nk, int32_t k0,
                                 const int32_t *pos, float scale, int32_t window, void *p, cudaStream_t stream);
/* elementwise.cu: dst row r (stride dst_stride floats) = src row r (src_stride), width floats, r < n_rows; src and dst
 * do not overlap. */
cudaError_t qr_cuda_copy_rows(const float *src, int64_t src_stride, float *dst, int64_t dst_stride, int64_t n_rows,
                              int64_t width, bool pdl, cudaStream_t stream);
/* Largest head size the attention kernel takes. */
#define QR_CUDA_MAX_HEAD_DIM 576
cudaError_t qr_cuda_attention(const cuda_attn_args *a, cudaStream_t stream);
/* attention_decode.cu: the same op for a few rows over a long cache (flash-decoding: K and V read
 * once, wide loads). Covers f16 caches with dk == dv in {64, 128, 256} (qr_cuda_attn_decode_supported).
 * scores: [n_tok][n_head][score_stride] floats of scratch, score_stride >= every row's key span. */
bool qr_cuda_attn_decode_supported(const cuda_attn_args *a);
/* counters: [qr_cuda_attn_decode_tiles(a)] zeroed once (each launch leaves them zero again): the
 * last split of a tile combines the partial outputs when n_splits > 1. */
cudaError_t qr_cuda_attention_decode(const cuda_attn_args *a, float *scores, int32_t score_stride,
                                     unsigned int *counters, bool pdl, cudaStream_t stream);
int64_t qr_cuda_attn_decode_tiles(const cuda_attn_args *a);
/* attention_decode_mma.cu: the same op on f16 tensor cores for batched decode steps (a row a sequence): f16 cache,
 * dk == dv in {64, 128}, n_splits 1, no cluster (qr_cuda_attn_decode_mma_supported); no scratch. Quantizes its output
 * for the next mat-vec as the fused flash-decoding kernel does (a.q8_kind). */
bool qr_cuda_attn_decode_mma_supported(const cuda_attn_args *a);
cudaError_t qr_cuda_attention_decode_mma(const cuda_attn_args *a, bool pdl, cudaStream_t stream);
/* The cluster kernel's split count for a key span (0: the span needs the kernels with global-memory
 * splits): about keys_per_cta keys a CTA (<= 0: 64); forced > 0: that count if the cluster kernel can
 * take it, else 0. */
int qr_cuda_attn_cluster_splits(int64_t span, int32_t forced, int32_t keys_per_cta);
/* attention_flash.cu: the attention of prompt batches on f16 tensor cores (flash attention over the paged
 * cache), for f16 caches with dk == dv in {64, 128, 256} (qr_cuda_attn_flash_supported); any depth, window,
 * softcap, sinks; a.n_splits, stats, partial and q8_kind are not used. tiles: [n_tiles][4] device ints from
 * qr_cuda_attn_flash_tiles with qr_cuda_attn_flash_rows(dk) rows a tile. n_splits > 1 splits each tile's keys
 * over that many CTAs and merges them in a second kernel: part is then device scratch of
 * qr_cuda_attn_flash_part_bytes floats' bytes. */
bool qr_cuda_attn_flash_supported(const cuda_attn_args *a);
/* Flat rows (rows x query heads of a kv head) a tile of the kernel for head size head_dim with mt (1 or 2) m16
 * tiles a warp (0: no such form). */
int32_t qr_cuda_attn_flash_rows(int32_t head_dim, int32_t mt);
/* The tiles of a pass (host): each run of consecutive rows of one sequence, in pieces of rows_per_tile of its
 * rows x group query heads; writes min(count, cap) tiles (tiles may be NULL) and returns the count. */
int32_t qr_cuda_attn_flash_tiles(const int32_t *seq, int32_t n_tok, int32_t group, int32_t rows_per_tile,
                                 int32_t *tiles, int32_t cap);
cudaError_t qr_cuda_attention_flash(const cuda_attn_args *a, int32_t mt, int32_t stages, const int32_t *tiles,
                                    int32_t n_tiles, int32_t n_splits, float *part, cudaStream_t stream);
/* Bytes of split scratch: [n_splits][n_tok * n_head][dv] partial outputs, then [n_splits][n_tok * n_head] stats. */
static inline size_t qr_cuda_attn_flash_part_bytes(const cuda_attn_args *a, int32_t n_splits) {
    return (size_t)n_splits * (size_t)a->n_tok * (size_t)a->n_head * ((size_t)a->dv + 2) * 4;
}
/* attention_cluster.cu: the cluster kernel (a->cluster set; sm_90+). */
cudaError_t qr_cuda_attention_cluster(const cuda_attn_args *a, bool pdl, cudaStream_t stream);
/* attention_short.cu: rope(q), rope(k), the K/V store and the attention of a one-row decode pass whose span
 * fits qr_cuda_attn_short_keys(dk), in one launch (a.q and k_new are the q/k/v output before rope; neither
 * is written). */
typedef struct cuda_rope_attn_args {
    cuda_attn_args a;       /* n_tok 1, n_splits 1; q8_kind -1, 0 or 1 */
    const float *k_new;     /* the row's k [n_head_kv * dk] before rope */
    const float *v_new;     /* the row's v [n_head_kv * dv] */
    const int32_t *slot;    /* device [1]: the row's cache slot */
    cuda_rope_consts rope;
    const float *ff;        /* rope frequency factors (device) or NULL */
    int32_t kv_early;       /* 1: the cached keys were complete before the launch (a graph replay): their
                             * loads start before the dependency wait */
    int32_t gmax;           /* query heads a CTA at most (1, 2 or 4) */
    float q_scale;          /* q *= q_scale after its rope (1: not), as the scale op */
    const float *qn, *kn;   /* per-head RMS norm weights [dk] of q and k before the rope (qwen3, gemma3), or NULL */
    float norm_eps;
} cuda_rope_attn_args;
/* The longest key span the kernel takes for a head size (0: not taken). */
int32_t qr_cuda_attn_short_keys(int32_t head_dim);
bool qr_cuda_attn_short_supported(const cuda_attn_args *a);
cudaError_t qr_cuda_rope_attention(const cuda_rope_attn_args *r, bool pdl, cudaStream_t stream);
/* ---- kv_quant.cu: the quantized KV cache (layout: kv_quant.cuh) ---- */
/* Row r of x ([n_tok][dim]) into cache slot slots[r] of a CUDA_KVQ_Q8 / _Q4 cache of paged blocks of block_size
 * slots: rotated first in chunks of rot values (the orthonormal Walsh-Hadamard transform, the CPU's butterfly order;
 * 0 = none), then quantized per 32 values as the CPU stores it (Q8_0: ggml's x86 rule; Q4_0: the reference rule). */
cudaError_t qr_cuda_kvq_store(const float *x, int32_t n_tok, int32_t dim, int32_t rot, const int32_t *slots,
                              int32_t block_size, void *cache, int32_t kvq, cudaStream_t stream);
/* rope(q), rope(k) in place and k / v into their slots as qr_cuda_kvq_store does (rotations rot_k, rot_v), one launch,
 * for decode passes (n_tok <= 8); cudaErrorNotSupported (nothing launched) for the rest. */
cudaError_t qr_cuda_rope_kvq_store(float *q, float *k, const float *v, int32_t n_tok, int32_t n_head, int32_t n_head_kv,
                                   int32_t head_dim, int32_t v_dim, const int32_t *pos, const int32_t *slots,
                                   const cuda_rope_consts *c, const float *freq_factors, void *k_cache, void *v_cache,
                                   int32_t block_size, int32_t kvq, int32_t rot_k, int32_t rot_v, bool pdl,
                                   cudaStream_t stream);
/* The same transform of rows of n values of x into y (may be x; n a multiple of chunk; chunk a power of two, 32..256). */
cudaError_t qr_cuda_fwht(const float *x, float *y, int64_t n_rows, int32_t n, int32_t chunk, cudaStream_t stream);
/* Attention over a quantized cache for any rows (flash-decoding: online softmax, a.n_splits key splits merged by the
 * last CTA of each tile through counters [qr_cuda_attn_decode_tiles], left zero); a.stats / a.partial as for
 * qr_cuda_attention_decode; q as the model gives it (rotated by a.rot_k in the kernel), the output rotated back by
 * a.rot_v. Head sizes 64, 128, 256 with dk == dv (qr_cuda_attn_kvq_supported). */
bool qr_cuda_attn_kvq_supported(const cuda_attn_args *a);
/* CTAs an SM the kernel is built for (its register budget), by head size and query heads a CTA (G: 8 where the GQA
 * group is > 4 and the head size <= 128, else 4): one wave of them is its default split count. */
#define QR_CUDA_KVQ_CTAS(D, G) ((G) <= 4 ? ((D) <= 128 ? 4 : 3) : 2)
cudaError_t qr_cuda_attention_kvq(const cuda_attn_args *a, unsigned int *counters, bool pdl, cudaStream_t stream);
/* Writes row r of k/v ([n_tok][k_dim], [n_tok][v_dim]) into cache slot slots[r] (f16 or f32 cache). */
cudaError_t qr_cuda_kv_store(const float *k, const float *v, int32_t n_tok, int32_t k_dim, int32_t v_dim,
                             const int32_t *slots, void *k_cache, void *v_cache, bool f16, cudaStream_t stream);

/* ---- elementwise.cu ---- */
typedef enum cuda_ew_kind { CUDA_EW_SWIGLU, CUDA_EW_GEGLU, CUDA_EW_ADD, CUDA_EW_MUL, CUDA_EW_SCALE, CUDA_EW_SOFTCAP } cuda_ew_kind;
/* out[i] = f(a[i], b[i], s) for i < n; any of a, b, out may alias. */
cudaError_t qr_cuda_elementwise(cuda_ew_kind kind, const float *a, const float *b, float s, int64_t n, float *out,
                                cudaStream_t stream);
/* out = swiglu / geglu(a, b) (kind CUDA_EW_SWIGLU / CUDA_EW_GEGLU, as qr_cuda_elementwise) and xh = out's Q8_K values as f16
 * (qr_cuda_act_q8_as_f16 of act kind akind: 2, the batched-decode GEMM's order, or 1) in one launch; n % 256 == 0,
 * 16-byte aligned; pdl: launched with programmatic dependent launch (the kernel waits for the one ahead first). */
cudaError_t qr_cuda_glu_f16(cuda_ew_kind kind, const float *a, const float *b, int64_t n, float *out, void *xh, int akind,
                            bool pdl, cudaStream_t stream);
/* out[o][dim] = src[rows[o]][dim], o < n_out; in_place selects the sequential kernel (out overlaps src). */
cudaError_t qr_cuda_gather_rows(const float *src, int64_t dim, const int32_t *rows, int32_t n_out, float *out,
                                bool in_place, cudaStream_t stream);

/* ---- embed_ops.cu ---- */
/* out[r][i] = x[r][i] + t[row >= 0 ? row : pos[r]][i] for r < n_rows (<= 65535), i < t->k; F32/F16
 * tables only (cudaErrorInvalidValue otherwise). out may equal x. */
cudaError_t qr_cuda_add_row(const float *x, const cuda_wview *t, int64_t row, const int32_t *pos, int64_t n_rows,
                            float *out, cudaStream_t stream);

/* ---- moe.cu (issue 9) ---- */
/* ids[n_rows][n_used], weights[n_rows][n_used] from logits[n_rows][n_expert] per p (sel_bias: device F32
 * [n_expert] or NULL; p->sel_bias is ignored). n_expert <= 512. */
cudaError_t qr_cuda_moe_route(const float *logits, int64_t n_rows, const qr_moe_route_params *p, const float *sel_bias,
                              int32_t *ids, float *weights, bool pdl, cudaStream_t stream);
/* The MoE layer's norm, router and routing in one launch: x += b_scale * b (b may be NULL), y = rmsnorm(x) * w (w may be
 * NULL), qkind >= 0: y's codes for the next mat-vec as qr_cuda_add_rmsnorm; logits = wr y (+ br), wr F32
 * [n_expert][dim], br F32 [n_expert] or NULL; then ids / weights as qr_cuda_moe_route. Only where
 * qr_cuda_norm_route_supported (dim % 8 == 0, dim <= 4096, n_expert <= 8). */
bool qr_cuda_norm_route_supported(int64_t dim, int32_t n_expert, int32_t n_used);

cudaError_t qr_cuda_norm_route(float *x, const float *b, float b_scale, const float *w, int64_t n_rows, int64_t dim, float eps, float *y,
                               int qkind, int8_t *q, float *d, float *s, int16_t *g, const float *wr, const float *br,
                               const qr_moe_route_params *p, const float *sel_bias, float *logits, int32_t *ids,
                               float *weights, bool pdl, cudaStream_t stream);
/* y[s][n_out] = W[ids[s]] . x_s (+ bias[ids[s]]) for slots s < n_rows * n_used (<= 65535); w: the prepared
 * [n_expert * n_out][k] rows; x_s = x[s] (x_per_slot) or x[s / n_used]. */
cudaError_t qr_cuda_matmul_id(const cuda_wview *w, int64_t n_out, const float *bias, const float *x, bool x_per_slot,
                              const int32_t *ids, int64_t n_rows, int32_t n_used, float *y, cudaStream_t stream);
/* The expert mat-vec of decode (matmul_q.cu): quantized activations and dp4a like qr_cuda_matvec. */
typedef struct qr_cuda_mv_id_args {
    cuda_wview w[2];       /* the experts' rows ([n_expert * n_out][k]): gate (or the only matrix), up */
    const float *bias[2];  /* F32 [n_expert][n_out] per matrix, or NULL */
    int64_t n_out;         /* rows per expert */
    const int32_t *ids;    /* [n_slots] expert of each slot (device) */
    int32_t n_used;        /* slots per activation row when !x_per_slot */
    int32_t x_per_slot;    /* activation row s (1) or s / n_used (0) */
    int32_t act;           /* qr_glu_kind applied in the epilogue; -1 = none (glu == 0 only) */
    float *y;              /* [n_slots][n_out] */
    int32_t ids_early;     /* 1: the ids are complete when the kernel launches (the kernel that wrote them
                            * has been waited for by a later one): read them, and start streaming
                            * weights, before the dependency wait */
    int32_t variant;       /* qr_cuda_matvec_id with glu and wpr 1: 6 = the persistent kernel with 6
                            * CTAs an SM (one wave, a warp streams a row's gate and up together), 0 = a CTA a group
                            * of rows;
                            * qr_cuda_matvec_id_combine with n_used 2: 2 = the software-pipelined kernel, 0 = the
                            * plain one; the same sums either way */
} qr_cuda_mv_id_args;
/* y[s] = act(w[0][ids[s]] . x_s + b0, w[1][ids[s]] . x_s + b1) (glu) or w[0][ids[s]] . x_s + b0 (then act if
 * >= 0), s < n_slots (<= 65535); x: activations prepared as for qr_cuda_matvec (rows of x_s). wpr: 1 or 2
 * (4 without glu). The ids are read after the previous kernel finished (pdl) unless a->ids_early. */
cudaError_t qr_cuda_matvec_id(const qr_cuda_mv_id_args *a, int glu, const cuda_xview *x, int32_t n_slots, int32_t wpr,
                              bool pdl, cudaStream_t stream);
/* The expert down projection and the weighted sum of the slots at decode sizes (matmul_q.cu):
 * a->y[r][i] = sum_j weights[r][j] (W[ids[r][j]] . x[r * n_used + j] + bias) (j in order, as moe_combine)
 * (+ add[r][i]), r < n_rows; a->w[0], bias[0], n_out, ids, n_used used; n_used <= QR_CUDA_COMBINE_MAX_USED. */
#define QR_CUDA_COMBINE_MAX_USED 16
cudaError_t qr_cuda_matvec_id_combine(const qr_cuda_mv_id_args *a, const cuda_xview *x, const float *weights,
                                      const float *add, int32_t n_rows, bool pdl, cudaStream_t stream);
/* The grouped expert mat-vec of prefill (matmul_q.cu): tiles[b] = {expert, p0, nr (1..8), 0} (int32 x 4,
 * device, 16-byte aligned); y[p0 + t][n_out] = W[expert] . row p0 + t of x for t < nr, b < n_tiles (<= 65535);
 * x: prepared activations of the sorted rows with at least 7 rows of slack after the last. */
cudaError_t qr_cuda_matvec_tiles(const cuda_wview *w, const cuda_xview *x, const int32_t *tiles, int32_t n_tiles,
                                 int64_t n_out, float *y, int32_t wpr, cudaStream_t stream);
/* The same on int8 tensor cores (matmul_mma.cu), for the types of qr_cuda_mmq_supported (Q4_0, Q8_0, MXFP4,
 * IQ4_NL): tiles of nr <= QR_CUDA_MMQ_TILE_ROWS rows, max_rows the largest nr; x (Q8_0-rule activations) needs
 * QR_CUDA_MMQ_TILE_ROWS rows of slack after the last sorted row. */
/* Batched decode GEMM of Q4_K / Q6_K weights on f16 tensor cores (matmul_dq.cu): y[n_tok][n_out] = W x^T with xh
 * the activations as f16 [n_tok][k] (qr_cuda_act_q8_as_f16, kind 1); splits > 1 split K and need part, room for
 * splits * n_tok * n_out floats; qr_cuda_dq_gemm_splits suggests the count for a device of `sms` SMs. */
bool qr_cuda_dq_gemm_supported(qr_type type);
int32_t qr_cuda_dq_gemm_splits(int64_t n_tok, int64_t n_out, int64_t k, int32_t sms);
/* The kernel's per-weight scale plane (32 bytes a 256-value block: the f16 scale x sub-block scale and minimum),
 * made once by qr_cuda_dq_scales into qr_cuda_dq_scales_bytes(w) bytes. */
size_t qr_cuda_dq_scales_bytes(const cuda_wview *w);
cudaError_t qr_cuda_dq_scales(const cuda_wview *w, void *out, cudaStream_t stream);
cudaError_t qr_cuda_dq_gemm(const cuda_wview *w, const void *scales, const void *xh, int64_t n_tok, int64_t n_out,
                            int32_t splits, float *part, float *y, cudaStream_t stream);
/* The same on Hopper's warpgroup MMA (sm_90a builds on sm_90 GPUs: qr_cuda_dq_wg_available) reading the tiles
 * of qr_cuda_dq_wg_tiles (`tiles`, in place of the scale plane), xh in kind 2's permuted order; splits 0: qr_cuda_dq_wg_splits's count for `sms` SMs. mt_force 1 / 2: 128 / 256 weight rows
 * a CTA (0: by the shape). */
bool qr_cuda_dq_wg_available(void);
/* Its weight tiles (qr_cuda_dq_wg_tiles_bytes(w) bytes, from the scale plane of qr_cuda_dq_scales): per 128 rows and
 * 128 values one contiguous tile of every row's codes and scale-plane entries, as the kernel's shared memory holds
 * them, so that a stage is one sequential read. */
size_t qr_cuda_dq_wg_tiles_bytes(const cuda_wview *w);
/* Version 4 (same tiles): each stage's weights dequantized once into shared memory, tokens as wgmma's M side;
 * xh in kind 1's natural order; splits from qr_cuda_dq_ws_splits. */
int32_t qr_cuda_dq_ws_splits(int64_t n_tok, int64_t n_out, int64_t k, int32_t sms);
/* its Q4_K tiles (column-major, codes in a nibble order for 2-value conversions, scale pairs splatted); its Q6_K
 * tiles are version 3's (qr_cuda_dq_wg_tiles) */
size_t qr_cuda_dq_ws_tiles_bytes(const cuda_wview *w);
cudaError_t qr_cuda_dq_ws_tiles(const cuda_wview *w, const void *scales, void *out, cudaStream_t stream);
cudaError_t qr_cuda_dq_ws_gemm(const cuda_wview *w, const void *tiles, const void *xh, int64_t n_tok, int64_t n_out,
                               int32_t splits, float *part, float *y, cudaStream_t stream);
cudaError_t qr_cuda_dq_wg_tiles(const cuda_wview *w, const void *scales, void *out, cudaStream_t stream);
/* tma: version 6 (the same tiles and sums; the copies on the TMA, a producer warp, 4 consumer warpgroups of 64 weight
 * rows) where the driver makes the activations' tensor map, else version 3. defer (or NULL): where *defer is set and
 * version 6 ran split-K, the reduction is left to the caller (*defer stays 1: y is the sum of the splits parts of
 * n_tok x n_out floats, qr_cuda_dq_reduce); else *defer becomes 0. cl 2: version 6 in clusters of 2 CTAs sharing each
 * stage's activations (TMA multicast) where the weights' 256-row tiles pair up and are of one type; else 1. */
int32_t qr_cuda_dq_wg_splits(qr_type type, int64_t n_tok, int64_t n_out, int64_t k, int32_t sms, int mt_force, bool tma);
cudaError_t qr_cuda_dq_wg_gemm(const cuda_wview *w, const void *tiles, const void *xh, int64_t n_tok, int64_t n_out,
                               int32_t splits, float *part, float *y, int32_t sms, int mt_force, bool tma, bool pdl,
                               int32_t *defer, int32_t cl, cudaStream_t stream);
/* y[i] = the sum over the splits of part[s][i] (i < n), in split order: the GEMMs' own reduction */
cudaError_t qr_cuda_dq_reduce(const float *part, int32_t splits, int64_t n, float *y, cudaStream_t stream);
/* Version 6 over 1..3 weights of one K-quant type and one k multiplied by the same activations (q / k / v): one launch
 * for all their rows (v3's tiles of each, xh in kind 2's order); y[i] = [n_tok][w[i].n]; part holds splits x n_tok x
 * (sum of n) floats (splits from qr_cuda_dq_wr_multi_splits). pdl: launched with programmatic dependent launch (the
 * weights of the first stages copied before the kernel ahead finishes; version 6 for qr_cuda_dq_wg_gemm too).
 * cudaErrorNotSupported: no tensor map (run them one by one). */
int32_t qr_cuda_dq_wr_multi_splits(int32_t n_w, const cuda_wview *w, int64_t n_tok, int32_t sms);
/* defer: with splits > 1 the reduction is left to the caller (qr_cuda_dq_reduce_multi, or a consumer that sums the parts:
 * split s's [n_tok][w[i].n] block of matrix i at part + s x n_tok x (sum of n) + n_tok x (sum of the n before i)) */
cudaError_t qr_cuda_dq_wr_multi(int32_t n_w, const cuda_wview *w, const void *const *tiles, const void *xh, int64_t n_tok,
                                float *const *y, int32_t splits, float *part, bool pdl, bool defer, int32_t cl,
                                cudaStream_t stream);
/* y[i] ([n_tok][n_out[i]]) = the sum over the splits of matrix i's block of part, in split order (qr_cuda_dq_wr_multi's
 * own reduction) */
cudaError_t qr_cuda_dq_reduce_multi(const float *part, int32_t splits, int64_t n_tok, int32_t n_w, const int64_t *n_out,
                                    float *const *y, cudaStream_t stream);

#define QR_CUDA_MMQ_TILE_ROWS 64
bool qr_cuda_mmq_supported(qr_type type);
cudaError_t qr_cuda_mmq_tiles(const cuda_wview *w, const cuda_xview *x, const int32_t *tiles, int32_t n_tiles,
                              int32_t max_rows, int64_t n_out, float *y, cudaStream_t stream);
/* The grouped expert GEMM of prefill (moe.cu). dst[p][k] (f16) = src[rows[p]][k] (f16), or zeros where
 * rows[p] < 0 (padding), p < n. */
cudaError_t qr_cuda_gather_f16(const void *src, int64_t k, const int32_t *rows, int32_t n, void *dst, cudaStream_t stream);
/* For p < n (sorted slots), i < n_out: out[slot[p]][i] = act(g[row[p]][i] + bg[e][i], u[row[p]][i] + bu[e][i]) with
 * e = expert[p] (u == NULL: g + bg, then act when act >= 0); biases may be NULL. */
cudaError_t qr_cuda_moe_scatter(const float *g, const float *u, const float *bg, const float *bu, const int32_t *slot,
                                const int32_t *expert, const int32_t *row, int32_t n, int64_t n_out, int act, float *out,
                                cudaStream_t stream);
/* out[i] = act(g[i], u[i]) (qr_glu_kind; u unused for QR_GLU_RELU2). out may alias g. */
cudaError_t qr_cuda_glu(const float *g, const float *u, int64_t n, int act, float *out, bool pdl, cudaStream_t stream);
/* out[r][i] = sum_j w[r][j] y[r][j][i]. */
cudaError_t qr_cuda_moe_combine(const float *y, const float *w, int64_t n_rows, int32_t n_used, int64_t dim,
                                const float *add, float *out, bool pdl, cudaStream_t stream);

/* ---- ssm.cu (issue 9); seq: the plan's device seq array ---- */
/* runs: every sequence of the batch is one contiguous run of rows (then the rows are computed in
 * parallel, the states rolled forward after); otherwise one thread per channel walks the rows in order. */
cudaError_t qr_cuda_ssm_conv(const float *x, int64_t x_stride, float *conv_state, const float *w, const float *b,
                             const int32_t *seq, int32_t n_tok, const qr_ssm_params *p, bool runs, float *out,
                             bool pdl, cudaStream_t stream);
/* diverged: set to 1 (device-visible int, may be NULL) when a state value becomes NaN/Inf. */
cudaError_t qr_cuda_ssm_scan(float *state, const float *xbc, const float *dt, int64_t dt_stride, const float *dt_bias,
                             const float *A, const float *D, const int32_t *seq, int32_t n_tok, const qr_ssm_params *p,
                             float *y, int *diverged, bool pdl, cudaStream_t stream);
/* The chunked (SSD) form of the scan over runs of rows, each run the contiguous rows r0 .. r0 + len - 1 of one
 * sequence (distinct sequences), for the shapes of qr_cuda_ssm_ssd_supported (d_state 64 or 128, head_dim a
 * multiple of 32): the same recurrence unrolled per chunk of 64 rows as the CPU's QUARREL_SSM_SCAN=ssd. */
#define QR_CUDA_SSD_MAX_RUNS 64
typedef struct qr_cuda_ssd_runs {
    int32_t n;
    int32_t seq[QR_CUDA_SSD_MAX_RUNS], r0[QR_CUDA_SSD_MAX_RUNS], len[QR_CUDA_SSD_MAX_RUNS];
} qr_cuda_ssd_runs;
bool qr_cuda_ssm_ssd_supported(const qr_ssm_params *p);
cudaError_t qr_cuda_ssm_scan_ssd(float *state, const float *xbc, const float *dt, int64_t dt_stride, const float *dt_bias,
                                 const float *A, const float *D, const qr_cuda_ssd_runs *runs, const qr_ssm_params *p,
                                 float *y, int *diverged, bool pdl, cudaStream_t stream);
/* qkind 0/1 (qr_cuda_act_kind): also quantizes out into q/qd/qs/qg as qr_cuda_quantize_act would (the group
 * size a multiple of the block); -1: no. */
cudaError_t qr_cuda_ssm_gate_norm(const float *y, const float *z, int64_t z_stride, const float *w, int64_t n_rows,
                                  const qr_ssm_params *p, float eps, float *out, int qkind, int8_t *q, float *qd,
                                  float *qs, int16_t *qg, bool pdl, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* QR_CUDA_OPS_H */
