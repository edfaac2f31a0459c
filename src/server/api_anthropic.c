/* api_anthropic.c — Anthropic's Messages API: POST /v1/messages (system, messages of text / tool_use /
 * tool_result blocks, tools and tool_choice, stop_sequences, JSON or the SSE events message_start,
 * content_block_start/delta/stop, message_delta, message_stop, ping) and POST /v1/messages/count_tokens.
 * Errors are Anthropic's {"type": "error", "error": {"type", "message"}} (http.c adds the shape by path). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api_compat.h"
#include "server/chat_tools.h"
#include "util/util.h"

#define FAIL(...) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, __VA_ARGS__), -1

typedef struct msg_ctx {
    srv_conn *rc;
    json_t *root;
    char id[64];
    bool stream, one_call;        /* one_call: tool_choice.disable_parallel_tool_use */
    json_t *chat_tools, *chat_choice; /* tools and tool_choice in the chat form reqparse reads (owned) */
    int64_t think_budget;         /* thinking {type: enabled, budget_tokens}: the budget; -1 = not said */
    bool no_think;                /* thinking {type: disabled} */
    srv_job j;
    /* streaming */
    int32_t n_blocks;             /* content blocks started */
    int open;                     /* -1 none, else the srv_part of the open block */
    bool text_done, think_done;   /* that block was written */
} msg_ctx;

static const char *const text_parts[] = {"text", NULL};

/* One block of messages[i] (role user or assistant) -> msgs. */
static int block(json_t *b, size_t i, size_t k, bool user, json_t *msgs, size_t first, char *err, size_t err_len) {
    const char *type = json_string_value(json_object_get(b, "type"));
    if (!json_is_object(b) || !type) FAIL("'messages[%zu].content[%zu]' must be an object with a 'type'", i, k);
    int rc = 0;
    if (!strcmp(type, "text")) {
        json_t *t = json_object_get(b, "text");
        if (!json_is_string(t)) FAIL("'messages[%zu].content[%zu].text' must be a string", i, k);
        rc = srv_compat_add_text(msgs, user ? "user" : "assistant", json_string_value(t), first);
    } else if (!strcmp(type, "tool_use")) {
        const char *name = json_string_value(json_object_get(b, "name"));
        json_t *input = json_object_get(b, "input");
        if (user) FAIL("'messages[%zu].content[%zu]': tool_use blocks belong to assistant messages", i, k);
        if (!json_is_string(json_object_get(b, "id"))) FAIL("'messages[%zu].content[%zu].id' must be a string", i, k);
        if (!name) FAIL("'messages[%zu].content[%zu].name' must be a string", i, k);
        if (!json_is_object(input)) FAIL("'messages[%zu].content[%zu].input' must be an object", i, k);
        char *args = json_dumps(input, JSON_COMPACT | JSON_PRESERVE_ORDER);
        rc = args ? srv_compat_add_call(msgs, json_string_value(json_object_get(b, "id")), name, args) : -1;
        free(args);
    } else if (!strcmp(type, "tool_result")) {
        if (!user) FAIL("'messages[%zu].content[%zu]': tool_result blocks belong to user messages", i, k);
        if (!json_is_string(json_object_get(b, "tool_use_id")))
            FAIL("'messages[%zu].content[%zu].tool_use_id' must be a string", i, k);
        json_t *is_error = json_object_get(b, "is_error");
        if (is_error && !json_is_null(is_error) && !json_is_boolean(is_error))
            FAIL("'messages[%zu].content[%zu].is_error' must be a boolean", i, k);
        char field[96];
        snprintf(field, sizeof field, "messages[%zu].content[%zu].content", i, k);
        srv_tbuf t = {0};
        if (json_is_true(is_error)) srv_tbuf_add(&t, "Error: ", 7);
        if (srv_compat_parts_text(json_object_get(b, "content"), field, text_parts, "\n", &t, err, err_len) < 0) return free(t.p), -1;
        rc = srv_compat_add_result(msgs, json_string_value(json_object_get(b, "tool_use_id")), srv_tbuf_str(&t));
        free(t.p);
    } else if (!user && (!strcmp(type, "thinking") || !strcmp(type, "redacted_thinking"))) {
        /* earlier reasoning given back: the model does not see it again */
    } else {
        FAIL("'messages[%zu].content[%zu].type' must be text, tool_use or tool_result (got '%.32s'; images and "
             "documents are not supported)", i, k, type);
    }
    return rc < 0 ? (qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory"), -1) : 0;
}

static int convert_messages(json_t *in, json_t *msgs, char *err, size_t err_len) {
    if (!json_is_array(in) || json_array_size(in) == 0) FAIL("'messages' must be a non-empty array");
    size_t i;
    json_t *m;
    json_array_foreach(in, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!json_is_object(m) || !role || (strcmp(role, "user") && strcmp(role, "assistant")))
            FAIL("'messages[%zu].role' must be user or assistant (the system prompt is 'system')", i);
        const bool user = !strcmp(role, "user");
        json_t *c = json_object_get(m, "content");
        if (json_is_string(c)) {
            if (srv_compat_add_text(msgs, role, json_string_value(c), json_array_size(msgs)) < 0) FAIL("out of memory");
            continue;
        }
        if (!json_is_array(c) || json_array_size(c) == 0)
            FAIL("'messages[%zu].content' must be a string or a non-empty array of content blocks", i);
        const size_t first = json_array_size(msgs); /* this message's blocks join each other, not earlier turns */
        size_t k;
        json_t *b;
        json_array_foreach(c, k, b) if (block(b, i, k, user, msgs, first, err, err_len) < 0) return -1;
    }
    return 0;
}

