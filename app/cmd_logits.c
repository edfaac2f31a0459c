/* cmd_logits.c — `quarrel logits` (teacher-forced logits to .npy) and `quarrel perplexity`. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "engine.h"

/* Rows per qr_decode call when every row wants logits (bounds the logits buffer). */
#define LOGITS_CHUNK 64

/* Writes the .npy v1.0 header for a C-order float32 [rows][cols] array. */
static int write_npy_header(FILE *f, int64_t rows, int64_t cols) {
    char dict[128];
    int n = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (%lld, %lld), }",
                     (long long)rows, (long long)cols);
    int total = 10 + n + 1;
    int pad = (64 - total % 64) % 64;
    uint16_t hlen = (uint16_t)(n + pad + 1);
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 0xff), (unsigned char)(hlen >> 8)};
    if (fwrite(pre, 1, 10, f) != 10 || fwrite(dict, 1, (size_t)n, f) != (size_t)n) return -1;
    for (int i = 0; i < pad; i++) fputc(' ', f);
    fputc('\n', f);
    return ferror(f) ? -1 : 0;
}

/* Runs ids[0..n) through sequence 0 from an empty cache, `step` (1..LOGITS_CHUNK) tokens per decode
 * call, calling sink(row, logits) for every row; with cap, every row's captured layer inputs appended to it. */
static int forward_all(app_engine *e, const int32_t *ids, size_t n, int32_t step,
                       int (*sink)(void *ud, size_t row, const float *logits), void *ud, FILE *cap) {
    char err[1024];
    int8_t want[LOGITS_CHUNK];
    memset(want, 1, sizeof want);
    qr_kv_clear(e->ctx);
    for (size_t at = 0; at < n; at += (size_t)step) {
        int32_t m = (int32_t)(n - at < (size_t)step ? n - at : (size_t)step);
        qr_batch b = {.n_tokens = m, .token = ids + at, .logits = want};
        if (qr_decode(e->ctx, &b, err, sizeof err) != QR_OK) {
            fprintf(stderr, "quarrel: decode: %s\n", err);
            return 1;
        }
        for (int32_t r = 0; r < m; r++) {
            const float *lg = qr_get_logits(e->ctx, r);
            if (!lg) {
                fprintf(stderr, "quarrel: no logits for row %d\n", r);
                return 1;
            }
            if (sink(ud, at + (size_t)r, lg)) return 1;
        }
        int32_t rows = 0, width = 0;
        const float *h = cap ? qr_get_captured(e->ctx, &rows, &width) : NULL;
        if (cap && (!h || rows != m || fwrite(h, sizeof(float), (size_t)rows * (size_t)width, cap) !=
                                           (size_t)rows * (size_t)width)) {
            fprintf(stderr, "quarrel: the captured hidden states: %s\n", h ? strerror(errno) : "none came back");
            return 1;
        }
    }
    return 0;
}

typedef struct npy_sink {
    FILE *f;
    int32_t n_vocab;
} npy_sink;

static int npy_write_row(void *ud, size_t row, const float *logits) {
    npy_sink *s = ud;
    (void)row;
    if (fwrite(logits, sizeof(float), (size_t)s->n_vocab, s->f) != (size_t)s->n_vocab) {
        fprintf(stderr, "quarrel: write failed: %s\n", strerror(errno));
        return 1;
    }
    return 0;
}

/* "L0[,L1[,L2]]": 1 to 3 layer ids >= 0 (their range is the context's to check). */
static int parse_layers(const char *s, int32_t *layers, int32_t *n) {
    *n = 0;
    for (const char *p = s;;) {
        char *end = NULL;
        errno = 0;
        const long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > 1 << 20 || *n == 3 || (*end != ',' && *end != '\0')) {
            fprintf(stderr, "quarrel: --capture-layers %s: 1 to 3 layer ids, comma-separated\n", s);
            return 2;
        }
        layers[(*n)++] = (int32_t)v;
        if (*end == '\0') return 0;
        p = end + 1;
    }
}

