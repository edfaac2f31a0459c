/* ssm_state.h — the per-sequence recurrent state of the Mamba2 layers, kept next to the paged KV
 * cache: for every SSM layer, a conv state [n_seq][d_conv - 1][conv_dim] (the last inputs of the
 * causal conv) and a scan state [n_seq][n_head][head_dim][d_state], in backend memory. Sequence id
 * s uses slot s, so a batch that mixes sequences reads and writes each row's own state. Unlike K/V,
 * a recurrent state cannot be cut back to an earlier position: a sequence is either continued or
 * reset to zero (its start). */
#ifndef QR_KV_SSM_STATE_H
#define QR_KV_SSM_STATE_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"

typedef struct qr_ssm_state qr_ssm_state;

/* Allocates zeroed states for the layers with is_ssm[il] (il < n_layer) and n_seq sequences on be.
 * Ownership: qr_ssm_state_free (before the backend). */
qr_status qr_ssm_state_create(qr_backend *be, int32_t n_layer, const bool *is_ssm, const qr_ssm_params *p, int32_t n_seq,
                              qr_ssm_state **out, char *err, size_t err_len);
void qr_ssm_state_free(qr_ssm_state *s);
/* Zeroes sequence seq's state in every layer (seq < 0: every sequence). */
void qr_ssm_state_reset(qr_ssm_state *s, int32_t seq);
/* Layer il's conv / scan state base (backend memory), NULL for non-SSM layers. */
float *qr_ssm_state_conv(const qr_ssm_state *s, int32_t il);
float *qr_ssm_state_scan(const qr_ssm_state *s, int32_t il);
/* Bytes of state held (all layers, all sequences). */
uint64_t qr_ssm_state_bytes(const qr_ssm_state *s);

#endif /* QR_KV_SSM_STATE_H */
