/* flight_client.h — an Arrow Flight client (gRPC core C API + protobuf-c + our Arrow IPC code),
 * shaped for Longbow (see docs: "Longbow over Arrow Flight: the wire facts"):
 *  - a data endpoint (DoPut, DoGet, DoAction) and a meta endpoint (GetFlightInfo, ListFlights);
 *  - DoPut of record batches to a PATH descriptor naming the dataset, honouring PutResults whose
 *    app_metadata is {"status":"slow_down"} by backing off;
 *  - readiness polling (DoAction check_readiness) and JSON DoGet tickets for scans and searches.
 * Every call has a deadline (options.timeout_ms). Calls that fail with UNAVAILABLE before any result
 * reached the caller are retried with exponential backoff (options.max_retries).
 *
 * A client is not thread-safe: use one per thread (they may share nothing but the process).
 */
#ifndef QR_FLIGHT_CLIENT_H
#define QR_FLIGHT_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "arrow_ipc.h"

typedef struct qr_flight_client qr_flight_client;

typedef struct qr_flight_options {
    const char *data_target;      /* "host:port" of DoPut/DoGet/DoAction (Longbow: port 3000); required */
    const char *meta_target;      /* "host:port" of GetFlightInfo/ListFlights (Longbow: 3001); NULL = data */
    bool tls;                     /* use TLS (grpc_ssl_credentials) instead of plaintext */
    const char *tls_root_pem;     /* PEM root certificates (the text, not a path); NULL = system roots */
    const char *tls_server_name;  /* expected server name when it differs from the target host; or NULL */
    const char *bearer_token;     /* sent as "authorization: Bearer <token>" on every call; or NULL */
    int64_t timeout_ms;           /* deadline of each call in ms; 0 = 60000; < 0 = none */
    int max_retries;              /* retries after UNAVAILABLE (default 4) */
    int64_t retry_initial_ms;     /* first retry delay (default 100 ms), doubled each retry ... */
    int64_t retry_max_ms;         /* ... up to this (default 2000 ms); each delay gets 0-25% jitter */
    int64_t slow_down_initial_ms; /* DoPut pause after a slow_down (default 25 ms), doubled while they
                                     keep coming ... */
    int64_t slow_down_max_ms;     /* ... up to this (default 1000 ms) */
    bool ignore_slow_down;        /* testing only: do not back off on slow_down */
} qr_flight_options;

/* Parses a Flight URI — grpc://HOST:PORT, grpc+tcp://HOST:PORT, grpc+tls://HOST:PORT or a bare
 * HOST:PORT; HOST a name, an IPv4 address or [IPV6] — into the gRPC target "HOST:PORT" (target, of
 * target_len bytes) and *tls (may be NULL). QR_ERR_INVALID_ARG, with the reason, for another scheme,
 * an empty or malformed host, a port outside 1..65535 (gRPC would take 99999 as 99999 mod 65536), or
 * anything after the port. */
qr_status qr_flight_parse_uri(const char *uri, char *target, size_t target_len, bool *tls, char *err,
                              size_t err_len);

/* Fills *o with the defaults above (targets NULL). */
void qr_flight_options_init(qr_flight_options *o);

/* Creates a client (channels connect lazily, on the first call). Strings in *o are copied. */
qr_status qr_flight_client_create(const qr_flight_options *o, qr_flight_client **out, char *err, size_t err_len);
/* Closes the channels and frees the client (NULL is fine). */
void qr_flight_client_free(qr_flight_client *c);
/* The gRPC status code (grpc_status_code) of the client's last finished call (0 = OK). */
int qr_flight_last_grpc_status(const qr_flight_client *c);
/* Static name of a gRPC status code ("UNAVAILABLE", ...). */
const char *qr_flight_grpc_status_name(int code);

/* ---- DoPut --------------------------------------------------------------------------------------- */

/* Produces the batches of a DoPut, one call per batch: sets *batch to the next batch (which must stay
 * valid until the next call) or to NULL at the end. */
typedef qr_status (*qr_flight_batch_source)(void *user, const qr_arrow_batch **batch, char *err, size_t err_len);
/* Restarts a source from its first batch (for retrying a whole DoPut). */
typedef qr_status (*qr_flight_source_rewind)(void *user, char *err, size_t err_len);

typedef struct qr_flight_put_stats {
    int64_t rows;          /* rows sent in the successful attempt */
    int64_t batches;       /* record batches sent in the successful attempt */
    int64_t bytes;         /* FlightData bytes sent (all attempts) */
    int64_t put_results;   /* PutResult messages received */
    int64_t slow_downs;    /* ... of which were {"status":"slow_down"} */
    double backoff_s;      /* total time spent backing off after slow_down */
    int attempts;          /* 1 + retries */
} qr_flight_put_stats;

/* DoPut: sends the schema, then every batch of `next` (each validated against `schema`), to the
 * dataset `dataset` (FlightDescriptor PATH [dataset]); then half-closes and reads until the server
 * ends the stream. When `rewind` is not NULL a DoPut that fails with UNAVAILABLE is retried from the
 * start (the server must treat rows idempotently, e.g. upsert by id). stats may be NULL. */
