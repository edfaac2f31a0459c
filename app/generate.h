/* generate.h — one generation of `quarrel run` and `quarrel chat`: the prompt prefilled (in chunks with
 * a progress bar when it is long and stderr is a terminal), then qr_generate streaming the text; the
 * timing line. Built on the public API (quarrel.h) only. */
#ifndef QR_APP_GENERATE_H
#define QR_APP_GENERATE_H

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>

#include "engine.h"

#define APP_MAX_STOPS 16

typedef struct gen_opts {
    int32_t n_predict;  /* tokens to generate, >= 1 */
    bool ignore_eos;    /* keep going through end-of-generation tokens */
    bool ids_only;      /* print a JSON array of generated ids instead of text */
    bool quiet;         /* no timing line */
    bool verbose;       /* speculative decoding counters after the timing line */
    const char *stops[APP_MAX_STOPS];
    int32_t n_stops;
    volatile sig_atomic_t *interrupt; /* when not NULL and set (a Ctrl-C): stop, keeping what was generated */
} gen_opts;

typedef struct gen_stats {
    int32_t n_prompt, n_gen;
    double prefill_s, decode_s;
    bool interrupted; /* the last generation was stopped by *interrupt */
    int64_t n_drafted, n_accepted; /* speculative decoding */
} gen_stats;

/* Appends the sequence `ids` (continuing sequence 0 from its current length) and generates up to
 * o->n_predict tokens, streaming text to `out` (or collecting ids). Text generated is appended to *reply
 * when reply != NULL (for chat history). A prompt longer than 256 tokens is prefilled in chunks with a
 * progress bar when stderr is a terminal (the sampler sees the same history either way). Returns an
 * exit code (an interrupt is not an error: stats->interrupted says so). */
int app_generate(app_engine *e, const int32_t *ids, size_t n_ids, qr_sampler_chain *smp, const gen_opts *o, FILE *out,
                 gen_stats *stats, char **reply, size_t *reply_len);

/* The timing line: load, prefill and decode speeds (stderr). */
void app_print_timing(const app_engine *e, const gen_stats *s);

/* The speculative decoding counters (run / chat --verbose), on stderr. */
void app_print_spec_stats(const app_engine *e, const gen_stats *s);

#endif /* QR_APP_GENERATE_H */
