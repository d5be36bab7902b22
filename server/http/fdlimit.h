/*
 * fdlimit.h - the open-files limit (RLIMIT_NOFILE), which caps how many connections attnd can hold.
 *
 * Every connection is a file descriptor. A soft limit of 1024 (a common default) would let 1024
 * stalled clients lock everyone else out; epoll makes many more connections cheap, so attnd raises
 * its soft limit to the hard limit at start, and sizes --max-connections' default from it.
 */
#ifndef ATTND_FDLIMIT_H
#define ATTND_FDLIMIT_H

/* Descriptors kept for everything but connections: the listening socket, epoll and wake-up fds,
 * the data dir, inotify, log, BLAS threads' files. */
#define SRV_FDLIMIT_RESERVE 64

/* The largest --max-connections default. */
#define SRV_FDLIMIT_MAX_DEFAULT_CONNECTIONS 16384

/* Raises the process's soft RLIMIT_NOFILE to its hard limit. Fills *before and *after with the soft
 * limit before and after (-1 = unlimited). Returns 0, or -1 when it could not be raised (the limit
 * then stays as it was, and *after says so). */
int srv_fdlimit_raise(long *before, long *after);

/* The default --max-connections: the hard open-files limit less SRV_FDLIMIT_RESERVE, at most
 * SRV_FDLIMIT_MAX_DEFAULT_CONNECTIONS and at least 16. */
int srv_fdlimit_default_connections(void);

#endif
