/* sampler.h — next-token sampling and generation stop rules.
 *
 * The sampler turns one row of logits ([n_vocab] floats) into a token id. Its chain runs in the order
 * of llama.cpp's default sampler chain:
 *
 *     logit bias -> penalties (repeat, frequency, presence over the last `penalty_last_n` tokens)
 *       -> top-k -> top-p -> min-p -> temperature -> draw from the softmax (own seeded PRNG)
 *
 * An optional grammar stage (qr_sampler_set_grammar) constrains the result: the chain runs on the
 * unmasked logits first and, when the token it picks is one the grammar allows, that token stands
 * (the common case, costing one walk over the token's bytes); otherwise the grammar's allowed-token
 * mask sets every other logit to -inf and the chain runs again. For greedy this is exactly the
 * argmax of the masked logits; for sampling it draws from the masked distribution too (a rejected
 * first draw falls through to the masked one, which adds up to the same probabilities, up to how
 * top-k/top-p truncation meets the mask).
 *
 * With temperature <= 0 the chain collapses to greedy: the argmax of the biased, penalised logits
 * (ties go to the lowest token id). top-p and min-p are computed on the probabilities before
 * temperature, as in llama.cpp. Everything is deterministic: the same seed, parameters, accepted
 * history and logits give the same tokens on every machine.
 *
 * The stop checker (qr_stop) holds back generated text that could still become a stop string (also
 * across token boundaries) or that ends in an incomplete UTF-8 sequence, and tells the caller how
 * much text is safe to emit. It also enforces max_tokens and end-of-generation tokens.
 */
#ifndef QR_SAMPLING_SAMPLER_H
#define QR_SAMPLING_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quarrel.h"
#include "sampling/grammar.h"

/* seed value meaning "pick a random seed at create time" (qr_sampler_seed tells which). */
#define QR_SAMPLER_SEED_RANDOM UINT64_MAX
/* Most alternatives qr_sample_result can carry (OpenAI's top_logprobs limit). */
#define QR_SAMPLER_MAX_LOGPROBS 20

/* A bias added to one token's logit before anything else. -INFINITY bans the token. */
typedef struct qr_logit_bias {
    int32_t token; /* 0 <= token < n_vocab */
    float bias;    /* added to the logit; finite or -INFINITY, never NaN */
} qr_logit_bias;

typedef struct qr_sampler_params {
    float temperature;       /* >= 0; 0 = greedy (argmax). default 0.8 */
    int32_t top_k;           /* >= 0; 0 = off. default 40 */
    float top_p;             /* in [0, 1]; 1 = off, 0 = the top token only. default 0.95 */
    float min_p;             /* in [0, 1]; 0 = off. default 0.05 */
    float repeat_penalty;    /* > 0; 1 = off. positive logits are divided by it, negative multiplied */
    float frequency_penalty; /* any finite value; 0 = off. subtracted once per occurrence in the window */
    float presence_penalty;  /* any finite value; 0 = off. subtracted once if the token is in the window */
    int32_t penalty_last_n;  /* >= 0: window of most recent accepted tokens; 0 = penalties off. default 64 */
    uint64_t seed;           /* PRNG seed; QR_SAMPLER_SEED_RANDOM = random */
    const qr_logit_bias *logit_bias; /* [n_logit_bias], copied by qr_sampler_create; may be NULL */
    int32_t n_logit_bias;
    bool logprobs;           /* compute the chosen token's logprob (costs one pass over the vocab) */
    int32_t n_logprobs;      /* 0..QR_SAMPLER_MAX_LOGPROBS alternatives to report (needs logprobs) */
} qr_sampler_params;

/* One (token, log-probability) pair. */
typedef struct qr_token_logprob {
    int32_t token;
    float logprob; /* natural log, <= 0 */
} qr_token_logprob;

/* What qr_sampler_sample returns. */
typedef struct qr_sample_result {
    int32_t token;   /* the chosen token */
    float logprob;   /* log-softmax of the chosen token under the logits passed in (before bias,
                        penalties, truncation and temperature), as OpenAI's `logprobs` reports;
                        0 when params.logprobs is false */
    int32_t n_top;   /* entries in top[] (params.n_logprobs, or fewer if n_vocab is smaller; 0 when
                        params.logprobs is false) */
    qr_token_logprob top[QR_SAMPLER_MAX_LOGPROBS]; /* the n_top most likely tokens under the same
                                                      distribution, most likely first (ties: lower id) */
} qr_sample_result;

typedef struct qr_sampler qr_sampler;

/* Fills *p with llama.cpp's defaults (temp 0.8, top_k 40, top_p 0.95, min_p 0.05, no penalties,
 * penalty_last_n 64, random seed, no bias, no logprobs). */
void qr_sampler_params_default(qr_sampler_params *p);

/* Greedy parameters: temperature 0, everything else off. */
void qr_sampler_params_greedy(qr_sampler_params *p);

