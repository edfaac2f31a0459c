/* cmd_embed.c — `quarrel embed`: texts (a JSON-lines file or -p) -> embeddings, written as a float32
 * .npy matrix [n_texts][dim] or as JSON lines {"id", "embedding"} on stdout. Also the text-list and
 * model helpers shared with `push` and `search` (embed_io.h). */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "embed_io.h"

/* ---- texts ---- */

void embed_texts_free(embed_texts *t) {
    for (int64_t i = 0; i < t->n; i++) {
        free(t->text[i]);
        if (t->metadata) free(t->metadata[i]);
    }
    free(t->text);
    free(t->id);
    free(t->metadata);
    memset(t, 0, sizeof *t);
}

static int texts_push(embed_texts *t, int64_t *cap, char *text, int64_t id, char *meta) {
    if (t->n == *cap) {
        int64_t nc = *cap ? *cap * 2 : 256;
        char **nt = realloc(t->text, (size_t)nc * sizeof(char *));
        if (nt) t->text = nt;
        int64_t *ni = realloc(t->id, (size_t)nc * sizeof(int64_t));
        if (ni) t->id = ni;
        char **nm = realloc(t->metadata, (size_t)nc * sizeof(char *));
        if (nm) t->metadata = nm;
        if (!nt || !ni || !nm) return 1;
        *cap = nc;
    }
    t->text[t->n] = text;
    t->id[t->n] = id;
    t->metadata[t->n] = meta;
    t->n++;
    return 0;
}

int embed_texts_one(const char *text, embed_texts *out) {
    memset(out, 0, sizeof *out);
    int64_t cap = 0;
    char *s = strdup(text);
    if (!s || texts_push(out, &cap, s, 1, NULL)) {
        free(s);
        embed_texts_free(out);
        fprintf(stderr, "quarrel: out of memory\n");
        return 1;
    }
    return 0;
}

int embed_texts_read(const char *cmd, const char *path, embed_texts *out) {
    memset(out, 0, sizeof *out);
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        fprintf(stderr, "%s: cannot open %s: %s\n", cmd, path, strerror(errno));
        return 1;
    }
    int64_t cap = 0, line_no = 0;
    char *line = NULL;
    size_t line_cap = 0;
    ssize_t len;
    int rc = 0;
    while ((len = getline(&line, &line_cap, f)) >= 0) {
        line_no++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t'))
            line[--len] = 0;
        const char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (!*p) continue; /* blank line */
        json_error_t je;
        json_t *j = json_loads(p, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        if (!j) {
            fprintf(stderr, "%s: %s:%lld: malformed JSON: %s\n", cmd, path, (long long)line_no, je.text);
            rc = 1;
            break;
        }
        const char *text = NULL;
        int64_t id = line_no;
        char *meta = NULL;
        if (json_is_string(j)) {
            text = json_string_value(j);
        } else if (json_is_object(j)) {
            json_t *jt = json_object_get(j, "text"), *ji = json_object_get(j, "id"), *jm = json_object_get(j, "metadata");
            if (!json_is_string(jt)) {
                fprintf(stderr, "%s: %s:%lld: expected a string \"text\" field\n", cmd, path, (long long)line_no);
                rc = 1;
            } else if (ji && !json_is_null(ji) &&
                       (!json_is_integer(ji) || json_integer_value(ji) < 0 || json_integer_value(ji) > 0xffffffffll)) {
                fprintf(stderr, "%s: %s:%lld: \"id\" must be an integer in [0, 2^32)\n", cmd, path, (long long)line_no);
                rc = 1;
            } else {
                text = json_string_value(jt);
                if (ji && json_is_integer(ji)) id = (int64_t)json_integer_value(ji);
                if (jm && !json_is_null(jm)) {
                    meta = json_is_string(jm) ? strdup(json_string_value(jm))
                                              : json_dumps(jm, JSON_COMPACT | JSON_ENCODE_ANY);
                }
            }
        } else {
            fprintf(stderr, "%s: %s:%lld: expected a JSON object with \"text\" or a JSON string\n", cmd, path,
                    (long long)line_no);
            rc = 1;
        }
        if (rc == 0) {
            char *t = text ? strdup(text) : NULL;
            if (!t || texts_push(out, &cap, t, id, meta)) {
                free(t);
                free(meta);
                fprintf(stderr, "%s: out of memory\n", cmd);
                rc = 1;
            }
        } else {
            free(meta);
        }
        json_decref(j);
        if (rc) break;
    }
    if (rc == 0 && ferror(f)) {
        fprintf(stderr, "%s: cannot read %s\n", cmd, path);
        rc = 1;
    }
    free(line);
    if (f != stdin) fclose(f);
    if (rc == 0 && out->n == 0) {
        fprintf(stderr, "%s: %s holds no texts\n", cmd, path);
        rc = 1;
    }
    if (rc) embed_texts_free(out);
    return rc;
}

