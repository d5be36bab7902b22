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
#include <strings.h>
#include <unistd.h>

#include "base/sysinfo.h"
#include "mha.h"
#include "http/fdlimit.h"

typedef enum opt_kind { OPT_STR, OPT_NUM, OPT_BOOL, OPT_LOGFMT } opt_kind;

/* What a number counts, which says the suffixes it takes and how --help shows it. */
typedef enum opt_unit {
    U_PLAIN,   /* a whole number                                              */
    U_BYTES,   /* bytes: K, M, G, T (powers of 1024), optionally + "B"/"iB"     */
    U_COUNT,   /* a count: K, M, G, T (powers of 1024)                          */
    U_FLOPS,   /* floating-point operations: K, M, G, T, P (powers of 1000, as FLOPs are told) */
    U_SECONDS, /* whole seconds: "30", "30s", "30000ms"                         */
    U_MS,      /* milliseconds: "500", "500ms", "2s"                            */
} opt_unit;

typedef struct opt_spec {
    const char *name; /* flag without the leading "--"; the twin is ATTND_ + upper(name, '-'→'_') */
    opt_kind kind;
    size_t offset; /* of the field in srv_options                                             */
    size_t size;   /* of the field (a string's capacity, a number's width: 4 or 8)            */
    opt_unit unit;
    int64_t min, max; /* accepted range of a number                                              */
    const char *arg;  /* placeholder in --help                                                    */
    const char *help;
    const char *dflt; /* the default as --help says it, when the field's value would not say it  */
    const char *zero; /* what 0 means, for a number where 0 is special                           */
} opt_spec;

#define FIELD(f) offsetof(srv_options, f), sizeof(((srv_options *)0)->f)
#define STR(f) OPT_STR, FIELD(f), U_PLAIN, 0, 0
#define NUM(f, unit, lo, hi) OPT_NUM, FIELD(f), (unit), (lo), (hi)
#define BOOL(f) OPT_BOOL, FIELD(f), U_PLAIN, 0, 1

