/*
 * mha_ref.c - a naive forward pass to check the engine against (see mha_ref.h).
 *
 * The extensions beyond torch follow the conventions written in lib/mha.h, from Hugging
 * Face's models, computed here their plain way: RoPE per (row, head) with the half-split pairs of
 * rotate_half (inv_freq rounded to float from double, the float32 angle inv_freq·p, cos and sin of
 * it in double); kv head h·Hkv/H for query head h (repeat_kv); ALiBi -m_h·(p_i - p_j) with BLOOM's
 * slopes; causal p_j <= p_i and window |p_i - p_j| < W tested key by key. Appended keys (bias_k,
 * zero key) have no position: not rotated, no ALiBi bias, never masked.
 */
#include "mha_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const float *param(const mha_layer *layer, const char *name)
{
    int i = mha_layer_param_find(layer, name);
    return i < 0 ? NULL : mha_layer_param_data(layer, i);
}

static double mask_value(const mha_mask *m, int64_t idx)
{
    if (m->type == MHA_MASK_BOOL)
        return ((const uint8_t *)m->data)[idx] ? -INFINITY : 0.0;
    return ((const float *)m->data)[idx];
}

/* x[b,i,:] of a layer-ordered tensor (batched per batch_first, or unbatched) with feat features. */
static const float *row_of(const mha_tensor *t, bool batched, bool bf, int64_t b, int64_t i)
{
    int64_t feat = t->shape[t->ndim - 1];
    if (!batched)
        return t->data + i * feat;
    if (bf)
        return t->data + (b * t->shape[1] + i) * feat;
    return t->data + (i * t->shape[1] + b) * feat;
}

/* Position of row i of batch b: given ([len] or [N,len]) or i. */
static int64_t pos_of(const mha_positions *p, int64_t b, int64_t len, int64_t i)
{
    if (!p->data)
        return i;
    return p->ndim == 2 ? p->data[b * len + i] : p->data[i];
}

/* Rotates x [hd] (double, values already rounded to float) at position p, RoPE. */
static void rope(double *x, int64_t hd, double theta, int64_t p)
{
    const int64_t half = hd / 2;
    for (int64_t d = 0; d < half; d++) {
        const float inv = (float)(1.0 / pow(theta, (double)(2 * d) / (double)hd));
        const float angle = inv * (float)p;
        const double c = (float)cos((double)angle), s = (float)sin((double)angle);
        const double a = x[d], b = x[d + half];
        x[d] = (float)(a * c - b * s);
        x[d + half] = (float)(b * c + a * s);
    }
}

/* BLOOM's build_alibi_tensor, in double: n = 2^floor(log2 H); base 2^(-8/n), slopes base^1..n;
 * then extra_base 2^(-4/n) to the odd powers 1, 3, ... for the H - n remaining heads. */
static double alibi_slope(int64_t h, int64_t H)
{
    int64_t n = (int64_t)1 << (int64_t)floor(log2((double)H));
    if (h < n)
        return (float)pow(pow(2.0, -8.0 / (double)n), (double)(h + 1));
    return (float)pow(pow(2.0, -4.0 / (double)n), (double)(2 * (h - n) + 1));
}

