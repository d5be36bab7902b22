/*
 * v2_request.c - Open Inference Protocol requests for attnd's layers, read (see v2_codec.h;
 * v2_response.c writes the replies).
 *
 * The request's JSON header is split with srv_json_object_scan (which validates all of it); the
 * "inputs" array is then walked without validating again (json_walk.h: a table-driven skip over
 * the numbers), each input's small members (name, shape, datatype, parameters) parsed with jansson
 * and its "data" with srv_tensor_parse, which reads numbers straight from the text. Binary tensor
 * data is used in place when it is aligned for float and copied once when it is not.
 *
 * Binary tensors are little-endian by the protocol; this file assumes a little-endian host. What
 * the request asks back ("outputs") is read by v2_outputs.c.
 */
#include "v2_codec.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bigbuf.h"
#include "float_parse.h"
#include "json_scan.h"
#include "json_walk.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "v2_request.c reads binary tensors as host floats: little-endian hosts only"
#endif

#define V2_SCAN_DEPTH (SRV_TENSOR_MAX_DIMS + 8) /* body > inputs > input > data nesting */
#define V2_MAX_MEMBERS 16

static const char *const v2_input_names[SRV_V2_IN_COUNT] = {
    "query", "key", "value", "key_padding_mask", "attn_mask", "positions", "key_positions",
};
static const char *const v2_output_names[SRV_V2_OUT_COUNT] = {
    "output", "attn_weights", "attn_topk_indices", "attn_topk_values"};

const char *srv_v2_input_name(int id)
{
    return id >= 0 && id < SRV_V2_IN_COUNT ? v2_input_names[id] : NULL;
}

const char *srv_v2_output_name(int id)
{
    return id >= 0 && id < SRV_V2_OUT_COUNT ? v2_output_names[id] : NULL;
}

static bool v2_is_mask(int id)
{
    return id == SRV_V2_IN_KEY_PADDING_MASK || id == SRV_V2_IN_ATTN_MASK;
}

static bool v2_is_positions(int id)
{
    return id == SRV_V2_IN_POSITIONS || id == SRV_V2_IN_KEY_POSITIONS;
}

/* The protocol's name of an input's datatype. */
static const char *v2_dtype_name(const srv_v2_input *in)
{
    return in->int_size == 8            ? "INT64"
           : in->int_size == 4          ? "INT32"
           : in->dtype == SRV_DTYPE_F32 ? "FP32"
                                        : "BOOL";
}

/* Bytes of one element of an input in binary form. */
static int64_t v2_elem_size(const srv_v2_input *in)
{
    return in->int_size ? in->int_size : in->dtype == SRV_DTYPE_F32 ? 4 : 1;
}

/* Writes "[2,3,4]" into out[cap]. */
static const char *v2_shape_str(char *out, size_t cap, int ndim, const int64_t *shape)
{
    size_t n = 0;
    n += (size_t)snprintf(out + n, cap - n, "[");
    for (int i = 0; i < ndim && n < cap; i++)
        n += (size_t)snprintf(out + n, cap - n, i ? ",%" PRId64 : "%" PRId64, shape[i]);
    if (n < cap)
        snprintf(out + n, cap - n, "]");
    return out;
}

