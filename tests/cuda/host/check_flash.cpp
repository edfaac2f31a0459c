/* check_flash.cpp — runs the tensor-core flash attention kernel of src/backend/cuda/attention_flash.cu on the
 * host (a CTA = 128 std::threads; ldmatrix and mma.sync m16n8k16 emulated per warp with the PTX fragment
 * layouts; cp.async copies at once) and compares it with the CPU backend's scalar attention on prompt-like
 * passes: two sequences (two runs of rows) over one paged cache, GQA groups that do and do not divide the
 * 64-row tile, windows, softcap, sinks. Built and run by tests/cuda/host/run.sh.
 *   check_flash [n_head n_head_kv d block_size window softcap rows0 rows1]   (LEN = the first sequence's length)
 */
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <math.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <atomic>
#include <algorithm>
#include "simt.h"
#include "kernel_host.h"
#undef __launch_bounds__
#define __launch_bounds__(...)
#undef __shared__
#define __shared__ static
static int atomic_update(int *p, int v, bool take_min) {
    std::atomic_ref<int> r(*p);
    int old = r.load();
    while ((take_min ? v < old : v > old) && !r.compare_exchange_weak(old, v)) {}
    return old;
}
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __all_sync(unsigned, int pred) { /* every lane's predicate, over the warp barrier */
    const int w = threadIdx.x / 32, l = threadIdx.x % 32;
    g_warp_buf[w][l] = pred ? 1.0f : 0.0f;
    g_warp_bar[w]->arrive_and_wait();
    int all = 1;
    for (int i = 0; i < 32; i++) all &= g_warp_buf[w][i] != 0.0f;
    g_warp_bar[w]->arrive_and_wait();
    return all;
}
inline int atomicMin(int *p, int v) { return atomic_update(p, v, true); }
inline int atomicMax(int *p, int v) { return atomic_update(p, v, false); }
#define QR_CUDA_DEV_SKIP_BLOCK
#include "backend/cuda/cuda_dev.cuh"
using std::min; using std::max;

/* ldmatrix .x4 (.trans): each lane publishes the row address it gives, the warp meets, each lane gathers its
 * four registers, the warp meets again before the addresses are reused. */
static const __half *g_ldsm_addr[4][32];
static uint16_t half_bits(__half h) { uint16_t u; memcpy(&u, &h, 2); return u; }
static void fa_host_ldsm(uint32_t (&r)[4], const __half *p, bool trans) {
    const int w = (int)threadIdx.x / 32, l = (int)threadIdx.x % 32;
    g_ldsm_addr[w][l] = p;
    g_warp_bar[w]->arrive_and_wait();
    for (int i = 0; i < 4; i++) {
        __half lo, hi;
        if (!trans) {
            const __half *row = g_ldsm_addr[w][8 * i + (l >> 2)];
            lo = row[2 * (l & 3)], hi = row[2 * (l & 3) + 1];
        } else {
            lo = g_ldsm_addr[w][8 * i + 2 * (l & 3)][l >> 2];
            hi = g_ldsm_addr[w][8 * i + 2 * (l & 3) + 1][l >> 2];
        }
        r[i] = (uint32_t)half_bits(lo) | (uint32_t)half_bits(hi) << 16;
    }
    g_warp_bar[w]->arrive_and_wait();
}
#include "mma_host.h"
#include "backend/cuda/mma_dev.cuh"
#define QR_FA_HOST
static __half g_fa_smem[1 << 17]; /* the CTA's dynamic shared memory (CTAs run one after another) */
#include "flash_kernel.inc" /* the kernel and the tile builder of src/backend/cuda/attention_flash.cu, extracted by run.sh */
extern "C" {
#include "backend/backend.h"
#include "backend/cpu/cpu.h"
#include "quant/quant.h"
#include "util/util.h"
}
static uint64_t rs = 777;
static float frand() { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (float)((rs >> 11) * 0x1p-53 * 2 - 1); }

