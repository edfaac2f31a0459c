/* test_chat_parse.c — the chat reply splitter: tool calls in each family's syntax (Hermes, Llama 3,
 * Mistral old and new, harmony, Granite, generic JSON), reasoning (<think>, harmony analysis), text
 * that only looks like a call, the streaming parser against the one-shot parse at every split of the
 * text, and the forced-call grammar (accepts the family's call, refuses other text). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sampling/chat_parse.h"
#include "sampling/grammar.h"
#include "byte_vocab.h"

static qr_chat_result parse(qr_tool_format f, bool tools, const char *text) {
    qr_chat_parse_params p;
    qr_chat_parse_params_default(&p);
    p.format = f;
    p.tools = tools;
    qr_chat_result r;
    char err[256];
    assert_int_equal(qr_chat_parse(&p, text, strlen(text), &r, err, sizeof err), QR_OK);
    return r;
}

/* The call's arguments equal the JSON text want (compared as JSON values). */
static void assert_args(const qr_tool_call *c, const char *name, const char *want) {
    assert_string_equal(c->name, name);
    json_t *a = json_loads(c->arguments, 0, NULL), *b = json_loads(want, 0, NULL);
    assert_non_null(a);
    assert_non_null(b);
    assert_true(json_equal(a, b));
    json_decref(a);
    json_decref(b);
}

static void test_hermes(void **state) {
    (void)state;
    qr_chat_result r = parse(QR_TOOL_FORMAT_HERMES, true,
                             "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                             "</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": \"{\\\"tz\\\": \\\"CET\\\"}\"}\n"
                             "</tool_call>");
    assert_int_equal(r.n_calls, 2);
    assert_args(&r.calls[0], "get_weather", "{\"city\": \"Paris\"}");
    assert_args(&r.calls[1], "get_time", "{\"tz\": \"CET\"}");
    assert_string_equal(r.content, "Let me check.\n");
    qr_chat_result_free(&r);
    /* an unterminated call at the end of the reply (the model stopped at its end token) */
    r = parse(QR_TOOL_FORMAT_HERMES, true, "<tool_call>{\"name\": \"f\", \"arguments\": {}}");
    assert_int_equal(r.n_calls, 1);
    assert_args(&r.calls[0], "f", "{}");
    assert_string_equal(r.content, "");
    qr_chat_result_free(&r);
    /* not a call: kept as text */
    r = parse(QR_TOOL_FORMAT_HERMES, true, "a <tool_call>not json</tool_call> b");
    assert_int_equal(r.n_calls, 0);
    assert_string_equal(r.content, "a <tool_call>not json</tool_call> b");
    qr_chat_result_free(&r);
    /* tools off: the markup is content */
    r = parse(QR_TOOL_FORMAT_HERMES, false, "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>");
    assert_int_equal(r.n_calls, 0);
    assert_string_equal(r.content, "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>");
    qr_chat_result_free(&r);
}

static void test_llama3(void **state) {
    (void)state;
    qr_chat_result r = parse(QR_TOOL_FORMAT_LLAMA3, true, "{\"name\": \"search\", \"parameters\": {\"q\": \"cats\"}}");
    assert_int_equal(r.n_calls, 1);
    assert_args(&r.calls[0], "search", "{\"q\": \"cats\"}");
    assert_string_equal(r.content, "");
    qr_chat_result_free(&r);
    r = parse(QR_TOOL_FORMAT_LLAMA3, true, "<|python_tag|>{\"name\": \"brave_search\", \"parameters\": {\"query\": \"x\"}}");
    assert_int_equal(r.n_calls, 1);
    assert_args(&r.calls[0], "brave_search", "{\"query\": \"x\"}");
    qr_chat_result_free(&r);
    /* JSON that is not a call is content */
    r = parse(QR_TOOL_FORMAT_LLAMA3, true, "{\"answer\": 42}");
    assert_int_equal(r.n_calls, 0);
    assert_string_equal(r.content, "{\"answer\": 42}");
    qr_chat_result_free(&r);
}

