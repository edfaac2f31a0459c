/* engine.c — shared plumbing of the generation commands (see engine.h), on the public API only. */
#include "engine.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

double app_time_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void app_progress_draw(const char *label, uint64_t done, uint64_t total, const char *unit) {
    static const char hashes[] = "##############################", dots[] = "..............................";
    const int width = 30, filled = total ? (int)((double)(done < total ? done : total) / (double)total * width) : 0;
    fprintf(stderr, "\r%s [%.*s%.*s] %llu/%llu %s", label, filled, hashes, width - filled, dots,
            (unsigned long long)done, (unsigned long long)total, unit);
    fflush(stderr);
}

/* A model file read once from a slow disk before loading, with a progress bar: on a terminal only, for
 * files of 256 MiB up to half the RAM (the load then finds its pages cached). Drawn only when the read
 * takes over a second (a cached file shows nothing). */
static void preload_with_progress(const char *path) {
    struct stat st;
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    if (!isatty(STDERR_FILENO) || stat(path, &st) != 0 || st.st_size < (256 << 20) || pages <= 0 || page <= 0 ||
        (double)st.st_size > 0.5 * (double)pages * (double)page)
        return;
    const int fd = open(path, O_RDONLY);
    if (fd < 0) return;
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    enum { CHUNK = 8 << 20 };
    char *buf = malloc(CHUNK);
    const double t0 = app_time_s();
    bool drawn = false;
    uint64_t done = 0;
    for (ssize_t r; buf && (r = read(fd, buf, CHUNK)) > 0;) {
        done += (uint64_t)r;
        if (app_time_s() - t0 > 1.0) {
            app_progress_draw("load", done >> 20, (uint64_t)st.st_size >> 20, "MiB");
            drawn = true;
        }
    }
    if (drawn) fprintf(stderr, "\r\033[K");
    free(buf);
    close(fd);
}

/* Resolves name (path or Ollama name) into path[0..cap) and loads it with o's backend options; what = ""
 * or "--draft-model: " (in front of the error message). Returns 0 or 1. */
static int load_model(const char *name, const app_engine_opts *o, const char *what, char *path, size_t cap,
                      qr_model **out) {
    char err[1024];
    if (qr_model_resolve_path(name, path, cap, err, sizeof err) != QR_OK) {
        fprintf(stderr, "quarrel: %s%s\n", what, err);
        return 1;
    }
    preload_with_progress(path);
    qr_model_params mp = qr_model_default_params();
    mp.n_threads = o->n_threads;
    mp.backend = o->backend;
    mp.gpu = o->gpu;
    mp.tp = o->tp;
    mp.split_mode = o->split_mode;
    memcpy(mp.tensor_split, o->tensor_split, sizeof mp.tensor_split);
    mp.tp_addr = o->tp_addr;
    mp.tp_rank = o->tp_rank;
    if (qr_model_load(path, &mp, out, err, sizeof err) != QR_OK) {
        fprintf(stderr, "quarrel: %s%s\n", what, err);
        return 1;
    }
    return 0;
}

/* A worker rank (--tp-rank >= 1): serves the driver's commands until it leaves, then exits the process. */
static void serve_rank(qr_model *m, const app_engine_opts *o) {
    char err[1024];
    fprintf(stderr, "quarrel: rank %d of %d (%s) joined the driver at %s\n", o->tp_rank, o->tp,
            qr_model_backend_name(m), o->tp_addr);
    const qr_status st = qr_tp_worker_serve(m, err, sizeof err);
    if (st != QR_OK) fprintf(stderr, "quarrel: %s\n", err);
    else fprintf(stderr, "quarrel: rank %d: the driver left\n", o->tp_rank);
    qr_model_free(m);
    fflush(stdout);
    exit(st == QR_OK ? 0 : 1);
}

