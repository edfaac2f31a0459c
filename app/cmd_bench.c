/* cmd_bench.c — `quarrel bench`, measured the way llama-bench measures:
 *   pp N: one batch of N prompt tokens from an empty cache; t/s = N / time.
 *   tg N: N single-token decodes from an empty cache (batch 1 each); t/s = N / time.
 * One warm-up run of each, then r repetitions; reported as mean +/- sample standard deviation of
 * the per-repetition t/s. Tokens are pseudo-random ids (fixed seed), like llama-bench's.
 *   -d N: both tests start from a cache already holding N tokens (llama-bench's n_depth; the fill is
 *   not timed; it is done once and the cache is cut back to N tokens before each run). */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "engine.h"
#include "model/model.h"
#include "util/util.h"
#ifdef QUARREL_HAVE_CUDA
#include "backend/cuda/cuda_internal.h"
#endif

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
    double t0 = qr_time_s();
    for (int32_t at = 0; at < n; at += n_batch) {
        int32_t m = n - at < n_batch ? n - at : n_batch;
        qr_batch b = {.n_tokens = m, .token = toks + at};
        if (qr_decode(e->ctx, &b, err, sizeof err) != QR_OK) {
            fprintf(stderr, "quarrel: decode: %s\n", err);
            return -1;
        }
    }
    (void)qr_get_logits(e->ctx, -1);
    return qr_time_s() - t0;
}

/* Times n single-token decodes after `depth` cached tokens. */
static double run_tg(app_engine *e, const int32_t *toks, int32_t n, int32_t depth) {
    char err[1024];
    reset_to_depth(e, depth);
    double t0 = qr_time_s();
    for (int32_t i = 0; i < n; i++) {
        qr_batch b = {.n_tokens = 1, .token = toks + i};
        if (qr_decode(e->ctx, &b, err, sizeof err) != QR_OK) {
            fprintf(stderr, "quarrel: decode: %s\n", err);
            return -1;
        }
        (void)qr_get_logits(e->ctx, -1);
    }
    return qr_time_s() - t0;
}

static void mean_sd(const double *x, int n, double *mean, double *sd) {
    double s = 0, s2 = 0;
    for (int i = 0; i < n; i++) s += x[i];
    *mean = s / n;
    for (int i = 0; i < n; i++) s2 += (x[i] - *mean) * (x[i] - *mean);
    *sd = n > 1 ? sqrt(s2 / (n - 1)) : 0;
}

static void usage_bench(FILE *f) {
    fprintf(f, "usage: quarrel bench -m MODEL [-p 512] [-n 128] [-d 0] [-r 3] [-t N] [-b 512] [--json]\n"
               "  -p N   prompt tokens for the prefill test (0 = skip)\n"
               "  -n N   generated tokens for the decode test (0 = skip)\n"
               "  -d N   run both tests after N tokens already in the cache (llama-bench -d)\n"
               "  -r N   repetitions (after one warm-up)\n" APP_ENGINE_HELP);
}

