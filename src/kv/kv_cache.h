/* kv_cache.h — bookkeeping of the paged KV cache (vLLM-style): fixed-size blocks of token slots,
 * one block table per sequence, a free list and per-block reference counts.
 *
 * The K/V data itself lives in backend memory (qr_kv_storage, see backend/backend.h); this module
 * only decides which physical block holds which positions. Invariant: position p of sequence s is
 * stored in block table[s][p / block_size] at offset p % block_size, so a sequence's positions are
 * always 0 .. len-1 (append at the end, remove a suffix).
 *
 * Reference counts leave room for prefix sharing: a block may appear in several sequences' tables
 * (refcount > 1). Before positions are written into a shared block, qr_kv_cache_reserve gives the
 * sequence its own copy (copy-on-write) and reports the (src, dst) pair, which the caller copies
 * with the backend's kv_copy_block.
 */
#ifndef QR_KV_KV_CACHE_H
#define QR_KV_KV_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quarrel.h"

typedef struct qr_kv_cache {
    int32_t n_blocks;     /* physical blocks */
    int32_t block_size;   /* token slots per block */
    int32_t n_seq_max;    /* sequences (rows of block_table) */
    int32_t max_blocks;   /* columns of block_table = blocks one sequence may hold */
    int32_t *block_table; /* [n_seq_max][max_blocks] physical block id, -1 = none */
    int32_t *seq_len;     /* [n_seq_max] positions stored (0 .. len-1) */
    int32_t *seq_blocks;  /* [n_seq_max] blocks held (>= ceil(len / block_size)) */
    int32_t *refcount;    /* [n_blocks] tables holding each block (0 = free) */
    int32_t *free_list;   /* [n_blocks] stack of free block ids */
    int32_t n_free;       /* entries in free_list */
    /* prefix cache (off until qr_kv_cache_prefix_enable; all NULL/0 while off) */
    bool prefix_on;
    uint64_t *blk_hash;   /* [n_blocks] chain hash of a cached full block (its tokens + its parent's hash) */
    uint64_t *blk_parent; /* [n_blocks] chain hash of the previous block (0 for the first block) */
    int32_t *blk_tokens;  /* [n_blocks][block_size] tokens of a cached block (exact match check) */
    uint8_t *blk_cached;  /* [n_blocks] 1 = registered in the prefix hash table */
    int32_t *hash_head;   /* [hash_cap] first cached block of each bucket, -1 = empty */
    int32_t *hash_next;   /* [n_blocks] next block of the same bucket */
    int32_t hash_cap;     /* buckets, a power of two */
    int32_t *lru_prev, *lru_next; /* [n_blocks] doubly linked list of cached blocks with refcount 0 */
    int32_t lru_head, lru_tail;   /* oldest / newest evictable block, -1 = none */
    int32_t n_lru;        /* evictable cached blocks (refcount 0, not on free_list) */
    int32_t n_cached;     /* cached blocks (in use or evictable) */
    uint64_t n_evicted;   /* cached blocks evicted to satisfy allocations, since create */
} qr_kv_cache;

/* A copy-on-write request: copy every layer of block src into block dst. */
typedef struct qr_kv_copy {
    int32_t src, dst;
} qr_kv_copy;

/* Creates the bookkeeping for n_blocks blocks of block_size slots and n_seq_max sequences, each of
 * at most max_seq_len positions. Free with qr_kv_cache_free. */
qr_status qr_kv_cache_create(int32_t n_blocks, int32_t block_size, int32_t n_seq_max, int32_t max_seq_len,
                             qr_kv_cache **out, char *err, size_t err_len);
void qr_kv_cache_free(qr_kv_cache *kv);

/* Positions stored for seq (0 when seq is out of range). */
int32_t qr_kv_cache_seq_len(const qr_kv_cache *kv, int32_t seq);

