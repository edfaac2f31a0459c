/* flight_tool.c — test driver for tests/integration/test_flight*.py (not a user command).
 *
 *   flight-tool push   --data H:P --dataset NAME (--vectors F --ids F --dim D [--docs F] | --synthetic N --dim D
 *                      [--start-id K] [--seed S] [--no-text]) [--batch-rows B] [--metric M]
 *                      [--ignore-slow-down] [--no-rewind] [--wait-ready MS]
 *   flight-tool get    --data H:P --dataset NAME [--filters JSON] [--out FILE]
 *   flight-tool search --data H:P --dataset NAME (--query F --dim D | --vector a,b,c) [--k K]
 *   flight-tool info   --meta H:P --dataset NAME
 *   flight-tool list   --meta H:P
 *   flight-tool ready  --data H:P --dataset NAME [--wait-ms MS]
 *   flight-tool action --data H:P --type T [--body TEXT]
 *   flight-tool ipc-roundtrip IN OUT   (decode an Arrow IPC stream with our decoder, re-encode it)
 *   flight-tool ipc-sample OUT         (write a stream covering every supported type)
 * Common: --token T --tls-root PEMFILE --tls-name NAME --timeout-ms N --retries N --quiet
 * Results are printed to stdout as JSON; errors go to stderr; exit 0 = success, 1 = failure, 2 = usage.
 */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "flight/arrow_ipc.h"
#include "flight/embed_batch.h"
#include "flight/flight_client.h"
#include "util/util.h"

typedef struct tool_args {
    const char *cmd;
    const char *data, *meta, *token, *tls_root, *tls_name, *dataset, *metric, *filters, *out;
    const char *vectors, *ids, *docs, *query, *vector, *type, *body;
    const char *pos[2];
    int n_pos;
    int64_t synthetic, start_id, seed, batch_rows, timeout_ms, wait_ms, wait_ready_ms;
    int dim, k, retries;
    bool no_text, ignore_slow_down, no_rewind, tls;
} tool_args;

static int usage(const char *msg) {
    fprintf(stderr, "flight-tool: %s (see the comment at the top of tests/integration/flight_tool.c)\n", msg);
    return 2;
}

/* Reads a whole file into a malloc'ed, NUL-terminated buffer. */
static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (cap - n < 65536) {
            cap = cap ? cap * 2 : 1 << 20;
            char *nb = realloc(buf, cap + 1);
            if (!nb) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    fclose(f);
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

/* Peak resident set of this process image in KiB: VmHWM from /proc (getrusage's ru_maxrss would
 * include the parent's footprint at fork time, which Linux carries across exec). */
static long max_rss_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    long kb = -1;
    char line[256];
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "VmHWM: %ld kB", &kb) == 1) break;
    if (f) fclose(f);
    if (kb < 0) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        kb = ru.ru_maxrss;
    }
    return kb;
}

/* ---- push source -------------------------------------------------------------------------------- */

typedef struct push_src {
    int64_t n_rows;
    int32_t dim;
    int64_t batch_rows;
    const int64_t *ids;     /* [n_rows] (file mode) */
    const float *vectors;   /* [n_rows * dim] (file mode) */
    char **texts, **metas;  /* [n_rows] (file mode with --docs) */
    bool synthetic;
    int64_t start_id;
    int64_t seed;
    bool with_text, with_meta;
    int64_t next_row;
    qr_embed_batch *eb;
    float *tmp;             /* [dim] */
} push_src;

/* The synthetic vector of row id: v[j] = ((id * 1000003 + j * 7919 + seed) mod 2001 - 1000) / 1000. */
static void synthetic_vector(int64_t id, int32_t dim, int64_t seed, float *out) {
    for (int32_t j = 0; j < dim; j++) {
        int64_t x = (id * 1000003 + (int64_t)j * 7919 + seed) % 2001;
        out[j] = (float)(x - 1000) / 1000.0f;
    }
}

