/*
 * redact.c - describing a data dir file's problem without its bytes (see redact.h).
 */
#include "redact.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "config.h"

/* torch.nn.MultiheadAttention's state_dict names (weights.h) */
static const char *const param_names[] = {
    "in_proj_weight", "q_proj_weight", "k_proj_weight",   "v_proj_weight", "in_proj_bias",
    "bias_k",         "bias_v",        "out_proj.weight", "out_proj.bias",
};

/* True when field is "config.<a config field>" or "weights.<a parameter name>". */
static bool field_known(const char *field)
{
    if (strncmp(field, "config.", 7) == 0)
        return srv_config_field_known(field + 7);
    if (strncmp(field, "weights.", 8) == 0)
        for (size_t i = 0; i < sizeof param_names / sizeof param_names[0]; i++)
            if (strcmp(field + 8, param_names[i]) == 0)
                return true;
    return false;
}

void srv_redact_build_error(char *out, size_t size, const char *where, const srv_error *e)
{
    bool weights = strncmp(e->field, "weights", 7) == 0;
    /* field known: the message names it and numbers; the weights budget's: sizes and the name */
    if (field_known(e->field) || e->code == SRV_E_INSUFFICIENT_STORAGE) {
        snprintf(out, size, "%s: %s", where, e->message);
        return;
    }
    const char *what;
    switch (e->code) {
    case SRV_E_UNKNOWN_FIELD:
        what = weights ? "weights.safetensors holds a tensor that is not a parameter of the "
                         "layer's config"
                       : "config.json holds a field that is not a config field";
        break;
    case SRV_E_MISSING_FIELD:
        what = weights ? "weights.safetensors lacks a parameter of the layer's config"
                       : "config.json lacks a required field";
        break;
    case SRV_E_SHAPE:
        what = "a tensor of weights.safetensors has the wrong shape for the layer's config";
        break;
    case SRV_E_BAD_VALUE:
        what = "weights.safetensors holds a value that is not finite";
        break;
    case SRV_E_NOMEM:
        what = "out of memory building the layer";
        break;
    default:
        what = weights ? "weights.safetensors does not fit the layer's config"
                       : "config.json is not a valid layer config";
        break;
    }
    snprintf(out, size, "%s: %s (the log says which)", where, what);
}
