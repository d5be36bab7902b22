/*
 * daemon.c - the daemon (see daemon.h): the HTTP server started with the API's routes and the
 * hooks through which it asks the API what the HTTP layer does not know - who may do what (the
 * API key), the dialect of an error body (/v1 or /v2), what is counted (/metrics), and how a large
 * base64 body is decoded while it arrives (codec/predecode.h).
 */
#include "daemon.h"

#include <stdlib.h>

#include "api.h"
#include "codec/predecode.h"
#include "error_reply.h"
#include "forward.h"
#include "http/http.h"

struct srv_daemon {
    srv_app *app;
    srv_http *http;
};

/* The API key and --read-only, checked before any of the body is read. */
static int admit(void *ctx, const srv_request *req, const char *authorization, srv_error *err)
{
    srv_app *app = ctx;
    return srv_auth_check(&app->auth, req->route->flags & SRV_ROUTE_CHANGES,
                          req->route->flags & (SRV_ROUTE_PROBE | SRV_ROUTE_PUBLIC), authorization,
                          err);
}

static void request_begin(void *ctx)
{
    srv_metrics_request_begin(((srv_app *)ctx)->metrics);
}

static void request_end(void *ctx, int route, int status, double seconds, uint64_t bytes_in,
                        uint64_t bytes_out)
{
    srv_metrics_request_end(((srv_app *)ctx)->metrics, route, status, seconds, bytes_in, bytes_out);
}

static void connection(void *ctx, int delta)
{
    srv_metrics_connection(((srv_app *)ctx)->metrics, delta);
}

static void queued(void *ctx, int delta)
{
    srv_metrics_queued(((srv_app *)ctx)->metrics, delta);
}

static void connection_cut(void *ctx, srv_cut_reason reason)
{
    srv_metrics_connection_cut(((srv_app *)ctx)->metrics, reason);
}

/* The base64 texts of a large forward body, decoded as they arrive (codec/predecode.h). */
static void *stream_open(void *ctx, size_t length)
{
    srv_predecoder *p = malloc(sizeof *p);
    if (p)
        srv_predecoder_init(p, length);
    return p;
}

static void stream_feed(void *stream, const char *body, size_t len)
{
    srv_predecoder_feed(stream, body, len);
}

static void stream_close(void *stream)
{
    srv_predecoder_free(stream);
    free(stream);
}

static bool slot_try(void *ctx)
{
    return srv_forward_slot_try(ctx);
}

static void slot_drop(void *ctx)
{
    srv_forward_slot_drop(ctx);
}

static srv_daemon *start(const srv_options *opt, bool external, srv_error *err)
{
    srv_daemon *d = calloc(1, sizeof *d);
    if (!d) {
        srv_error_set(err, SRV_E_NOMEM, "", "out of memory");
        return NULL;
    }
    d->app = srv_app_create(opt, srv_routes, err);
    if (!d->app) {
        free(d);
        return NULL;
    }
    const srv_options *o = &d->app->opt;
    srv_http_config cfg = {
        .host = o->host,
        .port = o->port,
        .threads = o->threads,
        .workers = o->max_inflight, /* as many as passes may be in flight */
        .queue_wait_ms = o->queue_wait_ms,
        .timeout = o->timeout,
        .max_connections = o->max_connections,
        .header_timeout = o->header_timeout,
        .min_body_rate = o->min_body_rate,
        .max_body_bytes = o->max_body_bytes,
        .bodies = &d->app->bodies,
        .cors_origin = o->cors_origin,
        .log_format = o->log_format,
        .external = external,
    };
    srv_http_hooks hooks = {
        .ctx = d->app,
        .routes = srv_routes,
        .admit = admit,
        .error_reply = srv_api_error_reply,
        .request_begin = request_begin,
        .request_end = request_end,
        .connection = connection,
        .connection_cut = connection_cut,
        .queued = queued,
        .slot_try = slot_try,
        .slot_drop = slot_drop,
        .stream_min_body = SRV_PREDECODE_MIN_BODY,
        .stream_open = stream_open,
        .stream_feed = stream_feed,
        .stream_close = stream_close,
    };
    d->http = srv_http_start(&cfg, &hooks, err);
    if (!d->http) {
        srv_app_free(d->app);
        free(d);
        return NULL;
    }
    __atomic_store_n(&d->app->ready, true, __ATOMIC_RELEASE);
    return d;
}

srv_daemon *srv_daemon_start(const srv_options *opt, srv_error *err)
{
    return start(opt, false, err);
}

srv_daemon *srv_daemon_start_external(const srv_options *opt, srv_error *err)
{
    return start(opt, true, err);
}

srv_http *srv_daemon_http(srv_daemon *d)
{
    return d->http;
}

int srv_daemon_port(const srv_daemon *d)
{
    return srv_http_port(d->http);
}

srv_app *srv_daemon_app(srv_daemon *d)
{
    return d->app;
}

int srv_daemon_drain(srv_daemon *d, int deadline_ms)
{
    __atomic_store_n(&d->app->draining, true, __ATOMIC_RELEASE);
    return srv_http_drain(d->http, deadline_ms);
}

void srv_daemon_stop(srv_daemon *d)
{
    if (!d)
        return;
    srv_http_stop(d->http);
    srv_app_free(d->app);
    free(d);
}
