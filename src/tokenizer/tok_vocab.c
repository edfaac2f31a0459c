/* tok_vocab.c — building a tokenizer from a description (token texts, scores, types, merges,
 * special ids, flags), with llama.cpp's defaults and its rules for special/end-of-generation tokens;
 * the accessors of tokenizer.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"
#include "util/util.h"

/* llama.cpp token types (tokenizer.ggml.token_type values). */
enum { TT_UNDEFINED = 0, TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER_DEFINED = 4, TT_UNUSED = 5, TT_BYTE = 6 };

static uint32_t attr_of_type(int32_t t) {
    switch (t) {
    case TT_UNKNOWN: return QR_TOKEN_ATTR_UNKNOWN;
    case TT_UNUSED: return QR_TOKEN_ATTR_UNUSED;
    case TT_NORMAL: return QR_TOKEN_ATTR_NORMAL;
    case TT_CONTROL: return QR_TOKEN_ATTR_CONTROL;
    case TT_USER_DEFINED: return QR_TOKEN_ATTR_USER_DEFINED;
    case TT_BYTE: return QR_TOKEN_ATTR_BYTE;
    default: return QR_TOKEN_ATTR_UNDEFINED;
    }
}

static int32_t find_text(const qr_tokenizer *t, const char *s) { return qr_tok_strmap_find(&t->map, s, strlen(s)); }

static bool text_is(const qr_tokenizer *t, int32_t id, const char *s) {
    size_t n = strlen(s);
    return id >= 0 && (uint32_t)id < t->n_vocab && t->text_len[id] == n && memcmp(t->text[id], s, n) == 0;
}

/* ---- token texts --------------------------------------------------------------------------- */

static qr_status load_tokens(qr_tokenizer *t, const qr_tokenizer_desc *d, char *err, size_t err_len) {
    uint32_t n = d->n_tokens;
    size_t total = 0;
    for (uint32_t i = 0; i < n; i++) total += d->tokens[i].len ? d->tokens[i].len : 24;
    t->text_arena = malloc(total + 1);
    t->text = malloc(n * sizeof *t->text);
    t->text_len = malloc(n * sizeof *t->text_len);
    t->score = malloc(n * sizeof *t->score);
    t->attr = malloc(n * sizeof *t->attr);
    if (!t->text_arena || !t->text || !t->text_len || !t->score || !t->attr) return QR_ERR_NOMEM;
    size_t off = 0;
    for (uint32_t i = 0; i < n; i++) {
        char *dst = t->text_arena + off;
        size_t len = d->tokens[i].len;
        if (len > UINT32_MAX / 2) return qr_errf(err, err_len, QR_ERR_FORMAT, "tokenizer.ggml.tokens: token %u is too long", i);
        if (len == 0) { /* llama.cpp renames empty tokens */
            len = (size_t)snprintf(dst, 24, "[EMPTY_%u]", i);
        } else {
            memcpy(dst, d->tokens[i].data, len);
        }
        t->text[i] = dst;
        t->text_len[i] = (uint32_t)len;
        off += len;
        if (len > t->max_token_len) t->max_token_len = (uint32_t)len;
        t->score[i] = d->scores ? d->scores[i] : 0.0f;
        t->attr[i] = d->token_types ? attr_of_type(d->token_types[i]) : QR_TOKEN_ATTR_NORMAL;
    }
    int64_t dup = -1;
    qr_status st = qr_tok_strmap_build(&t->map, t->text, t->text_len, n, &dup);
    if (st != QR_OK) return st;
    if (dup >= 0) {
        int32_t first = -1;
        for (int64_t i = 0; i < dup; i++)
            if (t->text_len[i] == t->text_len[dup] && !memcmp(t->text[i], t->text[dup], t->text_len[dup])) {
                first = (int32_t)i;
                break;
            }
        return qr_errf(err, err_len, QR_ERR_FORMAT, "tokenizer.ggml.tokens: token %lld ('%.*s') duplicates token %d",
                       (long long)dup, (int)(t->text_len[dup] > 40 ? 40 : t->text_len[dup]), t->text[dup], first);
    }
    return QR_OK;
}

