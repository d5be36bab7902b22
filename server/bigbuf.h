/*
 * bigbuf.h - a small cache of large malloc'd blocks (request bodies, response texts), kept between
 * requests.
 *
 * Why: a block of tens of MB comes from mmap and goes back with munmap when freed, so the next
 * request of that size faults every page in again. On the virtual machines attnd runs on a page
 * fault costs tens of microseconds: an L request (30 MB in, 40 MB out) spent most of its time
 * faulting. Blocks kept here stay mapped and faulted, so the next large request reuses them.
 *
 * Blocks are ordinary malloc'd memory (srv_buf may realloc them, free() would be correct too). The
 * cache keeps at most SRV_BIGBUF_MAX_BLOCKS blocks and SRV_BIGBUF_MAX_BYTES bytes; thread-safe.
 */
#ifndef ATTND_BIGBUF_H
#define ATTND_BIGBUF_H

#include <stddef.h>

#include "buf.h"

#define SRV_BIGBUF_MIN_BYTES ((size_t)1 << 20)   /* smaller blocks are left to malloc        */
#define SRV_BIGBUF_MAX_BYTES ((size_t)512 << 20) /* most memory the cache holds while idle   */
#define SRV_BIGBUF_MAX_BLOCKS 6

/* Makes b (empty, as after srv_buf_init) hold at least `bytes` bytes of room, from a cached block
 * when one is large enough, else from malloc. Returns 0, or -1 when out of memory (b unchanged). */
int srv_bigbuf_reserve(srv_buf *b, size_t bytes);

/* Gives a malloc'd block of cap bytes back: cached when it is large and there is room, else freed.
 * Accepts NULL. */
void srv_bigbuf_release(void *data, size_t cap);

/* srv_bigbuf_release of b's memory, then b is empty. */
void srv_bigbuf_free(srv_buf *b);

/* Frees every cached block (tests; the daemon keeps them for its life). */
void srv_bigbuf_drop_all(void);

#endif
