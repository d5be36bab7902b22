/*
 * hf_check.c - an imported layer run on the model's captured input and compared with its output
 * (see hf_check.h).
 */
#include "hf_check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int srv_hf_check(const srv_layer *l, const srv_st *ref, double *max_diff, double *max_ref,
                 srv_error *err)
{
    const srv_st_tensor *x = srv_st_find(ref, "hidden_states");
    const srv_st_tensor *y = srv_st_find(ref, "attn_output");
    if (!x || !y)
        return srv_error_set(err, SRV_E_BAD_REQUEST, "check",
                             "the reference file needs tensors \"hidden_states\" [N,L,E] and "
                             "\"attn_output\" (the attention module's input and output)");
    if (x->ndim != y->ndim || (x->ndim != 2 && x->ndim != 3) ||
        memcmp(x->shape, y->shape, (size_t)x->ndim * sizeof x->shape[0]) != 0)
        return srv_error_set(err, SRV_E_BAD_REQUEST, "check",
                             "reference tensors \"hidden_states\" and \"attn_output\" must both be "
                             "[N,L,E] or [L,E], of the same shape");
    mha_inputs in;
    memset(&in, 0, sizeof in);
    in.query.data = x->data;
    in.query.ndim = x->ndim;
    memcpy(in.query.shape, x->shape, (size_t)x->ndim * sizeof x->shape[0]);
    in.is_causal = json_is_true(json_object_get(l->config, "is_causal"));
    mha_plan plan;
    mha_error me = {0};
    if (mha_plan_forward(l->layer, &in, NULL, &plan, &me) != MHA_OK)
        return srv_error_from_mha(err, &me, "check.");
    float *out = malloc((size_t)plan.out_count * sizeof *out);
    if (!out)
        return srv_error_set(err, SRV_E_NOMEM, "check", "out of memory");
    if (mha_forward(l->layer, &in, &plan, out, NULL, NULL, NULL, &me) != MHA_OK) {
        free(out);
        return srv_error_from_mha(err, &me, "check.");
    }
    double d = 0, r = 0;
    for (int64_t i = 0; i < plan.out_count; i++) {
        d = fmax(d, fabs((double)out[i] - y->data[i]));
        r = fmax(r, fabs((double)y->data[i]));
    }
    free(out);
    *max_diff = d;
    *max_ref = r;
    return 0;
}
