/* eagle3.c — EAGLE-3 speculative-decoding heads (issue 34), as llama.cpp's converter writes them: general.architecture
 * "eagle3", one llama-style layer whose attention reads [normed token embedding | normed g], an `fc` that fuses three
 * captured hidden states of the target into g, an optional draft vocabulary (`d2t`: draft id -> target token id) and
 * the target's tokenizer. What the arch table cannot say is here: the target-layer array and the vocabulary sizes
 * (qr_eagle3_load_extra), the checks of the bound weights (qr_eagle3_check_weights), and the check that a head suits
 * a target (qr_eagle3_check_target, spec.h).
 *
 * The forward pass (one draft step over rows of a token and g) runs in the head's own context once the head is bound
 * to its target (qr_eagle3_bind); drafting with it is spec.c's (QR_SPEC_EAGLE3), the target's side the capture of
 * layer inputs (qr_context_capture_layers). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "model/spec.h"
#include "util/util.h"

/* Reads {arch}.target_layers (or the pre-release name {arch}.extract_layers): exactly 3 integers >= 0. */
static qr_status load_target_layers(qr_model *m, char *err, size_t err_len) {
    const char *arch = m->arch->name;
    char key[64], old[64];
    snprintf(key, sizeof key, "%s.target_layers", arch);
    snprintf(old, sizeof old, "%s.extract_layers", arch);
    const char *used = key;
    const qr_gguf_value *v = qr_gguf_get(m->gguf, key);
    if (!v && (v = qr_gguf_get(m->gguf, old))) used = old;
    if (!v)
        return qr_errf(err, err_len, QR_ERR_FORMAT, "%s: missing metadata key %s (required by architecture %s: the 3 "
                       "target layers whose hidden states the head reads)", m->path, key, arch);
    const qr_gguf_vtype et = v->type == QR_GGUF_ARRAY ? v->arr.elem_type : QR_GGUF_VTYPE_COUNT;
    if (v->type != QR_GGUF_ARRAY || et == QR_GGUF_STRING || et == QR_GGUF_ARRAY || et == QR_GGUF_F32 ||
        et == QR_GGUF_F64 || et == QR_GGUF_BOOL)
        return qr_errf(err, err_len, QR_ERR_FORMAT, "%s: metadata %s: expected an array of 3 integers, found %s", m->path,
                       used, qr_gguf_vtype_name(v->type == QR_GGUF_ARRAY ? et : v->type));
    if (v->arr.count != 3)
        return qr_errf(err, err_len, QR_ERR_FORMAT, "%s: metadata %s has %llu entries: an EAGLE-3 head reads exactly 3 "
                       "target layers", m->path, used, (unsigned long long)v->arr.count);
    for (int i = 0; i < 3; i++) {
        const int64_t id = qr_gguf_arr_i64(v, (uint64_t)i);
        if (id < 0 || id > 4096)
            return qr_errf(err, err_len, QR_ERR_FORMAT, "%s: metadata %s[%d] = %lld is not a layer id", m->path, used, i,
                           (long long)id);
        m->hp.eagle3_layers[i] = (int32_t)id;
    }
    return QR_OK;
}

qr_status qr_eagle3_load_extra(qr_model *m, char *err, size_t err_len) {
    qr_hparams *hp = &m->hp;
    const char *arch = m->arch->name;
    if (hp->n_layer != 1)
        return qr_errf(err, err_len, QR_ERR_FORMAT, "%s: metadata %s.block_count = %d: an EAGLE-3 head has exactly one "
                       "layer", m->path, arch, hp->n_layer);
    qr_status st = load_target_layers(m, err, err_len);
    if (st != QR_OK) return st;
    /* the vocabulary is the target's, carried as its tokenizer (token_embd may be absent: the target's is used) */
    const qr_gguf_value *toks = qr_gguf_get_arr(m->gguf, "tokenizer.ggml.tokens", QR_GGUF_STRING);
    if (!toks || toks->arr.count < 1 || toks->arr.count > INT32_MAX)
        return qr_errf(err, err_len, QR_ERR_FORMAT, "%s: missing metadata key tokenizer.ggml.tokens (an EAGLE-3 head "
                       "carries its target's tokenizer)", m->path);
    hp->n_vocab = (int32_t)toks->arr.count;
    hp->n_vocab_draft = hp->n_vocab;
    const qr_gguf_tensor *d2t = qr_gguf_get_tensor(m->gguf, "d2t");
    if (d2t) {
        if (d2t->type != QR_TYPE_I64)
            return qr_errf(err, err_len, QR_ERR_FORMAT, "%s: tensor d2t has type %s, expected I64 (target token ids)",
                           m->path, qr_type_name(d2t->type));
        if (d2t->ne[0] < 1 || d2t->ne[0] > hp->n_vocab)
            return qr_errf(err, err_len, QR_ERR_FORMAT, "%s: tensor d2t has %lld entries: a draft vocabulary of 1 to %d "
                           "tokens (the target's) was expected", m->path, (long long)d2t->ne[0], hp->n_vocab);
        hp->n_vocab_draft = (int32_t)d2t->ne[0];
    }
    return QR_OK;
}

