/*
 * v2_codec.h - the Open Inference Protocol (KServe v2 REST, as NVIDIA Triton speaks it) for attnd's
 * layers: inference requests in, inference responses and model metadata out. No HTTP here; the
 * handlers in api_v2.c call these with the body and headers they received.
 *
 * A layer is a v2 "model" with seven inputs and two outputs (docs/api.md, "Open Inference
 * Protocol"): inputs   query [N,L,E] FP32, key [N,S0,Kd] FP32, value [N,S0,Vd] FP32,
 *            key_padding_mask [N,S0] BOOL|FP32, attn_mask [L,S0] | [N·H,L,S0] BOOL|FP32
 *            (batched layouts !! [L,N,E] etc. when the layer is not batch_first; unbatched forms
 *            as in /v1); BOOL true = masked; FP32 masks are added to the scores;
 *            positions [L] | [N,L] and key_positions [S0] | [N,S0] INT64|INT32 (positions.h)
 *   outputs  output [N,L,E] FP32, attn_weights [N,L,S] | [N,H,L,S] FP32
 *
 * The files: v2_request.c reads inference requests, v2_response.c writes inference responses and
 * the error body, v2_model.c describes the model (its tensors, metadata and configuration).
 *
 * An inference request body is a JSON object, optionally followed by raw tensor bytes (Triton's
 * binary tensor data extension): the header Inference-Header-Content-Length gives the length of the
 * JSON part; each input with parameters.binary_data_size takes that many bytes from what follows,
 * in the order of the inputs, little-endian, row-major, BOOL one byte (0 or 1) per element. The
 * sizes must add up to the body exactly.
 *
 * Tensor "data" in JSON may be flat (row-major) or nested as the shape says; numbers are parsed by
 * srv_parse_float (through srv_tensor_parse), not as one jansson node per number. The small parts
 * (names, shapes, parameters, outputs) go through jansson.
 */
#ifndef ATTND_V2_CODEC_H
#define ATTND_V2_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/buf.h"
#include "base/error.h"
#include "mha.h"
#include "positions.h"
#include "tensor.h"
#include "weights_select.h"

/* The model's inputs, by index. */
typedef enum srv_v2_input_id {
    SRV_V2_IN_QUERY = 0,
    SRV_V2_IN_KEY,
    SRV_V2_IN_VALUE,
    SRV_V2_IN_KEY_PADDING_MASK,
    SRV_V2_IN_ATTN_MASK,
    SRV_V2_IN_POSITIONS,
    SRV_V2_IN_KEY_POSITIONS,
    SRV_V2_IN_COUNT
} srv_v2_input_id;

/* The model's outputs, by index. */
typedef enum srv_v2_output_id {
    SRV_V2_OUT_OUTPUT = 0,
    SRV_V2_OUT_ATTN_WEIGHTS,
    SRV_V2_OUT_ATTN_TOPK_INDICES, /* with weights_top_k: the strongest keys per row (INT32)     */
    SRV_V2_OUT_ATTN_TOPK_VALUES,  /* ... and their weights                                     */
    SRV_V2_OUT_COUNT
} srv_v2_output_id;

/* Static names: "query", ..., "attn_mask", "positions", "key_positions"; "output",
 * "attn_weights", "attn_topk_indices", "attn_topk_values". NULL for an index out of range. */
const char *srv_v2_input_name(int id);
const char *srv_v2_output_name(int id);

typedef struct srv_v2_input {
    bool present;
    bool binary;     /* the data came from the binary part of the body */
    srv_dtype dtype; /* FP32 -> SRV_DTYPE_F32, BOOL -> SRV_DTYPE_BOOL */
    int ndim;
    int64_t shape[SRV_TENSOR_MAX_DIMS]; /* as the request declared it */
    int64_t count;                      /* product of shape */
    const void *data;                   /* float[count] | uint8_t[count]: points into the body
                                           (binary and aligned: borrowed, so the body must
                                           outlive the request) or at json/copy below */
    srv_tensor json;                    /* owned: the parsed JSON data */
    void *copy;                         /* owned: binary data copied to an aligned buffer */
    int int_size;                       /* the position inputs: INT64 8, INT32 4 (else 0) */
    srv_positions pos;                  /* owned: the position inputs' values (data unused) */
    const char *data_text;              /* the JSON "data" text in the body (borrowed), read
                                           after every input's shape; NULL for binary data */
    size_t data_len;
} srv_v2_input;

typedef struct srv_v2_output_sel {
    srv_v2_output_id which;
    bool binary; /* return as binary data after the JSON */
} srv_v2_output_sel;

