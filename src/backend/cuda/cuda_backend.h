/* cuda_backend.h — the CUDA backend object shared by its host files (backend_cuda.cu: memory, weights, KV,
 * the batch plan, dense ops, graphs, the op table; backend_cuda_hybrid.cu: the MoE and Mamba2 ops): the
 * backend struct, the prepared-weight record and the helpers both use. Internal to src/backend/cuda. */
#ifndef QR_CUDA_BACKEND_H
#define QR_CUDA_BACKEND_H

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_ops.h"

#define WEIGHT_MAGIC 0x51435757u /* "WWCQ" */
#define KV_MAGIC 0x5143564bu     /* "KVCQ" */
#define CUBLAS_WS_BYTES (32u << 20)

/* What qr_weight.device points to. */
typedef struct cuda_weight {
    uint32_t magic;
    cuda_wview v;
    void *mem; /* the device allocation holding the planes */
    void *f16; /* [n][k] f16: the whole quantized matrix dequantized once for the GEMM of batches of more rows than
                * the mat-vec takes (the f16 cache, matmul_gemm), or NULL */
    bool f16_tried; /* the cache was declined for this weight (memory): not asked again */
    void *dqs;      /* the batched-decode GEMM's scale plane (matmul_dq.cu; made on first use), or NULL */
    bool dqs_tried;
    void *dqt;      /* the wgmma version's tiles (codes + scale plane per 128 rows x 128 values; first use), or NULL */
    bool dqt_tried;
    void *dqw;      /* the shared-memory wgmma version's tiles (first use), or NULL */
    bool dqw_tried;
} cuda_weight;

struct qr_kv_storage {
    qr_kv_desc desc;           /* first: the argument checks read it (backend.h qr_kv_storage_desc) */
    uint32_t magic;
    uint8_t *k, *v;            /* device: [n_layer][n_slots][k_dim], [n_layer][n_slots][v_dim] */
    size_t k_layer, v_layer;   /* bytes of one layer */
};

/* One recorded pass: warmed up once, then captured and replayed while the scratch stays put. */
typedef struct cuda_graph_rec {
    const void *owner;
    uint64_t key;
    int runs;             /* plain runs so far (1 = warmed up, capture next) */
    uint64_t gen;         /* cb->scratch_gen when captured */
    cudaGraphExec_t exec; /* NULL until captured */
} cuda_graph_rec;

