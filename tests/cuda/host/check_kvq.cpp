/* check_kvq.cpp — runs the quantized KV cache kernels of src/backend/cuda/kv_quant.cu on the host (a CTA = 128
 * std::threads, barriers for __syncthreads / __syncwarp and the warp shuffles):
 *   1. the store (rotation + quantization) against the CPU's own steps (qr_cpu_fwht, then the CPU backend's Q8_0
 *      activation quantizer or the reference Q4_0 quantizer): every code and scale equal;
 *   2. the transform kernel (the flash path's rotation of q) against qr_cpu_fwht, value for value;
 *   3. attention over that cache (the decode kernel, which rotates q and its output itself, with key splits) against a double-precision attention over the same dequantized rows and the same Q8_0-rounded
 *      q (max error <= 1e-4 of the largest output), and against the CPU backend's attention over its own cache of the
 *      same type (llama.cpp's flash-attention numerics: <= 1e-4); and the output's fused Q8_0 quantization (for the
 *      output projection) against the CPU's activation quantizer on that output, block for block.
 * Built and run by tests/cuda/host/run.sh.
 *   check_kvq [n_head n_head_kv d block_size window softcap n_splits n_rows]   (KVQ=q8|q4, LEN=context, SINKS=1)
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
#undef __launch_bounds__
#define __launch_bounds__(...)
inline void __syncwarp(unsigned = 0xffffffffu) { g_warp_bar[threadIdx.x / 32]->arrive_and_wait(); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline unsigned atomicAdd(unsigned *p, unsigned v) { return std::atomic_ref<unsigned>(*p).fetch_add(v); }
template <class T> static inline T __ldcg(const T *p) { return *p; }
#define QR_CUDA_DEV_SKIP_BLOCK
#include "backend/cuda/cuda_dev.cuh"
float __expf(float x) { return expf(x); }
using std::min; using std::max;
#include <algorithm>
#include <vector>
#include "backend/cuda/attention_dev.cuh"
#include "backend/cuda/kv_quant.cuh"
#include "kvq_kernel.inc" /* the kernels of src/backend/cuda/kv_quant.cu, extracted by run.sh */
extern "C" {
#include "backend/backend.h"
#include "backend/cpu/cpu.h"
#include "quant/quant.h"
#include "util/util.h"
}
static uint64_t rs = 4242;
static float frand() { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (float)((rs >> 11) * 0x1p-53 * 2 - 1); }

/* The GPU store of rows x[n_tok][dim] into cache slots (kvq_store_kernel as qr_cuda_kvq_store launches it). */
static void gpu_store(const float *x, int n_tok, int dim, int rot, const int32_t *slots, int bs, uint8_t *cache, int kvq) {
    const int C = rot ? rot : 32;
    const unsigned grid = (unsigned)(((int64_t)n_tok * (dim / C) * 32 + 127) / 128);
    host_run_grid(grid, 1, 128, [&] {
        switch (C) {
        case 32: kvq_store_kernel<1>(x, n_tok, dim, rot != 0, slots, bs, cache, kvq); break;
        case 64: kvq_store_kernel<2>(x, n_tok, dim, true, slots, bs, cache, kvq); break;
        case 128: kvq_store_kernel<4>(x, n_tok, dim, true, slots, bs, cache, kvq); break;
        default: kvq_store_kernel<8>(x, n_tok, dim, true, slots, bs, cache, kvq); break;
        }
    });
}
static void gpu_fwht(const float *x, float *y, int64_t rows, int n, int chunk) {
    const int64_t chunks = rows * (n / chunk);
    const unsigned grid = (unsigned)((chunks * 32 + 127) / 128);
    host_run_grid(grid, 1, 128, [&] {
        switch (chunk) {
        case 64: fwht_kernel<2>(x, y, chunks); break;
        case 128: fwht_kernel<4>(x, y, chunks); break;
        default: fwht_kernel<8>(x, y, chunks); break;
        }
    });
}
/* Value i of slot s's row, dequantized from the GPU layout. */
static float gpu_value(const uint8_t *cache, int kvq, int n, int bs, int64_t s, int i) {
    const int code_row = kvq == CUDA_KVQ_Q8 ? n : n / 2;
    const uint8_t *b = cache + (s / bs) * (int64_t)bs * (code_row + n / 16);
    const uint8_t *codes = b + (s % bs) * code_row;
    __half h;
    memcpy(&h, b + (int64_t)bs * code_row + ((s % bs) * (n / 32) + i / 32) * 2, 2);
    const float d = __half2float(h);
    if (kvq == CUDA_KVQ_Q8) return d * (float)(int8_t)codes[i];
    return d * (float)((int)((codes[i / 2] >> (4 * (i & 1))) & 15) - 8);
}

