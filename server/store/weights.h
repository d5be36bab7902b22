/*
 * weights.h - a layer's parameters <-> named float32 tensors (safetensors files, the data dir).
 *
 * A state_dict saved from torch (names and shapes of nn.MultiheadAttention.state_dict()) fills a
 * layer unchanged; the file must hold exactly the parameters the config has: a missing one, one
 * the config does not have (e.g. bias_k without add_bias_kv) or a wrong shape is refused, naming
 * the parameter and both shapes.
 */
#ifndef ATTND_WEIGHTS_H
#define ATTND_WEIGHTS_H

#include "base/buf.h"
#include "base/error.h"
#include "codec/safetensors.h"
#include "mha.h"

/* Copies every tensor of st into layer (being built, not yet shared). field prefixes names in
 * errors ("weights"). Returns 0, or -1 with err: SRV_E_SHAPE (wrong shape), SRV_E_MISSING_FIELD /
 * SRV_E_UNKNOWN_FIELD (missing or unknown parameter, as for a JSON map), SRV_E_BAD_VALUE (NaN/inf). */
int srv_weights_from_st(mha_layer *layer, const srv_st *st, const char *field, srv_error *err);

/* Views of the layer's parameters (borrowed from it) for srv_st_write / srv_datadir_write; shapes
 * point into the layer's param info. Returns the count (<= MHA_MAX_PARAMS). */
int srv_weights_views(const mha_layer *layer, srv_st_view out[MHA_MAX_PARAMS]);

/* Appends the layer's parameters as a safetensors file (metadata {"format": "pt"}) to out.
 * Returns 0 or -1 (SRV_E_NOMEM). */
int srv_weights_to_safetensors(srv_buf *out, const mha_layer *layer, srv_error *err);

#endif
