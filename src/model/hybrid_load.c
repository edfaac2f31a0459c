/* hybrid_load.c — hyper-parameters and weights of the MoE and hybrid families (hybrid.h): Mixtral
 * (llama with ffn_*_exps), granite, granitehybrid, nemotron_h(_moe) and gpt-oss, with llama.cpp's
 * key and tensor names. The common hyper-parameters (m->hp) are loaded first by model_load.c; here
 * the per-layer pattern (which layers are Mamba2, attention, FFN-only) comes from the per-layer
 * head_count_kv / feed_forward_length arrays, never from a hard-coded pattern. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "quant/quant.h"
#include "util/util.h"

#define XNAME_CAP 64

typedef struct xloader {
    qr_model *m;
    const qr_gguf *g;
    char *err;
    size_t err_len;
} xloader;

/* ---- metadata ---- */

/* Integer {arch}.suffix (scalar, or element il of a per-layer array when il >= 0; il < 0 on an
 * array: its first element). *found tells whether the key exists. */
static qr_status xget_int(xloader *L, const char *suffix, int il, int64_t *out, bool *found) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", L->m->arch->name, suffix);
    const qr_gguf_value *v = qr_gguf_get(L->g, key);
    *found = v != NULL;
    if (!v) return QR_OK;
    if (v->type == QR_GGUF_ARRAY) {
        const uint64_t i = il < 0 ? 0 : (uint64_t)il;
        if (v->arr.elem_type == QR_GGUF_STRING || v->arr.elem_type == QR_GGUF_ARRAY || v->arr.elem_type == QR_GGUF_F32 ||
            v->arr.elem_type == QR_GGUF_F64 || i >= v->arr.count)
            return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: metadata %s: expected %d integers", L->m->path, key,
                           L->m->hp.n_layer);
        *out = qr_gguf_arr_i64(v, i);
        return QR_OK;
    }
    uint64_t u;
    int32_t i32;
    if (qr_gguf_get_i32(L->g, key, &i32)) *out = i32;
    else if (qr_gguf_get_u64(L->g, key, &u) && u <= (uint64_t)INT64_MAX) *out = (int64_t)u;
    else return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: metadata %s: expected an integer", L->m->path, key);
    return QR_OK;
}

/* Required (or optional with default) integer in [lo, hi]. */
static qr_status xint(xloader *L, const char *suffix, bool required, int64_t lo, int64_t hi, int64_t dflt, int32_t *out) {
    int64_t v = dflt;
    bool found;
    qr_status st = xget_int(L, suffix, -1, &v, &found);
    if (st != QR_OK) return st;
    if (!found) {
        if (required)
            return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: missing metadata key %s.%s (required by %s)",
                           L->m->path, L->m->arch->name, suffix, L->m->arch->name);
        v = dflt;
    }
    if (v < lo || v > hi)
        return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: metadata %s.%s = %lld is out of range [%lld, %lld]",
                       L->m->path, L->m->arch->name, suffix, (long long)v, (long long)lo, (long long)hi);
    *out = (int32_t)v;
    return QR_OK;
}

static qr_status xfloat(xloader *L, const char *suffix, float dflt, float *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", L->m->arch->name, suffix);
    *out = dflt;
    if (!qr_gguf_get(L->g, key)) return QR_OK;
    if (!qr_gguf_get_f32(L->g, key, out) || !isfinite(*out))
        return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: metadata %s: expected a finite number", L->m->path, key);
    return QR_OK;
}

static bool xbool(xloader *L, const char *suffix, bool dflt) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", L->m->arch->name, suffix);
    bool b = dflt;
    if (!qr_gguf_get_bool(L->g, key, &b)) return dflt;
    return b;
}

/* ---- tensors ---- */

typedef enum xuse { X_MATMUL, X_F32, X_TABLE } xuse;

static bool xtype_ok(qr_type t, xuse use) {
    if (use == X_F32) return t == QR_TYPE_F32;
    const qr_quant_traits *tr = qr_quant_traits_best(t);
    if (!tr) return false;
    if (use == X_TABLE) return t == QR_TYPE_F32 || tr->to_float;
    if (!tr->vec_dot) return false;
    if (tr->vec_dot_type == QR_TYPE_F32) return true;
    const qr_quant_traits *vt = qr_quant_traits_best(tr->vec_dot_type);
    return vt && vt->from_float;
}

