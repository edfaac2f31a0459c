/* cpu.h — internals of the CPU backend: thread pool, per-ISA kernel table, backend state. */
#ifndef QR_BACKEND_CPU_H
#define QR_BACKEND_CPU_H

#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "backend/backend.h"
#include "quant/quant.h"

/* Largest head size the attention kernels accept (their q copy and the per-thread lane scratch). */
#define QR_CPU_MAX_HEAD_DIM 576
/* Lane accumulators of one attention head: [QR_CPU_ATTN_LANES][QR_CPU_MAX_HEAD_DIM] floats per thread. */
#define QR_CPU_ATTN_LANES 32

/* ---- thread pool (threadpool.c) ---- */

/* fn(arg, lo, hi, ith) processes items [lo, hi); ith identifies the calling thread (0 = the caller,
 * 1..n_threads-1 = workers), e.g. to pick per-thread scratch. */
typedef void (*cpu_range_fn)(void *arg, int64_t lo, int64_t hi, int ith);
typedef struct cpu_pool cpu_pool;

/* Starts n_threads - 1 persistent workers (n_threads >= 1). NULL on failure. */
cpu_pool *cpu_pool_create(int n_threads);
/* Stops and joins the workers. NULL is fine. */
void cpu_pool_free(cpu_pool *pool);
/* Runs fn over [0, n) in chunks of `grain` items, claimed by the caller and whichever workers are
 * running; returns when all are done. Runs inline when n <= grain or the pool has one thread. */
void cpu_pool_for(cpu_pool *pool, int64_t n, int64_t grain, cpu_range_fn fn, void *arg);
int cpu_pool_n_threads(const cpu_pool *pool);

/* ---- exp: the vectorizable expf of ARM's optimized-routines (the one ggml's SIMD softmax and SiLU
 * use on x86), as a scalar twin of ops_avx2.c's 8-lane version: same operations, same bits.
 * Max error about 1.5 ulp; tiny/huge results follow the same special-case path. ---- */

static inline float cpu_bits_f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint32_t cpu_f_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

#define CPU_EXP_SHIFT 0x1.8p23f
#define CPU_EXP_INV_LN2 0x1.715476p+0f
#define CPU_EXP_LN2_HI 0x1.62e4p-1f
#define CPU_EXP_LN2_LO 0x1.7f7d1cp-20f
#define CPU_EXP_C0 0x1.ffffecp-1f
#define CPU_EXP_C1 0x1.fffdb6p-2f
#define CPU_EXP_C2 0x1.555e66p-3f
#define CPU_EXP_C3 0x1.573e2ep-5f
#define CPU_EXP_C4 0x1.0e4020p-7f

static inline float cpu_expf(float x) {
    const float z = fmaf(x, CPU_EXP_INV_LN2, CPU_EXP_SHIFT); /* n = round(x / ln2) in z's low bits */
    const float n = z - CPU_EXP_SHIFT;
    const float r = fmaf(-n, CPU_EXP_LN2_LO, fmaf(-n, CPU_EXP_LN2_HI, x)); /* x - n ln2 */
    const uint32_t e = cpu_f_bits(z) << 23;
    const float scale = cpu_bits_f(e + cpu_f_bits(1.0f)); /* 2^n */
    const float r2 = r * r;
    const float poly = fmaf(fmaf(fmaf(CPU_EXP_C4, r, CPU_EXP_C3), r2, fmaf(CPU_EXP_C2, r, CPU_EXP_C1)), r2, CPU_EXP_C0 * r);
    if (!(fabsf(n) > 126.0f)) return fmaf(poly, scale, scale);
    /* 2^n out of range: split the scale in two factors */
    const uint32_t g = n <= 0.0f ? 0x82000000u : 0u;
    const float s1 = cpu_bits_f(g + 0x7f000000u), s2 = cpu_bits_f(e - g);
    if (fabsf(n) > 192.0f) return s1 * s1;
    return fmaf(s2, poly, s2) * s1;
}

/* ---- kernels: one table per ISA (ops_scalar.c = the oracle, ops_avx2.c) ---- */

