/* knobs.c — the table of environment switches and its one-time, thread-safe reading (knobs.h). */
#define _POSIX_C_SOURCE 200809L
#include "util/knobs.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/util.h"

const qr_knob_def qr_knob_defs[QR_KNOB_COUNT] = {
    [QR_KNOB_SIMD] = {"QUARREL_SIMD", QR_KNOB_CHOICE, "auto", 0, 0, "auto|scalar", "quant (kernel choice), CPU backend",
                      "`scalar`: the scalar reference kernels only (diagnosis; much slower); `auto`: the best "
                      "instruction set the CPU has (as `QUARREL_CPU_ISA`)"},
    [QR_KNOB_CPU_ISA] = {"QUARREL_CPU_ISA", QR_KNOB_CHOICE, "auto", 0, 0, "auto|avx512|avx2|scalar",
                         "quant (kernel choice), CPU backend",
                         "the CPU kernels' instruction set: `auto` the best the CPU has (AVX-512 with VNNI, else "
                         "AVX2); `avx2` the AVX2 kernels even on an AVX-512 CPU; `avx512` the AVX-512 kernels where "
                         "the CPU has them (else `auto`); `scalar` the reference kernels and ops only. Every level "
                         "computes llama.cpp's AVX2 build's float operations in its order (docs/performance.md, "
                         "\"AVX-512 kernels\")"},
    [QR_KNOB_TILE] = {"QUARREL_TILE", QR_KNOB_DIMS, "3x4", 1, QR_KNOB_TILE_MAX, NULL, "CPU backend",
                      "prefill GEMM tile shape, weight rows x token rows (tuning experiments; 3x4 measured best or "
                      "near it for Q4_1 / Q5_0 rows of 576..640 on the AVX2 host); unset on an AVX-512 host, prefill "
                      "tiles take 4 weight rows for every type but Q4_1 (measured faster there), and at the AVX2 level Q8_0 "
                      "tiles take 2 (register pressure)"},
    [QR_KNOB_SSM_SCAN] = {"QUARREL_SSM_SCAN", QR_KNOB_CHOICE, "rec", 0, 0, "rec|ssd|recurrent", "CPU backend (Mamba2)",
                          "`ssd`: prefill runs of >= 32 rows of one sequence in the chunked SSD form; `rec` "
                          "(or `recurrent`): the recurrence row by row, ggml's order bit for bit (2.5x faster "
                          "on the CPU)"},
    [QR_KNOB_HOST_PROF] = {"QUARREL_HOST_PROF", QR_KNOB_BOOL, "0", 0, 0, NULL, "contexts (any backend), the scheduler",
                           "prints, when a context is freed, where `qr_decode`'s host time went per pass (prepare, "
                           "set_batch, forward or graph launch, error check, logits read, commit); the server's "
                           "scheduler prints every 256 steps where a step's time went (plan, decode, sampling, "
                           "streaming) and the start-to-start time of decode-only steps that follow each other; "
                           "the CUDA backend prints every 256 graph replays the host time of a launch"},
    [QR_KNOB_GRAPH_MAX_ROWS] = {"QUARREL_GRAPH_MAX_ROWS", QR_KNOB_INT, "256", 1, 4096, NULL,
                                "contexts (backends with graphs: CUDA)",
                                "batched decode steps (one row per sequence) of at most this many rows run as "
                                "recorded graphs, one per (rows, outputs, block-table shape), as every pass of up to "
                                "8 rows does; larger steps and prompt passes run op by op"},
    [QR_KNOB_SAMPLE_THREADS] = {"QUARREL_SAMPLE_THREADS", QR_KNOB_INT, "0", 0, 64, NULL, "the scheduler (serve)",
                                "threads that sample a step's rows at once (0: up to 8, the online CPUs; 1: the "
                                "scheduler thread alone, row after row)"},
    [QR_KNOB_SAMPLE_TOPK] = {"QUARREL_SAMPLE_TOPK", QR_KNOB_BOOL, "1", 0, 0, NULL, "the scheduler (serve)",
                             "a step whose rows all sample greedily or with a top-k under 64 (no grammar, bias, "
                             "penalties or logprobs) brings back each row's best candidates found on the GPU "
                             "instead of its logits (CUDA; 0: every row's logits, scanned on the host)"},
    [QR_KNOB_STEP_TOKENS] = {"QUARREL_STEP_TOKENS", QR_KNOB_INT, "0", 0, 65536, NULL, "the scheduler (serve)",
                             "rows a scheduler step may take in all (decode rows first, then prompt chunks); 0: 512, "
                             "or --parallel when that is larger"},
    [QR_KNOB_SCHED_DISPATCH] = {"QUARREL_SCHED_DISPATCH", QR_KNOB_INT, "-1", -1, 1, NULL, "the scheduler (serve)",
                                "1: the requests' events (tokens, ends) reach their callbacks on a thread of their own, "
                                "in order, while the scheduler runs the next step; 0: on the scheduler thread, between "
                                "steps; -1: 1 where the model runs on a GPU, 0 on the CPU (whose compute threads "
                                "the dispatcher would compete with)"},
    [QR_KNOB_OLLAMA_MODELS] = {"OLLAMA_MODELS", QR_KNOB_STRING, "", 0, 0, NULL, "model name resolution",
                               "the Ollama store searched for names like `smollm2:135m` (unset: "
                               "`$HOME/.ollama/models`)"},
    [QR_KNOB_MODELS_DIR] = {"QUARREL_MODELS_DIR", QR_KNOB_STRING, "", 0, 0, NULL, "model name resolution",
                            "the model directory: short names (`smollm2` for `SmolLM2-135M-Instruct.Q4_1.gguf`) "
                            "resolve against its GGUF files, `quarrel list` lists them (unset: "
                            "`$HOME/.cache/quarrel/models`, where setup puts the test models)"},
    [QR_KNOB_HOME] = {"HOME", QR_KNOB_STRING, "", 0, 0, NULL, "model name resolution",
                      "the parent of the default Ollama store and of the default model directory (unset: the "
                      "current directory)"},
    [QR_KNOB_FLIGHT_KEY] = {"QUARREL_FLIGHT_KEY", QR_KNOB_STRING, "", 0, 0, NULL, "`quarrel push` / `search`",
                            "the API key sent as `authorization: Bearer KEY` on every Flight call when "
                            "`--flight-key` is not given (never logged)"},
    [QR_KNOB_TP_TIMEOUT] = {"QUARREL_TP_TIMEOUT", QR_KNOB_INT, "300", 1, 86400, NULL,
                            "tensor parallelism across processes (`--tp-addr`)",
                            "seconds the driver waits for its ranks to join (and a worker for the driver), and "
                            "any rank for a reply or an all-reduce from another"},
    [QR_KNOB_CPU_REPACK] = {"QUARREL_CPU_REPACK", QR_KNOB_BOOL, "1", 0, 0, NULL, "CPU backend (weight loading)",
                            "Q4_K, Q4_0 (AVX2, AVX-512), Q8_0, Q4_1, Q5_0 (AVX-512) matmul weights are copied at load time into "
                            "groups of 8 / 16 interleaved rows (rows in the vector lanes; same results, faster); 0: the "
                            "file's layout"},
    [QR_KNOB_CPU_PREFETCH] = {"QUARREL_CPU_PREFETCH", QR_KNOB_INT, "-1", -1, 1 << 20, NULL, "CPU backend (matmuls)",
                              "how far ahead (bytes) a matmul chunk prefetches its weight rows into the cache; 0: no "
                              "software prefetch (the hardware prefetcher alone); -1 (default): 4096, or 0 on AMD "
                              "family 0x19 with AVX-512 (Zen 4)"},
    [QR_KNOB_SPEC_TRACE] = {"QUARREL_SPEC_TRACE", QR_KNOB_BOOL, "0", 0, 0, NULL, "speculative decoding (spec.c)",
                            "prints every draft on stderr (`spec: seq S at P: drafted t1 t2 ...`): comparing two "
                            "backends' drafts checks a drafter (an EAGLE-3 head on CUDA against the CPU)"},
};

