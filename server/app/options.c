/*
 * options.c - flags, their ATTND_* twins, defaults and --help, all from one table.
 */
#include "options.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/sysinfo.h"
#include "http/fdlimit.h"

typedef enum opt_kind { OPT_STR, OPT_INT, OPT_I64, OPT_BOOL, OPT_LOGFMT } opt_kind;

typedef struct opt_spec {
    const char *name; /* flag without the leading "--"; the twin is ATTND_ + upper(name, '-'→'_') */
    opt_kind kind;
    size_t offset;    /* of the field in srv_options                                             */
    size_t size;      /* of a string field                                                       */
    int64_t min, max; /* accepted range of a number                                              */
    const char *arg;  /* placeholder in --help                                                    */
    const char *help;
} opt_spec;

#define STR(f) OPT_STR, offsetof(srv_options, f), sizeof(((srv_options *)0)->f), 0, 0
#define INT(f, lo, hi) OPT_INT, offsetof(srv_options, f), 0, (lo), (hi)
#define I64(f, lo, hi) OPT_I64, offsetof(srv_options, f), 0, (lo), (hi)
#define BOOL(f) OPT_BOOL, offsetof(srv_options, f), 0, 0, 1

static const opt_spec specs[] = {
    {"host", STR(host), "ADDR", "address to listen on (0.0.0.0 for every interface)"},
    {"port", INT(port, 0, 65535), "N", "TCP port; 0 picks any free port"},
    {"threads", INT(threads, 1, 1024), "N", "HTTP threads (default: cores)"},
    {"blas-threads", INT(blas_threads, 1, 1024), "N",
     "engine threads for a forward pass that runs alone (overlapping passes take one each)"},
    {"max-inflight", INT(max_inflight, 1, 4096), "N",
     "forward passes at once; more wait, then get 503 + Retry-After"},
    {"queue-wait-ms", INT(queue_wait_ms, 0, 600000), "MS",
     "how long a forward pass waits for a free slot before 503"},
    {"timeout", INT(timeout, 1, 86400), "SECONDS", "idle connection timeout"},
    {"max-connections", INT(max_connections, 1, 1000000), "N",
     "open connections at once; the default is the hard open-files limit less 64, at most 16384"},
    {"header-timeout", INT(header_timeout, 1, 86400), "SECONDS",
     "a request's headers must be in within this long of its start (else 408, closed)"},
    {"min-body-rate", INT(min_body_rate, 0, 1 << 30), "BYTES",
     "request and reply bodies must move at this many bytes/s on average after --header-timeout "
     "of grace (0: no minimum)"},
    {"max-body-bytes", I64(max_body_bytes, 1, INT64_C(1) << 40), "BYTES",
     "largest request body (413 past it, sent before the body is read)"},
    {"max-body-memory", I64(max_body_memory, 0, INT64_C(1) << 50), "BYTES",
     "request bodies held at once, all connections together, counted as their bytes arrive; a body "
     "that does not fit gets 503 + Retry-After, and one client address may hold a quarter while "
     "others hold bodies too (0: half the memory of the machine or container, at least "
     "--max-body-bytes)"},
    {"max-tensor-elements", I64(max_tensor_elements, 1, INT64_C(1) << 32), "N",
     "largest tensor (input, output, weights or parameter), in elements"},
    {"max-trace-elements", I64(max_trace_elements, 1, INT64_C(1) << 32), "N",
     "largest trace, all stages together, in elements (413 past it)"},
    {"max-json-depth", INT(max_json_depth, 2, 1000), "N", "deepest nesting of a request body"},
    {"max-request-flops", I64(max_request_flops, 1, INT64_C(1) << 62), "FLOPS",
     "a forward or trace estimated (from its shapes, as describe's FLOPs) to cost more is refused "
     "with 413 too_costly before it runs; the default is about a minute of one core"},
    {"log-format", OPT_LOGFMT, offsetof(srv_options, log_format), 0, 0, 0, "text|json|off",
     "one line per request on stderr, as text or JSON"},
    {"demo", BOOL(demo), NULL, "create a demo layer \"demo\" (E=64, H=4, seed 0) at start"},
    {"data-dir", STR(data_dir), "DIR", "keep layers in DIR (default: in memory only)"},
    {"watch", BOOL(watch), NULL, "pick up layers that other replicas write to the data dir"},
    {"watch-interval-ms", INT(watch_interval_ms, 10, 60000), "MS",
     "with --watch: rescan the data dir this often even without inotify events"},
    {"watch-poll", BOOL(watch_poll), NULL,
     "with --watch: rescan only, no inotify (changes then show within the interval)"},
    {"api-key-file", STR(api_key_file), "FILE",
     "require the key in FILE for every change: its first line, without the line end and nothing "
     "else trimmed (a key that starts or ends with a space, or holds a control character, is "
     "refused at start)"},
    {"api-key", STR(api_key), "KEY",
     "the API key itself, taken as it is, refused as the file's is (prefer ATTND_API_KEY or a "
     "file)"},
    {"cors-origin", STR(cors_origin), "ORIGIN", "allow browser pages from ORIGIN (or *)"},
    {"read-only", BOOL(read_only), NULL, "refuse every request that changes a layer"},
    {"auth-reads", BOOL(auth_reads), NULL,
     "reads need the API key too (probes and /metrics never do)"},
    {"drain-timeout", INT(drain_timeout, 0, 3600), "SECONDS",
     "on SIGTERM/SIGINT, how long requests in flight get to finish"},
};
#define NSPECS (sizeof specs / sizeof specs[0])