static qr_status src_next(void *user, const qr_arrow_batch **batch, char *err, size_t err_len) {
    push_src *s = user;
    *batch = NULL;
    if (s->next_row >= s->n_rows) return QR_OK;
    qr_embed_batch_clear(s->eb);
    int64_t end = s->next_row + s->batch_rows < s->n_rows ? s->next_row + s->batch_rows : s->n_rows;
    char text[64], meta[128];
    for (int64_t r = s->next_row; r < end; r++) {
        qr_status st;
        if (s->synthetic) {
            int64_t id = s->start_id + r;
            synthetic_vector(id, s->dim, s->seed, s->tmp);
            snprintf(text, sizeof(text), "doc %lld", (long long)id);
            snprintf(meta, sizeof(meta), "{\"id\":%lld,\"seed\":%lld}", (long long)id, (long long)s->seed);
            st = qr_embed_batch_append(s->eb, id, s->tmp, text, meta);
        } else {
            st = qr_embed_batch_append(s->eb, s->ids[r], s->vectors + (size_t)r * (size_t)s->dim,
                                       s->texts ? s->texts[r] : NULL, s->metas ? s->metas[r] : NULL);
        }
        if (st != QR_OK) return qr_errf(err, err_len, st, "row %lld: cannot append (%s)", (long long)r, qr_status_str(st));
    }
    s->next_row = end;
    *batch = qr_embed_batch_view(s->eb);
    return QR_OK;
}

static qr_status src_rewind(void *user, char *err, size_t err_len) {
    ((push_src *)user)->next_row = 0;
    return QR_OK;
}

/* Loads --docs (one JSON object per line with "text" and "metadata" strings). */
static int load_docs(const char *path, int64_t n_rows, push_src *s) {
    size_t len;
    char *buf = read_file(path, &len);
    if (!buf) return fprintf(stderr, "flight-tool: cannot read %s\n", path), 1;
    s->texts = calloc((size_t)n_rows, sizeof(char *));
    s->metas = calloc((size_t)n_rows, sizeof(char *));
    char *line = buf;
    int64_t r = 0;
    while (line && *line && r < n_rows) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        json_error_t jerr;
        json_t *j = json_loads(line, 0, &jerr);
        if (!j) {
            free(buf);
            return fprintf(stderr, "flight-tool: %s line %lld: %s\n", path, (long long)r + 1, jerr.text), 1;
        }
        const char *t = json_string_value(json_object_get(j, "text"));
        const char *m = json_string_value(json_object_get(j, "metadata"));
        s->texts[r] = strdup(t ? t : "");
        s->metas[r] = strdup(m ? m : "");
        json_decref(j);
        r++;
        line = nl ? nl + 1 : NULL;
    }
    free(buf);
    if (r != n_rows) return fprintf(stderr, "flight-tool: %s has %lld rows, expected %lld\n", path, (long long)r, (long long)n_rows), 1;
    s->with_text = s->with_meta = true;
    return 0;
}

