/*
 * test_engine.c - the engine's fast path against a naive reference (ref_mha_forward,
 * tests/support/mha_ref.c) on random shapes crossing every option, with and without a pool, and
 * from several threads at once.
 */
#include "check.h"
#include "mha.h"
#include "mha_ref.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------- */
/* Small deterministic random numbers for the test data                                           */

static uint64_t rng_state = 0x1234567u;

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

/* ---------------------------------------------------------------------------------------------- */
/* Reference                                                                                      */

static const float *param(const mha_layer *layer, const char *name)
{
    int i = mha_layer_param_find(layer, name);
    return i < 0 ? NULL : mha_layer_param_data(layer, i);
}

/* ---------------------------------------------------------------------------------------------- */
/* Random cases                                                                                   */

typedef struct tcase {
    mha_config cfg;
    mha_layer *layer;
    mha_inputs in;
    float *q, *k, *v;
    void *kpm, *am;
    char desc[256];
} tcase;

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

/* Builds a random case; density_pct drives how often mask entries are set. */
static void make_case(tcase *tc, int density_pct)
{
    memset(tc, 0, sizeof *tc);
    static const int dims[][2] = {{4, 1},  {4, 2},  {8, 2},  {8, 4},  {12, 3}, {16, 4},
                                  {32, 4}, {24, 6}, {64, 8}, {20, 5}, {64, 4}, {96, 2}};
    int pick = rnd_int(0, 11); /* the last two: head_dim 16 and 48 (AVX-512 kernels) */
    mha_config_init(&tc->cfg, dims[pick][0], dims[pick][1]);
    int64_t E = tc->cfg.embed_dim;
    if (rnd_int(0, 3) == 0)
        tc->cfg.kdim = rnd_int(1, 9);
    if (rnd_int(0, 3) == 0)
        tc->cfg.vdim = rnd_int(1, 9);
    tc->cfg.bias = rnd_int(0, 3) != 0;
    tc->cfg.add_bias_kv = rnd_int(0, 2) == 0;
    tc->cfg.add_zero_attn = rnd_int(0, 2) == 0;
    tc->cfg.batch_first = rnd_int(0, 1);
    mha_error err;
    tc->layer = mha_layer_create(&tc->cfg, NULL, &err);
    mha_layer_init(tc->layer, "xavier_uniform", rnd(), &err);
    for (int i = 0; i < mha_layer_param_count(tc->layer); i++) { /* random biases too */
        const mha_param_info *p = mha_layer_param_info(tc->layer, i);
        if (p->ndim == 1 || p->ndim == 3) {
            float *x = rnd_array(p->count);
            mha_layer_set_param(tc->layer, p->name, x, p->ndim, p->shape, &err);
            free(x);
        }
    }
    const mha_config *c = mha_layer_config(tc->layer);
    bool batched = rnd_int(0, 4) != 0, bf = c->batch_first;
    int64_t N = batched ? rnd_int(1, 3) : 1, L = rnd_int(1, 9), S0 = rnd_int(1, 9);
    int kv = c->kdim == E && c->vdim == E ? rnd_int(0, 2) : 2; /* 0 self, 1 value = key, 2 both */
    if (kv == 0)
        S0 = L;
    if (kv == 1 && rnd_int(0, 1) && c->kdim == c->vdim)
        kv = 3; /* key and value the same array, passed twice */
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
    if (kv == 3)
        set_tensor(&tc->in.value, tc->k, batched, bf, N, S0, c->vdim);
    int km = rnd_int(0, 2);
    if (km) {
        int64_t shape[2] = {N, S0};
        tc->kpm = rnd_mask(&tc->in.key_padding_mask, batched ? 2 : 1, batched ? shape : shape + 1,
                           km == 1, density_pct);
    }
    int am = rnd_int(0, 4);
    if (am) {
        int64_t shape[3] = {N * c->num_heads, L, S0};
        tc->am = rnd_mask(&tc->in.attn_mask, am <= 2 ? 2 : 3, am <= 2 ? shape + 1 : shape, am % 2,
                          density_pct);
    }
    tc->in.is_causal = rnd_int(0, 3) == 0;
    tc->in.need_weights = rnd_int(0, 2) != 0;
    tc->in.average_attn_weights = rnd_int(0, 1);
    snprintf(tc->desc, sizeof tc->desc,
             "E=%lld H=%lld kdim=%lld vdim=%lld bias=%d bias_kv=%d zero_attn=%d bf=%d batched=%d "
             "N=%lld L=%lld S0=%lld kv=%d kpm=%d am=%d causal=%d nw=%d avg=%d",
             (long long)E, (long long)c->num_heads, (long long)c->kdim, (long long)c->vdim, c->bias,
             c->add_bias_kv, c->add_zero_attn, bf, batched, (long long)N, (long long)L,
             (long long)S0, kv, km, am, tc->in.is_causal, tc->in.need_weights,
             tc->in.average_attn_weights);
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

static float *nan_array(int64_t n)
{
    float *x = malloc((size_t)(n ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        x[i] = NAN; /* anything not written shows up as a mismatch */
    return x;
}

/* Runs the case through the fast path (trace too when with_trace) and the reference; compares. */
static bool run_case(tcase *tc, mha_pool *pool, bool with_trace)
{
    mha_plan plan;
    mha_error err = {0};
    mha_status st = mha_plan_forward(tc->layer, &tc->in, NULL, &plan, &err);
    if (!CHECK(st == MHA_OK, "plan failed (%s: %s) for %s", err.field, err.message, tc->desc))
        return false;
    float *out = nan_array(plan.out_count), *ref_out = nan_array(plan.out_count);
    float *w = tc->in.need_weights ? nan_array(plan.weights_count) : NULL;
    float *ref_w = tc->in.need_weights ? nan_array(plan.weights_count) : NULL;
    mha_trace tr = {{0}, {0}};
    float *ref_tr[MHA_TRACE_NSTAGES] = {0};
    int64_t counts[MHA_TRACE_NSTAGES];
    if (with_trace) {
        for (int s = 0; s < MHA_TRACE_NSTAGES; s++) {
            int64_t shape[4];
            mha_trace_stage_shape(&plan, (mha_trace_stage)s, shape, &counts[s]);
            tr.stage[s] = nan_array(counts[s]);
            ref_tr[s] = nan_array(counts[s]);
        }
    }
    st = mha_forward(tc->layer, &tc->in, &plan, out, w, with_trace ? &tr : NULL, pool, &err);
    bool ok = CHECK(st == MHA_OK, "forward failed (%s) for %s", err.message, tc->desc);
    ref_mha_forward(tc->layer, &tc->in, ref_out, ref_w, with_trace ? ref_tr : NULL);
    char what[400];
    snprintf(what, sizeof what, "output of %s", tc->desc);
    ok &= check_close_array(__FILE__, __LINE__, what, out, ref_out, plan.out_count, NULL);
    if (w) {
        snprintf(what, sizeof what, "attn_weights of %s", tc->desc);
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
    for (int n = 0; n < 600 && failed < 5; n++) {
        tcase tc;
        make_case(&tc, n % 3 == 0 ? 60 : 15);
        mha_pool *pool = n % 2 ? pool2 : NULL;
        if (!run_case(&tc, pool, n % 4 == 1))
            failed++;
        free_case(&tc);
    }
}

/* A larger case so the pool really splits GEMMs and row blocks (L > block, several tasks), and
 * head_dim 16, 32, 64, 80 and 128 with row and key counts off every tile size of the AVX-512
 * kernels (12 or 6 rows, 16 keys, 256-key chunks, 64-column groups). */
static void test_larger_cases(mha_pool *pool2)
{
    const int shapes[][5] = {/* E, H, N, L, S0 */ {64, 4, 2, 150, 150},
                             {96, 3, 1, 70, 1100},
                             {128, 8, 3, 33, 40},
                             {32, 2, 1, 300, 300},
                             {256, 4, 1, 131, 131},
                             {160, 2, 2, 23, 529},
                             {256, 2, 1, 37, 270},
                             /* one head's keys and values 2 MiB: row blocks grouped by default
                              * (mha_attn_group), four with a partial last one */
                             {128, 2, 1, 200, 4100},
                             /* nine row blocks: under ATTND_TEST_GROUP_WIDE (test_grouped.sh) a
                              * group of eight and a last one alone */
                             {64, 2, 1, 520, 200},
                             /* every key in one AVX-512 block (the weights written from the
                              * tile), a map of 16 MiB (written with streaming stores) */
                             {64, 16, 4, 256, 250}};
    for (int s = 0; s < 10; s++) {
        for (int variant = 0; variant < 5; variant++) { /* 4: causal, appended keys, trace */
            tcase tc;
            memset(&tc, 0, sizeof tc);
            mha_config_init(&tc.cfg, shapes[s][0], shapes[s][1]);
            tc.cfg.batch_first = variant % 2;
            tc.cfg.add_bias_kv = variant >= 3;
            tc.cfg.add_zero_attn = variant == 4;
            mha_error err;
            tc.layer = mha_layer_create(&tc.cfg, NULL, &err);
            mha_layer_init(tc.layer, "xavier_uniform", 7, &err);
            int64_t E = shapes[s][0], N = shapes[s][2], L = shapes[s][3], S0 = shapes[s][4];
            bool self = L == S0 && variant < 2;
            tc.q = rnd_array(N * L * E);
            set_tensor(&tc.in.query, tc.q, true, tc.cfg.batch_first, N, L, E);
            if (!self) {
                tc.k = rnd_array(N * S0 * E);
                set_tensor(&tc.in.key, tc.k, true, tc.cfg.batch_first, N, S0, E);
            }
            tc.in.is_causal = variant == 2 || variant == 4;
            tc.in.need_weights = variant >= 1;
            tc.in.average_attn_weights = variant == 1;
            snprintf(tc.desc, sizeof tc.desc, "larger E=%d N=%lld L=%lld S0=%lld variant %d",
                     shapes[s][0], (long long)N, (long long)L, (long long)S0, variant);
            run_case(&tc, pool2, variant == 4 && s < 5);
            run_case(&tc, NULL, false);
            free_case(&tc);
        }
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* Several threads on one layer and one pool                                                      */

typedef struct conc_arg {
    const mha_layer *layer;
    const mha_inputs *in;
    const mha_plan *plan;
    mha_pool *pool;
    const float *want;
    int mismatches;
} conc_arg;

static void *conc_main(void *p)
{
    conc_arg *a = p;
    float *out = malloc((size_t)a->plan->out_count * sizeof(float));
    for (int rep = 0; rep < 20; rep++) {
        if (mha_forward(a->layer, a->in, a->plan, out, NULL, NULL, a->pool, NULL) != MHA_OK ||
            memcmp(out, a->want, (size_t)a->plan->out_count * sizeof(float)) != 0)
            a->mismatches++;
    }
    free(out);
    return NULL;
}

static void test_concurrency(mha_pool *pool2)
{
    mha_config cfg;
    mha_config_init(&cfg, 32, 4);
    mha_layer *layer = mha_layer_create(&cfg, NULL, NULL);
    mha_layer_init(layer, "xavier_uniform", 3, NULL);
    float *x = rnd_array(2 * 40 * 32);
    mha_inputs in = {0};
    set_tensor(&in.query, x, true, true, 2, 40, 32);
    in.is_causal = true;
    mha_plan plan;
    CHECK(mha_plan_forward(layer, &in, NULL, &plan, NULL) == MHA_OK, "concurrency plan");
    float *want = malloc((size_t)plan.out_count * sizeof(float));
    mha_forward(layer, &in, &plan, want, NULL, NULL, NULL, NULL);
    for (int use_pool = 0; use_pool < 2; use_pool++) {
        pthread_t th[4];
        conc_arg args[4];
        for (int t = 0; t < 4; t++) {
            args[t] = (conc_arg){layer, &in, &plan, use_pool ? pool2 : NULL, want, 0};
            pthread_create(&th[t], NULL, conc_main, &args[t]);
        }
        int bad = 0;
        for (int t = 0; t < 4; t++) {
            pthread_join(th[t], NULL);
            bad += args[t].mismatches;
        }
        /* Same BLAS calls on the same data: results are bit-identical whichever thread runs them.
         */
        CHECK(bad == 0, "%d of 80 concurrent passes (pool=%d) differ from the single-thread result",
              bad, use_pool);
    }
    free(want);
    free(x);
    mha_layer_free(layer);
}

/* Without weights, scratch is O(N·(L+S)·E): never the [N,H,L,S] score tensor, nor a row of S. */
static void test_workspace_bound(void)
{
    const int64_t L = 2048, E = 1024;
    float *x = calloc((size_t)(L * E), sizeof(float));
    size_t ws[2];
    for (int i = 0; i < 2; i++) {
        mha_config cfg;
        mha_config_init(&cfg, E, i ? 16 : 1);
        mha_layer *layer = mha_layer_create(&cfg, NULL, NULL);
        mha_inputs in = {0};
        set_tensor(&in.query, x, true, true, 1, L, E);
        mha_plan plan;
        mha_plan_forward(layer, &in, NULL, &plan, NULL);
        ws[i] = plan.workspace_bytes;
        mha_layer_free(layer);
    }
    /* q|k|v, concat and packed keys and values (6·L·E floats), positions, and one thread's tiles:
     * 64 rows of q, scores (at most 256 keys) and outputs, whatever H (hd 1024 or 64) */
    for (int i = 0; i < 2; i++)
        CHECK(ws[i] <= (size_t)(6 * L * E + 2 * L + 64 * (2 * 1024 + 256) + 4096) * sizeof(float),
              "XL-sized workspace %zu bytes (H=%d), no score matrix (H·L·S alone would be %lld "
              "bytes)",
              ws[i], i ? 16 : 1, (long long)(16 * L * L * 4));
    free(x);
}

/* need_weights and average_attn_weights must not change the output's bits (callers compare). On
 * AVX2 a pass without weights of 128 rows or more runs row blocks of 128 (mha_attn_bm), those with
 * weights of 64: the shapes below cross that with head_dims the JIT kernels take and those the hand
 * kernels take (hd 4, 12, 20, 80), row counts off both block sizes (the last block partial in one
 * and full in the other), masks, ALiBi, RoPE, grouped kv heads and appended keys. */
static void test_output_same_across_modes(mha_pool *pool2)
{
    const int shapes[][6] = {/* E, H, hd (0: E/H), Hkv (0: H), N, L */
                             {64, 4, 0, 0, 2, 70},    {64, 4, 0, 0, 2, 200},
                             {48, 3, 4, 1, 1, 180},   {96, 8, 12, 2, 2, 130},
                             {40, 2, 20, 0, 1, 333},  {160, 2, 80, 1, 1, 256},
                             {128, 2, 64, 0, 3, 129}, {64, 2, 32, 0, 1, 1000}};
    for (int s = 0; s < 8; s++)
        for (int variant = 0; variant < 3; variant++) {
            mha_config cfg;
            mha_config_init(&cfg, shapes[s][0], shapes[s][1]);
            cfg.head_dim = shapes[s][2];
            cfg.num_kv_heads = shapes[s][3];
            cfg.add_bias_kv = variant == 0;
            cfg.add_zero_attn = variant == 2;
            cfg.alibi = variant == 1;
            cfg.rope = variant == 2;
            cfg.rope_theta = 10000;
            mha_error err = {0};
            mha_layer *layer = mha_layer_create(&cfg, NULL, &err);
            CHECK(layer != NULL, "layer %d/%d: %s", s, variant, err.message);
            if (!layer)
                continue;
            mha_layer_init(layer, "xavier_uniform", 5, NULL);
            const int64_t E = shapes[s][0], N = shapes[s][4], L = shapes[s][5];
            float *x = rnd_array(N * L * E);
            uint8_t *kpm = calloc((size_t)(N * L), 1);
            for (int64_t i = 0; i < N * L; i++)
                kpm[i] = variant == 1 && rnd_int(0, 9) == 0;
            float *out[3] = {NULL, NULL, NULL}, *w = NULL;
            int64_t out_count = 0;
            bool ok = true;
            for (int mode = 0; mode < 3; mode++) {
                mha_inputs in = {0};
                set_tensor(&in.query, x, true, true, N, L, E);
                if (variant == 1) {
                    in.key_padding_mask.data = kpm;
                    in.key_padding_mask.type = MHA_MASK_BOOL;
                    in.key_padding_mask.ndim = 2;
                    in.key_padding_mask.shape[0] = N;
                    in.key_padding_mask.shape[1] = L;
                }
                in.need_weights = mode > 0;
                in.average_attn_weights = mode == 1;
                mha_plan plan;
                ok = ok && mha_plan_forward(layer, &in, NULL, &plan, &err) == MHA_OK;
                if (!ok)
                    break;
                out_count = plan.out_count;
                out[mode] = malloc((size_t)plan.out_count * sizeof(float));
                if (mode > 0) {
                    free(w);
                    w = malloc((size_t)plan.weights_count * sizeof(float));
                }
                ok = mha_forward(layer, &in, &plan, out[mode], w, NULL, pool2, &err) == MHA_OK;
            }
            CHECK(ok, "E=%d H=%d L=%d variant %d: %s", shapes[s][0], shapes[s][1], shapes[s][5],
                  variant, err.message);
            if (ok)
                CHECK(!memcmp(out[0], out[1], (size_t)out_count * sizeof(float)) &&
                          !memcmp(out[0], out[2], (size_t)out_count * sizeof(float)),
                      "the output is bit-identical with and without (averaged or per-head) weights "
                      "(E=%d H=%d hd=%d Hkv=%d N=%d L=%d variant %d)",
                      shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], shapes[s][4],
                      shapes[s][5], variant);
            for (int mode = 0; mode < 3; mode++)
                free(out[mode]);
            free(w);
            free(kpm);
            free(x);
            mha_layer_free(layer);
        }
}

/* A pass planned right at the workspace limit runs with a pool too: the plan counts one thread's
 * score block, and the forward pass puts its attention on fewer threads rather than fail. */
static void test_workspace_limit_with_pool(mha_pool *pool2)
{
    mha_config cfg;
    mha_config_init(&cfg, 64, 4);
    float *x = rnd_array(2 * 300 * 64);
    mha_inputs in = {0};
    set_tensor(&in.query, x, true, true, 2, 300, 64);
    in.is_causal = true;
    mha_limits lim;
    mha_limits_default(&lim);
    float *out[2] = {malloc(2 * 300 * 64 * sizeof(float)), malloc(2 * 300 * 64 * sizeof(float))};
    mha_status st[2] = {MHA_ERR_ARG, MHA_ERR_ARG};
    mha_error err = {0};
    for (int i = 0; i < 2; i++) { /* 0: default limits; 1: workspace limit = what the plan needs */
        mha_layer *layer = mha_layer_create(&cfg, &lim, NULL);
        mha_layer_init(layer, "xavier_uniform", 9, NULL);
        mha_plan plan;
        if (mha_plan_forward(layer, &in, &lim, &plan, &err) == MHA_OK)
            st[i] = mha_forward(layer, &in, &plan, out[i], NULL, NULL, pool2, &err);
        lim.max_workspace_bytes = (int64_t)plan.workspace_bytes;
        mha_layer_free(layer);
    }
    CHECK(st[0] == MHA_OK && st[1] == MHA_OK,
          "a pass planned at the workspace limit runs on a pool of 2 (%s)", err.message);
    CHECK(!memcmp(out[0], out[1], 2 * 300 * 64 * sizeof(float)),
          "and gives the same output as with room for every thread");
    free(out[0]);
    free(out[1]);
    free(x);
}

/* ---------------------------------------------------------------------------------------------- */
/* Fully masked rows, causal alone                                                                */

static void test_fully_masked(void)
{
    mha_config cfg;
    mha_config_init(&cfg, 8, 2);
    mha_layer *layer = mha_layer_create(&cfg, NULL, NULL);
    mha_layer_init(layer, "xavier_uniform", 1, NULL);
    float *x = rnd_array(3 * 8);
    uint8_t kpm[3] = {1, 1, 1};
    mha_inputs in = {0};
    set_tensor(&in.query, x, false, true, 1, 3, 8);
    in.key_padding_mask = (mha_mask){kpm, MHA_MASK_BOOL, 1, {3}};
    in.need_weights = true;
    in.average_attn_weights = false;
    mha_plan plan;
    mha_status st = mha_plan_forward(layer, &in, NULL, &plan, NULL);
    CHECK(st == MHA_OK && plan.weights_ndim == 3 && plan.weights_shape[0] == 2 &&
              plan.weights_shape[2] == 3,
          "unbatched per-head weights are [H,L,S]");
    float out[24], w[18];
    mha_forward(layer, &in, &plan, out, w, NULL, NULL, NULL);
    const float *bo = param(layer, "out_proj.bias");
    bool zero_w = true, out_is_bias = true;
    for (int i = 0; i < 18; i++)
        zero_w &= w[i] == 0.0f;
    for (int i = 0; i < 24; i++)
        out_is_bias &= out[i] == bo[i % 8]; /* head outputs 0, so output = out_proj.bias */
    CHECK(zero_w, "a fully masked row gets weights 0");
    CHECK(out_is_bias, "a fully masked row gets head output 0 (output = out_proj.bias)");
    free(x);
    mha_layer_free(layer);
}

/* A row whose every score overflowed float32 (q·kᵀ past -3.4e38) attends no key, as a fully
 * masked row does; torch gives NaN there, so the pass is refused (MHA_ERR_VALUE), where a row the
 * masks leave no key stays weights and output 0. Identity projections, no bias: the scores are
 * q·k / 2 exactly. */
static void test_overflowed_scores(void)
{
    mha_config cfg;
    mha_config_init(&cfg, 4, 1);
    cfg.bias = false;
    mha_layer *layer = mha_layer_create(&cfg, NULL, NULL);
    float w[12 * 4] = {0}, wo[16] = {0};
    for (int i = 0; i < 12; i++)
        w[i * 4 + i % 4] = 1.0f;
    for (int i = 0; i < 4; i++)
        wo[i * 4 + i] = 1.0f;
    const int64_t sw[2] = {12, 4}, so[2] = {4, 4};
    CHECK(mha_layer_set_param(layer, "in_proj_weight", w, 2, sw, NULL) == MHA_OK &&
              mha_layer_set_param(layer, "out_proj.weight", wo, 2, so, NULL) == MHA_OK,
          "identity projections");
    float q[8] = {3e38f, 3e38f, 0, 0, 1, 0, 0, 0}; /* [1, 2, 4]: row 0 overflows */
    float k[8] = {-2, -2, 0, 0, -3, -3, 0, 0};     /* [1, 2, 4] */
    float v[8] = {1, 2, 3, 4, 5, 6, 7, 8};         /* [1, 2, 4] */
    static const struct {
        uint8_t kpm[2], am[2];
        bool use_kpm, use_am, causal, late_keys;
        int64_t L;
        mha_status want;
        const char *what;
    } cases[] = {
        {{0, 0},
         {0, 0},
         false,
         false,
         false,
         false,
         1,
         MHA_ERR_VALUE,
         "every score of the row -inf: refused"},
        {{0, 1},
         {0, 0},
         true,
         false,
         false,
         false,
         1,
         MHA_ERR_VALUE,
         "one key allowed, its score -inf: refused"},
        {{1, 1},
         {0, 0},
         true,
         false,
         false,
         false,
         1,
         MHA_OK,
         "every key masked: weights and output 0"},
        {{0, 0},
         {0, 0},
         false,
         false,
         true,
         false,
         2,
         MHA_ERR_VALUE,
         "causal, key 0 allowed to row 0: refused"},
        {{0, 0},
         {1, 1},
         false,
         true,
         false,
         false,
         1,
         MHA_OK,
         "attn_mask masks every key: weights and output 0"},
        {{0, 0},
         {1, 0},
         false,
         true,
         false,
         false,
         1,
         MHA_ERR_VALUE,
         "attn_mask leaves key 1, its score -inf: refused"},
        {{0, 0},
         {0, 0},
         false,
         false,
         true,
         true,
         1,
         MHA_OK,
         "causal, every key after the query's position: weights and output 0"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        mha_inputs in = {0};
        set_tensor(&in.query, q, true, true, 1, cases[c].L, 4);
        set_tensor(&in.key, k, true, true, 1, 2, 4);
        set_tensor(&in.value, v, true, true, 1, 2, 4);
        if (cases[c].use_kpm)
            in.key_padding_mask = (mha_mask){(void *)cases[c].kpm, MHA_MASK_BOOL, 2, {1, 2}};
        if (cases[c].use_am)
            in.attn_mask = (mha_mask){(void *)cases[c].am, MHA_MASK_BOOL, 2, {1, 2}};
        in.is_causal = cases[c].causal;
        const int64_t qpos[1] = {0}, kpos[2] = {1, 2}; /* every key after the query */
        if (cases[c].late_keys) {
            in.positions = (mha_positions){qpos, 1, {1}};
            in.key_positions = (mha_positions){kpos, 1, {2}};
        }
        in.need_weights = true;
        mha_plan plan;
        mha_error err = {0};
        float out[8], aw[4];
        mha_status st = mha_plan_forward(layer, &in, NULL, &plan, &err);
        if (st == MHA_OK)
            st = mha_forward(layer, &in, &plan, out, aw, NULL, NULL, &err);
        bool ok = st == cases[c].want;
        if (st == MHA_ERR_VALUE)
            ok &=
                strstr(err.message, "overflowed float32") && strstr(err.message, "row 0 of head 0");
        if (st == MHA_OK)
            ok &= out[0] == 0.0f && out[3] == 0.0f && aw[0] == 0.0f && aw[1] == 0.0f;
        CHECK(ok, "%s (%s: %s)", cases[c].what, mha_status_name(st), err.message);
    }
    mha_layer_free(layer);
}

/* ---------------------------------------------------------------------------------------------- */
/* Errors                                                                                         */

static void expect_plan_error(const mha_layer *layer, const mha_inputs *in, const mha_limits *lim,
                              mha_status want, const char *field, const char *what)
{
    mha_plan plan;
    mha_error err = {0};
    mha_status st = mha_plan_forward(layer, in, lim, &plan, &err);
    CHECK(st == want && !strcmp(err.field, field), "%s: got %s field '%s' (%s), want %s field '%s'",
          what, mha_status_name(st), err.field, err.message, mha_status_name(want), field);
}

static void test_errors(void)
{
    mha_config cfg;
    mha_error err;
    mha_config_init(&cfg, 8, 2);
    cfg.kdim = 4;
    cfg.vdim = 6;
    mha_layer *layer = mha_layer_create(&cfg, NULL, &err);
    float q[2 * 3 * 8] = {0}, k[2 * 5 * 6] = {0}, v[2 * 5 * 6] = {0};
    uint8_t m[2 * 2 * 3 * 5] = {0};
    mha_inputs good = {0};
    set_tensor(&good.query, q, true, true, 2, 3, 8);
    set_tensor(&good.key, k, true, true, 2, 5, 4);
    set_tensor(&good.value, v, true, true, 2, 5, 6);
    mha_plan plan;
    CHECK(mha_plan_forward(layer, &good, NULL, &plan, &err) == MHA_OK, "good inputs plan (%s)",
          err.message);

    mha_inputs in = good;
    in.query.data = NULL;
    expect_plan_error(layer, &in, NULL, MHA_ERR_SHAPE, "query", "missing query");
    in = good;
    in.query.shape[2] = 7;
    expect_plan_error(layer, &in, NULL, MHA_ERR_SHAPE, "query", "query features");
    in = good;
    in.query.ndim = 4;
    expect_plan_error(layer, &in, NULL, MHA_ERR_SHAPE, "query", "query rank 4");
    in = good;
    in.key.shape[2] = 5;
    expect_plan_error(layer, &in, NULL, MHA_ERR_SHAPE, "key", "key features");
    mha_plan_forward(layer, &in, NULL, &plan, &err);
    CHECK(strstr(err.message, "kdim=4") && strstr(err.message, "[2,5,5]"), "message names both: %s",
          err.message);
    in = good;
    in.key.shape[0] = 3;
    expect_plan_error(layer, &in, NULL, MHA_ERR_SHAPE, "key", "key batch");
    in = good;
    in.key.ndim = 2;
    expect_plan_error(layer, &in, NULL, MHA_ERR_SHAPE, "key", "key rank");
    in = good;
    in.value.shape[1] = 4;
    expect_plan_error(layer, &in, NULL, MHA_ERR_SHAPE, "value", "value length");
    in = good;
    in.value.shape[2] = 4;
    expect_plan_error(layer, &in, NULL, MHA_ERR_SHAPE, "value", "value features");
    in = good;
    in.value.data = NULL; /* value = key, which has kdim=4 features, not vdim=6 */
    expect_plan_error(layer, &in, NULL, MHA_ERR_SHAPE, "value", "value absent with kdim != vdim");
    in = good;
    in.key.data = NULL; /* key = query: 8 features, layer expects kdim=4 */
    expect_plan_error(layer, &in, NULL, MHA_ERR_SHAPE, "key", "key absent with kdim != E");
    in = good;
    in.key_padding_mask = (mha_mask){m, MHA_MASK_BOOL, 2, {2, 4}};
    expect_plan_error(layer, &in, NULL, MHA_ERR_SHAPE, "key_padding_mask", "kpm shape");
    in.key_padding_mask = (mha_mask){m, MHA_MASK_BOOL, 2, {2, 5}};
    expect_plan_error(layer, &in, NULL, MHA_OK, "", "kpm ok");
    in.key_padding_mask = (mha_mask){m, MHA_MASK_BOOL, 1, {5}};
    expect_plan_error(layer, &in, NULL, MHA_ERR_SHAPE, "key_padding_mask", "kpm rank");
    in = good;
    in.attn_mask = (mha_mask){m, MHA_MASK_BOOL, 2, {3, 4}};
    expect_plan_error(layer, &in, NULL, MHA_ERR_SHAPE, "attn_mask", "attn_mask 2-D shape");
    in.attn_mask = (mha_mask){m, MHA_MASK_BOOL, 3, {2, 3, 5}};
    expect_plan_error(layer, &in, NULL, MHA_ERR_SHAPE, "attn_mask", "attn_mask 3-D needs N*H");
    in.attn_mask = (mha_mask){m, MHA_MASK_BOOL, 3, {4, 3, 5}};
    expect_plan_error(layer, &in, NULL, MHA_OK, "", "attn_mask 3-D ok");
    in.attn_mask = (mha_mask){m, MHA_MASK_BOOL, 1, {5}};
    expect_plan_error(layer, &in, NULL, MHA_ERR_SHAPE, "attn_mask", "attn_mask 1-D");
    in = good;
    q[3] = NAN;
    expect_plan_error(layer, &in, NULL, MHA_ERR_VALUE, "query", "NaN query");
    q[3] = INFINITY;
    expect_plan_error(layer, &in, NULL, MHA_ERR_VALUE, "query", "inf query");
    q[3] = 0;
    float fm[15] = {0};
    fm[2] = -INFINITY;
    in.attn_mask = (mha_mask){fm, MHA_MASK_FLOAT, 2, {3, 5}};
    expect_plan_error(layer, &in, NULL, MHA_OK, "", "-inf in a float mask is fine");
    fm[4] = INFINITY;
    expect_plan_error(layer, &in, NULL, MHA_ERR_VALUE, "attn_mask", "+inf in a float mask");
    fm[4] = NAN;
    expect_plan_error(layer, &in, NULL, MHA_ERR_VALUE, "attn_mask", "NaN in a float mask");

    /* Limits: refused before anything is allocated (these sizes could not be allocated at all). */
    mha_limits lim;
    mha_limits_default(&lim);
    in = good;
    in.query.shape[1] = (int64_t)1 << 19;
    in.key.shape[1] = in.value.shape[1] = (int64_t)1 << 19;
    in.need_weights = true;
    in.average_attn_weights = false;
    expect_plan_error(layer, &in, &lim, MHA_ERR_LIMIT, "need_weights", "huge weights");
    in = good;
    lim.max_workspace_bytes = 1024;
    expect_plan_error(layer, &in, &lim, MHA_ERR_LIMIT, "query", "workspace over the limit");
    mha_limits_default(&lim);
    in = good;
    in.query.shape[1] = (int64_t)1 << 40;
    expect_plan_error(layer, &in, &lim, MHA_ERR_LIMIT, "query", "dimension over max_dim");
    in = good;
    in.query.shape[0] = INT64_MAX / 2;
    in.key.shape[0] = in.value.shape[0] = INT64_MAX / 2;
    lim.max_dim = INT64_MAX;
    lim.max_elements = INT64_MAX;
    expect_plan_error(layer, &in, &lim, MHA_ERR_LIMIT, "query", "element count overflow");
    in = good;
    in.query.shape[0] = in.key.shape[0] = in.value.shape[0] = (int64_t)1 << 14;
    in.query.shape[1] = in.key.shape[1] = in.value.shape[1] = (int64_t)1 << 14;
    expect_plan_error(layer, &in, &lim, MHA_ERR_LIMIT, "query",
                      "sizes past BLAS's int, under raised limits");
    in = good;
    lim.max_elements = 40;
    expect_plan_error(layer, &in, &lim, MHA_ERR_LIMIT, "query", "query over max_elements");

    /* Configs. */
    mha_config bad;
    mha_config_init(&bad, 10, 3);
    CHECK(mha_config_check(&bad, NULL, &err) == MHA_ERR_CONFIG && !strcmp(err.field, "num_heads"),
          "E %% H != 0 is a config error on num_heads");
    mha_config_init(&bad, 0, 1);
    CHECK(mha_config_check(&bad, NULL, &err) == MHA_ERR_CONFIG && !strcmp(err.field, "embed_dim"),
          "embed_dim 0 is a config error");
    mha_config_init(&bad, 8, -2);
    CHECK(mha_config_check(&bad, NULL, &err) == MHA_ERR_CONFIG && !strcmp(err.field, "num_heads"),
          "negative num_heads is a config error");
    mha_config_init(&bad, 8, 2);
    bad.kdim = -1;
    CHECK(mha_layer_create(&bad, NULL, &err) == NULL && err.status == MHA_ERR_CONFIG &&
              !strcmp(err.field, "kdim"),
          "negative kdim refused by create");
    mha_config_init(&bad, 8, 2);
    bad.dropout = 1.5;
    CHECK(mha_config_check(&bad, NULL, &err) == MHA_ERR_CONFIG && !strcmp(err.field, "dropout"),
          "dropout 1.5 is a config error");
    mha_config_init(&bad, (int64_t)1 << 21, 1);
    CHECK(mha_config_check(&bad, NULL, &err) == MHA_ERR_LIMIT && !strcmp(err.field, "embed_dim"),
          "embed_dim over max_dim is a limit error");
    mha_config_init(&bad, (int64_t)1 << 15, 1);
    CHECK(mha_config_check(&bad, NULL, &err) == MHA_ERR_LIMIT, "a 3E x E weight over max_elements");
    mha_config_init(&bad, (int64_t)1 << 14, 1); /* in_proj_weight 3·2^28 elements: over */
    CHECK(mha_config_check(&bad, NULL, &err) == MHA_ERR_LIMIT && !strcmp(err.field, "embed_dim"),
          "packed [3E,E] over max_elements");
    bad.kdim = 3; /* separate: q_proj_weight [E,E] is exactly 2^28 elements: allowed */
    CHECK(mha_config_check(&bad, NULL, &err) == MHA_OK,
          "separate [E,E] at max_elements is fine (%s)", err.message);

    /* Parameters. */
    float wq[64] = {0};
    int64_t sh[2] = {8, 8};
    CHECK(mha_layer_set_param(layer, "q_proj_weight", wq, 2, sh, &err) == MHA_OK,
          "set q_proj_weight");
    CHECK(mha_layer_set_param(layer, "in_proj_weight", wq, 2, sh, &err) == MHA_ERR_PARAM &&
              !strcmp(err.field, "in_proj_weight"),
          "separate layer has no in_proj_weight");
    CHECK(mha_layer_set_param(layer, "nope", wq, 2, sh, &err) == MHA_ERR_PARAM, "unknown name");
    int64_t shk[2] = {8, 5};
    CHECK(mha_layer_set_param(layer, "k_proj_weight", wq, 2, shk, &err) == MHA_ERR_SHAPE &&
              strstr(err.message, "[8,5]") && strstr(err.message, "[8,4]"),
          "k_proj_weight shape names both shapes: %s", err.message);
    CHECK(mha_layer_set_param(layer, "k_proj_weight", wq, 1, shk, &err) == MHA_ERR_SHAPE,
          "rank mismatch");
    wq[5] = NAN;
    CHECK(mha_layer_set_param(layer, "q_proj_weight", wq, 2, sh, &err) == MHA_ERR_VALUE,
          "NaN param");
    CHECK(mha_layer_init(layer, "he", 0, &err) == MHA_ERR_CONFIG, "unknown init method");
    mha_layer_free(layer);
    mha_layer_free(NULL);
    mha_pool_free(NULL);
    CHECK(mha_pool_create(0, &err) == NULL && err.status == MHA_ERR_CONFIG, "pool of 0 threads");
}

/* ---------------------------------------------------------------------------------------------- */
/* Parameter list, init                                                                           */

static void test_params_and_init(void)
{
    mha_config cfg;
    mha_config_init(&cfg, 64, 4);
    cfg.add_bias_kv = true;
    mha_param_info info[MHA_MAX_PARAMS];
    int n = mha_param_list(&cfg, info);
    const char *want[] = {"in_proj_weight", "in_proj_bias",    "bias_k",
                          "bias_v",         "out_proj.weight", "out_proj.bias"};
    bool names = n == 6;
    for (int i = 0; names && i < n; i++)
        names = !strcmp(info[i].name, want[i]);
    CHECK(names, "packed param list in state_dict order (%d)", n);
    CHECK(mha_param_total(&cfg) == 3 * 64 * 64 + 3 * 64 + 2 * 64 + 64 * 64 + 64, "param total");
    CHECK(mha_flops(&cfg, 2, 10, 10) == 8.0 * 2 * 10 * 64 * 64 + 4.0 * 2 * 10 * 11 * 64, "flops");
    cfg.kdim = 5;
    cfg.bias = false;
    cfg.add_bias_kv = false;
    n = mha_param_list(&cfg, info);
    CHECK(n == 4 && !strcmp(info[1].name, "k_proj_weight") && info[1].shape[0] == 64 &&
              info[1].shape[1] == 5 && info[2].shape[1] == 64,
          "separate param list");

    /* Init: deterministic, torch's distributions. */
    mha_config_init(&cfg, 256, 8);
    cfg.add_bias_kv = true;
    mha_layer *a = mha_layer_create(&cfg, NULL, NULL), *b = mha_layer_create(&cfg, NULL, NULL);
    mha_layer_init(a, "xavier_uniform", 42, NULL);
    mha_layer_init(b, "xavier_uniform", 42, NULL);
    bool same = true;
    for (int i = 0; i < mha_layer_param_count(a); i++)
        same &= !memcmp(mha_layer_param_data(a, i), mha_layer_param_data(b, i),
                        (size_t)mha_layer_param_info(a, i)->count * sizeof(float));
    CHECK(same, "same seed, same weights");
    mha_layer_init(b, "xavier_uniform", 43, NULL);
    CHECK(memcmp(param(a, "in_proj_weight"), param(b, "in_proj_weight"), 64) != 0,
          "another seed differs");

    struct {
        const char *name;
        double bound, std;
    } dist[] = {
        {"in_proj_weight", sqrt(6.0 / (256 + 768)), sqrt(6.0 / (256 + 768)) / sqrt(3.0)},
        {"out_proj.weight", 1.0 / 16.0, 1.0 / 16.0 / sqrt(3.0)},
        {"bias_k", INFINITY, sqrt(2.0 / (256 + 256))},
        {"bias_v", INFINITY, sqrt(2.0 / (256 + 256))},
    };
    for (int d = 0; d < 4; d++) {
        int i = mha_layer_param_find(a, dist[d].name);
        const float *x = mha_layer_param_data(a, i);
        int64_t cnt = mha_layer_param_info(a, i)->count;
        double sum = 0, sq = 0, mx = 0;
        for (int64_t j = 0; j < cnt; j++) {
            sum += x[j];
            sq += (double)x[j] * x[j];
            mx = fmax(mx, fabs(x[j]));
        }
        double mean = sum / cnt, sd = sqrt(sq / cnt - mean * mean);
        double tol = 4 * dist[d].std / sqrt((double)cnt) * (cnt < 1000 ? 1.5 : 1);
        CHECK(fabs(mean) < tol + 1e-9, "%s mean %g", dist[d].name, mean);
        CHECK(fabs(sd - dist[d].std) < dist[d].std * (cnt < 1000 ? 0.2 : 0.02),
              "%s std %g, want %g", dist[d].name, sd, dist[d].std);
        CHECK(mx <= dist[d].bound, "%s within bound %g (max %g)", dist[d].name, dist[d].bound, mx);
        if (isfinite(dist[d].bound))
            CHECK(mx > dist[d].bound * 0.99, "%s reaches near its bound", dist[d].name);
    }
    const float *bias = param(a, "in_proj_bias");
    bool zero = true;
    for (int j = 0; j < 768; j++)
        zero &= bias[j] == 0.0f;
    CHECK(zero, "in_proj_bias is zero after init");
    mha_layer_init(a, "zeros", 0, NULL);
    CHECK(param(a, "in_proj_weight")[100] == 0.0f && param(a, "bias_k")[3] == 0.0f, "zeros init");
    mha_layer_free(a);
    mha_layer_free(b);
}

int main(void)
{
    mha_blas_set_threads(1);
    mha_error err;
    mha_pool *pool2 = mha_pool_create(2, &err);
    CHECK(pool2 && mha_pool_threads(pool2) == 2, "pool of 2");
    test_params_and_init();
    test_errors();
    test_fully_masked();
    test_overflowed_scores();
    test_random_cases(pool2);
    test_larger_cases(pool2);
    test_concurrency(pool2);
    test_output_same_across_modes(pool2);
    test_workspace_bound();
    test_workspace_limit_with_pool(pool2);
    mha_pool_free(pool2);
    return check_report();
}
