/* generate.c — one generation of `quarrel run` / `quarrel chat` (see generate.h). */
#include "generate.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHUNKED_PREFILL_MIN 256 /* prompt tokens from which a terminal shows the prefill's progress */

/* Where the token callback puts what qr_generate hands it. */
typedef struct gen_sink {
    FILE *out;        /* the text goes here (unless ids_only) */
    bool ids_only;
    int32_t *ids;     /* [cap] the generated ids */
    int32_t n_ids, cap;
    char **reply;     /* the text is appended to *reply (for chat history) when not NULL */
    size_t *reply_len;
    volatile sig_atomic_t *interrupt;
} gen_sink;

/* qr_token_callback: streams the text, collects the id; stops when *interrupt is set. */
static bool on_token(qr_token token, const char *text, size_t len, void *user_data) {
    gen_sink *k = user_data;
    if (token != QR_TOKEN_NULL && k->n_ids < k->cap) k->ids[k->n_ids++] = token;
    if (!k->ids_only && len) {
        fwrite(text, 1, len, k->out);
        fflush(k->out);
    }
    if (k->reply && len) {
        char *nr = realloc(*k->reply, *k->reply_len + len + 1);
        if (nr) {
            memcpy(nr + *k->reply_len, text, len);
            *k->reply_len += len;
            nr[*k->reply_len] = 0;
            *k->reply = nr;
        }
    }
    return !(k->interrupt && *k->interrupt);
}

/* A terminal's view of a long prompt: ids[0..n-1) decoded in chunks of the context's batch size with a
 * progress line on stderr, each token given to the sampler's history as qr_generate would (which then
 * gets the last one). Returns the number of tokens prefilled (0: nothing done, the caller prefills all),
 * or -1 on an error or an interrupt (printed; the sequence is rolled back). */
static int64_t chunked_prefill(app_engine *e, const int32_t *ids, size_t n, qr_sampler_chain *smp, const gen_opts *o,
                               gen_stats *stats) {
    if (n < CHUNKED_PREFILL_MIN || !isatty(STDERR_FILENO)) return 0;
    const int32_t past = qr_kv_seq_len(e->ctx, 0), chunk = 256;
    const size_t todo = n - 1;
    char err[1024];
    const double t0 = app_time_s();
    for (size_t done = 0; done < todo;) {
        if (o->interrupt && *o->interrupt) {
            qr_kv_seq_rm(e->ctx, 0, past, -1);
            fprintf(stderr, "\r\033[K");
            return -1;
        }
        const int32_t rows = (int32_t)(todo - done < (size_t)chunk ? todo - done : (size_t)chunk);
        const qr_batch b = {.n_tokens = rows, .token = ids + done};
        if (qr_decode(e->ctx, &b, err, sizeof err) != QR_OK) {
            qr_kv_seq_rm(e->ctx, 0, past, -1);
            fprintf(stderr, "\r\033[Kquarrel: %s\n", err);
            return -1;
        }
        done += (size_t)rows;
        app_progress_draw("prompt", done, todo, "tokens");
    }
    fprintf(stderr, "\r\033[K");
    for (size_t i = 0; i < todo; i++) qr_sampler_chain_accept(smp, ids[i]);
    stats->prefill_s += app_time_s() - t0;
    stats->n_prompt += (int32_t)todo;
    return (int64_t)todo;
}

int app_generate(app_engine *e, const int32_t *ids, size_t n_ids, qr_sampler_chain *smp, const gen_opts *o, FILE *out,
                 gen_stats *stats, char **reply, size_t *reply_len) {
    char err[1024];
    stats->interrupted = false;
    int32_t n_ctx = qr_context_n_ctx(e->ctx), past = qr_kv_seq_len(e->ctx, 0);
    if ((int64_t)past + (int64_t)n_ids >= n_ctx) {
        fprintf(stderr, "quarrel: the prompt is %zu tokens but the context holds %d (%d already used); "
                        "shorten the prompt or raise --ctx\n", n_ids, n_ctx, past);
        return 1;
    }
    const int64_t pre = o->ids_only ? 0 : chunked_prefill(e, ids, n_ids, smp, o, stats);
    if (pre < 0) {
        stats->interrupted = o->interrupt && *o->interrupt;
        return stats->interrupted ? 0 : 1;
    }
    gen_sink k = {.out = out, .ids_only = o->ids_only, .cap = o->n_predict, .reply = reply, .reply_len = reply_len,
                  .interrupt = o->interrupt};
    if (!(k.ids = malloc(sizeof(int32_t) * (size_t)o->n_predict))) {
        fprintf(stderr, "quarrel: out of memory\n");
        return 1;
    }
    qr_generate_params gp = qr_generate_default_params();
    gp.n_predict = o->n_predict;
    gp.ignore_eos = o->ignore_eos;
    gp.stops = o->stops;
    gp.n_stops = o->n_stops;
    gp.spec = e->spec;
    qr_generate_result r;
    qr_status st = qr_generate(e->ctx, e->tok, smp, ids + pre, n_ids - (size_t)pre, &gp, on_token, &k, &r, err, sizeof err);
    if (st != QR_OK) fprintf(stderr, "quarrel: %s\n", err);
    else if (r.end == QR_GENERATE_CONTEXT_FULL) fprintf(stderr, "\nquarrel: context full (%d tokens)\n", n_ctx);
    stats->interrupted = st == QR_OK && o->interrupt && *o->interrupt;
    stats->prefill_s += r.prefill_seconds;
    stats->n_prompt += r.n_prompt;
    stats->decode_s += r.decode_seconds;
    stats->n_gen += r.n_generated;
    stats->n_drafted += r.n_drafted;
    stats->n_accepted += r.n_accepted;
    if (o->ids_only && r.n_prompt > 0) { /* the ids so far, also after an error in the loop */
        fputc('[', out);
        for (int32_t i = 0; i < k.n_ids; i++) fprintf(out, i ? ",%d" : "%d", k.ids[i]);
        fputs("]\n", out);
    }
    free(k.ids);
    return st == QR_OK ? 0 : 1;
}

void app_print_timing(const app_engine *e, const gen_stats *s) {
    fprintf(stderr, "\nquarrel: load %.0f ms | prefill %d tok, %.1f t/s | decode %d tok, %.1f t/s\n", e->load_ms,
            s->n_prompt, s->prefill_s > 0 ? s->n_prompt / s->prefill_s : 0.0, s->n_gen,
            s->decode_s > 0 ? s->n_gen / s->decode_s : 0.0);
}

void app_print_spec_stats(const app_engine *e, const gen_stats *s) {
    if (!e->spec) {
        fprintf(stderr, "quarrel: speculative decoding off\n");
        return;
    }
    qr_spec_stats ss;
    qr_spec_get_stats(e->spec, &ss);
    fprintf(stderr, "quarrel: speculative: %lld drafted, %lld accepted (acceptance %.1f%%), %lld verify passes, "
                    "%.2f tokens per target pass\n", (long long)s->n_drafted, (long long)s->n_accepted,
            s->n_drafted ? 100.0 * (double)s->n_accepted / (double)s->n_drafted : 0.0, (long long)ss.n_steps,
            s->n_gen > 1 ? (double)(s->n_gen - 1) / (double)(s->n_gen - 1 - s->n_accepted) : 1.0);
}
