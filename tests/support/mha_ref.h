/*
 * mha_ref.h - a naive reference forward pass for the engine's tests (test_engine, test_engine_kernels).
 *
 * Written straight from torch's F.multi_head_attention_forward (torch 2.x mask merging, fully
 * masked rows giving 0), and for the extensions (head_dim, num_kv_heads, RoPE, ALiBi, window,
 * positions) from the Hugging Face conventions lib/mha.h states: plain loops, double accumulation,
 * no BLAS, nothing shared with lib/ but the layer's config and parameters (read through the public
 * API).
 */
#ifndef ATTND_MHA_REF_H
#define ATTND_MHA_REF_H

#include "mha.h"

/* Naive forward of layer on in. Fills out (the input's layout, plan.out_count floats), weights
 * (torch's shape, plan.weights_count floats) when in->need_weights, and every trace stage in tr
 * (each array sized per mha_trace_stage_shape, batch-major) when tr != NULL. */
void ref_mha_forward(const mha_layer *layer, const mha_inputs *in, float *out, float *weights,
                     float *tr[MHA_TRACE_NSTAGES]);

#endif
