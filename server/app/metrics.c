/*
 * metrics.c - lock-free request counters and their Prometheus exposition (see metrics.h).
 *
 * Counts are kept per (route, status slot) and per (route, latency bucket), non-cumulative, and
 * summed into Prometheus's cumulative buckets when rendered. Durations are summed in nanoseconds
 * in a 64-bit atomic (585 years of request time before it wraps).
 */
#include "metrics.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#ifndef ATTND_VERSION
#define ATTND_VERSION "0.0.0"
#endif
#ifndef ATTND_GIT_REV
#define ATTND_GIT_REV "unknown"
#endif

/* status codes with their own series: every one attnd answers with (GET / redirects with 302, the
 * viewer's files answer 304, a full disk 507); any other is counted under its class ("2xx", ...) */
static const int STATUSES[] = {200, 201, 204, 302, 304, 400, 401, 403, 404, 405, 408,
                               409, 411, 413, 414, 415, 422, 429, 431, 500, 503, 507};
#define NSTATUS (int)(sizeof STATUSES / sizeof STATUSES[0])
#define NSLOTS (NSTATUS + 6) /* + 1xx..5xx classes for the others, + never answered */
#define SLOT_ABORTED (NSTATUS + 5)

/* upper bounds of the latency buckets, seconds: the same for routes and for layers */
#define BUCKETS srv_latency_buckets
#define NBUCKETS SRV_LATENCY_NBUCKETS

typedef struct route_counters {
    atomic_uint_fast64_t requests[NSLOTS];
    atomic_uint_fast64_t latency[NBUCKETS + 1]; /* last: over the largest bound (+Inf)       */
    atomic_uint_fast64_t latency_ns;            /* sum of durations                          */
} route_counters;

struct srv_metrics {
    int nroutes;
    const char *methods[SRV_METRICS_MAX_ROUTES];  /* borrowed static strings */
    const char *patterns[SRV_METRICS_MAX_ROUTES];
    route_counters routes[SRV_METRICS_MAX_ROUTES + 1]; /* last: unmatched                      */
    atomic_int_fast64_t in_flight;
    atomic_uint_fast64_t bytes_in, bytes_out;
    atomic_uint_fast64_t passes[2]; /* forward, trace                                          */
    atomic_uint_fast64_t cancelled; /* requests ended with 499: their client hung up mid-work    */
    atomic_uint_fast64_t flops;
    atomic_int_fast64_t connections;
    atomic_int_fast64_t queued; /* requests waiting for a worker                           */
    atomic_uint_fast64_t cuts[SRV_CUT_COUNT];
};

static const char *const CUT_NAMES[SRV_CUT_COUNT] = {"header_timeout", "body_too_slow",
                                                     "half_closed", "reply_too_slow",
                                                     "body_abandoned", "body_over_share"};

srv_metrics *srv_metrics_create(int nroutes, const char *const *methods,
                                const char *const *patterns)
{
    srv_metrics *m = calloc(1, sizeof *m); /* all-zero bytes are zero atomics on our targets */
    if (!m)
        return NULL;
    m->nroutes = nroutes < 0 ? 0 : nroutes > SRV_METRICS_MAX_ROUTES ? SRV_METRICS_MAX_ROUTES : nroutes;
    for (int i = 0; i < m->nroutes; i++) {
        m->methods[i] = methods[i];
        m->patterns[i] = patterns[i];
    }
    return m;
}

void srv_metrics_free(srv_metrics *m)
{
    free(m);
}

void srv_metrics_request_begin(srv_metrics *m)
{
    if (m)
        atomic_fetch_add_explicit(&m->in_flight, 1, memory_order_relaxed);
}

static int status_slot(int status)
{
    for (int i = 0; i < NSTATUS; i++)
        if (STATUSES[i] == status)
            return i;
    int cls = status / 100;
    /* 0: the client went away (or timed out) before an answer; 499: the same, and the work for
     * it was stopped */
    if (cls < 1 || cls > 5 || status == 499)
        return SLOT_ABORTED;
    return NSTATUS + cls - 1;
}

