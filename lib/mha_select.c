/*
 * mha_select.c - a selection's plan and the weights sink (see mha_select.h).
 *
 * Layers of the sink: the public calls clip a block to the chosen rows and keys and route it, per
 * head, to the output's head slot, or, averaged, into the thread's [rb, S'] block (summed over the
 * chosen heads, product rounded before the sum and divided by h' at the end: the arithmetic of the
 * full averaged map, so equal heads give equal bits). Both end in the "emit" functions, which know
 * one kind each:
 *   map    rows written into the output (non-temporal stores when scaled and large, as the
 *          full map's);
 *   top-k  rows written into the thread's [rb, S'] rows (the averaged block is its own), the map's
 *          values and fills; when the block ends, each row's k best are chosen from the whole row
 *          (mha_topk_row, mha_select_topk.c): the first k of the stable descending order
 *          (torch.topk with ties to the lower index), best first;
 *   pool   per row, each key block's sum (in double) or max, added into the thread's partial rows;
 *          a pooled row that lies in one block of the core is written when that block ends; one
 *          that spans blocks is combined in a shared accumulator in the order of its rows (each
 *          block waits until the rows above it are in), so the sums never depend on thread timing.
 * A per-head top-k or pool is instead streamed from the core's tiles (mha_select_stream.c; the
 * arithmetic and why top-k stays exact are in mha_select.h), ending in the same output rows.
 */
#include "mha_forward_internal.h"
#include "mha_select.h"
#include "mha_softmax_block.h"

#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------- */
/* Plan                                                                                           */

static mha_status check_range(const char *member, const int64_t r[2], int64_t len, const char *axis,
                              mha_error *err)
{
    if (r[0] < 0 || r[1] > len || r[0] >= r[1])
        return mha_fail(err, MHA_ERR_VALUE, member[0] == 'q' ? "select.queries" : "select.keys",
                        "%s [%lld, %lld) is %s: it must be a non-empty range [start, stop) within "
                        "[0, %lld) (%s)",
                        member, (long long)r[0], (long long)r[1],
                        r[0] >= r[1] ? "empty" : "outside the axis", (long long)len, axis);
    return MHA_OK;
}

/* ⌈a / b⌉ for a >= 0, b >= 1, without a + b - 1 (b may be near INT64_MAX). */
static int64_t ceil_div(int64_t a, int64_t b)
{
    return a / b + (a % b != 0);
}

