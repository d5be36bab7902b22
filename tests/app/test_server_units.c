/*
 * test_server_units.c - the daemon's pieces without HTTP: the layer registry (reference counts,
 * atomic replacement, conditional puts, names), options and their ATTND_* twins, the log line
 * formats, and the in-flight cap of the shared forward path (503 after --queue-wait-ms).
 */
#include <fcntl.h>
#include <ctype.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/forward.h"
#include "app/options.h"
#include "base/bigbuf.h"
#include "base/log.h"
#include "base/sysinfo.h"
#include "check.h"
#include "http_client.h"
#include "store/config.h"
#include "store/registry.h"

static srv_layer *make_layer(const char *name, int64_t E, uint64_t seed)
{
    mha_config cfg;
    mha_config_init(&cfg, E, 2);
    srv_error err = {0};
    srv_layer *l = srv_layer_build_init(name, &cfg, NULL, "xavier_uniform", seed, NULL, &err);
    CHECK(l != NULL, "build %s: %s", name, err.message);
    return l;
}

static void test_registry(void)
{
    srv_registry *reg = srv_registry_create();
    srv_error err = {0};
    bool replaced = true;

    srv_layer *a = make_layer("b-layer", 4, 1);
    CHECK(srv_registry_put(reg, a, 0, &replaced, &err) == 0 && !replaced, "put new");
    uint64_t va = a->version;
    srv_layer *held = srv_registry_get(reg, "b-layer", &err);
    CHECK(held == a, "get returns the entry");

    /* replace: the holder keeps the old entry, intact */
    srv_layer *b = make_layer("b-layer", 8, 2);
    CHECK(srv_registry_put(reg, b, 0, &replaced, &err) == 0 && replaced, "put replaces");
    CHECK(b->version > va, "new version %llu > %llu", (unsigned long long)b->version,
          (unsigned long long)va);
    CHECK(b->created == a->created, "created is kept across replacements");
    srv_layer *now = srv_registry_get(reg, "b-layer", NULL);
    CHECK(now == b, "get returns the new entry");
    CHECK(mha_layer_config(held->layer)->embed_dim == 4, "the old entry is still whole");
    srv_layer_release(now);

    /* conditional put */
    srv_layer *c = make_layer("b-layer", 4, 3);
    memset(&err, 0, sizeof err);
    CHECK(srv_registry_put(reg, c, va, NULL, &err) < 0 && err.code == SRV_E_CONFLICT,
          "put with a stale version is a conflict");
    memset(&err, 0, sizeof err);
    CHECK(srv_registry_put(reg, c, b->version, NULL, &err) == 0, "put with the right version");
    memset(&err, 0, sizeof err);
    CHECK(srv_registry_delete(reg, "b-layer", b->version, &err) < 0 && err.code == SRV_E_CONFLICT,
          "delete with a stale version is a conflict");

    /* list is sorted */
    srv_layer *d = make_layer("a-layer", 4, 4);
    srv_registry_put(reg, d, 0, NULL, NULL);
    srv_layer **list;
    int n = srv_registry_list(reg, &list);
    CHECK(n == 2 && !strcmp(list[0]->name, "a-layer") && !strcmp(list[1]->name, "b-layer"),
          "list sorted by name");
    srv_registry_list_free(list, n);

    /* delete: gone for new requests, alive for holders */
    CHECK(srv_registry_delete(reg, "a-layer", 0, NULL) == 0, "delete");
    memset(&err, 0, sizeof err);
    CHECK(srv_registry_get(reg, "a-layer", &err) == NULL && err.code == SRV_E_LAYER_NOT_FOUND,
          "deleted layer is not found");
    CHECK(mha_layer_param_count(d->layer) == 4, "a deleted entry held by someone stays whole");
    CHECK(srv_registry_count(reg) == 1, "one layer left");
    memset(&err, 0, sizeof err);
    CHECK(srv_registry_delete(reg, "a-layer", 0, &err) < 0 && err.code == SRV_E_LAYER_NOT_FOUND,
          "delete twice is a 404");

    srv_layer_release(held);
    srv_layer_release(a);
    srv_layer_release(b);
    srv_layer_release(c);
    srv_layer_release(d);
    srv_registry_free(reg); /* ASan proves every entry is freed exactly once */

    /* names */
    const char *good[] = {"a",
                          "A-z_0.9",
                          "x..y",
                          "0",
                          "-",
                          "_",
                          "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"};
    const char *bad[] = {
        "",   ".",   "..",
        ".a", "a b", "a/b",
        "ä",  "a\n", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        CHECK(srv_layer_name_valid(good[i], NULL), "'%s' is a valid name", good[i]);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        memset(&err, 0, sizeof err);
        CHECK(!srv_layer_name_valid(bad[i], &err) && err.code == SRV_E_BAD_NAME,
              "'%s' is not a valid name", bad[i]);
    }
}

