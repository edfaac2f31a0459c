/* cmd_push.c — `quarrel push` and `quarrel search` against Longbow over Arrow Flight.
 *
 * push is a two-stage pipeline: a producer thread embeds the texts, `--batch` rows at a time, into
 * Arrow record batches (id int64, vector FixedSizeList<float32, dim>, text utf8, metadata utf8) and
 * hands them over a bounded queue (QUEUE_CAP batches, so memory stays bounded however slow the
 * server is) to the main thread, which streams them in one DoPut while the model computes the next
 * ones; then it waits for the dataset to be READY. Ids come from the input (embed_io.h).
 *
 * Before anything is embedded, push checks what can fail without the vectors: the URIs (a port
 * outside 1..65535 is a usage error), that the server answers (check_readiness: unreachable, and a
 * refused API key, each get their own message), that the dataset is READY (a dataset still
 * ingesting is waited for, up to --wait-ms), and that a stored dataset's schema is the one this push
 * would write. It then reads the ids the dataset already holds (a DoGet scan filtered to the input's
 * id range, through the store's own read path) and sends only the rows whose id is new, so a plain
 * re-push of the same input sends nothing, even to a store that appends (docs/operations.md: what is
 * and is not idempotent). --send-all skips that read. */
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

#define CHECK_TIMEOUT_MS 10000 /* deadline of each call made before the embedding starts */

/* The API key: --flight-key, else $QUARREL_FLIGHT_KEY, else NULL. Never printed. */
static const char *flight_key(const char *opt) {
    if (opt) return *opt ? opt : NULL;
    const char *env = qr_knob_str(QR_KNOB_FLIGHT_KEY);
    return *env ? env : NULL;
}

/* Opens a client for the --flight (and --meta) URIs, validated (exit code 2 when malformed).
 * timeout_ms: the deadline of each call (< 0: none, for a DoPut that lasts as long as the embedding). */
static int open_client(const char *cmd, const char *flight, const char *meta, int64_t timeout_ms, const char *key,
                       qr_flight_client **out) {
    bool tls = false, tls2 = false;
    char data[512], mt[512], err[512];
    if (qr_flight_parse_uri(flight, data, sizeof data, &tls, err, sizeof err) != QR_OK ||
        (meta && qr_flight_parse_uri(meta, mt, sizeof mt, &tls2, err, sizeof err) != QR_OK)) {
        fprintf(stderr, "%s: %s\n", cmd, err);
        return 2;
    }
    qr_flight_options o;
    qr_flight_options_init(&o);
    o.data_target = data;
    o.meta_target = meta ? mt : NULL;
    o.tls = tls || tls2;
    o.timeout_ms = timeout_ms;
    o.bearer_token = key;
    if (qr_flight_client_create(&o, out, err, sizeof err) != QR_OK) {
        fprintf(stderr, "%s: %s\n", cmd, err);
        return 1;
    }
    return 0;
}

/* ---- the ids already stored ---- */

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

/* (id, line) pairs: by id, then line. */
static int cmp_i64_pair(const void *a, const void *b) {
    const int c = cmp_i64(a, b);
    return c ? c : cmp_i64((const int64_t *)a + 1, (const int64_t *)b + 1);
}

/* dup[i] (malloc'ed) is true when line i's id already appeared on an earlier line; NULL when out of memory. */
static bool *repeated_lines(const embed_texts *t) {
    int64_t *order = malloc((size_t)t->n * 2 * sizeof(int64_t));
    bool *dup = calloc((size_t)t->n, sizeof(bool));
    if (order && dup) {
        for (int64_t i = 0; i < t->n; i++) order[2 * i] = t->id[i], order[2 * i + 1] = i;
        qsort(order, (size_t)t->n, 2 * sizeof(int64_t), cmp_i64_pair);
        for (int64_t k = 1; k < t->n; k++)
            if (order[2 * k] == order[2 * k - 2]) dup[order[2 * k + 1]] = true;
    } else {
        free(dup);
        dup = NULL;
    }
    free(order);
    return dup;
}

