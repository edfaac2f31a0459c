/* check_attention_decode.cpp — runs the flash-decoding kernels of src/backend/cuda/attention_decode.cu
 * (or, MMA=1, the tensor-core batched decode kernel of attention_decode_mma.cu: one split, mma.sync and
 * movmatrix emulated per warp by mma_host.h) on the host (a CTA = 128 std::threads, barriers for
 * __syncthreads / __syncwarp and the warp shuffles) and compares them with the CPU backend's scalar
 * attention for a few decode rows. Built and run by tests/cuda/host/run.sh.
 *   check_attention_decode [n_head n_head_kv d block_size window softcap n_splits n_rows]   (LEN=context, SINKS=1, MMA=1)
 */
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <math.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <atomic>
#include "simt.h"
#include "kernel_host.h"
#undef __shared__
#define __shared__ static
inline void __syncwarp(unsigned = 0xffffffffu) { g_warp_bar[threadIdx.x / 32]->arrive_and_wait(); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline unsigned atomicAdd(unsigned *p, unsigned v) { return std::atomic_ref<unsigned>(*p).fetch_add(v); }
template <class T> static inline T __ldcg(const T *p) { return *p; }
#define QR_CUDA_DEV_SKIP_BLOCK
#include "backend/cuda/cuda_dev.cuh"
float __expf(float x) { return expf(x); }
using std::min; using std::max;
#include <algorithm>
#include "attn_decode_kernel.inc" /* the kernels of src/backend/cuda/attention_decode.cu, extracted by run.sh */
inline float __shfl_sync(unsigned, float v, int src) {
    const int w = threadIdx.x / 32, l = threadIdx.x % 32;
    g_warp_buf[w][l] = v; g_warp_bar[w]->arrive_and_wait();
    const float r = g_warp_buf[w][src & 31]; g_warp_bar[w]->arrive_and_wait(); return r;
}
#include "mma_host.h"
#include "backend/cuda/mma_dev.cuh"
#include "decode_mma_kernel.inc" /* the kernel of src/backend/cuda/attention_decode_mma.cu, extracted by run.sh */
extern "C" {
#include "backend/backend.h"
#include "util/util.h"
}
static uint64_t rs = 12345;
static float frand() { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (float)((rs >> 11) * 0x1p-53 * 2 - 1); }

template <int D, int G>
static void run_grid(const cuda_attn_args &a, float *scores, int sstride, unsigned *counters) {
    const int group = a.n_head / a.n_head_kv, n_gtiles = (group + G - 1) / G;
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
                        if (pass == 0) attn_dec_scores<D, G>(a, n_gtiles, scores, sstride); else attn_dec_values<D, G>(a, n_gtiles, scores, sstride, counters); });
                for (auto &x : th) x.join();
            }
    for (unsigned bx = 0; bx < gridDim.x; bx++) /* the last split of each tile resets its counter */
        if (counters[bx] != 0) { fprintf(stderr, "counter %u left at %u\n", bx, counters[bx]); exit(1); }
}