/* One query row/head of attention, the data it reads from the paged cache. */
typedef struct cpu_attn_job {
    const float *q;              /* [head_dim_k] query head (f32; the kernel rounds it to f16 first) */
    const void *k_base;          /* layer's K storage: [n_blocks * block_size][k_stride] of kv_type */
    const void *v_base;          /* layer's V storage: [n_blocks * block_size][v_stride] of kv_type */
    int64_t k_stride, v_stride;  /* elements per cache slot (k_dim, v_dim) */
    int64_t k_off, v_off;        /* element offset of this kv head inside a slot */
    qr_type kv_type;             /* attn_head: QR_TYPE_F16 or QR_TYPE_F32, of K and V alike */
    /* the flash path (qr_cpu_attn_head_flash: any other pair of cache types) */
    qr_type k_type, v_type;      /* storage types of K and V */
    size_t k_row_bytes, v_row_bytes; /* bytes of one slot's K (V) row */
    size_t k_head_bytes, v_head_bytes; /* byte offset of this kv head inside a slot's row */
    qr_from_float_fn q_to_vec_dot;   /* q -> the K type's vec_dot_type (ggml's from_float of that type) */
    qr_vec_dot_fn k_dot;             /* the K type's vec_dot (K row . converted q) */
    qr_to_float_fn v_to_float;       /* V row -> f32 (NULL for F16 and F32 V) */
    int32_t rot_k, rot_v;            /* the cache's Walsh-Hadamard rotations (qr_kv_desc), 0 = none */
    const int32_t *block_table;  /* [max_blocks] physical block ids of the sequence */
    int32_t block_size;
    int32_t first, last;         /* key positions [first, last] (inclusive) */
    int32_t head_dim_k, head_dim_v;
    float scale, softcap;
    bool single;                 /* the pass has one row: ggml's vec_dot_f16 order, else tinyBLAS's */
    bool has_sink;               /* the softmax also counts exp(sink) in its denominator (gpt-oss sinks) */
    float sink;
    float *scores;               /* scratch, [last - first + 1] floats */
    float *acc;                  /* scratch, [QR_CPU_ATTN_LANES][QR_CPU_MAX_HEAD_DIM] floats, 64-byte aligned,
                                    owned by the calling thread (heap, not thread-local: see architecture.md) */
    float *out;                  /* [head_dim_v] */
} cpu_attn_job;

typedef struct cpu_kernels {
    const char *name; /* "scalar" or "avx2" */
    /* y = x / sqrt(mean(x^2) + eps) (* w when w != NULL), one row of dim. */
    void (*rmsnorm_row)(const float *x, const float *w, int64_t dim, float eps, float *y);
    /* Rotates one row x[n_head][head_dim] using cs = {cos0, sin0, cos1, sin1, ...} of n_rot/2 pairs. */
    void (*rope_row)(float *x, int32_t n_head, int32_t head_dim, int32_t n_rot, qr_rope_mode mode,
                     const float *cs);
    /* y = softmax(x), one row of dim. */
    void (*softmax_row)(const float *x, int64_t dim, float *y);
    /* Attention for one query head over positions [first, last], with ggml's (non flash-attention)
     * numerics: q rounded to f16; scores s = scale * softcap(q.k); p = softmax(s) in f32 with the sum
     * in double; p rounded to f16; out = sum p * v. The two dot products are summed in the order
     * llama.cpp's CPU path uses: tinyBLAS's 8 lanes for passes of several rows, ggml's vec_dot_f16
     * 32 lanes (4 x 8) for one-row passes. */
    void (*attn_head)(const cpu_attn_job *job);
    /* out = silu(g) * u; out = gelu(g) * u (gelu via the f16 table gelu_tab: f32 values of the f16
     * GELU of each half); n elements. */
    void (*swiglu)(const float *g, const float *u, int64_t n, float *out);
    void (*geglu)(const float *g, const float *u, int64_t n, float *out, const float *gelu_tab);
    void (*add)(const float *a, const float *b, int64_t n, float *out);
    void (*mul)(const float *a, const float *b, int64_t n, float *out);
    void (*scale)(const float *x, float s, int64_t n, float *out);
    /* dst[i] = f16(src[i]) with round-to-nearest-even (KV store). */
    void (*to_f16)(const float *src, uint16_t *dst, int64_t n);
    /* The flash path's vector steps, in ggml's x86 order: y[i] = fma(x[i], v, y[i]) (ggml_vec_mad_f32);
     * y[i] = f16(fma(f32(x[i]), v, f32(y[i]))) (ggml_vec_mad_f16); y[i] = f16(f32(y[i]) * v)
     * (ggml_vec_scale_f16); n elements. */
    void (*mad_f32)(float *y, const float *x, float v, int64_t n);
    void (*mad_f16)(uint16_t *y, const uint16_t *x, float v, int64_t n);
    void (*scale_f16)(uint16_t *y, float v, int64_t n);
} cpu_kernels;