static const opt_spec specs[] = {
    {"host", STR(host), "ADDR", "address to listen on (0.0.0.0 for every interface)", NULL, NULL},
    {"port", NUM(port, U_PLAIN, 0, 65535), "N", "TCP port; a port in use is an error", NULL,
     "any free port"},
    {"threads", NUM(threads, U_PLAIN, 1, 1024), "N",
     "HTTP threads (each polls many connections and runs its small passes)", "the number of cores",
     NULL},
    {"blas-threads", NUM(blas_threads, U_PLAIN, 1, 1024), "N",
     "engine threads for a forward pass that runs alone (overlapping passes take one each)",
     "the number of cores", NULL},
    {"max-inflight", NUM(max_inflight, U_PLAIN, 1, 4096), "N",
     "forward passes at once; more wait, then get 503 + Retry-After",
     "--threads, at most the cores", NULL},
    {"queue-wait-ms", NUM(queue_wait_ms, U_MS, 0, 600000), "MS",
     "how long a forward pass waits for a free slot before 503", NULL, "no wait"},
    {"timeout", NUM(timeout, U_SECONDS, 1, 86400), "SECONDS",
     "idle connection timeout (between keep-alive requests, or a client not reading)", NULL, NULL},
    {"max-connections", NUM(max_connections, U_PLAIN, 1, 1000000), "N", "open connections at once",
     "the hard open-files limit less 64, at most 16384", NULL},
    {"header-timeout", NUM(header_timeout, U_SECONDS, 1, 86400), "SECONDS",
     "a request's headers must be in within this long of its start (else 408, closed)", NULL, NULL},
    {"min-body-rate", NUM(min_body_rate, U_BYTES, 0, 1 << 30), "BYTES",
     "bytes/s request and reply bodies must average after --header-timeout of grace", NULL,
     "no minimum"},
    {"max-body-bytes", NUM(max_body_bytes, U_BYTES, 1, INT64_C(1) << 40), "SIZE",
     "largest request body (413 past it, sent before the body is read)", NULL, NULL},
    {"max-body-memory", NUM(max_body_memory, U_BYTES, 0, INT64_C(1) << 50), "SIZE",
     "request bodies held at once, all connections together, counted as their bytes arrive "
     "(503 + Retry-After past it; one client address holds at most a quarter while others hold "
     "bodies too)",
     NULL, "half the memory of the machine or container, at least --max-body-bytes"},
    {"max-tensor-elements", NUM(max_tensor_elements, U_COUNT, 1, INT64_C(1) << 32), "N",
     "largest tensor (input, output, weights or parameter), in elements", NULL, NULL},
    {"max-trace-elements", NUM(max_trace_elements, U_COUNT, 1, INT64_C(1) << 32), "N",
     "largest trace, the stages it returns together, in elements (413 past it)", NULL, NULL},
    {"max-json-depth", NUM(max_json_depth, U_PLAIN, 2, 1000), "N",
     "deepest nesting of a request body", NULL, NULL},
    {"max-weights-bytes", NUM(max_weights_bytes, U_BYTES, 1, INT64_C(1) << 50), "SIZE",
     "all layers' weights held in memory together, the one being created included (507 past it, "
     "before anything is allocated)",
     "a quarter of the memory of the machine or container", NULL},
    {"max-request-flops", NUM(max_request_flops, U_FLOPS, 1, INT64_C(1) << 62), "FLOPS",
     "a forward or trace estimated (from its shapes, as describe's FLOPs) to cost more is refused "
     "with 413 too_costly before it runs (3T, 3000000000000, is about a minute of one core)",
     NULL, NULL},
    {"log-format", OPT_LOGFMT, FIELD(log_format), U_PLAIN, 0, 0, "text|json|off",
     "one line per request on stderr, as text or JSON", "text", NULL},
    {"demo", BOOL(demo), NULL, "create a demo layer \"demo\" (E=64, H=4, seed 0) at start", NULL,
     NULL},
    {"data-dir", STR(data_dir), "DIR", "keep layers in DIR", "none (layers in memory only)", NULL},
    {"watch", BOOL(watch), NULL, "pick up layers that other replicas write to the data dir", NULL,
     NULL},
    {"watch-interval-ms", NUM(watch_interval_ms, U_MS, 10, 60000), "MS",
     "with --watch: rescan the data dir this often even without inotify events", NULL, NULL},
    {"watch-poll", BOOL(watch_poll), NULL,
     "with --watch: rescan only, no inotify (changes then show within the interval)", NULL, NULL},
    {"api-key-file", STR(api_key_file), "FILE",
     "require the key in FILE for every change: its first line, without the line end and nothing "
     "else trimmed (a key that starts or ends with a space, or holds a control character, is "
     "refused at start)",
     "none", NULL},
    {"api-key", STR(api_key), "KEY",
     "the API key itself, taken as it is, refused as the file's is (prefer ATTND_API_KEY or a "
     "file)",
     "none", NULL},
    {"cors-origin", STR(cors_origin), "ORIGIN", "allow browser pages from ORIGIN (or *)",
     "none (no CORS headers)", NULL},
    {"read-only", BOOL(read_only), NULL, "refuse every request that changes a layer", NULL, NULL},
    {"auth-reads", BOOL(auth_reads), NULL,
     "reads need the API key too (probes and /metrics never do)", NULL, NULL},
    {"checkpoints-dir", STR(checkpoints_dir), "DIR",
     "let POST /v1/layers/{name}/import read Hugging Face checkpoints below DIR",
     "none (imports off)", NULL},
    {"drain-timeout", NUM(drain_timeout, U_SECONDS, 0, 3600), "SECONDS",
     "on SIGTERM/SIGINT, how long requests in flight get to finish", NULL, "close them at once"},
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
    opt->max_body_bytes = INT64_C(256) << 20;    /* an L request is 30 MB of JSON */
    opt->max_body_memory = 0;                    /* body_budget.h's default        */
    opt->max_tensor_elements = INT64_C(1) << 26; /* 256 MiB of float32           */
    opt->max_trace_elements = INT64_C(1) << 24;  /* 64 MiB of float32            */
    opt->max_json_depth = 32;
    /* a quarter of what this process may use (the smaller of the machine's RAM and its cgroup's
     * limit); --help shows the figure */
    int64_t mem = srv_memory_limit_bytes();
    opt->max_weights_bytes = mem > 0 ? mem / 4 : INT64_C(4) << 30;
    /* About a minute of one core: the demo layer (E=64, H=4: head_dim 16, the engine's least
     * efficient shape) ran at 54 GFLOP/s on one Zen 4 core at L = S = 16384 (best of repeated runs
     * on the shared build machine, 2026-11-25), 3.2e12 in 60 s; layers with head_dim 64 run at
     * 140-187 GFLOP/s on one thread (docs/benchmarks.md), so this takes them 16-21 s. */
    opt->max_request_flops = SRV_DEFAULT_MAX_REQUEST_FLOPS;
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

/* n with the largest power-of-1024 suffix that divides it ("256M", "1000"), into out. */
static void format_size(char *out, size_t size, int64_t n)
{
    static const char suffix[] = "KMGT";
    int k = -1;
    while (n != 0 && k < 3 && n % 1024 == 0) {
        n /= 1024;
        k++;
    }
    if (k < 0)
        snprintf(out, size, "%" PRId64, n);
    else
        snprintf(out, size, "%" PRId64 "%c", n, suffix[k]);
}

/* n with the largest power-of-1000 suffix that divides it ("3T", "1500"), into out. */
static void format_flops(char *out, size_t size, int64_t n)
{
    static const char suffix[] = "KMGTP";
    int k = -1;
    while (n != 0 && k < 4 && n % 1000 == 0) {
        n /= 1000;
        k++;
    }
    if (k < 0)
        snprintf(out, size, "%" PRId64, n);
    else
        snprintf(out, size, "%" PRId64 "%c", n, suffix[k]);
}

/* n in the unit's words for --help and errors ("256M", "3T", "30s", "2000ms"). */
static void format_number(char *out, size_t size, int64_t n, opt_unit unit)
{
    if (unit == U_BYTES || unit == U_COUNT)
        format_size(out, size, n);
    else if (unit == U_FLOPS)
        format_flops(out, size, n);
    else if (unit == U_SECONDS)
        snprintf(out, size, "%" PRId64 "s", n);
    else if (unit == U_MS)
        snprintf(out, size, "%" PRId64 "ms", n);
    else
        snprintf(out, size, "%" PRId64, n);
}

/* Parses v as a whole number in unit (suffixes as opt_unit says); false when it is not one. */
static bool parse_number(const char *v, opt_unit unit, int64_t *out)
{
    if (!isdigit((unsigned char)v[0])) /* no sign, no space, no empty value */
        return false;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno)
        return false;
    int64_t mul = 1, div = 1;
    const char *rest = end;
    if (unit == U_BYTES || unit == U_COUNT) {
        const char *p = strchr("KMGT", toupper((unsigned char)*rest));
        if (*rest && p) {
            for (int64_t k = 0; k <= p - "KMGT"; k++)
                mul *= 1024;
            rest++;
            if (unit == U_BYTES && (!strcasecmp(rest, "iB") || !strcasecmp(rest, "B")))
                rest += strlen(rest);
        } else if (unit == U_BYTES && !strcasecmp(rest, "B")) {
            rest++;
        }
    } else if (unit == U_FLOPS) {
        const char *p = strchr("KMGTP", toupper((unsigned char)*rest));
        if (*rest && p) {
            for (int64_t k = 0; k <= p - "KMGTP"; k++)
                mul *= 1000;
            rest++;
        }
    } else if (unit == U_SECONDS) {
        if (!strcmp(rest, "s"))
            rest++;
        else if (!strcmp(rest, "ms"))
            rest += 2, div = 1000;
    } else if (unit == U_MS) {
        if (!strcmp(rest, "ms"))
            rest += 2;
        else if (!strcmp(rest, "s"))
            rest++, mul = 1000;
    }
    if (*rest || x % div != 0 || x / div > INT64_MAX / mul)
        return false;
    *out = x / div * mul;
    return true;
}

