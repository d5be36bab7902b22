/*
 * api_index.c - GET /: what someone who opens the daemon's address finds. A browser (Accept:
 * text/html) is sent to the viewer at /ui when the daemon serves one; anything else gets a small
 * JSON index of where to go next.
 */
#include <stdbool.h>
#include <string.h>

#include "api.h"
#include "http/accept.h"

/* True when the table has a GET route with exactly this pattern. */
static bool serves(const char *pattern)
{
    for (const srv_route *r = srv_routes; r->method; r++)
        if (strcmp(r->method, "GET") == 0 && strcmp(r->pattern, pattern) == 0)
            return true;
    return false;
}

/* True when an Accept header asks for text/html by name with a quality above 0 ("text/html;q=0"
 * refuses it) and above application/json's, named or through a range ("application/json,
 * text/html;q=0.1" gets JSON, and so does any type at 0.9 beside text/html at 0.8; of equal
 * qualities the earlier entry wins); a range alone never asks for HTML (a script asking for any
 * type gets JSON). */
static bool wants_html(const char *accept)
{
    int ph = 0, pj = 0;
    const int qh = srv_accept_quality(accept, "text/html", &ph);
    /* JSON's quality: named, or else through the range that covers it: application's, then any */
    int qj = srv_accept_quality(accept, "application/json", &pj);
    if (qj < 0)
        qj = srv_accept_quality(accept, "application/*", &pj);
    if (qj < 0)
        qj = srv_accept_quality(accept, "*/*", &pj);
    return qh > 0 && (qh > qj || (qh == qj && ph < pj));
}

int srv_api_index(void *ctx, const srv_request *req, srv_response *resp, srv_error *err)
{
    bool ui = serves("/ui");
    if (ui && wants_html(srv_request_header(req, "Accept"))) {
        resp->status = 302;
        resp->content_type = "text/plain; charset=utf-8";
        srv_response_header(resp, "Location", "/ui");
        srv_buf_puts(&resp->body, "the viewer is at /ui\n");
        return 0;
    }
    srv_buf_puts(&resp->body, "{\"name\":\"attnd\",\"version\":");
    srv_buf_json_string(&resp->body, ATTND_VERSION);
    srv_buf_puts(&resp->body, ",\"description\":\"torch.nn.MultiheadAttention over HTTP\","
                              "\"links\":{\"layers\":\"/v1/layers\",\"openapi\":\"/openapi.yaml\","
                              "\"v2\":\"/v2\",\"healthz\":\"/healthz\",\"readyz\":\"/readyz\","
                              "\"metrics\":\"/metrics\"");
    if (ui)
        srv_buf_puts(&resp->body, ",\"ui\":\"/ui\"");
    srv_buf_puts(&resp->body, "}}\n");
    return 0;
}
