/* spec.c — speculative decoding (spec.h, quarrel.h's qr_spec): the n-gram and draft-model drafters, the
 * draft model's KV cache kept in step with the target's sequences, the vocabulary check and the counters.
 * Verification (one row-exact target pass over the draft, rejection sampling, rollback) runs in its callers:
 * qr_generate (generate.c) and the scheduler's step. */
#include "model/spec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "util/knobs.h"
#include "util/util.h"

/* Vocabulary sizes a draft may differ by (the extra ids are never drafted), as llama.cpp allows. */
#define VOCAB_SLACK 128
/* First draft length of a sequence, and the longest pause after drafts of which nothing stood. */
#define START_DRAFT 4
#define MAX_SKIP 64

qr_spec_params qr_spec_default_params(void) {
    return (qr_spec_params){.kind = QR_SPEC_NGRAM, .draft_max = 16, .draft_min = 0, .draft_p_min = 0.75f,
                            .ngram_min = 2, .ngram_max = 4};
}

/* Checks p's fields (not the draft model's vocabulary). */
static qr_status check_params(const qr_spec_params *p, char *err, size_t err_len) {
    if (p->kind != QR_SPEC_NGRAM && p->kind != QR_SPEC_DRAFT && p->kind != QR_SPEC_EAGLE3)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "speculative decoding: unknown kind %d", (int)p->kind);
    if (p->draft_max < 1 || p->draft_max > QR_SPEC_DRAFT_MAX)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "draft_max must be in [1, %d] (got %d)", QR_SPEC_DRAFT_MAX,
                       p->draft_max);
    if (p->draft_min < 0 || p->draft_min > p->draft_max)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "draft_min must be in [0, draft_max = %d] (got %d)",
                       p->draft_max, p->draft_min);
    if (!(p->draft_p_min >= 0.0f && p->draft_p_min <= 1.0f))
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "draft_p_min must be in [0, 1] (got %g)",
                       (double)p->draft_p_min);
    if (p->kind == QR_SPEC_NGRAM && (p->ngram_min < 1 || p->ngram_max < p->ngram_min || p->ngram_max > 16))
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "n-gram sizes must satisfy 1 <= min <= max <= 16 (got %d..%d)",
                       p->ngram_min, p->ngram_max);
    if (p->kind == QR_SPEC_DRAFT && !p->draft_model)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "speculative decoding with a draft model needs the model");
    if (p->kind == QR_SPEC_EAGLE3 && !p->draft_model)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "speculative decoding with an EAGLE-3 head needs the head "
                       "(--draft-model)");
    return QR_OK;
}

/* A model whose per-sequence state can be cut back to any earlier position (attention layers only). */
static qr_status check_rollback(const qr_model *m, const char *role, char *err, size_t err_len) {
    if (m->arch->spec_head)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "the %s model %s is an EAGLE-3 head (%s): draft with it as "
                       "--spec eagle3", role, m->path, m->hp.arch_name);
    if (m->arch->encoder)
        return qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "speculative decoding: the %s model (%s) is an encoder", role,
                       m->hp.arch_name);
    if (m->hp.has_ssm)
        return qr_errf(err, err_len, QR_ERR_UNSUPPORTED,
                       "speculative decoding: the %s model (%s) has Mamba2 layers, whose state cannot be rolled back",
                       role, m->hp.arch_name);
    return QR_OK;
}

