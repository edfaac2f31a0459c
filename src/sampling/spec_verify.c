/* spec_verify.c — the acceptance rule of speculative decoding: a drafted token is checked against the
 * target's distribution by rejection sampling (Leviathan et al. 2023, Chen et al. 2023), so that every
 * token speculative decoding emits is distributed exactly as plain sampling's (greedy: the argmax). */
#include <math.h>
#include <stdlib.h>

#include "sampling/sampler.h"
#include "util/util.h"

qr_status qr_sampler_verify(qr_sampler *s, const float *logits, int32_t draft, const qr_token_prob *q, int32_t n_q,
                            qr_sample_result *out, bool *accepted, char *err, size_t err_len) {
    *accepted = false;
    const qr_sampler_params *sp = qr_sampler_get_params(s);
    /* a point-mass proposal (deterministic drafters, greedy targets, grammars): a draw from p compared with
     * the draft is the rejection rule itself: P(keep d) = p(d), and a rejected draw is distributed as
     * p(x) / (1 - p(d)) over x != d, which is the residual max(0, p - q) normalized */
    if (draft < 0 || !q || n_q <= 0 || sp->temperature <= 0.0f || qr_sampler_grammar(s)) {
        const qr_status st = qr_sampler_sample(s, logits, out, err, err_len);
        if (st == QR_OK) *accepted = draft >= 0 && out->token == draft;
        return st;
    }
    const int32_t nv = qr_sampler_n_vocab(s);
    qr_token_prob *p = malloc(sizeof *p * (size_t)nv);
    float *qd = calloc((size_t)nv, sizeof *qd); /* q as a dense [n_vocab] row */
    int32_t n_p = 0;
    qr_status st = QR_OK;
    if (!p || !qd) {
        st = qr_errf(err, err_len, QR_ERR_NOMEM, "speculative verification: out of memory");
        goto done;
    }
    for (int32_t i = 0; i < n_q; i++)
        if (q[i].token >= 0 && q[i].token < nv) qd[q[i].token] += q[i].p;
    if ((st = qr_sampler_dist(s, logits, p, &n_p, err, err_len)) != QR_OK) goto done;
    double pdraft = 0.0;
    for (int32_t i = 0; i < n_p; i++)
        if (p[i].token == draft) pdraft = p[i].p;
    const double qdraft = draft < nv ? qd[draft] : 0.0;
    int32_t token = draft;
    if (!(qdraft > 0.0) || qr_sampler_uniform(s) * qdraft >= pdraft) { /* rejected: draw from the residual */
        double total = 0.0;
        for (int32_t i = 0; i < n_p; i++) {
            const double r = (double)p[i].p - qd[p[i].token];
            if (r > 0.0) total += r;
        }
        if (total > 0.0) { /* (0: p == q, where the draft is always kept; only rounding gets here) */
            const double u = qr_sampler_uniform(s) * total;
            double cum = 0.0;
            token = -1;
            for (int32_t i = 0; i < n_p; i++) {
                const double r = (double)p[i].p - qd[p[i].token];
                if (r <= 0.0) continue;
                token = p[i].token; /* the last positive one when rounding leaves u >= the sum */
                if (u < (cum += r)) break;
            }
        }
    }
    /* takes the token into the history and computes its logprobs as a sampled token's */
    st = qr_sampler_force(s, logits, token, out, err, err_len);
    if (st == QR_OK) *accepted = token == draft;
done:
    free(p);
    free(qd);
    return st;
}