int main(int argc, char **argv) {
    int n_head = 32, n_head_kv = 8, dd = 128, bs = 16, window = 0, splits = 3, rows = 1; float cap = 0;
    if (argc > 1) { n_head = atoi(argv[1]); n_head_kv = atoi(argv[2]); dd = atoi(argv[3]); bs = atoi(argv[4]); window = atoi(argv[5]); cap = atof(argv[6]); splits = atoi(argv[7]); rows = atoi(argv[8]); }
    char err[256];
    qr_backend *cpu; qr_backend_cpu_params cp = {.n_threads = 1, .force_scalar = true};
    qr_backend_cpu_create(&cp, &cpu, err, sizeof err);
    const int len = getenv("LEN") ? atoi(getenv("LEN")) : 300, max_blocks = (len + bs - 1) / bs + 1, n_blocks = max_blocks + 2;
    qr_kv_desc d = {.n_layer = 2, .n_blocks = n_blocks, .block_size = bs, .k_dim = n_head_kv * dd, .v_dim = n_head_kv * dd, .type_k = QR_TYPE_F16, .type_v = QR_TYPE_F16};
    qr_kv_storage *kv = cpu->ops->kv_alloc(cpu, &d, err, sizeof err);
    std::vector<int32_t> bt(max_blocks);
    for (int b = 0; b < max_blocks; b++) bt[b] = (max_blocks - 1 - b + 1) % n_blocks;
    std::vector<int32_t> tok(len, 0), pos(len), seq(len, 0), slot(len);
    for (int p = 0; p < len; p++) pos[p] = p, slot[p] = bt[p / bs] * bs + p % bs;
    qr_batch_plan plan = {.n_tokens = len, .tokens = tok.data(), .pos = pos.data(), .seq = seq.data(), .kv_slot = slot.data(), .n_seqs = 1, .max_blocks = max_blocks, .block_table = bt.data()};
    cpu->ops->set_batch(cpu, &plan, err, sizeof err);
    std::vector<float> k((size_t)len * d.k_dim), v((size_t)len * d.v_dim);
    for (auto &x : k) x = 1.5f * frand(); for (auto &x : v) x = frand();
    cpu->ops->kv_store(cpu, kv, 1, k.data(), v.data());
    /* decode rows: the last `rows` positions (as a multi-row decode of one sequence would have) */
    std::vector<int32_t> dpos(rows), dseq(rows, 0), dtok(rows, 0), dslot(rows);
    for (int r = 0; r < rows; r++) dpos[r] = len - rows + r, dslot[r] = slot[dpos[r]];
    qr_batch_plan dplan = {.n_tokens = rows, .tokens = dtok.data(), .pos = dpos.data(), .seq = dseq.data(), .kv_slot = dslot.data(), .n_seqs = 1, .max_blocks = max_blocks, .block_table = bt.data()};
    cpu->ops->set_batch(cpu, &dplan, err, sizeof err);
    std::vector<float> q((size_t)rows * n_head * dd), oc((size_t)rows * n_head * dd), og((size_t)rows * n_head * dd, NAN);
    for (auto &x : q) x = 1.5f * frand();
    qr_attn_params ap = {.n_head = n_head, .n_head_kv = n_head_kv, .head_dim_k = dd, .head_dim_v = dd, .scale = 1.0f / sqrtf((float)dd), .softcap = cap, .window = window};
    std::vector<float> sinks(n_head); /* SINKS=1: gpt-oss attention sinks */
    for (auto &x : sinks) x = 2.0f * frand();
    qr_weight sw = {.name = "sinks", .type = QR_TYPE_F32, .ne = {n_head, 1, 1, 1}, .row_bytes = (size_t)n_head * 4, .host = sinks.data()};
    const bool use_sinks = getenv("SINKS") && atoi(getenv("SINKS"));
    if (use_sinks) ap.sinks = &sw;
    cpu->ops->attention(cpu, kv, 1, q.data(), &ap, oc.data());
    const size_t slots = (size_t)n_blocks * bs;
    std::vector<__half> kc(slots * d.k_dim), vc(slots * d.v_dim);
    for (int r = 0; r < len; r++) for (int i = 0; i < d.k_dim; i++) kc[(size_t)slot[r] * d.k_dim + i] = __float2half_rn(k[(size_t)r * d.k_dim + i]);
    for (int r = 0; r < len; r++) for (int i = 0; i < d.v_dim; i++) vc[(size_t)slot[r] * d.v_dim + i] = __float2half_rn(v[(size_t)r * d.v_dim + i]);
    const int sstride = max_blocks * bs;
    std::vector<float> partial((size_t)rows * n_head * splits * dd), stats((size_t)rows * n_head * splits * 2), scores((size_t)rows * n_head * sstride, NAN);
    cuda_attn_args a = {};
    a.q = q.data(); a.k_cache = kc.data(); a.v_cache = vc.data(); a.f16 = true; a.pos = dpos.data(); a.seq = dseq.data(); a.block_table = bt.data();
    a.max_blocks = max_blocks; a.block_size = bs; a.n_tok = rows; a.n_head = n_head; a.n_head_kv = n_head_kv; a.dk = dd; a.dv = dd;
    a.scale = ap.scale; a.softcap = cap; a.window = window; a.n_splits = splits; a.partial = partial.data(); a.stats = stats.data(); a.out = og.data();
    a.sinks = use_sinks ? sinks.data() : NULL;
    std::vector<unsigned> counters(rows * n_head_kv * n_head, 0u);
    const bool mma = getenv("MMA") && atoi(getenv("MMA"));
    if (mma) { /* one split, no scratch */
        a.q8_kind = -1;
        const int n_gtiles = (n_head / n_head_kv + 7) / 8;
        if (splits != 1 || (dd != 64 && dd != 128)) { fprintf(stderr, "MMA=1: one split, head 64 or 128\n"); return 2; }
        host_run_grid((unsigned)(rows * n_head_kv * n_gtiles), 1, 128,
                      [&] { dd == 64 ? attn_dec_mma<64>(a, n_gtiles) : attn_dec_mma<128>(a, n_gtiles); });
    }
    for (int rep = 0; rep < (mma ? 0 : 2); rep++) { /* twice: the counters must be back at zero for a second launch */
        if (dd == 64) run_grid<64, 8>(a, scores.data(), sstride, counters.data());
        else if (dd == 128) run_grid<128, 8>(a, scores.data(), sstride, counters.data());
        else run_grid<256, 4>(a, scores.data(), sstride, counters.data());
    }
    double mx = 0, mw = 0;
    for (size_t i = 0; i < oc.size(); i++) { double e = fabs(og[i] - oc[i]); if (!(e <= mx)) mx = e; mw = fmax(mw, fabs(oc[i])); }
    printf("attention decode%s h%d/%d d%d bs%d win%d cap%g splits%d rows%d len%d%s: max err %.3g (rel to max %.3g)\n", mma ? " mma" : "", n_head, n_head_kv, dd, bs, window, cap, splits, rows, len, use_sinks ? " sinks" : "", mx, mx / mw);
    return mx / mw <= (mma ? 2e-3 : 1e-3) ? 0 : 1; /* mma: p rounded to f16 before the division (the flash kernel's noise) */
}
