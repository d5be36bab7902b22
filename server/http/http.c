/*
 * http.c - the daemon: libmicrohttpd glue, body accumulation with limits, dispatch, replies, log.
 *
 * Life of a request (one req_ctx, created on the first callback, freed in on_completed):
 *   1. headers in: check Host (400), match the route (404 / 405 + Allow) and its query arguments
 *      (400), check the body's framing and size against the limits (501 for a transfer coding
 *      other than chunked, 400 for Content-Lengths that disagree, 411, 413 from Content-Length,
 *      415 for the type or a Content-Encoding), reserve its Content-Length from --max-body-memory
 *      (503 when it does not fit, body_budget.h) and answer at once when they fail, before any of
 *      the body is read (libmicrohttpd then sends no "100 Continue");
 *   2. body chunks in: appended to one buffer sized from Content-Length up front, counted against
 *      --max-body-bytes and --max-body-memory for chunked bodies (413 / 503 at the body's end);
 *   3. body complete: dispatch() runs the handler, on this thread or, for heavy routes with big bodies,
 *      on a worker while the connection is suspended (so this thread keeps serving its other
 *      connections); the response body buffer is handed to libmicrohttpd without a copy;
 *      once the handler has run, the body and its share of the budget are given back;
 *   4. on_completed: one log line, the context is freed.
 * Each step also tells deadline.c the request's phase (headers in, body bytes, handled, done), so a
 * client too slow with its headers or body is cut off (--header-timeout, --min-body-rate).
 */
#include "http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "api_v2.h"
#include "auth.h"
#include "bigbuf.h"
#include "deadline.h"
#include "log.h"
#include "predecode.h"

/* Bodies at least this large on a SRV_ROUTE_HEAVY route run on a worker thread. Below it the
 * handler's work is short (an S request, 19 KB in and 60 KB out, takes a few hundred microseconds
 * in all) and the hop to a worker (suspend, wake, resume) would cost more than it saves. */
#define OFFLOAD_MIN_BODY 65536

/* How much of a chunked body past --max-body-bytes (or --max-body-memory) is read (and dropped) so
 * that the client gets its 413 (503); past this the connection is closed instead. */
#define DISCARD_MAX ((size_t)64 << 20)

/* A chunked body reserves its share of --max-body-memory in steps of this much, not per chunk. */
#define BUDGET_STEP ((int64_t)1 << 20)

typedef struct req_ctx req_ctx;

struct srv_daemon {
    struct MHD_Daemon *mhd;
    srv_app *app;
    srv_deadlines *deadlines; /* per-phase deadlines of every connection (deadline.h) */
    int port;

    pthread_mutex_t lock;
    pthread_cond_t idle;  /* a request completed while draining                        */
    pthread_cond_t jobs;  /* a job was queued, or the workers must stop                 */
    int active;           /* requests between their first callback and on_completed    *
                           * (atomic: touched twice per request, locked only to drain) */
    bool quiesced;        /* a drain began (atomic)                                     */

    /* workers for heavy handlers */
    pthread_t *workers;
    int nworkers;
    req_ctx *jobs_head, *jobs_tail;
    bool stopping;
};

struct req_ctx {
    srv_daemon *d;
    srv_request req;
    char method[16];
    char *path;          /* owned copy: libmicrohttpd's url is not ours to keep               */
    char *params;        /* owned, as long as path: the values of the path's placeholders      */
    srv_buf body;
    srv_predecoder pre;  /* its base64 texts, decoded as they arrive (req.predecoded points here) */
    int64_t limit;       /* --max-body-bytes                                                   */
    bool responded;      /* a response was queued                                              */
    bool no_host;        /* an HTTP/1.1 request without Host (400, RFC 9112 3.2)               */
    bool too_large;      /* a chunked body went over the limit: the rest is read and dropped   */
    bool over_budget;    /* a chunked body grew past --max-body-memory: the same, then 503     */
    int64_t reserved;    /* bytes of the body budget (app->bodies) this request holds          */
    size_t dropped;      /* bytes read and dropped since over_budget                            */
    bool offloaded;      /* the handler runs (or ran) on a worker                              */
    double t_body;       /* srv_now() when the body was complete (the handler's start)         */
    srv_response *done;  /* the worker's response, queued when the connection resumes         */
    req_ctx *next_job;
    double queued_at;    /* srv_now() when handed to the workers                               */
    int status;
    size_t bytes_in, bytes_out;
};

double srv_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---------------------------------------------------------------------------------------------- */
/* Requests and responses                                                                         */

