/* backend_cpu.c — the CPU backend: memory, paged KV storage, batch plan, and the op table, each op
 * split over the thread pool and computed by the per-ISA kernels (ops_scalar.c / ops_avx2.c). */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "backend/cpu/cpu.h"
#include "util/knobs.h"
#include "util/util.h"

_Static_assert(QR_KNOB_TILE_MAX == QR_TILE_MAX, "QUARREL_TILE's range (util/knobs.h) is the kernels' tile limit");

/* Below this many elements an elementwise/row op runs on the calling thread only. */
#define PAR_MIN_ELEMS 32768

static inline cpu_backend *CB(qr_backend *be) { return (cpu_backend *)be->impl; }

/* Records the first op error (reported by last_error). */
static void raise_error(cpu_backend *cb, qr_status st, const char *msg) {
    if (cb->error != QR_OK) return;
    cb->error = st;
    snprintf(cb->error_msg, sizeof cb->error_msg, "%s", msg);
}

bool qr_cpu_has_avx2(void) {
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
    const bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28), f16c = c & (1u << 29);
    if (!(fma && osxsave && avx && f16c)) return false;
    unsigned xlo, xhi;
    __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
    if ((xlo & 6u) != 6u) return false; /* OS saves XMM and YMM state */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    return b & (1u << 5);
#else
    return false;
#endif
}

void qr_cpu_raise(qr_backend *be, qr_status st, const char *msg) { raise_error(CB(be), st, msg); }

/* ---- lifetime and memory ---- */

static void cpu_destroy(qr_backend *be) {
    cpu_backend *cb = CB(be);
    cpu_pool_free(cb->pool);
    free(cb->gelu_tab);
    free(cb->tokens);
    free(cb->pos);
    free(cb->seq);
    free(cb->kv_slot);
    free(cb->output_rows);
    free(cb->block_table);
    free(cb->wdata);
    free(cb->heads_buf);
    free(cb->scores);
    free(cb->attn_acc);
    free(cb->seq_last);
    free(cb);
    free(be);
}

static void *cpu_alloc(qr_backend *be, size_t bytes) {
    (void)be;
    size_t sz = (bytes + 63) & ~(size_t)63;
    if (sz == 0) sz = 64;
    return aligned_alloc(64, sz);
}

static void cpu_free(qr_backend *be, void *ptr) {
    (void)be;
    free(ptr);
}

static void cpu_write(qr_backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    if (bytes) memcpy(dst, src, bytes);
}

static void cpu_read(qr_backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    if (bytes) memcpy(dst, src, bytes);
}

static void cpu_read_rows(qr_backend *be, void *dst, size_t dst_pitch, const void *src, size_t src_pitch,
                          size_t row_bytes, size_t n_rows) {
    (void)be;
    for (size_t r = 0; r < n_rows; r++)
        memcpy((char *)dst + r * dst_pitch, (const char *)src + r * src_pitch, row_bytes);
}

/* topk_rows as the CUDA backend computes it (the same contract, so that the scheduler's top-k path runs in the CPU
 * tests too): per row an insertion into the k best so far, in the order value descending, ties to the lower index. */
static void cpu_topk_rows(qr_backend *be, const float *src, int64_t n_rows, int64_t n, int32_t k, void *out) {
    (void)be;
    float *vals = (float *)out;
    int32_t *ids = (int32_t *)(vals + n_rows * k), *n_fin = ids + n_rows * k;
    for (int64_t r = 0; r < n_rows; r++) {
        const float *x = src + r * n;
        float *v = vals + r * k;
        int32_t *id = ids + r * k, m = 0, fin = 0;
        bool bad = false;
        for (int64_t i = 0; i < n; i++) {
            const float a = x[i];
            bad = bad || isnan(a) || a == INFINITY;
            fin += a > -INFINITY;
            if (isnan(a) || (m == k && !(a > v[k - 1]))) continue; /* (a later index never wins a tie) */
            int32_t j = m < k ? m++ : k - 1;
            for (; j > 0 && a > v[j - 1]; j--) v[j] = v[j - 1], id[j] = id[j - 1];
            v[j] = a;
            id[j] = (int32_t)i;
        }
        for (; m < k; m++) v[m] = -INFINITY, id[m] = 0; /* (k <= n: only NaN rows, flagged) */
        n_fin[r] = bad ? -1 : fin;
    }
}

static void cpu_synchronize(qr_backend *be) { (void)be; }

static const qr_quant_traits *cpu_traits(const cpu_backend *cb, qr_type t);

/* The weight's repacked copy (w->device) when its type has a load-time repack on this CPU (qr_quant_traits rp:
 * Q4_K, Q4_0 at both ISA levels, Q8_0, Q4_1, Q5_0 on AVX-512), it is a 2-D matrix of a multiple of rp.rows rows and
 * not an embedding table only gathered; QUARREL_CPU_REPACK=0 keeps the file's layout. The mapped file's pages of the
 * weight are read once here and then only by ops that take the rows as the file has them (heads, experts: 3-D
 * weights, never packed; get_rows of a packed table reads the packed copy). */
static qr_status cpu_weight_prepare(qr_backend *be, qr_weight *w, char *err, size_t err_len) {
    if (!w->host) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "weight %s has no data", w->name ? w->name : "?");
    w->device = NULL;
    const qr_quant_traits *tr = cpu_traits(CB(be), w->type);
    if (!tr || !tr->rp.pack || w->table || !qr_knob_int(QR_KNOB_CPU_REPACK) || w->ne[2] != 1 || w->ne[3] != 1 ||
        w->ne[1] % tr->rp.rows != 0 || qr_type_row_size(w->type, w->ne[0]) == 0)
        return QR_OK;
    const size_t bytes = tr->rp.row_bytes_of(w->ne[0]) * (size_t)w->ne[1];
    void *p = NULL;
    if (bytes == 0 || posix_memalign(&p, 64, bytes) != 0) return QR_OK; /* (no room: the file's layout serves) */
    /* packed about 1 MiB of rows at a time, the file's pages of the rows packed so far dropped as it goes (whole pages
     * inside the weight, from the read-only mapping only): the weight is never resident twice, not even while
     * it is packed (a 178 MB tied embedding would otherwise raise the peak by its size) */
    const size_t prow = tr->rp.row_bytes_of(w->ne[0]), page = (size_t)sysconf(_SC_PAGESIZE);
    int64_t chunk = (int64_t)(((size_t)1 << 20) / w->row_bytes) / tr->rp.rows * tr->rp.rows;
    if (chunk < tr->rp.rows) chunk = tr->rp.rows;
    uintptr_t dropped = ((uintptr_t)w->host + page - 1) / page * page;
    /* and never mapped back in a piece: with large page-cache folios (ext4, Linux 6.18) a fault on a small weight
     * next to this one (a norm vector read every pass) mapped the whole 2 MB folio around it with one PMD, pages of
     * the packed weights included (SmolLM2 Q8_0: 84 of 145 MB of the file mapped again, peak RSS 1.48x llama.cpp's);
     * MADV_NOHUGEPAGE on the weight's whole pages keeps PMD mappings out of them (their part of the mapping becomes a
     * VMA of its own) */
    const uintptr_t last = ((uintptr_t)w->host + (size_t)w->ne[1] * w->row_bytes) / page * page;
    if (w->host_file && last > dropped) madvise((void *)dropped, last - dropped, MADV_NOHUGEPAGE);
    for (int64_t r0 = 0; r0 < w->ne[1]; r0 += chunk) {
        const int64_t n = w->ne[1] - r0 < chunk ? w->ne[1] - r0 : chunk;
        tr->rp.pack((const char *)w->host + (size_t)r0 * w->row_bytes, w->row_bytes, n, w->ne[0],
                    (char *)p + (size_t)r0 * prow);
        const uintptr_t done = ((uintptr_t)w->host + (size_t)(r0 + n) * w->row_bytes) / page * page;
        if (w->host_file && done > dropped) {
            madvise((void *)dropped, done - dropped, MADV_DONTNEED);
            dropped = done;
        }
    }
    w->device = p;
    return QR_OK;
}

static void cpu_weight_release(qr_backend *be, qr_weight *w) {
    (void)be;
    free(w->device);
    w->device = NULL;
}

static qr_status cpu_last_error(qr_backend *be, char *err, size_t err_len) {
    cpu_backend *cb = CB(be);
    qr_status st = cb->error;
    if (st != QR_OK) qr_errf(err, err_len, st, "cpu backend: %s", cb->error_msg);
    cb->error = QR_OK;
    cb->error_msg[0] = 0;
    return st;
}

