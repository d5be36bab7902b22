/*
 * http_client.h - what the HTTP integration tests share: an in-process daemon on port 0 and a few
 * libcurl helpers to talk to it (plus a raw socket for requests curl will not send).
 *
 *   srv_daemon *d = hc_start(NULL);                  // 127.0.0.1, any free port, no log lines
 *   hc_response r;
 *   hc_request(d, "PUT", "/v1/layers/x", NULL, "{\"config\": ...}", -1, NULL, &r);
 *   CHECK(r.status == 201, "...");  json_t *doc = hc_json(&r);  ...
 *   hc_response_free(&r);
 *   hc_stop(d);
 *
 * Every test traffic goes to 127.0.0.1 only.
 */
#ifndef ATTND_HTTP_CLIENT_H
#define ATTND_HTTP_CLIENT_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "api/daemon.h"
#include "app/options.h"
#include "http/http.h"

/* Options for a test daemon: the defaults, host 127.0.0.1, port 0, log off. */
void hc_options(srv_options *opt);

/* Starts a daemon in-process with opt (NULL = hc_options). Prints the error and returns NULL on
 * failure. */
srv_daemon *hc_start(const srv_options *opt);
void hc_stop(srv_daemon *d); /* accepts NULL */

typedef struct hc_response {
    long status;     /* 0 when the request failed at the transport level        */
    char *body;      /* NUL-terminated, malloc'd                                  */
    size_t len;
    char *headers;   /* the raw response headers, NUL-terminated, malloc'd        */
} hc_response;

/* Extra request settings; zero = defaults. */
typedef struct hc_opts {
    const char *const *headers; /* NULL-terminated "Name: value" lines                     */
    bool chunked;               /* send the body chunked (no Content-Length)              */
    bool no_content_type;       /* send no Content-Type at all                             */
} hc_opts;

/* Sends method path (relative to the daemon) with body [body, body+len) (len -1 = strlen; body
 * NULL = none) and content_type (NULL = application/json when there is a body). Fills out (free
 * with hc_response_free). Returns 0, or -1 when the transfer failed (out->status 0). */
int hc_request(srv_daemon *d, const char *method, const char *path, const char *content_type,
               const char *body, long len, const hc_opts *opts, hc_response *out);

/* Same, on any port (for daemons started as a separate process). */
int hc_request_port(int port, const char *method, const char *path, const char *content_type,
                    const char *body, long len, const hc_opts *opts, hc_response *out);

void hc_response_free(hc_response *r);

/* The value of response header name (case-insensitive) copied into out; false when absent. */
bool hc_header(const hc_response *r, const char *name, char *out, size_t size);

/* The body parsed as JSON (new reference) or NULL. */
json_t *hc_json(const hc_response *r);

/* The error code of a /v1 error body ({"error": {"code": ...}}) into out, "" when there is none;
 * returns out. The same for the field. */
const char *hc_error_code(const hc_response *r, char *out, size_t size);
const char *hc_error_field(const hc_response *r, char *out, size_t size);

/* Records checks (check.h) that r is a /v1 error reply with want_status, code want_code and, unless
 * want_field is NULL, field want_field; failures name file:line of the caller. Use HC_CHECK_ERROR. */
void hc_check_error(const char *file, int line, const hc_response *r, int want_status,
                    const char *want_code, const char *want_field);
#define HC_CHECK_ERROR(r, st, c, f) hc_check_error(__FILE__, __LINE__, &(r), (st), (c), (f))

/* A TCP connection to 127.0.0.1:port with Nagle off (so small writes leave at once): the socket
 * (caller closes), or -1 when it fails. */
int hc_connect(int port);

/* Sends all of [p, p+n) on a blocking socket without SIGPIPE; returns the bytes sent (fewer when
 * the peer closed or reset the connection). */
size_t hc_send_all(int fd, const void *p, size_t n);

/* Sends raw bytes to 127.0.0.1:port and reads the reply until the server closes the connection or
 * timeout_ms pass without data; returns the status of the first response line (0 if none) and
 * copies up to size-1 bytes of the reply into out (may be NULL). */
int hc_raw(int port, const char *bytes, size_t len, int timeout_ms, char *out, size_t size);

/* Reads a reply from fd until the server closes the connection or timeout_ms pass without data;
 * returns the status of its first response line (0 if none or a reset before it), out as hc_raw. */
int hc_raw_read(int fd, int timeout_ms, char *out, size_t size);

#endif
