/* cmd_serve.c — `quarrel serve`: options from flags, QUARREL_* environment variables and a config
 * file (flags > environment > file > defaults), then the server until SIGTERM/SIGINT, which drains
 * in-flight requests (up to --drain seconds) before exiting. */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "commands.h"
#include "engine.h"
#include "internal.h" /* the HTTP server */

/* One option: flag name (also the config key and, upper-cased with '_', the QUARREL_ variable). */
typedef struct sopt {
    const char *name;
    int has_arg;
    const char *help;
} sopt;

static const sopt opts[] = {
    {"model", 1, "GGUF path or Ollama name; repeat to load several (env QUARREL_MODEL: comma-separated)"},
    {"host", 1, "listen address (default 127.0.0.1)"},
    {"port", 1, "listen port (default 8080; 0 = any free port)"},
    {"parallel", 1, "sequences decoded together per model (default 4; on a GPU up to 64, as its free memory holds "
                    "64 x 4096 tokens of KV cache)"},
    {"ctx", 1, "KV cache tokens per model, shared by its sequences (default: what --kv-mem-mb holds)"},
    {"cache-type-k", 1, "KV cache storage of K: f16 (default), bf16, q8_0, q4_0, f32"},
    {"cache-type-v", 1, "KV cache storage of V: f16 (default), bf16, q8_0, q4_0, f32"},
    {"kv-mem-mb", 1, "KV cache memory per model in MiB (default: 4096 x parallel f16 tokens, at most 32768; without "
                     "--ctx / --parallel a smaller cache type gets more tokens and sequences: tokens / 4096)"},
    {"threads", 1, "CPU threads (default: all)"},
    {"api-key-db", 1, "SQLite key store (quarrel keys ...); without it auth is off"},
    {"cors-origin", 1, "allowed CORS origin (repeatable, comma-separated, * = any); also the Origins /ws accepts"},
    {"allowed-host", 1, "Host name accepted besides the listen address and localhost (repeatable, comma-separated, * = any)"},
    {"max-queue", 1, "waiting requests per model before 503 OVERLOADED (default 64)"},
    {"max-body", 1, "request body limit in bytes (default 4194304)"},
    {"max-json-depth", 1, "JSON nesting limit (default 64)"},
    {"max-header-bytes", 1, "request header limit in bytes (default 16384)"},
    {"io-timeout-ms", 1, "time for a request's headers and body to arrive (default 10000)"},
    {"request-timeout", 1, "generation timeout in seconds (default 300)"},
    {"rate-rpm", 1, "per-key requests per minute (default 0 = unlimited)"},
    {"rate-tpm", 1, "per-key tokens per minute (default 0 = unlimited)"},
    {"mem-budget-mb", 1, "memory for loaded models in MiB (default 80% of RAM)"},
    {"keep-alive", 1, "seconds an on-demand model stays loaded when idle (default 300; -1 = forever)"},
    {"no-load", 0, "never load models that were not given with -m"},
    {"model-dir", 1, "directory searched for NAME.gguf when a request names an unknown model"},
    {"prefill-chunk", 1, "prompt tokens per sequence per scheduler step (default 256)"},
    {"no-prefix-cache", 0, "disable prefix caching"},
    {"http-threads", 1, "HTTP worker threads = concurrent connections (default 256)"},
    {"log-prompts", 0, "include request bodies (prompts) in the logs"},
    {"drain", 1, "seconds to wait for in-flight requests on SIGTERM (default 30)"},
    {"max-tokens", 1, "cap on generated tokens per request (default 0 = none)"},
    {"spec", 1, "speculative decoding: ngram (prompt lookup), draft (needs --draft-model), eagle3 (--draft-model is an "
                "EAGLE-3 head) or none (default); "
                "per request \"speculative\": false turns it off"},
    {"draft-model", 1, "draft model with the models' vocabulary, or an EAGLE-3 head (implies --spec draft / eagle3)"},
    {"draft-max", 1, "most tokens drafted per step (default 16)"},
    {"draft-min", 1, "verify only drafts of at least N tokens (default 0)"},
    {"draft-p-min", 1, "draft model: stop drafting below this probability (default 0.75)"},
    {"spec-ngram", 1, "n-gram sizes MIN:MAX of the prompt lookup (default 2:4)"},
    {"backend", 1, "cpu, cuda or auto (default auto)"},
    {"gpu", 1, "CUDA device index (default 0)"},
    {"tp", 1, "tensor parallelism over N ranks: GPUs gpu..gpu+N-1 joined by NCCL, or N CPU ranks (default 1)"},
    {"split-mode", 1, "with --tp: tensor (default) or layer (whole layers a rank, run in turn)"},
    {"tp-addr", 1, "with --tp: one rank a process, meeting at HOST:PORT (this server is rank 0; start "
                   "`quarrel worker` for ranks 1..N-1); the startup model only"},
    {"tensor-split", 1, "with --split-mode layer: the ranks' shares of the layers, comma-separated (default even)"},
    {"config", 1, "config file: 'key = value' lines with the option names above"},
};
#define N_OPTS (int)(sizeof opts / sizeof opts[0])