static char *xname_slot(qr_model *m) {
    if (m->name_used >= m->name_cap) return NULL;
    return m->name_arena + (size_t)m->name_used++ * XNAME_CAP;
}

/* Binds tensor `name` to *w with shape {ne0, ne1, ne2} (ne1/ne2 = 1 for fewer dims; a tensor of
 * shape {1, n} also binds as a vector {n} when ne0 == n and ne1 == 1). required false: a missing
 * tensor leaves w->host NULL. */
static qr_status xbind(xloader *L, const char *name, bool required, int64_t ne0, int64_t ne1, int64_t ne2, xuse use,
                       qr_weight *w) {
    qr_model *m = L->m;
    memset(w, 0, sizeof *w);
    const qr_gguf_tensor *t = qr_gguf_get_tensor(L->g, name);
    if (!t) {
        if (!required) return QR_OK;
        return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: missing tensor %s (required by architecture %s)",
                       m->path, name, m->arch->name);
    }
    const int64_t n_all = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
    bool ok = t->ne[0] == ne0 && t->ne[1] == ne1 && t->ne[2] == ne2 && t->ne[3] == 1;
    if (!ok && ne1 == 1 && ne2 == 1 && t->ne[0] == 1 && n_all == ne0 && use == X_F32) ok = true; /* {1, n} */
    if (!ok)
        return qr_errf(L->err, L->err_len, QR_ERR_FORMAT,
                       "%s: tensor %s has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld] from the metadata",
                       m->path, name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                       (long long)t->ne[3], (long long)ne0, (long long)ne1, (long long)ne2);
    if (!xtype_ok(t->type, use))
        return qr_errf(L->err, L->err_len, QR_ERR_UNSUPPORTED, "%s: tensor %s has type %s, which cannot be used as %s",
                       m->path, name, qr_type_name(t->type),
                       use == X_F32 ? "an F32 vector" : use == X_TABLE ? "an embedding table" : "a matmul weight");
    const size_t rb = qr_type_row_size(t->type, ne0);
    if (rb == 0 || rb * (size_t)(n_all / ne0) != t->nbytes)
        return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: tensor %s: %llu bytes do not match its shape and type %s",
                       m->path, name, (unsigned long long)t->nbytes, qr_type_name(t->type));
    char *slot = xname_slot(m);
    if (!slot) return qr_errf(L->err, L->err_len, QR_ERR_INTERNAL, "%s: tensor name storage full", m->path);
    snprintf(slot, XNAME_CAP, "%s", name);
    *w = (qr_weight){.name = slot, .type = t->type, .ne = {ne0, n_all / ne0 / ne2, ne2, 1}, .row_bytes = rb,
                     .host = t->data};
    return QR_OK;
}

/* "blk.<il>.<base>.<suffix>" (suffix NULL: no suffix, as ssm_a / ssm_d). */
static void lname(char *buf, size_t cap, int il, const char *base, const char *suffix) {
    if (suffix) snprintf(buf, cap, "blk.%d.%s.%s", il, base, suffix);
    else snprintf(buf, cap, "blk.%d.%s", il, base);
}

/* ---- the loader ---- */

static bool has_tensor_prefix(const qr_gguf *g, const char *needle) {
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        char tmp[96];
        qr_gguf_str_copy(g->tensors[i].name, tmp, sizeof tmp);
        if (strstr(tmp, needle)) return true;
    }
    return false;
}

