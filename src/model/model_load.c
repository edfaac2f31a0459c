/* model_load.c — qr_model_load: every architecture loaded from its row of the arch table (arch.c):
 * GGUF -> hyper-parameters (metadata only, the row's keys) + weight views (zero-copy into the mapping,
 * the row's tensors per layer kind), validated with messages that name the file, the key or tensor, and
 * what was expected; then the backend, which prepares every bound weight. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "quant/quant.h"
#include "tokenizer/tokenizer.h"
#include "util/util.h"

#define NAME_CAP 64 /* bytes per tensor name in the arena */

typedef struct loader {
    qr_model *m;
    const qr_gguf *g;
    const char *arch;
    char *err;
    size_t err_len;
} loader;

#define TRY(x)                                                                                                         \
    do {                                                                                                               \
        if ((st = (x)) != QR_OK) return st;                                                                            \
    } while (0)

static void key_name(const loader *L, const char *suffix, char *buf, size_t cap) {
    snprintf(buf, cap, "%s.%s", L->arch, suffix);
}

/* ---- hyper-parameters ---- */

/* Reads an integer {arch}.suffix that may be a scalar or a per-layer array: element il when il >= 0, else
 * all elements equal (or their maximum with the arch's per_layer_max). Returns QR_ERR_NOT_FOUND silently
 * when absent (callers decide if it is required). */
static qr_status get_int(loader *L, const char *suffix, int il, int64_t *out) {
    char key[128];
    key_name(L, suffix, key, sizeof key);
    const qr_gguf_value *v = qr_gguf_get(L->g, key);
    if (!v) return QR_ERR_NOT_FOUND;
    if (v->type == QR_GGUF_ARRAY) {
        if (v->arr.count == 0 || v->arr.elem_type == QR_GGUF_STRING || v->arr.elem_type == QR_GGUF_ARRAY ||
            v->arr.elem_type == QR_GGUF_F32 || v->arr.elem_type == QR_GGUF_F64 || (il >= 0 && (uint64_t)il >= v->arr.count))
            return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: metadata %s: expected an integer or %d integers",
                           L->m->path, key, L->m->hp.n_layer);
        if (il >= 0) {
            *out = qr_gguf_arr_i64(v, (uint64_t)il);
            return QR_OK;
        }
        int64_t val = qr_gguf_arr_i64(v, 0);
        const bool max = L->m->arch->per_layer_max; /* hybrids: 0 marks layers without attention / FFN */
        for (uint64_t i = 1; i < v->arr.count; i++) {
            const int64_t e = qr_gguf_arr_i64(v, i);
            if (max && e > val) val = e;
            else if (!max && e != val)
                return qr_errf(L->err, L->err_len, QR_ERR_UNSUPPORTED,
                               "%s: metadata %s: per-layer values that differ are not supported", L->m->path, key);
        }
        *out = val;
        return QR_OK;
    }
    uint64_t u;
    int32_t i32;
    if (qr_gguf_get_i32(L->g, key, &i32)) *out = i32;
    else if (qr_gguf_get_u64(L->g, key, &u) && u <= (uint64_t)INT64_MAX) *out = (int64_t)u;
    else
        return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: metadata %s: expected an integer, found %s", L->m->path,
                       key, qr_gguf_vtype_name(v->type));
    return QR_OK;
}

/* Reads one key of the arch table into its field of m->hp (absent and optional: the spec's default). */
static qr_status read_hparam(loader *L, const qr_hparam_spec *s) {
    qr_hparams *hp = &L->m->hp;
    void *field = (char *)hp + s->field;
    char key[128];
    key_name(L, s->key, key, sizeof key);
    const bool present = qr_gguf_get(L->g, key) != NULL;
    if (!present && (s->need == QR_HP_REQ || (s->need == QR_HP_REQ_MOE && hp->n_expert > 0)))
        return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: missing metadata key %s (required by architecture %s)",
                       L->m->path, key, L->arch);
    qr_status st;
    switch (s->type) {
    case QR_HP_INT: {
        int64_t v = (int64_t)s->dflt;
        if (present) {
            TRY(get_int(L, s->key, -1, &v));
            if (v < (int64_t)s->lo || v > (int64_t)s->hi)
                return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: metadata %s = %lld is out of range [%lld, %lld]",
                               L->m->path, key, (long long)v, (long long)s->lo, (long long)s->hi);
        }
        *(int32_t *)field = (int32_t)v;
        break;
    }
    case QR_HP_FLOAT: {
        float v = (float)s->dflt;
        if (present && (!qr_gguf_get_f32(L->g, key, &v) || !isfinite(v)))
            return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: metadata %s: expected a finite number", L->m->path,
                           key);
        *(float *)field = v;
        break;
    }
    case QR_HP_BOOL: {
        bool v = s->dflt != 0;
        if (present && !qr_gguf_get_bool(L->g, key, &v)) v = s->dflt != 0; /* another type: the default */
        *(bool *)field = v;
        break;
    }
    }
    return QR_OK;
}

/* Rope scaling as llama.cpp reads it: rope.scaling.type none / linear (the default) / yarn / longrope, the
 * factor from rope.scaling.factor or the older rope.scale_linear (freq_scale = 1 / factor; type none: 1), the
 * original context length (default context_length: YaRN's correction dims, LongRoPE's long/short choice) and
 * the attention factor: YaRN's magnitude (llama_context's formula: get_mscale(factor) / (1 + 0.1 ln factor),
 * ggml's rope then multiplies back 1 + 0.1 ln factor), times rope.scaling.attn_factor for every type. */
