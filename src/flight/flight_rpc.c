/* flight_rpc.c — gRPC core plumbing of the Flight client: channels, calls, completion queues, batch
 * operations, status mapping, retries with exponential backoff. */
#define _POSIX_C_SOURCE 200809L
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "flight_internal.h"
#include "util/util.h"

#define TAG(t) ((void *)(intptr_t)(t))

void qr_flight_options_init(qr_flight_options *o) {
    memset(o, 0, sizeof(*o));
    o->timeout_ms = 60000;
    o->max_retries = 4;
    o->retry_initial_ms = 100;
    o->retry_max_ms = 2000;
    o->slow_down_initial_ms = 25;
    o->slow_down_max_ms = 1000;
}

const char *qr_flight_grpc_status_name(int code) {
    static const char *names[] = {"OK",
                                  "CANCELLED",
                                  "UNKNOWN",
                                  "INVALID_ARGUMENT",
                                  "DEADLINE_EXCEEDED",
                                  "NOT_FOUND",
                                  "ALREADY_EXISTS",
                                  "PERMISSION_DENIED",
                                  "RESOURCE_EXHAUSTED",
                                  "FAILED_PRECONDITION",
                                  "ABORTED",
                                  "OUT_OF_RANGE",
                                  "UNIMPLEMENTED",
                                  "INTERNAL",
                                  "UNAVAILABLE",
                                  "DATA_LOSS",
                                  "UNAUTHENTICATED"};
    if (code >= 0 && code < (int)(sizeof(names) / sizeof(names[0]))) return names[code];
    return "UNKNOWN_STATUS";
}

int qr_flight_last_grpc_status(const qr_flight_client *c) { return c ? c->last_status : 0; }

/* Maps a gRPC status to our status enum. */
static qr_status map_status(grpc_status_code code) {
    switch (code) {
    case GRPC_STATUS_OK: return QR_OK;
    case GRPC_STATUS_INVALID_ARGUMENT:
    case GRPC_STATUS_FAILED_PRECONDITION:
    case GRPC_STATUS_OUT_OF_RANGE:
    case GRPC_STATUS_ALREADY_EXISTS:
    case GRPC_STATUS_UNAUTHENTICATED:
    case GRPC_STATUS_PERMISSION_DENIED: return QR_ERR_INVALID_ARG;
    case GRPC_STATUS_NOT_FOUND: return QR_ERR_NOT_FOUND;
    case GRPC_STATUS_UNIMPLEMENTED: return QR_ERR_UNSUPPORTED;
    default: return QR_ERR_IO;
    }
}

static char *dup_or_null(const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

qr_status qr_flight_client_create(const qr_flight_options *o, qr_flight_client **out, char *err, size_t err_len) {
    *out = NULL;
    if (!o || !o->data_target || !o->data_target[0])
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "flight: a data target (host:port) is required");
    qr_flight_client *c = calloc(1, sizeof(*c));
    if (!c) return qr_errf(err, err_len, QR_ERR_NOMEM, "flight: out of memory");
    c->data_target = dup_or_null(o->data_target);
    c->meta_target = dup_or_null(o->meta_target && o->meta_target[0] ? o->meta_target : o->data_target);
    if (!c->data_target || !c->meta_target) {
        free(c->data_target);
        free(c->meta_target);
        free(c);
        return qr_errf(err, err_len, QR_ERR_NOMEM, "flight: out of memory");
    }
    c->timeout_ms = o->timeout_ms == 0 ? 60000 : o->timeout_ms;
    c->max_retries = o->max_retries < 0 ? 0 : o->max_retries;
    c->retry_initial_ms = o->retry_initial_ms > 0 ? o->retry_initial_ms : 100;
    c->retry_max_ms = o->retry_max_ms > 0 ? o->retry_max_ms : 2000;
    c->slow_down_initial_ms = o->slow_down_initial_ms > 0 ? o->slow_down_initial_ms : 25;
    c->slow_down_max_ms = o->slow_down_max_ms > 0 ? o->slow_down_max_ms : 1000;
    c->ignore_slow_down = o->ignore_slow_down;
    c->rng = 0x9E3779B97F4A7C15ull ^ (uint64_t)(qr_time_s() * 1e9);

    grpc_init();
    if (o->bearer_token && o->bearer_token[0]) {
        size_t n = strlen(o->bearer_token) + 8;
        char *v = malloc(n);
        if (!v) {
            qr_flight_client_free(c);
            return qr_errf(err, err_len, QR_ERR_NOMEM, "flight: out of memory");
        }
        snprintf(v, n, "Bearer %s", o->bearer_token);
        c->auth_key = grpc_slice_from_static_string("authorization");
        c->auth_value = grpc_slice_from_copied_string(v);
        c->has_auth = true;
        free(v);
    }
    grpc_channel_credentials *creds =
        o->tls ? grpc_ssl_credentials_create(o->tls_root_pem, NULL, NULL, NULL) : grpc_insecure_credentials_create();
    grpc_arg args[7];
    int n_args = 0;
    args[n_args++] = (grpc_arg){.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, .value.integer = -1};
    args[n_args++] = (grpc_arg){.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, .value.integer = -1};
    /* reconnect quickly after a server restart, so that our own retries can succeed (the minimum
     * backoff is left alone: gRPC also uses it as the connection attempt timeout) */
    args[n_args++] = (grpc_arg){.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, .value.integer = 100};
    args[n_args++] = (grpc_arg){.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, .value.integer = 1000};
    /* retries are ours (gRPC's would buffer every streamed message) */
    args[n_args++] = (grpc_arg){.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_ENABLE_RETRIES, .value.integer = 0};
    if (o->tls && o->tls_server_name && o->tls_server_name[0])
        args[n_args++] = (grpc_arg){.type = GRPC_ARG_STRING, .key = GRPC_SSL_TARGET_NAME_OVERRIDE_ARG,
                                    .value.string = (char *)o->tls_server_name};
    grpc_channel_args chargs = {.num_args = (size_t)n_args, .args = args};
    c->data_channel = grpc_channel_create(c->data_target, creds, &chargs);
    c->meta_channel = strcmp(c->meta_target, c->data_target) == 0 ? c->data_channel
                                                                   : grpc_channel_create(c->meta_target, creds, &chargs);
    grpc_channel_credentials_release(creds);
    if (!c->data_channel || !c->meta_channel) {
        qr_flight_client_free(c);
        return qr_errf(err, err_len, QR_ERR_IO, "flight: cannot create a gRPC channel to %s", o->data_target);
    }
    *out = c;
    return QR_OK;
}

