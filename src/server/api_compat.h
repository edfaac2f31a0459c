/* api_compat.h — what the OpenAI Responses API (api_responses.c) and the Anthropic Messages API
 * (api_anthropic.c) share: both turn their request into a chat request (messages + OpenAI sampling
 * fields) for reqparse.c, describe function tools to the model in a system message, force a tool call
 * with a JSON-schema grammar, split <tool_call> blocks out of the reply, and run the generation with
 * a callback per piece of text.
 *
 * TODO(tools): the tool prompt, the Hermes-style <tool_call> parser and the history rendering here are
 * the minimal versions these two routes need; switch them to the shared tool-call parser and the chat
 * template's own `tools` rendering once those are on main. */
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

/* ---- tools ---- */
typedef enum srv_tool_mode {
    SRV_TOOLS_OFF = 0,    /* no tools, or tool_choice none: plain text */
    SRV_TOOLS_AUTO = 1,   /* the model may answer with <tool_call> blocks */
    SRV_TOOLS_FORCED = 2, /* the reply is one call, a grammar holds it to the tools' schemas */
} srv_tool_mode;

typedef struct srv_compat_tools {
    json_t *list;         /* [{name, description, parameters}] (owned), NULL = none */
    srv_tool_mode mode;
    char forced[72];      /* FORCED: the tool it must call, "" = any of them */
} srv_compat_tools;

/* Checks a function name (1-64 of a-z A-Z 0-9 _ -). */
bool srv_compat_tool_name_ok(const char *name);
/* Adds one tool (description and parameters may be NULL) to t->list; a name given again keeps the first
 * definition. 0, or -1 on OOM. */
int srv_compat_tool_add(srv_compat_tools *t, const char *name, const char *description, json_t *parameters);
void srv_compat_tools_free(srv_compat_tools *t);

/* The text of a tool call in a conversation's history ("<tool_call>\n{"name", "arguments"}\n</tool_call>");
 * arguments is the JSON text of the arguments. malloc'd, NULL on OOM. */
char *srv_compat_call_text(const char *name, const char *arguments);

/* Turns chat_body ({messages, sampling fields} in OpenAI chat form, owned by the caller) into *req: adds
 * the tool description to the system message (t->mode != OFF), parses it with reqparse, and sets the
 * grammar: g (taken; text.format / output_format) or, for FORCED tools, one compiled from the tools'
 * schemas (tools_field names the request field in errors). 0, or -1 with a message (req freed). */
int srv_compat_request(json_t *chat_body, const srv_compat_tools *t, const char *tools_field, qr_grammar *g,
                       srv_gen_req *req, char *err, size_t err_len);

/* Compiles a JSON schema given in field `field` (NULL schema = any JSON object). 0, or -1 with a message. */
int srv_compat_schema_grammar(const json_t *schema, const char *field, qr_grammar **out, char *err, size_t err_len);

/* ---- the generation ---- */
typedef struct srv_compat_run {
    /* in */
    srv_tool_mode tools;
    /* streaming: called with each piece of reply text outside tool calls as soon as it is safe to
     * show; -1 = the client is gone (the generation is cancelled). NULL: not streaming. */
    int (*on_text)(void *user, const char *s, size_t n);
    void *user;
    /* out */
    srv_tbuf text;        /* the reply's text outside tool calls */
    json_t *calls;        /* [{name, arguments (JSON text)}], in order */
    const char *ecode;    /* error code when the generation did not finish, else NULL */
    const char *emsg;     /* its message */
    int http;             /* its HTTP status */
    const char *stop_seq; /* the request's stop sequence that ended the reply, or NULL */
    bool length;          /* cut at max tokens / the context */
    bool gone;            /* the client went away (on_text failed) */
    int32_t n_prompt, n_gen, n_cached;
    srv_ev *done;         /* the DONE event (owned; NULL when none came) */
    char *raw;            /* all generated token pieces, for stop_seq */
} srv_compat_run;

/* Runs the started job j to its end, filling r (the "in" fields set by the caller, the rest zero);
 * accounts the tokens (metrics, rate limits). */
void srv_compat_generate(srv_conn *rc, srv_job *j, srv_compat_run *r);
void srv_compat_run_free(srv_compat_run *r);

/* ---- misc ---- */
/* prefix + 24 random hex digits (ids of responses, messages, items, tool calls). */
void srv_compat_id(const char *prefix, char *out, size_t cap);
/* Counts one request using `feature` (quarrel_feature_requests_total{endpoint, feature}). */
void srv_compat_feature(srv_conn *rc, const char *feature);

#endif
