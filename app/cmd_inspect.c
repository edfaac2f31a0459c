/* cmd_inspect.c — `quarrel inspect MODEL.gguf [--json] [--full]`: the GGUF version, every metadata
 * key/value, the tensor table and per-type totals, as text or as JSON (jansson). */
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "internal.h" /* GGUF metadata and tensors */

#define ARRAY_PREVIEW 8   /* array elements shown unless --full */
#define STRING_PREVIEW 96 /* bytes of a string shown in text mode unless --full */

typedef struct inspect_opts {
    const char *path;
    bool json;
    bool full;
} inspect_opts;

/* Per-type totals over the tensor table. */
typedef struct type_totals {
    uint64_t tensors, params, bytes;
} type_totals;

static void usage(FILE *f) {
    fprintf(f,
            "usage: quarrel inspect MODEL.gguf [--json] [--full]\n\n"
            "Shows a GGUF file: version, alignment, every metadata key/value, the tensor table (name, type,\n"
            "shape in ggml order with ne[0] first, offset in the data section, bytes), the parameter count,\n"
            "and tensors/parameters/bytes per tensor type.\n\n"
            "  --json   machine-readable output on stdout; arrays carry \"type\", \"elem_type\", \"count\"\n"
            "           and \"value\" (the first %d elements unless --full). uint64 values above 2^63-1 are\n"
            "           written as decimal strings, NaN/Inf floats as \"nan\"/\"inf\"/\"-inf\".\n"
            "  --full   show whole arrays and strings (text mode abbreviates them)\n"
            "  -h, --help\n\n"
            "Exit status: 0 ok, 1 unreadable or malformed file, 2 usage error.\n",
            ARRAY_PREVIEW);
}

/* Fills *o from argv; returns -1 to continue, else the exit code. */
static int parse_args(int argc, char **argv, inspect_opts *o) {
    memset(o, 0, sizeof *o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            o->json = true;
        } else if (!strcmp(a, "--full")) {
            o->full = true;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "quarrel inspect: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        } else if (o->path) {
            fprintf(stderr, "quarrel inspect: more than one file given ('%s' and '%s')\n", o->path, a);
            return 2;
        } else {
            o->path = a;
        }
    }
    if (!o->path) {
        fprintf(stderr, "quarrel inspect: no file given\n");
        usage(stderr);
        return 2;
    }
    return -1;
}

/* ---- JSON ---------------------------------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at s[0..n), or 0 if it is not valid. */
static size_t utf8_seq(const unsigned char *s, uint64_t n) {
    unsigned char c = s[0];
    size_t len;
    uint32_t cp;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) len = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef) len = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4) len = 4, cp = c & 0x07;
    else return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff))) return 0;
    return len;
}

/* A JSON string for s; bytes that are not valid UTF-8 become U+FFFD. */
static json_t *json_str(qr_gguf_str s) {
    json_t *j = json_stringn(s.data, (size_t)s.len);
    if (j) return j;
    char *buf = malloc((size_t)s.len * 3 + 1);
    if (!buf) return NULL;
    size_t n = 0;
    const unsigned char *p = (const unsigned char *)s.data;
    for (uint64_t i = 0; i < s.len;) {
        size_t k = utf8_seq(p + i, s.len - i);
        if (k) {
            memcpy(buf + n, p + i, k);
            n += k;
            i += k;
        } else {
            memcpy(buf + n, "\xef\xbf\xbd", 3);
            n += 3;
            i++;
        }
    }
    j = json_stringn(buf, n);
    free(buf);
    return j;
}

static json_t *json_u64(uint64_t v) {
    if (v <= (uint64_t)INT64_MAX) return json_integer((json_int_t)v);
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRIu64, v);
    return json_string(buf);
}

static json_t *json_f64(double v) {
    if (isnan(v)) return json_string("nan");
    if (isinf(v)) return json_string(v > 0 ? "inf" : "-inf");
    return json_real(v);
}

static json_t *json_value(const qr_gguf_value *v, bool full);

