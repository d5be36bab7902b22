/*
 * fuzz_options.c - the daemon's option parser (app/options.h): flags, their ATTND_* twins, values
 * with units (64M, 30s, 500ms).
 *
 * Input: NUL-separated words. A word "ATTND_X=v" is put in the environment (and taken out after the
 * input), every other word is an argument after argv[0].
 * Checks:
 *   - a refusal is a 400 with a message, and the same arguments give the same answer and the same
 *     settings (bytes of srv_options) every time;
 *   - settings taken from --name=value are the same as from --name value, and as from the twin
 *     ATTND_NAME=value (for the first such argument);
 *   - giving every argument twice changes nothing (the last one wins, and it is the same);
 *   - when a number is refused, the bounds the message states ("from 1 to 64M") are values the
 *     parser takes for that flag: what is written for a person reads back.
 * Once, at start: every default --help shows as a single word ("default: 256M", "off"; not
 * "none", which means not set) given back as the flag's value changes nothing.
 */
#include <ctype.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/options.h"
#include "fuzz_fail.h"

#define MAX_WORDS 64

static int parse(srv_options *o, int argc, char **argv, srv_error *err)
{
    memset(err, 0, sizeof *err);
    return srv_options_parse(o, argc, argv, err);
}

static int parse2(srv_options *o, const char *a, const char *b, srv_error *err)
{
    char *argv[] = {"attnd", (char *)a, (char *)b, NULL};
    return parse(o, b ? 3 : a ? 2 : 1, argv, err);
}

/* The defaults --help shows, given back one by one. */
static void check_help_defaults(void)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    srv_options_usage(f, "attnd");
    fclose(f);
    srv_options base, o;
    srv_error err;
    if (parse2(&base, NULL, NULL, &err) != SRV_OPTIONS_RUN)
        FAIL("no arguments: %s", err.message);
    char flag[96] = "";
    int checked = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char *p = line + strspn(line, " ");
        if (strncmp(p, "--", 2) == 0) {
            snprintf(flag, sizeof flag, "%.*s", (int)strcspn(p, " "), p);
            continue;
        }
        if (strncmp(p, "default: ", 9) != 0 || !flag[0])
            continue;
        p += 9;
        size_t n = strcspn(p, " ;");
        if (n == 0 || (p[n] && p[n] != ';' && strncmp(p + n, "  [", 3) != 0) ||
            (n == 4 && strncmp(p, "none", 4) == 0))
            continue; /* words, not a value ("none": not set) */
        char arg[256];
        snprintf(arg, sizeof arg, "%s=%.*s", flag, (int)n, p);
        int rc = parse2(&o, arg, NULL, &err);
        if (rc != SRV_OPTIONS_RUN)
            FAIL("--help shows %s, and the parser refuses it: %s", arg, err.message);
        if (memcmp(&o, &base, sizeof o) != 0)
            FAIL("--help shows %s, and giving it changes the settings", arg);
        checked++;
    }
    if (checked < 5)
        FAIL("only %d defaults found in --help", checked);
    free(text);
}

