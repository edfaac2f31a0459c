/* test_grammar.c — GBNF parsing and its errors, the matcher (bytes, tokens, masks, UTF-8, EOG),
 * the JSON-schema compiler against a table of schemas with valid and invalid instances, and
 * refusals of unsupported or malicious schemas. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sampling/grammar.h"
#include "byte_vocab.h"
#include "sampling/sampler.h"

/* Whether the grammar accepts text exactly (whole sentence). */
static bool g_accepts(qr_grammar *g, qr_grammar_vocab *v, const char *text, size_t len) {
    qr_grammar_matcher *m = NULL;
    char err[256];
    assert_int_equal(qr_grammar_matcher_create(g, v, &m, err, sizeof err), QR_OK);
    const bool ok = qr_grammar_matcher_accept_bytes(m, text, len) && qr_grammar_matcher_can_end(m);
    qr_grammar_matcher_free(m);
    return ok;
}

static qr_grammar *parse_ok(const char *text) {
    qr_grammar *g = NULL;
    char err[512] = "";
    const qr_status st = qr_grammar_parse(text, strlen(text), NULL, &g, err, sizeof err);
    if (st != QR_OK) fail_msg("grammar did not parse: %s\n%s", err, text);
    return g;
}

static void expect_parse_error(const char *text, const char *needle) {
    qr_grammar *g = NULL;
    char err[512] = "";
    const qr_status st = qr_grammar_parse(text, strlen(text), NULL, &g, err, sizeof err);
    if (st == QR_OK) fail_msg("grammar parsed but should not: %s", text);
    if (!strstr(err, needle)) fail_msg("error '%s' does not contain '%s'", err, needle);
    assert_null(g);
}

static void test_parse_errors(void **state) {
    (void)state;
    expect_parse_error("root \"a\"", "expected '::=' after the rule name 'root'");
    expect_parse_error("root ::= item", "rule 'item' is used (line 1) but never defined");
    expect_parse_error("start ::= \"a\"", "no rule named 'root'");
    expect_parse_error("root ::= \"abc", "unterminated string literal");
    expect_parse_error("root ::= [a-z", "unterminated character class");
    expect_parse_error("root ::= \"\\q\"", "unknown escape '\\q'");
    expect_parse_error("root ::= \"a\"\nroot ::= \"b\"", "defined twice");
    expect_parse_error("root ::= expr\nexpr ::= expr \"+\" term | term\nterm ::= [0-9]", "left-recursive (expr -> expr)");
    expect_parse_error("root ::= a\na ::= b? a \"x\"\nb ::= \"y\"", "left-recursive");
    expect_parse_error("root ::= \"a\"{3,2}", "maximum is below the minimum");
    expect_parse_error("root ::= \"a\"{99999}", "repetition count above");
    expect_parse_error("root ::= ( \"a\" ", "expected ')'");
    expect_parse_error("root ::= \"a\" @", "unexpected character '@'");
    expect_parse_error("root ::= [z-a]", "backwards");
    expect_parse_error("root ::= \"a\" b ::= \"c\"", "one rule per line");
    expect_parse_error("root ::= \"\\x4\"", "needs 2 hex digits");
    /* errors carry the line and column */
    expect_parse_error("root ::= a\n\na ::= \"x\" )", "line 3, column");
}

