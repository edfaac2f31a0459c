/* api_responses.c — the OpenAI Responses API: POST /v1/responses (input as a string or items,
 * instructions, function tools, text.format, previous_response_id, store, SSE events
 * response.created ... response.completed), GET and DELETE /v1/responses/{id} over the bounded
 * response store (respstore.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api_compat.h"
#include "util/util.h"

#define FAIL(...) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, __VA_ARGS__), -1

typedef struct resp_ctx {
    srv_conn *rc;
    json_t *root;                 /* the request body */
    char id[64], msg_id[64];
    json_int_t created;
    const char *instructions, *prev_id, *user;
    json_t *history;              /* the conversation without instructions: earlier turns + this input (owned) */
    json_t *tools_echo, *tool_choice_echo, *text_echo, *metadata; /* as the response object repeats them (owned) */
    json_t *chat_tools, *chat_choice; /* tools and tool_choice in the chat form reqparse reads (owned) */
    const char *effort;           /* reasoning.effort, or NULL */
    int64_t max_output;           /* 0 = none */
    bool stream, store, parallel;
    qr_grammar *g;                /* text.format (owned until the request takes it) */
    srv_job j;
    /* streaming: the item being written (a reasoning item or the message), and the next output_index */
    int64_t seq;                  /* sequence_number of the next event */
    int open;                     /* -1 none, else the srv_part of the open item */
    int32_t n_items, msg_index, rsn_index;
    bool msg_done, rsn_done;      /* that item was written */
    char rsn_id[64];
    const srv_compat_run *run;    /* the generation's text so far */
} resp_ctx;

/* ---- input -> messages ---- */

static const char *const input_parts[] = {"input_text", "output_text", NULL};

/* One input item -> msgs. */
static int input_item(json_t *it, size_t i, json_t *msgs, char *err, size_t err_len) {
    if (!json_is_object(it)) FAIL("'input[%zu]' must be an object", i);
    json_t *tv = json_object_get(it, "type");
    if (tv && !json_is_null(tv) && !json_is_string(tv)) FAIL("'input[%zu].type' must be a string", i);
    const char *type = tv && json_is_string(tv) ? json_string_value(tv) : "message";
    char field[96];
    if (!strcmp(type, "message")) {
        const char *role = json_string_value(json_object_get(it, "role"));
        if (!role || (strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "system") &&
                      strcmp(role, "developer")))
            FAIL("'input[%zu].role' must be one of user, assistant, system, developer", i);
        json_t *c = json_object_get(it, "content");
        if (!json_is_string(c) && !json_is_array(c)) FAIL("'input[%zu].content' must be a string or an array of parts", i);
        srv_tbuf t = {0};
        snprintf(field, sizeof field, "input[%zu].content", i);
        if (srv_compat_parts_text(c, field, input_parts, "", &t, err, err_len) < 0) return free(t.p), -1;
        const int rc = srv_compat_add_text(msgs, role, srv_tbuf_str(&t), json_array_size(msgs));
        free(t.p);
        return rc < 0 ? (qr_errf(err, err_len, QR_ERR_INVALID_ARG, "out of memory"), -1) : 0;
    }
    if (!strcmp(type, "function_call")) {
        const char *name = json_string_value(json_object_get(it, "name"));
        const char *args = json_string_value(json_object_get(it, "arguments"));
        if (!json_is_string(json_object_get(it, "call_id"))) FAIL("'input[%zu].call_id' must be a string", i);
        if (!name) FAIL("'input[%zu].name' must be a string", i);
        if (!args) FAIL("'input[%zu].arguments' must be a string (the arguments' JSON)", i);
        const char *call_id = json_string_value(json_object_get(it, "call_id"));
        return srv_compat_add_call(msgs, call_id, name, args) < 0 ? (qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory"), -1)
                                                                  : 0;
    }
    if (!strcmp(type, "function_call_output")) {
        if (!json_is_string(json_object_get(it, "call_id"))) FAIL("'input[%zu].call_id' must be a string", i);
        json_t *o = json_object_get(it, "output");
        if (!json_is_string(o) && !json_is_array(o)) FAIL("'input[%zu].output' must be a string or an array of parts", i);
        srv_tbuf t = {0};
        snprintf(field, sizeof field, "input[%zu].output", i);
        if (srv_compat_parts_text(o, field, input_parts, "", &t, err, err_len) < 0) return free(t.p), -1;
        const int rc = srv_compat_add_result(msgs, json_string_value(json_object_get(it, "call_id")), srv_tbuf_str(&t));
        free(t.p);
        return rc < 0 ? (qr_errf(err, err_len, QR_ERR_INVALID_ARG, "out of memory"), -1) : 0;
    }
    FAIL("'input[%zu].type' must be message, function_call or function_call_output (got '%.32s')", i, type);
}

