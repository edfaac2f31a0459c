/* cuda_internal.h — knobs and handles of the CUDA backend for the lab (tests/cuda/) and benchmarks;
 * not part of the op-table contract. C and C++. Only defined in builds with QUARREL_HAVE_CUDA. */
#ifndef QR_CUDA_INTERNAL_H
#define QR_CUDA_INTERNAL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "backend/backend.h"

/* Launch choices the lab varies; the backend's defaults are what the lab measured best. */
typedef struct qr_cuda_tune {
    int32_t mmvq_max_rows;   /* matmul runs the mat-vec kernels (in groups of 8 rows) up to this many rows,
                              * dequantize + cuBLAS above; default 8 */
    int32_t mmvq_wpr;        /* warps per output row of the mat-vec: 1, 2 or 4; 0 = chosen by the row count */
    int64_t gemm_tile_bytes; /* f16 weight tile of the prefill GEMM (bytes), default 128 MiB */
    int32_t attn_splits;     /* KV splits per (row, kv head) in attention; 0 = chosen by the context length */
    int32_t pdl;             /* 1: launch the mat-vec with programmatic dependent launch (sm_90+), 0: plainly */
    int32_t attn_kernel;     /* 0: flash-decoding (attention_decode.cu) where it applies, for passes of <=
                              * attn_decode_max_rows rows and for longer ones while their scores take <= 512 MiB;
                              * 1: the two-pass kernel only (also QUARREL_CUDA_ATTN=old); 2: flash-decoding for
                              * passes of <= attn_decode_max_rows rows only (QUARREL_CUDA_ATTN=decode) */
    int32_t attn_decode_max_rows; /* default 8 */
    int32_t attn_flash;      /* 1 (default): passes of more than attn_decode_max_rows rows, at least
                              * attn_flash_min_run rows a sequence on average, take the tensor-core flash
                              * attention (attention_flash.cu) where it applies; 0: the kernels above
                              * (QUARREL_CUDA_ATTN=noflash, old or decode) */
    int32_t attn_flash_min_run; /* default 4 (QUARREL_CUDA_ATTN_FLASH_MIN_RUN) */
    int32_t norm_f16; /* 1 (default): a fused norm whose output feeds version 6 of the batched-decode GEMM writes its f16
                       * activations (act kind 2) itself, no conversion launch; 0: the GEMM converts (QUARREL_CUDA_NORM_F16=0) */
    int32_t attn_dec_mma_max_keys; /* the tensor-core decode kernel only while every span a row may have is at most this
                                    * many keys (default 8192; QUARREL_CUDA_ATTN_DEC_MMA_MAX_KEYS): it has no key splits */
    int32_t glu_f16; /* 1 (default): the swiglu after gate / up on version 6 also writes down's f16 activations (act kind 2)
                      * in the same launch; 0: down's GEMM converts them (QUARREL_CUDA_GLU_F16=0) */
    int32_t gemm_f16_act; /* 1 (default): past version 6's rows, the norm and the swiglu before a K-quant GEMM on the f16
                           * cache + cuBLAS write its f16 activations (act kind 1) too; 0: the GEMM converts them
                           * (QUARREL_CUDA_GEMM_F16_ACT=0) */
    int32_t attn_split_mixed; /* 1 (default): a step of decode rows and prompt chunks runs its attention as two passes,
                               * the decode rows on the batched decode kernels (attention_split_mixed); 0: one pass
                               * (QUARREL_CUDA_ATTN_SPLIT_MIXED=0) */
    int32_t attn_dec_mma; /* 1: batched decode steps (more than attn_decode_max_rows rows, f16 cache, head size 64 / 128) take
                           * the tensor-core decode kernel (attention_decode_mma.cu) with one key split while the step has
                           * 2 CTAs an SM (default); 0: the flash-decoding kernels (QUARREL_CUDA_ATTN_DEC_MMA=0) */
    int32_t mmq_dense;       /* 1: a plain matmul of more rows than the mat-vec takes, up to mmq_dense_max_rows, runs
                              * on the int8 tensor-core kernel of the expert GEMM (matmul_mma.cu) for the types it
                              * supports (Q4_0, Q8_0, MXFP4, IQ4_NL) instead of dequantize + cuBLAS; 0 (default: its
                              * grid of n_out / 128 x row tiles leaves most SMs idle on dense shapes, batched decode
                              * at 64 rows measured 2x slower on the H200) (QUARREL_CUDA_MMQ_DENSE=1 turns it on) */
    int32_t mmq_dense_max_rows; /* default 256, at most 4096 (QUARREL_CUDA_MMQ_DENSE_MAX_ROWS) */
    int32_t tp_p2p_max;      /* tensor parallelism: all-reduces of up to this many floats run the one-shot peer-to-peer
                              * kernel of tp_nccl.cu (NVLink / PCIe P2P), larger ones NCCL (QUARREL_CUDA_TP_P2P_MAX=0:
                              * always NCCL); default 1 Mi floats (the kernel's staging) */
    int32_t tp_skip_reduce;  /* profiling only (QUARREL_CUDA_TP_SKIP_REDUCE=1): the all-reduces do nothing, so a tensor-parallel
                              * run times its ranks' own work (its results are wrong) */
    int32_t dq_gemm;         /* 1 (default): a matmul of more rows than the mat-vec takes, up to dq_max_rows, of Q4_K / Q6_K
                              * weights runs on the f16 tensor-core kernel that dequantizes the blocks in registers
                              * (matmul_dq.cu) instead of cuBLAS on the f16 cache (QUARREL_CUDA_DQ_GEMM=0: off) */
    int32_t dq_max_rows;     /* default 64 with the wgmma versions, else 16 (QUARREL_CUDA_DQ_MAX_ROWS) */
    int32_t dq_small_max_rows; /* above it, only matrices of 8,192+ rows or columns (QUARREL_CUDA_DQ_SMALL_MAX_ROWS, 32) */
    int32_t dq_splits;       /* split-K count; 0 (default): chosen from the shape (QUARREL_CUDA_DQ_SPLITS) */
    int32_t dq_wg;           /* the wgmma versions of that kernel for batches of at least dq_wg_min_rows rows (where the
                              * GPU is sm_90 and the build has sm_90a code): 1 (default) A from registers below
                              * dq_ws_min_rows rows, the shared-memory (SS) version from there, both replaced by version 6 up
                              * to 64 rows unless dq_tma is 0; 2 (QUARREL_CUDA_DQ_WG=rs) always the first, 3 (=ss) always
                              * the second, 4 (=tr) always version 6, 0 (=0) none */
    int32_t dq_ws_min_rows;  /* default 33 (QUARREL_CUDA_DQ_WS_MIN_ROWS) */
    int32_t dq_tma;          /* 1 (default): version 6 of that kernel (TMA copies, a producer warp, 4 consumer warpgroups) for
                              * the batches of 9..64 rows that go to a wgmma version; 0: v3 / v4 as before
                              * (QUARREL_CUDA_DQ_TMA=0) */
    int32_t dq_wg_min_rows;  /* default 9 (QUARREL_CUDA_DQ_WG_MIN_ROWS) */
    int32_t dq_multi;        /* 1 (default): matmul_multi's runs of 2-3 weights of one K-quant type (q / k / v) at the batches
                              * version 6 takes go to it as one launch; 0: one matmul each (QUARREL_CUDA_DQ_MULTI=0) */
    int32_t dq_mix;          /* 1 (default): matmul_multi's run may mix Q4_K and Q6_K weights (a Q4_K_M layer's q / k with
                              * its Q6_K v) in one launch of version 6 (dq_wr_mix_kernel); 0: a launch a type
                              * (QUARREL_CUDA_DQ_MIX=0) */
    int32_t dq_pdl;          /* 1: version 6 launched with programmatic dependent launch (the producer copies the first
                              * stages' weights before waiting for the kernel ahead), and its split-K reduction and the
                              * swiglu before down too; 0 (default: measured slower on the H200, session 39: np 16 / 64
                              * steps 3.27 -> 3.35 / 4.74 -> 5.03 ms) (QUARREL_CUDA_DQ_PDL=1) */
    int32_t dq_defer;        /* version 6's split-K sums left in the parts until the next op, which adds them in its own
                              * launch where it can (any other op first runs the reduction, cuda_pend_flush): bit 0 a
                              * single matmul's (the add + rmsnorm after the FFN's down projection), bit 1 matmul_multi's
                              * q / k / v (the rope + K/V store); 3 (default) both, 0: the reduction right after the GEMM
                              * (QUARREL_CUDA_DQ_DEFER) */
    int32_t dq_defer_max_rows; /* ... for batches of up to this many rows (default 16; QUARREL_CUDA_DQ_DEFER_MAX_ROWS) */
    int32_t dq_cluster;      /* 2: version 6 in clusters of 2 CTAs (two 256-row tiles of one weight type) whose stage activations
                              * come from L2 once, multicast by the TMA into both; 1 (default: not yet measured on a GPU)
                              * one CTA each (QUARREL_CUDA_DQ_CLUSTER=2) */
    int32_t rope_heads_rows; /* rope + K/V store with a CTA a (row, head) up to this many rows (default 64), a CTA a row
                              * past it (QUARREL_CUDA_ROPE_HEADS_ROWS; 8 was the limit before session 39) */
    int32_t dq_min_rows;     /* batches of dq_min_rows..mmvq_max_rows rows of Q4_K / Q6_K weights go to version 6 instead
                              * of the mat-vec where it runs (default 5; 9 or more: never) (QUARREL_CUDA_DQ_MIN_ROWS) */
    int32_t dq_wg_mt;        /* its weight rows a CTA: 1 = 128, 2 = 256, 0 (default) = by the shape (QUARREL_CUDA_DQ_WG_MT) */
    int32_t f16_cache;       /* 1 (default): a quantized 2-D weight multiplied by more rows than the mat-vec takes is
                              * dequantized to f16 once and kept (cuda_weight.f16) while the device keeps
                              * max(f16_cache_reserve_mib, a quarter of its memory) free; 0: f16 tiles each time
                              * (QUARREL_CUDA_F16_CACHE=0) */
    int32_t f16_cache_reserve_mib; /* default 8192 (QUARREL_CUDA_F16_CACHE_RESERVE_MIB) */
    int32_t attn_flash_mt;   /* m16 tiles a warp of the flash kernel (head sizes 64 and 128): 1 or 2 (default;
                              * QUARREL_CUDA_ATTN_FLASH_MT) */
    int32_t attn_flash_stages; /* K/V pipeline stages of the flash kernel where a form has a choice (head size 128 with
                                * two m16 tiles a warp): 3 (default) or 2 (QUARREL_CUDA_ATTN_FLASH_STAGES) */
    int32_t attn_flash_splits; /* key splits a tile of the flash kernel; 0 (default) = enough CTAs for two an SM,
                                * each split >= 4 key blocks (QUARREL_CUDA_ATTN_FLASH_SPLITS) */
    int32_t pinned_host;     /* 1: host_alloc gives page-locked memory (the context's logits); 0: it gives
                              * none, so the context uses malloc (QUARREL_CUDA_PINNED=0) */
    long long *attn_dbg;     /* lab: device buffer of 32 clocks, see cuda_attn_args.dbg */
    int32_t attn_ctas_per_sm; /* the split kernels' target CTAs per SM (default 4; QUARREL_CUDA_ATTN_CTAS_PER_SM) */
    int32_t attn_cl_keys;     /* the cluster kernel's keys per CTA target (default 64; QUARREL_CUDA_ATTN_CL_KEYS) */
    int32_t attn_cluster;    /* 1 (default): the flash-decoding passes whose keys fit 8 CTAs of 512 take the
                              * one-launch cluster kernel; 0: the global-memory split kernels
                              * (QUARREL_CUDA_ATTN=nocluster) */
    int32_t act_reuse;       /* 1: a mat-vec reuses the quantized activations of the matmul just before it on the
                              * same input (q/k/v, gate/up); 0: always convert (the lab, which writes inputs
                              * behind the backend's back; also QUARREL_CUDA_ACT_REUSE=0) */
    int32_t multi_pair;      /* 1 (default): q/k/v of two weight types (qr_cuda_multi_pair_supported) in one
                              * mat-vec launch; 0: a launch per type (QUARREL_CUDA_MULTI_PAIR=0) */
    int32_t attn_short;      /* 1 (default): a one-row decode pass over a short span runs rope, the K/V store and
                              * the attention as one launch (attention_short.cu); 0: rope_kv_store, then the
                              * attention kernels (QUARREL_CUDA_ATTN_SHORT=0) */
    int32_t attn_short_g;    /* that kernel's query heads a CTA at most: 1, 2 (default) or 4
                              * (QUARREL_CUDA_ATTN_SHORT_G) */
    int32_t norm_route;      /* 1 (default): a MoE layer's decode norm, router mat-vec and routing in one launch
                              * (qr_cuda_norm_route); 0: three launches (QUARREL_CUDA_NORM_ROUTE=0) */
    int32_t qk_norm;         /* 1 (default): a decode pass's per-head q / k RMS norms (qwen3, gemma3) inside the
                              * one-launch short attention kernel, else inside the rope + K/V store launch; 0: two
                              * rmsnorm launches first (QUARREL_CUDA_QK_NORM=0) */
    int32_t mla_prep;        /* 1 (default): deepseek2's cached row and q rope parts in one launch (mla_prep); 0: the
                              * copies, norm, ropes and store (QUARREL_CUDA_MLA_PREP=0) */
    int32_t heads_gemm;      /* 1 (default): matmul_heads of prompt batches as one strided-batched cuBLAS GEMM over
                              * the heads; 0: through matmul_id's grouped GEMM (QUARREL_CUDA_HEADS_GEMM=0) */
    int32_t attn_gemm;       /* 1 (default): prompt batches whose heads the flash kernel does not take (MLA) run
                              * attention as two cuBLAS GEMMs and a softmax (attn_gemm); 0: the two-pass kernel
                              * (QUARREL_CUDA_ATTN_GEMM=0) */
    int32_t post_norm;       /* 1 (default): a post-norm, the residual add and the next pre-norm (gemma's blocks)
                              * in one launch (add_rmsnorm with b_norm); 0: rmsnorm, then add + rmsnorm
                              * (QUARREL_CUDA_POST_NORM=0) */
    int32_t fuse;            /* 1: the optional fused ops (add_rmsnorm + activation quantization, q/k/v in one
                              * mat-vec launch, gate/up + swiglu, rope + K/V store) run fused; 0: each runs as
                              * the plain ops it stands for (A/B: QUARREL_CUDA_FUSE=0) */
    int32_t gemm_q8_act;     /* 1: the prefill GEMM over quantized weights takes the activations rounded as the
                              * CPU's Q8 quantizer rounds them (then f16); 0: plain f16 (QUARREL_CUDA_GEMM_Q8=0) */
    int32_t moe_kernel;      /* expert matmuls: 0 = the expert mat-vec for decode sizes and the grouped GEMM above;
                              * 1 = the per-slot f32 kernel only (QUARREL_CUDA_MOE=old); 2 = no grouped GEMM
                              * (QUARREL_CUDA_MOE=nogemm) */
    int32_t moe_grouped;     /* 1: the grouped GEMM pads each expert's rows to the largest count and runs each
                              * chunk of experts as one strided-batched GEMM; 0: one cublasGemmEx per expert
                              * (QUARREL_CUDA_MOE=loop) */
    int32_t moe_buckets;     /* 1: when padding to the largest count would more than quadruple the rows, experts whose
                              * counts round up to the same power of two (>= 16) share one pointer-batched GEMM
                              * (f16 weights in place or cached); 0: one cublasGemmEx per expert there
                              * (QUARREL_CUDA_MOE=nobuckets or loop) */
    int32_t moe_tiles;       /* 1: passes with few rows per expert (<= 12 on average) run the quantized mat-vec over
                              * tiles of up to 8 rows of one expert instead of the f16 GEMM; 0: never
                              * (QUARREL_CUDA_MOE=notiles or loop) */
    int32_t ssm_ssd;         /* 1: a prefill whose sequences are each one run of rows, the longest >= ssm_ssd_min_rows,
                              * scans in the chunked SSD form (ssm.cu); 0: the recurrence row by row
                              * (QUARREL_CUDA_SSM_SCAN=rec) */
    int32_t ssm_ssd_min_rows; /* default 32, as the CPU's SSD_MIN */
    int32_t moe_mma;         /* 1: the grouped expert matmul of longer passes runs on int8 tensor cores over tiles
                              * of up to 32 or 64 rows (matmul_mma.cu) for the types it supports; 0: the paths
                              * above (QUARREL_CUDA_MOE=nomma, notiles or loop) */
    int32_t moe_mma_max_rows; /* the mma tiles serve passes with at most this many rows per expert in use on
                              * average (above: the f16 GEMM; QUARREL_CUDA_MMQ_MAX_ROWS) */
    int64_t moe_tile_bytes;  /* f16 experts dequantized per chunk of the grouped GEMM, default 512 MiB */
    int32_t ids_early;       /* 1: an expert mat-vec whose ids are known complete reads them and starts streaming
                              * its weights before the dependency wait (cuda_backend.ids_unfenced); 0: always
                              * after (QUARREL_CUDA_IDS_EARLY=0) */
    int32_t gu_persist;      /* MoE decode gate/up (one-row-a-warp shapes): 6 (default) the persistent kernel with
                              * 6 CTAs an SM, 0 a CTA a group of rows (QUARREL_CUDA_GU_PERSIST=0) */
    int32_t dc_pipe;         /* MoE decode down + combine of two slots a token: 1 (default) the software-pipelined
                              * kernel, 0 the plain one (QUARREL_CUDA_DC_PIPE=0) */
    int32_t exact;           /* 1: exact mode, the CPU backend's arithmetic op for op (QUARREL_CUDA_EXACT=1; read
                              * when the backend is created, changing it later has no effect) */
    int32_t exact_seq_sums;  /* exact mode: every double sum in the CPU's sequential order instead of the parallel
                              * sum proven to round the same (QUARREL_CUDA_EXACT_SEQSUM=1) */
    int32_t graphs;          /* 1 (default): decode steps replay CUDA graphs; 0: op by op (QUARREL_CUDA_GRAPH=0;
                              * read when the backend is created) */
} qr_cuda_tune;

/* The backend's knobs (writable; read at each op). be must be a CUDA backend. */
qr_cuda_tune *qr_cuda_backend_tune(qr_backend *be);
/* The cudaStream_t every op is issued on. */
void *qr_cuda_backend_stream(qr_backend *be);
/* "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)". */
const char *qr_cuda_backend_device_name(qr_backend *be);
/* Decode graphs so far: passes captured, replays, and why graphs are off ("" when they are on). */
void qr_cuda_backend_graph_stats(qr_backend *be, int64_t *captured, int64_t *replayed, const char **note);

#ifdef __cplusplus
}
#endif

#endif /* QR_CUDA_INTERNAL_H */
