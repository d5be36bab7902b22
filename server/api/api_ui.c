/*
 * api_ui.c - GET /ui, the viewer's page, and GET /ui/{asset}, its modules (attnd.js among them)
 * and style sheet. The page names its files relative to /ui ("ui/app.js"), so it also works under
 * a proxy's prefix (and /ui/ is not the page: a 404). Everything comes from the copies built into
 * the binary (ui_assets.c): nothing is read from disk, so a name that is not in the table - "..",
 * "%2F..", "index.html/x", anything - is a 404, and no path can reach a file.
 *
 * Caching: each file's ETag is a hash of its bytes (computed once), with Cache-Control: no-cache -
 * a browser asks again every time and gets 304 Not Modified until a new build changes the file, so
 * a page never mixes modules of two builds.
 * Safety: a Content-Security-Policy keeps the page on its own origin (scripts, styles, requests to
 * the daemon that served it, nothing else; no inline script; no framing by other sites), and
 * nosniff makes browsers trust the declared types. The files never need the API key
 * (SRV_ROUTE_PUBLIC): they hold no data, and the page asks for the key when the API wants one.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "api.h"
#include "http/conditional.h"
#include "ui_assets.h"

#define UI_CSP                                                                                     \
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "        \
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"

enum { MAX_ASSETS = 64 };
static char etags[MAX_ASSETS][24]; /* "\"<16 hex digits>\"", by index in srv_ui_assets */
static pthread_once_t etags_once = PTHREAD_ONCE_INIT;

/* FNV-1a, 64 bits: enough to tell two builds of a file apart (not a defence against anyone). */
static void compute_etags(void)
{
    int i = 0;
    for (const srv_ui_asset *a = srv_ui_assets; a->name && i < MAX_ASSETS; a++, i++) {
        uint64_t h = 0xcbf29ce484222325ull;
        for (const char *b = a->data; b < a->end; b++)
            h = (h ^ (unsigned char)*b) * 0x100000001b3ull;
        snprintf(etags[i], sizeof etags[i], "\"%016llx\"", (unsigned long long)h);
    }
}

static int serve(const srv_ui_asset *a, const srv_request *req, srv_response *resp, srv_error *err)
{
    pthread_once(&etags_once, compute_etags);
    size_t i = (size_t)(a - srv_ui_assets);
    const char *tag = i < MAX_ASSETS ? etags[i] : "\"0\"";
    srv_response_header(resp, "ETag", "%s", tag);
    srv_response_header(resp, "Cache-Control", "no-cache");
    srv_response_header(resp, "X-Content-Type-Options", "nosniff");
    srv_response_header(resp, "Content-Security-Policy", "%s", UI_CSP);
    srv_response_header(resp, "Referrer-Policy", "no-referrer");
    if (srv_none_match_hits(srv_request_header(req, "If-None-Match"), tag)) {
        resp->status = 304;
        return 0;
    }
    resp->content_type = a->content_type;
    if (srv_buf_append(&resp->body, a->data, (size_t)(a->end - a->data)) < 0)
        return srv_error_set(err, SRV_E_NOMEM, "", "out of memory");
    return 0;
}

int srv_api_ui_page(void *ctx, const srv_request *req, srv_response *resp, srv_error *err)
{
    return serve(srv_ui_asset_find("index.html"), req, resp, err);
}

int srv_api_ui_slash(void *ctx, const srv_request *req, srv_response *resp, srv_error *err)
{
    (void)ctx;
    (void)err;
    /* /ui/ is the page's address typed with a slash: the page lives at /ui (its links are
     * relative to that), so the browser is sent there, with the same query (?layer=...) */
    char query[2048];
    srv_request_query_text(req, query, sizeof query);
    resp->status = 308;
    resp->content_type = "text/plain; charset=utf-8";
    srv_response_header(resp, "Location", "/ui%s", query);
    srv_buf_puts(&resp->body, "the viewer is at /ui\n");
    return 0;
}

int srv_api_ui_asset(void *ctx, const srv_request *req, srv_response *resp, srv_error *err)
{
    const char *name = srv_request_param(req, "asset");
    const srv_ui_asset *a = name ? srv_ui_asset_find(name) : NULL;
    if (!a)
        return srv_error_set(err, SRV_E_NOT_FOUND, "", "no such file of the viewer: /ui/%.64s",
                             name ? name : "");
    return serve(a, req, resp, err);
}