/* What a number in unit may look like, for errors. */
static const char *number_words(opt_unit unit)
{
    switch (unit) {
    case U_BYTES:
        return "a size in bytes, optionally with K, M, G or T (powers of 1024), as in 64M";
    case U_COUNT:
        return "a whole number, optionally with K, M, G or T (powers of 1024), as in 16M";
    case U_FLOPS:
        return "a whole number of FLOPs, optionally with K, M, G, T or P (powers of 1000), as in "
               "3T";
    case U_SECONDS:
        return "whole seconds, as in 30 or 30s (or 30000ms)";
    case U_MS:
        return "milliseconds, as in 500 or 500ms, or seconds, as in 2s";
    case U_PLAIN:
        break;
    }
    return "a whole number";
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
    case OPT_NUM: {
        int64_t x;
        const bool parsed = parse_number(v, s->unit, &x);
        if (!parsed || x < s->min || x > s->max) {
            char lo[32], hi[32];
            format_number(lo, sizeof lo, s->min, s->unit);
            format_number(hi, sizeof hi, s->max, s->unit);
            if (parsed) /* well formed, out of range: say so, not that it is no number */
                return srv_error_set(err, SRV_E_BAD_REQUEST, s->name,
                                     "%s: '%s' is out of range: it takes %s, from %s to %s", from,
                                     v, number_words(s->unit), lo, hi);
            return srv_error_set(err, SRV_E_BAD_REQUEST, s->name,
                                 "%s: '%s' is not %s, from %s to %s", from, v,
                                 number_words(s->unit), lo, hi);
        }
        if (s->size == sizeof(int))
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

    /* --help and --version answer whatever the environment holds: an operator reading them in a
     * container whose variables are wrong is finding out why */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
            return SRV_OPTIONS_HELP;
        if (!strcmp(argv[i], "--version") || !strcmp(argv[i], "-V"))
            return SRV_OPTIONS_VERSION;
        /* a flag's value is no flag: "--api-key -V" gives the key "-V" */
        const char *name = argv[i] + 2;
        const opt_spec *f =
            !strncmp(argv[i], "--", 2) && !strchr(name, '=') ? find_spec(name, strlen(name)) : NULL;
        i += f && f->kind != OPT_BOOL;
    }
    for (size_t i = 0; i < NSPECS; i++) {
        twin_name(twin, sizeof twin, specs[i].name);
        const char *v = getenv(twin);
        if (!v || !*v) /* set but empty (compose's ${ATTND_PORT:-}) is unset, as for ATTND_ISA */
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
            return srv_error_set(err, SRV_E_BAD_REQUEST, "",
                                 "unexpected argument '%s' (see --help)", a);
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
        char flag[96]; /* "--name", without "=value" */
        snprintf(flag, sizeof flag, "%.*s",
                 (int)(len + 2 < sizeof flag ? len + 2 : sizeof flag - 1), a);
        if (set_value(opt, s, v, flag, err) < 0)
            return -1;
        blas_given |= s->offset == offsetof(srv_options, blas_threads);
        inflight_given |= s->offset == offsetof(srv_options, max_inflight);
    }

    /* The engine pool serves a pass that runs alone (forward.c): it may take every core. Passes
     * that overlap run one thread each, on their HTTP threads (--threads <= cores by default). */
    const int cores = srv_ncores();
    if (!blas_given)
        opt->blas_threads = cores;
    if (!inflight_given) /* more HTTP threads serve more connections, not more passes at once */
        opt->max_inflight = opt->threads < cores ? opt->threads : cores;
    /* threads computing never outnumber the cores (SPEC §4): a pass alone takes --blas-threads,
     * overlapping passes one each, up to --max-inflight of them */
    opt->note[0] = '\0';
    if (opt->blas_threads > cores || opt->max_inflight > cores) {
        snprintf(opt->note, sizeof opt->note,
                 "--blas-threads %d, --max-inflight %d: capped at the %d cores this process may "
                 "use, so that the threads computing never outnumber them",
                 opt->blas_threads, opt->max_inflight, cores);
        opt->blas_threads = opt->blas_threads > cores ? cores : opt->blas_threads;
        opt->max_inflight = opt->max_inflight > cores ? cores : opt->max_inflight;
    }
    if (opt->max_body_memory && opt->max_body_memory < opt->max_body_bytes) {
        char memory[32], bytes[32];
        format_size(memory, sizeof memory, opt->max_body_memory);
        format_size(bytes, sizeof bytes, opt->max_body_bytes);
        return srv_error_set(err, SRV_E_BAD_REQUEST, "max-body-memory",
                             "--max-body-memory (%s) is less than --max-body-bytes (%s): bodies "
                             "between the two could never be read; raise the first or lower the "
                             "second",
                             memory, bytes);
    }
    /* ATTND_ISA is the engine's (lib/mha_isa.c), which takes any other value as no cap: a typo
     * (avx-2, AVX2) would lift the cap an operator meant to set, so the daemon refuses it */
    const char *isa = getenv("ATTND_ISA");
    mha_isa cap;
    if (isa && *isa && !mha_isa_from_name(isa, &cap))
        return srv_error_set(err, SRV_E_BAD_REQUEST, "ATTND_ISA",
                             "ATTND_ISA: '%.40s' is not generic, avx2 or avx512 (it caps the "
                             "engine's kernels; leave it unset for the CPU's best)",
                             isa);
    return healthcheck ? SRV_OPTIONS_HEALTHCHECK : SRV_OPTIONS_RUN;
}