static void test_options(void)
{
    srv_options o;
    srv_error err = {0};
    char *argv0[] = {"attnd", NULL};
    unsetenv("ATTND_PORT");
    unsetenv("ATTND_THREADS");
    CHECK(srv_options_parse(&o, 1, argv0, &err) == SRV_OPTIONS_RUN, "no flags");
    CHECK(o.port == 8080 && !strcmp(o.host, "127.0.0.1"), "defaults 127.0.0.1:8080");
    CHECK(o.threads == srv_ncores() && o.blas_threads == srv_ncores() &&
              o.max_inflight == o.threads,
          "threads %d and engine threads %d from the %d cores", o.threads, o.blas_threads,
          srv_ncores());

    setenv("ATTND_PORT", "9000", 1);
    setenv("ATTND_LOG_FORMAT", "json", 1);
    setenv("ATTND_DEMO", "1", 1);
    CHECK(srv_options_parse(&o, 1, argv0, &err) == SRV_OPTIONS_RUN && o.port == 9000 &&
              o.log_format == SRV_LOG_JSON && o.demo,
          "environment twins");
    char *argv1[] = {"attnd", "--port", "9001", "--max-body-bytes=1000", "--threads", "1", NULL};
    CHECK(srv_options_parse(&o, 6, argv1, &err) == SRV_OPTIONS_RUN && o.port == 9001 &&
              o.max_body_bytes == 1000 && o.threads == 1 && o.blas_threads == srv_ncores() &&
              o.max_inflight == 1,
          "flags win over twins; blas threads take the cores HTTP leaves");
    unsetenv("ATTND_PORT");
    unsetenv("ATTND_LOG_FORMAT");
    unsetenv("ATTND_DEMO");
    /* more HTTP threads than cores serve more connections, not more passes at once; engine
     * threads and passes in flight past the cores are capped, with a note for the start log */
    char more[16], over[16];
    snprintf(more, sizeof more, "%d", srv_ncores() + 3);
    snprintf(over, sizeof over, "%d", srv_ncores() + 1);
    char *argv2[] = {"attnd", "--threads", more, NULL};
    CHECK(srv_options_parse(&o, 3, argv2, &err) == SRV_OPTIONS_RUN &&
              o.threads == srv_ncores() + 3 && o.max_inflight == srv_ncores() && !o.note[0],
          "--threads %s: %d passes in flight, the cores (%s)", more, o.max_inflight, o.note);
    char *argv3[] = {"attnd", "--blas-threads", over, "--max-inflight", over, NULL};
    CHECK(srv_options_parse(&o, 5, argv3, &err) == SRV_OPTIONS_RUN &&
              o.blas_threads == srv_ncores() && o.max_inflight == srv_ncores() &&
              strstr(o.note, "capped at the"),
          "--blas-threads and --max-inflight %s: capped at the cores (%d, %d: %s)", over,
          o.blas_threads, o.max_inflight, o.note);

    char *bad1[] = {"attnd", "--port", "70000", NULL};
    memset(&err, 0, sizeof err);
    CHECK(srv_options_parse(&o, 3, bad1, &err) < 0 && strstr(err.message, "--port"),
          "port out of range: %s", err.message);
    char *bad2[] = {"attnd", "--prot", "1", NULL};
    memset(&err, 0, sizeof err);
    CHECK(srv_options_parse(&o, 3, bad2, &err) < 0 && strstr(err.message, "--prot"),
          "unknown flag: %s", err.message);
    char *bad3[] = {"attnd", "--threads", NULL};
    memset(&err, 0, sizeof err);
    CHECK(srv_options_parse(&o, 2, bad3, &err) < 0, "flag without its value");
    setenv("ATTND_TIMEOUT", "soon", 1);
    memset(&err, 0, sizeof err);
    CHECK(srv_options_parse(&o, 1, argv0, &err) < 0 && strstr(err.message, "ATTND_TIMEOUT"),
          "bad twin named: %s", err.message);
    unsetenv("ATTND_TIMEOUT");
    char *help[] = {"attnd", "--help", NULL};
    CHECK(srv_options_parse(&o, 2, help, &err) == SRV_OPTIONS_HELP, "--help");
    char *ver[] = {"attnd", "--version", NULL};
    CHECK(srv_options_parse(&o, 2, ver, &err) == SRV_OPTIONS_VERSION, "--version");

    FILE *f = tmpfile();
    srv_options_usage(f, "attnd");
    long n = ftell(f);
    rewind(f);
    char *text = calloc(1, (size_t)n + 1);
    CHECK(fread(text, 1, (size_t)n, f) == (size_t)n, "read usage");
    const char *must[] = {"--host",         "ATTND_HOST",       "--port",         "--threads",
                          "--blas-threads", "--max-body-bytes", "--max-inflight", "--log-format",
                          "ATTND_API_KEY",  "--data-dir",       "--cors-origin",  "--version"};
    for (size_t i = 0; i < sizeof must / sizeof *must; i++)
        CHECK(strstr(text, must[i]) != NULL, "--help mentions %s", must[i]);
    free(text);
    fclose(f);
}

