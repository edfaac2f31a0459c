/* registry.c — loaded models, on-demand loading within a memory budget, keep-alive unloading. */
#include "server/registry.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "gguf/gguf.h"
#include "model/model.h"
#include "model/model_path.h"
#include "model/model_path.h"
#include "server/server.h"
#include "util/util.h"

struct srv_registry {
    pthread_mutex_t mu;
    pthread_mutex_t load_mu; /* one load at a time */
    srv_registry_opts o;
    srv_model *m[QR_SERVER_MAX_MODELS];
    int32_t n;
};

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t mem_total(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) break;
    fclose(f);
    return kb * 1024ull;
}

void srv_kv_sizing(int32_t parallel, int32_t ctx, uint64_t kv_mem_bytes, uint64_t per_tok, uint64_t f16_per_tok,
                   int32_t *n_seq, int32_t *n_ctx) {
    if (per_tok == 0) per_tok = f16_per_tok = 1;
    uint64_t mem = kv_mem_bytes;
    if (mem == 0) {
        const int64_t tokens = (int64_t)QR_N_CTX_DEFAULT * (parallel > 0 ? parallel : 4);
        mem = f16_per_tok * (uint64_t)(tokens > SRV_CTX_MAX_DEFAULT ? SRV_CTX_MAX_DEFAULT : tokens);
    }
    int64_t c = ctx > 0 ? ctx : (int64_t)(mem / per_tok) / 32 * 32;
    if (c < 32) c = 32;
    if (c > (1 << 22)) c = 1 << 22;
    *n_ctx = (int32_t)c;
    if (parallel > 0) *n_seq = parallel;
    else if (ctx > 0) *n_seq = 4;
    else {
        const int64_t s = c / QR_N_CTX_DEFAULT;
        *n_seq = (int32_t)(s < 1 ? 1 : s > 256 ? 256 : s);
    }
}

int32_t srv_gpu_parallel(uint64_t free_bytes, int32_t world, uint64_t per_tok) {
    if (per_tok == 0 || world < 1) return 0;
    const double budget = (double)free_bytes * SRV_GPU_KV_SHARE * (double)world;
    const double seqs = budget / ((double)per_tok * QR_N_CTX_DEFAULT);
    if (seqs < SRV_GPU_PARALLEL_MIN) return 0;
    return seqs >= SRV_GPU_PARALLEL ? SRV_GPU_PARALLEL : (int32_t)seqs;
}

srv_registry *srv_registry_create(const srv_registry_opts *o) {
    srv_registry *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->o = *o;
    if (!r->o.mem_budget) r->o.mem_budget = mem_total() / 10 * 8;
    pthread_mutex_init(&r->mu, NULL);
    pthread_mutex_init(&r->load_mu, NULL);
    return r;
}

static void model_free(srv_model *m) {
    if (!m) return;
    qr_sched_free(m->sched);
    qr_spec_free(m->spec); /* after the scheduler, before the contexts and models it uses */
    qr_model_free(m->draft_model);
    srv_arch_metrics_free(m->arch); /* after the scheduler thread, the only one that syncs it */
    qr_context_free(m->embed_ctx);
    qr_context_free(m->ctx);
    qr_chat_template_free(m->tmpl);
    free(m->tmpl_src);
    qr_tokenizer_free(m->tok);
    qr_model_free(m->model);
    free(m);
}

void srv_registry_free(srv_registry *r) {
    if (!r) return;
    for (int32_t i = 0; i < r->n; i++) model_free(r->m[i]);
    pthread_mutex_destroy(&r->mu);
    pthread_mutex_destroy(&r->load_mu);
    free(r);
}

/* The display name of a source: an Ollama name stays as given, a path becomes its file name
 * without ".gguf". */
static void name_of(const char *source, char *out, size_t cap) {
    struct stat st;
    if (stat(source, &st) != 0) {
        snprintf(out, cap, "%s", source);
        return;
    }
    const char *slash = strrchr(source, '/');
    snprintf(out, cap, "%s", slash ? slash + 1 : source);
    size_t n = strlen(out);
    if (n > 5 && !strcmp(out + n - 5, ".gguf")) out[n - 5] = 0;
}

/* Makes m's drafter (registry options spec_on, spec, draft_path) for its context, loading the draft model
 * with the target's backend options; a draft whose vocabulary differs is refused here, at load time. */
