/*
 * daemon.h - the daemon: the shared state (app/app.h) served by the HTTP server (http/http.h) with
 * the API's route table (routes.c). What main() starts, and what tests start in-process on port 0.
 */
#ifndef ATTND_DAEMON_H
#define ATTND_DAEMON_H

#include "app/app.h"
#include "app/options.h"
#include "base/error.h"

typedef struct srv_daemon srv_daemon;

/* Creates the app from opt and starts listening on opt->host:opt->port (0 = any free port) with
 * opt->threads HTTP threads. Returns the running daemon, or NULL with err filled (bad host, port in
 * use, a data dir that cannot be used, ...). Free with srv_daemon_stop. */
srv_daemon *srv_daemon_start(const srv_options *opt, srv_error *err);

/* As srv_daemon_start, but listening nowhere and running no HTTP thread: the caller hands it
 * connections and runs it on its own thread (srv_http_add_connection, srv_http_run on
 * srv_daemon_http(d)); the workers of heavy requests are threads as usual. For in-process fuzzing
 * (fuzz/fuzz_http.c), where a round trip must cost microseconds, not a scheduler's wake-ups. */
srv_daemon *srv_daemon_start_external(const srv_options *opt, srv_error *err);

/* The daemon's HTTP server (borrowed). */
srv_http *srv_daemon_http(srv_daemon *d);

/* The port the daemon listens on (the real one when started with port 0). */
int srv_daemon_port(const srv_daemon *d);

/* The daemon's shared state (borrowed). */
srv_app *srv_daemon_app(srv_daemon *d);

/* Begins a graceful stop: /readyz answers 503, the listening socket closes (no new connections),
 * requests that arrive on open connections get 503 + Connection: close. Then waits up to
 * deadline_ms for the requests in flight to complete. Returns the number still in flight (0 = all
 * done). Call srv_daemon_stop afterwards. */
int srv_daemon_drain(srv_daemon *d, int deadline_ms);

/* Stops the daemon (closing every connection) and frees it and its app. Accepts NULL. */
void srv_daemon_stop(srv_daemon *d);

#endif
