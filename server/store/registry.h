/*
 * registry.h - the named layers a daemon serves.
 *
 * An entry (srv_layer) is immutable once published: replacing a layer publishes a new entry under the
 * same name, and deleting one only unlinks it. Entries are reference-counted, so a request that got
 * an entry keeps using it (old version) until it releases it, whatever happens to the name meanwhile.
 * Every function here is thread-safe.
 */
#ifndef ATTND_REGISTRY_H
#define ATTND_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/error.h"
#include "layer_stats.h"
#include "mha.h"

#define SRV_LAYER_NAME_MAX 64

typedef struct srv_layer {
    char name[SRV_LAYER_NAME_MAX + 1];
    mha_layer *layer;    /* owned; immutable once published                                     */
    json_t *config;      /* owned; the config object with every field spelled out (defaults in)  */
    uint64_t version;    /* unique across the registry's life, grows with every put (ETag)      */
    double created;      /* Unix time (s) the name was first created (kept across replacements)  */
    double updated;      /* Unix time (s) of this version                                         */
    bool times_from_disk; /* created and updated were read from the data dir (kept as read)      */
    srv_layer_stats *stats; /* owned reference: the name's request counters, shared by its versions
                             * (a put hands the replaced entry's on); never NULL once published    */
    int refs;            /* private: use srv_layer_ref / srv_layer_release                        */
    struct srv_registry *owner; /* private: the registry its weights are counted in (or NULL)     */
    int64_t charged;     /* private: bytes counted there, given back when the entry is freed      */
} srv_layer;

typedef struct srv_registry srv_registry;

srv_registry *srv_registry_create(void);
void srv_registry_free(srv_registry *reg); /* releases every entry; accepts NULL */

/* True when name is 1-64 characters of [A-Za-z0-9._-] not starting with '.'. When it is not and
 * err is given, fills err (SRV_E_BAD_NAME, field "name") and returns false. */
bool srv_layer_name_valid(const char *name, srv_error *err);

/* Wraps a built layer and its config into a new entry with one reference (the caller's); takes
 * ownership of layer and config (a new reference of json is stolen) even on failure. NULL when out of
 * memory. The entry gets its version when it is put, and fresh counters (layer_stats.h) that a put
 * replacing an entry of the same name swaps for the replaced entry's. */
srv_layer *srv_layer_new(const char *name, mha_layer *layer, json_t *config);

/* Adds a reference (returns l) / drops one, freeing the entry with the last. Both accept NULL. */
srv_layer *srv_layer_ref(srv_layer *l);
void srv_layer_release(srv_layer *l);

/* The entry called name with a new reference the caller must release, or NULL (err filled with
 * SRV_E_LAYER_NOT_FOUND when err is given, saying so when the layer is unloaded). */
srv_layer *srv_registry_get(srv_registry *reg, const char *name, srv_error *err);

/* Publishes l under l->name, replacing any entry of that name atomically (and loading it, when
 * it was unloaded); the registry takes its own reference (the caller keeps and must release theirs). Sets l->version (and l->created from the
 * replaced entry). if_version: 0 = unconditional; SRV_IF_ABSENT = only when there is no entry yet
 * (If-None-Match: *); SRV_IF_EXISTS = only when there is one (If-Match: *); otherwise the put
 * happens only when the current entry's version equals it
 * (SRV_E_CONFLICT otherwise, or when there is no entry). *replaced (may be NULL) tells whether an
 * entry was replaced; l then counts on the replaced entry's stats. Returns 0 or -1. */
#define SRV_IF_ABSENT UINT64_MAX        /* If-None-Match: *                                  */
#define SRV_IF_EXISTS (UINT64_MAX - 1)  /* If-Match: * (whatever version)                     */
int srv_registry_put(srv_registry *reg, srv_layer *l, uint64_t if_version, bool *replaced,
                     srv_error *err);

/* The highest version this registry gave or was given (0: none yet). */
uint64_t srv_registry_last_version(srv_registry *reg);

/* Reserves a new version number (never given out again by this registry), for a put that must
 * know its version before it publishes (the data dir stores it with the layer). */
uint64_t srv_registry_next_version(srv_registry *reg);

/* srv_registry_put with a given version (non-zero: one reserved with srv_registry_next_version,
 * or one read back from the data dir, so that a layer keeps its version - its ETag - across
 * restarts and between replicas sharing a data dir); the counter moves past it. 0 = the next. */
