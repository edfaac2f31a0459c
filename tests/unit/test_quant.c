/* test_quant.c — quantization formats: block layouts, quantize -> dequantize error, scalar dot
 * products against the float dot of the dequantized rows, and every SIMD kernel against the scalar
 * reference. All data comes from a fixed-seed generator, so a failure reproduces exactly.
 *
 * Tolerances (printed at start):
 *  - round trip: relative RMSE ||deq(q(x)) - x|| / ||x|| on Gaussian rows below a per-type bound,
 *    and ggml's own test-quantize-fns criterion (sqrt(sum of squared errors) / n on 0.1 + 2cos(i)).
 *  - scalar vec_dot vs double-precision dot of the dequantized rows: |s - ref| <= TOL_DOT_SCALAR * S,
 *    S = sum |x_i * y_i| (float rounding of the per-block scales and of the accumulation only); for
 *    the Q8_1 pairings (Q4_1, Q5_1) plus 2^-10 * sum over blocks |m_x * s_y|, because Q8_1 stores
 *    s = fp16(d * sum(q)) from the unrounded d, so s differs from fp16(d) * sum(q) by up to two fp16
 *    roundings, and the dot uses s (inherent to the format; ggml behaves the same).
 *  - SIMD vec_dot vs scalar vec_dot: |s_simd - s_ref| <= TOL_DOT_SIMD * S (accumulation order only).
 *  - SIMD from_float and to_float vs scalar: bit for bit (memcmp).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "quant/blocks.h"
#include "quant/quant.h"
#include "quant/types.h"

#define TOL_DOT_SCALAR 2e-6
#define TOL_DOT_SIMD 2e-6

/* ---- deterministic data ------------------------------------------------------------------------ */

static uint64_t rng_state;

static void rng_seed(uint64_t s) { rng_state = s; }

