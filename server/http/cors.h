/*
 * cors.h - CORS for browser front-ends (--cors-origin), answered by the HTTP server itself.
 */
#ifndef ATTND_CORS_H
#define ATTND_CORS_H

/* The Access-Control-Allow-Origin value for a request from origin (its Origin header, may be NULL)
 * when configured is the --cors-origin value: "*" allows every origin (answer "*"); else a
 * comma-separated list of exact origins ("https://a.example, http://localhost:3000"), and the
 * request's origin is echoed when listed (the reply must then carry Vary: Origin). NULL when no
 * CORS header is due. The result is configured's "*" or origin (borrowed). */
const char *srv_cors_allow_origin(const char *configured, const char *origin);

/* What a preflight (OPTIONS) reply allows. */
#define SRV_CORS_ALLOW_METHODS "GET, HEAD, PUT, POST, DELETE, OPTIONS"
#define SRV_CORS_ALLOW_HEADERS \
    "Authorization, Content-Type, Accept, If-Match, If-None-Match, Inference-Header-Content-Length, " \
    "X-Request-Id"
#define SRV_CORS_EXPOSE_HEADERS \
    "ETag, Retry-After, Inference-Header-Content-Length, Location, Server-Timing, X-Request-Id"
#define SRV_CORS_MAX_AGE 600

#endif
