/* cmd_push.c — `quarrel push` and `quarrel search` against Longbow over Arrow Flight.
 *
 * push is a two-stage pipeline: a producer thread embeds the texts, `--batch` rows at a time, into
 * Arrow record batches (id int64, vector FixedSizeList<float32, dim>, text utf8, metadata utf8) and
 * hands them over a bounded queue (QUEUE_CAP batches, so memory stays bounded however slow the
 * server is) to the main thread, which streams them in one DoPut while the model computes the next
 * ones; then it waits for the dataset to be READY. Ids come from the input (embed_io.h), so a
 * re-run upserts the same rows; --resume first scans the ids already stored and skips them. */
#include <getopt.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "embed_io.h"
#include "internal.h" /* the Arrow Flight client and its embedding record batches */

#define QUEUE_CAP 4 /* record batches between the embedding thread and the Flight stream */

/* "grpc://host:port" (or grpc+tcp://, or a bare host:port) -> "host:port"; grpc+tls:// sets *tls. */
static const char *parse_target(const char *uri, bool *tls) {
    static const char *const plain[] = {"grpc://", "grpc+tcp://"};
    for (int i = 0; i < 2; i++)
        if (!strncmp(uri, plain[i], strlen(plain[i]))) return uri + strlen(plain[i]);
    if (!strncmp(uri, "grpc+tls://", 11)) {
        *tls = true;
        return uri + 11;
    }
    return strstr(uri, "://") ? NULL : uri;
}

/* timeout_ms: the deadline of each call (< 0: none, for a DoPut that lasts as long as the embedding). */
static int open_client(const char *cmd, const char *flight, const char *meta, int64_t timeout_ms,
                       qr_flight_client **out) {
    bool tls = false, tls2 = false;
    const char *data = parse_target(flight, &tls), *mt = meta ? parse_target(meta, &tls2) : NULL;
    if (!data || !*data || (meta && (!mt || !*mt))) {
        fprintf(stderr, "%s: bad Flight address '%s' (expected grpc://HOST:PORT)\n", cmd, !data || !*data ? flight : meta);
        return 2;
    }
    qr_flight_options o;
    qr_flight_options_init(&o);
    o.data_target = data;
    o.meta_target = mt;
    o.tls = tls || tls2;
    o.timeout_ms = timeout_ms;
    char err[512];
    if (qr_flight_client_create(&o, out, err, sizeof err) != QR_OK) {
        fprintf(stderr, "%s: %s\n", cmd, err);
        return 1;
    }
    return 0;
}

/* ---- the ids already stored (--resume) ---- */

typedef struct id_set {
    int64_t *ids;
    size_t n, cap;
} id_set;

static qr_status collect_ids(void *user, const qr_arrow_schema *schema, const qr_arrow_batch *b, char *err,
                             size_t err_len) {
    id_set *s = user;
    const int col = qr_arrow_schema_find(schema, "id");
    if (col < 0 || (schema->fields[col].type != QR_ARROW_INT64 && schema->fields[col].type != QR_ARROW_UINT64))
        return qr_errf(err, err_len, QR_ERR_FORMAT, "the stored dataset has no int64 id column");
    if (s->n + (size_t)b->length > s->cap) {
        size_t nc = (s->n + (size_t)b->length) * 2;
        int64_t *ni = realloc(s->ids, nc * sizeof(int64_t));
        if (!ni) return qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory");
        s->ids = ni;
        s->cap = nc;
    }
    memcpy(s->ids + s->n, b->columns[col].values, (size_t)b->length * sizeof(int64_t));
    s->n += (size_t)b->length;
    return QR_OK;
}

