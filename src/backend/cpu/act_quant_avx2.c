/* act_quant_avx2.c — the activation quantizers of act_quant.c (Q8_0 / Q8_1 with ggml's x86 numerics)
 * in AVX2: 8 lanes at a time, the same operations (|x| max, d = amax / 127, id = 127 / amax in scalar,
 * x * id rounded half-to-even as nearbyintf does in the default rounding mode, integer code sum), so
 * the output bytes equal the plain C version's (tests/unit/test_backend.c checks it). */
#include <immintrin.h>

#include "backend/cpu/cpu.h"
#include "quant/blocks.h"

/* One block of 32: codes into qs, returns d; *sum = sum of codes. */
static float quantize_block_avx2(const float *x, int8_t *qs, int *sum) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v[4];
    __m256 m = _mm256_setzero_ps();
    for (int k = 0; k < 4; k++) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[k]));
    }
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    const float amax = _mm_cvtss_f32(h);
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const __m256 mul = _mm256_set1_ps(id);
    __m256i q[4];
    for (int k = 0; k < 4; k++)
        q[k] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[k], mul), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    /* sum of the 32 codes */
    __m256i s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(1, 0, 3, 2)));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(2, 3, 0, 1)));
    *sum = _mm_cvtsi128_si32(s4);
    /* int32 -> int8 in element order: packs interleave 128-bit lanes, a permute restores the order */
    const __m256i p01 = _mm256_packs_epi32(q[0], q[1]), p23 = _mm256_packs_epi32(q[2], q[3]);
    const __m256i p = _mm256_packs_epi16(p01, p23);
    const __m256i ordered = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)qs, ordered);
    return d;
}

static void act_q8_0_avx2(const float *x, void *dst, int64_t n) { qr_cpu_act_rows_q8_0(x, dst, n, quantize_block_avx2); }
static void act_q8_1_avx2(const float *x, void *dst, int64_t n) { qr_cpu_act_rows_q8_1(x, dst, n, quantize_block_avx2); }

qr_from_float_fn qr_cpu_act_quantizer_avx2(qr_type vec_dot_type) {
    switch (vec_dot_type) {
    case QR_TYPE_Q8_0: return act_q8_0_avx2;
    case QR_TYPE_Q8_1: return act_q8_1_avx2;
    default: return NULL;
    }
}
