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
/* "s" with JSON escapes (every control character, C0, DEL and C1, as \u00XX); bytes that are not
 * valid UTF-8 become U+FFFD, so the output is valid JSON. */
int srv_buf_json_string(srv_buf *b, const char *s);
const char *srv_buf_cstr(srv_buf *b);                  /* NUL-terminated view ("" when empty)   */
/* Hands the contents (NUL-terminated, malloc'd: caller frees) to the caller and leaves b empty and
 * initialised; *len (may be NULL) gets the length. NULL when the buffer failed (b keeps its memory,
 * free it with srv_buf_free). */
char *srv_buf_steal(srv_buf *b, size_t *len);

#endif
