/* tok_map.c — the hash maps behind token lookup (text -> id) and BPE merges ((left, right) ->
 * rank), and small growable arrays. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

uint32_t qr_tok_hash(const char *s, size_t n) {
    /* FNV-1a over 8-byte words then the tail, finished with a murmur-style mix. */
    uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t)n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
    }
    for (; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return (uint32_t)h;
}

static uint32_t pow2_at_least(uint64_t n) {
    uint64_t c = 16;
    while (c < n) c <<= 1;
    return (uint32_t)c;
}

qr_status qr_tok_strmap_build(qr_tok_strmap *m, const char *const *data, const uint32_t *len, uint32_t n,
                              int64_t *first_dup) {
    memset(m, 0, sizeof *m);
    *first_dup = -1;
    m->cap = pow2_at_least((uint64_t)n * 2 + 1);
    m->slots = calloc(m->cap, sizeof *m->slots);
    if (!m->slots) {
        qr_tok_strmap_free(m);
        return QR_ERR_NOMEM;
    }
    m->key_data = data;
    m->key_len = len;
    uint32_t mask = m->cap - 1;
    for (uint32_t id = 0; id < n; id++) {
        uint32_t h = qr_tok_hash(data[id], len[id]);
        uint32_t i = h & mask;
        for (;;) {
            qr_tok_strmap_slot *s = &m->slots[i];
            if (s->id1 == 0) {
                s->id1 = id + 1;
                s->hash = h;
                m->count++;
                break;
            }
            uint32_t other = s->id1 - 1;
            if (s->hash == h && len[other] == len[id] && memcmp(data[other], data[id], len[id]) == 0) {
                s->id1 = id + 1; /* the later duplicate wins */
                if (*first_dup < 0) *first_dup = id;
                break;
            }
            i = (i + 1) & mask;
        }
    }
    return QR_OK;
}

void qr_tok_strmap_free(qr_tok_strmap *m) {
    free(m->slots);
    memset(m, 0, sizeof *m);
}

int32_t qr_tok_strmap_find(const qr_tok_strmap *m, const char *s, size_t n) {
    if (!m->cap) return -1;
    uint32_t h = qr_tok_hash(s, n);
    uint32_t mask = m->cap - 1;
    for (uint32_t i = h & mask;; i = (i + 1) & mask) {
        const qr_tok_strmap_slot *slot = &m->slots[i];
        if (slot->id1 == 0) return -1;
        uint32_t id = slot->id1 - 1;
        if (slot->hash == h && m->key_len[id] == n && memcmp(m->key_data[id], s, n) == 0) return (int32_t)id;
    }
}

void qr_tok_mergemap_free(qr_tok_mergemap *m) {
    free(m->slots);
    memset(m, 0, sizeof *m);
}

static uint32_t merge_hash(uint64_t key) {
    key ^= key >> 31;
    key *= 0x9e3779b97f4a7c15ull;
    key ^= key >> 29;
    return (uint32_t)key;
}

const qr_tok_merge_entry *qr_tok_merge_find(const qr_tok_mergemap *m, int32_t left, int32_t right) {
    if (!m->cap || left < 0 || right < 0) return NULL;
    uint64_t key = (((uint64_t)(uint32_t)left << 32) | (uint32_t)right) + 1;
    uint32_t mask = m->cap - 1;
    for (uint32_t i = merge_hash(key) & mask;; i = (i + 1) & mask) {
        const qr_tok_merge_entry *e = &m->slots[i];
        if (e->key == 0) return NULL;
        if (e->key == key) return e;
    }
}

void qr_tok_merge_insert(qr_tok_mergemap *m, int32_t left, int32_t right, int32_t rank, int32_t result) {
    uint64_t key = (((uint64_t)(uint32_t)left << 32) | (uint32_t)right) + 1;
    uint32_t mask = m->cap - 1;
    for (uint32_t i = merge_hash(key) & mask;; i = (i + 1) & mask) {
        qr_tok_merge_entry *e = &m->slots[i];
        if (e->key == key) return;
        if (e->key == 0) {
            e->key = key;
            e->rank = rank;
            e->result = result;
            m->count++;
            return;
        }
    }
}

qr_status qr_tok_mergemap_init(qr_tok_mergemap *m, uint32_t n) {
    m->count = 0;
    m->cap = pow2_at_least((uint64_t)n * 2 + 1);
    m->slots = calloc(m->cap, sizeof *m->slots);
    return m->slots ? QR_OK : QR_ERR_NOMEM;
}

bool qr_tok_ids_push(qr_tok_ids *a, int32_t id) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        int32_t *v = realloc(a->v, cap * sizeof *v);
        if (!v) return false;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = id;
    return true;
}

bool qr_tok_bytes_append(qr_tok_bytes *b, const void *data, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n) cap *= 2;
        char *v = realloc(b->v, cap);
        if (!v) return false;
        b->v = v;
        b->cap = cap;
    }
    if (n) memcpy(b->v + b->n, data, n);
    b->n += n;
    return true;
}
