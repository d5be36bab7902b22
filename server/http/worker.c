/*
 * worker.c - the workers that run heavy handlers (routes flagged SRV_ROUTE_HEAVY with large
 * bodies, and every SRV_ROUTE_WORKER one) off the HTTP threads: the connection is suspended while
 * its job waits and runs, so the thread that received it keeps serving its other connections. A
 * job whose client hangs up while it waits leaves the queue at once (srv_http_job_gone), or is
 * dropped when a worker takes it.
 */
#include "http_internal.h"

#include <stdio.h>
#include <stdlib.h>

#include "base/sysinfo.h"

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
            c->done = NULL;
            __atomic_sub_fetch(&h->working, 1, __ATOMIC_RELEASE);
            MHD_resume_connection(c->req.conn);
            __atomic_sub_fetch(&h->busy, 1, __ATOMIC_RELEASE);
            continue;
        }
        srv_response *resp = malloc(sizeof *resp);
        if (resp) {
            srv_http_response_init(resp);
            /* Every worker was busy for longer than a pass may wait for a slot: the daemon is
             * over capacity; say so rather than let the queue grow. A worker route (a layer
             * change) waits its turn instead: it is no pass, and its client asked for a change.
             * A job handed over while a worker was idle waited for none, only for that worker to
             * wake up: never refused, or --queue-wait-ms 0 ("no wait") would refuse every one. */
            double waited_ms = (srv_now() - c->queued_at) * 1e3;
            if (!c->worker_idle && waited_ms > h->cfg.queue_wait_ms &&
                !(c->req.route->flags & SRV_ROUTE_WORKER)) {
                srv_error err = {0};
                srv_error_set(&err, SRV_E_UNAVAILABLE, "",
                              "busy: waited %.0f ms for one of %d workers (--max-inflight); retry "
                              "shortly",
                              waited_ms, h->nworkers);
                srv_http_error_reply(c, resp, &err);
            } else {
                srv_http_dispatch(c, resp);
            }
        }
        c->done = resp; /* NULL: out of memory, answered when resumed */
        /* free before the reply can reach the client, whose next job then finds this worker idle */
        __atomic_sub_fetch(&h->working, 1, __ATOMIC_RELEASE);
        MHD_resume_connection(c->req.conn);
        __atomic_sub_fetch(&h->busy, 1, __ATOMIC_RELEASE);
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
    pthread_mutex_unlock(&h->lock);
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
        __atomic_sub_fetch(&h->working, 1, __ATOMIC_RELEASE);
        found->cancelled = true;
        found->done = NULL;
        MHD_resume_connection(conn);
        __atomic_sub_fetch(&h->busy, 1, __ATOMIC_RELEASE);
    }
}