/* tools [{type: function, name, description, parameters, strict}] and tool_choice, validated and turned into
 * the chat form (x->chat_tools, x->chat_choice). */
static int parse_tools(resp_ctx *x, char *err, size_t err_len) {
    json_t *tools = json_object_get(x->root, "tools"), *choice = json_object_get(x->root, "tool_choice");
    x->tools_echo = tools && !json_is_null(tools) ? json_incref(tools) : json_array();
    x->chat_tools = json_array();
    if (!json_is_array(x->tools_echo)) FAIL("'tools' must be an array of function tools");
    size_t i;
    json_t *t;
    json_array_foreach(x->tools_echo, i, t) {
        const char *type = json_string_value(json_object_get(t, "type"));
        if (!json_is_object(t) || !type || strcmp(type, "function"))
            FAIL("'tools[%zu].type' must be \"function\" (the only tool type supported)", i);
        const char *name = json_string_value(json_object_get(t, "name")), *desc = NULL;
        if (!name || !srv_compat_tool_name_ok(name)) FAIL("'tools[%zu].name' must be 1-64 of a-z, A-Z, 0-9, _, . and -", i);
        if (srv_compat_str(t, "description", &desc, err, err_len) < 0) FAIL("'tools[%zu].description' must be a string", i);
        json_t *params = json_object_get(t, "parameters");
        if (params && !json_is_null(params) && !json_is_object(params))
            FAIL("'tools[%zu].parameters' must be a JSON schema object", i);
        json_t *strict = json_object_get(t, "strict");
        if (strict && !json_is_null(strict) && !json_is_boolean(strict)) FAIL("'tools[%zu].strict' must be a boolean", i);
        if (srv_compat_tool_add(x->chat_tools, name, desc, params) < 0) FAIL("out of memory");
    }
    if (!choice || json_is_null(choice)) {
        x->tool_choice_echo = json_string("auto");
        return 0;
    }
    x->tool_choice_echo = json_incref(choice);
    if (json_is_string(choice)) {
        const char *c = json_string_value(choice);
        if (strcmp(c, "none") && strcmp(c, "auto") && strcmp(c, "required"))
            FAIL("'tool_choice' must be none, auto, required or {\"type\": \"function\", \"name\"}");
        if (!strcmp(c, "required") && json_array_size(x->chat_tools) == 0) FAIL("'tool_choice' required needs 'tools'");
        x->chat_choice = json_incref(choice);
        return 0;
    }
    const char *type = json_string_value(json_object_get(choice, "type"));
    const char *name = json_string_value(json_object_get(choice, "name"));
    if (!json_is_object(choice) || !type || strcmp(type, "function") || !name)
        FAIL("'tool_choice' must be none, auto, required or {\"type\": \"function\", \"name\"}");
    bool known = false;
    json_array_foreach(x->tools_echo, i, t) known = known || !strcmp(json_string_value(json_object_get(t, "name")), name);
    if (!known) FAIL("'tool_choice.name' '%.64s' is not one of 'tools'", name);
    x->chat_choice = json_pack("{s:s, s:{s:s}}", "type", "function", "function", "name", name);
    return 0;
}

