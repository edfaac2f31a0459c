/* sampler_stop.c — stop strings (across token boundaries), max_tokens, end-of-generation tokens. */
#include <stdlib.h>
#include <string.h>

#include "sampling/sampler.h"
#include "util/util.h"

struct qr_stop {
    char **stops;             /* [n_stops] owned NUL-terminated copies */
    size_t *stop_lens;        /* [n_stops] */
    int32_t n_stops;
    int32_t max_tokens;       /* 0 = no limit */
    int32_t n_tokens;         /* tokens fed so far */
    char *buf;                /* [cap] text not yet emitted (plus the part emitted by the last call) */
    size_t len, cap;          /* bytes in buf, capacity */
    size_t consumed;          /* bytes at the start of buf that the last call emitted */
    qr_finish_reason finish;  /* sticky once set */
    int32_t stop_index;       /* matched stop string or -1 */
};

const char *qr_finish_reason_str(qr_finish_reason r) {
    switch (r) {
    case QR_FINISH_STOP: return "stop";
    case QR_FINISH_LENGTH: return "length";
    case QR_FINISH_NONE: break;
    }
    return NULL;
}

qr_status qr_stop_create(const char *const *stops, int32_t n_stops, int32_t max_tokens, qr_stop **out, char *err,
                         size_t err_len) {
    *out = NULL;
    if (n_stops < 0 || (n_stops > 0 && !stops))
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "stop: bad stop string list (count %d)", n_stops);
    if (max_tokens < 0) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "stop: max_tokens must be >= 0, got %d", max_tokens);
    for (int32_t i = 0; i < n_stops; i++)
        if (!stops[i] || !stops[i][0])
            return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "stop: stop string %d is empty", i);
    qr_stop *s = calloc(1, sizeof *s);
    if (!s) goto nomem;
    s->stop_index = -1;
    s->max_tokens = max_tokens;
    if (n_stops > 0) {
        s->stops = calloc((size_t)n_stops, sizeof *s->stops);
        s->stop_lens = calloc((size_t)n_stops, sizeof *s->stop_lens);
        if (!s->stops || !s->stop_lens) goto nomem;
        for (int32_t i = 0; i < n_stops; i++) {
            s->stops[i] = strdup(stops[i]);
            if (!s->stops[i]) goto nomem;
            s->stop_lens[i] = strlen(stops[i]);
            s->n_stops = i + 1;
        }
    }
    *out = s;
    return QR_OK;
nomem:
    qr_stop_free(s);
    return qr_errf(err, err_len, QR_ERR_NOMEM, "stop: out of memory");
}

void qr_stop_free(qr_stop *s) {
    if (!s) return;
    for (int32_t i = 0; i < s->n_stops; i++) free(s->stops[i]);
    free(s->stops);
    free(s->stop_lens);
    free(s->buf);
    free(s);
}

int32_t qr_stop_n_tokens(const qr_stop *s) { return s->n_tokens; }

/* Start of a trailing incomplete UTF-8 sequence in text[0..len), or len when the text ends cleanly. */
static size_t utf8_complete_len(const char *text, size_t len) {
    size_t back = 0;
    while (back < 4 && back < len) {
        unsigned char c = (unsigned char)text[len - 1 - back];
        if ((c & 0xC0) != 0x80) { /* a lead byte (or ASCII) */
            size_t need = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
            return back + 1 < need ? len - 1 - back : len;
        }
        back++;
    }
    return len; /* only continuation bytes: invalid UTF-8, nothing to wait for */
}

size_t qr_stop_safe_prefix(const char *const *stops, int32_t n_stops, const char *text, size_t len, int32_t *matched) {
    *matched = -1;
    size_t best = len;
    for (int32_t i = 0; i < n_stops; i++) {
        size_t sl = strlen(stops[i]);
        if (sl == 0 || sl > len) continue;
        const char *hit = memmem(text, len, stops[i], sl);
        if (hit && (size_t)(hit - text) < best) {
            best = (size_t)(hit - text);
            *matched = i;
        }
    }
    if (*matched >= 0) return best;
    size_t hold = 0;
    for (int32_t i = 0; i < n_stops; i++) {
        size_t sl = strlen(stops[i]);
        size_t kmax = sl - 1 < len ? sl - 1 : len;
        for (size_t k = kmax; k > hold; k--) {
            if (memcmp(text + len - k, stops[i], k) == 0) {
                hold = k;
                break;
            }
        }
    }
    return utf8_complete_len(text, len - hold);
}

static qr_status buf_append(qr_stop *s, const char *p, size_t n) {
    if (s->len + n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 64;
        while (cap < s->len + n + 1) cap *= 2;
        char *nb = realloc(s->buf, cap);
        if (!nb) return QR_ERR_NOMEM;
        s->buf = nb;
        s->cap = cap;
    }
    if (n) memcpy(s->buf + s->len, p, n);
    s->len += n;
    s->buf[s->len] = 0;
    return QR_OK;
}

static void drop_consumed(qr_stop *s) {
    if (s->consumed) {
        memmove(s->buf, s->buf + s->consumed, s->len - s->consumed);
        s->len -= s->consumed;
        s->consumed = 0;
    }
}

static void finish_with(qr_stop *s, qr_finish_reason r, size_t emit_len, qr_stop_result *out) {
    s->finish = r;
    out->emit = s->buf ? s->buf : "";
    out->emit_len = emit_len;
    out->finish = r;
    out->stop_index = s->stop_index;
    s->len = emit_len; /* keep the emitted bytes alive until the next call; drop the rest */
    s->consumed = emit_len;
}

qr_status qr_stop_feed(qr_stop *s, const char *piece, size_t len, bool is_eog, qr_stop_result *out) {
    memset(out, 0, sizeof *out);
    out->stop_index = -1;
    out->emit = "";
    if (s->finish != QR_FINISH_NONE) {
        out->finish = s->finish;
        out->stop_index = s->stop_index;
        return QR_OK;
    }
    drop_consumed(s);
    s->n_tokens++;
    if (!is_eog && len > 0 && buf_append(s, piece, len) != QR_OK) return QR_ERR_NOMEM;
    if (!s->buf && buf_append(s, "", 0) != QR_OK) return QR_ERR_NOMEM;
    int32_t matched;
    size_t safe = qr_stop_safe_prefix((const char *const *)s->stops, s->n_stops, s->buf, s->len, &matched);
    if (matched >= 0) {
        s->stop_index = matched;
        finish_with(s, QR_FINISH_STOP, safe, out);
    } else if (is_eog) {
        finish_with(s, QR_FINISH_STOP, s->len, out);
    } else if (s->max_tokens > 0 && s->n_tokens >= s->max_tokens) {
        finish_with(s, QR_FINISH_LENGTH, s->len, out);
    } else {
        out->emit = s->buf;
        out->emit_len = safe;
        s->consumed = safe;
    }
    return QR_OK;
}

void qr_stop_flush(qr_stop *s, qr_finish_reason reason, qr_stop_result *out) {
    memset(out, 0, sizeof *out);
    out->emit = "";
    out->stop_index = s->stop_index;
    if (s->finish != QR_FINISH_NONE) {
        out->finish = s->finish;
        return;
    }
    drop_consumed(s);
    out->emit = s->buf ? s->buf : "";
    out->emit_len = s->len;
    if (reason == QR_FINISH_NONE) reason = QR_FINISH_STOP;
    out->finish = reason;
    s->finish = reason;
    s->consumed = s->len;
}
