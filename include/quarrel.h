/*
 * quarrel.h — public C API of libquarrel.
 *
 * Conventions:
 *  - Every function that can fail returns a qr_status and, when `err` is non-NULL, writes a
 *    NUL-terminated message of at most `err_len` bytes describing the failure.
 *  - Whoever calls *_create / *_open calls the matching *_free / *_close.
 *  - The library never prints to stdout and never calls exit() or abort() on bad input.
 */
#ifndef QUARREL_H
#define QUARREL_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

#define QUARREL_VERSION_MAJOR 0
#define QUARREL_VERSION_MINOR 1
#define QUARREL_VERSION_PATCH 0
#define QUARREL_VERSION_STRING "0.1.0"

/* Result of every fallible call. QR_OK is zero; every error is non-zero. */
typedef enum qr_status {
    QR_OK = 0,
    QR_ERR_INVALID_ARG = 1,   /* a caller-supplied argument is out of range or malformed */
    QR_ERR_IO = 2,            /* open/read/write/mmap failed */
    QR_ERR_FORMAT = 3,        /* a file is malformed (bad magic, truncated, out-of-range field) */
    QR_ERR_UNSUPPORTED = 4,   /* well-formed, but a feature/version/type we do not implement */
    QR_ERR_NOMEM = 5,         /* allocation failed */
    QR_ERR_NOT_FOUND = 6,     /* a named key/tensor/model does not exist */
    QR_ERR_INTERNAL = 7,      /* a bug: an invariant did not hold */
} qr_status;

/* Static string naming a status ("ok", "invalid argument", ...). Never NULL. */
const char *qr_status_str(qr_status status);

/* Library version string, e.g. "0.1.0". */
const char *qr_version(void);

#ifdef __cplusplus
}
#endif

#endif /* QUARREL_H */