mha_status mha_select_plan(mha_plan *p, const mha_select *sel, bool need_weights, bool average,
                           const mha_limits *lim, mha_error *err)
{
    const int64_t H = p->H;
    mha_status st;
    if (sel->nheads < 0 || (sel->nheads > 0 && !sel->heads))
        return mha_fail(err, MHA_ERR_ARG, "select.heads", "heads: NULL list or negative count");
    if (sel->nheads > 0) {
        uint8_t *seen = calloc((size_t)H, 1);
        if (!seen)
            return mha_fail(err, MHA_ERR_NOMEM, "select.heads", "heads: out of memory");
        st = MHA_OK;
        for (int64_t i = 0; i < sel->nheads && st == MHA_OK; i++) {
            const int64_t h = sel->heads[i];
            if (h < 0 || h >= H)
                st = mha_fail(err, MHA_ERR_VALUE, "select.heads",
                              "heads[%lld] is %lld, outside 0..%lld (the layer has num_heads=%lld)",
                              (long long)i, (long long)h, (long long)(H - 1), (long long)H);
            else if (seen[h]++)
                st = mha_fail(err, MHA_ERR_VALUE, "select.heads",
                              "heads[%lld] is %lld, which is given twice; list each head once",
                              (long long)i, (long long)h);
        }
        free(seen);
        if (st != MHA_OK)
            return st;
    }
    int64_t q[2] = {0, p->L}, k[2] = {0, p->S};
    if (sel->has_queries) {
        memcpy(q, sel->queries, sizeof q);
        if ((st = check_range("queries", q, p->L, "L, the query length", err)) != MHA_OK)
            return st;
    }
    if (sel->has_keys) {
        memcpy(k, sel->keys, sizeof k);
        if ((st = check_range("keys", k, p->S,
                              "S, the keys given plus those add_bias_kv and add_zero_attn append",
                              err)) != MHA_OK)
            return st;
    }
    if (sel->has_top_k && sel->top_k < 1)
        return mha_fail(err, MHA_ERR_VALUE, "select.top_k", "top_k is %lld; it must be at least 1",
                        (long long)sel->top_k);
    if (sel->has_pool && (sel->pool[0] < 1 || sel->pool[1] < 1))
        return mha_fail(err, MHA_ERR_VALUE, "select.pool",
                        "pool [%lld, %lld] has a block size below 1; both must be at least 1",
                        (long long)sel->pool[0], (long long)sel->pool[1]);
    if (sel->has_pool && sel->has_top_k)
        return mha_fail(err, MHA_ERR_VALUE, "select.pool",
                        "pool cannot go with top_k: top_k returns each row's strongest keys, pool "
                        "a reduced map; ask for one of them");
    if (sel->pool_op != MHA_POOL_MEAN && sel->pool_op != MHA_POOL_MAX)
        return mha_fail(err, MHA_ERR_VALUE, "select.pool_op",
                        "pool_op is unknown; it is mean or max");

    p->selected = true;
    p->sel_heads = sel->nheads > 0 ? sel->nheads : H;
    memcpy(p->sel_q, q, sizeof q);
    memcpy(p->sel_k, k, sizeof k);
    const int64_t Lq = q[1] - q[0], Sk = k[1] - k[0];
    int64_t rows = Lq, cols = Sk;
    p->top_k = 0;
    p->pool[0] = p->pool[1] = 0;
    p->pool_op = sel->pool_op;
    if (sel->has_top_k)
        cols = p->top_k = sel->top_k < Sk ? sel->top_k : Sk;
    if (sel->has_pool) { /* a block past its axis is one partial block: the axis itself (the
                          * sink then never adds a block size near 2^63 to a key index) */
        p->pool[0] = sel->pool[0] < Lq ? sel->pool[0] : Lq;
        p->pool[1] = sel->pool[1] < Sk ? sel->pool[1] : Sk;
        rows = ceil_div(Lq, p->pool[0]);
        cols = ceil_div(Sk, p->pool[1]);
    }
    p->sel_shape[0] = p->N;
    p->sel_shape[1] = p->sel_heads;
    p->sel_shape[2] = rows;
    p->sel_shape[3] = cols;
    int64_t c = 1, per_head;
    bool ok = mha_mul_ok(rows, cols, &per_head) && mha_mul_ok(per_head, p->N, &c) &&
              mha_mul_ok(c, p->sel_heads, &per_head);
    /* the reply is what counts: averaged, one map [N, rows, cols] whatever the heads chosen */
    if (!ok || (need_weights && average ? c : per_head) > lim->max_elements)
        return mha_fail(
            err, MHA_ERR_LIMIT, "select",
            "the chosen weights would have more than %lld elements; choose fewer heads, "
            "rows or keys, or pool them",
            (long long)lim->max_elements);
    if (!need_weights)
        return MHA_OK;
    int n = 0;
    if (p->batched)
        p->weights_shape[n++] = p->N;
    if (!average)
        p->weights_shape[n++] = p->sel_heads;
    p->weights_shape[n++] = rows;
    p->weights_shape[n++] = cols;
    p->weights_ndim = n;
    p->weights_count = average ? c : per_head;
    return MHA_OK;
}

