/* sampler_chain.c — qr_sampler_chain, the public face of the sampler (quarrel.h): its own parameter
 * struct (a stable ABI, independent of the internal qr_sampler_params, which grows with the server's
 * needs) converted to a qr_sampler that does the work. */
#include <stdlib.h>

#include "sampling/sampler.h"
#include "util/util.h"

struct qr_sampler_chain {
    qr_sampler *sampler;     /* owned */
    qr_grammar_vocab *vocab; /* owned: the vocabulary of the sampler's grammar matcher, or NULL */
};

qr_sampler *qr_sampler_chain_sampler(qr_sampler_chain *s) { return s->sampler; }

void qr_sampler_chain_keep_vocab(qr_sampler_chain *s, qr_grammar_vocab *v) {
    qr_grammar_vocab_free(s->vocab);
    s->vocab = v;
}

qr_sampler_chain_params qr_sampler_chain_default_params(void) {
    qr_sampler_params d;
    qr_sampler_params_default(&d);
    qr_sampler_chain_params p = {
        .temperature = d.temperature,
        .top_k = d.top_k,
        .top_p = d.top_p,
        .min_p = d.min_p,
        .repeat_penalty = d.repeat_penalty,
        .frequency_penalty = d.frequency_penalty,
        .presence_penalty = d.presence_penalty,
        .penalty_last_n = d.penalty_last_n,
        .seed = QR_SEED_RANDOM,
    };
    return p;
}

/* Fills *sp with the internal form of c; its bias list is a converted copy in *bias (malloc'd, the
 * caller frees it; NULL without entries). QR_ERR_INVALID_ARG for an inconsistent list, QR_ERR_NOMEM. */
static qr_status internal_params(const qr_sampler_chain_params *c, qr_sampler_params *sp, qr_logit_bias **bias,
                                 char *err, size_t err_len) {
    *bias = NULL;
    if (c->n_logit_bias < 0 || (c->n_logit_bias > 0 && !c->logit_bias))
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "logit_bias: %d entries but %s", c->n_logit_bias,
                       c->n_logit_bias < 0 ? "a negative count" : "a NULL array");
    qr_sampler_params_default(sp);
    sp->temperature = c->temperature;
    sp->top_k = c->top_k;
    sp->top_p = c->top_p;
    sp->min_p = c->min_p;
    sp->repeat_penalty = c->repeat_penalty;
    sp->frequency_penalty = c->frequency_penalty;
    sp->presence_penalty = c->presence_penalty;
    sp->penalty_last_n = c->penalty_last_n;
    sp->seed = c->seed;
    if (c->n_logit_bias > 0) {
        if (!(*bias = malloc(sizeof **bias * (size_t)c->n_logit_bias)))
            return qr_errf(err, err_len, QR_ERR_NOMEM, "sampler: out of memory");
        for (int32_t i = 0; i < c->n_logit_bias; i++)
            (*bias)[i] = (qr_logit_bias){c->logit_bias[i].token, c->logit_bias[i].bias};
    }
    sp->logit_bias = *bias;
    sp->n_logit_bias = c->n_logit_bias;
    return QR_OK;
}

qr_status qr_sampler_chain_params_validate(const qr_sampler_chain_params *p, int32_t n_vocab, char *err,
                                           size_t err_len) {
    if (!p) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "qr_sampler_chain_params_validate: NULL params");
    qr_sampler_params sp;
    qr_logit_bias *bias;
    qr_status st = internal_params(p, &sp, &bias, err, err_len);
    if (st == QR_OK) st = qr_sampler_params_validate(&sp, n_vocab, err, err_len);
    free(bias);
    return st;
}

qr_status qr_sampler_chain_create(int32_t n_vocab, const qr_sampler_chain_params *p, qr_sampler_chain **out,
                                  char *err, size_t err_len) {
    _Static_assert(QR_SEED_RANDOM == QR_SAMPLER_SEED_RANDOM, "one 'random seed' value");
    if (!out) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "qr_sampler_chain_create: NULL out");
    *out = NULL;
    if (n_vocab <= 0) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "n_vocab must be > 0 (got %d)", n_vocab);
    const qr_sampler_chain_params c = p ? *p : qr_sampler_chain_default_params();
    qr_sampler_params sp;
    qr_logit_bias *bias = NULL;
    qr_status st = internal_params(&c, &sp, &bias, err, err_len);
    if (st != QR_OK) return st;
    qr_sampler_chain *s = calloc(1, sizeof *s);
    if (!s) {
        st = qr_errf(err, err_len, QR_ERR_NOMEM, "sampler: out of memory");
        goto fail;
    }
    if ((st = qr_sampler_create(&sp, n_vocab, &s->sampler, err, err_len)) != QR_OK) goto fail;
    free(bias); /* qr_sampler_create copied it */
    *out = s;
    return QR_OK;
fail:
    free(bias);
    free(s);
    return st;
}

void qr_sampler_chain_free(qr_sampler_chain *s) {
    if (!s) return;
    qr_sampler_free(s->sampler); /* and its grammar matcher, before the vocabulary it walks */
    qr_grammar_vocab_free(s->vocab);
    free(s);
}

qr_status qr_sampler_chain_sample(qr_sampler_chain *s, const float *logits, qr_token *out, char *err,
                                  size_t err_len) {
    if (!s || !logits || !out)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "qr_sampler_chain_sample: NULL argument");
    qr_sample_result r;
    qr_status st = qr_sampler_sample(s->sampler, logits, &r, err, err_len);
    if (st == QR_OK) *out = r.token;
    return st;
}

qr_status qr_sampler_chain_accept(qr_sampler_chain *s, qr_token token) {
    return s ? qr_sampler_accept(s->sampler, token) : QR_ERR_INVALID_ARG;
}

void qr_sampler_chain_reset(qr_sampler_chain *s) {
    if (s) qr_sampler_reset(s->sampler);
}

uint64_t qr_sampler_chain_seed(const qr_sampler_chain *s) { return qr_sampler_seed(s->sampler); }
