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

#define QR_TOKEN_NULL (-1)

typedef struct qr_tokenizer qr_tokenizer;

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
void qr_tokenizer_free(qr_tokenizer *tok);

const qr_tokenizer_info *qr_tokenizer_get_info(const qr_tokenizer *tok);

/* Tokenizes text[0..len) (any bytes; invalid UTF-8 is handled as llama.cpp does).
 * add_special: add BOS/EOS/SEP as the model's add_* flags say. parse_special: text that spells a
 * control token (e.g. "<|im_start|>") becomes that token; user-defined tokens are always matched.
 * Writes min(n, cap) ids to out (out may be NULL when cap == 0) and sets *n_out = n, the total
 * number of tokens; a caller whose cap was too small calls again with cap >= *n_out.
 * Errors: QR_ERR_NOMEM; QR_ERR_NOT_FOUND when a byte has no token to fall back to. */
qr_status qr_tokenize(const qr_tokenizer *tok, const char *text, size_t len, bool add_special,
                      bool parse_special, int32_t *out, size_t cap, size_t *n_out);

/* The text of token `id` (special = true: control/unknown tokens give their text; false: they give
 * ""). Writes min(n, cap) bytes to buf (no NUL) and returns n, the piece's full length; returns -1
 * when id is out of range. */
int32_t qr_token_to_piece(const qr_tokenizer *tok, int32_t id, bool special, char *buf, size_t cap);
/* Zero-copy view of the same piece with special = true; NULL when id is out of range. */
const char *qr_token_piece(const qr_tokenizer *tok, int32_t id, size_t *len);
/* The raw vocabulary string of a token (as stored in the GGUF); NULL when out of range. */
const char *qr_token_text(const qr_tokenizer *tok, int32_t id, size_t *len);
/* A token's attributes (qr_token_attr bits); QR_TOKEN_ATTR_UNDEFINED when out of range. */
uint32_t qr_token_get_attr(const qr_tokenizer *tok, int32_t id);
float qr_token_score(const qr_tokenizer *tok, int32_t id);
/* End of generation (eos, eot, eom, <|im_end|>, ... as llama.cpp decides). */
bool qr_token_is_eog(const qr_tokenizer *tok, int32_t id);
bool qr_token_is_control(const qr_tokenizer *tok, int32_t id);
/* The id of an exact vocabulary string, or QR_TOKEN_NULL. */
int32_t qr_token_lookup(const qr_tokenizer *tok, const char *text, size_t len);
/* All end-of-generation ids, ascending; *n receives their count. */
const int32_t *qr_tokenizer_eog_ids(const qr_tokenizer *tok, size_t *n);

/* Token ids -> text, as llama.cpp's llama_detokenize: remove_special drops a leading BOS / trailing
 * EOS that the model adds; unparse_special renders control tokens as their text. SPM models drop
 * the space that tokenization put before the first word; clean_spaces models tidy " ." etc.
 * Writes min(n, cap) bytes (no NUL) and sets *n_out = n. Errors: QR_ERR_INVALID_ARG for an id out
 * of range (with no output). */
qr_status qr_detokenize(const qr_tokenizer *tok, const int32_t *ids, size_t n_ids, bool remove_special,
                        bool unparse_special, char *buf, size_t cap, size_t *n_out);

/* Streaming detokenizer: feed tokens one at a time and get back only whole UTF-8 characters.
 * Bytes of a character split across tokens are held until the character is complete; bytes that
 * can never form a valid character come out as U+FFFD. The first token loses its leading space
 * when the model adds a space prefix (as qr_detokenize does). No clean_spaces pass. */
typedef struct qr_detok_stream qr_detok_stream;

/* special: render control tokens as their text. NULL on OOM. */
qr_detok_stream *qr_detok_stream_create(const qr_tokenizer *tok, bool special);
void qr_detok_stream_free(qr_detok_stream *s);
/* Adds token `id`; *text and *len receive the bytes that are now complete (valid until the next call
 * on s). Errors: QR_ERR_INVALID_ARG for an id out of range, QR_ERR_NOMEM. */
qr_status qr_detok_stream_push(qr_detok_stream *s, int32_t id, const char **text, size_t *len);
/* Ends the stream: a pending incomplete character comes out as U+FFFD. The stream is reset. */
qr_status qr_detok_stream_flush(qr_detok_stream *s, const char **text, size_t *len);
void qr_detok_stream_reset(qr_detok_stream *s);

#endif /* QR_TOKENIZER_H */