/* tools [{name, description, input_schema}] and tool_choice {type: auto | any | tool | none, name}, validated and
 * turned into the chat form (x->chat_tools, x->chat_choice). */
static int parse_tools(msg_ctx *x, char *err, size_t err_len) {
    json_t *tools = json_object_get(x->root, "tools"), *choice = json_object_get(x->root, "tool_choice");
    x->chat_tools = json_array();
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools)) FAIL("'tools' must be an array");
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t) {
            const char *type = NULL, *desc = NULL;
            const char *name = json_string_value(json_object_get(t, "name"));
            if (!json_is_object(t)) FAIL("'tools[%zu]' must be an object", i);
            if (srv_compat_str(t, "type", &type, err, err_len) < 0 || (type && strcmp(type, "custom")))
                FAIL("'tools[%zu].type' must be \"custom\" (server tools are not supported)", i);
            if (!name || !srv_compat_tool_name_ok(name)) FAIL("'tools[%zu].name' must be 1-64 of a-z, A-Z, 0-9, _, . and -", i);
            if (srv_compat_str(t, "description", &desc, err, err_len) < 0) FAIL("'tools[%zu].description' must be a string", i);
            json_t *schema = json_object_get(t, "input_schema");
            if (!json_is_object(schema)) FAIL("'tools[%zu].input_schema' must be a JSON schema object", i);
            if (srv_compat_tool_add(x->chat_tools, name, desc, schema) < 0) FAIL("out of memory");
        }
    }
    if (!choice || json_is_null(choice)) return 0;
    const char *type = json_string_value(json_object_get(choice, "type"));
    if (!json_is_object(choice) || !type) FAIL("'tool_choice' must be an object {type: auto | any | tool | none}");
    if (srv_compat_bool(choice, "disable_parallel_tool_use", &x->one_call, err, err_len) < 0) return -1;
    const char *name = NULL;
    if (srv_compat_str(choice, "name", &name, err, err_len) < 0 || (name && !srv_compat_tool_name_ok(name)))
        FAIL("'tool_choice.name' must be a tool name (1-64 of a-z, A-Z, 0-9, _, . and -)");
    if (!strcmp(type, "none") || !strcmp(type, "auto")) {
        x->chat_choice = json_string(type);
        return 0;
    }
    if (strcmp(type, "any") && strcmp(type, "tool"))
        FAIL("'tool_choice.type' must be auto, any, tool or none (got '%.32s')", type);
    if (json_array_size(x->chat_tools) == 0) FAIL("'tool_choice' %s needs 'tools'", type);
    if (!strcmp(type, "any")) {
        x->chat_choice = json_string("required");
        return 0;
    }
    if (!name) FAIL("'tool_choice.name' must be a string with type tool");
    bool known = false;
    size_t i;
    json_t *t;
    json_array_foreach(x->chat_tools, i, t)
        known = known || !strcmp(json_string_value(json_object_get(json_object_get(t, "function"), "name")), name);
    if (!known) FAIL("'tool_choice.name' '%.64s' is not one of 'tools'", name);
    x->chat_choice = json_pack("{s:s, s:{s:s}}", "type", "function", "function", "name", name);
    return 0;
}

