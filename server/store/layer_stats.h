/*
 * layer_stats.h - what a layer has served: the counters behind Triton's statistics extension
 * (GET /v2/models/{name}/stats) and the per-layer series of GET /metrics, one source for both.
 *
 * One srv_layer_stats per layer name, shared by every version of it: a replace (PUT), a reload
 * from the data dir, an unload and a load keep counting on the same counters; a delete ends them
 * (a layer created again under that name starts from zero). A request counts once it reached a
 * layer's forward path (/v1 forward and trace, /v2 infer alike): a success with its phases, or a
 * failure (a bad body, a shape the layer does not take, --max-inflight full, ...). Requests refused
 * before (unknown layer, 401, 413 from Content-Length) belong to no layer and are not counted here.
 *
 * Recording takes no lock: every counter is a relaxed atomic, as in app/metrics.c. A read takes
 * each counter once, so a read during a request may see some of its counters moved and not others.
 * The success count is the sum of the latency histogram's buckets, so the statistics and the
 * histogram of /metrics agree in every read.
 */
#ifndef ATTND_LAYER_STATS_H
#define ATTND_LAYER_STATS_H

#include <stdbool.h>
#include <stdint.h>

/* Upper bounds (seconds) of the latency histogram's buckets; the last bucket holds the rest. */
#define SRV_LATENCY_NBUCKETS 14
extern const double srv_latency_buckets[SRV_LATENCY_NBUCKETS];

/* Where one request's time went, in seconds (each >= 0; NaN or negative counts as 0). */
typedef struct srv_inference_times {
    double total;  /* from the request's arrival to its reply built                          */
    double queue;  /* waiting for a slot under --max-inflight                                */
    double input;  /* reading the body into tensors (Triton's compute_input)                 */
    double infer;  /* the forward pass itself (compute_infer)                                */
    double output; /* writing the reply (compute_output)                                     */
} srv_inference_times;

/* A copy of the counters, taken without a lock. Durations in nanoseconds. */
typedef struct srv_layer_stats_snapshot {
    uint64_t success_count; /* = the sum of latency[]                                        */
    uint64_t success_ns;    /* total time of the successful requests                         */
    uint64_t fail_count, fail_ns;
    uint64_t queue_ns, input_ns, infer_ns, output_ns; /* phases of the successful requests       */
    uint64_t last_inference_ms; /* Unix time (ms) of the last request, success or not; 0 = none  */
    uint64_t latency[SRV_LATENCY_NBUCKETS + 1]; /* successes by total time, non-cumulative       */
} srv_layer_stats_snapshot;

typedef struct srv_layer_stats srv_layer_stats;

/* New zeroed counters with one reference (the caller's), or NULL when out of memory. */
srv_layer_stats *srv_layer_stats_new(void);
/* Adds a reference (returns s) / drops one, freeing the counters with the last. Both accept NULL.
 */
srv_layer_stats *srv_layer_stats_ref(srv_layer_stats *s);
void srv_layer_stats_release(srv_layer_stats *s);

/* Counts one request: a success (its total time and phases) or a failure (its total time only),
 * at Unix time now_s. Lock-free; s may be NULL (nothing is counted). */
void srv_layer_stats_record(srv_layer_stats *s, bool ok, const srv_inference_times *t,
                            double now_s);

/* Reads the counters into out (zeros when s is NULL). */
void srv_layer_stats_read(const srv_layer_stats *s, srv_layer_stats_snapshot *out);

#endif
