/* flatbuf.c — minimal FlatBuffers builder (back to front) and bounds-checked reader. */
#include "flatbuf.h"

#include <stdlib.h>
#include <string.h>

#include "util/util.h"

/* ---- builder ------------------------------------------------------------------------------------ */

void qr_fb_init(qr_fb_builder *b) {
    memset(b, 0, sizeof(*b));
    b->minalign = 1;
}

void qr_fb_free(qr_fb_builder *b) {
    free(b->buf);
    memset(b, 0, sizeof(*b));
}

/* Makes room for n more bytes in front of the live data. Sets b->failed on allocation failure. */
static bool fb_reserve(qr_fb_builder *b, size_t n) {
    if (b->failed) return false;
    if (b->buf && b->cap - b->size >= n) return true;
    size_t cap = b->cap ? b->cap * 2 : 256;
    while (cap - b->size < n) {
        if (cap > ((size_t)1 << 31)) { /* uoffsets are 32-bit: a flatbuffer stays below 2 GiB */
            b->failed = true;
            return false;
        }
        cap *= 2;
    }
    uint8_t *nb = malloc(cap);
    if (!nb) {
        b->failed = b->nomem = true;
        return false;
    }
    if (b->size) memcpy(nb + cap - b->size, b->buf + b->cap - b->size, b->size);
    free(b->buf);
    b->buf = nb;
    b->cap = cap;
    return true;
}

/* Grows the live data by n bytes at the front and returns a pointer to them (NULL on failure). */
static uint8_t *fb_push(qr_fb_builder *b, size_t n) {
    if (!fb_reserve(b, n)) return NULL;
    b->size += n;
    return b->buf + b->cap - b->size;
}

/* Pads so that after writing `additional` more bytes the size is a multiple of `align`. */
static void fb_prep(qr_fb_builder *b, size_t align, size_t additional) {
    if (align > b->minalign) b->minalign = align;
    size_t pad = (~(b->size + additional) + 1) & (align - 1);
    uint8_t *p = fb_push(b, pad);
    if (p && pad) memset(p, 0, pad);
}

static void fb_put_u32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

qr_fb_ref qr_fb_string(qr_fb_builder *b, const char *s, size_t len) {
    if (b->in_table) b->failed = true;
    fb_prep(b, 4, len + 1);
    uint8_t *p = fb_push(b, len + 1);
    if (!p) return 0;
    if (len) memcpy(p, s, len);
    p[len] = 0;
    p = fb_push(b, 4);
    if (!p) return 0;
    fb_put_u32(p, (uint32_t)len);
    return (qr_fb_ref)b->size;
}

qr_fb_ref qr_fb_vector(qr_fb_builder *b, const void *elems, size_t n, size_t elem_size, size_t align) {
    if (b->in_table) b->failed = true;
    size_t bytes = n * elem_size;
    fb_prep(b, 4, bytes);
    fb_prep(b, align, bytes);
    uint8_t *p = fb_push(b, bytes);
    if (!p) return 0;
    if (bytes) memcpy(p, elems, bytes);
    p = fb_push(b, 4);
    if (!p) return 0;
    fb_put_u32(p, (uint32_t)n);
    return (qr_fb_ref)b->size;
}

qr_fb_ref qr_fb_vector_refs(qr_fb_builder *b, const qr_fb_ref *refs, size_t n) {
    if (b->in_table) b->failed = true;
    fb_prep(b, 4, 4 * n);
    for (size_t i = n; i-- > 0;) {
        uint8_t *p = fb_push(b, 4);
        if (!p) return 0;
        fb_put_u32(p, (uint32_t)(b->size - refs[i]));
    }
    uint8_t *p = fb_push(b, 4);
    if (!p) return 0;
    fb_put_u32(p, (uint32_t)n);
    return (qr_fb_ref)b->size;
}

void qr_fb_table_start(qr_fb_builder *b) {
    if (b->in_table) b->failed = true;
    b->in_table = true;
    b->n_fields = 0;
    memset(b->field_at, 0, sizeof(b->field_at));
    b->table_start = b->size;
}

/* Records that field `field` starts at the current front of the buffer. */
static void fb_mark_field(qr_fb_builder *b, int field) {
    if (!b->in_table || field < 0 || field >= QR_FB_MAX_FIELDS) {
        b->failed = true;
        return;
    }
    b->field_at[field] = (uint32_t)b->size;
    if (field + 1 > b->n_fields) b->n_fields = field + 1;
}

void qr_fb_add_scalar(qr_fb_builder *b, int field, uint64_t value, size_t size) {
    if (size != 1 && size != 2 && size != 4 && size != 8) {
        b->failed = true;
        return;
    }
    fb_prep(b, size, 0);
    uint8_t *p = fb_push(b, size);
    if (!p) return;
    memcpy(p, &value, size); /* little-endian host: the low bytes come first */
    fb_mark_field(b, field);
}