static int cmd_push(qr_flight_client *c, const tool_args *a) {
    if (!a->dataset || a->dim < 1) return usage("push needs --dataset and --dim");
    push_src s = {.dim = a->dim, .batch_rows = a->batch_rows > 0 ? a->batch_rows : 1000, .seed = a->seed,
                  .start_id = a->start_id};
    char *vec_buf = NULL, *id_buf = NULL;
    size_t vec_len = 0, id_len = 0;
    if (a->synthetic > 0) {
        s.synthetic = true;
        s.n_rows = a->synthetic;
        s.with_text = s.with_meta = !a->no_text;
    } else {
        if (!a->vectors || !a->ids) return usage("push needs --vectors and --ids, or --synthetic");
        vec_buf = read_file(a->vectors, &vec_len);
        id_buf = read_file(a->ids, &id_len);
        if (!vec_buf || !id_buf) return fprintf(stderr, "flight-tool: cannot read the input files\n"), 1;
        s.n_rows = (int64_t)(id_len / 8);
        if (vec_len != (size_t)s.n_rows * (size_t)a->dim * 4)
            return fprintf(stderr, "flight-tool: %zu vector bytes for %lld rows of dim %d\n", vec_len,
                           (long long)s.n_rows, a->dim), 1;
        s.ids = (const int64_t *)(const void *)id_buf;
        s.vectors = (const float *)(const void *)vec_buf;
        if (a->docs && load_docs(a->docs, s.n_rows, &s)) return 1;
    }
    s.tmp = calloc((size_t)a->dim, sizeof(float));
    if (qr_embed_batch_create(a->dim, s.batch_rows, s.with_text, s.with_meta, &s.eb) != QR_OK || !s.tmp)
        return fprintf(stderr, "flight-tool: out of memory\n"), 1;
    qr_arrow_schema schema;
    qr_embed_batch_schema(s.eb, a->metric, &schema);
    char err[1024] = "";
    qr_flight_put_stats stats;
    double t0 = qr_time_s();
    qr_status st = qr_flight_put(c, a->dataset, &schema, src_next, a->no_rewind ? NULL : src_rewind, &s, &stats, err,
                                 sizeof(err));
    double secs = qr_time_s() - t0;
    int rc = 0;
    if (st != QR_OK) {
        fprintf(stderr, "flight-tool: push failed: %s\n", err);
        rc = 1;
    } else if (a->wait_ready_ms > 0 &&
               qr_flight_wait_ready(c, a->dataset, a->wait_ready_ms, 20, err, sizeof(err)) != QR_OK) {
        fprintf(stderr, "flight-tool: %s\n", err);
        rc = 1;
    }
    printf("{\"ok\":%s,\"rows\":%lld,\"batches\":%lld,\"bytes\":%lld,\"put_results\":%lld,\"slow_downs\":%lld,"
           "\"backoff_s\":%.4f,\"attempts\":%d,\"seconds\":%.4f,\"mb_per_s\":%.2f,\"max_rss_kb\":%ld,"
           "\"grpc_status\":\"%s\"}\n",
           rc == 0 ? "true" : "false", (long long)stats.rows, (long long)stats.batches, (long long)stats.bytes,
           (long long)stats.put_results, (long long)stats.slow_downs, stats.backoff_s, stats.attempts, secs,
           secs > 0 ? (double)stats.bytes / secs / 1e6 : 0.0, max_rss_kb(),
           qr_flight_grpc_status_name(qr_flight_last_grpc_status(c)));
    qr_arrow_schema_free(&schema);
    qr_embed_batch_free(s.eb);
    for (int64_t i = 0; s.texts && i < s.n_rows; i++) free(s.texts[i]);
    for (int64_t i = 0; s.metas && i < s.n_rows; i++) free(s.metas[i]);
    free(s.texts);
    free(s.metas);
    free(s.tmp);
    free(vec_buf);
    free(id_buf);
    return rc;
}

/* ---- get ---------------------------------------------------------------------------------------- */

typedef struct get_out {
    FILE *f;
    bool wrote_schema;
    int64_t rows, batches;
} get_out;

/* Writes an encoded message to f in the encapsulated form. */
static int write_message(FILE *f, const qr_arrow_message *m) {
    size_t n = qr_arrow_message_framed_size(m);
    uint8_t *buf = malloc(n);
    if (!buf) return 1;
    qr_arrow_message_frame(m, buf);
    int rc = fwrite(buf, 1, n, f) == n ? 0 : 1;
    free(buf);
    return rc;
}

static qr_status get_sink(void *user, const qr_arrow_schema *s, const qr_arrow_batch *b, char *err, size_t err_len) {
    get_out *g = user;
    g->rows += b->length;
    g->batches++;
    if (!g->f) return QR_OK;
    qr_arrow_message m;
    qr_status st;
    if (!g->wrote_schema) {
        if ((st = qr_arrow_encode_schema(s, &m, err, err_len))) return st;
        int bad = write_message(g->f, &m);
        qr_arrow_message_free(&m);
        if (bad) return qr_errf(err, err_len, QR_ERR_IO, "write failed");
        g->wrote_schema = true;
    }
    if ((st = qr_arrow_encode_batch(s, b, &m, err, err_len))) return st;
    int bad = write_message(g->f, &m);
    qr_arrow_message_free(&m);
    return bad ? qr_errf(err, err_len, QR_ERR_IO, "write failed") : QR_OK;
}

