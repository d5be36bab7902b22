/*
 * test_strict.c - the request line and headers held to the RFCs' MUSTs (server/http/strict.c), over
 * raw sockets against an in-process daemon (port 0), and the text log they leave.
 *
 *   - a NUL in the target is a 400 that touches nothing: "DELETE /v1/layers/victim<NUL>/../other"
 *     used to delete "victim";
 *   - control bytes, DEL and spaces in the target, a method that is not a token, a header name that
 *     is not one ("Host : x", whitespace before the colon), control bytes or a NUL in a header value,
 *     a folded header, two Host headers: 400 before routing, each with a message naming the fault;
 *   - a query of more than 64 arguments: 414 at once (2,000 of them used to hang until the 408);
 *   - what stays accepted: 64 arguments, tabs and UTF-8 in header values, empty values, bare LF line
 *     ends (RFC 9112 2.2 allows them), percent-encoded bytes;
 *   - the daemon's text log (stderr, captured) holds no raw control byte afterwards, and shows the
 *     refused requests' methods and paths escaped.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "http_client.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Sends len bytes of req (which asks for Connection: close, or is refused) and returns the status;
 * reply (may be NULL) gets the start of the reply. */
static int raw(int port, const char *req, size_t len, char *reply, size_t size)
{
    return hc_raw(port, req, len, 3000, reply, size);
}

#define RAW(port, lit, reply) raw((port), (lit), sizeof(lit) - 1, (reply), sizeof(reply))

static void test_nul_target(srv_daemon *d)
{
    int port = srv_daemon_port(d);
    hc_response r;
    const char *cfg = "{\"config\": {\"embed_dim\": 4, \"num_heads\": 2}}";
    hc_request(d, "PUT", "/v1/layers/victim", NULL, cfg, -1, NULL, &r);
    CHECK(r.status == 201, "victim created (%ld)", r.status);
    hc_response_free(&r);
    hc_request(d, "PUT", "/v1/layers/other", NULL, cfg, -1, NULL, &r);
    CHECK(r.status == 201, "other created (%ld)", r.status);
    hc_response_free(&r);

    char reply[2048];
    int st = RAW(port, "DELETE /v1/layers/victim\0/../other HTTP/1.1\r\nHost: x\r\n\r\n", reply);
    CHECK(st == 400 && strstr(reply, "NUL byte"), "a NUL in the target: 400 (%d %.200s)", st, reply);
    st = RAW(port, "DELETE /v1/layers/victim?\0 HTTP/1.1\r\nHost: x\r\n\r\n", reply);
    CHECK(st == 400, "a NUL in the query: 400 (%d)", st);
    st = RAW(port, "DELETE /v1/layers/victim\0 HTTP/1.1\r\nHost: x\r\n\r\n", reply);
    CHECK(st == 400, "a NUL at the target's end: 400 (%d)", st);
    st = RAW(port, "DEL\0ETE /v1/layers/victim HTTP/1.1\r\nHost: x\r\n\r\n", reply);
    CHECK(st == 400, "a NUL in the method: 400 (%d %.120s)", st, reply);
    for (int i = 0; i < 2; i++) {
        const char *name = i ? "/v1/layers/other" : "/v1/layers/victim";
        hc_request(d, "GET", name, NULL, NULL, 0, NULL, &r);
        CHECK(r.status == 200, "%s is still there (%ld)", name, r.status);
        hc_response_free(&r);
    }
}

/* Requests refused with 400 before routing (each would otherwise reach a route), and what the
 * message must say. */
