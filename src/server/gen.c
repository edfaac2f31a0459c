/* gen.c — one generation through a model's scheduler: prompt building (chat template / plain
 * text / token ids), submission, and the event queue between the scheduler thread (producer,
 * non-blocking) and the connection's thread (consumer). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/chat_tools.h"
#include "server/server_internal.h"
#include "util/util.h"

#define MAX_PENDING 8192 /* events a slow client may leave unread before it is cancelled */

/* continue_final_message: the messages but the last rendered with the generation prompt, then the last
 * (assistant) message's text as it stands, so that the model continues it rather than starting a new
 * turn. *text malloc'd. 0, or -1 with a message. */
static int render_continued(const srv_model *m, const srv_gen_req *req, char **text, char *err, size_t err_len) {
    const size_t n = json_array_size(req->messages);
    json_t *head = json_array(), *last = json_array_get(req->messages, n - 1);
    if (!head) return qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory"), -1;
    for (size_t i = 0; i + 1 < n; i++) json_array_append(head, json_array_get(req->messages, i));
    char *rendered = NULL;
    const int rc = srv_render_chat(m, head, NULL, req->chat_extra, &rendered, err, err_len);
    json_decref(head);
    if (rc < 0) return -1;
    json_t *c = json_object_get(last, "content");
    size_t len = strlen(rendered), add = json_is_string(c) ? json_string_length(c) : 0, k;
    json_t *part;
    if (json_is_array(c)) json_array_foreach(c, k, part) add += json_string_length(json_object_get(part, "text"));
    char *out = realloc(rendered, len + add + 1);
    if (!out) {
        free(rendered);
        return qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory"), -1;
    }
    if (json_is_string(c)) {
        memcpy(out + len, json_string_value(c), json_string_length(c));
        len += json_string_length(c);
    }
    if (json_is_array(c)) json_array_foreach(c, k, part) {
        json_t *t = json_object_get(part, "text");
        memcpy(out + len, json_string_value(t), json_string_length(t));
        len += json_string_length(t);
    }
    out[len] = 0;
    *text = out;
    return 0;
}

int srv_build_prompt(const srv_model *m, srv_gen_req *req, srv_api api, int32_t **ids, int32_t *n, char *err,
                     size_t err_len) {
    *ids = NULL;
    *n = 0;
    size_t nn = 0;
    int32_t *out = NULL;
    if (req->prompt_ids) {
        const size_t cnt = json_array_size(req->prompt_ids);
        out = malloc(sizeof(int32_t) * (cnt ? cnt : 1));
        if (!out) return qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory"), -1;
        for (size_t i = 0; i < cnt; i++) {
            const json_int_t v = json_integer_value(json_array_get(req->prompt_ids, i));
            if (v >= qr_model_n_vocab(m->model)) {
                free(out);
                qr_errf(err, err_len, QR_ERR_INVALID_ARG, "prompt token %lld is outside the vocabulary [0, %d)",
                        (long long)v, qr_model_n_vocab(m->model));
                return -1;
            }
            out[i] = (int32_t)v;
        }
        nn = cnt;
    } else {
        char *text = NULL;
        bool templated = false;
        if (req->messages && req->continue_final) {
            if (render_continued(m, req, &text, err, err_len) < 0) return -1;
            templated = true;
        } else if (req->messages) {
            if (srv_render_chat(m, req->chat_messages ? req->chat_messages : req->messages,
                                req->template_tools ? req->tools : NULL, req->chat_extra, &text, err, err_len) < 0)
                return -1;
            templated = true;
        } else if (api == SRV_API_OLLAMA_GENERATE && !req->raw && m->tmpl) {
            json_t *msgs = json_array();
            if (req->system && *req->system)
                json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "system", "content", req->system));
            json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "user", "content", req->prompt));
            const int rc = srv_render_chat(m, msgs, NULL, req->chat_extra, &text, err, err_len);
            json_decref(msgs);
            if (rc < 0) return -1;
            templated = true;
        } else {
            text = strdup(req->prompt ? req->prompt : "");
            if (!text) return qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory"), -1;
        }
        if (templated) srv_chat_prompt_rendered(req, text);
        /* as `quarrel run`: a plain prompt gets BOS and no special-token parsing, a rendered
         * template is parsed for its control tokens */
        const int rc = srv_tokenize(m, text, strlen(text), true, templated, &out, &nn);
        free(text);
        if (rc < 0) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "the prompt cannot be tokenized"), -1;
    }
    if (nn == 0) {
        free(out);
        qr_errf(err, err_len, QR_ERR_INVALID_ARG, "the prompt is empty");
        return -1;
    }
    *ids = out;
    *n = (int32_t)nn;
    return 0;
}

/* Runs on the model's scheduler's dispatcher thread, after the step that made the event (whose MoE / SSM counters
 * the scheduler's step hook synced first). */
