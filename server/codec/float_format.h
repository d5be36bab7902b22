/*
 * float_format.h - float32 to text: the shortest decimal that reads back as the same float32 (float_format.c).
 */
#ifndef ATTND_FLOAT_FORMAT_H
#define ATTND_FLOAT_FORMAT_H

#include <stddef.h>

/* Writes the shortest decimal that reads back (strtof) as exactly f, closest to f among the
 * shortest, and a NUL; returns the chars written (at most 15). buf needs room for 16 bytes.
 * f must be finite. Style: plain when 1e-4 <= |f| < 1e9 ("0.1", "1", "-0", "123.5", "0.0001"),
 * else d[.ddd]e[-]x ("1e-7", "3.4028235e38"); integers have no ".0". */
int srv_format_float(char *buf, float f);

/* Bytes srv_format_floats may need for n numbers: 16 per number (15 chars and a separator) and
 * room for its unconditional stores past the last one. */
#define SRV_FORMAT_FLOATS_ROOM(n) (16 * (size_t)(n) + 16)

/* Writes the n floats of x [n] as srv_format_float does, separated by sep (none before the first,
 * none after the last), without a NUL; non-finite values as the JSON strings "\"nan\"", "\"inf\"",
 * "\"-inf\"". out needs room for SRV_FORMAT_FLOATS_ROOM(n) bytes (bytes past the returned length
 * are scratch). Returns the bytes written. The hot loop of every JSON response. */
size_t srv_format_floats(char *out, const float *x, size_t n, char sep);

#endif