/* Checks every field (ranges above, no NaN, bias tokens inside [0, n_vocab)). QR_ERR_INVALID_ARG with
 * a message naming the field otherwise. n_vocab <= 0 skips the token range check. */
qr_status qr_sampler_params_validate(const qr_sampler_params *p, int32_t n_vocab, char *err, size_t err_len);

/* Creates a sampler for logits rows of n_vocab floats. Validates p first. On success *out owns
 * copies of everything in p; free with qr_sampler_free. */
qr_status qr_sampler_create(const qr_sampler_params *p, int32_t n_vocab, qr_sampler **out, char *err,
                            size_t err_len);
void qr_sampler_free(qr_sampler *s);

/* The seed actually in use (the random one when params.seed was QR_SAMPLER_SEED_RANDOM). */
uint64_t qr_sampler_seed(const qr_sampler *s);

/* Forgets the penalty history and restarts the PRNG from the seed. */
void qr_sampler_reset(qr_sampler *s);

/* Appends a token to the penalty history (use it for prompt tokens; qr_sampler_sample accepts the
 * tokens it returns by itself). QR_ERR_INVALID_ARG when token is outside [0, n_vocab). */
qr_status qr_sampler_accept(qr_sampler *s, int32_t token);

/* Samples the next token from logits[0..n_vocab) (not modified) and accepts it into the history
 * (and the grammar). Errors: QR_ERR_INVALID_ARG when a logit is NaN, no token has a finite biased
 * logit, or no token the grammar allows has one ("grammar: ..."); QR_ERR_NOMEM. */
qr_status qr_sampler_sample(qr_sampler *s, const float *logits, qr_sample_result *out, char *err,
                            size_t err_len);

/* Takes `token` as the next token instead of sampling (a forced continuation, such as the end of a
 * reasoning section whose budget is spent): fills *out as qr_sampler_sample would (logprob under
 * logits when asked) and accepts the token into the history and the grammar. QR_ERR_INVALID_ARG when
 * token is outside [0, n_vocab) or the grammar does not allow it (nothing is accepted then). */
qr_status qr_sampler_force(qr_sampler *s, const float *logits, int32_t token, qr_sample_result *out, char *err,
                           size_t err_len);

/* Attaches grammar matcher m (the sampler owns it from now on and frees it; NULL detaches and frees
 * the previous one). Every token qr_sampler_sample returns afterwards is allowed by the grammar and
 * is accepted into it; qr_sampler_accept (prompt tokens) does not touch it; qr_sampler_reset
 * resets it. */
void qr_sampler_set_grammar(qr_sampler *s, qr_grammar_matcher *m);

/* The attached matcher or NULL (still owned by the sampler). */
qr_grammar_matcher *qr_sampler_grammar(qr_sampler *s);

/* The public chain's internals (sampler_chain.c), for qr_sampler_chain_set_grammar (sched/grammar_api.c):
 * its sampler, and the vocabulary trie it keeps for its grammar matcher (takes v; frees the previous one,
 * so detach the matcher first). */
qr_sampler *qr_sampler_chain_sampler(qr_sampler_chain *s);
void qr_sampler_chain_keep_vocab(qr_sampler_chain *s, qr_grammar_vocab *v);

/* A token and its probability. */
typedef struct qr_token_prob {
    int32_t token;
    float p;
} qr_token_prob;

/* The distribution qr_sampler_sample would draw from for logits[0..n_vocab) with the current history, before
 * the grammar (which this does not apply): out[0..*n_out) holds the tokens that survive bias, penalties and
 * truncation with their probabilities after temperature (summing to 1; greedy: the argmax with 1). out has
 * room for n_vocab entries. Nothing is drawn or accepted. Errors as qr_sampler_sample's. */
qr_status qr_sampler_dist(qr_sampler *s, const float *logits, qr_token_prob *out, int32_t *n_out, char *err,
                          size_t err_len);
/* One uniform draw in [0, 1) from the sampler's PRNG (advances it). */
double qr_sampler_uniform(qr_sampler *s);
/* The parameters the sampler was made with. */
const qr_sampler_params *qr_sampler_get_params(const qr_sampler *s);
/* The logits row length the sampler was made for. */
int32_t qr_sampler_n_vocab(const qr_sampler *s);

/* Speculative verification of one drafted token (spec_verify.c). Picks the next token from the target's
 * logits of the row that follows the tokens accepted so far, so that it is distributed exactly as
 * qr_sampler_sample's token (Leviathan et al. / Chen et al. rejection sampling), and accepts it into the
 * history (and the grammar) as qr_sampler_sample does; *accepted = (out->token == draft).
 * q[0..n_q): the drafter's distribution that `draft` was drawn from (NULL / 0: a deterministic drafter,
 * whose proposal is a point mass at draft: then the rule is "accept with probability p(draft), else draw
 * from p without draft", which is exactly a draw from p compared with the draft, and that is what runs).
 * With a proper q (temperature > 0, no grammar): draft is kept with probability min(1, p(d) / q(d)), else
 * the token is drawn from max(0, p - q) normalized. draft < 0 (the bonus row): a plain draw. */