/* "... from A to B" in a refusal of flag: A and B must be taken. */
static void check_bounds(const char *flag, const char *message)
{
    const char *from = strstr(message, ", from ");
    if (!from || strlen(message) >= sizeof ((srv_error *)0)->message - 1)
        return; /* none, or the message was cut */
    char lo[64], hi[64];
    if (sscanf(from, ", from %63s to %63s", lo, hi) != 2)
        return;
    srv_options o;
    srv_error err;
    for (int i = 0; i < 2; i++) {
        char arg[160];
        snprintf(arg, sizeof arg, "%s=%s", flag, i ? hi : lo);
        int rc = parse2(&o, arg, NULL, &err);
        /* --max-body-memory below --max-body-bytes is refused for another reason */
        if (rc < 0 && !strstr(err.message, "is less than"))
            FAIL("the refusal says \"%s\", and %s is refused: %s", message, arg, err.message);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool started;
    if (!started) {
        check_help_defaults();
        started = true;
    }
    char *buf = malloc(size + 1);
    memcpy(buf, data, size);
    buf[size] = '\0';
    char *argv[2 * MAX_WORDS + 2] = {"attnd"};
    char *envs[MAX_WORDS];
    int argc = 1, nenv = 0;
    for (size_t i = 0; i <= size && argc <= MAX_WORDS;) {
        char *w = buf + i;
        size_t n = strlen(w);
        if (strncmp(w, "ATTND_", 6) == 0 && strchr(w, '=') && nenv < MAX_WORDS) {
            envs[nenv++] = w;
            *strchr(w, '=') = '\0';
            setenv(w, w + strlen(w) + 1, 1);
        } else if (n || i < size) {
            argv[argc++] = w;
        }
        i += n + 1;
    }
    argv[argc] = NULL;

    srv_options a, b;
    srv_error err, err2;
    int rc = parse(&a, argc, argv, &err);
    if (rc < 0 && (err.code != SRV_E_BAD_REQUEST || !err.message[0]))
        FAIL("refused with code %d: '%s'", err.code, err.message);
    if (rc > SRV_OPTIONS_HEALTHCHECK)
        FAIL("action %d", rc);
    int rc2 = parse(&b, argc, argv, &err2);
    if (rc2 != rc || strcmp(err.message, err2.message) != 0 ||
        (rc >= 0 && memcmp(&a, &b, sizeof a) != 0))
        FAIL("the same arguments, another answer");
    if (rc < 0 && strstr(err.message, ", from ") && strncmp(err.message, "--", 2) == 0) {
        char flag[96]; /* the message starts with the flag: "--port: '70000' is not ..." */
        snprintf(flag, sizeof flag, "%.*s", (int)strcspn(err.message, ":"), err.message);
        check_bounds(flag, err.message);
    }

    if (rc == SRV_OPTIONS_RUN || rc == SRV_OPTIONS_HEALTHCHECK) {
        /* every argument twice */
        char *twice[2 * MAX_WORDS + 2] = {"attnd"};
        for (int i = 1; i < argc; i++)
            twice[i] = twice[i + argc - 1] = argv[i];
        twice[2 * argc - 1] = NULL;
        if (parse(&b, 2 * argc - 1, twice, &err2) != rc || memcmp(&a, &b, sizeof a) != 0)
            FAIL("every argument given twice changes the answer: %s", err2.message);
        /* --name=value as "--name value", and as its twin */
        char *eq = argc > 1 && strncmp(argv[1], "--", 2) == 0 ? strchr(argv[1], '=') : NULL;
        if (eq && argc == 2) {
            char *name = strndup(argv[1], (size_t)(eq - argv[1]));
            char *split[] = {"attnd", name, eq + 1, NULL};
            int rs = parse(&b, 3, split, &err2);
            bool boolean = rs < 0 && strstr(err2.message, "unexpected argument"); /* --demo true */
            if (!boolean && (rs != rc || memcmp(&a, &b, sizeof a) != 0))
                FAIL("%s and \"%s %s\" differ: %s", argv[1], name, eq + 1, err2.message);
            char twin[128] = "ATTND_";
            size_t k = 6;
            for (const char *c = name + 2; *c && k < sizeof twin - 1; c++)
                twin[k++] = *c == '-' ? '_' : (char)toupper((unsigned char)*c);
            twin[k] = '\0';
            if (!getenv(twin) && strlen(name) > 2) {
                setenv(twin, eq + 1, 1);
                char *none[] = {"attnd", NULL};
                int rt = parse(&b, 1, none, &err2);
                unsetenv(twin);
                if (rt != SRV_OPTIONS_RUN || memcmp(&a, &b, sizeof a) != 0)
                    FAIL("%s and %s=%s differ: %s", argv[1], twin, eq + 1, err2.message);
            }
            free(name);
        }
    }
    for (int i = 0; i < nenv; i++)
        unsetenv(envs[i]);
    free(buf);
    return 0;
}
