/*
 * http_internal.h - what the files of server/http/ share and nothing outside may use: the server's
 * state, one request's context, and the steps they call in each other.
 */
#ifndef ATTND_HTTP_INTERNAL_H
#define ATTND_HTTP_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>

#include <microhttpd.h>

#include "http.h"

typedef struct req_ctx req_ctx;

struct srv_http {
    struct MHD_Daemon *mhd;
    srv_http_config cfg;
    srv_http_hooks hooks;
    char host[256];           /* cfg.host points here                                       */
    char cors_origin[512];    /* cfg.cors_origin points here                                */
    srv_deadlines *deadlines; /* per-phase deadlines of every connection (deadline.h)       */
    srv_body_clients *clients; /* each client address's share of cfg.bodies (body_budget.h)   */
    int port;

    pthread_mutex_t lock;
    pthread_cond_t idle;  /* a request completed while draining                        */
    pthread_cond_t jobs;  /* a job was queued, or the workers must stop                 */
    int active;           /* requests between their first callback and on_completed    *
                           * (atomic: touched twice per request, locked only to drain) */
    bool quiesced;        /* a drain began (atomic): new requests get 503               */
    int listen_fd;        /* handed back by the drain; closed after libmicrohttpd stops (-1) */

    /* workers for heavy handlers (worker.c) */
    pthread_t *workers;
    int nworkers;
    req_ctx *jobs_head, *jobs_tail;
    int busy;             /* handed to a worker and not resumed yet (atomic)           */
    int working;          /* jobs handed to the workers, not finished nor dropped (atomic) */
    bool stopping;
    pthread_t watcher;    /* refuses queued passes at --queue-wait-ms (worker.c)            */
    bool watching;        /* the watcher runs                                               */
    pthread_cond_t watch; /* a job was queued, or the watcher must stop (CLOCK_MONOTONIC)  */
};

struct req_ctx {
    srv_http *h;
    bool started;        /* the access callback has seen it (the log callback creates it)      */
    srv_request req;
    char method[16];
    char id[SRV_REQUEST_ID_MAX + 1]; /* req.id points here                                    */
    char *path;          /* owned copy: libmicrohttpd's url is not ours to keep               */
    char *params;        /* owned, as long as path: the values of the path's placeholders      */
    srv_buf body;
    int64_t limit;       /* --max-body-bytes                                                   */
    bool responded;      /* a response was queued                                              */
    bool no_host;        /* an HTTP/1.1 request without Host (400, RFC 9112 3.2)               */
    bool too_large;      /* a chunked body went over the limit: the rest is read and dropped   */
    int over_budget;     /* a body grew past --max-body-memory (SRV_BODY_FULL) or its address's
                          * share (SRV_BODY_OVER_SHARE): the rest is read and dropped, then 503 */
    int64_t length;      /* Content-Length, 0 when chunked or none                             */
    int64_t reserved;    /* bytes of the body budget (cfg.bodies) this request holds           */
    srv_body_client client; /* whose share of the budget the body counts in                     */
    size_t dropped;      /* bytes read and dropped since over_budget or the refusal            */
    struct refusal {     /* refused at its headers while its body comes: the answer at its end */
        srv_error err;
        char allow[64];
        bool close;
    } *refusal;
    bool offloaded;      /* the handler runs (or ran) on a worker                              */
    bool cancelled;      /* its client hung up and the work for it stopped: no reply, logged 499 */
    double t_body;       /* srv_now() when the body was complete (the handler's start)         */
    srv_response *done;  /* the worker's response, queued when the connection resumes         */
    req_ctx *next_job;
    double queued_at;    /* srv_now() when handed to the workers                               */
    bool worker_idle;    /* a worker was idle when it was handed over: it waited for none       */
    int status;
    size_t bytes_in, bytes_out;
    /* the request target as libmicrohttpd's URI log callback saw it (strict.c) */
    const char *target;  /* in libmicrohttpd's read buffer; only compared, never read after    */
    size_t target_len;   /* its strlen then                                                    */
    int target_bad;      /* its first control byte, DEL or space, or -1                        */
    size_t target_bad_at;
    int query_args;      /* arguments in its query                                             */
};

