/* ops_avx2.c — AVX2/FMA/F16C kernels of the CPU backend (compiled with -mavx2 -mfma -mf16c; used only
 * when qr_cpu_has_avx2() says so). Each kernel matches its scalar twin in ops_scalar.c within the
 * tolerance stated in tests/unit/test_backend.c; geglu matches exactly. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "util/util.h"

/* ---- helpers ---- */

static inline float hsum256(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    __m128 sh = _mm_movehdup_ps(lo);
    __m128 s = _mm_add_ps(lo, sh);
    sh = _mm_movehl_ps(sh, s);
    s = _mm_add_ss(s, sh);
    return _mm_cvtss_f32(s);
}

/* tinyBLAS's reduction of 8 lanes: t = lo + hi, (t0 + t2) + (t1 + t3). */
static inline float reduce8_avx(__m256 v) {
    __m128 t = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    t = _mm_add_ps(t, _mm_movehl_ps(t, t));
    t = _mm_add_ss(t, _mm_movehdup_ps(t));
    return _mm_cvtss_f32(t);
}

static inline float hmax256(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* e^x for 8 lanes: the 8-lane form of cpu_expf (cpu.h), bit-identical to it lane by lane. */
static inline __m256 exp256(__m256 x) {
    const __m256 shift = _mm256_set1_ps(CPU_EXP_SHIFT);
    const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(CPU_EXP_INV_LN2), shift);
    const __m256 n = _mm256_sub_ps(z, shift);
    const __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(CPU_EXP_LN2_LO), _mm256_fnmadd_ps(n, _mm256_set1_ps(CPU_EXP_LN2_HI), x));
    const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
    const __m256 scale = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_castps_si256(_mm256_set1_ps(1.0f))));
    const __m256 r2 = _mm256_mul_ps(r, r);
    const __m256 poly = _mm256_fmadd_ps(
        _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(CPU_EXP_C4), r, _mm256_set1_ps(CPU_EXP_C3)), r2,
                        _mm256_fmadd_ps(_mm256_set1_ps(CPU_EXP_C2), r, _mm256_set1_ps(CPU_EXP_C1))),
        r2, _mm256_mul_ps(_mm256_set1_ps(CPU_EXP_C0), r));
    const __m256 absn = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), n);
    const __m256 big = _mm256_cmp_ps(absn, _mm256_set1_ps(126.0f), _CMP_GT_OQ);
    if (!_mm256_movemask_ps(big)) return _mm256_fmadd_ps(poly, scale, scale);
    /* some lanes out of range: split the scale as cpu_expf does */
    const __m256i g = _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
                                       _mm256_set1_epi32((int)0x82000000u));
    const __m256 s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f000000)));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
    const __m256 huge = _mm256_cmp_ps(absn, _mm256_set1_ps(192.0f), _CMP_GT_OQ);
    const __m256 split = _mm256_mul_ps(_mm256_fmadd_ps(s2, poly, s2), s1);
    __m256 res = _mm256_blendv_ps(_mm256_fmadd_ps(poly, scale, scale), split, big);
    return _mm256_blendv_ps(res, _mm256_mul_ps(s1, s1), huge);
}

/* ---- rmsnorm ---- */

static void rmsnorm_row_avx2(const float *x, const float *w, int64_t dim, float eps, float *y) {
    /* squares in float, summed one by one in double: the scalar kernel's (and ggml's) exact sum */
    double sum = 0.0;
    for (int64_t i = 0; i < dim; i++) sum += (double)(x[i] * x[i]);
    const float mean = (float)(sum / (double)dim);
    const float scale = 1.0f / sqrtf(mean + eps);
    const __m256 vs = _mm256_set1_ps(scale);
    int64_t i = 0;
    for (; i + 8 <= dim; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vs);
        if (w) v = _mm256_mul_ps(v, _mm256_loadu_ps(w + i));
        _mm256_storeu_ps(y + i, v);
    }
    for (; i < dim; i++) {
        float v = x[i] * scale;
        y[i] = w ? v * w[i] : v;
    }
}

/* ---- rope ---- */