static void usage_logits(FILE *f) {
    fprintf(f, "usage: quarrel logits -m MODEL (-p TEXT | -f FILE | --tokens IDS.json) -o OUT.npy [-t N] [--no-bos]\n"
               "                     [--ubatch N] [--ctx N]\n"
               "Writes teacher-forced float32 logits [n_tokens, n_vocab] as .npy (row i: logits after token i).\n"
               "--ubatch N: tokens per forward pass (1..64, default 64; 1 = the decode path, token by token).\n"
               "--ctx N: context size (default: the training context up to 4096, or the input's length when longer);\n"
               "         LongRoPE models (phi3) take their long rope factors when N exceeds the original context.\n"
               "--capture-layers L0[,L1[,L2]] --capture-out H.npy: also write the inputs of those layers (the residual\n"
               "         stream before the layer's norm: what an EAGLE-3 head reads) as float32 [n_tokens, n x n_embd].\n"
               APP_ENGINE_HELP);
}

/* Shared input handling of logits/perplexity: text or ids -> token ids. */
static int input_ids(app_engine *e, const char *prompt, const char *file, const char *tokens, bool add_bos,
                     int32_t **ids, size_t *n) {
    if (tokens) return app_read_ids_json(tokens, qr_model_n_vocab(e->model), ids, n);
    char *text = NULL;
    size_t len = 0;
    int rc;
    if (file && (rc = app_read_file(file, &text, &len))) return rc;
    rc = app_tokenize(e, prompt ? prompt : text, prompt ? strlen(prompt) : len, add_bos, false, ids, n);
    free(text);
    return rc;
}