template <int D, int G, int KQ>
static void run_attn(const cuda_attn_args &a, unsigned *counters) {
    const int group = a.n_head / a.n_head_kv, n_gtiles = (group + G - 1) / G;
    host_run_grid((unsigned)(a.n_tok * a.n_head_kv * n_gtiles), (unsigned)a.n_splits, 128,
                  [&] { attn_kvq_kernel<D, G, KQ>(a, n_gtiles, counters); });
}

int main(int argc, char **argv) {
    int n_head = 32, n_head_kv = 8, dd = 128, bs = 16, window = 0, splits = 3, rows = 1;
    float cap = 0;
    if (argc > 1) { n_head = atoi(argv[1]); n_head_kv = atoi(argv[2]); dd = atoi(argv[3]); bs = atoi(argv[4]); window = atoi(argv[5]); cap = atof(argv[6]); splits = atoi(argv[7]); rows = atoi(argv[8]); }
    const int kvq = getenv("KVQ") && !strcmp(getenv("KVQ"), "q4") ? CUDA_KVQ_Q4 : CUDA_KVQ_Q8;
    const qr_type qt = kvq == CUDA_KVQ_Q8 ? QR_TYPE_Q8_0 : QR_TYPE_Q4_0;
    int rot_k = 64; /* the context's rule (kv_rotation): K the largest power of two >= 64 dividing d, V 64 */
    while (dd % (2 * rot_k) == 0) rot_k *= 2;
    const int rot_v = 64;
    char err[256];
    qr_backend *cpu; qr_backend_cpu_params cp = {.n_threads = 1, .force_scalar = true};
    qr_backend_cpu_create(&cp, &cpu, err, sizeof err);
    const int len = getenv("LEN") ? atoi(getenv("LEN")) : 300, max_blocks = (len + bs - 1) / bs + 1, n_blocks = max_blocks + 2;
    const int n = n_head_kv * dd;
    qr_kv_desc d = {.n_layer = 2, .n_blocks = n_blocks, .block_size = bs, .k_dim = n, .v_dim = n, .type_k = qt, .type_v = qt,
                    .rot_k = rot_k, .rot_v = rot_v};
    qr_kv_storage *kv = cpu->ops->kv_alloc(cpu, &d, err, sizeof err);
    if (!kv) { fprintf(stderr, "kv_alloc: %s\n", err); return 1; }
    std::vector<int32_t> bt(max_blocks);
    for (int b = 0; b < max_blocks; b++) bt[b] = (max_blocks - 1 - b + 1) % n_blocks;
    std::vector<int32_t> tok(len, 0), pos(len), seq(len, 0), slot(len);
    for (int p = 0; p < len; p++) pos[p] = p, slot[p] = bt[p / bs] * bs + p % bs;
    qr_batch_plan plan = {.n_tokens = len, .tokens = tok.data(), .pos = pos.data(), .seq = seq.data(), .kv_slot = slot.data(), .n_seqs = 1, .max_blocks = max_blocks, .block_table = bt.data()};
    cpu->ops->set_batch(cpu, &plan, err, sizeof err);
    std::vector<float> k((size_t)len * n), v((size_t)len * n);
    for (auto &x : k) x = 1.5f * frand(); for (auto &x : v) x = frand();
    for (int i = 0; i < 3; i++) k[(size_t)i * 37 % k.size()] = 9.0f; /* outliers: what the rotation spreads */
    cpu->ops->kv_store(cpu, kv, 1, k.data(), v.data());
    /* 1. the store, code for code against the CPU's steps */
    const size_t bytes = (size_t)n_blocks * bs * qr_type_row_size(qt, n);
    std::vector<uint8_t> kc(bytes, 0), vc(bytes, 0);
    gpu_store(k.data(), len, n, rot_k, slot.data(), bs, kc.data(), kvq);
    gpu_store(v.data(), len, n, rot_v, slot.data(), bs, vc.data(), kvq);
    int bad = 0;
    for (int pass = 0; pass < 2; pass++) {
        const std::vector<float> &x = pass ? v : k;
        const int rot = pass ? rot_v : rot_k;
        const uint8_t *cache = pass ? vc.data() : kc.data();
        std::vector<float> row(n), deq(n);
        std::vector<uint8_t> blk(qr_type_row_size(qt, n));
        for (int r = 0; r < len; r++) {
            memcpy(row.data(), x.data() + (size_t)r * n, sizeof(float) * n);
            qr_cpu_fwht(row.data(), n, rot);
            const qr_from_float_fn act = kvq == CUDA_KVQ_Q8 ? qr_cpu_act_quantizer(qt) : NULL;
            (act ? act : qr_quant_traits_ref(qt)->from_float)(row.data(), blk.data(), n);
            qr_quant_traits_ref(qt)->to_float(blk.data(), deq.data(), n);
            for (int i = 0; i < n; i++) {
                const float g = gpu_value(cache, kvq, n, bs, slot[r], i);
                if (memcmp(&g, &deq[i], 4) && bad++ < 5)
                    fprintf(stderr, "%s row %d value %d: gpu %.9g cpu %.9g\n", pass ? "V" : "K", r, i, g, deq[i]);
            }
        }
    }
    /* 2. attention: the last `rows` positions */
    std::vector<int32_t> dpos(rows), dseq(rows, 0), dtok(rows, 0), dslot(rows);
    for (int r = 0; r < rows; r++) dpos[r] = len - rows + r, dslot[r] = slot[dpos[r]];
    qr_batch_plan dplan = {.n_tokens = rows, .tokens = dtok.data(), .pos = dpos.data(), .seq = dseq.data(), .kv_slot = dslot.data(), .n_seqs = 1, .max_blocks = max_blocks, .block_table = bt.data()};
    cpu->ops->set_batch(cpu, &dplan, err, sizeof err);
    std::vector<float> q((size_t)rows * n_head * dd), qr(q.size()), oc(q.size()), og(q.size(), NAN);
    for (auto &x : q) x = 1.5f * frand();
    qr_attn_params ap = {.n_head = n_head, .n_head_kv = n_head_kv, .head_dim_k = dd, .head_dim_v = dd, .scale = 1.0f / sqrtf((float)dd), .softcap = cap, .window = window};
    std::vector<float> sinks(n_head);
    for (auto &x : sinks) x = 2.0f * frand();
    qr_weight sw = {.name = "sinks", .type = QR_TYPE_F32, .ne = {n_head, 1, 1, 1}, .row_bytes = (size_t)n_head * 4, .host = sinks.data()};
    const bool use_sinks = getenv("SINKS") && atoi(getenv("SINKS"));
    if (use_sinks) ap.sinks = &sw;
    cpu->ops->attention(cpu, kv, 1, q.data(), &ap, oc.data());
    /* the transform kernel (the flash path's q): every value as the CPU's */
    gpu_fwht(q.data(), qr.data(), (int64_t)rows * n_head, dd, rot_k);
    for (int64_t h = 0; h < (int64_t)rows * n_head; h++) {
        std::vector<float> rq(q.begin() + h * dd, q.begin() + (h + 1) * dd);
        qr_cpu_fwht(rq.data(), dd, rot_k);
        if (memcmp(rq.data(), &qr[h * dd], sizeof(float) * dd) && bad++ < 5) fprintf(stderr, "fwht of q row %ld differs\n", (long)h);
    }
    std::vector<float> partial((size_t)rows * n_head * splits * dd), stats((size_t)rows * n_head * splits * 2);
    cuda_attn_args a = {};
    a.q = q.data(); a.k_cache = kc.data(); a.v_cache = vc.data(); a.kvq = kvq; a.rot_k = rot_k; a.rot_v = rot_v; a.pos = dpos.data(); a.seq = dseq.data(); a.block_table = bt.data();
    a.max_blocks = max_blocks; a.block_size = bs; a.n_tok = rows; a.n_head = n_head; a.n_head_kv = n_head_kv; a.dk = dd; a.dv = dd;
    a.scale = ap.scale; a.softcap = cap; a.window = window; a.n_splits = splits; a.partial = partial.data(); a.stats = stats.data(); a.out = og.data();
    a.sinks = use_sinks ? sinks.data() : NULL;
    /* the output also quantized for the next mat-vec (Q8_0 blocks of 32, the attention's fused quantization) */
    const size_t nq = (size_t)rows * n_head * dd;
    std::vector<int8_t> q8(nq);
    std::vector<float> q8d(nq / 32), q8s(nq / 32);
    std::vector<int16_t> q8g(nq / 16);
    a.q8_kind = 0, a.q8 = q8.data(), a.q8d = q8d.data(), a.q8s = q8s.data(), a.q8g = q8g.data();
    std::vector<unsigned> counters(rows * n_head, 0u);
    const bool g4 = dd == 256 || n_head / n_head_kv <= 4;
    for (int rep = 0; rep < 2; rep++) { /* twice: the counters must be back at zero for a second launch */
#define RUN(KQ)                                                                                          \
    if (dd == 64) g4 ? run_attn<64, 4, KQ>(a, counters.data()) : run_attn<64, 8, KQ>(a, counters.data()); \
    else if (dd == 128) g4 ? run_attn<128, 4, KQ>(a, counters.data()) : run_attn<128, 8, KQ>(a, counters.data()); \
    else run_attn<256, 4, KQ>(a, counters.data());
        if (kvq == CUDA_KVQ_Q8) { RUN(CUDA_KVQ_Q8) } else { RUN(CUDA_KVQ_Q4) }
#undef RUN
        for (unsigned c : counters)
            if (c) { fprintf(stderr, "a split counter was left at %u\n", c); return 1; }
    }
    /* the double-precision attention over the GPU cache's values, q rotated and rounded to Q8_0 by the CPU's
     * activation quantizer (as the kernel and the CPU's flash-attention path take it); output rotated back */
    std::vector<float> od(q.size()), qq(qr.size());
    {
        std::vector<uint8_t> qb(qr_type_row_size(QR_TYPE_Q8_0, dd));
        for (int64_t h = 0; h < (int64_t)rows * n_head; h++) {
            std::vector<float> rq(qr.begin() + h * dd, qr.begin() + (h + 1) * dd);
            qr_cpu_act_quantizer(QR_TYPE_Q8_0)(rq.data(), qb.data(), dd);
            qr_quant_traits_ref(QR_TYPE_Q8_0)->to_float(qb.data(), &qq[h * dd], dd);
        }
    }
    const int group = n_head / n_head_kv;
    for (int r = 0; r < rows; r++)
        for (int h = 0; h < n_head; h++) {
            const int kvh = h / group, p1 = dpos[r], p0 = window > 0 ? std::max(0, p1 - window + 1) : 0;
            std::vector<double> s(p1 - p0 + 1);
            double mx = -INFINITY;
            for (int p = p0; p <= p1; p++) {
                double dot = 0;
                for (int i = 0; i < dd; i++) dot += (double)qq[((size_t)r * n_head + h) * dd + i] * gpu_value(kc.data(), kvq, n, bs, slot[p], kvh * dd + i);
                if (cap > 0) dot = cap * tanh(dot / cap);
                s[p - p0] = dot * ap.scale;
                mx = std::max(mx, s[p - p0]);
            }
            if (use_sinks) mx = std::max(mx, (double)sinks[h]);
            double sum = use_sinks ? exp(sinks[h] - mx) : 0;
            for (auto &x : s) sum += (x = exp(x - mx));
            std::vector<float> o(dd);
            for (int i = 0; i < dd; i++) {
                double acc = 0;
                for (int p = p0; p <= p1; p++) acc += s[p - p0] * gpu_value(vc.data(), kvq, n, bs, slot[p], kvh * dd + i);
                o[i] = (float)(acc / sum);
            }
            qr_cpu_fwht(o.data(), dd, rot_v);
            memcpy(&od[((size_t)r * n_head + h) * dd], o.data(), sizeof(float) * dd);
        }
    { /* the fused quantization of the output: the CPU's activation quantizer on the same output */
        std::vector<uint8_t> ob(qr_type_row_size(QR_TYPE_Q8_0, (int64_t)nq));
        qr_cpu_act_quantizer(QR_TYPE_Q8_0)(og.data(), ob.data(), (int64_t)nq);
        const size_t bb = qr_type_row_size(QR_TYPE_Q8_0, 32);
        for (size_t b = 0; b < nq / 32; b++) {
            __half h;
            memcpy(&h, ob.data() + b * bb, 2);
            if ((__half2float(h) != q8d[b] || memcmp(ob.data() + b * bb + 2, q8.data() + b * 32, 32)) && bad++ < 5)
                fprintf(stderr, "output block %zu: the fused Q8_0 quantization differs\n", b);
        }
    }
    double ed = 0, ec = 0, mw = 0;
    for (size_t i = 0; i < og.size(); i++) {
        const double e1 = fabs(og[i] - od[i]), e2 = fabs(og[i] - oc[i]);
        if (!(e1 <= ed)) ed = e1;
        if (!(e2 <= ec)) ec = e2;
        mw = fmax(mw, fabs(od[i]));
    }
    printf("kvq %s h%d/%d d%d bs%d win%d cap%g splits%d rows%d len%d%s rot %d/%d: store %s, attention max err %.3g "
           "(double ref), %.3g (cpu)\n", kvq == CUDA_KVQ_Q8 ? "q8_0" : "q4_0", n_head, n_head_kv, dd, bs, window, cap,
           splits, rows, len, use_sinks ? " sinks" : "", rot_k, rot_v, bad ? "DIFFERS" : "equal", ed / mw, ec / mw);
    return !bad && ed / mw <= 1e-4 && ec / mw <= 1e-4 ? 0 : 1;
}
