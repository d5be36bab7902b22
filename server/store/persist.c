/*
 * persist.c - the registry kept in step with the data dir (see persist.h).
 */
#include "persist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"
#include "base/log.h"
#include "config.h"
#include "weights.h"

srv_persist *srv_persist_create(const char *data_dir, bool read_only, srv_log_format log_format,
                                srv_error *err)
{
    srv_persist *p = calloc(1, sizeof *p);
    if (!p) {
        srv_error_set(err, SRV_E_NOMEM, "", "out of memory");
        return NULL;
    }
    p->log_format = log_format;
    pthread_mutex_init(&p->lock, NULL);
    pthread_mutex_init(&p->damaged_lock, NULL);
    if (data_dir && data_dir[0]) {
        p->dd = srv_datadir_open(data_dir, read_only, err);
        if (!p->dd) {
            srv_persist_free(p);
            return NULL;
        }
    }
    return p;
}

void srv_persist_free(srv_persist *p)
{
    if (!p)
        return;
    srv_datadir_free(p->dd);
    free(p->damaged);
    free(p->known);
    pthread_mutex_destroy(&p->lock);
    pthread_mutex_destroy(&p->damaged_lock);
    free(p);
}

srv_layer *srv_persist_build(const char *name, const json_t *config, const srv_st *weights,
                             const mha_limits *limits, srv_error *err)
{
    mha_config cfg;
    if (srv_config_from_json(&cfg, config, limits, "config", err) < 0)
        return NULL;
    mha_error me = {0};
    mha_layer *layer = mha_layer_create(&cfg, limits, &me);
    if (!layer) {
        srv_error_from_mha(err, &me, "config.");
        return NULL;
    }
    if (srv_weights_from_st(layer, weights, "weights", err) < 0) {
        mha_layer_free(layer);
        return NULL;
    }
    json_t *norm = srv_config_to_json(mha_layer_config(layer));
    srv_layer *l = norm ? srv_layer_new(name, layer, norm) : (mha_layer_free(layer), NULL);
    if (!l)
        srv_error_set(err, SRV_E_NOMEM, "", "out of memory creating layer '%s'", name);
    return l;
}

/* Records (reason != NULL) or forgets (NULL) that layer name is damaged. Caller holds p->lock. */
static void set_damaged_locked(srv_persist *p, const char *name, const char *reason);
static void set_damaged(srv_persist *p, const char *name, const char *reason)
{
    pthread_mutex_lock(&p->damaged_lock);
    set_damaged_locked(p, name, reason);
    pthread_mutex_unlock(&p->damaged_lock);
}

static void set_damaged_locked(srv_persist *p, const char *name, const char *reason)
{
    int i = 0;
    while (i < p->ndamaged && strcmp(p->damaged[i].name, name) != 0)
        i++;
    if (!reason) {
        if (i < p->ndamaged)
            memmove(&p->damaged[i], &p->damaged[i + 1],
                    (size_t)(p->ndamaged - i - 1) * sizeof *p->damaged);
        p->ndamaged -= i < p->ndamaged;
        return;
    }
    if (i == p->ndamaged) {
        srv_damaged *g = realloc(p->damaged, (size_t)(p->ndamaged + 1) * sizeof *g);
        if (!g)
            return; /* the log line still tells */
        p->damaged = g;
        p->ndamaged++;
        snprintf(p->damaged[i].name, sizeof p->damaged[i].name, "%s", name);
    }
    snprintf(p->damaged[i].reason, sizeof p->damaged[i].reason, "%s", reason);
}

