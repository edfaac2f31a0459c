/* backend_cuda.cu — the CUDA backend object (host code): device memory, weight upload and repack,
 * paged KV storage, the batch plan, the dense ops and the op table (the MoE and Mamba2 ops are in
 * backend_cuda_hybrid.cu, decode graphs in backend_cuda_graph.cu; the shared struct and helpers in
 * cuda_backend.h). Each op checks its arguments against the host
 * copy of the batch plan (as the CPU backend does), then launches the kernels of the op's .cu file
 * on the backend's single stream. Ops never synchronise the host; scratch buffers are sized by
 * weight_prepare (dequant tile, widest row) and set_batch (activations of n_tokens rows), so a
 * decode step runs without cudaMalloc once one pass of its shape has run (needed to capture it in
 * a CUDA graph later). Errors are sticky and reported by last_error. */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_ops.h"

extern "C" {
#include "quant/quant.h"
#include "util/knobs.h"
#include "util/util.h"
}

#include "backend/cuda/cuda_backend.h"

void raise_error(cuda_backend *cb, qr_status st, const char *fmt, ...) {
    if (cb->error != QR_OK) return;
    cb->error = st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cb->error_msg, sizeof cb->error_msg, fmt, ap);
    va_end(ap);
}

/* Records a failed CUDA call; true when e is cudaSuccess. */
bool cuda_ok(cuda_backend *cb, cudaError_t e, const char *what) {
    cb->op_epoch++; /* every op checks its launches here: a new epoch means device memory may have changed */
    if (e == cudaSuccess) return true;
    (void)cudaGetLastError();
    raise_error(cb, e == cudaErrorMemoryAllocation ? QR_ERR_NOMEM : QR_ERR_INTERNAL, "%s: %s", what,
                cudaGetErrorString(e));
    return false;
}

bool cublas_ok(cuda_backend *cb, cublasStatus_t s, const char *what) {
    cb->op_epoch++;
    if (s == CUBLAS_STATUS_SUCCESS) return true;
    raise_error(cb, QR_ERR_INTERNAL, "%s: cuBLAS status %d", what, (int)s);
    return false;
}

/* Grows a scratch buffer to `need` bytes (waits for pending ops before freeing the old one). */
bool ensure_scratch(cuda_backend *cb, void **buf, size_t *cap, size_t need, const char *what) {
    if (need <= *cap) return true;
    if (cb->capturing) {
        raise_error(cb, QR_ERR_INTERNAL, "%s scratch must grow during graph capture", what);
        return false;
    }
    cb->scratch_gen++;
    need = (need + (1u << 20) - 1) & ~(size_t)((1u << 20) - 1);
    cudaStreamSynchronize(cb->stream);
    if (*buf) cudaFree(*buf);
    *buf = NULL;
    *cap = 0;
    if (cudaMalloc(buf, need) != cudaSuccess) {
        (void)cudaGetLastError();
        *buf = NULL;
        raise_error(cb, QR_ERR_NOMEM, "cannot allocate %zu bytes of GPU scratch for %s", need, what);
        return false;
    }
    *cap = need;
    return true;
}

/* Layout of the matmul activation scratch for nr rows of k values. */
typedef struct act_layout {
    size_t q, d, s, g, h, total;
} act_layout;

static act_layout act_layout_of(int64_t nr, int64_t k) {
    act_layout L;
    size_t o = 0;
    L.q = o, o = align256(o + (size_t)(nr * k));
    L.d = o, o = align256(o + (size_t)(nr * (k / 32 + 1)) * 4);
    L.s = o, o = align256(o + (size_t)(nr * (k / 32 + 1)) * 4);
    L.g = o, o = align256(o + (size_t)(nr * (k / 16 + 1)) * 2);
    L.h = o, o = align256(o + (size_t)(nr * k) * 2);
    L.total = o;
    return L;
}

/* Rows of the f16 weight tile of the prefill GEMM: tune.gemm_tile_bytes worth, a multiple of 256
 * rows (skinny tiles run cuBLAS far below its peak), at most the whole matrix. */
static int64_t gemm_tile_rows(const cuda_backend *cb, int64_t k, int64_t n) {
    int64_t rows = (int64_t)(cb->tune.gemm_tile_bytes / (k * 2));
    rows = rows / 256 * 256;
    if (rows < 256) rows = 256;
    if (rows > 65535) rows = 65280;
    return rows < n ? rows : n;
}

/* ---- lifetime and memory ---- */

static void cuda_destroy(qr_backend *be) {
    cuda_backend *cb = CB(be);
    cudaSetDevice(cb->device);
    cudaStreamSynchronize(cb->stream);
    cuda_tp_release(cb);
    for (int i = 0; i < cb->n_graphs; i++)
        if (cb->graphs[i].exec) cudaGraphExecDestroy(cb->graphs[i].exec);
    free(cb->graphs);
    cuda_exact_free(cb);
    if (cb->cublas) cublasDestroy(cb->cublas);
    cudaFree(cb->cublas_ws);
    cudaFree(cb->d_plan);
    cudaFree(cb->act);
    cudaFree(cb->act2);
    cudaFree(cb->tile);
    cudaFree(cb->attn);
    cudaFree(cb->attn_cnt);
    cudaFree(cb->kvq_q);
    cudaFree(cb->zero_ids);
    cudaFree(cb->head_ids);
    cudaFree(cb->heads_x);
    cudaFree(cb->heads_y);
    cudaFree(cb->tmp);
    cudaFree(cb->fa_tiles);
    free(cb->h_fa_tiles);
    cudaFree(cb->moe);
    cudaFree(cb->dq_part);
    cudaFree(cb->topk);
    free(cb->h_moe);
    if (cb->diverged_h) cudaFreeHost(cb->diverged_h);
    if (cb->pinned) cudaFreeHost(cb->pinned);
    if (cb->staged) cudaEventDestroy(cb->staged);
    if (cb->stream) cudaStreamDestroy(cb->stream);
    free(cb->h_tokens);
    free(cb->h_pos);
    free(cb->h_seq);
    free(cb->h_kv_slot);
    free(cb->h_output_rows);
    free(cb->h_exact_blocks);
    free(cb->h_block_table);
    free(cb);
    free(be);
}

static void *cuda_alloc(qr_backend *be, size_t bytes) {
    cuda_backend *cb = CB(be);
    cudaSetDevice(cb->device);
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 64) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return p;
}

static void cuda_free_mem(qr_backend *be, void *ptr) {
    cuda_backend *cb = CB(be);
    if (!ptr) return;
    cudaSetDevice(cb->device);
    cudaStreamSynchronize(cb->stream);
    cudaFree(ptr);
}

static void cuda_write(qr_backend *be, void *dst, const void *src, size_t bytes) {
    cuda_backend *cb = CB(be);
    if (!bytes) return;
    cuda_ok(cb, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cb->stream), "write");
}

static void cuda_read(qr_backend *be, void *dst, const void *src, size_t bytes) {
    cuda_backend *cb = CB(be);
    if (!bytes) return;
    if (cuda_ok(cb, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cb->stream), "read"))
        cuda_ok(cb, cudaStreamSynchronize(cb->stream), "read");
}

static void cuda_read_rows(qr_backend *be, void *dst, size_t dst_pitch, const void *src, size_t src_pitch,
                           size_t row_bytes, size_t n_rows) {
    cuda_backend *cb = CB(be);
    if (!row_bytes || !n_rows) return;
    if (cuda_ok(cb, cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, n_rows, cudaMemcpyDeviceToHost, cb->stream),
                "read_rows"))
        cuda_ok(cb, cudaStreamSynchronize(cb->stream), "read_rows");
}

static void cuda_topk_rows(qr_backend *be, const float *src, int64_t n_rows, int64_t n, int32_t k, void *out) {
    cuda_backend *cb = CB(be);
    if (n_rows <= 0) return;
    const size_t bytes = (size_t)n_rows * ((size_t)k * 8 + 4);
    if (bytes > cb->topk_cap) { /* its own buffer: outside the scratch that recorded graphs use */
        cudaStreamSynchronize(cb->stream);
        cudaFree(cb->topk);
        cb->topk = NULL;
        cb->topk_cap = 0;
        if (cudaMalloc(&cb->topk, bytes) != cudaSuccess) {
            (void)cudaGetLastError();
            cb->topk = NULL;
            raise_error(cb, QR_ERR_NOMEM, "cannot allocate %zu bytes of GPU memory for the top-k rows", bytes);
            return;
        }
        cb->topk_cap = bytes;
    }
    float *vals = (float *)cb->topk;
    int32_t *ids = (int32_t *)(vals + n_rows * k), *n_fin = ids + n_rows * k;
    if (cuda_ok(cb, qr_cuda_topk_rows(src, n_rows, n, k, vals, ids, n_fin, cb->stream), "topk_rows") &&
        cuda_ok(cb, cudaMemcpyAsync(out, cb->topk, bytes, cudaMemcpyDeviceToHost, cb->stream), "topk_rows"))
        cuda_ok(cb, cudaStreamSynchronize(cb->stream), "topk_rows");
}

/* Page-locked host memory, or NULL (QUARREL_CUDA_PINNED=0, or page-locking failed): the caller then uses
 * malloc and frees it itself. */
static void *cuda_host_alloc(qr_backend *be, size_t bytes) {
    if (!CB(be)->tune.pinned_host) return NULL;
    cudaSetDevice(CB(be)->device);
    void *p = NULL;
    if (cudaMallocHost(&p, bytes ? bytes : 1) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return p;
}

static void cuda_host_free(qr_backend *be, void *p) {
    if (!p) return;
    cudaStreamSynchronize(CB(be)->stream); /* no copy into it may still be in flight */
    cudaFreeHost(p);
}

static void cuda_synchronize(qr_backend *be) {
    cuda_backend *cb = CB(be);
    cuda_ok(cb, cudaStreamSynchronize(cb->stream), "synchronize");
}

/* The prepared form of w, or NULL (with an error raised) when w was not prepared by a CUDA backend. */
const cuda_weight *prepared(cuda_backend *cb, const qr_weight *w, const char *op) {
    const cuda_weight *cw = w ? (const cuda_weight *)w->device : NULL;
    if (!cw || cw->magic != WEIGHT_MAGIC) {
        raise_error(cb, QR_ERR_INVALID_ARG, "%s: weight %s was not prepared by the CUDA backend", op,
                    w && w->name ? w->name : "?");
        return NULL;
    }
    return cw;
}

static void cuda_weight_release(qr_backend *be, qr_weight *w) {
    cuda_backend *cb = CB(be);
    cuda_weight *cw = (cuda_weight *)w->device;
    if (cw && cw->magic == WEIGHT_MAGIC) {
        cudaSetDevice(cb->device);
        cudaStreamSynchronize(cb->stream);
        cudaFree(cw->mem);
        if (cw->dqs) cudaFree(cw->dqs);
        if (cw->dqt) cudaFree(cw->dqt);
        if (cw->dqw) cudaFree(cw->dqw);
        if (cw->f16) {
            cudaFree(cw->f16);
            cb->f16_cache_bytes -= (size_t)cw->v.n * (size_t)cw->v.k * 2;
        }
        cw->magic = 0;
        free(cw);
    }
    w->device = NULL;
}

static qr_status cuda_weight_prepare(qr_backend *be, qr_weight *w, char *err, size_t err_len) {
    cuda_backend *cb = CB(be);
    const char *name = w->name ? w->name : "?";
    if (!w->host) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "weight %s has no data", name);
    if (w->device) cuda_weight_release(be, w);
    const cuda_plane_desc pd = qr_cuda_plane_desc(w->type);
    if (pd.n_planes == 0)
        return qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "weight %s: type %s is not supported by the CUDA backend", name,
                       qr_type_name(w->type));
    const int64_t k = w->ne[0], n = w->ne[1] * w->ne[2] * w->ne[3];
    if (k <= 0 || n <= 0 || k % pd.block || w->row_bytes != qr_type_row_size(w->type, k))
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "weight %s: bad shape %lld x %lld for %s", name, (long long)k,
                       (long long)n, qr_type_name(w->type));
    cudaSetDevice(cb->device);
    const bool is_float = pd.block == 1;
    const int64_t nb = is_float ? 0 : k / pd.block, nblocks = n * nb;
    const size_t raw_bytes = (size_t)n * w->row_bytes;
    size_t plane_off[3] = {0, 0, 0}, total = 0;
    if (is_float) {
        total = align256(raw_bytes);
    } else {
        for (int p = 0; p < pd.n_planes; p++) {
            plane_off[p] = total;
            total = align256(total + (size_t)nblocks * (size_t)pd.size[p]);
        }
    }
    cuda_weight *cw = (cuda_weight *)calloc(1, sizeof *cw);
    if (!cw) return qr_errf(err, err_len, QR_ERR_NOMEM, "weight %s: out of host memory", name);
    void *raw = NULL;
    cudaError_t e = cudaMalloc(&cw->mem, total);
    if (e != cudaSuccess) goto cuda_fail;
    if (is_float) {
        e = cudaMemcpyAsync(cw->mem, w->host, raw_bytes, cudaMemcpyHostToDevice, cb->stream);
        if (e != cudaSuccess) goto cuda_fail;
    } else {
        e = cudaMalloc(&raw, raw_bytes);
        if (e != cudaSuccess) goto cuda_fail;
        e = cudaMemcpyAsync(raw, w->host, raw_bytes, cudaMemcpyHostToDevice, cb->stream);
        if (e != cudaSuccess) goto cuda_fail;
        uint8_t *dst[3] = {NULL, NULL, NULL};
        for (int p = 0; p < pd.n_planes; p++) dst[p] = (uint8_t *)cw->mem + plane_off[p];
        e = qr_cuda_repack(&pd, (const uint8_t *)raw, nblocks, dst, cb->stream);
        if (e != cudaSuccess) goto cuda_fail;
    }
    e = cudaStreamSynchronize(cb->stream);
    if (e != cudaSuccess) goto cuda_fail;
    cudaFree(raw);
    raw = NULL;
    cw->magic = WEIGHT_MAGIC;
    cw->v.type = w->type;
    cw->v.k = k;
    cw->v.n = n;
    cw->v.p0 = (const uint8_t *)cw->mem + plane_off[0];
    cw->v.p1 = pd.n_planes > 1 ? (const uint8_t *)cw->mem + plane_off[1] : NULL;
    cw->v.p2 = pd.n_planes > 2 ? (const uint8_t *)cw->mem + plane_off[2] : NULL;
    /* float rows: 16-byte "blocks" when the row length allows aligned 16-byte loads, else 0
     * (then matmul takes the cuBLAS path) */
    if (is_float) {
        const int64_t per16 = w->type == QR_TYPE_F32 ? 4 : 8;
        cw->v.nb = k % per16 == 0 ? k / per16 : 0;
    } else {
        cw->v.nb = nb;
    }
    w->device = cw;
    if (k > cb->max_k) cb->max_k = k;
    /* the prefill GEMM's f16 tile for this weight */
    if (!is_float) {
        const int64_t rows = gemm_tile_rows(cb, k, w->ne[1]);
        if (!ensure_scratch(cb, &cb->tile, &cb->tile_cap, (size_t)(rows * k * 2), "the GEMM weight tile")) {
            cb->error = QR_OK;
            cuda_weight_release(be, w);
            return qr_errf(err, err_len, QR_ERR_NOMEM, "weight %s: cannot allocate the GEMM tile", name);
        }
    }
    return QR_OK;
cuda_fail:
    (void)cudaGetLastError();
    cudaFree(raw);
    cudaFree(cw->mem);
    free(cw);
    return qr_errf(err, err_len, e == cudaErrorMemoryAllocation ? QR_ERR_NOMEM : QR_ERR_INTERNAL,
                   "weight %s (%zu bytes): %s", name, raw_bytes, cudaGetErrorString(e));
}

static qr_status cuda_last_error(qr_backend *be, char *err, size_t err_len) {
    cuda_backend *cb = CB(be);
    if (cb->error == QR_OK) {
        cudaError_t e = cudaGetLastError();
        if (e == cudaSuccess) {
            e = cudaStreamQuery(cb->stream);
            if (e == cudaErrorNotReady) e = cudaSuccess;
        }
        cuda_ok(cb, e, "asynchronous error");
    }
    if (cb->error == QR_OK && cb->diverged_h) { /* the pass's scans are done once the stream is */
        cuda_ok(cb, cudaStreamSynchronize(cb->stream), "asynchronous error");
        if (*(volatile int *)cb->diverged_h) {
            *(volatile int *)cb->diverged_h = 0;
            raise_error(cb, QR_ERR_NUMERIC, "ssm state diverged (NaN/Inf in the scan state)");
        }
    }
    qr_status st = cb->error;
    if (st != QR_OK) qr_errf(err, err_len, st, "cuda backend: %s", cb->error_msg);
    cb->error = QR_OK;
    cb->error_msg[0] = 0;
    return st;
}

static qr_status cuda_set_n_threads(qr_backend *be, int32_t n_threads, char *err, size_t err_len) {
    (void)be;
    if (n_threads < 1) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "n_threads must be >= 1 (got %d)", n_threads);
    return QR_OK;
}

/* ---- KV storage ---- */

/* The kernels' kind of a quantized cache type (cuda_attn_args.kvq), 0 for f16 / f32. */
static int32_t kv_kvq(qr_type t) { return t == QR_TYPE_Q8_0 ? CUDA_KVQ_Q8 : t == QR_TYPE_Q4_0 ? CUDA_KVQ_Q4 : 0; }

static void cuda_kv_free(qr_backend *be, qr_kv_storage *kv) {
    if (!kv) return;
    cuda_backend *cb = CB(be);
    cudaSetDevice(cb->device);
    cudaStreamSynchronize(cb->stream);
    cudaFree(kv->k);
    cudaFree(kv->v);
    kv->magic = 0;
    free(kv);
}

