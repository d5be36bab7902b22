/*
 * test_sysinfo.c - the cores the process may use: the CPU quota of its own cgroup v2 and of its
 * parents (srv_cgroup_cpu_cores on a made-up /sys/fs/cgroup tree and /proc/self/cgroup file), and
 * srv_ncores against the CPU affinity.
 */
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/sysinfo.h"
#include "check.h"
#include "tmpdir.h"

static char root[64];

static void put(const char *rel, const char *text)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* srv_cgroup_cpu_cores of the made-up tree cg and the proc file proc is want (-1: no limit). */
static void expect_cores(const char *cg, const char *proc, int want, const char *what)
{
    const int got = srv_cgroup_cpu_cores(cg, proc);
    CHECK(got == want, "%s: %d (got %d)", what, want, got);
}

static void test_cgroup_quota(void)
{
    char dir[256], proc[256], cg[128];
    snprintf(cg, sizeof cg, "%s", root);
    const char *dirs[] = {"system.slice", "system.slice/attnd.service",
                          "system.slice/attnd.service/inner"};
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
        snprintf(dir, sizeof dir, "%s/%s", root, dirs[i]);
        mkdir(dir, 0700);
    }
    snprintf(proc, sizeof proc, "%s/proc_cgroup", root);

    put("proc_cgroup", "0::/system.slice/attnd.service\n");
    expect_cores(cg, proc, -1, "no cpu.max anywhere: no limit");
    put("cpu.max", "max 100000\n");
    put("system.slice/attnd.service/cpu.max", "150000 100000\n");
    expect_cores(cg, proc, 2, "its own 1.5 cores, rounded up");
    put("system.slice/cpu.max", "100000 100000\n");
    expect_cores(cg, proc, 1, "a parent's smaller quota wins");
    put("proc_cgroup", "12:cpu,cpuacct:/x\n0::/system.slice/attnd.service/inner\n");
    expect_cores(cg, proc, 1, "from a nested cgroup without its own");
    put("proc_cgroup", "0::/\n");
    put("cpu.max", "400000 100000\n");
    expect_cores(cg, proc, 4, "the root's (a container's view)");
    put("proc_cgroup", "0::/../../etc\n");
    expect_cores(cg, proc, -1, "a path out of the root is not followed");
    put("proc_cgroup", "4:cpu:/only-v1\n");
    expect_cores(cg, proc, -1, "no unified hierarchy (v1 is read elsewhere)");
    put("proc_cgroup", "0::/system.slice\n");
    put("system.slice/cpu.max", "garbage\n");
    expect_cores(cg, proc, 4, "an unreadable cpu.max counts as none");
    expect_cores(cg, "/nonexistent/cgroup", -1, "no proc file");
}

static void test_ncores(void)
{
    cpu_set_t set;
    const int n = srv_ncores();
    CHECK(n >= 1, "at least one core (%d)", n);
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        CHECK(n <= CPU_COUNT(&set), "no more than the CPU affinity allows (%d <= %d)", n,
              CPU_COUNT(&set));
    CHECK(srv_ncores() == n, "the same answer again (read once)");
}

int main(void)
{
    if (td_make(root, sizeof root, "sysinfo") != 0)
        return 1;
    test_cgroup_quota();
    test_ncores();
    td_rm_rf(root);
    return check_report();
}
