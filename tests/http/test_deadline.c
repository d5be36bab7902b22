/*
 * test_deadline.c - per-phase deadlines (server/http/deadline.c) against an in-process daemon (port
 * 0) with short limits: --header-timeout 1, --min-body-rate 1000, --timeout 10.
 *
 *   - headers trickled a byte at a time: 408 and closed after about a second, while normal clients
 *     are served during and after;
 *   - a body below the minimum rate is cut off; one at a fine rate, with pauses shorter than the
 *     limits, is served;
 *   - with --max-connections 16 and 16 stalled clients, a new client is served once they are
 * reaped;
 *   - a large reply read a few bytes at a time is cut off (reset) once below the rate;
 *   - a complete request whose client half-closes (shutdown(SHUT_WR)) gets its answer at once, and
 *     the connection is closed soon after instead of at --timeout;
 *   - keep-alive: a connection idle between requests for longer than --header-timeout stays open
 *     (--timeout governs it) and serves its next request; pipelined requests are all answered; a
 *     kept-alive connection that trickles its next request is cut off like a new one.
 * Bounds are generous (seconds, for ASan and a busy machine): they tell "cut off about when due"
 * from "held until --timeout", not milliseconds. The waits below are the idle times under test,
 * never a wait for readiness.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "http_client.h"

#define HEADER_TIMEOUT 1
#define MIN_RATE 1000
#define IDLE_TIMEOUT 10
#define LATE_S 3.0 /* a deadline of 1 s is enforced within this (reaper tick, ASan, 2 busy cores)  \
                    */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void pause_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static bool send_str(int fd, const char *s, size_t n)
{
    return hc_send_all(fd, s, n) == n;
}

/* Reads what is there within ms into buf (appending at *got, NUL-terminated). Returns 1 when the
 * peer closed (EOF or reset), 0 otherwise. */
static int read_some(int fd, char *buf, size_t cap, size_t *got, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, ms) <= 0)
        return 0;
    if (*got + 1 >= cap) /* full: drop what was read, keep reading */
        *got = 0;
    ssize_t r = recv(fd, buf + *got, cap - 1 - *got, 0);
    if (r <= 0)
        return 1;
    *got += (size_t)r;
    buf[*got] = '\0';
    return 0;
}

/* Sends `tail` one byte every interval_ms (cycling) until the daemon closes the connection or
 * limit_s pass. Returns the seconds since t0 at which it closed, or -1. What the daemon sent is in
 * buf. */
static double trickle_until_closed(int fd, const char *tail, int interval_ms, double t0,
                                   double limit_s, char *buf, size_t cap)
{
    size_t got = 0, k = 0, n = strlen(tail);
    buf[0] = '\0';
    while (now_s() - t0 < limit_s) {
        if (send(fd, tail + k, 1, MSG_NOSIGNAL) != 1)
            return now_s() - t0; /* reset: closed */
        k = (k + 1) % n;
        double until = now_s() + interval_ms / 1e3;
        while (now_s() < until)
            if (read_some(fd, buf, cap, &got, (int)((until - now_s()) * 1e3) + 1))
                return now_s() - t0;
    }
    return -1;
}

/* Waits until the daemon closes fd (or limit_s pass since t0), collecting its bytes into buf.
 * Returns the seconds since t0 at which it closed, or -1. */
static double wait_closed(int fd, double t0, double limit_s, char *buf, size_t cap, size_t *got)
{
    while (now_s() - t0 < limit_s)
        if (read_some(fd, buf, cap, got, 50))
            return now_s() - t0;
    return -1;
}