/* Parses a small JSON value (already validated) with jansson. New reference, or NULL with err. */
static json_t *v2_json_load(const char *text, size_t len, const char *field, srv_error *err)
{
    json_error_t jerr;
    json_t *v = json_loadb(text, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
    if (!v)
        srv_error_set(err, SRV_E_BAD_JSON, field, "%s: %s", field, jerr.text);
    return v;
}

/* Request "parameters": is_causal, need_weights, average_attn_weights, binary_data_output must be
 * booleans, weights_* strings or integers, and any of them null is absent (as /v1 reads a null
 * member); other keys are server-specific parameters of other servers and are ignored. */
static int v2_parse_parameters(srv_v2_request *req, bool *need_weights, bool *need_weights_given,
                               bool *binary_data_output, const char *text, size_t len,
                               srv_error *err)
{
    json_t *obj = v2_json_load(text, len, "parameters", err);
    if (!obj)
        return -1;
    int rc = -1;
    if (!json_is_object(obj)) {
        srv_error_set(err, SRV_E_BAD_REQUEST, "parameters",
                      "\"parameters\" must be an object of key/value pairs");
        goto error;
    }
    /* the chosen weights: weights_* (a name of ours, so an unknown one is refused, not ignored) */
    const char *key;
    json_t *val;
    json_object_foreach(obj, key, val)
    {
        if (strncmp(key, "weights_", 8) != 0 || json_is_null(val))
            continue; /* null: absent, as /v1 reads a null member */
        char num[32];
        const char *vtext = json_string_value(val);
        if (json_is_integer(val)) {
            snprintf(num, sizeof num, "%" PRId64, (int64_t)json_integer_value(val));
            vtext = num;
        }
        if (!vtext) {
            srv_error_set(err, SRV_E_BAD_REQUEST, key,
                          "parameters.%.40s must be a string (or an integer)", key);
            goto error;
        }
        int taken = srv_select_flat_param(&req->select, key, vtext, true, err);
        if (taken < 0)
            goto error;
        if (taken == 0) {
            srv_error_set(err, SRV_E_UNKNOWN_FIELD, key,
                          "unknown parameter \"%.40s\"; the weights are chosen with "
                          "weights_heads, weights_queries, weights_keys, weights_top_k, "
                          "weights_pool, weights_pool_op and weights_datatype",
                          key);
            goto error;
        }
    }
    static const char *const flags[] = {"is_causal", "need_weights", "average_attn_weights",
                                        "binary_data_output"};
    bool *dst[] = {&req->is_causal, need_weights, &req->average_attn_weights, binary_data_output};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        json_t *v = json_object_get(obj, flags[i]);
        if (!v || json_is_null(v))
            continue;
        if (!json_is_boolean(v)) {
            srv_error_set(err, SRV_E_BAD_REQUEST, flags[i], "parameters.%s must be true or false",
                          flags[i]);
            goto error;
        }
        *dst[i] = json_is_true(v);
        if (dst[i] == need_weights)
            *need_weights_given = true;
        if (dst[i] == &req->is_causal)
            req->is_causal_given = true;
    }
    rc = 0;
error:
    json_decref(obj);
    return rc;
}

/* "shape": an array of at most SRV_TENSOR_MAX_DIMS non-negative integers whose product is at most
 * max_elements. */
static int v2_parse_shape(srv_v2_input *in, const char *name, const char *text, size_t len,
                          int64_t max_elements, srv_error *err)
{
    json_t *arr = v2_json_load(text, len, name, err);
    if (!arr)
        return -1;
    int rc = -1;
    if (!json_is_array(arr)) {
        srv_error_set(err, SRV_E_BAD_REQUEST, name,
                      "input '%s': \"shape\" must be an array of integers", name);
        goto error;
    }
    size_t ndim = json_array_size(arr);
    if (ndim > SRV_TENSOR_MAX_DIMS) {
        srv_error_set(err, SRV_E_SHAPE, name, "input '%s' has %zu dimensions; at most %d are taken",
                      name, ndim, SRV_TENSOR_MAX_DIMS);
        goto error;
    }
    int64_t count = 1;
    for (size_t i = 0; i < ndim; i++) {
        json_t *d = json_array_get(arr, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0) {
            srv_error_set(err, SRV_E_BAD_REQUEST, name,
                          "input '%s': shape[%zu] must be a non-negative integer", name, i);
            goto error;
        }
        in->shape[i] = json_integer_value(d);
        if (__builtin_mul_overflow(count, in->shape[i], &count) || count > max_elements) {
            srv_error_set(err, SRV_E_TOO_LARGE, name,
                          "input '%s' is larger than the limit of %" PRId64 " elements", name,
                          max_elements);
            goto error;
        }
    }
    in->ndim = (int)ndim;
    in->count = count;
    rc = 0;
error:
    json_decref(arr);
    return rc;
}