int app_engine_open(app_engine *e, const app_engine_opts *o) {
    char err[1024];
    memset(e, 0, sizeof *e);
    double t0 = app_time_s();
    if (o->tp_rank > 0 && (o->tp < 2 || !o->tp_addr)) {
        fprintf(stderr, "quarrel: --tp-rank %d needs --tp N (N > 1) and --tp-addr HOST:PORT\n", o->tp_rank);
        return 2;
    }
    if (o->tp_addr && o->tp < 2) {
        fprintf(stderr, "quarrel: --tp-addr needs --tp N (N > 1): the number of ranks\n");
        return 2;
    }
    if (load_model(o->model, o, "", e->path, sizeof e->path, &e->model)) return 1;
    if (o->tp_rank > 0) serve_rank(e->model, o); /* does not return */
    const char *note = qr_model_backend_note(e->model);
    if (note[0]) fprintf(stderr, "quarrel: %s, using the CPU\n", note);
    if (qr_tokenizer_from_model(e->model, &e->tok, err, sizeof err) != QR_OK) {
        fprintf(stderr, "quarrel: %s: tokenizer: %s\n", e->path, err);
        app_engine_close(e);
        return 1;
    }
    qr_context_params cp = qr_context_default_params();
    cp.n_ctx = o->n_ctx > 0 ? o->n_ctx : qr_model_n_ctx_capped(e->model, QR_N_CTX_DEFAULT);
    if (o->n_batch > 0) cp.n_batch = o->n_batch;
    if (o->n_seq_max > 0) cp.n_seq_max = o->n_seq_max;
    cp.n_threads = o->n_threads;
    cp.type_k = o->type_k;
    cp.type_v = o->type_v;
    if (qr_context_create(e->model, &cp, &e->ctx, err, sizeof err) != QR_OK) {
        fprintf(stderr, "quarrel: %s\n", err);
        app_engine_close(e);
        return 1;
    }
    if (o->spec_on && app_spec_open(e, o)) {
        app_engine_close(e);
        return 1;
    }
    e->load_ms = (app_time_s() - t0) * 1e3;
    return 0;
}

int app_spec_open(app_engine *e, const app_engine_opts *o) {
    char err[1024], path[4096];
    qr_spec_params sp = o->spec;
    if (o->draft_path) {
        app_engine_opts d = *o; /* a draft model runs on one rank (small, and its heads may not split) */
        d.tp = 0;
        d.tp_addr = NULL;
        if (load_model(o->draft_path, &d, "--draft-model: ", path, sizeof path, &e->draft_model)) return 1;
        sp.draft_model = e->draft_model;
        /* an EAGLE-3 head given as the draft model drafts as one */
        if (sp.kind == QR_SPEC_DRAFT && !strcmp(qr_model_arch(e->draft_model), "eagle3")) sp.kind = QR_SPEC_EAGLE3;
    }
    if (qr_spec_create(e->ctx, &sp, &e->spec, err, sizeof err) != QR_OK) {
        const char *pre = "speculative decoding: "; /* spec.c's own messages may start with it already */
        fprintf(stderr, "quarrel: %s%s\n", strncmp(err, pre, strlen(pre)) ? pre : "", err);
        return 1;
    }
    return 0;
}

int app_spec_opt(int id, const char *arg, app_engine_opts *o) {
    if (id < 1200 || id > 1205) return -1;
    switch (id) {
    case 1200:
        if (!strcmp(arg, "ngram")) o->spec.kind = QR_SPEC_NGRAM, o->spec_on = true;
        else if (!strcmp(arg, "draft")) o->spec.kind = QR_SPEC_DRAFT, o->spec_on = true;
        else if (!strcmp(arg, "eagle3")) o->spec.kind = QR_SPEC_EAGLE3, o->spec_on = true;
        else if (!strcmp(arg, "none")) o->spec_on = false;
        else {
            fprintf(stderr, "quarrel: --spec: bad value '%s' (expected ngram, draft, eagle3 or none)\n", arg);
            return 2;
        }
        return 0;
    case 1201:
        o->draft_path = arg;
        if (o->spec.kind != QR_SPEC_EAGLE3) o->spec.kind = QR_SPEC_DRAFT;
        o->spec_on = true;
        return 0;
    case 1202: return app_parse_int("--draft-max", arg, 1, QR_SPEC_DRAFT_MAX, &o->spec.draft_max);
    case 1203: return app_parse_int("--draft-min", arg, 0, QR_SPEC_DRAFT_MAX, &o->spec.draft_min);
    case 1204: return app_parse_float("--draft-p-min", arg, &o->spec.draft_p_min);
    default: {
        int a = 0, b = 0, n = 0;
        if (sscanf(arg, "%d:%d%n", &a, &b, &n) != 2 || arg[n] || a < 1 || b < a || b > 16) {
            fprintf(stderr, "quarrel: --spec-ngram: bad value '%s' (expected MIN:MAX, 1 <= MIN <= MAX <= 16)\n", arg);
            return 2;
        }
        o->spec.ngram_min = a;
        o->spec.ngram_max = b;
        return 0;
    }
    }
}

