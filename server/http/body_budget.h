/*
 * body_budget.h - how many bytes of request bodies the daemon holds at once, all connections
 * together (--max-body-memory).
 *
 * Why: --max-body-bytes caps one body, but a body is held in memory from its first byte until its
 * request is answered, and requests wait their turn for the engine (--max-inflight) with their
 * bodies in hand. Enough clients each sending a large body at once would grow the daemon past the
 * machine's (or the container's) memory and get it killed, layers and all. With a budget, a body
 * whose first step does not fit is refused with 503 + Retry-After before it is read, one that grows
 * past it later gets the 503 once it has been sent (the rest is read and dropped), and the daemon
 * keeps serving the others.
 *
 * A body counts from its bytes as they arrive, reserved a step ahead (request.c), until its request
 * is complete, whether it is chunked or has a Content-Length: a client that declares 16 MiB and
 * sends 4 KB/s holds what it sent, not what it declared. Decoded tensors and replies are not counted:
 * they are bounded per pass by --max-tensor-elements and in number by --max-inflight.
 *
 * One client address may hold at most 1/SRV_BODY_CLIENT_SHARE of the budget while bodies from
 * other addresses are held too (srv_body_clients): many slow connections from one place cannot
 * take it all from everyone else. Alone, an address may use all of it (behind a proxy every
 * client has the proxy's address); when another address is then refused within its share, the
 * first address's bodies that are not moving at --min-body-rate are cut (deadline.c), so that
 * memory taken while alone is not kept from the others by sending nothing. IPv6 addresses count by their /64, which one client often has
 * whole.
 *
 * Thread-safe: the total is one atomic counter (srv_body_budget_take/give take no lock); the
 * per-address shares are kept under one mutex, taken once per step of a body.
 */
#ifndef ATTND_BODY_BUDGET_H
#define ATTND_BODY_BUDGET_H

#include <stdbool.h>
#include <stdint.h>

typedef struct srv_body_budget {
    int64_t limit; /* bytes; set once before the daemon starts                     */
    int64_t held;  /* bytes reserved by requests now (atomic: __atomic builtins)    */
    int64_t refused_ms; /* monotonic ms of the last refusal (FULL) of an address within its
                         * share, while another held more than its own (atomic): see
                         * srv_body_budget_contended */
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

/* ---------------------------------------------------------------------------------------------- */
/* Shares per client address                                                                      */

#define SRV_BODY_CLIENT_SHARE 4 /* an address holds at most a quarter while others hold some too */

/* Who sent a body: the address family and the address (IPv4 whole, IPv6 its first 64 bits, an
 * IPv4-mapped IPv6 address as IPv4). */
typedef struct srv_body_client {
    unsigned char key[10];
} srv_body_client;

/* The client of a socket address (NULL or an unknown family: one shared "unknown" client). */
struct sockaddr;
void srv_body_client_of(srv_body_client *out, const struct sockaddr *addr);

typedef struct srv_body_clients srv_body_clients;

/* The shares of up to `capacity` addresses holding bodies at once (--max-connections: each holds
 * at least one connection). NULL when out of memory. Free with srv_body_clients_free. */
srv_body_clients *srv_body_clients_create(int capacity);
void srv_body_clients_free(srv_body_clients *cl); /* accepts NULL */

typedef enum srv_body_take_result {
    SRV_BODY_TAKEN = 0,   /* reserved                                                         */
    SRV_BODY_FULL,        /* the budget has no room                                           */
    SRV_BODY_OVER_SHARE,  /* the address would pass its share while others hold bodies too   */
} srv_body_take_result;

/* Reserves `bytes` (>= 0) for client `who` from b, within its share (see the top). Reserves
 * nothing unless it returns SRV_BODY_TAKEN. */
srv_body_take_result srv_body_take(srv_body_budget *b, srv_body_clients *cl,
                                   const srv_body_client *who, int64_t bytes);

/* Gives back `bytes` that srv_body_take reserved for who. */
void srv_body_give(srv_body_budget *b, srv_body_clients *cl, const srv_body_client *who,
                   int64_t bytes);

/* Bytes who holds now (0 when it holds none). */
int64_t srv_body_client_held(srv_body_clients *cl, const srv_body_client *who);

/* Whether an address within its share was refused for a full budget in the last `within_ms`: the
 * share is then being kept from it by addresses over theirs, which took the budget while alone. An
 * address that holds more than its share at such a time, with bodies that barely move, is holding
 * memory the others need (deadline.c cuts such bodies). */
bool srv_body_budget_contended(const srv_body_budget *b, int64_t within_ms);

#endif