const char *srv_request_header(const srv_request *req, const char *name)
{
    return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

const char *srv_request_query(const srv_request *req, const char *name)
{
    const char *v = NULL;
    size_t vlen = 0;
    if (MHD_lookup_connection_value_n(req->conn, MHD_GET_ARGUMENT_KIND, name, strlen(name), &v,
                                      &vlen) != MHD_YES)
        return NULL;
    return v ? v : ""; /* "?name" without "=value" */
}

const char *srv_request_param(const srv_request *req, const char *name)
{
    if (!req->route)
        return NULL;
    /* walk the pattern's placeholders in order */
    int idx = 0;
    size_t nlen = strlen(name);
    for (const char *p = req->route->pattern; (p = strchr(p, '{')) != NULL; idx++) {
        const char *q = strchr(p, '}');
        if (!q)
            break;
        if ((size_t)(q - p - 1) == nlen && !strncmp(p + 1, name, nlen))
            return idx < req->nparams ? req->params[idx] : NULL;
        p = q;
    }
    return NULL;
}

int srv_response_reserve(srv_response *resp, size_t bytes)
{
    return resp->body.len ? srv_buf_reserve(&resp->body, bytes) : srv_bigbuf_reserve(&resp->body, bytes);
}

void srv_response_timing(srv_response *resp, const char *name, double ms)
{
    size_t n = strlen(resp->timing);
    snprintf(resp->timing + n, sizeof resp->timing - n, "%s%s;dur=%.3f", n ? ", " : "", name, ms);
}

int srv_response_header(srv_response *resp, const char *name, const char *fmt, ...)
{
    if (resp->nheaders >= SRV_MAX_RESP_HEADERS || strlen(name) >= sizeof resp->headers[0].name)
        return -1;
    int i = resp->nheaders++;
    snprintf(resp->headers[i].name, sizeof resp->headers[i].name, "%s", name);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(resp->headers[i].value, sizeof resp->headers[i].value, fmt, ap);
    va_end(ap);
    return 0;
}

static void response_init(srv_response *resp)
{
    memset(resp, 0, sizeof *resp);
    resp->status = 200;
    resp->content_type = "application/json";
    srv_buf_init(&resp->body);
}

static void response_free(srv_response *resp)
{
    if (resp)
        srv_bigbuf_free(&resp->body);
}

void srv_response_error(srv_response *resp, const srv_error *err)
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
    srv_buf_puts(&resp->body, "}}\n");
    if (resp->status == 503)
        srv_response_header(resp, "Retry-After", "1");
}

/* ---------------------------------------------------------------------------------------------- */
/* Routes                                                                                         */

/* Matches path against pattern; fills params (pointers into pathbuf, which is modified). */
static bool pattern_match(const char *pattern, const char *path, const char **params, int *nparams,
                          char *pathbuf, size_t pathbuf_size)
{
    *nparams = 0;
    size_t off = 0;
    const char *p = pattern, *s = path;
    while (*p && *s) {
        if (*p == '{') {
            const char *q = strchr(p, '}');
            size_t n = strcspn(s, "/");
            if (!q || n == 0 || *nparams >= SRV_MAX_PATH_PARAMS || off + n + 1 > pathbuf_size)
                return false;
            memcpy(pathbuf + off, s, n);
            pathbuf[off + n] = '\0';
            params[(*nparams)++] = pathbuf + off;
            off += n + 1;
            p = q + 1;
            s += n;
        } else if (*p++ != *s++) {
            return false;
        }
    }
    return *p == '\0' && *s == '\0';
}

const srv_route *srv_route_match(const char *method, const char *path, srv_request *req,
                                 char *scratch, size_t scratch_size, char *allow, size_t allow_size,
                                 srv_error *err)
{
    const char *m = strcmp(method, "HEAD") == 0 ? "GET" : method;
    const char *params[SRV_MAX_PATH_PARAMS];
    int nparams;
    size_t alen = 0;
    allow[0] = '\0';
    for (const srv_route *r = srv_routes; r->method; r++) {
        if (!pattern_match(r->pattern, path, params, &nparams, scratch, scratch_size))
            continue;
        if (!strcmp(r->method, m)) {
            memcpy(req->params, params, sizeof params);
            req->nparams = nparams;
            req->route = r;
            return r;
        }
        if (!strstr(allow, r->method) && alen + strlen(r->method) + 3 < allow_size)
            alen += (size_t)snprintf(allow + alen, allow_size - alen, "%s%s", alen ? ", " : "",
                                     r->method);
    }
    if (alen) {
        if (strstr(allow, "GET") && alen + 7 < allow_size)
            snprintf(allow + alen, allow_size - alen, ", HEAD");
        srv_error_set(err, SRV_E_METHOD, "", "%s is not allowed on %s; allowed: %s", method, path,
                      allow);
    } else {
        srv_error_set(err, SRV_E_NOT_FOUND, "", "no such path: %s", path);
    }
    return NULL;
}

/* ---------------------------------------------------------------------------------------------- */
/* Replies                                                                                        */

/* Queues resp on c's connection (the body buffer is handed over without a copy). */
/* CORS (--cors-origin): every reply to an allowed origin says so, and which headers a page may
 * read. */
static void add_cors(req_ctx *c, struct MHD_Response *r)
{
    const char *conf = c->d->app->opt.cors_origin;
    if (!conf[0])
        return;
    const char *origin = MHD_lookup_connection_value(c->req.conn, MHD_HEADER_KIND, "Origin");
    const char *allow = srv_cors_allow_origin(conf, origin);
    if (!allow)
        return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", allow);
    if (strcmp(allow, "*") != 0)
        MHD_add_response_header(r, "Vary", "Origin");
    MHD_add_response_header(r, "Access-Control-Expose-Headers", SRV_CORS_EXPOSE_HEADERS);
    MHD_add_response_header(r, "Timing-Allow-Origin", allow); /* Server-Timing for that page */
}

typedef struct big_block {
    void *data;
    size_t cap;
} big_block;

static void release_block(void *cls)
{
    big_block *blk = cls;
    srv_bigbuf_release(blk->data, blk->cap);
    free(blk);
}