void qr_fb_add_ref(qr_fb_builder *b, int field, qr_fb_ref ref) {
    fb_prep(b, 4, 0);
    uint8_t *p = fb_push(b, 4);
    if (!p) return;
    if (ref == 0 || ref > b->size) {
        b->failed = true;
        return;
    }
    fb_put_u32(p, (uint32_t)(b->size - ref));
    fb_mark_field(b, field);
}

qr_fb_ref qr_fb_table_end(qr_fb_builder *b) {
    if (!b->in_table) {
        b->failed = true;
        return 0;
    }
    b->in_table = false;
    fb_prep(b, 4, 0);
    uint8_t *soff = fb_push(b, 4);
    if (!soff) return 0;
    size_t table_at = b->size;
    size_t obj_bytes = table_at - b->table_start;
    size_t vt_bytes = 4 + 2 * (size_t)b->n_fields;
    if (obj_bytes > 0xFFFF) {
        b->failed = true;
        return 0;
    }
    uint8_t *vt = fb_push(b, vt_bytes);
    if (!vt) return 0;
    uint16_t w = (uint16_t)vt_bytes;
    memcpy(vt, &w, 2);
    w = (uint16_t)obj_bytes;
    memcpy(vt + 2, &w, 2);
    for (int i = 0; i < b->n_fields; i++) {
        w = b->field_at[i] ? (uint16_t)(table_at - b->field_at[i]) : 0;
        memcpy(vt + 4 + 2 * i, &w, 2);
    }
    int32_t so = (int32_t)(b->size - table_at); /* vtable sits just before the table */
    memcpy(b->buf + b->cap - table_at, &so, 4);
    return (qr_fb_ref)table_at;
}

qr_status qr_fb_finish(qr_fb_builder *b, qr_fb_ref root, const uint8_t **out, size_t *out_len) {
    if (b->in_table || root == 0) b->failed = true;
    if (b->minalign < 8) b->minalign = 8;
    fb_prep(b, b->minalign, 4);
    uint8_t *p = fb_push(b, 4);
    if (b->failed || !p) return b->nomem ? QR_ERR_NOMEM : QR_ERR_INTERNAL;
    fb_put_u32(p, (uint32_t)(b->size - root));
    *out = b->buf + b->cap - b->size;
    *out_len = b->size;
    return QR_OK;
}

/* ---- reader ------------------------------------------------------------------------------------- */

static uint32_t rd_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static uint16_t rd_u16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* Validates and opens the table that starts at buf[pos]. */
static qr_status fb_table_at(const uint8_t *buf, size_t len, size_t pos, qr_fb_table *out, const char *what,
                             char *err, size_t err_len) {
    if (len < 4 || pos > len - 4 || (pos & 3))
        return qr_errf(err, err_len, QR_ERR_FORMAT, "flatbuffer: %s: table offset %zu out of bounds (len %zu)",
                       what, pos, len);
    int32_t so;
    memcpy(&so, buf + pos, 4);
    int64_t vt = (int64_t)pos - (int64_t)so;
    if (vt < 0 || (uint64_t)vt > len - 4 || (vt & 1))
        return qr_errf(err, err_len, QR_ERR_FORMAT, "flatbuffer: %s: vtable offset %lld out of bounds", what,
                       (long long)vt);
    uint16_t vt_bytes = rd_u16(buf + vt), obj_bytes = rd_u16(buf + vt + 2);
    if (vt_bytes < 4 || (vt_bytes & 1) || (uint64_t)vt + vt_bytes > len)
        return qr_errf(err, err_len, QR_ERR_FORMAT, "flatbuffer: %s: bad vtable size %u", what, vt_bytes);
    if (obj_bytes < 4 || pos + obj_bytes > len)
        return qr_errf(err, err_len, QR_ERR_FORMAT, "flatbuffer: %s: bad table size %u", what, obj_bytes);
    out->buf = buf;
    out->len = len;
    out->pos = pos;
    out->vtable = (size_t)vt;
    out->vt_bytes = vt_bytes;
    out->obj_bytes = obj_bytes;
    return QR_OK;
}

qr_status qr_fb_root(const uint8_t *buf, size_t len, qr_fb_table *out, char *err, size_t err_len) {
    if (!buf || len < 8)
        return qr_errf(err, err_len, QR_ERR_FORMAT, "flatbuffer: %zu bytes is too short", len);
    return fb_table_at(buf, len, rd_u32(buf), out, "root", err, err_len);
}

/* The field's offset inside the table, 0 when absent. */
static uint16_t fb_field_off(const qr_fb_table *t, int field) {
    if (field < 0) return 0;
    size_t at = 4 + 2 * (size_t)field;
    if (at + 2 > t->vt_bytes) return 0;
    return rd_u16(t->buf + t->vtable + at);
}

bool qr_fb_has(const qr_fb_table *t, int field) { return fb_field_off(t, field) != 0; }

