/* test_kv_cache.c — paged KV cache bookkeeping: block allocation, slots, suffix removal, sharing
 * with copy-on-write, running out of blocks, and the invariants after random operation sequences. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kv/kv_cache.h"

/* Every block is either free (refcount 0, on the free list once) or held by exactly refcount
 * table entries; no sequence holds a block twice. */
static void check_invariants(const qr_kv_cache *kv) {
    int32_t *held = calloc((size_t)kv->n_blocks, sizeof(int32_t));
    int32_t *on_free = calloc((size_t)kv->n_blocks, sizeof(int32_t));
    for (int32_t s = 0; s < kv->n_seq_max; s++) {
        const int32_t *row = kv->block_table + (int64_t)s * kv->max_blocks;
        assert_true(kv->seq_len[s] <= kv->seq_blocks[s] * kv->block_size);
        for (int32_t b = 0; b < kv->max_blocks; b++) {
            if (b < kv->seq_blocks[s]) {
                assert_true(row[b] >= 0 && row[b] < kv->n_blocks);
                held[row[b]]++;
                for (int32_t c = 0; c < b; c++) assert_int_not_equal(row[c], row[b]);
            } else {
                assert_int_equal(row[b], -1);
            }
        }
    }
    for (int32_t i = 0; i < kv->n_free; i++) on_free[kv->free_list[i]]++;
    for (int32_t b = 0; b < kv->n_blocks; b++) {
        assert_int_equal(held[b], kv->refcount[b]);
        assert_int_equal(on_free[b], kv->refcount[b] == 0 ? 1 : 0);
    }
    free(held);
    free(on_free);
}

static void test_reserve_and_slots(void **state) {
    (void)state;
    qr_kv_cache *kv;
    char err[256];
    assert_int_equal(qr_kv_cache_create(8, 4, 2, 32, &kv, err, sizeof err), QR_OK);
    qr_kv_copy cow;
    assert_int_equal(qr_kv_cache_reserve(kv, 0, 6, &cow, err, sizeof err), QR_OK);
    assert_int_equal(cow.src, -1);
    assert_int_equal(kv->seq_blocks[0], 2);
    assert_int_equal(qr_kv_cache_n_free(kv), 6);
    /* slots: position p in block table[p / 4] at offset p % 4 */
    for (int p = 0; p < 6; p++) {
        const int32_t blk = kv->block_table[p / 4];
        assert_int_equal(qr_kv_cache_slot(kv, 0, p), blk * 4 + p % 4);
    }
    assert_int_equal(qr_kv_cache_slot(kv, 0, 8), -1); /* not reserved */
    assert_int_equal(qr_kv_cache_slot(kv, 1, 0), -1);
    qr_kv_cache_set_seq_len(kv, 0, 6);
    assert_int_equal(qr_kv_cache_seq_len(kv, 0), 6);
    /* a second sequence gets different blocks */
    assert_int_equal(qr_kv_cache_reserve(kv, 1, 4, &cow, err, sizeof err), QR_OK);
    assert_int_not_equal(qr_kv_cache_slot(kv, 1, 0) / 4, qr_kv_cache_slot(kv, 0, 0) / 4);
    assert_int_not_equal(qr_kv_cache_slot(kv, 1, 0) / 4, qr_kv_cache_slot(kv, 0, 4) / 4);
    check_invariants(kv);
    /* out of range arguments */
    assert_int_equal(qr_kv_cache_reserve(kv, 2, 1, &cow, err, sizeof err), QR_ERR_INVALID_ARG);
    assert_int_equal(qr_kv_cache_reserve(kv, 0, 33, &cow, err, sizeof err), QR_ERR_INVALID_ARG);
    qr_kv_cache_free(kv);
}

static void test_full_cache(void **state) {
    (void)state;
    qr_kv_cache *kv;
    char err[256];
    assert_int_equal(qr_kv_cache_create(4, 4, 2, 16, &kv, err, sizeof err), QR_OK);
    qr_kv_copy cow;
    assert_int_equal(qr_kv_cache_reserve(kv, 0, 12, &cow, err, sizeof err), QR_OK);
    /* 2 more blocks needed, 1 free: refused with a message, nothing changes */
    assert_int_equal(qr_kv_cache_reserve(kv, 1, 8, &cow, err, sizeof err), QR_ERR_NOMEM);
    assert_non_null(strstr(err, "KV cache full"));
    assert_int_equal(kv->seq_blocks[1], 0);
    assert_int_equal(qr_kv_cache_n_free(kv), 1);
    check_invariants(kv);
    /* freeing a suffix makes room */
    qr_kv_cache_set_seq_len(kv, 0, 12);
    assert_true(qr_kv_cache_seq_rm(kv, 0, 4, -1));
    assert_int_equal(qr_kv_cache_seq_len(kv, 0), 4);
    assert_int_equal(qr_kv_cache_n_free(kv), 3);
    assert_int_equal(qr_kv_cache_reserve(kv, 1, 8, &cow, err, sizeof err), QR_OK);
    check_invariants(kv);
    qr_kv_cache_free(kv);
}