template <int D, int BN, int MT, int ST, int KQ = 0>
static void run_grid(const cuda_attn_args &a, const int32_t *tiles, int n_tiles, int ns) {
    std::vector<float> part((size_t)ns * a.n_tok * a.n_head * D, NAN);
    std::vector<float2> stats((size_t)ns * a.n_tok * a.n_head);
    host_run_grid((unsigned)n_tiles, (unsigned)a.n_head_kv, 128,
                  [&] { attn_flash_kernel<D, BN, MT, ST, KQ>(a, (const int4 *)tiles, part.data(), stats.data()); }, (unsigned)ns);
    if (ns > 1)
        host_run_grid((unsigned)(a.n_tok * a.n_head), 1, D, [&] { attn_flash_combine<D>(a, ns, part.data(), stats.data()); });
}

/* KVQ=q8|q4: the kernel over a quantized cache (kv_quant.cuh's layout, made here with the CPU's rotation and
 * quantizers) against a double-precision attention over the same dequantized rows, q rotated first as the backend
 * does (both outputs compared in the rotated space: the backend rotates the kernel's output back after). */
static int run_kvq(int n_head, int n_head_kv, int dd, int bs, int window, float cap, int rows0, int rows1, int ns, int mt) {
    const int kvq = !strcmp(getenv("KVQ"), "q4") ? CUDA_KVQ_Q4 : CUDA_KVQ_Q8;
    const qr_type qt = kvq == CUDA_KVQ_Q8 ? QR_TYPE_Q8_0 : QR_TYPE_Q4_0;
    int rot_k = 64;
    while (dd % (2 * rot_k) == 0) rot_k *= 2;
    const int rot_v = 64, n = n_head_kv * dd;
    const int len = getenv("LEN") ? atoi(getenv("LEN")) : 150, len1 = len / 2 + 3;
    const int max_blocks = (len + bs - 1) / bs + 1, n_blocks = max_blocks + 2;
    std::vector<int32_t> bt(2 * max_blocks);
    for (int b = 0; b < max_blocks; b++) bt[b] = bt[max_blocks + b] = (max_blocks - 1 - b + 1) % n_blocks;
    const int code_row = kvq == CUDA_KVQ_Q8 ? n : n / 2;
    const size_t blk_bytes = (size_t)bs * (code_row + n / 16);
    std::vector<uint8_t> kc(n_blocks * blk_bytes), vc(n_blocks * blk_bytes);
    std::vector<float> kd((size_t)n_blocks * bs * n), vd((size_t)n_blocks * bs * n); /* the dequantized values */
    std::vector<float> row(n), deq(n);
    std::vector<uint8_t> qb(qr_type_row_size(qt, n));
    for (int p = 0; p < len; p++) {
        const int64_t slot = (int64_t)bt[p / bs] * bs + p % bs;
        for (int pass = 0; pass < 2; pass++) {
            for (auto &x : row) x = pass ? frand() : 1.5f * frand();
            qr_cpu_fwht(row.data(), n, pass ? rot_v : rot_k);
            const qr_from_float_fn act = kvq == CUDA_KVQ_Q8 ? qr_cpu_act_quantizer(qt) : NULL;
            (act ? act : qr_quant_traits_ref(qt)->from_float)(row.data(), qb.data(), n);
            qr_quant_traits_ref(qt)->to_float(qb.data(), deq.data(), n);
            memcpy((pass ? vd : kd).data() + slot * n, deq.data(), sizeof(float) * n);
            uint8_t *b = (pass ? vc : kc).data() + (slot / bs) * blk_bytes, *codes = b + (slot % bs) * code_row;
            uint8_t *scales = b + (size_t)bs * code_row + (slot % bs) * (n / 32) * 2;
            const size_t bb = qr_type_row_size(qt, 32);
            for (int blk = 0; blk < n / 32; blk++) {
                const uint8_t *src = qb.data() + blk * bb;
                memcpy(scales + blk * 2, src, 2);
                for (int i = 0; i < 32; i++) {
                    if (kvq == CUDA_KVQ_Q8) codes[blk * 32 + i] = src[2 + i];
                    else { /* ggml: byte j holds values j (low) and j + 16 (high); here byte b values 2b, 2b + 1 */
                        const int c = i < 16 ? src[2 + i] & 15 : src[2 + i - 16] >> 4;
                        uint8_t &o = codes[(blk * 32 + i) / 2];
                        o = (uint8_t)(i & 1 ? (o & 15) | (c << 4) : (o & 0xF0) | c);
                    }
                }
            }
        }
    }
    const int rows = rows0 + rows1, group = n_head / n_head_kv;
    std::vector<int32_t> dpos(rows), dseq(rows);
    for (int r = 0; r < rows0; r++) dpos[r] = len - rows0 + r, dseq[r] = 0;
    for (int r = 0; r < rows1; r++) dpos[rows0 + r] = len1 - rows1 + r, dseq[rows0 + r] = 1;
    std::vector<float> q((size_t)rows * n_head * dd), og(q.size(), NAN), od(q.size());
    for (auto &x : q) x = 1.5f * frand();
    for (int64_t h = 0; h < (int64_t)rows * n_head; h++) qr_cpu_fwht(&q[h * dd], dd, rot_k);
    const float scale = 1.0f / sqrtf((float)dd);
    for (int r = 0; r < rows; r++) /* the reference: double precision, rotated q, output rotated back below */
        for (int h = 0; h < n_head; h++) {
            const int kvh = h / group, p1 = dpos[r], p0 = window > 0 ? std::max(0, p1 - window + 1) : 0;
            const int32_t *tb = bt.data() + dseq[r] * max_blocks;
            std::vector<double> sc(p1 - p0 + 1);
            double mx = -INFINITY, sum = 0;
            for (int p = p0; p <= p1; p++) {
                const int64_t slot = (int64_t)tb[p / bs] * bs + p % bs;
                double dot = 0;
                for (int i = 0; i < dd; i++) dot += (double)q[((size_t)r * n_head + h) * dd + i] * kd[slot * n + kvh * dd + i];
                if (cap > 0) dot = cap * tanh(dot / cap);
                mx = std::max(mx, sc[p - p0] = dot * scale);
            }
            for (auto &x : sc) sum += (x = exp(x - mx));
            for (int i = 0; i < dd; i++) {
                double acc = 0;
                for (int p = p0; p <= p1; p++) acc += sc[p - p0] * vd[((int64_t)tb[p / bs] * bs + p % bs) * n + kvh * dd + i];
                od[((size_t)r * n_head + h) * dd + i] = (float)(acc / sum);
            }
        }
    cuda_attn_args a = {};
    a.q = q.data(); a.k_cache = kc.data(); a.v_cache = vc.data(); a.kvq = kvq; a.pos = dpos.data(); a.seq = dseq.data(); a.block_table = bt.data();
    a.max_blocks = max_blocks; a.block_size = bs; a.n_tok = rows; a.n_head = n_head; a.n_head_kv = n_head_kv; a.dk = dd; a.dv = dd;
    a.scale = scale; a.softcap = cap; a.window = window; a.n_splits = 1; a.out = og.data();
    if (dd == 256) mt = 1;
    const int bm = qr_cuda_attn_flash_rows(dd, mt);
    const int n_tiles = qr_cuda_attn_flash_tiles(dseq.data(), rows, group, bm, NULL, 0);
    std::vector<int32_t> tiles(4 * n_tiles);
    qr_cuda_attn_flash_tiles(dseq.data(), rows, group, bm, tiles.data(), n_tiles);
    bool ran = false;
#define FORM(D, BN, MT, ST)                                                                                  \
    if (!ran && dd == D && mt == MT) {                                                                       \
        if (kvq == CUDA_KVQ_Q8) run_grid<D, BN, MT, ST, CUDA_KVQ_Q8>(a, tiles.data(), n_tiles, ns);          \
        else run_grid<D, BN, MT, ST, CUDA_KVQ_Q4>(a, tiles.data(), n_tiles, ns);                             \
        ran = true;                                                                                          \
    }
    FA_QFORMS(FORM)
#undef FORM
    double mx = 0, mw = 0;
    for (size_t i = 0; i < od.size(); i++) { double e = fabs(og[i] - od[i]); if (!(e <= mx)) mx = e; mw = fmax(mw, fabs(od[i])); }
    printf("flash attention %s h%d/%d d%d bs%d win%d cap%g rows %d+%d len%d tiles%d splits%d mt%d%s: max err %.3g (rel to max %.3g)\n",
           kvq == CUDA_KVQ_Q8 ? "q8_0" : "q4_0", n_head, n_head_kv, dd, bs, window, cap, rows0, rows1, len, n_tiles, ns, mt,
           ran ? "" : " (no form)", mx, mx / mw);
    return ran && mx / mw <= 2e-3 ? 0 : 1;
}

