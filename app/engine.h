/* engine.h — what the generation commands (run, chat, logits, perplexity, bench) share: opening a
 * model with its tokenizer and a context, reading prompt files / id lists, chat rendering, and the
 * sampler options; and a clock for the commands that time things. Built on the public API
 * (quarrel.h) only. Every function prints its own error to stderr and returns an exit code
 * (0 ok, 1 runtime failure, 2 usage error). */
#ifndef QR_APP_ENGINE_H
#define QR_APP_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quarrel.h"

typedef struct app_engine {
    char path[4096];   /* resolved GGUF path */
    qr_model *model;
    qr_context *ctx;
    qr_tokenizer *tok;
    qr_model *draft_model; /* --draft-model, or NULL */
    qr_spec *spec;     /* speculative decoding (--spec / --draft-model), or NULL */
    double load_ms;    /* model + tokenizer + context creation, wall clock */
} app_engine;

typedef struct app_engine_opts {
    const char *model; /* path or Ollama name */
    int32_t n_threads; /* <= 0: all CPUs */
    int32_t n_ctx;     /* 0: min(training context, QR_N_CTX_DEFAULT) */
    int32_t n_batch;   /* 0: 512 */
    int32_t n_seq_max; /* 0: 1 */
    qr_backend_kind backend; /* --backend: auto (0, default), cpu, cuda */
    int32_t gpu;       /* --gpu: CUDA device index (default 0) */
    int32_t tp;        /* --tp: tensor-parallel ranks (0 / 1: none) */
    qr_split_mode split_mode; /* --split-mode: tensor (default) or layer */
    float tensor_split[16];   /* --tensor-split: each rank's share of the layers (all 0: even) */
    const char *tp_addr;      /* --tp-addr HOST:PORT: ranks in several processes meet there (NULL: one process) */
    int32_t tp_rank;          /* --tp-rank: this process's rank (>= 1: a worker; app_engine_open serves and exits) */
    qr_cache_type type_k, type_v; /* --cache-type-k / --cache-type-v (default f16) */
    /* speculative decoding (APP_SPEC_LONGOPTS): spec_on makes e->spec with spec (kind, draft_*; start from
     * qr_spec_default_params()), loading draft_path (path or Ollama name) as its draft model with the
     * target's backend options */
    bool spec_on;
    qr_spec_params spec;
    const char *draft_path;
} app_engine_opts;

/* Opens the model, tokenizer and context. When an auto backend falls back to the CPU although this
 * build has CUDA, prints one line to stderr ("quarrel: no CUDA device found, using the CPU"). */
int app_engine_open(app_engine *e, const app_engine_opts *o);
void app_engine_close(app_engine *e);

/* Monotonic time in seconds. */
double app_time_s(void);

/* One progress line on stderr, redrawn in place: "label [#####.....] done/total unit" (the caller draws
 * only when stderr is a terminal, and clears the line with "\r\033[K" when done). */
void app_progress_draw(const char *label, uint64_t done, uint64_t total, const char *unit);

/* Tokenizes text; *ids is malloc'd (caller frees). */
int app_tokenize(const app_engine *e, const char *text, size_t len, bool add_special, bool parse_special,
                 int32_t **ids, size_t *n);
/* Reads a whole file into a malloc'd NUL-terminated buffer. */
int app_read_file(const char *path, char **buf, size_t *len);
/* Reads a JSON array of token ids; each must be in [0, n_vocab) (n_vocab <= 0: no check). */
int app_read_ids_json(const char *path, int32_t n_vocab, int32_t **ids, size_t *n);
/* Renders the model's chat template for [system,] user with add_generation_prompt; *out malloc'd. */
int app_render_chat(const app_engine *e, const char *system, const char *user, char **out);
/* Renders a JSON array of {"role", "content"} messages (jansson json_t *) with add_generation_prompt. */
int app_render_messages(const app_engine *e, const void *messages_json, char **out);

/* Parses a number option strictly; prints "OPT: bad value" and returns 2 on failure. */
int app_parse_int(const char *opt, const char *s, long min, long max, int32_t *out);
int app_parse_float(const char *opt, const char *s, float *out);
int app_parse_u64(const char *opt, const char *s, uint64_t *out);
/* Parses up to 16 comma-separated non-negative numbers (--tensor-split) into out (the rest 0); 0 or 2. */
int app_parse_split(const char *opt, const char *s, float out[16]);

/* Sampler options shared by run and chat: long option ids >= 1000. app_sampler_opt handles one
 * (returns 0, or 2 on a bad value, or -1 when the id is not a sampler option). */
