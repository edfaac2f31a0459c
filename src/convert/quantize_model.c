/* quantize_model.c — row conversion, a small parallel-for, and the `quarrel quantize` driver. */
#define _POSIX_C_SOURCE 200809L
#include "convert/quantize_model.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "quant/quant.h"
#include "convert/gguf_stream.h"
#include "util/util.h"

/* Floats converted per chunk of rows (bounded memory: this many floats + their encoded bytes). */
#define CHUNK_FLOATS (8u << 20)
/* GGML_QNT_VERSION */
#define QUANTIZATION_VERSION 2

/* ---- row conversion ------------------------------------------------------------------------ */

bool qr_quant_can_encode(qr_type type) {
    if (type == QR_TYPE_F32 || type == QR_TYPE_F16 || type == QR_TYPE_BF16) return true;
    const qr_quant_traits *t = qr_quant_traits_ref(type);
    return t && t->from_float;
}

bool qr_quant_can_decode(qr_type type) {
    if (type == QR_TYPE_F32 || type == QR_TYPE_F16 || type == QR_TYPE_BF16) return true;
    const qr_quant_traits *t = qr_quant_traits_ref(type);
    return t && t->to_float;
}

void qr_quant_encode_rows(qr_type type, const float *src, void *dst, int64_t n_rows, int64_t n_per_row) {
    int64_t n = n_rows * n_per_row;
    switch (type) {
    case QR_TYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); return;
    case QR_TYPE_F16: {
        /* F16C conversion when the CPU has it: IEEE round-to-nearest-even, the same bits as the
         * scalar qr_fp32_to_fp16 (checked in test_synth) */
        const qr_quant_traits *t = qr_quant_traits_best(QR_TYPE_F16);
        if (t && t->from_float) {
            t->from_float(src, dst, n);
            return;
        }
        uint16_t *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = qr_fp32_to_fp16(src[i]);
        return;
    }
    case QR_TYPE_BF16: {
        uint16_t *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = qr_fp32_to_bf16(src[i]);
        return;
    }
    default: break;
    }
    const qr_quant_traits *t = qr_quant_traits_ref(type);
    size_t row = qr_type_row_size(type, n_per_row);
    for (int64_t r = 0; r < n_rows; r++) t->from_float(src + r * n_per_row, (uint8_t *)dst + (size_t)r * row, n_per_row);
}

void qr_quant_decode_rows(qr_type type, const void *src, float *dst, int64_t n_rows, int64_t n_per_row) {
    int64_t n = n_rows * n_per_row;
    switch (type) {
    case QR_TYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); return;
    case QR_TYPE_F16: {
        const qr_quant_traits *t = qr_quant_traits_best(QR_TYPE_F16);
        if (t && t->to_float && ((uintptr_t)src & 1) == 0) {
            t->to_float(src, dst, n);
            return;
        }
        const uint8_t *s = src;
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            dst[i] = qr_fp16_to_fp32(h);
        }
        return;
    }
    case QR_TYPE_BF16: {
        const uint8_t *s = src;
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            dst[i] = qr_bf16_to_fp32(h);
        }
        return;
    }
    default: break;
    }
    const qr_quant_traits *t = qr_quant_traits_ref(type);
    size_t row = qr_type_row_size(type, n_per_row);
    for (int64_t r = 0; r < n_rows; r++) t->to_float((const uint8_t *)src + (size_t)r * row, dst + r * n_per_row, n_per_row);
}

void qr_quant_round_f16(float *x, int64_t n) {
    uint16_t buf[1024];
    for (int64_t i = 0; i < n; i += 1024) {
        int64_t k = n - i < 1024 ? n - i : 1024;
        qr_quant_encode_rows(QR_TYPE_F16, x + i, buf, 1, k);
        qr_quant_decode_rows(QR_TYPE_F16, buf, x + i, 1, k);
    }
}

/* ---- parallel for --------------------------------------------------------------------------- */

typedef struct par_job {
    void (*fn)(void *ctx, int64_t begin, int64_t end);
    void *ctx;
    int64_t begin, end;
} par_job;

static void *par_run(void *arg) {
    par_job *j = arg;
    if (j->begin < j->end) j->fn(j->ctx, j->begin, j->end);
    return NULL;
}

