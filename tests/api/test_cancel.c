/*
 * test_cancel.c - work for a client that has gone stops: against in-process daemons (port 0) on the
 * demo layer (E=64, H=4), with passes of [1, 131072, 64] (4.4e12 FLOPs, --max-request-flops raised
 * for them: about a minute on two Zen 4 cores with the engine's own kernels, so that a request queued
 * behind one finds it still running on a loaded machine and under the sanitizers) whose clients
 * hang up.
 *
 *   - two such passes run at once (--max-inflight 2), their clients close their sockets: both are
 *     counted in attnd_requests_cancelled_total long before they could have finished, their slots
 *     come back (no pass in flight), a small forward is served, and the process is idle afterwards
 *     (almost no CPU time over half a second);
 *   - with one slot (--max-inflight 1): a pass waiting in the worker queue and a small one (which
 *     finds no slot free, so waits on a worker as well) leave at once when their clients hang up,
 *     while the running pass goes on; then it is cancelled too; and with one HTTP thread, that
 *     thread answers /healthz while the small one waits;
 *   - a half-closed HTTP/1.1 client of a long pass (shutdown(SHUT_WR), still reading) is not taken
 *     for gone: it gets the server's "100 Continue" probe, then its 200;
 *   - with one slot and --queue-wait-ms 300, a pass queued behind the running one is answered 503
 *     while that one still runs;
 *   - an HTTP/1.0 client that half-closes is taken for gone (no 1xx may be sent to it).
 * The waits poll the daemon's state (metrics, its slots) with generous bounds; what is checked is
 * what happened, never how fast.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "http_client.h"

#define L_BIG 131072

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A whole HTTP request: a forward of a [1, L, 64] base64 query (malloc'd; *len its length). */
static char *big_request(int L, const char *version, size_t *len)
{
    size_t nbytes = (size_t)L * 64 * 4, b64len = (nbytes + 2) / 3 * 4;
    unsigned char *raw = malloc(nbytes);
    for (size_t i = 0; i < nbytes / 4; i++) {
        float v = (float)((i * 7919) % 2001) / 2000.0f - 0.5f;
        memcpy(raw + 4 * i, &v, 4);
    }
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *body = malloc(b64len + 256), *p = body;
    p += sprintf(p, "{\"query\": {\"shape\": [1, %d, 64], \"dtype\": \"float32\", \"base64\": \"", L);
    for (size_t i = 0; i < nbytes; i += 3) {
        unsigned v = (unsigned)raw[i] << 16 | (i + 1 < nbytes ? (unsigned)raw[i + 1] << 8 : 0) |
                     (i + 2 < nbytes ? raw[i + 2] : 0);
        *p++ = tbl[v >> 18 & 63];
        *p++ = tbl[v >> 12 & 63];
        *p++ = i + 1 < nbytes ? tbl[v >> 6 & 63] : '=';
        *p++ = i + 2 < nbytes ? tbl[v & 63] : '=';
    }
    p += sprintf(p, "\"}}");
    size_t blen = (size_t)(p - body);
    char *req = malloc(blen + 256);
    int hl = sprintf(req, "POST /v1/layers/demo/forward %s\r\nHost: 127.0.0.1\r\n"
                          "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                     version, blen);
    memcpy(req + hl, body, blen);
    *len = (size_t)hl + blen;
    free(raw);
    free(body);
    return req;
}

static const char small_forward[] =
    "{\"query\": [[0,1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9,"
    "0,1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9,0,1,2,3]]}";

/* A metric's value from /metrics (-1 when absent). */
static long long metric(srv_daemon *d, const char *name)
{
    hc_response r;
    long long v = -1;
    char key[128];
    snprintf(key, sizeof key, "\n%s ", name);
    if (hc_request(d, "GET", "/metrics", NULL, NULL, 0, NULL, &r) == 0 && r.status == 200) {
        const char *p = strstr(r.body, key);
        if (p)
            v = atoll(p + strlen(key));
    }
    hc_response_free(&r);
    return v;
}

/* Polls (every 20 ms, at most timeout_s) until metric `name` is `want`. */
static bool wait_metric(srv_daemon *d, const char *name, long long want, double timeout_s)
{
    double t0 = now_s();
    while (metric(d, name) != want && now_s() - t0 < timeout_s)
        sleep_ms(20);
    return metric(d, name) == want;
}

static long long passes_in_flight(srv_daemon *d)
{
    return metric(d, "attnd_forward_passes_running");
}

/* Until the engine has `want` passes running. */
static bool wait_passes(srv_daemon *d, int want, double timeout_s)
{
    return wait_metric(d, "attnd_forward_passes_running", want, timeout_s);
}

/* Polls until attnd_requests_cancelled_total reaches want; returns the seconds it took, or -1. */
static double wait_cancelled(srv_daemon *d, long long want, double timeout_s)
{
    double t0 = now_s();
    while (metric(d, "attnd_requests_cancelled_total") < want && now_s() - t0 < timeout_s)
        sleep_ms(20);
    return metric(d, "attnd_requests_cancelled_total") >= want ? now_s() - t0 : -1;
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec * 1e-6;
}

static srv_daemon *start(int max_inflight, int queue_wait_ms)
{
    srv_options opt;
    hc_options(&opt);
    opt.demo = true;
    opt.threads = 2;
    opt.blas_threads = 2;
    opt.max_inflight = max_inflight;
    opt.queue_wait_ms = queue_wait_ms;
    opt.max_request_flops = INT64_C(10000000000000); /* the big passes' 4.4e12 */
    srv_daemon *d = hc_start(&opt);
    CHECK(d != NULL, "daemon started");
    return d;
}

static int send_request(int port, const char *req, size_t len)
{
    int fd = hc_connect(port);
    CHECK(fd >= 0 && hc_send_all(fd, req, len) == len, "a request of %zu bytes sent", len);
    return fd;
}

/* Sends a small forward (no reply read: it waits) on a connection of its own. */
static int send_small(int port)
{
    char req[512];
    int n = snprintf(req, sizeof req,
                     "POST /v1/layers/demo/forward HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                     strlen(small_forward), small_forward);
    return send_request(port, req, (size_t)n);
}

static void small_served(srv_daemon *d, const char *when)
{
    hc_response r;
    hc_request(d, "POST", "/v1/layers/demo/forward", NULL, small_forward, -1, NULL, &r);
    CHECK(r.status == 200, "a small forward is served %s (%ld)", when, r.status);
    hc_response_free(&r);
}

static void test_two_abandoned(const char *big, size_t big_len)
{
    srv_daemon *d = start(2, 2000);
    if (!d)
        return;
    int port = srv_daemon_port(d);
    int fds[2];
    for (int i = 0; i < 2; i++)
        fds[i] = send_request(port, big, big_len);
    CHECK(wait_passes(d, 2, 120), "both passes run (%lld in flight)", passes_in_flight(d));
    double hung_up = now_s();
    for (int i = 0; i < 2; i++)
        close(fds[i]);
    double took = wait_cancelled(d, 2, 20);
    CHECK(took >= 0, "both abandoned passes are counted as cancelled (after %.2f s; a pass alone "
                     "takes tens of seconds)", took);
    CHECK(wait_passes(d, 0, 20), "their slots are free (%lld in flight)", passes_in_flight(d));
    small_served(d, "after the hang-up");
    printf("  two abandoned passes: cancelled %.3f s after the hang-up, a small forward served "
           "%.3f s after it\n", took, now_s() - hung_up);
    double c0 = cpu_s(), w0 = now_s();
    sleep_ms(500);
    double cpu = cpu_s() - c0, wall = now_s() - w0;
    CHECK(cpu < 0.1, "the process is idle afterwards: %.3f s of CPU in %.2f s", cpu, wall);
    CHECK(metric(d, "attnd_forward_passes_total{kind=\"forward\"}") == 1,
          "only the small pass counts as run");
    hc_stop(d);
}

/* What the daemon and the two waiting clients show when a wait above was not met: the test's
 * metrics and whatever B and C were answered, so that a failure on a loaded machine says why. */
static void explain(srv_daemon *d, int b, int c)
{
    printf("  queued %lld, waiting for a slot %lld, running %lld, cancelled %lld\n",
           metric(d, "attnd_http_requests_queued"), metric(d, "attnd_forward_passes_waiting"),
           passes_in_flight(d), metric(d, "attnd_requests_cancelled_total"));
    const int fds[2] = {b, c};
    for (int i = 0; i < 2; i++) {
        char buf[512];
        ssize_t n = recv(fds[i], buf, sizeof buf - 1, MSG_DONTWAIT);
        buf[n > 0 ? n : 0] = '\0';
        printf("  %c was answered: %s\n", "BC"[i], n > 0 ? buf : "(nothing yet)");
    }
}

/* A daemon of one slot with A's big pass running in it (its fd in *a), and B sent behind it (*b):
 * a body large enough to go to the one worker (past 64 KiB) and small enough to be in at once.
 * NULL when the daemon did not start. */
static srv_daemon *one_slot_busy(int queue_wait_ms, const char *big, size_t big_len, int *a, int *b)
{
    srv_daemon *d = start(1, queue_wait_ms);
    if (!d)
        return NULL;
    int port = srv_daemon_port(d);
    *a = send_request(port, big, big_len);
    CHECK(wait_passes(d, 1, 120), "A's pass runs");
    size_t b_len;
    char *b_req = big_request(2048, "HTTP/1.1", &b_len);
    *b = send_request(port, b_req, b_len);
    free(b_req);
    return d;
}

static void test_queues(const char *big, size_t big_len)
{
    /* B waits for the one worker, C (a small body, on its HTTP thread) for the one slot. C is sent
     * once B is seen queued: C waits for the slot on an HTTP thread, and had B's body shared that
     * thread, B would be read only after A's whole pass (seen under ASan on a loaded machine) */
    int a, b;
    srv_daemon *d = one_slot_busy(60000, big, big_len, &a, &b);
    if (!d)
        return;
    int port = srv_daemon_port(d);
    bool b_queued = CHECK(wait_metric(d, "attnd_http_requests_queued", 1, 120), "B waits for the worker");
    int c = send_small(port);
    /* C finds no slot free: it waits on a worker too, not on its HTTP thread */
    if (!CHECK(wait_metric(d, "attnd_http_requests_queued", 2, 20), "C waits for a worker too") ||
        !b_queued)
        explain(d, b, c);
    close(b);
    close(c);
    CHECK(wait_cancelled(d, 2, 20) >= 0, "B and C (queued) leave at once");
    CHECK(metric(d, "attnd_http_requests_queued") == 0 &&
              metric(d, "attnd_forward_passes_waiting") == 0,
          "nothing waits any more");
    CHECK(passes_in_flight(d) == 1, "while A's pass goes on");
    close(a);
    CHECK(wait_cancelled(d, 3, 20) >= 0, "then A's pass is cancelled too");
    CHECK(wait_passes(d, 0, 20), "the slot is free");
    small_served(d, "");
    hc_stop(d);
}

/* A small pass that finds every slot taken waits for one on a worker, never on its HTTP thread:
 * with one HTTP thread, one slot held by A's long pass and C (a small forward) waiting, the thread
 * still answers /healthz (it used to sit in C's wait for up to --queue-wait-ms, every connection it
 * polls with it: probes timed out on a loaded daemon). What is checked is that the probe is answered
 * while A runs and C waits, with a generous bound, never how fast. */
static void test_small_waits_off_thread(const char *big, size_t big_len)
{
    srv_options opt;
    hc_options(&opt);
    opt.demo = true;
    opt.threads = 1;
    opt.blas_threads = 2;
    opt.max_inflight = 1;
    opt.queue_wait_ms = 60000;
    opt.max_request_flops = INT64_C(10000000000000);
    srv_daemon *d = hc_start(&opt);
    if (!CHECK(d != NULL, "daemon with one HTTP thread started"))
        return;
    int port = srv_daemon_port(d);
    int a = send_request(port, big, big_len);
    CHECK(wait_passes(d, 1, 120), "A's pass runs");
    int c = send_small(port);
    CHECK(wait_metric(d, "attnd_http_requests_queued", 1, 20), "C waits for the worker");
    static const char probe[] = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    char reply[512];
    int st = hc_raw(port, probe, sizeof probe - 1, 20000, reply, sizeof reply);
    struct pollfd pc = {.fd = c, .events = POLLIN};
    CHECK(st == 200 && poll(&pc, 1, 0) == 0,
          "the one HTTP thread answers /healthz while C waits, unanswered (%d)", st);
    CHECK(passes_in_flight(d) == 1 && metric(d, "attnd_http_requests_queued") == 1,
          "while A's pass goes on and C still waits");
    /* C first, while A still holds the one worker (else the worker, freed by A, could take C
     * before C's hang-up is seen, and run it) */
    close(c);
    CHECK(wait_cancelled(d, 1, 20) >= 0 && wait_metric(d, "attnd_http_requests_queued", 0, 20),
          "C leaves the queue when its client hangs up");
    close(a);
    CHECK(wait_cancelled(d, 2, 20) >= 0, "then A's pass is cancelled");
    CHECK(wait_passes(d, 0, 20), "the slot is free");
    small_served(d, "after them");
    hc_stop(d);
}

/* --queue-wait-ms is kept while every worker is busy: with one slot held by A's minute-long pass, B
 * (queued for the worker) is answered 503 while A's pass still runs, not once it ends (the refusal
 * was decided only when a worker took B: a wait of 300 ms became A's whole pass). What is checked
 * is the order (B answered, A still running), with a generous bound, never how fast. */
static void test_queue_deadline(const char *big, size_t big_len)
{
    int a, b;
    srv_daemon *d = one_slot_busy(300, big, big_len, &a, &b);
    if (!d)
        return;
    char buf[1024] = "";
    ssize_t n = 0;
    for (double t0 = now_s(); n <= 0 && now_s() - t0 < 30;) {
        struct pollfd pf = {.fd = b, .events = POLLIN};
        if (poll(&pf, 1, 50) > 0)
            n = recv(b, buf, sizeof buf - 1, 0);
    }
    buf[n > 0 ? n : 0] = '\0';
    CHECK(n > 0 && strstr(buf, " 503 ") && strstr(buf, "busy: waited"),
          "B, queued behind A, is answered 503 at its wait: %.200s", n > 0 ? buf : "(nothing in 30 s)");
    CHECK(passes_in_flight(d) == 1, "while A's pass goes on");
    close(b);
    close(a);
    CHECK(wait_cancelled(d, 1, 20) >= 0, "then A's pass is cancelled");
    CHECK(wait_passes(d, 0, 20), "the slot is free");
    small_served(d, "after the refusal");
    hc_stop(d);
}

/* An HTTP/1.1 client that half-closes and keeps reading gets its reply (after the probe); an
 * HTTP/1.0 one is taken for gone. A [1, 8192, 64] pass: long enough to be looked at. */
static void test_half_close(void)
{
    srv_daemon *d = start(2, 2000);
    if (!d)
        return;
    int port = srv_daemon_port(d);
    size_t len;
    char *req = big_request(8192, "HTTP/1.1", &len);
    int fd = send_request(port, req, len);
    free(req);
    shutdown(fd, SHUT_WR);
    char buf[4096];
    size_t got = 0;
    ssize_t k;
    while (got + 1 < sizeof buf && (k = read(fd, buf + got, sizeof buf - 1 - got)) > 0)
        got += (size_t)k;
    buf[got] = '\0';
    close(fd);
    const char *final = strstr(buf, "HTTP/1.1 200");
    CHECK(final && (final == buf || !strncmp(buf, "HTTP/1.1 100 Continue\r\n\r\n", 25)),
          "a half-closed HTTP/1.1 client still reading gets its 200 (after a 100 Continue if it was "
          "probed): %.80s", buf);
    CHECK(metric(d, "attnd_requests_cancelled_total") == 0, "and is not counted as cancelled");

    req = big_request(L_BIG, "HTTP/1.0", &len);
    fd = send_request(port, req, len);
    free(req);
    CHECK(wait_passes(d, 1, 120), "an HTTP/1.0 pass runs");
    shutdown(fd, SHUT_WR);
    CHECK(wait_cancelled(d, 1, 20) >= 0, "an HTTP/1.0 client's FIN is taken for gone");
    got = 0;
    while (got + 1 < sizeof buf && (k = read(fd, buf + got, sizeof buf - 1 - got)) > 0)
        got += (size_t)k;
    CHECK(got == 0, "and gets no reply, the connection closed (%zu bytes)", got);
    close(fd);
    hc_stop(d);
}

int main(void)
{
    size_t big_len;
    char *big = big_request(L_BIG, "HTTP/1.1", &big_len);
    test_two_abandoned(big, big_len);
    test_queues(big, big_len);
    test_small_waits_off_thread(big, big_len);
    test_queue_deadline(big, big_len);
    test_half_close();
    free(big);
    return check_report();
}
