/*
 * log.c - request and message lines on stderr (see log.h).
 */
#include "log.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"

static void timestamp(char *out, size_t n)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t k = strftime(out, n, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + k, n - k, ".%03ldZ", ts.tv_nsec / 1000000);
}

static void emit(srv_buf *b)
{
    srv_buf_putc(b, '\n');
    if (!b->failed) {
        ssize_t w = write(STDERR_FILENO, b->data, b->len);
        (void)w;
    }
    srv_buf_free(b);
}

/* s with its control bytes and DEL written as \xNN. A client's field (quote true) goes between
 * double quotes, with '"' and '\\' escaped and bytes of 0x80 and up as \xNN too (a terminal may
 * take them for C1 controls; no method or path attnd serves has any). What a client sends can then
 * neither end the line nor drive the operator's terminal, and a field's end is never ambiguous.
 * Messages (quote false) keep their UTF-8: a data dir's path may have some. */
static void put_escaped(srv_buf *b, const char *s, bool quote)
{
    static const char hex[] = "0123456789abcdef";
    if (quote)
        srv_buf_putc(b, '"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p < 0x20 || *p == 0x7f || (quote && *p >= 0x80)) {
            char e[4] = {'\\', 'x', hex[*p >> 4], hex[*p & 15]};
            srv_buf_append(b, e, 4);
        } else if (quote && (*p == '"' || *p == '\\')) {
            char e[2] = {'\\', (char)*p};
            srv_buf_append(b, e, 2);
        } else {
            srv_buf_putc(b, (char)*p);
        }
    }
    if (quote)
        srv_buf_putc(b, '"');
}

void srv_log_request(srv_log_format fmt, const char *method, const char *path, int status,
                     size_t bytes_in, size_t bytes_out, double ms, const char *request_id)
{
    if (fmt == SRV_LOG_OFF)
        return;
    char ts[40];
    timestamp(ts, sizeof ts);
    srv_buf b;
    srv_buf_init(&b);
    if (fmt == SRV_LOG_JSON) {
        srv_buf_printf(&b, "{\"ts\":\"%s\",\"method\":", ts);
        srv_buf_json_string(&b, method);
        srv_buf_puts(&b, ",\"path\":");
        srv_buf_json_string(&b, path);
        srv_buf_printf(&b, ",\"status\":%d,\"bytes_in\":%zu,\"bytes_out\":%zu,\"ms\":%.3f", status,
                       bytes_in, bytes_out, ms);
        if (request_id) {
            srv_buf_puts(&b, ",\"request_id\":");
            srv_buf_json_string(&b, request_id);
        }
        srv_buf_putc(&b, '}');
    } else {
        /* method and path are the client's: quoted and escaped */
        srv_buf_printf(&b, "%s ", ts);
        put_escaped(&b, method, true);
        srv_buf_putc(&b, ' ');
        put_escaped(&b, path, true);
        srv_buf_printf(&b, " %d in=%zu out=%zu %.3fms", status, bytes_in, bytes_out, ms);
        if (request_id) { /* the HTTP layer lets only sane ids through; still no control bytes */
            srv_buf_puts(&b, " id=");
            for (const char *p = request_id; *p; p++)
                srv_buf_putc(&b, (unsigned char)*p <= 0x20 || *p == 0x7f ? '?' : *p);
        }
    }
    emit(&b);
}

void srv_log(srv_log_format fmt, const char *level, const char *msgfmt, ...)
{
    if (fmt == SRV_LOG_OFF && strcmp(level, "error") != 0)
        return;
    char ts[40], msg[1024];
    timestamp(ts, sizeof ts);
    va_list ap;
    va_start(ap, msgfmt);
    vsnprintf(msg, sizeof msg, msgfmt, ap);
    va_end(ap);
    srv_buf b;
    srv_buf_init(&b);
    if (fmt == SRV_LOG_JSON) {
        srv_buf_printf(&b, "{\"ts\":\"%s\",\"level\":", ts);
        srv_buf_json_string(&b, level);
        srv_buf_puts(&b, ",\"msg\":");
        srv_buf_json_string(&b, msg);
        srv_buf_putc(&b, '}');
    } else {
        /* messages may carry names and reasons that came from outside: escaped, unquoted */
        srv_buf_printf(&b, "%s %s: ", ts, level);
        put_escaped(&b, msg, false);
    }
    emit(&b);
}
