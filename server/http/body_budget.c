/*
 * body_budget.c - the bytes of request bodies held at once, in all and per client address (see
 * body_budget.h).
 *
 * The shares: an open-addressing table (linear probing, twice the capacity, a power of two) of the
 * addresses that hold bytes now; an address is dropped (backward-shift deletion, no tombstones) when
 * it holds none.
 */
#include "body_budget.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>

#include "base/sysinfo.h"

int64_t srv_body_budget_default(int64_t max_body_bytes)
{
    int64_t mem = srv_memory_limit_bytes();
    int64_t budget = mem > 0 ? mem / 2 : INT64_C(1) << 30;
    return budget < max_body_bytes ? max_body_bytes : budget;
}

bool srv_body_budget_take(srv_body_budget *b, int64_t bytes)
{
    int64_t held = __atomic_load_n(&b->held, __ATOMIC_RELAXED);
    do {
        if (bytes > b->limit - held)
            return false;
    } while (!__atomic_compare_exchange_n(&b->held, &held, held + bytes, true, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED));
    return true;
}

void srv_body_budget_give(srv_body_budget *b, int64_t bytes)
{
    __atomic_sub_fetch(&b->held, bytes, __ATOMIC_RELAXED);
}

int64_t srv_body_budget_held(const srv_body_budget *b)
{
    return __atomic_load_n(&b->held, __ATOMIC_RELAXED);
}

/* ---------------------------------------------------------------------------------------------- */
/* Shares per client address                                                                      */

typedef struct slot {
    srv_body_client who;
    int64_t held; /* 0: the slot is free */
} slot;

struct srv_body_clients {
    pthread_mutex_t lock;
    size_t mask; /* slots - 1 */
    slot *slots;
};

void srv_body_client_of(srv_body_client *out, const struct sockaddr *addr)
{
    static const unsigned char v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    memset(out, 0, sizeof *out);
    if (addr && addr->sa_family == AF_INET) {
        out->key[0] = 4;
        memcpy(out->key + 1, &((const struct sockaddr_in *)addr)->sin_addr, 4);
    } else if (addr && addr->sa_family == AF_INET6) {
        const unsigned char *a = ((const struct sockaddr_in6 *)addr)->sin6_addr.s6_addr;
        if (memcmp(a, v4mapped, 12) == 0) {
            out->key[0] = 4;
            memcpy(out->key + 1, a + 12, 4);
        } else {
            out->key[0] = 6;
            memcpy(out->key + 1, a, 8); /* the /64 */
        }
    }
}

srv_body_clients *srv_body_clients_create(int capacity)
{
    srv_body_clients *cl = calloc(1, sizeof *cl);
    size_t n = 16;
    while (n < 2 * (size_t)(capacity > 0 ? capacity : 1))
        n *= 2;
    if (cl)
        cl->slots = calloc(n, sizeof *cl->slots);
    if (!cl || !cl->slots) {
        free(cl);
        return NULL;
    }
    cl->mask = n - 1;
    pthread_mutex_init(&cl->lock, NULL);
    return cl;
}

void srv_body_clients_free(srv_body_clients *cl)
{
    if (!cl)
        return;
    pthread_mutex_destroy(&cl->lock);
    free(cl->slots);
    free(cl);
}

static size_t hash(const srv_body_client *who)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < sizeof who->key; i++)
        h = (h ^ who->key[i]) * 1099511628211ull;
    return (size_t)h;
}

/* The slot of who, or of the free slot where it would go (lock held). NULL when the table is full,
 * which cannot happen with capacity >= the connections open. */
static slot *find(srv_body_clients *cl, const srv_body_client *who)
{
    for (size_t i = hash(who), n = 0; n <= cl->mask; i++, n++) {
        slot *s = &cl->slots[i & cl->mask];
        if (!s->held || memcmp(&s->who, who, sizeof *who) == 0)
            return s;
    }
    return NULL;
}

/* Frees slot s (its held is 0), moving back the slots after it whose probe passed it. */
static void drop(srv_body_clients *cl, slot *s)
{
    size_t i = (size_t)(s - cl->slots);
    for (size_t j = (i + 1) & cl->mask; cl->slots[j].held; j = (j + 1) & cl->mask) {
        size_t home = hash(&cl->slots[j].who) & cl->mask;
        /* slot j may move to i when i lies on its probe path: between home and j, cyclically */
        if (((j - home) & cl->mask) >= ((j - i) & cl->mask)) {
            cl->slots[i] = cl->slots[j];
            i = j;
        }
    }
    memset(&cl->slots[i], 0, sizeof cl->slots[i]);
}

srv_body_take_result srv_body_take(srv_body_budget *b, srv_body_clients *cl,
                                   const srv_body_client *who, int64_t bytes)
{
    pthread_mutex_lock(&cl->lock);
    slot *s = find(cl, who);
    int64_t mine = s ? s->held : 0;
    srv_body_take_result r = SRV_BODY_TAKEN;
    /* others hold bytes when the total is more than this address's own */
    if (!s)
        r = SRV_BODY_FULL;
    else if (srv_body_budget_held(b) > mine && mine + bytes > b->limit / SRV_BODY_CLIENT_SHARE)
        r = SRV_BODY_OVER_SHARE;
    else if (!srv_body_budget_take(b, bytes)) {
        r = SRV_BODY_FULL;
        if (mine + bytes <= b->limit / SRV_BODY_CLIENT_SHARE) { /* kept from its share */
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            __atomic_store_n(&b->refused_ms, (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000,
                             __ATOMIC_RELAXED);
        }
    }
    if (r == SRV_BODY_TAKEN && bytes > 0) {
        s->who = *who;
        s->held += bytes;
    }
    pthread_mutex_unlock(&cl->lock);
    return r;
}

void srv_body_give(srv_body_budget *b, srv_body_clients *cl, const srv_body_client *who,
                   int64_t bytes)
{
    if (bytes <= 0)
        return;
    pthread_mutex_lock(&cl->lock);
    slot *s = find(cl, who);
    if (s && s->held) {
        s->held -= bytes < s->held ? bytes : s->held;
        if (!s->held)
            drop(cl, s);
    }
    srv_body_budget_give(b, bytes);
    pthread_mutex_unlock(&cl->lock);
}

int64_t srv_body_client_held(srv_body_clients *cl, const srv_body_client *who)
{
    pthread_mutex_lock(&cl->lock);
    slot *s = find(cl, who);
    int64_t held = s ? s->held : 0;
    pthread_mutex_unlock(&cl->lock);
    return held;
}

bool srv_body_budget_contended(const srv_body_budget *b, int64_t within_ms)
{
    const int64_t at = __atomic_load_n(&b->refused_ms, __ATOMIC_RELAXED);
    if (!at)
        return false;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 - at <= within_ms;
}
