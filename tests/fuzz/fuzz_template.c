/* fuzz_template.c — libFuzzer target for the chat-template interpreter.
 *
 * Each input is a template source. It is parsed from an exact-size copy (so ASan catches any read
 * past the end) and, when it parses, rendered twice against a fixed conversation (system, user,
 * assistant with tool calls and thinking, tool result, list-valued content, non-ASCII text) with
 * tools and extra variables. Tight limits keep every input fast. Invariants (trap on violation):
 * a successful render returns a NUL-terminated buffer of the reported length, a failed one returns
 * no buffer and a "template..." message, and both renders of the same template agree. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "template/template.h"

static const char k_messages[] =
    "[{\"role\": \"system\", \"content\": \"You are helpful.\"},"
    " {\"role\": \"user\", \"content\": \"Hi \\u00e9\\u65e5\\ud83d\\ude00 {{ x }} <b>\"},"
    " {\"role\": \"assistant\", \"content\": null, \"thinking\": \"hmm\","
    "  \"tool_calls\": [{\"id\": \"call12345\", \"type\": \"function\","
    "   \"function\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2, \"x\": [1.5, true, null]}}}]},"
    " {\"role\": \"tool\", \"tool_call_id\": \"call12345\", \"content\": \"{\\\"temp\\\": 21}\"},"
    " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \" look \"}, {\"type\": \"image\"}]},"
    " {\"role\": \"assistant\", \"content\": \"It is 21.\"}]";

static const char k_tools[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather\","
    " \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"enum\": [\"a\", \"b\"]},"
    " \"days\": {\"type\": \"integer\", \"default\": 1}}, \"required\": [\"city\"]}}}]";

static const char k_extra[] =
    "{\"enable_thinking\": false, \"builtin_tools\": [\"browser\", \"python\"], \"reasoning_effort\": \"low\","
    " \"controls\": {\"citations\": true}, \"n\": 3, \"f\": -0.5, \"s\": \"str\", \"none\": null}";

static json_t *g_messages, *g_tools, *g_extra;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    g_messages = json_loads(k_messages, 0, NULL);
    g_tools = json_loads(k_tools, 0, NULL);
    g_extra = json_loads(k_extra, 0, NULL);
    if (!g_messages || !g_tools || !g_extra) abort();
    return 0;
}

static void check(bool ok) {
    if (!ok) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 64 * 1024) return 0;
    char *src = malloc(size ? size : 1);
    if (!src) return 0;
    memcpy(src, data, size);
    char err[256];
    qr_chat_template *t = NULL;
    qr_status st = qr_chat_template_parse(src, size, &t, err, sizeof err);
    if (st != QR_OK) {
        check(t == NULL && strncmp(err, "template", 8) == 0);
        free(src);
        return 0;
    }
    free(src); /* the parsed template must not point into the source */
    qr_chat_options opt = {
        .add_generation_prompt = true,
        .bos_token = "<s>",
        .eos_token = "</s>",
        .tools = g_tools,
        .extra = g_extra,
        .now = "2024-07-26 12:34:56",
        .max_output = 1u << 20,
        .max_memory = 64u << 20,
        .max_steps = 200000,
        .max_depth = 48,
    };
    char *out1 = NULL, *out2 = NULL;
    size_t len1 = 0, len2 = 0;
    char err2[256];
    qr_status s1 = qr_chat_template_render(t, g_messages, &opt, &out1, &len1, err, sizeof err);
    qr_status s2 = qr_chat_template_render(t, g_messages, &opt, &out2, &len2, err2, sizeof err2);
    check(s1 == s2);
    if (s1 == QR_OK) {
        check(out1 && out2 && out1[len1] == 0 && len1 == len2 && memcmp(out1, out2, len1) == 0);
    } else {
        check(!out1 && !out2 && strncmp(err, "template", 8) == 0 && strcmp(err, err2) == 0);
    }
    free(out1);
    free(out2);
    qr_chat_template_free(t);
    return 0;
}