static qr_status spec_open(const srv_registry *r, srv_model *m, char *err, size_t err_len) {
    qr_spec_params p = r->o.spec;
    char msg[1024];
    qr_status st;
    if (r->o.draft_path) {
        char path[4096];
        qr_model_params mp = qr_model_default_params();
        mp.n_threads = r->o.n_threads;
        mp.backend = r->o.backend;
        mp.gpu = r->o.gpu;
        if ((st = qr_model_resolve_path(r->o.draft_path, path, sizeof path, msg, sizeof msg)) != QR_OK ||
            (st = qr_model_load(path, &mp, &m->draft_model, msg, sizeof msg)) != QR_OK)
            return qr_errf(err, err_len, st, "draft model: %s", msg);
        p.draft_model = m->draft_model;
        /* an EAGLE-3 head given as the draft model drafts as one */
        if (p.kind == QR_SPEC_DRAFT && !strcmp(qr_model_arch(m->draft_model), "eagle3")) p.kind = QR_SPEC_EAGLE3;
    }
    if ((st = qr_spec_create(m->ctx, &p, &m->spec, msg, sizeof msg)) != QR_OK)
        return qr_errf(err, err_len, st, "%s%s", strncmp(msg, "speculative decoding: ", 22) ? "speculative decoding: " : "",
                       msg); /* spec.c's own messages may start with it already */
    return QR_OK;
}

/* Predominant weight type (by bytes) and parameter count. */
static void weight_stats(srv_model *m) {
    const qr_gguf *g = qr_model_gguf(m->model);
    const char *tn;
    qr_model_weight_stats(g, &m->n_params, &tn);
    snprintf(m->quant, sizeof m->quant, "%s", tn);
    m->file_bytes = g->size;
}

/* Loads source into a new srv_model (no registry lock held). */
static void sync_arch_hook(void *m) { srv_model_sync_arch(m); }

