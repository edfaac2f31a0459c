/* chat_tools.h — tool calling and reasoning for the chat routes, once the model is known: the tool
 * syntax its template teaches (or the generic JSON one, taught by a system message), the messages as
 * the template gets them, the grammar of a required call, the reasoning budget's closing tokens; and
 * the JSON of parsed calls in the OpenAI and Ollama shapes. */
#ifndef QR_SERVER_CHAT_TOOLS_H
#define QR_SERVER_CHAT_TOOLS_H

#include "server/server_internal.h"

/* Fills r's model-dependent chat fields (split, parse, special_text, chat_messages, chat_extra,
 * template_tools, grammar for a required call, think_end) for model m and route api. Returns 0, or
 * -1 with a client-error message (a tool schema the grammar cannot use). */
int srv_chat_prepare(const srv_model *m, srv_gen_req *r, srv_api api, char *err, size_t err_len);

/* After the prompt was rendered: whether it opened the reasoning section (it ends with the opening
 * tag), which the parser must know. */
void srv_chat_prompt_rendered(srv_gen_req *r, const char *prompt);

/* OpenAI tool_calls array of calls[0..n) (numbers first..first+n-1): [{index?, id, type, function:
 * {name, arguments (string)}}]; with_index for stream deltas. ids: the model's, else call_<rid>_<k>. */
json_t *srv_tool_calls_openai(const qr_tool_call *calls, int32_t n, int32_t first, const char *rid, bool with_index);
/* Ollama tool_calls array: [{function: {name, arguments (object)}}]. */
json_t *srv_tool_calls_ollama(const qr_tool_call *calls, int32_t n);

/* Counts the request's features in quarrel_requests_by_feature_total{feature}: tools, tool_choice_required,
 * json_schema (any grammar or response format), reasoning (a budget or think asked). */
void srv_count_features(qr_server *s, const srv_gen_req *r);

#endif
