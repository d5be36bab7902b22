/*
 * mha_forward.c - the forward pass: in-projection, fused attention core, out-projection.
 *
 * Layout: projected q/k/v and the concatenated head outputs keep the row order of the input
 * ([N,L,·] or [L,N,·]); a batch's rows are then reached through a batch stride and a row stride,
 * so nothing is ever transposed and the output comes out in the input's layout. Row (b, i) of a
 * buffer of row width W sits at b·bs + i·rs with (bs, rs) = (L·W, W) batch-first, (W, N·W) else.
 *
 * Attention core: one task per (batch, block of query rows); the task loops over heads and holds
 * only a [rows, S] block of scores per thread, so without weights working memory does not grow
 * with H·L·S. Scores = q·kᵀ (q already divided by √hd, as torch does), masks added, then the
 * softmax's exponentials in place with 1/sum per row kept aside; weights·v goes into the head's
 * columns of the concat buffer, which are then scaled by 1/sum (cheaper than normalising the
 * block, and the same arithmetic whether weights are asked for or not). Per-head weights are
 * written as exp · 1/sum straight from the block (non-temporal stores); averaged ones are summed
 * over heads in the output, then divided by H. With is_causal the keys past a block's last row
 * are skipped (the appended keys, never masked, are kept). The keys add_bias_kv and add_zero_attn
 * append are not in the k/v buffers: their score column is computed by a dot product (bias_k) or is
 * 0 (zero key), and their value is added separately (bias_v; the zero value adds nothing).
 *
 * GEMMs: the projections are single-threaded cblas_sgemm calls made from the pool's threads, in
 * row or column tiles (mha_gemm_avx512 instead when OpenBLAS's kernels are older than the CPU:
 * mha_own_gemm). The attention's two GEMMs use the AVX-512 kernels of mha_attn_avx512.c
 * where the CPU has AVX-512F and hd is a multiple of 16 (keys packed once per pass, per head,
 * by a parallel pass before the attention; or, when a batch's query rows are all in one task, by
 * that task right before use: mha_kpack_in_task), cblas_sgemm otherwise.
 * Scratch: one allocation per pass (plan.workspace_bytes + one slot per further thread, as many
 * as the workspace limit allows; a slot holds a score block, or packed weights for
 * mha_gemm_avx512), reused from the pool's cache when it is big enough.
 */
#include "mha_forward_internal.h"
#include "mha_select.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------- */
/* Parallel GEMM: C[M,Nc] = bias + A[M,K]·W[Nc,K]ᵀ, tiled over the pool */

typedef struct gemm_job {
    const float *A; /* [M,K], row stride lda  */
    int64_t lda;
    const float *W;    /* [Nc,K] contiguous      */
    const float *bias; /* [Nc] or NULL (zero)    */
    float *C;          /* [M,Nc], row stride ldc */
    int64_t ldc;
    int64_t M, Nc, K;
    int64_t row_parts, col_parts, first_task;
} gemm_job;

typedef struct gemm_set {
    gemm_job job[3];
    int n;
    int64_t ntasks;
    float *pack; /* NULL: cblas_sgemm; else mha_gemm_avx512 with [slot][pack_floats] buffers */
    int64_t pack_floats;
    const int *cancel; /* mha_inputs.cancel: set before gemm_add, which then tiles even on one thread */
} gemm_set;

/* Multiply-adds a tile of a GEMM holds at most when a pass can be cancelled: a few milliseconds of
 * one core, so a cancelled pass stops that soon even in a projection run on one thread. */
#define CANCEL_TILE_MADDS (1 << 28)

/* True once the caller set the pass's cancel flag (mha_inputs.cancel). */
static inline bool cancelled(const int *flag)
{
    return flag && __atomic_load_n(flag, __ATOMIC_RELAXED);
}

/* Boundary of part p of n over [0, len), on a multiple of 16 (kernel-friendly) except the end. */
static int64_t part_bound(int64_t len, int64_t p, int64_t n)
{
    if (p >= n)
        return len;
    int64_t b = len * p / n;
    return b - b % 16;
}

static void gemm_add(gemm_set *set, const float *A, int64_t lda, const float *W, const float *bias,
                     float *C, int64_t ldc, int64_t M, int64_t Nc, int64_t K, int threads)
{
    gemm_job *g = &set->job[set->n++];
    *g = (gemm_job){A, lda, W, bias, C, ldc, M, Nc, K, 1, 1, set->ntasks};
    double work = (double)M * (double)Nc * (double)K;
    if ((threads > 1 || set->cancel) && work >= 1 << 20) {
        /* Two tiles per thread, so a thread slowed by a neighbour on the machine hands part of
         * its share to the other. Each tile makes OpenBLAS repack the operand it shares with the
         * other tiles (all of W for row tiles, all of A for column tiles): splitting the longer
         * side keeps that below ~1/(4·side) of the work. Tiles keep at least 64 rows/columns.
         * A pass that can be cancelled also keeps tiles under CANCEL_TILE_MADDS. */
        int64_t want = 2 * (int64_t)threads, side = M >= Nc ? M : Nc;
        if (set->cancel && work / CANCEL_TILE_MADDS + 1 > (double)want)
            want = (int64_t)(work / CANCEL_TILE_MADDS) + 1;
        int64_t parts = side / 64 < want ? side / 64 : want;
        if (parts > 1) {
            if (M >= Nc)
                g->row_parts = parts;
            else
                g->col_parts = parts;
        }
    }
    set->ntasks += g->row_parts * g->col_parts;
}

