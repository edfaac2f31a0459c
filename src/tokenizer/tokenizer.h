/* tokenizer.h — text <-> token ids, identical to llama.cpp's tokenizers, built from the
 * `tokenizer.ggml.*` metadata of a GGUF file.
 *
 * Supported `tokenizer.ggml.model` values:
 *   "llama" (SPM: merge-by-score over UTF-8 characters, <0xXX> byte fallback, "▁" for spaces),
 *   "gpt2"  (byte-level BPE: merge ranks, GPT-2 byte<->unicode mapping, a pre-tokenizer chosen by
 *            `tokenizer.ggml.pre`, run with PCRE2),
 *   "bert"  (WordPiece as llama.cpp converts it: word starts carry a "▁" prefix in the GGUF vocab
 *            instead of continuations carrying "##"; lowercase + strip accents; [UNK] per word).
 *
 * A qr_tokenizer is immutable after creation: every function below may be called from several
 * threads at once on the same tokenizer (each call allocates its own scratch memory).
 */
#ifndef QR_TOKENIZER_H
#define QR_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quarrel.h"
#include "gguf/gguf.h"

/* Public, declared in quarrel.h: qr_tokenizer (the type), QR_TOKEN_NULL, qr_tokenizer_free, qr_tokenize,
 * qr_detokenize, qr_token_to_piece, qr_token_is_eog, qr_token_is_control and the streaming detokenizer
 * qr_detok_stream_*. This header adds what the library itself needs. */

typedef enum qr_vocab_type {
    QR_VOCAB_SPM = 1, /* "llama" */
    QR_VOCAB_BPE = 2, /* "gpt2" */
    QR_VOCAB_WPM = 3, /* "bert" */
} qr_vocab_type;

/* Per-token attributes (bit flags, same values as llama.cpp's llama_token_attr). */
typedef enum qr_token_attr {
    QR_TOKEN_ATTR_UNDEFINED = 0,
    QR_TOKEN_ATTR_UNKNOWN = 1 << 0,
    QR_TOKEN_ATTR_UNUSED = 1 << 1,
    QR_TOKEN_ATTR_NORMAL = 1 << 2,
    QR_TOKEN_ATTR_CONTROL = 1 << 3,
    QR_TOKEN_ATTR_USER_DEFINED = 1 << 4,
    QR_TOKEN_ATTR_BYTE = 1 << 5,
    QR_TOKEN_ATTR_NORMALIZED = 1 << 6,
    QR_TOKEN_ATTR_LSTRIP = 1 << 7,
    QR_TOKEN_ATTR_RSTRIP = 1 << 8,
    QR_TOKEN_ATTR_SINGLE_WORD = 1 << 9,
} qr_token_attr;

/* Special token ids; QR_TOKEN_NULL where the model has none. */
typedef struct qr_special_tokens {
    int32_t bos, eos, eot, eom, unk, sep, pad, mask;
    int32_t cls;      /* == bos, as in llama.cpp */
    int32_t linefeed; /* the token of "\n" (SPM: <0x0A>) or pad when absent */
    int32_t fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
} qr_special_tokens;

/* What the tokenizer was built from, and its behaviour flags. */
typedef struct qr_tokenizer_info {
    qr_vocab_type type;
    const char *model;         /* tokenizer.ggml.model, NUL-terminated */
    const char *pre;           /* tokenizer.ggml.pre ("" when absent), NUL-terminated */
    uint32_t n_vocab;          /* number of tokens; ids are 0..n_vocab-1 */
    uint32_t n_merges;         /* BPE merges loaded (0 for SPM/WPM) */
    bool add_bos, add_eos, add_sep; /* added by qr_tokenize when add_special is true */
    bool add_space_prefix;     /* SPM: a space is put before text that starts a fragment */
    bool clean_spaces;         /* qr_detokenize removes spaces before ?!., and in contractions */
    bool ignore_merges;        /* BPE: a pre-token that is itself a token is not merged */
    bool remove_extra_whitespaces;
    qr_special_tokens special;
} qr_tokenizer_info;

/* Builds a tokenizer from the `tokenizer.ggml.*` metadata of `g` (which may be closed afterwards:
 * everything is copied). Errors name the offending key, e.g.
 *   "tokenizer.ggml.merges: entry 12 ('a b'): 'b' is not a token". */
qr_status qr_tokenizer_create(const qr_gguf *g, qr_tokenizer **out, char *err, size_t err_len);

const qr_tokenizer_info *qr_tokenizer_get_info(const qr_tokenizer *tok);

/* Zero-copy view of the piece qr_token_to_piece gives with special = true; NULL when id is out of range. */
const char *qr_token_piece(const qr_tokenizer *tok, int32_t id, size_t *len);
/* The raw vocabulary string of a token (as stored in the GGUF); NULL when out of range. */
const char *qr_token_text(const qr_tokenizer *tok, int32_t id, size_t *len);
/* A token's attributes (qr_token_attr bits); QR_TOKEN_ATTR_UNDEFINED when out of range. */
uint32_t qr_token_get_attr(const qr_tokenizer *tok, int32_t id);
float qr_token_score(const qr_tokenizer *tok, int32_t id);
/* The id of an exact vocabulary string, or QR_TOKEN_NULL. */
int32_t qr_token_lookup(const qr_tokenizer *tok, const char *text, size_t len);
/* All end-of-generation ids, ascending; *n receives their count. */
const int32_t *qr_tokenizer_eog_ids(const qr_tokenizer *tok, size_t *n);

#endif /* QR_TOKENIZER_H */