/* ---- BPE merges ---------------------------------------------------------------------------- */

static qr_status load_merges(qr_tokenizer *t, const qr_tokenizer_desc *d, char *err, size_t err_len) {
    qr_status st = qr_tok_mergemap_init(&t->merges, d->n_merges);
    if (st != QR_OK) return st;
    char *cat = malloc(2 * (size_t)t->max_token_len + 2);
    if (!cat) return QR_ERR_NOMEM;
    for (uint32_t i = 0; i < d->n_merges; i++) {
        const char *m = d->merges[i].data;
        size_t n = d->merges[i].len;
        const char *sp = n > 1 ? memchr(m + 1, ' ', n - 1) : NULL; /* llama.cpp: find(' ', 1) */
        int shown = (int)(n > 40 ? 40 : n);
        if (!sp) {
            free(cat);
            return qr_errf(err, err_len, QR_ERR_FORMAT, "tokenizer.ggml.merges: entry %u ('%.*s') is not 'left right'", i,
                           shown, m);
        }
        size_t ln = (size_t)(sp - m), rn = n - ln - 1;
        int32_t left = qr_tok_strmap_find(&t->map, m, ln);
        int32_t right = qr_tok_strmap_find(&t->map, sp + 1, rn);
        if (left < 0 || right < 0) {
            free(cat);
            const char *bad = left < 0 ? m : sp + 1;
            size_t bn = left < 0 ? ln : rn;
            return qr_errf(err, err_len, QR_ERR_FORMAT, "tokenizer.ggml.merges: entry %u ('%.*s'): '%.*s' is not a token",
                           i, shown, m, (int)(bn > 40 ? 40 : bn), bad);
        }
        memcpy(cat, m, ln);
        memcpy(cat + ln, sp + 1, rn);
        int32_t result = ln + rn <= 2 * (size_t)t->max_token_len ? qr_tok_strmap_find(&t->map, cat, ln + rn) : -1;
        qr_tok_merge_insert(&t->merges, left, right, (int32_t)i, result);
    }
    free(cat);
    t->info.n_merges = d->n_merges;
    return QR_OK;
}

/* ---- special tokens ------------------------------------------------------------------------ */

/* Texts llama.cpp recognises when the GGUF names no id. When several are tokens, the lowest id
 * wins (llama.cpp takes whichever its hash map yields first; for SmolLM2 that is also the lowest). */
static const char *const k_eot_texts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                                          "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
                                          "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
                                          "<end_of_utterance>", NULL};
static const char *const k_eom_texts[] = {"<|eom_id|>", NULL};
static const char *const k_fim_pre_texts[] = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
                                              "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>", "<PRE>",
                                              "\xe2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>", NULL};
static const char *const k_fim_suf_texts[] = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
                                              "<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>", "<SUF>",
                                              "\xe2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>", NULL};
static const char *const k_fim_mid_texts[] = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
                                              "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>", "<MID>",
                                              "\xe2\x96\x81<MID>", "<|code_middle|>", "<|middle|>", NULL};
static const char *const k_fim_pad_texts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL};
static const char *const k_fim_rep_texts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", NULL};
static const char *const k_fim_sep_texts[] = {"<|file_sep|>", NULL};
static const char *const k_eog_texts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>",
                                          "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>",
                                          "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>",
                                          "<turn|>", "<|tool_response>",
                                          "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
                                          "[e~[", NULL};