/* Sizes and counts take K/M/G/T (powers of 1024), FLOPs K/M/G/T/P (powers of 1000), durations
 * s/ms, in flags and twins alike; a bad value names the option and what it takes. */
static void test_option_units(void)
{
    static const struct {
        const char *flag, *value;
        size_t offset;
        bool wide;
        int64_t want;
    } good[] = {
        {"--max-body-bytes", "64M", offsetof(srv_options, max_body_bytes), true, INT64_C(64) << 20},
        {"--max-body-bytes", "1G", offsetof(srv_options, max_body_bytes), true, INT64_C(1) << 30},
        {"--max-body-bytes", "512KiB", offsetof(srv_options, max_body_bytes), true, 512 << 10},
        {"--max-body-bytes", "2mb", offsetof(srv_options, max_body_bytes), true, 2 << 20},
        {"--max-body-bytes", "1000", offsetof(srv_options, max_body_bytes), true, 1000},
        {"--max-body-memory", "2G", offsetof(srv_options, max_body_memory), true, INT64_C(2) << 30},
        {"--max-trace-elements", "4M", offsetof(srv_options, max_trace_elements), true, 4 << 20},
        {"--max-tensor-elements", "1k", offsetof(srv_options, max_tensor_elements), true, 1024},
        {"--min-body-rate", "4K", offsetof(srv_options, min_body_rate), false, 4096},
        {"--timeout", "45s", offsetof(srv_options, timeout), false, 45},
        {"--timeout", "3000ms", offsetof(srv_options, timeout), false, 3},
        {"--header-timeout", "7", offsetof(srv_options, header_timeout), false, 7},
        {"--queue-wait-ms", "2s", offsetof(srv_options, queue_wait_ms), false, 2000},
        {"--queue-wait-ms", "250ms", offsetof(srv_options, queue_wait_ms), false, 250},
        {"--queue-wait-ms", "0", offsetof(srv_options, queue_wait_ms), false, 0},
        {"--watch-interval-ms", "1s", offsetof(srv_options, watch_interval_ms), false, 1000},
        {"--drain-timeout", "0s", offsetof(srv_options, drain_timeout), false, 0},
        /* FLOPs are told in powers of 1000 (a teraFLOP is 1e12) */
        {"--max-request-flops", "3T", offsetof(srv_options, max_request_flops), true,
         INT64_C(3000000000000)},
        {"--max-request-flops", "500g", offsetof(srv_options, max_request_flops), true,
         INT64_C(500000000000)},
        {"--max-request-flops", "2P", offsetof(srv_options, max_request_flops), true,
         INT64_C(2000000000000000)},
        {"--max-request-flops", "1000000", offsetof(srv_options, max_request_flops), true, 1000000},
    };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        for (int env = 0; env < 2; env++) {
            srv_options o;
            srv_error err = {0};
            char twin[64] = "ATTND_", arg[96];
            for (const char *f = good[i].flag + 2; *f; f++)
                twin[strlen(twin) + 1] = '\0',
                                    twin[strlen(twin)] = *f == '-' ? '_' : (char)toupper(*f);
            snprintf(arg, sizeof arg, "%s=%s", good[i].flag, good[i].value);
            char *argv[] = {"attnd", arg, NULL};
            if (env)
                setenv(twin, good[i].value, 1);
            int rc = srv_options_parse(&o, env ? 1 : 2, argv, &err);
            unsetenv(twin);
            const char *field = (const char *)&o + good[i].offset;
            int64_t got = good[i].wide ? *(const int64_t *)field : *(const int *)field;
            CHECK(rc == SRV_OPTIONS_RUN && got == good[i].want, "%s %s = %lld (got %lld: %s)",
                  env ? twin : good[i].flag, good[i].value, (long long)good[i].want, (long long)got,
                  err.message);
        }
    }

    static const struct {
        const char *flag, *value, *says;
    } bad[] = {
        {"--max-body-bytes", "64X", "K, M, G or T (powers of 1024)"},
        {"--max-body-bytes", "1.5M", "a size in bytes"},
        {"--max-body-bytes", "0", "from 1 to 1T"},
        {"--max-body-bytes", "2T", "from 1 to 1T"},
        {"--max-body-bytes", "99999999999999999999", "a size in bytes"},
        {"--max-body-bytes", "8E", "a size in bytes"},
        {"--max-trace-elements", "4MB", "a whole number, optionally with K"},
        {"--max-trace-elements", "", "a whole number"},
        {"--timeout", "500ms", "whole seconds"},
        {"--timeout", "5m", "whole seconds"},
        {"--timeout", "0", "from 1s to 86400s"},
        {"--queue-wait-ms", "1.5s", "milliseconds"},
        {"--queue-wait-ms", "-1", "milliseconds"},
        {"--port", "80a", "a whole number, from 0 to 65535"},
        {"--port", " 80", "a whole number"},
        {"--threads", "+2", "a whole number, from 1 to 1024"},
        {"--log-format", "xml", "text, json, off"},
        {"--demo", "maybe", "true/false/1/0"},
        {"--max-request-flops", "3X", "K, M, G, T or P (powers of 1000)"},
        {"--max-request-flops", "1e12", "a whole number of FLOPs"},
        {"--max-request-flops", "0", "from 1 to"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        srv_options o;
        srv_error err = {0};
        char arg[96];
        snprintf(arg, sizeof arg, "%s=%s", bad[i].flag, bad[i].value);
        char *argv[] = {"attnd", arg, NULL};
        int rc = srv_options_parse(&o, 2, argv, &err);
        char quoted[64];
        snprintf(quoted, sizeof quoted, "'%s'", bad[i].value);
        char named[80];
        snprintf(named, sizeof named, "%s: ", bad[i].flag);
        CHECK(rc < 0 && strstr(err.message, named) && strstr(err.message, quoted) &&
                  strstr(err.message, bad[i].says),
              "%s '%s' is refused naming the flag, the value and '%s': %s", bad[i].flag,
              bad[i].value, bad[i].says, err.message);
    }
    srv_options o;
    srv_error err = {0};
    char *small[] = {"attnd", "--max-body-memory", "1M", "--max-body-bytes", "2M", NULL};
    CHECK(srv_options_parse(&o, 5, small, &err) < 0 && strstr(err.message, "(1M)") &&
              strstr(err.message, "(2M)"),
          "memory below one body is refused in the units given: %s", err.message);
}

