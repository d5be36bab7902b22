/*
 * child.h - the built daemon (build/attnd, or $BUILD/attnd) run as a child process, for tests of what
 * only a process shows: its exit status, what it prints, its start on a port another one holds.
 *
 *   ch_child c;
 *   const char *args[] = {"--port", "0", NULL};
 *   if (ch_start(&c, args, NULL, 20000) == 0)      // listening: c.port is its port
 *       ...;
 *   int status = ch_stop(&c, 10000);               // SIGTERM, then its exit status
 *   ch_free(&c);
 *
 * The child's environment is the test's without any ATTND_* variable, plus env. Its stdout and
 * stderr are collected in out and err as they arrive. Traffic to it goes to 127.0.0.1 only.
 */
#ifndef ATTND_CHILD_H
#define ATTND_CHILD_H

#include <stddef.h>
#include <sys/types.h>

typedef struct ch_child {
    pid_t pid;      /* 0 once it has been waited for                             */
    int out_fd, err_fd;
    int port;       /* from its "listening on http://HOST:PORT" line, or 0        */
    int status;     /* exit status once it exited; 128+signal when killed; -1 before */
    char *out, *err; /* what it printed so far (NUL-terminated, malloc'd)          */
    size_t out_len, err_len;
} ch_child;

/* Starts attnd with args and extra environment ("NAME=value"), both NULL-terminated (NULL = none),
 * and waits up to timeout_ms for it to say where it listens (returns 0, port set) or to exit
 * (returns 1, status set). Returns -1 when it could not be started or did neither in time. */
int ch_start(ch_child *c, const char *const *args, const char *const *env, int timeout_ms);

/* Runs attnd to its end (up to timeout_ms, then it is killed): returns 0 with status, out and err
 * set, or -1. */
int ch_run(ch_child *c, const char *const *args, const char *const *env, int timeout_ms);

/* Collects what the child prints for up to ms, returning early once it exits or text appears in
 * its stderr (text NULL: only on exit). Returns true when text was seen. */
int ch_wait_err(ch_child *c, const char *text, int ms);

/* SIGTERM, then waits up to timeout_ms for the exit (SIGKILL after it); returns the exit status. */
int ch_stop(ch_child *c, int timeout_ms);

void ch_free(ch_child *c); /* kills a child still running */

#endif
