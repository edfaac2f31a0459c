/* test_backend_check.c — the backend description and the argument checks above the op table
 * (backend_check.c): the CPU backend's capabilities and the CUDA stub's answers; a bad argument to an op
 * through be->ops is refused with a clear error from last_error (and the op's output left alone), never a
 * crash; good arguments reach the backend's own op unchanged (same results as impl_ops). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "backend/backend.h"
#include "backend/cpu/cpu.h"
#include "quant/quant.h"

static qr_backend *cpu(void) {
    qr_backend *be = NULL;
    char err[256];
    const qr_backend_cpu_params p = {.n_threads = 2};
    assert_int_equal(qr_backend_cpu_create(&p, &be, err, sizeof err), QR_OK);
    return be;
}

/* An F32 weight view of host data. */
static qr_weight f32w(const char *name, const float *data, int64_t ne0, int64_t ne1) {
    return (qr_weight){.name = name, .type = QR_TYPE_F32, .ne = {ne0, ne1, 1, 1}, .row_bytes = (size_t)ne0 * 4,
                       .host = data};
}

/* Asserts that the last op raised `st` with a message containing `part`, and that the error is then cleared. */
static void expect_error(qr_backend *be, qr_status st, const char *part) {
    char err[256] = "";
    assert_int_equal(be->ops->last_error(be, err, sizeof err), st);
    if (!strstr(err, part)) fail_msg("error '%s' does not say '%s'", err, part);
    assert_int_equal(be->ops->last_error(be, err, sizeof err), QR_OK);
}

static void expect_ok(qr_backend *be) {
    char err[256] = "";
    if (be->ops->last_error(be, err, sizeof err) != QR_OK) fail_msg("unexpected error: %s", err);
}

/* A one-row plan (token `tok` at position `pos`, slot `slot`) over a one-block table. */
static qr_status set_one_row(qr_backend *be, int32_t tok, int32_t pos, int32_t slot) {
    static int32_t t, p, s, sl, bt[1] = {0}, out[1] = {0};
    t = tok, p = pos, s = 0, sl = slot;
    const qr_batch_plan plan = {.n_tokens = 1, .tokens = &t, .pos = &p, .seq = &s, .kv_slot = &sl, .n_seqs = 1,
                                .max_blocks = 1, .block_table = bt, .n_outputs = 1, .output_rows = out};
    char err[256];
    return be->ops->set_batch(be, &plan, err, sizeof err);
}

static void test_cpu_caps(void **state) {
    (void)state;
    qr_backend *be = cpu();
    const qr_backend_caps *c = &be->caps;
    assert_true(c->host_memory);
    assert_true(c->exact);
    assert_int_equal(c->max_head_dim, QR_CPU_MAX_HEAD_DIM);
    const qr_type can[] = {QR_TYPE_F32, QR_TYPE_F16, QR_TYPE_BF16, QR_TYPE_Q4_0, QR_TYPE_Q8_0, QR_TYPE_Q4_K, QR_TYPE_Q6_K};
    for (size_t i = 0; i < sizeof can / sizeof can[0]; i++) assert_true(c->matmul_types & QR_TYPE_BIT(can[i]));
    assert_false(c->matmul_types & QR_TYPE_BIT(QR_TYPE_I32)); /* no dot product */
    assert_int_equal(c->kv_types, QR_TYPE_BIT(QR_TYPE_F16) | QR_TYPE_BIT(QR_TYPE_F32) | QR_TYPE_BIT(QR_TYPE_BF16) |
                                      QR_TYPE_BIT(QR_TYPE_Q8_0) | QR_TYPE_BIT(QR_TYPE_Q4_0));
    /* the CPU allocates host memory: no device memory query; no fusions; the MoE and Mamba2 ops */
    assert_null(be->ops->mem_info);
    assert_null(be->ops->add_rmsnorm);
    assert_null(be->ops->rope_attention);
    assert_null(be->ops->run_graph);
    assert_non_null(be->ops->matmul_id);
    assert_non_null(be->ops->ssm_scan);
    /* the checked table wraps the ops with checks and passes the others through */
    assert_ptr_not_equal(be->ops, be->impl_ops);
    assert_ptr_not_equal((void *)be->ops->matmul, (void *)be->impl_ops->matmul);
    assert_ptr_equal((void *)be->ops->alloc, (void *)be->impl_ops->alloc);
    assert_ptr_equal((void *)be->ops->last_error, (void *)be->impl_ops->last_error);
    assert_string_equal(be->name, "cpu"); /* for logs */
    qr_backend_free(be);
    /* force_scalar: the oracle's types */
    qr_backend *sc = NULL;
    char err[256];
    const qr_backend_cpu_params p = {.n_threads = 1, .force_scalar = true};
    assert_int_equal(qr_backend_cpu_create(&p, &sc, err, sizeof err), QR_OK);
    assert_true(sc->caps.matmul_types & QR_TYPE_BIT(QR_TYPE_Q4_0));
    qr_backend_free(sc);
}

