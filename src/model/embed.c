/* embed.c — qr_embed: tokenize texts, pack them (one sequence each) into embeddings passes of at
 * most n_batch rows / n_seq_max sequences / the KV cache's blocks, pool each sequence's final hidden
 * states (mean, first, last) and L2-normalize. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "kv/kv_cache.h"
#include "tokenizer/tokenizer.h"
#include "util/util.h"

#define KV_BLOCK 32 /* the context's KV block size (context.c) */

qr_embed_params qr_embed_default_params(void) {
    return (qr_embed_params){.pooling = QR_POOLING_MODEL, .normalize = true, .truncate = true};
}

int32_t qr_model_n_embd_out(const qr_model *m) { return m->hp.n_embd; }

/* The pooling to use for model m given the requested one; QR_POOLING_NONE when unusable. */
static qr_pooling resolve_pooling(const qr_model *m, qr_pooling want) {
    if (want == QR_POOLING_MODEL) {
        const int32_t pt = m->hp.pooling_type;
        if (pt >= QR_POOLING_MEAN && pt <= QR_POOLING_LAST) return (qr_pooling)pt;
        return m->arch->encoder ? QR_POOLING_MEAN : QR_POOLING_LAST;
    }
    if (want >= QR_POOLING_MEAN && want <= QR_POOLING_LAST) return want;
    return QR_POOLING_NONE;
}

/* One text's tokens. */
typedef struct text_toks {
    int32_t *ids;
    int32_t n;
} text_toks;

/* Pools rows [r0, r0 + n) of hidden[.][dim] into out[dim], then normalizes. */
static void pool(const float *hidden, int64_t dim, int32_t r0, int32_t n, qr_pooling pooling, bool normalize,
                 float *out) {
    if (pooling == QR_POOLING_MEAN) {
        for (int64_t i = 0; i < dim; i++) {
            double s = 0.0;
            for (int32_t r = r0; r < r0 + n; r++) s += hidden[(int64_t)r * dim + i];
            out[i] = (float)(s / n);
        }
    } else {
        const int32_t r = pooling == QR_POOLING_CLS ? r0 : r0 + n - 1;
        memcpy(out, hidden + (int64_t)r * dim, (size_t)dim * sizeof(float));
    }
    if (normalize) {
        double ss = 0.0;
        for (int64_t i = 0; i < dim; i++) ss += (double)out[i] * out[i];
        if (ss > 0.0) {
            const float inv = (float)(1.0 / sqrt(ss));
            for (int64_t i = 0; i < dim; i++) out[i] *= inv;
        }
    }
}

qr_status qr_embed(qr_context *ctx, const char *const *texts, int32_t n_texts, const qr_embed_params *p, float *out,
                   char *err, size_t err_len) {
    if (!ctx || !texts || !out) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "embed: NULL argument");
    if (n_texts < 1) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "embed: no texts given");
    const qr_embed_params prm = p ? *p : qr_embed_default_params();
    qr_model *m = qr_context_model(ctx);
    const qr_pooling pooling = resolve_pooling(m, prm.pooling);
    if (pooling == QR_POOLING_NONE)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG,
                       "embed: pooling %d does not give one vector per text (use mean, cls or last)", (int)prm.pooling);
    qr_status st;
    if (!m->embed_tok && (st = qr_tokenizer_create(m->gguf, &m->embed_tok, err, err_len)) != QR_OK) return st;
    const int64_t dim = m->hp.n_embd;
    const int32_t n_batch = qr_context_n_batch(ctx), n_seq_max = qr_context_n_seq_max(ctx);
    const int32_t kv_blocks = qr_context_n_ctx(ctx) / KV_BLOCK;
    int32_t max_tok = n_batch < m->hp.n_ctx_train ? n_batch : m->hp.n_ctx_train;
    if (max_tok > kv_blocks * KV_BLOCK) max_tok = kv_blocks * KV_BLOCK;
    const qr_tokenizer_info *ti = qr_tokenizer_get_info(m->embed_tok);
    const bool keep_last = ti->add_eos || ti->add_sep; /* keep the trailing special token when cutting */

    text_toks *tt = calloc((size_t)n_texts, sizeof *tt);
    int32_t *ptok = malloc((size_t)n_batch * sizeof(int32_t)), *pseq = malloc((size_t)n_batch * sizeof(int32_t));
    float *hidden = malloc((size_t)n_batch * (size_t)dim * sizeof(float));
    if (!tt || !ptok || !pseq || !hidden) {
        st = qr_errf(err, err_len, QR_ERR_NOMEM, "embed: out of memory");
        goto done;
    }
    /* tokenize */
    for (int32_t i = 0; i < n_texts; i++) {
        if (!texts[i]) {
            st = qr_errf(err, err_len, QR_ERR_INVALID_ARG, "embed: text %d is NULL", i);
            goto done;
        }
        const size_t len = strlen(texts[i]);
        size_t n = 0;
        st = qr_tokenize(m->embed_tok, texts[i], len, true, false, NULL, 0, &n);
        if (st == QR_OK && n > 0) {
            tt[i].ids = malloc(n * sizeof(int32_t));
            if (!tt[i].ids) st = QR_ERR_NOMEM;
            else st = qr_tokenize(m->embed_tok, texts[i], len, true, false, tt[i].ids, n, &n);
        }
        if (st != QR_OK) {
            st = qr_errf(err, err_len, st, "embed: text %d: tokenization failed (%s)", i, qr_status_str(st));
            goto done;
        }
        if (n == 0) {
            st = qr_errf(err, err_len, QR_ERR_INVALID_ARG, "embed: text %d has no tokens", i);
            goto done;
        }
        if ((int64_t)n > max_tok) {
            if (!prm.truncate) {
                st = qr_errf(err, err_len, QR_ERR_INVALID_ARG,
                             "embed: text %d has %zu tokens, more than the %d the model/context takes (truncation off)",
                             i, n, max_tok);
                goto done;
            }
            qr_log(QR_LOG_WARN, "embed: text %d has %zu tokens; truncated to %d", i, n, max_tok);
            if (keep_last) tt[i].ids[max_tok - 1] = tt[i].ids[n - 1];
            n = (size_t)max_tok;
        }
        tt[i].n = (int32_t)n;
    }
    /* pack consecutive texts into passes */
    for (int32_t i0 = 0; i0 < n_texts;) {
        int32_t rows = 0, seqs = 0, blocks = 0, i1 = i0;
        while (i1 < n_texts && seqs < n_seq_max) {
            const int32_t nb = (tt[i1].n + KV_BLOCK - 1) / KV_BLOCK;
            if (rows + tt[i1].n > n_batch || blocks + nb > kv_blocks) break;
            for (int32_t j = 0; j < tt[i1].n; j++) ptok[rows + j] = tt[i1].ids[j], pseq[rows + j] = seqs;
            rows += tt[i1].n;
            blocks += nb;
            seqs++;
            i1++;
        }
        if ((st = qr_context_embd_pass(ctx, ptok, pseq, rows, hidden, err, err_len)) != QR_OK) goto done;
        for (int32_t i = i0, r0 = 0; i < i1; r0 += tt[i].n, i++)
            pool(hidden, dim, r0, tt[i].n, pooling, prm.normalize, out + (int64_t)i * dim);
        i0 = i1;
    }
    st = QR_OK;
done:
    if (tt)
        for (int32_t i = 0; i < n_texts; i++) free(tt[i].ids);
    free(tt);
    free(ptok);
    free(pseq);
    free(hidden);
    return st;
}
