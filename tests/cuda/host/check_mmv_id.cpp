/* check_mmv_id.cpp — runs the decode expert mat-vec kernels of src/backend/cuda/matmul_q.cu on the host (a CTA =
 * 128 std::threads, warp shuffles through simt.h) and checks that their alternative forms give the same bits:
 *   - gate + up + SwiGLU: the grid kernel (matvec_id_kernel, one warp a matrix row) against the persistent one
 *     (matvec_id_glu_persist_kernel, a few CTAs whose warps walk (slot, row) items across slot boundaries);
 *   - down + combine: the plain kernel (matvec_id_combine_kernel) against the register-pipelined one for two
 *     slots a token (matvec_id_combine_pipe_kernel<T, 2>) and the one with every slot's row in flight for small
 *     experts (matvec_id_combine_wide_kernel), with a bias, the residual add and an invalid id;
 * and both against the CPU oracle (vec_dot on the CPU's Q8_0 activation rows, Q8_K for the K-quants Q4_K / Q5_K; a
 * float tolerance, as the sum order differs). Built and run by tests/cuda/host/run.sh.
 *   check_mmv_id [k n_out]
 */
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <math.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <algorithm>
#include <vector>
#include "simt.h"
#define __dp4a host_dp4a_unused /* kernel_host.h's stand-in returns c: the mat-vec needs the real one */
#include "kernel_host.h"
#undef __dp4a
static inline int __dp4a(int a, int b, int c) {
    for (int i = 0; i < 4; i++) c += (int)(int8_t)(a >> (8 * i)) * (int)(int8_t)(b >> (8 * i));
    return c;
}
static inline uint32_t __vsub4(uint32_t a, uint32_t b) { /* per byte, modulo 256 */
    uint32_t r = 0;
    for (int i = 0; i < 4; i++) r |= (uint32_t)(uint8_t)((a >> (8 * i)) - (b >> (8 * i))) << (8 * i);
    return r;
}
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
template <class T> static inline T __ldcg(const T *p) { return *p; }
extern "C" {
#include "quant/quant.h"
#include "util/util.h"
}
#include "backend/cuda/quant_dev.cuh"
#include "backend/cuda/ew_dev.cuh"
#undef __launch_bounds__
#define __launch_bounds__(...)
#undef __shared__
#define __shared__ static /* CTAs run one after another: a function's static array is the CTA's */
#include "pd.inc"         /* qr_cuda_plane_desc of src/backend/cuda/dequant.cu, extracted by run.sh */
#include "mmv_id_kernel.inc" /* the expert mat-vec kernels of src/backend/cuda/matmul_q.cu, extracted by run.sh */

static uint64_t rs = 77;
static float frand() { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (float)((rs >> 11) * 0x1p-53 * 2 - 1); }

static void run_grid(unsigned gx, unsigned gy, const std::function<void()> &fn) { host_run_grid(gx, gy, MMV_THREADS, fn); }

/* Weights in the backend's planes; activations as the GPU's quantizer lays them out (codes, fp16-rounded d,
 * d * sum, 16-sums) next to the CPU's Q8_0 rows they come from. */
