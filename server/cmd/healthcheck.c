/*
 * healthcheck.c - a tiny raw-socket HTTP/1.0 client for `attnd --healthcheck` (see healthcheck.h).
 *
 * Deliberately minimal: one GET, "Connection: close", read until the end of the status line, parse
 * "HTTP/1.x NNN". libcurl would do it in three lines, but it is a test-only dependency and the runtime
 * image must stay without it; this is the whole client a HEALTHCHECK needs. Every step (resolve, connect,
 * send, receive) runs against one monotonic deadline, so a stalled daemon makes the probe fail, not hang.
 */
#include "healthcheck.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits for `events` on fd until the deadline. Returns 0 when ready, -1 on timeout or error. */
static int wait_fd(int fd, short events, long long deadline)
{
    for (;;) {
        long long left = deadline - now_ms();
        if (left <= 0)
            return -1;
        struct pollfd p = {.fd = fd, .events = events};
        int r = poll(&p, 1, (int)left);
        if (r > 0)
            return 0;
        if (r == 0)
            return -1;
        if (errno != EINTR)
            return -1;
    }
}

static void set_msg(char *msg, size_t msg_size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_msg(char *msg, size_t msg_size, const char *fmt, ...)
{
    if (!msg || !msg_size)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, msg_size, fmt, ap);
    va_end(ap);
}

const char *srv_healthcheck_target(char *out, size_t out_size, const char *host)
{
    if (!host || !*host || !strcmp(host, "0.0.0.0") || !strcmp(host, "*"))
        return "127.0.0.1";
    if (!strcmp(host, "::") || !strcmp(host, "[::]"))
        return "::1";
    size_t n = strlen(host);
    if (host[0] == '[' && n >= 2 && host[n - 1] == ']' && n - 2 < out_size) {
        memcpy(out, host + 1, n - 2);
        out[n - 2] = '\0';
        return out;
    }
    return host;
}

/* Connects to one resolved address before the deadline. Returns the socket or -1. */
static int dial(const struct addrinfo *ai, long long deadline)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0)
        return -1;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
        return fd;
    if (errno != EINPROGRESS || wait_fd(fd, POLLOUT, deadline) < 0)
        goto fail;
    int soerr = 0;
    socklen_t len = sizeof soerr;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0 || soerr != 0) {
        errno = soerr ? soerr : errno;
        goto fail;
    }
    return fd;
fail:;
    int saved = errno;
    close(fd);
    errno = saved;
    return -1;
}

int srv_healthcheck(const char *host, int port, const char *path, int timeout_ms, char *msg,
                    size_t msg_size)
{
    char hostbuf[256];
    const char *target = srv_healthcheck_target(hostbuf, sizeof hostbuf, host);
    long long deadline = now_ms() + (timeout_ms > 0 ? timeout_ms : 1);
    if (port <= 0 || port > 65535) {
        set_msg(msg, msg_size, "healthcheck: %s:%d: invalid port", target, port);
        return -1;
    }

    char service[16];
    snprintf(service, sizeof service, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(target, service, &hints, &res);
    if (gai != 0) {
        set_msg(msg, msg_size, "healthcheck: cannot resolve %s (port %d): %s", target, port,
                gai_strerror(gai));
        return -1;
    }
    int fd = -1;
    int last_errno = ETIMEDOUT;
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = dial(ai, deadline);
        if (fd < 0)
            last_errno = errno ? errno : ETIMEDOUT;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        set_msg(msg, msg_size, "healthcheck: cannot connect to %s:%d: %s", target, port,
                strerror(last_errno));
        return -1;
    }

    char req[512];
    int bracket = strchr(target, ':') != NULL; /* IPv6 literal in the Host header */
    int n = snprintf(req, sizeof req,
                     "GET %s HTTP/1.0\r\nHost: %s%s%s:%d\r\nUser-Agent: attnd-healthcheck\r\n"
                     "Connection: close\r\n\r\n",
                     path, bracket ? "[" : "", target, bracket ? "]" : "", port);
    int status = -1;
    if (n < 0 || (size_t)n >= sizeof req) {
        set_msg(msg, msg_size, "healthcheck: %s:%d: path too long", target, port);
        goto out;
    }
    for (int off = 0; off < n;) {
        if (wait_fd(fd, POLLOUT, deadline) < 0) {
            set_msg(msg, msg_size, "healthcheck: %s:%d: %s", target, port, "timed out sending");
            goto out;
        }
        ssize_t w = send(fd, req + off, (size_t)(n - off), MSG_NOSIGNAL);
        if (w < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (w <= 0) {
            set_msg(msg, msg_size, "healthcheck: %s:%d: send failed: %s", target, port,
                    strerror(errno));
            goto out;
        }
        off += (int)w;
    }

    /* Read until the status line is complete (the rest of the answer does not matter). */
    char line[256];
    size_t got = 0;
    while (got < sizeof line - 1 && !memchr(line, '\n', got)) {
        if (wait_fd(fd, POLLIN, deadline) < 0) {
            set_msg(msg, msg_size, "healthcheck: %s:%d: %s", target, port,
                    "timed out waiting for the answer");
            goto out;
        }
        ssize_t r = recv(fd, line + got, sizeof line - 1 - got, 0);
        if (r < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    line[got] = '\0';
    char *eol = strpbrk(line, "\r\n");
    if (eol)
        *eol = '\0';
    int code = 0, consumed = 0;
    if (sscanf(line, "HTTP/1.%*1[01] %3d%n", &code, &consumed) == 1 && consumed >= 12 &&
        code >= 100 && code <= 599) {
        status = code;
        set_msg(msg, msg_size, "healthcheck: %s:%d: %s", target, port, line);
    } else {
        set_msg(msg, msg_size, "healthcheck: %s:%d: not an HTTP answer: \"%.80s\"", target, port,
                line);
    }
out:
    close(fd);
    return status;
}

int srv_healthcheck_main(const char *host, int port)
{
    char msg[512];
    int status = srv_healthcheck(host, port, "/healthz", 3000, msg, sizeof msg);
    if (status == 200)
        return 0;
    if (status > 0)
        fprintf(stderr, "%s (want 200)\n", msg);
    else
        fprintf(stderr, "%s\n", msg);
    return 1;
}
