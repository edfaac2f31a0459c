/* ops_scalar.c — the scalar reference kernels of the CPU backend (the oracle every SIMD and CUDA
 * kernel is tested against), plus the shared helpers (GELU table, rope cos/sin cache). Written for
 * clarity: plain loops, f32 math, double where ggml uses double. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "util/util.h"

#define GELU_COEF_A 0.044715f
#define SQRT_2_OVER_PI 0.79788456080286535587989211986876f

float qr_cpu_gelu_f32(float x) {
    /* 1 + a x^2 fused as GCC contracts ggml's expression (changes one f16 table entry, x = -1.999) */
    return 0.5f * x * (1.0f + tanhf(SQRT_2_OVER_PI * x * fmaf(GELU_COEF_A * x, x, 1.0f)));
}

void qr_cpu_gelu_table_init(float *tab) {
    for (uint32_t h = 0; h < 65536; h++) {
        float x = qr_fp16_to_fp32((uint16_t)h);
        tab[h] = qr_fp16_to_fp32(qr_fp32_to_fp16(qr_cpu_gelu_f32(x)));
    }
}

/* ---- rope ---- */

/* The dimension index where the rotation frequency has done n_rot turns over n_ctx_orig (YaRN). */
static float yarn_corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
    return (float)n_dims * logf((float)n_ctx_orig / (n_rot * 2.0f * (float)M_PI)) / (2.0f * logf(base));
}

static float yarn_ramp(float low, float high, int i0) {
    float y = (float)(i0 / 2 - low) / fmaxf(0.001f, high - low);
    return 1.0f - fminf(1.0f, fmaxf(0.0f, y));
}

void qr_cpu_rope_cache(float pos, const qr_rope_params *p, const float *ff, float *cs) {
    const int n_rot = p->n_rot;
    const float theta_scale = powf(p->freq_base, -2.0f / (float)n_rot);
    const float freq_scale = p->freq_scale;
    const float mscale0 = p->attn_factor == 0.0f ? 1.0f : p->attn_factor;
    float corr[2] = {0.0f, 0.0f};
    if (p->ext_factor != 0.0f) {
        float start = floorf(yarn_corr_dim(n_rot, p->n_ctx_orig, p->beta_fast, p->freq_base));
        float end = ceilf(yarn_corr_dim(n_rot, p->n_ctx_orig, p->beta_slow, p->freq_base));
        corr[0] = fmaxf(0.0f, start);
        corr[1] = fminf((float)(n_rot - 1), end);
    }
    float theta = pos;
    for (int i0 = 0; i0 < n_rot; i0 += 2) {
        const float f = ff ? ff[i0 / 2] : 1.0f;
        const float theta_extrap = theta / f;
        const float theta_interp = freq_scale * theta_extrap;
        float th = theta_interp, mscale = mscale0;
        if (p->ext_factor != 0.0f) { /* the two FMAs GCC contracts in ggml's x86 build (its rope_yarn) */
            float mix = yarn_ramp(corr[0], corr[1], i0) * p->ext_factor;
            th = fmaf(theta_interp, 1.0f - mix, theta_extrap * mix);
            mscale *= fmaf(0.1f, logf(1.0f / freq_scale), 1.0f);
        }
        cs[i0] = cosf(th) * mscale;
        cs[i0 + 1] = sinf(th) * mscale;
        theta *= theta_scale;
    }
}

static void rope_row_scalar(float *x, int32_t n_head, int32_t head_dim, int32_t n_rot, qr_rope_mode mode,
                            const float *cs) {
    for (int32_t h = 0; h < n_head; h++) {
        float *xh = x + (int64_t)h * head_dim;
        for (int32_t i0 = 0; i0 < n_rot; i0 += 2) {
            const float c = cs[i0], s = cs[i0 + 1];
            const int32_t a = mode == QR_ROPE_NEOX ? i0 / 2 : i0;
            const int32_t b = mode == QR_ROPE_NEOX ? i0 / 2 + n_rot / 2 : i0 + 1;
            const float x0 = xh[a], x1 = xh[b];
            /* fused as GCC contracts ggml's x0*c - x1*s and x0*s + x1*c */
            xh[a] = fmaf(x0, c, -(x1 * s));
            xh[b] = fmaf(x0, s, x1 * c);
        }
    }
}

/* ---- norms, softmax ---- */

/* The 8-lane reduction of llamafile's tinyBLAS (which ggml uses for these f16 products):
 * t_k = l_k + l_{k+4}, result (t_0 + t_2) + (t_1 + t_3). */
