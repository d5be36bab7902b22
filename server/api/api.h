/*
 * api.h - the handlers of every route (one file per endpoint group), listed in routes.c.
 */
#ifndef ATTND_API_H
#define ATTND_API_H

#include "app/app.h"
#include "http/http.h"

/* routes.c: every route the daemon serves, ended by an entry with method NULL */
extern const srv_route srv_routes[];

/* api_index.c: GET / */
int srv_api_index(void *ctx, const srv_request *req, srv_response *resp, srv_error *err);

/* api_health.c */
int srv_api_healthz(void *ctx, const srv_request *req, srv_response *resp, srv_error *err);
int srv_api_readyz(void *ctx, const srv_request *req, srv_response *resp, srv_error *err);
int srv_api_openapi(void *ctx, const srv_request *req, srv_response *resp, srv_error *err);

/* api_ui.c: the viewer (web/, built into the binary) */
int srv_api_ui_page(void *ctx, const srv_request *req, srv_response *resp, srv_error *err);
int srv_api_ui_slash(void *ctx, const srv_request *req, srv_response *resp, srv_error *err);
int srv_api_ui_asset(void *ctx, const srv_request *req, srv_response *resp, srv_error *err);

/* api_metrics.c */
int srv_api_metrics(void *ctx, const srv_request *req, srv_response *resp, srv_error *err);

/* api_layers.c */
int srv_api_layers_list(void *ctx, const srv_request *req, srv_response *resp, srv_error *err);
int srv_api_layer_put(void *ctx, const srv_request *req, srv_response *resp, srv_error *err);
int srv_api_layer_get(void *ctx, const srv_request *req, srv_response *resp, srv_error *err);
int srv_api_layer_delete(void *ctx, const srv_request *req, srv_response *resp, srv_error *err);
int srv_api_weights_get(void *ctx, const srv_request *req, srv_response *resp, srv_error *err);
int srv_api_weights_put(void *ctx, const srv_request *req, srv_response *resp, srv_error *err);

/* api_import.c */
int srv_api_layer_import(void *ctx, const srv_request *req, srv_response *resp, srv_error *err);

/* api_forward.c */
int srv_api_forward(void *ctx, const srv_request *req, srv_response *resp, srv_error *err);
int srv_api_trace(void *ctx, const srv_request *req, srv_response *resp, srv_error *err);

#endif
