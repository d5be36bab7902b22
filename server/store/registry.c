/*
 * registry.c - named, reference-counted layers behind one mutex (see registry.h).
 *
 * Layers are few (tens) and looked up once per request, so a sorted array under a mutex is enough;
 * the lock is held only to find or swap a pointer and bump a count, never during a forward pass.
 */
#include "registry.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct srv_registry {
    pthread_mutex_t lock;
    srv_layer **items; /* sorted by name */
    int n, cap;
    srv_unloaded *unloaded; /* layers unloaded, unordered (few); owns their references */
    int nunloaded;
    uint64_t last_version;
    /* the layers' memory, under its own lock: an entry freed under `lock` (a put replacing the
     * last reference) gives its bytes back from there (order: lock, then weights_lock) */
    pthread_mutex_t weights_lock;
    int64_t weights_limit; /* --max-weights-bytes (0: none)                                     */
    int64_t weights_held;  /* bytes of every entry alive and every reservation                   */
};

static double now_unix(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

bool srv_layer_name_valid(const char *name, srv_error *err)
{
    size_t n = strlen(name);
    const char *why = NULL;
    char which[64];
    if (n == 0)
        why = "is empty";
    else if (n > SRV_LAYER_NAME_MAX)
        why = "is longer than 64 characters";
    else if (name[0] == '.')
        why = "starts with '.'";
    else
        for (size_t i = 0; i < n && !why; i++) {
            unsigned char c = (unsigned char)name[i];
            if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-')) {
                /* named by its byte and place: a control byte is never echoed */
                if (c > ' ' && c < 0x7f)
                    snprintf(which, sizeof which, "holds '%c' at offset %zu, outside [A-Za-z0-9._-]",
                             c, i);
                else
                    snprintf(which, sizeof which, "holds byte 0x%02x at offset %zu, outside "
                             "[A-Za-z0-9._-]", c, i);
                why = which;
            }
        }
    if (!why)
        return true;
    srv_error_set(err, SRV_E_BAD_NAME, "name",
                  "layer name %s; use 1-64 characters of [A-Za-z0-9._-], not starting with '.'",
                  why);
    return false;
}

srv_layer *srv_layer_new(const char *name, mha_layer *layer, json_t *config)
{
    srv_layer *l = calloc(1, sizeof *l);
    srv_layer_stats *stats = l ? srv_layer_stats_new() : NULL;
    if (!stats || strlen(name) > SRV_LAYER_NAME_MAX) {
        srv_layer_stats_release(stats);
        free(l);
        mha_layer_free(layer);
        json_decref(config);
        return NULL;
    }
    strcpy(l->name, name);
    l->layer = layer;
    l->config = config;
    l->stats = stats;
    l->refs = 1;
    l->created = l->updated = now_unix();
    return l;
}

srv_layer *srv_layer_ref(srv_layer *l)
{
    if (l)
        __atomic_add_fetch(&l->refs, 1, __ATOMIC_RELAXED);
    return l;
}

