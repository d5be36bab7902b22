/*
 * options.h - the daemon's settings: command-line flags, each with an ATTND_* environment twin.
 *
 * Every flag --some-name has the twin ATTND_SOME_NAME; a flag given on the command line wins over
 * its twin, which wins over the default. The table of flags lives in options.c (one row per flag:
 * name, kind, field, help); adding a setting is adding a field here and a row there.
 *
 * Defaults are chosen from the number of cores (nproc) so that the threads computing never
 * oversubscribe them: --threads HTTP threads (= cores) each run their own requests' passes
 * on one thread; only a pass that is alone in flight spreads over the engine pool of --blas-threads
 * (= cores) threads. OpenBLAS itself always runs single-threaded inside those threads.
 */
#ifndef ATTND_OPTIONS_H
#define ATTND_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"
#include "base/log.h"

/* --max-request-flops's default: about a minute of one core (docs/configuration.md) */
#define SRV_DEFAULT_MAX_REQUEST_FLOPS INT64_C(3000000000000)

typedef struct srv_options {
    /* listening */
    char host[256];              /* --host, address to bind; default 127.0.0.1             */
    int port;                    /* --port, default 8080; 0 = any free port                 */
    /* concurrency */
    int threads;                 /* --threads, HTTP threads (libmicrohttpd's pool)          */
    int blas_threads;            /* --blas-threads, engine threads of a pass running alone  */
    int max_inflight;            /* --max-inflight, forward passes at once; over it: wait   */
    int queue_wait_ms;           /* --queue-wait-ms, how long a pass waits for a slot (503) */
    int timeout;                 /* --timeout, idle connection timeout in seconds           */
    int max_connections;         /* --max-connections, open connections at once             */
    int header_timeout;          /* --header-timeout, seconds a request's headers may take  */
    int min_body_rate;           /* --min-body-rate, bytes/s bodies (in, out) must average  */
    /* limits on client input */
    int64_t max_body_bytes;      /* --max-body-bytes, request body (413 past it)           */
    int64_t max_body_memory;     /* --max-body-memory, bodies held at once (503); 0 = auto */
    int64_t max_tensor_elements; /* --max-tensor-elements, per input/output/param tensor   */
    int64_t max_trace_elements;  /* --max-trace-elements, all stages of one trace (413)    */
    int64_t max_weights_bytes;   /* --max-weights-bytes, all layers' weights together (507) */
    int max_json_depth;          /* --max-json-depth, nesting of any request body           */
    int64_t max_request_flops;   /* --max-request-flops, estimated cost of one pass (413)   */
    /* behaviour */
    srv_log_format log_format;   /* --log-format text|json|off                               */
    bool demo;                   /* --demo, create the layer "demo" at start                */
    char note[256];              /* a start warning the parse leaves ("" none): a value capped */
    /* persistence, security, deployment (issues 4 and 6 act on these) */
    char data_dir[1024];         /* --data-dir, "" = layers in memory only                 */
    bool watch;                  /* --watch, pick up layers other replicas write            */
    int watch_interval_ms;       /* --watch-interval-ms, full rescan period (watch.h)       */
    bool watch_poll;             /* --watch-poll, rescan only, no inotify (NFS-like)         */
    char api_key_file[1024];     /* --api-key-file, a file holding the API key             */
    char api_key[256];           /* ATTND_API_KEY (--api-key), the key itself              */
    char cors_origin[512];       /* --cors-origin, allowed browser origin(s), "" = no CORS  */
    bool read_only;              /* --read-only, refuse every change                         */
    bool auth_reads;             /* --auth-reads, reads need the API key too (probes never)  */
    int drain_timeout;           /* --drain-timeout, seconds in-flight requests get on SIGTERM */
    char checkpoints_dir[1024];  /* --checkpoints-dir, what POST .../import may read; "" = off */
} srv_options;

/* Fills opt with the defaults (threads and blas_threads from the core count). */
void srv_options_default(srv_options *opt);

/* What srv_options_parse found on the command line besides settings. */
typedef enum srv_options_action {
    SRV_OPTIONS_RUN = 0, /* start the daemon                */
    SRV_OPTIONS_HELP,    /* --help: print srv_options_usage */
    SRV_OPTIONS_VERSION, /* --version                       */
    SRV_OPTIONS_HEALTHCHECK, /* --healthcheck: probe the daemon these options describe (healthcheck.h) */
} srv_options_action;

/* Fills opt from defaults, then the ATTND_* environment, then argv (--name value or --name=value;
 * booleans take no value, or =true/=false/=1/=0). Returns the action, or -1 with err filled
 * (SRV_E_BAD_REQUEST, message naming the flag or variable and the value) on an unknown flag or
 * a bad value. */
int srv_options_parse(srv_options *opt, int argc, char **argv, srv_error *err);

/* Looks through env (a NULL-terminated environ) for ATTND_* variables that are neither a flag's
 * twin nor a name the engine or the repository's tools read (ATTND_ISA, ATTND_TEST_*, ...): a
 * misspelled twin (ATTND_PROT) would otherwise leave its setting at the default without a word.
 * Returns how many there are; out gets a warning about the first, with the nearest twin if one is
 * within three edits. */
int srv_options_unknown_env(char *const *env, char *out, size_t n);

/* Writes the --help text (every flag, its twin, default and meaning) to f (a FILE *). */
void srv_options_usage(void *f, const char *argv0);


#endif