/* "datatype": FP32 for every input, BOOL for the masks too; INT64 or INT32 for the positions. */
static int v2_parse_datatype(srv_v2_input *in, int id, const char *text, size_t len, srv_error *err)
{
    const char *name = v2_input_names[id];
    json_t *s = v2_json_load(text, len, name, err);
    if (!s)
        return -1;
    int rc = -1;
    const char *dt = json_string_value(s);
    if (!dt) {
        srv_error_set(err, SRV_E_BAD_REQUEST, name,
                      "input '%s': \"datatype\" must be a string such as \"FP32\"", name);
    } else if (v2_is_positions(id)) {
        if (strcmp(dt, "INT64") == 0 || strcmp(dt, "INT32") == 0) {
            in->int_size = dt[3] == '6' ? 8 : 4;
            rc = 0;
        } else {
            srv_error_set(err, SRV_E_BAD_REQUEST, name,
                          "input '%s' has datatype %.32s; it takes INT64 or INT32", name, dt);
        }
    } else if (strcmp(dt, "FP32") == 0) {
        in->dtype = SRV_DTYPE_F32;
        rc = 0;
    } else if (strcmp(dt, "BOOL") == 0 && v2_is_mask(id)) {
        in->dtype = SRV_DTYPE_BOOL;
        rc = 0;
    } else {
        srv_error_set(err, SRV_E_BAD_REQUEST, name, "input '%s' has datatype %.32s; it takes %s",
                      name, dt, v2_is_mask(id) ? "BOOL or FP32" : "FP32");
    }
    json_decref(s);
    return rc;
}

/* Input "parameters": binary_data_size (a non-negative integer) marks binary data; other keys are
 * ignored, but shared memory is refused. *binsize gets the size, or -1 when the input's data is
 * JSON. */
static int v2_parse_input_parameters(int64_t *binsize, const char *name, const char *text,
                                     size_t len, srv_error *err)
{
    *binsize = -1;
    json_t *obj = v2_json_load(text, len, name, err);
    if (!obj)
        return -1;
    int rc = -1;
    if (!json_is_object(obj)) {
        srv_error_set(err, SRV_E_BAD_REQUEST, name, "input '%s': \"parameters\" must be an object",
                      name);
        goto error;
    }
    if (srv_v2_shared_memory(obj)) {
        srv_error_set(err, SRV_E_BAD_REQUEST, name,
                      "input '%s': shared memory (parameters.shared_memory_region) is not "
                      "supported; send the tensor in the body, as JSON or binary data",
                      name);
        goto error;
    }
    json_t *v = json_object_get(obj, "binary_data_size");
    if (v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0) {
            srv_error_set(err, SRV_E_BAD_REQUEST, name,
                          "input '%s': parameters.binary_data_size must be a non-negative integer",
                          name);
            goto error;
        }
        *binsize = json_integer_value(v);
    }
    rc = 0;
error:
    json_decref(obj);
    return rc;
}

/* Parses the JSON "data" of input id into in->json and checks it against the declared shape and
 * datatype: flat data needs the same element count, nested data the same shape. */
static int v2_parse_json_data(srv_v2_input *in, int id, const char *text, size_t len,
                              int64_t max_elements, srv_error *err)
{
    const char *name = v2_input_names[id];
    const char *p = srv_json_skip_ws(text, text + len);
    if (p == text + len || *p != '[')
        return srv_error_set(err, SRV_E_BAD_REQUEST, name,
                             "input '%s': \"data\" must be an array (flat or nested)", name);
    srv_tensor_rules rules = {
        .field = name,
        .allow_bool = in->dtype == SRV_DTYPE_BOOL,
        .allow_neg_inf = v2_is_mask(id) && in->dtype == SRV_DTYPE_F32,
        .max_elements = max_elements,
        .max_depth = SRV_TENSOR_MAX_DIMS,
    };
    if (srv_tensor_parse(&in->json, text, len, &rules, err) < 0)
        return -1;
    char a[96], b[96];
    if (in->json.count != in->count)
        return srv_error_set(
            err, SRV_E_SHAPE, name,
            "input '%s' has shape %s (%" PRId64 " elements) but its data holds %" PRId64, name,
            v2_shape_str(a, sizeof a, in->ndim, in->shape), in->count, in->json.count);
    if (in->json.ndim > 1 && (in->json.ndim != in->ndim ||
                              memcmp(in->json.shape, in->shape, sizeof(int64_t) * in->ndim) != 0))
        return srv_error_set(err, SRV_E_SHAPE, name,
                             "input '%s' has shape %s but its data is nested as %s; send it flat "
                             "or nested as the shape says",
                             name, v2_shape_str(a, sizeof a, in->ndim, in->shape),
                             v2_shape_str(b, sizeof b, in->json.ndim, in->json.shape));
    if (in->count > 0 && in->json.dtype != in->dtype)
        return srv_error_set(err, SRV_E_BAD_REQUEST, name,
                             "input '%s' has datatype BOOL but its data holds numbers; send "
                             "true/false or use datatype FP32",
                             name);
    in->data = in->json.data;
    return 0;
}

