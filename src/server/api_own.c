/* api_own.c — Quarrel's own routes: /api/stream (SSE of {token, token_id, complete,
 * tokens_per_sec}), /tokenize, /detokenize, /metrics, /openapi.yaml. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api_common.h"
#include "util/util.h"

json_t *srv_native_token_json(const srv_ev *e, double t_first, int32_t n_gen);

/* {"token","token_id","complete":false,"tokens_per_sec"}: the streaming message of /api/stream
 * and /ws. tokens_per_sec counts from the first token. */
json_t *srv_native_token_json(const srv_ev *e, double t_first, int32_t n_gen) {
    const double dt = qr_time_s() - t_first;
    const double tps = n_gen > 1 && dt > 0 ? (n_gen - 1) / dt : 0.0;
    json_t *j = json_pack("{s:s%, s:i, s:b, s:f}", "token", e->text, e->len, "token_id", e->token, "complete", 0,
                          "tokens_per_sec", tps);
    return j ? j : json_pack("{s:s, s:i, s:b, s:f}", "token", "", "token_id", e->token, "complete", 0, "tokens_per_sec", tps);
}

json_t *srv_native_done_json(const srv_ev *done, double t_first);

/* The final message: complete = true, finish_reason, usage, timings. */
json_t *srv_native_done_json(const srv_ev *done, double t_first) {
    const qr_sched_timing *t = &done->timing;
    const double dt = t->t_end - (t_first > 0 ? t_first : t->t_end);
    const double tps = t->n_gen > 1 && dt > 0 ? (t->n_gen - 1) / dt : 0.0;
    json_t *j = json_pack("{s:s%, s:i, s:b, s:f, s:s, s:{s:i, s:i, s:i, s:i, s:i}, s:f}", "token", done->text, done->len,
                          "token_id", -1, "complete", 1, "tokens_per_sec", tps, "finish_reason", srv_finish_str(done),
                          "usage", "prompt_tokens", t->n_prompt, "completion_tokens", t->n_gen, "cached_tokens",
                          t->n_cached, "draft_tokens", t->n_drafted, "draft_accepted_tokens", t->n_accepted, "ttft_ms",
                          t->t_first > 0 ? (t->t_first - t->t_submit) * 1e3 : 0.0);
    return j;
}

int srv_h_stream(srv_conn *rc) {
    srv_job j;
    if (srv_job_begin(rc, SRV_API_NATIVE, &j) < 0) return rc->status;
    bool gone = srv_stream_begin(rc, "text/event-stream") < 0;
    srv_ev *done = NULL;
    double t_first = 0, ttft = -1;
    int32_t n = 0;
    for (srv_ev *e; (e = srv_gen_next(&j.g));) {
        if (e->type == QR_SCHED_EV_DONE) {
            done = e;
            break;
        }
        if (!n) t_first = qr_time_s(), ttft = t_first - j.t_arrival;
        n++;
        if (!gone && srv_stream_sse_json(rc, srv_native_token_json(e, t_first, n)) < 0) {
            gone = true;
            srv_gen_cancel(&j.g);
        }
        srv_ev_free(e);
    }
    int http = 200;
    const char *ecode = done ? srv_done_error_code(rc->s, done, &http) : "INFERENCE_ERROR";
    srv_account_tokens(rc, done ? done->timing.n_prompt : 0, done ? done->timing.n_gen : 0, ttft);
    if (gone) {
        rc->status = 499;
    } else {
        if (ecode) {
            rc->err_code = ecode;
            srv_stream_sse_json(rc, json_pack("{s:{s:s, s:s}}", "error", "code", ecode, "message",
                                              srv_done_error_message(done, ecode)));
        } else {
            srv_stream_sse_json(rc, srv_native_done_json(done, t_first));
        }
        srv_stream_write(rc, "data: [DONE]\n\n", 14);
        srv_stream_end(rc);
    }
    srv_ev_free(done);
    srv_job_end(rc, &j, rc->s);
    return rc->status;
}

/* Parses the body and acquires its model; sends the error and returns NULL on failure. */
static srv_model *body_model(srv_conn *rc, json_t **root) {
    char err[512];
    if (srv_json_parse(rc->body ? rc->body : "", rc->body_len, rc->s->cfg.max_json_depth, root, err, sizeof err) < 0) {
        srv_send_error(rc, 400, "INVALID_REQUEST", 0, "%s", err);
        return NULL;
    }
    json_t *model = json_object_get(*root, "model");
    if (model && !json_is_string(model) && !json_is_null(model)) {
        srv_send_error(rc, 400, "INVALID_REQUEST", 0, "'model' must be a string");
        json_decref(*root);
        return NULL;
    }
    srv_model *m = srv_acquire_model(rc, json_is_string(model) ? json_string_value(model) : "", true);
    if (!m) json_decref(*root);
    return m;
}

