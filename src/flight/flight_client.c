/* flight_client.c — Flight calls: DoPut (with slow_down backoff), DoGet (scan/search tickets),
 * GetFlightInfo, ListFlights, DoAction and readiness polling. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flight_internal.h"
#include "util/util.h"

/* ---- DoPut -------------------------------------------------------------------------------------- */

typedef struct put_ctx {
    qr_flight_client *c;
    fl_call call;
    fl_pool *pool;      /* send buffers reused across batches */
    qr_flight_put_stats *stats;
    bool slow_pending;  /* a slow_down arrived since the last batch was sent */
    bool stream_ended;  /* the server ended its response stream */
} put_ctx;

/* True when a PutResult's app_metadata is a JSON object with "status": "slow_down". */
static bool is_slow_down(const uint8_t *data, size_t len) {
    if (!data || len == 0) return false;
    json_error_t jerr;
    json_t *j = json_loadb((const char *)data, len, 0, &jerr);
    if (!j) return false;
    const char *s = json_string_value(json_object_get(j, "status"));
    bool slow = s && strcmp(s, "slow_down") == 0;
    json_decref(j);
    return slow;
}

/* Handles a completed RECV of the DoPut response stream and re-arms it. */
static void put_handle_recv(put_ctx *p) {
    p->call.done[FL_TAG_RECV] = false;
    if (!p->call.ok[FL_TAG_RECV] || !p->call.recv_buf) {
        p->stream_ended = true;
        return;
    }
    grpc_slice s = fl_flatten(p->call.recv_buf);
    Arrow__Flight__Protocol__PutResult *r =
        arrow__flight__protocol__put_result__unpack(NULL, GRPC_SLICE_LENGTH(s), GRPC_SLICE_START_PTR(s));
    grpc_slice_unref(s);
    p->stats->put_results++;
    if (r && is_slow_down(r->app_metadata.data, r->app_metadata.len)) {
        p->stats->slow_downs++;
        p->slow_pending = true;
    }
    if (r) arrow__flight__protocol__put_result__free_unpacked(r, NULL);
    if (fl_call_start_recv(&p->call) != QR_OK) p->stream_ended = true;
}

/* Waits for one completion (or until until_s) and processes PutResults. */
static void put_pump(put_ctx *p, double until_s) {
    fl_call_pump(&p->call, until_s);
    if (p->call.done[FL_TAG_RECV] && !p->call.pending[FL_TAG_RECV]) put_handle_recv(p);
}

/* Sends one message and waits until gRPC took it, processing PutResults meanwhile. */
static bool put_send(put_ctx *p, grpc_byte_buffer *bb) {
    if (fl_call_start_send(&p->call, bb, false) != QR_OK) return false;
    while (!p->call.done[FL_TAG_SEND] && p->call.pending[FL_TAG_SEND]) put_pump(p, -1);
    /* A send completes as soon as the transport takes the message, and the completion queue hands
     * out ready completions without polling the socket: poll once without blocking, so that
     * PutResults (slow_down) are read between batches rather than after the whole stream. */
    put_pump(p, 0);
    return p->call.ok[FL_TAG_SEND];
}

/* Packs a FlightData with the given header, body and (optional) descriptor. */
static grpc_byte_buffer *pack_flight_data(const qr_arrow_message *m, Arrow__Flight__Protocol__FlightDescriptor *desc) {
    Arrow__Flight__Protocol__FlightData fd = ARROW__FLIGHT__PROTOCOL__FLIGHT_DATA__INIT;
    fd.flight_descriptor = desc;
    fd.data_header.data = m->metadata;
    fd.data_header.len = m->metadata_len;
    fd.data_body.data = m->body;
    fd.data_body.len = m->body_len;
    return fl_pack(&fd.base);
}