static enum MHD_Result queue(req_ctx *c, srv_response *resp, bool close)
{
    size_t len = resp->body.len;
    struct MHD_Response *r;
    srv_deadlines_sending(c->req.conn); /* from here on the client must take the reply */
    if (resp->body.failed) {
        srv_error e = {0};
        srv_error_set(&e, SRV_E_NOMEM, "", "out of memory writing the response; retry later");
        srv_response_error(resp, &e);
        len = resp->body.len;
    }
    if (len >= SRV_BIGBUF_MIN_BYTES) {
        /* large: the block goes back to the cache when libmicrohttpd is done with it */
        big_block *blk = malloc(sizeof *blk);
        r = NULL;
        if (blk) {
            blk->cap = resp->body.cap;
            blk->data = srv_buf_steal(&resp->body, &len);
            r = MHD_create_response_from_buffer_with_free_callback_cls(len, blk->data,
                                                                       release_block, blk);
            if (!r)
                release_block(blk);
        }
    } else if (len) {
        char *data = srv_buf_steal(&resp->body, &len);
        r = MHD_create_response_from_buffer(len, data, MHD_RESPMEM_MUST_FREE);
        if (!r)
            free(data);
    } else {
        r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    }
    if (!r)
        return MHD_NO;
    if (len || resp->status != 204)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, resp->content_type);
    for (int i = 0; i < resp->nheaders; i++)
        MHD_add_response_header(r, resp->headers[i].name, resp->headers[i].value);
    if (resp->status == 401)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"attnd\"");
    if (resp->timing[0] && c->t_body > 0) {
        char st[sizeof resp->timing + 32];
        snprintf(st, sizeof st, "body;dur=%.3f, %s", (c->t_body - c->req.t_start) * 1e3, resp->timing);
        MHD_add_response_header(r, "Server-Timing", st);
    }
    add_cors(c, r);
    if (close)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ok = MHD_queue_response(c->req.conn, (unsigned)resp->status, r);
    MHD_destroy_response(r);
    c->responded = true;
    c->status = resp->status;
    c->bytes_out = len;
    return ok;
}

/* Answers c with an error in the dialect of its route (v1 when no route matched). */
static enum MHD_Result queue_error(req_ctx *c, const srv_error *err, const char *allow, bool close)
{
    srv_response resp;
    response_init(&resp);
    if (c->req.route && c->req.route->error_writer)
        c->req.route->error_writer(&resp, err);
    else if (c->path && strncmp(c->path, "/v2", 3) == 0 && (c->path[3] == '\0' || c->path[3] == '/'))
        srv_v2_error_reply(&resp, err); /* unmatched /v2 paths (404, 405) in the protocol's dialect */
    else
        srv_response_error(&resp, err);
    if (allow && *allow)
        srv_response_header(&resp, "Allow", "%s", allow);
    enum MHD_Result ok = queue(c, &resp, close);
    response_free(&resp);
    return ok;
}

/* ---------------------------------------------------------------------------------------------- */
/* Dispatch: the one place every request passes through once its body is complete                 */

static void budget_release(req_ctx *c);

static void dispatch(req_ctx *c, srv_response *resp)
{
    srv_app *app = c->d->app;
    srv_error err = {0};
    c->req.body = c->body.data ? c->body.data : "";
    c->req.body_len = c->body.len;
    if (c->req.route->handler(app, &c->req, resp, &err) < 0) {
        if (c->req.route->error_writer)
            c->req.route->error_writer(resp, &err);
        else
            srv_response_error(resp, &err);
    }
    /* the reply is built and holds no pointer into the body: its memory and its share of
     * --max-body-memory go back now, not when the client has read the reply (a client's next
     * request must not find its last body still counted) */
    c->req.body = "";
    c->req.body_len = 0;
    srv_bigbuf_free(&c->body);
    budget_release(c);
}

/* ---------------------------------------------------------------------------------------------- */
/* Workers for heavy handlers                                                                     */

static void *worker_main(void *arg)
{
    srv_daemon *d = arg;
    for (;;) {
        pthread_mutex_lock(&d->lock);
        while (!d->jobs_head && !d->stopping)
            pthread_cond_wait(&d->jobs, &d->lock);
        req_ctx *c = d->jobs_head;
        if (!c) {
            pthread_mutex_unlock(&d->lock);
            return NULL;
        }
        d->jobs_head = c->next_job;
        if (!d->jobs_head)
            d->jobs_tail = NULL;
        pthread_mutex_unlock(&d->lock);

        srv_response *resp = malloc(sizeof *resp);
        if (resp) {
            response_init(resp);
            /* Every worker was busy for longer than a pass may wait for a slot: the daemon is
             * over capacity; say so rather than let the queue grow. */
            double waited_ms = (srv_now() - c->queued_at) * 1e3;
            if (waited_ms > d->app->opt.queue_wait_ms) {
                srv_error err = {0};
                srv_error_set(&err, SRV_E_UNAVAILABLE, "",
                              "busy: waited %.0f ms for one of %d workers (--max-inflight); retry "
                              "shortly",
                              waited_ms, d->nworkers);
                if (c->req.route->error_writer)
                    c->req.route->error_writer(resp, &err);
                else
                    srv_response_error(resp, &err);
            } else {
                dispatch(c, resp);
            }
        }
        c->done = resp; /* NULL: out of memory, answered when resumed */
        MHD_resume_connection(c->req.conn);
    }
}

