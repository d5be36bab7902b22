/*
 * mha_attention.c - the attention core: keys in blocks, an online softmax, and the weights only
 * where they are asked for.
 *
 * A row block is bm = 64 query rows of one (batch, head). Its q rows, divided by √hd as torch
 * does, are copied to a tile qt [bm][hd]; then each key block in turn (BN = 128 or 256 keys,
 * mha_key_block):
 *
 *     sc [bm][BN] = qt · Kᵀ block           scores (+ ALiBi, + masks, causal and window rules)
 *     sc = exp(sc - m), m and l updated     the online softmax (mha_softmax_block.c)
 *     O [bm][hd] = O·alpha + sc · V block   the head output, rescaled when the maximum moves
 *
 * and finally the head output O / l goes to the concat buffer. Nothing grows with L·S: the working
 * set is the tiles (bm·BN floats of scores, bm·hd each of q and O) and one K and V block, in L2 on
 * every CPU this runs on; the whole pass needs O((L + S)·E) memory. Keys that the causal and
 * window rules forbid to every row of a task are never computed: whole blocks are skipped, and the
 * blocks at the edges of the allowed range are cut to its columns (a window of 128 on L = 2048
 * computes ~192 keys per task); a block inside every row's allowed range skips the rules entirely.
 *
 * On AVX2 a plain pass (its output only: no weights, trace or selection; no causal or window rule)
 * of 128 rows or more takes bm = 128 (mha_attn_bm): each key block then serves twice the rows
 * while it is in L1 and L2, and the per-block work (the kernels' calls, the softmax's row
 * bookkeeping) is shared by twice the rows; on the Zen 3, XL's pass (L = S = 2048, E = 1024) took
 * about 1% less time on a quiet machine, 5-10% on one thread beside a busy neighbour core. A row's
 * dot products and sums run in the same order in either tile, so the output has the same bits as
 * with weights (64-row blocks); the rules are left out because they cut a block's columns at the
 * row block's range, which moves where a row's sums start in the vector lanes.
 *
 * A task is one row block, or from long S (one head's keys and values 2 MiB: S = 4096 at hd 64,
 * mha_attn_group) four of one head: those that give only their output then run together, key
 * block by key block, each block used by the four in turn while it is in L2 (task_grouped). One
 * row block at a time streams the head's 2·S·hd floats once per 64 rows from L3 or memory, which
 * on a Zen 3 with its L3 shared cost 15-20% at S = 16384. From 8 MiB (S = 16384 at hd 64) a task
 * takes eight where their q and output tiles fit in 256 KiB (hd <= 64): on the Zen 3, 3-4% less
 * time at L = S = 16384 on two threads, where both threads stream their heads through the L3. A
 * row's blocks come in the same order through the same kernels either way: the same bits.
 *
 * Weights, when asked for (per head, averaged, or the trace's): each visited block's tile is made
 * in its own place in a per-thread slab [nblk][64][BN] (scores, then exps, read there by P·V: no
 * copy) with its row maxima, and after the last block the weights are slab · exp(m_block - m) / l,
 * a second look at the rows that were asked for. The output is the same computation, instruction
 * for instruction, whether weights are asked for or not: the output's bits never depend on
 * need_weights. Averaged weights take a task per row block that runs every head in order (torch's
 * sum over heads, then / H). A selection's per-head top-k or pooled map is fed from the tile
 * instead, as the block is made (a top-k its scores, between the softmax's maxima and its exps; a
 * pool its exps), with each block's factor at the end (mha_sink_stream_*, mha_select.h): no slab is
 * written or read for it.
 *
 * Keys and values are packed first, per (batch, kv head, key block): Kᵀ [hd][BN] for the scores
 * and V [BN][hd] rows, contiguous; a last, shorter block is left unwritten past its keys (only
 * full blocks run the fixed-size kernels). The in-projection packs them as it makes them
 * (mha_attn_pack_keys_from, after RoPE's rotation where the block it is handed holds whole heads)
 * unless appended keys or a trace come between; then a phase of its own does
 * (mha_attn_pack_task; both in mha_kv_pack.c). The keys
 * add_bias_kv and add_zero_attn append are packed after the given ones (keys S0, S0+1), so they are
 * part of the last blocks, where masks and rules leave them alone. Query heads of one kv head
 * (GQA) read the same packed keys: nothing is copied per query head.
 */
#include "mha_core.h"
#include "mha_softmax_block.h"

#include <math.h>
#include <string.h>

static int64_t round16(int64_t n)
{
    return (n + 15) / 16 * 16;
}

int64_t mha_attn_kv_floats(const mha_plan *plan)
{
    const int64_t BN = mha_key_block(plan->hd, plan->isa), nblk = (plan->S + BN - 1) / BN;
    return 2 * nblk * BN * plan->hd;
}

/* Floats of the tiles of a task's first row block (with the weights slab when kept), and of
 * each further row block's own in a grouped task (its q tile, output, row state and row maxima
 * after each key block). */
static int64_t first_tile_floats(int64_t bm, int64_t hd, int64_t BN, int64_t nblk, bool slab)
{
    int64_t n = 2 * round16(bm * hd) + round16(bm * BN) + 8 * bm;
    if (slab) /* the exp tiles of every block [nblk][bm][BN], and each block's row maxima */
        n += round16(bm * nblk * BN) + round16(bm * nblk);
    return n;
}

static int64_t more_tile_floats(int64_t bm, int64_t hd, int64_t nblk)
{
    return 2 * round16(bm * hd) + 8 * bm + round16(bm * nblk);
}