/* Element i of array v as JSON. */
static json_t *json_elem(const qr_gguf_value *v, uint64_t i, bool full) {
    switch (v->arr.elem_type) {
    case QR_GGUF_STRING: return json_str(qr_gguf_arr_str(v, i));
    case QR_GGUF_ARRAY: return json_value(&v->arr.items[i], full);
    case QR_GGUF_BOOL: return json_boolean(qr_gguf_arr_u64(v, i) != 0);
    case QR_GGUF_F32:
    case QR_GGUF_F64: return json_f64(qr_gguf_arr_f64(v, i));
    case QR_GGUF_I8:
    case QR_GGUF_I16:
    case QR_GGUF_I32:
    case QR_GGUF_I64: return json_integer(qr_gguf_arr_i64(v, i));
    default: return json_u64(qr_gguf_arr_u64(v, i));
    }
}

/* Scalars become JSON values; arrays become {"type","elem_type","count","truncated","value"}. */
static json_t *json_value(const qr_gguf_value *v, bool full) {
    switch (v->type) {
    case QR_GGUF_STRING: return json_str(v->str);
    case QR_GGUF_BOOL: return json_boolean(v->u64 != 0);
    case QR_GGUF_F32:
    case QR_GGUF_F64: return json_f64(v->f64);
    case QR_GGUF_I8:
    case QR_GGUF_I16:
    case QR_GGUF_I32:
    case QR_GGUF_I64: return json_integer(v->i64);
    case QR_GGUF_ARRAY: break;
    default: return json_u64(v->u64);
    }
    uint64_t n = v->arr.count, shown = full || n <= ARRAY_PREVIEW ? n : ARRAY_PREVIEW;
    json_t *vals = json_array();
    for (uint64_t i = 0; i < shown; i++) json_array_append_new(vals, json_elem(v, i, full));
    return json_pack("{s:s, s:s, s:I, s:b, s:o}", "type", "array", "elem_type", qr_gguf_vtype_name(v->arr.elem_type), "count",
                     (json_int_t)n, "truncated", shown < n, "value", vals);
}

/* One metadata entry: {"key","offset","type",...,"value"} (array fields inlined). */
static json_t *json_kv(const qr_gguf_kv *kv, bool full) {
    json_t *o = json_object();
    json_object_set_new(o, "key", json_str(kv->key));
    json_object_set_new(o, "offset", json_u64(kv->offset));
    json_t *v = json_value(&kv->value, full);
    if (kv->value.type == QR_GGUF_ARRAY) {
        json_object_update(o, v);
        json_decref(v);
    } else {
        json_object_set_new(o, "type", json_string(qr_gguf_vtype_name(kv->value.type)));
        json_object_set_new(o, "value", v);
    }
    return o;
}

static int print_json(const qr_gguf *g, const inspect_opts *o, const type_totals *tt, uint64_t params, uint64_t bytes) {
    json_t *root = json_object();
    json_object_set_new(root, "file", json_str((qr_gguf_str){o->path, strlen(o->path)}));
    json_object_set_new(root, "version", json_integer(g->version));
    json_object_set_new(root, "alignment", json_integer(g->alignment));
    json_object_set_new(root, "data_offset", json_u64(g->data_offset));
    json_object_set_new(root, "file_size", json_u64(g->size));
    qr_gguf_str arch;
    json_object_set_new(root, "architecture", qr_gguf_get_str(g, "general.architecture", &arch) ? json_str(arch) : json_null());
    json_object_set_new(root, "n_kv", json_u64(g->n_kv));
    json_t *meta = json_array();
    for (uint64_t i = 0; i < g->n_kv; i++) json_array_append_new(meta, json_kv(&g->kv[i], o->full));
    json_object_set_new(root, "metadata", meta);
    json_object_set_new(root, "n_tensors", json_u64(g->n_tensors));
    json_t *tensors = json_array();
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const qr_gguf_tensor *t = &g->tensors[i];
        json_t *shape = json_array();
        for (uint32_t d = 0; d < t->n_dims; d++) json_array_append_new(shape, json_integer(t->ne[d]));
        json_array_append_new(tensors, json_pack("{s:o, s:s, s:i, s:o, s:I, s:o, s:o, s:o}", "name", json_str(t->name), "type",
                                                 qr_type_name(t->type), "type_id", (int)t->type, "shape", shape, "n_elements",
                                                 (json_int_t)qr_gguf_tensor_nelements(t), "offset", json_u64(t->offset),
                                                 "file_offset", json_u64(g->data_offset + t->offset), "bytes", json_u64(t->nbytes)));
    }
    json_object_set_new(root, "tensors", tensors);
    json_object_set_new(root, "parameters", json_u64(params));
    json_object_set_new(root, "tensor_bytes", json_u64(bytes));
    json_t *types = json_object();
    for (int t = 0; t < QR_TYPE_COUNT; t++)
        if (tt[t].tensors)
            json_object_set_new(types, qr_type_name((uint32_t)t),
                                json_pack("{s:o, s:o, s:o}", "tensors", json_u64(tt[t].tensors), "parameters", json_u64(tt[t].params),
                                          "bytes", json_u64(tt[t].bytes)));
    json_object_set_new(root, "types", types);
    int rc = json_dumpf(root, stdout, JSON_INDENT(1)) == 0 ? 0 : 1;
    fputc('\n', stdout);
    json_decref(root);
    if (rc) fprintf(stderr, "quarrel inspect: failed to write JSON\n");
    return rc;
}

