/*
 * app.h - the state one daemon shares between its request handlers.
 *
 * An srv_app is created from the options before the HTTP side starts and freed after it stopped
 * (api/daemon.c). Handlers get it as their first argument (the HTTP server's ctx). State the
 * daemon adds (a cache, a counter, a setting derived at start) goes here as a field set up in
 * srv_app_create.
 */
#ifndef ATTND_APP_H
#define ATTND_APP_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "auth.h"
#include "base/error.h"
#include "http/body_budget.h"
#include "http/http.h"
#include "metrics.h"
#include "mha.h"
#include "options.h"
#include "store/persist.h"
#include "store/registry.h"
#include "store/watch.h"

typedef struct srv_app {
    srv_options opt;          /* copy of the options the daemon started with                 */
    srv_registry *registry;   /* the layers                                                   */
    mha_pool *pool;           /* the engine's threads, shared by every forward pass          */
    mha_limits limits;        /* engine limits derived from the options                       */
    srv_persist *persist;     /* the data dir (or none); every layer change goes through it  */
    srv_watch *watch;         /* --watch: follows the data dir other replicas write, or NULL */
    srv_auth auth;            /* API key, --auth-reads, --read-only                           */
    srv_metrics *metrics;     /* counters for GET /metrics                                    */
    srv_body_budget bodies;   /* request bodies held at once (--max-body-memory)              */

    /* forward passes in flight (capped at opt.max_inflight; see forward.c) */
    pthread_mutex_t inflight_lock;
    pthread_cond_t inflight_cond;
    int inflight;
    int inflight_waiting;     /* passes waiting for a slot                                     */

    /* --checkpoints-dir, opened once (-1: imports are off); imports run one at a time */
    int checkpoints_fd;
    pthread_mutex_t import_lock;

    /* lifecycle: set with __atomic stores, read with __atomic loads */
    bool ready;               /* false until start-up (layers loaded) is complete -> /readyz  */
    bool draining;            /* true once a graceful stop began -> /readyz 503, new work 503 */
    double started;           /* Unix time (s) of start                                       */
} srv_app;

/* Creates the shared state: registry, engine pool (opt->blas_threads threads), limits; sets
 * BLAS to one thread (the pool parallelises); API key, metrics (labelled with the patterns of
 * routes, a table ended by method NULL; may be NULL); loads the data dir's layers (a
 * data dir that cannot be used, or a bad key file, is an error). With opt->demo, adds the layer
 * "demo" (in memory only, unless the data dir holds one). ready is left
 * false: the daemon sets it once it listens. NULL with err filled on failure. */
srv_app *srv_app_create(const srv_options *opt, const srv_route *routes, srv_error *err);
void srv_app_free(srv_app *app); /* accepts NULL */

#endif