typedef struct srv_v2_request {
    char *id; /* owned; NULL when the request has no "id" */
    srv_v2_input inputs[SRV_V2_IN_COUNT];
    int input_order[SRV_V2_IN_COUNT]; /* input ids in the order the request listed them */
    int ninputs;
    bool is_causal;            /* parameters.is_causal, when is_causal_given */
    bool is_causal_given;      /* else the layer's default (config is_causal) */
    bool need_weights;         /* resolved: true iff attn_weights is returned */
    bool average_attn_weights; /* parameters.average_attn_weights, default true */
    srv_select select;         /* the weights chosen: parameters weights_heads, weights_queries,
                                * weights_keys, weights_top_k, weights_pool, weights_pool_op,
                                * weights_datatype (weights_select.h); owned */
    int noutputs;              /* the outputs to return, in this order */
    srv_v2_output_sel outputs[SRV_V2_OUT_COUNT];
} srv_v2_request;

/* Parses the value of the Inference-Header-Content-Length header (a decimal byte count; NULL when
 * the request has none, meaning the whole body is JSON) against a body of body_len bytes.
 * *out gets the JSON header's length. -1 with err (400) when the value is not a number or is larger
 * than the body. */
int srv_v2_header_length(size_t *out, const char *value, size_t body_len, srv_error *err);

/* Parses an inference request: body [body_len] bytes, of which the first header_len are the JSON
 * header and the rest the binary tensor data (header_len == body_len when there is none).
 * req is zeroed first; on success it owns what it parsed (free with srv_v2_request_free) and may
 * borrow from body (which must then outlive req). On error nothing is owned and err says why:
 * 400 (SRV_E_BAD_JSON, SRV_E_BAD_REQUEST, SRV_E_UNKNOWN_FIELD, SRV_E_MISSING_FIELD, SRV_E_SHAPE,
 * SRV_E_BAD_VALUE), 413 (SRV_E_TOO_LARGE: a tensor over max_elements), 503 (SRV_E_NOMEM).
 * What is checked here: the JSON structure, input names (known, each once, query present),
 * datatypes, shapes (non-negative integers, element count against max_elements), "data" element
 * count and nesting against the shape, binary sizes (count × element size each, adding up to the
 * body exactly), values (finite; FP32 masks may hold -inf, given in JSON as the string "-inf";
 * BOOL bytes 0 or 1), parameters' types and the outputs asked for. Shapes against the layer are
 * the engine's to check (mha_plan_forward). */
int srv_v2_request_parse(srv_v2_request *req, const char *body, size_t body_len, size_t header_len,
                         int64_t max_elements, srv_error *err);

/* Called by srv_v2_request_parse_checked once the request's inputs (names, datatypes, shapes),
 * parameters and outputs are read and checked, before any tensor data is read: return 0 to go on,
 * or -1 with err filled to refuse the request (the parse then fails with err). req holds no data
 * yet (every input's data is NULL). */
typedef int (*srv_v2_shapes_check)(void *cls, const srv_v2_request *req, srv_error *err);

/* srv_v2_request_parse that lets check (may be NULL) judge the request by its shapes before any
 * tensor data is decoded (what a pass on those shapes would cost: api_v2.c). */
int srv_v2_request_parse_checked(srv_v2_request *req, const char *body, size_t body_len,
                                 size_t header_len, int64_t max_elements, srv_v2_shapes_check check,
                                 void *cls, srv_error *err);

void srv_v2_request_free(srv_v2_request *req); /* accepts NULL and a zeroed request */

/* Parts of reading a request, for v2_request.c (v2_outputs.c):
 * srv_v2_outputs_parse reads "outputs" (arr, borrowed): [{"name", "datatype"?, "parameters"?:
 * {"binary_data"?, "datatype"?}}], an empty array meaning all outputs, into req->outputs, and the
 * weights' datatype asked there into req->select (a 400 when it disagrees with
 * weights_datatype). 0, or -1 with a 400 naming "outputs".
 * srv_v2_shared_memory tells whether an input's or output's parameters name Triton's shared memory
 * (not served: refused by name). */
int srv_v2_outputs_parse(srv_v2_request *req, bool binary_data_output, const json_t *arr,
                         srv_error *err);
bool srv_v2_shared_memory(const json_t *params);

/* One computed output: data [count] values shaped [shape] (ndim <= 4); data NULL = not computed.
 * Floats by default, written as dtype says (FP32; FP16 / BF16: JSON numbers rounded, binary 2 bytes
 * a value); int32 (datatype INT32) when is_int32. */
