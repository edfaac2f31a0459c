/* chat_parse.h — what a chat model wrote, split into its parts: reasoning (`<think>...</think>`, the
 * harmony analysis channel), visible content, and tool calls in the syntax of the model's family; and
 * the grammar that forces a well-formed tool call in that syntax.
 *
 * Model-agnostic text processing: it knows no tokenizer, no server and no request types, so every API
 * (OpenAI chat, Ollama chat, Responses, Anthropic messages) uses the same parser.
 *
 * Tool-call syntaxes (qr_tool_format):
 *   GENERIC  the whole reply is JSON: {"name": N, "arguments": {...}}, an array of those, or
 *            {"tool_calls": [...]} (a ```json fence around it is allowed). Models whose template knows
 *            no tools are told this format in a system message (qr_tool_system_prompt).
 *   HERMES   <tool_call>{"name": N, "arguments": {...}}</tool_call>, repeated (Hermes, Qwen 2.5/3, SmolLM3)
 *   LLAMA3   {"name": N, "parameters": {...}} as the whole reply, or after <|python_tag|> (Llama 3.1-3.3)
 *   MISTRAL  [TOOL_CALLS][{"name": N, "arguments": {...}, "id": ...}, ...], or the newer
 *            [TOOL_CALLS]N[ARGS]{...} (Mistral, Mixtral, Ministral, Devstral)
 *   HARMONY  <|channel|>commentary to=functions.N <|constrain|>json<|message|>{...}<|call|>, the
 *            recipient also allowed in the role part (<|start|>assistant to=functions.N<|channel|>...);
 *            the analysis channel is reasoning, the final channel content (gpt-oss). The framing tokens
 *            must be in the text: render control tokens when generating for this format.
 *   GRANITE  <|tool_call|>[{"name": N, "arguments": {...}}, ...] (IBM Granite 3.x)
 * Every call object may also be written {"function": {"name", "arguments"}} or with "parameters" for
 * "arguments"; arguments given as a JSON string holding an object are accepted. A call that does not
 * parse stays in the content as text (nothing the model wrote is dropped).
 *
 * Streaming: the parser takes the generated text piece by piece and hands out, for each piece, the
 * content and reasoning text that is now certain and the calls that are now complete. It holds back
 * text that may still turn into a marker (`<tool_` ...), the body of a call until it ends, and a reply
 * that begins like a JSON call (GENERIC, LLAMA3) until the JSON value is complete. What it hands out
 * over a whole stream equals what qr_chat_parse gives for the whole text. */
#ifndef QR_SAMPLING_CHAT_PARSE_H
#define QR_SAMPLING_CHAT_PARSE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quarrel.h"
#include "sampling/grammar.h"

typedef enum qr_tool_format {
    QR_TOOL_FORMAT_GENERIC = 0,
    QR_TOOL_FORMAT_HERMES = 1,
    QR_TOOL_FORMAT_LLAMA3 = 2,
    QR_TOOL_FORMAT_MISTRAL = 3,
    QR_TOOL_FORMAT_HARMONY = 4,
    QR_TOOL_FORMAT_GRANITE = 5,
} qr_tool_format;

/* The syntax a chat template teaches its model, read from the template's source (NULL or a template
 * without tool markers: GENERIC). */
qr_tool_format qr_tool_format_detect(const char *template_src);
/* "generic", "hermes", "llama3", "mistral", "harmony", "granite". */
const char *qr_tool_format_name(qr_tool_format f);
/* Whether the format's markers are control tokens that the text must show (render them when
 * detokenizing): LLAMA3, MISTRAL, HARMONY, GRANITE. */
bool qr_tool_format_needs_special(qr_tool_format f);

/* Whether a chat template renders the `tools` variable itself (else qr_tool_system_prompt is used). */
bool qr_template_knows_tools(const char *template_src);

/* One parsed call. */
typedef struct qr_tool_call {
    char *name;      /* malloc'd, NUL-terminated */
    char *arguments; /* malloc'd JSON text of an object (compact), "{}" when the model gave none */
    char *id;        /* the id the model wrote (Mistral), or NULL */
} qr_tool_call;

typedef struct qr_chat_parse_params {
    qr_tool_format format;
    bool tools;              /* parse tool calls (the request gave tools); else calls stay content */
    bool think;              /* split a reply that begins with think_open (default on via _default) */
    bool think_started;      /* the prompt already opened the reasoning section (it ends with think_open) */
    const char *think_open;  /* NULL = "<think>" */
    const char *think_close; /* NULL = "</think>" */
} qr_chat_parse_params;

/* format GENERIC, tools off, think on with <think> / </think>, not started. */
void qr_chat_parse_params_default(qr_chat_parse_params *p);

/* A whole reply, split. */
typedef struct qr_chat_result {
    char *content;        /* malloc'd, NUL-terminated ("" when none) */
    size_t content_len;
    char *reasoning;      /* malloc'd, NUL-terminated ("" when none) */
    size_t reasoning_len;
    qr_tool_call *calls;  /* [n_calls], malloc'd */
    int32_t n_calls;
} qr_chat_result;

/* Splits text[0..len) (the whole reply). Errors: QR_ERR_NOMEM. Free *out with qr_chat_result_free. */
qr_status qr_chat_parse(const qr_chat_parse_params *p, const char *text, size_t len, qr_chat_result *out,
                        char *err, size_t err_len);
void qr_chat_result_free(qr_chat_result *r);

/* The streaming parser. */
typedef struct qr_chat_parser qr_chat_parser;

/* What one qr_chat_parser_feed call releases; the pointers stay valid until the next call on the
 * parser. calls[k] is the call number first_call + k of the reply (0-based, in order). */
typedef struct qr_chat_delta {
    const char *content;
    size_t content_len;
    const char *reasoning;
    size_t reasoning_len;
    const qr_tool_call *calls;
    int32_t n_calls;
    int32_t first_call;
} qr_chat_delta;

/* Copies *p (and its strings). Errors: QR_ERR_NOMEM. */
qr_status qr_chat_parser_create(const qr_chat_parse_params *p, qr_chat_parser **out, char *err, size_t err_len);
void qr_chat_parser_free(qr_chat_parser *ps);
/* Adds text[0..len) of the reply; end = the reply is complete (release everything held back).
 * Errors: QR_ERR_NOMEM. */
qr_status qr_chat_parser_feed(qr_chat_parser *ps, const char *text, size_t len, bool end, qr_chat_delta *out,
                              char *err, size_t err_len);
/* Calls released so far (the parser keeps them until it is freed). */
int32_t qr_chat_parser_n_calls(const qr_chat_parser *ps);

/* ---- forcing a call ------------------------------------------------------------------------ */

/* The grammar of a reply that is only tool calls in format f: tools is the request's array of
 * OpenAI tool objects ({"type": "function", "function": {"name", "parameters"}}, already validated);
 * only = the one function to call (NULL = any of them); parallel = one or more calls (else exactly
 * one). Each call's arguments follow its function's parameters schema; a schema that uses a keyword
 * the JSON-schema compiler does not support falls back to "any object" for that function. Errors:
 * QR_ERR_INVALID_ARG (a malformed parameters schema, message names the function), QR_ERR_NOMEM. */
qr_status qr_tool_call_grammar(qr_tool_format f, const json_t *tools, const char *only, bool parallel,
                               qr_grammar **out, char *err, size_t err_len);

/* The system message that teaches GENERIC calls for the given tools (malloc'd text). only/required
 * say whether a call is required. NULL on OOM. */
char *qr_tool_system_prompt(const json_t *tools, bool required);

#endif /* QR_SAMPLING_CHAT_PARSE_H */
