/* blocks.h — one plain struct per quantized block format, byte for byte as ggml lays them out on disk.
 *
 * Shared with the CUDA code: plain C, no anonymous unions, no bitfields, only fixed-width integer
 * members; every half-precision value is a raw IEEE binary16 bit pattern in a uint16_t. Every struct
 * has a static size assert, so a layout mistake fails the build on every compiler (C, C++, nvcc).
 *
 * Conventions used in the comments: a "block" is the unit of the format (32 or 256 values); a
 * "sub-block" is a group inside a K-quant super-block that shares one scale (16 or 32 values).
 * "q" is the stored integer code, "x" the real value it stands for.
 */
#ifndef QR_QUANT_BLOCKS_H
#define QR_QUANT_BLOCKS_H

#include <stdint.h>

#if defined(__cplusplus)
#define QR_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define QR_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

#define QR_QK4_0 32   /* values per Q4_0 block */
#define QR_QK4_1 32   /* values per Q4_1 block */
#define QR_QK5_0 32   /* values per Q5_0 block */
#define QR_QK5_1 32   /* values per Q5_1 block */
#define QR_QK8_0 32   /* values per Q8_0 block */
#define QR_QK8_1 32   /* values per Q8_1 block */
#define QR_QK_MXFP4 32 /* values per MXFP4 block */
#define QR_QK4_NL 32  /* values per IQ4_NL block */
#define QR_QK_K 256   /* values per K-quant super-block */
#define QR_K_SCALE_SIZE 12 /* bytes of packed 6-bit scales and mins in Q4_K / Q5_K */

/* Q4_0: x = d * (q - 8), q in 0..15. Value j < 16 is the low nibble of qs[j], value j + 16 the high. */
typedef struct qr_block_q4_0 {
    uint16_t d;                 /* fp16 scale */
    uint8_t qs[QR_QK4_0 / 2];   /* [16] two 4-bit codes per byte */
} qr_block_q4_0;
QR_STATIC_ASSERT(sizeof(qr_block_q4_0) == 18, "qr_block_q4_0 size");

/* Q4_1: x = d * q + m, q in 0..15; nibble order as Q4_0. */
typedef struct qr_block_q4_1 {
    uint16_t d;                 /* fp16 scale */
    uint16_t m;                 /* fp16 minimum (offset) */
    uint8_t qs[QR_QK4_1 / 2];   /* [16] two 4-bit codes per byte */
} qr_block_q4_1;
QR_STATIC_ASSERT(sizeof(qr_block_q4_1) == 20, "qr_block_q4_1 size");

/* Q5_0: x = d * (q - 16), q in 0..31; bit 4 of value j is bit j of the little-endian u32 in qh. */
typedef struct qr_block_q5_0 {
    uint16_t d;                 /* fp16 scale */
    uint8_t qh[4];              /* 32 high bits, little-endian u32 (unaligned) */
    uint8_t qs[QR_QK5_0 / 2];   /* [16] low 4 bits, nibble order as Q4_0 */
} qr_block_q5_0;
QR_STATIC_ASSERT(sizeof(qr_block_q5_0) == 22, "qr_block_q5_0 size");

/* Q5_1: x = d * q + m, q in 0..31; bit layout as Q5_0. */
typedef struct qr_block_q5_1 {
    uint16_t d;                 /* fp16 scale */
    uint16_t m;                 /* fp16 minimum */
    uint8_t qh[4];              /* 32 high bits, little-endian u32 */
    uint8_t qs[QR_QK5_1 / 2];   /* [16] low 4 bits */
} qr_block_q5_1;
QR_STATIC_ASSERT(sizeof(qr_block_q5_1) == 24, "qr_block_q5_1 size");

/* Q8_0: x = d * q, q in -127..127. */
typedef struct qr_block_q8_0 {
    uint16_t d;                 /* fp16 scale */
    int8_t qs[QR_QK8_0];        /* [32] codes */
} qr_block_q8_0;
QR_STATIC_ASSERT(sizeof(qr_block_q8_0) == 34, "qr_block_q8_0 size");

/* Q8_1: Q8_0 plus s = d * sum(q), which lets a dot with an offset format (Q4_1, Q5_1) fold the offset. */
typedef struct qr_block_q8_1 {
    uint16_t d;                 /* fp16 scale */
    uint16_t s;                 /* fp16 d * sum(qs) */
    int8_t qs[QR_QK8_1];        /* [32] codes */
} qr_block_q8_1;
QR_STATIC_ASSERT(sizeof(qr_block_q8_1) == 36, "qr_block_q8_1 size");

/* MXFP4 (OCP microscaling): x = 2^(e-128) * kvalue[q], kvalue = doubled E2M1 {0,1,2,3,4,6,8,12,-0,-1,..,-12};
 * nibble order as Q4_0. */
typedef struct qr_block_mxfp4 {
    uint8_t e;                  /* E8M0 shared exponent */
    uint8_t qs[QR_QK_MXFP4 / 2]; /* [16] 4-bit E2M1 codes */
} qr_block_mxfp4;
QR_STATIC_ASSERT(sizeof(qr_block_mxfp4) == 17, "qr_block_mxfp4 size");

