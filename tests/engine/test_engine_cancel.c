/*
 * test_engine_cancel.c - mha_inputs.cancel: a pass whose caller sets the flag stops between blocks
 * of work and returns MHA_ERR_CANCELLED (lib/mha_forward.c), on one thread and on a pool.
 *
 *   - a flag set before the pass: MHA_ERR_CANCELLED, and no block of work runs (the output keeps
 *     the sentinel it was filled with), with weights and a trace too;
 *   - a flag set by another thread 30 ms into a pass of seconds (attention-heavy: L = S = 16384 on
 *     E=64; projection-heavy: 16384 rows of E=1024): MHA_ERR_CANCELLED, and the out-projection,
 *     the pass's last step, never ran (the output still holds the sentinel): the work after the
 *     flag was skipped, not finished;
 *   - a flag left at 0 changes nothing: the output is bit for bit the one without a flag, and a
 *     pool used by cancelled passes still computes right.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "mha.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static float *filled(int64_t n, float v)
{
    float *p = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        p[i] = v;
    return p;
}

static float *ramp(int64_t n)
{
    float *p = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        p[i] = (float)((i * 7919) % 2001) / 1000.0f - 1.0f;
    return p;
}

/* Elements of p[0, n) that are not NaN (a sentinel NaN left means nothing was written there). */
static int64_t written(const float *p, int64_t n)
{
    int64_t w = 0;
    for (int64_t i = 0; i < n; i++)
        w += p[i] == p[i];
    return w;
}

static mha_layer *layer_of(int64_t E, int64_t H)
{
    mha_config cfg;
    mha_config_init(&cfg, E, H);
    mha_layer *l = mha_layer_create(&cfg, NULL, NULL);
    mha_layer_init(l, "xavier_uniform", 3, NULL);
    return l;
}

static void set_query(mha_inputs *in, const float *x, int64_t N, int64_t L, int64_t E)
{
    memset(in, 0, sizeof *in);
    in->query.data = x;
    in->query.ndim = 3;
    in->query.shape[0] = N;
    in->query.shape[1] = L;
    in->query.shape[2] = E;
    in->average_attn_weights = true;
}

static void test_set_before(mha_pool *pool)
{
    mha_layer *l = layer_of(64, 4);
    float *x = ramp(2 * 300 * 64);
    int flag = 1;
    for (int p = 0; p < 2; p++) {
        mha_inputs in;
        set_query(&in, x, 2, 300, 64);
        in.need_weights = true;
        in.average_attn_weights = false;
        in.cancel = &flag;
        mha_plan plan;
        CHECK(mha_plan_forward(l, &in, NULL, &plan, NULL) == MHA_OK, "plan");
        float *out = filled(plan.out_count, NAN), *w = filled(plan.weights_count, NAN);
        mha_trace tr = {0};
        int64_t shape[4], count;
        mha_trace_stage_shape(&plan, MHA_TRACE_SCORES, shape, &count);
        tr.stage[MHA_TRACE_SCORES] = filled(count, NAN);
        mha_error err = {0};
        mha_status st = mha_forward(l, &in, &plan, out, w, &tr, p ? pool : NULL, &err);
        CHECK(st == MHA_ERR_CANCELLED && !strcmp(mha_status_name(st), "cancelled") &&
                  err.status == MHA_ERR_CANCELLED && err.message[0],
              "%s: a flag set before the pass: cancelled (%d: %s)", p ? "pool" : "one thread", st,
              err.message);
        CHECK(written(out, plan.out_count) == 0 && written(w, plan.weights_count) == 0 &&
                  written(tr.stage[MHA_TRACE_SCORES], count) == 0,
              "%s: no block of work ran", p ? "pool" : "one thread");
        free(out);
        free(w);
        free(tr.stage[MHA_TRACE_SCORES]);
    }
    free(x);
    mha_layer_free(l);
}

typedef struct canceller {
    int *flag;
    int after_ms;
} canceller;

static void *cancel_later(void *p)
{
    canceller *c = p;
    struct timespec ts = {0, (long)c->after_ms * 1000000L};
    nanosleep(&ts, NULL); /* lets the pass get going: what is tested is what it does next */
    __atomic_store_n(c->flag, 1, __ATOMIC_RELAXED);
    return NULL;
}

/* A pass of seconds, cancelled 30 ms in from another thread. */
static void cancel_during(const char *what, int64_t E, int64_t H, int64_t N, int64_t L,
                          mha_pool *pool)
{
    mha_layer *l = layer_of(E, H);
    float *x = ramp(N * L * E);
    int flag = 0;
    mha_inputs in;
    set_query(&in, x, N, L, E);
    in.cancel = &flag;
    mha_limits lim;
    mha_limits_default(&lim);
    mha_plan plan;
    if (!CHECK(mha_plan_forward(l, &in, &lim, &plan, NULL) == MHA_OK, "%s: plan", what))
        return;
    float *out = filled(plan.out_count, NAN);
    canceller c = {&flag, 30};
    pthread_t t;
    pthread_create(&t, NULL, cancel_later, &c);
    double t0 = now_s();
    mha_error err = {0};
    mha_status st = mha_forward(l, &in, &plan, out, NULL, NULL, pool, &err);
    double took = now_s() - t0;
    pthread_join(t, NULL);
    CHECK(st == MHA_ERR_CANCELLED, "%s (%.2g FLOPs): cancelled 30 ms in (status %d)", what,
          plan.flops, st);
    CHECK(written(out, plan.out_count) == 0,
          "%s: the out-projection, the last step, never ran (%lld of %lld written)", what,
          (long long)written(out, plan.out_count), (long long)plan.out_count);
    printf("  %s: %.2g FLOPs, returned %.3f s after its start, cancelled at 0.030 s\n", what,
           plan.flops, took);
    free(out);
    free(x);
    mha_layer_free(l);
}

