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

static int by_name(const void *a, const void *b)
{
    return strcmp(((const srv_model_entry *)a)->name, ((const srv_model_entry *)b)->name);
}

int srv_models_list(srv_app *app, const char *name, srv_model_entry **out)
{
    *out = NULL;
    srv_layer **layers = NULL;
    srv_unloaded *unloaded = NULL;
    int n = srv_registry_list(app->registry, &layers);
    int u = n < 0 ? -1 : srv_registry_unloaded(app->registry, &unloaded);
    srv_model_entry *list = u < 0 ? NULL : calloc((size_t)(n + u + 1), sizeof *list);
    int k = 0;
    for (int i = 0; list && i < n; i++)
        if (!name || !strcmp(layers[i]->name, name))
            entry_of(&list[k++], layers[i], true);
    for (int i = 0; list && i < u; i++) {
        if (name && strcmp(unloaded[i].name, name))
            continue;
        srv_model_entry *e = &list[k++];
        memcpy(e->name, unloaded[i].name, sizeof e->name);
        e->version = unloaded[i].version;
        e->stats = srv_layer_stats_ref(unloaded[i].stats);
    }
    srv_registry_list_free(layers, n);
    srv_unloaded_free(unloaded, u);
    if (!list)
        return -1;
    qsort(list, (size_t)k, sizeof *list, by_name);
    /* a name is served or unloaded, never both, but an unload between the two reads above would
     * show it twice: once is enough */
    int w = 0;
    for (int r = 0; r < k; r++) {
        if (w > 0 && !strcmp(list[w - 1].name, list[r].name)) {
            srv_layer_stats_release(list[r].stats);
            continue;
        }
        list[w++] = list[r];
    }
    *out = list;
    return w;
}

void srv_models_free(srv_model_entry *list, int n)
{
    for (int i = 0; list && i < n; i++)
        srv_layer_stats_release(list[i].stats);
    free(list);
}
