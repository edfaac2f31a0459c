/* backend_cuda_hybrid.cu — the MoE and Mamba2 ops of the CUDA backend (host code; kernels in moe.cu,
 * ssm.cu and matmul_q.cu): routing, the expert matmuls (the expert mat-vec at decode sizes; for longer
 * passes the routing is read back and the slots grouped by expert: tiles through the quantized mat-vec,
 * or f16 GEMMs, zero-padded and strided-batched), the weighted sum, the conv1d, the selective scan
 * (with its divergence flag) and the gated norm. docs/cuda-notes.md describes the choices. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"

/* Device pointer of a prepared F32 vector / matrix (NULL for w == NULL; raises on a weight this backend did
 * not prepare). Its type and shape: checked by backend_check.c. */
static const float *f32_of(cuda_backend *cb, const qr_weight *w, const char *op, bool *ok) {
    if (!w) return NULL;
    const cuda_weight *cw = prepared(cb, w, op);
    if (!cw) {
        *ok = false;
        return NULL;
    }
    return (const float *)cw->v.p0;
}

void cuda_moe_route(qr_backend *be, const float *logits, int64_t n_rows, const qr_moe_route_params *p,
                    int32_t *ids, float *weights) {
    cuda_backend *cb = CB(be);
    if (cb->exact) return cuda_exact_moe_route(be, logits, n_rows, p, ids, weights);
    bool ok = true;
    const float *sb = f32_of(cb, p->sel_bias, "moe_route", &ok);
    if (ok && cuda_ok(cb, qr_cuda_moe_route(logits, n_rows, p, sb, ids, weights, use_pdl(cb), cb->stream), "moe_route"))
        cb->ids_unfenced = ids;
}

/* Whether an expert mat-vec launched now may read `ids` before its dependency wait (see ids_unfenced);
 * one that does not waits first and then lets the next kernel launch: the routing is then fenced. */
static bool ids_early(cuda_backend *cb, const int32_t *ids) { return cb->tune.ids_early && ids != cb->ids_unfenced; }
static void ids_launched(cuda_backend *cb, bool early) {
    if (!early) cb->ids_unfenced = NULL;
}

/* The expert mat-vec (decode sizes): one launch per matrix pair, quantized activations and dp4a
 * like the dense mat-vec; w1 (up, with act) makes it the fused gate+up+activation. */
static void moe_matvec(cuda_backend *cb, const cuda_weight *w0, const cuda_weight *w1, const float *b0, const float *b1,
                       int64_t n_out, const float *x, bool per_slot, const int32_t *ids, int64_t n_rows, int32_t n_used,
                       int act, float *y) {
    const int64_t k = w0->v.k, n_slots = n_rows * n_used, n_x = per_slot ? n_slots : n_rows;
    act_ptrs a;
    if (!act_prepare(cb, (qr_type)w0->v.type, x, n_x, k, &a)) return;
    qr_cuda_mv_id_args args;
    memset(&args, 0, sizeof args);
    args.w[0] = w0->v;
    args.w[1] = w1 ? w1->v : w0->v;
    args.bias[0] = b0;
    args.bias[1] = b1;
    args.n_out = n_out;
    args.ids = ids;
    args.n_used = n_used;
    args.x_per_slot = per_slot;
    args.act = act;
    args.y = y;
    args.ids_early = ids_early(cb, ids);
    args.variant = w1 ? cb->tune.gu_persist : 0;
    const int64_t rows = n_out * n_slots;
    const int32_t wpr = rows >= 4096 ? 1 : (rows >= 2048 || w1 ? 2 : 4);
    const cuda_xview xv = act_view(&a, 0);
    if (cuda_ok(cb, qr_cuda_matvec_id(&args, w1 != NULL, &xv, (int32_t)n_slots, wpr, use_pdl(cb), cb->stream),
                "matmul_id (mat-vec)")) {
        ids_launched(cb, args.ids_early);
        if (!overlaps(x, n_x * k, y, n_slots * n_out)) act_mark(cb, x, n_x, k, a.kind);
    }
}

/* The grouped expert matmul over tiles of sorted rows (moe_gemm's tiles mode): the quantized mat-vec
 * over tiles of up to 8 rows of one expert (few rows per expert), or the int8 tensor-core kernel over
 * tiles of up to 32 or 64 (mma). active: the experts with rows. h_slot: the host staging [slot | expert |
 * row | source] per sorted p (compact layout), h_tile: room for the tiles. The sorted activation rows are gathered (f32), prepared as for
 * the mat-vec (quantized to Q8 like the CPU quantizes them), and each tile multiplied in one CTA
 * row-range. */