static qr_status load_x_hparams(xloader *L) {
    qr_model *m = L->m;
    qr_hparams *h = &m->hp;
    const qr_arch a = m->arch->arch;
    qr_status st;
#define TRY(e)                                                                                                         \
    do {                                                                                                               \
        if ((st = (e)) != QR_OK) return st;                                                                            \
    } while (0)
    /* experts: expert_count 0 or absent = dense; a file with expert tensors must say how many */
    TRY(xint(L, "expert_count", false, 0, 4096, 0, &h->n_expert));
    const bool exps = has_tensor_prefix(L->g, "_exps.");
    if (exps && h->n_expert == 0)
        return qr_errf(L->err, L->err_len, QR_ERR_FORMAT,
                       "%s: the file has expert tensors (ffn_*_exps) but metadata %s.expert_count is 0 or missing: it "
                       "must be >= 1", m->path, m->arch->name);
    if (a == QR_ARCH_GPT_OSS && h->n_expert == 0)
        return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: metadata %s.expert_count must be >= 1 (gpt-oss is MoE)",
                       m->path, m->arch->name);
    if (h->n_expert > 0) {
        TRY(xint(L, "expert_used_count", true, 1, 4096, 0, &h->n_expert_used));
        if (h->n_expert_used > h->n_expert)
            return qr_errf(L->err, L->err_len, QR_ERR_FORMAT,
                           "%s: metadata %s.expert_used_count = %d exceeds %s.expert_count = %d (top-k > experts)",
                           m->path, m->arch->name, h->n_expert_used, m->arch->name, h->n_expert);
        TRY(xint(L, "expert_feed_forward_length", a == QR_ARCH_GPT_OSS, 1, 1 << 22, m->hp.n_ff, &h->n_ff_exp));
        /* llama.cpp sizes the experts of llama (Mixtral) and granite by feed_forward_length */
        if (a == QR_ARCH_LLAMA || a == QR_ARCH_GRANITE || a == QR_ARCH_GRANITE_HYBRID) h->n_ff_exp = m->hp.n_ff;
    }
    TRY(xint(L, "expert_shared_feed_forward_length", false, 0, 1 << 22, 0, &h->n_ff_shexp));
    h->gating = QR_MOE_SOFTMAX;
    h->norm_w = true; /* Mixtral, granite MoE */
    h->w_scale = 1.0f;
    h->expert_act = QR_GLU_SWIGLU;
    if (a == QR_ARCH_GPT_OSS) {
        h->gating = QR_MOE_SOFTMAX_WEIGHT;
        h->norm_w = false;
        h->expert_act = QR_GLU_SWIGLU_OAI;
    } else if (a == QR_ARCH_NEMOTRON_H || a == QR_ARCH_NEMOTRON_H_MOE) {
        h->gating = QR_MOE_SIGMOID;
        h->norm_w = xbool(L, "expert_weights_norm", false);
        TRY(xfloat(L, "expert_weights_scale", 1.0f, &h->w_scale));
        if (h->w_scale == 0.0f) h->w_scale = 1.0f;
        h->expert_act = QR_GLU_RELU2;
    }
    /* Mamba2 */
    if (a == QR_ARCH_GRANITE_HYBRID || a == QR_ARCH_NEMOTRON_H || a == QR_ARCH_NEMOTRON_H_MOE) {
        qr_ssm_params *p = &h->ssm;
        int32_t v;
        TRY(xint(L, "ssm.conv_kernel", true, 2, 16, 0, &v));
        p->d_conv = v;
        TRY(xint(L, "ssm.inner_size", true, 1, 1 << 20, 0, &v));
        p->d_inner = v;
        TRY(xint(L, "ssm.state_size", true, 1, 1024, 0, &v));
        p->d_state = v;
        TRY(xint(L, "ssm.time_step_rank", true, 1, 1 << 16, 0, &v));
        p->n_head = v;
        TRY(xint(L, "ssm.group_count", true, 1, 1 << 16, 0, &v));
        p->n_group = v;
        if (p->d_inner % p->n_head || p->n_head % p->n_group)
            return qr_errf(L->err, L->err_len, QR_ERR_FORMAT,
                           "%s: ssm.inner_size %d must be a multiple of ssm.time_step_rank %d, itself a multiple of "
                           "ssm.group_count %d", m->path, p->d_inner, p->n_head, p->n_group);
        p->head_dim = p->d_inner / p->n_head;
        p->conv_dim = p->d_inner + 2 * p->n_group * p->d_state;
        h->has_ssm = true;
    }
    /* granite multipliers */
    if (a == QR_ARCH_GRANITE || a == QR_ARCH_GRANITE_HYBRID) {
        TRY(xfloat(L, "embedding_scale", 0.0f, &h->f_embedding_scale));
        TRY(xfloat(L, "residual_scale", 0.0f, &h->f_residual_scale));
        TRY(xfloat(L, "logit_scale", 0.0f, &h->f_logit_scale));
        h->use_rope = xbool(L, "rope.scaling.finetuned", true);
    } else {
        h->use_rope = a != QR_ARCH_NEMOTRON_H && a != QR_ARCH_NEMOTRON_H_MOE;
    }
