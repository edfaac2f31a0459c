/* model_load.c — qr_model_load: GGUF -> hyper-parameters (metadata only) + weight views (zero-copy
 * into the mapping), validated against the architecture table with messages that name the file,
 * the key or tensor, and what was expected. */
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

static void key_name(const loader *L, const char *suffix, char *buf, size_t cap) {
    snprintf(buf, cap, "%s.%s", L->arch, suffix);
}

/* Reads an integer {arch}.suffix that may be a scalar or a per-layer array with equal values.
 * Returns QR_ERR_NOT_FOUND silently when absent (callers decide if it is required). */
static qr_status get_int(loader *L, const char *suffix, int64_t lo, int64_t hi, int32_t *out) {
    char key[128];
    key_name(L, suffix, key, sizeof key);
    const qr_gguf_value *v = qr_gguf_get(L->g, key);
    if (!v) return QR_ERR_NOT_FOUND;
    int64_t val;
    if (v->type == QR_GGUF_ARRAY) {
        if (v->arr.count == 0 || v->arr.elem_type == QR_GGUF_STRING || v->arr.elem_type == QR_GGUF_ARRAY ||
            v->arr.elem_type == QR_GGUF_F32 || v->arr.elem_type == QR_GGUF_F64)
            return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: metadata %s: expected an integer or integer array",
                           L->m->path, key);
        val = qr_gguf_arr_i64(v, 0);
        if (L->m->arch->per_layer_max) /* hybrids: 0 marks layers without attention / FFN; keep the max */
            for (uint64_t i = 1; i < v->arr.count; i++)
                if (qr_gguf_arr_i64(v, i) > val) val = qr_gguf_arr_i64(v, i);
        for (uint64_t i = 1; i < v->arr.count; i++)
            if (qr_gguf_arr_i64(v, i) != val && !L->m->arch->per_layer_max)
                return qr_errf(L->err, L->err_len, QR_ERR_UNSUPPORTED,
                               "%s: metadata %s: per-layer values that differ are not supported", L->m->path, key);
    } else {
        uint64_t u;
        int32_t i32;
        if (qr_gguf_get_i32(L->g, key, &i32)) val = i32;
        else if (qr_gguf_get_u64(L->g, key, &u) && u <= (uint64_t)INT64_MAX) val = (int64_t)u;
        else
            return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: metadata %s: expected an integer, found %s",
                           L->m->path, key, qr_gguf_vtype_name(v->type));
    }
    if (val < lo || val > hi)
        return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: metadata %s = %lld is out of range [%lld, %lld]",
                       L->m->path, key, (long long)val, (long long)lo, (long long)hi);
    *out = (int32_t)val;
    return QR_OK;
}

static qr_status req_int(loader *L, const char *suffix, int64_t lo, int64_t hi, int32_t *out) {
    qr_status st = get_int(L, suffix, lo, hi, out);
    if (st == QR_ERR_NOT_FOUND)
        return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: missing metadata key %s.%s", L->m->path, L->arch, suffix);
    return st;
}

static qr_status opt_int(loader *L, const char *suffix, int64_t lo, int64_t hi, int32_t *out) {
    qr_status st = get_int(L, suffix, lo, hi, out);
    return st == QR_ERR_NOT_FOUND ? QR_OK : st;
}

/* Optional float {arch}.suffix; a present key of a non-numeric type is an error. */
static qr_status opt_float(loader *L, const char *suffix, float *out) {
    char key[128];
    key_name(L, suffix, key, sizeof key);
    if (!qr_gguf_get(L->g, key)) return QR_OK;
    if (!qr_gguf_get_f32(L->g, key, out) || !isfinite(*out))
        return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: metadata %s: expected a finite number", L->m->path, key);
    return QR_OK;
}

/* ---- weights ---- */

typedef enum wuse { USE_MATMUL, USE_NORM, USE_TABLE } wuse;