static void test_mistral(void **state) {
    (void)state;
    qr_chat_result r = parse(QR_TOOL_FORMAT_MISTRAL, true,
                             "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": 1}, \"id\": \"abc123XYZ\"}, "
                             "{\"name\": \"b\", \"arguments\": {}}]");
    assert_int_equal(r.n_calls, 2);
    assert_args(&r.calls[0], "a", "{\"x\": 1}");
    assert_string_equal(r.calls[0].id, "abc123XYZ");
    assert_args(&r.calls[1], "b", "{}");
    assert_null(r.calls[1].id);
    qr_chat_result_free(&r);
    r = parse(QR_TOOL_FORMAT_MISTRAL, true, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Rome\"}");
    assert_int_equal(r.n_calls, 1);
    assert_args(&r.calls[0], "get_weather", "{\"city\": \"Rome\"}");
    qr_chat_result_free(&r);
}

static void test_granite(void **state) {
    (void)state;
    qr_chat_result r = parse(QR_TOOL_FORMAT_GRANITE, true,
                             "<|tool_call|>[{\"name\": \"get_stock\", \"arguments\": {\"ticker\": \"IBM\"}}]");
    assert_int_equal(r.n_calls, 1);
    assert_args(&r.calls[0], "get_stock", "{\"ticker\": \"IBM\"}");
    assert_string_equal(r.content, "");
    qr_chat_result_free(&r);
}

static void test_harmony(void **state) {
    (void)state;
    qr_chat_result r = parse(QR_TOOL_FORMAT_HARMONY, true,
                             "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>"
                             "commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Oslo\"}<|call|>");
    assert_int_equal(r.n_calls, 1);
    assert_args(&r.calls[0], "get_weather", "{\"city\": \"Oslo\"}");
    assert_string_equal(r.reasoning, "Need the weather.");
    assert_string_equal(r.content, "");
    qr_chat_result_free(&r);
    /* the recipient in the role part; then a final answer */
    r = parse(QR_TOOL_FORMAT_HARMONY, true,
              "<|start|>assistant to=functions.lookup<|channel|>commentary json<|message|>{\"id\": 7}<|call|>"
              "<|start|>assistant<|channel|>final<|message|>Done.<|return|>");
    assert_int_equal(r.n_calls, 1);
    assert_args(&r.calls[0], "lookup", "{\"id\": 7}");
    assert_string_equal(r.content, "Done.");
    qr_chat_result_free(&r);
    /* reasoning + final, no tools */
    r = parse(QR_TOOL_FORMAT_HARMONY, false,
              "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Hi!");
    assert_string_equal(r.reasoning, "Think.");
    assert_string_equal(r.content, "Hi!");
    qr_chat_result_free(&r);
}

static void test_generic(void **state) {
    (void)state;
    qr_chat_result r = parse(QR_TOOL_FORMAT_GENERIC, true, "  {\"name\": \"f\", \"arguments\": {\"a\": [1, 2]}}");
    assert_int_equal(r.n_calls, 1);
    assert_args(&r.calls[0], "f", "{\"a\": [1, 2]}");
    qr_chat_result_free(&r);
    r = parse(QR_TOOL_FORMAT_GENERIC, true,
              "```json\n[{\"name\": \"f\", \"arguments\": {}}, {\"function\": {\"name\": \"g\", \"arguments\": \"{}\"}}]\n```");
    assert_int_equal(r.n_calls, 2);
    assert_args(&r.calls[0], "f", "{}");
    assert_args(&r.calls[1], "g", "{}");
    qr_chat_result_free(&r);
    r = parse(QR_TOOL_FORMAT_GENERIC, true, "{\"tool_calls\": [{\"name\": \"h\", \"arguments\": {\"k\": \"}\"}}]}");
    assert_int_equal(r.n_calls, 1);
    assert_args(&r.calls[0], "h", "{\"k\": \"}\"}");
    qr_chat_result_free(&r);
    r = parse(QR_TOOL_FORMAT_GENERIC, true, "The answer is {\"name\": \"f\"}.");
    assert_int_equal(r.n_calls, 0);
    assert_string_equal(r.content, "The answer is {\"name\": \"f\"}.");
    qr_chat_result_free(&r);
    /* arguments that are not an object: not a call */
    r = parse(QR_TOOL_FORMAT_GENERIC, true, "{\"name\": \"f\", \"arguments\": 3}");
    assert_int_equal(r.n_calls, 0);
    assert_string_equal(r.content, "{\"name\": \"f\", \"arguments\": 3}");
    qr_chat_result_free(&r);
}

