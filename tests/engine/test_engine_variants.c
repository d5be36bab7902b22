/*
 * test_engine_variants.c - the engine's extensions beyond torch (head_dim, num_kv_heads, RoPE,
 * ALiBi, window, positions) against the naive reference (tests/support/mha_ref.c) on random shapes
 * crossing every option, on both attention paths (the AVX-512 kernels and cblas: ATTND_ISA=generic
 * forces the latter), plus properties that need no reference: a GQA layer equals the MHA layer with
 * its kv weights repeated, a window equals its mask written out, ALiBi equals its bias given as a
 * float mask, a decode step equals the last row of the full pass, a traced pass gives the output
 * of the untraced one bit for bit; config and input errors name
 * their field; parameter shapes, init, FLOPs and trace shapes follow the new sizes.
 */
#include "check.h"
#include "mha.h"
#include "mha_internal.h"
#include "mha_ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------- */
/* Deterministic random numbers                                                                   */

static uint64_t rng_state = 0x9E3779B97F4A7C15u;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static int rnd_int(int lo, int hi) /* inclusive */
{
    return lo + (int)(rnd() % (uint64_t)(hi - lo + 1));
}

static float rnd_float(void) /* uniform in [-1, 1) */
{
    return (float)((double)(rnd() >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

static float *rnd_array(int64_t n)
{
    float *x = malloc((size_t)(n ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        x[i] = rnd_float();
    return x;
}

static float *nan_array(int64_t n)
{
    float *x = malloc((size_t)(n ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        x[i] = NAN; /* anything not written shows up as a mismatch */
    return x;
}

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

/* Sets the ISA cap (NULL: none) for the passes planned from now on. */
static void set_isa(const char *isa)
{
    if (isa)
        setenv("ATTND_ISA", isa, 1);
    else
        unsetenv("ATTND_ISA");
}

/* ---------------------------------------------------------------------------------------------- */
/* A case: layer, inputs and what they own                                                        */

typedef struct tcase {
    mha_layer *layer;
    mha_inputs in;
    float *q, *k, *v;
    void *kpm, *am;
    int64_t *pos, *kpos;
    char desc[400];
} tcase;

static void free_case(tcase *tc)
{
    mha_layer_free(tc->layer);
    free(tc->q);
    free(tc->k);
    free(tc->v);
    free(tc->kpm);
    free(tc->am);
    free(tc->pos);
    free(tc->kpos);
    memset(tc, 0, sizeof *tc);
}

/* torch's init (xavier etc. on the new shapes), then random biases, bias_k and bias_v (init
 * leaves the biases zero): values of torch's magnitudes, so float32 round-off stays as in use. */
static mha_layer *random_layer(const mha_config *cfg)
{
    mha_error err = {0};
    mha_layer *layer = mha_layer_create(cfg, NULL, &err);
    if (!CHECK(layer, "layer create: %s (%s)", err.message, err.field))
        return NULL;
    mha_layer_init(layer, "xavier_uniform", rnd(), &err);
    for (int i = 0; i < mha_layer_param_count(layer); i++) {
        const mha_param_info *p = mha_layer_param_info(layer, i);
        if (p->ndim == 1 || p->ndim == 3) {
            float *x = rnd_array(p->count);
            mha_layer_set_param(layer, p->name, x, p->ndim, p->shape, &err);
            free(x);
        }
    }
    return layer;
}

static void *rnd_mask(mha_mask *m, int ndim, const int64_t *shape, bool as_bool, int density_pct)
{
    int64_t n = 1;
    m->ndim = ndim;
    for (int d = 0; d < ndim; d++) {
        m->shape[d] = shape[d];
        n *= shape[d];
    }
    m->type = as_bool ? MHA_MASK_BOOL : MHA_MASK_FLOAT;
    void *data;
    if (as_bool) {
        uint8_t *x = malloc((size_t)n);
        for (int64_t i = 0; i < n; i++)
            x[i] = rnd_int(0, 99) < density_pct;
        data = x;
    } else {
        float *x = malloc((size_t)n * sizeof(float));
        for (int64_t i = 0; i < n; i++)
            x[i] = rnd_int(0, 99) < density_pct ? -INFINITY : 2.0f * rnd_float();
        data = x;
    }
    m->data = data;
    return data;
}

/* Positions for rows of length len (per batch when per_batch): sorted from a random start with
 * random gaps, or shuffled (mode 2). */
static int64_t *rnd_positions(mha_positions *p, int64_t N, int64_t len, bool per_batch, int mode)
{
    const int64_t rows = per_batch ? N : 1;
    int64_t *x = malloc((size_t)(rows * len) * sizeof(int64_t));
    for (int64_t b = 0; b < rows; b++) {
        int64_t at = rnd_int(0, 20);
        for (int64_t i = 0; i < len; i++) {
            x[b * len + i] = at;
            at += rnd_int(0, 3) ? 1 : rnd_int(0, 4);
        }
        for (int64_t i = len - 1; mode == 2 && i > 0; i--) {
            int64_t j = rnd_int(0, (int)i), t = x[b * len + i];
            x[b * len + i] = x[b * len + j];
            x[b * len + j] = t;
        }
    }
    p->data = x;
    p->ndim = per_batch ? 2 : 1;
    p->shape[0] = per_batch ? N : len;
    p->shape[1] = per_batch ? len : 0;
    return x;
}

/* A random config crossing every field: head sizes below, at and off the kernels' multiples of 16. */
static void random_config(mha_config *cfg, bool big_heads)
{
    static const int64_t hds[] = {1, 2, 4, 6, 8, 10, 16, 24, 32, 48, 64, 20};
    const int64_t H = rnd_int(1, 3) * (rnd_int(0, 1) ? 2 : 1);
    int64_t hd = hds[rnd_int(0, 11)];
    if (big_heads)
        hd = rnd_int(0, 1) ? 16 * rnd_int(1, 4) : 2 * rnd_int(3, 20);
    const int64_t E = rnd_int(0, 2) == 0 ? H * hd : rnd_int(1, 40);
    mha_config_init(cfg, E, H);
    if (E != H * hd || rnd_int(0, 1))
        cfg->head_dim = hd;
    int64_t divisors[6], nd = 0;
    for (int64_t d = 1; d <= H; d++)
        if (H % d == 0)
            divisors[nd++] = d;
    if (rnd_int(0, 2))
        cfg->num_kv_heads = divisors[rnd_int(0, (int)nd - 1)];
    if (rnd_int(0, 3) == 0)
        cfg->kdim = rnd_int(1, 9);
    if (rnd_int(0, 3) == 0)
        cfg->vdim = rnd_int(1, 9);
    cfg->bias = rnd_int(0, 3) != 0;
    cfg->add_bias_kv = rnd_int(0, 3) == 0;
    cfg->add_zero_attn = rnd_int(0, 3) == 0;
    cfg->batch_first = rnd_int(0, 1);
    if (hd % 2 == 0 && rnd_int(0, 1)) {
        cfg->rope = true;
        cfg->rope_theta = rnd_int(0, 1) ? 10000.0 : 500000.0 * rnd_float() + 500001.0;
    }
    cfg->alibi = rnd_int(0, 2) == 0;
    cfg->window = rnd_int(0, 2) == 0 ? rnd_int(1, 6) : 0;
}

/* Builds a random case; density_pct drives how often mask entries are set. */
static void make_case(tcase *tc, bool big_heads, int density_pct)
{
    memset(tc, 0, sizeof *tc);
    mha_config cfg;
    random_config(&cfg, big_heads);
    tc->layer = random_layer(&cfg);
    const mha_config *c = mha_layer_config(tc->layer);
    const int64_t E = c->embed_dim;
    const bool batched = rnd_int(0, 4) != 0, bf = c->batch_first;
    const int64_t N = batched ? rnd_int(1, 3) : 1, L = rnd_int(1, 9);
    int64_t S0 = rnd_int(0, 3) ? rnd_int(1, 9) : L;
    int kv = c->kdim == E && c->vdim == E ? rnd_int(0, 2) : 2; /* 0 self, 1 value = key, 2 both */
    if (kv == 0)
        S0 = L;
    tc->q = rnd_array(N * L * E);
    set_tensor(&tc->in.query, tc->q, batched, bf, N, L, E);
    if (kv >= 1) {
        tc->k = rnd_array(N * S0 * c->kdim);
        set_tensor(&tc->in.key, tc->k, batched, bf, N, S0, c->kdim);
    }
    if (kv == 2) {
        tc->v = rnd_array(N * S0 * c->vdim);
        set_tensor(&tc->in.value, tc->v, batched, bf, N, S0, c->vdim);
    }
    const int km = rnd_int(0, 3) ? 0 : rnd_int(1, 2);
    if (km) {
        int64_t shape[2] = {N, S0};
        tc->kpm = rnd_mask(&tc->in.key_padding_mask, batched ? 2 : 1, batched ? shape : shape + 1,
                           km == 1, density_pct);
    }
    const int am = rnd_int(0, 3) ? 0 : rnd_int(1, 4);
    if (am) {
        int64_t shape[3] = {N * c->num_heads, L, S0};
        tc->am = rnd_mask(&tc->in.attn_mask, am <= 2 ? 2 : 3, am <= 2 ? shape + 1 : shape, am % 2,
                          density_pct);
    }
    const int pm = rnd_int(0, 3), kpmode = rnd_int(0, 3); /* 0: absent; 1, 3: sorted; 2: shuffled */
    if (pm)
        tc->pos = rnd_positions(&tc->in.positions, N, L, batched && rnd_int(0, 1), pm);
    if (kpmode)
        tc->kpos = rnd_positions(&tc->in.key_positions, N, S0, batched && rnd_int(0, 1), kpmode);
    tc->in.is_causal = rnd_int(0, 1);
    tc->in.need_weights = rnd_int(0, 2) != 0;
    tc->in.average_attn_weights = rnd_int(0, 1);
    snprintf(tc->desc, sizeof tc->desc,
             "E=%lld H=%lld hd=%lld Hkv=%lld kdim=%lld vdim=%lld bias=%d bias_kv=%d zero_attn=%d "
             "rope=%g alibi=%d window=%lld bf=%d batched=%d N=%lld L=%lld S0=%lld kv=%d kpm=%d "
             "am=%d pos=%d kpos=%d causal=%d nw=%d avg=%d",
             (long long)E, (long long)c->num_heads, (long long)c->head_dim,
             (long long)c->num_kv_heads, (long long)c->kdim, (long long)c->vdim, c->bias,
             c->add_bias_kv, c->add_zero_attn, c->rope ? c->rope_theta : 0.0, c->alibi,
             (long long)c->window, bf, batched, (long long)N, (long long)L, (long long)S0, kv, km,
             am, pm, kpmode, tc->in.is_causal, tc->in.need_weights, tc->in.average_attn_weights);
}

/* Runs the case through the engine (trace too when with_trace) and the reference; compares. */
static bool run_case(const tcase *tc, mha_pool *pool, bool with_trace, const char *isa)
{
    set_isa(isa);
    mha_plan plan;
    mha_error err = {0};
    mha_status st = mha_plan_forward(tc->layer, &tc->in, NULL, &plan, &err);
    set_isa(NULL);
    if (!CHECK(st == MHA_OK, "plan failed (%s: %s) for %s", err.field, err.message, tc->desc))
        return false;
    float *out = nan_array(plan.out_count), *ref_out = nan_array(plan.out_count);
    float *w = tc->in.need_weights ? nan_array(plan.weights_count) : NULL;
    float *ref_w = tc->in.need_weights ? nan_array(plan.weights_count) : NULL;
    mha_trace tr = {{0}, {0}};
    float *ref_tr[MHA_TRACE_NSTAGES] = {0};
    int64_t counts[MHA_TRACE_NSTAGES];
    for (int s = 0; with_trace && s < MHA_TRACE_NSTAGES; s++) {
        int64_t shape[4];
        mha_trace_stage_shape(&plan, (mha_trace_stage)s, shape, &counts[s]);
        tr.stage[s] = nan_array(counts[s]);
        ref_tr[s] = nan_array(counts[s]);
    }
    st = mha_forward(tc->layer, &tc->in, &plan, out, w, with_trace ? &tr : NULL, pool, &err);
    bool ok = CHECK(st == MHA_OK, "forward failed (%s) for %s", err.message, tc->desc);
    ref_mha_forward(tc->layer, &tc->in, ref_out, ref_w, with_trace ? ref_tr : NULL);
    char what[600];
    snprintf(what, sizeof what, "output (%s) of %s", isa ? isa : "best", tc->desc);
    ok &= check_close_array(__FILE__, __LINE__, what, out, ref_out, plan.out_count, NULL);
    if (w) {
        snprintf(what, sizeof what, "attn_weights (%s) of %s", isa ? isa : "best", tc->desc);
        ok &= check_close_array(__FILE__, __LINE__, what, w, ref_w, plan.weights_count, NULL);
    }
    for (int s = 0; with_trace && s < MHA_TRACE_NSTAGES; s++) {
        snprintf(what, sizeof what, "trace %s of %s", mha_trace_stage_name((mha_trace_stage)s),
                 tc->desc);
        ok &= check_close_array(__FILE__, __LINE__, what, tr.stage[s], ref_tr[s], counts[s], NULL);
        free(tr.stage[s]);
        free(ref_tr[s]);
    }
    free(out);
    free(ref_out);
    free(w);
    free(ref_w);
    return ok;
}

static void test_random_cases(mha_pool *pool2)
{
    int failed = 0;
    for (int n = 0; n < 500 && failed < 5; n++) {
        tcase tc;
        make_case(&tc, n % 3 == 2, n % 4 == 0 ? 50 : 10);
        if (tc.layer) {
            mha_pool *pool = n % 2 ? pool2 : NULL;
            failed += !run_case(&tc, pool, n % 4 == 1, NULL);
            failed += !run_case(&tc, pool, n % 8 == 3, "generic");
        }
        free_case(&tc);
    }
}

/* Past one row block (128 rows) and one key chunk: the window and causal skipping, GQA with
 * the keys packed once per kv head, both paths, with and without weights. */
static void test_larger_cases(mha_pool *pool2)
{
    const int shapes[][7] = {/* E, H, hd, Hkv, N, L, S0 */
                             {64, 4, 16, 2, 1, 300, 300},  {96, 8, 32, 2, 2, 150, 150},
                             {128, 4, 64, 1, 1, 200, 270}, {48, 6, 24, 3, 1, 260, 260},
                             {72, 3, 128, 1, 1, 140, 140}, {40, 4, 10, 4, 2, 131, 131}};
    for (int s = 0; s < 6; s++) {
        for (int variant = 0; variant < 6; variant++) {
            tcase tc;
            memset(&tc, 0, sizeof tc);
            mha_config cfg;
            mha_config_init(&cfg, shapes[s][0], shapes[s][1]);
            cfg.head_dim = shapes[s][2];
            cfg.num_kv_heads = shapes[s][3];
            cfg.batch_first = variant % 2;
            cfg.rope = variant != 1;
            cfg.rope_theta = 10000.0;
            cfg.alibi = variant == 1 || variant == 4;
            cfg.window = variant >= 2 ? 1 + 37 * variant : 0;
            cfg.add_bias_kv = variant == 3;
            cfg.add_zero_attn = variant == 5;
            tc.layer = random_layer(&cfg);
            const int64_t E = shapes[s][0], N = shapes[s][4], L = shapes[s][5], S0 = shapes[s][6];
            tc.q = rnd_array(N * L * E);
            set_tensor(&tc.in.query, tc.q, true, cfg.batch_first, N, L, E);
            if (L != S0 || variant == 5) {
                tc.k = rnd_array(N * S0 * E);
                set_tensor(&tc.in.key, tc.k, true, cfg.batch_first, N, S0, E);
            }
            if (variant == 4) /* positions from 1000 on, sorted with gaps */
                tc.pos = rnd_positions(&tc.in.positions, N, L, false, 1);
            tc.in.is_causal = variant != 3;
            tc.in.need_weights = variant >= 2;
            tc.in.average_attn_weights = variant == 2 || variant == 5;
            snprintf(tc.desc, sizeof tc.desc,
                     "larger E=%d H=%d hd=%d Hkv=%d N=%lld L=%lld S0=%lld variant %d", shapes[s][0],
                     shapes[s][1], shapes[s][2], shapes[s][3], (long long)N, (long long)L,
                     (long long)S0, variant);
            run_case(&tc, pool2, variant == 2 && s < 3, NULL);
            run_case(&tc, NULL, false, "generic");
            free_case(&tc);
        }
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* Properties that need no reference                                                              */

static float max_abs_diff(const float *a, const float *b, int64_t n)
{
    float m = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]);
        m = d > m || d != d ? d : m;
    }
    return m;
}

/* Output (and per-head weights when w) of layer on in; plan by the caller's ISA cap. */
static float *forward_of(const mha_layer *layer, const mha_inputs *in, float **w, mha_plan *plan)
{
    mha_error err = {0};
    if (!CHECK(mha_plan_forward(layer, in, NULL, plan, &err) == MHA_OK, "plan: %s (%s)",
               err.message, err.field))
        return NULL;
    float *out = nan_array(plan->out_count);
    if (w)
        *w = in->need_weights ? nan_array(plan->weights_count) : NULL;
    CHECK(mha_forward(layer, in, plan, out, w ? *w : NULL, NULL, NULL, &err) == MHA_OK,
          "forward: %s", err.message);
    return out;
}

/* A traced pass gives the output of the same pass without a trace, bit for bit. Without a trace
 * the in-projection rotates q and k (RoPE: head_dim up to 64 by 64-column blocks, 128 and 256 by a
 * task's 256 columns) and packs the keys and values as it makes them, writing no k or v rows; with
 * one it writes them, and RoPE's rotation runs as a phase of its own: the same operations on the
 * same numbers. Shapes whose rows cross batches and key blocks within one 64-row task, both
 * layouts (sequence first with more batches than a task has rows), GQA, cross-attention, head_dim
 * 8 to 128, on the pool and on the calling thread, on the best kernels, AVX2 and generic (each
 * capped by ATTND_ISA: a CPU without one runs the next lower). */
static void test_trace_keeps_output(mha_pool *pool2)
{
    const int shapes[][8] = {/* E, H, hd, Hkv, N, L, S0, rope */
                             {128, 2, 64, 2, 2, 150, 150, 0}, {96, 4, 32, 2, 3, 70, 70, 1},
                             {64, 4, 16, 4, 2, 45, 301, 1},   {128, 4, 64, 1, 1, 300, 300, 1},
                             {256, 2, 128, 1, 2, 90, 90, 1},  {40, 4, 10, 2, 3, 33, 77, 1},
                             {16, 2, 8, 1, 70, 3, 3, 1}}; /* more batches than a task's rows */
    for (int s = 0; s < 7; s++)
        for (int bf = 0; bf < 2; bf++) {
            mha_config cfg;
            mha_config_init(&cfg, shapes[s][0], shapes[s][1]);
            cfg.head_dim = shapes[s][2];
            cfg.num_kv_heads = shapes[s][3];
            cfg.batch_first = bf;
            cfg.rope = shapes[s][7];
            cfg.rope_theta = 10000.0;
            mha_layer *layer = random_layer(&cfg);
            const int64_t E = shapes[s][0], N = shapes[s][4], L = shapes[s][5], S0 = shapes[s][6];
            float *q = rnd_array(N * L * E), *k = rnd_array(N * S0 * E);
            mha_inputs in = {0};
            set_tensor(&in.query, q, true, bf, N, L, E);
            if (L != S0)
                set_tensor(&in.key, k, true, bf, N, S0, E);
            in.is_causal = L == S0;
            static const char *const isas[] = {NULL, "avx2", "generic"}; /* NULL: the best */
            for (int ii = 0; ii < 3; ii++) {
                set_isa(isas[ii]);
                mha_plan plan;
                mha_error err = {0};
                if (!CHECK(mha_plan_forward(layer, &in, NULL, &plan, &err) == MHA_OK, "plan: %s",
                           err.message)) {
                    set_isa(NULL);
                    continue;
                }
                float *out[2] = {nan_array(plan.out_count), nan_array(plan.out_count)};
                mha_trace tr = {{0}, {0}};
                for (int t = 0; t < MHA_TRACE_NSTAGES; t++) {
                    int64_t shape[4], count;
                    mha_trace_stage_shape(&plan, (mha_trace_stage)t, shape, &count);
                    tr.stage[t] = nan_array(count);
                }
                for (int p = 0; p < 2; p++) {
                    mha_pool *pool = p ? pool2 : NULL;
                    bool ok =
                        mha_forward(layer, &in, &plan, out[0], NULL, NULL, pool, &err) == MHA_OK;
                    ok = ok &&
                         mha_forward(layer, &in, &plan, out[1], NULL, &tr, pool, &err) == MHA_OK;
                    CHECK(ok && !memcmp(out[0], out[1], (size_t)plan.out_count * sizeof(float)),
                          "a traced pass gives the same output bits as without a trace (E=%d H=%d "
                          "hd=%d Hkv=%d N=%d L=%d S0=%d rope=%d bf=%d, %s, %s): %s",
                          shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], shapes[s][4],
                          shapes[s][5], shapes[s][6], shapes[s][7], bf,
                          isas[ii] ? isas[ii] : "best", p ? "pool of 2" : "no pool",
                          ok ? "differs" : err.message);
                }
                for (int t = 0; t < MHA_TRACE_NSTAGES; t++)
                    free(tr.stage[t]);
                free(out[0]);
                free(out[1]);
                set_isa(NULL);
            }
            free(q);
            free(k);
            mha_layer_free(layer);
        }
}

/* A GQA layer equals the MHA layer whose k/v weights hold each kv head once per query head. */
static void test_gqa_equals_repeated_mha(void)
{
    const int64_t E = 40, H = 6, hd = 16, Hkv = 2, L = 37, grp = H / Hkv;
    for (int packed = 0; packed < 2; packed++) {
        mha_config cg, cm;
        mha_config_init(&cg, E, H);
        cg.head_dim = hd;
        cg.num_kv_heads = Hkv;
        cg.add_bias_kv = true;
        cg.rope = true;
        cg.rope_theta = 10000.0;
        cg.kdim = packed ? 0 : 12;
        cm = cg;
        cm.num_kv_heads = 0;
        mha_layer *g = random_layer(&cg), *m = mha_layer_create(&cm, NULL, NULL);
        const int64_t Kd = packed ? E : 12;
        /* q rows as they are; kv head j's rows copied to query heads j·grp .. (j+1)·grp-1 */
        const float *wg = mha_layer_param_data(g, 0);
        float *wq = malloc(sizeof(float) * (size_t)(H * hd * E));
        float *wk = malloc(sizeof(float) * (size_t)(H * hd * Kd));
        float *wv = malloc(sizeof(float) * (size_t)(H * hd * E));
        float *bi = malloc(sizeof(float) * (size_t)(3 * H * hd));
        float *bk = malloc(sizeof(float) * (size_t)(H * hd)), *bvv = malloc(sizeof(float) * (size_t)(H * hd));
        const float *gq = wg, *gk, *gv;
        if (packed) {
            gk = wg + H * hd * E;
            gv = gk + Hkv * hd * E;
        } else {
            gk = mha_layer_param_data(g, 1);
            gv = mha_layer_param_data(g, 2);
        }
        const float *gb = mha_layer_param_data(g, mha_layer_param_find(g, "in_proj_bias"));
        const float *gbk = mha_layer_param_data(g, mha_layer_param_find(g, "bias_k"));
        const float *gbv = mha_layer_param_data(g, mha_layer_param_find(g, "bias_v"));
        memcpy(wq, gq, sizeof(float) * (size_t)(H * hd * E));
        memcpy(bi, gb, sizeof(float) * (size_t)(H * hd));
        for (int64_t h = 0; h < H; h++) {
            const int64_t j = h / grp;
            memcpy(wk + h * hd * Kd, gk + j * hd * Kd, sizeof(float) * (size_t)(hd * Kd));
            memcpy(wv + h * hd * E, gv + j * hd * E, sizeof(float) * (size_t)(hd * E));
            memcpy(bi + H * hd + h * hd, gb + H * hd + j * hd, sizeof(float) * (size_t)hd);
            memcpy(bi + 2 * H * hd + h * hd, gb + (H + Hkv) * hd + j * hd, sizeof(float) * (size_t)hd);
            memcpy(bk + h * hd, gbk + j * hd, sizeof(float) * (size_t)hd);
            memcpy(bvv + h * hd, gbv + j * hd, sizeof(float) * (size_t)hd);
        }
        mha_error err = {0};
        bool ok = true;
        if (packed) {
            float *win = malloc(sizeof(float) * (size_t)(3 * H * hd * E));
            memcpy(win, wq, sizeof(float) * (size_t)(H * hd * E));
            memcpy(win + H * hd * E, wk, sizeof(float) * (size_t)(H * hd * E));
            memcpy(win + 2 * H * hd * E, wv, sizeof(float) * (size_t)(H * hd * E));
            ok &= mha_layer_set_param(m, "in_proj_weight", win, 2, (int64_t[]){3 * H * hd, E}, &err) == MHA_OK;
            free(win);
        } else {
            ok &= mha_layer_set_param(m, "q_proj_weight", wq, 2, (int64_t[]){H * hd, E}, &err) == MHA_OK;
            ok &= mha_layer_set_param(m, "k_proj_weight", wk, 2, (int64_t[]){H * hd, Kd}, &err) == MHA_OK;
            ok &= mha_layer_set_param(m, "v_proj_weight", wv, 2, (int64_t[]){H * hd, E}, &err) == MHA_OK;
        }
        ok &= mha_layer_set_param(m, "in_proj_bias", bi, 1, (int64_t[]){3 * H * hd}, &err) == MHA_OK;
        ok &= mha_layer_set_param(m, "bias_k", bk, 3, (int64_t[]){1, 1, H * hd}, &err) == MHA_OK;
        ok &= mha_layer_set_param(m, "bias_v", bvv, 3, (int64_t[]){1, 1, H * hd}, &err) == MHA_OK;
        const int oi = mha_layer_param_find(g, "out_proj.weight"), bo = oi + 1;
        ok &= mha_layer_set_param(m, "out_proj.weight", mha_layer_param_data(g, oi), 2,
                                  (int64_t[]){E, H * hd}, &err) == MHA_OK;
        ok &= mha_layer_set_param(m, "out_proj.bias", mha_layer_param_data(g, bo), 1,
                                  (int64_t[]){E}, &err) == MHA_OK;
        CHECK(ok, "repeated MHA weights set (%s)", err.message);
        float *x = rnd_array(L * E), *key = packed ? NULL : rnd_array(L * Kd);
        for (int isa = 0; isa < 2; isa++) {
            set_isa(isa ? "generic" : NULL);
            mha_inputs in = {0};
            set_tensor(&in.query, x, false, true, 1, L, E);
            if (key)
                set_tensor(&in.key, key, false, true, 1, L, Kd);
            if (key)
                set_tensor(&in.value, x, false, true, 1, L, E);
            in.is_causal = true;
            in.need_weights = true;
            in.average_attn_weights = false;
            mha_plan pg, pm;
            float *wgt, *wm;
            float *og = forward_of(g, &in, &wgt, &pg), *om = forward_of(m, &in, &wm, &pm);
            if (og && om) {
                CHECK(max_abs_diff(og, om, pg.out_count) < 1e-5f,
                      "GQA output = MHA with repeated kv heads (packed=%d, %s): %g", packed,
                      isa ? "generic" : "best", max_abs_diff(og, om, pg.out_count));
                CHECK(max_abs_diff(wgt, wm, pg.weights_count) < 1e-6f,
                      "GQA weights = MHA with repeated kv heads (packed=%d)", packed);
            }
            free(og);
            free(om);
            free(wgt);
            free(wm);
        }
        set_isa(NULL);
        free(x);
        free(key);
        free(wq);
        free(wk);
        free(wv);
        free(bi);
        free(bk);
        free(bvv);
        mha_layer_free(g);
        mha_layer_free(m);
    }
}

/* window (causal or not) = the plain layer with the same rule as a bool attn_mask; ALiBi = the
 * plain layer with its bias as a float attn_mask [H,L,S]. Positions given out of order. */
static void test_window_and_alibi_as_masks(void)
{
    const int64_t E = 64, H = 4, L = 150, W = 23;
    for (int rule = 0; rule < 4; rule++) { /* 0 window+causal, 1 window, 2 alibi, 3 alibi+window */
        mha_config cv;
        mha_config_init(&cv, E, H);
        cv.window = rule != 2 ? W : 0;
        cv.alibi = rule >= 2;
        mha_layer *lv = random_layer(&cv);
        mha_config cp = cv;
        cp.window = 0;
        cp.alibi = false;
        mha_layer *lp = mha_layer_create(&cp, NULL, NULL);
        for (int i = 0; i < mha_layer_param_count(lv); i++) {
            const mha_param_info *p = mha_layer_param_info(lv, i);
            mha_layer_set_param(lp, p->name, mha_layer_param_data(lv, i), p->ndim, p->shape, NULL);
        }
        float *x = rnd_array(L * E);
        int64_t pos[150];
        for (int64_t i = 0; i < L; i++)
            pos[i] = 3 * i + (i % 7 == 3 ? 1 : 0) + 100;
        if (rule == 1)
            for (int64_t i = 0; i < L; i += 2) { /* out of order */
                int64_t t = pos[i];
                pos[i] = pos[L - 1 - i];
                pos[L - 1 - i] = t;
            }
        float *am = malloc(sizeof(float) * (size_t)(H * L * L));
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < L; i++)
                for (int64_t j = 0; j < L; j++) {
                    const int64_t d = pos[i] - pos[j];
                    bool ok = true;
                    if (cv.window)
                        ok = d < W && -d < W && (rule == 1 || d >= 0);
                    if (rule == 2)
                        ok = d >= 0;
                    /* the engine's order: scores + ALiBi, then + the mask */
                    am[(h * L + i) * L + j] = !ok ? -INFINITY
                                              : cv.alibi ? mha_alibi_slope(h, H) * (float)(-d)
                                                         : 0.0f;
                }
        for (int isa = 0; isa < 2; isa++) {
            set_isa(isa ? "generic" : NULL);
            mha_inputs in = {0};
            set_tensor(&in.query, x, false, true, 1, L, E);
            in.positions = (mha_positions){pos, 1, {L}};
            in.is_causal = rule != 1;
            in.need_weights = true;
            in.average_attn_weights = false;
            mha_inputs ip = in;
            ip.is_causal = false;
            ip.attn_mask = (mha_mask){am, MHA_MASK_FLOAT, 3, {H, L, L}};
            mha_plan p1, p2;
            float *w1, *w2;
            float *o1 = forward_of(lv, &in, &w1, &p1), *o2 = forward_of(lp, &ip, &w2, &p2);
            if (o1 && o2) {
                CHECK(max_abs_diff(o1, o2, p1.out_count) < 2e-6f,
                      "rule %d (%s) equals its mask: output %g", rule, isa ? "generic" : "best",
                      max_abs_diff(o1, o2, p1.out_count));
                CHECK(max_abs_diff(w1, w2, p1.weights_count) < 1e-6f,
                      "rule %d (%s) equals its mask: weights %g", rule, isa ? "generic" : "best",
                      max_abs_diff(w1, w2, p1.weights_count));
            }
            free(o1);
            free(o2);
            free(w1);
            free(w2);
        }
        set_isa(NULL);
        free(am);
        free(x);
        mha_layer_free(lv);
        mha_layer_free(lp);
    }
}

/* One decode step (query at position p against p+1 keys) = row p of the full causal pass. */
static void test_decode_step(mha_pool *pool2)
{
    const int64_t E = 96, H = 8, hd = 32, Hkv = 2, L = 70;
    for (int variant = 0; variant < 3; variant++) {
        mha_config cfg;
        mha_config_init(&cfg, E, H);
        cfg.head_dim = variant == 2 ? 12 : hd;
        cfg.num_kv_heads = Hkv;
        cfg.rope = true;
        cfg.rope_theta = 10000.0;
        cfg.alibi = variant == 1;
        cfg.window = variant >= 1 ? 16 : 0;
        mha_layer *layer = random_layer(&cfg);
        float *x = rnd_array(L * E);
        mha_inputs full = {0};
        set_tensor(&full.query, x, false, true, 1, L, E);
        full.is_causal = true;
        mha_plan pf;
        float *of = forward_of(layer, &full, NULL, &pf);
        for (int64_t p = 0; p < L && of; p += p < 5 ? 1 : 13) {
            mha_inputs step = {0};
            int64_t pos = p;
            set_tensor(&step.query, x + p * E, false, true, 1, 1, E);
            set_tensor(&step.key, x, false, true, 1, p + 1, E);
            step.positions = (mha_positions){&pos, 1, {1}};
            step.is_causal = variant != 0; /* without: every one of the p+1 keys is in the past */
            mha_plan ps;
            mha_error err = {0};
            float out[96];
            if (mha_plan_forward(layer, &step, NULL, &ps, &err) == MHA_OK &&
                mha_forward(layer, &step, &ps, out, NULL, NULL, pool2, &err) == MHA_OK)
                CHECK(max_abs_diff(out, of + p * E, E) < 2e-6f,
                      "decode step at %lld = row %lld of the full pass (variant %d): %g",
                      (long long)p, (long long)p, variant, max_abs_diff(out, of + p * E, E));
            else
                CHECK(false, "decode step: %s", err.message);
        }
        free(of);
        free(x);
        mha_layer_free(layer);
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* Configs, parameters, FLOPs, trace shapes, errors                                               */

static void expect_config(const mha_config *cfg, mha_status want, const char *field, const char *what)
{
    mha_error err = {0};
    mha_status st = mha_config_check(cfg, NULL, &err);
    CHECK(st == want && (want == MHA_OK || !strcmp(err.field, field)),
          "%s: got %s field '%s' (%s), want %s field '%s'", what, mha_status_name(st), err.field,
          err.message, mha_status_name(want), field);
}

static void test_config_rules(void)
{
    mha_config c;
    mha_config_init(&c, 10, 4);
    expect_config(&c, MHA_ERR_CONFIG, "num_heads", "E % H without head_dim");
    c.head_dim = 3;
    expect_config(&c, MHA_OK, "", "E need not divide by H with head_dim");
    c.num_kv_heads = 3;
    expect_config(&c, MHA_ERR_CONFIG, "num_kv_heads", "num_kv_heads not dividing H");
    c.num_kv_heads = 8;
    expect_config(&c, MHA_ERR_CONFIG, "num_kv_heads", "num_kv_heads above H");
    c.num_kv_heads = -1;
    expect_config(&c, MHA_ERR_CONFIG, "num_kv_heads", "negative num_kv_heads");
    c.num_kv_heads = 2;
    expect_config(&c, MHA_OK, "", "num_kv_heads 2 of 4");
    c.rope = true;
    c.rope_theta = 10000;
    expect_config(&c, MHA_ERR_CONFIG, "head_dim", "odd head_dim with rope");
    mha_error err = {0};
    mha_config_check(&c, NULL, &err);
    CHECK(strstr(err.message, "even") != NULL, "the message says why: %s", err.message);
    c.head_dim = 4;
    expect_config(&c, MHA_OK, "", "even head_dim with rope");
    c.rope_theta = 0;
    expect_config(&c, MHA_ERR_CONFIG, "rope.theta", "theta 0");
    c.rope_theta = -5;
    expect_config(&c, MHA_ERR_CONFIG, "rope.theta", "theta < 0");
    c.rope_theta = INFINITY;
    expect_config(&c, MHA_ERR_CONFIG, "rope.theta", "theta inf");
    c.rope_theta = NAN;
    expect_config(&c, MHA_ERR_CONFIG, "rope.theta", "theta NaN");
    c.rope_theta = 1e-300; /* head_dim 4: inv_freq[1] = 1e150, inf in float32 */
    expect_config(&c, MHA_ERR_CONFIG, "rope.theta", "theta whose inv_freq overflows");
    c.rope_theta = 1e-70; /* inv_freq[1] = 1e35, finite; its angle at 2^24 - 1 is not */
    expect_config(&c, MHA_ERR_CONFIG, "rope.theta", "theta whose angles overflow");
    c.rope_theta = 1e-60; /* inv_freq[1] = 1e30: every angle finite (as HF computes them) */
    expect_config(&c, MHA_OK, "", "a tiny theta whose angles stay finite");
    c.rope_theta = 1e6;
    c.window = -1;
    expect_config(&c, MHA_ERR_CONFIG, "window", "window < 0");
    c.window = 1;
    c.alibi = true;
    expect_config(&c, MHA_OK, "", "every extension at once");
    c.head_dim = -2;
    expect_config(&c, MHA_ERR_CONFIG, "head_dim", "negative head_dim");
    c.head_dim = (int64_t)1 << 21;
    expect_config(&c, MHA_ERR_LIMIT, "head_dim", "head_dim past max_dim");
    c.head_dim = (int64_t)1 << 20;
    c.embed_dim = 1 << 10;
    expect_config(&c, MHA_ERR_LIMIT, "head_dim", "head_dim x H past max_elements");
    mha_config_check(&c, NULL, &err);
    CHECK(strstr(err.message, "in_proj_weight") != NULL, "names the weight: %s", err.message);
    mha_config_init(&c, 8, 2);
    c.rope = true;
    c.rope_theta = 10000;
    mha_layer *l = mha_layer_create(&c, NULL, &err);
    CHECK(l && mha_layer_config(l)->head_dim == 4 && mha_layer_config(l)->num_kv_heads == 2,
          "resolved head_dim and num_kv_heads");
    mha_layer_free(l);
    mha_config_init(&c, 6, 3); /* hd 2 from E/H */
    c.rope = true;
    c.rope_theta = 1;
    expect_config(&c, MHA_OK, "", "defaulted even head_dim with rope");
    mha_config_init(&c, 9, 3);
    c.rope = true;
    c.rope_theta = 1;
    expect_config(&c, MHA_ERR_CONFIG, "head_dim", "defaulted odd head_dim with rope");
}

/* BLOOM's slopes: powers of two, and H = 6, 12 (12: n = 8, then 4 of 16's odd slopes). */
static void test_alibi_slopes(void)
{
    CHECK(mha_alibi_slope(0, 8) == 0.5f && mha_alibi_slope(7, 8) == 1.0f / 256,
          "H=8: 2^-1 .. 2^-8");
    CHECK(mha_alibi_slope(0, 1) == 1.0f / 256, "H=1: 2^-8");
    CHECK(mha_alibi_slope(0, 4) == 0.25f && mha_alibi_slope(3, 4) == 1.0f / 256, "H=4");
    /* H=12: heads 0..7 as H=8; heads 8..11 get 2^(-0.5·k) for k = 1, 3, 5, 7 */
    CHECK(mha_alibi_slope(8, 12) == (float)pow(2.0, -0.5) && mha_alibi_slope(11, 12) == (float)pow(2.0, -3.5),
          "H=12 extra slopes");
    CHECK(mha_alibi_slope(4, 6) == (float)pow(2.0, -1.0) && mha_alibi_slope(5, 6) == (float)pow(2.0, -3.0),
          "H=6: n=4, then 2^(-4k/4) for k = 1, 3");
}

static void test_params_flops_trace_shapes(void)
{
    mha_config c;
    mha_config_init(&c, 20, 4);
    c.head_dim = 6;
    c.num_kv_heads = 2;
    c.add_bias_kv = true;
    mha_param_info info[MHA_MAX_PARAMS];
    int n = mha_param_list(&c, info);
    CHECK(n == 6 && info[0].shape[0] == (4 + 2 * 2) * 6 && info[0].shape[1] == 20 &&
              info[1].shape[0] == 48 && info[2].shape[2] == 12 && info[3].shape[2] == 12 &&
              info[4].shape[0] == 20 && info[4].shape[1] == 24 && info[5].shape[0] == 20,
          "packed GQA shapes: in_proj [48,20], bias_k [1,1,12], out_proj [20,24]");
    CHECK(mha_param_total(&c) == 48 * 20 + 48 + 12 + 12 + 20 * 24 + 20, "param total");
    c.kdim = 3;
    c.vdim = 5;
    n = mha_param_list(&c, info);
    CHECK(!strcmp(info[0].name, "q_proj_weight") && info[0].shape[0] == 24 &&
              info[1].shape[0] == 12 && info[1].shape[1] == 3 && info[2].shape[0] == 12 &&
              info[2].shape[1] == 5,
          "separate GQA shapes: q [24,20], k [12,3], v [12,5]");
    /* FLOPs: 2NL·E·Dq + 2NS0·Kd·Dkv + 2NS0·Vd·Dkv + 4NL·S·Dq + 2NL·Dq·E */
    const double N = 2, L = 7, S0 = 5, S = 6;
    CHECK(mha_flops(&c, 2, 7, 5) ==
              2 * N * L * 20 * 24 + 2 * N * S0 * 3 * 12 + 2 * N * S0 * 5 * 12 + 4 * N * L * S * 24 +
                  2 * N * L * 24 * 20,
          "flops formula with head_dim and num_kv_heads");

    /* Init: torch's scheme on the new shapes: xavier over [Dq+2Dkv, E], kaiming over fan_in Dq */
    mha_config_init(&c, 256, 8);
    c.head_dim = 64;
    c.num_kv_heads = 2;
    mha_layer *a = mha_layer_create(&c, NULL, NULL);
    mha_layer_init(a, "xavier_uniform", 1, NULL);
    const float *w = mha_layer_param_data(a, 0), *o = mha_layer_param_data(a, 2);
    double mx = 0, mo = 0;
    for (int64_t i = 0; i < 768 * 256; i++)
        mx = fmax(mx, fabs(w[i]));
    for (int64_t i = 0; i < 256 * 512; i++)
        mo = fmax(mo, fabs(o[i]));
    const double bx = sqrt(6.0 / (256 + 768)), bo = 1.0 / sqrt(512.0);
    CHECK(mx <= bx && mx > 0.99 * bx, "in_proj_weight [768,256] within xavier bound %g (%g)", bx, mx);
    CHECK(mo <= bo && mo > 0.99 * bo, "out_proj.weight [256,512] within 1/sqrt(fan_in=512) (%g)", mo);
    mha_layer_free(a);

    /* Trace shapes: k/v heads are the kv heads; q_proj/concat Dq wide, k_proj Dkv */
    mha_config_init(&c, 20, 4);
    c.head_dim = 6;
    c.num_kv_heads = 2;
    c.add_zero_attn = true;
    mha_layer *l = mha_layer_create(&c, NULL, NULL);
    float x[3 * 20] = {0};
    mha_inputs in = {0};
    set_tensor(&in.query, x, false, true, 1, 3, 20);
    mha_plan plan;
    mha_plan_forward(l, &in, NULL, &plan, NULL);
    int64_t sh[4];
    int nd = mha_trace_stage_shape(&plan, MHA_TRACE_K_HEADS, sh, NULL);
    CHECK(nd == 4 && sh[0] == 1 && sh[1] == 2 && sh[2] == 4 && sh[3] == 6, "k_heads [1,2,4,6]");
    nd = mha_trace_stage_shape(&plan, MHA_TRACE_Q_PROJ, sh, NULL);
    CHECK(nd == 3 && sh[2] == 24, "q_proj [1,3,24]");
    nd = mha_trace_stage_shape(&plan, MHA_TRACE_V_PROJ, sh, NULL);
    CHECK(nd == 3 && sh[1] == 3 && sh[2] == 12, "v_proj [1,3,12]");
    nd = mha_trace_stage_shape(&plan, MHA_TRACE_CONCAT, sh, NULL);
    CHECK(nd == 3 && sh[2] == 24, "concat [1,3,24]");
    nd = mha_trace_stage_shape(&plan, MHA_TRACE_OUTPUT, sh, NULL);
    CHECK(nd == 3 && sh[2] == 20, "output [1,3,20]");
    nd = mha_trace_stage_shape(&plan, MHA_TRACE_SCORES, sh, NULL);
    CHECK(nd == 4 && sh[1] == 4 && sh[3] == 4, "scores [1,4,3,4]");
    mha_layer_free(l);
}

static void expect_plan(const mha_layer *layer, const mha_inputs *in, mha_status want,
                        const char *field, const char *what)
{
    mha_plan plan;
    mha_error err = {0};
    mha_status st = mha_plan_forward(layer, in, NULL, &plan, &err);
    CHECK(st == want && !strcmp(err.field, field), "%s: got %s field '%s' (%s), want %s '%s'", what,
          mha_status_name(st), err.field, err.message, mha_status_name(want), field);
}

static void test_position_errors(void)
{
    mha_config c;
    mha_config_init(&c, 8, 2);
    c.rope = true;
    c.rope_theta = 10000;
    mha_layer *l = mha_layer_create(&c, NULL, NULL);
    float x[2 * 3 * 8] = {0}, k[2 * 5 * 8] = {0};
    int64_t p[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    mha_inputs in = {0};
    set_tensor(&in.query, x, true, true, 2, 3, 8);
    set_tensor(&in.key, k, true, true, 2, 5, 8);
    in.positions = (mha_positions){p, 1, {3}};
    expect_plan(l, &in, MHA_OK, "", "positions [L]");
    in.positions = (mha_positions){p, 2, {2, 3}};
    expect_plan(l, &in, MHA_OK, "", "positions [N,L]");
    in.positions = (mha_positions){p, 1, {4}};
    expect_plan(l, &in, MHA_ERR_SHAPE, "positions", "positions of the wrong length");
    in.positions = (mha_positions){p, 2, {3, 3}};
    expect_plan(l, &in, MHA_ERR_SHAPE, "positions", "positions [3,L] for N=2");
    in.positions = (mha_positions){p, 3, {2, 3}};
    expect_plan(l, &in, MHA_ERR_SHAPE, "positions", "positions of rank 3");
    int64_t bad[3] = {0, -1, 2};
    in.positions = (mha_positions){bad, 1, {3}};
    expect_plan(l, &in, MHA_ERR_VALUE, "positions", "a negative position");
    bad[1] = MHA_MAX_POSITION;
    expect_plan(l, &in, MHA_ERR_VALUE, "positions", "a position at 2^24");
    bad[1] = MHA_MAX_POSITION - 1;
    expect_plan(l, &in, MHA_OK, "", "a position at 2^24 - 1");
    in.positions = (mha_positions){0};
    in.key_positions = (mha_positions){p, 1, {3}};
    expect_plan(l, &in, MHA_ERR_SHAPE, "key_positions", "key_positions of length L, not S");
    in.key_positions = (mha_positions){p, 2, {2, 5}};
    expect_plan(l, &in, MHA_OK, "", "key_positions [N,S]");
    in.key_positions = (mha_positions){bad, 1, {3}};
    bad[1] = -3;
    set_tensor(&in.key, k, true, true, 2, 3, 8);
    expect_plan(l, &in, MHA_ERR_VALUE, "key_positions", "a negative key position");
    in.key_positions = (mha_positions){0};
    mha_inputs un = {0};
    set_tensor(&un.query, x, false, true, 1, 3, 8);
    un.positions = (mha_positions){p, 2, {1, 3}};
    expect_plan(l, &un, MHA_OK, "", "unbatched [1,L] positions");
    un.positions = (mha_positions){p, 2, {2, 3}};
    expect_plan(l, &un, MHA_ERR_SHAPE, "positions", "unbatched [2,L] positions");
    mha_layer_free(l);
}

/* Without weights, working memory does not grow with H·L·S, nor with the kv heads' sharing. */
static void test_workspace(void)
{
    const int64_t L = 2048, E = 1024;
    float *x = calloc((size_t)(L * E), sizeof(float));
    size_t ws[3];
    for (int i = 0; i < 3; i++) {
        mha_config cfg;
        mha_config_init(&cfg, E, 16);
        cfg.num_kv_heads = i == 0 ? 16 : i == 1 ? 4 : 1;
        cfg.rope = true;
        cfg.rope_theta = 1e4;
        cfg.window = 128;
        mha_layer *layer = mha_layer_create(&cfg, NULL, NULL);
        mha_inputs in = {0};
        set_tensor(&in.query, x, true, true, 1, L, E);
        in.is_causal = true;
        mha_plan plan;
        mha_plan_forward(layer, &in, NULL, &plan, NULL);
        ws[i] = plan.workspace_bytes;
        mha_layer_free(layer);
    }
    CHECK(ws[1] < ws[0] && ws[2] < ws[1], "fewer kv heads, less scratch (%zu, %zu, %zu)", ws[0],
          ws[1], ws[2]);
    /* q|k|v, concat, packed keys and values (6·L·E) + positions (2L) + RoPE tables (2L·hd + hd)
     * + one thread's tiles (64 rows of q, outputs and 256 scores) */
    CHECK(ws[0] <= (size_t)(6 * L * E + 2 * L + 2 * L * 64 + 64 * (2 * 64 + 256) + 4096) *
                       sizeof(float),
          "workspace %zu bytes: no H·L·S term", ws[0]);
    free(x);
}

static void test_isa_cap(void)
{
    set_isa("generic");
    CHECK(mha_isa_active() == MHA_ISA_PORTABLE, "ATTND_ISA=generic caps to generic");
    set_isa("avx2");
    CHECK(mha_isa_active() <= MHA_ISA_AVX2, "ATTND_ISA=avx2 caps to at most avx2");
    set_isa("nonsense");
    mha_isa capped = mha_isa_active();
    set_isa(NULL);
    CHECK(capped == mha_isa_active(), "an unknown ATTND_ISA caps nothing");
    CHECK(!strcmp(mha_isa_name(MHA_ISA_AVX512), "avx512") &&
              !strcmp(mha_isa_name(MHA_ISA_PORTABLE), "generic"),
          "isa names");
}

/* mha_rope_theta_fits looks at the first and last rotary frequency only (they are monotone in d):
 * the same answer and the same worst frequency as a scan of every d (HF's inv_freq[d] =
 * theta^(-2d/hd), in double, rounded once), for head_dims up to 4096 and thetas from 1e-80 to
 * 1e9, the ones where the answer turns among them. */
static void test_rope_theta_scan(void)
{
    static const double thetas[] = {1e-80, 1e-70, 1e-65, 1e-62, 1e-60, 1e-40, 1e-20, 1e-9, 0.001,
                                    0.5,   0.99,  1.0,   1.01,  2.0,   10.0,  1e4,   5e5,  1e9};
    int bad = 0, checked = 0;
    for (int64_t hd = 2; hd <= 4096; hd = hd < 64 ? hd + 2 : hd * 2 + 2)
        for (size_t t = 0; t < sizeof thetas / sizeof thetas[0]; t++) {
            float worst = 1.0f;
            for (int64_t d = 1; d < hd / 2; d++) {
                const float f = (float)(1.0 / pow(thetas[t], (double)(2 * d) / (double)hd));
                worst = f > worst ? f : worst;
            }
            const bool fits = isfinite(worst * (float)((1 << 24) - 1));
            float got;
            const bool got_fits = mha_rope_theta_fits(hd, thetas[t], &got);
            checked++;
            if (got_fits != fits || got != worst) {
                if (bad++ < 5)
                    CHECK(false, "rope theta %g, head_dim %lld: fits %d worst %g, the scan %d %g",
                          thetas[t], (long long)hd, got_fits, (double)got, fits, (double)worst);
            }
        }
    CHECK(bad == 0, "mha_rope_theta_fits agrees with a scan of every frequency (%d cases, %d off)",
          checked, bad);
    /* a head_dim at the limit (2^20) answers at once: two frequencies, not half a million */
    float w;
    CHECK(mha_rope_theta_fits((int64_t)1 << 20, 10000.0, &w) && w == 1.0f,
          "head_dim 2^20: fits, the largest frequency 1 (%g)", (double)w);
}

int main(void)
{
    test_rope_theta_scan();
    mha_blas_set_threads(1);
    mha_error err;
    mha_pool *pool2 = mha_pool_create(2, &err);
    CHECK(pool2, "pool of 2");
    test_isa_cap();
    test_config_rules();
    test_alibi_slopes();
    test_params_flops_trace_shapes();
    test_position_errors();
    test_workspace();
    test_random_cases(pool2);
    test_larger_cases(pool2);
    test_gqa_equals_repeated_mha();
    test_window_and_alibi_as_masks();
    test_decode_step(pool2);
    test_trace_keeps_output(pool2);
    mha_pool_free(pool2);
    return check_report();
}
