/* attn_avx512.c — attention of the heads of one GQA group at one query row, AVX-512 (qr_cpu_attn_group_avx512,
 * cpu.h): what attn_head_avx2 computes for each head of a multi-row pass, bit for bit, with the K and V rows read and
 * converted from f16 once for the whole group instead of once per head.
 *   scores: tinyBLAS's order, one 8-lane accumulator a key (lane i % 8 over the dims), here two keys a zmm (one per
 *           256-bit half, the same fma on each lane), reduced as reduce8_avx does ((t0 + t2) + (t1 + t3),
 *           t_i = a_i + a_(i+4));
 *   softmax: qr_cpu_attn_probs_avx2 (the AVX2 kernel's own code);
 *   V sums:  8 lane accumulators (position % 8) of every output dim, 16 dims a zmm instead of 8 (element-wise: the
 *           same fma per element in the same order), the lanes added as attn_head_avx2 adds them.
 * Compiled with the AVX-512 flags (CMakeLists.txt); called only on hosts that have them (backend_cpu.c). */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "util/util.h"

/* The slot of position p of job j's sequence. */
static inline int64_t slot_of(const cpu_attn_job *j, int32_t p) {
    return (int64_t)j->block_table[p / j->block_size] * j->block_size + p % j->block_size;
}

/* 8 f16 values of key row a in the low half and of key row b in the high half, as floats. */
static inline __m512 load_pair(const uint16_t *a, const uint16_t *b) {
    const __m256i h = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)a)),
                                              _mm_loadu_si128((const __m128i *)b), 1);
    return _mm512_cvtph_ps(h);
}

/* reduce8_avx of each of 8 keys' accumulators (a0..a3: key pairs, the low key of a pair in the low 256 bits), in key
 * order. */
static inline __m256 reduce_pairs(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 0, 0, 0, 0, 0, 0, 0);
    /* t_i = a_i + a_(i+4) per key (chunks 0, 1 of a zmm: the low key; 2, 3: the high one) */
    const __m512 t0 = _mm512_add_ps(a0, _mm512_shuffle_f32x4(a0, a0, _MM_SHUFFLE(2, 3, 0, 1)));
    const __m512 t1 = _mm512_add_ps(a1, _mm512_shuffle_f32x4(a1, a1, _MM_SHUFFLE(2, 3, 0, 1)));
    const __m512 t2 = _mm512_add_ps(a2, _mm512_shuffle_f32x4(a2, a2, _MM_SHUFFLE(2, 3, 0, 1)));
    const __m512 t3 = _mm512_add_ps(a3, _mm512_shuffle_f32x4(a3, a3, _MM_SHUFFLE(2, 3, 0, 1)));
    /* keys 0..3 and 4..7, 4 lanes each */
    const __m512 u0 = _mm512_shuffle_f32x4(t0, t1, _MM_SHUFFLE(2, 0, 2, 0));
    const __m512 u1 = _mm512_shuffle_f32x4(t2, t3, _MM_SHUFFLE(2, 0, 2, 0));
    const __m512 v0 = _mm512_add_ps(u0, _mm512_permute_ps(u0, _MM_SHUFFLE(3, 2, 3, 2)));
    const __m512 v1 = _mm512_add_ps(u1, _mm512_permute_ps(u1, _MM_SHUFFLE(3, 2, 3, 2)));
    const __m512 w0 = _mm512_add_ps(v0, _mm512_permute_ps(v0, _MM_SHUFFLE(1, 1, 1, 1)));
    const __m512 w1 = _mm512_add_ps(v1, _mm512_permute_ps(v1, _MM_SHUFFLE(1, 1, 1, 1)));
    return _mm512_castps512_ps256(_mm512_permutex2var_ps(w0, idx, w1));
}

/* Scores of keys t .. t + 7 (indices past n - 1 repeat key n - 1) for the G heads: kp holds the 8 keys' K rows as
 * floats, key pairs interleaved 8 dims a half ([pair][chunk][16]); out[h][0..8) = reduce8_avx of each key's
 * accumulator, in key order. */