static void test_parse_and_match(void **state) {
    (void)state;
    qr_grammar_vocab *v = byte_vocab();
    static const struct {
        const char *gbnf, *text;
        bool ok;
    } cases[] = {
        {"root ::= \"abc\"", "abc", true},
        {"root ::= \"abc\"", "ab", false},
        {"root ::= \"abc\"", "abcd", false},
        {"root ::= [a-c]+", "abcabc", true},
        {"root ::= [a-c]+", "", false},
        {"root ::= [^a-c]*", "xyz", true},
        {"root ::= [^a-c]*", "xaz", false},
        {"root ::= \"x\"? \"y\"", "y", true},
        {"root ::= \"x\"? \"y\"", "xy", true},
        {"root ::= \"ab\"{2,3}", "abab", true},
        {"root ::= \"ab\"{2,3}", "ababab", true},
        {"root ::= \"ab\"{2,3}", "abababab", false},
        {"root ::= \"ab\"{2,3}", "ab", false},
        {"root ::= [0-9]{,2}", "", true},
        {"root ::= [0-9]{,2}", "12", true},
        {"root ::= [0-9]{,2}", "123", false},
        {"root ::= [0-9]{2,}", "1234567", true},
        {"root ::= [0-9]{2,}", "1", false},
        {"root ::= ( \"a\" | \"b\" ( \"c\" | \"d\" ) )*", "abcbda", true},
        {"root ::= ( \"a\" | \"b\" ( \"c\" | \"d\" ) )*", "ab", false},
        {"# comment\nroot ::= item ( \",\" item )* # trailing\nitem ::= [a-z]+\n", "ab,cd,e", true},
        {"root ::= a\n  | b\na ::= \"1\"\nb ::= \"2\"", "2", true},
        {"root ::= (\n  \"a\"\n  \"b\"\n)", "ab", true},
        {"root ::= .", "\xce\xb1", true},
        {"root ::= [α-ω]+", "\xce\xb1\xce\xb2", true},
        {"root ::= [α-ω]+", "\xce\xb1z", false},
        {"root ::= \"\\u00e9\\x41\\n\"", "\xc3\xa9" "A\n", true},
        {"root ::= \"\"", "", true},
        {"root ::= \"(\" root \")\" | \"\"", "((()))", true},
        {"root ::= \"(\" root \")\" | \"\"", "(()", false},
        /* overlong UTF-8 never matches, even for '.' */
        {"root ::= .", "\xc0\xaf", false},
        {"root ::= .", "\xed\xa0\x80", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        qr_grammar *g = parse_ok(cases[i].gbnf);
        const bool got = g_accepts(g, v, cases[i].text, strlen(cases[i].text));
        if (got != cases[i].ok) fail_msg("case %zu: %s on '%s': got %d", i, cases[i].gbnf, cases[i].text, got);
        qr_grammar_free(g);
    }
    qr_grammar_vocab_free(v);
}

/* A vocabulary with multi-byte tokens, split UTF-8, special and EOG tokens. */
static const char *const tok_words[] = {"{", "}", "\"", "\":", "\"a", "a", "b", "ab", "abc", "1", "12", "0",
                                        "-", ",", " ", ", \"", "true", "tr", "ue", "null", "\xce", "\xb1",
                                        "\xce\xb1", "x\xce", "<ctl>", "", "{\"", "[", "]", "],", "\n", "\"}"};
#define N_TOK_WORDS (sizeof tok_words / sizeof tok_words[0])
#define TOK_CTL 24
#define TOK_EOG ((int32_t)N_TOK_WORDS)

static qr_grammar_vocab *word_vocab(void) {
    const char *pieces[N_TOK_WORDS + 1];
    uint32_t lens[N_TOK_WORDS + 1];
    uint8_t flags[N_TOK_WORDS + 1] = {0};
    for (size_t i = 0; i < N_TOK_WORDS; i++) pieces[i] = tok_words[i], lens[i] = (uint32_t)strlen(tok_words[i]);
    flags[TOK_CTL] = QR_GRAMMAR_TOKEN_SPECIAL;
    pieces[N_TOK_WORDS] = "</s>", lens[N_TOK_WORDS] = 4, flags[N_TOK_WORDS] = QR_GRAMMAR_TOKEN_EOG | QR_GRAMMAR_TOKEN_SPECIAL;
    qr_grammar_vocab *v = NULL;
    char err[256];
    assert_int_equal(qr_grammar_vocab_create(pieces, lens, flags, (int32_t)N_TOK_WORDS + 1, &v, err, sizeof err), QR_OK);
    return v;
}

/* The mask of m must equal, token by token, what a fresh matcher says after prefix + token. */
static void check_mask_brute(qr_grammar *g, qr_grammar_vocab *v, qr_grammar_matcher *m, const char *prefix,
                             size_t plen) {
    const uint64_t *mask = qr_grammar_matcher_mask(m);
    assert_non_null(mask);
    for (int32_t t = 0; t <= TOK_EOG; t++) {
        const bool bit = (mask[t >> 6] >> (t & 63)) & 1;
        bool want;
        qr_grammar_matcher *f = NULL;
        char err[256];
        assert_int_equal(qr_grammar_matcher_create(g, v, &f, err, sizeof err), QR_OK);
        assert_true(qr_grammar_matcher_accept_bytes(f, prefix, plen));
        if (t == TOK_EOG) want = qr_grammar_matcher_can_end(f);
        else if (t == TOK_CTL || !*tok_words[t]) want = false;
        else want = qr_grammar_matcher_accept_bytes(f, tok_words[t], strlen(tok_words[t]));
        qr_grammar_matcher_free(f);
        if (bit != want) fail_msg("after '%.*s': token %d ('%s') mask %d, expected %d", (int)plen, prefix, t,
                                  t < TOK_EOG ? tok_words[t] : "EOG", bit, want);
        assert_int_equal(qr_grammar_matcher_allows(m, t), want);
    }
}

static void test_mask_matches_brute_force(void **state) {
    (void)state;
    qr_grammar_vocab *v = word_vocab();
    qr_grammar *g = parse_ok("root ::= \"{\" ( pair ( \",\" \" \"? pair )* )? \"}\"\n"
                             "pair ::= \"\\\"\" [a-c\\u03b1]+ \"\\\":\" \" \"? val\n"
                             "val ::= \"true\" | \"null\" | \"-\"? [0-9]+ | \"[\" \"]\"");
    qr_grammar_matcher *m = NULL;
    char err[256];
    assert_int_equal(qr_grammar_matcher_create(g, v, &m, err, sizeof err), QR_OK);
    /* walk a sentence token by token, checking the mask at every step */
    const int32_t path[] = {26 /* {" */, 7 /* ab */, 22 /* α */, 3 /* ": */, 14, 16 /* true */, 15 /* , " */,
                            20 /* \xce */, 21 /* \xb1 */, 3, 10 /* 12 */, 1 /* } */};
    char text[256];
    size_t len = 0;
    for (size_t i = 0; i < sizeof path / sizeof path[0]; i++) {
        check_mask_brute(g, v, m, text, len);
        if (qr_grammar_matcher_accept(m, path[i], err, sizeof err) != QR_OK)
            fail_msg("step %zu token '%s': %s", i, tok_words[path[i]], err);
        memcpy(text + len, tok_words[path[i]], strlen(tok_words[path[i]]));
        len += strlen(tok_words[path[i]]);
    }
    check_mask_brute(g, v, m, text, len);
    assert_true(qr_grammar_matcher_done(m));
    /* at the end only EOG */
    const uint64_t *mask = qr_grammar_matcher_mask(m);
    for (int32_t t = 0; t <= TOK_EOG; t++) assert_int_equal((mask[t >> 6] >> (t & 63)) & 1, t == TOK_EOG);
    assert_int_equal(qr_grammar_matcher_accept(m, 5, err, sizeof err), QR_ERR_INVALID_ARG);
    assert_int_equal(qr_grammar_matcher_accept(m, TOK_EOG, err, sizeof err), QR_OK);
    assert_false(qr_grammar_matcher_allows(m, TOK_EOG));
    /* reset starts again; EOG is refused before the end, control tokens always */
    qr_grammar_matcher_reset(m);
    assert_false(qr_grammar_matcher_allows(m, TOK_EOG));
    assert_false(qr_grammar_matcher_allows(m, TOK_CTL));
    assert_int_equal(qr_grammar_matcher_accept(m, TOK_EOG, err, sizeof err), QR_ERR_INVALID_ARG);
    assert_true(strstr(err, "too early") != NULL);
    assert_int_equal(qr_grammar_matcher_accept(m, 1, err, sizeof err), QR_ERR_INVALID_ARG);
    qr_grammar_matcher_free(m);
    qr_grammar_free(g);
    qr_grammar_vocab_free(v);
}

/* Many steps through a long repetition: the tables get rebuilt and the answers stay right. */
static void test_long_run_rebuilds(void **state) {
    (void)state;
    qr_grammar_vocab *v = byte_vocab();
    qr_grammar *g = parse_ok("root ::= ( \"[\" [0-9]{1,3} \"]\" )+");
    qr_grammar_matcher *m = NULL;
    char err[256];
    assert_int_equal(qr_grammar_matcher_create(g, v, &m, err, sizeof err), QR_OK);
    for (int i = 0; i < 3000; i++) {
        char b[16];
        const int n = snprintf(b, sizeof b, "[%d]", i % 1000);
        assert_true(qr_grammar_matcher_accept_bytes(m, b, (size_t)n));
        assert_true(qr_grammar_matcher_can_end(m));
        if (i % 500 == 0) {
            const uint64_t *mask = qr_grammar_matcher_mask(m);
            assert_true((mask['[' >> 6] >> ('[' & 63)) & 1);
            assert_false((mask['a' >> 6] >> ('a' & 63)) & 1);
            assert_true((mask[256 >> 6] >> (256 & 63)) & 1);
        }
    }
    int64_t states = 0;
    qr_grammar_matcher_stats(m, &states, NULL);
    assert_true(states > 0);
    qr_grammar_matcher_free(m);
    qr_grammar_free(g);
    qr_grammar_vocab_free(v);
}

/* ---- JSON schema --------------------------------------------------------------------------- */

typedef struct schema_case {
    const char *schema;
    const char *valid[8];
    const char *invalid[8];
} schema_case;

static const schema_case schema_cases[] = {
    {"{\"type\":\"string\"}", {"\"\"", "\"hi\"", "\"a\\\"b\\\\c\\n\"", "\"\\u00e9t\xc3\xa9\""},
     {"hi", "\"a\nb\"", "1", "\"\\x\"", "\"abc"}},
    {"{\"type\":\"integer\"}", {"0", "-7", "123456"}, {"01", "1.5", "-", "\"1\"", "1e3", "--1"}},
    {"{\"type\":\"number\"}", {"0", "-0.5", "3.25", "1e10", "-2.5E-3"}, {".5", "1.", "01", "+1", "1e"}},
    {"{\"type\":\"boolean\"}", {"true", "false"}, {"True", "1", "null"}},
    {"{\"type\":\"null\"}", {"null"}, {"nul", "\"null\"", "0"}},
    {"{\"enum\":[\"red\",\"green\",3,null]}", {"\"red\"", "\"green\"", "3", "null"}, {"\"blue\"", "\"Red\"", "4"}},
    {"{\"const\":{\"a\":[1,2]}}", {"{\"a\":[1,2]}"}, {"{\"a\":[1]}", "{}"}},
    {"{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"}},"
     "\"required\":[\"name\",\"age\"]}",
     {"{\"name\":\"Bo\",\"age\":3}", "{ \"name\": \"Bo\", \"age\": 3 }", "{\n  \"name\": \"x\",\n  \"age\": -1\n}"},
     {"{\"name\":\"Bo\"}", "{\"age\":3,\"name\":\"Bo\"}", "{\"name\":\"Bo\",\"age\":3,\"x\":1}", "{}",
      "{\"name\":1,\"age\":3}"}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"boolean\"},"
     "\"c\":{\"type\":\"null\"}},\"required\":[\"b\"]}",
     {"{\"b\":true}", "{\"a\":1,\"b\":false}", "{\"b\":true,\"c\":null}", "{\"a\":1,\"b\":true,\"c\":null}"},
     {"{}", "{\"a\":1}", "{\"a\":1,\"c\":null}", "{,\"b\":true}", "{\"b\":true,}"}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":{\"type\":\"string\"}}",
     {"{}", "{\"a\":1}", "{\"a\":1,\"x\":\"y\"}", "{\"x\":\"y\",\"z\":\"w\"}"}, {"{\"x\":1}", "{\"a\":true}"}},
    {"{\"type\":\"object\"}", {"{}", "{\"k\":[1,{\"z\":null}],\"j\":\"s\"}"}, {"[]", "{\"k\"}", "\"x\""}},
    {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":3}",
     {"[1]", "[1,2]", "[1, 2, 3]"}, {"[]", "[1,2,3,4]", "[1,]", "[\"a\"]"}},
    {"{\"type\":\"array\",\"items\":{\"type\":\"string\"}}", {"[]", "[\"a\"]", "[\"a\",\"b\",\"c\"]"}, {"[1]", "["}},
    {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"integer\"},{\"type\":\"string\"}]}",
     {"[1,\"a\"]", "[ 1, \"a\" ]"}, {"[1]", "[1,\"a\",2]", "[\"a\",1]"}},
    {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", {"\"ab\"", "\"abc\"", "\"\\n\\t\""},
     {"\"a\"", "\"abcd\""}},
    {"{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-[0-9]+$\"}", {"\"AB-1\"", "\"XY-123\""},
     {"\"ab-1\"", "\"AB-\"", "\"AB-1x\"", "\"xAB-1\""}},
    {"{\"type\":\"string\",\"pattern\":\"ab|cd\"}", {"\"ab\"", "\"xcdx\"", "\"zzabzz\""}, {"\"ac\"", "\"\""}},
    {"{\"type\":\"string\",\"pattern\":\"^(\\\\d{3})?\\\\.x\\\\w*$\"}", {"\"123.x\"", "\".xa_1\""},
     {"\"12.x\"", "\"123x\""}},
    {"{\"type\":\"string\",\"format\":\"date\"}", {"\"2024-02-29\"", "\"1999-12-31\""},
     {"\"2024-13-01\"", "\"2024-1-01\"", "\"x\""}},
    {"{\"type\":\"string\",\"format\":\"date-time\"}", {"\"2024-02-29T12:30:00Z\"", "\"2024-02-29T23:59:59.5+02:00\""},
     {"\"2024-02-29 12:30:00\"", "\"2024-02-29T24:00:00Z\""}},
    {"{\"type\":\"string\",\"format\":\"uuid\"}", {"\"123e4567-e89b-12d3-a456-426614174000\""},
     {"\"123e4567e89b12d3a456426614174000\""}},
    /* RFC 5321's limits make the string end: a local part of <= 64 characters, labels of <= 63 */
    {"{\"type\":\"string\",\"format\":\"email\"}", {"\"a.b@example.com\"", "\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx@ddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd.com\""},
     {"\"a@b\"", "\"@x.com\"", "\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx@x.com\"", "\"a@dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd.com\""}},
    {"{\"type\":\"string\",\"format\":\"ipv4\"}", {"\"192.168.0.1\"", "\"0.0.0.0\""}, {"\"256.1.1.1\"", "\"1.2.3\""}},
    {"{\"type\":[\"string\",\"null\"]}", {"\"x\"", "null"}, {"1"}},
    {"{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}]}",
     {"1", "[1,2]"}, {"\"1\"", "[\"a\"]"}},
    {"{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
     "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\"]}},"
     "\"$ref\":\"#/$defs/node\"}",
     {"{\"v\":1}", "{\"v\":1,\"kids\":[]}", "{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[{\"v\":3}]}]}"},
     {"{\"kids\":[]}", "{\"v\":1,\"kids\":[{}]}"}},
    {"{\"definitions\":{\"c\":{\"enum\":[\"x\",\"y\"]}},\"type\":\"object\","
     "\"properties\":{\"c\":{\"$ref\":\"#/definitions/c\"}},\"required\":[\"c\"],\"additionalProperties\":false}",
     {"{\"c\":\"x\"}", "{\"c\":\"y\"}"}, {"{\"c\":\"z\"}"}},
    {"{\"type\":\"integer\",\"minimum\":0}", {"0", "15"}, {"-1"}},
    {"{\"type\":\"integer\",\"exclusiveMinimum\":0}", {"1", "15"}, {"0", "-1"}},
    {"{\"allOf\":[{\"type\":\"boolean\"}],\"description\":\"flag\"}", {"true"}, {"1"}},
    {"true", {"1", "\"s\"", "{\"a\":[true,null]}"}, {"nope"}},
};

