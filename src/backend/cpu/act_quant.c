/* act_quant.c — conversion of activation rows to Q8_0 / Q8_1 before a quantized dot product, with
 * the numerics of ggml's x86 SIMD activation quantizer (which llama.cpp uses on AVX2 machines, and
 * which differs from the reference weight quantizer): d = amax / 127, codes = round-half-even(x *
 * (127 / amax)), and for Q8_1 s = fp16(d * sum(codes)). Matching it matters: small models amplify
 * one-code differences into visible logit differences. Plain C, identical on every ISA. */
#include <math.h>

#include "backend/cpu/cpu.h"
#include "quant/blocks.h"
#include "util/util.h"

/* One block of 32: codes into qs, returns d; *sum = sum of codes. */
static float quantize_block(const float *x, int8_t *qs, int *sum) {
    float amax = 0.0f;
    for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[i]));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int s = 0;
    for (int i = 0; i < 32; i++) {
        const int q = (int)nearbyintf(x[i] * id); /* default rounding mode: to nearest, ties to even */
        qs[i] = (int8_t)q;
        s += q;
    }
    *sum = s;
    return d;
}

void qr_cpu_act_rows_q8_0(const float *x, void *dst, int64_t n, qr_cpu_act_block_fn block) {
    qr_block_q8_0 *y = dst;
    for (int64_t b = 0; b < n / 32; b++) {
        int sum;
        y[b].d = qr_fp32_to_fp16(block(x + b * 32, y[b].qs, &sum));
    }
}

void qr_cpu_act_rows_q8_1(const float *x, void *dst, int64_t n, qr_cpu_act_block_fn block) {
    qr_block_q8_1 *y = dst;
    for (int64_t b = 0; b < n / 32; b++) {
        int sum;
        const float d = block(x + b * 32, y[b].qs, &sum);
        y[b].d = qr_fp32_to_fp16(d);
        y[b].s = qr_fp32_to_fp16(d * (float)sum);
    }
}

static void act_q8_0(const float *x, void *dst, int64_t n) { qr_cpu_act_rows_q8_0(x, dst, n, quantize_block); }
static void act_q8_1(const float *x, void *dst, int64_t n) { qr_cpu_act_rows_q8_1(x, dst, n, quantize_block); }

qr_from_float_fn qr_cpu_act_quantizer(qr_type vec_dot_type) {
    switch (vec_dot_type) {
    case QR_TYPE_Q8_0: return act_q8_0;
    case QR_TYPE_Q8_1: return act_q8_1;
    default: return NULL;
    }
}