static int cmd_get(qr_flight_client *c, const tool_args *a) {
    if (!a->dataset) return usage("get needs --dataset");
    get_out g = {0};
    if (a->out && !(g.f = fopen(a->out, "wb"))) return fprintf(stderr, "flight-tool: cannot write %s\n", a->out), 1;
    char err[1024] = "";
    qr_arrow_schema schema;
    qr_status st = qr_flight_scan(c, a->dataset, a->filters, get_sink, &g, &schema, err, sizeof(err));
    int rc = 0;
    if (st == QR_OK && g.f && !g.wrote_schema) { /* empty result: still write the schema */
        qr_arrow_message m;
        if (qr_arrow_encode_schema(&schema, &m, err, sizeof(err)) == QR_OK) {
            write_message(g.f, &m);
            qr_arrow_message_free(&m);
        }
    }
    if (g.f) {
        fwrite(qr_arrow_eos, 1, sizeof(qr_arrow_eos), g.f);
        fclose(g.f);
    }
    if (st != QR_OK) {
        fprintf(stderr, "flight-tool: get failed: %s\n", err);
        rc = 1;
    } else {
        char desc[1024];
        qr_arrow_schema_describe(&schema, desc, sizeof(desc));
        json_t *j = json_pack("{s:I, s:I, s:s, s:s?}", "rows", (json_int_t)g.rows, "batches", (json_int_t)g.batches,
                              "schema", desc, "metric", qr_arrow_schema_meta(&schema, "longbow.metric"));
        char *txt = json_dumps(j, JSON_COMPACT);
        printf("%s\n", txt);
        free(txt);
        json_decref(j);
    }
    qr_arrow_schema_free(&schema);
    return rc;
}

/* ---- search / info / list / ready / action ------------------------------------------------------- */

static int cmd_search(qr_flight_client *c, const tool_args *a) {
    if (!a->dataset) return usage("search needs --dataset");
    float *q = NULL;
    int dim = 0;
    if (a->query) {
        size_t len;
        char *buf = read_file(a->query, &len);
        if (!buf) return fprintf(stderr, "flight-tool: cannot read %s\n", a->query), 1;
        dim = (int)(len / 4);
        q = (float *)(void *)buf;
    } else if (a->vector) {
        q = calloc(strlen(a->vector) + 1, sizeof(float));
        for (const char *p = a->vector; q && *p;) {
            char *end;
            q[dim++] = strtof(p, &end);
            p = *end == ',' ? end + 1 : end;
            if (end == p && *p) break;
        }
    }
    if (!q || dim < 1) return usage("search needs --query FILE or --vector a,b,c");
    qr_flight_hit *hits = NULL;
    size_t n = 0;
    char err[1024] = "";
    qr_status st = qr_flight_search(c, a->dataset, q, dim, a->k > 0 ? a->k : 10, &hits, &n, err, sizeof(err));
    free(q);
    if (st != QR_OK) return fprintf(stderr, "flight-tool: search failed: %s\n", err), 1;
    for (size_t i = 0; i < n; i++) printf("{\"id\":%llu,\"score\":%.9g}\n", (unsigned long long)hits[i].id, hits[i].score);
    free(hits);
    return 0;
}

static json_t *info_json(const qr_flight_info *info) {
    json_t *path = json_array();
    for (size_t i = 0; i < info->n_path; i++) json_array_append_new(path, json_string(info->path[i]));
    char desc[1024] = "";
    if (info->has_schema) qr_arrow_schema_describe(&info->schema, desc, sizeof(desc));
    return json_pack("{s:b, s:s, s:o, s:I, s:I, s:I}", "has_schema", info->has_schema, "schema", desc, "path", path,
                     "total_records", (json_int_t)info->total_records, "total_bytes", (json_int_t)info->total_bytes,
                     "endpoints", (json_int_t)info->n_endpoints);
}

static void print_json(json_t *j) {
    char *txt = json_dumps(j, JSON_COMPACT);
    printf("%s\n", txt ? txt : "null");
    free(txt);
    json_decref(j);
}

static int cmd_info(qr_flight_client *c, const tool_args *a) {
    if (!a->dataset) return usage("info needs --dataset");
    qr_flight_info info;
    char err[1024] = "";
    if (qr_flight_get_info(c, a->dataset, &info, err, sizeof(err)) != QR_OK)
        return fprintf(stderr, "flight-tool: info failed: %s\n", err), 1;
    print_json(info_json(&info));
    qr_flight_info_free(&info);
    return 0;
}

