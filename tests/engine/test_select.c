/*
 * test_select.c - the weights a selection returns (mha_select, lib/mha_select.c) against the full
 * map of the same pass: random layers (every option, masks with fully masked rows, causal, both
 * layouts, unbatched; head_dim on and off the AVX-512 kernels) and random selections (heads in any
 * order or all, query and key ranges or all, the appended keys included; map, top-k, pooled mean
 * and max; per head and averaged), each run without a pool and on two threads:
 *   - the output is bit for bit the output of the pass without weights;
 *   - a slice is the full map's numbers, bit for bit; averaged, the chosen heads' sum in head order
 *     divided by their count (the full averaged map itself, bit for bit, when every head is
 * chosen);
 *   - top-k is the first k of a stable descending sort of the slice (ties to the lower key index),
 *     values and indices exactly;
 *   - a pooled block is the mean (to 1e-6) or the max (exactly) of the cells it holds; blocks of
 *     1 x 1 are the cells themselves, bit for bit;
 *   - two threads give the same bits as one (pooled means included), and a pass without the trace
 *     the same bits as with it;
 *   - the trace's scores and weights stages take the selection, per head, from the full trace.
 * The layers include today's models' (head_dim, grouped-query, RoPE, ALiBi, windows: keys skipped on
 * either side of a block). Then the plan's rules: each bad selection is refused naming its member.
 */
#include "check.h"
#include "mha.h"
#include "mha_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x5e1ec7u;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static int64_t rnd_int(int64_t lo, int64_t hi) /* inclusive */
{
    return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1));
}

