/*
 * deadline.c - per-phase deadlines for client connections (what nginx's client_header_timeout and
 * client_body_timeout, Apache's mod_reqtimeout and Go's ReadHeaderTimeout do), on libmicrohttpd.
 *
 * The rules, for every connection:
 *   - headers: a request's headers must be complete within --header-timeout seconds of the
 *     connection's accept (first request) or of the next request's first byte (keep-alive; that
 *     byte is noticed within IDLE_EVERY ticks, two seconds at most);
 *   - body: once the headers are in, the body gets --header-timeout seconds of grace plus one
 * second for every --min-body-rate bytes received (mod_reqtimeout's MinRate): a body averaging less
 * is cut off, a body at real network speed never is;
 *   - between requests (keep-alive) a connection is idle under libmicrohttpd's --timeout only;
 *   - while a request is handled (on a worker, its connection suspended) no deadline of ours
 *     applies; but a client that hangs up meanwhile is noticed within two ticks and its request's
 *     gone flag set, so the work for it stops (below);
 *   - a reply must be taken by the client at --min-body-rate on average too, after the same grace
 *     (counted in bytes the client's kernel acknowledged): a client that reads a large reply a few
 *     bytes at a time would otherwise hold the reply's memory for as long as it likes, since
 *     --timeout only counts time without any progress;
 *   - a connection that is idle and half-closed by the client (shutdown(SHUT_WR) after its last
 *     request) is closed: libmicrohttpd polls edge-triggered and, having read the request in one
 *     short read, never notices the FIN that came with it, so it would keep such a connection until
 *     --timeout. The reply itself is never held back: it is sent as soon as it is ready.
 * A connection past a header or body deadline gets a best-effort 408 (a v1 error body,
 * "request_timeout"; none when cut while its reply is under way), then shutdown(fd, SHUT_RDWR):
 * libmicrohttpd's next read or write fails and it closes the connection itself, on its own thread,
 * with its usual cleanup.
 *
 * Clients gone while their request is handled: libmicrohttpd does not look at a connection then
 * (suspended while a worker runs the handler, or busy in the handler on its own thread), so the
 * reaper does, every tick, with poll(POLLRDHUP) on each busy connection's socket. A reset (POLLERR,
 * POLLHUP) means gone. The client's FIN alone (POLLRDHUP) is ambiguous: a client that closed its
 * socket sends one, and so does one that only shut down its sending side and still waits for the
 * reply (nc -N, some proxies; test_deadline.c's half-closed clients must get their answer). So an
 * HTTP/1.1 connection busy for a tick or more that shows a FIN is sent "HTTP/1.1 100 Continue" and
 * blank line (RFC 9110 15.2: a client must take any 1xx before the final reply, and ignores one it
 * does not expect): a client still reading takes it, a closed socket answers it with a reset, which
 * the next tick sees. HTTP/1.0 clients may not be sent a 1xx, so for them the FIN is taken as gone.
 * The gone flag is read by the handler (srv_request_gone) and the engine (mha_inputs.cancel), and
 * the gone callback lets the server drop the request from its worker queue at once.
 *
 * How: libmicrohttpd's connection notifications (MHD_OPTION_NOTIFY_CONNECTION) keep a registry of
 * open connections (slots in one array, so the reaper can walk it in batches and drop the lock in
 * between); request.c reports each request's phase (deadline.h); a reaper thread wakes every
 * TICK_MS and acts on the connections past their deadline. Whether a kept-alive connection has
 * received the next request's first byte, or the client's FIN, and how much of a reply the client
 * has taken, is read from the kernel (getsockopt TCP_INFO: bytes received, bytes acknowledged, TCP
 * state), since libmicrohttpd reports none of it: the phase's first check takes the count as the
 * baseline, later ones compare. Those checks run every IDLE_EVERY-th tick only, and never on a
 * request's path, as they cost a system call per connection.
 *
 * Why the shutdown is safe: the reaper only touches a socket while holding the registry lock and
 * while the connection is registered, and libmicrohttpd 0.9.75 calls the CLOSED notification, whose
 * unregistering takes the same lock, before it closes the socket (daemon.c:
 * MHD_cleanup_connections, and the failed-start path of internal_add_connection). So the descriptor
 * cannot be closed and reused by another connection between the reaper's check and its shutdown.
 */