int app_spec_check(const app_engine_opts *o) {
    if (o->spec_on && (o->spec.kind == QR_SPEC_DRAFT || o->spec.kind == QR_SPEC_EAGLE3) && !o->draft_path) {
        fprintf(stderr, "quarrel: --spec %s needs --draft-model MODEL\n",
                o->spec.kind == QR_SPEC_DRAFT ? "draft" : "eagle3 (the head)");
        return 2;
    }
    return 0;
}

void app_engine_close(app_engine *e) {
    qr_spec_free(e->spec);
    e->spec = NULL;
    qr_context_free(e->ctx);
    qr_tokenizer_free(e->tok);
    qr_model_free(e->model);
    qr_model_free(e->draft_model);
    e->draft_model = NULL;
    e->ctx = NULL;
    e->tok = NULL;
    e->model = NULL;
}

int app_tokenize(const app_engine *e, const char *text, size_t len, bool add_special, bool parse_special,
                 int32_t **ids, size_t *n) {
    size_t need = 0;
    qr_status st = qr_tokenize(e->tok, text, len, add_special, parse_special, NULL, 0, &need);
    if (st != QR_OK) {
        fprintf(stderr, "quarrel: tokenize: %s\n", qr_status_str(st));
        return 1;
    }
    *ids = malloc((need ? need : 1) * sizeof **ids);
    if (!*ids) {
        fprintf(stderr, "quarrel: out of memory\n");
        return 1;
    }
    st = qr_tokenize(e->tok, text, len, add_special, parse_special, *ids, need, n);
    if (st != QR_OK) {
        free(*ids);
        *ids = NULL;
        fprintf(stderr, "quarrel: tokenize: %s\n", qr_status_str(st));
        return 1;
    }
    return 0;
}

int app_read_file(const char *path, char **buf, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "quarrel: %s: %s\n", path, strerror(errno));
        return 1;
    }
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap + 1);
    for (size_t r; b && (r = fread(b + n, 1, cap - n, f)) > 0;) {
        n += r;
        if (n == cap) {
            char *nb = realloc(b, 2 * cap + 1);
            if (!nb) {
                free(b);
                b = NULL;
                break;
            }
            b = nb;
            cap *= 2;
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (!b || bad) {
        free(b);
        fprintf(stderr, "quarrel: %s: %s\n", path, b ? "read error" : "out of memory");
        return 1;
    }
    b[n] = 0;
    *buf = b;
    *len = n;
    return 0;
}

int app_read_ids_json(const char *path, int32_t n_vocab, int32_t **ids, size_t *n) {
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root) {
        fprintf(stderr, "quarrel: %s: line %d: %s\n", path, jerr.line, jerr.text);
        return 2;
    }
    if (!json_is_array(root)) {
        fprintf(stderr, "quarrel: %s: expected a JSON array of token ids\n", path);
        json_decref(root);
        return 2;
    }
    size_t count = json_array_size(root);
    int32_t *out = malloc((count ? count : 1) * sizeof *out);
    if (!out) {
        json_decref(root);
        fprintf(stderr, "quarrel: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < count; i++) {
        json_t *v = json_array_get(root, i);
        json_int_t id = json_is_integer(v) ? json_integer_value(v) : -1;
        if (!json_is_integer(v) || id < 0 || (n_vocab > 0 && id >= n_vocab)) {
            fprintf(stderr, "quarrel: %s: element %zu is not a token id in [0, %d)\n", path, i, n_vocab);
            free(out);
            json_decref(root);
            return 2;
        }
        out[i] = (int32_t)id;
    }
    json_decref(root);
    *ids = out;
    *n = count;
    return 0;
}

int app_render_messages(const app_engine *e, const void *messages_json, char **out) {
    const json_t *arr = messages_json;
    size_t n = json_array_size(arr);
    qr_chat_message *msgs = calloc(n ? n : 1, sizeof *msgs);
    if (!msgs) {
        fprintf(stderr, "quarrel: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *m = json_array_get(arr, i);
        msgs[i].role = json_string_value(json_object_get(m, "role"));
        msgs[i].content = json_string_value(json_object_get(m, "content"));
    }
    char err[1024];
    qr_status st = qr_chat_apply_template(e->model, e->tok, msgs, n, true, out, NULL, err, sizeof err);
    free(msgs);
    if (st == QR_ERR_NOT_FOUND) fprintf(stderr, "quarrel: %s: %s\n", e->path, err);
    else if (st != QR_OK) fprintf(stderr, "quarrel: chat template: %s\n", err);
    return st == QR_OK ? 0 : 1;
}

int app_render_chat(const app_engine *e, const char *system, const char *user, char **out) {
    json_t *msgs = json_array();
    if (system && *system) json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "system", "content", system));
    json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "user", "content", user));
    int rc = app_render_messages(e, msgs, out);
    json_decref(msgs);
    return rc;
}

