/*
 * weights.c - a layer's parameters <-> named float32 tensors (see weights.h).
 */
#include "weights.h"

#include <stdio.h>
#include <string.h>

/* "[12, 4]" */
static void shape_str(char *out, size_t size, int ndim, const int64_t *shape)
{
    size_t n = 0;
    n += (size_t)snprintf(out + n, size - n, "[");
    for (int d = 0; d < ndim && n < size; d++)
        n += (size_t)snprintf(out + n, size - n, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (n < size)
        snprintf(out + n, size - n, "]");
}

int srv_weights_from_st(mha_layer *layer, const srv_st *st, const char *field, srv_error *err)
{
    char f[96];
    for (int i = 0; i < st->n; i++) {
        const srv_st_tensor *t = &st->tensors[i];
        snprintf(f, sizeof f, "%s.%.64s", field, t->name);
        int k = mha_layer_param_find(layer, t->name);
        if (k < 0) {
            char names[256] = "";
            size_t n = 0;
            for (int j = 0; j < mha_layer_param_count(layer) && n < sizeof names; j++)
                n += (size_t)snprintf(names + n, sizeof names - n, j ? ", %s" : "%s",
                                      mha_layer_param_info(layer, j)->name);
            return srv_error_set(err, SRV_E_UNKNOWN_FIELD, f,
                                 "the layer's config has no parameter \"%.64s\" (it has %s)",
                                 t->name, names);
        }
        const mha_param_info *pi = mha_layer_param_info(layer, k);
        bool same = pi->ndim == t->ndim;
        for (int d = 0; same && d < t->ndim; d++)
            same = pi->shape[d] == t->shape[d];
        if (!same) {
            char got[96], want[96];
            shape_str(got, sizeof got, t->ndim, t->shape);
            shape_str(want, sizeof want, pi->ndim, pi->shape);
            return srv_error_set(err, SRV_E_SHAPE, f, "%s has shape %s, the layer's config needs %s",
                                 t->name, got, want);
        }
        mha_error me = {0};
        if (mha_layer_set_param(layer, t->name, t->data, t->ndim, t->shape, &me) != MHA_OK)
            return srv_error_set(err, me.status == MHA_ERR_VALUE ? SRV_E_BAD_VALUE : SRV_E_SHAPE,
                                 f, "%s", me.message);
    }
    /* every parameter the config has must be given */
    for (int k = 0; k < mha_layer_param_count(layer); k++) {
        const mha_param_info *pi = mha_layer_param_info(layer, k);
        if (!srv_st_find(st, pi->name)) {
            char want[96];
            shape_str(want, sizeof want, pi->ndim, pi->shape);
            snprintf(f, sizeof f, "%s.%s", field, pi->name);
            return srv_error_set(err, SRV_E_MISSING_FIELD, f,
                                 "parameter %s %s is missing (a layer's file holds every "
                                 "parameter of its config, under torch's state_dict names)",
                                 pi->name, want);
        }
    }
    return 0;
}

int srv_weights_views(const mha_layer *layer, srv_st_view out[MHA_MAX_PARAMS])
{
    int n = mha_layer_param_count(layer);
    for (int k = 0; k < n && k < MHA_MAX_PARAMS; k++) {
        const mha_param_info *pi = mha_layer_param_info(layer, k);
        out[k] = (srv_st_view){pi->name, pi->ndim, pi->shape, mha_layer_param_data(layer, k)};
    }
    return n;
}

int srv_weights_to_safetensors(srv_buf *out, const mha_layer *layer, srv_error *err)
{
    srv_st_view v[MHA_MAX_PARAMS];
    int n = srv_weights_views(layer, v);
    json_t *meta = json_pack("{s:s}", "format", "pt");
    if (!meta)
        return srv_error_set(err, SRV_E_NOMEM, "", "out of memory");
    int rc = srv_st_write(out, v, n, meta, err);
    json_decref(meta);
    return rc;
}
