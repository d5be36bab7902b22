/*
 * request_id.h - the id that follows one request through a proxy, the access log and an error
 * report (X-Request-Id).
 *
 * A client's (or proxy's) X-Request-Id is kept when it is sane: 1 to SRV_REQUEST_ID_MAX characters of
 * A-Z a-z 0-9 and - _ . : / + = @ (what uuids, ULIDs, nginx's $request_id, AWS trace ids and base64
 * ids are made of). Anything else - empty, too long, spaces, quotes, control or non-ASCII bytes - is
 * replaced by one made here, as is a missing one: 32 lower-case hex digits (128 random bits), the
 * form of nginx's $request_id. The id is echoed on the reply, written in the access log line, and
 * given to the error_reply hook (srv_request.id) for the error body.
 */
#ifndef ATTND_REQUEST_ID_H
#define ATTND_REQUEST_ID_H

#include <stdbool.h>
#include <stddef.h>

#define SRV_REQUEST_ID_MAX 128
#define SRV_REQUEST_ID_HEADER "X-Request-Id"

/* True when the client's id may be used as it is. */
bool srv_request_id_valid(const char *id);

/* Fills out (SRV_REQUEST_ID_MAX + 1 bytes) with given when it is valid, else with a new id; returns
 * true when given was kept. given may be NULL. Thread-safe. */
bool srv_request_id_take(const char *given, char *out);

#endif
