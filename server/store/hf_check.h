/*
 * hf_check.h - an imported layer checked against the model's own numbers.
 *
 * A reference file is a safetensors file (any float dtype) that holds what the model's attention
 * module took and gave for layer I, as captured with a forward hook in transformers:
 *   hidden_states   [N,L,E] or [L,E]   the module's input (after the block's layer norm)
 *   attn_output     same shape          the module's output (before dropout and residual)
 * Queries are at positions 0..L-1 with no padding; the layer's own is_causal applies.
 */
#ifndef ATTND_HF_CHECK_H
#define ATTND_HF_CHECK_H

#include "base/error.h"
#include "codec/safetensors.h"
#include "registry.h"

/* Runs l on ref's hidden_states and compares with its attn_output: *max_diff gets the largest
 * |difference|, *max_ref the largest |attn_output| (for a relative figure). Returns 0, or -1 with
 * err: SRV_E_BAD_REQUEST naming the tensor that is missing or misshapen, an engine error. */
int srv_hf_check(const srv_layer *l, const srv_st *ref, double *max_diff, double *max_ref,
                 srv_error *err);

#endif
