/* quantize_rules.c — file types and the per-tensor type rules of llama-quantize (src/llama-quant.cpp),
 * restricted to the file types we can produce (no IQ or TQ mixes, no importance matrix). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "convert/quantize_model.h"

/* llama.cpp's enum llama_ftype values. */
enum {
    FT_ALL_F32 = 0, FT_F16 = 1, FT_Q4_0 = 2, FT_Q4_1 = 3, FT_Q8_0 = 7, FT_Q5_0 = 8, FT_Q5_1 = 9,
    FT_Q2_K = 10, FT_Q3_K_S = 11, FT_Q3_K_M = 12, FT_Q3_K_L = 13, FT_Q4_K_S = 14, FT_Q4_K_M = 15,
    FT_Q5_K_S = 16, FT_Q5_K_M = 17, FT_Q6_K = 18, FT_BF16 = 32, FT_MXFP4_MOE = 38,
};

static const qr_ftype_info ftypes[] = {
    {"F32", FT_ALL_F32, QR_TYPE_F32, false, NULL},
    {"F16", FT_F16, QR_TYPE_F16, false, NULL},
    {"BF16", FT_BF16, QR_TYPE_BF16, false, NULL},
    {"Q8_0", FT_Q8_0, QR_TYPE_Q8_0, false, NULL},
    {"Q4_0", FT_Q4_0, QR_TYPE_Q4_0, false, NULL},
    {"Q4_1", FT_Q4_1, QR_TYPE_Q4_1, false, NULL},
    {"Q5_0", FT_Q5_0, QR_TYPE_Q5_0, false, NULL},
    {"Q5_1", FT_Q5_1, QR_TYPE_Q5_1, false, NULL},
    {"Q2_K", FT_Q2_K, QR_TYPE_Q2_K, false, NULL},
    {"Q3_K_S", FT_Q3_K_S, QR_TYPE_Q3_K, false, NULL},
    {"Q3_K_M", FT_Q3_K_M, QR_TYPE_Q3_K, false, NULL},
    {"Q3_K_L", FT_Q3_K_L, QR_TYPE_Q3_K, false, NULL},
    {"Q4_K_S", FT_Q4_K_S, QR_TYPE_Q4_K, false, NULL},
    {"Q4_K_M", FT_Q4_K_M, QR_TYPE_Q4_K, false, NULL},
    {"Q5_K_S", FT_Q5_K_S, QR_TYPE_Q5_K, false, NULL},
    {"Q5_K_M", FT_Q5_K_M, QR_TYPE_Q5_K, false, NULL},
    {"Q6_K", FT_Q6_K, QR_TYPE_Q6_K, false, NULL},
    {"MXFP4", FT_MXFP4_MOE, QR_TYPE_MXFP4, true, NULL},
    {"MXFP4_MOE", FT_MXFP4_MOE, QR_TYPE_MXFP4, false, NULL},
    /* llama-quantize's aliases */
    {"Q3_K", FT_Q3_K_M, QR_TYPE_Q3_K, false, "Q3_K_M"},
    {"Q4_K", FT_Q4_K_M, QR_TYPE_Q4_K, false, "Q4_K_M"},
    {"Q5_K", FT_Q5_K_M, QR_TYPE_Q5_K, false, "Q5_K_M"},
};
#define N_FTYPES (sizeof ftypes / sizeof ftypes[0])

const qr_ftype_info *qr_ftype_from_name(const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < N_FTYPES; i++) {
        if (strcasecmp(ftypes[i].name, name)) continue;
        if (ftypes[i].alias_of) return qr_ftype_from_name(ftypes[i].alias_of);
        return &ftypes[i];
    }
    return NULL;
}

const char *qr_ftype_names(void) {
    return "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K_S, Q3_K_M, Q3_K_L, Q4_K_S, Q4_K_M, Q5_K_S, "
           "Q5_K_M, Q6_K, MXFP4, MXFP4_MOE (Q3_K, Q4_K, Q5_K = the _M mixes)";
}

