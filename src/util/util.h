/* util.h — small shared helpers: error buffers, logging, fp16/bf16 conversion, file mapping. */
#ifndef QR_UTIL_H
#define QR_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <string.h>
#include "quarrel.h"

#if defined(__GNUC__)
#define QR_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define QR_PRINTF(a, b)
#endif

/* Writes a formatted message into err[0..err_len) (always NUL-terminated when err_len > 0).
 * Returns `status` so that callers can write `return qr_errf(err, n, QR_ERR_FORMAT, "...")`.
 * err may be NULL (then nothing is written). */
qr_status qr_errf(char *err, size_t err_len, qr_status status, const char *fmt, ...) QR_PRINTF(4, 5);

/* Logs a message to stderr at `level` (qr_log_level, qr_log_set_level: public in quarrel.h). */
void qr_log(qr_log_level level, const char *fmt, ...) QR_PRINTF(2, 3);

/* IEEE half <-> float, exact (round-to-nearest-even on the way down). */
float qr_fp16_to_fp32(uint16_t h);
uint16_t qr_fp32_to_fp16(float f);
/* bfloat16 <-> float; the way down rounds to nearest even, NaN stays NaN. */
float qr_bf16_to_fp32(uint16_t h);
uint16_t qr_fp32_to_bf16(float f);

/* A read-only memory mapping of a whole file. */
typedef struct qr_mapped_file {
    const uint8_t *data; /* [size] bytes, or NULL for an empty file */
    size_t size;
} qr_mapped_file;
/* Maps `path` read-only. On success fill *out; release it with qr_unmap_file. */
qr_status qr_map_file(const char *path, qr_mapped_file *out, char *err, size_t err_len);
void qr_unmap_file(qr_mapped_file *m);

/* Monotonic time in seconds. */
double qr_time_s(void);
/* Profiling: adds the time since *t_mark to *slot and moves *t_mark to now. */
static inline void qr_prof_lap(double *slot, double *t_mark) {
    const double now = qr_time_s();
    *slot += now - *t_mark;
    *t_mark = now;
}

/* Progress bar on stderr, drawn only when stderr is a TTY and the task has run > 1 s. */
typedef struct qr_progress {
    const char *label;
    uint64_t total;
    double start_s;
    double last_draw_s;
    bool enabled;
    bool drawn;
} qr_progress;
void qr_progress_begin(qr_progress *p, const char *label, uint64_t total);
void qr_progress_update(qr_progress *p, uint64_t done);
void qr_progress_end(qr_progress *p);

#endif /* QR_UTIL_H */