#undef TRY
    return QR_OK;
}

/* Which layers are Mamba2 / attention / FFN-only (from the per-layer head_count_kv and
 * feed_forward_length arrays, as llama.cpp). */
static qr_status load_layer_kinds(xloader *L) {
    qr_model *m = L->m;
    const qr_arch a = m->arch->arch;
    qr_status st;
    for (int il = 0; il < m->hp.n_layer; il++) {
        qr_layer *lx = &m->layers[il];
        lx->kind = QR_LAYER_ATTN;
        lx->n_ff = m->hp.n_ff;
        if (!m->hp.has_ssm) continue;
        int64_t hkv = m->hp.n_head_kv, ff = m->hp.n_ff;
        bool found;
        if ((st = xget_int(L, "attention.head_count_kv", il, &hkv, &found)) != QR_OK) return st;
        if ((st = xget_int(L, "feed_forward_length", il, &ff, &found)) != QR_OK) return st;
        if (ff < 0 || ff > m->hp.n_ff)
            return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: feed_forward_length of layer %d is %lld", m->path, il,
                           (long long)ff);
        lx->n_ff = (int32_t)ff;
        if (a == QR_ARCH_GRANITE_HYBRID) lx->kind = hkv == 0 ? QR_LAYER_SSM : QR_LAYER_ATTN;
        else lx->kind = hkv == 0 && ff == 0 ? QR_LAYER_SSM : ff == 0 ? QR_LAYER_ATTN : QR_LAYER_FFN;
        if (lx->kind == QR_LAYER_ATTN && hkv != m->hp.n_head_kv)
            return qr_errf(L->err, L->err_len, QR_ERR_UNSUPPORTED,
                           "%s: attention layer %d has %lld kv heads, others %d: per-layer head counts are not supported",
                           m->path, il, (long long)hkv, m->hp.n_head_kv);
    }
    return QR_OK;
}

static qr_status bind_ffn_moe(xloader *L, int il, bool gate_needed) {
    qr_model *m = L->m;
    const qr_hparams *h = &m->hp;
    qr_layer *lx = &m->layers[il];
    const int64_t E = m->hp.n_embd, NE = h->n_expert, F = h->n_ff_exp;
    char n[XNAME_CAP];
    qr_status st;
#define B(base, sfx, req, a0, a1, a2, use, w)                                                                          \
    do {                                                                                                               \
        lname(n, sizeof n, il, base, sfx);                                                                             \
        if ((st = xbind(L, n, req, a0, a1, a2, use, w)) != QR_OK) return st;                                     \
    } while (0)
    B("ffn_gate_inp", "weight", true, E, NE, 1, X_MATMUL, &lx->gate_inp);
    B("ffn_gate_inp", "bias", false, NE, 1, 1, X_F32, &lx->gate_inp_b);
    B("exp_probs_b", "bias", false, NE, 1, 1, X_F32, &lx->exp_probs_b);
    B("ffn_up_exps", "weight", true, E, F, NE, X_MATMUL, &lx->up_exps);
    B("ffn_gate_exps", "weight", gate_needed, E, F, NE, X_MATMUL, &lx->gate_exps);
    B("ffn_down_exps", "weight", true, F, E, NE, X_MATMUL, &lx->down_exps);
    B("ffn_up_exps", "bias", false, F, NE, 1, X_F32, &lx->up_exps_b);
    B("ffn_gate_exps", "bias", false, F, NE, 1, X_F32, &lx->gate_exps_b);
    B("ffn_down_exps", "bias", false, E, NE, 1, X_F32, &lx->down_exps_b);
    if (h->n_ff_shexp > 0) {
        const int64_t S = h->n_ff_shexp;
        B("ffn_up_shexp", "weight", true, E, S, 1, X_MATMUL, &lx->up_shexp);
        B("ffn_gate_shexp", "weight", gate_needed, E, S, 1, X_MATMUL, &lx->gate_shexp);
        B("ffn_down_shexp", "weight", true, S, E, 1, X_MATMUL, &lx->down_shexp);
    }
#undef B
    return QR_OK;
}