mha_status mha_plan_select(const mha_config *cfg, int64_t N, int64_t L, int64_t S0, bool batched,
                           bool average, const mha_select *sel, const mha_limits *limits,
                           mha_plan *plan, mha_error *err)
{
    mha_limits def;
    if (!cfg || !sel || !plan)
        return mha_fail(err, MHA_ERR_ARG, "select", "plan_select: NULL argument");
    if (!limits) {
        mha_limits_default(&def);
        limits = &def;
    }
    if (N < 1 || L < 1 || S0 < 1 || cfg->num_heads < 1)
        return mha_fail(err, MHA_ERR_SHAPE, "select", "plan_select: N, L, S0 and H must be >= 1");
    memset(plan, 0, sizeof *plan);
    plan->batched = batched;
    plan->N = batched ? N : 1;
    plan->L = L;
    plan->S0 = S0;
    plan->S = S0 + (cfg->add_bias_kv ? 1 : 0) + (cfg->add_zero_attn ? 1 : 0);
    plan->E = cfg->embed_dim;
    plan->H = cfg->num_heads;
    plan->hd = mha_config_head_dim(cfg);
    plan->Hkv = mha_config_kv_heads(cfg);
    return mha_select_plan(plan, sel, true, average, limits, err);
}

/* ---------------------------------------------------------------------------------------------- */
/* Sink: set-up                                                                                   */

/* A top-k's room per thread (floats): mha_topk_row's scratch (5·S'), a row (S'), a factor per
 * key block (at most S), and the hint one row leaves the next (mha_topk_hint) in the last 16
 * floats; whole lines, so that one thread's hint shares no line with another's room. */
static int64_t tk_floats(const mha_sink *s)
{
    return (6 * s->Sk + s->S + 15) / 16 * 16 + 16;
}

static mha_topk_hint *tk_hint(const mha_sink *s, int slot)
{
    return (mha_topk_hint *)(s->tkmem + (int64_t)(slot + 1) * tk_floats(s) - 16);
}