void srv_metrics_request_end(srv_metrics *m, int route, int status, double seconds,
                             uint64_t bytes_in, uint64_t bytes_out)
{
    if (!m)
        return;
    route_counters *r = &m->routes[route >= 0 && route < m->nroutes ? route : SRV_METRICS_MAX_ROUTES];
    atomic_fetch_add_explicit(&r->requests[status_slot(status)], 1, memory_order_relaxed);
    if (status == 499)
        atomic_fetch_add_explicit(&m->cancelled, 1, memory_order_relaxed);
    if (!(seconds >= 0)) /* NaN or a clock step backwards */
        seconds = 0;
    int b = 0;
    while (b < NBUCKETS && seconds > BUCKETS[b])
        b++;
    atomic_fetch_add_explicit(&r->latency[b], 1, memory_order_relaxed);
    double ns = seconds * 1e9;
    atomic_fetch_add_explicit(&r->latency_ns, ns < 1.8e19 ? (uint64_t)ns : 0, memory_order_relaxed);
    atomic_fetch_add_explicit(&m->bytes_in, bytes_in, memory_order_relaxed);
    atomic_fetch_add_explicit(&m->bytes_out, bytes_out, memory_order_relaxed);
    atomic_fetch_sub_explicit(&m->in_flight, 1, memory_order_relaxed);
}

void srv_metrics_connection(srv_metrics *m, int delta)
{
    if (m)
        atomic_fetch_add_explicit(&m->connections, delta, memory_order_relaxed);
}

void srv_metrics_queued(srv_metrics *m, int delta)
{
    if (m)
        atomic_fetch_add_explicit(&m->queued, delta, memory_order_relaxed);
}

void srv_metrics_connection_cut(srv_metrics *m, srv_cut_reason reason)
{
    if (m && reason >= 0 && reason < SRV_CUT_COUNT)
        atomic_fetch_add_explicit(&m->cuts[reason], 1, memory_order_relaxed);
}

void srv_metrics_forward(srv_metrics *m, bool trace, double flops)
{
    if (!m)
        return;
    atomic_fetch_add_explicit(&m->passes[trace ? 1 : 0], 1, memory_order_relaxed);
    if (flops > 0 && flops < 1.8e19)
        atomic_fetch_add_explicit(&m->flops, (uint64_t)flops, memory_order_relaxed);
}

int64_t srv_metrics_in_flight(const srv_metrics *m)
{
    return m ? (int64_t)atomic_load_explicit(&((srv_metrics *)m)->in_flight, memory_order_relaxed)
             : 0;
}

static uint64_t get(const atomic_uint_fast64_t *a)
{
    return (uint64_t)atomic_load_explicit((atomic_uint_fast64_t *)a, memory_order_relaxed);
}

/* Appends a label value with the escapes the text format wants (\\, \", \n). */
static void label_value(srv_buf *b, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\' || *s == '"')
            srv_buf_putc(b, '\\'), srv_buf_putc(b, *s);
        else if (*s == '\n')
            srv_buf_puts(b, "\\n");
        else
            srv_buf_putc(b, *s);
    }
}

static void route_labels(srv_buf *b, const srv_metrics *m, int r)
{
    srv_buf_puts(b, "method=\"");
    label_value(b, r < m->nroutes ? m->methods[r] : "");
    srv_buf_puts(b, "\",route=\"");
    label_value(b, r < m->nroutes ? m->patterns[r] : "unmatched");
    srv_buf_putc(b, '"');
}