static qr_status cpu_set_n_threads(qr_backend *be, int32_t n_threads, char *err, size_t err_len) {
    cpu_backend *cb = CB(be);
    if (n_threads < 1) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "n_threads must be >= 1 (got %d)", n_threads);
    if (cpu_pool_n_threads(cb->pool) == n_threads) return QR_OK;
    cpu_pool *np = cpu_pool_create(n_threads);
    if (!np) return qr_errf(err, err_len, QR_ERR_NOMEM, "cannot start %d threads", n_threads);
    cpu_pool_free(cb->pool);
    cb->pool = np;
    return QR_OK;
}

/* ---- KV storage ---- */

static void cpu_kv_free(qr_backend *be, qr_kv_storage *kv) {
    (void)be;
    if (!kv) return;
    for (int32_t l = 0; l < kv->desc.n_layer; l++) {
        if (kv->k) free(kv->k[l]);
        if (kv->v) free(kv->v[l]);
    }
    free(kv->k);
    free(kv->v);
    free(kv);
}

/* d: checked by backend_check.c (a type of caps.kv_types). */
static qr_kv_storage *cpu_kv_alloc(qr_backend *be, const qr_kv_desc *d, char *err, size_t err_len) {
    qr_kv_storage *kv = calloc(1, sizeof *kv);
    if (!kv) goto oom;
    kv->desc = *d;
    kv->desc.n_layer = 0; /* counts the layers allocated so far, for cleanup */
    kv->row_k = qr_kv_row_bytes_k(d);
    kv->row_v = qr_kv_row_bytes_v(d);
    kv->flash = !(d->type_k == d->type_v && (d->type_k == QR_TYPE_F16 || d->type_k == QR_TYPE_F32));
    kv->k = calloc((size_t)d->n_layer + 1, sizeof(void *));
    kv->v = calloc((size_t)d->n_layer + 1, sizeof(void *));
    if (!kv->k || !kv->v) goto oom;
    const size_t slots = (size_t)d->n_blocks * (size_t)d->block_size;
    for (int32_t l = 0; l < d->n_layer; l++) {
        kv->k[l] = calloc(slots, kv->row_k);
        kv->v[l] = calloc(slots, kv->row_v);
        kv->desc.n_layer = l + 1;
        if (!kv->k[l] || !kv->v[l]) goto oom;
        /* fault the pages in now: the cache is a reservation, so the process's RSS should show it from
         * the start rather than grow as blocks are first used (the server's prefix cache fills them all) */
        memset(kv->k[l], 0, slots * kv->row_k);
        memset(kv->v[l], 0, slots * kv->row_v);
    }
    return kv;
oom:
    qr_errf(err, err_len, QR_ERR_NOMEM, "cannot allocate the KV cache (%d layers x %d blocks x %d slots)",
            d->n_layer, d->n_blocks, d->block_size);
    cpu_kv_free(be, kv);
    return NULL;
}

static void cpu_kv_copy_block(qr_backend *be, qr_kv_storage *kv, int32_t src, int32_t dst) {
    (void)be;
    const qr_kv_desc *d = &kv->desc;
    const size_t bk = (size_t)d->block_size * kv->row_k, bv = (size_t)d->block_size * kv->row_v;
    for (int32_t l = 0; l < d->n_layer; l++) {
        memcpy((char *)kv->k[l] + (size_t)dst * bk, (char *)kv->k[l] + (size_t)src * bk, bk);
        memcpy((char *)kv->v[l] + (size_t)dst * bv, (char *)kv->v[l] + (size_t)src * bv, bv);
    }
}

/* ---- batch plan ---- */

static bool grow_i32(int32_t **arr, size_t *cap, size_t need) {
    if (need <= *cap) return true;
    int32_t *p = realloc(*arr, need * sizeof(int32_t));
    if (!p) return false;
    *arr = p;
    return true;
}

/* p: checked by backend_check.c (counts, rows, output rows). */
static qr_status cpu_set_batch(qr_backend *be, const qr_batch_plan *p, char *err, size_t err_len) {
    cpu_backend *cb = CB(be);
    const size_t nt = (size_t)p->n_tokens, nbt = (size_t)p->n_seqs * (size_t)p->max_blocks;
    size_t cap = cb->plan_cap_tok;
    bool ok = true;
    ok = ok && grow_i32(&cb->tokens, &cap, nt);
    ok = ok && grow_i32(&cb->pos, &cap, nt);
    ok = ok && grow_i32(&cb->seq, &cap, nt);
    ok = ok && grow_i32(&cb->kv_slot, &cap, nt);
    ok = ok && grow_i32(&cb->output_rows, &cap, nt);
    if (ok && nt > cb->plan_cap_tok) cb->plan_cap_tok = nt;
    ok = ok && grow_i32(&cb->block_table, &cb->plan_cap_bt, nbt);
    if (ok && nbt > cb->plan_cap_bt) cb->plan_cap_bt = nbt;
    if (!ok) return qr_errf(err, err_len, QR_ERR_NOMEM, "cannot copy a batch plan of %d rows", p->n_tokens);
    memcpy(cb->tokens, p->tokens, nt * sizeof(int32_t));
    memcpy(cb->pos, p->pos, nt * sizeof(int32_t));
    memcpy(cb->seq, p->seq, nt * sizeof(int32_t));
    memcpy(cb->kv_slot, p->kv_slot, nt * sizeof(int32_t));
    if (p->n_outputs) memcpy(cb->output_rows, p->output_rows, (size_t)p->n_outputs * sizeof(int32_t));
    memcpy(cb->block_table, p->block_table, nbt * sizeof(int32_t));
    cb->n_tokens = p->n_tokens;
    cb->n_seqs = p->n_seqs;
    cb->max_blocks = p->max_blocks;
    cb->n_outputs = p->n_outputs;
    cb->row_exact = p->row_exact;
    return QR_OK;
}

/* ---- ops ---- */

static const qr_quant_traits *cpu_traits(const cpu_backend *cb, qr_type t) {
    return cb->scalar ? qr_quant_traits_ref(t) : qr_quant_traits_best(t);
}

typedef struct rows_task {
    cpu_backend *cb;
    const void *w;        /* op-specific weight/table */
    const void *w2;
    const float *x;
    float *y;
    int64_t n_rows, dim;
    float f0;
    const qr_quant_traits *tr;
    const void *extra;
    int32_t i0, i1, i2;
} rows_task;

/* Runs fn over n items of about `cost` elements each: on the calling thread when the op is small,
 * else on the pool in chunks of ~16K elements (at least a few chunks per thread). */
static void run_items(cpu_backend *cb, cpu_range_fn fn, void *arg, int64_t n, int64_t cost) {
    const int nth = cpu_pool_n_threads(cb->pool);
    if (cost < 1) cost = 1;
    if (n * cost < PAR_MIN_ELEMS || nth == 1) {
        fn(arg, 0, n, 0);
        return;
    }
    int64_t grain = (16384 + cost - 1) / cost;
    const int64_t fair = n / (4 * (int64_t)nth);
    if (fair >= 1 && grain > fair) grain = fair;
    cpu_pool_for(cb->pool, n, grain, fn, arg);
}

static void get_rows_task(void *arg, int64_t lo, int64_t hi, int ith) {
    rows_task *t = arg;
    const qr_weight *w = t->w;
    (void)ith;
    /* a repacked table (a tied output matrix): its rows from the packed copy, whose file pages were dropped (reading
     * them back would fault in their neighbours too) */
    const bool packed = w->device && t->tr->rp.unpack_row && w->row_bytes <= 65536;
    _Alignas(64) char row[packed ? w->row_bytes : 1];
    const size_t prow = packed ? t->tr->rp.row_bytes_of(t->dim) : 0;
    for (int64_t r = lo; r < hi; r++) {
        const int32_t id = t->cb->tokens[r];
        const void *src = (const char *)w->host + (size_t)id * w->row_bytes;
        if (packed) {
            const int R = t->tr->rp.rows;
            t->tr->rp.unpack_row((const char *)w->device + (size_t)(id / R) * R * prow, id % R, t->dim, row);
            src = row;
        }
        if (w->type == QR_TYPE_F32) memcpy(t->y + r * t->dim, src, (size_t)t->dim * sizeof(float));
        else t->tr->to_float(src, t->y + r * t->dim, t->dim);
    }
}

static void cpu_get_rows(qr_backend *be, const qr_weight *table, float *out) {
    cpu_backend *cb = CB(be);
    const qr_quant_traits *tr = cpu_traits(cb, table->type);
    if (table->type != QR_TYPE_F32 && (!tr || !tr->to_float)) {
        raise_error(cb, QR_ERR_UNSUPPORTED, "get_rows: the table's type cannot be dequantized");
        return;
    }
    rows_task t = {.cb = cb, .w = table, .y = out, .n_rows = cb->n_tokens, .dim = table->ne[0], .tr = tr};
    run_items(cb, get_rows_task, &t, cb->n_tokens, table->ne[0]);
}

