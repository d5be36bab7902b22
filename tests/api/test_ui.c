/*
 * test_ui.c - GET /ui and /ui/{asset}: the viewer's files served from the binary.
 *
 *  - every .html, .js and .css of web/ is built in (server/api/ui_assets.c) and served byte for
 *    byte, with its content type, and nothing else is;
 *  - names outside the table (unknown files, dots, encoded slashes, deeper paths) are 404 JSON
 *    errors, never a file: the handler reads no disk;
 *  - ETag + Cache-Control: no-cache, 304 for If-None-Match (one tag, a list, weak, *), a new
 *    answer for another tag; the Content-Security-Policy and nosniff;
 *  - HEAD answers the headers; only GET is allowed; /ui/ is not the page;
 *  - the files never need the API key, even with --auth-reads, while the API still does.
 */
#include "api/api.h"
#include "api/ui_assets.h"
#include "check.h"
#include "http_client.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *type_of(const char *name)
{
    const char *dot = strrchr(name, '.');
    if (!dot)
        return NULL;
    if (!strcmp(dot, ".html"))
        return "text/html; charset=utf-8";
    if (!strcmp(dot, ".js"))
        return "text/javascript; charset=utf-8";
    if (!strcmp(dot, ".css"))
        return "text/css; charset=utf-8";
    return NULL;
}

/* Every viewer file of web/ is in the table and served as it is in the repository. */
static void test_every_file(srv_daemon *d)
{
    DIR *dir = opendir("web");
    CHECK(dir != NULL, "web/ is readable from the repository root");
    if (!dir)
        return;
    int files = 0;
    for (struct dirent *e; (e = readdir(dir)) != NULL;) {
        const char *want_type = type_of(e->d_name);
        if (!want_type || e->d_name[0] == '.')
            continue;
        files++;
        char path[512];
        snprintf(path, sizeof path, "web/%s", e->d_name);
        size_t len = 0;
        char *src = check_read_file(path, &len);
        const srv_ui_asset *a = srv_ui_asset_find(e->d_name);
        CHECK(a != NULL, "%s is built in (add it to server/api/ui_assets.c)", path);
        CHECK(a && (size_t)(a->end - a->data) == len && src && memcmp(a->data, src, len) == 0,
              "the built-in %s is the repository's file (rebuild after editing it)", path);
        char url[512];
        snprintf(url, sizeof url, strcmp(e->d_name, "index.html") ? "/ui/%s" : "/ui", e->d_name);
        hc_response r;
        hc_request(d, "GET", url, NULL, NULL, -1, NULL, &r);
        char ctype[128] = "";
        hc_header(&r, "Content-Type", ctype, sizeof ctype);
        CHECK(r.status == 200 && r.len == len && src && memcmp(r.body, src, len) == 0,
              "GET %s serves %s byte for byte (status %ld, %zu bytes of %zu)", url, path, r.status,
              r.len, len);
        CHECK(strcmp(ctype, want_type) == 0, "GET %s: Content-Type %s (got '%s')", url, want_type,
              ctype);
        hc_response_free(&r);
        free(src);
    }
    closedir(dir);
    int table = 0;
    for (const srv_ui_asset *a = srv_ui_assets; a->name; a++)
        table++;
    CHECK(files > 10 && table == files, "the table holds web/'s %d files (it has %d)", files,
          table);
    CHECK(srv_ui_asset_find("index.html") && srv_ui_asset_find("attnd.js"),
          "index.html and attnd.js are among them");
}

/* Names that are not files of the viewer: 404 with a JSON error, never some file's bytes. */
static void test_not_found(srv_daemon *d)
{
    static const char *const paths[] = {
        "/ui/nope.js",      "/ui/INDEX.HTML",
        "/ui/index.htm",    "/ui/..",
        "/ui/%2e%2e",       "/ui/..%2Fopenapi.yaml",
        "/ui/%2F",          "/ui/index.html/x",
        "/ui/.%2Fapp.js",   "/ui/app.js%00",
        "/ui/app.js%20",    "/ui/../openapi.yaml",
        "/ui/style.css/..", "/uix",
        "/ui/a/b/c",        "/ui/%252e%252e",
    };
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) {
        hc_response r;
        hc_request(d, "GET", paths[i], NULL, NULL, -1, NULL, &r);
        CHECK(r.status == 404, "GET %s: 404 (got %ld)", paths[i], r.status);
        char code[64];
        CHECK(strcmp(hc_error_code(&r, code, sizeof code), "not_found") == 0,
              "GET %s: a JSON not_found error (got '%s': %.100s)", paths[i], code,
              r.body ? r.body : "");
        CHECK(!r.body || !strstr(r.body, "openapi:"), "GET %s shows no file", paths[i]);
        hc_response_free(&r);
    }
}

