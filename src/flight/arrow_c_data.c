/* arrow_c_data.c — Arrow C Data Interface export (schemas copied, batches zero-copy). */
#include "arrow_c_data.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arrow_internal.h"
#include "util/util.h"

/* ---- schemas ------------------------------------------------------------------------------------ */

typedef struct schema_priv {
    char *format;                     /* owned format string */
    char *name;                       /* owned field name */
    char *metadata;                   /* owned encoded metadata, or NULL */
    struct ArrowSchema **child_ptrs;  /* [n_children] -> child_structs[i] */
    struct ArrowSchema *child_structs; /* [n_children] */
} schema_priv;

/* Release callback of every exported ArrowSchema node: releases the children still owned (a consumer
 * that moved a child out set its release to NULL), then frees this node's memory. */
static void schema_release(struct ArrowSchema *s) {
    if (!s || !s->release) return;
    schema_priv *p = s->private_data;
    for (int64_t i = 0; i < s->n_children; i++) {
        struct ArrowSchema *c = p->child_ptrs[i];
        if (c && c->release) c->release(c);
    }
    free(p->child_ptrs);
    free(p->child_structs);
    free(p->format);
    free(p->name);
    free(p->metadata);
    free(p);
    s->release = NULL;
}

/* Encodes key/value pairs as the C Data Interface wants: int32 count, then for each pair int32 key
 * length, key bytes, int32 value length, value bytes (native endianness). NULL when n == 0. */
static char *encode_metadata(const qr_arrow_kv *kv, size_t n, bool *nomem) {
    *nomem = false;
    if (n == 0) return NULL;
    size_t total = 4;
    for (size_t i = 0; i < n; i++) total += 8 + kv[i].key_len + kv[i].value_len;
    char *m = malloc(total);
    if (!m) {
        *nomem = true;
        return NULL;
    }
    int32_t v = (int32_t)n;
    memcpy(m, &v, 4);
    size_t at = 4;
    for (size_t i = 0; i < n; i++) {
        v = (int32_t)kv[i].key_len;
        memcpy(m + at, &v, 4);
        memcpy(m + at + 4, kv[i].key, kv[i].key_len);
        at += 4 + kv[i].key_len;
        v = (int32_t)kv[i].value_len;
        memcpy(m + at, &v, 4);
        memcpy(m + at + 4, kv[i].value, kv[i].value_len);
        at += 4 + kv[i].value_len;
    }
    return m;
}

/* Format string of a field's type ("l", "u", "+w:384", ...) written into buf. */
static void type_format(const qr_arrow_field *f, char *buf, size_t n) {
    const char *fmt = "";
    switch (f->type) {
    case QR_ARROW_INT8: fmt = "c"; break;
    case QR_ARROW_UINT8: fmt = "C"; break;
    case QR_ARROW_INT16: fmt = "s"; break;
    case QR_ARROW_UINT16: fmt = "S"; break;
    case QR_ARROW_INT32: fmt = "i"; break;
    case QR_ARROW_UINT32: fmt = "I"; break;
    case QR_ARROW_INT64: fmt = "l"; break;
    case QR_ARROW_UINT64: fmt = "L"; break;
    case QR_ARROW_FLOAT16: fmt = "e"; break;
    case QR_ARROW_FLOAT32: fmt = "f"; break;
    case QR_ARROW_FLOAT64: fmt = "g"; break;
    case QR_ARROW_UTF8: fmt = "u"; break;
    case QR_ARROW_BINARY: fmt = "z"; break;
    case QR_ARROW_FIXED_SIZE_LIST: snprintf(buf, n, "+w:%d", (int)f->list_size); return;
    }
    snprintf(buf, n, "%s", fmt);
}

/* Fills one ArrowSchema node (children left empty but allocated). On failure the node is either
 * untouched (release == NULL) or complete enough for its release callback. */