/* Number of complete responses (status line, headers, Content-Length bytes) at the start of buf. */
static int responses_in(const char *buf, size_t len)
{
    int n = 0;
    const char *p = buf;
    for (;;) {
        const char *h = strstr(p, "HTTP/1.1 ");
        const char *e = h ? strstr(h, "\r\n\r\n") : NULL;
        if (!e)
            return n;
        const char *cl = strcasestr(h, "\r\nContent-Length:");
        size_t blen = cl && cl < e ? strtoul(cl + 17, NULL, 10) : 0;
        if ((size_t)(e + 4 - buf) + blen > len)
            return n;
        p = e + 4 + blen;
        n++;
    }
}

static bool healthz_ok(srv_daemon *d)
{
    hc_response r;
    hc_request(d, "GET", "/healthz", NULL, NULL, 0, NULL, &r);
    bool ok = r.status == 200;
    hc_response_free(&r);
    return ok;
}

/* The value of one series of GET /metrics (the line that starts with `series `), or -1. */
static double metric(srv_daemon *d, const char *series)
{
    hc_response r;
    hc_request(d, "GET", "/metrics", NULL, NULL, 0, NULL, &r);
    double v = -1;
    size_t n = strlen(series);
    for (const char *p = r.body; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (!strncmp(p, series, n) && p[n] == ' ')
            v = strtod(p + n + 1, NULL);
    hc_response_free(&r);
    return v;
}

static const char forward_body[] =
    "{\"query\": [[0.5,-1,2,0.25,0,1,-0.5,3],[1,1,1,1,-1,-1,-1,-1]]}";

/* ---------------------------------------------------------------------------------------------- */

static void test_header_trickle(srv_daemon *d)
{
    int fd = hc_connect(srv_daemon_port(d));
    double t0 = now_s();
    const char *start = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n";
    send_str(fd, start, strlen(start));
    /* a normal client meanwhile */
    CHECK(healthz_ok(d), "a normal request while a client trickles its headers");
    char buf[4096];
    double closed = trickle_until_closed(fd, "X-Slow: aaaaaaaaaaaaaaaa\r\n", 100, t0,
                                         HEADER_TIMEOUT + LATE_S, buf, sizeof buf);
    CHECK(closed >= HEADER_TIMEOUT - 0.05 && closed <= HEADER_TIMEOUT + LATE_S,
          "headers trickled byte by byte: closed after %.2f s (--header-timeout %d)", closed,
          HEADER_TIMEOUT);
    CHECK(strncmp(buf, "HTTP/1.1 408 ", 13) == 0 && strstr(buf, "\"request_timeout\"") &&
              strstr(buf, "--header-timeout") && strstr(buf, "\r\nX-Request-Id: ") &&
              strstr(buf, "\"request_id\":\""),
          "the trickling client got a 408 naming the flag, with a request id: %.300s", buf);
    close(fd);
    CHECK(healthz_ok(d), "a normal request after the trickling client was cut off");
    printf("  header trickle: cut off after %.2f s\n", closed);

    /* a connection that sends nothing at all is closed after the header timeout too */
    fd = hc_connect(srv_daemon_port(d));
    t0 = now_s();
    size_t got = 0;
    closed = wait_closed(fd, t0, HEADER_TIMEOUT + LATE_S, buf, sizeof buf, &got);
    CHECK(closed >= HEADER_TIMEOUT - 0.05, "a silent connection: closed after %.2f s", closed);
    close(fd);
}

static void test_slow_body(srv_daemon *d)
{
    int port = srv_daemon_port(d);
    char head[256], buf[4096];
    /* below the rate: 10 bytes/s */
    int fd = hc_connect(port);
    double t0 = now_s();
    snprintf(head, sizeof head,
             "POST /v1/layers/x/forward HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Request-Id: slow-1\r\n"
             "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"query\": ");
    send_str(fd, head, strlen(head));
    double closed =
        trickle_until_closed(fd, "[1,2,3,4] ", 100, t0, HEADER_TIMEOUT + LATE_S, buf, sizeof buf);
    CHECK(closed >= HEADER_TIMEOUT - 0.05 && closed <= HEADER_TIMEOUT + LATE_S,
          "a body at 10 bytes/s: closed after %.2f s (--min-body-rate %d)", closed, MIN_RATE);
    CHECK(strstr(buf, "408 Request Timeout") && strstr(buf, "--min-body-rate") &&
              strstr(buf, "\r\nX-Request-Id: slow-1\r\n") &&
              strstr(buf, "\"request_id\":\"slow-1\""),
          "the slow body got a 408 naming the flag, with its request's id: %.300s", buf);
    close(fd);
    CHECK(healthz_ok(d), "a normal request after the slow body was cut off");
    printf("  slow body: cut off after %.2f s\n", closed);

    /* a fine rate with pauses: 6000 bytes in 4 parts, 500 ms apart (3000 bytes/s on average,
     * every pause shorter than --header-timeout), 1.5 s in all, past the grace; each part earns
     * 1.5 s more than the pause after it, so a slow machine has a margin of seconds */
    enum { PAD = 6000 };
    char *body = malloc(PAD + sizeof forward_body);
    memset(body, ' ', PAD);
    memcpy(body + PAD, forward_body, sizeof forward_body);
    size_t blen = strlen(body);
    fd = hc_connect(port);
    snprintf(head, sizeof head,
             "POST /v1/layers/x/forward HTTP/1.1\r\nHost: 127.0.0.1\r\n"
             "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
             blen);
    send_str(fd, head, strlen(head));
    size_t part = blen / 4 + 1;
    bool sent_all = true;
    for (size_t off = 0; off < blen; off += part) {
        if (off)
            pause_ms(500);
        sent_all &= send_str(fd, body + off, off + part < blen ? part : blen - off);
    }
    size_t got = 0;
    t0 = now_s();
    while (responses_in(buf, got) < 1 && now_s() - t0 < 5 &&
           !read_some(fd, buf, sizeof buf, &got, 100))
        ;
    CHECK(sent_all && strncmp(buf, "HTTP/1.1 200 ", 13) == 0,
          "a body at a fine rate with 500 ms pauses is served: %.200s", buf);
    close(fd);
    free(body);
}

/* A client that closes halfway through its body never completes it: the connection, and the
 * body's share of --max-body-memory, go back within seconds of its FIN, not at --timeout (the FIN
 * comes after data libmicrohttpd has read, and its edge-triggered poll never saw it). One that
 * half-closes after a whole body gets its reply. */
static void test_body_abandoned(srv_daemon *d)
{
    int port = srv_daemon_port(d);
    char head[256];
    /* bodies that earn minutes of --min-body-rate credit, read in many of libmicrohttpd's reads
     * while other connections' are, then their clients' close */
    enum { SENT = 4 << 20, CLIENTS = 8 };
    char *part = malloc(SENT);
    memset(part, ' ', SENT);
    snprintf(head, sizeof head,
             "POST /v1/layers/x/forward HTTP/1.1\r\nHost: 127.0.0.1\r\n"
             "Content-Type: application/json\r\nContent-Length: 12582912\r\n\r\n");
    bool sent = true;
    for (int i = 0; i < CLIENTS; i++) { /* the close right after the last byte: the FIN comes
                                         * while libmicrohttpd still reads the data */
        int fd = hc_connect(port);
        sent &= send_str(fd, head, strlen(head)) && send_str(fd, part, SENT);
        close(fd);
    }
    free(part);
    CHECK(sent, "the half bodies are sent");
    pause_ms(300);
    double t0 = now_s();
    while (metric(d, "attnd_request_body_bytes") > 0 && now_s() - t0 < IDLE_TIMEOUT - 2)
        pause_ms(50);
    /* cut by the reaper, or seen by libmicrohttpd itself when a FIN came in a read of its own */
    double v = metric(d, "attnd_http_connections_closed_total{reason=\"body_abandoned\"}");
    CHECK(v <= CLIENTS && metric(d, "attnd_request_body_bytes") == 0,
          "the abandoned bodies are let go after %.2f s, before --timeout (%d s): %g cut, %g bytes "
          "held",
          now_s() - t0, IDLE_TIMEOUT, v, metric(d, "attnd_request_body_bytes"));
    printf("  abandoned bodies: let go %.2f s after their clients' close (%g by the reaper)\n",
           now_s() - t0, v);
}

/* The stalled connections hold every slot; the new client is served once the reaper frees them. */
static void test_capacity(void)
{
    srv_options opt;
    hc_options(&opt);
    opt.header_timeout = HEADER_TIMEOUT;
    opt.timeout = IDLE_TIMEOUT;
    opt.max_connections = 16;
    srv_daemon *d = hc_start(&opt);
    if (!CHECK(d != NULL, "daemon with --max-connections 16 starts"))
        return;
    int fds[16];
    for (int i = 0; i < 16; i++) {
        fds[i] = hc_connect(srv_daemon_port(d));
        send_str(fds[i], "GET /healthz HTTP/1.1\r\nHost: 127", 31);
    }
    double t0 = now_s();
    hc_response r;
    hc_request(d, "GET", "/healthz", NULL, NULL, 0, NULL, &r);
    double dt = now_s() - t0;
    CHECK(r.status == 200 && dt < HEADER_TIMEOUT + LATE_S,
          "beside 16 stalled clients (--max-connections 16): status %ld after %.2f s", r.status,
          dt);
    printf("  capacity: a new client served after %.2f s beside 16 stalled ones\n", dt);
    hc_response_free(&r);
    for (int i = 0; i < 16; i++)
        close(fds[i]);
    hc_stop(d);
}

static void test_half_close(srv_daemon *d)
{
    int port = srv_daemon_port(d);
    char post[512];
    snprintf(post, sizeof post,
             "POST /v1/layers/x/forward HTTP/1.1\r\nHost: 127.0.0.1\r\n"
             "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
             strlen(forward_body), forward_body);
    const struct {
        const char *what, *req;
        int responses;
    } cases[] = {
        {"GET", "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 1},
        {"POST", post, 1},
        {"two pipelined GETs",
         "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGET /v1/layers HTTP/1.1\r\nHost: "
         "127.0.0.1\r\n\r\n",
         2},
    };
    enum { N = sizeof cases / sizeof cases[0] };
    int fds[N];
    double t0 = now_s();
    for (int i = 0; i < N; i++) { /* all at once: their closes are awaited together */
        fds[i] = hc_connect(port);
        send_str(fds[i], cases[i].req, strlen(cases[i].req));
        shutdown(fds[i], SHUT_WR);
    }
    char buf[N][8192];
    size_t got[N] = {0};
    double answered[N], closed[N];
    int open_left = N;
    for (int i = 0; i < N; i++)
        answered[i] = closed[i] = -1, buf[i][0] = '\0';
    while (open_left > 0 && now_s() - t0 < IDLE_TIMEOUT - 1) {
        struct pollfd p[N];
        for (int i = 0; i < N; i++)
            p[i] = (struct pollfd){.fd = closed[i] < 0 ? fds[i] : -1, .events = POLLIN};
        poll(p, N, 50);
        for (int i = 0; i < N; i++) {
            if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            if (read_some(fds[i], buf[i], sizeof buf[i], &got[i], 0)) {
                closed[i] = now_s() - t0;
                open_left--;
            }
            if (answered[i] < 0 && responses_in(buf[i], got[i]) >= cases[i].responses)
                answered[i] = now_s() - t0;
        }
    }
    for (int i = 0; i < N; i++) {
        int first = 0;
        sscanf(buf[i], "HTTP/1.1 %d", &first);
        CHECK(first == 200 && answered[i] >= 0 && answered[i] < 1.0,
              "half-closed %s: answered (status %d, %d of %d replies) after %.2f s", cases[i].what,
              first, responses_in(buf[i], got[i]), cases[i].responses, answered[i]);
        CHECK(closed[i] >= 0 && closed[i] < LATE_S + 1,
              "half-closed %s: closed after %.2f s, not at --timeout %d", cases[i].what, closed[i],
              IDLE_TIMEOUT);
        printf("  half-closed %s: answered after %.3f s, closed after %.2f s\n", cases[i].what,
               answered[i], closed[i]);
        close(fds[i]);
    }
}

/* A reply of 12 MB (more than the kernel's send buffer takes, 4 MB at most by default: a reply that
 * fits there is done as far as the daemon is concerned) read 200 bytes every 500 ms (400 bytes/s,
 * through a small receive buffer) is cut off; read at once, it arrives whole. */
static void test_slow_reader(srv_daemon *d)
{
    hc_response r;
    hc_request(d, "PUT", "/v1/layers/big", NULL,
               "{\"config\": {\"embed_dim\": 512, \"num_heads\": 4}, \"init\": {\"seed\": 1}}", -1,
               NULL, &r);
    CHECK(r.status == 201, "create a layer with 12 MB of weights: %ld", r.status);
    hc_response_free(&r);
    hc_request(d, "GET", "/v1/layers/big/weights", NULL, NULL, 0, NULL, &r);
    size_t whole = r.len;
    CHECK(r.status == 200 && whole > 8000000, "a fast reader gets the %zu bytes of weights", whole);
    hc_response_free(&r);

    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small); /* before connect: the window */
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)srv_daemon_port(d)),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (!CHECK(connect(fd, (struct sockaddr *)&a, sizeof a) == 0, "connect: %s", strerror(errno))) {
        close(fd);
        return;
    }
    const char *get = "GET /v1/layers/big/weights HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    send_str(fd, get, strlen(get));
    /* slowly until the daemon counts the cut (or long past when it should), then as fast as
     * possible: what is left is what the client's own receive buffer held when the daemon reset
     * the connection, or, if it did not, the whole rest */
    const char *cut_series = "attnd_http_connections_closed_total{reason=\"reply_too_slow\"}";
    double cuts_before = metric(d, cut_series);
    double t0 = now_s();
    size_t total = 0;
    char chunk[65536];
    bool ended = false;
    while (!ended && now_s() - t0 < HEADER_TIMEOUT + LATE_S + 2 &&
           metric(d, cut_series) == cuts_before) {
        ssize_t n = recv(fd, chunk, 200, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN))
            ended = true;
        total += n > 0 ? (size_t)n : 0;
        pause_ms(500);
    }
    size_t slow_part = total;
    while (!ended && now_s() - t0 < HEADER_TIMEOUT + LATE_S + 6) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        ssize_t n = recv(fd, chunk, sizeof chunk, 0);
        if (n <= 0)
            ended = true;
        total += n > 0 ? (size_t)n : 0;
    }
    CHECK(ended && total < whole / 2,
          "a reply read at 400 bytes/s is cut off: %zu of %zu bytes (%zu read slowly), %s", total,
          whole, slow_part, ended ? "connection reset" : "still open");
    printf("  slow reader: cut off, %zu of %zu bytes got through\n", total, whole);
    close(fd);
}

