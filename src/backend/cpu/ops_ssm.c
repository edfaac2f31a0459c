/* ops_ssm.c — the CPU backend's Mamba2 ops: the causal depthwise conv1d with its rolling per-sequence
 * state, the selective state-space scan and the gated grouped RMSNorm. The scan takes the recurrent
 * form in ggml's order of operations: softplus of dt, dA = exp(dt * A), S = fma(S, dA, B * (x * dt))
 * (the compiler of llama.cpp's x86 build contracts that vector mul + add into one FMA), y = S . C, then
 * + D * x. With QUARREL_SSM_SCAN=ssd, prefill runs of >= 32 rows of one sequence take
 * the chunked SSD form instead (see ssd_enabled). Rows are applied in row order per sequence slot (the plan's seq[r]); the work is split
 * over channels (conv) and heads (scan), which are independent. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "util/knobs.h"

static inline cpu_backend *CB(qr_backend *be) { return (cpu_backend *)be->impl; }

static inline float silu_f(float x) { return x / (1.0f + cpu_expf(-x)); }

/* ggml_compute_softplus_f32: logf(1 + e^x) in float (not log1pf), the identity above 20. */
static inline float softplus_f(float x) { return x > 20.0f ? x : logf(1.0f + expf(x)); }

/* ---- conv1d ---- */

typedef struct conv_task {
    cpu_backend *cb;
    const float *x;
    int64_t x_stride;
    float *state;
    const float *w, *b;
    const qr_ssm_params *p;
    float *out;
} conv_task;

/* Channels [lo, hi): every row in order. */
static void conv_fn(void *arg, int64_t lo, int64_t hi, int ith) {
    conv_task *t = arg;
    const qr_ssm_params *p = t->p;
    const int32_t K = p->d_conv, C = p->conv_dim;
    const int64_t slot_sz = (int64_t)(K - 1) * C;
    (void)ith;
    for (int64_t c = lo; c < hi; c++) {
        const float *w = t->w + c * K;
        for (int32_t r = 0; r < t->cb->n_tokens; r++) {
            float *st = t->state + (int64_t)t->cb->seq[r] * slot_sz + c; /* column c, stride C */
            const float xin = t->x[(int64_t)r * t->x_stride + c];
            float sum = 0.0f;
            for (int32_t k = 0; k < K - 1; k++) sum += st[(int64_t)k * C] * w[k]; /* ggml: sequential, unfused */
            sum += xin * w[K - 1];
            for (int32_t k = 0; k < K - 2; k++) st[(int64_t)k * C] = st[(int64_t)(k + 1) * C];
            st[(int64_t)(K - 2) * C] = xin;
            if (t->b) sum += t->b[c];
            t->out[(int64_t)r * C + c] = silu_f(sum);
        }
    }
}

void qr_cpu_ssm_conv(qr_backend *be, const float *x, int64_t x_stride, float *conv_state, const qr_weight *w,
                     const qr_weight *b, const qr_ssm_params *p, float *out) {
    cpu_backend *cb = CB(be); /* p, w, b and x_stride: checked by backend_check.c */
    conv_task t = {.cb = cb, .x = x, .x_stride = x_stride, .state = conv_state, .w = w->host,
                   .b = b ? b->host : NULL, .p = p, .out = out};
    const int nth = cpu_pool_n_threads(cb->pool);
    if (nth == 1 || (int64_t)p->conv_dim * cb->n_tokens < 16384) conv_fn(&t, 0, p->conv_dim, 0);
    else cpu_pool_for(cb->pool, p->conv_dim, 64, conv_fn, &t);
}

/* ---- scan ---- */

/* ggml's reduction of 4 x 8 AVX lanes (GGML_F32_VEC_REDUCE): lane l holds the elements i % 32 == l. */
static inline float reduce32(const float *l) {
    float x[8];
    for (int k = 0; k < 8; k++) x[k] = (l[k] + l[16 + k]) + (l[8 + k] + l[24 + k]);
    const float t0 = x[0] + x[4], t1 = x[1] + x[5], t2 = x[2] + x[6], t3 = x[3] + x[7];
    return (t0 + t1) + (t2 + t3);
}

