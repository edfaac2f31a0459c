/* keys.h — API keys in an SQLite file. A key is "qr-" + 12 hex id + "-" + 40 hex secret; the store
 * keeps only SHA-256(key) (OpenSSL libcrypto), the id (for lookup), a name, per-key rate limits
 * and timestamps. Verification hashes the presented key and compares the digests in constant time. */
#ifndef QR_SERVER_KEYS_H
#define QR_SERVER_KEYS_H

#include <stdbool.h>
#include <stddef.h>

#define SRV_KEY_LEN 57 /* "qr-" + 12 + "-" + 40 + NUL = 57 bytes */

typedef struct srv_keys srv_keys;

typedef struct srv_key_info {
    char id[16];
    char name[128];
    double created;    /* epoch seconds */
    double rotated;    /* epoch seconds, 0 = never */
    bool revoked;
    double rpm, tpm;   /* per-key limits; 0 = the server's default */
} srv_key_info;

/* Opens (creating when create is true) the store. NULL with a message on failure. */
srv_keys *srv_keys_open(const char *path, bool create, char *err, size_t err_len);
void srv_keys_close(srv_keys *k);

/* Creates a key; the plain key (shown once) goes to key_out[SRV_KEY_LEN]. 0 or -1. */
int srv_keys_create(srv_keys *k, const char *name, double rpm, double tpm, char *key_out, srv_key_info *info,
                    char *err, size_t err_len);
/* Replaces the secret of key id (same id, name and limits); the new key goes to key_out. */
int srv_keys_rotate(srv_keys *k, const char *id, char *key_out, char *err, size_t err_len);
/* Marks key id revoked. */
int srv_keys_revoke(srv_keys *k, const char *id, char *err, size_t err_len);
/* Calls fn for every key, oldest first. Returns the count or -1. */
int srv_keys_list(srv_keys *k, void (*fn)(void *arg, const srv_key_info *ki), void *arg);
/* 0 and *info when presented is a valid, unrevoked key; -1 otherwise. */
int srv_keys_verify(srv_keys *k, const char *presented, srv_key_info *info);

/* Hex SHA-256 of data (65 bytes out). */
void srv_sha256_hex(const void *data, size_t len, char out[65]);

#endif