static inline float reduce8(const float *l) {
    const float t0 = l[0] + l[4], t1 = l[1] + l[5], t2 = l[2] + l[6], t3 = l[3] + l[7];
    return (t0 + t2) + (t1 + t3);
}


static void rmsnorm_row_scalar(const float *x, const float *w, int64_t dim, float eps, float *y) {
    double sum = 0.0;
    for (int64_t i = 0; i < dim; i++) sum += (double)(x[i] * x[i]);
    const float mean = (float)(sum / (double)dim);
    const float scale = 1.0f / sqrtf(mean + eps);
    for (int64_t i = 0; i < dim; i++) {
        float v = x[i] * scale;
        y[i] = w ? v * w[i] : v;
    }
}

static void softmax_row_scalar(const float *x, int64_t dim, float *y) {
    float max = -INFINITY;
    for (int64_t i = 0; i < dim; i++) max = fmaxf(max, x[i]);
    double sum = 0.0;
    int64_t i = 0;
    for (; i + 8 <= dim; i += 8) { /* ggml: float sums of groups of 8, added in double */
        float l[8];
        for (int k = 0; k < 8; k++) l[k] = y[i + k] = cpu_expf(x[i + k] - max);
        sum += (double)reduce8(l);
    }
    for (; i < dim; i++) {
        y[i] = cpu_expf(x[i] - max);
        sum += (double)y[i];
    }
    const float inv = (float)(1.0 / sum);
    for (i = 0; i < dim; i++) y[i] *= inv;
}

/* ---- attention ---- */

static inline float kv_at(const void *base, qr_type t, int64_t idx) {
    if (t == QR_TYPE_F16) return qr_fp16_to_fp32(((const uint16_t *)base)[idx]);
    return ((const float *)base)[idx];
}

static inline int64_t attn_slot(const cpu_attn_job *j, int32_t p) {
    return (int64_t)j->block_table[p / j->block_size] * j->block_size + p % j->block_size;
}

/* ggml's vec_dot_f16 reduction of 32 lanes (4 vectors of 8): x = (v0 + v2) + (v1 + v3) lane-wise,
 * t_k = x_k + x_{k+4}, result (t0 + t1) + (t2 + t3). */
static inline float reduce32(const float *l) {
    float x[8];
    for (int k = 0; k < 8; k++) x[k] = (l[k] + l[16 + k]) + (l[8 + k] + l[24 + k]);
    const float t0 = x[0] + x[4], t1 = x[1] + x[5], t2 = x[2] + x[6], t3 = x[3] + x[7];
    return (t0 + t1) + (t2 + t3);
}

/* q.k of one key in llama.cpp's order: tinyBLAS (lane i % 8) for passes of several rows when dk is a
 * multiple of 8; else vec_dot_f16 (lane i % 32 over the first dk & ~31 elements, the rest added in
 * double). */
static float attn_dot_scalar(const cpu_attn_job *j, const float *q, int64_t base) {
    const int32_t dk = j->head_dim_k;
    if (!j->single && dk % 8 == 0) {
        float lane[8] = {0};
        for (int32_t i = 0; i < dk; i++) lane[i % 8] = fmaf(kv_at(j->k_base, j->kv_type, base + i), q[i], lane[i % 8]);
        return reduce8(lane);
    }
    float lane[32] = {0};
    const int32_t np = dk & ~31;
    for (int32_t i = 0; i < np; i++) lane[i % 32] = fmaf(kv_at(j->k_base, j->kv_type, base + i), q[i], lane[i % 32]);
    double sum = reduce32(lane);
    for (int32_t i = np; i < dk; i++) sum += (double)(kv_at(j->k_base, j->kv_type, base + i) * q[i]);
    return (float)sum;
}

/* Scores, softmax and the weighted sum of V with the bits of ggml's non flash-attention path on x86
 * (see attn_dot_scalar); in the weighted sum the key at position p goes to lane p % 8 (tinyBLAS) or
 * p % 32 (one-row passes). */
