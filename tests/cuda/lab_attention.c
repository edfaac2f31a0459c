/* lab_attention.c — the lab's checks of kv_store, attention over the paged cache (GQA, windows,
 * softcap, f16 and f32 caches, odd head sizes, forced KV split counts) and kv_copy_block, against the
 * CPU scalar oracle; timings of decode attention at mistral-7b and gemma-like shapes and of a
 * 512-row prefill. Block tables are shuffled so that logical and physical blocks differ. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab.h"

typedef struct attn_cfg {
    const char *name;
    int n_head, n_head_kv, dk, dv, block_size, window;
    float softcap;
    qr_type kv_type;
} attn_cfg;

/* The paged cache of one configuration on both backends, holding n_seqs sequences of len[s] tokens. */
typedef struct kvset {
    attn_cfg c;
    qr_kv_desc d;
    qr_kv_storage *kc, *kg;
    int n_seqs, max_blocks, spare; /* spare: a physical block no sequence uses */
    int32_t *bt;                   /* [n_seqs][max_blocks] */
} kvset;

static void die_if(bool bad, const char *what, const char *err) {
    if (!bad) return;
    printf("FATAL: %s: %s\n", what, err);
    exit(2);
}

/* Sets the plan of rows (seq, pos) on one or both backends. */
static void plan_rows(lab *L, const kvset *S, int n, const int32_t *seq, const int32_t *pos, bool cpu, bool gpu) {
    int32_t *tok = calloc((size_t)n, 4), *slot = malloc((size_t)n * 4);
    for (int r = 0; r < n; r++) {
        const int32_t *bt = S->bt + (size_t)seq[r] * S->max_blocks;
        slot[r] = bt[pos[r] / S->c.block_size] * S->c.block_size + pos[r] % S->c.block_size;
    }
    qr_batch_plan p = {.n_tokens = n, .tokens = tok, .pos = pos, .seq = seq, .kv_slot = slot, .n_seqs = S->n_seqs,
                       .max_blocks = S->max_blocks, .block_table = S->bt};
    char err[256];
    if (cpu) die_if(L->cpu->ops->set_batch(L->cpu, &p, err, sizeof err) != QR_OK, "set_batch cpu", err);
    if (gpu) die_if(L->gpu->ops->set_batch(L->gpu, &p, err, sizeof err) != QR_OK, "set_batch gpu", err);
    free(tok);
    free(slot);
}

