/*
 * request.c - the life of a request, from its headers to its completion (see http.h).
 *
 * One req_ctx per request, created when its request line arrives (libmicrohttpd's URI log
 * callback, which also lets strict.c see the target as sent), freed in on_completed:
 *   1. headers in: hold the request line and headers to the RFCs' MUSTs (strict.c: 400, 414),
 *      check Host (400), match the route (404 / 405 + Allow), let the admit hook decide
 *      (401 / 403: the API key), check its query arguments (400), the body's framing and size
 *      against the limits (501 for a transfer coding other than chunked, 400 for Content-Lengths
 *      that disagree, 411, 413 from Content-Length, 415 for the type or a Content-Encoding),
 *      reserve the body's first step from the body budget (503 when even that does not fit, or
 *      when the client's address would pass its share: body_budget.h). When one fails the answer
 *      goes before any of the body is kept: at once to a client that asked "Expect: 100-continue"
 *      (libmicrohttpd then sends no "100 Continue") or sends no body; a client already sending one
 *      gets it at the body's end, the body read and dropped (up to DISCARD_MAX), since closing
 *      with its bytes unread would reset the connection before it read the answer (refuse()); one
 *      that sends nothing after its headers gets it from deadline.c a second later;
 *   2. body chunks in: appended to one buffer (its address space reserved from Content-Length up
 *      front; pages are touched only as bytes arrive), counted against --max-body-bytes (chunked
 *      bodies: 413 at the body's end) and against the body budget a step ahead of the bytes
 *      received, Content-Length or chunked alike (503 at the body's end when a step does not fit),
 *      so a slow sender holds what it sent, not what it declared; and shown to the route's stream
 *      observer (the hooks') as they come;
 *   3. body complete: srv_http_dispatch runs the handler, on this thread or, for heavy routes with
 *      big bodies and worker routes, on a worker while the connection is suspended (worker.c); the
 *      response body
 *      buffer is handed to libmicrohttpd without a copy (reply.c); once the handler has run, the
 *      body and its share of the budget are given back. A client that hangs up meanwhile is seen
 *      by deadline.c (srv_request.gone): a handler that stops for it (SRV_E_CANCELLED), or a job
 *      dropped from the worker queue, gets no reply and its connection is closed;
 *   4. on_completed: the access log line and the counters (reply.c), the context is freed.
 * Each step also tells deadline.c the request's phase (headers in, body bytes, handled, done), so a
 * client too slow with its headers or body is cut off (--header-timeout, --min-body-rate).
 */
#include "http_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/bigbuf.h"
#include "base/sysinfo.h"

/* Bodies at least this large on a SRV_ROUTE_HEAVY route run on a worker thread. Below it the
 * handler's work is short (an S request, 19 KB in and 60 KB out, takes a few hundred microseconds
 * in all) and the hop to a worker (suspend, wake, resume) would cost more than it saves. (The fuzz
 * build lowers it, so that fuzz_http reaches the workers with small inputs.) */
#ifndef SRV_OFFLOAD_MIN_BODY
#define SRV_OFFLOAD_MIN_BODY 65536
#endif

/* How much of a body refused before its end (past --max-body-bytes or --max-body-memory, or at its
 * headers) is read and dropped so that the client gets the answer; past this the connection is
 * closed instead. */
#define DISCARD_MAX ((size_t)64 << 20)

/* A body reserves its part of --max-body-memory this far ahead of the bytes it has received, not
 * per read: a slow sender holds at most this much more than it sent. */
#define BUDGET_STEP ((int64_t)256 << 10)

/* ---------------------------------------------------------------------------------------------- */
/* What handlers read of a request                                                                */

