/*
 * accept.h - what an Accept header (RFC 9110 12.5.1) asks of one media type.
 *
 * The header is a list of media ranges, each with parameters and a weight:
 *   Accept: application/json;q=0.5, application/octet-stream, text/html;level=1;q=0
 * Members are separated by commas (empty members ignored, as RFC 9110 5.6.1.2 says a recipient
 * must), parameter values may be tokens or quoted strings (a comma inside quotes separates
 * nothing), names and types compare case-insensitively, and q is a qvalue: "0" to "1" with at most
 * three decimals. A member that breaks this grammar ("text/html;q=2", "q=.5", "json") is skipped,
 * not guessed at.
 */
#ifndef ATTND_ACCEPT_H
#define ATTND_ACCEPT_H

/* The quality the Accept value `accept` gives the media type `type` ("application/json"), in
 * thousandths (0..1000; 1000 when the member has no q): that of the first well-formed member that
 * names it exactly (the wildcard ranges, any type or a type with any subtype, name no type here:
 * each caller has its default). *pos (may be NULL) gets that member's index among the list's
 * non-empty members. -1 when no well-formed member names it (accept NULL: no header). */
int srv_accept_quality(const char *accept, const char *type, int *pos);

#endif
