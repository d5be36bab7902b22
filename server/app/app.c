/*
 * app.c - the daemon's shared state (see app.h).
 */
#include "app.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/sysinfo.h"
#include "store/config.h"

srv_app *srv_app_create(const srv_options *opt, const srv_route *routes, srv_error *err)
{
    srv_app *app = calloc(1, sizeof *app);
    if (!app) {
        srv_error_set(err, SRV_E_NOMEM, "", "out of memory");
        return NULL;
    }
    app->opt = *opt;
    app->started = srv_now();
    pthread_mutex_init(&app->inflight_lock, NULL);
    pthread_cond_init(&app->inflight_cond, NULL);
    pthread_mutex_init(&app->import_lock, NULL);
    app->checkpoints_fd = -1;
    mha_limits_default(&app->limits);
    app->limits.max_elements = opt->max_tensor_elements;
    app->bodies.limit = opt->max_body_memory > 0 ? opt->max_body_memory
                                                 : srv_body_budget_default(opt->max_body_bytes);

    /* The pool parallelises each pass; BLAS inside it runs on the calling thread. */
    mha_blas_set_threads(1);
    mha_error me = {0};
    app->registry = srv_registry_create();
    if (!app->registry) {
        srv_error_set(err, SRV_E_NOMEM, "", "out of memory creating the layer registry");
        srv_app_free(app);
        return NULL;
    }
    srv_registry_set_weights_limit(app->registry, opt->max_weights_bytes);
    app->pool = mha_pool_create(opt->blas_threads, &me);
    if (!app->pool) { /* the engine says why: threads that would not start, memory */
        srv_error_from_mha(err, &me, "");
        srv_app_free(app);
        return NULL;
    }

    if (opt->demo) {
        mha_config cfg;
        mha_config_init(&cfg, 64, 4);
        int64_t bytes = srv_layer_bytes(&cfg);
        srv_layer *l =
            srv_registry_reserve(app->registry, "demo", bytes, err) < 0
                ? NULL
                : srv_layer_charge(srv_layer_build_init("demo", &cfg, &app->limits,
                                                        "xavier_uniform", 0, app->pool, err),
                                   app->registry, bytes);
        if (!l || srv_registry_put(app->registry, l, 0, NULL, err) < 0) {
            srv_layer_release(l);
            srv_app_free(app);
            return NULL;
        }
        srv_layer_release(l);
        srv_log(opt->log_format, "info", "created layer 'demo' (embed_dim 64, num_heads 4, seed 0)");
    }

    /* metrics are labelled with the route table's patterns */
    const char *methods[SRV_METRICS_MAX_ROUTES], *patterns[SRV_METRICS_MAX_ROUTES];
    int nroutes = 0;
    for (; routes && routes[nroutes].method && nroutes < SRV_METRICS_MAX_ROUTES; nroutes++) {
        methods[nroutes] = routes[nroutes].method;
        patterns[nroutes] = routes[nroutes].pattern;
    }
    app->metrics = srv_metrics_create(nroutes, methods, patterns);
    if (!app->metrics) {
        srv_error_set(err, SRV_E_NOMEM, "", "out of memory");
        srv_app_free(app);
        return NULL;
    }
    if (srv_auth_init(&app->auth, opt->api_key_file, opt->api_key, opt->auth_reads,
                      opt->read_only, err) < 0) {
        srv_app_free(app);
        return NULL;
    }
    /* the data dir's layers are loaded before the daemon listens (and so before /readyz is 200) */
    app->persist = srv_persist_create(opt->data_dir, opt->read_only, opt->log_format, err);
    if (!app->persist) {
        srv_app_free(app);
        return NULL;
    }
    if (app->persist->dd) /* a layer's file over it is refused from its header, unread */
        app->persist->dd->max_weights_bytes = opt->max_weights_bytes;
    if (!app->persist->dd) {
        srv_log(opt->log_format, "info",
                "no data dir (--data-dir not given, or empty): layers live in memory only and are "
                "gone when the daemon stops");
    } else {
        int n = srv_persist_load_all(app->persist, app->registry, &app->limits);
        int bad = srv_persist_damaged_count(app->persist);
        srv_log(opt->log_format, bad ? "warn" : "info",
                "data dir %s: %d layers loaded, %d damaged (skipped, listed in /readyz)",
                opt->data_dir, n, bad);
    }
    if (opt->checkpoints_dir[0]) {
        /* every import is resolved below this descriptor (store/hf_checkpoint.h) */
        app->checkpoints_fd = open(opt->checkpoints_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (app->checkpoints_fd < 0) {
            srv_error_set(err, SRV_E_INTERNAL, "", "cannot open --checkpoints-dir %s: %s",
                          opt->checkpoints_dir, strerror(errno));
            srv_app_free(app);
            return NULL;
        }
    }
    if (opt->watch) {
        srv_watch_config wc = {.interval_ms = opt->watch_interval_ms,
                               .no_inotify = opt->watch_poll,
                               .log_format = opt->log_format};
        app->watch = srv_watch_start(app->persist, app->registry, &app->limits, &wc, err);
        if (!app->watch) {
            srv_app_free(app);
            return NULL;
        }
    }
    return app;
}

void srv_app_free(srv_app *app)
{
    if (!app)
        return;
    srv_watch_free(app->watch); /* first: its thread uses the registry and the data dir */
    srv_registry_free(app->registry);
    mha_pool_free(app->pool);
    srv_persist_free(app->persist);
    srv_metrics_free(app->metrics);
    if (app->checkpoints_fd >= 0)
        close(app->checkpoints_fd);
    pthread_mutex_destroy(&app->import_lock);
    pthread_cond_destroy(&app->inflight_cond);
    pthread_mutex_destroy(&app->inflight_lock);
    free(app);
}
