/*
 * bench_http.h - one HTTP request from a benchmark's libcurl client to the daemon it runs
 * in-process (bench_v2.c, bench_select.c): the body collected, and /v2's
 * Inference-Header-Content-Length read from the reply's headers.
 */
#ifndef ATTND_BENCH_HTTP_H
#define ATTND_BENCH_HTTP_H

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/buf.h"

static inline size_t bench_on_data(char *p, size_t size, size_t n, void *ud)
{
    return srv_buf_append(ud, p, size * n) == 0 ? size * n : 0;
}

static inline size_t bench_on_header(char *p, size_t size, size_t n, void *ud)
{
    size_t len = size * n;
    const char *key = "inference-header-content-length:";
    if (len > strlen(key) && strncasecmp(p, key, strlen(key)) == 0)
        *(long *)ud = strtol(p + strlen(key), NULL, 10);
    return len;
}

/* One request; resp gets the body, *ihcl the Inference-Header-Content-Length (-1 if none).
 * Returns the HTTP status, or -1. */
static inline long bench_request(CURL *c, const char *method, const char *url, const char *body,
                                 size_t len, const char *ctype, long ihcl_out, srv_buf *resp,
                                 long *ihcl)
{
    struct curl_slist *h = NULL;
    char line[96];
    if (ctype) {
        snprintf(line, sizeof line, "Content-Type: %s", ctype);
        h = curl_slist_append(h, line);
    }
    if (ihcl_out >= 0) {
        snprintf(line, sizeof line, "Inference-Header-Content-Length: %ld", ihcl_out);
        h = curl_slist_append(h, line);
    }
    h = curl_slist_append(h, "Expect:");
    resp->len = 0;
    *ihcl = -1;
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    }
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, bench_on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, resp);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, bench_on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, ihcl);
    long status = -1;
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(h);
    return status;
}

#endif