/* The JSON "data" of a position input: flat (count numbers for the declared shape) or nested as
 * the shape says; whole numbers in [0, 2^24) (positions.h). */
static int v2_parse_positions_data(srv_v2_input *in, int id, const char *text, size_t len,
                                   int64_t max_elements, srv_error *err)
{
    const char *name = v2_input_names[id];
    char a[96], b[96];
    if (in->ndim < 1 || in->ndim > 2)
        return srv_error_set(err, SRV_E_SHAPE, name,
                             "input '%s' has shape %s; positions are [L] or [N,L]", name,
                             v2_shape_str(a, sizeof a, in->ndim, in->shape));
    json_t *data = v2_json_load(text, len, name, err);
    if (!data)
        return -1;
    int rc;
    if (!json_is_array(data)) {
        rc = srv_error_set(err, SRV_E_BAD_REQUEST, name,
                           "input '%s': \"data\" must be an array (flat or nested)", name);
    } else if (json_is_array(json_array_get(data, 0))) { /* nested: its shape must be declared */
        rc = srv_positions_from_json(&in->pos, data, name, max_elements, err);
        if (rc == 0 && (in->pos.ndim != in->ndim || in->pos.shape[0] != in->shape[0] ||
                        in->pos.shape[1] != (in->ndim == 2 ? in->shape[1] : 0)))
            rc = srv_error_set(err, SRV_E_SHAPE, name,
                               "input '%s' has shape %s but its data is nested as %s; send it "
                               "flat or nested as the shape says",
                               name, v2_shape_str(a, sizeof a, in->ndim, in->shape),
                               v2_shape_str(b, sizeof b, in->pos.ndim, in->pos.shape));
    } else { /* flat: read as {"shape": declared, "data": [...]} */
        json_t *shape = json_array();
        for (int i = 0; i < in->ndim; i++)
            json_array_append_new(shape, json_integer(in->shape[i] > 0 ? in->shape[i] : 0));
        json_t *obj = json_pack("{s:o, s:O}", "shape", shape, "data", data);
        rc = obj ? srv_positions_from_json(&in->pos, obj, name, max_elements, err)
                 : srv_error_set(err, SRV_E_NOMEM, name, "out of memory");
        json_decref(obj);
    }
    json_decref(data);
    return rc;
}

/* One element of "inputs": {"name", "shape", "datatype", "parameters"?, "data"?}. binsize[id]
 * gets the binary_data_size, or -1 for JSON data. */