/* d: checked by backend_check.c (a type of caps.kv_types). */
static qr_kv_storage *cuda_kv_alloc(qr_backend *be, const qr_kv_desc *d, char *err, size_t err_len) {
    cuda_backend *cb = CB(be);
    qr_kv_storage *kv = (qr_kv_storage *)calloc(1, sizeof *kv);
    if (!kv) {
        qr_errf(err, err_len, QR_ERR_NOMEM, "cannot allocate the KV cache descriptor");
        return NULL;
    }
    if (d->type_k != d->type_v) { /* caps.kv_types holds F16, F32, Q8_0 and Q4_0, one for both */
        free(kv);
        qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "the CUDA backend stores K and V in one type (not %s K with %s V)",
                qr_type_name(d->type_k), qr_type_name(d->type_v));
        return NULL;
    }
    const size_t rk = qr_kv_row_bytes_k(d), rv = qr_kv_row_bytes_v(d);
    if (kv_kvq(d->type_k)) { /* kv_quant.cuh's layout: 16-byte aligned blocks; the exact mode has no such attention */
        const int32_t hk = d->head_dim_k, hv = d->head_dim_v; /* the kernels' head sizes (attention_kvq) */
        const char *why = cb->exact ? "the exact mode (QUARREL_CUDA_EXACT) has no quantized cache"
                          : ((size_t)d->block_size * rk) % 16 || ((size_t)d->block_size * rv) % 16
                              ? "its blocks' bytes are not a multiple of 16 (block size and head layout)"
                          : hk && (hk != hv || (hk != 64 && hk != 128 && hk != 256))
                              ? "its attention takes K and V heads of one size, 64, 128 or 256 values"
                              : NULL;
        if (why) {
            free(kv);
            qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "the CUDA backend cannot store a %s KV cache here: %s (heads of "
                    "%d / %d values; use --cache-type-k/-v f16 or --backend cpu)", qr_type_name(d->type_k), why, hk, hv);
            return NULL;
        }
    }
    kv->magic = KV_MAGIC;
    kv->desc = *d;
    if (d->block_size > cb->kv_block_size) cb->kv_block_size = d->block_size; /* exact rope in graphs */
    const size_t slots = (size_t)d->n_blocks * (size_t)d->block_size;
    kv->k_layer = slots * rk;
    kv->v_layer = slots * rv;
    const size_t kb = kv->k_layer * (size_t)d->n_layer, vb = kv->v_layer * (size_t)d->n_layer;
    cudaSetDevice(cb->device);
    cudaError_t e = cudaMalloc((void **)&kv->k, kb ? kb : 256);
    if (e == cudaSuccess) e = cudaMalloc((void **)&kv->v, vb ? vb : 256);
    if (e == cudaSuccess && kb) e = cudaMemsetAsync(kv->k, 0, kb, cb->stream);
    if (e == cudaSuccess && vb) e = cudaMemsetAsync(kv->v, 0, vb, cb->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(cb->stream);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        qr_errf(err, err_len, QR_ERR_NOMEM, "cannot allocate the KV cache (%d layers x %d blocks x %d slots): %s",
                d->n_layer, d->n_blocks, d->block_size, cudaGetErrorString(e));
        cudaFree(kv->k);
        cudaFree(kv->v);
        free(kv);
        return NULL;
    }
    return kv;
}

static bool kv_valid(cuda_backend *cb, const qr_kv_storage *kv, const char *op) {
    if (!kv || kv->magic != KV_MAGIC) {
        raise_error(cb, QR_ERR_INVALID_ARG, "%s: KV storage was not allocated by the CUDA backend", op);
        return false;
    }
    return true;
}

static void cuda_kv_copy_block(qr_backend *be, qr_kv_storage *kv, int32_t src, int32_t dst) {
    cuda_backend *cb = CB(be);
    if (!kv_valid(cb, kv, "kv_copy_block")) return;
    const qr_kv_desc *d = &kv->desc; /* src, dst: checked by backend_check.c */
    if (src == dst || d->n_layer == 0) return;
    const size_t bk = (size_t)d->block_size * qr_kv_row_bytes_k(d), bv = (size_t)d->block_size * qr_kv_row_bytes_v(d);
    /* one 2-D copy per cache: a block-sized row in each layer */
    if (cuda_ok(cb, cudaMemcpy2DAsync(kv->k + (size_t)dst * bk, kv->k_layer, kv->k + (size_t)src * bk, kv->k_layer, bk,
                                      (size_t)d->n_layer, cudaMemcpyDeviceToDevice, cb->stream),
                "kv_copy_block"))
        cuda_ok(cb, cudaMemcpy2DAsync(kv->v + (size_t)dst * bv, kv->v_layer, kv->v + (size_t)src * bv, kv->v_layer, bv,
                                      (size_t)d->n_layer, cudaMemcpyDeviceToDevice, cb->stream),
                "kv_copy_block");
}

/* ---- batch plan ---- */

static bool grow_i32(int32_t **arr, size_t cap, size_t need) {
    if (need <= cap && *arr) return true;
    int32_t *p = (int32_t *)realloc(*arr, (need ? need : 1) * sizeof(int32_t));
    if (!p) return false;
    *arr = p;
    return true;
}

/* p: checked by backend_check.c (counts, rows, output rows). */
static qr_status cuda_set_batch(qr_backend *be, const qr_batch_plan *p, char *err, size_t err_len) {
    cuda_backend *cb = CB(be);
    const size_t nt = (size_t)p->n_tokens, nbt = (size_t)p->n_seqs * (size_t)p->max_blocks;
    bool ok = grow_i32(&cb->h_tokens, cb->cap_tok, nt) && grow_i32(&cb->h_pos, cb->cap_tok, nt) &&
              grow_i32(&cb->h_seq, cb->cap_tok, nt) && grow_i32(&cb->h_kv_slot, cb->cap_tok, nt) &&
              grow_i32(&cb->h_output_rows, cb->cap_tok, nt) && grow_i32(&cb->h_exact_blocks, cb->cap_tok, nt);
    if (ok && nt > cb->cap_tok) cb->cap_tok = nt;
    ok = ok && grow_i32(&cb->h_block_table, cb->cap_bt, nbt);
    if (ok && nbt > cb->cap_bt) cb->cap_bt = nbt;
    if (!ok) return qr_errf(err, err_len, QR_ERR_NOMEM, "cannot copy a batch plan of %d rows", p->n_tokens);
    memcpy(cb->h_tokens, p->tokens, nt * 4);
    memcpy(cb->h_pos, p->pos, nt * 4);
    memcpy(cb->h_seq, p->seq, nt * 4);
    memcpy(cb->h_kv_slot, p->kv_slot, nt * 4);
    if (p->n_outputs) memcpy(cb->h_output_rows, p->output_rows, (size_t)p->n_outputs * 4);
    memcpy(cb->h_block_table, p->block_table, nbt * 4);
    cb->n_tokens = p->n_tokens;
    cb->plan_gen++;
    cb->n_seqs = p->n_seqs;
    cb->max_blocks = p->max_blocks;
    cb->cap_blocks = p->max_blocks;
    cb->n_outputs = p->n_outputs;
    cb->row_exact = p->row_exact && p->n_tokens > 1;
    cb->exact_graph = p->exact_graph;
    for (size_t r = 0; r < nt; r++) cb->h_exact_blocks[r] = p->exact_blocks ? p->exact_blocks[r] : p->max_blocks;
    /* does every sequence form one contiguous run of rows? (the parallel conv of ssm_conv) */
    int32_t n_starts = 0; /* rows that start a run (a sequence other than the row before's) */
    for (int32_t r = 0; r < p->n_tokens; r++) n_starts += r == 0 || p->seq[r] != p->seq[r - 1];
    cb->seq_runs = true;
    if (n_starts > 1) { /* several runs: each must be a different sequence */
        uint8_t *seen = (uint8_t *)calloc((size_t)p->n_seqs, 1);
        for (int32_t r = 0; r < p->n_tokens && cb->seq_runs; r++) {
            if (r > 0 && p->seq[r] == p->seq[r - 1]) continue;
            if (!seen || seen[p->seq[r]]) cb->seq_runs = false;
            else seen[p->seq[r]] = 1;
        }
        free(seen);
    }

    /* upload: [tokens | pos | seq | kv_slot | output_rows | block_table] through pinned staging */
    cudaSetDevice(cb->device);
    const size_t n_ints = 5 * nt + nbt;
    cudaError_t e = cudaEventSynchronize(cb->staged);
    if (e == cudaSuccess && n_ints > cb->pinned_cap) {
        if (cb->pinned) cudaFreeHost(cb->pinned);
        cb->pinned = NULL;
        cb->pinned_cap = 0;
        e = cudaMallocHost((void **)&cb->pinned, n_ints * 4 * 2);
        if (e == cudaSuccess) cb->pinned_cap = n_ints * 2;
    }
    if (e == cudaSuccess && n_ints > cb->d_plan_cap) {
        cudaStreamSynchronize(cb->stream);
        cudaFree(cb->d_plan);
        cb->scratch_gen++;
        cb->d_plan = NULL;
        cb->d_plan_cap = 0;
        e = cudaMalloc((void **)&cb->d_plan, n_ints * 4 * 2);
        if (e == cudaSuccess) cb->d_plan_cap = n_ints * 2;
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return qr_errf(err, err_len, QR_ERR_NOMEM, "cannot allocate the batch plan on the GPU: %s", cudaGetErrorString(e));
    }
    int32_t *s = cb->pinned;
    memcpy(s, p->tokens, nt * 4);
    memcpy(s + nt, p->pos, nt * 4);
    memcpy(s + 2 * nt, p->seq, nt * 4);
    memcpy(s + 3 * nt, p->kv_slot, nt * 4);
    if (p->n_outputs) memcpy(s + 4 * nt, p->output_rows, (size_t)p->n_outputs * 4);
    memcpy(s + 5 * nt, p->block_table, nbt * 4);
    e = cudaMemcpyAsync(cb->d_plan, s, n_ints * 4, cudaMemcpyHostToDevice, cb->stream);
    if (e == cudaSuccess) e = cudaEventRecord(cb->staged, cb->stream);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return qr_errf(err, err_len, QR_ERR_INTERNAL, "batch plan upload: %s", cudaGetErrorString(e));
    }
    cb->d_tokens = cb->d_plan;
    cb->d_pos = cb->d_plan + nt;
    cb->d_seq = cb->d_plan + 2 * nt;
    cb->d_kv_slot = cb->d_plan + 3 * nt;
    cb->d_output_rows = cb->d_plan + 4 * nt;
    cb->d_block_table = cb->d_plan + 5 * nt;
    /* matmul activations for every row of the pass */
    if (cb->max_k > 0) {
        const act_layout L = act_layout_of(p->n_tokens, cb->max_k);
        if (!ensure_scratch(cb, &cb->act, &cb->act_cap, L.total, "matmul activations")) {
            cb->error = QR_OK;
            return qr_errf(err, err_len, QR_ERR_NOMEM, "cannot allocate matmul activations for %d rows", p->n_tokens);
        }
    }
    return QR_OK;
}

/* ---- ops ---- */

static void cuda_get_rows(qr_backend *be, const qr_weight *table, float *out) {
    cuda_backend *cb = CB(be);
    const cuda_weight *cw = prepared(cb, table, "get_rows");
    if (!cw) return; /* the token ids: checked by backend_check.c */
    if (cb->n_tokens > 65535) {
        raise_error(cb, QR_ERR_UNSUPPORTED, "get_rows: more than 65535 rows");
        return;
    }
    cuda_ok(cb, qr_cuda_get_rows(&cw->v, cb->d_tokens, cb->n_tokens, out, cb->stream), "get_rows");
}

static void cuda_gather_outputs(qr_backend *be, const float *src, int64_t dim, float *out) {
    cuda_backend *cb = CB(be);
    const char *s0 = (const char *)src, *s1 = s0 + (size_t)cb->n_tokens * (size_t)dim * 4;
    const char *o0 = (const char *)out, *o1 = o0 + (size_t)cb->n_outputs * (size_t)dim * 4;
    const bool overlap = o0 < s1 && s0 < o1;
    cuda_ok(cb, qr_cuda_gather_rows(src, dim, cb->d_output_rows, cb->n_outputs, out, overlap, cb->stream),
            "gather_outputs");
}

/* The GEMM path: y[n_rows][n] = x . w^T through cuBLAS (f16/bf16 tensor cores, f32 for F32 weights);
 * quantized weights are dequantized to f16 one tile of rows at a time. */
/* The f16 copy of a quantized 2-D weight of n rows for the GEMM (made on first use: dequantized once, as the
 * GEMM's tiles would be, so the results are the same), or NULL: the cache is off (QUARREL_CUDA_F16_CACHE=0), the
 * copy would leave less free than max(f16_cache_reserve, a quarter of the device) (then not asked again), or a
 * graph is being captured. Memory for speed: a batch of more rows than the mat-vec takes then reads the f16 matrix
 * once instead of dequantizing it into tiles each time (batched decode, prefill chunks). */
/* Whether a speed-only copy of `bytes` (the f16 cache, the wgmma GEMM's tiles) leaves max(f16_cache_reserve, a
 * quarter of the device) free. */
static bool room_for_copy(cuda_backend *cb, size_t bytes) {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    const size_t reserve = (size_t)cb->tune.f16_cache_reserve_mib << 20, quarter = total_b / 4;
    return free_b >= bytes && free_b - bytes >= (reserve > quarter ? reserve : quarter);
}

const void *f16_cache(cuda_backend *cb, cuda_weight *cw, int64_t n) {
    if (cw->f16 || !cb->tune.f16_cache || cw->f16_tried || cb->capturing || cw->v.n != n) return cw->f16;
    cw->f16_tried = true;
    const size_t bytes = (size_t)n * (size_t)cw->v.k * 2;
    if (!room_for_copy(cb, bytes)) return NULL;
    if (cudaMalloc(&cw->f16, bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        cw->f16 = NULL;
        return NULL;
    }
    if (!cuda_ok(cb, qr_cuda_dequant_f16(&cw->v, 0, n, cw->f16, cb->stream), "matmul (f16 cache)")) {
        cudaStreamSynchronize(cb->stream);
        cudaFree(cw->f16);
        cw->f16 = NULL;
        return NULL;
    }
    cb->f16_cache_bytes += bytes;
    return cw->f16;
}

/* The act scratch's f16 region for n_rows x k activations (grown; NULL when an error was raised), about to be written:
 * the Q8 activations and a held input there are no longer valid. */
static void *act_f16_region(cuda_backend *cb, int64_t n_rows, int64_t k) {
    const act_layout L = act_layout_of(n_rows, k);
    if (!ensure_scratch(cb, &cb->act, &cb->act_cap, L.total, "matmul activations")) return NULL;
    cb->act_valid = false;
    cb->hold_valid = false;
    return (uint8_t *)cb->act + L.h;
}

/* What xh holds: x's rows as f16 activations of `kind` (valid once act_f16_done marks it). */
static void act_f16_record(cuda_backend *cb, const float *x, int64_t n_rows, int64_t k, int kind) {
    cb->xh_x = x;
    cb->xh_rows = n_rows;
    cb->xh_k = k;
    cb->xh_kind = kind;
    cb->xh_gen = cb->scratch_gen;
}

/* xh (the act scratch's f16 region) = x[n_rows][k] as f16: with the Q8 rounding of act kind `kind` (0, 1), or plainly
 * (-1; -2: as bf16); kept when the op just before was a GEMM that left exactly these there (act_f16_done). False
 * when an error was raised. */
static bool act_f16(cuda_backend *cb, const float *x, int64_t n_rows, int64_t k, int kind, void *xh) {
    if (cb->tune.act_reuse && cb->xh_valid && cb->xh_x == x && cb->xh_rows == n_rows && cb->xh_k == k &&
        cb->xh_kind == kind && cb->xh_epoch == cb->op_epoch && cb->xh_gen == cb->scratch_gen)
        return true;
    cb->xh_valid = false;
    const cudaError_t ce = kind >= 0 ? qr_cuda_act_q8_as_f16(x, n_rows * k, kind, xh, cb->stream)
                                     : qr_cuda_to_half(x, n_rows * k, xh, kind == -2, cb->stream);
    if (!cuda_ok(cb, ce, "matmul (convert)")) return false;
    act_f16_record(cb, x, n_rows, k, kind);
    return true;
}

/* The GEMM that read xh (act_f16's, this op) ran: the next op may take xh as it is. */
static void act_f16_done(cuda_backend *cb) {
    cb->xh_valid = true;
    cb->xh_epoch = cb->op_epoch;
}

/* A producer (the fused norm, the swiglu) just wrote x's f16 activations of `kind` into the f16 region: the next op
 * may take them as act_f16 would have made them. */
static void act_f16_written(cuda_backend *cb, const float *x, int64_t n_rows, int64_t k, int kind) {
    act_f16_record(cb, x, n_rows, k, kind);
    act_f16_done(cb);
}

static void matmul_gemm(cuda_backend *cb, const cuda_weight *cw, const float *x, int64_t n_rows, int64_t n, float *y,
                        void *xh) {
    const cuda_wview *v = &cw->v;
    const int64_t k = v->k;
    const float one = 1.0f, zero = 0.0f;
    if (v->type == QR_TYPE_F32) {
        cublas_ok(cb, cublasSgemm(cb->cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int)n, (int)n_rows, (int)k, &one,
                                  (const float *)v->p0, (int)k, x, (int)k, &zero, y, (int)n),
                  "matmul (sgemm)");
        return;
    }
    const bool bf16 = v->type == QR_TYPE_BF16;
    const int kind = qr_cuda_act_kind((qr_type)v->type);
    /* quantized weights: the activations as the CPU's Q8 rounding leaves them (kind 0/1), in f16 */
    if (!act_f16(cb, x, n_rows, k, kind <= 1 && cb->tune.gemm_q8_act ? kind : bf16 ? -2 : -1, xh)) return;
    const cudaDataType_t dt = bf16 ? CUDA_R_16BF : CUDA_R_16F;
    if (v->type == QR_TYPE_F16 || bf16) {
        if (cublas_ok(cb, cublasGemmEx(cb->cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int)n, (int)n_rows, (int)k, &one, v->p0, dt,
                                       (int)k, xh, dt, (int)k, &zero, y, CUDA_R_32F, (int)n, CUBLAS_COMPUTE_32F,
                                       CUBLAS_GEMM_DEFAULT),
                      "matmul (gemm)"))
            act_f16_done(cb);
        return;
    }
    const void *wf16 = f16_cache(cb, (cuda_weight *)cw, n);
    if (wf16) { /* the matrix dequantized once: one GEMM, no tiles */
        if (cublas_ok(cb, cublasGemmEx(cb->cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int)n, (int)n_rows, (int)k, &one, wf16,
                                       CUDA_R_16F, (int)k, xh, CUDA_R_16F, (int)k, &zero, y, CUDA_R_32F, (int)n,
                                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                      "matmul (gemm, f16 cache)"))
            act_f16_done(cb);
        return;
    }
    const int64_t rows = gemm_tile_rows(cb, k, n);
    if (!ensure_scratch(cb, &cb->tile, &cb->tile_cap, (size_t)(rows * k * 2), "the GEMM weight tile")) return;
    for (int64_t r0 = 0; r0 < n; r0 += rows) {
        const int64_t r1 = r0 + rows < n ? r0 + rows : n;
        if (!cuda_ok(cb, qr_cuda_dequant_f16(v, r0, r1, cb->tile, cb->stream), "matmul (dequant)")) return;
        if (!cublas_ok(cb, cublasGemmEx(cb->cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int)(r1 - r0), (int)n_rows, (int)k, &one,
                                        cb->tile, CUDA_R_16F, (int)k, xh, CUDA_R_16F, (int)k, &zero, y + r0, CUDA_R_32F,
                                        (int)n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                       "matmul (gemm)"))
            return;
    }
    act_f16_done(cb);
}



static void hold_set(cuda_backend *cb, int64_t n_rows, int64_t k, int kind) {
    cb->hold_valid = true;
    cb->hold_rows = n_rows;
    cb->hold_k = k;
    cb->hold_kind = kind;
}

/* act_hold: x's activations stay in `act` until the hold ends (x NULL); the ones the op before left
 * there for x (a fused norm's) are kept. */