#include "deadline.h"
#include "request_id.h"

#include <errno.h>
#include <poll.h>
#include <linux/sockios.h> /* SIOCINQ */
#include <linux/tcp.h> /* struct tcp_info with tcpi_bytes_received (glibc's netinet/tcp.h lacks it) */
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>

#include <microhttpd.h>

#define TICK_MS 100   /* deadlines are enforced, and hang-ups seen, within this much            */
#define IDLE_EVERY 10 /* idle connections are looked at every 10th tick (once a second)        */
#define BATCH 256     /* slots checked per hold of the lock                                    */
#define PROBE "HTTP/1.1 100 Continue\r\n\r\n" /* to a busy HTTP/1.1 client that sent a FIN  */
#define MARK_UNSET UINT64_MAX
#define REFUSAL_WAIT 1.0 /* s without a body byte after a refusal: the client waits for it     */
#define TCP_CLOSE_WAIT_STATE 8 /* the kernel's TCP_CLOSE_WAIT: the peer sent its FIN */

typedef enum phase {
    PH_FREE = 0, /* slot unused                                                                  */
    PH_HEADER,   /* receiving a request's headers: --header-timeout since `since`                */
    PH_BODY,     /* receiving its body: grace + body_bytes / --min-body-rate since `since`       */
    PH_BUSY,     /* being handled (on a worker, suspended): no deadline                          */
    PH_SENDING,  /* its reply being sent: grace + acked / --min-body-rate since `since`          */
    PH_IDLE,     /* between requests: --timeout (libmicrohttpd's) only                            */
    PH_CLOSING,  /* shut down by the reaper; libmicrohttpd closes it                             */
} phase;

typedef struct conn_slot {
    srv_deadlines *owner;
    int fd;
    struct MHD_Connection *conn;
    phase phase;
    int gone;            /* the client hung up while the request was busy (atomic: the engine
                          * reads it without the lock); reset at each request's begin          */
    bool http11;         /* the request is HTTP/1.1: a FIN is probed with a 100 Continue         */
    bool probed;         /* the probe was sent for this request                                  */
    int next_free;       /* free list                                                        */
    int idle_halfclosed; /* idle checks that found the connection half-closed in a row        */
    bool timed_out;      /* closed by the reaper for a missed deadline                        */
    double since;        /* monotonic seconds when the phase began                            */
    uint64_t body_bytes; /* received of the current body                                      */
    uint64_t mark;       /* IDLE: the kernel's count of bytes received, SENDING: of bytes the
                          * client acknowledged, at the phase's first check (MARK_UNSET before) */
    char id[SRV_REQUEST_ID_MAX + 1]; /* the request's id from its begin to its end, else "" */
    char *refusal; /* BODY: the whole reply of a request refused at its headers whose body
                    * is read and dropped, sent if no byte of it comes (malloc'd)       */
    size_t refusal_len;
    int refusal_status;
    int cut_status;         /* the status the reaper sent when it cut the connection (0: none)    */
    srv_body_client client; /* BODY: the body's client address (has_client)                  */
    bool has_client;
    uint64_t share_mark; /* BODY: body_bytes at the reaper's last idle look                    */
} conn_slot;

struct srv_deadlines {
    pthread_mutex_t lock;
    pthread_cond_t wake; /* CLOCK_MONOTONIC; signalled to stop the reaper */
    pthread_t reaper;
    bool started, stopping;
    conn_slot *slots;
    int capacity;
    int used_hi;   /* slots at or past this index have never been used */
    int free_head; /* -1: full                                          */
    double header_timeout, min_rate, body_grace;
    srv_deadline_event event; /* may be NULL */
    srv_deadline_gone gone;   /* may be NULL */
    void *event_cls;
    char msg_header[200], msg_body[200]; /* the 408s' messages */
    srv_body_budget *budget;             /* may be NULL: no check of shares */
    srv_body_clients *clients;
};

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The kernel's counts of bytes received on fd and of bytes sent that the client acknowledged,
 * and the connection's TCP state; -1 if unknown. */
