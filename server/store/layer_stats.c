/*
 * layer_stats.c - a layer's request counters, lock-free (see layer_stats.h).
 */
#include "layer_stats.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

const double srv_latency_buckets[SRV_LATENCY_NBUCKETS] = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};

struct srv_layer_stats {
    atomic_int refs;
    atomic_uint_fast64_t success_ns, fail_count, fail_ns;
    atomic_uint_fast64_t queue_ns, input_ns, infer_ns, output_ns;
    atomic_uint_fast64_t last_inference_ms;
    atomic_uint_fast64_t latency[SRV_LATENCY_NBUCKETS + 1];
};

srv_layer_stats *srv_layer_stats_new(void)
{
    srv_layer_stats *s = calloc(1, sizeof *s); /* all-zero bytes are zero atomics on our targets */
    if (s)
        atomic_init(&s->refs, 1);
    return s;
}

srv_layer_stats *srv_layer_stats_ref(srv_layer_stats *s)
{
    if (s)
        atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
    return s;
}

void srv_layer_stats_release(srv_layer_stats *s)
{
    if (s && atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) == 1)
        free(s);
}

/* Seconds as whole nanoseconds; NaN, negative and absurd values (a clock step) count as 0. */
static uint64_t ns_of(double s)
{
    return s > 0 && s < 1.8e10 ? (uint64_t)(s * 1e9) : 0;
}

static void add(atomic_uint_fast64_t *a, uint64_t v)
{
    atomic_fetch_add_explicit(a, v, memory_order_relaxed);
}

void srv_layer_stats_record(srv_layer_stats *s, bool ok, const srv_inference_times *t, double now_s)
{
    if (!s)
        return;
    uint64_t total = ns_of(t->total);
    if (ok) {
        int b = 0;
        double secs = (double)total / 1e9;
        while (b < SRV_LATENCY_NBUCKETS && secs > srv_latency_buckets[b])
            b++;
        add(&s->latency[b], 1);
        add(&s->success_ns, total);
        add(&s->queue_ns, ns_of(t->queue));
        add(&s->input_ns, ns_of(t->input));
        add(&s->infer_ns, ns_of(t->infer));
        add(&s->output_ns, ns_of(t->output));
    } else {
        add(&s->fail_count, 1);
        add(&s->fail_ns, total);
    }
    atomic_store_explicit(&s->last_inference_ms, now_s > 0 ? (uint64_t)(now_s * 1e3) : 0,
                          memory_order_relaxed);
}

static uint64_t get(const atomic_uint_fast64_t *a)
{
    return (uint64_t)atomic_load_explicit((atomic_uint_fast64_t *)a, memory_order_relaxed);
}

void srv_layer_stats_read(const srv_layer_stats *s, srv_layer_stats_snapshot *out)
{
    memset(out, 0, sizeof *out);
    if (!s)
        return;
    for (int b = 0; b <= SRV_LATENCY_NBUCKETS; b++)
        out->success_count += out->latency[b] = get(&s->latency[b]);
    out->success_ns = get(&s->success_ns);
    out->fail_count = get(&s->fail_count);
    out->fail_ns = get(&s->fail_ns);
    out->queue_ns = get(&s->queue_ns);
    out->input_ns = get(&s->input_ns);
    out->infer_ns = get(&s->infer_ns);
    out->output_ns = get(&s->output_ns);
    out->last_inference_ms = get(&s->last_inference_ms);
}
