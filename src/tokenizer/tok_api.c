/* tok_api.c — the public tokenizer calls of quarrel.h that the tokenizer's own files do not define: a
 * vocabulary-only load from a GGUF path, the vocabulary size, special token ids and the add_* flags. */
#include <string.h>

#include "tokenizer/tokenizer.h"
#include "util/util.h"

qr_status qr_tokenizer_load(const char *path, qr_tokenizer **out, char *err, size_t err_len) {
    if (!path || !out) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "qr_tokenizer_load: NULL argument");
    *out = NULL;
    qr_gguf *g = NULL;
    qr_status st = qr_gguf_open(path, &g, err, err_len);
    if (st != QR_OK) return st;
    char msg[512] = "";
    st = qr_tokenizer_create(g, out, msg, sizeof msg);
    qr_gguf_close(g);
    if (st != QR_OK) qr_errf(err, err_len, st, "%s: %s", path, msg);
    return st;
}

int32_t qr_tokenizer_n_vocab(const qr_tokenizer *tok) { return (int32_t)qr_tokenizer_get_info(tok)->n_vocab; }

qr_token qr_tokenizer_special(const qr_tokenizer *tok, qr_special_token which) {
    const qr_special_tokens *s = &qr_tokenizer_get_info(tok)->special;
    switch (which) {
    case QR_SPECIAL_BOS: return s->bos;
    case QR_SPECIAL_EOS: return s->eos;
    case QR_SPECIAL_EOT: return s->eot;
    case QR_SPECIAL_EOM: return s->eom;
    case QR_SPECIAL_UNK: return s->unk;
    case QR_SPECIAL_SEP: return s->sep;
    case QR_SPECIAL_PAD: return s->pad;
    case QR_SPECIAL_MASK: return s->mask;
    case QR_SPECIAL_NL: return s->linefeed;
    }
    return QR_TOKEN_NULL;
}

bool qr_tokenizer_add_bos(const qr_tokenizer *tok) { return qr_tokenizer_get_info(tok)->add_bos; }

bool qr_tokenizer_add_eos(const qr_tokenizer *tok) { return qr_tokenizer_get_info(tok)->add_eos; }