/* text: {format: {type: text | json_object | json_schema {name, schema, strict, description}}}. */
static int parse_text(resp_ctx *x, char *err, size_t err_len) {
    json_t *text = json_object_get(x->root, "text");
    if (!text || json_is_null(text)) {
        x->text_echo = json_pack("{s:{s:s}}", "format", "type", "text");
        return 0;
    }
    if (!json_is_object(text)) FAIL("'text' must be an object {format}");
    x->text_echo = json_incref(text);
    json_t *fmt = json_object_get(text, "format");
    if (!fmt || json_is_null(fmt)) return 0;
    const char *type = json_string_value(json_object_get(fmt, "type"));
    if (!json_is_object(fmt) || !type) FAIL("'text.format.type' must be text, json_object or json_schema");
    if (!strcmp(type, "text")) return 0;
    if (!strcmp(type, "json_object")) return srv_compat_schema_grammar(NULL, "text.format", &x->g, err, err_len);
    if (strcmp(type, "json_schema")) FAIL("'text.format.type' must be text, json_object or json_schema (got '%.32s')", type);
    const char *name = NULL;
    if (srv_compat_str(fmt, "name", &name, err, err_len) < 0) FAIL("'text.format.name' must be a string");
    json_t *strict = json_object_get(fmt, "strict");
    if (strict && !json_is_null(strict) && !json_is_boolean(strict)) FAIL("'text.format.strict' must be a boolean");
    json_t *schema = json_object_get(fmt, "schema");
    if (!json_is_object(schema)) FAIL("'text.format.schema' must be a JSON schema object (required with json_schema)");
    return srv_compat_schema_grammar(schema, "text.format.schema", &x->g, err, err_len);
}

/* The request body -> x and the chat body for reqparse. 0, or -1 with a message (404 RESPONSE_NOT_FOUND for an
 * unknown previous_response_id: *not_found). */
static int parse_request(resp_ctx *x, json_t **chat, bool *not_found, char *err, size_t err_len) {
    json_t *root = x->root;
    const char *model = NULL;
    if (srv_compat_str(root, "model", &model, err, err_len) < 0) return -1;
    if (srv_compat_str(root, "instructions", &x->instructions, err, err_len) < 0) return -1;
    if (srv_compat_str(root, "previous_response_id", &x->prev_id, err, err_len) < 0) return -1;
    if (srv_compat_str(root, "user", &x->user, err, err_len) < 0) return -1;
    x->store = true, x->parallel = true;
    if (srv_compat_bool(root, "stream", &x->stream, err, err_len) < 0) return -1;
    if (srv_compat_bool(root, "store", &x->store, err, err_len) < 0) return -1;
    if (srv_compat_bool(root, "parallel_tool_calls", &x->parallel, err, err_len) < 0) return -1;
    if (srv_compat_int(root, "max_output_tokens", 1, 1 << 24, &x->max_output, err, err_len) < 0) return -1;
    json_t *md = json_object_get(root, "metadata");
    if (md && !json_is_null(md)) {
        if (!json_is_object(md) || json_object_size(md) > 16) FAIL("'metadata' must be an object of at most 16 strings");
        const char *k;
        json_t *v;
        json_object_foreach(md, k, v) if (!json_is_string(v)) FAIL("'metadata.%.64s' must be a string", k);
        x->metadata = json_incref(md);
    } else {
        x->metadata = json_object();
    }
    json_t *rsn = json_object_get(root, "reasoning");
    if (rsn && !json_is_null(rsn)) {
        if (!json_is_object(rsn)) FAIL("'reasoning' must be an object {effort}");
        if (srv_compat_str(rsn, "effort", &x->effort, err, err_len) < 0) FAIL("'reasoning.effort' must be a string");
        if (x->effort && strcmp(x->effort, "none") && strcmp(x->effort, "minimal") && strcmp(x->effort, "low") &&
            strcmp(x->effort, "medium") && strcmp(x->effort, "high"))
            FAIL("'reasoning.effort' must be none, minimal, low, medium or high");
    }
    if (parse_tools(x, err, err_len) < 0 || parse_text(x, err, err_len) < 0) return -1;
    /* the conversation: the earlier response's, then this input */
    json_t *input = json_object_get(root, "input"), *turn = json_array();
    int rc = 0;
    if (!input || json_is_null(input)) {
        qr_errf(err, err_len, QR_ERR_INVALID_ARG, "'input' is required");
        rc = -1;
    } else if (json_is_string(input)) {
        json_array_append_new(turn, json_pack("{s:s, s:O}", "role", "user", "content", input));
    } else if (json_is_array(input) && json_array_size(input) > 0) {
        size_t i;
        json_t *it;
        json_array_foreach(input, i, it) if (rc == 0 && input_item(it, i, turn, err, err_len) < 0) rc = -1;
    } else {
        qr_errf(err, err_len, QR_ERR_INVALID_ARG, "'input' must be a string or a non-empty array of items");
        rc = -1;
    }
    if (rc == 0 && x->prev_id &&
        srv_resp_store_get(x->rc->s->resp_store, x->prev_id, x->rc->key_id, NULL, &x->history) < 0) {
        *not_found = true;
        qr_errf(err, err_len, QR_ERR_INVALID_ARG, "'previous_response_id': no stored response '%.64s' (never stored, "
                "expired or deleted)", x->prev_id);
        rc = -1;
    }
    if (rc < 0) return json_decref(turn), -1;
    if (!x->history) x->history = json_array();
    json_array_extend(x->history, turn);
    json_decref(turn);
    srv_compat_name_results(x->history);
    json_t *msgs = json_deep_copy(x->history);
    if (x->instructions) json_array_insert_new(msgs, 0, json_pack("{s:s, s:s}", "role", "system", "content", x->instructions));
    *chat = json_pack("{s:o}", "messages", msgs);
    if (!*chat) FAIL("out of memory");
    srv_compat_copy(*chat, root, "model");
    srv_compat_copy(*chat, root, "temperature");
    srv_compat_copy(*chat, root, "top_p");
    if (x->max_output) json_object_set_new(*chat, "max_tokens", json_integer(x->max_output));
    if (json_array_size(x->chat_tools)) json_object_set(*chat, "tools", x->chat_tools);
    if (x->chat_choice) json_object_set(*chat, "tool_choice", x->chat_choice);
    json_object_set_new(*chat, "parallel_tool_calls", json_boolean(x->parallel));
    if (x->effort) json_object_set_new(*chat, "reasoning_effort", json_string(x->effort));
    return 0;
}

