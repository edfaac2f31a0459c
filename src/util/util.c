/* util.c — error buffers, logging, half/bfloat conversion, file mapping, time, progress bar. */
#define _POSIX_C_SOURCE 200809L
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *qr_status_str(qr_status status) {
    switch (status) {
    case QR_OK: return "ok";
    case QR_ERR_INVALID_ARG: return "invalid argument";
    case QR_ERR_IO: return "i/o error";
    case QR_ERR_FORMAT: return "malformed input";
    case QR_ERR_UNSUPPORTED: return "unsupported";
    case QR_ERR_NOMEM: return "out of memory";
    case QR_ERR_NOT_FOUND: return "not found";
    case QR_ERR_INTERNAL: return "internal error";
    case QR_ERR_BUSY: return "busy";
    case QR_ERR_SHUTDOWN: return "shutting down";
    case QR_ERR_NUMERIC: return "numeric overflow";
    }
    return "unknown status";
}

const char *qr_version(void) { return QUARREL_VERSION_STRING; }
int32_t qr_version_number(void) { return QUARREL_VERSION_NUMBER; }

qr_status qr_errf(char *err, size_t err_len, qr_status status, const char *fmt, ...) {
    if (err && err_len > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
    }
    return status;
}

static qr_log_level g_log_level = QR_LOG_INFO; /* process-wide verbosity; only read by qr_log */

void qr_log_set_level(qr_log_level level) { g_log_level = level; }
qr_log_level qr_log_get_level(void) { return g_log_level; }

void qr_log(qr_log_level level, const char *fmt, ...) {
    static const char *names[] = {"debug", "info", "warn", "error"};
    if (level < g_log_level || level >= QR_LOG_NONE) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "quarrel: %s: ", names[level]);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

float qr_fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    uint32_t bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do { mant <<= 1; e++; } while (!(mant & 0x400));
            mant &= 0x3ff;
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | (mant << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t qr_fp32_to_fp16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t abs = x & 0x7fffffffu;
    if (abs > 0x7f800000u) return (uint16_t)(sign | 0x7e00 | ((abs >> 13) & 0x3ff)); /* NaN */
    if (abs >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* overflow -> inf (incl. rounding) */
    if (abs < 0x38800000u) { /* result is subnormal or zero */
        if (abs < 0x33000000u) return (uint16_t)sign; /* < half of smallest subnormal */
        uint32_t e = abs >> 23;
        uint32_t m = (abs & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e; /* 14..24 */
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t q = (abs - 0x38000000u) >> 13; /* rebias exponent 127 -> 15 */
    uint32_t rem = abs & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (q & 1))) q++;
    return (uint16_t)(sign | q);
}

float qr_bf16_to_fp32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t qr_fp32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 64); /* quiet NaN */
    return (uint16_t)((x + (0x7fff + ((x >> 16) & 1))) >> 16);
}

qr_status qr_map_file(const char *path, qr_mapped_file *out, char *err, size_t err_len) {
    out->data = NULL;
    out->size = 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return qr_errf(err, err_len, QR_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return qr_errf(err, err_len, QR_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return qr_errf(err, err_len, QR_ERR_IO, "%s: not a regular file", path);
    }
    if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return qr_errf(err, err_len, QR_ERR_IO, "%s: mmap failed: %s", path, strerror(e));
        }
        out->data = p;
        out->size = (size_t)st.st_size;
    }
    close(fd);
    return QR_OK;
}

void qr_unmap_file(qr_mapped_file *m) {
    if (m->data && m->size) munmap((void *)m->data, m->size);
    m->data = NULL;
    m->size = 0;
}

double qr_time_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void qr_progress_begin(qr_progress *p, const char *label, uint64_t total) {
    p->label = label;
    p->total = total ? total : 1;
    p->start_s = qr_time_s();
    p->last_draw_s = 0;
    p->enabled = isatty(STDERR_FILENO) != 0;
    p->drawn = false;
}

void qr_progress_update(qr_progress *p, uint64_t done) {
    if (!p->enabled) return;
    double now = qr_time_s();
    if (now - p->start_s < 1.0 || now - p->last_draw_s < 0.1) return;
    p->last_draw_s = now;
    p->drawn = true;
    if (done > p->total) done = p->total;
    int width = 30, filled = (int)((double)done / (double)p->total * width);
    char bar[32];
    for (int i = 0; i < width; i++) bar[i] = i < filled ? '#' : '.';
    bar[width] = 0;
    fprintf(stderr, "\r%s [%s] %5.1f%%", p->label, bar, 100.0 * (double)done / (double)p->total);
    fflush(stderr);
}

void qr_progress_end(qr_progress *p) {
    if (p->enabled && p->drawn) {
        p->last_draw_s = 0;
        p->start_s = -10;
        qr_progress_update(p, p->total);
        fputc('\n', stderr);
    }
}