static int v2_parse_input(srv_v2_request *req, int64_t binsize[SRV_V2_IN_COUNT], const char *field,
                          const srv_json_member *m, int n, int64_t max_elements, srv_error *err)
{
    const srv_json_member *name = NULL, *shape = NULL, *dtype = NULL, *params = NULL, *data = NULL;
    for (int i = 0; i < n; i++) {
        if (strcmp(m[i].key, "name") == 0)
            name = &m[i];
        else if (strcmp(m[i].key, "shape") == 0)
            shape = &m[i];
        else if (strcmp(m[i].key, "datatype") == 0)
            dtype = &m[i];
        else if (strcmp(m[i].key, "parameters") == 0)
            params = &m[i];
        else if (strcmp(m[i].key, "data") == 0)
            data = &m[i];
        else
            return srv_error_set(err, SRV_E_UNKNOWN_FIELD, field,
                                 "%s has an unknown member \"%.64s\"; an input has name, shape, "
                                 "datatype, parameters and data",
                                 field, m[i].key);
    }
    if (!name)
        return srv_error_set(err, SRV_E_MISSING_FIELD, field, "%s has no \"name\"", field);
    json_t *js = v2_json_load(name->value, name->value_len, field, err);
    if (!js)
        return -1;
    int id = -1;
    if (json_is_string(js))
        for (int i = 0; i < SRV_V2_IN_COUNT; i++)
            if (strcmp(json_string_value(js), v2_input_names[i]) == 0)
                id = i;
    if (id < 0) {
        if (json_is_string(js))
            srv_error_set(err, SRV_E_UNKNOWN_FIELD, field,
                          "unknown input '%.64s'; the model's inputs are query, key, value, "
                          "key_padding_mask, attn_mask, positions and key_positions",
                          json_string_value(js));
        else
            srv_error_set(err, SRV_E_BAD_REQUEST, field, "%s: \"name\" must be a string", field);
        json_decref(js);
        return -1;
    }
    json_decref(js);
    const char *nm = v2_input_names[id];
    srv_v2_input *in = &req->inputs[id];
    if (in->present)
        return srv_error_set(err, SRV_E_BAD_REQUEST, nm, "input '%s' is given twice", nm);
    in->present = true;
    req->input_order[req->ninputs++] = id;
    if (!shape)
        return srv_error_set(err, SRV_E_MISSING_FIELD, nm, "input '%s' has no \"shape\"", nm);
    if (!dtype)
        return srv_error_set(err, SRV_E_MISSING_FIELD, nm, "input '%s' has no \"datatype\"", nm);
    if (v2_parse_datatype(in, id, dtype->value, dtype->value_len, err) < 0 ||
        v2_parse_shape(in, nm, shape->value, shape->value_len, max_elements, err) < 0)
        return -1;
    binsize[id] = -1;
    if (params &&
        v2_parse_input_parameters(&binsize[id], nm, params->value, params->value_len, err) < 0)
        return -1;
    if (binsize[id] >= 0) {
        if (data)
            return srv_error_set(err, SRV_E_BAD_REQUEST, nm,
                                 "input '%s' has both \"data\" and parameters.binary_data_size; "
                                 "send one of them",
                                 nm);
        int64_t esize = v2_elem_size(in);
        if (binsize[id] / esize != in->count || binsize[id] % esize != 0) {
            char a[96];
            return srv_error_set(
                err, SRV_E_SHAPE, nm,
                "input '%s' has shape %s and datatype %s, so %" PRId64
                " bytes of binary data, but parameters.binary_data_size is %" PRId64,
                nm, v2_shape_str(a, sizeof a, in->ndim, in->shape), v2_dtype_name(in),
                in->count * esize, binsize[id]);
        }
        in->binary = true;
        return 0;
    }
    if (!data)
        return srv_error_set(err, SRV_E_MISSING_FIELD, nm,
                             "input '%s' has neither \"data\" nor parameters.binary_data_size", nm);
    in->data_text = data->value; /* read once every input's shape is known */
    in->data_len = data->value_len;
    return 0;
}

static int v2_parse_inputs(srv_v2_request *req, int64_t binsize[SRV_V2_IN_COUNT], const char *text,
                           size_t len, int64_t max_elements, srv_error *err)
{
    const char *end = text + len;
    const char *p = srv_json_skip_ws(text, end);
    if (p == end || *p != '[')
        return srv_error_set(err, SRV_E_BAD_REQUEST, "inputs",
                             "\"inputs\" must be an array of input tensors");
    p = srv_json_skip_ws(p + 1, end);
    if (p < end && *p == ']')
        return srv_error_set(err, SRV_E_MISSING_FIELD, "inputs",
                             "\"inputs\" is empty; the model needs at least 'query'");
    for (int index = 0;; index++) {
        p = srv_json_skip_ws(p, end);
        if (p == end || *p != '{')
            return srv_error_set(err, SRV_E_BAD_REQUEST, "inputs",
                                 "inputs[%d] must be an object {\"name\", \"shape\", "
                                 "\"datatype\", \"data\"}",
                                 index);
        char field[32];
        snprintf(field, sizeof field, "inputs[%d]", index);
        srv_json_member m[V2_MAX_MEMBERS];
        const char *elem_end = NULL;
        int n = srv_json_walk_members(m, V2_MAX_MEMBERS, &elem_end, p, end, field, err);
        if (n < 0 || v2_parse_input(req, binsize, field, m, n, max_elements, err) < 0)
            return -1;
        p = srv_json_skip_ws(elem_end, end);
        if (p < end && *p == ',') {
            p++;
            continue;
        }
        if (p < end && *p == ']')
            return 0;
        return srv_error_set(err, SRV_E_BAD_JSON, "inputs", "inputs: expected ',' or ']'");
    }
}