/* Records (stamp != NULL) or forgets the stamp of layer name on disk. Caller holds p->lock. */
static void set_known(srv_persist *p, const char *name, const srv_dd_stamp *stamp)
{
    int i = 0;
    while (i < p->nknown && strcmp(p->known[i].name, name) != 0)
        i++;
    if (!stamp) {
        if (i < p->nknown)
            p->known[i] = p->known[--p->nknown];
        return;
    }
    if (i == p->nknown) {
        srv_known *g = realloc(p->known, (size_t)(p->nknown + 1) * sizeof *g);
        if (!g)
            return; /* the next sync reloads it once more: harmless */
        p->known = g;
        p->nknown++;
        snprintf(p->known[i].name, sizeof p->known[i].name, "%s", name);
    }
    p->known[i].stamp = *stamp;
}

static const srv_known *find_known(const srv_persist *p, const char *name)
{
    for (int i = 0; i < p->nknown; i++)
        if (strcmp(p->known[i].name, name) == 0)
            return &p->known[i];
    return NULL;
}

/* The version stored with a layer attnd wrote ("attnd.version"), or 0 (written by hand, or not
 * a plain number up to 2^53, which a JSON client reads exactly): the registry then gives one. */
static uint64_t disk_version(const srv_dd_layer *dl)
{
    const char *t = dl->version;
    uint64_t v = 0;
    if (!t[0] || strlen(t) > 16)
        return 0;
    for (; *t; t++) {
        if (*t < '0' || *t > '9')
            return 0;
        v = v * 10 + (uint64_t)(*t - '0');
    }
    return v <= ((uint64_t)1 << 53) ? v : 0;
}

/* Reads and builds layer name from disk. Caller holds p->lock. */
static srv_layer *load_one(srv_persist *p, const char *name, const mha_limits *limits,
                           srv_dd_layer *dl, srv_error *err)
{
    if (srv_datadir_read(p->dd, name, limits->max_elements, dl, err) < 0)
        return NULL;
    srv_layer *l = srv_persist_build(name, dl->config, &dl->weights, limits, err);
    if (!l) {
        /* say which layer and field: logs and /readyz show only the message */
        char pre[160], m[sizeof err->message];
        snprintf(pre, sizeof pre, "layers/%s: %.64s%s", name, err->field,
                 err->field[0] ? ": " : "");
        size_t pl = strlen(pre), ml = strlen(err->message);
        if (ml > sizeof m - 1 - pl)
            ml = sizeof m - 1 - pl;
        memcpy(m, pre, pl);
        memcpy(m + pl, err->message, ml);
        m[pl + ml] = '\0';
        memcpy(err->message, m, sizeof m);
    }
    return l;
}

static void report_stray(const char *name, void *ctx)
{
    srv_persist *p = ctx;
    char reason[200];
    snprintf(reason, sizeof reason,
             "layers/%.64s is not a layer name (1-64 of A-Z a-z 0-9 . _ -, not starting with .): "
             "rename it to serve it", name);
    set_damaged(p, name, reason);
    srv_log(p->log_format, "error", "%s", reason);
}

int srv_persist_load_all(srv_persist *p, srv_registry *reg, const mha_limits *limits)
{
    if (!p->dd)
        return 0;
    srv_datadir_clean(p->dd);
    p->last_clean = (double)time(NULL);
    srv_error err = {0};
    srv_dd_entry *list;
    int n = srv_datadir_list(p->dd, &list, &err);
    if (n < 0) {
        srv_log(p->log_format, "error", "data dir: %s", err.message);
        return 0;
    }
    int loaded = 0;
    pthread_mutex_lock(&p->lock);
    srv_datadir_strays(p->dd, report_stray, p);
    for (int i = 0; i < n; i++) {
        srv_dd_layer dl;
        srv_error e = {0};
        srv_layer *l = load_one(p, list[i].name, limits, &dl, &e);
        set_known(p, list[i].name, l ? &dl.stamp : &list[i].stamp);
        if (l && srv_registry_put_version(reg, l, disk_version(&dl), 0, NULL, &e) == 0) {
            loaded++;
            set_damaged(p, list[i].name, NULL);
            srv_log(p->log_format, "info", "loaded layer '%s' from %s/layers%s%s", list[i].name,
                    p->dd->root, dl.repaired ? " (completed an interrupted write)" : "",
                    dl.hand_edited ? " (config.json edited by hand)" : "");
        } else {
            set_damaged(p, list[i].name, e.message);
            srv_log(p->log_format, "error", "layer '%s' not loaded: %s", list[i].name, e.message);
        }
        srv_layer_release(l);
        srv_dd_layer_free(&dl);
    }
    pthread_mutex_unlock(&p->lock);
    free(list);
    return loaded;
}