mha_status mha_sink_init(mha_sink *s, const mha_plan *plan, const mha_select *sel, bool average,
                         float fill, float *values, int32_t *indices, int threads, int64_t rb,
                         mha_error *err)
{
    memset(s, 0, sizeof *s);
    /* a pool of 1 x 1 blocks is the map itself, the same bits (a mean of one value, in double,
     * is that value): written as the map is, at the map's cost */
    const bool pooled = plan->pool[0] && (plan->pool[0] > 1 || plan->pool[1] > 1);
    s->kind = plan->top_k ? MHA_SINK_TOPK : pooled ? MHA_SINK_POOL : MHA_SINK_MAP;
    s->isa = plan->isa;
    s->N = plan->N;
    s->L = plan->L;
    s->S = plan->S;
    s->H = plan->H;
    s->nh = average ? 1 : plan->sel_heads;
    s->navg = average ? plan->sel_heads : 0;
    s->q0 = plan->sel_q[0];
    s->q1 = plan->sel_q[1];
    s->k0 = plan->sel_k[0];
    s->k1 = plan->sel_k[1];
    s->Lq = s->q1 - s->q0;
    s->Sk = s->k1 - s->k0;
    s->nt_stores = s->kind == MHA_SINK_MAP &&
                   (double)s->N * s->nh * s->Lq * s->Sk * sizeof(float) >= MHA_STREAM_MAP_BYTES;
    s->k = plan->top_k;
    s->op = plan->pool_op;
    s->fill = fill;
    s->rb = rb;
    s->values = values;
    s->indices = indices;
    if (s->kind == MHA_SINK_POOL) {
        s->pa = plan->pool[0];
        s->pb = plan->pool[1];
        s->Lp = ceil_div(s->Lq, s->pa);
        s->Sp = ceil_div(s->Sk, s->pb);
        s->part_rows = ceil_div(rb, s->pa) + 1;
    }
    /* The pooled rows more than one block of rows feeds (blocks are [t·rb, (t+1)·rb)). */
    for (int64_t p = 0; s->kind == MHA_SINK_POOL && p < s->Lp; p++) {
        const int64_t ps = s->q0 + p * s->pa, pe = ps + s->pa < s->q1 ? ps + s->pa : s->q1;
        if (ps / rb != (pe - 1) / rb)
            s->nshared++;
    }
    const size_t T = (size_t)threads;
    const size_t b_slots = mha_line((size_t)s->H * sizeof(int64_t));
    const size_t b_avg = average ? mha_line(T * (size_t)rb * (size_t)s->Sk * sizeof(float)) : 0;
    const size_t b_part = mha_line(T * (size_t)s->part_rows * (size_t)s->Sp * sizeof(double));
    /* top-k: the block's rows of the map (the averaged block itself when averaged; none for
     * weights per head, which come a whole row at a time: mha_sink_takes_rows), and a row's room
     * for its choice (mha_topk_row) */
    const bool topk = s->kind == MHA_SINK_TOPK;
    s->rows = topk && !average && fill == 0.0f; /* weights (scores have fill -inf) */
    const size_t b_tkrow = topk && !average && !s->rows
                               ? mha_line(T * (size_t)rb * (size_t)s->Sk * sizeof(float))
                               : 0;
    const size_t b_tk = topk ? mha_line(T * (size_t)tk_floats(s) * sizeof(float)) : 0;
    const size_t b_shared_of = mha_line((size_t)s->Lp * sizeof(int64_t));
    const size_t nacc = (size_t)s->N * (size_t)s->nh * (size_t)s->nshared;
    const size_t b_acc = mha_line(nacc * (size_t)s->Sp * sizeof(double));
    const size_t b_next = mha_line(nacc * sizeof(int64_t));
    const size_t total =
        b_slots + b_avg + b_part + b_tkrow + b_tk + b_shared_of + b_acc + b_next;
    char *mem;
    const mha_status st = mha_sink_state_alloc((void **)&mem, total, err);
    if (st != MHA_OK)
        return st;
    s->mem = mem;
    s->slot_of_head = (int64_t *)mem;
    mem += b_slots;
    s->avg = average ? (float *)mem : NULL;
    mem += b_avg;
    s->part = b_part ? (double *)mem : NULL;
    mem += b_part;
    s->tkrow = b_tkrow ? (float *)mem : topk ? s->avg : NULL;
    mem += b_tkrow;
    s->tkmem = b_tk ? (float *)mem : NULL;
    mem += b_tk;
    for (int slot = 0; b_tk && (size_t)slot < T; slot++) /* no guess yet */
        *tk_hint(s, slot) = (mha_topk_hint){0, 0, 0};
    s->shared_of = (int64_t *)mem;
    mem += b_shared_of;
    s->acc = (double *)mem;
    mem += b_acc;
    s->next_row = (int64_t *)mem;

    for (int64_t h = 0; h < s->H; h++)
        s->slot_of_head[h] = sel->nheads > 0 ? -1 : average ? 0 : h;
    for (int64_t i = 0; i < sel->nheads; i++)
        s->slot_of_head[sel->heads[i]] = average ? 0 : i;
    int64_t shared = 0;
    for (int64_t p = 0; p < s->Lp; p++) {
        const int64_t ps = s->q0 + p * s->pa, pe = ps + s->pa < s->q1 ? ps + s->pa : s->q1;
        s->shared_of[p] = ps / rb != (pe - 1) / rb ? shared++ : -1;
        for (size_t bh = 0; s->shared_of[p] >= 0 && bh < (size_t)(s->N * s->nh); bh++) {
            const size_t at = bh * (size_t)s->nshared + (size_t)s->shared_of[p];
            s->next_row[at] = ps;
            for (int64_t c = 0; c < s->Sp; c++)
                s->acc[at * (size_t)s->Sp + (size_t)c] = s->op == MHA_POOL_MAX ? -INFINITY : 0.0;
        }
    }
    return MHA_OK;
}

void mha_sink_free(mha_sink *s)
{
    free(s->mem);
    free(s->smem);
    memset(s, 0, sizeof *s);
}