static void gemm_task(void *arg, int64_t task, int slot)
{
    const gemm_set *set = arg;
    if (cancelled(set->cancel))
        return;
    const gemm_job *g = &set->job[0];
    for (int i = 1; i < set->n && task >= set->job[i].first_task; i++)
        g = &set->job[i];
    int64_t t = task - g->first_task;
    int64_t rp = t / g->col_parts, cp = t % g->col_parts;
    int64_t r0 = part_bound(g->M, rp, g->row_parts), r1 = part_bound(g->M, rp + 1, g->row_parts);
    int64_t c0 = part_bound(g->Nc, cp, g->col_parts), c1 = part_bound(g->Nc, cp + 1, g->col_parts);
    if (r1 <= r0 || c1 <= c0)
        return;
    float *C = g->C + r0 * g->ldc + c0;
    if (set->pack) { /* starts its sums from the bias itself */
        mha_gemm_avx512(C, g->ldc, g->bias ? g->bias + c0 : NULL, g->A + r0 * g->lda, g->lda,
                        g->W + c0 * g->K, r1 - r0, c1 - c0, g->K,
                        set->pack + slot * set->pack_floats);
        return;
    }
    for (int64_t r = 0; r < r1 - r0; r++) { /* torch's addmm: the bias first, then += A·Wᵀ */
        if (g->bias)
            memcpy(C + r * g->ldc, g->bias + c0, (size_t)(c1 - c0) * sizeof(float));
        else
            memset(C + r * g->ldc, 0, (size_t)(c1 - c0) * sizeof(float));
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)(r1 - r0), (int)(c1 - c0), (int)g->K,
                1.0f, g->A + r0 * g->lda, (int)g->lda, g->W + c0 * g->K, (int)g->K, 1.0f, C,
                (int)g->ldc);
}

/* ---------------------------------------------------------------------------------------------- */
/* Attention core                                                                                 */

typedef struct fwd {
    const mha_layer *layer;
    const mha_inputs *in;
    const mha_trace *trace;
    int64_t N, L, S0, S, E, H, Hkv, grp, hd, Dq, Dkv, rb, nblk;
    float *q, *k, *v, *cat; /* projected rows and concat, input row order        */
    int64_t q_bs, q_rs, k_bs, k_rs, v_bs, v_rs, c_bs, c_rs; /* batch and row strides (floats) */
    float *weights; /* [N,H,L,S] per head, [N,L,S] averaged, or NULL     */
    bool per_head;
    float *kpack; /* keys packed for the AVX-512 kernels: [N,Hkv][kp_floats], or NULL  */
    int64_t kp_floats;
    bool kpack_in_task; /* ... or one kv head's at a time, in the task's slot at kp_offset */
    bool avx512;    /* attention GEMMs by mha_attn_avx512.c, else cblas                */
    mha_isa isa;    /* the plan's kernel set (softmax and row kernels)                  */
    float *scratch; /* [threads][slot_floats]: a [rb,S] score block, rb inverses, packed keys */
    int64_t slot_floats, inv_offset, kp_offset;
    float qscale; /* √hd as float, as torch divides by it               */
    /* A selection (plan.selected): the chosen weights, and the trace's scores and weights stages,
     * go through sinks instead of the full [rows, S] writes above (NULL: not wanted). */
    mha_sink *sink_w, *sink_scores, *sink_tw;
    /* positions */
    float *qpos, *kpos;   /* [N,L], [N,S0]: positions as floats (exact)            */
    bool keys_sorted;     /* every batch's key positions nondecreasing              */
    bool causal, alibi;
    int64_t window;       /* 0: none                                                */
    /* RoPE */
    mha_pos_layout pl;
    float *rope_q, *rope_k; /* [q_rows][hd], [k_rows][hd]: cos | sin per row (rope_k may be
                             * rope_q: k_is_q)                                           */
    float *inv_freq;        /* [hd/2]                                                   */
} fwd;

static inline float mask_val(const void *m, mha_mask_type t, int64_t j)
{
    if (t == MHA_MASK_BOOL)
        return ((const uint8_t *)m)[j] ? -INFINITY : 0.0f;
    return ((const float *)m)[j];
}

/* Adds the merged masks to n scores of one row (given keys only: appended keys are never
 * masked). am, kp: the mask entries of those keys (attn_mask / key_padding_mask) or NULL. */
