/*
 * http.h - the HTTP server: requests, responses, routes and the server (libmicrohttpd underneath).
 *
 * This layer knows nothing of attention, layers or the API's JSON: it matches a request to a route
 * of the table it is given, checks the framing and size of the body against its limits, gathers the
 * body, runs the route's handler (on a worker for heavy routes) and sends the response. What the
 * API decides - who may do what, the dialect of an error body, what is counted - it asks through
 * the hooks (srv_http_hooks) it is started with. It may include base/ only.
 *
 * A handler sees a whole request (path parameters, query, headers, the complete body) and fills a
 * response; it never touches libmicrohttpd.
 *
 * Threads: libmicrohttpd runs `threads` threads, each polling many connections with epoll; bodies
 * are read without blocking, so a slow or stalled client holds up nobody, and deadline.c cuts off
 * one that holds a connection too long with its headers or body, and notices one that hangs up
 * while its request is handled (srv_request.gone: the work for it stops, a queued one is dropped).
 * Handlers of routes marked SRV_ROUTE_HEAVY with a large body, and every handler of routes marked
 * SRV_ROUTE_WORKER, run on a worker (the connection is suspended meanwhile), so a long forward pass
 * or a layer being built does not stall other connections on the same thread.
 *
 * The files: server.c (start, drain, stop), request.c (the life of a request, its body), strict.c
 * (the request line and headers against the RFCs' MUSTs), reply.c
 * (responses and the access log), route.c (matching), worker.c (the workers), cors.c (CORS),
 * deadline.c (slow clients), body_budget.c (bodies held at once), fdlimit.c (descriptors).
 */
#ifndef ATTND_HTTP_H
#define ATTND_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/error.h"
#include "base/log.h"
#include "body_budget.h"
#include "deadline.h"
#include "request_id.h"

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
    const char *id;           /* the request id (request_id.h): the client's X-Request-Id when it
                               * is sane, else one made here; echoed on the reply and logged      */
    /* on SRV_ROUTE_STREAM routes: what the hooks' stream_open made of the body as it arrived
     * (the API's base64 predecoder, api/body.c), or NULL */
    void *stream;
    /* nonzero once the client is seen gone (it hung up) while the request is handled: work for it
     * can stop (never NULL; read with __atomic_load_n, or srv_request_gone). A handler that stops
     * for it returns -1 with SRV_E_CANCELLED: the server then sends nothing and closes. */
    const int *gone;
} srv_request;

/* True once the request's client has hung up (srv_request.gone). */
bool srv_request_gone(const srv_request *req);

/* Value of a request header (case-insensitive name), or NULL. Borrowed for the request's life. */
const char *srv_request_header(const srv_request *req, const char *name);

/* Value of a query argument (?name=value, decoded), or NULL; "" for ?name with no value. */
const char *srv_request_query(const srv_request *req, const char *name);

/* The request's query arguments again as a query string ("?a=1&b=x%20y", percent-encoded as
 * needed; "" when there are none) in out [n], for a redirect that keeps them. False (out "") when
 * it does not fit. */
bool srv_request_query_text(const srv_request *req, char *out, size_t n);

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

/* A handler: fills resp and returns 0, or returns -1 with err filled (the server then writes the
 * error reply with the hooks' error_reply). ctx is the hooks' ctx (the daemon's shared state). */
typedef int (*srv_handler)(void *ctx, const srv_request *req, srv_response *resp, srv_error *err);

enum srv_route_flags {
    SRV_ROUTE_BODY = 1 << 0,    /* needs a body: 411 without Content-Length or chunked           */
    SRV_ROUTE_JSON = 1 << 1,    /* the body is JSON: 415 for another Content-Type (none = JSON)   */
    SRV_ROUTE_CHANGES = 1 << 2, /* changes state (for the admit hook: auth, --read-only)         */
    SRV_ROUTE_HEAVY = 1 << 3,   /* may compute for long: large bodies run on a worker thread     */
    SRV_ROUTE_BINARY = 1 << 4,  /* also takes application/octet-stream (safetensors) bodies       */
    SRV_ROUTE_PROBE = 1 << 5,   /* health/metrics probe (for the admit hook: never needs a key)  */
    SRV_ROUTE_STREAM = 1 << 6,  /* large bodies are shown to the hooks' stream as they arrive    */
    SRV_ROUTE_PUBLIC = 1 << 7,  /* static files anyone may read (the viewer): never need a key   */
    SRV_ROUTE_WORKER = 1 << 8,  /* always runs on a worker, whatever its body: slow (reads files,
                                 * builds layers: a 60-byte PUT can make a 1 GiB one, waits on the
                                 * data dir)                                                    */
};

typedef struct srv_route {
    const char *method;  /* "GET", "PUT", "POST", "DELETE"                                        */
    const char *pattern; /* "/v1/layers/{name}/forward": {x} matches one non-empty segment        */
    srv_handler handler;
    unsigned flags;      /* srv_route_flags                                                       */
    /* the query arguments the route reads, space-separated ("L S N"; "" = none): any other is a
     * 400 unknown_field before the body is read, as an unknown body field is (a misplaced
     * "?need_weights=true" must not pass silently). NULL = not checked (/v2, probes). */
    const char *query;
} srv_route;

/* Finds the route for method and path in routes (a table ended by an entry with method NULL).
 * Returns it (req->route and req->params filled; the params are copied into scratch, which needs
 * strlen(path) + 1 bytes and must outlive the request), or NULL with err set: SRV_E_NOT_FOUND, or
 * SRV_E_METHOD with `allow` (size >= 64) holding the value for the Allow header. */
const srv_route *srv_route_match(const srv_route *routes, const char *method, const char *path,
                                 srv_request *req, char *scratch, size_t scratch_size, char *allow,
                                 size_t allow_size, srv_error *err);

