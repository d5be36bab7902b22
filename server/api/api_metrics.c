/*
 * api_metrics.c - GET /metrics: the counters of metrics.h in the Prometheus text format.
 */
#include "api.h"

int srv_api_metrics(void *ctx, const srv_request *req, srv_response *resp, srv_error *err)
{
    srv_app *app = ctx;
    srv_metrics_gauges g = {
        .layers = srv_registry_count(app->registry),
        .layers_damaged = srv_persist_damaged_count(app->persist),
        .ready = __atomic_load_n(&app->ready, __ATOMIC_ACQUIRE),
        .draining = __atomic_load_n(&app->draining, __ATOMIC_ACQUIRE),
        .start_time = app->started,
        .body_bytes = srv_body_budget_held(&app->bodies),
        .body_bytes_limit = app->bodies.limit,
    };
    resp->content_type = SRV_METRICS_CONTENT_TYPE;
    if (srv_metrics_render(&resp->body, app->metrics, &g) < 0)
        return srv_error_set(err, SRV_E_NOMEM, "", "out of memory writing the metrics");
    return 0;
}