typedef struct scan_task {
    cpu_backend *cb;
    float *state;
    const float *xbc, *dt;
    int64_t dt_stride;
    const float *dt_bias, *A, *D;
    const qr_ssm_params *p;
    float *y;
    atomic_int diverged;
} scan_task;

/* One recurrent step of head h at row r (state S of the row's sequence). */
static void scan_row(const scan_task *t, int64_t h, int32_t r, float *S) {
    const qr_ssm_params *p = t->p;
    const int32_t N = p->d_state, P = p->head_dim, g = (int32_t)(h / (p->n_head / p->n_group));
    const float A = t->A[h], D = t->D ? t->D[h] : 0.0f, bias = t->dt_bias ? t->dt_bias[h] : 0.0f;
    const float *row = t->xbc + (int64_t)r * p->conv_dim;
    const float *x = row + h * P, *B = row + p->d_inner + (int64_t)g * N,
                *Cm = row + p->d_inner + (int64_t)p->n_group * N + (int64_t)g * N;
    const float dt = softplus_f(t->dt[(int64_t)r * t->dt_stride + h] + bias);
    const float dA = expf(dt * A);
    float *y = t->y + (int64_t)r * p->d_inner + h * P;
    const int32_t np = N & ~31; /* ggml: 4 x 8 FMA lanes over whole groups of 32, then the rest */
    for (int32_t i = 0; i < P; i++) {
        const float xdt = x[i] * dt;
        float *s = S + (int64_t)i * N;
        float lane[32] = {0};
        for (int32_t n0 = 0; n0 < np; n0 += 32)
            for (int32_t l = 0; l < 32; l++) {
                const float v = fmaf(s[n0 + l], dA, B[n0 + l] * xdt); /* ggml's contracted mul + add */
                s[n0 + l] = v;
                lane[l] = fmaf(v, Cm[n0 + l], lane[l]);
            }
        float sum = np > 0 ? reduce32(lane) : 0.0f;
        for (int32_t n = np; n < N; n++) {
            const float v = fmaf(s[n], dA, B[n] * xdt);
            s[n] = v;
            sum = fmaf(v, Cm[n], sum);
        }
        y[i] = sum + x[i] * D; /* ggml: mul, then add */
    }
}

/* Chunked (SSD) form for prefill: a run of >= SSD_MIN rows of one sequence is cut into chunks of
 * SSD_Q rows. With a_j = dt_j * A and cum_t = a_0 + .. + a_t (in double, so that the decays of long
 * chunks with large dt keep their precision), inside a chunk
 *   y_t = sum_{s <= t} (C_t . B_s) exp(cum_t - cum_s) dt_s x_s  +  exp(cum_t) (S_prev . C_t)  +  D x_t
 *   S   = exp(cum_last) S_prev  +  sum_s exp(cum_last - cum_s) dt_s x_s (outer) B_s
 * which is the recurrence unrolled (Mamba2 paper, state-space duality): the rows of a chunk become
 * dot products and a small matrix product instead of a serial update per row. */
#define SSD_Q 64
#define SSD_MIN 32

/* a . b over n values in 32 independent lanes (vectorizable), reduced as reduce32. */
static inline float dot_lanes(const float *a, const float *b, int32_t n) {
    float lane[32] = {0};
    const int32_t np = n & ~31;
    for (int32_t n0 = 0; n0 < np; n0 += 32)
        for (int32_t l = 0; l < 32; l++) lane[l] = fmaf(a[n0 + l], b[n0 + l], lane[l]);
    float sum = np > 0 ? reduce32(lane) : 0.0f;
    for (int32_t k = np; k < n; k++) sum = fmaf(a[k], b[k], sum);
    return sum;
}

