/*
 * trace.h - the trace as the API shows it: which stages a request asks for, and each stage's shape,
 * axes and layout.
 *
 * The engine computes every stage batch-major ([N,...], N = 1 for an unbatched query; mha.h). The
 * API shows them in the request's own terms:
 *   - output and attn_weights are exactly forward's answer to the same request: output [N,L,E],
 *     [L,N,E] for a batch_first false layer, [L,E] for an unbatched query; attn_weights as with
 *     need_weights, averaged over the heads [N,L,S] unless average_attn_weights is false, then per
 *     head [N,H,L,S] (batch-major whatever batch_first says, as torch returns them), without N for
 *     an unbatched query. They are forward's own buffers, not copies of the engine's trace.
 *   - the stages shaped like an input or the output (q_proj, k_proj, v_proj, concat) are laid out
 *     as output is: [N,L,E] / [L,N,E] / [L,E] (k_proj, v_proj with S).
 *   - the per-head stages (q_heads, k_heads, v_heads, scores, head_outputs) keep one order whatever
 *     the layout: [N,H,L,D], [N,H,S,D], [N,H,L,S] - the order of torch's own [N·H, L, D] view inside
 *     the module - without N for an unbatched query.
 * Every stage names its axes, one letter per dimension, from one legend:
 *   N batch, L query positions (target), S key positions (source: the keys given in k_proj and
 *   v_proj; from k_heads on with the bias_k key and the zero key appended), E embed_dim, H heads,
 *   D head_dim, K kv heads, T the k strongest keys of a top-k selection (weights_select: the scores
 *   and attn_weights stages then hold the selection, scores per head).
 * With the extensions beyond torch: k_heads and v_heads hold the num_kv_heads kv heads, axes N K S D,
 * when there are fewer of them than heads (else N H S D); the projections' and concat's last axis,
 * E, is then H·D (q_proj, concat) or num_kv_heads·D (k_proj, v_proj), which only a torch layer's
 * shapes make embed_dim.
 */
#ifndef ATTND_TRACE_H
#define ATTND_TRACE_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "base/error.h"
#include "mha.h"

/* Every stage, as a set (bit s = stage s of mha_trace_stage). */
#define SRV_TRACE_ALL ((1u << MHA_TRACE_NSTAGES) - 1u)

/* The value of a trace body's "stages": a non-empty JSON array of stage names, in any order (the
 * reply keeps pipeline order; a name given twice counts once). Sets *wanted. Anything else is a
 * 400 naming "stages" and, for an unknown name, listing the known ones. */
int srv_trace_stages_parse(const json_t *v, unsigned *wanted, srv_error *err);

/* One stage as the API shows it. */
typedef struct srv_trace_stage {
    mha_trace_stage stage;
    int ndim;
    int64_t shape[4];
    char axes[5];      /* one letter per dimension of shape, NUL-terminated            */
    int64_t count;
    bool transposed;   /* the engine's [N,X,C] is shown as [X,N,C] (batch_first false) */
    int64_t engine[3]; /* with transposed: the engine's N, X, C                         */
} srv_trace_stage;

/* Stage s of a pass planned as plan (with need_weights when s is attn_weights), for a layer with
 * batch_first, and a request with average_attn_weights = average. The numbers of output and
 * attn_weights are forward's buffers (plan.out_shape, plan.weights_shape), the others the engine's
 * trace stages (mha_trace_stage_shape). */
void srv_trace_stage_view(const mha_plan *plan, bool batch_first, bool average, mha_trace_stage s,
                          srv_trace_stage *v);

/* The stage's numbers in v's layout, from src in the engine's: src itself, or, for a transposed
 * view, a copy in v's order made in *copy (srv_bigbuf_array_alloc'd: free it with
 * srv_bigbuf_array_free once written). NULL when out of memory. */
const float *srv_trace_stage_data(const srv_trace_stage *v, const float *src, float **copy);

#endif