static qr_status load_rope_scaling(loader *L) {
    qr_model *m = L->m;
    qr_hparams *hp = &m->hp;
    qr_status st;
#define F(key, fld, dflt) {key, QR_HP_FLOAT, QR_HP_OPT, offsetof(qr_hparams, fld), 0, 0, dflt}
    static const qr_hparam_spec factor = F("rope.scaling.factor", rope_scale, 0),
                                linear = F("rope.scale_linear", rope_scale, 0),
                                attn_factor = F("rope.scaling.attn_factor", yarn_attn_factor, 1.0),
                                orig_ctx = {"rope.scaling.original_context_length", QR_HP_INT, QR_HP_OPT,
                                            offsetof(qr_hparams, n_ctx_orig), 1, INT32_MAX, 0};
#undef F
    TRY(read_hparam(L, &factor));
    if (hp->rope_scale == 0.0f) TRY(read_hparam(L, &linear));
    const float f = hp->rope_scale;
    hp->rope_scale = f == 0.0f ? 1.0f : 1.0f / f;
    if (!(hp->rope_scale > 0.0f))
        return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: rope scaling factor %g must be > 0", m->path, f);
    TRY(read_hparam(L, &orig_ctx));
    if (hp->n_ctx_orig == 0) hp->n_ctx_orig = hp->n_ctx_train;
    TRY(read_hparam(L, &attn_factor)); /* llama.cpp's rope_attn_factor */
    const float rope_attn_factor = hp->yarn_attn_factor;
    char key[128];
    key_name(L, "rope.scaling.type", key, sizeof key);
    qr_gguf_str stype;
    hp->yarn_ext_factor = 0.0f;
    hp->yarn_attn_factor = 1.0f;
    if (qr_gguf_get_str(L->g, key, &stype)) {
        if (qr_gguf_str_eq(stype, "yarn")) {
            hp->yarn_ext_factor = 1.0f;
        } else if (qr_gguf_str_eq(stype, "none")) {
            hp->rope_scale = 1.0f;
        } else if (!qr_gguf_str_eq(stype, "linear") && !qr_gguf_str_eq(stype, "longrope")) {
            char tmp[64];
            return qr_errf(L->err, L->err_len, QR_ERR_UNSUPPORTED,
                           "%s: %s = '%s' is not supported (none, linear, yarn, longrope)", m->path, key,
                           qr_gguf_str_copy(stype, tmp, sizeof tmp));
        }
    }
    if (hp->yarn_ext_factor != 0.0f) { /* get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim) */
        const float fac = 1.0f / hp->rope_scale, all = hp->yarn_log_mul;
        /* deepseek2: mscale = mscale_all_dim (llama.cpp's special case of DeepSeek-V2's config) */
        const float ms = m->arch->arch == QR_ARCH_DEEPSEEK2 && all != 1.0f ? all : 1.0f;
        float mscale = fac <= 1.0f ? 1.0f : 0.1f * ms * logf(fac) + 1.0f;
        if (all != 0.0f) mscale /= fac <= 1.0f ? 1.0f : 0.1f * all * logf(fac) + 1.0f;
        hp->yarn_attn_factor = mscale * (1.0f / (1.0f + 0.1f * logf(fac)));
    }
    hp->yarn_attn_factor *= rope_attn_factor;
    return QR_OK;
}

/* deepseek2's multi-head latent attention and MoE constants: the MLA form of the file (llama.cpp's: one K head of
 * kv_lora + n_rot, the value the first kv_lora of it), the gating function, the shared expert's width. */
static qr_status load_mla_hparams(loader *L) {
    qr_model *m = L->m;
    qr_hparams *hp = &m->hp;
    if (hp->head_dim_k_mla == 0 || hp->head_dim_v_mla == 0)
        return qr_errf(L->err, L->err_len, QR_ERR_UNSUPPORTED,
                       "%s: a DeepSeek-V2 file without %s.attention.key_length_mla / value_length_mla (the old unsplit "
                       "attn_kv_b form) is not supported: convert the model again with a current convert_hf_to_gguf.py",
                       m->path, L->arch);
    if (hp->n_head_kv != 1 || hp->head_dim_k != hp->kv_lora + hp->n_rot || hp->head_dim_v != hp->kv_lora ||
        hp->head_dim_k_mla <= hp->n_rot)
        return qr_errf(L->err, L->err_len, QR_ERR_FORMAT,
                       "%s: multi-head latent attention needs head_count_kv 1, key_length = kv_lora_rank + "
                       "rope.dimension_count and value_length = kv_lora_rank (got %d, %d, %d; kv_lora_rank %d, rope %d), "
                       "key_length_mla > rope.dimension_count", m->path, hp->n_head_kv, hp->head_dim_k, hp->head_dim_v,
                       hp->kv_lora, hp->n_rot);
    hp->n_ff_shexp = hp->n_expert > 0 ? hp->n_ff_exp * hp->n_expert_shared : 0;
    if (hp->n_expert_groups > 1 &&
        (hp->n_expert % hp->n_expert_groups || hp->n_expert / hp->n_expert_groups < 2 || hp->n_group_used < 1 ||
         hp->n_group_used >= hp->n_expert_groups ||
         hp->n_expert_used > hp->n_group_used * (hp->n_expert / hp->n_expert_groups)))
        return qr_errf(L->err, L->err_len, QR_ERR_FORMAT,
                       "%s: expert_group_count %d / expert_group_used_count %d do not fit %d experts, top-%d", m->path,
                       hp->n_expert_groups, hp->n_group_used, hp->n_expert, hp->n_expert_used);
    return QR_OK;
}

/* Layer il's MLA query weights (deepseek2): attn_q, or attn_q_a with its norm and attn_q_b when q_lora_rank > 0. */
static qr_status check_mla_layer(loader *L, int il) {
    const qr_model *m = L->m;
    const qr_layer *l = &m->layers[il];
    const bool lora = m->hp.q_lora > 0;
    if (lora ? !(l->mla_q_a.host && l->mla_q_a_norm.host && l->mla_q_b.host) : !l->attn_q.host)
        return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: missing tensor blk.%d.%s (required by architecture %s "
                       "with attention.q_lora_rank %d)", m->path, il, lora ? "attn_q_a.weight" : "attn_q.weight",
                       L->arch, m->hp.q_lora);
    return QR_OK;
}

/* True when a tensor name of the file contains needle. */
static bool has_tensor_like(const qr_gguf *g, const char *needle) {
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        char tmp[96];
        qr_gguf_str_copy(g->tensors[i].name, tmp, sizeof tmp);
        if (strstr(tmp, needle)) return true;
    }
    return false;
}

