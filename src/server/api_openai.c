/* api_openai.c — /v1/chat/completions and /v1/completions: JSON or SSE (`data:` frames ending with
 * `data: [DONE]`), usage, logprobs, stop, seed, n = 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api_common.h"
#include "server/chat_tools.h"
#include "util/util.h"

/* Growable text buffer. */
typedef struct tbuf {
    char *p;
    size_t len, cap;
} tbuf;

static void tb_add(tbuf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t nc = (b->cap ? b->cap * 2 : 256) + n;
        char *np = realloc(b->p, nc);
        if (!np) return;
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

/* The token string of a logprobs entry: the piece itself when it is valid UTF-8; else (a byte-level token
 * that holds part of a character) "bytes:" followed by the piece with every byte outside printable ASCII,
 * and the backslash, written \\xNN, so each such token keeps a distinct, safe name (`bytes` has the real
 * values). out: at least 4 * strlen(piece) + 8 bytes. */
static const char *lp_token(const char *piece, char *out, size_t cap) {
    size_t len = strlen(piece);
    if (srv_utf8_valid(piece, len)) return piece;
    size_t o = (size_t)snprintf(out, cap, "bytes:");
    for (const unsigned char *p = (const unsigned char *)piece; *p && o + 5 < cap; p++) {
        if (*p >= 0x20 && *p < 0x7f && *p != '\\') out[o++] = (char)*p;
        else o += (size_t)snprintf(out + o, cap - o, "\\x%02x", *p);
    }
    out[o] = 0;
    return out;
}

/* The list of byte values of a piece (OpenAI's `bytes`). */
static json_t *lp_bytes(const char *piece) {
    json_t *b = json_array();
    for (const unsigned char *p = (const unsigned char *)piece; *p; p++) json_array_append_new(b, json_integer(*p));
    return b;
}

/* Chat logprobs entry: {token, logprob, bytes, top_logprobs:[...]} */
static json_t *chat_lp(const srv_model *m, const srv_ev *e) {
    char piece[256], name[1040];
    srv_token_piece(m, e->token, piece, sizeof piece);
    json_t *top = json_array();
    for (int32_t k = 0; k < e->n_top; k++) {
        char tp[256], tn[1040];
        srv_token_piece(m, e->top[k].token, tp, sizeof tp);
        json_t *t = json_pack("{s:s, s:f, s:o}", "token", lp_token(tp, tn, sizeof tn), "logprob",
                              (double)e->top[k].logprob, "bytes", lp_bytes(tp));
        if (t) json_array_append_new(top, t);
    }
    json_t *r = json_pack("{s:s, s:f, s:o, s:o}", "token", lp_token(piece, name, sizeof name), "logprob",
                          (double)e->logprob, "bytes", lp_bytes(piece), "top_logprobs", top);
    return r ? r : json_pack("{s:s, s:f, s:[], s:[]}", "token", "", "logprob", (double)e->logprob, "bytes",
                             "top_logprobs");
}

/* Legacy completions logprobs: parallel arrays. */
typedef struct comp_lp {
    json_t *tokens, *token_logprobs, *top, *offsets;
    size_t offset;
} comp_lp;

static void comp_lp_add(comp_lp *c, const srv_model *m, const srv_ev *e) {
    char piece[256], name[1040];
    srv_token_piece(m, e->token, piece, sizeof piece);
    json_t *t = json_string(lp_token(piece, name, sizeof name));
    json_array_append_new(c->tokens, t ? t : json_string(""));
    json_array_append_new(c->token_logprobs, json_real(e->logprob));
    json_t *top = json_object();
    for (int32_t k = 0; k < e->n_top; k++) {
        char tp[256], tn[1040];
        srv_token_piece(m, e->top[k].token, tp, sizeof tp);
        const char *key = lp_token(tp, tn, sizeof tn);
        if (json_object_get(top, key) == NULL) json_object_set_new(top, key, json_real(e->top[k].logprob));
    }
    json_array_append_new(c->top, top);
    json_array_append_new(c->offsets, json_integer((json_int_t)c->offset));
    c->offset += e->len;
}

static json_t *comp_lp_json(comp_lp *c) {
    return json_pack("{s:O, s:O, s:O, s:O}", "tokens", c->tokens, "token_logprobs", c->token_logprobs, "top_logprobs",
                     c->top, "text_offset", c->offsets);
}

static void comp_lp_free(comp_lp *c) {
    json_decref(c->tokens);
    json_decref(c->token_logprobs);
    json_decref(c->top);
    json_decref(c->offsets);
}

static json_t *usage_json(int32_t np, int32_t ng) {
    return json_pack("{s:i, s:i, s:i}", "prompt_tokens", np, "completion_tokens", ng, "total_tokens", np + ng);
}

/* The delta object of a chat chunk: role on the first, then the parser's content, reasoning_content and
 * completed tool calls. */
static json_t *chat_delta(const qr_chat_delta *d, bool first, const char *rid) {
    json_t *delta = json_object();
    if (first) json_object_set_new(delta, "role", json_string("assistant"));
    if (d->content_len) json_object_set_new(delta, "content", json_stringn(d->content, d->content_len));
    if (d->reasoning_len) json_object_set_new(delta, "reasoning_content", json_stringn(d->reasoning, d->reasoning_len));
    if (d->n_calls)
        json_object_set_new(delta, "tool_calls", srv_tool_calls_openai(d->calls, d->n_calls, d->first_call, rid, true));
    return delta;
}

/* The message of a whole chat reply: content (null when the reply is only calls), reasoning_content and
 * tool_calls when present. *n_calls receives the number of calls. */
static json_t *chat_message(const srv_gen_req *req, const char *text, size_t len, const char *rid, int32_t *n_calls) {
    *n_calls = 0;
    qr_chat_result r;
    char err[128];
    if (!req->split || qr_chat_parse(&req->parse, text, len, &r, err, sizeof err) != QR_OK)
        return json_pack("{s:s, s:s%}", "role", "assistant", "content", text, len);
    json_t *m = json_pack("{s:s}", "role", "assistant");
    json_object_set_new(m, "content", r.n_calls && !r.content_len ? json_null() : json_stringn(r.content, r.content_len));
    if (r.reasoning_len) json_object_set_new(m, "reasoning_content", json_stringn(r.reasoning, r.reasoning_len));
    if (r.n_calls) json_object_set_new(m, "tool_calls", srv_tool_calls_openai(r.calls, r.n_calls, 0, rid, false));
    *n_calls = r.n_calls;
    qr_chat_result_free(&r);
    return m;
}

/* One OpenAI request, chat or completion. */
static int openai(srv_conn *rc, bool chat) {
    srv_job j;
    if (srv_job_begin(rc, chat ? SRV_API_OPENAI_CHAT : SRV_API_OPENAI_COMPLETION, &j) < 0) return rc->status;
    const srv_model *m = j.m;
    const bool stream = j.req.stream, want_lp = j.req.sp.logprobs;
    char id[96];
    snprintf(id, sizeof id, "%s-%s", chat ? "chatcmpl" : "cmpl", rc->rid);
    const json_int_t created = (json_int_t)srv_wall_now();
    const char *object = chat ? (stream ? "chat.completion.chunk" : "chat.completion") : "text_completion";
    tbuf text = {0};
    json_t *lp_content = json_array();
    comp_lp clp = {json_array(), json_array(), json_array(), json_array(), 0};
    bool gone = false, first = true;
    double ttft = -1;
    qr_chat_parser *cp = NULL; /* streamed chat: splits content / reasoning / tool calls */
    char perr[128];
    if (stream && chat && j.req.split && qr_chat_parser_create(&j.req.parse, &cp, perr, sizeof perr) != QR_OK) cp = NULL;
    if (stream && srv_stream_begin(rc, "text/event-stream") < 0) gone = true;
    srv_ev *done = NULL;
    for (srv_ev *e; !done && (e = srv_gen_next(&j.g));) {
        if (e->type == QR_SCHED_EV_DONE) {
            done = e;
            break;
        }
        if (ttft < 0) ttft = qr_time_s() - j.t_arrival;
        if (!stream) {
            tb_add(&text, e->text, e->len);
            if (want_lp) {
                if (chat) json_array_append_new(lp_content, chat_lp(m, e));
                else comp_lp_add(&clp, m, e);
            }
        } else if (!gone && (e->len > 0 || want_lp)) {
            json_t *choice;
            qr_chat_delta d = {.content = e->text, .content_len = e->len, .reasoning = ""};
            if (chat && cp && qr_chat_parser_feed(cp, e->text, e->len, false, &d, perr, sizeof perr) != QR_OK)
                d = (qr_chat_delta){.content = "", .reasoning = ""};
            if (chat && !want_lp && !d.content_len && !d.reasoning_len && !d.n_calls) {
                srv_ev_free(e);
                continue; /* held back by the parser */
            }
            if (chat) {
                json_t *delta = chat_delta(&d, first, rc->rid);
                choice = json_pack("{s:i, s:o, s:n}", "index", 0, "delta", delta ? delta : json_object(), "finish_reason");
                if (choice) json_object_set_new(choice, "logprobs", want_lp ? json_pack("{s:[o]}", "content", chat_lp(m, e)) : json_null());
            } else {
                choice = json_pack("{s:s%, s:i, s:n}", "text", e->text, e->len, "index", 0, "finish_reason");
                if (choice) {
                    if (want_lp) {
                        comp_lp one = {json_array(), json_array(), json_array(), json_array(), clp.offset};
                        comp_lp_add(&one, m, e);
                        clp.offset = one.offset;
                        json_object_set_new(choice, "logprobs", comp_lp_json(&one));
                        comp_lp_free(&one);
                    } else {
                        json_object_set_new(choice, "logprobs", json_null());
                    }
                }
            }
            first = false;
            json_t *chunk = json_pack("{s:s, s:s, s:I, s:s, s:s, s:[o]}", "id", id, "object", object, "created", created,
                                      "model", m->name, "system_fingerprint", "quarrel-" QUARREL_VERSION_STRING,
                                      "choices", choice);
            if (srv_stream_sse_json(rc, chunk) < 0) {
                gone = true; /* the client went away: cancel, its KV blocks free before the next step */
                srv_gen_cancel(&j.g);
            }
        }
        srv_ev_free(e);
    }
    int http = 200;
    const char *ecode = done ? srv_done_error_code(rc->s, done, &http) : "INFERENCE_ERROR";
    const int32_t np = done ? done->timing.n_prompt : 0, ng = done ? done->timing.n_gen : 0;
    if (done && done->len) tb_add(&text, done->text, done->len);
    srv_account_tokens(rc, np, ng, ttft);
    if (gone) {
        rc->status = 499; /* client closed the request */
    } else if (ecode && !(stream && rc->headers_sent)) {
        srv_send_error(rc, http, ecode, http == 503 ? 2 : 0, "%s", srv_done_error_message(done, ecode));
    } else if (stream) {
        if (ecode) {
            rc->err_code = ecode;
            srv_stream_sse_json(rc, json_pack("{s:{s:s, s:s}}", "error", "code", ecode, "message",
                                              srv_done_error_message(done, ecode)));
        } else {
            qr_chat_delta d = {.content = done->text, .content_len = done->len, .reasoning = ""};
            if (chat && cp && qr_chat_parser_feed(cp, done->text, done->len, true, &d, perr, sizeof perr) != QR_OK)
                d = (qr_chat_delta){.content = "", .reasoning = ""};
            const bool calls = cp && qr_chat_parser_n_calls(cp) > 0;
            json_t *choice = chat ? json_pack("{s:i, s:o, s:n, s:s}", "index", 0, "delta", chat_delta(&d, first, rc->rid),
                                              "logprobs", "finish_reason", calls ? "tool_calls" : srv_finish_str(done))
                                  : json_pack("{s:s%, s:i, s:n, s:s}", "text", done->text, done->len, "index", 0,
                                              "logprobs", "finish_reason", srv_finish_str(done));
            json_t *chunk = json_pack("{s:s, s:s, s:I, s:s, s:s, s:[o]}", "id", id, "object", object, "created",
                                      created, "model", m->name, "system_fingerprint",
                                      "quarrel-" QUARREL_VERSION_STRING, "choices", choice);
            if (j.req.include_usage && chunk) json_object_set_new(chunk, "usage", json_null());
            srv_stream_sse_json(rc, chunk);
            if (j.req.include_usage)
                srv_stream_sse_json(rc, json_pack("{s:s, s:s, s:I, s:s, s:s, s:[], s:o}", "id", id, "object", object,
                                                  "created", created, "model", m->name, "system_fingerprint",
                                                  "quarrel-" QUARREL_VERSION_STRING, "choices", "usage",
                                                  usage_json(np, ng)));
        }
        srv_stream_write(rc, "data: [DONE]\n\n", 14);
        srv_stream_end(rc);
    } else {
        json_t *choice;
        const char *t = text.p ? text.p : "";
        if (chat) {
            int32_t n_calls;
            json_t *msg = chat_message(&j.req, t, text.len, rc->rid, &n_calls);
            choice = json_pack("{s:i, s:o, s:s}", "index", 0, "message", msg ? msg : json_object(), "finish_reason",
                               n_calls ? "tool_calls" : srv_finish_str(done));
            if (choice)
                json_object_set_new(choice, "logprobs", want_lp ? json_pack("{s:O}", "content", lp_content) : json_null());
        } else {
            choice = json_pack("{s:s%, s:i, s:s}", "text", t, text.len, "index", 0, "finish_reason", srv_finish_str(done));
            if (choice) json_object_set_new(choice, "logprobs", want_lp ? comp_lp_json(&clp) : json_null());
        }
        srv_send_json(rc, 200, json_pack("{s:s, s:s, s:I, s:s, s:s, s:[o], s:o}", "id", id, "object", object,
                                         "created", created, "model", m->name, "system_fingerprint",
                                         "quarrel-" QUARREL_VERSION_STRING, "choices", choice, "usage",
                                         usage_json(np, ng)));
    }
    srv_ev_free(done);
    qr_chat_parser_free(cp);
    free(text.p);
    json_decref(lp_content);
    comp_lp_free(&clp);
    srv_job_end(rc, &j, rc->s);
    return rc->status;
}

int srv_h_openai_chat(srv_conn *rc) { return openai(rc, true); }
int srv_h_openai_completions(srv_conn *rc) { return openai(rc, false); }