static void cpu_gather_outputs(qr_backend *be, const float *src, int64_t dim, float *out) {
    cpu_backend *cb = CB(be);
    for (int32_t o = 0; o < cb->n_outputs; o++)
        memmove(out + (int64_t)o * dim, src + (int64_t)cb->output_rows[o] * dim, (size_t)dim * sizeof(float));
}

/* ---- matmul ---- */

typedef struct mm_task {
    const qr_weight *w;
    const qr_quant_traits *tr;  /* weight traits (vec_dot) */
    qr_from_float_fn act;       /* activation row -> vec_dot_type */
    /* llama.cpp's repacked path (see qr_quant_traits): token rows [0, n_gemm) use act_gemm and
     * dot_gemm (its 4-row GEMM), the others act and dot (its GEMV, or plain vec_dot); n_gemm = 0
     * when the weight has no repacked path */
    qr_from_float_fn act_gemm;
    qr_vec_dot_fn dot, dot_gemm;
    qr_vec_dot_tile_fn tile;    /* dot's tiled form (bit-identical results) when the weight type has one, else NULL */
    qr_vec_dot_tile_fn tile_gemm, tile_gemv; /* the same for dot_gemm (rows < n_gemm) and dot (the rest) */
    int tile_r, tile_c;         /* tile shape: weight rows x token rows, each <= QR_TILE_MAX (repacked: rp.rows x rp.cols) */
    const char *wbase;          /* the weight rows: w->host, or its repacked copy (tr->rp) */
    void (*act_extra)(const void *yrow, int64_t k, void *extra); /* the repacked tiles' extra (tr->rp.act_extra) */
    size_t xq_base;             /* bytes of a converted row before its extra */
    size_t wrow;                /* bytes a row at wbase */
    int64_t n_gemm;
    const float *x;
    float *y;
    int64_t n_tok, k, n;
    const char *xq;             /* converted activations, [n_tok] rows of xq_row bytes */
    size_t xq_row;
    int64_t rows_per_chunk, toks_per_chunk, n_row_chunks, n_chunks;
} mm_task;

static void mm_convert_task(void *arg, int64_t lo, int64_t hi, int ith) {
    mm_task *t = arg;
    (void)ith;
    for (int64_t r = lo; r < hi; r++) {
        char *row = (char *)t->xq + (size_t)r * t->xq_row;
        (r < t->n_gemm ? t->act_gemm : t->act)(t->x + r * t->k, row, t->k);
        if (t->act_extra) t->act_extra(row, t->k, row + t->xq_base);
    }
}

/* Chunks c of the output: row block c % n_row_chunks times token block c / n_row_chunks. */
/* prefetch_ahead: weight bytes [p + distance, + bytes) into the cache ahead of their use, not past end (the chunk's
 * last row): a chunk of rows is a new stream the hardware prefetcher has to learn, and a decode step reads each weight
 * row once, from memory (SmolLM2 Q4_1 tg128 at 2 threads, Zen 5: 212 -> 254 t/s; 1 KiB ahead 244, 2 KiB 254, 8 KiB
 * 236; with the one-token tiles and grouped matmuls 4 KiB beats 2 KiB: Q8_0 +8 %, Q4_1 and Gemma-3 +7 %).
 * The prefetch distance: QUARREL_CPU_PREFETCH, or by default 4096 bytes except on AMD family 0x19 with AVX-512 (Zen 4;
 * Zen 3, the same family without AVX-512, is not measured and keeps them), where the bursts of prefetches (a tile's rows at once) cost more than they bring: llama-1b Q4_K_M decode at 2 threads
 * on a Zen 4 EPYC 36 t/s with them, 46-56 without, Gemma-3 77-85 -> 98-113 (docs/performance.md, 2026-11-30); on the
 * Zen 5 they gave +20 %. Read once (cpuid traps to the hypervisor in these VMs). */
static size_t mm_prefetch_bytes(void) {
    static _Atomic int64_t v = -1;
    int64_t b = v;
    if (b >= 0) return (size_t)b;
    b = qr_knob_int(QR_KNOB_CPU_PREFETCH);
    if (b < 0) { /* auto */
        unsigned fam = 0;
        bool amd = false, avx512 = false;
#if defined(__x86_64__) || defined(__i386__)
        unsigned a = 0, bx = 0, c = 0, d = 0; /* vendor "AuthenticAMD", the family of leaf 1, AVX512F of leaf 7 */
        if (__get_cpuid(0, &a, &bx, &c, &d)) amd = bx == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;
        if (amd && __get_cpuid(1, &a, &bx, &c, &d)) fam = ((a >> 8) & 0xf) == 0xf ? 0xf + ((a >> 20) & 0xff) : (a >> 8) & 0xf;
        if (amd && fam == 0x19 && __get_cpuid_count(7, 0, &a, &bx, &c, &d)) avx512 = (bx >> 16) & 1;
#endif
        b = amd && fam == 0x19 && avx512 ? 0 : 4096;
    }
    v = b;
    return (size_t)b;
}
static inline void prefetch_ahead(const char *p, size_t bytes, const char *end) {
    const size_t ahead = mm_prefetch_bytes();
    if (!ahead) return;
    for (size_t o = 0; o < bytes && p + ahead + o < end; o += 64) __builtin_prefetch(p + ahead + o);
}

static void mm_dot_task(void *arg, int64_t lo, int64_t hi, int ith) {
    mm_task *t = arg;
    const char *wbase = t->wbase;
    const size_t wrow = t->wrow;
    (void)ith;
    for (int64_t c = lo; c < hi; c++) {
        const int64_t rc = c % t->n_row_chunks, tc = c / t->n_row_chunks;
        const int64_t r0 = rc * t->rows_per_chunk, r1 = r0 + t->rows_per_chunk < t->n ? r0 + t->rows_per_chunk : t->n;
        const int64_t t0 = tc * t->toks_per_chunk,
                      t1 = t0 + t->toks_per_chunk < t->n_tok ? t0 + t->toks_per_chunk : t->n_tok;
        const char *pf_end = wbase + (size_t)r1 * wrow;
        if (t->tile_gemm) { /* repacked path: token rows below n_gemm through the GEMM order */
            const int64_t tm = t1 < t->n_gemm ? t1 : (t0 > t->n_gemm ? t0 : t->n_gemm);
            for (int64_t i = r0; i < r1; i += t->tile_r) {
                const int nr = (int)(r1 - i < t->tile_r ? r1 - i : t->tile_r);
                prefetch_ahead(wbase + (size_t)i * wrow, (size_t)nr * wrow, pf_end);
                for (int64_t tk = t0; tk < t1;) {
                    const int64_t end = tk < tm ? tm : t1;
                    const int nc = (int)(end - tk < t->tile_c ? end - tk : t->tile_c);
                    (tk < tm ? t->tile_gemm : t->tile_gemv)(t->k, t->y + tk * t->n + i, t->n, wbase + (size_t)i * wrow,
                                                           wrow, t->xq + (size_t)tk * t->xq_row, t->xq_row, nr, nc);
                    tk += nc;
                }
            }
            continue;
        }
        if (t->tile) {
            for (int64_t i = r0; i < r1; i += t->tile_r) {
                const int nr = (int)(r1 - i < t->tile_r ? r1 - i : t->tile_r);
                prefetch_ahead(wbase + (size_t)i * wrow, (size_t)nr * wrow, pf_end);
                for (int64_t tk = t0; tk < t1; tk += t->tile_c) {
                    const int nc = (int)(t1 - tk < t->tile_c ? t1 - tk : t->tile_c);
                    t->tile(t->k, t->y + tk * t->n + i, t->n, wbase + (size_t)i * wrow, wrow,
                            t->xq + (size_t)tk * t->xq_row, t->xq_row, nr, nc);
                }
            }
            continue;
        }
        for (int64_t i = r0; i < r1; i++) {
            const char *wr = wbase + (size_t)i * wrow;
            prefetch_ahead(wr, wrow, pf_end);
            for (int64_t tk = t0; tk < t1; tk++)
                (tk < t->n_gemm ? t->dot_gemm : t->dot)(t->k, t->y + tk * t->n + i, wr, t->xq + (size_t)tk * t->xq_row);
        }
    }
}

/* y[n_rows][n] = x[n_rows][k] . w^T, with the kernels llama.cpp's x86 CPU backend would use for this
 * weight and this number of rows (see quant.h): the repacked GEMM for whole groups of 4 rows and the
 * GEMV for the rest when the type is repacked and w has a multiple of repack_rows rows; else the
 * tiled order from QR_TILED_MIN_ROWS rows; else the sgemm order from 2 rows; else vec_dot. */
