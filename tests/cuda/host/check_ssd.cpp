/* check_ssd.cpp — runs the chunked (SSD) scan kernel of src/backend/cuda/ssm.cu on the host (a CTA = 256
 * std::threads, a barrier for __syncthreads) and compares y and the final state with the CPU backend's
 * recurrent scan (scalar), then runs the exact mode's recurrent scan of src/backend/cuda/exact.cu the same
 * way and requires the CPU's outputs and states bit for bit. Built and run by tests/cuda/host/run.sh.
 *   check_ssd [n_head head_dim n_group d_state rows dt_bias_center [runs]]   (runs: sequences, one contiguous
 *   run of rows each, the last one 1 row long when runs > 1: a decode row next to prefills)
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
#include "backend/cuda/cuda_dev.cuh"
static float *g_ssd_smem; /* the CTA's dynamic shared memory (CTAs run one after another) */
#include "ssd_kernel.inc"  /* softplus_dev and ssm_scan_ssd_kernel of src/backend/cuda/ssm.cu, extracted by run.sh */
#include "exact_scan_kernel.inc" /* qx_ssm_scan_kernel of src/backend/cuda/exact.cu (the exact mode's scan) */
extern "C" {
#include "util/util.h"
}

static uint64_t rs = 12345;
static float frand() { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (float)((rs >> 11) * 0x1p-53 * 2 - 1); }

static qr_weight vec(const char *name, std::vector<float> &v) {
    qr_weight w = {};
    w.name = name, w.type = QR_TYPE_F32, w.ne[0] = (int64_t)v.size(), w.ne[1] = w.ne[2] = w.ne[3] = 1;
    w.row_bytes = v.size() * 4, w.host = v.data();
    return w;
}

template <int N>
static void run_grid(float *state, const float *xbc, const float *dt, const float *dtb, const float *A, const float *D,
                     const qr_cuda_ssd_runs &runs, const qr_ssm_params &p, float *y, int *div) {
    std::vector<float> smem(ssd_cfg<N>::SMEM / 4 + 4);
    g_ssd_smem = smem.data();
    gridDim = {(unsigned)p.n_head, (unsigned)(p.head_dim / SSD_PS), (unsigned)runs.n};
    blockDim = {SSD_THREADS, 1, 1};
    for (unsigned bz = 0; bz < gridDim.z; bz++)
        for (unsigned by = 0; by < gridDim.y; by++)
            for (unsigned bx = 0; bx < gridDim.x; bx++) {
                std::barrier<> bb(SSD_THREADS);
                g_block_bar = &bb;
                std::vector<std::thread> th;
                for (unsigned t = 0; t < SSD_THREADS; t++)
                    th.emplace_back([&, t] {
                        threadIdx = {t, 0, 0};
                        blockIdx = {bx, by, bz};
                        ssm_scan_ssd_kernel<N>(state, xbc, dt, p.n_head, dtb, A, D, runs, p, y, div);
                    });
                for (auto &x : th) x.join();
            }
}