static qr_status load_model(const srv_registry *r, const char *source, bool startup, srv_model **out, char *err,
                            size_t err_len) {
    *out = NULL;
    srv_model *m = calloc(1, sizeof *m);
    if (m) m->kv_type_k = m->kv_type_v = qr_cache_type_name(QR_CACHE_F16);
    if (!m) return qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory");
    const double t0 = qr_time_s();
    qr_status st;
    snprintf(m->source, sizeof m->source, "%s", source);
    name_of(source, m->name, sizeof m->name);
    if ((st = qr_model_resolve_path(source, m->path, sizeof m->path, err, err_len)) != QR_OK) {
        /* a bare name inside --model-dir */
        char alt[4096];
        struct stat sb;
        if (r->o.model_dir && !strchr(source, '/') &&
            snprintf(alt, sizeof alt, "%s/%s.gguf", r->o.model_dir, source) < (int)sizeof alt && stat(alt, &sb) == 0) {
            snprintf(m->path, sizeof m->path, "%s", alt);
        } else {
            goto fail;
        }
    }
    qr_model_params mp = qr_model_default_params();
    mp.n_threads = r->o.n_threads;
    mp.backend = r->o.backend;
    mp.gpu = r->o.gpu;
    mp.tp = r->o.tp;
    mp.split_mode = r->o.split_mode;
    memcpy(mp.tensor_split, r->o.tensor_split, sizeof mp.tensor_split);
    if (r->o.tp_addr && r->o.tp > 1) {
        if (!startup) {
            st = qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "this server's ranks in other processes (--tp-addr) run the "
                         "model it started with; another model is not loaded on demand");
            goto fail;
        }
        mp.tp_addr = r->o.tp_addr;
    }
    if ((st = qr_model_load(m->path, &mp, &m->model, err, err_len)) != QR_OK) goto fail;
    weight_stats(m);
    const qr_hparams *hp = &m->model->hp;
    m->can_generate = hp->causal;
    if ((st = qr_tokenizer_create(qr_model_gguf(m->model), &m->tok, err, err_len)) != QR_OK) goto fail;
    /* chat template */
    const char *tsrc, *builtin;
    size_t tlen;
    if (qr_model_chat_template_src(m->model, m->tok, &tsrc, &tlen, &builtin)) {
        if (builtin)
            qr_log(QR_LOG_INFO, "model '%s': no chat template in the GGUF; using the built-in '%s' template", m->name,
                   builtin);
        m->tmpl_src = malloc(tlen + 1);
        if (m->tmpl_src) {
            memcpy(m->tmpl_src, tsrc, tlen);
            m->tmpl_src[tlen] = 0;
        }
        if (qr_chat_template_parse(tsrc, tlen, &m->tmpl, err, err_len) != QR_OK) m->tmpl = NULL;
        const qr_tokenizer_info *ti = qr_tokenizer_get_info(m->tok);
        size_t len;
        const char *p;
        if (ti->special.bos >= 0 && (p = qr_token_text(m->tok, ti->special.bos, &len)))
            snprintf(m->bos, sizeof m->bos, "%.*s", (int)len, p);
        if (ti->special.eos >= 0 && (p = qr_token_text(m->tok, ti->special.eos, &len)))
            snprintf(m->eos, sizeof m->eos, "%.*s", (int)len, p);
    }
    if (m->can_generate) {
        qr_sched_params sp;
        qr_sched_params_default(&sp);
        const uint64_t per_tok = qr_model_kv_bytes_per_token(m->model, r->o.cache_type_k, r->o.cache_type_v);
        if (per_tok == 0 && hp->n_layer > 0) {
            st = qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "KV cache %s/%s: this model's heads (%d/%d values) do not "
                         "split into blocks of 32", qr_cache_type_name(r->o.cache_type_k),
                         qr_cache_type_name(r->o.cache_type_v), hp->head_dim_k, hp->head_dim_v);
            goto fail;
        }
        int32_t n_ctx, parallel = r->o.parallel;
        uint64_t kv_mem = r->o.kv_mem_bytes;
        size_t gpu_free = 0, gpu_total = 0;
        if (!parallel && !kv_mem && !r->o.ctx && !strcmp(qr_model_backend_name(m->model), "cuda") &&
            qr_model_rank_memory(m->model, 0, &gpu_free, &gpu_total) &&
            (parallel = srv_gpu_parallel(gpu_free, qr_model_tp(m->model), per_tok)) > 0) {
            /* a GPU decodes many sequences a step for little more than one: a batch that suits the device */
            kv_mem = (uint64_t)parallel * QR_N_CTX_DEFAULT * per_tok;
            qr_log(QR_LOG_INFO, "model '%s' on the GPU: --parallel %d (a KV cache of %.1f GiB for %d x %d tokens; "
                   "--parallel, --ctx or --kv-mem-mb set it)", m->name, parallel, (double)kv_mem / (1 << 30), parallel,
                   QR_N_CTX_DEFAULT);
        }
        srv_kv_sizing(parallel, r->o.ctx, kv_mem, per_tok,
                      qr_model_kv_bytes_per_token(m->model, QR_CACHE_F16, QR_CACHE_F16), &sp.n_seq, &n_ctx);
        qr_context_params cp = qr_context_default_params();
        cp.n_ctx = n_ctx;
        cp.n_seq_max = sp.n_seq;
        cp.n_threads = r->o.n_threads;
        cp.type_k = r->o.cache_type_k;
        cp.type_v = r->o.cache_type_v;
        if ((st = qr_context_create(m->model, &cp, &m->ctx, err, err_len)) != QR_OK) goto fail;
        if ((st = srv_arch_metrics_create(m->ctx, &m->arch, err, err_len)) != QR_OK) goto fail;
        m->kv_bytes = qr_context_kv_bytes(m->ctx);
        m->kv_type_k = qr_cache_type_name(r->o.cache_type_k);
        m->kv_type_v = qr_cache_type_name(r->o.cache_type_v);
        if (r->o.max_queue > 0) sp.max_queue = r->o.max_queue;
        if (r->o.prefill_chunk > 0) sp.prefill_chunk = r->o.prefill_chunk;
        sp.no_prefix_cache = r->o.no_prefix_cache;
        sp.default_timeout_s = r->o.request_timeout_s;
        if (r->o.spec_on && (st = spec_open(r, m, err, err_len)) != QR_OK) goto fail;
        sp.spec = m->spec;
        sp.step_hook = sync_arch_hook; /* the step's MoE / SSM counters, before the clients see its tokens */
        sp.step_hook_user = m;
        if ((st = qr_sched_create(m->model, m->ctx, m->tok, &sp, &m->sched, err, err_len)) != QR_OK) goto fail;
    } else {
        /* encoders: a scheduler over a one-sequence context serializes the embedding jobs */
        qr_context_params cp = qr_context_default_params();
        cp.n_ctx = qr_model_n_ctx_capped(m->model, SRV_ENCODER_CTX);
        cp.n_seq_max = SRV_EMBED_SEQS;
        cp.n_threads = r->o.n_threads;
        if ((st = qr_context_create(m->model, &cp, &m->ctx, err, err_len)) != QR_OK) goto fail;
        qr_sched_params sp;
        qr_sched_params_default(&sp);
        sp.n_seq = 1;
        sp.no_prefix_cache = true;
        if ((st = qr_sched_create(m->model, m->ctx, m->tok, &sp, &m->sched, err, err_len)) != QR_OK) goto fail;
    }
    m->load_seconds = qr_time_s() - t0;
    m->loaded_at = m->last_used = qr_time_s();
    m->keep_alive_s = r->o.keep_alive_s;
    *out = m;
    return QR_OK;