int main(int argc, char **argv) {
    int n_head = 8, n_head_kv = 2, dd = 64, bs = 16, window = 0, rows0 = 40, rows1 = 9; float cap = 0;
    if (argc > 1) { n_head = atoi(argv[1]); n_head_kv = atoi(argv[2]); dd = atoi(argv[3]); bs = atoi(argv[4]); window = atoi(argv[5]); cap = atof(argv[6]); rows0 = atoi(argv[7]); rows1 = atoi(argv[8]); }
    const bool use_sinks = getenv("SINKS") && atoi(getenv("SINKS"));
    const int ns = getenv("SPLITS") ? atoi(getenv("SPLITS")) : 1;
    if (getenv("KVQ")) return run_kvq(n_head, n_head_kv, dd, bs, window, cap, rows0, rows1, ns, getenv("MT") ? atoi(getenv("MT")) : 2);
    char err[256];
    qr_backend *cpu; qr_backend_cpu_params cp = {.n_threads = 1, .force_scalar = true};
    qr_backend_cpu_create(&cp, &cpu, err, sizeof err);
    /* sequence 0 holds len positions, sequence 1 the first len1 of the same blocks (its own block table row) */
    const int len = getenv("LEN") ? atoi(getenv("LEN")) : 150, len1 = len / 2 + 3;
    const int max_blocks = (len + bs - 1) / bs + 1, n_blocks = max_blocks + 2;
    qr_kv_desc d = {.n_layer = 2, .n_blocks = n_blocks, .block_size = bs, .k_dim = n_head_kv * dd, .v_dim = n_head_kv * dd, .type_k = QR_TYPE_F16, .type_v = QR_TYPE_F16};
    qr_kv_storage *kv = cpu->ops->kv_alloc(cpu, &d, err, sizeof err);
    std::vector<int32_t> bt(2 * max_blocks);
    for (int b = 0; b < max_blocks; b++) bt[b] = bt[max_blocks + b] = (max_blocks - 1 - b + 1) % n_blocks;
    std::vector<int32_t> tok(len, 0), pos(len), seq(len, 0), slot(len);
    for (int p = 0; p < len; p++) pos[p] = p, slot[p] = bt[p / bs] * bs + p % bs;
    qr_batch_plan plan = {.n_tokens = len, .tokens = tok.data(), .pos = pos.data(), .seq = seq.data(), .kv_slot = slot.data(), .n_seqs = 1, .max_blocks = max_blocks, .block_table = bt.data()};
    cpu->ops->set_batch(cpu, &plan, err, sizeof err);
    std::vector<float> k((size_t)len * d.k_dim), v((size_t)len * d.v_dim);
    for (auto &x : k) x = 1.5f * frand(); for (auto &x : v) x = frand();
    cpu->ops->kv_store(cpu, kv, 1, k.data(), v.data());
    /* the pass: the last rows0 positions of sequence 0, then the last rows1 of sequence 1 */
    const int rows = rows0 + rows1;
    std::vector<int32_t> dpos(rows), dseq(rows), dtok(rows, 0), dslot(rows);
    for (int r = 0; r < rows0; r++) dpos[r] = len - rows0 + r, dseq[r] = 0;
    for (int r = 0; r < rows1; r++) dpos[rows0 + r] = len1 - rows1 + r, dseq[rows0 + r] = 1;
    for (int r = 0; r < rows; r++) dslot[r] = bt[dpos[r] / bs] * bs + dpos[r] % bs;
    qr_batch_plan dplan = {.n_tokens = rows, .tokens = dtok.data(), .pos = dpos.data(), .seq = dseq.data(), .kv_slot = dslot.data(), .n_seqs = 2, .max_blocks = max_blocks, .block_table = bt.data()};
    if (cpu->ops->set_batch(cpu, &dplan, err, sizeof err) != QR_OK) { fprintf(stderr, "set_batch: %s\n", err); return 1; }
    std::vector<float> q((size_t)rows * n_head * dd), oc((size_t)rows * n_head * dd), og((size_t)rows * n_head * dd, NAN);
    for (auto &x : q) x = 1.5f * frand();
    qr_attn_params ap = {.n_head = n_head, .n_head_kv = n_head_kv, .head_dim_k = dd, .head_dim_v = dd, .scale = 1.0f / sqrtf((float)dd), .softcap = cap, .window = window};
    std::vector<float> sinks(n_head);
    for (auto &x : sinks) x = 2.0f * frand();
    qr_weight sw = {.name = "sinks", .type = QR_TYPE_F32, .ne = {n_head, 1, 1, 1}, .row_bytes = (size_t)n_head * 4, .host = sinks.data()};
    if (use_sinks) ap.sinks = &sw;
    cpu->ops->attention(cpu, kv, 1, q.data(), &ap, oc.data());
    const size_t slots = (size_t)n_blocks * bs;
    std::vector<__half> kc(slots * d.k_dim), vc(slots * d.v_dim);
    for (int r = 0; r < len; r++) for (int i = 0; i < d.k_dim; i++) kc[(size_t)slot[r] * d.k_dim + i] = __float2half_rn(k[(size_t)r * d.k_dim + i]);
    for (int r = 0; r < len; r++) for (int i = 0; i < d.v_dim; i++) vc[(size_t)slot[r] * d.v_dim + i] = __float2half_rn(v[(size_t)r * d.v_dim + i]);
    cuda_attn_args a = {};
    a.q = q.data(); a.k_cache = kc.data(); a.v_cache = vc.data(); a.f16 = true; a.pos = dpos.data(); a.seq = dseq.data(); a.block_table = bt.data();
    a.max_blocks = max_blocks; a.block_size = bs; a.n_tok = rows; a.n_head = n_head; a.n_head_kv = n_head_kv; a.dk = dd; a.dv = dd;
    a.scale = ap.scale; a.softcap = cap; a.window = window; a.n_splits = 1; a.out = og.data();
    a.sinks = use_sinks ? sinks.data() : NULL;
    const int mt = getenv("MT") ? atoi(getenv("MT")) : 2, group = n_head / n_head_kv, bm = qr_cuda_attn_flash_rows(dd, mt);
    const int n_tiles = qr_cuda_attn_flash_tiles(dseq.data(), rows, group, bm, NULL, 0);
    std::vector<int32_t> tiles(4 * n_tiles);
    if (qr_cuda_attn_flash_tiles(dseq.data(), rows, group, bm, tiles.data(), n_tiles) != n_tiles) { fprintf(stderr, "tile count changed\n"); return 1; }
    const int stages = getenv("STAGES") ? atoi(getenv("STAGES")) : 3;
    bool ran = false; /* the form of (head size, tile rows) with these stages, else the first such form */
#define FORM(D, BN, MT, ST) if (!ran && dd == D && bm == fa_cfg<D, BN, MT, ST>::BM && ST == stages) run_grid<D, BN, MT, ST>(a, tiles.data(), n_tiles, ns), ran = true;
    FA_FORMS(FORM)
#undef FORM
#define FORM(D, BN, MT, ST) if (!ran && dd == D && bm == fa_cfg<D, BN, MT, ST>::BM) run_grid<D, BN, MT, ST>(a, tiles.data(), n_tiles, ns), ran = true;
    FA_FORMS(FORM)
#undef FORM
    double mx = 0, mw = 0;
    for (size_t i = 0; i < oc.size(); i++) { double e = fabs(og[i] - oc[i]); if (!(e <= mx)) mx = e; mw = fmax(mw, fabs(oc[i])); }
    printf("flash attention h%d/%d d%d bs%d win%d cap%g rows %d+%d len%d tiles%d splits%d mt%d%s: max err %.3g (rel to max %.3g)\n", n_head, n_head_kv, dd, bs, window, cap, rows0, rows1, len, n_tiles, ns, bm / 64, use_sinks ? " sinks" : "", mx, mx / mw);
    return mx / mw <= 2e-3 ? 0 : 1;
}