static void moe_tiles(cuda_backend *cb, const cuda_weight *w0, const cuda_weight *w1, const float *b0, const float *b1,
                      int64_t n_out, const float *x, int64_t n_slots, int64_t n_expert, int64_t active,
                      const int32_t *off, const int32_t *h_slot, int32_t *h_tile, bool mma, int act, float *y) {
    const int64_t k = w0->v.k;
    const int n_mat = w1 ? 2 : 1;
    /* rows per tile, and rows of slack: mma tiles of 64 rows where the experts average more than 32 (fewer
     * re-reads of each expert), else 32 */
    const int32_t tr = !mma ? 8 : n_slots > 32 * active ? QR_CUDA_MMQ_TILE_ROWS : 32;
    int32_t n_tiles = 0, max_rows = 1;
    for (int64_t e = 0; e < n_expert; e++)
        for (int32_t p0 = off[e]; p0 < off[e + 1]; p0 += tr, n_tiles++) {
            int32_t *t = h_tile + 4 * (int64_t)n_tiles;
            t[0] = (int32_t)e, t[1] = p0, t[2] = off[e + 1] - p0 < tr ? off[e + 1] - p0 : tr, t[3] = 0;
            if (t[2] > max_rows) max_rows = t[2];
        }
    if (n_tiles > 65535) {
        raise_error(cb, QR_ERR_INVALID_ARG, "matmul_id: %d expert tiles (more than 65535)", n_tiles);
        return;
    }
    /* device scratch: slot, expert, row, source (int32) | tiles (int4) | sorted f32 rows + slack |
     * per-matrix f32 results */
    size_t o = 0;
    const size_t o_idx = o;
    o = align256(o + (size_t)n_slots * 4 * 4);
    const size_t o_tile = o;
    o = align256(o + (size_t)n_tiles * 16);
    const size_t o_xs = o;
    o = align256(o + (size_t)((n_slots + tr) * k) * 4);
    const size_t o_y = o;
    o = align256(o + (size_t)n_mat * (size_t)(n_slots * n_out) * 4);
    if (!ensure_scratch(cb, &cb->moe, &cb->moe_cap, o, "the expert mat-vec")) return;
    uint8_t *base = (uint8_t *)cb->moe;
    int32_t *d_idx = (int32_t *)(base + o_idx), *d_tile = (int32_t *)(base + o_tile);
    float *xs = (float *)(base + o_xs), *ys = (float *)(base + o_y);
    if (!cuda_ok(cb, cudaMemcpyAsync(d_idx, h_slot, (size_t)n_slots * 4 * 4, cudaMemcpyHostToDevice, cb->stream),
                 "matmul_id (upload order)") ||
        !cuda_ok(cb, cudaMemcpyAsync(d_tile, h_tile, (size_t)n_tiles * 16, cudaMemcpyHostToDevice, cb->stream),
                 "matmul_id (upload tiles)") ||
        !cuda_ok(cb, cudaMemsetAsync(xs + n_slots * k, 0, (size_t)(tr * k) * 4, cb->stream), "matmul_id (slack)") ||
        !cuda_ok(cb, qr_cuda_gather_rows(x, k, d_idx + 3 * n_slots, (int32_t)n_slots, xs, false, cb->stream),
                 "matmul_id (gather)"))
        return;
    act_ptrs a;
    if (!act_prepare(cb, (qr_type)w0->v.type, xs, n_slots + tr, k, &a)) return;
    const cuda_xview xv = act_view(&a, 0);
    const int32_t wpr = mmv_wpr(cb, n_out);
    for (int m = 0; m < n_mat; m++) {
        cuda_wview v = (m == 0 ? w0 : w1)->v;
        float *ym = ys + (int64_t)m * n_slots * n_out;
        const cudaError_t ce = mma ? qr_cuda_mmq_tiles(&v, &xv, d_tile, n_tiles, max_rows, n_out, ym, cb->stream)
                                   : qr_cuda_matvec_tiles(&v, &xv, d_tile, n_tiles, n_out, ym, wpr, cb->stream);
        if (!cuda_ok(cb, ce, mma ? "matmul_id (mma tiles)" : "matmul_id (tiles)")) return;
    }
    cb->act_valid = false;
    cuda_ok(cb, qr_cuda_moe_scatter(ys, w1 ? ys + n_slots * n_out : NULL, b0, b1, d_idx, d_idx + n_slots, d_idx + 2 * n_slots,
                                    (int32_t)n_slots, n_out, act, y, cb->stream),
            "matmul_id (scatter)");
}

/* An expert's gathered rows in the bucketed layout: its count rounded up to a power of two, at least 16 (so 16 << b,
 * b < QR_MOE_BUCKETS, for counts up to 2^29). */
#define QR_MOE_BUCKETS 26
static int32_t bucket_rows(int32_t c) {
    int32_t r = 16;
    while (r < c) r *= 2;
    return r;
}

/* moe_gemm's bucketed GEMMs: for each matrix and each power-of-two row count, one cublasGemmBatchedEx over the experts
 * whose counts round up to it (rows h_start[e].. of the gathered f16 activations xg against the expert's f16 weights,
 * into rows of ys). h_ptr / d_ptr: room for 6 n_expert pointers (host staging, device copy). */
static void moe_bucket_gemms(cuda_backend *cb, const cuda_weight *w0, const cuda_weight *w1, const void *const *cached,
                             int64_t n_out, int64_t k, int64_t n_expert, const int32_t *off, const int32_t *h_start,
                             const uint8_t *xg, float *ys, int64_t n_g, void **h_ptr, void **d_ptr) {
    const int n_mat = w1 ? 2 : 1;
    const int64_t na = n_mat * n_expert; /* the A, B, C arrays' room */
    int32_t grp_first[2][QR_MOE_BUCKETS], grp_n[2][QR_MOE_BUCKETS];
    int64_t n = 0;
    for (int m = 0; m < n_mat; m++) {
        const cuda_weight *w = m == 0 ? w0 : w1;
        const uint8_t *wf = cached[m] ? (const uint8_t *)cached[m] : w->v.p0;
        float *ym = ys + (int64_t)m * n_g * n_out;
        for (int b = 0; b < QR_MOE_BUCKETS; b++) {
            grp_first[m][b] = (int32_t)n;
            for (int64_t e = 0; e < n_expert; e++) {
                const int32_t c = off[e + 1] - off[e];
                if (c <= 0 || bucket_rows(c) != (16 << b)) continue;
                h_ptr[n] = (void *)(wf + (size_t)(e * n_out * k) * 2);
                h_ptr[na + n] = (void *)(xg + (size_t)h_start[e] * k * 2);
                h_ptr[2 * na + n] = (void *)(ym + (int64_t)h_start[e] * n_out);
                n++;
            }
            grp_n[m][b] = (int32_t)n - grp_first[m][b];
        }
    }
    if (!cuda_ok(cb, cudaMemcpyAsync(d_ptr, h_ptr, (size_t)(3 * na) * sizeof(void *), cudaMemcpyHostToDevice, cb->stream),
                 "matmul_id (upload pointers)"))
        return;
    const float one = 1.0f, zero = 0.0f;
    for (int m = 0; m < n_mat; m++)
        for (int b = 0; b < QR_MOE_BUCKETS; b++) {
            if (grp_n[m][b] == 0) continue;
            const int32_t f = grp_first[m][b];
            if (!cublas_ok(cb, cublasGemmBatchedEx(cb->cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int)n_out, 16 << b, (int)k, &one,
                                                   (const void *const *)(d_ptr + f), CUDA_R_16F, (int)k,
                                                   (const void *const *)(d_ptr + na + f), CUDA_R_16F, (int)k, &zero,
                                                   d_ptr + 2 * na + f, CUDA_R_32F, (int)n_out, grp_n[m][b],
                                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                           "matmul_id (bucketed gemm)"))
                return;
        }
}

