/* keys.c — the SQLite API key store (see keys.h). */
#include "server/keys.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/util.h"

struct srv_keys {
    sqlite3 *db;
};

static double now_epoch(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void sha256(const void *data, size_t len, unsigned char out[32]) {
    unsigned int n = 32;
    EVP_Digest(data, len, out, &n, EVP_sha256(), NULL);
}

void srv_sha256_hex(const void *data, size_t len, char out[65]) {
    unsigned char d[32];
    sha256(data, len, d);
    for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static int random_hex(char *out, size_t n_hex) {
    unsigned char buf[32];
    if (n_hex / 2 > sizeof buf || RAND_bytes(buf, (int)(n_hex / 2)) != 1) return -1;
    for (size_t i = 0; i < n_hex / 2; i++) snprintf(out + 2 * i, 3, "%02x", buf[i]);
    return 0;
}

/* The store holds key hashes and names: owner-only (0600). A new file is created 0600 before SQLite
 * opens it (SQLite would create it 0644 under the usual umask); an existing one is tightened to 0600
 * on every open (chmod fails harmlessly on a file owned by someone else). */
static void restrict_mode(const char *path, bool create) {
    if (create) {
        const int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (fd >= 0) close(fd);
    }
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && (sb.st_mode & 077)) chmod(path, 0600);
}

srv_keys *srv_keys_open(const char *path, bool create, char *err, size_t err_len) {
    sqlite3 *db = NULL;
    restrict_mode(path, create);
    const int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX | (create ? SQLITE_OPEN_CREATE : 0);
    if (sqlite3_open_v2(path, &db, flags, NULL) != SQLITE_OK) {
        qr_errf(err, err_len, QR_ERR_IO, "key store %s: %s", path, db ? sqlite3_errmsg(db) : "cannot open");
        sqlite3_close(db);
        return NULL;
    }
    sqlite3_busy_timeout(db, 2000);
    char *msg = NULL;
    if (sqlite3_exec(db,
                     "CREATE TABLE IF NOT EXISTS api_keys (id TEXT PRIMARY KEY, hash BLOB NOT NULL, name TEXT NOT NULL,"
                     " created REAL NOT NULL, rotated REAL NOT NULL DEFAULT 0, revoked INTEGER NOT NULL DEFAULT 0,"
                     " rpm REAL NOT NULL DEFAULT 0, tpm REAL NOT NULL DEFAULT 0)",
                     NULL, NULL, &msg) != SQLITE_OK) {
        qr_errf(err, err_len, QR_ERR_IO, "key store %s: %s", path, msg ? msg : "schema");
        sqlite3_free(msg);
        sqlite3_close(db);
        return NULL;
    }
    srv_keys *k = calloc(1, sizeof *k);
    if (!k) {
        sqlite3_close(db);
        return NULL;
    }
    k->db = db;
    return k;
}

void srv_keys_close(srv_keys *k) {
    if (!k) return;
    sqlite3_close(k->db);
    free(k);
}

/* New key text for id: "qr-<id>-<40 hex>"; its hash in h. */
static int make_key(const char *id, char *key_out, unsigned char h[32]) {
    char secret[41];
    if (random_hex(secret, 40) < 0) return -1;
    snprintf(key_out, SRV_KEY_LEN, "qr-%s-%s", id, secret);
    sha256(key_out, strlen(key_out), h);
    return 0;
}

int srv_keys_create(srv_keys *k, const char *name, double rpm, double tpm, char *key_out, srv_key_info *info,
                    char *err, size_t err_len) {
    char id[13];
    unsigned char h[32];
    if (random_hex(id, 12) < 0 || make_key(id, key_out, h) < 0) {
        qr_errf(err, err_len, QR_ERR_INTERNAL, "no random bytes");
        return -1;
    }
    sqlite3_stmt *st;
    const double now = now_epoch();
    if (sqlite3_prepare_v2(k->db, "INSERT INTO api_keys (id, hash, name, created, rpm, tpm) VALUES (?,?,?,?,?,?)", -1,
                           &st, NULL) != SQLITE_OK) {
        qr_errf(err, err_len, QR_ERR_IO, "key store: %s", sqlite3_errmsg(k->db));
        return -1;
    }
    sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_blob(st, 2, h, 32, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, name ? name : "", -1, SQLITE_TRANSIENT);
    sqlite3_bind_double(st, 4, now);
    sqlite3_bind_double(st, 5, rpm);
    sqlite3_bind_double(st, 6, tpm);
    const int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        qr_errf(err, err_len, QR_ERR_IO, "key store: %s", sqlite3_errmsg(k->db));
        return -1;
    }
    if (info) {
        memset(info, 0, sizeof *info);
        snprintf(info->id, sizeof info->id, "%s", id);
        snprintf(info->name, sizeof info->name, "%s", name ? name : "");
        info->created = now;
        info->rpm = rpm;
        info->tpm = tpm;
    }
    return 0;
}

