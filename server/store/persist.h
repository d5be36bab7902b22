/*
 * persist.h - the daemon's layers kept in step with its data dir (--data-dir).
 *
 * Every change of a layer (PUT layer, PUT weights, DELETE) goes through srv_persist_put /
 * srv_persist_delete, which write the disk first and publish to the registry only when the write
 * succeeded: a failed write answers 5xx and leaves the old layer served (memory and disk agree).
 * Changes are serialised by one lock (they are rare; reads and forward passes never take it) and,
 * with a data dir, by the data dir's lock across every process sharing it (datadir.h, "Replicas"):
 * the If-Match check against the version on disk, the new version, the write and the publish
 * happen as one step, whichever replica a writer goes through.
 *
 * At start srv_persist_load_all reads every layer directory; a layer that cannot be loaded
 * (damaged or half-written file, config that does not fit its weights) is logged with the reason,
 * listed by srv_persist_damaged_json (GET /readyz shows it) and skipped; the others are served.
 * An entry of layers/ that is not a layer (a symbolic link, a file, a FIFO, a name that is not a
 * layer name) is listed the same way, at start and on every --watch step; a PUT or DELETE of its
 * name is a 409 that leaves it as it is.
 * Without a data dir the same calls only publish (layers live in memory).
 *
 * For --watch (replicas sharing a data dir): srv_persist_sync compares the data dir with what this
 * process last loaded or wrote (a stamp per layer: inode, size and mtime of both files) and
 * reloads what changed, unpublishes what is gone; a layer this process wrote itself is not
 * reloaded (its version, the ETag a client holds, stays). srv_persist_reload (re)reads one layer.
 *
 * Triton's model repository extension: srv_persist_unload stops serving a layer without touching
 * its files, srv_persist_load reads it again (below).
 */
#ifndef ATTND_PERSIST_H
#define ATTND_PERSIST_H

#include <pthread.h>
#include <stdbool.h>

#include <jansson.h>

#include "base/buf.h"
#include "base/error.h"
#include "base/log.h"
#include "codec/safetensors.h"
#include "datadir.h"
#include "mha.h"
#include "registry.h"

typedef struct srv_damaged {
    char name[256];            /* an entry of layers/ (a stray's name may be any file name)     */
    char reason[sizeof ((srv_error *)0)->message];
    bool stray;                /* not a layer at all (srv_datadir_strays), rescanned each sync  */
    unsigned seen;             /* strays: the scan that last found it                           */
} srv_damaged;

typedef struct srv_known {
    char name[65];
    srv_dd_stamp stamp;        /* of the files last loaded or written by this process          */
} srv_known;

typedef struct srv_persist {
    srv_datadir *dd;           /* NULL: layers live in memory only                             */
    srv_log_format log_format;
    pthread_mutex_t lock;      /* serialises changes (held across disk writes); guards known   */
    pthread_mutex_t damaged_lock; /* guards damaged only: /readyz and /metrics never wait for a
                                   * disk write                                                */
    srv_damaged *damaged;      /* layers on disk that could not be loaded                      */
    int ndamaged, damaged_cap;
    int *damaged_index;        /* open addressing by name: indices into damaged, -1 empty; its
                                * size a power of two at least twice ndamaged (a data dir of
                                * thousands of strays is rescanned in linear time)              */
    int damaged_slots;
    srv_known *known;          /* every layer on disk this process has seen, with its stamp    */
    int nknown;
    double last_clean;         /* Unix time of the last removal of stale temp files            */
    unsigned stray_scan;       /* counts the scans for strays (guarded by damaged_lock)        */
} srv_persist;

/* Opens the data dir (data_dir "" = none; read_only: never write it). NULL with err filled when
 * the dir cannot be used (the daemon then refuses to start). Free with srv_persist_free. */
srv_persist *srv_persist_create(const char *data_dir, bool read_only, srv_log_format log_format,
                                srv_error *err);
