/* api_ollama.c — /api/generate and /api/chat (NDJSON streaming with Ollama's final timing fields),
 * and the embedding routes of all three APIs (/api/embed, /api/embeddings, /v1/embeddings). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "server/api_common.h"
#include "server/chat_tools.h"
#include "util/util.h"

static json_t *timings(const srv_job *j, const srv_ev *done) {
    const qr_sched_timing *t = &done->timing;
    const double end = t->t_end > 0 ? t->t_end : qr_time_s();
    const double first = t->t_first > 0 ? t->t_first : end;
    const double admit = t->t_admit > 0 ? t->t_admit : j->t_arrival;
    const json_int_t total = (json_int_t)((end - j->t_arrival) * 1e9);
    const json_int_t prompt_ns = (json_int_t)((first - admit) * 1e9);
    const json_int_t eval_ns = (json_int_t)((end - first) * 1e9);
    return json_pack("{s:I, s:I, s:i, s:I, s:i, s:I}", "total_duration", total, "load_duration",
                     (json_int_t)((admit - j->t_arrival) * 1e9), "prompt_eval_count", t->n_prompt,
                     "prompt_eval_duration", prompt_ns, "eval_count", t->n_gen, "eval_duration", eval_ns);
}

/* Ollama's /api/generate without a prompt: loads the model (done_reason "load"), or with keep_alive 0
 * unloads it ("unload"), and generates nothing. Takes req. */
static int ollama_load_only(srv_conn *rc, srv_gen_req *req) {
    srv_model *m = srv_acquire_model(rc, req->model ? req->model : "", true);
    if (m) {
        const bool unload = req->has_keep_alive && req->keep_alive_s == 0;
        char ts[64];
        srv_iso_time(srv_wall_now(), ts, sizeof ts);
        srv_send_json(rc, 200, json_pack("{s:s, s:s, s:s, s:b, s:s}", "model", m->name, "created_at", ts, "response", "",
                                         "done", 1, "done_reason", unload ? "unload" : "load"));
        srv_registry_release(rc->s->reg, m, req->has_keep_alive, req->keep_alive_s);
    }
    srv_gen_req_free(req);
    return rc->status;
}

/* Ollama generate (chat == false) or chat. */
/* One NDJSON object of a reply (a stream line or the final object): chat puts d in `message` {role, content,
 * thinking?, tool_calls?}, generate in `response` and `thinking`. */
static json_t *reply_json(bool chat, const char *model, const qr_chat_delta *d, bool done) {
    char ts[48];
    srv_iso_time(srv_wall_now(), ts, sizeof ts);
    json_t *o = json_pack("{s:s, s:s}", "model", model, "created_at", ts);
    if (!o) return NULL;
    json_t *body = o;
    if (chat) {
        body = json_pack("{s:s}", "role", "assistant");
        json_object_set_new(o, "message", body);
    }
    json_object_set_new(body, chat ? "content" : "response", json_stringn(d->content, d->content_len));
    if (d->reasoning_len) json_object_set_new(body, "thinking", json_stringn(d->reasoning, d->reasoning_len));
    if (chat && d->n_calls) json_object_set_new(body, "tool_calls", srv_tool_calls_ollama(d->calls, d->n_calls));
    json_object_set_new(o, "done", json_boolean(done));
    return o;
}

