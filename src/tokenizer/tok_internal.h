/* tok_internal.h — the tokenizer's private structures, shared by the src/tokenizer sources and the unit
 * tests (which build tokenizers from arrays through qr_tokenizer_create_from_desc). */
#ifndef QR_TOK_INTERNAL_H
#define QR_TOK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"

/* ---- byte strings ------------------------------------------------------------------------- */

typedef struct qr_tok_str {
    const char *data; /* [len] bytes, not NUL-terminated */
    size_t len;
} qr_tok_str;

/* ---- string -> id hash map (open addressing; keys are slices of caller-owned bytes) ---------- */

typedef struct qr_tok_strmap_slot {
    uint32_t id1;  /* id + 1, 0 = empty */
    uint32_t hash; /* full hash of the key */
} qr_tok_strmap_slot;

typedef struct qr_tok_strmap {
    qr_tok_strmap_slot *slots; /* [cap] */
    uint32_t cap;          /* power of two */
    uint32_t count;
    const char *const *key_data; /* [n] key bytes of id i, owned by the caller */
    const uint32_t *key_len;     /* [n] key length of id i */
} qr_tok_strmap;

uint32_t qr_tok_hash(const char *s, size_t n);
/* Builds a map over the n keys (data[i], len[i]); duplicate keys keep the last id (as llama.cpp's
 * token_to_id does) and are reported through *first_dup (index of the later duplicate or -1). */
qr_status qr_tok_strmap_build(qr_tok_strmap *m, const char *const *data, const uint32_t *len, uint32_t n,
                              int64_t *first_dup);
void qr_tok_strmap_free(qr_tok_strmap *m);
/* id of key s[0..n) or -1. */
int32_t qr_tok_strmap_find(const qr_tok_strmap *m, const char *s, size_t n);

/* ---- BPE merge table: (left id, right id) -> rank and result id ----------------------------- */

typedef struct qr_tok_merge_entry {
    uint64_t key;    /* (left << 32) | right, + 1 so that 0 means empty */
    int32_t rank;    /* index in tokenizer.ggml.merges (lowest rank wins for duplicates) */
    int32_t result;  /* token id of left+right, or -1 when that string is not a token */
} qr_tok_merge_entry;

typedef struct qr_tok_mergemap {
    qr_tok_merge_entry *slots; /* [cap] */
    uint32_t cap;              /* power of two */
    uint32_t count;
} qr_tok_mergemap;

/* ---- pre-tokenizer ------------------------------------------------------------------------ */

#define QR_TOK_MAX_REGEX 8

typedef struct qr_tok_regex {
    void *code;        /* pcre2_code_8 * */
    bool collapsed;    /* runs on the category-collapsed text (one byte per code point) */
} qr_tok_regex;

typedef struct qr_tok_pretok {
    const char *name;        /* canonical pre-tokenizer name */
    int n_regex;
    qr_tok_regex regex[QR_TOK_MAX_REGEX];
} qr_tok_pretok;

/* ---- the tokenizer ------------------------------------------------------------------------ */

struct qr_tokenizer {
    qr_tokenizer_info info;
    char model_name[32];       /* storage of info.model */
    char *pre_name;            /* storage of info.pre (malloc) */

    uint32_t n_vocab;
    char *text_arena;          /* all token texts back to back */
    const char **text;         /* [n_vocab] token text (into text_arena) */
    uint32_t *text_len;        /* [n_vocab] bytes */
    float *score;              /* [n_vocab] */
    uint32_t *attr;            /* [n_vocab] qr_token_attr bits */
    char *piece_arena;         /* token_to_piece(special = true) of every token, back to back */
    uint32_t *piece_off;       /* [n_vocab + 1] offsets into piece_arena */
    uint32_t max_token_len;    /* longest token text in bytes */

    qr_tok_strmap map;         /* text -> id */
    qr_tok_mergemap merges;    /* BPE only */
    int32_t byte_token[256];   /* BPE: token of the byte-unicode char of each byte; SPM: <0xXX>
                                * or the 1-byte string; -1 when absent */

    int32_t *special_cache;    /* [n_special] control/user-defined/unknown ids, longest text first */
    uint32_t n_special;
    struct qr_tok_trie_node *trie; /* [n_trie] trie of the special texts (node 0 unused) */
    uint32_t n_trie;
    int32_t trie_root[256];    /* node of each first byte, 0 when no special text starts with it */

    int32_t *eog;              /* [n_eog] ascending */
    size_t n_eog;

    qr_tok_pretok pre;         /* BPE only */
    bool byte_encode;          /* BPE: GPT-2 byte<->unicode mapping of pre-tokens */
    bool lowercase;            /* WPM normalizer */
    bool strip_accents;        /* WPM normalizer */
};

/* A trie node over special-token texts (children as a sibling list). */
typedef struct qr_tok_trie_node {
    int32_t child;    /* first child node or 0 */
    int32_t sibling;  /* next sibling node or 0 */
    int32_t special;  /* index into special_cache of the token ending here, or -1 */
    uint8_t byte;     /* the byte that leads here */
} qr_tok_trie_node;