int srv_persist_reload(srv_persist *p, srv_registry *reg, const char *name,
                       const mha_limits *limits, srv_error *err)
{
    if (!p->dd)
        return 0;
    pthread_mutex_lock(&p->lock);
    srv_dd_layer dl;
    srv_error e = {0};
    int rc;
    srv_layer *l = load_one(p, name, limits, &dl, &e);
    if (l) {
        rc = srv_registry_put_version(reg, l, disk_version(&dl), 0, NULL, &e) == 0 ? 1 : -1;
        if (rc == 1) {
            set_damaged(p, name, NULL);
            set_known(p, name, &dl.stamp);
        }
    } else if (e.code == SRV_E_LAYER_NOT_FOUND) {
        if (find_known(p, name))
            srv_registry_delete(reg, name, 0, NULL);
        set_damaged(p, name, NULL);
        set_known(p, name, NULL);
        rc = 0;
    } else {
        set_damaged(p, name, e.message);
        rc = -1;
    }
    if (rc < 0 && err && err->code == SRV_OK)
        *err = e;
    pthread_mutex_unlock(&p->lock);
    srv_layer_release(l);
    srv_dd_layer_free(&dl);
    return rc;
}

int srv_persist_sync(srv_persist *p, srv_registry *reg, const mha_limits *limits)
{
    if (!p->dd)
        return 0;
    srv_error err = {0};
    srv_dd_entry *list;
    /* List under the lock: a listing taken before a concurrent srv_persist_put would miss the layer
     * it writes (and sets known), and the loop below would unpublish it. */
    pthread_mutex_lock(&p->lock);
    /* leftovers of writes that died (here or on another replica), once they are stale */
    double now = (double)time(NULL);
    if (now - p->last_clean >= 60) {
        p->last_clean = now;
        srv_datadir_clean(p->dd);
    }
    int n = srv_datadir_list(p->dd, &list, &err);
    if (n < 0) {
        pthread_mutex_unlock(&p->lock);
        srv_log(p->log_format, "error", "data dir: %s", err.message);
        return 0;
    }
    int changes = 0;
    for (int i = 0; i < n; i++) {
        const srv_known *k = find_known(p, list[i].name);
        if (k && srv_dd_stamp_equal(&k->stamp, &list[i].stamp))
            continue;
        srv_dd_layer dl;
        srv_error e = {0};
        srv_layer *l = load_one(p, list[i].name, limits, &dl, &e);
        if (l && srv_registry_put_version(reg, l, disk_version(&dl), 0, NULL, &e) == 0) {
            set_known(p, list[i].name, &dl.stamp);
            set_damaged(p, list[i].name, NULL);
            srv_log(p->log_format, "info", "layer '%s' (re)loaded from the data dir", list[i].name);
        } else if (e.code != SRV_E_LAYER_NOT_FOUND) {
            /* keep serving what was there; try again when the files change */
            set_known(p, list[i].name, &list[i].stamp);
            set_damaged(p, list[i].name, e.message);
            srv_log(p->log_format, "error", "layer '%s' not reloaded: %s", list[i].name, e.message);
        }
        changes++;
        srv_layer_release(l);
        srv_dd_layer_free(&dl);
    }
    /* layers this process knew on disk whose directory is gone: deleted by another replica */
    for (int k = p->nknown - 1; k >= 0; k--) {
        bool present = false;
        for (int i = 0; i < n && !present; i++)
            present = strcmp(list[i].name, p->known[k].name) == 0;
        if (present)
            continue;
        char name[65];
        memcpy(name, p->known[k].name, sizeof name);
        srv_registry_delete(reg, name, 0, NULL);
        set_damaged(p, name, NULL);
        set_known(p, name, NULL);
        srv_log(p->log_format, "info", "layer '%s' removed from the data dir: no longer served",
                name);
        changes++;
    }
    pthread_mutex_unlock(&p->lock);
    free(list);
    return changes;
}