/* ---- output ---- */

static json_t *message_item(const resp_ctx *x, const char *text, const char *status) {
    return json_pack("{s:s, s:s, s:s, s:s, s:[{s:s, s:s, s:[], s:[]}]}", "type", "message", "id", x->msg_id, "status",
                     status, "role", "assistant", "content", "type", "output_text", "text", text, "annotations",
                     "logprobs");
}

static json_t *reasoning_item(const resp_ctx *x, const char *text) {
    return json_pack("{s:s, s:s, s:[], s:[{s:s, s:s}]}", "type", "reasoning", "id", x->rsn_id, "summary", "content",
                     "type", "reasoning_text", "text", text);
}

static json_t *call_item(json_t *call, const char *call_id) {
    char id[64];
    srv_compat_id("fc_", id, sizeof id);
    return json_pack("{s:s, s:s, s:s, s:O, s:O, s:s}", "type", "function_call", "id", id, "call_id", call_id, "name",
                     json_object_get(call, "name"), "arguments", json_object_get(call, "arguments"), "status",
                     "completed");
}

/* The response object; output and usage may be NULL (in progress). */
static json_t *response_json(const resp_ctx *x, const char *status, json_t *output, json_t *usage, json_t *error,
                             const char *incomplete) {
    const srv_gen_req *q = &x->j.req;
    json_t *r = json_pack("{s:s, s:s, s:I, s:s, s:o, s:o, s:o, s:s, s:o, s:b, s:o, s:f, s:f, s:O, s:O, s:O, s:s, "
                          "s:o, s:O, s:b}",
                          "id", x->id, "object", "response", "created_at", x->created, "status", status, "error",
                          error ? error : json_null(), "incomplete_details",
                          incomplete ? json_pack("{s:s}", "reason", incomplete) : json_null(), "instructions",
                          x->instructions ? json_string(x->instructions) : json_null(), "model",
                          x->j.m ? x->j.m->name : "", "output", output ? output : json_array(), "parallel_tool_calls",
                          x->parallel, "previous_response_id", x->prev_id ? json_string(x->prev_id) : json_null(),
                          "temperature", (double)q->sp.temperature, "top_p", (double)q->sp.top_p, "tool_choice",
                          x->tool_choice_echo, "tools", x->tools_echo, "text", x->text_echo, "truncation", "disabled",
                          "usage", usage ? usage : json_null(), "metadata", x->metadata, "store", x->store);
    if (r) {
        json_object_set_new(r, "max_output_tokens", x->max_output ? json_integer(x->max_output) : json_null());
        json_object_set_new(r, "user", x->user ? json_string(x->user) : json_null());
    }
    return r;
}