qr_status qr_spec_check_vocab(const qr_model *target, const qr_model *other, const char *role, int32_t slack,
                              int32_t *n_common, char *err, size_t err_len) {
    qr_tokenizer *tt = NULL, *td = NULL;
    char a[256], b[256], msg[512];
    qr_status st;
    if ((st = qr_tokenizer_from_model(target, &tt, msg, sizeof msg)) != QR_OK) {
        qr_errf(err, err_len, st, "target tokenizer: %s", msg);
        goto done;
    }
    if ((st = qr_tokenizer_from_model(other, &td, msg, sizeof msg)) != QR_OK) {
        qr_errf(err, err_len, st, "%s tokenizer: %s", role, msg);
        goto done;
    }
    const int32_t nt = qr_model_n_vocab(target), nd = qr_model_n_vocab(other);
    const int32_t vt = qr_tokenizer_n_vocab(tt), vd = qr_tokenizer_n_vocab(td);
    if (abs(nt - nd) > slack || abs(vt - vd) > slack) {
        st = qr_errf(err, err_len, QR_ERR_INVALID_ARG,
                     "the %s's vocabulary is incompatible with the target's: %d tokens against %d", role, vd, vt);
        goto done;
    }
    static const struct { qr_special_token which; const char *name; } specials[] = {
        {QR_SPECIAL_BOS, "BOS"}, {QR_SPECIAL_EOS, "EOS"}, {QR_SPECIAL_EOT, "EOT"}};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++)
        if (qr_tokenizer_special(tt, specials[i].which) != qr_tokenizer_special(td, specials[i].which)) {
            st = qr_errf(err, err_len, QR_ERR_INVALID_ARG,
                         "the %s's vocabulary is incompatible with the target's: %s token %d against %d", role,
                         specials[i].name, qr_tokenizer_special(td, specials[i].which),
                         qr_tokenizer_special(tt, specials[i].which));
            goto done;
        }
    if (qr_tokenizer_add_bos(tt) != qr_tokenizer_add_bos(td)) {
        st = qr_errf(err, err_len, QR_ERR_INVALID_ARG,
                     "the %s's vocabulary is incompatible with the target's: one adds BOS, the other not", role);
        goto done;
    }
    const int32_t n = vt < vd ? vt : vd;
    for (int32_t id = 0; id < n; id++) {
        const int32_t la = qr_token_to_piece(tt, id, true, a, sizeof a - 1);
        const int32_t lb = qr_token_to_piece(td, id, true, b, sizeof b - 1);
        if (la != lb || (la > 0 && memcmp(a, b, (size_t)la) != 0)) {
            a[la > 0 ? la : 0] = 0, b[lb > 0 ? lb : 0] = 0;
            st = qr_errf(err, err_len, QR_ERR_INVALID_ARG,
                         "the %s's vocabulary is incompatible with the target's: token %d is '%s' in the %s, '%s' in "
                         "the target", role, id, b, role, a);
            goto done;
        }
    }
    *n_common = nt < nd ? nt : nd;
    if (n < *n_common) *n_common = n;
done:
    qr_tokenizer_free(tt);
    qr_tokenizer_free(td);
    return st;
}

void qr_spec_free(qr_spec *sp) {
    if (!sp) return;
    if (sp->dtok)
        for (int32_t s = 0; s < sp->n_seq; s++) free(sp->dtok[s]);
    free(sp->dtok);
    free(sp->dlen);
    free(sp->cur_max);
    free(sp->skip);
    free(sp->fails);
    free(sp->dlogits);
    free(sp->q);
    free(sp->n_q);
    free(sp->e3_feat), free(sp->e3_pos0), free(sp->e3_n), free(sp->e3_off), free(sp->e3_cnt);
    free(sp->e3_in), free(sp->e3_tok), free(sp->e3_seq), free(sp->e3_want), free(sp->e3_g);
    qr_context_free(sp->dctx);
    free(sp);
}

/* QR_SPEC_EAGLE3's part of qr_spec_create: bind the head, capture its layers in the target, the head's context. */
static qr_status eagle3_setup(qr_spec *sp, char *err, size_t err_len) {
    qr_model *head = sp->p.draft_model;
    const qr_model *target = qr_context_model(sp->ctx);
    char msg[512];
    qr_status st;
    if (!head->arch->spec_head)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "--spec eagle3: %s is not an EAGLE-3 head (architecture %s)",
                       head->path, head->hp.arch_name);
    if ((st = qr_eagle3_bind(head, target, err, err_len)) != QR_OK) return st;
    if ((st = qr_context_capture_layers(sp->ctx, 3, head->hp.eagle3_layers, msg, sizeof msg)) != QR_OK)
        return qr_errf(err, err_len, st, "EAGLE-3: the target cannot hand the head its hidden states: %s", msg);
    qr_context_params cp = qr_context_default_params();
    cp.n_ctx = qr_context_n_ctx(sp->ctx);
    cp.n_seq_max = sp->n_seq;
    if ((st = qr_context_create(head, &cp, &sp->dctx, msg, sizeof msg)) != QR_OK)
        return qr_errf(err, err_len, st, "EAGLE-3 head context: %s", msg);
    sp->dcap = qr_context_n_ctx(sp->dctx);
    sp->e3_w = 3 * target->hp.n_embd;
    sp->e3_keep = sp->p.draft_max + 1;
    sp->e3_d2t = head->d2t.host;
    const size_t ns = (size_t)sp->n_seq;
    sp->e3_feat = malloc(sizeof(float) * ns * (size_t)sp->e3_keep * (size_t)sp->e3_w);
    sp->e3_pos0 = calloc(ns, sizeof(int32_t));
    sp->e3_n = calloc(ns, sizeof(int32_t));
    sp->e3_off = calloc(ns, sizeof(int32_t));
    sp->e3_cnt = calloc(ns, sizeof(int32_t));
    sp->e3_g = malloc(sizeof(float) * (size_t)head->hp.n_embd);
    sp->dlogits = malloc(sizeof(float) * (size_t)qr_model_n_logits(head));
    sp->q = malloc(sizeof *sp->q * ns * QR_SPEC_DRAFT_MAX * QR_SPEC_Q_MAX);
    sp->n_q = calloc(ns * QR_SPEC_DRAFT_MAX, sizeof *sp->n_q);
    if (!sp->e3_feat || !sp->e3_pos0 || !sp->e3_n || !sp->e3_off || !sp->e3_cnt || !sp->e3_g || !sp->dlogits || !sp->q ||
        !sp->n_q)
        return qr_errf(err, err_len, QR_ERR_NOMEM, "EAGLE-3: out of memory for %d sequences' states", sp->n_seq);
    return QR_OK;
}

