/* check_attention.cpp — runs the attention kernels of src/backend/cuda/attention.cu on the host (a
 * CTA is 128 std::threads with barriers standing in for __syncthreads and the warp shuffles) and
 * compares them with the CPU backend's scalar attention. No GPU needed: it catches logic errors
 * before device time is spent. Built and run by tests/cuda/host/run.sh.
 *   check_attention [n_head n_head_kv dk dv block_size window softcap f16 n_splits]   (LEN=rows)
 */
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <math.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include "simt.h"
#include "kernel_host.h"

#define QR_CUDA_DEV_SKIP_BLOCK
#include "backend/cuda/cuda_dev.cuh"
float __expf(float x) { return expf(x); }
float smem_buf[1 << 16];
#define ATTN_THREADS 128
#define ATTN_WARPS 4
using std::min; using std::max;
#include <algorithm>
#define extern_shared_hack
#include "attn_kernel.inc" /* the kernels of src/backend/cuda/attention.cu, extracted by run.sh */
extern "C" {
#include "backend/backend.h"
#include "util/util.h"
}
static uint64_t rs = 12345;
static float frand() { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (float)((rs >> 11) * 0x1p-53 * 2 - 1); }

template <int DPL, int GMAX, bool F16>
static void run_grid(const cuda_attn_args &a) {
    constexpr int KB = 16 / DPL > 0 ? 16 / DPL : 1;
    const int group = a.n_head / a.n_head_kv, n_gtiles = (group + GMAX - 1) / GMAX;
    gridDim = {(unsigned)(a.n_tok * a.n_head_kv * n_gtiles), (unsigned)a.n_splits, 1};
    blockDim = {128, 1, 1};
    for (int pass = 0; pass < 2; pass++)
    for (unsigned by = 0; by < gridDim.y; by++)
        for (unsigned bx = 0; bx < gridDim.x; bx++) {
            std::barrier<> bb(128);
            std::barrier<> wb0(32), wb1(32), wb2(32), wb3(32);
            g_block_bar = &bb; g_warp_bar[0] = &wb0; g_warp_bar[1] = &wb1; g_warp_bar[2] = &wb2; g_warp_bar[3] = &wb3;
            std::vector<std::thread> th;
            for (unsigned t = 0; t < 128; t++)
                th.emplace_back([&, t] { threadIdx = {t, 0, 0}; blockIdx = {bx, by, 0};
                    if (pass == 0) attn_kernel<DPL, GMAX, KB, F16, false>(a, n_gtiles); else attn_kernel<DPL, GMAX, KB, F16, true>(a, n_gtiles); });
            for (auto &x : th) x.join();
        }
    if (a.n_splits > 1)
        for (int64_t rh = 0; rh < (int64_t)a.n_tok * a.n_head; rh++)
            for (int d = 0; d < a.dv; d++) { float s = 0; for (int k = 0; k < a.n_splits; k++) s += a.partial[(rh * a.n_splits + k) * a.dv + d]; a.out[rh * a.dv + d] = s; }
}