int64_t mha_attn_bm(const mha_plan *plan, bool output_only, bool rules)
{
    const bool wide = output_only && !rules && plan->isa == MHA_ISA_AVX2 && plan->L >= MHA_BM_WIDE;
    return wide ? MHA_BM_WIDE : MHA_BM;
}

int64_t mha_attn_group(const mha_plan *plan, int64_t bm)
{
    static int always = -1, always_wide = -1;
    const int64_t nrb = (plan->L + bm - 1) / bm, fsz = (int64_t)sizeof(float);
    const int64_t kv_bytes = 2 * plan->S * plan->hd * fsz;
    const bool group =
        kv_bytes >= MHA_GROUP_FROM || mha_test_switch("ATTND_TEST_GROUP_ROWS", &always);
    const bool wide = (kv_bytes >= MHA_GROUP_WIDE_FROM ||
                       mha_test_switch("ATTND_TEST_GROUP_WIDE", &always_wide)) &&
                      MHA_GROUP_WIDE * 2 * bm * plan->hd * fsz <= MHA_GROUP_TILES;
    const int64_t G = !group ? 1 : wide ? MHA_GROUP_WIDE : MHA_GROUP;
    return nrb < G ? nrb : G;
}

int64_t mha_attn_slot_floats(const mha_plan *plan, bool slab, int64_t bm)
{
    const int64_t hd = plan->hd, BN = mha_key_block(hd, plan->isa), nblk = (plan->S + BN - 1) / BN;
    return first_tile_floats(bm, hd, BN, nblk, slab) +
           (mha_attn_group(plan, bm) - 1) * more_tile_floats(bm, hd, nblk);
}

/* ---------------------------------------------------------------------------------------------- */
/* The rules on a block's given keys (the masks: mha_masks.c)                                    */

/* True when the causal and window rules may forbid some of the n keys at kp (sorted) to some query
 * in [qmin, qmax]: then each row applies them. */
static bool rules_needed(const mha_attn *a, const float *kp, int64_t n, float qmin, float qmax)
{
    if (!a->causal && !a->window)
        return false;
    if (!a->keys_sorted)
        return true;
    const float first = kp[0], last = kp[n - 1], W = mha_window_f(a->window);
    if (a->causal && last > qmin)
        return true;
    if (a->window && (qmax - first >= W || (!a->causal && last - qmin >= W)))
        return true;
    return false;
}

/* ---------------------------------------------------------------------------------------------- */
/* The task                                                                                       */

/* One thread's scratch, carved from its slot. */
typedef struct tile {
    float *qt;                            /* [BM][hd]                                 */
    float *sc;                            /* [BM][BN]                                 */
    float *o;                             /* [BM][hd]                                 */
    float *m, *l, *alpha, *inv, *f, *tmp; /* [BM] each; tmp [2·BM] */
    float *bmax;                          /* [BM] each row's maximum over a block     */
    float *slab;                          /* [nblk][BM][BN] exp tiles, or NULL        */
    float *mt;                            /* [nblk][BM] row maxima after each block   */
} tile;

/* A row block's row state (m, l, alpha, inv, f, tmp, bmax: 8·bm floats) from p; returns its end. */
static float *carve_row_state(tile *t, float *p, int64_t bm)
{
    t->m = p;
    t->l = p + bm;
    t->alpha = p + 2 * bm;
    t->inv = p + 3 * bm;
    t->f = p + 4 * bm;
    t->tmp = p + 5 * bm;
    t->bmax = p + 7 * bm;
    return p + 8 * bm;
}

/* A task's tile in its slot, into *t (filled in place, as rows_of fills its rows). */
static void carve_tile(const mha_attn *a, int slot, tile *t)
{
    float *p = a->scratch + slot * a->slot_floats;
    t->qt = p;
    p += round16(a->bm * a->hd);
    t->o = p;
    p += round16(a->bm * a->hd);
    t->sc = p;
    p += round16(a->bm * a->BN);
    p = carve_row_state(t, p, a->bm);
    t->slab = a->slab ? p : NULL;
    t->mt = a->slab ? p + round16(a->bm * a->nblk * a->BN) : NULL;
}

/* Block blk's tile in the slab [BM][BN]. */
static float *slab_block(const mha_attn *a, const tile *t, int64_t blk)
{
    return t->slab + blk * a->bm * a->BN;
}

/* Row block g of a grouped task: its own q tile, output, row state and row maxima after each
 * block (a streamed selection's) after the first block's tiles; the score tile shared (each
 * block's scores are used up before the next row block's are made); no slab (grouped tasks keep
 * no weights). */
static void carve_group_tile(const mha_attn *a, int slot, int64_t g, tile *t)
{
    carve_tile(a, slot, t);
    if (g == 0)
        return;
    float *p = a->scratch + slot * a->slot_floats +
               first_tile_floats(a->bm, a->hd, a->BN, a->nblk, a->slab) +
               (g - 1) * more_tile_floats(a->bm, a->hd, a->nblk);
    t->qt = p;
    p += round16(a->bm * a->hd);
    t->o = p;
    p += round16(a->bm * a->hd);
    t->mt = carve_row_state(t, p, a->bm);
    t->slab = NULL;
}

/* The key blocks a task visits: [lo, hi), then [app, nblk) (the blocks holding the appended keys,
 * which every row attends); the given keys outside [k0, k1) are forbidden to every row. */
typedef struct visit {
    int64_t lo, hi, app;
} visit;