/* One DoPut attempt. */
static qr_status put_attempt(put_ctx *p, const char *dataset, const qr_arrow_schema *schema,
                             qr_flight_batch_source next, void *user, bool *retryable, char *err, size_t err_len) {
    qr_flight_client *c = p->c;
    *retryable = false;
    char local_err[512] = "";
    qr_status local = QR_OK;
    qr_arrow_message msg;
    qr_status st = qr_arrow_encode_schema(schema, &msg, err, err_len);
    if (st != QR_OK) return st;
    if ((st = fl_call_open(c, false, "DoPut", &p->call, err, err_len))) {
        qr_arrow_message_free(&msg);
        return st;
    }
    p->slow_pending = p->stream_ended = false;
    fl_call_start_recv(&p->call);

    Arrow__Flight__Protocol__FlightDescriptor desc = ARROW__FLIGHT__PROTOCOL__FLIGHT_DESCRIPTOR__INIT;
    char *path[1] = {(char *)dataset};
    desc.type = ARROW__FLIGHT__PROTOCOL__FLIGHT_DESCRIPTOR__DESCRIPTOR_TYPE__PATH;
    desc.n_path = 1;
    desc.path = path;
    grpc_byte_buffer *bb = pack_flight_data(&msg, &desc);
    qr_arrow_message_free(&msg);
    p->stats->bytes += (int64_t)grpc_byte_buffer_length(bb);
    bool sending = put_send(p, bb);
    double backoff_ms = 0;
    while (sending) {
        const qr_arrow_batch *b = NULL;
        local = next(user, &b, local_err, sizeof(local_err));
        if (local != QR_OK || !b) break;
        local = fl_pack_batch(p->pool, schema, b, &bb, local_err, sizeof(local_err));
        if (local != QR_OK) break;
        if (p->slow_pending && !c->ignore_slow_down) {
            backoff_ms = backoff_ms > 0 ? backoff_ms * 2 : (double)c->slow_down_initial_ms;
            if (backoff_ms > (double)c->slow_down_max_ms) backoff_ms = (double)c->slow_down_max_ms;
            p->slow_pending = false;
            double t0 = qr_time_s(), until = t0 + backoff_ms / 1000.0;
            while (qr_time_s() < until && !p->stream_ended) put_pump(p, until);
            p->stats->backoff_s += qr_time_s() - t0;
        } else {
            backoff_ms = 0;
            p->slow_pending = false;
        }
        p->stats->bytes += (int64_t)grpc_byte_buffer_length(bb);
        sending = put_send(p, bb);
        if (sending) {
            p->stats->batches++;
            p->stats->rows += b->length;
        }
    }
    if (local != QR_OK) {
        fl_call_cancel(&p->call);
    } else if (sending && fl_call_start_close(&p->call) == QR_OK) {
        while (!p->call.done[FL_TAG_CLOSE] && p->call.pending[FL_TAG_CLOSE]) put_pump(p, -1);
        /* read until the server ends the stream (PutResults, if any, are processed on the way) */
        while (!p->stream_ended && (p->call.pending[FL_TAG_RECV] || p->call.done[FL_TAG_RECV])) put_pump(p, -1);
    }
    char call_err[1024] = "";
    st = fl_call_finish(&p->call, retryable, call_err, sizeof(call_err));
    if (local != QR_OK) {
        *retryable = false;
        return qr_errf(err, err_len, local, "flight DoPut: %s", local_err);
    }
    if (st == QR_OK && !sending)
        return qr_errf(err, err_len, QR_ERR_IO, "flight DoPut: the stream broke while sending");
    if (st != QR_OK) return qr_errf(err, err_len, st, "%s", call_err);
    return QR_OK;
}

