/* tune.cu — the CUDA backend's tuning defaults and their A/B switches (QUARREL_CUDA_* environment
 * variables; docs/knobs.md lists them, docs/cuda-notes.md says what each measured). */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"

/* Whether environment variable `name` is set to `value`. */
static bool env_is(const char *name, const char *value) {
    const char *v = getenv(name);
    return v && strcmp(v, value) == 0;
}

/* The integer value of `name` when it is in [lo, hi], else def. */
static int32_t env_int(const char *name, int32_t lo, int32_t hi, int32_t def) {
    const char *v = getenv(name);
    if (!v) return def;
    const int x = atoi(v);
    return x >= lo && x <= hi ? x : def;
}

void cuda_tune_defaults(qr_cuda_tune *t) {
    t->mmvq_max_rows = 8;
    t->mmvq_wpr = 0;
    t->gemm_tile_bytes = (int64_t)128 << 20;
    t->pdl = !env_is("QUARREL_CUDA_PDL", "0");
    t->attn_splits = env_int("QUARREL_CUDA_ATTN_SPLITS", 0, 256, 0); /* 0: by the occupancy rule (backend_cuda.cu) */
    t->act_reuse = !env_is("QUARREL_CUDA_ACT_REUSE", "0");
    t->fuse = !env_is("QUARREL_CUDA_FUSE", "0");
    t->multi_pair = !env_is("QUARREL_CUDA_MULTI_PAIR", "0");
    t->norm_route = !env_is("QUARREL_CUDA_NORM_ROUTE", "0");
    t->post_norm = !env_is("QUARREL_CUDA_POST_NORM", "0");
    t->attn_gemm = !env_is("QUARREL_CUDA_ATTN_GEMM", "0");
    t->heads_gemm = !env_is("QUARREL_CUDA_HEADS_GEMM", "0");
    t->mla_prep = !env_is("QUARREL_CUDA_MLA_PREP", "0");
    t->qk_norm = !env_is("QUARREL_CUDA_QK_NORM", "0");
    t->attn_short = !env_is("QUARREL_CUDA_ATTN_SHORT", "0");
    {
        const char *g = getenv("QUARREL_CUDA_ATTN_SHORT_G");
        const int v = g ? atoi(g) : 2;
        t->attn_short_g = v == 1 || v == 4 ? v : 2;
    }
    t->gemm_q8_act = !env_is("QUARREL_CUDA_GEMM_Q8", "0");
    /* expert matmuls: QUARREL_CUDA_MOE = old | nogemm | loop | notiles | nomma | nobuckets */
    const bool loop = env_is("QUARREL_CUDA_MOE", "loop"), notiles = env_is("QUARREL_CUDA_MOE", "notiles");
    t->moe_tile_bytes = (int64_t)512 << 20;
    t->moe_kernel = env_is("QUARREL_CUDA_MOE", "old") ? 1 : env_is("QUARREL_CUDA_MOE", "nogemm") ? 2 : 0;
    t->moe_grouped = !loop;
    t->moe_tiles = !(loop || notiles);
    t->moe_buckets = !(loop || env_is("QUARREL_CUDA_MOE", "nobuckets"));
    t->moe_mma = !(loop || notiles || env_is("QUARREL_CUDA_MOE", "nomma"));
    t->moe_mma_max_rows = env_int("QUARREL_CUDA_MMQ_MAX_ROWS", 0, 1 << 30, 64);
    t->ids_early = !env_is("QUARREL_CUDA_IDS_EARLY", "0");
    t->gu_persist = env_is("QUARREL_CUDA_GU_PERSIST", "0") ? 0 : 6;
    t->dc_pipe = !env_is("QUARREL_CUDA_DC_PIPE", "0");
    t->ssm_ssd = !env_is("QUARREL_CUDA_SSM_SCAN", "rec");
    t->ssm_ssd_min_rows = 32;
    t->attn_kernel = env_is("QUARREL_CUDA_ATTN", "old") ? 1 : env_is("QUARREL_CUDA_ATTN", "decode") ? 2 : 0;
    t->attn_decode_max_rows = 8;
    t->attn_flash = t->attn_kernel == 0 && !env_is("QUARREL_CUDA_ATTN", "noflash");
    t->attn_flash_min_run = env_int("QUARREL_CUDA_ATTN_FLASH_MIN_RUN", 1, 1 << 20, 4);
    t->attn_dec_mma = !env_is("QUARREL_CUDA_ATTN_DEC_MMA", "0");
    t->attn_dec_mma_max_keys = env_int("QUARREL_CUDA_ATTN_DEC_MMA_MAX_KEYS", 16, 1 << 20, 8192);
    t->norm_f16 = !env_is("QUARREL_CUDA_NORM_F16", "0");
    t->glu_f16 = !env_is("QUARREL_CUDA_GLU_F16", "0");
    t->gemm_f16_act = !env_is("QUARREL_CUDA_GEMM_F16_ACT", "0");
    t->attn_split_mixed = !env_is("QUARREL_CUDA_ATTN_SPLIT_MIXED", "0"); /* H200: mixed load 2.06 -> 1.71-1.76x */
    t->attn_flash_splits = env_int("QUARREL_CUDA_ATTN_FLASH_SPLITS", 0, 64, 0);
    t->attn_flash_mt = env_int("QUARREL_CUDA_ATTN_FLASH_MT", 1, 2, 2);
    t->attn_flash_stages = env_int("QUARREL_CUDA_ATTN_FLASH_STAGES", 2, 3, 3);
    t->f16_cache = !env_is("QUARREL_CUDA_F16_CACHE", "0");
    t->f16_cache_reserve_mib = env_int("QUARREL_CUDA_F16_CACHE_RESERVE_MIB", 0, 1 << 30, 8192);
    t->mmq_dense = env_is("QUARREL_CUDA_MMQ_DENSE", "1"); /* off: 2x slower than dequant + cuBLAS at 64 rows (H200) */
    t->mmq_dense_max_rows = env_int("QUARREL_CUDA_MMQ_DENSE_MAX_ROWS", 0, 4096, 256);
    t->dq_gemm = !env_is("QUARREL_CUDA_DQ_GEMM", "0");
    /* H200, session 31: the wgmma versions (v3 to 32 rows, v4 33-64, only the large matrices past 16 rows) give
     * +2-6 % decode tokens/s at 24-64 sequences over the f16 cache; without sm_90a, 16 (the mma.sync version) */
    t->dq_max_rows = env_int("QUARREL_CUDA_DQ_MAX_ROWS", 0, 4096, 64);
    t->dq_small_max_rows = env_int("QUARREL_CUDA_DQ_SMALL_MAX_ROWS", 0, 4096, 32); /* session 33: 32 > 16 by 1-1.5 % */
    t->dq_splits = env_int("QUARREL_CUDA_DQ_SPLITS", 0, 8, 0);
    /* cleared at backend start without sm_90a code and an sm_90 GPU */
    t->dq_wg = env_is("QUARREL_CUDA_DQ_WG", "0") ? 0 : env_is("QUARREL_CUDA_DQ_WG", "rs") ? 2 : env_is("QUARREL_CUDA_DQ_WG", "ss") ? 3 : env_is("QUARREL_CUDA_DQ_WG", "tr") ? 4 : 1;
    t->dq_ws_min_rows = env_int("QUARREL_CUDA_DQ_WS_MIN_ROWS", 1, 4096, 33);
    t->dq_tma = !env_is("QUARREL_CUDA_DQ_TMA", "0");
    t->dq_wg_min_rows = env_int("QUARREL_CUDA_DQ_WG_MIN_ROWS", 1, 4096, 9);
    t->dq_multi = !env_is("QUARREL_CUDA_DQ_MULTI", "0");
    t->dq_mix = !env_is("QUARREL_CUDA_DQ_MIX", "0");
    t->dq_pdl = env_is("QUARREL_CUDA_DQ_PDL", "1"); /* H200, session 39: slower (np 64 step 4.74 -> 5.03 ms): off */
    /* H200, session 39 (same checksums): np 16 step 3.16 -> 3.10 ms with both, np 64 4.68 -> 4.72-4.74 (the 64-CTA norm
     * reading 7 parts is slower than the reduction's 1,024 CTAs; the attention loses its head start on the rope), served
     * C=64 10,630 -> 10,379 tok/s: on up to 16 rows only */
    t->dq_defer = env_int("QUARREL_CUDA_DQ_DEFER", 0, 3, 3);
    t->dq_defer_max_rows = env_int("QUARREL_CUDA_DQ_DEFER_MAX_ROWS", 0, 4096, 16);
    t->dq_cluster = env_int("QUARREL_CUDA_DQ_CLUSTER", 1, 2, 1); /* prepared in session 39, not yet run on a GPU: off */
    /* H200, session 39: the (row, head) kernel np 16 / 64 steps -3.8 / -1.5 %, at 256 rows +1.3 % (a CTA a row wins) */
    t->rope_heads_rows = env_int("QUARREL_CUDA_ROPE_HEADS_ROWS", 1, 1 << 20, 64);
    /* H200, session 33: from 5 rows version 6 beats the mat-vec (whose time grows with the rows); 9: off */
    t->dq_min_rows = env_int("QUARREL_CUDA_DQ_MIN_ROWS", 2, 4096, 5);
    t->dq_wg_mt = env_int("QUARREL_CUDA_DQ_WG_MT", 0, 2, 0);
    t->tp_p2p_max = env_int("QUARREL_CUDA_TP_P2P_MAX", 0, 1 << 20, 1 << 20); /* tp_nccl.cu */
    t->tp_skip_reduce = env_is("QUARREL_CUDA_TP_SKIP_REDUCE", "1"); /* profiling only: wrong results */
    t->attn_cluster = !env_is("QUARREL_CUDA_ATTN", "nocluster");
    t->pinned_host = !env_is("QUARREL_CUDA_PINNED", "0");
    t->attn_cl_keys = env_int("QUARREL_CUDA_ATTN_CL_KEYS", 1, 2048, 64);
    t->attn_ctas_per_sm = env_int("QUARREL_CUDA_ATTN_CTAS_PER_SM", 1, 64, 4);
    t->exact = env_is("QUARREL_CUDA_EXACT", "1");
    t->exact_seq_sums = env_is("QUARREL_CUDA_EXACT_SEQSUM", "1");
    t->graphs = !env_is("QUARREL_CUDA_GRAPH", "0");
}

bool cuda_tune_mmv_u2(void) {
    static const bool on = !env_is("QUARREL_CUDA_MMV_U2", "0"); /* C++: initialized once, thread-safe */
    return on;
}

bool cuda_tune_mmv_pair(void) {
    static const bool on = !env_is("QUARREL_CUDA_MMV_PAIR", "0");
    return on;
}
