/*
 * test_body_budget.c - --max-body-memory (server/http/body_budget.c): request bodies held at once,
 * all connections together, against an in-process daemon (port 0) with --max-body-bytes and
 * --max-body-memory both 1 MiB.
 *
 *   - the budget's arithmetic (take, exact fit, give back) and its default;
 *   - while one client holds a 700 KB body half sent, a 600 KB body is refused with 503
 *     out_of_memory + Retry-After before any of it is kept (from its Content-Length: at once to a
 *     client that asked "Expect: 100-continue", at the body's end, read and dropped, to one already
 *     sending it, so that it reads the answer instead of a reset), a chunked one of the
 *     same size when it grows past the budget (its end read and dropped, then 503), while small
 *     requests are served;
 *   - once the first body is complete and answered, the budget is free again (/metrics shows
 *     0 bytes held) and the same 600 KB request is served;
 *   - a body over --max-body-bytes is still 413, not 503;
 *   - --max-body-memory below --max-body-bytes is refused at start.
 * The only waits are polls of /metrics for what the daemon does with bytes already sent.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/sysinfo.h"
#include "check.h"
#include "http/body_budget.h"
#include "http_client.h"

#define BUDGET (1 << 20)
#define HELD 700000  /* the body a client holds half sent                      */
#define OTHER 600000 /* another body: fits alone, not with HELD                 */

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

/* Polls /metrics (every 10 ms, at most 5 s) until it shows `want` bytes held; returns the last
 * value. */
static long long wait_held_up_to(srv_daemon *d, long long want, int tenths_of_s)
{
    long long v = -1;
    for (int i = 0; i < 10 * tenths_of_s && (v = body_bytes_held(d)) != want; i++)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    return v;
}

