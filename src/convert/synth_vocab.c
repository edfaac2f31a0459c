/* synth_vocab.c — deterministic synthetic vocabularies for `quarrel synth`.
 *
 * Both kinds grow the same list of word pieces: start from single letters and the space marker, then
 * repeatedly join two existing pieces (picked with a bias toward early, i.e. "frequent", pieces) into
 * a new one, so that every piece is reachable by merging two shorter ones. English-like text then
 * compresses into multi-letter tokens, and anything else falls back to byte tokens.
 *
 *  BPE ("gpt2"): ids 0..3 specials, 4..259 the 256 byte-level tokens (GPT-2's bytes_to_unicode
 *                form, the space is "Ġ"), then one token per merge "left right".
 *  SPM ("llama"): ids 0..5 specials (<pad> <eos> <bos> <unk> <start_of_turn> <end_of_turn>), 6..261
 *                <0x00>..<0xFF> byte-fallback tokens, then the printable ASCII characters and "▁" as
 *                single pieces, then the joined pieces; scores fall with the rank.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert/synth.h"
#include "util/util.h"

#define MAX_PIECE_BYTES 16
#define BPE_N_SPECIAL 4
#define SPM_N_SPECIAL 6

static const char CHATML_TEMPLATE[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

static const char GEMMA_TEMPLATE[] =
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'assistant' %}{% set role = 'model' %}"
    "{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | "
    "trim + '<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}";

/* ---- string arena ---------------------------------------------------------------------------- */

typedef struct arena_block {
    struct arena_block *next;
    size_t used, cap;
    char data[];
} arena_block;

static char *arena_dup(arena_block **head, const char *s, size_t n) {
    arena_block *b = *head;
    if (!b || b->used + n + 1 > b->cap) {
        size_t cap = n + 1 > 65536 ? n + 1 : 65536;
        arena_block *nb = malloc(sizeof *nb + cap);
        if (!nb) return NULL;
        nb->next = b;
        nb->used = 0;
        nb->cap = cap;
        *head = b = nb;
    }
    char *p = b->data + b->used;
    memcpy(p, s, n);
    p[n] = 0;
    b->used += n + 1;
    return p;
}

static void arena_free(arena_block *b) {
    while (b) {
        arena_block *n = b->next;
        free(b);
        b = n;
    }
}

/* ---- piece generation ------------------------------------------------------------------------ */

/* A piece in internal form: bytes, where ' ' is the word-start marker (only ever at index 0). */
typedef struct piece {
    char s[MAX_PIECE_BYTES + 1];
    uint8_t len;
    int32_t left, right; /* indices of the two joined pieces; -1 for a base unit */
} piece;

static uint64_t mix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

/* Open-addressing set of piece indices keyed by their strings. */
typedef struct piece_set {
    int32_t *slots; /* index + 1, 0 = empty */
    size_t cap;     /* power of two */
} piece_set;

static bool set_contains_or_add(piece_set *set, const piece *pieces, const char *s, size_t n, int32_t add_index) {
    size_t i = (size_t)hash_bytes(s, n) & (set->cap - 1);
    while (set->slots[i]) {
        const piece *p = &pieces[set->slots[i] - 1];
        if (p->len == n && !memcmp(p->s, s, n)) return true;
        i = (i + 1) & (set->cap - 1);
    }
    if (add_index >= 0) set->slots[i] = add_index + 1;
    return false;
}

/* Letters by English frequency, after the word-start marker; the merge base. */
static const char BASE_UNITS[] = " etaoinshrdlcumwfgypbvkjxqz";

/* Fills pieces[0..n_total): the base units first, then joined pieces. Returns false on OOM or when
 * the generator cannot find enough distinct pieces (cannot happen for sane sizes). */
static bool generate_pieces(piece *pieces, size_t n_total) {
    size_t n_units = sizeof BASE_UNITS - 1;
    piece_set set = {0};
    set.cap = 64;
    while (set.cap < 2 * n_total + 64) set.cap *= 2;
    set.slots = calloc(set.cap, sizeof *set.slots);
    if (!set.slots) return false;
    size_t n = 0;
    for (size_t i = 0; i < n_units && n < n_total; i++, n++) {
        pieces[n] = (piece){.len = 1, .left = -1, .right = -1};
        pieces[n].s[0] = BASE_UNITS[i];
        set_contains_or_add(&set, pieces, pieces[n].s, 1, (int32_t)n);
    }
    uint64_t rng = 0x5157A11E5EEDull; /* fixed: the vocabulary depends only on its size */
    uint64_t attempts = 0, max_attempts = 2000ull * (n_total + 100);
    while (n < n_total) {
        if (++attempts > max_attempts) {
            free(set.slots);
            return false;
        }
        double u1 = (double)(mix64(&rng) >> 11) * 0x1.0p-53, u2 = (double)(mix64(&rng) >> 11) * 0x1.0p-53;
        size_t li = (size_t)((double)n * u1 * u1 * u1), ri = (size_t)((double)n * u2 * u2 * u2);
        const piece *l = &pieces[li], *r = &pieces[ri];
        if (r->s[0] == ' ' || l->len + r->len > MAX_PIECE_BYTES) continue;
        char s[MAX_PIECE_BYTES + 1];
        memcpy(s, l->s, l->len);
        memcpy(s + l->len, r->s, r->len);
        size_t len = (size_t)l->len + r->len;
        if (set_contains_or_add(&set, pieces, s, len, -1)) continue;
        pieces[n] = (piece){.len = (uint8_t)len, .left = (int32_t)li, .right = (int32_t)ri};
        memcpy(pieces[n].s, s, len);
        set_contains_or_add(&set, pieces, s, len, (int32_t)n);
        n++;
    }
    free(set.slots);
    return true;
}

