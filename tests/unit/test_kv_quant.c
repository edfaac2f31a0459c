/* test_kv_quant.c — the CPU backend's quantized KV cache (issue 34 part 2): the block round trip of every cache
 * type (kv_store, then the stored blocks dequantized and rotated back, against the rows stored, within each
 * format's rounding), the Walsh-Hadamard rotation (its own inverse, norm kept), the flash attention path against
 * a dense double-precision reference over the dequantized cache, SIMD against scalar (the dot products' order
 * aside), one-row passes against the batch (bit for bit: the flash path does not depend on the pass), and kv_copy_block of
 * quantized blocks (copy-on-write of the prefix cache). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "backend/backend.h"
#include "backend/cpu/cpu.h"
#include "quant/quant.h"
#include "util/util.h"

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) & 0xFFFFFF) / (float)(1 << 23) - 1.0f;
}

static qr_backend *cpu_backend_new(bool scalar, int n_threads) {
    char err[256];
    qr_backend *be = NULL;
    qr_backend_cpu_params p = {.n_threads = n_threads, .force_scalar = scalar};
    assert_int_equal(qr_backend_cpu_create(&p, &be, err, sizeof err), QR_OK);
    return be;
}

/* The largest rounding error of one value stored in a block of type t whose largest |value| is amax (half a
 * step, plus the f16 rounding of the scale times the largest code). */
static float max_err(qr_type t, float amax, float x) {
    switch (t) {
    case QR_TYPE_Q8_0: return amax * (0.5f / 127.0f + 1e-3f) + 1e-6f;
    case QR_TYPE_Q4_0: return amax * (1.0f / 8.0f + 5e-3f) + 1e-6f; /* d = max / -8; the top code clamps at 15 */
    case QR_TYPE_BF16: return fabsf(x) / 256.0f + 1e-30f;
    case QR_TYPE_F16: return fabsf(x) / 2048.0f + 6e-8f;
    default: return 0.0f;
    }
}

static void test_fwht(void **state) {
    (void)state;
    for (int chunk = 64; chunk <= 256; chunk *= 2) {
        float x[512], y[512];
        double n0 = 0, n1 = 0;
        for (int i = 0; i < 512; i++) {
            x[i] = y[i] = frand() * 3.0f;
            n0 += (double)x[i] * x[i];
        }
        qr_cpu_fwht(y, 512, chunk);
        for (int i = 0; i < 512; i++) n1 += (double)y[i] * y[i];
        assert_true(fabs(n1 - n0) <= 1e-5 * n0); /* orthonormal */
        assert_true(memcmp(x, y, sizeof x) != 0);
        qr_cpu_fwht(y, 512, chunk);
        for (int i = 0; i < 512; i++) assert_true(fabsf(y[i] - x[i]) <= 1e-5f);
        /* chunk by chunk: the first chunk alone gives the same values */
        float z[256];
        memcpy(z, x, sizeof(float) * (size_t)chunk);
        qr_cpu_fwht(z, chunk, chunk);
        memcpy(y, x, sizeof y);
        qr_cpu_fwht(y, 512, chunk);
        assert_memory_equal(z, y, sizeof(float) * (size_t)chunk);
    }
}