struct planes {
    std::vector<uint8_t> raw, p[3];
    cuda_wview v{};
};
static planes make_w(qr_type type, int64_t rows, int64_t k) {
    const qr_quant_traits *tr = qr_quant_traits_ref(type);
    const cuda_plane_desc pd = qr_cuda_plane_desc(type);
    const size_t rb = qr_type_row_size(type, k);
    const int64_t nb = k / pd.block;
    std::vector<float> src((size_t)k);
    planes w;
    w.raw.resize((size_t)rows * rb);
    for (int64_t r = 0; r < rows; r++) {
        for (auto &v : src) v = frand();
        tr->from_float(src.data(), &w.raw[r * rb], k);
    }
    for (int p = 0; p < pd.n_planes; p++) {
        w.p[p].resize((size_t)(rows * nb) * pd.size[p]);
        for (int64_t b = 0; b < rows * nb; b++) memcpy(&w.p[p][b * pd.size[p]], &w.raw[b * pd.bytes + pd.off[p]], pd.size[p]);
    }
    w.v.type = type, w.v.k = k, w.v.n = rows, w.v.nb = nb, w.v.p0 = w.p[0].data(), w.v.p1 = w.p[1].data();
    w.v.p2 = pd.n_planes > 2 ? w.p[2].data() : NULL; /* Q6_K: the fp16 scale plane */
    return w;
}
struct acts {
    qr_type type;            /* Q8_0 (the 32-value weight formats) or Q8_K (the K-quants) */
    std::vector<uint8_t> xq; /* the CPU's rows of that type */
    std::vector<int8_t> q;
    std::vector<float> d, s;
    std::vector<int16_t> g;
    cuda_xview v{};
};
static acts make_x(int rows, int64_t k, qr_type xtype) {
    const qr_quant_traits *xt = qr_quant_traits_ref(xtype);
    const size_t xrb = qr_type_row_size(xtype, k);
    const int64_t nb = k / (xtype == QR_TYPE_Q8_K ? 256 : 32);
    acts a;
    a.type = xtype;
    a.xq.resize((size_t)rows * xrb), a.q.resize((size_t)rows * k), a.d.resize((size_t)rows * nb), a.s.resize(a.d.size());
    a.g.resize((size_t)rows * (k / 16));
    std::vector<float> x((size_t)k);
    for (int r = 0; r < rows; r++) {
        for (auto &v : x) v = frand();
        xt->from_float(x.data(), &a.xq[(size_t)r * xrb], k);
        if (xtype == QR_TYPE_Q8_K) { /* qr_block_q8_K: d (f32), qs[256], bsums[16]: the GPU view's d, codes, 16-sums */
            for (int64_t b = 0; b < nb; b++) {
                qr_block_q8_K blk;
                memcpy(&blk, &a.xq[(size_t)r * xrb + b * sizeof blk], sizeof blk);
                a.d[(size_t)r * nb + b] = blk.d;
                memcpy(&a.q[(size_t)r * k + b * 256], blk.qs, 256);
                memcpy(&a.g[(size_t)r * (k / 16) + b * 16], blk.bsums, sizeof blk.bsums);
            }
            continue;
        }
        for (int64_t b = 0; b < nb; b++) { /* qr_block_q8_0: d (fp16), qs[32] */
            const uint8_t *blk = &a.xq[(size_t)r * xrb + b * 34];
            uint16_t dh;
            memcpy(&dh, blk, 2);
            const float d = qr_fp16_to_fp32(dh);
            int s32 = 0;
            for (int h = 0; h < 2; h++) {
                int s16 = 0;
                for (int i = 0; i < 16; i++) s16 += (int8_t)blk[2 + 16 * h + i];
                a.g[(size_t)r * (k / 16) + 2 * b + h] = (int16_t)s16;
                s32 += s16;
            }
            memcpy(&a.q[(size_t)r * k + b * 32], blk + 2, 32);
            a.d[(size_t)r * nb + b] = d;
            a.s[(size_t)r * nb + b] = qr_fp16_to_fp32(qr_fp32_to_fp16((float)s32 * d));
        }
    }
    a.v.q = a.q.data(), a.v.d = a.d.data(), a.v.s = a.s.data(), a.v.g = a.g.data(), a.v.k = (int32_t)k;
    return a;
}
static float cpu_dot(qr_type type, const planes &w, int64_t row, const acts &x, int xr, int64_t k) {
    float r;
    qr_quant_traits_ref(type)->vec_dot((int)k, &r, &w.raw[(size_t)row * qr_type_row_size(type, k)],
                                       &x.xq[(size_t)xr * qr_type_row_size(x.type, k)]);
    return r;
}
/* bits equal, counting the differing outputs */
static int64_t differ(const std::vector<float> &a, const std::vector<float> &b) {
    int64_t n = 0;
    for (size_t i = 0; i < a.size(); i++) n += memcmp(&a[i], &b[i], 4) != 0;
    return n;
}
static double rel(float got, double ref) { return fabs((double)got - ref) / (1.0 + fabs(ref)); }

