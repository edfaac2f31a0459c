/* quant.c — the traits tables (scalar reference and fastest-for-this-CPU) and run-time ISA selection.
 *
 * No SIMD code lives here: this file is compiled without ISA flags and only calls the *_avx2 kernels
 * after __builtin_cpu_supports has confirmed AVX2, FMA and F16C (which also checks that the OS saves
 * the YMM state), the *_avx512 ones after cpuid and XGETBV have confirmed AVX-512 F/BW/VL/DQ + VNNI.
 * QUARREL_CPU_ISA=avx2|avx512|scalar (util/knobs.c) caps the level; QUARREL_SIMD=scalar forces the
 * reference kernels (for debugging and for measuring the SIMD speed-up); none means "best available".
 */
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant_internal.h"
#include "util/knobs.h"

#define TRAITS(t, tf, ff, vd, vdt) [t] = {.type = t, .to_float = tf, .from_float = ff, .vec_dot = vd, .vec_dot_type = vdt}
/* a 32-value format against Q8_0 that ggml repacks 8 rows at a time on AVX2 (one order for its GEMV
 * and GEMM, same activations) */
#define RTRAITS(t, tf, ff, vd, vdrp)                                                                       \
    [t] = {.type = t, .to_float = tf, .from_float = ff, .vec_dot = vd, .vec_dot_type = QR_TYPE_Q8_0,       \
           .vec_dot_gemv = vdrp, .vec_dot_gemm = vdrp, .repack_rows = 8}
/* a K-quant with ggml's tiled-GEMM order */
#define KTRAITS(t, tf, ff, vd, vdt, vdtiled) \
    [t] = {.type = t, .to_float = tf, .from_float = ff, .vec_dot = vd, .vec_dot_type = vdt, .vec_dot_tiled = vdtiled}

/* Scalar reference traits; rows without a to_float are unsupported types. */
static const qr_quant_traits ref_traits[QR_TYPE_COUNT] = {
    TRAITS(QR_TYPE_F32, qr_f32_to_float, qr_f32_from_float, qr_vec_dot_f32, QR_TYPE_F32),
    TRAITS(QR_TYPE_F16, qr_f16_to_float, qr_f16_from_float, qr_vec_dot_f16, QR_TYPE_F16),
    TRAITS(QR_TYPE_BF16, qr_bf16_to_float, qr_bf16_from_float, qr_vec_dot_bf16, QR_TYPE_BF16),
    RTRAITS(QR_TYPE_Q4_0, qr_q4_0_to_float, qr_q4_0_from_float, qr_vec_dot_q4_0_q8_0, qr_vec_dot_q4_0_q8_0_rp),
    TRAITS(QR_TYPE_Q4_1, qr_q4_1_to_float, qr_q4_1_from_float, qr_vec_dot_q4_1_q8_1, QR_TYPE_Q8_1),
    TRAITS(QR_TYPE_Q5_0, qr_q5_0_to_float, qr_q5_0_from_float, qr_vec_dot_q5_0_q8_0, QR_TYPE_Q8_0),
    TRAITS(QR_TYPE_Q5_1, qr_q5_1_to_float, qr_q5_1_from_float, qr_vec_dot_q5_1_q8_1, QR_TYPE_Q8_1),
    TRAITS(QR_TYPE_Q8_0, qr_q8_0_to_float, qr_q8_0_from_float, qr_vec_dot_q8_0_q8_0, QR_TYPE_Q8_0),
    TRAITS(QR_TYPE_Q8_1, qr_q8_1_to_float, qr_q8_1_from_float, NULL, QR_TYPE_Q8_1),
    KTRAITS(QR_TYPE_Q2_K, qr_q2_K_to_float, qr_q2_K_from_float, qr_vec_dot_q2_K_q8_K, QR_TYPE_Q8_K,
            qr_vec_dot_q2_K_q8_K_tiled),
    KTRAITS(QR_TYPE_Q3_K, qr_q3_K_to_float, qr_q3_K_from_float, qr_vec_dot_q3_K_q8_K, QR_TYPE_Q8_K,
            qr_vec_dot_q3_K_q8_K_tiled),
    [QR_TYPE_Q4_K] = {.type = QR_TYPE_Q4_K, .to_float = qr_q4_K_to_float, .from_float = qr_q4_K_from_float,
                      .vec_dot = qr_vec_dot_q4_K_q8_K, .vec_dot_type = QR_TYPE_Q8_K,
                      .vec_dot_gemv = qr_vec_dot_q4_K_q8_K_gemv, .vec_dot_gemm = qr_vec_dot_q4_K_q8_K_gemm,
                      .from_float_gemm = qr_q8_K_from_float_x4, .repack_rows = 8,
                      .vec_dot_tiled = qr_vec_dot_q4_K_q8_K_tiled},
    KTRAITS(QR_TYPE_Q5_K, qr_q5_K_to_float, qr_q5_K_from_float, qr_vec_dot_q5_K_q8_K, QR_TYPE_Q8_K,
            qr_vec_dot_q5_K_q8_K_tiled),
    KTRAITS(QR_TYPE_Q6_K, qr_q6_K_to_float, qr_q6_K_from_float, qr_vec_dot_q6_K_q8_K, QR_TYPE_Q8_K,
            qr_vec_dot_q6_K_q8_K_tiled),
    TRAITS(QR_TYPE_Q8_K, qr_q8_K_to_float, qr_q8_K_from_float, NULL, QR_TYPE_Q8_K),
    RTRAITS(QR_TYPE_MXFP4, qr_mxfp4_to_float, qr_mxfp4_from_float, qr_vec_dot_mxfp4_q8_0, qr_vec_dot_mxfp4_q8_0_rp),
    RTRAITS(QR_TYPE_IQ4_NL, qr_iq4_nl_to_float, qr_iq4_nl_from_float, qr_vec_dot_iq4_nl_q8_0, qr_vec_dot_iq4_nl_q8_0_rp),
};