static int cmd_list(qr_flight_client *c, const tool_args *a) {
    qr_flight_info *infos = NULL;
    size_t n = 0;
    char err[1024] = "";
    if (qr_flight_list(c, NULL, 0, &infos, &n, err, sizeof(err)) != QR_OK)
        return fprintf(stderr, "flight-tool: list failed: %s\n", err), 1;
    for (size_t i = 0; i < n; i++) {
        print_json(info_json(&infos[i]));
        qr_flight_info_free(&infos[i]);
    }
    free(infos);
    return 0;
}

static int cmd_ready(qr_flight_client *c, const tool_args *a) {
    if (!a->dataset) return usage("ready needs --dataset");
    char err[1024] = "";
    if (qr_flight_wait_ready(c, a->dataset, a->wait_ms > 0 ? a->wait_ms : 10000, 20, err, sizeof(err)) != QR_OK)
        return fprintf(stderr, "flight-tool: %s\n", err), 1;
    printf("{\"ready\":true}\n");
    return 0;
}

static int cmd_action(qr_flight_client *c, const tool_args *a) {
    if (!a->type) return usage("action needs --type");
    qr_flight_result *res = NULL;
    size_t n = 0;
    char err[1024] = "";
    if (qr_flight_action(c, a->type, a->body, a->body ? strlen(a->body) : 0, &res, &n, err, sizeof(err)) != QR_OK)
        return fprintf(stderr, "flight-tool: action failed: %s\n", err), 1;
    for (size_t i = 0; i < n; i++) printf("%.*s\n", (int)res[i].len, (const char *)res[i].body);
    qr_flight_results_free(res, n);
    return 0;
}

/* ---- IPC checks ------------------------------------------------------------------------------------ */

static int cmd_ipc_roundtrip(const char *in, const char *out) {
    size_t len;
    char *buf = read_file(in, &len);
    if (!buf) return fprintf(stderr, "flight-tool: cannot read %s\n", in), 1;
    FILE *f = fopen(out, "wb");
    if (!f) {
        free(buf);
        return fprintf(stderr, "flight-tool: cannot write %s\n", out), 1;
    }
    const uint8_t *p = (const uint8_t *)buf;
    size_t left = len;
    qr_arrow_schema schema;
    qr_arrow_schema_init(&schema);
    bool have_schema = false;
    int64_t rows = 0, batches = 0;
    char err[1024] = "";
    qr_status st = QR_OK;
    while (st == QR_OK) {
        size_t used, meta_len, body_len;
        const uint8_t *meta, *body;
        if ((st = qr_arrow_next_message(p, left, &used, &meta, &meta_len, &body, &body_len, err, sizeof(err)))) break;
        if (!meta) break;
        p += used;
        left -= used;
        qr_arrow_message m;
        if (!have_schema) {
            if ((st = qr_arrow_decode_schema(meta, meta_len, &schema, err, sizeof(err)))) break;
            have_schema = true;
            if ((st = qr_arrow_encode_schema(&schema, &m, err, sizeof(err)))) break;
        } else {
            qr_arrow_batch b;
            if ((st = qr_arrow_decode_batch(&schema, meta, meta_len, body, body_len, &b, err, sizeof(err)))) break;
            rows += b.length;
            batches++;
            st = qr_arrow_encode_batch(&schema, &b, &m, err, sizeof(err));
            qr_arrow_batch_free(&b);
            if (st) break;
        }
        write_message(f, &m);
        qr_arrow_message_free(&m);
    }
    if (st == QR_OK && !have_schema) st = qr_errf(err, sizeof(err), QR_ERR_FORMAT, "the stream has no schema");
    fwrite(qr_arrow_eos, 1, sizeof(qr_arrow_eos), f);
    fclose(f);
    free(buf);
    qr_arrow_schema_free(&schema);
    if (st != QR_OK) return fprintf(stderr, "flight-tool: %s: %s\n", qr_status_str(st), err), 1;
    printf("{\"rows\":%lld,\"batches\":%lld}\n", (long long)rows, (long long)batches);
    return 0;
}

