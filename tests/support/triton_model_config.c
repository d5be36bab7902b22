/*
 * triton_model_config.c - ModelConfig's fields as model_config.proto declares them, and a body
 * checked against them (see triton_model_config.h).
 */
#include "triton_model_config.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef enum kind {
    K_STRING,  /* string                                   */
    K_INT,     /* int32, uint32, int64, uint64 (JSON number) */
    K_BOOL,    /* bool                                     */
    K_ENUM,    /* ref: the enum's value names              */
    K_MSG,     /* ref: the message                         */
    K_ANY_MSG, /* a message this table does not detail     */
} kind;

typedef struct field {
    const char *msg, *name;
    kind kind;
    bool repeated;
    bool map; /* map<string, ...>: an object of values of this kind */
    const char *ref;
} field;

#define DATA_TYPES                                                                                 \
    " TYPE_INVALID TYPE_BOOL TYPE_UINT8 TYPE_UINT16 TYPE_UINT32 TYPE_UINT64 TYPE_INT8 TYPE_INT16 " \
    "TYPE_INT32 TYPE_INT64 TYPE_FP16 TYPE_FP32 TYPE_FP64 TYPE_STRING TYPE_BF16 "

static const field FIELDS[] = {
    {"ModelConfig", "name", K_STRING, false, false, NULL},
    {"ModelConfig", "platform", K_STRING, false, false, NULL},
    {"ModelConfig", "backend", K_STRING, false, false, NULL},
    {"ModelConfig", "runtime", K_STRING, false, false, NULL},
    {"ModelConfig", "version_policy", K_MSG, false, false, "ModelVersionPolicy"},
    {"ModelConfig", "max_batch_size", K_INT, false, false, NULL},
    {"ModelConfig", "input", K_MSG, true, false, "ModelInput"},
    {"ModelConfig", "output", K_MSG, true, false, "ModelOutput"},
    {"ModelConfig", "batch_input", K_ANY_MSG, true, false, NULL},
    {"ModelConfig", "batch_output", K_ANY_MSG, true, false, NULL},
    {"ModelConfig", "optimization", K_ANY_MSG, false, false, NULL},
    {"ModelConfig", "dynamic_batching", K_ANY_MSG, false, false, NULL},
    {"ModelConfig", "sequence_batching", K_ANY_MSG, false, false, NULL},
    {"ModelConfig", "ensemble_scheduling", K_ANY_MSG, false, false, NULL},
    {"ModelConfig", "instance_group", K_MSG, true, false, "ModelInstanceGroup"},
    {"ModelConfig", "default_model_filename", K_STRING, false, false, NULL},
    {"ModelConfig", "cc_model_filenames", K_STRING, false, true, NULL},
    {"ModelConfig", "metric_tags", K_STRING, false, true, NULL},
    {"ModelConfig", "parameters", K_MSG, false, true, "ModelParameter"},
    {"ModelConfig", "model_warmup", K_ANY_MSG, true, false, NULL},
    {"ModelConfig", "model_operations", K_ANY_MSG, false, false, NULL},
    {"ModelConfig", "model_transaction_policy", K_MSG, false, false, "ModelTransactionPolicy"},
    {"ModelConfig", "model_repository_agents", K_ANY_MSG, false, false, NULL},
    {"ModelConfig", "response_cache", K_MSG, false, false, "ModelResponseCache"},
    {"ModelConfig", "model_metrics", K_ANY_MSG, false, false, NULL},

    {"ModelVersionPolicy", "latest", K_MSG, false, false, "Latest"},
    {"ModelVersionPolicy", "all", K_MSG, false, false, "All"},
    {"ModelVersionPolicy", "specific", K_MSG, false, false, "Specific"},
    {"Latest", "num_versions", K_INT, false, false, NULL},
    {"Specific", "versions", K_INT, true, false, NULL},

    {"ModelInput", "name", K_STRING, false, false, NULL},
    {"ModelInput", "data_type", K_ENUM, false, false, DATA_TYPES},
    {"ModelInput", "format", K_ENUM, false, false, " FORMAT_NONE FORMAT_NHWC FORMAT_NCHW "},
    {"ModelInput", "dims", K_INT, true, false, NULL},
    {"ModelInput", "reshape", K_MSG, false, false, "ModelTensorReshape"},
    {"ModelInput", "is_shape_tensor", K_BOOL, false, false, NULL},
    {"ModelInput", "allow_ragged_batch", K_BOOL, false, false, NULL},
    {"ModelInput", "optional", K_BOOL, false, false, NULL},
    {"ModelInput", "is_non_linear_format_io", K_BOOL, false, false, NULL},

    {"ModelOutput", "name", K_STRING, false, false, NULL},
    {"ModelOutput", "data_type", K_ENUM, false, false, DATA_TYPES},
    {"ModelOutput", "dims", K_INT, true, false, NULL},
    {"ModelOutput", "reshape", K_MSG, false, false, "ModelTensorReshape"},
    {"ModelOutput", "label_filename", K_STRING, false, false, NULL},
    {"ModelOutput", "is_shape_tensor", K_BOOL, false, false, NULL},
    {"ModelOutput", "is_non_linear_format_io", K_BOOL, false, false, NULL},

    {"ModelTensorReshape", "shape", K_INT, true, false, NULL},

    {"ModelInstanceGroup", "name", K_STRING, false, false, NULL},
    {"ModelInstanceGroup", "kind", K_ENUM, false, false,
     " KIND_AUTO KIND_GPU KIND_CPU KIND_MODEL "},
    {"ModelInstanceGroup", "count", K_INT, false, false, NULL},
    {"ModelInstanceGroup", "rate_limiter", K_ANY_MSG, false, false, NULL},
    {"ModelInstanceGroup", "gpus", K_INT, true, false, NULL},
    {"ModelInstanceGroup", "secondary_devices", K_MSG, true, false, "SecondaryDevice"},
    {"ModelInstanceGroup", "profile", K_STRING, true, false, NULL},
    {"ModelInstanceGroup", "passive", K_BOOL, false, false, NULL},
    {"ModelInstanceGroup", "host_policy", K_STRING, false, false, NULL},
    {"SecondaryDevice", "kind", K_ENUM, false, false, " KIND_NVDLA "},
    {"SecondaryDevice", "device_id", K_INT, false, false, NULL},

    {"ModelParameter", "string_value", K_STRING, false, false, NULL},
    {"ModelTransactionPolicy", "decoupled", K_BOOL, false, false, NULL},
    {"ModelResponseCache", "enable", K_BOOL, false, false, NULL},
};
#define NFIELDS (int)(sizeof FIELDS / sizeof FIELDS[0])