static void rope_row_avx2(float *x, int32_t n_head, int32_t head_dim, int32_t n_rot, qr_rope_mode mode,
                          const float *cs) {
    if (mode == QR_ROPE_NEOX) {
        const int32_t half = n_rot / 2;
        float c[QR_CPU_MAX_HEAD_DIM / 2], s[QR_CPU_MAX_HEAD_DIM / 2];
        for (int32_t i = 0; i < half; i++) {
            c[i] = cs[2 * i];
            s[i] = cs[2 * i + 1];
        }
        for (int32_t h = 0; h < n_head; h++) {
            float *xh = x + (int64_t)h * head_dim;
            int32_t i = 0;
            for (; i + 8 <= half; i += 8) {
                __m256 x0 = _mm256_loadu_ps(xh + i), x1 = _mm256_loadu_ps(xh + i + half);
                __m256 vc = _mm256_loadu_ps(c + i), vs = _mm256_loadu_ps(s + i);
                _mm256_storeu_ps(xh + i, _mm256_fmsub_ps(x0, vc, _mm256_mul_ps(x1, vs)));
                _mm256_storeu_ps(xh + i + half, _mm256_fmadd_ps(x0, vs, _mm256_mul_ps(x1, vc)));
            }
            for (; i < half; i++) {
                const float x0 = xh[i], x1 = xh[i + half];
                xh[i] = fmaf(x0, c[i], -(x1 * s[i]));
                xh[i + half] = fmaf(x0, s[i], x1 * c[i]);
            }
        }
        return;
    }
    for (int32_t h = 0; h < n_head; h++) {
        float *xh = x + (int64_t)h * head_dim;
        int32_t i0 = 0;
        for (; i0 + 8 <= n_rot; i0 += 8) {
            const __m256 v = _mm256_loadu_ps(xh + i0);
            const __m256 t = _mm256_loadu_ps(cs + i0);                    /* (c0, s0, c1, s1, ...) */
            const __m256 a = _mm256_moveldup_ps(v), b = _mm256_movehdup_ps(v); /* (x0, x0, ...), (x1, x1, ...) */
            const __m256 sw = _mm256_permute_ps(t, 0xB1);                /* (s0, c0, s1, c1, ...) */
            /* even lanes: fma(x0, c, -(x1*s)); odd lanes: fma(x0, s, x1*c) — the scalar kernel's rounding */
            _mm256_storeu_ps(xh + i0, _mm256_fmaddsub_ps(a, t, _mm256_mul_ps(b, sw)));
        }
        for (; i0 < n_rot; i0 += 2) {
            const float c = cs[i0], s = cs[i0 + 1], x0 = xh[i0], x1 = xh[i0 + 1];
            xh[i0] = fmaf(x0, c, -(x1 * s));
            xh[i0 + 1] = fmaf(x0, s, x1 * c);
        }
    }
}

/* ---- softmax ---- */

static void softmax_row_avx2(const float *x, int64_t dim, float *y) {
    __m256 vmax = _mm256_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 8 <= dim; i += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(x + i));
    float max = hmax256(vmax);
    for (; i < dim; i++) max = fmaxf(max, x[i]);
    const __m256 bm = _mm256_set1_ps(max);
    double sum = 0.0;
    for (i = 0; i + 8 <= dim; i += 8) {
        const __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), bm));
        _mm256_storeu_ps(y + i, e);
        sum += (double)reduce8_avx(e);
    }
    for (; i < dim; i++) {
        y[i] = cpu_expf(x[i] - max);
        sum += (double)y[i];
    }
    const float inv = (float)(1.0 / sum);
    const __m256 vi = _mm256_set1_ps(inv);
    for (i = 0; i + 8 <= dim; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), vi));
    for (; i < dim; i++) y[i] *= inv;
}

/* ---- attention: tiled online softmax ---- */

static inline __m256 load8_kv(const void *base, qr_type t, int32_t i) {
    return t == QR_TYPE_F16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)base + i)))
                            : _mm256_loadu_ps((const float *)base + i);
}

static inline float kv_scalar(const void *base, qr_type t, int32_t i) {
    return t == QR_TYPE_F16 ? qr_fp16_to_fp32(((const uint16_t *)base)[i]) : ((const float *)base)[i];
}

