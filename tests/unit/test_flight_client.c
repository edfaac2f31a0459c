/* test_flight_client.c — Flight client behaviour that needs no Flight server: argument checks, retries
 * with exponential backoff on UNAVAILABLE (closed port), call deadlines (a TCP peer that never speaks
 * HTTP/2), whole-stream DoPut retries with rewind. The server side is covered by
 * tests/integration/test_flight*.py. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "flight/embed_batch.h"
#include "flight/flight_client.h"
#include "flight/flight_internal.h"
#include "util/util.h"

/* Binds a TCP socket on 127.0.0.1 with an ephemeral port; returns the fd and sets *port. */
static int bind_loopback(int *port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK), .sin_port = 0};
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t n = sizeof a;
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &n), 0);
    *port = ntohs(a.sin_port);
    return fd;
}

/* Flight URIs: the accepted forms give "HOST:PORT"; bad ones are refused with the reason (issue 35:
 * grpc://127.0.0.1:99999 used to connect to port 99999 mod 65536). */
static void test_parse_uri(void **state) {
    (void)state;
    char t[64], err[256];
    bool tls = true;
    assert_int_equal(qr_flight_parse_uri("grpc://127.0.0.1:3000", t, sizeof t, &tls, err, sizeof err), QR_OK);
    assert_string_equal(t, "127.0.0.1:3000");
    assert_false(tls);
    assert_int_equal(qr_flight_parse_uri("grpc+tls://db.example-1.org:65535", t, sizeof t, &tls, err, sizeof err), QR_OK);
    assert_string_equal(t, "db.example-1.org:65535");
    assert_true(tls);
    assert_int_equal(qr_flight_parse_uri("grpc+tcp://[::1]:1", t, sizeof t, &tls, err, sizeof err), QR_OK);
    assert_string_equal(t, "[::1]:1");
    assert_int_equal(qr_flight_parse_uri("localhost:3001", t, sizeof t, NULL, err, sizeof err), QR_OK);
    assert_string_equal(t, "localhost:3001");
    static const struct { const char *uri, *why; } bad[] = {
        {"grpc://127.0.0.1:99999", "1 to 65535"}, {"grpc://127.0.0.1:0", "1 to 65535"},
        {"grpc://127.0.0.1:", "1 to 65535"},      {"grpc://127.0.0.1:30a0", "1 to 65535"},
        {"grpc://127.0.0.1:3000/x", "nothing after"}, {"grpc://127.0.0.1", "HOST:PORT"},
        {"grpc://:3000", "HOST:PORT"},             {"http://h:1", "scheme"},
        {"grpc://[::1]3000", "[IPV6]:PORT"},      {"grpc://ho st:1", "host may hold"},
        {"", "HOST:PORT"},                         {"grpc://127.0.0.1:-1", "1 to 65535"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        assert_int_equal(qr_flight_parse_uri(bad[i].uri, t, sizeof t, &tls, err, sizeof err), QR_ERR_INVALID_ARG);
        if (!strstr(err, bad[i].why)) fail_msg("%s: '%s' does not say '%s'", bad[i].uri, err, bad[i].why);
    }
    assert_int_equal(qr_flight_parse_uri("grpc://a-very-long-host-name.example.org:3000", t, 8, &tls, err, sizeof err),
                     QR_ERR_INVALID_ARG);
}

static void test_options_and_create(void **state) {
    (void)state;
    qr_flight_options o;
    qr_flight_options_init(&o);
    assert_int_equal(o.timeout_ms, 60000);
    assert_int_equal(o.max_retries, 4);
    qr_flight_client *c = NULL;
    char err[256];
    assert_int_equal(qr_flight_client_create(&o, &c, err, sizeof err), QR_ERR_INVALID_ARG);
    assert_null(c);
    assert_non_null(strstr(err, "target"));
    assert_string_equal(qr_flight_grpc_status_name(14), "UNAVAILABLE");
    assert_string_equal(qr_flight_grpc_status_name(3), "INVALID_ARGUMENT");
    assert_string_equal(qr_flight_grpc_status_name(16), "UNAUTHENTICATED");
}

/* A closed port gives UNAVAILABLE; the client retries with exponential backoff, then fails. */
static void test_unavailable_retries(void **state) {
    (void)state;
    int port;
    int fd = bind_loopback(&port);
    close(fd); /* nothing listens there now */
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", port);
    qr_flight_options o;
    qr_flight_options_init(&o);
    o.data_target = target;
    o.max_retries = 3;
    o.retry_initial_ms = 40;
    o.timeout_ms = 5000;
    qr_flight_client *c;
    char err[512];
    assert_int_equal(qr_flight_client_create(&o, &c, err, sizeof err), QR_OK);
    double t0 = qr_time_s();
    qr_flight_info info;
    assert_int_equal(qr_flight_get_info(c, "ds", &info, err, sizeof err), QR_ERR_IO);
    double dt = qr_time_s() - t0;
    assert_int_equal(qr_flight_last_grpc_status(c), 14);
    assert_non_null(strstr(err, "UNAVAILABLE"));
    assert_non_null(strstr(err, "GetFlightInfo"));
    /* 3 retries: 40 + 80 + 160 ms (+ up to 25% jitter each) */
    assert_true(dt >= 0.28);
    assert_true(dt < 4.0);
    qr_flight_client_free(c);
}

typedef struct listener {
    int fd;
    int conns[16];
    int n;
    volatile int stop;
} listener;

/* Accepts connections and keeps them open without ever answering. */
static void *silent_server(void *p) {
    listener *l = p;
    while (!l->stop) {
        int c = accept(l->fd, NULL, NULL);
        if (c < 0) break;
        if (l->n < 16) l->conns[l->n++] = c;
        else close(c);
    }
    return NULL;
}

/* A peer that accepts TCP but never speaks HTTP/2: the call ends at its deadline. */
static void test_deadline(void **state) {
    (void)state;
    listener l = {0};
    int port;
    l.fd = bind_loopback(&port);
    assert_int_equal(listen(l.fd, 16), 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, silent_server, &l), 0);
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", port);
    qr_flight_options o;
    qr_flight_options_init(&o);
    o.data_target = target;
    o.timeout_ms = 300;
    o.max_retries = 0;
    qr_flight_client *c;
    char err[512];
    assert_int_equal(qr_flight_client_create(&o, &c, err, sizeof err), QR_OK);
    double t0 = qr_time_s();
    qr_flight_result *res;
    size_t n;
    assert_int_equal(qr_flight_action(c, "check_readiness", "{}", 2, &res, &n, err, sizeof err), QR_ERR_IO);
    double dt = qr_time_s() - t0;
    assert_int_equal(qr_flight_last_grpc_status(c), 4); /* DEADLINE_EXCEEDED */
    assert_non_null(strstr(err, "DEADLINE_EXCEEDED"));
    assert_true(dt >= 0.25);
    assert_true(dt < 3.0);
    qr_flight_client_free(c);
    l.stop = 1;
    shutdown(l.fd, SHUT_RDWR);
    close(l.fd);
    pthread_join(th, NULL);
    for (int i = 0; i < l.n; i++) close(l.conns[i]);
}