/* Stores n_tok random rows into slots 0..n_tok-1, reads every stored row back and checks it. */
static void round_trip(qr_type type, int32_t rot, int32_t dim) {
    char err[256];
    qr_backend *be = cpu_backend_new(false, 2);
    enum { N_TOK = 40 };
    qr_kv_desc d = {.n_layer = 1, .n_blocks = 2, .block_size = 32, .k_dim = dim, .v_dim = dim, .type_k = type,
                    .type_v = type, .rot_k = rot, .rot_v = rot};
    qr_kv_storage *kv = be->ops->kv_alloc(be, &d, err, sizeof err);
    assert_non_null(kv);
    assert_int_equal(kv->row_k, qr_type_row_size(type, dim));
    int32_t tok[N_TOK] = {0}, pos[N_TOK], seq[N_TOK] = {0}, slot[N_TOK], bt[2] = {0, 1};
    for (int r = 0; r < N_TOK; r++) pos[r] = slot[r] = r;
    qr_batch_plan plan = {.n_tokens = N_TOK, .tokens = tok, .pos = pos, .seq = seq, .kv_slot = slot, .n_seqs = 1,
                          .max_blocks = 2, .block_table = bt};
    assert_int_equal(be->ops->set_batch(be, &plan, err, sizeof err), QR_OK);
    float *k = malloc(sizeof(float) * N_TOK * (size_t)dim), *v = malloc(sizeof(float) * N_TOK * (size_t)dim);
    for (int i = 0; i < N_TOK * dim; i++) {
        k[i] = frand() * (i % 97 == 0 ? 20.0f : 2.0f); /* a few outliers, which the rotation spreads */
        v[i] = frand();
    }
    be->ops->kv_store(be, kv, 0, k, v);
    assert_int_equal(be->ops->last_error(be, err, sizeof err), QR_OK);
    const qr_quant_traits *tr = qr_quant_traits_ref(type);
    float *back = malloc(sizeof(float) * (size_t)dim), *want = malloc(sizeof(float) * (size_t)dim);
    for (int r = 0; r < N_TOK; r++)
        for (int kvi = 0; kvi < 2; kvi++) {
            const float *src = (kvi ? v : k) + (size_t)r * dim;
            tr->to_float((const char *)(kvi ? kv->v[0] : kv->k[0]) + (size_t)r * kv->row_k, back, dim);
            memcpy(want, src, sizeof(float) * (size_t)dim);
            if (rot) qr_cpu_fwht(want, dim, rot); /* the values the blocks hold: rotated */
            const int bs = (int)qr_type_table[type].block_size;
            for (int b = 0; b < dim; b += bs) {
                float amax = 0.0f;
                for (int i = b; i < b + bs; i++) amax = fmaxf(amax, fabsf(want[i]));
                for (int i = b; i < b + bs; i++)
                    if (!(fabsf(back[i] - want[i]) <= max_err(type, amax, want[i])))
                        fail_msg("%s rot %d: row %d %s[%d]: stored %g, want %g", qr_type_name(type), rot, r,
                                 kvi ? "v" : "k", i, back[i], want[i]);
            }
        }
    free(back), free(want), free(k), free(v);
    be->ops->kv_free(be, kv);
    qr_backend_free(be);
}

static void test_round_trip(void **state) {
    (void)state;
    round_trip(QR_TYPE_Q8_0, 0, 192);
    round_trip(QR_TYPE_Q8_0, 64, 192);
    round_trip(QR_TYPE_Q4_0, 0, 128);
    round_trip(QR_TYPE_Q4_0, 128, 256);
    round_trip(QR_TYPE_BF16, 0, 96);
    round_trip(QR_TYPE_F16, 0, 96);
}

typedef struct fcase {
    qr_type tk, tv;
    int32_t rot_k, rot_v;
    int n_head, n_head_kv, dk, dv, window;
    float softcap;
} fcase;

/* Attention over a cache of the case's types: scalar vs SIMD (bits), vs a dense reference over the dequantized
 * (and rotated back) cache, one-row passes vs the batch (bits), and a copied block vs its source (bits). */