static void on_event(void *user, const qr_sched_event *ev) {
    srv_gen *g = user;
    const bool done = ev->type == QR_SCHED_EV_DONE;
    srv_ev *e = done ? g->done_ev : calloc(1, sizeof *e); /* DONE never fails: preallocated */
    char *text = malloc(ev->text_len + 1);
    pthread_mutex_lock(&g->mu);
    if (done) g->done_ev = NULL;
    if (!done && (!e || !text || g->n_pending >= MAX_PENDING)) {
        /* out of memory, or the client stopped reading: drop the token and cancel */
        free(e);
        free(text);
        const bool first = !g->cancelled;
        g->cancelled = true;
        pthread_mutex_unlock(&g->mu);
        if (first) qr_sched_cancel(g->m->sched, g->id);
        return;
    }
    e->type = ev->type;
    e->token = ev->token;
    if (text) {
        memcpy(text, ev->text, ev->text_len);
        text[ev->text_len] = 0;
    }
    e->text = text;
    e->len = text ? ev->text_len : 0;
    if (ev->sample) {
        e->logprob = ev->sample->logprob;
        e->n_top = ev->sample->n_top;
        memcpy(e->top, ev->sample->top, sizeof(qr_token_logprob) * (size_t)ev->sample->n_top);
    }
    e->finish = ev->finish;
    e->end = ev->end;
    e->error = ev->error ? strdup(ev->error) : NULL;
    e->timing = ev->timing;
    if (g->tail) g->tail->next = e;
    else g->head = e;
    g->tail = e;
    g->n_pending++;
    if (done) g->done_queued = true;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

qr_status srv_gen_start(srv_gen *g, srv_model *m, int32_t *prompt, int32_t n_prompt, const srv_gen_req *req,
                        double timeout_s, char *err, size_t err_len) {
    memset(g, 0, sizeof *g);
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->m = m;
    g->prompt = prompt;
    g->n_prompt = n_prompt;
    g->t_start = qr_time_s();
    g->done_ev = calloc(1, sizeof *g->done_ev);
    if (!g->done_ev) return qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory");
    if (!m->can_generate)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "model '%s' is an embedding model and cannot generate",
                       m->name);
    qr_sched_request q = {.prompt = prompt, .n_prompt = n_prompt, .sampler = req->sp, .stops = req->stops,
                          .n_stops = req->n_stops, .ignore_eos = req->ignore_eos, .grammar = req->grammar,
                          .priority = req->priority ? QR_SCHED_BATCH : QR_SCHED_INTERACTIVE, .timeout_s = timeout_s,
                          .cb = on_event, .user = g, .special_text = req->special_text,
                          .speculative = m->spec && req->speculative != 0};
    if (req->think_budget >= 0 && req->n_think_end > 0) {
        q.think_limit = true;
        q.think_budget = req->think_budget;
        q.think_open = req->parse.think_open;
        q.think_close = req->parse.think_close;
        q.think_started = req->parse.think_started;
        q.think_end = req->think_end;
        q.n_think_end = req->n_think_end;
    }
    q.max_tokens = req->max_tokens > 0 ? req->max_tokens : 1 << 30;
    return qr_sched_submit(m->sched, &q, &g->id, err, err_len);
}

srv_ev *srv_gen_next(srv_gen *g) {
    pthread_mutex_lock(&g->mu);
    while (!g->head) {
        if (g->id == 0) { /* never started */
            pthread_mutex_unlock(&g->mu);
            return NULL;
        }
        pthread_cond_wait(&g->cv, &g->mu);
    }
    srv_ev *e = g->head;
    g->head = e->next;
    if (!g->head) g->tail = NULL;
    g->n_pending--;
    pthread_mutex_unlock(&g->mu);
    e->next = NULL;
    if (e->type == QR_SCHED_EV_DONE) g->id = 0; /* nothing follows */
    return e;
}

void srv_ev_free(srv_ev *e) {
    if (!e) return;
    free(e->text);
    free(e->error);
    free(e);
}

void srv_gen_cancel(srv_gen *g) {
    pthread_mutex_lock(&g->mu);
    const uint64_t id = g->id;
    const bool done = g->done_queued;
    g->cancelled = true;
    pthread_mutex_unlock(&g->mu);
    if (id && !done) qr_sched_cancel(g->m->sched, id);
}

void srv_gen_close(srv_gen *g) {
    if (g->id) {
        srv_gen_cancel(g);
        for (srv_ev *e; (e = srv_gen_next(g));) {
            const bool done = e->type == QR_SCHED_EV_DONE;
            srv_ev_free(e);
            if (done) break;
        }
    }
    for (srv_ev *e = g->head; e;) {
        srv_ev *n = e->next;
        srv_ev_free(e);
        e = n;
    }
    g->head = g->tail = NULL;
    free(g->done_ev);
    g->done_ev = NULL;
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
}
