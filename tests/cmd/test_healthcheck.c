/*
 * test_healthcheck.c - `attnd --healthcheck`'s raw-socket client against scripted peers on loopback.
 *
 * A peer thread listens on 127.0.0.1 port 0, accepts one connection, records the request and answers
 * with a canned reply (or nothing, to exercise the timeout). No fixed ports, no sleeps for readiness:
 * the listening socket exists before the probe starts.
 */
#include "check.h"
#include "cmd/healthcheck.h"
#include "http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct peer {
    int listen_fd;
    int port;
    const char *reply; /* NULL: accept, read, and hold the connection without answering */
    int hold_ms;       /* how long to hold when reply is NULL */
    char request[1024];
    pthread_t thread;
} peer;

static void *peer_main(void *arg)
{
    peer *p = arg;
    int fd = accept(p->listen_fd, NULL, NULL);
    if (fd < 0)
        return NULL;
    size_t got = 0;
    while (got < sizeof p->request - 1 && !strstr(p->request, "\r\n\r\n")) {
        ssize_t r = recv(fd, p->request + got, sizeof p->request - 1 - got, 0);
        if (r <= 0)
            break;
        got += (size_t)r;
        p->request[got] = '\0';
    }
    if (p->reply) {
        ssize_t w = send(fd, p->reply, strlen(p->reply), MSG_NOSIGNAL);
        (void)w;
    } else {
        struct timespec ts = {p->hold_ms / 1000, (long)(p->hold_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL); /* a stalled daemon, not a readiness wait */
    }
    close(fd);
    return NULL;
}

/* Opens a loopback listener on port 0; returns its port, or -1. */
static int listen_any(int *fd_out)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 4) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) < 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    *fd_out = fd;
    return ntohs(a.sin_port);
}

static int peer_start(peer *p, const char *reply, int hold_ms)
{
    memset(p, 0, sizeof *p);
    p->reply = reply;
    p->hold_ms = hold_ms;
    p->port = listen_any(&p->listen_fd);
    if (p->port < 0)
        return -1;
    return pthread_create(&p->thread, NULL, peer_main, p) == 0 ? 0 : -1;
}

static void peer_stop(peer *p)
{
    pthread_join(p->thread, NULL);
    close(p->listen_fd);
}

static long long ms_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int main(void)
{
    char buf[128], msg[512];

    /* Wildcard listen addresses are probed on loopback; real addresses as given. */
    CHECK(!strcmp(srv_healthcheck_target(buf, sizeof buf, "0.0.0.0"), "127.0.0.1"), "0.0.0.0");
    CHECK(!strcmp(srv_healthcheck_target(buf, sizeof buf, NULL), "127.0.0.1"), "NULL host");
    CHECK(!strcmp(srv_healthcheck_target(buf, sizeof buf, ""), "127.0.0.1"), "empty host");
    CHECK(!strcmp(srv_healthcheck_target(buf, sizeof buf, "::"), "::1"), "::");
    CHECK(!strcmp(srv_healthcheck_target(buf, sizeof buf, "[::1]"), "::1"), "[::1]");
    CHECK(!strcmp(srv_healthcheck_target(buf, sizeof buf, "127.0.0.2"), "127.0.0.2"), "literal");

    /* A healthy daemon: 200, and the request is a well-formed GET /healthz. */
    peer p;
    if (CHECK(peer_start(&p, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n", 0) == 0,
              "peer start")) {
        int st = srv_healthcheck("0.0.0.0", p.port, "/healthz", 2000, msg, sizeof msg);
        peer_stop(&p);
        CHECK(st == 200, "healthy peer: status %d (%s)", st, msg);
        CHECK(!strncmp(p.request, "GET /healthz HTTP/1.0\r\n", 23), "request line: %.40s",
              p.request);
        CHECK(strstr(p.request, "\r\nHost: 127.0.0.1:") != NULL, "Host header: %s", p.request);
    }

    /* srv_healthcheck_main's exit status follows the answer: 0 for 200 ... */
    if (CHECK(peer_start(&p, "HTTP/1.0 200 OK\r\n\r\n", 0) == 0, "peer start")) {
        int rc = srv_healthcheck_main("127.0.0.1", p.port);
        peer_stop(&p);
        CHECK(rc == 0, "main on 200 -> exit %d", rc);
    }
    /* ... 1 for a 503 (draining or not ready) ... */
    if (CHECK(peer_start(&p, "HTTP/1.1 503 Service Unavailable\r\n\r\n", 0) == 0, "peer start")) {
        int st = srv_healthcheck("127.0.0.1", p.port, "/healthz", 2000, msg, sizeof msg);
        peer_stop(&p);
        CHECK(st == 503, "503 peer: status %d (%s)", st, msg);
    }
    if (CHECK(peer_start(&p, "HTTP/1.1 503 Service Unavailable\r\n\r\n", 0) == 0, "peer start")) {
        int rc = srv_healthcheck_main("127.0.0.1", p.port);
        peer_stop(&p);
        CHECK(rc == 1, "main on 503 -> exit %d", rc);
    }
    /* ... and -1 for something that is not HTTP. */
    if (CHECK(peer_start(&p, "SSH-2.0-OpenSSH\r\n", 0) == 0, "peer start")) {
        int st = srv_healthcheck("127.0.0.1", p.port, "/healthz", 2000, msg, sizeof msg);
        peer_stop(&p);
        CHECK(st == -1, "garbage peer: status %d (%s)", st, msg);
        CHECK(strstr(msg, "not an HTTP answer") != NULL, "garbage message: %s", msg);
    }

    /* A stalled daemon: the probe gives up at its timeout instead of hanging. */
    if (CHECK(peer_start(&p, NULL, 1500) == 0, "peer start")) {
        long long t0 = ms_now();
        int st = srv_healthcheck("127.0.0.1", p.port, "/healthz", 200, msg, sizeof msg);
        long long took = ms_now() - t0;
        peer_stop(&p);
        CHECK(st == -1, "stalled peer: status %d", st);
        CHECK(took >= 150 && took < 1200, "stalled peer: gave up after %lld ms (timeout 200)", took);
        CHECK(strstr(msg, "timed out") != NULL, "stalled message: %s", msg);
    }

    /* Nothing listening: connection refused, reported as such. */
    int fd;
    int port = listen_any(&fd);
    if (CHECK(port > 0, "free port")) {
        close(fd);
        int st = srv_healthcheck("127.0.0.1", port, "/healthz", 2000, msg, sizeof msg);
        CHECK(st == -1, "closed port: status %d", st);
        CHECK(strstr(msg, "cannot connect") != NULL, "closed port message: %s", msg);
        CHECK(srv_healthcheck_main("127.0.0.1", port) == 1, "main on closed port -> 1");
    }
    CHECK(srv_healthcheck("127.0.0.1", 0, "/healthz", 100, msg, sizeof msg) == -1, "port 0");

    /* The real thing: attnd's own /healthz, daemon in-process on port 0. */
    srv_daemon *d = hc_start(NULL);
    if (CHECK(d != NULL, "daemon starts")) {
        int st = srv_healthcheck("127.0.0.1", srv_daemon_port(d), "/healthz", 3000, msg, sizeof msg);
        CHECK(st == 200, "attnd's /healthz: %d (%s)", st, msg);
        CHECK(srv_healthcheck_main("0.0.0.0", srv_daemon_port(d)) == 0, "--healthcheck exits 0");
        hc_stop(d);
    }
    return check_report();
}