void srv_layer_release(srv_layer *l)
{
    if (!l || __atomic_sub_fetch(&l->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    mha_layer_free(l->layer);
    json_decref(l->config);
    srv_layer_stats_release(l->stats);
    if (l->owner)
        srv_registry_unreserve(l->owner, l->charged);
    free(l);
}

int64_t srv_layer_bytes(const mha_config *cfg)
{
    return mha_param_total(cfg) * (int64_t)sizeof(float);
}

void srv_registry_set_weights_limit(srv_registry *reg, int64_t limit)
{
    pthread_mutex_lock(&reg->weights_lock);
    reg->weights_limit = limit > 0 ? limit : 0;
    pthread_mutex_unlock(&reg->weights_lock);
}

static int find(const srv_registry *reg, const char *name);

int srv_registry_reserve(srv_registry *reg, const char *name, int64_t bytes, srv_error *err)
{
    int rc = 0;
    pthread_mutex_lock(&reg->lock);
    int i = find(reg, name);
    int64_t credit = i >= 0 ? reg->items[i]->charged : 0;
    pthread_mutex_unlock(&reg->lock);
    pthread_mutex_lock(&reg->weights_lock);
    int64_t held = reg->weights_held;
    if (reg->weights_limit && held - credit + bytes > reg->weights_limit)
        rc = srv_error_set(
            err, SRV_E_INSUFFICIENT_STORAGE, "",
            "layer '%s' needs %lld bytes of weights (%lld parameters), and the layers already "
            "hold %lld%s of --max-weights-bytes %lld: delete a layer, make this one smaller, or "
            "raise the limit",
            name, (long long)bytes, (long long)(bytes / (int64_t)sizeof(float)),
            (long long)(held - credit), credit ? " (not counting the layer it replaces)" : "",
            (long long)reg->weights_limit);
    else
        reg->weights_held += bytes;
    pthread_mutex_unlock(&reg->weights_lock);
    return rc;
}

void srv_registry_unreserve(srv_registry *reg, int64_t bytes)
{
    pthread_mutex_lock(&reg->weights_lock);
    reg->weights_held -= bytes;
    pthread_mutex_unlock(&reg->weights_lock);
}

srv_layer *srv_layer_charge(srv_layer *l, srv_registry *reg, int64_t bytes)
{
    if (!l) {
        srv_registry_unreserve(reg, bytes);
        return NULL;
    }
    l->owner = reg;
    l->charged = bytes;
    return l;
}

void srv_registry_weights(srv_registry *reg, int64_t *held, int64_t *limit)
{
    pthread_mutex_lock(&reg->weights_lock);
    *held = reg->weights_held;
    *limit = reg->weights_limit;
    pthread_mutex_unlock(&reg->weights_lock);
}

srv_registry *srv_registry_create(void)
{
    srv_registry *reg = calloc(1, sizeof *reg);
    if (reg) {
        pthread_mutex_init(&reg->lock, NULL);
        pthread_mutex_init(&reg->weights_lock, NULL);
    }
    return reg;
}

void srv_registry_free(srv_registry *reg)
{
    if (!reg)
        return;
    for (int i = 0; i < reg->n; i++)
        srv_layer_release(reg->items[i]);
    free(reg->items);
    srv_unloaded_free(reg->unloaded, reg->nunloaded);
    pthread_mutex_destroy(&reg->lock);
    pthread_mutex_destroy(&reg->weights_lock);
    free(reg);
}

/* Index of name, or -(insertion point) - 1. Caller holds the lock. */
static int find(const srv_registry *reg, const char *name)
{
    int lo = 0, hi = reg->n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, c = strcmp(reg->items[mid]->name, name);
        if (c == 0)
            return mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -lo - 1;
}

/* Index of name in the unloaded list, or -1. Caller holds the lock. */
static int find_unloaded(const srv_registry *reg, const char *name)
{
    for (int i = 0; i < reg->nunloaded; i++)
        if (strcmp(reg->unloaded[i].name, name) == 0)
            return i;
    return -1;
}

/* Forgets unloaded entry i, handing its stats reference to *stats (may be NULL: released). Caller
 * holds the lock. */
static void drop_unloaded(srv_registry *reg, int i, srv_layer_stats **stats)
{
    srv_unloaded *u = &reg->unloaded[i];
    if (stats)
        *stats = u->stats;
    else
        srv_layer_stats_release(u->stats);
    srv_layer_release(u->kept);
    reg->unloaded[i] = reg->unloaded[--reg->nunloaded];
}

srv_layer *srv_registry_get(srv_registry *reg, const char *name, srv_error *err)
{
    pthread_mutex_lock(&reg->lock);
    int i = find(reg, name);
    srv_layer *l = i >= 0 ? srv_layer_ref(reg->items[i]) : NULL;
    bool unloaded = !l && err && find_unloaded(reg, name) >= 0;
    pthread_mutex_unlock(&reg->lock);
    if (unloaded)
        srv_error_set(err, SRV_E_LAYER_NOT_FOUND, "name",
                      "layer '%s' is unloaded; POST /v2/repository/models/%s/load serves it again",
                      name, name);
    else if (!l)
        srv_error_set(err, SRV_E_LAYER_NOT_FOUND, "name", "no layer called '%s'", name);
    return l;
}

/* True when a layer at version cur (0: none) meets the condition if_version (registry.h). */
static bool version_holds(uint64_t if_version, uint64_t cur)
{
    return !if_version || (if_version == SRV_IF_ABSENT && !cur) ||
           (if_version == SRV_IF_EXISTS && cur) || (cur && cur == if_version);
}

static int version_conflict(srv_error *err, const char *name, uint64_t if_version,
                            const srv_layer *cur)
{
    if (if_version == SRV_IF_EXISTS)
        return srv_error_set(err, SRV_E_CONFLICT, "If-Match",
                             "If-Match: * asks for an existing layer, and there is no layer "
                             "called '%s'", name);
    if (if_version == SRV_IF_ABSENT)
        return srv_error_set(err, SRV_E_CONFLICT, "If-None-Match",
                             "If-None-Match: * asks for a new layer, and layer '%s' exists (version "
                             "%llu)", name, (unsigned long long)(cur ? cur->version : 0));
    if (!cur)
        return srv_error_set(err, SRV_E_CONFLICT, "If-Match",
                             "layer '%s' does not exist, so it cannot be at version %llu", name,
                             (unsigned long long)if_version);
    return srv_error_set(err, SRV_E_CONFLICT, "If-Match",
                         "layer '%s' is at version %llu, not %llu; read it again and retry", name,
                         (unsigned long long)cur->version, (unsigned long long)if_version);
}

uint64_t srv_registry_last_version(srv_registry *reg)
{
    pthread_mutex_lock(&reg->lock);
    uint64_t v = reg->last_version;
    pthread_mutex_unlock(&reg->lock);
    return v;
}

uint64_t srv_registry_next_version(srv_registry *reg)
{
    pthread_mutex_lock(&reg->lock);
    uint64_t v = ++reg->last_version;
    pthread_mutex_unlock(&reg->lock);
    return v;
}

int srv_registry_put(srv_registry *reg, srv_layer *l, uint64_t if_version, bool *replaced,
                     srv_error *err)
{
    return srv_registry_put_version(reg, l, 0, if_version, replaced, err);
}

int srv_registry_put_version(srv_registry *reg, srv_layer *l, uint64_t version,
                             uint64_t if_version, bool *replaced, srv_error *err)
{
    int rc = 0;
    pthread_mutex_lock(&reg->lock);
    int i = find(reg, l->name);
    srv_layer *old = i >= 0 ? reg->items[i] : NULL;
    if (!version_holds(if_version, old ? old->version : 0)) {
        rc = version_conflict(err, l->name, if_version, old);
        goto out;
    }
    if (!old && reg->n == reg->cap) {
        int cap = reg->cap ? reg->cap * 2 : 16;
        srv_layer **items = realloc(reg->items, (size_t)cap * sizeof *items);
        if (!items) {
            rc = srv_error_set(err, SRV_E_NOMEM, "", "out of memory adding layer '%s'", l->name);
            goto out;
        }
        reg->items = items;
        reg->cap = cap;
    }
    if (version) { /* given (from the data dir, or reserved): the counter moves past it */
        if (l->version != version) /* a restored entry has it already, and may be in use */
            l->version = version;
        if (version > reg->last_version)
            reg->last_version = version;
    } else {
        l->version = ++reg->last_version;
    }
    int u = find_unloaded(reg, l->name);
    if (u >= 0) { /* published again: loaded, and counting where it was */
        srv_layer_stats *stats;
        drop_unloaded(reg, u, &stats);
        if (l->stats != stats) {
            srv_layer_stats_release(l->stats);
            l->stats = stats;
        } else {
            srv_layer_stats_release(stats);
        }
    }
    if (old) {
        if (!l->times_from_disk) /* a layer read from disk has its own, every replica's */
            l->created = old->created;
        if (l->stats != old->stats) { /* the name keeps counting where it was */
            srv_layer_stats_release(l->stats);
            l->stats = srv_layer_stats_ref(old->stats);
        }
        reg->items[i] = srv_layer_ref(l);
        srv_layer_release(old); /* frees it only when no request holds it */
    } else {
        i = -i - 1;
        memmove(reg->items + i + 1, reg->items + i, (size_t)(reg->n - i) * sizeof *reg->items);
        reg->items[i] = srv_layer_ref(l);
        reg->n++;
    }
    if (replaced)
        *replaced = old != NULL;
out:
    pthread_mutex_unlock(&reg->lock);
    return rc;
}

int srv_registry_delete(srv_registry *reg, const char *name, uint64_t if_version, srv_error *err)
{
    int rc = 0;
    pthread_mutex_lock(&reg->lock);
    int i = find(reg, name), u = find_unloaded(reg, name);
    if (i < 0 && u >= 0 && !if_version) {
        drop_unloaded(reg, u, NULL);
    } else if (i < 0) {
        rc = srv_error_set(err, SRV_E_LAYER_NOT_FOUND, "name", "no layer called '%s'", name);
    } else if (!version_holds(if_version, reg->items[i]->version)) {
        rc = version_conflict(err, name, if_version, reg->items[i]);
    } else {
        srv_layer *old = reg->items[i];
        memmove(reg->items + i, reg->items + i + 1, (size_t)(reg->n - i - 1) * sizeof *reg->items);
        reg->n--;
        srv_layer_release(old);
    }
    pthread_mutex_unlock(&reg->lock);
    return rc;
}

int srv_registry_list(srv_registry *reg, srv_layer ***out)
{
    pthread_mutex_lock(&reg->lock);
    int n = reg->n;
    srv_layer **list = malloc((size_t)(n ? n : 1) * sizeof *list);
    if (list)
        for (int i = 0; i < n; i++)
            list[i] = srv_layer_ref(reg->items[i]);
    pthread_mutex_unlock(&reg->lock);
    *out = list;
    return list ? n : -1;
}

void srv_registry_list_free(srv_layer **list, int n)
{
    for (int i = 0; list && i < n; i++)
        srv_layer_release(list[i]);
    free(list);
}

int srv_registry_count(srv_registry *reg)
{
    pthread_mutex_lock(&reg->lock);
    int n = reg->n;
    pthread_mutex_unlock(&reg->lock);
    return n;
}

int srv_registry_unload(srv_registry *reg, const char *name, bool keep)
{
    int rc = 0;
    pthread_mutex_lock(&reg->lock);
    int i = find(reg, name);
    if (i >= 0) {
        srv_unloaded *g = realloc(reg->unloaded, (size_t)(reg->nunloaded + 1) * sizeof *g);
        if (!g) {
            rc = -1;
        } else {
            reg->unloaded = g;
            srv_layer *l = reg->items[i];
            srv_unloaded *u = &reg->unloaded[reg->nunloaded++];
            memset(u, 0, sizeof *u);
            memcpy(u->name, l->name, sizeof u->name);
            u->version = l->version;
            u->stats = srv_layer_stats_ref(l->stats);
            u->kept = keep ? srv_layer_ref(l) : NULL;
            memmove(reg->items + i, reg->items + i + 1,
                    (size_t)(reg->n - i - 1) * sizeof *reg->items);
            reg->n--;
            srv_layer_release(l); /* the registry's reference; requests holding it finish */
            rc = 1;
        }
    }
    pthread_mutex_unlock(&reg->lock);
    return rc;
}

int srv_registry_restore(srv_registry *reg, const char *name)
{
    pthread_mutex_lock(&reg->lock);
    int u = find_unloaded(reg, name);
    srv_layer *l = u >= 0 ? srv_layer_ref(reg->unloaded[u].kept) : NULL;
    pthread_mutex_unlock(&reg->lock);
    if (!l)
        return 0;
    /* the same entry, the same version: nothing about the layer changed */
    int rc = srv_registry_put_version(reg, l, l->version, 0, NULL, NULL) == 0 ? 1 : -1;
    srv_layer_release(l);
    return rc;
}

int srv_registry_unloaded(srv_registry *reg, srv_unloaded **out)
{
    pthread_mutex_lock(&reg->lock);
    int n = reg->nunloaded;
    srv_unloaded *list = malloc((size_t)(n ? n : 1) * sizeof *list);
    for (int i = 0; list && i < n; i++) {
        list[i] = reg->unloaded[i];
        srv_layer_stats_ref(list[i].stats);
        srv_layer_ref(list[i].kept);
    }
    pthread_mutex_unlock(&reg->lock);
    *out = list;
    if (!list)
        return -1;
    for (int i = 1; i < n; i++) /* by name (insertion sort: few) */
        for (int k = i; k > 0 && strcmp(list[k - 1].name, list[k].name) > 0; k--) {
            srv_unloaded t = list[k];
            list[k] = list[k - 1];
            list[k - 1] = t;
        }
    return n;
}

bool srv_registry_is_unloaded(srv_registry *reg, const char *name, uint64_t *version)
{
    pthread_mutex_lock(&reg->lock);
    int u = find_unloaded(reg, name);
    if (u >= 0 && version)
        *version = reg->unloaded[u].version;
    pthread_mutex_unlock(&reg->lock);
    return u >= 0;
}

void srv_unloaded_free(srv_unloaded *list, int n)
{
    for (int i = 0; list && i < n; i++) {
        srv_layer_stats_release(list[i].stats);
        srv_layer_release(list[i].kept);
    }
    free(list);
}