static inline __attribute__((always_inline)) void scores8(const float *kp, int32_t nch, const float (*qd)[2 * QR_CPU_MAX_HEAD_DIM],
                                                         const int G, __m256 *out) {
    for (int h = 0; h < G; h++) {
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int32_t c = 0; c < nch; c++) {
            const __m512 q = _mm512_load_ps(qd[h] + 16 * c);
            a0 = _mm512_fmadd_ps(_mm512_load_ps(kp + (0 * nch + c) * 16), q, a0);
            a1 = _mm512_fmadd_ps(_mm512_load_ps(kp + (1 * nch + c) * 16), q, a1);
            a2 = _mm512_fmadd_ps(_mm512_load_ps(kp + (2 * nch + c) * 16), q, a2);
            a3 = _mm512_fmadd_ps(_mm512_load_ps(kp + (3 * nch + c) * 16), q, a3);
        }
        out[h] = reduce_pairs(a0, a1, a2, a3);
    }
}

/* The same for G <= 4 heads with the keys converted straight into registers, a chunk of all 8 keys at a time, and
 * every head's accumulators live (no staging of the converted rows through memory): each accumulator takes the same
 * fma's in the same order as scores8's, so the same scores. k[2 pr], k[2 pr + 1]: the K rows of pair pr. */
static inline __attribute__((always_inline)) void scores8_direct(const uint16_t *const *k, int32_t nch,
                                                                const float (*qd)[2 * QR_CPU_MAX_HEAD_DIM], const int G,
                                                                __m256 *out) {
    __m512 a[4][4];
    for (int h = 0; h < G; h++)
        for (int pr = 0; pr < 4; pr++) a[h][pr] = _mm512_setzero_ps();
    for (int32_t c = 0; c < nch; c++) {
        const __m512 k0 = load_pair(k[0] + 8 * c, k[1] + 8 * c), k1 = load_pair(k[2] + 8 * c, k[3] + 8 * c);
        const __m512 k2 = load_pair(k[4] + 8 * c, k[5] + 8 * c), k3 = load_pair(k[6] + 8 * c, k[7] + 8 * c);
        for (int h = 0; h < G; h++) {
            const __m512 q = _mm512_load_ps(qd[h] + 16 * c);
            a[h][0] = _mm512_fmadd_ps(k0, q, a[h][0]);
            a[h][1] = _mm512_fmadd_ps(k1, q, a[h][1]);
            a[h][2] = _mm512_fmadd_ps(k2, q, a[h][2]);
            a[h][3] = _mm512_fmadd_ps(k3, q, a[h][3]);
        }
    }
    for (int h = 0; h < G; h++) out[h] = reduce_pairs(a[h][0], a[h][1], a[h][2], a[h][3]);
}

/* Pass 3's sums for dims c .. c + 15 and the lanes l = 4 half .. 4 half + 3 of G <= 6 heads, the V rows converted
 * straight into registers (4 positions at a time, every head's 4 accumulators live): each accumulator takes the same
 * fma's in the same order (position groups g ascending) as with the rows staged in memory, so the same sums. */
static inline __attribute__((always_inline)) void v_direct(float *acc, int32_t dv, int32_t c, int half,
                                                          const uint16_t *const *vp,
                                                          const float (*pr)[64], int32_t ng, const int G) {
    __m512 a[6][4];
    for (int h = 0; h < G; h++)
        for (int l = 0; l < 4; l++) a[h][l] = _mm512_load_ps(acc + ((size_t)h * 8 + 4 * half + l) * (size_t)dv + c);
    for (int32_t g = 0; g < ng; g++) {
        __m512 v[4];
        for (int l = 0; l < 4; l++) {
            const uint16_t *r = vp[g * 8 + 4 * half + l];
            v[l] = r ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(r + c))) : _mm512_setzero_ps();
        }
        for (int h = 0; h < G; h++)
            for (int l = 0; l < 4; l++)
                a[h][l] = _mm512_fmadd_ps(_mm512_set1_ps(pr[h][g * 8 + 4 * half + l]), v[l], a[h][l]);
    }
    for (int h = 0; h < G; h++)
        for (int l = 0; l < 4; l++) _mm512_store_ps(acc + ((size_t)h * 8 + 4 * half + l) * (size_t)dv + c, a[h][l]);
}