void srv_options_default(srv_options *opt)
{
    memset(opt, 0, sizeof *opt);
    int cores = srv_ncores();
    snprintf(opt->host, sizeof opt->host, "127.0.0.1");
    opt->port = 8080;
    /* HTTP threads carry the forward passes of small requests themselves, so they take the cores;
     * a pass alone in flight spreads over the engine pool (blas_threads), overlapping passes take
     * one thread each: the threads computing stay at the core count. */
    opt->threads = cores;
    opt->blas_threads = cores;
    opt->max_inflight = cores;
    opt->queue_wait_ms = 2000;
    opt->watch_interval_ms = 500; /* replicas follow each other within 2 s even on NFS */
    opt->timeout = 30;
    opt->max_connections = srv_fdlimit_default_connections(); /* main raises the soft limit */
    opt->header_timeout = 10;  /* nginx's 60, Go servers' usual 10-20: headers are a few KB  */
    opt->min_body_rate = 1024; /* Apache mod_reqtimeout's MinRate is 500                      */
    opt->max_body_bytes = INT64_C(256) << 20;       /* an L request is 30 MB of JSON */
    opt->max_body_memory = 0;                       /* body_budget.h's default        */
    opt->max_tensor_elements = INT64_C(1) << 26;    /* 256 MiB of float32           */
    opt->max_trace_elements = INT64_C(1) << 24;     /* 64 MiB of float32            */
    opt->max_json_depth = 32;
    /* About a minute of one core: the demo layer (E=64, H=4: head_dim 16, the engine's least
     * efficient shape) ran at 54 GFLOP/s on one Zen 4 core at L = S = 16384 (best of repeated runs,
     * 2026-11-25), 3.2e12 in 60 s; layers with head_dim 64 run 2-3 times faster (docs/benchmarks.md),
     * so this takes them 20-30 s. */
    opt->max_request_flops = INT64_C(3000000000000);
    opt->log_format = SRV_LOG_TEXT;
    opt->drain_timeout = 30;
}

/* ATTND_ + name in upper case with '-' → '_'. */
static void twin_name(char *out, size_t n, const char *name)
{
    size_t k = (size_t)snprintf(out, n, "ATTND_");
    for (; *name && k + 1 < n; name++)
        out[k++] = *name == '-' ? '_' : (char)toupper((unsigned char)*name);
    out[k] = '\0';
}

static int parse_bool(const char *v, bool *out)
{
    if (!strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcasecmp(v, "on"))
        *out = true;
    else if (!strcmp(v, "0") || !strcasecmp(v, "false") || !strcasecmp(v, "no") ||
             !strcasecmp(v, "off") || !*v)
        *out = false;
    else
        return -1;
    return 0;
}

/* Sets one option from text v; `from` names the flag or variable in errors. */
static int set_value(srv_options *opt, const opt_spec *s, const char *v, const char *from,
                     srv_error *err)
{
    char *field = (char *)opt + s->offset;
    switch (s->kind) {
    case OPT_STR:
        if (strlen(v) >= s->size)
            return srv_error_set(err, SRV_E_BAD_REQUEST, s->name, "%s: value longer than %zu bytes",
                                 from, s->size - 1);
        memcpy(field, v, strlen(v) + 1);
        return 0;
    case OPT_BOOL:
        if (parse_bool(v, (bool *)field) < 0)
            return srv_error_set(err, SRV_E_BAD_REQUEST, s->name,
                                 "%s: '%s' is not a boolean (true/false/1/0)", from, v);
        return 0;
    case OPT_LOGFMT:
        if (!strcmp(v, "text"))
            *(srv_log_format *)field = SRV_LOG_TEXT;
        else if (!strcmp(v, "json"))
            *(srv_log_format *)field = SRV_LOG_JSON;
        else if (!strcmp(v, "off"))
            *(srv_log_format *)field = SRV_LOG_OFF;
        else
            return srv_error_set(err, SRV_E_BAD_REQUEST, s->name,
                                 "%s: '%s' is not one of text, json, off", from, v);
        return 0;
    case OPT_INT:
    case OPT_I64: {
        char *end;
        errno = 0;
        long long x = strtoll(v, &end, 10);
        if (errno || end == v || *end || x < s->min || x > s->max)
            return srv_error_set(err, SRV_E_BAD_REQUEST, s->name,
                                 "%s: '%s' is not a whole number in [%" PRId64 ", %" PRId64 "]",
                                 from, v, s->min, s->max);
        if (s->kind == OPT_INT)
            *(int *)field = (int)x;
        else
            *(int64_t *)field = x;
        return 0;
    }
    }
    return srv_error_set(err, SRV_E_INTERNAL, s->name, "unknown option kind");
}