/* The grouped expert GEMM (prefill): the routing is read back (a sync, so never inside a graph), the
 * slots are sorted by expert and each expert's activation rows gathered (f16, rounded as matmul_gemm
 * rounds them) into rows of its own, padded with zero rows to the largest expert's count; the experts
 * are dequantized to f16 in chunks of consecutive experts (one launch per chunk) and each chunk is
 * multiplied in one strided-batched cuBLAS GEMM (one GEMM per expert over the unpadded rows when the
 * padding would more than quadruple the rows: one pointer-batched GEMM per power-of-two count bucket when the f16
 * weights are whole (moe_bucket_gemms), else one GEMM per expert, as with QUARREL_CUDA_MOE=loop); the results are scattered
 * back to slot order with bias and activation. w1: the up matrix of a fused gate+up. */
static void moe_gemm(cuda_backend *cb, const cuda_weight *w0, const cuda_weight *w1, const float *b0, const float *b1,
                     int64_t n_out, const float *x, bool per_slot, const int32_t *ids, int64_t n_rows, int32_t n_used,
                     int act, float *y) {
    const cuda_wview *v0 = &w0->v;
    const int64_t k = v0->k, n_slots = n_rows * n_used, n_x = per_slot ? n_slots : n_rows;
    const int64_t n_expert = v0->n / n_out;
    const int n_mat = w1 ? 2 : 1;
    /* host staging: per expert counts and offsets | ids | slot, expert, row (in the gathered layout) per
     * sorted p | source row per gathered row (-1: padding; at most 4 * n_slots + 64 rows, see padded) */
    const size_t h_tiles = (size_t)4 * (n_slots / 8 + n_expert + 1); /* moe_tiles' tile table (int32) */
    const size_t h_need = (size_t)(2 * (n_expert + 1) + 8 * n_slots + 64 + h_tiles + 4) * 4 +
                          (size_t)(n_expert + 2) * 4 + (size_t)6 * n_expert * sizeof(void *); /* buckets */
    if (h_need > cb->h_moe_cap) {
        void *nh = realloc(cb->h_moe, h_need);
        if (!nh) {
            raise_error(cb, QR_ERR_NOMEM, "matmul_id: out of host memory");
            return;
        }
        cb->h_moe = (int32_t *)nh;
        cb->h_moe_cap = h_need;
    }
    int32_t *cnt = cb->h_moe, *off = cnt + n_expert + 1, *h_ids = off + n_expert + 1;
    int32_t *h_slot = h_ids + n_slots, *h_exp = h_slot + n_slots, *h_row = h_exp + n_slots, *h_src = h_row + n_slots;
    if (!cuda_ok(cb, cudaMemcpyAsync(h_ids, ids, (size_t)n_slots * 4, cudaMemcpyDeviceToHost, cb->stream),
                 "matmul_id (read routing)") ||
        !cuda_ok(cb, cudaStreamSynchronize(cb->stream), "matmul_id (read routing)"))
        return;
    memset(cnt, 0, (size_t)(n_expert + 1) * 4);
    for (int64_t s = 0; s < n_slots; s++) {
        if (h_ids[s] < 0 || h_ids[s] >= n_expert) {
            raise_error(cb, QR_ERR_INTERNAL, "matmul_id: expert id %d outside [0, %lld)", h_ids[s], (long long)n_expert);
            return;
        }
        cnt[h_ids[s]]++;
    }
    int32_t maxc = 0;
    off[0] = 0;
    for (int64_t e = 0; e < n_expert; e++) {
        off[e + 1] = off[e] + cnt[e];
        if (cnt[e] > maxc) maxc = cnt[e];
    }
    /* tiles: few rows per expert (<= 12 on average over the experts in use): the quantized mat-vec over
     * tiles of up to 8 sorted rows of one expert, each expert's weights read once per tile, no f16 copy.
     * (H100, nemotron-3-nano experts: 1.3x faster than the f16 GEMM at ~3 rows per expert, 0.73x at ~24) */
    int64_t active = 0;
    for (int64_t e = 0; e < n_expert; e++) active += cnt[e] > 0;
    const bool mma = cb->tune.moe_mma && qr_cuda_mmq_supported((qr_type)v0->type) && (!w1 || w1->v.type == v0->type) &&
                     n_slots <= (int64_t)cb->tune.moe_mma_max_rows * active;
    const bool tiles = mma || (cb->tune.moe_tiles && v0->nb > 0 && n_slots <= 12 * active);
    /* padded: expert e's rows start at e * maxc (one strided-batched GEMM per chunk); else at off[e] */
    const bool padded = !tiles && cb->tune.moe_grouped && n_expert * maxc <= 4 * n_slots + 64;
    int32_t *h_tile = h_src + 4 * n_slots + 64; /* after the largest gathered-row table */
    /* experts per dequantized chunk (the f16 copy of a chunk of experts); F16 weights are used in place, as are the
     * f16 copies of quantized ones where the device keeps them (f16_cache: dequantized once, as the tiles would be) */
    const void *cached[2] = {NULL, NULL};
    if (!tiles && v0->type != QR_TYPE_F16 && (cached[0] = f16_cache(cb, (cuda_weight *)w0, v0->n)) && w1 &&
        !(cached[1] = f16_cache(cb, (cuda_weight *)w1, w1->v.n)))
        cached[0] = NULL;
    const bool f16w = !tiles && (v0->type == QR_TYPE_F16 || cached[0]);
    /* buckets (uneven routing, whole f16 weights): expert e's rows start at h_start[e], its count rounded up to a
     * power of two >= 16; the experts of one rounded count are one pointer-batched GEMM (instead of one GEMM each:
     * 128-expert models routed unevenly launched ~380 small GEMMs a layer) */
    int32_t *h_start = h_tile + h_tiles;
    int64_t n_g = padded ? n_expert * maxc : n_slots; /* gathered rows */
    bool buckets = false;
    if (!tiles && !padded && f16w && cb->tune.moe_buckets) {
        int64_t r = 0;
        for (int64_t e = 0; e < n_expert; e++) {
            h_start[e] = (int32_t)r;
            r += off[e + 1] > off[e] ? bucket_rows(off[e + 1] - off[e]) : 0;
        }
        if (r <= 4 * n_slots + 64) buckets = true, n_g = r;
    }
    for (int64_t e = 0; e < n_expert; e++) cnt[e] = off[e]; /* cnt becomes the fill cursor */
    for (int64_t q = 0; q < n_g; q++) h_src[q] = -1;
    for (int64_t s = 0; s < n_slots; s++) {
        const int32_t e = h_ids[s], p = cnt[e]++;
        h_slot[p] = (int32_t)s;
        h_exp[p] = e;
        h_row[p] = padded ? (int32_t)(e * maxc + (p - off[e])) : buckets ? h_start[e] + (p - off[e]) : p;
        h_src[h_row[p]] = per_slot ? (int32_t)s : (int32_t)(s / n_used);
    }
    if (tiles) {
        moe_tiles(cb, w0, w1, b0, b1, n_out, x, n_slots, n_expert, active, off, h_slot, h_tile, mma, act, y);
        return;
    }
    const int64_t exp_bytes = n_out * k * 2;
    int64_t per_chunk = f16w ? n_expert : (int64_t)(cb->tune.moe_tile_bytes / exp_bytes);
    if (per_chunk < 1) per_chunk = 1;
    if (per_chunk > n_expert) per_chunk = n_expert;
    /* device scratch: slot, expert, row, source (int32), x as f16, the gathered f16 rows, per-matrix f32
     * results in the gathered layout */
    size_t o = 0;
    const size_t o_idx = o;
    o = align256(o + (size_t)(n_slots * 3 + n_g) * 4);
    const size_t o_xh = o;
    o = align256(o + (size_t)(n_x * k) * 2);
    const size_t o_xg = o;
    o = align256(o + (size_t)(n_g * k) * 2);
    const size_t o_y = o;
    o = align256(o + (size_t)n_mat * (size_t)(n_g * n_out) * 4);
    const size_t o_ptr = o; /* buckets: the A, B and C pointer arrays */
    o = align256(o + (buckets ? (size_t)6 * n_expert * sizeof(void *) : 0));
    if (!ensure_scratch(cb, &cb->moe, &cb->moe_cap, o, "the expert GEMM")) return;
    if (!f16w && !ensure_scratch(cb, &cb->tile, &cb->tile_cap, (size_t)(per_chunk * exp_bytes), "the expert weight tile"))
        return;
    uint8_t *base = (uint8_t *)cb->moe;
    int32_t *d_idx = (int32_t *)(base + o_idx);
    uint8_t *xh = base + o_xh, *xg = base + o_xg;
    float *ys = (float *)(base + o_y);
    if (!cuda_ok(cb, cudaMemcpyAsync(d_idx, h_slot, (size_t)(n_slots * 3 + n_g) * 4, cudaMemcpyHostToDevice, cb->stream),
                 "matmul_id (upload order)"))
        return;
    const int kind = qr_cuda_act_kind((qr_type)v0->type);
    const cudaError_t ce = kind <= 1 && cb->tune.gemm_q8_act ? qr_cuda_act_q8_as_f16(x, n_x * k, kind, xh, cb->stream)
                                                              : qr_cuda_to_half(x, n_x * k, xh, false, cb->stream);
    if (!cuda_ok(cb, ce, "matmul_id (convert)") ||
        !cuda_ok(cb, qr_cuda_gather_f16(xh, k, d_idx + 3 * n_slots, (int32_t)n_g, xg, cb->stream), "matmul_id (gather)"))
        return;
    cb->act_valid = false;
    const float one = 1.0f, zero = 0.0f;
    if (buckets)
        moe_bucket_gemms(cb, w0, w1, cached, n_out, k, n_expert, off, h_start, xg, ys, n_g,
                         (void **)(((uintptr_t)(h_start + n_expert + 1) + 7) & ~(uintptr_t)7), (void **)(base + o_ptr));
    for (int m = 0; !buckets && m < n_mat; m++) {
        const cuda_wview *v = m == 0 ? v0 : &w1->v;
        float *ym = ys + (int64_t)m * n_g * n_out;
        for (int64_t e0 = 0; e0 < n_expert; e0 += per_chunk) {
            const int64_t e1 = e0 + per_chunk < n_expert ? e0 + per_chunk : n_expert;
            if (off[e1] == off[e0]) continue; /* no slot routed to this chunk */
            const uint8_t *wf = cached[m] ? (const uint8_t *)cached[m] : v->p0;
            const uint8_t *tile = f16w ? wf + (size_t)(e0 * n_out * k) * 2 : (const uint8_t *)cb->tile;
            for (int64_t r0 = e0 * n_out; !f16w && r0 < e1 * n_out; r0 += 65280) { /* the kernel's grid limit */
                const int64_t r1 = r0 + 65280 < e1 * n_out ? r0 + 65280 : e1 * n_out;
                if (!cuda_ok(cb, qr_cuda_dequant_f16(v, r0, r1, (uint8_t *)cb->tile + (size_t)((r0 - e0 * n_out) * k) * 2,
                                                     cb->stream),
                             "matmul_id (dequant)"))
                    return;
            }
            if (padded) {
                if (!cublas_ok(cb, cublasGemmStridedBatchedEx(
                                       cb->cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int)n_out, maxc, (int)k, &one, tile, CUDA_R_16F,
                                       (int)k, n_out * k, xg + (size_t)(e0 * maxc * k) * 2, CUDA_R_16F, (int)k,
                                       (long long)maxc * k, &zero, ym + e0 * maxc * n_out, CUDA_R_32F, (int)n_out,
                                       (long long)maxc * n_out, (int)(e1 - e0), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                               "matmul_id (batched gemm)"))
                    return;
                continue;
            }
            for (int64_t e = e0; e < e1; e++) {
                const int32_t c = off[e + 1] - off[e];
                if (c > 0 &&
                    !cublas_ok(cb, cublasGemmEx(cb->cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int)n_out, c, (int)k, &one,
                                                tile + (size_t)((e - e0) * n_out * k) * 2, CUDA_R_16F, (int)k,
                                                xg + (size_t)off[e] * k * 2, CUDA_R_16F, (int)k, &zero,
                                                ym + (int64_t)off[e] * n_out, CUDA_R_32F, (int)n_out, CUBLAS_COMPUTE_32F,
                                                CUBLAS_GEMM_DEFAULT),
                               "matmul_id (gemm)"))
                    return;
            }
        }
    }
    cuda_ok(cb, qr_cuda_moe_scatter(ys, w1 ? ys + n_g * n_out : NULL, b0, b1, d_idx, d_idx + n_slots, d_idx + 2 * n_slots,
                                    (int32_t)n_slots, n_out, act, y, cb->stream),
            "matmul_id (scatter)");
}