static inline __attribute__((always_inline)) void attn_group(const cpu_attn_job *jobs, const int G) {
    const cpu_attn_job *j = &jobs[0];
    const int32_t dk = j->head_dim_k, dv = j->head_dim_v;
    const int32_t n = j->last - j->first + 1, nch = dk / 8;
    /* each head's q rounded to f16, every 8 dims twice (both halves of a zmm) */
    _Alignas(64) float qd[QR_CPU_ATTN_GROUP_MAX][2 * QR_CPU_MAX_HEAD_DIM];
    for (int h = 0; h < G; h++)
        for (int32_t c = 0; c < nch; c++) {
            const __m256 q8 =
                _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(jobs[h].q + 8 * c), _MM_FROUND_TO_NEAREST_INT));
            _mm512_store_ps(qd[h] + 16 * c, _mm512_insertf32x8(_mm512_castps256_ps512(q8), q8, 1));
        }
    const uint16_t *kb = j->k_base, *vb = j->v_base;
    /* pass 1: scores, 8 keys at a time */
    _Alignas(64) float kp[4 * 2 * QR_CPU_MAX_HEAD_DIM];
    __m256 vmax[QR_CPU_ATTN_GROUP_MAX];
    for (int h = 0; h < G; h++) vmax[h] = _mm256_set1_ps(-INFINITY);
    for (int32_t t = 0; t < n; t += 8) {
        const uint16_t *kr[8];
        for (int e = 0; e < 8; e++) kr[e] = kb + slot_of(j, j->first + (t + e < n ? t + e : n - 1)) * j->k_stride + j->k_off;
        __m256 sc[QR_CPU_ATTN_GROUP_MAX];
        if (G <= 4) {
            scores8_direct(kr, nch, qd, G, sc);
        } else {
            for (int pr = 0; pr < 4; pr++)
                for (int32_t c = 0; c < nch; c++)
                    _mm512_store_ps(kp + (pr * nch + c) * 16, load_pair(kr[2 * pr] + 8 * c, kr[2 * pr + 1] + 8 * c));
            scores8(kp, nch, qd, G, sc);
        }
        const int m = n - t < 8 ? n - t : 8;
        for (int h = 0; h < G; h++) {
            __m256 v = sc[h];
            if (j->softcap > 0.0f) {
                _Alignas(32) float x[8];
                _mm256_store_ps(x, v);
                for (int e = 0; e < 8; e++) x[e] = tanhf(x[e] * (1.0f / j->softcap)) * j->softcap;
                v = _mm256_load_ps(x);
            }
            v = _mm256_mul_ps(v, _mm256_set1_ps(j->scale));
            if (m == 8) {
                _mm256_storeu_ps(jobs[h].scores + t, v);
                vmax[h] = _mm256_max_ps(v, vmax[h]); /* a NaN score never raises the maximum */
            } else {
                const __mmask8 k = (__mmask8)((1u << m) - 1);
                _mm256_mask_storeu_ps(jobs[h].scores + t, k, v);
                vmax[h] = _mm256_mask_max_ps(vmax[h], k, v, vmax[h]);
            }
        }
    }
    /* pass 2: the probabilities, head by head */
    for (int h = 0; h < G; h++) {
        const __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vmax[h]), _mm256_extractf128_ps(vmax[h], 1));
        const __m128 m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        qr_cpu_attn_probs_avx2(&jobs[h], jobs[h].scores, _mm_cvtss_f32(_mm_max_ss(m2, _mm_movehdup_ps(m2))));
    }
    /* pass 3: acc_h[l][d] = sum over positions P = l (mod 8), in order, of p_h[P] * v[P][d]; 64 positions (aligned
     * groups of 8; those outside [first, last] add 0 * 0) at a time, 16 dims at a time */
    float *acc = j->acc; /* [G][8][dv], 64-byte aligned (dv % 16 == 0) */
    memset(acc, 0, sizeof(float) * (size_t)G * 8 * (size_t)dv);
    for (int32_t P0 = j->first & ~7; P0 <= j->last; P0 += 64) {
        const uint16_t *vp[64];
        _Alignas(64) float pr[QR_CPU_ATTN_GROUP_MAX][64];
        const int32_t ng = (j->last - P0) / 8 + 1 < 8 ? (j->last - P0) / 8 + 1 : 8;
        for (int32_t e = 0; e < 8 * ng; e++) {
            const int32_t P = P0 + e;
            vp[e] = P >= j->first && P <= j->last ? vb + slot_of(j, P) * j->v_stride + j->v_off : NULL;
        }
        for (int32_t e = 0; e < 8 * ng; e += 16) {
            /* lanes of positions P0 + e + i inside [first, last] */
            uint32_t in = 0;
            for (int i = 0; i < 16; i++) in |= (uint32_t)(P0 + e + i >= j->first && P0 + e + i <= j->last) << i;
            for (int h = 0; h < G; h++)
                _mm512_store_ps(pr[h] + e, _mm512_maskz_loadu_ps((__mmask16)in, jobs[h].scores + (P0 + e - j->first)));
        }
        for (int32_t c = 0; c < dv && G <= 6; c += 16) /* V converted straight into registers (see v_direct) */
            for (int half = 0; half < 2; half++) v_direct(acc, dv, c, half, vp, pr, ng, G);
        for (int32_t c = 0; c < dv && G > 6; c += 16) {
            _Alignas(64) float vf[64][16];
            for (int32_t e = 0; e < 8 * ng; e++)
                _mm512_store_ps(vf[e], vp[e] ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(vp[e] + c)))
                                             : _mm512_setzero_ps());
            for (int h = 0; h < G; h++) {
                float *ah = acc + (size_t)h * 8 * (size_t)dv + c;
                __m512 a[8];
                for (int l = 0; l < 8; l++) a[l] = _mm512_load_ps(ah + (size_t)l * dv);
                for (int32_t g = 0; g < ng; g++)
                    for (int l = 0; l < 8; l++)
                        a[l] = _mm512_fmadd_ps(_mm512_set1_ps(pr[h][g * 8 + l]), _mm512_load_ps(vf[g * 8 + l]), a[l]);
                for (int l = 0; l < 8; l++) _mm512_store_ps(ah + (size_t)l * dv, a[l]);
            }
        }
    }
    /* the lanes: ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)) */
    for (int h = 0; h < G; h++) {
        const float *ah = acc + (size_t)h * 8 * (size_t)dv;
        for (int32_t i = 0; i < dv; i += 16) {
            __m512 a[8];
            for (int l = 0; l < 8; l++) a[l] = _mm512_load_ps(ah + (size_t)l * dv + i);
            const __m512 t0 = _mm512_add_ps(a[0], a[4]), t1 = _mm512_add_ps(a[1], a[5]);
            const __m512 t2 = _mm512_add_ps(a[2], a[6]), t3 = _mm512_add_ps(a[3], a[7]);
            _mm512_storeu_ps(jobs[h].out + i, _mm512_add_ps(_mm512_add_ps(t0, t2), _mm512_add_ps(t1, t3)));
        }
    }
}

void qr_cpu_attn_group_avx512(const cpu_attn_job *jobs, int n_heads) {
    if (jobs[0].first > jobs[0].last) {
        for (int h = 0; h < n_heads; h++) memset(jobs[h].out, 0, sizeof(float) * (size_t)jobs[0].head_dim_v);
        return;
    }
    switch (n_heads) {
    case 1: attn_group(jobs, 1); return;
    case 2: attn_group(jobs, 2); return;
    case 3: attn_group(jobs, 3); return;
    case 4: attn_group(jobs, 4); return;
    case 5: attn_group(jobs, 5); return;
    case 6: attn_group(jobs, 6); return;
    case 7: attn_group(jobs, 7); return;
    default: attn_group(jobs, 8); return;
    }
}