typedef struct cuda_backend {
    int device;
    char device_name[320];
    int n_sm;
    bool has_pdl; /* programmatic dependent launch (sm_90+) */
    cudaStream_t stream;
    cublasHandle_t cublas;
    void *cublas_ws;
    /* batch plan: host copy (validation, launch parameters) and device copy */
    int32_t n_tokens, n_seqs, max_blocks, n_outputs;
    bool seq_runs; /* every sequence of the plan is one contiguous run of rows */
    /* row-exact passes (speculative verification, qr_batch_plan.row_exact): matmuls stay on the mat-vec (its per-row
     * sums do not depend on the row count) and rope + store + attention run row by row with the launch shapes of that
     * row's one-row pass (row_view): cap_blocks (launch shapes; max_blocks stays the table's stride) and graph_mode
     * as that pass would have them */
    bool row_exact, exact_graph, in_row_view;
    bool dec_view;     /* attention_split_mixed's decode rows: the batched decode kernels, not the flash kernel */
    bool cfg_one_row; /* attention of a row-exact pass in one launch: launch shapes as for one row */
    int32_t cap_blocks;
    int32_t *h_exact_blocks; /* [cap_tok] */
    int32_t *h_tokens, *h_pos, *h_seq, *h_kv_slot, *h_output_rows, *h_block_table;
    size_t cap_tok, cap_bt;
    int32_t *pinned; /* staging of the upload */
    size_t pinned_cap;
    cudaEvent_t staged; /* the last upload has read `pinned` */
    int32_t *d_plan;
    size_t d_plan_cap;
    const int32_t *d_tokens, *d_pos, *d_seq, *d_kv_slot, *d_output_rows, *d_block_table;
    /* scratch */
    void *act, *tile, *attn, *tmp;
    size_t act_cap, tile_cap, attn_cap, tmp_cap;
    int64_t max_k;
    qr_cuda_tune tune;
    qr_status error;
    char error_msg[256];
    /* decode graphs (run_graph) */
    cuda_graph_rec *graphs; /* [MAX_GRAPHS], n_graphs used */
    int n_graphs;
    bool graph_mode;      /* inside run_graph: launch shapes fixed per key (attention splits) */
    bool capturing;       /* the stream is being captured: no allocation or synchronisation allowed */
    bool graphs_off;      /* QUARREL_CUDA_GRAPH=0, or a capture failed once (graph_note says why) */
    uint64_t scratch_gen; /* bumped whenever a scratch buffer or the device plan moves */
    int64_t n_captured, n_replayed;
    bool host_prof;       /* QUARREL_HOST_PROF=1: the host time of the graph launches, printed every 256 replays */
    double t_launch;      /* seconds in cudaGraphLaunch over the replays (printed every 256) */
    int64_t n_launch_prof;
    char graph_note[256];
    /* reuse of the mat-vec's quantized activations by the next matmul on the same input (q/k/v,
     * gate/up): valid while no other op ran in between (op_epoch counts every cuda_ok/cublas_ok) */
    uint64_t op_epoch;
    bool act_valid;
    const float *act_x;
    int64_t act_rows, act_k;
    int act_kind;
    uint64_t act_epoch, act_gen;
    /* act_hold: while hold_x is set, its activations stay in `act` (valid by hold_valid / hold_kind,
     * across ops) and every other input's go to `act2` */
    const float *hold_x;
    int64_t hold_rows, hold_k;
    int hold_kind;
    bool hold_valid;
    /* the f16 activations of the batched GEMMs (act + its h region): the next GEMM on the same input right after
     * (q / k / v, gate / up) takes them as they are (act_f16) */
    bool xh_valid;
    const float *xh_x;
    int64_t xh_rows, xh_k;
    int xh_kind;
    uint64_t xh_epoch, xh_gen;
    void *act2;
    size_t act2_cap;
    int *diverged_h, *diverged_d; /* the scan's divergence flag (mapped pinned memory), or NULL */
    /* the grouped expert GEMM of prefill (moe_gemm): device scratch, host staging of ids and orders */
    void *moe;
    size_t moe_cap;
    void *nccl_comm; /* tensor parallelism: the NCCL communicator of this GPU's rank (tp_nccl.cu), or NULL */
    bool nccl_joined; /* nccl_comm joins ranks of other processes (qr_backend_cuda_tp_join): torn down by abort */
    bool nccl_aborted; /* that abort happened (a rank was lost, or teardown): all_reduce raises an error */
    struct cuda_p2p *p2p; /* its peer-to-peer all-reduce (tp_nccl.cu), or NULL when the GPUs cannot reach each other */
    void *topk; /* topk_rows's results on the device (vals, ids, n_fin), topk_cap bytes */
    size_t topk_cap;
    void *dq_part; /* the split-K partial sums of the batched-decode GEMM (matmul_dq.cu) */
    size_t dq_part_cap;
    /* a matmul op's split-K sums left in dq_part (tune.dq_defer): pend_y = the sum over pend_splits parts of pend_n
     * floats each, still to be written; the next op adds them itself (add_rmsnorm) or CB() runs the reduction first */
    float *pend_y;
    int32_t pend_splits;
    int64_t pend_n;
    /* matmul_multi's form (pend_nw 2-3: q / k / v, the rope + K/V store adds them): pend_ys[i] = [pend_rows][pend_nout[i]]
     * (pend_y = pend_ys[0]); pend_nw 1: the single matmul's y of pend_n floats */
    int32_t pend_nw;
    float *pend_ys[3];
    int64_t pend_nout[3], pend_rows;
    bool defer_ok; /* set by the matmul op's entry only: a nested matmul (inside another op) always reduces */
    int32_t *h_moe;
    size_t h_moe_cap;           /* bytes */
    /* ids written by the last routing kernel while no kernel that waits for its predecessor before
     * letting the next one launch (a quantize kernel, an expert mat-vec reading late) has been
     * launched since: a kernel launched now could still overlap that routing kernel (pdl). An expert
     * mat-vec on other ids (NULL: on any) reads them before its dependency wait. */
    const int32_t *ids_unfenced;
    int32_t *zero_ids;      /* 64 zero expert ids (matmul_act runs the expert mat-vec on one matrix) */
    int32_t *head_ids;      /* matmul_heads: [head_ids_cap] ids r * H + j -> j (each head its own "expert") */
    int64_t head_ids_cap;   /* entries of head_ids */
    int32_t head_ids_h;     /* the H they were filled for */
    void *heads_x, *heads_y;/* matmul_heads' contiguous slices */
    size_t heads_x_cap, heads_y_cap;
    void *kvq_q;            /* attention over a quantized cache: q rotated as the cache's K (kv_quant.cu) */
    size_t kvq_q_cap;
    unsigned int *attn_cnt; /* flash-decoding's per-tile split counters (zero between launches) */
    size_t attn_cnt_cap;    /* counters allocated */
    /* exact mode (QUARREL_CUDA_EXACT=1, exact.cu): matmul, rmsnorm, rope and attention with the CPU
     * backend's arithmetic, no fusions; its state (rope tables, scratch) */
    bool exact;
    struct cuda_exact *ex;
    int32_t kv_block_size; /* the largest KV block size allocated (positions a graph's block table reaches) */
    /* the flash attention of prompt batches (attention_flash.cu): its tile list, built on the host per batch
     * plan (plan_gen) and GQA group, uploaded once for all the layers of the pass */
    size_t f16_cache_bytes; /* device bytes the weights' f16 copies hold (cuda_weight.f16) */
    uint64_t plan_gen;      /* bumped by every set_batch */
    int32_t *h_fa_tiles;    /* [fa_n][4] host copy */
    size_t h_fa_cap;        /* tiles the host copy holds */
    void *fa_tiles;         /* device copy */
    size_t fa_tiles_cap;    /* bytes */
    uint64_t fa_gen;        /* plan_gen of the uploaded list (0: none) */
    int32_t fa_group, fa_rows, fa_n; /* its group, rows a tile and tile count */
} cuda_backend;

