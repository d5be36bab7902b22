/*
 * test_startup.c - what attnd does at start, seen from outside as a process: a port another process
 * holds is an error (exit status, message naming the address) and the daemon holding it keeps
 * serving every request; a restart binds the port its predecessor just left; a bad option value is
 * exit status 2 with a message naming it.
 *
 * The daemons run as child processes (tests/support/child.h) on ports the kernel picks; traffic
 * goes to 127.0.0.1 only.
 */
#include "check.h"
#include "child.h"
#include "http_client.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Two daemons on one port: the second exits within a second naming the address, nothing of it is
 * served, and the first answers every request, a layer PUT to it included. */
static void test_busy_port(void)
{
    ch_child a, b;
    const char *args_a[] = {"--port", "0", "--threads", "2", NULL};
    int started = ch_start(&a, args_a, NULL, 20000);
    if (!CHECK(started == 0, "the first daemon starts: %s", a.err)) {
        ch_free(&a);
        return;
    }
    char port[16], want[96];
    snprintf(port, sizeof port, "%d", a.port);
    snprintf(want, sizeof want, "address 127.0.0.1:%d is already in use", a.port);

    hc_response r;
    hc_request_port(a.port, "PUT", "/v1/layers/x", NULL,
                    "{\"config\": {\"embed_dim\": 4, \"num_heads\": 2}}", -1, NULL, &r);
    CHECK(r.status == 201, "PUT x to the first daemon: %ld", r.status);
    hc_response_free(&r);

    const char *args_b[] = {"--port", port, "--threads", "2", NULL};
    double t0 = now_ms();
    started = ch_start(&b, args_b, NULL, 5000);
    double took = now_ms() - t0;
    CHECK(started == 1, "the second daemon on port %s does not start (%d): %s", port, started,
          b.err);
    CHECK(b.status != 0 && b.status != -1 && b.status < 128, "it exits with a status, not 0 (%d)",
          b.status);
    CHECK(took < 1000, "it exits within a second (%.0f ms)", took);
    CHECK(strstr(b.err, want) != NULL, "its message names the address: '%s' in %s", want, b.err);
    CHECK(strstr(b.err, "listening on") == NULL, "it never says it listens");
    ch_free(&b);

    /* every request reaches the first daemon: each on a new connection, as a new client would */
    int ok = 0;
    for (int i = 0; i < 40; i++) {
        hc_request_port(a.port, "GET", "/v1/layers/x", NULL, NULL, 0, NULL, &r);
        ok += r.status == 200;
        hc_response_free(&r);
    }
    CHECK(ok == 40, "the first daemon answers all 40 GETs of its layer (%d)", ok);
    CHECK(ch_stop(&a, 10000) == 0, "the first daemon stops cleanly (exit %d)", a.status);
    ch_free(&a);
}

/* In process, the same refusal with the same words; and a daemon started on the port another one
 * just left (its connections in TIME_WAIT) binds it: only a listening port is busy. */
static void test_restart_same_port(void)
{
    srv_options opt;
    hc_options(&opt);
    srv_daemon *d = hc_start(&opt);
    if (!CHECK(d != NULL, "daemon starts"))
        return;
    int port = srv_daemon_port(d);
    srv_options again = opt;
    again.port = port;
    srv_error err = {0};
    srv_daemon *twin = srv_daemon_start(&again, &err);
    char want[96];
    snprintf(want, sizeof want, "address 127.0.0.1:%d is already in use", port);
    CHECK(twin == NULL && strstr(err.message, want), "a second daemon on the port is refused: %s",
          err.message);
    if (twin)
        srv_daemon_stop(twin);

    hc_response r;
    for (int i = 0; i < 5; i++) { /* connections the daemon closes as it stops: TIME_WAIT */
        hc_request(d, "GET", "/healthz", NULL, NULL, 0, NULL, &r);
        hc_response_free(&r);
    }
    hc_stop(d);
    srv_daemon *next = hc_start(&again);
    CHECK(next != NULL, "a daemon started on port %d right after the first stopped binds it", port);
    if (next) {
        hc_request(next, "GET", "/healthz", NULL, NULL, 0, NULL, &r);
        CHECK(r.status == 200, "and answers: %ld", r.status);
        hc_response_free(&r);
    }
    hc_stop(next);
}

/* A bad option value stops attnd before it starts, with status 2 and a message naming the flag (or
 * its twin) and what it takes; --help prints every flag on stdout with status 0. */
