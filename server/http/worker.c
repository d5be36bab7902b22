/*
 * worker.c - the workers that run heavy handlers (routes flagged SRV_ROUTE_HEAVY with large
 * bodies, and every SRV_ROUTE_WORKER one) off the HTTP threads: the connection is suspended while
 * its job waits and runs, so the thread that received it keeps serving its other connections. A
 * job whose client hangs up while it waits leaves the queue at once (srv_http_job_gone), or is
 * dropped when a worker takes it. A pass that waits past --queue-wait-ms for a worker is answered
 * 503 then, by the watcher thread (queue_watch), not when a worker frees up at last: with passes of
 * seconds in every worker, that came several times the wait an operator set.
 */
#include "http_internal.h"

#include <stdio.h>
#include <stdlib.h>

#include "base/sysinfo.h"

/* Job c leaves the workers' hands (taken off the queue, or finished): answered with resp (NULL
 * out of memory, answered when resumed), its connection resumed. */
static void job_done(srv_http *h, req_ctx *c, srv_response *resp)
{
    c->done = resp;
    /* free before the reply can reach the client, whose next job then finds this worker idle */
    __atomic_sub_fetch(&h->working, 1, __ATOMIC_RELEASE);
    MHD_resume_connection(c->req.conn);
    __atomic_sub_fetch(&h->busy, 1, __ATOMIC_RELEASE);
}

/* A 503 for a pass that waited waited_ms for a worker (NULL out of memory). */
static srv_response *busy_reply(srv_http *h, req_ctx *c, double waited_ms)
{
    srv_response *resp = malloc(sizeof *resp);
    if (!resp)
        return NULL;
    srv_http_response_init(resp);
    srv_error err = {0};
    srv_error_set(&err, SRV_E_UNAVAILABLE, "",
                  "busy: waited %.0f ms for one of %d workers (--max-inflight); retry shortly",
                  waited_ms, h->nworkers);
    srv_http_error_reply(c, resp, &err);
    return resp;
}

/* Whether job c may be refused for its wait: a pass (a worker route, a layer change, waits its
 * turn: it is no pass, and its client asked for a change) handed over while no worker was idle (one
 * that found a worker idle waited for none, only for it to wake up: never refused, or
 * --queue-wait-ms 0, "no wait", would refuse every one). */
static bool refusable(const req_ctx *c)
{
    return !c->worker_idle && !(c->req.route->flags & SRV_ROUTE_WORKER);
}

/* The watcher: sleeps until the first queued pass's wait ends (or a job is queued), then answers
 * 503 to every queued pass that waited past --queue-wait-ms, and to those whose client left
 * nothing (a job whose client hung up is dropped as srv_http_job_gone drops it). */
static void *queue_watch(void *arg)
{
    srv_http *h = arg;
    const double wait_s = h->cfg.queue_wait_ms / 1e3;
    pthread_mutex_lock(&h->lock);
    while (!h->stopping) {
        const double now = srv_now();
        double next = now + 1.0; /* nothing queued: a new job signals */
        req_ctx *expired = NULL;
        for (req_ctx **p = &h->jobs_head, *prev = NULL; *p;) {
            req_ctx *c = *p;
            if (refusable(c) && now - c->queued_at > wait_s) {
                *p = c->next_job;
                if (h->jobs_tail == c)
                    h->jobs_tail = prev;
                c->next_job = expired;
                expired = c;
                continue;
            }
            if (refusable(c) && c->queued_at + wait_s < next)
                next = c->queued_at + wait_s;
            prev = c;
            p = &c->next_job;
        }
        if (expired) {
            pthread_mutex_unlock(&h->lock);
            while (expired) {
                req_ctx *c = expired;
                expired = c->next_job;
                if (h->hooks.queued)
                    h->hooks.queued(h->hooks.ctx, -1);
                if (srv_request_gone(&c->req)) {
                    c->cancelled = true;
                    job_done(h, c, NULL);
                } else {
                    job_done(h, c, busy_reply(h, c, (srv_now() - c->queued_at) * 1e3));
                }
            }
            pthread_mutex_lock(&h->lock);
            continue;
        }
        /* the deadline on the monotonic clock (the wall clock may step) */
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        const double d = next - now + 0.001; /* just past it */
        t.tv_sec += (time_t)d;
        t.tv_nsec += (long)((d - (double)(time_t)d) * 1e9);
        if (t.tv_nsec >= 1000000000L) {
            t.tv_sec++;
            t.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&h->watch, &h->lock, &t);
    }
    pthread_mutex_unlock(&h->lock);
    return NULL;
}