static void cuda_act_hold(qr_backend *be, const float *x, int64_t n_rows, int64_t k) {
    cuda_backend *cb = CB(be);
    const bool fresh = cb->act_valid && cb->act_x == x && cb->act_rows == n_rows && cb->act_k == k &&
                       cb->act_epoch == cb->op_epoch && cb->act_gen == cb->scratch_gen;
    const int kind = cb->act_kind;
    cb->act_valid = false; /* epoch-valid entries now live in act2 (or act): start over */
    cb->hold_valid = false;
    cb->hold_x = cb->tune.act_reuse ? x : NULL;
    if (cb->hold_x && fresh) hold_set(cb, n_rows, k, kind);
}

/* Points a at the act scratch for n_rows x k activations of `kind` (growing it). */
bool act_scratch(cuda_backend *cb, int kind, const float *x, int64_t n_rows, int64_t k, act_ptrs *a) {
    const act_layout L = act_layout_of(n_rows, k);
    const bool alt = cb->hold_x && x != cb->hold_x; /* a held input keeps `act`: the others use act2 */
    if (alt ? !ensure_scratch(cb, &cb->act2, &cb->act2_cap, L.total, "matmul activations (2)")
            : !ensure_scratch(cb, &cb->act, &cb->act_cap, L.total, "matmul activations"))
        return false;
    if (!alt && cb->hold_x && kind <= 3 && kind != cb->hold_kind) cb->hold_valid = false; /* to be overwritten */
    uint8_t *act = (uint8_t *)(alt ? cb->act2 : cb->act);
    a->kind = kind;
    a->k = k;
    a->q = (int8_t *)(act + L.q);
    a->d = (float *)(act + L.d);
    a->s = (float *)(act + L.s);
    a->g = (int16_t *)(act + L.g);
    a->h = kind == 2 || kind == 3 ? (const void *)(act + L.h) : (const void *)x;
    return true;
}

/* Quantizes / converts x[n_rows][k] for a mat-vec over `type`, unless the previous op left exactly
 * these activations in the scratch (q, k, v projections; gate and up; a fused norm). */
bool act_prepare(cuda_backend *cb, qr_type type, const float *x, int64_t n_rows, int64_t k, act_ptrs *a) {
    const int kind = qr_cuda_act_kind(type);
    if (!act_scratch(cb, kind, x, n_rows, k, a)) return false;
    const bool held = cb->tune.act_reuse && cb->hold_x == x && cb->hold_valid && cb->hold_rows == n_rows &&
                      cb->hold_k == k && cb->hold_kind == kind && kind <= 3;
    const bool reuse = cb->tune.act_reuse && cb->act_valid && cb->act_x == x && cb->act_rows == n_rows &&
                       cb->act_k == k && cb->act_kind == kind && cb->act_epoch == cb->op_epoch &&
                       cb->act_gen == cb->scratch_gen && kind <= 3;
    cb->act_valid = false;
    if (held || reuse) return true;
    cudaError_t e = cudaSuccess;
    if (kind <= 1) e = qr_cuda_quantize_act(x, (int32_t)n_rows, (int32_t)k, kind, a->q, a->d, a->s, a->g, use_pdl(cb),
                                                cb->stream);
    else if (kind <= 3) e = qr_cuda_to_half(x, n_rows * k, (void *)a->h, kind == 3, cb->stream);
    if (!cuda_ok(cb, e, "matmul (activations)")) return false;
    if (kind <= 3) /* a kernel ran: the quantizer waits before it lets the next kernel launch, to_half
                    * launches without pdl; either fences the routing (f32 activations launch nothing) */
        cb->ids_unfenced = NULL;
    if (x == cb->hold_x && kind <= 3) hold_set(cb, n_rows, k, kind);
    return true;
}

/* The view of activation rows t0.. of a. */
cuda_xview act_view(const act_ptrs *a, int64_t t0) {
    const int64_t k = a->k, dstride = a->kind == 1 ? k / 256 : k / 32, hsize = a->kind == 4 ? 4 : 2;
    cuda_xview xv;
    xv.q = a->q + t0 * k;
    xv.d = a->d + t0 * dstride;
    xv.s = a->s + t0 * (k / 32);
    xv.g = a->g + t0 * (k / 16);
    xv.h = (const uint8_t *)a->h + t0 * k * hsize;
    xv.k = (int32_t)k;
    return xv;
}

/* Records that the scratch holds x's activations of kind (valid for the next op only; for a held x
 * until the hold ends). */
void act_mark(cuda_backend *cb, const float *x, int64_t n_rows, int64_t k, int kind) {
    if (kind > 3) return;
    if (x == cb->hold_x) hold_set(cb, n_rows, k, kind);
    cb->act_valid = true;
    cb->act_x = x;
    cb->act_rows = n_rows;
    cb->act_k = k;
    cb->act_kind = kind;
    cb->act_epoch = cb->op_epoch;
    cb->act_gen = cb->scratch_gen;
}




/* A batch of more rows than the mat-vec takes, up to mmq_dense_max_rows (batched decode), on the int8
 * tensor-core kernel of the expert GEMM (matmul_mma.cu) for the types it supports: the weights are read once a
 * tile of 64 rows in their block format instead of dequantized to f16 for cuBLAS. The rows are copied with the
 * kernel's 64 rows of zero slack, quantized as the mat-vec's activations. True when it ran (or raised). */
static bool matmul_mmq_dense(cuda_backend *cb, const cuda_weight *cw, const float *x, int64_t n_rows, int64_t n,
                             float *y) {
    const cuda_wview *v = &cw->v;
    const int64_t k = v->k, slack = QR_CUDA_MMQ_TILE_ROWS;
    if (!cb->tune.mmq_dense || n_rows > cb->tune.mmq_dense_max_rows || !qr_cuda_mmq_supported((qr_type)v->type) ||
        v->nb <= 0 || k % 32)
        return false;
    const int32_t n_tiles = (int32_t)((n_rows + slack - 1) / slack);
    int32_t h_tiles[4 * 64]; /* mmq_dense_max_rows <= 4096: at most 64 tiles */
    if (n_tiles > 64) return false;
    for (int32_t i = 0; i < n_tiles; i++) {
        const int64_t p0 = (int64_t)i * slack;
        h_tiles[4 * i] = 0, h_tiles[4 * i + 1] = (int32_t)p0;
        h_tiles[4 * i + 2] = (int32_t)(n_rows - p0 < slack ? n_rows - p0 : slack), h_tiles[4 * i + 3] = 0;
    }
    const size_t o_x = 1024, bytes = o_x + (size_t)((n_rows + slack) * k) * 4;
    if (!ensure_scratch(cb, &cb->moe, &cb->moe_cap, bytes, "matmul (mma)")) return true;
    int32_t *d_tiles = (int32_t *)cb->moe;
    float *xs = (float *)((uint8_t *)cb->moe + o_x);
    /* the tiles from the stack (pageable: read when cudaMemcpyAsync returns) */
    if (!cuda_ok(cb, cudaMemcpyAsync(d_tiles, h_tiles, (size_t)n_tiles * 16, cudaMemcpyHostToDevice, cb->stream),
                 "matmul (mma tiles)") ||
        !cuda_ok(cb, cudaMemcpyAsync(xs, x, (size_t)(n_rows * k) * 4, cudaMemcpyDeviceToDevice, cb->stream),
                 "matmul (mma rows)") ||
        !cuda_ok(cb, cudaMemsetAsync(xs + n_rows * k, 0, (size_t)(slack * k) * 4, cb->stream), "matmul (mma slack)"))
        return true;
    act_ptrs a;
    if (!act_prepare(cb, (qr_type)v->type, xs, n_rows + slack, k, &a)) return true;
    const cuda_xview xv = act_view(&a, 0);
    cuda_wview wv = *v;
    wv.n = n;
    cuda_ok(cb, qr_cuda_mmq_tiles(&wv, &xv, d_tiles, n_tiles, (int32_t)(n_rows < slack ? n_rows : slack), n, y, cb->stream),
            "matmul (mma)");
    cb->act_valid = false;
    return true;
}

/* The scale plane of a Q4_K / Q6_K weight for matmul_dq.cu, made once (not while a graph is captured: the warm-up
 * run made it): 1 ready, 0 unavailable, -1 an error (raised). */
static int dq_scales_ready(cuda_backend *cb, cuda_weight *mw, int64_t n) {
    if (mw->dqs) return 1;
    if (mw->dqs_tried || cb->capturing || mw->v.n != n) return 0;
    mw->dqs_tried = true;
    if (cudaMalloc(&mw->dqs, qr_cuda_dq_scales_bytes(&mw->v)) != cudaSuccess) {
        (void)cudaGetLastError();
        mw->dqs = NULL;
        return 0;
    }
    return cuda_ok(cb, qr_cuda_dq_scales(&mw->v, mw->dqs, cb->stream), "matmul (dq scales)") ? 1 : -1;
}

/* The wgmma versions' tiles (v3's; own: v4's Q4_K ones) from the scale plane, made once (not while a graph is
 * captured) where the f16 cache's memory reserve allows: 1 ready, 0 unavailable, -1 an error (raised). */
static int dq_tiles_ready(cuda_backend *cb, cuda_weight *mw, bool own) {
    void **tiles = own ? &mw->dqw : &mw->dqt;
    bool *tried = own ? &mw->dqw_tried : &mw->dqt_tried;
    if (*tiles) return 1;
    if (*tried || cb->capturing) return 0;
    *tried = true;
    const size_t tb = own ? qr_cuda_dq_ws_tiles_bytes(&mw->v) : qr_cuda_dq_wg_tiles_bytes(&mw->v);
    if (!room_for_copy(cb, tb) || cudaMalloc(tiles, tb) != cudaSuccess) {
        (void)cudaGetLastError();
        *tiles = NULL;
        return 0;
    }
    return cuda_ok(cb, own ? qr_cuda_dq_ws_tiles(&mw->v, mw->dqs, *tiles, cb->stream)
                           : qr_cuda_dq_wg_tiles(&mw->v, mw->dqs, *tiles, cb->stream),
                   "matmul (dq tiles)")
               ? 1
               : -1;
}

/* Version 6 (and the kernels around it) launched with programmatic dependent launch (tune.dq_pdl) */
static bool dq_pdl(const cuda_backend *cb) { return cb->tune.dq_pdl && use_pdl(cb); }

/* A batch of more rows than the mat-vec takes, up to dq_max_rows (batched decode), of Q4_K / Q6_K weights on
 * the f16 tensor-core kernel that dequantizes the blocks in registers (matmul_dq.cu): the weights are read once
 * in their block format instead of as the 3.5x larger f16 cache. The activations are the cuBLAS path's (Q8_K
 * rounding, as f16). True when it ran (or raised). */
static bool matmul_dq(cuda_backend *cb, const cuda_weight *cw, const float *x, int64_t n_rows, int64_t n, float *y) {
    const cuda_wview *v = &cw->v;
    const int64_t k = v->k;
    if (!cb->tune.dq_gemm || n_rows > cb->tune.dq_max_rows || !qr_cuda_dq_gemm_supported((qr_type)v->type) || k % 256 ||
        v->nb != k / 256 || !cb->tune.gemm_q8_act)
        return false;
    /* past dq_small_max_rows rows only the large matrices (the FFN's, the output): on the small ones the f16 cache
     * is faster there */
    if (n_rows > cb->tune.dq_small_max_rows && n < 8192 && k < 8192) return false;
    cuda_weight *mw = (cuda_weight *)cw;
    const int sr = dq_scales_ready(cb, mw, n);
    if (sr <= 0) return sr < 0;
    const bool small = n_rows <= cb->tune.mmvq_max_rows; /* (dq_small: version 6 or the mat-vec) */
    const bool want_wg = cb->tune.dq_wg && (n_rows >= cb->tune.dq_wg_min_rows || small); /* Hopper's wgmma versions */
    bool wg = want_wg;
    /* version 6 (v3's tiles and activations, TMA copies; falls back to v3 without a tensor map): by default up to 64
     * rows (past that it reads the weights once a 64-token tile) */
    const bool tr = cb->tune.dq_tma && (cb->tune.dq_wg == 4 || (cb->tune.dq_wg == 1 && n_rows <= 64));
    bool ws = wg && !tr && (cb->tune.dq_wg == 3 || (cb->tune.dq_wg == 1 && n_rows >= cb->tune.dq_ws_min_rows));
    const bool own = ws && v->type == QR_TYPE_Q4_K; /* v4's own Q4_K tiles; Q6_K shares v3's */
    void **tiles = own ? &mw->dqw : &mw->dqt;
    if (wg) {
        const int ready = dq_tiles_ready(cb, mw, own);
        if (ready < 0) return true;
        if (ready == 0) wg = ws = false;
    }
    /* no tiles (captured before a plain run made them, or no room): past 16 rows the f16 cache beats the mma.sync
     * version */
    if (want_wg && !wg && (n_rows > 16 || small)) return false;
    void *xh = act_f16_region(cb, n_rows, k);
    if (!xh) return true;
    const int32_t splits = cb->tune.dq_splits ? cb->tune.dq_splits
                           : ws               ? qr_cuda_dq_ws_splits(n_rows, n, k, cb->n_sm)
                           : wg               ? qr_cuda_dq_wg_splits((qr_type)v->type, n_rows, n, k, cb->n_sm, cb->tune.dq_wg_mt,
                                                                     tr)
                                              : qr_cuda_dq_gemm_splits(n_rows, n, k, cb->n_sm);
    if (splits > 1 && !ensure_scratch(cb, &cb->dq_part, &cb->dq_part_cap, (size_t)(splits * n_rows * n) * 4,
                                      "matmul (split-K partial sums)"))
        return true;
    if (!act_f16(cb, x, n_rows, k, wg && !ws ? 2 : 1, xh)) return true; /* kind 2: the A-from-registers k order */
    cuda_wview wv = *v;
    wv.n = n;
    /* the matmul op itself (not a matmul inside another op): version 6 may leave its split-K sum to the next op */
    int32_t defer = cb->defer_ok && (cb->tune.dq_defer & 1) && n_rows <= cb->tune.dq_defer_max_rows &&
                    !overlaps(x, n_rows * k, y, n_rows * n);
    const cudaError_t e = ws   ? qr_cuda_dq_ws_gemm(&wv, *tiles, xh, n_rows, n, splits, (float *)cb->dq_part, y, cb->stream)
                          : wg ? qr_cuda_dq_wg_gemm(&wv, cw->dqt, xh, n_rows, n, splits, (float *)cb->dq_part, y, cb->n_sm,
                                                  cb->tune.dq_wg_mt, tr, dq_pdl(cb), &defer, cb->tune.dq_cluster,
                                                  cb->stream)
                             : qr_cuda_dq_gemm(&wv, cw->dqs, xh, n_rows, n, splits, (float *)cb->dq_part, y, cb->stream);
    if (cuda_ok(cb, e, "matmul (dq gemm)")) {
        act_f16_done(cb);
        if (wg && !ws && defer) { /* y = the sum of the parts, written by the next op (CB / cuda_add_rmsnorm) */
            cb->pend_y = y;
            cb->pend_splits = splits;
            cb->pend_n = n_rows * n;
            cb->pend_nw = 1;
        }
    }
    return true;
}

/* A batch of dq_min_rows..mmvq_max_rows rows of a Q4_K / Q6_K weight goes to version 6 of matmul_dq.cu instead of the
 * mat-vec where version 6 runs: the mat-vec's time grows with the rows (H200, mistral-7b Q4_K_M: 1.3x a one-row step at
 * 2 rows, 3.7x at 8), version 6's is flat to 16 rows (2.4x) (docs/performance.md, session 33). */
static bool dq_small(const cuda_backend *cb, const cuda_wview *v, int64_t n_rows) {
    const qr_cuda_tune *t = &cb->tune;
    return !cb->exact && !cb->row_exact && n_rows >= t->dq_min_rows && n_rows <= t->mmvq_max_rows && t->dq_gemm && t->dq_tma &&
           t->gemm_q8_act && (t->dq_wg == 1 || t->dq_wg == 4) && qr_cuda_dq_gemm_supported((qr_type)v->type) &&
           v->k % 256 == 0 && v->nb == v->k / 256;
}

/* Version 6 of matmul_dq.cu (f16 activations of kind 2) takes a weight like v at a batch of n_rows: Q4_K / Q6_K whole
 * blocks, 5..8 rows (dq_small) or dq_wg_min_rows..dq_max_rows past the mat-vec, and up to 64 rows by default. */
static bool dq_v6_takes(const cuda_backend *cb, const cuda_wview *v, int64_t n_rows) {
    const qr_cuda_tune *t = &cb->tune;
    const bool rows = dq_small(cb, v, n_rows) || (n_rows > t->mmvq_max_rows && n_rows <= t->dq_max_rows &&
                                                  n_rows >= t->dq_wg_min_rows);
    return !cb->exact && !cb->row_exact && t->dq_gemm && t->dq_tma && t->gemm_q8_act && rows &&
           (t->dq_wg == 4 || (t->dq_wg == 1 && n_rows <= 64)) && qr_cuda_dq_gemm_supported((qr_type)v->type) &&
           v->k % 256 == 0 && v->nb == v->k / 256;
}

/* A weight like v at n_rows rows most likely goes to matmul_gemm's f16 cache + cuBLAS with act kind 1: a K-quant past
 * the rows of the mat-vec, not taken by version 6 (tune.gemm_f16_act: the producers write those activations). */
static bool gemm_kind1_likely(const cuda_backend *cb, const cuda_wview *v, int64_t n_rows) {
    const qr_cuda_tune *t = &cb->tune;
    return t->gemm_f16_act && !cb->exact && !cb->row_exact && t->gemm_q8_act && !t->mmq_dense && n_rows > t->mmvq_max_rows &&
           v->nb > 0 && qr_cuda_act_kind((qr_type)v->type) == 1 && !dq_v6_takes(cb, v, n_rows);
}

/* A run of 2-3 weights of one K-quant type (or Q4_K and Q6_K: a Q4_K_M layer's q / k and Q6_K v, tune.dq_mix) and one
 * k with the same input (q / k / v) at a batch that version 6 of matmul_dq.cu takes: one launch over all their rows
 * (the launches of the small q / k / v matrices are too short to fill the GPU one by one). True when it ran (or raised); false: run them one by one. */