/* ---------------------------------------------------------------------------------------------- */
/* The server                                                                                      */

/* What the layer above decides for the server. Every function gets ctx first. */
typedef struct srv_http_hooks {
    void *ctx;                /* passed to every hook and handler (the daemon's shared state)     */
    const srv_route *routes;  /* the route table, ended by an entry with method NULL             */

    /* A route matched and no body byte is read yet: 0 lets the request go on, -1 with err answers
     * it (401, 403 ...). authorization is the request's header or NULL. May be NULL (all go on). */
    int (*admit)(void *ctx, const srv_request *req, const char *authorization, srv_error *err);

    /* Writes the error reply for err in the dialect of req->path (req->route may be NULL: no route
     * matched; req->id is always set, for the body). Required. */
    void (*error_reply)(void *ctx, const srv_request *req, srv_response *resp, const srv_error *err);

    /* Counting (each may be NULL): a request began (headers in); a request ended (route: index in
     * the table or -1; status 0 = no reply; seconds from arrival to its end; body bytes in and out);
     * a client connection opened (+1) or closed (-1); the server cut one off (deadline.h). */
    void (*request_begin)(void *ctx);
    void (*request_end)(void *ctx, int route, int status, double seconds, uint64_t bytes_in,
                        uint64_t bytes_out);
    void (*connection)(void *ctx, int delta);
    void (*connection_cut)(void *ctx, srv_cut_reason reason);
    /* a request entered (+1) or left (-1) the queue of work for the workers (may be NULL) */
    void (*queued)(void *ctx, int delta);

    /* SRV_ROUTE_HEAVY requests handled on an HTTP thread (small bodies) must not wait there for
     * the application's capacity, which would stall every connection the thread polls: slot_try
     * reserves a unit of it for the request about to be handled on this thread (false: none free,
     * and the request goes to a worker instead), slot_drop after the handler returns gives back a
     * reservation the handler did not use. Both NULL: the handler runs here as it is. */
    bool (*slot_try)(void *ctx);
    void (*slot_drop)(void *ctx);

    /* SRV_ROUTE_STREAM routes with bodies of stream_min_body bytes or more: stream_open makes an
     * observer for a body of `length` bytes (NULL: none), stream_feed shows it the body so far
     * (body[0, len), the bytes after the last call's len are new), stream_close frees it after the
     * request. The observer is req->stream for the handler. All NULL: no streams. */
    size_t stream_min_body;
    void *(*stream_open)(void *ctx, size_t length);
    void (*stream_feed)(void *stream, const char *body, size_t len);
    void (*stream_close)(void *stream);
} srv_http_hooks;

/* How the server listens and what it takes from clients. */
typedef struct srv_http_config {
    const char *host;          /* address to bind ("127.0.0.1", "::", a name)                     */
    int port;                  /* 0 = any free port                                               */
    int threads;               /* libmicrohttpd threads                                           */
    int workers;               /* threads running heavy handlers (0: they run on the HTTP thread) */
    int queue_wait_ms;         /* a heavy request waiting longer than this for a worker: 503      */
    int timeout;               /* idle connection timeout, seconds                                */
    int max_connections;       /* open connections at once                                        */
    int header_timeout;        /* seconds a request's headers may take (0 = no limit)             */
    int min_body_rate;         /* bytes/s bodies (in and out) must average (0 = no limit)         */
    int64_t max_body_bytes;    /* one request body (413 past it)                                  */
    srv_body_budget *bodies;   /* bodies held at once (borrowed; must outlive the server)         */
    const char *cors_origin;   /* allowed browser origins ("" = no CORS): cors.c                  */
    srv_log_format log_format; /* the access log (base/log.h)                                     */
    bool external;             /* no listening socket and no threads of libmicrohttpd's: the      *
                                * caller hands connections in (srv_http_add_connection) and runs  *
                                * the server in its own loop (srv_http_run); host and port unused *
                                * (in-process fuzzing: fuzz/fuzz_http.c)                          */
} srv_http_config;

typedef struct srv_http srv_http;

/* Starts listening on cfg->host:cfg->port with cfg->threads HTTP threads and cfg->workers workers.
 * cfg and hooks are copied (the strings and tables they point to must outlive the server). Returns
 * the running server, or NULL with err filled (bad host, port in use, ...). Free with
 * srv_http_stop. */
srv_http *srv_http_start(const srv_http_config *cfg, const srv_http_hooks *hooks, srv_error *err);

/* The port the server listens on (the real one when started with port 0). */
int srv_http_port(const srv_http *h);

/* Begins a graceful stop: the listening socket closes (no new connections), requests that arrive on
 * open connections get 503 + Connection: close. Then waits up to deadline_ms for the requests in
 * flight to complete. Returns the number still in flight (0 = all done). Call srv_http_stop
 * afterwards. */
int srv_http_drain(srv_http *h, int deadline_ms);

/* A server started with cfg->external: serves the connected stream socket fd (one end of a
 * socketpair) as a client connection from 127.0.0.1; the server owns fd from then on. Returns 0 or
 * -1 (refused: connection limit, out of memory; fd is closed). */
int srv_http_add_connection(srv_http *h, int fd);

/* A server started with cfg->external: does what is ready on its connections, waiting up to
 * timeout_ms (0: not at all) for something to be. Returns 0 or -1. */
int srv_http_run(srv_http *h, int timeout_ms);

/* Requests handed to a worker whose connection is not resumed yet: their replies are still to
 * come (a caller running an external server waits for them before it closes its connections). */
int srv_http_busy(const srv_http *h);

/* Stops the server (closing every connection) and frees it. Accepts NULL. */
void srv_http_stop(srv_http *h);

#endif