/* Hands c to a worker; the connection stays suspended until the worker resumes it. */
static bool offload(req_ctx *c)
{
    srv_daemon *d = c->d;
    pthread_mutex_lock(&d->lock);
    if (d->nworkers == 0 || d->stopping) { /* stopping: run it here, nothing may stay suspended */
        pthread_mutex_unlock(&d->lock);
        return false;
    }
    c->offloaded = true;
    MHD_suspend_connection(c->req.conn);
    c->next_job = NULL;
    c->queued_at = srv_now();
    if (d->jobs_tail)
        d->jobs_tail->next_job = c;
    else
        d->jobs_head = c;
    d->jobs_tail = c;
    pthread_cond_signal(&d->jobs);
    pthread_mutex_unlock(&d->lock);
    return true;
}

/* ---------------------------------------------------------------------------------------------- */
/* libmicrohttpd callbacks                                                                        */

static bool is_json_type(const char *ct)
{
    /* application/json, optionally with parameters (charset=utf-8), any case */
    size_t n = strlen("application/json");
    if (strncasecmp(ct, "application/json", n) != 0)
        return false;
    return ct[n] == '\0' || ct[n] == ';' || ct[n] == ' ' || ct[n] == '\t';
}

static bool is_octet_type(const char *ct)
{
    size_t n = strlen("application/octet-stream");
    return strncasecmp(ct, "application/octet-stream", n) == 0 &&
           (ct[n] == '\0' || ct[n] == ';' || ct[n] == ' ' || ct[n] == '\t');
}

/* MHD_get_connection_values callback: stops at the first query argument that is not a word of
 * the route's list (case-insensitive, as libmicrohttpd's lookups are). */
struct query_check {
    const char *known; /* "L S N" */
    const char *bad;   /* out: the first unknown argument's name */
};

static enum MHD_Result query_unknown(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value)
{
    struct query_check *q = cls;
    size_t n = strlen(key);
    if (n == 0)
        return MHD_YES; /* "?&" or "?=x": nothing named */
    for (const char *w = q->known; *w;) {
        size_t wn = strcspn(w, " ");
        if (wn == n && strncasecmp(w, key, n) == 0)
            return MHD_YES;
        w += wn;
        w += *w == ' ';
    }
    q->bad = key;
    return MHD_NO;
}

/* 400 unknown_field for a query argument the matched /v1 route does not read (srv_route.query):
 * "?need_weights=true" on a forward pass would otherwise be ignored without a word. 0 = fine. */
static int check_query(req_ctx *c, srv_error *err)
{
    const srv_route *r = c->req.route;
    if (!r->query)
        return 0;
    struct query_check q = {r->query, NULL};
    MHD_get_connection_values(c->req.conn, MHD_GET_ARGUMENT_KIND, query_unknown, &q);
    if (!q.bad)
        return 0;
    if (!*r->query)
        return srv_error_set(err, SRV_E_UNKNOWN_FIELD, q.bad,
                             "unknown query argument '%.64s': %s %s takes none%s", q.bad,
                             r->method, r->pattern,
                             r->flags & SRV_ROUTE_JSON ? " (its fields go in the JSON body)" : "");
    return srv_error_set(err, SRV_E_UNKNOWN_FIELD, q.bad,
                         "unknown query argument '%.64s'; %s %s takes: %s", q.bad, r->method,
                         r->pattern, r->query);
}

/* Whether a Transfer-Encoding value is "chunked" (any case) as libmicrohttpd reads it, which is
 * then the only coding of the body; libmicrohttpd drops leading blanks, not trailing ones. */
static bool is_chunked_only(const char *te)
{
    while (*te == ' ' || *te == '\t')
        te++;
    return strcasecmp(te, "chunked") == 0;
}

/* MHD_get_connection_values callback: counts Content-Length headers whose value differs from the
 * first one's. */
struct length_check {
    const char *first;
    int differ;
};

static enum MHD_Result length_differs(void *cls, enum MHD_ValueKind kind, const char *key,
                                      const char *value)
{
    struct length_check *l = cls;
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) != 0)
        return MHD_YES;
    if (!l->first)
        l->first = value ? value : "";
    else if (strcmp(l->first, value ? value : "") != 0)
        l->differ++;
    return MHD_YES;
}

/* OPTIONS: 204 with Allow for a known path (404 otherwise), and the CORS preflight answer when the
 * origin is allowed (add_cors adds Allow-Origin). Needs no API key: browsers send preflights
 * without credentials. */
static enum MHD_Result preflight(req_ctx *c)
{
    srv_error err = {0};
    char allow[64] = "";
    srv_request probe = c->req;
    if (strcmp(c->path, "*") == 0) /* OPTIONS *: the server as a whole */
        snprintf(allow, sizeof allow, "GET, HEAD, PUT, POST, DELETE");
    else if (!srv_route_match("OPTIONS", c->path, &probe, c->params, strlen(c->path) + 1, allow,
                              sizeof allow, &err) &&
             err.code == SRV_E_NOT_FOUND)
        return queue_error(c, &err, NULL, false);
    srv_response resp;
    response_init(&resp);
    resp.status = 204;
    srv_response_header(&resp, "Allow", "%s, OPTIONS", allow);
    const char *origin = MHD_lookup_connection_value(c->req.conn, MHD_HEADER_KIND, "Origin");
    if (srv_cors_allow_origin(c->d->app->opt.cors_origin, origin)) {
        srv_response_header(&resp, "Access-Control-Allow-Methods", "%s", SRV_CORS_ALLOW_METHODS);
        srv_response_header(&resp, "Access-Control-Allow-Headers", "%s", SRV_CORS_ALLOW_HEADERS);
        srv_response_header(&resp, "Access-Control-Max-Age", "%d", SRV_CORS_MAX_AGE);
    }
    enum MHD_Result ok = queue(c, &resp, false);
    response_free(&resp);
    return ok;
}