/* ggml's vec_dot_f16 reduction of 4 accumulators: (a0 + a2) + (a1 + a3), lo + hi, two hadds. */
static inline float reduce32_avx(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    const __m256 x = _mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3));
    const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    const __m128 t1 = _mm_hadd_ps(t0, t0);
    return _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
}

/* q.k in llama.cpp's order, bit-identical to ops_scalar.c's attn_dot_scalar. */
static inline float dot_q_k(const float *q, const void *k, qr_type t, int32_t n, bool single) {
    if (!single && n % 8 == 0) { /* tinyBLAS: one accumulator, lane i % 8 */
        __m256 acc = _mm256_setzero_ps();
        for (int32_t i = 0; i < n; i += 8) acc = _mm256_fmadd_ps(load8_kv(k, t, i), _mm256_loadu_ps(q + i), acc);
        return reduce8_avx(acc);
    }
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    const int32_t np = n & ~31;
    for (int32_t i = 0; i < np; i += 32) {
        a0 = _mm256_fmadd_ps(load8_kv(k, t, i), _mm256_loadu_ps(q + i), a0);
        a1 = _mm256_fmadd_ps(load8_kv(k, t, i + 8), _mm256_loadu_ps(q + i + 8), a1);
        a2 = _mm256_fmadd_ps(load8_kv(k, t, i + 16), _mm256_loadu_ps(q + i + 16), a2);
        a3 = _mm256_fmadd_ps(load8_kv(k, t, i + 24), _mm256_loadu_ps(q + i + 24), a3);
    }
    double sum = reduce32_avx(a0, a1, a2, a3);
    for (int32_t i = np; i < n; i++) sum += (double)(kv_scalar(k, t, i) * q[i]);
    return (float)sum;
}

/* The tinyBLAS order of dot_q_k (n % 8 == 0) for 4 keys `stride` bytes apart: out[e] bit-identical to
 * dot_q_k(q, k + e * stride, t, n, false); four independent FMA chains share the q loads. */
static inline void dot4_q_k(const float *q, const char *k, size_t stride, qr_type t, int32_t n, float *out) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int32_t i = 0; i < n; i += 8) {
        const __m256 qv = _mm256_loadu_ps(q + i);
        a0 = _mm256_fmadd_ps(load8_kv(k, t, i), qv, a0);
        a1 = _mm256_fmadd_ps(load8_kv(k + stride, t, i), qv, a1);
        a2 = _mm256_fmadd_ps(load8_kv(k + 2 * stride, t, i), qv, a2);
        a3 = _mm256_fmadd_ps(load8_kv(k + 3 * stride, t, i), qv, a3);
    }
    out[0] = reduce8_avx(a0);
    out[1] = reduce8_avx(a1);
    out[2] = reduce8_avx(a2);
    out[3] = reduce8_avx(a3);
}

/* acc[0..n) += e * v[0..n) */
static inline void axpy_v(float *acc, float e, const void *v, qr_type t, int32_t n) {
    const __m256 ve = _mm256_set1_ps(e);
    int32_t i = 0;
    if (t == QR_TYPE_F16) {
        const uint16_t *vh = v;
        for (; i + 8 <= n; i += 8) {
            __m256 vv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(vh + i)));
            _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(ve, vv, _mm256_loadu_ps(acc + i)));
        }
        for (; i < n; i++) acc[i] = fmaf(e, qr_fp16_to_fp32(vh[i]), acc[i]);
    } else {
        const float *vf = v;
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(ve, _mm256_loadu_ps(vf + i), _mm256_loadu_ps(acc + i)));
        for (; i < n; i++) acc[i] = fmaf(e, vf[i], acc[i]);
    }
}

/* Passes 2 and 3's start of attn_head_avx2 on the n = last - first + 1 scores s (already scaled) whose maximum is max:
 * exp(s - max), the sum as ggml forms it (float sums of aligned groups of 8 positions, positions outside [first, last]
 * counting as 0, added in double; a sink joins after the keys), and the probabilities rounded to f16, in place. */
