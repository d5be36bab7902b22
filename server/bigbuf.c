/*
 * bigbuf.c - the cache of large blocks (see bigbuf.h). A handful of blocks under one mutex: taken
 * and given back once per large request, never on a hot per-number path.
 */
#include "bigbuf.h"

#include <pthread.h>
#include <stdlib.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    void *data;
    size_t cap;
} blocks[SRV_BIGBUF_MAX_BLOCKS];
static int nblocks;
static size_t held;

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

void srv_bigbuf_drop_all(void)
{
    pthread_mutex_lock(&lock);
    for (int i = 0; i < nblocks; i++)
        free(blocks[i].data);
    nblocks = 0;
    held = 0;
    pthread_mutex_unlock(&lock);
}
