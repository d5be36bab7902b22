/*
 * v2_model.c - a layer described as an Open Inference Protocol model (see v2_codec.h): its
 * tensors, the model metadata (GET /v2/models/{name}) and Triton's model configuration
 * (GET /v2/models/{name}/config), both written from the one description here, so that a new
 * input or a new config field shows in both.
 */
#include "v2_codec.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void tensor(srv_v2_tensor_info *t, const char *name, const char *datatype, bool optional,
                   int ndim, int64_t last)
{
    memset(t, 0, sizeof *t);
    t->name = name;
    t->datatype = datatype;
    t->optional = optional;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        t->dims[i] = -1;
    t->dims[ndim - 1] = last;
}

void srv_v2_model_inputs(const mha_config *cfg, srv_v2_tensor_info in[SRV_V2_IN_COUNT])
{
    int64_t E = cfg->embed_dim;
    tensor(&in[SRV_V2_IN_QUERY], srv_v2_input_name(SRV_V2_IN_QUERY), "FP32", false, 3, E);
    tensor(&in[SRV_V2_IN_KEY], srv_v2_input_name(SRV_V2_IN_KEY), "FP32", true, 3,
           cfg->kdim ? cfg->kdim : E);
    tensor(&in[SRV_V2_IN_VALUE], srv_v2_input_name(SRV_V2_IN_VALUE), "FP32", true, 3,
           cfg->vdim ? cfg->vdim : E);
    tensor(&in[SRV_V2_IN_KEY_PADDING_MASK], srv_v2_input_name(SRV_V2_IN_KEY_PADDING_MASK), "BOOL",
           true, 2, -1);
    tensor(&in[SRV_V2_IN_ATTN_MASK], srv_v2_input_name(SRV_V2_IN_ATTN_MASK), "BOOL", true, 2, -1);
    tensor(&in[SRV_V2_IN_POSITIONS], srv_v2_input_name(SRV_V2_IN_POSITIONS), "INT64", true, 1, -1);
    tensor(&in[SRV_V2_IN_KEY_POSITIONS], srv_v2_input_name(SRV_V2_IN_KEY_POSITIONS), "INT64", true,
           1, -1);
}

void srv_v2_model_outputs(const mha_config *cfg, srv_v2_tensor_info out[SRV_V2_OUT_COUNT])
{
    tensor(&out[SRV_V2_OUT_OUTPUT], srv_v2_output_name(SRV_V2_OUT_OUTPUT), "FP32", false, 3,
           cfg->embed_dim);
    tensor(&out[SRV_V2_OUT_ATTN_WEIGHTS], srv_v2_output_name(SRV_V2_OUT_ATTN_WEIGHTS), "FP32", true,
           3, -1);
    /* with parameters.weights_top_k (FP16 / BF16 values with weights_datatype, as attn_weights) */
    tensor(&out[SRV_V2_OUT_ATTN_TOPK_INDICES], srv_v2_output_name(SRV_V2_OUT_ATTN_TOPK_INDICES),
           "INT32", true, 3, -1);
    tensor(&out[SRV_V2_OUT_ATTN_TOPK_VALUES], srv_v2_output_name(SRV_V2_OUT_ATTN_TOPK_VALUES),
           "FP32", true, 3, -1);
}

static void put_dims(srv_buf *b, const srv_v2_tensor_info *t)
{
    srv_buf_putc(b, '[');
    for (int i = 0; i < t->ndim; i++)
        srv_buf_printf(b, i ? ",%" PRId64 : "%" PRId64, t->dims[i]);
    srv_buf_putc(b, ']');
}

/* {"name","datatype","shape"} of the metadata. */
static void metadata_tensor(srv_buf *b, const srv_v2_tensor_info *t)
{
    srv_buf_printf(b, "{\"name\":\"%s\",\"datatype\":\"%s\",\"shape\":", t->name, t->datatype);
    put_dims(b, t);
    srv_buf_putc(b, '}');
}

/* A JSON value written compactly; {} for NULL. */
static void put_json(srv_buf *b, const json_t *v)
{
    char *text = v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    if (v && !text) {
        b->failed = true;
        return;
    }
    srv_buf_puts(b, text ? text : "{}");
    free(text);
}