/* One SIMD override: NULL members keep the function of the level below. */
typedef struct simd_override {
    qr_type type;
    qr_to_float_fn to_float;
    qr_from_float_fn from_float;
    qr_vec_dot_fn vec_dot;
    qr_vec_dot_fn vec_dot_gemv, vec_dot_gemm;
    qr_from_float_fn from_float_gemm;
    qr_vec_dot_fn vec_dot_tiled;
    qr_vec_dot_fn vec_dot_sgemm;
    int32_t sgemm_k, sgemm_m;
    qr_vec_dot_tile_fn vec_dot_tile;
    qr_vec_dot_tile_fn vec_dot_gemm_tile, vec_dot_gemv_tile;
    qr_vec_dot_tile_fn vec_dot_tiled_tile;
    qr_quant_repack rp;
} simd_override;

#define OV(t, tf, ff, vd) {.type = t, .to_float = tf, .from_float = ff, .vec_dot = vd}
#define TOV(t, tf, ff, vd, vdtile) {.type = t, .to_float = tf, .from_float = ff, .vec_dot = vd, .vec_dot_tile = vdtile}
#define KOV(t, vd, vdtiled) {.type = t, .vec_dot = vd, .vec_dot_tiled = vdtiled}

static size_t q4_K_rp16_row_bytes(int64_t k) { return (size_t)(k / QR_QK_K) * (QR_Q4_K_RP16_SB / 16); }
static size_t q4_0_rp16_row_bytes(int64_t k) { return (size_t)(k / QR_QK4_0) * 18; }
static size_t q4_0_rp16_act_extra_bytes(int64_t k) { return (size_t)(k / QR_QK8_0) * 4; }
static size_t q4_1_rp16_row_bytes(int64_t k) { return (size_t)(k / QR_QK4_1) * 20; }
static size_t q5_0_rp16_row_bytes(int64_t k) { return (size_t)(k / QR_QK5_0) * 22; }
static size_t q8_0_rp16_row_bytes(int64_t k) { return (size_t)(k / QR_QK8_0) * 34; }
static size_t q8_0_rp16_act_extra_bytes(int64_t k) { return (size_t)(k / QR_QK8_0) * 32; }