/* Allocates the caches and stores random K/V for every position of every sequence (layer 1 of 2). */
static void kvset_init(lab *L, kvset *S, const attn_cfg *c, int n_seqs, const int *len) {
    memset(S, 0, sizeof *S);
    S->c = *c;
    S->n_seqs = n_seqs;
    int total_blocks = 0, max_len = 0;
    for (int s = 0; s < n_seqs; s++) {
        total_blocks += (len[s] + c->block_size - 1) / c->block_size;
        if (len[s] > max_len) max_len = len[s];
    }
    S->max_blocks = (max_len + c->block_size - 1) / c->block_size + 1;
    const int n_blocks = total_blocks + 3;
    S->d = (qr_kv_desc){.n_layer = 2, .n_blocks = n_blocks, .block_size = c->block_size,
                        .k_dim = c->n_head_kv * c->dk, .v_dim = c->n_head_kv * c->dv, .type_k = c->kv_type, .type_v = c->kv_type};
    char err[256];
    S->kc = L->cpu->ops->kv_alloc(L->cpu, &S->d, err, sizeof err);
    die_if(!S->kc, "kv_alloc cpu", err);
    S->kg = L->gpu->ops->kv_alloc(L->gpu, &S->d, err, sizeof err);
    die_if(!S->kg, "kv_alloc gpu", err);
    int *perm = malloc(sizeof(int) * (size_t)n_blocks);
    for (int i = 0; i < n_blocks; i++) perm[i] = i;
    for (int i = n_blocks - 1; i > 0; i--) {
        const int j = (int)(lab_u64(L) % (uint64_t)(i + 1)), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    S->bt = malloc(sizeof(int32_t) * (size_t)n_seqs * S->max_blocks);
    int used = 0;
    for (int s = 0; s < n_seqs; s++)
        for (int b = 0; b < S->max_blocks; b++)
            S->bt[s * S->max_blocks + b] = b * c->block_size < len[s] ? perm[used++] : -1;
    S->spare = perm[used];
    free(perm);
    /* one pass storing every position */
    int n = 0;
    for (int s = 0; s < n_seqs; s++) n += len[s];
    int32_t *seq = malloc((size_t)n * 4), *pos = malloc((size_t)n * 4);
    for (int s = 0, r = 0; s < n_seqs; s++)
        for (int p = 0; p < len[s]; p++, r++) seq[r] = s, pos[r] = p;
    plan_rows(L, S, n, seq, pos, true, true);
    const size_t kb = (size_t)n * S->d.k_dim * 4, vb = (size_t)n * S->d.v_dim * 4;
    float *k = malloc(kb), *v = malloc(vb);
    lab_fill(L, k, (int64_t)n * S->d.k_dim, 1.5f);
    lab_fill(L, v, (int64_t)n * S->d.v_dim, 1.0f);
    float *kd = lab_gpu_alloc(L, kb), *vd = lab_gpu_alloc(L, vb);
    lab_upload(L, kd, k, kb);
    lab_upload(L, vd, v, vb);
    L->cpu->ops->kv_store(L->cpu, S->kc, 1, k, v);
    L->gpu->ops->kv_store(L->gpu, S->kg, 1, kd, vd);
    lab_check_errors(L, "kv_store");
    lab_gpu_free(L, kd);
    lab_gpu_free(L, vd);
    free(k), free(v), free(seq), free(pos);
}

static void kvset_free(lab *L, kvset *S) {
    L->cpu->ops->kv_free(L->cpu, S->kc);
    L->gpu->ops->kv_free(L->gpu, S->kg);
    free(S->bt);
}

typedef struct attn_run {
    lab *L;
    qr_kv_storage *kv;
    const float *q;
    qr_attn_params p;
    float *out;
} attn_run;

static void run_attn(void *ptr) {
    attn_run *a = ptr;
    a->L->gpu->ops->attention(a->L->gpu, a->kv, 1, a->q, &a->p, a->out);
}

static qr_attn_params params_of(const attn_cfg *c) {
    return (qr_attn_params){.n_head = c->n_head, .n_head_kv = c->n_head_kv, .head_dim_k = c->dk, .head_dim_v = c->dv,
                            .scale = 1.0f / sqrtf((float)c->dk), .softcap = c->softcap, .window = c->window};
}

/* Attention for the rows (seq[r], pos[r]) on both backends; with n_check < n only the rows
 * check_rows[] are computed by the CPU (a plan of those rows) and compared. Timed when `time`. */
static void attn_check(lab *L, kvset *S, int n, const int32_t *seq, const int32_t *pos, int n_check,
                       const int32_t *check_rows, int splits, bool time, const char *label) {
    const attn_cfg *c = &S->c;
    const int qd = c->n_head * c->dk, od = c->n_head * c->dv;
    float *q = malloc((size_t)n * qd * 4), *og = malloc((size_t)n * od * 4), *oc = malloc((size_t)n * od * 4);
    lab_fill(L, q, (int64_t)n * qd, 1.5f);
    float *qd_ = lab_gpu_alloc(L, (size_t)n * qd * 4), *od_ = lab_gpu_alloc(L, (size_t)n * od * 4);
    lab_upload(L, qd_, q, (size_t)n * qd * 4);
    lab_poison(L, od_, (size_t)n * od * 4);
    qr_cuda_tune *tune = qr_cuda_backend_tune(L->gpu);
    const int32_t saved = tune->attn_splits;
    tune->attn_splits = splits;
    plan_rows(L, S, n, seq, pos, n_check == n, true);
    attn_run ar = {.L = L, .kv = S->kg, .q = qd_, .p = params_of(c), .out = od_};
    run_attn(&ar);
    lab_check_errors(L, "attention");
    lab_download(L, og, od_, (size_t)n * od * 4);
    float *want = oc, *got = og;
    int nc = n;
    if (n_check == n) {
        L->cpu->ops->attention(L->cpu, S->kc, 1, q, &ar.p, oc);
    } else {
        int32_t *cs = malloc((size_t)n_check * 4), *cp = malloc((size_t)n_check * 4);
        float *cq = malloc((size_t)n_check * qd * 4), *cg = malloc((size_t)n_check * od * 4);
        for (int i = 0; i < n_check; i++) {
            cs[i] = seq[check_rows[i]], cp[i] = pos[check_rows[i]];
            memcpy(cq + (size_t)i * qd, q + (size_t)check_rows[i] * qd, (size_t)qd * 4);
            memcpy(cg + (size_t)i * od, og + (size_t)check_rows[i] * od, (size_t)od * 4);
        }
        plan_rows(L, S, n_check, cs, cp, true, false);
        L->cpu->ops->attention(L->cpu, S->kc, 1, cq, &ar.p, oc);
        memcpy(og, cg, (size_t)n_check * od * 4);
        nc = n_check;
        free(cs), free(cp), free(cq), free(cg);
    }
    lab_check_errors(L, "attention oracle");
    double mx, rel;
    /* 1e-3: the CPU rounds each softmax probability to f16 after float sums in another order, so
     * a probability now and then lands on the neighbouring f16 value (2^-11 relative) */
    const bool pass = lab_compare(got, want, (int64_t)nc * od, 1e-3, &mx, &rel);
    double us = 0, bytes = 0, flops = 0;
    if (time) {
        us = lab_time(L, run_attn, &ar, true);
        const double es = c->kv_type == QR_TYPE_F16 ? 2 : 4;
        for (int r = 0; r < n; r++) {
            const int first = c->window > 0 && pos[r] - c->window + 1 > 0 ? pos[r] - c->window + 1 : 0;
            bytes += (double)(pos[r] - first + 1) * c->n_head_kv * (c->dk + c->dv) * es;
            flops += 2.0 * (pos[r] - first + 1) * c->n_head * (c->dk + c->dv); /* q.k and p.v */
        }
        if (n <= 8) flops = 0; /* decode: bandwidth is the measure */
        bytes += (double)n * (qd + od) * 4;
    }
    char cfg[96];
    snprintf(cfg, sizeof cfg, "%s %s%s", c->name, label, splits ? "" : " auto");
    if (splits) snprintf(cfg + strlen(cfg), sizeof cfg - strlen(cfg), " splits%d", splits);
    lab_record(L, "attention", cfg, mx, rel, 1e-3, pass, us, bytes, flops);
    tune->attn_splits = saved;
    lab_gpu_free(L, qd_);
    lab_gpu_free(L, od_);
    free(q), free(og), free(oc);
}

/* attn_check with one tune knob set for the call: attn_kernel = 1 forces the two-pass kernel
 * (attention.cu; the flash-decoding kernels take decode rows by default), attn_cluster = 0 the
 * global-memory split kernels of attention_decode.cu. */
static void attn_check_knob(lab *L, kvset *S, int32_t *knob, int32_t value, int n, const int32_t *seq,
                            const int32_t *pos, int splits, bool time, const char *label) {
    const int32_t saved = *knob;
    *knob = value;
    attn_check(L, S, n, seq, pos, n, NULL, splits, time, label);
    *knob = saved;
}
#define attn_check_old(L, S, ...) attn_check_knob(L, S, &qr_cuda_backend_tune((L)->gpu)->attn_kernel, 1, __VA_ARGS__)
#define attn_check_nocluster(L, S, ...) \
    attn_check_knob(L, S, &qr_cuda_backend_tune((L)->gpu)->attn_cluster, 0, __VA_ARGS__)

static const attn_cfg small_cfgs[] = {
    {"smollm 9/3x64 b16", 9, 3, 64, 64, 16, 0, 0.0f, QR_TYPE_F16},
    {"gemma 4/1x256 b32 win20", 4, 1, 256, 256, 32, 20, 0.0f, QR_TYPE_F16},
    {"odd 4/4 k20 v12 b7 cap5 f32", 4, 4, 20, 12, 7, 0, 5.0f, QR_TYPE_F32},
    {"odd 6/2x33 b5 win9", 6, 2, 33, 33, 5, 9, 0.0f, QR_TYPE_F16},
    {"wide 8/1x512 b16", 8, 1, 512, 512, 16, 0, 0.0f, QR_TYPE_F16},
    {"mistral 32/8x128 b16", 32, 8, 128, 128, 16, 0, 0.0f, QR_TYPE_F16},
    {"tinyllama 32/4x64 b16", 32, 4, 64, 64, 16, 0, 0.0f, QR_TYPE_F16},
    {"qwen 28/4x128 b16 cap30", 28, 4, 128, 128, 16, 0, 30.0f, QR_TYPE_F16},
    {"gemma2 16/8x256 b16 win64 cap50", 16, 8, 256, 256, 16, 64, 50.0f, QR_TYPE_F16}, /* issue 30 part 2 */
};
#define N_SMALL_CFGS (sizeof small_cfgs / sizeof small_cfgs[0])

/* The rows (seq, pos) of every position of two sequences of len[0], len[1] tokens (malloc'ed). */
static int all_rows(const int len[2], int32_t **seq, int32_t **pos) {
    const int n = len[0] + len[1];
    *seq = malloc((size_t)n * 4), *pos = malloc((size_t)n * 4);
    for (int s = 0, r = 0; s < 2; s++)
        for (int p = 0; p < len[s]; p++, r++) (*seq)[r] = s, (*pos)[r] = p;
    return n;
}

/* Every row of every sequence as queries (prefill-style), with forced split counts. */
static void small_cases(lab *L) {
    const int len[2] = {37, 70};
    for (size_t ci = 0; ci < N_SMALL_CFGS; ci++) {
        kvset S;
        kvset_init(L, &S, &small_cfgs[ci], 2, len);
        int32_t *seq, *pos;
        const int n = all_rows(len, &seq, &pos);
        const int splits[] = {0, 1, 3, 16};
        for (int i = 0; i < 4; i++) attn_check(L, &S, n, seq, pos, n, NULL, splits[i], false, "all rows");
        {
            qr_cuda_tune *tune = qr_cuda_backend_tune(L->gpu);
            const int32_t saved = tune->attn_flash;
            tune->attn_flash = 0; /* the same rows through the flash-decoding kernel */
            attn_check(L, &S, n, seq, pos, n, NULL, 0, false, "all rows noflash");
            tune->attn_flash = saved;
        }
        /* decode rows of both sequences, then kv_copy_block: move sequence 0's first block to the
         * spare block, point the table at it, and the results must not change */
        const int32_t dseq[2] = {0, 1}, dpos[2] = {len[0] - 1, len[1] - 1};
        attn_check(L, &S, 2, dseq, dpos, 2, NULL, 0, false, "decode");
        attn_check_old(L, &S, 2, dseq, dpos, 0, false, "decode two-pass");
        attn_check_nocluster(L, &S, 2, dseq, dpos, 0, false, "decode nocluster");
        attn_check_nocluster(L, &S, 2, dseq, dpos, 3, false, "decode nocluster");
        for (int cs = 1; cs <= 16; cs += cs < 8 ? 1 : 4) attn_check(L, &S, 2, dseq, dpos, 2, NULL, cs, false, "decode cluster");
        const int32_t b0 = S.bt[0];
        L->cpu->ops->kv_copy_block(L->cpu, S.kc, b0, S.spare);
        L->gpu->ops->kv_copy_block(L->gpu, S.kg, b0, S.spare);
        lab_check_errors(L, "kv_copy_block");
        S.bt[0] = S.spare;
        S.spare = b0;
        attn_check(L, &S, 2, dseq, dpos, 2, NULL, 0, false, "after kv_copy_block");
        free(seq), free(pos);
        kvset_free(L, &S);
    }
}

void lab_attention_exact(lab *L, const char *tag) {
    for (size_t ci = 0; ci < N_SMALL_CFGS; ci++) {
        const attn_cfg *c = &small_cfgs[ci];
        if (c->kv_type != QR_TYPE_F16) continue; /* the f32 cache's orders (softcap: qx_libm_tanhf, issue 30) */
        const bool big = c->n_head == 32;
        const int len[2] = {37, big ? 1500 : 70};
        kvset S;
        kvset_init(L, &S, c, 2, len);
        int32_t *seq, *pos;
        const int n = all_rows(len, &seq, &pos);
        char l1[48], l2[48], l3[48];
        snprintf(l1, sizeof l1, "%sall rows", tag);
        snprintf(l2, sizeof l2, "%sdecode 2 rows", tag);
        snprintf(l3, sizeof l3, "%sdecode 1 row", tag);
        attn_check(L, &S, n, seq, pos, n, NULL, 0, false, l1);
        const int32_t dseq[2] = {0, 1}, dpos[2] = {len[0] - 1, len[1] - 1};
        attn_check(L, &S, 2, dseq, dpos, 2, NULL, 0, false, l2);
        attn_check(L, &S, 1, dseq + 1, dpos + 1, 1, NULL, 0, big, l3);
        free(seq), free(pos);
        kvset_free(L, &S);
    }
}

/* The cluster kernel's phase clocks (cuda_attn_args.dbg) for one decode call: where its time goes. */
static void attn_phases(lab *L, kvset *S, const int32_t *seq, const int32_t *pos, const char *label) {
    qr_cuda_tune *tune = qr_cuda_backend_tune(L->gpu);
    long long *d = (long long *)(void *)lab_gpu_alloc(L, 32 * sizeof(long long)), h[32];
    lab_poison(L, d, 32 * sizeof(long long));
    tune->attn_dbg = d;
    attn_check(L, S, 1, seq, pos, 1, NULL, 0, false, label); /* warm */
    attn_check(L, S, 1, seq, pos, 1, NULL, 0, false, label);
    tune->attn_dbg = NULL;
    lab_download(L, h, d, sizeof h);
    lab_gpu_free(L, d);
    static const char *names[12] = {"geometry+slots", "pdl wait", "K/V/q loads", "scores", "max/sum",
                                    "cluster sync 1", "merge + p", "p*V", "reduce", "cluster sync 2",
                                    "output+quant", "cluster sync 3"};
    for (int r = 0; r < 2; r++) {
        printf("phases %s, %s rank: ", label, r ? "last" : "first");
        for (int i = 0; i < 12; i++) printf("%s %lld%s", names[i], h[r * 16 + i + 1] - h[r * 16 + i], i < 11 ? ", " : "");
        printf(" (cycles; total %lld)\n", h[r * 16 + 12] - h[r * 16]);
    }
}

/* A 512-row prefill at the end of a ctx-position context (rows 0, 1, 255, 511 checked), timed: the flash
 * kernel (the default), the flash-decoding kernel (noflash) and, with two_pass, the two-pass kernel. */
static void prefill_at_depth(lab *L, kvset *S, int ctx, bool two_pass) {
    static int32_t pseq[512], ppos[512];
    for (int r = 0; r < 512; r++) pseq[r] = 0, ppos[r] = ctx - 512 + r;
    const int32_t rows[4] = {0, 1, 255, 511};
    char label[64];
    snprintf(label, sizeof label, "prefill 512 @ctx%d", ctx);
    attn_check(L, S, 512, pseq, ppos, 4, rows, 0, true, label);
    qr_cuda_tune *tune = qr_cuda_backend_tune(L->gpu);
    const int32_t saved_flash = tune->attn_flash, saved_kernel = tune->attn_kernel;
    tune->attn_flash = 0;
    snprintf(label, sizeof label, "prefill 512 @ctx%d noflash", ctx);
    attn_check(L, S, 512, pseq, ppos, 4, rows, 0, true, label);
    if (two_pass) {
        tune->attn_kernel = 1;
        snprintf(label, sizeof label, "prefill 512 @ctx%d two-pass", ctx);
        attn_check(L, S, 512, pseq, ppos, 4, rows, 0, true, label);
    }
    tune->attn_flash = saved_flash, tune->attn_kernel = saved_kernel;
}

/* Decode at long contexts (timed), and a 512-row prefill at the end of a 4096 context. */
static void big_cases(lab *L) {
    const attn_cfg mistral = {"mistral 32/8x128 b16", 32, 8, 128, 128, 16, 0, 0.0f, QR_TYPE_F16};
    const attn_cfg gemma = {"gemma 8/4x256 b16 win1024 cap50", 8, 4, 256, 256, 16, 1024, 50.0f, QR_TYPE_F16};
    const int ctxs[] = {64, 160, 512, 4096, 16384};
    char label[64];
    /* QUARREL_LAB_ATTN_BATCHED=1: only the batched decode steps below (profiling) */
    const bool batched_only = getenv("QUARREL_LAB_ATTN_BATCHED") != NULL;
    for (int ci = 0; ci < (batched_only ? 0 : 5); ci++) {
        kvset S;
        const int len[1] = {ctxs[ci]};
        kvset_init(L, &S, &mistral, 1, len);
        const int32_t seq[1] = {0}, pos[1] = {ctxs[ci] - 1};
        snprintf(label, sizeof label, "decode ctx%d", ctxs[ci]);
        attn_check(L, &S, 1, seq, pos, 1, NULL, 0, true, label);
        snprintf(label, sizeof label, "decode ctx%d two-pass", ctxs[ci]);
        attn_check_old(L, &S, 1, seq, pos, 0, true, label);
        snprintf(label, sizeof label, "decode ctx%d nocluster", ctxs[ci]);
        attn_check_nocluster(L, &S, 1, seq, pos, 0, true, label);
        {
            snprintf(label, sizeof label, "decode ctx%d phases", ctxs[ci]);
            attn_phases(L, &S, seq, pos, label);
        }
        snprintf(label, sizeof label, "decode ctx%d", ctxs[ci]);
        if (ctxs[ci] == 16384) prefill_at_depth(L, &S, ctxs[ci], false);
        if (ctxs[ci] == 4096) {
            const int sp[] = {1, 8, 32, 128};
            for (int i = 0; i < 4; i++) attn_check(L, &S, 1, seq, pos, 1, NULL, sp[i], true, label);
            prefill_at_depth(L, &S, ctxs[ci], true);
        }
        kvset_free(L, &S);
    }
    /* four sequences decoding together */
    if (!batched_only) {
        kvset S;
        const int len[4] = {2048, 1000, 3000, 77};
        kvset_init(L, &S, &mistral, 4, len);
        const int32_t seq[4] = {0, 1, 2, 3}, pos[4] = {2047, 999, 2999, 76};
        attn_check(L, &S, 4, seq, pos, 4, NULL, 0, true, "decode 4 seqs");
        attn_check_old(L, &S, 4, seq, pos, 0, true, "decode 4 seqs two-pass");
        attn_check_nocluster(L, &S, 4, seq, pos, 0, true, "decode 4 seqs nocluster");
        kvset_free(L, &S);
    }
    /* batched decode steps: 64 and 256 sequences of 128..511 keys, a row each (a served step), the tensor-core decode
     * kernel (default) against the flash-decoding kernels (tune.attn_dec_mma 0) */
    for (int nsq = 64; nsq <= 256; nsq *= 4) {
        kvset S;
        int *len = malloc(sizeof(int) * (size_t)nsq);
        int32_t *seq = malloc((size_t)nsq * 4), *pos = malloc((size_t)nsq * 4);
        for (int s = 0; s < nsq; s++) len[s] = 128 + (int)(lab_u64(L) % 384), seq[s] = s, pos[s] = len[s] - 1;
        kvset_init(L, &S, &mistral, nsq, len);
        snprintf(label, sizeof label, "decode %d seqs", nsq);
        attn_check(L, &S, nsq, seq, pos, nsq, NULL, 0, true, label);
        snprintf(label, sizeof label, "decode %d seqs flash-decoding", nsq);
        attn_check_knob(L, &S, &qr_cuda_backend_tune(L->gpu)->attn_dec_mma, 0, nsq, seq, pos, 0, true, label);
        kvset_free(L, &S);
        free(len), free(seq), free(pos);
    }
    { /* a mixed step (the serving mixed load): 64 decode rows (128..511 keys) first, then a 256-row prompt chunk at depth
       * 3744 of a 65th sequence; one pass and the decode rows split off (tune.attn_split_mixed, the default) */
        const int nsq = 65, nr = 64 + 256;
        kvset S;
        int len[65];
        int32_t *seq = malloc((size_t)nr * 4), *pos = malloc((size_t)nr * 4);
        for (int s = 0; s < 64; s++) len[s] = 128 + (int)(lab_u64(L) % 384), seq[s] = s, pos[s] = len[s] - 1;
        len[64] = 4000;
        for (int r = 0; r < 256; r++) seq[64 + r] = 64, pos[64 + r] = 3744 + r;
        kvset_init(L, &S, &mistral, nsq, len);
        attn_check_knob(L, &S, &qr_cuda_backend_tune(L->gpu)->attn_split_mixed, 0, nr, seq, pos, 0, true,
                        "decode 64 seqs + a 256-row chunk one pass");
        attn_check_knob(L, &S, &qr_cuda_backend_tune(L->gpu)->attn_split_mixed, 1, nr, seq, pos, 0, true,
                        "decode 64 seqs + a 256-row chunk split");
        kvset_free(L, &S);
        free(seq), free(pos);
    }
    if (!batched_only) {
        kvset S;
        const int len[1] = {4096};
        kvset_init(L, &S, &gemma, 1, len);
        const int32_t seq[1] = {0}, pos[1] = {4095};
        attn_check(L, &S, 1, seq, pos, 1, NULL, 0, true, "decode ctx4096");
        kvset_free(L, &S);
    }
}

typedef struct store_run {
    lab *L;
    qr_kv_storage *kv;
    const float *k, *v;
} store_run;

static void run_store(void *p) {
    store_run *s = p;
    s->L->gpu->ops->kv_store(s->L->gpu, s->kv, 1, s->k, s->v);
}

/* kv_store checked through attention (above); here its time for 512 rows of mistral's K/V. */
static void time_kv_store(lab *L) {
    const attn_cfg mistral = {"mistral 32/8x128 b16", 32, 8, 128, 128, 16, 0, 0.0f, QR_TYPE_F16};
    kvset S;
    const int len[1] = {512};
    kvset_init(L, &S, &mistral, 1, len);
    int32_t seq[512], pos[512];
    for (int r = 0; r < 512; r++) seq[r] = 0, pos[r] = r;
    plan_rows(L, &S, 512, seq, pos, false, true);
    const size_t b = (size_t)512 * S.d.k_dim * 4;
    float *k = lab_gpu_alloc(L, b), *v = lab_gpu_alloc(L, b);
    float *h = malloc(b);
    lab_fill(L, h, 512 * S.d.k_dim, 1.0f);
    lab_upload(L, k, h, b);
    lab_upload(L, v, h, b);
    store_run sr = {.L = L, .kv = S.kg, .k = k, .v = v};
    const double us = lab_time(L, run_store, &sr, true);
    lab_record(L, "kv_store", "mistral 512 rows f16", 0, 0, 0, true, us, (double)b * 2 * 1.5, 0);
    lab_gpu_free(L, k);
    lab_gpu_free(L, v);
    free(h);
    kvset_free(L, &S);
}

typedef struct rope_attn_run {
    lab *L;
    qr_kv_storage *kv;
    float *q, *k;
    const float *v;
    qr_rope_params rope;
    qr_attn_params p;
    float *out;
    bool fused, taken;
} rope_attn_run;

/* The fused op (rope_attention) or the plain GPU ops it stands for (rope_attention without out: rope_kv_store,
 * then attention). */
static void run_rope_attn(void *ptr) {
    rope_attn_run *a = ptr;
    qr_backend *g = a->L->gpu;
    if (a->fused) {
        a->taken = g->ops->rope_attention(g, &(qr_rope_attn_args){.q = a->q, .k = a->k, .v = a->v, .rope = &a->rope,
                                                                 .kv = a->kv, .layer = 1, .attn = &a->p, .out = a->out});
        return;
    }
    g->ops->rope_attention(g, &(qr_rope_attn_args){.q = a->q, .k = a->k, .v = a->v, .rope = &a->rope, .kv = a->kv,
                                                   .layer = 1, .attn = &a->p}); /* without out: rope_kv_store */
    g->ops->attention(g, a->kv, 1, a->q, &a->p, a->out);
}

/* rope_attention (attention_short.cu) for one decode row at position pos of sequence seq (the token after the
 * cached ones) against the CPU's rope, rope, kv_store and attention; then plain attention with a fresh q on
 * both backends at the same row, which reads the K/V row the fused op stored. Timed (with the plain GPU ops
 * for comparison) when `time`. */
static void rope_attn_check(lab *L, kvset *S, int32_t seq, int32_t pos, qr_rope_mode mode, int32_t n_rot, bool time,
                            const char *label) {
    const attn_cfg *c = &S->c;
    const int qd = c->n_head * c->dk, kd = c->n_head_kv * c->dk, vd = c->n_head_kv * c->dv, od = c->n_head * c->dv;
    float *q = malloc((size_t)qd * 4), *k = malloc((size_t)kd * 4), *v = malloc((size_t)vd * 4);
    float *og = malloc((size_t)od * 4), *oc = malloc((size_t)od * 4);
    lab_fill(L, q, qd, 1.5f);
    lab_fill(L, k, kd, 1.5f);
    lab_fill(L, v, vd, 1.0f);
    float *q_d = lab_gpu_alloc(L, (size_t)qd * 4), *k_d = lab_gpu_alloc(L, (size_t)kd * 4);
    float *v_d = lab_gpu_alloc(L, (size_t)vd * 4), *o_d = lab_gpu_alloc(L, (size_t)od * 4);
    lab_upload(L, q_d, q, (size_t)qd * 4);
    lab_upload(L, k_d, k, (size_t)kd * 4);
    lab_upload(L, v_d, v, (size_t)vd * 4);
    lab_poison(L, o_d, (size_t)od * 4);
    plan_rows(L, S, 1, &seq, &pos, true, true);
    rope_attn_run ar = {.L = L, .kv = S->kg, .q = q_d, .k = k_d, .v = v_d, .p = params_of(c), .out = o_d, .fused = true,
                        .rope = {.mode = mode, .n_rot = n_rot, .freq_base = 10000.0f, .freq_scale = 1.0f, .attn_factor = 1.0f}};
    run_rope_attn(&ar);
    lab_check_errors(L, "rope_attention");
    lab_download(L, og, o_d, (size_t)od * 4);
    L->cpu->ops->rope(L->cpu, q, c->n_head, c->dk, &ar.rope);
    L->cpu->ops->rope(L->cpu, k, c->n_head_kv, c->dk, &ar.rope);
    L->cpu->ops->kv_store(L->cpu, S->kc, 1, k, v);
    L->cpu->ops->attention(L->cpu, S->kc, 1, q, &ar.p, oc);
    lab_check_errors(L, "rope_attention oracle");
    double mx = 0, rel = 0;
    const bool pass = ar.taken && lab_compare(og, oc, od, 1e-3, &mx, &rel);
    char cfg[128];
    snprintf(cfg, sizeof cfg, "%s %s%s", c->name, label, ar.taken ? "" : " NOT TAKEN");
    lab_record(L, "rope_attention", cfg, mx, rel, 1e-3, pass, 0, 0, 0);
    /* the stored row, through plain attention with a fresh q */
    lab_fill(L, q, qd, 1.5f);
    lab_upload(L, q_d, q, (size_t)qd * 4);
    L->gpu->ops->attention(L->gpu, S->kg, 1, q_d, &ar.p, o_d);
    L->cpu->ops->attention(L->cpu, S->kc, 1, q, &ar.p, oc);
    lab_check_errors(L, "attention after rope_attention");
    lab_download(L, og, o_d, (size_t)od * 4);
    const bool pass2 = lab_compare(og, oc, od, 1e-3, &mx, &rel);
    snprintf(cfg, sizeof cfg, "%s %s stored K/V", c->name, label);
    lab_record(L, "rope_attention", cfg, mx, rel, 1e-3, pass2, 0, 0, 0);
    if (time && ar.taken) { /* (the plain ops rope q and k in place again and again: timing only, last) */
        const double us = lab_time(L, run_rope_attn, &ar, true);
        qr_cuda_tune *tune = qr_cuda_backend_tune(L->gpu);
        long long *d = (long long *)(void *)lab_gpu_alloc(L, 32 * sizeof(long long)), h[32];
        lab_poison(L, d, 32 * sizeof(long long));
        tune->attn_dbg = d;
        run_rope_attn(&ar);
        tune->attn_dbg = NULL;
        lab_check_errors(L, "rope_attention phases");
        lab_download(L, h, d, sizeof h);
        lab_gpu_free(L, d);
        static const char *names[9] = {"slots+cos/sin+issue", "pdl wait", "q/k/v + rope", "K/V landed", "scores+stats",
                                       "merge + p", "p*V", "reduce", "output+quant"};
        printf("phases rope_attention %s %s: ", c->name, label);
        for (int i = 0; i < 9; i++) printf("%s %lld%s", names[i], h[i + 1] - h[i], i < 8 ? ", " : "");
        printf(" (cycles of CTA 0; total %lld)\n", h[9] - h[0]);
        ar.fused = false;
        const double us_plain = lab_time(L, run_rope_attn, &ar, true);
        lab_check_errors(L, "rope_attention plain");
        snprintf(cfg, sizeof cfg, "%s %s", c->name, label);
        lab_record(L, "rope_attention", cfg, 0, 0, 0, true, us, 0, 0);
        snprintf(cfg, sizeof cfg, "%s %s plain rope_kv_store + attention", c->name, label);
        lab_record(L, "rope_attention", cfg, 0, 0, 0, true, us_plain, 0, 0);
    }
    lab_gpu_free(L, q_d), lab_gpu_free(L, k_d), lab_gpu_free(L, v_d), lab_gpu_free(L, o_d);
    free(q), free(k), free(v), free(og), free(oc);
}

static void rope_attn_cases(lab *L) {
    static const attn_cfg cfgs[] = {
        {"smollm 9/3x64 b16", 9, 3, 64, 64, 16, 0, 0.0f, QR_TYPE_F16},
        {"mistral 32/8x128 b16", 32, 8, 128, 128, 16, 0, 0.0f, QR_TYPE_F16},
        {"tinyllama 32/4x64 b16", 32, 4, 64, 64, 16, 0, 0.0f, QR_TYPE_F16},
        {"qwen 28/4x128 b16 cap30", 28, 4, 128, 128, 16, 0, 30.0f, QR_TYPE_F16},
        {"mha 4/4x64 b16 win24", 4, 4, 64, 64, 16, 24, 0.0f, QR_TYPE_F16},
        {"gqa16 32/2x128 b16", 32, 2, 128, 128, 16, 0, 0.0f, QR_TYPE_F16},
        {"gqa2 8/4x128 b7", 8, 4, 128, 128, 7, 0, 0.0f, QR_TYPE_F16},
    };
    const int len[2] = {37, 200};
    for (size_t ci = 0; ci < sizeof cfgs / sizeof cfgs[0]; ci++) {
        kvset S;
        kvset_init(L, &S, &cfgs[ci], 2, len);
        rope_attn_check(L, &S, 0, len[0], QR_ROPE_NORMAL, cfgs[ci].dk, ci == 1 || ci == 2, "pos37 norm");
        rope_attn_check(L, &S, 1, len[1], QR_ROPE_NEOX, cfgs[ci].dk / 2, ci == 1 || ci == 2, "pos200 neox half");
        if (ci == 1 || ci == 5) { /* smaller head tiles: the same row again (the stores overwrite on both backends) */
            qr_cuda_tune *tune = qr_cuda_backend_tune(L->gpu);
            const int32_t saved = tune->attn_short_g;
            for (int32_t g = 1; g <= 4; g *= 2) {
                char label[32];
                snprintf(label, sizeof label, "pos37 norm g%d", g);
                tune->attn_short_g = g;
                rope_attn_check(L, &S, 0, len[0], QR_ROPE_NORMAL, cfgs[ci].dk, ci == 1, label);
            }
            tune->attn_short_g = saved;
        }
        kvset_free(L, &S);
    }
}

void lab_attention(lab *L) {
    if (getenv("QUARREL_LAB_ATTN_BATCHED")) { /* profiling: the batched decode steps alone */
        big_cases(L);
        return;
    }
    small_cases(L);
    rope_attn_cases(L);
    if (L->quick) return;
    big_cases(L);
    time_kv_store(L);
}