int srv_h_tokenize(srv_conn *rc) {
    json_t *root;
    srv_model *m = body_model(rc, &root);
    if (!m) return rc->status;
    json_t *content = json_object_get(root, "content");
    if (!content) content = json_object_get(root, "text");
    json_t *as = json_object_get(root, "add_special"), *ps = json_object_get(root, "parse_special"),
           *wp = json_object_get(root, "with_pieces");
    /* null = absent */
    as = json_is_null(as) ? NULL : as, ps = json_is_null(ps) ? NULL : ps, wp = json_is_null(wp) ? NULL : wp;
    if (!json_is_string(content) || (as && !json_is_boolean(as)) || (ps && !json_is_boolean(ps)) ||
        (wp && !json_is_boolean(wp))) {
        srv_send_error(rc, 400, "INVALID_REQUEST", 0,
                       "'content' must be a string; add_special, parse_special and with_pieces booleans");
    } else {
        int32_t *ids;
        size_t n;
        if (srv_tokenize(m, json_string_value(content), json_string_length(content), as ? json_is_true(as) : true,
                         ps ? json_is_true(ps) : false, &ids, &n) < 0) {
            srv_send_error(rc, 400, "INVALID_REQUEST", 0, "the text cannot be tokenized");
        } else {
            json_t *a = json_array();
            for (size_t i = 0; i < n; i++) {
                if (wp && json_is_true(wp)) {
                    char piece[256];
                    srv_token_piece(m, ids[i], piece, sizeof piece);
                    json_t *pj = json_string(piece);
                    json_array_append_new(a, json_pack("{s:i, s:o}", "id", ids[i], "piece", pj ? pj : json_string("")));
                } else {
                    json_array_append_new(a, json_integer(ids[i]));
                }
            }
            free(ids);
            srv_send_json(rc, 200, json_pack("{s:o, s:s}", "tokens", a, "model", m->name));
        }
    }
    json_decref(root);
    srv_registry_release(rc->s->reg, m, false, 0);
    return rc->status;
}

int srv_h_detokenize(srv_conn *rc) {
    json_t *root;
    srv_model *m = body_model(rc, &root);
    if (!m) return rc->status;
    json_t *toks = json_object_get(root, "tokens");
    const int32_t n_vocab = qr_model_n_vocab(m->model);
    bool ok = json_is_array(toks);
    size_t n = ok ? json_array_size(toks) : 0;
    int32_t *ids = malloc(sizeof(int32_t) * (n ? n : 1));
    for (size_t i = 0; ok && ids && i < n; i++) {
        json_t *e = json_array_get(toks, i);
        ok = json_is_integer(e) && json_integer_value(e) >= 0 && json_integer_value(e) < n_vocab;
        if (ok) ids[i] = (int32_t)json_integer_value(e);
    }
    if (!ok || !ids) {
        srv_send_error(rc, 400, "INVALID_REQUEST", 0, "'tokens' must be an array of token ids in [0, %d)", n_vocab);
    } else {
        size_t need = 0;
        qr_detokenize(m->tok, ids, n, false, false, NULL, 0, &need);
        char *buf = malloc(need + 1);
        size_t got = 0;
        if (buf && qr_detokenize(m->tok, ids, n, false, false, buf, need, &got) == QR_OK) {
            json_t *s = json_stringn(buf, got);
            if (!s) { /* a token run that is not valid UTF-8 on its own */
                for (size_t i = 0; i < got; i++)
                    if ((unsigned char)buf[i] >= 0x80) buf[i] = '?';
                s = json_stringn(buf, got);
            }
            srv_send_json(rc, 200, json_pack("{s:o, s:s}", "content", s, "model", m->name));
        } else {
            srv_send_error(rc, 500, "INFERENCE_ERROR", 0, "detokenize failed");
        }
        free(buf);
    }
    free(ids);
    json_decref(root);
    srv_registry_release(rc->s->reg, m, false, 0);
    return rc->status;
}

typedef struct sched_sum {
    qr_server *s;
    int32_t queue, running, used, freeb, cached, n;
    double hits, reused, preempt, cancelled;
    srv_arch_snapshot **arch; /* [n_arch] MoE / SSM metrics of the models that have them */
    int n_arch, cap_arch;
    bool oom;
} sched_sum;

/* Keeps a copy of model m's MoE / SSM metrics in ss->arch. */
static void snapshot_arch(sched_sum *ss, srv_model *m, const char *label) {
    if (!m->arch) return;
    if (ss->n_arch == ss->cap_arch) {
        const int nc = ss->cap_arch ? ss->cap_arch * 2 : 4;
        srv_arch_snapshot **na = realloc(ss->arch, sizeof *na * (size_t)nc);
        if (!na) {
            ss->oom = true;
            return;
        }
        ss->arch = na;
        ss->cap_arch = nc;
    }
    if (!(ss->arch[ss->n_arch] = srv_arch_metrics_snapshot(m->arch, label))) ss->oom = true;
    else ss->n_arch++;
}

