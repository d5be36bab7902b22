/*
 * api_v2.h - the Open Inference Protocol (KServe v2 REST, Triton's dialect) routes (SPEC §3).
 *
 *   GET  /v2                                             server metadata
 *   GET  /v2/health/live, /v2/health/ready                 health
 *   GET  /v2/models/{name}[/versions/{version}]            model metadata
 *   GET  /v2/models/{name}[/versions/{version}]/ready      model ready
 *   POST /v2/models/{name}[/versions/{version}]/infer      inference (JSON and binary tensors)
 *
 * A model is a layer of the registry; its one version is the layer's version counter as a decimal
 * string (it changes on every replace). A /versions/{version} path naming another version is a 404.
 * Errors on these routes are the protocol's: the status and {"error": "<message>"}.
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
int srv_v2_infer(void *ctx, const srv_request *req, srv_response *resp, srv_error *err);

/* The route table's error writer for /v2: the status for err->code and {"error": "..."}
 * (Retry-After: 1 with a 503). */
void srv_v2_error_reply(srv_response *resp, const srv_error *err);

#endif
