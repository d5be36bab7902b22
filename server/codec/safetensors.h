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

#include <stdbool.h>
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

/* ---------------------------------------------------------------------------------------------- */
/* The header alone: what a reader that seeks to the tensors it needs (a model checkpoint of
 * gigabytes) checks before it reads a byte of data. srv_st_parse runs the same checks.           */

typedef enum srv_st_dtype {
    SRV_ST_F32, SRV_ST_F16, SRV_ST_BF16, SRV_ST_F64, /* converted to float32                     */
    SRV_ST_OTHER,                                    /* any other safetensors dtype: sized, never
                                                      * converted (an int64 buffer, an int8 table) */
} srv_st_dtype;

typedef struct srv_st_entry {
    const char *name;     /* borrowed from the header's JSON                                      */
    srv_st_dtype dtype;
    char dtype_name[12];  /* as the header spells it: "F32", "BF16", "I64", ...                    */
    int ndim;
    int64_t shape[SRV_TENSOR_MAX_DIMS];
    int64_t count;        /* product of shape (1 for a scalar)                                    */
    uint64_t begin, end;  /* byte offsets in the data buffer (after the header)                   */
} srv_st_entry;

typedef struct srv_st_header {
    json_t *root;            /* owned: the header's JSON (entries borrow their names from it)    */
    int n;                   /* tensors                                                           */
    srv_st_entry *entries;   /* owned: [n], sorted by offset                                      */
    const json_t *metadata;  /* borrowed from root: "__metadata__", or NULL                       */
    uint64_t data_len;       /* bytes of the data buffer                                          */
} srv_st_header;

/* What a header parse accepts. */
typedef struct srv_st_header_limits {
    uint64_t max_header;  /* bytes of JSON (SRV_ST_MAX_HEADER for request bodies and the data dir) */
    int max_tensors;      /* tensors in one file (SRV_ST_MAX_TENSORS)                            */
    int64_t max_elements; /* elements of any one tensor                                           */
    bool any_dtype;       /* false: only the four float dtypes (a layer's file); true: every dtype
                           * safetensors defines, for the tiling check (a model's shard)          */
} srv_st_header_limits;

/* Reads the 8-byte header length from first8 and checks it against a file of file_len bytes and
 * the limit: *hlen gets it. Returns 0, or -1 with err (SRV_E_BAD_REQUEST: too short, over the
 * limit, past the end of the file). */
int srv_st_header_len(const uint8_t *first8, uint64_t file_len, uint64_t max_header,
                      uint64_t *hlen, const char *field, srv_error *err);

/* Parses the header JSON json[0..hlen) of a file whose data buffer is data_len bytes into out
 * (zeroed first; owns nothing on error): every entry's dtype, shape and offsets checked, and that
 * the tensors tile the data buffer exactly (no gap, no overlap, nothing past its end or left over).
 * Returns 0, or -1 with err (SRV_E_BAD_REQUEST naming the tensor and what is wrong,
 * SRV_E_TOO_LARGE, SRV_E_NOMEM). */
int srv_st_header_parse(srv_st_header *out, const uint8_t *json, size_t hlen, uint64_t data_len,
                        const srv_st_header_limits *limits, const char *field, srv_error *err);

void srv_st_header_free(srv_st_header *h); /* accepts NULL and zeroed headers */

/* The entry called name (borrowed), or NULL. */
const srv_st_entry *srv_st_header_find(const srv_st_header *h, const char *name);

/* Bytes one element of e takes (1 for the byte-sized dtypes and, rounded up, the sub-byte ones). */
size_t srv_st_dtype_size(const srv_st_entry *e);

/* Converts elements [first, first + n) of entry e, given as their little-endian bytes
 * bytes[0 .. n·size), to float32 into out[0..n). F32, F16 and BF16 are exact; F64 rounds to
 * nearest. Returns 0, or -1 with err: SRV_E_BAD_VALUE for NaN or an infinity (naming the tensor
 * and element), SRV_E_BAD_REQUEST for a dtype that is not a float. */
int srv_st_convert(float *out, const srv_st_entry *e, const uint8_t *bytes, int64_t first,
                   int64_t n, const char *field, srv_error *err);

/* ---------------------------------------------------------------------------------------------- */
/* Whole files                                                                                    */

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

/* Where srv_st_write_stream puts the file, piece by piece in order: 0, or -1 to stop. */
typedef int (*srv_st_sink)(void *ctx, const void *bytes, size_t n);

/* The same file handed to sink in pieces (the header, then the data in blocks of 64 KiB), so a
 * large one is written out without a second copy in memory (the data dir's weights). Returns 0,
 * or -1 with err: a bad argument, or the sink stopped (err then only says the write failed: the
 * sink's own context says why). */
int srv_st_write_stream(srv_st_sink sink, void *ctx, const srv_st_view *tensors, int n,
                        const json_t *metadata, srv_error *err);

/* Converts one IEEE half (binary16) or bfloat16 bit pattern to float32 (exact). */
float srv_st_f16_to_f32(uint16_t h);
float srv_st_bf16_to_f32(uint16_t h);

#endif