/* The arch's constants, its keys (arch table), then the values derived from them and their checks. */
static qr_status load_hparams(loader *L) {
    qr_model *m = L->m;
    qr_hparams *hp = &m->hp;
    const qr_arch_info *ai = m->arch;
    qr_status st;
    snprintf(hp->arch_name, sizeof hp->arch_name, "%s", ai->name);
    hp->gating = ai->gating;
    hp->norm_w = ai->norm_w;
    hp->expert_act = ai->expert_act;
    hp->w_scale = 1.0f;
    hp->use_rope = true;
    hp->yarn_beta_fast = 32.0f; /* ggml's YaRN ramp, unless the row reads it (mistral3) */
    hp->yarn_beta_slow = 1.0f;
    for (const qr_hparam_spec *const *grp = ai->hparams; *grp; grp++)
        for (const qr_hparam_spec *s = *grp; s->key; s++) TRY(read_hparam(L, s));
    if (hp->n_layer_nextn >= hp->n_layer)
        return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: metadata %s.nextn_predict_layers = %d leaves no layer of %s."
                       "block_count = %d", m->path, L->arch, hp->n_layer_nextn, L->arch, hp->n_layer);
    hp->n_layer -= hp->n_layer_nextn; /* the MTP blocks after the trunk are not run */

    /* attention shapes */
    if (hp->n_head_kv == 0) hp->n_head_kv = hp->n_head;
    if (hp->n_head % hp->n_head_kv)
        return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: head_count %d is not a multiple of head_count_kv %d",
                       m->path, hp->n_head, hp->n_head_kv);
    if (hp->head_dim_k == 0) hp->head_dim_k = hp->n_embd / hp->n_head;
    if (hp->head_dim_v == 0) hp->head_dim_v = hp->n_embd / hp->n_head;
    if (hp->head_dim_k < 1 || hp->head_dim_k > 576 || hp->head_dim_v < 1 || hp->head_dim_v > 576)
        return qr_errf(L->err, L->err_len, QR_ERR_UNSUPPORTED, "%s: head size %d/%d is outside 1..576", m->path,
                       hp->head_dim_k, hp->head_dim_v);
    if (hp->n_rot == 0) hp->n_rot = hp->head_dim_k;
    if (hp->n_rot > hp->head_dim_k)
        return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: metadata %s.rope.dimension_count = %d is out of range "
                       "[2, %d]", m->path, L->arch, hp->n_rot, hp->head_dim_k);
    if (hp->n_rot % 2)
        return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: rope.dimension_count %d is odd", m->path, hp->n_rot);
    if (!(hp->norm_eps > 0.0f && hp->norm_eps < 1.0f))
        return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: the layer norm epsilon %g is not in (0, 1)", m->path,
                       hp->norm_eps);
    if (!(hp->rope_base > 1.0f))
        return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: rope.freq_base %g must be > 1", m->path, hp->rope_base);
    if (ai->arch == QR_ARCH_DEEPSEEK2) {
        TRY(load_mla_hparams(L));
        hp->yarn_log_mul /= 0.1f; /* llama.cpp cancels the converter's factor 0.1 (TAG_DEEPSEEK2_YARN_LOG_MUL_FIX) */
    }
    TRY(load_rope_scaling(L));
    if (ai->arch == QR_ARCH_DEEPSEEK2) { /* the kq scale pre-multiplied by YaRN's mscale^2, llama.cpp's floats */
        const float fs = hp->rope_scale;
        const float attn_factor_org = hp->yarn_attn_factor * (1.0f + 0.1f * logf(1.0f / fs));
        const float mscale = attn_factor_org * (1.0f + 0.1f * hp->yarn_log_mul * logf(1.0f / fs));
        hp->attn_scale = 1.0f * mscale * mscale / sqrtf((float)hp->head_dim_k_mla);
    }
    if (ai->rope_base_swa > 0.0f) hp->rope_base_swa = ai->rope_base_swa;
    else if (hp->rope_base_swa == 0.0f) hp->rope_base_swa = hp->rope_base; /* olmo2: rope.freq_base_swa */
    if (ai->ignore_swa) hp->n_swa = 0; /* phi3: llama.cpp ignores the window of the metadata */
    if (hp->attn_softcap < 0.0f || hp->final_softcap < 0.0f)
        return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: negative logit softcapping", m->path);
    /* attention scale: {arch}.attention.scale when given; gemma3 27B (62 layers) and gemma2 27B (46) use
     * 1/sqrt(n_embd / n_head) (query_pre_attn_scalar), everything else 1/sqrt(key_length) */
    if (hp->attn_scale == 0.0f) {
        hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim_k);
        if ((ai->arch == QR_ARCH_GEMMA3 && hp->n_layer == 62) || (ai->arch == QR_ARCH_GEMMA2 && hp->n_layer == 46))
            hp->attn_scale = 1.0f / sqrtf((float)(hp->n_embd / hp->n_head));
    }
    hp->embd_scale = ai->scale_embd ? sqrtf((float)hp->n_embd) : 1.0f;

    /* experts: expert_count 0 or absent = dense; a file with expert tensors must say how many */
    if (hp->n_expert == 0 && has_tensor_like(L->g, "_exps."))
        return qr_errf(L->err, L->err_len, QR_ERR_FORMAT,
                       "%s: the file has expert tensors (ffn_*_exps) but metadata %s.expert_count is 0 or missing: it "
                       "must be >= 1", m->path, L->arch);
    if (hp->n_expert > 0) {
        if (hp->n_expert_used > hp->n_expert)
            return qr_errf(L->err, L->err_len, QR_ERR_FORMAT,
                           "%s: metadata %s.expert_used_count = %d exceeds %s.expert_count = %d (top-k > experts)",
                           m->path, L->arch, hp->n_expert_used, L->arch, hp->n_expert);
        if (hp->n_ff_exp == 0) hp->n_ff_exp = hp->n_ff;
    }
    if (hp->w_scale == 0.0f) hp->w_scale = 1.0f;

    /* Mamba2 */
    qr_ssm_params *p = &hp->ssm;
    hp->has_ssm = p->n_head > 0;
    if (hp->has_ssm) {
        if (p->d_inner % p->n_head || p->n_head % p->n_group)
            return qr_errf(L->err, L->err_len, QR_ERR_FORMAT,
                           "%s: ssm.inner_size %d must be a multiple of ssm.time_step_rank %d, itself a multiple of "
                           "ssm.group_count %d", m->path, p->d_inner, p->n_head, p->n_group);
        p->head_dim = p->d_inner / p->n_head;
        p->conv_dim = p->d_inner + 2 * p->n_group * p->d_state;
    }
    return QR_OK;
}