static void apply_masks(float *row, int64_t n, const void *am, mha_mask_type amt, const void *kp,
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

/* Entry col of row `row` of a mask of row width `width`. */
static const void *mask_at(const mha_mask *m, int64_t row, int64_t width, int64_t col)
{
    size_t elem = m->type == MHA_MASK_BOOL ? 1 : sizeof(float);
    return (const char *)m->data + (size_t)(row * width + col) * elem;
}

/* Writes m rows of the block sc (kn keys from key k0 on, then the S - S0 appended ones; row
 * stride S) as rows of S columns at dst: keys [k0, k0+kn) in place, the keys skipped on either
 * side as `skipped`, the appended keys at S0. scale NULL copies; else each row r is multiplied by
 * scale[r], with non-temporal stores. keys_written: columns [k0,k0+kn) are there already
 * (mha_pv_avx512 wrote them). */
static void expand_rows(float *dst, const float *sc, int64_t m, int64_t S, int64_t S0, int64_t k0,
                        int64_t kn, const float *scale, float skipped, bool keys_written)
{
    if (scale && !keys_written)
        mha_scale_rows_stream(dst + k0, S, sc, S, m, kn, scale);
    for (int64_t r = 0; r < m; r++) {
        float *d = dst + r * S;
        const float *x = sc + r * S;
        const float v = scale ? scale[r] : 1.0f;
        if (!scale && !keys_written)
            memcpy(d + k0, x, (size_t)kn * sizeof(float));
        for (int64_t j = 0; j < k0; j++)
            d[j] = skipped;
        for (int64_t j = k0 + kn; j < S0; j++)
            d[j] = skipped;
        for (int64_t j = S0; j < S; j++)
            d[j] = scale ? x[kn + j - S0] * v : x[kn + j - S0];
    }
}

/* Hands one head's block to a sink: the computed keys [k0,k0+kn) from column 0, the appended keys
 * [S0,S) from column kn, the skipped keys [0,k0) and [k0+kn,S0) as the sink's fill (weights 0,
 * scores -inf). Values are sc · inv (weights) or sc itself (inv NULL: scores). */
static void sink_block(mha_sink *s, int slot, int64_t b, int64_t h, int64_t i0, int64_t m,
                       const float *sc, int64_t S, int64_t S0, int64_t k0, int64_t kn,
                       const float *inv)
{
    if (!s || !mha_sink_wants_head(s, h) || !mha_sink_wants_rows(s, i0, m))
        return;
    mha_sink_head_begin(s, slot, b, h, i0, m);
    if (k0 > 0)
        mha_sink_fill(s, slot, b, h, i0, m, 0, k0);
    mha_sink_feed(s, slot, b, h, i0, m, k0, kn, sc, S, inv);
    if (k0 + kn < S0)
        mha_sink_fill(s, slot, b, h, i0, m, k0 + kn, S0 - k0 - kn);
    if (S > S0)
        mha_sink_feed(s, slot, b, h, i0, m, S0, S - S0, sc + kn, S, inv);
    mha_sink_head_end(s, slot, b, h, i0, m);
}

static void attention_task(void *arg, int64_t task, int slot)
{
    const fwd *f = arg;
    if (cancelled(f->in->cancel))
        return; /* the rest of a cancelled pass: nothing to do */
    const mha_layer *layer = f->layer;
    const mha_inputs *in = f->in;
    const int64_t S0 = f->S0, S = f->S, H = f->H, hd = f->hd, L = f->L;
    const int64_t b = task / f->nblk, i0 = (task % f->nblk) * f->rb;
    const int64_t m = L - i0 < f->rb ? L - i0 : f->rb;
    float *qb = f->q + b * f->q_bs + i0 * f->q_rs; /* row r at qb + r·q_rs */
    const float *kb = f->k + b * f->k_bs;
    const float *vb = f->v + b * f->v_bs;
    float *cb = f->cat + b * f->c_bs + i0 * f->c_rs;
    const float *qp = f->qpos + b * L + i0; /* the block's query positions [m]  */
    const float *kp = f->kpos + b * S0;     /* the batch's key positions [S0]    */
    const mha_mask *am = in->attn_mask.data ? &in->attn_mask : NULL;
    const mha_mask *kpm = in->key_padding_mask.data ? &in->key_padding_mask : NULL;
    float *trace_scores = f->trace ? f->trace->stage[MHA_TRACE_SCORES] : NULL;
    float *trace_weights = f->trace ? f->trace->stage[MHA_TRACE_ATTN_WEIGHTS] : NULL;
    float *avg = f->weights && !f->per_head ? f->weights + (b * L + i0) * S : NULL;
    /* Keys computed: [k0, k0+kn). Causal masks every key past the block's last position and a
     * window every key before its first one minus W, so those are skipped (about half the work
     * for causal, all but ~W + rows keys per block for a window): their scores are -inf and their
     * weights 0. With prepacked keys the range starts on a panel of 16 (the extra keys are masked
     * by the rules like any other). The keys add_bias_kv and add_zero_attn append are never masked
     * (torch pads the masks with zeros for them); the block holds them right after the computed
     * keys, at column kn, and they go to columns S0.. of the weights. */
    int64_t k0, k1;
    mha_key_range(&k0, &k1, qp, m, kp, S0, f->keys_sorted, f->causal, f->window);
    if (f->avx512 && !f->kpack_in_task)
        k0 -= k0 % 16;
    const int64_t kn = k1 - k0;
    const int64_t ncols = kn + (S - S0); /* block columns in play */
    const int64_t col_bk = layer->cfg.add_bias_kv ? kn : -1;
    const int64_t col_zero = layer->cfg.add_zero_attn ? kn + (layer->cfg.add_bias_kv ? 1 : 0) : -1;
    const bool rules = f->causal || f->window;

    /* torch: q_scaled = q / sqrt(head_dim) (after RoPE) */
    mha_div_mul_rows_isa(f->isa, qb, f->q_rs, m, f->Dq, f->qscale, NULL);
    float *sc = f->scratch + slot * f->slot_floats; /* this thread's block, hot in cache */
    float *inv = sc + f->inv_offset;
    mha_sink *const sinks[3] = {f->sink_w, f->sink_scores, f->sink_tw};
    for (int k = 0; k < 3; k++)
        if (sinks[k])
            mha_sink_begin(sinks[k], slot, b, i0, m);
    float *keys = NULL;
    for (int64_t h = 0; h < H; h++) {
        const int64_t g = h / f->grp;              /* the kv head query head h reads */
        const int64_t bhl = (b * H + h) * L + i0; /* row of [N,H,L,·] stages */
        const float *kg = kb + g * hd + k0 * f->k_rs, *vg = vb + g * hd + k0 * f->v_rs;
        if (f->avx512 && kn > 0) {
            if (!f->kpack_in_task)
                keys = f->kpack + (b * f->Hkv + g) * f->kp_floats + k0 / 16 * 16 * hd;
            else if (h % f->grp == 0) { /* once per kv head: its query heads come in a row */
                keys = sc + f->kp_offset;
                mha_pack_keys(keys, kg, f->k_rs, kn, hd);
            }
            mha_scores_avx512(sc, S, qb + h * hd, f->q_rs, keys, m, kn, hd);
        } else if (kn > 0)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)kn, (int)hd, 1.0f,
                        qb + h * hd, (int)f->q_rs, kg, (int)f->k_rs, 0.0f, sc, (int)S);
        const float slope = f->alibi ? mha_alibi_slope(h, H) : 0.0f;
        for (int64_t r = 0; r < m; r++) {
            float *row = sc + r * S;
            const int64_t i = i0 + r;
            if (col_bk >= 0) {
                const float *qr = qb + r * f->q_rs + h * hd, *bk = layer->bias_k + g * hd;
                float dot = 0.0f;
                for (int64_t d = 0; d < hd; d++)
                    dot += qr[d] * bk[d];
                row[col_bk] = dot;
            }
            if (col_zero >= 0)
                row[col_zero] = 0.0f;
            if (f->alibi) /* scores + ALiBi, then + the masks (the golden files' order) */
                mha_alibi_row(f->isa, row, kp + k0, kn, qp[r], slope);
            const void *amr = NULL, *kpr = NULL;
            if (am)
                amr = mask_at(am, am->ndim == 3 ? (b * H + h) * L + i : i, S0, k0);
            if (kpm)
                kpr = mask_at(kpm, b, S0, k0);
            if (amr || kpr)
                apply_masks(row, kn, amr, am ? am->type : MHA_MASK_FLOAT, kpr,
                            kpm ? kpm->type : MHA_MASK_FLOAT);
            if (rules)
                mha_rules_row(row, kp + k0, kn, qp[r], f->causal, f->window, f->keys_sorted);
        }
        if (trace_scores)
            expand_rows(trace_scores + bhl * S, sc, m, S, S0, k0, kn, NULL, -INFINITY, false);
        sink_block(f->sink_scores, slot, b, h, i0, m, sc, S, S0, k0, kn, NULL);
        /* The softmax without its last pass: exponentials in the block, 1/sum per row in inv.
         * The head outputs are scaled by inv instead of the [rows, S] weights (one pass over the
         * block fewer); the weights, where wanted, are written as exp · inv straight from the
         * block. Outputs are thus computed the same way whether weights are asked for or not. */
        mha_softmax_exp_rows_isa(f->isa, sc, m, ncols, S, inv);
        sink_block(f->sink_w, slot, b, h, i0, m, sc, S, S0, k0, kn, inv);
        sink_block(f->sink_tw, slot, b, h, i0, m, sc, S, S0, k0, kn, inv);
        /* Per-head weights: on the AVX-512 path the weights·v kernel writes the keys' columns
         * between its FMAs, so the 4·H·L·S bytes drain to memory while it computes. */
        float *wh = f->per_head ? f->weights + bhl * S : NULL;
        if (wh && !f->avx512)
            expand_rows(wh, sc, m, S, S0, k0, kn, inv, 0.0f, false);
        if (trace_weights)
            expand_rows(trace_weights + bhl * S, sc, m, S, S0, k0, kn, inv, 0.0f, false);
        if (avg) { /* keys [k0,k0+kn) and the appended ones; the skipped keys stay 0 */
            mha_scaled_add_rows_isa(f->isa, avg + k0, S, sc, S, m, kn, inv, h > 0);
            if (S > S0)
                mha_scaled_add_rows_isa(f->isa, avg + S0, S, sc + kn, S, m, S - S0, inv, h > 0);
            for (int64_t r = 0; r < m && h == 0; r++) {
                memset(avg + r * S, 0, (size_t)k0 * sizeof(float));
                memset(avg + r * S + k0 + kn, 0, (size_t)(S0 - k0 - kn) * sizeof(float));
            }
        }
        float *ch = cb + h * hd;
        if (kn == 0) { /* no given key in reach: only the appended ones contribute */
            for (int64_t r = 0; r < m; r++)
                memset(ch + r * f->c_rs, 0, (size_t)hd * sizeof(float));
            if (wh && f->avx512)
                expand_rows(wh, sc, m, S, S0, k0, kn, inv, 0.0f, true);
        } else if (f->avx512) {
            mha_pv_avx512(ch, f->c_rs, sc, S, vg, f->v_rs, m, kn, hd, wh ? wh + k0 : NULL, S, inv);
            if (wh && kn < S)
                expand_rows(wh, sc, m, S, S0, k0, kn, inv, 0.0f, true);
        } else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)hd, (int)kn, 1.0f,
                        sc, (int)S, vg, (int)f->v_rs, 0.0f, ch, (int)f->c_rs);
        if (col_bk >= 0) { /* + the bias_v value, then the softmax's 1/sum */
            for (int64_t r = 0; r < m; r++) {
                float *out = ch + r * f->c_rs;
                const float p = sc[r * S + col_bk], *bv = layer->bias_v + g * hd;
                for (int64_t d = 0; d < hd; d++)
                    out[d] = (out[d] + p * bv[d]) * inv[r];
            }
        } else
            mha_div_mul_rows_isa(f->isa, ch, f->c_rs, m, hd, 0.0f, inv);
    }
    if (f->per_head || trace_weights)
        mha_copy_stream_fence();
    if (avg) /* torch: weights.sum(dim=1) / num_heads */
        mha_div_mul_rows_isa(f->isa, avg, S, m, S, (float)H, NULL);
    for (int k = 0; k < 3; k++)
        if (sinks[k])
            mha_sink_end(sinks[k], slot, b, i0, m);
}