/* Makes c hold at least `need` bytes of the body budget (a chunked body growing; need <= c->limit).
 * Returns false when they do not fit (c->reserved unchanged). */
static bool budget_reserve(req_ctx *c, int64_t need)
{
    if (need <= c->reserved)
        return true;
    srv_body_budget *b = &c->d->app->bodies;
    int64_t step = c->reserved + BUDGET_STEP < c->limit ? c->reserved + BUDGET_STEP : c->limit;
    int64_t want = need > step ? need : step;
    if (!srv_body_budget_take(b, want - c->reserved)) {
        want = need; /* the step did not fit: the exact size might */
        if (!srv_body_budget_take(b, want - c->reserved))
            return false;
    }
    c->reserved = want;
    return true;
}

static void budget_release(req_ctx *c)
{
    if (c->reserved)
        srv_body_budget_give(&c->d->app->bodies, c->reserved);
    c->reserved = 0;
}

static int budget_error(req_ctx *c, srv_error *err, unsigned long long length)
{
    const srv_body_budget *b = &c->d->app->bodies;
    return srv_error_set(err, SRV_E_NOMEM, "",
                         "request bodies of %lld bytes are held now, and this one%s (%llu bytes%s) "
                         "would take them past --max-body-memory (%lld bytes); retry later",
                         (long long)srv_body_budget_held(b), length ? "" : " so far",
                         length ? length : (unsigned long long)c->bytes_in, length ? "" : ", chunked",
                         (long long)b->limit);
}

/* First callback of a request: route, framing and limits, before any of the body is read. */
static enum MHD_Result on_headers(req_ctx *c)
{
    srv_app *app = c->d->app;
    srv_error err = {0};
    char allow[64];

    if (__atomic_load_n(&app->draining, __ATOMIC_ACQUIRE)) {
        srv_error_set(&err, SRV_E_UNAVAILABLE, "", "the daemon is shutting down; retry elsewhere");
        return queue_error(c, &err, NULL, true);
    }
    if (c->no_host) {
        srv_error_set(&err, SRV_E_BAD_REQUEST, "Host",
                      "an HTTP/1.1 request needs a Host header (RFC 9112 3.2)");
        return queue_error(c, &err, NULL, true);
    }
    if (strcmp(c->method, "OPTIONS") == 0)
        return preflight(c);
    if (!srv_route_match(c->method, c->path, &c->req, c->params, strlen(c->path) + 1, allow,
                         sizeof allow, &err))
        return queue_error(c, &err, allow, false);
    /* the key is checked before any of the body is read */
    if (srv_auth_check(&app->auth, c->req.route->flags & SRV_ROUTE_CHANGES,
                       c->req.route->flags & SRV_ROUTE_PROBE,
                       MHD_lookup_connection_value(c->req.conn, MHD_HEADER_KIND,
                                                   MHD_HTTP_HEADER_AUTHORIZATION),
                       &err) < 0)
        return queue_error(c, &err, NULL, true);
    if (check_query(c, &err) < 0)
        return queue_error(c, &err, NULL, true);

    const char *cl = MHD_lookup_connection_value(c->req.conn, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_CONTENT_LENGTH);
    const char *te = MHD_lookup_connection_value(c->req.conn, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_TRANSFER_ENCODING);
    if (te && !is_chunked_only(te)) {
        /* libmicrohttpd reads only chunked bodies; with any other coding it would wait for the
         * connection to close, and the client for a reply, until the idle timeout */
        srv_error_set(&err, SRV_E_NOT_IMPLEMENTED, "Transfer-Encoding",
                      "Transfer-Encoding '%.32s' is not supported; send the body chunked or with a "
                      "Content-Length", te);
        return queue_error(c, &err, NULL, true);
    }
    bool chunked = te != NULL;
    struct length_check lc = {NULL, 0};
    if (cl)
        MHD_get_connection_values(c->req.conn, MHD_HEADER_KIND, length_differs, &lc);
    if (lc.differ) {
        /* which one frames the body is ambiguous (a request-smuggling vector): RFC 9112 6.3 says
         * refuse it */
        srv_error_set(&err, SRV_E_BAD_REQUEST, "Content-Length",
                      "the request has Content-Length headers with different values; send one");
        return queue_error(c, &err, NULL, true);
    }
    unsigned long long length = 0;
    if (cl) {
        char *end;
        errno = 0;
        length = strtoull(cl, &end, 10);
        if (errno || end == cl || *end) /* libmicrohttpd refuses these before we see them */
            length = 0;
    }
    if (cl && length > (unsigned long long)c->limit) {
        srv_error_set(&err, SRV_E_TOO_LARGE, "", "body of %llu bytes is over the limit of %lld (--max-body-bytes)",
                      length, (long long)c->limit);
        return queue_error(c, &err, NULL, true);
    }
    unsigned flags = c->req.route->flags;
    if ((flags & SRV_ROUTE_BODY) && !cl && !chunked) {
        srv_error_set(&err, SRV_E_LENGTH_REQUIRED, "",
                      "%s %s needs a body: send Content-Length or Transfer-Encoding: chunked",
                      c->method, c->path);
        return queue_error(c, &err, NULL, true);
    }
    const char *ct = MHD_lookup_connection_value(c->req.conn, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_CONTENT_TYPE);
    if ((flags & SRV_ROUTE_JSON) && ct && (length || chunked) && !is_json_type(ct) &&
        !((flags & SRV_ROUTE_BINARY) && is_octet_type(ct))) {
        srv_error_set(&err, SRV_E_MEDIA_TYPE, "Content-Type",
                      "Content-Type '%.100s' is not accepted here; send application/json", ct);
        return queue_error(c, &err, NULL, true);
    }
    const char *ce = MHD_lookup_connection_value(c->req.conn, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_CONTENT_ENCODING);
    if ((flags & SRV_ROUTE_BODY) && ce && (length || chunked) && strcasecmp(ce, "identity") != 0) {
        /* attnd does not decompress (Triton can take gzip/deflate): say so plainly instead of
         * failing on the compressed bytes as if they were JSON */
        srv_error_set(&err, SRV_E_MEDIA_TYPE, "Content-Encoding",
                      "Content-Encoding '%.32s' is not supported; send the body uncompressed", ce);
        return queue_error(c, &err, NULL, true);
    }
    if (length && !srv_body_budget_take(&app->bodies, (int64_t)length)) {
        budget_error(c, &err, length);
        return queue_error(c, &err, NULL, true);
    }
    c->reserved = (int64_t)length;
    if (length && srv_bigbuf_reserve(&c->body, (size_t)length) < 0) {
        srv_error_set(&err, SRV_E_NOMEM, "", "out of memory for a body of %llu bytes", length);
        return queue_error(c, &err, NULL, true);
    }
    if ((flags & SRV_ROUTE_BASE64) && length >= SRV_PREDECODE_MIN_BODY) {
        srv_predecoder_init(&c->pre, (size_t)length);
        c->req.predecoded = &c->pre;
    }
    return MHD_YES;
}

