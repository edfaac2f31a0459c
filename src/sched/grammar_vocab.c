/* grammar_vocab.c — tokenizer -> qr_grammar_vocab (see grammar_vocab.h). */
#include "sched/grammar_vocab.h"

#include <stdlib.h>

#include "util/util.h"

qr_status qr_grammar_vocab_from_tokenizer(const qr_tokenizer *tok, qr_grammar_vocab **out, char *err, size_t err_len) {
    *out = NULL;
    const int32_t n = (int32_t)qr_tokenizer_get_info(tok)->n_vocab;
    const char **pieces = malloc(sizeof *pieces * (size_t)(n > 0 ? n : 1));
    uint32_t *lens = malloc(sizeof *lens * (size_t)(n > 0 ? n : 1));
    uint8_t *flags = malloc((size_t)(n > 0 ? n : 1));
    qr_status st;
    if (!pieces || !lens || !flags) {
        st = qr_errf(err, err_len, QR_ERR_NOMEM, "grammar vocab: out of memory");
        goto out;
    }
    for (int32_t i = 0; i < n; i++) {
        const uint32_t attr = qr_token_get_attr(tok, i);
        size_t len = 0;
        const char *p = qr_token_piece(tok, i, &len);
        uint8_t f = 0;
        if (attr & (QR_TOKEN_ATTR_CONTROL | QR_TOKEN_ATTR_UNKNOWN | QR_TOKEN_ATTR_UNUSED)) f |= QR_GRAMMAR_TOKEN_SPECIAL;
        if (qr_token_is_eog(tok, i)) f |= QR_GRAMMAR_TOKEN_EOG | QR_GRAMMAR_TOKEN_SPECIAL;
        pieces[i] = p;
        lens[i] = (f & QR_GRAMMAR_TOKEN_SPECIAL) || !p ? 0 : (uint32_t)len;
        flags[i] = f;
    }
    st = qr_grammar_vocab_create(pieces, lens, flags, n, out, err, err_len);
out:
    free(pieces);
    free(lens);
    free(flags);
    return st;
}
