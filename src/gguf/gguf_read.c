/* gguf_read.c — GGUF v2/v3 parser: header, key/values, tensor infos, validation, hash index.
 *
 * The parser walks the file with a bounds-checked cursor. Every length or count read from the file
 * is checked against the bytes that remain before anything is allocated or dereferenced, and every
 * multiplication of file-supplied numbers is overflow-checked. Errors name the byte offset of the
 * field that is wrong ("path: offset N: ...").
 */
#include "gguf/gguf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

/* Arrays may nest (array of arrays of ...) at most this deep; deeper input is rejected. */
#define MAX_ARRAY_DEPTH 8
/* Smallest possible encodings, used to reject absurd counts before allocating. */
#define MIN_KV_BYTES 13u          /* key length (8) + value type (4) + one byte of value */
#define MIN_TENSOR_INFO_BYTES 32u /* name length (8) + n_dims (4) + one dim (8) + type (4) + offset (8) */
#define MIN_STRING_BYTES 8u       /* the u64 length of an empty string */
#define MIN_ARRAY_BYTES 12u       /* element type (4) + count (8) of an empty nested array */
#define HEADER_BYTES 24u          /* magic, version, n_tensors, n_kv */

/* A block of arena memory; allocations are carved from `data` and freed all at once. */
typedef struct arena_chunk {
    struct arena_chunk *next;
    size_t used; /* bytes handed out from data */
    size_t cap;  /* bytes in data */
    max_align_t data[];
} arena_chunk;

/* Reader bookkeeping behind qr_gguf.internal. */
typedef struct gguf_internal {
    qr_mapped_file map;     /* the file mapping (unused for qr_gguf_open_memory) */
    bool mapped;            /* true when `map` must be unmapped on close */
    arena_chunk *arena;     /* string-array and nested-array element storage */
    uint32_t *key_slots;    /* [key_cap] open-addressing table: kv index + 1, 0 = empty */
    uint64_t key_cap;       /* power of two */
    uint32_t *tensor_slots; /* [tensor_cap] same for tensors */
    uint64_t tensor_cap;    /* power of two */
} gguf_internal;

/* Parsing state: a bounds-checked cursor over [base, base+size) and the error sink. */
typedef struct reader {
    const uint8_t *base;
    uint64_t size;
    uint64_t pos; /* next byte to read */
    const char *label; /* "path: " prefix for messages, or "" */
    char *err;
    size_t err_len;
    gguf_internal *in;
} reader;

/* ---- arena ------------------------------------------------------------------------------------ */

/* Returns `bytes` of zeroed, max-aligned memory owned by the arena, or NULL on OOM. */
static void *arena_alloc(gguf_internal *in, size_t bytes) {
    const size_t align = sizeof(max_align_t);
    bytes = (bytes + align - 1) / align * align;
    arena_chunk *c = in->arena;
    if (!c || c->cap - c->used < bytes) {
        size_t cap = bytes > 65536 ? bytes : 65536;
        c = calloc(1, sizeof(arena_chunk) + cap);
        if (!c) return NULL;
        c->cap = cap;
        c->next = in->arena;
        in->arena = c;
    }
    void *p = (uint8_t *)c->data + c->used;
    c->used += bytes;
    return p;
}

/* Frees every arena chunk. */
static void arena_free(gguf_internal *in) {
    for (arena_chunk *c = in->arena, *n; c; c = n) {
        n = c->next;
        free(c);
    }
    in->arena = NULL;
}

/* ---- errors and primitive reads ---------------------------------------------------------------- */

/* Formats "<label>offset <at>: <message>" into the error buffer and returns `status`. */
static qr_status fail_at(reader *r, uint64_t at, qr_status status, const char *fmt, ...) QR_PRINTF(4, 5);
static qr_status fail_at(reader *r, uint64_t at, qr_status status, const char *fmt, ...) {
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return qr_errf(r->err, r->err_len, status, "%soffset %llu: %s", r->label, (unsigned long long)at, msg);
}