/* request.c: libmicrohttpd's access and completion callbacks (cls = the srv_http), and the one
 * place every request with a complete body passes through: runs its handler into resp, then gives
 * back its body and its share of the body budget (c->cancelled set when the handler stopped
 * because the client hung up: SRV_E_CANCELLED). */
enum MHD_Result srv_http_on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                    const char *method, const char *version,
                                    const char *upload_data, size_t *upload_data_size,
                                    void **con_cls);
void srv_http_on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                           enum MHD_RequestTerminationCode toe);
size_t srv_http_unescape(void *cls, struct MHD_Connection *conn, char *s);
void srv_http_dispatch(req_ctx *c, srv_response *resp);

/* A query with more arguments than this is answered 414 (no route reads more than 3). */
#define SRV_HTTP_MAX_QUERY_ARGS 64

/* request.c: libmicrohttpd's URI log callback (cls = the srv_http): creates the request's context
 * when its request line arrives, and hands the target to strict.c. */
void *srv_http_on_target(void *cls, const char *uri, struct MHD_Connection *conn);

/* strict.c: what the target holds (control bytes, spaces, query arguments), from the URI log
 * callback, before libmicrohttpd parses it; a query past SRV_HTTP_MAX_QUERY_ARGS is cut off there.
 * Then, from the first access callback (method, url and version as libmicrohttpd passes them):
 * 0, or -1 with err (400 for a method that is not a token, a control byte, space or NUL in the
 * target, a header name that is not a token, a control byte or NUL in a header value, a folded
 * header, two Host headers; 414 for too many query arguments). */
void srv_http_target_seen(req_ctx *c, const char *uri);
int srv_http_check_syntax(req_ctx *c, const char *method, const char *url, const char *version,
                          srv_error *err);

/* reply.c: a response's life (init, free), queueing it on c's connection (the body buffer is
 * handed over without a copy; close adds Connection: close), and an error reply in the dialect of
 * c's path (Allow added when given). */
void srv_http_response_init(srv_response *resp);
void srv_http_response_free(srv_response *resp);
enum MHD_Result srv_http_queue(req_ctx *c, srv_response *resp, bool close);
enum MHD_Result srv_http_queue_error(req_ctx *c, const srv_error *err, const char *allow,
                                     bool close);
/* Writes the error reply for err into resp through the hooks. */
void srv_http_error_reply(req_ctx *c, srv_response *resp, const srv_error *err);
/* The same reply as a whole HTTP response, closing the connection, for the reaper to send
 * (srv_deadlines_refused): malloc'd, *len bytes, *status its status; NULL when out of memory. */
char *srv_http_error_text(req_ctx *c, const srv_error *err, const char *allow, size_t *len,
                          int *status);
/* The access log line and the counters of a request that ended (status 0: no reply). */
void srv_http_log_request(req_ctx *c, int status);

/* A reply's headers handed out one at a time: to libmicrohttpd's response, or as lines of a reply
 * sent as text (srv_http_error_text). */
typedef void (*srv_header_fn)(void *ctx, const char *name, const char *value);

/* cors.c: the CORS headers of a reply to c, and the answer to an OPTIONS request. */
void srv_http_cors_headers(req_ctx *c, srv_header_fn add, void *ctx);
enum MHD_Result srv_http_preflight(req_ctx *c);

/* worker.c: start cfg.workers workers (as many as start; -1 when out of memory), hand c to one
 * (false when none can take it: run it on this thread), stop them (every queued job is finished
 * first). */
int srv_http_workers_start(srv_http *h);
bool srv_http_offload(req_ctx *c);
void srv_http_workers_stop(srv_http *h);
/* deadline.c's gone callback (cls = the srv_http): the request on conn, if it waits in the queue
 * with its gone flag set, leaves it at once (no reply; its connection resumes and closes). */
void srv_http_job_gone(void *cls, struct MHD_Connection *conn);

#endif