/* The If-Match check before touching the disk (the registry checks again when publishing). */
static int check_version(srv_registry *reg, const char *name, uint64_t if_version, srv_error *err)
{
    if (!if_version)
        return 0;
    srv_layer *cur = srv_registry_get(reg, name, NULL);
    uint64_t v = cur ? cur->version : 0;
    srv_layer_release(cur);
    if (v == if_version || (if_version == SRV_IF_ABSENT && !v))
        return 0;
    if (if_version == SRV_IF_ABSENT)
        return srv_error_set(err, SRV_E_CONFLICT, "If-None-Match",
                             "If-None-Match: * asks for a new layer, and layer '%s' exists (version "
                             "%llu)", name, (unsigned long long)v);
    if (!v)
        return srv_error_set(err, SRV_E_CONFLICT, "If-Match",
                             "layer '%s' does not exist, so it cannot be at version %llu", name,
                             (unsigned long long)if_version);
    return srv_error_set(err, SRV_E_CONFLICT, "If-Match",
                         "layer '%s' is at version %llu, not %llu; read it again and retry", name,
                         (unsigned long long)v, (unsigned long long)if_version);
}

int srv_persist_put(srv_persist *p, srv_registry *reg, srv_layer *l, uint64_t if_version,
                    bool *replaced, srv_error *err)
{
    pthread_mutex_lock(&p->lock);
    int rc = check_version(reg, l->name, if_version, err);
    uint64_t version = 0; /* with a data dir: reserved now, stored with the layer */
    if (rc == 0 && p->dd) {
        srv_st_view v[MHA_MAX_PARAMS];
        int n = srv_weights_views(l->layer, v);
        srv_error e = {0};
        srv_dd_stamp stamp;
        char vtext[24];
        version = srv_registry_next_version(reg);
        snprintf(vtext, sizeof vtext, "%llu", (unsigned long long)version);
        if (srv_datadir_write(p->dd, l->name, l->config, v, n, vtext, &stamp, &e) == 0)
            set_known(p, l->name, &stamp);
        else {
            srv_log(p->log_format, "error", "layer '%s' not saved, the old one is kept: %s",
                    l->name, e.message);
            rc = srv_error_set(err, SRV_E_INTERNAL, "",
                               "could not save layer '%s' to the data dir (%s); the layer is "
                               "unchanged", l->name, e.message);
        }
    }
    if (rc == 0) {
        rc = srv_registry_put_version(reg, l, version, if_version, replaced, err);
        if (rc == 0)
            set_damaged(p, l->name, NULL);
    }
    pthread_mutex_unlock(&p->lock);
    return rc;
}

int srv_persist_delete(srv_persist *p, srv_registry *reg, const char *name, uint64_t if_version,
                       srv_error *err)
{
    pthread_mutex_lock(&p->lock);
    srv_layer *cur = srv_registry_get(reg, name, NULL);
    /* a damaged layer is not served but may be deleted (from disk) all the same */
    bool damaged = false;
    pthread_mutex_lock(&p->damaged_lock);
    for (int i = 0; !cur && i < p->ndamaged; i++)
        damaged |= strcmp(p->damaged[i].name, name) == 0;
    pthread_mutex_unlock(&p->damaged_lock);
    /* so may an unloaded one (model repository extension): its files, and the registry's record */
    bool unloaded = !cur && srv_registry_is_unloaded(reg, name, NULL);
    int rc = cur ? check_version(reg, name, if_version, err)
             : (damaged || unloaded) && !if_version
                 ? 0
                 : srv_error_set(err, SRV_E_LAYER_NOT_FOUND, "name", "no layer called '%s'", name);
    bool served = cur != NULL;
    srv_layer_release(cur);
    if (rc == 0 && p->dd) {
        srv_error e = {0};
        if (srv_datadir_remove(p->dd, name, &e) < 0) {
            srv_log(p->log_format, "error", "layer '%s' not deleted from the data dir: %s", name,
                    e.message);
            rc = srv_error_set(err, SRV_E_INTERNAL, "",
                               "could not delete layer '%s' from the data dir (%s); it is still "
                               "served", name, e.message);
        }
    }
    if (rc == 0) {
        if (served || unloaded)
            rc = srv_registry_delete(reg, name, if_version, err);
        set_damaged(p, name, NULL);
        set_known(p, name, NULL);
    }
    pthread_mutex_unlock(&p->lock);
    return rc;
}