static void test_bad_options(void)
{
    static const struct {
        const char *arg, *env, *says;
    } bad[] = {
        {"--max-body-bytes=64X", NULL, "--max-body-bytes: '64X' is not a size in bytes"},
        {"--timeout=5m", NULL, "--timeout: '5m' is not whole seconds"},
        {"--port=http", NULL, "--port: 'http' is not a whole number, from 0 to 65535"},
        {"--port=99999", NULL,
         "--port: '99999' is out of range: it takes a whole number, from 0 to 65535"},
        {NULL, "ATTND_MAX_TRACE_ELEMENTS=lots", "ATTND_MAX_TRACE_ELEMENTS: 'lots' is not a whole"},
        {NULL, "ATTND_QUEUE_WAIT_MS=1.5s", "ATTND_QUEUE_WAIT_MS: '1.5s' is not milliseconds"},
        {"--no-such-flag", NULL, "unknown flag '--no-such-flag'"},
        /* a name or address that does not resolve is a bad value of --host too */
        {"--host=999.1.1.1", NULL, "--host (ATTND_HOST): cannot use host '999.1.1.1'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ch_child c;
        const char *args[] = {"--port", "0", bad[i].arg, NULL};
        const char *env[] = {bad[i].env, NULL};
        int rc = ch_run(&c, args, env, 10000);
        CHECK(rc == 0 && c.status == 2, "%s: exit status 2 (%d)",
              bad[i].arg ? bad[i].arg : bad[i].env, c.status);
        CHECK(strstr(c.err, bad[i].says) != NULL, "%s: says '%s': %s",
              bad[i].arg ? bad[i].arg : bad[i].env, bad[i].says, c.err);
        CHECK(strstr(c.err, "listening") == NULL, "and never listens");
        ch_free(&c);
    }
    ch_child c;
    const char *env[] = {"ATTND_MAX_BODY_BYTES=64M", "ATTND_TIMEOUT=45s", NULL};
    const char *args[] = {"--port", "0", "--queue-wait-ms", "2s", NULL};
    int started = ch_start(&c, args, env, 20000);
    CHECK(started == 0, "suffixed values in flags and twins start the daemon: %s", c.err);
    ch_free(&c);

    /* set but empty is unset, for every twin and ATTND_ISA (compose's ${ATTND_PORT:-}) */
    const char *empty[] = {"ATTND_ISA=", "ATTND_PORT=", "ATTND_MAX_BODY_BYTES=", NULL};
    started = ch_start(&c, args, empty, 20000);
    CHECK(started == 0, "empty ATTND_ISA, ATTND_PORT, ATTND_MAX_BODY_BYTES start the daemon: %s",
          c.err);
    ch_free(&c);

    const char *help[] = {"--help", NULL};
    int rc = ch_run(&c, help, NULL, 10000);
    CHECK(rc == 0 && c.status == 0 && strstr(c.out, "--max-body-bytes SIZE") &&
              strstr(c.out, "default: 256M"),
          "--help: status 0 (%d), the flags on stdout", c.status);
    ch_free(&c);
    /* --help and --version answer whatever the environment holds */
    const char *broken[] = {"ATTND_PORT=abc", "ATTND_ISA=avx3", NULL};
    rc = ch_run(&c, help, broken, 10000);
    CHECK(rc == 0 && c.status == 0 && strstr(c.out, "--max-body-bytes SIZE"),
          "--help beside a malformed ATTND_PORT: status 0 (%d %s)", c.status, c.err);
    ch_free(&c);
    /* a flag's value is no flag: "--log-format --help" is a bad --log-format, not --help */
    const char *valued[] = {"--port", "0", "--log-format", "--help", NULL};
    rc = ch_run(&c, valued, NULL, 10000);
    CHECK(rc == 0 && c.status == 2 && strstr(c.err, "--log-format"),
          "--log-format --help: a bad --log-format, status 2 (%d %s)", c.status, c.err);
    ch_free(&c);
    const char *version[] = {"--version", NULL};
    rc = ch_run(&c, version, broken, 10000);
    CHECK(rc == 0 && c.status == 0 && strncmp(c.out, "attnd ", 6) == 0,
          "--version beside a malformed ATTND_PORT: status 0 (%d %s)", c.status, c.out);
    ch_free(&c);
}

int main(void)
{
    test_bad_options();
    test_busy_port();
    test_restart_same_port();
    return check_report();
}