/* The tuning defaults, with the QUARREL_CUDA_* switches applied (tune.cu). */
void cuda_tune_defaults(qr_cuda_tune *t);

/* Writes a pending split-K sum (cuda_backend.pend_y) with the reduction kernel and clears it (backend_cuda.cu). */
void cuda_pend_flush(cuda_backend *cb);

/* The backend of an op; every op begins with it, so a matmul's pending split-K sum is written before any other op
 * reads or overwrites its output or the parts. */
static inline cuda_backend *CB(qr_backend *be) {
    cuda_backend *cb = (cuda_backend *)be->impl;
    if (cb->pend_y) cuda_pend_flush(cb);
    return cb;
}

/* CB without writing a pending sum: only where an op may take the parts itself (cuda_add_rmsnorm, cuda_rope_attention
 * and its rope_kv_store), which then calls CB for anything it does not take. */
static inline cuda_backend *CB_PEND(qr_backend *be) { return (cuda_backend *)be->impl; }

/* Tensor parallelism (tp_nccl.cu): fills the thread_bind and all_reduce ops; destroys the communicator. */
void cuda_tp_ops(qr_backend_ops *o);
void cuda_tp_release(cuda_backend *cb);

/* Records the first error (sticky until last_error reports it). */
void raise_error(cuda_backend *cb, qr_status st, const char *fmt, ...);
/* Records a failed CUDA call; true when e is cudaSuccess (every op checks its launches here). */
bool cuda_ok(cuda_backend *cb, cudaError_t e, const char *what);
bool cublas_ok(cuda_backend *cb, cublasStatus_t s, const char *what);
/* Grows a scratch buffer to `need` bytes (never during graph capture). */
bool ensure_scratch(cuda_backend *cb, void **buf, size_t *cap, size_t need, const char *what);
/* The f16 copy of a quantized weight of n rows (n_expert * n_out for expert weights), made on first use where the
 * device has room for it (backend_cuda.cu), or NULL. */