/* thinking {type: enabled, budget_tokens} | {type: disabled}. */
static int parse_thinking(msg_ctx *x, char *err, size_t err_len) {
    x->think_budget = -1;
    json_t *th = json_object_get(x->root, "thinking");
    if (!th || json_is_null(th)) return 0;
    const char *type = json_string_value(json_object_get(th, "type"));
    if (!json_is_object(th) || !type || (strcmp(type, "enabled") && strcmp(type, "disabled")))
        FAIL("'thinking' must be {\"type\": \"enabled\", \"budget_tokens\"} or {\"type\": \"disabled\"}");
    x->no_think = !strcmp(type, "disabled");
    if (!x->no_think && srv_compat_int(th, "budget_tokens", 0, 1 << 24, &x->think_budget, err, err_len) <= 0)
        FAIL("'thinking.budget_tokens' must be an integer in [0, 16777216]");
    return 0;
}

/* The body -> x and the chat body for reqparse (count: count_tokens, where max_tokens is not asked for). */
static int parse_request(msg_ctx *x, bool count, json_t **chat, char *err, size_t err_len) {
    json_t *root = x->root;
    const char *model = NULL;
    int64_t max_tokens = 0, top_k = 0;
    int has;
    if (srv_compat_str(root, "model", &model, err, err_len) < 0) return -1;
    if (srv_compat_bool(root, "stream", &x->stream, err, err_len) < 0) return -1;
    if (json_is_null(json_object_get(root, "max_tokens"))) FAIL("'max_tokens' must be an integer");
    if ((has = srv_compat_int(root, "max_tokens", 1, 1 << 24, &max_tokens, err, err_len)) < 0) return -1;
    if (!has && !count) FAIL("'max_tokens' is required");
    json_t *temp = json_object_get(root, "temperature"); /* the type and the rest: reqparse */
    if (json_is_number(temp) && json_number_value(temp) > 1) FAIL("'temperature' must be in [0, 1]");
    if (srv_compat_int(root, "top_k", 0, 1000000000, &top_k, err, err_len) < 0) return -1;
    json_t *stops = json_object_get(root, "stop_sequences");
    if (stops && !json_is_null(stops)) {
        if (!json_is_array(stops) || json_array_size(stops) > SRV_MAX_STOPS)
            FAIL("'stop_sequences' must be an array of at most %d strings", SRV_MAX_STOPS);
        size_t i;
        json_t *s;
        json_array_foreach(stops, i, s) if (!json_is_string(s)) FAIL("'stop_sequences[%zu]' must be a string", i);
    }
    json_t *md = json_object_get(root, "metadata");
    if (md && !json_is_null(md)) {
        const char *uid = NULL;
        if (!json_is_object(md)) FAIL("'metadata' must be an object {user_id}");
        if (srv_compat_str(md, "user_id", &uid, err, err_len) < 0) FAIL("'metadata.user_id' must be a string");
    }
    if (parse_tools(x, err, err_len) < 0 || parse_thinking(x, err, err_len) < 0) return -1;
    json_t *msgs = json_array();
    json_t *sys = json_object_get(root, "system");
    if (sys && !json_is_null(sys)) {
        srv_tbuf t = {0};
        if (srv_compat_parts_text(sys, "system", text_parts, "\n", &t, err, err_len) < 0) return free(t.p), json_decref(msgs), -1;
        json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "system", "content", srv_tbuf_str(&t)));
        free(t.p);
    }
    if (convert_messages(json_object_get(root, "messages"), msgs, err, err_len) < 0) return json_decref(msgs), -1;
    srv_compat_name_results(msgs);
    *chat = json_pack("{s:o}", "messages", msgs);
    if (!*chat) FAIL("out of memory");
    srv_compat_copy(*chat, root, "model");
    srv_compat_copy(*chat, root, "temperature");
    srv_compat_copy(*chat, root, "top_p");
    srv_compat_copy(*chat, root, "top_k");
    if (stops && !json_is_null(stops)) json_object_set(*chat, "stop", stops);
    if (max_tokens) json_object_set_new(*chat, "max_tokens", json_integer(max_tokens));
    if (json_array_size(x->chat_tools)) json_object_set(*chat, "tools", x->chat_tools);
    if (x->chat_choice) json_object_set(*chat, "tool_choice", x->chat_choice);
    if (x->one_call) json_object_set_new(*chat, "parallel_tool_calls", json_false());
    if (x->no_think) json_object_set_new(*chat, "reasoning_effort", json_string("none"));
    if (x->think_budget >= 0) json_object_set_new(*chat, "max_thinking_tokens", json_integer(x->think_budget));
    return 0;
}

