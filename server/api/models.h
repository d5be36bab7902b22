/*
 * models.h - the layers the statistics extension and /metrics report on: every layer served, and
 * every layer unloaded through the model repository extension (its counters live on, so that a
 * load continues them), sorted by name.
 */
#ifndef ATTND_MODELS_H
#define ATTND_MODELS_H

#include <stdbool.h>
#include <stdint.h>

#include "app/app.h"
#include "store/layer_stats.h"
#include "store/registry.h"

typedef struct srv_model_entry {
    char name[SRV_LAYER_NAME_MAX + 1];
    uint64_t version;       /* the layer's version (the one it had when it was unloaded)     */
    bool served;            /* false: unloaded                                                */
    int64_t bytes;          /* bytes of parameters held in memory (0 when none are)           */
    srv_layer_stats *stats; /* owned reference                                                */
} srv_model_entry;

/* Every layer served or unloaded (name given: that one only), sorted by name: *out gets a
 * malloc'd array (free with srv_models_free). Returns the count (0: none, or no such layer), or
 * -1 when out of memory. */
int srv_models_list(srv_app *app, const char *name, srv_model_entry **out);
void srv_models_free(srv_model_entry *list, int n); /* accepts NULL */

#endif