/* ---- checks before the embedding ---- */

/* Prints why a call to the server failed, by its gRPC status: unreachable, a refused key, or else. */
static void print_call_error(const char *cmd, qr_flight_client *fc, const char *flight, const char *what,
                             const char *err, bool have_key) {
    const int g = qr_flight_last_grpc_status(fc);
    if (g == 14 /* UNAVAILABLE */ || g == 4 /* DEADLINE_EXCEEDED */)
        fprintf(stderr, "%s: cannot reach the Flight server at %s (%s): %s\n", cmd, flight,
                qr_flight_grpc_status_name(g), err);
    else if (g == 16 /* UNAUTHENTICATED */ || g == 7 /* PERMISSION_DENIED */)
        fprintf(stderr, "%s: the Flight server at %s refused %s (%s): %s\n", cmd, flight,
                have_key ? "the API key (--flight-key / QUARREL_FLIGHT_KEY)"
                         : "the call: it needs an API key (--flight-key or QUARREL_FLIGHT_KEY)",
                qr_flight_grpc_status_name(g), err);
    else
        fprintf(stderr, "%s: %s failed (gRPC %s): %s\n", cmd, what, qr_flight_grpc_status_name(g), err);
}

/* Field names and types (list sizes and child types included) equal, in order; nullability and
 * metadata are not compared. */
static bool same_columns(const qr_arrow_schema *a, const qr_arrow_schema *b) {
    if (a->n_fields != b->n_fields) return false;
    for (size_t i = 0; i < a->n_fields; i++) {
        const qr_arrow_field *x = &a->fields[i], *y = &b->fields[i];
        if (strcmp(x->name, y->name) || x->type != y->type || x->list_size != y->list_size) return false;
        if ((x->child == NULL) != (y->child == NULL) || (x->child && x->child->type != y->child->type)) return false;
    }
    return true;
}

typedef struct push_check {
    const char *cmd, *flight, *dataset;
    bool have_key, send_all;
    int32_t wait_ms;
    int64_t id_min, id_max; /* the input's id range (the scan's filter) */
} push_check;

/* Connectivity and readiness (before the model is loaded): sets *exists when the dataset is there
 * (then READY). Returns an exit code; prints each failure with its own message. */
static int check_server(qr_flight_client *fc, const push_check *pc, bool *exists) {
    char err[1024], status[64], reason[192];
    *exists = false;
    if (qr_flight_readiness(fc, pc->dataset, status, sizeof status, reason, sizeof reason, err, sizeof err) != QR_OK) {
        print_call_error(pc->cmd, fc, pc->flight, "the readiness check", err, pc->have_key);
        return 1;
    }
    if (!strcmp(status, "NOT_FOUND")) return 0; /* a new dataset: created by the put */
    *exists = true;
    if (strcmp(status, "READY")) {
        fprintf(stderr, "%s: dataset %s is %s%s%s; waiting up to %d ms for it to be READY\n", pc->cmd, pc->dataset,
                status, reason[0] ? ": " : "", reason, pc->wait_ms);
        if (qr_flight_wait_ready(fc, pc->dataset, pc->wait_ms, 50, err, sizeof err) != QR_OK) {
            fprintf(stderr, "%s: %s; nothing was embedded or sent\n", pc->cmd, err);
            return 1;
        }
    }
    return 0;
}

/* The stored dataset's schema against ours, then the ids it already holds in the input's range (into
 * *have, unless send_all). Returns an exit code; prints each failure with its own message. */