static bool type_ok(qr_type t, wuse use) {
    if (use == USE_NORM) return t == QR_TYPE_F32;
    const qr_quant_traits *tr = qr_quant_traits_best(t);
    if (!tr) return false;
    if (use == USE_TABLE) return t == QR_TYPE_F32 || tr->to_float;
    if (!tr->vec_dot) return false;
    if (tr->vec_dot_type == QR_TYPE_F32) return true;
    const qr_quant_traits *vt = qr_quant_traits_best(tr->vec_dot_type);
    return vt && vt->from_float;
}

/* Binds tensor `id` of `layer` to *w, checking its shape is [ne1 rows][ne0] (ne1 = 0: a vector
 * of ne0) and its type suits `use`. required = false: a missing tensor leaves w->host NULL. */
static qr_status bind_name(loader *L, const char *name, bool required, int64_t ne0, int64_t ne1, wuse use,
                           qr_weight *w) {
    memset(w, 0, sizeof *w);
    const qr_gguf_tensor *t = qr_gguf_get_tensor(L->g, name);
    if (!t) {
        if (!required) return QR_OK;
        return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: missing tensor %s (required by architecture %s)",
                       L->m->path, name, L->arch);
    }
    const int64_t want1 = ne1 > 0 ? ne1 : 1;
    const uint32_t want_dims = ne1 > 0 ? 2 : 1;
    bool shape_ok = t->ne[0] == ne0 && t->ne[1] == want1 && t->ne[2] == 1 && t->ne[3] == 1;
    if (!shape_ok || (t->n_dims != want_dims && !(t->n_dims == 2 && want1 == 1)))
        return qr_errf(L->err, L->err_len, QR_ERR_FORMAT,
                       "%s: tensor %s has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld] from the metadata",
                       L->m->path, name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                       (long long)t->ne[3], (long long)ne0, (long long)want1);
    if (!type_ok(t->type, use))
        return qr_errf(L->err, L->err_len, QR_ERR_UNSUPPORTED, "%s: tensor %s has type %s, which cannot be used as %s",
                       L->m->path, name, qr_type_name(t->type),
                       use == USE_NORM ? "a norm weight (F32 expected)"
                                       : use == USE_TABLE ? "an embedding table" : "a matmul weight");
    const size_t rb = qr_type_row_size(t->type, t->ne[0]);
    if (rb == 0 || rb * (size_t)want1 != t->nbytes)
        return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: tensor %s: %llu bytes do not match its shape and type %s",
                       L->m->path, name, (unsigned long long)t->nbytes, qr_type_name(t->type));
    if (L->m->name_used >= L->m->name_cap)
        return qr_errf(L->err, L->err_len, QR_ERR_INTERNAL, "%s: tensor name arena full", L->m->path);
    char *slot = L->m->name_arena + (size_t)L->m->name_used++ * NAME_CAP;
    snprintf(slot, NAME_CAP, "%s", name);
    *w = (qr_weight){.name = slot, .type = t->type, .ne = {t->ne[0], want1, 1, 1}, .row_bytes = rb, .host = t->data};
    return QR_OK;
}

static qr_status bind(loader *L, qr_tensor_id id, int layer, bool required, int64_t ne0, int64_t ne1, wuse use,
                      qr_weight *w) {
    char name[NAME_CAP];
    qr_tensor_name(id, layer, name, sizeof name);
    return bind_name(L, name, required, ne0, ne1, use, w);
}