/* If *id is unset, takes the lowest-id token among the listed texts and makes it a control token. */
static void detect_special(qr_tokenizer *t, int32_t *id, const char *const *texts) {
    if (*id != QR_TOKEN_NULL) return;
    int32_t best = QR_TOKEN_NULL;
    for (size_t i = 0; texts[i]; i++) {
        int32_t f = find_text(t, texts[i]);
        if (f >= 0 && (best < 0 || f < best)) best = f;
    }
    if (best >= 0) {
        *id = best;
        t->attr[best] |= QR_TOKEN_ATTR_CONTROL;
    }
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static bool eog_add(qr_tokenizer *t, int32_t id) {
    if (id < 0) return true;
    for (size_t i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return true;
    int32_t *v = realloc(t->eog, (t->n_eog + 1) * sizeof *v);
    if (!v) return false;
    t->eog = v;
    t->eog[t->n_eog++] = id;
    return true;
}

static void eog_remove(qr_tokenizer *t, int32_t id) {
    for (size_t i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) {
            t->eog[i] = t->eog[--t->n_eog];
            return;
        }
}

static qr_status build_eog(qr_tokenizer *t) {
    qr_special_tokens *sp = &t->info.special;
    if (!eog_add(t, sp->fim_pad) || !eog_add(t, sp->fim_rep) || !eog_add(t, sp->fim_sep)) return QR_ERR_NOMEM;
    for (size_t i = 0; k_eog_texts[i]; i++) {
        int32_t id = find_text(t, k_eog_texts[i]);
        if (id < 0) continue;
        if (!eog_add(t, id)) return QR_ERR_NOMEM;
        t->attr[id] |= QR_TOKEN_ATTR_CONTROL;
    }
    /* gpt-oss: always render these */
    static const char *const render[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>", NULL};
    for (size_t i = 0; render[i]; i++) {
        int32_t id = find_text(t, render[i]);
        if (id >= 0) t->attr[id] = QR_TOKEN_ATTR_USER_DEFINED;
    }
    if (!eog_add(t, sp->eos) || !eog_add(t, sp->eot) || !eog_add(t, sp->eom)) return QR_ERR_NOMEM;
    /* o200k_harmony / solar-open: <|end|> is not end-of-generation there */
    bool has_return = false, has_call = false, has_flush = false;
    int32_t end_id = QR_TOKEN_NULL;
    for (size_t i = 0; i < t->n_eog; i++) {
        int32_t id = t->eog[i];
        if (text_is(t, id, "<|return|>")) has_return = true;
        else if (text_is(t, id, "<|call|>") || text_is(t, id, "<|calls|>")) has_call = true;
        else if (text_is(t, id, "<|flush|>")) has_flush = true;
        else if (text_is(t, id, "<|end|>")) end_id = id;
    }
    if (end_id >= 0 && ((has_return && has_call) || (has_call && has_flush))) {
        eog_remove(t, end_id);
        t->attr[end_id] = QR_TOKEN_ATTR_USER_DEFINED;
    }
    /* gemma4 / plamo: </s> is a normal token */
    bool has_marker = false;
    int32_t s_id = QR_TOKEN_NULL;
    for (size_t i = 0; i < t->n_eog; i++) {
        int32_t id = t->eog[i];
        if (text_is(t, id, "<|tool_response>") || text_is(t, id, "<|plamo:eos|>")) has_marker = true;
        else if (text_is(t, id, "</s>")) s_id = id;
    }
    if (has_marker && s_id >= 0) {
        eog_remove(t, s_id);
        t->attr[s_id] = QR_TOKEN_ATTR_NORMAL;
    }
    if (t->n_eog) qsort(t->eog, t->n_eog, sizeof *t->eog, cmp_i32);
    return QR_OK;
}

/* Sort key for the special-token cache: longer text first, then lower id. arg: the tokenizer. */
static int cmp_special(const void *a, const void *b, void *arg) {
    const qr_tokenizer *t = arg;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = t->text_len[x], ly = t->text_len[y];
    if (lx != ly) return lx > ly ? -1 : 1;
    return (x > y) - (x < y);
}

static qr_status build_special_cache(qr_tokenizer *t) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++)
        if (t->attr[i] & (QR_TOKEN_ATTR_CONTROL | QR_TOKEN_ATTR_USER_DEFINED | QR_TOKEN_ATTR_UNKNOWN)) n++;
    t->special_cache = malloc((n ? n : 1) * sizeof *t->special_cache);
    if (!t->special_cache) return QR_ERR_NOMEM;
    n = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++)
        if (t->attr[i] & (QR_TOKEN_ATTR_CONTROL | QR_TOKEN_ATTR_USER_DEFINED | QR_TOKEN_ATTR_UNKNOWN))
            t->special_cache[n++] = (int32_t)i;
    qsort_r(t->special_cache, n, sizeof *t->special_cache, cmp_special, t);
    t->n_special = n;
    return QR_OK;
}