void qr_flight_client_free(qr_flight_client *c) {
    if (!c) return;
    if (c->meta_channel && c->meta_channel != c->data_channel) grpc_channel_destroy(c->meta_channel);
    if (c->data_channel) grpc_channel_destroy(c->data_channel);
    if (c->has_auth) {
        grpc_slice_unref(c->auth_key);
        grpc_slice_unref(c->auth_value);
    }
    free(c->data_target);
    free(c->meta_target);
    free(c);
    grpc_shutdown();
}

/* ---- calls -------------------------------------------------------------------------------------- */

/* Cancels, drains and frees a call whose status will not be reported. */
static void call_abort(fl_call *call) {
    grpc_call_cancel(call->call, NULL);
    for (int t = 1; t < FL_TAG_COUNT; t++)
        while (call->pending[t]) fl_call_pump(call, -1);
    bool r;
    char e[8];
    (void)fl_call_finish(call, &r, e, sizeof(e));
}

qr_status fl_call_open(qr_flight_client *c, bool meta, const char *method, fl_call *call, char *err, size_t err_len) {
    memset(call, 0, sizeof(*call));
    call->client = c;
    call->method = method;
    call->details = grpc_empty_slice();
    grpc_metadata_array_init(&call->initial_md);
    grpc_metadata_array_init(&call->trailing_md);
    call->cq = grpc_completion_queue_create_for_next(NULL);
    char path[128];
    snprintf(path, sizeof(path), "/arrow.flight.protocol.FlightService/%s", method);
    grpc_slice m = grpc_slice_from_copied_string(path);
    gpr_timespec deadline =
        c->timeout_ms < 0 ? gpr_inf_future(GPR_CLOCK_REALTIME)
                          : gpr_time_add(gpr_now(GPR_CLOCK_REALTIME), gpr_time_from_millis(c->timeout_ms, GPR_TIMESPAN));
    call->call = grpc_channel_create_call(meta ? c->meta_channel : c->data_channel, NULL, GRPC_PROPAGATE_DEFAULTS,
                                          call->cq, m, NULL, deadline, NULL);
    grpc_slice_unref(m);
    if (!call->call) {
        grpc_completion_queue_shutdown(call->cq);
        while (grpc_completion_queue_next(call->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
               GRPC_QUEUE_SHUTDOWN) {
        }
        grpc_completion_queue_destroy(call->cq);
        grpc_metadata_array_destroy(&call->initial_md);
        grpc_metadata_array_destroy(&call->trailing_md);
        return qr_errf(err, err_len, QR_ERR_IO, "flight %s: cannot create the call", method);
    }
    grpc_op ops[2];
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (c->has_auth) {
        call->auth.key = c->auth_key;
        call->auth.value = c->auth_value;
        ops[0].data.send_initial_metadata.count = 1;
        ops[0].data.send_initial_metadata.metadata = &call->auth;
    }
    ops[1].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[1].data.recv_initial_metadata.recv_initial_metadata = &call->initial_md;
    grpc_call_error e = grpc_call_start_batch(call->call, ops, 2, TAG(FL_TAG_START), NULL);
    if (e == GRPC_CALL_OK) call->pending[FL_TAG_START] = true;
    grpc_op st;
    memset(&st, 0, sizeof(st));
    st.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    st.data.recv_status_on_client.trailing_metadata = &call->trailing_md;
    st.data.recv_status_on_client.status = &call->status;
    st.data.recv_status_on_client.status_details = &call->details;
    st.data.recv_status_on_client.error_string = &call->error_string;
    grpc_call_error e2 = e == GRPC_CALL_OK ? grpc_call_start_batch(call->call, &st, 1, TAG(FL_TAG_STATUS), NULL) : e;
    if (e2 == GRPC_CALL_OK) call->pending[FL_TAG_STATUS] = true;
    if (e != GRPC_CALL_OK || e2 != GRPC_CALL_OK) {
        call_abort(call);
        return qr_errf(err, err_len, QR_ERR_INTERNAL, "flight %s: grpc_call_start_batch failed (%d)", method,
                       (int)(e != GRPC_CALL_OK ? e : e2));
    }
    return QR_OK;
}

bool fl_call_pump(fl_call *call, double until_s) {
    gpr_timespec deadline;
    if (until_s < 0) {
        deadline = gpr_inf_future(GPR_CLOCK_MONOTONIC);
    } else {
        double left = until_s - qr_time_s();
        if (left < 0) left = 0;
        deadline = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_micros((int64_t)(left * 1e6), GPR_TIMESPAN));
    }
    grpc_event ev = grpc_completion_queue_next(call->cq, deadline, NULL);
    if (ev.type != GRPC_OP_COMPLETE) return false;
    int tag = (int)(intptr_t)ev.tag;
    if (tag <= 0 || tag >= FL_TAG_COUNT) return true;
    call->pending[tag] = false;
    call->done[tag] = true;
    call->ok[tag] = ev.success != 0;
    if (tag == FL_TAG_SEND && call->send_buf) {
        grpc_byte_buffer_destroy(call->send_buf);
        call->send_buf = NULL;
    }
    return true;
}

