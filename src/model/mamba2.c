/* mamba2.c — the Mamba2 mixer block (llama.cpp's build_mamba2_layer): in-projection into z | xBC | dt,
 * causal depthwise conv1d with its rolling per-sequence state (+ bias, SiLU), the selective scan with
 * groups and the D skip, the gated grouped RMSNorm y * silu(z), and the out-projection. */
#include "model/model.h"
#include "util/util.h"

void qr_block_mamba2(const qr_model *m, qr_fwd *f, int il) {
    const qr_ssm_params *p = &m->hp.ssm;
    const qr_layer *lx = &m->layers[il];
    qr_mamba_scratch *x = &f->mamba;
    qr_backend *be = f->be;
    const int64_t n = f->n_tokens;
    const int64_t d_in_proj = 2 * (int64_t)p->d_inner + 2 * (int64_t)p->n_group * p->d_state + p->n_head;
    be->ops->matmul(be, &lx->ssm_in, f->xb, n, x->zxbcdt); /* [n][z | xBC | dt] */
    const double t0 = qr_time_s();
    be->ops->ssm_conv(be, x->zxbcdt + p->d_inner, d_in_proj, qr_ssm_state_conv(x->ssm, il), &lx->ssm_conv1d,
                      lx->ssm_conv1d_b.host ? &lx->ssm_conv1d_b : NULL, p, x->xbc);
    const double t1 = qr_time_s();
    const qr_ssm_scan_args sa = {.state = qr_ssm_state_scan(x->ssm, il), .xbc = x->xbc,
                                 .dt = x->zxbcdt + p->d_inner + p->conv_dim, .dt_stride = d_in_proj,
                                 .dt_bias = &lx->ssm_dt_b, .A = &lx->ssm_a, .D = &lx->ssm_d, .p = p, .y = x->y};
    be->ops->ssm_scan(be, &sa);
    const double t2 = qr_time_s();
    const qr_weight *nw = lx->ssm_norm.host ? &lx->ssm_norm : NULL;
    const qr_ssm_gate_norm_args ga = {.y = x->y, .z = x->zxbcdt, .z_stride = d_in_proj, .w = nw, .n_rows = n, .p = p,
                                      .eps = m->hp.norm_eps, .out = x->y,
                                      .next = &lx->ssm_out}; /* the backend may prepare out_proj's activations */
    be->ops->ssm_gate_norm(be, &ga);
    be->ops->matmul(be, &lx->ssm_out, x->y, n, f->xb2);
    f->stats.ssm_calls++;
    f->stats.ssm_conv_seconds += t1 - t0;
    f->stats.ssm_scan_seconds += t2 - t1;
}