/* splitmix64 */
static uint64_t rng_u64(void) {
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* uniform in [0, 1) */
static double rng_unit(void) { return (double)(rng_u64() >> 11) * 0x1p-53; }

/* standard normal (Box-Muller) */
static float rng_gauss(void) {
    double u1 = rng_unit(), u2 = rng_unit();
    if (u1 < 1e-300) u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* A weight-like row: Gaussian values whose scale changes every 32 values, with an occasional
 * outlier, so that the scale searches see varied blocks. */
static void fill_weights(float *x, int64_t n) {
    float scale = 1.0f;
    for (int64_t i = 0; i < n; i++) {
        if (i % 32 == 0) scale = (float)exp(4.0 * rng_unit() - 3.0); /* e^-3 .. e^1 */
        x[i] = scale * rng_gauss();
        if (rng_unit() < 0.005) x[i] *= 8.0f;
    }
}

static void fill_gauss(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = rng_gauss();
}

/* ---- the types under test ------------------------------------------------------------------------ */

typedef struct type_case {
    qr_type type;
    double rmse_bound; /* relative RMSE bound on Gaussian rows (fill_gauss) */
    double ggml_bound; /* ggml test-quantize-fns bound (0 = exact type, not checked that way) */
} type_case;

/* Bounds: ~1.3x the measured value on this generator; the ggml bounds are ggml's own
 * (MAX_QUANTIZATION_TOTAL_ERROR 0.002, _2BITS 0.0075, _3BITS 0.0040). */
static const type_case cases[] = {
    {QR_TYPE_F32, 0.0, 0.0},        {QR_TYPE_F16, 5e-4, 0.0},      {QR_TYPE_BF16, 4e-3, 0.0},
    {QR_TYPE_Q4_0, 0.125, 0.002},   {QR_TYPE_Q4_1, 0.11, 0.002},   {QR_TYPE_Q5_0, 0.062, 0.002},
    {QR_TYPE_Q5_1, 0.055, 0.002},   {QR_TYPE_Q8_0, 0.0085, 0.002}, {QR_TYPE_Q8_1, 0.0085, 0.002},
    {QR_TYPE_Q2_K, 0.40, 0.0075},   {QR_TYPE_Q3_K, 0.23, 0.0040},  {QR_TYPE_Q4_K, 0.11, 0.002},
    {QR_TYPE_Q5_K, 0.055, 0.002},   {QR_TYPE_Q6_K, 0.028, 0.002},  {QR_TYPE_Q8_K, 0.0085, 0.002},
    {QR_TYPE_MXFP4, 0.17, 0.0},     {QR_TYPE_IQ4_NL, 0.11, 0.002},
};
#define N_CASES (sizeof cases / sizeof cases[0])

static uint32_t bsize(qr_type t) { return qr_type_table[t].block_size; }

/* Element counts exercised for a type: 1..8 blocks, plus odd lengths for the unblocked types. */
static int sizes_for(qr_type t, int64_t *out) {
    const uint32_t bs = bsize(t);
    int k = 0;
    if (bs == 1) {
        static const int64_t extra[] = {1, 2, 3, 7, 8, 9, 31, 32, 33, 100, 255, 256, 257, 1000, 2048};
        for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) out[k++] = extra[i];
    } else {
        for (int nb = 1; nb <= 8; nb++) out[k++] = (int64_t)nb * bs;
        if (bs == 32) out[k++] = 32 * 37; /* an odd count above the 2-block unrolling */
    }
    return k;
}

static void print_tolerances(void) {
    printf("test_quant: SIMD level %s\n", qr_quant_simd_level());
    printf("test_quant: tolerances: scalar vec_dot vs float dot of dequantized rows <= %.1e * sum|x*y|;"
           " (+ 2^-10 * sum|m*s| for Q4_1, Q5_1); SIMD vec_dot vs scalar <= %.1e * sum|x*y|;"
           " SIMD from_float and to_float: bit-exact\n",
           TOL_DOT_SCALAR, TOL_DOT_SIMD);
    for (size_t c = 0; c < N_CASES; c++)
        printf("test_quant:   %-7s round-trip relative RMSE bound %.4g, ggml criterion bound %.4g\n",
               qr_type_name(cases[c].type), cases[c].rmse_bound, cases[c].ggml_bound);
}

/* ---- layout ------------------------------------------------------------------------------------ */

/* The block structs have the sizes of the type table (which are ggml's). */
static void test_block_sizes(void **state) {
    (void)state;
    struct {
        qr_type t;
        size_t size, block;
    } rows[] = {
        {QR_TYPE_Q4_0, sizeof(qr_block_q4_0), QR_QK4_0},   {QR_TYPE_Q4_1, sizeof(qr_block_q4_1), QR_QK4_1},
        {QR_TYPE_Q5_0, sizeof(qr_block_q5_0), QR_QK5_0},   {QR_TYPE_Q5_1, sizeof(qr_block_q5_1), QR_QK5_1},
        {QR_TYPE_Q8_0, sizeof(qr_block_q8_0), QR_QK8_0},   {QR_TYPE_Q8_1, sizeof(qr_block_q8_1), QR_QK8_1},
        {QR_TYPE_Q2_K, sizeof(qr_block_q2_K), QR_QK_K},    {QR_TYPE_Q3_K, sizeof(qr_block_q3_K), QR_QK_K},
        {QR_TYPE_Q4_K, sizeof(qr_block_q4_K), QR_QK_K},    {QR_TYPE_Q5_K, sizeof(qr_block_q5_K), QR_QK_K},
        {QR_TYPE_Q6_K, sizeof(qr_block_q6_K), QR_QK_K},    {QR_TYPE_Q8_K, sizeof(qr_block_q8_K), QR_QK_K},
        {QR_TYPE_MXFP4, sizeof(qr_block_mxfp4), QR_QK_MXFP4}, {QR_TYPE_IQ4_NL, sizeof(qr_block_iq4_nl), QR_QK4_NL},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        assert_int_equal(rows[i].size, qr_type_table[rows[i].t].type_size);
        assert_int_equal(rows[i].block, qr_type_table[rows[i].t].block_size);
    }
}

/* Traits exist for exactly our types, with ggml's vec_dot_type pairing. */
static void test_traits(void **state) {
    (void)state;
    const struct {
        qr_type t, vdt;
        int has_dot;
    } want[] = {
        {QR_TYPE_F32, QR_TYPE_F32, 1},    {QR_TYPE_F16, QR_TYPE_F16, 1},    {QR_TYPE_BF16, QR_TYPE_BF16, 1},
        {QR_TYPE_Q4_0, QR_TYPE_Q8_0, 1},  {QR_TYPE_Q4_1, QR_TYPE_Q8_1, 1},  {QR_TYPE_Q5_0, QR_TYPE_Q8_0, 1},
        {QR_TYPE_Q5_1, QR_TYPE_Q8_1, 1},  {QR_TYPE_Q8_0, QR_TYPE_Q8_0, 1},  {QR_TYPE_Q8_1, QR_TYPE_Q8_1, 0},
        {QR_TYPE_Q2_K, QR_TYPE_Q8_K, 1},  {QR_TYPE_Q3_K, QR_TYPE_Q8_K, 1},  {QR_TYPE_Q4_K, QR_TYPE_Q8_K, 1},
        {QR_TYPE_Q5_K, QR_TYPE_Q8_K, 1},  {QR_TYPE_Q6_K, QR_TYPE_Q8_K, 1},  {QR_TYPE_Q8_K, QR_TYPE_Q8_K, 0},
        {QR_TYPE_MXFP4, QR_TYPE_Q8_0, 1}, {QR_TYPE_IQ4_NL, QR_TYPE_Q8_0, 1},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const qr_quant_traits *r = qr_quant_traits_ref(want[i].t), *b = qr_quant_traits_best(want[i].t);
        assert_non_null(r);
        assert_non_null(b);
        assert_int_equal(r->type, want[i].t);
        assert_int_equal(b->type, want[i].t);
        assert_int_equal(r->vec_dot_type, want[i].vdt);
        assert_int_equal(b->vec_dot_type, want[i].vdt);
        assert_non_null(r->to_float);
        assert_non_null(r->from_float);
        assert_int_equal(r->vec_dot != NULL, want[i].has_dot);
        assert_int_equal(b->vec_dot != NULL, want[i].has_dot);
    }
    assert_null(qr_quant_traits_ref(QR_TYPE_IQ2_XXS));
    assert_null(qr_quant_traits_best(QR_TYPE_IQ2_XXS));
    assert_null(qr_quant_traits_ref(QR_TYPE_I32));
    assert_null(qr_quant_traits_ref((qr_type)4)); /* removed Q4_2 */
    assert_null(qr_quant_traits_ref(QR_TYPE_COUNT));
    const char *lvl = qr_quant_simd_level();
    assert_true(strcmp(lvl, "avx2") == 0 || strcmp(lvl, "avx512") == 0 || strcmp(lvl, "scalar") == 0);
    /* QUARREL_CPU_ISA caps the level (ctest runs this binary with avx2 as test_quant_isa_avx2); auto takes
     * AVX-512 exactly when the CPU has what its kernels need */
    const char *isa = getenv("QUARREL_CPU_ISA");
    if (isa && !strcmp(isa, "avx2")) assert_true(strcmp(lvl, "avx512") != 0);
    if (isa && !strcmp(isa, "scalar")) assert_string_equal(lvl, "scalar");
    if ((!isa || !*isa || !strcmp(isa, "auto") || !strcmp(isa, "avx512")) && strcmp(lvl, "scalar") != 0)
        assert_string_equal(lvl, qr_quant_cpu_has_avx512() ? "avx512" : "avx2");
}

/* Hand-built blocks decode to the values the format defines. */
static void test_known_blocks(void **state) {
    (void)state;
    float out[256];
    /* Q4_0, d = 0.5: value j is the low nibble of qs[j] (j < 16), value j+16 the high nibble. */
    qr_block_q4_0 b40 = {.d = 0x3800};
    for (int j = 0; j < 16; j++) b40.qs[j] = (uint8_t)(j | ((15 - j) << 4));
    qr_quant_traits_ref(QR_TYPE_Q4_0)->to_float(&b40, out, 32);
    for (int j = 0; j < 16; j++) {
        assert_true(out[j] == 0.5f * (float)(j - 8));
        assert_true(out[j + 16] == 0.5f * (float)(7 - j));
    }
    /* Q5_0: fifth bit of value j is bit j of qh (little-endian). */
    qr_block_q5_0 b50 = {.d = 0x3c00, .qh = {0x01, 0x00, 0x00, 0x80}};
    memset(b50.qs, 0, sizeof b50.qs);
    qr_quant_traits_ref(QR_TYPE_Q5_0)->to_float(&b50, out, 32);
    assert_true(out[0] == 0.0f);   /* 16 - 16 */
    assert_true(out[1] == -16.0f); /* 0 - 16 */
    assert_true(out[31] == 0.0f);  /* bit 31 set */
    /* MXFP4, e = 128: scale 2^(128-128) = 1 on the doubled E2M1 values. */
    qr_block_mxfp4 bmx = {.e = 128};
    for (int j = 0; j < 16; j++) bmx.qs[j] = (uint8_t)(j | (j << 4));
    qr_quant_traits_ref(QR_TYPE_MXFP4)->to_float(&bmx, out, 32);
    static const float e2m1x2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    for (int j = 0; j < 16; j++) assert_true(out[j] == e2m1x2[j] && out[j + 16] == e2m1x2[j]);
    /* Q4_K: d = 1, dmin = 1, sub-block 0 scale 2 / min 3, sub-block 5 scale 0x25 (37) / min 0x1a (26). */
    qr_block_q4_K b4k;
    memset(&b4k, 0, sizeof b4k);
    b4k.d = 0x3c00;
    b4k.dmin = 0x3c00;
    b4k.scales[0] = 2;
    b4k.scales[4] = 3;
    b4k.scales[9] = 0x5 | (0xa << 4);          /* low 4 bits of scale 5 and min 5 */
    b4k.scales[1] |= (uint8_t)((0x25 >> 4) << 6); /* high 2 bits of scale 5 */
    b4k.scales[5] |= (uint8_t)((0x1a >> 4) << 6); /* high 2 bits of min 5 */
    b4k.qs[0] = 0x07;                           /* value 0: low nibble 7 */
    b4k.qs[64] = 0x90;                          /* value 160 (sub-block 5): high nibble of qs[64] */
    qr_quant_traits_ref(QR_TYPE_Q4_K)->to_float(&b4k, out, 256);
    assert_true(out[0] == 2.0f * 7 - 3.0f);
    assert_true(out[1] == -3.0f);
    assert_true(out[160] == 37.0f * 9 - 26.0f);
    assert_true(out[161] == -26.0f);
}

/* ---- round trip ---------------------------------------------------------------------------------- */

/* quantize -> dequantize stays within each type's RMSE bound on Gaussian rows, and meets ggml's
 * test-quantize-fns criterion on its cosine data. */
static void test_roundtrip(void **state) {
    (void)state;
    const int64_t n_max = 8 * 256 * 4;
    float *x = malloc(n_max * sizeof(float)), *back = malloc(n_max * sizeof(float));
    uint8_t *q = malloc(n_max * 4 + 1024);
    assert_non_null(x);
    assert_non_null(back);
    assert_non_null(q);
    for (size_t c = 0; c < N_CASES; c++) {
        const qr_quant_traits *t = qr_quant_traits_ref(cases[c].type);
        double worst = 0.0;
        rng_seed(1000 + c);
        int64_t sizes[32];
        const int ns = sizes_for(cases[c].type, sizes);
        for (int si = 0; si < ns; si++) {
            const int64_t n = sizes[si] < 256 && bsize(cases[c].type) == 1 ? 256 : sizes[si]; /* RMSE needs samples */
            for (int rep = 0; rep < 4; rep++) {
                fill_gauss(x, n);
                t->from_float(x, q, n);
                t->to_float(q, back, n);
                double se = 0.0, sx = 0.0;
                for (int64_t i = 0; i < n; i++) {
                    se += ((double)back[i] - x[i]) * ((double)back[i] - x[i]);
                    sx += (double)x[i] * x[i];
                }
                const double rel = sqrt(se / sx);
                if (rel > worst) worst = rel;
            }
        }
        printf("test_quant:   %-7s round-trip relative RMSE worst %.5f (bound %.4g)\n", qr_type_name(cases[c].type), worst,
               cases[c].rmse_bound);
        assert_true(worst <= cases[c].rmse_bound);
        if (cases[c].ggml_bound > 0) {
            const int64_t n = 32 * 128; /* ggml: test_size = 32*128, data 0.1 + 2 cos(i + offset) */
            for (int64_t i = 0; i < n; i++) x[i] = 0.1f + 2.0f * cosf((float)i + 0.0f);
            t->from_float(x, q, n);
            t->to_float(q, back, n);
            double se = 0.0;
            for (int64_t i = 0; i < n; i++) se += ((double)back[i] - x[i]) * ((double)back[i] - x[i]);
            const double err = sqrt(se) / (double)n;
            printf("test_quant:   %-7s ggml total-error criterion %.6f (bound %.4g)\n", qr_type_name(cases[c].type), err,
                   cases[c].ggml_bound);
            assert_true(err < cases[c].ggml_bound);
        }
    }
    free(x);
    free(back);
    free(q);
}

/* Degenerate blocks: all zero, constant, a single non-zero value. Zero must come back exactly zero;
 * the others within the type's bound relative to the block's largest magnitude. */
static void test_degenerate_blocks(void **state) {
    (void)state;
    float x[512], back[512];
    uint8_t q[4096];
    for (size_t c = 0; c < N_CASES; c++) {
        const qr_quant_traits *t = qr_quant_traits_ref(cases[c].type);
        const int64_t n = bsize(cases[c].type) == 1 ? 64 : 2 * (int64_t)bsize(cases[c].type);
        memset(x, 0, sizeof x);
        t->from_float(x, q, n);
        t->to_float(q, back, n);
        for (int64_t i = 0; i < n; i++) assert_true(back[i] == 0.0f);
        for (int64_t i = 0; i < n; i++) x[i] = -0.75f;
        t->from_float(x, q, n);
        t->to_float(q, back, n);
        for (int64_t i = 0; i < n; i++) assert_true(fabsf(back[i] - x[i]) <= 0.75f * (float)cases[c].rmse_bound * 2.0f + 1e-7f);
        memset(x, 0, sizeof x);
        x[n / 2 + 3] = 3.0f;
        t->from_float(x, q, n);
        t->to_float(q, back, n);
        for (int64_t i = 0; i < n; i++) assert_true(fabsf(back[i] - x[i]) <= 3.0f * (float)cases[c].rmse_bound * 2.0f + 1e-7f);
    }
}

/* from_float writes every byte of its output, deterministically: quantizing into a buffer filled
 * with 0x00 and into one filled with 0xA5 gives the same bytes (zero, constant and random rows). */
static void test_output_fully_written(void **state) {
    (void)state;
    float x[2048];
    uint8_t a[8192], b[8192];
    for (size_t c = 0; c < N_CASES; c++) {
        rng_seed(4000 + c);
        const int64_t n = bsize(cases[c].type) == 1 ? 999 : 8 * (int64_t)bsize(cases[c].type);
        const size_t bytes = qr_type_row_size(cases[c].type, n);
        for (int kind = 0; kind < 4; kind++) {
            for (int64_t i = 0; i < n; i++) x[i] = kind == 0 ? 0.0f : kind == 1 ? 0.25f : rng_gauss();
            for (int impl = 0; impl < 2; impl++) {
                const qr_quant_traits *t = impl ? qr_quant_traits_best(cases[c].type) : qr_quant_traits_ref(cases[c].type);
                memset(a, 0x00, sizeof a);
                memset(b, 0xA5, sizeof b);
                t->from_float(x, a, n);
                t->from_float(x, b, n);
                assert_memory_equal(a, b, bytes);
                assert_true(b[bytes] == 0xA5); /* and nothing past the row */
            }
        }
    }
}

/* Rounding rules of the activation quantizers on exact ties: Q8_0 / Q8_1 round half away from zero
 * (roundf), Q8_K rounds half to even; scalar and SIMD alike. */
static void test_activation_ties(void **state) {
    (void)state;
    float x[256];
    for (int i = 0; i < 256; i++) x[i] = (float)((i % 8) - 4) + 0.5f; /* -3.5 .. 3.5 */
    x[0] = 127.0f;                                                     /* Q8_0: d = 1, id = 1 */
    for (int impl = 0; impl < 2; impl++) {
        const qr_quant_traits *t8 = impl ? qr_quant_traits_best(QR_TYPE_Q8_0) : qr_quant_traits_ref(QR_TYPE_Q8_0);
        qr_block_q8_0 b[8];
        t8->from_float(x, b, 256);
        assert_int_equal(b[0].d, 0x3c00);
        assert_int_equal(b[0].qs[1], -3); /* -2.5 -> -3 */
        assert_int_equal(b[0].qs[2], -2); /* -1.5 -> -2 */
        assert_int_equal(b[0].qs[4], 1);  /* 0.5 -> 1 */
        assert_int_equal(b[0].qs[6], 3);  /* 2.5 -> 3 */
        const qr_quant_traits *tk = impl ? qr_quant_traits_best(QR_TYPE_Q8_K) : qr_quant_traits_ref(QR_TYPE_Q8_K);
        float xk[256];
        memcpy(xk, x, sizeof xk);
        xk[0] = -127.0f; /* iscale = -127 / max = 1 */
        qr_block_q8_K bk;
        tk->from_float(xk, &bk, 256);
        assert_true(bk.d == 1.0f);
        assert_int_equal(bk.qs[1], -2); /* -2.5 -> -2 (even) */
        assert_int_equal(bk.qs[2], -2); /* -1.5 -> -2 */
        assert_int_equal(bk.qs[4], 0);  /* 0.5 -> 0 */
        assert_int_equal(bk.qs[6], 2);  /* 2.5 -> 2 */
        assert_int_equal(bk.qs[7], 4);  /* 3.5 -> 4 */
        int sum = 0;
        for (int i = 0; i < 16; i++) sum += bk.qs[i];
        assert_int_equal(bk.bsums[0], sum);
        /* the sign of the scale follows the first value of largest magnitude */
        xk[0] = 127.0f;
        xk[5] = -127.0f;
        tk->from_float(xk, &bk, 256);
        assert_true(bk.d == -1.0f);
    }
}

/* ---- dot products ------------------------------------------------------------------------------ */

typedef struct dot_buffers {
    float *x, *y, *xd, *yd;
    uint8_t *xq, *yq;
} dot_buffers;

/* For a weight type paired with Q8_1: 2^-10 * sum over blocks |m_x * s_y| (two fp16 roundings in
 * Q8_1's s, which the dot uses instead of sum(dequantized y)); 0 for every other pairing. */
static double q8_1_s_slack(const qr_quant_traits *tw, int64_t n, const uint8_t *xq, const uint8_t *yq) {
    if (tw->vec_dot_type != QR_TYPE_Q8_1) return 0.0;
    const size_t xs = qr_type_table[tw->type].type_size;
    const qr_quant_traits *th = qr_quant_traits_ref(QR_TYPE_F16);
    double slack = 0.0;
    for (int64_t b = 0; b < n / 32; b++) {
        float m, s; /* m is the second fp16 of a Q4_1 / Q5_1 block, s the second of a Q8_1 block */
        th->to_float(xq + b * xs + 2, &m, 1);
        th->to_float(yq + b * sizeof(qr_block_q8_1) + 2, &s, 1);
        slack += fabs((double)m * s);
    }
    return slack * 0x1p-10;
}

/* Quantizes a weight row x and an activation row y with the reference traits, returns the
 * double-precision dot of the dequantized rows in *ref and sum |xd_i * yd_i| in *mag. */
static void prepare_dot(const qr_quant_traits *tw, const qr_quant_traits *ta, int64_t n, dot_buffers *b, double *ref,
                        double *mag) {
    fill_weights(b->x, n);
    fill_gauss(b->y, n);
    tw->from_float(b->x, b->xq, n);
    ta->from_float(b->y, b->yq, n);
    tw->to_float(b->xq, b->xd, n);
    ta->to_float(b->yq, b->yd, n);
    double s = 0.0, m = 0.0;
    for (int64_t i = 0; i < n; i++) {
        s += (double)b->xd[i] * b->yd[i];
        m += fabs((double)b->xd[i] * b->yd[i]);
    }
    *ref = s;
    *mag = m;
}

/* The scalar vec_dot equals the float dot of the dequantized rows, and the best (SIMD) vec_dot
 * equals the scalar one, on every size. */
static void test_vec_dot(void **state) {
    (void)state;
    const int64_t n_max = 8 * 256 * 5;
    dot_buffers b = {malloc(n_max * 4), malloc(n_max * 4), malloc(n_max * 4), malloc(n_max * 4), malloc(n_max * 4 + 64),
                     malloc(n_max * 4 + 64)};
    assert_true(b.x && b.y && b.xd && b.yd && b.xq && b.yq);
    for (size_t c = 0; c < N_CASES; c++) {
        const qr_quant_traits *tw = qr_quant_traits_ref(cases[c].type);
        if (!tw->vec_dot) continue;
        const qr_quant_traits *ta = qr_quant_traits_ref(tw->vec_dot_type);
        const qr_quant_traits *best = qr_quant_traits_best(cases[c].type);
        double worst_ref = 0.0, worst_simd = 0.0;
        rng_seed(2000 + c);
        int64_t sizes[32];
        const int ns = sizes_for(cases[c].type, sizes);
        for (int si = 0; si < ns; si++) {
            for (int rep = 0; rep < 16; rep++) {
                const int64_t n = sizes[si];
                double ref, mag;
                prepare_dot(tw, ta, n, &b, &ref, &mag);
                float s_ref = NAN, s_simd = NAN;
                tw->vec_dot(n, &s_ref, b.xq, b.yq);
                best->vec_dot(n, &s_simd, b.xq, b.yq);
                const double slack = q8_1_s_slack(tw, n, b.xq, b.yq);
                const double e_ref = fmax(0.0, fabs((double)s_ref - ref) - slack) / (mag > 0 ? mag : 1.0);
                const double e_simd = fabs((double)s_simd - (double)s_ref) / (mag > 0 ? mag : 1.0);
                if (e_ref > worst_ref) worst_ref = e_ref;
                if (e_simd > worst_simd) worst_simd = e_simd;
                if (!(e_ref <= TOL_DOT_SCALAR) || !(e_simd <= TOL_DOT_SIMD))
                    printf("test_quant: FAIL %s n=%lld ref=%.9g scalar=%.9g simd=%.9g mag=%.6g\n", qr_type_name(cases[c].type),
                           (long long)n, ref, (double)s_ref, (double)s_simd, mag);
                assert_true(e_ref <= TOL_DOT_SCALAR);
                assert_true(e_simd <= TOL_DOT_SIMD);
            }
        }
        printf("test_quant:   %-7s vec_dot x %-4s worst |scalar - float dot| %.2e (beyond the Q8_1 slack), |simd - scalar| %.2e (x sum|x*y|)\n",
               qr_type_name(cases[c].type), qr_type_name(tw->vec_dot_type), worst_ref, worst_simd);
    }
    free(b.x);
    free(b.y);
    free(b.xd);
    free(b.yd);
    free(b.xq);
    free(b.yq);
}

/* vec_dot_tile (several weight rows x activation rows per call) equals vec_dot bit for bit, for
 * every tile shape, row lengths of 1..40 blocks and unaligned row strides. */
static void test_vec_dot_tile(void **state) {
    (void)state;
    int n_checked = 0;
    for (size_t c = 0; c < N_CASES; c++) {
        const qr_quant_traits *best = qr_quant_traits_best(cases[c].type);
      const qr_vec_dot_tile_fn tiles[4] = {best->vec_dot_tile, best->vec_dot_gemm_tile, best->vec_dot_gemv_tile,
                                              best->vec_dot_tiled_tile};
      const qr_vec_dot_fn singles[4] = {best->vec_dot, best->vec_dot_gemm, best->vec_dot_gemv, best->vec_dot_tiled};
      for (int kind = 0; kind < 4; kind++) {
        if (!tiles[kind]) continue;
        const qr_quant_traits *ta = qr_quant_traits_best(best->vec_dot_type);
        const qr_quant_traits *tw = qr_quant_traits_ref(cases[c].type);
        rng_seed(7000 + c);
        static const int64_t blocks[] = {1, 2, 3, 5, 18, 40, 181}; /* 181: F16 rows of 5 chunks of 32 and a tail */
        for (size_t bi = 0; bi < sizeof blocks / sizeof blocks[0]; bi++) {
            const int64_t n = blocks[bi] * bsize(cases[c].type);
            /* spare bytes between rows: strides not a multiple of the block size (but keeping the
             * blocks' 2- and 4-byte field alignment, as GGUF rows do) */
            const size_t bx = qr_type_row_size(cases[c].type, n) + 4, by = qr_type_row_size(best->vec_dot_type, n) + 8;
            char *wx = malloc(bx * QR_TILE_MAX), *wy = malloc(by * QR_TILE_MAX);
            float *f = malloc((size_t)n * sizeof(float));
            assert_true(wx && wy && f);
            for (int r = 0; r < QR_TILE_MAX; r++) {
                fill_weights(f, n);
                tw->from_float(f, wx + r * bx, n);
                fill_gauss(f, n);
                ta->from_float(f, wy + r * by, n);
            }
            for (int nr = 1; nr <= QR_TILE_MAX; nr++)
                for (int nc = 1; nc <= QR_TILE_MAX; nc++) {
                    float s[QR_TILE_MAX * 7];
                    for (int i = 0; i < QR_TILE_MAX * 7; i++) s[i] = NAN;
                    tiles[kind](n, s, 7, wx, bx, wy, by, nr, nc);
                    for (int r = 0; r < nr; r++)
                        for (int cc = 0; cc < nc; cc++) {
                            float one = NAN;
                            singles[kind](n, &one, wx + r * bx, wy + cc * by);
                            uint32_t a, b;
                            memcpy(&a, &one, 4);
                            memcpy(&b, &s[cc * 7 + r], 4);
                            if (a != b)
                                printf("test_quant: tile FAIL %s n=%lld %dx%d r=%d c=%d %.9g vs %.9g\n",
                                       qr_type_name(cases[c].type), (long long)n, nr, nc, r, cc, (double)one,
                                       (double)s[cc * 7 + r]);
                            assert_int_equal(a, b);
                            n_checked++;
                        }
                    /* untouched outside the tile */
                    for (int cc = 0; cc < QR_TILE_MAX; cc++)
                        for (int r = 0; r < 7; r++)
                            if (cc >= nc || r >= nr) assert_true(isnan(s[cc * 7 + r]));
                }
            free(wx);
            free(wy);
            free(f);
        }
      }
    }
    printf("test_quant: vec_dot_tile == vec_dot bit for bit on %d dots\n", n_checked);
    if (strcmp(qr_quant_simd_level(), "scalar") != 0) assert_true(n_checked > 0);
}

/* The kernels that reproduce llama.cpp's other x86 matmul paths (repacked GEMV / GEMM, tiled GEMM,
 * sgemm; see quant.h): the SIMD ones of the repacked and tiled orders equal the scalar ones bit for
 * bit (same integer sums, same float operations in the same order); every one of them is within
 * TOL_DOT_SCALAR of the float dot of the dequantized rows; the sgemm orders (SIMD only) within
 * TOL_DOT_SIMD of the scalar vec_dot. The 4-row activation quantizer equals the scalar one. */
static void test_llama_cpp_orders(void **state) {
    (void)state;
    const int64_t n_max = 8 * 256;
    dot_buffers b = {malloc(n_max * 4), malloc(n_max * 4), malloc(n_max * 4), malloc(n_max * 4), malloc(n_max * 4 + 64),
                     malloc(n_max * 4 + 64)};
    uint8_t *yq2 = malloc(n_max * 4 + 64), *yq3 = malloc(n_max * 4 + 64);
    assert_true(b.x && b.y && b.xd && b.yd && b.xq && b.yq && yq2 && yq3);
    int n_kernels = 0;
    for (size_t c = 0; c < N_CASES; c++) {
        const qr_quant_traits *tw = qr_quant_traits_ref(cases[c].type), *best = qr_quant_traits_best(cases[c].type);
        if (!tw->vec_dot) continue;
        const qr_quant_traits *ta = qr_quant_traits_ref(tw->vec_dot_type);
        /* the scalar traits carry every order but sgemm; the best ones have the same set */
        assert_true(!tw->vec_dot_gemv == !best->vec_dot_gemv && !tw->vec_dot_gemm == !best->vec_dot_gemm);
        assert_true(!tw->from_float_gemm == !best->from_float_gemm && tw->repack_rows == best->repack_rows);
        assert_true(!tw->vec_dot_tiled == !best->vec_dot_tiled && !tw->vec_dot_sgemm);
        const qr_vec_dot_fn ref_fns[3] = {tw->vec_dot_gemv, tw->vec_dot_gemm, tw->vec_dot_tiled};
        const qr_vec_dot_fn best_fns[3] = {best->vec_dot_gemv, best->vec_dot_gemm, best->vec_dot_tiled};
        rng_seed(4000 + c);
        int64_t sizes[32];
        const int ns = sizes_for(cases[c].type, sizes);
        for (int si = 0; si < ns; si++) {
            const int64_t n = sizes[si];
            if (n > n_max || (best->vec_dot_sgemm && n % best->sgemm_k)) continue;
            for (int rep = 0; rep < 8; rep++) {
                double ref, mag;
                prepare_dot(tw, ta, n, &b, &ref, &mag);
                if (mag <= 0) mag = 1.0;
                for (int f = 0; f < 3; f++) {
                    if (!ref_fns[f]) continue;
                    const uint8_t *y = b.yq;
                    if (f == 1 && tw->from_float_gemm) { /* the GEMM's own activations */
                        tw->from_float_gemm(b.y, yq2, n);
                        best->from_float_gemm(b.y, yq3, n);
                        assert_memory_equal(yq2, yq3, qr_type_row_size(tw->vec_dot_type, n));
                        y = yq2;
                    }
                    float s_ref = NAN, s_best = NAN;
                    ref_fns[f](n, &s_ref, b.xq, y);
                    best_fns[f](n, &s_best, b.xq, y);
                    assert_memory_equal(&s_ref, &s_best, sizeof(float));
                    if (y == b.yq) assert_true(fabs((double)s_ref - ref) <= TOL_DOT_SCALAR * mag);
                    n_kernels++;
                }
                if (best->vec_dot_sgemm) {
                    float s_ref = NAN, s_best = NAN;
                    tw->vec_dot(n, &s_ref, b.xq, b.yq);
                    best->vec_dot_sgemm(n, &s_best, b.xq, b.yq);
                    assert_true(fabs((double)s_best - (double)s_ref) <= TOL_DOT_SIMD * mag);
                    n_kernels++;
                }
            }
        }
    }
    assert_true(n_kernels > 0);
    /* the 4-row Q8_K quantizer: +amax wins a tie of magnitudes, the row quantizer takes the first */
    const qr_quant_traits *q4k[2] = {qr_quant_traits_ref(QR_TYPE_Q4_K), qr_quant_traits_best(QR_TYPE_Q4_K)};
    const qr_quant_traits *q8k[2] = {qr_quant_traits_ref(QR_TYPE_Q8_K), qr_quant_traits_best(QR_TYPE_Q8_K)};
    float xk[256];
    for (int i = 0; i < 256; i++) xk[i] = (float)((i % 8) - 4) + 0.25f;
    xk[3] = -127.0f;
    xk[200] = 127.0f;
    for (int impl = 0; impl < 2; impl++) {
        qr_block_q8_K a, g;
        q8k[impl]->from_float(xk, &a, 256);
        q4k[impl]->from_float_gemm(xk, &g, 256);
        assert_true(a.d == 1.0f && g.d == -1.0f);
        assert_int_equal(a.qs[200], 127);
        assert_int_equal(g.qs[200], -127);
        assert_int_equal(g.bsums[0], -a.bsums[0]);
    }
    printf("test_quant: llama.cpp kernel orders: %d checks (repacked/tiled SIMD == scalar bit for bit)\n", n_kernels);
    free(b.x), free(b.y), free(b.xd), free(b.yd), free(b.xq), free(b.yq), free(yq2), free(yq3);
}

/* The best from_float and to_float of every type produce exactly the reference's bytes / floats. */
static void test_simd_convert_exact(void **state) {
    (void)state;
    const int64_t n_max = 8 * 256 * 4;
    float *x = malloc(n_max * 4), *a = malloc(n_max * 4), *b2 = malloc(n_max * 4);
    uint8_t *qa = malloc(n_max * 4 + 64), *qb = malloc(n_max * 4 + 64);
    assert_true(x && a && b2 && qa && qb);
    for (size_t c = 0; c < N_CASES; c++) {
        const qr_quant_traits *r = qr_quant_traits_ref(cases[c].type), *best = qr_quant_traits_best(cases[c].type);
        rng_seed(3000 + c);
        int64_t sizes[32];
        const int ns = sizes_for(cases[c].type, sizes);
        for (int si = 0; si < ns; si++) {
            const int64_t n = sizes[si];
            for (int rep = 0; rep < 4; rep++) {
                if (rep & 1) fill_weights(x, n); else fill_gauss(x, n);
                if (rep == 3) x[n / 2] = 0.0f;
                const size_t bytes = qr_type_row_size(cases[c].type, n);
                r->from_float(x, qa, n);
                best->from_float(x, qb, n);
                assert_memory_equal(qa, qb, bytes);
                r->to_float(qa, a, n);
                best->to_float(qa, b2, n);
                assert_memory_equal(a, b2, (size_t)n * sizeof(float));
            }
        }
    }
    free(x);
    free(a);
    free(b2);
    free(qa);
    free(qb);
}

/* The load-time repacks (qr_quant_traits rp_*): the repacked tiles equal vec_dot_gemm / vec_dot_gemv bit for bit
 * for every column count, rows of 1..18 super-blocks, two row groups. */
static void test_repacked_tiles(void **state) {
    (void)state;
    int n_checked = 0;
    for (size_t c = 0; c < N_CASES; c++) {
        const qr_quant_traits *best = qr_quant_traits_best(cases[c].type);
        if (!best->rp.pack) continue;
        const qr_quant_traits *ta = qr_quant_traits_best(best->vec_dot_type);
        const qr_quant_traits *tw = qr_quant_traits_ref(cases[c].type);
        const int R = best->rp.rows, NR = 2 * R, NC = best->rp.cols;
        rng_seed(9100 + c);
        static const int64_t blocks[] = {1, 2, 3, 18};
        for (size_t bi = 0; bi < sizeof blocks / sizeof blocks[0]; bi++) {
            const int64_t n = blocks[bi] * bsize(cases[c].type);
            const size_t ybase = qr_type_row_size(best->vec_dot_type, n),
                         by = ybase + (best->rp.act_extra ? best->rp.act_extra_bytes(n) : 0) + 8;
            const size_t bx = qr_type_row_size(cases[c].type, n);
            const size_t prow = best->rp.row_bytes_of(n);
            char *wx = malloc(bx * NR), *wy = malloc(by * NC), *pk = NULL;
            float *f = malloc((size_t)n * sizeof(float)), *s = malloc(sizeof(float) * (size_t)R * NC);
            assert_true(wx && wy && f && s && posix_memalign((void **)&pk, 64, prow * NR) == 0);
            for (int r = 0; r < NR; r++) {
                fill_weights(f, n);
                tw->from_float(f, wx + r * bx, n);
            }
            for (int cc = 0; cc < NC; cc++) {
                fill_gauss(f, n);
                ta->from_float(f, wy + cc * by, n);
                if (best->rp.act_extra) best->rp.act_extra(wy + cc * by, n, wy + cc * by + ybase);
            }
            best->rp.pack(wx, bx, NR, n, pk);
            if (best->rp.unpack_row) { /* every row back in the file's layout, byte for byte */
                char *row = malloc(bx);
                assert_true(row != NULL);
                for (int r = 0; r < NR; r++) {
                    best->rp.unpack_row(pk + (size_t)(r / R) * R * prow, r % R, n, row);
                    assert_memory_equal(row, wx + r * bx, bx);
                }
                free(row);
            }
            for (int kind = 0; kind < 2; kind++)
                for (int g = 0; g < NR / R; g++)
                    for (int nc = 1; nc <= NC; nc++) {
                        (kind ? best->rp.gemv_tile : best->rp.gemm_tile)(n, s, R, pk + (size_t)g * R * prow, prow, wy,
                                                                         by, R, nc);
                        for (int r = 0; r < R; r++)
                            for (int cc = 0; cc < nc; cc++) {
                                float one = NAN;
                                (best->rp.vec_dot_order ? best->vec_dot
                                 : kind                  ? best->vec_dot_gemv
                                                         : best->vec_dot_gemm)(n, &one, wx + (g * R + r) * bx, wy + cc * by);
                                uint32_t a, b;
                                memcpy(&a, &one, 4);
                                memcpy(&b, &s[cc * R + r], 4);
                                if (a != b)
                                    printf("test_quant: repacked FAIL %s %s n=%lld nc=%d r=%d c=%d %.9g vs %.9g\n",
                                           qr_type_name(cases[c].type), kind ? "gemv" : "gemm", (long long)n, nc,
                                           g * R + r, cc, (double)one, (double)s[cc * R + r]);
                                assert_int_equal(a, b);
                                n_checked++;
                            }
                    }
            free(wx);
            free(wy);
            free(pk);
            free(f);
            free(s);
        }
    }
    printf("test_quant: repacked tiles == vec_dot_gemm / _gemv bit for bit on %d dots\n", n_checked);
    if (strcmp(qr_quant_simd_level(), "scalar") != 0) assert_true(n_checked > 0); /* (Q4_0 at least) */
}

int main(void) {
    print_tolerances();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_sizes),      cmocka_unit_test(test_traits),
        cmocka_unit_test(test_known_blocks),     cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_degenerate_blocks), cmocka_unit_test(test_output_fully_written),
        cmocka_unit_test(test_activation_ties),
        cmocka_unit_test(test_vec_dot),          cmocka_unit_test(test_simd_convert_exact),
        cmocka_unit_test(test_llama_cpp_orders), cmocka_unit_test(test_vec_dot_tile),
        cmocka_unit_test(test_repacked_tiles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
