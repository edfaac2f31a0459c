/* types.c — the type table (data, not code). Sizes follow ggml's block structs. */
#include "types.h"

#include <strings.h>

const qr_type_info qr_type_table[QR_TYPE_COUNT] = {
    [QR_TYPE_F32] = {"F32", 1, 4, false},
    [QR_TYPE_F16] = {"F16", 1, 2, false},
    [QR_TYPE_Q4_0] = {"Q4_0", 32, 18, true},
    [QR_TYPE_Q4_1] = {"Q4_1", 32, 20, true},
    [QR_TYPE_Q5_0] = {"Q5_0", 32, 22, true},
    [QR_TYPE_Q5_1] = {"Q5_1", 32, 24, true},
    [QR_TYPE_Q8_0] = {"Q8_0", 32, 34, true},
    [QR_TYPE_Q8_1] = {"Q8_1", 32, 36, true},
    [QR_TYPE_Q2_K] = {"Q2_K", 256, 84, true},
    [QR_TYPE_Q3_K] = {"Q3_K", 256, 110, true},
    [QR_TYPE_Q4_K] = {"Q4_K", 256, 144, true},
    [QR_TYPE_Q5_K] = {"Q5_K", 256, 176, true},
    [QR_TYPE_Q6_K] = {"Q6_K", 256, 210, true},
    [QR_TYPE_Q8_K] = {"Q8_K", 256, 292, true},
    [QR_TYPE_IQ2_XXS] = {"IQ2_XXS", 256, 66, true},
    [QR_TYPE_IQ2_XS] = {"IQ2_XS", 256, 74, true},
    [QR_TYPE_IQ3_XXS] = {"IQ3_XXS", 256, 98, true},
    [QR_TYPE_IQ1_S] = {"IQ1_S", 256, 50, true},
    [QR_TYPE_IQ4_NL] = {"IQ4_NL", 32, 18, true},
    [QR_TYPE_IQ3_S] = {"IQ3_S", 256, 110, true},
    [QR_TYPE_IQ2_S] = {"IQ2_S", 256, 82, true},
    [QR_TYPE_IQ4_XS] = {"IQ4_XS", 256, 136, true},
    [QR_TYPE_I8] = {"I8", 1, 1, false},
    [QR_TYPE_I16] = {"I16", 1, 2, false},
    [QR_TYPE_I32] = {"I32", 1, 4, false},
    [QR_TYPE_I64] = {"I64", 1, 8, false},
    [QR_TYPE_F64] = {"F64", 1, 8, false},
    [QR_TYPE_IQ1_M] = {"IQ1_M", 256, 56, true},
    [QR_TYPE_BF16] = {"BF16", 1, 2, false},
    [QR_TYPE_TQ1_0] = {"TQ1_0", 256, 54, true},
    [QR_TYPE_TQ2_0] = {"TQ2_0", 256, 66, true},
    [QR_TYPE_MXFP4] = {"MXFP4", 32, 17, true},
    [QR_TYPE_NVFP4] = {"NVFP4", 64, 36, true},
    [QR_TYPE_Q1_0] = {"Q1_0", 128, 18, true},
};

bool qr_type_valid(uint32_t id) { return id < QR_TYPE_COUNT && qr_type_table[id].name != NULL; }

const char *qr_type_name(uint32_t id) { return qr_type_valid(id) ? qr_type_table[id].name : "?"; }

int qr_type_from_name(const char *name) {
    for (int i = 0; i < QR_TYPE_COUNT; i++)
        if (qr_type_table[i].name && strcasecmp(qr_type_table[i].name, name) == 0) return i;
    return -1;
}

size_t qr_type_row_size(qr_type type, int64_t n) {
    if (!qr_type_valid((uint32_t)type) || n < 0) return 0;
    const qr_type_info *t = &qr_type_table[type];
    if (n % t->block_size) return 0;
    return (size_t)(n / t->block_size) * t->type_size;
}
