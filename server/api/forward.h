/*
 * forward.h - the one forward path every API shares (/v1 forward and trace, /v2 infer).
 *
 * From parsed request tensors to engine outputs: build mha_inputs, plan (shapes and limits checked
 * before anything is allocated), take a slot under --max-inflight (waiting up to --queue-wait-ms,
 * then 503), allocate the outputs once, run on the shared engine pool. Every API calls this, so the
 * same request gives the same numbers bit for bit whichever API it came through.
 */
#ifndef ATTND_FORWARD_H
#define ATTND_FORWARD_H

#include <stdbool.h>

#include "app/app.h"
#include "base/error.h"
#include "codec/positions.h"
#include "codec/tensor.h"
#include "codec/weights_select.h"
#include "mha.h"
#include "store/registry.h"
#include "trace.h"

typedef struct srv_forward_args {
    srv_tensor query;            /* float32 [N,L,E] / [L,N,E] !! batch_first / [L,E]       */
    srv_tensor key;              /* absent when data == NULL: key = query                   */
    srv_tensor value;            /* absent: value = key                                     */
    srv_tensor key_padding_mask; /* bool or float32 [N,S0] / [S0]; absent when data == NULL  */
    srv_tensor attn_mask;        /* bool or float32 [L,S0] / [N·H,L,S0] / [H,L,S0]           */
    srv_positions positions;     /* [L] / [N,L]; absent (ndim 0): 0..L-1                     */
    srv_positions key_positions; /* [S0] / [N,S0]; absent: the positions in self-attention,
                                  * else 0..S0-1 (lib/mha.h)                                 */
    bool is_causal;              /* used when is_causal_given; else the layer's is_causal    */
    bool is_causal_given;
    bool need_weights;           /* default false                                           */
    bool need_output;            /* default true; false: /v1 forward leaves "output" out of its
                                  * reply (the pass still computes it: only bytes are saved)   */
    bool average_attn_weights;   /* default true                                            */
    srv_select select;           /* the weights chosen (weights_select; codec/weights_select.h):
                                  * when given, forward returns them (need_weights implied) and
                                  * a trace's scores and attn_weights stages take them       */
    srv_select_style select_style; /* how errors name its members: /v1's or the flat names    */
    const int *cancel;           /* the request's gone flag (srv_request.gone) or NULL: once it
                                  * is set, a wait for a slot or the pass itself stops          */
} srv_forward_args;

/* Zeroes args and sets the defaults above. */
void srv_forward_args_init(srv_forward_args *args);
/* Frees the tensors (and the selection) args owns. */
void srv_forward_args_free(srv_forward_args *args);

typedef struct srv_forward_result {
    mha_plan plan;
    float *output;                     /* [plan.out_count], shaped plan.out_shape              */
    float *attn_weights;               /* [plan.weights_count] when need_weights, else NULL    */
    int32_t *topk_indices;             /* [plan.weights_count] with a top-k selection, else NULL */
    int32_t *stage_indices[MHA_TRACE_NSTAGES]; /* a traced scores stage's top-k key indices  */
    srv_wire_dtype weights_dtype;      /* the precision the chosen weights go out in           */
    float *stage[MHA_TRACE_NSTAGES];   /* a trace's stages, batch-major (mha_trace_stage_shape),
                                        * each NULL unless asked for; never output and
                                        * attn_weights: those are the two above (trace.h)    */
    unsigned traced;                   /* the stages of a trace (SRV_TRACE_ALL ...), or 0      */
    double queue_s;                    /* waited for a slot under --max-inflight (seconds)     */
    double pass_s;                     /* the engine's pass (seconds)                          */
} srv_forward_result;

/* Runs args through layer. With stages (a trace: bit s for mha_trace_stage s; 0 for a forward
 * pass), those stages are kept too: attn_weights is then computed as forward computes it with
 * need_weights (the request's need_weights is not read), output is the output; the others are
 * the engine's. A trace whose stages together (as trace.h shows them) hold more than
 * --max-trace-elements numbers is refused with SRV_E_TOO_LARGE, and a pass whose FLOPs pass
 * --max-request-flops with SRV_E_TOO_COSTLY, before anything is allocated. Fills out (zeroed
 * first; free with srv_forward_result_free) and returns 0, or -1 with err filled: 400 shape/value
 * errors naming the input, 413 limits, 503 when the in-flight cap stays full for --queue-wait-ms
 * or memory runs out, SRV_E_CANCELLED when args->cancel is set while the pass waits for a slot or
 * runs (its slot and outputs are given back at once). */
int srv_forward_run(srv_app *app, const srv_layer *layer, const srv_forward_args *args,
                    unsigned stages, srv_forward_result *out, srv_error *err);

void srv_forward_result_free(srv_forward_result *r); /* accepts NULL and zeroed results */

/* For a pass handled on an HTTP thread, which polls other connections and so must never wait for a
 * slot under --max-inflight: takes one now for the request this thread is about to handle, which
 * srv_forward_run then uses instead of waiting. False when every slot is taken (the request should
 * go to a worker, where waiting is harmless). srv_forward_slot_drop after the handler gives the slot
 * back if the request never reached its pass (a bad body); a no-op when it did. */
bool srv_forward_slot_try(srv_app *app);
void srv_forward_slot_drop(srv_app *app);

/* Counts a request that reached layer's forward path, for the statistics extension and /metrics
 * (store/layer_stats.h): ok or failed, its total time from req->t_start to now, and for a success
 * its phases: input_s reading the body, r's queue and pass, output_s writing the reply. Lock-free.
 * Every API calls it once per such request. */
void srv_forward_count(const srv_layer *layer, const srv_request *req, bool ok, double input_s,
                       const srv_forward_result *r, double output_s);

/* The cost limit (--max-request-flops) for a pass on a layer of config cfg whose query has shape
 * q[0, q_ndim) and key k[0, k_ndim) (k NULL: key = query), as far as the shapes tell before any
 * tensor is decoded: -1 with err (SRV_E_TOO_COSTLY, 413, naming the estimate and the limit) when
 * the pass's FLOPs (mha_flops, describe's formula) pass the limit, else 0 (also when the shapes do
 * not fit the layer: the pass's own checks say why later). srv_forward_run checks its plan the
 * same way, whatever the API; this lets a handler refuse before it decodes. */
int srv_forward_check_cost(const srv_app *app, const mha_config *cfg, int q_ndim, const int64_t *q,
                           int k_ndim, const int64_t *k, srv_error *err);

#endif
