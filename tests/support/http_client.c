/*
 * http_client.c - in-process daemon and libcurl helpers for the tests (see http_client.h).
 */
#include "http_client.h"

#include "check.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <curl/curl.h>

void hc_options(srv_options *opt)
{
    srv_options_default(opt);
    snprintf(opt->host, sizeof opt->host, "127.0.0.1");
    opt->port = 0;
    opt->log_format = SRV_LOG_OFF;
}

srv_daemon *hc_start(const srv_options *opt)
{
    srv_options o;
    if (!opt) {
        hc_options(&o);
        opt = &o;
    }
    static bool curl_ready;
    if (!curl_ready) {
        curl_global_init(CURL_GLOBAL_DEFAULT);
        curl_ready = true;
    }
    srv_error err = {0};
    srv_daemon *d = srv_daemon_start(opt, &err);
    if (!d)
        fprintf(stdout, "hc_start: %s\n", err.message);
    return d;
}

void hc_stop(srv_daemon *d)
{
    srv_daemon_stop(d);
}

typedef struct growbuf {
    char *p;
    size_t len, cap;
} growbuf;

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *ud)
{
    growbuf *g = ud;
    size_t n = size * nmemb;
    if (g->len + n + 1 > g->cap) {
        size_t cap = (g->len + n + 1) * 2;
        char *p = realloc(g->p, cap);
        if (!p)
            return 0;
        g->p = p;
        g->cap = cap;
    }
    memcpy(g->p + g->len, ptr, n);
    g->len += n;
    g->p[g->len] = '\0';
    return n;
}

typedef struct reader {
    const char *p;
    size_t left;
} reader;

static size_t on_read(char *buf, size_t size, size_t nitems, void *ud)
{
    reader *r = ud;
    size_t n = size * nitems;
    if (n > r->left)
        n = r->left;
    /* small pieces, so chunked bodies really arrive in several chunks */
    if (n > 65536)
        n = 65536;
    memcpy(buf, r->p, n);
    r->p += n;
    r->left -= n;
    return n;
}

int hc_request_port(int port, const char *method, const char *path, const char *content_type,
                    const char *body, long len, const hc_opts *opts, hc_response *out)
{
    memset(out, 0, sizeof *out);
    hc_opts none = {0};
    if (!opts)
        opts = &none;
    CURL *c = curl_easy_init();
    if (!c)
        return -1;
    char url[2048], ct[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    growbuf bodybuf = {0}, headbuf = {0};
    struct curl_slist *hl = NULL;
    reader rd = {0};

    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(c, CURLOPT_PATH_AS_IS, 1L); /* send "/.." as it is: tests need it */
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 120L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &bodybuf);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &headbuf);
    if (!strcmp(method, "HEAD"))
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    else
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (body) {
        size_t n = len < 0 ? strlen(body) : (size_t)len;
        if (opts->chunked) {
            rd.p = body;
            rd.left = n;
            curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
            curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read);
            curl_easy_setopt(c, CURLOPT_READDATA, &rd);
            hl = curl_slist_append(hl, "Transfer-Encoding: chunked");
        } else {
            curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
            curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)n);
        }
        if (opts->no_content_type) {
            hl = curl_slist_append(hl, "Content-Type:");
        } else {
            snprintf(ct, sizeof ct, "Content-Type: %s",
                     content_type ? content_type : "application/json");
            hl = curl_slist_append(hl, ct);
        }
    }
    for (const char *const *h = opts->headers; h && *h; h++)
        hl = curl_slist_append(hl, *h);
    if (hl)
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);

    CURLcode rc = curl_easy_perform(c);
    if (rc == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out->status);
    else
        fprintf(stdout, "hc_request %s %s: %s\n", method, path, curl_easy_strerror(rc));
    curl_slist_free_all(hl);
    curl_easy_cleanup(c);
    out->body = bodybuf.p ? bodybuf.p : calloc(1, 1);
    out->len = bodybuf.len;
    out->headers = headbuf.p ? headbuf.p : calloc(1, 1);
    return rc == CURLE_OK ? 0 : -1;
}