/* ---- display forms --------------------------------------------------------------------------- */

/* GPT-2's bytes_to_unicode: the code point that stands for byte b. */
static uint32_t byte_to_codepoint(int b) {
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) return (uint32_t)b;
    uint32_t n = 0;
    for (int i = 0; i < b; i++)
        if (!((i >= 33 && i <= 126) || (i >= 161 && i <= 172) || (i >= 174 && i <= 255))) n++;
    return 256 + n;
}

static size_t put_utf8(char *out, uint32_t cp) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    out[0] = (char)(0xE0 | (cp >> 12));
    out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
}

/* Writes piece p in display form into out (room for 3 * MAX_PIECE_BYTES + 1). Returns the length. */
static size_t piece_display(const piece *p, qr_synth_vocab_kind kind, char *out) {
    size_t n = 0;
    for (size_t i = 0; i < p->len; i++) {
        unsigned char c = (unsigned char)p->s[i];
        if (kind == QR_SYNTH_VOCAB_BPE) n += put_utf8(out + n, byte_to_codepoint(c));
        else n += c == ' ' ? put_utf8(out + n, 0x2581) : put_utf8(out + n, c);
    }
    out[n] = 0;
    return n;
}

/* ---- the vocabulary -------------------------------------------------------------------------- */

void qr_synth_vocab_free(qr_synth_vocab *v) {
    if (!v) return;
    free(v->tokens);
    free(v->token_types);
    free(v->scores);
    free(v->merges);
    arena_free(v->storage);
    memset(v, 0, sizeof *v);
}

static qr_status build_bpe(uint32_t n_vocab, qr_synth_vocab *v, arena_block **ar, char *err, size_t err_len) {
    const uint32_t first_piece = BPE_N_SPECIAL + 256;
    static const char *const specials[BPE_N_SPECIAL] = {"<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>",
                                                        "<|im_end|>"};
    size_t n_units = sizeof BASE_UNITS - 1;
    size_t n_pieces = n_vocab - first_piece + n_units; /* the units are byte tokens already */
    piece *pieces = malloc(sizeof *pieces * n_pieces);
    v->merges = malloc(sizeof *v->merges * (n_vocab - first_piece + 1));
    if (!pieces || !v->merges) goto nomem;
    if (!generate_pieces(pieces, n_pieces)) {
        free(pieces);
        return qr_errf(err, err_len, QR_ERR_INTERNAL, "synth vocab: piece generator ran dry at %zu pieces", n_pieces);
    }
    for (uint32_t i = 0; i < BPE_N_SPECIAL; i++) {
        v->tokens[i] = arena_dup(ar, specials[i], strlen(specials[i]));
        v->token_types[i] = 3;
        if (!v->tokens[i]) goto nomem;
    }
    for (int b = 0; b < 256; b++) {
        char buf[4];
        size_t n = put_utf8(buf, byte_to_codepoint(b));
        v->tokens[BPE_N_SPECIAL + b] = arena_dup(ar, buf, n);
        v->token_types[BPE_N_SPECIAL + b] = 1;
        if (!v->tokens[BPE_N_SPECIAL + b]) goto nomem;
    }
    for (size_t k = n_units; k < n_pieces; k++) {
        const piece *p = &pieces[k];
        char disp[3 * MAX_PIECE_BYTES + 1], l[3 * MAX_PIECE_BYTES + 1], r[3 * MAX_PIECE_BYTES + 1];
        size_t dn = piece_display(p, QR_SYNTH_VOCAB_BPE, disp);
        size_t ln = piece_display(&pieces[p->left], QR_SYNTH_VOCAB_BPE, l);
        size_t rn = piece_display(&pieces[p->right], QR_SYNTH_VOCAB_BPE, r);
        uint32_t id = first_piece + (uint32_t)(k - n_units);
        v->tokens[id] = arena_dup(ar, disp, dn);
        v->token_types[id] = 1;
        char merge[6 * MAX_PIECE_BYTES + 2];
        memcpy(merge, l, ln);
        merge[ln] = ' ';
        memcpy(merge + ln + 1, r, rn);
        v->merges[v->n_merges] = arena_dup(ar, merge, ln + 1 + rn);
        if (!v->tokens[id] || !v->merges[v->n_merges]) goto nomem;
        v->n_merges++;
    }
    free(pieces);
    v->bos = 0;
    v->eos = 1;
    v->eot = 3; /* <|im_end|> */
    v->unk = -1;
    v->pad = 1;
    v->model = "gpt2";
    v->chat_template = CHATML_TEMPLATE;
    return QR_OK;
nomem:
    free(pieces);
    return qr_errf(err, err_len, QR_ERR_NOMEM, "synth vocab: out of memory");
}