/* Builds the trie of special-token texts used to find which of them occur in a text. */
static qr_status build_trie(qr_tokenizer *t) {
    size_t total = 1;
    for (uint32_t k = 0; k < t->n_special; k++) total += t->text_len[t->special_cache[k]];
    if (total > INT32_MAX) return QR_ERR_NOMEM;
    t->trie = malloc(total * sizeof *t->trie);
    if (!t->trie) return QR_ERR_NOMEM;
    t->n_trie = 1;
    memset(t->trie_root, 0, sizeof t->trie_root);
    for (uint32_t k = 0; k < t->n_special; k++) {
        const unsigned char *s = (const unsigned char *)t->text[t->special_cache[k]];
        uint32_t n = t->text_len[t->special_cache[k]];
        int32_t *link = &t->trie_root[s[0]];
        int32_t node = 0;
        for (uint32_t i = 0; i < n; i++) {
            if (i > 0) link = &t->trie[node].child;
            int32_t c = *link;
            while (c && t->trie[c].byte != s[i]) c = t->trie[c].sibling;
            if (!c) {
                c = (int32_t)t->n_trie++;
                t->trie[c] = (qr_tok_trie_node){0, *link, -1, s[i]}; /* prepend to the sibling list */
                *link = c;
            }
            node = c;
        }
        if (t->trie[node].special < 0) t->trie[node].special = (int32_t)k;
    }
    return QR_OK;
}

/* ---- pieces -------------------------------------------------------------------------------- */

static uint8_t token_to_byte(const qr_tokenizer *t, int32_t id) {
    /* "<0xXX>": up to two hex digits from offset 3 */
    unsigned v = 0;
    for (uint32_t i = 3; i < 5 && i < t->text_len[id]; i++) {
        char c = t->text[id][i];
        unsigned d;
        if (c >= '0' && c <= '9') d = (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') d = (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') d = (unsigned)(c - 'A' + 10);
        else break;
        v = v * 16 + d;
    }
    return (uint8_t)v;
}