typedef struct srv_v2_result {
    const void *data;
    int ndim;
    int64_t shape[4];
    srv_wire_dtype dtype;
    bool is_int32;
} srv_v2_result;

/* Appends the inference response for req to b:
 *   {"model_name", "model_version", "id" (when the request had one),
 *    "outputs": [{"name", "datatype": "FP32" (FP16, BF16, INT32 as the result says), "shape",
 *                 "data": [flat, shortest float32 form of each value]
 *                 | "parameters": {"binary_data_size": n}}, ...]}
 * followed by the raw little-endian bytes of the binary outputs, in the order of "outputs".
 * results is indexed by srv_v2_output_id; every output req returns must have data.
 * *json_len gets the length of the JSON part: when it is less than b->len the caller sends it as
 * Inference-Header-Content-Length. Non-finite values in JSON data are written as the strings
 * "inf", "-inf", "nan" (as /v1 does). Returns 0, or -1 when out of memory or an output is missing
 * (err filled). */
int srv_v2_response_write(srv_buf *b, size_t *json_len, const srv_v2_request *req,
                          const char *model_name, const char *model_version,
                          const srv_v2_result results[SRV_V2_OUT_COUNT], srv_error *err);

/* One tensor of a layer's model signature, as the metadata and the configuration describe it. */
typedef struct srv_v2_tensor_info {
    const char *name; /* static: srv_v2_input_name / srv_v2_output_name                       */
    const char
        *datatype; /* "FP32", "BOOL" (masks take FP32 too) or "INT64" (positions: INT32 too) */
    int ndim;
    int64_t dims[SRV_TENSOR_MAX_DIMS]; /* -1 = variable                                           */
    bool optional; /* may be left out of a request                                          */
} srv_v2_tensor_info;

/* The model's inputs (by srv_v2_input_id) and outputs (by srv_v2_output_id) for a layer of config
 * cfg, the one description metadata and configuration are written from. Variable dimensions are -1:
 * query [-1,-1,E], key [-1,-1,Kd], value [-1,-1,Vd], key_padding_mask [-1,-1] BOOL, attn_mask
 * [-1,-1] BOOL (the 2-D form; [N·H,L,S0] and FP32 masks are taken too), positions [-1] and
 * key_positions [-1] INT64 (the 1-D form; [N,L] and INT32 are taken too), output [-1,-1,E],
 * attn_weights [-1,-1,-1]; every input but query is optional. */
void srv_v2_model_inputs(const mha_config *cfg, srv_v2_tensor_info in[SRV_V2_IN_COUNT]);
void srv_v2_model_outputs(const mha_config *cfg, srv_v2_tensor_info out[SRV_V2_OUT_COUNT]);

/* Appends the model metadata object for a layer of config cfg:
 *   {"name", "versions": [version], "platform": "attnd_mha",
 *    "inputs": [{"name","datatype","shape"}, ...], "outputs": [...], "parameters": params}
 * with the tensors of srv_v2_model_inputs/outputs; params is the layer's config object as stored
 * (every field spelled out; NULL writes {}). Returns 0 or -1 (out of memory). */
int srv_v2_metadata_write(srv_buf *b, const char *name, const char *version, const mha_config *cfg,
                          const json_t *params);

/* Appends Triton's model configuration for a layer of config cfg (the model configuration
 * extension: model_config.proto's ModelConfig as JSON, field names as the proto spells them):
 * name, platform "attnd_mha" and backend "attnd", version_policy latest 1, max_batch_size 0 (the
 * batch dimension, when there is one, is part of the dims), input and output with data_type
 * TYPE_FP32 / TYPE_BOOL, format, dims (-1 = variable) and optional as srv_v2_model_inputs says,
 * instance_group one group of `instances` CPU instances (the passes run at once, --max-inflight),
 * default_model_filename "weights.safetensors", parameters: each member of params (the layer's
 * config object) as {"string_value": its value as text}, and the defaults Triton writes for the
 * rest (no batching, not decoupled, no response cache). Returns 0 or -1 (out of memory). */
int srv_v2_config_write(srv_buf *b, const char *name, const mha_config *cfg, const json_t *params,
                        int instances);

/* Appends the protocol's error body {"error": "<err->message>"}, with "request_id" after it when
 * request_id is not NULL, and returns the HTTP status for err->code (500 for an error that was
 * never set). */
int srv_v2_error_write(srv_buf *b, const srv_error *err, const char *request_id);

#endif