static void sum_model(void *arg, srv_model *m) {
    sched_sum *ss = arg;
    qr_sched_stats st;
    qr_sched_get_stats(m->sched, &st);
    ss->queue += st.queue_depth;
    ss->running += st.running;
    ss->used += st.kv_blocks_used;
    ss->freeb += st.kv_blocks_free;
    ss->cached += st.kv_blocks_cached;
    ss->hits += (double)st.prefix_hits;
    ss->reused += (double)st.prefix_tokens_reused;
    ss->preempt += (double)st.preemptions;
    ss->cancelled += (double)st.cancelled;
    ss->n++;
    char lab[300], esc[260];
    srv_metrics_escape(m->name, esc, sizeof esc);
    snprintf(lab, sizeof lab, "model=\"%s\"", esc);
    srv_metrics_set(ss->s->metrics, "quarrel_kv_blocks_used", lab, st.kv_blocks_used);
    srv_metrics_set(ss->s->metrics, "quarrel_kv_blocks_free", lab, st.kv_blocks_free);
    srv_metrics_set(ss->s->metrics, "quarrel_kv_blocks_cached", lab, st.kv_blocks_cached);
    /* bytes: the same blocks at the cache's size per block (its types: a quantized cache holds more tokens) */
    const double block_bytes = st.kv_blocks_total > 0 ? (double)m->kv_bytes / st.kv_blocks_total : 0.0;
    srv_metrics_set(ss->s->metrics, "quarrel_kv_cache_bytes", lab, (double)m->kv_bytes);
    srv_metrics_set(ss->s->metrics, "quarrel_kv_bytes_used", lab, block_bytes * st.kv_blocks_used);
    srv_metrics_set(ss->s->metrics, "quarrel_kv_bytes_free", lab, block_bytes * st.kv_blocks_free);
    srv_metrics_set(ss->s->metrics, "quarrel_queue_depth", lab, st.queue_depth);
    srv_metrics_set(ss->s->metrics, "quarrel_requests_running", lab, st.running);
    srv_metrics_set(ss->s->metrics, "quarrel_prefix_cache_hits_total", lab, (double)st.prefix_hits);
    srv_metrics_set(ss->s->metrics, "quarrel_prefix_cache_tokens_total", lab, (double)st.prefix_tokens_reused);
    srv_metrics_set(ss->s->metrics, "quarrel_preemptions_total", lab, (double)st.preemptions);
    srv_metrics_set(ss->s->metrics, "quarrel_cancellations_total", lab, (double)st.cancelled);
    srv_metrics_set(ss->s->metrics, "quarrel_spec_draft_tokens_total", lab, (double)st.spec_drafted);
    srv_metrics_set(ss->s->metrics, "quarrel_spec_accepted_tokens_total", lab, (double)st.spec_accepted);
    srv_metrics_set(ss->s->metrics, "quarrel_spec_verifications_total", lab, (double)st.spec_steps);
    srv_metrics_set(ss->s->metrics, "quarrel_spec_acceptance_ratio", lab,
                    st.spec_drafted ? (double)st.spec_accepted / (double)st.spec_drafted : 0.0);
    const int32_t ranks = qr_model_tp(m->model);
    srv_metrics_set(ss->s->metrics, "quarrel_tp_ranks", lab, ranks);
    for (int32_t r = 0; r < ranks; r++) { /* per GPU */
        size_t fb = 0, tb = 0;
        if (!qr_model_rank_memory(m->model, r, &fb, &tb)) break;
        char rl[340];
        snprintf(rl, sizeof rl, "%s,rank=\"%d\"", lab, r);
        srv_metrics_set(ss->s->metrics, "quarrel_gpu_memory_free_bytes", rl, (double)fb);
        srv_metrics_set(ss->s->metrics, "quarrel_gpu_memory_total_bytes", rl, (double)tb);
    }
    snapshot_arch(ss, m, esc);
}

char *srv_render_metrics(qr_server *s, size_t *len) {
    sched_sum ss = {.s = s};
    srv_registry_foreach(s->reg, sum_model, &ss);
    srv_metrics_set(s->metrics, "quarrel_models_loaded", "", ss.n);
    char *txt = NULL;
    FILE *f = ss.oom ? NULL : open_memstream(&txt, len);
    if (f) {
        srv_metrics_write(s->metrics, f);
        srv_arch_metrics_render(f, ss.arch, ss.n_arch);
        const int bad = ferror(f);
        if (fclose(f) != 0 || bad) {
            free(txt);
            txt = NULL;
        }
    }
    for (int i = 0; i < ss.n_arch; i++) srv_arch_snapshot_free(ss.arch[i]);
    free(ss.arch);
    return txt;
}

int srv_h_metrics(srv_conn *rc) {
    size_t len;
    char *txt = srv_render_metrics(rc->s, &len);
    if (!txt) return srv_send_error(rc, 500, "INFERENCE_ERROR", 0, "out of memory");
    srv_send(rc, 200, "text/plain; version=0.0.4; charset=utf-8", txt, len, NULL);
    free(txt);
    return rc->status;
}

int srv_h_openapi(srv_conn *rc) {
    return srv_send(rc, 200, "application/yaml", qr_openapi_yaml, qr_openapi_yaml_len, NULL);
}
