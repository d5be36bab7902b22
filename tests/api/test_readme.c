/*
 * test_readme.c - the README and docs/ stay true: their curl examples run, the flags table is --help's,
 * and every link between them lands.
 *
 * Examples: every ```sh block of the sections RUN_SECTIONS (the README's first requests, the walk-through
 * in docs/tour.md, and the sections of
 * docs/ whose commands need no daemon flags) is run in order, as written, by bash in a temporary directory
 * against one in-process daemon started as `make run` starts one (--demo), with localhost:8080 rewritten
 * to the daemon's port. curl is wrapped (-sS, a time limit, the status printed after the body); every curl
 * must answer 2xx. The lines starting with '#' under a command are the output the document shows; each
 * "key": value pair shown there (strings without "...", integers, arrays of integers) must be a pair
 * of some object in the real answer, and each bare "key" shown must be a key in it; and every run of
 * numbers shown in an array (the values of a tensor, a shape) must be printed so, digit for digit and
 * in that order, in the real answer. So a document may elide (`...`), but not show a field, a name, a
 * shape or a number the daemon does not give.
 *
 * Links: in README.md and the Markdown files of docs/, every relative link names a file of the repository and, with an
 * #anchor into a Markdown file, one of its headings, as GitHub makes anchors; the README links every
 * file of docs/; no document names a document that is not in the repository.
 *
 * Flags: the table of the section FLAGS_SECTION lists exactly the flags srv_options_usage prints
 * (`attnd --help`), each once.
 *
 * Needs bash and curl (the Makefile's DEB_PKGS installs curl); traffic goes to 127.0.0.1 only.
 */
#include "check.h"
#include "http_client.h"

#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct doc_section {
    const char *file;    /* from the repository root */
    const char *heading; /* the whole heading line   */
} doc_section;

static const doc_section RUN_SECTIONS[] = {
    {"README.md", "## A walk through the API with curl"},
    {"docs/tour.md", "## A walk through the API with curl"},
    {"docs/api.md", "## Open Inference Protocol (`/v2`, KServe v2 / Triton)"},
    {"docs/api.md", "## Weights as safetensors"},
};
static const doc_section FLAGS_SECTION = {"docs/configuration.md", "## Flags"};
#define MAX_CMDS 64

typedef struct cmd {
    char *text;  /* the command as written (may span lines)        */
    char *shown; /* the '#' lines under it, '#' stripped; NULL = none */
} cmd;

/* Appends s[0..n) to *dst (malloc'd, NUL-terminated). */
static void append(char **dst, const char *s, size_t n)
{
    size_t have = *dst ? strlen(*dst) : 0;
    char *p = realloc(*dst, have + n + 1);
    if (!p)
        abort(); /* test harness: out of memory is not a README problem */
    memcpy(p + have, s, n);
    p[have + n] = '\0';
    *dst = p;
}

/* The text of the section that starts with the line heading, up to the next "## " heading; NULL if
 * absent. Points into md; *len gets its length. */
static const char *section(const char *md, const char *heading, size_t *len)
{
    const char *s = md;
    size_t hl = strlen(heading);
    while (s && !(strncmp(s, heading, hl) == 0 && (s == md || s[-1] == '\n')))
        s = (s = strstr(s + 1, heading)) ? s : NULL;
    if (!s)
        return NULL;
    const char *e = strstr(s + hl, "\n## ");
    *len = e ? (size_t)(e - s) : strlen(s);
    return s;
}

/* Splits the ```sh blocks of sec into commands with the output shown under them. A command goes on
 * while its line ends in '\' or a single quote is open. Returns the number of commands. */
