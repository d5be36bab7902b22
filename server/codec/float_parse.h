/*
 * float_parse.h - text to float32: JSON numbers correctly rounded (float_parse.c), and the check for inf/NaN
 * among float32 words read as bytes.
 */
#ifndef ATTND_FLOAT_PARSE_H
#define ATTND_FLOAT_PARSE_H

#include <stdbool.h>
#include <stddef.h>

/* Parses a JSON number at [p, end) into a correctly rounded float32 (as strtof would, in the C
 * locale whatever the process's locale); returns the number of bytes consumed, or 0 when [p, end)
 * does not start with a JSON number (the caller checks what follows: "01" consumes 1 byte).
 * Sets *overflow (and *out = ±inf) when the value is finite in decimal but too large for float32. */
size_t srv_parse_float(const char *p, const char *end, float *out, bool *overflow);

/* Whether any of the count float32 values at p (any alignment) is inf or NaN: one branch-free pass
 * (vectorised by the compiler), for checks whose usual answer is "none" and which only then walk the
 * values to name the first bad one. */
bool srv_floats_any_special(const void *p, size_t count);

#endif
