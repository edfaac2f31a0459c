/* api_common.c — shared steps of the generation routes and the info/health routes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "model/model.h"
#include "server/api_common.h"
#include "server/chat_tools.h"
#include "util/util.h"

int srv_job_begin_req(srv_conn *rc, srv_api api, srv_gen_req *req, srv_job *j, qr_server *s, int *http_status,
                      const char **code, char *err, size_t err_len) {
    memset(j, 0, sizeof *j);
    j->t_arrival = rc ? rc->t0 : qr_time_s();
    j->req = *req;
    memset(req, 0, sizeof *req);
    const int32_t cap = s->cfg.max_tokens;
    if (cap > 0 && (j->req.max_tokens < 0 || j->req.max_tokens > cap)) j->req.max_tokens = cap;
    if (rc) {
        j->m = srv_acquire_model(rc, j->req.model, true);
        if (!j->m) goto fail_sent;
    } else {
        qr_status why = QR_ERR_NOT_FOUND;
        j->m = srv_registry_acquire(s->reg, j->req.model, true, &why, err, err_len);
        if (!j->m) {
            *http_status = srv_status_http(why, code);
            goto fail;
        }
    }
    char e[1024];
    int32_t *ids = NULL, n = 0;
    if (srv_chat_prepare(j->m, &j->req, api, e, sizeof e) < 0) {
        if (rc) srv_send_error(rc, 400, "INVALID_REQUEST", 0, "%s", e);
        else *http_status = 400, *code = "INVALID_REQUEST", snprintf(err, err_len, "%s", e);
        goto fail_release;
    }
    srv_count_features(s, &j->req);
    if (srv_build_prompt(j->m, &j->req, api, &ids, &n, e, sizeof e) < 0) {
        if (rc) srv_send_error(rc, 400, "INVALID_REQUEST", 0, "%s", e);
        else *http_status = 400, *code = "INVALID_REQUEST", snprintf(err, err_len, "%s", e);
        goto fail_release;
    }
    const qr_status st = srv_gen_start(&j->g, j->m, ids, n, &j->req, s->cfg.request_timeout_s, e, sizeof e);
    if (st != QR_OK) {
        if (rc) srv_send_status(rc, st, 2, e);
        else *http_status = srv_status_http(st, code), snprintf(err, err_len, "%s", e);
        srv_gen_close(&j->g);
        free(ids);
        goto fail_release;
    }
    j->started = true;
    return 0;
fail_release:
    srv_registry_release(s->reg, j->m, false, 0);
    j->m = NULL;
fail_sent:
    if (rc) {
        srv_gen_req_free(&j->req);
        return -1;
    }
fail:
    srv_gen_req_free(&j->req);
    return -1;
}

int srv_job_begin(srv_conn *rc, srv_api api, srv_job *j) {
    srv_gen_req req;
    char err[1024];
    if (srv_gen_req_parse(rc->body ? rc->body : "", rc->body_len, api, rc->s->cfg.max_json_depth, &req, err,
                          sizeof err) < 0) {
        srv_gen_req_free(&req);
        srv_send_error(rc, 400, "INVALID_REQUEST", 0, "%s", err);
        return -1;
    }
    return srv_job_begin_req(rc, api, &req, j, rc->s, NULL, NULL, NULL, 0);
}

void srv_job_end(srv_conn *rc, srv_job *j, qr_server *s) {
    if (j->started) {
        srv_gen_close(&j->g);
        free(j->g.prompt);
    }
    if (j->m) srv_registry_release(s->reg, j->m, j->req.has_keep_alive, j->req.keep_alive_s);
    (void)rc;
    srv_gen_req_free(&j->req);
    memset(j, 0, sizeof *j);
}

const char *srv_finish_str(const srv_ev *done) { return done->finish == QR_FINISH_LENGTH ? "length" : "stop"; }

const char *srv_done_error_code(const qr_server *s, const srv_ev *done, int *http_status) {
    switch (done->end) {
    case QR_SCHED_END_FINISHED: return NULL;
    case QR_SCHED_END_TIMEOUT: *http_status = 504; return "TIMEOUT";
    case QR_SCHED_END_CANCELLED: *http_status = 503; return atomic_load(&s->draining) ? "SHUTTING_DOWN" : "OVERLOADED";
    case QR_SCHED_END_SHUTDOWN: *http_status = 503; return "SHUTTING_DOWN";
    default: *http_status = 500; return "INFERENCE_ERROR";
    }
}

const char *srv_done_error_message(const srv_ev *done, const char *code) {
    if (done && done->error) return done->error;
    if (!strcmp(code, "TIMEOUT")) return "the request's timeout passed (--request-timeout)";
    if (!strcmp(code, "SHUTTING_DOWN")) return "the server is shutting down";
    if (!strcmp(code, "OVERLOADED")) return "the generation was cancelled (the client did not keep up)";
    return "generation ended early";
}

void srv_token_piece(const srv_model *m, int32_t id, char *buf, size_t cap) {
    int32_t n = qr_token_to_piece(m->tok, id, true, buf, cap - 1);
    if (n < 0) n = 0;
    if ((size_t)n > cap - 1) n = (int32_t)(cap - 1);
    buf[n] = 0;
}

/* ---- model info ---- */

