/*
 * tensor_json.h - reading a tensor out of a JSON reply in the tests, whatever its form (nested,
 * flat or base64), to compare with expected numbers. Written independently of server/codec/tensor_*.c so
 * that the tests do not check the daemon's codec with itself.
 */
#ifndef ATTND_TENSOR_JSON_H
#define ATTND_TENSOR_JSON_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

typedef struct tj_tensor {
    int ndim;
    int64_t shape[8];
    int64_t count;
    float *data; /* malloc'd [count]; "-inf"/"inf"/"nan" strings become those values */
    char dtype[12]; /* the "dtype" a flat or base64 tensor names ("float32" when it names none),
                     * "" for nested arrays */
} tj_tensor;

/* Reads v (any of the three forms) into t. Returns 0, or -1 (t holds nothing). Base64 may be float32,
 * float16 or bfloat16 (2 bytes a value) or int32 (the values as floats: exact below 2^24). */
int tj_read(tj_tensor *t, const json_t *v);
void tj_free(tj_tensor *t);

/* True when t's shape is [dims...] (ndim values). */
bool tj_shape_is(const tj_tensor *t, int ndim, const int64_t *dims);

/* Writes a base64 float32 tensor {"shape":..., "dtype":"float32", "base64":...} (new reference). */
json_t *tj_base64(const float *data, int ndim, const int64_t *shape);

#endif
