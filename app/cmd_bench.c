/* cmd_bench.c — `quarrel bench`, measured the way llama-bench measures:
 *   pp N: one batch of N prompt tokens from an empty cache; t/s = N / time.
 *   tg N: N single-token decodes from an empty cache (batch 1 each); t/s = N / time.
 * One warm-up run of each, then r repetitions; reported as mean +/- sample standard deviation of
 * the per-repetition t/s. Tokens are pseudo-random ids (fixed seed), like llama-bench's.
 *   -d N: both tests start from a cache already holding N tokens (llama-bench's n_depth; the fill is
 *   not timed; it is done once and the cache is cut back to N tokens before each run).
 * The table also gives the median of the per-repetition t/s (JSON: pp_median_tps, tg_median_tps).
 *
 * --parallel N (-np N) measures batched decoding the way llama.cpp's llama-batched-bench does: N
 * sequences (ids 0..N-1), each with its own pseudo-random prompt of p tokens, prefilled together in
 * batches of n_batch rows (PP: N*p / time), then n decode steps of one batch of N rows each, one
 * fixed token per sequence, logits on every row, nothing sampled (TG: N*n / time aggregate, n / time
 * per sequence, time / n per step). -d gives every sequence its own d cached tokens first (untimed).
 * Reported per repetition and as the median over the repetitions. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "engine.h"
#include "internal.h" /* the CUDA backend's device name and graph counters */

