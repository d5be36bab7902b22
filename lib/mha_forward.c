/*
 * mha_forward.c - the forward pass: in-projection, RoPE, keys and values packed, the attention
 * core, out-projection; each phase a parallel-for over the pool (mha_core.h says how each is cut).
 * Without appended keys the in-projection packs the keys and values itself, from each block it
 * makes while the block is in cache, and writes no k or v rows (unless a trace wants them): on L
 * (N = 8, Zen 4) the packing phase read 25 MB back from L3 and memory, 4 ms of the pass's 244 on
 * one thread; the pass takes 1.5-2.2% less time (L, one and two threads), XL 0.8%. RoPE's rotation
 * of q and k is done there too, before the packing, where a 64-column block holds whole heads
 * (head_dim 8..64; 128 and 256 take a task's whole 256 columns, from C in L2) and no trace shows q
 * and k before it: L-rope went from +3.3% over L to +0.4%, Llama (head_dim 128) 0.2-1.5% faster.
 *
 * Layout: projected q/k/v and the concatenated head outputs keep the row order of the input
 * ([N,L,·] or [L,N,·]); a batch's rows are then reached through a batch stride and a row stride,
 * so nothing is ever transposed and the output comes out in the input's layout. Row (b, i) of a
 * buffer of row width W sits at b·bs + i·rs with (bs, rs) = (L·W, W) batch-first, (W, N·W) else.
 * A self-attention's q, k and v go side by side in one [N·L, Dq+2Dkv] buffer (three projections
 * writing their columns of it); the head outputs then replace q in its columns (each attention
 * task reads its q rows of a head before writing that head's output), so the concat costs no
 * memory of its own.
 *
 * Kernels: the layer's set for the plan's ISA (mha_weights.c): JIT code for full tiles where there
 * is some, hand kernels otherwise, cblas for ATTND_ISA=generic. Scratch: one allocation per pass
 * (plan.workspace_bytes, plus a slot per further thread as the workspace limit allows), reused
 * from the pool's cache when it is big enough, also by a pass too small to run on the pool's
 * threads (freed and allocated again each time, its scratch cost malloc's consolidation and fresh
 * pages: about 1% of S's pass).
 */
#include "mha_core.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* What the RoPE and trace helpers below read. */
typedef struct fwd {
    const mha_layer *layer;
    const mha_trace *trace;
    int64_t N, L, S0, S, E, H, Hkv, hd, Dq, Dkv;
    float *q, *k, *v, *cat; /* projected rows and concat, input row order        */
    int64_t q_bs, q_rs, k_bs, k_rs, v_bs, v_rs, c_bs, c_rs; /* batch and row strides (floats) */
    mha_isa isa;
    float *qpos, *kpos; /* [N,L], [N,S0]: positions as floats (exact)            */
    mha_pos_layout pl;
    float *rope_q, *rope_k; /* [q_rows][hd], [k_rows][hd]: cos | sin per row (rope_k may be
                             * rope_q: k_is_q)                                           */
    float *inv_freq;        /* [hd/2]                                                   */
    mha_attn *a;            /* the pass's attention: where the keys and values are packed */
    bool rope_in_proj;      /* RoPE rotates q and k in the in-projection's epilogues      */
} fwd;

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

/* The cos | sin row of query row i of batch b, and of key row j. */
static const float *rope_q_row(const fwd *f, int64_t b, int64_t i)
{
    return f->rope_q + (f->pl.q_rows == f->N * f->L ? b * f->L + i : i) * f->hd;
}

static const float *rope_k_row(const fwd *f, int64_t b, int64_t j)
{
    if (f->pl.k_is_q)
        return rope_q_row(f, b, j);
    return f->rope_k + (f->pl.k_rows == f->N * f->S0 ? b * f->S0 + j : j) * f->hd;
}