/* A pooled selection whose pooled rows span row blocks (100 rows: blocks of 64, grouped by four
 * at this length) on the pool: a block adds its part of a shared pooled row after the block above
 * it, and a pass cancelled while one waits for a block that stopped must still return. Cancelled
 * at 30 times spread over the pass; a hang here is the failure. */
static void test_cancel_shared_pool(mha_pool *pool)
{
    const int64_t E = 256, H = 4, L = 4096;
    mha_layer *l = layer_of(E, H);
    float *x = ramp(L * E);
    mha_select sel = {.has_pool = true, .pool = {100, 64}, .pool_op = MHA_POOL_MEAN};
    mha_inputs in;
    set_query(&in, x, 1, L, E);
    in.need_weights = true;
    in.average_attn_weights = false;
    in.select = &sel;
    mha_plan plan;
    if (!CHECK(mha_plan_forward(l, &in, NULL, &plan, NULL) == MHA_OK, "pooled selection: plan"))
        return;
    float *out = filled(plan.out_count, NAN), *w = filled(plan.weights_count, NAN);
    double t0 = now_s();
    CHECK(mha_forward(l, &in, &plan, out, w, NULL, pool, NULL) == MHA_OK, "uncancelled pass");
    const double pass_ms = (now_s() - t0) * 1e3;
    int cancelled = 0, runs = 30;
    for (int k = 0; k < runs; k++) {
        int flag = 0;
        in.cancel = &flag;
        canceller c = {&flag, 1 + (int)(pass_ms * k / runs)};
        pthread_t t;
        pthread_create(&t, NULL, cancel_later, &c);
        mha_status st = mha_forward(l, &in, &plan, out, w, NULL, pool, NULL);
        pthread_join(t, NULL);
        cancelled += st == MHA_ERR_CANCELLED;
        if (!CHECK(st == MHA_ERR_CANCELLED || st == MHA_OK, "cancelled at %d ms: status %d",
                   c.after_ms, st))
            break;
    }
    CHECK(cancelled > 0, "%d of %d passes (%.0f ms each) cancelled, every one returned",
          cancelled, runs, pass_ms);
    free(out);
    free(w);
    free(x);
    mha_layer_free(l);
}

/* A flag left at 0: the same bits as no flag (the projections are tiled finer then), and a pool
 * that ran cancelled passes still computes right. */
static void test_flag_unset(mha_pool *pool)
{
    mha_layer *l = layer_of(256, 8);
    const int64_t N = 3, L = 700, E = 256;
    float *x = ramp(N * L * E);
    float *out[4];
    int zero = 0;
    for (int k = 0; k < 4; k++) {
        mha_inputs in;
        set_query(&in, x, N, L, E);
        in.cancel = k & 1 ? &zero : NULL;
        mha_plan plan;
        mha_plan_forward(l, &in, NULL, &plan, NULL);
        out[k] = filled(plan.out_count, NAN);
        CHECK(mha_forward(l, &in, &plan, out[k], NULL, NULL, k & 2 ? pool : NULL, NULL) == MHA_OK,
              "pass %d runs", k);
    }
    size_t bytes = (size_t)(N * L * E) * sizeof(float);
    CHECK(!memcmp(out[0], out[1], bytes), "one thread: a flag at 0 gives the same bits as none");
    CHECK(!memcmp(out[2], out[3], bytes), "pool: a flag at 0 gives the same bits as none");
    double maxd = 0;
    for (int64_t i = 0; i < N * L * E; i++)
        maxd = fmax(maxd, fabs((double)out[0][i] - out[2][i]));
    CHECK(maxd < 1e-5, "the pool agrees with one thread after cancelled passes (max diff %g)", maxd);
    for (int k = 0; k < 4; k++)
        free(out[k]);
    free(x);
    mha_layer_free(l);
}

int main(void)
{
    mha_blas_set_threads(1);
    mha_error err;
    mha_pool *pool = mha_pool_create(2, &err);
    CHECK(pool != NULL, "pool of 2");
    test_set_before(pool);
    cancel_during("attention, one thread", 64, 4, 1, 16384, NULL);
    cancel_during("attention, pool", 64, 4, 1, 16384, pool);
    cancel_during("projections, one thread", 1024, 16, 128, 128, NULL);
    cancel_during("projections, pool", 1024, 16, 128, 128, pool);
    test_flag_unset(pool);
    test_cancel_shared_pool(pool);
    mha_pool_free(pool);
    return check_report();
}
