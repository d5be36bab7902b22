/*
 * mha_kv_pack.c - the attention's keys and values laid out for its kernels (mha_attention.c says
 * the layout): Kᵀ blocks [hd][BN] and V rows [S][hd] per (batch, kv head), by a phase of their own
 * (mha_attn_pack_task, with the keys add_bias_kv and add_zero_attn append), or from the
 * in-projection's epilogues as it makes k and v (mha_attn_pack_keys_from / _values_from).
 */
#include "mha_core.h"
#include "mha_pack.h"

#include <string.h>

void mha_attn_pack_task(void *arg, int64_t task, int slot)
{
    (void)slot;
    const mha_attn *a = arg;
    if (mha_cancelled(a->in->cancel))
        return;
    const mha_layer *layer = a->layer;
    const int64_t hd = a->hd, BN = a->BN, blk = task % a->nblk, bg = task / a->nblk;
    const int64_t b = bg / a->Hkv, g = bg % a->Hkv, j0 = blk * BN;
    const int64_t bn = a->S - j0 < BN ? a->S - j0 : BN;
    const int64_t gn = a->S0 - j0 < 0 ? 0 : a->S0 - j0 < bn ? a->S0 - j0 : bn; /* given keys */
    float *kt = a->kv + bg * a->kv_floats + blk * hd * BN;          /* [hd][BN] */
    float *vb = a->kv + bg * a->kv_floats + a->nblk * hd * BN + j0 * hd; /* [BN][hd] */
    const float *k = gn ? a->k + b * a->k_bs + j0 * a->k_rs + g * hd : a->k;
    const float *v = gn ? a->v + b * a->v_bs + j0 * a->v_rs + g * hd : a->v;
    /* the bn keys of the block (the kernels never read past them: no padding to write) */
    mha_pack_transposed(a->isa, kt, BN, k, a->k_rs, gn, hd, bn);
    mha_pack_rows(a->isa, vb, hd, v, a->v_rs, gn, hd, bn, hd);
    const int64_t c = a->S0 - j0; /* key S0: bias_k, value bias_v (then the zero key: zeros) */
    if (layer->cfg.add_bias_kv && c >= 0 && c < bn) {
        for (int64_t d = 0; d < hd; d++)
            kt[d * BN + c] = layer->bias_k[g * hd + d];
        memcpy(vb + c * hd, layer->bias_v + g * hd, (size_t)hd * sizeof(float));
    }
}

/* Rows [r0, r0+rows) of the k (keys) or v job, its columns [c0, c0+cols), at c (row stride ldc),
 * to their places in the packed keys or values, cut where a key block or a head ends. The job's
 * rows are a batch's keys in order (batch first, or N = 1), or key by key with the batches
 * interleaved (sequence first: a batch's next key N rows on). */
static void pack_from(const mha_attn *a, bool keys, int64_t r0, int64_t rows, int64_t c0,
                      int64_t cols, const float *c, int64_t ldc)
{
    const int64_t hd = a->hd, BN = a->BN, S0 = a->S0;
    const bool seq_first = a->k_bs < a->k_rs;
    const int64_t step = seq_first ? a->N : 1; /* rows from a key to the batch's next */
    /* the block's first rows of each batch (rows r0 .. r0 + min(step, rows) - 1), each followed by
     * that batch's next keys step rows apart: O(rows) however many batches the pass has */
    for (int64_t first = r0; first < r0 + (step < rows ? step : rows); first++) {
        for (int64_t r = first; r < r0 + rows;) {
            const int64_t b = seq_first ? r % step : r / S0, j = seq_first ? r / step : r % S0;
            const int64_t blk = j / BN, j0 = blk * BN;
            int64_t n = (r0 + rows - r + step - 1) / step;
            n = S0 - j < n ? S0 - j : n;
            n = j0 + BN - j < n ? j0 + BN - j : n; /* keys [j, j+n) of batch b, in block blk */
            for (int64_t col = c0; col < c0 + cols;) {
                const int64_t g = col / hd, d = col % hd;
                const int64_t w = c0 + cols - col < hd - d ? c0 + cols - col : hd - d;
                float *base = a->kv + (b * a->Hkv + g) * a->kv_floats;
                const float *src = c + (r - r0) * ldc + (col - c0);
                if (keys) /* Kᵀ block [hd][BN]: rows d.., columns j - j0.. */
                    mha_pack_transposed(a->isa, base + blk * hd * BN + d * BN + (j - j0), BN, src,
                                        step * ldc, n, w, n);
                else /* V rows [S][hd] after the nblk Kᵀ blocks */
                    mha_pack_rows(a->isa, base + a->nblk * hd * BN + j * hd + d, hd, src,
                                  step * ldc, n, w, n, w);
                col += w;
            }
            r += n * step;
        }
    }
}

void mha_attn_pack_keys_from(void *arg, int64_t r0, int64_t rows, int64_t c0, int64_t cols,
                             float *c, int64_t ldc)
{
    pack_from(arg, true, r0, rows, c0, cols, c, ldc);
}

void mha_attn_pack_values_from(void *arg, int64_t r0, int64_t rows, int64_t c0, int64_t cols,
                               float *c, int64_t ldc)
{
    pack_from(arg, false, r0, rows, c0, cols, c, ldc);
}