static int split_commands(const char *sec, size_t len, cmd *cmds, int max)
{
    int n = 0;
    bool in_block = false, open_quote = false;
    const char *end = sec + len;
    for (const char *line = sec; line < end;) {
        const char *nl = memchr(line, '\n', (size_t)(end - line));
        size_t ll = nl ? (size_t)(nl - line) : (size_t)(end - line);
        const char *next = nl ? nl + 1 : end;
        if (strncmp(line, "```", 3) == 0) {
            in_block = !in_block && strncmp(line, "```sh", 5) == 0;
            line = next;
            continue;
        }
        if (!in_block || (ll == 0 && !open_quote)) {
            line = next;
            continue;
        }
        bool continuing = n > 0 && (open_quote || (cmds[n - 1].text && !cmds[n - 1].shown &&
                                                   strlen(cmds[n - 1].text) > 1 &&
                                                   cmds[n - 1].text[strlen(cmds[n - 1].text) - 2] == '\\'));
        if (line[0] == '#' && !open_quote) {
            if (n > 0) {
                append(&cmds[n - 1].shown, line + 1, ll - 1);
                append(&cmds[n - 1].shown, "\n", 1);
            }
        } else if (continuing) {
            append(&cmds[n - 1].text, line, ll);
            append(&cmds[n - 1].text, "\n", 1);
        } else if (n < max) {
            cmds[n].text = NULL;
            cmds[n].shown = NULL;
            append(&cmds[n].text, line, ll);
            append(&cmds[n].text, "\n", 1);
            n++;
        }
        for (size_t i = 0; i < ll; i++)
            if (line[i] == '\'')
                open_quote = !open_quote;
        line = next;
    }
    return n;
}

/* s with every "localhost:8080" replaced by "127.0.0.1:port" (malloc'd). */
static char *rewrite_port(const char *s, int port)
{
    char *out = NULL, to[32];
    snprintf(to, sizeof to, "127.0.0.1:%d", port);
    for (const char *p = s;;) {
        const char *hit = strstr(p, "localhost:8080");
        append(&out, p, hit ? (size_t)(hit - p) : strlen(p));
        if (!hit)
            break;
        append(&out, to, strlen(to));
        p = hit + strlen("localhost:8080");
    }
    return out;
}

/* True when some object inside v has key k (and, when want is not NULL, the value want). */
static bool has_pair(const json_t *v, const char *k, const json_t *want)
{
    if (json_is_object(v)) {
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)v, key, val) {
            if (strcmp(key, k) == 0 && (!want || json_equal(val, (json_t *)want)))
                return true;
            if (has_pair(val, k, want))
                return true;
        }
    } else if (json_is_array(v)) {
        size_t i;
        json_t *val;
        json_array_foreach((json_t *)v, i, val) if (has_pair(val, k, want)) return true;
    }
    return false;
}

/* Checks every "key" and "key": value of the shown output against the real answer. */
static void check_shown(const char *what, const char *shown, const json_t *real)
{
    for (const char *p = shown; (p = strchr(p, '"'));) {
        const char *q = strchr(p + 1, '"');
        if (!q)
            break;
        char key[64];
        size_t kl = (size_t)(q - p - 1);
        const char *after = q + 1;
        while (*after == ' ')
            after++;
        if (*after != ':' || kl == 0 || kl >= sizeof key) { /* a string value, not a key */
            p = q + 1;
            continue;
        }
        memcpy(key, p + 1, kl);
        key[kl] = '\0';
        const char *v = after + 1;
        while (*v == ' ')
            v++;
        /* the value, when it is a scalar or an array of integers written in full */
        size_t vl = 0;
        if (*v == '"') {
            const char *ve = strchr(v + 1, '"');
            vl = ve ? (size_t)(ve - v + 1) : 0;
        } else if (*v == '[') {
            vl = strspn(v + 1, "0123456789-, ") + 1;
            vl = v[vl] == ']' ? vl + 1 : 0;
        } else {
            vl = strspn(v, "0123456789-.");
            if (strncmp(v, "true", 4) == 0 || strncmp(v, "false", 5) == 0)
                vl = v[0] == 't' ? 4 : 5;
        }
        json_t *want = NULL;
        if (vl > 0) {
            char text[256];
            if (vl < sizeof text) {
                memcpy(text, v, vl);
                text[vl] = '\0';
                if (!strstr(text, "..."))
                    want = json_loads(text, JSON_DECODE_ANY, NULL);
            }
        }
        if (want) {
            char *wt = json_dumps(want, JSON_ENCODE_ANY | JSON_COMPACT);
            CHECK(has_pair(real, key, want), "%s shows \"%s\": %s, the daemon gives no such pair",
                  what, key, wt ? wt : "?");
            free(wt);
            json_decref(want);
        } else {
            CHECK(has_pair(real, key, NULL), "%s shows the field \"%s\", the daemon gives none",
                  what, key);
        }
        p = after + 1;
    }
}