/* The optional F32 bias "<name>.bias" of tensor id (a vector of ne0); host NULL when absent. */
static qr_status bind_bias(loader *L, qr_tensor_id id, int layer, int64_t ne0, qr_weight *w) {
    char name[NAME_CAP];
    qr_tensor_name(id, layer, name, sizeof name);
    char *dot = strrchr(name, '.');
    snprintf(dot, (size_t)(name + sizeof name - dot), ".bias");
    return bind_name(L, name, false, ne0, 0, USE_NORM, w);
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

/* ---- hyper-parameters ---- */

static qr_status load_hparams(loader *L) {
    qr_model *m = L->m;
    qr_hparams *hp = &m->hp;
    const qr_arch_info *ai = m->arch;
    qr_status st;
    snprintf(hp->arch_name, sizeof hp->arch_name, "%s", ai->name);
#define TRY(x)                                                                                                         \
    do {                                                                                                               \
        if ((st = (x)) != QR_OK) return st;                                                                            \
    } while (0)
    TRY(req_int(L, "context_length", 1, INT32_MAX, &hp->n_ctx_train));
    TRY(req_int(L, "embedding_length", 1, 1 << 20, &hp->n_embd));
    TRY(req_int(L, "block_count", 1, 4096, &hp->n_layer));
    TRY(req_int(L, "feed_forward_length", 1, 1 << 22, &hp->n_ff));
    TRY(req_int(L, "attention.head_count", 1, 4096, &hp->n_head));
    hp->n_head_kv = hp->n_head;
    TRY(opt_int(L, "attention.head_count_kv", 1, 4096, &hp->n_head_kv));
    if (hp->n_head % hp->n_head_kv)
        return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: head_count %d is not a multiple of head_count_kv %d",
                       m->path, hp->n_head, hp->n_head_kv);
    hp->head_dim_k = hp->head_dim_v = hp->n_embd / hp->n_head;
    TRY(opt_int(L, "attention.key_length", 1, 512, &hp->head_dim_k));
    TRY(opt_int(L, "attention.value_length", 1, 512, &hp->head_dim_v));
    if (hp->head_dim_k < 1 || hp->head_dim_k > 512 || hp->head_dim_v < 1 || hp->head_dim_v > 512)
        return qr_errf(L->err, L->err_len, QR_ERR_UNSUPPORTED, "%s: head size %d/%d is outside 1..512", m->path,
                       hp->head_dim_k, hp->head_dim_v);
    hp->n_rot = hp->head_dim_k;
    TRY(opt_int(L, "rope.dimension_count", 2, hp->head_dim_k, &hp->n_rot));
    if (hp->n_rot % 2)
        return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: rope.dimension_count %d is odd", m->path, hp->n_rot);

    char key[128];
    const char *eps_key = ai->encoder || ai->arch == QR_ARCH_NEMOTRON ? "attention.layer_norm_epsilon"
                                                                       : "attention.layer_norm_rms_epsilon";
    key_name(L, eps_key, key, sizeof key);
    if (!qr_gguf_get(L->g, key))
        return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: missing metadata key %s", m->path, key);
    TRY(opt_float(L, eps_key, &hp->norm_eps));
    hp->pooling_type = -1;
    TRY(opt_int(L, "pooling_type", 0, 4, &hp->pooling_type));
    hp->causal = !ai->encoder;
    key_name(L, "attention.causal", key, sizeof key);
    bool causal;
    if (qr_gguf_get_bool(L->g, key, &causal)) hp->causal = causal;
    if (!(hp->norm_eps > 0.0f && hp->norm_eps < 1.0f))
        return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: %s = %g is not in (0, 1)", m->path, key, hp->norm_eps);

    hp->rope_base = 10000.0f;
    TRY(opt_float(L, "rope.freq_base", &hp->rope_base));
    if (!(hp->rope_base > 1.0f))
        return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: rope.freq_base %g must be > 1", m->path, hp->rope_base);
    /* rope scaling: type none/linear/yarn; factor from rope.scaling.factor or the older rope.scale_linear */
    float factor = 0.0f;
    TRY(opt_float(L, "rope.scaling.factor", &factor));
    if (factor == 0.0f) TRY(opt_float(L, "rope.scale_linear", &factor));
    hp->rope_scale = factor == 0.0f ? 1.0f : 1.0f / factor;
    if (!(hp->rope_scale > 0.0f))
        return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: rope scaling factor %g must be > 0", m->path, factor);
    key_name(L, "rope.scaling.type", key, sizeof key);
    qr_gguf_str stype;
    hp->yarn_attn_factor = 1.0f;
    hp->n_ctx_orig = hp->n_ctx_train;
    if (qr_gguf_get_str(L->g, key, &stype)) {
        if (qr_gguf_str_eq(stype, "yarn")) {
            hp->yarn_ext_factor = 1.0f;
            TRY(opt_float(L, "rope.scaling.attn_factor", &hp->yarn_attn_factor));
            TRY(opt_int(L, "rope.scaling.original_context_length", 1, INT32_MAX, &hp->n_ctx_orig));
        } else if (qr_gguf_str_eq(stype, "none")) {
            hp->rope_scale = 1.0f;
        } else if (!qr_gguf_str_eq(stype, "linear")) {
            char tmp[64];
            return qr_errf(L->err, L->err_len, QR_ERR_UNSUPPORTED, "%s: %s = '%s' is not supported (none, linear, yarn)",
                           m->path, key, qr_gguf_str_copy(stype, tmp, sizeof tmp));
        }
    }
    TRY(opt_int(L, "attention.sliding_window", 0, INT32_MAX, &hp->n_swa));
    hp->rope_base_swa = ai->rope_base_swa > 0.0f ? ai->rope_base_swa : hp->rope_base;
    TRY(opt_float(L, "attn_logit_softcapping", &hp->attn_softcap));
    TRY(opt_float(L, "final_logit_softcapping", &hp->final_softcap));
    if (hp->attn_softcap < 0.0f || hp->final_softcap < 0.0f)
        return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: negative logit softcapping", m->path);

    /* attention scale: {arch}.attention.scale when given; gemma3 27B (62 layers) uses
     * 1/sqrt(n_embd / n_head) (query_pre_attn_scalar), everything else 1/sqrt(key_length) */
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim_k);
    if (ai->arch == QR_ARCH_GEMMA3 && hp->n_layer == 62) hp->attn_scale = 1.0f / sqrtf((float)(hp->n_embd / hp->n_head));
    TRY(opt_float(L, "attention.scale", &hp->attn_scale));
    hp->embd_scale = ai->scale_embd ? sqrtf((float)hp->n_embd) : 1.0f;