bool mha_sink_wants_head(const mha_sink *s, int64_t h)
{
    return s->slot_of_head[h] >= 0;
}

bool mha_sink_wants_rows(const mha_sink *s, int64_t i0, int64_t m)
{
    return i0 < s->q1 && i0 + m > s->q0;
}

/* ---------------------------------------------------------------------------------------------- */
/* Emit: final values of head slot hs, for rows [r0, r1) of a block whose first chosen row is br0 */

static float *map_row(const mha_sink *s, const mha_rows_view *v, int64_t i)
{
    return s->values + ((v->b * s->nh + v->hs) * s->Lq + (i - s->q0)) * s->Sk;
}

/* Row i's k best, from its values w [S'] over the chosen keys, into the reply. */
static void topk_choose(mha_sink *s, int slot, const mha_rows_view *v, int64_t i, const float *w)
{
    float *room = s->tkmem + (int64_t)slot * tk_floats(s);
    const mha_topk_scratch t = {(int32_t *)room, (int32_t *)room + s->Sk,
                                (uint32_t *)room + 2 * s->Sk, (uint32_t *)room + 3 * s->Sk,
                                room + 4 * s->Sk, tk_hint(s, slot)};
    const int64_t at = (v->b * s->nh + v->hs) * s->Lq + (i - s->q0);
    mha_topk_row(s->isa, w, s->Sk, s->k, s->k0, s->values + at * s->k, s->indices + at * s->k, &t);
}

/* A top-k's row i of the block, in the thread's rows [rb][S'] (the averaged block when averaged). */
static float *topk_row(const mha_sink *s, int slot, const mha_rows_view *v, int64_t i)
{
    return s->tkrow + ((int64_t)slot * s->rb + (i - v->br0)) * s->Sk;
}

/* The pooled row p's partial row in this thread's buffer. */
double *mha_sink_part_row(const mha_sink *s, int slot, const mha_rows_view *v, int64_t p)
{
    const int64_t first = (v->br0 - s->q0) / s->pa;
    return s->part + ((int64_t)slot * s->part_rows + (p - first)) * s->Sp;
}

static void emit_begin(mha_sink *s, int slot, const mha_rows_view *v)
{
    if (s->kind == MHA_SINK_POOL) {
        const int64_t p0 = (v->r0 - s->q0) / s->pa, p1 = (v->r1 - 1 - s->q0) / s->pa;
        const double init = s->op == MHA_POOL_MAX ? -INFINITY : 0.0;
        for (int64_t p = p0; p <= p1; p++) {
            double *row = mha_sink_part_row(s, slot, v, p);
            for (int64_t c = 0; c < s->Sp; c++)
                row[c] = init;
        }
    }
}

/* Keys [j0, j1) of rows [v.r0, v.r1): row i's value of key j is P[(i - r0)·ld + j - j0] · scale[i -
 * r0] (scale NULL: the P value itself). */
