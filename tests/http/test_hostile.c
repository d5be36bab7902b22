/*
 * test_hostile.c - clients that misbehave, on purpose, against an in-process daemon (port 0).
 *
 * Slow and stalled clients (headers trickled byte by byte, a body that never comes) must not keep
 * other clients from being served; oversized headers, lying Content-Lengths, chunked bodies past
 * the limit, pipelining, a crowd over the in-flight cap, invalid UTF-8, deep nesting, 100k keys,
 * extreme numbers and hostile layer names each get a clear answer (or a closed connection), never
 * a crash. Afterwards every layer must still give the same numbers, bit for bit, and /healthz 200.
 * Timing bounds are generous (seconds): they catch a blocked daemon, not a slow machine.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "http_client.h"
#include "tensor_json.h"

#define GENEROUS_S 5.0 /* a request that takes longer than this while others misbehave is blocked */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Reads into buf (NUL-terminated, at most cap-1 bytes) until the peer closes, `responses` status
 * lines have been seen with their bodies complete (Content-Length), or timeout_ms pass without
 * data. Returns bytes read. */
static size_t read_replies(int fd, char *buf, size_t cap, int responses, int timeout_ms)
{
    size_t got = 0;
    buf[0] = '\0';
    for (;;) {
        /* complete? count whole responses (headers + Content-Length bytes of body) */
        int whole = 0;
        const char *p = buf;
        while (whole < responses) {
            const char *h = strstr(p, "HTTP/1.1 ");
            const char *e = h ? strstr(h, "\r\n\r\n") : NULL;
            if (!e)
                break;
            const char *cl = strcasestr(h, "\r\nContent-Length:");
            size_t blen = cl && cl < e ? strtoul(cl + 17, NULL, 10) : 0;
            if ((size_t)(e + 4 - buf) + blen > got)
                break;
            p = e + 4 + blen;
            whole++;
        }
        if (whole >= responses || got + 1 >= cap)
            break;
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, timeout_ms) <= 0)
            break;
        ssize_t r = recv(fd, buf + got, cap - 1 - got, 0);
        if (r <= 0)
            break;
        got += (size_t)r;
        buf[got] = '\0';
    }
    return got;
}

static int status_of(const char *reply)
{
    int st = 0;
    return sscanf(reply, "HTTP/1.%*d %d", &st) == 1 ? st : 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* The layers whose numbers must survive everything                                               */

typedef struct layer_case {
    const char *name;
    const char *put;     /* PUT body */
    const char *forward; /* forward body (base64 output: exact bits) */
    char *baseline;      /* the output's base64 text before the abuse */
} layer_case;

static layer_case layers[] = {
    {"plain", "{\"config\": {\"embed_dim\": 8, \"num_heads\": 2}, \"init\": {\"seed\": 7}}",
     "{\"query\": [[0.5,-1,2,0.25,0,1,-0.5,3],[1,1,1,1,-1,-1,-1,-1]], \"need_weights\": true, "
     "\"encoding\": \"base64\"}",
     NULL},
    {"cross", "{\"config\": {\"embed_dim\": 4, \"num_heads\": 1, \"kdim\": 3, \"vdim\": 2, "
              "\"add_bias_kv\": true, \"add_zero_attn\": true}, \"init\": {\"seed\": 3}}",
     "{\"query\": [[[1,2,3,4]]], \"key\": [[[1,0,1],[0,1,0]]], \"value\": [[[2,1],[0.5,-1]]], "
     "\"key_padding_mask\": [[false,true]], \"encoding\": \"base64\"}",
     NULL},
};
#define NLAYERS (sizeof layers / sizeof layers[0])

/* The "output" member's base64 text of a forward reply (malloc'd), or NULL. */
static char *output_b64(srv_daemon *d, const layer_case *lc)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/layers/%s/forward", lc->name);
    hc_response r;
    hc_request(d, "POST", path, NULL, lc->forward, -1, NULL, &r);
    char *out = NULL;
    json_t *doc = r.status == 200 ? hc_json(&r) : NULL;
    const char *b = json_string_value(json_object_get(json_object_get(doc, "output"), "base64"));
    if (b)
        out = strdup(b);
    else
        CHECK(0, "forward on %s: status %ld %.200s", lc->name, r.status, r.body);
    json_decref(doc);
    hc_response_free(&r);
    return out;
}

static void layers_create(srv_daemon *d)
{
    for (size_t i = 0; i < NLAYERS; i++) {
        char path[128];
        snprintf(path, sizeof path, "/v1/layers/%s", layers[i].name);
        hc_response r;
        hc_request(d, "PUT", path, NULL, layers[i].put, -1, NULL, &r);
        CHECK(r.status == 201, "create %s: %ld %.200s", layers[i].name, r.status, r.body);
        hc_response_free(&r);
        layers[i].baseline = output_b64(d, &layers[i]);
    }
}

