/* tok_gguf.c — qr_tokenizer_create: reads and checks the `tokenizer.ggml.*` keys of a GGUF file
 * and builds the tokenizer from them (tok_vocab.c does the building). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"
#include "util/util.h"

#define KP "tokenizer.ggml."

/* Describes a value's type for error messages: "string", "array of int32", ... */
static const char *type_desc(const qr_gguf_value *v, char *buf, size_t cap) {
    if (v->type == QR_GGUF_ARRAY) snprintf(buf, cap, "array of %s", qr_gguf_vtype_name(v->arr.elem_type));
    else snprintf(buf, cap, "%s", qr_gguf_vtype_name(v->type));
    return buf;
}

/* Optional string key: *out = NUL-terminated malloc'ed copy (NULL when absent). */
static qr_status get_string(const qr_gguf *g, const char *key, bool required, char **out, char *err, size_t err_len) {
    *out = NULL;
    const qr_gguf_value *v = qr_gguf_get(g, key);
    if (!v) return required ? qr_errf(err, err_len, QR_ERR_NOT_FOUND, "%s: missing", key) : QR_OK;
    char tb[48];
    if (v->type != QR_GGUF_STRING)
        return qr_errf(err, err_len, QR_ERR_FORMAT, "%s: expected a string, found %s", key, type_desc(v, tb, sizeof tb));
    *out = malloc(v->str.len + 1);
    if (!*out) return qr_errf(err, err_len, QR_ERR_NOMEM, "%s: out of memory", key);
    memcpy(*out, v->str.data, v->str.len);
    (*out)[v->str.len] = 0;
    return QR_OK;
}

/* Optional token id: any integer type; *has = present. Negative or huge values are ignored (as
 * llama.cpp does for ids out of the vocabulary). */
static qr_status get_id(const qr_gguf *g, const char *key, bool *has, uint32_t *out, char *err, size_t err_len) {
    const qr_gguf_value *v = qr_gguf_get(g, key);
    *has = false;
    if (!v) return QR_OK;
    char tb[48];
    switch (v->type) {
    case QR_GGUF_U8: case QR_GGUF_U16: case QR_GGUF_U32: case QR_GGUF_U64:
    case QR_GGUF_I8: case QR_GGUF_I16: case QR_GGUF_I32: case QR_GGUF_I64:
        break;
    default:
        return qr_errf(err, err_len, QR_ERR_FORMAT, "%s: expected an integer token id, found %s", key,
                       type_desc(v, tb, sizeof tb));
    }
    uint32_t id;
    if (qr_gguf_get_u32(g, key, &id)) {
        *has = true;
        *out = id;
    }
    return QR_OK;
}

static qr_status get_flag(const qr_gguf *g, const char *key, bool *has, bool *out, char *err, size_t err_len) {
    const qr_gguf_value *v = qr_gguf_get(g, key);
    *has = false;
    if (!v) return QR_OK;
    char tb[48];
    if (v->type != QR_GGUF_BOOL)
        return qr_errf(err, err_len, QR_ERR_FORMAT, "%s: expected a bool, found %s", key, type_desc(v, tb, sizeof tb));
    *has = true;
    *out = v->u64 != 0;
    return QR_OK;
}

/* A string array key -> qr_tok_str list (pointing into the GGUF). */
static qr_status get_strings(const qr_gguf *g, const char *key, bool required, uint32_t *n, qr_tok_str **out, char *err,
                             size_t err_len) {
    *n = 0;
    *out = NULL;
    const qr_gguf_value *v = qr_gguf_get(g, key);
    if (!v) return required ? qr_errf(err, err_len, QR_ERR_NOT_FOUND, "%s: missing", key) : QR_OK;
    char tb[48];
    if (v->type != QR_GGUF_ARRAY || v->arr.elem_type != QR_GGUF_STRING)
        return qr_errf(err, err_len, QR_ERR_FORMAT, "%s: expected an array of strings, found %s", key,
                       type_desc(v, tb, sizeof tb));
    if (v->arr.count > INT32_MAX)
        return qr_errf(err, err_len, QR_ERR_FORMAT, "%s: %llu entries is too many", key, (unsigned long long)v->arr.count);
    *out = malloc((v->arr.count ? v->arr.count : 1) * sizeof **out);
    if (!*out) return qr_errf(err, err_len, QR_ERR_NOMEM, "%s: out of memory", key);
    for (uint64_t i = 0; i < v->arr.count; i++) {
        qr_gguf_str s = qr_gguf_arr_str(v, i);
        (*out)[i] = (qr_tok_str){s.data, (size_t)s.len};
    }
    *n = (uint32_t)v->arr.count;
    return QR_OK;
}