qr_status qr_model_x_load(qr_model *m, char *err, size_t err_len) {
    const qr_hparams *hp = &m->hp;
    const qr_arch a = m->arch->arch;
    xloader L0 = {.m = m, .g = m->gguf, .err = err, .err_len = err_len}, *L = &L0;
    if (a == QR_ARCH_LLAMA) { /* Mixtral when it has experts, else the generic llama path */
        char key[64];
        uint32_t ne = 0;
        snprintf(key, sizeof key, "%s.expert_count", m->arch->name);
        const bool any = qr_gguf_get_u32(m->gguf, key, &ne) && ne > 0;
        if (!any && !has_tensor_prefix(m->gguf, "_exps.")) return QR_ERR_NOT_FOUND;
    }
    const int nl = hp->n_layer;
    qr_status st;
#define TRY(e)                                                                                                         \
    do {                                                                                                               \
        if ((st = (e)) != QR_OK) return st;                                                                            \
    } while (0)
    TRY(load_x_hparams(L));
    TRY(load_layer_kinds(L));
    const qr_hparams *h = hp;
    const int64_t E = hp->n_embd, V = hp->n_vocab;
    /* globals */
    TRY(xbind(L, "token_embd.weight", true, E, V, 1, X_TABLE, &m->tok_embd));
    TRY(xbind(L, "output_norm.weight", true, E, 1, 1, X_F32, &m->output_norm));
    TRY(xbind(L, "output.weight", false, E, V, 1, X_MATMUL, &m->output));
    if (!m->output.host) {
        if (!xtype_ok(m->tok_embd.type, X_MATMUL))
            return qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "%s: no output.weight, and token_embd.weight (%s) cannot be "
                           "used as the output matrix", m->path, qr_type_name(m->tok_embd.type));
        m->output = m->tok_embd;
    }
    TRY(xbind(L, "rope_freqs.weight", false, hp->n_rot / 2, 1, 1, X_F32, &m->rope_freqs));
    if (a == QR_ARCH_NEMOTRON) TRY(xbind(L, "output_norm.bias", true, E, 1, 1, X_F32, &m->output_norm_b));
    const int64_t QD = (int64_t)hp->n_head * hp->head_dim_k, KD = (int64_t)hp->n_head_kv * hp->head_dim_k,
                  VD = (int64_t)hp->n_head_kv * hp->head_dim_v, OD = (int64_t)hp->n_head * hp->head_dim_v;
    char n[XNAME_CAP];
#define G(base, sfx, req, a0, a1, use, w)                                                                              \
    do {                                                                                                               \
        lname(n, sizeof n, il, base, sfx);                                                                             \
        TRY(xbind(L, n, req, a0, a1, 1, use, w));                                                                      \
    } while (0)