static int ollama(srv_conn *rc, bool chat) {
    srv_job j;
    const srv_api api = chat ? SRV_API_OLLAMA_CHAT : SRV_API_OLLAMA_GENERATE;
    srv_gen_req req;
    char err[1024];
    if (srv_gen_req_parse(rc->body ? rc->body : "", rc->body_len, api, rc->s->cfg.max_json_depth, &req, err,
                          sizeof err) < 0) {
        srv_gen_req_free(&req);
        return srv_send_error(rc, 400, "INVALID_REQUEST", 0, "%s", err);
    }
    if (!chat && (!req.prompt || !req.prompt[0])) return ollama_load_only(rc, &req);
    if (srv_job_begin_req(rc, api, &req, &j, rc->s, NULL, NULL, NULL, 0) < 0) return rc->status;
    const srv_model *m = j.m;
    const bool stream = j.req.stream;
    char *text = NULL;
    size_t text_len = 0, text_cap = 0;
    int32_t *gen = NULL, n_gen = 0, gen_cap = 0;
    bool gone = false;
    double ttft = -1;
    if (stream && srv_stream_begin(rc, "application/x-ndjson") < 0) gone = true;
    qr_chat_parser *cp = NULL; /* streamed replies: splits content / thinking / tool calls */
    if (stream && j.req.split && qr_chat_parser_create(&j.req.parse, &cp, err, sizeof err) != QR_OK) cp = NULL;
    srv_ev *done = NULL;
    for (srv_ev *e; (e = srv_gen_next(&j.g));) {
        if (e->type == QR_SCHED_EV_DONE) {
            done = e;
            break;
        }
        if (ttft < 0) ttft = qr_time_s() - j.t_arrival;
        if (n_gen == gen_cap) {
            gen_cap = gen_cap ? gen_cap * 2 : 256;
            int32_t *ng = realloc(gen, sizeof(int32_t) * (size_t)gen_cap);
            if (ng) gen = ng;
            else gen_cap = n_gen;
        }
        if (n_gen < gen_cap) gen[n_gen++] = e->token;
        if (!stream) {
            if (text_len + e->len + 1 > text_cap) {
                text_cap = (text_cap ? text_cap * 2 : 256) + e->len;
                char *nt = realloc(text, text_cap);
                if (nt) text = nt;
            }
            if (text && text_len + e->len + 1 <= text_cap) {
                memcpy(text + text_len, e->text, e->len);
                text_len += e->len;
                text[text_len] = 0;
            }
        } else if (!gone && e->len > 0) {
            qr_chat_delta d = {.content = e->text, .content_len = e->len, .reasoning = ""};
            if (cp && qr_chat_parser_feed(cp, e->text, e->len, false, &d, err, sizeof err) != QR_OK)
                d = (qr_chat_delta){.content = "", .reasoning = ""};
            if ((d.content_len || d.reasoning_len || d.n_calls) && srv_stream_ndjson(rc, reply_json(chat, m->name, &d, false)) < 0) {
                gone = true;
                srv_gen_cancel(&j.g);
            }
        }
        srv_ev_free(e);
    }
    int http = 200;
    const char *ecode = done ? srv_done_error_code(rc->s, done, &http) : "INFERENCE_ERROR";
    srv_account_tokens(rc, done ? done->timing.n_prompt : 0, done ? done->timing.n_gen : 0, ttft);
    if (gone) {
        rc->status = 499;
    } else if (ecode) {
        const char *msg = srv_done_error_message(done, ecode);
        if (!rc->headers_sent) {
            srv_send_error(rc, http, ecode, http == 503 ? 2 : 0, "%s", msg);
        } else {
            rc->err_code = ecode;
            srv_stream_ndjson(rc, json_pack("{s:s}", "error", msg));
            srv_stream_end(rc);
        }
    } else {
        const char *final_text = stream ? done->text : (text ? text : "");
        size_t final_len = stream ? done->len : text_len;
        if (!stream && done->len) { /* held-back text flushed at the end */
            char *nt = realloc(text, text_len + done->len + 1);
            if (nt) {
                text = nt;
                memcpy(text + text_len, done->text, done->len);
                text_len += done->len;
                text[text_len] = 0;
                final_text = text;
                final_len = text_len;
            }
        }
        qr_chat_delta d = {.content = final_text, .content_len = final_len, .reasoning = ""};
        qr_chat_result whole = {0};
        if (cp) { /* stream: what the parser still held */
            if (qr_chat_parser_feed(cp, final_text, final_len, true, &d, err, sizeof err) != QR_OK)
                d = (qr_chat_delta){.content = "", .reasoning = ""};
        } else if (j.req.split && qr_chat_parse(&j.req.parse, final_text, final_len, &whole, err, sizeof err) == QR_OK) {
            d = (qr_chat_delta){.content = whole.content, .content_len = whole.content_len, .reasoning = whole.reasoning,
                                .reasoning_len = whole.reasoning_len, .calls = whole.calls, .n_calls = whole.n_calls};
        }
        json_t *o = reply_json(chat, m->name, &d, true);
        qr_chat_result_free(&whole);
        if (o) {
            json_object_set_new(o, "done_reason", json_string(srv_finish_str(done)));
            json_object_update(o, timings(&j, done));
            if (!chat) {
                json_t *ctx = json_array();
                for (int32_t i = 0; i < j.g.n_prompt; i++) json_array_append_new(ctx, json_integer(j.g.prompt[i]));
                for (int32_t i = 0; i < n_gen; i++) json_array_append_new(ctx, json_integer(gen[i]));
                json_object_set_new(o, "context", ctx);
            }
        }
        if (stream) {
            srv_stream_ndjson(rc, o);
            srv_stream_end(rc);
        } else {
            srv_send_json(rc, 200, o);
        }
    }
    srv_ev_free(done);
    qr_chat_parser_free(cp);
    free(text);
    free(gen);
    srv_job_end(rc, &j, rc->s);
    return rc->status;
}

