/* check_mma.cpp — runs the int8 tensor-core expert kernel of src/backend/cuda/matmul_mma.cu on the host
 * (a CTA = 128 std::threads; cp.async copies at once, cuda_dev.cuh's host path; mma.sync m16n8k32 emulated
 * per warp with the PTX fragment layout, the one the H100 lab matched bit for bit) and compares every tile
 * row with the CPU oracle's vec_dot. Built and run by tests/cuda/host/run.sh.
 *   check_mma [k n_out]
 */
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <math.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <vector>
#include "simt.h"
#include "kernel_host.h"
static inline uint32_t __vsub4(uint32_t a, uint32_t b) { /* per byte, modulo 256 */
    uint32_t r = 0;
    for (int i = 0; i < 4; i++) r |= (uint32_t)(uint8_t)((a >> (8 * i)) - (b >> (8 * i))) << (8 * i);
    return r;
}
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
extern "C" {
#include "quant/quant.h"
#include "util/util.h"
}
#include "backend/cuda/quant_dev.cuh"
#include "pd.inc" /* qr_cuda_plane_desc of src/backend/cuda/dequant.cu, extracted by run.sh */

/* mma.sync.m16n8k32.row.col.s32.s8.s8.s32, c += A B: each lane's fragments are published, the warp meets,
 * each lane computes its 4 outputs, the warp meets again before the buffers are reused. */
static uint32_t g_frag[4][32][6];
static int8_t frag_byte(uint32_t w, int i) { return (int8_t)(w >> (8 * i)); }
static void mma_s8(int *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    const int w = (int)threadIdx.x / 32, l = (int)threadIdx.x % 32, g = l >> 2, t = l & 3;
    for (int i = 0; i < 4; i++) g_frag[w][l][i] = a[i];
    g_frag[w][l][4] = b0, g_frag[w][l][5] = b1;
    g_warp_bar[w]->arrive_and_wait();
    for (int o = 0; o < 4; o++) {
        const int row = g + (o >= 2 ? 8 : 0), col = 2 * t + (o & 1);
        int sum = 0;
        for (int k = 0; k < 32; k++) {
            /* A: row r, k -> lane (r % 8) * 4 + (k % 16) / 4, register (r >= 8) + 2 (k >= 16), byte k % 4 */
            const int8_t av = frag_byte(g_frag[w][(row % 8) * 4 + (k % 16) / 4][(row >= 8 ? 1 : 0) + (k >= 16 ? 2 : 0)], k % 4);
            /* B: k, column n -> lane n * 4 + (k % 16) / 4, register b0 / b1 (k >= 16), byte k % 4 */
            const int8_t bv = frag_byte(g_frag[w][col * 4 + (k % 16) / 4][4 + (k >= 16 ? 1 : 0)], k % 4);
            sum += (int)av * (int)bv;
        }
        c[o] += sum;
    }
    g_warp_bar[w]->arrive_and_wait();
}
static uint8_t g_mmq_smem[1 << 18]; /* the CTA's dynamic shared memory (CTAs run one after another) */
#include "mma_kernel.inc" /* the traits and mmq_tiles_kernel of src/backend/cuda/matmul_mma.cu, extracted by run.sh */

static uint64_t rs = 424242;
static float frand() { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (float)((rs >> 11) * 0x1p-53 * 2 - 1); }