static int cmp_i64(const void *a, const void *b) {
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* ---- the pipeline ---- */

typedef struct pipeline {
    /* inputs */
    app_engine *e;
    const embed_texts *texts;
    const int64_t *todo;   /* [n_todo] indexes of the texts to push */
    int64_t n_todo;
    int32_t batch;         /* rows per record batch */
    qr_embed_params ep;
    int32_t dim;
    /* queue of filled batches */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    qr_embed_batch *q[QUEUE_CAP];
    int q_head, q_len;
    bool done;             /* producer finished (or failed) */
    bool cancel;           /* consumer gave up: producer stops */
    qr_status prod_status;
    char prod_err[1024];
    /* consumer */
    qr_embed_batch *current; /* the batch handed to the Flight stream last */
    int64_t rows_sent;
    double t0, embed_s;
    bool tty; /* stderr is a terminal: a progress bar */
} pipeline;

static void *producer(void *arg) {
    pipeline *p = arg;
    const int64_t dim = p->dim;
    float *vec = malloc((size_t)p->batch * (size_t)dim * sizeof(float));
    const char **tx = malloc((size_t)p->batch * sizeof(char *));
    qr_status st = vec && tx ? QR_OK : QR_ERR_NOMEM;
    if (st != QR_OK) snprintf(p->prod_err, sizeof p->prod_err, "out of memory");
    for (int64_t i0 = 0; st == QR_OK && i0 < p->n_todo; i0 += p->batch) {
        const int32_t nb = (int32_t)(p->n_todo - i0 < p->batch ? p->n_todo - i0 : p->batch);
        for (int32_t j = 0; j < nb; j++) tx[j] = p->texts->text[p->todo[i0 + j]];
        const double t = app_time_s();
        st = qr_embed(p->e->ctx, tx, nb, &p->ep, vec, p->prod_err, sizeof p->prod_err);
        p->embed_s += app_time_s() - t;
        if (st != QR_OK) break;
        qr_embed_batch *b = NULL;
        st = qr_embed_batch_create(p->dim, nb, true, true, &b);
        for (int32_t j = 0; st == QR_OK && j < nb; j++) {
            const int64_t k = p->todo[i0 + j];
            st = qr_embed_batch_append(b, p->texts->id[k], vec + (int64_t)j * dim, p->texts->text[k],
                                       p->texts->metadata[k]);
        }
        if (st != QR_OK) {
            snprintf(p->prod_err, sizeof p->prod_err, "cannot build a record batch (%s)", qr_status_str(st));
            qr_embed_batch_free(b);
            break;
        }
        pthread_mutex_lock(&p->mu);
        while (p->q_len == QUEUE_CAP && !p->cancel) pthread_cond_wait(&p->cv, &p->mu);
        if (p->cancel) {
            pthread_mutex_unlock(&p->mu);
            qr_embed_batch_free(b);
            break;
        }
        p->q[(p->q_head + p->q_len++) % QUEUE_CAP] = b;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    free(vec);
    free(tx);
    pthread_mutex_lock(&p->mu);
    p->prod_status = st;
    p->done = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* qr_flight_batch_source: the next filled batch (the previous one is freed), NULL at the end. */
static qr_status next_batch(void *user, const qr_arrow_batch **out, char *err, size_t err_len) {
    pipeline *p = user;
    qr_embed_batch_free(p->current);
    p->current = NULL;
    pthread_mutex_lock(&p->mu);
    while (p->q_len == 0 && !p->done) pthread_cond_wait(&p->cv, &p->mu);
    if (p->q_len > 0) {
        p->current = p->q[p->q_head];
        p->q_head = (p->q_head + 1) % QUEUE_CAP;
        p->q_len--;
        pthread_cond_broadcast(&p->cv);
    }
    const qr_status pst = p->prod_status;
    pthread_mutex_unlock(&p->mu);
    if (!p->current) {
        *out = NULL;
        if (pst != QR_OK) return qr_errf(err, err_len, pst, "embedding failed: %s", p->prod_err);
        return QR_OK;
    }
    p->rows_sent += qr_embed_batch_rows(p->current);
    if (p->tty) app_progress_draw("push", (uint64_t)p->rows_sent, (uint64_t)p->n_todo, "rows"); /* a terminal only */
    *out = qr_embed_batch_view(p->current);
    return QR_OK;
}

static void push_usage(FILE *f) {
    fprintf(f, "usage: quarrel push -m MODEL --flight grpc://HOST:3000 [--meta grpc://HOST:3001] --dataset NAME\n"
               "                    -f texts.jsonl [--batch 256] [--metric cosine] [--resume]\n"
               "Embeds each JSON line ({\"text\", \"id\"?, \"metadata\"?}) and streams the rows (id, vector, text,\n"
               "metadata) to the dataset, embedding the next batch while the last one is sent.\n"
               "  --batch N        rows per record batch (default 256)\n"
               "  --metric M       cosine (default), euclidean or dot_product (schema metadata)\n"
               "  --resume         skip the ids the dataset already holds\n"
               "  --no-normalize, --pooling P, --no-truncate, -t N   as for `quarrel embed`\n"
               "  --wait-ms N      how long to wait for the dataset to become READY (default 60000)\n");
}

int cmd_push(int argc, char **argv) {
    static const struct option longopts[] = {
        {"model", 1, 0, 'm'},   {"flight", 1, 0, 'F'}, {"meta", 1, 0, 'M'},         {"dataset", 1, 0, 'd'},
        {"file", 1, 0, 'f'},    {"batch", 1, 0, 'b'},  {"metric", 1, 0, 'c'},       {"resume", 0, 0, 'r'},
        {"threads", 1, 0, 't'}, {"pooling", 1, 0, 'P'}, {"no-normalize", 0, 0, 'n'}, {"normalize", 0, 0, 'N'},
        {"no-truncate", 0, 0, 'U'}, {"truncate", 0, 0, 'T'}, {"wait-ms", 1, 0, 'w'}, {"help", 0, 0, 'h'},
        {0, 0, 0, 0}};
    const char *model = NULL, *flight = NULL, *meta = NULL, *dataset = NULL, *file = NULL, *metric = "cosine";
    int32_t batch = 256, n_threads = 0, wait_ms = 60000;
    bool resume = false;
    qr_embed_params ep = qr_embed_default_params();
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:d:f:t:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'F': flight = optarg; break;
        case 'M': meta = optarg; break;
        case 'd': dataset = optarg; break;
        case 'f': file = optarg; break;
        case 'b':
            if (app_parse_int("--batch", optarg, 1, 1 << 20, &batch)) return 2;
            break;
        case 'c': metric = optarg; break;
        case 'r': resume = true; break;
        case 't':
            if (app_parse_int("--threads", optarg, 1, 1024, &n_threads)) return 2;
            break;
        case 'w':
            if (app_parse_int("--wait-ms", optarg, 0, 1 << 30, &wait_ms)) return 2;
            break;
        case 'P': {
            int pl = embed_parse_pooling(optarg);
            if (pl == -2) {
                fprintf(stderr, "push: --pooling: expected model, mean, cls or last\n");
                return 2;
            }
            ep.pooling = (qr_pooling)pl;
            break;
        }
        case 'n': ep.normalize = false; break;
        case 'N': ep.normalize = true; break;
        case 'U': ep.truncate = false; break;
        case 'T': ep.truncate = true; break;
        case 'h': push_usage(stdout); return 0;
        default: push_usage(stderr); return 2;
        }
    }
    if (optind < argc || !model || !flight || !dataset || !file) {
        fprintf(stderr, "push: -m MODEL, --flight URI, --dataset NAME and -f FILE are required\n");
        push_usage(stderr);
        return 2;
    }
    if (strcmp(metric, "cosine") && strcmp(metric, "euclidean") && strcmp(metric, "dot_product")) {
        fprintf(stderr, "push: --metric must be cosine, euclidean or dot_product\n");
        return 2;
    }
    qr_flight_client *fc = NULL;
    int rc = open_client("push", flight, meta, -1, &fc);
    if (rc) return rc;
    embed_texts texts;
    if (embed_texts_read("push", file, &texts)) {
        qr_flight_client_free(fc);
        return 1;
    }
    char err[1024];
    int64_t *todo = malloc((size_t)texts.n * sizeof(int64_t));
    int64_t n_todo = 0, skipped = 0;
    id_set have = {0};
    app_engine e = {0};
    pipeline p = {0};
    bool engine_open = false, thread_started = false;
    qr_arrow_schema schema;
    qr_arrow_schema_init(&schema);
    if (!todo) {
        fprintf(stderr, "push: out of memory\n");
        rc = 1;
        goto done;
    }
    if (resume) {
        if (qr_flight_scan(fc, dataset, NULL, collect_ids, &have, NULL, err, sizeof err) != QR_OK) {
            if (qr_flight_last_grpc_status(fc) != 5 /* NOT_FOUND: a new dataset */) {
                fprintf(stderr, "push: --resume: cannot read the ids of dataset %s: %s\n", dataset, err);
                rc = 1;
                goto done;
            }
            have.n = 0;
        }
        qsort(have.ids, have.n, sizeof(int64_t), cmp_i64);
    }
    for (int64_t i = 0; i < texts.n; i++) {
        if (have.n && bsearch(&texts.id[i], have.ids, have.n, sizeof(int64_t), cmp_i64)) {
            skipped++;
            continue;
        }
        todo[n_todo++] = i;
    }
    if (resume) fprintf(stderr, "push: --resume: %lld of %lld rows already stored\n", (long long)skipped, (long long)texts.n);
    const int32_t n_seq = batch < 256 ? batch : 256;
    if ((rc = embed_engine_open(&e, model, n_threads, 2048, n_seq))) goto done;
    engine_open = true;
    p.dim = qr_model_n_embd_out(e.model);
    {
        qr_embed_batch *tmpl = NULL;
        qr_status st = qr_embed_batch_create(p.dim, 1, true, true, &tmpl);
        if (st == QR_OK) st = qr_embed_batch_schema(tmpl, metric, &schema);
        qr_embed_batch_free(tmpl);
        if (st != QR_OK) {
            fprintf(stderr, "push: cannot build the schema (%s)\n", qr_status_str(st));
            rc = 1;
            goto done;
        }
    }
    p.e = &e;
    p.texts = &texts;
    p.todo = todo;
    p.n_todo = n_todo;
    p.batch = batch;
    p.ep = ep;
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.cv, NULL);
    p.t0 = app_time_s();
    p.tty = isatty(STDERR_FILENO);
    if (n_todo > 0) {
        pthread_t th;
        if (pthread_create(&th, NULL, producer, &p) != 0) {
            fprintf(stderr, "push: cannot start the embedding thread\n");
            rc = 1;
            goto done_sync;
        }
        thread_started = true;
        qr_flight_put_stats ps = {0};
        qr_status st = qr_flight_put(fc, dataset, &schema, next_batch, NULL, &p, &ps, err, sizeof err);
        if (p.tty) fprintf(stderr, "\r\033[K");
        pthread_mutex_lock(&p.mu);
        p.cancel = true;
        pthread_cond_broadcast(&p.cv);
        pthread_mutex_unlock(&p.mu);
        pthread_join(th, NULL);
        qr_embed_batch_free(p.current);
        p.current = NULL;
        for (int i = 0; i < p.q_len; i++) qr_embed_batch_free(p.q[(p.q_head + i) % QUEUE_CAP]);
        p.q_len = 0;
        if (st != QR_OK) {
            fprintf(stderr, "push: %s (gRPC %s); %lld rows were sent; re-run with --resume to continue\n", err,
                    qr_flight_grpc_status_name(qr_flight_last_grpc_status(fc)), (long long)p.rows_sent);
            rc = 1;
            goto done_sync;
        }
        if (ps.slow_downs) fprintf(stderr, "push: server asked to slow down %lld times (%.2f s backoff)\n",
                                   (long long)ps.slow_downs, ps.backoff_s);
    }
    if (qr_flight_wait_ready(fc, dataset, wait_ms, 50, err, sizeof err) != QR_OK) {
        fprintf(stderr, "push: rows sent, but the dataset is not ready: %s\n", err);
        rc = 1;
        goto done_sync;
    }
    {
        const double dt = app_time_s() - p.t0;
        fprintf(stderr, "push: %lld rows (%lld skipped), dim %d, %.2f s, %.1f rows/s (embedding %.2f s)\n",
                (long long)p.rows_sent, (long long)skipped, p.dim, dt, dt > 0 ? (double)p.rows_sent / dt : 0.0,
                p.embed_s);
    }
done_sync:
    pthread_cond_destroy(&p.cv);
    pthread_mutex_destroy(&p.mu);
    (void)thread_started;
done:
    qr_arrow_schema_free(&schema);
    if (engine_open) app_engine_close(&e);
    free(have.ids);
    free(todo);
    embed_texts_free(&texts);
    qr_flight_client_free(fc);
    return rc;
}