static json_t *usage_json(const srv_compat_run *g) {
    return json_pack("{s:i, s:{s:i, s:i}, s:i, s:{s:i}, s:i}", "input_tokens", g->n_prompt, "input_tokens_details",
                     "cached_tokens", g->n_cached, "cache_write_tokens", 0, "output_tokens", g->n_gen,
                     "output_tokens_details", "reasoning_tokens", 0, "total_tokens", g->n_prompt + g->n_gen);
}

/* Sends one streaming event (type + sequence_number added to j). */
static int event(resp_ctx *x, const char *type, json_t *j) {
    if (!j) return -1;
    json_object_set_new(j, "type", json_string(type));
    json_object_set_new(j, "sequence_number", json_integer(x->seq++));
    return srv_stream_sse_event(x->rc, type, j);
}

/* Streaming: announces the item of `part` (the reasoning item or the message) at the next output_index. */
static void open_item(resp_ctx *x, int part) {
    x->open = part;
    const bool text = part == SRV_PART_TEXT;
    const int32_t idx = x->n_items++;
    if (text) x->msg_index = idx;
    else x->rsn_index = idx;
    json_t *item = text ? json_pack("{s:s, s:s, s:s, s:s, s:[]}", "type", "message", "id", x->msg_id, "status",
                                    "in_progress", "role", "assistant", "content")
                        : json_pack("{s:s, s:s, s:[], s:[]}", "type", "reasoning", "id", x->rsn_id, "summary", "content");
    event(x, "response.output_item.added", json_pack("{s:i, s:o}", "output_index", idx, "item", item));
    if (text)
        event(x, "response.content_part.added",
              json_pack("{s:s, s:i, s:i, s:{s:s, s:s, s:[], s:[]}}", "item_id", x->msg_id, "output_index", idx,
                        "content_index", 0, "part", "type", "output_text", "text", "", "annotations", "logprobs"));
}

/* Streaming: the .done events of the open item, whose whole text is `text`. */
static void close_item(resp_ctx *x, const char *text, const char *status) {
    if (x->open < 0) return;
    if (x->open == SRV_PART_TEXT) {
        const int32_t idx = x->msg_index;
        json_t *item = message_item(x, text, status);
        event(x, "response.output_text.done", json_pack("{s:s, s:i, s:i, s:s, s:[]}", "item_id", x->msg_id, "output_index",
                                                        idx, "content_index", 0, "text", text, "logprobs"));
        event(x, "response.content_part.done", json_pack("{s:s, s:i, s:i, s:O}", "item_id", x->msg_id, "output_index", idx,
                                                         "content_index", 0, "part",
                                                         json_array_get(json_object_get(item, "content"), 0)));
        event(x, "response.output_item.done", json_pack("{s:i, s:o}", "output_index", idx, "item", item));
        x->msg_done = true;
    } else {
        const int32_t idx = x->rsn_index;
        event(x, "response.reasoning_text.done", json_pack("{s:s, s:i, s:i, s:s}", "item_id", x->rsn_id, "output_index",
                                                           idx, "content_index", 0, "text", text));
        event(x, "response.output_item.done", json_pack("{s:i, s:o}", "output_index", idx, "item", reasoning_item(x, text)));
        x->rsn_done = true;
    }
    x->open = -1;
}

static int on_delta(void *user, srv_part part, const char *s, size_t n) {
    resp_ctx *x = user;
    if (x->open != (int)part) {
        const srv_compat_run *g = x->run;
        if (x->open >= 0) close_item(x, srv_tbuf_str(x->open == SRV_PART_TEXT ? &g->text : &g->reasoning), "completed");
        if ((part == SRV_PART_TEXT && x->msg_done) || (part == SRV_PART_REASONING && x->rsn_done)) return 0; /* (once) */
        open_item(x, part);
    }
    if (part == SRV_PART_REASONING)
        return event(x, "response.reasoning_text.delta", json_pack("{s:s, s:i, s:i, s:s%}", "item_id", x->rsn_id,
                                                                   "output_index", x->rsn_index, "content_index", 0,
                                                                   "delta", s, n));
    return event(x, "response.output_text.delta", json_pack("{s:s, s:i, s:i, s:s%, s:[]}", "item_id", x->msg_id,
                                                              "output_index", x->msg_index, "content_index", 0, "delta",
                                                              s, n, "logprobs"));
}