/* A number as printed: a JSON number outside strings, or the string "-inf" (a float mask's, a
 * masked score's). */
typedef struct num_tok {
    const char *p;
    size_t n;
    bool joined; /* only array punctuation and white space since the previous number */
} num_tok;

/* The numbers of text in order, into toks (malloc'd; caller frees); returns how many. In shown
 * text (shown), each line's note after three spaces ("shape [N=1, L=3, E=4]") is not part of it. */
static size_t numbers(const char *text, bool shown, num_tok **toks)
{
    size_t n = 0, cap = 64;
    *toks = malloc(cap * sizeof **toks);
    bool joined = false, in_str = false;
    for (const char *p = text; *p;) {
        if (shown && !in_str && p[0] == ' ' && p[1] == ' ' && p[2] == ' ' && p > text &&
            p[-1] != '\n' && p[-1] != ' ') { /* a note: skip to the end of the line */
            p = strchr(p, '\n') ? strchr(p, '\n') : p + strlen(p);
            continue;
        }
        size_t len = 0;
        if (!in_str && strncmp(p, "\"-inf\"", 6) == 0)
            len = 6;
        else if (!in_str && (isdigit((unsigned char)*p) || (*p == '-' && isdigit((unsigned char)p[1]))))
            len = strspn(p, "0123456789-+.eE");
        if (len) {
            if (n == cap)
                *toks = realloc(*toks, (cap *= 2) * sizeof **toks);
            (*toks)[n++] = (num_tok){p, len, joined};
            joined = true;
            p += len;
            continue;
        }
        if (*p == '"') {
            in_str = !in_str;
            joined = false;
        } else if (in_str || !strchr("[],\n\t #", *p)) {
            joined = false;
        }
        p++;
    }
    return n;
}

/* The digits: every run of numbers the document shows in an array (a tensor's values, a shape) with
 * nothing elided between them is in the daemon's answer as it is printed there, in that order. */
static void check_digits(const char *what, const char *shown, const char *real)
{
    num_tok *s, *r;
    size_t ns = numbers(shown, true, &s), nr = numbers(real, false, &r);
    for (size_t i = 0; i < ns;) {
        size_t len = 1;
        while (i + len < ns && s[i + len].joined)
            len++;
        if (len >= 2) {
            bool found = false;
            for (size_t k = 0; k + len <= nr && !found; k++) {
                found = true;
                for (size_t j = 0; j < len && found; j++)
                    found = s[i + j].n == r[k + j].n && !memcmp(s[i + j].p, r[k + j].p, s[i + j].n);
            }
            CHECK(found, "%s shows the numbers %.*s..., which the daemon does not print so: %.300s",
                  what, (int)(s[i + len - 1].p + s[i + len - 1].n - s[i].p), s[i].p, real);
        }
        i += len;
    }
    free(s);
    free(r);
}