/* Which layers use the sliding window: gemma3 every layer but each swa_pattern-th (llama.cpp's
 * set_swa_pattern), or per {arch}.attention.sliding_window_pattern (a period or a bool per layer);
 * llama: all layers when a window is given (Mistral). */
static qr_status load_swa_layers(loader *L) {
    qr_model *m = L->m;
    const int32_t nl = m->hp.n_layer;
    if (m->hp.n_swa <= 0) return QR_OK;
    char key[128];
    key_name(L, "attention.sliding_window_pattern", key, sizeof key);
    const qr_gguf_value *v = qr_gguf_get(L->g, key);
    if (v && v->type == QR_GGUF_ARRAY) {
        if (v->arr.count != (uint64_t)nl || v->arr.elem_type == QR_GGUF_STRING || v->arr.elem_type == QR_GGUF_ARRAY)
            return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: %s must be %d booleans", m->path, key, nl);
        for (int i = 0; i < nl; i++) m->layers[i].swa = qr_gguf_arr_i64(v, (uint64_t)i) != 0;
        return QR_OK;
    }
    int64_t period = m->arch->swa_pattern;
    if (v) {
        qr_status st;
        TRY(get_int(L, "attention.sliding_window_pattern", -1, &period));
        if (period < 0 || period > 4096)
            return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: metadata %s = %lld is out of range [0, 4096]",
                           m->path, key, (long long)period);
    }
    for (int i = 0; i < nl; i++) m->layers[i].swa = period == 0 || (i % period) < period - 1;
    return QR_OK;
}

/* Each layer's kind and FFN width: from the per-layer head_count_kv / feed_forward_length arrays under the
 * arch's layer rule (every layer attention + FFN when it has none). */
static qr_status load_layer_kinds(loader *L) {
    qr_model *m = L->m;
    const qr_layer_rule rule = m->arch->layers;
    qr_status st;
    for (int il = 0; il < m->hp.n_layer; il++) {
        qr_layer *l = &m->layers[il];
        l->kind = QR_LAYER_ATTN;
        l->n_ff = m->hp.n_ff;
        if (rule == QR_LAYERS_ATTN) continue;
        int64_t hkv = m->hp.n_head_kv, ff = m->hp.n_ff;
        if ((st = get_int(L, "attention.head_count_kv", il, &hkv)) != QR_OK && st != QR_ERR_NOT_FOUND) return st;
        if ((st = get_int(L, "feed_forward_length", il, &ff)) != QR_OK && st != QR_ERR_NOT_FOUND) return st;
        if (ff < 0 || ff > m->hp.n_ff)
            return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: feed_forward_length of layer %d is %lld", m->path, il,
                           (long long)ff);
        l->n_ff = (int32_t)ff;
        if (rule == QR_LAYERS_SSM_OR_ATTN) l->kind = hkv == 0 ? QR_LAYER_SSM : QR_LAYER_ATTN;
        else l->kind = hkv == 0 && ff == 0 ? QR_LAYER_SSM : ff == 0 ? QR_LAYER_ATTN : QR_LAYER_FFN;
        if (l->kind == QR_LAYER_ATTN && hkv != m->hp.n_head_kv)
            return qr_errf(L->err, L->err_len, QR_ERR_UNSUPPORTED,
                           "%s: attention layer %d has %lld kv heads, others %d: per-layer head counts are not supported",
                           m->path, il, (long long)hkv, m->hp.n_head_kv);
    }
    return QR_OK;
}

/* ---- weights ---- */

static bool type_ok(qr_type t, qr_tensor_use use) {
    if (use == QR_USE_F32) return t == QR_TYPE_F32;
    if (use == QR_USE_IDS) return t == QR_TYPE_I64;
    const qr_quant_traits *tr = qr_quant_traits_best(t);
    if (!tr) return false;
    if (use == QR_USE_TABLE) return t == QR_TYPE_F32 || tr->to_float;
    if (!tr->vec_dot) return false;
    if (tr->vec_dot_type == QR_TYPE_F32) return true;
    const qr_quant_traits *vt = qr_quant_traits_best(tr->vec_dot_type);
    return vt && vt->from_float;
}

/* The size of dimension d for layer il (il < 0: a model tensor); t: the file's tensor (QR_D_FILE). */
static int64_t dim_size(const qr_model *m, int il, qr_dim d, const qr_gguf_tensor *t) {
    const qr_hparams *hp = &m->hp;
    const qr_ssm_params *p = &hp->ssm;
    const int64_t q = (int64_t)hp->n_head * hp->head_dim_k, k = (int64_t)hp->n_head_kv * hp->head_dim_k,
                  v = (int64_t)hp->n_head_kv * hp->head_dim_v;
    switch (d) {
    case QR_D_1: return 1;
    case QR_D_EMBD: return hp->n_embd;
    case QR_D_VOCAB: return hp->n_vocab;
    case QR_D_Q: return q;
    case QR_D_K: return k;
    case QR_D_V: return v;
    case QR_D_O: return (int64_t)hp->n_head * hp->head_dim_v;
    case QR_D_QKV: return q + k + v;
    case QR_D_HEAD: return hp->n_head;
    case QR_D_HEAD_K: return hp->head_dim_k;
    case QR_D_ROT_HALF: return hp->n_rot / 2;
    case QR_D_FF: return il >= 0 ? m->layers[il].n_ff : hp->n_ff;
    case QR_D_FF2: return 2 * (il >= 0 ? (int64_t)m->layers[il].n_ff : hp->n_ff);
    case QR_D_FF_EXP: return hp->n_ff_exp;
    case QR_D_FF_SHEXP: return hp->n_ff_shexp;
    case QR_D_EXPERT: return hp->n_expert;
    case QR_D_CTX_TRAIN: return hp->n_ctx_train;
    case QR_D_FILE: return t ? t->ne[1] : 1;
    case QR_D_SSM_IN: return 2 * (int64_t)p->d_inner + 2 * (int64_t)p->n_group * p->d_state + p->n_head;
    case QR_D_SSM_CONV: return p->d_conv;
    case QR_D_SSM_CONV_DIM: return p->conv_dim;
    case QR_D_SSM_HEAD: return p->n_head;
    case QR_D_SSM_INNER: return p->d_inner;
    case QR_D_SSM_GROUP_SIZE: return p->n_group ? p->d_inner / p->n_group : 0;
    case QR_D_SSM_GROUP: return p->n_group;
    case QR_D_Q_MLA: return (int64_t)hp->n_head * hp->head_dim_k_mla;
    case QR_D_Q_LORA: return hp->q_lora;
    case QR_D_KV_LORA: return hp->kv_lora;
    case QR_D_KV_A: return (int64_t)hp->kv_lora + hp->n_rot;
    case QR_D_QK_NOPE: return hp->head_dim_k_mla - hp->n_rot;
    case QR_D_V_MLA: return hp->head_dim_v_mla;
    case QR_D_O_MLA: return (int64_t)hp->n_head * hp->head_dim_v_mla;
    case QR_D_EMBD2: return 2 * (int64_t)hp->n_embd;
    case QR_D_TARGET3: return 3 * (int64_t)hp->eagle3_target_embd;
    case QR_D_VOCAB_DRAFT: return hp->n_vocab_draft;
    }
    return 0;
}

