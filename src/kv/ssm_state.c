/* ssm_state.c — per-sequence Mamba2 conv and scan states in backend memory (see ssm_state.h). */
#include "kv/ssm_state.h"

#include <stdlib.h>
#include <string.h>

#include "util/util.h"

struct qr_ssm_state {
    qr_backend *be;
    int32_t n_layer, n_seq;
    size_t conv_slot, scan_slot; /* floats per sequence */
    float **conv, **scan;        /* [n_layer] -> backend memory, NULL for non-SSM layers */
    float *zeros;                /* host zeros of max(conv_slot, scan_slot) floats */
    uint64_t bytes;
};

void qr_ssm_state_free(qr_ssm_state *s) {
    if (!s) return;
    for (int32_t il = 0; il < s->n_layer; il++) {
        if (s->conv && s->conv[il]) s->be->ops->free(s->be, s->conv[il]);
        if (s->scan && s->scan[il]) s->be->ops->free(s->be, s->scan[il]);
    }
    free(s->conv);
    free(s->scan);
    free(s->zeros);
    free(s);
}

qr_status qr_ssm_state_create(qr_backend *be, int32_t n_layer, const bool *is_ssm, const qr_ssm_params *p, int32_t n_seq,
                              qr_ssm_state **out, char *err, size_t err_len) {
    *out = NULL;
    if (n_layer < 1 || n_seq < 1 || p->d_conv < 2 || p->conv_dim < 1 || p->d_inner < 1 || p->d_state < 1)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "ssm state: bad shapes");
    qr_ssm_state *s = calloc(1, sizeof *s);
    if (!s) return qr_errf(err, err_len, QR_ERR_NOMEM, "ssm state: out of memory");
    s->be = be;
    s->n_layer = n_layer;
    s->n_seq = n_seq;
    s->conv_slot = (size_t)(p->d_conv - 1) * (size_t)p->conv_dim;
    s->scan_slot = (size_t)p->d_inner * (size_t)p->d_state;
    s->conv = calloc((size_t)n_layer, sizeof(float *));
    s->scan = calloc((size_t)n_layer, sizeof(float *));
    const size_t zmax = s->conv_slot > s->scan_slot ? s->conv_slot : s->scan_slot;
    s->zeros = calloc(zmax, sizeof(float));
    if (!s->conv || !s->scan || !s->zeros) goto nomem;
    for (int32_t il = 0; il < n_layer; il++) {
        if (!is_ssm[il]) continue;
        s->conv[il] = be->ops->alloc(be, s->conv_slot * (size_t)n_seq * sizeof(float));
        s->scan[il] = be->ops->alloc(be, s->scan_slot * (size_t)n_seq * sizeof(float));
        if (!s->conv[il] || !s->scan[il]) goto nomem;
        s->bytes += (uint64_t)(s->conv_slot + s->scan_slot) * (uint64_t)n_seq * sizeof(float);
    }
    qr_ssm_state_reset(s, -1);
    *out = s;
    return QR_OK;
nomem:
    qr_ssm_state_free(s);
    return qr_errf(err, err_len, QR_ERR_NOMEM, "ssm state: cannot allocate the recurrent state of %d sequences", n_seq);
}

void qr_ssm_state_reset(qr_ssm_state *s, int32_t seq) {
    if (!s) return;
    const int32_t s0 = seq < 0 ? 0 : seq, s1 = seq < 0 ? s->n_seq : seq + 1;
    if (s0 >= s->n_seq) return;
    for (int32_t il = 0; il < s->n_layer; il++) {
        if (!s->conv[il]) continue;
        for (int32_t q = s0; q < s1; q++) {
            s->be->ops->write(s->be, s->conv[il] + (size_t)q * s->conv_slot, s->zeros, s->conv_slot * sizeof(float));
            s->be->ops->write(s->be, s->scan[il] + (size_t)q * s->scan_slot, s->zeros, s->scan_slot * sizeof(float));
        }
    }
}

float *qr_ssm_state_conv(const qr_ssm_state *s, int32_t il) { return s && il >= 0 && il < s->n_layer ? s->conv[il] : NULL; }
float *qr_ssm_state_scan(const qr_ssm_state *s, int32_t il) { return s && il >= 0 && il < s->n_layer ? s->scan[il] : NULL; }
uint64_t qr_ssm_state_bytes(const qr_ssm_state *s) { return s ? s->bytes : 0; }
