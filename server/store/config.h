/*
 * config.h - layer configs as JSON (PUT's "config", the data dir's config.json) <-> mha_config, and
 * building layers from them.
 *
 * Field names and defaults are torch's except batch_first (default true). A config is
 * checked strictly: an unknown field is a 400 naming it, a wrong type or an impossible value a 422
 * naming it ("config.embed_dim"). The extensions beyond torch: head_dim, num_kv_heads
 * and window (positive integers, or null for the default: E/H, H, none), rope ({"theta": t} or
 * null), alibi and is_causal (booleans); their rules are the engine's (mha_config_check: a 422
 * naming config.num_kv_heads, config.head_dim, config.rope.theta, ...).
 */
#ifndef ATTND_CONFIG_H
#define ATTND_CONFIG_H

#include <stdbool.h>

#include <jansson.h>

#include "base/error.h"
#include "mha.h"
#include "registry.h"

/* Reads a config object into cfg (defaults filled in) and checks it against limits (may be NULL).
 * `field` prefixes field names in errors ("config"). Returns 0 or -1 with err filled. */
int srv_config_from_json(mha_config *cfg, const json_t *obj, const mha_limits *limits,
                         const char *field, srv_error *err);

/* True when name is a field of a config object ("embed_dim", "rope", ...). */
bool srv_config_field_known(const char *name);

/* The config as a JSON object with every field spelled out (new reference; NULL when out of
 * memory). kdim, vdim, head_dim and num_kv_heads are written resolved (never null); rope is
 * {"theta": t} or null, window an integer or null. */
json_t *srv_config_to_json(const mha_config *cfg);

/* Builds a layer entry named `name` from cfg, initialised with method ("xavier_uniform" or "zeros")
 * and seed, on the threads of pool (NULL: the caller's; the values are the same either way).
 * Returns a new entry (one reference, the caller's) or NULL with err filled. */
srv_layer *srv_layer_build_init(const char *name, const mha_config *cfg, const mha_limits *limits,
                                const char *method, uint64_t seed, mha_pool *pool, srv_error *err);

#endif
