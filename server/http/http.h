/*
 * http.h - requests, responses, routes and the daemon (libmicrohttpd underneath).
 *
 * A handler sees a whole request (path parameters, query, headers, the complete body) and fills a
 * response; it never touches libmicrohttpd. Everything that applies to all routes (body limits, 411,
 * 415, 404 vs 405, draining, the log line, turning errors into replies) happens in http.c, in one
 * function (dispatch) where auth, CORS, metrics and conditional requests plug in.
 *
 * Threads: libmicrohttpd runs --threads threads, each polling many connections with epoll; bodies are
 * read without blocking, so a slow or stalled client holds up nobody, and deadline.c cuts off one
 * that holds a connection too long with its headers or body. Handlers of routes marked
 * SRV_ROUTE_HEAVY with a large body run on a worker (the connection is suspended meanwhile), so a
 * long forward pass does not stall other connections on the same thread.
 */
#ifndef ATTND_HTTP_H
#define ATTND_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "app.h"
#include "buf.h"
#include "error.h"
#include "options.h"

#define SRV_MAX_PATH_PARAMS 4
#define SRV_MAX_RESP_HEADERS 12

struct MHD_Connection;
struct srv_route;

typedef struct srv_request {
    const char *method;       /* "GET", "PUT", ... ("HEAD" is served by the GET route)          */
    const char *path;         /* URL path, percent-decoded, without the query string              */
    const char *params[SRV_MAX_PATH_PARAMS]; /* values of the route's {placeholders}, in order   */
    int nparams;
    const char *body;         /* the complete body, NUL-terminated (not counted in body_len)     */
    size_t body_len;
    const struct srv_route *route;
    struct MHD_Connection *conn; /* for the getters below; handlers do not use it directly       */
    double t_start;           /* srv_now() when the request line arrived                          */
    /* base64 texts of the body decoded while it arrived (predecode.h), on SRV_ROUTE_BASE64 routes
     * with large bodies; else NULL */
    struct srv_predecoder *predecoded;
} srv_request;

/* Value of a request header (case-insensitive name), or NULL. Borrowed for the request's life. */
const char *srv_request_header(const srv_request *req, const char *name);

/* Value of a query argument (?name=value, decoded), or NULL; "" for ?name with no value. */
const char *srv_request_query(const srv_request *req, const char *name);

/* Value of the path placeholder {name} of the matched route, or NULL. */
const char *srv_request_param(const srv_request *req, const char *name);

typedef struct srv_response {
    int status;               /* 200 unless set                                                   */
    const char *content_type; /* static string; default "application/json"                       */
    srv_buf body;             /* handed to libmicrohttpd without a copy                           */
    int nheaders;
    struct {
        char name[48];
        char value[256];
    } headers[SRV_MAX_RESP_HEADERS];
    char timing[160];         /* the handler's steps for Server-Timing (srv_response_timing)      */
} srv_response;

/* Makes room for at least `bytes` of body up front (large replies reuse cached, already-faulted
 * blocks: bigbuf.h). Call on an empty body. Returns 0 or -1 (out of memory; the body then grows as
 * it is written). */
int srv_response_reserve(srv_response *resp, size_t bytes);

/* Records that the handler's step `name` (a token: "parse", "pass", "write") took ms milliseconds.
 * The reply then carries them in a Server-Timing header (W3C Server Timing), after "body", the
 * time from the request's headers to its last body byte: a client sees where its latency went. */
void srv_response_timing(srv_response *resp, const char *name, double ms);

/* Adds a response header (printf-style value). Returns 0, or -1 when there is no room. */
int srv_response_header(srv_response *resp, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Replaces the response with the /v1 error reply for err: srv_error_status(err->code) and
 * {"error": {"code": ..., "message": ..., "field": ...}} ("field" left out when empty), plus
 * Retry-After for 503. The one place a /v1 error becomes HTTP. */
void srv_response_error(srv_response *resp, const srv_error *err);

/* A handler: fills resp and returns 0, or returns -1 with err filled (dispatch then writes the
 * error reply with the route's error writer). */
typedef int (*srv_handler)(srv_app *app, const srv_request *req, srv_response *resp,
                           srv_error *err);

enum srv_route_flags {
    SRV_ROUTE_BODY = 1 << 0,    /* needs a body: 411 without Content-Length or chunked           */
    SRV_ROUTE_JSON = 1 << 1,    /* the body is JSON: 415 for another Content-Type (none = JSON)   */
    SRV_ROUTE_CHANGES = 1 << 2, /* changes state (auth, --read-only apply)                        */
    SRV_ROUTE_HEAVY = 1 << 3,   /* may compute for long: large bodies run on a worker thread     */
    SRV_ROUTE_BINARY = 1 << 4,  /* also takes application/octet-stream (safetensors) bodies       */
    SRV_ROUTE_PROBE = 1 << 5,   /* health/metrics probe: never needs the API key                  */
    SRV_ROUTE_BASE64 = 1 << 6,  /* large bodies' base64 tensors are decoded as they arrive        */
};

typedef struct srv_route {
    const char *method;  /* "GET", "PUT", "POST", "DELETE"                                        */
    const char *pattern; /* "/v1/layers/{name}/forward": {x} matches one non-empty segment        */
    srv_handler handler;
    unsigned flags;      /* srv_route_flags                                                       */
    /* writes an error reply in this API's dialect; NULL = srv_response_error (/v1) */
    void (*error_writer)(srv_response *resp, const srv_error *err);
    /* the query arguments the route reads, space-separated ("L S N"; "" = none): any other is a
     * 400 unknown_field before the body is read, as an unknown body field is (a misplaced
     * "?need_weights=true" must not pass silently). NULL = not checked (/v2, probes). */
    const char *query;
} srv_route;

/* The route table (routes.c), ended by an entry with method NULL. */
extern const srv_route srv_routes[];

/* Finds the route for method and path. Returns it (req->route and req->params filled; the params
 * are copied into scratch, which needs strlen(path) + 1 bytes and must outlive the request), or NULL
 * with err set: SRV_E_NOT_FOUND, or SRV_E_METHOD with `allow` (size >= 64) holding the value for
 * the Allow header. */
const srv_route *srv_route_match(const char *method, const char *path, srv_request *req,
                                 char *scratch, size_t scratch_size, char *allow, size_t allow_size,
                                 srv_error *err);

/* ---------------------------------------------------------------------------------------------- */
/* The daemon                                                                                      */

typedef struct srv_daemon srv_daemon;

/* Creates the app from opt and starts listening on opt->host:opt->port (0 = any free port) with
 * opt->threads HTTP threads. Returns the running daemon, or NULL with err filled (bad host, port in
 * use, ...). Usable in-process (tests). Free with srv_daemon_stop. */
srv_daemon *srv_daemon_start(const srv_options *opt, srv_error *err);

/* The port the daemon listens on (the real one when started with port 0). */
int srv_daemon_port(const srv_daemon *d);

/* The daemon's shared state (borrowed). */
srv_app *srv_daemon_app(srv_daemon *d);

/* Begins a graceful stop: /readyz answers 503, the listening socket closes (no new connections),
 * requests that arrive on open connections get 503 + Connection: close. Then waits up to
 * deadline_ms for the requests in flight to complete. Returns the number still in flight (0 = all
 * done). Call srv_daemon_stop afterwards. */
int srv_daemon_drain(srv_daemon *d, int deadline_ms);

/* Stops the daemon (closing every connection) and frees it and its app. Accepts NULL. */
void srv_daemon_stop(srv_daemon *d);

#endif