/* The weight rows of a prefill tile for type `type`: QUARREL_TILE's when set; else 4 on AVX-512 but for Q4_1, where
 * 3 measured best (the 2-core Zen 5, pp512 at 2 threads, 4 rows against 3: llama-1b Q4_0 +15 %, SmolLM2 Q8_0 +7 %,
 * Gemma-3 Q4_K_M (Q4_K / Q6_K / Q5_0) +4 %; SmolLM2 Q4_1 -7 %), and 3 elsewhere (the AVX2 host's measurements) but
 * for Q8_0 at the AVX2 level: its tile keeps each row's codes and their absolute values, 3 x 4 accumulators + 6 code
 * registers are more than the 16 ymm registers (2 x 4 at QUARREL_CPU_ISA=avx2 on the Zen 5: SmolLM2 Q8_0 pp512
 * 712-722 -> 753-776 t/s; Gemma-3, mostly Q5_0, +1 %, SmolLM2 Q4_1 -2..-7 %: those keep 3). */
static int tile_rows_for(const cpu_backend *cb, qr_type type) {
    if (cb->tile_set) return cb->tile_r;
    if (qr_quant_cpu_isa() != QR_CPU_ISA_AVX512) return type == QR_TYPE_Q8_0 ? 2 : cb->tile_r;
    return type == QR_TYPE_Q4_1 ? cb->tile_r : QR_TILE_MAX;
}

/* The kernels matmul_rows runs for w and n_rows rows and the activations' conversion (t->act, t->xq_row) into *t;
 * false when an error was raised. */
static bool mm_plan(cpu_backend *cb, const qr_weight *w, const float *x, int64_t n_rows, float *y, bool no_repack,
                    mm_task *out) {
    const qr_quant_traits *tr = cpu_traits(cb, w->type); /* has a vec_dot: w->type is in caps.matmul_types */
    /* the row count that picks the kernels: 1 in a row-exact pass (each row as a decode pass computes it;
     * the weight is still read once for all rows) */
    const int64_t n_sel = cb->row_exact ? 1 : n_rows;
    mm_task t = {.w = w, .tr = tr, .x = x, .y = y, .n_tok = n_rows, .k = w->ne[0], .n = w->ne[1], .dot = tr->vec_dot,
                 .wbase = w->host, .wrow = w->row_bytes};
    /* llama.cpp's CPU backend repacks such weights and runs whole groups of 4 rows through its GEMM,
     * the rest through its GEMV: same split, same arithmetic */
    if (!no_repack && tr->vec_dot_gemm && tr->vec_dot_gemv && tr->repack_rows > 0 && w->ne[1] % tr->repack_rows == 0) {
        t.dot = tr->vec_dot_gemv;
        t.dot_gemm = tr->vec_dot_gemm;
        t.n_gemm = n_sel - n_sel % 4;
    } else if (tr->vec_dot_tiled && n_sel >= QR_TILED_MIN_ROWS) {
        t.dot = tr->vec_dot_tiled; /* the other K-quants go through its tiled GEMM */
    } else if (qr_quant_sgemm_applies(tr, t.k, t.n, n_sel)) {
        t.dot = tr->vec_dot_sgemm; /* and others through llamafile's sgemm */
    }
    if (t.n_gemm > 0 && tr->vec_dot_gemm_tile && tr->vec_dot_gemv_tile && t.dot == tr->vec_dot_gemv &&
        t.dot_gemm == tr->vec_dot_gemm) {
        t.tile_gemm = tr->vec_dot_gemm_tile;
        t.tile_gemv = tr->vec_dot_gemv_tile;
        t.tile_r = tile_rows_for(cb, w->type);
        t.tile_c = cb->tile_c;
    }
    if (t.dot == tr->vec_dot_tiled && t.n_gemm == 0 && tr->vec_dot_tiled_tile) {
        t.tile = tr->vec_dot_tiled_tile;
        t.tile_r = tile_rows_for(cb, w->type);
        t.tile_c = cb->tile_c;
    }
    if (t.dot == tr->vec_dot && t.n_gemm == 0 && tr->vec_dot_tile && (n_rows > 1 || w->type != QR_TYPE_F16)) {
        /* several weight rows x token rows per call: same sums, fewer loads, independent FMA chains; also for one
         * token row (decode) now that the weights are prefetched (prefetch_ahead): the rows' chains then overlap
         * (SmolLM2 Q4_1 tg128 at 2 threads, Zen 5: +7 %; before the prefetch it gained nothing) */
        /* (F16 decode keeps the per-row loop: through the tile SmolLM2 F16 tg128 fell from ~170 to ~139 t/s on the Zen 5;
         * its tile serves row-exact passes of several rows, which share each weight's conversion) */
        t.tile = tr->vec_dot_tile;
        t.tile_r = n_rows > 1 ? tile_rows_for(cb, w->type) : cb->tile_r; /* (decode: 3 rows measured best) */
        t.tile_c = cb->tile_c;
    }
    if (w->device && tr->rp.pack &&
        (tr->rp.vec_dot_order ? t.dot == tr->vec_dot && t.n_gemm == 0
                              : t.dot_gemm == tr->vec_dot_gemm && t.dot == tr->vec_dot_gemv)) {
        /* the load-time repack (cpu_weight_prepare), for any row count (decode: the GEMV / vec_dot order) */
        t.wbase = w->device;
        t.wrow = tr->rp.row_bytes_of(t.k);
        t.tile = NULL;
        t.tile_gemm = tr->rp.gemm_tile;
        t.tile_gemv = tr->rp.gemv_tile;
        t.tile_r = tr->rp.rows;
        t.tile_c = tr->rp.cols;
    }
    if (tr->vec_dot_type == QR_TYPE_F32) {
        t.xq = (const char *)x;
        t.xq_row = (size_t)t.k * sizeof(float);
    } else {
        const qr_quant_traits *vtr = cpu_traits(cb, tr->vec_dot_type);
        t.act = (cb->k == &qr_cpu_kernels_avx2 ? qr_cpu_act_quantizer_avx2 : qr_cpu_act_quantizer)(tr->vec_dot_type);
        if (!t.act && vtr) t.act = vtr->from_float;
        if (!t.act) {
            raise_error(cb, QR_ERR_UNSUPPORTED, "matmul: cannot convert activations to the vec_dot type");
            return false;
        }
        t.act_gemm = tr->from_float_gemm ? tr->from_float_gemm : t.act;
        t.xq_row = qr_type_row_size(tr->vec_dot_type, t.k);
        if (t.xq_row == 0) {
            raise_error(cb, QR_ERR_INVALID_ARG, "matmul: row length is not a multiple of the block size");
            return false;
        }
        t.xq_base = t.xq_row;
        if (t.wbase != w->host && tr->rp.act_extra) {
            t.act_extra = tr->rp.act_extra;
            t.xq_row += tr->rp.act_extra_bytes(t.k);
        }
    }
    *out = t;
    return true;
}

/* t's chunks of the output: token rows in blocks of 32, weight rows in enough chunks to balance (~8 per thread for
 * decode, at least 16 rows each). */
static void mm_chunks(cpu_backend *cb, mm_task *t) {
    const int nth = cpu_pool_n_threads(cb->pool);
    t->toks_per_chunk = t->n_tok < 32 ? t->n_tok : 32;
    const int64_t n_tok_chunks = (t->n_tok + t->toks_per_chunk - 1) / t->toks_per_chunk;
    int64_t rows = t->n / ((int64_t)nth * 8 / (n_tok_chunks < 8 ? n_tok_chunks : 8) + 1);
    if (rows < 16) rows = 16;
    if (t->tile_r > 4) rows = (rows + t->tile_r - 1) / t->tile_r * t->tile_r; /* whole repacked groups */
    t->rows_per_chunk = rows;
    t->n_row_chunks = (t->n + rows - 1) / rows;
    t->n_chunks = t->n_row_chunks * n_tok_chunks;
}

/* t's activations converted into cb->wdata (nothing to do for an F32 vec_dot type), and t's chunks of the output. */
static bool mm_prepare(cpu_backend *cb, mm_task *t) {
    const int64_t n_rows = t->n_tok;
    if (t->act) {
        const size_t need = t->xq_row * (size_t)n_rows;
        if (need > cb->wdata_cap) {
            void *p = realloc(cb->wdata, need);
            if (!p) {
                raise_error(cb, QR_ERR_NOMEM, "matmul: cannot allocate the activation buffer");
                return false;
            }
            cb->wdata = p;
            cb->wdata_cap = need;
        }
        t->xq = cb->wdata;
        run_items(cb, mm_convert_task, t, n_rows, t->k * 8);
    }
    mm_chunks(cb, t);
    return true;
}

static void matmul_rows(qr_backend *be, const qr_weight *w, const float *x, int64_t n_rows, float *y, bool no_repack) {
    cpu_backend *cb = CB(be);
    mm_task t;
    if (n_rows <= 0 || !mm_plan(cb, w, x, n_rows, y, no_repack, &t) || !mm_prepare(cb, &t)) return;
    if (cpu_pool_n_threads(cb->pool) == 1 || t.n * t.k * n_rows < 4096) mm_dot_task(&t, 0, t.n_chunks, 0);
    else cpu_pool_for(cb->pool, t.n_chunks, 1, mm_dot_task, &t);
}