/* The CUDA entry points of a build without CUDA: no backend, no device memory. */
static void test_cuda_stub(void **state) {
    (void)state;
#ifndef QUARREL_HAVE_CUDA
    qr_backend *be = NULL;
    char err[256] = "";
    assert_int_equal(qr_backend_cuda_create(NULL, &be, err, sizeof err), QR_ERR_UNSUPPORTED);
    assert_null(be);
    size_t f = 1, t = 1;
    assert_false(qr_cuda_mem_info(0, &f, &t));
    assert_true(f == 0 && t == 0);
    assert_int_equal(qr_cuda_device_count(), 0);
#else
    skip(); /* a CUDA build: test_backend_cuda checks the real backend's caps */
#endif
}

/* Bad arguments to the plain ops: a clear error, the output untouched, and the next good op runs. */
static void test_bad_args_plain_ops(void **state) {
    (void)state;
    qr_backend *be = cpu();
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8], w4[4] = {1, 1, 1, 1}, w8[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    const float sentinel = -12345.0f;
    for (int i = 0; i < 8; i++) y[i] = sentinel;
    /* matmul: no weight; a type without a dot product */
    be->ops->matmul(be, NULL, x, 1, y);
    expect_error(be, QR_ERR_INVALID_ARG, "matmul: no weight");
    int32_t iw[8] = {0};
    const qr_weight wi = {.name = "ints", .type = QR_TYPE_I32, .ne = {8, 1, 1, 1}, .row_bytes = 32, .host = iw};
    be->ops->matmul(be, &wi, x, 1, y);
    expect_error(be, QR_ERR_UNSUPPORTED, "matmul: weight ints of type I32 has no dot product");
    /* rmsnorm / layernorm: a weight of the wrong length */
    const qr_weight n4 = f32w("norm4", w4, 4, 1), n8 = f32w("norm8", w8, 8, 1);
    be->ops->rmsnorm(be, x, &n4, 1, 8, 1e-5f, y);
    expect_error(be, QR_ERR_INVALID_ARG, "rmsnorm: weight must be F32 [dim]");
    be->ops->layernorm(be, x, &n8, &n4, 1, 8, 1e-5f, y);
    expect_error(be, QR_ERR_INVALID_ARG, "layernorm: weight and bias must be F32 [dim]");
    be->ops->add(be, x, NULL, 8, y);
    expect_error(be, QR_ERR_INVALID_ARG, "add: no input or output");
    be->ops->softcap(be, x, 0.0f, 8, y);
    expect_error(be, QR_ERR_INVALID_ARG, "softcap: cap must be > 0");
    be->ops->glu(be, x, x, 8, (qr_glu_kind)7, y);
    expect_error(be, QR_ERR_INVALID_ARG, "glu: unknown activation");
    for (int i = 0; i < 8; i++) assert_true(y[i] == sentinel); /* no op ran */
    /* the first error is the one reported */
    be->ops->softcap(be, x, -1.0f, 8, y);
    be->ops->matmul(be, NULL, x, 1, y);
    expect_error(be, QR_ERR_INVALID_ARG, "softcap");
    /* a good call still runs, as the backend's own op does */
    float y2[8];
    be->ops->rmsnorm(be, x, &n8, 1, 8, 1e-5f, y);
    expect_ok(be);
    be->impl_ops->rmsnorm(be, x, &n8, 1, 8, 1e-5f, y2);
    assert_memory_equal(y, y2, sizeof y);
    qr_backend_free(be);
}

