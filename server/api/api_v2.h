/*
 * api_v2.h - the Open Inference Protocol (KServe v2 REST, Triton's dialect) routes (docs/api.md).
 *
 *   GET  /v2                                             server metadata
 *   GET  /v2/health/live, /v2/health/ready                 health
 *   GET  /v2/models/{name}[/versions/{version}]            model metadata
 *   GET  /v2/models/{name}[/versions/{version}]/ready      model ready
 *   GET  /v2/models/{name}[/versions/{version}]/config     model configuration (Triton's extension)
 *   POST /v2/models/{name}[/versions/{version}]/infer      inference (JSON and binary tensors)
 *   GET  /v2/models[/{name}[/versions/{version}]]/stats     statistics (Triton's extension)
 *   POST /v2/repository/index                             the model repository (Triton's extension)
 *   POST /v2/repository/models/{name}/load, .../unload     load (again) from the data dir, unload
 *
 * A model is a layer of the registry; its one version is the layer's version counter as a decimal
 * string (it changes on every replace). A /versions/{version} path naming another version is a 404.
 * A model the repository knows but does not serve (unloaded, or damaged in the data dir) is a 400
 * "not ready" on the model routes (Triton's status for a model that is not ready); one it does not
 * know at all, a 404. Errors on these routes are the protocol's: the status and
 * {"error": "<message>"}.
 */
#ifndef ATTND_API_V2_H
#define ATTND_API_V2_H

#include "http/http.h"

int srv_v2_server_metadata(void *ctx, const srv_request *req, srv_response *resp,
                           srv_error *err);
int srv_v2_health_live(void *ctx, const srv_request *req, srv_response *resp, srv_error *err);
int srv_v2_health_ready(void *ctx, const srv_request *req, srv_response *resp, srv_error *err);
/* {name} and the optional {version} come from the route's placeholders. */
int srv_v2_model_metadata(void *ctx, const srv_request *req, srv_response *resp, srv_error *err);
int srv_v2_model_ready(void *ctx, const srv_request *req, srv_response *resp, srv_error *err);
/* Triton's model configuration extension: the layer as model_config.proto's ModelConfig. */
int srv_v2_model_config(void *ctx, const srv_request *req, srv_response *resp, srv_error *err);
int srv_v2_infer(void *ctx, const srv_request *req, srv_response *resp, srv_error *err);

/* api_v2_repository.c: Triton's model repository extension. */
int srv_v2_repository_index(void *ctx, const srv_request *req, srv_response *resp,
                            srv_error *err);
int srv_v2_repository_load(void *ctx, const srv_request *req, srv_response *resp, srv_error *err);
int srv_v2_repository_unload(void *ctx, const srv_request *req, srv_response *resp,
                             srv_error *err);

/* api_v2_stats.c: Triton's statistics extension, every model ({name} absent) or one. */
int srv_v2_model_stats(void *ctx, const srv_request *req, srv_response *resp, srv_error *err);

/* The route table's error writer for /v2: the status for err->code and {"error": "..."}, with
 * "request_id" unless request_id is NULL (Retry-After: 1 with a 503). */
void srv_v2_error_reply(srv_response *resp, const srv_error *err, const char *request_id);

#endif