/* n_tok tokens, n_used slots each, over ne experts of n_out rows; the last slot of the last token names expert ne
 * (out of range: its rows are skipped, as the kernels' validity check says). */
template <class T> static int test(qr_type type, int64_t k, int64_t n_out, int ne, int n_tok, int n_used = 2) {
    const int n_slots = n_tok * n_used;
    std::vector<int32_t> ids((size_t)n_slots);
    for (int s = 0; s < n_slots; s++) ids[s] = (s * 5 + 1) % ne;
    ids[n_slots - 1] = ne;
    int bad = 0;
    /* gate + up + SwiGLU: x row t feeds slots t * n_used .. */
    {
        planes wg = make_w(type, ne * n_out, k), wu = make_w(type, ne * n_out, k);
        acts x = make_x(n_tok, k, T::ACT == 1 ? QR_TYPE_Q8_K : QR_TYPE_Q8_0);
        qr_cuda_mv_id_args a{};
        a.w[0] = wg.v, a.w[1] = wu.v, a.n_out = n_out, a.ids = ids.data(), a.n_used = n_used, a.x_per_slot = 0;
        a.act = QR_GLU_SWIGLU;
        std::vector<float> y0((size_t)(n_slots * n_out), NAN), y1 = y0;
        a.y = y0.data();
        const cuda_xview xv = x.v;
        run_grid((unsigned)((n_out + 1) / 2), (unsigned)n_slots, [&] { matvec_id_kernel<T, 1>(a, xv, 1); });
        a.y = y1.data();
        /* 3 CTAs of 4 warps: each warp walks many items, across the slots */
        run_grid(3, 1, [&] { matvec_id_glu_persist_kernel<T>(a, xv, n_slots); });
        std::vector<float> y2 = y0;
        std::fill(y2.begin(), y2.end(), NAN);
        a.y = y2.data();
        run_grid(2, 1, [&] { matvec_id_glu_persist_kernel<T>(a, xv, n_slots); }); /* fewer warps: more items each */
        const int64_t nd = differ(y0, y1) + differ(y0, y2);
        double worst = 0;
        int64_t unwritten = 0;
        for (int s = 0; s < n_slots; s++)
            for (int64_t i = 0; i < n_out; i++) {
                const float got = y0[(size_t)s * n_out + i];
                if (ids[s] >= ne) {
                    unwritten += got == got; /* NaN: untouched */
                    continue;
                }
                const int64_t row = (int64_t)ids[s] * n_out + i;
                const double g = cpu_dot(type, wg, row, x, s / n_used, k), u = cpu_dot(type, wu, row, x, s / n_used, k);
                const double e = rel(got, g / (1.0 + exp(-g)) * u);
                if (!(e <= worst)) worst = e;
            }
        const bool ok = nd == 0 && worst <= 1e-4 && unwritten == 0;
        printf("gate/up %-5s k %ld n_out %ld: persistent (3, 2 CTAs) vs grid: %ld of %ld differ; vs the CPU worst rel %.2g %s\n",
               qr_type_name(type), (long)k, (long)n_out, (long)nd, (long)y0.size(), worst, ok ? "ok" : "FAIL");
        bad += !ok;
    }
    /* down + combine (+ bias, + add): x row s is slot s's activation */
    {
        planes wd = make_w(type, ne * n_out, k);
        acts x = make_x(n_slots, k, T::ACT == 1 ? QR_TYPE_Q8_K : QR_TYPE_Q8_0);
        std::vector<float> bias((size_t)(ne * n_out)), add((size_t)(n_tok * n_out)), wts((size_t)n_slots);
        for (auto &v : bias) v = frand();
        for (auto &v : add) v = frand();
        for (auto &v : wts) v = 0.5f + 0.5f * frand();
        qr_cuda_mv_id_args a{};
        a.w[0] = a.w[1] = wd.v, a.bias[0] = bias.data(), a.n_out = n_out, a.ids = ids.data(), a.n_used = n_used;
        a.x_per_slot = 1, a.act = -1;
        std::vector<float> y0((size_t)(n_tok * n_out), NAN), y1 = y0;
        const cuda_xview xv = x.v;
        const unsigned gx = (unsigned)((n_out + 3) / 4);
        for (int early = 0; early < 2; early++) {
            a.ids_early = early;
            a.y = y0.data();
            run_grid(gx, (unsigned)n_tok, [&] { matvec_id_combine_kernel<T>(a, xv, wts.data(), add.data()); });
            a.y = y1.data();
            const int64_t nch = wd.v.nb * T::CPB;
            const char *form = "pipelined";
            if (n_used == 2) {
                run_grid(gx, (unsigned)n_tok, [&] { matvec_id_combine_pipe_kernel<T, 2>(a, xv, wts.data(), add.data()); });
            } else if (n_used == 8 && nch <= 32) {
                form = "wide 8x1";
                run_grid(gx, (unsigned)n_tok, [&] { matvec_id_combine_wide_kernel<T, 8, 1>(a, xv, wts.data(), add.data()); });
            } else if (n_used == 6 && nch <= 64 && T::CPB == 1) {
                form = "wide 6x2";
                run_grid(gx, (unsigned)n_tok, [&] { matvec_id_combine_wide_kernel<T, 6, 2>(a, xv, wts.data(), add.data()); });
            } else {
                printf("down + combine: no second form for n_used %d k %ld\n", n_used, (long)k);
                return bad + 1;
            }
            const int64_t nd = differ(y0, y1);
            double worst = 0;
            for (int r = 0; r < n_tok; r++)
                for (int64_t i = 0; i < n_out; i++) {
                    double ref = 0;
                    for (int j = 0; j < n_used; j++) {
                        const int s = r * n_used + j;
                        const double yj = ids[s] < ne ? cpu_dot(type, wd, (int64_t)ids[s] * n_out + i, x, s, k) +
                                                            bias[(size_t)ids[s] * n_out + i]
                                                      : 0.0;
                        ref += yj * wts[s];
                    }
                    const double e = rel(y0[(size_t)r * n_out + i], ref + add[(size_t)r * n_out + i]);
                    if (!(e <= worst)) worst = e;
                }
            const bool ok = nd == 0 && worst <= 1e-4;
            printf("down + combine %-5s k %ld n_out %ld n_used %d ids_early %d: %s vs plain: %ld of %ld differ; vs the "
                   "CPU worst rel %.2g %s\n",
                   qr_type_name(type), (long)k, (long)n_out, n_used, early, form, (long)nd, (long)y0.size(), worst,
                   ok ? "ok" : "FAIL");
            bad += !ok;
        }
    }
    return bad;
}

