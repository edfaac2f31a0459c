/* kv_cache.c — paged KV cache bookkeeping: block tables, free list, refcounts, copy-on-write, and the
 * prefix cache (chain hashes of full blocks, LRU list of evictable cached blocks). */
#include "kv/kv_cache.h"

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
    free(kv->blk_hash);
    free(kv->blk_parent);
    free(kv->blk_tokens);
    free(kv->blk_cached);
    free(kv->hash_head);
    free(kv->hash_next);
    free(kv->lru_prev);
    free(kv->lru_next);
    free(kv);
}

/* Empties the prefix cache's tables (every block uncached, LRU list empty). */
static void prefix_reset(qr_kv_cache *kv) {
    if (!kv->prefix_on) return;
    memset(kv->blk_cached, 0, (size_t)kv->n_blocks);
    for (int32_t i = 0; i < kv->hash_cap; i++) kv->hash_head[i] = -1;
    for (int32_t b = 0; b < kv->n_blocks; b++) kv->hash_next[b] = kv->lru_prev[b] = kv->lru_next[b] = -1;
    kv->lru_head = kv->lru_tail = -1;
    kv->n_lru = kv->n_cached = 0;
}

void qr_kv_cache_clear(qr_kv_cache *kv) {
    for (int64_t i = 0; i < (int64_t)kv->n_seq_max * kv->max_blocks; i++) kv->block_table[i] = -1;
    memset(kv->seq_len, 0, sizeof(int32_t) * (size_t)kv->n_seq_max);
    memset(kv->seq_blocks, 0, sizeof(int32_t) * (size_t)kv->n_seq_max);
    memset(kv->refcount, 0, sizeof(int32_t) * (size_t)kv->n_blocks);
    /* lowest ids on top of the stack */
    for (int32_t i = 0; i < kv->n_blocks; i++) kv->free_list[i] = kv->n_blocks - 1 - i;
    kv->n_free = kv->n_blocks;
    prefix_reset(kv);
}

int32_t qr_kv_cache_seq_len(const qr_kv_cache *kv, int32_t seq) {
    return seq >= 0 && seq < kv->n_seq_max ? kv->seq_len[seq] : 0;
}

int32_t qr_kv_cache_n_free(const qr_kv_cache *kv) { return kv->n_free; }

static int32_t *table_row(qr_kv_cache *kv, int32_t seq) { return kv->block_table + (int64_t)seq * kv->max_blocks; }

/* ---- prefix cache internals ---- */

static void lru_unlink(qr_kv_cache *kv, int32_t b) {
    const int32_t p = kv->lru_prev[b], n = kv->lru_next[b];
    if (p >= 0) kv->lru_next[p] = n; else kv->lru_head = n;
    if (n >= 0) kv->lru_prev[n] = p; else kv->lru_tail = p;
    kv->lru_prev[b] = kv->lru_next[b] = -1;
    kv->n_lru--;
}

static void lru_push_tail(qr_kv_cache *kv, int32_t b) {
    kv->lru_prev[b] = kv->lru_tail;
    kv->lru_next[b] = -1;
    if (kv->lru_tail >= 0) kv->lru_next[kv->lru_tail] = b; else kv->lru_head = b;
    kv->lru_tail = b;
    kv->n_lru++;
}

/* Chain hash of one block: FNV-1a style over the parent hash and the tokens, then a final mix.
 * Never 0 (0 marks "no parent"). */
