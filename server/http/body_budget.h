/*
 * body_budget.h - how many bytes of request bodies the daemon holds at once, all connections
 * together (--max-body-memory).
 *
 * Why: --max-body-bytes caps one body, but a body is held in memory from its first byte until its
 * request is answered, and requests wait their turn for the engine (--max-inflight) with their
 * bodies in hand. Enough clients each sending a large body at once would grow the daemon past the
 * machine's (or the container's) memory and get it killed, layers and all. With a budget, a body
 * that does not fit is refused with 503 + Retry-After before it is read (from Content-Length), or
 * as soon as a chunked one grows past it, and the daemon keeps serving the others.
 *
 * A body counts from its headers (its Content-Length, reserved up front) or from its bytes as they
 * arrive (chunked), until its request is complete. Decoded tensors and replies are not counted: they
 * are bounded per pass by --max-tensor-elements and in number by --max-inflight.
 *
 * Thread-safe (one atomic counter); no lock on any path.
 */
#ifndef ATTND_BODY_BUDGET_H
#define ATTND_BODY_BUDGET_H

#include <stdbool.h>
#include <stdint.h>

typedef struct srv_body_budget {
    int64_t limit; /* bytes; set once before the daemon starts                     */
    int64_t held;  /* bytes reserved by requests now (atomic: __atomic builtins)    */
} srv_body_budget;

/* The default --max-body-memory: half of srv_memory_limit_bytes() (base/sysinfo.h) (the other half is for layers,
 * decoded tensors, outputs and the engine), 1 GiB when that is unknown, and never less than
 * max_body_bytes, so that one body of the largest size is always accepted. */
int64_t srv_body_budget_default(int64_t max_body_bytes);

/* Reserves `bytes` (>= 0) when held + bytes stays within the limit: returns true. Otherwise
 * reserves nothing and returns false. */
bool srv_body_budget_take(srv_body_budget *b, int64_t bytes);

/* Gives back `bytes` reserved earlier with srv_body_budget_take. */
void srv_body_budget_give(srv_body_budget *b, int64_t bytes);

/* Bytes reserved now (for /metrics and error messages). */
int64_t srv_body_budget_held(const srv_body_budget *b);

#endif
