/* quant_repack.c — the load-time row repacks of qr_quant_repack (quant.h), plain C (run once at load; any CPU):
 * groups of R weight rows interleaved so that lane r of a SIMD register holds 4 bytes of row r (R = 8: AVX2 ymm,
 * R = 16: AVX-512 zmm), the layouts the repacked tiles read (quant_tile_avx2.c, quant_tile_avx512.c,
 * quant_kquants_avx2.c, quant_kquants_avx512.c), each row's way back (unpack_row: get_rows of a repacked table) and
 * the activation extras the signed formats' tiles start their lanes from. */
#include <string.h>

#include "quant/quant_internal.h"

/* Group g's row r of a weight whose rows lie row_bytes apart, as a block array. */
static inline const void *row_of(const void *src, size_t row_bytes, int R, int64_t g, int r) {
    return (const char *)src + (size_t)(R * g + r) * row_bytes;
}

/* ---- Q4_K: per super-block of a group, 148 R bytes: codes [pair k][t 0..7][row][4] (row r's qs[32k + 4t ..]),
 * scales [sub-block][row] u8, mins [pair][row][2] u8, d [row] f16, dmin [row] f16 */

static void q4_K_pack(const void *src, size_t row_bytes, int64_t n_rows, int64_t k, void *dst, int R) {
    const size_t sc = (size_t)128 * R, mn = sc + 8 * (size_t)R, d = mn + 8 * (size_t)R, dm = d + 2 * (size_t)R;
    uint8_t *out = dst;
    for (int64_t g = 0; g < n_rows / R; g++)
        for (int64_t i = 0; i < k / QR_QK_K; i++, out += 148 * (size_t)R)
            for (int r = 0; r < R; r++) {
                const qr_block_q4_K *x = (const qr_block_q4_K *)row_of(src, row_bytes, R, g, r) + i;
                for (int kk = 0; kk < 4; kk++)
                    for (int t = 0; t < 8; t++) memcpy(out + ((kk * 8 + t) * R + r) * 4, x->qs + 32 * kk + 4 * t, 4);
                for (int j = 0; j < 8; j++) {
                    uint8_t s, m;
                    kquant_scale_min(j, x->scales, &s, &m);
                    out[sc + (size_t)j * R + r] = s;
                    out[mn + ((size_t)(j / 2) * R + r) * 2 + j % 2] = m;
                }
                memcpy(out + d + 2 * r, &x->d, 2);
                memcpy(out + dm + 2 * r, &x->dmin, 2);
            }
}

static void q4_K_unpack_row(const void *group, int r, int64_t k, void *dst, int R) {
    const size_t sc = (size_t)128 * R, mn = sc + 8 * (size_t)R, d = mn + 8 * (size_t)R, dm = d + 2 * (size_t)R;
    const uint8_t *in = group;
    qr_block_q4_K *x = dst;
    for (int64_t i = 0; i < k / QR_QK_K; i++, in += 148 * (size_t)R) {
        for (int kk = 0; kk < 4; kk++)
            for (int t = 0; t < 8; t++) memcpy(x[i].qs + 32 * kk + 4 * t, in + ((kk * 8 + t) * R + r) * 4, 4);
        uint8_t s[8], m[8], *q = x[i].scales; /* kquant_scale_min's packing, inverted */
        for (int j = 0; j < 8; j++) {
            s[j] = in[sc + (size_t)j * R + r];
            m[j] = in[mn + ((size_t)(j / 2) * R + r) * 2 + j % 2];
        }
        for (int j = 0; j < 4; j++) {
            q[j] = (uint8_t)((s[j] & 63) | ((s[j + 4] >> 4) << 6));
            q[j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] >> 4) << 6));
            q[j + 8] = (uint8_t)((s[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
        }
        memcpy(&x[i].d, in + d + 2 * r, 2);
        memcpy(&x[i].dmin, in + dm + 2 * r, 2);
    }
}

/* ---- Q4_0: per block of a group, 18 R bytes: codes [t 0..3][row][4] (row r's qs[4t ..]), d [row] f16 ---- */