qr_status qr_fb_scalar(const qr_fb_table *t, int field, size_t size, bool is_signed, int64_t def, int64_t *out,
                       const char *what, char *err, size_t err_len) {
    uint16_t off = fb_field_off(t, field);
    if (!off) {
        *out = def;
        return QR_OK;
    }
    if (off < 4 || (size_t)off + size > t->obj_bytes)
        return qr_errf(err, err_len, QR_ERR_FORMAT, "flatbuffer: %s: field outside its table", what);
    const uint8_t *p = t->buf + t->pos + off;
    switch (size) {
    case 1: *out = is_signed ? (int64_t)(int8_t)p[0] : (int64_t)p[0]; break;
    case 2: {
        uint16_t v = rd_u16(p);
        *out = is_signed ? (int64_t)(int16_t)v : (int64_t)v;
        break;
    }
    case 4: {
        uint32_t v = rd_u32(p);
        *out = is_signed ? (int64_t)(int32_t)v : (int64_t)v;
        break;
    }
    case 8: memcpy(out, p, 8); break;
    default: return qr_errf(err, err_len, QR_ERR_INTERNAL, "flatbuffer: bad scalar size %zu", size);
    }
    return QR_OK;
}

/* Resolves a reference field to the absolute offset it points at (which holds >= 4 bytes). */
static qr_status fb_ref_target(const qr_fb_table *t, int field, size_t *target, bool *present, const char *what,
                               char *err, size_t err_len) {
    uint16_t off = fb_field_off(t, field);
    *present = off != 0;
    if (!off) return QR_OK;
    if (off < 4 || (size_t)off + 4 > t->obj_bytes)
        return qr_errf(err, err_len, QR_ERR_FORMAT, "flatbuffer: %s: field outside its table", what);
    size_t at = t->pos + off;
    uint32_t u = rd_u32(t->buf + at);
    size_t tgt = at + u;
    if (u == 0 || tgt > t->len - 4)
        return qr_errf(err, err_len, QR_ERR_FORMAT, "flatbuffer: %s: offset %zu out of bounds (len %zu)", what,
                       tgt, t->len);
    *target = tgt;
    return QR_OK;
}

qr_status qr_fb_subtable(const qr_fb_table *t, int field, qr_fb_table *out, bool *present, const char *what,
                         char *err, size_t err_len) {
    size_t tgt = 0;
    qr_status st = fb_ref_target(t, field, &tgt, present, what, err, err_len);
    if (st != QR_OK || !*present) return st;
    return fb_table_at(t->buf, t->len, tgt, out, what, err, err_len);
}

qr_status qr_fb_str(const qr_fb_table *t, int field, const char **s, size_t *n, bool *present, const char *what,
                    char *err, size_t err_len) {
    size_t tgt = 0;
    *s = "";
    *n = 0;
    qr_status st = fb_ref_target(t, field, &tgt, present, what, err, err_len);
    if (st != QR_OK || !*present) return st;
    uint32_t len = rd_u32(t->buf + tgt);
    if ((uint64_t)len >= t->len - tgt - 4 || t->buf[tgt + 4 + len] != 0)
        return qr_errf(err, err_len, QR_ERR_FORMAT, "flatbuffer: %s: string of %u bytes out of bounds", what, len);
    *s = (const char *)t->buf + tgt + 4;
    *n = len;
    return QR_OK;
}

qr_status qr_fb_vector_field(const qr_fb_table *t, int field, size_t elem_size, qr_fb_vec *out, bool *present,
                             const char *what, char *err, size_t err_len) {
    size_t tgt = 0;
    memset(out, 0, sizeof(*out));
    qr_status st = fb_ref_target(t, field, &tgt, present, what, err, err_len);
    if (st != QR_OK || !*present) return st;
    uint32_t n = rd_u32(t->buf + tgt);
    if (elem_size == 0 || (uint64_t)n > (t->len - tgt - 4) / elem_size)
        return qr_errf(err, err_len, QR_ERR_FORMAT, "flatbuffer: %s: vector of %u elements out of bounds", what,
                       n);
    out->buf = t->buf;
    out->len = t->len;
    out->elems = tgt + 4;
    out->n = n;
    out->elem_size = elem_size;
    return QR_OK;
}

qr_status qr_fb_vec_table(const qr_fb_vec *v, size_t i, qr_fb_table *out, const char *what, char *err,
                          size_t err_len) {
    if (i >= v->n || v->elem_size != 4)
        return qr_errf(err, err_len, QR_ERR_INTERNAL, "flatbuffer: %s: element %zu of %zu", what, i, v->n);
    size_t at = v->elems + 4 * i;
    uint32_t u = rd_u32(v->buf + at);
    if (u == 0 || at + u > v->len - 4)
        return qr_errf(err, err_len, QR_ERR_FORMAT, "flatbuffer: %s[%zu]: offset out of bounds", what, i);
    return fb_table_at(v->buf, v->len, at + u, out, what, err, err_len);
}

int64_t qr_fb_vec_i64(const qr_fb_vec *v, size_t i, size_t word) {
    int64_t x = 0;
    if (i < v->n && (word + 1) * 8 <= v->elem_size) memcpy(&x, v->buf + v->elems + i * v->elem_size + word * 8, 8);
    return x;
}