/* output_config {format: {type: json_schema, schema}} -> *g (NULL when absent); effort is ignored. */
static int output_format(json_t *root, qr_grammar **g, char *err, size_t err_len) {
    *g = NULL;
    json_t *oc = json_object_get(root, "output_config");
    if (!oc || json_is_null(oc)) return 0;
    if (!json_is_object(oc)) FAIL("'output_config' must be an object {format, effort}");
    json_t *fmt = json_object_get(oc, "format");
    if (!fmt || json_is_null(fmt)) return 0;
    const char *type = json_string_value(json_object_get(fmt, "type"));
    if (!json_is_object(fmt) || !type || strcmp(type, "json_schema"))
        FAIL("'output_config.format.type' must be \"json_schema\"");
    json_t *schema = json_object_get(fmt, "schema");
    if (!json_is_object(schema)) FAIL("'output_config.format.schema' must be a JSON schema object");
    return srv_compat_schema_grammar(schema, "output_config.format.schema", g, err, err_len);
}

/* Parses the body into x and *req; on failure sends the 400 and returns -1. */
static int begin(msg_ctx *x, bool count, srv_gen_req *req) {
    srv_conn *rc = x->rc;
    char err[1024];
    json_t *chat = NULL;
    qr_grammar *g = NULL;
    if (srv_json_parse(rc->body ? rc->body : "", rc->body_len, rc->s->cfg.max_json_depth, &x->root, err, sizeof err) < 0 ||
        parse_request(x, count, &chat, err, sizeof err) < 0 || output_format(x->root, &g, err, sizeof err) < 0 ||
        srv_compat_request(chat, g, req, err, sizeof err) < 0) {
        json_decref(chat); /* (g was taken by srv_compat_request, or never made) */
        srv_send_error(rc, 400, "INVALID_REQUEST", 0, "%s", err);
        return -1;
    }
    json_decref(chat);
    return 0;
}

static void ctx_free(msg_ctx *x) {
    json_decref(x->chat_tools);
    json_decref(x->chat_choice);
    json_decref(x->root);
}

/* ---- output ---- */

static int event(msg_ctx *x, const char *type, json_t *j) {
    if (!j) return -1;
    json_object_set_new(j, "type", json_string(type));
    return srv_stream_sse_event(x->rc, type, j);
}