static void scan_ssd_run(const scan_task *t, int64_t h, int32_t r0, int32_t T, float *S) {
    const qr_ssm_params *p = t->p;
    const int32_t N = p->d_state, P = p->head_dim, g = (int32_t)(h / (p->n_head / p->n_group));
    const float A = t->A[h], D = t->D ? t->D[h] : 0.0f, bias = t->dt_bias ? t->dt_bias[h] : 0.0f;
    const int64_t cd = p->conv_dim, bo = p->d_inner + (int64_t)g * N, co = p->d_inner + (int64_t)p->n_group * N + (int64_t)g * N;
    float G[SSD_Q][SSD_Q], dts[SSD_Q], w[SSD_Q];
    double cum[SSD_Q];
    for (int32_t c0 = 0; c0 < T; c0 += SSD_Q) {
        const int32_t L = T - c0 < SSD_Q ? T - c0 : SSD_Q;
        const float *rows = t->xbc + (int64_t)(r0 + c0) * cd;
        double acc = 0.0;
        for (int32_t j = 0; j < L; j++) {
            dts[j] = softplus_f(t->dt[(int64_t)(r0 + c0 + j) * t->dt_stride + h] + bias);
            acc += (double)dts[j] * (double)A;
            cum[j] = acc;
        }
        for (int32_t i = 0; i < L; i++) {
            const float *Ci = rows + (int64_t)i * cd + co;
            for (int32_t j = 0; j <= i; j++)
                G[i][j] = dot_lanes(Ci, rows + (int64_t)j * cd + bo, N) * expf((float)(cum[i] - cum[j])) * dts[j];
        }
        for (int32_t i = 0; i < L; i++) {
            const float *ri = rows + (int64_t)i * cd, *Ci = ri + co;
            const float dec = expf((float)cum[i]);
            float *y = t->y + (int64_t)(r0 + c0 + i) * p->d_inner + h * P;
            for (int32_t e = 0; e < P; e++) y[e] = 0.0f;
            for (int32_t j = 0; j <= i; j++) { /* the chunk's own inputs, row by row (vectorizable over e) */
                const float gij = G[i][j], *xj = rows + (int64_t)j * cd + h * P;
                for (int32_t e = 0; e < P; e++) y[e] = fmaf(gij, xj[e], y[e]);
            }
            for (int32_t e = 0; e < P; e++) /* the state carried in, then the skip */
                y[e] = (y[e] + dec * dot_lanes(S + (int64_t)e * N, Ci, N)) + ri[h * P + e] * D;
        }
        const float decL = expf((float)cum[L - 1]);
        for (int32_t j = 0; j < L; j++) w[j] = expf((float)(cum[L - 1] - cum[j])) * dts[j];
        for (int32_t e = 0; e < P; e++) {
            float *se = S + (int64_t)e * N;
            for (int32_t n = 0; n < N; n++) se[n] *= decL;
            for (int32_t j = 0; j < L; j++) {
                const float *rj = rows + (int64_t)j * cd;
                const float xw = rj[h * P + e] * w[j];
                const float *Bj = rj + bo;
                for (int32_t n = 0; n < N; n++) se[n] = fmaf(xw, Bj[n], se[n]);
            }
        }
    }
}

/* QUARREL_SSM_SCAN=ssd: prefill runs in the chunked form. Not the default on the CPU: it does the same
 * multiply-adds as the recurrence at SSD_Q = 64, d_state = 128 and measured 2.5x slower (nemotron-shaped
 * heads, 512 rows, 2-core AVX2); the recurrence also keeps ggml's order of operations bit for bit. */
static bool ssd_enabled(void) { return qr_knob_int(QR_KNOB_SSM_SCAN) == QR_SSM_SCAN_SSD; }