qr_status qr_spec_create(qr_context *ctx, const qr_spec_params *params, qr_spec **out, char *err, size_t err_len) {
    if (!ctx || !out) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "qr_spec_create: NULL argument");
    *out = NULL;
    const qr_spec_params p = params ? *params : qr_spec_default_params();
    qr_status st = check_params(&p, err, err_len);
    if (st != QR_OK) return st;
    const qr_model *target = qr_context_model(ctx);
    if ((st = check_rollback(target, "target", err, err_len)) != QR_OK) return st;
    qr_spec *sp = calloc(1, sizeof *sp);
    if (!sp) return qr_errf(err, err_len, QR_ERR_NOMEM, "speculative decoding: out of memory");
    sp->ctx = ctx;
    sp->p = p;
    /* a verification pass holds the draft and one row: on a backend that computes at most row_exact_rows rows
     * row-exactly a pass (CUDA: the mat-vec's 8), longer drafts would cost a second pass (session 34, H200: 8 drafted
     * tokens 5.2x a step, 7 drafted 4.2x) */
    const int32_t xr = target->be ? target->be->caps.row_exact_rows : 0;
    if (xr > 1 && sp->p.draft_max > xr - 1) sp->p.draft_max = xr - 1;
    if (sp->p.draft_min > sp->p.draft_max) sp->p.draft_min = sp->p.draft_max;
    sp->n_seq = qr_context_n_seq_max(ctx);
    sp->n_vocab = qr_model_n_vocab(target);
    sp->cur_max = calloc((size_t)sp->n_seq, sizeof *sp->cur_max);
    sp->skip = calloc((size_t)sp->n_seq, sizeof *sp->skip);
    sp->fails = calloc((size_t)sp->n_seq, sizeof *sp->fails);
    if (!sp->cur_max || !sp->skip || !sp->fails) goto nomem;
    for (int32_t s = 0; s < sp->n_seq; s++) sp->cur_max[s] = p.draft_max < START_DRAFT ? p.draft_max : START_DRAFT;
    if (p.kind == QR_SPEC_DRAFT) {
        if ((st = check_rollback(p.draft_model, "draft", err, err_len)) != QR_OK) goto fail;
        if ((st = qr_spec_check_vocab(target, p.draft_model, "draft model", VOCAB_SLACK, &sp->n_vocab, err, err_len)) !=
            QR_OK)
            goto fail;
        qr_context_params cp = qr_context_default_params();
        cp.n_ctx = qr_context_n_ctx(ctx);
        cp.n_seq_max = sp->n_seq;
        char msg[512];
        if ((st = qr_context_create(p.draft_model, &cp, &sp->dctx, msg, sizeof msg)) != QR_OK) {
            qr_errf(err, err_len, st, "draft model context: %s", msg);
            goto fail;
        }
        sp->dcap = qr_context_n_ctx(sp->dctx);
        sp->dtok = calloc((size_t)sp->n_seq, sizeof *sp->dtok);
        sp->dlen = calloc((size_t)sp->n_seq, sizeof *sp->dlen);
        sp->dlogits = malloc(sizeof *sp->dlogits * (size_t)qr_model_n_vocab(p.draft_model));
        sp->q = malloc(sizeof *sp->q * (size_t)sp->n_seq * QR_SPEC_DRAFT_MAX * QR_SPEC_Q_MAX);
        sp->n_q = calloc((size_t)sp->n_seq * QR_SPEC_DRAFT_MAX, sizeof *sp->n_q);
        if (!sp->dtok || !sp->dlen || !sp->dlogits || !sp->q || !sp->n_q) goto nomem;
        for (int32_t s = 0; s < sp->n_seq; s++)
            if (!(sp->dtok[s] = malloc(sizeof(int32_t) * (size_t)sp->dcap))) goto nomem;
    } else if (p.kind == QR_SPEC_EAGLE3) {
        if ((st = eagle3_setup(sp, err, err_len)) != QR_OK) goto fail;
    }
    *out = sp;
    return QR_OK;