static void q4_0_pack(const void *src, size_t row_bytes, int64_t n_rows, int64_t k, void *dst, int R) {
    uint8_t *out = dst;
    for (int64_t g = 0; g < n_rows / R; g++)
        for (int64_t i = 0; i < k / QR_QK4_0; i++, out += 18 * (size_t)R)
            for (int r = 0; r < R; r++) {
                const qr_block_q4_0 *x = (const qr_block_q4_0 *)row_of(src, row_bytes, R, g, r) + i;
                for (int t = 0; t < 4; t++) memcpy(out + (t * R + r) * 4, x->qs + 4 * t, 4);
                memcpy(out + 16 * R + 2 * r, &x->d, 2);
            }
}

static void q4_0_unpack_row(const void *group, int r, int64_t k, void *dst, int R) {
    const uint8_t *in = group;
    qr_block_q4_0 *x = dst;
    for (int64_t i = 0; i < k / QR_QK4_0; i++, in += 18 * (size_t)R) {
        for (int t = 0; t < 4; t++) memcpy(x[i].qs + 4 * t, in + (t * R + r) * 4, 4);
        memcpy(&x[i].d, in + 16 * R + 2 * r, 2);
    }
}

/* ---- Q4_1 (R = 16): per block of a group, 320 bytes: codes [t 0..3][row][4] (row r's qs[4t ..]), d [row] f16,
 * m [row] f16 */

void qr_q4_1_rp16_pack(const void *src, size_t row_bytes, int64_t n_rows, int64_t k, void *dst) {
    uint8_t *out = dst;
    for (int64_t g = 0; g < n_rows / 16; g++)
        for (int64_t i = 0; i < k / QR_QK4_1; i++, out += 320)
            for (int r = 0; r < 16; r++) {
                const qr_block_q4_1 *x = (const qr_block_q4_1 *)row_of(src, row_bytes, 16, g, r) + i;
                for (int t = 0; t < 4; t++) memcpy(out + (t * 16 + r) * 4, x->qs + 4 * t, 4);
                memcpy(out + 256 + 2 * r, &x->d, 2);
                memcpy(out + 288 + 2 * r, &x->m, 2);
            }
}

void qr_q4_1_rp16_unpack_row(const void *group, int r, int64_t k, void *dst) {
    const uint8_t *in = group;
    qr_block_q4_1 *x = dst;
    for (int64_t i = 0; i < k / QR_QK4_1; i++, in += 320) {
        for (int t = 0; t < 4; t++) memcpy(x[i].qs + 4 * t, in + (t * 16 + r) * 4, 4);
        memcpy(&x[i].d, in + 256 + 2 * r, 2);
        memcpy(&x[i].m, in + 288 + 2 * r, 2);
    }
}

/* ---- Q5_0 (R = 16): per block of a group, 352 bytes: low 4 bits as Q4_0's codes [t][row][4], the 5th bits [quad
 * k][u64: bit 4r + b = row r's value 4k + b], d [row] f16 */

void qr_q5_0_rp16_pack(const void *src, size_t row_bytes, int64_t n_rows, int64_t k, void *dst) {
    uint8_t *out = dst;
    for (int64_t g = 0; g < n_rows / 16; g++)
        for (int64_t i = 0; i < k / QR_QK5_0; i++, out += 352) {
            uint64_t hb[8] = {0};
            for (int r = 0; r < 16; r++) {
                const qr_block_q5_0 *x = (const qr_block_q5_0 *)row_of(src, row_bytes, 16, g, r) + i;
                uint32_t qh;
                memcpy(&qh, x->qh, 4);
                for (int t = 0; t < 4; t++) memcpy(out + (t * 16 + r) * 4, x->qs + 4 * t, 4);
                for (int q = 0; q < 8; q++)
                    for (int b = 0; b < 4; b++) hb[q] |= (uint64_t)((qh >> (4 * q + b)) & 1) << (4 * r + b);
                memcpy(out + 320 + 2 * r, &x->d, 2);
            }
            memcpy(out + 256, hb, sizeof hb);
        }
}

void qr_q5_0_rp16_unpack_row(const void *group, int r, int64_t k, void *dst) {
    const uint8_t *in = group;
    qr_block_q5_0 *x = dst;
    for (int64_t i = 0; i < k / QR_QK5_0; i++, in += 352) {
        for (int t = 0; t < 4; t++) memcpy(x[i].qs + 4 * t, in + (t * 16 + r) * 4, 4);
        uint64_t hb[8];
        memcpy(hb, in + 256, sizeof hb);
        uint32_t qh = 0;
        for (int q = 0; q < 8; q++)
            for (int b = 0; b < 4; b++) qh |= (uint32_t)((hb[q] >> (4 * r + b)) & 1) << (4 * q + b);
        memcpy(x[i].qh, &qh, 4);
        memcpy(&x[i].d, in + 320 + 2 * r, 2);
    }
}

