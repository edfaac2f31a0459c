/* flight_internal.h — gRPC plumbing shared by the Flight client files (not public API). */
#ifndef QR_FLIGHT_INTERNAL_H
#define QR_FLIGHT_INTERNAL_H

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>

#include "flight.pb-c.h"
#include "flight_client.h"

struct qr_flight_client {
    char *data_target;             /* owned copies of the options' strings */
    char *meta_target;
    grpc_channel *data_channel;
    grpc_channel *meta_channel;    /* == data_channel when both targets are the same */
    grpc_slice auth_key;           /* "authorization" */
    grpc_slice auth_value;         /* "Bearer <token>" */
    bool has_auth;
    int64_t timeout_ms;            /* < 0: none */
    int max_retries;
    int64_t retry_initial_ms, retry_max_ms;
    int64_t slow_down_initial_ms, slow_down_max_ms;
    bool ignore_slow_down;
    uint64_t rng;                  /* xorshift state for retry jitter */
    int last_status;               /* grpc_status_code of the last finished call */
};

/* Completion-queue tags of the operations of one call. */
enum { FL_TAG_START = 1, FL_TAG_STATUS, FL_TAG_SEND, FL_TAG_RECV, FL_TAG_CLOSE, FL_TAG_COUNT };

/* One in-flight RPC: a call with its own completion queue. */
typedef struct fl_call {
    qr_flight_client *client;
    grpc_call *call;
    grpc_completion_queue *cq;
    grpc_metadata auth;                 /* send_initial_metadata entry (when has_auth) */
    grpc_metadata_array initial_md;     /* server's initial metadata */
    grpc_metadata_array trailing_md;    /* server's trailing metadata */
    grpc_status_code status;
    grpc_slice details;
    const char *error_string;           /* gpr_malloc'ed by gRPC, or NULL */
    grpc_byte_buffer *send_buf;         /* the message being sent (owned until SEND completes) */
    grpc_byte_buffer *recv_buf;         /* the message received by the last RECV (owned) */
    bool pending[FL_TAG_COUNT];         /* an operation with this tag is in flight */
    bool done[FL_TAG_COUNT];            /* ... has completed since it was last started */
    bool ok[FL_TAG_COUNT];              /* ... and succeeded */
    const char *method;                 /* e.g. "DoPut", for messages */
} fl_call;

/* Opens a call of FlightService method `method` ("DoPut", ...) on the data or meta channel, sends
 * the initial metadata and asks for the final status. */
qr_status fl_call_open(qr_flight_client *c, bool meta, const char *method, fl_call *call, char *err, size_t err_len);
/* Waits for the next completion, or until the qr_time_s() clock reaches until_s (< 0: no limit).
 * Returns false when nothing completed. */
bool fl_call_pump(fl_call *call, double until_s);
/* Waits until the operation `tag` completes; returns its success flag. */
bool fl_call_wait(fl_call *call, int tag);
/* Starts sending `bb` (taken over). With close_send the batch also half-closes the stream. */
qr_status fl_call_start_send(fl_call *call, grpc_byte_buffer *bb, bool close_send);
/* Starts a half-close. */
qr_status fl_call_start_close(fl_call *call);
/* Starts receiving one message into call->recv_buf (NULL there at the end of the stream). */
qr_status fl_call_start_recv(fl_call *call);
/* Waits for the final status, drains the call and frees it. Returns QR_OK for gRPC OK, else an error
 * naming the method, the gRPC status and the server's message (which wins over a transport error
 * already recorded in err only when err is empty). Sets *retryable when the status is UNAVAILABLE. */
qr_status fl_call_finish(fl_call *call, bool *retryable, char *err, size_t err_len);
/* Cancels the call (the final status will be CANCELLED unless the server already ended it). */
void fl_call_cancel(fl_call *call);

/* Serialises a protobuf-c message into a new byte buffer (NULL on allocation failure). */
grpc_byte_buffer *fl_pack(const ProtobufCMessage *m);
/* Flattens a received byte buffer into a slice (unref it when done). */
grpc_slice fl_flatten(grpc_byte_buffer *bb);

/* Runs a server-streaming call: sends `request`, half-closes, and passes every received message to
 * on_message (return non-QR_OK to stop). Retries on UNAVAILABLE while nothing was delivered. */
typedef qr_status (*fl_message_fn)(void *user, const uint8_t *data, size_t len, char *err, size_t err_len);
qr_status fl_server_stream(qr_flight_client *c, bool meta, const char *method, const ProtobufCMessage *request,
                           fl_message_fn on_message, void *user, qr_status (*on_retry)(void *user), char *err,
                           size_t err_len);

/* A small pool of reusable send buffers (see flight_pack.c). Safe to release while gRPC still holds
 * buffers: the memory goes when the last one comes back. */
typedef struct fl_pool fl_pool;
fl_pool *fl_pool_create(void);
void fl_pool_release(fl_pool *p);
/* Serialises FlightData{data_header, data_body} for batch b (validated against s) into a byte buffer
 * whose memory comes from `pool` (which may be NULL: then a fresh buffer). */
qr_status fl_pack_batch(fl_pool *pool, const qr_arrow_schema *s, const qr_arrow_batch *b, grpc_byte_buffer **out,
                        char *err, size_t err_len);

/* The delay before retry number `attempt` (0-based), with jitter, in seconds. */
double fl_retry_delay_s(qr_flight_client *c, int attempt);
/* Sleeps for `seconds`. */
void fl_sleep_s(double seconds);

#endif /* QR_FLIGHT_INTERNAL_H */