void ref_mha_forward(const mha_layer *layer, const mha_inputs *in, float *out, float *weights,
                     float *tr[MHA_TRACE_NSTAGES])
{
    const mha_config *c = mha_layer_config(layer);
    const int64_t E = c->embed_dim, H = c->num_heads, Kd = c->kdim, Vd = c->vdim;
    const int64_t hd = c->head_dim, Hkv = c->num_kv_heads, Dq = H * hd, Dkv = Hkv * hd;
    const bool bf = c->batch_first;
    const mha_tensor *q = &in->query;
    const mha_tensor *k = in->key.data ? &in->key : q;
    const mha_tensor *v = in->value.data ? &in->value : k;
    const bool batched = q->ndim == 3;
    const int64_t N = batched ? (bf ? q->shape[0] : q->shape[1]) : 1;
    const int64_t L = batched ? (bf ? q->shape[1] : q->shape[0]) : q->shape[0];
    const int64_t S0 = batched ? (bf ? k->shape[1] : k->shape[0]) : k->shape[0];
    const int64_t S = S0 + c->add_bias_kv + c->add_zero_attn;
    const float *w_in = param(layer, "in_proj_weight");
    const float *wq = w_in ? w_in : param(layer, "q_proj_weight");
    const float *wk = w_in ? w_in + Dq * E : param(layer, "k_proj_weight");
    const float *wv = w_in ? w_in + (Dq + Dkv) * E : param(layer, "v_proj_weight");
    const float *b_in = param(layer, "in_proj_bias");
    const float *bk = param(layer, "bias_k"), *bv = param(layer, "bias_v");
    const float *wo = param(layer, "out_proj.weight"), *bo = param(layer, "out_proj.bias");

    double *Q = calloc((size_t)(L * Dq), sizeof(double));
    double *K = calloc((size_t)(S * Dkv), sizeof(double));
    double *V = calloc((size_t)(S * Dkv), sizeof(double));
    double *P = calloc((size_t)(H * L * S), sizeof(double));
    double *cat = calloc((size_t)(L * Dq), sizeof(double));
    int64_t *qpos = calloc((size_t)L, sizeof(int64_t)), *kpos = calloc((size_t)S0, sizeof(int64_t));
    /* self-attention (key left out, or the query's shape and values): keys at the query positions */
    bool self = k == q;
    if (!self && k->ndim == q->ndim) {
        int64_t n = 1;
        self = true;
        for (int d = 0; d < q->ndim; d++) {
            self = self && k->shape[d] == q->shape[d];
            n *= q->shape[d];
        }
        for (int64_t t = 0; self && t < n; t++)
            self = memcmp(&k->data[t], &q->data[t], sizeof(float)) == 0;
    }
    for (int64_t b = 0; b < N; b++) {
        for (int64_t i = 0; i < L; i++)
            qpos[i] = pos_of(&in->positions, b, L, i);
        for (int64_t j = 0; j < S0; j++)
            kpos[j] = in->key_positions.data ? pos_of(&in->key_positions, b, S0, j)
                      : S0 == L && self      ? qpos[j]
                                             : j;
        for (int64_t i = 0; i < L; i++) {
            const float *x = row_of(q, batched, bf, b, i);
            for (int64_t e = 0; e < Dq; e++) {
                double s = b_in ? b_in[e] : 0;
                for (int64_t t = 0; t < E; t++)
                    s += (double)x[t] * wq[e * E + t];
                Q[i * Dq + e] = (float)s;
            }
        }
        for (int64_t j = 0; j < S0; j++) {
            const float *xk = row_of(k, batched, bf, b, j), *xv = row_of(v, batched, bf, b, j);
            for (int64_t e = 0; e < Dkv; e++) {
                double sk = b_in ? b_in[Dq + e] : 0, sv = b_in ? b_in[Dq + Dkv + e] : 0;
                for (int64_t t = 0; t < Kd; t++)
                    sk += (double)xk[t] * wk[e * Kd + t];
                for (int64_t t = 0; t < Vd; t++)
                    sv += (double)xv[t] * wv[e * Vd + t];
                K[j * Dkv + e] = (float)sk;
                V[j * Dkv + e] = (float)sv;
            }
        }
        if (tr) { /* before RoPE */
            for (int64_t i = 0; i < L * Dq && tr[MHA_TRACE_Q_PROJ]; i++)
                tr[MHA_TRACE_Q_PROJ][b * L * Dq + i] = (float)Q[i];
            for (int64_t i = 0; i < S0 * Dkv; i++) {
                if (tr[MHA_TRACE_K_PROJ])
                    tr[MHA_TRACE_K_PROJ][b * S0 * Dkv + i] = (float)K[i];
                if (tr[MHA_TRACE_V_PROJ])
                    tr[MHA_TRACE_V_PROJ][b * S0 * Dkv + i] = (float)V[i];
            }
        }
        if (c->rope) {
            for (int64_t i = 0; i < L; i++)
                for (int64_t h = 0; h < H; h++)
                    rope(Q + i * Dq + h * hd, hd, c->rope_theta, qpos[i]);
            for (int64_t j = 0; j < S0; j++)
                for (int64_t g = 0; g < Hkv; g++)
                    rope(K + j * Dkv + g * hd, hd, c->rope_theta, kpos[j]);
        }
        int64_t extra = S0;
        if (c->add_bias_kv) {
            for (int64_t e = 0; e < Dkv; e++) {
                K[extra * Dkv + e] = bk[e];
                V[extra * Dkv + e] = bv[e];
            }
            extra++;
        }
        if (c->add_zero_attn) {
            for (int64_t e = 0; e < Dkv; e++)
                K[extra * Dkv + e] = V[extra * Dkv + e] = 0;
        }
        if (tr) {
            for (int64_t h = 0; h < H; h++)
                for (int64_t d = 0; d < hd; d++)
                    for (int64_t i = 0; i < L && tr[MHA_TRACE_Q_HEADS]; i++)
                        tr[MHA_TRACE_Q_HEADS][((b * H + h) * L + i) * hd + d] =
                            (float)Q[i * Dq + h * hd + d];
            for (int64_t g = 0; g < Hkv; g++)
                for (int64_t d = 0; d < hd; d++)
                    for (int64_t j = 0; j < S; j++) {
                        if (tr[MHA_TRACE_K_HEADS])
                            tr[MHA_TRACE_K_HEADS][((b * Hkv + g) * S + j) * hd + d] =
                                (float)K[j * Dkv + g * hd + d];
                        if (tr[MHA_TRACE_V_HEADS])
                            tr[MHA_TRACE_V_HEADS][((b * Hkv + g) * S + j) * hd + d] =
                                (float)V[j * Dkv + g * hd + d];
                    }
        }
        for (int64_t h = 0; h < H; h++) {
            const int64_t g = h * Hkv / H; /* repeat_kv */
            const double slope = c->alibi ? alibi_slope(h, H) : 0.0;
            for (int64_t i = 0; i < L; i++) {
                double *p = P + (h * L + i) * S;
                double max = -INFINITY;
                for (int64_t j = 0; j < S; j++) {
                    double dot = 0;
                    for (int64_t d = 0; d < hd; d++)
                        dot += Q[i * Dq + h * hd + d] * K[j * Dkv + g * hd + d];
                    /* torch 2.x: masks merged by addition; appended keys unmasked */
                    double mask = 0;
                    if (j < S0) {
                        const int64_t dist = qpos[i] - kpos[j];
                        mask -= slope * (double)dist;
                        if (in->attn_mask.data)
                            mask += mask_value(&in->attn_mask, in->attn_mask.ndim == 3
                                                                   ? ((b * H + h) * L + i) * S0 + j
                                                                   : i * S0 + j);
                        if (in->key_padding_mask.data)
                            mask += mask_value(&in->key_padding_mask, b * S0 + j);
                        if (in->is_causal && dist < 0)
                            mask = -INFINITY;
                        if (c->window && (dist >= c->window || -dist >= c->window))
                            mask = -INFINITY;
                    }
                    p[j] = dot / sqrt((double)hd) + mask;
                    if (p[j] > max)
                        max = p[j];
                }
                if (tr && tr[MHA_TRACE_SCORES])
                    for (int64_t j = 0; j < S; j++)
                        tr[MHA_TRACE_SCORES][((b * H + h) * L + i) * S + j] = (float)p[j];
                double sum = 0;
                for (int64_t j = 0; j < S; j++) {
                    p[j] = max == -INFINITY ? 0 : exp(p[j] - max);
                    sum += p[j];
                }
                for (int64_t j = 0; j < S; j++)
                    p[j] = sum > 0 ? p[j] / sum : 0;
                if (tr && tr[MHA_TRACE_ATTN_WEIGHTS])
                    for (int64_t j = 0; j < S; j++)
                        tr[MHA_TRACE_ATTN_WEIGHTS][((b * H + h) * L + i) * S + j] = (float)p[j];
                for (int64_t d = 0; d < hd; d++) {
                    double o = 0;
                    for (int64_t j = 0; j < S; j++)
                        o += p[j] * V[j * Dkv + g * hd + d];
                    cat[i * Dq + h * hd + d] = o;
                    if (tr && tr[MHA_TRACE_HEAD_OUTPUTS])
                        tr[MHA_TRACE_HEAD_OUTPUTS][((b * H + h) * L + i) * hd + d] = (float)o;
                }
            }
        }
        for (int64_t i = 0; i < L; i++) {
            float *o = (float *)row_of(
                &(mha_tensor){out, q->ndim, {q->shape[0], q->shape[1], q->shape[2]}}, batched, bf,
                b, i);
            for (int64_t e = 0; e < E; e++) {
                double s = bo ? bo[e] : 0;
                for (int64_t t = 0; t < Dq; t++)
                    s += cat[i * Dq + t] * wo[e * Dq + t];
                o[e] = (float)s;
                if (tr && tr[MHA_TRACE_OUTPUT])
                    tr[MHA_TRACE_OUTPUT][(b * L + i) * E + e] = (float)s;
            }
            for (int64_t t = 0; t < Dq && tr && tr[MHA_TRACE_CONCAT]; t++)
                tr[MHA_TRACE_CONCAT][(b * L + i) * Dq + t] = (float)cat[i * Dq + t];
        }
        if (in->need_weights) {
            for (int64_t i = 0; i < L; i++)
                for (int64_t j = 0; j < S; j++) {
                    if (in->average_attn_weights) {
                        double s = 0;
                        for (int64_t h = 0; h < H; h++)
                            s += P[(h * L + i) * S + j];
                        weights[(b * L + i) * S + j] = (float)(s / H);
                    } else {
                        for (int64_t h = 0; h < H; h++)
                            weights[((b * H + h) * L + i) * S + j] = (float)P[(h * L + i) * S + j];
                    }
                }
        }
    }
    free(Q);
    free(K);
    free(V);
    free(P);
    free(cat);
    free(qpos);
    free(kpos);
}