static void test_refused(srv_daemon *d)
{
    int port = srv_daemon_port(d);
    static const struct {
        const char *what;
        const char *req;
        size_t len;
        const char *says;
    } cases[] = {
#define C(what, lit, says) {what, lit, sizeof(lit) - 1, says}
        C("control byte in the target", "GET /v1/layers/vic\x01tim HTTP/1.1\r\nHost: x\r\n\r\n",
          "control character (byte 0x01 at offset 14)"),
        C("ESC in the target", "GET /healthz\x1b[2J HTTP/1.1\r\nHost: x\r\n\r\n", "byte 0x1b"),
        C("DEL in the target", "GET /healthz\x7f HTTP/1.1\r\nHost: x\r\n\r\n", "byte 0x7f"),
        C("tab in the target", "GET /v1/lay\tERS HTTP/1.1\r\nHost: x\r\n\r\n", "byte 0x09"),
        C("space in the target", "GET /v1/layers/a b HTTP/1.1\r\nHost: x\r\n\r\n", "a space"),
        C("two spaces before the version", "GET /healthz  HTTP/1.1\r\nHost: x\r\n\r\n", "a space"),
        C("ESC in the method", "G\x1b[2JET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
          "not a token character"),
        C("'(' in the method", "GE(T /healthz HTTP/1.1\r\nHost: x\r\n\r\n", "byte 0x28 at offset 2"),
        C("'/' in the method", "GET/ /healthz HTTP/1.1\r\nHost: x\r\n\r\n", "not a token"),
        C("two Host headers", "GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", "2 Host headers"),
        C("two Host headers, other case", "GET /healthz HTTP/1.1\r\nHost: a\r\nhOST: a\r\n\r\n",
          "2 Host headers"),
        C("space before a colon", "GET /healthz HTTP/1.1\r\nHost : a\r\n\r\n", "'Host '"),
        C("tab before a colon", "GET /healthz HTTP/1.1\r\nHost: a\r\nX-Y\t: b\r\n\r\n",
          "'X-Y?' is not a token"),
        C("space in a header name", "GET /healthz HTTP/1.1\r\nHost: a\r\nX Y: b\r\n\r\n",
          "not a token"),
        C("a header line without a name", "GET /healthz HTTP/1.1\r\nHost: a\r\n: b\r\n\r\n",
          ""), /* libmicrohttpd's own 400 */
        C("control byte in a header name", "GET /healthz HTTP/1.1\r\nHost: a\r\nX\x01Y: b\r\n\r\n",
          "not a token"),
        C("ESC in a header value", "GET /healthz HTTP/1.1\r\nHost: a\r\nX-A: b\x1b[2Jc\r\n\r\n",
          "header 'X-A' holds a control character (byte 0x1b at offset 1"),
        C("DEL in a header value", "GET /healthz HTTP/1.1\r\nX-A: \x7f\r\nHost: a\r\n\r\n",
          "byte 0x7f"),
        C("CR in a header value", "GET /healthz HTTP/1.1\r\nHost: a\r\nX-A: b\rc\r\n\r\n", "byte 0x0d"),
        C("NUL inside a header value", "GET /healthz HTTP/1.1\r\nHost: a\r\nX-A: b\0c\r\n\r\n",
          "NUL byte"),
        C("NUL inside the last header's value", "GET /healthz HTTP/1.1\r\nHost: a\0c\r\n\r\n",
          "NUL byte"),
        C("NUL before a CR LF", "GET /healthz HTTP/1.1\r\nX-A: b\0\r\nHost: a\r\n\r\n", "NUL byte"),
        C("NUL right after a colon", "GET /healthz HTTP/1.1\r\nX-A:\0b\r\nHost: a\r\n\r\n",
          "NUL byte"),
        C("NULs, then more of the value", "GET /healthz HTTP/1.1\r\nX-A: b\0\0c\r\nHost: a\r\n\r\n",
          "NUL byte"),
        C("NUL in the version", "GET /healthz HTTP/1.1\0\r\nHost: a\r\n\r\n", ""),
        C("a folded header (obs-fold)", "GET /healthz HTTP/1.1\r\nHost: a\r\nX-A: b\r\n  c\r\n\r\n",
          "folded"),
        /* which one frames the body? a proxy reading the other would smuggle the rest */
        C("Content-Length and chunked",
          "POST /v1/layers/victim/forward HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n"
          "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
          "both Content-Length and Transfer-Encoding"),
        C("chunked, then Content-Length, on a path that is no route",
          "POST /nowhere HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n"
          "\r\n2\r\n{}\r\n0\r\n\r\n",
          "both Content-Length and Transfer-Encoding"),
#undef C
    };
    char reply[2048];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int st = raw(port, cases[i].req, cases[i].len, reply, sizeof reply);
        CHECK(st == 400 && strstr(reply, cases[i].says),
              "%s: 400 saying '%s' (got %d: %.300s)", cases[i].what, cases[i].says, st, reply);
        if (strstr(cases[i].says, "Transfer-Encoding")) /* RFC 9112 6.1: MUST close after it */
            CHECK(strcasestr(reply, "Connection: close") != NULL, "%s: the connection closes: %.300s",
                  cases[i].what, reply);
    }
}