bool fl_call_wait(fl_call *call, int tag) {
    while (!call->done[tag]) {
        if (!call->pending[tag]) return false;
        fl_call_pump(call, -1);
    }
    return call->ok[tag];
}

/* Starts a batch of ops under `tag`, marking it pending. */
static qr_status start_ops(fl_call *call, grpc_op *ops, size_t n, int tag) {
    if (call->pending[tag]) return QR_ERR_INTERNAL;
    call->done[tag] = call->ok[tag] = false;
    grpc_call_error e = grpc_call_start_batch(call->call, ops, n, TAG(tag), NULL);
    if (e != GRPC_CALL_OK) return QR_ERR_INTERNAL;
    call->pending[tag] = true;
    return QR_OK;
}

qr_status fl_call_start_send(fl_call *call, grpc_byte_buffer *bb, bool close_send) {
    if (!bb) return QR_ERR_NOMEM;
    grpc_op ops[2];
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_MESSAGE;
    ops[0].data.send_message.send_message = bb;
    ops[1].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    if (call->send_buf) grpc_byte_buffer_destroy(call->send_buf);
    call->send_buf = bb;
    qr_status st = start_ops(call, ops, close_send ? 2 : 1, FL_TAG_SEND);
    if (st != QR_OK) {
        grpc_byte_buffer_destroy(bb);
        call->send_buf = NULL;
    }
    return st;
}

qr_status fl_call_start_close(fl_call *call) {
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    return start_ops(call, &op, 1, FL_TAG_CLOSE);
}

qr_status fl_call_start_recv(fl_call *call) {
    if (call->recv_buf) {
        grpc_byte_buffer_destroy(call->recv_buf);
        call->recv_buf = NULL;
    }
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &call->recv_buf;
    return start_ops(call, &op, 1, FL_TAG_RECV);
}

void fl_call_cancel(fl_call *call) { grpc_call_cancel(call->call, NULL); }

