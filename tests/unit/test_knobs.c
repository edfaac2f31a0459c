/* test_knobs.c — the environment switch table (util/knobs.c): every default parses, booleans, integers,
 * choices and AxB dimensions parse or fall back to the default with a reason; the environment is read once
 * (a bad value: a warning on stderr and the default), from any number of threads; docs/knobs.md lists
 * every knob. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/knobs.h"

/* Every knob has a name, a read_by and a doc; names are unique; the default parses as a value. */
static void test_table_defaults(void **state) {
    (void)state;
    for (int k = 0; k < QR_KNOB_COUNT; k++) {
        const qr_knob_def *d = &qr_knob_defs[k];
        assert_non_null(d->name);
        assert_non_null(d->def);
        assert_true(d->read_by && *d->read_by);
        assert_true(d->doc && *d->doc);
        for (int j = 0; j < k; j++) assert_string_not_equal(d->name, qr_knob_defs[j].name);
        qr_knob_value v;
        char why[160] = "";
        assert_true(qr_knob_parse(d, d->def, &v, why, sizeof why));
        qr_knob_value unset;
        assert_true(qr_knob_parse(d, NULL, &unset, why, sizeof why));
        assert_memory_equal(v.i, unset.i, sizeof v.i); /* "unset" is the default */
        assert_true(qr_knob_parse(d, "", &unset, why, sizeof why));
        assert_memory_equal(v.i, unset.i, sizeof v.i);
    }
    /* the defaults the code relied on before the table */
    qr_knob_value v;
    assert_true(qr_knob_parse(&qr_knob_defs[QR_KNOB_TILE], NULL, &v, NULL, 0));
    assert_int_equal(v.i[0], 3);
    assert_int_equal(v.i[1], 4);
    assert_true(qr_knob_parse(&qr_knob_defs[QR_KNOB_SIMD], NULL, &v, NULL, 0));
    assert_int_equal(v.i[0], QR_SIMD_AUTO);
    assert_true(qr_knob_parse(&qr_knob_defs[QR_KNOB_SSM_SCAN], NULL, &v, NULL, 0));
    assert_int_equal(v.i[0], QR_SSM_SCAN_REC);
    assert_true(qr_knob_parse(&qr_knob_defs[QR_KNOB_HOST_PROF], NULL, &v, NULL, 0));
    assert_int_equal(v.i[0], 0);
}

/* Parses text as knob d: expects ok, and the value [a, b] (b only for DIMS; on failure: the default)
 * and, on failure, a reason containing why_has. */
static void expect(const qr_knob_def *d, const char *text, bool ok, int32_t a, int32_t b, const char *why_has) {
    qr_knob_value v = {{-99, -99}, NULL};
    char why[160] = "";
    if (qr_knob_parse(d, text, &v, why, sizeof why) != ok) fail_msg("%s=%s: expected %s", d->name, text, ok ? "ok" : "an error");
    if (v.i[0] != a || (d->type == QR_KNOB_DIMS && v.i[1] != b))
        fail_msg("%s=%s: got %d x %d, expected %d x %d", d->name, text, v.i[0], v.i[1], a, b);
    if (!ok && !strstr(why, why_has)) fail_msg("%s=%s: reason '%s' lacks '%s'", d->name, text, why, why_has);
}