/* The path of an expert matmul: 1 = the expert mat-vec (decode sizes), 2 = the grouped GEMM
 * (longer passes, outside graph capture, f16-convertible types), 0 = the per-slot kernel of moe.cu. */
static int moe_path(const cuda_backend *cb, const cuda_weight *w, int64_t n_rows, int64_t n_out) {
    if (cb->tune.moe_kernel == 1) return 0;
    const int kind = qr_cuda_act_kind((qr_type)w->v.type);
    if (n_rows <= cb->tune.mmvq_max_rows && w->v.nb > 0) return 1;
    if (!cb->capturing && (kind <= 1 || w->v.type == QR_TYPE_F16) && n_out > 0 && w->v.n % n_out == 0 &&
        cb->tune.moe_kernel != 2)
        return 2;
    return 0;
}

static void matmul_id(qr_backend *be, const qr_weight *w, const qr_weight *bias, const float *x, bool x_per_slot,
                      const int32_t *ids, int64_t n_rows, int32_t n_used, float *y) {
    cuda_backend *cb = CB(be);
    const cuda_weight *cw = prepared(cb, w, "matmul_id");
    bool ok = cw != NULL;
    const float *b = f32_of(cb, bias, "matmul_id", &ok);
    if (!ok || n_rows <= 0) return;
    if (cb->exact) return cuda_exact_matmul_id(cb, w, cw, bias, b, x, x_per_slot, ids, n_rows, n_used, y);
    const int64_t n_out = w->ne[1];
    switch (moe_path(cb, cw, n_rows, n_out)) {
    case 1: moe_matvec(cb, cw, NULL, b, NULL, n_out, x, x_per_slot, ids, n_rows, n_used, -1, y); return;
    case 2: moe_gemm(cb, cw, NULL, b, NULL, n_out, x, x_per_slot, ids, n_rows, n_used, -1, y); return;
    default:
        cuda_ok(cb, qr_cuda_matmul_id(&cw->v, n_out, b, x, x_per_slot, ids, n_rows, n_used, y, cb->stream), "matmul_id");
    }
}

