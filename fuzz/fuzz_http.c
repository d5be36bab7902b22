/*
 * fuzz_http.c - bytes from a client at the whole daemon, in process, thousands of requests a second.
 *
 * One daemon (the demo layer, an API key, two workers) is started with srv_daemon_start_external:
 * libmicrohttpd has no thread and no listening socket; every input is one connection, the server
 * end of a socketpair handed to it, and this thread runs it (srv_http_run) while it writes the
 * request bytes into the other end and reads the replies, then half-closes and runs it until it
 * closes the connection. No timer is waited on, so an exchange costs what the daemon's own work
 * costs. Heavy requests with large bodies go to a worker thread (the connection suspended
 * meanwhile), and large forward bodies are decoded while they arrive (codec/predecode.h), as in
 * the real daemon, except that "large" is 16 KiB here, not 64 KiB and 1 MiB (the fuzz build's
 * -DSRV_OFFLOAD_MIN_BODY, -DSRV_PREDECODE_MIN_BODY): every byte costs about 100 ns under the
 * coverage instrumentation, and a corpus of megabyte bodies ran at 150 exec/s. Requests are cut
 * at 128 KiB. fuzz_predecode feeds the predecoder bodies of megabytes.
 *
 * The input is what a client sends, with escapes so that small inputs make large, well-framed
 * requests (0xFF never appears in a valid request line or header); fuzz_expand.h expands repeats
 * (FF FE r0 r1 l0 l1 <l bytes>) and FF FF (one FF), and the whole input is cut at 128 KiB; marks:
 *   FF FD                     the decimal length of this request's body: the bytes from the end of
 *                             the headers ("\r\n\r\n") after it to the next FF FC or the end, so
 *                             "Content-Length: FF FD" stays right however the body is mutated
 *   FF FC                     the end of a request's body: what comes before it is sent and the
 *                             daemon runs before the rest is sent (a pipelined request follows)
 *   FF FB                     a split: sent and run as at FF FC, but the body goes on (a body that
 *                             arrives in pieces cut at these points)
 *
 * Checks, on every input: the daemon never answers 500 (read from its own counters when a reply
 * mentions 500), closes the connection once the client has half-closed it and every reply is out
 * (10 s at most), and afterwards holds nothing for it: no body bytes against --max-body-memory, no
 * request in flight, no forward slot. Then the layers are put back as they were (demo at its
 * weights, nothing else), so that every input meets the same daemon and a crash reproduces from its
 * input alone. Every 1000 inputs /healthz must answer 200.
 *
 * Seeds (fuzz/corpus/http) are real requests for every route, made by fuzz/seeds.py.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sys/socket.h>

#include "api/daemon.h"
#include "app/options.h"
#include "base/sysinfo.h"
#include "fuzz_expand.h"
#include "fuzz_fail.h"


#define MAX_REQUEST ((size_t)128 << 10) /* expanded input, bytes */
#define MAX_MARKS 64
#define FUZZ_KEY "fuzz-key-0123456789"

static srv_daemon *daemon_;
static srv_http *http;
static srv_app *app;
static srv_layer *demo; /* the demo layer as started: put back after every input */

/* ---------------------------------------------------------------------------------------------- */
/* The input, expanded                                                                            */

typedef struct expanded {
    uint8_t *p;
    size_t len;
    size_t ends[MAX_MARKS]; /* positions in p of FF FC (end) and FF FB (split), in order */
    bool is_end[MAX_MARKS];
    int nends;
} expanded;

/* fuzz_expand's marks: FD a length placeholder (a hole), FC an end, FB a split. */
typedef struct marks {
    expanded *e;
    size_t holes[MAX_MARKS];
    int nholes;
} marks;

static void on_mark(void *ctx, uint8_t kind, size_t pos)
{
    marks *m = ctx;
    if (kind == 0xFD) {
        if (m->nholes < MAX_MARKS)
            m->holes[m->nholes++] = pos;
    } else if (m->e->nends < MAX_MARKS) {
        m->e->is_end[m->e->nends] = kind == 0xFC;
        m->e->ends[m->e->nends++] = pos;
    }
}