/* Packs one (batch, kv head)'s keys for the AVX-512 scores kernel. */
static void pack_task(void *arg, int64_t task, int slot)
{
    (void)slot;
    const fwd *f = arg;
    const int64_t b = task / f->Hkv, g = task % f->Hkv;
    mha_pack_keys(f->kpack + task * f->kp_floats, f->k + b * f->k_bs + g * f->hd, f->k_rs, f->S0,
                  f->hd);
}

/* ---------------------------------------------------------------------------------------------- */
/* RoPE: tables of cos | sin per distinct row of positions, then q and k rotated in place */

#define ROPE_ROWS 64 /* rows per task */

static void rope_table_task(void *arg, int64_t task, int slot)
{
    (void)slot;
    const fwd *f = arg;
    const int64_t half = f->hd / 2, nq = f->pl.q_rows;
    for (int64_t t = task * ROPE_ROWS; t < (task + 1) * ROPE_ROWS && t < nq + f->pl.k_rows; t++) {
        /* table row t: a query row (positions [N,L] given: row b·L+i; else row i of batch 0), or
         * a key row t - nq likewise */
        const float p = t < nq ? f->qpos[t] : f->kpos[t - nq];
        float *row = t < nq ? f->rope_q + t * f->hd : f->rope_k + (t - nq) * f->hd;
        mha_rope_table_row(row, f->inv_freq, half, p);
    }
}