int cmd_bench(int argc, char **argv) {
    static const struct option longopts[] = {{"model", 1, 0, 'm'}, {"n-prompt", 1, 0, 'p'}, {"n-gen", 1, 0, 'n'},
                                             {"reps", 1, 0, 'r'}, {"threads", 1, 0, 't'}, {"batch", 1, 0, 'b'},
                                             {"json", 0, 0, 'J'}, {"help", 0, 0, 'h'}, {"depth", 1, 0, 'd'},
                                             APP_ENGINE_LONGOPTS, {0, 0, 0, 0}};
    app_engine_opts eo = {0};
    int32_t n_prompt = 512, n_gen = 128, reps = 3, n_batch = 512, depth = 0;
    bool json = false;
    int c, rc;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:p:n:r:t:b:d:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'm': eo.model = optarg; break;
        case 'p': if ((rc = app_parse_int("-p", optarg, 0, 1 << 20, &n_prompt))) return rc; break;
        case 'n': if ((rc = app_parse_int("-n", optarg, 0, 1 << 20, &n_gen))) return rc; break;
        case 'r': if ((rc = app_parse_int("-r", optarg, 1, 1000, &reps))) return rc; break;
        case 't': if ((rc = app_parse_int("-t", optarg, 1, 1024, &eo.n_threads))) return rc; break;
        case 'b': if ((rc = app_parse_int("-b", optarg, 1, 1 << 16, &n_batch))) return rc; break;
        case 'd': if ((rc = app_parse_int("-d", optarg, 0, 1 << 22, &depth))) return rc; break;
        case 'J': json = true; break;
        case 'h': usage_bench(stdout); return 0;
        default:
            if ((rc = app_engine_opt(c, optarg, &eo)) >= 0) {
                if (rc) return rc;
                break;
            }
            usage_bench(stderr);
            return 2;
        }
    }
    if (!eo.model || optind < argc || (n_prompt == 0 && n_gen == 0)) {
        usage_bench(stderr);
        return 2;
    }
    eo.n_ctx = depth + (n_prompt > n_gen ? n_prompt : n_gen) + 16;
    eo.n_batch = n_batch;
    app_engine e;
    if ((rc = app_engine_open(&e, &eo))) return rc;
    int32_t n_tok = depth + (n_prompt > n_gen ? n_prompt : n_gen), n_vocab = qr_model_n_vocab(e.model);
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
    double t_fill = qr_time_s();
    if (depth > 0 && fill_depth(&e, toks, depth, n_batch)) {
        rc = 1;
        goto done;
    }
    t_fill = qr_time_s() - t_fill;
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
    double pp_m = 0, pp_sd = 0, tg_m = 0, tg_sd = 0;
    if (n_prompt) mean_sd(pp, reps, &pp_m, &pp_sd);
    if (n_gen) mean_sd(tg, reps, &tg_m, &tg_sd);
    char desc[256];
    qr_model_desc(e.model, desc, sizeof desc);
    const char *base = strrchr(e.path, '/');
    base = base ? base + 1 : e.path;
    const char *backend = qr_model_backend_name(e.model);
    if (depth > 0) fprintf(stderr, "quarrel bench: depth %d filled in %.2f s\n", depth, t_fill);
#ifdef QUARREL_HAVE_CUDA
    if (!strcmp(backend, "cuda")) {
        int64_t captured = 0, replayed = 0;
        const char *note = "";
        qr_cuda_backend_graph_stats(qr_model_backend(e.model), &captured, &replayed, &note);
        fprintf(stderr, "quarrel bench: %s; CUDA graphs: %lld captured, %lld replays%s%s\n",
                qr_cuda_backend_device_name(qr_model_backend(e.model)), (long long)captured, (long long)replayed,
                note[0] ? "; " : "", note);
    }
#endif
    if (json) {
        printf("{\"model\": \"%s\", \"desc\": \"%s\", \"backend\": \"%s\", \"threads\": %d, \"n_prompt\": %d, "
               "\"n_gen\": %d, \"n_depth\": %d, \"reps\": %d, "
               "\"pp_tps\": %.3f, \"pp_sd\": %.3f, \"tg_tps\": %.3f, \"tg_sd\": %.3f}\n",
               base, desc, backend, eo.n_threads, n_prompt, n_gen, depth, reps, pp_m, pp_sd, tg_m, tg_sd);
    } else {
        printf("| model | threads | test | t/s |\n|---|---|---|---|\n");
        char at[32] = "";
        if (depth > 0) snprintf(at, sizeof at, " @ d%d", depth);
        if (n_prompt) printf("| %s | %d | pp%d%s | %.2f ± %.2f |\n", base, eo.n_threads, n_prompt, at, pp_m, pp_sd);
        if (n_gen) printf("| %s | %d | tg%d%s | %.2f ± %.2f |\n", base, eo.n_threads, n_gen, at, tg_m, tg_sd);
        fprintf(stderr, "%s\n", desc);
    }
done:
    free(toks);
    free(pp);
    free(tg);
    app_engine_close(&e);
    return rc;
}