static void test_walkthrough(void)
{
    static cmd cmds[MAX_CMDS];
    int n = 0;
    for (size_t h = 0; h < sizeof RUN_SECTIONS / sizeof *RUN_SECTIONS; h++) {
        size_t len = 0;
        char *md = check_read_file(RUN_SECTIONS[h].file, NULL);
        const char *sec = md ? section(md, RUN_SECTIONS[h].heading, &len) : NULL;
        CHECK(sec != NULL, "%s has the section '%s'", RUN_SECTIONS[h].file, RUN_SECTIONS[h].heading);
        if (sec)
            n += split_commands(sec, len, cmds + n, MAX_CMDS - n);
        free(md);
    }
    int curls = 0;
    for (int i = 0; i < n; i++)
        curls += strstr(cmds[i].text, "curl ") != NULL;
    CHECK(curls >= 4, "the walk-through has curl commands (create, forward, trace, describe): %d", curls);

    srv_options opt;
    hc_options(&opt);
    opt.demo = true; /* as `make run` */
    srv_daemon *d = hc_start(&opt);
    CHECK(d != NULL, "daemon starts");
    if (!d)
        return;

    char script_path[] = "/tmp/attnd-readme-XXXXXX";
    int fd = mkstemp(script_path);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    CHECK(f != NULL, "temp script");
    if (!f) {
        hc_stop(d);
        return;
    }
    fprintf(f, "set -u\ncurl() { command curl -sS --max-time 30 -w '\\n@@STATUS %%{http_code}\\n' "
               "\"$@\"; }\n");
    for (int i = 0; i < n; i++) {
        char *c = rewrite_port(cmds[i].text, srv_daemon_port(d));
        fprintf(f, "echo '@@CMD %d'\n%s", i, c);
        free(c);
    }
    fprintf(f, "echo '@@CMD end'\n");
    fclose(f);

    char dir[] = "/tmp/attnd-readme-dir-XXXXXX", run[256];
    CHECK(mkdtemp(dir) != NULL, "temp dir");
    snprintf(run, sizeof run, "cd %s && bash %s 2>&1; rc=$?; rm -rf %s; exit $rc", dir, script_path,
             dir);
    FILE *p = popen(run, "r");
    char *out = NULL, chunk[4096];
    size_t got;
    while (p && (got = fread(chunk, 1, sizeof chunk, p)) > 0)
        append(&out, chunk, got);
    int rc = p ? pclose(p) : -1;
    unlink(script_path);
    CHECK(rc == 0, "the walk-through script exits 0 (got %d)", rc);
    if (!out)
        out = calloc(1, 1);

    /* each command's output lies between its marker and the next one */
    char *starts[MAX_CMDS + 1];
    for (int i = 0; i <= n; i++) {
        char mark[32];
        if (i < n)
            snprintf(mark, sizeof mark, "@@CMD %d\n", i);
        else
            snprintf(mark, sizeof mark, "@@CMD end\n");
        starts[i] = strstr(out, mark);
    }
    for (int i = 0; i <= n; i++)
        if (starts[i]) {
            char *nl = strchr(starts[i], '\n');
            *starts[i] = '\0';
            starts[i] = nl + 1;
        }
    for (int i = 0; i < n; i++) {
        char *s = starts[i];
        if (!s || !starts[i + 1]) {
            CHECK(false, "documented command %d ran to its end: %.120s", i + 1, cmds[i].text);
            continue;
        }
        char what[96];
        snprintf(what, sizeof what, "documented command %d (%.40s...)", i + 1, cmds[i].text);
        char *st = strstr(s, "@@STATUS ");
        if (!strstr(cmds[i].text, "curl ")) {
            CHECK(st == NULL && *s == '\0', "%s prints nothing: %.200s", what, s);
            continue;
        }
        int status = st ? atoi(st + 9) : 0;
        CHECK(status >= 200 && status < 300, "%s answers 2xx: %d %.300s", what, status, s);
        if (st)
            *st = '\0';
        if (cmds[i].shown) {
            json_error_t jerr;
            json_t *real = json_loads(s, JSON_DECODE_ANY, &jerr);
            CHECK(real != NULL, "%s answers JSON: %s (%.200s)", what, jerr.text, s);
            if (real)
                check_shown(what, cmds[i].shown, real);
            check_digits(what, cmds[i].shown, s);
            json_decref(real);
        }
    }
    free(out);
    for (int i = 0; i < n; i++) {
        free(cmds[i].text);
        free(cmds[i].shown);
    }
    hc_stop(d);
}