int srv_registry_put_version(srv_registry *reg, srv_layer *l, uint64_t version,
                             uint64_t if_version, bool *replaced, srv_error *err);

/* Unlinks the entry called name (requests holding it finish with it), or forgets it when it is
 * unloaded (if_version 0 only). if_version as for put. -1 with SRV_E_LAYER_NOT_FOUND /
 * SRV_E_CONFLICT. */
int srv_registry_delete(srv_registry *reg, const char *name, uint64_t if_version, srv_error *err);

/* Every entry, sorted by name, each with a new reference: *out is a malloc'd array the caller frees
 * with srv_registry_list_free. Returns the count, or -1 when out of memory. */
int srv_registry_list(srv_registry *reg, srv_layer ***out);
void srv_registry_list_free(srv_layer **list, int n);

/* Number of layers. */
int srv_registry_count(srv_registry *reg);

/* ---------------------------------------------------------------------------------------------- */
/* Unloaded layers (Triton's model repository extension)                                          */
/*
 * An unloaded layer is not served (srv_registry_get, _list and _count do not see it) and not
 * forgotten: the registry keeps its name, its version and its counters, and for a layer that has
 * no files to be loaded from again (in memory only) the entry itself. Publishing the name again
 * (srv_registry_put*, srv_registry_restore) loads it, counting on where it was; deleting the name
 * forgets it. */

typedef struct srv_unloaded {
    char name[SRV_LAYER_NAME_MAX + 1];
    uint64_t version;       /* the version it had                                                */
    srv_layer_stats *stats; /* owned reference: its counters                                     */
    srv_layer *kept;        /* owned reference: the entry, for a layer in memory only; or NULL   */
} srv_unloaded;

/* Stops serving layer name (requests holding it finish with it); keep: hold on to the entry, to
 * be restored. Returns 1 when it was served and is now unloaded, 0 when it was not served (unknown,
 * or unloaded already: nothing changes), -1 when out of memory (it is still served). */
int srv_registry_unload(srv_registry *reg, const char *name, bool keep);

/* Serves again the entry kept by an unload of name (the same version). Returns 1 when it did, 0
 * when name is not unloaded with its entry kept, -1 when out of memory. */
int srv_registry_restore(srv_registry *reg, const char *name);

/* Every unloaded layer, sorted by name, each with new references: *out is a malloc'd array the
 * caller frees with srv_unloaded_free. Returns the count, or -1 when out of memory. */
int srv_registry_unloaded(srv_registry *reg, srv_unloaded **out);
void srv_unloaded_free(srv_unloaded *list, int n);

/* True when name is unloaded (*version, may be NULL, gets the version it had). */
bool srv_registry_is_unloaded(srv_registry *reg, const char *name, uint64_t *version);

/* ---------------------------------------------------------------------------------------------- */
/* The layers' memory (--max-weights-bytes)                                                        */
/*
 * Every layer's weights count against one limit, from before they are allocated until the entry is
 * freed (an old version a request still holds still counts): a builder reserves the bytes, allocates
 * only when that succeeds, and hands the reservation to the entry it makes (srv_layer_charge). A
 * layer that replaces one of the same name is counted as the difference (the old one goes once its
 * last request ends), so a layer can always be replaced by one of its own size.
 */

/* What a layer of this config counts: its parameters, 4 bytes each (a checked config). */
int64_t srv_layer_bytes(const mha_config *cfg);

/* Sets the limit (0: none). */
void srv_registry_set_weights_limit(srv_registry *reg, int64_t limit);

/* Reserves bytes for a layer about to be built for name. Returns 0, or -1 with err:
 * SRV_E_INSUFFICIENT_STORAGE (507) naming the layer's size, what is held and the limit. */
int srv_registry_reserve(srv_registry *reg, const char *name, int64_t bytes, srv_error *err);

/* Gives back bytes reserved for a layer that was not made. */
void srv_registry_unreserve(srv_registry *reg, int64_t bytes);

/* Hands bytes reserved in reg to l, given back when l is freed; when l is NULL (its build failed)
 * they are given back now. Returns l. */
srv_layer *srv_layer_charge(srv_layer *l, srv_registry *reg, int64_t bytes);

/* The bytes held (layers alive and reservations) and the limit (0: none). */
void srv_registry_weights(srv_registry *reg, int64_t *held, int64_t *limit);

#endif