/* ---- Q8_0 (R = 16): per block of a group, 544 bytes: codes + 128 [quad q 0..7][row][4], d [row] f16 ---- */

void qr_q8_0_rp16_pack(const void *src, size_t row_bytes, int64_t n_rows, int64_t k, void *dst) {
    uint8_t *out = dst;
    for (int64_t g = 0; g < n_rows / 16; g++)
        for (int64_t i = 0; i < k / QR_QK8_0; i++, out += 544)
            for (int r = 0; r < 16; r++) {
                const qr_block_q8_0 *x = (const qr_block_q8_0 *)row_of(src, row_bytes, 16, g, r) + i;
                for (int q = 0; q < 8; q++) {
                    uint32_t v;
                    memcpy(&v, x->qs + 4 * q, 4);
                    v ^= 0x80808080u;
                    memcpy(out + (q * 16 + r) * 4, &v, 4);
                }
                memcpy(out + 512 + 2 * r, &x->d, 2);
            }
}

void qr_q8_0_rp16_unpack_row(const void *group, int r, int64_t k, void *dst) {
    const uint8_t *in = group;
    qr_block_q8_0 *x = dst;
    for (int64_t i = 0; i < k / QR_QK8_0; i++, in += 544) {
        for (int q = 0; q < 8; q++) {
            uint32_t v;
            memcpy(&v, in + (q * 16 + r) * 4, 4);
            v ^= 0x80808080u;
            memcpy(x[i].qs + 4 * q, &v, 4);
        }
        memcpy(&x[i].d, in + 512 + 2 * r, 2);
    }
}

/* The entry points of quant_internal.h: each layout at R = 8 (AVX2) and 16 (AVX-512). */
#define RP_ENTRY_POINTS(T, R)                                                                         \
    void qr_##T##_rp##R##_pack(const void *src, size_t row_bytes, int64_t n_rows, int64_t k, void *dst) { \
        T##_pack(src, row_bytes, n_rows, k, dst, R);                                                  \
    }                                                                                                 \
    void qr_##T##_rp##R##_unpack_row(const void *group, int r, int64_t k, void *dst) {                 \
        T##_unpack_row(group, r, k, dst, R);                                                          \
    }
RP_ENTRY_POINTS(q4_K, 8)
RP_ENTRY_POINTS(q4_K, 16)
RP_ENTRY_POINTS(q4_0, 8)
RP_ENTRY_POINTS(q4_0, 16)

/* ---- activation extras (after each converted Q8_0 row) ---- */

/* Q4_0 tiles: -8 x each block's sum, int32 a block. */
void qr_q4_0_rp_act_extra(const void *yrow, int64_t k, void *extra) {
    const qr_block_q8_0 *y = yrow;
    for (int64_t i = 0; i < k / QR_QK8_0; i++) {
        int32_t sum = 0;
        for (int l = 0; l < QR_QK8_0; l++) sum += y[i].qs[l];
        const int32_t v = -8 * sum;
        memcpy((char *)extra + 4 * i, &v, 4);
    }
}

/* -c x each 4-value quad's sum, 8 int32 a block. */
static void quad_sums(const void *yrow, int64_t k, void *extra, int32_t c) {
    const qr_block_q8_0 *y = yrow;
    for (int64_t i = 0; i < k / QR_QK8_0; i++)
        for (int q = 0; q < 8; q++) {
            const int32_t v = -c * (y[i].qs[4 * q] + y[i].qs[4 * q + 1] + y[i].qs[4 * q + 2] + y[i].qs[4 * q + 3]);
            memcpy((char *)extra + 32 * i + 4 * q, &v, 4);
        }
}

/* Q8_0 tiles (codes + 128): -128 x the quad sums; Q5_0 tiles (codes 0..31): -16 x. */
void qr_q8_0_rp16_act_extra(const void *yrow, int64_t k, void *extra) { quad_sums(yrow, k, extra, 128); }
void qr_q5_0_rp16_act_extra(const void *yrow, int64_t k, void *extra) { quad_sums(yrow, k, extra, 16); }
