/*
 * body_budget.c - the bytes of request bodies held at once (see body_budget.h), and the memory
 * limit its default is derived from.
 */
#include "body_budget.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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
