/* spec.h — speculative decoding inside the engine (spec.c): the drafters (n-gram lookup, draft model with
 * its own KV cache kept in step with the target's sequences) and the verification of a draft, shared by
 * qr_generate (quarrel run / chat) and the scheduler (quarrel serve). The public face is qr_spec in
 * quarrel.h. */
#ifndef QR_MODEL_SPEC_H
#define QR_MODEL_SPEC_H

#include <stdbool.h>
#include <stdint.h>

#include "quarrel.h"
#include "sampling/sampler.h"

/* Draft distributions keep at most this many tokens (the draft model's top logits). */
#define QR_SPEC_Q_MAX 32

struct qr_spec {
    qr_context *ctx;        /* the target's context */
    qr_spec_params p;
    int32_t n_seq;          /* the target context's sequences */
    int32_t n_vocab;        /* tokens both models have (the target's when there is no draft model) */
    /* draft model (QR_SPEC_DRAFT) */
    qr_context *dctx;       /* the draft model's context: n_seq sequences, the target's size */
    int32_t **dtok;         /* [n_seq][dcap] tokens held in the draft's KV cache per sequence */
    int32_t *dlen;          /* [n_seq] entries of dtok[s] (= the draft's sequence length) */
    int32_t dcap;           /* the draft context's size */
    float *dlogits;         /* [n_vocab] scratch */
    qr_token_prob *q;       /* [n_seq][QR_SPEC_DRAFT_MAX][QR_SPEC_Q_MAX] the last draft's distributions */
    int32_t *n_q;           /* [n_seq][QR_SPEC_DRAFT_MAX] entries of each (0: a point mass) */
    /* draft length control per sequence: a draft costs a verification pass whose price grows with its rows
     * (on a CPU each row costs about half a decode step), so drafts grow while they are accepted whole and
     * shrink to what was accepted; after a draft of which nothing stood, drafting pauses for 2, 4, ... 64
     * steps (text that the drafter cannot predict costs almost nothing) */
    int32_t *cur_max;       /* [n_seq] most tokens of the next draft (1..p.draft_max) */
    int32_t *skip;          /* [n_seq] steps left without drafting */
    int32_t *fails;         /* [n_seq] verifications in a row that kept nothing */
    /* EAGLE-3 head (QR_SPEC_EAGLE3): dctx is the head's context, whose sequence s holds a KV row per target position
     * from e3_off[s] on (head position = target position - e3_off[s]: rope is relative, so a head that starts late,
     * after a prefix-cache hit, sees the same attention). Row P pairs the token at P + 1 with the target's states
     * at P (teacher forcing, qr_spec_observe); drafting starts at the last decoded position with the token just
     * sampled, then feeds the head's own pre-norm state back. */
    int32_t e3_w;           /* 3 * the target's n_embd: a row of captured states */
    int32_t e3_keep;        /* rows of captured states kept per sequence: draft_max + 1 (a verification's rows) */
    float *e3_feat;         /* [n_seq][e3_keep][e3_w] the captured states of the last rows of s's last target batch */
    int32_t *e3_pos0;       /* [n_seq] the target position of e3_feat[s]'s first row */
    int32_t *e3_n;          /* [n_seq] rows kept (0: none: no draft until the target decodes s again) */
    int32_t *e3_off;        /* [n_seq] */
    int32_t *e3_cnt;        /* [n_seq] scratch: rows of each sequence in a target batch */
    float *e3_in;           /* [e3_cap][e3_w] the head batch's row inputs */
    int32_t *e3_tok, *e3_seq;
    int8_t *e3_want;        /* [e3_cap] */
    int32_t e3_cap;
    float *e3_g;            /* [head n_embd] the state fed back while drafting */
    const char *e3_d2t;     /* the head's d2t (I64 target ids of its draft vocabulary) or NULL */
    qr_spec_stats stats;
};

