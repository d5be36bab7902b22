/*
 * config.h - layer configs as JSON (PUT's "config", the data dir's config.json) <-> mha_config, and
 * building layers from them.
 *
 * Field names and defaults are torch's except batch_first (default true). A config is
 * checked strictly: an unknown field is a 400 naming it, a wrong type or an impossible value a 422
 * naming it ("config.embed_dim"). The extensions beyond torch (head_dim, num_kv_heads,
 * rope, alibi, window) are known fields: their defaults are accepted, anything else is a 422 saying
 * this build does not have them yet.
 */
#ifndef ATTND_CONFIG_H
#define ATTND_CONFIG_H

#include <jansson.h>

#include "base/error.h"
#include "mha.h"
#include "registry.h"

/* Reads a config object into cfg (defaults filled in) and checks it against limits (may be NULL).
 * `field` prefixes field names in errors ("config"). Returns 0 or -1 with err filled. */
int srv_config_from_json(mha_config *cfg, const json_t *obj, const mha_limits *limits,
                         const char *field, srv_error *err);

/* The config as a JSON object with every field spelled out (new reference; NULL when out of
 * memory). kdim/vdim are written resolved (never null). */
json_t *srv_config_to_json(const mha_config *cfg);

/* Builds a layer entry named `name` from cfg, initialised with method ("xavier_uniform" or "zeros")
 * and seed. Returns a new entry (one reference, the caller's) or NULL with err filled. */
srv_layer *srv_layer_build_init(const char *name, const mha_config *cfg, const mha_limits *limits,
                                const char *method, uint64_t seed, srv_error *err);

#endif