/* The batch plan, the ops that read it, and the KV cache. */
static void test_bad_args_plan_kv(void **state) {
    (void)state;
    qr_backend *be = cpu();
    char err[256] = "";
    /* set_batch: a row's sequence outside the table */
    int32_t t = 0, p = 0, s = 3, sl = 0, bt = 0;
    qr_batch_plan plan = {.n_tokens = 1, .tokens = &t, .pos = &p, .seq = &s, .kv_slot = &sl, .n_seqs = 1,
                          .max_blocks = 1, .block_table = &bt};
    assert_int_equal(be->ops->set_batch(be, &plan, err, sizeof err), QR_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "bad batch plan row 0: seq 3"));
    plan.tokens = NULL, s = 0;
    assert_int_equal(be->ops->set_batch(be, &plan, err, sizeof err), QR_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "an array is missing"));
    assert_int_equal(be->ops->set_batch(be, NULL, err, sizeof err), QR_ERR_INVALID_ARG);
    /* get_rows: a token past the table */
    float table[4 * 3] = {0}, out[8];
    const qr_weight tw = f32w("table", table, 4, 3);
    assert_int_equal(set_one_row(be, 3, 0, 0), QR_OK);
    be->ops->get_rows(be, &tw, out);
    expect_error(be, QR_ERR_INVALID_ARG, "get_rows: token id out of range");
    assert_int_equal(set_one_row(be, 2, 0, 0), QR_OK);
    be->ops->get_rows(be, &tw, out);
    expect_ok(be);
    /* add_row: a learned position past the table */
    assert_int_equal(set_one_row(be, 0, 5, 0), QR_OK);
    be->ops->add_row(be, out, &tw, -1, 1, out);
    expect_error(be, QR_ERR_INVALID_ARG, "add_row: position beyond the table");
    be->ops->add_row(be, out, &tw, 3, 1, out);
    expect_error(be, QR_ERR_INVALID_ARG, "add_row: row out of range");
    /* kv_alloc: a type the backend does not store */
    qr_kv_desc d = {.n_layer = 2, .n_blocks = 1, .block_size = 4, .k_dim = 8, .v_dim = 8, .type_k = QR_TYPE_Q4_K,
                    .type_v = QR_TYPE_F16};
    assert_null(be->ops->kv_alloc(be, &d, err, sizeof err));
    assert_non_null(strstr(err, "cannot store a KV cache of type Q4_K"));
    /* a block type whose blocks do not tile the rows (8 values, blocks of 32) */
    d.type_k = QR_TYPE_Q8_0;
    assert_null(be->ops->kv_alloc(be, &d, err, sizeof err));
    assert_non_null(strstr(err, "whole blocks"));
    d.type_k = QR_TYPE_F16;
    qr_kv_storage *kv = be->ops->kv_alloc(be, &d, err, sizeof err);
    assert_non_null(kv);
    assert_int_equal(qr_kv_storage_desc(kv)->k_dim, 8);
    float k[8] = {0}, v[8] = {0}, q[8] = {0}, o[8];
    /* kv_store: a layer past the cache; a slot past it (block_size 4, one block) */
    assert_int_equal(set_one_row(be, 0, 0, 0), QR_OK);
    be->ops->kv_store(be, kv, 2, k, v);
    expect_error(be, QR_ERR_INVALID_ARG, "kv_store: layer out of range");
    be->ops->kv_store(be, NULL, 0, k, v);
    expect_error(be, QR_ERR_INVALID_ARG, "kv_store: no KV storage");
    assert_int_equal(set_one_row(be, 0, 0, 4), QR_OK);
    be->ops->kv_store(be, kv, 0, k, v);
    expect_error(be, QR_ERR_INVALID_ARG, "kv_store: slot out of range");
    be->ops->kv_copy_block(be, kv, 0, 1);
    expect_error(be, QR_ERR_INVALID_ARG, "kv_copy_block: block id out of range");
    /* attention: heads that do not match the cache */
    assert_int_equal(set_one_row(be, 0, 0, 0), QR_OK);
    be->ops->kv_store(be, kv, 0, k, v);
    expect_ok(be);
    qr_attn_params ap = {.n_head = 2, .n_head_kv = 2, .head_dim_k = 8, .head_dim_v = 4, .scale = 1.0f};
    be->ops->attention(be, kv, 0, q, &ap, o);
    expect_error(be, QR_ERR_INVALID_ARG, "attention: head layout does not match the KV cache");
    ap.head_dim_k = 4;
    be->ops->attention(be, kv, 0, q, &ap, o);
    expect_ok(be);
    /* rope: an odd n_rot */
    const qr_rope_params rp = {.mode = QR_ROPE_NEOX, .n_rot = 3, .freq_base = 10000.0f, .freq_scale = 1.0f};
    be->ops->rope(be, q, 2, 4, &rp);
    expect_error(be, QR_ERR_INVALID_ARG, "rope: bad n_rot");
    be->ops->kv_free(be, kv);
    qr_backend_free(be);
}