static void rope_apply_task(void *arg, int64_t task, int slot)
{
    (void)slot;
    const fwd *f = arg;
    const int64_t half = f->hd / 2, NL = f->N * f->L, NS = f->N * f->S0;
    for (int64_t t = task * ROPE_ROWS; t < (task + 1) * ROPE_ROWS && t < NL + NS; t++) {
        if (t < NL) { /* query row (b, i): every query head */
            const int64_t b = t / f->L, i = t % f->L;
            const float *cs = rope_q_row(f, b, i);
            float *x = f->q + b * f->q_bs + i * f->q_rs;
            for (int64_t h = 0; h < f->H; h++)
                mha_rope_rotate(f->isa, x + h * f->hd, cs, half);
        } else { /* key row (b, j): every kv head */
            const int64_t b = (t - NL) / f->S0, j = (t - NL) % f->S0;
            const float *cs = rope_k_row(f, b, j);
            float *x = f->k + b * f->k_bs + j * f->k_rs;
            for (int64_t g = 0; g < f->Hkv; g++)
                mha_rope_rotate(f->isa, x + g * f->hd, cs, half);
        }
    }
}

/* RoPE in the in-projection (f->rope_in_proj: head_dim divides 64, or 256 where the epilogue
 * takes a task's whole group, so a block of the epilogue holds whole heads): the block's rows [r0,
 * r0+rows) of the q job (keys: of the k job), columns [c0, c0+cols), rotated in place while the
 * block is in cache, where the rotation phase read q and k back from L3 or memory. Rows in the
 * input's order: batch first (or N = 1), or position first with the batches interleaved. The same
 * rotation of the same numbers: the same bits. */
static void rope_block(const fwd *f, bool keys, int64_t r0, int64_t rows, int64_t c0, int64_t cols,
                       float *c, int64_t ldc)
{
    const int64_t len = keys ? f->S0 : f->L, half = f->hd / 2;
    const bool seq_first = keys ? f->k_bs < f->k_rs : f->q_bs < f->q_rs;
    for (int64_t r = r0; r < r0 + rows; r++) {
        const int64_t b = seq_first ? r % f->N : r / len, i = seq_first ? r / f->N : r % len;
        const float *cs = keys ? rope_k_row(f, b, i) : rope_q_row(f, b, i);
        for (int64_t col = c0; col < c0 + cols; col += f->hd)
            mha_rope_rotate(f->isa, c + (r - r0) * ldc + (col - c0), cs, half);
    }
}

/* The in-projection's epilogues (mha_proj_epilogue, arg the fwd): q rotated; k rotated when RoPE
 * is on, then packed; v packed. */
static void q_then(void *arg, int64_t r0, int64_t rows, int64_t c0, int64_t cols, float *c,
                   int64_t ldc)
{
    rope_block(arg, false, r0, rows, c0, cols, c, ldc);
}

static void k_then(void *arg, int64_t r0, int64_t rows, int64_t c0, int64_t cols, float *c,
                   int64_t ldc)
{
    const fwd *f = arg;
    if (f->rope_in_proj)
        rope_block(f, true, r0, rows, c0, cols, c, ldc);
    mha_attn_pack_keys_from(f->a, r0, rows, c0, cols, c, ldc);
}

