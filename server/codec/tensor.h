/*
 * tensor.h - tensors as they travel in requests and responses, and their JSON forms (SPEC §2).
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

#include "buf.h"
#include "error.h"

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

/* Whether any of the count float32 values at p (any alignment) is inf or NaN: one branch-free pass
 * (vectorised by the compiler), for checks whose usual answer is "none" and which only then walk the
 * values to name the first bad one. */
bool srv_floats_any_special(const void *p, size_t count);

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

/* Parses a JSON number at [p, end) into a correctly rounded float32 (as strtof would, in the C
 * locale whatever the process's locale); returns the number of bytes consumed, or 0 when [p, end)
 * does not start with a JSON number (the caller checks what follows: "01" consumes 1 byte).
 * Sets *overflow (and *out = ±inf) when the value is finite in decimal but too large for float32. */
size_t srv_parse_float(const char *p, const char *end, float *out, bool *overflow);

/* Standard base64 (RFC 4648, padding required, no line breaks). decode returns decoded length or
 * -1 on bad input; dst needs room for (len/4)*3 bytes. Inputs of SRV_BASE64_SPLIT_MIN bytes or more
 * (text for decode, raw bytes for encode) are processed by this thread and one more, with the same
 * result (with SIMD one thread does 15-30 GB/s; below ~4 MB a second thread, ~0.1 ms to start and
 * join, gains nothing). */
#define SRV_BASE64_SPLIT_MIN ((size_t)4 << 20)
long srv_base64_decode(uint8_t *dst, const char *src, size_t len);
int srv_base64_encode(srv_buf *b, const uint8_t *src, size_t len);
/* srv_base64_decode for float32 data: also sets *special to whether any decoded 32-bit word (at
 * dst + 0, 4, 8, ...) has all exponent bits set, i.e. is inf or NaN (false when it returns -1). */
long srv_base64_decode_f32(uint8_t *dst, bool *special, const char *src, size_t len);
/* For tests and benchmarks: the kernel the srv_base64_* functions use from now on, process-wide (do
 * not call it while they run): AUTO = the best the processor has (the default). 0, or -1 when the
 * processor lacks that kernel (nothing changes). */
#define SRV_BASE64_PATH_AUTO 0
#define SRV_BASE64_PATH_SCALAR 1
#define SRV_BASE64_PATH_AVX2 2
#define SRV_BASE64_PATH_AVX512VBMI 3
int srv_base64_set_path(int path);

#endif