/* Several matmuls of one x whose activations convert alike (the same vec_dot type, row length and conversion):
 * x converted once, and every weight's chunks in one parallel loop (a decode step's q / k / v, gate / up: fewer
 * hand-offs to the thread pool). Each weight's rows run the kernels matmul_rows would give them: the same bits. */
typedef struct mm_multi {
    mm_task t[3];
    int32_t n;
    int64_t start[4]; /* chunk c belongs to weight i for start[i] <= c < start[i + 1] */
} mm_multi;

static void mm_multi_task(void *arg, int64_t lo, int64_t hi, int ith) {
    mm_multi *m = arg;
    for (int64_t c = lo; c < hi; c++) {
        int32_t i = 0;
        while (i + 1 < m->n && c >= m->start[i + 1]) i++;
        mm_dot_task(&m->t[i], c - m->start[i], c - m->start[i] + 1, ith);
    }
}

/* Whether matmuls planned as a and b can share converted activations. */
static bool mm_same_input(const mm_task *a, const mm_task *b) {
    return a->k == b->k && a->tr->vec_dot_type == b->tr->vec_dot_type && a->act == b->act && a->xq_row == b->xq_row &&
           a->act_extra == b->act_extra &&
           a->n_gemm == b->n_gemm && (a->n_gemm == 0 || a->act_gemm == b->act_gemm);
}

static void matmul_group(qr_backend *be, int32_t n_w, const qr_weight *const *w, const float *x, int64_t n_rows,
                         float *const *y) {
    cpu_backend *cb = CB(be);
    if (n_rows <= 0) return;
    mm_multi m = {.n = n_w};
    bool shared = n_w >= 2 && n_w <= 3;
    for (int32_t i = 0; i < n_w && shared; i++) {
        if (!mm_plan(cb, w[i], x, n_rows, y[i], false, &m.t[i])) return;
        shared = mm_same_input(&m.t[0], &m.t[i]);
    }
    if (!shared) {
        for (int32_t i = 0; i < n_w; i++) matmul_rows(be, w[i], x, n_rows, y[i], false);
        return;
    }
    if (!mm_prepare(cb, &m.t[0])) return;
    for (int32_t i = 1; i < n_w; i++) {
        m.t[i].xq = m.t[0].xq;
        mm_chunks(cb, &m.t[i]);
    }
    int64_t total = 0, work = 0;
    for (int32_t i = 0; i < n_w; i++) {
        m.start[i] = total;
        total += m.t[i].n_chunks;
        work += m.t[i].n * m.t[i].k * n_rows;
    }
    m.start[n_w] = total;
    if (cpu_pool_n_threads(cb->pool) == 1 || work < 4096) mm_multi_task(&m, 0, total, 0);
    else cpu_pool_for(cb->pool, total, 1, mm_multi_task, &m);
}

static void cpu_add_row(qr_backend *be, const float *x, const qr_weight *table, int64_t row, int64_t n_rows, float *out);

static void cpu_matmul_multi(qr_backend *be, int32_t n_w, const qr_weight *const *w, const qr_weight *const *b,
                             const float *x, int64_t n_rows, float *const *y) {
    matmul_group(be, n_w, w, x, n_rows, y);
    for (int32_t i = 0; b && i < n_w; i++)
        if (b[i]) cpu_add_row(be, y[i], b[i], 0, n_rows, y[i]);
}

static void cpu_swiglu(qr_backend *be, const float *g, const float *u, int64_t n, float *out);
static void cpu_geglu(qr_backend *be, const float *g, const float *u, int64_t n, float *out);

static void cpu_matmul_glu(qr_backend *be, const qr_weight *gate, const qr_weight *up, const float *x, int64_t n_rows,
                           bool gelu, float *out, float *scratch) {
    const qr_weight *w[2] = {gate, up};
    float *y[2] = {out, scratch};
    matmul_group(be, 2, w, x, n_rows, y);
    (gelu ? cpu_geglu : cpu_swiglu)(be, out, scratch, n_rows * gate->ne[1], out);
}

static void cpu_matmul(qr_backend *be, const qr_weight *w, const float *x, int64_t n_rows, float *y) {
    matmul_rows(be, w, x, n_rows, y, false);
}

static void cpu_copy_rows(qr_backend *be, const float *src, int64_t src_stride, float *dst, int64_t dst_stride,
                          int64_t n_rows, int64_t width) {
    (void)be;
    for (int64_t r = 0; r < n_rows; r++)
        memcpy(dst + r * dst_stride, src + r * src_stride, (size_t)width * sizeof(float));
}

/* Each head as a 2-D weight over its contiguous slice of the rows (llama.cpp's 3-D mul_mat: never the repacked
 * kernels), through the head scratch. */
static void cpu_matmul_heads(qr_backend *be, const qr_matmul_heads_args *a) {
    cpu_backend *cb = CB(be);
    const qr_weight *w = a->w;
    const int64_t k = w->ne[0], n = w->ne[1], nr = a->n_rows;
    if (nr <= 0) return;
    const size_t need = (size_t)nr * (size_t)(k + n);
    if (need > cb->heads_cap) {
        float *p = realloc(cb->heads_buf, need * sizeof(float));
        if (!p) {
            raise_error(cb, QR_ERR_NOMEM, "matmul_heads: out of memory");
            return;
        }
        cb->heads_buf = p;
        cb->heads_cap = need;
    }
    float *xs = cb->heads_buf, *ys = cb->heads_buf + (size_t)nr * (size_t)k;
    for (int64_t h = 0; h < w->ne[2]; h++) {
        qr_weight v = *w;
        v.ne[2] = 1;
        v.host = (const char *)w->host + (size_t)(h * n) * w->row_bytes;
        cpu_copy_rows(be, a->x + h * a->x_head, a->x_row, xs, k, nr, k);
        matmul_rows(be, &v, xs, nr, ys, true);
        cpu_copy_rows(be, ys, n, a->y + h * a->y_head, a->y_row, nr, n);
    }
}

/* ---- norms ---- */

static void rmsnorm_task(void *arg, int64_t lo, int64_t hi, int ith) {
    rows_task *t = arg;
    (void)ith;
    for (int64_t r = lo; r < hi; r++) t->cb->k->rmsnorm_row(t->x + r * t->dim, t->w, t->dim, t->f0, t->y + r * t->dim);
}

static void cpu_rmsnorm(qr_backend *be, const float *x, const qr_weight *w, int64_t n_rows, int64_t dim, float eps,
                        float *y) {
    cpu_backend *cb = CB(be);
    rows_task t = {.cb = cb, .w = w ? w->host : NULL, .x = x, .y = y, .n_rows = n_rows, .dim = dim, .f0 = eps};
    run_items(cb, rmsnorm_task, &t, n_rows, dim);
}

static void layernorm_task(void *arg, int64_t lo, int64_t hi, int ith) {
    rows_task *t = arg;
    const float *w = t->w, *b = t->w2;
    (void)ith;
    for (int64_t r = lo; r < hi; r++) {
        const float *x = t->x + r * t->dim;
        float *y = t->y + r * t->dim;
        double sum = 0.0;
        for (int64_t i = 0; i < t->dim; i++) sum += x[i];
        const float mean = (float)(sum / (double)t->dim);
        double sum2 = 0.0;
        for (int64_t i = 0; i < t->dim; i++) {
            const float v = x[i] - mean;
            y[i] = v;
            sum2 += (double)(v * v);
        }
        const float scale = 1.0f / sqrtf((float)(sum2 / (double)t->dim) + t->f0);
        for (int64_t i = 0; i < t->dim; i++) {
            float v = y[i] * scale;
            if (w) v *= w[i];
            if (b) v += b[i];
            y[i] = v;
        }
    }
}

static void cpu_layernorm(qr_backend *be, const float *x, const qr_weight *w, const qr_weight *b, int64_t n_rows,
                          int64_t dim, float eps, float *y) {
    cpu_backend *cb = CB(be);
    rows_task t = {.cb = cb, .w = w ? w->host : NULL, .w2 = b ? b->host : NULL, .x = x, .y = y, .n_rows = n_rows,
                   .dim = dim, .f0 = eps};
    run_items(cb, layernorm_task, &t, n_rows, dim);
}

/* ---- rope ---- */

typedef struct rope_task {
    cpu_backend *cb;
    float *x;
    int32_t n_head, head_dim;
    const qr_rope_params *p;
    const float *ff;
} rope_task;

static void rope_task_fn(void *arg, int64_t lo, int64_t hi, int ith) {
    rope_task *t = arg;
    float cs[QR_CPU_MAX_HEAD_DIM];
    (void)ith;
    for (int64_t r = lo; r < hi; r++) {
        qr_cpu_rope_cache((float)t->cb->pos[r], t->p, t->ff, cs);
        t->cb->k->rope_row(t->x + r * t->n_head * t->head_dim, t->n_head, t->head_dim, t->p->n_rot, t->p->mode, cs);
    }
}

