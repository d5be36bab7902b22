/*
 * sysinfo.h - what the process asks of the machine: the time, the cores, the memory it may use.
 *
 * Every layer above may include this; it includes nothing of the daemon.
 */
#ifndef ATTND_SYSINFO_H
#define ATTND_SYSINFO_H

#include <stdint.h>

/* Unix time now, in seconds (CLOCK_REALTIME, nanosecond resolution). */
double srv_now(void);

/* The cores this process may use (at least 1): the online ones, or fewer when its CPU affinity
 * (taskset, a cpuset) or its cgroup's CPU quota (a container's --cpus, rounded up) allows fewer.
 * Read once, at the first call. */
int srv_ncores(void);

/* The smallest CPU quota, in cores rounded up, of the cgroup v2 that proc_cgroup's "0::<path>" line
 * names below root and of its parents up to root (their cpu.max "quota period"; "max" is none):
 * a container's --cpus, a pod's limit, a systemd CPUQuota=, a nested limit. -1 when none is set or
 * the files cannot be read. srv_ncores reads "/sys/fs/cgroup" and "/proc/self/cgroup". */
int srv_cgroup_cpu_cores(const char *root, const char *proc_cgroup);

/* The memory this process may use: the smaller of the machine's RAM and the memory limit of its
 * cgroup (v2 memory.max, or v1 memory.limit_in_bytes), in bytes; -1 when neither can be read. */
int64_t srv_memory_limit_bytes(void);

#endif