static int check_stored(qr_flight_client *fc, const push_check *pc, const qr_arrow_schema *ours, id_set *have) {
    char err[1024], filt[160];
    snprintf(filt, sizeof filt, "[{\"field\": \"id\", \"op\": \">=\", \"value\": %lld}, "
             "{\"field\": \"id\", \"op\": \"<=\", \"value\": %lld}]", (long long)pc->id_min, (long long)pc->id_max);
    qr_arrow_schema stored;
    qr_arrow_schema_init(&stored);
    id_set *sink = pc->send_all ? NULL : have;
    id_set none = {0};
    qr_status st = qr_flight_scan(fc, pc->dataset, pc->send_all ? "[{\"field\": \"id\", \"op\": \"<\", \"value\": 0}]" : filt,
                                  collect_ids, sink ? sink : &none, &stored, err, sizeof err);
    free(none.ids);
    int rc = 0;
    if (st != QR_OK) {
        if (qr_flight_last_grpc_status(fc) == 5 /* NOT_FOUND: dropped meanwhile */) {
            have->n = 0;
        } else {
            print_call_error(pc->cmd, fc, pc->flight, "reading the stored ids", err, pc->have_key);
            rc = 1;
        }
    } else if (stored.n_fields && !same_columns(&stored, ours)) {
        char a[512], b[512];
        qr_arrow_schema_describe(&stored, a, sizeof a);
        qr_arrow_schema_describe(ours, b, sizeof b);
        fprintf(stderr, "%s: dataset %s holds another schema: stored {%s}, this push {%s} (another model or "
                "dimension?); nothing was embedded or sent\n", pc->cmd, pc->dataset, a, b);
        rc = 1;
    }
    qr_arrow_schema_free(&stored);
    return rc;
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
               "                    -f texts.jsonl [--batch 256] [--metric cosine] [--flight-key KEY] [--send-all]\n"
               "Embeds each JSON line ({\"text\", \"id\"?, \"metadata\"?}) and streams the rows (id, vector, text,\n"
               "metadata) to the dataset, embedding the next batch while the last one is sent.\n"
               "  --batch N        rows per record batch (default 256)\n"
               "  --metric M       cosine (default), euclidean or dot_product (schema metadata)\n"
               "  --flight-key KEY API key, sent as 'authorization: Bearer KEY' (default: $QUARREL_FLIGHT_KEY)\n"
               "  --send-all       send every row, without reading which ids the dataset already holds (by\n"
               "                   default rows whose id is stored are skipped: a re-push sends nothing new)\n"
               "  --resume         accepted for old scripts: skipping stored ids is what every push does\n"
               "  --no-normalize, --pooling P, --no-truncate, -t N   as for `quarrel embed`\n"
               "  --wait-ms N      how long to wait for the dataset to become READY (default 60000)\n");
}

