/*
 * log.c - request and message lines on stderr (see log.h).
 */
#include "log.h"

#include <stdarg.h>
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

void srv_log_request(srv_log_format fmt, const char *method, const char *path, int status,
                     size_t bytes_in, size_t bytes_out, double ms)
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
        srv_buf_printf(&b, ",\"status\":%d,\"bytes_in\":%zu,\"bytes_out\":%zu,\"ms\":%.3f}", status,
                       bytes_in, bytes_out, ms);
    } else {
        /* the path is the client's: keep control characters out of the log */
        srv_buf_printf(&b, "%s %s ", ts, method);
        for (const char *p = path; *p; p++)
            srv_buf_putc(&b, (unsigned char)*p < 0x20 || *p == 0x7f ? '?' : *p);
        srv_buf_printf(&b, " %d in=%zu out=%zu %.3fms", status, bytes_in, bytes_out, ms);
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
        srv_buf_printf(&b, "%s %s: %s", ts, level, msg);
    }
    emit(&b);
}
