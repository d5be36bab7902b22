/*
 * server.c - the HTTP server's start and stop: the listening address, libmicrohttpd's threads and
 * options, the workers and the deadlines started with it, the graceful drain (see http.h).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "http_internal.h"

/* libmicrohttpd's connection notifications, to deadline.c's registry. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    srv_deadlines_notify(cls, conn, socket_context, (int)toe);
}

/* deadline.c's reports, to the hooks' counters. */
static void on_deadline_event(void *cls, int delta, int cut, srv_cut_reason reason)
{
    const srv_http_hooks *hk = &((srv_http *)cls)->hooks;
    if (cut) {
        if (hk->connection_cut)
            hk->connection_cut(hk->ctx, reason);
    } else if (hk->connection) {
        hk->connection(hk->ctx, delta);
    }
}

static int resolve(const char *host, int port, struct sockaddr_storage *out, socklen_t *len,
                   srv_error *err)
{
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0 || !res)
        return srv_error_set(err, SRV_E_BAD_REQUEST, "host", "cannot use host '%s': %s", host,
                             gai_strerror(rc));
    memcpy(out, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    if (out->ss_family == AF_INET)
        ((struct sockaddr_in *)out)->sin_port = htons((uint16_t)port);
    else
        ((struct sockaddr_in6 *)out)->sin6_port = htons((uint16_t)port);
    return 0;
}

/* addr as "127.0.0.1:8080" or "[::1]:8080" into out. */
static void format_address(const struct sockaddr_storage *addr, int port, char *out, size_t size)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    if (addr->ss_family == AF_INET6) {
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)addr)->sin6_addr, ip, sizeof ip);
        snprintf(out, size, "[%s]:%d", ip, port);
    } else {
        inet_ntop(AF_INET, &((const struct sockaddr_in *)addr)->sin_addr, ip, sizeof ip);
        snprintf(out, size, "%s:%d", ip, port);
    }
}

/* Why libmicrohttpd could not listen on addr, which it does not say: the same bind, tried here on a
 * socket of our own (closed at once), gives the reason. Sets err; returns -1. */
static int listen_error(const struct sockaddr_storage *addr, socklen_t len, int port,
                        srv_error *err)
{
    char where[INET6_ADDRSTRLEN + 16];
    format_address(addr, port, where, sizeof where);
    int e = 0, one = 1;
    int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        e = errno;
    else if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
             bind(fd, (const struct sockaddr *)addr, len) < 0 || listen(fd, 1) < 0)
        e = errno;
    if (fd >= 0)
        close(fd);
    switch (e) {
    case EADDRINUSE:
        return srv_error_set(err, SRV_E_UNAVAILABLE, "port",
                             "address %s is already in use: another process listens there "
                             "(another attnd?); stop it, or choose another --port",
                             where);
    case EACCES:
        return srv_error_set(err, SRV_E_UNAVAILABLE, "port",
                             "cannot listen on %s: permission denied (ports below 1024 need root "
                             "or CAP_NET_BIND_SERVICE)",
                             where);
    case EADDRNOTAVAIL:
        return srv_error_set(err, SRV_E_UNAVAILABLE, "host",
                             "cannot listen on %s: not an address of this host (--host)", where);
    case 0:
        return srv_error_set(err, SRV_E_UNAVAILABLE, "port",
                             "cannot listen on %s: the HTTP server did not start (out of "
                             "threads or descriptors?)",
                             where);
    default:
        return srv_error_set(err, SRV_E_UNAVAILABLE, "port", "cannot listen on %s: %s", where,
                             strerror(e));
    }
}

static void free_server(srv_http *h)
{
    srv_http_workers_stop(h);
    srv_deadlines_free(h->deadlines);
    srv_body_clients_free(h->clients);
    pthread_cond_destroy(&h->idle);
    pthread_cond_destroy(&h->jobs);
    pthread_cond_destroy(&h->watch);
    pthread_mutex_destroy(&h->lock);
    free(h);
}

