/*
 * fuzz_http.c - raw bytes at the daemon: one in-process daemon (port 0, the demo layer, a small
 * body limit) serves every input; each input is sent on a new connection, the write side is shut,
 * and the reply is read until the daemon closes. Whatever the bytes, the daemon must not crash
 * (ASan and UBSan watch its threads too), must never answer 500, and every 1000 inputs /healthz and
 * the demo layer must still answer.
 *
 * Requests are what clients send: a corpus of request lines, headers and bodies for every route
 * (fuzz/corpus/http) to mutate from.
 */
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "api/daemon.h"
#include "app/options.h"

#define FAIL(...) (fprintf(stderr, __VA_ARGS__), fputc('\n', stderr), abort())

static int port;

static size_t exchange(const uint8_t *data, size_t size, char *reply, size_t cap)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) < 0)
        FAIL("cannot connect to the daemon");
    size_t sent = 0;
    while (sent < size) {
        ssize_t w = send(fd, data + sent, size - sent, MSG_NOSIGNAL);
        if (w <= 0)
            break;
        sent += (size_t)w;
    }
    /* libmicrohttpd does not close a connection whose client half-closed it (it waits for the
     * next request, or for the rest of an incomplete one, until --timeout): so the reply is read
     * until a short silence - 200 ms for the first byte, 20 ms after that */
    shutdown(fd, SHUT_WR);
    size_t got = 0;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, got ? 20 : 200) <= 0)
            break;
        char buf[4096];
        ssize_t r = recv(fd, buf, sizeof buf, 0);
        if (r <= 0)
            break;
        size_t n = (size_t)r < cap - 1 - got ? (size_t)r : cap - 1 - got;
        memcpy(reply + got, buf, n);
        got += n;
    }
    reply[got] = '\0';
    close(fd);
    return got;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static srv_daemon *d;
    static unsigned long runs;
    static char reply[1 << 16];
    if (!d) {
        srv_options opt;
        srv_options_default(&opt);
        snprintf(opt.host, sizeof opt.host, "127.0.0.1");
        opt.port = 0;
        opt.threads = 2;
        opt.log_format = SRV_LOG_OFF;
        opt.demo = true;
        opt.max_body_bytes = 1 << 20;
        opt.max_tensor_elements = 1 << 16;
        opt.max_trace_elements = 1 << 16;
        opt.timeout = 2;
        srv_error err = {0};
        d = srv_daemon_start(&opt, &err);
        if (!d)
            FAIL("daemon: %s", err.message);
        port = srv_daemon_port(d);
    }
    exchange(data, size, reply, sizeof reply);
    /* every status line in the reply (pipelined requests give several) */
    for (const char *p = reply; (p = strstr(p, "HTTP/1.")) != NULL; p += 7) {
        int st = 0;
        if (sscanf(p, "HTTP/1.%*d %d", &st) == 1 && st == 500)
            FAIL("500 for:\n%.*s\nreply:\n%.2000s", (int)(size < 2000 ? size : 2000), data, reply);
    }
    if (++runs % 1000 == 0) {
        static const char health[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
        exchange((const uint8_t *)health, sizeof health - 1, reply, sizeof reply);
        if (strncmp(reply, "HTTP/1.1 200", 12) != 0)
            FAIL("/healthz after %lu inputs: %.300s", runs, reply);
        static const char demo[] = "GET /v1/layers/demo HTTP/1.1\r\nHost: x\r\n\r\n";
        exchange((const uint8_t *)demo, sizeof demo - 1, reply, sizeof reply);
        if (strncmp(reply, "HTTP/1.1 200", 12) != 0)
            FAIL("the demo layer is gone after %lu inputs: %.300s", runs, reply);
    }
    return 0;
}
