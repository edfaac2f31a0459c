/* types.h — the ggml tensor type ids, as data: name, block size, bytes per block.
 * The ids are the on-disk values of GGUF tensor infos (ggml's `enum ggml_type`). */
#ifndef QR_QUANT_TYPES_H
#define QR_QUANT_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum qr_type {
    QR_TYPE_F32 = 0,
    QR_TYPE_F16 = 1,
    QR_TYPE_Q4_0 = 2,
    QR_TYPE_Q4_1 = 3,
    /* 4, 5: Q4_2, Q4_3 (removed from ggml) */
    QR_TYPE_Q5_0 = 6,
    QR_TYPE_Q5_1 = 7,
    QR_TYPE_Q8_0 = 8,
    QR_TYPE_Q8_1 = 9,
    QR_TYPE_Q2_K = 10,
    QR_TYPE_Q3_K = 11,
    QR_TYPE_Q4_K = 12,
    QR_TYPE_Q5_K = 13,
    QR_TYPE_Q6_K = 14,
    QR_TYPE_Q8_K = 15,
    QR_TYPE_IQ2_XXS = 16,
    QR_TYPE_IQ2_XS = 17,
    QR_TYPE_IQ3_XXS = 18,
    QR_TYPE_IQ1_S = 19,
    QR_TYPE_IQ4_NL = 20,
    QR_TYPE_IQ3_S = 21,
    QR_TYPE_IQ2_S = 22,
    QR_TYPE_IQ4_XS = 23,
    QR_TYPE_I8 = 24,
    QR_TYPE_I16 = 25,
    QR_TYPE_I32 = 26,
    QR_TYPE_I64 = 27,
    QR_TYPE_F64 = 28,
    QR_TYPE_IQ1_M = 29,
    QR_TYPE_BF16 = 30,
    /* 31..33: Q4_0_4_4, Q4_0_4_8, Q4_0_8_8 (removed) */
    QR_TYPE_TQ1_0 = 34,
    QR_TYPE_TQ2_0 = 35,
    /* 36..38: IQ4_NL_4_4, IQ4_NL_4_8, IQ4_NL_8_8 (removed) */
    QR_TYPE_MXFP4 = 39,
    QR_TYPE_NVFP4 = 40,
    QR_TYPE_Q1_0 = 41,
    QR_TYPE_COUNT = 42,
} qr_type;

/* One row of the type table. A removed id has name == NULL. */
typedef struct qr_type_info {
    const char *name;     /* "Q4_K", as ggml/gguf name it */
    uint32_t block_size;  /* elements per block (1 for plain types) */
    uint32_t type_size;   /* bytes per block */
    bool quantized;       /* true for block-quantized types */
} qr_type_info;

/* The table, indexed by id; QR_TYPE_COUNT rows. */
extern const qr_type_info qr_type_table[QR_TYPE_COUNT];

/* True when `id` names a type that exists (not removed, not out of range). */
bool qr_type_valid(uint32_t id);
/* Name of a type, or "?" for an invalid id. */
const char *qr_type_name(uint32_t id);
/* Type id for a (case-insensitive) name such as "q4_k"; -1 when unknown. */
int qr_type_from_name(const char *name);
/* Bytes needed for a row of n elements; 0 if n is not a multiple of the block size or id invalid. */
size_t qr_type_row_size(qr_type type, int64_t n);

#endif /* QR_QUANT_TYPES_H */