const void *f16_cache(cuda_backend *cb, cuda_weight *cw, int64_t n);
/* The prepared record of w, or NULL with an error raised. */
const cuda_weight *prepared(cuda_backend *cb, const qr_weight *w, const char *op);

static inline size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

/* The mat-vec activations of one matmul input in the act scratch (act_layout_of). */
typedef struct act_ptrs {
    int kind; /* qr_cuda_act_kind */
    int64_t k;
    int8_t *q;
    float *d, *s;
    int16_t *g;
    const void *h;
} act_ptrs;

bool act_scratch(cuda_backend *cb, int kind, const float *x, int64_t n_rows, int64_t k, act_ptrs *a);
/* Quantizes / converts x[n_rows][k] for a mat-vec over `type`, unless the op before left exactly these. */
bool act_prepare(cuda_backend *cb, qr_type type, const float *x, int64_t n_rows, int64_t k, act_ptrs *a);
cuda_xview act_view(const act_ptrs *a, int64_t t0);
/* Records that the scratch holds x's activations of kind (valid for the next op only). */
void act_mark(cuda_backend *cb, const float *x, int64_t n_rows, int64_t k, int kind);

/* Programmatic dependent launch for the decode-path kernels (sm_90+, tune.pdl). */
static inline bool use_pdl(const cuda_backend *cb) { return cb->has_pdl && cb->tune.pdl != 0; }
static inline bool overlaps(const float *a, int64_t na, const float *b, int64_t nb) {
    return a < b + nb && b < a + na;
}
/* Warps per output row of a mat-vec with n rows (the tune knob, else by size). */
static inline int32_t mmv_wpr(const cuda_backend *cb, int64_t n) {
    const int32_t wpr = cb->tune.mmvq_wpr;
    if (wpr == 1 || wpr == 2 || wpr == 4) return wpr;
    return n >= 4096 ? 1 : (n >= 2048 ? 2 : 4);
}

/* ---- the MoE and Mamba2 ops (backend_cuda_hybrid.cu), as backend.h describes them ---- */
void cuda_moe_route(qr_backend *be, const float *logits, int64_t n_rows, const qr_moe_route_params *p, int32_t *ids,
                    float *weights);
void cuda_matmul_id(qr_backend *be, const qr_moe_matmul_args *a);
void cuda_matmul_act(qr_backend *be, const qr_weight *w, const float *x, int64_t n_rows, qr_glu_kind act, float *out,
                     float *scratch);
void cuda_glu(qr_backend *be, const float *g, const float *u, int64_t n, qr_glu_kind act, float *out);
/* backend_cuda_graph.cu */
void cuda_graph_release(qr_backend *be, const void *owner);
qr_status cuda_run_graph(qr_backend *be, const void *owner, uint64_t key, void (*fn)(void *), void *arg, char *err,
                         size_t err_len);
void cuda_moe_gate_up(qr_backend *be, const qr_moe_matmul_args *a);
void cuda_moe_combine(qr_backend *be, const float *y, const float *w, int64_t n_rows, int32_t n_used, int64_t dim,
                      const float *add, float *out);