/* --help: every flag has one line of help and one line with its one default and its twin; where 0
 * is special the line says what it means. */
static void test_option_help(void)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    srv_options_usage(f, "attnd");
    fclose(f);
    int flags = 0;
    for (const char *p = text; (p = strstr(p, "\n  --"));) {
        p++;
        const char *next = strchr(p, '\n');
        if (!next || strncmp(next + 1, "    ", 4) != 0) { /* --help, --version, --healthcheck */
            p = next ? next : p + 1;
            continue;
        }
        flags++;
        const char *line = next + 1, *end = strchr(line, '\n');
        int len_line = (int)(end ? end - line : (long)strlen(line));
        char flag[64];
        snprintf(flag, sizeof flag, "%.*s", (int)strcspn(p + 2, " \n"), p + 2);
        int defaults = 0;
        for (const char *q = p; q && q < line + len_line && (q = strstr(q, "default")); q++)
            defaults += q < line + len_line;
        CHECK(defaults == 1 && strncmp(line + strspn(line, " "), "default: ", 9) == 0,
              "%s: one default, on its own line (%d): %.*s", flag, defaults, len_line, line);
        CHECK(strstr(line, "[ATTND_") != NULL && strstr(line, "[ATTND_") < line + len_line,
              "%s: the twin on the default's line", flag);
        p = line;
    }
    CHECK(flags >= 25, "--help lists the flags (%d)", flags);
    static const char *const zero[] = {"--port", "--queue-wait-ms", "--min-body-rate",
                                       "--max-body-memory", "--drain-timeout"};
    for (size_t i = 0; i < sizeof zero / sizeof *zero; i++) {
        char key[64];
        snprintf(key, sizeof key, "\n  %s ", zero[i]);
        const char *p = strstr(text, key);
        const char *line = p ? strchr(p + 1, '\n') : NULL;
        const char *end = line ? strchr(line + 1, '\n') : NULL;
        CHECK(line && end && memmem(line, (size_t)(end - line), "0 = ", 4),
              "%s says what 0 means: %.*s", zero[i], line && end ? (int)(end - line) : 0,
              line ? line : "");
    }
    CHECK(strstr(text, "default: 0 = half the memory") != NULL,
          "--max-body-memory's default says what its 0 is");
    CHECK(strstr(text, "default: 256M") && strstr(text, "default: 16M") &&
              strstr(text, "default: 30s"),
          "sizes and durations are shown in their units");
    free(text);
}