qr_status qr_eagle3_check_weights(const qr_model *m, char *err, size_t err_len) {
    const qr_hparams *hp = &m->hp;
    const char *arch = m->arch->name;
    if (hp->eagle3_norm_before_fc != (m->enc_norm.host != NULL))
        return qr_errf(err, err_len, QR_ERR_FORMAT, hp->eagle3_norm_before_fc
                           ? "%s: missing tensor enc.output_norm.weight (required by %s.norm_before_fc = true)"
                           : "%s: tensor enc.output_norm.weight is only read with %s.norm_before_fc = true",
                       m->path, arch);
    if (m->d2t.host && !m->output.host && hp->n_vocab_draft != hp->n_vocab)
        return qr_errf(err, err_len, QR_ERR_FORMAT, "%s: tensor d2t maps a draft vocabulary of %d tokens, but the file has "
                       "no output.weight (the target's output would give %d logits)", m->path, hp->n_vocab_draft,
                       hp->n_vocab);
    if (!m->d2t.host) return QR_OK;
    /* every id a target token, none twice (the converter's own checks) */
    int32_t *first = malloc(sizeof *first * (size_t)hp->n_vocab);
    if (!first) return qr_errf(err, err_len, QR_ERR_NOMEM, "%s: out of memory", m->path);
    for (int32_t t = 0; t < hp->n_vocab; t++) first[t] = -1;
    const char *ids = m->d2t.host;
    qr_status st = QR_OK;
    for (int32_t i = 0; i < hp->n_vocab_draft && st == QR_OK; i++) {
        int64_t id;
        memcpy(&id, ids + (size_t)i * sizeof id, sizeof id); /* little-endian, as GGUF stores it */
        if (id < 0 || id >= hp->n_vocab)
            st = qr_errf(err, err_len, QR_ERR_FORMAT, "%s: d2t[%d] = %lld is outside the vocabulary [0, %d)", m->path, i,
                         (long long)id, hp->n_vocab);
        else if (first[id] >= 0)
            st = qr_errf(err, err_len, QR_ERR_FORMAT, "%s: d2t[%d] = %lld repeats d2t[%d]: each draft token must map to "
                         "its own target token", m->path, i, (long long)id, first[id]);
        else
            first[id] = i;
    }
    free(first);
    return st;
}

void qr_eagle3_forward(const qr_model *m, qr_fwd *f) {
    const qr_hparams *hp = &m->hp;
    const qr_layer *l = &m->layers[0];
    qr_backend *be = f->be;
    const int64_t E = hp->n_embd, W3 = 3 * (int64_t)hp->eagle3_target_embd;
    const float eps = hp->norm_eps;
    int64_t n = f->n_tokens;
    f->n_rows = f->n_tokens;
    f->outputs_kept = false;
    const float *g = f->e3.in; /* the rows' g: given, or fc of the target's captured states */
    if (f->e3.in_w == W3) {
        if (m->enc_norm.host) be->ops->rmsnorm(be, f->e3.in, &m->enc_norm, n, W3, eps, f->e3.in); /* norm_before_fc */
        be->ops->matmul(be, &m->fc, f->e3.in, n, f->e3.g);
        g = f->e3.g;
    }
    /* xb = [rmsnorm(token embedding) * attn_norm | rmsnorm(g) * attn_norm_2], the attention's input (2E wide) */
    be->ops->get_rows(be, &m->tok_embd, f->x);
    be->ops->rmsnorm(be, f->x, &l->attn_norm, n, E, eps, f->xb2);
    be->ops->copy_rows(be, f->xb2, E, f->xb, 2 * E, n, E);
    be->ops->rmsnorm(be, g, &l->attn_norm_2, n, E, eps, f->xb2);
    be->ops->copy_rows(be, f->xb2, E, f->xb + E, 2 * E, n, E);
    /* the residual stream starts from g (the normed g with norm_before_residual) */
    be->ops->copy(be, hp->eagle3_norm_before_residual ? f->xb2 : g, n * E, f->x);
    qr_block_attention(m, f, 0, 1.0f);
    qr_block_keep_outputs(m, f); /* the rest: output rows only (teacher-forced rows only fill the KV cache) */
    n = f->n_rows;
    if (n == 0 || f->n_outputs == 0) return;
    qr_ffn_norm(m, f, 0, f->xb2, 1.0f, &l->ffn_norm, n, eps); /* x += attention; xb = rmsnorm(x) * ffn_norm */
    qr_block_ffn(m, f, 0, false);
    be->ops->add(be, f->x, f->xb2, n * E, f->x);
    be->ops->copy(be, f->x, n * E, f->e3.pre); /* the state fed back as the next row's g */
    qr_block_output(m, f);
}