qr_status qr_sampler_verify(qr_sampler *s, const float *logits, int32_t draft, const qr_token_prob *q, int32_t n_q,
                            qr_sample_result *out, bool *accepted, char *err, size_t err_len);

/* Most candidates a row's top-k list (qr_sampler_sample_topk) holds. */
#define QR_SAMPLER_TOPK_MAX 64

/* How many of a row's best candidates qr_sampler_sample_topk needs to give this sampler's next token exactly as
 * qr_sampler_sample would from the whole row: 1 (greedy), top_k + 1 (sampling with 0 < top_k < QR_SAMPLER_TOPK_MAX),
 * or 0 (the whole row: a grammar, logit bias, penalties in effect, logprobs, or no top-k). */
int32_t qr_sampler_topk_need(const qr_sampler *s);

/* qr_sampler_sample from a row's k best candidates instead of the row: vals / ids[0..k) in the chain's order (logit
 * descending, ties: the lower id first) and n_finite, the row's count of logits above -inf (-1: the row holds a NaN or
 * +inf). True when that gives qr_sampler_sample's token exactly (qr_sampler_topk_need(s) is not 0, k and n_finite are
 * at least that): *out gets it (no logprobs) and it is accepted; false changes nothing (sample from the row). */
bool qr_sampler_sample_topk(qr_sampler *s, const float *vals, const int32_t *ids, int32_t k, int32_t n_finite,
                            qr_sample_result *out);

/* Applies logit bias and penalties (the first two links of the chain) to logits[0..n_vocab) in place.
 * Exposed for tests and for callers that want the adjusted distribution. */
void qr_sampler_apply_penalties(qr_sampler *s, float *logits);

/* ---------------------------------------------------------------------------------------------
 * Stop rules: stop strings, max_tokens, end-of-generation tokens.
 */
typedef enum qr_finish_reason {
    QR_FINISH_NONE = 0,   /* keep generating */
    QR_FINISH_STOP = 1,   /* a stop string matched, or an end-of-generation token came */
    QR_FINISH_LENGTH = 2, /* max_tokens reached */
} qr_finish_reason;

/* Name as OpenAI reports it: NULL, "stop", "length". */
const char *qr_finish_reason_str(qr_finish_reason r);

typedef struct qr_stop qr_stop;

/* What one qr_stop_feed call decided. */
typedef struct qr_stop_result {
    const char *emit;         /* [emit_len] bytes that are now safe to send; valid until the next call */
    size_t emit_len;
    qr_finish_reason finish;  /* != QR_FINISH_NONE: stop generating (emit is the final text) */
    int32_t stop_index;       /* index of the matched stop string, or -1 */
} qr_stop_result;

/* stops: n_stops non-empty NUL-terminated strings (copied). max_tokens: > 0, or 0 for no limit.
 * QR_ERR_INVALID_ARG on an empty stop string, n_stops < 0 or max_tokens < 0. */
qr_status qr_stop_create(const char *const *stops, int32_t n_stops, int32_t max_tokens, qr_stop **out,
                         char *err, size_t err_len);
void qr_stop_free(qr_stop *s);

/* Feeds the text of one generated token (piece may be empty). is_eog: the token ends generation
 * (EOS/EOT; its own text is not emitted). Text up to a matched stop string is emitted, the stop
 * string and anything after it is dropped. When a finish comes, every held-back byte is emitted
 * (even an incomplete UTF-8 tail). After a finish, further calls emit nothing and repeat the reason.
 * Returns QR_ERR_NOMEM when the hold-back buffer cannot grow. */
qr_status qr_stop_feed(qr_stop *s, const char *piece, size_t len, bool is_eog, qr_stop_result *out);

/* Ends generation for an outside reason (client hung up: QR_FINISH_STOP; context full:
 * QR_FINISH_LENGTH; NONE counts as STOP): emits everything held back. No-op after a finish. */
void qr_stop_flush(qr_stop *s, qr_finish_reason reason, qr_stop_result *out);

/* Tokens fed so far. */
int32_t qr_stop_n_tokens(const qr_stop *s);

/* Length of the longest prefix of text[0..len) that is safe to emit given the stop strings: it stops
 * before the earliest full match, and before any suffix that is a proper prefix of a stop string, and
 * before a trailing incomplete UTF-8 sequence. *matched is set to the index of a full match or -1.
 * Pure function, exposed for tests. */
size_t qr_stop_safe_prefix(const char *const *stops, int32_t n_stops, const char *text, size_t len,
                           int32_t *matched);

#endif /* QR_SAMPLING_SAMPLER_H */
