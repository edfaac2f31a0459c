/* kv_cache.c — paged KV cache bookkeeping: block tables, free list, refcounts, copy-on-write. */
#include "runtime/kv_cache.h"

#include <stdlib.h>
#include <string.h>

#include "util/util.h"

qr_status qr_kv_cache_create(int32_t n_blocks, int32_t block_size, int32_t n_seq_max, int32_t max_seq_len,
                             qr_kv_cache **out, char *err, size_t err_len) {
    *out = NULL;
    if (n_blocks < 1 || block_size < 1 || n_seq_max < 1 || max_seq_len < 1)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG,
                       "kv cache: n_blocks %d, block_size %d, n_seq_max %d, max_seq_len %d must all be >= 1", n_blocks,
                       block_size, n_seq_max, max_seq_len);
    qr_kv_cache *kv = calloc(1, sizeof *kv);
    if (!kv) goto oom;
    kv->n_blocks = n_blocks;
    kv->block_size = block_size;
    kv->n_seq_max = n_seq_max;
    kv->max_blocks = (int32_t)(((int64_t)max_seq_len + block_size - 1) / block_size);
    kv->block_table = malloc(sizeof(int32_t) * (size_t)n_seq_max * (size_t)kv->max_blocks);
    kv->seq_len = calloc((size_t)n_seq_max, sizeof(int32_t));
    kv->seq_blocks = calloc((size_t)n_seq_max, sizeof(int32_t));
    kv->refcount = calloc((size_t)n_blocks, sizeof(int32_t));
    kv->free_list = malloc(sizeof(int32_t) * (size_t)n_blocks);
    if (!kv->block_table || !kv->seq_len || !kv->seq_blocks || !kv->refcount || !kv->free_list) goto oom;
    qr_kv_cache_clear(kv);
    *out = kv;
    return QR_OK;
oom:
    qr_kv_cache_free(kv);
    return qr_errf(err, err_len, QR_ERR_NOMEM, "kv cache: out of memory for %d blocks", n_blocks);
}

void qr_kv_cache_free(qr_kv_cache *kv) {
    if (!kv) return;
    free(kv->block_table);
    free(kv->seq_len);
    free(kv->seq_blocks);
    free(kv->refcount);
    free(kv->free_list);
    free(kv);
}

void qr_kv_cache_clear(qr_kv_cache *kv) {
    for (int64_t i = 0; i < (int64_t)kv->n_seq_max * kv->max_blocks; i++) kv->block_table[i] = -1;
    memset(kv->seq_len, 0, sizeof(int32_t) * (size_t)kv->n_seq_max);
    memset(kv->seq_blocks, 0, sizeof(int32_t) * (size_t)kv->n_seq_max);
    memset(kv->refcount, 0, sizeof(int32_t) * (size_t)kv->n_blocks);
    /* lowest ids on top of the stack */
    for (int32_t i = 0; i < kv->n_blocks; i++) kv->free_list[i] = kv->n_blocks - 1 - i;
    kv->n_free = kv->n_blocks;
}

int32_t qr_kv_cache_seq_len(const qr_kv_cache *kv, int32_t seq) {
    return seq >= 0 && seq < kv->n_seq_max ? kv->seq_len[seq] : 0;
}

int32_t qr_kv_cache_n_free(const qr_kv_cache *kv) { return kv->n_free; }

static int32_t *table_row(qr_kv_cache *kv, int32_t seq) { return kv->block_table + (int64_t)seq * kv->max_blocks; }

static void block_unref(qr_kv_cache *kv, int32_t b) {
    if (--kv->refcount[b] == 0) kv->free_list[kv->n_free++] = b;
}

static int32_t block_take(qr_kv_cache *kv) {
    int32_t b = kv->free_list[--kv->n_free];
    kv->refcount[b] = 1;
    return b;
}

