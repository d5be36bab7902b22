/*
 * buf.h - a growable byte buffer for building response bodies fast.
 *
 * All appends return 0, or -1 when memory runs out (the buffer then keeps what it had and remembers
 * the failure in `failed`, so a caller may append many times and check once).
 */
#ifndef ATTND_BUF_H
#define ATTND_BUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct srv_buf {
    char *data;  /* owned; NUL-terminated when len > 0 or after srv_buf_cstr */
    size_t len;
    size_t cap;
    bool failed;
} srv_buf;

void srv_buf_init(srv_buf *b);
void srv_buf_free(srv_buf *b);                       /* accepts a zeroed buffer               */
int srv_buf_reserve(srv_buf *b, size_t extra);         /* room for extra more bytes (+1 NUL)    */
int srv_buf_append(srv_buf *b, const void *p, size_t n);
int srv_buf_puts(srv_buf *b, const char *s);
int srv_buf_putc(srv_buf *b, char c);
int srv_buf_printf(srv_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int srv_buf_json_string(srv_buf *b, const char *s);   /* "s" with JSON escapes                 */
const char *srv_buf_cstr(srv_buf *b);                  /* NUL-terminated view ("" when empty)   */
char *srv_buf_steal(srv_buf *b, size_t *len);         /* hands the memory to the caller        */

#endif