/* ATTND_* names that are not a flag's twin but are read by the engine (ATTND_ISA, ATTND_JIT; the
 * test switches, ATTND_TEST_* and ATTND_POISON_SCRATCH) or by the repository's tools and scripts,
 * which run beside a daemon in one environment */
static const char *const other_names[] = {
    "ATTND_ISA", "ATTND_JIT",    "ATTND_POISON_SCRATCH", "ATTND_URL",
    "ATTND_BIN", "ATTND_BINARY", "ATTND_TEST_IMAGE",     "ATTND_CHECK_SAME_ONLY"};

/* Edit distance of a and b (each at most 63 characters; longer: a large number). */
static size_t distance(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b), row[64];
    if (na >= 64 || nb >= 64)
        return 64;
    for (size_t j = 0; j <= nb; j++)
        row[j] = j;
    for (size_t i = 1; i <= na; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= nb; j++) {
            size_t up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            best = up + 1 < best ? up + 1 : best;
            best = row[j - 1] + 1 < best ? row[j - 1] + 1 : best;
            diag = up;
            row[j] = best;
        }
    }
    return row[nb];
}

int srv_options_unknown_env(char *const *env, char *out, size_t n)
{
    out[0] = '\0';
    int count = 0;
    char twin[96];
    for (; env && *env; env++) {
        const char *e = *env, *eq = strchr(e, '=');
        size_t len = eq ? (size_t)(eq - e) : strlen(e);
        char name[96];
        if (len >= sizeof name || strncmp(e, "ATTND_", 6) != 0)
            continue;
        memcpy(name, e, len);
        name[len] = '\0';
        if (!strncmp(name, "ATTND_TEST_", 11))
            continue;
        bool known = false;
        const char *near = NULL;
        size_t best = 4; /* a suggestion within three edits */
        for (size_t i = 0; i < NSPECS + sizeof other_names / sizeof *other_names && !known; i++) {
            const char *k = other_names[0];
            if (i < NSPECS) {
                twin_name(twin, sizeof twin, specs[i].name);
                k = twin;
            } else {
                k = other_names[i - NSPECS];
            }
            size_t d = distance(name, k);
            known = d == 0;
            if (d < best) {
                best = d;
                near = i < NSPECS ? specs[i].name : NULL;
            }
        }
        if (known)
            continue;
        if (count++ == 0) {
            char hint[192] = "";
            if (near) {
                twin_name(twin, sizeof twin, near);
                snprintf(hint, sizeof hint, "; did you mean %s (--%s)?", twin, near);
            }
            snprintf(out, n,
                     "%s is not a setting of this daemon and is ignored%s; every flag --some-name "
                     "has the twin ATTND_SOME_NAME (see --help)",
                     name, hint);
        }
    }
    return count;
}

