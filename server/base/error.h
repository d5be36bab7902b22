/*
 * error.h - every error the daemon can answer with, and the one table that turns them into HTTP.
 *
 * Code that finds a fault fills an srv_error (first error wins: srv_error_set does nothing when the
 * error is already set) and returns -1; the HTTP layer turns it into a status and the JSON body
 * {"error": {"code", "message", "field"}} in exactly one place (srv_error_status / srv_error_json).
 * Client faults (4xx) and server faults (5xx) are separate codes.
 */
#ifndef ATTND_ERROR_H
#define ATTND_ERROR_H

#include <stdarg.h>

typedef enum srv_code {
    SRV_OK = 0,
    SRV_E_BAD_JSON,         /* 400 body is not valid JSON                                      */
    SRV_E_BAD_REQUEST,      /* 400 a field has the wrong type or an impossible value           */
    SRV_E_BAD_VALUE,        /* 400 NaN / infinity / out-of-range number in a tensor            */
    SRV_E_SHAPE,            /* 400 a tensor's shape does not fit ("shape_mismatch")            */
    SRV_E_UNKNOWN_FIELD,    /* 400 a field the endpoint does not know (typo protection)        */
    SRV_E_MISSING_FIELD,    /* 400 a required field is absent                                  */
    SRV_E_BAD_NAME,         /* 400 layer name not [A-Za-z0-9._-]{1,64}, or starts with '.'     */
    SRV_E_UNAUTHORIZED,     /* 401 missing or wrong API key                                    */
    SRV_E_FORBIDDEN,        /* 403 read-only daemon refuses a change                           */
    SRV_E_NOT_FOUND,        /* 404 no such path                                                */
    SRV_E_LAYER_NOT_FOUND,  /* 404 no such layer                                               */
    SRV_E_METHOD,           /* 405 wrong method for the path (Allow header set)                */
    SRV_E_CONFLICT,         /* 409 If-Match version mismatch                                   */
    SRV_E_LENGTH_REQUIRED,  /* 411 body needed but neither Content-Length nor chunked          */
    SRV_E_TOO_LARGE,        /* 413 body, tensor or trace over a limit                          */
    SRV_E_TIMEOUT,          /* 408 headers or body too slow (--header-timeout, --min-body-rate) */
    SRV_E_MEDIA_TYPE,       /* 415 wrong Content-Type                                          */
    SRV_E_INVALID_CONFIG,   /* 422 layer config invalid                                        */
    SRV_E_INTERNAL,         /* 500 our bug                                                     */
    SRV_E_NOMEM,            /* 503 out of memory (retry later)                                 */
    SRV_E_UNAVAILABLE,      /* 503 shutting down, not ready, or busy (Retry-After)             */
    SRV_E_NOT_IMPLEMENTED,  /* 501 a transfer coding attnd does not speak (RFC 9112 6.1)        */
    SRV_E_URI_TOO_LONG,     /* 414 a query with more arguments than attnd reads                */
    SRV_E_INSUFFICIENT_STORAGE, /* 507 the disk is full, or the layers would pass --max-weights-bytes */
    SRV_E_TOO_COSTLY,       /* 413 a pass estimated to cost more than --max-request-flops      */
    SRV_E_CANCELLED,        /* 499 the client hung up and the work for it stopped (no reply)    */
    SRV_E_COUNT
} srv_code;

typedef struct srv_error {
    srv_code code;
    char field[64];    /* the request field at fault ("query", "config.embed_dim"), or ""     */
    char message[320]; /* what is wrong and what the client can do about it                    */
} srv_error;

/* Sets err (if not NULL and not already set) and returns -1, so callers can `return srv_error_set(..)`. */
int srv_error_set(srv_error *err, srv_code code, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int srv_error_setv(srv_error *err, srv_code code, const char *field, const char *fmt, va_list ap);

/* The HTTP status for a code (the one table). */
int srv_error_status(srv_code code);

/* The stable machine-readable name of a code: "bad_json", "shape_mismatch", ... (static). */
const char *srv_error_name(srv_code code);

/* Turns an engine error into a daemon error (config -> 422, shape -> 400, limit -> 413, ...);
 * returns -1. `prefix` is put before the engine's field name ("config." or "weights."), may be "".
 * An engine error that holds nothing (MHA_OK) sets nothing, so it never hides the real one. */
struct mha_error;
int srv_error_from_mha(srv_error *err, const struct mha_error *e, const char *prefix);

#endif