#undef TRY
    return QR_OK;
}

/* Which layers use the sliding window: gemma3 every layer but each swa_pattern-th (llama.cpp's
 * set_swa_pattern), or per {arch}.attention.sliding_window_pattern (a period or a bool per layer);
 * llama: all layers when a window is given (Mistral). */
static qr_status load_swa_layers(loader *L) {
    qr_model *m = L->m;
    const int32_t nl = m->hp.n_layer;
    for (int i = 0; i < nl; i++) m->layers[i].swa = false;
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
    int32_t period = m->arch->swa_pattern;
    qr_status st = opt_int(L, "attention.sliding_window_pattern", 0, 4096, &period);
    if (st != QR_OK) return st;
    for (int i = 0; i < nl; i++) m->layers[i].swa = period == 0 || (i % period) < period - 1;
    return QR_OK;
}

/* BERT / nomic-bert: embeddings (+ token type row, + learned positions for bert), their LayerNorm,
 * then per layer q/k/v (nomic-bert: one fused attn_qkv, bound as three row views), attn_output,
 * attn_output_norm, the FFN (bert: up/down with GELU; nomic-bert: gate/up/down SwiGLU) and
 * layer_output_norm, with optional F32 biases. No output head. */
static qr_status load_weights_encoder(loader *L) {
    qr_model *m = L->m;
    const qr_hparams *hp = &m->hp;
    const bool nomic = m->arch->arch == QR_ARCH_NOMIC_BERT;
    qr_status st;
#define TRY(x)                                                                                                         \
    do {                                                                                                               \
        if ((st = (x)) != QR_OK) return st;                                                                            \
    } while (0)
    const int64_t E = hp->n_embd, V = hp->n_vocab, F = hp->n_ff;
    if (hp->n_head != hp->n_head_kv || hp->head_dim_k * hp->n_head != E || hp->head_dim_v != hp->head_dim_k)
        return qr_errf(L->err, L->err_len, QR_ERR_UNSUPPORTED, "%s: encoders need n_head_kv == n_head and head size "
                       "n_embd / n_head", m->path);
    TRY(bind(L, QR_T_TOKEN_EMBD, 0, true, E, V, USE_TABLE, &m->tok_embd));
    const qr_gguf_tensor *tt = qr_gguf_get_tensor(L->g, "token_types.weight");
    if (tt) TRY(bind(L, QR_T_TOKEN_TYPES, 0, true, E, tt->ne[1] > 1 ? tt->ne[1] : 0, USE_TABLE, &m->type_embd));
    if (!nomic) TRY(bind(L, QR_T_POS_EMBD, 0, true, E, hp->n_ctx_train, USE_TABLE, &m->pos_embd));
    TRY(bind(L, QR_T_TOKEN_EMBD_NORM, 0, true, E, 0, USE_NORM, &m->tok_norm));
    TRY(bind_bias(L, QR_T_TOKEN_EMBD_NORM, 0, E, &m->tok_norm_b));
    for (int il = 0; il < hp->n_layer; il++) {
        qr_layer *l = &m->layers[il];
        if (nomic) {
            qr_weight qkv, qkv_b;
            TRY(bind(L, QR_T_ATTN_QKV, il, true, E, 3 * E, USE_MATMUL, &qkv));
            TRY(bind_bias(L, QR_T_ATTN_QKV, il, 3 * E, &qkv_b));
            l->attn_q = row_view(&qkv, 0, E), l->attn_k = row_view(&qkv, E, E), l->attn_v = row_view(&qkv, 2 * E, E);
            if (qkv_b.host)
                l->attn_q_b = row_view(&qkv_b, 0, E), l->attn_k_b = row_view(&qkv_b, E, E),
                l->attn_v_b = row_view(&qkv_b, 2 * E, E);
            l->attn_q_b.ne[1] = l->attn_k_b.ne[1] = l->attn_v_b.ne[1] = 1;
        } else {
            TRY(bind(L, QR_T_ATTN_Q, il, true, E, E, USE_MATMUL, &l->attn_q));
            TRY(bind(L, QR_T_ATTN_K, il, true, E, E, USE_MATMUL, &l->attn_k));
            TRY(bind(L, QR_T_ATTN_V, il, true, E, E, USE_MATMUL, &l->attn_v));
            TRY(bind_bias(L, QR_T_ATTN_Q, il, E, &l->attn_q_b));
            TRY(bind_bias(L, QR_T_ATTN_K, il, E, &l->attn_k_b));
            TRY(bind_bias(L, QR_T_ATTN_V, il, E, &l->attn_v_b));
        }
        TRY(bind(L, QR_T_ATTN_OUT, il, true, E, E, USE_MATMUL, &l->attn_out));
        TRY(bind_bias(L, QR_T_ATTN_OUT, il, E, &l->attn_out_b));
        TRY(bind(L, QR_T_ATTN_OUT_NORM, il, true, E, 0, USE_NORM, &l->attn_out_norm));
        TRY(bind_bias(L, QR_T_ATTN_OUT_NORM, il, E, &l->attn_out_norm_b));
        TRY(bind(L, QR_T_FFN_UP, il, true, E, F, USE_MATMUL, &l->ffn_up));
        TRY(bind_bias(L, QR_T_FFN_UP, il, F, &l->ffn_up_b));
        if (nomic) TRY(bind(L, QR_T_FFN_GATE, il, true, E, F, USE_MATMUL, &l->ffn_gate));
        TRY(bind(L, QR_T_FFN_DOWN, il, true, F, E, USE_MATMUL, &l->ffn_down));
        TRY(bind_bias(L, QR_T_FFN_DOWN, il, E, &l->ffn_down_b));
        TRY(bind(L, QR_T_LAYER_OUT_NORM, il, true, E, 0, USE_NORM, &l->layer_out_norm));
        TRY(bind_bias(L, QR_T_LAYER_OUT_NORM, il, E, &l->layer_out_norm_b));
    }
#undef TRY
    return QR_OK;
}