/* ---- text ---------------------------------------------------------------------------------------- */

/* Prints s quoted with C-style escapes; at most `limit` bytes (cut on a UTF-8 boundary) unless full. */
static void print_str(qr_gguf_str s, bool full, uint64_t limit) {
    uint64_t n = s.len;
    if (!full && n > limit) {
        n = limit;
        while (n > 0 && ((unsigned char)s.data[n] & 0xc0) == 0x80) n--;
    }
    putchar('"');
    for (uint64_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s.data[i];
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c == '\n') fputs("\\n", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c == '\r') fputs("\\r", stdout);
        else if (c < 0x20 || c == 0x7f) printf("\\x%02x", c);
        else putchar(c);
    }
    putchar('"');
    if (n < s.len) printf("... (%" PRIu64 " bytes)", s.len);
}

static void print_value(const qr_gguf_value *v, bool full);

static void print_elem(const qr_gguf_value *v, uint64_t i, bool full) {
    switch (v->arr.elem_type) {
    case QR_GGUF_STRING: print_str(qr_gguf_arr_str(v, i), full, STRING_PREVIEW); break;
    case QR_GGUF_ARRAY: print_value(&v->arr.items[i], full); break;
    case QR_GGUF_BOOL: fputs(qr_gguf_arr_u64(v, i) ? "true" : "false", stdout); break;
    case QR_GGUF_F32: printf("%.9g", qr_gguf_arr_f64(v, i)); break;
    case QR_GGUF_F64: printf("%.17g", qr_gguf_arr_f64(v, i)); break;
    case QR_GGUF_I8:
    case QR_GGUF_I16:
    case QR_GGUF_I32:
    case QR_GGUF_I64: printf("%" PRId64, qr_gguf_arr_i64(v, i)); break;
    default: printf("%" PRIu64, qr_gguf_arr_u64(v, i)); break;
    }
}

static void print_value(const qr_gguf_value *v, bool full) {
    switch (v->type) {
    case QR_GGUF_STRING: print_str(v->str, full, STRING_PREVIEW); return;
    case QR_GGUF_BOOL: fputs(v->u64 ? "true" : "false", stdout); return;
    case QR_GGUF_F32: printf("%.9g", v->f64); return;
    case QR_GGUF_F64: printf("%.17g", v->f64); return;
    case QR_GGUF_I8:
    case QR_GGUF_I16:
    case QR_GGUF_I32:
    case QR_GGUF_I64: printf("%" PRId64, v->i64); return;
    case QR_GGUF_ARRAY: break;
    default: printf("%" PRIu64, v->u64); return;
    }
    uint64_t n = v->arr.count, shown = full || n <= ARRAY_PREVIEW ? n : ARRAY_PREVIEW;
    putchar('[');
    for (uint64_t i = 0; i < shown; i++) {
        if (i) fputs(", ", stdout);
        print_elem(v, i, full);
    }
    if (shown < n) printf(", ... (%" PRIu64 " more)", n - shown);
    putchar(']');
}

/* "1.23 M" style count. */
static const char *human_count(uint64_t n, char *buf, size_t cap) {
    if (n >= 1000000000ull) snprintf(buf, cap, "%.2f B", (double)n / 1e9);
    else if (n >= 1000000ull) snprintf(buf, cap, "%.2f M", (double)n / 1e6);
    else if (n >= 1000ull) snprintf(buf, cap, "%.2f K", (double)n / 1e3);
    else snprintf(buf, cap, "%" PRIu64, n);
    return buf;
}

