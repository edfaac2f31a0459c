/* chat_tools.c — tool calling and reasoning for the chat routes (see chat_tools.h). */
#include "server/chat_tools.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

#define HARMONY_OPEN "<|channel|>analysis<|message|>"
#define HARMONY_CLOSE "<|end|>"
#define HARMONY_FORCE "<|end|><|start|>assistant<|channel|>final<|message|>"

/* The JSON text of a call as the generic format writes it. */
static void append_generic_call(char **acc, const json_t *call) {
    const json_t *fn = json_object_get(call, "function");
    json_t *args = json_object_get(fn, "arguments");
    json_t *parsed = json_is_string(args) ? json_loads(json_string_value(args), 0, NULL) : NULL;
    json_t *o = json_pack("{s:O, s:O}", "name", json_object_get(fn, "name"), "arguments",
                          parsed ? parsed : (json_is_object(args) ? args : json_object()));
    json_decref(parsed);
    char *t = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!t) return;
    const size_t old = *acc ? strlen(*acc) : 0;
    char *n = realloc(*acc, old + strlen(t) + 2);
    if (n) {
        if (old) n[old] = '\n', n[old + 1] = 0;
        else n[0] = 0;
        strcat(n, t);
        *acc = n;
    }
    free(t);
}

/* The messages as the template gets them. A template that renders tools gets the assistant calls' arguments
 * as objects (as transformers passes them); for one that does not, calls become the generic JSON text in
 * the assistant's content, tool results become user messages, and a system message teaches the format. */
static json_t *chat_messages(const json_t *msgs, const srv_gen_req *r) {
    json_t *out = json_deep_copy(msgs);
    if (!out) return NULL;
    size_t i;
    json_t *m;
    json_array_foreach(out, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        json_t *calls = json_object_get(m, "tool_calls");
        if (json_is_array(calls)) {
            size_t k;
            json_t *c;
            if (r->template_tools) {
                json_array_foreach(calls, k, c) {
                    json_t *fn = json_object_get(c, "function");
                    json_t *args = json_object_get(fn, "arguments");
                    json_t *obj = json_is_string(args) ? json_loads(json_string_value(args), 0, NULL) : NULL;
                    if (json_is_object(obj)) json_object_set(fn, "arguments", obj);
                    json_decref(obj);
                }
            } else {
                char *text = NULL;
                json_array_foreach(calls, k, c) append_generic_call(&text, c);
                const char *content = json_string_value(json_object_get(m, "content"));
                if (content && *content) {
                    char *t2 = malloc(strlen(content) + (text ? strlen(text) : 0) + 2);
                    if (t2) sprintf(t2, "%s\n%s", content, text ? text : "");
                    free(text);
                    text = t2;
                }
                json_object_set_new(m, "content", json_string(text ? text : ""));
                json_object_del(m, "tool_calls");
                free(text);
            }
        }
        if (!r->template_tools && role && !strcmp(role, "tool")) {
            const char *name = json_string_value(json_object_get(m, "name"));
            if (!name) name = json_string_value(json_object_get(m, "tool_name"));
            const char *content = json_string_value(json_object_get(m, "content"));
            char *t = malloc(strlen(content ? content : "") + (name ? strlen(name) : 0) + 32);
            if (t) {
                sprintf(t, "Result of the function%s%s: %s", name ? " " : "", name ? name : "", content ? content : "");
                json_object_set_new(m, "content", json_string(t));
                free(t);
            }
            json_object_set_new(m, "role", json_string("user"));
        }
    }
    if (r->tools && !r->template_tools) {
        char *sys = qr_tool_system_prompt(r->tools, r->tool_choice >= SRV_TOOLS_REQUIRED);
        if (!sys) {
            json_decref(out);
            return NULL;
        }
        json_t *first = json_array_get(out, 0);
        const char *role = json_string_value(json_object_get(first, "role"));
        const char *content = json_string_value(json_object_get(first, "content"));
        if (role && (!strcmp(role, "system") || !strcmp(role, "developer")) && content) {
            char *t = malloc(strlen(content) + strlen(sys) + 3);
            if (t) {
                sprintf(t, "%s\n\n%s", content, sys);
                json_object_set_new(first, "content", json_string(t));
                free(t);
            }
        } else {
            json_array_insert_new(out, 0, json_pack("{s:s, s:s}", "role", "system", "content", sys));
        }
        free(sys);
    }
    return out;
}

