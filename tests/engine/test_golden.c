/*
 * test_golden.c - replays every torch-generated golden case (tests/golden/, see its README.md)
 * through lib/mha.h and compares output, attention weights and every trace stage with torch's
 * numbers, at the project's tolerance (check.h: 2e-5 absolute + 1e-4 relative; -inf must be -inf).
 *
 *   test_golden [DIR]      DIR defaults to tests/golden and tests/golden_variants (the extensions
 *                          beyond torch: head_dim, num_kv_heads, rope, alibi, window, positions);
 *                          point it at the output of `tests/torch/gen_golden.py --random N --seed S
 *                          --out DIR [--variants]` for cases outside the repo
 *
 * Each case runs six times: on the calling thread only (no pool) and on a 2-thread pool (with
 * OpenBLAS set to one thread, as the engine wants when it has its own pool), each with every trace
 * stage requested and with none (the path requests take when they want no trace, which need not hold
 * the scores), and on the pool again with ATTND_ISA=generic (the attention's GEMMs on cblas instead
 * of the AVX-512 kernels). Output buffers start as NaN, so an entry the engine forgets to write
 * fails too.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "golden.h"
#include "mha.h"

static float *nan_buffer(int64_t count)
{
    float *p = malloc((size_t)(count > 0 ? count : 1) * sizeof *p);
    if (p)
        for (int64_t i = 0; i < count; i++)
            p[i] = NAN;
    return p;
}

static bool same_shape(int ndim, const int64_t *shape, const golden_tensor *t)
{
    if (ndim != t->ndim)
        return false;
    for (int i = 0; i < ndim; i++)
        if (shape[i] != t->shape[i])
            return false;
    return true;
}

static void shape_str(char *buf, size_t len, int ndim, const int64_t *shape)
{
    size_t o = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, i ? ",%lld" : "%lld", (long long)shape[i]);
    if (o < len)
        snprintf(buf + o, len - o, "]");
}

/* Checks got against the golden tensor want, whose shape must be (ndim, shape). */
static void compare(const char *label, const char *what, const float *got, int ndim, const int64_t *shape,
                    const golden_tensor *want)
{
    char name[256], a[96], b[96];
    snprintf(name, sizeof name, "%s: %s", label, what);
    if (!same_shape(ndim, shape, want)) {
        shape_str(a, sizeof a, ndim, shape);
        shape_str(b, sizeof b, want->ndim, want->shape);
        CHECK(false, "%s: engine shape %s, torch shape %s", name, a, b);
        return;
    }
    CHECK_CLOSE_ARRAY(name, got, want->data, want->count);
}

/* Builds the case's layer from its config and torch's weights. NULL (and a failed check) on error. */
static mha_layer *build_layer(const golden_case *c)
{
    mha_error err = {0};
    mha_layer *layer = mha_layer_create(&c->config, NULL, &err);
    if (!CHECK(layer, "%s: mha_layer_create: %s (%s)", c->name, err.message, err.field))
        return NULL;
    bool ok = CHECK(mha_layer_param_count(layer) == c->n_weights,
                    "%s: the layer has %d parameters, torch's state_dict %d", c->name,
                    mha_layer_param_count(layer), c->n_weights);
    for (int i = 0; i < c->n_weights && ok; i++) {
        const golden_weight *w = &c->weights[i];
        mha_status st = mha_layer_set_param(layer, w->name, w->t.data, w->t.ndim, w->t.shape, &err);
        ok = CHECK(st == MHA_OK, "%s: set %s: %s", c->name, w->name, err.message);
    }
    if (!ok) {
        mha_layer_free(layer);
        return NULL;
    }
    return layer;
}

/* One forward pass of case c on layer (pool may be NULL), with every trace stage or none, everything
 * compared with torch. */