/* "outputs", read (v2_outputs.c). */
static int v2_parse_outputs(srv_v2_request *req, bool binary_data_output, const char *text,
                            size_t len, srv_error *err)
{
    json_t *arr = v2_json_load(text, len, "outputs", err);
    if (!arr)
        return -1;
    const int rc = srv_v2_outputs_parse(req, binary_data_output, arr, err);
    json_decref(arr);
    return rc;
}

/* Checks the values of a binary input: finite floats (FP32 masks may hold -inf), BOOL bytes 0/1. */
static int v2_check_values(const srv_v2_input *in, int id, srv_error *err)
{
    const char *name = v2_input_names[id];
    if (in->dtype == SRV_DTYPE_BOOL) {
        const uint8_t *u = in->data;
        for (int64_t i = 0; i < in->count; i++)
            if (u[i] > 1)
                return srv_error_set(err, SRV_E_BAD_VALUE, name,
                                     "input '%s': BOOL element %" PRId64 " is byte %u; BOOL "
                                     "elements are one byte, 0 or 1",
                                     name, i, u[i]);
        return 0;
    }
    const float *f = in->data;
    bool mask = v2_is_mask(id);
    if (!srv_floats_any_special(f,
                                (size_t)in->count)) /* the usual case, ~1 ms less for an L input */
        return 0;
    for (int64_t i = 0; i < in->count; i++) {
        if (isfinite(f[i]) || (mask && f[i] == -INFINITY))
            continue;
        return srv_error_set(
            err, SRV_E_BAD_VALUE, name, "input '%s': element %" PRId64 " is %s; %s", name, i,
            isnan(f[i]) ? "NaN"
            : f[i] > 0  ? "+inf"
                        : "-inf",
            mask ? "an FP32 mask may hold finite numbers and -inf" : "values must be finite");
    }
    return 0;
}

/* Hands out the binary part of the body [header_len, body_len) to the binary inputs, in the
 * order the request listed them. The sizes must add up to the binary part exactly. */
static int v2_attach_binary(srv_v2_request *req, const int64_t binsize[SRV_V2_IN_COUNT],
                            const char *body, size_t body_len, size_t header_len, srv_error *err)
{
    uint64_t total = 0;
    for (int k = 0; k < req->ninputs; k++) {
        int id = req->input_order[k];
        if (req->inputs[id].binary)
            total += (uint64_t)binsize[id]; /* each <= max_elements * 4: no overflow */
    }
    size_t avail = body_len - header_len;
    if (total != avail) {
        if (avail == 0)
            return srv_error_set(err, SRV_E_BAD_REQUEST, "Inference-Header-Content-Length",
                                 "the inputs' binary_data_size add up to %" PRIu64 " bytes but "
                                 "the body has no binary data after the JSON header (is the "
                                 "Inference-Header-Content-Length header missing?)",
                                 total);
        return srv_error_set(err, SRV_E_BAD_REQUEST, "Inference-Header-Content-Length",
                             "the inputs' binary_data_size add up to %" PRIu64 " bytes but the "
                             "body has %zu bytes after its %zu-byte JSON header; they must match "
                             "exactly",
                             total, avail, header_len);
    }
    size_t off = header_len;
    for (int k = 0; k < req->ninputs; k++) {
        int id = req->input_order[k];
        srv_v2_input *in = &req->inputs[id];
        if (!in->binary)
            continue;
        const char *p = body + off;
        size_t size = (size_t)binsize[id];
        off += size;
        if (v2_is_positions(id)) { /* read into int64, whatever the width and alignment */
            if (srv_positions_from_bytes(&in->pos, p, size, in->int_size, in->ndim, in->shape,
                                         v2_input_names[id], err) < 0)
                return -1;
            continue;
        }
        if (in->dtype == SRV_DTYPE_F32 && ((uintptr_t)p % _Alignof(float)) != 0) {
            /* The JSON header's length puts the floats off alignment: copy them once. */
            in->copy = malloc(size ? size : 1);
            if (!in->copy)
                return srv_error_set(err, SRV_E_NOMEM, v2_input_names[id],
                                     "out of memory for input '%s' (%zu bytes)", v2_input_names[id],
                                     size);
            memcpy(in->copy, p, size);
            in->data = in->copy;
        } else {
            in->data = p;
        }
        if (v2_check_values(in, id, err) < 0)
            return -1;
    }
    return 0;
}

