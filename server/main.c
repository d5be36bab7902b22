/*
 * main.c - attnd: parse the options, start the daemon, serve until SIGTERM/SIGINT, drain, exit 0.
 *
 * Signals are blocked in every thread (set before any thread starts) and taken synchronously with
 * sigwait here, so no work happens in a signal handler.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "http.h"
#include "log.h"
#include "options.h"

/* How long in-flight requests get to finish after SIGTERM before the daemon closes them. */
#define DRAIN_DEADLINE_MS 30000

int main(int argc, char **argv)
{
    srv_options opt;
    srv_error err = {0};
    int action = srv_options_parse(&opt, argc, argv, &err);
    if (action < 0) {
        fprintf(stderr, "attnd: %s\n", err.message);
        return 2;
    }
    if (action == SRV_OPTIONS_HELP) {
        srv_options_usage(stdout, argv[0]);
        return 0;
    }
    if (action == SRV_OPTIONS_VERSION) {
        printf("attnd %s (%s)\n", ATTND_VERSION, ATTND_GIT_REV);
        return 0;
    }

    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);

    srv_daemon *d = srv_daemon_start(&opt, &err);
    if (!d) {
        srv_log(opt.log_format, "error", "cannot start: %s", err.message);
        return 1;
    }
    srv_log(opt.log_format, "info",
            "attnd %s listening on http://%s:%d (%d HTTP threads, %d engine threads per pass, "
            "%d passes in flight)",
            ATTND_VERSION, opt.host, srv_daemon_port(d), opt.threads, opt.blas_threads,
            opt.max_inflight);

    int sig = 0;
    sigwait(&stop, &sig);
    srv_log(opt.log_format, "info", "%s: draining (up to %d s)", strsignal(sig),
            DRAIN_DEADLINE_MS / 1000);
    int left = srv_daemon_drain(d, DRAIN_DEADLINE_MS);
    if (left)
        srv_log(opt.log_format, "warn", "%d requests still in flight at the deadline; closing them",
                left);
    srv_daemon_stop(d);
    srv_log(opt.log_format, "info", "stopped");
    return 0;
}
