/*
 * trace.c - the trace's stages as the API shows them (see trace.h).
 */
#include "trace.h"

#include <string.h>

#include "base/bigbuf.h"

/* Each stage's axes in the engine's batch-major order (mha.h's shapes). */
static const char *const engine_axes[MHA_TRACE_NSTAGES] = {
    [MHA_TRACE_Q_PROJ] = "NLE",       [MHA_TRACE_K_PROJ] = "NSE",
    [MHA_TRACE_V_PROJ] = "NSE",       [MHA_TRACE_Q_HEADS] = "NHLD",
    [MHA_TRACE_K_HEADS] = "NHSD",     [MHA_TRACE_V_HEADS] = "NHSD",
    [MHA_TRACE_SCORES] = "NHLS",      [MHA_TRACE_ATTN_WEIGHTS] = "NHLS",
    [MHA_TRACE_HEAD_OUTPUTS] = "NHLD", [MHA_TRACE_CONCAT] = "NLE",
    [MHA_TRACE_OUTPUT] = "NLE",
};

/* The stages laid out as the query and the output are (sequence-first with batch_first false). */
static bool sequence_shaped(mha_trace_stage s)
{
    return s == MHA_TRACE_Q_PROJ || s == MHA_TRACE_K_PROJ || s == MHA_TRACE_V_PROJ ||
           s == MHA_TRACE_CONCAT || s == MHA_TRACE_OUTPUT;
}

int srv_trace_stages_parse(const json_t *v, unsigned *wanted, srv_error *err)
{
    char known[256] = "";
    for (int s = 0; s < MHA_TRACE_NSTAGES; s++)
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", s ? ", " : "",
                 mha_trace_stage_name((mha_trace_stage)s));
    if (!json_is_array(v) || json_array_size(v) == 0)
        return srv_error_set(err, SRV_E_BAD_REQUEST, "stages",
                             "stages must be a non-empty array of stage names, from: %s", known);
    unsigned set = 0;
    size_t i;
    json_t *item;
    json_array_foreach(v, i, item) {
        const char *name = json_string_value(item);
        int found = -1;
        for (int s = 0; name && s < MHA_TRACE_NSTAGES && found < 0; s++)
            if (strcmp(name, mha_trace_stage_name((mha_trace_stage)s)) == 0)
                found = s;
        if (found < 0 && !name)
            return srv_error_set(err, SRV_E_BAD_REQUEST, "stages",
                                 "stages[%zu] is not a string; stages are named: %s", i, known);
        if (found < 0)
            return srv_error_set(err, SRV_E_BAD_REQUEST, "stages",
                                 "unknown stage '%.64s' in stages; the stages are: %s", name, known);
        set |= 1u << found;
    }
    *wanted = set;
    return 0;
}

void srv_trace_stage_view(const mha_plan *plan, bool batch_first, bool average, mha_trace_stage s,
                          srv_trace_stage *v)
{
    memset(v, 0, sizeof *v);
    v->stage = s;
    if (s == MHA_TRACE_OUTPUT) { /* forward's own answer */
        v->ndim = plan->out_ndim;
        memcpy(v->shape, plan->out_shape, sizeof plan->out_shape);
        snprintf(v->axes, sizeof v->axes, "%s", !plan->batched ? "LE" : batch_first ? "NLE" : "LNE");
        v->count = plan->out_count;
        return;
    }
    if (s == MHA_TRACE_ATTN_WEIGHTS) { /* forward's own answer */
        v->ndim = plan->weights_ndim;
        memcpy(v->shape, plan->weights_shape, sizeof v->shape);
        const char *axes = average ? "NLS" : "NHLS";
        snprintf(v->axes, sizeof v->axes, "%s", plan->batched ? axes : axes + 1);
        if (plan->top_k) /* the last axis is the k strongest keys */
            v->axes[strlen(v->axes) - 1] = 'T';
        v->count = plan->weights_count;
        return;
    }
    int64_t e[4];
    int nd = mha_trace_stage_shape(plan, s, e, &v->count);
    const char *axes = engine_axes[s];
    /* grouped-query attention: k_heads and v_heads hold the num_kv_heads kv heads (K), not H */
    if ((s == MHA_TRACE_K_HEADS || s == MHA_TRACE_V_HEADS) && plan->Hkv != plan->H)
        axes = "NKSD";
    if (!plan->batched) { /* unbatched in, unbatched out: N (1) is dropped */
        v->ndim = nd - 1;
        memcpy(v->shape, e + 1, (size_t)(nd - 1) * sizeof *e);
        snprintf(v->axes, sizeof v->axes, "%s", axes + 1);
    } else if (!batch_first && sequence_shaped(s)) { /* [N,X,C] shown as [X,N,C] */
        v->ndim = nd;
        v->shape[0] = e[1];
        v->shape[1] = e[0];
        v->shape[2] = e[2];
        v->axes[0] = axes[1];
        v->axes[1] = axes[0];
        v->axes[2] = axes[2];
        v->transposed = true;
        memcpy(v->engine, e, sizeof v->engine);
    } else {
        v->ndim = nd;
        memcpy(v->shape, e, sizeof v->shape);
        snprintf(v->axes, sizeof v->axes, "%s", axes);
    }
    if (s == MHA_TRACE_SCORES && plan->top_k)
        v->axes[strlen(v->axes) - 1] = 'T';
}

const float *srv_trace_stage_data(const srv_trace_stage *v, const float *src, float **copy)
{
    *copy = NULL;
    if (!v->transposed)
        return src;
    const int64_t N = v->engine[0], X = v->engine[1], C = v->engine[2];
    float *dst = srv_bigbuf_array_alloc((size_t)(v->count > 0 ? v->count : 1) * sizeof(float));
    if (!dst)
        return NULL;
    for (int64_t n = 0; n < N; n++)
        for (int64_t x = 0; x < X; x++)
            memcpy(dst + (x * N + n) * C, src + (n * X + x) * C, (size_t)C * sizeof(float));
    *copy = dst;
    return dst;
}