typedef struct src_state {
    qr_embed_batch *eb;
    int sent;      /* batches handed out in this attempt */
    int rewinds;
} src_state;

static qr_status src_next(void *u, const qr_arrow_batch **batch, char *err, size_t err_len) {
    src_state *s = u;
    *batch = s->sent++ < 3 ? qr_embed_batch_view(s->eb) : NULL;
    return QR_OK;
}

static qr_status src_rewind(void *u, char *err, size_t err_len) {
    src_state *s = u;
    s->sent = 0;
    s->rewinds++;
    return QR_OK;
}

/* DoPut to a closed port: retried from the start (rewind) max_retries times, then the error. */
static void test_put_retries_with_rewind(void **state) {
    (void)state;
    int port;
    close(bind_loopback(&port));
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", port);
    qr_flight_options o;
    qr_flight_options_init(&o);
    o.data_target = target;
    o.max_retries = 2;
    o.retry_initial_ms = 10;
    qr_flight_client *c;
    char err[512];
    assert_int_equal(qr_flight_client_create(&o, &c, err, sizeof err), QR_OK);
    src_state s = {0};
    assert_int_equal(qr_embed_batch_create(8, 4, true, false, &s.eb), QR_OK);
    float v[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    assert_int_equal(qr_embed_batch_append(s.eb, 1, v, "one", NULL), QR_OK);
    qr_arrow_schema schema;
    assert_int_equal(qr_embed_batch_schema(s.eb, "euclidean", &schema), QR_OK);
    qr_flight_put_stats st;
    qr_status rc = qr_flight_put(c, "ds", &schema, src_next, src_rewind, &s, &st, err, sizeof err);
    assert_int_not_equal(rc, QR_OK);
    assert_int_equal(st.attempts, 3);
    assert_int_equal(s.rewinds, 2);
    assert_non_null(strstr(err, "DoPut"));
    /* without rewind there is a single attempt */
    s.sent = 0;
    rc = qr_flight_put(c, "ds", &schema, src_next, NULL, &s, &st, err, sizeof err);
    assert_int_not_equal(rc, QR_OK);
    assert_int_equal(st.attempts, 1);
    /* bad arguments */
    assert_int_equal(qr_flight_put(c, "", &schema, src_next, NULL, &s, &st, err, sizeof err), QR_ERR_INVALID_ARG);
    qr_arrow_schema_free(&schema);
    qr_embed_batch_free(s.eb);
    qr_flight_client_free(c);
}

/* The hand-written FlightData of the DoPut hot path parses with protobuf-c into exactly the header
 * and body of the IPC encoder; pooled buffers outlive an early pool release. */
static void test_pack_batch_is_flight_data(void **state) {
    (void)state;
    grpc_init();
    qr_embed_batch *eb;
    assert_int_equal(qr_embed_batch_create(5, 8, true, true, &eb), QR_OK);
    float v[5];
    for (int r = 0; r < 300; r++) {
        for (int j = 0; j < 5; j++) v[j] = (float)(r * 5 + j) * 0.5f;
        assert_int_equal(qr_embed_batch_append(eb, r * 3, v, r % 4 ? "text" : "", "{\"k\":1}"), QR_OK);
    }
    qr_arrow_schema schema;
    assert_int_equal(qr_embed_batch_schema(eb, "cosine", &schema), QR_OK);
    const qr_arrow_batch *b = qr_embed_batch_view(eb);
    char err[256];
    qr_arrow_message ref;
    assert_int_equal(qr_arrow_encode_batch(&schema, b, &ref, err, sizeof err), QR_OK);
    fl_pool *pool = fl_pool_create();
    grpc_byte_buffer *bufs[6];
    for (int i = 0; i < 6; i++) { /* more than the pool holds: the rest are fresh buffers */
        assert_int_equal(fl_pack_batch(pool, &schema, b, &bufs[i], err, sizeof err), QR_OK);
        grpc_slice sl = fl_flatten(bufs[i]);
        Arrow__Flight__Protocol__FlightData *fd =
            arrow__flight__protocol__flight_data__unpack(NULL, GRPC_SLICE_LENGTH(sl), GRPC_SLICE_START_PTR(sl));
        assert_non_null(fd);
        assert_null(fd->flight_descriptor);
        assert_int_equal(fd->data_header.len, ref.metadata_len);
        assert_memory_equal(fd->data_header.data, ref.metadata, ref.metadata_len);
        assert_int_equal(fd->data_body.len, ref.body_len);
        assert_memory_equal(fd->data_body.data, ref.body, ref.body_len);
        arrow__flight__protocol__flight_data__free_unpacked(fd, NULL);
        grpc_slice_unref(sl);
    }
    for (int i = 0; i < 3; i++) grpc_byte_buffer_destroy(bufs[i]); /* slots come back ... */
    assert_int_equal(fl_pack_batch(pool, &schema, b, &bufs[0], err, sizeof err), QR_OK); /* ... and are reused */
    fl_pool_release(pool); /* buffers still lent keep the pool's memory alive */
    grpc_byte_buffer_destroy(bufs[0]);
    for (int i = 3; i < 6; i++) grpc_byte_buffer_destroy(bufs[i]);
    /* an invalid batch is refused before anything is sent */
    qr_arrow_batch bad = *b;
    bad.n_columns = 1;
    grpc_byte_buffer *none;
    assert_int_equal(fl_pack_batch(NULL, &schema, &bad, &none, err, sizeof err), QR_ERR_INVALID_ARG);
    assert_null(none);
    qr_arrow_message_free(&ref);
    qr_arrow_schema_free(&schema);
    qr_embed_batch_free(eb);
    grpc_shutdown();
}

int main(void) {
    qr_log_set_level(QR_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_uri),
        cmocka_unit_test(test_options_and_create),
        cmocka_unit_test(test_unavailable_retries),
        cmocka_unit_test(test_deadline),
        cmocka_unit_test(test_put_retries_with_rewind),
        cmocka_unit_test(test_pack_batch_is_flight_data),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