static qr_status schema_node(struct ArrowSchema *out, const char *format, const char *name, const qr_arrow_kv *kv,
                             size_t n_kv, int64_t flags, int64_t n_children) {
    memset(out, 0, sizeof(*out));
    schema_priv *p = calloc(1, sizeof(*p));
    if (!p) return QR_ERR_NOMEM;
    bool nomem = false;
    p->format = qr_arrow_strndup(format, strlen(format));
    p->name = qr_arrow_strndup(name, strlen(name));
    p->metadata = encode_metadata(kv, n_kv, &nomem);
    if (n_children) {
        p->child_ptrs = calloc((size_t)n_children, sizeof(*p->child_ptrs));
        p->child_structs = calloc((size_t)n_children, sizeof(*p->child_structs));
    }
    out->format = p->format;
    out->name = p->name;
    out->metadata = p->metadata;
    out->flags = flags;
    out->n_children = n_children;
    out->children = p->child_ptrs;
    out->private_data = p;
    out->release = schema_release;
    if (!p->format || !p->name || nomem || (n_children && (!p->child_ptrs || !p->child_structs))) {
        out->n_children = 0;
        schema_release(out);
        return QR_ERR_NOMEM;
    }
    for (int64_t i = 0; i < n_children; i++) p->child_ptrs[i] = &p->child_structs[i];
    return QR_OK;
}

/* Exports one field (and its child) into *out. */
static qr_status export_field(const qr_arrow_field *f, struct ArrowSchema *out, int depth) {
    if (depth > QR_ARROW_MAX_DEPTH) return QR_ERR_INVALID_ARG;
    char fmt[32];
    type_format(f, fmt, sizeof(fmt));
    int64_t n_children = f->type == QR_ARROW_FIXED_SIZE_LIST ? 1 : 0;
    if (n_children && !f->child) return QR_ERR_INVALID_ARG;
    qr_status st = schema_node(out, fmt, f->name, f->metadata, f->n_metadata, f->nullable ? ARROW_FLAG_NULLABLE : 0,
                               n_children);
    if (st != QR_OK) return st;
    if (n_children) {
        st = export_field(f->child, out->children[0], depth + 1);
        if (st != QR_OK) out->release(out);
    }
    return st;
}

qr_status qr_arrow_export_schema(const qr_arrow_schema *s, struct ArrowSchema *out, char *err, size_t err_len) {
    struct ArrowSchema tmp;
    qr_status st = schema_node(&tmp, "+s", "", s->metadata, s->n_metadata, 0, (int64_t)s->n_fields);
    for (size_t i = 0; i < s->n_fields && st == QR_OK; i++) {
        st = export_field(&s->fields[i], tmp.children[i], 1);
        if (st != QR_OK) tmp.release(&tmp);
    }
    if (st != QR_OK) return qr_errf(err, err_len, st, "arrow c data: exporting the schema failed (%s)", qr_status_str(st));
    *out = tmp;
    return QR_OK;
}

/* ---- arrays ------------------------------------------------------------------------------------- */

/* What the exported arrays of one batch share: the owner, released when the last node goes. */
typedef struct array_shared {
    atomic_long refs;              /* live exported nodes (+1 while the export is being built) */
    void (*release_owner)(void *); /* may be NULL */
    void *owner;
} array_shared;

typedef struct array_priv {
    array_shared *shared;
    const void *buffers[3];           /* the node's buffer pointers */
    struct ArrowArray **child_ptrs;   /* [n_children] -> child_structs[i] */
    struct ArrowArray *child_structs; /* [n_children] */
} array_priv;

static const int32_t empty_offsets[1] = {0}; /* offsets of an empty utf8/binary array */
static const uint8_t empty_bytes[8] = {0};   /* character data of an empty utf8/binary array */

static void shared_unref(array_shared *sh) {
    if (atomic_fetch_sub(&sh->refs, 1) == 1) {
        if (sh->release_owner) sh->release_owner(sh->owner);
        free(sh);
    }
}

/* Release callback of every exported ArrowArray node. */
static void array_release(struct ArrowArray *a) {
    if (!a || !a->release) return;
    array_priv *p = a->private_data;
    for (int64_t i = 0; i < a->n_children; i++) {
        struct ArrowArray *c = p->child_ptrs[i];
        if (c && c->release) c->release(c);
    }
    free(p->child_ptrs);
    free(p->child_structs);
    array_shared *sh = p->shared;
    free(p);
    a->release = NULL;
    shared_unref(sh);
}