qr_status fl_call_finish(fl_call *call, bool *retryable, char *err, size_t err_len) {
    *retryable = false;
    bool have_status = call->pending[FL_TAG_STATUS] || call->done[FL_TAG_STATUS];
    if (have_status) fl_call_wait(call, FL_TAG_STATUS);
    for (int t = 1; t < FL_TAG_COUNT; t++)
        while (call->pending[t]) fl_call_pump(call, -1);
    qr_status st = QR_OK;
    if (have_status) {
        call->client->last_status = (int)call->status;
        if (call->status != GRPC_STATUS_OK) {
            /* the server's message, first line only (servers may append tracebacks); gRPC's own
             * debug string only when the server said nothing */
            char *details = grpc_slice_to_c_string(call->details);
            char *nl = details ? strchr(details, '\n') : NULL;
            if (nl) *nl = 0;
            const char *msg = details && details[0] ? details : call->error_string ? call->error_string : "(no message)";
            st = qr_errf(err, err_len, map_status(call->status), "flight %s: %s: %s", call->method,
                         qr_flight_grpc_status_name((int)call->status), msg);
            gpr_free(details);
            *retryable = call->status == GRPC_STATUS_UNAVAILABLE;
        }
    }
    if (call->recv_buf) grpc_byte_buffer_destroy(call->recv_buf);
    if (call->send_buf) grpc_byte_buffer_destroy(call->send_buf);
    grpc_metadata_array_destroy(&call->initial_md);
    grpc_metadata_array_destroy(&call->trailing_md);
    grpc_slice_unref(call->details);
    if (call->error_string) gpr_free((void *)call->error_string);
    grpc_call_unref(call->call);
    grpc_completion_queue_shutdown(call->cq);
    while (grpc_completion_queue_next(call->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type != GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(call->cq);
    memset(call, 0, sizeof(*call));
    return st;
}

grpc_byte_buffer *fl_pack(const ProtobufCMessage *m) {
    size_t n = protobuf_c_message_get_packed_size(m);
    grpc_slice s = grpc_slice_malloc(n);
    protobuf_c_message_pack(m, GRPC_SLICE_START_PTR(s));
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

grpc_slice fl_flatten(grpc_byte_buffer *bb) {
    grpc_byte_buffer_reader r;
    if (!grpc_byte_buffer_reader_init(&r, bb)) return grpc_empty_slice();
    grpc_slice s = grpc_byte_buffer_reader_readall(&r);
    grpc_byte_buffer_reader_destroy(&r);
    return s;
}

/* ---- retries ------------------------------------------------------------------------------------ */

double fl_retry_delay_s(qr_flight_client *c, int attempt) {
    double ms = (double)c->retry_initial_ms;
    for (int i = 0; i < attempt && ms < (double)c->retry_max_ms; i++) ms *= 2;
    if (ms > (double)c->retry_max_ms) ms = (double)c->retry_max_ms;
    c->rng ^= c->rng << 13;
    c->rng ^= c->rng >> 7;
    c->rng ^= c->rng << 17;
    double jitter = (double)(c->rng >> 11) / (double)(1ull << 53); /* [0, 1) */
    return ms * (1.0 + 0.25 * jitter) / 1000.0;
}

void fl_sleep_s(double seconds) {
    if (seconds <= 0) return;
    struct timespec ts = {.tv_sec = (time_t)seconds, .tv_nsec = (long)((seconds - (double)(time_t)seconds) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

qr_status fl_server_stream(qr_flight_client *c, bool meta, const char *method, const ProtobufCMessage *request,
                           fl_message_fn on_message, void *user, qr_status (*on_retry)(void *user), char *err,
                           size_t err_len) {
    for (int attempt = 0;; attempt++) {
        fl_call call;
        qr_status st = fl_call_open(c, meta, method, &call, err, err_len);
        if (st != QR_OK) return st;
        bool delivered = false;
        qr_status cb = QR_OK;
        char cb_err[512] = "";
        if (fl_call_start_send(&call, fl_pack(request), true) == QR_OK) {
            while (fl_call_start_recv(&call) == QR_OK && fl_call_wait(&call, FL_TAG_RECV) && call.recv_buf) {
                grpc_slice s = fl_flatten(call.recv_buf);
                delivered = true;
                cb = on_message(user, GRPC_SLICE_START_PTR(s), GRPC_SLICE_LENGTH(s), cb_err, sizeof(cb_err));
                grpc_slice_unref(s);
                if (cb != QR_OK) {
                    fl_call_cancel(&call);
                    break;
                }
            }
        } else {
            fl_call_cancel(&call); /* the request never left: do not wait for the deadline */
        }
        bool retryable = false;
        char call_err[1024] = "";
        st = fl_call_finish(&call, &retryable, call_err, sizeof(call_err));
        if (cb != QR_OK) return qr_errf(err, err_len, cb, "%s", cb_err);
        if (st == QR_OK) return QR_OK;
        if (retryable && !delivered && attempt < c->max_retries) {
            if (on_retry && on_retry(user) != QR_OK) return qr_errf(err, err_len, st, "%s", call_err);
            double d = fl_retry_delay_s(c, attempt);
            qr_log(QR_LOG_DEBUG, "flight %s: %s; retry %d in %.2f s", method, call_err, attempt + 1, d);
            fl_sleep_s(d);
            continue;
        }
        return qr_errf(err, err_len, st, "%s", call_err);
    }
}