static void param_size(uint64_t n, char *buf, size_t cap) {
    if (n >= 1000000000ull) snprintf(buf, cap, "%.1fB", n / 1e9);
    else snprintf(buf, cap, "%.0fM", n / 1e6);
}

json_t *srv_model_details(const srv_model *m) {
    char ps[32];
    param_size(m->n_params, ps, sizeof ps);
    const char *arch = qr_model_arch(m->model);
    return json_pack("{s:s, s:s, s:s, s:[s], s:s, s:s}", "parent_model", "", "format", "gguf", "family", arch,
                     "families", arch, "parameter_size", ps, "quantization_level", m->quant);
}

static void digest_of(const srv_model *m, char out[72]) {
    char hex[65];
    srv_sha256_hex(m->path, strlen(m->path), hex); /* stable id of the file (not of its content) */
    snprintf(out, 72, "sha256:%s", hex);
}

/* Whether the model's weights and cache live in device memory (a backend without host memory: the GPU). */
static bool device_resident(const srv_model *m) {
    const qr_backend *be = m->model ? qr_model_backend(m->model) : NULL;
    return be && !be->caps.host_memory;
}

static json_t *model_entry(const srv_model *m, bool ps) {
    char digest[72], mod[48];
    digest_of(m, digest);
    srv_iso_time(srv_wall_now() - (qr_time_s() - m->loaded_at), mod, sizeof mod);
    json_t *j = json_pack("{s:s, s:s, s:s, s:I, s:s, s:o}", "name", m->name, "model", m->name, "modified_at", mod,
                          "size", (json_int_t)(m->file_bytes + (ps ? m->kv_bytes : 0)), "digest", digest, "details",
                          srv_model_details(m));
    if (ps && j) {
        char exp[48];
        const double e = m->keep_alive_s < 0 ? srv_wall_now() + 10 * 365 * 86400.0
                         : m->expires_at > 0  ? m->expires_at
                                              : srv_wall_now() + m->keep_alive_s;
        srv_iso_time(e, exp, sizeof exp);
        json_object_set_new(j, "expires_at", json_string(exp));
        json_object_set_new(j, "size_vram", json_integer(device_resident(m) ? (json_int_t)(m->file_bytes + m->kv_bytes) : 0));
    }
    return j;
}

static void add_tag(void *arg, srv_model *m) { json_array_append_new(arg, model_entry(m, false)); }
static void add_ps(void *arg, srv_model *m) { json_array_append_new(arg, model_entry(m, true)); }

int srv_h_ollama_tags(srv_conn *rc) {
    json_t *a = json_array();
    srv_registry_foreach(rc->s->reg, add_tag, a);
    return srv_send_json(rc, 200, json_pack("{s:o}", "models", a));
}

int srv_h_ollama_ps(srv_conn *rc) {
    json_t *a = json_array();
    srv_registry_foreach(rc->s->reg, add_ps, a);
    return srv_send_json(rc, 200, json_pack("{s:o}", "models", a));
}