void srv_options_usage(void *fp, const char *argv0)
{
    FILE *f = fp;
    srv_options d;
    srv_options_default(&d);
    fprintf(
        f,
        "usage: %s [flags]\n"
        "attnd serves torch.nn.MultiheadAttention layers over HTTP (/v1, /v2; see /openapi.yaml).\n"
        "\n"
        "Every flag --some-name can also be set as the environment variable ATTND_SOME_NAME;\n"
        "the flag wins. Sizes and counts take K, M, G or T (powers of 1024): 64M; FLOPs take\n"
        "K, M, G, T or P (powers of 1000): 3T. Durations take s or ms: 30s, 500ms; a bare\n"
        "number is in the unit the flag names.\n\n",
        argv0);
    char twin[96], def[160], left[96], num[32];
    for (size_t i = 0; i < NSPECS; i++) {
        const opt_spec *s = &specs[i];
        const char *field = (const char *)&d + s->offset;
        int64_t value = 0;
        if (s->kind == OPT_NUM)
            value = s->size == sizeof(int) ? *(const int *)field : *(const int64_t *)field;
        if (s->dflt && s->kind == OPT_NUM) { /* a default that depends on the machine */
            format_number(num, sizeof num, value, s->unit);
            snprintf(def, sizeof def, "default: %s (here %s)", s->dflt, num);
        } else if (s->dflt)
            snprintf(def, sizeof def, "default: %s", s->dflt);
        else if (s->kind == OPT_BOOL)
            snprintf(def, sizeof def, "default: off");
        else if (s->kind == OPT_STR)
            snprintf(def, sizeof def, "default: %s", *field ? field : "none");
        else if (value == 0 && s->zero)
            snprintf(def, sizeof def, "default: 0 = %s", s->zero);
        else {
            format_number(num, sizeof num, value, s->unit);
            snprintf(def, sizeof def, "default: %s", num);
        }
        if (s->zero && !(value == 0 && !s->dflt && s->kind == OPT_NUM)) {
            size_t dl = strlen(def);
            snprintf(def + dl, sizeof def - dl, "; 0 = %s", s->zero);
        }
        twin_name(twin, sizeof twin, s->name);
        snprintf(left, sizeof left, "--%s%s%s", s->name, s->arg ? " " : "", s->arg ? s->arg : "");
        fprintf(f, "  %-28s %s\n  %-28s   %s  [%s]\n", left, s->help, "", def, twin);
    }
    fprintf(f, "  %-28s %s\n  %-28s %s\n", "--help", "this text", "--version",
            "print the version and exit");
    fprintf(f, "  %-28s %s\n", "--healthcheck",
            "GET /healthz of the daemon at --host/--port; exit 0 if it answers 200, else 1");
}
