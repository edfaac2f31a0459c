/* generate.c — qr_generate (quarrel.h): the prefill / sample / stream / decode loop of one sequence, as
 * `quarrel run` and `quarrel chat` run it. Text goes through the streaming detokenizer (whole UTF-8
 * characters) and the stop checker (qr_stop: stop strings, n_predict, end-of-generation tokens). With a qr_spec,
 * each step drafts tokens and verifies them in one pass (spec_step). */
#include <stdlib.h>

#include "model/model.h"
#include "model/spec.h"
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

/* One generation's state, for emit(). */
typedef struct gen_state {
    const qr_generate_params *p;
    const qr_tokenizer *tok;
    qr_detok_stream *ds;
    qr_stop *stop;
    qr_token_callback cb;
    void *user_data;
    qr_generate_result *r;
    int32_t *hist;          /* [cap] the prompt and the generated tokens (the drafters' history) */
    int32_t n_hist, cap;
} gen_state;

/* Hands a sampled token to the stop rules and the callback. Returns QR_OK with r->end set when generation
 * ends, QR_OK with r->end 0 to go on, or an error. */
static qr_status emit(gen_state *g, qr_token token, char *err, size_t err_len) {
    qr_status st;
    g->r->n_generated++;
    if (g->n_hist < g->cap) g->hist[g->n_hist++] = token;
    bool eog = !g->p->ignore_eos && qr_token_is_eog(g->tok, token);
    const char *piece = "";
    size_t piece_len = 0;
    if (!eog && (st = qr_detok_stream_push(g->ds, token, &piece, &piece_len)) != QR_OK)
        return qr_errf(err, err_len, st, "detokenize: token %d", token);
    qr_stop_result sr;
    if ((st = qr_stop_feed(g->stop, piece, piece_len, eog, &sr)) != QR_OK)
        return qr_errf(err, err_len, st, "stop strings: out of memory");
    if (g->cb && !g->cb(token, sr.emit, sr.emit_len, g->user_data)) g->r->end = QR_GENERATE_CANCELLED;
    else if (sr.finish != QR_FINISH_NONE) g->r->end = end_of(&sr);
    return QR_OK;
}

/* One speculative step after `token` (sampled, not decoded): drafts, verifies the draft (qr_spec_verify) and
 * emits the tokens that stand plus the target's own next one (written to *next, not decoded). When a stop
 * rule ends generation at an earlier one, the cache is cut back to the tokens before it. Returns QR_OK with
 * *next = QR_TOKEN_NULL when nothing was drafted (the caller decodes token as usual). */