qr_status qr_flight_put(qr_flight_client *c, const char *dataset, const qr_arrow_schema *schema,
                        qr_flight_batch_source next, qr_flight_source_rewind rewind, void *user,
                        qr_flight_put_stats *stats, char *err, size_t err_len) {
    if (!c || !dataset || !dataset[0] || !schema || !next)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "flight DoPut: missing dataset, schema or source");
    qr_flight_put_stats local_stats;
    if (!stats) stats = &local_stats;
    memset(stats, 0, sizeof(*stats));
    put_ctx p = {.c = c, .stats = stats, .pool = fl_pool_create()};
    for (int attempt = 0;; attempt++) {
        stats->attempts = attempt + 1;
        stats->rows = stats->batches = 0;
        bool retryable = false;
        qr_status st = put_attempt(&p, dataset, schema, next, user, &retryable, err, err_len);
        char rerr[256] = "";
        if (st == QR_OK || !retryable || !rewind || attempt >= c->max_retries || rewind(user, rerr, sizeof(rerr))) {
            fl_pool_release(p.pool);
            return st;
        }
        double d = fl_retry_delay_s(c, attempt);
        qr_log(QR_LOG_WARN, "flight DoPut to '%s' failed (%s); retry %d in %.2f s", dataset, err, attempt + 1, d);
        fl_sleep_s(d);
    }
}

/* ---- DoGet -------------------------------------------------------------------------------------- */

typedef struct get_ctx {
    qr_arrow_schema schema;
    bool have_schema;
    qr_flight_batch_sink sink;
    void *user;
} get_ctx;

static qr_status get_on_message(void *u, const uint8_t *data, size_t len, char *err, size_t err_len) {
    get_ctx *g = u;
    Arrow__Flight__Protocol__FlightData *fd = arrow__flight__protocol__flight_data__unpack(NULL, len, data);
    if (!fd) return qr_errf(err, err_len, QR_ERR_FORMAT, "flight DoGet: a message is not a FlightData");
    qr_status st = QR_OK;
    if (fd->data_header.len > 0) {
        int kind = 0;
        int64_t body_len = 0;
        st = qr_arrow_message_peek(fd->data_header.data, fd->data_header.len, &kind, &body_len, err, err_len);
        if (st == QR_OK && kind == QR_ARROW_MSG_SCHEMA) {
            qr_arrow_schema_free(&g->schema);
            st = qr_arrow_decode_schema(fd->data_header.data, fd->data_header.len, &g->schema, err, err_len);
            g->have_schema = st == QR_OK;
        } else if (st == QR_OK && kind == QR_ARROW_MSG_RECORD_BATCH) {
            if (!g->have_schema) {
                st = qr_errf(err, err_len, QR_ERR_FORMAT, "flight DoGet: record batch before the schema");
            } else {
                qr_arrow_batch b;
                st = qr_arrow_decode_batch(&g->schema, fd->data_header.data, fd->data_header.len, fd->data_body.data,
                                           fd->data_body.len, &b, err, err_len);
                if (st == QR_OK) {
                    if (g->sink) st = g->sink(g->user, &g->schema, &b, err, err_len);
                    qr_arrow_batch_free(&b);
                }
            }
        } else if (st == QR_OK) {
            st = qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "flight DoGet: unsupported IPC message kind %d", kind);
        }
    }
    arrow__flight__protocol__flight_data__free_unpacked(fd, NULL);
    return st;
}

static qr_status get_on_retry(void *u) {
    get_ctx *g = u;
    qr_arrow_schema_free(&g->schema);
    g->have_schema = false;
    return QR_OK;
}

qr_status qr_flight_get(qr_flight_client *c, const void *ticket, size_t ticket_len, qr_flight_batch_sink sink,
                        void *user, qr_arrow_schema *schema_out, char *err, size_t err_len) {
    if (schema_out) qr_arrow_schema_init(schema_out);
    if (!c || (!ticket && ticket_len)) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "flight DoGet: bad arguments");
    Arrow__Flight__Protocol__Ticket t = ARROW__FLIGHT__PROTOCOL__TICKET__INIT;
    t.ticket.data = (uint8_t *)ticket;
    t.ticket.len = ticket_len;
    get_ctx g = {.sink = sink, .user = user};
    qr_status st = fl_server_stream(c, false, "DoGet", &t.base, get_on_message, &g, get_on_retry, err, err_len);
    if (st == QR_OK && schema_out) {
        *schema_out = g.schema;
        qr_arrow_schema_init(&g.schema);
    }
    qr_arrow_schema_free(&g.schema);
    return st;
}