void cuda_matmul_id(qr_backend *be, const qr_moe_matmul_args *a) {
    matmul_id(be, a->w, a->w_b, a->x, a->x_per_slot, a->ids, a->n_rows, a->n_used, a->y);
}

/* Rows [row0, row0 + n) of a prepared weight as a view (a head of a 3-D weight): the planes hold blocks in row order. */
static cuda_wview row_view(const qr_weight *w, const cuda_weight *cw, int64_t row0, int64_t n) {
    cuda_wview v = cw->v;
    const cuda_plane_desc pd = qr_cuda_plane_desc(w->type);
    const uint8_t **pl[3] = {&v.p0, &v.p1, &v.p2};
    for (int p = 0; p < pd.n_planes && p < 3; p++)
        if (*pl[p]) *pl[p] += pd.block == 1 ? (size_t)row0 * w->row_bytes : (size_t)(row0 * v.nb) * (size_t)pd.size[p];
    v.n = n;
    return v;
}

/* ids r * H + j = j for r < n_rows (each head an "expert" of the expert mat-vec / grouped GEMM); filled outside a
 * capture (the warm-up pass sizes it). */
static const int32_t *head_ids(cuda_backend *cb, int32_t H, int64_t n_rows) {
    const int64_t need = (int64_t)H * n_rows;
    if (cb->head_ids && cb->head_ids_h == H && cb->head_ids_cap >= need) return cb->head_ids;
    if (cb->capturing) {
        raise_error(cb, QR_ERR_INTERNAL, "matmul_heads: head ids not ready in a graph capture");
        return NULL;
    }
    const int64_t cap = need < 4096 ? 4096 - 4096 % H : need;
    int32_t *h = (int32_t *)malloc((size_t)cap * 4);
    if (!h) {
        raise_error(cb, QR_ERR_NOMEM, "matmul_heads: out of memory");
        return NULL;
    }
    for (int64_t i = 0; i < cap; i++) h[i] = (int32_t)(i % H);
    cudaFree(cb->head_ids);
    cb->head_ids = NULL;
    bool ok = cuda_ok(cb, cudaMalloc((void **)&cb->head_ids, (size_t)cap * 4), "matmul_heads (ids)") &&
              cuda_ok(cb, cudaMemcpy(cb->head_ids, h, (size_t)cap * 4, cudaMemcpyHostToDevice), "matmul_heads (ids)");
    free(h);
    if (!ok) return NULL;
    cb->head_ids_h = H;
    cb->head_ids_cap = cap;
    return cb->head_ids;
}

/* One matrix per head. Default mode: the heads as the "experts" of matmul_id over [n_rows][H][k] slots (the expert
 * mat-vec at decode sizes, the grouped GEMM beyond), the slices copied in / out where the strides are not already
 * that layout. Exact mode: each head as a 2-D matmul over its contiguous rows, as the CPU computes it. */