/* Writes two batches covering int64, uint64, float32, utf8 (with nulls), FixedSizeList<float32, 3>
 * (with a null list) and metadata. Values: row i of batch k (global row g = 4k + i):
 * a = g * 1000000007 - 5, b = 2^63 + g, c = g / 4 + 0.5, s = "row g ✓" (null when g % 3 == 1),
 * v = [g, -g, g * 0.25] (null when g == 2). */
static int cmd_ipc_sample(const char *out) {
    qr_arrow_schema s;
    qr_arrow_schema_init(&s);
    qr_arrow_field *f = NULL;
    qr_arrow_schema_add(&s, "a", QR_ARROW_INT64, false, &f);
    qr_arrow_field_add_meta(f, "unit", "count");
    qr_arrow_schema_add(&s, "b", QR_ARROW_UINT64, false, NULL);
    qr_arrow_schema_add(&s, "c", QR_ARROW_FLOAT32, true, NULL);
    qr_arrow_schema_add(&s, "s", QR_ARROW_UTF8, true, NULL);
    qr_arrow_schema_add_list(&s, "v", QR_ARROW_FLOAT32, 3, true, NULL);
    qr_arrow_schema_add_meta(&s, "longbow.metric", "euclidean");
    qr_arrow_schema_add_meta(&s, "note", "written by flight-tool");
    FILE *fp = fopen(out, "wb");
    if (!fp) return fprintf(stderr, "flight-tool: cannot write %s\n", out), 1;
    char err[512] = "";
    qr_arrow_message m;
    if (qr_arrow_encode_schema(&s, &m, err, sizeof(err)) != QR_OK) return fprintf(stderr, "%s\n", err), 1;
    write_message(fp, &m);
    qr_arrow_message_free(&m);
    for (int k = 0; k < 2; k++) {
        enum { N = 4 };
        int64_t a[N];
        uint64_t b[N];
        float c[N], v[N * 3];
        int32_t offs[N + 1] = {0};
        char chars[256];
        uint8_t s_valid = 0, v_valid = 0;
        int64_t s_nulls = 0, v_nulls = 0;
        for (int i = 0; i < N; i++) {
            int64_t g = 4 * k + i;
            a[i] = g * 1000000007LL - 5;
            b[i] = (1ULL << 63) + (uint64_t)g;
            c[i] = (float)g / 4.0f + 0.5f;
            v[3 * i] = (float)g;
            v[3 * i + 1] = -(float)g;
            v[3 * i + 2] = (float)g * 0.25f;
            int n = 0;
            if (g % 3 == 1) s_nulls++;
            else {
                s_valid |= (uint8_t)(1u << i);
                n = snprintf(chars + offs[i], sizeof(chars) - (size_t)offs[i], "row %lld \xe2\x9c\x93", (long long)g);
            }
            offs[i + 1] = offs[i] + n;
            if (g == 2) v_nulls++;
            else v_valid |= (uint8_t)(1u << i);
        }
        qr_arrow_array vchild = {.length = N * 3, .values = v};
        qr_arrow_array cols[5] = {
            {.length = N, .values = a},
            {.length = N, .values = b},
            {.length = N, .values = c},
            {.length = N, .null_count = s_nulls, .validity = &s_valid, .offsets = offs, .values = chars},
            {.length = N, .null_count = v_nulls, .validity = &v_valid, .child = &vchild},
        };
        qr_arrow_batch batch = {.length = N, .n_columns = 5, .columns = cols};
        if (qr_arrow_encode_batch(&s, &batch, &m, err, sizeof(err)) != QR_OK) return fprintf(stderr, "%s\n", err), 1;
        write_message(fp, &m);
        qr_arrow_message_free(&m);
    }
    fwrite(qr_arrow_eos, 1, sizeof(qr_arrow_eos), fp);
    fclose(fp);
    qr_arrow_schema_free(&s);
    printf("{\"rows\":8,\"batches\":2}\n");
    return 0;
}

/* ---- main --------------------------------------------------------------------------------------- */