/* Every layer answers with the same bits as before, the list holds them all, /healthz is 200. */
static void layers_unchanged(srv_daemon *d, const char *after)
{
    for (size_t i = 0; i < NLAYERS; i++) {
        char *now = output_b64(d, &layers[i]);
        CHECK(now && layers[i].baseline && !strcmp(now, layers[i].baseline),
              "after %s: layer %s answers differently", after, layers[i].name);
        free(now);
    }
    hc_response r;
    hc_request(d, "GET", "/healthz", NULL, NULL, 0, NULL, &r);
    CHECK(r.status == 200, "after %s: /healthz %ld", after, r.status);
    hc_response_free(&r);
    hc_request(d, "GET", "/v1/layers", NULL, NULL, 0, NULL, &r);
    json_t *doc = hc_json(&r);
    json_t *list = json_is_array(doc) ? doc : json_object_get(doc, "layers");
    size_t found = 0;
    for (size_t i = 0; i < json_array_size(list); i++) {
        const char *n = json_string_value(json_object_get(json_array_get(list, i), "name"));
        for (size_t k = 0; n && k < NLAYERS; k++)
            found += !strcmp(n, layers[k].name);
    }
    CHECK(found == NLAYERS, "after %s: %zu of %zu layers listed: %.300s", after, found,
          (size_t)NLAYERS, r.body);
    json_decref(doc);
    hc_response_free(&r);
}

/* ---------------------------------------------------------------------------------------------- */
/* Slow clients                                                                                   */

typedef struct trickle {
    int *fds;
    int n;
    int stop; /* __atomic */
} trickle;