static long long wait_held(srv_daemon *d, long long want)
{
    return wait_held_up_to(d, want, 50);
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

/* A client sending a forward body of `total` bytes from source address `src` (127.0.0.x) on its
 * own connection, a part at a time. */
typedef struct sender {
    int fd;
    char *body;
    size_t total, sent;
} sender;

/* Connects from src to 127.0.0.1:port and sends the headers and the first `first` bytes. */
static bool sender_start(sender *s, int port, const char *src, size_t total, size_t first)
{
    memset(s, 0, sizeof *s);
    s->fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in from = {.sin_family = AF_INET}, to = {.sin_family = AF_INET};
    inet_pton(AF_INET, src, &from.sin_addr);
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    to.sin_port = htons((uint16_t)port);
    int one = 1;
    setsockopt(s->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (s->fd < 0 || bind(s->fd, (struct sockaddr *)&from, sizeof from) < 0 ||
        connect(s->fd, (struct sockaddr *)&to, sizeof to) < 0)
        return false;
    s->body = padded_body(total);
    s->total = total;
    char head[256];
    int hl = snprintf(head, sizeof head,
                      "POST /v1/layers/b/forward HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                      "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                      total);
    return hc_send_all(s->fd, head, (size_t)hl) == (size_t)hl &&
           (first == 0 || hc_send_all(s->fd, s->body, first) == first) && (s->sent = first, true);
}

/* Sends up to `upto` bytes of the body in all. */
static bool sender_more(sender *s, size_t upto)
{
    bool ok = hc_send_all(s->fd, s->body + s->sent, upto - s->sent) == upto - s->sent;
    s->sent = upto;
    return ok;
}

/* Sends the rest and reads the reply; returns its status (0 if none), reply gets its start. */
static int sender_finish(sender *s, char *reply, size_t size)
{
    sender_more(s, s->total);
    size_t got = 0;
    ssize_t k;
    while (got + 1 < size && (k = read(s->fd, reply + got, size - 1 - got)) > 0)
        got += (size_t)k;
    reply[got] = '\0';
    int status = 0;
    sscanf(reply, "HTTP/1.1 %d", &status);
    return status;
}

static void sender_close(sender *s)
{
    if (s->fd >= 0)
        close(s->fd);
    free(s->body);
    memset(s, 0, sizeof *s);
    s->fd = -1;
}

/* Whether the daemon sent anything on fd within ms milliseconds (without reading it). */
static bool answered_within(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, ms) > 0;
}

/* A body refused at its headers while the client sends it anyway (no "Expect: 100-continue"): the
 * answer waits for the body's end, which is read and dropped, so the client reads the answer and
 * no connection reset (an answer first and a close with the body's bytes unread reset it under
 * the client, which then saw "Failed sending data to the peer" instead of its 503). A client that
 * asks "Expect: 100-continue" gets the answer at once and no "100 Continue"; one that sends its
 * headers and nothing more, a second later. Called while the budget is full. */
static void test_refused_while_sent(int port)
{
    char head[320], reply[4096];
    for (int expect = 0; expect < 3; expect++) {
        int fd = hc_connect(port);
        if (!CHECK(fd >= 0, "connect"))
            return;
        int hl = snprintf(head, sizeof head,
                          "POST /v1/layers/b/forward HTTP/1.1\r\nHost: x\r\n"
                          "Content-Type: application/json\r\nContent-Length: %d\r\n%s\r\n",
                          OTHER, expect == 1 ? "Expect: 100-continue\r\n" : "");
        CHECK(hc_send_all(fd, head, (size_t)hl) == (size_t)hl, "headers sent");
        if (expect == 2) {
            /* no Expect, and no body either: a client waiting for the answer before it sends
             * gets it a second after its headers ("sent before the body is read"), and the
             * connection closes; it was left to --min-body-rate's 408 */
            int st = hc_raw_read(fd, 5000, reply, sizeof reply);
            CHECK(st == 503 && strstr(reply, "out_of_memory") && strstr(reply, "X-Request-Id: ") &&
                      strstr(reply, "\"request_id\"") && strstr(reply, "Retry-After: 1") &&
                      strstr(reply, "Connection: close"),
                  "headers alone: the 503 a second later, with its request id (%d %.300s)", st,
                  reply);
            close(fd);
            continue;
        }
        if (expect) {
            int st = hc_raw_read(fd, 5000, reply, sizeof reply);
            CHECK(st == 503 && !strstr(reply, "100 Continue"),
                  "Expect: 100-continue: 503 at once, no 100 Continue (%d %.80s)", st, reply);
            close(fd);
            continue;
        }
        CHECK(!answered_within(fd, 300), "without Expect: no answer before the body ends");
        char *body = padded_body(OTHER);
        CHECK(hc_send_all(fd, body, OTHER) == OTHER, "the whole %d-byte body was taken", OTHER);
        free(body);
        int st = hc_raw_read(fd, 5000, reply, sizeof reply);
        CHECK(st == 503 && strstr(reply, "out_of_memory") && strstr(reply, "Retry-After: 1"),
              "then its 503 out_of_memory with Retry-After (%d %.80s)", st, reply);
        close(fd);
    }
}

static srv_daemon *start_budget_daemon(int64_t budget)
{
    srv_options opt;
    hc_options(&opt);
    opt.max_body_bytes = budget;
    opt.max_body_memory = budget;
    srv_daemon *d = hc_start(&opt);
    if (!CHECK(d != NULL, "daemon started"))
        return NULL;
    hc_response r;
    hc_request(d, "PUT", "/v1/layers/b", NULL, "{\"config\": {\"embed_dim\": 4, \"num_heads\": 2}}",
               -1, NULL, &r);
    CHECK(r.status == 201, "layer created (%ld)", r.status);
    hc_response_free(&r);
    CHECK(wait_held(d, 0) == 0, "nothing held at rest");
    return d;
}

/* POSTs a padded forward body of size bytes (chunked or not); returns the status; code_out (may be
 * NULL) gets the error code, msg (may be NULL) the reply body and its Retry-After. */
static long post_body(srv_daemon *d, size_t size, bool chunked, char *code_out, size_t code_size,
                      char *msg, size_t msg_size)
{
    char *b = padded_body(size);
    hc_opts o = {.chunked = chunked};
    hc_response r;
    hc_request(d, "POST", "/v1/layers/b/forward", NULL, b, (long)size, &o, &r);
    long st = r.status;
    if (code_out)
        hc_error_code(&r, code_out, code_size);
    char retry[16] = "";
    if (msg) /* the body, then the Retry-After header's value if any */
        snprintf(msg, msg_size, "%s Retry-After: %s", r.body ? r.body : "",
                 hc_header(&r, "Retry-After", retry, sizeof retry) ? retry : "none");
    hc_response_free(&r);
    free(b);
    return st;
}

/* request.c's BUDGET_STEP: a body's reservation grows in steps of this much, a step ahead of what
 * arrived (so it is the bytes received rounded up to whole steps, at most the Content-Length) */
#define STEP 262144

/* One address, a 1 MiB budget: a body holds what it has received (a step ahead), not its
 * Content-Length; a body whose first step does not fit is refused before it is read; one that
 * outgrows the budget later gets its 503 at its end; the budget comes back when bodies are done. */
static void test_daemon(void)
{
    srv_daemon *d = start_budget_daemon(BUDGET);
    if (!d)
        return;
    int port = srv_daemon_port(d);
    char code[64], msg[512], reply[4096];

    sender a, b;
    CHECK(sender_start(&a, port, "127.0.0.1", HELD, 1000), "A sent its headers and 1000 bytes");
    CHECK(wait_held(d, STEP) == STEP,
          "A declares %d bytes and holds one step, not its Content-Length", HELD);
    CHECK(post_body(d, OTHER, false, code, sizeof code, msg, sizeof msg) == 200,
          "a %d-byte body is served meanwhile: %s", OTHER, msg);
    CHECK(sender_more(&a, HELD - 1), "A sent all but one byte");
    CHECK(wait_held(d, HELD) == HELD, "A holds its body now");
    CHECK(sender_start(&b, port, "127.0.0.1", 300000, 290000), "B sent 290000 of 300000 bytes");
    CHECK(wait_held(d, HELD + 300000) == HELD + 300000, "A and B hold 1,000,000 bytes");

    code[0] = '\0';
    long st = post_body(d, OTHER, false, code, sizeof code, msg, sizeof msg);
    CHECK(st == 503 && !strcmp(code, "out_of_memory") && strstr(msg, "--max-body-memory") &&
              strstr(msg, "Retry-After: 1"),
          "a body whose first step does not fit: 503 out_of_memory with Retry-After (%ld %s %s)",
          st, code, msg);
    test_refused_while_sent(port);
    st = post_body(d, OTHER, true, code, sizeof code, msg, sizeof msg);
    CHECK(st == 503 && strstr(msg, "chunked"),
          "a chunked body growing past the budget: 503 at its end (%ld %s)", st, msg);
    hc_response r;
    hc_request(d, "POST", "/v1/layers/b/forward", NULL, "{\"query\": [[1, 2, 3, 4]]}", -1, NULL,
               &r);
    CHECK(r.status == 200, "a small body fits in what is left (%ld)", r.status);
    hc_response_free(&r);
    st = post_body(d, BUDGET + 1, false, NULL, 0, NULL, 0);
    CHECK(st == 0 || st == 413, "over --max-body-bytes stays 413 (%ld)", st);
    CHECK(wait_held(d, HELD + 300000) == HELD + 300000, "refused bodies hold nothing");

    CHECK(sender_finish(&a, reply, sizeof reply) == 200, "A's request is served: %.60s", reply);
    CHECK(sender_finish(&b, reply, sizeof reply) == 200, "B's request is served: %.60s", reply);
    sender_close(&a);
    sender_close(&b);
    CHECK(wait_held(d, 0) == 0, "released once answered");
    CHECK(post_body(d, OTHER, false, NULL, 0, msg, sizeof msg) == 200, "the refused body now fits");
    CHECK(post_body(d, OTHER, true, NULL, 0, msg, sizeof msg) == 200, "and chunked too: %.200s",
          msg);
    CHECK(wait_held(d, 0) == 0, "nothing held at the end");
    hc_request(d, "GET", "/metrics", NULL, NULL, 0, NULL, &r);
    CHECK(r.status == 200 && strstr(r.body, "\nattnd_request_body_bytes_limit 1048576\n"),
          "/metrics shows the limit");
    hc_response_free(&r);
    hc_stop(d);
}

/* The case: four clients declare 16 MiB each on a 64 MiB budget and send 4 KB; they hold
 * a step each, and another client's 32 MiB body is served. */
static void test_slow_senders(void)
{
    srv_daemon *d = start_budget_daemon(INT64_C(64) << 20);
    if (!d)
        return;
    int port = srv_daemon_port(d);
    sender slow[4];
    for (int i = 0; i < 4; i++)
        CHECK(sender_start(&slow[i], port, "127.0.0.1", (size_t)16 << 20, 4096),
              "slow sender %d declared 16 MiB and sent 4 KB", i);
    CHECK(wait_held(d, 4 * STEP) == 4 * STEP, "the four hold a step each, not 64 MiB");
    char msg[256];
    long st = post_body(d, (size_t)32 << 20, false, NULL, 0, msg, sizeof msg);
    CHECK(st == 200, "another client's 32 MiB body is served (%ld %.200s)", st, msg);
    hc_response r;
    hc_request(d, "POST", "/v1/layers/b/forward", NULL, "{\"query\": [[1, 2, 3, 4]]}", -1, NULL,
               &r);
    CHECK(r.status == 200, "and a small one (%ld)", r.status);
    hc_response_free(&r);
    for (int i = 0; i < 4; i++)
        sender_close(&slow[i]);
    CHECK(wait_held(d, 0) == 0, "the slow senders' steps come back when they hang up");
    hc_stop(d);
}

/* Shares: on an 8 MiB budget one address may hold 2 MiB while another holds bodies too, and all of
 * it alone. Clients from 127.0.0.2, .3 and .1 (every 127/8 address is the loopback on Linux). */
static void test_shares(void)
{
    const int64_t budget = INT64_C(8) << 20, share = budget / SRV_BODY_CLIENT_SHARE;
    srv_daemon *d = start_budget_daemon(budget);
    if (!d)
        return;
    int port = srv_daemon_port(d);
    char reply[4096], msg[512];
    sender b, a1, a2;
    CHECK(sender_start(&b, port, "127.0.0.3", (size_t)1 << 20, (size_t)1 << 19),
          "B (127.0.0.3) sent half of 1 MiB");
    CHECK(wait_held(d, 1 << 19) == 1 << 19, "B holds what it sent (in whole steps)");
    /* A, from another address, grows one body past the share: it is dropped and answered 503 */
    CHECK(sender_start(&a1, port, "127.0.0.2", (size_t)4 << 20, (size_t)(share - 2 * STEP)),
          "A (127.0.0.2) sent %lld bytes of 4 MiB", (long long)(share - 2 * STEP));
    CHECK(sender_start(&a2, port, "127.0.0.2", (size_t)1 << 20, 0), "A's second connection");
    long long held = wait_held(d, (1 << 19) + share - STEP);
    CHECK(held == (1 << 19) + share - STEP, "A holds a step under its share (%lld)", held);
    int st = sender_finish(&a1, reply, sizeof reply);
    CHECK(st == 503 && strstr(reply, "this client's address") &&
              strstr(reply, "1/4 of --max-body-memory") && strstr(reply, "Retry-After: 1"),
          "A's body past its share while B holds one: 503 at its end (%d %.400s)", st, reply);
    sender_close(&a1);
    st = sender_finish(&a2, reply, sizeof reply);
    CHECK(st == 200, "A's other body, within the share, is served (%d %.100s)", st, reply);
    sender_close(&a2);
    CHECK(post_body(d, (size_t)3 << 19, false, NULL, 0, msg, sizeof msg) == 200,
          "a third address's 1.5 MiB body is served meanwhile: %.200s", msg);
    long st3 = post_body(d, (size_t)3 << 20, false, NULL, 0, msg, sizeof msg);
    CHECK(st3 == 503 && strstr(msg, "this client's address"),
          "but not a 3 MiB one while B holds a body (%ld %.200s)", st3, msg);
    CHECK(sender_finish(&b, reply, sizeof reply) == 200, "B is served: %.60s", reply);
    sender_close(&b);
    CHECK(wait_held(d, 0) == 0, "nothing held");

    /* alone, an address may hold more than its share */
    sender alone;
    CHECK(sender_start(&alone, port, "127.0.0.2", (size_t)6 << 20, (size_t)5 << 20),
          "A alone sent 5 MiB of 6");
    CHECK(wait_held(d, 5 << 20) == 5 << 20, "A alone holds 5 MiB, more than twice its share");
    CHECK(sender_finish(&alone, reply, sizeof reply) == 200, "and is served: %.60s", reply);
    sender_close(&alone);
    CHECK(wait_held(d, 0) == 0, "nothing held at the end");
    hc_stop(d);
}

/* Memory an address took while alone is not kept from the others by sending nothing: A (127.0.0.2)
 * fills the 8 MiB budget with four half-sent bodies and stops; B (127.0.0.3), within its share, is
 * refused for a full budget; within seconds A's stalled bodies are cut with a 503 naming the share,
 * the budget comes back, and B is served. (A's bodies earned minutes of --min-body-rate credit: the
 * rate averaged over a body never cut them.) */
static void test_stalled_over_share(void)
{
    const int64_t budget = INT64_C(8) << 20;
    srv_daemon *d = start_budget_daemon(budget);
    if (!d)
        return;
    int port = srv_daemon_port(d);
    sender a[4];
    bool sent = true;
    for (int i = 0; i < 4; i++)
        sent &= sender_start(&a[i], port, "127.0.0.2", (size_t)4 << 20, (size_t)2 << 20);
    CHECK(sent && wait_held(d, budget) == budget, "A alone holds the whole budget (%lld)",
          body_bytes_held(d));
    char msg[512];
    long st = post_body(d, (size_t)64 << 10, false, NULL, 0, msg, sizeof msg);
    CHECK(st == 503, "B, within its share, is refused while A holds it all (%ld %.120s)", st, msg);
    /* B retries as its Retry-After says: the cut needs the budget contended (a refusal within
     * the last 2 s) when the reaper looks, once a second, and on a loaded machine one refusal
     * may have aged past that by then */
    long long held = wait_held_up_to(d, 0, 30);
    for (int tries = 0; held != 0 && tries < 8; tries++) {
        post_body(d, (size_t)64 << 10, false, NULL, 0, msg, sizeof msg);
        held = wait_held_up_to(d, 0, 20);
    }
    CHECK(held == 0, "A's stalled bodies are cut and the budget comes back (%lld held)", held);
    char reply[2048];
    size_t got = 0;
    ssize_t k;
    while (got + 1 < sizeof reply && (k = read(a[0].fd, reply + got, sizeof reply - 1 - got)) > 0)
        got += (size_t)k;
    reply[got] = '\0';
    CHECK(strncmp(reply, "HTTP/1.1 503", 12) == 0 && strstr(reply, "share of --max-body-memory") &&
              strstr(reply, "Retry-After: 1"),
          "a cut body is answered 503 saying why: %.300s", reply);
    st = post_body(d, (size_t)64 << 10, false, NULL, 0, msg, sizeof msg);
    CHECK(st == 200, "B is served then (%ld %.120s)", st, msg);
    hc_response h;
    hc_request(d, "GET", "/metrics", NULL, NULL, 0, NULL, &h);
    CHECK(h.body &&
              strstr(h.body, "attnd_http_connections_closed_total{reason=\"body_over_share\"} 4"),
          "the four cuts are counted");
    hc_response_free(&h);
    for (int i = 0; i < 4; i++)
        sender_close(&a[i]);
    hc_stop(d);
}

static void test_client_keys(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET}, b = a;
    inet_pton(AF_INET, "10.0.0.1", &a.sin_addr);
    inet_pton(AF_INET, "10.0.0.2", &b.sin_addr);
    struct sockaddr_in6 m = {.sin6_family = AF_INET6}, x = m, y = m;
    inet_pton(AF_INET6, "::ffff:10.0.0.1", &m.sin6_addr);
    inet_pton(AF_INET6, "2001:db8:1:2::1", &x.sin6_addr);
    inet_pton(AF_INET6, "2001:db8:1:2:ffff::9", &y.sin6_addr);
    srv_body_client ka, kb, km, kx, ky;
    srv_body_client_of(&ka, (struct sockaddr *)&a);
    srv_body_client_of(&kb, (struct sockaddr *)&b);
    srv_body_client_of(&km, (struct sockaddr *)&m);
    srv_body_client_of(&kx, (struct sockaddr *)&x);
    srv_body_client_of(&ky, (struct sockaddr *)&y);
    CHECK(memcmp(&ka, &kb, sizeof ka) != 0, "two IPv4 addresses are two clients");
    CHECK(memcmp(&ka, &km, sizeof ka) == 0, "an IPv4-mapped IPv6 address is its IPv4 address");
    CHECK(memcmp(&kx, &ky, sizeof kx) == 0, "IPv6 addresses of one /64 are one client");

    /* the table: many addresses in and out, each one's bytes its own */
    srv_body_budget bud = {.limit = INT64_C(1) << 40};
    srv_body_clients *cl = srv_body_clients_create(64);
    srv_body_client k[100];
    for (int i = 0; i < 100; i++) {
        struct sockaddr_in s = {.sin_family = AF_INET,
                                .sin_addr.s_addr = htonl(0x0a000000u + (unsigned)i)};
        srv_body_client_of(&k[i], (struct sockaddr *)&s);
    }
    bool ok = true;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 100; i++)
            ok &= srv_body_take(&bud, cl, &k[i], i + 1) == SRV_BODY_TAKEN;
        for (int i = 0; i < 100; i += 2) /* give back every other one: slots shift back */
            srv_body_give(&bud, cl, &k[i], i + 1);
        for (int i = 0; i < 100; i++)
            ok &= srv_body_client_held(cl, &k[i]) == (i % 2 ? i + 1 : 0);
        for (int i = 1; i < 100; i += 2)
            srv_body_give(&bud, cl, &k[i], i + 1);
    }
    CHECK(ok && srv_body_budget_held(&bud) == 0,
          "100 addresses in a table for 64: held and given back");
    srv_body_budget small = {.limit = 400};
    CHECK(srv_body_take(&small, cl, &k[0], 150) == SRV_BODY_TAKEN, "alone: past the share (100)");
    CHECK(srv_body_take(&small, cl, &k[1], 50) == SRV_BODY_TAKEN,
          "another address, within its share");
    CHECK(srv_body_take(&small, cl, &k[1], 51) == SRV_BODY_OVER_SHARE, "but not past it");
    CHECK(srv_body_take(&small, cl, &k[0], 1) == SRV_BODY_OVER_SHARE,
          "nor the first, now that another holds bytes");
    srv_body_give(&small, cl, &k[1], 50);
    CHECK(srv_body_take(&small, cl, &k[0], 250) == SRV_BODY_TAKEN, "alone again: up to the limit");
    CHECK(srv_body_take(&small, cl, &k[0], 1) == SRV_BODY_FULL, "and no further");
    srv_body_give(&small, cl, &k[0], 400);
    CHECK(srv_body_budget_held(&small) == 0 && srv_body_client_held(cl, &k[0]) == 0,
          "all given back");
    srv_body_clients_free(cl);
}

int main(void)
{
    test_arithmetic();
    test_start_refused();
    test_client_keys();
    test_daemon();
    test_slow_senders();
    test_shares();
    test_stalled_over_share();
    return check_report();
}