void srv_persist_free(srv_persist *p); /* accepts NULL */

/* Builds a registry entry (one reference, the caller's) for name from a config object (PUT's
 * "config" form; checked strictly) and named tensors (every parameter of the config, nothing
 * else). NULL with err filled: 422 for the config, 400 for the weights. */
srv_layer *srv_persist_build(const char *name, const json_t *config, const srv_st *weights,
                             const mha_limits *limits, srv_error *err);

/* Loads every layer of the data dir into reg (after removing stale temp files). Logs one line per
 * layer loaded, repaired or damaged. Returns the number loaded. */
int srv_persist_load_all(srv_persist *p, srv_registry *reg, const mha_limits *limits);

/* (Re)loads layer name from disk into reg (--watch). Returns 1 when loaded, 0 when it is no longer
 * on disk (unpublished, if it was served), -1 when it is damaged (err filled; the version served
 * before, if any, stays). */
int srv_persist_reload(srv_persist *p, srv_registry *reg, const char *name,
                       const mha_limits *limits, srv_error *err);

/* One --watch step: reloads every layer whose files changed since this process last loaded or
 * wrote them, loads new ones, unpublishes those whose directory is gone (layers never on disk, such
 * as --demo's, are left alone); once a minute it also removes stale temp files. Cheap when nothing changed (a readdir and two stats per layer).
 * Returns the number of layers published, unpublished or found damaged. */
int srv_persist_sync(srv_persist *p, srv_registry *reg, const mha_limits *limits);

/* Saves l (a new entry for l->name) to disk, then publishes it in reg, if the current version is
 * if_version (0 = any). *replaced (may be NULL) tells whether a layer was replaced. Returns 0, or
 * -1 with err: SRV_E_CONFLICT, SRV_E_INTERNAL (disk write failed: nothing changed), ... */
int srv_persist_put(srv_persist *p, srv_registry *reg, srv_layer *l, uint64_t if_version,
                    bool *replaced, srv_error *err);

/* Removes layer name from disk, then from reg, if its version is if_version (0 = any). Returns 0,
 * or -1 with err (SRV_E_LAYER_NOT_FOUND, SRV_E_CONFLICT, SRV_E_INTERNAL). */
int srv_persist_delete(srv_persist *p, srv_registry *reg, const char *name, uint64_t if_version,
                       srv_error *err);

/* Stops serving layer name, for Triton's model repository extension (registry.h, "Unloaded
 * layers"): a layer with files in the data dir is forgotten but for its name, version and
 * counters (a load reads the files again); a layer in memory only is kept, to be restored. Files
 * are never touched. An unloaded layer stays unloaded until it is loaded, PUT again, or (--watch)
 * its files change; deleting it deletes its files. Returns 1 when unloaded, 0 when it was not
 * served (unknown, damaged, unloaded already), -1 when out of memory. */
int srv_persist_unload(srv_persist *p, srv_registry *reg, const char *name);

/* Loads layer name, or loads it again: from its files in the data dir (read and checked in full,
 * the version served before keeps serving when they are damaged), else the entry an unload kept;
 * a layer served from memory only is loaded already. Returns 0, or -1 with err:
 * SRV_E_LAYER_NOT_FOUND (not in the data dir nor in memory), a damaged file's error (the reason
 * /readyz shows), SRV_E_NOMEM. */
int srv_persist_load(srv_persist *p, srv_registry *reg, const char *name, const mha_limits *limits,
                     srv_error *err);

/* A copy of the damaged list: *out is a malloc'd array the caller frees. Returns the count, or -1
 * when out of memory. */
int srv_persist_damaged_list(srv_persist *p, srv_damaged **out);

/* Appends [{"name": ..., "reason": ...}, ...] for the damaged layers to out; returns their count. */
int srv_persist_damaged_json(srv_persist *p, srv_buf *out);
int srv_persist_damaged_count(srv_persist *p);

#endif