int srv_v2_metadata_write(srv_buf *b, const char *name, const char *version, const mha_config *cfg,
                          const json_t *params)
{
    srv_v2_tensor_info in[SRV_V2_IN_COUNT], out[SRV_V2_OUT_COUNT];
    srv_v2_model_inputs(cfg, in);
    srv_v2_model_outputs(cfg, out);
    srv_buf_puts(b, "{\"name\":");
    srv_buf_json_string(b, name);
    srv_buf_puts(b, ",\"versions\":[");
    srv_buf_json_string(b, version);
    srv_buf_puts(b, "],\"platform\":\"attnd_mha\",\"inputs\":[");
    for (int i = 0; i < SRV_V2_IN_COUNT; i++) {
        if (i)
            srv_buf_putc(b, ',');
        metadata_tensor(b, &in[i]);
    }
    srv_buf_puts(b, "],\"outputs\":[");
    for (int i = 0; i < SRV_V2_OUT_COUNT; i++) {
        if (i)
            srv_buf_putc(b, ',');
        metadata_tensor(b, &out[i]);
    }
    srv_buf_puts(b, "],\"parameters\":");
    put_json(b, params);
    srv_buf_putc(b, '}');
    return b->failed ? -1 : 0;
}

/* ModelInput / ModelOutput of the configuration. */
static void config_tensor(srv_buf *b, const srv_v2_tensor_info *t, bool input)
{
    srv_buf_printf(b, "{\"name\":\"%s\",\"data_type\":\"TYPE_%s\",", t->name, t->datatype);
    if (input)
        srv_buf_puts(b, "\"format\":\"FORMAT_NONE\",");
    srv_buf_puts(b, "\"dims\":");
    put_dims(b, t);
    if (input)
        srv_buf_printf(b,
                       ",\"is_shape_tensor\":false,\"allow_ragged_batch\":false,\"optional\":%s}",
                       t->optional ? "true" : "false");
    else
        srv_buf_puts(b, ",\"label_filename\":\"\",\"is_shape_tensor\":false}");
}

/* map<string, ModelParameter>: every member of the config object, its value as text. */
static void config_parameters(srv_buf *b, const json_t *params)
{
    srv_buf_putc(b, '{');
    const char *key;
    const json_t *v;
    bool first = true;
    json_object_foreach((json_t *)params, key, v)
    {
        if (!first)
            srv_buf_putc(b, ',');
        first = false;
        srv_buf_json_string(b, key);
        srv_buf_puts(b, ":{\"string_value\":");
        if (json_is_string(v)) {
            srv_buf_json_string(b, json_string_value(v));
        } else {
            char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
            if (!text)
                b->failed = true;
            srv_buf_json_string(b, text ? text : "");
            free(text);
        }
        srv_buf_putc(b, '}');
    }
    srv_buf_putc(b, '}');
}

int srv_v2_config_write(srv_buf *b, const char *name, const mha_config *cfg, const json_t *params,
                        int instances)
{
    srv_v2_tensor_info in[SRV_V2_IN_COUNT], out[SRV_V2_OUT_COUNT];
    srv_v2_model_inputs(cfg, in);
    srv_v2_model_outputs(cfg, out);
    srv_buf_puts(b, "{\"name\":");
    srv_buf_json_string(b, name);
    srv_buf_puts(b, ",\"platform\":\"attnd_mha\",\"backend\":\"attnd\",\"runtime\":\"\","
                    "\"version_policy\":{\"latest\":{\"num_versions\":1}},"
                    "\"max_batch_size\":0,\"input\":[");
    for (int i = 0; i < SRV_V2_IN_COUNT; i++) {
        if (i)
            srv_buf_putc(b, ',');
        config_tensor(b, &in[i], true);
    }
    srv_buf_puts(b, "],\"output\":[");
    for (int i = 0; i < SRV_V2_OUT_COUNT; i++) {
        if (i)
            srv_buf_putc(b, ',');
        config_tensor(b, &out[i], false);
    }
    srv_buf_puts(b, "],\"batch_input\":[],\"batch_output\":[],\"instance_group\":[{\"name\":");
    char group[160]; /* Triton names an unnamed group <model>_<index> */
    snprintf(group, sizeof group, "%s_0", name);
    srv_buf_json_string(b, group);
    srv_buf_printf(b,
                   ",\"kind\":\"KIND_CPU\",\"count\":%d,\"gpus\":[],\"secondary_devices\":[],"
                   "\"profile\":[],\"passive\":false,\"host_policy\":\"\"}],"
                   "\"default_model_filename\":\"weights.safetensors\","
                   "\"cc_model_filenames\":{},\"metric_tags\":{},\"parameters\":",
                   instances > 0 ? instances : 1);
    config_parameters(b, params);
    srv_buf_puts(b, ",\"model_warmup\":[],\"model_transaction_policy\":{\"decoupled\":false},"
                    "\"response_cache\":{\"enable\":false}}");
    return b->failed ? -1 : 0;
}
