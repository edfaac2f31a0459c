/* arrow_internal.h — helpers shared by the Arrow files of the flight module (not public API). */
#ifndef QR_FLIGHT_ARROW_INTERNAL_H
#define QR_FLIGHT_ARROW_INTERNAL_H

#include "arrow_ipc.h"

/* Flatbuffer type tags of the Arrow `Type` union (Schema.fbs). */
enum {
    QR_FB_TYPE_NONE = 0,
    QR_FB_TYPE_NULL = 1,
    QR_FB_TYPE_INT = 2,
    QR_FB_TYPE_FLOATING_POINT = 3,
    QR_FB_TYPE_BINARY = 4,
    QR_FB_TYPE_UTF8 = 5,
    QR_FB_TYPE_FIXED_SIZE_LIST = 16,
};

/* MetadataVersion values (Schema.fbs). */
enum { QR_ARROW_METADATA_V4 = 3, QR_ARROW_METADATA_V5 = 4 };

#define QR_ARROW_CONTINUATION 0xFFFFFFFFu

/* True for fixed-width (primitive) types. */
bool qr_arrow_type_is_primitive(qr_arrow_type type);
/* True when s[0, n) is well-formed UTF-8 (no overlongs, surrogates or values past U+10FFFF). */
bool qr_arrow_utf8_valid(const uint8_t *s, size_t n);
/* malloc'ed NUL-terminated copy of s[0, n); NULL on allocation failure. */
char *qr_arrow_strndup(const char *s, size_t n);
/* Appends a (copied) pair to a metadata list. */
qr_status qr_arrow_kv_append(qr_arrow_kv **kv, size_t *n, const char *key, size_t key_len, const char *value,
                             size_t value_len);
/* Frees what a field owns (recursively) and zeroes it. */
void qr_arrow_field_clear(qr_arrow_field *f);
/* Number of zero bits among the first `length` bits of a validity bitmap. */
int64_t qr_arrow_count_nulls(const uint8_t *validity, int64_t length);

/* Rounds n up to a multiple of 8. */
static inline size_t qr_arrow_pad8(size_t n) { return (n + 7) & ~(size_t)7; }

#endif /* QR_FLIGHT_ARROW_INTERNAL_H */
