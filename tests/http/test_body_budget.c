/*
 * test_body_budget.c - --max-body-memory (server/http/body_budget.c): request bodies held at once, all
 * connections together, against an in-process daemon (port 0) with --max-body-bytes and
 * --max-body-memory both 1 MiB.
 *
 *   - the budget's arithmetic (take, exact fit, give back) and its default;
 *   - while one client holds a 700 KB body half sent, a 600 KB body is refused with 503
 *     out_of_memory + Retry-After before it is read (from its Content-Length), a chunked one of the
 *     same size when it grows past the budget (its end read and dropped, then 503), while small
 *     requests are served;
 *   - once the first body is complete and answered, the budget is free again (/metrics shows
 *     0 bytes held) and the same 600 KB request is served;
 *   - a body over --max-body-bytes is still 413, not 503;
 *   - --max-body-memory below --max-body-bytes is refused at start.
 * The only waits are polls of /metrics for what the daemon does with bytes already sent.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/sysinfo.h"
#include "check.h"
#include "http/body_budget.h"
#include "http_client.h"

#define BUDGET (1 << 20)
#define HELD 700000   /* the body a client holds half sent                      */
#define OTHER 600000  /* another body: fits alone, not with HELD                 */

/* A forward body of exactly `size` bytes for a layer with E=4: a valid request padded with spaces
 * (malloc'd, NUL-terminated). */
static char *padded_body(size_t size)
{
    const char *core = "{\"query\": [[0.5, -1, 2, 0.25], [1, 0, -0.5, 3]]";
    size_t n = strlen(core);
    char *b = malloc(size + 1);
    if (!b || size < n + 1)
        abort();
    memcpy(b, core, n);
    memset(b + n, ' ', size - n - 1);
    b[size - 1] = '}';
    b[size] = '\0';
    return b;
}

/* attnd_request_body_bytes from /metrics, or -1. */
static long long body_bytes_held(srv_daemon *d)
{
    hc_response r;
    long long v = -1;
    if (hc_request(d, "GET", "/metrics", NULL, NULL, 0, NULL, &r) == 0 && r.status == 200) {
        const char *p = strstr(r.body, "\nattnd_request_body_bytes ");
        if (p)
            v = atoll(p + strlen("\nattnd_request_body_bytes "));
    }
    hc_response_free(&r);
    return v;
}

/* Polls /metrics (every 10 ms, at most 5 s) until it shows `want` bytes held; returns the last value. */
static long long wait_held(srv_daemon *d, long long want)
{
    long long v = -1;
    for (int i = 0; i < 500 && (v = body_bytes_held(d)) != want; i++)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    return v;
}

static void test_arithmetic(void)
{
    srv_body_budget b = {.limit = 100};
    CHECK(srv_body_budget_take(&b, 60), "60 of 100 fits");
    CHECK(!srv_body_budget_take(&b, 41), "41 more does not");
    CHECK(srv_body_budget_held(&b) == 60, "a refused take reserves nothing (%lld)",
          (long long)srv_body_budget_held(&b));
    CHECK(srv_body_budget_take(&b, 40), "an exact fit is taken");
    CHECK(!srv_body_budget_take(&b, 1), "nothing past the limit");
    srv_body_budget_give(&b, 100);
    CHECK(srv_body_budget_held(&b) == 0, "all given back");
    CHECK(srv_body_budget_take(&b, 0), "zero bytes always fit");

    CHECK(srv_memory_limit_bytes() > 0, "the machine's memory is known on Linux");
    int64_t def = srv_body_budget_default(INT64_C(256) << 20);
    CHECK(def >= INT64_C(256) << 20, "the default holds one largest body (%lld)", (long long)def);
    CHECK(def <= srv_memory_limit_bytes() || def == INT64_C(256) << 20,
          "the default is within the memory (%lld)", (long long)def);
    CHECK(srv_body_budget_default(INT64_C(1) << 50) == INT64_C(1) << 50,
          "never below --max-body-bytes");
}

static void test_start_refused(void)
{
    srv_options opt;
    srv_error err = {0};
    char *argv[] = {"attnd", "--max-body-bytes", "2000", "--max-body-memory", "1000", NULL};
    CHECK(srv_options_parse(&opt, 5, argv, &err) < 0 && strstr(err.message, "--max-body-memory"),
          "--max-body-memory below --max-body-bytes is refused: %s", err.message);
    char *ok[] = {"attnd", "--max-body-bytes", "1000", "--max-body-memory", "1000", NULL};
    CHECK(srv_options_parse(&opt, 5, ok, &err) >= 0 && opt.max_body_memory == 1000,
          "equal values are accepted");
}