static uint32_t lcg(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

/* Resets the cache to the depth prefix: cut back to `depth` tokens (filled once by fill_depth). */
static void reset_to_depth(app_engine *e, int32_t depth) {
    if (depth > 0) qr_kv_seq_rm(e->ctx, 0, depth, -1);
    else qr_kv_clear(e->ctx);
}

/* Fills the cache with `depth` tokens (untimed), n_batch rows per decode call. 0 ok, 1 error. */
static int fill_depth(app_engine *e, const int32_t *toks, int32_t depth, int32_t n_batch) {
    char err[1024];
    qr_kv_clear(e->ctx);
    for (int32_t at = 0; at < depth; at += n_batch) {
        int32_t m = depth - at < n_batch ? depth - at : n_batch;
        qr_batch b = {.n_tokens = m, .token = toks + at};
        if (qr_decode(e->ctx, &b, err, sizeof err) != QR_OK) {
            fprintf(stderr, "quarrel: decode (depth fill): %s\n", err);
            return 1;
        }
    }
    return 0;
}

/* Times one pp run of n tokens (n_batch rows per decode call) after `depth` cached tokens. Returns
 * seconds, < 0 on error. */
static double run_pp(app_engine *e, const int32_t *toks, int32_t n, int32_t n_batch, int32_t depth) {
    char err[1024];
    reset_to_depth(e, depth);
    double t0 = app_time_s();
    for (int32_t at = 0; at < n; at += n_batch) {
        int32_t m = n - at < n_batch ? n - at : n_batch;
        qr_batch b = {.n_tokens = m, .token = toks + at};
        if (qr_decode(e->ctx, &b, err, sizeof err) != QR_OK) {
            fprintf(stderr, "quarrel: decode: %s\n", err);
            return -1;
        }
    }
    (void)qr_get_logits(e->ctx, -1);
    return app_time_s() - t0;
}

/* Times n single-token decodes after `depth` cached tokens. */
static double run_tg(app_engine *e, const int32_t *toks, int32_t n, int32_t depth) {
    char err[1024];
    reset_to_depth(e, depth);
    double t0 = app_time_s();
    for (int32_t i = 0; i < n; i++) {
        qr_batch b = {.n_tokens = 1, .token = toks + i};
        if (qr_decode(e->ctx, &b, err, sizeof err) != QR_OK) {
            fprintf(stderr, "quarrel: decode: %s\n", err);
            return -1;
        }
        (void)qr_get_logits(e->ctx, -1);
    }
    return app_time_s() - t0;
}

static double median(const double *x, int n);
static const char *model_base(const app_engine *e);

/* --verify K: the cost of a speculative verification pass (K drafted tokens + the last one: K + 1 rows,
 * row-exact, logits of every row) next to a one-token decode step, both after `depth` cached tokens and
 * rolled back after each pass; `iters` alternating pairs (a shared machine's drift hits both), medians.
 * Prints the two step times and their ratio. Returns an exit code. */
static int bench_verify(app_engine *e, const int32_t *toks, int32_t k, int32_t depth, int32_t iters, bool json) {
    char err[1024];
    double *t1 = malloc(sizeof(double) * (size_t)iters), *tv = malloc(sizeof(double) * (size_t)iters);
    int8_t want[QR_SPEC_DRAFT_MAX + 1];
    int rc = 0;
    if (!t1 || !tv) {
        fprintf(stderr, "quarrel: out of memory\n");
        rc = 1;
        goto done;
    }
    for (int32_t i = 0; i <= k; i++) want[i] = 1;
    for (int32_t it = -2; it < iters; it++) { /* two warm-up pairs */
        for (int pass = 0; pass < 2; pass++) {
            const int32_t rows = pass ? k + 1 : 1;
            reset_to_depth(e, depth);
            qr_batch b = {.n_tokens = rows, .token = toks + depth, .logits = want};
            qr_context_set_row_exact(e->ctx, pass == 1);
            const double t0 = app_time_s();
            const qr_status st = qr_decode(e->ctx, &b, err, sizeof err);
            (void)qr_get_logits(e->ctx, 0);
            const double dt = app_time_s() - t0;
            qr_context_set_row_exact(e->ctx, false);
            if (st != QR_OK) {
                fprintf(stderr, "quarrel: decode: %s\n", err);
                rc = 1;
                goto done;
            }
            if (it >= 0) (pass ? tv : t1)[it] = dt;
        }
    }
    const double m1 = median(t1, iters), mv = median(tv, iters);
    char desc[256];
    qr_model_desc(e->model, desc, sizeof desc);
    if (json)
        printf("{\"model\": \"%s\", \"backend\": \"%s\", \"draft\": %d, \"depth\": %d, \"iters\": %d, "
               "\"decode_ms\": %.4f, \"verify_ms\": %.4f, \"ratio\": %.4f}\n",
               model_base(e), qr_model_backend_name(e->model), k, depth, iters, m1 * 1e3, mv * 1e3, mv / m1);
    else
        printf("| model | backend | depth | decode step ms | verify %d+1 rows ms | ratio |\n|---|---|---|---|---|---|\n"
               "| %s | %s | %d | %.3f | %.3f | %.2f |\n",
               k, model_base(e), qr_model_backend_name(e->model), depth, m1 * 1e3, mv * 1e3, mv / m1);
    fprintf(stderr, "%s\n", desc);
done:
    free(t1);
    free(tv);
    return rc;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of x[0..n) (n >= 1; x is left as it was). */
static double median(const double *x, int n) {
    double *s = malloc(sizeof(double) * (size_t)n);
    if (!s) return x[0];
    memcpy(s, x, sizeof(double) * (size_t)n);
    qsort(s, (size_t)n, sizeof(double), cmp_double);
    const double m = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
    free(s);
    return m;
}

static void mean_sd(const double *x, int n, double *mean, double *sd) {
    double s = 0, s2 = 0;
    for (int i = 0; i < n; i++) s += x[i];
    *mean = s / n;
    for (int i = 0; i < n; i++) s2 += (x[i] - *mean) * (x[i] - *mean);
    *sd = n > 1 ? sqrt(s2 / (n - 1)) : 0;
}

/* --parallel: the sequences' tokens and the rows of the batches built from them. */
typedef struct par_bench {
    app_engine *e;
    int32_t np, n_prompt, depth, n_batch;
    int32_t seq_len;          /* depth + n_prompt + n_gen: the tokens each sequence holds at the end */
    int32_t *toks;            /* [np][seq_len] each sequence's depth, prompt, then decode input tokens */
    int32_t *tok, *pos, *seq; /* [max(np * max(depth, n_prompt), np)] batch rows */
    int8_t *out;              /* same rows: 1 = compute the row's logits */
    bool checksum;            /* fold every decode row's argmax into crc (costs host time: not timed) */
    uint32_t crc;
} par_bench;

/* Decodes rows [0, rows) of b's row arrays, `chunk` rows per qr_decode call. 0 ok, 1 error. */
static int par_decode_rows(par_bench *b, int32_t rows, int32_t chunk, const char *what) {
    char err[1024];
    for (int32_t at = 0; at < rows; at += chunk) {
        const int32_t m = rows - at < chunk ? rows - at : chunk;
        qr_batch batch = {.n_tokens = m, .token = b->tok + at, .pos = b->pos + at, .seq_id = b->seq + at,
                          .logits = b->out + at};
        if (qr_decode(b->e->ctx, &batch, err, sizeof err) != QR_OK) {
            fprintf(stderr, "quarrel: decode (%s): %s\n", what, err);
            return 1;
        }
    }
    return 0;
}

/* Decodes tokens [from, from + len) of every sequence (each continues at position `from`), sequence
 * after sequence, n_batch rows per call; the last row of each sequence asks for its logits. */
static int par_prefill(par_bench *b, int32_t from, int32_t len, const char *what) {
    int32_t rows = 0;
    for (int32_t s = 0; s < b->np; s++)
        for (int32_t i = 0; i < len; i++, rows++) {
            b->tok[rows] = b->toks[(size_t)s * (size_t)b->seq_len + (size_t)(from + i)];
            b->pos[rows] = from + i;
            b->seq[rows] = s;
            b->out[rows] = i == len - 1;
        }
    return par_decode_rows(b, rows, b->n_batch, what);
}

/* Cuts every sequence back to its depth prefix (untimed). A sequence that cannot be cut back (a
 * recurrent state keeps no history) makes it empty the cache and fill the prefixes again. */
static int par_reset(par_bench *b) {
    if (b->depth == 0) {
        qr_kv_clear(b->e->ctx);
        return 0;
    }
    for (int32_t s = 0; s < b->np; s++)
        if (!qr_kv_seq_rm(b->e->ctx, s, b->depth, -1)) {
            qr_kv_clear(b->e->ctx);
            return par_prefill(b, 0, b->depth, "depth fill");
        }
    return 0;
}

/* One run: the prompts of all sequences (PP), then n_gen steps of one np-row batch (TG). Seconds
 * of each into *t_pp, *t_tg. 0 ok, 1 error. */
static int par_run(par_bench *b, int32_t n_gen, double *t_pp, double *t_tg) {
    if (par_reset(b)) return 1;
    double t0 = app_time_s();
    if (b->n_prompt > 0 && par_prefill(b, b->depth, b->n_prompt, "prompt")) return 1;
    *t_pp = app_time_s() - t0;
    t0 = app_time_s();
    for (int32_t i = 0; i < n_gen; i++) {
        const int32_t p = b->depth + b->n_prompt + i;
        for (int32_t s = 0; s < b->np; s++) {
            b->tok[s] = b->toks[(size_t)s * (size_t)b->seq_len + (size_t)p];
            b->pos[s] = p;
            b->seq[s] = s;
            b->out[s] = 1;
        }
        if (par_decode_rows(b, b->np, b->np, "decode")) return 1;
        for (int32_t s = 0; b->checksum && s < b->np; s++) { /* FNV-1a over the argmax of each row */
            const float *l = qr_get_logits(b->e->ctx, s);
            int32_t best = 0;
            for (int32_t v = 1; v < qr_model_n_vocab(b->e->model); v++)
                if (l[v] > l[best]) best = v;
            b->crc = (b->crc ^ (uint32_t)best) * 16777619u;
        }
    }
    *t_tg = app_time_s() - t0;
    return 0;
}

/* The model file's name without its directory. */
static const char *model_base(const app_engine *e) {
    const char *base = strrchr(e->path, '/');
    return base ? base + 1 : e->path;
}

/* The notes on stderr after the runs: the depth fill time, and on CUDA the device and graph counts. */
static void print_notes(app_engine *e, int32_t depth, double t_fill) {
    if (depth > 0) fprintf(stderr, "quarrel bench: depth %d filled in %.2f s\n", depth, t_fill);
#ifdef QUARREL_HAVE_CUDA
    if (!strcmp(qr_model_backend_name(e->model), "cuda")) {
        int64_t captured = 0, replayed = 0;
        const char *note = "";
        qr_cuda_backend_graph_stats(qr_model_backend(e->model), &captured, &replayed, &note);
        fprintf(stderr, "quarrel bench: %s; CUDA graphs: %lld captured, %lld replays%s%s\n",
                qr_cuda_backend_device_name(qr_model_backend(e->model)), (long long)captured, (long long)replayed,
                note[0] ? "; " : "", note);
    }
#else
    (void)e;
#endif
}

/* One table cell: the value with `prec` decimals, or "-" when its test was skipped. */
static const char *cell(char *buf, size_t len, bool on, int prec, double v) {
    if (on) snprintf(buf, len, "%.*f", prec, v);
    else snprintf(buf, len, "-");
    return buf;
}

enum { PAR_PP, PAR_TG, PAR_TG_SEQ, PAR_STEP_MS, PAR_N };
static const char *const par_json_names[PAR_N] = {"pp_tps", "tg_tps", "tg_seq_tps", "tg_step_ms"};

/* Prints the --parallel results: res[k * reps + r] is figure k (PAR_*) of repetition r. */
static void par_report(app_engine *e, const app_engine_opts *eo, const par_bench *b, int32_t n_gen, int32_t reps,
                       const double *res, bool json) {
    double med[PAR_N], pp_m, pp_sd, tg_m, tg_sd;
    for (int k = 0; k < PAR_N; k++) med[k] = median(res + (size_t)k * (size_t)reps, reps);
    mean_sd(res + (size_t)PAR_PP * (size_t)reps, reps, &pp_m, &pp_sd);
    mean_sd(res + (size_t)PAR_TG * (size_t)reps, reps, &tg_m, &tg_sd);
    char desc[256];
    qr_model_desc(e->model, desc, sizeof desc);
    if (json) {
        printf("{\"model\": \"%s\", \"desc\": \"%s\", \"backend\": \"%s\", \"threads\": %d, \"n_prompt\": %d, "
               "\"n_gen\": %d, \"n_depth\": %d, \"reps\": %d, \"n_parallel\": %d, \"n_batch\": %d, "
               "\"pp_tps\": %.3f, \"pp_sd\": %.3f, \"tg_tps\": %.3f, \"tg_sd\": %.3f, \"pp_median_tps\": %.3f, "
               "\"tg_median_tps\": %.3f, \"tg_seq_median_tps\": %.3f, \"tg_step_median_ms\": %.4f, \"runs\": [",
               model_base(e), desc, qr_model_backend_name(e->model), eo->n_threads, b->n_prompt, n_gen, b->depth,
               reps, b->np, b->n_batch, pp_m, pp_sd, tg_m, tg_sd, med[PAR_PP], med[PAR_TG], med[PAR_TG_SEQ],
               med[PAR_STEP_MS]);
        for (int32_t r = 0; r < reps; r++) {
            printf("%s{", r ? ", " : "");
            for (int k = 0; k < PAR_N; k++)
                printf("%s\"%s\": %.4f", k ? ", " : "", par_json_names[k], res[(size_t)k * (size_t)reps + (size_t)r]);
            printf("}");
        }
        printf("]}\n");
        return;
    }
    char test[96], at[32] = "";
    if (b->depth > 0) snprintf(at, sizeof at, " @ d%d", b->depth);
    snprintf(test, sizeof test, "np%d pp%d tg%d%s", b->np, b->n_prompt, n_gen, at);
    printf("| model | threads | test | rep | pp t/s | tg t/s | tg t/s/seq | step ms |\n"
           "|---|---|---|---|---|---|---|---|\n");
    for (int32_t r = 0; r <= reps; r++) {
        double v[PAR_N];
        char rep[16], c[PAR_N][32];
        for (int k = 0; k < PAR_N; k++) v[k] = r < reps ? res[(size_t)k * (size_t)reps + (size_t)r] : med[k];
        if (r < reps) snprintf(rep, sizeof rep, "%d", r + 1);
        else snprintf(rep, sizeof rep, "median");
        printf("| %s | %d | %s | %s | %s | %s | %s | %s |\n", model_base(e), eo->n_threads, test, rep,
               cell(c[0], sizeof c[0], b->n_prompt > 0, 2, v[PAR_PP]),
               cell(c[1], sizeof c[1], n_gen > 0, 2, v[PAR_TG]), cell(c[2], sizeof c[2], n_gen > 0, 2, v[PAR_TG_SEQ]),
               cell(c[3], sizeof c[3], n_gen > 0, 3, v[PAR_STEP_MS]));
    }
    fprintf(stderr, "%s\n", desc);
}

/* --parallel np: the whole measurement (depth fill, a warm-up, reps runs) and its report. The engine
 * was opened with np sequences and room for np * (depth + n_prompt + n_gen) tokens. Returns the exit
 * code. */
static int bench_parallel(app_engine *e, const app_engine_opts *eo, int32_t np, int32_t n_prompt, int32_t n_gen,
                          int32_t depth, int32_t n_batch, int32_t reps, bool json, bool checksum) {
    par_bench b = {.e = e, .np = np, .n_prompt = n_prompt, .depth = depth, .n_batch = n_batch,
                   .seq_len = depth + n_prompt + n_gen};
    const int32_t per_seq = depth > n_prompt ? depth : (n_prompt > 1 ? n_prompt : 1);
    const size_t n_rows = (size_t)np * (size_t)per_seq, n_toks = (size_t)np * (size_t)b.seq_len;
    const int32_t n_vocab = qr_model_n_vocab(e->model);
    int rc = 1;
    b.toks = malloc(sizeof(int32_t) * n_toks);
    b.tok = malloc(sizeof(int32_t) * n_rows);
    b.pos = malloc(sizeof(int32_t) * n_rows);
    b.seq = malloc(sizeof(int32_t) * n_rows);
    b.out = malloc(n_rows);
    double *res = calloc((size_t)PAR_N * (size_t)reps, sizeof(double));
    if (!b.toks || !b.tok || !b.pos || !b.seq || !b.out || !res) {
        fprintf(stderr, "quarrel: out of memory\n");
        goto done;
    }
    uint32_t seed = 42;
    for (size_t i = 0; i < n_toks; i++) b.toks[i] = (int32_t)(lcg(&seed) % (uint32_t)n_vocab);
    double t_fill = app_time_s(), t_pp = 0, t_tg = 0;
    qr_kv_clear(e->ctx);
    if (depth > 0 && par_prefill(&b, 0, depth, "depth fill")) goto done;
    t_fill = app_time_s() - t_fill;
    if (par_run(&b, n_gen < 16 ? n_gen : 16, &t_pp, &t_tg)) goto done; /* warm-up */
    for (int32_t r = 0; r < reps; r++) {
        if (par_run(&b, n_gen, &t_pp, &t_tg)) goto done;
        double *v = res + r;
        v[PAR_PP * reps] = n_prompt > 0 ? (double)np * n_prompt / t_pp : 0;
        v[PAR_TG * reps] = n_gen > 0 ? (double)np * n_gen / t_tg : 0;
        v[PAR_TG_SEQ * reps] = n_gen > 0 ? n_gen / t_tg : 0;
        v[PAR_STEP_MS * reps] = n_gen > 0 ? t_tg * 1e3 / n_gen : 0;
    }
    if (checksum) { /* one more run, untimed: the argmax of every decode row, folded (compare two builds/knobs) */
        b.checksum = true;
        b.crc = 2166136261u;
        if (par_run(&b, n_gen, &t_pp, &t_tg)) goto done;
        fprintf(stderr, "quarrel bench: decode argmax checksum %08x (%d steps x %d rows)\n", b.crc, n_gen, np);
    }
    print_notes(e, depth, t_fill);
    par_report(e, eo, &b, n_gen, reps, res, json);
    rc = 0;
done:
    free(b.toks);
    free(b.tok);
    free(b.pos);
    free(b.seq);
    free(b.out);
    free(res);
    return rc;
}

static void usage_bench(FILE *f) {
    fprintf(f, "usage: quarrel bench -m MODEL [-p 512] [-n 128] [-d 0] [-r 3] [-t N] [-b 512] [-np N] [--json]\n"
               "  -p N   prompt tokens for the prefill test (0 = skip)\n"
               "  -n N   generated tokens for the decode test (0 = skip)\n"
               "  -d N   run both tests after N tokens already in the cache (llama-bench -d)\n"
               "  -r N   repetitions (after one warm-up)\n"
               "  -b N   rows per forward pass (n_batch)\n"
               "  -np N, --parallel N\n"
               "         batched decoding (llama-batched-bench): N sequences prefill -p tokens each, then\n"
               "         decode -n tokens together, one N-row batch per step (1..4096)\n"
               "  --verify K  the cost of a speculative verification pass of K drafted tokens (K+1 rows,\n"
               "         row-exact) next to a one-token decode step, after -d tokens; -r N: N x 10 pairs\n"
               "  --checksum  with -np: one more (untimed) run that prints a checksum of every decode row's\n"
               "         argmax on stderr (the same for two builds or knob settings that compute the same logits)\n"
               APP_ENGINE_HELP);
}

/* getopt knows one-letter short options only: llama.cpp's "-np" becomes "--parallel" in a copy of argv
 * (malloc'd, NULL-terminated; the caller frees it). */
static char **rewrite_np(int argc, char **argv) {
    static char parallel_opt[] = "--parallel";
    char **args = malloc(sizeof(char *) * ((size_t)argc + 1));
    if (!args) return NULL;
    bool opts = true;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--")) opts = false;
        args[i] = opts && !strcmp(argv[i], "-np") ? parallel_opt : argv[i];
    }
    args[argc] = NULL;
    return args;
}

int cmd_bench(int argc, char **argv_in) {
    static const struct option longopts[] = {{"model", 1, 0, 'm'}, {"n-prompt", 1, 0, 'p'}, {"n-gen", 1, 0, 'n'},
                                             {"reps", 1, 0, 'r'}, {"threads", 1, 0, 't'}, {"batch", 1, 0, 'b'},
                                             {"json", 0, 0, 'J'}, {"help", 0, 0, 'h'}, {"depth", 1, 0, 'd'},
                                             {"parallel", 1, 0, 'P'}, {"checksum", 0, 0, 'K'}, {"verify", 1, 0, 'V'},
                                             APP_ENGINE_LONGOPTS, {0, 0, 0, 0}};
    app_engine_opts eo = {0};
    int32_t n_prompt = 512, n_gen = 128, reps = 3, n_batch = 512, depth = 0, n_parallel = 0, verify = 0;
    bool json = false, checksum = false;
    int c, rc;
    char **argv = rewrite_np(argc, argv_in);
    if (!argv) {
        fprintf(stderr, "quarrel: out of memory\n");
        return 1;
    }
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:p:n:r:t:b:d:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'm': eo.model = optarg; break;
        case 'p': if ((rc = app_parse_int("-p", optarg, 0, 1 << 20, &n_prompt))) goto usage_done; break;
        case 'n': if ((rc = app_parse_int("-n", optarg, 0, 1 << 20, &n_gen))) goto usage_done; break;
        case 'r': if ((rc = app_parse_int("-r", optarg, 1, 1000, &reps))) goto usage_done; break;
        case 't': if ((rc = app_parse_int("-t", optarg, 1, 1024, &eo.n_threads))) goto usage_done; break;
        case 'b': if ((rc = app_parse_int("-b", optarg, 1, 1 << 16, &n_batch))) goto usage_done; break;
        case 'd': if ((rc = app_parse_int("-d", optarg, 0, 1 << 22, &depth))) goto usage_done; break;
        case 'P': if ((rc = app_parse_int("--parallel", optarg, 1, 4096, &n_parallel))) goto usage_done; break;
        case 'J': json = true; break;
        case 'K': checksum = true; break;
        case 'V': if ((rc = app_parse_int("--verify", optarg, 1, QR_SPEC_DRAFT_MAX, &verify))) goto usage_done; break;
        case 'h': usage_bench(stdout); rc = 0; goto usage_done;
        default:
            if ((rc = app_engine_opt(c, optarg, &eo)) >= 0) {
                if (rc) goto usage_done;
                break;
            }
            usage_bench(stderr);
            rc = 2;
            goto usage_done;
        }
    }
    rc = 0;
    if (!eo.model || optind < argc || (n_prompt == 0 && n_gen == 0)) {
        usage_bench(stderr);
        rc = 2;
    }