static int tcp_counts(int fd, uint64_t *received, uint64_t *acked, int *state)
{
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    memset(&ti, 0, sizeof ti);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0 ||
        len < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof ti.tcpi_bytes_received)
        return -1;
    *received = ti.tcpi_bytes_received;
    *acked = ti.tcpi_bytes_acked;
    *state = ti.tcpi_state;
    return 0;
}

/* A whole error reply (v1's body) into out [size], with the request's id (X-Request-Id and
 * "request_id", as every error reply has them); its length, 0 when it does not fit. */
static size_t format_cut(char *out, size_t size, int status, const char *phrase, srv_code code,
                         const char *message, const char *id, bool retry)
{
    char body[640];
    int blen = snprintf(body, sizeof body,
                        "{\"error\":{\"code\":\"%s\",\"message\":\"%s\"},\"request_id\":\"%s\"}\n",
                        srv_error_name(code), message, id);
    if (blen < 0 || (size_t)blen >= sizeof body)
        return 0;
    int n = snprintf(out, size,
                     "HTTP/1.1 %d %s\r\nConnection: close\r\n%s%s: %s\r\n"
                     "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
                     status, phrase, retry ? "Retry-After: 1\r\n" : "", SRV_REQUEST_ID_HEADER, id,
                     blen, body);
    return n > 0 && (size_t)n < size ? (size_t)n : 0;
}

/* Sends the 408 (or the over-share 503; best effort: never blocks; not when a reply is under way)
 * and shuts the socket down. Lock held. */
