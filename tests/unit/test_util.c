/* test_util.c — half/bfloat conversions, error buffers, type table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <cmocka.h>

#include "util/util.h"

/* Every one of the 65536 halves converts to float and back unchanged (NaNs stay NaN). */
static void test_fp16_roundtrip_all(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = qr_fp16_to_fp32((uint16_t)h);
        uint16_t back = qr_fp32_to_fp16(f);
        if (isnan(f)) {
            assert_true(isnan(qr_fp16_to_fp32(back)));
        } else {
            assert_int_equal(back, h);
        }
    }
}

/* Known values and round-to-nearest-even on ties. */
static void test_fp16_rounding(void **state) {
    (void)state;
    assert_int_equal(qr_fp32_to_fp16(1.0f), 0x3c00);
    assert_int_equal(qr_fp32_to_fp16(-2.0f), 0xc000);
    assert_int_equal(qr_fp32_to_fp16(65504.0f), 0x7bff);
    assert_int_equal(qr_fp32_to_fp16(1e6f), 0x7c00);
    assert_int_equal(qr_fp32_to_fp16(5.9604645e-8f), 0x0001); /* smallest subnormal */
    assert_int_equal(qr_fp32_to_fp16(2.9802322e-8f), 0x0000); /* exactly half of it: ties to even (0) */
    /* 1 + 2^-11 is a tie between 1.0 (even) and 1+2^-10: rounds to 1.0 */
    assert_int_equal(qr_fp32_to_fp16(1.0f + 0.00048828125f), 0x3c00);
    /* 1 + 3*2^-11 ties between odd 0x3c01 and even 0x3c02 */
    assert_int_equal(qr_fp32_to_fp16(1.0f + 3 * 0.00048828125f), 0x3c02);
}

static void test_bf16(void **state) {
    (void)state;
    assert_int_equal(qr_fp32_to_bf16(1.0f), 0x3f80);
    assert_true(qr_bf16_to_fp32(0x3f80) == 1.0f);
    assert_true(isnan(qr_bf16_to_fp32(qr_fp32_to_bf16(NAN))));
    for (uint32_t h = 0; h < 65536; h++) {
        float f = qr_bf16_to_fp32((uint16_t)h);
        if (!isnan(f)) assert_int_equal(qr_fp32_to_bf16(f), h);
    }
}

static void test_errf(void **state) {
    (void)state;
    char buf[16];
    assert_int_equal(qr_errf(buf, sizeof buf, QR_ERR_FORMAT, "offset %d: %s", 42, "a long message here"), QR_ERR_FORMAT);
    assert_int_equal(strlen(buf), 15);
    assert_int_equal(qr_errf(NULL, 0, QR_ERR_IO, "x"), QR_ERR_IO);
    assert_string_equal(qr_status_str(QR_ERR_NOMEM), "out of memory");
}

static void test_map_missing(void **state) {
    (void)state;
    qr_mapped_file m;
    char err[256];
    assert_int_equal(qr_map_file("/nonexistent/file.gguf", &m, err, sizeof err), QR_ERR_IO);
    assert_non_null(strstr(err, "/nonexistent/file.gguf"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp16_roundtrip_all), cmocka_unit_test(test_fp16_rounding),
        cmocka_unit_test(test_bf16), cmocka_unit_test(test_errf), cmocka_unit_test(test_map_missing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