static void test_keep_alive(srv_daemon *d)
{
    int port = srv_daemon_port(d);
    const char *get = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    char buf[8192];
    size_t got = 0;
    int fd = hc_connect(port);
    /* two pipelined, then idle longer than --header-timeout, then one more */
    char two[256];
    snprintf(two, sizeof two, "%s%s", get, get);
    send_str(fd, two, strlen(two));
    double t0 = now_s();
    int closed = 0;
    while (responses_in(buf, got) < 2 && now_s() - t0 < 5 && !closed)
        closed = read_some(fd, buf, sizeof buf, &got, 100);
    CHECK(responses_in(buf, got) == 2, "two pipelined requests, two replies: %.300s", buf);
    pause_ms((HEADER_TIMEOUT + 1) * 1000); /* idle: under --timeout, not --header-timeout */
    got = 0;
    buf[0] = '\0';
    closed = !send_str(fd, get, strlen(get));
    t0 = now_s();
    while (responses_in(buf, got) < 1 && now_s() - t0 < 5 && !closed)
        closed = read_some(fd, buf, sizeof buf, &got, 100);
    CHECK(responses_in(buf, got) == 1 && strncmp(buf, "HTTP/1.1 200 ", 13) == 0,
          "after %d s idle on a kept-alive connection, the next request is served: %.200s",
          HEADER_TIMEOUT + 1, buf);

    /* the next request trickled on the same connection is cut off like a new one's headers (its
     * first byte is noticed within a second or two, then --header-timeout runs) */
    t0 = now_s();
    send_str(fd, "GET /healthz HTTP/1.1\r\n", 23);
    double cut = trickle_until_closed(fd, "X-Slow: aaaaaaaaaaaaaa\r\n", 100, t0,
                                      HEADER_TIMEOUT + LATE_S + 2, buf, sizeof buf);
    CHECK(cut > 0, "a kept-alive connection trickling its next request: closed after %.2f s", cut);
    printf("  keep-alive: trickled second request cut off after %.2f s\n", cut);
    close(fd);
}