/* Drafts at most max (<= p.draft_max) tokens continuing hist[0..n_hist) of target sequence seq (the prompt
 * and every token generated so far, whose last one the target has not decoded yet) into draft[]; returns
 * how many (0: no draft, or one shorter than p.draft_min). smp: the target's sampler: with temperature > 0
 * the draft model samples its tokens (at that temperature, from its top QR_SPEC_Q_MAX logits, drawing from
 * smp's PRNG) and keeps the distributions for qr_spec_q; otherwise drafts are greedy (point masses). The draft
 * model's cache is first brought to hist[0..n_hist) (rolled back to the common prefix, then the missing tokens
 * decoded), so rejected draft tokens need no explicit rollback. A draft-model decode error returns -1 with
 * the message in err. */
int32_t qr_spec_draft(qr_spec *sp, int32_t seq, const int32_t *hist, int32_t n_hist, int32_t max,
                      qr_sampler *smp, int32_t *draft, char *err, size_t err_len);

/* EAGLE-3: hands the head the target's captured states of batch b, which the target's context just decoded (before
 * any rollback): per sequence, the head's KV rows up to the batch's second-to-last row (teacher forcing), and the
 * states of the batch's last rows for the next draft. Nothing for other drafters. A head decode error is returned
 * (the sequences of b draft nothing until their next target batch). */
qr_status qr_spec_observe(qr_spec *sp, const qr_batch *b, char *err, size_t err_len);

/* Verifies draft[0..k) (1 <= k <= QR_SPEC_DRAFT_MAX) continuing target sequence seq after `token` (sampled,
 * not decoded): one row-exact pass over [token, draft...] with logits for every row, then qr_sampler_verify
 * row by row with smp (the drafts' distributions from qr_spec_q): out[0..*n_out) gets the drafts that stood
 * and the target's own next token (n_out = accepted + 1 <= k + 1); the cache keeps token and the accepted
 * drafts (the last out token is not decoded), the rest is rolled back; the counters are updated. */
qr_status qr_spec_verify(qr_spec *sp, qr_sampler *smp, int32_t seq, int32_t token, const int32_t *draft, int32_t k,
                         int32_t *out, int32_t *n_out, char *err, size_t err_len);

/* The distribution draft token i of seq's last draft was drawn from (*n entries), NULL for a point mass. */
const qr_token_prob *qr_spec_q(const qr_spec *sp, int32_t seq, int32_t i, int32_t *n);

/* Counts one verification of n_drafted tokens of sequence seq of which n_accepted stood (and adapts the
 * sequence's next draft length). */
void qr_spec_count(qr_spec *sp, int32_t seq, int32_t n_drafted, int32_t n_accepted);

/* Forgets what the draft model holds of sequence seq and its draft length state (a new generation, a
 * finished or preempted request). */
void qr_spec_seq_reset(qr_spec *sp, int32_t seq);

/* The longest drafted run ending at hist[n_hist) that the n-gram drafter proposes (pure; exposed for tests):
 * for n = ngram_max down to ngram_min, the last n tokens of hist are looked up at earlier positions (latest
 * first) and the tokens that followed the first match (at most max, within hist) are written to draft.
 * Returns their count (0: no match). */
int32_t qr_spec_ngram_lookup(const int32_t *hist, int32_t n_hist, int32_t ngram_min, int32_t ngram_max,
                             int32_t max, int32_t *draft);

/* The vocabulary of `other` (a draft model, an EAGLE-3 head; `role` names it in messages) must be the target's: the
 * same special tokens (BOS, EOS, EOT), add-BOS flag and text for every id both have, sizes (the models' and the
 * tokenizers') at most `slack` apart. *n_common: the ids both models have. QR_ERR_INVALID_ARG names the first
 * difference. */
qr_status qr_spec_check_vocab(const qr_model *target, const qr_model *other, const char *role, int32_t slack,
                              int32_t *n_common, char *err, size_t err_len);

/* Whether EAGLE-3 head `head` (eagle3.c) can draft for `target`: QR_OK, or an error naming the first mismatch: the
 * head's eagle3.target_hidden_size is not the target's n_embd; a target layer id past the target's n_layer (n_layer
 * itself is its last layer's output before the final norm); the head's tokenizer is not the target's (no size slack);
 * a target with Mamba2 layers, an encoder or another head; a head without token_embd / output (shared from the
 * target) whose width differs from the target's n_embd. */
qr_status qr_eagle3_check_target(const qr_model *head, const qr_model *target, char *err, size_t err_len);

#endif /* QR_MODEL_SPEC_H */
