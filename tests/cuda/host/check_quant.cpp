/* check_quant.cpp — the CUDA block decoders of src/backend/cuda/quant_dev.cuh compiled for the host
 * (shim.h stands in for the CUDA intrinsics) and compared with the CPU scalar oracle: the plane
 * repack, every type's deq8 (bit for bit with to_float) and its chunked dot products (with the
 * integer sums of vec_dot). No GPU needed. Built and run by tests/cuda/host/run.sh.
 */
#include "shim.h"
#include <stdio.h>
#include <stdlib.h>
#include <vector>
extern "C" {
#include "quant/quant.h"
#include "util/util.h"
}
#include "backend/cuda/quant_dev.cuh"
#include "pd.inc" /* qr_cuda_plane_desc of src/backend/cuda/dequant.cu, extracted by run.sh */

static uint64_t rs = 88172645463325252ull;
static float frand() { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (float)((rs >> 11) * 0x1p-53 * 2 - 1); }

template <class T> static int test_type(qr_type t, int64_t n, int64_t k) {
    const qr_quant_traits *tr = qr_quant_traits_ref(t);
    cuda_plane_desc pd = qr_cuda_plane_desc(t);
    size_t rb = qr_type_row_size(t, k);
    std::vector<float> src(n * k);
    for (auto &v : src) v = frand() * 2.0f;
    std::vector<uint8_t> raw(n * rb);
    for (int64_t r = 0; r < n; r++) tr->from_float(&src[r * k], &raw[r * rb], k);
    const bool isf = pd.block == 1;
    const int64_t nb = isf ? k / (t == QR_TYPE_F32 ? 4 : 8) : k / pd.block, nblocks = n * (isf ? 1 : nb);
    std::vector<uint8_t> planes[3];
    cuda_wview w{};
    w.type = t; w.k = k; w.n = n; w.nb = nb;
    if (isf) {
        planes[0] = raw;
    } else {
        for (int p = 0; p < pd.n_planes; p++) {
            planes[p].resize(nblocks * pd.size[p]);
            for (int64_t g = 0; g < nblocks; g++) memcpy(&planes[p][g * pd.size[p]], &raw[g * pd.bytes + pd.off[p]], pd.size[p]);
        }
    }
    w.p0 = planes[0].data(); w.p1 = pd.n_planes > 1 ? planes[1].data() : NULL; w.p2 = pd.n_planes > 2 ? planes[2].data() : NULL;
    int bad = 0;
    // deq8
    if constexpr (T::ACT <= 1) {
        std::vector<float> ref(k);
        for (int64_t r = 0; r < n; r++) {
            tr->to_float(&raw[r * rb], ref.data(), k);
            for (int64_t e = 0; e < k; e += 8) {
                float o[8];
                const int64_t b = e / T::BS;
                T::deq8(w, r * nb + b, (int)(e - b * T::BS), o);
                for (int i = 0; i < 8; i++)
                    if (memcmp(&o[i], &ref[e + i], 4) != 0) {
                        if (bad++ < 5) printf("  %s deq r%ld e%ld: %g vs %g\n", qr_type_name(t), (long)r, (long)(e + i), o[i], ref[e + i]);
                    }
            }
        }
    }
    // dot, 2 activation rows
    const int NR = 2;
    std::vector<float> x(NR * k);
    for (auto &v : x) v = frand();
    const qr_quant_traits *vt = qr_quant_traits_ref(tr->vec_dot_type);
    size_t xrb = qr_type_row_size(tr->vec_dot_type, k);
    std::vector<uint8_t> xq(NR * xrb);
    if (tr->vec_dot_type == QR_TYPE_F32) memcpy(xq.data(), x.data(), NR * k * 4);
    else for (int t2 = 0; t2 < NR; t2++) vt->from_float(&x[t2 * k], &xq[t2 * xrb], k);
    // xview
    std::vector<int8_t> q(NR * k); std::vector<float> d(NR * (k / 32 + 1)), s(NR * (k / 32 + 1)); std::vector<int16_t> gs(NR * (k / 16));
    cuda_xview xv{};
    xv.k = (int32_t)k;
    if (tr->vec_dot_type == QR_TYPE_Q8_0 || tr->vec_dot_type == QR_TYPE_Q8_1) {
        const bool q81 = tr->vec_dot_type == QR_TYPE_Q8_1;
        for (int t2 = 0; t2 < NR; t2++)
            for (int64_t b = 0; b < k / 32; b++) {
                const uint8_t *blk = &xq[t2 * xrb + b * (q81 ? 36 : 34)];
                uint16_t dh, sh = 0; memcpy(&dh, blk, 2); if (q81) memcpy(&sh, blk + 2, 2);
                const int8_t *qs = (const int8_t *)(blk + (q81 ? 4 : 2));
                d[t2 * (k / 32) + b] = qr_fp16_to_fp32(dh); s[t2 * (k / 32) + b] = qr_fp16_to_fp32(sh);
                for (int j = 0; j < 32; j++) q[t2 * k + b * 32 + j] = qs[j];
            }
    } else if (tr->vec_dot_type == QR_TYPE_Q8_K) {
        for (int t2 = 0; t2 < NR; t2++)
            for (int64_t b = 0; b < k / 256; b++) {
                const qr_block_q8_K *blk = (const qr_block_q8_K *)&xq[t2 * xrb + b * sizeof(qr_block_q8_K)];
                d[t2 * (k / 256) + b] = blk->d;
                for (int j = 0; j < 256; j++) q[t2 * k + b * 256 + j] = blk->qs[j];
            }
    }
    for (int t2 = 0; t2 < NR; t2++) for (int64_t j = 0; j < k / 16; j++) { int su = 0; for (int l = 0; l < 16; l++) su += q[t2 * k + j * 16 + l]; gs[t2 * (k / 16) + j] = (int16_t)su; }
    xv.q = q.data(); xv.d = d.data(); xv.s = s.data(); xv.g = gs.data(); xv.h = xq.data();
    if (tr->vec_dot_type == QR_TYPE_F32) xv.h = x.data();
    for (int64_t r = 0; r < n; r++) {
        float acc[NR] = {0, 0};
        const int nch = (int)nb * T::CPB;
        for (int c = 0; c < nch; c++) {
            typename T::W wd = T::load(w, r * nb + c / T::CPB, c % T::CPB);
            T::template dot<NR>(wd, xv, c / T::CPB, c % T::CPB, acc);
        }
        for (int t2 = 0; t2 < NR; t2++) {
            float ref;
            tr->vec_dot(k, &ref, &raw[r * rb], &xq[t2 * xrb]);
            if (fabsf(acc[t2] - ref) > 1e-5f * (1 + fabsf(ref)) * (t == QR_TYPE_F32 ? 10 : 1)) {
                if (bad++ < 5) printf("  %s dot r%ld t%d: %.7g vs %.7g\n", qr_type_name(t), (long)r, t2, acc[t2], ref);
            }
        }
    }
    printf("%-7s %s\n", qr_type_name(t), bad ? "FAIL" : "ok");
    return bad;
}