static bool next_block(const mha_attn *a, const visit *v, int64_t *blk)
{
    int64_t n = *blk + 1;
    if (n < v->lo)
        n = v->lo;
    if (n >= v->hi && n < v->app)
        n = v->app;
    *blk = n;
    return n < a->nblk && (n < v->hi || n >= v->app);
}

/* dst[r][c] for c in the columns no visited block covers: value (rows rows, row stride S). */
static void fill_unvisited(const mha_attn *a, const visit *v, float *dst, int64_t rows, float value)
{
    const int64_t S = a->S, BN = a->BN;
    const int64_t ranges[2][2] = {{0, v->lo * BN}, {v->hi * BN, v->app * BN}};
    if (v->lo == 0 && v->app <= v->hi) /* every block visited */
        return;
    for (int64_t r = 0; r < rows; r++)
        for (int k = 0; k < 2; k++) {
            const int64_t c0 = ranges[k][0], c1 = ranges[k][1] < S ? ranges[k][1] : S;
            if (value == 0.0f && c1 > c0) /* memset: non-temporal stores for long runs */
                memset(dst + r * S + c0, 0, (size_t)(c1 - c0) * sizeof(float));
            else
                for (int64_t c = c0; c < c1; c++)
                    dst[r * S + c] = value;
        }
}

/* t->f[r] = exp(m at visited block nv - final m) / l for the task's rows: the factor that turns
 * that block's kept exps into weights (0 for a row that attended no key). */
static void block_factors(const mha_attn *a, const tile *t, int64_t nv, int64_t rows)
{
    for (int64_t r = 0; r < rows; r++) /* <= 0, or -inf */
        t->tmp[r] = t->l[r] == 0.0f ? -INFINITY : t->mt[nv * a->bm + r] - t->m[r];
    mha_exp_le0_array_isa(a->isa, t->f, t->tmp, rows);
    for (int64_t r = 0; r < rows; r++)
        t->f[r] *= t->inv[r];
}

/* Weights of the task's rows: dst[r][j] = exps[r][j] · exp(mt - m[r]) / l[r] over the visited
 * blocks, 0 elsewhere. mode 0: written (streamed), 1: set, 2: added (averaged). The exps are the
 * slab's, or with one = {blk, c0, c1} (the rows visited block blk alone) the tile's own at the
 * block's columns [c0, c1), whose one factor is exp(0) / l = 1 / l (0 for a row with no key): no
 * slab and no factors' exps for short inputs (S, M: every key in one block). */
static void weights_out(const mha_attn *a, const visit *v, tile *t, float *dst, int64_t rows,
                        int mode, const int64_t *one)
{
    const int64_t S = a->S, BN = a->BN;
    if (mode != 2)
        fill_unvisited(a, v, dst, rows, 0.0f);
    int64_t nv = 0;
    for (int64_t blk = -1; next_block(a, v, &blk); nv++) {
        const int64_t j0 = blk * BN, bn = S - j0 < BN ? S - j0 : BN;
        const int64_t c0 = one ? one[1] : 0, c1 = one ? one[2] : bn;
        const float *src = one ? t->sc + c0 : slab_block(a, t, blk);
        for (int64_t r = 0; r < rows && mode != 2 && (c0 > 0 || bn > c1); r++) { /* cut off */
            memset(dst + r * S + j0, 0, (size_t)c0 * sizeof(float));
            memset(dst + r * S + j0 + c1, 0, (size_t)(bn - c1) * sizeof(float));
        }
        if (one)
            for (int64_t r = 0; r < rows; r++)
                t->f[r] = t->l[r] == 0.0f ? 0.0f : t->inv[r];
        else
            block_factors(a, t, nv, rows);
        if (mode == 0)
            mha_scale_rows_stream_isa(a->isa, dst + j0 + c0, S, src, BN, rows, c1 - c0, t->f);
        else
            mha_scaled_add_rows_isa(a->isa, dst + j0 + c0, S, src, BN, rows, c1 - c0, t->f,
                                    mode == 2);
    }
}

/* The same weights of head h's rows [i0, i0+rows) handed to a sink that takes whole rows (a per-
 * head top-k, mha_sink_takes_rows): each row's values over the chosen keys made in the sink's row
 * room, the slab's exps times their block's factor (block_factors' arithmetic, a row at a time), 0
 * for keys never computed. One row at a time stays in L1: the block's rows would not. */
static void weights_rows_to_sink(const mha_attn *a, const visit *v, const tile *t, mha_sink *s,
                                 int slot, int64_t b, int64_t h, int64_t i0, int64_t rows)
{
    const int64_t BN = a->BN, k0 = s->k0, k1 = s->k1;
    float *fac;
    float *w = mha_sink_row_room(s, slot, &fac); /* w [S'], fac [nvis] */
    for (int64_t r = 0; r < rows; r++) {
        if (!mha_sink_wants_rows(s, i0 + r, 1))
            continue;
        int64_t nv = 0;
        for (int64_t blk = -1; next_block(a, v, &blk); nv++) /* <= 0, or -inf */
            fac[nv] = t->l[r] == 0.0f ? -INFINITY : t->mt[nv * a->bm + r] - t->m[r];
        mha_exp_le0_array_isa(a->isa, fac, fac, nv);
        int64_t at = k0; /* w holds the keys before this one */
        nv = 0;
        for (int64_t blk = -1; next_block(a, v, &blk); nv++) {
            const int64_t j0 = blk * BN, j1 = j0 + BN < a->S ? j0 + BN : a->S;
            const int64_t ja = j0 > k0 ? j0 : k0, jb = j1 < k1 ? j1 : k1;
            if (ja >= jb)
                continue;
            if (at < ja)
                memset(w + (at - k0), 0, (size_t)(ja - at) * sizeof(float));
            const float f = fac[nv] * t->inv[r];
            const float *src = slab_block(a, t, blk) + r * BN + (ja - j0);
            mha_scaled_add_rows_isa(a->isa, w + (ja - k0), 0, src, 0, 1, jb - ja, &f, false);
            at = jb;
        }
        if (at < k1)
            memset(w + (at - k0), 0, (size_t)(k1 - at) * sizeof(float));
        mha_sink_row(s, slot, b, h, i0 + r, w);
    }
}