fail:
    model_free(m);
    return st;
}

void srv_model_sync_arch(srv_model *m) {
    if (!m->arch) return;
    const qr_context *const ctx[] = {m->ctx, m->embed_ctx};
    srv_arch_metrics_sync(m->arch, ctx, 2);
}

static srv_model *find_locked(srv_registry *r, const char *name) {
    if (!*name) return r->n > 0 ? r->m[0] : NULL;
    for (int32_t i = 0; i < r->n; i++)
        if (!r->m[i]->unloading && (!strcmp(r->m[i]->name, name) || !strcmp(r->m[i]->source, name) ||
                                    !strcmp(r->m[i]->path, name)))
            return r->m[i];
    /* Ollama clients add ":latest" */
    size_t n = strlen(name);
    if (n > 7 && !strcmp(name + n - 7, ":latest"))
        for (int32_t i = 0; i < r->n; i++)
            if (!r->m[i]->unloading && !strncmp(r->m[i]->name, name, n - 7) && !r->m[i]->name[n - 7]) return r->m[i];
    return NULL;
}

static void remove_at(srv_registry *r, int32_t i) {
    for (int32_t j = i; j + 1 < r->n; j++) r->m[j] = r->m[j + 1];
    r->n--;
}

qr_status srv_registry_load(srv_registry *r, const char *source, char *err, size_t err_len) {
    srv_model *m;
    qr_status st = load_model(r, source, true, &m, err, err_len);
    if (st != QR_OK) return st;
    m->keep_alive_s = -1;
    m->pinned = true;
    pthread_mutex_lock(&r->mu);
    if (r->n == QR_SERVER_MAX_MODELS) {
        pthread_mutex_unlock(&r->mu);
        model_free(m);
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "at most %d models", QR_SERVER_MAX_MODELS);
    }
    r->m[r->n++] = m;
    pthread_mutex_unlock(&r->mu);
    return QR_OK;
}

static uint64_t used_bytes_locked(const srv_registry *r) {
    uint64_t u = 0;
    for (int32_t i = 0; i < r->n; i++) u += r->m[i]->file_bytes + r->m[i]->kv_bytes;
    return u;
}

