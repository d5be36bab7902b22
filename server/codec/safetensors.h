/*
 * safetensors.h - read and write the safetensors format (github.com/huggingface/safetensors).
 *
 * The format: an 8-byte little-endian unsigned header length N, then N bytes of a UTF-8 JSON object
 *   {"__metadata__": {"k": "v", ...},                         (optional, string -> string)
 *    "NAME": {"dtype": "F32", "shape": [2, 3], "data_offsets": [BEGIN, END]}, ...}
 * then the data buffer; offsets are relative to the start of the data buffer, and the tensors tile it
 * exactly (sorted by offset, no gap, no overlap, the last one ending at the end of the file).
 *
 * Every file is untrusted (a request body, or a file in the data dir that anyone may have written):
 * the reader checks the header length against the buffer and SRV_ST_MAX_HEADER, the JSON, every
 * dtype, shape (non-negative, overflow-checked, at most SRV_TENSOR_MAX_DIMS dims) and offset, that
 * each tensor's byte size is count x dtype size, the tiling, and duplicate names (refused). It
 * converts F32, F16, BF16 (exactly) and F64 (rounded to nearest) to float32 and refuses NaN and
 * infinities (weights must be finite). Other dtypes are refused with a message naming them.
 *
 * The writer produces what the Rust reference implementation produces for float32 tensors: compact
 * JSON header with "__metadata__" first, tensors sorted by name and laid out in that order, the
 * header padded with spaces to a multiple of 8 bytes.
 */
#ifndef ATTND_SAFETENSORS_H
#define ATTND_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/buf.h"
#include "base/error.h"
#include "tensor.h"

#define SRV_ST_MAX_HEADER (1u << 20) /* bytes of JSON header accepted (our files use < 2 KiB)  */
#define SRV_ST_MAX_TENSORS 4096      /* tensors in one file                                    */

typedef struct srv_st_tensor {
    char *name;                          /* owned, NUL-terminated                              */
    int ndim;                            /* 0 (scalar) .. SRV_TENSOR_MAX_DIMS                 */
    int64_t shape[SRV_TENSOR_MAX_DIMS];
    int64_t count;                       /* product of shape (1 for a scalar)                  */
    float *data;                         /* owned: [count] float32 (NULL when count == 0)      */
} srv_st_tensor;

typedef struct srv_st {
    int n;                   /* number of tensors                                              */
    srv_st_tensor *tensors;  /* owned: [n], in the order of their offsets in the file         */
    json_t *metadata;        /* owned reference: the "__metadata__" object (string values), or NULL */
} srv_st;

/* Parses a safetensors file held in buf[0..len) into out (zeroed first; on error nothing is owned).
 * max_elements (> 0) caps each tensor's element count (SRV_E_TOO_LARGE past it). field names the
 * input in errors ("body", "weights.safetensors"). Returns 0, or -1 with err filled:
 * SRV_E_BAD_REQUEST for a malformed file (the message says what and where), SRV_E_BAD_VALUE for a
 * NaN or infinite value, SRV_E_TOO_LARGE, SRV_E_NOMEM. */
int srv_st_parse(srv_st *out, const uint8_t *buf, size_t len, int64_t max_elements,
                 const char *field, srv_error *err);

/* Frees everything out owns and zeroes it; accepts NULL and zeroed structs. */
void srv_st_free(srv_st *st);

/* The tensor called name (borrowed), or NULL. */
const srv_st_tensor *srv_st_find(const srv_st *st, const char *name);

/* A metadata value (borrowed string, lives as long as st), or NULL when absent. */
const char *srv_st_meta(const srv_st *st, const char *key);

/* The header of a safetensors file, buf[0..len) or a prefix of it holding the whole header, as a
 * JSON object (new reference), or NULL when it is not one; nothing else is checked (srv_st_parse
 * does). For a look at __metadata__ before the tensors are read (what a layer will cost). */
json_t *srv_st_header(const uint8_t *buf, size_t len);

/* One float32 tensor to write (everything borrowed). */
typedef struct srv_st_view {
    const char *name;
    int ndim;                            /* 0 .. SRV_TENSOR_MAX_DIMS                           */
    const int64_t *shape;                /* [ndim]                                             */
    const float *data;                   /* [product of shape]                                 */
} srv_st_view;

/* Appends a safetensors file holding the n tensors (dtype F32, sorted by name) and metadata (a JSON
 * object whose values are strings, or NULL for none) to out. Names must be distinct, non-empty and
 * not "__metadata__". Returns 0, or -1 with err filled (SRV_E_INTERNAL for a bad argument,
 * SRV_E_NOMEM). */
int srv_st_write(srv_buf *out, const srv_st_view *tensors, int n, const json_t *metadata,
                 srv_error *err);

/* Converts one IEEE half (binary16) or bfloat16 bit pattern to float32 (exact). */
float srv_st_f16_to_f32(uint16_t h);
float srv_st_bf16_to_f32(uint16_t h);

#endif
