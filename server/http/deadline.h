/*
 * deadline.h - per-phase deadlines for client connections: headers within --header-timeout, a body
 * at no less than --min-body-rate, half-closed idle connections closed (design: deadline.c).
 *
 * libmicrohttpd only knows an idle timeout (--timeout), reset by every byte, so a client trickling a
 * byte every few seconds would keep its connection forever. This module keeps a registry of open
 * connections, fed by libmicrohttpd's connection notifications and by http.c's callbacks at each
 * phase of a request, and a reaper thread that closes those past their deadline.
 */
#ifndef ATTND_DEADLINE_H
#define ATTND_DEADLINE_H

#include <stddef.h>

#include "error.h"
#include "metrics.h"

struct MHD_Connection;
typedef struct srv_deadlines srv_deadlines;

/* Creates the registry for up to `capacity` connections (--max-connections; connections past it are
 * not tracked) and starts its reaper thread. header_timeout_s: seconds a request's headers may take
 * (0 = no limit); min_body_rate: bytes/s a body must average after a grace of header_timeout_s
 * (0 = no limit). Open connections and the ones cut off are counted in metrics (borrowed; may be
 * NULL). Returns NULL with err filled on failure. Free with srv_deadlines_free. */
srv_deadlines *srv_deadlines_create(int capacity, int header_timeout_s, int min_body_rate,
                                    srv_metrics *metrics, srv_error *err);

/* Stops the reaper and frees the registry. Call after libmicrohttpd is stopped (no connection is
 * left in it). Accepts NULL. */
void srv_deadlines_free(srv_deadlines *dl);

/* libmicrohttpd's MHD_OPTION_NOTIFY_CONNECTION callback (cls = the srv_deadlines): registers a
 * connection when it starts (its headers' clock starts), unregisters it when it closes. The
 * signature is libmicrohttpd's, with the enum passed as int. */
void srv_deadlines_notify(void *cls, struct MHD_Connection *conn, void **socket_context, int toe);

/* The phases of a request on conn, called from libmicrohttpd's threads (http.c):
 *   request_begin  headers complete (the first access callback): the body's clock starts;
 *   body_bytes     n more body bytes arrived;
 *   busy           the request is being handled (on a worker): no deadline of ours;
 *   sending        its reply is queued: the client must take it at --min-body-rate on average,
 *                  after the grace;
 *   request_end    the request completed (keep-alive): the connection is idle under --timeout until
 *                  the next request's first byte, which starts that request's headers' clock. */
void srv_deadlines_request_begin(struct MHD_Connection *conn);
void srv_deadlines_body_bytes(struct MHD_Connection *conn, size_t n);
void srv_deadlines_busy(struct MHD_Connection *conn);
void srv_deadlines_sending(struct MHD_Connection *conn);
void srv_deadlines_request_end(struct MHD_Connection *conn);

/* True when the reaper closed conn for missing a deadline (its request is logged as 408). */
int srv_deadlines_timed_out(struct MHD_Connection *conn);

#endif
