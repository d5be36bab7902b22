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
#include "redact.h"
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
        if (p->dd->ro_fs)
            srv_log(log_format, "warn",
                    "data dir %s is on a read-only file system: its layers are served, every "
                    "change is refused (503)",
                    data_dir);
    }
    return p;
}

void srv_persist_free(srv_persist *p)
{
    if (!p)
        return;
    srv_datadir_free(p->dd);
    free(p->damaged);
    free(p->damaged_index);
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

static uint64_t name_hash(const char *name)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (; *name; name++)
        h = (h ^ (unsigned char)*name) * 0x100000001b3ull;
    return h;
}

/* Rebuilds the index of p->damaged by name (after removals, or to grow it). False when out of
 * memory (the index is then gone, and lookups fall back to a walk). Caller holds damaged_lock. */
static bool damaged_reindex(srv_persist *p)
{
    int slots = 16;
    while (slots < 2 * p->ndamaged + 2)
        slots *= 2;
    if (slots != p->damaged_slots) {
        int *t = realloc(p->damaged_index, (size_t)slots * sizeof *t);
        if (!t) {
            free(p->damaged_index);
            p->damaged_index = NULL;
            p->damaged_slots = 0;
            return false;
        }
        p->damaged_index = t;
        p->damaged_slots = slots;
    }
    for (int k = 0; k < slots; k++)
        p->damaged_index[k] = -1;
    for (int i = 0; i < p->ndamaged; i++) {
        size_t k = (size_t)name_hash(p->damaged[i].name) & (size_t)(slots - 1);
        while (p->damaged_index[k] >= 0)
            k = (k + 1) & (size_t)(slots - 1);
        p->damaged_index[k] = i;
    }
    return true;
}

/* The index in p->damaged of name, or -1. Caller holds damaged_lock. */
static int damaged_find(const srv_persist *p, const char *name)
{
    if (!p->damaged_index) {
        for (int i = 0; i < p->ndamaged; i++)
            if (strcmp(p->damaged[i].name, name) == 0)
                return i;
        return -1;
    }
    const size_t mask = (size_t)p->damaged_slots - 1;
    for (size_t k = (size_t)name_hash(name) & mask; p->damaged_index[k] >= 0; k = (k + 1) & mask)
        if (strcmp(p->damaged[p->damaged_index[k]].name, name) == 0)
            return p->damaged_index[k];
    return -1;
}

/* Records (reason != NULL) or forgets (NULL) that layers/<name> cannot be served; stray: it is not
 * a layer at all (found by the scan p->stray_scan). Caller holds damaged_lock. */
static void set_damaged_locked(srv_persist *p, const char *name, const char *reason, bool stray)
{
    int i = damaged_find(p, name);
    if (!reason) {
        if (i >= 0) {
            memmove(&p->damaged[i], &p->damaged[i + 1],
                    (size_t)(p->ndamaged - i - 1) * sizeof *p->damaged);
            p->ndamaged--;
            damaged_reindex(p);
        }
        return;
    }
    if (i < 0) {
        if (p->ndamaged == p->damaged_cap) { /* doubling: thousands of strays come one by one */
            int cap = p->damaged_cap ? 2 * p->damaged_cap : 8;
            srv_damaged *g = realloc(p->damaged, (size_t)cap * sizeof *g);
            if (!g)
                return; /* the log line still tells */
            p->damaged = g;
            p->damaged_cap = cap;
        }
        i = p->ndamaged++;
        memset(&p->damaged[i], 0, sizeof p->damaged[i]);
        snprintf(p->damaged[i].name, sizeof p->damaged[i].name, "%s", name);
        if (2 * p->ndamaged + 2 > p->damaged_slots) {
            damaged_reindex(p);
        } else if (p->damaged_index) {
            const size_t mask = (size_t)p->damaged_slots - 1;
            size_t k = (size_t)name_hash(name) & mask;
            while (p->damaged_index[k] >= 0)
                k = (k + 1) & mask;
            p->damaged_index[k] = i;
        }
    }
    snprintf(p->damaged[i].reason, sizeof p->damaged[i].reason, "%s", reason);
    p->damaged[i].stray = stray;
    p->damaged[i].seen = p->stray_scan;
}