nomem:
    st = qr_errf(err, err_len, QR_ERR_NOMEM, "speculative decoding: out of memory");
fail:
    qr_spec_free(sp);
    return st;
}

void qr_spec_get_stats(const qr_spec *sp, qr_spec_stats *out) {
    if (out) *out = sp ? sp->stats : (qr_spec_stats){0};
}

/* After a draft of which nothing stood (or a drafter that would not draft): pause 2, 4, ... MAX_SKIP steps, then
 * start again with one token. */
static void backoff(qr_spec *sp, int32_t seq) {
    sp->fails[seq]++;
    sp->skip[seq] = sp->fails[seq] < 7 ? (1 << sp->fails[seq]) : MAX_SKIP;
    sp->cur_max[seq] = 1;
}

void qr_spec_count(qr_spec *sp, int32_t seq, int32_t n_drafted, int32_t n_accepted) {
    if (n_drafted <= 0) return;
    sp->stats.n_steps++;
    sp->stats.n_drafted += n_drafted;
    sp->stats.n_accepted += n_accepted;
    if (seq < 0 || seq >= sp->n_seq) return;
    if (n_accepted == 0) {
        backoff(sp, seq);
        return;
    }
    sp->fails[seq] = 0;
    const int32_t grown = n_accepted == n_drafted ? 2 * sp->cur_max[seq] : n_accepted + 1;
    sp->cur_max[seq] = grown < sp->p.draft_max ? grown : sp->p.draft_max;
}

void qr_spec_seq_reset(qr_spec *sp, int32_t seq) {
    if (seq < 0 || seq >= sp->n_seq) return;
    sp->cur_max[seq] = sp->p.draft_max < START_DRAFT ? sp->p.draft_max : START_DRAFT;
    sp->skip[seq] = sp->fails[seq] = 0;
    if (!sp->dctx) return;
    qr_kv_seq_rm(sp->dctx, seq, 0, -1);
    if (sp->dlen) sp->dlen[seq] = 0;
    if (sp->e3_n) sp->e3_n[seq] = sp->e3_off[seq] = 0;
}

const qr_token_prob *qr_spec_q(const qr_spec *sp, int32_t seq, int32_t i, int32_t *n) {
    *n = 0;
    if (!sp->n_q || seq < 0 || seq >= sp->n_seq || i < 0 || i >= QR_SPEC_DRAFT_MAX) return NULL;
    const size_t k = (size_t)seq * QR_SPEC_DRAFT_MAX + (size_t)i;
    *n = sp->n_q[k];
    return *n > 0 ? sp->q + k * QR_SPEC_Q_MAX : NULL;
}

int32_t qr_spec_ngram_lookup(const int32_t *hist, int32_t n_hist, int32_t ngram_min, int32_t ngram_max, int32_t max,
                             int32_t *draft) {
    for (int32_t n = ngram_max; n >= ngram_min; n--) {
        if (n >= n_hist) continue;
        const int32_t *pat = hist + n_hist - n;
        /* occurrences that end before the pattern itself does, latest first */
        for (int32_t j = n_hist - n - 1; j >= 0; j--) {
            if (hist[j] != pat[0] || memcmp(hist + j, pat, sizeof(int32_t) * (size_t)n) != 0) continue;
            int32_t k = 0;
            while (k < max && j + n + k < n_hist) draft[k] = hist[j + n + k], k++;
            if (k > 0) return k;
        }
    }
    return 0;
}

/* The top (at most QR_SPEC_Q_MAX) logits of l[0..n) into q (token, logit), largest first; returns how many. */
static int32_t top_logits(const float *l, int32_t n, qr_token_prob *q) {
    int32_t k = 0;
    for (int32_t i = 0; i < n; i++) {
        if (!(l[i] > -INFINITY) || (k == QR_SPEC_Q_MAX && l[i] <= q[k - 1].p)) continue;
        int32_t j = k < QR_SPEC_Q_MAX ? k++ : k - 1;
        while (j > 0 && q[j - 1].p < l[i]) q[j] = q[j - 1], j--;
        q[j] = (qr_token_prob){i, l[i]};
    }
    return k;
}

/* Softmax in place over q[0..n)'s logits divided by temp. */
static void softmax_q(qr_token_prob *q, int32_t n, float temp) {
    double sum = 0.0;
    const float mx = q[0].p;
    for (int32_t i = 0; i < n; i++) sum += exp((double)((q[i].p - mx) / temp));
    for (int32_t i = 0; i < n; i++) q[i].p = (float)(exp((double)((q[i].p - mx) / temp)) / sum);
}

