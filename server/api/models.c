/*
 * models.c - the layers served and unloaded, with their counters (see models.h).
 */
#include "models.h"

#include <stdlib.h>
#include <string.h>

static void entry_of(srv_model_entry *e, const srv_layer *l, bool served)
{
    memset(e, 0, sizeof *e);
    memcpy(e->name, l->name, sizeof e->name);
    e->version = l->version;
    e->served = served;
    e->bytes = served ? mha_param_total(mha_layer_config(l->layer)) * (int64_t)sizeof(float) : 0;
    e->stats = srv_layer_stats_ref(l->stats);
}

int srv_models_list(srv_app *app, const char *name, srv_model_entry **out)
{
    *out = NULL;
    srv_layer **layers = NULL;
    int n = 0;
    if (name) {
        srv_layer *l = srv_registry_get(app->registry, name, NULL);
        if (l) {
            layers = malloc(sizeof *layers);
            if (!layers) {
                srv_layer_release(l);
                return -1;
            }
            layers[n++] = l;
        }
    } else if ((n = srv_registry_list(app->registry, &layers)) < 0) {
        return -1;
    }
    srv_model_entry *list = calloc((size_t)(n ? n : 1), sizeof *list);
    if (!list) {
        srv_registry_list_free(layers, n);
        return -1;
    }
    for (int i = 0; i < n; i++)
        entry_of(&list[i], layers[i], true);
    srv_registry_list_free(layers, n);
    *out = list;
    return n;
}

void srv_models_free(srv_model_entry *list, int n)
{
    for (int i = 0; list && i < n; i++)
        srv_layer_stats_release(list[i].stats);
    free(list);
}
