/* reqparse.h — request bodies -> validated generation requests. No I/O and no model: the fuzz
 * target (tests/fuzz/fuzz_server_request.c) drives these functions directly.
 *
 * Every failure is a client error: INVALID_REQUEST with a message naming the field. */
#ifndef QR_SERVER_REQPARSE_H
#define QR_SERVER_REQPARSE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sampling/chat_parse.h"
#include "sampling/grammar.h"
#include "sampling/sampler.h"

#define SRV_MAX_STOPS 16

/* Which API a body belongs to (decides field names and defaults). */
typedef enum srv_api {
    SRV_API_OLLAMA_GENERATE = 0,
    SRV_API_OLLAMA_CHAT = 1,
    SRV_API_OPENAI_CHAT = 2,
    SRV_API_OPENAI_COMPLETION = 3,
    SRV_API_NATIVE = 4, /* /ws inference payloads and /api/stream: prompt or messages */
} srv_api;

typedef struct srv_gen_req {
    json_t *root;           /* the parsed body (owned) */
    const char *model;      /* into root; "" when absent */
    const char *prompt;     /* into root or NULL (completion style) */
    json_t *prompt_ids;     /* OpenAI completions: array of token ids (borrowed from root) or NULL */
    json_t *messages;       /* chat style: array of {role, content} (borrowed) or NULL */
    const char *system;     /* Ollama generate: system message, or NULL */
    bool raw;               /* Ollama generate: no chat template */
    bool continue_final;    /* native continue_final_message: the last (assistant) message is continued,
                               not closed: rendered as the template's generation prompt plus its text */
    bool stream;
    qr_sampler_params sp;   /* temperature, top_k, ... seed, logit bias, logprobs */
    int32_t max_tokens;     /* -1 = until the context is full */
    const char *stops[SRV_MAX_STOPS];
    int32_t n_stops;
    bool include_usage;     /* OpenAI stream_options.include_usage */
    bool has_keep_alive;
    double keep_alive_s;    /* Ollama keep_alive: seconds (< 0 = forever, 0 = unload after) */
    int32_t priority;       /* 0 interactive, 1 batch */
    bool ignore_eos;
    int8_t speculative;     /* "speculative": -1 absent (the server's setting), 0 off, 1 on */
    qr_logit_bias *bias;    /* owned, [n_bias] */
    int32_t n_bias;
    qr_grammar *grammar;    /* owned reference or NULL: OpenAI response_format (json_object, json_schema),
                               Ollama format ("json" or a schema), native grammar (GBNF) / json_schema */
    /* tool calling (chat routes) */
    json_t *tools;          /* borrowed: the validated array of tool objects; NULL when none or tool_choice "none" */
    int32_t tool_choice;    /* srv_tool_choice */
    const char *tool_name;  /* SRV_TOOLS_NAMED: the function to call */
    bool parallel_tools;    /* parallel_tool_calls (default true) */
    /* reasoning */
    int32_t think;          /* -1 not said, 0 off, 1 on (Ollama think, OpenAI reasoning_effort "none" = 0) */
    const char *reasoning_effort; /* into root, or NULL (passed to templates that read it) */
    int32_t think_budget;   /* reasoning tokens before the section is closed; -1 = no limit */
    /* filled when the model is known (srv_chat_prepare, chat_tools.c) */
    bool split;             /* the route splits the reply into content / reasoning / tool calls */
    qr_chat_parse_params parse;
    bool special_text;      /* generate with control tokens shown (the tool format needs them) */
    json_t *chat_messages;  /* owned: the messages as rendered (tools prompt, normalized tool calls) or NULL */
    json_t *chat_extra;     /* owned: extra template variables (enable_thinking, reasoning_effort) or NULL */
    bool template_tools;    /* pass `tools` to the chat template (it renders them itself) */
    int32_t *think_end;     /* owned: [n_think_end] tokens forced when the budget is spent */
    int32_t n_think_end;
} srv_gen_req;

typedef enum srv_tool_choice {
    SRV_TOOLS_AUTO = 0,
    SRV_TOOLS_NONE = 1,
    SRV_TOOLS_REQUIRED = 2,
    SRV_TOOLS_NAMED = 3,
} srv_tool_choice;

/* Reads and validates root's tool fields into r: `tools` (an array of {"type": "function", "function":
 * {"name", "description"?, "parameters"?, "strict"?}}), `tool_choice` ("auto", "none", "required" or
 * {"type": "function", "function": {"name"}}) and `parallel_tool_calls`. Returns 0 or -1 with a
 * message naming the field. */
int srv_parse_tools(json_t *root, srv_gen_req *r, char *err, size_t err_len);

/* Reads the reasoning fields of root for api into r: OpenAI `reasoning_effort` (none, minimal, low,
 * medium, high), Ollama `think` (a boolean or low / medium / high), and `max_thinking_tokens` (the
 * budget, >= 0). Returns 0 or -1 with a message. */
int srv_parse_reasoning(json_t *root, srv_api api, srv_gen_req *r, char *err, size_t err_len);

/* Parses a JSON body whose nesting is at most max_depth (arrays + objects) into *root. Returns 0, or
 * -1 with a message in err (malformed JSON, too deep, not an object). */
int srv_json_parse(const char *body, size_t len, int max_depth, json_t **root, char *err, size_t err_len);

/* Fills *out from body for `api` (out is zeroed first; release with srv_gen_req_free even on error).
 * Returns 0 or -1 with a message. */
int srv_gen_req_parse(const char *body, size_t len, srv_api api, int max_depth, srv_gen_req *out, char *err,
                      size_t err_len);
/* Same from an already parsed object (takes a reference of root). */
int srv_gen_req_from_json(json_t *root, srv_api api, srv_gen_req *out, char *err, size_t err_len);
void srv_gen_req_free(srv_gen_req *r);

/* Compiles the grammar fields of root for `api` into *out (NULL when there are none): OpenAI
 * response_format {type: text | json_object | json_schema {schema, name, strict}} (and the
 * llama.cpp-style `grammar` string), Ollama format ("json", "" or a schema object), native
 * `grammar` (GBNF text) or `json_schema` (a schema). Returns 0, or -1 with a message naming the
 * field and the construct (an unsupported schema keyword, a GBNF syntax error). */
int srv_parse_grammar(json_t *root, srv_api api, qr_grammar **out, char *err, size_t err_len);

/* Parses an Ollama keep_alive value: a number of seconds, or a duration string ("5m", "1h30m",
 * "10s", "-1"). Returns 0 or -1. */
int srv_parse_duration(const json_t *v, double *seconds);

/* Checks that s[0..len) is valid UTF-8 (no overlongs, no surrogates). */
bool srv_utf8_valid(const char *s, size_t len);

#endif