static uint64_t block_hash(uint64_t parent, const int32_t *tokens, int32_t n) {
    uint64_t h = 0xcbf29ce484222325ull ^ (parent * 0x9e3779b97f4a7c15ull);
    for (int32_t i = 0; i < n; i++) {
        h ^= (uint32_t)tokens[i];
        h *= 0x100000001b3ull;
        h ^= h >> 29;
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h ? h : 1;
}

/* The cached block holding exactly these tokens after `parent`, or -1. */
static int32_t prefix_find(const qr_kv_cache *kv, uint64_t h, uint64_t parent, const int32_t *tokens) {
    for (int32_t b = kv->hash_head[h & (uint64_t)(kv->hash_cap - 1)]; b >= 0; b = kv->hash_next[b])
        if (kv->blk_hash[b] == h && kv->blk_parent[b] == parent &&
            !memcmp(kv->blk_tokens + (int64_t)b * kv->block_size, tokens, sizeof(int32_t) * (size_t)kv->block_size))
            return b;
    return -1;
}

/* Removes cached block b from the hash table (it stays allocated). */
static void prefix_uncache(qr_kv_cache *kv, int32_t b) {
    int32_t *link = &kv->hash_head[kv->blk_hash[b] & (uint64_t)(kv->hash_cap - 1)];
    while (*link >= 0 && *link != b) link = &kv->hash_next[*link];
    if (*link == b) *link = kv->hash_next[b];
    kv->hash_next[b] = -1;
    kv->blk_cached[b] = 0;
    kv->n_cached--;
}

static bool is_cached(const qr_kv_cache *kv, int32_t b) { return kv->prefix_on && kv->blk_cached[b]; }

static void block_unref(qr_kv_cache *kv, int32_t b) {
    if (--kv->refcount[b] == 0) {
        if (is_cached(kv, b)) lru_push_tail(kv, b);
        else kv->free_list[kv->n_free++] = b;
    }
}

/* Takes a block: from the free list, else by evicting the least recently used cached block.
 * The caller has checked qr_kv_cache_n_available() first. */
static int32_t block_take(qr_kv_cache *kv) {
    int32_t b;
    if (kv->n_free > 0) {
        b = kv->free_list[--kv->n_free];
    } else {
        b = kv->lru_head;
        lru_unlink(kv, b);
        prefix_uncache(kv, b);
        kv->n_evicted++;
    }
    kv->refcount[b] = 1;
    return b;
}

int32_t qr_kv_cache_n_available(const qr_kv_cache *kv) { return kv->n_free + (kv->prefix_on ? kv->n_lru : 0); }

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
    const bool must_cow = n_pos > kv->seq_len[seq] && wblk < have &&
                          (kv->refcount[row[wblk]] > 1 || is_cached(kv, row[wblk]));
    const int32_t extra = (need > have ? need - have : 0) + (must_cow ? 1 : 0);
    if (extra > qr_kv_cache_n_available(kv))
        return qr_errf(err, err_len, QR_ERR_NOMEM,
                       "KV cache full: sequence %d needs %d more blocks of %d tokens but %d are free (n_ctx too small "
                       "for the active sequences; free some with seq_rm or raise n_ctx)",
                       seq, extra, kv->block_size, qr_kv_cache_n_available(kv));
    if (must_cow) {
        /* the old block is referenced by row[wblk] (refcount >= 1), so eviction cannot pick it */
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
        if (p0 < kv->seq_len[s] || (p0 == 0 && kv->seq_blocks[s] > 0)) truncate_seq(kv, s, p0);
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

/* ---- prefix cache API ---- */

qr_status qr_kv_cache_prefix_enable(qr_kv_cache *kv, char *err, size_t err_len) {
    if (kv->prefix_on) return QR_OK;
    int32_t cap = 16;
    while (cap < 2 * kv->n_blocks && cap < (1 << 28)) cap *= 2;
    const size_t nb = (size_t)kv->n_blocks;
    kv->blk_hash = calloc(nb, sizeof(uint64_t));
    kv->blk_parent = calloc(nb, sizeof(uint64_t));
    kv->blk_tokens = calloc(nb * (size_t)kv->block_size, sizeof(int32_t));
    kv->blk_cached = calloc(nb, 1);
    kv->hash_head = malloc(sizeof(int32_t) * (size_t)cap);
    kv->hash_next = malloc(sizeof(int32_t) * nb);
    kv->lru_prev = malloc(sizeof(int32_t) * nb);
    kv->lru_next = malloc(sizeof(int32_t) * nb);
    if (!kv->blk_hash || !kv->blk_parent || !kv->blk_tokens || !kv->blk_cached || !kv->hash_head || !kv->hash_next ||
        !kv->lru_prev || !kv->lru_next)
        return qr_errf(err, err_len, QR_ERR_NOMEM, "kv cache: out of memory for the prefix cache of %d blocks",
                       kv->n_blocks);
    kv->hash_cap = cap;
    kv->prefix_on = true;
    prefix_reset(kv);
    return QR_OK;
}

int32_t qr_kv_cache_prefix_attach(qr_kv_cache *kv, int32_t seq, const int32_t *tokens, int32_t n) {
    if (!kv->prefix_on || seq < 0 || seq >= kv->n_seq_max || kv->seq_len[seq] != 0 || n < 2) return 0;
    truncate_seq(kv, seq, 0); /* drop blocks reserved but never filled */
    const int32_t bs = kv->block_size;
    int32_t max_b = (n - 1) / bs;
    if (max_b > kv->max_blocks) max_b = kv->max_blocks;
    int32_t *row = table_row(kv, seq);
    uint64_t parent = 0;
    int32_t nb = 0;
    for (; nb < max_b; nb++) {
        const int32_t *t = tokens + (int64_t)nb * bs;
        const uint64_t h = block_hash(parent, t, bs);
        const int32_t b = prefix_find(kv, h, parent, t);
        if (b < 0) break;
        if (kv->refcount[b] == 0) lru_unlink(kv, b);
        kv->refcount[b]++;
        row[nb] = b;
        parent = h;
    }
    kv->seq_blocks[seq] = nb;
    kv->seq_len[seq] = nb * bs;
    return nb * bs;
}

int32_t qr_kv_cache_prefix_commit(qr_kv_cache *kv, int32_t seq, const int32_t *tokens, int32_t n) {
    if (!kv->prefix_on || seq < 0 || seq >= kv->n_seq_max) return 0;
    if (n > kv->seq_len[seq]) n = kv->seq_len[seq];
    const int32_t bs = kv->block_size, full = n / bs;
    const int32_t *row = table_row(kv, seq);
    uint64_t parent = 0;
    int32_t added = 0;
    for (int32_t i = 0; i < full; i++) {
        const int32_t *t = tokens + (int64_t)i * bs;
        const uint64_t h = block_hash(parent, t, bs);
        const int32_t b = row[i];
        if (!kv->blk_cached[b] && prefix_find(kv, h, parent, t) < 0) {
            kv->blk_cached[b] = 1;
            kv->blk_hash[b] = h;
            kv->blk_parent[b] = parent;
            memcpy(kv->blk_tokens + (int64_t)b * bs, t, sizeof(int32_t) * (size_t)bs);
            const int32_t bucket = (int32_t)(h & (uint64_t)(kv->hash_cap - 1));
            kv->hash_next[b] = kv->hash_head[bucket];
            kv->hash_head[bucket] = b;
            kv->n_cached++;
            added++;
        }
        parent = h;
    }
    return added;
}