static bool fail(char *why, size_t size, const char *path, const char *fmt, ...)
{
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(why, size, "%s: %s", path[0] ? path : "(config)", msg);
    return false;
}

static bool check_msg(const char *msg, const json_t *v, const char *path, char *why, size_t size);

/* One value (not repeated, not a map) of field f. */
static bool check_value(const field *f, const json_t *v, const char *path, char *why, size_t size)
{
    switch (f->kind) {
    case K_STRING:
        return json_is_string(v) ? true : fail(why, size, path, "not a string");
    case K_INT:
        return json_is_integer(v) ? true : fail(why, size, path, "not a whole number");
    case K_BOOL:
        return json_is_boolean(v) ? true : fail(why, size, path, "not a boolean");
    case K_ENUM: {
        char word[64];
        if (!json_is_string(v))
            return fail(why, size, path, "not an enum value name (a string)");
        snprintf(word, sizeof word, " %s ", json_string_value(v));
        return strstr(f->ref, word) ? true
                                    : fail(why, size, path, "\"%s\" is not a value of the enum",
                                           json_string_value(v));
    }
    case K_MSG:
        return check_msg(f->ref, v, path, why, size);
    case K_ANY_MSG:
        return json_is_object(v) ? true : fail(why, size, path, "not an object (a message)");
    }
    return false;
}

static bool check_msg(const char *msg, const json_t *v, const char *path, char *why, size_t size)
{
    if (!json_is_object(v))
        return fail(why, size, path, "not an object (message %s)", msg);
    const char *key;
    const json_t *val;
    json_object_foreach((json_t *)v, key, val)
    {
        const field *f = NULL;
        for (int i = 0; i < NFIELDS && !f; i++)
            if (!strcmp(FIELDS[i].msg, msg) && !strcmp(FIELDS[i].name, key))
                f = &FIELDS[i];
        char sub[256];
        snprintf(sub, sizeof sub, "%s%s%s", path, path[0] ? "." : "", key);
        if (!f)
            return fail(why, size, sub, "%s has no field \"%s\"", msg, key);
        if (f->repeated) {
            if (!json_is_array(val))
                return fail(why, size, sub, "a repeated field: not an array");
            size_t i;
            const json_t *e;
            json_array_foreach((json_t *)val, i, e)
            {
                char el[300];
                snprintf(el, sizeof el, "%s[%zu]", sub, i);
                if (!check_value(f, e, el, why, size))
                    return false;
            }
        } else if (f->map) {
            if (!json_is_object(val))
                return fail(why, size, sub, "a map: not an object");
            const char *mk;
            const json_t *mv;
            json_object_foreach((json_t *)val, mk, mv)
            {
                char el[300];
                snprintf(el, sizeof el, "%s.%s", sub, mk);
                if (!check_value(f, mv, el, why, size))
                    return false;
            }
        } else if (!check_value(f, val, sub, why, size)) {
            return false;
        }
    }
    return true;
}

bool tmc_check(const json_t *config, char *why, size_t size)
{
    why[0] = '\0';
    return check_msg("ModelConfig", config, "", why, size);
}
