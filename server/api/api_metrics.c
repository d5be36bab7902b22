/*
 * api_metrics.c - GET /metrics: the counters of metrics.h in the Prometheus text format.
 */
#include "api.h"

#include <stdlib.h>

#include "models.h"

int srv_api_metrics(void *ctx, const srv_request *req, srv_response *resp, srv_error *err)
{
    srv_app *app = ctx;
    pthread_mutex_lock(&app->inflight_lock);
    int64_t running = app->inflight, waiting = app->inflight_waiting;
    pthread_mutex_unlock(&app->inflight_lock);
    srv_metrics_gauges g = {
        .layers = srv_registry_count(app->registry),
        .layers_damaged = srv_persist_damaged_count(app->persist),
        .ready = __atomic_load_n(&app->ready, __ATOMIC_ACQUIRE),
        .draining = __atomic_load_n(&app->draining, __ATOMIC_ACQUIRE),
        .start_time = app->started,
        .body_bytes = srv_body_budget_held(&app->bodies),
        .body_bytes_limit = app->bodies.limit,
        .passes_running = running,
        .passes_waiting = waiting,
    };
    srv_registry_weights(app->registry, &g.weights_bytes, &g.weights_bytes_limit);
    resp->content_type = SRV_METRICS_CONTENT_TYPE;
    srv_model_entry *models;
    int n = srv_models_list(app, NULL, &models);
    const char **names = n >= 0 ? calloc((size_t)n + 1, sizeof *names) : NULL;
    srv_layer_stats_snapshot *snaps = names ? calloc((size_t)n + 1, sizeof *snaps) : NULL;
    int rc = snaps ? 0 : -1;
    for (int i = 0; rc == 0 && i < n; i++) {
        names[i] = models[i].name;
        srv_layer_stats_read(models[i].stats, &snaps[i]);
    }
    if (rc == 0)
        rc = srv_metrics_render(&resp->body, app->metrics, &g);
    if (rc == 0)
        rc = srv_metrics_render_layers(&resp->body, names, snaps, n);
    free(snaps);
    free(names);
    srv_models_free(models, n);
    if (rc < 0)
        return srv_error_set(err, SRV_E_NOMEM, "", "out of memory writing the metrics");
    return 0;
}