static float rnd_float(void) /* uniform in [-1, 1) */
{
    return (float)((double)(rnd() >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

static float *rnd_array(int64_t n, float scale)
{
    float *x = malloc((size_t)(n ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        x[i] = scale * rnd_float();
    return x;
}

/* ---------------------------------------------------------------------------------------------- */
/* Random cases                                                                                   */

typedef struct tcase {
    mha_layer *layer;
    mha_inputs in;
    float *q, *k, *v;
    uint8_t *kpm;
    float *am;
    char desc[256];
} tcase;

static void set_tensor(mha_tensor *t, const float *data, bool batched, bool bf, int64_t N,
                       int64_t len, int64_t feat)
{
    t->data = data;
    if (!batched) {
        t->ndim = 2;
        t->shape[0] = len;
        t->shape[1] = feat;
    } else {
        t->ndim = 3;
        t->shape[0] = bf ? N : len;
        t->shape[1] = bf ? len : N;
        t->shape[2] = feat;
    }
}

static void make_case(tcase *tc, bool big)
{
    memset(tc, 0, sizeof *tc);
    static const int dims[][2] = {{8, 2}, {12, 3}, {16, 4}, {32, 2}, {64, 4}, {48, 3}, {6, 3}};
    int pick = (int)rnd_int(0, 6);
    mha_config cfg;
    mha_config_init(&cfg, dims[pick][0], dims[pick][1]);
    const int64_t E = cfg.embed_dim;
    cfg.add_bias_kv = rnd_int(0, 2) == 0;
    cfg.add_zero_attn = rnd_int(0, 2) == 0;
    cfg.batch_first = rnd_int(0, 1);
    if (rnd_int(0, 2) == 0) { /* today's models: head_dim, grouped-query, RoPE, ALiBi, a window */
        cfg.head_dim = rnd_int(0, 1) ? 16 : 2 * rnd_int(1, 4);
        cfg.num_kv_heads = cfg.num_heads % 2 == 0 && rnd_int(0, 1) ? cfg.num_heads / 2 : 1;
        cfg.rope = rnd_int(0, 1);
        cfg.rope_theta = 10000.0;
        cfg.alibi = rnd_int(0, 2) == 0;
        cfg.window = rnd_int(0, 1) ? rnd_int(1, big ? 150 : 12) : 0;
    }
    mha_error err;
    tc->layer = mha_layer_create(&cfg, NULL, &err);
    mha_layer_init(tc->layer, "xavier_uniform", rnd(), &err);
    bool batched = rnd_int(0, 4) != 0, bf = cfg.batch_first;
    int64_t N = batched ? rnd_int(1, 2) : 1;
    int64_t L = big ? rnd_int(100, 300) : rnd_int(1, 40);
    int64_t S0 = big ? rnd_int(200, 2500) : rnd_int(1, 40);
    bool self = rnd_int(0, 2) == 0;
    if (self)
        S0 = L;
    /* inputs of magnitude 3: weights far from uniform, so top-k and max mean something */
    tc->q = rnd_array(N * L * E, 3.0f);
    set_tensor(&tc->in.query, tc->q, batched, bf, N, L, E);
    if (!self) {
        tc->k = rnd_array(N * S0 * E, 3.0f);
        tc->v = rnd_array(N * S0 * E, 1.0f);
        /* equal keys give equal weights: ties for top-k */
        for (int64_t r = 1; r < S0 && rnd_int(0, 1); r += 3)
            memcpy(tc->k + r * E, tc->k + (r - 1) * E, (size_t)E * sizeof(float));
        set_tensor(&tc->in.key, tc->k, batched, bf, N, S0, E);
        set_tensor(&tc->in.value, tc->v, batched, bf, N, S0, E);
    }
    int masks = (int)rnd_int(0, 3);
    if (masks & 1) { /* key_padding_mask: some keys, and every key of batch 0 now and then */
        mha_mask *m = &tc->in.key_padding_mask;
        m->type = MHA_MASK_BOOL;
        m->ndim = batched ? 2 : 1;
        m->shape[0] = batched ? N : S0;
        m->shape[1] = S0;
        tc->kpm = malloc((size_t)(N * S0));
        bool all = rnd_int(0, 3) == 0;
        for (int64_t i = 0; i < N * S0; i++)
            tc->kpm[i] = (all && i < S0) || rnd_int(0, 4) == 0;
        m->data = tc->kpm;
    }
    if (masks & 2) { /* a float attn_mask [L,S0] with -inf in places */
        mha_mask *m = &tc->in.attn_mask;
        m->type = MHA_MASK_FLOAT;
        m->ndim = 2;
        m->shape[0] = L;
        m->shape[1] = S0;
        tc->am = rnd_array(L * S0, 1.0f);
        for (int64_t i = 0; i < L * S0; i++)
            if (rnd_int(0, 5) == 0)
                tc->am[i] = -INFINITY;
        m->data = tc->am;
    }
    tc->in.is_causal = rnd_int(0, 2) == 0;
    snprintf(tc->desc, sizeof tc->desc,
             "E=%lld H=%lld hd=%lld Hkv=%lld rope=%d alibi=%d window=%lld bias_kv=%d zero_attn=%d "
             "bf=%d batched=%d N=%lld L=%lld S0=%lld self=%d masks=%d causal=%d",
             (long long)E, (long long)cfg.num_heads, (long long)cfg.head_dim,
             (long long)cfg.num_kv_heads, cfg.rope, cfg.alibi, (long long)cfg.window,
             cfg.add_bias_kv, cfg.add_zero_attn, bf, batched, (long long)N, (long long)L,
             (long long)S0, self, masks, tc->in.is_causal);
}

/* Gives tc a float attn_mask [L,S0] that leaves each row two or three keys (0) and puts -300 on
 * the others (their weights underflow to 0). */
static void faint_rows(tcase *tc)
{
    mha_mask *m = &tc->in.attn_mask;
    const bool bf = mha_layer_config(tc->layer)->batch_first, batched = tc->in.query.ndim == 3;
    const mha_tensor *q = &tc->in.query, *k = tc->in.key.data ? &tc->in.key : &tc->in.query;
    const int64_t Lq = batched ? q->shape[bf ? 1 : 0] : q->shape[0];
    const int64_t S0 = batched ? k->shape[bf ? 1 : 0] : k->shape[0];
    free(tc->am);
    tc->am = malloc((size_t)(Lq * S0) * sizeof(float));
    for (int64_t i = 0; i < Lq; i++)
        for (int64_t j = 0; j < S0; j++)
            tc->am[i * S0 + j] = j % 97 == i % 97 || j == (i * 7) % S0 ? 0.0f : -300.0f;
    m->type = MHA_MASK_FLOAT;
    m->ndim = 2;
    m->shape[0] = Lq;
    m->shape[1] = S0;
    m->data = tc->am;
    tc->in.is_causal = false;
    snprintf(tc->desc + strlen(tc->desc), sizeof tc->desc - strlen(tc->desc), " faint rows");
}

static void free_case(tcase *tc)
{
    mha_layer_free(tc->layer);
    free(tc->q);
    free(tc->k);
    free(tc->v);
    free(tc->kpm);
    free(tc->am);
}

/* ---------------------------------------------------------------------------------------------- */
/* The reference: a selection made from the full per-head map F [N,H,L,S] */

typedef struct selection {
    mha_select sel;
    int64_t heads[64];
    bool average;
    char desc[200];
} selection;

static void rnd_selection(selection *s, int64_t H, int64_t L, int64_t S)
{
    memset(s, 0, sizeof *s);
    if (rnd_int(0, 2)) { /* some heads, in a random order */
        int64_t n = rnd_int(1, H);
        int64_t perm[64];
        for (int64_t h = 0; h < H; h++)
            perm[h] = h;
        for (int64_t h = H - 1; h > 0; h--) {
            int64_t j = rnd_int(0, h), t = perm[h];
            perm[h] = perm[j];
            perm[j] = t;
        }
        memcpy(s->heads, perm, (size_t)n * sizeof(int64_t));
        s->sel.nheads = n;
        s->sel.heads = s->heads;
    }
    if (rnd_int(0, 2)) {
        s->sel.has_queries = true;
        s->sel.queries[0] = rnd_int(0, L - 1);
        s->sel.queries[1] = rnd_int(s->sel.queries[0] + 1, L);
    }
    if (rnd_int(0, 2)) {
        s->sel.has_keys = true;
        s->sel.keys[0] = rnd_int(0, S - 1);
        s->sel.keys[1] = rnd_int(s->sel.keys[0] + 1, S);
    }
    int kind = (int)rnd_int(0, 2);
    if (kind == 1) {
        s->sel.has_top_k = true;
        s->sel.top_k = rnd_int(0, 3) == 0 ? rnd_int(1, S + 3) : rnd_int(1, 8);
    } else if (kind == 2) {
        s->sel.has_pool = true;
        s->sel.pool[0] = rnd_int(1, 3) == 1 ? 1 : rnd_int(1, 70);
        s->sel.pool[1] = rnd_int(0, 5) == 0 ? 1 : rnd_int(1, 300); /* 1 x 1 now and then */
        s->sel.pool_op = rnd_int(0, 1) ? MHA_POOL_MAX : MHA_POOL_MEAN;
    }
    s->average = rnd_int(0, 1);
    snprintf(s->desc, sizeof s->desc,
             "heads=%lld q=[%lld,%lld) k=[%lld,%lld) top_k=%lld pool=%lldx%lld %s avg=%d",
             (long long)s->sel.nheads, (long long)s->sel.queries[0], (long long)s->sel.queries[1],
             (long long)s->sel.keys[0], (long long)s->sel.keys[1], (long long)s->sel.top_k,
             (long long)s->sel.pool[0], (long long)s->sel.pool[1],
             s->sel.pool_op == MHA_POOL_MAX ? "max" : "mean", s->average);
}

/* The chosen slice of F [N,H,L,S] as [N,h',L',S'] (or averaged [N,L',S']), then reduced as the
 * selection says into vals (and idx with top-k); counts as in plan. */
static void ref_select(float *vals, int32_t *idx, const float *F, const mha_plan *plan,
                       const selection *s, bool average)
{
    const int64_t N = plan->N, H = plan->H, L = plan->L, S = plan->S;
    const int64_t q0 = plan->sel_q[0], q1 = plan->sel_q[1], k0 = plan->sel_k[0],
                  k1 = plan->sel_k[1];
    const int64_t Lq = q1 - q0, Sk = k1 - k0, nh = plan->sel_heads, oh = average ? 1 : nh;
    int64_t hs_list[64];
    for (int64_t i = 0; i < nh; i++)
        hs_list[i] = s->sel.nheads ? s->heads[i] : i;
    float *slice = malloc((size_t)(N * oh * Lq * Sk) * sizeof(float));
    for (int64_t b = 0; b < N; b++)
        for (int64_t i = 0; i < Lq; i++)
            for (int64_t j = 0; j < Sk; j++) {
                const int64_t at = ((b * H) * L + q0 + i) * S + k0 + j; /* head 0 */
                if (!average) {
                    for (int64_t hs = 0; hs < nh; hs++)
                        slice[((b * nh + hs) * Lq + i) * Sk + j] = F[at + hs_list[hs] * L * S];
                    continue;
                }
                float sum = 0.0f; /* in head order, as the full map sums */
                for (int64_t h = 0; h < H; h++) {
                    bool chosen = !s->sel.nheads;
                    for (int64_t t = 0; t < nh && !chosen; t++)
                        chosen = hs_list[t] == h;
                    if (chosen)
                        sum += F[at + h * L * S];
                }
                slice[(b * Lq + i) * Sk + j] = sum / (float)nh;
            }
    const int64_t rows = N * oh * Lq;
    if (plan->top_k) {
        const int64_t k = plan->top_k;
        for (int64_t r = 0; r < rows; r++) {
            const float *x = slice + r * Sk;
            /* selection of the best k, stable: best = greater value, or equal and lower index */
            bool *used = calloc((size_t)Sk, 1);
            for (int64_t t = 0; t < k; t++) {
                int64_t best = -1;
                for (int64_t j = 0; j < Sk; j++)
                    if (!used[j] && (best < 0 || x[j] > x[best]))
                        best = j;
                used[best] = true;
                vals[r * k + t] = x[best];
                idx[r * k + t] = (int32_t)(k0 + best);
            }
            free(used);
        }
    } else if (plan->pool[0]) {
        const int64_t a = plan->pool[0], bb = plan->pool[1];
        const int64_t Lp = (Lq + a - 1) / a, Sp = (Sk + bb - 1) / bb;
        for (int64_t g = 0; g < N * oh; g++)
            for (int64_t p = 0; p < Lp; p++)
                for (int64_t c = 0; c < Sp; c++) {
                    double sum = 0.0, mx = -INFINITY;
                    int64_t cnt = 0;
                    for (int64_t i = p * a; i < (p + 1) * a && i < Lq; i++)
                        for (int64_t j = c * bb; j < (c + 1) * bb && j < Sk; j++) {
                            const double x = slice[(g * Lq + i) * Sk + j];
                            sum += x;
                            mx = x > mx ? x : mx;
                            cnt++;
                        }
                    vals[(g * Lp + p) * Sp + c] =
                        plan->pool_op == MHA_POOL_MAX ? (float)mx : (float)(sum / (double)cnt);
                }
    } else {
        memcpy(vals, slice, (size_t)(rows * Sk) * sizeof(float));
    }
    free(slice);
}

static bool same_bits(const void *a, const void *b, int64_t n, size_t size)
{
    return memcmp(a, b, (size_t)n * size) == 0;
}

/* Pooled means: the same to 1e-6 relative (the sums are grouped by rows of the core's blocks). */
static bool close_mean(const float *got, const float *want, int64_t n, int64_t *at)
{
    for (int64_t i = 0; i < n; i++) {
        if (isinf(want[i]) && got[i] == want[i])
            continue;
        if (!(fabsf(got[i] - want[i]) <= 1e-6f * fabsf(want[i]) + 1e-30f)) {
            *at = i;
            return false;
        }
    }
    return true;
}

/* ---------------------------------------------------------------------------------------------- */

/* Runs one selection of a case, returns whether all matched. full [N,H,L,S] per head, favg the
 * full averaged map [N,L,S], fscores / fweights the full trace stages, out_nw the output without
 * weights. */
static bool run_selection(const tcase *tc, const selection *s, mha_pool *pool, const float *full,
                          const float *favg, const float *fscores, const float *out_nw)
{
    mha_inputs in = tc->in;
    in.need_weights = true;
    in.average_attn_weights = s->average;
    in.select = &s->sel;
    mha_plan plan;
    mha_error err = {0};
    if (!CHECK(mha_plan_forward(tc->layer, &in, NULL, &plan, &err) == MHA_OK, "plan of %s | %s: %s",
               tc->desc, s->desc, err.message))
        return false;
    const int64_t n = plan.weights_count;
    int64_t tn;
    int64_t tshape[4];
    mha_trace_stage_shape(&plan, MHA_TRACE_SCORES, tshape, &tn);
    float *out = malloc((size_t)plan.out_count * sizeof(float));
    float *w = malloc((size_t)n * sizeof(float)), *want = malloc((size_t)n * sizeof(float));
    int32_t *wi = plan.top_k ? malloc((size_t)n * 4) : NULL;
    int32_t *want_i = plan.top_k ? malloc((size_t)n * 4) : NULL;
    mha_trace tr;
    memset(&tr, 0, sizeof tr);
    tr.stage[MHA_TRACE_SCORES] = malloc((size_t)tn * sizeof(float));
    tr.stage[MHA_TRACE_ATTN_WEIGHTS] = malloc((size_t)tn * sizeof(float));
    if (plan.top_k) {
        tr.indices[MHA_TRACE_SCORES] = malloc((size_t)tn * 4);
        tr.indices[MHA_TRACE_ATTN_WEIGHTS] = malloc((size_t)tn * 4);
    }
    float *twant = malloc((size_t)tn * sizeof(float));
    int32_t *twant_i = plan.top_k ? malloc((size_t)tn * 4) : NULL;
    for (int64_t i = 0; i < n; i++)
        w[i] = NAN;
    bool ok =
        CHECK(mha_forward_select(tc->layer, &in, &plan, out, w, wi, &tr, pool, &err) == MHA_OK,
              "forward of %s | %s: %s", tc->desc, s->desc, err.message);
    ok = ok && CHECK(same_bits(out, out_nw, plan.out_count, 4),
                     "the output changed with the selection: %s | %s", tc->desc, s->desc);
    ref_select(want, want_i, full, &plan, s, s->average);
    /* a pool of 1 x 1 blocks is the map: its mean is each cell, bit for bit */
    const bool cells = plan.pool[0] == 1 && plan.pool[1] == 1;
    if (ok && plan.pool[0] && plan.pool_op == MHA_POOL_MEAN && !cells) {
        int64_t at = 0;
        ok = CHECK(close_mean(w, want, n, &at), "pooled mean [%lld]: %.9g, want %.9g: %s | %s",
                   (long long)at, w[at], want[at], tc->desc, s->desc);
    } else if (ok) {
        int64_t bad = -1;
        for (int64_t i = 0; i < n && bad < 0; i++)
            if (memcmp(&w[i], &want[i], 4) || (wi && wi[i] != want_i[i]))
                bad = i;
        ok = CHECK(bad < 0, "weights [%lld]: %.9g (key %d), want %.9g (key %d): %s | %s",
                   (long long)bad, bad >= 0 ? w[bad] : 0, wi && bad >= 0 ? wi[bad] : -1,
                   bad >= 0 ? want[bad] : 0, want_i && bad >= 0 ? want_i[bad] : -1, tc->desc,
                   s->desc);
    }
    /* every head, averaged, not pooled or reduced: the full averaged map itself */
    if (ok && s->average && !s->sel.nheads && !plan.top_k && !plan.pool[0]) {
        int64_t bad = -1;
        const int64_t Lq = plan.sel_q[1] - plan.sel_q[0], Sk = plan.sel_k[1] - plan.sel_k[0];
        for (int64_t b = 0; b < plan.N && bad < 0; b++)
            for (int64_t i = 0; i < Lq && bad < 0; i++)
                if (memcmp(w + (b * Lq + i) * Sk,
                           favg + (b * plan.L + plan.sel_q[0] + i) * plan.S + plan.sel_k[0],
                           (size_t)Sk * 4))
                    bad = i;
        ok = CHECK(bad < 0,
                   "averaged over every head differs from the full averaged map at row "
                   "%lld: %s | %s",
                   (long long)bad, tc->desc, s->desc);
    }
    /* without the trace the core keeps no slab: a per-head top-k or pool is streamed from its tiles
     * alone, and when that cannot be made exact the head runs again (mha_select.h); the same bits
     */
    if (ok) {
        float *w2 = malloc((size_t)n * sizeof(float)), *out2 = malloc((size_t)plan.out_count * 4);
        int32_t *wi2 = plan.top_k ? malloc((size_t)n * 4) : NULL;
        ok = CHECK(mha_forward_select(tc->layer, &in, &plan, out2, w2, wi2, NULL, pool, &err) ==
                       MHA_OK,
                   "forward without the trace of %s | %s: %s", tc->desc, s->desc, err.message);
        ok = ok && CHECK(same_bits(out2, out_nw, plan.out_count, 4) && same_bits(w2, w, n, 4) &&
                             (!wi2 || same_bits(wi2, wi, n, 4)),
                         "without the trace, other bits: %s | %s", tc->desc, s->desc);
        free(w2);
        free(out2);
        free(wi2);
    }
    /* the trace's stages, per head */
    for (int st = 0; ok && st < 2; st++) {
        const mha_trace_stage stage = st ? MHA_TRACE_ATTN_WEIGHTS : MHA_TRACE_SCORES;
        ref_select(twant, twant_i, st ? full : fscores, &plan, s, false);
        if (plan.pool[0] && plan.pool_op == MHA_POOL_MEAN && !cells) {
            int64_t at = 0;
            ok = CHECK(close_mean(tr.stage[stage], twant, tn, &at),
                       "trace %s pooled [%lld]: %.9g, want %.9g: %s | %s",
                       mha_trace_stage_name(stage), (long long)at, tr.stage[stage][at], twant[at],
                       tc->desc, s->desc);
        } else {
            ok = CHECK(same_bits(tr.stage[stage], twant, tn, 4) &&
                           (!plan.top_k || same_bits(tr.indices[stage], twant_i, tn, 4)),
                       "trace %s differs from the full trace's selection: %s | %s",
                       mha_trace_stage_name(stage), tc->desc, s->desc);
        }
    }
    free(out);
    free(w);
    free(want);
    free(wi);
    free(want_i);
    free(twant);
    free(twant_i);
    for (int st = 0; st < MHA_TRACE_NSTAGES; st++) {
        free(tr.stage[st]);
        free(tr.indices[st]);
    }
    return ok;
}

static bool run_case(tcase *tc, mha_pool *pool2, int nsel, const selection *fixed)
{
    mha_inputs in = tc->in;
    mha_plan plan, plan_avg, plan_nw;
    mha_error err = {0};
    in.need_weights = true;
    in.average_attn_weights = false;
    if (!CHECK(mha_plan_forward(tc->layer, &in, NULL, &plan, &err) == MHA_OK, "plan %s: %s",
               tc->desc, err.message))
        return false;
    float *out = malloc((size_t)plan.out_count * sizeof(float));
    float *out_nw = malloc((size_t)plan.out_count * sizeof(float));
    float *full = malloc((size_t)plan.weights_count * sizeof(float));
    int64_t tn, shape[4];
    mha_trace_stage_shape(&plan, MHA_TRACE_SCORES, shape, &tn);
    mha_trace tr;
    memset(&tr, 0, sizeof tr);
    tr.stage[MHA_TRACE_SCORES] = malloc((size_t)tn * sizeof(float));
    mha_forward(tc->layer, &in, &plan, out, full, &tr, NULL, &err);
    in.average_attn_weights = true;
    mha_plan_forward(tc->layer, &in, NULL, &plan_avg, &err);
    float *favg = malloc((size_t)plan_avg.weights_count * sizeof(float));
    mha_forward(tc->layer, &in, &plan_avg, out, favg, NULL, NULL, &err);
    in.need_weights = false;
    mha_plan_forward(tc->layer, &in, NULL, &plan_nw, &err);
    mha_forward(tc->layer, &in, &plan_nw, out_nw, NULL, NULL, NULL, &err);
    bool ok = true;
    for (int t = 0; t < nsel && ok; t++) {
        selection s;
        if (fixed)
            s = *fixed;
        else
            rnd_selection(&s, plan.H, plan.L, plan.S);
        ok = run_selection(tc, &s, NULL, full, favg, tr.stage[MHA_TRACE_SCORES], out_nw) &&
             run_selection(tc, &s, pool2, full, favg, tr.stage[MHA_TRACE_SCORES], out_nw);
    }
    free(out);
    free(out_nw);
    free(full);
    free(favg);
    free(tr.stage[MHA_TRACE_SCORES]);
    return ok;
}

/* ---------------------------------------------------------------------------------------------- */
/* The plan's rules                                                                               */

static void expect_refused(const mha_layer *layer, mha_inputs in, const mha_select *sel,
                           const char *field, const char *starts, const char *what)
{
    mha_plan plan;
    mha_error err = {0};
    in.select = sel;
    mha_status st = mha_plan_forward(layer, &in, NULL, &plan, &err);
    CHECK(st == MHA_ERR_VALUE && !strcmp(err.field, field) &&
              !strncmp(err.message, starts, strlen(starts)),
          "%s: refused as %s naming %s (got status %d, field %s: %s)", what, field, starts, st,
          err.field, err.message);
}

static void test_rules(void)
{
    mha_config cfg;
    mha_config_init(&cfg, 8, 4);
    cfg.add_zero_attn = true; /* S = S0 + 1 */
    mha_error err;
    mha_layer *layer = mha_layer_create(&cfg, NULL, &err);
    float q[2 * 5 * 8] = {0};
    mha_inputs in;
    memset(&in, 0, sizeof in);
    set_tensor(&in.query, q, true, true, 2, 5, 8); /* N=2, L=5, S0=5, S=6 */
    in.need_weights = true;
    int64_t bad_head[] = {0, 4}, twice[] = {1, 2, 1}, neg[] = {-1};
    mha_select s;
    memset(&s, 0, sizeof s);
    s.nheads = 2;
    s.heads = bad_head;
    expect_refused(layer, in, &s, "select.heads", "heads[1] is 4", "a head past H");
    s.nheads = 1;
    s.heads = neg;
    expect_refused(layer, in, &s, "select.heads", "heads[0] is -1", "a negative head");
    s.nheads = 3;
    s.heads = twice;
    expect_refused(layer, in, &s, "select.heads", "heads[2] is 1", "a head given twice");
    memset(&s, 0, sizeof s);
    s.has_queries = true;
    s.queries[0] = 2;
    s.queries[1] = 2;
    expect_refused(layer, in, &s, "select.queries", "queries [2, 2) is empty", "empty rows");
    s.queries[1] = 6;
    expect_refused(layer, in, &s, "select.queries", "queries [2, 6) is outside", "rows past L");
    s.queries[0] = -1;
    s.queries[1] = 3;
    expect_refused(layer, in, &s, "select.queries", "queries [-1, 3)", "a negative row");
    memset(&s, 0, sizeof s);
    s.has_keys = true;
    s.keys[0] = 0;
    s.keys[1] = 7;
    expect_refused(layer, in, &s, "select.keys", "keys [0, 7) is outside", "keys past S");
    s.keys[1] = 6; /* the zero key counts: accepted */
    mha_plan plan;
    in.select = &s;
    CHECK(mha_plan_forward(layer, &in, NULL, &plan, &err) == MHA_OK &&
              plan.weights_count == 2 * 4 * 5 * 6,
          "keys [0, 6) with the appended zero key is taken: %s", err.message);
    s.keys[0] = 4;
    s.keys[1] = 3;
    expect_refused(layer, in, &s, "select.keys", "keys [4, 3) is empty", "a reversed range");
    memset(&s, 0, sizeof s);
    s.has_top_k = true;
    s.top_k = 0;
    expect_refused(layer, in, &s, "select.top_k", "top_k is 0", "k = 0");
    s.top_k = -3;
    expect_refused(layer, in, &s, "select.top_k", "top_k is -3", "k < 0");
    s.top_k = 2;
    s.has_pool = true;
    s.pool[0] = s.pool[1] = 2;
    expect_refused(layer, in, &s, "select.pool", "pool cannot go with top_k", "top_k and pool");
    s.has_top_k = false;
    s.pool[1] = 0;
    expect_refused(layer, in, &s, "select.pool", "pool [2, 0]", "a pool size of 0");
    s.pool[1] = 2;
    s.pool_op = (mha_pool_op)7;
    expect_refused(layer, in, &s, "select.pool_op", "pool_op", "an unknown pool_op");

    /* shapes: per head, averaged, unbatched; top-k past S' gives S' */
    memset(&s, 0, sizeof s);
    int64_t two[] = {3, 1};
    s.nheads = 2;
    s.heads = two;
    s.has_top_k = true;
    s.top_k = 100;
    in.average_attn_weights = false;
    CHECK(mha_plan_forward(layer, &in, NULL, &plan, &err) == MHA_OK && plan.weights_ndim == 4 &&
              plan.weights_shape[1] == 2 && plan.weights_shape[3] == 6 && plan.top_k == 6,
          "top_k 100 of 6 keys gives 6, per head [2,2,5,6]");
    s.has_top_k = false;
    s.has_pool = true;
    s.pool[0] = 2;
    s.pool[1] = 4;
    in.average_attn_weights = true;
    CHECK(mha_plan_forward(layer, &in, NULL, &plan, &err) == MHA_OK && plan.weights_ndim == 3 &&
              plan.weights_shape[0] == 2 && plan.weights_shape[1] == 3 &&
              plan.weights_shape[2] == 2,
          "pool 2x4 of 5x6, averaged: [2,3,2]");
    set_tensor(&in.query, q, false, true, 1, 5, 8);
    CHECK(mha_plan_forward(layer, &in, NULL, &plan, &err) == MHA_OK && plan.weights_ndim == 2 &&
              plan.weights_shape[0] == 3 && plan.weights_shape[1] == 2,
          "unbatched, averaged: [3,2]");
    mha_layer_free(layer);
}

int main(void)
{
    mha_error err;
    mha_pool *pool2 = mha_pool_create(2, &err);
    mha_blas_set_threads(1);
    test_rules();
    int failed = 0;
    for (int n = 0; n < 150 && failed < 3; n++) {
        tcase tc;
        make_case(&tc, false);
        if (!run_case(&tc, pool2, 4, NULL))
            failed++;
        free_case(&tc);
    }
    for (int n = 0; n < 12 && failed < 3; n++) {
        tcase tc;
        make_case(&tc, true);
        if (!run_case(&tc, pool2, 5, NULL))
            failed++;
        free_case(&tc);
    }
    /* a selected map of MHA_STREAM_MAP_BYTES or more, written with non-temporal stores (the
     * random cases' maps are mostly smaller, written with ordinary stores): the first big case
     * whose map of every head is that large, with that selection, per head and averaged */
    bool big_map = false;
    for (int tries = 0; tries < 100 && !big_map && failed < 3; tries++) {
        tcase tc;
        make_case(&tc, true);
        mha_inputs in = tc.in;
        in.need_weights = true;
        in.average_attn_weights = false;
        mha_plan plan;
        if (mha_plan_forward(tc.layer, &in, NULL, &plan, NULL) == MHA_OK &&
            (double)plan.weights_count * sizeof(float) >= MHA_STREAM_MAP_BYTES) {
            for (int average = 0; average < 2; average++) {
                selection every = {.average = average};
                snprintf(every.desc, sizeof every.desc, "every head's map (%lld floats), avg=%d",
                         (long long)plan.weights_count, average);
                if (!run_case(&tc, pool2, 1, &every))
                    failed++;
            }
            big_map = true;
        }
        free_case(&tc);
    }
    CHECK(big_map, "a big case with a map of MHA_STREAM_MAP_BYTES or more was made");
    /* rows that attend two or three keys: a top-k of more holds weights that underflow, which the
     * streamed top-k cannot make exact, so the head runs again keeping its slab (in a grouped task
     * too: test_grouped.sh) */
    for (int n = 0; n < 4 && failed < 3; n++) {
        tcase tc;
        make_case(&tc, true);
        faint_rows(&tc);
        if (!run_case(&tc, pool2, 6, NULL))
            failed++;
        free_case(&tc);
    }
    mha_pool_free(pool2);
    return check_report();
}
