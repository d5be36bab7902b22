/*
 * routes.c - every route the daemon serves, in one table.
 *
 * {x} in a pattern matches one non-empty path segment (handlers read it with srv_request_param).
 * A path that matches a pattern with another method is a 405 with Allow; no pattern at all, a 404.
 * The last column lists the query arguments a /v1 route reads (others are a 400).
 */
#include "api.h"
#include "api_v2.h"

#define BODY_JSON (SRV_ROUTE_BODY | SRV_ROUTE_JSON)

const srv_route srv_routes[] = {
    {"GET", "/", srv_api_index, SRV_ROUTE_PUBLIC, NULL}, /* an index of links, as public as /ui */
    {"GET", "/healthz", srv_api_healthz, SRV_ROUTE_PROBE, NULL},
    {"GET", "/readyz", srv_api_readyz, SRV_ROUTE_PROBE, NULL},
    {"GET", "/metrics", srv_api_metrics, SRV_ROUTE_PROBE, NULL},
    {"GET", "/openapi.yaml", srv_api_openapi, 0, NULL},

    /* the viewer (api_ui.c): its query is the page's own state, read by the page */
    {"GET", "/ui", srv_api_ui_page, SRV_ROUTE_PUBLIC, NULL},
    {"GET", "/ui/", srv_api_ui_slash, SRV_ROUTE_PUBLIC, NULL},
    {"GET", "/ui/{asset}", srv_api_ui_asset, SRV_ROUTE_PUBLIC, NULL},

    {"GET", "/v1/layers", srv_api_layers_list, 0, ""},
    {"GET", "/v1/layers/{name}", srv_api_layer_get, 0,
     "L S N weights_heads weights_queries weights_keys weights_top_k weights_pool weights_pool_op "
     "weights_dtype weights_datatype average_attn_weights"},
    /* changes run on a worker whatever their size: a small body can make a large layer, and the
     * data dir's write (and its lock, shared with other replicas) takes what it takes */
    {"PUT", "/v1/layers/{name}", srv_api_layer_put,
     BODY_JSON | SRV_ROUTE_BINARY | SRV_ROUTE_CHANGES | SRV_ROUTE_HEAVY | SRV_ROUTE_WORKER, ""},
    {"DELETE", "/v1/layers/{name}", srv_api_layer_delete, SRV_ROUTE_CHANGES | SRV_ROUTE_WORKER,
     ""},
    {"GET", "/v1/layers/{name}/weights", srv_api_weights_get, 0, "encoding"},
    {"POST", "/v1/layers/{name}/import", srv_api_layer_import,
     BODY_JSON | SRV_ROUTE_CHANGES | SRV_ROUTE_HEAVY | SRV_ROUTE_WORKER, ""},
    {"PUT", "/v1/layers/{name}/weights", srv_api_weights_put,
     BODY_JSON | SRV_ROUTE_BINARY | SRV_ROUTE_CHANGES | SRV_ROUTE_HEAVY | SRV_ROUTE_WORKER, ""},
    {"POST", "/v1/layers/{name}/forward", srv_api_forward,
     BODY_JSON | SRV_ROUTE_HEAVY | SRV_ROUTE_STREAM, ""},
    {"POST", "/v1/layers/{name}/trace", srv_api_trace, BODY_JSON | SRV_ROUTE_HEAVY | SRV_ROUTE_STREAM,
     ""},

    /* Open Inference Protocol (api_v2.c): errors in the protocol's {"error": "..."} form, as for
     * every path under /v2 (error_reply.c) */
    {"GET", "/v2", srv_v2_server_metadata, 0, NULL},
    {"GET", "/v2/health/live", srv_v2_health_live, SRV_ROUTE_PROBE, NULL},
    {"GET", "/v2/health/ready", srv_v2_health_ready, SRV_ROUTE_PROBE, NULL},
    /* before /v2/models/{name}, which would take "stats" for a model name (as Triton does) */
    {"GET", "/v2/models/stats", srv_v2_model_stats, 0, NULL},
    {"GET", "/v2/models/{name}", srv_v2_model_metadata, 0, NULL},
    {"GET", "/v2/models/{name}/ready", srv_v2_model_ready, 0, NULL},
    {"POST", "/v2/models/{name}/infer", srv_v2_infer, SRV_ROUTE_BODY | SRV_ROUTE_HEAVY,
     NULL},
    {"GET", "/v2/models/{name}/versions/{version}", srv_v2_model_metadata, 0, NULL},
    {"GET", "/v2/models/{name}/versions/{version}/ready", srv_v2_model_ready, 0,
     NULL},
    {"POST", "/v2/models/{name}/versions/{version}/infer", srv_v2_infer,
     SRV_ROUTE_BODY | SRV_ROUTE_HEAVY, NULL},
    /* Triton's model repository extension (api_v2_repository.c): load reads files, on a worker */
    {"POST", "/v2/repository/index", srv_v2_repository_index, 0, NULL},
    {"POST", "/v2/repository/models/{name}/load", srv_v2_repository_load,
     SRV_ROUTE_CHANGES | SRV_ROUTE_WORKER, NULL},
    {"POST", "/v2/repository/models/{name}/unload", srv_v2_repository_unload, SRV_ROUTE_CHANGES,
     NULL},
    /* Triton's model configuration extension */
    {"GET", "/v2/models/{name}/config", srv_v2_model_config, 0, NULL},
    {"GET", "/v2/models/{name}/versions/{version}/config", srv_v2_model_config, 0, NULL},
    /* Triton's statistics extension (api_v2_stats.c) */
    {"GET", "/v2/models/{name}/stats", srv_v2_model_stats, 0, NULL},
    {"GET", "/v2/models/{name}/versions/{version}/stats", srv_v2_model_stats, 0, NULL},

    {NULL, NULL, NULL, 0, NULL},
};