static void v_then(void *arg, int64_t r0, int64_t rows, int64_t c0, int64_t cols, float *c,
                   int64_t ldc)
{
    const fwd *f = arg;
    mha_attn_pack_values_from(f->a, r0, rows, c0, cols, c, ldc);
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

/* The last job of proj hands what it makes to fn (q_then, k_then or v_then, arg f) when on: by
 * 64-column blocks, or by a task's whole group where RoPE's heads are wider than 64 (rotated:
 * q and k; their rows are written out then); its rows are written out too when keep_c (a trace
 * reads them). */
static void then(mha_proj_set *proj, bool on, mha_proj_epilogue fn, fwd *f, bool rotated,
                 bool keep_c)
{
    if (on && rotated && MHA_PANEL % f->hd != 0)
        mha_proj_then_groups(proj, fn, f);
    else if (on)
        mha_proj_then(proj, fn, f, keep_c);
}

/* 1/x when x is a power of two (then x·(1/x) and every y/x are exact as y·(1/x)), else 0. */
static float exact_inverse(float x)
{
    int e;
    return frexpf(x, &e) == 0.5f ? 1.0f / x : 0.0f;
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
 * and hooked into a; MHA_ERR_NOMEM when one cannot have its memory. */
static mha_status setup_sinks(mha_attn *a, mha_sink sinks[3], const mha_inputs *in,
                              const mha_plan *plan, float *attn_weights, int32_t *topk_indices,
                              const mha_trace *trace, int threads, mha_error *err)
{
    mha_status st = MHA_OK;
    if (in->need_weights) {
        st = mha_sink_init(&sinks[0], plan, in->select, in->average_attn_weights, 0.0f,
                           attn_weights, topk_indices, threads, a->bm, err);
        a->sink_w = &sinks[0];
        /* averaged over the chosen heads: a task takes a row block's heads in order (torch's
         * sum); per head, the (batch, head, row block) tasks the pass runs without weights, whose
         * run of row blocks of one head keeps that head's keys and values in cache (every head
         * in each task cost +11% at L = S = 4096 for one head's 64 rows) */
        if (st == MHA_OK && sinks[0].navg)
            a->all_heads = true;
        if (st == MHA_OK) /* per head top-k and pool: fed from the tiles as they are made */
            st = mha_sink_stream_init(&sinks[0], threads, (int)a->group, a->BN, a->nblk, err);
    }
    if (st == MHA_OK && trace && trace->stage[MHA_TRACE_SCORES]) {
        st = mha_sink_init(&sinks[1], plan, in->select, false, -INFINITY,
                           trace->stage[MHA_TRACE_SCORES], trace->indices[MHA_TRACE_SCORES],
                           threads, a->bm, err);
        a->sink_scores = &sinks[1];
    }
    if (st == MHA_OK && trace && trace->stage[MHA_TRACE_ATTN_WEIGHTS]) {
        st = mha_sink_init(&sinks[2], plan, in->select, false, 0.0f,
                           trace->stage[MHA_TRACE_ATTN_WEIGHTS],
                           trace->indices[MHA_TRACE_ATTN_WEIGHTS], threads, a->bm, err);
        a->sink_tw = &sinks[2];
    }
    for (int k = 0; k < 3; k++)
        sinks[k].cancel = in->cancel;
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
    mha_pool *const cache = pool; /* whose scratch the pass reuses, whatever threads it runs on */
    if (plan->flops < 4e6)
        pool = NULL; /* a pass this small is done before the pool's threads would wake up */
    const int threads = mha_pool_threads(pool);
    const mha_kernel_set *ks = mha_layer_kernel_set(layer, plan->isa, plan->jit);
    fwd f = {
        .layer = layer,
        .trace = trace,
        .N = plan->N,
        .L = plan->L,
        .S0 = plan->S0,
        .S = plan->S,
        .E = plan->E,
        .H = plan->H,
        .Hkv = plan->Hkv,
        .hd = plan->hd,
        .Dq = plan->H * plan->hd,
        .Dkv = plan->Hkv * plan->hd,
        .isa = plan->isa,
    };
    mha_pos_layout_of(plan, in, &f.pl);
    const int64_t N = f.N, L = f.L, S0 = f.S0, E = f.E, Dq = f.Dq, Dkv = f.Dkv;
    const int64_t BN = mha_key_block(f.hd, plan->isa);
    mha_attn a = {
        .layer = layer,
        .in = in,
        .ks = ks,
        .isa = plan->isa,
        .N = N,
        .L = L,
        .S0 = S0,
        .S = f.S,
        .H = f.H,
        .Hkv = f.Hkv,
        .grp = f.H / f.Hkv,
        .hd = f.hd,
        .BN = BN,
        .nblk = (f.S + BN - 1) / BN,
        /* nrb and group: with bm, below */
        .kv_floats = mha_attn_kv_floats(plan),
        .causal = in->is_causal,
        .alibi = cfg->alibi,
        .window = cfg->window,
        .qscale = (float)sqrt((double)plan->hd),
        .qinv = exact_inverse((float)sqrt((double)plan->hd)),
        .weights = in->need_weights && !plan->selected ? attn_weights : NULL,
        .per_head = in->need_weights && !plan->selected && !in->average_attn_weights,
        .stream_weights =
            (double)plan->N * plan->H * plan->L * plan->S * sizeof(float) >= MHA_STREAM_MAP_BYTES,
        /* with a selection, the trace's scores and weights go to its sinks (setup_sinks) */
        .trace_scores = trace && !plan->selected ? trace->stage[MHA_TRACE_SCORES] : NULL,
        .trace_weights = trace && !plan->selected ? trace->stage[MHA_TRACE_ATTN_WEIGHTS] : NULL,
    };
    const bool sel_weights =
        plan->selected && (in->need_weights || (trace && trace->stage[MHA_TRACE_ATTN_WEIGHTS]));
    a.slab = a.weights || a.trace_weights || sel_weights;
    a.all_heads = a.weights && !a.per_head; /* and an averaged selection: setup_sinks */
    a.bm = mha_attn_bm(plan, !a.slab && !trace && !plan->selected, a.causal || a.window > 0);
    a.nrb = (L + a.bm - 1) / a.bm;
    a.group = mha_attn_group(plan, a.bm);
    a.mm_scores = a.bm == MHA_BM ? &ks->scores : &ks->scores_wide;
    a.mm_pv = a.bm == MHA_BM ? &ks->pv : &ks->pv_wide;
    a.m_edge = L % a.bm;
    a.n_edge = a.S - (a.nblk - 1) * BN < BN ? a.S - (a.nblk - 1) * BN : 0;
    a.tile_scores[0][0] = a.mm_scores;
    a.tile_pv[0][0] = a.mm_pv;
    if (L >= a.bm) /* full row blocks, a short last key block */
        mha_kernel_set_edge(ks, a.bm, a.n_edge, &a.tile_scores[0][1], &a.tile_pv[0][1]);
    if (a.S >= BN) /* a short last row block, full key blocks */
        mha_kernel_set_edge(ks, a.m_edge, BN, &a.tile_scores[1][0], &a.tile_pv[1][0]);
    mha_kernel_set_edge(ks, a.m_edge, a.n_edge, &a.tile_scores[1][1], &a.tile_pv[1][1]);
    a.slot_floats = mha_pass_slot_floats(plan, cfg, a.slab, a.bm);

    /* One allocation: the buffers every thread shares, then a slot per thread, as many as fit in
     * the layer's workspace limit: the plan cannot know the pool, so a pass planned close to the
     * limit runs on fewer threads rather than failing. */
    const int64_t slot_bytes = a.slot_floats * (int64_t)sizeof(float);
    const int64_t shared = (int64_t)plan->workspace_bytes -
                           mha_plan_slot_floats(plan, cfg, in) * (int64_t)sizeof(float);
    const int64_t limit = layer->limits.max_workspace_bytes;
    if (shared + slot_bytes > limit)
        return mha_fail(err, MHA_ERR_LIMIT, "query",
                        "this pass needs %lld bytes of scratch, over the layer's limit of %lld",
                        (long long)(shared + slot_bytes), (long long)limit);
    const int64_t spare = (limit - shared - slot_bytes) / slot_bytes;
    const int work_threads = spare < threads - 1 ? (int)spare + 1 : threads;
    const int64_t bytes = shared + work_threads * slot_bytes;
    mha_scratch scratch;
    float *work = mha_pool_scratch_get(cache, &scratch, (size_t)bytes);
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
    const float *b_in = layer->b_in, *b_k = b_in ? b_in + Dq : NULL;
    const float *b_v = b_in ? b_in + Dq + Dkv : NULL;
    const mha_packed_w *pq = mha_layer_packed(layer, 'q'), *pk = mha_layer_packed(layer, 'k');
    const mha_packed_w *pv = mha_layer_packed(layer, 'v'), *po = mha_layer_packed(layer, 'o');
    mha_proj_set proj = {.ks = ks, .cancel = in->cancel};
    /* the in-projection rotates q and k (RoPE) and packs the keys and values as it makes them
     * (q_then, k_then, v_then), unless appended keys, or RoPE with a trace (which shows q and k
     * before the rotation) or with heads across its 64-column blocks, take the phases */
    f.a = &a;
    const bool appended = cfg->add_bias_kv || cfg->add_zero_attn;
    f.rope_in_proj =
        cfg->rope && !trace && !appended && (MHA_PANEL % f.hd == 0 || MHA_PROJ_COLS % f.hd == 0);
    const bool pack_in_proj = !appended && (!cfg->rope || f.rope_in_proj);
    if (self) { /* q | k | v side by side, rows of Dq+2Dkv */
        const int64_t W = Dq + 2 * Dkv;
        float *qkv = carve(&cursor, N * L * W);
        f.q = qkv;
        f.k = qkv + Dq;
        f.v = qkv + Dq + Dkv;
        strides(&f, L, W, &f.q_bs, &f.q_rs);
        f.k_bs = f.v_bs = f.q_bs;
        f.k_rs = f.v_rs = f.q_rs;
        mha_proj_add(&proj, qt->data, N * L, E, layer->w_q, pq, b_in, f.q, W);
        then(&proj, f.rope_in_proj, q_then, &f, true, true);
        mha_proj_add(&proj, qt->data, N * L, E, layer->w_k, pk, b_k, f.k, W);
        then(&proj, pack_in_proj, k_then, &f, f.rope_in_proj, trace != NULL);
        mha_proj_add(&proj, qt->data, N * L, E, layer->w_v, pv, b_v, f.v, W);
        then(&proj, pack_in_proj, v_then, &f, false, trace != NULL);
    } else {
        f.q = carve(&cursor, N * L * Dq);
        strides(&f, L, Dq, &f.q_bs, &f.q_rs);
        mha_proj_add(&proj, qt->data, N * L, E, layer->w_q, pq, b_in, f.q, Dq);
        then(&proj, f.rope_in_proj, q_then, &f, true, true);
        if (kv_same) { /* value = key: k | v side by side */
            float *kv = carve(&cursor, N * S0 * 2 * Dkv);
            f.k = kv;
            f.v = kv + Dkv;
            strides(&f, S0, 2 * Dkv, &f.k_bs, &f.k_rs);
            f.v_bs = f.k_bs;
            f.v_rs = f.k_rs;
            mha_proj_add(&proj, kt->data, N * S0, E, layer->w_k, pk, b_k, f.k, 2 * Dkv);
            then(&proj, pack_in_proj, k_then, &f, f.rope_in_proj, trace != NULL);
            mha_proj_add(&proj, kt->data, N * S0, E, layer->w_v, pv, b_v, f.v, 2 * Dkv);
            then(&proj, pack_in_proj, v_then, &f, false, trace != NULL);
        } else {
            f.k = carve(&cursor, N * S0 * Dkv);
            f.v = carve(&cursor, N * S0 * Dkv);
            strides(&f, S0, Dkv, &f.k_bs, &f.k_rs);
            strides(&f, S0, Dkv, &f.v_bs, &f.v_rs);
            mha_proj_add(&proj, kt->data, N * S0, cfg->kdim, layer->w_k, pk, b_k, f.k, Dkv);
            then(&proj, pack_in_proj, k_then, &f, f.rope_in_proj, trace != NULL);
            mha_proj_add(&proj, vt->data, N * S0, cfg->vdim, layer->w_v, pv, b_v, f.v, Dkv);
            then(&proj, pack_in_proj, v_then, &f, false, trace != NULL);
        }
    }
    /* the head outputs go over q's columns (mha_attention.c): the concat has q's strides */
    const int64_t q_flat = self ? Dq + 2 * Dkv : Dq; /* q's row stride as flat [N·L] rows */
    f.cat = f.q;
    f.c_bs = f.q_bs;
    f.c_rs = f.q_rs;
    a.kv = carve(&cursor, N * f.Hkv * a.kv_floats);
    f.qpos = carve(&cursor, N * L);
    f.kpos = carve(&cursor, N * S0);
    if (cfg->rope) {
        f.rope_q = carve(&cursor, f.pl.q_rows * f.hd);
        f.rope_k = f.pl.k_is_q ? f.rope_q : carve(&cursor, f.pl.k_rows * f.hd);
        f.inv_freq = carve(&cursor, f.hd);
    }
    a.scratch = cursor;
    proj.scratch = cursor; /* the projections take turns with the attention in each slot */
    proj.slot_floats = a.slot_floats;
    mha_proj_held held[MHA_POOL_MAX_THREADS]; /* what each slot's copy of X rows holds */
    mha_proj_set_held(&proj, held, work_threads);
    /* positions matter to RoPE, ALiBi and the rules only (rows_of reads them for the rules) */
    const bool positioned = cfg->rope || a.alibi || a.causal || a.window;
    a.keys_sorted = positioned ? mha_positions_fill(f.qpos, f.kpos, plan, in) : true;
    a.q = f.q, a.k = f.k, a.v = f.v, a.cat = f.cat;
    a.q_bs = f.q_bs, a.q_rs = f.q_rs, a.k_bs = f.k_bs, a.k_rs = f.k_rs;
    a.v_bs = f.v_bs, a.v_rs = f.v_rs, a.c_bs = f.c_bs, a.c_rs = f.c_rs;
    a.qpos = f.qpos, a.kpos = f.kpos;
    if (cfg->rope) { /* the tables, while nothing else runs yet */
        mha_rope_inv_freq(f.inv_freq, f.hd, cfg->rope_theta);
        const int64_t rows = f.pl.q_rows + f.pl.k_rows;
        mha_pool_run_limit(pool, (rows + ROPE_ROWS - 1) / ROPE_ROWS, rope_table_task, &f,
                           work_threads);
    }

    /* A selection's sinks; the trace's full SCORES and ATTN_WEIGHTS stages give way to them. */
    mha_sink sinks[3]; /* set (and freed) only with a selection: 1.3 KB not cleared for nothing */
    mha_trace tr_full;
    if (plan->selected) {
        memset(sinks, 0, sizeof sinks);
        mha_status st =
            setup_sinks(&a, sinks, in, plan, attn_weights, topk_indices, trace, work_threads, err);
        if (st != MHA_OK) {
            for (int k = 0; k < 3; k++)
                mha_sink_free(&sinks[k]);
            mha_pool_scratch_put(cache, &scratch);
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
    mha_pool_run_limit(pool, proj.ntasks, mha_proj_task, &proj, work_threads);
    if (trace)
        trace_projections(&f);
    if (cfg->rope && !f.rope_in_proj)
        mha_pool_run_limit(pool, (N * (L + S0) + ROPE_ROWS - 1) / ROPE_ROWS, rope_apply_task, &f,
                           work_threads);
    if (trace)
        trace_heads(&f);
    if (!pack_in_proj)
        mha_pool_run_limit(pool, N * f.Hkv * a.nblk, mha_attn_pack_task, &a, work_threads);
    int64_t no_score = -1; /* a row float32 left without a finite score (mha_attn) */
    a.no_score_row = &no_score;
    mha_pool_run_limit(pool, mha_attn_ntasks(&a), mha_attn_task, &a, work_threads);
    for (int k = 0; k < 3 && plan->selected; k++)
        mha_sink_free(&sinks[k]);
    if (no_score >= 0 && !mha_cancelled(in->cancel)) {
        mha_pool_scratch_put(cache, &scratch);
        const int64_t i = no_score % L, bh = no_score / L;
        return mha_fail(err, MHA_ERR_VALUE, "",
                        "the pass overflowed float32: row %lld of head %lld (batch %lld) has no "
                        "finite score, though its masks allow keys (q·kᵀ is past ±3.4e38; torch "
                        "gives NaN here); inputs or weights are too large, scale them down",
                        (long long)i, (long long)(bh % f.H), (long long)(bh / f.H));
    }
    mha_proj_set out = {
        .ks = ks, .cancel = in->cancel, .scratch = a.scratch, .slot_floats = a.slot_floats};
    mha_proj_set_held(&out, held, work_threads); /* the attention used the slots */
    mha_proj_add(&out, f.cat, N * L, q_flat, layer->w_out, po, layer->b_out, output, E);
    mha_pool_run_limit(pool, out.ntasks, mha_proj_task, &out, work_threads);
    if (trace) {
        int64_t o_bs, o_rs;
        strides(&f, L, E, &o_bs, &o_rs);
        trace_outputs(&f, output, o_bs, o_rs);
    }
    mha_pool_scratch_put(cache, &scratch);
    if (mha_cancelled(in->cancel))
        return mha_fail(err, MHA_ERR_CANCELLED, "", "the pass was cancelled by its caller");
    return MHA_OK;
}