/* Appends the piece of token id (special = true) to b. */
static bool append_piece(const qr_tokenizer *t, int32_t id, qr_tok_bytes *b) {
    uint32_t a = t->attr[id];
    const char *s = t->text[id];
    uint32_t n = t->text_len[id];
    if (a & (QR_TOKEN_ATTR_UNKNOWN | QR_TOKEN_ATTR_CONTROL | QR_TOKEN_ATTR_USER_DEFINED))
        return qr_tok_bytes_append(b, s, n);
    if (a & QR_TOKEN_ATTR_NORMAL) {
        if (t->info.type == QR_VOCAB_BPE) { /* GPT-2 byte-level decoding */
            for (size_t off = 0; off < n;) {
                uint32_t c = qr_tok_utf8_decode(s, n, &off);
                int byte = qr_tok_cpt_to_byte(c);
                if (byte >= 0) {
                    char ch = (char)byte;
                    if (!qr_tok_bytes_append(b, &ch, 1)) return false;
                } else { /* llama.cpp's marker for a code point outside the byte map */
                    char u[4], hex[16];
                    size_t k = qr_tok_utf8_encode(c, u);
                    if (!qr_tok_bytes_append(b, "[UNK_BYTE_0x", 12)) return false;
                    for (size_t j = 0; j < k; j++) {
                        snprintf(hex, sizeof hex, "%02x", (unsigned char)u[j]);
                        if (!qr_tok_bytes_append(b, hex, 2)) return false;
                    }
                    if (!qr_tok_bytes_append(b, s, n) || !qr_tok_bytes_append(b, "]", 1)) return false;
                }
            }
            return true;
        }
        for (uint32_t i = 0; i < n; i++) { /* "▁" -> " " */
            if (i + 2 < n && (unsigned char)s[i] == 0xE2 && (unsigned char)s[i + 1] == 0x96 &&
                (unsigned char)s[i + 2] == 0x81) {
                if (!qr_tok_bytes_append(b, " ", 1)) return false;
                i += 2;
            } else if (!qr_tok_bytes_append(b, &s[i], 1)) {
                return false;
            }
        }
        return true;
    }
    if (a & QR_TOKEN_ATTR_BYTE) {
        char ch = (char)token_to_byte(t, id);
        return qr_tok_bytes_append(b, &ch, 1);
    }
    return true; /* unused / undefined tokens have no text */
}

static qr_status build_pieces(qr_tokenizer *t) {
    qr_tok_bytes b = {0};
    t->piece_off = malloc(((size_t)t->n_vocab + 1) * sizeof *t->piece_off);
    if (!t->piece_off) return QR_ERR_NOMEM;
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        t->piece_off[i] = (uint32_t)b.n;
        if (!append_piece(t, (int32_t)i, &b) || b.n > UINT32_MAX) {
            free(b.v);
            return QR_ERR_NOMEM;
        }
    }
    t->piece_off[t->n_vocab] = (uint32_t)b.n;
    t->piece_arena = b.v ? b.v : malloc(1);
    return t->piece_arena ? QR_OK : QR_ERR_NOMEM;
}

/* ---- model-specific strip attributes (llama.cpp sets these by model name) ------------------ */

static bool contains(const char *hay, const char *needle) { return hay && strstr(hay, needle) != NULL; }

static void set_attr(qr_tokenizer *t, int32_t id, uint32_t a, bool on) {
    if (id < 0) return;
    t->attr[id] = on ? (t->attr[id] | a) : (t->attr[id] & ~a);
}

static void apply_name_rules(qr_tokenizer *t, const qr_tokenizer_desc *d) {
    char name[256] = "";
    if (d->general_name) {
        size_t i = 0;
        for (; d->general_name[i] && i + 1 < sizeof name; i++) {
            char c = d->general_name[i];
            name[i] = (c >= 'A' && c <= 'Z') ? (char)(c + 32) : c;
        }
        name[i] = 0;
    }
    const char *pre = d->pre ? d->pre : "";
    if (contains(pre, "jina-v2-de") || contains(pre, "jina-v2-es") || contains(pre, "jina-v2-code") ||
        contains(d->general_arch, "nomic-bert-moe") || contains(d->general_arch, "jina-bert-v3")) {
        set_attr(t, find_text(t, "<mask>"), QR_TOKEN_ATTR_LSTRIP, true);
    } else if (contains(name, "phi-3") || contains(name, "phi3")) {
        for (uint32_t i = 0; i < t->n_special; i++) set_attr(t, t->special_cache[i], QR_TOKEN_ATTR_RSTRIP, true);
        set_attr(t, find_text(t, "</s>"), QR_TOKEN_ATTR_RSTRIP, true);
        set_attr(t, find_text(t, "<unk>"), QR_TOKEN_ATTR_RSTRIP, false);
        set_attr(t, find_text(t, "<s>"), QR_TOKEN_ATTR_RSTRIP, false);
        set_attr(t, find_text(t, "<|endoftext|>"), QR_TOKEN_ATTR_RSTRIP, false);
    } else if (contains(name, "modern-bert")) {
        set_attr(t, find_text(t, "[MASK]"), QR_TOKEN_ATTR_LSTRIP, true);
    }
}