void qr_parallel_for(int n_threads, int64_t n, void (*fn)(void *ctx, int64_t begin, int64_t end), void *ctx) {
    if (n <= 0) return;
    if (n_threads > n) n_threads = (int)n;
    if (n_threads <= 1) {
        fn(ctx, 0, n);
        return;
    }
    if (n_threads > 256) n_threads = 256;
    par_job jobs[256];
    pthread_t tids[256];
    bool started[256] = {false};
    for (int t = 0; t < n_threads; t++)
        jobs[t] = (par_job){fn, ctx, n * t / n_threads, n * (t + 1) / n_threads};
    for (int t = 1; t < n_threads; t++) started[t] = pthread_create(&tids[t], NULL, par_run, &jobs[t]) == 0;
    par_run(&jobs[0]);
    for (int t = 1; t < n_threads; t++) {
        if (started[t]) pthread_join(tids[t], NULL);
        else par_run(&jobs[t]); /* could not start a thread: do its share here */
    }
}

/* ---- the driver ------------------------------------------------------------------------------ */

typedef struct convert_ctx {
    qr_type src_type, dst_type;
    const uint8_t *src;  /* first row of the chunk */
    uint8_t *dst;        /* encoded chunk */
    float *f32;          /* [rows][n_per_row] scratch */
    int64_t n_per_row;
    size_t src_row, dst_row; /* bytes per row */
} convert_ctx;

static void convert_range(void *arg, int64_t begin, int64_t end) {
    convert_ctx *c = arg;
    float *f = c->f32 + begin * c->n_per_row;
    qr_quant_decode_rows(c->src_type, c->src + (size_t)begin * c->src_row, f, end - begin, c->n_per_row);
    qr_quant_encode_rows(c->dst_type, f, c->dst + (size_t)begin * c->dst_row, end - begin, c->n_per_row);
}

/* Reads "{arch}.{suffix}" as an int; the first element when it is an array. */
static int32_t arch_int(const qr_gguf *g, const char *arch, const char *suffix, int32_t dflt) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int32_t v;
    if (qr_gguf_get_i32(g, key, &v)) return v;
    const qr_gguf_value *a = qr_gguf_get_arr(g, key, QR_GGUF_VTYPE_COUNT);
    if (a && a->arr.count > 0 && a->arr.elem_type != QR_GGUF_STRING && a->arr.elem_type != QR_GGUF_ARRAY)
        return (int32_t)qr_gguf_arr_i64(a, 0);
    return dflt;
}

static int cmp_tensor_order(const void *a, const void *b, void *g) {
    const qr_gguf *gg = g;
    char na[256], nb[256];
    qr_gguf_str_copy(gg->tensors[*(const size_t *)a].name, na, sizeof na);
    qr_gguf_str_copy(gg->tensors[*(const size_t *)b].name, nb, sizeof nb);
    return qr_quant_tensor_order_cmp(na, nb);
}

/* Tells the kernel that a finished tensor's pages of the (read-only) input mapping are no longer
 * needed, so that the resident set stays bounded on models larger than memory. */
static void release_pages(const qr_gguf_tensor *t) {
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0 || !t->nbytes) return;
    uintptr_t begin = ((uintptr_t)t->data + (uintptr_t)page - 1) / (uintptr_t)page * (uintptr_t)page;
    uintptr_t end = ((uintptr_t)t->data + t->nbytes) / (uintptr_t)page * (uintptr_t)page;
    if (end > begin) madvise((void *)begin, end - begin, MADV_DONTNEED);
}

static bool is_replaced_key(qr_gguf_str k) {
    return qr_gguf_str_eq(k, "general.file_type") || qr_gguf_str_eq(k, "general.quantization_version") ||
           qr_gguf_str_eq(k, "split.no") || qr_gguf_str_eq(k, "split.count") || qr_gguf_str_eq(k, "split.tensors.count");
}

