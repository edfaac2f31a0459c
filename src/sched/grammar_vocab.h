/* grammar_vocab.h — a tokenizer's vocabulary as a qr_grammar_vocab (token bytes + special/EOG flags).
 * Lives above both the tokenizer and the sampling layer, which know nothing of each other. */
#ifndef QR_SCHED_GRAMMAR_VOCAB_H
#define QR_SCHED_GRAMMAR_VOCAB_H

#include "sampling/grammar.h"
#include "tokenizer/tokenizer.h"

/* Builds the grammar trie of tok: each token's bytes are its decoded piece (what the detokenizer
 * emits for it); control, unknown and unused tokens are QR_GRAMMAR_TOKEN_SPECIAL and
 * end-of-generation tokens QR_GRAMMAR_TOKEN_EOG. Free with qr_grammar_vocab_free. */
qr_status qr_grammar_vocab_from_tokenizer(const qr_tokenizer *tok, qr_grammar_vocab **out, char *err, size_t err_len);

#endif /* QR_SCHED_GRAMMAR_VOCAB_H */