/* Runs fn with stderr going to a temporary file; returns what was written (caller frees). */
static char *capture_stderr(void (*fn)(void))
{
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    FILE *f = tmpfile();
    dup2(fileno(f), STDERR_FILENO);
    fn();
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    long n = lseek(fileno(f), 0, SEEK_END);
    char *s = calloc(1, (size_t)n + 1);
    lseek(fileno(f), 0, SEEK_SET);
    CHECK(read(fileno(f), s, (size_t)n) == n, "read captured log");
    fclose(f);
    return s;
}

static void log_json(void)
{
    srv_log_request(SRV_LOG_JSON, "POST", "/v1/layers/\"x\"/forward", 200, 10, 20, 1.5, "abc-1");
}
static void log_text(void)
{
    srv_log_request(SRV_LOG_TEXT, "GET", "/a\nb", 404, 0, 99, 0.25, "abc-2");
    srv_log_request(SRV_LOG_OFF, "GET", "/quiet", 200, 0, 0, 0, "abc-3");
}

/* What a hostile client can put in a method and a path (libmicrohttpd passes any byte but NUL,
 * CR and LF through): a terminal's clear-screen, a fake log line, quotes, bytes past ASCII. */
static const char hostile_method[] = "G\x1b[2JET";
static const char hostile_path[] = "/v1/\"x\" 200 in=0\r\n2026 \"GET\" \\ \x7f\x9b\xc3\xa9\x01";

static void log_hostile_text(void)
{
    srv_log_request(SRV_LOG_TEXT, hostile_method, hostile_path, 400, 0, 1, 0.5, "id-h1");
    srv_log(SRV_LOG_TEXT, "error",
            "a message with \x1b[31m colour and a\nsecond line, caf\xc3\xa9");
}

static void log_hostile_json(void)
{
    srv_log_request(SRV_LOG_JSON, hostile_method, hostile_path, 400, 0, 1, 0.5, "id-h2");
    srv_log(SRV_LOG_JSON, "error", "a message with \x1b[31m colour and a\nsecond line");
}

/* Lines of s that hold a byte below 0x20 (the final newline aside) or DEL; 0 = none. */
static int raw_control_lines(const char *s)
{
    int bad = 0;
    for (const char *line = s; *line;) {
        size_t n = strcspn(line, "\n");
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)line[i] < 0x20 || line[i] == 0x7f) {
                bad++;
                break;
            }
        line += n + (line[n] == '\n');
    }
    return bad;
}