/* Serialises a JSON value compactly into a malloc'ed string. */
static char *json_text(json_t *j) {
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return s;
}

qr_status qr_flight_scan(qr_flight_client *c, const char *dataset, const char *filters_json,
                         qr_flight_batch_sink sink, void *user, qr_arrow_schema *schema_out, char *err,
                         size_t err_len) {
    if (schema_out) qr_arrow_schema_init(schema_out);
    if (!dataset) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "flight scan: no dataset");
    json_t *filters = json_array();
    if (filters_json && filters_json[0]) {
        json_error_t jerr;
        json_decref(filters);
        filters = json_loads(filters_json, 0, &jerr);
        if (!filters || !json_is_array(filters)) {
            json_decref(filters);
            return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "flight scan: filters must be a JSON array");
        }
    }
    char *ticket = json_text(json_pack("{s:s, s:o}", "dataset", dataset, "filters", filters));
    if (!ticket) return qr_errf(err, err_len, QR_ERR_NOMEM, "flight scan: cannot build the ticket");
    qr_status st = qr_flight_get(c, ticket, strlen(ticket), sink, user, schema_out, err, err_len);
    free(ticket);
    return st;
}

typedef struct search_ctx {
    qr_flight_hit *hits;
    size_t n, cap;
} search_ctx;

static qr_status search_sink(void *u, const qr_arrow_schema *s, const qr_arrow_batch *b, char *err, size_t err_len) {
    search_ctx *sc = u;
    int ic = qr_arrow_schema_find(s, "id"), sc_col = qr_arrow_schema_find(s, "score");
    if (ic < 0 || sc_col < 0)
        return qr_errf(err, err_len, QR_ERR_FORMAT, "flight search: the result has no id/score columns");
    qr_arrow_type it = s->fields[ic].type, st = s->fields[sc_col].type;
    if ((it != QR_ARROW_UINT64 && it != QR_ARROW_INT64) || (st != QR_ARROW_FLOAT32 && st != QR_ARROW_FLOAT64))
        return qr_errf(err, err_len, QR_ERR_FORMAT, "flight search: id must be (u)int64 and score float32/64, got %s/%s",
                       qr_arrow_type_name(it), qr_arrow_type_name(st));
    if ((size_t)b->length > SIZE_MAX / sizeof(qr_flight_hit) - sc->n)
        return qr_errf(err, err_len, QR_ERR_NOMEM, "flight search: too many hits");
    if (sc->n + (size_t)b->length > sc->cap) {
        size_t cap = sc->cap ? sc->cap : 16;
        while (cap < sc->n + (size_t)b->length) cap *= 2;
        qr_flight_hit *h = realloc(sc->hits, cap * sizeof(*h));
        if (!h) return qr_errf(err, err_len, QR_ERR_NOMEM, "flight search: out of memory");
        sc->hits = h;
        sc->cap = cap;
    }
    const qr_arrow_array *ids = &b->columns[ic], *scores = &b->columns[sc_col];
    for (int64_t i = 0; i < b->length; i++) {
        qr_flight_hit *h = &sc->hits[sc->n++];
        h->id = ((const uint64_t *)ids->values)[i];
        h->score = st == QR_ARROW_FLOAT32 ? ((const float *)scores->values)[i]
                                          : (float)((const double *)scores->values)[i];
    }
    return QR_OK;
}