static const simd_override avx2_overrides[] = {
    {.type = QR_TYPE_F32, .vec_dot = qr_vec_dot_f32_avx2, .vec_dot_sgemm = qr_vec_dot_f32_sgemm_avx2, .sgemm_k = 8,
     .sgemm_m = 4},
    {.type = QR_TYPE_F16, .to_float = qr_f16_to_float_avx2, .from_float = qr_f16_from_float_avx2,
     .vec_dot = qr_vec_dot_f16_avx2, .vec_dot_sgemm = qr_vec_dot_f16_sgemm_avx2, .sgemm_k = 8, .sgemm_m = 4,
     .vec_dot_tile = qr_vec_dot_tile_f16_avx2},
    OV(QR_TYPE_BF16, NULL, NULL, qr_vec_dot_bf16_avx2),
    {.type = QR_TYPE_Q4_0, .vec_dot = qr_vec_dot_q4_0_q8_0_avx2, .vec_dot_gemv = qr_vec_dot_q4_0_q8_0_rp_avx2,
     .vec_dot_gemm = qr_vec_dot_q4_0_q8_0_rp_avx2, .vec_dot_tile = qr_vec_dot_tile_q4_0_q8_0_avx2,
     .vec_dot_gemm_tile = qr_vec_dot_tile_q4_0_q8_0_rp_avx2, .vec_dot_gemv_tile = qr_vec_dot_tile_q4_0_q8_0_rp_avx2,
     .rp = {.rows = 8, .cols = 4, .row_bytes_of = q4_0_rp16_row_bytes, .pack = qr_q4_0_rp8_pack,
            .unpack_row = qr_q4_0_rp8_unpack_row, .gemm_tile = qr_vec_dot_tile_q4_0_q8_0_rp8_avx2,
            .gemv_tile = qr_vec_dot_tile_q4_0_q8_0_rp8_avx2, .act_extra_bytes = q4_0_rp16_act_extra_bytes,
            .act_extra = qr_q4_0_rp_act_extra}},
    TOV(QR_TYPE_Q4_1, NULL, NULL, qr_vec_dot_q4_1_q8_1_avx2, qr_vec_dot_tile_q4_1_q8_1_avx2),
    TOV(QR_TYPE_Q5_0, NULL, NULL, qr_vec_dot_q5_0_q8_0_avx2, qr_vec_dot_tile_q5_0_q8_0_avx2),
    TOV(QR_TYPE_Q5_1, NULL, NULL, qr_vec_dot_q5_1_q8_1_avx2, qr_vec_dot_tile_q5_1_q8_1_avx2),
    TOV(QR_TYPE_Q8_0, NULL, qr_q8_0_from_float_avx2, qr_vec_dot_q8_0_q8_0_avx2, qr_vec_dot_tile_q8_0_q8_0_avx2),
    OV(QR_TYPE_Q8_1, NULL, qr_q8_1_from_float_avx2, NULL),
    KOV(QR_TYPE_Q2_K, qr_vec_dot_q2_K_q8_K_avx2, qr_vec_dot_q2_K_q8_K_tiled_avx2),
    KOV(QR_TYPE_Q3_K, qr_vec_dot_q3_K_q8_K_avx2, qr_vec_dot_q3_K_q8_K_tiled_avx2),
    {.type = QR_TYPE_Q4_K, .vec_dot = qr_vec_dot_q4_K_q8_K_avx2, .vec_dot_gemv = qr_vec_dot_q4_K_q8_K_gemv_avx2,
     .vec_dot_gemm = qr_vec_dot_q4_K_q8_K_gemm_avx2, .from_float_gemm = qr_q8_K_from_float_x4_avx2,
     .vec_dot_gemm_tile = qr_vec_dot_tile_q4_K_q8_K_gemm_avx2, .vec_dot_gemv_tile = qr_vec_dot_tile_q4_K_q8_K_gemv_avx2,
     .vec_dot_tiled = qr_vec_dot_q4_K_q8_K_tiled_avx2,
     .rp = {.rows = 8, .cols = 4, .row_bytes_of = q4_K_rp16_row_bytes, .pack = qr_q4_K_rp8_pack,
            .unpack_row = qr_q4_K_rp8_unpack_row, .gemm_tile = qr_vec_dot_tile_q4_K_q8_K_gemm_rp8_avx2,
            .gemv_tile = qr_vec_dot_tile_q4_K_q8_K_gemv_rp8_avx2}},
    KOV(QR_TYPE_Q5_K, qr_vec_dot_q5_K_q8_K_avx2, qr_vec_dot_q5_K_q8_K_tiled_avx2),
    {.type = QR_TYPE_Q6_K, .vec_dot = qr_vec_dot_q6_K_q8_K_avx2, .vec_dot_tiled = qr_vec_dot_q6_K_q8_K_tiled_avx2,
     .vec_dot_tiled_tile = qr_vec_dot_tile_q6_K_q8_K_tiled_avx2},
    OV(QR_TYPE_Q8_K, NULL, qr_q8_K_from_float_avx2, NULL),
    {.type = QR_TYPE_MXFP4, .vec_dot = qr_vec_dot_mxfp4_q8_0_avx2, .vec_dot_gemv = qr_vec_dot_mxfp4_q8_0_rp_avx2,
     .vec_dot_gemm = qr_vec_dot_mxfp4_q8_0_rp_avx2},
    {.type = QR_TYPE_IQ4_NL, .vec_dot = qr_vec_dot_iq4_nl_q8_0_avx2, .vec_dot_gemv = qr_vec_dot_iq4_nl_q8_0_rp_avx2,
     .vec_dot_gemm = qr_vec_dot_iq4_nl_q8_0_rp_avx2, .vec_dot_sgemm = qr_vec_dot_iq4_nl_q8_0_sgemm_avx2,
     .sgemm_k = 32},
};