int main(int argc, char **argv) {
    /* k 4160: 130 blocks, so the pipelined kernel's steps of 64 chunks end on a partial one */
    const int64_t k = argc > 2 ? atoll(argv[1]) : 4160, n_out = argc > 2 ? atoll(argv[2]) : 38;
    int bad = 0;
    bad += test<TQ4_0>(QR_TYPE_Q4_0, k, n_out, 3, 3);
    bad += test<TQ8_0>(QR_TYPE_Q8_0, k, n_out, 4, 2);
    /* the K-quants (Q8_K activations): k 2304, 9 blocks of 8 chunks, so a lane's last step of 64 chunks is partial */
    bad += test<TQ4_K>(QR_TYPE_Q4_K, 2304, n_out, 3, 3);
    bad += test<TQ5_K>(QR_TYPE_Q5_K, 2304, n_out, 3, 2);
    /* small experts, every slot's row in flight (matvec_id_combine_wide_kernel): qwen3moe's k 768 (24 K-quant chunks,
     * 8 slots), deepseek2-lite's 1408 (44 Q8_0 chunks, 6 slots) */
    bad += test<TQ4_K>(QR_TYPE_Q4_K, 768, n_out, 11, 2, 8);
    bad += test<TQ6_K>(QR_TYPE_Q6_K, 768, n_out, 11, 2, 8);
    bad += test<TQ8_0>(QR_TYPE_Q8_0, 1408, n_out, 9, 2, 6);
    return bad != 0;
}