static void test_log(void)
{
    char *s = capture_stderr(log_json);
    json_t *doc = json_loads(s, 0, NULL);
    CHECK(
        doc &&
            !strcmp(json_string_value(json_object_get(doc, "path")), "/v1/layers/\"x\"/forward") &&
            json_integer_value(json_object_get(doc, "status")) == 200 &&
            json_integer_value(json_object_get(doc, "bytes_in")) == 10 &&
            json_integer_value(json_object_get(doc, "bytes_out")) == 20 &&
            json_number_value(json_object_get(doc, "ms")) == 1.5 &&
            !strcmp(json_string_value(json_object_get(doc, "request_id")), "abc-1"),
        "JSON log line: %s", s);
    json_decref(doc);
    free(s);
    s = capture_stderr(log_text);
    CHECK(strstr(s, "\"GET\" \"/a\\x0ab\" 404 in=0 out=99 0.250ms id=abc-2\n") != NULL &&
              !strstr(s, "quiet") && strchr(s, '\n') == s + strlen(s) - 1,
          "text log line: method and path quoted, control bytes as \\xNN, off is silent: %s", s);
    free(s);

    /* a hostile method and path: one line each, no raw control byte, every field readable back */
    s = capture_stderr(log_hostile_text);
    int lines = 0;
    for (const char *p = s; (p = strchr(p, '\n')); p++)
        lines++;
    CHECK(lines == 2 && raw_control_lines(s) == 0, "text log: 2 lines, no raw control byte: %s", s);
    CHECK(strstr(s, "\"G\\x1b[2JET\" \"/v1/\\\"x\\\" 200 in=0\\x0d\\x0a2026 \\\"GET\\\" \\\\ "
                    "\\x7f\\x9b\\xc3\\xa9\\x01\" 400 in=0 out=1 0.500ms id=id-h1\n") != NULL,
          "text log: quotes and backslashes escaped, bytes outside printable ASCII as \\xNN: %s",
          s);
    CHECK(strstr(s, "error: a message with \\x1b[31m colour and a\\x0asecond line, caf\xc3\xa9\n"),
          "text log: a message's control bytes as \\xNN, its UTF-8 kept: %s", s);
    free(s);
    s = capture_stderr(log_hostile_json);
    lines = 0;
    const char *line = s;
    for (const char *p; (p = strchr(line, '\n')); line = p + 1) {
        json_t *o = json_loadb(line, (size_t)(p - line), 0, NULL);
        CHECK(o && json_is_object(o), "JSON log: line %d is one JSON object: %.*s", lines,
              (int)(p - line), line);
        if (lines == 0)
            CHECK(o && !strcmp(json_string_value(json_object_get(o, "method")), hostile_method),
                  "JSON log: the method reads back as sent");
        json_decref(o);
        lines++;
    }
    CHECK(lines == 2 && raw_control_lines(s) == 0, "JSON log: 2 lines, no raw control byte: %s", s);
    free(s);
}

/* The in-flight cap: with every slot taken, a forward request waits --queue-wait-ms and gets 503
 * with Retry-After; once a slot is free it runs. */
static void test_inflight(void)
{
    srv_options opt;
    hc_options(&opt);
    opt.demo = true;
    opt.max_inflight = 1;
    opt.queue_wait_ms = 50;
    srv_daemon *d = hc_start(&opt);
    if (!CHECK(d != NULL, "daemon"))
        return;
    srv_app *app = srv_daemon_app(d);
    const char *body = "{\"query\": [[0,1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9,"
                       "0,1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9,0,1,2,3]]}";
    pthread_mutex_lock(&app->inflight_lock);
    app->inflight = 1; /* the one slot is taken */
    pthread_mutex_unlock(&app->inflight_lock);
    hc_response r;
    hc_request(d, "POST", "/v1/layers/demo/forward", NULL, body, -1, NULL, &r);
    char ra[16], code[64];
    CHECK(r.status == 503 && hc_header(&r, "Retry-After", ra, sizeof ra) &&
              !strcmp(hc_error_code(&r, code, sizeof code), "unavailable"),
          "busy: %ld %s", r.status, r.body);
    hc_response_free(&r);
    hc_request(d, "GET", "/v1/layers/demo", NULL, NULL, 0, NULL, &r);
    CHECK(r.status == 200, "other routes are not capped");
    hc_response_free(&r);
    pthread_mutex_lock(&app->inflight_lock);
    app->inflight = 0;
    pthread_mutex_unlock(&app->inflight_lock);
    hc_request(d, "POST", "/v1/layers/demo/forward", NULL, body, -1, NULL, &r);
    CHECK(r.status == 200, "a free slot: %ld", r.status);
    hc_response_free(&r);
    CHECK(app->inflight == 0, "the slot is given back");
    hc_stop(d);
}