static void attn_head_scalar(const cpu_attn_job *j) {
    float (*acc)[QR_CPU_MAX_HEAD_DIM] = (float (*)[QR_CPU_MAX_HEAD_DIM])j->acc; /* [QR_CPU_ATTN_LANES] rows */
    float q[QR_CPU_MAX_HEAD_DIM];
    const int32_t dk = j->head_dim_k, dv = j->head_dim_v, lanes = j->single ? 32 : 8;
    for (int32_t i = 0; i < dk; i++) q[i] = qr_fp16_to_fp32(qr_fp32_to_fp16(j->q[i]));
    for (int32_t i = 0; i < dv; i++) j->out[i] = 0.0f;
    if (j->first > j->last) return;
    float *s = j->scores;
    const int32_t n = j->last - j->first + 1;
    float max = -INFINITY;
    for (int32_t t = 0; t < n; t++) {
        float sc = attn_dot_scalar(j, q, attn_slot(j, j->first + t) * j->k_stride + j->k_off);
        if (j->softcap > 0.0f) sc = tanhf(sc * (1.0f / j->softcap)) * j->softcap;
        sc *= j->scale;
        s[t] = sc;
        max = fmaxf(max, sc);
    }
    if (j->has_sink) max = fmaxf(max, j->sink);
    for (int32_t t = 0; t < n; t++) s[t] = cpu_expf(s[t] - max);
    /* the sum as ggml forms it: float sums of aligned groups of 8 positions, added in double */
    double sum = 0.0;
    for (int32_t c = j->first & ~7; c <= j->last; c += 8) {
        float l[8];
        for (int k = 0; k < 8; k++) l[k] = c + k >= j->first && c + k <= j->last ? s[c + k - j->first] : 0.0f;
        sum += (double)reduce8(l);
    }
    if (j->has_sink) sum += (double)expf(j->sink - max); /* ggml: the sink joins the sum after the keys */
    const float inv = (float)(1.0 / sum);
    for (int32_t l = 0; l < lanes; l++) memset(acc[l], 0, sizeof(float) * (size_t)dv);
    for (int32_t t = 0; t < n; t++) {
        const int32_t pos = j->first + t;
        const float p = qr_fp16_to_fp32(qr_fp32_to_fp16(s[t] * inv));
        const int64_t base = attn_slot(j, pos) * j->v_stride + j->v_off;
        float *a = acc[pos % lanes];
        for (int32_t i = 0; i < dv; i++) a[i] = fmaf(p, kv_at(j->v_base, j->kv_type, base + i), a[i]);
    }
    for (int32_t i = 0; i < dv; i++) {
        float l[32];
        for (int32_t k = 0; k < lanes; k++) l[k] = acc[k][i];
        j->out[i] = j->single ? reduce32(l) : reduce8(l);
    }
}

/* ---- elementwise ---- */

static void swiglu_scalar(const float *g, const float *u, int64_t n, float *out) {
    for (int64_t i = 0; i < n; i++) out[i] = g[i] / (1.0f + cpu_expf(-g[i])) * u[i];
}

static void geglu_scalar(const float *g, const float *u, int64_t n, float *out, const float *tab) {
    for (int64_t i = 0; i < n; i++) {
        const float x = g[i];
        if (x <= -10.0f) out[i] = 0.0f;
        else if (x >= 10.0f) out[i] = x * u[i];
        else out[i] = tab[qr_fp32_to_fp16(x)] * u[i];
    }
}

static void add_scalar(const float *a, const float *b, int64_t n, float *out) {
    for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

static void mul_scalar(const float *a, const float *b, int64_t n, float *out) {
    for (int64_t i = 0; i < n; i++) out[i] = a[i] * b[i];
}

static void scale_scalar(const float *x, float s, int64_t n, float *out) {
    for (int64_t i = 0; i < n; i++) out[i] = x[i] * s;
}

static void to_f16_scalar(const float *src, uint16_t *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = qr_fp32_to_fp16(src[i]);
}

static void mad_f32_scalar(float *y, const float *x, float v, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = fmaf(x[i], v, y[i]);
}

static void mad_f16_scalar(uint16_t *y, const uint16_t *x, float v, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = qr_fp32_to_fp16(fmaf(qr_fp16_to_fp32(x[i]), v, qr_fp16_to_fp32(y[i])));
}

static void scale_f16_scalar(uint16_t *y, float v, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = qr_fp32_to_fp16(qr_fp16_to_fp32(y[i]) * v);
}

const cpu_kernels qr_cpu_kernels_scalar = {
    .name = "scalar",
    .rmsnorm_row = rmsnorm_row_scalar,
    .rope_row = rope_row_scalar,
    .softmax_row = softmax_row_scalar,
    .attn_head = attn_head_scalar,
    .swiglu = swiglu_scalar,
    .geglu = geglu_scalar,
    .add = add_scalar,
    .mul = mul_scalar,
    .scale = scale_scalar,
    .to_f16 = to_f16_scalar,
    .mad_f32 = mad_f32_scalar,
    .mad_f16 = mad_f16_scalar,
    .scale_f16 = scale_f16_scalar,
};
