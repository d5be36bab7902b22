/*
 * positions.h - the positions of a request (docs/api.md: `positions` of the queries,
 * `key_positions` of the keys) read from JSON or from raw bytes.
 *
 * Positions are whole numbers in [0, MHA_MAX_POSITION) = [0, 2^24), shaped [len] (the same for every
 * batch) or [N,len]. In /v1 they come in the three forms of tensor.h:
 *   1. nested   [0, 1, 2]  or  [[0, 1, 2], [5, 6, 7]]
 *   2. flat     {"shape": [2,3], "data": [0, 1, 2, 5, 6, 7], "dtype": "int64"}   (dtype optional:
 *               "int64" or "int32")
 *   3. base64   {"shape": [2,3], "dtype": "int64" | "int32", "base64": "..."}     (little-endian)
 * In /v2 as INT64 or INT32 inputs: "data" (flat or nested as the shape says) or binary bytes.
 * A number with a fraction (1.5), a negative one, one past 2^24 - 1 or not a number at all is a 400
 * naming the element ("positions[1][2]"); so is a shape of neither one nor two dimensions. A JSON
 * number written with a point but no fraction (3.0, as numpy's floats print) is taken as the whole
 * number it is. Small tensors: parsed with jansson.
 */
#ifndef ATTND_POSITIONS_H
#define ATTND_POSITIONS_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/error.h"

typedef struct srv_positions {
    int ndim;         /* 0: absent; else 1 ([len]) or 2 ([N,len])    */
    int64_t shape[2];
    int64_t count;    /* product of shape                          */
    int64_t *data;    /* owned: [count], row-major                   */
} srv_positions;

/* Reads v (any of the three /v1 forms) into out (zeroed first; nothing owned on error). field
 * names the request member in errors ("positions"); max_elements caps the count (413 past it).
 * Returns 0, or -1 with err: 400 bad_request (a value, a member, a dtype), 400 shape_mismatch (rank,
 * ragged or empty arrays, data that does not fill the shape), 413, 503 (memory). */
int srv_positions_from_json(srv_positions *out, const json_t *v, const char *field,
                            int64_t max_elements, srv_error *err);

/* Reads nbytes of little-endian integers of elem_size bytes (8: int64, 4: int32), shaped [shape]
 * (ndim 1 or 2, product count), into out. Same checks and errors as above. */
int srv_positions_from_bytes(srv_positions *out, const void *bytes, size_t nbytes, int elem_size,
                             int ndim, const int64_t *shape, const char *field, srv_error *err);

void srv_positions_free(srv_positions *p); /* frees data; accepts NULL and a zeroed struct */

#endif