static void cpu_rope(qr_backend *be, float *x, int32_t n_head, int32_t head_dim, const qr_rope_params *p) {
    cpu_backend *cb = CB(be);
    if (head_dim > QR_CPU_MAX_HEAD_DIM) { /* n_rot and freq_factors: checked by backend_check.c */
        raise_error(cb, QR_ERR_INVALID_ARG, "rope: bad n_rot/head_dim/freq_factors");
        return;
    }
    rope_task t = {.cb = cb, .x = x, .n_head = n_head, .head_dim = head_dim, .p = p,
                   .ff = p->freq_factors ? p->freq_factors->host : NULL};
    run_items(cb, rope_task_fn, &t, cb->n_tokens, (int64_t)n_head * head_dim);
}

/* ---- KV store and attention ---- */

/* The converter of a cache row of type t: ggml's from_float of that type on x86 (F16: F16C rounding, Q8_0:
 * its SIMD quantizer, the activation converter's numerics; BF16, Q4_0: the reference rounding). */
static void kv_row_store(const cpu_backend *cb, qr_type t, const float *src, void *dst, int64_t n) {
    if (t == QR_TYPE_F16) {
        cb->k->to_f16(src, dst, n);
    } else if (t == QR_TYPE_F32) {
        memcpy(dst, src, (size_t)n * sizeof(float));
    } else {
        const qr_from_float_fn act = (cb->k == &qr_cpu_kernels_avx2 ? qr_cpu_act_quantizer_avx2 : qr_cpu_act_quantizer)(t);
        (act ? act : qr_quant_traits_ref(t)->from_float)(src, dst, n);
    }
}

/* One K or V row into its slot: rotated chunk by chunk first when the cache is (rot > 0, a multiple of the
 * type's block size), then converted. */
static void kv_row_put(const cpu_backend *cb, qr_type t, int32_t rot, const float *src, char *dst, int64_t n) {
    if (!rot) {
        kv_row_store(cb, t, src, dst, n);
        return;
    }
    float chunk[256];
    for (int64_t c = 0; c < n; c += rot) {
        memcpy(chunk, src + c, sizeof(float) * (size_t)rot);
        qr_cpu_fwht(chunk, rot, rot);
        kv_row_store(cb, t, chunk, dst + qr_type_row_size(t, c), rot);
    }
}

static void cpu_kv_store(qr_backend *be, qr_kv_storage *kv, int32_t layer, const float *k, const float *v) {
    cpu_backend *cb = CB(be);
    const qr_kv_desc *d = &kv->desc; /* layer and slots: checked by backend_check.c */
    for (int32_t r = 0; r < cb->n_tokens; r++) {
        const int64_t s = cb->kv_slot[r];
        kv_row_put(cb, d->type_k, d->rot_k, k + (int64_t)r * d->k_dim, (char *)kv->k[layer] + (size_t)s * kv->row_k,
                   d->k_dim);
        kv_row_put(cb, d->type_v, d->rot_v, v + (int64_t)r * d->v_dim, (char *)kv->v[layer] + (size_t)s * kv->row_v,
                   d->v_dim);
    }
}

typedef struct attn_task {
    cpu_backend *cb;
    const qr_kv_storage *kv;
    int32_t layer;
    const float *q;
    const qr_attn_params *p;
    float *out;
    int64_t n_jobs;
    qr_from_float_fn q_to_vec_dot; /* the flash path's conversions (cpu_attn_job) */
    qr_vec_dot_fn k_dot;
    qr_to_float_fn v_to_float;
    int32_t group_heads; /* > 0: heads a job of qr_cpu_attn_group_avx512 (cpu_attention says when) */
    size_t keys;         /* scores a head in the thread's scratch (group jobs) */
} attn_task;

/* The job of query row r, head h (scores and acc: the calling thread's scratch). */
static cpu_attn_job attn_job(const attn_task *t, int32_t r, int32_t h, float *scores, float *acc) {
    const cpu_backend *cb = t->cb;
    const qr_attn_params *p = t->p;
    const qr_kv_desc *d = &t->kv->desc;
    const int32_t kvh = h / (p->n_head / p->n_head_kv);
    const int32_t pos = cb->pos[r], last = p->non_causal ? cb->seq_last[cb->seq[r]] : pos;
    return (cpu_attn_job){
        .q = t->q + ((int64_t)r * p->n_head + h) * p->head_dim_k,
        .k_base = t->kv->k[t->layer],
        .v_base = t->kv->v[t->layer],
        .k_stride = d->k_dim,
        .v_stride = d->v_dim,
        .k_off = (int64_t)kvh * p->head_dim_k,
        .v_off = (int64_t)kvh * p->head_dim_v,
        .kv_type = d->type_k,
        .k_type = d->type_k,
        .v_type = d->type_v,
        .k_row_bytes = t->kv->row_k,
        .v_row_bytes = t->kv->row_v,
        .k_head_bytes = qr_type_row_size(d->type_k, (int64_t)kvh * p->head_dim_k),
        .v_head_bytes = qr_type_row_size(d->type_v, (int64_t)kvh * p->head_dim_v),
        .q_to_vec_dot = t->q_to_vec_dot,
        .k_dot = t->k_dot,
        .v_to_float = t->v_to_float,
        .rot_k = d->rot_k,
        .rot_v = d->rot_v,
        .block_table = cb->block_table + (int64_t)cb->seq[r] * cb->max_blocks,
        .block_size = d->block_size,
        .first = p->window > 0 && pos - p->window + 1 > 0 ? pos - p->window + 1 : 0,
        .last = last,
        .head_dim_k = p->head_dim_k,
        .head_dim_v = p->head_dim_v,
        .scale = p->scale,
        .softcap = p->softcap,
        .single = cb->n_tokens == 1 || cb->row_exact,
        .has_sink = p->sinks != NULL,
        .sink = p->sinks ? ((const float *)p->sinks->host)[h] : 0.0f,
        .scores = scores,
        .acc = acc,
        .out = t->out + ((int64_t)r * p->n_head + h) * p->head_dim_v,
    };
}

/* Jobs jb = row * n_head + head; with t->group_heads > 0, jb = row * n_sub + sub: the group_heads heads (or fewer)
 * from sub * group_heads, of one GQA group, through qr_cpu_attn_group_avx512. */
static void attn_task_fn(void *arg, int64_t lo, int64_t hi, int ith) {
    attn_task *t = arg;
    const cpu_backend *cb = t->cb;
    const qr_attn_params *p = t->p;
    float *scores = cb->scores + (size_t)ith * cb->scores_cap;
    float *acc = cb->attn_acc + (size_t)ith * QR_CPU_ATTN_LANES * QR_CPU_MAX_HEAD_DIM;
    if (t->group_heads > 0) {
        const int32_t group = p->n_head / p->n_head_kv, per = (group + t->group_heads - 1) / t->group_heads;
        const int32_t n_sub = p->n_head_kv * per;
        for (int64_t jb = lo; jb < hi; jb++) {
            const int32_t r = (int32_t)(jb / n_sub), sub = (int32_t)(jb % n_sub);
            const int32_t h0 = (sub / per) * group + (sub % per) * t->group_heads;
            const int32_t h1 = h0 + t->group_heads < (sub / per + 1) * group ? h0 + t->group_heads : (sub / per + 1) * group;
            cpu_attn_job jobs[QR_CPU_ATTN_GROUP_MAX];
            for (int32_t h = h0; h < h1; h++) jobs[h - h0] = attn_job(t, r, h, scores + (size_t)(h - h0) * t->keys, acc);
            qr_cpu_attn_group_avx512(jobs, h1 - h0);
        }
        return;
    }
    for (int64_t jb = lo; jb < hi; jb++) {
        const cpu_attn_job job = attn_job(t, (int32_t)(jb / p->n_head), (int32_t)(jb % p->n_head), scores, acc);
        if (t->kv->flash) qr_cpu_attn_head_flash(cb->k, &job);
        else cb->k->attn_head(&job);
    }
}

/* The flash path's conversions for this cache (ggml's: q to the K type's vec_dot_type with its from_float,
 * the K type's vec_dot, V's to_float); false (error raised) when a head does not split into whole blocks. */