static int parse_args(int argc, char **argv, tool_args *a) {
    memset(a, 0, sizeof(*a));
    a->timeout_ms = 30000;
    a->retries = 4;
    a->k = 10;
    if (argc < 2) return usage("missing command");
    a->cmd = argv[1];
    for (int i = 2; i < argc; i++) {
        const char *o = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define STR(name, field)                                                                                            \
    if (strcmp(o, name) == 0) {                                                                                     \
        if (!v) return usage("missing value after " name);                                                          \
        a->field = v;                                                                                               \
        i++;                                                                                                        \
        continue;                                                                                                   \
    }
#define NUM(name, field)                                                                                            \
    if (strcmp(o, name) == 0) {                                                                                     \
        if (!v) return usage("missing value after " name);                                                          \
        a->field = strtoll(v, NULL, 10);                                                                            \
        i++;                                                                                                        \
        continue;                                                                                                   \
    }
        STR("--data", data) STR("--meta", meta) STR("--token", token) STR("--tls-root", tls_root)
        STR("--tls-name", tls_name) STR("--dataset", dataset) STR("--metric", metric) STR("--filters", filters)
        STR("--out", out) STR("--vectors", vectors) STR("--ids", ids) STR("--docs", docs) STR("--query", query)
        STR("--vector", vector) STR("--type", type) STR("--body", body)
        NUM("--synthetic", synthetic) NUM("--start-id", start_id) NUM("--seed", seed) NUM("--batch-rows", batch_rows)
        NUM("--timeout-ms", timeout_ms) NUM("--wait-ms", wait_ms) NUM("--wait-ready", wait_ready_ms)
        NUM("--dim", dim) NUM("--k", k) NUM("--retries", retries)
#undef STR
#undef NUM
        if (strcmp(o, "--no-text") == 0) a->no_text = true;
        else if (strcmp(o, "--ignore-slow-down") == 0) a->ignore_slow_down = true;
        else if (strcmp(o, "--no-rewind") == 0) a->no_rewind = true;
        else if (strcmp(o, "--tls") == 0) a->tls = true;
        else if (strcmp(o, "--quiet") == 0) qr_log_set_level(QR_LOG_ERROR);
        else if (o[0] != '-' && a->n_pos < 2) a->pos[a->n_pos++] = o;
        else return usage("unknown option");
    }
    return 0;
}

int main(int argc, char **argv) {
    tool_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc;
    if (strcmp(a.cmd, "ipc-roundtrip") == 0)
        return a.n_pos == 2 ? cmd_ipc_roundtrip(a.pos[0], a.pos[1]) : usage("ipc-roundtrip IN OUT");
    if (strcmp(a.cmd, "ipc-sample") == 0) return a.n_pos == 1 ? cmd_ipc_sample(a.pos[0]) : usage("ipc-sample OUT");

    qr_flight_options o;
    qr_flight_options_init(&o);
    o.data_target = a.data ? a.data : a.meta;
    o.meta_target = a.meta;
    o.bearer_token = a.token;
    o.timeout_ms = a.timeout_ms;
    o.max_retries = a.retries;
    o.ignore_slow_down = a.ignore_slow_down;
    char *pem = NULL;
    if (a.tls_root) {
        pem = read_file(a.tls_root, NULL);
        if (!pem) return fprintf(stderr, "flight-tool: cannot read %s\n", a.tls_root), 1;
        o.tls = true;
        o.tls_root_pem = pem;
    }
    if (a.tls) o.tls = true;
    o.tls_server_name = a.tls_name;
    qr_flight_client *c = NULL;
    char err[512] = "";
    if (qr_flight_client_create(&o, &c, err, sizeof(err)) != QR_OK) {
        free(pem);
        return fprintf(stderr, "flight-tool: %s\n", err), 1;
    }
    if (strcmp(a.cmd, "push") == 0) rc = cmd_push(c, &a);
    else if (strcmp(a.cmd, "get") == 0) rc = cmd_get(c, &a);
    else if (strcmp(a.cmd, "search") == 0) rc = cmd_search(c, &a);
    else if (strcmp(a.cmd, "info") == 0) rc = cmd_info(c, &a);
    else if (strcmp(a.cmd, "list") == 0) rc = cmd_list(c, &a);
    else if (strcmp(a.cmd, "ready") == 0) rc = cmd_ready(c, &a);
    else if (strcmp(a.cmd, "action") == 0) rc = cmd_action(c, &a);
    else rc = usage("unknown command");
    qr_flight_client_free(c);
    free(pem);
    return rc;
}