/* Decodes tokens[0..n) at the end of the draft's sequence seq (logits of the last row into sp->dlogits). */
static qr_status draft_decode(qr_spec *sp, int32_t seq, const int32_t *tokens, int32_t n, char *err, size_t err_len) {
    int32_t *seqs = malloc(sizeof(int32_t) * (size_t)n);
    if (!seqs) return qr_errf(err, err_len, QR_ERR_NOMEM, "draft model: out of memory");
    for (int32_t i = 0; i < n; i++) seqs[i] = seq;
    const qr_batch b = {.n_tokens = n, .token = tokens, .seq_id = seqs};
    qr_status st = qr_decode(sp->dctx, &b, err, err_len);
    free(seqs);
    if (st != QR_OK) return st;
    memcpy(sp->dtok[seq] + sp->dlen[seq], tokens, sizeof(int32_t) * (size_t)n);
    sp->dlen[seq] += n;
    const float *l = qr_get_logits(sp->dctx, -1);
    if (!l) return qr_errf(err, err_len, QR_ERR_INTERNAL, "draft model: no logits");
    memcpy(sp->dlogits, l, sizeof(float) * (size_t)qr_model_n_vocab(sp->p.draft_model));
    return QR_OK;
}

/* Draft token k of sequence seq from the drafter's logits l[0..nv) (ids mapped to target tokens through d2t, I64,
 * when not NULL): the top logits' best token (temp 0: a point mass) or one sampled at the target's temperature from
 * smp's PRNG (its distribution kept for qr_spec_q). False when the drafter is not confident enough (p_min) or the
 * token is outside the target's vocabulary: the draft stops before it. */
static bool pick_token(qr_spec *sp, int32_t seq, int32_t k, const float *l, int32_t nv, const char *d2t, float temp,
                       qr_sampler *smp, int32_t *out) {
    qr_token_prob *q = sp->q + ((size_t)seq * QR_SPEC_DRAFT_MAX + (size_t)k) * QR_SPEC_Q_MAX;
    int32_t *n_q = sp->n_q + (size_t)seq * QR_SPEC_DRAFT_MAX + (size_t)k;
    const int32_t n = top_logits(l, nv, q);
    if (n == 0) return false;
    if (d2t)
        for (int32_t i = 0; i < n; i++) {
            int64_t id;
            memcpy(&id, d2t + (size_t)q[i].token * sizeof id, sizeof id);
            q[i].token = (int32_t)id;
        }
    /* confidence: the token's probability among the top logits at temperature 1 (llama.cpp's p_min test) */
    qr_token_prob conf[QR_SPEC_Q_MAX];
    memcpy(conf, q, sizeof(qr_token_prob) * (size_t)n);
    softmax_q(conf, n, 1.0f);
    int32_t token = q[0].token, at = 0;
    if (temp > 0.0f) { /* sample the draft from its own distribution at the target's temperature */
        softmax_q(q, n, temp);
        const double u = qr_sampler_uniform(smp);
        double cum = 0.0;
        at = n - 1;
        for (int32_t i = 0; i < n; i++)
            if (u < (cum += q[i].p)) {
                at = i;
                break;
            }
        token = q[at].token;
        *n_q = n;
    } else {
        *n_q = 0; /* greedy: a point mass */
    }
    if (conf[at].p < sp->p.draft_p_min || token < 0 || token >= sp->n_vocab) return false;
    *out = token;
    return true;
}

/* The draft model's drafter (see qr_spec_draft). */
static int32_t draft_model(qr_spec *sp, int32_t seq, const int32_t *hist, int32_t n_hist, int32_t max, qr_sampler *smp,
                           int32_t *draft, char *err, size_t err_len) {
    /* the draft's cache holds dtok[seq][0..dlen): keep the prefix it shares with hist (at least one token of
     * hist left to decode, for the logits), decode the rest */
    int32_t c = 0, *dt = sp->dtok[seq];
    const int32_t lim = sp->dlen[seq] < n_hist - 1 ? sp->dlen[seq] : n_hist - 1;
    while (c < lim && dt[c] == hist[c]) c++;
    if (c < sp->dlen[seq]) {
        qr_kv_seq_rm(sp->dctx, seq, c, -1);
        sp->dlen[seq] = c;
    }
    if (n_hist + max > sp->dcap) max = sp->dcap - n_hist;
    if (max <= 0) return 0;
    if (draft_decode(sp, seq, hist + c, n_hist - c, err, err_len) != QR_OK) return -1;
    const float temp = smp ? qr_sampler_get_params(smp)->temperature : 0.0f;
    const int32_t nv_draft = qr_model_n_vocab(sp->p.draft_model);
    int32_t k = 0;
    for (; k < max; k++) {
        int32_t token;
        if (!pick_token(sp, seq, k, sp->dlogits, nv_draft, NULL, temp, smp, &token)) break;
        draft[k] = token;
        if (k + 1 == max) {
            k++;
            break;
        }
        if (draft_decode(sp, seq, &token, 1, err, err_len) != QR_OK) return -1;
    }
    return k;
}

