/*
 * forward.c - the shared forward path (see forward.h).
 */
#include "forward.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/bigbuf.h"
#include "base/sysinfo.h"
#include "codec/float_parse.h"

/* Passes below this many FLOPs (about a millisecond of one core) run on the calling thread alone. */
#define POOL_MIN_FLOPS 2e7

void srv_forward_args_init(srv_forward_args *a)
{
    memset(a, 0, sizeof *a);
    a->average_attn_weights = true;
    a->need_output = true;
}

void srv_forward_args_free(srv_forward_args *a)
{
    if (!a)
        return;
    srv_tensor_free(&a->query);
    srv_tensor_free(&a->key);
    srv_tensor_free(&a->value);
    srv_tensor_free(&a->key_padding_mask);
    srv_tensor_free(&a->attn_mask);
    srv_select_free(&a->select);
    srv_positions_free(&a->positions);
    srv_positions_free(&a->key_positions);
}

void srv_forward_result_free(srv_forward_result *r)
{
    if (!r)
        return;
    srv_bigbuf_array_free(r->output);
    srv_bigbuf_array_free(r->attn_weights);
    srv_bigbuf_array_free(r->topk_indices);
    for (int i = 0; i < MHA_TRACE_NSTAGES; i++) {
        srv_bigbuf_array_free(r->stage[i]);
        srv_bigbuf_array_free(r->stage_indices[i]);
    }
    memset(r, 0, sizeof *r);
}

/* A float32 input tensor of the request into the engine's view (borrowed). */
static int to_tensor(mha_tensor *out, const srv_tensor *t, const char *field, srv_error *err)
{
    memset(out, 0, sizeof *out);
    if (!t->data)
        return 0;
    if (t->dtype != SRV_DTYPE_F32)
        return srv_error_set(err, SRV_E_BAD_REQUEST, field,
                             "%s must hold numbers (float32), not booleans", field);
    if (t->ndim < 2 || t->ndim > 3)
        return srv_error_set(err, SRV_E_SHAPE, field,
                             "%s has %d dimensions; it must have 3 (batched) or 2 (unbatched)",
                             field, t->ndim);
    out->data = t->data;
    out->ndim = t->ndim;
    memcpy(out->shape, t->shape, (size_t)t->ndim * sizeof *t->shape);
    return 0;
}

/* Positions of the request into the engine's view (borrowed); absent stays absent. */
static void to_positions(mha_positions *out, const srv_positions *p)
{
    memset(out, 0, sizeof *out);
    if (p->ndim == 0)
        return;
    out->data = p->data;
    out->ndim = p->ndim;
    out->shape[0] = p->shape[0];
    out->shape[1] = p->shape[1];
}

static int to_mask(mha_mask *out, const srv_tensor *t, const char *field, srv_error *err)
{
    memset(out, 0, sizeof *out);
    if (!t->data)
        return 0;
    if (t->ndim < 1 || t->ndim > 4)
        return srv_error_set(err, SRV_E_SHAPE, field, "%s has %d dimensions; masks have 1 to 3",
                             field, t->ndim);
    out->data = t->data;
    out->type = t->dtype == SRV_DTYPE_BOOL ? MHA_MASK_BOOL : MHA_MASK_FLOAT;
    out->ndim = t->ndim;
    memcpy(out->shape, t->shape, (size_t)t->ndim * sizeof *t->shape);
    return 0;
}

/* How often a pass waiting for a slot looks whether its client is still there. */
#define GONE_CHECK_MS 50

static bool gone(const int *cancel)
{
    return cancel && __atomic_load_n(cancel, __ATOMIC_RELAXED);
}