/* IQ4_NL: x = d * kvalues_iq4nl[q] (a fixed non-linear 16-entry table); nibble order as Q4_0. */
typedef struct qr_block_iq4_nl {
    uint16_t d;                 /* fp16 scale */
    uint8_t qs[QR_QK4_NL / 2];  /* [16] 4-bit table indices */
} qr_block_iq4_nl;
QR_STATIC_ASSERT(sizeof(qr_block_iq4_nl) == 18, "qr_block_iq4_nl size");

/* Q2_K: 16 sub-blocks of 16; x = d*sc*q - dmin*m, q in 0..3, sc and m 4-bit (scales[j] = sc | m << 4).
 * Codes: value 128*h + 32*k + l (h < 2, k < 4, l < 32) is bits 2k..2k+1 of qs[32*h + l]. */
typedef struct qr_block_q2_K {
    uint8_t scales[QR_QK_K / 16]; /* [16] low nibble scale, high nibble min */
    uint8_t qs[QR_QK_K / 4];      /* [64] 2-bit codes */
    uint16_t d;                   /* fp16 super-scale of the scales */
    uint16_t dmin;                /* fp16 super-scale of the mins */
} qr_block_q2_K;
QR_STATIC_ASSERT(sizeof(qr_block_q2_K) == 84, "qr_block_q2_K size");

/* Q3_K: 16 sub-blocks of 16; x = d*(sc-32)*(q-4), q in 0..7, sc 6-bit.
 * Low 2 bits as Q2_K; bit 2 of value v is bit (v/32) of hmask[v%32] (set means no -4).
 * Scales: 4 low bits of sc j in scales[j] (j<8) or scales[j-8]>>4; 2 high bits at scales[8+j%4]>>(2*(j/4)). */
typedef struct qr_block_q3_K {
    uint8_t hmask[QR_QK_K / 8];   /* [32] high bits */
    uint8_t qs[QR_QK_K / 4];      /* [64] low 2 bits */
    uint8_t scales[12];           /* 16 packed 6-bit scales */
    uint16_t d;                   /* fp16 super-scale */
} qr_block_q3_K;
QR_STATIC_ASSERT(sizeof(qr_block_q3_K) == 110, "qr_block_q3_K size");

/* Q4_K: 8 sub-blocks of 32; x = d*sc*q - dmin*m, q in 0..15, sc and m 6-bit packed in scales[12].
 * Value 64*c + l (l < 32) is the low nibble of qs[32c + l], value 64*c + 32 + l the high nibble. */
typedef struct qr_block_q4_K {
    uint16_t d;                   /* fp16 super-scale of the scales */
    uint16_t dmin;                /* fp16 super-scale of the mins */
    uint8_t scales[QR_K_SCALE_SIZE]; /* 8 scales + 8 mins, 6 bits each */
    uint8_t qs[QR_QK_K / 2];      /* [128] 4-bit codes */
} qr_block_q4_K;
QR_STATIC_ASSERT(sizeof(qr_block_q4_K) == 144, "qr_block_q4_K size");

/* Q5_K: as Q4_K with a fifth bit: bit 4 of value 64*c + l is bit 2c of qh[l], of 64*c + 32 + l bit 2c+1. */
typedef struct qr_block_q5_K {
    uint16_t d;                   /* fp16 super-scale of the scales */
    uint16_t dmin;                /* fp16 super-scale of the mins */
    uint8_t scales[QR_K_SCALE_SIZE]; /* 8 scales + 8 mins, 6 bits each */
    uint8_t qh[QR_QK_K / 8];      /* [32] high bits */
    uint8_t qs[QR_QK_K / 2];      /* [128] low 4 bits */
} qr_block_q5_K;
QR_STATIC_ASSERT(sizeof(qr_block_q5_K) == 176, "qr_block_q5_K size");

/* Q6_K: 16 sub-blocks of 16; x = d*sc*(q-32), q in 0..63, sc int8.
 * In each half h (128 values, ql += 64h, qh += 32h) value 32k + l (k < 4, l < 32) has low 4 bits in
 * ql[l + 32*(k&1)] (low nibble for k < 2, high for k >= 2) and high 2 bits at qh[l] >> 2k. */
typedef struct qr_block_q6_K {
    uint8_t ql[QR_QK_K / 2];      /* [128] low 4 bits */
    uint8_t qh[QR_QK_K / 4];      /* [64] high 2 bits */
    int8_t scales[QR_QK_K / 16];  /* [16] sub-block scales */
    uint16_t d;                   /* fp16 super-scale */
} qr_block_q6_K;
QR_STATIC_ASSERT(sizeof(qr_block_q6_K) == 210, "qr_block_q6_K size");

/* Q8_K: activation format of the K-quant dot products: x = d * q, plus sums of each 16 codes. */
typedef struct qr_block_q8_K {
    float d;                      /* fp32 scale */
    int8_t qs[QR_QK_K];           /* [256] codes, -127..127 */
    int16_t bsums[QR_QK_K / 16];  /* [16] sum of qs[16j .. 16j+15] */
} qr_block_q8_K;
QR_STATIC_ASSERT(sizeof(qr_block_q8_K) == 292, "qr_block_q8_K size");

#endif /* QR_QUANT_BLOCKS_H */