srv_model *srv_registry_acquire(srv_registry *r, const char *name, bool may_load, qr_status *why, char *err,
                                size_t err_len) {
    pthread_mutex_lock(&r->mu);
    srv_model *m = find_locked(r, name);
    if (m) {
        m->refs++;
        m->last_used = qr_time_s();
        m->expires_at = 0;
        pthread_mutex_unlock(&r->mu);
        return m;
    }
    pthread_mutex_unlock(&r->mu);
    if (!r->o.allow_load || !may_load || !*name) {
        *why = qr_errf(err, err_len, QR_ERR_NOT_FOUND, "model '%s' is not loaded", name);
        return NULL;
    }
    /* hot swap: load it (one load at a time), evicting idle on-demand models to fit the budget */
    pthread_mutex_lock(&r->load_mu);
    pthread_mutex_lock(&r->mu);
    m = find_locked(r, name); /* loaded meanwhile */
    if (m) {
        m->refs++;
        m->last_used = qr_time_s();
        pthread_mutex_unlock(&r->mu);
        pthread_mutex_unlock(&r->load_mu);
        return m;
    }
    pthread_mutex_unlock(&r->mu);
    srv_model *nm;
    char lerr[512];
    if (load_model(r, name, false, &nm, lerr, sizeof lerr) != QR_OK) {
        pthread_mutex_unlock(&r->load_mu);
        *why = qr_errf(err, err_len, QR_ERR_NOT_FOUND, "model '%s' not found: %s", name, lerr);
        return NULL;
    }
    srv_model *evict[QR_SERVER_MAX_MODELS];
    int32_t n_evict = 0;
    pthread_mutex_lock(&r->mu);
    const uint64_t need = nm->file_bytes + nm->kv_bytes;
    /* evict idle, unpinned models, least recently used first */
    while (used_bytes_locked(r) + need > r->o.mem_budget || r->n == QR_SERVER_MAX_MODELS) {
        int32_t v = -1;
        for (int32_t i = 0; i < r->n; i++)
            if (r->m[i]->refs == 0 && !r->m[i]->pinned && (v < 0 || r->m[i]->last_used < r->m[v]->last_used))
                v = i;
        if (v < 0) break;
        evict[n_evict++] = r->m[v];
        remove_at(r, v);
    }
    if (used_bytes_locked(r) + need > r->o.mem_budget || r->n == QR_SERVER_MAX_MODELS) {
        const uint64_t used = used_bytes_locked(r);
        pthread_mutex_unlock(&r->mu);
        pthread_mutex_unlock(&r->load_mu);
        *why = qr_errf(err, err_len, QR_ERR_BUSY,
                "model '%s' needs %.1f MiB but %.1f MiB of the %.1f MiB budget are held by busy or pinned models",
                name, need / 1048576.0, used / 1048576.0, r->o.mem_budget / 1048576.0);
        model_free(nm);
        for (int32_t i = 0; i < n_evict; i++) model_free(evict[i]);
        return NULL;
    }
    snprintf(nm->name, sizeof nm->name, "%s", name);
    nm->refs = 1;
    r->m[r->n++] = nm;
    pthread_mutex_unlock(&r->mu);
    pthread_mutex_unlock(&r->load_mu);
    for (int32_t i = 0; i < n_evict; i++) {
        qr_log(QR_LOG_INFO, "unloaded model %s to make room for %s", evict[i]->name, name);
        model_free(evict[i]);
    }
    return nm;
}

void srv_registry_release(srv_registry *r, srv_model *m, bool has_keep_alive, double keep_alive_s) {
    pthread_mutex_lock(&r->mu);
    m->refs--;
    m->last_used = qr_time_s();
    if (has_keep_alive && !m->pinned) m->keep_alive_s = keep_alive_s;
    m->expires_at = m->keep_alive_s >= 0 ? wall_now() + m->keep_alive_s : 0;
    pthread_mutex_unlock(&r->mu);
    if (has_keep_alive && keep_alive_s == 0 && !m->pinned) srv_registry_tick(r);
}

void srv_registry_tick(srv_registry *r) {
    srv_model *dead[QR_SERVER_MAX_MODELS];
    int32_t n_dead = 0;
    const double now = qr_time_s();
    pthread_mutex_lock(&r->mu);
    for (int32_t i = 0; i < r->n;) {
        srv_model *m = r->m[i];
        if (m->refs == 0 && !m->pinned && m->keep_alive_s >= 0 && now - m->last_used >= m->keep_alive_s) {
            dead[n_dead++] = m;
            remove_at(r, i);
        } else {
            i++;
        }
    }
    pthread_mutex_unlock(&r->mu);
    for (int32_t i = 0; i < n_dead; i++) {
        qr_log(QR_LOG_INFO, "model %s unloaded (keep_alive passed)", dead[i]->name);
        model_free(dead[i]);
    }
}

int srv_registry_unload(srv_registry *r, const char *name) {
    pthread_mutex_lock(&r->mu);
    srv_model *m = find_locked(r, name);
    if (!m || m->refs > 0) {
        pthread_mutex_unlock(&r->mu);
        return -1;
    }
    for (int32_t i = 0; i < r->n; i++)
        if (r->m[i] == m) remove_at(r, i);
    pthread_mutex_unlock(&r->mu);
    model_free(m);
    return 0;
}