/* ---- search ---- */

typedef struct text_lookup {
    char *text; /* the first row's text, malloc'ed */
} text_lookup;

static qr_status take_text(void *user, const qr_arrow_schema *schema, const qr_arrow_batch *b, char *err,
                           size_t err_len) {
    text_lookup *t = user;
    const int col = qr_arrow_schema_find(schema, "text");
    if (t->text || col < 0 || schema->fields[col].type != QR_ARROW_UTF8 || b->length < 1) return QR_OK;
    const qr_arrow_array *a = &b->columns[col];
    const size_t n = (size_t)(a->offsets[1] - a->offsets[0]);
    t->text = malloc(n + 1);
    if (!t->text) return qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory");
    memcpy(t->text, (const char *)a->values + a->offsets[0], n);
    t->text[n] = 0;
    return QR_OK;
}

static void search_usage(FILE *f) {
    fprintf(f, "usage: quarrel search --flight grpc://HOST:3000 --dataset NAME -m MODEL -p QUERY [-k 5]\n"
               "Embeds the query (as push embeds texts) and prints the k nearest rows: id, score, text.\n"
               "  --json           one JSON object per hit instead of tab-separated lines\n"
               "  --no-normalize, --pooling P, -t N   as for `quarrel embed`\n");
}

int cmd_search(int argc, char **argv) {
    static const struct option longopts[] = {
        {"model", 1, 0, 'm'},   {"flight", 1, 0, 'F'},  {"meta", 1, 0, 'M'},          {"dataset", 1, 0, 'd'},
        {"prompt", 1, 0, 'p'},  {"top-k", 1, 0, 'k'},   {"threads", 1, 0, 't'},       {"pooling", 1, 0, 'P'},
        {"no-normalize", 0, 0, 'n'}, {"json", 0, 0, 'J'}, {"help", 0, 0, 'h'},        {0, 0, 0, 0}};
    const char *model = NULL, *flight = NULL, *meta = NULL, *dataset = NULL, *query = NULL;
    int32_t k = 5, n_threads = 0;
    bool json = false;
    qr_embed_params ep = qr_embed_default_params();
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:d:p:k:t:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'F': flight = optarg; break;
        case 'M': meta = optarg; break;
        case 'd': dataset = optarg; break;
        case 'p': query = optarg; break;
        case 'k':
            if (app_parse_int("-k", optarg, 1, 100000, &k)) return 2;
            break;
        case 't':
            if (app_parse_int("--threads", optarg, 1, 1024, &n_threads)) return 2;
            break;
        case 'P': {
            int pl = embed_parse_pooling(optarg);
            if (pl == -2) {
                fprintf(stderr, "search: --pooling: expected model, mean, cls or last\n");
                return 2;
            }
            ep.pooling = (qr_pooling)pl;
            break;
        }
        case 'n': ep.normalize = false; break;
        case 'J': json = true; break;
        case 'h': search_usage(stdout); return 0;
        default: search_usage(stderr); return 2;
        }
    }
    if (optind < argc || !model || !flight || !dataset || !query) {
        fprintf(stderr, "search: --flight URI, --dataset NAME, -m MODEL and -p QUERY are required\n");
        search_usage(stderr);
        return 2;
    }
    qr_flight_client *fc = NULL;
    int rc = open_client("search", flight, meta, 0, &fc);
    if (rc) return rc;
    app_engine e;
    if ((rc = embed_engine_open(&e, model, n_threads, 2048, 1))) {
        qr_flight_client_free(fc);
        return rc;
    }
    const int32_t dim = qr_model_n_embd_out(e.model);
    float *vec = malloc((size_t)dim * sizeof(float));
    char err[1024];
    qr_flight_hit *hits = NULL;
    size_t n_hits = 0;
    if (!vec || qr_embed(e.ctx, &query, 1, &ep, vec, err, sizeof err) != QR_OK) {
        fprintf(stderr, "search: %s\n", vec ? err : "out of memory");
        rc = 1;
    } else if (qr_flight_search(fc, dataset, vec, dim, k, &hits, &n_hits, err, sizeof err) != QR_OK) {
        fprintf(stderr, "search: %s\n", err);
        rc = 1;
    }
    for (size_t i = 0; rc == 0 && i < n_hits; i++) {
        char filt[128];
        snprintf(filt, sizeof filt, "[{\"field\": \"id\", \"op\": \"==\", \"value\": %llu}]", (unsigned long long)hits[i].id);
        text_lookup t = {0};
        if (qr_flight_scan(fc, dataset, filt, take_text, &t, NULL, err, sizeof err) != QR_OK) {
            fprintf(stderr, "search: cannot read the text of id %llu: %s\n", (unsigned long long)hits[i].id, err);
            rc = 1;
        }
        const char *text = t.text ? t.text : "";
        if (json) {
            json_t *o = json_pack("{s:I, s:f, s:s}", "id", (json_int_t)hits[i].id, "score", (double)hits[i].score, "text", text);
            char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
            if (s) printf("%s\n", s);
            free(s);
            json_decref(o);
        } else {
            printf("%llu\t%.6f\t%s\n", (unsigned long long)hits[i].id, (double)hits[i].score, text);
        }
        free(t.text);
    }
    free(hits);
    free(vec);
    app_engine_close(&e);
    qr_flight_client_free(fc);
    return rc;
}
