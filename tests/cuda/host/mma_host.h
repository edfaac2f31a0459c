/* mma_host.h — src/backend/cuda/mma_dev.cuh's warp instructions on the host (check_flash, check_attention_decode):
 * each lane publishes its fragments, the warp meets (simt.h's warp barriers), each lane computes its own outputs with
 * the PTX fragment layouts, the warp meets again before the buffers are reused. Include after simt.h and
 * kernel_host.h, before mma_dev.cuh. */
#pragma once
#include <stdint.h>
#include <string.h>
static uint32_t g_mma_frag[4][32][6];
static float frag_half(uint32_t w, int i) {
    const uint16_t u = (uint16_t)(w >> (16 * i));
    __half h;
    memcpy(&h, &u, 2);
    return __half2float(h);
}
/* mma.sync m16n8k16 f32 += f16 x f16 */
static void qr_host_mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    const int w = (int)threadIdx.x / 32, l = (int)threadIdx.x % 32, g = l >> 2, t = l & 3;
    for (int i = 0; i < 4; i++) g_mma_frag[w][l][i] = a[i];
    g_mma_frag[w][l][4] = b0, g_mma_frag[w][l][5] = b1;
    g_warp_bar[w]->arrive_and_wait();
    for (int o = 0; o < 4; o++) {
        const int row = g + (o >= 2 ? 8 : 0), col = 2 * t + (o & 1);
        float sum = 0.0f;
        for (int k = 0; k < 16; k++) {
            const float av = frag_half(g_mma_frag[w][(row % 8) * 4 + (k % 8) / 2][(row >= 8) + 2 * (k >= 8)], k % 2);
            const float bv = frag_half(g_mma_frag[w][col * 4 + (k % 8) / 2][4 + (k >= 8)], k % 2);
            sum += av * bv;
        }
        c[o] += sum;
    }
    g_warp_bar[w]->arrive_and_wait();
}
/* movmatrix.m8n8.trans.b16: lane (g, t) gets column g, rows 2t, 2t + 1 */
static uint32_t qr_host_trans(uint32_t x) {
    const int w = (int)threadIdx.x / 32, l = (int)threadIdx.x % 32, g = l >> 2, t = l & 3;
    g_mma_frag[w][l][0] = x;
    g_warp_bar[w]->arrive_and_wait();
    const uint32_t lo = (g_mma_frag[w][(2 * t) * 4 + g / 2][0] >> (16 * (g % 2))) & 0xffffu;
    const uint32_t hi = (g_mma_frag[w][(2 * t + 1) * 4 + g / 2][0] >> (16 * (g % 2))) & 0xffffu;
    g_warp_bar[w]->arrive_and_wait();
    return lo | hi << 16;
}
#define QR_MMA_HOST
