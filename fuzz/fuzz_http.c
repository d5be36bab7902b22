/*
 * fuzz_http.c - bytes from a client at the whole daemon, in process, thousands of requests a second.
 *
 * One daemon (the demo layer, an API key, 4 MiB bodies, two workers) is started with
 * srv_daemon_start_external: libmicrohttpd has no thread and no listening socket; every input is
 * one connection, the server end of a socketpair handed to it, and this thread runs it
 * (srv_http_run) while it writes the request bytes into the other end and reads the replies, then
 * half-closes and runs it until it closes the connection. No timer is waited on, so an exchange
 * costs what the daemon's own work costs. Heavy requests with bodies of 64 KiB and more still go to
 * a worker thread (the connection suspended meanwhile), and forward bodies of 1 MiB and more are
 * decoded while they arrive (codec/predecode.h), as in the real daemon.
 *
 * The input is what a client sends, with three escapes so that small inputs make large, well-framed
 * requests (0xFF never appears in a valid request line or header, and seeds avoid it in bodies):
 *   FF FE c l0 l1 <l bytes>   those l bytes repeated 1 + 16*c*c times (c = 255: a million copies;
 *                             the whole input is cut at 4 MiB)
 *   FF FD                     the decimal length of this request's body: the bytes from the end of
 *                             the headers ("\r\n\r\n") after it to the next FF FC or the end, so
 *                             "Content-Length: FF FD" stays right however the body is mutated
 *   FF FC                     the end of a request's body: what comes before it is sent and the
 *                             daemon runs before the rest is sent (a pipelined next request, or
 *                             the same body split at another point)
 *
 * Checks, on every input: the daemon never answers 500 (read from its own counters when a reply
 * mentions 500), closes the connection once the client has half-closed it and every reply is out
 * (10 s at most), and afterwards holds nothing for it: no body bytes against --max-body-memory, no
 * request in flight, no forward slot. Then the layers are put back as they were (demo at its
 * weights, nothing else), so that every input meets the same daemon and a crash reproduces from its
 * input alone. Every 1000 inputs /healthz must answer 200.
 *
 * Seeds (fuzz/corpus/http) are real requests for every route: scripts in fuzz/corpus/README.md.
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

#define FAIL(...) (fprintf(stderr, __VA_ARGS__), fputc('\n', stderr), abort())

#define MAX_REQUEST ((size_t)4 << 20) /* expanded input, bytes */
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
    size_t ends[MAX_MARKS]; /* positions in p of FF FC */
    int nends;
} expanded;

static void put(expanded *e, const uint8_t *s, size_t n)
{
    if (n > MAX_REQUEST - e->len)
        n = MAX_REQUEST - e->len;
    memcpy(e->p + e->len, s, n);
    e->len += n;
}

/* Expands the repeats and ends; *holes gets the positions of the length placeholders. */
static void expand_pass1(expanded *e, const uint8_t *d, size_t n, size_t *holes, int *nholes)
{
    *nholes = 0;
    for (size_t i = 0; i < n;) {
        if (d[i] == 0xFF && i + 1 < n && d[i + 1] == 0xFE && i + 5 <= n) {
            unsigned c = d[i + 2];
            size_t l = (size_t)d[i + 3] | (size_t)d[i + 4] << 8;
            i += 5;
            if (l > n - i)
                l = n - i;
            size_t reps = 1 + 16 * (size_t)c * c;
            for (size_t r = 0; r < reps && l && e->len < MAX_REQUEST; r++)
                put(e, d + i, l);
            i += l;
        } else if (d[i] == 0xFF && i + 1 < n && d[i + 1] == 0xFD) {
            if (*nholes < MAX_MARKS)
                holes[(*nholes)++] = e->len;
            i += 2;
        } else if (d[i] == 0xFF && i + 1 < n && d[i + 1] == 0xFC) {
            if (e->nends < MAX_MARKS)
                e->ends[e->nends++] = e->len;
            i += 2;
        } else {
            put(e, d + i, 1);
            i++;
        }
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
    size_t holes[MAX_MARKS];
    int nholes;
    a.p = first;
    expand_pass1(&a, d, n, holes, &nholes);

    /* fill the holes: each gets the length of the body after the headers that follow it */
    out->p = second;
    out->len = 0;
    out->nends = 0;
    size_t from = 0;
    int ei = 0;
    for (int h = 0; h <= nholes; h++) {
        size_t upto = h < nholes ? holes[h] : a.len;
        for (; ei < a.nends && a.ends[ei] <= upto; ei++)
            out->ends[out->nends++] = out->len + (a.ends[ei] - from);
        memcpy(out->p + out->len, a.p + from, upto - from);
        out->len += upto - from;
        from = upto;
        if (h == nholes)
            break;
        const uint8_t *hdr_end = memmem(a.p + upto, a.len - upto, "\r\n\r\n", 4);
        size_t body = hdr_end ? (size_t)(hdr_end - a.p) + 4 : a.len, end = a.len;
        for (int k = 0; k < a.nends; k++)
            if (a.ends[k] >= body) {
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
    shutdown(sv[0], SHUT_WR);
    double t0 = srv_now();
    while (!closed) {
        srv_http_run(http, 20);
        closed = drain(sv[0], r);
        if (!closed && srv_now() - t0 > 10)
            FAIL("the connection is still open 10 s after the client half-closed it; reply so "
                 "far:\n%.2000s", r->p ? r->p : "");
    }
    close(sv[0]);
    /* a connection is cleaned up by the run after the one that closed it */
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
    opt.max_body_bytes = 4 << 20;
    opt.max_body_memory = 16 << 20;
    opt.max_tensor_elements = 1 << 18;
    opt.max_trace_elements = 1 << 18;
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
    int64_t held = srv_body_budget_held(&app->bodies);
    if (held != 0)
        FAIL("%lld body bytes still held after the connection closed", (long long)held);
    int64_t in_flight = srv_metrics_in_flight(app->metrics);
    if (in_flight != 0)
        FAIL("%lld requests still in flight after the connection closed", (long long)in_flight);
    pthread_mutex_lock(&app->inflight_lock);
    int slots = app->inflight;
    pthread_mutex_unlock(&app->inflight_lock);
    if (slots != 0)
        FAIL("%d forward slots still taken after the connection closed", slots);

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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static unsigned long runs;
    static reply r;
    if (!daemon_)
        start();
    expanded in;
    expand(&in, data, size);
    exchange(&in, &r);
    check_and_reset(data, size, &r);
    if (++runs % 1000 == 0) {
        static const char health[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
        expanded h = {(uint8_t *)health, sizeof health - 1, {0}, 0};
        exchange(&h, &r);
        if (!r.p || strncmp(r.p, "HTTP/1.1 200", 12) != 0)
            FAIL("/healthz after %lu inputs: %.300s", runs, r.p ? r.p : "(nothing)");
    }
    return 0;
}