/* The large-block cache: a released block is handed out again, and a buffer made from it still
 * grows (it is malloc'd memory) and can be freed or released. */
static void test_bigbuf(void)
{
    srv_buf b;
    srv_buf_init(&b);
    CHECK(srv_bigbuf_reserve(&b, 3 << 20) == 0 && b.cap > (3u << 20) && b.len == 0, "reserve");
    memset(b.data, 7, 3 << 20);
    void *first = b.data;
    srv_bigbuf_free(&b);
    CHECK(b.data == NULL && b.cap == 0, "released");
    srv_buf_init(&b);
    CHECK(srv_bigbuf_reserve(&b, 2 << 20) == 0 && b.data == first, "the cached block comes back");
    b.len = (2 << 20) - 10;
    char more[64 << 10];
    memset(more, 1, sizeof more);
    for (int i = 0; i < 40; i++)
        srv_buf_append(&b, more, sizeof more);
    CHECK(!b.failed && b.len == (2u << 20) - 10 + 40 * sizeof more, "a cached block grows");
    srv_bigbuf_free(&b);
    srv_buf_init(&b);
    CHECK(srv_bigbuf_reserve(&b, 100) == 0 && b.cap >= 100, "small reserves are plain");
    srv_bigbuf_free(&b);
    srv_bigbuf_drop_all();
}

static void test_bigbuf_arrays(void)
{
    /* small arrays: plain memory, aligned */
    float *small = srv_bigbuf_array_alloc(100 * sizeof(float));
    CHECK(small && ((uintptr_t)small & 63) == 0, "a small array is 64-byte aligned");
    for (int i = 0; i < 100; i++)
        small[i] = (float)i;
    srv_bigbuf_array_free(small);
    srv_bigbuf_array_free(NULL);

    /* mid-size: mapped, aligned, cached and reused when it fits */
    size_t mid = (2u << 20) + 12;
    char *a = srv_bigbuf_array_alloc(mid);
    CHECK(a && ((uintptr_t)a & 63) == 0, "a 2 MB array is 64-byte aligned");
    memset(a, 5, mid);
    srv_bigbuf_array_free(a);
    char *b = srv_bigbuf_array_alloc(1u << 20);
    CHECK(b == a, "the cached array comes back for a smaller request");
    CHECK(b[0] == 5 && b[(1u << 20) - 1] == 5, "and keeps its pages");
    char *c = srv_bigbuf_array_alloc(3u << 20);
    CHECK(c && c != b, "a larger request gets a fresh array");
    memset(c, 1, 3u << 20);

    /* huge: 2 MB aligned */
    char *h = srv_bigbuf_array_alloc((5u << 20) + 1);
    CHECK(h && ((uintptr_t)h & ((2u << 20) - 1)) == 0, "arrays from 4 MB on are 2 MB aligned");
    memset(h, 2, (5u << 20) + 1);
    srv_bigbuf_array_free(h);
    srv_bigbuf_array_free(c);
    srv_bigbuf_array_free(b);
    char *again = srv_bigbuf_array_alloc(5u << 20);
    CHECK(again == h, "the smallest cached array that fits is chosen");
    srv_bigbuf_array_free(again);

    /* more arrays than the cache keeps: all freed, none lost (LeakSanitizer and munmap see the
     * rest) */
    char *many[SRV_BIGBUF_MAX_ARRAYS + 3];
    for (int i = 0; i < SRV_BIGBUF_MAX_ARRAYS + 3; i++) {
        many[i] = srv_bigbuf_array_alloc(((size_t)1 << 20) + (size_t)i * 4096);
        CHECK(many[i] != NULL, "array %d", i);
        if (many[i])
            many[i][0] = 1;
    }
    for (int i = 0; i < SRV_BIGBUF_MAX_ARRAYS + 3; i++)
        srv_bigbuf_array_free(many[i]);
    srv_bigbuf_drop_all();
}

int main(void)
{
    test_bigbuf();
    test_bigbuf_arrays();
    test_registry();
    test_options();
    test_option_units();
    test_option_help();
    test_log();
    test_inflight();
    return check_report();
}