static void test_schema_table(void **state) {
    (void)state;
    qr_grammar_vocab *v = byte_vocab();
    for (size_t i = 0; i < sizeof schema_cases / sizeof schema_cases[0]; i++) {
        const schema_case *sc = &schema_cases[i];
        json_error_t je;
        json_t *s = json_loads(sc->schema, JSON_DECODE_ANY, &je);
        if (!s) fail_msg("case %zu: bad test schema: %s", i, je.text);
        qr_grammar *g = NULL;
        char err[512] = "";
        if (qr_json_schema_compile(s, &g, err, sizeof err) != QR_OK) fail_msg("case %zu: %s", i, err);
        for (int k = 0; k < 8 && sc->valid[k]; k++)
            if (!g_accepts(g, v, sc->valid[k], strlen(sc->valid[k])))
                fail_msg("schema %zu %s rejects valid %s", i, sc->schema, sc->valid[k]);
        for (int k = 0; k < 8 && sc->invalid[k]; k++)
            if (g_accepts(g, v, sc->invalid[k], strlen(sc->invalid[k])))
                fail_msg("schema %zu %s accepts invalid %s", i, sc->schema, sc->invalid[k]);
        qr_grammar_free(g);
        json_decref(s);
    }
    qr_grammar_vocab_free(v);
}