static void test_think(void **state) {
    (void)state;
    qr_chat_result r = parse(QR_TOOL_FORMAT_HERMES, true,
                             "<think>\nThe user wants weather.\n</think>\n\n<tool_call>\n{\"name\": \"w\", \"arguments\": {}}\n</tool_call>");
    assert_string_equal(r.reasoning, "The user wants weather.\n");
    assert_int_equal(r.n_calls, 1);
    assert_string_equal(r.content, "");
    qr_chat_result_free(&r);
    r = parse(QR_TOOL_FORMAT_GENERIC, false, "<think>hmm</think>Hello");
    assert_string_equal(r.reasoning, "hmm");
    assert_string_equal(r.content, "Hello");
    qr_chat_result_free(&r);
    /* an unclosed section is all reasoning */
    r = parse(QR_TOOL_FORMAT_GENERIC, false, "<think>still thinking");
    assert_string_equal(r.reasoning, "still thinking");
    assert_string_equal(r.content, "");
    qr_chat_result_free(&r);
    /* <think> in the middle of the text is content */
    r = parse(QR_TOOL_FORMAT_GENERIC, false, "I <think> so");
    assert_string_equal(r.reasoning, "");
    assert_string_equal(r.content, "I <think> so");
    qr_chat_result_free(&r);
    /* the prompt opened the section (Qwen3 / DeepSeek-R1 templates) */
    qr_chat_parse_params p;
    qr_chat_parse_params_default(&p);
    p.think_started = true;
    char err[128];
    assert_int_equal(qr_chat_parse(&p, "plan</think>answer", 18, &r, err, sizeof err), QR_OK);
    assert_string_equal(r.reasoning, "plan");
    assert_string_equal(r.content, "answer");
    qr_chat_result_free(&r);
}

/* Feeds text split at every position (two pieces) and byte by byte; the concatenated deltas must equal
 * the one-shot parse. */
static void check_stream(qr_tool_format f, bool tools, const char *text) {
    qr_chat_result whole = parse(f, tools, text);
    const size_t n = strlen(text);
    qr_chat_parse_params p;
    qr_chat_parse_params_default(&p);
    p.format = f;
    p.tools = tools;
    char err[128];
    for (size_t split = 0; split <= n + 1; split++) {
        qr_chat_parser *ps;
        assert_int_equal(qr_chat_parser_create(&p, &ps, err, sizeof err), QR_OK);
        char content[2048] = "", reasoning[2048] = "";
        int32_t calls = 0;
        /* split == n + 1: byte by byte */
        size_t pos = 0;
        for (bool first = true; pos <= n; first = false) {
            size_t step = split == n + 1 ? 1 : (first ? split : n - pos);
            if (pos + step > n) step = n - pos;
            const bool end = pos + step == n;
            qr_chat_delta d;
            assert_int_equal(qr_chat_parser_feed(ps, text + pos, step, end, &d, err, sizeof err), QR_OK);
            strncat(content, d.content, d.content_len);
            strncat(reasoning, d.reasoning, d.reasoning_len);
            for (int32_t k = 0; k < d.n_calls; k++) {
                assert_int_equal(d.first_call + k, calls);
                assert_string_equal(d.calls[k].name, whole.calls[calls].name);
                assert_string_equal(d.calls[k].arguments, whole.calls[calls].arguments);
                calls++;
            }
            pos += step;
            if (end) break;
        }
        assert_string_equal(content, whole.content);
        assert_string_equal(reasoning, whole.reasoning);
        assert_int_equal(calls, whole.n_calls);
        assert_int_equal(qr_chat_parser_n_calls(ps), whole.n_calls);
        qr_chat_parser_free(ps);
    }
    qr_chat_result_free(&whole);
}