int srv_h_ollama_version(srv_conn *rc) { return srv_send_json(rc, 200, json_pack("{s:s}", "version", qr_version())); }

int srv_h_version(srv_conn *rc) {
    return srv_send_json(rc, 200, json_pack("{s:s, s:s}", "version", qr_version(), "name", "quarrel"));
}

/* {"status": "ok", "auth": whether the API needs a key}: the web UI asks for the key before its first
 * API call when auth is on. */
int srv_h_healthz(srv_conn *rc) {
    return srv_send_json(rc, 200, json_pack("{s:s, s:b}", "status", "ok", "auth", rc->s->keys != NULL));
}

int srv_h_readyz(srv_conn *rc) {
    bool alive = false;
    const int32_t n = srv_registry_count(rc->s->reg, &alive);
    const bool ready = n > 0 && alive && !atomic_load(&rc->s->draining);
    json_t *j = json_pack("{s:s, s:i, s:b}", "status", ready ? "ready" : "not ready", "models", n, "scheduler_alive",
                          alive);
    return srv_send_json(rc, ready ? 200 : 503, j);
}

/* model_info as /api/show gives it: the GGUF metadata except the large arrays (the vocabulary). */
static json_t *model_info(const srv_model *m) {
    json_t *o = json_object();
    const qr_gguf *g = qr_model_gguf(m->model);
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const qr_gguf_kv *kv = &g->kv[i];
        char key[256];
        qr_gguf_str_copy(kv->key, key, sizeof key);
        if (!strncmp(key, "tokenizer.", 10) && strcmp(key, "tokenizer.ggml.model") && strcmp(key, "tokenizer.ggml.pre"))
            continue;
        const qr_gguf_value *v = &kv->value;
        json_t *jv = NULL;
        switch (v->type) {
        case QR_GGUF_U8: case QR_GGUF_U16: case QR_GGUF_U32: case QR_GGUF_U64:
            jv = json_integer((json_int_t)v->u64);
            break;
        case QR_GGUF_I8: case QR_GGUF_I16: case QR_GGUF_I32: case QR_GGUF_I64:
            jv = json_integer((json_int_t)v->i64);
            break;
        case QR_GGUF_F32: case QR_GGUF_F64: jv = json_real(v->f64); break;
        case QR_GGUF_BOOL: jv = json_boolean(v->u64 != 0); break;
        case QR_GGUF_STRING: jv = json_stringn(v->str.data, (size_t)v->str.len); break;
        default: jv = NULL; break;
        }
        if (jv) json_object_set_new(o, key, jv);
    }
    json_object_set_new(o, "general.parameter_count", json_integer((json_int_t)m->n_params));
    return o;
}

static json_t *show_json(const srv_model *m) {
    char mod[48];
    srv_iso_time(srv_wall_now() - (qr_time_s() - m->loaded_at), mod, sizeof mod);
    json_t *caps = json_array();
    json_array_append_new(caps, json_string(m->can_generate ? "completion" : "embedding"));
    return json_pack("{s:s, s:s, s:s, s:s, s:o, s:o, s:o, s:s}", "modelfile", "", "parameters", "", "template",
                     m->tmpl_src ? m->tmpl_src : "", "license", "", "details", srv_model_details(m), "model_info",
                     model_info(m), "capabilities", caps, "modified_at", mod);
}

int srv_h_ollama_show(srv_conn *rc) {
    json_t *root;
    char err[512];
    if (srv_json_parse(rc->body ? rc->body : "", rc->body_len, rc->s->cfg.max_json_depth, &root, err, sizeof err) < 0)
        return srv_send_error(rc, 400, "INVALID_REQUEST", 0, "%s", err);
    json_t *model = json_object_get(root, "model"), *legacy = json_object_get(root, "name");
    if ((model && !json_is_string(model)) || (legacy && !json_is_string(legacy)) || (!model && !legacy)) {
        json_decref(root);
        return srv_send_error(rc, 400, "INVALID_REQUEST", 0, "'model' (or Ollama's older 'name') must be a string");
    }
    json_t *name = model ? model : legacy;
    srv_model *m = srv_acquire_model(rc, json_string_value(name), false);
    json_decref(root);
    if (!m) return rc->status;
    json_t *j = show_json(m);
    srv_registry_release(rc->s->reg, m, false, 0);
    return srv_send_json(rc, 200, j);
}

