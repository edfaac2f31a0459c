/* respstore.h — the bounded store of /v1/responses objects (OpenAI's `store` and
 * `previous_response_id`): at most SRV_RESP_STORE_MAX entries and SRV_RESP_STORE_BYTES bytes of JSON,
 * each kept SRV_RESP_STORE_TTL_S seconds after its last use; past a bound the least recently used
 * entry goes. Entries belong to the API key that made them (another key sees 404). Thread-safe. */
#ifndef QR_SERVER_RESPSTORE_H
#define QR_SERVER_RESPSTORE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define SRV_RESP_STORE_MAX 1000
#define SRV_RESP_STORE_BYTES (64u << 20)
#define SRV_RESP_STORE_TTL_S 3600.0

typedef struct srv_resp_store srv_resp_store;

/* A store of at most max_entries entries and max_bytes bytes (serialized JSON), each expiring ttl_s
 * seconds after its last use. NULL on OOM. */
srv_resp_store *srv_resp_store_create(int32_t max_entries, size_t max_bytes, double ttl_s);
void srv_resp_store_free(srv_resp_store *s);

/* Stores (copies of) response and history under id for owner (a key id, "" = auth off), evicting
 * expired and least recently used entries to make room. An entry larger than max_bytes is not kept.
 * Returns 0, or -1 (out of memory, too large). */
int srv_resp_store_put(srv_resp_store *s, const char *id, const char *owner, const json_t *response,
                       const json_t *history);
/* Copies of the entry id of owner (NULL for a field not wanted); marks it used. 0, or -1 when there is
 * no such entry (never stored, evicted, expired, deleted, or another owner's). */
int srv_resp_store_get(srv_resp_store *s, const char *id, const char *owner, json_t **response, json_t **history);
/* Removes the entry id of owner: 0, or -1 when there is none. */
int srv_resp_store_delete(srv_resp_store *s, const char *id, const char *owner);
/* Entries held now (expired ones not yet evicted included). */
int32_t srv_resp_store_count(srv_resp_store *s);

#endif