static int hex_digit(char c)
{
    return c >= '0' && c <= '9' ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                : -1;
}

/* Percent-decodes the URL path and query in place, as libmicrohttpd's default does, except "%00"
 * and "%2F". Decoded, "%00" would end the C string the handlers see, so "/v1/layers/a%00b" would
 * act on layer "a"; and "%2F" is a slash inside a segment (RFC 3986), not a separator, so
 * "/v1/layers/a%2Fforward" names the layer "a/forward" and must not be routed as
 * "/v1/layers/a/forward". Both are kept as the three characters, which no route or layer name
 * accepts. */
static size_t unescape_keep_nul(void *cls, struct MHD_Connection *conn, char *s)
{
    char *w = s;
    for (const char *r = s; *r;) {
        int hi, lo;
        if (r[0] == '%' && (hi = hex_digit(r[1])) >= 0 && (lo = hex_digit(r[2])) >= 0 && (hi | lo) &&
            (hi << 4 | lo) != '/') {
            *w++ = (char)(hi << 4 | lo);
            r += 3;
        } else {
            *w++ = *r++;
        }
    }
    *w = '\0';
    return (size_t)(w - s);
}

/* The path of a request target in absolute form ("http://host:8080/v1/layers", as proxies send
 * it; RFC 9112 3.2.2 says a server must accept it): the part from the first '/' after the
 * authority ("/" when there is none). Any other target as it is. */