static void reap(srv_deadlines *dl, conn_slot *s, srv_cut_reason why)
{
    char reply[1024], id[SRV_REQUEST_ID_MAX + 1];
    if (s->id[0]) /* the request's; a request whose headers never came has none yet: a new one */
        memcpy(id, s->id, sizeof id);
    else
        srv_request_id_take(NULL, id);
    size_t len = 0;
    if (why == SRV_CUT_HEADER_TIMEOUT || why == SRV_CUT_BODY_TOO_SLOW)
        len = format_cut(reply, sizeof reply, 408, "Request Timeout", SRV_E_TIMEOUT,
                         why == SRV_CUT_HEADER_TIMEOUT ? dl->msg_header : dl->msg_body, id, false);
    else if (why == SRV_CUT_BODY_OVER_SHARE)
        len = format_cut(reply, sizeof reply, 503, "Service Unavailable", SRV_E_NOMEM,
                         "request bodies from this client's address held more than its share of "
                         "--max-body-memory while other clients waited, and this one stopped "
                         "arriving; send it again at a steady pace",
                         id, true);
    if (len)
        (void)!send(s->fd, reply, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (!s->timed_out) /* a refusal sent before keeps its status */
        s->cut_status = !len ? 0 : why == SRV_CUT_BODY_OVER_SHARE ? 503 : 408;
    if (why == SRV_CUT_REPLY_TOO_SLOW) {
        /* The rest of the reply in the kernel's send buffer (megabytes) would still go out before
         * the FIN, at the client's pace: libmicrohttpd's close() is to reset the connection and
         * drop it instead. */
        struct linger abort_close = {.l_onoff = 1, .l_linger = 0};
        setsockopt(s->fd, SOL_SOCKET, SO_LINGER, &abort_close, sizeof abort_close);
    }
    shutdown(s->fd, SHUT_RDWR);
    s->timed_out = true;
    s->phase = PH_CLOSING;
    if (dl->event)
        dl->event(dl->event_cls, 0, 1, why);
}

/* Closes a connection whose client sent its FIN and will send nothing more (nothing to answer:
 * no reply is sent), counted as why. Lock held. */
static void close_half_closed(srv_deadlines *dl, conn_slot *s, srv_cut_reason why)
{
    shutdown(s->fd, SHUT_RDWR);
    s->phase = PH_CLOSING;
    if (dl->event)
        dl->event(dl->event_cls, 0, 1, why);
}

static void drop_refusal(conn_slot *s)
{
    free(s->refusal);
    s->refusal = NULL;
    s->refusal_len = 0;
}

/* A request refused at its headers, whose body would be read and dropped so that its client reads
 * the answer (request.c), but of which no byte came within REFUSAL_WAIT, none waiting unread in
 * the socket either: a client that waits for the answer before it sends (as one that asked
 * "Expect: 100-continue" would, which is answered at once): the answer goes now, "before the body
 * is read", and the sending side closes. Lock held. */
static void send_refusal(conn_slot *s, double now)
{
    int unread = 0;
    if (s->body_bytes || now - s->since < REFUSAL_WAIT || ioctl(s->fd, SIOCINQ, &unread) != 0 ||
        unread)
        return;
    (void)!send(s->fd, s->refusal, s->refusal_len, MSG_DONTWAIT | MSG_NOSIGNAL);
    /* the answer is all this connection sends; it still reads, so a body that starts late is
     * read and dropped as before (closed with it unread, the connection would be reset under a
     * client still sending, which then never reads the answer): the body's deadlines, or the
     * client's FIN, close it */
    shutdown(s->fd, SHUT_WR);
    s->cut_status = s->refusal_status;
    drop_refusal(s);
    s->timed_out = true;
}

/* Whether the client of a busy connection has gone (see the top): sets s->gone and returns true
 * the tick it is seen. Lock held. */
static bool check_gone(conn_slot *s)
{
    if (__atomic_load_n(&s->gone, __ATOMIC_RELAXED))
        return false;
    struct pollfd p = {.fd = s->fd, .events = POLLRDHUP};
    if (poll(&p, 1, 0) <= 0)
        return false;
    bool gone = p.revents & (POLLERR | POLLHUP | POLLNVAL);
    if (!gone && (p.revents & POLLRDHUP)) {
        if (!s->http11)
            gone = true;
        else if (!s->probed) {
            s->probed = true;
            ssize_t n = send(s->fd, PROBE, sizeof PROBE - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
            gone = n < 0 && (errno == EPIPE || errno == ECONNRESET);
        }
    }
    if (gone)
        __atomic_store_n(&s->gone, 1, __ATOMIC_RELAXED);
    return gone;
}

/* Acts on one slot if it is past its deadline. Lock held. */
static void check_slot(srv_deadlines *dl, conn_slot *s, double now, bool idle_pass)
{
    switch (s->phase) {
    case PH_HEADER:
        if (now - s->since > dl->header_timeout)
            reap(dl, s, SRV_CUT_HEADER_TIMEOUT);
        break;
    case PH_BODY: {
        if (s->refusal) {
            send_refusal(s, now);
            if (s->phase != PH_BODY)
                break;
        }
        if (dl->min_rate > 0 &&
            now - s->since > dl->body_grace + (double)s->body_bytes / dl->min_rate) {
            reap(dl, s, SRV_CUT_BODY_TOO_SLOW);
            break;
        }
        /* A client that closed before its body was complete (its FIN in, nothing left unread in
         * the socket) will never complete it: libmicrohttpd's edge-triggered poll misses a FIN
         * that comes after the data it read, so the connection, and the body's share of
         * --max-body-memory, would be held until --timeout. A client that half-closes after a
         * whole body is not this: its body is complete once read. Twice in a row, with no byte
         * read in between, so that bytes libmicrohttpd has taken but not yet handed over count. */
        if (!idle_pass)
            break;
        /* Memory taken while alone, held from others by a body that does not move: while an
         * address within its share is refused for a full budget, a body of an address over its
         * share that got less than --min-body-rate since the last look is cut (body_budget.h) */
        const uint64_t moved = s->body_bytes - s->share_mark;
        s->share_mark = s->body_bytes;
        if (dl->budget && s->has_client &&
            moved < (uint64_t)(dl->min_rate > 0 ? dl->min_rate : 1) &&
            srv_body_budget_contended(dl->budget, 2000) &&
            srv_body_client_held(dl->clients, &s->client) >
                dl->budget->limit / SRV_BODY_CLIENT_SHARE) {
            reap(dl, s, SRV_CUT_BODY_OVER_SHARE);
            break;
        }
        uint64_t rx, acked;
        int state, unread = 0;
        if (tcp_counts(s->fd, &rx, &acked, &state) < 0)
            break;
        if (state == TCP_CLOSE_WAIT_STATE && ioctl(s->fd, SIOCINQ, &unread) == 0 && unread == 0 &&
            rx == s->mark) {
            if (++s->idle_halfclosed >= 2)
                close_half_closed(dl, s, SRV_CUT_BODY_ABANDONED);
        } else {
            s->idle_halfclosed = 0;
        }
        s->mark = rx;
        break;
    }
    case PH_SENDING: {
        uint64_t rx, acked;
        int state;
        if (dl->min_rate <= 0 || !idle_pass || tcp_counts(s->fd, &rx, &acked, &state) < 0)
            break;
        if (s->mark == MARK_UNSET) { /* the first check: the baseline, and the clock starts */
            s->mark = acked;
            s->since = now;
        } else if (now - s->since > dl->body_grace + (double)(acked - s->mark) / dl->min_rate) {
            reap(dl, s, SRV_CUT_REPLY_TOO_SLOW);
        }
        break;
    }
    case PH_IDLE: {
        uint64_t rx, acked;
        int state;
        if (!idle_pass || tcp_counts(s->fd, &rx, &acked, &state) < 0)
            break;
        if (s->mark == MARK_UNSET) /* the first check after the request: the baseline */
            s->mark = rx;
        if (rx > s->mark) { /* the next request began: its headers' clock starts */
            s->phase = PH_HEADER;
            s->since = now;
        } else if (state == TCP_CLOSE_WAIT_STATE) {
            /* Half-closed and nothing new: its requests are answered. Twice in a row, so that a
             * request libmicrohttpd still held in its buffer when the last one ended has had a
             * full check interval to start (it starts at once, on the same thread). */
            if (++s->idle_halfclosed >= 2)
                close_half_closed(dl, s, SRV_CUT_HALF_CLOSED);
        } else {
            s->idle_halfclosed = 0;
        }
        break;
    }
    default:
        break;
    }
}

static void *reaper_main(void *arg)
{
    srv_deadlines *dl = arg;
    unsigned tick = 0;
    pthread_mutex_lock(&dl->lock);
    while (!dl->stopping) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += TICK_MS * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        while (!dl->stopping && pthread_cond_timedwait(&dl->wake, &dl->lock, &until) != ETIMEDOUT)
            ;
        if (dl->stopping)
            break;
        bool idle_pass = ++tick % IDLE_EVERY == 0;
        /* In batches, letting libmicrohttpd's threads in between: slots stay where they are, so
         * the walk by index survives connections coming and going meanwhile. */
        for (int base = 0; base < dl->used_hi && !dl->stopping; base += BATCH) {
            double now = mono_now();
            int end = base + BATCH < dl->used_hi ? base + BATCH : dl->used_hi, ngone = 0;
            struct MHD_Connection *gone[BATCH];
            for (int i = base; i < end; i++) {
                conn_slot *s = &dl->slots[i];
                check_slot(dl, s, now, idle_pass);
                /* busy for a tick at least: a quick request is done before a hang-up matters,
                 * and a half-closed client of one is never sent the probe */
                if (s->phase == PH_BUSY && now - s->since >= TICK_MS / 1e3 && check_gone(s))
                    gone[ngone++] = s->conn;
            }
            pthread_mutex_unlock(&dl->lock);
            for (int i = 0; i < ngone && dl->gone; i++) /* without the lock: they may resume */
                dl->gone(dl->event_cls, gone[i]);
            pthread_mutex_lock(&dl->lock);
        }
    }
    pthread_mutex_unlock(&dl->lock);
    return NULL;
}

srv_deadlines *srv_deadlines_create(int capacity, int header_timeout_s, int min_body_rate,
                                    srv_deadline_event event, srv_deadline_gone gone, void *cls,
                                    srv_error *err)
{
    srv_deadlines *dl = calloc(1, sizeof *dl);
    if (capacity < 1)
        capacity = 1;
    if (dl)
        dl->slots = calloc((size_t)capacity, sizeof *dl->slots);
    if (!dl || !dl->slots) {
        free(dl);
        srv_error_set(err, SRV_E_NOMEM, "max-connections",
                      "out of memory for the registry of %d connections (--max-connections)",
                      capacity);
        return NULL;
    }
    dl->capacity = capacity;
    for (int i = 0; i < capacity; i++) {
        dl->slots[i].owner = dl;
        dl->slots[i].fd = -1;
        dl->slots[i].next_free = i + 1 < capacity ? i + 1 : -1;
    }
    dl->free_head = 0;
    dl->header_timeout = header_timeout_s;
    dl->body_grace = header_timeout_s;
    dl->min_rate = min_body_rate;
    dl->event = event;
    dl->gone = gone;
    dl->event_cls = cls;
    snprintf(dl->msg_header, sizeof dl->msg_header,
             "the request's headers took longer than %d s (--header-timeout)", header_timeout_s);
    snprintf(dl->msg_body, sizeof dl->msg_body,
             "the request's body arrived at less than %d bytes/s on average (--min-body-rate)",
             min_body_rate);

    pthread_mutex_init(&dl->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&dl->wake, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&dl->reaper, NULL, reaper_main, dl) == 0) {
        pthread_setname_np(dl->reaper, "attnd-deadline");
    } else {
        srv_error_set(err, SRV_E_UNAVAILABLE, "", "cannot start the connection reaper thread");
        srv_deadlines_free(dl);
        return NULL;
    }
    dl->started = true;
    return dl;
}