static void emit_rows(mha_sink *s, int slot, const mha_rows_view *v, int64_t j0, int64_t j1,
                      const float *P, int64_t ld, const float *scale)
{
    const int64_t rows = v->r1 - v->r0, n = j1 - j0;
    if (s->kind == MHA_SINK_MAP) {
        float *dst = map_row(s, v, v->r0) + (j0 - s->k0);
        if (scale && s->nt_stores)
            mha_scale_rows_stream_isa(s->isa, dst, s->Sk, P, ld, rows, n, scale);
        else if (scale) /* the same products, with ordinary stores */
            mha_scaled_add_rows_isa(s->isa, dst, s->Sk, P, ld, rows, n, scale, false);
        else
            for (int64_t r = 0; r < rows; r++)
                memcpy(dst + r * s->Sk, P + r * ld, (size_t)n * sizeof(float));
        return;
    }
    if (s->kind == MHA_SINK_TOPK) { /* into the thread's rows; chosen from at the end */
        float *dst = topk_row(s, slot, v, v->r0) + (j0 - s->k0);
        if (scale) /* the map's x·f, the product rounded as the map's */
            mha_scaled_add_rows_isa(s->isa, dst, s->Sk, P, ld, rows, n, scale, false);
        else if (dst != P) /* (averaged: the sink's own block, in place) */
            for (int64_t r = 0; r < rows; r++)
                memcpy(dst + r * s->Sk, P + r * ld, (size_t)n * sizeof(float));
        return;
    }
    for (int64_t r = 0; r < rows; r++) {
        const int64_t i = v->r0 + r;
        const float *x = P + r * ld;
        /* x·1 is x: unscaled, the values as they are */
        const float sc = scale ? scale[r] : 1.0f;
        /* pool: each column's sum (double) or max over the block's keys, times sc, into the row's
         * partials: a run of whole columns at a time (at most 256 keys, or one column), the
         * streamed path's kernels and arithmetic */
        double *prow = mha_sink_part_row(s, slot, v, (i - s->q0) / s->pa);
        const int64_t span = s->pb * (s->pb < 256 ? 256 / s->pb : 1);
        double part[257];
        for (int64_t ja = j0; ja < j1;) {
            const int64_t c0 = (ja - s->k0) / s->pb;
            const int64_t end = s->k0 + c0 * s->pb + span, jb = end < j1 ? end : j1;
            mha_run_pool_columns(s->isa, part, x - j0, ja, jb, s->k0, s->pb, s->op == MHA_POOL_MAX);
            mha_run_pool_accumulate(s->isa, prow + c0, part, (jb - 1 - s->k0) / s->pb - c0 + 1, sc,
                                    s->op == MHA_POOL_MAX);
            ja = jb;
        }
    }
}

/* Keys [j0, j1) of rows [v.r0, v.r1) hold the fill value. */
static void emit_fill(mha_sink *s, int slot, const mha_rows_view *v, int64_t j0, int64_t j1)
{
    const float f = s->fill;
    for (int64_t i = v->r0; i < v->r1; i++) {
        if (s->kind == MHA_SINK_MAP) {
            float *dst = map_row(s, v, i) + (j0 - s->k0);
            for (int64_t j = 0; j < j1 - j0; j++)
                dst[j] = f;
        } else if (s->kind == MHA_SINK_TOPK) {
            float *dst = topk_row(s, slot, v, i) + (j0 - s->k0);
            for (int64_t j = 0; j < j1 - j0; j++)
                dst[j] = f;
        } else {
            double *prow = mha_sink_part_row(s, slot, v, (i - s->q0) / s->pa);
            for (int64_t j = j0; j < j1;) {
                const int64_t c = (j - s->k0) / s->pb;
                const int64_t e = s->k0 + (c + 1) * s->pb < j1 ? s->k0 + (c + 1) * s->pb : j1;
                if (s->op == MHA_POOL_MAX)
                    prow[c] = f > prow[c] ? f : prow[c];
                else if (f != 0.0f)
                    prow[c] += (double)f * (double)(e - j);
                j = e;
            }
        }
    }
}

/* Writes pooled row p (all its rows summed in sum) to the output. */
static void pool_write(const mha_sink *s, const mha_rows_view *v, int64_t p, int64_t nrows,
                       const double *sum)
{
    float *out = s->values + ((v->b * s->nh + v->hs) * s->Lp + p) * s->Sp;
    for (int64_t c = 0; c < s->Sp; c++) {
        if (s->op == MHA_POOL_MAX) {
            out[c] = (float)sum[c];
            continue;
        }
        const int64_t c0 = s->k0 + c * s->pb, c1 = c0 + s->pb < s->k1 ? c0 + s->pb : s->k1;
        out[c] = (float)(sum[c] / (double)(nrows * (c1 - c0)));
    }
}

static void spin_pause(int *spins)
{
    if (++*spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    } else {
        sched_yield();
    }
}

