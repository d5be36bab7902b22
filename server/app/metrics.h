/*
 * metrics.h - counters for GET /metrics, in the Prometheus text format (version 0.0.4).
 *
 * Every counter is a C11 atomic updated with relaxed order: recording a request takes no lock, so
 * the hot path never waits on /metrics or on another request. A scrape reads each counter once;
 * counters that move during a scrape may be off by the requests in flight, as usual for Prometheus.
 *
 * Series (names follow Prometheus conventions; seconds and bytes in base units):
 *   attnd_build_info{version,revision} 1
 *   attnd_start_time_seconds                       Unix time the daemon started
 *   attnd_http_requests_total{method,route,code}   requests answered (code="aborted": the client
 *                                                  went away or timed out before the answer)
 *   attnd_http_request_duration_seconds{method,route} histogram, from request line to last byte queued
 *   attnd_http_requests_in_flight                  requests received and not yet answered
 *   attnd_http_request_bytes_total                 request body bytes read
 *   attnd_http_response_bytes_total                response body bytes sent
 *   attnd_http_connections_open                    client connections open now
 *   attnd_http_connections_closed_total{reason}    connections closed by the daemon for being slow
 *                                                  (deadline.h): header_timeout, body_too_slow,
 *                                                  half_closed (idle after the client's FIN),
 *                                                  reply_too_slow
 *   attnd_requests_cancelled_total                 requests whose client hung up while they were
 *                                                  handled and whose work stopped (status 499,
 *                                                  counted as code="aborted" above)
 *   attnd_http_requests_queued                     requests waiting for a worker
 *   attnd_forward_passes_running, attnd_forward_passes_waiting   passes holding a slot, waiting
 *   attnd_forward_passes_total{kind="forward"|"trace"}  engine passes run
 *   attnd_forward_flops_total                      their FLOPs (mha_flops)
 *   attnd_layers, attnd_layers_damaged, attnd_ready, attnd_draining   gauges given at scrape time
 *   attnd_request_body_bytes, attnd_request_body_bytes_limit        bodies held now, --max-body-memory
 * Per layer (srv_metrics_render_layers; the counters of store/layer_stats.h, the same numbers as
 * Triton's statistics extension, GET /v2/models/stats):
 *   attnd_layer_requests_total{layer,result="success"|"fail"}   forward passes asked of the layer
 *   attnd_layer_request_duration_seconds{layer}    histogram of its successful requests
 *   attnd_layer_failed_request_seconds_total{layer}  time of its failed requests
 *   attnd_layer_phase_seconds_total{layer,phase}   queue, compute_input, compute_infer, compute_output
 *   attnd_layer_last_request_timestamp_seconds{layer}
 * Layers are the ones served or unloaded (bounded by the registry); a deleted layer's series end
 * with it, and a layer created again under its name starts from zero (a counter reset).
 * Routes are the route table's patterns ("/v1/layers/{name}/forward"), never raw paths, so the
 * number of series stays bounded whatever clients send; requests no route matched count under
 * route="unmatched".
 */
#ifndef ATTND_METRICS_H
#define ATTND_METRICS_H

#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h"
#include "http/deadline.h"
#include "store/layer_stats.h"

#define SRV_METRICS_MAX_ROUTES 64

typedef struct srv_metrics srv_metrics;

/* Creates the counters for nroutes routes (at most SRV_METRICS_MAX_ROUTES; more are counted as
 * unmatched); methods[i] and patterns[i] label route i and must outlive the metrics (static
 * strings from the route table; the arrays themselves are copied). NULL when out of memory. */
srv_metrics *srv_metrics_create(int nroutes, const char *const *methods,
                                const char *const *patterns);
void srv_metrics_free(srv_metrics *m); /* accepts NULL */

/* A request arrived (in flight + 1). */
void srv_metrics_request_begin(srv_metrics *m);

/* A request was answered (in flight - 1): route is its index in the table, or -1 when no route
 * matched; status the HTTP status (0: no answer; 499: its client hung up and its work stopped,
 * counted as cancelled too); seconds from arrival to answer; bytes of body in and out. */
void srv_metrics_request_end(srv_metrics *m, int route, int status, double seconds,
                             uint64_t bytes_in, uint64_t bytes_out);

/* A client connection opened (delta 1) or closed (-1). */
void srv_metrics_connection(srv_metrics *m, int delta);

/* A request entered (+1) or left (-1) the queue of work waiting for a worker. */
void srv_metrics_queued(srv_metrics *m, int delta);

/* The daemon closed a connection for `reason` (http/deadline.h). */
void srv_metrics_connection_cut(srv_metrics *m, srv_cut_reason reason);

/* An engine pass ran (trace = the /trace endpoint), with its FLOPs. */
void srv_metrics_forward(srv_metrics *m, bool trace, double flops);

/* Requests in flight now. */
int64_t srv_metrics_in_flight(const srv_metrics *m);

/* Values only known at scrape time. */
typedef struct srv_metrics_gauges {
    int64_t layers;          /* layers served                                   */
    int64_t layers_damaged;  /* layers in the data dir that could not be loaded */
    bool ready;
    bool draining;
    double start_time;       /* Unix time (s)                                   */
    int64_t body_bytes;      /* request body bytes held now (body_budget.h)     */
    int64_t passes_running;  /* forward passes holding a slot (--max-inflight)  */
    int64_t passes_waiting;  /* forward passes waiting for a slot               */
    int64_t body_bytes_limit; /* --max-body-memory                              */
    int64_t weights_bytes;   /* layers' weights held now, reservations included */
    int64_t weights_bytes_limit; /* --max-weights-bytes                         */
} srv_metrics_gauges;

/* Appends the whole exposition to out. Returns 0, or -1 when out of memory. */
int srv_metrics_render(srv_buf *out, const srv_metrics *m, const srv_metrics_gauges *g);

/* Appends the per-layer series for n layers (names[i] with the counters snaps[i], the layers
 * served and unloaded: a bounded set, as the registry is). A deleted layer's series end with it.
 * Returns 0, or -1 when out of memory. */
int srv_metrics_render_layers(srv_buf *out, const char *const *names,
                              const srv_layer_stats_snapshot *snaps, int n);

/* The content type of the exposition. */
#define SRV_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

#endif
