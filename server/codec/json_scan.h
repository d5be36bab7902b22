/*
 * json_scan.h - the members of a JSON object, found without parsing their values.
 *
 * Request bodies carry megabytes of numbers under a few keys. The daemon first splits the body's
 * top-level object into (key, value text) pairs with this scanner, then parses tensor values with
 * srv_tensor_parse and small values (config, flags) with jansson's json_loadb on their own text.
 * The scanner checks the JSON syntax of everything it walks over (strings, escapes, numbers,
 * literals, nesting up to max_depth), so a body it accepts is valid JSON - except the values it
 * is told are tensors (srv_json_object_scan_lazy), which it only delimits, leaving their syntax to
 * srv_tensor_parse, which checks it as strictly: reading the numbers once instead of twice.
 */
#ifndef ATTND_JSON_SCAN_H
#define ATTND_JSON_SCAN_H

#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"

#define SRV_JSON_KEY_MAX 128

typedef struct srv_json_member {
    char key[SRV_JSON_KEY_MAX]; /* the key, unescaped, NUL-terminated                          */
    const char *value;          /* the value's text inside the scanned buffer (borrowed)       */
    size_t value_len;
    bool lazy;                  /* the value was only delimited (srv_json_object_scan_lazy)    */
} srv_json_member;

/* Scans text [json, json+len) that must hold one JSON object (white space around it allowed).
 * Writes up to max members to out and returns how many there are, or -1 with err filled:
 * SRV_E_BAD_JSON for a syntax error (message gives the byte offset), for a value that is not an
 * object, for a duplicate key, or for nesting deeper than max_depth; SRV_E_BAD_REQUEST when there are
 * more than max members or a key is longer than SRV_JSON_KEY_MAX-1. `field` names the object in
 * errors ("" for the body, "weights" for a map inside it). */
int srv_json_object_scan(const char *json, size_t len, const char *field, int max_depth,
                         srv_json_member *out, int max, srv_error *err);

/* srv_json_object_scan, except that a member whose key is in lazy_keys (NULL-terminated; "*" for
 * every key) and whose value is an array or object is only delimited: its brackets are matched,
 * its strings closed and its nesting kept within max_depth, but numbers, literals, commas, colons,
 * escapes, UTF-8 and duplicate keys inside it are not checked, and the member has `lazy` set.
 * Everything else is checked as srv_json_object_scan does, and when anything fails the result is
 * srv_json_object_scan's (the first error in the text, a syntax error inside a lazy value included).
 * The caller owes the rest: parse every lazy member with a parser as strict as this scanner
 * (srv_tensor_parse is), and when it refuses the body for any reason, let a syntax error anywhere
 * in the body win (srv_body_recheck), so clients see what a whole validation would have said. */
int srv_json_object_scan_lazy(const char *json, size_t len, const char *field, int max_depth,
                              const char *const *lazy_keys, srv_json_member *out, int max,
                              srv_error *err);

/* Strings known already to hold only plain bytes (no '"', '\\', control or non-ASCII byte), such as
 * the base64 texts decoded while the body arrived (predecode.h): close(cls, q) returns the position
 * of the closing quote of the string whose opening quote is at q, or NULL when it is not one of
 * them. Scanning the 16.8 MB string of an L request costs ~0.5 ms; this is a lookup. */
typedef struct srv_json_plain {
    const char *(*close)(void *cls, const char *open_quote);
    void *cls;
} srv_json_plain;

/* srv_json_object_scan_lazy that jumps over the plain strings inside lazy values (plain may be
 * NULL). The same result as without. */
int srv_json_object_scan_lazy_plain(const char *json, size_t len, const char *field, int max_depth,
                                    const char *const *lazy_keys, const srv_json_plain *plain,
                                    srv_json_member *out, int max, srv_error *err);

/* The lexer pieces the scanner is made of, for other hand-written parsers (tensor_parse.c). Positions are
 * pointers into text that ends at `end`; `base` is the start of that text (error messages give byte
 * offsets from it); errors are SRV_E_BAD_JSON naming `field`. */

/* For tests and benchmarks: long runs are skipped with AVX-512BW (level 2), AVX2 (1) or 64-bit
 * words only (0), at most what the CPU has; -1 returns to the best the CPU has (the default). */
void srv_json_scan_set_simd(int level);

/* The first byte at or after p that is not JSON white space (end if none). */
const char *srv_json_skip_ws(const char *p, const char *end);

/* Validates the JSON string starting at p (which must point at its opening '"'), including escapes,
 * \u surrogate pairs and UTF-8, and returns the position after its closing '"', or NULL with err.
 * When out is not NULL the unescaped UTF-8 is written there, at most cap-1 bytes and a NUL;
 * *out_len (may be NULL) gets the full unescaped length (> cap-1 means it was cut; a "\u0000" in
 * it shows as strlen(out) < *out_len). */
const char *srv_json_string(const char *p, const char *end, char *out, size_t cap, size_t *out_len,
                            const char *base, const char *field, srv_error *err);

/* Validates one JSON value starting at p (white space before it is skipped) whose containers may
 * nest to level max_depth, counting `depth` levels already open around it. Returns the position
 * after the value, or NULL with err (SRV_E_BAD_JSON). */
const char *srv_json_skip_value(const char *p, const char *end, int depth, int max_depth,
                                const char *base, const char *field, srv_error *err);

#endif