static void test_seq_rm(void **state) {
    (void)state;
    qr_kv_cache *kv;
    char err[256];
    assert_int_equal(qr_kv_cache_create(16, 4, 3, 64, &kv, err, sizeof err), QR_OK);
    qr_kv_copy cow;
    for (int s = 0; s < 3; s++) {
        assert_int_equal(qr_kv_cache_reserve(kv, s, 10, &cow, err, sizeof err), QR_OK);
        qr_kv_cache_set_seq_len(kv, s, 10);
    }
    /* a hole in the middle is refused */
    assert_false(qr_kv_cache_seq_rm(kv, 1, 2, 5));
    assert_int_equal(qr_kv_cache_seq_len(kv, 1), 10);
    /* p1 beyond the end is a suffix */
    assert_true(qr_kv_cache_seq_rm(kv, 1, 5, 100));
    assert_int_equal(qr_kv_cache_seq_len(kv, 1), 5);
    assert_int_equal(kv->seq_blocks[1], 2);
    /* all sequences at once */
    assert_true(qr_kv_cache_seq_rm(kv, -1, 0, -1));
    for (int s = 0; s < 3; s++) assert_int_equal(qr_kv_cache_seq_len(kv, s), 0);
    assert_int_equal(qr_kv_cache_n_free(kv), 16);
    check_invariants(kv);
    assert_false(qr_kv_cache_seq_rm(kv, 3, 0, -1));
    qr_kv_cache_clear(kv);
    check_invariants(kv);
    qr_kv_cache_free(kv);
}

static void test_share_cow(void **state) {
    (void)state;
    qr_kv_cache *kv;
    char err[256];
    assert_int_equal(qr_kv_cache_create(16, 4, 2, 64, &kv, err, sizeof err), QR_OK);
    qr_kv_copy cow;
    assert_int_equal(qr_kv_cache_reserve(kv, 0, 10, &cow, err, sizeof err), QR_OK);
    qr_kv_cache_set_seq_len(kv, 0, 10);
    assert_int_equal(qr_kv_cache_seq_share(kv, 0, 1, 10, err, sizeof err), QR_OK);
    assert_int_equal(qr_kv_cache_seq_len(kv, 1), 10);
    for (int p = 0; p < 10; p++) assert_int_equal(qr_kv_cache_slot(kv, 1, p), qr_kv_cache_slot(kv, 0, p));
    check_invariants(kv);
    const int32_t shared_last = kv->block_table[2]; /* positions 8..9, partially filled */
    /* writing position 10 of seq 1 lands in the shared block: it must be copied first */
    assert_int_equal(qr_kv_cache_reserve(kv, 1, 11, &cow, err, sizeof err), QR_OK);
    assert_int_equal(cow.src, shared_last);
    assert_true(cow.dst >= 0 && cow.dst != shared_last);
    assert_int_equal(kv->block_table[kv->max_blocks + 2], cow.dst);
    assert_int_equal(kv->block_table[2], shared_last); /* seq 0 keeps its block */
    /* full blocks stay shared */
    assert_int_equal(kv->block_table[kv->max_blocks + 0], kv->block_table[0]);
    assert_int_equal(kv->refcount[kv->block_table[0]], 2);
    check_invariants(kv);
    /* seq 0 now owns its last block alone: no copy */
    assert_int_equal(qr_kv_cache_reserve(kv, 0, 11, &cow, err, sizeof err), QR_OK);
    assert_int_equal(cow.src, -1);
    /* sharing a prefix that ends on a block boundary copies nothing later */
    assert_int_equal(qr_kv_cache_seq_share(kv, 0, 1, 8, err, sizeof err), QR_OK);
    assert_int_equal(qr_kv_cache_reserve(kv, 1, 9, &cow, err, sizeof err), QR_OK);
    assert_int_equal(cow.src, -1);
    check_invariants(kv);
    assert_int_equal(qr_kv_cache_seq_share(kv, 0, 1, 50, err, sizeof err), QR_ERR_INVALID_ARG);
    assert_int_equal(qr_kv_cache_seq_share(kv, 0, 0, 5, err, sizeof err), QR_ERR_INVALID_ARG);
    qr_kv_cache_free(kv);
}

