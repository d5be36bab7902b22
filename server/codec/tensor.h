/*
 * tensor.h - tensors as they travel in requests and responses, and their JSON forms (docs/api.md).
 *
 * Three forms on input, for every tensor field:
 *   1. nested arrays      [[0.1, 0.2], [0.3, 0.4]]         (shape inferred; ragged = 400)
 *   2. flat               {"shape": [2,2], "data": [0.1, 0.2, 0.3, 0.4], "dtype": "float32"}
 *   3. base64             {"shape": [2,2], "dtype": "float32", "base64": "..."}  (little-endian)
 * dtype "float32" (default) or "bool" (true/false in forms 1-2, one byte per element in form 3).
 * Float masks may carry the string "-inf"; NaN, "inf" and out-of-range numbers are a 400.
 *
 * Parsing does not build a jansson node per number: it reads the JSON text directly (hundreds of
 * MB/s) and writes straight into one allocation. Writing prints each float32 in the shortest
 * decimal form that reads back as the same float32.
 */
#ifndef ATTND_TENSOR_H
#define ATTND_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/error.h"
#include "half.h"

#define SRV_TENSOR_MAX_DIMS 8

typedef enum srv_dtype { SRV_DTYPE_F32 = 0, SRV_DTYPE_BOOL = 1 } srv_dtype;

typedef struct srv_tensor {
    srv_dtype dtype;
    int ndim;
    int64_t shape[SRV_TENSOR_MAX_DIMS];
    int64_t count;   /* product of shape (1 for a scalar, ndim 0)                        */
    void *data;      /* owned (free with srv_tensor_free): float[count] or uint8_t[count] */
} srv_tensor;

typedef struct srv_tensor_rules {
    const char *field;        /* name used in errors: "query", "weights.in_proj_weight"   */
    bool allow_bool;          /* masks: true/false and dtype "bool" accepted              */
    bool allow_neg_inf;       /* float masks: the string "-inf" accepted                  */
    int64_t max_elements;     /* refuse larger tensors with SRV_E_TOO_LARGE (<= 0: none)  */
    int max_depth;            /* nesting limit for form 1 and dims of "shape" (<= SRV_TENSOR_MAX_DIMS;
                                 out of range means SRV_TENSOR_MAX_DIMS)                   */
    struct srv_predecoder *predecoded; /* form 3 texts decoded already (predecode.h), or NULL */
    const char *body;         /* the text the predecoder's offsets count from (the body)  */
} srv_tensor_rules;

/* Parses one JSON value (text [json, json+len), which holds exactly that value, surrounding white
 * space allowed) in any of the three forms into out (zeroed first; on error nothing is owned).
 * Bool input in form 1 with allow_bool gives SRV_DTYPE_BOOL; numbers give SRV_DTYPE_F32; mixing
 * them is a 400. Returns 0, or -1 with err filled (SRV_E_BAD_JSON, SRV_E_BAD_VALUE, SRV_E_SHAPE,
 * SRV_E_BAD_REQUEST, SRV_E_UNKNOWN_FIELD, SRV_E_MISSING_FIELD, SRV_E_TOO_LARGE, SRV_E_NOMEM);
 * err->field is rules->field, the message names the element ("query[1][0]", "query.shape").
 * Decisions: a zero dimension ([] / [[]] / a 0 in "shape") is SRV_E_SHAPE "empty"; a bare number is a
 * 0-d tensor (ndim 0, count 1), as is "shape": []; ragged arrays and too deep nesting are
 * SRV_E_SHAPE; numbers beyond float32 (1e39) are SRV_E_BAD_VALUE, tiny ones round to 0 as strtof
 * does; base64 bool tensors hold bytes 0/1. Strict JSON: NaN/Infinity literals are SRV_E_BAD_JSON. */
int srv_tensor_parse(srv_tensor *out, const char *json, size_t len, const srv_tensor_rules *rules,
                     srv_error *err);

void srv_tensor_free(srv_tensor *t); /* frees data; accepts NULL and zeroed tensors */

/* The shape a tensor value in the flat or base64 form declares (text [json, json+len): an object
 * with a "shape" member), read without decoding or checking its data (tensor_peek.c): true with
 * shape[0, *ndim) filled, or false when the text does not say (the nested form, no "shape", or
 * anything unexpected). A look before the work, never a verdict: srv_tensor_parse reads the same
 * text strictly and judges it (the shape it finds is the one peeked when both succeed). */
bool srv_tensor_peek_shape(const char *json, size_t len, int64_t shape[SRV_TENSOR_MAX_DIMS],
                           int *ndim);

typedef enum srv_encoding { SRV_ENC_NESTED = 0, SRV_ENC_FLAT, SRV_ENC_BASE64 } srv_encoding;

/* Parses "nested" | "flat" | "base64"; -1 for anything else. */
int srv_encoding_parse(const char *s, srv_encoding *out);

/* Appends a float32 tensor [shape] in the chosen form to b, without white space:
 *   nested  [[0.1,-2],[3,4]]        (ndim 0: a bare number)
 *   flat    {"shape":[2,2],"dtype":"float32","data":[0.1,-2,3,4]}
 *   base64  {"shape":[2,2],"dtype":"float32","base64":"..."}   (little-endian float32)
 * Numbers as srv_format_float writes them. Non-finite values are written as the strings "-inf" /
 * "inf" / "nan" (only masks and scores in traces can hold -inf). Returns 0 or -1 (out of memory). */
int srv_tensor_write(srv_buf *b, const float *data, int ndim, const int64_t *shape,
                     srv_encoding enc);

/* srv_tensor_write with the values in another precision (half.h; the weights a client chose in
 * half the bytes): nested and flat hold each value rounded to dtype (its float32 form, as above),
 * flat and base64 say "dtype": "float16" | "bfloat16", base64 carries 2 bytes a value
 * (little-endian). dtype SRV_WIRE_F32 is srv_tensor_write. */
int srv_tensor_write_as(srv_buf *b, const float *data, int ndim, const int64_t *shape,
                        srv_encoding enc, srv_wire_dtype dtype);

/* An int32 tensor (a top-k's key indices): nested integers, flat {"shape", "dtype": "int32",
 * "data": [...]}, base64 4 bytes a value, little-endian. */
int srv_tensor_write_i32(srv_buf *b, const int32_t *data, int ndim, const int64_t *shape,
                         srv_encoding enc);

#endif