/* Counts "`--flag`" (the flag followed by '`', ' ' or ',') in text[0..len). */
static int count_flag(const char *text, size_t len, const char *flag)
{
    int n = 0;
    size_t fl = strlen(flag);
    for (const char *p = text; (p = strstr(p, flag)) && p < text + len; p += fl)
        if (p > text && p[-1] == '`' && (p[fl] == '`' || p[fl] == ' ' || p[fl] == '='))
            n++;
    return n;
}

static void test_flags(void)
{
    size_t len = 0;
    char *md = check_read_file(FLAGS_SECTION.file, NULL);
    const char *sec = md ? section(md, FLAGS_SECTION.heading, &len) : NULL;
    CHECK(sec != NULL, "%s has the section '%s'", FLAGS_SECTION.file, FLAGS_SECTION.heading);
    if (!sec) {
        free(md);
        return;
    }
    /* only the first cell of each table row counts (the others may mention flags) */
    char *rows = NULL;
    for (const char *line = sec; line < sec + len;) {
        const char *nl = strchr(line, '\n');
        size_t ll = nl ? (size_t)(nl - line) : strlen(line);
        const char *cell_end = line[0] == '|' ? memchr(line + 1, '|', ll - 1) : NULL;
        if (cell_end)
            append(&rows, line, (size_t)(cell_end - line)), append(&rows, "\n", 1);
        line = nl ? nl + 1 : line + ll;
    }
    if (!rows)
        rows = calloc(1, 1);

    char *help = NULL;
    size_t help_len = 0;
    FILE *f = open_memstream(&help, &help_len);
    srv_options_usage(f, "attnd");
    fclose(f);

    int flags = 0;
    for (const char *p = help; (p = strstr(p, "\n  --"));) {
        p += 3;
        size_t fl = strspn(p, "-abcdefghijklmnopqrstuvwxyz0123456789");
        char flag[64];
        if (fl >= sizeof flag)
            continue;
        memcpy(flag, p, fl);
        flag[fl] = '\0';
        flags++;
        CHECK(count_flag(rows, strlen(rows), flag) == 1,
              "%s's flags table lists %s (from attnd --help) once (found %d times)", FLAGS_SECTION.file, flag,
              count_flag(rows, strlen(rows), flag));
    }
    CHECK(flags >= 10, "attnd --help lists flags (%d)", flags);
    /* and nothing that --help does not list */
    for (const char *p = rows; (p = strstr(p, "`--"));) {
        p += 1;
        size_t fl = strspn(p, "-abcdefghijklmnopqrstuvwxyz0123456789");
        char flag[72];
        if (fl + 3 >= sizeof flag)
            continue;
        snprintf(flag, sizeof flag, "\n  %.*s ", (int)fl, p);
        CHECK(strstr(help, flag) != NULL, "%s's flags table lists %.*s, attnd --help does not",
              FLAGS_SECTION.file, (int)fl, p);
    }
    free(help);
    free(rows);
    free(md);
}

/* GitHub's anchor of a heading: lower case, punctuation but '-' and '_' dropped, spaces to '-'. */
static void slug(char *out, size_t size, const char *heading, size_t len)
{
    size_t o = 0;
    for (size_t i = 0; i < len && o + 1 < size; i++) {
        unsigned char c = (unsigned char)heading[i];
        if (isalnum(c) || c == '-' || c == '_' || c >= 0x80)
            out[o++] = (char)tolower(c);
        else if (c == ' ')
            out[o++] = '-';
    }
    out[o] = '\0';
}

/* True when the Markdown text md has a heading whose anchor is anchor[0..al). */
static bool has_anchor(const char *md, const char *anchor, size_t al)
{
    bool in_code = false;
    for (const char *h = md; h; h = strchr(h, '\n') ? strchr(h, '\n') + 1 : NULL) {
        if (strncmp(h, "```", 3) == 0)
            in_code = !in_code;
        if (in_code || h[0] != '#')
            continue;
        size_t hashes = strspn(h, "#");
        if (h[hashes] != ' ')
            continue;
        char a[256];
        slug(a, sizeof a, h + hashes + 1, strcspn(h + hashes + 1, "\n"));
        if (strlen(a) == al && strncmp(a, anchor, al) == 0)
            return true;
    }
    return false;
}