void cuda_matmul_heads(qr_backend *be, const qr_matmul_heads_args *a) {
    cuda_backend *cb = CB(be);
    const qr_weight *w = a->w;
    const cuda_weight *cw = prepared(cb, w, "matmul_heads");
    if (!cw || a->n_rows <= 0) return;
    const int64_t H = w->ne[2], k = w->ne[0], n = w->ne[1], nr = a->n_rows;
    if (cb->exact) {
        if (!ensure_scratch(cb, &cb->heads_x, &cb->heads_x_cap, (size_t)(nr * k) * 4, "matmul_heads") ||
            !ensure_scratch(cb, &cb->heads_y, &cb->heads_y_cap, (size_t)(nr * n) * 4, "matmul_heads"))
            return;
        float *xs = (float *)cb->heads_x, *ys = (float *)cb->heads_y;
        for (int64_t h = 0; h < H; h++) {
            const cuda_wview v = row_view(w, cw, h * n, n);
            cuda_copy_rows(be, a->x + h * a->x_head, a->x_row, xs, k, nr, k);
            cuda_exact_matmul_view(cb, w, &v, xs, nr, ys, true);
            cuda_copy_rows(be, ys, n, a->y + h * a->y_head, a->y_row, nr, n);
        }
        return;
    }
    if (nr > cb->tune.mmvq_max_rows && !cb->capturing && cb->cublas && cb->tune.heads_gemm &&
        (qr_cuda_act_kind((qr_type)cw->v.type) <= 1 || cw->v.type == QR_TYPE_F16)) {
        /* prompt batches: every head's GEMM in one strided-batched cuBLAS call, straight on the strided slices
         * (x as f16, the weight's f16 copy or a dequantized tile), no routing read back, no slices copied */
        const void *w16 = cw->v.type == QR_TYPE_F16 ? (const void *)cw->v.p0 : f16_cache(cb, (cuda_weight *)cw, H * n);
        if (!w16) {
            if (!ensure_scratch(cb, &cb->tile, &cb->tile_cap, (size_t)(H * n * k) * 2, "matmul_heads (weights)")) return;
            for (int64_t r0 = 0; r0 < H * n; r0 += 65280) { /* the dequant kernel's grid limit */
                const int64_t r1 = r0 + 65280 < H * n ? r0 + 65280 : H * n;
                if (!cuda_ok(cb, qr_cuda_dequant_f16(&cw->v, r0, r1, (uint8_t *)cb->tile + (size_t)(r0 * k) * 2, cb->stream),
                             "matmul_heads (dequant)"))
                    return;
            }
            w16 = cb->tile;
        }
        const int64_t xn = (nr - 1) * a->x_row + (H - 1) * a->x_head + k; /* x's span */
        if (!ensure_scratch(cb, &cb->heads_x, &cb->heads_x_cap, (size_t)xn * 2, "matmul_heads") ||
            !cuda_ok(cb, qr_cuda_to_half(a->x, xn, cb->heads_x, false, cb->stream), "matmul_heads (convert)"))
            return;
        const float one = 1.0f, zero = 0.0f;
        cublas_ok(cb, cublasGemmStridedBatchedEx(cb->cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int)n, (int)nr, (int)k, &one, w16,
                                                 CUDA_R_16F, (int)k, n * k, cb->heads_x, CUDA_R_16F, (int)a->x_row,
                                                 a->x_head, &zero, a->y, CUDA_R_32F, (int)a->y_row, a->y_head, (int)H,
                                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                  "matmul_heads (gemm)");
        cb->act_valid = false;
        return;
    }
    const int32_t *ids = head_ids(cb, (int32_t)H, nr);
    if (!ids) return;
    const float *xs = a->x;
    if (a->x_head != k || a->x_row != H * k) { /* the slices into [n_rows][H][k] */
        if (!ensure_scratch(cb, &cb->heads_x, &cb->heads_x_cap, (size_t)(nr * H * k) * 4, "matmul_heads")) return;
        float *dst = (float *)cb->heads_x;
        if (a->x_row == H * a->x_head) cuda_copy_rows(be, a->x, a->x_head, dst, k, nr * H, k);
        else
            for (int64_t r = 0; r < nr; r++) cuda_copy_rows(be, a->x + r * a->x_row, a->x_head, dst + r * H * k, k, H, k);
        xs = dst;
    }
    const bool direct = a->y_head == n && a->y_row == H * n;
    if (!direct && !ensure_scratch(cb, &cb->heads_y, &cb->heads_y_cap, (size_t)(nr * H * n) * 4, "matmul_heads")) return;
    float *ys = direct ? a->y : (float *)cb->heads_y;
    matmul_id(be, w, NULL, xs, true, ids, nr, (int32_t)H, ys);
    if (direct) return;
    if (a->y_row == H * a->y_head) cuda_copy_rows(be, ys, n, a->y, a->y_head, nr * H, n);
    else
        for (int64_t r = 0; r < nr; r++) cuda_copy_rows(be, ys + r * H * n, n, a->y + r * a->y_row, a->y_head, H, n);
}

/* out = act(w x): at decode sizes the expert mat-vec with every row on "expert" 0 (its epilogue applies the
 * activation: no glu kernel); else matmul + glu. */
void cuda_matmul_act(qr_backend *be, const qr_weight *w, const float *x, int64_t n_rows, qr_glu_kind act, float *out,
                     float *scratch) {
    cuda_backend *cb = CB(be);
    const cuda_weight *cw = prepared(cb, w, "matmul_act");
    if (!cw || n_rows <= 0) return;
    const int64_t n_out = w->ne[1];
    if (!cb->exact && cb->tune.fuse && n_rows <= cb->tune.mmvq_max_rows && cw->v.nb > 0 && cw->v.n == n_out) {
        if (!cb->zero_ids) {
            if (cb->capturing) goto plain;
            if (cudaMalloc((void **)&cb->zero_ids, 64 * sizeof(int32_t)) != cudaSuccess ||
                cudaMemset(cb->zero_ids, 0, 64 * sizeof(int32_t)) != cudaSuccess) {
                (void)cudaGetLastError();
                cudaFree(cb->zero_ids);
                cb->zero_ids = NULL;
                goto plain;
            }
        }
        if (n_rows <= 64) {
            moe_matvec(cb, cw, NULL, NULL, NULL, n_out, x, true, cb->zero_ids, n_rows, 1, (int)act, out);
            return;
        }
    }
plain:
    be->ops->matmul(be, w, x, n_rows, scratch);
    cuda_glu(be, scratch, NULL, n_rows * n_out, act, out);
}