usage_done:
    free(argv);
    if (rc || c == 'h') return rc;
    /* --parallel: np sequences of depth + prompt + generated tokens each (+ a KV block of rounding) */
    const int64_t par_ctx = (int64_t)n_parallel * ((int64_t)depth + n_prompt + n_gen + 32);
    if (par_ctx > INT32_MAX / 2) {
        fprintf(stderr, "quarrel: --parallel %d x (-d %d + -p %d + -n %d) needs %lld tokens of KV cache: too many\n",
                n_parallel, depth, n_prompt, n_gen, (long long)par_ctx);
        return 2;
    }
    eo.n_ctx = n_parallel ? (int32_t)par_ctx : depth + (n_prompt > n_gen ? n_prompt : n_gen) + verify + 16;
    eo.n_batch = n_batch;
    eo.n_seq_max = n_parallel;
    app_engine e;
    if ((rc = app_engine_open(&e, &eo))) return rc;
    if (n_parallel) {
        if (qr_context_n_ctx(e.ctx) < par_ctx) {
            fprintf(stderr, "quarrel: --parallel %d needs %lld tokens of KV cache, only %d fit in memory: lower "
                    "--parallel, -p, -n or -d\n", n_parallel, (long long)par_ctx, qr_context_n_ctx(e.ctx));
            rc = 1;
        } else {
            rc = bench_parallel(&e, &eo, n_parallel, n_prompt, n_gen, depth, n_batch, reps, json, checksum);
        }
        app_engine_close(&e);
        return rc;
    }
    int32_t n_tok = depth + (n_prompt > n_gen ? n_prompt : n_gen) + verify + 1, n_vocab = qr_model_n_vocab(e.model);
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)n_tok);
    double *pp = calloc((size_t)reps, sizeof(double)), *tg = calloc((size_t)reps, sizeof(double));
    if (!toks || !pp || !tg) {
        fprintf(stderr, "quarrel: out of memory\n");
        rc = 1;
        goto done;
    }
    uint32_t seed = 42;
    for (int32_t i = 0; i < n_tok; i++) toks[i] = (int32_t)(lcg(&seed) % (uint32_t)n_vocab);
    /* the depth prefix (once), then a warm-up of each test */
    double t_fill = app_time_s();
    if (depth > 0 && fill_depth(&e, toks, depth, n_batch)) {
        rc = 1;
        goto done;
    }
    t_fill = app_time_s() - t_fill;
    if (verify) { /* the speculative verification cost instead of pp / tg (-r N: N x 10 pairs) */
        print_notes(&e, depth, t_fill);
        rc = bench_verify(&e, toks, verify, depth, reps * 10, json);
        goto done;
    }
    const int32_t *run_toks = toks + depth;
    if ((n_prompt && run_pp(&e, run_toks, n_prompt, n_batch, depth) < 0) ||
        (n_gen && run_tg(&e, run_toks, n_gen < 16 ? n_gen : 16, depth) < 0)) {
        rc = 1;
        goto done;
    }
    for (int32_t r = 0; r < reps; r++) {
        double t;
        if (n_prompt) {
            if ((t = run_pp(&e, run_toks, n_prompt, n_batch, depth)) < 0) { rc = 1; goto done; }
            pp[r] = n_prompt / t;
        }
        if (n_gen) {
            if ((t = run_tg(&e, run_toks, n_gen, depth)) < 0) { rc = 1; goto done; }
            tg[r] = n_gen / t;
        }
    }
    double pp_m = 0, pp_sd = 0, tg_m = 0, tg_sd = 0, pp_med = 0, tg_med = 0;
    if (n_prompt) {
        mean_sd(pp, reps, &pp_m, &pp_sd);
        pp_med = median(pp, reps);
    }
    if (n_gen) {
        mean_sd(tg, reps, &tg_m, &tg_sd);
        tg_med = median(tg, reps);
    }
    char desc[256];
    qr_model_desc(e.model, desc, sizeof desc);
    const char *base = model_base(&e);
    print_notes(&e, depth, t_fill);
    if (json) {
        printf("{\"model\": \"%s\", \"desc\": \"%s\", \"backend\": \"%s\", \"threads\": %d, \"n_prompt\": %d, "
               "\"n_gen\": %d, \"n_depth\": %d, \"reps\": %d, "
               "\"pp_tps\": %.3f, \"pp_sd\": %.3f, \"tg_tps\": %.3f, \"tg_sd\": %.3f, "
               "\"pp_median_tps\": %.3f, \"tg_median_tps\": %.3f}\n",
               base, desc, qr_model_backend_name(e.model), eo.n_threads, n_prompt, n_gen, depth, reps, pp_m, pp_sd,
               tg_m, tg_sd, pp_med, tg_med);
    } else {
        printf("| model | threads | test | t/s | median |\n|---|---|---|---|---|\n");
        char at[32] = "";
        if (depth > 0) snprintf(at, sizeof at, " @ d%d", depth);
        if (n_prompt)
            printf("| %s | %d | pp%d%s | %.2f ± %.2f | %.2f |\n", base, eo.n_threads, n_prompt, at, pp_m, pp_sd,
                   pp_med);
        if (n_gen)
            printf("| %s | %d | tg%d%s | %.2f ± %.2f | %.2f |\n", base, eo.n_threads, n_gen, at, tg_m, tg_sd, tg_med);
        fprintf(stderr, "%s\n", desc);
    }
done:
    free(toks);
    free(pp);
    free(tg);
    app_engine_close(&e);
    return rc;
}