/* ---- create -------------------------------------------------------------------------------- */

static int32_t pick_id(const qr_tokenizer *t, int32_t def, bool has, uint32_t v) {
    if (def >= 0 && (uint32_t)def >= t->n_vocab) def = QR_TOKEN_NULL;
    if (has && v < t->n_vocab) return (int32_t)v;
    return def;
}

qr_status qr_tokenizer_create_from_desc(const qr_tokenizer_desc *d, qr_tokenizer **out, char *err, size_t err_len) {
    *out = NULL;
    if (!d->model) return qr_errf(err, err_len, QR_ERR_NOT_FOUND, "tokenizer.ggml.model: missing");
    if (d->n_tokens == 0 || !d->tokens)
        return qr_errf(err, err_len, QR_ERR_NOT_FOUND, "tokenizer.ggml.tokens: missing or empty");
    qr_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return qr_errf(err, err_len, QR_ERR_NOMEM, "tokenizer: out of memory");
    qr_status st;
    qr_tokenizer_info *info = &t->info;
    qr_special_tokens *sp = &info->special;
    int32_t def_bos, def_eos, def_unk, def_sep = QR_TOKEN_NULL, def_pad = QR_TOKEN_NULL, def_mask = QR_TOKEN_NULL;
    snprintf(t->model_name, sizeof t->model_name, "%s", d->model);
    t->pre_name = strdup(d->pre ? d->pre : "");
    if (!t->pre_name) goto oom;
    info->model = t->model_name;
    info->pre = t->pre_name;
    t->n_vocab = info->n_vocab = d->n_tokens;
    t->lowercase = t->strip_accents = true;

    qr_tok_pre_flags pf = {0};
    if (!strcmp(d->model, "llama")) {
        info->type = QR_VOCAB_SPM;
        def_bos = 1, def_eos = 2, def_unk = 0;
        info->add_space_prefix = true;
        info->add_bos = true;
    } else if (!strcmp(d->model, "bert")) {
        info->type = QR_VOCAB_WPM;
        def_bos = 101, def_eos = QR_TOKEN_NULL, def_unk = 100, def_sep = 102, def_pad = 0, def_mask = 103;
        info->clean_spaces = true;
        info->add_bos = true;
        info->add_sep = true;
    } else if (!strcmp(d->model, "gpt2")) {
        info->type = QR_VOCAB_BPE;
        def_bos = 11, def_eos = 11, def_unk = QR_TOKEN_NULL;
        if (!d->merges) {
            st = qr_errf(err, err_len, QR_ERR_NOT_FOUND, "tokenizer.ggml.merges: missing (needed by a gpt2 tokenizer)");
            goto fail;
        }
        st = qr_tok_pretok_init(&t->pre, d->pre, &pf, err, err_len);
        if (st != QR_OK) goto fail;
        t->byte_encode = true;
        info->clean_spaces = pf.clean_spaces;
        info->ignore_merges = pf.ignore_merges;
        info->add_bos = pf.add_bos;
        info->add_sep = pf.add_sep;
        if (pf.bos_null) def_bos = QR_TOKEN_NULL;
    } else {
        st = qr_errf(err, err_len, QR_ERR_UNSUPPORTED,
                     "tokenizer.ggml.model: '%s' is not supported (supported: llama, gpt2, bert)", d->model);
        goto fail;
    }
    if (d->has_add_space_prefix) info->add_space_prefix = d->add_space_prefix;
    if (d->has_remove_extra_ws) info->remove_extra_whitespaces = d->remove_extra_ws;

    st = load_tokens(t, d, err, err_len);
    if (st != QR_OK) goto fail_or_oom;
    if (info->type == QR_VOCAB_BPE) {
        st = load_merges(t, d, err, err_len);
        if (st != QR_OK) goto fail_or_oom;
    }

    for (int b = 0; b < 256; b++) {
        char u[8];
        int32_t id;
        if (info->type == QR_VOCAB_SPM) {
            snprintf(u, sizeof u, "<0x%02X>", b);
            id = find_text(t, u);
            if (id < 0) {
                u[0] = (char)b;
                id = qr_tok_strmap_find(&t->map, u, 1);
            }
        } else {
            size_t k = qr_tok_utf8_encode(qr_tok_byte_to_cpt((uint8_t)b), u);
            id = qr_tok_strmap_find(&t->map, u, k);
        }
        t->byte_token[b] = id;
    }

    sp->bos = pick_id(t, def_bos, d->has_bos, d->bos);
    sp->eos = pick_id(t, def_eos, d->has_eos, d->eos);
    sp->eot = pick_id(t, QR_TOKEN_NULL, d->has_eot, d->eot);
    sp->eom = pick_id(t, QR_TOKEN_NULL, d->has_eom, d->eom);
    sp->unk = pick_id(t, def_unk, d->has_unk, d->unk);
    sp->sep = pick_id(t, def_sep, d->has_sep, d->sep);
    sp->pad = pick_id(t, def_pad, d->has_pad, d->pad);
    sp->mask = pick_id(t, def_mask, d->has_mask, d->mask);
    sp->fim_pre = pick_id(t, QR_TOKEN_NULL, d->has_fim_pre, d->fim_pre);
    sp->fim_suf = pick_id(t, QR_TOKEN_NULL, d->has_fim_suf, d->fim_suf);
    sp->fim_mid = pick_id(t, QR_TOKEN_NULL, d->has_fim_mid, d->fim_mid);
    sp->fim_pad = pick_id(t, QR_TOKEN_NULL, d->has_fim_pad, d->fim_pad);
    sp->fim_rep = pick_id(t, QR_TOKEN_NULL, d->has_fim_rep, d->fim_rep);
    sp->fim_sep = pick_id(t, QR_TOKEN_NULL, d->has_fim_sep, d->fim_sep);
    sp->cls = sp->bos;

    /* the newline token: computed before any special-token handling, as llama.cpp does */
    if (info->type == QR_VOCAB_SPM) {
        sp->linefeed = t->byte_token['\n'] >= 0 ? t->byte_token['\n'] : sp->pad;
    } else if (info->type == QR_VOCAB_WPM) {
        sp->linefeed = sp->pad;
    } else {
        qr_tok_ids ids = {0};
        st = qr_tok_bpe_fragment(t, "\n", 1, &ids);
        sp->linefeed = (st == QR_OK && ids.n) ? ids.v[0] : sp->pad;
        free(ids.v);
        if (st == QR_ERR_NOMEM) goto oom;
    }

    if (d->has_add_bos) info->add_bos = d->add_bos;
    if (d->has_add_eos) info->add_eos = d->add_eos;
    if (d->has_add_sep) info->add_sep = d->add_sep;
    if (d->has_lowercase) t->lowercase = t->strip_accents = d->lowercase;
    if (d->has_strip_accents) t->strip_accents = d->strip_accents;

    detect_special(t, &sp->eot, k_eot_texts);
    detect_special(t, &sp->eom, k_eom_texts);
    detect_special(t, &sp->fim_pre, k_fim_pre_texts);
    detect_special(t, &sp->fim_suf, k_fim_suf_texts);
    detect_special(t, &sp->fim_mid, k_fim_mid_texts);
    detect_special(t, &sp->fim_pad, k_fim_pad_texts);
    detect_special(t, &sp->fim_rep, k_fim_rep_texts);
    detect_special(t, &sp->fim_sep, k_fim_sep_texts);
    for (uint32_t i = 0; i < t->n_vocab; i++) /* control tokens named "unused" */
        if ((t->attr[i] & QR_TOKEN_ATTR_CONTROL) && memmem(t->text[i], t->text_len[i], "unused", 6))
            t->attr[i] |= QR_TOKEN_ATTR_UNUSED;
    if ((st = build_eog(t)) != QR_OK) goto oom;
    if ((st = build_special_cache(t)) != QR_OK) goto oom;
    if ((st = build_pieces(t)) != QR_OK) goto oom;
    apply_name_rules(t, d);
    if ((st = build_trie(t)) != QR_OK) goto oom;
    *out = t;
    return QR_OK;

fail_or_oom:
    if (st == QR_ERR_NOMEM) goto oom;
    goto fail;
oom:
    st = qr_errf(err, err_len, QR_ERR_NOMEM, "tokenizer: out of memory");
fail:
    qr_tokenizer_free(t);
    return st;
}