static void rope_apply_task(void *arg, int64_t task, int slot)
{
    (void)slot;
    const fwd *f = arg;
    const int64_t half = f->hd / 2, NL = f->N * f->L, NS = f->N * f->S0;
    for (int64_t t = task * ROPE_ROWS; t < (task + 1) * ROPE_ROWS && t < NL + NS; t++) {
        if (t < NL) { /* query row (b, i): every query head */
            const int64_t b = t / f->L, i = t % f->L;
            const float *cs = f->rope_q + (f->pl.q_rows == NL ? t : i) * f->hd;
            float *x = f->q + b * f->q_bs + i * f->q_rs;
            for (int64_t h = 0; h < f->H; h++)
                mha_rope_rotate(f->isa, x + h * f->hd, cs, half);
        } else { /* key row (b, j): every kv head */
            const int64_t b = (t - NL) / f->S0, j = (t - NL) % f->S0;
            const float *cs;
            if (f->pl.k_is_q)
                cs = f->rope_q + (f->pl.q_rows == NL ? b * f->L + j : j) * f->hd;
            else
                cs = f->rope_k + (f->pl.k_rows == NS ? t - NL : j) * f->hd;
            float *x = f->k + b * f->k_bs + j * f->k_rs;
            for (int64_t g = 0; g < f->Hkv; g++)
                mha_rope_rotate(f->isa, x + g * f->hd, cs, half);
        }
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* Trace copies (small shapes only: the server caps trace sizes) */

/* Copies rows [0,len) of a batch of a strided buffer (columns [col, col+w)) into dst rows. */
static void copy_rows(float *dst, const float *src, int64_t bs, int64_t rs, int64_t b, int64_t len,
                      int64_t col, int64_t w)
{
    for (int64_t i = 0; i < len; i++)
        memcpy(dst + i * w, src + b * bs + i * rs + col, (size_t)w * sizeof(float));
}

/* q_proj, k_proj, v_proj: right after the in-projection (before RoPE). */
static void trace_projections(const fwd *f)
{
    float *const *st = f->trace->stage;
    const int64_t N = f->N, L = f->L, S0 = f->S0, Dq = f->Dq, Dkv = f->Dkv;
    for (int64_t b = 0; b < N; b++) {
        if (st[MHA_TRACE_Q_PROJ])
            copy_rows(st[MHA_TRACE_Q_PROJ] + b * L * Dq, f->q, f->q_bs, f->q_rs, b, L, 0, Dq);
        if (st[MHA_TRACE_K_PROJ])
            copy_rows(st[MHA_TRACE_K_PROJ] + b * S0 * Dkv, f->k, f->k_bs, f->k_rs, b, S0, 0, Dkv);
        if (st[MHA_TRACE_V_PROJ])
            copy_rows(st[MHA_TRACE_V_PROJ] + b * S0 * Dkv, f->v, f->v_bs, f->v_rs, b, S0, 0, Dkv);
    }
}

/* q_heads [N,H,L,hd], k_heads and v_heads [N,Hkv,S,hd]: after RoPE, with the appended keys. */
static void trace_heads(const fwd *f)
{
    float *const *st = f->trace->stage;
    const mha_layer *layer = f->layer;
    const int64_t N = f->N, L = f->L, S0 = f->S0, S = f->S, H = f->H, Hkv = f->Hkv, hd = f->hd;
    for (int64_t b = 0; b < N; b++) {
        for (int64_t h = 0; h < H && st[MHA_TRACE_Q_HEADS]; h++)
            copy_rows(st[MHA_TRACE_Q_HEADS] + (b * H + h) * L * hd, f->q, f->q_bs, f->q_rs, b, L,
                      h * hd, hd);
        for (int64_t g = 0; g < Hkv; g++) {
            for (int kv = 0; kv < 2; kv++) {
                float *dst = st[kv ? MHA_TRACE_V_HEADS : MHA_TRACE_K_HEADS];
                if (!dst)
                    continue;
                dst += (b * Hkv + g) * S * hd;
                if (kv)
                    copy_rows(dst, f->v, f->v_bs, f->v_rs, b, S0, g * hd, hd);
                else
                    copy_rows(dst, f->k, f->k_bs, f->k_rs, b, S0, g * hd, hd);
                int64_t s = S0;
                if (layer->cfg.add_bias_kv)
                    memcpy(dst + s++ * hd, (kv ? layer->bias_v : layer->bias_k) + g * hd,
                           (size_t)hd * sizeof(float));
                if (layer->cfg.add_zero_attn)
                    memset(dst + s * hd, 0, (size_t)hd * sizeof(float));
            }
        }
    }
}

static void trace_outputs(const fwd *f, const float *output, int64_t o_bs, int64_t o_rs)
{
    float *const *st = f->trace->stage;
    const int64_t N = f->N, L = f->L, E = f->E, H = f->H, hd = f->hd, Dq = f->Dq;
    for (int64_t b = 0; b < N; b++) {
        for (int64_t h = 0; h < H && st[MHA_TRACE_HEAD_OUTPUTS]; h++)
            copy_rows(st[MHA_TRACE_HEAD_OUTPUTS] + (b * H + h) * L * hd, f->cat, f->c_bs, f->c_rs,
                      b, L, h * hd, hd);
        if (st[MHA_TRACE_CONCAT])
            copy_rows(st[MHA_TRACE_CONCAT] + b * L * Dq, f->cat, f->c_bs, f->c_rs, b, L, 0, Dq);
        if (st[MHA_TRACE_OUTPUT])
            copy_rows(st[MHA_TRACE_OUTPUT] + b * L * E, output, o_bs, o_rs, b, L, 0, E);
    }
}

/* ---------------------------------------------------------------------------------------------- */

/* Batch and row strides of a buffer of row width w holding len rows per batch in input order. */
static void strides(const fwd *f, int64_t len, int64_t w, int64_t *bs, int64_t *rs)
{
    if (f->layer->cfg.batch_first || f->N == 1) {
        *bs = len * w;
        *rs = w;
    } else {
        *bs = w;
        *rs = f->N * w;
    }
}

static float *carve(float **cursor, int64_t n)
{
    float *p = *cursor;
    *cursor += (n + 15) / 16 * 16; /* keep every buffer 64-byte aligned */
    return p;
}

mha_status mha_forward(const mha_layer *layer, const mha_inputs *in, const mha_plan *plan,
                       float *output, float *attn_weights, const mha_trace *trace, mha_pool *pool,
                       mha_error *err)
{
    return mha_forward_select(layer, in, plan, output, attn_weights, NULL, trace, pool, err);
}

/* The sinks of a selection (the weights, the trace's scores and weights), set up in sinks[0..3)
 * and hooked into f; MHA_ERR_NOMEM when one cannot have its memory. */
static mha_status setup_sinks(fwd *f, mha_sink sinks[3], const mha_inputs *in, const mha_plan *plan,
                              float *attn_weights, int32_t *topk_indices, const mha_trace *trace,
                              int threads, mha_error *err)
{
    mha_status st = MHA_OK;
    if (in->need_weights) {
        st = mha_sink_init(&sinks[0], plan, in->select, in->average_attn_weights, 0.0f,
                           attn_weights, topk_indices, threads, f->rb, err);
        f->sink_w = &sinks[0];
    }
    if (st == MHA_OK && trace && trace->stage[MHA_TRACE_SCORES]) {
        st = mha_sink_init(&sinks[1], plan, in->select, false, -INFINITY,
                           trace->stage[MHA_TRACE_SCORES], trace->indices[MHA_TRACE_SCORES],
                           threads, f->rb, err);
        f->sink_scores = &sinks[1];
    }
    if (st == MHA_OK && trace && trace->stage[MHA_TRACE_ATTN_WEIGHTS]) {
        st = mha_sink_init(&sinks[2], plan, in->select, false, 0.0f,
                           trace->stage[MHA_TRACE_ATTN_WEIGHTS],
                           trace->indices[MHA_TRACE_ATTN_WEIGHTS], threads, f->rb, err);
        f->sink_tw = &sinks[2];
    }
    return st;
}

mha_status mha_forward_select(const mha_layer *layer, const mha_inputs *in, const mha_plan *plan,
                              float *output, float *attn_weights, int32_t *topk_indices,
                              const mha_trace *trace, mha_pool *pool, mha_error *err)
{
    if (!layer || !in || !plan || !output)
        return mha_fail(err, MHA_ERR_ARG, "forward", "forward: NULL layer, inputs, plan or output");
    if (in->need_weights && !attn_weights)
        return mha_fail(err, MHA_ERR_ARG, "attn_weights",
                        "need_weights is set but attn_weights is NULL");
    if (plan->selected != (in->select != NULL))
        return mha_fail(err, MHA_ERR_ARG, "select", "the plan and the inputs differ on select");
    if (plan->selected && plan->top_k && in->need_weights && !topk_indices)
        return mha_fail(err, MHA_ERR_ARG, "attn_weights",
                        "the selection has top_k but topk_indices is NULL");
    if (plan->selected && plan->top_k && trace &&
        ((trace->stage[MHA_TRACE_SCORES] && !trace->indices[MHA_TRACE_SCORES]) ||
         (trace->stage[MHA_TRACE_ATTN_WEIGHTS] && !trace->indices[MHA_TRACE_ATTN_WEIGHTS])))
        return mha_fail(err, MHA_ERR_ARG, "trace",
                        "the selection has top_k but a traced stage has no indices buffer");
    const mha_config *cfg = &layer->cfg;
    if (plan->flops < 4e6)
        pool = NULL; /* a pass this small is done before the pool's threads would wake up */
    const int threads = mha_pool_threads(pool);
    fwd f = {
        .layer = layer,
        .in = in,
        .trace = trace,
        .N = plan->N,
        .L = plan->L,
        .S0 = plan->S0,
        .S = plan->S,
        .E = plan->E,
        .H = plan->H,
        .Hkv = plan->Hkv,
        .grp = plan->H / plan->Hkv,
        .hd = plan->hd,
        .Dq = plan->H * plan->hd,
        .Dkv = plan->Hkv * plan->hd,
        .rb = mha_row_block(plan),
        .weights = in->need_weights && !plan->selected ? attn_weights : NULL,
        .per_head = in->need_weights && !plan->selected && !in->average_attn_weights,
        .qscale = (float)sqrt((double)plan->hd),
        .isa = plan->isa,
        .causal = in->is_causal,
        .alibi = cfg->alibi,
        .window = cfg->window,
    };
    f.nblk = (f.L + f.rb - 1) / f.rb;
    f.slot_floats = mha_slot_floats(plan, &layer->cfg);
    f.inv_offset = (f.rb * f.S + 15) / 16 * 16;
    f.kp_offset = f.inv_offset + (f.rb + 15) / 16 * 16;
    f.kp_floats = mha_kpack_head_floats(plan);
    f.avx512 = mha_attn_kernels(plan);
    f.kpack_in_task = mha_kpack_in_task(plan);
    mha_pos_layout_of(plan, in, &f.pl);
    const int64_t N = f.N, L = f.L, S0 = f.S0, E = f.E, Dq = f.Dq, Dkv = f.Dkv;

    /* One allocation: the plan's workspace (one thread's slot included) plus a slot for each
     * further thread, as many as fit in the layer's workspace limit: the plan cannot know the
     * pool, so a pass planned close to the limit runs on fewer threads rather than failing. */
    const int64_t slot_bytes = f.slot_floats * (int64_t)sizeof(float);
    const int64_t limit = layer->limits.max_workspace_bytes;
    if ((int64_t)plan->workspace_bytes > limit)
        return mha_fail(err, MHA_ERR_LIMIT, "query",
                        "this pass needs %lld bytes of scratch, over the layer's limit of %lld",
                        (long long)plan->workspace_bytes, (long long)limit);
    int64_t spare = (limit - (int64_t)plan->workspace_bytes) / slot_bytes;
    const int work_threads = spare < threads - 1 ? (int)spare + 1 : threads;
    const int64_t bytes = (int64_t)plan->workspace_bytes + (work_threads - 1) * slot_bytes;
    mha_scratch scratch;
    float *work = mha_pool_scratch_get(pool, &scratch, (size_t)bytes);
    if (!work)
        return mha_fail(err, MHA_ERR_NOMEM, "query",
                        "out of memory allocating %lld bytes of scratch", (long long)bytes);
    float *cursor = work;

    const mha_tensor *qt = &in->query;
    const mha_tensor *kt = in->key.data ? &in->key : qt;
    const mha_tensor *vt = in->value.data ? &in->value : kt;
    const bool packed = layer->w_in != NULL;
    const bool self = packed && kt->data == qt->data && vt->data == qt->data && S0 == L;
    const bool kv_same = packed && vt->data == kt->data;
    const float *b_in = layer->b_in;
    /* The projections' own GEMM (when OpenBLAS's kernels are weaker than the CPU) packs weights
     * in the same per-thread slots the attention uses later. */
    const bool own_gemm = mha_own_gemm(plan);
    gemm_set proj = {.n = 0, .cancel = in->cancel};
    if (self) { /* one GEMM: [N·L,E]·[Dq+2Dkv,E]ᵀ -> q | k | v side by side */
        const int64_t W = Dq + 2 * Dkv;
        float *qkv = carve(&cursor, N * L * W);
        f.q = qkv;
        f.k = qkv + Dq;
        f.v = qkv + Dq + Dkv;
        strides(&f, L, W, &f.q_bs, &f.q_rs);
        f.k_bs = f.v_bs = f.q_bs;
        f.k_rs = f.v_rs = f.q_rs;
        gemm_add(&proj, qt->data, E, layer->w_in, b_in, qkv, W, N * L, W, E, threads);
    } else {
        f.q = carve(&cursor, N * L * Dq);
        strides(&f, L, Dq, &f.q_bs, &f.q_rs);
        gemm_add(&proj, qt->data, E, layer->w_q, b_in, f.q, Dq, N * L, Dq, E, threads);
        if (kv_same) { /* value = key: k and v in one GEMM against in_proj_weight's k|v rows */
            float *kv = carve(&cursor, N * S0 * 2 * Dkv);
            f.k = kv;
            f.v = kv + Dkv;
            strides(&f, S0, 2 * Dkv, &f.k_bs, &f.k_rs);
            f.v_bs = f.k_bs;
            f.v_rs = f.k_rs;
            gemm_add(&proj, kt->data, E, layer->w_k, b_in ? b_in + Dq : NULL, kv, 2 * Dkv, N * S0,
                     2 * Dkv, E, threads);
        } else {
            const int64_t Kd = cfg->kdim, Vd = cfg->vdim;
            f.k = carve(&cursor, N * S0 * Dkv);
            f.v = carve(&cursor, N * S0 * Dkv);
            strides(&f, S0, Dkv, &f.k_bs, &f.k_rs);
            strides(&f, S0, Dkv, &f.v_bs, &f.v_rs);
            gemm_add(&proj, kt->data, Kd, layer->w_k, b_in ? b_in + Dq : NULL, f.k, Dkv, N * S0,
                     Dkv, Kd, threads);
            gemm_add(&proj, vt->data, Vd, layer->w_v, b_in ? b_in + Dq + Dkv : NULL, f.v, Dkv,
                     N * S0, Dkv, Vd, threads);
        }
    }
    f.cat = carve(&cursor, N * L * Dq);
    strides(&f, L, Dq, &f.c_bs, &f.c_rs);
    if (f.avx512 && !f.kpack_in_task)
        f.kpack = carve(&cursor, N * f.Hkv * f.kp_floats);
    f.qpos = carve(&cursor, N * L);
    f.kpos = carve(&cursor, N * S0);
    if (cfg->rope) {
        f.rope_q = carve(&cursor, f.pl.q_rows * f.hd);
        f.rope_k = f.pl.k_is_q ? f.rope_q : carve(&cursor, f.pl.k_rows * f.hd);
        f.inv_freq = carve(&cursor, f.hd);
    }
    f.scratch = cursor;
    if (own_gemm) {
        proj.pack = f.scratch;
        proj.pack_floats = f.slot_floats;
    }
    f.keys_sorted = mha_positions_fill(f.qpos, f.kpos, plan, in);

    /* A selection's sinks; the trace's full SCORES and ATTN_WEIGHTS stages give way to them. */
    mha_sink sinks[3];
    memset(sinks, 0, sizeof sinks);
    mha_trace tr_full;
    if (plan->selected) {
        mha_status st = setup_sinks(&f, sinks, in, plan, attn_weights, topk_indices, trace,
                                    work_threads, err);
        if (st != MHA_OK) {
            for (int k = 0; k < 3; k++)
                mha_sink_free(&sinks[k]);
            mha_pool_scratch_put(pool, &scratch);
            return st;
        }
        if (trace) {
            tr_full = *trace;
            tr_full.stage[MHA_TRACE_SCORES] = tr_full.stage[MHA_TRACE_ATTN_WEIGHTS] = NULL;
            f.trace = trace = &tr_full;
        }
    }

    /* The in-projection is a pass's first parallel phase and the out-projection its last (a
     * benchmark times what lies between as the attention core). */
    mha_pool_run_limit(pool, proj.ntasks, gemm_task, &proj, work_threads);
    if (trace)
        trace_projections(&f);
    if (cfg->rope) { /* the cos | sin tables, then q and k rotated in place */
        mha_rope_inv_freq(f.inv_freq, f.hd, cfg->rope_theta);
        const int64_t rows = f.pl.q_rows + f.pl.k_rows;
        mha_pool_run_limit(pool, (rows + ROPE_ROWS - 1) / ROPE_ROWS, rope_table_task, &f,
                           work_threads);
        mha_pool_run_limit(pool, (N * (L + S0) + ROPE_ROWS - 1) / ROPE_ROWS, rope_apply_task, &f,
                           work_threads);
    }
    if (trace)
        trace_heads(&f);
    if (f.avx512 && !f.kpack_in_task)
        mha_pool_run(pool, N * f.Hkv, pack_task, &f);
    mha_pool_run_limit(pool, N * f.nblk, attention_task, &f, work_threads);
    for (int k = 0; k < 3; k++)
        mha_sink_free(&sinks[k]);
    gemm_set out = {.n = 0, .pack = proj.pack, .pack_floats = proj.pack_floats, .cancel = in->cancel};
    int64_t o_bs, o_rs;
    strides(&f, L, E, &o_bs, &o_rs);
    gemm_add(&out, f.cat, Dq, layer->w_out, layer->b_out, output, E, N * L, E, Dq, threads);
    mha_pool_run_limit(pool, out.ntasks, gemm_task, &out, work_threads);
    if (trace)
        trace_outputs(&f, output, o_bs, o_rs);
    mha_pool_scratch_put(pool, &scratch);
    if (cancelled(in->cancel))
        return mha_fail(err, MHA_ERR_CANCELLED, "", "the pass was cancelled by its caller");
    return MHA_OK;
}
