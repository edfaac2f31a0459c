/* api_compat.h — what the OpenAI Responses API (api_responses.c) and the Anthropic Messages API
 * (api_anthropic.c) share: both turn their request into an OpenAI chat request (messages with
 * tool_calls and tool results, tools, tool_choice, sampling fields) for reqparse.c, so that the chat
 * routes' tool calling (chat_tools.c: the template's tools or the generic prompt, the grammar of a
 * required call) and the shared parser (sampling/chat_parse.h: content, reasoning, calls) serve them
 * too; and both run the generation with a callback per piece of text. */
#ifndef QR_SERVER_API_COMPAT_H
#define QR_SERVER_API_COMPAT_H

#include "server/api_common.h"

/* Growable text buffer (always NUL-terminated once something was added). */
typedef struct srv_tbuf {
    char *p;
    size_t len, cap;
} srv_tbuf;

/* Appends s[0..n) (drops it on OOM). */
void srv_tbuf_add(srv_tbuf *b, const char *s, size_t n);
/* The text ("" when empty). */
const char *srv_tbuf_str(const srv_tbuf *b);

/* ---- request fields (each returns 1 present, 0 absent or null, -1 wrong with a message naming key) ---- */
int srv_compat_str(json_t *o, const char *key, const char **out, char *err, size_t err_len);
int srv_compat_int(json_t *o, const char *key, int64_t lo, int64_t hi, int64_t *out, char *err, size_t err_len);
int srv_compat_bool(json_t *o, const char *key, bool *out, char *err, size_t err_len);
/* Appends the text of a content value c in field `field` (absent / null: nothing): a string, or an array
 * of parts {type, text} whose type is one of types (NULL-terminated, at most two), joined by sep. 0 or -1. */
int srv_compat_parts_text(json_t *c, const char *field, const char *const *types, const char *sep, srv_tbuf *out,
                          char *err, size_t err_len);
/* Copies o[key] into dst[key] when present and not null. */
void srv_compat_copy(json_t *dst, json_t *o, const char *key);

/* ---- tools (the shared tool calling of chat_tools.c / chat_parse.h does the rest) ---- */
/* Checks a function name as reqparse does (1-64 of a-z A-Z 0-9 _ . -). */
bool srv_compat_tool_name_ok(const char *name);
/* Appends {"type": "function", "function": {name, description, parameters}} (description / parameters
 * may be NULL) to tools, the OpenAI chat form reqparse reads. 0, or -1 on OOM. */
int srv_compat_tool_add(json_t *tools, const char *name, const char *description, json_t *parameters);
/* A call in the conversation: joins the tool_calls of the last message when it is the assistant's,
 * else starts an assistant message. arguments: the JSON text. 0, or -1 on OOM. */
int srv_compat_add_call(json_t *msgs, const char *id, const char *name, const char *arguments);
/* A call's result: a tool message {tool_call_id, content}. 0, or -1 on OOM. */
int srv_compat_add_result(json_t *msgs, const char *call_id, const char *content);
/* Gives each tool message the name of the call it answers (the call with its tool_call_id), which the
 * generic tool format shows the model. */
void srv_compat_name_results(json_t *msgs);
/* Appends {role, content}, or joins the text to the last message (with a newline) when that message is
 * msgs[first] or later, has the same role (not tool) and no tool calls: the blocks of one input message
 * become one message. first = json_array_size(msgs): always a new message. 0, or -1 on OOM. */
int srv_compat_add_text(json_t *msgs, const char *role, const char *text, size_t first);

/* Turns chat_body ({messages, tools, tool_choice, sampling fields} in OpenAI chat form, owned by the
 * caller) into *req with reqparse, and sets the grammar g (taken; text.format / output_config) unless a
 * call is required (its grammar wins: g is dropped). 0, or -1 with a message (nothing to free). */
int srv_compat_request(json_t *chat_body, qr_grammar *g, srv_gen_req *req, char *err, size_t err_len);

/* Compiles a JSON schema given in field `field` (NULL schema = any JSON object). 0, or -1 with a message. */
int srv_compat_schema_grammar(const json_t *schema, const char *field, qr_grammar **out, char *err, size_t err_len);

/* ---- the generation ---- */
typedef enum srv_part { SRV_PART_TEXT = 0, SRV_PART_REASONING = 1 } srv_part;

typedef struct srv_compat_run {
    /* in. Streaming: called with each piece of reply text or reasoning as soon as the shared parser
     * releases it (calls are held back until complete and come in `calls`); -1 = the client is gone
     * (the generation is cancelled). NULL: not streaming. */
    int (*on_delta)(void *user, srv_part part, const char *s, size_t n);
    void *user;
    /* out */
    srv_tbuf text;        /* the reply's text outside tool calls and reasoning */
    srv_tbuf reasoning;   /* its reasoning (<think> section), "" when none */
    json_t *calls;        /* [{name, arguments (JSON text)}], in order */
    const char *ecode;    /* error code when the generation did not finish, else NULL */
    const char *emsg;     /* its message */
    int http;             /* its HTTP status */
    const char *stop_seq; /* the request's stop sequence that ended the reply, or NULL */
    bool length;          /* cut at max tokens / the context */
    bool gone;            /* the client went away (on_delta failed) */
    int32_t n_prompt, n_gen, n_cached;
    srv_ev *done;         /* the DONE event (owned; NULL when none came) */
} srv_compat_run;

/* Runs the started job j to its end, filling r (the "in" fields set by the caller, the rest zero);
 * accounts the tokens (metrics, rate limits). */
void srv_compat_generate(srv_conn *rc, srv_job *j, srv_compat_run *r);
void srv_compat_run_free(srv_compat_run *r);

/* ---- misc ---- */
/* prefix + 24 random hex digits (ids of responses, messages, items, tool calls). */
void srv_compat_id(const char *prefix, char *out, size_t cap);
/* Counts one request using `feature` (quarrel_requests_by_feature_total{feature}). */
void srv_compat_feature(srv_conn *rc, const char *feature);

#endif
