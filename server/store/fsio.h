/*
 * fsio.h - the system calls that change the data dir, in one place, so that a test can make any of
 * them fail the way a full, read-only or failing disk does (issue 16: faults injected, not hoped for).
 *
 * Every write, fsync, rename, open, mkdir and unlink that the data dir's files (datadir.c, dd_*.c)
 * make goes through these wrappers; they behave exactly as the system calls (return value and
 * errno) unless a fault is armed.
 * Faults are process-wide and meant for tests only: srv_fs_fail arms one, srv_fs_fail_clear disarms
 * all. When none is armed (always, outside tests) a wrapper costs one relaxed atomic load.
 */
#ifndef ATTND_FSIO_H
#define ATTND_FSIO_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef enum srv_fs_op {
    SRV_FS_OPEN,   /* openat that creates a file (O_CREAT)        */
    SRV_FS_WRITE,  /* write                                       */
    SRV_FS_FSYNC,  /* fsync (of a file or a directory)            */
    SRV_FS_RENAME, /* renameat                                    */
    SRV_FS_MKDIR,  /* mkdirat                                     */
    SRV_FS_UNLINK, /* unlinkat (files and directories)            */
    SRV_FS_OP_COUNT
} srv_fs_op;

int srv_fs_openat(int dirfd, const char *name, int flags, mode_t mode);
ssize_t srv_fs_write(int fd, const void *buf, size_t n);
int srv_fs_fsync(int fd);
int srv_fs_renameat(int olddirfd, const char *oldname, int newdirfd, const char *newname);
int srv_fs_mkdirat(int dirfd, const char *name, mode_t mode);
int srv_fs_unlinkat(int dirfd, const char *name, int flags);

/* Tests: makes calls of op fail with errnum (ENOSPC, EDQUOT, EROFS, EIO, ...): the calls after the
 * first `skip` matching ones, `count` of them (-1: every one until cleared). match (may be NULL:
 * every call) restricts the name-taking calls (open, rename's source, mkdir, unlink) to names that
 * contain it; write and fsync take no name and always match. One rule per op; a new one replaces
 * the old. */
void srv_fs_fail(srv_fs_op op, const char *match, int skip, int count, int errnum);

/* Tests: disarms every fault. */
void srv_fs_fail_clear(void);

/* Tests: how many calls of op an armed fault has failed so far. */
int srv_fs_failed(srv_fs_op op);

#endif