static bool matmul_multi_dq(cuda_backend *cb, int32_t n_w, const cuda_weight *const *cw, const qr_weight *const *w,
                            const float *x, int64_t n_rows, float *const *y, bool may_defer = false) {
    const cuda_wview *v0 = &cw[0]->v;
    const int64_t k = v0->k;
    const qr_cuda_tune *t = &cb->tune;
    if (!t->dq_multi || n_w < 2 || n_w > 3 || !dq_v6_takes(cb, v0, n_rows)) return false;
    cuda_wview wv[3];
    const void *tiles[3];
    int64_t n_sum = 0;
    for (int32_t i = 0; i < n_w; i++) {
        cuda_weight *mw = (cuda_weight *)cw[i];
        if ((mw->v.type != v0->type && !(t->dq_mix && dq_v6_takes(cb, &mw->v, n_rows))) || mw->v.k != k ||
            mw->v.nb != k / 256)
            return false;
        int ready = dq_scales_ready(cb, mw, w[i]->ne[1]);
        if (ready > 0) ready = dq_tiles_ready(cb, mw, false);
        if (ready <= 0) return ready < 0;
        wv[i] = mw->v;
        wv[i].n = w[i]->ne[1];
        tiles[i] = mw->dqt;
        n_sum += wv[i].n;
    }
    void *xh = act_f16_region(cb, n_rows, k);
    if (!xh) return true;
    const int32_t splits = t->dq_splits ? t->dq_splits : qr_cuda_dq_wr_multi_splits(n_w, wv, n_rows, cb->n_sm);
    if (splits > 1 && !ensure_scratch(cb, &cb->dq_part, &cb->dq_part_cap, (size_t)(splits * n_rows * n_sum) * 4,
                                      "matmul (split-K partial sums)"))
        return true;
    if (!act_f16(cb, x, n_rows, k, 2, xh)) return true;
    bool defer = may_defer && splits > 1 && (cb->tune.dq_defer & 2) && n_rows <= cb->tune.dq_defer_max_rows;
    for (int32_t i = 0; i < n_w && defer; i++) defer = !overlaps(x, n_rows * k, y[i], n_rows * wv[i].n);
    const cudaError_t e = qr_cuda_dq_wr_multi(n_w, wv, tiles, xh, n_rows, y, splits, (float *)cb->dq_part,
                                                dq_pdl(cb), defer, cb->tune.dq_cluster, cb->stream);
    if (e == cudaErrorNotSupported) return false; /* no tensor map: one by one (version 3) */
    if (cuda_ok(cb, e, "matmul_multi (dq gemm)")) {
        act_f16_done(cb);
        if (defer) { /* q / k / v = the sums of the parts: the rope + K/V store adds them (or CB runs the reduction) */
            cb->pend_y = y[0];
            cb->pend_splits = splits;
            cb->pend_nw = n_w;
            cb->pend_rows = n_rows;
            cb->pend_n = n_rows * n_sum;
            for (int32_t i = 0; i < n_w; i++) cb->pend_ys[i] = y[i], cb->pend_nout[i] = wv[i].n;
        }
    }
    return true;
}

void cuda_pend_flush(cuda_backend *cb) {
    const float *part = (const float *)cb->dq_part;
    const cudaError_t e = cb->pend_nw > 1 ? qr_cuda_dq_reduce_multi(part, cb->pend_splits, cb->pend_rows, cb->pend_nw,
                                                                    cb->pend_nout, cb->pend_ys, cb->stream)
                                          : qr_cuda_dq_reduce(part, cb->pend_splits, cb->pend_n, cb->pend_y, cb->stream);
    cb->pend_y = NULL;
    cuda_ok(cb, e, "matmul (split-K sums)");
}

static void cuda_matmul(qr_backend *be, const qr_weight *w, const float *x, int64_t n_rows, float *y) {
    cuda_backend *cb = CB(be);
    const cuda_weight *cw = prepared(cb, w, "matmul");
    if (!cw || n_rows <= 0) return;
    if (cb->exact) {
        cuda_exact_matmul(cb, w, cw, x, n_rows, y);
        return;
    }
    const cuda_wview *v = &cw->v;
    const int64_t k = v->k, n = w->ne[1];
    const bool mmv = n_rows <= cb->tune.mmvq_max_rows && v->nb > 0;
    if ((!mmv || dq_small(cb, v, n_rows)) && matmul_dq(cb, cw, x, n_rows, n, y)) return;
    if (!mmv && matmul_mmq_dense(cb, cw, x, n_rows, n, y)) return;
    if (!mmv) {
        void *xh = act_f16_region(cb, n_rows, k);
        if (xh) matmul_gemm(cb, cw, x, n_rows, n, y, xh);
        return;
    }
    act_ptrs a;
    if (!act_prepare(cb, (qr_type)v->type, x, n_rows, k, &a)) return;
    const int32_t wpr = mmv_wpr(cb, n);
    for (int64_t t0 = 0; t0 < n_rows; t0 += 8) {
        const int32_t nr = (int32_t)(n_rows - t0 < 8 ? n_rows - t0 : 8);
        const cuda_xview xv = act_view(&a, t0);
        cuda_wview wv = *v;
        wv.n = n;
        if (!cuda_ok(cb, qr_cuda_matvec(&wv, &xv, nr, y + t0 * n, wpr, use_pdl(cb), cb->stream), "matmul (mat-vec)"))
            return;
    }
    if (!overlaps(x, n_rows * k, y, n_rows * n)) act_mark(cb, x, n_rows, k, a.kind); /* y did not overwrite x */
}

/* The matmul op: its split-K sum may stay pending for the next op (defer_ok); cuda_matmul called inside other ops
 * always writes y before it returns. */
static void cuda_matmul_op(qr_backend *be, const qr_weight *w, const float *x, int64_t n_rows, float *y) {
    cuda_backend *cb = CB(be);
    cb->defer_ok = !cb->exact && !cb->row_exact;
    cuda_matmul(be, w, x, n_rows, y);
    cb->defer_ok = false;
}

static const float *vec_weight(cuda_backend *cb, const qr_weight *w, int64_t dim, const char *op);
static void cuda_add_row(qr_backend *be, const float *x, const qr_weight *table, int64_t row, int64_t n_rows,
                         float *out);

/* Fused q/k/v (or any same-input) mat-vecs: consecutive weights of one type share one launch, their
 * F32 biases added in the same kernel. */
static void cuda_matmul_multi(qr_backend *be, int32_t n_w, const qr_weight *const *w, const qr_weight *const *b,
                              const float *x, int64_t n_rows, float *const *y) {
    cuda_backend *cb = CB(be); /* n_w in 1..QR_CUDA_MULTI_MAX: checked by backend_check.c */
    const cuda_weight *cw[QR_CUDA_MULTI_MAX];
    const float *bp[QR_CUDA_MULTI_MAX] = {NULL, NULL, NULL};
    bool fuse = cb->tune.fuse && qr_cuda_multi_supported((int32_t)n_rows, 0) && n_rows <= cb->tune.mmvq_max_rows;
    for (int32_t i = 0; i < n_w; i++) {
        if (!(cw[i] = prepared(cb, w[i], "matmul_multi"))) return;
        if (b && b[i]) { /* F32 [n] biases go into the mat-vec's epilogue; others through add_row */
            if (b[i]->type == QR_TYPE_F32 && b[i]->ne[0] == w[i]->ne[1]) {
                if (!(bp[i] = vec_weight(cb, b[i], w[i]->ne[1], "matmul_multi (bias)"))) return;
            } else {
                fuse = false;
            }
        }
    }
    for (int32_t i = 0; i < n_w && fuse; i++)
        fuse = cw[i]->v.nb > 0 && cw[i]->v.k == cw[0]->v.k && !overlaps(x, n_rows * cw[0]->v.k, y[i], n_rows * w[i]->ne[1]);
    bool all_dq = fuse; /* every weight to version 6 at this batch: no fused mat-vec */
    for (int32_t i = 0; i < n_w && all_dq; i++) all_dq = dq_small(cb, &cw[i]->v, n_rows);
    if (all_dq) fuse = false;
    if (!fuse) { /* runs of one K-quant type in one launch of matmul_dq.cu's version 6 where it takes them */
        for (int32_t i = 0; i < n_w;) {
            int32_t r = 1;
            while (i + r < n_w && cw[i + r]->v.k == cw[i]->v.k &&
                   (cw[i + r]->v.type == cw[i]->v.type || (cb->tune.dq_mix && dq_v6_takes(cb, &cw[i]->v, n_rows) &&
                                                           dq_v6_takes(cb, &cw[i + r]->v, n_rows))))
                r++;
            /* the whole op in one launch, no biases: its split-K sums may stay for the rope + K/V store */
            const bool whole = i == 0 && r == n_w && !b && !cb->exact && !cb->row_exact;
            if (r < 2 || !matmul_multi_dq(cb, r, cw + i, w + i, x, n_rows, y + i, whole)) {
                r = 1;
                cuda_matmul(be, w[i], x, n_rows, y[i]);
            }
            for (int32_t j = i; j < i + r; j++)
                if (b && b[j]) cuda_add_row(be, y[j], b[j], 0, n_rows, y[j]);
            i += r;
        }
        return;
    }
    const int64_t k = cw[0]->v.k;
    /* two runs of types that share one launch (q Q4_0 with k / v Q8_0; Q4_K / Q5_K with a Q6_K v): one group */
    int32_t na = 1;
    while (na < n_w && cw[na]->v.type == cw[0]->v.type) na++;
    bool pair = na < n_w && cb->tune.multi_pair && qr_cuda_multi_pair_supported(cw[0]->v.type, cw[na]->v.type);
    for (int32_t i = na + 1; i < n_w && pair; i++) pair = cw[i]->v.type == cw[na]->v.type;
    for (int32_t i0 = 0; i0 < n_w;) { /* groups of consecutive weights of one type (or the pair) */
        int32_t i1 = i0 + 1;
        while (i1 < n_w && (pair || cw[i1]->v.type == cw[i0]->v.type)) i1++;
        act_ptrs a;
        if (!act_prepare(cb, (qr_type)cw[i0]->v.type, x, n_rows, k, &a)) return;
        cuda_wview wv[QR_CUDA_MULTI_MAX];
        int64_t n_max = 0;
        for (int32_t i = i0; i < i1; i++) {
            wv[i - i0] = cw[i]->v;
            wv[i - i0].n = w[i]->ne[1];
            if (wv[i - i0].n > n_max) n_max = wv[i - i0].n;
        }
        const cuda_xview xv = act_view(&a, 0);
        if (!cuda_ok(cb, qr_cuda_matvec_multi(wv, i1 - i0, &xv, (int32_t)n_rows, y + i0, bp + i0, mmv_wpr(cb, n_max), 0,
                                              use_pdl(cb), cb->stream),
                     "matmul_multi (mat-vec)"))
            return;
        act_mark(cb, x, n_rows, k, a.kind);
        i0 = i1;
    }
}

static void cuda_geglu(qr_backend *be, const float *g, const float *u, int64_t n, float *out);

/* out = swiglu(gate . x, up . x) (gelu: geglu): one launch when both weights have one type (decode sizes). */
static void cuda_matmul_glu(qr_backend *be, const qr_weight *gate, const qr_weight *up, const float *x, int64_t n_rows,
                            bool gelu, float *out, float *scratch) {
    cuda_backend *cb = CB(be);
    const cuda_weight *cg = prepared(cb, gate, "matmul_glu"), *cu = cg ? prepared(cb, up, "matmul_glu") : NULL;
    if (!cu || n_rows <= 0) return;
    const int64_t k = cg->v.k, n = gate->ne[1];
    const int glu = gelu ? 2 : 1;
    const bool dq = dq_small(cb, &cg->v, n_rows) && dq_small(cb, &cu->v, n_rows); /* both to version 6 */
    const bool fuse = cb->tune.fuse && qr_cuda_multi_supported((int32_t)n_rows, glu) && n_rows <= cb->tune.mmvq_max_rows &&
                      cg->v.nb > 0 && cg->v.type == cu->v.type && cu->v.k == k && up->ne[1] == n &&
                      !overlaps(x, n_rows * k, out, n_rows * n) && !dq;
    if (!fuse) { /* gate and up in one launch of matmul_dq.cu's version 6 where it takes them */
        const cuda_weight *cws[2] = {cg, cu};
        const qr_weight *wq[2] = {gate, up};
        float *ys[2] = {out, scratch};
        bool v6 = false;
        if (cg->v.type != cu->v.type || cu->v.k != k || !(v6 = matmul_multi_dq(cb, 2, cws, wq, x, n_rows, ys))) {
            cuda_matmul(be, gate, x, n_rows, out);
            cuda_matmul(be, up, x, n_rows, scratch);
        }
        if (gelu) {
            cuda_geglu(be, out, scratch, n_rows * n, out);
            return;
        }
        /* where gate / up took version 6, down most likely does too (act kind 2), and where they took the f16 cache +
         * cuBLAS with act kind 1, down too: the swiglu also writes down's f16 activations into the act scratch (a wrong
         * guess costs only the writes: act_f16 checks the kind) */
        const int ak = v6 ? 2 : gemm_kind1_likely(cb, &cg->v, n_rows) ? 1 : 0;
        const bool f16 = ak && cb->error == QR_OK && cb->tune.glu_f16 && cb->tune.act_reuse && n % 256 == 0 &&
                         ((uintptr_t)out & 15) == 0 && ((uintptr_t)scratch & 15) == 0;
        void *xh = f16 ? act_f16_region(cb, n_rows, n) : NULL;
        if (!xh)
            cuda_ok(cb, qr_cuda_elementwise(CUDA_EW_SWIGLU, out, scratch, 0.0f, n_rows * n, out, cb->stream), "swiglu");
        else if (cuda_ok(cb, qr_cuda_glu_f16(CUDA_EW_SWIGLU, out, scratch, n_rows * n, out, xh, ak,
                                                      dq_pdl(cb), cb->stream), "swiglu"))
            act_f16_written(cb, out, n_rows, n, ak);
        return;
    }
    act_ptrs a;
    if (!act_prepare(cb, (qr_type)cg->v.type, x, n_rows, k, &a)) return;
    cuda_wview wv[2] = {cg->v, cu->v};
    wv[0].n = wv[1].n = n;
    float *ys[2] = {out, NULL};
    const cuda_xview xv = act_view(&a, 0);
    cuda_ok(cb, qr_cuda_matvec_multi(wv, 2, &xv, (int32_t)n_rows, ys, NULL, n >= 4096 ? 1 : 2, glu, use_pdl(cb), cb->stream),
            "matmul_glu (mat-vec)");
}

/* The F32 [dim] vector of a norm weight (its type and size checked by backend_check.c), or NULL with an error
 * raised where this backend did not prepare it. */
static const float *vec_weight(cuda_backend *cb, const qr_weight *w, int64_t dim, const char *op) {
    (void)dim;
    const cuda_weight *cw = prepared(cb, w, op);
    return cw ? (const float *)cw->v.p0 : NULL;
}

static void cuda_rmsnorm(qr_backend *be, const float *x, const qr_weight *w, int64_t n_rows, int64_t dim, float eps,
                         float *y) {
    cuda_backend *cb = CB(be);
    const float *wp = NULL;
    if (w && !(wp = vec_weight(cb, w, dim, "rmsnorm"))) return;
    if (cb->exact) return cuda_exact_rmsnorm(cb, x, wp, n_rows, dim, eps, y);
    cuda_ok(cb, qr_cuda_rmsnorm(x, wp, n_rows, dim, eps, y, cb->stream), "rmsnorm");
}

/* Where a norm's output y feeds a mat-vec over `next` that takes Q8 activations of this shape at decode sizes:
 * the act scratch for the codes the norm kernel makes of y (*a) and their kind (0: per 32, 1: per 256); -1 for
 * none; -2 on an error (raised). */
static int norm_codes(cuda_backend *cb, const qr_weight *next, const float *x, float *y, int64_t n_rows, int64_t dim,
                      const char *op, act_ptrs *a) {
    if (!next || !next->device || !cb->tune.act_reuse || n_rows > cb->tune.mmvq_max_rows) return -1;
    const cuda_weight *cn = prepared(cb, next, op);
    if (!cn) return -2;
    const int nk = qr_cuda_act_kind((qr_type)cn->v.type);
    if (cn->v.nb <= 0 || cn->v.k != dim || nk > 1 || dim % (nk == 0 ? 32 : 256) != 0 ||
        overlaps(x, n_rows * dim, y, n_rows * dim))
        return -1;
    return act_scratch(cb, nk, y, n_rows, dim, a) ? nk : -2;
}

/* Where a norm's output y feeds `next` at a batch version 6 takes (dq_v6_takes, *kind 2) or the f16 cache + cuBLAS
 * with act kind 1 (gemm_kind1_likely, *kind 1): the act scratch's f16 region for the norm kernel to write y's f16
 * activations of that kind into; else NULL. A guess of the matmul's path: act_f16 takes the values only for exactly
 * this (x, rows, k, kind), else it converts y itself. */
static void *norm_f16_dst(cuda_backend *cb, const qr_weight *next, const float *x, const float *y, int64_t n_rows,
                          int64_t dim, const char *op, int *kind) {
    if (!next || !next->device || !cb->tune.norm_f16 || !cb->tune.act_reuse || overlaps(x, n_rows * dim, y, n_rows * dim))
        return NULL;
    const cuda_weight *cn = prepared(cb, next, op);
    if (!cn || cn->v.k != dim) return NULL;
    if (dq_v6_takes(cb, &cn->v, n_rows)) *kind = 2;
    else if (dim % 256 == 0 && gemm_kind1_likely(cb, &cn->v, n_rows)) *kind = 1;
    else return NULL;
    return act_f16_region(cb, n_rows, dim);
}

/* x += b; y = rmsnorm(x) * w; when the next mat-vec's activations are Q8 (next's type) and the rows
 * are decode-sized, the same kernel quantizes y into the act scratch for it; when `next` takes version 6 of the
 * batched-decode GEMM, it writes y's f16 activations for it instead (norm_f16_dst). */
static void add_rmsnorm(qr_backend *be, float *x, const float *b, float b_scale, const qr_weight *w, int64_t n_rows,
                        int64_t dim, float eps, float *y, const qr_weight *next, const float *bw, int32_t b_splits = 0) {
    cuda_backend *cb = CB(be); /* b_splits > 0: b is a split-K sum still in dq_part (taken off pend_y by the caller) */
    const float *wp = NULL;
    if (w && !(wp = vec_weight(cb, w, dim, "add_rmsnorm"))) return;
    if (!cb->tune.fuse) { /* (never with bw: cuda_add_rmsnorm declines that form) */
        if (b && b_scale != 1.0f) { /* scale into y (free until the norm writes it), then add */
            cuda_ok(cb, qr_cuda_elementwise(CUDA_EW_SCALE, b, NULL, b_scale, n_rows * dim, y, cb->stream), "scale");
            b = y;
        }
        if (b) cuda_ok(cb, qr_cuda_elementwise(CUDA_EW_ADD, x, b, 0.0f, n_rows * dim, x, cb->stream), "add");
        cuda_ok(cb, qr_cuda_rmsnorm(x, wp, n_rows, dim, eps, y, cb->stream), "rmsnorm");
        return;
    }
    act_ptrs a = {};
    int fk = 0; /* the f16 activations' kind (2 or 1) where xh */
    void *xh = norm_f16_dst(cb, next, x, y, n_rows, dim, "add_rmsnorm", &fk);
    const int kind = xh ? (fk == 2 ? 2 : 3) : norm_codes(cb, next, x, y, n_rows, dim, "add_rmsnorm", &a); /* 3: kind 1 */
    if (kind == -2) return;
    if (xh) a.q = (int8_t *)xh;
    const cudaError_t e = b_splits > 0 ? qr_cuda_add_rmsnorm_parts(x, (const float *)cb->dq_part, b_splits, (float *)b, wp,
                                                                   n_rows, dim, eps, y, kind, a.q, a.d, a.s, a.g,
                                                                   use_pdl(cb), cb->stream)
                                       : qr_cuda_add_rmsnorm(x, b, b_scale, bw, wp, n_rows, dim, eps, y, kind, a.q, a.d,
                                                             a.s, a.g, use_pdl(cb), cb->stream);
    if (!cuda_ok(cb, e, "add_rmsnorm")) return;
    cb->act_valid = false;
    if (xh) act_f16_written(cb, y, n_rows, dim, fk); /* the next GEMM over y finds its f16 activations ready */
    else if (kind >= 0) act_mark(cb, y, n_rows, dim, kind);
}