int main(void)
{
    srv_options opt;
    hc_options(&opt);
    opt.header_timeout = HEADER_TIMEOUT;
    opt.min_body_rate = MIN_RATE;
    opt.timeout = IDLE_TIMEOUT;
    srv_daemon *d = hc_start(&opt);
    if (!CHECK(d != NULL, "daemon starts"))
        return check_report();
    hc_response r;
    hc_request(d, "PUT", "/v1/layers/x", NULL,
               "{\"config\": {\"embed_dim\": 8, \"num_heads\": 2}, \"init\": {\"seed\": 7}}", -1,
               NULL, &r);
    CHECK(r.status == 201, "create the layer: %ld %.200s", r.status, r.body);
    hc_response_free(&r);

    test_header_trickle(d);
    test_slow_body(d);
    test_half_close(d);
    test_keep_alive(d);
    test_slow_reader(d);
    test_body_abandoned(d);
    CHECK(healthz_ok(d), "the daemon serves after all of it");
    /* every cut is counted: 3 header timeouts (trickle, silent, kept-alive trickle), 1 slow body
     * (also a 408 of its route), 1 slow reader, up to 3 half-closed */
    double v = metric(d, "attnd_http_connections_closed_total{reason=\"header_timeout\"}");
    CHECK(v == 3, "metrics: %g connections cut for their headers", v);
    v = metric(d, "attnd_http_connections_closed_total{reason=\"body_too_slow\"}");
    CHECK(v == 1, "metrics: %g connections cut for a slow body", v);
    /* libmicrohttpd notices a half-close itself when the FIN comes in a read of its own */
    v = metric(d, "attnd_http_connections_closed_total{reason=\"half_closed\"}");
    CHECK(v >= 0 && v <= 3, "metrics: %g half-closed connections closed (of 3)", v);
    v = metric(d, "attnd_http_connections_closed_total{reason=\"reply_too_slow\"}");
    CHECK(v == 1, "metrics: %g replies cut off for a slow reader", v);
    v = metric(d, "attnd_http_requests_total{method=\"POST\",route=\"/v1/layers/{name}/forward\","
                  "code=\"408\"}");
    CHECK(v == 1, "metrics: %g forward requests answered 408", v);
    v = metric(d, "attnd_http_connections_open");
    CHECK(v >= 1 && v <= 4,
          "metrics: %g connections open (the scrape's own, maybe the last few "
          "clients' whose close is on its way)",
          v);
    hc_stop(d);
    test_capacity();
    return check_report();
}
