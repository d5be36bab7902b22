/*
 * error_reply.h - where a daemon error (base/error.h) becomes an HTTP reply: the one table gives
 * the status, and the path chooses the dialect of the body.
 */
#ifndef ATTND_ERROR_REPLY_H
#define ATTND_ERROR_REPLY_H

#include "base/error.h"
#include "http/http.h"

/* Replaces resp with the /v1 error reply for err: srv_error_status(err->code) and
 * {"error": {"code": ..., "message": ..., "field": ...}, "request_id": ...} ("field" left out when
 * empty, "request_id" when request_id is NULL), plus Retry-After for 503. The one place a /v1
 * error becomes HTTP. */
void srv_v1_error_reply(srv_response *resp, const srv_error *err, const char *request_id);

/* The HTTP server's error_reply hook: the Open Inference Protocol's {"error": "..."} for paths
 * under /v2 (api_v2.h), /v1's otherwise - for routes and for paths no route matched alike; both
 * with the request's id as "request_id". */
void srv_api_error_reply(void *ctx, const srv_request *req, srv_response *resp,
                         const srv_error *err);

#endif