static void test_bool(void **state) {
    (void)state;
    const qr_knob_def *d = &qr_knob_defs[QR_KNOB_HOST_PROF];
    static const char *const on[] = {"1", "true", "TRUE", "yes", "On"}, *const off[] = {"0", "false", "no", "OFF"};
    for (size_t i = 0; i < sizeof on / sizeof on[0]; i++) expect(d, on[i], true, 1, 0, NULL);
    for (size_t i = 0; i < sizeof off / sizeof off[0]; i++) expect(d, off[i], true, 0, 0, NULL);
    static const char *const bad[] = {"2", "maybe", "1 ", "tru", "-1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) expect(d, bad[i], false, 0, 0, "boolean");
}

static void test_int(void **state) {
    (void)state;
    const qr_knob_def d = {"QUARREL_TEST_INT", QR_KNOB_INT, "7", 1, 10, NULL, "test", "a test knob"};
    expect(&d, "5", true, 5, 0, NULL);
    expect(&d, "10", true, 10, 0, NULL);
    expect(&d, "1", true, 1, 0, NULL);
    static const char *const bad[] = {"0", "11", "5x", "x", " ", "99999999999", "-3", "1e1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) expect(&d, bad[i], false, 7, 0, "[1, 10]");
}

static void test_choice_dims_string(void **state) {
    (void)state;
    const qr_knob_def *simd = &qr_knob_defs[QR_KNOB_SIMD], *ssm = &qr_knob_defs[QR_KNOB_SSM_SCAN];
    expect(simd, "scalar", true, QR_SIMD_SCALAR, 0, NULL);
    expect(simd, "auto", true, QR_SIMD_AUTO, 0, NULL);
    expect(simd, "avx2", false, QR_SIMD_AUTO, 0, "auto|scalar");
    expect(simd, "scala", false, QR_SIMD_AUTO, 0, "auto|scalar");
    expect(simd, "scalarx", false, QR_SIMD_AUTO, 0, "auto|scalar");
    expect(ssm, "ssd", true, QR_SSM_SCAN_SSD, 0, NULL);
    expect(ssm, "recurrent", true, QR_SSM_SCAN_RECURRENT, 0, NULL);
    expect(ssm, "SSD", false, QR_SSM_SCAN_REC, 0, "rec|ssd");

    const qr_knob_def *tile = &qr_knob_defs[QR_KNOB_TILE];
    expect(tile, "2x1", true, 2, 1, NULL);
    expect(tile, "4x4", true, 4, 4, NULL);
    static const char *const bad[] = {"5x1", "1x5", "0x2", "3x", "x4", "3x4x5", "34", "3*4", "3x4 "};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) expect(tile, bad[i], false, 3, 4, "AxB");

    const qr_knob_def *store = &qr_knob_defs[QR_KNOB_OLLAMA_MODELS];
    const char *path = "/srv/ollama models";
    qr_knob_value v;
    char why[160];
    assert_true(qr_knob_parse(store, path, &v, why, sizeof why));
    assert_ptr_equal(v.s, path);
    assert_true(qr_knob_parse(store, NULL, &v, why, sizeof why));
    assert_string_equal(v.s, "");
}

typedef struct first_read {
    int32_t tile_r, tile_c, ssm, prof, simd;
    const char *store;
} first_read;

static void *read_knobs(void *arg) {
    first_read *r = arg;
    qr_knob_dims(QR_KNOB_TILE, &r->tile_r, &r->tile_c);
    r->ssm = qr_knob_int(QR_KNOB_SSM_SCAN);
    r->prof = qr_knob_int(QR_KNOB_HOST_PROF);
    r->simd = qr_knob_int(QR_KNOB_SIMD);
    r->store = qr_knob_str(QR_KNOB_OLLAMA_MODELS);
    return NULL;
}

/* The first access (from 4 threads at once) reads the environment: good values apply, a bad one gets a
 * warning naming it on stderr and the default; later changes to the environment are not seen. Must be the
 * only test that calls the accessors. */
static void test_read_once(void **state) {
    (void)state;
    setenv("QUARREL_TILE", "2x3", 1);
    setenv("QUARREL_SSM_SCAN", "bogus", 1);
    setenv("QUARREL_HOST_PROF", "yes", 1);
    setenv("QUARREL_SIMD", "", 1); /* empty: unset, no warning */
    setenv("OLLAMA_MODELS", "/tmp/store-a", 1);
    char path[] = "/tmp/test_knobs_XXXXXX";
    const int fd = mkstemp(path);
    assert_true(fd >= 0);
    fflush(stderr);
    const int saved = dup(STDERR_FILENO);
    assert_true(saved >= 0);
    assert_int_equal(dup2(fd, STDERR_FILENO), STDERR_FILENO);
    pthread_t th[4];
    first_read r[4];
    for (int i = 0; i < 4; i++) assert_int_equal(pthread_create(&th[i], NULL, read_knobs, &r[i]), 0);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    char log[2048] = "";
    const ssize_t n = pread(fd, log, sizeof log - 1, 0);
    close(fd);
    unlink(path);
    assert_true(n > 0);
    log[n] = 0;
    assert_non_null(strstr(log, "QUARREL_SSM_SCAN=bogus ignored"));
    assert_non_null(strstr(log, "using the default rec"));
    assert_null(strstr(log, "QUARREL_TILE"));
    assert_null(strstr(log, "QUARREL_HOST_PROF"));
    assert_null(strstr(log, "QUARREL_SIMD"));
    for (int i = 0; i < 4; i++) {
        assert_int_equal(r[i].tile_r, 2);
        assert_int_equal(r[i].tile_c, 3);
        assert_int_equal(r[i].ssm, QR_SSM_SCAN_REC);
        assert_int_equal(r[i].prof, 1);
        assert_int_equal(r[i].simd, QR_SIMD_AUTO);
        assert_string_equal(r[i].store, "/tmp/store-a");
    }
    setenv("QUARREL_TILE", "1x1", 1);
    setenv("OLLAMA_MODELS", "/tmp/store-b", 1); /* the copy stays valid and unchanged */
    first_read later;
    read_knobs(&later);
    assert_int_equal(later.tile_r, 2);
    assert_string_equal(later.store, "/tmp/store-a");
}

/* The whole of file `path` (below the source tree) into buf, NUL-terminated. */
static void read_source(const char *path, char *buf, size_t cap) {
    char full[1024];
    snprintf(full, sizeof full, "%s/../../%s", QR_TEST_DATA_DIR, path);
    FILE *f = fopen(full, "rb");
    if (!f) fail_msg("cannot open %s", full);
    const size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = 0;
}

/* docs/knobs.md names every knob of the table and every QUARREL_CUDA_* switch tune.cu reads. */
static void test_documented(void **state) {
    (void)state;
    static char doc[65536], tune[65536];
    read_source("docs/knobs.md", doc, sizeof doc);
    read_source("src/backend/cuda/tune.cu", tune, sizeof tune);
    char cell[80];
    for (int k = 0; k < QR_KNOB_COUNT; k++) {
        snprintf(cell, sizeof cell, "| `%s`", qr_knob_defs[k].name);
        if (!strstr(doc, cell)) fail_msg("docs/knobs.md does not list %s", qr_knob_defs[k].name);
    }
    int n_cuda = 0;
    for (const char *p = tune; (p = strstr(p, "\"QUARREL_CUDA_")) != NULL; p++) {
        const char *end = strchr(p + 1, '"');
        assert_non_null(end);
        snprintf(cell, sizeof cell, "| `%.*s", (int)(end - p - 1), p + 1);
        if (!strstr(doc, cell)) fail_msg("docs/knobs.md does not list %s", cell + 3);
        n_cuda++;
    }
    assert_true(n_cuda >= 30);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_defaults), cmocka_unit_test(test_bool),      cmocka_unit_test(test_int),
        cmocka_unit_test(test_choice_dims_string), cmocka_unit_test(test_read_once), cmocka_unit_test(test_documented),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