void cuda_moe_down_combine(qr_backend *be, const qr_moe_matmul_args *a);
void cuda_ssm_conv(qr_backend *be, const float *x, int64_t x_stride, float *conv_state, const qr_weight *w,
                   const qr_weight *b, const qr_ssm_params *p, float *out);
void cuda_ssm_scan(qr_backend *be, const qr_ssm_scan_args *a);
void cuda_ssm_gate_norm(qr_backend *be, const qr_ssm_gate_norm_args *a);

/* ---- exact mode (exact.cu) ---- */
void cuda_exact_matmul(cuda_backend *cb, const qr_weight *w, const cuda_weight *cw, const float *x, int64_t n_rows,
                       float *y);
/* As cuda_exact_matmul over the rows of view v (a head of a 3-D weight: no_repack, as llama.cpp's 3-D mul_mat). */
void cuda_exact_matmul_view(cuda_backend *cb, const qr_weight *w, const cuda_wview *v, const float *x, int64_t n_rows,
                            float *y, bool no_repack);
void cuda_matmul_heads(qr_backend *be, const qr_matmul_heads_args *a);
void cuda_copy_rows(qr_backend *be, const float *src, int64_t src_stride, float *dst, int64_t dst_stride,
                    int64_t n_rows, int64_t width);
void cuda_exact_rmsnorm(cuda_backend *cb, const float *x, const float *w, int64_t n_rows, int64_t dim, float eps,
                        float *y);
void cuda_exact_rope(cuda_backend *cb, float *x, int32_t n_head, int32_t head_dim, const qr_rope_params *p);
/* a: the attention launch arguments (pos = each row's last key); span: the most keys a row sees */
void cuda_exact_attention(cuda_backend *cb, const cuda_attn_args *a, int32_t span);
void cuda_exact_geglu(cuda_backend *cb, const float *g, const float *u, int64_t n, float *out);
/* The GLUs that call the C library's expf: gpt-oss's clamped SwiGLU, qwen2moe's sigmoid (act QR_GLU_SIGMOID,
 * u unused); the other GLUs are exact in elementwise.cu. */
void cuda_exact_glu_libm(cuda_backend *cb, const float *g, const float *u, int64_t n, qr_glu_kind act, float *out);
/* out = tanh(x * (1 / cap)) * cap with the C library's tanhf (qx_libm_tanhf), as the CPU's softcap. */
void cuda_exact_softcap(cuda_backend *cb, const float *x, float cap, int64_t n, float *out);
void cuda_exact_free(cuda_backend *cb);
/* matmul_id in the CPU expert matmul's order (b: the bias on the device, or NULL) */
void cuda_exact_matmul_id(cuda_backend *cb, const qr_weight *w, const cuda_weight *cw, const qr_weight *bias,
                          const float *b, const float *x, bool per_slot, const int32_t *ids, int64_t n_rows,
                          int32_t n_used, float *y);
/* the Mamba2 ops as cpu/ops_ssm.c (softplus and dA on the host: libm) */
void cuda_exact_ssm_conv(cuda_backend *cb, const float *x, int64_t x_stride, float *state, const float *w, const float *b,
                         const qr_ssm_params *p, float *out);
void cuda_exact_ssm_scan(cuda_backend *cb, float *state, const float *xbc, const float *dt, int64_t dt_stride,
                         const qr_weight *dt_bias, const qr_weight *A, const float *D, const qr_ssm_params *p, float *y);
void cuda_exact_ssm_gate_norm(cuda_backend *cb, const float *y, const float *z, int64_t z_stride, const float *w,
                              int64_t n_rows, const qr_ssm_params *p, float eps, float *out);
/* routing by the CPU's own function on the host (a synchronisation per call) */
void cuda_exact_moe_route(qr_backend *be, const float *logits, int64_t n_rows, const qr_moe_route_params *p, int32_t *ids,
                          float *weights);

#endif /* QR_CUDA_BACKEND_H */
