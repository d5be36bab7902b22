/*
 * v2_outputs.c - what an Open Inference Protocol request asks back: its "outputs" (names, binary
 * or JSON, the weights' datatype) and Triton's extensions it may name but attnd does not serve
 * (shared memory, classification). Part of reading a request (v2_codec.h, v2_request.c).
 */
#include "v2_codec.h"

#include <string.h>

bool srv_v2_shared_memory(const json_t *params)
{
    return json_object_get(params, "shared_memory_region") ||
           json_object_get(params, "shared_memory_byte_size") ||
           json_object_get(params, "shared_memory_offset");
}

/* The datatype an output is asked in: its "datatype" member or parameters.datatype (SPEC §2: "the
 * output's datatype FP32, FP16 or BF16", beside the request parameter weights_datatype). The
 * weights' outputs take FP32, FP16 or BF16 (*dt; -1 when neither is given), output FP32 and
 * attn_topk_indices INT32 only. 0, or -1 with a 400. */
static int v2_output_datatype(const json_t *o, const json_t *params, int id, const char *name,
                              int *dt, srv_error *err)
{
    const json_t *a = json_object_get(o, "datatype");
    const json_t *b = params ? json_object_get(params, "datatype") : NULL;
    *dt = -1;
    if (!a && !b)
        return 0;
    if ((a && !json_is_string(a)) || (b && !json_is_string(b)))
        return srv_error_set(err, SRV_E_BAD_REQUEST, "outputs",
                             "output '%s': datatype must be a string such as \"FP16\"", name);
    const char *t = json_string_value(a ? a : b);
    if (a && b && strcmp(t, json_string_value(b)) != 0)
        return srv_error_set(err, SRV_E_BAD_REQUEST, "outputs",
                             "output '%s' has datatype %.16s and parameters.datatype %.16s; give "
                             "one",
                             name, t, json_string_value(b));
    const bool weights = id == SRV_V2_OUT_ATTN_WEIGHTS || id == SRV_V2_OUT_ATTN_TOPK_VALUES;
    if (weights && strcmp(t, "FP32") == 0)
        *dt = SRV_WIRE_F32;
    else if (weights && strcmp(t, "FP16") == 0)
        *dt = SRV_WIRE_F16;
    else if (weights && strcmp(t, "BF16") == 0)
        *dt = SRV_WIRE_BF16;
    else if (!weights && strcmp(t, id == SRV_V2_OUT_OUTPUT ? "FP32" : "INT32") == 0)
        return 0;
    else
        return srv_error_set(err, SRV_E_BAD_REQUEST, "outputs",
                             "output '%s' cannot be %.16s: it is %s", name, t,
                             weights                   ? "FP32, FP16 or BF16"
                             : id == SRV_V2_OUT_OUTPUT ? "FP32"
                                                       : "INT32");
    return 0;
}

int srv_v2_outputs_parse(srv_v2_request *req, bool binary_data_output, const json_t *arr,
                         srv_error *err)
{
    int weights_dt = -1; /* the weights' datatype the outputs ask, when they do */
    int rc = -1;
    if (!json_is_array(arr)) {
        srv_error_set(err, SRV_E_BAD_REQUEST, "outputs",
                      "\"outputs\" must be an array of {\"name\": ...} objects");
        goto error;
    }
    size_t i;
    json_t *o;
    json_array_foreach(arr, i, o)
    {
        const char *key;
        json_t *v;
        if (!json_is_object(o)) {
            srv_error_set(err, SRV_E_BAD_REQUEST, "outputs", "outputs[%zu] must be an object", i);
            goto error;
        }
        json_object_foreach(o, key, v)
        {
            if (strcmp(key, "name") != 0 && strcmp(key, "parameters") != 0 &&
                strcmp(key, "datatype") != 0) {
                srv_error_set(err, SRV_E_UNKNOWN_FIELD, "outputs",
                              "outputs[%zu] has an unknown member \"%.64s\"; an output has name, "
                              "datatype and parameters",
                              i, key);
                goto error;
            }
        }
        const char *name = json_string_value(json_object_get(o, "name"));
        if (!name) {
            srv_error_set(err, SRV_E_MISSING_FIELD, "outputs",
                          "outputs[%zu] needs a \"name\" string", i);
            goto error;
        }
        int id = -1;
        for (int k = 0; k < SRV_V2_OUT_COUNT; k++)
            if (strcmp(name, srv_v2_output_name(k)) == 0)
                id = k;
        if (id < 0) {
            srv_error_set(err, SRV_E_UNKNOWN_FIELD, "outputs",
                          "unknown output '%.64s'; the model's outputs are output, attn_weights, "
                          "attn_topk_indices and attn_topk_values",
                          name);
            goto error;
        }
        for (int k = 0; k < req->noutputs; k++)
            if (req->outputs[k].which == (srv_v2_output_id)id) {
                srv_error_set(err, SRV_E_BAD_REQUEST, "outputs", "output '%s' is asked twice",
                              name);
                goto error;
            }
        bool binary = binary_data_output;
        json_t *params = json_object_get(o, "parameters");
        if (params) {
            if (!json_is_object(params)) {
                srv_error_set(err, SRV_E_BAD_REQUEST, "outputs",
                              "output '%s': \"parameters\" must be an object", name);
                goto error;
            }
            json_t *bd = json_object_get(params, "binary_data");
            if (bd && !json_is_boolean(bd)) {
                srv_error_set(err, SRV_E_BAD_REQUEST, "outputs",
                              "output '%s': parameters.binary_data must be true or false", name);
                goto error;
            }
            if (bd)
                binary = json_is_true(bd);
            if (srv_v2_shared_memory(params)) {
                srv_error_set(err, SRV_E_BAD_REQUEST, "outputs",
                              "output '%s': shared memory (parameters.shared_memory_region) is "
                              "not supported; it comes back in the body, as JSON or binary data",
                              name);
                goto error;
            }
            if (json_object_get(params, "classification")) {
                srv_error_set(err, SRV_E_BAD_REQUEST, "outputs",
                              "output '%s': the classification extension is not supported", name);
                goto error;
            }
        }
        int dt;
        if (v2_output_datatype(o, params, id, name, &dt, err) < 0)
            goto error;
        if (dt >= 0 && weights_dt >= 0 && dt != weights_dt) {
            srv_error_set(err, SRV_E_BAD_REQUEST, "outputs",
                          "attn_topk_values and attn_weights are asked in different datatypes; "
                          "the weights have one");
            goto error;
        }
        if (dt >= 0)
            weights_dt = dt;
        req->outputs[req->noutputs].which = (srv_v2_output_id)id;
        req->outputs[req->noutputs].binary = binary;
        req->noutputs++;
    }
    if (weights_dt >= 0) {
        if (req->select.dtype_given && req->select.dtype != (srv_wire_dtype)weights_dt) {
            srv_error_set(err, SRV_E_BAD_REQUEST, "outputs",
                          "the weights' output datatype and parameters.weights_datatype differ; "
                          "give one");
            goto error;
        }
        req->select.dtype = (srv_wire_dtype)weights_dt;
        req->select.given |= weights_dt != SRV_WIRE_F32; /* as weights_datatype FP16 is */
    }
    rc = 0;
error:
    return rc;
}