/* add_rmsnorm + the MoE router (F32) + routing in one launch (qr_cuda_norm_route) at decode sizes; the
 * codes for `next` as cuda_add_rmsnorm makes them. Anything else: false, the model runs the three ops. */
static bool add_rmsnorm_route(qr_backend *be, float *x, const float *b, float b_scale, const qr_weight *w, int64_t n_rows,
                              int64_t dim, float eps, float *y, const qr_weight *next, const qr_weight *router,
                              const qr_weight *router_b, const qr_moe_route_params *p, float *logits, int32_t *ids,
                              float *weights) {
    cuda_backend *cb = CB(be);
    if (cb->exact || !cb->tune.fuse || !cb->tune.norm_route || n_rows > cb->tune.mmvq_max_rows || p->n_groups > 1 ||
        !qr_cuda_norm_route_supported(dim, p->n_expert, p->n_used) || router->type != QR_TYPE_F32 ||
        router->ne[0] != dim || router->ne[1] != p->n_expert || (router_b && router_b->type != QR_TYPE_F32) ||
        (p->sel_bias && p->sel_bias->type != QR_TYPE_F32) || overlaps(x, n_rows * dim, y, n_rows * dim))
        return false;
    const float *wp = NULL, *br = NULL, *sb = NULL;
    if (w && !(wp = vec_weight(cb, w, dim, "add_rmsnorm_route"))) return true;
    if (router_b && !(br = vec_weight(cb, router_b, p->n_expert, "add_rmsnorm_route"))) return true;
    if (p->sel_bias && !(sb = vec_weight(cb, p->sel_bias, p->n_expert, "add_rmsnorm_route"))) return true;
    const cuda_weight *cr = prepared(cb, router, "add_rmsnorm_route");
    if (!cr) return true;
    act_ptrs a = {};
    const int kind = norm_codes(cb, next, x, y, n_rows, dim, "add_rmsnorm_route", &a);
    if (kind == -2) return true;
    if (!cuda_ok(cb, qr_cuda_norm_route(x, b, b_scale, wp, n_rows, dim, eps, y, kind, a.q, a.d, a.s, a.g, (const float *)cr->v.p0, br,
                                        p, sb, logits, ids, weights, use_pdl(cb), cb->stream),
                 "add_rmsnorm_route"))
        return true;
    cb->act_valid = false;
    if (kind >= 0) act_mark(cb, y, n_rows, dim, kind);
    cb->ids_unfenced = ids;
    return true;
}

/* The add_rmsnorm slot: the routed form where a->router is set (false: declined), the post-normed form (a->b_norm)
 * in one launch where the shape takes it (not in the exact mode: false, the model runs rmsnorm then this op), else
 * the plain one. */
static bool cuda_add_rmsnorm(qr_backend *be, const qr_add_rmsnorm_args *a) {
    cuda_backend *cb = CB_PEND(be);
    /* b is the pending split-K sum of the matmul just before (the FFN's down projection): added from the parts here */
    if (cb->pend_y && cb->pend_nw == 1 && a->b == cb->pend_y && !a->router && !a->b_norm && a->b_scale == 1.0f && cb->tune.fuse &&
        cb->pend_n == a->n_rows * a->dim && qr_cuda_post_norm_supported(a->dim) &&
        !overlaps(a->x, a->n_rows * a->dim, a->b, a->n_rows * a->dim) &&
        !overlaps(a->y, a->n_rows * a->dim, a->b, a->n_rows * a->dim) &&
        !overlaps(a->x, a->n_rows * a->dim, a->y, a->n_rows * a->dim)) {
        const int32_t splits = cb->pend_splits;
        cb->pend_y = NULL;
        add_rmsnorm(be, a->x, a->b, 1.0f, a->w, a->n_rows, a->dim, a->eps, a->y, a->next, NULL, splits);
        return true;
    }
    cb = CB(be);
    if (a->router)
        return add_rmsnorm_route(be, a->x, a->b, a->b_scale, a->w, a->n_rows, a->dim, a->eps, a->y, a->next, a->router,
                                 a->router_b, a->route, a->logits, a->ids, a->weights);
    const float *bw = NULL;
    if (a->b_norm) {
        if (cb->exact || !cb->tune.fuse || !cb->tune.post_norm || !qr_cuda_post_norm_supported(a->dim) ||
            overlaps(a->x, a->n_rows * a->dim, a->y, a->n_rows * a->dim) ||
            overlaps(a->b, a->n_rows * a->dim, a->y, a->n_rows * a->dim))
            return false;
        if (!(bw = vec_weight(cb, a->b_norm, a->dim, "add_rmsnorm"))) return true;
    }
    add_rmsnorm(be, a->x, a->b, a->b_scale, a->w, a->n_rows, a->dim, a->eps, a->y, a->next, bw);
    return true;
}

static void cuda_layernorm(qr_backend *be, const float *x, const qr_weight *w, const qr_weight *b, int64_t n_rows,
                           int64_t dim, float eps, float *y) {
    cuda_backend *cb = CB(be);
    const float *wp = NULL, *bp = NULL;
    if (w && !(wp = vec_weight(cb, w, dim, "layernorm"))) return;
    if (b && !(bp = vec_weight(cb, b, dim, "layernorm"))) return;
    cuda_ok(cb, qr_cuda_layernorm(x, wp, bp, n_rows, dim, eps, y, cb->stream), "layernorm");
}

/* YaRN: the dimension where the rotation has done n_rot turns over n_ctx_orig (the CPU's formula). */
static float yarn_corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
    return (float)n_dims * logf((float)n_ctx_orig / (n_rot * 2.0f * (float)M_PI)) / (2.0f * logf(base));
}

/* The kernel constants and device frequency factors of a rope call; false with an error raised. */
static bool rope_setup(cuda_backend *cb, int32_t head_dim, const qr_rope_params *p, cuda_rope_consts *c,
                       const float **ff) {
    if (head_dim > 4096) { /* n_rot and freq_factors: checked by backend_check.c */
        raise_error(cb, QR_ERR_INVALID_ARG, "rope: bad n_rot/head_dim/freq_factors");
        return false;
    }
    *ff = NULL;
    if (p->freq_factors) {
        const cuda_weight *cw = prepared(cb, p->freq_factors, "rope");
        if (!cw) return false;
        *ff = (const float *)cw->v.p0;
    }
    c->mode = p->mode;
    c->n_rot = p->n_rot;
    c->theta_scale = powf(p->freq_base, -2.0f / (float)p->n_rot);
    c->freq_scale = p->freq_scale;
    c->ext_factor = p->ext_factor;
    c->mscale = p->attn_factor == 0.0f ? 1.0f : p->attn_factor;
    c->corr0 = c->corr1 = 0.0f;
    if (p->ext_factor != 0.0f) {
        const float start = floorf(yarn_corr_dim(p->n_rot, p->n_ctx_orig, p->beta_fast, p->freq_base));
        const float end = ceilf(yarn_corr_dim(p->n_rot, p->n_ctx_orig, p->beta_slow, p->freq_base));
        c->corr0 = fmaxf(0.0f, start);
        c->corr1 = fminf((float)(p->n_rot - 1), end);
        c->mscale *= fmaf(0.1f, logf(1.0f / p->freq_scale), 1.0f); /* contracted as in ggml's x86 build */
    }
    return true;
}

static void cuda_rope(qr_backend *be, float *x, int32_t n_head, int32_t head_dim, const qr_rope_params *p) {
    cuda_backend *cb = CB(be);
    cuda_rope_consts c;
    const float *ff;
    if (!rope_setup(cb, head_dim, p, &c, &ff)) return;
    if (cb->exact) return cuda_exact_rope(cb, x, n_head, head_dim, p);
    cuda_ok(cb, qr_cuda_rope(x, cb->n_tokens, n_head, head_dim, cb->d_pos, &c, ff, cb->stream), "rope");
}

/* kv_store's check that this backend made kv (the layer and the slots: backend_check.c); false with an error
 * raised. */
static bool kv_store_ok(cuda_backend *cb, qr_kv_storage *kv, int32_t layer, const char *op) {
    (void)layer;
    return kv_valid(cb, kv, op);
}

static void cuda_kv_store(qr_backend *be, qr_kv_storage *kv, int32_t layer, const float *k, const float *v) {
    cuda_backend *cb = CB(be);
    if (!kv_store_ok(cb, kv, layer, "kv_store")) return;
    const qr_kv_desc *d = &kv->desc;
    const int32_t kvq = kv_kvq(d->type_k);
    if (kvq) { /* rotated, then quantized as the CPU stores it (kv_quant.cu) */
        if (cuda_ok(cb, qr_cuda_kvq_store(k, cb->n_tokens, d->k_dim, d->rot_k, cb->d_kv_slot, d->block_size,
                                          kv->k + (size_t)layer * kv->k_layer, kvq, cb->stream),
                    "kv_store"))
            cuda_ok(cb, qr_cuda_kvq_store(v, cb->n_tokens, d->v_dim, d->rot_v, cb->d_kv_slot, d->block_size,
                                          kv->v + (size_t)layer * kv->v_layer, kvq, cb->stream),
                    "kv_store");
        return;
    }
    cuda_ok(cb, qr_cuda_kv_store(k, v, cb->n_tokens, d->k_dim, d->v_dim, cb->d_kv_slot, kv->k + (size_t)layer * kv->k_layer,
                                 kv->v + (size_t)layer * kv->v_layer, d->type_k == QR_TYPE_F16, cb->stream),
            "kv_store");
}

/* rope(q), rope(k), kv_store; q_scale != 1 (only where rope_scaled_ok): then q *= q_scale in the same launch. */
static void rope_kv_store(qr_backend *be, float *q, float *k, const float *v, int32_t n_head, int32_t n_head_kv,
                          int32_t head_dim, const qr_rope_params *p, qr_kv_storage *kv, int32_t layer, float q_scale,
                          const float *qn = NULL, const float *kn = NULL, float eps = 0.0f) {
    cuda_backend *cb = CB_PEND(be);
    /* q / k / v still the split-K parts of the matmul_multi just before (pend_nw 3): the (row, head) kernel adds them */
    const float *part = NULL;
    int32_t splits = 0;
    int64_t stride = 0;
    if (cb->pend_y && cb->pend_nw == 3 && cb->pend_ys[0] == q && cb->pend_ys[1] == k && cb->pend_ys[2] == v && kv &&
        !kv_kvq(kv->desc.type_k) && cb->tune.fuse && !cb->exact && !qn && !kn && cb->pend_rows == cb->n_tokens &&
        (cb->n_tokens <= 8 || cb->n_tokens <= cb->tune.rope_heads_rows) && p->n_rot / 2 <= 256 &&
        n_head + n_head_kv < 60000 && cb->pend_nout[0] == (int64_t)n_head * head_dim &&
        cb->pend_nout[1] == (int64_t)n_head_kv * head_dim && cb->pend_nout[2] == kv->desc.v_dim) {
        part = (const float *)cb->dq_part;
        splits = cb->pend_splits;
        stride = cb->pend_n;
        cb->pend_y = NULL;
    }
    cb = CB(be); /* anything else pending: written first */
    cuda_rope_consts c;
    const float *ff;
    if (kv && kv_kvq(kv->desc.type_k) && cb->tune.fuse && !cb->exact && rope_setup(cb, head_dim, p, &c, &ff)) {
        /* a quantized cache: rope + rotation + quantization in one launch for decode passes (the kernel declines
         * the rest), else the steps below */
        if (!kv_store_ok(cb, kv, layer, "rope_kv_store")) return;
        const qr_kv_desc *d = &kv->desc;
        const cudaError_t e = qr_cuda_rope_kvq_store(q, k, v, cb->n_tokens, n_head, n_head_kv, head_dim, d->v_dim,
                                                     cb->d_pos, cb->d_kv_slot, &c, ff, kv->k + (size_t)layer * kv->k_layer,
                                                     kv->v + (size_t)layer * kv->v_layer, d->block_size,
                                                     kv_kvq(d->type_k), d->rot_k, d->rot_v, use_pdl(cb), cb->stream);
        if (e != cudaErrorNotSupported) {
            cuda_ok(cb, e, "rope_kv_store");
            return;
        }
    }
    if (!cb->tune.fuse || (kv && kv_kvq(kv->desc.type_k))) {
        cuda_rope(be, q, n_head, head_dim, p);
        cuda_rope(be, k, n_head_kv, head_dim, p);
        cuda_kv_store(be, kv, layer, k, v);
        return;
    }
    if (!rope_setup(cb, head_dim, p, &c, &ff) || !kv_store_ok(cb, kv, layer, "rope_kv_store")) return;
    const qr_kv_desc *d = &kv->desc; /* the k heads against it: checked by backend_check.c */
    cuda_ok(cb,
            qr_cuda_rope_kv_store(q, k, v, cb->n_tokens, n_head, n_head_kv, head_dim, d->v_dim, cb->d_pos,
                                  cb->d_kv_slot, &c, ff, kv->k + (size_t)layer * kv->k_layer,
                                  kv->v + (size_t)layer * kv->v_layer, d->type_k == QR_TYPE_F16, q_scale, qn, kn, eps,
                                  cb->tune.rope_heads_rows, part, splits, stride, use_pdl(cb), cb->stream),
            "rope_kv_store");
}

/* Whether rope_kv_store can scale q in its launch: the fused form over an f16 / f32 cache (not the exact mode). */
static bool rope_scaled_ok(const cuda_backend *cb, const qr_kv_storage *kv) {
    return kv && cb->tune.fuse && !cb->exact && !kv_kvq(kv->desc.type_k);
}

/* attention's check that this backend made kv (the head layout against it, up to caps.max_head_dim =
 * QR_CUDA_MAX_HEAD_DIM: backend_check.c); false with an error raised. */
static bool attn_layout_ok(cuda_backend *cb, const qr_kv_storage *kv, int32_t layer, const qr_attn_params *p) {
    (void)layer, (void)p;
    return kv_valid(cb, kv, "attention");
}

/* Checks every row's key span in the block table (a row ends at last[r] when last is given, else at its
 * position); returns the longest span, or 0 with an error raised. */
static int32_t attn_max_span(cuda_backend *cb, const qr_kv_storage *kv, const qr_attn_params *p, const int32_t *last) {
    const qr_kv_desc *d = &kv->desc;
    int32_t max_span = 1;
    for (int32_t r = 0; r < cb->n_tokens; r++) {
        const int32_t *bt = cb->h_block_table + (int64_t)cb->h_seq[r] * cb->max_blocks;
        const int32_t pos = last ? last[r] : cb->h_pos[r], last_blk = pos / d->block_size;
        if (last_blk >= cb->max_blocks) {
            raise_error(cb, QR_ERR_INVALID_ARG, "attention: position beyond the block table");
            return 0;
        }
        const int32_t first = p->window > 0 && pos - p->window + 1 > 0 ? pos - p->window + 1 : 0;
        for (int32_t b = first / d->block_size; b <= last_blk; b++) {
            if (bt[b] < 0 || bt[b] >= d->n_blocks) {
                raise_error(cb, QR_ERR_INVALID_ARG, "attention: block table entry missing or out of range");
                return 0;
            }
        }
        if (pos - first + 1 > max_span) max_span = pos - first + 1;
    }
    return max_span;
}

/* The kernel arguments every attention path shares (rows ending at their positions); false with an error
 * raised. */
static bool attn_args(cuda_backend *cb, qr_kv_storage *kv, int32_t layer, const float *q, const qr_attn_params *p,
                      float *out, cuda_attn_args *ap) {
    const qr_kv_desc *d = &kv->desc;
    cuda_attn_args a;
    a.q = q;
    a.k_cache = kv->k + (size_t)layer * kv->k_layer;
    a.v_cache = kv->v + (size_t)layer * kv->v_layer;
    a.f16 = d->type_k == QR_TYPE_F16;
    a.kvq = kv_kvq(d->type_k);
    a.rot_k = d->rot_k, a.rot_v = d->rot_v;
    a.pos = cb->d_pos;
    a.seq = cb->d_seq;
    a.block_table = cb->d_block_table;
    a.max_blocks = cb->max_blocks;
    a.block_size = d->block_size;
    a.n_tok = cb->n_tokens;
    a.n_head = p->n_head;
    a.n_head_kv = p->n_head_kv;
    a.dk = p->head_dim_k;
    a.dv = p->head_dim_v;
    a.scale = p->scale;
    a.softcap = p->softcap;
    a.window = p->window;
    a.n_splits = 1;
    a.stats = a.partial = NULL;
    a.out = out;
    a.sinks = NULL;
    a.q8_kind = -1;
    a.cluster = 0;
    a.dbg = cb->tune.attn_dbg;
    a.q8 = NULL;
    a.q8d = a.q8s = NULL;
    a.q8g = NULL;
    if (p->sinks) {
        const cuda_weight *sw = prepared(cb, p->sinks, "attention sinks"); /* F32 [n_head]: backend_check.c */
        if (!sw) return false;
        a.sinks = (const float *)sw->v.p0;
    }
    *ap = a;
    return true;
}

/* Has a kernel that computes gq query heads a CTA also quantize its output for p->next (the output
 * projection) into the activation scratch, when the mat-vec can reuse it; false with an error raised. */
static bool attn_q8_out(cuda_backend *cb, const qr_attn_params *p, float *out, int gq, cuda_attn_args *a) {
    const int group = p->n_head / p->n_head_kv;
    const int64_t width = (int64_t)a->n_head * a->dv;
    act_ptrs q8 = {};
    if (!p->next || !p->next->device || !cb->tune.fuse || !cb->tune.act_reuse || a->n_tok > cb->tune.mmvq_max_rows ||
        group % gq != 0 || cb->in_row_view)
        return true;
    const cuda_weight *cn = prepared(cb, p->next, "attention");
    if (!cn) return false;
    const int nk = qr_cuda_act_kind((qr_type)cn->v.type), bs = nk == 0 ? 32 : 256;
    if (nk <= 1 && cn->v.nb > 0 && cn->v.k == width && ((int64_t)gq * a->dv) % bs == 0 &&
        ((int64_t)group * a->dv) % bs == 0 && act_scratch(cb, nk, out, a->n_tok, width, &q8)) {
        a->q8_kind = nk;
        a->q8 = q8.q, a->q8d = q8.d, a->q8s = q8.s, a->q8g = q8.g;
    }
    return true;
}

/* A prompt batch whose heads the flash kernel does not take (MLA's 576 / 512, one cached head): per run of rows
 * of one sequence, its keys and values gathered into contiguous f16 rows, then S = q K^T (cuBLAS, f32), the masked
 * softmax into f16 probabilities and out = P V (cuBLAS), by chunks of rows whose scores fit 256 MiB. Outside graphs,
 * causal, no softcap or sinks, an f16 cache of one KV head. False (nothing done) where it does not apply; true after
 * an error was raised. QUARREL_CUDA_ATTN_GEMM=0: the two-pass kernel instead. */