qr_status qr_quantize_model(const char *in_path, const char *out_path, const qr_quantize_options *opt,
                            qr_quantize_stats *stats, char *err, size_t err_len) {
    qr_status st = QR_OK;
    qr_gguf *g = NULL;
    qr_gguf_stream *out = NULL;
    size_t *order = NULL;
    qr_type *types = NULL;
    char **names = NULL;
    float *f32 = NULL;
    uint8_t *enc = NULL;
    qr_quantize_stats local = {0};
    double t0 = qr_time_s();

    const qr_ftype_info *ft = qr_ftype_from_name(opt->ftype);
    if (!ft) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "unknown type '%s'; expected one of: %s",
                            opt->ftype ? opt->ftype : "(null)", qr_ftype_names());
    if (!qr_quant_can_encode(ft->base))
        return qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "type %s: no quantizer for %s", ft->name, qr_type_name(ft->base));
    int n_threads = opt->n_threads > 0 ? opt->n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n_threads < 1) n_threads = 1;

    st = qr_gguf_open(in_path, &g, err, err_len);
    if (st != QR_OK) goto done;
    size_t nt = (size_t)g->n_tensors;

    /* model facts for the rules */
    qr_quant_model_info mi = {0};
    qr_gguf_str arch;
    if (qr_gguf_get_str(g, "general.architecture", &arch)) qr_gguf_str_copy(arch, mi.arch, sizeof mi.arch);
    mi.n_layer = arch_int(g, mi.arch, "block_count", 0);
    mi.n_head = arch_int(g, mi.arch, "attention.head_count", 0);
    mi.n_head_kv = arch_int(g, mi.arch, "attention.head_count_kv", mi.n_head);
    mi.n_expert = arch_int(g, mi.arch, "expert_count", 0);

    order = malloc(sizeof *order * (nt ? nt : 1));
    types = malloc(sizeof *types * (nt ? nt : 1));
    names = calloc(nt ? nt : 1, sizeof *names);
    if (!order || !types || !names) goto nomem;
    for (size_t i = 0; i < nt; i++) {
        order[i] = i;
        names[i] = malloc(g->tensors[i].name.len + 1);
        if (!names[i]) goto nomem;
        qr_gguf_str_copy(g->tensors[i].name, names[i], g->tensors[i].name.len + 1);
    }
    qsort_r(order, nt, sizeof *order, cmp_tensor_order, g);

    qr_quant_plan plan;
    qr_quant_plan_init(&plan, ft, opt->pure, &mi, (const char *const *)names, nt);
    for (size_t k = 0; k < nt; k++) {
        size_t i = order[k];
        const qr_gguf_tensor *t = &g->tensors[i];
        char note[256];
        types[i] = qr_quant_plan_pick(&plan, names[i], t->n_dims, t->ne, t->type, note, sizeof note);
        if (note[0]) {
            if (opt->verbose) fprintf(stderr, "fallback: %s\n", note);
            else qr_log(QR_LOG_DEBUG, "quantize: %s", note);
        }
        if (types[i] == t->type) continue;
        if (qr_type_table[t->type].quantized && !opt->allow_requantize) {
            st = qr_errf(err, err_len, QR_ERR_INVALID_ARG,
                         "%s: tensor '%s' is already %s; requantizing loses quality (pass --allow-requantize)",
                         in_path, names[i], qr_type_name(t->type));
            goto done;
        }
        if (!qr_quant_can_decode(t->type)) {
            st = qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "%s: tensor '%s': cannot dequantize type %s", in_path,
                         names[i], qr_type_name(t->type));
            goto done;
        }
        if (!qr_quant_can_encode(types[i])) {
            st = qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "tensor '%s': no quantizer for %s", names[i],
                         qr_type_name(types[i]));
            goto done;
        }
    }
    local.n_fallback = (uint64_t)plan.n_fallback;

    /* describe the output */
    out = qr_gguf_stream_create(QR_GGUF_DEFAULT_ALIGNMENT);
    if (!out) goto nomem;
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (!is_replaced_key(g->kv[i].key)) qr_gguf_stream_set_value(out, g->kv[i].key, &g->kv[i].value);
    qr_gguf_stream_set_u32(out, "general.quantization_version", QUANTIZATION_VERSION);
    qr_gguf_stream_set_u32(out, "general.file_type", (uint32_t)ft->llama_ftype);
    for (size_t k = 0; k < nt; k++) {
        size_t i = order[k];
        qr_gguf_stream_add_tensor(out, names[i], types[i], g->tensors[i].n_dims, g->tensors[i].ne);
    }
    st = qr_gguf_stream_begin(out, out_path, err, err_len);
    if (st != QR_OK) goto done;

    uint64_t total_in = 0;
    for (size_t i = 0; i < nt; i++) total_in += g->tensors[i].nbytes;
    qr_progress prog;
    qr_progress_begin(&prog, "quantize", total_in);
    if (!opt->progress) prog.enabled = false;

    f32 = malloc(sizeof *f32 * CHUNK_FLOATS);
    if (!f32) goto nomem;
    size_t enc_cap = 0;
    uint64_t done_in = 0;
    for (size_t k = 0; k < nt; k++) {
        size_t i = order[k];
        const qr_gguf_tensor *t = &g->tensors[i];
        qr_type dt = types[i];
        size_t out_bytes = (size_t)qr_gguf_stream_tensor_nbytes(out, k);
        if (opt->verbose) {
            fprintf(stderr, "[%4zu/%4zu] %-36s %6s -> %-6s %10.2f MiB -> %10.2f MiB\n", k + 1, nt, names[i],
                    qr_type_name(t->type), qr_type_name(dt), (double)t->nbytes / 1048576.0,
                    (double)out_bytes / 1048576.0);
        }
        local.n_tensors++;
        local.bytes_in += t->nbytes;
        local.bytes_out += out_bytes;
        if (dt == t->type) {
            /* copy through in bounded pieces */
            const uint8_t *p = t->data;
            uint64_t left = t->nbytes;
            while (left) {
                size_t piece = left < (64u << 20) ? (size_t)left : (64u << 20);
                st = qr_gguf_stream_write(out, p, piece, err, err_len);
                if (st != QR_OK) goto done;
                p += piece;
                left -= piece;
                qr_progress_update(&prog, done_in + (t->nbytes - left));
            }
            done_in += t->nbytes;
            release_pages(t);
            continue;
        }
        local.n_quantized++;
        int64_t n_per_row = t->ne[0];
        int64_t n_rows = qr_gguf_tensor_nelements(t) / n_per_row;
        int64_t chunk_rows = (int64_t)(CHUNK_FLOATS / (uint64_t)n_per_row);
        if (chunk_rows < 1) {
            /* a single row larger than the chunk: grow the scratch */
            float *nf = realloc(f32, sizeof *f32 * (size_t)n_per_row);
            if (!nf) goto nomem;
            f32 = nf;
            chunk_rows = 1;
        }
        convert_ctx c = {.src_type = t->type, .dst_type = dt, .n_per_row = n_per_row,
                         .src_row = qr_type_row_size(t->type, n_per_row), .dst_row = qr_type_row_size(dt, n_per_row),
                         .f32 = f32};
        size_t need = c.dst_row * (size_t)(chunk_rows < n_rows ? chunk_rows : n_rows);
        if (need > enc_cap) {
            uint8_t *ne = realloc(enc, need);
            if (!ne) goto nomem;
            enc = ne;
            enc_cap = need;
        }
        c.dst = enc;
        for (int64_t r0 = 0; r0 < n_rows; r0 += chunk_rows) {
            int64_t rows = n_rows - r0 < chunk_rows ? n_rows - r0 : chunk_rows;
            c.src = (const uint8_t *)t->data + (size_t)r0 * c.src_row;
            qr_parallel_for(n_threads, rows, convert_range, &c);
            st = qr_gguf_stream_write(out, enc, c.dst_row * (size_t)rows, err, err_len);
            if (st != QR_OK) goto done;
            qr_progress_update(&prog, done_in + (uint64_t)(r0 + rows) * c.src_row);
        }
        done_in += t->nbytes;
        release_pages(t);
    }
    st = qr_gguf_stream_finish(out, err, err_len);
    qr_progress_end(&prog);
    goto done;

nomem:
    st = qr_errf(err, err_len, QR_ERR_NOMEM, "quantize: out of memory");
done:
    local.seconds = qr_time_s() - t0;
    if (stats) *stats = local;
    if (names)
        for (size_t i = 0; i < (g ? (size_t)g->n_tensors : 0); i++) free(names[i]);
    free(names);
    free(order);
    free(types);
    free(f32);
    free(enc);
    qr_gguf_stream_free(out);
    qr_gguf_close(g);
    return st;
}
