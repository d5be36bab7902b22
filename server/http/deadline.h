/*
 * deadline.h - per-phase deadlines for client connections: headers within --header-timeout, a body
 * at no less than --min-body-rate, half-closed idle connections closed; and clients that hang up
 * while their request is handled noticed (design: deadline.c).
 *
 * libmicrohttpd only knows an idle timeout (--timeout), reset by every byte, so a client trickling
 * a byte every few seconds would keep its connection forever; and it does not look at a connection
 * whose request is being handled (suspended, or on its own thread), so it cannot tell that the
 * client has gone. This module keeps a registry of open connections, fed by libmicrohttpd's
 * connection notifications and by request.c's callbacks at each phase of a request, and a reaper
 * thread that closes those past their deadline and marks those whose client has gone.
 */
#ifndef ATTND_DEADLINE_H
#define ATTND_DEADLINE_H

#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"
#include "body_budget.h"

struct MHD_Connection;
typedef struct srv_deadlines srv_deadlines;

/* Why the server closed a connection early. */
typedef enum srv_cut_reason {
    SRV_CUT_HEADER_TIMEOUT = 0, /* headers not complete within --header-timeout      */
    SRV_CUT_BODY_TOO_SLOW,      /* body below --min-body-rate                        */
    SRV_CUT_HALF_CLOSED,        /* idle after the client's FIN, every request answered */
    SRV_CUT_REPLY_TOO_SLOW,     /* a reply taken at less than --min-body-rate        */
    SRV_CUT_BODY_ABANDONED,     /* the client's FIN before its body was complete     */
    SRV_CUT_BODY_OVER_SHARE,    /* a stalled body of an address over its share of
                                 * --max-body-memory while others are refused        */
    SRV_CUT_COUNT
} srv_cut_reason;

/* What the registry reports, for counting: a connection opened (delta 1, cut 0) or closed
 * (delta -1, cut 0), or was cut off (cut 1, reason). Called from libmicrohttpd's threads and the
 * reaper; must not block. */
typedef void (*srv_deadline_event)(void *cls, int delta, int cut, srv_cut_reason reason);

/* The client of conn hung up while its request was handled (its gone flag is set). Called from
 * the reaper without the registry's lock held, so it may call into libmicrohttpd (resume conn);
 * conn may have completed and closed meanwhile unless it is suspended, so it must only be
 * compared with connections the caller knows to be alive. */
typedef void (*srv_deadline_gone)(void *cls, struct MHD_Connection *conn);

/* Creates the registry for up to `capacity` connections (--max-connections; connections past it are
 * not tracked) and starts its reaper thread. header_timeout_s: seconds a request's headers may take
 * (0 = no limit); min_body_rate: bytes/s a body must average after a grace of header_timeout_s
 * (0 = no limit). Open connections and the ones cut off are reported to event(cls, ...) (may be
 * NULL); clients gone while their request is handled to gone(cls, ...) (may be NULL). Returns NULL
 * with err filled on failure. Free with srv_deadlines_free. */
srv_deadlines *srv_deadlines_create(int capacity, int header_timeout_s, int min_body_rate,
                                    srv_deadline_event event, srv_deadline_gone gone, void *cls,
                                    srv_error *err);

/* The body budget and its shares per address (body_budget.h), set before the first connection:
 * while an address within its share is being refused for a full budget, a body of an address
 * holding more than its share that received less than --min-body-rate since the reaper's last look
 * (a second) is cut with a 503 (SRV_CUT_BODY_OVER_SHARE): memory an address took while alone is
 * not held from the others by sending nothing. Without this call, no such check. */
void srv_deadlines_set_bodies(srv_deadlines *dl, srv_body_budget *budget,
                              srv_body_clients *clients);

/* Stops the reaper and frees the registry. Call after libmicrohttpd is stopped (no connection is
 * left in it). Accepts NULL. */
void srv_deadlines_free(srv_deadlines *dl);

/* libmicrohttpd's MHD_OPTION_NOTIFY_CONNECTION callback (cls = the srv_deadlines): registers a
 * connection when it starts (its headers' clock starts), unregisters it when it closes. The
 * signature is libmicrohttpd's, with the enum passed as int. */
void srv_deadlines_notify(void *cls, struct MHD_Connection *conn, void **socket_context, int toe);

/* The phases of a request on conn, called from libmicrohttpd's threads (request.c, reply.c):
 *   request_begin  headers complete (the first access callback): the body's clock starts; returns
 *                  the request's gone flag (never NULL; read with __atomic_load_n): nonzero once
 *                  the client is seen gone while the request is busy (see deadline.c for how an
 *                  HTTP/1.1 client that only half-closed is told apart); http11: the request is
 *                  HTTP/1.1 (1xx replies allowed); id: the request's id, which a reply the reaper
 *                  sends for it carries (a header timeout's gets a new one);
 *   body_bytes     n more body bytes arrived;
 *   busy           the request is being handled (on a worker): no deadline of ours;
 *   sending        its reply is queued: the client must take it at --min-body-rate on average,
 *                  after the grace;
 *   request_end    the request completed (keep-alive): the connection is idle under --timeout until
 *                  the next request's first byte, which starts that request's headers' clock. */
const int *srv_deadlines_request_begin(struct MHD_Connection *conn, bool http11, const char *id);
/* The client address of the body that conn's request is receiving, for the reaper's check of
 * shares of --max-body-memory (srv_deadlines_set_bodies). */
void srv_deadlines_body_client(struct MHD_Connection *conn, const srv_body_client *who);
void srv_deadlines_body_bytes(struct MHD_Connection *conn, size_t n);
void srv_deadlines_busy(struct MHD_Connection *conn);
void srv_deadlines_sending(struct MHD_Connection *conn);
void srv_deadlines_request_end(struct MHD_Connection *conn);

/* conn's request was refused at its headers and its body is read and dropped, so that a client
 * already sending it reads the answer at its end (request.c). reply [len]: that answer, a whole
 * HTTP response (malloc'd; the registry owns it from here). When no byte of the body comes within
 * a second, none waiting unread either, the client is taken to wait for the answer before it
 * sends: the reaper sends reply and closes the connection's sending side ("413 ... sent before
 * the body is read"); a body that starts later is still read and dropped, until the body's
 * deadlines or the client's FIN close it. The first body byte, or the request's end, drops it. */
void srv_deadlines_refused(struct MHD_Connection *conn, char *reply, size_t len, int status);

/* The status the reaper answered when it closed conn early: 408 for a missed deadline, 503 for a
 * stalled body over its share, a refusal's own (srv_deadlines_refused); 0 when it did not close
 * it. Its request is logged with this status. */
int srv_deadlines_cut_status(struct MHD_Connection *conn);

#endif