/* Fills one ArrowArray node holding a reference on `sh`; children allocated but empty. */
static qr_status array_node(struct ArrowArray *out, array_shared *sh, int64_t length, int64_t null_count,
                            int64_t n_buffers, const void *b0, const void *b1, const void *b2, int64_t n_children) {
    memset(out, 0, sizeof(*out));
    array_priv *p = calloc(1, sizeof(*p));
    if (!p) return QR_ERR_NOMEM;
    if (n_children) {
        p->child_ptrs = calloc((size_t)n_children, sizeof(*p->child_ptrs));
        p->child_structs = calloc((size_t)n_children, sizeof(*p->child_structs));
        if (!p->child_ptrs || !p->child_structs) {
            free(p->child_ptrs);
            free(p->child_structs);
            free(p);
            return QR_ERR_NOMEM;
        }
        for (int64_t i = 0; i < n_children; i++) p->child_ptrs[i] = &p->child_structs[i];
    }
    p->shared = sh;
    atomic_fetch_add(&sh->refs, 1);
    p->buffers[0] = b0;
    p->buffers[1] = b1;
    p->buffers[2] = b2;
    out->length = length;
    out->null_count = null_count;
    out->offset = 0;
    out->n_buffers = n_buffers;
    out->n_children = n_children;
    out->buffers = p->buffers;
    out->children = p->child_ptrs;
    out->private_data = p;
    out->release = array_release;
    return QR_OK;
}

/* Exports one (validated) column into *out. */
static qr_status export_array(const qr_arrow_field *f, const qr_arrow_array *a, array_shared *sh,
                              struct ArrowArray *out, int depth) {
    if (depth > QR_ARROW_MAX_DEPTH) return QR_ERR_INVALID_ARG;
    const void *validity = a->null_count > 0 ? a->validity : NULL;
    if (qr_arrow_type_width(f->type))
        return array_node(out, sh, a->length, a->null_count, 2, validity, a->values, NULL, 0);
    if (f->type == QR_ARROW_UTF8 || f->type == QR_ARROW_BINARY) {
        const void *offsets = a->offsets ? (const void *)a->offsets : (const void *)empty_offsets;
        const void *data = a->values ? a->values : (const void *)empty_bytes;
        return array_node(out, sh, a->length, a->null_count, 3, validity, offsets, data, 0);
    }
    qr_status st = array_node(out, sh, a->length, a->null_count, 1, validity, NULL, NULL, 1);
    if (st != QR_OK) return st;
    st = export_array(f->child, a->child, sh, out->children[0], depth + 1);
    if (st != QR_OK) out->release(out);
    return st;
}

qr_status qr_arrow_export_batch(const qr_arrow_schema *s, const qr_arrow_batch *b, void (*release_owner)(void *),
                                void *owner, struct ArrowArray *out, char *err, size_t err_len) {
    qr_status st = qr_arrow_batch_validate(s, b, err, err_len);
    if (st != QR_OK) return st;
    array_shared *sh = calloc(1, sizeof(*sh));
    if (!sh) return qr_errf(err, err_len, QR_ERR_NOMEM, "arrow c data: out of memory");
    atomic_init(&sh->refs, 1); /* the builder's reference */
    struct ArrowArray tmp;
    st = array_node(&tmp, sh, b->length, 0, 1, NULL, NULL, NULL, (int64_t)b->n_columns);
    for (size_t i = 0; i < b->n_columns && st == QR_OK; i++) {
        st = export_array(&s->fields[i], &b->columns[i], sh, tmp.children[i], 1);
        if (st != QR_OK) tmp.release(&tmp);
    }
    if (st != QR_OK) {
        shared_unref(sh); /* release_owner is still NULL: nothing of the caller's is freed */
        return qr_errf(err, err_len, st, "arrow c data: exporting the batch failed (%s)", qr_status_str(st));
    }
    sh->release_owner = release_owner;
    sh->owner = owner;
    shared_unref(sh); /* the exported nodes keep it alive */
    *out = tmp;
    return QR_OK;
}

typedef struct decoded_holder {
    qr_arrow_batch batch;
    void *body;
    void (*body_free)(void *);
} decoded_holder;

static void decoded_release(void *p) {
    decoded_holder *h = p;
    qr_arrow_batch_free(&h->batch);
    if (h->body_free) h->body_free(h->body);
    free(h);
}

qr_status qr_arrow_export_decoded(const qr_arrow_schema *s, qr_arrow_batch *b, void *body, void (*body_free)(void *),
                                  struct ArrowArray *out, char *err, size_t err_len) {
    decoded_holder *h = calloc(1, sizeof(*h));
    if (!h) return qr_errf(err, err_len, QR_ERR_NOMEM, "arrow c data: out of memory");
    h->batch = *b;
    h->body = body;
    h->body_free = body_free;
    qr_status st = qr_arrow_export_batch(s, &h->batch, decoded_release, h, out, err, err_len);
    if (st != QR_OK) {
        free(h);
        return st;
    }
    memset(b, 0, sizeof(*b));
    return QR_OK;
}