/* The output items of a finished generation: reasoning, the message, the calls (streamed as they close when
 * streaming). call_ids[k]: the call_id given to call k. */
static json_t *output_items(resp_ctx *x, const srv_compat_run *g, const char *status, json_t *call_ids) {
    json_t *out = json_array();
    const char *text = srv_tbuf_str(&g->text), *rsn = srv_tbuf_str(&g->reasoning);
    const bool blank = strspn(text, " \t\r\n") == g->text.len;
    const size_t n_calls = x->parallel ? json_array_size(g->calls) : json_array_size(g->calls) > 0;
    const bool want_msg = x->msg_done || x->open == SRV_PART_TEXT || !blank || n_calls == 0;
    if (x->stream) {
        if (x->open >= 0) close_item(x, x->open == SRV_PART_TEXT ? text : rsn, x->open == SRV_PART_TEXT ? status : "completed");
        if (want_msg && !x->msg_done) {
            open_item(x, SRV_PART_TEXT);
            close_item(x, text, status);
        }
    }
    if (g->reasoning.len) json_array_append_new(out, reasoning_item(x, rsn));
    if (want_msg) json_array_append_new(out, message_item(x, text, status));
    for (size_t i = 0; i < n_calls; i++) {
        char call_id[64];
        srv_compat_id("call_", call_id, sizeof call_id);
        json_array_append_new(call_ids, json_string(call_id));
        json_t *item = call_item(json_array_get(g->calls, i), call_id);
        const json_int_t idx = (json_int_t)json_array_size(out);
        if (x->stream && item) {
            json_t *pending = json_deep_copy(item);
            json_object_set_new(pending, "arguments", json_string(""));
            json_object_set_new(pending, "status", json_string("in_progress"));
            const char *item_id = json_string_value(json_object_get(item, "id"));
            const char *args = json_string_value(json_object_get(item, "arguments"));
            event(x, "response.output_item.added", json_pack("{s:I, s:o}", "output_index", idx, "item", pending));
            event(x, "response.function_call_arguments.delta",
                  json_pack("{s:s, s:I, s:s}", "item_id", item_id, "output_index", idx, "delta", args));
            event(x, "response.function_call_arguments.done",
                  json_pack("{s:s, s:I, s:s, s:O}", "item_id", item_id, "output_index", idx, "arguments", args,
                            "name", json_object_get(item, "name")));
            event(x, "response.output_item.done", json_pack("{s:I, s:O}", "output_index", idx, "item", item));
        }
        json_array_append_new(out, item);
    }
    return out;
}

/* Keeps the response and the conversation it ends (for previous_response_id). */
static void store_response(resp_ctx *x, json_t *response, const srv_compat_run *g, json_t *call_ids) {
    json_t *hist = x->history;
    const char *text = srv_tbuf_str(&g->text);
    if (g->text.len > 0 && strspn(text, " \t\r\n") < g->text.len) srv_compat_add_text(hist, "assistant", text, json_array_size(hist));
    size_t i;
    json_t *id;
    json_array_foreach(call_ids, i, id) {
        json_t *call = json_array_get(g->calls, i);
        srv_compat_add_call(hist, json_string_value(id), json_string_value(json_object_get(call, "name")),
                            json_string_value(json_object_get(call, "arguments")));
    }
    srv_resp_store_put(x->rc->s->resp_store, x->id, x->rc->key_id, response, hist);
}

static void ctx_free(resp_ctx *x) {
    json_decref(x->history);
    json_decref(x->tools_echo);
    json_decref(x->tool_choice_echo);
    json_decref(x->text_echo);
    json_decref(x->metadata);
    json_decref(x->chat_tools);
    json_decref(x->chat_choice);
    qr_grammar_free(x->g);
    json_decref(x->root);
}