static qr_status add_weight(loader *L, qr_weight *w) {
    qr_model *m = L->m;
    if (m->n_weights >= m->cap_weights)
        return qr_errf(L->err, L->err_len, QR_ERR_INTERNAL, "%s: weight list full", m->path);
    m->weights[m->n_weights++] = w;
    return QR_OK;
}

/* Binds tensor `name` to *w, checking its shape is [ne[0], ne[1], ne[2]] (an F32 vector of n may also be
 * stored as [1, n]) and its type suits `use`. A missing tensor: an error when required, else w->host NULL. */
static qr_status bind_tensor(loader *L, const char *name, bool required, const int64_t ne[3], qr_tensor_use use,
                             qr_weight *w) {
    qr_model *m = L->m;
    memset(w, 0, sizeof *w);
    const qr_gguf_tensor *t = qr_gguf_get_tensor(L->g, name);
    if (!t) {
        if (!required) return QR_OK;
        return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: missing tensor %s (required by architecture %s)", m->path,
                       name, L->arch);
    }
    const int64_t n_all = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
    bool ok = t->ne[0] == ne[0] && t->ne[1] == ne[1] && t->ne[2] == ne[2] && t->ne[3] == 1;
    if (!ok && ne[1] == 1 && ne[2] == 1 && t->ne[0] == 1 && n_all == ne[0] && use == QR_USE_F32) ok = true; /* [1, n] */
    if (!ok) {
        char want[64];
        if (ne[2] == 1) snprintf(want, sizeof want, "[%lld, %lld]", (long long)ne[0], (long long)ne[1]);
        else snprintf(want, sizeof want, "[%lld, %lld, %lld]", (long long)ne[0], (long long)ne[1], (long long)ne[2]);
        return qr_errf(L->err, L->err_len, QR_ERR_FORMAT,
                       "%s: tensor %s has shape [%lld, %lld, %lld, %lld], expected %s from the metadata", m->path, name,
                       (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3], want);
    }
    if (!type_ok(t->type, use))
        return qr_errf(L->err, L->err_len, QR_ERR_UNSUPPORTED, "%s: tensor %s has type %s, which cannot be used as %s",
                       m->path, name, qr_type_name(t->type),
                       use == QR_USE_F32   ? "a norm weight or F32 vector (F32 expected)"
                       : use == QR_USE_IDS ? "token ids (I64 expected)"
                       : use == QR_USE_TABLE ? "an embedding table" : "a matmul weight");
    const size_t rb = qr_type_row_size(t->type, ne[0]);
    if (rb == 0 || rb * (size_t)(n_all / ne[0]) != t->nbytes)
        return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: tensor %s: %llu bytes do not match its shape and type %s",
                       m->path, name, (unsigned long long)t->nbytes, qr_type_name(t->type));
    if (m->name_used >= m->name_cap)
        return qr_errf(L->err, L->err_len, QR_ERR_INTERNAL, "%s: tensor name arena full", m->path);
    char *slot = m->name_arena + (size_t)m->name_used++ * NAME_CAP;
    snprintf(slot, NAME_CAP, "%s", name);
    *w = (qr_weight){.name = slot, .type = t->type, .ne = {ne[0], ne[1], ne[2], 1}, .row_bytes = rb, .host = t->data,
                     .host_file = true, .table = use == QR_USE_TABLE};
    return QR_OK;
}

/* Rows [r0, r0 + n) of a bound 2-D weight (or elements of a vector when w->ne[1] == 1) as a view. */
static qr_weight row_view(const qr_weight *w, int64_t r0, int64_t n) {
    qr_weight v = *w;
    if (w->ne[1] == 1) { /* a vector: element range (F32) */
        v.ne[0] = n;
        v.row_bytes = (size_t)n * sizeof(float);
        v.host = (const char *)w->host + (size_t)r0 * sizeof(float);
    } else {
        v.ne[1] = n;
        v.host = (const char *)w->host + (size_t)r0 * w->row_bytes;
    }
    return v;
}