int srv_h_ollama_generate(srv_conn *rc) { return ollama(rc, false); }
int srv_h_ollama_chat(srv_conn *rc) { return ollama(rc, true); }

/* ---- embeddings ---- */

typedef struct embed_job {
    srv_model *m;
    const char *const *texts;
    int32_t n;
    float *out;
    bool normalize;
    bool truncate; /* false: a text over the model's context is an error (400), not cut */
    char err[512];
} embed_job;

/* Runs on the model's scheduler thread (the only thread that may use the model's backend). */
static qr_status embed_fn(void *arg, qr_context *ctx) {
    (void)ctx;
    embed_job *ej = arg;
    srv_model *m = ej->m;
    if (!m->embed_ctx) {
        qr_context_params cp = qr_context_default_params();
        cp.n_ctx = qr_model_n_ctx_capped(m->model, SRV_EMBED_SCRATCH_CTX);
        cp.n_seq_max = SRV_EMBED_SEQS;
        qr_status st = qr_context_create(m->model, &cp, &m->embed_ctx, ej->err, sizeof ej->err);
        if (st != QR_OK) return st;
        if (m->arch) qr_context_set_arch_stats(m->embed_ctx, true);
    }
    qr_embed_params p = qr_embed_default_params();
    p.normalize = ej->normalize;
    p.truncate = ej->truncate;
    const qr_status st = qr_embed(m->embed_ctx, ej->texts, ej->n, &p, ej->out, ej->err, sizeof ej->err);
    srv_model_sync_arch(m);
    return st;
}

typedef enum embed_api { EMBED_OLLAMA, EMBED_OLLAMA_LEGACY, EMBED_OPENAI } embed_api;

/* OpenAI's encoding_format "base64": the float32 vector's little-endian bytes in standard base64. */
static json_t *base64_floats(const float *v, int32_t n) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *b = (const unsigned char *)v; /* x86 and the GPUs' hosts are little-endian */
    const size_t len = (size_t)n * sizeof *v, out_len = (len + 2) / 3 * 4;
    char *o = malloc(out_len + 1);
    if (!o) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < len; i += 3) {
        const unsigned x = (unsigned)b[i] << 16 | (i + 1 < len ? (unsigned)b[i + 1] << 8 : 0) | (i + 2 < len ? b[i + 2] : 0);
        o[k++] = tab[x >> 18 & 63];
        o[k++] = tab[x >> 12 & 63];
        o[k++] = i + 1 < len ? tab[x >> 6 & 63] : '=';
        o[k++] = i + 2 < len ? tab[x & 63] : '=';
    }
    o[k] = 0;
    json_t *j = json_string(o);
    free(o);
    return j;
}