/* ---- EAGLE-3 ---- */

/* Room for n rows in the head batch scratch. */
static bool e3_reserve(qr_spec *sp, int32_t n) {
    if (n <= sp->e3_cap) return true;
    const int32_t cap = n > 2 * sp->e3_cap ? n : 2 * sp->e3_cap;
    float *in = realloc(sp->e3_in, sizeof(float) * (size_t)cap * (size_t)sp->e3_w);
    if (in) sp->e3_in = in;
    int32_t *tok = realloc(sp->e3_tok, sizeof(int32_t) * (size_t)cap);
    if (tok) sp->e3_tok = tok;
    int32_t *seq = realloc(sp->e3_seq, sizeof(int32_t) * (size_t)cap);
    if (seq) sp->e3_seq = seq;
    int8_t *want = realloc(sp->e3_want, (size_t)cap);
    if (want) sp->e3_want = want;
    if (!in || !tok || !seq || !want) return false;
    sp->e3_cap = cap;
    return true;
}

/* Cuts the head's sequence seq back to target position `from` (restarting it there when the head does not reach
 * that far, or starts after it). */
static void e3_cut(qr_spec *sp, int32_t seq, int32_t from) {
    const int32_t t = from - sp->e3_off[seq];
    if (t < 0 || t > qr_kv_seq_len(sp->dctx, seq)) {
        qr_kv_seq_rm(sp->dctx, seq, 0, -1);
        sp->e3_off[seq] = from;
    } else {
        qr_kv_seq_rm(sp->dctx, seq, t, -1);
    }
}

qr_status qr_spec_observe(qr_spec *sp, const qr_batch *b, char *err, size_t err_len) {
    if (!sp || sp->p.kind != QR_SPEC_EAGLE3 || !b || b->n_tokens < 1) return QR_OK;
    int32_t rows = 0, width = 0;
    const float *cap = qr_get_captured(sp->ctx, &rows, &width);
    if (!cap || rows != b->n_tokens || width != sp->e3_w)
        return qr_errf(err, err_len, QR_ERR_INTERNAL, "EAGLE-3: the target's captured states do not match its batch "
                       "(%d rows of %d, expected %d of %d)", rows, width, b->n_tokens, sp->e3_w);
    if (!e3_reserve(sp, b->n_tokens + sp->n_seq)) return qr_errf(err, err_len, QR_ERR_NOMEM, "EAGLE-3: out of memory");
    /* positions: each sequence's rows continue it, so its first row is at its length less its rows */
    const size_t w = (size_t)sp->e3_w;
    if (!b->pos) {
        memset(sp->e3_cnt, 0, sizeof(int32_t) * (size_t)sp->n_seq);
        for (int32_t i = 0; i < b->n_tokens; i++) sp->e3_cnt[b->seq_id ? b->seq_id[i] : 0]++;
        for (int32_t s = 0; s < sp->n_seq; s++)
            if (sp->e3_cnt[s]) sp->e3_cnt[s] = qr_kv_seq_len(sp->ctx, s) - sp->e3_cnt[s];
    }
    int32_t hn = 0;
    for (int32_t i0 = 0, i1; i0 < b->n_tokens; i0 = i1) {
        const int32_t s = b->seq_id ? b->seq_id[i0] : 0;
        for (i1 = i0 + 1; i1 < b->n_tokens && (b->seq_id ? b->seq_id[i1] : 0) == s;) i1++;
        const int32_t m = i1 - i0, p0 = b->pos ? b->pos[i0] : sp->e3_cnt[s];
        if (!b->pos) sp->e3_cnt[s] += m;
        /* the row before the batch (its state kept from the last batch) pairs with the batch's first token */
        const bool bridge = sp->e3_n[s] > 0 && p0 - 1 >= sp->e3_pos0[s] && p0 - 1 < sp->e3_pos0[s] + sp->e3_n[s];
        e3_cut(sp, s, bridge ? p0 - 1 : p0);
        if (bridge) {
            memcpy(sp->e3_in + (size_t)hn * w, sp->e3_feat + ((size_t)s * sp->e3_keep + (size_t)(p0 - 1 - sp->e3_pos0[s])) * w,
                   w * sizeof(float));
            sp->e3_tok[hn] = b->token[i0], sp->e3_seq[hn] = s, sp->e3_want[hn++] = 0;
        }
        for (int32_t k = 0; k + 1 < m; k++) { /* teacher forcing: the state at P with the token at P + 1 */
            memcpy(sp->e3_in + (size_t)hn * w, cap + (size_t)(i0 + k) * w, w * sizeof(float));
            sp->e3_tok[hn] = b->token[i0 + k + 1], sp->e3_seq[hn] = s, sp->e3_want[hn++] = 0;
        }
        const int32_t keep = m < sp->e3_keep ? m : sp->e3_keep;
        memcpy(sp->e3_feat + (size_t)s * sp->e3_keep * w, cap + (size_t)(i1 - keep) * w, (size_t)keep * w * sizeof(float));
        sp->e3_pos0[s] = p0 + m - keep;
        sp->e3_n[s] = keep;
    }
    if (hn == 0) return QR_OK;
    const qr_batch hb = {.n_tokens = hn, .token = sp->e3_tok, .seq_id = sp->e3_seq, .logits = sp->e3_want};
    qr_context_set_row_input(sp->dctx, sp->e3_in, sp->e3_w);
    char msg[512];
    const qr_status st = qr_decode(sp->dctx, &hb, msg, sizeof msg);
    if (st != QR_OK) {
        for (int32_t i = 0; i < hn; i++) sp->e3_n[sp->e3_seq[i]] = 0;
        return qr_errf(err, err_len, st, "EAGLE-3 head: %s", msg);
    }
    return QR_OK;
}