static qr_status load_weights(loader *L) {
    qr_model *m = L->m;
    const qr_hparams *hp = &m->hp;
    const qr_arch_info *ai = m->arch;
    qr_status st;
#define TRY(x)                                                                                                         \
    do {                                                                                                               \
        if ((st = (x)) != QR_OK) return st;                                                                            \
    } while (0)
    const qr_gguf_tensor *te = qr_gguf_get_tensor(L->g, "token_embd.weight");
    if (!te) return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: missing tensor token_embd.weight", m->path);
    if (te->ne[1] < 1 || te->ne[1] > INT32_MAX)
        return qr_errf(L->err, L->err_len, QR_ERR_FORMAT, "%s: token_embd.weight has %lld rows", m->path,
                       (long long)te->ne[1]);
    m->hp.n_vocab = (int32_t)te->ne[1];
    if (ai->encoder) return load_weights_encoder(L);
    if (ai->extended) { /* MoE / hybrid families (hybrid_load.c); a dense llama comes back NOT_FOUND */
        st = qr_model_x_load(m, L->err, L->err_len);
        if (st != QR_ERR_NOT_FOUND) return st;
    }
    const int64_t E = hp->n_embd, V = hp->n_vocab;
    TRY(bind(L, QR_T_TOKEN_EMBD, 0, true, E, V, USE_TABLE, &m->tok_embd));
    TRY(bind(L, QR_T_OUTPUT_NORM, 0, true, E, 0, USE_NORM, &m->output_norm));
    TRY(bind(L, QR_T_OUTPUT, 0, false, E, V, USE_MATMUL, &m->output));
    if (!m->output.host) { /* tied embeddings */
        if (!type_ok(m->tok_embd.type, USE_MATMUL))
            return qr_errf(L->err, L->err_len, QR_ERR_UNSUPPORTED,
                           "%s: no output.weight, and token_embd.weight (%s) cannot be used as the output matrix",
                           m->path, qr_type_name(m->tok_embd.type));
        m->output = m->tok_embd;
    }
    TRY(bind(L, QR_T_ROPE_FREQS, 0, false, hp->n_rot / 2, 0, USE_NORM, &m->rope_freqs));
    const int64_t QD = (int64_t)hp->n_head * hp->head_dim_k, KD = (int64_t)hp->n_head_kv * hp->head_dim_k,
                  VD = (int64_t)hp->n_head_kv * hp->head_dim_v, OD = (int64_t)hp->n_head * hp->head_dim_v;
    for (int il = 0; il < hp->n_layer; il++) {
        qr_layer *l = &m->layers[il];
        TRY(bind(L, QR_T_ATTN_NORM, il, true, E, 0, USE_NORM, &l->attn_norm));
        TRY(bind(L, QR_T_ATTN_Q, il, true, E, QD, USE_MATMUL, &l->attn_q));
        TRY(bind(L, QR_T_ATTN_K, il, true, E, KD, USE_MATMUL, &l->attn_k));
        TRY(bind(L, QR_T_ATTN_V, il, true, E, VD, USE_MATMUL, &l->attn_v));
        TRY(bind(L, QR_T_ATTN_OUT, il, true, OD, E, USE_MATMUL, &l->attn_out));
        TRY(bind(L, QR_T_ATTN_Q_NORM, il, ai->has_qk_norm, hp->head_dim_k, 0, USE_NORM, &l->attn_q_norm));
        TRY(bind(L, QR_T_ATTN_K_NORM, il, ai->has_qk_norm, hp->head_dim_k, 0, USE_NORM, &l->attn_k_norm));
        TRY(bind(L, QR_T_ATTN_POST_NORM, il, ai->has_post_norms, E, 0, USE_NORM, &l->attn_post_norm));
        TRY(bind(L, QR_T_FFN_NORM, il, true, E, 0, USE_NORM, &l->ffn_norm));
        TRY(bind(L, QR_T_FFN_GATE, il, true, E, hp->n_ff, USE_MATMUL, &l->ffn_gate));
        TRY(bind(L, QR_T_FFN_UP, il, true, E, hp->n_ff, USE_MATMUL, &l->ffn_up));
        TRY(bind(L, QR_T_FFN_DOWN, il, true, hp->n_ff, E, USE_MATMUL, &l->ffn_down));
        TRY(bind(L, QR_T_FFN_POST_NORM, il, ai->has_post_norms, E, 0, USE_NORM, &l->ffn_post_norm));
    }
    /* biases are not implemented: refuse rather than silently ignore them */
    for (uint64_t i = 0; i < L->g->n_tensors; i++) {
        qr_gguf_str n = L->g->tensors[i].name;
        if (n.len > 5 && !memcmp(n.data + n.len - 5, ".bias", 5)) {
            char tmp[96];
            return qr_errf(L->err, L->err_len, QR_ERR_UNSUPPORTED, "%s: tensor %s: bias tensors are not supported",
                           m->path, qr_gguf_str_copy(n, tmp, sizeof tmp));
        }
    }
#undef TRY
    return QR_OK;
}