static void header(srv_buf *b, const char *name, const char *type, const char *help)
{
    srv_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

int srv_metrics_render(srv_buf *b, const srv_metrics *m, const srv_metrics_gauges *g)
{
    header(b, "attnd_build_info", "gauge", "Version and git revision of this attnd.");
    srv_buf_puts(b, "attnd_build_info{version=\"");
    label_value(b, ATTND_VERSION);
    srv_buf_puts(b, "\",revision=\"");
    label_value(b, ATTND_GIT_REV);
    srv_buf_puts(b, "\"} 1\n");
    header(b, "attnd_start_time_seconds", "gauge", "Unix time the daemon started.");
    srv_buf_printf(b, "attnd_start_time_seconds %.3f\n", g->start_time);

    header(b, "attnd_http_requests_total", "counter",
           "HTTP requests answered, by route (the route table's pattern) and status code.");
    for (int r = 0; r <= SRV_METRICS_MAX_ROUTES; r++) {
        if (r >= m->nroutes && r != SRV_METRICS_MAX_ROUTES)
            continue;
        for (int s = 0; s < NSLOTS; s++) {
            uint64_t v = get(&m->routes[r].requests[s]);
            if (!v)
                continue;
            srv_buf_puts(b, "attnd_http_requests_total{");
            route_labels(b, m, r);
            if (s < NSTATUS)
                srv_buf_printf(b, ",code=\"%d\"} %llu\n", STATUSES[s], (unsigned long long)v);
            else if (s == SLOT_ABORTED)
                srv_buf_printf(b, ",code=\"aborted\"} %llu\n", (unsigned long long)v);
            else
                srv_buf_printf(b, ",code=\"%dxx\"} %llu\n", s - NSTATUS + 1,
                               (unsigned long long)v);
        }
    }

    header(b, "attnd_http_request_duration_seconds", "histogram",
           "Time from the request line to the answer, by route.");
    for (int r = 0; r <= SRV_METRICS_MAX_ROUTES; r++) {
        if (r >= m->nroutes && r != SRV_METRICS_MAX_ROUTES)
            continue;
        uint64_t counts[NBUCKETS + 1], total = 0;
        for (int k = 0; k <= NBUCKETS; k++)
            total += counts[k] = get(&m->routes[r].latency[k]);
        if (!total)
            continue;
        uint64_t cum = 0;
        for (int k = 0; k <= NBUCKETS; k++) {
            cum += counts[k];
            srv_buf_puts(b, "attnd_http_request_duration_seconds_bucket{");
            route_labels(b, m, r);
            if (k < NBUCKETS)
                srv_buf_printf(b, ",le=\"%g\"} %llu\n", BUCKETS[k], (unsigned long long)cum);
            else
                srv_buf_printf(b, ",le=\"+Inf\"} %llu\n", (unsigned long long)cum);
        }
        srv_buf_puts(b, "attnd_http_request_duration_seconds_sum{");
        route_labels(b, m, r);
        srv_buf_printf(b, "} %.9f\n", (double)get(&m->routes[r].latency_ns) / 1e9);
        srv_buf_puts(b, "attnd_http_request_duration_seconds_count{");
        route_labels(b, m, r);
        srv_buf_printf(b, "} %llu\n", (unsigned long long)cum);
    }

    header(b, "attnd_http_requests_in_flight", "gauge",
           "Requests received and not yet answered (this scrape included).");
    srv_buf_printf(b, "attnd_http_requests_in_flight %lld\n", (long long)srv_metrics_in_flight(m));
    header(b, "attnd_http_request_bytes_total", "counter", "Request body bytes received.");
    srv_buf_printf(b, "attnd_http_request_bytes_total %llu\n", (unsigned long long)get(&m->bytes_in));
    header(b, "attnd_http_response_bytes_total", "counter", "Response body bytes sent.");
    srv_buf_printf(b, "attnd_http_response_bytes_total %llu\n",
                   (unsigned long long)get(&m->bytes_out));
    header(b, "attnd_http_connections_open", "gauge", "Client connections open now.");
    srv_buf_printf(b, "attnd_http_connections_open %lld\n",
                   (long long)atomic_load_explicit(&((srv_metrics *)m)->connections,
                                                   memory_order_relaxed));
    header(b, "attnd_http_connections_closed_total", "counter",
           "Connections the daemon closed for being slow: headers past --header-timeout, a body "
           "below --min-body-rate, idle after the client half-closed, a reply taken slower "
           "than --min-body-rate, a body its client closed before it was complete, or a stalled "
           "body of an address over its share of --max-body-memory while others waited.");
    for (int k = 0; k < SRV_CUT_COUNT; k++)
        srv_buf_printf(b, "attnd_http_connections_closed_total{reason=\"%s\"} %llu\n", CUT_NAMES[k],
                       (unsigned long long)get(&m->cuts[k]));
    header(b, "attnd_http_requests_queued", "gauge",
           "Requests whose body is in, waiting for a worker (there are --max-inflight).");
    srv_buf_printf(b, "attnd_http_requests_queued %lld\n",
                   (long long)atomic_load_explicit(&((srv_metrics *)m)->queued,
                                                   memory_order_relaxed));
    header(b, "attnd_forward_passes_running", "gauge",
           "Forward passes holding one of the --max-inflight slots.");
    srv_buf_printf(b, "attnd_forward_passes_running %lld\n", (long long)g->passes_running);
    header(b, "attnd_forward_passes_waiting", "gauge",
           "Forward passes waiting for a slot (at most --queue-wait-ms).");
    srv_buf_printf(b, "attnd_forward_passes_waiting %lld\n", (long long)g->passes_waiting);
    header(b, "attnd_requests_cancelled_total", "counter",
           "Requests whose client hung up while they were handled, and whose work was stopped "
           "(a forward pass cut short, a wait for a slot or a worker given up); logged as 499.");
    srv_buf_printf(b, "attnd_requests_cancelled_total %llu\n", (unsigned long long)get(&m->cancelled));
    header(b, "attnd_forward_passes_total", "counter",
           "Attention forward passes run, by endpoint kind.");
    srv_buf_printf(b, "attnd_forward_passes_total{kind=\"forward\"} %llu\n",
                   (unsigned long long)get(&m->passes[0]));
    srv_buf_printf(b, "attnd_forward_passes_total{kind=\"trace\"} %llu\n",
                   (unsigned long long)get(&m->passes[1]));
    header(b, "attnd_forward_flops_total", "counter",
           "Floating-point operations of the forward passes run (multiply-add = 2).");
    srv_buf_printf(b, "attnd_forward_flops_total %llu\n", (unsigned long long)get(&m->flops));
    header(b, "attnd_layers", "gauge", "Layers served.");
    srv_buf_printf(b, "attnd_layers %lld\n", (long long)g->layers);
    header(b, "attnd_layers_damaged", "gauge",
           "Layers in the data dir that could not be loaded (see /readyz).");
    srv_buf_printf(b, "attnd_layers_damaged %lld\n", (long long)g->layers_damaged);
    header(b, "attnd_ready", "gauge", "1 when /readyz answers 200.");
    srv_buf_printf(b, "attnd_ready %d\n", g->ready ? 1 : 0);
    header(b, "attnd_draining", "gauge", "1 once a graceful stop (SIGTERM) began.");
    srv_buf_printf(b, "attnd_draining %d\n", g->draining ? 1 : 0);
    header(b, "attnd_request_body_bytes", "gauge",
           "Request body bytes held now, all connections together (counted as they arrive, in "
           "steps of 256 KiB).");
    srv_buf_printf(b, "attnd_request_body_bytes %lld\n", (long long)g->body_bytes);
    header(b, "attnd_request_body_bytes_limit", "gauge",
           "--max-body-memory: bodies that would pass it get 503.");
    srv_buf_printf(b, "attnd_request_body_bytes_limit %lld\n", (long long)g->body_bytes_limit);
    header(b, "attnd_weights_bytes", "gauge",
           "Bytes of the layers' weights held now (old versions still in use and layers being "
           "built included).");
    srv_buf_printf(b, "attnd_weights_bytes %lld\n", (long long)g->weights_bytes);
    header(b, "attnd_weights_bytes_limit", "gauge",
           "--max-weights-bytes: a layer that would pass it gets 507 before it is allocated.");
    srv_buf_printf(b, "attnd_weights_bytes_limit %lld\n", (long long)g->weights_bytes_limit);
    return b->failed ? -1 : 0;
}

/* Seconds from whole nanoseconds, written exactly (the statistics extension shows the same ns). */
static void put_seconds(srv_buf *b, uint64_t ns)
{
    srv_buf_printf(b, "%llu.%09llu", (unsigned long long)(ns / 1000000000u),
                   (unsigned long long)(ns % 1000000000u));
}

static void layer_label(srv_buf *b, const char *series, const char *name)
{
    srv_buf_printf(b, "%s{layer=\"", series);
    label_value(b, name);
    srv_buf_putc(b, '"');
}

int srv_metrics_render_layers(srv_buf *b, const char *const *names,
                              const srv_layer_stats_snapshot *snaps, int n)
{
    header(b, "attnd_layer_requests_total", "counter",
           "Forward passes asked of a layer (/v1 forward and trace, /v2 infer), by result: "
           "inference_stats success and fail of GET /v2/models/stats.");
    for (int i = 0; i < n; i++) {
        layer_label(b, "attnd_layer_requests_total", names[i]);
        srv_buf_printf(b, ",result=\"success\"} %llu\n", (unsigned long long)snaps[i].success_count);
        layer_label(b, "attnd_layer_requests_total", names[i]);
        srv_buf_printf(b, ",result=\"fail\"} %llu\n", (unsigned long long)snaps[i].fail_count);
    }
    header(b, "attnd_layer_request_duration_seconds", "histogram",
           "Time of a layer's successful requests, from arrival to the reply built (sum and count: "
           "inference_stats.success).");
    for (int i = 0; i < n; i++) {
        uint64_t cum = 0;
        for (int k = 0; k <= NBUCKETS; k++) {
            cum += snaps[i].latency[k];
            layer_label(b, "attnd_layer_request_duration_seconds_bucket", names[i]);
            if (k < NBUCKETS)
                srv_buf_printf(b, ",le=\"%g\"} %llu\n", BUCKETS[k], (unsigned long long)cum);
            else
                srv_buf_printf(b, ",le=\"+Inf\"} %llu\n", (unsigned long long)cum);
        }
        layer_label(b, "attnd_layer_request_duration_seconds_sum", names[i]);
        srv_buf_puts(b, "} ");
        put_seconds(b, snaps[i].success_ns);
        srv_buf_putc(b, '\n');
        layer_label(b, "attnd_layer_request_duration_seconds_count", names[i]);
        srv_buf_printf(b, "} %llu\n", (unsigned long long)cum);
    }
    header(b, "attnd_layer_failed_request_seconds_total", "counter",
           "Time of a layer's failed requests (inference_stats.fail).");
    for (int i = 0; i < n; i++) {
        layer_label(b, "attnd_layer_failed_request_seconds_total", names[i]);
        srv_buf_puts(b, "} ");
        put_seconds(b, snaps[i].fail_ns);
        srv_buf_putc(b, '\n');
    }
    header(b, "attnd_layer_phase_seconds_total", "counter",
           "Where a layer's successful requests spent their time: waiting under --max-inflight "
           "(queue), reading the body (compute_input), the pass (compute_infer), writing the reply "
           "(compute_output).");
    static const char *const phases[4] = {"queue", "compute_input", "compute_infer",
                                          "compute_output"};
    for (int i = 0; i < n; i++) {
        const uint64_t ns[4] = {snaps[i].queue_ns, snaps[i].input_ns, snaps[i].infer_ns,
                                snaps[i].output_ns};
        for (int k = 0; k < 4; k++) {
            layer_label(b, "attnd_layer_phase_seconds_total", names[i]);
            srv_buf_printf(b, ",phase=\"%s\"} ", phases[k]);
            put_seconds(b, ns[k]);
            srv_buf_putc(b, '\n');
        }
    }
    header(b, "attnd_layer_last_request_timestamp_seconds", "gauge",
           "Unix time of a layer's last request (last_inference), 0 before the first.");
    for (int i = 0; i < n; i++) {
        layer_label(b, "attnd_layer_last_request_timestamp_seconds", names[i]);
        srv_buf_printf(b, "} %llu.%03llu\n",
                       (unsigned long long)(snaps[i].last_inference_ms / 1000),
                       (unsigned long long)(snaps[i].last_inference_ms % 1000));
    }
    return b->failed ? -1 : 0;
}