static void expect_schema_error(const char *schema, qr_status want, const char *needle) {
    json_error_t je;
    json_t *s = json_loads(schema, JSON_DECODE_ANY, &je);
    assert_non_null(s);
    qr_grammar *g = NULL;
    char err[512] = "";
    const qr_status st = qr_json_schema_compile(s, &g, err, sizeof err);
    json_decref(s);
    if (st != want) fail_msg("schema %s: status %d (want %d): %s", schema, st, want, err);
    if (!strstr(err, needle)) fail_msg("schema %s: error '%s' does not contain '%s'", schema, err, needle);
    assert_null(g);
}

static void test_schema_refusals(void **state) {
    (void)state;
    expect_schema_error("{\"type\":\"object\",\"patternProperties\":{\"^x\":{}}}", QR_ERR_UNSUPPORTED,
                        "unsupported keyword 'patternProperties' at #");
    expect_schema_error("{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"number\",\"maximum\":5}}}",
                        QR_ERR_UNSUPPORTED, "unsupported keyword 'maximum' at #/properties/n");
    expect_schema_error("{\"not\":{\"type\":\"string\"}}", QR_ERR_UNSUPPORTED, "'not'");
    expect_schema_error("{\"type\":\"string\",\"format\":\"hostname-idn\"}", QR_ERR_UNSUPPORTED,
                        "unsupported format 'hostname-idn'");
    expect_schema_error("{\"type\":\"string\",\"pattern\":\"(?=a)b\"}", QR_ERR_UNSUPPORTED, "lookaround");
    expect_schema_error("{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", QR_ERR_UNSUPPORTED, "the escape '\\1'");
    expect_schema_error("{\"$ref\":\"https://example.com/s.json\"}", QR_ERR_UNSUPPORTED, "not local");
    expect_schema_error("{\"$ref\":\"#/$defs/missing\"}", QR_ERR_INVALID_ARG, "does not resolve");
    expect_schema_error("{\"type\":\"integer\",\"minimum\":5}", QR_ERR_UNSUPPORTED, "'minimum': 5");
    expect_schema_error("{\"allOf\":[{\"type\":\"string\"},{\"minLength\":1}]}", QR_ERR_UNSUPPORTED,
                        "'allOf' with more than one schema");
    expect_schema_error("{\"type\":\"object\",\"required\":[\"x\"]}", QR_ERR_UNSUPPORTED, "'x' is not declared");
    expect_schema_error("{\"type\":\"wat\"}", QR_ERR_INVALID_ARG, "unknown type 'wat'");
    expect_schema_error("{\"type\":\"array\",\"minItems\":-1}", QR_ERR_INVALID_ARG, "'minItems' must be");
    expect_schema_error("{\"enum\":[]}", QR_ERR_INVALID_ARG, "'enum' must be a non-empty array");
    expect_schema_error("false", QR_ERR_INVALID_ARG, "accepts no value");
    expect_schema_error("[1]", QR_ERR_INVALID_ARG, "must be an object or a boolean");
    /* $ref loops that never produce a value */
    expect_schema_error("{\"$ref\":\"#\"}", QR_ERR_INVALID_ARG, "$ref cycle");
    expect_schema_error("{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"anyOf\":[{\"$ref\":\"#/$defs/a\"}]}},"
                        "\"$ref\":\"#/$defs/a\"}",
                        QR_ERR_INVALID_ARG, "$ref cycle");
    /* a 10k-property schema is refused, not ground through */
    json_t *props = json_object();
    for (int i = 0; i < 10000; i++) {
        char k[16];
        snprintf(k, sizeof k, "p%d", i);
        json_object_set_new(props, k, json_pack("{s:s}", "type", "integer"));
    }
    json_t *big = json_pack("{s:s, s:o}", "type", "object", "properties", props);
    qr_grammar *g = NULL;
    char err[512];
    assert_int_equal(qr_json_schema_compile(big, &g, err, sizeof err), QR_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "10000 properties"));
    json_decref(big);
    /* deep nesting is refused */
    char deep[4000] = "";
    for (int i = 0; i < 100; i++) strcat(deep, "{\"type\":\"array\",\"items\":");
    strcat(deep, "true");
    for (int i = 0; i < 100; i++) strcat(deep, "}");
    expect_schema_error(deep, QR_ERR_INVALID_ARG, "nested deeper");
}

