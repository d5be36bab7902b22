/*
 * watch.c - `--watch`: the thread that keeps a replica in step with a shared data dir (watch.h).
 *
 * Loop: poll(stop pipe, inotify fd, timeout = rescan interval). An inotify event starts a short
 * debounce (until 10 ms pass without events, at most 100 ms) so that one commit costs one step;
 * then srv_persist_sync, then the inotify watches are refreshed for the layer dirs now present
 * (a writer renames files inside layers/<name>/, which raises no event on layers/ itself).
 * Watches of deleted dirs go away by themselves (IN_IGNORED).
 */
#include "watch.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"

struct srv_watch {
    srv_persist *persist;  /* borrowed */
    srv_registry *reg;     /* borrowed */
    const mha_limits *limits; /* borrowed */
    srv_watch_config cfg;

    pthread_mutex_t stats_lock;
    srv_watch_stats stats;

    int inotify_fd;        /* -1: rescan only */
    bool inotify_warned;   /* a watch could not be added (reported once) */
    int stop_pipe[2];
    pthread_t thread;
    bool started;
};

/* Watches one directory for what can change a step's outcome. A failure (e.g. the user's inotify
 * watch limit) only leaves that directory to the periodic rescan. */
static void watch_dir(srv_watch *w, const char *path)
{
    /* IN_DONT_FOLLOW: a link in the layers dir is not a layer, and is never followed */
    uint32_t mask = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_CLOSE_WRITE |
                    IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW;
    if (inotify_add_watch(w->inotify_fd, path, mask) >= 0 || errno == ENOENT || errno == ENOTDIR)
        return;
    if (!w->inotify_warned)
        srv_log(w->cfg.log_format, "warn",
                "watch: cannot watch %s with inotify (%s); it is covered by the %d ms rescan", path,
                strerror(errno), w->cfg.interval_ms);
    w->inotify_warned = true;
}

/* Adds watches for the layers dir and every directory in it, also those of layers still being
 * written (no committed file yet: their commit is a rename inside them, which raises no event on
 * layers/). Idempotent for the ones already watched. */
static void watch_dirs(srv_watch *w)
{
    if (w->inotify_fd < 0)
        return;
    const char *layers = w->persist->dd->layers;
    watch_dir(w, layers);
    DIR *d = opendir(layers);
    if (!d)
        return;
    char path[PATH_MAX];
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.' || (de->d_type != DT_DIR && de->d_type != DT_UNKNOWN))
            continue; /* hidden: temps and deleted layers; links and files: not layers */
        if (snprintf(path, sizeof path, "%s/%s", layers, de->d_name) < (int)sizeof path)
            watch_dir(w, path);
    }
    closedir(d);
}

static int step(srv_watch *w, bool woken)
{
    int changes = srv_persist_sync(w->persist, w->reg, w->limits);
    pthread_mutex_lock(&w->stats_lock);
    w->stats.scans++;
    w->stats.wakeups += woken;
    w->stats.changes += (uint64_t)(changes > 0 ? changes : 0);
    pthread_mutex_unlock(&w->stats_lock);
    return changes;
}

int srv_watch_scan(srv_watch *w)
{
    return step(w, false);
}

srv_watch_stats srv_watch_get_stats(srv_watch *w)
{
    pthread_mutex_lock(&w->stats_lock);
    srv_watch_stats s = w->stats;
    pthread_mutex_unlock(&w->stats_lock);
    return s;
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Reads and discards every pending inotify event (what changed does not matter: the step
 * compares the whole data dir). */
static void drain_events(int fd)
{
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    while (read(fd, buf, sizeof buf) > 0)
        ;
}

static void *watch_main(void *arg)
{
    srv_watch *w = arg;
    struct pollfd p[2] = {{.fd = w->stop_pipe[0], .events = POLLIN},
                          {.fd = w->inotify_fd, .events = POLLIN}};
    nfds_t np = w->inotify_fd >= 0 ? 2 : 1;
    for (;;) {
        int r = poll(p, np, w->cfg.interval_ms);
        if (r < 0 && errno != EINTR)
            break;
        if (r > 0 && p[0].revents)
            break;
        bool woken = r > 0 && np == 2 && (p[1].revents & POLLIN);
        if (woken) {
            /* Debounce: let the writer finish its commit (two renames), then one step. */
            long long until = now_ms() + 100;
            drain_events(w->inotify_fd);
            while (now_ms() < until && poll(&p[1], 1, 10) > 0)
                drain_events(w->inotify_fd);
        }
        step(w, woken);
        watch_dirs(w);
    }
    return NULL;
}

srv_watch *srv_watch_start(srv_persist *p, srv_registry *reg, const mha_limits *limits,
                           const srv_watch_config *cfg, srv_error *err)
{
    if (!p || !p->dd) {
        srv_error_set(err, SRV_E_BAD_REQUEST, "watch",
                      "--watch follows a data dir that replicas share: give --data-dir too");
        return NULL;
    }
    srv_watch *w = calloc(1, sizeof *w);
    if (!w) {
        srv_error_set(err, SRV_E_NOMEM, "", "watch: out of memory");
        return NULL;
    }
    w->persist = p;
    w->reg = reg;
    w->limits = limits;
    w->cfg = *cfg;
    if (w->cfg.interval_ms <= 0)
        w->cfg.interval_ms = SRV_WATCH_INTERVAL_MS;
    if (w->cfg.interval_ms < 10)
        w->cfg.interval_ms = 10;
    if (w->cfg.interval_ms > 60000)
        w->cfg.interval_ms = 60000;
    w->stop_pipe[0] = w->stop_pipe[1] = -1;
    w->inotify_fd = -1;
    pthread_mutex_init(&w->stats_lock, NULL);

    if (!w->cfg.no_inotify) {
        w->inotify_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        if (w->inotify_fd < 0)
            srv_log(w->cfg.log_format, "warn", "watch: no inotify (%s); rescanning every %d ms",
                    strerror(errno), w->cfg.interval_ms);
    }
    w->stats.inotify = w->inotify_fd >= 0;
    /* Watches first, then a step: a change landing in between is caught by one or the other. */
    watch_dirs(w);
    step(w, false);

    if (pipe2(w->stop_pipe, O_CLOEXEC) < 0) {
        srv_error_set(err, SRV_E_INTERNAL, "", "watch: pipe: %s", strerror(errno));
        srv_watch_free(w);
        return NULL;
    }
    int e = pthread_create(&w->thread, NULL, watch_main, w);
    if (e == 0)
        pthread_setname_np(w->thread, "attnd-watch");
    if (e != 0) {
        srv_error_set(err, SRV_E_INTERNAL, "", "watch: cannot start its thread: %s", strerror(e));
        srv_watch_free(w);
        return NULL;
    }
    w->started = true;
    srv_log(w->cfg.log_format, "info", "watch: following %s (%s, full rescan every %d ms)",
            p->dd->layers, w->inotify_fd >= 0 ? "inotify" : "no inotify", w->cfg.interval_ms);
    return w;
}

void srv_watch_free(srv_watch *w)
{
    if (!w)
        return;
    if (w->started) {
        ssize_t wr = write(w->stop_pipe[1], "x", 1);
        (void)wr;
        pthread_join(w->thread, NULL);
    }
    for (int k = 0; k < 2; k++)
        if (w->stop_pipe[k] >= 0)
            close(w->stop_pipe[k]);
    if (w->inotify_fd >= 0)
        close(w->inotify_fd);
    pthread_mutex_destroy(&w->stats_lock);
    free(w);
}