/* One draft step of the head on sequence seq: token with `in` (width floats: captured states or g); its logits
 * into sp->dlogits, its pre-norm state into sp->e3_g. */
static qr_status e3_step(qr_spec *sp, int32_t seq, int32_t token, const float *in, int32_t width, char *err,
                         size_t err_len) {
    const int8_t want = 1;
    const qr_batch hb = {.n_tokens = 1, .token = &token, .seq_id = &seq, .logits = &want};
    qr_context_set_row_input(sp->dctx, in, width);
    qr_status st = qr_decode(sp->dctx, &hb, err, err_len);
    if (st != QR_OK) return st;
    const float *l = qr_get_logits(sp->dctx, 0), *pre = qr_context_pre_rows(sp->dctx);
    if (!l || !pre) return qr_errf(err, err_len, QR_ERR_INTERNAL, "no logits");
    memcpy(sp->dlogits, l, sizeof(float) * (size_t)qr_model_n_logits(sp->p.draft_model));
    memcpy(sp->e3_g, pre, sizeof(float) * (size_t)sp->p.draft_model->hp.n_embd);
    return QR_OK;
}

/* The EAGLE-3 drafter (see qr_spec_draft): a chain from the last decoded position P (the state the target left
 * there, with the token just sampled), then the head's own states. */
static int32_t draft_eagle3(qr_spec *sp, int32_t seq, const int32_t *hist, int32_t n_hist, int32_t max,
                            qr_sampler *smp, int32_t *draft, char *err, size_t err_len) {
    const int32_t P = n_hist - 2;
    if (P < 0 || qr_kv_seq_len(sp->ctx, seq) != n_hist - 1 || sp->e3_n[seq] == 0 || P < sp->e3_pos0[seq] ||
        P >= sp->e3_pos0[seq] + sp->e3_n[seq])
        return 0; /* the target's states at P are not at hand */
    e3_cut(sp, seq, P);
    if (P - sp->e3_off[seq] + max > sp->dcap) max = sp->dcap - (P - sp->e3_off[seq]);
    if (max <= 0) return 0;
    const float *feat = sp->e3_feat + ((size_t)seq * sp->e3_keep + (size_t)(P - sp->e3_pos0[seq])) * (size_t)sp->e3_w;
    if (e3_step(sp, seq, hist[n_hist - 1], feat, sp->e3_w, err, err_len) != QR_OK) return -1;
    const float temp = smp ? qr_sampler_get_params(smp)->temperature : 0.0f;
    const int32_t nv = qr_model_n_logits(sp->p.draft_model), E = sp->p.draft_model->hp.n_embd;
    int32_t k = 0;
    for (; k < max; k++) {
        int32_t token;
        if (!pick_token(sp, seq, k, sp->dlogits, nv, sp->e3_d2t, temp, smp, &token)) break;
        draft[k] = token;
        if (k + 1 == max) {
            k++;
            break;
        }
        if (e3_step(sp, seq, token, sp->e3_g, E, err, err_len) != QR_OK) return -1;
    }
    return k;
}