/* Heads [lo, hi): the rows in order, run by run (a run: consecutive rows of one sequence). */
static void scan_fn(void *arg, int64_t lo, int64_t hi, int ith) {
    scan_task *t = arg;
    const qr_ssm_params *p = t->p;
    const int32_t n_rows = t->cb->n_tokens;
    const int64_t slot_sz = (int64_t)p->n_head * p->head_dim * p->d_state, hsz = (int64_t)p->head_dim * p->d_state;
    const bool ssd = ssd_enabled();
    (void)ith;
    for (int64_t h = lo; h < hi; h++) {
        bool bad = false;
        for (int32_t r0 = 0; r0 < n_rows;) {
            int32_t r1 = r0 + 1;
            while (r1 < n_rows && t->cb->seq[r1] == t->cb->seq[r0]) r1++;
            float *S = t->state + (int64_t)t->cb->seq[r0] * slot_sz + h * hsz;
            if (ssd && r1 - r0 >= SSD_MIN) scan_ssd_run(t, h, r0, r1 - r0, S);
            else
                for (int32_t r = r0; r < r1; r++) scan_row(t, h, r, S);
            r0 = r1;
        }
        /* divergence check on the final states this head touched */
        for (int32_t r = 0; r < n_rows && !bad; r++) {
            const float *S = t->state + (int64_t)t->cb->seq[r] * slot_sz + h * hsz;
            for (int64_t i = 0; i < hsz; i++)
                if (!isfinite(S[i])) {
                    bad = true;
                    break;
                }
        }
        if (bad) atomic_store(&t->diverged, 1);
    }
}

/* The shapes: checked by backend_check.c. */
void qr_cpu_ssm_scan(qr_backend *be, const qr_ssm_scan_args *a) {
    cpu_backend *cb = CB(be);
    const qr_ssm_params *p = a->p;
    scan_task t = {.cb = cb, .state = a->state, .xbc = a->xbc, .dt = a->dt, .dt_stride = a->dt_stride,
                   .dt_bias = a->dt_bias ? a->dt_bias->host : NULL, .A = a->A->host, .D = a->D ? a->D->host : NULL,
                   .p = p, .y = a->y};
    atomic_init(&t.diverged, 0);
    const int nth = cpu_pool_n_threads(cb->pool);
    if (nth == 1 || (int64_t)p->d_inner * p->d_state * cb->n_tokens < 16384) scan_fn(&t, 0, p->n_head, 0);
    else cpu_pool_for(cb->pool, p->n_head, 1, scan_fn, &t);
    if (atomic_load(&t.diverged)) qr_cpu_raise(be, QR_ERR_NUMERIC, "ssm state diverged (NaN/Inf in the scan state)");
}

/* ---- gated grouped RMSNorm ---- */

/* The shapes: checked by backend_check.c; the hint a->next is unused. */
void qr_cpu_ssm_gate_norm(qr_backend *be, const qr_ssm_gate_norm_args *a) {
    cpu_backend *cb = CB(be);
    const float *y = a->y, *z = a->z;
    const int64_t z_stride = a->z_stride, n_rows = a->n_rows;
    const qr_weight *w = a->w;
    const qr_ssm_params *p = a->p;
    const float eps = a->eps;
    float *out = a->out;
    const int64_t di = p->d_inner, gs = di / p->n_group;
    const float *wf = w ? w->host : NULL;
    float *t = malloc((size_t)di * sizeof(float));
    if (!t) {
        qr_cpu_raise(be, QR_ERR_NOMEM, "ssm_gate_norm: out of memory");
        return;
    }
    for (int64_t r = 0; r < n_rows; r++) {
        const float *yr = y + r * di, *zr = z + r * z_stride;
        for (int64_t i = 0; i < di; i++) t[i] = silu_f(zr[i]) * yr[i];
        float *o = out + r * di;
        if (!wf) {
            memcpy(o, t, (size_t)di * sizeof(float));
            continue;
        }
        for (int32_t g = 0; g < p->n_group; g++) cb->k->rmsnorm_row(t + g * gs, wf + g * gs, gs, eps, o + g * gs);
    }
    free(t);
}