static void flash_case(const fcase *c) {
    char err[256];
    qr_backend *bs = cpu_backend_new(true, 1), *bv = cpu_backend_new(false, 3);
    enum { BS = 32, LEN = 75, MAXB = 4 };
    qr_kv_desc d = {.n_layer = 1, .n_blocks = 2 * MAXB, .block_size = BS, .k_dim = c->n_head_kv * c->dk,
                    .v_dim = c->n_head_kv * c->dv, .type_k = c->tk, .type_v = c->tv, .rot_k = c->rot_k, .rot_v = c->rot_v};
    qr_kv_storage *ks = bs->ops->kv_alloc(bs, &d, err, sizeof err), *kvv = bv->ops->kv_alloc(bv, &d, err, sizeof err);
    assert_non_null(ks);
    assert_non_null(kvv);
    assert_true(ks->flash);
    int32_t bt[MAXB] = {5, 2, 7, 0}, tok[LEN] = {0}, pos[LEN], seq[LEN] = {0}, slot[LEN];
    for (int p = 0; p < LEN; p++) pos[p] = p, slot[p] = bt[p / BS] * BS + p % BS;
    qr_batch_plan plan = {.n_tokens = LEN, .tokens = tok, .pos = pos, .seq = seq, .kv_slot = slot, .n_seqs = 1,
                          .max_blocks = MAXB, .block_table = bt};
    assert_int_equal(bs->ops->set_batch(bs, &plan, err, sizeof err), QR_OK);
    assert_int_equal(bv->ops->set_batch(bv, &plan, err, sizeof err), QR_OK);
    const int qd = c->n_head * c->dk, od = c->n_head * c->dv;
    float *k = malloc(sizeof(float) * LEN * (size_t)d.k_dim), *v = malloc(sizeof(float) * LEN * (size_t)d.v_dim);
    float *q = malloc(sizeof(float) * LEN * (size_t)qd), *o1 = malloc(sizeof(float) * LEN * (size_t)od),
          *o2 = malloc(sizeof(float) * LEN * (size_t)od);
    for (int i = 0; i < LEN * d.k_dim; i++) k[i] = frand() * 1.5f;
    for (int i = 0; i < LEN * d.v_dim; i++) v[i] = frand();
    for (int i = 0; i < LEN * qd; i++) q[i] = frand() * 1.5f;
    bs->ops->kv_store(bs, ks, 0, k, v);
    bv->ops->kv_store(bv, kvv, 0, k, v);
    qr_attn_params ap = {.n_head = c->n_head, .n_head_kv = c->n_head_kv, .head_dim_k = c->dk, .head_dim_v = c->dv,
                         .scale = 1.0f / sqrtf((float)c->dk), .softcap = c->softcap, .window = c->window};
    bs->ops->attention(bs, ks, 0, q, &ap, o1);
    bv->ops->attention(bv, kvv, 0, q, &ap, o2);
    assert_int_equal(bs->ops->last_error(bs, err, sizeof err), QR_OK);
    assert_int_equal(bv->ops->last_error(bv, err, sizeof err), QR_OK);
    /* the scalar traits' dot products sum in another order than the SIMD ones (as for matmul); an f16 V
     * accumulator (ggml's) turns that into f16 roundings */
    const float rtol = c->tv == QR_TYPE_F16 ? 4e-3f : 1e-4f;
    for (int i = 0; i < LEN * od; i++)
        if (!(fabsf(o1[i] - o2[i]) <= 1e-5f + rtol * fabsf(o1[i])))
            fail_msg("%s/%s: scalar %g vs simd %g at %d", qr_type_name(c->tk), qr_type_name(c->tv), o1[i], o2[i], i);
    memcpy(o1, o2, sizeof(float) * LEN * (size_t)od); /* the SIMD batch: the reference of the bitwise checks below */
    /* dense reference: K and V as the cache holds them (dequantized, rotated back), q exact, softmax in double.
     * The kernel converts q to the K type's dot format (Q8_0 for the block types): that rounding bounds the gap */
    float *kd = malloc(sizeof(float) * LEN * (size_t)d.k_dim), *vd = malloc(sizeof(float) * LEN * (size_t)d.v_dim);
    for (int p = 0; p < LEN; p++) {
        float *kr = kd + (size_t)p * d.k_dim, *vr = vd + (size_t)p * d.v_dim;
        qr_quant_traits_ref(c->tk)->to_float((const char *)ks->k[0] + (size_t)slot[p] * ks->row_k, kr, d.k_dim);
        qr_quant_traits_ref(c->tv)->to_float((const char *)ks->v[0] + (size_t)slot[p] * ks->row_v, vr, d.v_dim);
        if (c->rot_k) qr_cpu_fwht(kr, d.k_dim, c->rot_k);
        if (c->rot_v) qr_cpu_fwht(vr, d.v_dim, c->rot_v);
    }
    const int group = c->n_head / c->n_head_kv;
    double sc[LEN];
    for (int r = 0; r < LEN; r++)
        for (int h = 0; h < c->n_head; h++) {
            const int kvh = h / group, first = c->window > 0 && r - c->window + 1 > 0 ? r - c->window + 1 : 0;
            double mx = -1e300, sum = 0;
            for (int p = first; p <= r; p++) {
                double dot = 0;
                for (int i = 0; i < c->dk; i++)
                    dot += (double)q[(size_t)r * qd + h * c->dk + i] * kd[(size_t)p * d.k_dim + kvh * c->dk + i];
                if (c->softcap > 0) dot = c->softcap * tanh(dot / c->softcap);
                sc[p] = dot * ap.scale;
                mx = fmax(mx, sc[p]);
            }
            for (int p = first; p <= r; p++) sum += (sc[p] = exp(sc[p] - mx));
            for (int i = 0; i < c->dv; i++) {
                double acc = 0;
                for (int p = first; p <= r; p++) acc += sc[p] / sum * vd[(size_t)p * d.v_dim + kvh * c->dv + i];
                const double got = o1[(size_t)r * od + h * c->dv + i];
                if (fabs(got - acc) > 2e-2 + 2e-2 * fabs(acc))
                    fail_msg("%s/%s: row %d head %d dim %d: %g vs dense %g", qr_type_name(c->tk), qr_type_name(c->tv), r,
                             h, i, got, acc);
            }
        }
    /* one-row passes: the same bits as the batch */
    for (int r = 0; r < LEN; r += 11) {
        qr_batch_plan one = plan;
        one.n_tokens = 1, one.tokens = tok + r, one.pos = pos + r, one.seq = seq + r, one.kv_slot = slot + r;
        assert_int_equal(bv->ops->set_batch(bv, &one, err, sizeof err), QR_OK);
        bv->ops->attention(bv, kvv, 0, q + (size_t)r * qd, &ap, o2);
        assert_memory_equal(o2, o1 + (size_t)r * od, sizeof(float) * (size_t)od);
    }
    /* copy-on-write of a quantized block: a table pointing at the copy gives the same bits */
    bv->ops->kv_copy_block(bv, kvv, bt[1], 1);
    int32_t bt2[MAXB] = {bt[0], 1, bt[2], bt[3]};
    qr_batch_plan last = plan;
    last.n_tokens = 1, last.tokens = tok + LEN - 1, last.pos = pos + LEN - 1, last.seq = seq, last.kv_slot = slot + LEN - 1;
    last.block_table = bt2;
    assert_int_equal(bv->ops->set_batch(bv, &last, err, sizeof err), QR_OK);
    bv->ops->attention(bv, kvv, 0, q + (size_t)(LEN - 1) * qd, &ap, o2);
    assert_int_equal(bv->ops->last_error(bv, err, sizeof err), QR_OK);
    assert_memory_equal(o2, o1 + (size_t)(LEN - 1) * od, sizeof(float) * (size_t)od);
    free(kd), free(vd), free(k), free(v), free(q), free(o1), free(o2);
    bs->ops->kv_free(bs, ks);
    bv->ops->kv_free(bv, kvv);
    qr_backend_free(bs);
    qr_backend_free(bv);
}

static void test_flash_attention(void **state) {
    (void)state;
    const fcase cases[] = {
        {QR_TYPE_Q8_0, QR_TYPE_Q8_0, 64, 64, 9, 3, 64, 64, 0, 0.0f},   /* SmolLM2's heads, rotated as llama.cpp */
        {QR_TYPE_Q8_0, QR_TYPE_Q8_0, 0, 0, 4, 2, 64, 64, 20, 0.0f},    /* no rotation, a window */
        {QR_TYPE_Q4_0, QR_TYPE_Q4_0, 128, 64, 4, 1, 128, 128, 0, 0.0f},
        {QR_TYPE_Q8_0, QR_TYPE_F16, 64, 0, 4, 2, 64, 64, 0, 0.0f},     /* f16 V: ggml's f16 accumulator */
        {QR_TYPE_F16, QR_TYPE_Q4_0, 0, 64, 4, 2, 64, 64, 0, 0.0f},
        {QR_TYPE_BF16, QR_TYPE_BF16, 0, 0, 6, 2, 96, 32, 0, 30.0f},    /* softcap, dk != dv */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) flash_case(&cases[i]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fwht),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_flash_attention),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
