/* bench_quant.c — speed of Quarrel's vec_dot kernels (one weight row x one activation row, the inner
 * loop of CPU decode) against ggml's CPU kernels on the same bytes.
 *
 * Build and run with tools/bench_quant.sh. Usage:
 *   bench_quant [GGML_CPU_LIB] [--n N] [--mb MB] [--reps R] [--type NAME]...
 * GGML_CPU_LIB: path of libggml-cpu.so (llama-cpp-python ships one); without it only Quarrel runs.
 * For each type a matrix of about MB megabytes of rows of N values is multiplied by one activation
 * row R times; the best time is reported as ns per row, weight GB/s, and the ratio to ggml.
 * MB small (e.g. 1) measures the kernel with the weights in cache; large (e.g. 64) measures memory.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "quant/quant.h"

typedef void (*ggml_vec_dot_t)(int n, float *s, size_t bs, const void *x, size_t bx, const void *y, size_t by, int nrc);
typedef struct ggml_type_traits_cpu {
    void *from_float;
    ggml_vec_dot_t vec_dot;
    int vec_dot_type;
    int64_t nrows;
} ggml_type_traits_cpu;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng = 0x1234567;
static float frand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng >> 11) * 0x1p-53 * 2.0 - 1.0);
}

int main(int argc, char **argv) {
    const char *ggml_path = NULL;
    int64_t n = 2048;
    double mb = 16;
    int reps = 20;
    const char *only[32];
    int n_only = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--n") && i + 1 < argc) n = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--mb") && i + 1 < argc) mb = atof(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--type") && i + 1 < argc && n_only < 32) only[n_only++] = argv[++i];
        else ggml_path = argv[i];
    }
    const ggml_type_traits_cpu *(*ggml_traits)(int) = NULL;
    if (ggml_path) {
        void *h = dlopen(ggml_path, RTLD_NOW | RTLD_GLOBAL);
        if (!h) {
            fprintf(stderr, "cannot load %s: %s\n", ggml_path, dlerror());
            return 1;
        }
        void (*cpu_init)(void) = (void (*)(void))dlsym(h, "ggml_cpu_init");
        ggml_traits = (const ggml_type_traits_cpu *(*)(int))dlsym(h, "ggml_get_type_traits_cpu");
        if (!cpu_init || !ggml_traits) {
            fprintf(stderr, "%s: ggml_cpu_init / ggml_get_type_traits_cpu not found\n", ggml_path);
            return 1;
        }
        cpu_init();
    }
    const qr_type types[] = {QR_TYPE_Q4_0, QR_TYPE_Q4_1, QR_TYPE_Q5_0, QR_TYPE_Q5_1, QR_TYPE_Q8_0, QR_TYPE_Q2_K,
                             QR_TYPE_Q3_K, QR_TYPE_Q4_K, QR_TYPE_Q5_K, QR_TYPE_Q6_K, QR_TYPE_MXFP4, QR_TYPE_IQ4_NL,
                             QR_TYPE_F16, QR_TYPE_BF16, QR_TYPE_F32};
    printf("quarrel SIMD level: %s; row length %lld; ~%.3g MB of weights per type; best of %d passes\n",
           qr_quant_simd_level(), (long long)n, mb, reps);
    printf("%-7s %6s %12s %10s %12s %10s %8s\n", "type", "rows", "quarrel ns", "GB/s", "ggml ns", "GB/s", "q/ggml");
    float *x = malloc((size_t)n * sizeof(float)), *y = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        x[i] = frand();
        y[i] = frand();
    }
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        int wanted = n_only == 0;
        for (int k = 0; k < n_only; k++) wanted |= !strcasecmp(only[k], qr_type_name(types[t]));
        if (!wanted) continue;
        const qr_quant_traits *best = qr_quant_traits_best(types[t]);
        const qr_quant_traits *act = qr_quant_traits_best(best->vec_dot_type);
        const size_t row_bytes = qr_type_row_size(types[t], n);
        const int64_t rows = (int64_t)(mb * 1048576.0 / (double)row_bytes) + 1;
        uint8_t *w = malloc(row_bytes * (size_t)rows);
        uint8_t *a = malloc(qr_type_row_size(best->vec_dot_type, n));
        best->from_float(x, w, n);
        for (int64_t r = 1; r < rows; r++) memcpy(w + r * row_bytes, w, row_bytes);
        act->from_float(y, a, n);
        volatile float sink = 0;
        double t_q = INFINITY, t_g = INFINITY;
        for (int rep = 0; rep < reps; rep++) {
            double t0 = now_s();
            for (int64_t r = 0; r < rows; r++) {
                float s;
                best->vec_dot(n, &s, w + r * row_bytes, a);
                sink += s;
            }
            double t1 = now_s();
            if (t1 - t0 < t_q) t_q = t1 - t0;
            if (ggml_traits) {
                const ggml_type_traits_cpu *g = ggml_traits((int)types[t]);
                if (g && g->vec_dot && g->vec_dot_type == (int)best->vec_dot_type) {
                    t0 = now_s();
                    for (int64_t r = 0; r < rows; r++) {
                        float s;
                        g->vec_dot((int)n, &s, 0, w + r * row_bytes, 0, a, 0, 1);
                        sink += s;
                    }
                    t1 = now_s();
                    if (t1 - t0 < t_g) t_g = t1 - t0;
                }
            }
        }
        const double gb = (double)row_bytes * (double)rows / 1e9;
        if (isfinite(t_g))
            printf("%-7s %6lld %12.1f %10.2f %12.1f %10.2f %8.2f\n", qr_type_name(types[t]), (long long)rows,
                   1e9 * t_q / (double)rows, gb / t_q, 1e9 * t_g / (double)rows, gb / t_g, t_g / t_q);
        else
            printf("%-7s %6lld %12.1f %10.2f %12s %10s %8s\n", qr_type_name(types[t]), (long long)rows,
                   1e9 * t_q / (double)rows, gb / t_q, "-", "-", "-");
        free(w);
        free(a);
        (void)sink;
    }
    free(x);
    free(y);
    return 0;
}