int srv_h_responses(srv_conn *rc) {
    resp_ctx x = {.rc = rc, .open = -1};
    char err[1024];
    json_t *chat = NULL;
    bool not_found = false;
    srv_gen_req req;
    if (srv_json_parse(rc->body ? rc->body : "", rc->body_len, rc->s->cfg.max_json_depth, &x.root, err, sizeof err) < 0 ||
        parse_request(&x, &chat, &not_found, err, sizeof err) < 0 ||
        srv_compat_request(chat, x.g, &req, err, sizeof err) < 0) {
        if (!chat) qr_grammar_free(x.g); /* srv_compat_request took it otherwise */
        x.g = NULL;
        json_decref(chat);
        ctx_free(&x);
        return srv_send_error(rc, not_found ? 404 : 400, not_found ? "RESPONSE_NOT_FOUND" : "INVALID_REQUEST", 0,
                              "%s", err);
    }
    x.g = NULL;
    json_decref(chat);
    if (x.prev_id) srv_compat_feature(rc, "previous_response_id");
    if (srv_job_begin_req(rc, SRV_API_OPENAI_CHAT, &req, &x.j, rc->s, NULL, NULL, NULL, 0) < 0) {
        ctx_free(&x);
        return rc->status;
    }
    srv_compat_id("resp_", x.id, sizeof x.id);
    srv_compat_id("msg_", x.msg_id, sizeof x.msg_id);
    srv_compat_id("rs_", x.rsn_id, sizeof x.rsn_id);
    x.created = (json_int_t)srv_wall_now();
    srv_compat_run g = {0};
    x.run = &g;
    if (x.stream) {
        if (srv_stream_begin(rc, "text/event-stream") < 0) {
            g.gone = true;
            srv_gen_cancel(&x.j.g);
        }
        event(&x, "response.created", json_pack("{s:o}", "response", response_json(&x, "in_progress", NULL, NULL, NULL, NULL)));
        event(&x, "response.in_progress", json_pack("{s:o}", "response", response_json(&x, "in_progress", NULL, NULL, NULL, NULL)));
        g.on_delta = on_delta;
        g.user = &x;
    }
    srv_compat_generate(rc, &x.j, &g);
    const char *status = g.length ? "incomplete" : "completed";
    json_t *call_ids = json_array();
    if (g.gone) {
        rc->status = 499; /* client closed the request */
    } else if (g.ecode && !x.stream) {
        srv_send_error(rc, g.http, g.ecode, g.http == 503 ? 2 : 0, "%s", g.emsg);
    } else if (g.ecode) {
        rc->err_code = g.ecode;
        event(&x, "error", json_pack("{s:s, s:s, s:n}", "code", g.ecode, "message", g.emsg, "param"));
        json_t *output = output_items(&x, &g, "incomplete", call_ids);
        event(&x, "response.failed", json_pack("{s:o}", "response", response_json(&x, "failed", output, usage_json(&g),
                                                      json_pack("{s:s, s:s}", "code", g.ecode, "message", g.emsg), NULL)));
        srv_stream_end(rc);
    } else {
        json_t *output = output_items(&x, &g, status, call_ids);
        json_t *resp = response_json(&x, status, output, usage_json(&g), NULL, g.length ? "max_output_tokens" : NULL);
        if (x.store && resp) store_response(&x, resp, &g, call_ids);
        if (x.stream) {
            event(&x, g.length ? "response.incomplete" : "response.completed", json_pack("{s:o}", "response", resp));
            srv_stream_end(rc);
        } else {
            srv_send_json(rc, 200, resp);
        }
    }
    json_decref(call_ids);
    srv_compat_run_free(&g);
    srv_job_end(rc, &x.j, rc->s);
    ctx_free(&x);
    return rc->status;
}

int srv_h_response_item(srv_conn *rc, const char *id) {
    const bool del = !strcmp(rc->ri->request_method, "DELETE");
    json_t *resp = NULL;
    const int found = del ? srv_resp_store_delete(rc->s->resp_store, id, rc->key_id)
                          : srv_resp_store_get(rc->s->resp_store, id, rc->key_id, &resp, NULL);
    if (found < 0)
        return srv_send_error(rc, 404, "RESPONSE_NOT_FOUND", 0, "no stored response '%.64s' (never stored, expired or "
                              "deleted)", id);
    if (del) return srv_send_json(rc, 200, json_pack("{s:s, s:s, s:b}", "id", id, "object", "response", "deleted", 1));
    return srv_send_json(rc, 200, resp);
}