static const char *origin_form(const char *url)
{
    const char *p = NULL;
    if (strncasecmp(url, "http://", 7) == 0)
        p = url + 7;
    else if (strncasecmp(url, "https://", 8) == 0)
        p = url + 8;
    if (!p)
        return url;
    p = strchr(p, '/');
    return p ? p : "/";
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size, void **con_cls)
{
    srv_daemon *d = cls;
    req_ctx *c = *con_cls;

    if (!c) {
        c = calloc(1, sizeof *c);
        if (!c)
            return MHD_NO;
        c->path = strdup(origin_form(url));
        c->params = malloc(strlen(url) + 1);
        if (!c->path || !c->params) {
            free(c->path);
            free(c->params);
            free(c);
            return MHD_NO;
        }
        c->d = d;
        snprintf(c->method, sizeof c->method, "%s", method);
        c->req.method = c->method;
        c->req.path = c->path;
        c->req.conn = conn;
        c->req.t_start = srv_now();
        c->no_host = strcmp(version, MHD_HTTP_VERSION_1_1) == 0 &&
                     !MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
        c->limit = d->app->opt.max_body_bytes;
        srv_buf_init(&c->body);
        *con_cls = c;
        __atomic_add_fetch(&d->active, 1, __ATOMIC_SEQ_CST);
        srv_metrics_request_begin(d->app->metrics);
        srv_deadlines_request_begin(conn);
        return on_headers(c);
    }

    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        c->bytes_in += n;
        srv_deadlines_body_bytes(conn, n);
        if (c->responded) /* an early error reply is queued; the rest is dropped */
            return MHD_YES;
        if (!c->too_large && !c->over_budget && (int64_t)(c->body.len + n) <= c->limit &&
            !budget_reserve(c, (int64_t)(c->body.len + n))) {
            /* a chunked body grew past --max-body-memory: dropped, and 503 at its end (as 413) */
            c->over_budget = true;
            srv_bigbuf_free(&c->body);
            budget_release(c);
        }
        if (c->over_budget) {
            c->dropped += n;
            return c->dropped > DISCARD_MAX ? MHD_NO : MHD_YES;
        }
        srv_error err = {0};
        if (c->too_large || (int64_t)(c->body.len + n) > c->limit) {
            /* A chunked body over the limit. Answering now and closing would reset the connection
             * under a client that is still sending, and it would never read the 413; so the rest
             * is read and dropped (up to another DISCARD_MAX bytes, then the connection is cut)
             * and the 413 is sent when the body ends. */
            if (!c->too_large) {
                c->too_large = true;
                srv_bigbuf_free(&c->body);
            }
            return c->bytes_in - (size_t)c->limit > DISCARD_MAX ? MHD_NO : MHD_YES;
        }
        if (srv_buf_append(&c->body, upload_data, n) < 0) {
            srv_error_set(&err, SRV_E_NOMEM, "", "out of memory reading the body");
            return queue_error(c, &err, NULL, true);
        }
        if (c->req.predecoded)
            srv_predecoder_feed(c->req.predecoded, c->body.data, c->body.len);
        return MHD_YES;
    }

    if (c->responded)
        return MHD_YES;
    srv_deadlines_busy(conn); /* the body is complete: handling it takes what it takes */
    if (c->t_body == 0)
        c->t_body = srv_now();
    if (c->too_large) {
        srv_error err = {0};
        srv_error_set(&err, SRV_E_TOO_LARGE, "",
                      "body of %zu bytes is over the limit of %lld bytes (--max-body-bytes)",
                      c->bytes_in, (long long)c->limit);
        return queue_error(c, &err, NULL, true);
    }
    if (c->over_budget) {
        srv_error err = {0};
        budget_error(c, &err, 0);
        return queue_error(c, &err, NULL, true);
    }
    if (c->offloaded) {
        if (!c->done) {
            if (c->req.route == NULL) /* cannot happen: offloaded requests have a route */
                return MHD_NO;
            srv_error err = {0};
            srv_error_set(&err, SRV_E_NOMEM, "", "out of memory; retry later");
            return queue_error(c, &err, NULL, false);
        }
        enum MHD_Result ok = queue(c, c->done, false);
        response_free(c->done);
        free(c->done);
        c->done = NULL;
        return ok;
    }
    if ((c->req.route->flags & SRV_ROUTE_HEAVY) && c->body.len >= OFFLOAD_MIN_BODY && offload(c))
        return MHD_YES;

    srv_response resp;
    response_init(&resp);
    dispatch(c, &resp);
    enum MHD_Result ok = queue(c, &resp, false);
    response_free(&resp);
    return ok;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    srv_daemon *d = cls;
    req_ctx *c = *con_cls;
    srv_deadlines_request_end(conn);
    if (!c)
        return;
    *con_cls = NULL;
    double ms = (srv_now() - c->req.t_start) * 1e3;
    /* a request that ended without a reply is logged with status 0 (client gone, idle timeout),
     * or 408 when deadline.c cut it off */
    int status = c->responded ? c->status : srv_deadlines_timed_out(conn) ? 408 : 0;
    srv_metrics_request_end(d->app->metrics, c->req.route ? (int)(c->req.route - srv_routes) : -1,
                            status, ms / 1e3, c->bytes_in, c->bytes_out);
    srv_log_request(d->app->opt.log_format, c->method, c->path, status, c->bytes_in, c->bytes_out,
                    ms);
    if (c->done) {
        response_free(c->done);
        free(c->done);
    }
    srv_bigbuf_free(&c->body);
    budget_release(c);
    srv_predecoder_free(c->req.predecoded);
    free(c->path);
    free(c->params);
    free(c);
    /* seq_cst pairs with srv_daemon_drain: it sets quiesced, then reads active; here active
     * drops, then quiesced is read, so one of the two sees the other */
    if (__atomic_sub_fetch(&d->active, 1, __ATOMIC_SEQ_CST) == 0 &&
        __atomic_load_n(&d->quiesced, __ATOMIC_SEQ_CST)) {
        pthread_mutex_lock(&d->lock);
        pthread_cond_broadcast(&d->idle);
        pthread_mutex_unlock(&d->lock);
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* Start and stop                                                                                 */

/* libmicrohttpd's connection notifications, to deadline.c's registry. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    srv_deadlines_notify(cls, conn, socket_context, (int)toe);
}

static int resolve(const char *host, int port, struct sockaddr_storage *out, socklen_t *len,
                   srv_error *err)
{
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0 || !res)
        return srv_error_set(err, SRV_E_BAD_REQUEST, "host", "cannot use host '%s': %s", host,
                             gai_strerror(rc));
    memcpy(out, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    if (out->ss_family == AF_INET)
        ((struct sockaddr_in *)out)->sin_port = htons((uint16_t)port);
    else
        ((struct sockaddr_in6 *)out)->sin6_port = htons((uint16_t)port);
    return 0;
}

static void stop_workers(srv_daemon *d)
{
    pthread_mutex_lock(&d->lock);
    d->stopping = true;
    pthread_cond_broadcast(&d->jobs);
    pthread_mutex_unlock(&d->lock);
    for (int i = 0; i < d->nworkers; i++)
        pthread_join(d->workers[i], NULL);
    free(d->workers);
    d->workers = NULL;
    d->nworkers = 0;
}

srv_daemon *srv_daemon_start(const srv_options *opt, srv_error *err)
{
    srv_daemon *d = calloc(1, sizeof *d);
    if (!d) {
        srv_error_set(err, SRV_E_NOMEM, "", "out of memory");
        return NULL;
    }
    pthread_mutex_init(&d->lock, NULL);
    pthread_cond_init(&d->idle, NULL);
    pthread_cond_init(&d->jobs, NULL);
    d->app = srv_app_create(opt, err);
    if (!d->app)
        goto fail;

    struct sockaddr_storage addr;
    socklen_t alen;
    if (resolve(opt->host, opt->port, &addr, &alen, err) < 0)
        goto fail;

    /* Workers run heavy handlers; as many as passes may be in flight. */
    d->workers = calloc((size_t)opt->max_inflight, sizeof *d->workers);
    if (!d->workers) {
        srv_error_set(err, SRV_E_NOMEM, "", "out of memory");
        goto fail;
    }
    for (; d->nworkers < opt->max_inflight; d->nworkers++) {
        if (pthread_create(&d->workers[d->nworkers], NULL, worker_main, d) != 0)
            break;
        pthread_setname_np(d->workers[d->nworkers], "attnd-worker"); /* top -H, perf */
    }
    d->deadlines = srv_deadlines_create(opt->max_connections, opt->header_timeout,
                                        opt->min_body_rate, d->app->metrics, err);
    if (!d->deadlines)
        goto fail;

    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_ITC;
    if (addr.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    struct MHD_OptionItem ops[] = {
        {MHD_OPTION_SOCK_ADDR, 0, &addr},
        {MHD_OPTION_CONNECTION_TIMEOUT, (intptr_t)opt->timeout, NULL},
        {MHD_OPTION_CONNECTION_LIMIT, (intptr_t)opt->max_connections, NULL},
        /* Per-connection buffer for headers and body reads, grown 64 KB at a time while a body
         * arrives. libmicrohttpd clears the part in use between keep-alive requests, so a larger
         * buffer costs small requests (256 KB: ~4% of an S request's CPU); a smaller one costs
         * large bodies reads (64 KB, grown 1 KB at a time: 16.8 MB in ~700 reads of ~24 KB; the
         * base64 L request took ~3 ms longer, measured in 8 interleaved pairs). Headers may take
         * about 120 KB (431 past it). */
        {MHD_OPTION_CONNECTION_MEMORY_LIMIT, (intptr_t)(128 * 1024), NULL},
        {MHD_OPTION_CONNECTION_MEMORY_INCREMENT, (intptr_t)(64 * 1024), NULL},
        {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)on_completed, d},
        {MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)on_connection, d->deadlines},
        {MHD_OPTION_LISTENING_ADDRESS_REUSE, 1, NULL},
        {MHD_OPTION_UNESCAPE_CALLBACK, (intptr_t)unescape_keep_nul, NULL},
        {opt->threads > 1 ? MHD_OPTION_THREAD_POOL_SIZE : MHD_OPTION_END,
         (intptr_t)opt->threads, NULL},
        {MHD_OPTION_END, 0, NULL},
    };
    d->mhd = MHD_start_daemon(flags, (uint16_t)opt->port, NULL, NULL, on_request, d,
                              MHD_OPTION_ARRAY, ops, MHD_OPTION_END);
    if (!d->mhd) {
        srv_error_set(err, SRV_E_UNAVAILABLE, "port",
                      "cannot listen on %s port %d (in use, or not an address of this host?)",
                      opt->host, opt->port);
        goto fail;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d->mhd, MHD_DAEMON_INFO_BIND_PORT);
    d->port = info ? info->port : opt->port;
    __atomic_store_n(&d->app->ready, true, __ATOMIC_RELEASE);
    return d;

