/*
 * healthcheck.h - `attnd --healthcheck`: the daemon's binary probes a running daemon's /healthz itself.
 *
 * Container images carry no curl or wget, so the Dockerfile's HEALTHCHECK (and any probe that can only
 * exec a command) runs `attnd --healthcheck`, which sends one GET over a raw socket and exits 0 when
 * the answer is 200, 1 otherwise. The probe never blocks past its timeout.
 */
#ifndef ATTND_HEALTHCHECK_H
#define ATTND_HEALTHCHECK_H

#include <stddef.h>

/* Address the probe should dial for a daemon listening on `host`: a wildcard listen address
 * ("", NULL, "0.0.0.0", "::", "[::]") becomes the matching loopback address; anything else is returned
 * as given, without brackets around an IPv6 literal. Returns a static string or a pointer into out
 * (out_size bytes, at least 64). */
const char *srv_healthcheck_target(char *out, size_t out_size, const char *host);

/* Sends `GET path HTTP/1.0` to host:port (host as srv_healthcheck_target resolves it) and reads the
 * status line, all within timeout_ms. Returns the HTTP status (e.g. 200, 503), or -1 when no HTTP
 * answer came (connection refused, timeout, garbage); then msg (msg_size bytes, may be NULL) says why.
 * On success msg holds the status line. */
int srv_healthcheck(const char *host, int port, const char *path, int timeout_ms, char *msg,
                    size_t msg_size);

/* The whole `--healthcheck` command: probes /healthz, prints one line to stderr on failure, and
 * returns the process exit status (0 healthy, 1 not). */
int srv_healthcheck_main(const char *host, int port);

#endif
