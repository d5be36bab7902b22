/* child.c - the built daemon as a child process (see child.h). */
#include "child.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void append(char **buf, size_t *len, const char *s, size_t n)
{
    char *p = realloc(*buf, *len + n + 1);
    if (!p)
        abort(); /* test harness: out of memory is not the daemon's fault */
    memcpy(p + *len, s, n);
    *len += n;
    p[*len] = '\0';
    *buf = p;
}

/* Reaps the child if it exited; true when it has. */
static int reap(ch_child *c, int options)
{
    if (c->pid <= 0)
        return 1;
    int st = 0;
    pid_t r = waitpid(c->pid, &st, options);
    if (r != c->pid)
        return 0;
    c->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    c->pid = 0;
    return 1;
}

/* Reads what is there on out and err for up to ms; returns false at the end of both. */
static int pump(ch_child *c, int ms)
{
    struct pollfd pf[2] = {{c->out_fd, POLLIN, 0}, {c->err_fd, POLLIN, 0}};
    if (poll(pf, 2, ms) <= 0)
        return c->out_fd >= 0 || c->err_fd >= 0;
    char buf[4096];
    for (int i = 0; i < 2; i++) {
        if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
            continue;
        int *fd = i == 0 ? &c->out_fd : &c->err_fd;
        ssize_t n = read(*fd, buf, sizeof buf);
        if (n > 0)
            append(i == 0 ? &c->out : &c->err, i == 0 ? &c->out_len : &c->err_len, buf,
                   (size_t)n);
        else if (n == 0 || errno != EINTR) {
            close(*fd);
            *fd = -1;
        }
    }
    return c->out_fd >= 0 || c->err_fd >= 0;
}

static int spawn(ch_child *c, const char *const *args, const char *const *env)
{
    memset(c, 0, sizeof *c);
    c->out_fd = c->err_fd = -1;
    c->status = -1;
    append(&c->out, &c->out_len, "", 0);
    append(&c->err, &c->err_len, "", 0);
    const char *build = getenv("BUILD");
    char bin[512];
    snprintf(bin, sizeof bin, "%s/attnd", build && *build ? build : "build");
    int po[2], pe[2];
    if (access(bin, X_OK) != 0 || pipe(po) != 0)
        return -1;
    if (pipe(pe) != 0) {
        close(po[0]);
        close(po[1]);
        return -1;
    }
    c->pid = fork();
    if (c->pid == 0) {
        dup2(po[1], 1);
        dup2(pe[1], 2);
        close(po[0]);
        close(po[1]);
        close(pe[0]);
        close(pe[1]);
        for (char **e = environ; *e;) /* the test runner's ATTND_* must not change the child */
            if (strncmp(*e, "ATTND_", 6) == 0) {
                char name[256];
                snprintf(name, sizeof name, "%.*s", (int)strcspn(*e, "="), *e);
                unsetenv(name);
            } else {
                e++;
            }
        for (int i = 0; env && env[i]; i++)
            putenv((char *)env[i]);
        const char *argv[64];
        int n = 0;
        argv[n++] = bin;
        for (int i = 0; args && args[i] && n < 63; i++)
            argv[n++] = args[i];
        argv[n] = NULL;
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    close(po[1]);
    close(pe[1]);
    c->out_fd = po[0];
    c->err_fd = pe[0];
    if (c->pid < 0) {
        c->pid = 0;
        return -1;
    }
    return 0;
}

int ch_start(ch_child *c, const char *const *args, const char *const *env, int timeout_ms)
{
    if (spawn(c, args, env) < 0)
        return -1;
    double end = now_ms() + timeout_ms;
    static const char mark[] = "listening on http://";
    while (now_ms() < end) {
        const char *p = strstr(c->err, mark);
        if (p) {
            p += strlen(mark);
            const char *colon = p[0] == '[' ? strstr(p, "]:") : strchr(p, ':');
            if (colon && *colon == ']')
                colon++;
            if (colon && strchr(colon, '(')) { /* the whole line is in */
                c->port = atoi(colon + 1);
                return c->port > 0 ? 0 : -1;
            }
        }
        if (!pump(c, 20) || reap(c, WNOHANG)) {
            for (int i = 0; i < 100 && pump(c, 10); i++) /* the rest of what it printed */
                ;
            reap(c, 0);
            return 1;
        }
    }
    return -1;
}

int ch_run(ch_child *c, const char *const *args, const char *const *env, int timeout_ms)
{
    if (spawn(c, args, env) < 0)
        return -1;
    double end = now_ms() + timeout_ms;
    while (now_ms() < end && pump(c, 50))
        ;
    if (!reap(c, WNOHANG)) {
        if (now_ms() >= end)
            kill(c->pid, SIGKILL);
        reap(c, 0);
    }
    return now_ms() < end ? 0 : -1;
}

int ch_wait_err(ch_child *c, const char *text, int ms)
{
    double end = now_ms() + ms;
    while (now_ms() < end) {
        if (text && strstr(c->err, text))
            return 1;
        if (!pump(c, 20) && reap(c, WNOHANG))
            break;
    }
    return text && strstr(c->err, text);
}

int ch_stop(ch_child *c, int timeout_ms)
{
    if (c->pid > 0)
        kill(c->pid, SIGTERM);
    double end = now_ms() + timeout_ms;
    while (c->pid > 0 && now_ms() < end) {
        pump(c, 20);
        reap(c, WNOHANG);
    }
    if (c->pid > 0) {
        kill(c->pid, SIGKILL);
        reap(c, 0);
    }
    for (int i = 0; i < 100 && pump(c, 10); i++) /* what it printed last */
        ;
    return c->status;
}

void ch_free(ch_child *c)
{
    if (c->pid > 0) {
        kill(c->pid, SIGKILL);
        reap(c, 0);
    }
    if (c->out_fd >= 0)
        close(c->out_fd);
    if (c->err_fd >= 0)
        close(c->err_fd);
    free(c->out);
    free(c->err);
    memset(c, 0, sizeof *c);
    c->out_fd = c->err_fd = -1;
}