typedef struct serve_state {
    qr_server_config cfg;
    char cors[4096];
    char allowed_hosts[2048];
    char *strs[256]; /* strdup'd values (freed at exit) */
    int n_strs;
} serve_state;

static const char *keep(serve_state *st, const char *v) {
    if (st->n_strs == 256) return v;
    return st->strs[st->n_strs++] = strdup(v);
}

static int num(const char *name, const char *v, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (errno || end == v || *end || d < lo || d > hi) {
        fprintf(stderr, "quarrel serve: --%s: bad value '%s' (expected a number in [%g, %g])\n", name, v, lo, hi);
        return 2;
    }
    *out = d;
    return 0;
}

/* Appends v to the comma-separated list in buf[cap] (a repeatable option); returns buf. */
static const char *append_list(char *buf, size_t cap, const char *v) {
    if (buf[0]) strncat(buf, ",", cap - strlen(buf) - 1);
    strncat(buf, v, cap - strlen(buf) - 1);
    return buf;
}

/* Applies one option (from any source). Returns 0 or 2. */
static int apply(serve_state *st, const char *name, const char *v) {
    qr_server_config *c = &st->cfg;
    double d;
    int rc = 0;
#define NUM(lo, hi, field, type)                                  \
    do {                                                          \
        if ((rc = num(name, v, lo, hi, &d)) == 0) field = (type)d; \
    } while (0)
    if (!strcmp(name, "model")) {
        /* comma-separated in the environment; one per flag */
        char *dup = strdup(v), *save = NULL;
        for (char *t = strtok_r(dup, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            if (c->n_models == QR_SERVER_MAX_MODELS) {
                fprintf(stderr, "quarrel serve: at most %d models\n", QR_SERVER_MAX_MODELS);
                free(dup);
                return 2;
            }
            c->models[c->n_models++] = keep(st, t);
        }
        free(dup);
    } else if (!strcmp(name, "host")) c->host = keep(st, v);
    else if (!strcmp(name, "port")) NUM(0, 65535, c->port, int32_t);
    else if (!strcmp(name, "parallel")) NUM(1, 256, c->parallel, int32_t);
    else if (!strcmp(name, "ctx")) NUM(64, 1 << 22, c->ctx, int32_t);
    else if (!strcmp(name, "threads")) NUM(0, 1024, c->n_threads, int32_t);
    else if (!strcmp(name, "cache-type-k") || !strcmp(name, "cache-type-v")) {
        const int t = qr_cache_type_from_name(v);
        if (t < 0) {
            fprintf(stderr, "quarrel serve: --%s: bad value '%s' (expected f16, bf16, q8_0, q4_0 or f32)\n", name, v);
            return 2;
        }
        *(name[11] == 'k' ? &c->cache_type_k : &c->cache_type_v) = (qr_cache_type)t;
    } else if (!strcmp(name, "kv-mem-mb")) {
        if ((rc = num(name, v, 1, 1e9, &d)) == 0) c->kv_mem_bytes = (uint64_t)(d * 1048576.0);
    }
    else if (!strcmp(name, "api-key-db")) c->api_key_db = keep(st, v);
    else if (!strcmp(name, "cors-origin")) c->cors_origins = append_list(st->cors, sizeof st->cors, v);
    else if (!strcmp(name, "allowed-host")) c->allowed_hosts = append_list(st->allowed_hosts, sizeof st->allowed_hosts, v); else if (!strcmp(name, "max-queue")) NUM(1, 1 << 20, c->max_queue, int32_t);
    else if (!strcmp(name, "max-body")) NUM(64, 1ull << 32, c->max_body, size_t);
    else if (!strcmp(name, "max-json-depth")) NUM(2, 10000, c->max_json_depth, int32_t);
    else if (!strcmp(name, "max-header-bytes")) NUM(1024, 1 << 20, c->max_header_bytes, int32_t);
    else if (!strcmp(name, "io-timeout-ms")) NUM(100, 3600000, c->io_timeout_ms, int32_t);
    else if (!strcmp(name, "request-timeout")) NUM(0.01, 86400, c->request_timeout_s, double);
    else if (!strcmp(name, "rate-rpm")) NUM(0, 1e9, c->rate_rpm, double);
    else if (!strcmp(name, "rate-tpm")) NUM(0, 1e12, c->rate_tpm, double);
    else if (!strcmp(name, "mem-budget-mb")) {
        if ((rc = num(name, v, 1, 1e9, &d)) == 0) c->mem_budget = (uint64_t)(d * 1048576.0);
    } else if (!strcmp(name, "keep-alive")) NUM(-1, 1e9, c->keep_alive_s, double);
    else if (!strcmp(name, "no-load")) c->allow_load = false;
    else if (!strcmp(name, "model-dir")) c->model_dir = keep(st, v);
    else if (!strcmp(name, "prefill-chunk")) NUM(1, 65536, c->prefill_chunk, int32_t);
    else if (!strcmp(name, "no-prefix-cache")) c->no_prefix_cache = true;
    else if (!strcmp(name, "http-threads")) NUM(4, 4096, c->http_threads, int32_t);
    else if (!strcmp(name, "log-prompts")) c->log_prompts = true;
    else if (!strcmp(name, "drain")) NUM(0, 3600, c->drain_s, double);
    else if (!strcmp(name, "max-tokens")) NUM(0, 1 << 24, c->max_tokens, int32_t);
    else if (!strcmp(name, "backend")) {
        if (!strcmp(v, "cpu")) c->backend = QR_BACKEND_CPU;
        else if (!strcmp(v, "cuda")) c->backend = QR_BACKEND_CUDA;
        else if (!strcmp(v, "auto")) c->backend = QR_BACKEND_AUTO;
        else {
            fprintf(stderr, "quarrel serve: --backend: expected cpu, cuda or auto\n");
            rc = 2;
        }
    } else if (!strcmp(name, "gpu")) NUM(0, 64, c->gpu, int32_t);
    else if (!strcmp(name, "tp")) NUM(1, 16, c->tp, int32_t);
    else if (!strcmp(name, "tp-addr")) c->tp_addr = keep(st, v);
    else if (!strcmp(name, "split-mode")) {
        if (!strcmp(v, "tensor") || !strcmp(v, "row")) c->split_mode = QR_SPLIT_TENSOR;
        else if (!strcmp(v, "layer")) c->split_mode = QR_SPLIT_LAYER;
        else {
            fprintf(stderr, "quarrel serve: --split-mode: expected tensor or layer\n");
            rc = 2;
        }
    } else if (!strcmp(name, "tensor-split")) rc = app_parse_split("--tensor-split", v, c->tensor_split);
    else if (!strncmp(name, "spec", 4) || !strncmp(name, "draft-", 6)) {
        static const char *const names[] = {"spec", "draft-model", "draft-max", "draft-min", "draft-p-min", "spec-ngram"};
        int id = -1;
        for (int i = 0; i < 6; i++)
            if (!strcmp(name, names[i])) id = 1200 + i;
        app_engine_opts eo = {.spec_on = c->spec_on, .spec = c->spec, .draft_path = c->draft_path};
        if (id < 0) {
            fprintf(stderr, "quarrel serve: unknown option '%s'\n", name);
            rc = 2;
        } else if ((rc = app_spec_opt(id, id == 1201 ? keep(st, v) : v, &eo)) == 0) {
            c->spec_on = eo.spec_on;
            c->spec = eo.spec;
            c->draft_path = eo.draft_path;
        }
    } else {
        fprintf(stderr, "quarrel serve: unknown option '%s'\n", name);
        rc = 2;
    }
#undef NUM
    return rc;
}

static bool truthy(const char *v) { return !strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes"); }

static int load_config(serve_state *st, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "quarrel serve: %s: %s\n", path, strerror(errno));
        return 2;
    }
    char line[4096];
    int rc = 0, ln = 0;
    while (!rc && fgets(line, sizeof line, f)) {
        ln++;
        char *p = line;
        while (isspace((unsigned char)*p)) p++;
        if (!*p || *p == '#') continue;
        char *eq = strchr(p, '=');
        char *end = p + strlen(p);
        while (end > p && isspace((unsigned char)end[-1])) *--end = 0;
        if (!eq) { /* a bare flag: "no-load" */
            rc = apply(st, p, "1");
            continue;
        }
        *eq = 0;
        char *k = p, *v = eq + 1;
        char *ke = eq;
        while (ke > k && isspace((unsigned char)ke[-1])) *--ke = 0;
        while (isspace((unsigned char)*v)) v++;
        for (char *q = k; *q; q++)
            if (*q == '_') *q = '-';
        const sopt *o = NULL;
        for (int i = 0; i < N_OPTS; i++)
            if (!strcmp(opts[i].name, k)) o = &opts[i];
        if (!o || !strcmp(k, "config")) {
            fprintf(stderr, "quarrel serve: %s:%d: unknown key '%s'\n", path, ln, k);
            rc = 2;
        } else if (!o->has_arg) {
            if (truthy(v)) rc = apply(st, k, v);
        } else {
            rc = apply(st, k, v);
        }
    }
    fclose(f);
    return rc;
}