int cmd_logits(int argc, char **argv) {
    static const struct option longopts[] = {{"model", 1, 0, 'm'}, {"prompt", 1, 0, 'p'}, {"file", 1, 0, 'f'},
                                             {"tokens", 1, 0, 'T'}, {"output", 1, 0, 'o'}, {"threads", 1, 0, 't'},
                                             {"no-bos", 0, 0, 'B'}, {"ubatch", 1, 0, 'U'}, {"ctx", 1, 0, 'c'}, {"help", 0, 0, 'h'},
                                             {"capture-layers", 1, 0, 'L'}, {"capture-out", 1, 0, 'C'},
                                             APP_ENGINE_LONGOPTS, {0, 0, 0, 0}};
    app_engine_opts eo = {0};
    const char *prompt = NULL, *file = NULL, *tokens = NULL, *out = NULL, *cap_out = NULL;
    int32_t ubatch = LOGITS_CHUNK, cap_layers[3], n_cap = 0;
    bool add_bos = true;
    int c, rc;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:p:f:o:t:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'm': eo.model = optarg; break;
        case 'p': prompt = optarg; break;
        case 'f': file = optarg; break;
        case 'T': tokens = optarg; break;
        case 'o': out = optarg; break;
        case 't': if ((rc = app_parse_int("-t", optarg, 1, 1024, &eo.n_threads))) return rc; break;
        case 'B': add_bos = false; break;
        case 'U': if ((rc = app_parse_int("--ubatch", optarg, 1, LOGITS_CHUNK, &ubatch))) return rc; break;
        case 'c': if ((rc = app_parse_int("--ctx", optarg, 1, 1 << 24, &eo.n_ctx))) return rc; break;
        case 'L': if ((rc = parse_layers(optarg, cap_layers, &n_cap))) return rc; break;
        case 'C': cap_out = optarg; break;
        case 'h': usage_logits(stdout); return 0;
        default:
            if ((rc = app_engine_opt(c, optarg, &eo)) >= 0) {
                if (rc) return rc;
                break;
            }
            usage_logits(stderr);
            return 2;
        }
    }
    if (!eo.model || !out || (!prompt + !file + !tokens) != 2 || optind < argc) {
        usage_logits(stderr);
        return 2;
    }
    if (!n_cap != !cap_out) {
        fprintf(stderr, "quarrel: --capture-layers and --capture-out go together\n");
        return 2;
    }
    eo.n_batch = LOGITS_CHUNK;
    app_engine e;
    /* The context must hold the whole input: open with a provisional size, then reopen if needed. */
    if ((rc = app_engine_open(&e, &eo))) return rc;
    int32_t *ids = NULL;
    size_t n = 0;
    if ((rc = input_ids(&e, prompt, file, tokens, add_bos, &ids, &n))) goto done;
    if (n == 0) {
        fprintf(stderr, "quarrel: the input is empty\n");
        rc = 2;
        goto done;
    }
    if ((int64_t)n > qr_context_n_ctx(e.ctx)) {
        if (eo.n_ctx == 0) { /* no --ctx: a context the input fits */
            app_engine_close(&e);
            eo.n_ctx = (int32_t)n;
            if ((rc = app_engine_open(&e, &eo))) goto done;
        }
        if ((int64_t)n > qr_context_n_ctx(e.ctx)) {
            fprintf(stderr, "quarrel: %zu tokens do not fit the context (%d)\n", n, qr_context_n_ctx(e.ctx));
            rc = 1;
            goto done;
        }
    }
    char err[512];
    if (n_cap && qr_context_capture_layers(e.ctx, n_cap, cap_layers, err, sizeof err) != QR_OK) {
        fprintf(stderr, "quarrel: %s\n", err);
        rc = 1;
        goto done;
    }
    FILE *cap = NULL;
    if (cap_out && (!(cap = fopen(cap_out, "wb")) ||
                    write_npy_header(cap, (int64_t)n, (int64_t)n_cap * qr_model_n_embd(e.model)))) {
        fprintf(stderr, "quarrel: %s: %s\n", cap_out, strerror(errno));
        if (cap) fclose(cap);
        rc = 1;
        goto done;
    }
    FILE *f = fopen(out, "wb");
    if (!f) {
        fprintf(stderr, "quarrel: %s: %s\n", out, strerror(errno));
        if (cap) fclose(cap);
        rc = 1;
        goto done;
    }
    npy_sink s = {f, qr_model_n_vocab(e.model)};
    rc = write_npy_header(f, (int64_t)n, s.n_vocab) ? 1 : forward_all(&e, ids, n, ubatch, npy_write_row, &s, cap);
    if (fclose(f) != 0 && !rc) {
        fprintf(stderr, "quarrel: %s: %s\n", out, strerror(errno));
        rc = 1;
    }
    if (cap && fclose(cap) != 0 && !rc) {
        fprintf(stderr, "quarrel: %s: %s\n", cap_out, strerror(errno));
        rc = 1;
    }
    if (!rc) fprintf(stderr, "quarrel: wrote %s [%zu, %d]\n", out, n, s.n_vocab);
done:
    free(ids);
    if (e.model) app_engine_close(&e);
    return rc;
}

/* Perplexity as llama.cpp computes it: the text is cut into chunks of n_ctx tokens (the first token
 * of each chunk replaced by BOS when the model adds one), and each chunk scores only the second half
 * of its positions, so that every scored token has at least n_ctx/2 tokens of context. */
typedef struct ppl_sink {
    const int32_t *chunk; /* [n_ctx] tokens of the chunk */
    int32_t n_ctx, first;
    int32_t n_vocab;
    double nll, nll2;
    int64_t count;
} ppl_sink;

static int ppl_row(void *ud, size_t row, const float *logits) {
    ppl_sink *s = ud;
    if ((int32_t)row < s->first || (int32_t)row >= s->n_ctx - 1) return 0;
    double mx = logits[0];
    for (int32_t i = 1; i < s->n_vocab; i++) mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0;
    for (int32_t i = 0; i < s->n_vocab; i++) sum += exp(logits[i] - mx);
    double nll = -(logits[s->chunk[row + 1]] - mx - log(sum));
    s->nll += nll;
    s->nll2 += nll * nll;
    s->count++;
    return 0;
}

