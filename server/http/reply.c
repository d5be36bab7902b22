/*
 * reply.c - responses: what handlers fill, how one goes out on its connection (the body handed to
 * libmicrohttpd without a copy), error replies in the dialect the hooks choose, and the access log
 * line with the counters once a request has ended.
 */
#include "http_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/bigbuf.h"
#include "base/sysinfo.h"

int srv_response_reserve(srv_response *resp, size_t bytes)
{
    return resp->body.len ? srv_buf_reserve(&resp->body, bytes)
                          : srv_bigbuf_reserve(&resp->body, bytes);
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

void srv_http_response_init(srv_response *resp)
{
    memset(resp, 0, sizeof *resp);
    resp->status = 200;
    resp->content_type = "application/json";
    srv_buf_init(&resp->body);
}

void srv_http_response_free(srv_response *resp)
{
    if (resp)
        srv_bigbuf_free(&resp->body);
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

/* Every JSON reply ends its last line, so a terminal's prompt starts on a line of its own (writers
 * size their buffers with room to spare: this almost never copies; out of memory for the one byte,
 * the body goes as it is). */
static void end_json_line(srv_response *resp)
{
    const size_t len = resp->body.len;
    if (len && !resp->body.failed && strcmp(resp->content_type, "application/json") == 0 &&
        resp->body.data[len - 1] != '\n' && srv_buf_putc(&resp->body, '\n') != 0)
        resp->body.failed = false;
}

/* The headers every reply to c carries, len its content's bytes: the request id, the content's
 * type, the reply's own, the challenge of a 401, Server-Timing, and CORS. */
static void reply_headers(req_ctx *c, const srv_response *resp, size_t len, srv_header_fn add,
                          void *ctx)
{
    add(ctx, SRV_REQUEST_ID_HEADER, c->id);
    if (len || (resp->status != 204 && resp->status != 304)) /* no content, no type */
        add(ctx, MHD_HTTP_HEADER_CONTENT_TYPE, resp->content_type);
    for (int i = 0; i < resp->nheaders; i++)
        add(ctx, resp->headers[i].name, resp->headers[i].value);
    if (resp->status == 401)
        add(ctx, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"attnd\"");
    if (resp->timing[0] && c->t_body > 0) {
        char st[sizeof resp->timing + 32];
        snprintf(st, sizeof st, "body;dur=%.3f, %s", (c->t_body - c->req.t_start) * 1e3,
                 resp->timing);
        add(ctx, "Server-Timing", st);
    }
    srv_http_cors_headers(c, add, ctx);
}

static void add_to_response(void *r, const char *name, const char *value)
{
    MHD_add_response_header(r, name, value);
}

static void add_line(void *t, const char *name, const char *value)
{
    srv_buf_printf(t, "%s: %s\r\n", name, value);
}

enum MHD_Result srv_http_queue(req_ctx *c, srv_response *resp, bool close)
{
    struct MHD_Response *r;
    srv_deadlines_sending(c->req.conn); /* from here on the client must take the reply */
    if (resp->body.failed) {
        srv_error e = {0};
        srv_error_set(&e, SRV_E_NOMEM, "", "out of memory writing the response; retry later");
        srv_http_error_reply(c, resp, &e);
    }
    end_json_line(resp);
    size_t len = resp->body.len;
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
    reply_headers(c, resp, len, add_to_response, r);
    if (close)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ok = MHD_queue_response(c->req.conn, (unsigned)resp->status, r);
    MHD_destroy_response(r);
    c->responded = true;
    c->status = resp->status;
    c->bytes_out = len;
    return ok;
}

void srv_http_error_reply(req_ctx *c, srv_response *resp, const srv_error *err)
{
    c->h->hooks.error_reply(c->h->hooks.ctx, &c->req, resp, err);
}

enum MHD_Result srv_http_queue_error(req_ctx *c, const srv_error *err, const char *allow,
                                     bool close)
{
    srv_response resp;
    srv_http_response_init(&resp);
    srv_http_error_reply(c, &resp, err);
    if (allow && *allow)
        srv_response_header(&resp, "Allow", "%s", allow);
    enum MHD_Result ok = srv_http_queue(c, &resp, close);
    srv_http_response_free(&resp);
    return ok;
}

char *srv_http_error_text(req_ctx *c, const srv_error *err, const char *allow, size_t *len,
                          int *status)
{
    srv_response resp;
    srv_http_response_init(&resp);
    srv_http_error_reply(c, &resp, err);
    if (allow && *allow)
        srv_response_header(&resp, "Allow", "%s", allow);
    end_json_line(&resp);
    srv_buf t;
    srv_buf_init(&t);
    const char *phrase = MHD_get_reason_phrase_for((unsigned)resp.status);
    char date[64] = ""; /* as libmicrohttpd dates its replies (RFC 9110 6.6.1) */
    const time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm))
        strftime(date, sizeof date, "Date: %a, %d %b %Y %H:%M:%S GMT\r\n", &tm);
    srv_buf_printf(&t, "HTTP/1.1 %d %s\r\n%sConnection: close\r\nContent-Length: %zu\r\n",
                   resp.status, phrase && *phrase ? phrase : "Error", date, resp.body.len);
    reply_headers(c, &resp, resp.body.len, add_line, &t);
    srv_buf_puts(&t, "\r\n");
    if (strcmp(c->method, "HEAD") != 0) /* a HEAD reply has no content (RFC 9110 9.3.2) */
        srv_buf_append(&t, resp.body.data, resp.body.len);
    *status = resp.status;
    const bool failed = t.failed || resp.body.failed;
    srv_http_response_free(&resp);
    if (failed) {
        srv_buf_free(&t);
        return NULL;
    }
    return srv_buf_steal(&t, len);
}

void srv_http_log_request(req_ctx *c, int status)
{
    const srv_http_hooks *hk = &c->h->hooks;
    double ms = (srv_now() - c->req.t_start) * 1e3;
    if (hk->request_end)
        hk->request_end(hk->ctx, c->req.route ? (int)(c->req.route - hk->routes) : -1, status,
                        ms / 1e3, c->bytes_in, c->bytes_out);
    srv_log_request(c->h->cfg.log_format, c->method, c->path, status, c->bytes_in, c->bytes_out, ms,
                    c->id);
}
