/*
 * main.c - attnd: parse the options, start the daemon, serve until SIGTERM/SIGINT, drain, exit 0.
 *
 * Signals are blocked in every thread we start and taken synchronously with sigwait here, so no
 * work happens in a signal handler. OpenBLAS starts its own threads in a constructor, before main()
 * can block anything; a SIGTERM delivered to one of those would kill the process without a drain,
 * so a handler (the only thing those threads can run) passes it on to the main thread.
 */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "api/daemon.h"
#include "app/options.h"
#include "base/log.h"
#include "healthcheck.h"
#include "import_cmd.h"
#include "http/fdlimit.h"
#include "mha.h"

extern char **environ;

static pthread_t main_thread;

/* Runs only on threads that did not block SIGTERM/SIGINT (OpenBLAS's): re-sends the signal to the
 * main thread, where it stays pending until sigwait takes it. pthread_kill is async-signal-safe. */
static void forward_to_main(int sig)
{
    int saved = errno;
    pthread_kill(main_thread, sig);
    errno = saved;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "import") == 0)
        return srv_import_main(argc - 1, argv + 1);
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
    if (action == SRV_OPTIONS_HEALTHCHECK)
        return srv_healthcheck_main(opt.host, opt.port);

    /* Blocks up to 32 MB (an L request's body, jansson's trees) come from malloc's arenas and stay
     * mapped when freed, instead of an mmap/munmap per request that faults every page in again
     * (tens of microseconds a page on a virtual machine); tensors, outputs and bigger reply
     * blocks are kept by bigbuf.c. The price: memory stays at its high-water mark. */
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);

    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    main_thread = pthread_self();
    struct sigaction fwd = {.sa_handler = forward_to_main};
    sigemptyset(&fwd.sa_mask);
    sigaction(SIGTERM, &fwd, NULL);
    sigaction(SIGINT, &fwd, NULL);
    signal(SIGPIPE, SIG_IGN);

    /* every connection is a descriptor: take all the hard limit allows (fdlimit.h) */
    long nofile_before, nofile;
    if (srv_fdlimit_raise(&nofile_before, &nofile) < 0)
        srv_log(opt.log_format, "warn", "cannot raise the open-files limit from %ld",
                nofile_before);
    else if (nofile != nofile_before)
        srv_log(opt.log_format, "info", "open-files limit raised from %ld to %ld", nofile_before,
                nofile);
    if (nofile >= 0 && opt.max_connections > nofile - SRV_FDLIMIT_RESERVE)
        srv_log(opt.log_format, "warn",
                "--max-connections %d is over what the open-files limit of %ld allows; raise the "
                "hard limit (ulimit -Hn, LimitNOFILE=) or lower --max-connections",
                opt.max_connections, nofile);

    if (opt.note[0])
        srv_log(opt.log_format, "warn", "%s", opt.note);
    if (opt.api_key[0] && opt.api_key_file[0]) /* the file's key is in force (docs/security.md) */
        srv_log(opt.log_format, "warn",
                "ATTND_API_KEY (or --api-key) is ignored: the key in force is --api-key-file's "
                "(%s)",
                opt.api_key_file);
    char unknown[320]; /* a misspelled twin (ATTND_PROT) would leave its setting at the default */
    int nunknown = srv_options_unknown_env(environ, unknown, sizeof unknown);
    if (nunknown)
        srv_log(opt.log_format, "warn", "%s%s", unknown,
                nunknown > 1 ? "; other ATTND_* variables here are not settings either" : "");

    srv_daemon *d = srv_daemon_start(&opt, &err);
    if (!d) {
        /* an API key the start refuses (read from its file or variable there) is a bad option
         * value, as the options' own checks are: status 2 and the option named */
        if (!strcmp(err.field, "api_key") || !strcmp(err.field, "api_key_file") ||
            !strcmp(err.field, "auth_reads")) {
            fprintf(stderr, "attnd: %s\n", err.message); /* it names the file or variable */
            return 2;
        }
        if (!strcmp(err.field, "host")) { /* a name or address that does not resolve */
            fprintf(stderr, "attnd: --host (ATTND_HOST): %s\n", err.message);
            return 2;
        }
        srv_log(opt.log_format, "error", "cannot start: %s", err.message);
        return 1;
    }
    bool v6 = strchr(opt.host, ':') != NULL; /* an IPv6 address goes in brackets in a URL */
    srv_log(opt.log_format, "info",
            "attnd %s listening on http://%s%s%s:%d (%d HTTP threads, %d engine threads per pass, "
            "%d passes in flight, %d connections)",
            ATTND_VERSION, v6 ? "[" : "", opt.host, v6 ? "]" : "", srv_daemon_port(d), opt.threads,
            opt.blas_threads, opt.max_inflight, opt.max_connections);
    /* an OpenBLAS core weaker than the CPU is worth a warning where the passes run on it (the
     * generic path); elsewhere the hint is logged as information */
    mha_blas_info blas;
    char blas_line[512];
    mha_blas_get_info(&blas);
    const bool blas_runs = mha_isa_active() == MHA_ISA_PORTABLE;
    srv_log(opt.log_format, blas.weaker && blas_runs ? "warn" : "info", "engine BLAS: %s",
            mha_blas_info_describe(&blas, blas_line, sizeof blas_line));
    char kernels_line[512]; /* which of the engine's kernels a pass runs, and why */
    srv_log(opt.log_format, "info", "engine %s",
            mha_kernels_describe(kernels_line, sizeof kernels_line));

    int sig = 0;
    sigwait(&stop, &sig);
    srv_log(opt.log_format, "info", "%s: draining (up to %d s)", strsignal(sig), opt.drain_timeout);
    /* in-flight requests get --drain-timeout seconds to finish before the daemon closes them */
    int left = srv_daemon_drain(d, opt.drain_timeout * 1000);
    if (left)
        srv_log(opt.log_format, "warn", "%d requests still in flight at the deadline; closing them",
                left);
    srv_daemon_stop(d);
    srv_log(opt.log_format, "info", "stopped");
    return 0;
}