void cuda_glu(qr_backend *be, const float *g, const float *u, int64_t n, qr_glu_kind act, float *out) {
    cuda_backend *cb = CB(be);
    if (cb->exact && ((act == QR_GLU_SWIGLU_OAI && u) || act == QR_GLU_SIGMOID))
        return cuda_exact_glu_libm(cb, g, u, n, act, out);
    cuda_ok(cb, qr_cuda_glu(g, u, n, (int)act, out, use_pdl(cb), cb->stream), "glu");
}

static void moe_gate_up(qr_backend *be, const qr_weight *gate, const qr_weight *gate_b, const qr_weight *up,
                        const qr_weight *up_b, const float *x, const int32_t *ids, int64_t n_rows, int32_t n_used,
                        qr_glu_kind act, float *h) {
    cuda_backend *cb = CB(be);
    const cuda_weight *cu = prepared(cb, up, "moe_gate_up"), *cg = gate ? prepared(cb, gate, "moe_gate_up") : NULL;
    bool ok = cu != NULL && (!gate || cg != NULL);
    const float *bu = f32_of(cb, up_b, "moe_gate_up", &ok), *bg = f32_of(cb, gate_b, "moe_gate_up", &ok);
    if (!ok || n_rows <= 0) return;
    const int64_t n_out = up->ne[1];
    const bool same = !cg || (cg->v.type == cu->v.type && cg->v.k == cu->v.k && cg->v.n == cu->v.n);
    const int path = same && !cb->exact ? moe_path(cb, cu, n_rows, n_out) : 0;
    if (path == 1 || path == 2) {
        void (*run)(cuda_backend *, const cuda_weight *, const cuda_weight *, const float *, const float *, int64_t,
                    const float *, bool, const int32_t *, int64_t, int32_t, int, float *) =
            path == 1 ? moe_matvec : moe_gemm;
        if (cg) run(cb, cg, cu, bg, bu, n_out, x, false, ids, n_rows, n_used, (int)act, h);
        else run(cb, cu, NULL, bu, NULL, n_out, x, false, ids, n_rows, n_used, (int)act, h);
        return;
    }
    const size_t bytes = (size_t)n_rows * (size_t)n_used * (size_t)n_out * sizeof(float);
    if (!gate) { /* relu^2 experts: h = act(up x) */
        matmul_id(be, up, up_b, x, false, ids, n_rows, n_used, h);
        cuda_glu(be, h, NULL, (int64_t)(bytes / sizeof(float)), act, h);
        return;
    }
    if (!ensure_scratch(cb, &cb->tmp, &cb->tmp_cap, bytes, "moe_gate_up")) return;
    matmul_id(be, gate, gate_b, x, false, ids, n_rows, n_used, h);
    matmul_id(be, up, up_b, x, false, ids, n_rows, n_used, (float *)cb->tmp);
    cuda_glu(be, h, (const float *)cb->tmp, (int64_t)(bytes / sizeof(float)), act, h);
}

void cuda_moe_gate_up(qr_backend *be, const qr_moe_matmul_args *a) {
    moe_gate_up(be, a->gate, a->gate_b, a->w, a->w_b, a->x, a->ids, a->n_rows, a->n_used, a->act, a->y);
}

void cuda_moe_combine(qr_backend *be, const float *y, const float *w, int64_t n_rows, int32_t n_used, int64_t dim,
                      const float *add, float *out) {
    cuda_backend *cb = CB(be);
    cuda_ok(cb, qr_cuda_moe_combine(y, w, n_rows, n_used, dim, add, out, use_pdl(cb), cb->stream), "moe_combine");
}

/* The expert down projection and the weighted sum in one launch at decode sizes (each warp computes one
 * output row for every slot of its token, in slot order, and sums them as moe_combine does); otherwise
 * matmul_id + moe_combine through scratch. */
void cuda_moe_down_combine(qr_backend *be, const qr_moe_matmul_args *a) {
    cuda_backend *cb = CB(be);
    const qr_weight *w = a->w, *bias = a->w_b;
    const float *x = a->x, *weights = a->weights, *add = a->add;
    const int32_t *ids = a->ids;
    const int64_t n_rows = a->n_rows;
    const int32_t n_used = a->n_used;
    float *out = a->y, *scratch = a->scratch;
    const cuda_weight *cw = prepared(cb, w, "moe_down_combine");
    bool ok = cw != NULL;
    const float *b = f32_of(cb, bias, "moe_down_combine", &ok);
    if (!ok || n_rows <= 0) return;
    const int64_t n_out = w->ne[1];
    if (!cb->tune.fuse || moe_path(cb, cw, n_rows, n_out) != 1 || n_used > QR_CUDA_COMBINE_MAX_USED ||
        overlaps(x, n_rows * n_used * cw->v.k, out, n_rows * n_out)) {
        matmul_id(be, w, bias, x, true, ids, n_rows, n_used, scratch);
        cuda_moe_combine(be, scratch, weights, n_rows, n_used, n_out, add, out);
        return;
    }
    act_ptrs ap;
    if (!act_prepare(cb, (qr_type)cw->v.type, x, n_rows * n_used, cw->v.k, &ap)) return;
    qr_cuda_mv_id_args args;
    memset(&args, 0, sizeof args);
    args.w[0] = args.w[1] = cw->v;
    args.bias[0] = b;
    args.n_out = n_out;
    args.ids = ids;
    args.n_used = n_used;
    args.x_per_slot = 1;
    args.act = -1;
    args.y = out;
    args.ids_early = ids_early(cb, ids);
    args.variant = cb->tune.dc_pipe ? 2 : 0;
    const cuda_xview xv = act_view(&ap, 0);
    if (cuda_ok(cb, qr_cuda_matvec_id_combine(&args, &xv, weights, add, (int32_t)n_rows, use_pdl(cb), cb->stream),
                "moe_down_combine"))
        ids_launched(cb, args.ids_early);
}