static void etag_of(srv_daemon *d, const char *path, char *out, size_t size)
{
    hc_response r;
    hc_request(d, "GET", path, NULL, NULL, -1, NULL, &r);
    out[0] = '\0';
    hc_header(&r, "ETag", out, size);
    hc_response_free(&r);
}

static long get_with(srv_daemon *d, const char *path, const char *header, hc_response *r)
{
    const char *headers[] = {header, NULL};
    hc_opts o = {.headers = headers};
    hc_request(d, "GET", path, NULL, NULL, -1, &o, r);
    return r->status;
}

static void test_caching(srv_daemon *d)
{
    char tag[64], tag_js[64], line[160];
    etag_of(d, "/ui", tag, sizeof tag);
    etag_of(d, "/ui/attnd.js", tag_js, sizeof tag_js);
    CHECK(tag[0] == '"' && strlen(tag) > 4 && tag[strlen(tag) - 1] == '"',
          "/ui has a quoted ETag (%s)", tag);
    CHECK(strcmp(tag, tag_js) != 0, "each file has its own ETag (%s, %s)", tag, tag_js);
    char again[64];
    etag_of(d, "/ui", again, sizeof again);
    CHECK(strcmp(tag, again) == 0, "the ETag is stable (%s, %s)", tag, again);

    hc_response r;
    hc_request(d, "GET", "/ui/app.js", NULL, NULL, -1, NULL, &r);
    char cc[64] = "", nosniff[32] = "", csp[512] = "";
    hc_header(&r, "Cache-Control", cc, sizeof cc);
    hc_header(&r, "X-Content-Type-Options", nosniff, sizeof nosniff);
    hc_response_free(&r);
    CHECK(strcmp(cc, "no-cache") == 0, "Cache-Control: no-cache (got '%s')", cc);
    CHECK(strcmp(nosniff, "nosniff") == 0, "X-Content-Type-Options: nosniff (got '%s')", nosniff);
    hc_request(d, "GET", "/ui", NULL, NULL, -1, NULL, &r);
    hc_header(&r, "Content-Security-Policy", csp, sizeof csp);
    hc_response_free(&r);
    CHECK(strstr(csp, "default-src 'self'") && strstr(csp, "connect-src 'self'") &&
              strstr(csp, "frame-ancestors 'none'") && !strstr(csp, "unsafe"),
          "the page's Content-Security-Policy keeps it on its origin (got '%s')", csp);

    snprintf(line, sizeof line, "If-None-Match: %s", tag);
    CHECK(get_with(d, "/ui", line, &r) == 304 && r.len == 0,
          "If-None-Match with the tag: 304, no body (%ld, %zu bytes)", r.status, r.len);
    char t304[64] = "";
    hc_header(&r, "ETag", t304, sizeof t304);
    CHECK(strcmp(t304, tag) == 0, "a 304 carries the ETag (%s)", t304);
    hc_response_free(&r);
    snprintf(line, sizeof line, "If-None-Match: \"0000\", W/%s", tag);
    CHECK(get_with(d, "/ui", line, &r) == 304, "a list with the weak tag: 304 (got %ld)", r.status);
    hc_response_free(&r);
    CHECK(get_with(d, "/ui", "If-None-Match: *", &r) == 304, "If-None-Match: *: 304 (got %ld)",
          r.status);
    hc_response_free(&r);
    snprintf(line, sizeof line, "If-None-Match: %s", tag_js);
    CHECK(get_with(d, "/ui", line, &r) == 200 && r.len > 1000,
          "another file's tag: 200 with the page (%ld)", r.status);
    hc_response_free(&r);
    CHECK(get_with(d, "/ui", "If-None-Match: \"\"", &r) == 200, "an empty tag: 200 (got %ld)",
          r.status);
    hc_response_free(&r);
}

