/* tune.cu — the CUDA backend's tuning defaults and their A/B switches (QUARREL_CUDA_* environment
 * variables; docs/operations.md lists them, docs/cuda-notes.md says what each measured). */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"

void cuda_tune_defaults(qr_cuda_tune *t) {
    t->mmvq_max_rows = 8;
    t->mmvq_wpr = 0;
    t->gemm_tile_bytes = (int64_t)128 << 20;
    t->pdl = 1;
    t->attn_splits = 0;
    t->act_reuse = 1;
    const char *renv = getenv("QUARREL_CUDA_ACT_REUSE");
    if (renv && strcmp(renv, "0") == 0) t->act_reuse = 0;
    t->fuse = 1;
    t->moe_tile_bytes = (int64_t)512 << 20;
    t->moe_kernel = 0;
    t->moe_grouped = 1;
    t->moe_tiles = 1;
    t->moe_mma = 1;
    t->ssm_ssd = 1;
    t->ssm_ssd_min_rows = 32;
    const char *senv_scan = getenv("QUARREL_CUDA_SSM_SCAN");
    if (senv_scan && strcmp(senv_scan, "rec") == 0) t->ssm_ssd = 0;
    t->moe_mma_max_rows = 64;
    const char *xenv = getenv("QUARREL_CUDA_MMQ_MAX_ROWS");
    if (xenv) t->moe_mma_max_rows = atoi(xenv);
    const char *menv = getenv("QUARREL_CUDA_MOE");
    if (menv && strcmp(menv, "old") == 0) t->moe_kernel = 1;
    if (menv && strcmp(menv, "nogemm") == 0) t->moe_kernel = 2;
    if (menv && strcmp(menv, "loop") == 0) t->moe_grouped = 0;
    if (menv && (strcmp(menv, "loop") == 0 || strcmp(menv, "notiles") == 0)) t->moe_tiles = 0;
    if (menv && (strcmp(menv, "loop") == 0 || strcmp(menv, "notiles") == 0 || strcmp(menv, "nomma") == 0))
        t->moe_mma = 0;
    t->gemm_q8_act = 1;
    const char *qenv = getenv("QUARREL_CUDA_GEMM_Q8");
    if (qenv && strcmp(qenv, "0") == 0) t->gemm_q8_act = 0;
    const char *penv = getenv("QUARREL_CUDA_PDL");
    if (penv && strcmp(penv, "0") == 0) t->pdl = 0;
    const char *fenv = getenv("QUARREL_CUDA_FUSE");
    if (fenv && strcmp(fenv, "0") == 0) t->fuse = 0;
    t->attn_kernel = 0;
    t->attn_decode_max_rows = 8;
    const char *aenv = getenv("QUARREL_CUDA_ATTN");
    if (aenv && strcmp(aenv, "old") == 0) t->attn_kernel = 1;
    if (aenv && strcmp(aenv, "decode") == 0) t->attn_kernel = 2;
    t->attn_cluster = !(aenv && strcmp(aenv, "nocluster") == 0);
    const char *kenv = getenv("QUARREL_CUDA_ATTN_CL_KEYS");
    t->attn_cl_keys = kenv && atoi(kenv) > 0 && atoi(kenv) <= 2048 ? atoi(kenv) : 64;
    const char *senv = getenv("QUARREL_CUDA_ATTN_CTAS_PER_SM");
    t->attn_ctas_per_sm = senv && atoi(senv) > 0 && atoi(senv) <= 64 ? atoi(senv) : 4;
}
