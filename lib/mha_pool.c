/*
 * mha_pool.c - the engine's thread pool: a parallel-for in which the calling thread takes part.
 *
 * Design: the pool keeps a queue of running jobs (one per mha_pool_run call; several threads may
 * call at once). A job hands out task indices through an atomic counter; whoever is idle (a worker,
 * or the caller itself) claims the next index. Workers sleep on a condition variable when no job
 * has tasks left, so an idle pool takes no CPU. A job lives on its caller's stack; the caller
 * leaves only when every task is done and no worker still holds the job.
 *
 * Both waits spin a little before they sleep (SPIN_NS): a worker for the next job, the caller for
 * the workers' last tasks. A pass runs three or more parallel phases in a row, and waking a
 * sleeping thread took 25-45 µs a phase on a 2-vCPU VM (the waker's signal, the other vCPU out of
 * its idle state, the scheduler): about 9% of a 1.6 ms pass on two threads. A thread that spins
 * finds the next phase in well under a microsecond. The spin is bounded, so an idle pool still
 * sleeps: at most SPIN_NS of one core after each phase.
 */
#include "mha_internal.h"

#include <cblas.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SPIN_NS 100000 /* how long a wait spins before it sleeps: 100 µs */

typedef struct job {
    mha_task_fn fn;
    void *arg;
    int64_t ntasks;
    _Atomic int64_t next; /* next task index to hand out                         */
    int64_t done;         /* tasks finished (written under pool->lock, atomically) */
    int holders;          /* workers inside this job (the same)                  */
    int slots;            /* slots handed out; the caller has slot 0             */
    int max_slots;        /* threads that may take part (the caller included)    */
    struct job *prev, *next_job;
} job;

struct mha_pool {
    int threads; /* caller + workers                                    */
    int nworkers;
    pthread_t *workers;
    pthread_mutex_t lock;
    pthread_cond_t work;     /* a job was queued, or stop                           */
    pthread_cond_t finished; /* some job's tasks all finished                       */
    job *head, *tail;        /* jobs with tasks possibly left                       */
    uint64_t queued;         /* jobs ever queued (written under lock, atomically)   */
    bool stop;
    mha_scratch cache; /* a pass's scratch kept for the next (under lock)     */
};

#define CACHE_MAX ((size_t)256 << 20)