/* ---- tensor order and categories ---------------------------------------------------------- */

/* Block number of "blk.N.xxx", or -1. */
static int block_of(const char *name) {
    if (strncmp(name, "blk.", 4)) return -1;
    const char *p = name + 4;
    if (*p < '0' || *p > '9') return -1;
    long v = strtol(p, NULL, 10);
    return v > 1000000 ? 1000000 : (int)v;
}

int qr_quant_tensor_order_cmp(const char *a, const char *b) {
    int la = block_of(a), lb = block_of(b);
    if (la != lb) return la < lb ? -1 : 1;
    return strcmp(a, b);
}

typedef enum category {
    CAT_TOKEN_EMBD, CAT_ATTN_Q, CAT_ATTN_V, CAT_ATTN_K, CAT_ATTN_QKV, CAT_ATTN_KV_B, CAT_ATTN_OUTPUT,
    CAT_FFN_UP, CAT_FFN_GATE, CAT_FFN_DOWN, CAT_OUTPUT, CAT_OTHER,
} category;

static category category_of(const char *name) {
    if (!strcmp(name, "output.weight")) return CAT_OUTPUT;
    if (!strcmp(name, "token_embd.weight") || !strcmp(name, "per_layer_token_embd.weight")) return CAT_TOKEN_EMBD;
    if (strstr(name, "attn_qkv.weight")) return CAT_ATTN_QKV;
    if (strstr(name, "attn_kv_b.weight")) return CAT_ATTN_KV_B;
    if (strstr(name, "attn_v.weight")) return CAT_ATTN_V;
    if (strstr(name, "attn_k.weight")) return CAT_ATTN_K;
    if (strstr(name, "attn_q.weight")) return CAT_ATTN_Q;
    if (strstr(name, "attn_output.weight")) return CAT_ATTN_OUTPUT;
    if (strstr(name, "ffn_up")) return CAT_FFN_UP;
    if (strstr(name, "ffn_gate")) return CAT_FFN_GATE;
    if (strstr(name, "ffn_down")) return CAT_FFN_DOWN;
    return CAT_OTHER;
}

static bool is_attn_v_like(category c) { return c == CAT_ATTN_V || c == CAT_ATTN_QKV || c == CAT_ATTN_KV_B; }

/* Name fragments of 2-D tensors llama-quantize never quantizes. */
static const char *const never_quantized[] = {
    "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel", "per_layer_model_proj",
    "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight", "indexer.q_proj.weight",
    "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight", "time_mix_w2.weight",
    "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight", "time_mix_a0.weight",
    "time_mix_a1.weight", "time_mix_a2.weight", "time_mix_g1.weight", "time_mix_g2.weight",
    "time_mix_decay_w1.weight", "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight", "attn_rel_b.weight",
    ".position_embd", "sam.pos_embd", "sam.neck.", "sam.net_", ".rel_pos", ".patch_embd", ".patch_merger",
    "a.rvq.codebook", "mm.a.code_embd",
};

bool qr_quant_tensor_allowed(const char *name, uint32_t n_dims) {
    if (n_dims < 2) return false;
    size_t n = strlen(name);
    if (n < 6 || strcmp(name + n - 6, "weight")) return false;
    if (!strcmp(name, "position_embd.weight") || !strcmp(name, "token_types.weight")) return false;
    for (size_t i = 0; i < sizeof never_quantized / sizeof never_quantized[0]; i++)
        if (strstr(name, never_quantized[i])) return false;
    return true;
}

/* ---- the plan ------------------------------------------------------------------------------- */

void qr_quant_plan_init(qr_quant_plan *p, const qr_ftype_info *ft, bool pure, const qr_quant_model_info *model,
                        const char *const *names, size_t n) {
    memset(p, 0, sizeof *p);
    p->ftype = ft;
    p->pure = pure || ft->pure;
    p->model = *model;
    if (p->model.n_head_kv <= 0) p->model.n_head_kv = p->model.n_head;
    for (size_t i = 0; i < n; i++) {
        category c = category_of(names[i]);
        if (is_attn_v_like(c)) p->n_attention_wv++;
        if (c == CAT_OUTPUT) p->has_output = true;
    }
}