int cmd_push(int argc, char **argv) {
    static const struct option longopts[] = {
        {"model", 1, 0, 'm'},   {"flight", 1, 0, 'F'}, {"meta", 1, 0, 'M'},         {"dataset", 1, 0, 'd'},
        {"file", 1, 0, 'f'},    {"batch", 1, 0, 'b'},  {"metric", 1, 0, 'c'},       {"resume", 0, 0, 'r'},
        {"threads", 1, 0, 't'}, {"pooling", 1, 0, 'P'}, {"no-normalize", 0, 0, 'n'}, {"normalize", 0, 0, 'N'},
        {"no-truncate", 0, 0, 'U'}, {"truncate", 0, 0, 'T'}, {"wait-ms", 1, 0, 'w'}, {"help", 0, 0, 'h'},
        {"flight-key", 1, 0, 'K'}, {"send-all", 0, 0, 'S'}, {0, 0, 0, 0}};
    const char *model = NULL, *flight = NULL, *meta = NULL, *dataset = NULL, *file = NULL, *metric = "cosine";
    const char *key_opt = NULL;
    int32_t batch = 256, n_threads = 0, wait_ms = 60000;
    bool send_all = false;
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
        case 'r': break; /* --resume: what every push does now (kept for old scripts) */
        case 'S': send_all = true; break;
        case 'K': key_opt = optarg; break;
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
    const char *key = flight_key(key_opt);
    qr_flight_client *fc = NULL, *chk = NULL;
    int rc = open_client("push", flight, meta, -1, key, &fc);
    if (rc) return rc;
    if ((rc = open_client("push", flight, meta, CHECK_TIMEOUT_MS, key, &chk))) {
        qr_flight_client_free(fc);
        return rc;
    }
    embed_texts texts;
    if (embed_texts_read("push", file, &texts)) {
        qr_flight_client_free(chk);
        qr_flight_client_free(fc);
        return 1;
    }
    char err[1024];
    int64_t *todo = malloc((size_t)texts.n * sizeof(int64_t));
    int64_t n_todo = 0, skipped = 0, repeated = 0;
    id_set have = {0};
    bool *dup = NULL;
    app_engine e = {0};
    pipeline p = {0};
    bool engine_open = false, thread_started = false, exists = false;
    qr_arrow_schema schema;
    qr_arrow_schema_init(&schema);
    push_check pc = {.cmd = "push", .flight = flight, .dataset = dataset, .have_key = key != NULL,
                     .send_all = send_all, .wait_ms = wait_ms, .id_min = INT64_MAX, .id_max = INT64_MIN};
    if (!todo) {
        fprintf(stderr, "push: out of memory\n");
        rc = 1;
        goto done;
    }
    for (int64_t i = 0; i < texts.n; i++) {
        if (texts.id[i] < pc.id_min) pc.id_min = texts.id[i];
        if (texts.id[i] > pc.id_max) pc.id_max = texts.id[i];
    }
    /* 1. the server answers, takes our key, and the dataset is new or READY (before loading the model) */
    if ((rc = check_server(chk, &pc, &exists))) goto done;
    /* 2. the model gives the schema; a stored dataset must have the same one; its ids in our range */
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
    if (exists && (rc = check_stored(chk, &pc, &schema, &have))) goto done;
    qsort(have.ids, have.n, sizeof(int64_t), cmp_i64);
    /* 3. the rows to send: ids not stored yet, each once (the first line of a repeated id wins) */
    if (!(dup = repeated_lines(&texts))) {
        fprintf(stderr, "push: out of memory\n");
        rc = 1;
        goto done;
    }
    for (int64_t i = 0; i < texts.n; i++) {
        if (dup[i]) {
            repeated++;
        } else if (have.n && bsearch(&texts.id[i], have.ids, have.n, sizeof(int64_t), cmp_i64)) {
            skipped++;
        } else {
            todo[n_todo++] = i;
        }
    }
    if (exists) fprintf(stderr, "push: %lld of %lld rows already stored in %s (skipped)\n", (long long)skipped,
                        (long long)texts.n, dataset);
    if (repeated) fprintf(stderr, "push: %lld lines repeat an earlier line's id (skipped)\n", (long long)repeated);
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
            fprintf(stderr, "push: %s (gRPC %s); %lld rows were sent; re-run the same command to continue (rows "
                    "already stored are skipped)\n", err,
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
    free(dup);
    free(todo);
    embed_texts_free(&texts);
    qr_flight_client_free(chk);
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
               "  --flight-key KEY API key, sent as 'authorization: Bearer KEY' (default: $QUARREL_FLIGHT_KEY)\n"
               "  --no-normalize, --pooling P, -t N   as for `quarrel embed`\n");
}

int cmd_search(int argc, char **argv) {
    static const struct option longopts[] = {
        {"model", 1, 0, 'm'},   {"flight", 1, 0, 'F'},  {"meta", 1, 0, 'M'},          {"dataset", 1, 0, 'd'},
        {"prompt", 1, 0, 'p'},  {"top-k", 1, 0, 'k'},   {"threads", 1, 0, 't'},       {"pooling", 1, 0, 'P'},
        {"no-normalize", 0, 0, 'n'}, {"json", 0, 0, 'J'}, {"help", 0, 0, 'h'},        {"flight-key", 1, 0, 'K'},
        {0, 0, 0, 0}};
    const char *model = NULL, *flight = NULL, *meta = NULL, *dataset = NULL, *query = NULL, *key_opt = NULL;
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
        case 'K': key_opt = optarg; break;
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
    int rc = open_client("search", flight, meta, 0, flight_key(key_opt), &fc);
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