static int load_env(serve_state *st) {
    for (int i = 0; i < N_OPTS; i++) {
        if (!strcmp(opts[i].name, "config")) continue;
        char var[64] = "QUARREL_";
        size_t o = strlen(var);
        for (const char *p = opts[i].name; *p && o + 1 < sizeof var; p++) var[o++] = *p == '-' ? '_' : (char)toupper(*p);
        var[o] = 0;
        const char *v = getenv(var);
        if (!v || !*v) continue;
        if (!opts[i].has_arg && !truthy(v)) continue;
        int rc = apply(st, opts[i].name, v);
        if (rc) {
            fprintf(stderr, "quarrel serve: (from %s)\n", var);
            return rc;
        }
    }
    return 0;
}

static void usage(FILE *f) {
    fprintf(f, "usage: quarrel serve -m MODEL [-m MODEL2 ...] [options]\n"
               "Every option can also come from the environment (QUARREL_PORT=8081, QUARREL_NO_LOAD=1, ...)\n"
               "or from --config FILE ('port = 8081' lines). Flags win over the environment, which wins over\n"
               "the file.\n\n");
    for (int i = 0; i < N_OPTS; i++) fprintf(f, "  --%-18s %s\n", opts[i].name, opts[i].help);
    fprintf(f, "  (-m = --model, -c = --ctx, -t = --threads, -p = --port, -H = --host, -P = --parallel)\n");
}

