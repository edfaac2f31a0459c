/* attn_flash.c — the CPU backend's attention over quantized (and BF16, or mixed) KV caches: one query
 * head at a time with llama.cpp's flash-attention numerics (ggml's flash_attn_ext one-chunk path, the
 * one llama.cpp's CPU backend takes for every quantized K or V: a quantized V needs flash attention
 * there), reading the K/V blocks where they lie in the paged cache. The vector steps come from the
 * ISA's kernel table, the dot products and conversions from the quant traits. */
#include "backend/cpu/cpu.h"
#include "util/util.h"

/* Bytes of the largest converted q row: F16 / BF16 (2 bytes a value) or Q8_0 (34 bytes per 32). */
#define Q_CONV_BYTES (QR_CPU_MAX_HEAD_DIM * 2)

void qr_cpu_fwht(float *x, int64_t n, int32_t chunk) {
    const float scale = 1.0f / sqrtf((float)chunk);
    for (int64_t c = 0; c + chunk <= n; c += chunk) {
        float *y = x + c;
        for (int32_t i = 0; i < chunk; i++) y[i] *= scale;
        for (int32_t len = 1; len < chunk; len <<= 1)
            for (int32_t i = 0; i < chunk; i += 2 * len)
                for (int32_t j = 0; j < len; j++) {
                    const float u = y[i + j], v = y[i + len + j];
                    y[i + j] = u + v;
                    y[i + len + j] = u - v;
                }
    }
}

void qr_cpu_attn_head_flash(const cpu_kernels *k, const cpu_attn_job *j) {
    const int32_t dk = j->head_dim_k, dv = j->head_dim_v;
    _Alignas(64) unsigned char q_conv[Q_CONV_BYTES];
    _Alignas(64) float vkq[QR_CPU_MAX_HEAD_DIM];  /* f32 accumulator (V other than F16) */
    _Alignas(64) float v32[QR_CPU_MAX_HEAD_DIM];  /* one dequantized V row */
    _Alignas(64) uint16_t vkq16[QR_CPU_MAX_HEAD_DIM]; /* f16 accumulator (F16 V, as ggml) */
    const bool v_f16 = j->v_type == QR_TYPE_F16;
    if (v_f16) memset(vkq16, 0, sizeof(uint16_t) * (size_t)dv);
    else memset(vkq, 0, sizeof(float) * (size_t)dv);
    if (j->rot_k) { /* the cache holds rotated K: rotate q the same way (q.k is unchanged) */
        _Alignas(64) float q_rot[QR_CPU_MAX_HEAD_DIM];
        memcpy(q_rot, j->q, sizeof(float) * (size_t)dk);
        qr_cpu_fwht(q_rot, dk, j->rot_k);
        j->q_to_vec_dot(q_rot, q_conv, dk);
    } else {
        j->q_to_vec_dot(j->q, q_conv, dk);
    }
    const char *kb = j->k_base, *vb = j->v_base;
    float S = 0.0f, M = -INFINITY;
    for (int32_t p = j->first; p <= j->last; p++) {
        const int64_t slot = (int64_t)j->block_table[p / j->block_size] * j->block_size + p % j->block_size;
        float s;
        j->k_dot(dk, &s, kb + (size_t)slot * j->k_row_bytes + j->k_head_bytes, q_conv);
        /* ggml: s * (scale / softcap) then softcap * tanh; our contract is scale * softcap(q.k), the same
         * for the scale of 1 that softcapped models use */
        if (j->softcap > 0.0f) s = j->softcap * tanhf(s * (1.0f / j->softcap)) * j->scale;
        else s *= j->scale;
        const float m_old = M;
        float ms = 1.0f, vs = 1.0f; /* rescale of what was summed; weight of this key */
        const char *vrow = vb + (size_t)slot * j->v_row_bytes + j->v_head_bytes;
        if (s > M) {
            M = s;
            ms = expf(m_old - M);
            if (v_f16) k->scale_f16(vkq16, ms, dv);
            else k->scale(vkq, ms, dv, vkq);
        } else {
            vs = expf(s - M);
        }
        if (v_f16) {
            k->mad_f16(vkq16, (const uint16_t *)(const void *)vrow, vs, dv);
        } else if (j->v_to_float) {
            j->v_to_float(vrow, v32, dv);
            k->mad_f32(vkq, v32, vs, dv);
        } else {
            k->mad_f32(vkq, (const float *)(const void *)vrow, vs, dv);
        }
        S = S * ms + vs;
    }
    if (v_f16)
        for (int32_t i = 0; i < dv; i++) vkq[i] = qr_fp16_to_fp32(vkq16[i]);
    if (j->has_sink) { /* ggml: after the keys, a key with no value */
        float ms = 1.0f, vs = 1.0f;
        if (j->sink > M) {
            ms = expf(M - j->sink);
            M = j->sink;
            k->scale(vkq, ms, dv, vkq);
        } else {
            vs = expf(j->sink - M);
        }
        S = S * ms + vs;
    }
    const float s_inv = S == 0.0f ? 0.0f : 1.0f / S;
    k->scale(vkq, s_inv, dv, j->out);
    if (j->rot_v) qr_cpu_fwht(j->out, dv, j->rot_v); /* back from the rotated V (the transform is its own inverse) */
}
