/* test_backend_select.c — qr_model_params.backend / .gpu: which backend a model gets and what the
 * library says about it, in every kind of build:
 *   CPU: always the CPU, no note;
 *   AUTO: CUDA with a GPU; else the CPU with the note "no CUDA device found" (CUDA build) or no note
 *         (build without CUDA);
 *   CUDA: CUDA with a GPU, else an error that says why;
 *   bad kinds / GPU indexes: QR_ERR_INVALID_ARG.
 * With a GPU it also decodes on both backends and compares the logits and the greedy tokens, pass
 * by pass (one-row passes replay the CUDA decode graph after the first two). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "backend/backend.h"
#include "quarrel.h"
#include "convert/synth.h"

static char g_path[256];

static int setup(void **state) {
    (void)state;
    snprintf(g_path, sizeof g_path, "/tmp/qr_test_backend_select_%d.gguf", (int)getpid());
    qr_synth_options o = {.arch = "llama", .preset = "tiny", .type = "F16", .n_threads = 1};
    char err[256];
    if (qr_synth_write(&o, g_path, NULL, err, sizeof err) != QR_OK) {
        fprintf(stderr, "synth: %s\n", err);
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    unlink(g_path);
    return 0;
}

static qr_status load(qr_backend_kind kind, int32_t gpu, qr_model **m, char *err, size_t err_len) {
    qr_model_params p = qr_model_default_params();
    p.n_threads = 1;
    p.backend = kind;
    p.gpu = gpu;
    return qr_model_load(g_path, &p, m, err, err_len);
}

static void test_defaults(void **state) {
    (void)state;
    const qr_model_params p = qr_model_default_params();
    assert_int_equal(p.backend, QR_BACKEND_AUTO);
    assert_int_equal(p.gpu, 0);
}

static void test_cpu(void **state) {
    (void)state;
    char err[512];
    qr_model *m = NULL;
    assert_int_equal(load(QR_BACKEND_CPU, 0, &m, err, sizeof err), QR_OK);
    assert_string_equal(qr_model_backend_name(m), "cpu");
    assert_string_equal(qr_model_backend_note(m), "");
    qr_model_free(m);
}

static void test_auto(void **state) {
    (void)state;
    char err[512];
    qr_model *m = NULL;
    assert_int_equal(load(QR_BACKEND_AUTO, 0, &m, err, sizeof err), QR_OK);
    if (qr_cuda_device_count() > 0) {
        assert_string_equal(qr_model_backend_name(m), "cuda");
        assert_string_equal(qr_model_backend_note(m), "");
    } else {
        assert_string_equal(qr_model_backend_name(m), "cpu");
#ifdef QUARREL_HAVE_CUDA
        assert_true(strncmp(qr_model_backend_note(m), "no CUDA device found", 20) == 0);
#else
        assert_string_equal(qr_model_backend_note(m), "");
#endif
    }
    qr_model_free(m);
}

static void test_cuda_explicit(void **state) {
    (void)state;
    char err[512] = "";
    qr_model *m = NULL;
    const qr_status st = load(QR_BACKEND_CUDA, 0, &m, err, sizeof err);
    if (qr_cuda_device_count() > 0) {
        assert_int_equal(st, QR_OK);
        assert_string_equal(qr_model_backend_name(m), "cuda");
        qr_model_free(m);
        return;
    }
    assert_int_equal(st, QR_ERR_UNSUPPORTED);
    assert_null(m);
    assert_non_null(strstr(err, "cannot use the CUDA backend"));
#ifdef QUARREL_HAVE_CUDA
    assert_non_null(strstr(err, "no CUDA device found"));
#else
    assert_non_null(strstr(err, "built without CUDA"));
#endif
}

static void test_bad_params(void **state) {
    (void)state;
    char err[512];
    qr_model *m = NULL;
    assert_int_equal(load((qr_backend_kind)7, 0, &m, err, sizeof err), QR_ERR_INVALID_ARG);
    assert_null(m);
    assert_int_equal(load(QR_BACKEND_AUTO, -1, &m, err, sizeof err), QR_ERR_INVALID_ARG);
    assert_null(m);
    /* a GPU index past the last device: an error when there are GPUs; auto falls back when none */
    const qr_status st = load(QR_BACKEND_AUTO, 99, &m, err, sizeof err);
    if (qr_cuda_device_count() > 0) {
        assert_int_equal(st, QR_ERR_INVALID_ARG);
        assert_non_null(strstr(err, "GPU 99"));
    } else {
        assert_int_equal(st, QR_OK);
        assert_string_equal(qr_model_backend_name(m), "cpu");
        qr_model_free(m);
    }
}

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* GPU vs CPU: a 12-token prompt, then 40 greedy one-token passes (the CUDA graph is warmed up,
 * captured, then replayed); the logits agree to 2e-2 of their range and the tokens are equal. */
static void test_gpu_matches_cpu(void **state) {
    (void)state;
    if (qr_cuda_device_count() == 0) {
        skip(); /* needs a GPU: reported as skipped, not passed */
    }
    char err[512];
    qr_model *mc = NULL, *mg = NULL;
    qr_context *cc = NULL, *cg = NULL;
    assert_int_equal(load(QR_BACKEND_CPU, 0, &mc, err, sizeof err), QR_OK);
    assert_int_equal(load(QR_BACKEND_CUDA, 0, &mg, err, sizeof err), QR_OK);
    qr_context_params cp = qr_context_default_params();
    cp.n_ctx = 256;
    assert_int_equal(qr_context_create(mc, &cp, &cc, err, sizeof err), QR_OK);
    assert_int_equal(qr_context_create(mg, &cp, &cg, err, sizeof err), QR_OK);
    const int V = qr_model_n_vocab(mc);
    qr_token prompt[12];
    for (int i = 0; i < 12; i++) prompt[i] = (qr_token)((i * 97 + 13) % V);
    qr_batch b = {.n_tokens = 12, .token = prompt};
    assert_int_equal(qr_decode(cc, &b, err, sizeof err), QR_OK);
    assert_int_equal(qr_decode(cg, &b, err, sizeof err), QR_OK);
    for (int step = 0; step < 40; step++) {
        const float *lc = qr_get_logits(cc, -1), *lg = qr_get_logits(cg, -1);
        assert_non_null(lc);
        assert_non_null(lg);
        float lo = lc[0], hi = lc[0], worst = 0.0f;
        for (int i = 0; i < V; i++) {
            lo = fminf(lo, lc[i]), hi = fmaxf(hi, lc[i]);
            worst = fmaxf(worst, fabsf(lc[i] - lg[i]));
        }
        if (worst > 2e-2f * (hi - lo)) fail_msg("step %d: max |cpu - gpu| = %g of range %g", step, worst, hi - lo);
        qr_token t = (qr_token)argmax(lc, V);
        assert_int_equal(argmax(lg, V), t);
        qr_batch one = {.n_tokens = 1, .token = &t};
        assert_int_equal(qr_decode(cc, &one, err, sizeof err), QR_OK);
        assert_int_equal(qr_decode(cg, &one, err, sizeof err), QR_OK);
    }
    qr_context_free(cc);
    qr_context_free(cg);
    qr_model_free(mc);
    qr_model_free(mg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),  cmocka_unit_test(test_cpu),        cmocka_unit_test(test_auto),
        cmocka_unit_test(test_cuda_explicit), cmocka_unit_test(test_bad_params), cmocka_unit_test(test_gpu_matches_cpu),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