static void unlink_job(mha_pool *pool, job *j)
{
    if (j->prev)
        j->prev->next_job = j->next_job;
    else if (pool->head == j)
        pool->head = j->next_job;
    else
        return; /* not queued */
    if (j->next_job)
        j->next_job->prev = j->prev;
    else
        pool->tail = j->prev;
    j->prev = j->next_job = NULL;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Spins up to SPIN_NS until done(arg) is true; returns whether it became true. Reads the clock
 * once every 64 rounds (a pause is tens of cycles). */
static bool spin_until(bool (*done)(const void *), const void *arg)
{
    const uint64_t t0 = now_ns();
    for (unsigned i = 1;; i++) {
        if (done(arg))
            return true;
        cpu_relax();
        if (i % 64 == 0 && now_ns() - t0 > SPIN_NS)
            return done(arg);
    }
}

typedef struct queued_since {
    const mha_pool *pool;
    uint64_t seen;
} queued_since;

static bool job_queued(const void *arg)
{
    const queued_since *q = arg;
    return __atomic_load_n(&q->pool->queued, __ATOMIC_ACQUIRE) != q->seen ||
           __atomic_load_n(&q->pool->stop, __ATOMIC_ACQUIRE);
}

static bool job_finished(const void *arg)
{
    const job *j = arg;
    return __atomic_load_n(&j->done, __ATOMIC_ACQUIRE) == j->ntasks &&
           __atomic_load_n(&j->holders, __ATOMIC_ACQUIRE) == 0;
}

/* Runs tasks of j until none are left; returns how many this thread ran. */
static int64_t run_tasks(job *j, int slot)
{
    int64_t ran = 0;
    for (;;) {
        int64_t t = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (t >= j->ntasks)
            return ran;
        j->fn(j->arg, t, slot);
        ran++;
    }
}

static void *worker_main(void *arg)
{
    mha_pool *pool = arg;
    bool spun = false; /* spun since the last job, and found none: sleep */
    pthread_mutex_lock(&pool->lock);
    for (;;) {
        /* Drop exhausted jobs from the front; take the first one with tasks left. */
        job *j = pool->head;
        while (j && atomic_load_explicit(&j->next, memory_order_relaxed) >= j->ntasks) {
            job *nx = j->next_job;
            unlink_job(pool, j);
            j = nx;
        }
        if (!j) {
            if (pool->stop)
                break;
            if (spun) {
                pthread_cond_wait(&pool->work, &pool->lock);
                spun = false;
                continue;
            }
            const queued_since q = {pool, pool->queued};
            pthread_mutex_unlock(&pool->lock);
            spin_until(job_queued, &q); /* then look again under the lock: no wake-up is lost */
            pthread_mutex_lock(&pool->lock);
            spun = true;
            continue;
        }
        spun = false;
        if (j->slots >= j->max_slots) { /* as many threads as it may have: no more joins */
            unlink_job(pool, j);
            continue;
        }
        int slot = j->slots++;
        __atomic_add_fetch(&j->holders, 1, __ATOMIC_RELAXED);
        pthread_mutex_unlock(&pool->lock);
        int64_t ran = run_tasks(j, slot);
        pthread_mutex_lock(&pool->lock);
        __atomic_add_fetch(&j->done, ran, __ATOMIC_RELEASE);
        __atomic_sub_fetch(&j->holders, 1, __ATOMIC_RELEASE);
        unlink_job(pool, j);
        if (j->done == j->ntasks && j->holders == 0)
            pthread_cond_broadcast(&pool->finished);
    }
    pthread_mutex_unlock(&pool->lock);
    return NULL;
}

mha_pool *mha_pool_create(int threads, mha_error *err)
{
    if (threads < 1 || threads > MHA_POOL_MAX_THREADS) {
        mha_fail(err, MHA_ERR_CONFIG, "threads", "a pool needs 1 to %d threads, got %d",
                 MHA_POOL_MAX_THREADS, threads);
        return NULL;
    }
    mha_pool *pool = calloc(1, sizeof *pool);
    if (!pool) {
        mha_fail(err, MHA_ERR_NOMEM, "threads", "out of memory creating a pool");
        return NULL;
    }
    pool->threads = threads;
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->work, NULL);
    pthread_cond_init(&pool->finished, NULL);
    if (threads > 1) {
        pool->workers = calloc((size_t)threads - 1, sizeof *pool->workers);
        if (!pool->workers) {
            mha_pool_free(pool);
            mha_fail(err, MHA_ERR_NOMEM, "threads", "out of memory creating a pool");
            return NULL;
        }
    }
    for (int i = 0; i < threads - 1; i++) {
        if (pthread_create(&pool->workers[i], NULL, worker_main, pool) == 0) {
            pthread_setname_np(pool->workers[i], "mha-pool"); /* as top -H and perf show it */
        } else {
            mha_pool_free(pool);
            mha_fail(err, MHA_ERR_NOMEM, "threads", "could not start pool thread %d of %d", i + 1,
                     threads - 1);
            return NULL;
        }
        pool->nworkers++;
    }
    return pool;
}

void mha_pool_free(mha_pool *pool)
{
    if (!pool)
        return;
    pthread_mutex_lock(&pool->lock);
    __atomic_store_n(&pool->stop, true, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&pool->work);
    pthread_mutex_unlock(&pool->lock);
    for (int i = 0; i < pool->nworkers; i++)
        pthread_join(pool->workers[i], NULL);
    free(pool->workers);
    mha_scratch_free(&pool->cache);
    pthread_cond_destroy(&pool->work);
    pthread_cond_destroy(&pool->finished);
    pthread_mutex_destroy(&pool->lock);
    free(pool);
}