/* Random reserve / commit / remove / share sequences keep the invariants. */
static void test_random_ops(void **state) {
    (void)state;
    qr_kv_cache *kv;
    char err[256];
    assert_int_equal(qr_kv_cache_create(24, 3, 4, 40, &kv, err, sizeof err), QR_OK);
    uint32_t rng = 12345;
    for (int it = 0; it < 5000; it++) {
        rng = rng * 1103515245u + 12345u;
        const int32_t s = (int32_t)((rng >> 16) % 4), op = (int32_t)((rng >> 8) % 4), amount = (int32_t)((rng >> 20) % 9);
        qr_kv_copy cow;
        if (op == 0 || op == 1) {
            const int32_t n = qr_kv_cache_seq_len(kv, s) + amount;
            if (qr_kv_cache_reserve(kv, s, n, &cow, err, sizeof err) == QR_OK) qr_kv_cache_set_seq_len(kv, s, n);
        } else if (op == 2) {
            const int32_t len = qr_kv_cache_seq_len(kv, s);
            assert_true(qr_kv_cache_seq_rm(kv, s, len > amount ? len - amount : 0, -1));
        } else {
            const int32_t d = (s + 1) % 4, len = qr_kv_cache_seq_len(kv, s);
            assert_int_equal(qr_kv_cache_seq_share(kv, s, d, len > amount ? len - amount : 0, err, sizeof err), QR_OK);
        }
        check_invariants(kv);
    }
    qr_kv_cache_free(kv);
}

/* Invariants with the prefix cache on: table entries = refcount; refcount 0 blocks are either on
 * the free list (uncached) or on the LRU list (cached), exactly once. */
static void check_prefix_invariants(const qr_kv_cache *kv) {
    int32_t *held = calloc((size_t)kv->n_blocks, sizeof(int32_t));
    int32_t *seen = calloc((size_t)kv->n_blocks, sizeof(int32_t));
    for (int32_t s = 0; s < kv->n_seq_max; s++)
        for (int32_t b = 0; b < kv->seq_blocks[s]; b++) held[kv->block_table[(int64_t)s * kv->max_blocks + b]]++;
    for (int32_t i = 0; i < kv->n_free; i++) seen[kv->free_list[i]]++;
    int32_t n_lru = 0;
    for (int32_t b = kv->lru_head; b >= 0; b = kv->lru_next[b], n_lru++) {
        assert_true(kv->blk_cached[b]);
        seen[b]++;
    }
    assert_int_equal(n_lru, kv->n_lru);
    int32_t n_cached = 0;
    for (int32_t b = 0; b < kv->n_blocks; b++) {
        assert_int_equal(held[b], kv->refcount[b]);
        assert_int_equal(seen[b], kv->refcount[b] == 0 ? 1 : 0);
        n_cached += kv->blk_cached[b];
    }
    assert_int_equal(n_cached, kv->n_cached);
    free(held);
    free(seen);
}

/* Prefix cache: a second sequence with the same prompt reuses the full blocks (not the last token),
 * finished blocks wait on the LRU list, eviction happens only when the free list is empty, and a
 * different prefix does not match. */
