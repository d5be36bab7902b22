/*
 * sysinfo.c - the time, the cores and the memory limit (see sysinfo.h).
 */
#include "sysinfo.h"

#include <inttypes.h>
#include <sched.h>
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

/* Cores (rounded up) a cgroup v2 cpu.max file allows ("quota period"; "max": none), or -1. */
static int cpu_max_cores(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char q[32] = "";
    long long quota = -1, period = -1;
    if (fscanf(f, "%31s %lld", q, &period) != 2 || sscanf(q, "%lld", &quota) != 1)
        quota = -1;
    fclose(f);
    if (quota <= 0 || period <= 0)
        return -1;
    const long long n = (quota + period - 1) / period;
    return n > 4096 ? 4096 : (int)n;
}

int srv_cgroup_cpu_cores(const char *root, const char *proc_cgroup)
{
    FILE *f = fopen(proc_cgroup, "r");
    if (!f)
        return -1;
    char line[4096], dir[4200] = "";
    const size_t base = strlen(root);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "0::", 3) == 0) { /* the unified hierarchy's path */
            line[strcspn(line, "\n")] = '\0';
            snprintf(dir, sizeof dir, "%s%s", root, strcmp(line + 3, "/") ? line + 3 : "");
            break;
        }
    fclose(f);
    int best = -1;
    while (dir[0] && strlen(dir) >= base && !strstr(dir, "/..")) {
        char path[4300];
        snprintf(path, sizeof path, "%s/cpu.max", dir);
        const int n = cpu_max_cores(path);
        if (n > 0 && (best < 0 || n < best))
            best = n;
        char *slash = strrchr(dir, '/');
        if (strlen(dir) == base || !slash)
            break;
        *slash = '\0'; /* the parent */
    }
    return best;
}

/* The CPU time the cgroup may use, in cores rounded up (cgroup v2 cpu.max "quota period" of the
 * process's cgroup and its parents, else v1 cpu.cfs_quota_us / cpu.cfs_period_us; a container's
 * --cpus, a pod's CPU limit, a systemd CPUQuota=); -1: no limit. */
static int cgroup_cores(void)
{
    int own = srv_cgroup_cpu_cores("/sys/fs/cgroup", "/proc/self/cgroup");
    if (own < 0) /* no unified path named: the root's own file, as a container sees it */
        own = cpu_max_cores("/sys/fs/cgroup/cpu.max");
    if (own > 0)
        return own;
    long long quota = -1, period = -1;
    FILE *f;
    if ((f = fopen("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "r"))) {
        if (fscanf(f, "%lld", &quota) != 1)
            quota = -1;
        fclose(f);
        if ((f = fopen("/sys/fs/cgroup/cpu/cpu.cfs_period_us", "r"))) {
            if (fscanf(f, "%lld", &period) != 1)
                period = -1;
            fclose(f);
        }
    }
    if (quota <= 0 || period <= 0)
        return -1;
    long long n = (quota + period - 1) / period;
    return n > 4096 ? 4096 : (int)n;
}

/* Computed once: the files are read at start, not per request. */
static int cores_once(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0 &&
        (n < 1 || CPU_COUNT(&set) < n))
        n = CPU_COUNT(&set); /* taskset, a cpuset, docker --cpuset-cpus */
    const int cg = cgroup_cores();
    if (cg > 0 && (n < 1 || cg < n))
        n = cg;
    return n < 1 ? 1 : (int)n;
}

int srv_ncores(void)
{
    static int cached; /* 0: not yet */
    int n = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (!n) {
        n = cores_once();
        __atomic_store_n(&cached, n, __ATOMIC_RELAXED);
    }
    return n;
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