template <class T, int NT>
static int test(qr_type type, int64_t k, int64_t n_out, const std::vector<int> &counts) {
    const int ne = (int)counts.size();
    const qr_quant_traits *tr = qr_quant_traits_ref(type), *xt = qr_quant_traits_ref(QR_TYPE_Q8_0);
    const cuda_plane_desc pd = qr_cuda_plane_desc(type);
    const size_t rb = qr_type_row_size(type, k), xrb = qr_type_row_size(QR_TYPE_Q8_0, k);
    const int64_t nb = k / 32, rows = (int64_t)ne * n_out;
    std::vector<float> src((size_t)(rows * k));
    for (auto &v : src) v = 2.0f * frand();
    std::vector<uint8_t> raw((size_t)rows * rb), planes[2];
    for (int64_t r = 0; r < rows; r++) tr->from_float(&src[r * k], &raw[r * rb], k);
    for (int p = 0; p < 2; p++) {
        planes[p].resize((size_t)(rows * nb) * pd.size[p]);
        for (int64_t b = 0; b < rows * nb; b++) memcpy(&planes[p][b * pd.size[p]], &raw[b * pd.bytes + pd.off[p]], pd.size[p]);
    }
    cuda_wview w{};
    w.type = type, w.k = k, w.n = rows, w.nb = nb, w.p0 = planes[0].data(), w.p1 = planes[1].data();
    /* sorted activation rows (expert by expert) and the tiles over them, 8 NT rows a tile at most */
    int n_x = 0;
    for (int c : counts) n_x += c;
    const int slack = 8 * NT;
    std::vector<float> x((size_t)(n_x + slack) * k, 0.0f);
    for (size_t i = 0; i < (size_t)n_x * k; i++) x[i] = frand();
    std::vector<uint8_t> xq((size_t)(n_x + slack) * xrb);
    std::vector<int8_t> q((size_t)(n_x + slack) * k);
    std::vector<float> d((size_t)(n_x + slack) * nb);
    for (int r = 0; r < n_x + slack; r++) {
        xt->from_float(&x[(size_t)r * k], &xq[(size_t)r * xrb], k);
        for (int64_t b = 0; b < nb; b++) { /* qr_block_q8_0: d (fp16), qs[32] */
            const uint8_t *blk = &xq[(size_t)r * xrb + b * 34];
            uint16_t dh;
            memcpy(&dh, blk, 2);
            d[(size_t)r * nb + b] = qr_fp16_to_fp32(dh);
            memcpy(&q[(size_t)r * k + b * 32], blk + 2, 32);
        }
    }
    cuda_xview xv{};
    xv.q = q.data(), xv.d = d.data(), xv.k = (int32_t)k;
    std::vector<int4> tiles;
    std::vector<int> expert_of(n_x);
    for (int e = 0, p0 = 0; e < ne; p0 += counts[e], e++) {
        for (int r = 0; r < counts[e]; r++) expert_of[p0 + r] = e;
        for (int t0 = 0; t0 < counts[e]; t0 += 8 * NT)
            tiles.push_back(int4{e, p0 + t0, counts[e] - t0 < 8 * NT ? counts[e] - t0 : 8 * NT, 0});
    }
    std::vector<float> y((size_t)n_x * n_out, NAN);
    host_run_grid((unsigned)((n_out + MMQ_BM - 1) / MMQ_BM), (unsigned)tiles.size(), MMQ_THREADS,
                  [&] { mmq_tiles_kernel<T, NT>(w, xv, tiles.data(), n_out, y.data()); });
    int bad = 0;
    double worst = 0;
    for (int r = 0; r < n_x; r++)
        for (int64_t i = 0; i < n_out; i++) {
            float ref;
            tr->vec_dot((int)k, &ref, &raw[((size_t)expert_of[r] * n_out + i) * rb], &xq[(size_t)r * xrb]);
            const float got = y[(size_t)r * n_out + i];
            const double e = fabs((double)got - ref) / (1.0 + fabs(ref));
            if (!(e <= worst)) worst = e;
            if (!(e <= 1e-5) && bad++ < 5) printf("  %s row %d out %ld: %.7g vs %.7g\n", qr_type_name(type), r, (long)i, got, ref);
        }
    printf("mma tiles %-5s k %ld n_out %ld NT %d tiles %zu: worst rel %.3g %s\n", qr_type_name(type), (long)k, (long)n_out, NT,
           tiles.size(), worst, bad ? "FAIL" : "ok");
    return bad;
}

int main(int argc, char **argv) {
    const int64_t k = argc > 2 ? atoll(argv[1]) : 352, n_out = argc > 2 ? atoll(argv[2]) : 200;
    int bad = 0;
    bad += test<TQ4_0, 4>(QR_TYPE_Q4_0, k, n_out, {5, 0, 40, 1});
    bad += test<TQ8_0, 1>(QR_TYPE_Q8_0, k, n_out, {3, 8, 0});
    bad += test<TQ4_0, 8>(QR_TYPE_Q4_0, k, n_out, {70, 2});
    return bad != 0;
}