static int embeddings(srv_conn *rc, embed_api api) {
    json_t *root;
    char err[512];
    if (srv_json_parse(rc->body ? rc->body : "", rc->body_len, rc->s->cfg.max_json_depth, &root, err, sizeof err) < 0)
        return srv_send_error(rc, 400, "INVALID_REQUEST", 0, "%s", err);
    const char *field = api == EMBED_OLLAMA_LEGACY ? "prompt" : "input";
    json_t *model = json_object_get(root, "model"), *in = json_object_get(root, field);
    const char **texts = NULL;
    int32_t n = 0;
    int status = 0;
    if (model && !json_is_string(model) && !json_is_null(model)) {
        status = srv_send_error(rc, 400, "INVALID_REQUEST", 0, "'model' must be a string");
        goto out;
    }
    json_t *ka = api == EMBED_OPENAI ? NULL : json_object_get(root, "keep_alive");
    double keep_alive_s = 0;
    if (ka && !json_is_null(ka) && srv_parse_duration(ka, &keep_alive_s) < 0) {
        status = srv_send_error(rc, 400, "INVALID_REQUEST", 0,
                                "'keep_alive' must be a number of seconds or a duration such as \"5m\"");
        goto out;
    }
    /* Ollama's "truncate" (default true: cut a text at the model's context, keeping its trailing [SEP];
     * false: refuse it with 400); also taken on /v1/embeddings, where OpenAI refuses over-long input */
    json_t *tr = json_object_get(root, "truncate");
    if (tr && !json_is_null(tr) && !json_is_boolean(tr)) {
        status = srv_send_error(rc, 400, "INVALID_REQUEST", 0, "'truncate' must be true or false");
        goto out;
    }
    json_t *fmt = api == EMBED_OPENAI ? json_object_get(root, "encoding_format") : NULL;
    const bool b64 = json_is_string(fmt) && !strcmp(json_string_value(fmt), "base64");
    if (fmt && !json_is_null(fmt) && !b64 && !(json_is_string(fmt) && !strcmp(json_string_value(fmt), "float"))) {
        status = srv_send_error(rc, 400, "INVALID_REQUEST", 0, "'encoding_format' must be \"float\" or \"base64\"");
        goto out;
    }
    if (json_is_string(in)) {
        texts = malloc(sizeof *texts);
        if (texts) texts[n++] = json_string_value(in);
    } else if (json_is_array(in) && json_array_size(in) > 0 && json_array_size(in) <= 2048) {
        texts = malloc(sizeof *texts * json_array_size(in));
        size_t i;
        json_t *e;
        json_array_foreach(in, i, e) {
            if (!json_is_string(e)) {
                status = srv_send_error(rc, 400, "INVALID_REQUEST", 0, "'%s[%zu]' must be a string", field, i);
                goto out;
            }
            if (texts) texts[n++] = json_string_value(e);
        }
    } else {
        status = srv_send_error(rc, 400, "INVALID_REQUEST", 0, "'%s' must be a string or a non-empty array of strings",
                                field);
        goto out;
    }
    if (!texts) {
        status = srv_send_error(rc, 500, "INFERENCE_ERROR", 0, "out of memory");
        goto out;
    }
    for (int32_t i = 0; i < n; i++)
        if (!texts[i][0]) {
            status = srv_send_error(rc, 400, "INVALID_REQUEST", 0, "'%s' must not contain empty strings", field);
            goto out;
        }
    srv_model *m = srv_acquire_model(rc, json_is_string(model) ? json_string_value(model) : "", true);
    if (!m) goto out;
    const int32_t dim = qr_model_n_embd_out(m->model);
    embed_job ej = {.m = m, .texts = texts, .n = n, .normalize = api != EMBED_OLLAMA_LEGACY,
                    .truncate = !json_is_false(tr)};
    ej.out = malloc(sizeof(float) * (size_t)dim * (size_t)n);
    int32_t n_tok = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t *ids;
        size_t nt = 0;
        if (srv_tokenize(m, texts[i], strlen(texts[i]), true, false, &ids, &nt) == 0) free(ids);
        n_tok += (int32_t)nt;
    }
    const double t0 = qr_time_s();
    qr_status st = ej.out ? qr_sched_run_job(m->sched, embed_fn, &ej) : QR_ERR_NOMEM;
    const double dt = qr_time_s() - t0;
    if (st == QR_ERR_SHUTDOWN && !ej.err[0]) snprintf(ej.err, sizeof ej.err, "the server is shutting down");
    if (st != QR_OK) {
        srv_send_status(rc, st, 2, ej.err[0] ? ej.err : qr_status_str(st));
    } else {
        srv_account_tokens(rc, n_tok, 0, -1);
        json_t *vecs = json_array();
        for (int32_t i = 0; i < n; i++) {
            json_t *v = b64 ? base64_floats(ej.out + (size_t)i * dim, dim) : json_array();
            for (int32_t d = 0; !b64 && d < dim; d++) json_array_append_new(v, json_real(ej.out[(size_t)i * dim + d]));
            if (api == EMBED_OPENAI)
                json_array_append_new(vecs, json_pack("{s:s, s:i, s:o}", "object", "embedding", "index", i, "embedding", v));
            else
                json_array_append_new(vecs, v);
        }
        json_t *o;
        if (api == EMBED_OPENAI) {
            o = json_pack("{s:s, s:o, s:s, s:{s:i, s:i}}", "object", "list", "data", vecs, "model", m->name, "usage",
                          "prompt_tokens", n_tok, "total_tokens", n_tok);
        } else if (api == EMBED_OLLAMA_LEGACY) {
            o = json_pack("{s:O}", "embedding", json_array_get(vecs, 0));
            json_decref(vecs);
        } else {
            o = json_pack("{s:s, s:o, s:I, s:I, s:i}", "model", m->name, "embeddings", vecs, "total_duration",
                          (json_int_t)((qr_time_s() - rc->t0) * 1e9), "load_duration", (json_int_t)0,
                          "prompt_eval_count", n_tok);
            (void)dt;
        }
        srv_send_json(rc, 200, o);
    }
    free(ej.out);
    srv_registry_release(rc->s->reg, m, ka && !json_is_null(ka), keep_alive_s);
out:
    free(texts);
    json_decref(root);
    return status ? status : rc->status;
}

int srv_h_ollama_embed(srv_conn *rc) { return embeddings(rc, EMBED_OLLAMA); }
int srv_h_ollama_embeddings(srv_conn *rc) { return embeddings(rc, EMBED_OLLAMA_LEGACY); }
int srv_h_openai_embeddings(srv_conn *rc) { return embeddings(rc, EMBED_OPENAI); }