qr_model_params qr_model_default_params(void) {
    return (qr_model_params){.n_threads = 0, .force_scalar = false, .backend = QR_BACKEND_AUTO, .gpu = 0};
}

/* Collects pointers to every bound weight (host != NULL) into *out (malloc'd, caller frees), the
 * tied output matrix (the same data as tok_embd) left out. Returns the count, or -1 when out of
 * memory. Add new weights here: prepare, release and the GPU memory check all use this list. */
static int64_t model_weights(qr_model *m, qr_weight ***out) {
    const int64_t cap = 16 + (int64_t)m->hp.n_layer * 64; /* every qr_layer field */
    qr_weight **ws = malloc((size_t)cap * sizeof *ws);
    if (!ws) return -1;
    int64_t n = 0;
#define ADD(w)                                                                                                         \
    do {                                                                                                               \
        if ((w)->host && n < cap) ws[n++] = (w);                                                                       \
    } while (0)
    ADD(&m->tok_embd);
    ADD(&m->output_norm);
    ADD(&m->output_norm_b);
    if (m->output.host != m->tok_embd.host) ADD(&m->output);
    ADD(&m->rope_freqs);
    ADD(&m->type_embd); /* encoders */
    ADD(&m->pos_embd);
    ADD(&m->tok_norm);
    ADD(&m->tok_norm_b);
    for (int il = 0; il < m->hp.n_layer; il++) {
        qr_layer *l = &m->layers[il];
        qr_weight *lw[] = {&l->attn_norm, &l->attn_norm_b, &l->attn_q, &l->attn_k, &l->attn_v, &l->attn_out,
                           &l->attn_q_b, &l->attn_k_b, &l->attn_v_b, &l->attn_out_b, &l->attn_sinks, &l->attn_q_norm,
                           &l->attn_k_norm, &l->attn_post_norm, &l->ffn_norm, &l->ffn_norm_b, &l->ffn_gate, &l->ffn_up,
                           &l->ffn_down, &l->ffn_up_b, &l->ffn_down_b, &l->ffn_post_norm, &l->attn_out_norm,
                           &l->attn_out_norm_b, &l->layer_out_norm, &l->layer_out_norm_b, &l->gate_inp,
                           &l->gate_inp_b, &l->exp_probs_b, &l->gate_exps, &l->up_exps, &l->down_exps,
                           &l->gate_exps_b, &l->up_exps_b, &l->down_exps_b, &l->gate_shexp, &l->up_shexp,
                           &l->down_shexp, &l->ssm_in, &l->ssm_conv1d, &l->ssm_conv1d_b, &l->ssm_dt_b, &l->ssm_a,
                           &l->ssm_d, &l->ssm_norm, &l->ssm_out};
        for (size_t i = 0; i < sizeof lw / sizeof lw[0]; i++) ADD(lw[i]);
    }
#undef ADD
    *out = ws;
    return n;
}