static json_t *own_model_json(const srv_model *m) {
    qr_sched_stats st;
    qr_sched_get_stats(m->sched, &st);
    return json_pack("{s:s, s:s, s:s, s:s, s:I, s:s, s:i, s:i, s:i, s:s, s:{s:I, s:I, s:I, s:s, s:s}, s:b, s:f, s:o, "
                     "s:{s:i, s:i, s:i, s:i}}",
                     "name", m->name, "path", m->path, "architecture", qr_model_arch(m->model), "backend",
                     qr_model_backend_name(m->model), "parameters", (json_int_t)m->n_params, "quantization", m->quant,
                     "context_length", m->ctx ? qr_context_n_ctx(m->ctx) : 0, "n_ctx_train",
                     qr_model_n_ctx_train(m->model), "embedding_length", qr_model_n_embd(m->model), "chat_template",
                     m->tmpl ? "yes" : "no", "memory", "weights_bytes", (json_int_t)m->file_bytes, "kv_cache_bytes",
                     (json_int_t)m->kv_bytes, "total_bytes", (json_int_t)(m->file_bytes + m->kv_bytes),
                     "kv_cache_type_k", m->kv_type_k, "kv_cache_type_v", m->kv_type_v, "can_generate", m->can_generate, "load_seconds", m->load_seconds, "details",
                     srv_model_details(m), "scheduler", "slots", st.n_seq, "running", st.running, "queue_depth",
                     st.queue_depth, "kv_blocks_free", st.kv_blocks_free);
}

static void add_own(void *arg, srv_model *m) { json_array_append_new(arg, own_model_json(m)); }

int srv_h_models(srv_conn *rc) {
    json_t *a = json_array();
    srv_registry_foreach(rc->s->reg, add_own, a);
    return srv_send_json(rc, 200, json_pack("{s:o}", "models", a));
}

/* Sends to_json(rc, m) of the loaded model named by the URL-encoded path segment name (never loads
 * one); 404 MODEL_NOT_FOUND otherwise. */
static int send_one_model(srv_conn *rc, const char *name, json_t *(*to_json)(const srv_conn *rc, const srv_model *m)) {
    char dec[1024];
    mg_url_decode(name, (int)strlen(name), dec, (int)sizeof dec, 0);
    srv_model *m = srv_acquire_model(rc, dec, false);
    if (!m) return rc->status;
    json_t *j = to_json(rc, m);
    srv_registry_release(rc->s->reg, m, false, 0);
    return srv_send_json(rc, 200, j);
}

static json_t *own_model_of(const srv_conn *rc, const srv_model *m) {
    (void)rc;
    return own_model_json(m);
}

int srv_h_model_info(srv_conn *rc, const char *name) { return send_one_model(rc, name, own_model_of); }

/* The OpenAI model object of a loaded model named name. */
static json_t *openai_model_json(const srv_conn *rc, const char *name) {
    return json_pack("{s:s, s:s, s:I, s:s}", "id", name, "object", "model", "created", (json_int_t)rc->s->started_at,
                     "owned_by", "quarrel");
}

int srv_h_openai_models(srv_conn *rc) {
    json_t *a = json_array();
    srv_registry_foreach(rc->s->reg, add_tag, a);
    json_t *data = json_array();
    size_t i;
    json_t *e;
    json_array_foreach(a, i, e) {
        json_array_append_new(data, openai_model_json(rc, json_string_value(json_object_get(e, "name"))));
    }
    json_decref(a);
    return srv_send_json(rc, 200, json_pack("{s:s, s:o}", "object", "list", "data", data));
}

static json_t *openai_model_of(const srv_conn *rc, const srv_model *m) { return openai_model_json(rc, m->name); }

int srv_h_openai_model(srv_conn *rc, const char *id) { return send_one_model(rc, id, openai_model_of); }