static void test_stream(void **state) {
    (void)state;
    check_stream(QR_TOOL_FORMAT_HERMES, true,
                 "<think>x</think>Sure <tool_call>\n{\"name\": \"a\", \"arguments\": {\"s\": \"</tool_call>\"}}\n</tool_call> and "
                 "<tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call> done <tool");
    check_stream(QR_TOOL_FORMAT_GENERIC, true, " {\"name\": \"f\", \"arguments\": {\"a\": \"]}\"}} tail");
    check_stream(QR_TOOL_FORMAT_GENERIC, true, "plain text with { inside");
    check_stream(QR_TOOL_FORMAT_LLAMA3, true, "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}");
    check_stream(QR_TOOL_FORMAT_MISTRAL, true, "Hi [TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}]");
    check_stream(QR_TOOL_FORMAT_GRANITE, true, "<|tool_call|>[{\"name\": \"a\", \"arguments\": {\"z\": 1}}]");
    check_stream(QR_TOOL_FORMAT_HARMONY, true,
                 "<|channel|>analysis<|message|>Let me see.<|end|><|start|>assistant<|channel|>commentary "
                 "to=functions.f <|constrain|>json<|message|>{\"q\": 1}<|call|>");
    check_stream(QR_TOOL_FORMAT_HARMONY, false,
                 "<|channel|>analysis<|message|>A<|end|><|start|>assistant<|channel|>final<|message|>Bee<|return|>");
    check_stream(QR_TOOL_FORMAT_GENERIC, false, "<think>\nreason about it\n</think>\n\nThe answer.");
    check_stream(QR_TOOL_FORMAT_GENERIC, false, "<thin air");
}

/* Whether the grammar accepts s as a complete reply. */
static bool accepts(qr_grammar *g, qr_grammar_vocab *v, const char *s) {
    qr_grammar_matcher *m;
    char err[256];
    assert_int_equal(qr_grammar_matcher_create(g, v, &m, err, sizeof err), QR_OK);
    const bool ok = qr_grammar_matcher_accept_bytes(m, s, strlen(s)) && qr_grammar_matcher_can_end(m);
    qr_grammar_matcher_free(m);
    return ok;
}