/* The same weights handed to a selection's sink (head h, rows [i0, i0+rows)): the visited blocks
 * fed from the slab with their factors, the keys between them as the sink's fill (0). */
static void weights_to_sink(const mha_attn *a, const visit *v, const tile *t, mha_sink *s, int slot,
                            int64_t b, int64_t h, int64_t i0, int64_t rows)
{
    if (mha_sink_takes_rows(s)) {
        weights_rows_to_sink(a, v, t, s, slot, b, h, i0, rows);
        return;
    }
    const int64_t S = a->S, BN = a->BN;
    mha_sink_head_begin(s, slot, b, h, i0, rows);
    int64_t nv = 0, at = 0;
    for (int64_t blk = -1; next_block(a, v, &blk); nv++) {
        const int64_t j0 = blk * BN, bn = S - j0 < BN ? S - j0 : BN;
        if (at < j0)
            mha_sink_fill(s, slot, b, h, i0, rows, at, j0 - at);
        block_factors(a, t, nv, rows);
        mha_sink_feed(s, slot, b, h, i0, rows, j0, bn, slab_block(a, t, blk), BN, t->f);
        at = j0 + bn;
    }
    if (at < S)
        mha_sink_fill(s, slot, b, h, i0, rows, at, S - at);
    mha_sink_head_end(s, slot, b, h, i0, rows);
}

/* The end of a streamed head (mha_sink_stream_end): each visited block's factor, handed to the
 * sink (the row maxima stay: a fallback feeds the slab with them). False when the sink could not
 * make its result exact. */
static bool stream_finish(const mha_attn *a, const tile *t, mha_sink *s, int slot, int64_t b,
                          int64_t h, int64_t i0, int64_t rows, int64_t nvis)
{
    float *fac = mha_sink_stream_factors(s, slot); /* [nblk][bm] */
    for (int64_t nv = 0; nv < nvis; nv++) {
        block_factors(a, t, nv, rows);
        memcpy(fac + nv * a->bm, t->f, (size_t)rows * sizeof(float));
    }
    return mha_sink_stream_end(s, slot, b, h, i0, rows, nvis, fac, t->mt, a->bm);
}

/* A row block's rows and what its key blocks need: its batch and rows, their positions, the keys
 * the causal and window rules leave them ([k0, k1) of the given keys) and the blocks that visits;
 * then one head's packed keys and values and ALiBi slope. */
typedef struct rows {
    int64_t b, i0, m;
    const float *qp; /* the rows' positions [m]         */
    const float *kp; /* the batch's key positions [S0]  */
    float qmin, qmax;
    int64_t k0, k1;
    visit v;
    int64_t h;
    const float *kv; /* (batch, kv head of h): Kᵀ blocks, then V */
    float slope;
} rows;

/* Row block rb of batch b into *r (no head yet). Filled in place (so is a tile, carve_tile):
 * returned by value, such a struct was built on the stack (an address of it goes to a call) and
 * copied out 16 bytes at a time from its 8-byte stores, a store-forwarding stall on every task
 * (each 2% of S's pass with weights, Zen 4). */
static void rows_of(const mha_attn *a, int64_t b, int64_t rb, rows *r)
{
    const int64_t BN = a->BN, S0 = a->S0;
    r->b = b;
    r->i0 = rb * a->bm;
    r->m = a->L - r->i0 < a->bm ? a->L - r->i0 : a->bm;
    r->qp = a->qpos + b * a->L + r->i0;
    r->kp = a->kpos + b * S0;
    mha_key_range(&r->k0, &r->k1, r->qp, r->m, r->kp, S0, a->keys_sorted, a->causal, a->window);
    r->v.lo = r->k1 > r->k0 ? r->k0 / BN : 0;
    r->v.hi = r->k1 > r->k0 ? (r->k1 + BN - 1) / BN : 0;
    r->v.app = a->S > S0 ? S0 / BN : a->nblk;
    if (r->v.app < r->v.hi)
        r->v.app = r->v.hi;
    r->qmin = r->qmax = 0.0f; /* the rows' positions, for the rules alone (rules_needed) */
    if (a->causal || a->window) {
        r->qmin = r->qmax = r->qp[0];
        for (int64_t i = 1; i < r->m; i++) {
            r->qmin = r->qp[i] < r->qmin ? r->qp[i] : r->qmin;
            r->qmax = r->qp[i] > r->qmax ? r->qp[i] : r->qmax;
        }
    }
    r->h = -1;
    r->kv = NULL;
    r->slope = 0.0f;
}

static void rows_head(const mha_attn *a, rows *r, int64_t h)
{
    r->h = h;
    r->kv = a->kv + (r->b * a->Hkv + h / a->grp) * a->kv_floats;
    r->slope = a->alibi ? mha_alibi_slope(h, a->H) : 0.0f;
}

