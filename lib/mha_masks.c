/*
 * mha_masks.c - the masks on a row's keys (attn_mask, key_padding_mask; bool true = -inf, float
 * added): added to a block's scores by the attention core, and asked, for a row that attended no
 * key, whether they (with the causal and window rules) left it any: that tells the masks' doing
 * (weights and output 0, docs/api.md) from float32's (every score overflowed to -inf, or is NaN:
 * torch gives NaN, and the pass is refused).
 */
#include "mha_core.h"

#include <math.h>
#include <string.h>

static inline float mask_val(const void *m, mha_mask_type t, int64_t j)
{
    if (t == MHA_MASK_BOOL)
        return ((const uint8_t *)m)[j] ? -INFINITY : 0.0f;
    return ((const float *)m)[j];
}

void mha_apply_masks(float *row, int64_t n, const void *am, mha_mask_type amt, const void *kp,
                     mha_mask_type kpt)
{
    if (am && kp) {
        for (int64_t j = 0; j < n; j++)
            row[j] += mask_val(am, amt, j) + mask_val(kp, kpt, j);
    } else if (am) {
        for (int64_t j = 0; j < n; j++)
            row[j] += mask_val(am, amt, j);
    } else if (kp) {
        for (int64_t j = 0; j < n; j++)
            row[j] += mask_val(kp, kpt, j);
    }
}

const void *mha_mask_at(const mha_mask *m, int64_t row, int64_t width, int64_t col)
{
    size_t elem = m->type == MHA_MASK_BOOL ? 1 : sizeof(float);
    return (const char *)m->data + (size_t)(row * width + col) * elem;
}

int64_t mha_attn_mask_row(const mha_attn *a, int64_t b, int64_t h, int64_t qi)
{
    const mha_mask *am = &a->in->attn_mask;
    return am->ndim == 3 ? (b * a->H + h) * a->L + qi : qi;
}

bool mha_row_allows_a_key(const mha_attn *a, int64_t b, int64_t h, int64_t qi, float qp,
                          const float *kp, int64_t k0, int64_t k1, int *same)
{
    if (a->S > a->S0) /* add_bias_kv / add_zero_attn: the appended keys are never masked */
        return true;
    if (k1 <= k0)
        return false;
    const mha_inputs *in = a->in;
    const bool rules = a->causal || a->window;
    const mha_mask *am = in->attn_mask.data ? &in->attn_mask : NULL;
    const mha_mask *kpm = in->key_padding_mask.data ? &in->key_padding_mask : NULL;
    if (!am && !rules && *same >= 0)
        return *same;
    const int64_t S0 = a->S0, arow = am ? mha_attn_mask_row(a, b, h, qi) : 0;
    if (am && !kpm && !rules) { /* the attn_mask's row alone: one scan for an allowed key */
        const void *amr = mha_mask_at(am, arow, S0, k0);
        const int64_t n = k1 - k0;
        if (am->type == MHA_MASK_BOOL)
            return memchr(amr, 0, (size_t)n) != NULL;
        const float *x = amr;
        bool any = false;
        for (int64_t j = 0; j < n; j++)
            any |= x[j] > -INFINITY;
        return any;
    }
    float chunk[256]; /* [256] the masks' and rules' part of a row's scores */
    bool any = false;
    for (int64_t j0 = k0; j0 < k1 && !any; j0 += 256) {
        const int64_t n = k1 - j0 < 256 ? k1 - j0 : 256;
        memset(chunk, 0, (size_t)n * sizeof(float));
        const void *amr = am ? mha_mask_at(am, arow, S0, j0) : NULL;
        const void *kpr = kpm ? mha_mask_at(kpm, b, S0, j0) : NULL;
        if (amr || kpr)
            mha_apply_masks(chunk, n, amr, am ? am->type : MHA_MASK_FLOAT, kpr,
                            kpm ? kpm->type : MHA_MASK_FLOAT);
        if (rules)
            mha_rules_row(chunk, kp + j0, n, qp, a->causal, a->window, a->keys_sorted);
        for (int64_t j = 0; j < n; j++)
            any |= chunk[j] > -INFINITY;
    }
    if (!am && !rules)
        *same = any;
    return any;
}
