/*
 * bench_http.h - one HTTP request from a benchmark's libcurl client to the daemon it runs
 * in-process (bench_v2.c, bench_select.c, bench_layers.c): the body collected, and /v2's
 * Inference-Header-Content-Length read from the reply's headers; the daemon, and a layer put there.
 */
#ifndef ATTND_BENCH_HTTP_H
#define ATTND_BENCH_HTTP_H

#include <curl/curl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/daemon.h"
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

/* A daemon in this process on 127.0.0.1, a free port, logging off, bodies up to 1 GiB, with
 * blas_threads engine threads (0: its default); exits naming `who` when it cannot start. */
static inline srv_daemon *bench_daemon(int blas_threads, const char *who)
{
    srv_options opt;
    srv_options_default(&opt);
    snprintf(opt.host, sizeof opt.host, "127.0.0.1");
    opt.port = 0;
    opt.log_format = SRV_LOG_OFF;
    if (blas_threads > 0)
        opt.blas_threads = blas_threads;
    opt.max_body_bytes = INT64_C(1) << 30;
    srv_error err = {0};
    srv_daemon *d = srv_daemon_start(&opt, &err);
    if (!d) {
        fprintf(stderr, "%s: daemon: %s\n", who, err.message);
        exit(1);
    }
    return d;
}

/* The daemon d's address into base ("http://127.0.0.1:PORT"), and a layer `name` put there:
 * embed_dim E, num_heads H, xavier_uniform weights from seed. Exits naming `who` when the PUT
 * fails. */
static inline void bench_put_layer(srv_daemon *d, CURL *c, const char *name, int64_t E, int64_t H,
                                   int seed, const char *who, char *base, size_t base_len)
{
    char put[256], url[192];
    long ihcl;
    snprintf(base, base_len, "http://127.0.0.1:%d", srv_daemon_port(d));
    snprintf(put, sizeof put,
             "{\"config\":{\"embed_dim\":%" PRId64 ",\"num_heads\":%" PRId64
             "},\"init\":{\"method\":\"xavier_uniform\",\"seed\":%d}}",
             E, H, seed);
    snprintf(url, sizeof url, "%s/v1/layers/%s", base, name);
    srv_buf resp;
    srv_buf_init(&resp);
    const long st =
        bench_request(c, "PUT", url, put, strlen(put), "application/json", -1, &resp, &ihcl);
    if (st != 200 && st != 201) {
        fprintf(stderr, "%s: PUT layer: %ld %s\n", who, st, srv_buf_cstr(&resp));
        exit(1);
    }
    srv_buf_free(&resp);
}

#endif
