/* api.c — the public calls of quarrel.h that join a loaded model to the tokenizer and chat-template
 * modules: the model's tokenizer, and its chat template rendered with the tokenizer's bos/eos texts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "template/template.h"
#include "tokenizer/tokenizer.h"
#include "util/util.h"

qr_status qr_tokenizer_from_model(const qr_model *model, qr_tokenizer **out, char *err, size_t err_len) {
    if (!model || !out) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "qr_tokenizer_from_model: NULL argument");
    *out = NULL;
    return qr_tokenizer_create(qr_model_gguf(model), out, err, err_len);
}

/* Copies the vocabulary text of special token `id` into buf[0..cap) as a NUL-terminated string ("" when
 * the model has no such token). */
static void special_text(const qr_tokenizer *tok, qr_token id, char *buf, size_t cap) {
    size_t len;
    const char *p;
    buf[0] = 0;
    if (id >= 0 && (p = qr_token_text(tok, id, &len))) snprintf(buf, cap, "%.*s", (int)len, p);
}

static bool tok_has(const void *ctx, const char *text) {
    return qr_token_lookup((const qr_tokenizer *)ctx, text, strlen(text)) >= 0;
}

bool qr_model_chat_template_src(const qr_model *model, const qr_tokenizer *tok, const char **src, size_t *len,
                                const char **builtin) {
    qr_gguf_str s;
    if (builtin) *builtin = NULL;
    if (qr_gguf_get_str(qr_model_gguf(model), "tokenizer.chat_template", &s)) {
        *src = s.data;
        *len = (size_t)s.len;
        return true;
    }
    const char *name = NULL, *b = tok ? qr_chat_template_builtin_for(tok_has, tok, &name) : NULL;
    if (!b) return false;
    *src = b;
    *len = strlen(b);
    if (builtin) *builtin = name;
    return true;
}

qr_status qr_chat_apply_template(const qr_model *model, const qr_tokenizer *tok, const qr_chat_message *msgs,
                                 size_t n_msgs, bool add_generation_prompt, char **out, size_t *out_len, char *err,
                                 size_t err_len) {
    if (out) *out = NULL;
    if (!model || !out || (!msgs && n_msgs))
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "qr_chat_apply_template: NULL argument");
    qr_tokenizer *own = NULL;
    if (!tok) {
        qr_status st = qr_tokenizer_create(qr_model_gguf(model), &own, err, err_len);
        if (st != QR_OK) return st;
        tok = own;
    }
    const char *src;
    size_t src_len;
    if (!qr_model_chat_template_src(model, tok, &src, &src_len, NULL)) {
        qr_tokenizer_free(own);
        return qr_errf(err, err_len, QR_ERR_NOT_FOUND,
                       "the model has no chat template (tokenizer.chat_template) and its vocabulary fits no built-in one");
    }
    char bos[256], eos[256];
    special_text(tok, qr_tokenizer_special(tok, QR_SPECIAL_BOS), bos, sizeof bos);
    special_text(tok, qr_tokenizer_special(tok, QR_SPECIAL_EOS), eos, sizeof eos);
    qr_chat_options opt = {0};
    opt.add_generation_prompt = add_generation_prompt;
    opt.bos_token = bos;
    opt.eos_token = eos;
    size_t len = 0;
    qr_status st = qr_chat_render(src, src_len, msgs, n_msgs, &opt, out, &len, err, err_len);
    if (st == QR_OK && out_len) *out_len = len;
    qr_tokenizer_free(own);
    return st;
}