static void emit_end(mha_sink *s, int slot, const mha_rows_view *v)
{
    if (s->kind == MHA_SINK_MAP) {
        if (s->nt_stores)
            mha_copy_stream_fence();
        return;
    }
    if (s->kind == MHA_SINK_TOPK) { /* every row whole: each one's k best */
        for (int64_t i = v->r0; i < v->r1; i++)
            topk_choose(s, slot, v, i, topk_row(s, slot, v, i));
        return;
    }
    const int64_t p0 = (v->r0 - s->q0) / s->pa, p1 = (v->r1 - 1 - s->q0) / s->pa;
    for (int64_t p = p0; p <= p1; p++) {
        const int64_t ps = s->q0 + p * s->pa, pe = ps + s->pa < s->q1 ? ps + s->pa : s->q1;
        const int64_t bs = ps > v->r0 ? ps : v->r0, be = pe < v->r1 ? pe : v->r1;
        const double *part = mha_sink_part_row(s, slot, v, p);
        if (bs == ps && be == pe) { /* the whole pooled row is this block's */
            pool_write(s, v, p, pe - ps, part);
            continue;
        }
        /* shared with the blocks above and below: add in row order */
        const size_t at = (size_t)((v->b * s->nh + v->hs) * s->nshared + s->shared_of[p]);
        int64_t *next = &s->next_row[at];
        double *acc = s->acc + at * (size_t)s->Sp;
        int spins = 0;
        while (__atomic_load_n(next, __ATOMIC_ACQUIRE) != bs) {
            /* a cancelled pass's blocks stop where they are, and their result is dropped: the
             * block above may never add its part */
            if (s->cancel && __atomic_load_n(s->cancel, __ATOMIC_RELAXED))
                return;
            spin_pause(&spins);
        }
        for (int64_t c = 0; c < s->Sp; c++) {
            if (s->op == MHA_POOL_MAX)
                acc[c] = part[c] > acc[c] ? part[c] : acc[c];
            else
                acc[c] += part[c];
        }
        if (be == pe)
            pool_write(s, v, p, pe - ps, acc);
        __atomic_store_n(next, be, __ATOMIC_RELEASE);
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* The calls a core makes                                                                         */

/* The block's chosen rows; false when it has none. */
mha_status mha_sink_state_alloc(void **mem, size_t bytes, mha_error *err)
{
    *mem = aligned_alloc(64, bytes);
    if (!*mem)
        return mha_fail(err, MHA_ERR_NOMEM, "select",
                        "out of memory for the selection's %zu bytes of state", bytes);
    mha_scratch_poison(*mem, bytes);
    return MHA_OK;
}

bool mha_sink_clip_rows(const mha_sink *s, int64_t b, int64_t hs, int64_t i0, int64_t m,
                        mha_rows_view *v)
{
    v->b = b;
    v->hs = hs;
    v->r0 = i0 > s->q0 ? i0 : s->q0;
    v->r1 = i0 + m < s->q1 ? i0 + m : s->q1;
    v->br0 = v->r0;
    return v->r0 < v->r1;
}

void mha_sink_begin(mha_sink *s, int slot, int64_t b, int64_t i0, int64_t m)
{
    mha_rows_view v;
    if (!s->navg || !mha_sink_clip_rows(s, b, 0, i0, m, &v))
        return;
    float *avg = s->avg + (int64_t)slot * s->rb * s->Sk;
    memset(avg, 0, (size_t)((v.r1 - v.r0) * s->Sk) * sizeof(float));
}

void mha_sink_head_begin(mha_sink *s, int slot, int64_t b, int64_t h, int64_t i0, int64_t m)
{
    mha_rows_view v;
    if (s->navg || s->slot_of_head[h] < 0 ||
        !mha_sink_clip_rows(s, b, s->slot_of_head[h], i0, m, &v))
        return;
    emit_begin(s, slot, &v);
}

void mha_sink_feed(mha_sink *s, int slot, int64_t b, int64_t h, int64_t i0, int64_t m, int64_t key0,
                   int64_t n, const float *P, int64_t ld, const float *scale)
{
    mha_rows_view v;
    if (s->slot_of_head[h] < 0 || !mha_sink_clip_rows(s, b, s->slot_of_head[h], i0, m, &v))
        return;
    const int64_t j0 = key0 > s->k0 ? key0 : s->k0, j1 = key0 + n < s->k1 ? key0 + n : s->k1;
    if (j0 >= j1)
        return;
    const float *x = P + (v.r0 - i0) * ld + (j0 - key0);
    const float *sc = scale ? scale + (v.r0 - i0) : NULL;
    if (!s->navg) {
        emit_rows(s, slot, &v, j0, j1, x, ld, sc);
        return;
    }
    /* averaged: summed into the thread's block, the product rounded first (the full map's sum) */
    float *avg = s->avg + (int64_t)slot * s->rb * s->Sk + (j0 - s->k0);
    for (int64_t r = 0; r < v.r1 - v.r0; r++)
        mha_run_add_scaled(s->isa, avg + r * s->Sk, x + r * ld, j1 - j0, sc ? sc[r] : 1.0f);
}

void mha_sink_fill(mha_sink *s, int slot, int64_t b, int64_t h, int64_t i0, int64_t m, int64_t key0,
                   int64_t n)
{
    mha_rows_view v;
    if (s->slot_of_head[h] < 0 || !mha_sink_clip_rows(s, b, s->slot_of_head[h], i0, m, &v))
        return;
    const int64_t j0 = key0 > s->k0 ? key0 : s->k0, j1 = key0 + n < s->k1 ? key0 + n : s->k1;
    if (j0 >= j1)
        return;
    if (!s->navg) {
        emit_fill(s, slot, &v, j0, j1);
        return;
    }
    if (s->fill == 0.0f) /* adds nothing to the sum */
        return;
    float *avg = s->avg + (int64_t)slot * s->rb * s->Sk + (j0 - s->k0);
    for (int64_t r = 0; r < v.r1 - v.r0; r++)
        for (int64_t j = 0; j < j1 - j0; j++)
            avg[r * s->Sk + j] += s->fill;
}

bool mha_sink_takes_rows(const mha_sink *s)
{
    return s->rows;
}

float *mha_sink_row_room(mha_sink *s, int slot, float **factors)
{
    float *room = s->tkmem + (int64_t)slot * tk_floats(s);
    *factors = room + 6 * s->Sk;
    return room + 5 * s->Sk;
}

void mha_sink_row(mha_sink *s, int slot, int64_t b, int64_t h, int64_t i, const float *w)
{
    mha_rows_view v;
    if (s->slot_of_head[h] < 0 || !mha_sink_clip_rows(s, b, s->slot_of_head[h], i, 1, &v))
        return;
    topk_choose(s, slot, &v, i, w);
}

void mha_sink_head_end(mha_sink *s, int slot, int64_t b, int64_t h, int64_t i0, int64_t m)
{
    mha_rows_view v;
    if (s->navg || s->slot_of_head[h] < 0 ||
        !mha_sink_clip_rows(s, b, s->slot_of_head[h], i0, m, &v))
        return;
    emit_end(s, slot, &v);
}

void mha_sink_end(mha_sink *s, int slot, int64_t b, int64_t i0, int64_t m)
{
    mha_rows_view v;
    if (!s->navg || !mha_sink_clip_rows(s, b, 0, i0, m, &v))
        return;
    /* torch: weights.sum(dim=1) / num_heads, over the chosen heads */
    float *avg = s->avg + (int64_t)slot * s->rb * s->Sk;
    const int64_t rows = v.r1 - v.r0;
    mha_run_div(s->isa, avg, rows * s->Sk, (float)s->navg);
    emit_begin(s, slot, &v);
    emit_rows(s, slot, &v, s->k0, s->k1, avg, s->Sk, NULL);
    emit_end(s, slot, &v);
}