/* Sends the next byte of a never-ending header to each connection every 20 ms. */
static void *trickle_main(void *p)
{
    trickle *t = p;
    static const char hdr[] = "X-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n";
    size_t k = 0;
    while (!__atomic_load_n(&t->stop, __ATOMIC_ACQUIRE)) {
        for (int i = 0; i < t->n; i++)
            if (t->fds[i] >= 0 && send(t->fds[i], hdr + k, 1, MSG_NOSIGNAL) != 1) {
                close(t->fds[i]);
                t->fds[i] = -1;
            }
        k = (k + 1) % (sizeof hdr - 1);
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static void test_slow_clients(srv_daemon *d)
{
    int port = srv_daemon_port(d);
    enum { NSLOW = 32 };
    int fds[NSLOW];
    int open_ok = 0;
    for (int i = 0; i < NSLOW; i++) {
        fds[i] = hc_connect(port);
        open_ok += fds[i] >= 0;
        if (fds[i] < 0)
            continue;
        if (i % 2 == 0) { /* slowloris: a request line, then headers one byte at a time */
            const char *start = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n";
            hc_send_all(fds[i], start, strlen(start));
        } else { /* a stalled body: 1000 bytes announced, 10 sent */
            const char *start = "POST /v1/layers/plain/forward HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
                                "{\"query\": ";
            hc_send_all(fds[i], start, strlen(start));
        }
    }
    CHECK(open_ok == NSLOW, "%d of %d slow connections opened", open_ok, NSLOW);
    int slow_fds[NSLOW / 2];
    for (int i = 0; i < NSLOW / 2; i++)
        slow_fds[i] = fds[2 * i];
    trickle t = {slow_fds, NSLOW / 2, 0};
    pthread_t th;
    pthread_create(&th, NULL, trickle_main, &t);

    /* meanwhile, normal clients: health, a forward, a list; each must be quick */
    double worst = 0;
    int ok = 0;
    for (int i = 0; i < 10; i++) {
        double t0 = now_s();
        hc_response r;
        if (i % 3 == 0)
            hc_request(d, "GET", "/healthz", NULL, NULL, 0, NULL, &r);
        else if (i % 3 == 1)
            hc_request(d, "POST", "/v1/layers/plain/forward", NULL, layers[0].forward, -1, NULL, &r);
        else
            hc_request(d, "GET", "/v1/layers", NULL, NULL, 0, NULL, &r);
        double dt = now_s() - t0;
        worst = dt > worst ? dt : worst;
        ok += r.status == 200;
        hc_response_free(&r);
    }
    CHECK(ok == 10, "%d of 10 normal requests answered 200 while %d clients stall", ok, NSLOW);
    CHECK(worst < GENEROUS_S, "slowest normal request took %.2f s while %d clients stall", worst,
          NSLOW);
    printf("  slow clients: 10 normal requests beside %d stalled connections, slowest %.1f ms\n",
           NSLOW, worst * 1e3);
    __atomic_store_n(&t.stop, 1, __ATOMIC_RELEASE);
    pthread_join(th, NULL);
    for (int i = 0; i < NSLOW; i++)
        if (i % 2 == 1 || slow_fds[i / 2] >= 0)
            close(fds[i]);
}

/* ---------------------------------------------------------------------------------------------- */
/* Malformed HTTP                                                                                 */

static void test_oversized_headers(srv_daemon *d)
{
    int port = srv_daemon_port(d);
    size_t n = 256 * 1024;
    char *req = malloc(n + 256);
    char *reply = malloc(8192);
    /* one huge header value */
    size_t k = (size_t)sprintf(req, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ");
    memset(req + k, 'a', n);
    k += n;
    k += (size_t)sprintf(req + k, "\r\n\r\n");
    int fd = hc_connect(port);
    hc_send_all(fd, req, k);
    read_replies(fd, reply, 8192, 1, 3000);
    int st = status_of(reply);
    CHECK(st == 0 || (st >= 400 && st < 500), "256 KiB header: status %d (refused or closed)", st);
    close(fd);
    /* many small headers */
    k = (size_t)sprintf(req, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n");
    for (int i = 0; k + 40 < n; i++)
        k += (size_t)sprintf(req + k, "X-H%d: v\r\n", i);
    k += (size_t)sprintf(req + k, "\r\n");
    fd = hc_connect(port);
    hc_send_all(fd, req, k);
    read_replies(fd, reply, 8192, 1, 3000);
    st = status_of(reply);
    CHECK(st == 0 || (st >= 400 && st < 500), "25k headers: status %d (refused or closed)", st);
    close(fd);
    /* a huge URL */
    k = (size_t)sprintf(req, "GET /v1/layers/");
    memset(req + k, 'x', n);
    k += n;
    k += (size_t)sprintf(req + k, " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    fd = hc_connect(port);
    hc_send_all(fd, req, k);
    read_replies(fd, reply, 8192, 1, 3000);
    st = status_of(reply);
    CHECK(st == 0 || (st >= 400 && st < 500), "256 KiB URL: status %d (refused or closed)", st);
    close(fd);
    free(req);
    free(reply);
}

static void test_lying_bodies(srv_daemon *d)
{
    int port = srv_daemon_port(d);
    char reply[8192];
    /* Content-Length larger than the body, then close (both ways, and write side only) */
    for (int how = 0; how < 2; how++) {
        int fd = hc_connect(port);
        const char *req = "PUT /v1/layers/lying HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                          "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
                          "{\"config\": {\"embed_dim\": 4, \"num_heads\": 2}}";
        hc_send_all(fd, req, strlen(req));
        if (how == 1) {
            shutdown(fd, SHUT_WR);
            size_t got = read_replies(fd, reply, sizeof reply, 1, 2000);
            int st = status_of(reply);
            CHECK(got == 0 || (st >= 400 && st < 500), "truncated body, half-closed: %d", st);
        }
        close(fd);
    }
    /* the layer of the truncated request was never created */
    hc_response r;
    hc_request(d, "GET", "/v1/layers/lying", NULL, NULL, 0, NULL, &r);
    CHECK(r.status == 404, "a truncated PUT created nothing: %ld", r.status);
    hc_response_free(&r);

    /* chunked with an absurd chunk size, and a negative-looking one */
    const char *bad_chunks[] = {
        "POST /v1/layers/plain/forward HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        "ffffffffffffffffff\r\n{}\r\n0\r\n\r\n",
        "POST /v1/layers/plain/forward HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        "-5\r\n{}\r\n0\r\n\r\n",
        "POST /v1/layers/plain/forward HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n"
        "2\r\n{}\r\n0\r\n\r\n",
        "POST /v1/layers/plain/forward HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Content-Type: application/json\r\nContent-Length: -1\r\n\r\n{}",
        "POST /v1/layers/plain/forward HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Content-Type: application/json\r\nContent-Length: 99999999999999999999999\r\n\r\n{}",
        "GET /healthz HTTP/9.9\r\n\r\n",
        "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 tls hello",
        "BREW /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof bad_chunks / sizeof *bad_chunks; i++) {
        int st = hc_raw(port, bad_chunks[i], strlen(bad_chunks[i]), 2000, reply, sizeof reply);
        CHECK(st == 0 || (st >= 400 && st < 600 && st != 500), "malformed request %zu: status %d %.120s",
              i, st, reply);
    }
}

/* Chunks of 4 KiB of spaces, sent until `max` bytes or until the daemon answers or closes; returns
 * the bytes sent. */
static size_t send_chunks(int fd, size_t max)
{
    char chunk[4096 + 16];
    int k = sprintf(chunk, "1000\r\n");
    memset(chunk + k, ' ', 4096);
    k += 4096;
    k += sprintf(chunk + k, "\r\n");
    size_t sent = 0;
    while (sent < max) {
        size_t w = hc_send_all(fd, chunk, (size_t)k);
        sent += w;
        if (w < (size_t)k)
            break;
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, 0) > 0)
            break;
    }
    return sent;
}

/* A chunked body past --max-body-bytes: a 413 once it ends; one that never ends is cut off. */
static void test_chunked_over_limit(void)
{
    srv_options opt;
    hc_options(&opt);
    opt.max_body_bytes = 64 * 1024;
    srv_daemon *d = hc_start(&opt);
    if (!CHECK(d != NULL, "daemon with a small body limit"))
        return;
    const char *head = "POST /v1/layers/x/forward HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                       "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
    char reply[4096];
    int fd = hc_connect(srv_daemon_port(d));
    hc_send_all(fd, head, strlen(head));
    size_t sent = send_chunks(fd, 1 << 20);
    hc_send_all(fd, "0\r\n\r\n", 5);
    read_replies(fd, reply, sizeof reply, 1, 3000);
    int st = status_of(reply);
    CHECK(st == 413 && strstr(reply, "\"too_large\""), "chunked body past the limit: status %d after %zu bytes: %.200s", st, sent,
          reply);
    close(fd);

    /* never ending: the daemon reads and drops a while, then closes the connection */
    fd = hc_connect(srv_daemon_port(d));
    hc_send_all(fd, head, strlen(head));
    double t0 = now_s();
    sent = send_chunks(fd, (size_t)512 << 20);
    CHECK(sent < ((size_t)512 << 20), "an endless chunked body is cut off (after %zu bytes, %.1f s)",
          sent, now_s() - t0);
    close(fd);

    hc_response r;
    hc_request(d, "GET", "/healthz", NULL, NULL, 0, NULL, &r);
    CHECK(r.status == 200, "healthz after an endless chunked body: %ld", r.status);
    hc_response_free(&r);
    hc_stop(d);
}

static void test_pipelined(srv_daemon *d)
{
    char req[4096];
    size_t fl = strlen(layers[0].forward);
    int k = snprintf(req, sizeof req,
                     "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                     "POST /v1/layers/plain/forward HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s"
                     "GET /v1/layers/nope HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                     "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
                     fl, layers[0].forward);
    int fd = hc_connect(srv_daemon_port(d));
    hc_send_all(fd, req, (size_t)k);
    char *reply = malloc(1 << 16);
    read_replies(fd, reply, 1 << 16, 4, 5000);
    int st[4] = {0}, n = 0;
    for (const char *p = reply; n < 4 && (p = strstr(p, "HTTP/1.1 ")); p += 9)
        st[n++] = atoi(p + 9);
    CHECK(n == 4 && st[0] == 200 && st[1] == 200 && st[2] == 404 && st[3] == 200,
          "pipelined: %d replies, statuses %d %d %d %d", n, st[0], st[1], st[2], st[3]);
    CHECK(layers[0].baseline && strstr(reply, layers[0].baseline) != NULL,
          "the pipelined forward gives the same numbers");
    free(reply);
    close(fd);
}

/* ---------------------------------------------------------------------------------------------- */
/* A crowd over the in-flight cap                                                                 */

typedef struct crowd_arg {
    srv_daemon *d;
    const char *body; /* even threads: a large body (passes run on the workers)            */
    const char *small; /* odd threads: a small one (passes run on the HTTP threads)        */
    int id;
    int ok, busy, other;
    long other_status;
    char other_body[200];
    int busy_without_retry_after;
} crowd_arg;

static void *crowd_main(void *p)
{
    crowd_arg *a = p;
    for (int i = 0; i < 4; i++) {
        hc_response r;
        hc_request(a->d, "POST", "/v1/layers/big/forward", NULL, a->id % 2 ? a->small : a->body, -1,
                   NULL, &r);
        char ra[32], c[64];
        if (r.status == 200) {
            a->ok++;
        } else if (r.status == 503 && !strcmp(hc_error_code(&r, c, sizeof c), "unavailable")) {
            a->busy++;
            a->busy_without_retry_after += !hc_header(&r, "Retry-After", ra, sizeof ra);
        } else if (r.status == 503) {
            a->busy++;
            a->busy_without_retry_after += !hc_header(&r, "Retry-After", ra, sizeof ra);
        } else {
            a->other++;
            a->other_status = r.status;
            snprintf(a->other_body, sizeof a->other_body, "%s", r.body ? r.body : "");
        }
        hc_response_free(&r);
    }
    return NULL;
}

static void test_inflight_crowd(void)
{
    srv_options opt;
    hc_options(&opt);
    opt.max_inflight = 1;
    opt.queue_wait_ms = 0; /* over the cap: 503 at once */
    srv_daemon *d = hc_start(&opt);
    if (!CHECK(d != NULL, "daemon with --max-inflight 1"))
        return;
    hc_response r;
    hc_request(d, "PUT", "/v1/layers/big", NULL,
               "{\"config\": {\"embed_dim\": 256, \"num_heads\": 8}}", -1, NULL, &r);
    CHECK(r.status == 201, "create big: %ld %.200s", r.status, r.body);
    hc_response_free(&r);
    /* [1,128,256] of small numbers, base64: a pass of ~70 MFLOP */
    enum { L = 128, E = 256 };
    float *q = malloc(sizeof(float) * L * E);
    for (int i = 0; i < L * E; i++)
        q[i] = sinf((float)i) * 0.5f;
    int64_t shape[3] = {1, L, E};
    json_t *t = tj_base64(q, 3, shape);
    json_t *body = json_pack("{s:o, s:b}", "query", t, "need_weights", 1);
    char *text = json_dumps(body, JSON_COMPACT);
    shape[1] = 4; /* [1,4,256]: a body under the size that goes to a worker */
    json_t *sbody = json_pack("{s:o, s:b}", "query", tj_base64(q, 3, shape), "need_weights", 1);
    char *small = json_dumps(sbody, JSON_COMPACT);
    enum { NT = 12 };
    pthread_t th[NT];
    crowd_arg a[NT];
    for (int i = 0; i < NT; i++) {
        a[i] = (crowd_arg){.d = d, .body = text, .small = small, .id = i};
        pthread_create(&th[i], NULL, crowd_main, &a[i]);
    }
    int ok = 0, busy = 0, other = 0, no_ra = 0;
    for (int i = 0; i < NT; i++) {
        pthread_join(th[i], NULL);
        ok += a[i].ok;
        busy += a[i].busy;
        other += a[i].other;
        no_ra += a[i].busy_without_retry_after;
        if (a[i].other)
            CHECK(0, "crowd: status %ld %.200s", a[i].other_status, a[i].other_body);
    }
    CHECK(ok + busy == NT * 4 && other == 0, "crowd of %d: %d ok, %d busy, %d other", NT * 4, ok,
          busy, other);
    CHECK(ok > 0, "some of the crowd was served (%d)", ok);
    CHECK(no_ra == 0, "every 503 carries Retry-After (%d do not)", no_ra);
    printf("  crowd over --max-inflight 1: %d served, %d told to retry\n", ok, busy);
    hc_request(d, "GET", "/healthz", NULL, NULL, 0, NULL, &r);
    CHECK(r.status == 200, "healthz after the crowd: %ld", r.status);
    hc_response_free(&r);
    free(text);
    free(small);
    json_decref(body);
    json_decref(sbody);
    free(q);
    hc_stop(d);
}

/* ---------------------------------------------------------------------------------------------- */
/* Hostile JSON                                                                                   */

/* Sends body to path and checks for a 4xx JSON error with the given status (0: any 4xx). */
static void expect_error(srv_daemon *d, const char *method, const char *path, const char *body,
                         size_t len, int want, const char *what)
{
    hc_response r;
    double t0 = now_s();
    hc_request(d, method, path, NULL, body, (long)len, NULL, &r);
    double dt = now_s() - t0;
    json_t *doc = hc_json(&r);
    bool is_err = json_is_object(json_object_get(doc, "error"));
    CHECK(want ? r.status == want : (r.status >= 400 && r.status < 500),
          "%s: status %ld, want %d: %.200s", what, r.status, want, r.body);
    CHECK(is_err, "%s: a JSON error body: %.200s", what, r.body);
    CHECK(dt < GENEROUS_S, "%s took %.2f s", what, dt);
    json_decref(doc);
    hc_response_free(&r);
}

static void test_hostile_json(srv_daemon *d)
{
    const char *fwd = "/v1/layers/plain/forward";
    /* invalid UTF-8 in strings: a key, a value, an overlong encoding, a lone surrogate */
    const char *utf8[] = {
        "{\"query\": [[1,2,3,4,5,6,7,8]], \"enc\xff\": 1}",
        "{\"query\": [[1,2,3,4,5,6,7,8]], \"encoding\": \"nest\xc3\x28\"}",
        "{\"query\": [[1,2,3,4,5,6,7,8]], \"encoding\": \"\xc0\xae\"}",
        "{\"query\": [[1,2,3,4,5,6,7,8]], \"encoding\": \"\\ud800\"}",
        "{\"query\": [[1,2,3,4,5,6,7,8]], \"encoding\": \"\xed\xa0\x80\"}",
        "{\"query\": [[1,2,3,4,5,6,7,8]], \"attn_mask\": [[\"-inf\xff\"]]}",
        "{\"config\": {\"embed_dim\": 4, \"num_heads\": 2, \"b\xe2\x82ias\": true}}",
    };
    for (size_t i = 0; i < sizeof utf8 / sizeof *utf8; i++) {
        char what[64];
        snprintf(what, sizeof what, "invalid UTF-8 #%zu", i);
        expect_error(d, i == 6 ? "PUT" : "POST", i == 6 ? "/v1/layers/utf8" : fwd, utf8[i],
                     strlen(utf8[i]), 400, what);
    }
    /* the error reply itself stays valid JSON when it quotes a bad key: checked by expect_error */

    /* deep nesting: arrays in the query, objects in an unknown member, 100k levels */
    size_t depth = 100000;
    char *deep = malloc(depth * 6 + 64);
    size_t k = (size_t)sprintf(deep, "{\"query\": ");
    memset(deep + k, '[', depth);
    k += depth;
    deep[k++] = '1';
    memset(deep + k, ']', depth);
    k += depth;
    deep[k++] = '}';
    expect_error(d, "POST", fwd, deep, k, 400, "100k nested arrays");
    k = (size_t)sprintf(deep, "{\"x\": ");
    for (size_t i = 0; i < depth; i++)
        k += (size_t)sprintf(deep + k, "{\"a\":");
    deep[k++] = '1';
    memset(deep + k, '}', depth + 1);
    k += depth + 1;
    expect_error(d, "POST", fwd, deep, k, 400, "100k nested objects");
    /* just past the tensor depth limit, and a config nested deeply */
    const char *ten = "{\"query\": [[[[[[[[[[1]]]]]]]]]]}";
    expect_error(d, "POST", fwd, ten, strlen(ten), 400, "a query nested 10 deep");
    free(deep);

    /* a 100k-key object at the top level, and inside "weights" */
    size_t nkeys = 100000;
    char *wide = malloc(nkeys * 16 + 64);
    k = (size_t)sprintf(wide, "{");
    for (size_t i = 0; i < nkeys; i++)
        k += (size_t)sprintf(wide + k, "%s\"k%zu\":1", i ? "," : "", i);
    wide[k++] = '}';
    expect_error(d, "POST", fwd, wide, k, 400, "a 100k-key body");
    k = (size_t)sprintf(wide, "{\"config\": {\"embed_dim\": 4, \"num_heads\": 2}, \"weights\": {");
    for (size_t i = 0; i < nkeys; i++)
        k += (size_t)sprintf(wide + k, "%s\"w%zu\":[1]", i ? "," : "", i);
    k += (size_t)sprintf(wide + k, "}}");
    expect_error(d, "PUT", "/v1/layers/wide", wide, k, 400, "a 100k-key weights map");
    free(wide);

    /* numbers beyond float32 are a 400; so are huge exponents; NaN literals are bad JSON */
    const char *nums[] = {
        "{\"query\": [[1e999,2,3,4,5,6,7,8]]}",
        "{\"query\": [[1e1000000000,2,3,4,5,6,7,8]]}",
        "{\"query\": [[-3.5e38,2,3,4,5,6,7,8]]}",
        "{\"query\": [[NaN,2,3,4,5,6,7,8]]}",
        "{\"query\": [[Infinity,2,3,4,5,6,7,8]]}",
        "{\"query\": [[\"inf\",2,3,4,5,6,7,8]]}",
        "{\"query\": [[0x10,2,3,4,5,6,7,8]]}",
        "{\"query\": [[+1,2,3,4,5,6,7,8]]}",
        "{\"query\": [[.5,2,3,4,5,6,7,8]]}",
        "{\"query\": [[1.,2,3,4,5,6,7,8]]}",
        "{\"query\": [[01,2,3,4,5,6,7,8]]}",
    };
    for (size_t i = 0; i < sizeof nums / sizeof *nums; i++) {
        char what[96];
        snprintf(what, sizeof what, "number %.40s", nums[i] + 12);
        expect_error(d, "POST", fwd, nums[i], strlen(nums[i]), 400, what);
    }
}

/* Tiny and signed numbers read as strtof reads them: put them in a layer's weights, read the weights
 * back in base64 (exact bits), compare with strtof. */
static void test_number_edges(srv_daemon *d)
{
    const char *text[12] = {"1e-50", "-0", "1e-45", "1.5e-45", "-7e-46", "7.1e-46",
                            "1.1754942e-38", "3e-39", "1e-1000000000", "-1e-1000000000",
                            "3.4028235e38", "0.1000000000000000000000000000000000001"};
    char body[1024];
    int k = sprintf(body, "{\"config\": {\"embed_dim\": 2, \"num_heads\": 1, \"bias\": false}, "
                          "\"weights\": {\"in_proj_weight\": [");
    for (int i = 0; i < 6; i++)
        k += sprintf(body + k, "%s[%s,%s]", i ? "," : "", text[2 * i], text[2 * i + 1]);
    k += sprintf(body + k, "], \"out_proj.weight\": [[1,0],[0,1]]}}");
    hc_response r;
    hc_request(d, "PUT", "/v1/layers/nums", NULL, body, k, NULL, &r);
    CHECK(r.status == 201, "layer with edge numbers: %ld %.300s", r.status, r.body);
    hc_response_free(&r);
    hc_request(d, "GET", "/v1/layers/nums/weights?encoding=base64", NULL, NULL, 0, NULL, &r);
    json_t *doc = hc_json(&r);
    tj_tensor t = {0};
    if (CHECK(doc && tj_read(&t, json_object_get(doc, "in_proj_weight")) == 0 && t.count == 12,
              "weights back: %.200s", r.body)) {
        for (int i = 0; i < 12; i++) {
            float want = strtof(text[i], NULL);
            CHECK(!memcmp(&want, &t.data[i], 4), "%s reads as %a, strtof gives %a", text[i],
                  t.data[i], want);
        }
    }
    tj_free(&t);
    json_decref(doc);
    hc_response_free(&r);
    hc_request(d, "DELETE", "/v1/layers/nums", NULL, NULL, 0, NULL, &r);
    hc_response_free(&r);
}

/* ---------------------------------------------------------------------------------------------- */
/* Hostile layer names                                                                            */

/* method path [body] on a fresh connection, raw (curl would normalise "/./" and ".."); returns
 * the status, the reply in out. */
static int raw_request(int port, const char *method, const char *path, const char *body, char *out,
                       size_t cap)
{
    char req[1024];
    int k = snprintf(req, sizeof req,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                     method, path, body ? strlen(body) : 0, body ? body : "");
    int fd = hc_connect(port);
    if (fd < 0)
        return 0;
    hc_send_all(fd, req, (size_t)k);
    read_replies(fd, out, cap, 1, 3000);
    close(fd);
    return status_of(out);
}

static void test_names(srv_daemon *d)
{
    int port = srv_daemon_port(d);
    const char *body = "{\"config\": {\"embed_dim\": 4, \"num_heads\": 2}}";
    const char *bad[] = {
        "%2e%2e", "%2E%2E", "..", ".", ".hidden", "a%2fb", "a%2Fb", "caf%C3%A9", "%ff",
        "a%00b", "%00", "%20", "a%20b", "%2e%2e%2f%2e%2e%2fetc", "a:b", "a*b", "a%5cb", "a%0d%0ab",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", /* 65 */
    };
    char reply[4096];
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char path[256];
        snprintf(path, sizeof path, "/v1/layers/%s", bad[i]);
        int st = raw_request(port, "PUT", path, body, reply, sizeof reply);
        CHECK(st == 400 || st == 404 || st == 405, "PUT %s: status %d %.300s", path, st, reply);
        if (st == 400)
            CHECK(strstr(reply, "\"bad_name\"") != NULL, "PUT %s: %.300s", path, reply);
        snprintf(path, sizeof path, "/v1/layers/%s/forward", bad[i]);
        st = raw_request(port, "POST", path, "{\"query\": [[1,2,3,4]]}", reply, sizeof reply);
        CHECK(st == 400 || st == 404 || st == 405, "POST %s: status %d", path, st);
        snprintf(path, sizeof path, "/v1/layers/%s", bad[i]);
        st = raw_request(port, "DELETE", path, NULL, reply, sizeof reply);
        CHECK(st == 400 || st == 404 || st == 405, "DELETE %s: status %d", path, st);
    }
    /* none of them created a layer under a shortened or decoded name */
    hc_response r;
    hc_request(d, "GET", "/v1/layers", NULL, NULL, 0, NULL, &r);
    json_t *doc = hc_json(&r);
    json_t *list = json_is_array(doc) ? doc : json_object_get(doc, "layers");
    CHECK(json_array_size(list) == NLAYERS, "only the test's layers exist: %.400s", r.body);
    json_decref(doc);
    hc_response_free(&r);

    /* 64 characters is fine, and can be removed again */
    const char *ok64 = "/v1/layers/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    hc_request(d, "PUT", ok64, NULL, body, -1, NULL, &r);
    CHECK(r.status == 201, "a 64-character name: %ld %.200s", r.status, r.body);
    hc_response_free(&r);
    hc_request(d, "DELETE", ok64, NULL, NULL, 0, NULL, &r);
    CHECK(r.status == 204, "delete the 64-character layer: %ld", r.status);
    hc_response_free(&r);
}

/* ---------------------------------------------------------------------------------------------- */
/* A layer deleted and re-created under clients that use it                                      */

typedef struct churn_arg {
    srv_daemon *d;
    int writer;
    int ok, gone, other;
    long other_status;
} churn_arg;

static void *churn_main(void *p)
{
    churn_arg *a = p;
    for (int i = 0; i < 30; i++) {
        hc_response r;
        if (a->writer) {
            if (i % 2)
                hc_request(a->d, "DELETE", "/v1/layers/churn", NULL, NULL, 0, NULL, &r);
            else
                hc_request(a->d, "PUT", "/v1/layers/churn", NULL,
                           "{\"config\": {\"embed_dim\": 8, \"num_heads\": 2}, \"init\": {\"seed\": 1}}",
                           -1, NULL, &r);
            a->ok += r.status == 200 || r.status == 201 || r.status == 204;
            a->other += !(r.status == 200 || r.status == 201 || r.status == 204);
        } else {
            hc_request(a->d, "POST", "/v1/layers/churn/trace", NULL,
                       "{\"query\": [[1,2,3,4,5,6,7,8],[8,7,6,5,4,3,2,1]], \"need_weights\": true}",
                       -1, NULL, &r);
            a->ok += r.status == 200;
            a->gone += r.status == 404;
            if (r.status != 200 && r.status != 404) {
                a->other++;
                a->other_status = r.status;
            }
        }
        hc_response_free(&r);
    }
    return NULL;
}

static void test_churn(srv_daemon *d)
{
    enum { NT = 4 };
    pthread_t th[NT];
    churn_arg a[NT];
    for (int i = 0; i < NT; i++) {
        a[i] = (churn_arg){.d = d, .writer = i == 0};
        pthread_create(&th[i], NULL, churn_main, &a[i]);
    }
    int other = 0;
    for (int i = 0; i < NT; i++) {
        pthread_join(th[i], NULL);
        other += a[i].other;
        if (a[i].other)
            CHECK(0, "churn: thread %d got status %ld", i, a[i].other_status);
    }
    CHECK(other == 0 && a[0].ok == 30, "layer churn: every reply 200/201/204/404 (%d others)", other);
    hc_response r;
    hc_request(d, "DELETE", "/v1/layers/churn", NULL, NULL, 0, NULL, &r);
    hc_response_free(&r);
}

/* ---------------------------------------------------------------------------------------------- */
/* Requests that fail half-way (leaks on error paths show under make asan's LeakSanitizer)         */

static void test_half_failures(srv_daemon *d)
{
    const char *fwd = "/v1/layers/plain/forward";
    /* a good base64 query, then the failure */
    float q[2 * 8];
    for (int i = 0; i < 16; i++)
        q[i] = (float)i / 8;
    int64_t shape[2] = {2, 8};
    json_t *qt = tj_base64(q, 2, shape);
    char *qs = json_dumps(qt, JSON_COMPACT);
    json_decref(qt);
    const char *tails[] = {
        "\"key\": [[1,2,3,4,5,6,7,\"nan\"]]",                       /* bad value in a later tensor  */
        "\"key\": [[1,2,3,4,5,6,7,8]], \"value\": [[1,2,3]]",       /* shapes: the plan refuses      */
        "\"attn_mask\": {\"shape\": [2,2], \"dtype\": \"bool\", \"base64\": \"AA=A\"}",
        "\"key\": [[1,2,3,4,5,6,7,8]], \"zzz\": 1",                 /* unknown field last            */
        "\"key\": [[1,2,3,4,5,6,7,8]], \"encoding\": \"hex\"",
        "\"key\": [[1,2,3,4,5,6,7,8]], \"need_weights\": \"yes\"",
        "\"key\": [[1,2,3,4,5,6,7,8]], \"key\": [[1,2,3,4,5,6,7,8]]", /* duplicate */
        "\"key_padding_mask\": [[true, false]], \"attn_mask\": [[1e39, 0], [0, 0]]",
        "\"key\": [[1,2,3,4,5,6,7,8]], \"value\": [[1,2,3,4,5,6,7,8]], \"is_causal\": 2",
    };
    char body[4096];
    for (size_t i = 0; i < sizeof tails / sizeof *tails; i++) {
        int k = snprintf(body, sizeof body, "{\"query\": %s, %s}", qs, tails[i]);
        char what[64];
        snprintf(what, sizeof what, "forward failing late #%zu", i);
        expect_error(d, "POST", fwd, body, (size_t)k, 400, what);
        snprintf(what, sizeof what, "trace failing late #%zu", i);
        expect_error(d, "POST", "/v1/layers/plain/trace", body, (size_t)k, 400, what);
    }
    free(qs);

    /* PUT with weights: good tensors, then a bad one; a bad config after good weights */
    const char *puts[] = {
        "{\"config\": {\"embed_dim\": 2, \"num_heads\": 1}, \"weights\": {"
        "\"in_proj_weight\": [[1,0],[0,1],[1,0],[0,1],[1,0],[0,1]], \"in_proj_bias\": [0,0,0,0,0,0],"
        " \"out_proj.weight\": [[1,0],[0,1]], \"out_proj.bias\": [0,\"nan\"]}}",
        "{\"config\": {\"embed_dim\": 2, \"num_heads\": 1}, \"weights\": {"
        "\"in_proj_weight\": [[1,0],[0,1],[1,0],[0,1],[1,0],[0,1]], \"in_proj_bias\": [0,0,0,0,0,0],"
        " \"out_proj.weight\": [[1,0,0],[0,1,0]], \"out_proj.bias\": [0,0]}}",
        "{\"config\": {\"embed_dim\": 2, \"num_heads\": 1}, \"weights\": {"
        "\"in_proj_weight\": [[1,0],[0,1],[1,0],[0,1],[1,0],[0,1]], \"in_proj_bias\": [0,0,0,0,0,0],"
        " \"out_proj.weight\": [[1,0],[0,1]], \"out_proj.bias\": [0,0], \"bias_k\": [[[0,0]]]}}",
        "{\"weights\": {\"in_proj_weight\": [[1,0],[0,1],[1,0],[0,1],[1,0],[0,1]]}, "
        "\"config\": {\"embed_dim\": 2, \"num_heads\": 3}}",
        "{\"config\": {\"embed_dim\": 2, \"num_heads\": 1}, \"weights\": {"
        "\"in_proj_weight\": [[1,0],[0,1],[1,0],[0,1],[1,0],[0,1]]}}",
    };
    for (size_t i = 0; i < sizeof puts / sizeof *puts; i++) {
        char what[64];
        snprintf(what, sizeof what, "PUT failing late #%zu", i);
        expect_error(d, "PUT", "/v1/layers/plain", puts[i], strlen(puts[i]), 0, what);
        expect_error(d, "PUT", "/v1/layers/halfway", puts[i], strlen(puts[i]), 0, what);
    }
    /* a weights replacement that fails half-way leaves the layer as it was */
    const char *wput = "{\"in_proj_weight\": [[1,0,0,0,0,0,0,0]], \"out_proj.weight\": 7}";
    expect_error(d, "PUT", "/v1/layers/plain/weights", wput, strlen(wput), 0, "weights PUT");
    /* a safetensors body cut short */
    hc_response r;
    hc_request(d, "GET", "/v1/layers/plain/weights", NULL, NULL, 0,
               &(hc_opts){.headers = (const char *const[]){"Accept: application/octet-stream", NULL}},
               &r);
    if (CHECK(r.status == 200 && r.len > 64, "safetensors download: %ld", r.status)) {
        hc_response r2;
        hc_request(d, "PUT", "/v1/layers/plain/weights", "application/octet-stream", r.body,
                   (long)(r.len - 4), NULL, &r2);
        CHECK(r2.status == 400, "truncated safetensors upload: %ld %.200s", r2.status, r2.body);
        hc_response_free(&r2);
        r.body[r.len - 4] = 0x7F; /* a float's top byte: now NaN or huge? make it NaN-ish */
        r.body[r.len - 3] = (char)0xFF;
        r.body[r.len - 2] = (char)0xFF;
        r.body[r.len - 1] = 0x7F;
        hc_request(d, "PUT", "/v1/layers/plain/weights", "application/octet-stream", r.body,
                   (long)r.len, NULL, &r2);
        CHECK(r2.status == 400, "safetensors upload with a NaN: %ld %.200s", r2.status, r2.body);
        hc_response_free(&r2);
    }
    hc_response_free(&r);

    /* v2: a good query, then a bad mask; binary sizes that do not add up */
    const char *v2 = "{\"inputs\": [{\"name\": \"query\", \"datatype\": \"FP32\", \"shape\": [1,8], "
                     "\"data\": [1,2,3,4,5,6,7,8]}, {\"name\": \"attn_mask\", \"datatype\": \"BOOL\", "
                     "\"shape\": [1,1], \"data\": [7]}]}";
    hc_request(d, "POST", "/v2/models/plain/infer", NULL, v2, -1, NULL, &r);
    CHECK(r.status == 400, "v2 with a bad mask: %ld %.200s", r.status, r.body);
    hc_response_free(&r);
    const char *v2b = "{\"inputs\": [{\"name\": \"query\", \"datatype\": \"FP32\", \"shape\": [1,8], "
                      "\"parameters\": {\"binary_data_size\": 32}}]}0123456789";
    char hl[64];
    snprintf(hl, sizeof hl, "Inference-Header-Content-Length: %zu", strlen(v2b) - 10);
    hc_request(d, "POST", "/v2/models/plain/infer", "application/octet-stream", v2b, -1,
               &(hc_opts){.headers = (const char *const[]){hl, NULL}}, &r);
    CHECK(r.status == 400, "v2 with short binary data: %ld %.200s", r.status, r.body);
    hc_response_free(&r);
}

int main(void)
{
    srv_options opt;
    hc_options(&opt);
    srv_daemon *d = hc_start(&opt);
    if (!CHECK(d != NULL, "daemon starts"))
        return check_report();
    layers_create(d);
    test_slow_clients(d);
    layers_unchanged(d, "slow clients");
    test_oversized_headers(d);
    test_lying_bodies(d);
    layers_unchanged(d, "malformed HTTP");
    test_pipelined(d);
    test_hostile_json(d);
    test_number_edges(d);
    test_names(d);
    layers_unchanged(d, "hostile requests");
    test_half_failures(d);
    layers_unchanged(d, "requests failing half-way");
    test_churn(d);
    layers_unchanged(d, "a layer deleted and re-created under its clients");
    hc_stop(d);
    test_chunked_over_limit();
    test_inflight_crowd();
    for (size_t i = 0; i < NLAYERS; i++)
        free(layers[i].baseline);
    return check_report();
}
