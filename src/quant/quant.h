/* quant.h — quantization formats as data: one block struct per type (blocks.h) and a traits table.
 *
 * Rows: every function works on a row of n elements, n a multiple of the type's block size.
 * Weights are stored as rows of their GGUF type; before a dot product the activation row is
 * converted to the weight type's `vec_dot_type` (e.g. Q8_0 for Q4_0, Q8_K for the K-quants, F16 for
 * F16), exactly as ggml does, and vec_dot multiplies one weight row by one converted activation row.
 *
 * Bit-exactness with llama.cpp: the best (AVX2) vec_dot of each type does ggml's x86 vec_dot's float
 * operations in its order. llama.cpp's CPU backend does not always use vec_dot, though: depending on
 * the weight type, its row count and the number of activation rows of the matmul it runs repacked
 * GEMM/GEMV kernels, a tiled K-quant GEMM or llamafile's sgemm, each with its own accumulation order.
 * The traits carry a dot product in each of those orders (vec_dot_gemv, _gemm, _tiled, _sgemm) and
 * the CPU backend's matmul picks, row by row, the one llama.cpp would (backend/cpu/backend_cpu.c).
 * The orders were checked against libggml-cpu's own kernels (llama-cpp-python 0.3.36) on random data.
 */
#ifndef QR_QUANT_H
#define QR_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quant/types.h"

/* dst[0..n) = dequantized src row. */
typedef void (*qr_to_float_fn)(const void *src, float *dst, int64_t n);
/* dst = src[0..n) quantized to the type (reference quality; deterministic). */
typedef void (*qr_from_float_fn)(const float *src, void *dst, int64_t n);
/* *s = dot(x, y) over n elements; x is a row of the weight type, y a row of its vec_dot_type. */
typedef void (*qr_vec_dot_fn)(int64_t n, float *s, const void *x, const void *y);
/* A tile of vec_dots: s[c * bs + r] = dot(x row r, y row c) for r < nr, c < nc (1 <= nr, nc <=
 * QR_TILE_MAX), x rows bx bytes apart, y rows by bytes apart; each result bit-identical to vec_dot's. */
typedef void (*qr_vec_dot_tile_fn)(int64_t n, float *s, int64_t bs, const void *x, size_t bx, const void *y,
                                   size_t by, int nr, int nc);
#define QR_TILE_MAX 4

/* A load-time repack of a weight type's rows for its repacked path (vec_dot_gemm / _gemv, or vec_dot), made by the CPU
 * backend's weight_prepare when the row count is a multiple of `rows`: pack writes n_rows rows of length k (a multiple
 * of the block size; rows row_bytes apart) as row_bytes_of(k) bytes a row, groups of `rows` rows consecutive;
 * gemm_tile / gemv_tile are vec_dot_gemm_tile / _gemv_tile (vec_dot_order: vec_dot_tile) on that layout, x = the first row of a group, nr = rows,
 * nc <= cols, results bit-identical. act_extra (NULL: none) appends act_extra_bytes(k) bytes to each converted
 * activation row these tiles read (the y rows then lie qr_type_row_size(vec_dot_type, k) + act_extra_bytes(k) bytes
 * apart). */
typedef struct qr_quant_repack {
    int32_t rows, cols;
    bool vec_dot_order;  /* the tiles compute vec_dot's order (both tiles the same), not vec_dot_gemm / _gemv's */
    size_t (*row_bytes_of)(int64_t k);
    void (*pack)(const void *src, size_t row_bytes, int64_t n_rows, int64_t k, void *dst);
    qr_vec_dot_tile_fn gemm_tile, gemv_tile;
    size_t (*act_extra_bytes)(int64_t k);
    void (*act_extra)(const void *yrow, int64_t k, void *extra);
    /* row r (< rows) of the packed group at `group` back in the file's layout (dst: one row of the type) */
    void (*unpack_row)(const void *group, int r, int64_t k, void *dst);
} qr_quant_repack;