/* Rule prefixes keep several compiled schemas apart in one grammar (what a tool-call grammar needs). */
static void test_schema_prefix_compose(void **state) {
    (void)state;
    json_t *a = json_pack("{s:s}", "type", "integer"), *b = json_pack("{s:s}", "type", "boolean");
    char *ga = NULL, *gb = NULL, err[256];
    assert_int_equal(qr_json_schema_to_gbnf(a, "tool-a", &ga, err, sizeof err), QR_OK);
    assert_int_equal(qr_json_schema_to_gbnf(b, "tool-b", &gb, err, sizeof err), QR_OK);
    char text[8192];
    snprintf(text, sizeof text, "root ::= \"A:\" tool-a | \"B:\" tool-b\n%s%s", ga, gb);
    qr_grammar *g = parse_ok(text);
    qr_grammar_vocab *v = byte_vocab();
    assert_true(g_accepts(g, v, "A:12", 4));
    assert_true(g_accepts(g, v, "B:true", 6));
    assert_false(g_accepts(g, v, "A:true", 6));
    free(ga);
    free(gb);
    assert_int_equal(qr_json_schema_to_gbnf(a, "bad prefix", &ga, err, sizeof err), QR_ERR_INVALID_ARG);
    assert_null(ga);
    qr_grammar_vocab_free(v);
    qr_grammar_free(g);
    json_decref(a);
    json_decref(b);
}