/* /ui/ (the address typed with a slash) sends the browser to /ui, keeping the query: the page's
 * links are relative to /ui, so it is not served at /ui/ itself */
static void test_slash(srv_daemon *d)
{
    struct {
        const char *path, *location;
    } cases[] = {
        {"/ui/", "/ui"},
        {"/ui/?layer=demo", "/ui?layer=demo"},
        {"/ui/?layer=my.layer&head=2&x=a%20b&flag", "/ui?layer=my.layer&head=2&x=a%20b&flag"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        hc_response r;
        hc_request(d, "GET", cases[i].path, NULL, NULL, -1, NULL, &r);
        char loc[256] = "";
        hc_header(&r, "Location", loc, sizeof loc);
        CHECK(r.status == 308 && strcmp(loc, cases[i].location) == 0,
              "GET %s: 308 to %s (got %ld, Location '%s')", cases[i].path, cases[i].location,
              r.status, loc);
        hc_response_free(&r);
    }
}

static void test_methods(srv_daemon *d)
{
    hc_response r;
    hc_request(d, "HEAD", "/ui/attnd.js", NULL, NULL, -1, NULL, &r);
    char ctype[64] = "";
    hc_header(&r, "Content-Type", ctype, sizeof ctype);
    CHECK(r.status == 200 && r.len == 0 && strncmp(ctype, "text/javascript", 15) == 0,
          "HEAD /ui/attnd.js: 200, its type, no body (%ld, '%s', %zu bytes)", r.status, ctype,
          r.len);
    hc_response_free(&r);

    hc_request(d, "PUT", "/ui/attnd.js", NULL, "x", -1, NULL, &r);
    char allow[64] = "";
    hc_header(&r, "Allow", allow, sizeof allow);
    CHECK(r.status == 405 && strstr(allow, "GET"),
          "PUT /ui/attnd.js: 405, Allow: GET (got %ld, '%s')", r.status, allow);
    hc_response_free(&r);
    hc_request(d, "DELETE", "/ui", NULL, NULL, -1, NULL, &r);
    CHECK(r.status == 405, "DELETE /ui: 405 (got %ld)", r.status);
    hc_response_free(&r);

    /* the page's query is its own state: any argument is fine */
    hc_request(d, "GET", "/ui?layer=demo&view=trace&q=the+cat&unknown=1", NULL, NULL, -1, NULL, &r);
    CHECK(r.status == 200, "GET /ui with the page's query arguments: 200 (got %ld)", r.status);
    hc_response_free(&r);
}

/* With a key and --auth-reads, the files need none; the API still does. */
static void test_no_key_needed(void)
{
    srv_options opt;
    hc_options(&opt);
    snprintf(opt.api_key, sizeof opt.api_key, "%s", "sesame");
    opt.auth_reads = true;
    srv_daemon *d = hc_start(&opt);
    CHECK(d != NULL, "a daemon with --api-key and --auth-reads starts");
    if (!d)
        return;
    hc_response r;
    hc_request(d, "GET", "/ui", NULL, NULL, -1, NULL, &r);
    CHECK(r.status == 200, "GET /ui needs no key, even with --auth-reads (got %ld)", r.status);
    hc_response_free(&r);
    hc_request(d, "GET", "/ui/attnd.js", NULL, NULL, -1, NULL, &r);
    CHECK(r.status == 200, "GET /ui/attnd.js needs no key (got %ld)", r.status);
    hc_response_free(&r);
    hc_request(d, "GET", "/ui/nope.js", NULL, NULL, -1, NULL, &r);
    CHECK(r.status == 404, "an unknown file is still a 404, not a 401 (got %ld)", r.status);
    hc_response_free(&r);
    hc_request(d, "GET", "/v1/layers", NULL, NULL, -1, NULL, &r);
    CHECK(r.status == 401, "GET /v1/layers still needs the key (got %ld)", r.status);
    hc_response_free(&r);
    hc_stop(d);
}

int main(void)
{
    srv_daemon *d = hc_start(NULL);
    CHECK(d != NULL, "daemon starts");
    if (d) {
        test_every_file(d);
        test_not_found(d);
        test_caching(d);
        test_methods(d);
        test_slash(d);
        hc_stop(d);
    }
    test_no_key_needed();
    return check_report();
}