/* ---- model ---- */

int embed_engine_open(app_engine *e, const char *model, int32_t n_threads, int32_t n_batch, int32_t n_seq) {
    /* the KV cache holds one full pass: every sequence rounds up to whole blocks of 32 slots */
    app_engine_opts o = {.model = model, .n_threads = n_threads, .n_batch = n_batch, .n_seq_max = n_seq,
                         .n_ctx = n_batch + 32 * n_seq};
    return app_engine_open(e, &o);
}

int embed_parse_pooling(const char *s) {
    static const char *const names[] = {"none", "mean", "cls", "last"};
    if (!strcmp(s, "model")) return QR_POOLING_MODEL;
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, names[i])) return i;
    return -2;
}

/* ---- output ---- */

/* Writes a float32 [rows][cols] .npy (format 1.0). */
static int write_npy(const char *path, const float *x, int64_t rows, int64_t cols) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "embed: cannot create %s: %s\n", path, strerror(errno));
        return 1;
    }
    char hdr[128];
    int n = snprintf(hdr, sizeof hdr, "{'descr': '<f4', 'fortran_order': False, 'shape': (%lld, %lld), }",
                     (long long)rows, (long long)cols);
    int total = 10 + n + 1;
    int pad = (64 - total % 64) % 64;
    const uint16_t hlen = (uint16_t)(n + pad + 1);
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    fputc(hlen & 0xff, f);
    fputc(hlen >> 8, f);
    fwrite(hdr, 1, (size_t)n, f);
    for (int i = 0; i < pad; i++) fputc(' ', f);
    fputc('\n', f);
    fwrite(x, sizeof(float), (size_t)(rows * cols), f);
    if (fclose(f) != 0) {
        fprintf(stderr, "embed: cannot write %s\n", path);
        return 1;
    }
    return 0;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: quarrel embed -m MODEL (-f texts.jsonl | -p TEXT) [options]\n"
            "Embeds texts (one per JSON line: {\"text\": ..., \"id\": N, \"metadata\": {...}} or a JSON string).\n"
            "  -m, --model M        GGUF path or Ollama name (bert, nomic-bert, llama, gemma3)\n"
            "  -f, --file F         JSON-lines input (- = stdin)\n"
            "  -p, --prompt TEXT    one text\n"
            "  -o, --output F.npy   write a float32 [n][dim] .npy matrix\n"
            "  --jsonl              write {\"id\", \"embedding\"} lines to stdout (the default without -o)\n"
            "  --normalize / --no-normalize   L2-normalize (default on)\n"
            "  --truncate / --no-truncate     cut over-long texts with a warning (default) or fail\n"
            "  --pooling P          model (default), mean, cls, last\n"
            "  -t, --threads N      CPU threads (default all)\n"
            "  --batch N            texts per qr_embed call (default 256)\n"
            "  --n-batch N          rows per forward pass (default 2048)\n");
}