void qr_cpu_attn_probs_avx2(const cpu_attn_job *j, float *s, float max) {
    const int32_t n = j->last - j->first + 1;
    if (j->has_sink) max = fmaxf(max, j->sink);
    const __m256 bm = _mm256_set1_ps(max);
    int32_t t = 0;
    for (; t + 8 <= n; t += 8) _mm256_storeu_ps(s + t, exp256(_mm256_sub_ps(_mm256_loadu_ps(s + t), bm)));
    for (; t < n; t++) s[t] = cpu_expf(s[t] - max);
    double sum = 0.0;
    for (int32_t c = j->first & ~7; c <= j->last; c += 8) {
        if (c >= j->first && c + 7 <= j->last) { /* (a whole group: straight from s, no store-forwarding stall) */
            sum += (double)reduce8_avx(_mm256_loadu_ps(s + (c - j->first)));
            continue;
        }
        float l[8];
        for (int k = 0; k < 8; k++) l[k] = c + k >= j->first && c + k <= j->last ? s[c + k - j->first] : 0.0f;
        sum += (double)reduce8_avx(_mm256_loadu_ps(l));
    }
    if (j->has_sink) sum += (double)expf(j->sink - max); /* ggml: the sink joins the sum after the keys */
    const float inv = (float)(1.0 / sum);
    const __m256 vinv = _mm256_set1_ps(inv);
    for (t = 0; t + 8 <= n; t += 8)
        _mm256_storeu_ps(s + t, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_mul_ps(_mm256_loadu_ps(s + t), vinv),
                                                               _MM_FROUND_TO_NEAREST_INT)));
    for (; t < n; t++) s[t] = qr_fp16_to_fp32(qr_fp32_to_fp16(s[t] * inv));
}