/* now + ms as a CLOCK_REALTIME deadline. */
static struct timespec after_ms(long ms)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_sec += ms / 1000;
    t.tv_nsec += (ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

/* A slot this thread took for the request it is handling (srv_forward_slot_try) and that request's
 * pass has not taken over yet: 0 none, 1 taken, 2 taken while no other pass was in flight. Per
 * thread, as an HTTP thread handles one request at a time. */
static __thread int slot_held;

bool srv_forward_slot_try(srv_app *app)
{
    pthread_mutex_lock(&app->inflight_lock);
    const bool free_slot = app->inflight < app->opt.max_inflight;
    if (free_slot)
        slot_held = ++app->inflight == 1 ? 2 : 1;
    pthread_mutex_unlock(&app->inflight_lock);
    return free_slot;
}

static void inflight_leave(srv_app *app);

void srv_forward_slot_drop(srv_app *app)
{
    if (!slot_held)
        return; /* its pass took it over, and has given it back */
    slot_held = 0;
    inflight_leave(app);
}

/* Takes a slot under --max-inflight, waiting up to --queue-wait-ms, and no longer once the client
 * is gone (cancel); or the one srv_forward_slot_try took for this request. *alone tells whether
 * no other pass is in flight. */
static int inflight_enter(srv_app *app, const int *cancel, bool *alone, srv_error *err)
{
    if (slot_held) {
        *alone = slot_held == 2;
        slot_held = 0;
        return 0;
    }
    int rc = 0;
    pthread_mutex_lock(&app->inflight_lock);
    if (app->inflight >= app->opt.max_inflight) {
        const struct timespec until = after_ms(app->opt.queue_wait_ms);
        app->inflight_waiting++;
        /* in steps, so a wait whose client hung up ends within GONE_CHECK_MS */
        while (app->inflight >= app->opt.max_inflight && rc == 0 && !gone(cancel)) {
            struct timespec step = after_ms(GONE_CHECK_MS);
            bool last = step.tv_sec > until.tv_sec ||
                        (step.tv_sec == until.tv_sec && step.tv_nsec >= until.tv_nsec);
            rc = pthread_cond_timedwait(&app->inflight_cond, &app->inflight_lock,
                                        last ? &until : &step);
            if (rc == ETIMEDOUT && !last)
                rc = 0;
        }
        if (app->inflight < app->opt.max_inflight)
            rc = 0;
        app->inflight_waiting--;
    }
    bool left = gone(cancel);
    if (rc == 0 && !left)
        *alone = ++app->inflight == 1;
    pthread_mutex_unlock(&app->inflight_lock);
    if (left)
        return srv_error_set(err, SRV_E_CANCELLED, "",
                             "the client hung up while its pass waited for a slot");
    if (rc != 0)
        return srv_error_set(err, SRV_E_UNAVAILABLE, "",
                             "busy: %d forward passes in flight (--max-inflight); retry shortly",
                             app->opt.max_inflight);
    return 0;
}

static void inflight_leave(srv_app *app)
{
    pthread_mutex_lock(&app->inflight_lock);
    app->inflight--;
    pthread_cond_signal(&app->inflight_cond);
    pthread_mutex_unlock(&app->inflight_lock);
}

/* Output buffers of count floats (count already checked against the limits), from bigbuf.h's
 * array cache: 64-byte aligned (the engine streams per-head weights out with non-temporal stores
 * only where a row starts on a cache line), large ones on huge pages and kept faulted in between
 * requests. Freed with srv_bigbuf_array_free. */
static float *alloc_floats(int64_t count)
{
    return srv_bigbuf_array_alloc((size_t)(count > 0 ? count : 1) * sizeof(float));
}

/* The index of the first value of p[0..count) that is NaN or +inf, and -inf too unless allow_neg_inf;
 * -1 when there is none. One branch-free pass first: the usual answer is "none". */
static int64_t first_special(const float *p, int64_t count, bool allow_neg_inf)
{
    if (!p || !srv_floats_any_special(p, (size_t)count))
        return -1;
    for (int64_t i = 0; i < count; i++)
        if (p[i] != p[i] || p[i] == INFINITY || (p[i] == -INFINITY && !allow_neg_inf))
            return i;
    return -1;
}

/* Inputs and weights are finite, yet float32 can overflow on the way (values near 1e19 give
 * q·kT past 3.4e38, then softmax NaN). torch answers NaN there; JSON cannot carry it (docs/api.md), and
 * "nan" strings where a client's schema has numbers are no answer. Refused as a 400 naming the
 * first bad value: the trace's scores may hold -inf (masked keys), nothing else may. */
static int check_finite(const srv_forward_result *r, srv_error *err)
{
    const char *what = NULL;
    int64_t at = first_special(r->output, r->plan.out_count, false);
    if (at >= 0)
        what = "output";
    if (!what && (at = first_special(r->attn_weights, r->plan.weights_count, false)) >= 0)
        what = "attn_weights";
    for (int s = 0; !what && s < MHA_TRACE_NSTAGES; s++) {
        int64_t shape[4], count;
        mha_trace_stage_shape(&r->plan, (mha_trace_stage)s, shape, &count);
        if ((at = first_special(r->stage[s], count, s == MHA_TRACE_SCORES)) >= 0)
            what = mha_trace_stage_name((mha_trace_stage)s);
    }
    if (!what)
        return 0;
    return srv_error_set(err, SRV_E_BAD_VALUE, "",
                         "the pass overflowed float32: %s element %lld is not finite (torch gives "
                         "NaN here, which JSON cannot carry); inputs or weights are too large, "
                         "scale them down", what, (long long)at);
}

/* 413 too_costly for a pass of flops on N batches of L queries and S0 keys. */
static int too_costly(const srv_app *app, double flops, int64_t N, int64_t L, int64_t S0,
                      const mha_config *cfg, srv_error *err)
{
    if (flops <= (double)app->opt.max_request_flops)
        return 0;
    return srv_error_set(err, SRV_E_TOO_COSTLY, "query",
                         "this pass would cost %.3g FLOPs (N=%lld, L=%lld, S=%lld on embed_dim %lld), "
                         "over the limit of %.3g (--max-request-flops%s); "
                         "send a shorter sequence or a smaller batch",
                         flops, (long long)N, (long long)L, (long long)S0,
                         (long long)cfg->embed_dim, (double)app->opt.max_request_flops,
                         app->opt.max_request_flops == SRV_DEFAULT_MAX_REQUEST_FLOPS
                             ? ", about a minute of one core"
                             : ""); /* a limit the operator chose says nothing of time */
}

int srv_forward_check_cost(const srv_app *app, const mha_config *cfg, int q_ndim, const int64_t *q,
                           int k_ndim, const int64_t *k, srv_error *err)
{
    if (!k) {
        k = q;
        k_ndim = q_ndim;
    }
    /* Shapes that are not a pass's (rank, features, batch, or a tensor over its size limit) are
     * judged later by the parse and the plan, which say what is wrong: that comes first. */
    const int64_t kd = k == q || !cfg->kdim ? cfg->embed_dim : cfg->kdim;
    if (q_ndim < 2 || q_ndim > 3 || k_ndim != q_ndim || q[q_ndim - 1] != cfg->embed_dim ||
        k[k_ndim - 1] != kd)
        return 0;
    int64_t qn = 1, kn = 1;
    for (int d = 0; d < q_ndim; d++)
        if (q[d] <= 0 || k[d] <= 0 || __builtin_mul_overflow(qn, q[d], &qn) ||
            __builtin_mul_overflow(kn, k[d], &kn))
            return 0;
    if (qn > app->opt.max_tensor_elements || kn > app->opt.max_tensor_elements)
        return 0;
    const bool batched = q_ndim == 3, bf = cfg->batch_first;
    const int64_t N = batched ? q[bf ? 0 : 1] : 1;
    const int64_t L = batched ? q[bf ? 1 : 0] : q[0];
    const int64_t S0 = batched ? k[bf ? 1 : 0] : k[0];
    if (batched && k[bf ? 0 : 1] != N)
        return 0;
    return too_costly(app, mha_flops(cfg, N, L, S0), N, L, S0, cfg, err);
}

int srv_forward_run(srv_app *app, const srv_layer *layer, const srv_forward_args *a,
                    unsigned stages, srv_forward_result *out, srv_error *err)
{
    memset(out, 0, sizeof *out);
    mha_inputs in;
    memset(&in, 0, sizeof in);
    if (!a->query.data)
        return srv_error_set(err, SRV_E_MISSING_FIELD, "query", "query is required");
    if (to_tensor(&in.query, &a->query, "query", err) < 0 ||
        to_tensor(&in.key, &a->key, "key", err) < 0 ||
        to_tensor(&in.value, &a->value, "value", err) < 0 ||
        to_mask(&in.key_padding_mask, &a->key_padding_mask, "key_padding_mask", err) < 0 ||
        to_mask(&in.attn_mask, &a->attn_mask, "attn_mask", err) < 0)
        return -1;
    to_positions(&in.positions, &a->positions);
    to_positions(&in.key_positions, &a->key_positions);
    /* a request that leaves is_causal out gets the layer's default (config is_causal) */
    in.is_causal = a->is_causal_given ? a->is_causal : mha_layer_config(layer->layer)->is_causal;
    /* a trace's attn_weights stage is forward's attn_weights (trace.h); a selection implies them */
    in.need_weights = stages ? (stages & 1u << MHA_TRACE_ATTN_WEIGHTS) != 0
                             : a->need_weights || a->select.given;
    in.average_attn_weights = a->average_attn_weights;
    in.select = a->select.given ? &a->select.sel : NULL;
    out->weights_dtype = a->select.dtype;
    in.cancel = a->cancel; /* the engine stops between blocks once the client hangs up */

    mha_error me = {0};
    if (mha_plan_forward(layer->layer, &in, &app->limits, &out->plan, &me) != MHA_OK) {
        if (me.status == MHA_ERR_LIMIT && strcmp(me.field, "need_weights") == 0)
            /* the full map past the size limit: say which limit, and what the request can do;
             * a trace asks for the map by its stages, not by need_weights */
            return srv_error_set(err, SRV_E_TOO_LARGE, stages ? "stages" : "need_weights",
                                 "%s (the limit is --max-tensor-elements)%s", me.message,
                                 stages ? "; or leave attn_weights out of the trace's \"stages\""
                                        : "");
        return srv_select_engine_error(err, &me, a->select_style);
    }
    if (too_costly(app, out->plan.flops, out->plan.N, out->plan.L, out->plan.S0,
                   mha_layer_config(layer->layer), err) < 0)
        return -1;

    mha_trace tr;
    memset(&tr, 0, sizeof tr);
    bool trace = stages != 0;
    if (trace) {
        /* the limit counts what the reply holds: the stages asked for, as trace.h shows them */
        bool batch_first = mha_layer_config(layer->layer)->batch_first;
        int64_t total = 0;
        for (int s = 0; s < MHA_TRACE_NSTAGES; s++) {
            if (!(stages & 1u << s))
                continue;
            srv_trace_stage v;
            srv_trace_stage_view(&out->plan, batch_first, a->average_attn_weights,
                                 (mha_trace_stage)s, &v);
            /* a top-k stage has its key indices besides */
            int64_t n = v.count > INT64_MAX / 2 ? INT64_MAX / 2 : v.count;
            if (out->plan.top_k && (s == MHA_TRACE_SCORES || s == MHA_TRACE_ATTN_WEIGHTS))
                n *= 2;
            total = n > INT64_MAX - total ? INT64_MAX : total + n;
        }
        if (total > app->opt.max_trace_elements)
            return srv_error_set(err, SRV_E_TOO_LARGE, "query",
                                 "the trace would hold %lld numbers, over the limit of %lld "
                                 "(--max-trace-elements); trace a shorter sequence or batch, or "
                                 "ask for fewer stages (\"stages\": [...])",
                                 (long long)total, (long long)app->opt.max_trace_elements);
        for (int s = 0; s < MHA_TRACE_NSTAGES; s++) {
            if (!(stages & 1u << s) || s == MHA_TRACE_OUTPUT || s == MHA_TRACE_ATTN_WEIGHTS)
                continue; /* those two are forward's own buffers */
            int64_t shape[4], count;
            mha_trace_stage_shape(&out->plan, (mha_trace_stage)s, shape, &count);
            out->stage[s] = tr.stage[s] = alloc_floats(count);
            if (!tr.stage[s])
                goto nomem;
            if (out->plan.top_k && s == MHA_TRACE_SCORES) {
                out->stage_indices[s] = tr.indices[s] = (int32_t *)alloc_floats(count);
                if (!tr.indices[s])
                    goto nomem;
            }
        }
        out->traced = stages;
    }
    out->output = alloc_floats(out->plan.out_count);
    if (!out->output)
        goto nomem;
    if (in.need_weights) {
        out->attn_weights = alloc_floats(out->plan.weights_count);
        if (!out->attn_weights)
            goto nomem;
        if (out->plan.top_k) { /* int32, as many as the values */
            out->topk_indices = (int32_t *)alloc_floats(out->plan.weights_count);
            if (!out->topk_indices)
                goto nomem;
        }
    }

    bool alone = false;
    double t_queue = srv_now();
    if (inflight_enter(app, a->cancel, &alone, err) < 0) {
        srv_forward_result_free(out);
        return -1;
    }
    double t_pass = srv_now();
    /* A pass that runs alone spreads over the engine's pool (--blas-threads); passes that run at
     * the same time take one thread each (their HTTP thread), so the threads computing never
     * outnumber the cores by more than the pool's workers for the moment two passes overlap.
     * Small passes stay on their thread: waking the pool would cost more than it saves. */
    mha_pool *pool = alone && out->plan.flops >= POOL_MIN_FLOPS ? app->pool : NULL;
    bool engine_stages = false; /* output and attn_weights alone need no engine trace */
    for (int s = 0; s < MHA_TRACE_NSTAGES; s++)
        engine_stages |= tr.stage[s] != NULL;
    mha_status st = mha_forward_select(layer->layer, &in, &out->plan, out->output,
                                       out->attn_weights, out->topk_indices,
                                       engine_stages ? &tr : NULL, pool, &me);
    inflight_leave(app);
    out->queue_s = t_pass - t_queue;
    out->pass_s = srv_now() - t_pass;
    if (st == MHA_OK)
        srv_metrics_forward(app->metrics, trace, out->plan.flops);
    if (st != MHA_OK) {
        srv_forward_result_free(out);
        return srv_error_from_mha(err, &me, "");
    }
    if (check_finite(out, err) < 0) {
        srv_forward_result_free(out);
        return -1;
    }
    return 0;

nomem:
    srv_forward_result_free(out);
    return srv_error_set(err, SRV_E_NOMEM, "", "out of memory for the outputs; retry later");
}

void srv_forward_count(const srv_layer *layer, const srv_request *req, bool ok, double input_s,
                       const srv_forward_result *r, double output_s)
{
    double now = srv_now();
    srv_inference_times t = {.total = now - req->t_start};
    if (ok) {
        t.input = input_s;
        t.queue = r->queue_s;
        t.infer = r->pass_s;
        t.output = output_s;
    }
    srv_layer_stats_record(layer->stats, ok, &t, now);
}
