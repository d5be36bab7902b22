/*
 * request_id.c - request ids: the client's kept when sane, else a new random one (see request_id.h).
 *
 * New ids come from a per-thread generator (splitmix64 over a counter), seeded once per thread from
 * getrandom: no lock and no system call per request. They need to be unique, not secret.
 */
#include "request_id.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

bool srv_request_id_valid(const char *id)
{
    if (!id || !id[0])
        return false;
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)id; *p; p++, n++) {
        if (n >= SRV_REQUEST_ID_MAX)
            return false;
        bool ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                  strchr("-_.:/+=@", *p) != NULL;
        if (!ok)
            return false;
    }
    return true;
}

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static __thread uint64_t gen_state;
static __thread bool gen_seeded;

static void seed(void)
{
    uint64_t s = 0;
    if (getrandom(&s, sizeof s, GRND_NONBLOCK) != (ssize_t)sizeof s) {
        /* no entropy yet (early boot): time, pid and the state's address still differ per thread */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        s = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ ((uint64_t)getpid() << 48) ^
            (uint64_t)(uintptr_t)&gen_state;
    }
    gen_state = s;
    gen_seeded = true;
}

bool srv_request_id_take(const char *given, char *out)
{
    if (srv_request_id_valid(given)) {
        memcpy(out, given, strlen(given) + 1);
        return true;
    }
    if (!gen_seeded)
        seed();
    uint64_t a = splitmix64(&gen_state), b = splitmix64(&gen_state);
    snprintf(out, SRV_REQUEST_ID_MAX + 1, "%016llx%016llx", (unsigned long long)a,
             (unsigned long long)b);
    return false;
}
