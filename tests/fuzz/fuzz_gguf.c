/* fuzz_gguf.c — libFuzzer target for the GGUF reader and writer.
 *
 * Each input is parsed with qr_gguf_open_memory from an exact-size copy (so ASan catches any read
 * past the end). When it parses, everything is walked: every value and array element through the
 * accessors, every lookup and typed getter, the first and last byte of every tensor. Then the file
 * is rewritten with the writer; the result must parse, and rewriting it again must give the same
 * bytes (write is a fixed point after one pass). Any violation traps.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"

static volatile uint64_t sink; /* keeps the walk from being optimised away */

static void walk_value(const qr_gguf_value *v) {
    if (v->type != QR_GGUF_ARRAY) {
        sink += v->u64 + (uint64_t)v->str.len;
        return;
    }
    for (uint64_t i = 0; i < v->arr.count; i++) {
        switch (v->arr.elem_type) {
        case QR_GGUF_STRING: {
            qr_gguf_str s = qr_gguf_arr_str(v, i);
            if (s.len) sink += (unsigned char)s.data[0] + (unsigned char)s.data[s.len - 1];
            break;
        }
        case QR_GGUF_ARRAY: walk_value(&v->arr.items[i]); break;
        default: {
            double d = qr_gguf_arr_f64(v, i);
            uint64_t bits;
            memcpy(&bits, &d, sizeof bits);
            sink += qr_gguf_arr_u64(v, i) + (uint64_t)qr_gguf_arr_i64(v, i) + bits;
            break;
        }
        }
    }
}

static void walk(const qr_gguf *g) {
    char name[256];
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const qr_gguf_kv *kv = &g->kv[i];
        walk_value(&kv->value);
        qr_gguf_str_copy(kv->key, name, sizeof name);
        /* a key without NUL bytes that fits the buffer must be found at its own index */
        if (kv->key.len < sizeof name && strlen(name) == kv->key.len && qr_gguf_find_key(g, name) != (int64_t)i) __builtin_trap();
        uint32_t u32;
        int32_t i32;
        uint64_t u64;
        float f;
        bool b;
        qr_gguf_str s;
        sink += qr_gguf_get_u32(g, name, &u32) + qr_gguf_get_i32(g, name, &i32) + qr_gguf_get_u64(g, name, &u64) +
                qr_gguf_get_f32(g, name, &f) + qr_gguf_get_bool(g, name, &b) + qr_gguf_get_str(g, name, &s) +
                (qr_gguf_get_arr(g, name, QR_GGUF_VTYPE_COUNT) != NULL);
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const qr_gguf_tensor *t = &g->tensors[i];
        const uint8_t *d = t->data;
        if (t->nbytes == 0 || d < g->base || d + t->nbytes > g->base + g->size) __builtin_trap();
        sink += d[0] + d[t->nbytes - 1] + (uint64_t)qr_gguf_tensor_nelements(t);
        qr_gguf_str_copy(t->name, name, sizeof name);
        if (t->name.len < sizeof name && strlen(name) == t->name.len && qr_gguf_find_tensor(g, name) != (int64_t)i) __builtin_trap();
    }
}

/* Rewrites g with the writer into a malloc'ed buffer; traps if the writer refuses a valid file.
 * Skipped (NULL) when the output would exceed 16 MiB: a tiny file may declare general.alignment 2^31,
 * and the writer then pads the metadata to 2 GiB, as ggml would. */
static void *rewrite(const qr_gguf *g, size_t *size) {
    uint64_t a = g->alignment, total = g->data_offset;
    for (uint64_t i = 0; i < g->n_tensors; i++) total += (g->tensors[i].nbytes + a - 1) / a * a;
    if (total > (16u << 20)) return NULL;
    qr_gguf_writer *w = qr_gguf_writer_create(g->version, g->alignment);
    if (!w) return NULL;
    for (uint64_t i = 0; i < g->n_kv; i++) qr_gguf_writer_set_value(w, g->kv[i].key, &g->kv[i].value);
    for (uint64_t i = 0; i < g->n_tensors; i++) qr_gguf_writer_copy_tensor(w, &g->tensors[i]);
    void *out = NULL;
    qr_status st = qr_gguf_writer_write_memory(w, &out, size, NULL, 0);
    qr_gguf_writer_free(w);
    if (st == QR_ERR_NOMEM) return NULL;
    if (st != QR_OK) __builtin_trap();
    return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) return 0;
    memcpy(copy, data, size);
    qr_gguf *g = NULL;
    char err[256];
    qr_status st = qr_gguf_open_memory(copy, size, &g, err, sizeof err);
    if (st == QR_OK) {
        walk(g);
        size_t n1 = 0, n2 = 0;
        void *once = rewrite(g, &n1);
        if (once) {
            qr_gguf *g1 = NULL;
            if (qr_gguf_open_memory(once, n1, &g1, err, sizeof err) != QR_OK) __builtin_trap();
            walk(g1);
            void *twice = rewrite(g1, &n2);
            if (twice && (n1 != n2 || memcmp(once, twice, n1) != 0)) __builtin_trap();
            free(twice);
            qr_gguf_close(g1);
            free(once);
        }
        qr_gguf_close(g);
    } else if (g != NULL || (st != QR_ERR_NOMEM && strncmp(err, "offset ", 7) != 0)) {
        __builtin_trap(); /* failures leave *out NULL; format errors name an offset */
    }
    free(copy);
    return 0;
}
