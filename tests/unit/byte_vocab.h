/* byte_vocab.h — a test vocabulary for grammar tests: the 256 single bytes (ids 0..255) and one EOG
 * token (id 256). Included by the cmocka tests that drive grammar matchers byte by byte. */
#ifndef QR_TEST_BYTE_VOCAB_H
#define QR_TEST_BYTE_VOCAB_H

#include "sampling/grammar.h"

/* A vocabulary of the 256 single bytes (ids 0..255) and one EOG token (id 256). */
static inline qr_grammar_vocab *byte_vocab(void) {
    static char bytes[256];
    const char *pieces[257];
    uint32_t lens[257];
    uint8_t flags[257] = {0};
    for (int i = 0; i < 256; i++) bytes[i] = (char)i, pieces[i] = &bytes[i], lens[i] = 1;
    pieces[256] = NULL, lens[256] = 0, flags[256] = QR_GRAMMAR_TOKEN_EOG | QR_GRAMMAR_TOKEN_SPECIAL;
    qr_grammar_vocab *v = NULL;
    char err[256];
    assert_int_equal(qr_grammar_vocab_create(pieces, lens, flags, 257, &v, err, sizeof err), QR_OK);
    return v;
}

#endif