/* Writes a printable, truncated form of s (for messages) into buf[cap]. Returns buf. */
static const char *printable(qr_gguf_str s, char *buf, size_t cap) {
    size_t n = 0;
    uint64_t limit = cap > 4 ? cap - 4 : 0;
    uint64_t i = 0;
    for (; i < s.len && n < limit; i++) {
        unsigned char ch = (unsigned char)s.data[i];
        buf[n++] = (ch >= 0x20 && ch < 0x7f) ? (char)ch : '?';
    }
    if (i < s.len && cap >= 4) {
        buf[n++] = '.';
        buf[n++] = '.';
        buf[n++] = '.';
    }
    if (cap) buf[n < cap ? n : cap - 1] = 0;
    return buf;
}

/* True when n more bytes can be read at the cursor. */
static bool has(const reader *r, uint64_t n) { return r->pos <= r->size && n <= r->size - r->pos; }

/* Fails with a truncation message unless n bytes remain; `what` names the field. */
static qr_status need(reader *r, uint64_t n, const char *what) {
    if (has(r, n)) return QR_OK;
    return fail_at(r, r->pos, QR_ERR_FORMAT, "file truncated: %s needs %llu bytes, %llu left (file size %llu)", what,
                   (unsigned long long)n, (unsigned long long)(r->size - r->pos), (unsigned long long)r->size);
}