int srv_v2_header_length(size_t *out, const char *value, size_t body_len, srv_error *err)
{
    if (!value) {
        *out = body_len;
        return 0;
    }
    const char *p = value;
    while (*p == ' ' || *p == '\t')
        p++;
    if (*p < '0' || *p > '9')
        return srv_error_set(err, SRV_E_BAD_REQUEST, "Inference-Header-Content-Length",
                             "Inference-Header-Content-Length must be a byte count, not '%.32s'",
                             value);
    char *endp;
    errno = 0;
    unsigned long long n = strtoull(p, &endp, 10);
    while (*endp == ' ' || *endp == '\t')
        endp++;
    if (*endp != '\0' || errno == ERANGE)
        return srv_error_set(err, SRV_E_BAD_REQUEST, "Inference-Header-Content-Length",
                             "Inference-Header-Content-Length must be a byte count, not '%.32s'",
                             value);
    if (n > body_len)
        return srv_error_set(err, SRV_E_BAD_REQUEST, "Inference-Header-Content-Length",
                             "Inference-Header-Content-Length is %llu but the body has only %zu "
                             "bytes",
                             n, body_len);
    *out = (size_t)n;
    return 0;
}

void srv_v2_request_free(srv_v2_request *req)
{
    if (!req)
        return;
    free(req->id);
    srv_select_free(&req->select);
    for (int i = 0; i < SRV_V2_IN_COUNT; i++) {
        srv_tensor_free(&req->inputs[i].json);
        free(req->inputs[i].copy);
        srv_positions_free(&req->inputs[i].pos);
    }
    memset(req, 0, sizeof *req);
}

int srv_v2_request_parse(srv_v2_request *req, const char *body, size_t body_len, size_t header_len,
                         int64_t max_elements, srv_error *err)
{
    return srv_v2_request_parse_checked(req, body, body_len, header_len, max_elements, NULL, NULL,
                                        err);
}

