/*
 * watch.h - `--watch`: keep this daemon's layers in step with a data dir that other replicas write.
 *
 * Replicas behind a load balancer share one data dir (a Kubernetes ReadWriteMany volume, a compose
 * volume); each serves from memory. The data dir is the source of truth: the watcher publishes the
 * layers that another process created or replaced there and drops the ones it deleted, within 2
 * seconds, without a restart.
 *
 * The watcher is the "when": a thread that runs one srv_persist_sync step (persist.h, the "what":
 * compare stamps, reload what changed, unpublish what is gone, never reload this daemon's own
 * writes) whenever the data dir may have changed. inotify on the layers dir and on every layer dir
 * wakes it right after a change (debounced: one commit is two renames); a full rescan every
 * interval_ms (500 by default) is the safety net where inotify says nothing — network file systems
 * such as NFS deliver no events for changes made by other clients — and where it is unavailable.
 *
 * A layer unloaded through Triton's model repository extension (persist.h, srv_persist_unload)
 * stays unloaded while its files are unchanged; when another replica writes it (its files change)
 * the new version is served, as a PUT here would serve it; when another replica deletes it, it is
 * forgotten.
 *
 * Never half a layer: srv_persist_sync reads and checks a changed layer in full (the data dir's
 * commit protocol makes weights.safetensors the commit record) before one atomic registry put; a
 * layer that cannot be read is reported (log, /readyz) and the version in memory keeps serving.
 */
#ifndef ATTND_WATCH_H
#define ATTND_WATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"
#include "base/log.h"
#include "mha.h"
#include "persist.h"
#include "registry.h"

#define SRV_WATCH_INTERVAL_MS 500 /* default full rescan period */

typedef struct srv_watch_config {
    int interval_ms;           /* full rescan period (0 = SRV_WATCH_INTERVAL_MS; 10..60000)      */
    bool no_inotify;           /* rescan only (what a network file system amounts to)             */
    srv_log_format log_format; /* where "watch:" messages go                                      */
} srv_watch_config;

typedef struct srv_watch_stats {
    uint64_t scans;   /* sync steps run                                                          */
    uint64_t wakeups; /* of them, woken by inotify rather than by the rescan timer               */
    uint64_t changes; /* layers published, unpublished or found damaged, in total                */
    bool inotify;     /* inotify is in use                                                       */
} srv_watch_stats;

typedef struct srv_watch srv_watch;

/* Starts watching p's data dir for reg (p, reg and limits are borrowed and must outlive the
 * watcher). Call it after the start-up load (srv_persist_load_all): the first step picks up what
 * changed meanwhile. NULL with err filled when p has no data dir (--watch needs --data-dir) or the
 * thread cannot start. */
srv_watch *srv_watch_start(srv_persist *p, srv_registry *reg, const mha_limits *limits,
                           const srv_watch_config *cfg, srv_error *err);

/* One step now, on the caller's thread (serialised with the watching thread by persist's lock).
 * Returns srv_persist_sync's count. */
int srv_watch_scan(srv_watch *w);

/* A copy of the counters. */
srv_watch_stats srv_watch_get_stats(srv_watch *w);

/* Stops the thread and frees the watcher; accepts NULL. */
void srv_watch_free(srv_watch *w);

#endif
