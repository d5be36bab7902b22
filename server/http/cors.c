/*
 * cors.c - CORS for browser front-ends (--cors-origin): which origins are allowed, the headers
 * every reply to one carries, and the answer to a preflight (OPTIONS).
 */
#include <stdio.h>
#include <string.h>

#include "cors.h"
#include "http_internal.h"

const char *srv_cors_allow_origin(const char *configured, const char *origin)
{
    if (!configured || !configured[0])
        return NULL;
    if (strcmp(configured, "*") == 0)
        return configured;
    if (!origin || !origin[0])
        return NULL;
    size_t olen = strlen(origin);
    const char *p = configured;
    while (*p) {
        while (*p == ' ' || *p == ',')
            p++;
        size_t n = strcspn(p, ", ");
        if (n == olen && n > 0 && strncmp(p, origin, n) == 0)
            return origin;
        p += n;
    }
    return NULL;
}

/* The origin c's reply allows (its Origin, or "*"), or NULL: no CORS headers. */
static const char *allowed_origin(req_ctx *c)
{
    const char *conf = c->h->cfg.cors_origin;
    return conf[0] ? srv_cors_allow_origin(
                         conf, MHD_lookup_connection_value(c->req.conn, MHD_HEADER_KIND, "Origin"))
                   : NULL;
}

/* Every reply to an allowed origin says so, and which headers a page may read. */
void srv_http_cors_headers(req_ctx *c, srv_header_fn add, void *ctx)
{
    const char *allow = allowed_origin(c);
    if (!allow)
        return;
    add(ctx, "Access-Control-Allow-Origin", allow);
    if (strcmp(allow, "*") != 0)
        add(ctx, "Vary", "Origin");
    add(ctx, "Access-Control-Expose-Headers", SRV_CORS_EXPOSE_HEADERS);
    add(ctx, "Timing-Allow-Origin", allow); /* Server-Timing for that page */
}

/* OPTIONS: 204 with Allow for a known path (404 otherwise), and the CORS preflight answer when the
 * origin is allowed (srv_http_cors_headers adds Allow-Origin). Needs no API key: browsers send
 * preflights without credentials. */
enum MHD_Result srv_http_preflight(req_ctx *c)
{
    srv_error err = {0};
    char allow[64] = "";
    srv_request probe = c->req;
    if (strcmp(c->path, "*") == 0) /* OPTIONS *: the server as a whole */
        snprintf(allow, sizeof allow, "GET, HEAD, PUT, POST, DELETE");
    else if (!srv_route_match(c->h->hooks.routes, "OPTIONS", c->path, &probe, c->params,
                              strlen(c->path) + 1, allow, sizeof allow, &err) &&
             err.code == SRV_E_NOT_FOUND)
        return srv_http_queue_error(c, &err, NULL, false);
    srv_response resp;
    srv_http_response_init(&resp);
    resp.status = 204;
    srv_response_header(&resp, "Allow", "%s, OPTIONS", allow);
    const char *origin = MHD_lookup_connection_value(c->req.conn, MHD_HEADER_KIND, "Origin");
    if (srv_cors_allow_origin(c->h->cfg.cors_origin, origin)) {
        srv_response_header(&resp, "Access-Control-Allow-Methods", "%s", SRV_CORS_ALLOW_METHODS);
        srv_response_header(&resp, "Access-Control-Allow-Headers", "%s", SRV_CORS_ALLOW_HEADERS);
        srv_response_header(&resp, "Access-Control-Max-Age", "%d", SRV_CORS_MAX_AGE);
    }
    enum MHD_Result ok = srv_http_queue(c, &resp, false);
    srv_http_response_free(&resp);
    return ok;
}