static void run_case(const golden_case *c, const mha_layer *layer, mha_pool *pool, bool with_trace,
                     bool generic)
{
    char label[256];
    snprintf(label, sizeof label, "%s (%s, %s%s)", c->name, pool ? "2-thread pool" : "no pool",
             with_trace ? "trace" : "no trace", generic ? ", ATTND_ISA=generic" : "");
    mha_inputs in = golden_inputs(c);
    mha_plan plan;
    mha_error err = {0};
    if (generic)
        setenv("ATTND_ISA", "generic", 1);
    mha_status st = mha_plan_forward(layer, &in, NULL, &plan, &err);
    unsetenv("ATTND_ISA");
    if (!CHECK(st == MHA_OK, "%s: mha_plan_forward: %s (%s)", label, err.message, err.field))
        return;

    float *output = nan_buffer(plan.out_count);
    float *weights = c->need_weights ? nan_buffer(plan.weights_count) : NULL;
    mha_trace trace;
    int64_t stage_shape[MHA_TRACE_NSTAGES][4];
    int stage_ndim[MHA_TRACE_NSTAGES];
    bool alloc_ok = output && (!c->need_weights || weights);
    for (int s = 0; s < MHA_TRACE_NSTAGES; s++) {
        int64_t count = 0;
        stage_ndim[s] = mha_trace_stage_shape(&plan, (mha_trace_stage)s, stage_shape[s], &count);
        trace.stage[s] = with_trace ? nan_buffer(count) : NULL;
        alloc_ok = alloc_ok && (trace.stage[s] || !with_trace);
    }
    if (CHECK(alloc_ok, "%s: out of memory", label)) {
        st = mha_forward(layer, &in, &plan, output, weights, with_trace ? &trace : NULL, pool, &err);
        if (CHECK(st == MHA_OK, "%s: mha_forward: %s (%s)", label, err.message, err.field)) {
            compare(label, "output", output, plan.out_ndim, plan.out_shape, &c->output);
            if (c->need_weights)
                compare(label, "attn_weights", weights, plan.weights_ndim, plan.weights_shape,
                        &c->attn_weights);
            else
                CHECK(plan.weights_ndim == 0, "%s: need_weights is false, plan has weights", label);
            for (int s = 0; s < MHA_TRACE_NSTAGES; s++) {
                if (!with_trace || !c->trace[s].present)
                    continue;
                char what[64];
                snprintf(what, sizeof what, "trace %s", golden_stage_name(s));
                CHECK(strcmp(mha_trace_stage_name((mha_trace_stage)s), golden_stage_name(s)) == 0,
                      "stage %d is called %s by the engine, %s in the golden files", s,
                      mha_trace_stage_name((mha_trace_stage)s), golden_stage_name(s));
                compare(label, what, trace.stage[s], stage_ndim[s], stage_shape[s], &c->trace[s]);
            }
        }
    }
    free(output);
    free(weights);
    for (int s = 0; s < MHA_TRACE_NSTAGES; s++)
        free(trace.stage[s]);
}

/* Replays every case of dir; returns how many failed. */
static int replay_dir(const char *dir, mha_pool *pool)
{
    char **paths = NULL;
    int n = golden_list(&paths, dir);
    CHECK(n > 0, "no golden cases in %s", dir);
    int failed_before = check_failed, cases_failed = 0;
    for (int i = 0; i < n; i++) {
        golden_case c;
        char msg[512];
        int before = check_failed;
        if (!CHECK(golden_load(&c, paths[i], msg, sizeof msg) == 0, "%s", msg))
            continue;
        mha_layer *layer = build_layer(&c);
        if (layer) {
            for (int t = 0; t < 2; t++) {
                run_case(&c, layer, NULL, t == 0, false);
                if (pool)
                    run_case(&c, layer, pool, t == 0, false);
                if (pool)
                    run_case(&c, layer, pool, t == 0, true);
            }
        }
        if (check_failed != before) {
            cases_failed++;
            printf("  in %s: %s\n", paths[i], c.description);
        }
        mha_layer_free(layer);
        golden_free(&c);
    }
    printf("%d golden cases from %s, %d failed (%d failed checks)\n", n < 0 ? 0 : n, dir, cases_failed,
           check_failed - failed_before);
    golden_list_free(paths, n);
    return cases_failed;
}

int main(int argc, char **argv)
{
    mha_blas_set_threads(1);
    mha_error err = {0};
    mha_pool *pool = mha_pool_create(2, &err);
    CHECK(pool, "mha_pool_create(2): %s", err.message);
    if (argc > 1) {
        replay_dir(argv[1], pool);
    } else {
        replay_dir("tests/golden", pool);
        replay_dir("tests/golden_variants", pool);
    }
    mha_pool_free(pool);
    return check_report();
}