void srv_deadlines_free(srv_deadlines *dl)
{
    if (!dl)
        return;
    if (dl->started) {
        pthread_mutex_lock(&dl->lock);
        dl->stopping = true;
        pthread_cond_signal(&dl->wake);
        pthread_mutex_unlock(&dl->lock);
        pthread_join(dl->reaper, NULL);
    }
    pthread_cond_destroy(&dl->wake);
    pthread_mutex_destroy(&dl->lock);
    free(dl->slots);
    free(dl);
}

void srv_deadlines_notify(void *cls, struct MHD_Connection *conn, void **socket_context, int toe)
{
    srv_deadlines *dl = cls;
    if (dl->event && toe == MHD_CONNECTION_NOTIFY_STARTED)
        dl->event(dl->event_cls, 1, 0, SRV_CUT_COUNT);
    else if (dl->event && toe == MHD_CONNECTION_NOTIFY_CLOSED)
        dl->event(dl->event_cls, -1, 0, SRV_CUT_COUNT);
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *info =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_context = NULL;
        if (!info)
            return;
        pthread_mutex_lock(&dl->lock);
        if (dl->free_head >= 0) { /* else: more than --max-connections? left untracked */
            int i = dl->free_head;
            conn_slot *s = &dl->slots[i];
            dl->free_head = s->next_free;
            if (i >= dl->used_hi)
                dl->used_hi = i + 1;
            s->fd = info->connect_fd;
            s->conn = conn;
            s->phase = PH_HEADER;
            s->since = mono_now();
            s->timed_out = false;
            s->cut_status = 0;
            s->id[0] = '\0';
            s->idle_halfclosed = 0;
            s->body_bytes = 0;
            s->mark = MARK_UNSET;
            *socket_context = s;
        }
        pthread_mutex_unlock(&dl->lock);
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        conn_slot *s = *socket_context;
        if (!s)
            return;
        /* before libmicrohttpd closes the socket: from here on the reaper cannot touch it */
        pthread_mutex_lock(&dl->lock);
        drop_refusal(s);
        s->phase = PH_FREE;
        s->fd = -1;
        s->conn = NULL;
        s->next_free = dl->free_head;
        dl->free_head = (int)(s - dl->slots);
        pthread_mutex_unlock(&dl->lock);
        *socket_context = NULL;
    }
}