#define X(base, sfx, req, a0, a1, use, w)                                                                              \
    do {                                                                                                               \
        lname(n, sizeof n, il, base, sfx);                                                                             \
        TRY(xbind(L, n, req, a0, a1, 1, use, w));                                                                      \
    } while (0)
    for (int il = 0; il < nl; il++) {
        qr_layer *l = &m->layers[il], *lx = l;
        G("attn_norm", "weight", true, E, 1, X_F32, &l->attn_norm);
        if (a == QR_ARCH_NEMOTRON) X("attn_norm", "bias", true, E, 1, X_F32, &lx->attn_norm_b);
        if (lx->kind == QR_LAYER_SSM) {
            const qr_ssm_params *p = &h->ssm;
            const int64_t d_in_proj = 2 * (int64_t)p->d_inner + 2 * (int64_t)p->n_group * p->d_state + p->n_head;
            X("ssm_in", "weight", true, E, d_in_proj, X_MATMUL, &lx->ssm_in);
            X("ssm_conv1d", "weight", true, p->d_conv, p->conv_dim, X_F32, &lx->ssm_conv1d);
            X("ssm_conv1d", "bias", false, p->conv_dim, 1, X_F32, &lx->ssm_conv1d_b);
            X("ssm_dt", "bias", true, p->n_head, 1, X_F32, &lx->ssm_dt_b);
            X("ssm_a", NULL, true, p->n_head, 1, X_F32, &lx->ssm_a);
            X("ssm_d", NULL, true, p->n_head, 1, X_F32, &lx->ssm_d);
            lname(n, sizeof n, il, "ssm_norm", "weight");
            TRY(xbind(L, n, false, p->d_inner / p->n_group, p->n_group, 1, X_F32, &lx->ssm_norm));
            if (lx->ssm_norm.host) /* one F32 vector of d_inner: group g's gains at [g * d_inner / n_group] */
                lx->ssm_norm.ne[0] = p->d_inner, lx->ssm_norm.ne[1] = 1, lx->ssm_norm.row_bytes = (size_t)p->d_inner * 4;
            X("ssm_out", "weight", true, p->d_inner, E, X_MATMUL, &lx->ssm_out);
        } else if (lx->kind == QR_LAYER_ATTN) {
            G("attn_q", "weight", true, E, QD, X_MATMUL, &l->attn_q);
            G("attn_k", "weight", true, E, KD, X_MATMUL, &l->attn_k);
            G("attn_v", "weight", true, E, VD, X_MATMUL, &l->attn_v);
            G("attn_output", "weight", true, OD, E, X_MATMUL, &l->attn_out);
            X("attn_q", "bias", false, QD, 1, X_F32, &lx->attn_q_b);
            X("attn_k", "bias", false, KD, 1, X_F32, &lx->attn_k_b);
            X("attn_v", "bias", false, VD, 1, X_F32, &lx->attn_v_b);
            X("attn_output", "bias", false, E, 1, X_F32, &lx->attn_out_b);
            X("attn_sinks", "weight", a == QR_ARCH_GPT_OSS, hp->n_head, 1, X_F32, &lx->attn_sinks);
            if (a == QR_ARCH_GPT_OSS) G("post_attention_norm", "weight", true, E, 1, X_F32, &l->attn_post_norm);
        }
        /* FFN: attention layers of every arch but nemotron_h, nemotron_h's FFN layers */
        const bool nemo = a == QR_ARCH_NEMOTRON_H || a == QR_ARCH_NEMOTRON_H_MOE;
        const bool relu2 = nemo || a == QR_ARCH_NEMOTRON; /* up / relu^2 / down, no gate */
        const bool has_ffn = nemo ? lx->kind == QR_LAYER_FFN : (lx->kind == QR_LAYER_ATTN || a == QR_ARCH_GRANITE_HYBRID);
        if (!has_ffn) continue;
        if (!nemo && a != QR_ARCH_GPT_OSS) G("ffn_norm", "weight", true, E, 1, X_F32, &l->ffn_norm);
        if (a == QR_ARCH_NEMOTRON) X("ffn_norm", "bias", true, E, 1, X_F32, &lx->ffn_norm_b);
        lname(n, sizeof n, il, "ffn_gate_inp", "weight");
        const bool moe_layer = h->n_expert > 0 && qr_gguf_get_tensor(m->gguf, n);
        if (h->n_expert > 0 && !moe_layer && (a == QR_ARCH_GPT_OSS || a == QR_ARCH_LLAMA))
            return qr_errf(err, err_len, QR_ERR_FORMAT, "%s: missing tensor %s (expert_count is %d)", m->path, n,
                           h->n_expert);
        if (moe_layer) {
            TRY(bind_ffn_moe(L, il, h->expert_act != QR_GLU_RELU2));
        } else {
            const int64_t F = lx->n_ff;
            if (F < 1)
                return qr_errf(err, err_len, QR_ERR_FORMAT, "%s: layer %d has an FFN of width 0", m->path, il);
            if (!relu2) G("ffn_gate", "weight", true, E, F, X_MATMUL, &l->ffn_gate);
            G("ffn_up", "weight", true, E, F, X_MATMUL, &l->ffn_up);
            G("ffn_down", "weight", true, F, E, X_MATMUL, &l->ffn_down);
            X("ffn_up", "bias", false, F, 1, X_F32, &lx->ffn_up_b);
            X("ffn_down", "bias", false, E, 1, X_F32, &lx->ffn_down_b);
        }
    }
#undef G
#undef X
#undef TRY
    return QR_OK;
}