void qr_tokenizer_free(qr_tokenizer *t) {
    if (!t) return;
    qr_tok_pretok_free(&t->pre);
    qr_tok_strmap_free(&t->map);
    qr_tok_mergemap_free(&t->merges);
    free(t->pre_name);
    free(t->text_arena);
    free(t->text);
    free(t->text_len);
    free(t->score);
    free(t->attr);
    free(t->piece_arena);
    free(t->piece_off);
    free(t->special_cache);
    free(t->trie);
    free(t->eog);
    free(t);
}

/* ---- accessors ----------------------------------------------------------------------------- */

const qr_tokenizer_info *qr_tokenizer_get_info(const qr_tokenizer *tok) { return &tok->info; }

static bool in_range(const qr_tokenizer *tok, int32_t id) { return id >= 0 && (uint32_t)id < tok->n_vocab; }

const char *qr_token_piece(const qr_tokenizer *tok, int32_t id, size_t *len) {
    if (!in_range(tok, id)) return NULL;
    *len = tok->piece_off[id + 1] - tok->piece_off[id];
    return tok->piece_arena + tok->piece_off[id];
}

int32_t qr_token_to_piece(const qr_tokenizer *tok, int32_t id, bool special, char *buf, size_t cap) {
    if (!in_range(tok, id)) return -1;
    if (!special && (tok->attr[id] & (QR_TOKEN_ATTR_UNKNOWN | QR_TOKEN_ATTR_CONTROL))) return 0;
    size_t n;
    const char *p = qr_token_piece(tok, id, &n);
    if (buf && cap) memcpy(buf, p, n < cap ? n : cap);
    return (int32_t)n;
}