/* Attention for one query head with llama.cpp's flash-attention CPU numerics (ggml's
 * flash_attn_ext, the one-chunk path it takes for quantized caches): q converted once to the K type's
 * vec_dot_type (job->q_to_vec_dot), s = scale * softcap(k_dot(K row, q)) per key in position order, an
 * online softmax in f32 with expf, V rows (dequantized by job->v_to_float, or F16 accumulated in f16
 * as ggml does) summed with the running weights, sinks after the keys, then out = acc / S. The same
 * for one-row and multi-row passes. Reads the quantized rows directly (attn_flash.c). */
void qr_cpu_attn_head_flash(const cpu_kernels *k, const cpu_attn_job *job);
/* x[0..n) = the orthonormal Walsh-Hadamard transform of each chunk of `chunk` values (a power of two), in
 * ggml's order (its fwht: each value times 1/sqrtf(chunk), then butterflies u + v, u - v of growing span):
 * what llama.cpp's rotated KV cache applies. Its own inverse. */
void qr_cpu_fwht(float *x, int64_t n, int32_t chunk);

extern const cpu_kernels qr_cpu_kernels_scalar;
/* The AVX2/FMA/F16C table (ops_avx2.c, compiled with those flags; call only when cpuid has them). */
extern const cpu_kernels qr_cpu_kernels_avx2;

/* attn_head_avx2's softmax step (ops_avx2.c): scores s[0..last - first] with maximum max -> f16-rounded
 * probabilities in place. */
void qr_cpu_attn_probs_avx2(const cpu_attn_job *j, float *s, float max);
/* attn_head_avx2 for the n heads jobs[0..n) of one GQA group at one query row (the same K / V rows, positions and
 * block table; each its own q, scores, out), multi-row passes only (!single), F16 K and V, head_dim_k % 8 == 0,
 * head_dim_v % 16 == 0, n <= QR_CPU_ATTN_GROUP_MAX, n * 8 * head_dim_v <= QR_CPU_ATTN_LANES * QR_CPU_MAX_HEAD_DIM;
 * jobs[0].acc the scratch, each job's scores its own. Bit-identical to attn_head_avx2 per head: each K / V row is
 * converted once for the group, two keys per zmm in the scores, 16 dims per zmm in the weighted V sums
 * (attn_avx512.c; AVX-512 hosts only). */
#define QR_CPU_ATTN_GROUP_MAX 8
void qr_cpu_attn_group_avx512(const cpu_attn_job *jobs, int n);
/* True when the CPU (and OS) support AVX2, FMA and F16C. */
bool qr_cpu_has_avx2(void);

/* The activation converter for Q8_0 / Q8_1 (ggml's x86 SIMD quantizer numerics, act_quant.c);
 * NULL for other types (the quant traits' from_float is used). */
qr_from_float_fn qr_cpu_act_quantizer(qr_type vec_dot_type);
/* One block of 32 activations -> codes in qs; returns the scale d, *sum = sum of the codes. */
typedef float (*qr_cpu_act_block_fn)(const float *x, int8_t *qs, int *sum);
/* Rows of n activations -> Q8_0 / Q8_1 blocks with a block quantizer (the scalar or the AVX2 one). */
void qr_cpu_act_rows_q8_0(const float *x, void *dst, int64_t n, qr_cpu_act_block_fn block);
void qr_cpu_act_rows_q8_1(const float *x, void *dst, int64_t n, qr_cpu_act_block_fn block);
/* The same converters in AVX2 (act_quant_avx2.c; identical bytes; call only when cpuid has AVX2). */
qr_from_float_fn qr_cpu_act_quantizer_avx2(qr_type vec_dot_type);