#define APP_SAMPLER_LONGOPTS                                                                             \
    {"temp", 1, 0, 1000}, {"top-k", 1, 0, 1001}, {"top-p", 1, 0, 1002}, {"min-p", 1, 0, 1003},          \
        {"repeat-penalty", 1, 0, 1004}, {"repeat-last-n", 1, 0, 1005}, {"presence-penalty", 1, 0, 1006}, \
        {"frequency-penalty", 1, 0, 1007}, {"seed", 1, 0, 1008}
int app_sampler_opt(int id, const char *arg, qr_sampler_chain_params *p);
#define APP_SAMPLER_HELP                                                                                 \
    "  --temp T             temperature (0 = greedy; default 0.8)\n"                                    \
    "  --top-k K            top-k (0 = off; default 40)\n"                                              \
    "  --top-p P            top-p in (0,1] (default 0.95)\n"                                            \
    "  --min-p P            min-p in [0,1] (default 0.05)\n"                                            \
    "  --repeat-penalty R   repetition penalty (1 = off)\n"                                             \
    "  --repeat-last-n N    penalty window (default 64)\n"                                              \
    "  --presence-penalty X, --frequency-penalty X\n"                                                   \
    "  --seed S             sampler seed (default random)\n"

/* Backend options shared by run, chat, logits, perplexity and bench: long option ids 1100..1103.
 * app_engine_opt handles one (returns 0, or 2 on a bad value, or -1 when the id is not one of them). */
#define APP_ENGINE_LONGOPTS \
    {"backend", 1, 0, 1100}, {"gpu", 1, 0, 1101}, {"cache-type-k", 1, 0, 1102}, {"cache-type-v", 1, 0, 1103}, \
        {"tp", 1, 0, 1104}, {"split-mode", 1, 0, 1105}, {"tensor-split", 1, 0, 1106}, {"tp-addr", 1, 0, 1107}, \
        {"tp-rank", 1, 0, 1108}
int app_engine_opt(int id, const char *arg, app_engine_opts *o);
#define APP_ENGINE_HELP                                                                                  \
    "  --backend B          cpu, cuda or auto (default auto: CUDA when a GPU is usable, else the CPU)\n" \
    "  --gpu N              CUDA device index (default 0)\n"                                          \
    "  --tp N               tensor parallelism over N ranks: GPUs gpu..gpu+N-1 (NCCL), or N CPU ranks\n" \
    "  --split-mode M       with --tp: tensor (default: every layer split, all-reduces) or layer (whole\n" \
    "                       layers a rank, run in turn: GPUs without a fast link)\n"                 \
    "  --tensor-split A,B.. --split-mode layer: the ranks' shares of the layers (default even)\n"      \
    "  --tp-addr HOST:PORT  with --tp: one rank a process (this host or several), meeting there; this\n" \
    "                       process is rank 0 and runs the model, `quarrel worker` the other ranks\n"  \
    "  --tp-rank R          with --tp-addr: this process's rank (>= 1: serve rank R, like quarrel worker)\n" \
    "  --cache-type-k T, --cache-type-v T\n"                                                          \
    "                       KV cache storage of K / V: f16 (default), bf16, q8_0, q4_0, f32\n"

/* Speculative decoding options of run, chat and serve: long option ids 1200..1205. app_spec_opt handles one
 * (returns 0, or 2 on a bad value, or -1 when the id is not one of them). */
#define APP_SPEC_LONGOPTS                                                                                 \
    {"spec", 1, 0, 1200}, {"draft-model", 1, 0, 1201}, {"draft-max", 1, 0, 1202}, {"draft-min", 1, 0, 1203}, \
        {"draft-p-min", 1, 0, 1204}, {"spec-ngram", 1, 0, 1205}
int app_spec_opt(int id, const char *arg, app_engine_opts *o);
#define APP_SPEC_HELP                                                                                    \
    "  --spec KIND          speculative decoding: ngram (prompt lookup), draft (needs --draft-model),\n"  \
    "                       eagle3 (--draft-model is an EAGLE-3 head for the target), none\n"          \
    "  --draft-model MODEL  draft model with the target's vocabulary, or an EAGLE-3 head (implies --spec\n" \
    "                       draft, or eagle3 for a head)\n"                                            \
    "  --draft-max N        most tokens drafted per step (default 16)\n"                                \
    "  --draft-min N        verify only drafts of at least N tokens (default 0)\n"                      \
    "  --draft-p-min P      draft model / head: stop drafting below this probability (default 0.75)\n"  \
    "  --spec-ngram MIN:MAX n-gram sizes of the prompt lookup (default 2:4)\n"
/* Loads the draft model (when o->draft_path) and makes e->spec when o->spec_on; called by app_engine_open. */
int app_spec_open(app_engine *e, const app_engine_opts *o);
/* Checks the speculative options once all are read (a draft kind needs --draft-model); 0 or 2. */
int app_spec_check(const app_engine_opts *o);

#endif /* QR_APP_ENGINE_H */