qr_status qr_flight_search(qr_flight_client *c, const char *dataset, const float *vector, int32_t dim, int k,
                           qr_flight_hit **hits, size_t *n_hits, char *err, size_t err_len) {
    *hits = NULL;
    *n_hits = 0;
    if (!dataset || !vector || dim < 1 || k < 1)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "flight search: need a dataset, a vector and k >= 1");
    json_t *vec = json_array();
    for (int32_t i = 0; i < dim; i++) json_array_append_new(vec, json_real((double)vector[i]));
    char *ticket =
        json_text(json_pack("{s:{s:s, s:o, s:i}}", "search", "dataset", dataset, "vector", vec, "k", k));
    if (!ticket) return qr_errf(err, err_len, QR_ERR_NOMEM, "flight search: cannot build the ticket");
    search_ctx sc = {0};
    qr_status st = qr_flight_get(c, ticket, strlen(ticket), search_sink, &sc, NULL, err, err_len);
    free(ticket);
    if (st != QR_OK) {
        free(sc.hits);
        return st;
    }
    *hits = sc.hits;
    *n_hits = sc.n;
    return QR_OK;
}

/* ---- GetFlightInfo / ListFlights ----------------------------------------------------------------- */

void qr_flight_info_free(qr_flight_info *info) {
    if (!info) return;
    qr_arrow_schema_free(&info->schema);
    for (size_t i = 0; i < info->n_path; i++) free(info->path[i]);
    free(info->path);
    free(info->cmd);
    for (size_t i = 0; i < info->n_endpoints; i++) {
        free(info->endpoints[i].ticket);
        for (size_t j = 0; j < info->endpoints[i].n_locations; j++) free(info->endpoints[i].locations[j]);
        free(info->endpoints[i].locations);
    }
    free(info->endpoints);
    free(info->app_metadata);
    memset(info, 0, sizeof(*info));
}

/* malloc'ed copy of n bytes plus a NUL (non-NULL even for n == 0, unless out of memory). */
static uint8_t *copy_bytes(const uint8_t *p, size_t n) {
    uint8_t *d = malloc(n + 1);
    if (!d) return NULL;
    if (n) memcpy(d, p, n);
    d[n] = 0;
    return d;
}

/* Converts an unpacked FlightInfo into *out (zeroed first). */
static qr_status convert_info(const Arrow__Flight__Protocol__FlightInfo *fi, qr_flight_info *out, char *err,
                              size_t err_len) {
    memset(out, 0, sizeof(*out));
    out->total_records = fi->total_records;
    out->total_bytes = fi->total_bytes;
    if (fi->schema.len > 0) {
        size_t consumed, meta_len, body_len;
        const uint8_t *meta, *body;
        qr_status st = qr_arrow_next_message(fi->schema.data, fi->schema.len, &consumed, &meta, &meta_len, &body,
                                             &body_len, err, err_len);
        if (st == QR_OK && meta) st = qr_arrow_decode_schema(meta, meta_len, &out->schema, err, err_len);
        if (st != QR_OK) return st;
        out->has_schema = meta != NULL;
    }
    bool nomem = false;
    if (fi->flight_descriptor) {
        const Arrow__Flight__Protocol__FlightDescriptor *d = fi->flight_descriptor;
        out->descriptor_type = (int)d->type;
        if (d->n_path) {
            out->path = calloc(d->n_path, sizeof(char *));
            nomem |= !out->path;
            for (size_t i = 0; out->path && i < d->n_path; i++) {
                out->path[i] = (char *)copy_bytes((const uint8_t *)d->path[i], strlen(d->path[i]));
                nomem |= !out->path[i];
                out->n_path = i + 1;
            }
        }
        if (d->cmd.len) {
            out->cmd = copy_bytes(d->cmd.data, d->cmd.len);
            out->cmd_len = d->cmd.len;
            nomem |= !out->cmd;
        }
    }
    if (fi->n_endpoint) {
        out->endpoints = calloc(fi->n_endpoint, sizeof(*out->endpoints));
        nomem |= !out->endpoints;
        for (size_t i = 0; out->endpoints && i < fi->n_endpoint; i++) {
            const Arrow__Flight__Protocol__FlightEndpoint *e = fi->endpoint[i];
            qr_flight_endpoint *oe = &out->endpoints[i];
            out->n_endpoints = i + 1;
            if (e->ticket) {
                oe->ticket = copy_bytes(e->ticket->ticket.data, e->ticket->ticket.len);
                oe->ticket_len = e->ticket->ticket.len;
                nomem |= !oe->ticket;
            }
            if (e->n_location) {
                oe->locations = calloc(e->n_location, sizeof(char *));
                nomem |= !oe->locations;
                for (size_t j = 0; oe->locations && j < e->n_location; j++) {
                    const char *uri = e->location[j]->uri ? e->location[j]->uri : "";
                    oe->locations[j] = (char *)copy_bytes((const uint8_t *)uri, strlen(uri));
                    nomem |= !oe->locations[j];
                    oe->n_locations = j + 1;
                }
            }
        }
    }
    if (fi->app_metadata.len) {
        out->app_metadata = copy_bytes(fi->app_metadata.data, fi->app_metadata.len);
        out->app_metadata_len = fi->app_metadata.len;
        nomem |= !out->app_metadata;
    }
    return nomem ? qr_errf(err, err_len, QR_ERR_NOMEM, "flight: out of memory") : QR_OK;
}