int srv_persist_damaged_json(srv_persist *p, srv_buf *out)
{
    pthread_mutex_lock(&p->damaged_lock);
    int n = p->ndamaged;
    srv_buf_putc(out, '[');
    for (int i = 0; i < n; i++) {
        srv_buf_puts(out, i ? ",{\"name\":" : "{\"name\":");
        srv_buf_json_string(out, p->damaged[i].name);
        srv_buf_puts(out, ",\"reason\":");
        srv_buf_json_string(out, p->damaged[i].reason);
        srv_buf_putc(out, '}');
    }
    srv_buf_putc(out, ']');
    pthread_mutex_unlock(&p->damaged_lock);
    return n;
}

int srv_persist_damaged_list(srv_persist *p, srv_damaged **out)
{
    pthread_mutex_lock(&p->damaged_lock);
    int n = p->ndamaged;
    srv_damaged *list = malloc((size_t)(n ? n : 1) * sizeof *list);
    if (list && n)
        memcpy(list, p->damaged, (size_t)n * sizeof *list);
    pthread_mutex_unlock(&p->damaged_lock);
    *out = list;
    return list ? n : -1;
}

int srv_persist_unload(srv_persist *p, srv_registry *reg, const char *name)
{
    pthread_mutex_lock(&p->lock);
    /* a layer with files is read again by a load; one in memory only is kept to be restored */
    bool files = p->dd && find_known(p, name);
    int rc = srv_registry_unload(reg, name, !files);
    pthread_mutex_unlock(&p->lock);
    if (rc == 1)
        srv_log(p->log_format, "info", "layer '%s' unloaded: no longer served%s", name,
                files ? "; its files stay in the data dir" : "; kept in memory");
    return rc;
}

int srv_persist_load(srv_persist *p, srv_registry *reg, const char *name, const mha_limits *limits,
                     srv_error *err)
{
    if (p->dd) {
        int r = srv_persist_reload(p, reg, name, limits, err);
        if (r != 0)
            return r > 0 ? 0 : -1; /* loaded from its files, or they are damaged */
    }
    int r = srv_registry_restore(reg, name);
    if (r < 0)
        return srv_error_set(err, SRV_E_NOMEM, "", "out of memory loading layer '%s'", name);
    srv_layer *cur = r == 0 ? srv_registry_get(reg, name, NULL) : NULL;
    srv_layer_release(cur);
    if (r == 0 && !cur)
        return srv_error_set(err, SRV_E_LAYER_NOT_FOUND, "name",
                             p->dd ? "no layer '%s' in the data dir"
                                   : "no layer '%s' (there is no data dir to load it from: "
                                     "--data-dir)",
                             name);
    if (r == 1)
        srv_log(p->log_format, "info", "layer '%s' loaded again from memory", name);
    return 0; /* restored, or served from memory already: nothing to read */
}

int srv_persist_damaged_count(srv_persist *p)
{
    pthread_mutex_lock(&p->damaged_lock);
    int n = p->ndamaged;
    pthread_mutex_unlock(&p->damaged_lock);
    return n;
}