int hc_request(srv_daemon *d, const char *method, const char *path, const char *content_type,
               const char *body, long len, const hc_opts *opts, hc_response *out)
{
    return hc_request_port(srv_daemon_port(d), method, path, content_type, body, len, opts, out);
}

void hc_response_free(hc_response *r)
{
    if (!r)
        return;
    free(r->body);
    free(r->headers);
    memset(r, 0, sizeof *r);
}

bool hc_header(const hc_response *r, const char *name, char *out, size_t size)
{
    size_t n = strlen(name);
    for (const char *line = r->headers; line && *line;) {
        const char *eol = strchr(line, '\n');
        if (!strncasecmp(line, name, n) && line[n] == ':') {
            const char *v = line + n + 1;
            while (*v == ' ')
                v++;
            size_t vl = eol ? (size_t)(eol - v) : strlen(v);
            while (vl && (v[vl - 1] == '\r' || v[vl - 1] == ' '))
                vl--;
            if (vl >= size)
                vl = size - 1;
            memcpy(out, v, vl);
            out[vl] = '\0';
            return true;
        }
        if (!eol)
            break;
        line = eol + 1;
    }
    return false;
}

json_t *hc_json(const hc_response *r)
{
    return r->body ? json_loadb(r->body, r->len, JSON_DECODE_ANY, NULL) : NULL;
}

static const char *error_member(const hc_response *r, const char *key, char *out, size_t size)
{
    out[0] = '\0';
    json_t *doc = hc_json(r);
    const char *s = json_string_value(json_object_get(json_object_get(doc, "error"), key));
    if (s)
        snprintf(out, size, "%s", s);
    json_decref(doc);
    return out;
}

const char *hc_error_code(const hc_response *r, char *out, size_t size)
{
    return error_member(r, "code", out, size);
}

const char *hc_error_field(const hc_response *r, char *out, size_t size)
{
    return error_member(r, "field", out, size);
}

int hc_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

size_t hc_send_all(int fd, const void *p, size_t n)
{
    size_t sent = 0;
    while (sent < n) {
        ssize_t w = send(fd, (const char *)p + sent, n - sent, MSG_NOSIGNAL);
        if (w <= 0)
            break;
        sent += (size_t)w;
    }
    return sent;
}

int hc_raw(int port, const char *bytes, size_t len, int timeout_ms, char *out, size_t size)
{
    int fd = hc_connect(port);
    if (fd < 0)
        return 0;
    hc_send_all(fd, bytes, len);
    int status = hc_raw_read(fd, timeout_ms, out, size);
    close(fd);
    return status;
}

int hc_raw_read(int fd, int timeout_ms, char *out, size_t size)
{
    char buf[8192];
    size_t got = 0;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, timeout_ms) <= 0)
            break;
        ssize_t r = recv(fd, buf + got, sizeof buf - 1 - got, 0);
        if (r <= 0)
            break;
        got += (size_t)r;
        if (got >= sizeof buf - 1)
            break;
    }
    buf[got] = '\0';
    if (out && size) {
        snprintf(out, size, "%s", buf);
    }
    int status = 0;
    if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1)
        status = 0;
    return status;
}

void hc_check_error(const char *file, int line, const hc_response *r, int want_status,
                    const char *want_code, const char *want_field)
{
    char code[64], field[128];
    check_record(r->status == want_status, file, line, "status %ld, want %d: %.300s", r->status,
                 want_status, r->body);
    hc_error_code(r, code, sizeof code);
    check_record(!strcmp(code, want_code), file, line, "code '%s', want '%s'", code, want_code);
    if (want_field) {
        hc_error_field(r, field, sizeof field);
        check_record(!strcmp(field, want_field), file, line, "field '%s', want '%s'", field,
                     want_field);
    }
}