/* Binds one tensor of the arch table for layer il (il < 0: a model tensor) into its field of `base`. */
static qr_status bind_spec(loader *L, const qr_tensor_spec *s, int il, void *base) {
    qr_model *m = L->m;
    qr_status st;
    char name[NAME_CAP];
    if (il >= 0) snprintf(name, sizeof name, "blk.%d.%s", il, s->name);
    else snprintf(name, sizeof name, "%s", s->name);
    const qr_gguf_tensor *t = qr_gguf_get_tensor(L->g, name);
    int64_t ne[3];
    for (int i = 0; i < 3; i++) ne[i] = dim_size(m, il, (qr_dim)s->dims[i], t);
    qr_weight *w = (qr_weight *)((char *)base + s->field);
    if (s->flags & (QR_TS_SPLIT3 | QR_TS_SPLIT2)) { /* q | k | v (gate | up) views of one fused tensor into
                                                     * three (two) consecutive fields */
        qr_weight fused;
        TRY(bind_tensor(L, name, s->flags & QR_TS_REQ, ne, (qr_tensor_use)s->use, &fused));
        if (!fused.host) return QR_OK;
        const bool two = s->flags & QR_TS_SPLIT2;
        const int64_t half = dim_size(m, il, QR_D_FF, t);
        const int64_t n[3] = {two ? half : dim_size(m, il, QR_D_Q, t), two ? half : dim_size(m, il, QR_D_K, t),
                              dim_size(m, il, QR_D_V, t)};
        for (int64_t i = 0, r0 = 0; i < (two ? 2 : 3); r0 += n[i], i++) {
            w[i] = row_view(&fused, r0, n[i]);
            TRY(add_weight(L, &w[i]));
        }
        return QR_OK;
    }
    TRY(bind_tensor(L, name, s->flags & QR_TS_REQ, ne, (qr_tensor_use)s->use, w));
    if (!w->host && (s->flags & QR_TS_TIED)) { /* tied embeddings: the output matrix is token_embd */
        if (!type_ok(m->tok_embd.type, QR_USE_MATMUL))
            return qr_errf(L->err, L->err_len, QR_ERR_UNSUPPORTED,
                           "%s: no %s, and token_embd.weight (%s) cannot be used as the output matrix", m->path, name,
                           qr_type_name(m->tok_embd.type));
        m->tok_embd.table = false; /* (a matmul weight too: the CPU backend may repack it) */
        *w = m->tok_embd;
        return QR_OK; /* prepared as tok_embd */
    }
    if (w->host && (s->flags & QR_TS_FLAT)) { /* one F32 vector of all the elements */
        w->ne[0] *= w->ne[1] * w->ne[2];
        w->ne[1] = w->ne[2] = 1;
        w->row_bytes = (size_t)w->ne[0] * sizeof(float);
    }
    /* token ids stay host views: the backend prepares weights it computes with */
    return w->host && s->use != QR_USE_IDS ? add_weight(L, w) : QR_OK;
}

/* The parts of layer il (QR_IN_*): its kind, and its FFN (dense, or MoE where the arch has experts, the
 * model says how many and the layer has a router). */
static qr_status layer_parts(loader *L, int il, bool arch_moe, unsigned *parts) {
    const qr_model *m = L->m;
    const qr_hparams *hp = &m->hp;
    const qr_layer *l = &m->layers[il];
    *parts = QR_IN_ANY | (l->kind == QR_LAYER_ATTN ? QR_IN_ATTN : l->kind == QR_LAYER_SSM ? QR_IN_SSM : 0);
    const bool has_ffn = m->arch->layers == QR_LAYERS_SSM_ATTN_FFN ? l->kind == QR_LAYER_FFN : true;
    if (!has_ffn) return QR_OK;
    char router[NAME_CAP];
    snprintf(router, sizeof router, "blk.%d.ffn_gate_inp.weight", il);
    /* deepseek2: experts from leading_dense_block_count on (llama.cpp's rule), else where the router is */
    const bool moe = arch_moe && hp->n_expert > 0 &&
                     (m->arch->arch == QR_ARCH_DEEPSEEK2 ? il >= hp->n_dense_lead : qr_gguf_get_tensor(L->g, router) != NULL);
    if (!moe && hp->n_expert > 0 && m->arch->moe_every_layer)
        return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: missing tensor %s (expert_count is %d)", m->path, router,
                       hp->n_expert);
    if (moe) {
        *parts |= QR_IN_MOE | (hp->n_ff_shexp > 0 ? QR_IN_SHEXP : 0);
    } else {
        if (l->n_ff < 1)
            return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: layer %d has an FFN of width 0", m->path, il);
        *parts |= QR_IN_FFN;
    }
    return QR_OK;
}

/* Every tensor of the arch table: the model's, then each layer's that its parts call for. A bias tensor in
 * the file that the table does not bind is refused rather than silently ignored. */
static qr_status load_weights(loader *L) {
    qr_model *m = L->m;
    const qr_hparams *hp = &m->hp;
    const qr_arch_info *ai = m->arch;
    qr_status st;
    if (ai->encoder && (hp->n_head != hp->n_head_kv || hp->head_dim_k * hp->n_head != hp->n_embd ||
                        hp->head_dim_v != hp->head_dim_k))
        return qr_errf(L->err, L->err_len, QR_ERR_UNSUPPORTED, "%s: encoders need n_head_kv == n_head and head size "
                       "n_embd / n_head", m->path);
    bool arch_moe = false;
    for (const qr_tensor_spec *const *grp = ai->tensors; *grp; grp++)
        for (const qr_tensor_spec *s = *grp; s->name; s++)
            if (s->in == QR_IN_MODEL) TRY(bind_spec(L, s, -1, m));
            else arch_moe |= (s->in & QR_IN_MOE) != 0;
    for (int il = 0; il < hp->n_layer; il++) {
        unsigned parts;
        TRY(layer_parts(L, il, arch_moe, &parts));
        for (const qr_tensor_spec *const *grp = ai->tensors; *grp; grp++)
            for (const qr_tensor_spec *s = *grp; s->name; s++)
                if (s->in & parts) TRY(bind_spec(L, s, il, &m->layers[il]));
    }
    if (ai->arch == QR_ARCH_DEEPSEEK2) {
        /* expert_gating_func: 2 sigmoid, else softmax (absent: softmax, but GLM 4.7 Lite's 47/48 layers over a
         * 154880-token vocabulary: sigmoid, as llama.cpp guesses for files without the key; n_vocab is known here) */
        const bool glm47 = (hp->n_layer == 47 || hp->n_layer == 48) && hp->n_vocab == 154880;
        m->hp.gating = hp->gating_func == 2 || (hp->gating_func == 0 && glm47) ? QR_MOE_SIGMOID : QR_MOE_SOFTMAX;
        for (int il = 0; il < hp->n_layer; il++) TRY(check_mla_layer(L, il));
    }
    for (uint64_t i = 0; i < L->g->n_tensors; i++) {
        qr_gguf_str n = L->g->tensors[i].name;
        if (n.len <= 5 || memcmp(n.data + n.len - 5, ".bias", 5)) continue;
        char tmp[96];
        qr_gguf_str_copy(n, tmp, sizeof tmp);
        int blk = -1;
        if (sscanf(tmp, "blk.%d.", &blk) == 1 && blk >= hp->n_layer) continue; /* an MTP block's: not run */
        bool bound = false;
        for (int32_t j = 0; j < m->name_used && !bound; j++) bound = !strcmp(m->name_arena + (size_t)j * NAME_CAP, tmp);
        if (!bound)
            return qr_errf(L->err, L->err_len, QR_ERR_UNSUPPORTED,
                           "%s: tensor %s: bias tensors are not supported there by architecture %s", m->path, tmp,
                           L->arch);
    }
    return QR_OK;
}