qr_status qr_kv_cache_reserve(qr_kv_cache *kv, int32_t seq, int32_t n_pos, qr_kv_copy *cow, char *err,
                              size_t err_len) {
    if (cow) cow->src = cow->dst = -1;
    if (seq < 0 || seq >= kv->n_seq_max)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "sequence id %d out of range [0, %d)", seq, kv->n_seq_max);
    if (n_pos < 0 || n_pos > kv->max_blocks * kv->block_size)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG,
                       "sequence %d would hold %d positions; the context holds at most %d per sequence", seq, n_pos,
                       kv->max_blocks * kv->block_size);
    int32_t *row = table_row(kv, seq);
    const int32_t need = (n_pos + kv->block_size - 1) / kv->block_size;
    const int32_t have = kv->seq_blocks[seq];
    /* the block that receives the next position, when it already exists and is shared */
    const int32_t wblk = kv->seq_len[seq] / kv->block_size;
    const bool must_cow = n_pos > kv->seq_len[seq] && wblk < have && kv->refcount[row[wblk]] > 1;
    const int32_t extra = (need > have ? need - have : 0) + (must_cow ? 1 : 0);
    if (extra > kv->n_free)
        return qr_errf(err, err_len, QR_ERR_NOMEM,
                       "KV cache full: sequence %d needs %d more blocks of %d tokens but %d are free (n_ctx too small "
                       "for the active sequences; free some with seq_rm or raise n_ctx)",
                       seq, extra, kv->block_size, kv->n_free);
    if (must_cow) {
        const int32_t nb = block_take(kv);
        if (cow) cow->src = row[wblk], cow->dst = nb;
        block_unref(kv, row[wblk]);
        row[wblk] = nb;
    }
    for (int32_t b = have; b < need; b++) row[b] = block_take(kv);
    if (need > have) kv->seq_blocks[seq] = need;
    return QR_OK;
}

int32_t qr_kv_cache_slot(const qr_kv_cache *kv, int32_t seq, int32_t pos) {
    if (seq < 0 || seq >= kv->n_seq_max || pos < 0) return -1;
    const int32_t b = pos / kv->block_size;
    if (b >= kv->seq_blocks[seq]) return -1;
    const int32_t phys = kv->block_table[(int64_t)seq * kv->max_blocks + b];
    return phys < 0 ? -1 : phys * kv->block_size + pos % kv->block_size;
}

void qr_kv_cache_set_seq_len(qr_kv_cache *kv, int32_t seq, int32_t len) {
    if (seq < 0 || seq >= kv->n_seq_max || len < 0 || len > kv->seq_blocks[seq] * kv->block_size) return;
    kv->seq_len[seq] = len;
}

/* Truncates seq to len positions, releasing the blocks past the last one needed. */
static void truncate_seq(qr_kv_cache *kv, int32_t seq, int32_t len) {
    int32_t *row = table_row(kv, seq);
    const int32_t keep = (len + kv->block_size - 1) / kv->block_size;
    for (int32_t b = keep; b < kv->seq_blocks[seq]; b++) {
        block_unref(kv, row[b]);
        row[b] = -1;
    }
    if (kv->seq_blocks[seq] > keep) kv->seq_blocks[seq] = keep;
    kv->seq_len[seq] = len;
}

bool qr_kv_cache_seq_rm(qr_kv_cache *kv, int32_t seq, int32_t p0, int32_t p1) {
    if (seq >= kv->n_seq_max) return false;
    const int32_t lo = seq < 0 ? 0 : seq, hi = seq < 0 ? kv->n_seq_max : seq + 1;
    if (p0 < 0) p0 = 0;
    for (int32_t s = lo; s < hi; s++)
        if (p1 >= 0 && p1 < kv->seq_len[s] && p0 < p1) return false; /* a hole in the middle */
    for (int32_t s = lo; s < hi; s++)
        if (p0 < kv->seq_len[s]) truncate_seq(kv, s, p0);
    return true;
}

qr_status qr_kv_cache_seq_share(qr_kv_cache *kv, int32_t src, int32_t dst, int32_t n_pos, char *err, size_t err_len) {
    if (src < 0 || src >= kv->n_seq_max || dst < 0 || dst >= kv->n_seq_max || src == dst)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "seq_share: bad sequence ids %d -> %d", src, dst);
    if (n_pos < 0 || n_pos > kv->seq_len[src])
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "seq_share: sequence %d holds %d positions, not %d", src,
                       kv->seq_len[src], n_pos);
    truncate_seq(kv, dst, 0);
    const int32_t nb = (n_pos + kv->block_size - 1) / kv->block_size;
    int32_t *rs = table_row(kv, src), *rd = table_row(kv, dst);
    for (int32_t b = 0; b < nb; b++) {
        rd[b] = rs[b];
        kv->refcount[rs[b]]++;
    }
    kv->seq_blocks[dst] = nb;
    kv->seq_len[dst] = n_pos;
    return QR_OK;
}
