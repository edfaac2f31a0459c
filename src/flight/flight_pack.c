/* flight_pack.c — the DoPut hot path: serialises a record batch as a FlightData message in one pass,
 * straight into reusable send buffers.
 *
 * FlightData is written by hand here (the other messages go through protobuf-c): field 2
 * data_header (the IPC Message flatbuffer) and field 1000 data_body (the IPC body), both
 * length-delimited. The body is copied once, from the caller's columns into the buffer that gRPC
 * sends. Buffers come from a small pool and are handed to gRPC as slices with a release callback,
 * so that a long push does not allocate (and page-fault) a fresh message-sized buffer per batch. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "flight_internal.h"
#include "util/util.h"

#define FL_POOL_SLOTS 4

typedef struct fl_slot {
    struct fl_pool *pool;
    uint8_t *mem;       /* [cap] */
    size_t cap;
    atomic_bool busy;   /* lent to gRPC */
} fl_slot;

struct fl_pool {
    atomic_long refs;   /* the owner + one per lent slot */
    fl_slot slots[FL_POOL_SLOTS];
};

fl_pool *fl_pool_create(void) {
    fl_pool *p = calloc(1, sizeof(*p));
    if (!p) return NULL;
    atomic_init(&p->refs, 1);
    for (int i = 0; i < FL_POOL_SLOTS; i++) {
        p->slots[i].pool = p;
        atomic_init(&p->slots[i].busy, false);
    }
    return p;
}

static void pool_unref(fl_pool *p) {
    if (atomic_fetch_sub(&p->refs, 1) == 1) {
        for (int i = 0; i < FL_POOL_SLOTS; i++) free(p->slots[i].mem);
        free(p);
    }
}

void fl_pool_release(fl_pool *p) {
    if (p) pool_unref(p);
}

/* Slice destructor: gRPC is done with the slot's memory. */
static void slot_done(void *user) {
    fl_slot *s = user;
    fl_pool *p = s->pool;
    atomic_store(&s->busy, false);
    pool_unref(p);
}

/* A slice of len bytes backed by a free pool slot (or a fresh slice when all are lent). */
static grpc_slice pool_slice(fl_pool *p, size_t len) {
    for (int i = 0; p && i < FL_POOL_SLOTS; i++) {
        fl_slot *s = &p->slots[i];
        bool expected = false;
        if (!atomic_compare_exchange_strong(&s->busy, &expected, true)) continue;
        if (s->cap < len) {
            size_t cap = len + len / 8;
            uint8_t *m = malloc(cap);
            if (!m) {
                atomic_store(&s->busy, false);
                break;
            }
            free(s->mem);
            s->mem = m;
            s->cap = cap;
        }
        atomic_fetch_add(&p->refs, 1);
        return grpc_slice_new_with_user_data(s->mem, len, slot_done, s);
    }
    return grpc_slice_malloc(len);
}

static size_t varint_size(uint64_t v) {
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static uint8_t *put_varint(uint8_t *p, uint64_t v) {
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

qr_status fl_pack_batch(fl_pool *pool, const qr_arrow_schema *s, const qr_arrow_batch *b, grpc_byte_buffer **out,
                        char *err, size_t err_len) {
    *out = NULL;
    qr_arrow_message m;
    qr_status st = qr_arrow_encode_batch_header(s, b, &m, err, err_len);
    if (st != QR_OK) return st;
    /* field 2 (data_header), wire type 2: key 0x12; field 1000 (data_body), wire type 2: key 8002 */
    const uint64_t header_key = (2u << 3) | 2u, body_key = (1000u << 3) | 2u;
    size_t total = varint_size(header_key) + varint_size(m.metadata_len) + m.metadata_len;
    if (m.body_len) total += varint_size(body_key) + varint_size(m.body_len) + m.body_len;
    grpc_slice slice = pool_slice(pool, total);
    uint8_t *p = GRPC_SLICE_START_PTR(slice);
    p = put_varint(p, header_key);
    p = put_varint(p, m.metadata_len);
    memcpy(p, m.metadata, m.metadata_len);
    p += m.metadata_len;
    if (m.body_len) {
        p = put_varint(p, body_key);
        p = put_varint(p, m.body_len);
        st = qr_arrow_write_body(s, b, p, m.body_len, err, err_len);
    }
    if (st == QR_OK) *out = grpc_raw_byte_buffer_create(&slice, 1);
    grpc_slice_unref(slice);
    qr_arrow_message_free(&m);
    return st;
}
