/*
 * json_walk.h - the members of a JSON object, and the end of a value, in text that
 * srv_json_object_scan has already validated (json_scan.h).
 *
 * An Open Inference Protocol body holds its tensors inside an array of objects ("inputs"), below
 * the top level that the body's scan splits. Walking down to them again with the validating
 * scanner would read megabytes of numbers twice; these walk the same text checking only what
 * cannot have been checked for them: the members an object may hold, a duplicate, a key too long.
 * They never read past end, whatever the text.
 */
#ifndef ATTND_JSON_WALK_H
#define ATTND_JSON_WALK_H

#include "json_scan.h"

/* The end of the JSON value that starts at p, or NULL when the text ends first. Only strings and
 * nesting are tracked: the text was validated before. */
const char *srv_json_walk_value(const char *p, const char *end);

/* Splits the object at p (*p is '{') into up to max members of m; *after gets the position after
 * the object. Returns the number of members, or -1 with err naming `field`: a duplicate member
 * (SRV_E_BAD_JSON), a key too long or holding a NUL, more than max members (SRV_E_BAD_REQUEST), or
 * text cut short. */
int srv_json_walk_members(srv_json_member *m, int max, const char **after, const char *p,
                          const char *end, const char *field, srv_error *err);

#endif