/* The sampler's grammar stage: greedy and random sampling only ever return allowed tokens, and the
 * end comes as the EOG token. */
static void test_sampler_grammar(void **state) {
    (void)state;
    qr_grammar_vocab *v = byte_vocab();
    qr_grammar *g = parse_ok("root ::= \"ab\" [0-9]{1,3}");
    for (int mode = 0; mode < 2; mode++) {
        for (int run = 0; run < 20; run++) {
            qr_sampler_params p;
            if (mode == 0) qr_sampler_params_greedy(&p);
            else qr_sampler_params_default(&p), p.seed = (uint64_t)run;
            qr_sampler *smp = NULL;
            qr_grammar_matcher *m = NULL;
            char err[256];
            assert_int_equal(qr_sampler_create(&p, 257, &smp, err, sizeof err), QR_OK);
            assert_int_equal(qr_grammar_matcher_create(g, v, &m, err, sizeof err), QR_OK);
            qr_sampler_set_grammar(smp, m);
            float logits[257];
            char out[16];
            int n = 0;
            for (int step = 0; step < 8; step++) {
                for (int i = 0; i < 257; i++) logits[i] = (float)((i * 7919 + step * 104729 + run * 13) % 97) / 10.0f;
                logits['z'] = 50.0f; /* the unconstrained favourite is never allowed */
                qr_sample_result r;
                if (qr_sampler_sample(smp, logits, &r, err, sizeof err) != QR_OK) fail_msg("mode %d run %d step %d: %s", mode, run, step, err);
                if (r.token == 256) break;
                out[n++] = (char)r.token;
            }
            out[n] = 0;
            assert_true(n >= 3 && n <= 5);
            assert_true(out[0] == 'a' && out[1] == 'b');
            for (int i = 2; i < n; i++) assert_true(out[i] >= '0' && out[i] <= '9');
            assert_true(qr_grammar_matcher_done(qr_sampler_grammar(smp)));
            qr_sampler_free(smp);
        }
    }
    qr_grammar_free(g);
    qr_grammar_vocab_free(v);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_parse_and_match),
        cmocka_unit_test(test_mask_matches_brute_force),
        cmocka_unit_test(test_long_run_rebuilds),
        cmocka_unit_test(test_schema_table),
        cmocka_unit_test(test_schema_refusals),
        cmocka_unit_test(test_schema_prefix_compose),
        cmocka_unit_test(test_sampler_grammar),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