/* Everything the tokenizer is built from: what the GGUF keys hold, with "has_" for optional ones. */
typedef struct qr_tokenizer_desc {
    const char *model;             /* tokenizer.ggml.model */
    const char *pre;               /* tokenizer.ggml.pre or NULL */
    const char *general_name;      /* general.name or NULL (phi-3 special-token strip rules) */
    const char *general_arch;      /* general.architecture or NULL */
    uint32_t n_tokens;
    const qr_tok_str *tokens;      /* [n_tokens] */
    const float *scores;           /* [n_tokens] or NULL */
    const int32_t *token_types;    /* [n_tokens] or NULL (llama.cpp token types 0..6) */
    uint32_t n_merges;
    const qr_tok_str *merges;      /* [n_merges] "left right" */
    bool has_bos, has_eos, has_eot, has_eom, has_unk, has_sep, has_pad, has_mask;
    uint32_t bos, eos, eot, eom, unk, sep, pad, mask;
    bool has_fim_pre, has_fim_suf, has_fim_mid, has_fim_pad, has_fim_rep, has_fim_sep;
    uint32_t fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
    bool has_add_bos, has_add_eos, has_add_sep, has_add_space_prefix, has_remove_extra_ws;
    bool add_bos, add_eos, add_sep, add_space_prefix, remove_extra_ws;
    bool has_lowercase, has_strip_accents;
    bool lowercase, strip_accents;
} qr_tokenizer_desc;

/* Builds a tokenizer from a description (everything is copied). */
qr_status qr_tokenizer_create_from_desc(const qr_tokenizer_desc *d, qr_tokenizer **out, char *err,
                                        size_t err_len);

/* ---- unicode helpers (tok_unicode.c) ------------------------------------------------------ */

/* llama.cpp code point flags (unicode.h), computed from utf8proc categories. */
enum {
    QR_CPT_UNDEFINED = 0x0001,
    QR_CPT_NUMBER = 0x0002,
    QR_CPT_LETTER = 0x0004,
    QR_CPT_SEPARATOR = 0x0008,
    QR_CPT_MARK = 0x0010,
    QR_CPT_PUNCTUATION = 0x0020,
    QR_CPT_SYMBOL = 0x0040,
    QR_CPT_CONTROL = 0x0080,
    QR_CPT_CATEGORIES = 0x00FF,
    QR_CPT_WHITESPACE = 0x0100,
};

/* Category flags (plus QR_CPT_WHITESPACE) of a code point; QR_CPT_UNDEFINED beyond U+10FFFF. */
uint16_t qr_tok_cpt_flags(uint32_t cpt);
/* Decodes one code point at s[*off] the way llama.cpp does (no overlong/surrogate checks; an
 * invalid lead or truncated sequence gives U+FFFD and advances one byte). */
uint32_t qr_tok_utf8_decode(const char *s, size_t n, size_t *off);
/* Encodes cpt (any value < 2^21) into out (4 bytes); returns its length. */
size_t qr_tok_utf8_encode(uint32_t cpt, char *out);
/* Length of the UTF-8 sequence that starts with byte c, from its high nibble (1..4). */
static inline size_t qr_tok_utf8_len(unsigned char c) {
    static const uint8_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[c >> 4];
}
uint32_t qr_tok_tolower(uint32_t cpt);
/* GPT-2 byte -> unicode code point, and back (-1 when the code point is not one of the 256). */
uint32_t qr_tok_byte_to_cpt(uint8_t b);
int qr_tok_cpt_to_byte(uint32_t cpt);

/* ---- growable buffers --------------------------------------------------------------------- */

typedef struct qr_tok_ids {
    int32_t *v;
    size_t n, cap;
} qr_tok_ids;

bool qr_tok_ids_push(qr_tok_ids *a, int32_t id);

typedef struct qr_tok_bytes {
    char *v;
    size_t n, cap;
} qr_tok_bytes;

bool qr_tok_bytes_append(qr_tok_bytes *b, const void *data, size_t n);

/* ---- model algorithms (tok_spm.c, tok_bpe.c, tok_wpm.c, tok_pretok.c) ---------------------- */

/* Each appends the tokens of one text fragment (no special tokens in it) to out. */
qr_status qr_tok_spm_fragment(const qr_tokenizer *tok, const char *text, size_t len, qr_tok_ids *out);
qr_status qr_tok_bpe_fragment(const qr_tokenizer *tok, const char *text, size_t len, qr_tok_ids *out);
qr_status qr_tok_wpm_fragment(const qr_tokenizer *tok, const char *text, size_t len, qr_tok_ids *out);

/* Pre-tokenizer: chooses the regexes of `name` (NULL or "" = "default"); fills flag overrides. */
typedef struct qr_tok_pre_flags {
    bool ignore_merges, clean_spaces, add_bos, bos_null, add_sep;
} qr_tok_pre_flags;
qr_status qr_tok_pretok_init(qr_tok_pretok *p, const char *name, qr_tok_pre_flags *flags, char *err,
                             size_t err_len);
void qr_tok_pretok_free(qr_tok_pretok *p);

/* A text split into words: code points cpts[0..n_cpts) and word lengths (in code points). */
typedef struct qr_tok_words {
    uint32_t *cpts;
    size_t n_cpts;
    size_t *lens;   /* [n_words] lengths in code points, each > 0 */
    size_t n_words;
    size_t cap_words;
} qr_tok_words;

/* Decodes text and splits it with the pre-tokenizer's regexes (llama.cpp unicode_regex_split). */
qr_status qr_tok_pretok_split(const qr_tok_pretok *p, const char *text, size_t len, qr_tok_words *w);
void qr_tok_words_free(qr_tok_words *w);

/* Merge table: init sizes it for n merges; insert keeps the first (lowest-rank) entry of a pair. */
qr_status qr_tok_mergemap_init(qr_tok_mergemap *m, uint32_t n);
void qr_tok_merge_insert(qr_tok_mergemap *m, int32_t left, int32_t right, int32_t rank, int32_t result);
void qr_tok_mergemap_free(qr_tok_mergemap *m);
/* The entry of the pair (left, right), or NULL. */
const qr_tok_merge_entry *qr_tok_merge_find(const qr_tok_mergemap *m, int32_t left, int32_t right);

#endif /* QR_TOK_INTERNAL_H */