int srv_chat_prepare(const srv_model *m, srv_gen_req *r, srv_api api, char *err, size_t err_len) {
    const bool chat = api == SRV_API_OPENAI_CHAT || api == SRV_API_OLLAMA_CHAT ||
                      (api == SRV_API_OLLAMA_GENERATE && !r->raw && m->tmpl);
    if (!chat) return 0;
    r->split = true;
    qr_chat_parse_params_default(&r->parse);
    const qr_tool_format f = qr_tool_format_detect(m->tmpl_src);
    r->template_tools = r->tools && qr_template_knows_tools(m->tmpl_src);
    const qr_tool_format used = r->tools && !r->template_tools && f != QR_TOOL_FORMAT_HARMONY ? QR_TOOL_FORMAT_GENERIC : f;
    r->parse.format = used;
    r->parse.tools = r->tools != NULL;
    r->special_text = used == QR_TOOL_FORMAT_HARMONY || (r->tools && qr_tool_format_needs_special(used));
    if (used == QR_TOOL_FORMAT_HARMONY) {
        r->parse.think_open = HARMONY_OPEN;
        r->parse.think_close = HARMONY_CLOSE;
    }
    if (r->messages && (r->tools || json_array_size(r->messages))) {
        r->chat_messages = chat_messages(r->messages, r);
        if (!r->chat_messages) return qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory"), -1;
    }
    if (r->think >= 0 || r->reasoning_effort) {
        r->chat_extra = json_object();
        if (r->think >= 0) json_object_set_new(r->chat_extra, "enable_thinking", json_boolean(r->think));
        if (r->reasoning_effort) json_object_set_new(r->chat_extra, "reasoning_effort", json_string(r->reasoning_effort));
    }
    if (r->tools && r->tool_choice >= SRV_TOOLS_REQUIRED) {
        char msg[512];
        const qr_status st = qr_tool_call_grammar(used, r->tools, r->tool_choice == SRV_TOOLS_NAMED ? r->tool_name : NULL,
                                                  r->parallel_tools, &r->grammar, msg, sizeof msg);
        if (st != QR_OK) return qr_errf(err, err_len, st, "'tools': %s", msg), -1;
    }
    if (r->think_budget >= 0) {
        const char *force = used == QR_TOOL_FORMAT_HARMONY ? HARMONY_FORCE : "</think>\n\n";
        size_t n = 0;
        if (srv_tokenize(m, force, strlen(force), false, true, &r->think_end, &n) < 0 || n == 0)
            return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "the reasoning budget's closing tag cannot be tokenized"), -1;
        r->n_think_end = (int32_t)n;
    }
    return 0;
}

void srv_chat_prompt_rendered(srv_gen_req *r, const char *prompt) {
    if (!r->split || r->parse.format == QR_TOOL_FORMAT_HARMONY) return;
    size_t n = strlen(prompt);
    while (n && (prompt[n - 1] == '\n' || prompt[n - 1] == ' ')) n--;
    const char *open = r->parse.think_open ? r->parse.think_open : "<think>";
    const size_t ol = strlen(open);
    r->parse.think_started = n >= ol && !memcmp(prompt + n - ol, open, ol);
}

json_t *srv_tool_calls_openai(const qr_tool_call *calls, int32_t n, int32_t first, const char *rid, bool with_index) {
    json_t *a = json_array();
    for (int32_t k = 0; k < n; k++) {
        char id[128];
        if (calls[k].id) snprintf(id, sizeof id, "%s", calls[k].id);
        else snprintf(id, sizeof id, "call_%.64s_%d", rid, first + k);
        json_t *c = json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "function", "function", "name",
                              calls[k].name, "arguments", calls[k].arguments);
        if (c && with_index) json_object_set_new(c, "index", json_integer(first + k));
        if (c) json_array_append_new(a, c);
    }
    return a;
}

json_t *srv_tool_calls_ollama(const qr_tool_call *calls, int32_t n) {
    json_t *a = json_array();
    for (int32_t k = 0; k < n; k++) {
        json_t *args = json_loads(calls[k].arguments, 0, NULL);
        json_t *c = json_pack("{s:{s:s, s:o}}", "function", "name", calls[k].name, "arguments",
                              args ? args : json_object());
        if (c) json_array_append_new(a, c);
    }
    return a;
}

void srv_count_features(qr_server *s, const srv_gen_req *r) {
    if (r->tools) srv_metrics_add(s->metrics, "quarrel_requests_by_feature_total", "feature=\"tools\"", 1);
    if (r->tools && r->tool_choice >= SRV_TOOLS_REQUIRED)
        srv_metrics_add(s->metrics, "quarrel_requests_by_feature_total", "feature=\"tool_choice_required\"", 1);
    if (r->grammar && !(r->tools && r->tool_choice >= SRV_TOOLS_REQUIRED))
        srv_metrics_add(s->metrics, "quarrel_requests_by_feature_total", "feature=\"json_schema\"", 1);
    if (r->think >= 0 || r->think_budget >= 0 || r->reasoning_effort)
        srv_metrics_add(s->metrics, "quarrel_requests_by_feature_total", "feature=\"reasoning\"", 1);
}