qr_status qr_flight_put(qr_flight_client *c, const char *dataset, const qr_arrow_schema *schema,
                        qr_flight_batch_source next, qr_flight_source_rewind rewind, void *user,
                        qr_flight_put_stats *stats, char *err, size_t err_len);

/* ---- DoGet --------------------------------------------------------------------------------------- */

/* Receives each batch of a DoGet. `schema` is the stream's schema; both pointers are valid only during
 * the call. Return non-QR_OK to stop the stream (the error is passed back to the caller). */
typedef qr_status (*qr_flight_batch_sink)(void *user, const qr_arrow_schema *schema, const qr_arrow_batch *batch,
                                          char *err, size_t err_len);

/* DoGet with an opaque ticket. schema_out (optional) receives a copy of the stream schema (free with
 * qr_arrow_schema_free). */
qr_status qr_flight_get(qr_flight_client *c, const void *ticket, size_t ticket_len, qr_flight_batch_sink sink,
                        void *user, qr_arrow_schema *schema_out, char *err, size_t err_len);
/* Scans a dataset: ticket {"dataset": dataset, "filters": filters_json} (filters_json is a JSON array
 * as text; NULL = []). */
qr_status qr_flight_scan(qr_flight_client *c, const char *dataset, const char *filters_json,
                         qr_flight_batch_sink sink, void *user, qr_arrow_schema *schema_out, char *err,
                         size_t err_len);

typedef struct qr_flight_hit {
    uint64_t id;  /* row id */
    float score;  /* 1 / (1 + distance): higher is nearer */
} qr_flight_hit;

/* Nearest-neighbour search: ticket {"search": {"dataset", "vector": [dim floats], "k"}}. On success
 * *hits (malloc'ed, free with free()) holds *n_hits results in server order (best first). */
qr_status qr_flight_search(qr_flight_client *c, const char *dataset, const float *vector, int32_t dim, int k,
                           qr_flight_hit **hits, size_t *n_hits, char *err, size_t err_len);

/* ---- metadata calls ------------------------------------------------------------------------------ */

typedef struct qr_flight_endpoint {
    uint8_t *ticket;      /* [ticket_len] */
    size_t ticket_len;
    char **locations;     /* [n_locations] URIs */
    size_t n_locations;
} qr_flight_endpoint;

typedef struct qr_flight_info {
    bool has_schema;          /* the server sent a schema */
    qr_arrow_schema schema;   /* decoded when has_schema */
    int descriptor_type;      /* 0 unknown, 1 PATH, 2 CMD */
    char **path;              /* [n_path] descriptor path */
    size_t n_path;
    uint8_t *cmd;             /* [cmd_len] descriptor command */
    size_t cmd_len;
    qr_flight_endpoint *endpoints; /* [n_endpoints] */
    size_t n_endpoints;
    int64_t total_records;    /* -1 = unknown */
    int64_t total_bytes;      /* -1 = unknown */
    uint8_t *app_metadata;    /* [app_metadata_len] */
    size_t app_metadata_len;
} qr_flight_info;

/* Frees what an info owns and zeroes it. */
void qr_flight_info_free(qr_flight_info *info);
/* GetFlightInfo on the meta endpoint for the PATH descriptor [dataset]. */
qr_status qr_flight_get_info(qr_flight_client *c, const char *dataset, qr_flight_info *out, char *err,
                             size_t err_len);
/* ListFlights on the meta endpoint. *infos (free each with qr_flight_info_free, then free()) holds
 * *n_infos entries. criteria may be NULL. */
qr_status qr_flight_list(qr_flight_client *c, const void *criteria, size_t criteria_len, qr_flight_info **infos,
                         size_t *n_infos, char *err, size_t err_len);

typedef struct qr_flight_result {
    uint8_t *body;        /* [len] + a NUL terminator */
    size_t len;
} qr_flight_result;

/* DoAction on the data endpoint. *results (free with qr_flight_results_free) holds *n_results bodies. */
qr_status qr_flight_action(qr_flight_client *c, const char *type, const void *body, size_t body_len,
                           qr_flight_result **results, size_t *n_results, char *err, size_t err_len);
void qr_flight_results_free(qr_flight_result *results, size_t n);

/* One DoAction check_readiness {"dataset": dataset}: the reply's "status" (READY, BUSY, NOT_FOUND, ...)
 * and "reason" ("" when absent) into the buffers. Fails only when the call fails. */
qr_status qr_flight_readiness(qr_flight_client *c, const char *dataset, char *status, size_t status_len, char *reason,
                              size_t reason_len, char *err, size_t err_len);
/* Polls qr_flight_readiness every poll_ms until the status is "READY"; fails after wait_ms with the
 * last status and reason. */
qr_status qr_flight_wait_ready(qr_flight_client *c, const char *dataset, int64_t wait_ms, int64_t poll_ms,
                               char *err, size_t err_len);

#endif /* QR_FLIGHT_CLIENT_H */