/* Little-endian unsigned integer of `bytes` (1..8) bytes at p (any alignment). */
static uint64_t load_le(const uint8_t *p, unsigned bytes) {
    uint64_t v = 0;
    for (unsigned i = 0; i < bytes; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Reads a little-endian u32 / u64 at the cursor and advances; `what` names the field on truncation. */
static qr_status read_u32(reader *r, uint32_t *out, const char *what) {
    qr_status st = need(r, 4, what);
    if (st) return st;
    *out = (uint32_t)load_le(r->base + r->pos, 4);
    r->pos += 4;
    return QR_OK;
}

static qr_status read_u64(reader *r, uint64_t *out, const char *what) {
    qr_status st = need(r, 8, what);
    if (st) return st;
    *out = load_le(r->base + r->pos, 8);
    r->pos += 8;
    return QR_OK;
}

/* Reads a u64 length + bytes string into *out (pointing into the buffer). `what` names it in
 * messages ("key", "tensor name", "string"); `key`, when not NULL, is the key the string belongs to. */
static qr_status read_str(reader *r, qr_gguf_str *out, const char *what, const char *key) {
    uint64_t at = r->pos;
    char field[64];
    snprintf(field, sizeof field, "%s length", what);
    uint64_t len;
    qr_status st = read_u64(r, &len, field);
    if (st) return st;
    if (!has(r, len)) {
        if (key)
            return fail_at(r, at, QR_ERR_FORMAT, "key '%s': %s length %llu runs past end of file (size %llu)", key, what,
                           (unsigned long long)len, (unsigned long long)r->size);
        return fail_at(r, at, QR_ERR_FORMAT, "%s length %llu runs past end of file (size %llu)", what, (unsigned long long)len,
                       (unsigned long long)r->size);
    }
    out->data = (const char *)(r->base + r->pos);
    out->len = len;
    r->pos += len;
    return QR_OK;
}

/* ---- hash index --------------------------------------------------------------------------------- */

/* FNV-1a hash of s[0..len). */
static uint64_t hash_bytes(const char *s, uint64_t len) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (uint64_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* True when s equals c[0..len). */
static bool str_eq_n(qr_gguf_str s, const char *c, uint64_t len) { return s.len == len && memcmp(s.data, c, len) == 0; }

/* Allocates a table of at least 2*n slots (power of two). NULL on OOM. */
static uint32_t *index_alloc(uint64_t n, uint64_t *cap_out) {
    uint64_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    *cap_out = cap;
    return calloc(cap, sizeof(uint32_t));
}

typedef const qr_gguf_str *(*name_of_fn)(const void *ctx, uint32_t i);

/* Finds the entry named (s, len); returns its index or -1. */
static int64_t index_find(const uint32_t *slots, uint64_t cap, const char *s, uint64_t len, name_of_fn name_of, const void *ctx) {
    if (!slots) return -1;
    uint64_t mask = cap - 1, h = hash_bytes(s, len) & mask;
    for (;;) {
        uint32_t v = slots[h];
        if (!v) return -1;
        if (str_eq_n(*name_of(ctx, v - 1), s, len)) return (int64_t)(v - 1);
        h = (h + 1) & mask;
    }
}

/* Inserts entry `idx` named s unless an equal name is there; returns the existing index or -1. */
static int64_t index_insert(uint32_t *slots, uint64_t cap, qr_gguf_str s, uint32_t idx, name_of_fn name_of, const void *ctx) {
    int64_t found = index_find(slots, cap, s.data, s.len, name_of, ctx);
    if (found >= 0) return found;
    uint64_t mask = cap - 1, h = hash_bytes(s.data, s.len) & mask;
    while (slots[h]) h = (h + 1) & mask;
    slots[h] = idx + 1;
    return -1;
}

/* Name of key i / tensor i of the qr_gguf in ctx (index callbacks). */
static const qr_gguf_str *kv_name(const void *ctx, uint32_t i) { return &((const qr_gguf *)ctx)->kv[i].key; }
static const qr_gguf_str *tensor_name(const void *ctx, uint32_t i) { return &((const qr_gguf *)ctx)->tensors[i].name; }

/* ---- values ------------------------------------------------------------------------------------- */

static qr_status read_array(reader *r, qr_gguf_value *v, int depth, const char *key);

/* Reads the payload of a value of type `type` (already read) into *v. */
static qr_status read_value(reader *r, qr_gguf_value *v, uint32_t type, uint64_t type_at, int depth, const char *key) {
    if (type >= QR_GGUF_VTYPE_COUNT)
        return fail_at(r, type_at, QR_ERR_FORMAT, "key '%s': unknown value type %u", key, type);
    v->type = (qr_gguf_vtype)type;
    uint64_t at = r->pos;
    if (type == QR_GGUF_STRING) return read_str(r, &v->str, "string", key);
    if (type == QR_GGUF_ARRAY) return read_array(r, v, depth, key);
    size_t sz = qr_gguf_vtype_size(type);
    qr_status st = need(r, sz, "value");
    if (st) return st;
    uint64_t raw = load_le(r->base + r->pos, (unsigned)sz);
    r->pos += sz;
    switch (type) {
    case QR_GGUF_U8:
    case QR_GGUF_U16:
    case QR_GGUF_U32:
    case QR_GGUF_U64: v->u64 = raw; break;
    case QR_GGUF_I8: v->i64 = (int8_t)raw; break;
    case QR_GGUF_I16: v->i64 = (int16_t)raw; break;
    case QR_GGUF_I32: v->i64 = (int32_t)raw; break;
    case QR_GGUF_I64: v->i64 = (int64_t)raw; break;
    case QR_GGUF_BOOL:
        if (raw > 1) return fail_at(r, at, QR_ERR_FORMAT, "key '%s': bool value %llu is not 0 or 1", key, (unsigned long long)raw);
        v->u64 = raw;
        break;
    case QR_GGUF_F32: {
        uint32_t b = (uint32_t)raw;
        float f;
        memcpy(&f, &b, 4);
        v->f64 = f;
        break;
    }
    case QR_GGUF_F64: memcpy(&v->f64, &raw, 8); break;
    default: break;
    }
    return QR_OK;
}

/* Reads an array payload (element type, count, elements) into *v; `depth` counts enclosing arrays. */
static qr_status read_array(reader *r, qr_gguf_value *v, int depth, const char *key) {
    uint64_t type_at = r->pos;
    if (depth >= MAX_ARRAY_DEPTH)
        return fail_at(r, type_at, QR_ERR_FORMAT, "key '%s': arrays nested deeper than %d levels", key, MAX_ARRAY_DEPTH);
    uint32_t et;
    uint64_t count;
    qr_status st = read_u32(r, &et, "array element type");
    if (st) return st;
    if (et >= QR_GGUF_VTYPE_COUNT)
        return fail_at(r, type_at, QR_ERR_FORMAT, "key '%s': unknown array element type %u", key, et);
    uint64_t count_at = r->pos;
    if ((st = read_u64(r, &count, "array count"))) return st;
    v->type = QR_GGUF_ARRAY;
    v->arr.elem_type = (qr_gguf_vtype)et;
    v->arr.count = count;
    v->arr.data = r->base + r->pos;
    v->arr.strs = NULL;
    v->arr.items = NULL;
    uint64_t left = r->size - r->pos;
    size_t esz = qr_gguf_vtype_size(et);
    uint64_t min_elem = esz ? esz : (et == QR_GGUF_STRING ? MIN_STRING_BYTES : MIN_ARRAY_BYTES);
    if (count > left / min_elem)
        return fail_at(r, count_at, QR_ERR_FORMAT, "key '%s': array count %llu of %s (%s%llu bytes each) runs past end of file (size %llu)",
                       key, (unsigned long long)count, qr_gguf_vtype_name(et), esz ? "" : "at least ", (unsigned long long)min_elem,
                       (unsigned long long)r->size);
    if (esz) {
        if (et == QR_GGUF_BOOL)
            for (uint64_t i = 0; i < count; i++)
                if (r->base[r->pos + i] > 1)
                    return fail_at(r, r->pos + i, QR_ERR_FORMAT, "key '%s': bool element %llu has value %u (not 0 or 1)", key,
                                   (unsigned long long)i, r->base[r->pos + i]);
        r->pos += count * esz;
        return QR_OK;
    }
    if (count == 0) return QR_OK;
    if (et == QR_GGUF_STRING) {
        qr_gguf_str *strs = arena_alloc(r->in, count * sizeof *strs);
        if (!strs) return qr_errf(r->err, r->err_len, QR_ERR_NOMEM, "%sout of memory for a %llu-element string array", r->label,
                                  (unsigned long long)count);
        for (uint64_t i = 0; i < count; i++)
            if ((st = read_str(r, &strs[i], "string", key))) return st;
        v->arr.strs = strs;
        return QR_OK;
    }
    qr_gguf_value *items = arena_alloc(r->in, count * sizeof *items);
    if (!items) return qr_errf(r->err, r->err_len, QR_ERR_NOMEM, "%sout of memory for a %llu-element array", r->label,
                               (unsigned long long)count);
    v->arr.items = items;
    for (uint64_t i = 0; i < count; i++)
        if ((st = read_array(r, &items[i], depth + 1, key))) return st;
    return QR_OK;
}

/* ---- header, key/values, tensors ---------------------------------------------------------------- */

/* Reads magic, version and counts; rejects counts that cannot fit in the file. */
static qr_status read_header(reader *r, qr_gguf *g) {
    uint32_t magic, version;
    qr_status st = read_u32(r, &magic, "magic");
    if (st) return st;
    if (magic != QR_GGUF_MAGIC)
        return fail_at(r, 0, QR_ERR_FORMAT, "bad magic 0x%08x (expected 0x%08x, \"GGUF\"): not a GGUF file", magic, QR_GGUF_MAGIC);
    if ((st = read_u32(r, &version, "version"))) return st;
    if (version == 1)
        return fail_at(r, 4, QR_ERR_UNSUPPORTED,
                       "GGUF version 1 is not supported (only versions 2 and 3); convert the model again with a current llama.cpp");
    if (version != 2 && version != 3) {
        if ((version & 0xffff) == 0 && version != 0)
            return fail_at(r, 4, QR_ERR_UNSUPPORTED, "GGUF version field 0x%08x looks big-endian; big-endian files are not supported",
                           version);
        return fail_at(r, 4, QR_ERR_UNSUPPORTED, "unsupported GGUF version %u (only versions 2 and 3)", version);
    }
    g->version = version;
    if ((st = read_u64(r, &g->n_tensors, "tensor count"))) return st;
    if ((st = read_u64(r, &g->n_kv, "key/value count"))) return st;
    uint64_t body = r->size - HEADER_BYTES;
    if (g->n_tensors > body / MIN_TENSOR_INFO_BYTES || g->n_tensors >= UINT32_MAX)
        return fail_at(r, 8, QR_ERR_FORMAT, "tensor count %llu is impossible for a file of %llu bytes",
                       (unsigned long long)g->n_tensors, (unsigned long long)r->size);
    if (g->n_kv > body / MIN_KV_BYTES || g->n_kv >= UINT32_MAX)
        return fail_at(r, 16, QR_ERR_FORMAT, "key/value count %llu is impossible for a file of %llu bytes",
                       (unsigned long long)g->n_kv, (unsigned long long)r->size);
    if (g->n_kv * MIN_KV_BYTES + g->n_tensors * MIN_TENSOR_INFO_BYTES > body)
        return fail_at(r, 8, QR_ERR_FORMAT, "%llu tensors and %llu key/values cannot fit in a file of %llu bytes",
                       (unsigned long long)g->n_tensors, (unsigned long long)g->n_kv, (unsigned long long)r->size);
    return QR_OK;
}

/* Reads the n_kv key/values in file order, indexing keys and rejecting duplicates. */
static qr_status read_kvs(reader *r, qr_gguf *g) {
    gguf_internal *in = r->in;
    if (!(in->key_slots = index_alloc(g->n_kv, &in->key_cap)))
        return qr_errf(r->err, r->err_len, QR_ERR_NOMEM, "%sout of memory for the key index", r->label);
    if (g->n_kv && !(g->kv = calloc(g->n_kv, sizeof *g->kv)))
        return qr_errf(r->err, r->err_len, QR_ERR_NOMEM, "%sout of memory for %llu key/values", r->label,
                       (unsigned long long)g->n_kv);
    for (uint64_t i = 0; i < g->n_kv; i++) {
        qr_gguf_kv *kv = &g->kv[i];
        kv->offset = r->pos;
        qr_status st = read_str(r, &kv->key, "key", NULL);
        if (st) return st;
        char key[96];
        printable(kv->key, key, sizeof key);
        int64_t dup = index_insert(in->key_slots, in->key_cap, kv->key, (uint32_t)i, kv_name, g);
        if (dup >= 0)
            return fail_at(r, kv->offset, QR_ERR_FORMAT, "duplicate key '%s' (first at offset %llu)", key,
                           (unsigned long long)g->kv[dup].offset);
        uint64_t type_at = r->pos;
        uint32_t type;
        if ((st = read_u32(r, &type, "value type"))) return st;
        if ((st = read_value(r, &kv->value, type, type_at, 0, key))) return st;
    }
    return QR_OK;
}

/* Sets g->alignment from general.alignment (must be a uint32 power of two) or the default. */
static qr_status read_alignment(reader *r, qr_gguf *g) {
    g->alignment = QR_GGUF_DEFAULT_ALIGNMENT;
    int64_t i = qr_gguf_find_key(g, "general.alignment");
    if (i < 0) return QR_OK;
    const qr_gguf_kv *kv = &g->kv[i];
    uint64_t at = kv->offset + 8 + kv->key.len;
    if (kv->value.type != QR_GGUF_U32)
        return fail_at(r, at, QR_ERR_FORMAT, "general.alignment has type %s (must be uint32)", qr_gguf_vtype_name(kv->value.type));
    uint64_t a = kv->value.u64;
    if (a == 0 || (a & (a - 1)))
        return fail_at(r, at + 4, QR_ERR_FORMAT, "general.alignment %llu is not a nonzero power of two", (unsigned long long)a);
    g->alignment = (uint32_t)a;
    return QR_OK;
}

/* Reads the tensor infos: validates shape and type; records where each offset field is (*offset_at). */
static qr_status read_tensor_infos(reader *r, qr_gguf *g, uint64_t *offset_at) {
    gguf_internal *in = r->in;
    if (!(in->tensor_slots = index_alloc(g->n_tensors, &in->tensor_cap)))
        return qr_errf(r->err, r->err_len, QR_ERR_NOMEM, "%sout of memory for the tensor index", r->label);
    if (g->n_tensors && !(g->tensors = calloc(g->n_tensors, sizeof *g->tensors)))
        return qr_errf(r->err, r->err_len, QR_ERR_NOMEM, "%sout of memory for %llu tensors", r->label,
                       (unsigned long long)g->n_tensors);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        qr_gguf_tensor *t = &g->tensors[i];
        uint64_t start = r->pos;
        qr_status st = read_str(r, &t->name, "tensor name", NULL);
        if (st) return st;
        char name[96];
        printable(t->name, name, sizeof name);
        int64_t dup = index_insert(in->tensor_slots, in->tensor_cap, t->name, (uint32_t)i, tensor_name, g);
        if (dup >= 0) {
            /* the first one's info started where its name did; recompute from its name pointer */
            uint64_t first = (uint64_t)((const uint8_t *)g->tensors[dup].name.data - r->base) - 8;
            return fail_at(r, start, QR_ERR_FORMAT, "duplicate tensor name '%s' (first at offset %llu)", name,
                           (unsigned long long)first);
        }
        uint64_t dims_at = r->pos;
        if ((st = read_u32(r, &t->n_dims, "tensor n_dims"))) return st;
        if (t->n_dims < 1 || t->n_dims > QR_GGUF_MAX_DIMS)
            return fail_at(r, dims_at, QR_ERR_FORMAT, "tensor '%s': n_dims %u out of range 1..%d", name, t->n_dims, QR_GGUF_MAX_DIMS);
        int64_t nel = 1;
        for (int d = 0; d < QR_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            uint64_t ne_at = r->pos, ne;
            if ((st = read_u64(r, &ne, "tensor dimension"))) return st;
            if (ne == 0 || ne > (uint64_t)INT64_MAX)
                return fail_at(r, ne_at, QR_ERR_FORMAT, "tensor '%s': dimension %u is %lld (must be >= 1)", name, d, (long long)ne);
            t->ne[d] = (int64_t)ne;
            if (__builtin_mul_overflow(nel, t->ne[d], &nel))
                return fail_at(r, ne_at, QR_ERR_FORMAT, "tensor '%s': element count overflows int64 at dimension %u", name, d);
        }
        uint64_t type_at = r->pos;
        uint32_t type;
        if ((st = read_u32(r, &type, "tensor type"))) return st;
        if (!qr_type_valid(type))
            return fail_at(r, type_at, QR_ERR_FORMAT, "tensor '%s': unknown tensor type %u", name, type);
        t->type = (qr_type)type;
        const qr_type_info *ti = &qr_type_table[type];
        if (t->ne[0] % ti->block_size)
            return fail_at(r, dims_at + 4, QR_ERR_FORMAT, "tensor '%s': ne[0] = %lld is not a multiple of the block size %u of %s",
                           name, (long long)t->ne[0], ti->block_size, ti->name);
        uint64_t rows = (uint64_t)(nel / t->ne[0]);
        uint64_t row_bytes;
        if (__builtin_mul_overflow((uint64_t)(t->ne[0] / ti->block_size), (uint64_t)ti->type_size, &row_bytes) ||
            __builtin_mul_overflow(row_bytes, rows, &t->nbytes))
            return fail_at(r, dims_at, QR_ERR_FORMAT, "tensor '%s': byte size overflows", name);
        offset_at[i] = r->pos;
        if ((st = read_u64(r, &t->offset, "tensor offset"))) return st;
    }
    return QR_OK;
}

/* Places the data section and checks every tensor's [offset, offset+nbytes) lies inside the file. */
static qr_status place_tensors(reader *r, qr_gguf *g, const uint64_t *offset_at) {
    uint64_t a = g->alignment;
    g->data_offset = (r->pos + a - 1) / a * a; /* pos <= size < 2^63: cannot overflow */
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        qr_gguf_tensor *t = &g->tensors[i];
        char name[96];
        printable(t->name, name, sizeof name);
        if (t->offset % a)
            return fail_at(r, offset_at[i], QR_ERR_FORMAT, "tensor '%s': data offset %llu is not a multiple of the alignment %llu",
                           name, (unsigned long long)t->offset, (unsigned long long)a);
        uint64_t avail = g->data_offset <= r->size ? r->size - g->data_offset : 0;
        if (t->offset > avail || t->nbytes > avail - t->offset)
            return fail_at(r, offset_at[i], QR_ERR_FORMAT,
                           "tensor '%s': data [%llu, +%llu bytes) runs past end of file (data section at %llu, file size %llu)", name,
                           (unsigned long long)t->offset, (unsigned long long)t->nbytes, (unsigned long long)g->data_offset,
                           (unsigned long long)r->size);
        t->data = r->base + g->data_offset + t->offset;
    }
    return QR_OK;
}

/* Parses base[0..size) into *g (already zeroed, with internal set). */
static qr_status parse(reader *r, qr_gguf *g) {
    qr_status st = read_header(r, g);
    if (st) return st;
    if ((st = read_kvs(r, g))) return st;
    if ((st = read_alignment(r, g))) return st;
    uint64_t *offset_at = g->n_tensors ? malloc(g->n_tensors * sizeof *offset_at) : NULL;
    if (g->n_tensors && !offset_at) return qr_errf(r->err, r->err_len, QR_ERR_NOMEM, "%sout of memory", r->label);
    st = read_tensor_infos(r, g, offset_at);
    if (!st) st = place_tensors(r, g, offset_at);
    free(offset_at);
    return st;
}

/* Common body of qr_gguf_open / qr_gguf_open_memory. Takes ownership of *map when mapped. */
static qr_status open_buffer(const uint8_t *base, uint64_t size, qr_mapped_file *map, const char *label, qr_gguf **out,
                             char *err, size_t err_len) {
    *out = NULL;
    qr_gguf *g = calloc(1, sizeof(qr_gguf) + sizeof(gguf_internal));
    if (!g) {
        if (map) qr_unmap_file(map);
        return qr_errf(err, err_len, QR_ERR_NOMEM, "%sout of memory", label);
    }
    gguf_internal *in = (gguf_internal *)(g + 1);
    g->internal = in;
    if (map) {
        in->map = *map;
        in->mapped = true;
    }
    g->base = base;
    g->size = size;
    reader r = {.base = base, .size = size, .pos = 0, .label = label, .err = err, .err_len = err_len, .in = in};
    qr_status st = parse(&r, g);
    if (st) {
        qr_gguf_close(g);
        return st;
    }
    *out = g;
    return QR_OK;
}

qr_status qr_gguf_open(const char *path, qr_gguf **out, char *err, size_t err_len) {
    *out = NULL;
    qr_mapped_file map;
    qr_status st = qr_map_file(path, &map, err, err_len);
    if (st) return st;
    size_t n = strlen(path) + 3;
    char *label = malloc(n);
    if (!label) {
        qr_unmap_file(&map);
        return qr_errf(err, err_len, QR_ERR_NOMEM, "%s: out of memory", path);
    }
    snprintf(label, n, "%s: ", path);
    st = open_buffer(map.data, map.size, &map, label, out, err, err_len);
    free(label);
    return st;
}

qr_status qr_gguf_open_memory(const void *buf, size_t size, qr_gguf **out, char *err, size_t err_len) {
    if (!buf && size) {
        *out = NULL;
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "qr_gguf_open_memory: NULL buffer");
    }
    return open_buffer(buf, size, NULL, "", out, err, err_len);
}