fail:
    stop_workers(d);
    srv_deadlines_free(d->deadlines);
    srv_app_free(d->app);
    pthread_cond_destroy(&d->idle);
    pthread_cond_destroy(&d->jobs);
    pthread_mutex_destroy(&d->lock);
    free(d);
    return NULL;
}

int srv_daemon_port(const srv_daemon *d)
{
    return d->port;
}

srv_app *srv_daemon_app(srv_daemon *d)
{
    return d->app;
}

int srv_daemon_drain(srv_daemon *d, int deadline_ms)
{
    __atomic_store_n(&d->app->draining, true, __ATOMIC_RELEASE);
    pthread_mutex_lock(&d->lock);
    if (!__atomic_load_n(&d->quiesced, __ATOMIC_SEQ_CST)) {
        __atomic_store_n(&d->quiesced, true, __ATOMIC_SEQ_CST);
        MHD_socket fd = MHD_quiesce_daemon(d->mhd);
        if (fd != MHD_INVALID_SOCKET)
            close(fd);
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += deadline_ms / 1000;
    until.tv_nsec += (long)(deadline_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    while (__atomic_load_n(&d->active, __ATOMIC_SEQ_CST) > 0)
        if (pthread_cond_timedwait(&d->idle, &d->lock, &until) == ETIMEDOUT)
            break;
    int left = __atomic_load_n(&d->active, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&d->lock);
    return left;
}

void srv_daemon_stop(srv_daemon *d)
{
    if (!d)
        return;
    /* Workers finish every queued job and resume its connection before they exit, and no request
     * is offloaded once `stopping` is set, so libmicrohttpd is stopped with no connection suspended
     * (which it does not allow). */
    stop_workers(d);
    MHD_stop_daemon(d->mhd);
    srv_deadlines_free(d->deadlines); /* after libmicrohttpd: every connection is closed */
    srv_app_free(d->app);
    pthread_cond_destroy(&d->idle);
    pthread_cond_destroy(&d->jobs);
    pthread_mutex_destroy(&d->lock);
    free(d);
}