static bool attn_gemm(cuda_backend *cb, cuda_attn_args *a) {
    if (!cb->tune.attn_gemm || cb->graph_mode || !a->f16 || a->kvq || a->n_head_kv != 1 || a->softcap != 0.0f ||
        a->sinks || a->n_tok < 16 || qr_cuda_attn_flash_supported(a) || a->dk % 8 || a->dv % 8 || !cb->cublas)
        return false;
    const int32_t H = a->n_head;
    const float one = 1.0f, zero = 0.0f;
    for (int32_t r0 = 0; r0 < a->n_tok;) { /* a run of rows of one sequence */
        const int32_t s = cb->h_seq[r0];
        int32_t r1 = r0, pmin = INT32_MAX, pmax = -1;
        for (; r1 < a->n_tok && cb->h_seq[r1] == s; r1++) {
            pmin = cb->h_pos[r1] < pmin ? cb->h_pos[r1] : pmin;
            pmax = cb->h_pos[r1] > pmax ? cb->h_pos[r1] : pmax;
        }
        const int32_t k0 = a->window > 0 && pmin - a->window + 1 > 0 ? pmin - a->window + 1 : 0, nk = pmax + 1 - k0;
        const size_t kv_bytes = ((size_t)nk * (size_t)(a->dk + a->dv) * 2 + 255) & ~(size_t)255;
        /* rows a chunk: q (f16), scores (f32) and probabilities (f16) within 256 MiB */
        const size_t per_row = (size_t)H * ((size_t)a->dk * 2 + (size_t)nk * 6 + 64);
        int64_t chunk = (int64_t)(((size_t)256 << 20) / per_row);
        if (chunk < 1) chunk = 1;
        if (chunk > r1 - r0) chunk = r1 - r0;
        const size_t qb = ((size_t)chunk * H * a->dk * 2 + 255) & ~(size_t)255,
                     sb = ((size_t)chunk * H * nk * 4 + 255) & ~(size_t)255;
        if (!ensure_scratch(cb, &cb->tile, &cb->tile_cap, kv_bytes + qb + sb + (size_t)chunk * H * nk * 2,
                            "attention (gemm)"))
            return true;
        uint8_t *base = (uint8_t *)cb->tile;
        void *kc = base, *vc = base + (size_t)nk * a->dk * 2, *qh = base + kv_bytes, *sc = base + kv_bytes + qb,
             *pr = base + kv_bytes + qb + sb;
        if (!cuda_ok(cb, qr_cuda_attn_gather(a, s, k0, nk, kc, vc, cb->stream), "attention (gather)")) return true;
        for (int64_t c0 = r0; c0 < r1; c0 += chunk) {
            const int64_t c1 = c0 + chunk < r1 ? c0 + chunk : r1, ch = (c1 - c0) * H;
            if (!cuda_ok(cb, qr_cuda_to_half(a->q + c0 * H * a->dk, ch * a->dk, qh, false, cb->stream), "attention (q)") ||
                !cublas_ok(cb, cublasGemmEx(cb->cublas, CUBLAS_OP_T, CUBLAS_OP_N, nk, (int)ch, a->dk, &one, kc, CUDA_R_16F,
                                            a->dk, qh, CUDA_R_16F, a->dk, &zero, sc, CUDA_R_32F, nk, CUBLAS_COMPUTE_32F,
                                            CUBLAS_GEMM_DEFAULT),
                           "attention (scores)") ||
                !cuda_ok(cb, qr_cuda_attn_softmax((const float *)sc, ch, H, nk, k0, a->pos + c0, a->scale, a->window, pr,
                                                  cb->stream),
                         "attention (softmax)") ||
                !cublas_ok(cb, cublasGemmEx(cb->cublas, CUBLAS_OP_N, CUBLAS_OP_N, a->dv, (int)ch, nk, &one, vc, CUDA_R_16F,
                                            a->dv, pr, CUDA_R_16F, nk, &zero, a->out + c0 * H * a->dv, CUDA_R_32F, a->dv,
                                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                           "attention (values)"))
                return true;
        }
        r0 = r1;
    }
    return true;
}

/* The first conditions of attn_flash (what it decides without looking at the rows' sequences). */
static bool attn_flash_wanted(const cuda_backend *cb, const cuda_attn_args *a) {
    return cb->tune.attn_flash && !cb->graph_mode && !cb->dec_view && a->n_tok > cb->tune.attn_decode_max_rows &&
           qr_cuda_attn_flash_supported(a);
}

/* The tensor-core flash attention (attention_flash.cu) for a prompt-like pass: more rows than a decode pass,
 * runs of at least attn_flash_min_run rows a sequence on average, a layout the kernel takes, outside graphs.
 * max_span: the longest key span of a row. True when it ran (or raised an error); false to leave the pass to
 * the other kernels. */
static bool attn_flash(cuda_backend *cb, const cuda_attn_args *a, int32_t max_span) {
    if (!attn_flash_wanted(cb, a)) return false;
    int32_t n_runs = 0;
    for (int32_t r = 0; r < cb->n_tokens; r++) n_runs += r == 0 || cb->h_seq[r] != cb->h_seq[r - 1];
    if ((int64_t)n_runs * cb->tune.attn_flash_min_run > cb->n_tokens) return false;
    const int32_t group = a->n_head / a->n_head_kv, mt = cb->tune.attn_flash_mt, bm = qr_cuda_attn_flash_rows(a->dk, mt);
    if (cb->fa_gen != cb->plan_gen || cb->fa_group != group || cb->fa_rows != bm) { /* once per plan, for all layers */
        const int32_t n = qr_cuda_attn_flash_tiles(cb->h_seq, cb->n_tokens, group, bm, NULL, 0);
        if ((size_t)n > cb->h_fa_cap) {
            int32_t *h = (int32_t *)realloc(cb->h_fa_tiles, (size_t)n * 16);
            if (!h) {
                raise_error(cb, QR_ERR_NOMEM, "attention: out of memory");
                return true;
            }
            cb->h_fa_tiles = h;
            cb->h_fa_cap = (size_t)n;
        }
        qr_cuda_attn_flash_tiles(cb->h_seq, cb->n_tokens, group, bm, cb->h_fa_tiles, n);
        /* pageable source: the copy has read it when cudaMemcpyAsync returns */
        if (!ensure_scratch(cb, &cb->fa_tiles, &cb->fa_tiles_cap, (size_t)n * 16, "attention tiles") ||
            !cuda_ok(cb, cudaMemcpyAsync(cb->fa_tiles, cb->h_fa_tiles, (size_t)n * 16, cudaMemcpyHostToDevice, cb->stream),
                     "attention tiles"))
            return true;
        cb->fa_gen = cb->plan_gen, cb->fa_group = group, cb->fa_rows = bm, cb->fa_n = n;
    }
    /* key splits: the count whose waves of CTAs (two an SM resident) finish the work soonest, fewest on a tie
     * (each split costs its share of the partial outputs); each split at least 4 blocks of 64 keys */
    int64_t ns = cb->tune.attn_flash_splits;
    if (ns <= 0) {
        const int64_t ctas = (int64_t)cb->fa_n * a->n_head_kv, slots = 2 * (int64_t)cb->n_sm;
        int64_t by_len = max_span / 256;
        if (by_len > 16) by_len = 16;
        double best = 0;
        ns = 1;
        for (int64_t k = 1; k <= by_len || k == 1; k++) {
            const double t = (double)((ctas * k + slots - 1) / slots) / (double)k; /* waves per unit of work */
            if (k == 1 || t < best - 1e-9) best = t, ns = k;
        }
    }
    float *part = NULL;
    if (ns > 1) {
        if (!ensure_scratch(cb, &cb->attn, &cb->attn_cap, qr_cuda_attn_flash_part_bytes(a, (int32_t)ns), "attention scratch"))
            return true;
        part = (float *)cb->attn;
    }
    cuda_ok(cb, qr_cuda_attention_flash(a, mt, cb->tune.attn_flash_stages, (const int32_t *)cb->fa_tiles, cb->fa_n,
                                        (int32_t)ns, part, cb->stream),
            "attention (flash)");
    return true;
}

/* The decode kernels' per-tile split counters for `tiles` tiles (zeroed once; every launch leaves them zero); false
 * with an error raised. */
static bool attn_counters(cuda_backend *cb, size_t tiles) {
    if (tiles <= cb->attn_cnt_cap) return true;
    if (cb->capturing) {
        raise_error(cb, QR_ERR_INTERNAL, "attention counters must grow during graph capture");
        return false;
    }
    const size_t cap = (tiles + 1023) & ~(size_t)1023;
    cudaStreamSynchronize(cb->stream);
    cudaFree(cb->attn_cnt);
    cb->attn_cnt = NULL;
    cb->attn_cnt_cap = 0;
    cb->scratch_gen++;
    if (!cuda_ok(cb, cudaMalloc((void **)&cb->attn_cnt, cap * sizeof(unsigned int)), "attention counters") ||
        !cuda_ok(cb, cudaMemsetAsync(cb->attn_cnt, 0, cap * sizeof(unsigned int), cb->stream), "attention counters"))
        return false;
    cb->attn_cnt_cap = cap;
    return true;
}

/* Attention over a quantized cache (kv_quant.cu): for prompt-like passes the flash kernel (q rotated as the cache's K
 * into scratch first, its output rotated back after), for the rest (graphs included) the quantized-cache decode
 * kernel, which rotates both itself. */
static void attention_kvq(cuda_backend *cb, const qr_kv_storage *kv, const qr_attn_params *p, cuda_attn_args *a,
                          int32_t max_span) {
    const qr_kv_desc *d = &kv->desc;
    if (!qr_cuda_attn_kvq_supported(a)) {
        raise_error(cb, QR_ERR_UNSUPPORTED,
                    "attention: the CUDA backend's %s KV cache takes head sizes 64, 128 and 256 (K and V alike), not %d / %d",
                    qr_type_name(d->type_k), a->dk, a->dv);
        return;
    }
    const int64_t rows = (int64_t)a->n_tok * a->n_head;
    if (attn_flash_wanted(cb, a)) { /* the flash kernel takes q rotated and leaves its output rotated */
        cuda_attn_args af = *a;
        if (d->rot_k) {
            if (!ensure_scratch(cb, &cb->kvq_q, &cb->kvq_q_cap, (size_t)rows * (size_t)a->dk * 4, "attention q") ||
                !cuda_ok(cb, qr_cuda_fwht(a->q, (float *)cb->kvq_q, rows, a->dk, d->rot_k, cb->stream), "attention q"))
                return;
            af.q = (const float *)cb->kvq_q;
        }
        if (attn_flash(cb, &af, max_span)) {
            if (d->rot_v && cb->error == QR_OK)
                cuda_ok(cb, qr_cuda_fwht(a->out, a->out, rows, a->dv, d->rot_v, cb->stream), "attention output");
            return;
        }
    }
    {
        /* key splits: one wave of CTAs (QR_CUDA_KVQ_CTAS an SM), at least 64 keys a split of the span (in a graph: of
         * every key the block table can address; empty splits are harmless) */
        const int group = a->n_head / a->n_head_kv, G = a->dk == 256 || group <= 4 ? 4 : 8;
        const int64_t base = (int64_t)a->n_tok * a->n_head_kv * ((group + G - 1) / G);
        const int64_t span = cb->graph_mode ? (int64_t)cb->cap_blocks * d->block_size : max_span;
        int64_t ns = cb->tune.attn_splits;
        if (ns <= 0) {
            ns = (int64_t)QR_CUDA_KVQ_CTAS(a->dk, G) * cb->n_sm / base;
            if (ns > (span + 63) / 64) ns = (span + 63) / 64;
        }
        if (ns > 256) ns = 256;
        if (ns < 1) ns = 1;
        a->n_splits = (int32_t)ns;
        const size_t n_rh = (size_t)rows * (size_t)ns;
        const size_t stats_bytes = (n_rh * 2 * 4 + 255) & ~(size_t)255, part_bytes = ns > 1 ? n_rh * (size_t)a->dv * 4 : 0;
        if (!ensure_scratch(cb, &cb->attn, &cb->attn_cap, stats_bytes + part_bytes, "attention scratch") ||
            (ns > 1 && !attn_counters(cb, (size_t)qr_cuda_attn_decode_tiles(a))))
            return;
        a->stats = (float *)cb->attn;
        a->partial = ns > 1 ? (float *)((uint8_t *)cb->attn + stats_bytes) : NULL;
        /* the tile's last CTA can also quantize the output for the output projection (p->next) */
        if (!attn_q8_out(cb, p, a->out, group < G ? group : G, a) ||
            !cuda_ok(cb, qr_cuda_attention_kvq(a, cb->attn_cnt, use_pdl(cb), cb->stream), "attention (quantized cache)"))
            return;
        cb->act_valid = false;
        if (a->q8_kind >= 0) act_mark(cb, a->out, a->n_tok, (int64_t)a->n_head * a->dv, a->q8_kind);
    }
}

static void cuda_attention(qr_backend *be, qr_kv_storage *kv, int32_t layer, const float *q, const qr_attn_params *p,
                           float *out);

/* A row-exact pass's attention (the keys of every row stored): row by row with each row's one-row launch shapes. */
static void attention_rows(qr_backend *be, qr_kv_storage *kv, int32_t layer, const float *q, const qr_attn_params *p,
                           float *out) {
    cuda_backend *cb = CB(be);
    const int32_t n = cb->n_tokens, cap0 = cb->cap_blocks;
    const bool graph0 = cb->graph_mode;
    const int32_t *d_pos = cb->d_pos, *d_seq = cb->d_seq;
    int32_t *h_pos = cb->h_pos, *h_seq = cb->h_seq;
    const int64_t qw = (int64_t)p->n_head * p->head_dim_k, ow = (int64_t)p->n_head * p->head_dim_v;
    cb->in_row_view = true;
    cb->n_tokens = 1;
    for (int32_t r = 0; r < n && cb->error == QR_OK; r++) {
        cb->d_pos = d_pos + r, cb->d_seq = d_seq + r, cb->h_pos = h_pos + r, cb->h_seq = h_seq + r;
        cb->cap_blocks = cb->h_exact_blocks[r];
        cb->graph_mode = cb->exact_graph;
        cuda_attention(be, kv, layer, q + r * qw, p, out + r * ow);
    }
    cb->d_pos = d_pos, cb->d_seq = d_seq, cb->h_pos = h_pos, cb->h_seq = h_seq;
    cb->n_tokens = n;
    cb->cap_blocks = cap0;
    cb->graph_mode = graph0;
    cb->in_row_view = false;
    cb->act_valid = false;
}

static void cuda_attention(qr_backend *be, qr_kv_storage *kv, int32_t layer, const float *q, const qr_attn_params *p,
                           float *out);

/* A step whose leading rows are one a sequence (the scheduler's decode rows) and whose other rows are prompt chunks:
 * the leading rows as a batched decode pass of their own (the tensor-core decode kernel, where the whole step would
 * take the flash kernel's tiles of 64 rows for them, 4 used), the rest as a prompt pass. On by default
 * (QUARREL_CUDA_ATTN_SPLIT_MIXED=0: one pass; H200 lab 340 -> 151 us for 64 decode rows + a 256-row chunk, the mixed
 * load 2.06 -> 1.71-1.76x); outside graphs, f16 caches, causal passes. False: not taken. */
static bool attention_split_mixed(qr_backend *be, qr_kv_storage *kv, int32_t layer, const float *q,
                                  const qr_attn_params *p, float *out) {
    cuda_backend *cb = CB(be);
    const int32_t n = cb->n_tokens;
    if (!cb->tune.attn_split_mixed || cb->in_row_view || cb->graph_mode || cb->row_exact || cb->exact || cb->cfg_one_row ||
        p->non_causal || kv_kvq(kv->desc.type_k) || n < 2)
        return false;
    /* leading rows each of a sequence no other row has: with every sequence one run of rows (set_batch's seq_runs), the
     * rows before the first run of two or more */
    if (!cb->seq_runs) return false;
    int32_t n_dec = 0;
    while (n_dec < n && (n_dec + 1 == n || cb->h_seq[n_dec + 1] != cb->h_seq[n_dec])) n_dec++;
    if (n_dec <= cb->tune.attn_decode_max_rows || n_dec == n) return false;
    const int32_t *d_pos = cb->d_pos, *d_seq = cb->d_seq;
    int32_t *h_pos = cb->h_pos, *h_seq = cb->h_seq;
    const int64_t qw = (int64_t)p->n_head * p->head_dim_k, ow = (int64_t)p->n_head * p->head_dim_v;
    cb->in_row_view = true;
    cb->n_tokens = n_dec;
    cb->dec_view = true;
    cuda_attention(be, kv, layer, q, p, out);
    cb->dec_view = false;
    if (cb->error == QR_OK) {
        cb->n_tokens = n - n_dec;
        cb->d_pos = d_pos + n_dec, cb->d_seq = d_seq + n_dec, cb->h_pos = h_pos + n_dec, cb->h_seq = h_seq + n_dec;
        cuda_attention(be, kv, layer, q + n_dec * qw, p, out + n_dec * ow);
    }
    cb->d_pos = d_pos, cb->d_seq = d_seq, cb->h_pos = h_pos, cb->h_seq = h_seq;
    cb->n_tokens = n;
    cb->in_row_view = false;
    cb->act_valid = false;
    return true;
}

static void cuda_attention(qr_backend *be, qr_kv_storage *kv, int32_t layer, const float *q, const qr_attn_params *p,
                           float *out) {
    cuda_backend *cb = CB(be);
    if (attention_split_mixed(be, kv, layer, q, p, out)) return;
    if (cb->row_exact && !cb->in_row_view && !cb->cfg_one_row && cb->n_tokens > 1 && !cb->exact && !p->non_causal) {
        /* every row's one-row pass a graph replay of one table width: one launch with the shapes of a one-row pass
         * (the kernels split each row's keys by its own span and the split count), else row by row */
        bool same = cb->exact_graph && !kv_kvq(kv->desc.type_k);
        for (int32_t r = 1; r < cb->n_tokens && same; r++) same = cb->h_exact_blocks[r] == cb->h_exact_blocks[0];
        if (!same) return attention_rows(be, kv, layer, q, p, out);
        const int32_t cap0 = cb->cap_blocks;
        const bool graph0 = cb->graph_mode;
        cb->cap_blocks = cb->h_exact_blocks[0];
        cb->graph_mode = true;
        cb->cfg_one_row = true;
        cuda_attention(be, kv, layer, q, p, out);
        cb->cfg_one_row = false;
        cb->cap_blocks = cap0;
        cb->graph_mode = graph0;
        return;
    }
    if (!attn_layout_ok(cb, kv, layer, p)) return;
    const qr_kv_desc *d = &kv->desc;
    int32_t *last = NULL; /* non-causal: [n_tokens] the last position of each row's sequence in the pass */
    if (p->non_causal) {
        last = (int32_t *)malloc((size_t)cb->n_tokens * 4);
        if (!last) {
            raise_error(cb, QR_ERR_NOMEM, "attention: out of memory");
            return;
        }
        int32_t n_seq = 0;
        for (int32_t r = 0; r < cb->n_tokens; r++)
            if (cb->h_seq[r] + 1 > n_seq) n_seq = cb->h_seq[r] + 1;
        int32_t *seq_end = (int32_t *)calloc((size_t)n_seq, 4);
        if (!seq_end) {
            free(last);
            raise_error(cb, QR_ERR_NOMEM, "attention: out of memory");
            return;
        }
        for (int32_t r = 0; r < cb->n_tokens; r++)
            if (cb->h_pos[r] > seq_end[cb->h_seq[r]]) seq_end[cb->h_seq[r]] = cb->h_pos[r];
        for (int32_t r = 0; r < cb->n_tokens; r++) last[r] = seq_end[cb->h_seq[r]];
        free(seq_end);
    }
    const int32_t max_span = attn_max_span(cb, kv, p, last);
    cuda_attn_args a;
    if (max_span == 0 || !attn_args(cb, kv, layer, q, p, out, &a)) {
        free(last);
        return;
    }
    if (last) { /* the kernel reads a row's key range [first, pos[r]]: pass the sequence ends */
        const size_t bytes = (size_t)cb->n_tokens * 4;
        const bool ok = ensure_scratch(cb, &cb->tmp, &cb->tmp_cap, bytes, "non-causal attention") &&
                        cuda_ok(cb, cudaMemcpyAsync(cb->tmp, last, bytes, cudaMemcpyHostToDevice, cb->stream), "attention");
        cudaStreamSynchronize(cb->stream); /* `last` is pageable host memory freed below */
        free(last);
        if (!ok) return;
        a.pos = (const int32_t *)cb->tmp;
    }
    if (a.kvq) return attention_kvq(cb, kv, p, &a, max_span);
    if (cb->exact) /* in a graph, scores for every key the block table can address */
        return cuda_exact_attention(cb, &a, cb->graph_mode ? (int32_t)(cb->max_blocks * d->block_size) : max_span);
    if (attn_flash(cb, &a, max_span)) return;
    if (!p->non_causal && attn_gemm(cb, &a)) return;
    /* splits: about four CTAs per SM (the key loop is latency-bound; measured on H100, decode at
     * 4096 keys: 1 split 2242 us, 8: 302, 32: 94, 128: 72), each split at least 32 keys */
    const int dmax = a.dk > a.dv ? a.dk : a.dv, gmax = dmax <= 128 ? 8 : (dmax <= 256 ? 4 : 2);
    const int group = p->n_head / p->n_head_kv;
    const int64_t nt_cfg = cb->cfg_one_row ? 1 : a.n_tok; /* a row-exact pass: each row's one-row shapes */
    const int64_t base = nt_cfg * p->n_head_kv * ((group + gmax - 1) / gmax);
    int64_t ns = cb->tune.attn_splits;
    /* head shapes the decode kernels do not take (MLA's 576 / 512) run the two-pass kernel below at every row
     * count: its CTAs are (row, kv head, tile of GMAX heads), 8 for an MLA decode row, so it needs key splits even
     * on short spans (deepseek-v2-lite decode at 64 keys in a graph: 1 split 251 t/s, 8: 376, 16: 382, 32: 375) */
    const bool two_pass = !qr_cuda_attn_decode_supported(&a);
    /* a batched decode step on the tensor-core kernel (tune.attn_dec_mma): one key split, so only while every span a
     * row may have (in a graph: every key its block table reaches) is short enough that a CTA's walk (a 16-key chunk
     * a warp, K and V in one round trip) stays as short as the flash-decoding kernels' with their splits; longer
     * spans (a long prompt among the decode rows) keep those kernels */
    const int64_t span_cap = cb->graph_mode ? (int64_t)cb->cap_blocks * d->block_size : max_span;
    const bool dec_mma = cb->tune.attn_dec_mma && cb->tune.attn_kernel != 1 && nt_cfg > cb->tune.attn_decode_max_rows &&
                         a.f16 && a.dk == a.dv && (a.dk == 64 || a.dk == 128) && span_cap <= cb->tune.attn_dec_mma_max_keys;
    if (ns <= 0) {
        ns = ((int64_t)cb->tune.attn_ctas_per_sm * cb->n_sm + base - 1) / base;
        const int64_t by_len = (max_span + 31) / 32;
        if (ns > by_len && !cb->graph_mode) ns = by_len;
        if (max_span <= 256 && !cb->graph_mode && !two_pass) ns = 1; /* one CTA per tile: the fused kernel */
        /* a graph serves every length the block table can address: one split (the fused single-kernel
         * flash-decoding) while that is <= 1024 keys, else at least 64 keys per split; the two-pass kernel: 16
         * splits, more from 4096 keys on (at least 256 keys per split) */
        const int64_t cap = (int64_t)cb->cap_blocks * d->block_size;
        const int64_t by_cap = two_pass ? (cap / 256 > 16 ? cap / 256 : 16) : cap <= 1024 ? 1 : (cap + 63) / 64;
        if (ns > by_cap && cb->graph_mode) ns = by_cap;
        if (dec_mma && base >= 2 * (int64_t)cb->n_sm) ns = 1; /* the tensor-core decode kernel: one split */
    }
    /* a graph replays one split count at every length: empty splits are harmless (max -inf, sum 0) */
    if (ns > max_span && !cb->graph_mode) ns = max_span;
    if (ns > 256) ns = 256;
    if (ns < 1) ns = 1;
    a.n_splits = (int32_t)ns;
    const size_t n_rh = (size_t)a.n_tok * (size_t)a.n_head * (size_t)ns;
    const size_t stats_bytes = (n_rh * 2 * 4 + 255) & ~(size_t)255, part_bytes = ns > 1 ? n_rh * (size_t)a.dv * 4 : 0;
    /* the flash-decoding kernel (attention_decode.cu) for decode passes, and for longer passes while
     * its score rows stay small (prefill of a short context; measured to be the faster kernel there
     * too is still to do on the device). Its scratch holds a score per (row, head, key): in a graph
     * every key the block table can address (a size fixed per batch shape), else the longest span. */
    const int64_t score_stride = cb->graph_mode ? (int64_t)cb->cap_blocks * d->block_size : (int64_t)max_span;
    const size_t score_need = (size_t)a.n_tok * (size_t)a.n_head * (size_t)score_stride * 4;
    /* the tensor-core kernel needs no score scratch */
    const bool mma_step = dec_mma && a.n_splits == 1 && qr_cuda_attn_decode_mma_supported(&a);
    const bool decode = mma_step || (cb->tune.attn_kernel != 1 && qr_cuda_attn_decode_supported(&a) &&
                        (nt_cfg <= cb->tune.attn_decode_max_rows ||
                         (cb->tune.attn_kernel == 0 && score_need <= ((size_t)512 << 20))));
    /* the cluster kernel (no scratch) for the spans it takes: every key the block table can address in
     * a graph, the longest span else */
    const int cl_ns = decode && cb->tune.attn_cluster && cb->has_pdl /* sm_90+ */ &&
                              nt_cfg <= cb->tune.attn_decode_max_rows /* decode passes: prefill rows keep the split kernels */
                          ? qr_cuda_attn_cluster_splits(cb->graph_mode ? (int64_t)cb->cap_blocks * d->block_size : max_span,
                                                        cb->tune.attn_splits, cb->tune.attn_cl_keys)
                          : 0;
    a.cluster = cl_ns > 0;
    if (a.cluster) a.n_splits = cl_ns;
    const size_t score_bytes = decode && !mma_step ? score_need : 0;
    const size_t part_bytes_al = (part_bytes + 255) & ~(size_t)255;
    if (!ensure_scratch(cb, &cb->attn, &cb->attn_cap, stats_bytes + part_bytes_al + score_bytes, "attention scratch"))
        return;
    a.stats = (float *)cb->attn;
    a.partial = ns > 1 ? (float *)((uint8_t *)cb->attn + stats_bytes) : NULL;
    if (decode && score_stride <= INT32_MAX) {
        float *scores = (float *)((uint8_t *)cb->attn + stats_bytes + part_bytes_al);
        if (!attn_counters(cb, (size_t)qr_cuda_attn_decode_tiles(&a))) return;
        /* one split: the fused kernel can also quantize its output for the output projection (p->next) */
        const int gq = group < gmax ? group : gmax;
        if ((ns == 1 || a.cluster) && !attn_q8_out(cb, p, out, gq, &a)) return;
        if (mma_step) {
            if (!cuda_ok(cb, qr_cuda_attention_decode_mma(&a, use_pdl(cb), cb->stream), "attention (decode, mma)")) return;
        } else if (!cuda_ok(cb, qr_cuda_attention_decode(&a, scores, (int32_t)score_stride, cb->attn_cnt, use_pdl(cb),
                                                         cb->stream),
                            "attention (decode)"))
            return;
        cb->act_valid = false;
        if (a.q8_kind >= 0) act_mark(cb, out, a.n_tok, (int64_t)a.n_head * a.dv, a.q8_kind);
        return;
    }
    cuda_ok(cb, qr_cuda_attention(&a, cb->stream), "attention");
}

/* Whether rope_attention below would take the pass (its tests, without raising or launching). */
static bool short_takes(cuda_backend *cb, const qr_attn_params *p, const qr_kv_storage *kv) {
    if (cb->exact || !cb->tune.fuse || !cb->tune.attn_short || cb->n_tokens != 1 || p->non_causal || !kv ||
        kv->desc.type_k != QR_TYPE_F16 || p->head_dim_k != p->head_dim_v || p->n_head_kv < 1 || p->n_head % p->n_head_kv)
        return false;
    const int64_t kmax = qr_cuda_attn_short_keys(p->head_dim_k), addressable = (int64_t)cb->cap_blocks * kv->desc.block_size;
    if (kmax == 0 || (cb->graph_mode && addressable > kmax && (p->window <= 0 || p->window > kmax))) return false;
    if (cb->graph_mode) return true;
    const int32_t pos = cb->h_pos[0], first = p->window > 0 && pos - p->window + 1 > 0 ? pos - p->window + 1 : 0;
    return pos - first + 1 <= kmax;
}

/* rope + K/V store + attention as one launch (attention_short.cu) for a one-row decode pass whose every span
 * fits the kernel: in a graph every key the block table can address (or the window), else the row's span.
 * Declines (false) before raising anything (the layout and table checks raise only what attention would); after
 * true an error may have been raised. */
static bool rope_attention(qr_backend *be, float *q, float *k, const float *v, const qr_rope_params *rope,
                           qr_kv_storage *kv, int32_t layer, const qr_attn_params *p, float q_scale, float *out,
                           const float *qn = NULL, const float *kn = NULL, float eps = 0.0f) {
    cuda_backend *cb = CB(be);
    if (cb->exact || !cb->tune.fuse || !cb->tune.attn_short || cb->n_tokens != 1 || p->non_causal || !kv ||
        kv->desc.type_k != QR_TYPE_F16 || p->head_dim_k != p->head_dim_v || p->n_head_kv < 1 || p->n_head % p->n_head_kv)
        return false;
    const qr_kv_desc *d = &kv->desc;
    const int64_t kmax = qr_cuda_attn_short_keys(p->head_dim_k), addressable = (int64_t)cb->cap_blocks * d->block_size;
    const int group = p->n_head / p->n_head_kv;
    if (kmax == 0 ||
        (cb->graph_mode && addressable > kmax && (p->window <= 0 || p->window > kmax)))
        return false;
    /* the checks of attention itself (they raise what the plain ops would); outside a graph, the row's span */
    if (!attn_layout_ok(cb, kv, layer, p)) return true;
    const int32_t span = attn_max_span(cb, kv, p, NULL);
    if (span == 0) return true;
    if (!cb->graph_mode && span > kmax) return false;
    cuda_rope_consts c;
    const float *ff;
    if (!rope_setup(cb, p->head_dim_k, rope, &c, &ff) || !kv_store_ok(cb, kv, layer, "rope_attention")) return true;
    cuda_rope_attn_args r;
    const int gq = group < cb->tune.attn_short_g ? group : cb->tune.attn_short_g;
    if (!attn_args(cb, kv, layer, q, p, out, &r.a) || !attn_q8_out(cb, p, out, gq, &r.a)) return true;
    r.k_new = k;
    r.v_new = v;
    r.slot = cb->d_kv_slot;
    r.rope = c;
    r.ff = ff;
    r.kv_early = cb->capturing; /* a replay starts after every earlier pass has finished */
    r.gmax = cb->tune.attn_short_g;
    r.q_scale = q_scale;
    r.qn = qn;
    r.kn = kn;
    r.norm_eps = eps;
    if (!cuda_ok(cb, qr_cuda_rope_attention(&r, use_pdl(cb), cb->stream), "rope_attention")) return true;
    cb->act_valid = false;
    if (r.a.q8_kind >= 0) act_mark(cb, out, 1, (int64_t)p->n_head * p->head_dim_v, r.a.q8_kind);
    return true;
}

/* The mla_prep slot (deepseek2): one launch over an f16 / f32 cache with the fusions on (the exact mode has no
 * such op); a quantized cache declines (the model runs the plain ops). */
static bool cuda_mla_prep(qr_backend *be, const qr_mla_prep_args *a) {
    cuda_backend *cb = CB(be);
    qr_kv_storage *kv = a->kv;
    if (!cb->tune.fuse || !cb->tune.mla_prep || kv_kvq(kv->desc.type_k) || a->rope->n_rot != a->n_rot) return false;
    cuda_rope_consts c;
    const float *ff, *w;
    if (!kv_store_ok(cb, kv, a->layer, "mla_prep") || !rope_setup(cb, a->n_rot, a->rope, &c, &ff) ||
        !(w = vec_weight(cb, a->norm, a->kv_lora, "mla_prep")))
        return true;
    cuda_ok(cb,
            qr_cuda_mla_prep(a->kv_a, a->q, a->q_out, w, a->eps, cb->n_tokens, a->n_head, a->kv_lora, a->head_dim_q,
                             cb->d_pos, cb->d_kv_slot, &c, ff, kv->k + (size_t)a->layer * kv->k_layer,
                             kv->v + (size_t)a->layer * kv->v_layer, kv->desc.type_k == QR_TYPE_F16, use_pdl(cb),
                             cb->stream),
            "mla_prep");
    cb->act_valid = false;
    return true;
}

static bool cuda_rope_attention(qr_backend *be, const qr_rope_attn_args *a);
static void cuda_rmsnorm(qr_backend *be, const float *x, const qr_weight *w, int64_t n_rows, int64_t dim, float eps,
                         float *y);
static void cuda_scale(qr_backend *be, const float *x, float s, int64_t n, float *out);

/* A row-exact pass (cb->row_exact): rope + store + attention row after row, each as the row's one-row pass runs them
 * (its block-table width and graph mode for the launch shapes, the short kernel where that pass takes it, else the
 * plain ops in blocks.c's order): rows after row r see its keys, as in the one-row passes. */
static bool short_takes(cuda_backend *cb, const qr_attn_params *p, const qr_kv_storage *kv);

static bool rope_attention_rows(qr_backend *be, const qr_rope_attn_args *a) {
    cuda_backend *cb = CB(be);
    const qr_attn_params *p = a->attn;
    const int32_t n = cb->n_tokens, cap0 = cb->cap_blocks;
    if (!a->q_norm && !a->k_norm) { /* no row takes the one-launch kernel: the multi-row ops, attention row-exact */
        bool any = false;
        const bool g0 = cb->graph_mode;
        cb->n_tokens = 1;
        for (int32_t r = 0; r < n && !any; r++) {
            cb->cap_blocks = cb->h_exact_blocks[r];
            cb->graph_mode = cb->exact_graph;
            int32_t *hp = cb->h_pos, *hs = cb->h_seq;
            cb->h_pos = hp + r, cb->h_seq = hs + r;
            any = short_takes(cb, p, a->kv);
            cb->h_pos = hp, cb->h_seq = hs;
        }
        cb->n_tokens = n;
        cb->cap_blocks = cap0;
        cb->graph_mode = g0;
        if (!any) return false;
    }
    const bool graph0 = cb->graph_mode;
    const int32_t *d_pos = cb->d_pos, *d_seq = cb->d_seq, *d_slot = cb->d_kv_slot;
    int32_t *h_pos = cb->h_pos, *h_seq = cb->h_seq, *h_slot = cb->h_kv_slot;
    const int64_t qw = (int64_t)p->n_head * p->head_dim_k, kw = (int64_t)p->n_head_kv * p->head_dim_k,
                  vw = (int64_t)p->n_head_kv * p->head_dim_v, ow = (int64_t)p->n_head * p->head_dim_v;
    cb->in_row_view = true;
    cb->n_tokens = 1;
    for (int32_t r = 0; r < n && cb->error == QR_OK; r++) {
        cb->d_pos = d_pos + r, cb->d_seq = d_seq + r, cb->d_kv_slot = d_slot + r;
        cb->h_pos = h_pos + r, cb->h_seq = h_seq + r, cb->h_kv_slot = h_slot + r;
        cb->cap_blocks = cb->h_exact_blocks[r];
        cb->graph_mode = cb->exact_graph;
        qr_rope_attn_args ar = *a;
        ar.q = a->q + r * qw, ar.k = a->k + r * kw, ar.v = a->v + r * vw, ar.out = a->out + r * ow;
        if (cuda_rope_attention(be, &ar)) continue;
        /* declined: blocks.c's plain sequence for this row */
        if (ar.q_norm) {
            cuda_rmsnorm(be, ar.q, ar.q_norm, p->n_head, p->head_dim_k, ar.norm_eps, ar.q);
            cuda_rmsnorm(be, ar.k, ar.k_norm, p->n_head_kv, p->head_dim_k, ar.norm_eps, ar.k);
            ar.q_norm = ar.k_norm = NULL;
            if (cuda_rope_attention(be, &ar)) continue;
        }
        qr_rope_attn_args st = ar;
        st.out = NULL; /* rope + K/V store alone */
        cuda_rope_attention(be, &st);
        const float qs = ar.q_scale != 0.0f ? ar.q_scale : 1.0f;
        if (qs != 1.0f) cuda_scale(be, ar.q, qs, qw, ar.q);
        cuda_attention(be, ar.kv, ar.layer, ar.q, p, ar.out);
    }
    cb->d_pos = d_pos, cb->d_seq = d_seq, cb->d_kv_slot = d_slot;
    cb->h_pos = h_pos, cb->h_seq = h_seq, cb->h_kv_slot = h_slot;
    cb->n_tokens = n;
    cb->cap_blocks = cap0;
    cb->graph_mode = graph0;
    cb->in_row_view = false;
    cb->act_valid = false;
    return true;
}

/* The rope_attention slot: rope + K/V store alone where a->out is NULL (always taken), else with attention: the
 * one-launch kernel where it takes the pass, else, with a q scale, rope + store + scale in one launch before the
 * attention op (declined where that launch cannot scale: the model runs the plain ops). A row-exact pass takes the
 * slot row by row (rope_attention_rows). */
static bool cuda_rope_attention(qr_backend *be, const qr_rope_attn_args *a) {
    const qr_attn_params *p = a->attn;
    cuda_backend *cb = CB_PEND(be); /* q / k / v may be pending split-K sums: rope_kv_store takes them */
    if (a->out && cb->row_exact && !cb->in_row_view && cb->n_tokens > 1 && !cb->exact && a->kv && rope_attention_rows(be, a))
        return true;
    if (!a->out) {
        rope_kv_store(be, a->q, a->k, a->v, p->n_head, p->n_head_kv, p->head_dim_k, a->rope, a->kv, a->layer, 1.0f);
        return true;
    }
    const float qs = a->q_scale != 0.0f ? a->q_scale : 1.0f;
    if (a->q_norm || a->k_norm) { /* the per-head q / k norms inside the decode rope + store launch */
        cb = CB(be);               /* (a pending q / k written first: the norms' paths read them) */
        if (!a->q_norm || !a->k_norm || !cb->tune.qk_norm || !rope_scaled_ok(cb, a->kv) ||
            !qr_cuda_rope_qk_norm_supported(cb->n_tokens, p->n_head, p->n_head_kv, a->rope->n_rot))
            return false;
        const float *qn = vec_weight(cb, a->q_norm, p->head_dim_k, "rope_attention"),
                    *kn = qn ? vec_weight(cb, a->k_norm, p->head_dim_k, "rope_attention") : NULL;
        if (!kn) return true;
        /* the one-launch short kernel with the norms inside, else the norms in the rope + store launch */
        if (rope_attention(be, a->q, a->k, a->v, a->rope, a->kv, a->layer, p, qs, a->out, qn, kn, a->norm_eps))
            return true;
        rope_kv_store(be, a->q, a->k, a->v, p->n_head, p->n_head_kv, p->head_dim_k, a->rope, a->kv, a->layer, qs, qn, kn,
                      a->norm_eps);
        cuda_attention(be, a->kv, a->layer, a->q, p, a->out);
        return true;
    }
    /* the one-launch kernel takes one-row passes only; a pending sum (batches of 5+ rows) skips it unwritten */
    if ((!cb->pend_y || cb->n_tokens == 1) && rope_attention(be, a->q, a->k, a->v, a->rope, a->kv, a->layer, p, qs, a->out))
        return true;
    if (qs == 1.0f || !rope_scaled_ok(cb, a->kv)) return false; /* the model runs rope_attention without out next */
    rope_kv_store(be, a->q, a->k, a->v, p->n_head, p->n_head_kv, p->head_dim_k, a->rope, a->kv, a->layer, qs);
    cuda_attention(be, a->kv, a->layer, a->q, p, a->out);
    return true;
}

static void ew(qr_backend *be, cuda_ew_kind kind, const float *a, const float *b, float s, int64_t n, float *out,
               const char *what) {
    cuda_backend *cb = CB(be);
    cuda_ok(cb, qr_cuda_elementwise(kind, a, b, s, n, out, cb->stream), what);
}

static void cuda_swiglu(qr_backend *be, const float *g, const float *u, int64_t n, float *out) {
    ew(be, CUDA_EW_SWIGLU, g, u, 0.0f, n, out, "swiglu");
}
static void cuda_geglu(qr_backend *be, const float *g, const float *u, int64_t n, float *out) {
    if (CB(be)->exact) return cuda_exact_geglu(CB(be), g, u, n, out);
    ew(be, CUDA_EW_GEGLU, g, u, 0.0f, n, out, "geglu");
}
static void cuda_add(qr_backend *be, const float *a, const float *b, int64_t n, float *out) {
    ew(be, CUDA_EW_ADD, a, b, 0.0f, n, out, "add");
}
static void cuda_mul(qr_backend *be, const float *a, const float *b, int64_t n, float *out) {
    ew(be, CUDA_EW_MUL, a, b, 0.0f, n, out, "mul");
}
static void cuda_scale(qr_backend *be, const float *x, float s, int64_t n, float *out) {
    ew(be, CUDA_EW_SCALE, x, NULL, s, n, out, "scale");
}
static void cuda_softcap(qr_backend *be, const float *x, float cap, int64_t n, float *out) {
    if (CB(be)->exact) return cuda_exact_softcap(CB(be), x, cap, n, out);
    ew(be, CUDA_EW_SOFTCAP, x, NULL, cap, n, out, "softcap");
}

void cuda_copy_rows(qr_backend *be, const float *src, int64_t src_stride, float *dst, int64_t dst_stride,
                    int64_t n_rows, int64_t width) {
    cuda_backend *cb = CB(be);
    if (n_rows <= 0 || width <= 0) return;
    const char *s0 = (const char *)src, *s1 = (const char *)(src + (n_rows - 1) * src_stride + width);
    const char *d0 = (const char *)dst, *d1 = (const char *)(dst + (n_rows - 1) * dst_stride + width);
    if ((d0 < s1 && s0 < d1) || n_rows > 0x7fffffff || width > (int64_t)65535 * 1024) { /* overlapping spans (rows may interleave): the copy engine */
        cuda_ok(cb, cudaMemcpy2DAsync(dst, (size_t)dst_stride * 4, src, (size_t)src_stride * 4, (size_t)width * 4,
                                      (size_t)n_rows, cudaMemcpyDeviceToDevice, cb->stream), "copy_rows");
        return;
    }
    cuda_ok(cb, qr_cuda_copy_rows(src, src_stride, dst, dst_stride, n_rows, width, use_pdl(cb), cb->stream), "copy_rows");
}

static void cuda_softmax(qr_backend *be, const float *x, int64_t n_rows, int64_t dim, float *out) {
    cuda_backend *cb = CB(be);
    cuda_ok(cb, qr_cuda_softmax(x, n_rows, dim, out, cb->stream), "softmax");
}

static void cuda_copy(qr_backend *be, const float *src, int64_t n, float *dst) {
    cuda_backend *cb = CB(be);
    if (n <= 0 || src == dst) return;
    const size_t bytes = (size_t)n * 4;
    const char *s = (const char *)src, *d = (const char *)dst;
    if (d < s + bytes && s < d + bytes) { /* overlapping: through scratch */
        if (!ensure_scratch(cb, &cb->tmp, &cb->tmp_cap, bytes, "copy")) return;
        if (cuda_ok(cb, cudaMemcpyAsync(cb->tmp, src, bytes, cudaMemcpyDeviceToDevice, cb->stream), "copy"))
            cuda_ok(cb, cudaMemcpyAsync(dst, cb->tmp, bytes, cudaMemcpyDeviceToDevice, cb->stream), "copy");
        return;
    }
    if (n <= (int64_t)65535 * 1024) /* a kernel (qr_cuda_copy_rows): no memcpy node in a decode graph */
        cuda_ok(cb, qr_cuda_copy_rows(src, n, dst, n, 1, n, use_pdl(cb), cb->stream), "copy");
    else cuda_ok(cb, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cb->stream), "copy");
}

