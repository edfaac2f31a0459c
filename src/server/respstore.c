/* respstore.c — the bounded LRU + TTL store of /v1/responses objects (see respstore.h). A plain array
 * scanned linearly: at most a thousand entries, each lookup is far cheaper than the generation it serves. */
#include "server/respstore.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

typedef struct entry {
    char id[64];
    char owner[40];
    json_t *response, *history; /* owned copies */
    size_t bytes;               /* serialized size of both */
    double last_used;           /* qr_time_s */
} entry;

struct srv_resp_store {
    pthread_mutex_t mu;
    entry *e;                   /* [n] */
    int32_t n, max;
    size_t bytes, max_bytes;
    double ttl_s;
};

srv_resp_store *srv_resp_store_create(int32_t max_entries, size_t max_bytes, double ttl_s) {
    srv_resp_store *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->e = calloc((size_t)(max_entries > 0 ? max_entries : 1), sizeof *s->e);
    if (!s->e) {
        free(s);
        return NULL;
    }
    pthread_mutex_init(&s->mu, NULL);
    s->max = max_entries > 0 ? max_entries : 1;
    s->max_bytes = max_bytes;
    s->ttl_s = ttl_s;
    return s;
}

static void drop(srv_resp_store *s, int32_t i) {
    json_decref(s->e[i].response);
    json_decref(s->e[i].history);
    s->bytes -= s->e[i].bytes;
    s->e[i] = s->e[--s->n];
}

void srv_resp_store_free(srv_resp_store *s) {
    if (!s) return;
    while (s->n > 0) drop(s, 0);
    free(s->e);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* Size of j as compact JSON (0 for NULL). */
static size_t json_bytes(const json_t *j) {
    if (!j) return 0;
    return json_dumpb(j, NULL, 0, JSON_COMPACT);
}

/* Index of the live entry id of owner, or -1; expired entries met on the way are dropped. Locked. */
static int32_t find(srv_resp_store *s, const char *id, const char *owner, double now) {
    for (int32_t i = 0; i < s->n;) {
        if (now - s->e[i].last_used > s->ttl_s) {
            drop(s, i);
            continue;
        }
        if (!strcmp(s->e[i].id, id)) return strcmp(s->e[i].owner, owner) ? -1 : i;
        i++;
    }
    return -1;
}

static void drop_lru(srv_resp_store *s) {
    int32_t old = 0;
    for (int32_t i = 1; i < s->n; i++)
        if (s->e[i].last_used < s->e[old].last_used) old = i;
    drop(s, old);
}

int srv_resp_store_put(srv_resp_store *s, const char *id, const char *owner, const json_t *response,
                       const json_t *history) {
    const size_t bytes = json_bytes(response) + json_bytes(history);
    if (bytes > s->max_bytes || strlen(id) >= sizeof s->e[0].id || strlen(owner) >= sizeof s->e[0].owner) return -1;
    json_t *r = json_deep_copy(response), *h = history ? json_deep_copy(history) : NULL;
    if (!r || (history && !h)) {
        json_decref(r);
        json_decref(h);
        return -1;
    }
    const double now = qr_time_s();
    pthread_mutex_lock(&s->mu);
    const int32_t old = find(s, id, owner, now);
    if (old >= 0) drop(s, old);
    while (s->n > 0 && (s->n >= s->max || s->bytes + bytes > s->max_bytes)) drop_lru(s);
    entry *e = &s->e[s->n++];
    memset(e, 0, sizeof *e);
    strcpy(e->id, id);
    strcpy(e->owner, owner);
    e->response = r;
    e->history = h;
    e->bytes = bytes;
    e->last_used = now;
    s->bytes += bytes;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

int srv_resp_store_get(srv_resp_store *s, const char *id, const char *owner, json_t **response, json_t **history) {
    if (response) *response = NULL;
    if (history) *history = NULL;
    pthread_mutex_lock(&s->mu);
    const int32_t i = find(s, id, owner, qr_time_s());
    int rc = -1;
    if (i >= 0) {
        s->e[i].last_used = qr_time_s();
        if (response) *response = json_deep_copy(s->e[i].response);
        if (history) *history = s->e[i].history ? json_deep_copy(s->e[i].history) : json_array();
        rc = (response && !*response) || (history && !*history) ? -1 : 0;
    }
    pthread_mutex_unlock(&s->mu);
    if (rc < 0) {
        if (response) json_decref(*response), *response = NULL;
        if (history) json_decref(*history), *history = NULL;
    }
    return rc;
}

int srv_resp_store_delete(srv_resp_store *s, const char *id, const char *owner) {
    pthread_mutex_lock(&s->mu);
    const int32_t i = find(s, id, owner, qr_time_s());
    if (i >= 0) drop(s, i);
    pthread_mutex_unlock(&s->mu);
    return i >= 0 ? 0 : -1;
}

int32_t srv_resp_store_count(srv_resp_store *s) {
    pthread_mutex_lock(&s->mu);
    const int32_t n = s->n;
    pthread_mutex_unlock(&s->mu);
    return n;
}
