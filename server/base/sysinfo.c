/*
 * sysinfo.c - the time, the cores and the memory limit (see sysinfo.h).
 */
#include "sysinfo.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double srv_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int srv_ncores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)n;
}

/* The first number in the file at path (cgroup limits are one line; "max" means none), or -1. */
static int64_t read_limit_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[64] = "";
    int64_t v = -1;
    if (fgets(line, sizeof line, f) && strncmp(line, "max", 3) != 0 &&
        sscanf(line, "%" SCNd64, &v) != 1)
        v = -1;
    fclose(f);
    return v > 0 ? v : -1;
}

int64_t srv_memory_limit_bytes(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    int64_t ram = pages > 0 && page > 0 ? (int64_t)pages * page : -1;
    /* cgroup v2 first (the unified hierarchy, as containers see it), then v1; v1 reports "no
     * limit" as a huge number, which the min below leaves to RAM */
    int64_t cg = read_limit_file("/sys/fs/cgroup/memory.max");
    if (cg < 0)
        cg = read_limit_file("/sys/fs/cgroup/memory/memory.limit_in_bytes");
    if (cg > 0 && (ram < 0 || cg < ram))
        return cg;
    return ram;
}