int main() {
    int bad = 0;
    bad += test_type<TQ4_0>(QR_TYPE_Q4_0, 5, 512);
    bad += test_type<TQ4_1>(QR_TYPE_Q4_1, 5, 512);
    bad += test_type<TQ5_0>(QR_TYPE_Q5_0, 5, 512);
    bad += test_type<TQ5_1>(QR_TYPE_Q5_1, 5, 512);
    bad += test_type<TQ8_0>(QR_TYPE_Q8_0, 5, 512);
    bad += test_type<TMXFP4>(QR_TYPE_MXFP4, 5, 512);
    bad += test_type<TIQ4_NL>(QR_TYPE_IQ4_NL, 5, 512);
    bad += test_type<TQ2_K>(QR_TYPE_Q2_K, 5, 512);
    bad += test_type<TQ3_K>(QR_TYPE_Q3_K, 5, 512);
    bad += test_type<TQ4_K>(QR_TYPE_Q4_K, 5, 512);
    bad += test_type<TQ5_K>(QR_TYPE_Q5_K, 5, 512);
    bad += test_type<TQ6_K>(QR_TYPE_Q6_K, 5, 512);
    bad += test_type<TF16>(QR_TYPE_F16, 5, 512);
    bad += test_type<TBF16>(QR_TYPE_BF16, 5, 512);
    bad += test_type<TF32>(QR_TYPE_F32, 5, 512);
    printf("%s\n", bad ? "FAILURES" : "all ok");
    return bad != 0;
}