/* Whether row block r visits key block blk (next_block's blocks). */
static bool visits(const mha_attn *a, const visit *v, int64_t blk)
{
    return blk < a->nblk && ((blk >= v->lo && blk < v->hi) || blk >= v->app);
}

/* The head's q rows, divided by √hd as torch does, into t->qt; the output and the row state
 * cleared. */
static void tile_start(const mha_attn *a, const rows *r, const tile *t, bool load_q)
{
    const int64_t m = r->m, hd = a->hd;
    /* torch: q_scaled = q / sqrt(head_dim), after RoPE */
    const float *q = a->q + r->b * a->q_bs + r->i0 * a->q_rs + r->h * hd;
    if (load_q && a->qinv != 0.0f) { /* the same bits as the division (mha_attn.qinv) */
        for (int64_t i = 0; i < m; i++)
            t->f[i] = a->qinv;
        mha_div_mul_rows_to_isa(a->isa, t->qt, hd, q, a->q_rs, m, hd, 0.0f, t->f);
    } else if (load_q) {
        mha_div_mul_rows_to_isa(a->isa, t->qt, hd, q, a->q_rs, m, hd, a->qscale, NULL);
    }
    memset(t->o, 0, (size_t)(m * hd) * sizeof(float));
    for (int64_t i = 0; i < m; i++) {
        t->m[i] = -INFINITY;
        t->l[i] = 0.0f;
    }
}

/* The kernel of a tile of m rows and n keys from a's table (full or edge tile), or NULL: the hand
 * kernel on the exact size (no JIT code for it, or a block cut by the rules). */
static const mha_mm *tile_kernel(const mha_attn *a, const mha_mm *const table[2][2], int64_t m,
                                 int64_t n)
{
    const int i = m == a->bm ? 0 : m == a->m_edge ? 1 : -1;
    const int j = n == a->BN ? 0 : n == a->n_edge ? 1 : -1;
    return i < 0 || j < 0 ? NULL : table[i][j];
}

/* Block blk's scores for row block r in t->sc, at the columns [*c0, *c1) of the block: the given
 * keys outside the rules' range [k0, k1) are cut off at the block's edges (the diagonal block of a
 * causal pass, both ends of a window's); a block holding appended keys keeps its end. ALiBi, then
 * the masks (the golden files' order), then the rules. */
static void block_scores(const mha_attn *a, const rows *r, const tile *t, int64_t blk, int64_t *c0p,
                         int64_t *c1p)
{
    const mha_inputs *in = a->in;
    const int64_t S = a->S, S0 = a->S0, BN = a->BN, hd = a->hd, m = r->m;
    const int64_t j0 = blk * BN, bn = S - j0 < BN ? S - j0 : BN;
    int64_t c0 = 0, c1 = bn;
    if (blk < r->v.hi && j0 < r->k0)
        c0 = r->k0 - j0;
    if (blk < r->v.hi && j0 + bn <= S0 && j0 + bn > r->k1)
        c1 = r->k1 - j0;
    const int64_t n = c1 - c0;
    const int64_t gn = (S0 - j0 < c1 ? S0 - j0 : c1) - c0; /* given keys; then appended */
    const float *kt = r->kv + blk * hd * BN + c0;
    float *sc = t->sc + c0; /* the tile's columns keep their block positions */
    const mha_mm *mm = tile_kernel(a, a->tile_scores, m, n);
    if (mm)
        mha_mm_run(mm, sc, t->qt, kt);
    else
        mha_gemm_isa(a->isa, sc, BN, t->qt, hd, kt, BN, m, n, hd, false);
    const mha_mask *am = in->attn_mask.data ? &in->attn_mask : NULL;
    const mha_mask *kpm = in->key_padding_mask.data ? &in->key_padding_mask : NULL;
    if (gn > 0) {
        const float *kpb = r->kp + j0 + c0;
        const bool rules = rules_needed(a, kpb, gn, r->qmin, r->qmax);
        for (int64_t i = 0; i < m && (a->alibi || am || kpm || rules); i++) {
            float *row = sc + i * BN;
            const int64_t qi = r->i0 + i;
            if (a->alibi)
                mha_alibi_row(a->isa, row, kpb, gn, r->qp[i], r->slope);
            const void *amr =
                am ? mha_mask_at(am, mha_attn_mask_row(a, r->b, r->h, qi), S0, j0 + c0) : NULL;
            const void *kpr = kpm ? mha_mask_at(kpm, r->b, S0, j0 + c0) : NULL;
            if (amr || kpr)
                mha_apply_masks(row, gn, amr, am ? am->type : MHA_MASK_FLOAT, kpr,
                                kpm ? kpm->type : MHA_MASK_FLOAT);
            if (rules)
                mha_rules_row(row, kpb, gn, r->qp[i], a->causal, a->window, a->keys_sorted);
        }
    }
    *c0p = c0;
    *c1p = c1;
}

/* After block blk's softmax (its exps in t->sc, alpha set): the output rescaled in the rows whose
 * maximum moved (alpha is exactly 1 for a row whose maximum stayed, and x · 1 is x: past the first
 * few blocks most rows are left as they are), then O += exps · V block. nv: the blocks visited
 * before this one. */