typedef struct qr_quant_traits {
    qr_type type;
    qr_to_float_fn to_float;     /* NULL if the type cannot be dequantized */
    qr_from_float_fn from_float; /* NULL if we cannot quantize to it */
    qr_vec_dot_fn vec_dot;       /* NULL if the type cannot be a matmul weight */
    qr_type vec_dot_type;        /* activation format vec_dot expects */
    /* llama.cpp's x86 CPU backend moves some weight types (Q4_K on AVX2) into a "repacked" buffer,
     * 8 rows interleaved, and multiplies them with its own GEMM (groups of 4 activation rows) and
     * GEMV (the rows left over) kernels, whose float accumulation differs from vec_dot. These
     * reproduce those kernels bit for bit on our plain row layout (NULL / 0: the type has no such
     * path, use vec_dot):
     *   vec_dot_gemv   one row, y from the vec_dot_type's from_float (ggml's quantize_row_*);
     *   vec_dot_gemm   one row of a 4-row group, y from from_float_gemm (ggml's quantize_mat_*);
     *   repack_rows    the path applies when the weight's row count is a multiple of this. */
    qr_vec_dot_fn vec_dot_gemv;
    qr_vec_dot_fn vec_dot_gemm;
    qr_from_float_fn from_float_gemm;
    int32_t repack_rows;
    /* The K-quant weights it does not repack go through its tiled GEMM (ggml-cpu tiled.cpp) when
     * the matmul has at least QR_TILED_MIN_ROWS activation rows; vec_dot_tiled reproduces it for
     * one row (y from the vec_dot_type's from_float). NULL: no such path. */
    qr_vec_dot_fn vec_dot_tiled;
    /* The other weights go through its llamafile sgemm (tinyBLAS) when the matmul has at least 2
     * rows, the row length is a multiple of sgemm_k and the weight's row count a multiple of sgemm_m
     * (0: any; the float tinyBLAS of x86 takes only multiples of 4: a one-row F32 weight such as
     * qwen2moe's shared-expert gate goes through vec_dot), else through vec_dot; vec_dot_sgemm
     * reproduces tinyBLAS for one row (qr_quant_sgemm_applies). NULL: tinyBLAS computes what vec_dot
     * does, or does not apply (the scalar reference traits leave it NULL). */
    qr_vec_dot_fn vec_dot_sgemm;
    int32_t sgemm_k;
    int32_t sgemm_m;
    /* vec_dot for a tile of weight rows x activation rows at once (same results, faster); NULL:
     * call vec_dot per pair. */
    qr_vec_dot_tile_fn vec_dot_tile;
    /* the same for vec_dot_gemm / vec_dot_gemv (NULL: per pair) */
    qr_vec_dot_tile_fn vec_dot_gemm_tile, vec_dot_gemv_tile;
    /* and for vec_dot_tiled */
    qr_vec_dot_tile_fn vec_dot_tiled_tile;
    /* A load-time repack of the weight rows for the repacked path (qr_quant_repack; rp.pack NULL: none). */
    qr_quant_repack rp;
} qr_quant_traits;

/* Fewest activation rows for which llama.cpp's x86 CPU backend takes its tiled K-quant GEMM. */
#define QR_TILED_MIN_ROWS 8

/* True when llama.cpp's x86 CPU backend runs a matmul of n_rows activation rows with a weight of
 * n_w_rows rows of length k through tinyBLAS (tr->vec_dot_sgemm's order); the caller has ruled out the
 * repacked and tiled paths first. */
static inline bool qr_quant_sgemm_applies(const qr_quant_traits *tr, int64_t k, int64_t n_w_rows, int64_t n_rows) {
    return tr->vec_dot_sgemm && n_rows >= 2 && tr->sgemm_k > 0 && k % tr->sgemm_k == 0 &&
           (tr->sgemm_m <= 0 || n_w_rows % tr->sgemm_m == 0);
}

/* Scalar reference traits (the oracle) for a type; NULL when the type is not supported at all. */
const qr_quant_traits *qr_quant_traits_ref(qr_type type);

/* Fastest traits this CPU supports (AVX-512 / AVX2 picked at run time with cpuid), falling back to
 * the reference functions entry by entry. Same results as the reference within each op's stated
 * tolerance. NULL when the type is not supported. */
const qr_quant_traits *qr_quant_traits_best(qr_type type);

/* Name of the SIMD level qr_quant_traits_best uses: "avx512", "avx2" or "scalar": the best the CPU
 * has, capped by QUARREL_CPU_ISA (avx2 | avx512 | scalar); QUARREL_SIMD=scalar forces the scalar
 * reference. The environment is read at the first call of qr_quant_traits_best / qr_quant_simd_level.
 * Every level gives the same results (llama.cpp's AVX2 build's order) except scalar, the oracle. */
const char *qr_quant_simd_level(void);

/* The level qr_quant_simd_level names, as a QR_CPU_ISA_* value of util/knobs.h (AVX512, AVX2, SCALAR):
 * what the CPU backend's ops use too. */
int qr_quant_cpu_isa(void);

/* True when the CPU and the OS run the AVX-512 kernels (F, BW, VL, DQ, VNNI, ZMM state saved). */
bool qr_quant_cpu_has_avx512(void);

#endif /* QR_QUANT_H */