static void cuda_add_row(qr_backend *be, const float *x, const qr_weight *table, int64_t row, int64_t n_rows,
                         float *out) {
    cuda_backend *cb = CB(be);
    const cuda_weight *cw = prepared(cb, table, "add_row");
    if (!cw) return;
    if (cw->v.type != QR_TYPE_F32 && cw->v.type != QR_TYPE_F16) {
        raise_error(cb, QR_ERR_UNSUPPORTED, "add_row: table %s must be F32 or F16", table->name ? table->name : "?");
        return;
    } /* row and positions: checked by backend_check.c */
    cuda_ok(cb, qr_cuda_add_row(x, &cw->v, row, cb->d_pos, n_rows, out, cb->stream), "add_row");
}

/* Records an op error (the argument checks' slot). */
static void cuda_raise(qr_backend *be, qr_status st, const char *msg) { raise_error(CB(be), st, "%s", msg); }

/* Free and total memory of this backend's GPU. */
static bool cuda_mem_info(qr_backend *be, size_t *free_bytes, size_t *total_bytes) {
    return qr_cuda_mem_info(CB(be)->device, free_bytes, total_bytes);
}

/* What the CUDA backend can do: device memory, its fusions unless exact, and a matmul for every weight type
 * weight_prepare takes (those with a plane layout). */