int cmd_serve(int argc, char **argv) {
    struct option lo[N_OPTS + 2];
    for (int i = 0; i < N_OPTS; i++) lo[i] = (struct option){opts[i].name, opts[i].has_arg, 0, 1000 + i};
    lo[N_OPTS] = (struct option){"help", 0, 0, 'h'};
    lo[N_OPTS + 1] = (struct option){0, 0, 0, 0};
    static serve_state st;
    memset(&st, 0, sizeof st);
    qr_server_config_default(&st.cfg);
    /* pass 1: the config file; pass 2 (after the environment): the flags */
    const char *config = NULL;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "m:c:t:p:H:P:h", lo, NULL)) != -1)
        if (c >= 1000 && !strcmp(opts[c - 1000].name, "config")) config = optarg;
    int rc;
    if (config && (rc = load_config(&st, config))) return rc;
    if ((rc = load_env(&st))) return rc;
    /* flags replace models given by the environment or the file */
    bool flag_models = false;
    optind = 1;
    opterr = 1;
    while ((c = getopt_long(argc, argv, "m:c:t:p:H:P:h", lo, NULL)) != -1) {
        const char *name = NULL;
        switch (c) {
        case 'm': name = "model"; break;
        case 'c': name = "ctx"; break;
        case 't': name = "threads"; break;
        case 'p': name = "port"; break;
        case 'H': name = "host"; break;
        case 'P': name = "parallel"; break;
        case 'h': usage(stdout); return 0;
        default:
            if (c < 1000 || c >= 1000 + N_OPTS) {
                usage(stderr);
                return 2;
            }
            name = opts[c - 1000].name;
        }
        if (!strcmp(name, "config")) continue;
        if (!strcmp(name, "model") && !flag_models) {
            flag_models = true;
            st.cfg.n_models = 0;
        }
        if ((rc = apply(&st, name, optarg ? optarg : "1"))) return rc;
    }
    if (optind < argc) {
        fprintf(stderr, "quarrel serve: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (st.cfg.spec_on && (st.cfg.spec.kind == QR_SPEC_DRAFT || st.cfg.spec.kind == QR_SPEC_EAGLE3) &&
        !st.cfg.draft_path) {
        fprintf(stderr, "quarrel serve: --spec %s needs --draft-model MODEL\n",
                st.cfg.spec.kind == QR_SPEC_DRAFT ? "draft" : "eagle3 (the head)");
        return 2;
    }
    if (st.cfg.n_models == 0 && !st.cfg.allow_load) {
        fprintf(stderr, "quarrel serve: need -m MODEL (or allow on-demand loading)\n");
        usage(stderr);
        return 2;
    }
    /* SIGTERM / SIGINT are taken synchronously by this thread; the server's threads inherit the mask */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    char err[2048];
    qr_server *s = NULL;
    if (qr_server_start(&st.cfg, &s, err, sizeof err) != QR_OK) {
        fprintf(stderr, "quarrel serve: %s\n", err);
        for (int i = 0; i < st.n_strs; i++) free(st.strs[i]);
        return 1;
    }
    int sig = 0;
    sigwait(&set, &sig);
    fprintf(stderr, "{\"level\":\"info\",\"msg\":\"signal, draining\",\"signal\":%d,\"drain_s\":%g}\n", sig,
            st.cfg.drain_s);
    qr_server_stop(s, st.cfg.drain_s);
    for (int i = 0; i < st.n_strs; i++) free(st.strs[i]);
    return 0;
}