/* The MoE and Mamba2 ops: their parameter structs checked as a whole. */
static void test_bad_args_moe_ssm(void **state) {
    (void)state;
    qr_backend *be = cpu();
    float up[4 * 3 * 2] = {0}, gate[4 * 2 * 2] = {0}, x[4] = {1, 2, 3, 4}, h[3 * 2];
    int32_t ids[2] = {0, 1};
    const qr_weight uw = {.name = "up", .type = QR_TYPE_F32, .ne = {4, 3, 2, 1}, .row_bytes = 16, .host = up};
    const qr_weight gw = {.name = "gate", .type = QR_TYPE_F32, .ne = {4, 2, 2, 1}, .row_bytes = 16, .host = gate};
    qr_moe_matmul_args a = {.w = &uw, .gate = &gw, .act = QR_GLU_SWIGLU, .x = x, .ids = ids, .n_rows = 1, .n_used = 2,
                            .y = h};
    be->ops->moe_gate_up(be, &a);
    expect_error(be, QR_ERR_INVALID_ARG, "moe_gate_up: gate and up shapes differ");
    a.gate = NULL; /* a gated activation needs the gate */
    be->ops->moe_gate_up(be, &a);
    expect_error(be, QR_ERR_INVALID_ARG, "moe_gate_up: gate and up shapes differ (or a gated act without gate)");
    a.act = QR_GLU_RELU2;
    be->ops->moe_gate_up(be, &a);
    expect_ok(be);
    a.ids = NULL;
    be->ops->matmul_id(be, &a);
    expect_error(be, QR_ERR_INVALID_ARG, "matmul_id: no input, ids or output");
    be->ops->matmul_id(be, NULL);
    expect_error(be, QR_ERR_INVALID_ARG, "matmul_id: no arguments");
    const qr_moe_route_params rp = {.n_expert = 2, .n_used = 3};
    be->ops->moe_route(be, x, 1, &rp, ids, h);
    expect_error(be, QR_ERR_INVALID_ARG, "moe_route: bad expert counts");
    /* ssm_scan without A; ssm_gate_norm with inconsistent shapes */
    const qr_ssm_params sp = {.d_conv = 4, .d_inner = 8, .d_state = 4, .n_head = 2, .head_dim = 4, .n_group = 1,
                              .conv_dim = 16};
    float st[2 * 4 * 4] = {0}, xbc[16] = {0}, dt[2] = {0}, y[8];
    const qr_ssm_scan_args sa = {.state = st, .xbc = xbc, .dt = dt, .dt_stride = 2, .p = &sp, .y = y};
    assert_int_equal(set_one_row(be, 0, 0, 0), QR_OK);
    be->ops->ssm_scan(be, &sa);
    expect_error(be, QR_ERR_INVALID_ARG, "ssm_scan: A, D and dt_bias must be F32 [n_head]");
    qr_ssm_params bad = sp;
    bad.conv_dim = 15;
    const qr_ssm_gate_norm_args ga = {.y = y, .z = y, .z_stride = 8, .n_rows = 1, .p = &bad, .eps = 1e-5f, .out = y};
    be->ops->ssm_gate_norm(be, &ga);
    expect_error(be, QR_ERR_INVALID_ARG, "ssm_gate_norm: bad shapes");
    qr_backend_free(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_caps),           cmocka_unit_test(test_cuda_stub),
        cmocka_unit_test(test_bad_args_plain_ops), cmocka_unit_test(test_bad_args_plan_kv),
        cmocka_unit_test(test_bad_args_moe_ssm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