static conn_slot *slot_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info ? info->socket_context : NULL;
}

/* Moves s to phase p (unless the reaper is closing it), starting the phase's clock. */
static void enter(conn_slot *s, phase p)
{
    pthread_mutex_lock(&s->owner->lock);
    if (s->phase != PH_CLOSING) {
        s->phase = p;
        s->since = mono_now();
        s->body_bytes = 0;
        s->mark = MARK_UNSET;
        s->idle_halfclosed = 0;
        s->share_mark = 0;
        drop_refusal(s);
        if (p != PH_BODY)
            s->has_client = false;
    }
    pthread_mutex_unlock(&s->owner->lock);
}

const int *srv_deadlines_request_begin(struct MHD_Connection *conn, bool http11, const char *id)
{
    static const int never = 0; /* for connections past the registry's capacity */
    conn_slot *s = slot_of(conn);
    if (!s)
        return &never;
    pthread_mutex_lock(&s->owner->lock);
    snprintf(s->id, sizeof s->id, "%s", id ? id : "");
    __atomic_store_n(&s->gone, 0, __ATOMIC_RELAXED);
    s->http11 = http11;
    s->probed = false;
    pthread_mutex_unlock(&s->owner->lock);
    enter(s, PH_BODY);
    return &s->gone;
}

