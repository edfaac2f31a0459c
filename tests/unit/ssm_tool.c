/* ssm_tool.c — runs the CPU backend's Mamba2 ops (ssm_conv, ssm_scan) on raw inputs, for the float64
 * numpy reference test (tests/ref/test_ssm_numpy.py).
 *
 * usage: ssm-tool conv|scan IN OUT [n_batch] [--scalar]
 *   IN  (little-endian): int32 header, then float32 arrays, then int32 seq[n_tok]
 *     conv: header n_tok, conv_dim, d_conv, n_seq; x[n_tok][conv_dim], w[conv_dim][d_conv], b[conv_dim],
 *           state[n_seq][d_conv-1][conv_dim]
 *     scan: header n_tok, n_head, head_dim, n_group, d_state, n_seq; xbc[n_tok][conv_dim], dt[n_tok][n_head],
 *           dt_bias[n_head], A[n_head], D[n_head], state[n_seq][n_head][head_dim][d_state]
 *   OUT: conv: out[n_tok][conv_dim], state; scan: y[n_tok][d_inner], state.
 *   Rows are run in passes of n_batch rows (default: all), each pass a batch plan of its rows.
 *   Exit status 2 when the backend reports an error (its message on stderr). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"

static void *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc((size_t)sz + 1);
    if (buf && fread(buf, 1, (size_t)sz, f) != (size_t)sz) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *n = (size_t)sz;
    return buf;
}

static qr_weight f32w(const float *p, int64_t ne0, int64_t ne1) {
    return (qr_weight){.name = "t", .type = QR_TYPE_F32, .ne = {ne0, ne1, 1, 1}, .row_bytes = (size_t)ne0 * 4, .host = p};
}

/* Sets a plan of rows [r0, r0 + n) with sequence ids seq (positions are unused by the SSM ops). */
static int set_plan(qr_backend *be, const int32_t *seq, int32_t n, int32_t n_seq, int32_t *scratch) {
    for (int32_t i = 0; i < n; i++) scratch[i] = i;
    int32_t *bt = calloc((size_t)n_seq, sizeof(int32_t)); /* [n_seq][1]: unused by the SSM ops */
    if (!bt) return -1;
    const qr_batch_plan plan = {.n_tokens = n, .tokens = scratch, .pos = scratch, .seq = seq, .kv_slot = scratch,
                                .n_seqs = n_seq, .max_blocks = 1, .block_table = bt, .n_outputs = 0,
                                .output_rows = scratch};
    char err[256];
    const qr_status st = be->ops->set_batch(be, &plan, err, sizeof err);
    free(bt);
    if (st != QR_OK) {
        fprintf(stderr, "ssm-tool: %s\n", err);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: ssm-tool conv|scan IN OUT [n_batch] [--scalar]\n");
        return 1;
    }
    const bool conv = !strcmp(argv[1], "conv");
    int32_t n_batch = argc > 4 && argv[4][0] != '-' ? atoi(argv[4]) : 0;
    bool scalar = false;
    for (int i = 4; i < argc; i++) scalar |= !strcmp(argv[i], "--scalar");
    size_t n_in;
    char *in = read_all(argv[2], &n_in);
    if (!in) {
        fprintf(stderr, "ssm-tool: cannot read %s\n", argv[2]);
        return 1;
    }
    qr_backend *be = NULL;
    char err[256];
    qr_backend_cpu_params cp = {.n_threads = 2, .force_scalar = scalar};
    if (qr_backend_cpu_create(&cp, &be, err, sizeof err) != QR_OK) {
        fprintf(stderr, "ssm-tool: %s\n", err);
        return 1;
    }
    const int32_t *h = (const int32_t *)in;
    int rc = 0;
    FILE *out = fopen(argv[3], "wb");
    if (!out) return 1;
    if (conv) {
        const int32_t n_tok = h[0], C = h[1], K = h[2], n_seq = h[3];
        const float *x = (const float *)(h + 4), *w = x + (size_t)n_tok * C, *b = w + (size_t)C * K;
        float *state = (float *)(b + C);
        const int32_t *seq = (const int32_t *)(state + (size_t)n_seq * (K - 1) * C);
        float *y = calloc((size_t)n_tok * C, sizeof(float));
        int32_t *scratch = malloc((size_t)n_tok * sizeof(int32_t));
        const qr_weight ww = f32w(w, K, C), bw = f32w(b, C, 1);
        const qr_ssm_params p = {.d_conv = K, .d_inner = C - 2, .d_state = 1, .n_head = 1, .head_dim = C - 2,
                                 .n_group = 1, .conv_dim = C};
        if (n_batch <= 0) n_batch = n_tok;
        for (int32_t r0 = 0; r0 < n_tok && rc == 0; r0 += n_batch) {
            const int32_t n = n_tok - r0 < n_batch ? n_tok - r0 : n_batch;
            if (set_plan(be, seq + r0, n, n_seq, scratch)) rc = 1;
            else be->ops->ssm_conv(be, x + (size_t)r0 * C, C, state, &ww, &bw, &p, y + (size_t)r0 * C);
            if (be->ops->last_error(be, err, sizeof err) != QR_OK) fprintf(stderr, "ssm-tool: %s\n", err), rc = 2;
        }
        fwrite(y, sizeof(float), (size_t)n_tok * C, out);
        fwrite(state, sizeof(float), (size_t)n_seq * (K - 1) * C, out);
        free(y);
        free(scratch);
    } else {
        const int32_t n_tok = h[0], NH = h[1], P = h[2], G = h[3], N = h[4], n_seq = h[5];
        const int32_t DI = NH * P, C = DI + 2 * G * N;
        const float *xbc = (const float *)(h + 6), *dt = xbc + (size_t)n_tok * C, *dtb = dt + (size_t)n_tok * NH,
                    *A = dtb + NH, *D = A + NH;
        float *state = (float *)(D + NH);
        const int32_t *seq = (const int32_t *)(state + (size_t)n_seq * DI * N);
        float *y = calloc((size_t)n_tok * DI, sizeof(float));
        int32_t *scratch = malloc((size_t)n_tok * sizeof(int32_t));
        const qr_weight wb = f32w(dtb, NH, 1), wa = f32w(A, NH, 1), wd = f32w(D, NH, 1);
        const qr_ssm_params p = {.d_conv = 4, .d_inner = DI, .d_state = N, .n_head = NH, .head_dim = P, .n_group = G,
                                 .conv_dim = C};
        if (n_batch <= 0) n_batch = n_tok;
        for (int32_t r0 = 0; r0 < n_tok && rc == 0; r0 += n_batch) {
            const int32_t n = n_tok - r0 < n_batch ? n_tok - r0 : n_batch;
            if (set_plan(be, seq + r0, n, n_seq, scratch)) rc = 1;
            else be->ops->ssm_scan(be, &(qr_ssm_scan_args){.state = state, .xbc = xbc + (size_t)r0 * C,
                                                           .dt = dt + (size_t)r0 * NH, .dt_stride = NH, .dt_bias = &wb,
                                                           .A = &wa, .D = &wd, .p = &p, .y = y + (size_t)r0 * DI});
            if (be->ops->last_error(be, err, sizeof err) != QR_OK) fprintf(stderr, "ssm-tool: %s\n", err), rc = 2;
        }
        fwrite(y, sizeof(float), (size_t)n_tok * DI, out);
        fwrite(state, sizeof(float), (size_t)n_seq * DI * N, out);
        free(y);
        free(scratch);
    }
    fclose(out);
    qr_backend_free(be);
    free(in);
    return rc;
}