static void attn_head_avx2(const cpu_attn_job *j) {
    float (*acc)[QR_CPU_MAX_HEAD_DIM] = (float (*)[QR_CPU_MAX_HEAD_DIM])j->acc; /* 64-byte aligned */
    float q[QR_CPU_MAX_HEAD_DIM];
    const int32_t dk = j->head_dim_k, dv = j->head_dim_v, lanes = j->single ? 32 : 8;
    int32_t i = 0;
    for (; i + 8 <= dk; i += 8)
        _mm256_storeu_ps(q + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(j->q + i), _MM_FROUND_TO_NEAREST_INT)));
    for (; i < dk; i++) q[i] = qr_fp16_to_fp32(qr_fp32_to_fp16(j->q[i]));
    if (j->first > j->last) {
        memset(j->out, 0, sizeof(float) * (size_t)dv);
        return;
    }
    const size_t esz = j->kv_type == QR_TYPE_F16 ? 2 : 4;
    const char *kb = j->k_base, *vb = j->v_base;
    float *s = j->scores;
    const int32_t n = j->last - j->first + 1;
    /* pass 1: scores, block by block (the slots of one block are contiguous) */
    float max = -INFINITY;
    for (int32_t t = 0; t < n;) {
        const int32_t p = j->first + t, off = p % j->block_size;
        int32_t run = j->block_size - off;
        if (run > n - t) run = n - t;
        const int64_t slot0 = (int64_t)j->block_table[p / j->block_size] * j->block_size + off;
        int32_t u = 0;
        if (!j->single && dk % 8 == 0) /* four keys at a time, same sums */
            for (; u + 4 <= run; u += 4) {
                float sc4[4];
                dot4_q_k(q, kb + ((slot0 + u) * j->k_stride + j->k_off) * esz, (size_t)j->k_stride * esz, j->kv_type,
                         dk, sc4);
                for (int e = 0; e < 4; e++) {
                    float sc = sc4[e];
                    if (j->softcap > 0.0f) sc = tanhf(sc * (1.0f / j->softcap)) * j->softcap;
                    sc *= j->scale;
                    s[t + u + e] = sc;
                    max = sc > max ? sc : max; /* fmaxf without the call (NaN scores never raise it either) */
                }
            }
        for (; u < run; u++) {
            float sc = dot_q_k(q, kb + ((slot0 + u) * j->k_stride + j->k_off) * esz, j->kv_type, dk, j->single);
            if (j->softcap > 0.0f) sc = tanhf(sc * (1.0f / j->softcap)) * j->softcap;
            sc *= j->scale;
            s[t + u] = sc;
            max = sc > max ? sc : max;
        }
        t += run;
    }
    qr_cpu_attn_probs_avx2(j, j->scores, max);
    int32_t t;
    for (int l = 0; l < lanes; l++) memset(acc[l], 0, sizeof(float) * (size_t)dv);
    if (!j->single && dv % 8 == 0) {
        /* the same sums with the 8 lane accumulators of 8 dims held in registers: positions in aligned
         * groups of 8 (lane = position % 8), 64 positions per batch; positions outside [first, last]
         * add 0 * 0 */
        static const _Alignas(32) float zero_kv[QR_CPU_MAX_HEAD_DIM] = {0};
        for (int32_t P0 = j->first & ~7; P0 <= j->last; P0 += 64) {
            const void *vp[64];
            float pr[64];
            for (int32_t e = 0; e < 64; e++) {
                const int32_t P = P0 + e;
                if (P < j->first || P > j->last) {
                    vp[e] = zero_kv;
                    pr[e] = 0.0f;
                    continue;
                }
                const int64_t slot = (int64_t)j->block_table[P / j->block_size] * j->block_size + P % j->block_size;
                vp[e] = vb + (slot * j->v_stride + j->v_off) * esz;
                pr[e] = s[P - j->first];
            }
            const qr_type vt = j->kv_type;
            const int32_t ng = (j->last - P0) / 8 + 1 < 8 ? (j->last - P0) / 8 + 1 : 8;
            for (int32_t c = 0; c < dv; c += 8) {
                __m256 a[8];
                for (int l = 0; l < 8; l++) a[l] = _mm256_load_ps(acc[l] + c);
                for (int32_t g = 0; g < ng; g++)
                    for (int l = 0; l < 8; l++) {
                        const int e = g * 8 + l;
                        /* zero_kv is f32 zeros: as f16 it reads zeros too */
                        a[l] = _mm256_fmadd_ps(_mm256_set1_ps(pr[e]), load8_kv(vp[e], vt, c), a[l]);
                    }
                for (int l = 0; l < 8; l++) _mm256_store_ps(acc[l] + c, a[l]);
            }
        }
    } else
    for (t = 0; t < n;) {
        const int32_t p = j->first + t, off = p % j->block_size;
        int32_t run = j->block_size - off;
        if (run > n - t) run = n - t;
        const int64_t slot0 = (int64_t)j->block_table[p / j->block_size] * j->block_size + off;
        for (int32_t u = 0; u < run; u++)
            axpy_v(acc[(p + u) % lanes], s[t + u], vb + ((slot0 + u) * j->v_stride + j->v_off) * esz, j->kv_type, dv);
        t += run;
    }
    if (j->single) { /* vec_dot_f16 reduction per output dim: lanes (8a + b) for a = 0..3, b = 0..7 */
        for (i = 0; i < dv; i++) {
            float x[8];
            for (int b = 0; b < 8; b++) x[b] = (acc[b][i] + acc[16 + b][i]) + (acc[8 + b][i] + acc[24 + b][i]);
            const float t0 = x[0] + x[4], t1 = x[1] + x[5], t2 = x[2] + x[6], t3 = x[3] + x[7];
            j->out[i] = (t0 + t1) + (t2 + t3);
        }
        return;
    }
    for (i = 0; i + 8 <= dv; i += 8) {
        const __m256 t0 = _mm256_add_ps(_mm256_load_ps(acc[0] + i), _mm256_load_ps(acc[4] + i));
        const __m256 t1 = _mm256_add_ps(_mm256_load_ps(acc[1] + i), _mm256_load_ps(acc[5] + i));
        const __m256 t2 = _mm256_add_ps(_mm256_load_ps(acc[2] + i), _mm256_load_ps(acc[6] + i));
        const __m256 t3 = _mm256_add_ps(_mm256_load_ps(acc[3] + i), _mm256_load_ps(acc[7] + i));
        _mm256_storeu_ps(j->out + i, _mm256_add_ps(_mm256_add_ps(t0, t2), _mm256_add_ps(t1, t3)));
    }
    for (; i < dv; i++) {
        const float t0 = acc[0][i] + acc[4][i], t1 = acc[1][i] + acc[5][i], t2 = acc[2][i] + acc[6][i],
                    t3 = acc[3][i] + acc[7][i];
        j->out[i] = (t0 + t2) + (t1 + t3);
    }
}