/* Checks every relative link "](target)" of the document path (text md): the file it names exists,
 * and an #anchor names a heading of it. Counts the links to each of docs[0..ndocs) in linked. */
static int check_links(const char *path, const char *md, char **docs, int ndocs, int *linked)
{
    int links = 0;
    const char *slash = strrchr(path, '/');
    size_t dir_len = slash ? (size_t)(slash - path + 1) : 0;
    for (const char *p = md; (p = strstr(p, "]("));) {
        p += 2;
        size_t tl = strcspn(p, ") \n");
        if (tl == 0 || strncmp(p, "http://", 7) == 0 || strncmp(p, "https://", 8) == 0 ||
            strncmp(p, "mailto:", 7) == 0)
            continue;
        char target[512];
        const char *hash = memchr(p, '#', tl);
        size_t fl = hash ? (size_t)(hash - p) : tl;
        if (fl == 0)
            snprintf(target, sizeof target, "%s", path);
        else
            snprintf(target, sizeof target, "%.*s%.*s", (int)dir_len, path, (int)fl, p);
        /* "docs/../README.md" -> "README.md" (one level is all the documents need) */
        char *up = strstr(target, "/../");
        if (up) {
            char *start = up;
            while (start > target && start[-1] != '/')
                start--;
            memmove(start, up + 4, strlen(up + 4) + 1);
        }
        links++;
        struct stat st;
        CHECK(stat(target, &st) == 0, "%s links %.*s, which is not in the repository", path, (int)tl, p);
        for (int i = 0; i < ndocs; i++)
            if (strcmp(target, docs[i]) == 0 && strcmp(path, "README.md") == 0)
                linked[i]++;
        size_t l = strlen(target);
        if (hash && l > 3 && strcmp(target + l - 3, ".md") == 0) {
            char *other = strcmp(target, path) == 0 ? NULL : check_read_file(target, NULL);
            const char *text = other ? other : md;
            CHECK(has_anchor(text, hash + 1, tl - fl - 1), "%s links %.*s, a heading %s does not have",
                  path, (int)tl, p, target);
            free(other);
        }
    }
    return links;
}

/* README.md and the Markdown files of docs/: links land, the README links every document, and nothing names a
 * document outside the repository. */
static void test_links(void)
{
    char *docs[64];
    int ndocs = 0;
    docs[ndocs++] = strdup("README.md");
    DIR *dir = opendir("docs");
    CHECK(dir != NULL, "docs/ exists");
    for (struct dirent *e; dir && (e = readdir(dir)) && ndocs < 64;) {
        size_t l = strlen(e->d_name);
        if (l > 3 && strcmp(e->d_name + l - 3, ".md") == 0) {
            char path[300];
            snprintf(path, sizeof path, "docs/%s", e->d_name);
            docs[ndocs++] = strdup(path);
        }
    }
    if (dir)
        closedir(dir);
    CHECK(ndocs >= 5, "docs/ holds the documentation (%d files)", ndocs - 1);
    int linked[64] = {0}, links = 0;
    for (int i = 0; i < ndocs; i++) {
        char *md = check_read_file(docs[i], NULL);
        CHECK(md != NULL, "%s is readable", docs[i]);
        if (!md)
            continue;
        links += check_links(docs[i], md, docs, ndocs, linked);
        static const char *const outside[] = {"SPEC", "peer kit", "/work/"};
        for (size_t o = 0; o < sizeof outside / sizeof *outside; o++)
            CHECK(strstr(md, outside[o]) == NULL, "%s names \"%s\", a document outside the repository",
                  docs[i], outside[o]);
        free(md);
    }
    for (int i = 1; i < ndocs; i++)
        CHECK(linked[i] > 0, "README.md links %s", docs[i]);
    CHECK(links > 10, "the documents link each other (%d links)", links);
    for (int i = 0; i < ndocs; i++)
        free(docs[i]);
}

int main(void)
{
    test_flags();
    test_links();
    test_walkthrough();
    return check_report();
}