typedef struct info_list {
    qr_flight_info *items;
    size_t n, cap;
} info_list;

static qr_status info_on_message(void *u, const uint8_t *data, size_t len, char *err, size_t err_len) {
    info_list *l = u;
    Arrow__Flight__Protocol__FlightInfo *fi = arrow__flight__protocol__flight_info__unpack(NULL, len, data);
    if (!fi) return qr_errf(err, err_len, QR_ERR_FORMAT, "flight: a message is not a FlightInfo");
    qr_status st = QR_OK;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        qr_flight_info *n = realloc(l->items, cap * sizeof(*n));
        if (!n) st = qr_errf(err, err_len, QR_ERR_NOMEM, "flight: out of memory");
        else {
            l->items = n;
            l->cap = cap;
        }
    }
    if (st == QR_OK) {
        st = convert_info(fi, &l->items[l->n], err, err_len);
        if (st == QR_OK) l->n++;
        else qr_flight_info_free(&l->items[l->n]);
    }
    arrow__flight__protocol__flight_info__free_unpacked(fi, NULL);
    return st;
}

static void info_list_free(info_list *l) {
    for (size_t i = 0; i < l->n; i++) qr_flight_info_free(&l->items[i]);
    free(l->items);
    memset(l, 0, sizeof(*l));
}

static qr_status info_on_retry(void *u) {
    info_list_free(u);
    return QR_OK;
}

qr_status qr_flight_get_info(qr_flight_client *c, const char *dataset, qr_flight_info *out, char *err,
                             size_t err_len) {
    memset(out, 0, sizeof(*out));
    if (!c || !dataset) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "flight GetFlightInfo: no dataset");
    Arrow__Flight__Protocol__FlightDescriptor d = ARROW__FLIGHT__PROTOCOL__FLIGHT_DESCRIPTOR__INIT;
    char *path[1] = {(char *)dataset};
    d.type = ARROW__FLIGHT__PROTOCOL__FLIGHT_DESCRIPTOR__DESCRIPTOR_TYPE__PATH;
    d.n_path = 1;
    d.path = path;
    info_list l = {0};
    qr_status st = fl_server_stream(c, true, "GetFlightInfo", &d.base, info_on_message, &l, info_on_retry, err, err_len);
    if (st == QR_OK && l.n != 1)
        st = qr_errf(err, err_len, QR_ERR_FORMAT, "flight GetFlightInfo: %zu replies, expected 1", l.n);
    if (st == QR_OK) {
        *out = l.items[0];
        l.n = 0;
    }
    info_list_free(&l);
    return st;
}