/* The input with every escape replaced, into out (valid until the next call). */
static void expand(expanded *out, const uint8_t *d, size_t n)
{
    /* two buffers for the largest input, kept: a fresh 4 MiB for every input would cost more
     * page faults than most exchanges cost in all */
    static uint8_t *first, *second;
    if (!first) {
        first = malloc(MAX_REQUEST);
        second = malloc(MAX_REQUEST + MAX_MARKS * 24);
    }
    expanded a = {0};
    marks m = {.e = &a};
    a.p = first;
    a.len = fuzz_expand(a.p, MAX_REQUEST, d, n, on_mark, &m);
    size_t *holes = m.holes;
    int nholes = m.nholes;

    /* fill the holes: each gets the length of the body after the headers that follow it */
    out->p = second;
    out->len = 0;
    out->nends = 0;
    size_t from = 0;
    int ei = 0;
    for (int h = 0; h <= nholes; h++) {
        size_t upto = h < nholes ? holes[h] : a.len;
        for (; ei < a.nends && a.ends[ei] <= upto; ei++) {
            out->is_end[out->nends] = a.is_end[ei];
            out->ends[out->nends++] = out->len + (a.ends[ei] - from);
        }
        memcpy(out->p + out->len, a.p + from, upto - from);
        out->len += upto - from;
        from = upto;
        if (h == nholes)
            break;
        const uint8_t *hdr_end = memmem(a.p + upto, a.len - upto, "\r\n\r\n", 4);
        size_t body = hdr_end ? (size_t)(hdr_end - a.p) + 4 : a.len, end = a.len;
        for (int k = 0; k < a.nends; k++)
            if (a.is_end[k] && a.ends[k] >= body) {
                end = a.ends[k];
                break;
            }
        out->len += (size_t)sprintf((char *)out->p + out->len, "%zu", end > body ? end - body : 0);
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* One exchange                                                                                   */

typedef struct reply {
    char *p;
    size_t len, cap;
} reply;

/* Reads what the daemon wrote. Returns 1 at EOF (the daemon closed), 0 otherwise. */
static int drain(int fd, reply *r)
{
    for (;;) {
        char buf[65536];
        ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n == 0)
            return 1;
        if (n < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : 1;
        if (r->len + (size_t)n + 1 > r->cap) {
            r->cap = (r->len + (size_t)n + 1) * 2;
            r->p = realloc(r->p, r->cap);
        }
        memcpy(r->p + r->len, buf, (size_t)n);
        r->len += (size_t)n;
        r->p[r->len] = '\0';
    }
}

static void exchange(const expanded *in, reply *r)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        FAIL("socketpair: %s", strerror(errno));
    fcntl(sv[0], F_SETFL, O_NONBLOCK);
    if (srv_http_add_connection(http, sv[1]) != 0)
        FAIL("the daemon refused the connection");
    r->len = 0;
    if (r->p)
        r->p[0] = '\0';
    bool closed = false;
    size_t sent = 0;
    for (int k = 0; k <= in->nends && !closed; k++) {
        size_t upto = k < in->nends ? in->ends[k] : in->len;
        while (sent < upto && !closed) {
            ssize_t w = send(sv[0], in->p + sent, upto - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w > 0)
                sent += (size_t)w;
            else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
                break; /* the daemon closed its end: what is left is not read */
            srv_http_run(http, 0);
            closed = drain(sv[0], r);
        }
        srv_http_run(http, 0);
        closed = closed || drain(sv[0], r);
    }
    /* Every request the daemon can answer is answered before the client half-closes:
     * libmicrohttpd, polled level-triggered as here, reads the FIN of a connection it resumes after
     * a worker ran its request and drops the reply (the daemon's edge-triggered epoll never sees
     * that FIN: a client that half-closes gets its reply there). So the daemon runs until no worker
     * holds a request of it and three runs in a row wrote nothing (a request still waiting for
     * body bytes waits for ever: the half-close ends it). */
    double t0 = srv_now();
    for (int idle = 0; !closed && idle < 3;) {
        size_t before = r->len;
        int busy = srv_http_busy(http);
        if (busy) /* libmicrohttpd's select leaves out a suspended connection and the pipe that
                     wakes it: it would sleep the whole timeout, so the wait is here */
            nanosleep(&(struct timespec){0, 20000}, NULL);
        srv_http_run(http, 0);
        closed = drain(sv[0], r);
        idle = !busy && r->len == before ? idle + 1 : 0;
        if (srv_now() - t0 > 60)
            FAIL("a worker still holds a request after 60 s; reply so far:\n%.2000s",
                 r->p ? r->p : "");
    }
    shutdown(sv[0], SHUT_WR);
    t0 = srv_now();
    while (!closed) {
        srv_http_run(http, 20);
        closed = drain(sv[0], r);
        if (!closed && srv_now() - t0 > 10)
            FAIL("the connection is still open 10 s after the client half-closed it; reply so "
                 "far:\n%.2000s", r->p ? r->p : "");
    }
    close(sv[0]);
    srv_http_run(http, 0);
}

/* ---------------------------------------------------------------------------------------------- */
/* The daemon                                                                                     */

static void start(void)
{
    srv_options opt;
    srv_options_default(&opt);
    opt.port = 0;
    opt.threads = 1;
    opt.blas_threads = 1;
    opt.max_inflight = 2; /* two workers */
    opt.log_format = SRV_LOG_OFF;
    opt.demo = true;
    snprintf(opt.api_key, sizeof opt.api_key, "%s", FUZZ_KEY);
    opt.max_body_bytes = 96 << 10; /* past it: 413, which inputs of 128 KiB reach */
    opt.max_body_memory = 1 << 20;
    opt.max_tensor_elements = 1 << 14;
    opt.max_trace_elements = 1 << 15;
    opt.max_request_flops = 50000000; /* a pass costs 50 MFLOP at most, past it 413 too_costly */
    opt.max_weights_bytes = 1 << 20; /* a few small layers, then 507 */
    opt.header_timeout = 0; /* deadlines run on a clock: this harness has none */
    opt.min_body_rate = 0;
    srv_error err = {0};
    daemon_ = srv_daemon_start_external(&opt, &err);
    if (!daemon_)
        FAIL("daemon: %s", err.message);
    http = srv_daemon_http(daemon_);
    app = srv_daemon_app(daemon_);
    demo = srv_registry_get(app->registry, "demo", NULL);
    if (!demo)
        FAIL("no demo layer");
}

/* Whether the daemon has answered 500 since it started (its own counters). */
static bool answered_500(void)
{
    srv_buf b;
    srv_buf_init(&b);
    srv_metrics_gauges g = {0};
    if (srv_metrics_render(&b, app->metrics, &g) != 0)
        FAIL("metrics: out of memory");
    bool yes = b.data && strstr(b.data, "code=\"500\"");
    srv_buf_free(&b);
    return yes;
}

/* Nothing is held for a closed connection, and the layers are what they were. */
static void check_and_reset(const uint8_t *data, size_t size, const reply *r)
{
    if (r->p && strstr(r->p, "500") && answered_500())
        FAIL("500 for:\n%.*s\nreply:\n%.2000s", (int)(size < 2000 ? size : 2000), data, r->p);
    /* the connection's end (on_completed) may come a run after the client saw it close */
    int64_t held = 0, in_flight = 0;
    int slots = 0;
    for (double t0 = srv_now();;) {
        held = srv_body_budget_held(&app->bodies);
        in_flight = srv_metrics_in_flight(app->metrics);
        pthread_mutex_lock(&app->inflight_lock);
        slots = app->inflight;
        pthread_mutex_unlock(&app->inflight_lock);
        if ((!held && !in_flight && !slots) || srv_now() - t0 > 1)
            break;
        nanosleep(&(struct timespec){0, 50000}, NULL);
        srv_http_run(http, 0);
    }
    if (held != 0)
        FAIL("%lld body bytes still held 1 s after the connection closed", (long long)held);
    if (in_flight != 0)
        FAIL("%lld requests still in flight 1 s after the connection closed", (long long)in_flight);
    if (slots != 0)
        FAIL("%d forward slots still taken 1 s after the connection closed", slots);

    srv_layer **list;
    int n = srv_registry_list(app->registry, &list);
    if (n < 0)
        FAIL("registry: out of memory");
    bool demo_ok = false;
    for (int i = 0; i < n; i++) {
        if (list[i] == demo)
            demo_ok = true;
        else if (strcmp(list[i]->name, "demo") != 0)
            srv_registry_delete(app->registry, list[i]->name, 0, NULL);
    }
    srv_registry_list_free(list, n);
    if (!demo_ok && srv_registry_put(app->registry, demo, 0, NULL, NULL) != 0)
        FAIL("cannot put the demo layer back");
}

/* FUZZ_HTTP_SHOW=1: the status line of every reply goes to stderr (to see where seeds go);
 * FUZZ_HTTP_SHOW=2: the replies (their first 4000 bytes). */
static void show(const reply *r, int verbose)
{
    if (verbose > 1) {
        fprintf(stderr, "%.4000s\n", r->p ? r->p : "");
        return;
    }
    for (const char *p = r->p; p && (p = strstr(p, "HTTP/1.1 ")) != NULL; p += 9) {
        const char *e = strstr(p, "\r\n");
        fprintf(stderr, "  %.*s\n", e ? (int)(e - p) : 40, p);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static unsigned long runs;
    static reply r;
    static int verbose = -1;
    if (!daemon_) {
        start();
        verbose = getenv("FUZZ_HTTP_SHOW") ? atoi(getenv("FUZZ_HTTP_SHOW")) : 0;
    }
    expanded in;
    expand(&in, data, size);
    exchange(&in, &r);
    if (verbose > 0)
        show(&r, verbose);
    check_and_reset(data, size, &r);
    if (++runs % 1000 == 0) {
        static const char health[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
        expanded h = {(uint8_t *)health, sizeof health - 1, {0}, {0}, 0};
        exchange(&h, &r);
        if (!r.p || strncmp(r.p, "HTTP/1.1 200", 12) != 0)
            FAIL("/healthz after %lu inputs: %.300s", runs, r.p ? r.p : "(nothing)");
    }
    return 0;
}