static qr_status build_spm(uint32_t n_vocab, qr_synth_vocab *v, arena_block **ar, char *err, size_t err_len) {
    static const char *const specials[SPM_N_SPECIAL] = {"<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>",
                                                        "<end_of_turn>"};
    static const int32_t special_types[SPM_N_SPECIAL] = {3, 3, 3, 2, 3, 3};
    uint32_t id = 0;
    v->scores = calloc(n_vocab, sizeof *v->scores);
    if (!v->scores) goto nomem;
    for (uint32_t i = 0; i < SPM_N_SPECIAL; i++, id++) {
        v->tokens[id] = arena_dup(ar, specials[i], strlen(specials[i]));
        v->token_types[id] = special_types[i];
        if (!v->tokens[id]) goto nomem;
    }
    for (int b = 0; b < 256; b++, id++) {
        char buf[8];
        snprintf(buf, sizeof buf, "<0x%02X>", b);
        v->tokens[id] = arena_dup(ar, buf, strlen(buf));
        v->token_types[id] = 6;
        if (!v->tokens[id]) goto nomem;
    }
    /* single characters: the space marker and printable ASCII */
    float rank = 0.0f;
    {
        char buf[4];
        size_t n = put_utf8(buf, 0x2581);
        v->tokens[id] = arena_dup(ar, buf, n);
        v->token_types[id] = 1;
        v->scores[id] = -(rank++);
        if (!v->tokens[id]) goto nomem;
        id++;
    }
    for (int c = 0x21; c <= 0x7E; c++, id++) {
        char ch = (char)c;
        v->tokens[id] = arena_dup(ar, &ch, 1);
        v->token_types[id] = 1;
        v->scores[id] = -(rank++);
        if (!v->tokens[id]) goto nomem;
    }
    size_t n_units = sizeof BASE_UNITS - 1;
    size_t n_pieces = n_vocab - id + n_units; /* the units are single-character pieces already */
    piece *pieces = malloc(sizeof *pieces * n_pieces);
    if (!pieces) goto nomem;
    if (!generate_pieces(pieces, n_pieces)) {
        free(pieces);
        return qr_errf(err, err_len, QR_ERR_INTERNAL, "synth vocab: piece generator ran dry at %zu pieces", n_pieces);
    }
    for (size_t k = n_units; k < n_pieces; k++, id++) {
        char disp[3 * MAX_PIECE_BYTES + 1];
        size_t dn = piece_display(&pieces[k], QR_SYNTH_VOCAB_SPM, disp);
        v->tokens[id] = arena_dup(ar, disp, dn);
        v->token_types[id] = 1;
        v->scores[id] = -(rank++);
        if (!v->tokens[id]) {
            free(pieces);
            goto nomem;
        }
    }
    free(pieces);
    v->pad = 0;
    v->eos = 1;
    v->bos = 2;
    v->eot = 5; /* <end_of_turn> */
    v->unk = 3;
    v->model = "llama";
    v->chat_template = GEMMA_TEMPLATE;
    return QR_OK;
nomem:
    return qr_errf(err, err_len, QR_ERR_NOMEM, "synth vocab: out of memory");
}

qr_status qr_synth_vocab_build(qr_synth_vocab_kind kind, uint32_t n_vocab, qr_synth_vocab *out, char *err,
                               size_t err_len) {
    memset(out, 0, sizeof *out);
    uint32_t min = kind == QR_SYNTH_VOCAB_BPE ? BPE_N_SPECIAL + 256 + 1 : SPM_N_SPECIAL + 256 + 95 + 1;
    if (kind != QR_SYNTH_VOCAB_BPE && kind != QR_SYNTH_VOCAB_SPM)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "synth vocab: unknown kind %d", (int)kind);
    if (n_vocab < min || n_vocab > 4000000)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "synth vocab: n_vocab %u outside [%u, 4000000]", n_vocab, min);
    out->n_tokens = n_vocab;
    out->tokens = calloc(n_vocab, sizeof *out->tokens);
    out->token_types = calloc(n_vocab, sizeof *out->token_types);
    if (!out->tokens || !out->token_types) {
        qr_synth_vocab_free(out);
        return qr_errf(err, err_len, QR_ERR_NOMEM, "synth vocab: out of memory");
    }
    arena_block *ar = NULL;
    qr_status st = kind == QR_SYNTH_VOCAB_BPE ? build_bpe(n_vocab, out, &ar, err, err_len)
                                              : build_spm(n_vocab, out, &ar, err, err_len);
    out->storage = ar;
    if (st != QR_OK) qr_synth_vocab_free(out);
    return st;
}