qr_status qr_flight_list(qr_flight_client *c, const void *criteria, size_t criteria_len, qr_flight_info **infos,
                         size_t *n_infos, char *err, size_t err_len) {
    *infos = NULL;
    *n_infos = 0;
    Arrow__Flight__Protocol__Criteria cr = ARROW__FLIGHT__PROTOCOL__CRITERIA__INIT;
    cr.expression.data = (uint8_t *)criteria;
    cr.expression.len = criteria ? criteria_len : 0;
    info_list l = {0};
    qr_status st = fl_server_stream(c, true, "ListFlights", &cr.base, info_on_message, &l, info_on_retry, err, err_len);
    if (st != QR_OK) {
        info_list_free(&l);
        return st;
    }
    *infos = l.items;
    *n_infos = l.n;
    return QR_OK;
}

/* ---- DoAction ----------------------------------------------------------------------------------- */

typedef struct result_list {
    qr_flight_result *items;
    size_t n, cap;
} result_list;

void qr_flight_results_free(qr_flight_result *results, size_t n) {
    for (size_t i = 0; i < n; i++) free(results[i].body);
    free(results);
}

static qr_status result_on_message(void *u, const uint8_t *data, size_t len, char *err, size_t err_len) {
    result_list *l = u;
    Arrow__Flight__Protocol__Result *r = arrow__flight__protocol__result__unpack(NULL, len, data);
    if (!r) return qr_errf(err, err_len, QR_ERR_FORMAT, "flight DoAction: a message is not a Result");
    qr_status st = QR_OK;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        qr_flight_result *n = realloc(l->items, cap * sizeof(*n));
        if (n) {
            l->items = n;
            l->cap = cap;
        }
    }
    uint8_t *body = l->n < l->cap ? copy_bytes(r->body.data, r->body.len) : NULL;
    if (!body) st = qr_errf(err, err_len, QR_ERR_NOMEM, "flight DoAction: out of memory");
    else l->items[l->n++] = (qr_flight_result){body, r->body.len};
    arrow__flight__protocol__result__free_unpacked(r, NULL);
    return st;
}

static qr_status result_on_retry(void *u) {
    result_list *l = u;
    qr_flight_results_free(l->items, l->n);
    memset(l, 0, sizeof(*l));
    return QR_OK;
}

qr_status qr_flight_action(qr_flight_client *c, const char *type, const void *body, size_t body_len,
                           qr_flight_result **results, size_t *n_results, char *err, size_t err_len) {
    *results = NULL;
    *n_results = 0;
    if (!c || !type) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "flight DoAction: no action type");
    Arrow__Flight__Protocol__Action a = ARROW__FLIGHT__PROTOCOL__ACTION__INIT;
    a.type = (char *)type;
    a.body.data = (uint8_t *)body;
    a.body.len = body ? body_len : 0;
    result_list l = {0};
    qr_status st = fl_server_stream(c, false, "DoAction", &a.base, result_on_message, &l, result_on_retry, err, err_len);
    if (st != QR_OK) {
        qr_flight_results_free(l.items, l.n);
        return st;
    }
    *results = l.items;
    *n_results = l.n;
    return QR_OK;
}

qr_status qr_flight_readiness(qr_flight_client *c, const char *dataset, char *status, size_t status_len, char *reason,
                              size_t reason_len, char *err, size_t err_len) {
    if (!dataset) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "flight readiness: no dataset");
    if (status_len) status[0] = 0;
    if (reason_len) reason[0] = 0;
    char *body = json_text(json_pack("{s:s}", "dataset", dataset));
    if (!body) return qr_errf(err, err_len, QR_ERR_NOMEM, "flight readiness: out of memory");
    qr_flight_result *res = NULL;
    size_t n = 0;
    qr_status st = qr_flight_action(c, "check_readiness", body, strlen(body), &res, &n, err, err_len);
    free(body);
    if (st != QR_OK) return st;
    json_error_t jerr;
    json_t *j = n > 0 ? json_loadb((const char *)res[0].body, res[0].len, 0, &jerr) : NULL;
    const char *s = j ? json_string_value(json_object_get(j, "status")) : NULL;
    const char *r = j ? json_string_value(json_object_get(j, "reason")) : NULL;
    snprintf(status, status_len, "%s", s ? s : n ? "(unparsable reply)" : "(no reply)");
    snprintf(reason, reason_len, "%s", r ? r : "");
    json_decref(j);
    qr_flight_results_free(res, n);
    return QR_OK;
}