int srv_keys_rotate(srv_keys *k, const char *id, char *key_out, char *err, size_t err_len) {
    unsigned char h[32];
    if (strlen(id) != 12 || make_key(id, key_out, h) < 0) {
        qr_errf(err, err_len, QR_ERR_INVALID_ARG, "bad key id '%s'", id);
        return -1;
    }
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(k->db, "UPDATE api_keys SET hash = ?, rotated = ? WHERE id = ? AND revoked = 0", -1, &st,
                           NULL) != SQLITE_OK)
        return qr_errf(err, err_len, QR_ERR_IO, "key store: %s", sqlite3_errmsg(k->db)), -1;
    sqlite3_bind_blob(st, 1, h, 32, SQLITE_TRANSIENT);
    sqlite3_bind_double(st, 2, now_epoch());
    sqlite3_bind_text(st, 3, id, -1, SQLITE_TRANSIENT);
    const int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE || sqlite3_changes(k->db) != 1) {
        qr_errf(err, err_len, QR_ERR_NOT_FOUND, "no active key with id '%s'", id);
        return -1;
    }
    return 0;
}

int srv_keys_revoke(srv_keys *k, const char *id, char *err, size_t err_len) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(k->db, "UPDATE api_keys SET revoked = 1 WHERE id = ?", -1, &st, NULL) != SQLITE_OK)
        return qr_errf(err, err_len, QR_ERR_IO, "key store: %s", sqlite3_errmsg(k->db)), -1;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
    const int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE || sqlite3_changes(k->db) != 1) {
        qr_errf(err, err_len, QR_ERR_NOT_FOUND, "no key with id '%s'", id);
        return -1;
    }
    return 0;
}

static void row_info(sqlite3_stmt *st, srv_key_info *ki) {
    memset(ki, 0, sizeof *ki);
    snprintf(ki->id, sizeof ki->id, "%s", (const char *)sqlite3_column_text(st, 0));
    snprintf(ki->name, sizeof ki->name, "%s", (const char *)sqlite3_column_text(st, 1));
    ki->created = sqlite3_column_double(st, 2);
    ki->rotated = sqlite3_column_double(st, 3);
    ki->revoked = sqlite3_column_int(st, 4) != 0;
    ki->rpm = sqlite3_column_double(st, 5);
    ki->tpm = sqlite3_column_double(st, 6);
}

int srv_keys_list(srv_keys *k, void (*fn)(void *arg, const srv_key_info *ki), void *arg) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(k->db, "SELECT id, name, created, rotated, revoked, rpm, tpm FROM api_keys ORDER BY created",
                           -1, &st, NULL) != SQLITE_OK)
        return -1;
    int n = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        srv_key_info ki;
        row_info(st, &ki);
        fn(arg, &ki);
        n++;
    }
    sqlite3_finalize(st);
    return n;
}

int srv_keys_verify(srv_keys *k, const char *presented, srv_key_info *info) {
    /* "qr-" id(12) "-" secret(40) */
    if (!presented || strlen(presented) != SRV_KEY_LEN - 1 || strncmp(presented, "qr-", 3) || presented[15] != '-')
        return -1;
    char id[13];
    memcpy(id, presented + 3, 12);
    id[12] = 0;
    unsigned char h[32];
    sha256(presented, strlen(presented), h);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(k->db,
                           "SELECT id, name, created, rotated, revoked, rpm, tpm, hash FROM api_keys WHERE id = ?", -1,
                           &st, NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
    int ok = -1;
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_bytes(st, 7) == 32) {
        const unsigned char *stored = sqlite3_column_blob(st, 7);
        volatile unsigned char diff = 0; /* constant time over the 32 bytes */
        for (int i = 0; i < 32; i++) diff |= (unsigned char)(stored[i] ^ h[i]);
        srv_key_info ki;
        row_info(st, &ki);
        if (diff == 0 && !ki.revoked) {
            ok = 0;
            if (info) *info = ki;
        }
    }
    sqlite3_finalize(st);
    return ok;
}