void qr_gguf_close(qr_gguf *g) {
    if (!g) return;
    gguf_internal *in = g->internal;
    free(g->kv);
    free(g->tensors);
    if (in) {
        arena_free(in);
        free(in->key_slots);
        free(in->tensor_slots);
        if (in->mapped) qr_unmap_file(&in->map);
    }
    free(g);
}

/* ---- lookups ------------------------------------------------------------------------------------ */

int64_t qr_gguf_find_key(const qr_gguf *g, const char *key) {
    const gguf_internal *in = g->internal;
    return index_find(in->key_slots, in->key_cap, key, strlen(key), kv_name, g);
}

int64_t qr_gguf_find_tensor(const qr_gguf *g, const char *name) {
    const gguf_internal *in = g->internal;
    return index_find(in->tensor_slots, in->tensor_cap, name, strlen(name), tensor_name, g);
}

const qr_gguf_value *qr_gguf_get(const qr_gguf *g, const char *key) {
    int64_t i = qr_gguf_find_key(g, key);
    return i < 0 ? NULL : &g->kv[i].value;
}

const qr_gguf_tensor *qr_gguf_get_tensor(const qr_gguf *g, const char *name) {
    int64_t i = qr_gguf_find_tensor(g, name);
    return i < 0 ? NULL : &g->tensors[i];
}