void srv_deadlines_body_client(struct MHD_Connection *conn, const srv_body_client *who)
{
    conn_slot *s = slot_of(conn);
    if (!s)
        return;
    pthread_mutex_lock(&s->owner->lock);
    s->client = *who;
    s->has_client = true;
    pthread_mutex_unlock(&s->owner->lock);
}

void srv_deadlines_set_bodies(srv_deadlines *dl, srv_body_budget *budget, srv_body_clients *clients)
{
    if (!dl)
        return;
    pthread_mutex_lock(&dl->lock);
    dl->budget = clients ? budget : NULL;
    dl->clients = clients;
    pthread_mutex_unlock(&dl->lock);
}

void srv_deadlines_body_bytes(struct MHD_Connection *conn, size_t n)
{
    conn_slot *s = slot_of(conn);
    if (!s)
        return;
    pthread_mutex_lock(&s->owner->lock);
    s->body_bytes += n;
    if (n)
        drop_refusal(s); /* the body comes: read to its end, and the answer goes then */
    pthread_mutex_unlock(&s->owner->lock);
}

void srv_deadlines_busy(struct MHD_Connection *conn)
{
    conn_slot *s = slot_of(conn);
    if (s)
        enter(s, PH_BUSY);
}

void srv_deadlines_sending(struct MHD_Connection *conn)
{
    conn_slot *s = slot_of(conn);
    if (s)
        enter(s, PH_SENDING);
}

void srv_deadlines_request_end(struct MHD_Connection *conn)
{
    conn_slot *s = slot_of(conn);
    if (!s)
        return;
    pthread_mutex_lock(&s->owner->lock);
    drop_refusal(s);
    s->id[0] = '\0'; /* the next request's headers have none until they are in */
    if (s->phase != PH_CLOSING) {
        s->phase = PH_IDLE;
        s->since = mono_now();
        s->mark = MARK_UNSET; /* read by the reaper, off this hot path */
        s->idle_halfclosed = 0;
    }
    pthread_mutex_unlock(&s->owner->lock);
}

int srv_deadlines_cut_status(struct MHD_Connection *conn)
{
    conn_slot *s = slot_of(conn);
    if (!s)
        return 0;
    pthread_mutex_lock(&s->owner->lock);
    int t = s->timed_out ? (s->cut_status ? s->cut_status : 408) : 0;
    pthread_mutex_unlock(&s->owner->lock);
    return t;
}

void srv_deadlines_refused(struct MHD_Connection *conn, char *reply, size_t len, int status)
{
    conn_slot *s = slot_of(conn);
    if (!s) {
        free(reply);
        return;
    }
    pthread_mutex_lock(&s->owner->lock);
    drop_refusal(s);
    if (s->phase == PH_BODY && !s->body_bytes) {
        s->refusal = reply;
        s->refusal_len = len;
        s->refusal_status = status;
        reply = NULL;
    }
    pthread_mutex_unlock(&s->owner->lock);
    free(reply);
}
