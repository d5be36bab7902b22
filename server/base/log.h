/*
 * log.h - one line per request, and start-up/shutdown messages, on stderr.
 *
 * Text:  2026-11-22T03:41:07.123Z "PUT" "/v1/layers/demo" 201 in=85 out=312 1.250ms id=4bf92f3577b34da6
 * JSON:  {"ts":"2026-11-22T03:41:07.123Z","method":"PUT","path":"/v1/layers/demo","status":201,
 *         "bytes_in":85,"bytes_out":312,"ms":1.250,"request_id":"4bf92f3577b34da6"}
 * Each line is written with one write(2), so lines from different threads never interleave. What a
 * request brings (method, path) is never written raw: in text, quoted, with '"' and '\\' escaped
 * and every byte outside printable ASCII as \xNN; in JSON, as JSON strings (control characters
 * escaped, invalid UTF-8 as U+FFFD). A client can neither split a line nor reach the operator's
 * terminal with a control sequence. Messages have their control bytes written as \xNN too.
 */
#ifndef ATTND_LOG_H
#define ATTND_LOG_H

#include <stddef.h>

typedef enum srv_log_format {
    SRV_LOG_TEXT = 0, /* one human-readable line per request               */
    SRV_LOG_JSON,     /* one JSON object per line                           */
    SRV_LOG_OFF,      /* nothing (tests)                                    */
} srv_log_format;

/* Logs one completed request; request_id may be NULL (then left out). */
void srv_log_request(srv_log_format fmt, const char *method, const char *path, int status,
                     size_t bytes_in, size_t bytes_out, double ms, const char *request_id);

/* Logs a message ("level" is "info", "warn" or "error"); printf-style. Printed even with
 * --log-format off when level is "error". */
void srv_log(srv_log_format fmt, const char *level, const char *msgfmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