static void test_prefix_cache(void **state) {
    (void)state;
    qr_kv_cache *kv;
    char err[256];
    assert_int_equal(qr_kv_cache_create(8, 4, 3, 32, &kv, err, sizeof err), QR_OK);
    assert_int_equal(qr_kv_cache_prefix_enable(kv, err, sizeof err), QR_OK);
    int32_t toks[12];
    for (int i = 0; i < 12; i++) toks[i] = 100 + i;
    qr_kv_copy cow;
    /* nothing cached yet */
    assert_int_equal(qr_kv_cache_prefix_attach(kv, 0, toks, 12), 0);
    assert_int_equal(qr_kv_cache_reserve(kv, 0, 12, &cow, err, sizeof err), QR_OK);
    qr_kv_cache_set_seq_len(kv, 0, 12);
    assert_int_equal(qr_kv_cache_prefix_commit(kv, 0, toks, 12), 3);
    assert_int_equal(qr_kv_cache_prefix_commit(kv, 0, toks, 12), 0); /* already registered */
    check_prefix_invariants(kv);
    /* same 12-token prompt: 2 blocks reused (the block with the last token is computed again) */
    assert_int_equal(qr_kv_cache_prefix_attach(kv, 1, toks, 12), 8);
    assert_int_equal(qr_kv_cache_seq_len(kv, 1), 8);
    assert_int_equal(qr_kv_cache_slot(kv, 1, 5), qr_kv_cache_slot(kv, 0, 5));
    assert_int_equal(kv->refcount[kv->block_table[0]], 2);
    /* a 13-token prompt with the same start reuses all 3 */
    int32_t longer[13];
    memcpy(longer, toks, sizeof toks);
    longer[12] = 7;
    assert_int_equal(qr_kv_cache_prefix_attach(kv, 2, longer, 13), 12);
    check_prefix_invariants(kv);
    /* finishing every sequence keeps the cached blocks (LRU), frees the others */
    assert_true(qr_kv_cache_seq_rm(kv, -1, 0, -1));
    check_prefix_invariants(kv);
    assert_int_equal(kv->n_lru, 3);
    assert_int_equal(qr_kv_cache_n_free(kv), 5);
    assert_int_equal(qr_kv_cache_n_available(kv), 8);
    /* a different first block matches nothing */
    int32_t other[12];
    memcpy(other, toks, sizeof toks);
    other[0] = 1;
    assert_int_equal(qr_kv_cache_prefix_attach(kv, 0, other, 12), 0);
    /* a writer into a cached block gets a copy: attach 8 positions, cut to 6, write position 6 */
    assert_int_equal(qr_kv_cache_prefix_attach(kv, 0, toks, 12), 8);
    const int32_t cached_b1 = kv->block_table[1];
    assert_true(qr_kv_cache_seq_rm(kv, 0, 6, -1));
    assert_int_equal(qr_kv_cache_reserve(kv, 0, 7, &cow, err, sizeof err), QR_OK);
    assert_int_equal(cow.src, cached_b1);
    assert_int_not_equal(kv->block_table[1], cached_b1);
    check_prefix_invariants(kv);
    assert_true(qr_kv_cache_seq_rm(kv, 0, 0, -1));
    /* filling the whole cache evicts cached blocks, oldest first */
    const uint64_t ev0 = kv->n_evicted;
    assert_int_equal(qr_kv_cache_reserve(kv, 1, 32, &cow, err, sizeof err), QR_OK);
    assert_int_equal(kv->n_evicted - ev0, 3);
    assert_int_equal(kv->n_cached, 0);
    check_prefix_invariants(kv);
    assert_int_equal(qr_kv_cache_reserve(kv, 2, 1, &cow, err, sizeof err), QR_ERR_NOMEM);
    qr_kv_cache_clear(kv);
    check_prefix_invariants(kv);
    assert_int_equal(qr_kv_cache_n_available(kv), 8);
    qr_kv_cache_free(kv);
}

/* Random operations with the prefix cache on keep its invariants. */
static void test_prefix_random(void **state) {
    (void)state;
    qr_kv_cache *kv;
    char err[256];
    assert_int_equal(qr_kv_cache_create(20, 4, 3, 40, &kv, err, sizeof err), QR_OK);
    assert_int_equal(qr_kv_cache_prefix_enable(kv, err, sizeof err), QR_OK);
    int32_t toks[3][40];
    uint32_t rng = 777;
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < 40; i++) toks[s][i] = i < 16 ? i : (int32_t)(s * 1000 + i); /* shared first 16 */
    for (int it = 0; it < 4000; it++) {
        rng = rng * 1103515245u + 12345u;
        const int32_t s = (int32_t)((rng >> 16) % 3), op = (int32_t)((rng >> 8) % 4), amount = (int32_t)((rng >> 20) % 9);
        qr_kv_copy cow;
        const int32_t len = qr_kv_cache_seq_len(kv, s);
        if (op == 0) {
            const int32_t n = len + amount > 40 ? 40 : len + amount;
            if (qr_kv_cache_reserve(kv, s, n, &cow, err, sizeof err) == QR_OK) qr_kv_cache_set_seq_len(kv, s, n);
        } else if (op == 1) {
            qr_kv_cache_prefix_commit(kv, s, toks[s], len);
        } else if (op == 2) {
            assert_true(qr_kv_cache_seq_rm(kv, s, amount < 4 ? 0 : len / 2, -1));
        } else if (len == 0) {
            const int32_t got = qr_kv_cache_prefix_attach(kv, s, toks[s], 1 + amount * 4);
            assert_true(got % 4 == 0 && got <= amount * 4);
        }
        check_prefix_invariants(kv);
    }
    qr_kv_cache_free(kv);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reserve_and_slots), cmocka_unit_test(test_full_cache), cmocka_unit_test(test_seq_rm),
        cmocka_unit_test(test_share_cow),         cmocka_unit_test(test_random_ops),
        cmocka_unit_test(test_prefix_cache),      cmocka_unit_test(test_prefix_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