/* Streaming: closes the open block. */
static void close_block(msg_ctx *x) {
    if (x->open < 0) return;
    event(x, "content_block_stop", json_pack("{s:i}", "index", x->n_blocks - 1));
    if (x->open == SRV_PART_TEXT) x->text_done = true;
    else x->think_done = true;
    x->open = -1;
}

static int on_delta(void *user, srv_part part, const char *s, size_t n) {
    msg_ctx *x = user;
    const bool text = part == SRV_PART_TEXT;
    if (x->open != (int)part) {
        close_block(x);
        if ((text && x->text_done) || (!text && x->think_done)) return 0; /* (one block of each) */
        x->open = part;
        event(x, "content_block_start",
              json_pack("{s:i, s:o}", "index", x->n_blocks++, "content_block",
                        text ? json_pack("{s:s, s:s}", "type", "text", "text", "")
                             : json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", "", "signature", "")));
    }
    return event(x, "content_block_delta", json_pack("{s:i, s:{s:s, s:s%}}", "index", x->n_blocks - 1, "delta", "type",
                                                     text ? "text_delta" : "thinking_delta", text ? "text" : "thinking",
                                                     s, n));
}

/* The content blocks: thinking, text, tool_use (streamed as they close when streaming). */
static json_t *content_blocks(msg_ctx *x, const srv_compat_run *g) {
    json_t *out = json_array();
    const char *text = srv_tbuf_str(&g->text);
    const size_t n_calls = x->one_call && json_array_size(g->calls) > 0 ? 1 : json_array_size(g->calls);
    const bool want_text = x->text_done || x->open == SRV_PART_TEXT || strspn(text, " \t\r\n") < g->text.len ||
                           n_calls == 0;
    if (x->stream) {
        close_block(x);
        if (want_text && !x->text_done) {
            on_delta(x, SRV_PART_TEXT, "", 0);
            close_block(x);
        }
    }
    if (g->reasoning.len)
        json_array_append_new(out, json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", srv_tbuf_str(&g->reasoning),
                                             "signature", ""));
    if (want_text) json_array_append_new(out, json_pack("{s:s, s:s}", "type", "text", "text", text));
    for (size_t i = 0; i < n_calls; i++) {
        json_t *call = json_array_get(g->calls, i);
        char id[64];
        srv_compat_id("toolu_", id, sizeof id);
        const char *args = json_string_value(json_object_get(call, "arguments"));
        json_t *input = json_loads(args, 0, NULL);
        json_t *b = json_pack("{s:s, s:s, s:O, s:o}", "type", "tool_use", "id", id, "name", json_object_get(call, "name"),
                              "input", input ? input : json_object());
        if (x->stream && b) {
            const int idx = x->n_blocks++;
            event(x, "content_block_start", json_pack("{s:i, s:{s:s, s:s, s:O, s:{}}}", "index", idx, "content_block",
                                                      "type", "tool_use", "id", id, "name", json_object_get(b, "name"),
                                                      "input"));
            event(x, "content_block_delta", json_pack("{s:i, s:{s:s, s:s}}", "index", idx, "delta", "type",
                                                      "input_json_delta", "partial_json", args));
            event(x, "content_block_stop", json_pack("{s:i}", "index", idx));
        }
        json_array_append_new(out, b);
    }
    return out;
}

int srv_h_anthropic_messages(srv_conn *rc) {
    msg_ctx x = {.rc = rc, .open = -1};
    srv_gen_req req;
    if (begin(&x, false, &req) < 0) {
        ctx_free(&x);
        return rc->status;
    }
    if (srv_job_begin_req(rc, SRV_API_OPENAI_CHAT, &req, &x.j, rc->s, NULL, NULL, NULL, 0) < 0) {
        ctx_free(&x);
        return rc->status;
    }
    srv_compat_id("msg_", x.id, sizeof x.id);
    srv_compat_run g = {0};
    if (x.stream) {
        if (srv_stream_begin(rc, "text/event-stream") < 0) {
            g.gone = true;
            srv_gen_cancel(&x.j.g);
        }
        event(&x, "message_start", json_pack("{s:{s:s, s:s, s:s, s:s, s:[], s:n, s:n, s:{s:i, s:i}}}", "message", "id",
                                             x.id, "type", "message", "role", "assistant", "model", x.j.m->name,
                                             "content", "stop_reason", "stop_sequence", "usage", "input_tokens",
                                             x.j.g.n_prompt, "output_tokens", 0));
        event(&x, "ping", json_object());
        g.on_delta = on_delta;
        g.user = &x;
    }
    srv_compat_generate(rc, &x.j, &g);
    json_t *content = g.gone || (g.ecode && !x.stream) ? NULL : content_blocks(&x, &g);
    const char *stop = g.length ? "max_tokens" : json_array_size(g.calls) > 0 ? "tool_use" : g.stop_seq ? "stop_sequence"
                                                                                                         : "end_turn";
    if (g.gone) {
        rc->status = 499; /* client closed the request */
    } else if (g.ecode && !x.stream) {
        srv_send_error(rc, g.http, g.ecode, g.http == 503 ? 2 : 0, "%s", g.emsg);
    } else if (x.stream) {
        if (g.ecode) {
            rc->err_code = g.ecode;
            event(&x, "error", json_pack("{s:{s:s, s:s, s:s}}", "error", "type", g.http == 504 ? "timeout_error"
                                         : g.http == 503 ? "overloaded_error" : "api_error", "message", g.emsg,
                                         "code", g.ecode));
        } else {
            json_t *md = json_pack("{s:{s:s, s:o}, s:{s:i, s:i}}", "delta", "stop_reason", stop, "stop_sequence",
                                   g.stop_seq ? json_string(g.stop_seq) : json_null(), "usage", "input_tokens",
                                   g.n_prompt, "output_tokens", g.n_gen);
            event(&x, "message_delta", md);
            event(&x, "message_stop", json_object());
        }
        srv_stream_end(rc);
    } else {
        srv_send_json(rc, 200, json_pack("{s:s, s:s, s:s, s:s, s:O, s:s, s:o, s:{s:i, s:i, s:i, s:i}}", "id", x.id,
                                         "type", "message", "role", "assistant", "model", x.j.m->name, "content",
                                         content, "stop_reason", stop, "stop_sequence",
                                         g.stop_seq ? json_string(g.stop_seq) : json_null(), "usage", "input_tokens",
                                         g.n_prompt, "output_tokens", g.n_gen, "cache_read_input_tokens", g.n_cached,
                                         "cache_creation_input_tokens", 0));
    }
    json_decref(content);
    srv_compat_run_free(&g);
    srv_job_end(rc, &x.j, rc->s);
    ctx_free(&x);
    return rc->status;
}

int srv_h_anthropic_count_tokens(srv_conn *rc) {
    msg_ctx x = {.rc = rc};
    srv_gen_req req;
    if (begin(&x, true, &req) < 0) {
        ctx_free(&x);
        return rc->status;
    }
    char err[1024];
    int32_t *ids = NULL, n = 0;
    srv_model *m = srv_acquire_model(rc, req.model, true);
    if (m && (srv_chat_prepare(m, &req, SRV_API_OPENAI_CHAT, err, sizeof err) < 0 ||
              srv_build_prompt(m, &req, SRV_API_OPENAI_CHAT, &ids, &n, err, sizeof err) < 0))
        srv_send_error(rc, 400, "INVALID_REQUEST", 0, "%s", err);
    else if (m)
        srv_send_json(rc, 200, json_pack("{s:i}", "input_tokens", n));
    free(ids);
    if (m) srv_registry_release(rc->s->reg, m, req.has_keep_alive, req.keep_alive_s);
    srv_gen_req_free(&req);
    ctx_free(&x);
    return rc->status;
}