int cmd_embed(int argc, char **argv) {
    static const struct option longopts[] = {
        {"model", 1, 0, 'm'},     {"file", 1, 0, 'f'},        {"prompt", 1, 0, 'p'},      {"output", 1, 0, 'o'},
        {"jsonl", 0, 0, 'J'},     {"normalize", 0, 0, 'N'},   {"no-normalize", 0, 0, 'n'}, {"truncate", 0, 0, 'T'},
        {"no-truncate", 0, 0, 'U'}, {"pooling", 1, 0, 'P'},   {"threads", 1, 0, 't'},     {"batch", 1, 0, 'b'},
        {"n-batch", 1, 0, 'B'},   {"help", 0, 0, 'h'},        {0, 0, 0, 0}};
    const char *model = NULL, *file = NULL, *prompt = NULL, *output = NULL;
    bool jsonl = false;
    qr_embed_params ep = qr_embed_default_params();
    int32_t n_threads = 0, batch = 256, n_batch = 2048;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:f:p:o:t:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'f': file = optarg; break;
        case 'p': prompt = optarg; break;
        case 'o': output = optarg; break;
        case 'J': jsonl = true; break;
        case 'N': ep.normalize = true; break;
        case 'n': ep.normalize = false; break;
        case 'T': ep.truncate = true; break;
        case 'U': ep.truncate = false; break;
        case 'P': {
            int pl = embed_parse_pooling(optarg);
            if (pl == -2) {
                fprintf(stderr, "embed: --pooling: expected model, mean, cls or last, got '%s'\n", optarg);
                return 2;
            }
            ep.pooling = (qr_pooling)pl;
            break;
        }
        case 't':
            if (app_parse_int("--threads", optarg, 1, 1024, &n_threads)) return 2;
            break;
        case 'b':
            if (app_parse_int("--batch", optarg, 1, 1 << 20, &batch)) return 2;
            break;
        case 'B':
            if (app_parse_int("--n-batch", optarg, 16, 1 << 20, &n_batch)) return 2;
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc || !model || (!file == !prompt)) {
        if (optind < argc) fprintf(stderr, "embed: unexpected argument '%s'\n", argv[optind]);
        else if (!model) fprintf(stderr, "embed: -m MODEL is required\n");
        else fprintf(stderr, "embed: give exactly one of -f FILE and -p TEXT\n");
        usage(stderr);
        return 2;
    }
    if (output && jsonl) {
        fprintf(stderr, "embed: -o and --jsonl exclude each other\n");
        return 2;
    }
    embed_texts texts;
    if (file ? embed_texts_read("embed", file, &texts) : embed_texts_one(prompt, &texts)) return 1;
    app_engine e;
    const int32_t n_seq = batch < 256 ? batch : 256;
    if (embed_engine_open(&e, model, n_threads, n_batch, n_seq)) {
        embed_texts_free(&texts);
        return 1;
    }
    const int64_t dim = qr_model_n_embd_out(e.model);
    float *emb = malloc((size_t)texts.n * (size_t)dim * sizeof(float));
    int rc = 0;
    if (!emb) {
        fprintf(stderr, "embed: out of memory for %lld embeddings\n", (long long)texts.n);
        rc = 1;
    }
    double t0 = app_time_s();
    char err[1024];
    for (int64_t i = 0; rc == 0 && i < texts.n; i += batch) {
        const int32_t nb = (int32_t)(texts.n - i < batch ? texts.n - i : batch);
        if (qr_embed(e.ctx, (const char *const *)texts.text + i, nb, &ep, emb + i * dim, err, sizeof err) != QR_OK) {
            fprintf(stderr, "embed: %s\n", err);
            rc = 1;
        }
    }
    const double dt = app_time_s() - t0;
    if (rc == 0) {
        if (output) {
            rc = write_npy(output, emb, texts.n, dim);
        } else {
            for (int64_t i = 0; i < texts.n; i++) {
                printf("{\"id\": %lld, \"embedding\": [", (long long)texts.id[i]);
                for (int64_t j = 0; j < dim; j++) printf(j ? ", %.9g" : "%.9g", (double)emb[i * dim + j]);
                printf("]}\n");
            }
            if (fflush(stdout) != 0) rc = 1;
        }
        if (rc == 0)
            fprintf(stderr, "embed: %lld texts, dim %lld, %.2f s (%.1f texts/s)\n", (long long)texts.n, (long long)dim,
                    dt, dt > 0 ? (double)texts.n / dt : 0.0);
    }
    free(emb);
    app_engine_close(&e);
    embed_texts_free(&texts);
    return rc;
}