static void block_values(const mha_attn *a, const rows *r, const tile *t, int64_t blk, int64_t c0,
                         int64_t c1, int64_t nv)
{
    const int64_t hd = a->hd, BN = a->BN, m = r->m;
    for (int64_t i = 0; i < m && nv > 0; i++)
        if (t->alpha[i] != 1.0f)
            mha_div_mul_rows_isa(a->isa, t->o + i * hd, hd, 1, hd, 0.0f, t->alpha + i);
    const float *vb = r->kv + a->nblk * hd * BN + (blk * BN + c0) * hd;
    const mha_mm *mm = tile_kernel(a, a->tile_pv, m, c1 - c0);
    if (mm)
        mha_mm_run(mm, t->o, t->sc + c0, vb);
    else
        mha_gemm_isa(a->isa, t->o, hd, t->sc + c0, BN, vb, hd, m, hd, c1 - c0, true);
}

/* Block blk's softmax over its columns [c0, c1) of t->sc (nv: the blocks visited before it). With
 * a streamed selection sw (stream slot sslot), its scores go to a top-k before they become exps,
 * between the softmax's maxima (each row's own too) and its exps; its exps to a pool as they are;
 * and the row maxima the block's exps are relative to into t->mt. */
static void block_softmax(const mha_attn *a, const rows *r, const tile *t, mha_sink *sw, int sslot,
                          int64_t blk, int64_t c0, int64_t c1, int64_t nv)
{
    const int64_t BN = a->BN, m = r->m, n = c1 - c0, j0 = blk * BN;
    float *sc = t->sc + c0;
    if (!sw) {
        mha_softmax_block_isa(a->isa, sc, BN, m, n, t->m, t->l, t->alpha, t->tmp);
        return;
    }
    mha_softmax_block_max_isa(a->isa, sc, BN, m, n, t->m, t->tmp, t->bmax);
    mha_sink_stream_scores(sw, sslot, r->b, r->h, r->i0, m, nv, j0, c0, c1, t->sc, BN, t->m,
                           t->bmax);
    mha_softmax_block_exp_isa(a->isa, sc, BN, m, n, t->m, t->l, t->alpha, t->tmp);
    mha_sink_stream_block(sw, sslot, r->b, r->h, r->i0, m, nv, j0, c0, c1, t->sc, BN);
    memcpy(t->mt + nv * a->bm, t->m, (size_t)m * sizeof(float));
}

