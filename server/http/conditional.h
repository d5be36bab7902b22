/*
 * conditional.h - whether a conditional GET's If-None-Match (RFC 9110 13.1.2) names a
 * representation's current entity tag, so that it is answered 304 Not Modified without a body.
 *
 * The header is "*" or a comma-separated list of entity tags ("\"3\"", W/"3"); blanks and empty
 * members are ignored. If-None-Match compares weakly: W/ is dropped before the opaque tags are
 * compared. A value that is not a list of tags names nothing (the GET is answered in full).
 */
#ifndef ATTND_CONDITIONAL_H
#define ATTND_CONDITIONAL_H

#include <stdbool.h>

/* True when header (NULL: no If-None-Match) is "*" or lists tag (with its quotes: "\"3\""). */
bool srv_none_match_hits(const char *header, const char *tag);

#endif