static void *worker_main(void *arg)
{
    srv_http *h = arg;
    for (;;) {
        pthread_mutex_lock(&h->lock);
        while (!h->jobs_head && !h->stopping)
            pthread_cond_wait(&h->jobs, &h->lock);
        req_ctx *c = h->jobs_head;
        if (!c) {
            pthread_mutex_unlock(&h->lock);
            return NULL;
        }
        h->jobs_head = c->next_job;
        if (!h->jobs_head)
            h->jobs_tail = NULL;
        pthread_mutex_unlock(&h->lock);
        if (h->hooks.queued)
            h->hooks.queued(h->hooks.ctx, -1);

        if (srv_request_gone(&c->req)) { /* its client hung up while it waited: drop it */
            c->cancelled = true;
            job_done(h, c, NULL);
            continue;
        }
        /* Every worker was busy for longer than a pass may wait for a slot (the watcher came
         * just too late): the daemon is over capacity; say so rather than let the queue grow. */
        const double waited_ms = (srv_now() - c->queued_at) * 1e3;
        if (refusable(c) && waited_ms > h->cfg.queue_wait_ms) {
            job_done(h, c, busy_reply(h, c, waited_ms));
            continue;
        }
        srv_response *resp = malloc(sizeof *resp);
        if (resp) {
            srv_http_response_init(resp);
            srv_http_dispatch(c, resp);
        }
        job_done(h, c, resp);
    }
}

int srv_http_workers_start(srv_http *h)
{
    h->workers = calloc((size_t)(h->cfg.workers > 0 ? h->cfg.workers : 1), sizeof *h->workers);
    if (!h->workers)
        return -1;
    for (; h->nworkers < h->cfg.workers; h->nworkers++) {
        if (pthread_create(&h->workers[h->nworkers], NULL, worker_main, h) != 0)
            break;
        pthread_setname_np(h->workers[h->nworkers], "attnd-worker"); /* top -H, perf */
    }
    if (h->nworkers > 0 && pthread_create(&h->watcher, NULL, queue_watch, h) == 0) {
        h->watching = true;
        pthread_setname_np(h->watcher, "attnd-queue");
    }
    return 0;
}

bool srv_http_offload(req_ctx *c)
{
    srv_http *h = c->h;
    pthread_mutex_lock(&h->lock);
    if (h->nworkers == 0 || h->stopping) { /* stopping: run it here, nothing may stay suspended */
        pthread_mutex_unlock(&h->lock);
        return false;
    }
    c->offloaded = true;
    __atomic_add_fetch(&h->busy, 1, __ATOMIC_RELAXED);
    /* no more jobs in the workers' hands than workers, this one included: one is idle for it */
    c->worker_idle = __atomic_add_fetch(&h->working, 1, __ATOMIC_ACQUIRE) <= h->nworkers;
    MHD_suspend_connection(c->req.conn);
    c->next_job = NULL;
    c->queued_at = srv_now();
    if (h->jobs_tail)
        h->jobs_tail->next_job = c;
    else
        h->jobs_head = c;
    h->jobs_tail = c;
    if (h->hooks.queued) /* under the lock: counted before a worker can take it */
        h->hooks.queued(h->hooks.ctx, 1);
    pthread_cond_signal(&h->jobs);
    if (!c->worker_idle) /* it may wait: the watcher learns its deadline */
        pthread_cond_signal(&h->watch);
    pthread_mutex_unlock(&h->lock);
    return true;
}

int srv_http_busy(const srv_http *h)
{
    return __atomic_load_n(&h->busy, __ATOMIC_ACQUIRE);
}

void srv_http_workers_stop(srv_http *h)
{
    pthread_mutex_lock(&h->lock);
    h->stopping = true;
    pthread_cond_broadcast(&h->jobs);
    pthread_cond_signal(&h->watch);
    pthread_mutex_unlock(&h->lock);
    if (h->watching)
        pthread_join(h->watcher, NULL);
    h->watching = false;
    for (int i = 0; i < h->nworkers; i++)
        pthread_join(h->workers[i], NULL);
    free(h->workers);
    h->workers = NULL;
    h->nworkers = 0;
}

void srv_http_job_gone(void *cls, struct MHD_Connection *conn)
{
    srv_http *h = cls;
    req_ctx *found = NULL;
    pthread_mutex_lock(&h->lock);
    /* only a queued job is suspended for sure: its conn cannot have closed meanwhile */
    for (req_ctx **p = &h->jobs_head, *prev = NULL; *p; prev = *p, p = &(*p)->next_job) {
        req_ctx *c = *p;
        if (c->req.conn == conn && srv_request_gone(&c->req)) {
            *p = c->next_job;
            if (h->jobs_tail == c)
                h->jobs_tail = prev;
            found = c;
            break;
        }
    }
    pthread_mutex_unlock(&h->lock);
    if (found) {
        if (h->hooks.queued)
            h->hooks.queued(h->hooks.ctx, -1);
        found->cancelled = true;
        job_done(h, found, NULL);
    }
}