int mha_pool_threads(const mha_pool *pool)
{
    return pool ? pool->threads : 1;
}

void *mha_pool_scratch_get(mha_pool *pool, mha_scratch *s, size_t bytes)
{
    if (pool) {
        pthread_mutex_lock(&pool->lock);
        bool fits = pool->cache.ptr && pool->cache.bytes >= bytes;
        if (fits) {
            *s = pool->cache;
            memset(&pool->cache, 0, sizeof pool->cache);
        }
        pthread_mutex_unlock(&pool->lock);
        if (fits) {
            mha_scratch_poison(s->ptr, bytes); /* the pass before left its numbers in it */
            return s->ptr;
        }
    }
    return mha_scratch_alloc(s, bytes);
}

void mha_pool_scratch_put(mha_pool *pool, mha_scratch *s)
{
    if (pool && s->ptr && s->bytes <= CACHE_MAX) {
        mha_scratch old = {0};
        pthread_mutex_lock(&pool->lock);
        if (!pool->cache.ptr || pool->cache.bytes < s->bytes) { /* keep the larger one */
            old = pool->cache;
            pool->cache = *s;
            memset(s, 0, sizeof *s);
        }
        pthread_mutex_unlock(&pool->lock);
        mha_scratch_free(&old); /* outside the lock: munmap can take a while */
    }
    mha_scratch_free(s);
}

void mha_blas_set_threads(int threads)
{
    openblas_set_num_threads(threads < 1 ? 1 : threads);
}

void mha_pool_run(mha_pool *pool, int64_t ntasks, mha_task_fn fn, void *arg)
{
    mha_pool_run_limit(pool, ntasks, fn, arg, pool ? pool->threads : 1);
}

void mha_pool_run_limit(mha_pool *pool, int64_t ntasks, mha_task_fn fn, void *arg, int max_threads)
{
    if (ntasks <= 0)
        return;
    if (pool && max_threads > pool->threads)
        max_threads = pool->threads;
    if (!pool || max_threads <= 1 || ntasks == 1) {
        for (int64_t t = 0; t < ntasks; t++)
            fn(arg, t, 0);
        return;
    }
    job j;
    memset(&j, 0, sizeof j);
    j.fn = fn;
    j.arg = arg;
    j.ntasks = ntasks;
    atomic_init(&j.next, 0);
    j.slots = 1; /* the caller runs as slot 0 */
    j.max_slots = max_threads;

    pthread_mutex_lock(&pool->lock);
    j.prev = pool->tail;
    if (pool->tail)
        pool->tail->next_job = &j;
    else
        pool->head = &j;
    pool->tail = &j;
    __atomic_add_fetch(&pool->queued, 1, __ATOMIC_RELEASE);
    const int64_t helpers = ntasks - 1 < max_threads - 1 ? ntasks - 1 : max_threads - 1;
    if (helpers >= pool->nworkers)
        pthread_cond_broadcast(&pool->work);
    else
        for (int64_t i = 0; i < helpers; i++)
            pthread_cond_signal(&pool->work);
    pthread_mutex_unlock(&pool->lock);

    int64_t ran = run_tasks(&j, 0);

    pthread_mutex_lock(&pool->lock);
    unlink_job(pool, &j); /* no worker may join it any more */
    __atomic_add_fetch(&j.done, ran, __ATOMIC_RELEASE);
    if (!job_finished(&j)) { /* a worker still runs a task: spin a little before sleeping */
        pthread_mutex_unlock(&pool->lock);
        spin_until(job_finished, &j);
        pthread_mutex_lock(&pool->lock);
    }
    while (!job_finished(&j))
        pthread_cond_wait(&pool->finished, &pool->lock);
    pthread_mutex_unlock(&pool->lock);
}
