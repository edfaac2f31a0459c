/* generate.c — qr_generate (quarrel.h): the prefill / sample / stream / decode loop of one sequence, as
 * `quarrel run` and `quarrel chat` run it. Text goes through the streaming detokenizer (whole UTF-8
 * characters) and the stop checker (qr_stop: stop strings, n_predict, end-of-generation tokens). */
#include <stdlib.h>

#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"
#include "util/util.h"

qr_generate_params qr_generate_default_params(void) {
    qr_generate_params p = {.n_predict = 128};
    return p;
}

/* The public end reason of a stop-checker finish. */
static qr_generate_end end_of(const qr_stop_result *sr) {
    if (sr->finish == QR_FINISH_LENGTH) return QR_GENERATE_LENGTH;
    return sr->stop_index >= 0 ? QR_GENERATE_STOP_STRING : QR_GENERATE_EOG;
}

qr_status qr_generate(qr_context *ctx, const qr_tokenizer *tok, qr_sampler_chain *smp, const qr_token *prompt,
                      size_t n_prompt, const qr_generate_params *params, qr_token_callback cb, void *user_data,
                      qr_generate_result *res, char *err, size_t err_len) {
    const qr_generate_params p = params ? *params : qr_generate_default_params();
    qr_generate_result r = {0};
    if (res) *res = r;
    if (!ctx || !tok || !smp || !prompt || n_prompt == 0)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "qr_generate: %s",
                       n_prompt ? "NULL argument" : "empty prompt");
    if (p.n_predict < 1)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "n_predict must be >= 1 (got %d)", p.n_predict);
    const int32_t n_ctx = qr_context_n_ctx(ctx), past = qr_kv_seq_len(ctx, p.seq_id);
    if (p.seq_id < 0) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "seq_id must be >= 0 (got %d)", p.seq_id);
    if ((int64_t)past + (int64_t)n_prompt >= n_ctx)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG,
                       "the prompt is %zu tokens but the context holds %d (%d already used)", n_prompt, n_ctx, past);
    qr_status st = QR_OK;
    qr_stop *stop = NULL;
    qr_detok_stream *ds = qr_detok_stream_create(tok, p.special);
    int32_t *seq = malloc(sizeof *seq * n_prompt);
    if (!ds || !seq) {
        st = qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory");
        goto done;
    }
    if ((st = qr_stop_create(p.stops, p.n_stops, p.n_predict, &stop, err, err_len)) != QR_OK) goto done;
    for (size_t i = 0; i < n_prompt; i++) {
        seq[i] = p.seq_id;
        if ((st = qr_sampler_chain_accept(smp, prompt[i])) != QR_OK) {
            qr_errf(err, err_len, st, "prompt token %zu (%d) is not in the vocabulary", i, prompt[i]);
            goto done;
        }
    }
    double t0 = qr_time_s();
    qr_batch b = {.n_tokens = (int32_t)n_prompt, .token = prompt, .seq_id = seq};
    char msg[1024];
    if ((st = qr_decode(ctx, &b, msg, sizeof msg)) != QR_OK) {
        qr_errf(err, err_len, st, "decode: %s", msg);
        goto done;
    }
    r.prefill_seconds = qr_time_s() - t0;
    r.n_prompt = (int32_t)n_prompt;
    double t1 = qr_time_s();
    for (;;) {
        qr_token token;
        const float *logits = qr_get_logits(ctx, -1);
        if (!logits || (st = qr_sampler_chain_sample(smp, logits, &token, msg, sizeof msg)) != QR_OK) {
            st = qr_errf(err, err_len, logits ? st : QR_ERR_INTERNAL, "sampling: %s", logits ? msg : "no logits");
            break;
        }
        r.n_generated++;
        bool eog = !p.ignore_eos && qr_token_is_eog(tok, token);
        const char *piece = "";
        size_t piece_len = 0;
        if (!eog && (st = qr_detok_stream_push(ds, token, &piece, &piece_len)) != QR_OK) {
            qr_errf(err, err_len, st, "detokenize: token %d", token);
            break;
        }
        qr_stop_result sr;
        if ((st = qr_stop_feed(stop, piece, piece_len, eog, &sr)) != QR_OK) {
            qr_errf(err, err_len, st, "stop strings: out of memory");
            break;
        }
        if (cb && !cb(token, sr.emit, sr.emit_len, user_data)) {
            r.end = QR_GENERATE_CANCELLED;
            break;
        }
        if (sr.finish != QR_FINISH_NONE) {
            r.end = end_of(&sr);
            break;
        }
        if (qr_kv_seq_len(ctx, p.seq_id) + 1 >= n_ctx) {
            r.end = QR_GENERATE_CONTEXT_FULL;
            qr_stop_flush(stop, QR_FINISH_LENGTH, &sr);
            if (cb && sr.emit_len) cb(QR_TOKEN_NULL, sr.emit, sr.emit_len, user_data);
            break;
        }
        qr_batch nb = {.n_tokens = 1, .token = &token, .seq_id = &p.seq_id};
        if ((st = qr_decode(ctx, &nb, msg, sizeof msg)) != QR_OK) {
            qr_errf(err, err_len, st, "decode: %s", msg);
            break;
        }
    }
    r.decode_seconds = qr_time_s() - t1;
    if (res) *res = r;
done:
    free(seq);
    qr_stop_free(stop);
    qr_detok_stream_free(ds);
    return st;
}