/* AVX-512 overrides, applied over the AVX2 ones: the same results (each kernel bit-identical to the
 * AVX2 one of its order), faster. */
static const simd_override avx512_overrides[] = {
    {.type = QR_TYPE_F16, .vec_dot_tile = qr_vec_dot_tile_f16_avx512},
    {.type = QR_TYPE_Q4_0, .vec_dot_tile = qr_vec_dot_tile_q4_0_q8_0_avx512, .vec_dot_gemv = qr_vec_dot_q4_0_q8_0_rp_avx512,
     .vec_dot_gemm_tile = qr_vec_dot_tile_q4_0_q8_0_rp_avx512, .vec_dot_gemv_tile = qr_vec_dot_tile_q4_0_q8_0_rp_avx512,
     .rp = {.rows = 16, .cols = 4, .row_bytes_of = q4_0_rp16_row_bytes, .pack = qr_q4_0_rp16_pack, .unpack_row = qr_q4_0_rp16_unpack_row,
            .gemm_tile = qr_vec_dot_tile_q4_0_q8_0_rp16_avx512, .gemv_tile = qr_vec_dot_tile_q4_0_q8_0_rp16_avx512,
            .act_extra_bytes = q4_0_rp16_act_extra_bytes, .act_extra = qr_q4_0_rp_act_extra}},
    {.type = QR_TYPE_Q4_1, .vec_dot_tile = qr_vec_dot_tile_q4_1_q8_1_avx512,
     .rp = {.rows = 16, .cols = 2, .vec_dot_order = true, .row_bytes_of = q4_1_rp16_row_bytes,
            .pack = qr_q4_1_rp16_pack, .unpack_row = qr_q4_1_rp16_unpack_row,
            .gemm_tile = qr_vec_dot_tile_q4_1_q8_1_rp16_avx512, .gemv_tile = qr_vec_dot_tile_q4_1_q8_1_rp16_avx512}},
    {.type = QR_TYPE_Q5_0, .vec_dot_tile = qr_vec_dot_tile_q5_0_q8_0_avx512,
     .rp = {.rows = 16, .cols = 3, .vec_dot_order = true, .row_bytes_of = q5_0_rp16_row_bytes,
            .pack = qr_q5_0_rp16_pack, .unpack_row = qr_q5_0_rp16_unpack_row,
            .gemm_tile = qr_vec_dot_tile_q5_0_q8_0_rp16_avx512, .gemv_tile = qr_vec_dot_tile_q5_0_q8_0_rp16_avx512,
            .act_extra_bytes = q8_0_rp16_act_extra_bytes, .act_extra = qr_q5_0_rp16_act_extra}},
    {.type = QR_TYPE_Q5_1, .vec_dot_tile = qr_vec_dot_tile_q5_1_q8_1_avx512},
    {.type = QR_TYPE_Q8_0, .vec_dot_tile = qr_vec_dot_tile_q8_0_q8_0_avx512,
     .rp = {.rows = 16, .cols = 2, .vec_dot_order = true, .row_bytes_of = q8_0_rp16_row_bytes, .pack = qr_q8_0_rp16_pack, .unpack_row = qr_q8_0_rp16_unpack_row,
            .gemm_tile = qr_vec_dot_tile_q8_0_q8_0_rp16_avx512, .gemv_tile = qr_vec_dot_tile_q8_0_q8_0_rp16_avx512,
            .act_extra_bytes = q8_0_rp16_act_extra_bytes, .act_extra = qr_q8_0_rp16_act_extra}},
    {.type = QR_TYPE_Q4_K, .vec_dot_gemm_tile = qr_vec_dot_tile_q4_K_q8_K_gemm_avx512,
     .vec_dot_gemv_tile = qr_vec_dot_tile_q4_K_q8_K_gemv_avx512, .rp = {.rows = 16, .cols = QR_Q4_K_RP16_NC, .row_bytes_of = q4_K_rp16_row_bytes, .pack = qr_q4_K_rp16_pack, .unpack_row = qr_q4_K_rp16_unpack_row,
            .gemm_tile = qr_vec_dot_tile_q4_K_q8_K_gemm_rp16_avx512,
            .gemv_tile = qr_vec_dot_tile_q4_K_q8_K_gemv_rp16_avx512}},
    {.type = QR_TYPE_Q6_K, .vec_dot_tiled_tile = qr_vec_dot_tile_q6_K_q8_K_tiled_avx512},
};