int32_t qr_spec_draft(qr_spec *sp, int32_t seq, const int32_t *hist, int32_t n_hist, int32_t max, qr_sampler *smp,
                      int32_t *draft, char *err, size_t err_len) {
    if (max <= 0 || n_hist <= 0 || seq < 0 || seq >= sp->n_seq) return 0;
    if (sp->skip[seq] > 0) { /* paused after drafts of which nothing stood */
        sp->skip[seq]--;
        return 0;
    }
    const int32_t cap = sp->cur_max[seq] > sp->p.draft_min ? sp->cur_max[seq] : sp->p.draft_min;
    if (max > cap) max = cap;
    int32_t k;
    if (sp->p.kind == QR_SPEC_DRAFT || sp->p.kind == QR_SPEC_EAGLE3) {
        k = sp->p.kind == QR_SPEC_DRAFT ? draft_model(sp, seq, hist, n_hist, max, smp, draft, err, err_len)
                                        : draft_eagle3(sp, seq, hist, n_hist, max, smp, draft, err, err_len);
        if (k < 0) return -1;
        /* a model that was not confident enough to draft anything cost a pass of its own: pause it as after a
         * rejected draft (n-gram misses cost nothing) */
        if (k == 0 || k < sp->p.draft_min) backoff(sp, seq);
    } else {
        k = qr_spec_ngram_lookup(hist, n_hist, sp->p.ngram_min, sp->p.ngram_max, max, draft);
    }
    if (k < sp->p.draft_min || k == 0) return 0;
    if (qr_knob_int(QR_KNOB_SPEC_TRACE)) {
        fprintf(stderr, "spec: seq %d at %d: drafted", seq, n_hist - 1);
        for (int32_t i = 0; i < k; i++) fprintf(stderr, " %d", draft[i]);
        fprintf(stderr, "\n");
    }
    return k;
}

qr_status qr_spec_verify(qr_spec *sp, qr_sampler *smp, int32_t seq, int32_t token, const int32_t *draft, int32_t k,
                         int32_t *out, int32_t *n_out, char *err, size_t err_len) {
    int32_t rows[QR_SPEC_DRAFT_MAX + 1], seqs[QR_SPEC_DRAFT_MAX + 1];
    int8_t want[QR_SPEC_DRAFT_MAX + 1];
    char msg[1024];
    *n_out = 0;
    if (k < 1 || k > QR_SPEC_DRAFT_MAX)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "speculative verification: %d drafted tokens", k);
    for (int32_t i = 0; i <= k; i++) {
        rows[i] = i ? draft[i - 1] : token;
        seqs[i] = seq;
        want[i] = 1;
    }
    const int32_t pos0 = qr_kv_seq_len(sp->ctx, seq);
    const qr_batch b = {.n_tokens = k + 1, .token = rows, .seq_id = seqs, .logits = want};
    qr_context_set_row_exact(sp->ctx, true);
    qr_status st = qr_decode(sp->ctx, &b, msg, sizeof msg);
    qr_context_set_row_exact(sp->ctx, false);
    if (st != QR_OK) return qr_errf(err, err_len, st, "decode: %s", msg);
    if ((st = qr_spec_observe(sp, &b, msg, sizeof msg)) != QR_OK) {
        qr_kv_seq_rm(sp->ctx, seq, pos0, -1);
        return qr_errf(err, err_len, st, "%s", msg);
    }
    int32_t n_acc = 0;
    for (int32_t i = 0; i <= k; i++) {
        int32_t n_q = 0;
        const qr_token_prob *q = i < k ? qr_spec_q(sp, seq, i, &n_q) : NULL;
        qr_sample_result res;
        bool acc = false;
        if ((st = qr_sampler_verify(smp, qr_get_logits(sp->ctx, i), i < k ? draft[i] : -1, q, n_q, &res, &acc, msg,
                                    sizeof msg)) != QR_OK) {
            qr_kv_seq_rm(sp->ctx, seq, pos0, -1);
            return qr_errf(err, err_len, st, "sampling: %s", msg);
        }
        out[(*n_out)++] = res.token;
        if (!acc) break;
        n_acc++;
    }
    /* rows 0..n_acc (token and the drafts that stood) stay in the cache; the rest is rolled back */
    qr_kv_seq_rm(sp->ctx, seq, pos0 + n_acc + 1, -1);
    qr_spec_count(sp, seq, k, n_acc);
    return QR_OK;
}
