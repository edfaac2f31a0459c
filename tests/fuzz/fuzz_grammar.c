/* fuzz_grammar.c — libFuzzer target for the GBNF parser and the matcher.
 *
 * Input: GBNF text, optionally followed by a NUL byte and text to match. The grammar is parsed from
 * an exact-size copy (ASan sees reads past the end); when it parses, a matcher over a small
 * vocabulary (the 256 bytes, a few multi-byte tokens including split UTF-8, an EOG token) accepts
 * the text token by token where the mask allows, and every mask is checked against allows().
 * Invariants (trap on violation): a failed parse gives no grammar and a "grammar: ..." message;
 * the mask agrees with qr_grammar_matcher_allows for every token; EOG is allowed exactly when
 * can_end says so; an accepted token is one the mask allowed. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sampling/grammar.h"

static qr_grammar_vocab *g_vocab;

static const char *const k_extra[] = {"{\"", "\":", "ab", "true", "\xce\xb1", "\xce", "\xb1", " ", "\n", "12"};
#define N_EXTRA (sizeof k_extra / sizeof k_extra[0])
#define N_VOCAB (256 + N_EXTRA + 1)

static void build_vocab(void) {
    static char bytes[256];
    const char *pieces[N_VOCAB];
    uint32_t lens[N_VOCAB];
    uint8_t flags[N_VOCAB] = {0};
    for (int i = 0; i < 256; i++) bytes[i] = (char)i, pieces[i] = &bytes[i], lens[i] = 1;
    for (size_t i = 0; i < N_EXTRA; i++) pieces[256 + i] = k_extra[i], lens[256 + i] = (uint32_t)strlen(k_extra[i]);
    pieces[N_VOCAB - 1] = NULL, lens[N_VOCAB - 1] = 0, flags[N_VOCAB - 1] = QR_GRAMMAR_TOKEN_EOG | QR_GRAMMAR_TOKEN_SPECIAL;
    char err[128];
    if (qr_grammar_vocab_create(pieces, lens, flags, (int32_t)N_VOCAB, &g_vocab, err, sizeof err) != QR_OK) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_vocab) build_vocab();
    if (size > 1 << 16) return 0;
    const uint8_t *nul = memchr(data, 0, size);
    const size_t glen = nul ? (size_t)(nul - data) : size;
    const uint8_t *text = nul ? nul + 1 : NULL;
    const size_t tlen = nul ? size - glen - 1 : 0;
    char *copy = malloc(glen ? glen : 1);
    if (!copy) return 0;
    memcpy(copy, data, glen);
    qr_grammar *g = NULL;
    char err[512] = "";
    const qr_status st = qr_grammar_parse(copy, glen, NULL, &g, err, sizeof err);
    free(copy);
    if (st != QR_OK) {
        if (g || strncmp(err, "grammar", 7)) __builtin_trap();
        return 0;
    }
    qr_grammar_matcher *m = NULL;
    if (qr_grammar_matcher_create(g, g_vocab, &m, err, sizeof err) != QR_OK) {
        qr_grammar_free(g);
        return 0;
    }
    /* greedy tokenization of the text: the longest allowed token at each point, bytes otherwise */
    size_t pos = 0;
    for (int steps = 0; steps < 64; steps++) {
        const uint64_t *mask = qr_grammar_matcher_mask(m);
        if (!mask) break;
        for (int32_t t = 0; t < (int32_t)N_VOCAB; t++) {
            const bool bit = (mask[t >> 6] >> (t & 63)) & 1;
            if (bit != qr_grammar_matcher_allows(m, t)) __builtin_trap();
        }
        const int32_t eog = (int32_t)N_VOCAB - 1;
        if (((mask[eog >> 6] >> (eog & 63)) & 1) != qr_grammar_matcher_can_end(m)) __builtin_trap();
        if (!text || pos >= tlen) break;
        int32_t pick = -1;
        for (size_t i = 0; i < N_EXTRA; i++) {
            const size_t n = strlen(k_extra[i]);
            if (n <= tlen - pos && !memcmp(text + pos, k_extra[i], n) && ((mask[(256 + i) >> 6] >> ((256 + i) & 63)) & 1))
                pick = (int32_t)(256 + i);
        }
        if (pick < 0) pick = text[pos];
        const bool allowed = (mask[pick >> 6] >> (pick & 63)) & 1;
        const qr_status as = qr_grammar_matcher_accept(m, pick, err, sizeof err);
        if ((as == QR_OK) != allowed) __builtin_trap();
        if (as != QR_OK) break;
        pos += pick < 256 ? 1 : strlen(k_extra[pick - 256]);
    }
    qr_grammar_matcher_free(m);
    qr_grammar_free(g);
    return 0;
}
