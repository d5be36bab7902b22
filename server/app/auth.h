/*
 * auth.h - who may change what: the API key (--api-key-file / ATTND_API_KEY), --auth-reads and
 * --read-only.
 *
 * With a key set, a request that changes state (a route flagged SRV_ROUTE_CHANGES) must carry
 * `Authorization: Bearer <key>`; with guard_reads every request must, except the probes and
 * /metrics (orchestrators call those without credentials). The key is compared in constant time
 * (the time depends on the key's length only, never on how much of a guess is right).
 * A read-only daemon refuses every change with 403 (SRV_E_FORBIDDEN) before looking at the key.
 */
#ifndef ATTND_AUTH_H
#define ATTND_AUTH_H

#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"

#define SRV_API_KEY_MAX 256

typedef struct srv_auth {
    char key[SRV_API_KEY_MAX]; /* "" = no key                                               */
    size_t key_len;
    bool guard_reads;          /* reads need the key too                                     */
    bool read_only;            /* refuse every change                                        */
} srv_auth;

/* Sets up a from the options: the key comes from key_file (its first line, without its line end,
 * "\n" or "\r\n"; nothing else is trimmed) when key_file is not empty, else from key (the
 * ATTND_API_KEY or --api-key value; may be ""). A key file that cannot be read, or holds an empty
 * key or one longer than SRV_API_KEY_MAX-1, is an error (the daemon must not start unguarded by
 * mistake); so is a key, from any source, that starts or ends with a space or holds a control
 * character: a client's Authorization value is read without its surrounding blanks and cannot
 * carry control characters, so no request could ever match it. Returns 0 or -1 with err filled. */
int srv_auth_init(srv_auth *a, const char *key_file, const char *key, bool guard_reads,
                  bool read_only, srv_error *err);

/* Decides whether a request may go on. changes: the route changes state; probe: /healthz,
 * /readyz, /metrics, the KServe health routes and the viewer's files (never need a key). authorization: the request's
 * Authorization header or NULL. Returns 0 (go on) or -1 with err: SRV_E_FORBIDDEN (read-only) or
 * SRV_E_UNAUTHORIZED (missing/wrong key; the reply carries `WWW-Authenticate: Bearer`). */
int srv_auth_check(const srv_auth *a, bool changes, bool probe, const char *authorization,
                   srv_error *err);

/* Constant-time equality of given[0..given_len) and key[0..key_len): the running time depends
 * only on key_len. */
bool srv_auth_equal(const char *given, size_t given_len, const char *key, size_t key_len);

#endif