static bool use_more_bits(int i_layer, int n_layers) {
    return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

static bool type_is_quantized(qr_type t) { return qr_type_valid((uint32_t)t) && qr_type_table[t].quantized; }
static int64_t block_size(qr_type t) { return qr_type_table[t].block_size; }

/* llama_tensor_get_type_impl for our file types. */
static qr_type mix_rules(qr_quant_plan *p, qr_type t, const char *name, const int64_t *ne, uint32_t n_dims, category cat) {
    const int ft = p->ftype->llama_ftype;
    const bool falcon = !strcmp(p->model.arch, "falcon");
    const int n_expert = p->model.n_expert > 1 ? p->model.n_expert : 1;
    const int n_gqa = p->model.n_head_kv > 0 ? p->model.n_head / p->model.n_head_kv : 0;
    const bool is_70b = !strcmp(p->model.arch, "llama") && p->model.n_layer == 80 && p->model.n_head != p->model.n_head_kv;
    /* layer of a per-layer tensor: the running counter, or the block number for MoE models */
    int blk = block_of(name);
#define LAYER_OF(counter) (n_expert > 1 && blk >= 0 ? blk : (counter))

    if (cat == CAT_OUTPUT || (!p->has_output && cat == CAT_TOKEN_EMBD)) {
        if (ft == FT_MXFP4_MOE) t = QR_TYPE_Q8_0;
        else if (falcon || ne[0] % block_size(t) != 0) t = QR_TYPE_Q8_0;
        else if (t != QR_TYPE_Q8_0) t = QR_TYPE_Q6_K;
    } else if (ft == FT_MXFP4_MOE) {
        t = n_dims >= 3 && ne[2] > 1 ? QR_TYPE_MXFP4 : QR_TYPE_Q8_0;
    } else if (cat == CAT_TOKEN_EMBD) {
        /* only the IQ/TQ mixes change it */
    } else if (is_attn_v_like(cat)) {
        int i = p->i_attention_wv, n = p->n_attention_wv;
        if (ft == FT_Q2_K) t = n_gqa >= 4 ? QR_TYPE_Q4_K : QR_TYPE_Q3_K;
        else if (ft == FT_Q3_K_M) t = i < 2 ? QR_TYPE_Q5_K : QR_TYPE_Q4_K;
        else if (ft == FT_Q3_K_L) t = QR_TYPE_Q5_K;
        else if ((ft == FT_Q4_K_M || ft == FT_Q5_K_M) && use_more_bits(i, n)) t = QR_TYPE_Q6_K;
        else if (ft == FT_Q4_K_S && i < 4) t = QR_TYPE_Q5_K;
        if (is_70b && (t == QR_TYPE_Q3_K || t == QR_TYPE_Q4_K)) t = QR_TYPE_Q5_K;
        if (p->model.n_expert == 8) t = QR_TYPE_Q8_0;
        p->i_attention_wv++;
    } else if (cat == CAT_ATTN_K) {
        if (p->model.n_expert == 8) t = QR_TYPE_Q8_0;
    } else if (cat == CAT_ATTN_Q) {
        /* only the IQ3 mixes change it */
    } else if (cat == CAT_FFN_DOWN) {
        int i = LAYER_OF(p->i_ffn_down), n = p->model.n_layer;
        if (ft == FT_Q2_K) t = QR_TYPE_Q3_K;
        else if (ft == FT_Q3_K_M)
            t = i < n / 16 ? QR_TYPE_Q5_K : (!falcon || use_more_bits(i, n)) ? QR_TYPE_Q4_K : QR_TYPE_Q3_K;
        else if (ft == FT_Q3_K_L) t = falcon ? QR_TYPE_Q4_K : QR_TYPE_Q5_K;
        else if (ft == FT_Q4_K_M) {
            if (falcon) t = i < n / 16 ? QR_TYPE_Q6_K : use_more_bits(i, n) ? QR_TYPE_Q5_K : QR_TYPE_Q4_K;
            else if (use_more_bits(i, n)) t = QR_TYPE_Q6_K;
        } else if (ft == FT_Q5_K_M && use_more_bits(i, n)) t = QR_TYPE_Q6_K;
        else if (ft == FT_Q4_K_S && !falcon && i < n / 8) t = QR_TYPE_Q5_K;
        p->i_ffn_down++;
    } else if (cat == CAT_ATTN_OUTPUT) {
        if (!falcon) {
            if (p->model.n_expert == 8) {
                if (ft == FT_Q2_K || ft == FT_Q3_K_S || ft == FT_Q3_K_M || ft == FT_Q4_K_S || ft == FT_Q4_K_M)
                    t = QR_TYPE_Q5_K;
            } else {
                if (ft == FT_Q2_K) t = QR_TYPE_Q3_K;
                else if (ft == FT_Q3_K_M) t = QR_TYPE_Q4_K;
                else if (ft == FT_Q3_K_L) t = QR_TYPE_Q5_K;
            }
        } else if (ft == FT_Q3_K_L) {
            t = QR_TYPE_Q4_K;
        }
    } else if (cat == CAT_ATTN_QKV) {
        if (ft == FT_Q3_K_M || ft == FT_Q3_K_L) t = QR_TYPE_Q4_K;
        else if (ft == FT_Q4_K_M) t = QR_TYPE_Q5_K;
        else if (ft == FT_Q5_K_M) t = QR_TYPE_Q6_K;
    } else if (cat == CAT_FFN_GATE) {
        p->i_ffn_gate++;
    } else if (cat == CAT_FFN_UP) {
        p->i_ffn_up++;
    }
#undef LAYER_OF
    return t;
}

/* A quant whose block does not divide the row length falls back to a compatible one. */
static qr_type fallback(qr_quant_plan *p, const char *name, int64_t ncols, qr_type t, char *note, size_t note_len) {
    if (ncols % block_size(t) == 0) return t;
    p->n_fallback++;
    qr_type r;
    switch (t) {
    case QR_TYPE_Q2_K: case QR_TYPE_Q3_K: case QR_TYPE_TQ1_0: case QR_TYPE_TQ2_0: r = QR_TYPE_Q4_0; break;
    case QR_TYPE_Q4_K: r = QR_TYPE_Q5_0; break;
    case QR_TYPE_Q5_K: r = QR_TYPE_Q5_1; break;
    case QR_TYPE_Q6_K: r = QR_TYPE_Q8_0; break;
    default: r = QR_TYPE_F16; break; /* llama-quantize refuses here; F16 keeps the model usable */
    }
    if (ncols % block_size(r) != 0) r = QR_TYPE_F16;
    if (note && note_len)
        snprintf(note, note_len, "%s: row length %lld not divisible by %lld (%s) -> %s", name, (long long)ncols,
                 (long long)block_size(t), qr_type_name(t), qr_type_name(r));
    return r;
}

qr_type qr_quant_plan_pick(qr_quant_plan *p, const char *name, uint32_t n_dims, const int64_t *ne, qr_type cur_type,
                           char *note, size_t note_len) {
    if (note && note_len) note[0] = 0;
    /* ggml_n_dims: trailing dimensions of size 1 do not count */
    uint32_t eff = n_dims;
    while (eff > 1 && ne[eff - 1] == 1) eff--;
    if (!qr_quant_tensor_allowed(name, eff)) return cur_type;
    qr_type t = p->ftype->base;
    if (!type_is_quantized(t)) return t;
    category cat = category_of(name);
    if (!p->pure) t = mix_rules(p, t, name, ne, n_dims, cat);
    return fallback(p, name, ne[0], t, note, note_len);
}
