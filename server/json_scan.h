/*
 * json_scan.h - the members of a JSON object, found without parsing their values.
 *
 * Request bodies carry megabytes of numbers under a few keys. The daemon first splits the body's
 * top-level object into (key, value text) pairs with this scanner, then parses tensor values with
 * srv_tensor_parse and small values (config, flags) with jansson's json_loadb on their own text.
 * The scanner checks the JSON syntax of everything it walks over (strings, escapes, numbers,
 * literals, nesting up to max_depth), so a body it accepts is valid JSON.
 */
#ifndef ATTND_JSON_SCAN_H
#define ATTND_JSON_SCAN_H

#include <stddef.h>

#include "error.h"

#define SRV_JSON_KEY_MAX 128

typedef struct srv_json_member {
    char key[SRV_JSON_KEY_MAX]; /* the key, unescaped, NUL-terminated                          */
    const char *value;          /* the value's text inside the scanned buffer (borrowed)       */
    size_t value_len;
} srv_json_member;

/* Scans text [json, json+len) that must hold one JSON object (white space around it allowed).
 * Writes up to max members to out and returns how many there are, or -1 with err filled:
 * SRV_E_BAD_JSON for a syntax error (message gives the byte offset), for a value that is not an
 * object, for a duplicate key, or for nesting deeper than max_depth; SRV_E_BAD_REQUEST when there are
 * more than max members or a key is longer than SRV_JSON_KEY_MAX-1. `field` names the object in
 * errors ("" for the body, "weights" for a map inside it). */
int srv_json_object_scan(const char *json, size_t len, const char *field, int max_depth,
                         srv_json_member *out, int max, srv_error *err);

#endif