const char *qr_token_text(const qr_tokenizer *tok, int32_t id, size_t *len) {
    if (!in_range(tok, id)) return NULL;
    *len = tok->text_len[id];
    return tok->text[id];
}

uint32_t qr_token_get_attr(const qr_tokenizer *tok, int32_t id) {
    return in_range(tok, id) ? tok->attr[id] : QR_TOKEN_ATTR_UNDEFINED;
}

float qr_token_score(const qr_tokenizer *tok, int32_t id) { return in_range(tok, id) ? tok->score[id] : 0.0f; }

bool qr_token_is_eog(const qr_tokenizer *tok, int32_t id) {
    if (id < 0) return false;
    return bsearch(&id, tok->eog, tok->n_eog, sizeof *tok->eog, cmp_i32) != NULL;
}

bool qr_token_is_control(const qr_tokenizer *tok, int32_t id) {
    return in_range(tok, id) && (tok->attr[id] & QR_TOKEN_ATTR_CONTROL);
}

int32_t qr_token_lookup(const qr_tokenizer *tok, const char *text, size_t len) {
    return qr_tok_strmap_find(&tok->map, text, len);
}

const int32_t *qr_tokenizer_eog_ids(const qr_tokenizer *tok, size_t *n) {
    *n = tok->n_eog;
    return tok->eog;
}