qr_status qr_tokenizer_create(const qr_gguf *g, qr_tokenizer **out, char *err, size_t err_len) {
    *out = NULL;
    qr_tokenizer_desc d;
    memset(&d, 0, sizeof d);
    char *model = NULL, *pre = NULL, *name = NULL, *arch = NULL;
    qr_tok_str *tokens = NULL, *merges = NULL;
    float *scores = NULL;
    int32_t *types = NULL;
    char tb[48];
    qr_status st;

    if ((st = get_string(g, KP "model", true, &model, err, err_len)) != QR_OK) goto done;
    if ((st = get_string(g, KP "pre", false, &pre, err, err_len)) != QR_OK) goto done;
    if ((st = get_string(g, "general.name", false, &name, err, err_len)) != QR_OK) goto done;
    if ((st = get_string(g, "general.architecture", false, &arch, err, err_len)) != QR_OK) goto done;
    if ((st = get_strings(g, KP "tokens", true, &d.n_tokens, &tokens, err, err_len)) != QR_OK) goto done;
    if (d.n_tokens == 0) {
        st = qr_errf(err, err_len, QR_ERR_FORMAT, KP "tokens: empty");
        goto done;
    }
    bool is_bpe = !strcmp(model, "gpt2");
    if ((st = get_strings(g, KP "merges", is_bpe, &d.n_merges, &merges, err, err_len)) != QR_OK) goto done;

    const qr_gguf_value *v = qr_gguf_get(g, KP "scores");
    if (v) {
        if (v->type != QR_GGUF_ARRAY || (v->arr.elem_type != QR_GGUF_F32 && v->arr.elem_type != QR_GGUF_I32)) {
            st = qr_errf(err, err_len, QR_ERR_FORMAT, KP "scores: expected an array of float32 or int32, found %s",
                         type_desc(v, tb, sizeof tb));
            goto done;
        }
        if (v->arr.count < d.n_tokens) {
            st = qr_errf(err, err_len, QR_ERR_FORMAT, KP "scores: %llu entries for %u tokens",
                         (unsigned long long)v->arr.count, d.n_tokens);
            goto done;
        }
        scores = malloc(d.n_tokens * sizeof *scores);
        if (!scores) goto oom;
        for (uint32_t i = 0; i < d.n_tokens; i++) scores[i] = (float)qr_gguf_arr_f64(v, i);
    }
    v = qr_gguf_get(g, KP "token_type");
    if (v) {
        if (v->type != QR_GGUF_ARRAY || v->arr.elem_type != QR_GGUF_I32) {
            st = qr_errf(err, err_len, QR_ERR_FORMAT, KP "token_type: expected an array of int32, found %s",
                         type_desc(v, tb, sizeof tb));
            goto done;
        }
        if (v->arr.count < d.n_tokens) {
            st = qr_errf(err, err_len, QR_ERR_FORMAT, KP "token_type: %llu entries for %u tokens",
                         (unsigned long long)v->arr.count, d.n_tokens);
            goto done;
        }
        types = malloc(d.n_tokens * sizeof *types);
        if (!types) goto oom;
        for (uint32_t i = 0; i < d.n_tokens; i++) types[i] = (int32_t)qr_gguf_arr_i64(v, i);
    }

    struct { const char *key; bool *has; uint32_t *val; } ids[] = {
        {KP "bos_token_id", &d.has_bos, &d.bos},           {KP "eos_token_id", &d.has_eos, &d.eos},
        {KP "eot_token_id", &d.has_eot, &d.eot},           {KP "eom_token_id", &d.has_eom, &d.eom},
        {KP "unknown_token_id", &d.has_unk, &d.unk},       {KP "seperator_token_id", &d.has_sep, &d.sep},
        {KP "padding_token_id", &d.has_pad, &d.pad},       {KP "mask_token_id", &d.has_mask, &d.mask},
        {KP "fim_pre_token_id", &d.has_fim_pre, &d.fim_pre}, {KP "fim_suf_token_id", &d.has_fim_suf, &d.fim_suf},
        {KP "fim_mid_token_id", &d.has_fim_mid, &d.fim_mid}, {KP "fim_pad_token_id", &d.has_fim_pad, &d.fim_pad},
        {KP "fim_rep_token_id", &d.has_fim_rep, &d.fim_rep}, {KP "fim_sep_token_id", &d.has_fim_sep, &d.fim_sep},
    };
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        if ((st = get_id(g, ids[i].key, ids[i].has, ids[i].val, err, err_len)) != QR_OK) goto done;
    /* deprecated spellings of the FIM ids, used when the new ones are absent */
    struct { const char *key; bool *has; uint32_t *val; } old_ids[] = {
        {KP "prefix_token_id", &d.has_fim_pre, &d.fim_pre},
        {KP "suffix_token_id", &d.has_fim_suf, &d.fim_suf},
        {KP "middle_token_id", &d.has_fim_mid, &d.fim_mid},
    };
    for (size_t i = 0; i < sizeof old_ids / sizeof old_ids[0]; i++) {
        if (*old_ids[i].has) continue;
        if ((st = get_id(g, old_ids[i].key, old_ids[i].has, old_ids[i].val, err, err_len)) != QR_OK) goto done;
    }
    struct { const char *key; bool *has; bool *val; } flags[] = {
        {KP "add_bos_token", &d.has_add_bos, &d.add_bos},
        {KP "add_eos_token", &d.has_add_eos, &d.add_eos},
        {KP "add_sep_token", &d.has_add_sep, &d.add_sep},
        {KP "add_space_prefix", &d.has_add_space_prefix, &d.add_space_prefix},
        {KP "remove_extra_whitespaces", &d.has_remove_extra_ws, &d.remove_extra_ws},
        {KP "normalizer.lowercase", &d.has_lowercase, &d.lowercase},
        {KP "normalizer.strip_accents", &d.has_strip_accents, &d.strip_accents},
    };
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if ((st = get_flag(g, flags[i].key, flags[i].has, flags[i].val, err, err_len)) != QR_OK) goto done;

    d.model = model;
    d.pre = pre;
    d.general_name = name;
    d.general_arch = arch;
    d.tokens = tokens;
    d.merges = merges;
    d.scores = scores;
    d.token_types = types;
    st = qr_tokenizer_create_from_desc(&d, out, err, err_len);
    goto done;
oom:
    st = qr_errf(err, err_len, QR_ERR_NOMEM, "tokenizer: out of memory");
done:
    free(model);
    free(pre);
    free(name);
    free(arch);
    free(tokens);
    free(merges);
    free(scores);
    free(types);
    return st;
}