static bool flash_setup(cpu_backend *cb, const qr_kv_desc *d, const qr_attn_params *p, attn_task *t) {
    const qr_quant_traits *kt = cpu_traits(cb, d->type_k);
    const qr_quant_traits *vt = cpu_traits(cb, d->type_v);
    if (!kt || !kt->vec_dot || !vt || !qr_type_row_size(d->type_k, p->head_dim_k) ||
        !qr_type_row_size(d->type_v, p->head_dim_v)) {
        raise_error(cb, QR_ERR_UNSUPPORTED, "attention: the head size does not split into blocks of the KV cache type");
        return false;
    }
    const qr_type vdt = kt->vec_dot_type;
    const qr_from_float_fn act = (cb->k == &qr_cpu_kernels_avx2 ? qr_cpu_act_quantizer_avx2 : qr_cpu_act_quantizer)(vdt);
    t->q_to_vec_dot = act ? act : cpu_traits(cb, vdt)->from_float;
    t->k_dot = kt->vec_dot;
    t->v_to_float = d->type_v == QR_TYPE_F16 || d->type_v == QR_TYPE_F32 ? NULL : vt->to_float;
    return true;
}

static void cpu_attention(qr_backend *be, qr_kv_storage *kv, int32_t layer, const float *q, const qr_attn_params *p,
                          float *out) {
    cpu_backend *cb = CB(be);
    const qr_kv_desc *d = &kv->desc; /* the head layout: checked by backend_check.c; the block table here */
    if (p->non_causal) { /* each sequence's last position in this pass */
        if ((size_t)cb->n_seqs > cb->seq_last_cap) {
            int32_t *nl = realloc(cb->seq_last, (size_t)cb->n_seqs * sizeof(int32_t));
            if (!nl) {
                raise_error(cb, QR_ERR_NOMEM, "attention: out of memory");
                return;
            }
            cb->seq_last = nl;
            cb->seq_last_cap = (size_t)cb->n_seqs;
        }
        for (int32_t s = 0; s < cb->n_seqs; s++) cb->seq_last[s] = -1;
        for (int32_t r = 0; r < cb->n_tokens; r++)
            if (cb->pos[r] > cb->seq_last[cb->seq[r]]) cb->seq_last[cb->seq[r]] = cb->pos[r];
    }
    for (int32_t r = 0; r < cb->n_tokens; r++) {
        const int32_t *bt = cb->block_table + (int64_t)cb->seq[r] * cb->max_blocks;
        const int32_t last_blk = (p->non_causal ? cb->seq_last[cb->seq[r]] : cb->pos[r]) / d->block_size;
        if (last_blk >= cb->max_blocks) {
            raise_error(cb, QR_ERR_INVALID_ARG, "attention: position beyond the block table");
            return;
        }
        const int32_t first = p->window > 0 && cb->pos[r] - p->window + 1 > 0 ? cb->pos[r] - p->window + 1 : 0;
        for (int32_t b = first / d->block_size; b <= last_blk; b++) {
            if (bt[b] < 0 || bt[b] >= d->n_blocks) {
                raise_error(cb, QR_ERR_INVALID_ARG, "attention: block table entry missing or out of range");
                return;
            }
        }
    }
    attn_task t = {.cb = cb, .kv = kv, .layer = layer, .q = q, .p = p, .out = out,
                   .n_jobs = (int64_t)cb->n_tokens * p->n_head};
    if (kv->flash && !flash_setup(cb, d, p, &t)) return;
    const int nth = cpu_pool_n_threads(cb->pool);
    /* per-thread score scratch: as many keys as the longest row sees */
    size_t max_keys = 1;
    for (int32_t r = 0; r < cb->n_tokens; r++) {
        const int32_t last = p->non_causal ? cb->seq_last[cb->seq[r]] : cb->pos[r];
        if ((size_t)last + 1 > max_keys) max_keys = (size_t)last + 1;
    }
    if (p->window > 0 && !p->non_causal && max_keys > (size_t)p->window) max_keys = (size_t)p->window;
    /* the heads of a GQA group together (each K / V row converted once for them): AVX-512, a multi-row pass over
     * an f16 cache; as many heads a job as the lane accumulators hold (8 per head of head_dim_v floats) */
    const int32_t group = p->n_head / p->n_head_kv;
    if (cb->n_tokens > 1 && !cb->row_exact && !kv->flash && cb->k == &qr_cpu_kernels_avx2 &&
        qr_quant_cpu_isa() == QR_CPU_ISA_AVX512 && d->type_k == QR_TYPE_F16 && d->type_v == QR_TYPE_F16 && p->head_dim_k % 8 == 0 &&
        p->head_dim_v % 16 == 0 && p->head_dim_k <= QR_CPU_MAX_HEAD_DIM && p->head_dim_v <= QR_CPU_MAX_HEAD_DIM) {
        int32_t gh = QR_CPU_ATTN_LANES * QR_CPU_MAX_HEAD_DIM / (8 * p->head_dim_v);
        if (gh > QR_CPU_ATTN_GROUP_MAX) gh = QR_CPU_ATTN_GROUP_MAX;
        if (gh > group) gh = group;
        t.group_heads = gh;
        t.keys = max_keys;
        t.n_jobs = (int64_t)cb->n_tokens * p->n_head_kv * ((group + gh - 1) / gh);
        max_keys *= (size_t)gh;
    }
    if (max_keys > cb->scores_cap || !cb->scores || nth > cb->scores_nth) {
        size_t cap = max_keys < 1024 ? 1024 : max_keys;
        float *ns = realloc(cb->scores, cap * (size_t)nth * sizeof(float));
        if (!ns) {
            raise_error(cb, QR_ERR_NOMEM, "attention: cannot allocate the score buffer");
            return;
        }
        cb->scores = ns;
        cb->scores_cap = cap;
        cb->scores_nth = nth;
    }
    /* per-thread lane accumulators (the caller is thread 0): allocated when the pool first needs them
     * or grows, freed with the backend */
    if (!cb->attn_acc || nth > cb->acc_nth) {
        const size_t per_thread = sizeof(float) * QR_CPU_ATTN_LANES * QR_CPU_MAX_HEAD_DIM; /* a multiple of 64 */
        float *na = aligned_alloc(64, per_thread * (size_t)nth);
        if (!na) {
            raise_error(cb, QR_ERR_NOMEM, "attention: cannot allocate the lane accumulators");
            return;
        }
        free(cb->attn_acc);
        cb->attn_acc = na;
        cb->acc_nth = nth;
    }
    cpu_pool_for(cb->pool, t.n_jobs, 1, attn_task_fn, &t);
}

/* ---- elementwise ---- */

typedef enum ew_kind { EW_SWIGLU, EW_GEGLU, EW_ADD, EW_MUL, EW_SCALE, EW_SOFTCAP, EW_COPY } ew_kind;

typedef struct ew_task {
    cpu_backend *cb;
    ew_kind kind;
    const float *a, *b;
    float s;
    int64_t n;
    float *out;
} ew_task;

static void ew_task_fn(void *arg, int64_t lo, int64_t hi, int ith) {
    ew_task *t = arg;
    const cpu_kernels *k = t->cb->k;
    (void)ith;
    const int64_t n = hi - lo;
    const float *a = t->a + lo, *b = t->b ? t->b + lo : NULL;
    float *o = t->out + lo;
    switch (t->kind) {
    case EW_SWIGLU: k->swiglu(a, b, n, o); break;
    case EW_GEGLU: k->geglu(a, b, n, o, t->cb->gelu_tab); break;
    case EW_ADD: k->add(a, b, n, o); break;
    case EW_MUL: k->mul(a, b, n, o); break;
    case EW_SCALE: k->scale(a, t->s, n, o); break;
    case EW_SOFTCAP: { /* ggml's order (gemma2): scale by the float 1 / cap, tanh, scale by cap */
        const float inv = 1.0f / t->s;
        for (int64_t i = 0; i < n; i++) o[i] = tanhf(a[i] * inv) * t->s;
        break;
    }
    case EW_COPY: memmove(o, a, (size_t)n * sizeof(float)); break;
    }
}

static void ew_run(qr_backend *be, ew_kind kind, const float *a, const float *b, float s, int64_t n, float *out) {
    cpu_backend *cb = CB(be);
    ew_task t = {.cb = cb, .kind = kind, .a = a, .b = b, .s = s, .n = n, .out = out};
    /* in-place aliasing is fine, but a split copy with overlapping shifted ranges is not: copy serially */
    if (kind == EW_COPY) ew_task_fn(&t, 0, n, 0);
    else run_items(cb, ew_task_fn, &t, n, 1);
}

static void cpu_swiglu(qr_backend *be, const float *g, const float *u, int64_t n, float *out) {
    ew_run(be, EW_SWIGLU, g, u, 0, n, out);
}
static void cpu_geglu(qr_backend *be, const float *g, const float *u, int64_t n, float *out) {
    ew_run(be, EW_GEGLU, g, u, 0, n, out);
}
static void cpu_add(qr_backend *be, const float *a, const float *b, int64_t n, float *out) {
    ew_run(be, EW_ADD, a, b, 0, n, out);
}
static void cpu_mul(qr_backend *be, const float *a, const float *b, int64_t n, float *out) {
    ew_run(be, EW_MUL, a, b, 0, n, out);
}
static void cpu_scale(qr_backend *be, const float *x, float s, int64_t n, float *out) {
    ew_run(be, EW_SCALE, x, NULL, s, n, out);
}
static void cpu_softcap(qr_backend *be, const float *x, float cap, int64_t n, float *out) {
    ew_run(be, EW_SOFTCAP, x, NULL, cap, n, out);
}
static void cpu_copy(qr_backend *be, const float *src, int64_t n, float *dst) { ew_run(be, EW_COPY, src, NULL, 0, n, dst); }

