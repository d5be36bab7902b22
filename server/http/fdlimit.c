/*
 * fdlimit.c - the open-files limit: raise the soft limit to the hard one, size connections from it.
 */
#include "fdlimit.h"

#include <sys/resource.h>

static long as_long(rlim_t v)
{
    return v == RLIM_INFINITY || v > (rlim_t)0x7fffffff ? -1 : (long)v;
}

int srv_fdlimit_raise(long *before, long *after)
{
    struct rlimit rl;
    *before = *after = 0;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return -1;
    *before = *after = as_long(rl.rlim_cur);
    if (rl.rlim_cur == rl.rlim_max)
        return 0;
    rlim_t want = rl.rlim_max;
    rl.rlim_cur = want;
    if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
        return -1;
    *after = as_long(want);
    return 0;
}

int srv_fdlimit_default_connections(void)
{
    struct rlimit rl;
    long hard = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? as_long(rl.rlim_max) : 1024;
    long n = hard < 0 ? SRV_FDLIMIT_MAX_DEFAULT_CONNECTIONS : hard - SRV_FDLIMIT_RESERVE;
    if (n > SRV_FDLIMIT_MAX_DEFAULT_CONNECTIONS)
        n = SRV_FDLIMIT_MAX_DEFAULT_CONNECTIONS;
    return n < 16 ? 16 : (int)n;
}
