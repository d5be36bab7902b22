/*
 * fsio.c - the data dir's system calls, and the faults a test can arm in them (see fsio.h).
 */
#include "fsio.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct fault {
    bool armed;
    char match[128]; /* "" = every name */
    int skip;        /* matching calls still to let through */
    int count;       /* calls still to fail; -1 = every one */
    int errnum;
    int failed;      /* calls failed so far */
} fault;

static atomic_int armed_faults; /* how many rules are armed: 0 = the fast path */
static pthread_mutex_t faults_lock = PTHREAD_MUTEX_INITIALIZER;
static fault faults[SRV_FS_OP_COUNT];

/* True (errno set) when an armed fault fails this call of op on name (NULL: no name). */
static bool injected(srv_fs_op op, const char *name)
{
    if (atomic_load_explicit(&armed_faults, memory_order_relaxed) == 0)
        return false;
    bool fail = false;
    int e = 0;
    pthread_mutex_lock(&faults_lock);
    fault *f = &faults[op];
    if (f->armed && (!name || !f->match[0] || strstr(name, f->match))) {
        if (f->skip > 0) {
            f->skip--;
        } else if (f->count != 0) {
            fail = true;
            e = f->errnum;
            f->failed++;
            if (f->count > 0)
                f->count--;
        }
    }
    pthread_mutex_unlock(&faults_lock);
    if (fail)
        errno = e;
    return fail;
}

int srv_fs_openat(int dirfd, const char *name, int flags, mode_t mode)
{
    if ((flags & O_CREAT) && injected(SRV_FS_OPEN, name))
        return -1;
    return openat(dirfd, name, flags, mode);
}

ssize_t srv_fs_write(int fd, const void *buf, size_t n)
{
    if (injected(SRV_FS_WRITE, NULL))
        return -1;
    return write(fd, buf, n);
}

int srv_fs_fsync(int fd)
{
    if (injected(SRV_FS_FSYNC, NULL))
        return -1;
    return fsync(fd);
}

int srv_fs_renameat(int olddirfd, const char *oldname, int newdirfd, const char *newname)
{
    if (injected(SRV_FS_RENAME, oldname))
        return -1;
    return renameat(olddirfd, oldname, newdirfd, newname);
}

int srv_fs_mkdirat(int dirfd, const char *name, mode_t mode)
{
    if (injected(SRV_FS_MKDIR, name))
        return -1;
    return mkdirat(dirfd, name, mode);
}

int srv_fs_unlinkat(int dirfd, const char *name, int flags)
{
    if (injected(SRV_FS_UNLINK, name))
        return -1;
    return unlinkat(dirfd, name, flags);
}

void srv_fs_fail(srv_fs_op op, const char *match, int skip, int count, int errnum)
{
    if ((int)op < 0 || op >= SRV_FS_OP_COUNT)
        return;
    pthread_mutex_lock(&faults_lock);
    fault *f = &faults[op];
    if (!f->armed)
        atomic_fetch_add(&armed_faults, 1);
    f->armed = true;
    snprintf(f->match, sizeof f->match, "%s", match ? match : "");
    f->skip = skip;
    f->count = count;
    f->errnum = errnum;
    f->failed = 0;
    pthread_mutex_unlock(&faults_lock);
}

void srv_fs_fail_clear(void)
{
    pthread_mutex_lock(&faults_lock);
    for (int i = 0; i < SRV_FS_OP_COUNT; i++)
        faults[i].armed = false;
    atomic_store(&armed_faults, 0);
    pthread_mutex_unlock(&faults_lock);
}

int srv_fs_failed(srv_fs_op op)
{
    if ((int)op < 0 || op >= SRV_FS_OP_COUNT)
        return 0;
    pthread_mutex_lock(&faults_lock);
    int n = faults[op].failed;
    pthread_mutex_unlock(&faults_lock);
    return n;
}