void srv_registry_foreach(srv_registry *r, void (*fn)(void *arg, srv_model *m), void *arg) {
    pthread_mutex_lock(&r->mu);
    for (int32_t i = 0; i < r->n; i++) fn(arg, r->m[i]);
    pthread_mutex_unlock(&r->mu);
}

int32_t srv_registry_count(srv_registry *r, bool *all_alive) {
    pthread_mutex_lock(&r->mu);
    bool alive = true;
    for (int32_t i = 0; i < r->n; i++) {
        qr_sched_stats st;
        qr_sched_get_stats(r->m[i]->sched, &st);
        alive = alive && st.alive;
    }
    const int32_t n = r->n;
    pthread_mutex_unlock(&r->mu);
    if (all_alive) *all_alive = alive;
    return n;
}

int32_t srv_registry_drain(srv_registry *r, double timeout_s) {
    pthread_mutex_lock(&r->mu);
    srv_model *ms[QR_SERVER_MAX_MODELS];
    const int32_t n = r->n;
    for (int32_t i = 0; i < n; i++) ms[i] = r->m[i];
    pthread_mutex_unlock(&r->mu);
    int32_t left = 0;
    const double end = qr_time_s() + timeout_s;
    for (int32_t i = 0; i < n; i++) {
        double rem = end - qr_time_s();
        left += qr_sched_drain(ms[i]->sched, rem > 0 ? rem : 0);
    }
    return left;
}

int srv_tokenize(const srv_model *m, const char *text, size_t len, bool add_special, bool parse_special,
                 int32_t **ids, size_t *n) {
    size_t need = 0;
    *ids = NULL;
    if (qr_tokenize(m->tok, text, len, add_special, parse_special, NULL, 0, &need) != QR_OK) return -1;
    *ids = malloc((need ? need : 1) * sizeof **ids);
    if (!*ids) return -1;
    if (qr_tokenize(m->tok, text, len, add_special, parse_special, *ids, need, n) != QR_OK) {
        free(*ids);
        *ids = NULL;
        return -1;
    }
    return 0;
}

int srv_render_chat(const srv_model *m, const void *messages_json, const void *tools, const void *extra, char **out,
                    char *err, size_t err_len) {
    if (!m->tmpl) {
        qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "model '%s' has no chat template", m->name);
        return -1;
    }
    /* content parts ([{type: text, text}]) become one string, as the templates expect; role "developer"
     * becomes "system" */
    json_t *msgs = json_deep_copy((const json_t *)messages_json);
    if (!msgs) {
        qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory");
        return -1;
    }
    size_t i;
    json_t *msg;
    json_array_foreach(msgs, i, msg) {
        /* OpenAI's "developer" is the system message of newer models; chat templates know "system" */
        const char *role = json_string_value(json_object_get(msg, "role"));
        if (role && !strcmp(role, "developer")) json_object_set_new(msg, "role", json_string("system"));
        json_t *c = json_object_get(msg, "content");
        if (json_is_array(c)) {
            size_t total = 0, k;
            json_t *part;
            json_array_foreach(c, k, part) total += json_string_length(json_object_get(part, "text"));
            char *buf = malloc(total + 1);
            if (!buf) continue;
            size_t off = 0;
            json_array_foreach(c, k, part) {
                json_t *t = json_object_get(part, "text");
                memcpy(buf + off, json_string_value(t), json_string_length(t));
                off += json_string_length(t);
            }
            json_object_set_new(msg, "content", json_stringn_nocheck(buf, off));
            free(buf);
        } else if (!c || json_is_null(c)) {
            json_object_set_new(msg, "content", json_string(""));
        }
    }
    qr_chat_options opt = {0};
    opt.add_generation_prompt = true;
    opt.bos_token = m->bos;
    opt.eos_token = m->eos;
    opt.tools = tools;
    opt.extra = extra;
    size_t out_len;
    qr_status st = qr_chat_template_render(m->tmpl, msgs, &opt, out, &out_len, err, err_len);
    json_decref(msgs);
    return st == QR_OK ? 0 : -1;
}

void srv_registry_cancel_all(srv_registry *r) {
    pthread_mutex_lock(&r->mu);
    for (int32_t i = 0; i < r->n; i++) qr_sched_cancel_all(r->m[i]->sched);
    pthread_mutex_unlock(&r->mu);
}
