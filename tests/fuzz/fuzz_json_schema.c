/* fuzz_json_schema.c — libFuzzer target for the JSON-schema-to-GBNF compiler.
 *
 * Input: a JSON schema (any bytes; only JSON gets past jansson). It is compiled to GBNF text, and
 * the text to a grammar; a matcher over the 256 single bytes then runs a few fixed JSON texts.
 * Invariants (trap on violation): a failure gives no text and a "json schema: ..." message; the
 * GBNF the compiler writes always parses (or is refused only for a $ref cycle); matching never
 * crashes. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sampling/grammar.h"

static qr_grammar_vocab *g_vocab;

static const char *const k_texts[] = {"{}", "[]", "{\"a\":1,\"b\":[true,null]}", "\"2024-01-31\"", "-12.5e3",
                                      "{\"name\": \"x\", \"age\": 3}", "[1, \"a\", false]"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_vocab) {
        static char bytes[256];
        const char *pieces[256];
        uint32_t lens[256];
        for (int i = 0; i < 256; i++) bytes[i] = (char)i, pieces[i] = &bytes[i], lens[i] = 1;
        char err[128];
        if (qr_grammar_vocab_create(pieces, lens, NULL, 256, &g_vocab, err, sizeof err) != QR_OK) __builtin_trap();
    }
    if (size > 1 << 16) return 0;
    json_error_t je;
    json_t *schema = json_loadb((const char *)data, size, JSON_DECODE_ANY, &je);
    if (!schema) return 0;
    char *text = NULL, err[512] = "";
    const qr_status st = qr_json_schema_to_gbnf(schema, NULL, &text, err, sizeof err);
    if (st != QR_OK) {
        if (text || strncmp(err, "json schema", 11)) __builtin_trap();
        json_decref(schema);
        return 0;
    }
    qr_grammar *g = NULL;
    if (qr_grammar_parse(text, strlen(text), NULL, &g, err, sizeof err) != QR_OK) {
        if (!strstr(err, "left-recursive") && !strstr(err, "too large") && !strstr(err, "more than")) __builtin_trap();
    } else {
        for (size_t i = 0; i < sizeof k_texts / sizeof k_texts[0]; i++) {
            qr_grammar_matcher *m = NULL;
            if (qr_grammar_matcher_create(g, g_vocab, &m, err, sizeof err) != QR_OK) break;
            (void)qr_grammar_matcher_accept_bytes(m, k_texts[i], strlen(k_texts[i]));
            (void)qr_grammar_matcher_can_end(m);
            (void)qr_grammar_matcher_mask(m);
            qr_grammar_matcher_free(m);
        }
        qr_grammar_free(g);
    }
    free(text);
    json_decref(schema);
    return 0;
}
