/*
 * bench_http_post.c - times one large POST at a time against a running daemon, and reads the daemon's
 * own share of each request from its Server-Timing header.
 *
 *   bench_http_post URL BODY_FILE [--repeats N] [--upload-buffer BYTES] [--download-buffer BYTES]
 *
 * Why: a base64 L request moves 16.8 MB each way. How long the client takes to push and drain those
 * bytes depends on the client, not on attnd: the curl command line sends from a 64 KB buffer and
 * reads into 100 KB, and on a 2-core machine it needs about 18 ms of the request's ~90 for that alone
 * (measured against a sink that does nothing but read and write). This tool is libcurl with buffers
 * sized for bulk transfer (2 MB up, 1 MB down by default, libcurl's largest upload buffer), so the
 * request time it reports is mostly the daemon's; run_http.sh prints it next to the curl command
 * line's figure, both as ratios to the pass inside the same request.
 *
 * Each request uses a new connection, as a one-off client would. The first request is a warm-up
 * (the daemon's buffers of that size are faulted in then) and is reported but left out of the median.
 * Output: one line per request (total ms, Server-Timing phases), then
 *   median: total T ms, pass P ms, request/pass R
 * Exit status 1 when a request fails or answers other than 200.
 */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct {
    double body, parse, pass, write; /* ms, from Server-Timing; -1 when absent */
} timing;

static size_t discard(char *p, size_t size, size_t n, void *ud)
{
    (void)p;
    *(size_t *)ud += size * n;
    return size * n;
}

/* "name;dur=12.5" inside the header line → 12.5, or -1 */
static double timing_field(const char *line, size_t len, const char *name)
{
    size_t nl = strlen(name);
    for (size_t i = 0; i + nl + 5 <= len; i++) {
        if (strncmp(line + i, name, nl) == 0 && strncmp(line + i + nl, ";dur=", 5) == 0 &&
            (i == 0 || line[i - 1] == ' ' || line[i - 1] == ','))
            return strtod(line + i + nl + 5, NULL);
    }
    return -1;
}

static size_t on_header(char *p, size_t size, size_t n, void *ud)
{
    size_t len = size * n;
    const char *key = "server-timing:";
    if (len > strlen(key) && strncasecmp(p, key, strlen(key)) == 0) {
        timing *t = ud;
        t->body = timing_field(p, len, "body");
        t->parse = timing_field(p, len, "parse");
        t->pass = timing_field(p, len, "pass");
        t->write = timing_field(p, len, "write");
    }
    return len;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static char *read_file(const char *path, long *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *data = NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (*len = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (data = malloc((size_t)*len)) && fread(data, 1, (size_t)*len, f) != (size_t)*len) {
        free(data);
        data = NULL;
    }
    fclose(f);
    return data;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s URL BODY_FILE [--repeats N] [--upload-buffer BYTES] "
                        "[--download-buffer BYTES]\n", argv[0]);
        return 2;
    }
    const char *url = argv[1];
    int repeats = 5;
    long up = 2L << 20, down = 1L << 20;
    for (int i = 3; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--repeats") == 0)
            repeats = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--upload-buffer") == 0)
            up = atol(argv[i + 1]);
        else if (strcmp(argv[i], "--download-buffer") == 0)
            down = atol(argv[i + 1]);
        else {
            fprintf(stderr, "%s: unknown option %s\n", argv[0], argv[i]);
            return 2;
        }
    }
    if (repeats < 1 || repeats > 1000) {
        fprintf(stderr, "%s: --repeats must be 1..1000\n", argv[0]);
        return 2;
    }
    long len = 0;
    char *body = read_file(argv[2], &len);
    if (!body) {
        fprintf(stderr, "%s: cannot read %s\n", argv[0], argv[2]);
        return 1;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    double *totals = calloc((size_t)repeats, sizeof *totals);
    double *passes = calloc((size_t)repeats, sizeof *passes);
    double *ratios = calloc((size_t)repeats, sizeof *ratios);
    int status = 0;
    for (int r = 0; r <= repeats && totals && passes && ratios; r++) { /* r == 0: warm-up */
        CURL *c = curl_easy_init();
        struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
        h = curl_slist_append(h, "Expect:");
        size_t got = 0;
        timing t = {-1, -1, -1, -1};
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
        curl_easy_setopt(c, CURLOPT_UPLOAD_BUFFERSIZE, up);
        curl_easy_setopt(c, CURLOPT_BUFFERSIZE, down);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &got);
        curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(c, CURLOPT_HEADERDATA, &t);
        CURLcode rc = curl_easy_perform(c);
        long code = 0;
        curl_off_t us = 0;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
        curl_easy_getinfo(c, CURLINFO_TOTAL_TIME_T, &us);
        curl_slist_free_all(h);
        curl_easy_cleanup(c);
        if (rc != CURLE_OK || code != 200) {
            fprintf(stderr, "request %d: %s, HTTP %ld\n", r, curl_easy_strerror(rc), code);
            status = 1;
            break;
        }
        double total = us / 1e3;
        printf("%-8s total %7.1f ms  body %5.1f  parse %5.2f  pass %6.1f  write %4.1f  (%zu bytes back)\n",
               r ? "request" : "warm-up", total, t.body, t.parse, t.pass, t.write, got);
        if (r) {
            totals[r - 1] = total;
            passes[r - 1] = t.pass;
            ratios[r - 1] = t.pass > 0 ? total / t.pass : -1;
        }
    }
    if (status == 0 && totals && passes && ratios) {
        qsort(totals, (size_t)repeats, sizeof *totals, cmp_double);
        qsort(passes, (size_t)repeats, sizeof *passes, cmp_double);
        qsort(ratios, (size_t)repeats, sizeof *ratios, cmp_double);
        int m = repeats / 2;
        printf("median: total %.1f ms, pass %.1f ms, request/pass %.2f\n", totals[m], passes[m], ratios[m]);
    } else if (!totals || !passes || !ratios) {
        fprintf(stderr, "%s: out of memory\n", argv[0]);
        status = 1;
    }
    free(totals);
    free(passes);
    free(ratios);
    free(body);
    curl_global_cleanup();
    return status;
}