static qr_status spec_step(qr_context *ctx, qr_spec *spec, qr_sampler *smp, gen_state *g, qr_token token,
                           int32_t room, qr_token *next, char *err, size_t err_len) {
    int32_t draft[QR_SPEC_DRAFT_MAX], out[QR_SPEC_DRAFT_MAX + 1], n_out = 0;
    char msg[1024];
    *next = QR_TOKEN_NULL;
    const int32_t seq = g->p->seq_id, pos0 = qr_kv_seq_len(ctx, seq);
    const int32_t k = qr_spec_draft(spec, seq, g->hist, g->n_hist, room, smp, draft, msg, sizeof msg);
    if (k < 0) return qr_errf(err, err_len, QR_ERR_INTERNAL, "draft: %s", msg);
    if (k == 0) return QR_OK;
    qr_status st = qr_spec_verify(spec, smp, seq, token, draft, k, out, &n_out, err, err_len);
    if (st != QR_OK) return st;
    g->r->n_drafted += k;
    g->r->n_accepted += n_out - 1;
    for (int32_t i = 0; i < n_out; i++) {
        if ((st = emit(g, out[i], err, err_len)) != QR_OK) return st;
        *next = out[i];
        if (g->r->end) { /* out[i] is the last token: the cache holds what came before it */
            qr_kv_seq_rm(ctx, seq, pos0 + i + 1, -1);
            break;
        }
    }
    return QR_OK;
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
    if (p.spec && p.spec->ctx != ctx)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "qr_generate: the qr_spec was made for another context");
    qr_status st = QR_OK;
    gen_state g = {.p = &p, .tok = tok, .cb = cb, .user_data = user_data, .r = &r};
    g.ds = qr_detok_stream_create(tok, p.special);
    int32_t *seq = malloc(sizeof *seq * n_prompt);
    if (p.spec) {
        g.cap = (int32_t)n_prompt + p.n_predict;
        g.hist = malloc(sizeof *g.hist * (size_t)g.cap);
    }
    if (!g.ds || !seq || (p.spec && !g.hist)) {
        st = qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory");
        goto done;
    }
    if ((st = qr_stop_create(p.stops, p.n_stops, p.n_predict, &g.stop, err, err_len)) != QR_OK) goto done;
    for (size_t i = 0; i < n_prompt; i++) {
        seq[i] = p.seq_id;
        if (g.hist) g.hist[g.n_hist++] = prompt[i];
        if ((st = qr_sampler_chain_accept(smp, prompt[i])) != QR_OK) {
            qr_errf(err, err_len, st, "prompt token %zu (%d) is not in the vocabulary", i, prompt[i]);
            goto done;
        }
    }
    if (p.spec) qr_spec_seq_reset(p.spec, p.seq_id);
    double t0 = qr_time_s();
    qr_batch b = {.n_tokens = (int32_t)n_prompt, .token = prompt, .seq_id = seq};
    char msg[1024];
    if ((st = qr_decode(ctx, &b, msg, sizeof msg)) != QR_OK || (st = qr_spec_observe(p.spec, &b, msg, sizeof msg)) != QR_OK) {
        qr_errf(err, err_len, st, "decode: %s", msg);
        goto done;
    }
    r.prefill_seconds = qr_time_s() - t0;
    r.n_prompt = (int32_t)n_prompt;
    double t1 = qr_time_s();
    qr_sampler *is = qr_sampler_chain_sampler(smp);
    qr_token token = QR_TOKEN_NULL; /* the last emitted token, not decoded yet */
    for (;;) {
        if (token == QR_TOKEN_NULL) { /* sample from the last pass's logits */
            const float *logits = qr_get_logits(ctx, -1);
            if (!logits || (st = qr_sampler_chain_sample(smp, logits, &token, msg, sizeof msg)) != QR_OK) {
                st = qr_errf(err, err_len, logits ? st : QR_ERR_INTERNAL, "sampling: %s", logits ? msg : "no logits");
                break;
            }
            if ((st = emit(&g, token, err, err_len)) != QR_OK || r.end) break;
        }
        if (qr_kv_seq_len(ctx, p.seq_id) + 1 >= n_ctx) {
            r.end = QR_GENERATE_CONTEXT_FULL;
            qr_stop_result sr;
            qr_stop_flush(g.stop, QR_FINISH_LENGTH, &sr);
            if (cb && sr.emit_len) cb(QR_TOKEN_NULL, sr.emit, sr.emit_len, user_data);
            break;
        }
        if (p.spec) {
            /* drafts no further than the tokens still to generate (a step adds the draft and one more) and the
             * room in the context */
            int32_t room = p.n_predict - r.n_generated - 1, ctx_room = n_ctx - qr_kv_seq_len(ctx, p.seq_id) - 2;
            if (ctx_room < room) room = ctx_room;
            qr_token next;
            if ((st = spec_step(ctx, p.spec, is, &g, token, room, &next, err, err_len)) != QR_OK || r.end) break;
            if (next != QR_TOKEN_NULL) {
                token = next;
                continue;
            }
        }
        qr_batch nb = {.n_tokens = 1, .token = &token, .seq_id = &p.seq_id};
        if ((st = qr_decode(ctx, &nb, msg, sizeof msg)) != QR_OK ||
            (st = qr_spec_observe(p.spec, &nb, msg, sizeof msg)) != QR_OK) {
            qr_errf(err, err_len, st, "decode: %s", msg);
            break;
        }
        token = QR_TOKEN_NULL;
    }
    r.decode_seconds = qr_time_s() - t1;
    if (res) *res = r;
done:
    free(seq);
    free(g.hist);
    qr_stop_free(g.stop);
    qr_detok_stream_free(g.ds);
    return st;
}
