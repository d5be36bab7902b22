/*
 * bigbuf.h - a small cache of large malloc'd blocks (request bodies, response texts), kept between
 * requests.
 *
 * Why: a block of tens of MB comes from mmap and goes back with munmap when freed, so the next
 * request of that size faults every page in again. On the virtual machines attnd runs on a page
 * fault costs tens of microseconds: an L request (30 MB in, 40 MB out) spent most of its time
 * faulting. Blocks kept here stay mapped and faulted, so the next large request reuses them.
 *
 * Blocks are ordinary malloc'd memory (srv_buf may realloc them, free() would be correct too).
 * Arrays (srv_bigbuf_array_alloc) are mapped memory with a header, given back only through this
 * file. The cache keeps at most SRV_BIGBUF_MAX_BLOCKS blocks, SRV_BIGBUF_MAX_ARRAYS arrays and
 * SRV_BIGBUF_MAX_BYTES bytes of both; thread-safe.
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

/* Frees every cached block and array (tests; the daemon keeps them for its life). */
void srv_bigbuf_drop_all(void);

/* Arrays of numbers: decoded input tensors, the engine's outputs. 64-byte aligned (the engine's
 * non-temporal stores need rows on cache lines). From SRV_BIGBUF_MIN_BYTES on they are mapped
 * directly and cached here when freed; from SRV_BIGBUF_HUGE_BYTES on they are 2 MB aligned and
 * marked for transparent huge pages. Why: an L request's output (12.6 MB) faulted in afresh cost
 * 0-15 ms of an 80 ms pass on the development VM, depending on where malloc placed the block;
 * writing 268 MB of XL per-head weights through 4 KB pages cost +15-30% (TLB misses).
 * Returns NULL when out of memory. Free only with srv_bigbuf_array_free (accepts NULL). */
#define SRV_BIGBUF_HUGE_BYTES ((size_t)4 << 20)
#define SRV_BIGBUF_MAX_ARRAYS 8
void *srv_bigbuf_array_alloc(size_t bytes);
void srv_bigbuf_array_free(void *p);

#endif