static qr_quant_traits best_traits[QR_TYPE_COUNT];
static const char *best_level = "scalar";
static pthread_once_t best_once = PTHREAD_ONCE_INIT;

/* True when this CPU and OS run the AVX2 kernels (AVX2 + FMA + F16C with YMM state saved).
 * __builtin_cpu_supports("avx2") includes the OS (XGETBV) check; F16C is read from CPUID leaf 1
 * directly because clang's builtin does not know that feature name. */
static bool cpu_has_avx2(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return false;
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
    return (ecx & bit_F16C) != 0;
#else
    return false;
#endif
}

/* True when this CPU and OS also run the AVX-512 kernels: F, BW, VL, DQ and VNNI, with the ZMM and
 * opmask state saved by the OS (XCR0 bits 5..7, besides the YMM bits cpu_has_avx2 checked). */
bool qr_quant_cpu_has_avx512(void) {
#if defined(__x86_64__) || defined(__i386__)
    if (!cpu_has_avx2()) return false;
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    const bool f = ebx & (1u << 16), dq = ebx & (1u << 17), bw = ebx & (1u << 30), vl = ebx & (1u << 31);
    const bool vnni = ecx & (1u << 11);
    if (!(f && dq && bw && vl && vnni)) return false;
    unsigned xlo, xhi;
    __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
    return (xlo & 0xE6u) == 0xE6u;
#else
    return false;
#endif
}