static qr_knob_value g_values[QR_KNOB_COUNT]; /* written once under g_once, read-only afterwards */
static bool g_set[QR_KNOB_COUNT];              /* the environment gave the knob a valid value */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* A decimal int32 that is the whole of [s, end) (end NULL: the whole string), into *v. */
static bool parse_int(const char *s, const char *end, int32_t *v) {
    if (s == end || !*s) return false;
    errno = 0;
    char *stop;
    const long x = strtol(s, &stop, 10);
    if (errno || stop == s || (end ? stop != end : *stop != 0) || x < INT32_MIN || x > INT32_MAX) return false;
    *v = (int32_t)x;
    return true;
}

/* The position of name in the '|'-separated list, or -1. */
static int32_t choice_index(const char *choices, const char *name) {
    const size_t n = strlen(name);
    int32_t i = 0;
    for (const char *p = choices; p; i++) {
        const char *bar = strchr(p, '|');
        const size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0) return i;
        p = bar ? bar + 1 : NULL;
    }
    return -1;
}

/* Parses text (not NULL) into *v; false with why when it is not a valid value of d. */
static bool parse_value(const qr_knob_def *d, const char *text, qr_knob_value *v, char *why, size_t why_len) {
    switch (d->type) {
    case QR_KNOB_BOOL: {
        static const char *const on[] = {"1", "true", "yes", "on"}, *const off[] = {"0", "false", "no", "off"};
        for (int k = 0; k < 4; k++) {
            if (!strcasecmp(text, on[k])) return v->i[0] = 1, true;
            if (!strcasecmp(text, off[k])) return v->i[0] = 0, true;
        }
        qr_errf(why, why_len, QR_ERR_INVALID_ARG, "not a boolean (1/0, true/false, yes/no, on/off)");
        return false;
    }
    case QR_KNOB_INT:
        if (!parse_int(text, NULL, &v->i[0]) || v->i[0] < d->lo || v->i[0] > d->hi) {
            qr_errf(why, why_len, QR_ERR_INVALID_ARG, "not an integer in [%d, %d]", d->lo, d->hi);
            return false;
        }
        return true;
    case QR_KNOB_CHOICE:
        if ((v->i[0] = choice_index(d->choices, text)) < 0) {
            qr_errf(why, why_len, QR_ERR_INVALID_ARG, "not one of %s", d->choices);
            return false;
        }
        return true;
    case QR_KNOB_DIMS: {
        const char *x = strchr(text, 'x');
        if (!x || !parse_int(text, x, &v->i[0]) || !parse_int(x + 1, NULL, &v->i[1]) || v->i[0] < d->lo ||
            v->i[0] > d->hi || v->i[1] < d->lo || v->i[1] > d->hi) {
            qr_errf(why, why_len, QR_ERR_INVALID_ARG, "not AxB with A and B in [%d, %d]", d->lo, d->hi);
            return false;
        }
        return true;
    }
    case QR_KNOB_STRING: v->s = text; return true;
    }
    qr_errf(why, why_len, QR_ERR_INTERNAL, "unknown knob type %d", (int)d->type);
    return false;
}