int main(int argc, char **argv) {
    int n_head = 9, n_head_kv = 3, dk = 64, dv = 64, bs = 16, window = 0; float cap = 0; bool f16 = true; int splits = 1;
    if (argc > 1) { n_head = atoi(argv[1]); n_head_kv = atoi(argv[2]); dk = atoi(argv[3]); dv = atoi(argv[4]); bs = atoi(argv[5]); window = atoi(argv[6]); cap = atof(argv[7]); f16 = atoi(argv[8]); splits = atoi(argv[9]); }
    char err[256];
    qr_backend *cpu; qr_backend_cpu_params cp = {.n_threads = 1, .force_scalar = true};
    qr_backend_cpu_create(&cp, &cpu, err, sizeof err);
    const int len = getenv("LEN") ? atoi(getenv("LEN")) : 37, max_blocks = (len + bs - 1) / bs + 1, n_blocks = max_blocks + 2;
    qr_kv_desc d = {.n_layer = 2, .n_blocks = n_blocks, .block_size = bs, .k_dim = n_head_kv * dk, .v_dim = n_head_kv * dv, .type_k = f16 ? QR_TYPE_F16 : QR_TYPE_F32, .type_v = f16 ? QR_TYPE_F16 : QR_TYPE_F32};
    qr_kv_storage *kv = cpu->ops->kv_alloc(cpu, &d, err, sizeof err);
    int32_t bt[64]; for (int b = 0; b < max_blocks; b++) bt[b] = (max_blocks - 1 - b + 1) % n_blocks;
    int32_t tok[64] = {0}, pos[64], seq[64] = {0}, slot[64];
    for (int p = 0; p < len; p++) pos[p] = p, slot[p] = bt[p / bs] * bs + p % bs;
    qr_batch_plan plan = {.n_tokens = len, .tokens = tok, .pos = pos, .seq = seq, .kv_slot = slot, .n_seqs = 1, .max_blocks = max_blocks, .block_table = bt};
    cpu->ops->set_batch(cpu, &plan, err, sizeof err);
    std::vector<float> k(len * d.k_dim), v(len * d.v_dim), q(len * n_head * dk), oc(len * n_head * dv), og(len * n_head * dv, NAN);
    for (auto &x : k) x = 1.5f * frand(); for (auto &x : v) x = frand(); for (auto &x : q) x = 1.5f * frand();
    cpu->ops->kv_store(cpu, kv, 1, k.data(), v.data());
    qr_attn_params ap = {.n_head = n_head, .n_head_kv = n_head_kv, .head_dim_k = dk, .head_dim_v = dv, .scale = 1.0f / sqrtf((float)dk), .softcap = cap, .window = window};
    cpu->ops->attention(cpu, kv, 1, q.data(), &ap, oc.data());
    /* the GPU cache: same contents (rebuild it the GPU way) */
    const size_t slots = (size_t)n_blocks * bs, es = f16 ? 2 : 4;
    std::vector<uint8_t> kc(slots * d.k_dim * es), vc(slots * d.v_dim * es);
    for (int r = 0; r < len; r++) for (int i = 0; i < d.k_dim; i++) { float x = k[r * d.k_dim + i]; if (f16) ((__half *)kc.data())[slot[r] * d.k_dim + i] = __float2half_rn(x); else ((float *)kc.data())[slot[r] * d.k_dim + i] = x; }
    for (int r = 0; r < len; r++) for (int i = 0; i < d.v_dim; i++) { float x = v[r * d.v_dim + i]; if (f16) ((__half *)vc.data())[slot[r] * d.v_dim + i] = __float2half_rn(x); else ((float *)vc.data())[slot[r] * d.v_dim + i] = x; }
    std::vector<float> partial(len * n_head * splits * (dv + 2)), stats(len * n_head * splits * 2);
    cuda_attn_args a = {};
    a.q = q.data(); a.k_cache = kc.data(); a.v_cache = vc.data(); a.f16 = f16; a.pos = pos; a.seq = seq; a.block_table = bt;
    a.max_blocks = max_blocks; a.block_size = bs; a.n_tok = len; a.n_head = n_head; a.n_head_kv = n_head_kv; a.dk = dk; a.dv = dv;
    a.scale = ap.scale; a.softcap = cap; a.window = window; a.n_splits = splits; a.partial = partial.data(); a.stats = stats.data(); a.out = og.data();
    const int dmax = dk > dv ? dk : dv;
    if (dmax <= 64) { if (f16) run_grid<2, 8, true>(a); else run_grid<2, 8, false>(a); }
    else if (dmax <= 128) { if (f16) run_grid<4, 8, true>(a); else run_grid<4, 8, false>(a); }
    else if (dmax <= 256) { if (f16) run_grid<8, 4, true>(a); else run_grid<8, 4, false>(a); }
    else if (dmax <= 512) { if (f16) run_grid<16, 2, true>(a); else run_grid<16, 2, false>(a); }
    else { if (f16) run_grid<18, 2, true>(a); else run_grid<18, 2, false>(a); } /* MLA: 576 / 512 */
    double mx = 0, mw = 0; int worst = 0;
    for (size_t i = 0; i < oc.size(); i++) { double e = fabs(og[i] - oc[i]); if (!(e <= mx)) { mx = e; worst = (int)i; } mw = fmax(mw, fabs(oc[i])); }
    printf("attention h%d/%d dk%d dv%d bs%d win%d cap%g %s splits%d: max err %.3g (rel to max %.3g)\n", n_head, n_head_kv, dk, dv, bs, window, cap, f16 ? "f16" : "f32", splits, mx, mx / mw);
    return mx / mw <= 1e-3 ? 0 : 1;
}