qr_status qr_flight_wait_ready(qr_flight_client *c, const char *dataset, int64_t wait_ms, int64_t poll_ms,
                               char *err, size_t err_len) {
    double deadline = qr_time_s() + (double)wait_ms / 1000.0;
    for (;;) {
        char status[64], reason[192];
        qr_status st = qr_flight_readiness(c, dataset, status, sizeof status, reason, sizeof reason, err, err_len);
        if (st != QR_OK) return st;
        if (!strcmp(status, "READY")) return QR_OK;
        if (qr_time_s() >= deadline)
            return qr_errf(err, err_len, QR_ERR_IO, "flight: dataset '%s' not ready after %lld ms (last status %s%s%s)",
                           dataset, (long long)wait_ms, status, reason[0] ? ": " : "", reason);
        fl_sleep_s((double)(poll_ms > 0 ? poll_ms : 100) / 1000.0);
    }
}

qr_status qr_flight_parse_uri(const char *uri, char *target, size_t target_len, bool *tls, char *err,
                              size_t err_len) {
    static const struct { const char *scheme; bool tls; } schemes[] = {
        {"grpc://", false}, {"grpc+tcp://", false}, {"grpc+tls://", true}};
    const char *hp = uri ? uri : "";
    bool use_tls = false, known = false;
    for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++)
        if (!strncmp(hp, schemes[i].scheme, strlen(schemes[i].scheme))) {
            hp += strlen(schemes[i].scheme);
            use_tls = schemes[i].tls;
            known = true;
            break;
        }
    if (!known && strstr(hp, "://"))
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG,
                       "bad Flight address '%s': the scheme must be grpc://, grpc+tcp:// or grpc+tls://", uri ? uri : "");
    /* host: a name or IPv4 address, or an IPv6 address in brackets */
    const char *colon;
    if (hp[0] == '[') {
        const char *close = strchr(hp, ']');
        if (!close || close == hp + 1 || close[1] != ':')
            return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "bad Flight address '%s': expected [IPV6]:PORT", uri);
        colon = close + 1;
    } else {
        colon = strrchr(hp, ':');
        if (!colon || colon == hp)
            return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "bad Flight address '%s': expected HOST:PORT", uri);
        for (const char *q = hp; q < colon; q++)
            if (!(*q == '.' || *q == '-' || *q == '_' || (*q >= '0' && *q <= '9') || (*q >= 'a' && *q <= 'z') ||
                  (*q >= 'A' && *q <= 'Z')))
                return qr_errf(err, err_len, QR_ERR_INVALID_ARG,
                               "bad Flight address '%s': the host may hold only letters, digits, '.', '-' and '_'", uri);
    }
    const char *port = colon + 1;
    long v = 0;
    size_t nd = 0;
    for (; port[nd] >= '0' && port[nd] <= '9' && nd < 6; nd++) v = v * 10 + (port[nd] - '0');
    if (nd == 0 || port[nd] != 0 || v < 1 || v > 65535)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG,
                       "bad Flight address '%s': the port must be a number from 1 to 65535%s", uri,
                       port[nd] == '/' ? " (and nothing after it)" : "");
    const size_t len = strlen(hp);
    if (len + 1 > target_len)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "bad Flight address '%s': too long", uri);
    memcpy(target, hp, len + 1);
    if (tls) *tls = use_tls;
    return QR_OK;
}
