/* test_backend_cuda.c — the CUDA backend's entry points as every build sees them:
 *   built without CUDA: qr_backend_cuda_create fails with QR_ERR_UNSUPPORTED "built without CUDA",
 *   built with CUDA on a machine without a GPU: QR_ERR_UNSUPPORTED "no CUDA device found ...",
 *   with a GPU: the backend is created, says what it can do (caps), moves data both ways, adds two vectors
 *   and refuses a bad argument with an error.
 * (The kernels themselves are checked against the CPU oracle by tests/cuda/lab, on a GPU machine.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "backend/backend.h"

static void test_create(void **state) {
    (void)state;
    char err[256] = "";
    qr_backend *be = (qr_backend *)&err; /* must be reset to NULL on failure */
    const int n = qr_cuda_device_count();
    assert_true(n >= 0);
    const qr_backend_cuda_params p = {.gpu = 0};
    const qr_status st = qr_backend_cuda_create(&p, &be, err, sizeof err);
#ifndef QUARREL_HAVE_CUDA
    assert_int_equal(n, 0);
    assert_int_equal(st, QR_ERR_UNSUPPORTED);
    assert_null(be);
    assert_string_equal(err, "built without CUDA");
#else
    if (n == 0) {
        assert_int_equal(st, QR_ERR_UNSUPPORTED);
        assert_null(be);
        assert_true(strncmp(err, "no CUDA device found", 20) == 0);
        return;
    }
    assert_int_equal(st, QR_OK);
    assert_non_null(be);
    assert_string_equal(be->name, "cuda");
    /* what it can do: device memory it can measure, its fusions (none in exact mode), the quantized matmuls */
    assert_false(be->caps.host_memory);
    assert_int_equal(be->caps.max_head_dim, 512);
    assert_true(be->caps.matmul_types & QR_TYPE_BIT(QR_TYPE_Q4_0));
    assert_true(be->caps.matmul_types & QR_TYPE_BIT(QR_TYPE_F16));
    assert_int_equal(be->caps.kv_types, QR_TYPE_BIT(QR_TYPE_F16) | QR_TYPE_BIT(QR_TYPE_F32) | QR_TYPE_BIT(QR_TYPE_Q8_0) |
                                            QR_TYPE_BIT(QR_TYPE_Q4_0));
    size_t mem_free = 0, mem_total = 0;
    assert_non_null(be->ops->mem_info);
    assert_true(be->ops->mem_info(be, &mem_free, &mem_total));
    assert_true(mem_total > 0 && mem_free <= mem_total);
    assert_true(be->caps.exact ? be->ops->add_rmsnorm == NULL : be->ops->add_rmsnorm != NULL);
    float a[1000], b[1000], c[1000];
    for (int i = 0; i < 1000; i++) a[i] = (float)i * 0.5f, b[i] = 3.0f - (float)i, c[i] = -1.0f;
    float *da = be->ops->alloc(be, sizeof a), *db = be->ops->alloc(be, sizeof b);
    assert_non_null(da);
    assert_non_null(db);
    be->ops->write(be, da, a, sizeof a);
    be->ops->write(be, db, b, sizeof b);
    be->ops->add(be, da, db, 1000, da);
    be->ops->read(be, c, da, sizeof c);
    assert_int_equal(be->ops->last_error(be, err, sizeof err), QR_OK);
    for (int i = 0; i < 1000; i++) assert_true(c[i] == a[i] + b[i]);
    /* a bad argument: refused above the op table with a clear error, the data untouched */
    const float w4[4] = {1, 1, 1, 1};
    const qr_weight nw = {.name = "n4", .type = QR_TYPE_F32, .ne = {4, 1, 1, 1}, .row_bytes = 16, .host = w4};
    be->ops->rmsnorm(be, da, &nw, 1, 1000, 1e-5f, da);
    assert_int_equal(be->ops->last_error(be, err, sizeof err), QR_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "rmsnorm: weight must be F32 [dim]"));
    be->ops->read(be, c, da, sizeof c);
    for (int i = 0; i < 1000; i++) assert_true(c[i] == a[i] + b[i]);
    be->ops->free(be, da);
    be->ops->free(be, db);
    qr_backend_free(be);
    /* a GPU index past the last one */
    const qr_backend_cuda_params bad = {.gpu = n};
    assert_int_equal(qr_backend_cuda_create(&bad, &be, err, sizeof err), QR_ERR_INVALID_ARG);
    assert_null(be);
#endif
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_create)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