int app_parse_int(const char *opt, const char *s, long min, long max, int32_t *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max) {
        fprintf(stderr, "quarrel: %s: bad value '%s' (expected an integer in [%ld, %ld])\n", opt, s, min, max);
        return 2;
    }
    *out = (int32_t)v;
    return 0;
}

int app_parse_float(const char *opt, const char *s, float *out) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end || !isfinite(v)) {
        fprintf(stderr, "quarrel: %s: bad value '%s' (expected a finite number)\n", opt, s);
        return 2;
    }
    *out = v;
    return 0;
}

int app_parse_u64(const char *opt, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    if (*s == '-') {
        fprintf(stderr, "quarrel: %s: bad value '%s' (expected a non-negative integer)\n", opt, s);
        return 2;
    }
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end) {
        fprintf(stderr, "quarrel: %s: bad value '%s' (expected a non-negative integer)\n", opt, s);
        return 2;
    }
    *out = v;
    return 0;
}

int app_parse_split(const char *opt, const char *s, float out[16]) {
    memset(out, 0, 16 * sizeof(float));
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end = NULL;
        errno = 0;
        const float v = strtof(p, &end);
        if (errno || end == p || !(v >= 0.0f) || n == 16 || (*end && *end != ',')) {
            fprintf(stderr, "quarrel: %s: bad value '%s' (expected up to 16 non-negative numbers, comma-separated)\n",
                    opt, s);
            return 2;
        }
        out[n++] = v;
        p = *end ? end + 1 : end;
    }
    return 0;
}

int app_engine_opt(int id, const char *arg, app_engine_opts *o) {
    switch (id) {
    case 1100:
        if (!strcmp(arg, "auto")) o->backend = QR_BACKEND_AUTO;
        else if (!strcmp(arg, "cpu")) o->backend = QR_BACKEND_CPU;
        else if (!strcmp(arg, "cuda")) o->backend = QR_BACKEND_CUDA;
        else {
            fprintf(stderr, "quarrel: --backend: bad value '%s' (expected cpu, cuda or auto)\n", arg);
            return 2;
        }
        return 0;
    case 1101: return app_parse_int("--gpu", arg, 0, 1023, &o->gpu);
    case 1104: return app_parse_int("--tp", arg, 1, 16, &o->tp);
    case 1105:
        if (!strcmp(arg, "tensor") || !strcmp(arg, "row")) o->split_mode = QR_SPLIT_TENSOR;
        else if (!strcmp(arg, "layer")) o->split_mode = QR_SPLIT_LAYER;
        else {
            fprintf(stderr, "quarrel: --split-mode: bad value '%s' (expected tensor or layer)\n", arg);
            return 2;
        }
        return 0;
    case 1106: return app_parse_split("--tensor-split", arg, o->tensor_split);
    case 1107: o->tp_addr = arg; return 0;
    case 1108: return app_parse_int("--tp-rank", arg, 0, 15, &o->tp_rank);
    case 1102:
    case 1103: {
        const int t = qr_cache_type_from_name(arg);
        if (t < 0) {
            fprintf(stderr, "quarrel: --cache-type-%c: bad value '%s' (expected f16, bf16, q8_0, q4_0 or f32)\n",
                    id == 1102 ? 'k' : 'v', arg);
            return 2;
        }
        *(id == 1102 ? &o->type_k : &o->type_v) = (qr_cache_type)t;
        return 0;
    }
    default: return -1;
    }
}

int app_sampler_opt(int id, const char *arg, qr_sampler_chain_params *p) {
    switch (id) {
    case 1000: return app_parse_float("--temp", arg, &p->temperature);
    case 1001: return app_parse_int("--top-k", arg, -1000000, 1000000000, &p->top_k);
    case 1002: return app_parse_float("--top-p", arg, &p->top_p);
    case 1003: return app_parse_float("--min-p", arg, &p->min_p);
    case 1004: return app_parse_float("--repeat-penalty", arg, &p->repeat_penalty);
    case 1005: return app_parse_int("--repeat-last-n", arg, -1000000, 1000000000, &p->penalty_last_n);
    case 1006: return app_parse_float("--presence-penalty", arg, &p->presence_penalty);
    case 1007: return app_parse_float("--frequency-penalty", arg, &p->frequency_penalty);
    case 1008: return app_parse_u64("--seed", arg, &p->seed);
    default: return -1;
    }
}