/* ggml's tanh-approximation GELU in f32 (the value the f16 table is built from). */
float qr_cpu_gelu_f32(float x);
/* Fills tab[65536] with fp16_to_fp32(fp32_to_fp16(gelu(fp16_to_fp32(h)))) for every half h. */
void qr_cpu_gelu_table_init(float *tab);
/* The cos/sin pairs of one position: cs[2i] = cos(theta_i) * mscale, cs[2i+1] = sin(...), i < n_rot/2,
 * with ggml's formula: theta_i = pos * base^(-2i/n_rot) (iterated in f32), / freq_factors[i],
 * YaRN-corrected. ff may be NULL. */
void qr_cpu_rope_cache(float pos, const qr_rope_params *p, const float *ff, float *cs);

/* ---- backend state (backend_cpu.c) ---- */

typedef struct cpu_backend {
    cpu_pool *pool;
    const cpu_kernels *k;
    bool scalar;              /* use qr_quant_traits_ref instead of _best */
    float *gelu_tab;          /* [65536] */
    /* batch plan copy */
    int32_t n_tokens, n_seqs, max_blocks, n_outputs;
    bool row_exact;              /* the plan's row_exact: kernels chosen as for a one-row pass */
    int32_t *tokens, *pos, *seq, *kv_slot, *block_table, *output_rows;
    size_t plan_cap_tok, plan_cap_bt; /* capacities of the arrays above */
    /* attention scratch: per thread, scores_cap floats each */
    float *scores;
    size_t scores_cap;
    int scores_nth;           /* threads the scratch was sized for */
    /* attention lane accumulators: per thread, [QR_CPU_ATTN_LANES][QR_CPU_MAX_HEAD_DIM] floats each,
     * 64-byte aligned (aligned_alloc), [acc_nth] threads */
    float *attn_acc;
    int acc_nth;
    /* non-causal attention: the last position of each sequence in the pass, [seq_last_cap] */
    int32_t *seq_last;
    size_t seq_last_cap;
    /* matmul scratch: activations converted to the weight's vec_dot_type */
    void *wdata;
    size_t wdata_cap;
    float *heads_buf;   /* matmul_heads' contiguous head slices (x | y) */
    size_t heads_cap;   /* floats */
    int tile_r, tile_c;       /* matmul tile for multi-row passes: weight rows x token rows (QUARREL_TILE=RxC) */
    bool tile_set;            /* QUARREL_TILE was set: that shape for every type (else tile_rows_for's rows) */
    /* sticky error raised by an op */
    qr_status error;
    char error_msg[256];
} cpu_backend;

struct qr_kv_storage {
    qr_kv_desc desc;
    void **k; /* [n_layer] -> [n_blocks * block_size] K rows of k_dim values of desc.type_k (row_k bytes each) */
    void **v; /* [n_layer] -> [n_blocks * block_size] V rows of v_dim values of desc.type_v (row_v bytes each) */
    size_t row_k, row_v; /* bytes of one slot's K / V row of a layer */
    bool flash;          /* attention takes the flash path (types other than F16/F16 or F32/F32) */
};

/* ---- MoE and Mamba2 ops (ops_moe.c, ops_ssm.c): the op table entries of the same names in
 * backend.h; they read the batch plan and raise errors through the cpu_backend above. ---- */
void qr_cpu_moe_route(qr_backend *be, const float *logits, int64_t n_rows, const qr_moe_route_params *p, int32_t *ids,
                      float *weights);
void qr_cpu_matmul_id(qr_backend *be, const qr_moe_matmul_args *a);
void qr_cpu_moe_gate_up(qr_backend *be, const qr_moe_matmul_args *a);
void qr_cpu_moe_combine(qr_backend *be, const float *y, const float *w, int64_t n_rows, int32_t n_used, int64_t dim,
                        const float *add, float *out);
void qr_cpu_glu(qr_backend *be, const float *g, const float *u, int64_t n, qr_glu_kind act, float *out);
void qr_cpu_ssm_conv(qr_backend *be, const float *x, int64_t x_stride, float *conv_state, const qr_weight *w,
                     const qr_weight *b, const qr_ssm_params *p, float *out);
void qr_cpu_ssm_scan(qr_backend *be, const qr_ssm_scan_args *a);
void qr_cpu_ssm_gate_norm(qr_backend *be, const qr_ssm_gate_norm_args *a);
/* Records the first op error of the CPU backend (reported by last_error). */
void qr_cpu_raise(qr_backend *be, qr_status st, const char *msg);

#endif /* QR_BACKEND_CPU_H */