const char *srv_request_header(const srv_request *req, const char *name)
{
    return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

bool srv_request_gone(const srv_request *req)
{
    return req->gone && __atomic_load_n(req->gone, __ATOMIC_RELAXED);
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

/* MHD_get_connection_values callback: appends "&name=value", percent-encoded, to a query_text. */
struct query_text {
    char *out;
    size_t n, at;
    bool over;
};

static void query_put(struct query_text *q, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    for (; *s; s++) {
        const unsigned char ch = (unsigned char)*s;
        const bool plain = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                           (ch >= '0' && ch <= '9') || (ch && strchr("-._~", ch));
        if (q->at + 4 > q->n) {
            q->over = true;
            return;
        }
        if (plain) {
            q->out[q->at++] = (char)ch;
        } else {
            q->out[q->at++] = '%';
            q->out[q->at++] = hex[ch >> 4];
            q->out[q->at++] = hex[ch & 15];
        }
    }
}

static enum MHD_Result query_append(void *cls, enum MHD_ValueKind kind, const char *key,
                                    const char *value)
{
    (void)kind;
    struct query_text *q = cls;
    if (q->at + 2 > q->n) {
        q->over = true;
        return MHD_NO;
    }
    const char sep = q->at ? '&' : '?';
    q->out[q->at++] = sep;
    query_put(q, key);
    if (value) {
        if (q->at + 2 > q->n) {
            q->over = true;
            return MHD_NO;
        }
        q->out[q->at++] = '=';
        query_put(q, value);
    }
    return q->over ? MHD_NO : MHD_YES;
}

bool srv_request_query_text(const srv_request *req, char *out, size_t n)
{
    struct query_text q = {out, n, 0, n == 0};
    if (n)
        MHD_get_connection_values(req->conn, MHD_GET_ARGUMENT_KIND, query_append, &q);
    if (q.over || q.at >= n) {
        if (n)
            out[0] = '\0';
        return false;
    }
    out[q.at] = '\0';
    return true;
}

/* ---------------------------------------------------------------------------------------------- */
/* Headers: route, admission, framing and limits                                                  */

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
 * the route's list (case-insensitive, as libmicrohttpd's lookups are), or that is one given a
 * second time (libmicrohttpd's lookup reads the first: "?L=8&L=16096" would be L = 8 without a
 * word, and a client or proxy that meant the last would get another reply than it asked for). */
struct query_check {
    const char *known; /* "L S N" */
    const char *bad;   /* out: the first unknown argument's name */
    const char *twice; /* out: the first argument given again */
    uint64_t seen;     /* bit i: the list's word i was given */
};

static enum MHD_Result query_unknown(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value)
{
    struct query_check *q = cls;
    size_t n = strlen(key);
    if (n == 0)
        return MHD_YES; /* "?&" or "?=x": nothing named */
    unsigned i = 0;
    for (const char *w = q->known; *w; i++) {
        size_t wn = strcspn(w, " ");
        if (wn == n && strncasecmp(w, key, n) == 0) {
            const uint64_t bit = i < 64 ? (uint64_t)1 << i : 0;
            if (q->seen & bit) {
                q->twice = key;
                return MHD_NO;
            }
            q->seen |= bit;
            return MHD_YES;
        }
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
    struct query_check q = {r->query, NULL, NULL, 0};
    MHD_get_connection_values(c->req.conn, MHD_GET_ARGUMENT_KIND, query_unknown, &q);
    if (q.twice)
        return srv_error_set(err, SRV_E_BAD_REQUEST, q.twice,
                             "query argument '%.64s' is given more than once; %s %s reads one",
                             q.twice, r->method, r->pattern);
    if (!q.bad)
        return 0;
    if (!*r->query)
        return srv_error_set(err, SRV_E_UNKNOWN_FIELD, q.bad,
                             "unknown query argument '%.64s': %s %s takes none%s", q.bad, r->method,
                             r->pattern,
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

/* Makes c hold at least `need` bytes of the body budget (a body growing; need <= its size limit):
 * a step more when that fits, else exactly need. Returns SRV_BODY_TAKEN, or why not (c->reserved
 * unchanged). */
static srv_body_take_result budget_reserve(req_ctx *c, int64_t need)
{
    if (need <= c->reserved)
        return SRV_BODY_TAKEN;
    srv_http *h = c->h;
    int64_t cap = c->length ? c->length : c->limit; /* never more than the body can be */
    int64_t step = c->reserved + BUDGET_STEP < cap ? c->reserved + BUDGET_STEP : cap;
    int64_t want = need > step ? need : step;
    srv_body_take_result r =
        srv_body_take(h->cfg.bodies, h->clients, &c->client, want - c->reserved);
    if (r != SRV_BODY_TAKEN && want > need) {
        want = need; /* the step did not fit: the exact size might */
        r = srv_body_take(h->cfg.bodies, h->clients, &c->client, want - c->reserved);
    }
    if (r == SRV_BODY_TAKEN)
        c->reserved = want;
    return r;
}

static void budget_release(req_ctx *c)
{
    if (c->reserved)
        srv_body_give(c->h->cfg.bodies, c->h->clients, &c->client, c->reserved);
    c->reserved = 0;
}

/* The 503 for a body that does not fit (why: FULL or OVER_SHARE). */
static int budget_error(req_ctx *c, srv_error *err, srv_body_take_result why)
{
    const srv_body_budget *b = c->h->cfg.bodies;
    unsigned long long length = (unsigned long long)c->length;
    if (why == SRV_BODY_OVER_SHARE)
        return srv_error_set(err, SRV_E_NOMEM, "",
                             "request bodies from this client's address hold %lld bytes; while "
                             "other clients' bodies are held too, one address may hold at most "
                             "1/%d of --max-body-memory (%lld bytes); retry later",
                             (long long)srv_body_client_held(c->h->clients, &c->client),
                             SRV_BODY_CLIENT_SHARE, (long long)(b->limit / SRV_BODY_CLIENT_SHARE));
    return srv_error_set(err, SRV_E_NOMEM, "",
                         "request bodies of %lld bytes are held now, and this one (%llu bytes%s%s) "
                         "would take them past --max-body-memory (%lld bytes); retry later",
                         (long long)srv_body_budget_held(b),
                         length ? length : (unsigned long long)c->bytes_in,
                         length ? "" : " so far, chunked",
                         length && c->bytes_in ? ", being sent" : "", (long long)b->limit);
}

void srv_http_dispatch(req_ctx *c, srv_response *resp)
{
    srv_error err = {0};
    c->req.body = c->body.data ? c->body.data : "";
    c->req.body_len = c->body.len;
    if (c->req.route->handler(c->h->hooks.ctx, &c->req, resp, &err) < 0) {
        if (err.code == SRV_E_CANCELLED) /* the client hung up and the handler stopped for it */
            c->cancelled = true;
        srv_http_error_reply(c, resp, &err);
    }
    /* the reply is built and holds no pointer into the body: its memory and its share of
     * --max-body-memory go back now, not when the client has read the reply (a client's next
     * request must not find its last body still counted) */
    c->req.body = "";
    c->req.body_len = 0;
    srv_bigbuf_free(&c->body);
    budget_release(c);
}

/* How a request's body is framed: its Content-Length and Transfer-Encoding headers (NULL when
 * absent), whether Content-Length headers disagree, and the length (0 without one, or when it is
 * not a number: libmicrohttpd refuses those before we see them). */
typedef struct framing {
    const char *cl, *te;
    bool differ;
    unsigned long long length;
} framing;

static framing framing_of(req_ctx *c)
{
    framing f = {
        MHD_lookup_connection_value(c->req.conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH),
        MHD_lookup_connection_value(c->req.conn, MHD_HEADER_KIND,
                                    MHD_HTTP_HEADER_TRANSFER_ENCODING),
        false, 0};
    if (!f.cl)
        return f;
    struct length_check lc = {NULL, 0};
    MHD_get_connection_values(c->req.conn, MHD_HEADER_KIND, length_differs, &lc);
    f.differ = lc.differ > 0;
    char *end;
    errno = 0;
    f.length = strtoull(f.cl, &end, 10);
    if (errno || end == f.cl || *end)
        f.length = 0;
    return f;
}

/* Whether a client sends the body of a request refused at its headers anyway, and it can be read to
 * its end: framed by one Content-Length of at most DISCARD_MAX bytes, or chunked; and the client
 * did not ask "Expect: 100-continue" (it then waits for this answer before it sends the body). */
static bool body_follows(req_ctx *c)
{
    const char *ex =
        MHD_lookup_connection_value(c->req.conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);
    if (ex && strcasecmp(ex, "100-continue") == 0)
        return false;
    const framing f = framing_of(c);
    if (f.te)
        return is_chunked_only(f.te) && !f.cl; /* both together: refused first, unread */
    return f.cl && !f.differ && f.length > 0 && f.length <= DISCARD_MAX;
}

/* Refuses a request at its headers. A client already sending a body would meet a connection reset
 * if the answer went now and the connection closed with its bytes unread, and would never read the
 * answer (RFC 9112 9.6); so when the body can be read to its end (body_follows), it is read and
 * dropped, and the answer goes when it ends. Otherwise the answer goes now. */
static enum MHD_Result refuse(req_ctx *c, const srv_error *err, const char *allow, bool close)
{
    if (!body_follows(c) || !(c->refusal = malloc(sizeof *c->refusal)))
        return srv_http_queue_error(c, err, allow, close);
    c->refusal->err = *err;
    snprintf(c->refusal->allow, sizeof c->refusal->allow, "%s", allow ? allow : "");
    c->refusal->close = close;
    /* a client that sends nothing yet may be waiting for this answer: deadline.c sends it then */
    size_t len;
    int status;
    char *text = srv_http_error_text(c, err, allow, &len, &status);
    if (text)
        srv_deadlines_refused(c->req.conn, text, len, status);
    return MHD_YES;
}

/* First callback of a request: route, framing and limits, before any of the body is read. */
static enum MHD_Result on_headers(req_ctx *c)
{
    srv_http *h = c->h;
    srv_error err = {0};
    char allow[64];

    if (__atomic_load_n(&h->quiesced, __ATOMIC_ACQUIRE)) {
        srv_error_set(&err, SRV_E_UNAVAILABLE, "", "the daemon is shutting down; retry elsewhere");
        return srv_http_queue_error(c, &err, NULL, true);
    }
    if (c->no_host) {
        srv_error_set(&err, SRV_E_BAD_REQUEST, "Host",
                      "an HTTP/1.1 request needs a Host header (RFC 9112 3.2)");
        return srv_http_queue_error(c, &err, NULL, true);
    }
    const framing fr = framing_of(c);
    if (fr.cl && fr.te && is_chunked_only(fr.te)) { /* another coding: its 501 below, closed too */
        /* which one frames the body is ambiguous, and a proxy in front that reads the other
         * would take the rest of it for a request of its own (smuggling): RFC 9112 6.1 lets a
         * server refuse such a request, and says the connection MUST close after it */
        srv_error_set(&err, SRV_E_BAD_REQUEST, "Transfer-Encoding",
                      "the request has both Content-Length and Transfer-Encoding; send one");
        return srv_http_queue_error(c, &err, NULL, true);
    }
    if (strcmp(c->method, "OPTIONS") == 0)
        return srv_http_preflight(c);
    if (!srv_route_match(h->hooks.routes, c->method, c->path, &c->req, c->params,
                         strlen(c->path) + 1, allow, sizeof allow, &err))
        return refuse(c, &err, allow, false);
    /* the key is checked before any of the body is read */
    if (h->hooks.admit && h->hooks.admit(h->hooks.ctx, &c->req,
                                         MHD_lookup_connection_value(c->req.conn, MHD_HEADER_KIND,
                                                                     MHD_HTTP_HEADER_AUTHORIZATION),
                                         &err) < 0)
        return refuse(c, &err, NULL, true);
    if (check_query(c, &err) < 0)
        return refuse(c, &err, NULL, true);

    const char *cl = fr.cl, *te = fr.te;
    if (te && !is_chunked_only(te)) {
        /* libmicrohttpd reads only chunked bodies; with any other coding it would wait for the
         * connection to close, and the client for a reply, until the idle timeout */
        srv_error_set(&err, SRV_E_NOT_IMPLEMENTED, "Transfer-Encoding",
                      "Transfer-Encoding '%.32s' is not supported; send the body chunked or with a "
                      "Content-Length",
                      te);
        return refuse(c, &err, NULL, true);
    }
    bool chunked = te != NULL;
    if (fr.differ) {
        /* which one frames the body is ambiguous (a request-smuggling vector): RFC 9112 6.3 says
         * refuse it */
        srv_error_set(&err, SRV_E_BAD_REQUEST, "Content-Length",
                      "the request has Content-Length headers with different values; send one");
        return refuse(c, &err, NULL, true);
    }
    const unsigned long long length = fr.length;
    if (cl && length > (unsigned long long)c->limit) {
        srv_error_set(&err, SRV_E_TOO_LARGE, "",
                      "body of %llu bytes is over the limit of %lld (--max-body-bytes)", length,
                      (long long)c->limit);
        return refuse(c, &err, NULL, true);
    }
    unsigned flags = c->req.route->flags;
    if ((flags & SRV_ROUTE_BODY) && !cl && !chunked) {
        srv_error_set(&err, SRV_E_LENGTH_REQUIRED, "",
                      "%s %s needs a body: send Content-Length or Transfer-Encoding: chunked",
                      c->method, c->path);
        return refuse(c, &err, NULL, true);
    }
    const char *ct =
        MHD_lookup_connection_value(c->req.conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    if ((flags & SRV_ROUTE_JSON) && ct && (length || chunked) && !is_json_type(ct) &&
        !((flags & SRV_ROUTE_BINARY) && is_octet_type(ct))) {
        srv_error_set(&err, SRV_E_MEDIA_TYPE, "Content-Type",
                      "Content-Type '%.100s' is not accepted here; send application/json%s", ct,
                      (flags & SRV_ROUTE_BINARY)
                          ? ", or application/octet-stream for a safetensors file"
                          : "");
        return refuse(c, &err, NULL, true);
    }
    const char *ce =
        MHD_lookup_connection_value(c->req.conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_ENCODING);
    if ((flags & SRV_ROUTE_BODY) && ce && (length || chunked) && strcasecmp(ce, "identity") != 0) {
        /* attnd does not decompress (Triton can take gzip/deflate): say so plainly instead of
         * failing on the compressed bytes as if they were JSON */
        srv_error_set(&err, SRV_E_MEDIA_TYPE, "Content-Encoding",
                      "Content-Encoding '%.32s' is not supported; send the body uncompressed", ce);
        return refuse(c, &err, NULL, true);
    }
    c->length = (int64_t)length;
    if (length || chunked) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c->req.conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        srv_body_client_of(&c->client, ci ? ci->client_addr : NULL);
        srv_deadlines_body_client(c->req.conn, &c->client); /* for the shares' check */
    }
    /* the first step now, so a budget that is really full answers before the body is read */
    int64_t first = (int64_t)length < BUDGET_STEP ? (int64_t)length : BUDGET_STEP;
    srv_body_take_result taken = first ? budget_reserve(c, first) : SRV_BODY_TAKEN;
    if (taken != SRV_BODY_TAKEN) {
        budget_error(c, &err, taken);
        return refuse(c, &err, NULL, true);
    }
    if (length && srv_bigbuf_reserve(&c->body, (size_t)length) < 0) {
        srv_error_set(&err, SRV_E_NOMEM, "", "out of memory for a body of %llu bytes", length);
        return refuse(c, &err, NULL, true);
    }
    if ((flags & SRV_ROUTE_STREAM) && h->hooks.stream_open && length &&
        length >= h->hooks.stream_min_body)
        c->req.stream = h->hooks.stream_open(h->hooks.ctx, (size_t)length);
    return MHD_YES;
}

static int hex_digit(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
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
size_t srv_http_unescape(void *cls, struct MHD_Connection *conn, char *s)
{
    char *w = s;
    for (const char *r = s; *r;) {
        int hi, lo;
        if (r[0] == '%' && (hi = hex_digit(r[1])) >= 0 && (lo = hex_digit(r[2])) >= 0 &&
            (hi | lo) && (hi << 4 | lo) != '/') {
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

void *srv_http_on_target(void *cls, const char *uri, struct MHD_Connection *conn)
{
    req_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return NULL; /* the access callback tries again, without strict.c's view of the target */
    c->h = cls;
    srv_http_target_seen(c, uri);
    return c;
}

enum MHD_Result srv_http_on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                    const char *method, const char *version,
                                    const char *upload_data, size_t *upload_data_size,
                                    void **con_cls)
{
    srv_http *h = cls;
    req_ctx *c = *con_cls;

    if (!c || !c->started) {
        if (!c && !(c = calloc(1, sizeof *c)))
            return MHD_NO;
        *con_cls = c;
        c->h = h;
        c->path = strdup(origin_form(url));
        c->params = malloc(strlen(url) + 1);
        if (!c->path || !c->params)
            return MHD_NO; /* on_completed frees what was made */
        c->started = true;
        snprintf(c->method, sizeof c->method, "%s", method);
        c->req.method = c->method;
        c->req.path = c->path;
        c->req.conn = conn;
        c->req.t_start = srv_now();
        srv_request_id_take(
            MHD_lookup_connection_value(conn, MHD_HEADER_KIND, SRV_REQUEST_ID_HEADER), c->id);
        c->req.id = c->id;
        c->no_host = strcmp(version, MHD_HTTP_VERSION_1_1) == 0 &&
                     !MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
        c->limit = h->cfg.max_body_bytes;
        srv_buf_init(&c->body);
        __atomic_add_fetch(&h->active, 1, __ATOMIC_SEQ_CST);
        if (h->hooks.request_begin)
            h->hooks.request_begin(h->hooks.ctx);
        c->req.gone =
            srv_deadlines_request_begin(conn, strcmp(version, MHD_HTTP_VERSION_1_1) == 0, c->id);
        srv_error err = {0};
        if (srv_http_check_syntax(c, method, url, version, &err) < 0)
            return srv_http_queue_error(c, &err, NULL, true);
        return on_headers(c);
    }

    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        c->bytes_in += n;
        srv_deadlines_body_bytes(conn, n);
        if (c->responded) /* an early error reply is queued; the rest is dropped */
            return MHD_YES;
        if (c->refusal) { /* refused at its headers: read to its end and dropped */
            c->dropped += n;
            return c->dropped > DISCARD_MAX ? MHD_NO : MHD_YES;
        }
        srv_body_take_result taken = SRV_BODY_TAKEN;
        if (!c->too_large && !c->over_budget && (int64_t)(c->body.len + n) <= c->limit &&
            (taken = budget_reserve(c, (int64_t)(c->body.len + n))) != SRV_BODY_TAKEN) {
            /* the body grew past what --max-body-memory (or its address's share) has room for:
             * dropped, and 503 at its end (as 413) */
            c->over_budget = taken;
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
            return srv_http_queue_error(c, &err, NULL, true);
        }
        if (c->req.stream)
            h->hooks.stream_feed(c->req.stream, c->body.data, c->body.len);
        return MHD_YES;
    }

    if (c->responded)
        return MHD_YES;
    srv_deadlines_busy(conn); /* the body is complete: handling it takes what it takes */
    if (c->t_body == 0)
        c->t_body = srv_now();
    if (c->refusal)
        return srv_http_queue_error(c, &c->refusal->err, c->refusal->allow, c->refusal->close);
    if (c->too_large) {
        srv_error err = {0};
        srv_error_set(&err, SRV_E_TOO_LARGE, "",
                      "body of %zu bytes is over the limit of %lld bytes (--max-body-bytes)",
                      c->bytes_in, (long long)c->limit);
        return srv_http_queue_error(c, &err, NULL, true);
    }
    if (c->over_budget) {
        srv_error err = {0};
        budget_error(c, &err, (srv_body_take_result)c->over_budget);
        return srv_http_queue_error(c, &err, NULL, true);
    }
    if (c->offloaded) {
        if (c->cancelled) /* its client hung up: nothing to send, the connection closes */
            return MHD_NO;
        if (!c->done) {
            if (c->req.route == NULL) /* cannot happen: offloaded requests have a route */
                return MHD_NO;
            srv_error err = {0};
            srv_error_set(&err, SRV_E_NOMEM, "", "out of memory; retry later");
            return srv_http_queue_error(c, &err, NULL, false);
        }
        enum MHD_Result ok = srv_http_queue(c, c->done, false);
        srv_http_response_free(c->done);
        free(c->done);
        c->done = NULL;
        return ok;
    }
    unsigned flags = c->req.route->flags;
    if (((flags & SRV_ROUTE_WORKER) ||
         ((flags & SRV_ROUTE_HEAVY) && c->body.len >= SRV_OFFLOAD_MIN_BODY)) &&
        srv_http_offload(c))
        return MHD_YES;
    /* a small pass runs here only with a slot of its own, taken now: waiting for one would stall
     * every other connection of this thread (probes included) for up to --queue-wait-ms, so with
     * none free it waits on a worker instead */
    bool slot = false;
    if ((flags & SRV_ROUTE_HEAVY) && c->h->hooks.slot_try) {
        slot = c->h->hooks.slot_try(c->h->hooks.ctx);
        if (!slot && srv_http_offload(c))
            return MHD_YES;
    }

    srv_response resp;
    srv_http_response_init(&resp);
    srv_http_dispatch(c, &resp);
    if (slot)
        c->h->hooks.slot_drop(c->h->hooks.ctx);
    enum MHD_Result ok = c->cancelled ? MHD_NO : srv_http_queue(c, &resp, false);
    srv_http_response_free(&resp);
    return ok;
}

void srv_http_on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                           enum MHD_RequestTerminationCode toe)
{
    srv_http *h = cls;
    req_ctx *c = *con_cls;
    srv_deadlines_request_end(conn);
    if (!c)
        return;
    *con_cls = NULL;
    if (!c->started) {
        /* libmicrohttpd refused the request before its access callback (431, 505, ...), or
         * could not begin it: nothing was counted, logged or held for it */
        free(c->path);
        free(c->params);
        free(c);
        return;
    }
    /* a request that ended without a reply is logged with status 0 (client gone, idle timeout),
     * the status deadline.c answered when it cut it off (408; a refusal's own), or 499 (nginx's
     * "client closed request") when its client hung up while it was handled and the work for it
     * stopped */
    int status = c->responded ? c->status : c->cancelled ? 499 : srv_deadlines_cut_status(conn);
    srv_http_log_request(c, status);
    if (c->done) {
        srv_http_response_free(c->done);
        free(c->done);
    }
    free(c->refusal);
    srv_bigbuf_free(&c->body);
    budget_release(c);
    if (c->req.stream)
        h->hooks.stream_close(c->req.stream);
    free(c->path);
    free(c->params);
    free(c);
    /* seq_cst pairs with srv_http_drain: it sets quiesced, then reads active; here active
     * drops, then quiesced is read, so one of the two sees the other */
    if (__atomic_sub_fetch(&h->active, 1, __ATOMIC_SEQ_CST) == 0 &&
        __atomic_load_n(&h->quiesced, __ATOMIC_SEQ_CST)) {
        pthread_mutex_lock(&h->lock);
        pthread_cond_broadcast(&h->idle);
        pthread_mutex_unlock(&h->lock);
    }
}