/* ---- elementwise ---- */

static void swiglu_avx2(const float *g, const float *u, int64_t n, float *out) {
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 vg = _mm256_loadu_ps(g + i);
        __m256 e = exp256(_mm256_sub_ps(zero, vg));
        __m256 silu = _mm256_div_ps(vg, _mm256_add_ps(one, e));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(silu, _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++) out[i] = g[i] / (1.0f + cpu_expf(-g[i])) * u[i];
}

static void geglu_avx2(const float *g, const float *u, int64_t n, float *out, const float *tab) {
    const __m256 lo = _mm256_set1_ps(-10.0f), hi = _mm256_set1_ps(10.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(g + i), vu = _mm256_loadu_ps(u + i);
        __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT);
        __m256 gl = _mm256_i32gather_ps(tab, _mm256_cvtepu16_epi32(h), 4);
        __m256 r = _mm256_mul_ps(gl, vu);
        r = _mm256_blendv_ps(r, _mm256_mul_ps(x, vu), _mm256_cmp_ps(x, hi, _CMP_GE_OQ));
        r = _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LE_OQ), r);
        _mm256_storeu_ps(out + i, r);
    }
    for (; i < n; i++) {
        const float x = g[i];
        if (x <= -10.0f) out[i] = 0.0f;
        else if (x >= 10.0f) out[i] = x * u[i];
        else out[i] = tab[qr_fp32_to_fp16(x)] * u[i];
    }
}

static void add_avx2(const float *a, const float *b, int64_t n, float *out) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    for (; i < n; i++) out[i] = a[i] + b[i];
}

static void mul_avx2(const float *a, const float *b, int64_t n, float *out) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    for (; i < n; i++) out[i] = a[i] * b[i];
}

static void scale_avx2(const float *x, float s, int64_t n, float *out) {
    const __m256 vs = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vs));
    for (; i < n; i++) out[i] = x[i] * s;
}

static void to_f16_avx2(const float *src, uint16_t *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) dst[i] = qr_fp32_to_fp16(src[i]);
}

static void mad_f32_avx2(float *y, const float *x, float v, int64_t n) {
    const __m256 vv = _mm256_set1_ps(v);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(_mm256_loadu_ps(x + i), vv, _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] = fmaf(x[i], v, y[i]);
}

static inline __m256 load_f16x8(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
static inline void store_f16x8(uint16_t *p, __m256 x) {
    _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
}

static void mad_f16_avx2(uint16_t *y, const uint16_t *x, float v, int64_t n) {
    const __m256 vv = _mm256_set1_ps(v);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) store_f16x8(y + i, _mm256_fmadd_ps(load_f16x8(x + i), vv, load_f16x8(y + i)));
    for (; i < n; i++) y[i] = qr_fp32_to_fp16(fmaf(qr_fp16_to_fp32(x[i]), v, qr_fp16_to_fp32(y[i])));
}

static void scale_f16_avx2(uint16_t *y, float v, int64_t n) {
    const __m256 vv = _mm256_set1_ps(v);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) store_f16x8(y + i, _mm256_mul_ps(load_f16x8(y + i), vv));
    for (; i < n; i++) y[i] = qr_fp32_to_fp16(qr_fp16_to_fp32(y[i]) * v);
}

const cpu_kernels qr_cpu_kernels_avx2 = {
    .name = "avx2",
    .rmsnorm_row = rmsnorm_row_avx2,
    .rope_row = rope_row_avx2,
    .softmax_row = softmax_row_avx2,
    .attn_head = attn_head_avx2,
    .swiglu = swiglu_avx2,
    .geglu = geglu_avx2,
    .add = add_avx2,
    .mul = mul_avx2,
    .scale = scale_avx2,
    .to_f16 = to_f16_avx2,
    .mad_f32 = mad_f32_avx2,
    .mad_f16 = mad_f16_avx2,
    .scale_f16 = scale_f16_avx2,
};