static qr_backend_caps cuda_caps(const cuda_backend *cb) {
    const bool exact = cb->exact;
    qr_backend_caps c;
    memset(&c, 0, sizeof c);
    c.host_memory = false;
    c.exact = exact;
    c.row_exact_rows = exact ? 0 : cb->tune.mmvq_max_rows; /* the mat-vec's rows: row_exact passes stay on it */
    c.max_head_dim = QR_CUDA_MAX_HEAD_DIM;
    c.kv_types = QR_TYPE_BIT(QR_TYPE_F16) | QR_TYPE_BIT(QR_TYPE_F32) | QR_TYPE_BIT(QR_TYPE_Q8_0) | QR_TYPE_BIT(QR_TYPE_Q4_0);
    for (int t = 0; t < QR_TYPE_COUNT; t++)
        if (qr_cuda_plane_desc((qr_type)t).n_planes > 0) c.matmul_types |= QR_TYPE_BIT(t);
    return c;
}

static_assert(offsetof(struct qr_kv_storage, desc) == 0, "KV storage begins with its layout (backend.h)");

/* The op table, filled by name: ops added to qr_backend_ops later stay NULL (not implemented on CUDA)
 * until this backend gets them. */
static qr_backend_ops make_cuda_ops(void) {
    qr_backend_ops o;
    memset(&o, 0, sizeof o);
    o.destroy = cuda_destroy;
    o.alloc = cuda_alloc;
    o.free = cuda_free_mem;
    o.write = cuda_write;
    o.read = cuda_read;
    o.read_rows = cuda_read_rows;
    o.topk_rows = cuda_topk_rows;
    o.host_alloc = cuda_host_alloc;
    o.host_free = cuda_host_free;
    o.synchronize = cuda_synchronize;
    o.weight_prepare = cuda_weight_prepare;
    o.weight_release = cuda_weight_release;
    o.last_error = cuda_last_error;
    o.set_n_threads = cuda_set_n_threads;
    o.raise = cuda_raise;
    o.mem_info = cuda_mem_info;
    o.kv_alloc = cuda_kv_alloc;
    o.kv_free = cuda_kv_free;
    o.kv_copy_block = cuda_kv_copy_block;
    o.set_batch = cuda_set_batch;
    o.get_rows = cuda_get_rows;
    o.gather_outputs = cuda_gather_outputs;
    o.matmul = cuda_matmul_op;
    o.rmsnorm = cuda_rmsnorm;
    o.layernorm = cuda_layernorm;
    o.rope = cuda_rope;
    o.kv_store = cuda_kv_store;
    o.attention = cuda_attention;
    o.swiglu = cuda_swiglu;
    o.geglu = cuda_geglu;
    o.add = cuda_add;
    o.mul = cuda_mul;
    o.scale = cuda_scale;
    o.softcap = cuda_softcap;
    o.softmax = cuda_softmax;
    o.copy = cuda_copy;
    o.copy_rows = cuda_copy_rows;
    o.matmul_heads = cuda_matmul_heads;
    o.add_row = cuda_add_row;
    o.run_graph = cuda_run_graph;
    o.graph_release = cuda_graph_release;
    o.add_rmsnorm = cuda_add_rmsnorm;
    o.matmul_multi = cuda_matmul_multi;
    o.matmul_glu = cuda_matmul_glu;
    o.matmul_act = cuda_matmul_act;
    o.rope_attention = cuda_rope_attention;
    o.mla_prep = cuda_mla_prep;
    o.act_hold = cuda_act_hold;
    o.moe_down_combine = cuda_moe_down_combine;
    o.moe_route = cuda_moe_route;
    o.matmul_id = cuda_matmul_id;
    o.moe_gate_up = cuda_moe_gate_up;
    o.moe_combine = cuda_moe_combine;
    o.glu = cuda_glu;
    o.ssm_conv = cuda_ssm_conv;
    o.ssm_scan = cuda_ssm_scan;
    o.ssm_gate_norm = cuda_ssm_gate_norm;
    cuda_tp_ops(&o); /* tp_nccl.cu */
    return o;
}

static const qr_backend_ops cuda_ops = make_cuda_ops();

/* Exact mode: no fusions (the model composes the plain ops as it does on the CPU); the plain ops, MoE
 * and Mamba2 ones included, take their exact.cu paths when cb->exact. Graphs stay: a model whose exact
 * ops need the host (MoE routing, the Mamba2 scan's softplus) fails its first capture and then runs
 * op by op. */
static qr_backend_ops make_cuda_ops_exact(void) {
    qr_backend_ops o = make_cuda_ops();
    o.add_rmsnorm = NULL;
    o.matmul_multi = NULL;
    o.matmul_glu = NULL;
    o.rope_attention = NULL;
    o.mla_prep = NULL;
    o.act_hold = NULL;
    o.moe_down_combine = NULL; /* ssm_gate_norm stays: in exact mode it ignores its hint */
    return o;
}

static const qr_backend_ops cuda_ops_exact = make_cuda_ops_exact();

/* A kernel of this file: its attributes tell whether the binary has code for the device. */
static __global__ void probe_kernel(int *p) {
    if (p) *p = 1;
}

extern "C" bool qr_cuda_mem_info(int gpu, size_t *free_bytes, size_t *total_bytes) {
    int cur = 0;
    size_t f = 0, t = 0;
    cudaError_t e = cudaGetDevice(&cur);
    if (e == cudaSuccess) e = cudaSetDevice(gpu);
    if (e == cudaSuccess) {
        e = cudaMemGetInfo(&f, &t);
        cudaSetDevice(cur);
    }
    if (e != cudaSuccess) (void)cudaGetLastError();
    if (free_bytes) *free_bytes = e == cudaSuccess ? f : 0;
    if (total_bytes) *total_bytes = e == cudaSuccess ? t : 0;
    return e == cudaSuccess;
}

extern "C" int qr_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

extern "C" qr_status qr_backend_cuda_create(const qr_backend_cuda_params *params, qr_backend **out, char *err,
                                            size_t err_len) {
    *out = NULL;
    const int gpu = params ? params->gpu : 0;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        (void)cudaGetLastError();
        /* no NVIDIA driver at all reads as "insufficient driver": say it plainly */
        FILE *drv = fopen("/proc/driver/nvidia/version", "r");
        if (drv) fclose(drv);
        if (e == cudaSuccess || e == cudaErrorNoDevice || (e == cudaErrorInsufficientDriver && !drv))
            return qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "no CUDA device found");
        return qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "no CUDA device found (%s)", cudaGetErrorString(e));
    }
    if (gpu < 0 || gpu >= n)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "GPU %d does not exist (%d CUDA device%s)", gpu, n,
                       n == 1 ? "" : "s");
    cudaDeviceProp prop;
    if ((e = cudaSetDevice(gpu)) != cudaSuccess || (e = cudaGetDeviceProperties(&prop, gpu)) != cudaSuccess) {
        (void)cudaGetLastError();
        return qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "cannot use GPU %d: %s", gpu, cudaGetErrorString(e));
    }
    cudaFuncAttributes fa;
    if ((e = cudaFuncGetAttributes(&fa, probe_kernel)) != cudaSuccess) {
        (void)cudaGetLastError();
        return qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "GPU %d (%s, sm_%d%d) is not supported by this build: %s", gpu,
                       prop.name, prop.major, prop.minor, cudaGetErrorString(e));
    }
    qr_backend *be = (qr_backend *)calloc(1, sizeof *be);
    cuda_backend *cb = (cuda_backend *)calloc(1, sizeof *cb);
    if (!be || !cb) {
        free(be);
        free(cb);
        return qr_errf(err, err_len, QR_ERR_NOMEM, "cannot allocate the cuda backend");
    }
    be->name = "cuda";
    be->ops = &cuda_ops; /* the backend's own table until qr_backend_init below puts the checks above it */
    be->impl = cb;
    cb->device = gpu;
    cb->n_sm = prop.multiProcessorCount;
    snprintf(cb->device_name, sizeof cb->device_name, "%s (sm_%d%d, %d SMs, %.1f GiB)", prop.name, prop.major,
             prop.minor, prop.multiProcessorCount, (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
    cb->has_pdl = prop.major >= 9;
    cuda_tune_defaults(&cb->tune);
    cb->host_prof = qr_knob_int(QR_KNOB_HOST_PROF) != 0;
    if (cb->tune.dq_wg && !(prop.major == 9 && prop.minor == 0 && qr_cuda_dq_wg_available())) {
        cb->tune.dq_wg = 0;
        if (!getenv("QUARREL_CUDA_DQ_MAX_ROWS")) cb->tune.dq_max_rows = 16; /* the mma.sync version's range */
    }
    if (cb->tune.exact) {
        cb->exact = true;
        be->ops = &cuda_ops_exact;
        if (strcmp(qr_quant_simd_level(), "avx2") != 0)
            fprintf(stderr, "quarrel: exact GPU mode reproduces the AVX2 CPU path; this CPU runs the %s one\n",
                    qr_quant_simd_level());
    }
    if (!cb->tune.graphs) {
        cb->graphs_off = true;
        snprintf(cb->graph_note, sizeof cb->graph_note, "CUDA graphs disabled by QUARREL_CUDA_GRAPH=0");
    }
    const char *what = "stream";
    cublasStatus_t bs = CUBLAS_STATUS_SUCCESS;
    e = cudaStreamCreateWithFlags(&cb->stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) what = "event", e = cudaEventCreateWithFlags(&cb->staged, cudaEventDisableTiming);
    if (e == cudaSuccess) what = "cuBLAS workspace", e = cudaMalloc(&cb->cublas_ws, CUBLAS_WS_BYTES);
    if (e == cudaSuccess) {
        bs = cublasCreate(&cb->cublas);
        if (bs == CUBLAS_STATUS_SUCCESS) bs = cublasSetStream(cb->cublas, cb->stream);
        if (bs == CUBLAS_STATUS_SUCCESS) bs = cublasSetWorkspace(cb->cublas, cb->cublas_ws, CUBLAS_WS_BYTES);
    }
    if (e != cudaSuccess || bs != CUBLAS_STATUS_SUCCESS) {
        (void)cudaGetLastError();
        if (bs != CUBLAS_STATUS_SUCCESS) cb->cublas = NULL;
        cuda_destroy(be);
        if (e != cudaSuccess) return qr_errf(err, err_len, QR_ERR_INTERNAL, "cuda backend %s: %s", what, cudaGetErrorString(e));
        return qr_errf(err, err_len, QR_ERR_INTERNAL, "cuBLAS initialisation failed (status %d)", (int)bs);
    }
    const qr_backend_caps caps = cuda_caps(cb);
    qr_backend_init(be, "cuda", be->ops, &caps);
    *out = be;
    return QR_OK;
}

extern "C" qr_cuda_tune *qr_cuda_backend_tune(qr_backend *be) { return &CB(be)->tune; }
extern "C" void *qr_cuda_backend_stream(qr_backend *be) { return (void *)CB(be)->stream; }
extern "C" const char *qr_cuda_backend_device_name(qr_backend *be) { return CB(be)->device_name; }
extern "C" void qr_cuda_backend_graph_stats(qr_backend *be, int64_t *captured, int64_t *replayed, const char **note) {
    cuda_backend *cb = CB(be);
    if (captured) *captured = cb->n_captured;
    if (replayed) *replayed = cb->n_replayed;
    if (note) *note = cb->graph_note;
}