qr_status qr_eagle3_bind(qr_model *head, const qr_model *target, char *err, size_t err_len) {
    if (head->e3_target == target) return QR_OK;
    if (head->e3_target)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "EAGLE-3 head %s already drafts for %s", head->path,
                       head->e3_target->path);
    qr_status st = qr_eagle3_check_target(head, target, err, err_len);
    if (st != QR_OK) return st;
    if (!head->be || !target->be || strcmp(head->be->name, target->be->name) != 0)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "EAGLE-3 head %s runs on the %s backend and its target on %s: "
                       "load both on the same one", head->path, head->be ? head->be->name : "(none)",
                       target->be ? target->be->name : "(none)");
    if (target->tp_world > 1)
        return qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "EAGLE-3: a target split over %d ranks (tensor parallelism) "
                       "is not supported", target->tp_world);
    if (!head->tok_embd.host) head->tok_embd = target->tok_embd, head->e3_shared_embd = true;
    if (!head->output.host) head->output = target->output, head->e3_shared_out = true;
    head->e3_target = target;
    return QR_OK;
}

qr_status qr_eagle3_check_target(const qr_model *head, const qr_model *target, char *err, size_t err_len) {
    if (!head || !target) return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "qr_eagle3_check_target: NULL model");
    if (head->arch->arch != QR_ARCH_EAGLE3)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "%s is not an EAGLE-3 head (architecture %s)", head->path,
                       head->hp.arch_name);
    const qr_hparams *h = &head->hp, *t = &target->hp;
    if (target->arch->spec_head || target->arch->encoder)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "EAGLE-3: the target %s (%s) is not a decoder model to draft for",
                       target->path, t->arch_name);
    if (t->has_ssm)
        return qr_errf(err, err_len, QR_ERR_UNSUPPORTED, "EAGLE-3: the target %s (%s) has Mamba2 layers: heads for "
                       "targets with recurrent layers are not supported (attention-only targets)", target->path,
                       t->arch_name);
    if (h->eagle3_target_embd != t->n_embd)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "EAGLE-3 head %s was made for a target of hidden size %d "
                       "(eagle3.target_hidden_size), but the target %s has %d: it belongs to another model", head->path,
                       h->eagle3_target_embd, target->path, t->n_embd);
    for (int i = 0; i < 3; i++)
        if (h->eagle3_layers[i] > t->n_layer)
            return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "EAGLE-3 head %s reads target layer %d "
                           "(eagle3.target_layers[%d]), but the target %s has %d layers (ids 0..%d; %d: the last "
                           "layer's output)", head->path, h->eagle3_layers[i], i, target->path, t->n_layer, t->n_layer,
                           t->n_layer);
    /* shared from the target: its token embeddings / output matrix, which must then be the head's width */
    if ((!head->tok_embd.host || !head->output.host) && t->n_embd != h->n_embd)
        return qr_errf(err, err_len, QR_ERR_INVALID_ARG, "EAGLE-3 head %s has no %s and would share the target's, but the "
                       "target's are %d wide and the head's width is %d", head->path,
                       !head->tok_embd.host ? "token_embd.weight" : "output.weight", t->n_embd, h->n_embd);
    int32_t n_common = 0;
    return qr_spec_check_vocab(target, head, "EAGLE-3 head", 0, &n_common, err, err_len);
}