static void test_accepted(srv_daemon *d)
{
    int port = srv_daemon_port(d);
    static const struct {
        const char *what;
        const char *req;
        size_t len;
    } cases[] = {
#define C(what, lit) {what, lit, sizeof(lit) - 1}
        C("a plain request", "GET /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"),
        C("a tab and UTF-8 in a value",
          "GET /healthz HTTP/1.1\r\nHost: a\r\nX-A: b\tc \xc3\xa9\r\nConnection: close\r\n\r\n"),
        C("empty values", "GET /healthz HTTP/1.1\r\nX-A:\r\nX-B: \r\nHost: a\r\nConnection: close\r\n\r\n"),
        C("bare LF line ends", "GET /healthz HTTP/1.1\nHost: a\nX-A: b\nConnection: close\n\n"),
        C("mixed line ends", "GET /healthz HTTP/1.1\r\nHost: a\nConnection: close\r\n\n"),
        C("HTTP/1.0 without headers", "GET /healthz HTTP/1.0\r\n\r\n"),
        C("percent-encoded bytes", "GET /v1/layers/victim%2Dx HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"),
        C("token characters in a header name",
          "GET /healthz HTTP/1.1\r\nHost: a\r\nX-!#$%&'*+.^_`|~0: b\r\nConnection: close\r\n\r\n"),
#undef C
    };
    char reply[2048];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int st = raw(port, cases[i].req, cases[i].len, reply, sizeof reply);
        CHECK(st == 200 || (i == 6 && st == 404), "%s: served (%d %.200s)", cases[i].what, st, reply);
    }
}

/* A target of n query arguments ("?a0=1&a1=1..."), as a whole request for /healthz (malloc'd). */
static char *query_request(int n, size_t *len)
{
    size_t cap = 64 + (size_t)n * 12;
    char *req = malloc(cap);
    size_t k = (size_t)snprintf(req, cap, "GET /healthz");
    for (int i = 0; i < n; i++)
        k += (size_t)snprintf(req + k, cap - k, "%ca%d=1", i ? '&' : '?', i);
    k += (size_t)snprintf(req + k, cap - k, " HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    *len = k;
    return req;
}

static void test_query_args(srv_daemon *d)
{
    int port = srv_daemon_port(d);
    char reply[2048];
    const int counts[] = {64, 65, 2000};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        size_t len;
        char *req = query_request(counts[i], &len);
        double t0 = now_s();
        int st = raw(port, req, len, reply, sizeof reply);
        double took = now_s() - t0;
        if (counts[i] <= 64)
            CHECK(st == 200, "%d query arguments: served (%d %.200s)", counts[i], st, reply);
        else
            CHECK(st == 414 && strstr(reply, "uri_too_long") && strstr(reply, "at most 64") &&
                      took < 5.0,
                  "%d query arguments: 414 at once (%d after %.2f s: %.200s)", counts[i], st, took,
                  reply);
        free(req);
    }
    hc_response r;
    hc_request(d, "GET", "/healthz", NULL, NULL, 0, NULL, &r);
    CHECK(r.status == 200, "the daemon still answers (%ld)", r.status);
    hc_response_free(&r);
}

/* Lines of s holding a raw byte below 0x20 (line ends aside) or DEL. */
static int raw_control_lines(const char *s, size_t n)
{
    int bad = 0;
    bool seen = false;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '\n') {
            bad += seen;
            seen = false;
        } else if (ch < 0x20 || ch == 0x7f) {
            seen = true;
        }
    }
    return bad + seen;
}

int main(void)
{
    /* the daemon's log goes to a temporary file for the test's span */
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    FILE *log = tmpfile();
    dup2(fileno(log), STDERR_FILENO);

    srv_options opt;
    hc_options(&opt);
    opt.log_format = SRV_LOG_TEXT;
    srv_daemon *d = hc_start(&opt);
    if (d) {
        test_nul_target(d);
        test_refused(d);
        test_accepted(d);
        test_query_args(d);
        hc_stop(d);
    }
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    CHECK(d != NULL, "daemon started");

    long n = lseek(fileno(log), 0, SEEK_END);
    char *s = calloc(1, (size_t)n + 1);
    lseek(fileno(log), 0, SEEK_SET);
    CHECK(n > 0 && read(fileno(log), s, (size_t)n) == n, "the log was written (%ld bytes)", n);
    fclose(log);
    CHECK(raw_control_lines(s, (size_t)n) == 0, "the text log holds no raw control byte");
    CHECK(strstr(s, "\"GET\" \"/healthz\\x1b[2J\" 400 ") && strstr(s, "\"G\\x1b[2JET\" \"/healthz\" 400 ") &&
              strstr(s, "\"GET\" \"/v1/layers/vic\\x01tim\" 400 "),
          "the refused requests are logged with their bytes escaped");
    if (check_failed)
        fwrite(s, 1, (size_t)n, stdout);
    free(s);
    return check_report();
}