/* Allocates the layers, the name arena and the weight list for every tensor the arch table may bind. */
static qr_status alloc_model(loader *L) {
    qr_model *m = L->m;
    int32_t n_specs = 0;
    for (const qr_tensor_spec *const *grp = m->arch->tensors; *grp; grp++)
        for (const qr_tensor_spec *s = *grp; s->name; s++) n_specs++;
    const int64_t slots = (int64_t)n_specs * (m->hp.n_layer + 1);
    m->layers = calloc((size_t)m->hp.n_layer, sizeof(qr_layer));
    m->name_cap = (int32_t)slots;
    m->name_arena = calloc((size_t)slots, NAME_CAP);
    m->cap_weights = (int32_t)(3 * slots); /* a split tensor binds three views */
    m->weights = calloc((size_t)m->cap_weights, sizeof *m->weights);
    if (!m->layers || !m->name_arena || !m->weights) return qr_errf(L->err, L->err_len, QR_ERR_NOMEM, "out of memory");
    return QR_OK;
}

/* The vocabulary size: token_embd's rows (unless the arch's load_extra set it: eagle3 heads, from the tokenizer). */
static qr_status load_vocab(loader *L) {
    if (L->m->hp.n_vocab > 0) return QR_OK;
    const qr_gguf_tensor *te = qr_gguf_get_tensor(L->g, "token_embd.weight");
    if (!te) return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: missing tensor token_embd.weight", L->m->path);
    if (te->ne[1] < 1 || te->ne[1] > INT32_MAX)
        return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: token_embd.weight has %lld rows", L->m->path,
                       (long long)te->ne[1]);
    L->m->hp.n_vocab = (int32_t)te->ne[1];
    return QR_OK;
}

#undef TRY

qr_model_params qr_model_default_params(void) {
    return (qr_model_params){.n_threads = 0, .force_scalar = false, .backend = QR_BACKEND_AUTO, .gpu = 0};
}

/* Releases what prepare_weights made on m->be (safe after a partial prepare). */
static void release_weights(qr_model *m) {
    for (int32_t i = 0; m->be && i < m->n_weights; i++)
        if (m->weights[i]->device) m->be->ops->weight_release(m->be, m->weights[i]);
    m->output.device = m->output.host == m->tok_embd.host ? NULL : m->output.device;
}

/* Prepares (CPU: validates, GPU: uploads) every bound weight (m->weights) on the backend; a tied output
 * matrix shares tok_embd's prepared copy. On failure the weights prepared so far are released. */
static qr_status prepare_weights(qr_model *m, char *err, size_t err_len) {
    qr_backend *be = m->be;
    qr_status st = QR_OK;
    for (int32_t i = 0; i < m->n_weights && st == QR_OK; i++)
        st = be->ops->weight_prepare(be, m->weights[i], err, err_len);
    if (st != QR_OK) {
        release_weights(m);
        return st;
    }
    if (m->output.host == m->tok_embd.host) m->output.device = m->tok_embd.device;
    return QR_OK;
}

/* Bytes of weight data the backend has to hold (the tied output counted once). */
static uint64_t weight_bytes(const qr_model *m) {
    uint64_t total = 0;
    for (int32_t i = 0; i < m->n_weights; i++) {
        const qr_weight *w = m->weights[i];
        total += (uint64_t)w->row_bytes * (uint64_t)(w->ne[1] * w->ne[2] * w->ne[3]);
    }
    return total;
}

/* GPU memory the CUDA backend needs besides the weights: the prefill GEMM's f16 weight tile (up to
 * 128 MiB), cuBLAS workspace and context (~100 MiB), a margin for the KV cache and activations of
 * a small context. */
#define CUDA_RESERVE_BYTES ((uint64_t)640 << 20)

/* Tries the CUDA backend on GPU `gpu`: creates it, checks that the weights fit in free GPU memory,
 * uploads them. On failure m->be is NULL and `why` says why (also in err for the caller). */
static qr_status try_cuda(qr_model *m, int32_t gpu, char *why, size_t why_len) {
    qr_backend_cuda_params cp = {.gpu = gpu};
    qr_status st = qr_backend_cuda_create(&cp, &m->be, why, why_len);
    if (st != QR_OK) return st;
    const qr_backend_ops *o = m->be->ops;
    if ((m->hp.n_expert > 0 || m->hp.has_ssm) && (!o->moe_route || !o->matmul_id || !o->moe_gate_up ||
                                                 !o->moe_combine || !o->glu || !o->ssm_conv || !o->ssm_scan ||
                                                 !o->ssm_gate_norm)) { /* MoE / SSM ops the CUDA backend does not have yet */
        qr_backend_free(m->be);
        m->be = NULL;
        return qr_errf(why, why_len, QR_ERR_UNSUPPORTED, "the CUDA backend has no MoE / SSM ops yet (architecture %s)",
                       m->hp.arch_name);
    }
    size_t free_b = 0, total_b = 0;
    const uint64_t need = weight_bytes(m) + CUDA_RESERVE_BYTES;
    if (qr_cuda_mem_info(gpu, &free_b, &total_b) && need > (uint64_t)free_b) {
        st = qr_errf(why, why_len, QR_ERR_NOMEM,
                     "the model needs %.2f GiB of GPU memory (%.2f GiB of weights + %.2f GiB of scratch), GPU %d has "
                     "%.2f GiB free of %.2f GiB", (double)need / (1 << 30), (double)(need - CUDA_RESERVE_BYTES) / (1 << 30),
                     (double)CUDA_RESERVE_BYTES / (1 << 30), gpu, (double)free_b / (1 << 30), (double)total_b / (1 << 30));
    } else {
        st = prepare_weights(m, why, why_len);
    }
    if (st != QR_OK) {
        qr_backend_free(m->be);
        m->be = NULL;
    }
    return st;
}

/* Creates m->be as p asks: CPU, CUDA (an error when it cannot be used), or auto (CUDA, else the CPU
 * with the reason in m->backend_note), and prepares the weights on it. */