static const char *human_bytes(uint64_t n, char *buf, size_t cap) {
    if (n >= (1ull << 30)) snprintf(buf, cap, "%.2f GiB", (double)n / (1ull << 30));
    else if (n >= (1ull << 20)) snprintf(buf, cap, "%.2f MiB", (double)n / (1ull << 20));
    else if (n >= (1ull << 10)) snprintf(buf, cap, "%.2f KiB", (double)n / (1ull << 10));
    else snprintf(buf, cap, "%" PRIu64 " B", n);
    return buf;
}

static int print_text(const qr_gguf *g, const inspect_opts *o, const type_totals *tt, uint64_t params, uint64_t bytes) {
    char h1[32], h2[32];
    qr_gguf_str arch = {"(none)", 6};
    qr_gguf_get_str(g, "general.architecture", &arch);
    printf("file:          %s\n", o->path);
    printf("format:        GGUF v%u, alignment %u, data section at offset %" PRIu64 ", %s (%" PRIu64 " bytes)\n", g->version,
           g->alignment, g->data_offset, human_bytes(g->size, h1, sizeof h1), g->size);
    printf("architecture:  ");
    print_str(arch, true, 0);
    printf("\n\nmetadata (%" PRIu64 " keys):\n", g->n_kv);
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const qr_gguf_kv *kv = &g->kv[i];
        char type[32];
        if (kv->value.type == QR_GGUF_ARRAY)
            snprintf(type, sizeof type, "%s[%" PRIu64 "]", qr_gguf_vtype_name(kv->value.arr.elem_type), kv->value.arr.count);
        else
            snprintf(type, sizeof type, "%s", qr_gguf_vtype_name(kv->value.type));
        printf("  %-44.*s %-16s ", (int)(kv->key.len > 200 ? 200 : kv->key.len), kv->key.data, type);
        print_value(&kv->value, o->full);
        putchar('\n');
    }
    printf("\ntensors (%" PRIu64 "):\n  %-5s %-36s %-7s %-24s %14s %12s\n", g->n_tensors, "#", "name", "type", "shape (ne0 first)",
           "offset", "bytes");
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const qr_gguf_tensor *t = &g->tensors[i];
        char shape[96];
        int n = 0;
        for (uint32_t d = 0; d < t->n_dims; d++)
            n += snprintf(shape + n, sizeof shape - (size_t)n, "%s%" PRId64, d ? " x " : "", t->ne[d]);
        printf("  %-5" PRIu64 " %-36.*s %-7s %-24s %14" PRIu64 " %12" PRIu64 "\n", i, (int)(t->name.len > 200 ? 200 : t->name.len),
               t->name.data, qr_type_name(t->type), shape, t->offset, t->nbytes);
    }
    printf("\nparameters:    %" PRIu64 " (%s)\n", params, human_count(params, h1, sizeof h1));
    printf("tensor data:   %" PRIu64 " bytes (%s)\n", bytes, human_bytes(bytes, h2, sizeof h2));
    printf("by type:\n  %-8s %8s %16s %16s\n", "type", "tensors", "parameters", "bytes");
    for (int t = 0; t < QR_TYPE_COUNT; t++)
        if (tt[t].tensors)
            printf("  %-8s %8" PRIu64 " %16" PRIu64 " %16" PRIu64 "\n", qr_type_name((uint32_t)t), tt[t].tensors, tt[t].params,
                   tt[t].bytes);
    return ferror(stdout) ? 1 : 0;
}

int cmd_inspect(int argc, char **argv) {
    inspect_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0) return rc;
    qr_gguf *g = NULL;
    char err[512];
    qr_status st = qr_gguf_open(o.path, &g, err, sizeof err);
    if (st) {
        fprintf(stderr, "quarrel inspect: %s (%s)\n", err, qr_status_str(st));
        return 1;
    }
    type_totals tt[QR_TYPE_COUNT];
    memset(tt, 0, sizeof tt);
    uint64_t params = 0, bytes = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const qr_gguf_tensor *t = &g->tensors[i];
        uint64_t n = (uint64_t)qr_gguf_tensor_nelements(t);
        tt[t->type].tensors++;
        tt[t->type].params += n;
        tt[t->type].bytes += t->nbytes;
        params += n;
        bytes += t->nbytes;
    }
    rc = o.json ? print_json(g, &o, tt, params, bytes) : print_text(g, &o, tt, params, bytes);
    qr_gguf_close(g);
    return rc;
}