static void set_damaged(srv_persist *p, const char *name, const char *reason)
{
    pthread_mutex_lock(&p->damaged_lock);
    set_damaged_locked(p, name, reason, false);
    pthread_mutex_unlock(&p->damaged_lock);
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

/* The version of a layer read from disk, the same for every replica that reads these files: the
 * one attnd stored with it ("attnd.version", a plain number up to SRV_DD_VERSION_TRUSTED: one past
 * it is a file's claim that versions are used up), unless config.json was edited by hand since;
 * else the one recorded for these files, or a new one recorded now (datadir.h, "Replicas"); 0 (the
 * registry numbers it) when the data dir cannot record one. Caller holds p->lock. */
static uint64_t layer_version(srv_persist *p, srv_registry *reg, const char *name,
                              const srv_dd_layer *dl)
{
    const char *t = dl->version;
    uint64_t v = 0;
    bool plain = t[0] && strlen(t) <= 16;
    for (; plain && *t; t++) {
        plain = *t >= '0' && *t <= '9';
        v = v * 10 + (uint64_t)(*t - '0');
    }
    if (plain && v && v <= SRV_DD_VERSION_TRUSTED && !dl->hand_edited)
        return v;
    srv_error e = {0};
    v = srv_datadir_adopt(p->dd, name, &dl->stamp, srv_registry_last_version(reg), &e);
    if (!v && e.code != SRV_OK)
        srv_log(p->log_format, "warn",
                "layer '%s': no version recorded in %s (%s); this replica "
                "numbers it itself",
                name, p->dd->root, e.message);
    return v;
}

/* Reads and builds layer name from disk. Caller holds p->lock. On failure err says what is wrong
 * in words fit for /readyz (never the files' contents, redact.h) and log the full story. */
static srv_layer *load_one(srv_persist *p, srv_registry *reg, const char *name,
                           const mha_limits *limits, srv_dd_layer *dl, srv_error *err,
                           srv_error *log)
{
    if (srv_datadir_read(p->dd, name, limits->max_elements, dl, err, log) < 0)
        return NULL;
    srv_error e = {0};
    /* the layers' memory (--max-weights-bytes): a layer that does not fit is not loaded */
    mha_config cfg;
    int64_t bytes = srv_config_from_json(&cfg, dl->config, limits, "config", NULL) == 0
                        ? srv_layer_bytes(&cfg)
                        : 0;
    srv_layer *l =
        srv_registry_reserve(reg, name, bytes, &e) < 0
            ? NULL
            : srv_layer_charge(srv_persist_build(name, dl->config, &dl->weights, limits, &e), reg,
                               bytes);
    if (l) { /* as stored with it: the times survive restarts and are every replica's */
        l->created = dl->created;
        l->updated = dl->updated;
        l->times_from_disk = true;
    }
    if (!l) {
        /* say which layer and field: logs and /readyz show only the message */
        char where[96];
        snprintf(where, sizeof where, "layers/%s", name);
        srv_error_set(log, e.code, "", "%s: %.64s%s%s", where, e.field, e.field[0] ? ": " : "",
                      e.message);
        if (err && err->code == SRV_OK) {
            err->code = e.code;
            srv_redact_build_error(err->message, sizeof err->message, where, &e);
        }
    }
    return l;
}

typedef struct stray_scan {
    srv_persist *p;
    int changes; /* strays found that were not reported before */
} stray_scan;

static void report_stray(const char *name, const char *reason, void *ctx)
{
    stray_scan *s = ctx;
    srv_persist *p = s->p;
    pthread_mutex_lock(&p->damaged_lock);
    const int i = damaged_find(p, name);
    const bool known = i >= 0 && p->damaged[i].stray && strcmp(p->damaged[i].reason, reason) == 0;
    set_damaged_locked(p, name, reason, true);
    pthread_mutex_unlock(&p->damaged_lock);
    if (!known) {
        s->changes++;
        srv_log(p->log_format, "error", "%s", reason);
    }
}

/* Reports every entry of layers/ that is not a layer, and forgets those reported before that are
 * gone. Returns how many appeared or went. Caller holds p->lock. */
static int scan_strays(srv_persist *p)
{
    stray_scan s = {p, 0};
    pthread_mutex_lock(&p->damaged_lock);
    p->stray_scan++;
    pthread_mutex_unlock(&p->damaged_lock);
    srv_datadir_strays(p->dd, report_stray, &s);
    pthread_mutex_lock(&p->damaged_lock);
    int kept = 0; /* the strays this scan did not find go, in one pass */
    for (int i = 0; i < p->ndamaged; i++) {
        if (p->damaged[i].stray && p->damaged[i].seen != p->stray_scan) {
            s.changes++;
            continue;
        }
        if (kept != i)
            p->damaged[kept] = p->damaged[i];
        kept++;
    }
    if (kept != p->ndamaged) {
        p->ndamaged = kept;
        damaged_reindex(p);
    }
    pthread_mutex_unlock(&p->damaged_lock);
    return s.changes;
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
    scan_strays(p);
    for (int i = 0; i < n; i++) {
        srv_dd_layer dl;
        srv_error e = {0}, log = {0};
        srv_layer *l = load_one(p, reg, list[i].name, limits, &dl, &e, &log);
        set_known(p, list[i].name, l ? &dl.stamp : &list[i].stamp);
        if (l && srv_registry_put_version(reg, l, layer_version(p, reg, list[i].name, &dl), 0, NULL,
                                          &e) == 0) {
            loaded++;
            set_damaged(p, list[i].name, NULL);
            srv_log(p->log_format, "info", "loaded layer '%s' from %s/layers%s%s", list[i].name,
                    p->dd->root, dl.repaired ? " (completed an interrupted write)" : "",
                    dl.hand_edited ? " (config.json edited by hand)" : "");
        } else {
            set_damaged(p, list[i].name, e.message);
            srv_log(p->log_format, "error", "layer '%s' not loaded from %s: %s", list[i].name,
                    p->dd->root, log.code != SRV_OK ? log.message : e.message);
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
    srv_layer *l = load_one(p, reg, name, limits, &dl, &e, NULL);
    if (l) {
        uint64_t v = layer_version(p, reg, name, &dl);
        rc = srv_registry_put_version(reg, l, v, 0, NULL, &e) == 0 ? 1 : -1;
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
        srv_error e = {0}, log = {0};
        srv_layer *l = load_one(p, reg, list[i].name, limits, &dl, &e, &log);
        if (l && srv_registry_put_version(reg, l, layer_version(p, reg, list[i].name, &dl), 0, NULL,
                                          &e) == 0) {
            set_known(p, list[i].name, &dl.stamp);
            set_damaged(p, list[i].name, NULL);
            srv_log(p->log_format, "info", "layer '%s' (re)loaded from the data dir", list[i].name);
        } else if (e.code != SRV_E_LAYER_NOT_FOUND) {
            /* keep serving what was there; try again when the files change */
            set_known(p, list[i].name, &list[i].stamp);
            set_damaged(p, list[i].name, e.message);
            srv_log(p->log_format, "error", "layer '%s' not reloaded from %s: %s", list[i].name,
                    p->dd->root, log.code != SRV_OK ? log.message : e.message);
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
    /* after the loop above, which forgets what it unpublishes: a layer dir replaced by a link is
     * unpublished there and reported here */
    changes += scan_strays(p);
    pthread_mutex_unlock(&p->lock);
    free(list);
    return changes;
}

/* The If-Match / If-None-Match check of a change of layer name, now at version cur (0: there is
 * none; SRV_DD_NO_VERSION: it exists, but no version names it). 0, or -1 with a 409 saying why. */
static int check_version(const char *name, uint64_t cur, uint64_t if_version, srv_error *err)
{
    bool exists = cur != 0;
    if (!if_version || (if_version == SRV_IF_ABSENT && !exists) ||
        (if_version == SRV_IF_EXISTS && exists) || (exists && cur == if_version))
        return 0;
    if (if_version == SRV_IF_ABSENT)
        return srv_error_set(err, SRV_E_CONFLICT, "If-None-Match",
                             "If-None-Match: * asks for a new layer, and layer '%s' exists", name);
    if (!exists)
        return if_version == SRV_IF_EXISTS
                   ? srv_error_set(err, SRV_E_CONFLICT, "If-Match",
                                   "If-Match: * asks for an existing layer, and there is no layer "
                                   "called '%s'",
                                   name)
                   : srv_error_set(err, SRV_E_CONFLICT, "If-Match",
                                   "layer '%s' does not exist, so it cannot be at version %llu",
                                   name, (unsigned long long)if_version);
    if (cur == SRV_DD_NO_VERSION)
        return srv_error_set(err, SRV_E_CONFLICT, "If-Match",
                             "layer '%s' in the data dir changed by hand (or is damaged) and has "
                             "no version yet: read it again once it is loaded, or change it "
                             "without If-Match",
                             name);
    return srv_error_set(err, SRV_E_CONFLICT, "If-Match",
                         "layer '%s' is at version %llu, not %llu; read it again and retry", name,
                         (unsigned long long)cur, (unsigned long long)if_version);
}

/* The version of layer name in memory (0: none). */
static uint64_t memory_version(srv_registry *reg, const char *name)
{
    srv_layer *cur = srv_registry_get(reg, name, NULL);
    uint64_t v = cur ? cur->version : 0;
    srv_layer_release(cur);
    return v;
}

/* The version of layer name when it is served from memory only, never having been on disk for this
 * process (--demo's layer in a daemon with a data dir); 0 otherwise. Such a layer answers its
 * If-Match / If-None-Match and DELETE as served, where the data dir has nothing of that name.
 * Caller holds p->lock. */
static uint64_t memory_only_version(const srv_persist *p, srv_registry *reg, const char *name)
{
    return find_known(p, name) ? 0 : memory_version(reg, name);
}

/* Writes l to the data dir if its version there meets if_version, under the data dir's lock (one
 * change at a time across every process sharing it), with a new version from its counter
 * (*version). *existed tells whether there was a layer of that name on disk (with a version: one
 * that is served, not a damaged one). Caller holds p->lock.
 * 0, or -1 with err: 409, 503, 507. */
static int save(srv_persist *p, srv_registry *reg, srv_layer *l, uint64_t if_version,
                uint64_t *version, bool *existed, srv_error *err)
{
    srv_error e = {0};
    uint64_t cur = 0;
    if (srv_datadir_lock(p->dd, &e) != 0)
        return srv_error_set(err, e.code, "", "layer '%s' not saved: %s", l->name, e.message);
    int rc =
        srv_datadir_version(p->dd, l->name, &cur, err) != 0 ||
                check_version(l->name, cur ? cur : memory_only_version(p, reg, l->name), if_version,
                              err) != 0 ||
                srv_datadir_next_version(p->dd, srv_registry_last_version(reg), version, &e) != 0
            ? -1
            : 0;
    *existed = cur != 0 && cur != SRV_DD_NO_VERSION; /* a layer another replica serves */
    if (rc == 0) {
        srv_st_view v[MHA_MAX_PARAMS];
        int n = srv_weights_views(l->layer, v);
        srv_dd_stamp stamp;
        char vtext[24];
        snprintf(vtext, sizeof vtext, "%llu", (unsigned long long)*version);
        /* a replacement keeps the name's creation time, as the registry will (registry.c) */
        srv_layer *old = srv_registry_get(reg, l->name, NULL);
        if (old && !l->times_from_disk)
            l->created = old->created;
        srv_layer_release(old);
        const double times[2] = {l->created, l->updated};
        int w = srv_datadir_write(p->dd, l->name, l->config, v, n, vtext, times, &stamp, &e);
        if (w >= 0) {
            set_known(p, l->name, &stamp);
            if (w == 1) /* committed: served and answered as written; the log says the rest */
                srv_log(p->log_format, "warn", "layer '%s' saved to %s: %s", l->name, p->dd->root,
                        e.message);
        } else {
            rc = -1;
        }
    }
    srv_datadir_unlock(p->dd);
    if (rc < 0 && e.code != SRV_OK) { /* the disk refused (a conflict is answered as is) */
        srv_log(p->log_format, "error", "layer '%s' not saved to %s, the old one is kept: %s",
                l->name, p->dd->root, e.message);
        if (e.code == SRV_E_CONFLICT)
            srv_error_set(err, e.code, e.field, "%s", e.message);
        else
            srv_error_set(err, e.code, "",
                          "could not save layer '%s' to the data dir (%s); the layer is unchanged",
                          l->name, e.message);
    }
    return rc;
}

int srv_persist_put(srv_persist *p, srv_registry *reg, srv_layer *l, uint64_t if_version,
                    bool *replaced, srv_error *err)
{
    pthread_mutex_lock(&p->lock);
    uint64_t version = 0; /* with a data dir: the counter's, stored with the layer */
    bool existed = false;
    int rc = p->dd ? save(p, reg, l, if_version, &version, &existed, err)
                   : check_version(l->name, memory_version(reg, l->name), if_version, err);
    if (rc == 0) {
        /* with a data dir the condition was checked on disk, which every replica shares; memory
         * may be behind it (another replica's change not followed yet): publish unconditionally */
        rc = srv_registry_put_version(reg, l, version, p->dd ? 0 : if_version, replaced, err);
        if (rc == 0)
            set_damaged(p, l->name, NULL);
        if (rc == 0 && replaced)
            *replaced = *replaced || existed;
    }
    pthread_mutex_unlock(&p->lock);
    return rc;
}

/* Removes layer name from the data dir if its version there meets if_version, under the lock
 * (see save). Caller holds p->lock. 0, or -1 with err: 404, 409, 503. */
static int unsave(srv_persist *p, srv_registry *reg, const char *name, uint64_t if_version,
                  srv_error *err)
{
    srv_error e = {0};
    uint64_t cur = 0;
    if (srv_datadir_lock(p->dd, &e) != 0)
        return srv_error_set(err, e.code, "", "layer '%s' not deleted: %s", name, e.message);
    int rc = srv_datadir_version(p->dd, name, &cur, err);
    const uint64_t in_memory = rc == 0 && !cur ? memory_only_version(p, reg, name) : 0;
    if (rc == 0 && !cur && !in_memory)
        rc = srv_error_set(err, SRV_E_LAYER_NOT_FOUND, "name", "no layer called '%s'", name);
    if (rc == 0)
        rc = check_version(name, cur ? cur : in_memory, if_version, err);
    if (rc == 0 && cur) {
        int r = srv_datadir_remove(p->dd, name, &e);
        if (r == 1)
            srv_log(p->log_format, "warn", "layer '%s' deleted from %s: %s", name, p->dd->root,
                    e.message);
        if (r < 0) {
            srv_log(p->log_format, "error", "layer '%s' not deleted from %s: %s", name, p->dd->root,
                    e.message);
            rc = e.code == SRV_E_CONFLICT
                     ? srv_error_set(err, e.code, e.field, "%s", e.message)
                     : srv_error_set(err, e.code, "",
                                     "could not delete layer '%s' from the data dir (%s); it is "
                                     "still served",
                                     name, e.message);
        }
    }
    srv_datadir_unlock(p->dd);
    return rc;
}

int srv_persist_delete(srv_persist *p, srv_registry *reg, const char *name, uint64_t if_version,
                       srv_error *err)
{
    pthread_mutex_lock(&p->lock);
    /* with a data dir, what is on disk decides (a damaged layer, an unloaded one, one another
     * replica made), and a layer served from memory only (--demo's) where it has none; a name
     * that is not a layer directory there is a conflict that touches nothing. Without one: what
     * is served, or unloaded (model repository extension) */
    int rc = p->dd ? unsave(p, reg, name, if_version, err)
                   : check_version(name, memory_version(reg, name), if_version, err);
    if (rc == 0 && !p->dd && !memory_version(reg, name) &&
        !(srv_registry_is_unloaded(reg, name, NULL) && !if_version))
        rc = srv_error_set(err, SRV_E_LAYER_NOT_FOUND, "name", "no layer called '%s'", name);
    if (rc == 0) {
        srv_registry_delete(reg, name, 0, NULL); /* absent from memory: nothing to do */
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