int srv_v2_request_parse_checked(srv_v2_request *req, const char *body, size_t body_len,
                                 size_t header_len, int64_t max_elements, srv_v2_shapes_check check,
                                 void *cls, srv_error *err)
{
    memset(req, 0, sizeof *req);
    req->average_attn_weights = true;
    if (header_len > body_len)
        return srv_error_set(err, SRV_E_BAD_REQUEST, "Inference-Header-Content-Length",
                             "Inference-Header-Content-Length is %zu but the body has only %zu "
                             "bytes",
                             header_len, body_len);
    srv_json_member m[V2_MAX_MEMBERS];
    int n = srv_json_object_scan(body, header_len, "", V2_SCAN_DEPTH, m, V2_MAX_MEMBERS, err);
    if (n < 0)
        return -1;
    const srv_json_member *id = NULL, *params = NULL, *inputs = NULL, *outputs = NULL;
    for (int i = 0; i < n; i++) {
        if (strcmp(m[i].key, "id") == 0)
            id = &m[i];
        else if (strcmp(m[i].key, "parameters") == 0)
            params = &m[i];
        else if (strcmp(m[i].key, "inputs") == 0)
            inputs = &m[i];
        else if (strcmp(m[i].key, "outputs") == 0)
            outputs = &m[i];
        else if (strcmp(m[i].key, "model_name") != 0 && strcmp(m[i].key, "model_version") != 0)
            /* model_name/model_version: Triton's own examples send them; the URL decides. */
            return srv_error_set(err, SRV_E_UNKNOWN_FIELD, m[i].key,
                                 "unknown member \"%.64s\"; an inference request has id, "
                                 "parameters, inputs and outputs",
                                 m[i].key);
    }
    int64_t binsize[SRV_V2_IN_COUNT];
    bool need_weights = false, need_weights_given = false, binary_data_output = false;
    if (id) {
        json_t *s = v2_json_load(id->value, id->value_len, "id", err);
        if (!s)
            goto error;
        if (json_is_string(s))
            req->id = strdup(json_string_value(s));
        bool ok = json_is_string(s);
        json_decref(s);
        if (!ok) {
            srv_error_set(err, SRV_E_BAD_REQUEST, "id", "\"id\" must be a string");
            goto error;
        }
        if (!req->id) {
            srv_error_set(err, SRV_E_NOMEM, "id", "out of memory");
            goto error;
        }
    }
    if (params && v2_parse_parameters(req, &need_weights, &need_weights_given, &binary_data_output,
                                      params->value, params->value_len, err) < 0)
        goto error;
    if (!inputs) {
        srv_error_set(err, SRV_E_MISSING_FIELD, "inputs",
                      "the request has no \"inputs\"; the model needs at least 'query'");
        goto error;
    }
    if (v2_parse_inputs(req, binsize, inputs->value, inputs->value_len, max_elements, err) < 0)
        goto error;
    if (!req->inputs[SRV_V2_IN_QUERY].present) {
        srv_error_set(err, SRV_E_MISSING_FIELD, "query", "the request has no input 'query'");
        goto error;
    }
    if (outputs &&
        v2_parse_outputs(req, binary_data_output, outputs->value, outputs->value_len, err) < 0)
        goto error;
    const bool top_k = req->select.sel.has_top_k;
    if (req->noutputs == 0) {
        /* No outputs asked for: all that the request makes, i.e. output, and the weights when
         * need_weights is true or some are chosen (attn_weights, or with weights_top_k
         * attn_topk_indices and attn_topk_values). */
        req->outputs[req->noutputs++] = (srv_v2_output_sel){SRV_V2_OUT_OUTPUT, binary_data_output};
        if ((need_weights || req->select.given) && !top_k)
            req->outputs[req->noutputs++] =
                (srv_v2_output_sel){SRV_V2_OUT_ATTN_WEIGHTS, binary_data_output};
        if ((need_weights || req->select.given) && top_k) {
            req->outputs[req->noutputs++] =
                (srv_v2_output_sel){SRV_V2_OUT_ATTN_TOPK_INDICES, binary_data_output};
            req->outputs[req->noutputs++] =
                (srv_v2_output_sel){SRV_V2_OUT_ATTN_TOPK_VALUES, binary_data_output};
        }
    }
    req->need_weights = false;
    for (int k = 0; k < req->noutputs; k++) {
        const srv_v2_output_id w = req->outputs[k].which;
        if (w == SRV_V2_OUT_OUTPUT)
            continue;
        req->need_weights = true;
        if (top_k && w == SRV_V2_OUT_ATTN_WEIGHTS) {
            srv_error_set(err, SRV_E_BAD_REQUEST, "outputs",
                          "output 'attn_weights' is asked for with parameters.weights_top_k: the "
                          "top k come back as attn_topk_indices and attn_topk_values");
            goto error;
        }
        if (!top_k && w != SRV_V2_OUT_ATTN_WEIGHTS) {
            srv_error_set(err, SRV_E_BAD_REQUEST, "outputs",
                          "output '%s' is asked for without parameters.weights_top_k (the k to "
                          "keep per row)",
                          srv_v2_output_name(w));
            goto error;
        }
    }
    if (need_weights_given && !need_weights && (req->need_weights || req->select.given)) {
        srv_error_set(err, SRV_E_BAD_REQUEST, "outputs", "%s parameters.need_weights is false",
                      req->need_weights ? "an attention weights output is asked for but"
                                        : "weights are chosen (parameters weights_*) but");
        goto error;
    }
    /* every shape is known, no data read yet: the caller may refuse the request here */
    if (check && check(cls, req, err) < 0)
        goto error;
    for (int k = 0; k < req->ninputs; k++) {
        int input = req->input_order[k];
        srv_v2_input *in = &req->inputs[input];
        if (!in->data_text)
            continue;
        if ((v2_is_positions(input) ? v2_parse_positions_data : v2_parse_json_data)(
                in, input, in->data_text, in->data_len, max_elements, err) < 0)
            goto error;
    }
    if (v2_attach_binary(req, binsize, body, body_len, header_len, err) < 0)
        goto error;
    return 0;
error:
    srv_v2_request_free(req);
    return -1;
}