int main(int argc, char **argv) {
    int nh = 4, hp = 64, ng = 2, ns = 128, rows = 200, nr = 1;
    float dtc = -3.0f;
    if (argc > 6) nh = atoi(argv[1]), hp = atoi(argv[2]), ng = atoi(argv[3]), ns = atoi(argv[4]), rows = atoi(argv[5]), dtc = (float)atof(argv[6]);
    if (argc > 7) nr = atoi(argv[7]);
    if (nr < 1 || nr > QR_CUDA_SSD_MAX_RUNS || rows < nr) return 2;
    const int di = nh * hp, cd = di + 2 * ng * ns;
    const qr_ssm_params p = {.d_conv = 4, .d_inner = di, .d_state = ns, .n_head = nh, .head_dim = hp, .n_group = ng, .conv_dim = cd};
    char err[256];
    qr_backend *cpu;
    qr_backend_cpu_params cp = {.n_threads = 1, .force_scalar = true};
    if (qr_backend_cpu_create(&cp, &cpu, err, sizeof err) != QR_OK) { fprintf(stderr, "%s\n", err); return 2; }
    /* runs: sequence nr - 1 - i takes rows r0[i] .. (reversed ids: the state slots are not the run order) */
    qr_cuda_ssd_runs runs = {};
    runs.n = nr;
    for (int i = 0, r0 = 0; i < nr; i++) {
        const int len = nr == 1 ? rows : i == nr - 1 ? 1 : (rows - 1) / (nr - 1) + (i < (rows - 1) % (nr - 1));
        runs.seq[i] = nr - 1 - i, runs.r0[i] = r0, runs.len[i] = len;
        r0 += len;
    }
    std::vector<int32_t> tok(rows, 0), pos(rows), seq(rows, 0), slot(rows), bt(nr, 0);
    for (int i = 0; i < nr; i++)
        for (int r = runs.r0[i]; r < runs.r0[i] + runs.len[i]; r++) seq[r] = runs.seq[i];
    for (int r = 0; r < rows; r++) pos[r] = r, slot[r] = r;
    const qr_batch_plan plan = {.n_tokens = rows, .tokens = tok.data(), .pos = pos.data(), .seq = seq.data(), .kv_slot = slot.data(),
                                .n_seqs = nr, .max_blocks = 1, .block_table = bt.data()};
    if (cpu->ops->set_batch(cpu, &plan, err, sizeof err) != QR_OK) { fprintf(stderr, "set_batch: %s\n", err); return 2; }
    std::vector<float> xbc((size_t)rows * cd), dt((size_t)rows * nh), dtb(nh), A(nh), D(nh);
    for (auto &x : xbc) x = frand();
    for (auto &x : dt) x = 2.0f * frand();
    for (int h = 0; h < nh; h++) dtb[h] = dtc + 2.0f * frand(), A[h] = -4.0f + 3.5f * frand(), D[h] = 1.0f + 0.2f * frand();
    std::vector<float> s0((size_t)nr * di * ns);
    for (auto &x : s0) x = 0.1f * frand();
    std::vector<float> sc = s0, sg = s0, yc((size_t)rows * di), yg((size_t)rows * di, NAN);
    qr_weight wdtb = vec("dt_bias", dtb), wA = vec("A", A), wD = vec("D", D);
    qr_ssm_scan_args sa = {};
    sa.state = sc.data(), sa.xbc = xbc.data(), sa.dt = dt.data(), sa.dt_stride = nh;
    sa.dt_bias = &wdtb, sa.A = &wA, sa.D = &wD, sa.p = &p, sa.y = yc.data();
    cpu->ops->ssm_scan(cpu, &sa);
    int div = 0;
    if (ns == 64) run_grid<64>(sg.data(), xbc.data(), dt.data(), dtb.data(), A.data(), D.data(), runs, p, yg.data(), &div);
    else run_grid<128>(sg.data(), xbc.data(), dt.data(), dtb.data(), A.data(), D.data(), runs, p, yg.data(), &div);
    double ey = 0, my = 0, es = 0, ms = 0;
    for (size_t i = 0; i < yc.size(); i++) { double e = fabs(yg[i] - yc[i]); if (!(e <= ey)) ey = e; my = fmax(my, fabs(yc[i])); }
    for (size_t i = 0; i < sc.size(); i++) { double e = fabs(sg[i] - sc[i]); if (!(e <= es)) es = e; ms = fmax(ms, fabs(sc[i])); }
    printf("ssd scan H%d P%d G%d N%d rows %d runs %d dt bias %.0f: y max err %.3g (rel to max %.3g), state %.3g (%.3g)%s\n", nh,
           hp, ng, ns, rows, nr, dtc, ey, ey / my, es, es / fmax(ms, 1e-30), div ? " DIVERGED" : "");
    /* the exact mode's scan (a thread per (head, channel), its softplus / exp factors made on the host as
     * exact.cu makes them) must give the CPU's outputs and states bit for bit */
    std::vector<float> dtv((size_t)rows * nh), dAv((size_t)rows * nh), se = s0, ye((size_t)rows * di, NAN);
    for (int r = 0; r < rows; r++)
        for (int h = 0; h < nh; h++) {
            const float x = dt[(size_t)r * nh + h] + dtb[h], d = x > 20.0f ? x : logf(1.0f + expf(x));
            dtv[(size_t)r * nh + h] = d, dAv[(size_t)r * nh + h] = expf(d * A[h]);
        }
    int div_exact = 0;
    blockDim = {1, 1, 1};
    threadIdx = {0, 0, 0};
    for (unsigned g = 0; g < (unsigned)di; g++) {
        blockIdx = {g, 0, 0};
        qx_ssm_scan_kernel(se.data(), xbc.data(), dtv.data(), dAv.data(), D.data(), p, seq.data(), rows, ye.data(), &div_exact);
    }
    const bool exact_ok = memcmp(ye.data(), yc.data(), ye.size() * 4) == 0 && memcmp(se.data(), sc.data(), se.size() * 4) == 0;
    printf("  exact-mode scan vs the CPU: %s\n", exact_ok ? "bit for bit" : "DIFFERS");
    return ey / my <= 1e-4 && es / fmax(ms, 1e-30) <= 1e-4 && !div && exact_ok && !div_exact ? 0 : 1;
}