bool qr_knob_parse(const qr_knob_def *d, const char *text, qr_knob_value *out, char *why, size_t why_len) {
    qr_knob_value def = {{0, 0}, NULL};
    char ignored[160];
    if (!parse_value(d, d->def, &def, ignored, sizeof ignored)) def.s = NULL; /* a table bug: unit-tested */
    *out = def;
    if (!text || !*text) return true;
    qr_knob_value v = def;
    if (!parse_value(d, text, &v, why, why_len)) return false;
    *out = v;
    return true;
}

/* Reads every knob from the environment (once). STRING values are copied: the environment may change. */
static void load_all(void) {
    for (int k = 0; k < QR_KNOB_COUNT; k++) {
        const qr_knob_def *d = &qr_knob_defs[k];
        const char *text = getenv(d->name);
        char why[160];
        if (!qr_knob_parse(d, text, &g_values[k], why, sizeof why))
            qr_log(QR_LOG_WARN, "%s=%s ignored: %s; using the default %s", d->name, text, why, d->def);
        else g_set[k] = text && *text;
        if (d->type == QR_KNOB_STRING) {
            char *copy = strdup(g_values[k].s ? g_values[k].s : "");
            g_values[k].s = copy ? copy : d->def;
        }
    }
}

/* The loaded value of k. */
static const qr_knob_value *value(qr_knob k) {
    pthread_once(&g_once, load_all);
    return &g_values[k];
}

int32_t qr_knob_int(qr_knob k) { return value(k)->i[0]; }

bool qr_knob_is_set(qr_knob k) {
    value(k);
    return g_set[k];
}

void qr_knob_dims(qr_knob k, int32_t *a, int32_t *b) {
    const qr_knob_value *v = value(k);
    *a = v->i[0];
    *b = v->i[1];
}

const char *qr_knob_str(qr_knob k) {
    const char *s = value(k)->s;
    return s ? s : "";
}
