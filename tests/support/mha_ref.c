/*
 * mha_ref.c - a naive forward pass to check the engine against (see mha_ref.h).
 */
#include "mha_ref.h"

#include <math.h>
#include <stdlib.h>

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

void ref_mha_forward(const mha_layer *layer, const mha_inputs *in, float *out,
                            float *weights, float *tr[MHA_TRACE_NSTAGES])
{
    const mha_config *c = mha_layer_config(layer);
    const int64_t E = c->embed_dim, H = c->num_heads, hd = E / H, Kd = c->kdim, Vd = c->vdim;
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
    const float *wk = w_in ? w_in + E * E : param(layer, "k_proj_weight");
    const float *wv = w_in ? w_in + 2 * E * E : param(layer, "v_proj_weight");
    const float *b_in = param(layer, "in_proj_bias");
    const float *bk = param(layer, "bias_k"), *bv = param(layer, "bias_v");
    const float *wo = param(layer, "out_proj.weight"), *bo = param(layer, "out_proj.bias");

    double *Q = calloc((size_t)(L * E), sizeof(double));
    double *K = calloc((size_t)(S * E), sizeof(double));
    double *V = calloc((size_t)(S * E), sizeof(double));
    double *P = calloc((size_t)(H * L * S), sizeof(double));
    double *cat = calloc((size_t)(L * E), sizeof(double));
    for (int64_t b = 0; b < N; b++) {
        for (int64_t i = 0; i < L; i++) {
            const float *x = row_of(q, batched, bf, b, i);
            for (int64_t e = 0; e < E; e++) {
                double s = b_in ? b_in[e] : 0;
                for (int64_t t = 0; t < E; t++)
                    s += (double)x[t] * wq[e * E + t];
                Q[i * E + e] = (float)s;
            }
        }
        for (int64_t j = 0; j < S0; j++) {
            const float *xk = row_of(k, batched, bf, b, j), *xv = row_of(v, batched, bf, b, j);
            for (int64_t e = 0; e < E; e++) {
                double sk = b_in ? b_in[E + e] : 0, sv = b_in ? b_in[2 * E + e] : 0;
                for (int64_t t = 0; t < Kd; t++)
                    sk += (double)xk[t] * wk[e * Kd + t];
                for (int64_t t = 0; t < Vd; t++)
                    sv += (double)xv[t] * wv[e * Vd + t];
                K[j * E + e] = (float)sk;
                V[j * E + e] = (float)sv;
            }
        }
        int64_t extra = S0;
        if (c->add_bias_kv) {
            for (int64_t e = 0; e < E; e++) {
                K[extra * E + e] = bk[e];
                V[extra * E + e] = bv[e];
            }
            extra++;
        }
        if (c->add_zero_attn) {
            for (int64_t e = 0; e < E; e++)
                K[extra * E + e] = V[extra * E + e] = 0;
        }
        if (tr) {
            for (int64_t i = 0; i < L * E && tr[MHA_TRACE_Q_PROJ]; i++)
                tr[MHA_TRACE_Q_PROJ][b * L * E + i] = (float)Q[i];
            for (int64_t i = 0; i < S0 * E; i++) {
                if (tr[MHA_TRACE_K_PROJ])
                    tr[MHA_TRACE_K_PROJ][b * S0 * E + i] = (float)K[i];
                if (tr[MHA_TRACE_V_PROJ])
                    tr[MHA_TRACE_V_PROJ][b * S0 * E + i] = (float)V[i];
            }
            for (int64_t h = 0; h < H; h++)
                for (int64_t d = 0; d < hd; d++) {
                    for (int64_t i = 0; i < L && tr[MHA_TRACE_Q_HEADS]; i++)
                        tr[MHA_TRACE_Q_HEADS][((b * H + h) * L + i) * hd + d] =
                            (float)Q[i * E + h * hd + d];
                    for (int64_t j = 0; j < S; j++) {
                        if (tr[MHA_TRACE_K_HEADS])
                            tr[MHA_TRACE_K_HEADS][((b * H + h) * S + j) * hd + d] =
                                (float)K[j * E + h * hd + d];
                        if (tr[MHA_TRACE_V_HEADS])
                            tr[MHA_TRACE_V_HEADS][((b * H + h) * S + j) * hd + d] =
                                (float)V[j * E + h * hd + d];
                    }
                }
        }
        for (int64_t h = 0; h < H; h++) {
            for (int64_t i = 0; i < L; i++) {
                double *p = P + (h * L + i) * S;
                double max = -INFINITY;
                for (int64_t j = 0; j < S; j++) {
                    double dot = 0;
                    for (int64_t d = 0; d < hd; d++)
                        dot += Q[i * E + h * hd + d] * K[j * E + h * hd + d];
                    double mask =
                        0; /* torch 2.x: masks merged by addition; appended keys unmasked */
                    if (j < S0) {
                        if (in->attn_mask.data)
                            mask += mask_value(&in->attn_mask, in->attn_mask.ndim == 3
                                                                   ? ((b * H + h) * L + i) * S0 + j
                                                                   : i * S0 + j);
                        if (in->key_padding_mask.data)
                            mask += mask_value(&in->key_padding_mask, b * S0 + j);
                        if (in->is_causal && j > i)
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
                        o += p[j] * V[j * E + h * hd + d];
                    cat[i * E + h * hd + d] = o;
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
                for (int64_t t = 0; t < E; t++)
                    s += cat[i * E + t] * wo[e * E + t];
                o[e] = (float)s;
                if (tr && tr[MHA_TRACE_OUTPUT])
                    tr[MHA_TRACE_OUTPUT][(b * L + i) * E + e] = (float)s;
                if (tr && tr[MHA_TRACE_CONCAT])
                    tr[MHA_TRACE_CONCAT][(b * L + i) * E + e] = (float)cat[i * E + e];
            }
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
}