/* Releases what prepare_weights made on m->be (safe after a partial prepare). */
static void release_weights(qr_model *m) {
    qr_weight **ws = NULL;
    const int64_t n = m->be ? model_weights(m, &ws) : 0;
    for (int64_t i = 0; i < n; i++)
        if (ws[i]->device) m->be->ops->weight_release(m->be, ws[i]);
    free(ws);
    m->output.device = m->output.host == m->tok_embd.host ? NULL : m->output.device;
}

/* Prepares (CPU: validates, GPU: uploads) every weight on the backend; a tied output matrix shares
 * tok_embd's prepared copy. On failure the weights prepared so far are released. */
static qr_status prepare_weights(qr_model *m, char *err, size_t err_len) {
    qr_backend *be = m->be;
    qr_weight **ws = NULL;
    const int64_t n = model_weights(m, &ws);
    if (n < 0) return qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory");
    qr_status st = QR_OK;
    for (int64_t i = 0; i < n && st == QR_OK; i++) st = be->ops->weight_prepare(be, ws[i], err, err_len);
    free(ws);
    if (st != QR_OK) {
        release_weights(m);
        return st;
    }
    if (m->output.host == m->tok_embd.host) m->output.device = m->tok_embd.device;
    return QR_OK;
}

/* Bytes of weight data the backend has to hold (the tied output counted once). */
static uint64_t weight_bytes(qr_model *m) {
    qr_weight **ws = NULL;
    const int64_t n = model_weights(m, &ws);
    uint64_t total = 0;
    for (int64_t i = 0; i < n; i++) total += (uint64_t)ws[i]->row_bytes * (uint64_t)(ws[i]->ne[1] * ws[i]->ne[2] * ws[i]->ne[3]);
    free(ws);
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
    if ((m->hp.n_expert > 0 || m->hp.has_ssm) && (!o->moe_route || !o->matmul_id || !o->moe_gate_up || !o->moe_combine || !o->glu || !o->ssm_conv ||
                   !o->ssm_scan || !o->ssm_gate_norm)) { /* MoE / SSM ops the CUDA backend does not have yet */
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
    if (p->backend != QR_BACKEND_AUTO && p->backend != QR_BACKEND_CPU && p->backend != QR_BACKEND_CUDA)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "unknown backend kind %d", (int)p->backend);
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
        st = qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "%s: architecture '%s' is not supported (supported: %s)", path,
                     arch_name, qr_arch_list());
        goto fail;
    }
    loader L = {.m = m, .g = m->gguf, .arch = m->arch->name, .err = err, .err_len = err_len};
    if ((st = load_hparams(&L)) != QR_OK) goto fail;
    m->layers = calloc((size_t)m->hp.n_layer, sizeof(qr_layer));
    m->name_cap = m->hp.n_layer * 64 + 32; /* every weight and bias of a layer */
    m->name_arena = calloc((size_t)m->name_cap, NAME_CAP);
    if (!m->layers || !m->name_arena) {
        st = qr_errf(err, err_len, QR_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if ((st = load_swa_layers(&L)) != QR_OK) goto fail;
    if ((st = load_weights(&L)) != QR_OK) goto fail;
    if ((st = create_backend(m, &p, err, err_len)) != QR_OK) goto fail;
    *out = m;
    return QR_OK;
fail:
    qr_model_free(m);
    return st;
}

void qr_model_free(qr_model *m) {
    if (!m) return;
    release_weights(m);
    qr_backend_free(m->be);
    qr_tokenizer_free(m->embed_tok);
    qr_gguf_close(m->gguf);
    free(m->layers);
    free(m->name_arena);
    free(m);
}

int32_t qr_model_n_vocab(const qr_model *m) { return m->hp.n_vocab; }
int32_t qr_model_n_ctx_train(const qr_model *m) { return m->hp.n_ctx_train; }
int32_t qr_model_n_embd(const qr_model *m) { return m->hp.n_embd; }
int32_t qr_model_n_layer(const qr_model *m) { return m->hp.n_layer; }
const char *qr_model_arch(const qr_model *m) { return m->hp.arch_name; }
const qr_gguf *qr_model_gguf(const qr_model *m) { return m->gguf; }
qr_backend *qr_model_backend(const qr_model *m) { return m->be; }
const char *qr_model_backend_name(const qr_model *m) { return m->be ? m->be->name : "none"; }
const char *qr_model_backend_note(const qr_model *m) { return m->backend_note; }

void qr_model_desc(const qr_model *m, char *buf, size_t cap) {
    const qr_hparams *hp = &m->hp;
    snprintf(buf, cap, "%s: %d layers, %d embd, %d/%d heads of %d, %d ff, %d vocab, ctx %d, %s%s", hp->arch_name,
             hp->n_layer, hp->n_embd, hp->n_head, hp->n_head_kv, hp->head_dim_k, hp->n_ff, hp->n_vocab, hp->n_ctx_train,
             qr_type_name(m->layers[0].attn_q.type), m->output.host == m->tok_embd.host ? ", tied embeddings" : "");
}
