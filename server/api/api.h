/*
 * api.h - the handlers of every route (one file per endpoint group), listed in routes.c.
 */
#ifndef ATTND_API_H
#define ATTND_API_H

#include "http.h"

/* api_health.c */
int srv_api_healthz(srv_app *app, const srv_request *req, srv_response *resp, srv_error *err);
int srv_api_readyz(srv_app *app, const srv_request *req, srv_response *resp, srv_error *err);
int srv_api_openapi(srv_app *app, const srv_request *req, srv_response *resp, srv_error *err);

/* api_metrics.c */
int srv_api_metrics(srv_app *app, const srv_request *req, srv_response *resp, srv_error *err);

/* api_layers.c */
int srv_api_layers_list(srv_app *app, const srv_request *req, srv_response *resp, srv_error *err);
int srv_api_layer_put(srv_app *app, const srv_request *req, srv_response *resp, srv_error *err);
int srv_api_layer_get(srv_app *app, const srv_request *req, srv_response *resp, srv_error *err);
int srv_api_layer_delete(srv_app *app, const srv_request *req, srv_response *resp, srv_error *err);
int srv_api_weights_get(srv_app *app, const srv_request *req, srv_response *resp, srv_error *err);
int srv_api_weights_put(srv_app *app, const srv_request *req, srv_response *resp, srv_error *err);

/* api_forward.c */
int srv_api_forward(srv_app *app, const srv_request *req, srv_response *resp, srv_error *err);
int srv_api_trace(srv_app *app, const srv_request *req, srv_response *resp, srv_error *err);

#endif