static qr_status create_backend(qr_model *m, const qr_model_params *p, char *err, size_t err_len) {
    m->backend_note[0] = 0;
    m->gpu = p->gpu;
    m->tp_world = 1;
    if (p->backend != QR_BACKEND_AUTO && p->backend != QR_BACKEND_CPU && p->backend != QR_BACKEND_CUDA)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "unknown backend kind %d", (int)p->backend);
    if (p->tp < 0) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "tensor parallelism: %d ranks", p->tp);
    if (p->tp > 1) { /* tp.c: shards on their own backends */
        const qr_status st = qr_tp_build(m, p, err, err_len);
        if (st == QR_OK || !err) return st;
        char msg[512];
        snprintf(msg, sizeof msg, "%s", err);
        return qr_errf(err, err_len, st, "%s: %s", m->path, msg);
    }
    if (p->backend != QR_BACKEND_CPU) {
        if (p->gpu < 0) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "GPU index %d must be >= 0", p->gpu);
        char why[256];
        const qr_status st = try_cuda(m, p->gpu, why, sizeof why);
        if (st == QR_OK) return QR_OK;
        /* explicit CUDA, or a GPU index that does not exist: an error; auto: the CPU, with the reason */
        if (p->backend == QR_BACKEND_CUDA || st == QR_ERR_INVALID_ARG)
            return qr_errf(err, err_len, st, "%s: cannot use the CUDA backend: %s", m->path, why);
#ifdef QUARREL_HAVE_CUDA
        why[sizeof m->backend_note - 1] = 0; /* a note fits one line */
        memcpy(m->backend_note, why, sizeof m->backend_note);
#endif
    }
    qr_backend_cpu_params cp = {.n_threads = p->n_threads, .force_scalar = p->force_scalar};
    qr_status st = qr_backend_cpu_create(&cp, &m->be, err, err_len);
    if (st != QR_OK) return st;
    return prepare_weights(m, err, err_len);
}

qr_status qr_model_load(const char *path, const qr_model_params *params, qr_model **out, char *err, size_t err_len) {
    *out = NULL;
    qr_model_params p = params ? *params : qr_model_default_params();
    qr_model *m = calloc(1, sizeof *m);
    if (!m) return qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory");
    snprintf(m->path, sizeof m->path, "%s", path);
    qr_status st = qr_gguf_open(path, &m->gguf, err, err_len);
    if (st != QR_OK) goto fail;
    qr_gguf_str arch;
    if (!qr_gguf_get_str(m->gguf, "general.architecture", &arch)) {
        st = qr_errf(err, err_len, QR_ERR_FORMAT, "%s: missing metadata key general.architecture", path);
        goto fail;
    }
    char arch_name[64];
    qr_gguf_str_copy(arch, arch_name, sizeof arch_name);
    m->arch = qr_arch_find(arch_name);
    if (!m->arch) {
        char list[256];
        qr_arch_list(list, sizeof list);
        st = qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "%s: architecture '%s' is not supported (supported: %s)", path,
                     arch_name, list);
        goto fail;
    }
    loader L = {.m = m, .g = m->gguf, .arch = m->arch->name, .err = err, .err_len = err_len};
    const qr_arch_info *ai = m->arch;
    if ((st = load_hparams(&L)) != QR_OK || (ai->load_extra && (st = ai->load_extra(m, err, err_len)) != QR_OK) ||
        (st = alloc_model(&L)) != QR_OK || (st = load_swa_layers(&L)) != QR_OK || (st = load_layer_kinds(&L)) != QR_OK ||
        (st = load_vocab(&L)) != QR_OK || (st = load_weights(&L)) != QR_OK ||
        (ai->check_weights && (st = ai->check_weights(m, err, err_len)) != QR_OK))
        goto fail;
    if ((st = create_backend(m, &p, err, err_len)) != QR_OK) goto fail;
    *out = m;
    return QR_OK;
fail:
    qr_model_free(m);
    return st;
}

void qr_model_free(qr_model *m) {
    if (!m) return;
    qr_tp_free(m);
    release_weights(m);
    qr_backend_free(m->be);
    qr_tokenizer_free(m->embed_tok);
    qr_gguf_close(m->gguf);
    free(m->layers);
    free(m->name_arena);
    free(m->weights);
    free(m);
}

int32_t qr_model_n_vocab(const qr_model *m) { return m->hp.n_vocab; }
int32_t qr_model_n_ctx_train(const qr_model *m) { return m->hp.n_ctx_train; }
int32_t qr_model_n_embd(const qr_model *m) { return m->hp.n_embd; }
int32_t qr_model_n_layer(const qr_model *m) { return m->hp.n_layer; }
const char *qr_model_arch(const qr_model *m) { return m->hp.arch_name; }
int32_t qr_model_tp(const qr_model *m) { return m->tp_world > 1 ? m->tp_world : 1; }
bool qr_model_rank_memory(const qr_model *m, int32_t rank, size_t *free_bytes, size_t *total_bytes) {
    if (rank < 0 || rank >= qr_model_tp(m)) return false;
    qr_backend *be = m->tp_world > 1 ? (m->tp_shards[rank] ? m->tp_shards[rank]->be : NULL) : m->be; /* NULL: another process's */
    return be && be->ops->mem_info && be->ops->mem_info(be, free_bytes, total_bytes);
}
const qr_gguf *qr_model_gguf(const qr_model *m) { return m->gguf; }
qr_backend *qr_model_backend(const qr_model *m) { return m->be; }
const char *qr_model_backend_name(const qr_model *m) { return m->be ? m->be->name : "none"; }
const char *qr_model_backend_note(const qr_model *m) { return m->backend_note; }

void qr_model_desc(const qr_model *m, char *buf, size_t cap) {
    const qr_hparams *hp = &m->hp;
    snprintf(buf, cap, "%s: %d layers, %d embd, %d/%d heads of %d, %d ff, %d vocab, ctx %d, %s%s", hp->arch_name,
             hp->n_layer, hp->n_embd, hp->n_head, hp->n_head_kv, hp->head_dim_k, hp->n_ff, hp->n_vocab, hp->n_ctx_train,
             qr_type_name(m->layers[0].attn_q.type),
             m->output.host && m->output.host == m->tok_embd.host ? ", tied embeddings" : "");
}