void cuda_ssm_conv(qr_backend *be, const float *x, int64_t x_stride, float *conv_state, const qr_weight *w,
                   const qr_weight *b, const qr_ssm_params *p, float *out) {
    cuda_backend *cb = CB(be);
    bool ok = true; /* the shapes: checked by backend_check.c */
    const float *wd = f32_of(cb, w, "ssm_conv", &ok), *bd = f32_of(cb, b, "ssm_conv", &ok);
    if (ok && cb->exact) return cuda_exact_ssm_conv(cb, x, x_stride, conv_state, wd, bd, p, out);
    /* the parallel conv when each sequence's rows are one run (host plan; never baked into a graph) */
    const bool runs = cb->seq_runs && !cb->graph_mode && !cb->capturing;
    if (ok) cuda_ok(cb, qr_cuda_ssm_conv(x, x_stride, conv_state, wd, bd, cb->d_seq, cb->n_tokens, p, runs, out, use_pdl(cb), cb->stream),
                    "ssm_conv");
}

void cuda_ssm_scan(qr_backend *be, const qr_ssm_scan_args *args) {
    cuda_backend *cb = CB(be);
    float *state = args->state, *y = args->y;
    const float *xbc = args->xbc, *dt = args->dt;
    const int64_t dt_stride = args->dt_stride;
    const qr_weight *dt_bias = args->dt_bias, *A = args->A, *D = args->D;
    const qr_ssm_params *p = args->p;
    bool ok = true; /* the shapes: checked by backend_check.c */
    const float *bd = f32_of(cb, dt_bias, "ssm_scan", &ok), *ad = f32_of(cb, A, "ssm_scan", &ok),
                *dd = f32_of(cb, D, "ssm_scan", &ok);
    if (ok && !cb->diverged_h) { /* a mapped host flag the scan raises on a NaN/Inf state (checked by last_error) */
        if (cudaHostAlloc((void **)&cb->diverged_h, sizeof(int), cudaHostAllocMapped) != cudaSuccess ||
            cudaHostGetDevicePointer((void **)&cb->diverged_d, cb->diverged_h, 0) != cudaSuccess) {
            (void)cudaGetLastError();
            cb->diverged_h = NULL;
            cb->diverged_d = NULL;
        } else {
            *cb->diverged_h = 0;
        }
    }
    if (!ok) return;
    if (cb->exact) return cuda_exact_ssm_scan(cb, state, xbc, dt, dt_stride, dt_bias, A, dd, p, y);
    /* prefill (a run of at least ssm_ssd_min_rows rows), every sequence one contiguous run: the chunked form,
     * a slice of CTAs per run (the host plan, so never inside a graph) */
    if (cb->tune.ssm_ssd && cb->seq_runs && !cb->graph_mode && !cb->capturing && cb->h_seq && qr_cuda_ssm_ssd_supported(p)) {
        qr_cuda_ssd_runs runs;
        runs.n = 0;
        int32_t longest = 0;
        for (int32_t r0 = 0, r1; r0 < cb->n_tokens && runs.n <= QR_CUDA_SSD_MAX_RUNS; r0 = r1) {
            for (r1 = r0 + 1; r1 < cb->n_tokens && cb->h_seq[r1] == cb->h_seq[r0];) r1++;
            if (runs.n < QR_CUDA_SSD_MAX_RUNS) runs.seq[runs.n] = cb->h_seq[r0], runs.r0[runs.n] = r0, runs.len[runs.n] = r1 - r0;
            runs.n++;
            if (r1 - r0 > longest) longest = r1 - r0;
        }
        if (runs.n <= QR_CUDA_SSD_MAX_RUNS && longest >= cb->tune.ssm_ssd_min_rows) {
            cuda_ok(cb, qr_cuda_ssm_scan_ssd(state, xbc, dt, dt_stride, bd, ad, dd, &runs, p, y, cb->diverged_d,
                                             use_pdl(cb), cb->stream),
                    "ssm_scan (chunked)");
            return;
        }
    }
    cuda_ok(cb, qr_cuda_ssm_scan(state, xbc, dt, dt_stride, bd, ad, dd, cb->d_seq, cb->n_tokens, p, y, cb->diverged_d,
                                 use_pdl(cb), cb->stream),
            "ssm_scan");
}

static void gate_norm_next(qr_backend *be, const float *y, const float *z, int64_t z_stride, const qr_weight *w,
                           int64_t n_rows, const qr_ssm_params *p, float eps, float *out, const qr_weight *next) {
    cuda_backend *cb = CB(be);
    bool ok = true;
    const float *wd = f32_of(cb, w, "ssm_gate_norm", &ok);
    if (!ok) return;
    /* the out projection's activations quantized on the way (decode sizes, as cuda_add_rmsnorm does) */
    int kind = -1;
    act_ptrs a = {};
    const int64_t gs = p->d_inner / p->n_group;
    if (next && next->device && cb->tune.fuse && cb->tune.act_reuse && n_rows <= cb->tune.mmvq_max_rows) {
        const cuda_weight *cn = prepared(cb, next, "ssm_gate_norm");
        if (!cn) return;
        const int nk = qr_cuda_act_kind((qr_type)cn->v.type);
        if (cn->v.nb > 0 && cn->v.k == p->d_inner && nk <= 1 && gs % (nk == 0 ? 32 : 256) == 0) {
            if (!act_scratch(cb, nk, out, n_rows, p->d_inner, &a)) return;
            kind = nk;
        }
    }
    if (!cuda_ok(cb, qr_cuda_ssm_gate_norm(y, z, z_stride, wd, n_rows, p, eps, out, kind, a.q, a.d, a.s, a.g, use_pdl(cb),
                                           cb->stream),
                 "ssm_gate_norm"))
        return;
    cb->act_valid = false;
    if (kind >= 0) act_mark(cb, out, n_rows, p->d_inner, kind);
}

/* Exact mode ignores the hint a->next (it has no fusions); the shapes: checked by backend_check.c. */
void cuda_ssm_gate_norm(qr_backend *be, const qr_ssm_gate_norm_args *a) {
    cuda_backend *cb = CB(be);
    if (cb->exact) {
        bool ok = true;
        const float *wd = f32_of(cb, a->w, "ssm_gate_norm", &ok);
        if (ok) cuda_exact_ssm_gate_norm(cb, a->y, a->z, a->z_stride, wd, a->n_rows, a->p, a->eps, a->out);
        return;
    }
    gate_norm_next(be, a->y, a->z, a->z_stride, a->w, a->n_rows, a->p, a->eps, a->out, a->next);
}