srv_http *srv_http_start(const srv_http_config *cfg, const srv_http_hooks *hooks, srv_error *err)
{
    srv_http *h = calloc(1, sizeof *h);
    if (!h) {
        srv_error_set(err, SRV_E_NOMEM, "", "out of memory");
        return NULL;
    }
    pthread_mutex_init(&h->lock, NULL);
    pthread_cond_init(&h->idle, NULL);
    pthread_cond_init(&h->jobs, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&h->watch, &ca);
    pthread_condattr_destroy(&ca);
    h->cfg = *cfg;
    h->listen_fd = -1;
    h->hooks = *hooks;
    snprintf(h->host, sizeof h->host, "%s", cfg->host ? cfg->host : "");
    snprintf(h->cors_origin, sizeof h->cors_origin, "%s", cfg->cors_origin ? cfg->cors_origin : "");
    h->cfg.host = h->host;
    h->cfg.cors_origin = h->cors_origin;

    struct sockaddr_storage addr = {0};
    socklen_t alen = 0;
    if (!cfg->external && resolve(h->host, cfg->port, &addr, &alen, err) < 0)
        goto fail;

    /* Workers run heavy handlers; as many as passes may be in flight. */
    if (srv_http_workers_start(h) < 0) {
        srv_error_set(err, SRV_E_NOMEM, "", "out of memory");
        goto fail;
    }
    h->deadlines = srv_deadlines_create(cfg->max_connections, cfg->header_timeout,
                                        cfg->min_body_rate, on_deadline_event, srv_http_job_gone, h,
                                        err);
    if (!h->deadlines)
        goto fail;
    h->clients = srv_body_clients_create(cfg->max_connections);
    if (!h->clients) {
        srv_error_set(err, SRV_E_NOMEM, "max-connections",
                      "out of memory for the body shares of %d connections", cfg->max_connections);
        goto fail;
    }
    if (cfg->bodies)
        srv_deadlines_set_bodies(h->deadlines, cfg->bodies, h->clients);

    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_ITC;
    if (addr.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    if (cfg->external) /* polled by srv_http_run, level-triggered, on the caller's thread */
        flags = MHD_USE_NO_LISTEN_SOCKET | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ITC;
    struct MHD_OptionItem ops[] = {
        {MHD_OPTION_SOCK_ADDR, 0, cfg->external ? NULL : &addr},
        {MHD_OPTION_CONNECTION_TIMEOUT, (intptr_t)cfg->timeout, NULL},
        {MHD_OPTION_CONNECTION_LIMIT, (intptr_t)cfg->max_connections, NULL},
        /* Per-connection buffer for headers and body reads, grown 64 KB at a time while a body
         * arrives. libmicrohttpd clears the part in use between keep-alive requests, so a larger
         * buffer costs small requests (256 KB: ~4% of an S request's CPU); a smaller one costs
         * large bodies reads (64 KB, grown 1 KB at a time: 16.8 MB in ~700 reads of ~24 KB; the
         * base64 L request took ~3 ms longer, measured in 8 interleaved pairs). Headers may take
         * about 120 KB (431 past it). */
        {MHD_OPTION_CONNECTION_MEMORY_LIMIT, (intptr_t)(128 * 1024), NULL},
        {MHD_OPTION_CONNECTION_MEMORY_INCREMENT, (intptr_t)(64 * 1024), NULL},
        {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)srv_http_on_completed, h},
        {MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)on_connection, h->deadlines},
        {MHD_OPTION_UNESCAPE_CALLBACK, (intptr_t)srv_http_unescape, NULL},
        /* every request's context is made when its request line arrives (strict.c) */
        {MHD_OPTION_URI_LOG_CALLBACK, (intptr_t)srv_http_on_target, h},
        {cfg->threads > 1 && !cfg->external ? MHD_OPTION_THREAD_POOL_SIZE : MHD_OPTION_END,
         (intptr_t)cfg->threads, NULL},
        /* No MHD_OPTION_LISTENING_ADDRESS_REUSE: its 1 is SO_REUSEPORT, which lets a second daemon
         * bind the same port and take half the connections (a layer PUT to one is "not found" on
         * the other). Left out, libmicrohttpd sets SO_REUSEADDR only: a restart may bind again
         * while old connections sit in TIME_WAIT, and a busy port is an error. */
        {MHD_OPTION_END, 0, NULL},
    };
    h->mhd = MHD_start_daemon(flags, (uint16_t)cfg->port, NULL, NULL, srv_http_on_request, h,
                              MHD_OPTION_ARRAY, ops, MHD_OPTION_END);
    if (!h->mhd) {
        listen_error(&addr, alen, cfg->port, err);
        goto fail;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->mhd, MHD_DAEMON_INFO_BIND_PORT);
    h->port = info ? info->port : cfg->port;
    return h;

fail:
    free_server(h);
    return NULL;
}

int srv_http_port(const srv_http *h)
{
    return h->port;
}

int srv_http_add_connection(srv_http *h, int fd)
{
    struct sockaddr_in peer = {0};
    peer.sin_family = AF_INET;
    peer.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return MHD_add_connection(h->mhd, fd, (const struct sockaddr *)&peer, sizeof peer) == MHD_YES
               ? 0
               : -1;
}

int srv_http_run(srv_http *h, int timeout_ms)
{
    return MHD_run_wait(h->mhd, timeout_ms) == MHD_YES ? 0 : -1;
}

int srv_http_drain(srv_http *h, int deadline_ms)
{
    pthread_mutex_lock(&h->lock);
    if (!__atomic_load_n(&h->quiesced, __ATOMIC_SEQ_CST)) {
        __atomic_store_n(&h->quiesced, true, __ATOMIC_SEQ_CST);
        /* libmicrohttpd's threads may still be removing the socket from their epoll sets, so
         * its docs say to close it only after MHD_stop_daemon (closing here raced their
         * epoll_ctl, and the number could be reused under them). shutdown() stops the
         * listening at once on Linux: new connections are refused while the drain runs. */
        MHD_socket fd = MHD_quiesce_daemon(h->mhd);
        if (fd != MHD_INVALID_SOCKET) {
            shutdown(fd, SHUT_RDWR);
            h->listen_fd = fd;
        }
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += deadline_ms / 1000;
    until.tv_nsec += (long)(deadline_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    while (__atomic_load_n(&h->active, __ATOMIC_SEQ_CST) > 0)
        if (pthread_cond_timedwait(&h->idle, &h->lock, &until) == ETIMEDOUT)
            break;
    int left = __atomic_load_n(&h->active, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&h->lock);
    return left;
}

void srv_http_stop(srv_http *h)
{
    if (!h)
        return;
    /* Workers finish every queued job and resume its connection before they exit, and no request
     * is offloaded once `stopping` is set, so libmicrohttpd is stopped with no connection suspended
     * (which it does not allow). */
    srv_http_workers_stop(h);
    MHD_stop_daemon(h->mhd);
    h->mhd = NULL;
    if (h->listen_fd >= 0)
        close(h->listen_fd);
    free_server(h); /* the deadlines after libmicrohttpd: every connection is closed */
}