/* Row (b·H + h)·L + i into *at if it is lower (an atomic minimum; -1: none yet). */
static void note_no_score(int64_t *at, int64_t row)
{
    int64_t cur = __atomic_load_n(at, __ATOMIC_RELAXED);
    while ((cur < 0 || row < cur) &&
           !__atomic_compare_exchange_n(at, &cur, row, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

/* The head output O / l (0 for a row that attended no key; NaN stays NaN), into the concat. A row
 * that attended no key though the masks allow some is noted (mha_attn.no_score_row). */
static void tile_output(const mha_attn *a, const rows *r, const tile *t)
{
    int same = -1; /* mha_row_allows_a_key's answer for every row of the block, when it has one */
    for (int64_t i = 0; i < r->m; i++) {
        t->inv[i] = t->l[i] == 0.0f ? 0.0f : 1.0f / t->l[i];
        if (t->l[i] == 0.0f && a->no_score_row &&
            mha_row_allows_a_key(a, r->b, r->h, r->i0 + i, r->qp[i], r->kp, r->k0, r->k1, &same))
            note_no_score(a->no_score_row, (r->b * a->H + r->h) * a->L + r->i0 + i);
    }
    mha_div_mul_rows_to_isa(a->isa, a->cat + r->b * a->c_bs + r->i0 * a->c_rs + r->h * a->hd,
                            a->c_rs, t->o, a->hd, r->m, a->hd, 0.0f, t->inv);
}

/* Whether a sink wants head h's rows [i0, i0+m). */
static bool wants(const mha_sink *s, int64_t h, int64_t i0, int64_t m)
{
    return s && mha_sink_wants_head(s, h) && mha_sink_wants_rows(s, i0, m);
}

/* Whether row block rb of head h can run in a group: it gives its output and at most a selection
 * streamed from its tiles (a per-head top-k or pool): no weights, no trace, no slab. */
static bool groupable(const mha_attn *a, int64_t h, int64_t rb)
{
    if (a->weights || a->trace_scores || a->trace_weights || a->all_heads)
        return false;
    const int64_t i0 = rb * a->bm, m = a->L - i0 < a->bm ? a->L - i0 : a->bm;
    return !wants(a->sink_scores, h, i0, m) && !wants(a->sink_tw, h, i0, m) &&
           (!wants(a->sink_w, h, i0, m) || mha_sink_streams(a->sink_w));
}

static void task_rows(const mha_attn *a, int64_t b, int64_t h0, int64_t h1, int64_t rb, int slot,
                      const float *qt_from);

/* Row blocks [rb0, rb0+nt) of head h (groupable), together: each key block is brought in once for
 * all of them and used by each in turn while it is in L2. A task of one row block streams the
 * head's keys and values (2·S·hd floats) through the cache once per 64 rows; past the caches' room
 * (long S, and the L3 shared with the other core's head and other tenants) that stalls the GEMMs.
 * Each row's blocks come in the same order through the same kernels: the same bits as one row
 * block at a time. A streamed selection's row blocks stream in stream slots of their own (slot·G +
 * g) and end in order; one that cannot be made exact runs again alone, keeping its slab. */
static void task_grouped(const mha_attn *a, int64_t b, int64_t h, int64_t rb0, int64_t nt, int slot)
{
    rows r[MHA_GROUP_WIDE];
    tile t[MHA_GROUP_WIDE];
    int64_t nv[MHA_GROUP_WIDE];
    mha_sink *sw[MHA_GROUP_WIDE];
    for (int64_t g = 0; g < nt; g++) {
        rows_of(a, b, rb0 + g, &r[g]);
        rows_head(a, &r[g], h);
        carve_group_tile(a, slot, g, &t[g]);
        tile_start(a, &r[g], &t[g], true);
        nv[g] = 0;
        sw[g] = wants(a->sink_w, h, r[g].i0, r[g].m) ? a->sink_w : NULL;
        if (sw[g])
            mha_sink_stream_begin(sw[g], slot * (int)a->group + (int)g, b, h, r[g].i0, r[g].m);
    }
    for (int64_t blk = 0; blk < a->nblk && !mha_cancelled(a->in->cancel); blk++)
        for (int64_t g = 0; g < nt; g++) {
            if (!visits(a, &r[g].v, blk))
                continue;
            int64_t c0, c1;
            block_scores(a, &r[g], &t[g], blk, &c0, &c1);
            block_softmax(a, &r[g], &t[g], sw[g], slot * (int)a->group + (int)g, blk, c0, c1,
                          nv[g]);
            block_values(a, &r[g], &t[g], blk, c0, c1, nv[g]++);
        }
    for (int64_t g = 0; g < nt; g++) {
        tile_output(a, &r[g], &t[g]);
        if (sw[g] && !mha_cancelled(a->in->cancel) &&
            !stream_finish(a, &t[g], sw[g], slot * (int)a->group + (int)g, b, h, r[g].i0, r[g].m,
                           nv[g]))
            task_rows(a, b, h, h + 1, rb0 + g, slot, t[g].qt);
    }
}

/* Row block rb of batch b, heads [h0, h1) in order: the output, and whatever weights, trace
 * stages and selections want of these rows. qt_from (NULL: the pass as it comes): head h0's q tile
 * of a grouped task whose streamed selection could not be made exact, its output written: only
 * the weights are made, keeping the slab. */
static void task_rows(const mha_attn *a, int64_t b, int64_t h0, int64_t h1, int64_t rb, int slot,
                      const float *qt_from)
{
    const mha_inputs *in = a->in;
    const mha_isa isa = a->isa;
    const bool avg = a->weights && !a->per_head;
    const int64_t L = a->L, S = a->S, H = a->H, BN = a->BN;
    rows r;
    rows_of(a, b, rb, &r);
    const int64_t i0 = r.i0, m = r.m;
    tile t;
    carve_tile(a, slot, &t);
    float *const tile_sc = t.sc;            /* the score tile of blocks the slab does not keep */
    const int sslot = slot * (int)a->group; /* the thread's first stream slot */
    if (qt_from && qt_from != t.qt)
        memcpy(t.qt, qt_from, (size_t)(m * a->hd) * sizeof(float));

    mha_sink *const sinks[3] = {a->sink_w, a->sink_scores, a->sink_tw};
    for (int k = 0; k < 3; k++)
        if (sinks[k])
            mha_sink_begin(sinks[k], slot, b, i0, m);
    for (int64_t h = h0; h < h1 && !mha_cancelled(in->cancel); h++) {
        rows_head(a, &r, h);
        const int64_t bhl = (b * H + h) * L + i0; /* row of [N,H,L,·] */
        /* what this head's rows give beyond the output: a selection's sinks, or the full maps */
        mha_sink *sw =
            a->sink_w && mha_sink_wants_head(a->sink_w, h) && mha_sink_wants_rows(a->sink_w, i0, m)
                ? a->sink_w
                : NULL;
        mha_sink *stw = a->sink_tw && mha_sink_wants_head(a->sink_tw, h) &&
                                mha_sink_wants_rows(a->sink_tw, i0, m)
                            ? a->sink_tw
                            : NULL;
        mha_sink *ss = a->sink_scores && mha_sink_wants_head(a->sink_scores, h) &&
                               mha_sink_wants_rows(a->sink_scores, i0, m)
                           ? a->sink_scores
                           : NULL;
        /* a per-head top-k or pool is streamed from the tiles (mha_sink_stream_*); when that
         * cannot be made exact (mha_select.h), the head's blocks run again keeping its slab (its
         * q tile kept, its output written once, the scores sink already fed) */
        const bool streamable = sw && mha_sink_streams(sw);
        /* the full maps only, of rows that visit one block: written from the tile (weights_out);
         * one = {that block, its first and end column} once the block has run */
        int64_t one[3] = {-1, 0, 0}, first = -1;
        if (!sw && !stw && (a->weights || a->trace_weights) && next_block(a, &r.v, &first)) {
            one[0] = first;
            if (next_block(a, &r.v, &first)) /* a second block */
                one[0] = -1;
        }
        const int64_t *from_tile = one[0] >= 0 ? one : NULL;
        bool streamed = false;
        for (int pass = qt_from ? 1 : 0; pass < 2 && !streamed; pass++) {
            const bool stream = streamable && pass == 0;
            mha_sink *const ssp = pass == 0 ? ss : NULL;
            const bool keep = t.slab && (a->weights || a->trace_weights || (sw && !stream) || stw);
            const bool to_slab = keep && !from_tile;
            /* again: qt is still there (q's columns now hold the head's output) */
            tile_start(a, &r, &t, pass == 0);
            float *tscores = a->trace_scores ? a->trace_scores + bhl * S : NULL;
            for (int64_t i = 0; tscores && i < m; i++) /* keys never computed: -inf */
                for (int64_t j = 0; j < S; j++)
                    tscores[i * S + j] = -INFINITY;
            int64_t s_at = 0; /* the scores sink has every key before this */
            if (ssp)
                mha_sink_head_begin(ssp, slot, b, h, i0, m);
            if (stream)
                mha_sink_stream_begin(sw, sslot, b, h, i0, m);

            int64_t nv = 0;
            for (int64_t blk = -1; next_block(a, &r.v, &blk); nv++) {
                const int64_t j0 = blk * BN, bn = S - j0 < BN ? S - j0 : BN;
                int64_t c0, c1;
                t.sc = to_slab ? slab_block(a, &t, blk) : tile_sc; /* made where it is kept */
                block_scores(a, &r, &t, blk, &c0, &c1);
                const int64_t n = c1 - c0;
                float *sc = t.sc + c0;
                if (tscores)
                    for (int64_t i = 0; i < m; i++)
                        memcpy(tscores + i * S + j0 + c0, sc + i * BN, (size_t)n * sizeof(float));
                if (ssp) { /* keys never computed before this block's: -inf (the sink's fill) */
                    if (s_at < j0 + c0)
                        mha_sink_fill(ssp, slot, b, h, i0, m, s_at, j0 + c0 - s_at);
                    mha_sink_feed(ssp, slot, b, h, i0, m, j0 + c0, n, sc, BN, NULL);
                    s_at = j0 + c1;
                }
                block_softmax(a, &r, &t, stream ? sw : NULL, sslot, blk, c0, c1, nv);
                one[1] = c0;
                one[2] = c1;
                for (int64_t i = 0; to_slab && (c0 > 0 || bn > c1) && i < m; i++) {
                    memset(t.sc + i * BN, 0, (size_t)c0 * sizeof(float)); /* cut off: 0 */
                    memset(t.sc + i * BN + c1, 0, (size_t)(bn - c1) * sizeof(float));
                }
                if (to_slab && !stream) /* the row maxima the block's exps are relative to */
                    memcpy(t.mt + nv * a->bm, t.m, (size_t)m * sizeof(float));
                block_values(a, &r, &t, blk, c0, c1, nv);
            }

            if (pass == 0) /* (again, the same bits: written once) */
                tile_output(a, &r, &t);
            else /* the factors the weights need */
                for (int64_t i = 0; i < m; i++)
                    t.inv[i] = t.l[i] == 0.0f ? 0.0f : 1.0f / t.l[i];
            if (ssp) {
                if (s_at < S)
                    mha_sink_fill(ssp, slot, b, h, i0, m, s_at, S - s_at);
                mha_sink_head_end(ssp, slot, b, h, i0, m);
            }
            bool done = true;
            if (stream) {
                done = stream_finish(a, &t, sw, sslot, b, h, i0, m, nv);
                if (!done && keep) { /* the slab is there: no need to run again */
                    weights_to_sink(a, &r.v, &t, sw, slot, b, h, i0, m);
                    done = true;
                }
            } else if (sw) {
                weights_to_sink(a, &r.v, &t, sw, slot, b, h, i0, m);
            }
            if (!done)
                continue; /* again, keeping the slab (nothing else wanted it: stw is NULL) */
            streamed = true;
            if (stw)
                weights_to_sink(a, &r.v, &t, stw, slot, b, h, i0, m);
            if (!keep)
                continue;
            if (a->trace_weights)
                weights_out(a, &r.v, &t, a->trace_weights + bhl * S, m, 1, from_tile);
            if (a->weights && a->per_head)
                weights_out(a, &r.v, &t, a->weights + bhl * S, m, a->stream_weights ? 0 : 1,
                            from_tile);
            else if (avg)
                weights_out(a, &r.v, &t, a->weights + (b * L + i0) * S, m, h > 0 ? 2 : 1,
                            from_tile);
        }
    }
    if (a->weights && a->per_head && a->stream_weights)
        mha_copy_stream_fence();
    if (avg && !mha_cancelled(in->cancel)) /* torch: weights.sum(dim=1) / num_heads */
        mha_div_mul_rows_isa(isa, a->weights + (b * L + i0) * S, S, m, S, (float)H, NULL);
    for (int k = 0; k < 3; k++)
        if (sinks[k])
            mha_sink_end(sinks[k], slot, b, i0, m);
}

int64_t mha_attn_ntasks(const mha_attn *a)
{
    const int64_t G = a->all_heads ? 1 : a->group;
    return a->N * (a->all_heads ? 1 : a->H) * ((a->nrb + G - 1) / G);
}

void mha_attn_task(void *arg, int64_t task, int slot)
{
    const mha_attn *a = arg;
    if (mha_cancelled(a->in->cancel))
        return;         /* the rest of a cancelled pass: nothing to do */
    if (a->all_heads) { /* (batch, row block), every head */
        task_rows(a, task / a->nrb, 0, a->H, task % a->nrb, slot, NULL);
        return;
    }
    const int64_t G = a->group, ngr = (a->nrb + G - 1) / G;
    const int64_t bh = task / ngr, rb0 = task % ngr * G, nt = a->nrb - rb0 < G ? a->nrb - rb0 : G;
    const int64_t b = bh / a->H, h = bh % a->H;
    bool together = nt > 1;
    for (int64_t g = 0; g < nt && together; g++)
        together = groupable(a, h, rb0 + g);
    if (together) {
        task_grouped(a, b, h, rb0, nt, slot);
        return;
    }
    for (int64_t g = 0; g < nt; g++) /* one row block at a time, in order (a pooled row shared
                                      * between blocks is summed in row order) */
        task_rows(a, b, h, h + 1, rb0 + g, slot, NULL);
}