/* Ensures sequence seq owns blocks for positions [0, n_pos), and that the block receiving position
 * seq_len (the next one written) is not shared. A shared block is replaced by a fresh one and the
 * pair is written to *cow (cow->src = -1 when nothing must be copied). On failure (too few free
 * blocks, n_pos beyond max_seq_len) nothing changes and the message says how many blocks were
 * needed and free. */
qr_status qr_kv_cache_reserve(qr_kv_cache *kv, int32_t seq, int32_t n_pos, qr_kv_copy *cow, char *err,
                              size_t err_len);

/* Cache slot (block * block_size + offset) of position pos of seq; -1 when no block holds it. */
int32_t qr_kv_cache_slot(const qr_kv_cache *kv, int32_t seq, int32_t pos);

/* Records that positions [0, len) of seq are now valid (after a successful forward pass).
 * len must not exceed the reserved blocks. */
void qr_kv_cache_set_seq_len(qr_kv_cache *kv, int32_t seq, int32_t len);

/* Removes positions [p0, p1) of seq (p1 < 0: to the end); seq < 0: every sequence. Only a suffix
 * can be removed (p1 < 0 or p1 >= len); returns false (and changes nothing) otherwise. Blocks no
 * longer needed are released. p0 <= 0 clears the sequence. */
bool qr_kv_cache_seq_rm(qr_kv_cache *kv, int32_t seq, int32_t p0, int32_t p1);

/* Empties every sequence; all blocks become free. */
void qr_kv_cache_clear(qr_kv_cache *kv);

/* Makes dst a copy of the first n_pos positions of src by sharing src's blocks (refcount + 1);
 * dst's previous contents are dropped. The partially filled last block is shared too, and is
 * copied on the next write into it (see qr_kv_cache_reserve). */
qr_status qr_kv_cache_seq_share(qr_kv_cache *kv, int32_t src, int32_t dst, int32_t n_pos, char *err, size_t err_len);

/* Blocks on the free list. */
int32_t qr_kv_cache_n_free(const qr_kv_cache *kv);

/* ---------------------------------------------------------------------------------------------
 * Prefix cache. Full blocks of a sequence can be registered under a chain hash of their tokens
 * (hash of the block's block_size tokens and the previous block's hash), so a later sequence whose
 * prompt starts with the same tokens takes those blocks into its table (refcount + 1) instead of
 * computing them again. A registered block whose refcount drops to 0 is not freed: it waits on an
 * LRU list and is evicted (oldest first) only when an allocation finds the free list empty. A
 * cached block is immutable: writing into one (after a suffix removal) copies it first.
 * While the prefix cache is on, "available" blocks = free list + LRU list.
 */

/* Turns the prefix cache on (allocates its tables; idempotent). QR_ERR_NOMEM on failure. */
qr_status qr_kv_cache_prefix_enable(qr_kv_cache *kv, char *err, size_t err_len);

/* For an empty sequence seq: takes the longest run of cached blocks that matches tokens[0..n) block
 * by block, leaving at least one token of the prompt uncovered (so the caller still computes the
 * logits of the last prompt token). Sets the sequence length to the positions covered and returns
 * it (a multiple of block_size; 0 when nothing matched, the cache is off, or seq is not empty). */
int32_t qr_kv_cache_prefix_attach(qr_kv_cache *kv, int32_t seq, const int32_t *tokens, int32_t n);

/* Registers the full blocks of seq that hold tokens[0..n) (n is capped to the sequence length).
 * Blocks already registered, and blocks whose content is already cached in another block, are
 * skipped. Returns the number of newly registered blocks. */
int32_t qr_kv_cache_prefix_commit(qr_kv_cache *kv, int32_t seq, const int32_t *tokens, int32_t n);

/* Blocks that an allocation can take now: free list + evictable cached blocks. */
int32_t qr_kv_cache_n_available(const qr_kv_cache *kv);

#endif /* QR_KV_KV_CACHE_H */