static int cpu_isa;
static pthread_once_t cpu_isa_once = PTHREAD_ONCE_INIT;

static void init_cpu_isa(void) {
    const int32_t want = qr_knob_int(QR_KNOB_CPU_ISA);
    if (want == QR_CPU_ISA_SCALAR || qr_knob_int(QR_KNOB_SIMD) == QR_SIMD_SCALAR || !cpu_has_avx2())
        cpu_isa = QR_CPU_ISA_SCALAR;
    else if (want == QR_CPU_ISA_AVX2 || !qr_quant_cpu_has_avx512()) cpu_isa = QR_CPU_ISA_AVX2;
    else cpu_isa = QR_CPU_ISA_AVX512;
}

/* Decided once (the knobs are read once; cpuid traps to the hypervisor in a VM: microseconds a call, and the CPU
 * backend asks per op). */
int qr_quant_cpu_isa(void) {
    pthread_once(&cpu_isa_once, init_cpu_isa);
    return cpu_isa;
}

/* Copies the non-NULL members of n overrides into best_traits. */
static void apply_overrides(const simd_override *ov, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const simd_override *o = &ov[i];
        qr_quant_traits *t = &best_traits[o->type];
        if (o->to_float) t->to_float = o->to_float;
        if (o->from_float) t->from_float = o->from_float;
        if (o->vec_dot) t->vec_dot = o->vec_dot;
        if (o->vec_dot_gemv) t->vec_dot_gemv = o->vec_dot_gemv;
        if (o->vec_dot_gemm) t->vec_dot_gemm = o->vec_dot_gemm;
        if (o->from_float_gemm) t->from_float_gemm = o->from_float_gemm;
        if (o->vec_dot_tiled) t->vec_dot_tiled = o->vec_dot_tiled;
        if (o->vec_dot_tile) t->vec_dot_tile = o->vec_dot_tile;
        if (o->vec_dot_gemm_tile) t->vec_dot_gemm_tile = o->vec_dot_gemm_tile;
        if (o->vec_dot_gemv_tile) t->vec_dot_gemv_tile = o->vec_dot_gemv_tile;
        if (o->vec_dot_tiled_tile) t->vec_dot_tiled_tile = o->vec_dot_tiled_tile;
        if (o->rp.pack) t->rp = o->rp;
        if (o->vec_dot_sgemm) {
            t->vec_dot_sgemm = o->vec_dot_sgemm;
            t->sgemm_k = o->sgemm_k;
            t->sgemm_m = o->sgemm_m;
        }
    }
}

/* Fills best_traits once: the reference table, then the overrides of each ISA up to the one chosen
 * (qr_quant_cpu_isa). */
static void init_best(void) {
    memcpy(best_traits, ref_traits, sizeof best_traits);
    const int isa = qr_quant_cpu_isa();
    if (isa == QR_CPU_ISA_SCALAR) return;
    qr_quant_avx2_init();
    apply_overrides(avx2_overrides, sizeof avx2_overrides / sizeof avx2_overrides[0]);
    best_level = "avx2";
    if (isa == QR_CPU_ISA_AVX512) {
        apply_overrides(avx512_overrides, sizeof avx512_overrides / sizeof avx512_overrides[0]);
        best_level = "avx512";
    }
}

const qr_quant_traits *qr_quant_traits_ref(qr_type type) {
    if ((unsigned)type >= QR_TYPE_COUNT || !ref_traits[type].to_float) return NULL;
    return &ref_traits[type];
}

const qr_quant_traits *qr_quant_traits_best(qr_type type) {
    if (!qr_quant_traits_ref(type)) return NULL;
    pthread_once(&best_once, init_best);
    return &best_traits[type];
}

const char *qr_quant_simd_level(void) {
    pthread_once(&best_once, init_best);
    return best_level;
}
