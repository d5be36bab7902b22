/*
 * error_reply.c - error replies in the dialect of the path (see error_reply.h).
 */
#include "error_reply.h"

#include <string.h>

#include "api_v2.h"

void srv_v1_error_reply(srv_response *resp, const srv_error *err, const char *request_id)
{
    srv_code code = err->code == SRV_OK ? SRV_E_INTERNAL : err->code;
    resp->status = srv_error_status(code);
    resp->content_type = "application/json";
    resp->body.len = 0;
    resp->body.failed = false;
    srv_buf_puts(&resp->body, "{\"error\":{\"code\":");
    srv_buf_json_string(&resp->body, srv_error_name(code));
    srv_buf_puts(&resp->body, ",\"message\":");
    srv_buf_json_string(&resp->body, err->message[0] ? err->message : srv_error_name(code));
    if (err->field[0]) {
        srv_buf_puts(&resp->body, ",\"field\":");
        srv_buf_json_string(&resp->body, err->field);
    }
    srv_buf_putc(&resp->body, '}');
    if (request_id) {
        srv_buf_puts(&resp->body, ",\"request_id\":");
        srv_buf_json_string(&resp->body, request_id);
    }
    srv_buf_puts(&resp->body, "}\n");
    if (resp->status == 503)
        srv_response_header(resp, "Retry-After", "1");
}

void srv_api_error_reply(void *ctx, const srv_request *req, srv_response *resp,
                         const srv_error *err)
{
    const char *p = req->path;
    if (p && strncmp(p, "/v2", 3) == 0 && (p[3] == '\0' || p[3] == '/'))
        srv_v2_error_reply(resp, err, req->id);
    else
        srv_v1_error_reply(resp, err, req->id);
}
