/*
 * buf.c - the growable byte buffer response bodies are built in (see buf.h).
 *
 * Growth doubles the capacity so appending n bytes one at a time costs O(n). A failed allocation
 * leaves the contents as they were and sets `failed`; every later append then fails at once, so a
 * writer may check once at the end.
 */
#include "buf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void srv_buf_init(srv_buf *b)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->failed = false;
}

void srv_buf_free(srv_buf *b)
{
    if (!b)
        return;
    free(b->data);
    srv_buf_init(b);
}

int srv_buf_reserve(srv_buf *b, size_t extra)
{
    if (b->failed)
        return -1;
    if (extra > SIZE_MAX - 1 - b->len) {
        b->failed = true;
        return -1;
    }
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *p = realloc(b->data, cap);
    if (!p) {
        b->failed = true;
        return -1;
    }
    b->data = p;
    b->cap = cap;
    return 0;
}

int srv_buf_append(srv_buf *b, const void *p, size_t n)
{
    if (srv_buf_reserve(b, n) != 0)
        return -1;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int srv_buf_puts(srv_buf *b, const char *s)
{
    return srv_buf_append(b, s, strlen(s));
}

int srv_buf_putc(srv_buf *b, char c)
{
    if (srv_buf_reserve(b, 1) != 0)
        return -1;
    b->data[b->len++] = c;
    b->data[b->len] = '\0';
    return 0;
}

int srv_buf_printf(srv_buf *b, const char *fmt, ...)
{
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = true;
        return -1;
    }
    if ((size_t)n < sizeof small)
        return srv_buf_append(b, small, (size_t)n);
    if (srv_buf_reserve(b, (size_t)n) != 0)
        return -1;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

/* Length of the valid UTF-8 sequence at s[0..n), or 0 when it is not one (overlong forms,
 * surrogates and code points above U+10FFFF are invalid). */
static size_t utf8_seq_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len;
    unsigned min;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        min = 0x10000;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    unsigned cp = c & (0x7F >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

/* Writes s as a JSON string. Control characters, '"' and '\\' are escaped; bytes that are not valid
 * UTF-8 (a client's key echoed in an error, say) become U+FFFD, so the output is always valid JSON. */
int srv_buf_json_string(srv_buf *b, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    if (srv_buf_reserve(b, n + 2) != 0)
        return -1;
    srv_buf_putc(b, '"');
    size_t i = 0;
    while (i < n) {
        size_t run = i;
        while (run < n && p[run] >= 0x20 && p[run] < 0x7f && p[run] != '"' && p[run] != '\\')
            run++;
        if (run > i) {
            srv_buf_append(b, p + i, run - i);
            i = run;
            continue;
        }
        unsigned c = p[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            srv_buf_append(b, e, 2);
            i++;
        } else if (c < 0x20 || c == 0x7f) {
            char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            switch (c) {
            case '\n': srv_buf_append(b, "\\n", 2); break;
            case '\r': srv_buf_append(b, "\\r", 2); break;
            case '\t': srv_buf_append(b, "\\t", 2); break;
            case '\b': srv_buf_append(b, "\\b", 2); break;
            case '\f': srv_buf_append(b, "\\f", 2); break;
            default: srv_buf_append(b, e, 6); break;
            }
            i++;
        } else {
            size_t len = utf8_seq_len(p + i, n - i);
            if (len == 2 && c == 0xC2 && p[i + 1] < 0xA0) {
                /* U+0080..U+009F, the C1 controls: escaped as DEL and C0 are, so no JSON text
                 * attnd writes (a log line on a terminal) carries a raw control character */
                char e[6] = {'\\', 'u', '0', '0', hex[p[i + 1] >> 4], hex[p[i + 1] & 15]};
                srv_buf_append(b, e, 6);
                i += 2;
            } else if (len) {
                srv_buf_append(b, p + i, len);
                i += len;
            } else {
                srv_buf_append(b, "\xEF\xBF\xBD", 3);
                i++;
            }
        }
    }
    return srv_buf_putc(b, '"');
}

const char *srv_buf_cstr(srv_buf *b)
{
    if (b->data)
        return b->data; /* every append leaves a NUL after the contents */
    if (srv_buf_reserve(b, 0) != 0)
        return "";
    b->data[0] = '\0';
    return b->data;
}

char *srv_buf_steal(srv_buf *b, size_t *len)
{
    if (b->failed || srv_buf_reserve(b, 0) != 0) {
        if (len)
            *len = 0;
        return NULL;
    }
    char *p = b->data;
    p[b->len] = '\0';
    if (len)
        *len = b->len;
    srv_buf_init(b);
    return p;
}