static const opt_spec *find_spec(const char *name, size_t len)
{
    for (size_t i = 0; i < NSPECS; i++)
        if (strlen(specs[i].name) == len && !strncmp(specs[i].name, name, len))
            return &specs[i];
    return NULL;
}

int srv_options_parse(srv_options *opt, int argc, char **argv, srv_error *err)
{
    srv_options_default(opt);
    char twin[96];
    bool blas_given = false, inflight_given = false;

    for (size_t i = 0; i < NSPECS; i++) {
        twin_name(twin, sizeof twin, specs[i].name);
        const char *v = getenv(twin);
        if (!v)
            continue;
        if (set_value(opt, &specs[i], v, twin, err) < 0)
            return -1;
        blas_given |= specs[i].offset == offsetof(srv_options, blas_threads);
        inflight_given |= specs[i].offset == offsetof(srv_options, max_inflight);
    }

    bool healthcheck = false; /* the other flags still count: they say where the daemon listens */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--healthcheck")) {
            healthcheck = true;
            continue;
        }
        if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            return SRV_OPTIONS_HELP;
        if (!strcmp(a, "--version") || !strcmp(a, "-V"))
            return SRV_OPTIONS_VERSION;
        if (strncmp(a, "--", 2) != 0)
            return srv_error_set(err, SRV_E_BAD_REQUEST, "", "unexpected argument '%s' (see --help)",
                                 a);
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const opt_spec *s = find_spec(name, len);
        if (!s)
            return srv_error_set(err, SRV_E_BAD_REQUEST, "", "unknown flag '%.*s' (see --help)",
                                 (int)(len + 2), a);
        const char *v;
        if (eq)
            v = eq + 1;
        else if (s->kind == OPT_BOOL)
            v = "true";
        else if (i + 1 < argc)
            v = argv[++i];
        else
            return srv_error_set(err, SRV_E_BAD_REQUEST, s->name, "flag '%s' needs a value", a);
        if (set_value(opt, s, v, a, err) < 0)
            return -1;
        blas_given |= s->offset == offsetof(srv_options, blas_threads);
        inflight_given |= s->offset == offsetof(srv_options, max_inflight);
    }

    /* The engine pool serves a pass that runs alone (forward.c): it may take every core. Passes
     * that overlap run one thread each, on their HTTP threads (--threads <= cores by default). */
    if (!blas_given)
        opt->blas_threads = srv_ncores();
    if (!inflight_given)
        opt->max_inflight = opt->threads;
    if (opt->max_body_memory && opt->max_body_memory < opt->max_body_bytes)
        return srv_error_set(err, SRV_E_BAD_REQUEST, "max-body-memory",
                             "--max-body-memory (%lld) is less than --max-body-bytes (%lld): bodies "
                             "between the two could never be read; raise the first or lower the "
                             "second", (long long)opt->max_body_memory,
                             (long long)opt->max_body_bytes);
    return healthcheck ? SRV_OPTIONS_HEALTHCHECK : SRV_OPTIONS_RUN;
}

void srv_options_usage(void *fp, const char *argv0)
{
    FILE *f = fp;
    srv_options d;
    srv_options_default(&d);
    fprintf(f,
            "usage: %s [flags]\n"
            "attnd serves torch.nn.MultiheadAttention layers over HTTP (/v1, see /openapi.yaml).\n\n"
            "Every flag --some-name can also be set as the environment variable ATTND_SOME_NAME;\n"
            "the flag wins.\n\n",
            argv0);
    char twin[96], def[64], left[96];
    for (size_t i = 0; i < NSPECS; i++) {
        const opt_spec *s = &specs[i];
        const char *field = (const char *)&d + s->offset;
        def[0] = '\0';
        switch (s->kind) {
        case OPT_STR:
            if (*field)
                snprintf(def, sizeof def, " (default %s)", field);
            break;
        case OPT_INT:
            snprintf(def, sizeof def, " (default %d)", *(const int *)field);
            break;
        case OPT_I64:
            snprintf(def, sizeof def, " (default %" PRId64 ")", *(const int64_t *)field);
            break;
        case OPT_LOGFMT:
            snprintf(def, sizeof def, " (default text)");
            break;
        case OPT_BOOL:
            break;
        }
        twin_name(twin, sizeof twin, s->name);
        snprintf(left, sizeof left, "--%s%s%s", s->name, s->arg ? " " : "", s->arg ? s->arg : "");
        fprintf(f, "  %-32s %s%s\n  %-32s   [%s]\n", left, s->help, def, "", twin);
    }
    fprintf(f, "  %-32s %s\n  %-32s %s\n", "--help", "this text", "--version",
            "print the version and exit");
    fprintf(f, "  %-32s %s\n", "--healthcheck",
            "GET /healthz of the daemon at --host/--port; exit 0 if it answers 200, else 1");
}
