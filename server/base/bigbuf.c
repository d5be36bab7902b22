/*
 * bigbuf.c - the cache of large blocks (see bigbuf.h). A handful of blocks under one mutex: taken
 * and given back once per large request, never on a hot per-number path.
 */
#include "bigbuf.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    void *data;
    size_t cap;
} blocks[SRV_BIGBUF_MAX_BLOCKS];
static int nblocks;
static void *arrays[SRV_BIGBUF_MAX_ARRAYS]; /* payloads of cached arrays (their heads say the size) */
static int narrays;
static size_t held; /* bytes of blocks and arrays in the cache */

#define HUGE_PAGE ((size_t)2 << 20)

/* Marks the whole 2 MB pages inside a fresh block of `cap` bytes at p for transparent huge pages,
 * before anything touches them. Why: a request's first 16.8 MB body or reply faulted in through
 * 4 KB pages costs 25-75 ms on the development VM (4,100 faults of ~10 us); through 2 MB pages it
 * is a few dozen faults. Only a hint: refused, the block keeps 4 KB pages. Blocks stay malloc's
 * (glibc maps blocks this large on their own, so the advice stays with this block). */
static void hint_huge_pages(void *p, size_t cap)
{
#ifdef MADV_HUGEPAGE
    if (cap < SRV_BIGBUF_HUGE_BYTES)
        return;
    uintptr_t first = ((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
    uintptr_t end = ((uintptr_t)p + cap) & ~(uintptr_t)(HUGE_PAGE - 1);
    if (end > first)
        madvise((void *)first, end - first, MADV_HUGEPAGE);
#else
    (void)p;
    (void)cap;
#endif
}

int srv_bigbuf_reserve(srv_buf *b, size_t bytes)
{
    if (bytes < SRV_BIGBUF_MIN_BYTES)
        return srv_buf_reserve(b, bytes);
    void *data = NULL;
    size_t cap = 0;
    pthread_mutex_lock(&lock);
    int best = -1;
    for (int i = 0; i < nblocks; i++) /* the smallest block that fits */
        if (blocks[i].cap > bytes && (best < 0 || blocks[i].cap < blocks[best].cap))
            best = i;
    if (best >= 0) {
        data = blocks[best].data;
        cap = blocks[best].cap;
        held -= cap;
        blocks[best] = blocks[--nblocks];
    }
    pthread_mutex_unlock(&lock);
    if (!data) {
        cap = bytes + 1;
        data = malloc(cap);
        if (!data)
            return -1;
        hint_huge_pages(data, cap);
    }
    srv_buf_free(b);
    b->data = data;
    b->cap = cap;
    b->len = 0;
    b->failed = false;
    return 0;
}

void srv_bigbuf_release(void *data, size_t cap)
{
    if (!data)
        return;
    if (cap >= SRV_BIGBUF_MIN_BYTES) {
        pthread_mutex_lock(&lock);
        if (nblocks == SRV_BIGBUF_MAX_BLOCKS || held + cap > SRV_BIGBUF_MAX_BYTES) {
            /* full: keep the larger blocks, which cost more to fault in again */
            int small = 0;
            for (int i = 1; i < nblocks; i++)
                if (blocks[i].cap < blocks[small].cap)
                    small = i;
            if (nblocks && blocks[small].cap < cap && held - blocks[small].cap + cap <= SRV_BIGBUF_MAX_BYTES) {
                void *evict = blocks[small].data;
                held -= blocks[small].cap;
                blocks[small].data = data;
                blocks[small].cap = cap;
                held += cap;
                data = evict;
            }
        } else {
            blocks[nblocks].data = data;
            blocks[nblocks].cap = cap;
            nblocks++;
            held += cap;
            data = NULL;
        }
        pthread_mutex_unlock(&lock);
    }
    free(data);
}

void srv_bigbuf_free(srv_buf *b)
{
    srv_bigbuf_release(b->data, b->cap);
    b->data = NULL;
    b->len = b->cap = 0;
    b->failed = false;
}

/* ---------------------------------------------------------------------------------------------- */
/* Arrays                                                                                         */

/* The 64 bytes before an array's payload. */
typedef struct array_head {
    void *base;      /* what malloc or mmap returned                       */
    size_t map_size; /* bytes mapped at base; 0: base came from malloc     */
    size_t cap;      /* payload bytes                                      */
    char pad[64 - sizeof(void *) - 2 * sizeof(size_t)];
} array_head;
_Static_assert(sizeof(array_head) == 64, "the head keeps the payload on a cache line");

static array_head *head_of(void *payload)
{
    return (array_head *)payload - 1;
}

static void array_unmap(void *payload)
{
    array_head *h = head_of(payload);
    if (h->map_size)
        munmap(h->base, h->map_size);
    else
        free(h->base);
}

/* A fresh array of at least `bytes` bytes (see bigbuf.h for the layout). */
static void *array_new(size_t bytes)
{
    void *base = NULL, *payload;
    size_t map_size = 0, cap = bytes;
    if (bytes < SRV_BIGBUF_MIN_BYTES) {
        if (posix_memalign(&base, 64, bytes + sizeof(array_head)) != 0)
            return NULL;
        payload = (char *)base + sizeof(array_head);
    } else {
        bool huge = bytes >= SRV_BIGBUF_HUGE_BYTES;
        size_t unit = huge ? HUGE_PAGE : 4096;
        if (bytes > SIZE_MAX - 2 * HUGE_PAGE)
            return NULL;
        cap = (bytes + unit - 1) / unit * unit;
        map_size = cap + (huge ? HUGE_PAGE : 4096); /* room for the head (and the alignment) */
        base = mmap(NULL, map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (base == MAP_FAILED)
            return NULL;
        uintptr_t first = (uintptr_t)base + sizeof(array_head);
        payload = (void *)((first + unit - 1) & ~(uintptr_t)(unit - 1));
#ifdef MADV_HUGEPAGE
        if (huge)
            madvise(payload, cap, MADV_HUGEPAGE); /* a hint; 4 KB pages when refused */
#endif
    }
    array_head *h = head_of(payload);
    h->base = base;
    h->map_size = map_size;
    h->cap = cap;
    return payload;
}

void *srv_bigbuf_array_alloc(size_t bytes)
{
    if (bytes == 0)
        bytes = 1;
    if (bytes >= SRV_BIGBUF_MIN_BYTES) {
        void *found = NULL;
        pthread_mutex_lock(&lock);
        int best = -1;
        for (int i = 0; i < narrays; i++) /* the smallest array that fits */
            if (head_of(arrays[i])->cap >= bytes &&
                (best < 0 || head_of(arrays[i])->cap < head_of(arrays[best])->cap))
                best = i;
        if (best >= 0) {
            found = arrays[best];
            held -= head_of(found)->cap;
            arrays[best] = arrays[--narrays];
        }
        pthread_mutex_unlock(&lock);
        if (found)
            return found;
    }
    return array_new(bytes);
}

void srv_bigbuf_array_free(void *p)
{
    if (!p)
        return;
    array_head *h = head_of(p);
    if (h->map_size == 0) {
        free(h->base);
        return;
    }
    size_t cap = h->cap;
    pthread_mutex_lock(&lock);
    if (narrays == SRV_BIGBUF_MAX_ARRAYS || held + cap > SRV_BIGBUF_MAX_BYTES) {
        /* full: keep the larger arrays, which cost more to fault in again */
        int small = 0;
        for (int i = 1; i < narrays; i++)
            if (head_of(arrays[i])->cap < head_of(arrays[small])->cap)
                small = i;
        size_t small_cap = narrays ? head_of(arrays[small])->cap : 0;
        if (narrays && small_cap < cap && held - small_cap + cap <= SRV_BIGBUF_MAX_BYTES) {
            void *evict = arrays[small];
            arrays[small] = p;
            held += cap - small_cap;
            p = evict;
        }
    } else {
        arrays[narrays++] = p;
        held += cap;
        p = NULL;
    }
    pthread_mutex_unlock(&lock);
    if (p)
        array_unmap(p); /* outside the lock: munmap can take a while */
}

void srv_bigbuf_drop_all(void)
{
    pthread_mutex_lock(&lock);
    for (int i = 0; i < nblocks; i++)
        free(blocks[i].data);
    for (int i = 0; i < narrays; i++)
        array_unmap(arrays[i]);
    nblocks = narrays = 0;
    held = 0;
    pthread_mutex_unlock(&lock);
}