static void test_grammar(void **state) {
    (void)state;
    json_t *tools = json_loads(
        "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", "
        "\"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}},"
        " {\"type\": \"function\", \"function\": {\"name\": \"odd\", \"parameters\": {\"type\": \"object\", "
        "\"patternProperties\": {\"x\": {}}}}}]", 0, NULL);
    assert_non_null(tools);
    qr_grammar_vocab *v = byte_vocab();
    qr_grammar *g;
    char err[512];
    assert_int_equal(qr_tool_call_grammar(QR_TOOL_FORMAT_GENERIC, tools, NULL, false, &g, err, sizeof err), QR_OK);
    assert_true(accepts(g, v, "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}"));
    assert_false(accepts(g, v, "{\"name\": \"get_weather\", \"arguments\": {}}")); /* city is required */
    assert_false(accepts(g, v, "{\"name\": \"nope\", \"arguments\": {}}"));
    assert_true(accepts(g, v, "{\"name\": \"odd\", \"arguments\": {\"x\": 1}}")); /* unsupported keyword: any object */
    assert_false(accepts(g, v, "Sure!"));
    qr_grammar_free(g);
    assert_int_equal(qr_tool_call_grammar(QR_TOOL_FORMAT_HERMES, tools, "get_weather", true, &g, err, sizeof err), QR_OK);
    const char *two = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"A\"}}\n</tool_call>\n"
                      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"B\"}}\n</tool_call>";
    assert_true(accepts(g, v, two));
    assert_false(accepts(g, v, "<tool_call>\n{\"name\": \"odd\", \"arguments\": {}}\n</tool_call>"));
    /* what the grammar forces parses back into the calls */
    qr_chat_result r = parse(QR_TOOL_FORMAT_HERMES, true, two);
    assert_int_equal(r.n_calls, 2);
    qr_chat_result_free(&r);
    qr_grammar_free(g);
    assert_int_equal(qr_tool_call_grammar(QR_TOOL_FORMAT_HARMONY, tools, "get_weather", false, &g, err, sizeof err), QR_OK);
    assert_true(accepts(g, v, "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"X\"}"));
    qr_grammar_free(g);
    assert_int_equal(qr_tool_call_grammar(QR_TOOL_FORMAT_LLAMA3, tools, NULL, true, &g, err, sizeof err), QR_OK);
    assert_true(accepts(g, v, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"X\"}}"));
    qr_grammar_free(g);
    assert_int_equal(qr_tool_call_grammar(QR_TOOL_FORMAT_MISTRAL, tools, NULL, true, &g, err, sizeof err), QR_OK);
    assert_true(accepts(g, v, "[TOOL_CALLS][{\"name\": \"odd\", \"arguments\": {}}, {\"name\": \"odd\", \"arguments\": {}}]"));
    qr_grammar_free(g);
    /* an unknown forced name and a malformed schema are errors */
    assert_int_not_equal(qr_tool_call_grammar(QR_TOOL_FORMAT_GENERIC, tools, "missing", false, &g, err, sizeof err), QR_OK);
    json_t *bad = json_loads("[{\"type\": \"function\", \"function\": {\"name\": \"b\", \"parameters\": "
                             "{\"type\": \"object\", \"properties\": 5}}}]", 0, NULL);
    assert_int_not_equal(qr_tool_call_grammar(QR_TOOL_FORMAT_GENERIC, bad, NULL, false, &g, err, sizeof err), QR_OK);
    assert_non_null(strstr(err, "'b'"));
    json_decref(bad);
    char *sys = qr_tool_system_prompt(tools, true);
    assert_non_null(strstr(sys, "get_weather"));
    assert_non_null(strstr(sys, "must call"));
    free(sys);
    qr_grammar_vocab_free(v);
    json_decref(tools);
}

static void test_detect(void **state) {
    (void)state;
    assert_int_equal(qr_tool_format_detect("{% if tools %}<tool_call>{% endif %}"), QR_TOOL_FORMAT_HERMES);
    assert_int_equal(qr_tool_format_detect("<|start_header_id|>ipython<|end_header_id|>"), QR_TOOL_FORMAT_LLAMA3);
    assert_int_equal(qr_tool_format_detect("[AVAILABLE_TOOLS][TOOL_CALLS]"), QR_TOOL_FORMAT_MISTRAL);
    assert_int_equal(qr_tool_format_detect("<|start|>assistant<|channel|>final"), QR_TOOL_FORMAT_HARMONY);
    assert_int_equal(qr_tool_format_detect("<|tool_call|>"), QR_TOOL_FORMAT_GRANITE);
    assert_int_equal(qr_tool_format_detect("<|im_start|>"), QR_TOOL_FORMAT_GENERIC);
    assert_int_equal(qr_tool_format_detect(NULL), QR_TOOL_FORMAT_GENERIC);
    assert_true(qr_template_knows_tools("{% if tools %}"));
    assert_false(qr_template_knows_tools("{{ messages }}"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hermes),  cmocka_unit_test(test_llama3), cmocka_unit_test(test_mistral),
        cmocka_unit_test(test_granite), cmocka_unit_test(test_harmony), cmocka_unit_test(test_generic),
        cmocka_unit_test(test_think),   cmocka_unit_test(test_stream), cmocka_unit_test(test_grammar),
        cmocka_unit_test(test_detect),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