static void usage_ppl(FILE *f) {
    fprintf(f, "usage: quarrel perplexity -m MODEL -f TEXT [--ctx N (default 512)] [-t N] [--chunks K]\n" APP_ENGINE_HELP);
}

int cmd_perplexity(int argc, char **argv) {
    static const struct option longopts[] = {{"model", 1, 0, 'm'}, {"file", 1, 0, 'f'}, {"ctx", 1, 0, 'c'},
                                             {"threads", 1, 0, 't'}, {"chunks", 1, 0, 'k'}, {"help", 0, 0, 'h'},
                                             APP_ENGINE_LONGOPTS, {0, 0, 0, 0}};
    app_engine_opts eo = {0};
    const char *file = NULL;
    int32_t n_ctx = 512, max_chunks = -1;
    int c, rc;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:f:c:t:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'm': eo.model = optarg; break;
        case 'f': file = optarg; break;
        case 'c': if ((rc = app_parse_int("--ctx", optarg, 8, 1 << 20, &n_ctx))) return rc; break;
        case 't': if ((rc = app_parse_int("-t", optarg, 1, 1024, &eo.n_threads))) return rc; break;
        case 'k': if ((rc = app_parse_int("--chunks", optarg, 1, 1 << 30, &max_chunks))) return rc; break;
        case 'h': usage_ppl(stdout); return 0;
        default:
            if ((rc = app_engine_opt(c, optarg, &eo)) >= 0) {
                if (rc) return rc;
                break;
            }
            usage_ppl(stderr);
            return 2;
        }
    }
    if (!eo.model || !file || optind < argc) {
        usage_ppl(stderr);
        return 2;
    }
    eo.n_ctx = n_ctx;
    eo.n_batch = LOGITS_CHUNK;
    app_engine e;
    if ((rc = app_engine_open(&e, &eo))) return rc;
    int32_t *ids = NULL;
    size_t n = 0;
    if ((rc = input_ids(&e, NULL, file, NULL, false, &ids, &n))) goto done;
    int64_t n_chunks = (int64_t)n / n_ctx;
    if (max_chunks > 0 && n_chunks > max_chunks) n_chunks = max_chunks;
    if (n_chunks < 1) {
        fprintf(stderr, "quarrel: %s has %zu tokens; need at least --ctx %d\n", file, n, n_ctx);
        rc = 1;
        goto done;
    }
    const qr_token bos = qr_tokenizer_special(e.tok, QR_SPECIAL_BOS);
    const bool add_bos = qr_tokenizer_add_bos(e.tok);
    ppl_sink s = {.n_ctx = n_ctx, .first = n_ctx / 2, .n_vocab = qr_model_n_vocab(e.model)};
    double t0 = app_time_s();
    for (int64_t k = 0; k < n_chunks && !rc; k++) {
        int32_t *chunk = ids + k * n_ctx;
        int32_t saved = chunk[0];
        if (add_bos && bos >= 0) chunk[0] = bos;
        s.chunk = chunk;
        rc = forward_all(&e, chunk, (size_t)n_ctx, LOGITS_CHUNK, ppl_row, &s, NULL);
        chunk[0] = saved;
        fprintf(stderr, "[%lld]%.4f ", (long long)k + 1, exp(s.nll / (double)s.count));
    }
    if (!rc) {
        double mean = s.nll / (double)s.count;
        double var = s.nll2 / (double)s.count - mean * mean;
        double ppl = exp(mean), err = s.count > 1 ? ppl * sqrt(var / (double)(s.count - 1)) : 0;
        printf("\nPPL = %.4f +/- %.5f over %lld chunks of %d tokens (%.1f s)\n", ppl, err, (long long)n_chunks, n_ctx,
               app_time_s() - t0);
    }
done:
    free(ids);
    app_engine_close(&e);
    return rc;
}