typedef struct add_row_task {
    cpu_backend *cb;
    const float *x;
    const qr_weight *table;
    const qr_quant_traits *tr; /* to_float of a non-F32 table */
    int64_t row;               /* >= 0: this row for all; -1: row pos[r] */
    float *out;
} add_row_task;

static void add_row_task_fn(void *arg, int64_t lo, int64_t hi, int ith) {
    add_row_task *t = arg;
    const int64_t dim = t->table->ne[0];
    float *tmp = NULL;
    (void)ith;
    if (t->table->type != QR_TYPE_F32 && !(tmp = malloc((size_t)dim * sizeof(float)))) {
        raise_error(t->cb, QR_ERR_NOMEM, "add_row: out of memory");
        return;
    }
    for (int64_t r = lo; r < hi; r++) {
        const int64_t src = t->row >= 0 ? t->row : t->cb->pos[r];
        const void *trow = (const char *)t->table->host + (size_t)src * t->table->row_bytes;
        const float *b = trow;
        if (tmp) {
            t->tr->to_float(trow, tmp, dim);
            b = tmp;
        }
        t->cb->k->add(t->x + r * dim, b, dim, t->out + r * dim);
    }
    free(tmp);
}

static void cpu_add_row(qr_backend *be, const float *x, const qr_weight *table, int64_t row, int64_t n_rows, float *out) {
    cpu_backend *cb = CB(be);
    const qr_quant_traits *tr = cpu_traits(cb, table->type);
    if (table->type != QR_TYPE_F32 && (!tr || !tr->to_float)) {
        raise_error(cb, QR_ERR_UNSUPPORTED, "add_row: the table's type cannot be dequantized");
        return;
    } /* row and positions: checked by backend_check.c */
    add_row_task t = {.cb = cb, .x = x, .table = table, .tr = tr, .row = row, .out = out};
    run_items(cb, add_row_task_fn, &t, n_rows, table->ne[0]);
}

static void softmax_task(void *arg, int64_t lo, int64_t hi, int ith) {
    rows_task *t = arg;
    (void)ith;
    for (int64_t r = lo; r < hi; r++) t->cb->k->softmax_row(t->x + r * t->dim, t->dim, t->y + r * t->dim);
}

static void cpu_softmax(qr_backend *be, const float *x, int64_t n_rows, int64_t dim, float *out) {
    cpu_backend *cb = CB(be);
    rows_task t = {.cb = cb, .x = x, .y = out, .n_rows = n_rows, .dim = dim};
    run_items(cb, softmax_task, &t, n_rows, dim);
}

/* What the CPU backend can do: host memory, the oracle's arithmetic, and a matmul for every type with a
 * dot product whose activations it can convert (as cpu_matmul picks them). */
static qr_backend_caps cpu_caps(const cpu_backend *cb) {
    qr_backend_caps c = {.host_memory = true, .exact = true, .max_head_dim = QR_CPU_MAX_HEAD_DIM,
                         .kv_types = QR_TYPE_BIT(QR_TYPE_F16) | QR_TYPE_BIT(QR_TYPE_F32) | QR_TYPE_BIT(QR_TYPE_BF16) |
                                     QR_TYPE_BIT(QR_TYPE_Q8_0) | QR_TYPE_BIT(QR_TYPE_Q4_0)};
    for (int t = 0; t < QR_TYPE_COUNT; t++) {
        const qr_quant_traits *tr = cpu_traits(cb, (qr_type)t);
        if (!tr || !tr->vec_dot) continue;
        if (tr->vec_dot_type != QR_TYPE_F32) {
            const qr_quant_traits *vtr = cpu_traits(cb, tr->vec_dot_type);
            const qr_from_float_fn act = (cb->k == &qr_cpu_kernels_avx2 ? qr_cpu_act_quantizer_avx2
                                                                         : qr_cpu_act_quantizer)(tr->vec_dot_type);
            if (!act && !(vtr && vtr->from_float)) continue;
        }
        c.matmul_types |= QR_TYPE_BIT(t);
    }
    return c;
}

_Static_assert(offsetof(struct qr_kv_storage, desc) == 0, "KV storage begins with its layout (backend.h)");

static const qr_backend_ops cpu_ops = {
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .write = cpu_write,
    .read = cpu_read,
    .read_rows = cpu_read_rows,
    .topk_rows = cpu_topk_rows,
    .synchronize = cpu_synchronize,
    .weight_prepare = cpu_weight_prepare,
    .weight_release = cpu_weight_release,
    .last_error = cpu_last_error,
    .set_n_threads = cpu_set_n_threads,
    .raise = qr_cpu_raise,
    .kv_alloc = cpu_kv_alloc,
    .kv_free = cpu_kv_free,
    .kv_copy_block = cpu_kv_copy_block,
    .set_batch = cpu_set_batch,
    .get_rows = cpu_get_rows,
    .gather_outputs = cpu_gather_outputs,
    .matmul = cpu_matmul,
    .rmsnorm = cpu_rmsnorm,
    .layernorm = cpu_layernorm,
    .rope = cpu_rope,
    .kv_store = cpu_kv_store,
    .attention = cpu_attention,
    .swiglu = cpu_swiglu,
    .geglu = cpu_geglu,
    .add = cpu_add,
    .mul = cpu_mul,
    .scale = cpu_scale,
    .softcap = cpu_softcap,
    .softmax = cpu_softmax,
    .copy = cpu_copy,
    .copy_rows = cpu_copy_rows,
    .matmul_heads = cpu_matmul_heads,
    .add_row = cpu_add_row,
    .matmul_multi = cpu_matmul_multi,
    .matmul_glu = cpu_matmul_glu,
    .mem_info = NULL, /* host memory: the caller asks the OS */
    .moe_route = qr_cpu_moe_route,
    .matmul_id = qr_cpu_matmul_id,
    .moe_gate_up = qr_cpu_moe_gate_up,
    .moe_combine = qr_cpu_moe_combine,
    .glu = qr_cpu_glu,
    .ssm_conv = qr_cpu_ssm_conv,
    .ssm_scan = qr_cpu_ssm_scan,
    .ssm_gate_norm = qr_cpu_ssm_gate_norm,
};

qr_status qr_backend_cpu_create(const qr_backend_cpu_params *params, qr_backend **out, char *err, size_t err_len) {
    *out = NULL;
    int32_t n_threads = params ? params->n_threads : 0;
    if (n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int32_t)n : 1;
    }
    qr_backend *be = calloc(1, sizeof *be);
    cpu_backend *cb = calloc(1, sizeof *cb);
    if (!be || !cb) goto oom;
    be->impl = cb;
    cb->scalar = params && params->force_scalar;
    /* the ops' kernels: AVX2 at the avx2 and avx512 levels (the quantized matmuls get their AVX-512
     * kernels through qr_quant_traits_best), scalar with QUARREL_CPU_ISA=scalar */
    const bool simd_ops = !cb->scalar && qr_knob_int(QR_KNOB_CPU_ISA) != QR_CPU_ISA_SCALAR && qr_cpu_has_avx2();
    cb->k = simd_ops ? &qr_cpu_kernels_avx2 : &qr_cpu_kernels_scalar;
    const qr_backend_caps caps = cpu_caps(cb);
    qr_backend_init(be, "cpu", &cpu_ops, &caps);
    int32_t tile_r, tile_c; /* QUARREL_TILE, default 3x4 (util/knobs.c says why) */
    qr_knob_dims(QR_KNOB_TILE, &tile_r, &tile_c);
    cb->tile_r = tile_r;
    cb->tile_c = tile_c;
    cb->tile_set = qr_knob_is_set(QR_KNOB_TILE);
    cb->gelu_tab = malloc(65536 * sizeof(float));
    if (!cb->gelu_tab) goto oom;
    qr_cpu_gelu_table_init(cb->gelu_tab);
    cb->pool = cpu_pool_create(n_threads);
    if (!cb->pool) {
        free(cb->gelu_tab);
        free(cb);
        free(be);
        return qr_errf(err, err_len, QR_ERR_NOMEM, "cannot start %d threads", n_threads);
    }
    *out = be;
    return QR_OK;
oom:
    if (cb) free(cb->gelu_tab);
    free(cb);
    free(be);
    return qr_errf(err, err_len, QR_ERR_NOMEM, "cannot allocate the cpu backend");
}

const char *qr_backend_cpu_simd(const qr_backend *be) { return ((const cpu_backend *)be->impl)->k->name; }