static void test_daemon(void)
{
    srv_options opt;
    hc_options(&opt);
    opt.max_body_bytes = BUDGET;
    opt.max_body_memory = BUDGET;
    srv_daemon *d = hc_start(&opt);
    if (!CHECK(d != NULL, "daemon started"))
        return;
    int port = srv_daemon_port(d);
    hc_response r;
    char code[64];
    hc_request(d, "PUT", "/v1/layers/b", NULL, "{\"config\": {\"embed_dim\": 4, \"num_heads\": 2}}", -1,
               NULL, &r);
    CHECK(r.status == 201, "layer created (%ld)", r.status);
    hc_response_free(&r);
    CHECK(wait_held(d, 0) == 0, "nothing held at rest");

    /* one client sends the headers and a little of a 700 KB body, then waits */
    char *held = padded_body(HELD);
    int fd = hc_connect(port);
    char head[256];
    int hl = snprintf(head, sizeof head,
                      "POST /v1/layers/b/forward HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                      "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n", HELD);
    CHECK(fd >= 0 && hc_send_all(fd, head, (size_t)hl) == (size_t)hl &&
              hc_send_all(fd, held, 1000) == 1000, "first client sent its headers");
    CHECK(wait_held(d, HELD) == HELD, "its Content-Length is reserved");

    char *other = padded_body(OTHER);
    hc_request(d, "POST", "/v1/layers/b/forward", NULL, other, OTHER, NULL, &r);
    char retry[16] = "";
    CHECK(r.status == 503 && !strcmp(hc_error_code(&r, code, sizeof code), "out_of_memory") &&
              hc_header(&r, "Retry-After", retry, sizeof retry) && strstr(r.body, "--max-body-memory"),
          "a body that does not fit: 503 out_of_memory with Retry-After (%ld, %s, Retry-After '%s')",
          r.status, r.body, retry);
    hc_response_free(&r);

    hc_opts chunked = {.chunked = true};
    hc_request(d, "POST", "/v1/layers/b/forward", NULL, other, OTHER, &chunked, &r);
    CHECK(r.status == 503 && !strcmp(hc_error_code(&r, code, sizeof code), "out_of_memory") &&
              strstr(r.body, "chunked"),
          "a chunked body growing past the budget: 503 at its end (%ld, %s)", r.status, r.body);
    hc_response_free(&r);

    hc_request(d, "POST", "/v1/layers/b/forward", NULL, "{\"query\": [[1, 2, 3, 4]]}", -1, NULL, &r);
    CHECK(r.status == 200, "a small request is served meanwhile (%ld)", r.status);
    hc_response_free(&r);
    hc_request(d, "POST", "/v1/layers/b/forward", NULL, other, BUDGET + 1, NULL, &r);
    CHECK(r.status == 0 || r.status == 413, "over --max-body-bytes stays 413 (%ld)", r.status);
    hc_response_free(&r);
    CHECK(wait_held(d, HELD) == HELD, "refused bodies hold nothing");

    /* the first client finishes: answered, and its share is free again */
    char reply[4096] = "";
    CHECK(hc_send_all(fd, held + 1000, HELD - 1000) == HELD - 1000, "first client sent the rest");
    size_t got = 0;
    ssize_t k;
    while (got + 1 < sizeof reply && (k = read(fd, reply + got, sizeof reply - 1 - got)) > 0)
        got += (size_t)k;
    reply[got] = '\0';
    CHECK(strncmp(reply, "HTTP/1.1 200", 12) == 0, "the held body's request is served: %.60s", reply);
    close(fd);
    CHECK(wait_held(d, 0) == 0, "released once answered");

    hc_request(d, "POST", "/v1/layers/b/forward", NULL, other, OTHER, NULL, &r);
    CHECK(r.status == 200, "the refused request now fits (%ld %.200s)", r.status, r.body);
    hc_response_free(&r);
    hc_request(d, "POST", "/v1/layers/b/forward", NULL, other, OTHER, &chunked, &r);
    CHECK(r.status == 200, "and chunked too (%ld %.200s)", r.status, r.body);
    hc_response_free(&r);
    CHECK(wait_held(d, 0) == 0, "nothing held at the end");

    hc_request(d, "GET", "/metrics", NULL, NULL, 0, NULL, &r);
    CHECK(r.status == 200 && strstr(r.body, "\nattnd_request_body_bytes_limit 1048576\n"),
          "/metrics shows the limit");
    hc_response_free(&r);
    free(held);
    free(other);
    hc_stop(d);
}

int main(void)
{
    test_arithmetic();
    test_start_refused();
    test_daemon();
    return check_report();
}
