/*
 * test_http_edges.c - HTTP-level edges of the /v1 API that a bad-request corpus probes and that a
 * request.json case (tests/cases/) cannot express, because they live in headers or framing:
 * Content-Encoding, Transfer-Encoding, If-Match lists, If-None-Match, conflicting Content-Length
 * headers, Accept qualities, request targets (absolute form, "*") and Host, and safetensors
 * weights with unknown or missing parameters. In-process daemons on port 0 (one in memory, one
 * with a data dir).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sysinfo.h"
#include "check.h"
#include "codec/safetensors.h"
#include "http_client.h"
#include "tmpdir.h"

#define LAYER "{\"config\": {\"embed_dim\": 4, \"num_heads\": 2}}"
#define QUERY "{\"query\": [[1, 2, 3, 4]]}"

#define CHECK_ERROR HC_CHECK_ERROR /* status, code and field of an error reply */

/* The status of method path with body and one extra header line (or NULL). */
static long status_with(srv_daemon *d, const char *method, const char *path, const char *body,
                        const char *header)
{
    const char *hs[] = {header, NULL};
    hc_opts o = {.headers = hs};
    hc_response r;
    hc_request(d, method, path, NULL, body, body ? -1 : 0, header ? &o : NULL, &r);
    long st = r.status;
    hc_response_free(&r);
    return st;
}

/* A compressed body is refused with 415 before it is read, naming Content-Encoding; it is not
 * parsed as if it were JSON (which gave a misleading bad_json). */
static void test_content_encoding(srv_daemon *d)
{
    const char *hs[] = {"Content-Encoding: gzip", NULL};
    hc_opts o = {.headers = hs};
    hc_response r;
    hc_request(d, "POST", "/v1/layers/e/forward", NULL, QUERY, -1, &o, &r);
    CHECK_ERROR(r, 415, "unsupported_media_type", "Content-Encoding");
    hc_response_free(&r);
    hc_request(d, "PUT", "/v1/layers/gz", NULL, LAYER, -1, &o, &r);
    CHECK_ERROR(r, 415, "unsupported_media_type", "Content-Encoding");
    hc_response_free(&r);
    CHECK(status_with(d, "GET", "/v1/layers/gz", NULL, NULL) == 404, "the gzip PUT made no layer");
    CHECK(status_with(d, "POST", "/v1/layers/e/forward", QUERY, "Content-Encoding: identity") ==
              200,
          "Content-Encoding: identity is fine");
}

/* If-Match takes a list of entity tags (RFC 9110): the change happens when any is current. */
static void test_if_match_list(srv_daemon *d)
{
    hc_response r;
    hc_request(d, "PUT", "/v1/layers/m", NULL, LAYER, -1, NULL, &r);
    char etag[64] = "";
    hc_header(&r, "ETag", etag, sizeof etag);
    hc_response_free(&r);
    unsigned long long v = strtoull(etag + 1, NULL, 10);
    CHECK(v > 0, "ETag %s", etag);

    char h[128];
    snprintf(h, sizeof h, "If-Match: \"%llu\", \"%llu\"", v + 50, v + 60);
    CHECK(status_with(d, "PUT", "/v1/layers/m", LAYER, h) == 409, "no tag of the list is current");
    snprintf(h, sizeof h, "If-Match: \"%llu\", \"%llu\"", v + 50, v);
    CHECK(status_with(d, "PUT", "/v1/layers/m", LAYER, h) == 200, "the second tag is current");
    /* v is stale now */
    snprintf(h, sizeof h, "If-Match: \"%llu\",W/\"%llu\"", v, v + 70);
    CHECK(status_with(d, "DELETE", "/v1/layers/m", NULL, h) == 409, "DELETE with stale tags");

    /* empty list elements are ignored (RFC 9110 5.6.1.2: a recipient MUST), so these hold */
    snprintf(h, sizeof h, "If-Match: , \"%llu\",, \"%llu\",", v + 80, v + 1);
    CHECK(status_with(d, "PUT", "/v1/layers/m", LAYER, h) == 200, "empty list elements are ignored");
    /* a version is never written with leading zeros: "0<v>" is another tag (compared
     * character by character) */
    snprintf(h, sizeof h, "If-Match: \"0%llu\"", v + 2);
    CHECK(status_with(d, "PUT", "/v1/layers/m", LAYER, h) == 400, "a tag with a leading zero");

    const char *bad[] = {"If-Match: \"1\" \"2\"", "If-Match: ,", "If-Match: \"1\",x,\"2\"",
                         "If-Match: abc", "If-Match: \"\"", "If-Match: \"0\"", "If-Match: \"01\""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *hs[] = {bad[i], NULL};
        hc_opts o = {.headers = hs};
        hc_request(d, "DELETE", "/v1/layers/m", NULL, NULL, 0, &o, &r);
        CHECK_ERROR(r, 400, "bad_request", "If-Match");
        hc_response_free(&r);
    }
    CHECK(status_with(d, "GET", "/v1/layers/m", NULL, NULL) == 200, "m is still there");
}

/* If-None-Match on PUT /v1/layers/{name}: "*" creates only, never replaces (409 when the layer
 * exists); a list of ETags refuses a replacement of a version it names. */
static void test_if_none_match(srv_daemon *d)
{
    const char *star = "If-None-Match: *";
    CHECK(status_with(d, "PUT", "/v1/layers/once", LAYER, star) == 201, "create-only creates");
    hc_response r;
    const char *hs[] = {star, NULL};
    hc_opts o = {.headers = hs};
    hc_request(d, "PUT", "/v1/layers/once", NULL, LAYER, -1, &o, &r);
    CHECK_ERROR(r, 409, "conflict", "If-None-Match");
    char etag[64] = "";
    hc_response_free(&r);
    hc_request(d, "GET", "/v1/layers/once", NULL, NULL, 0, NULL, &r);
    hc_header(&r, "ETag", etag, sizeof etag);
    hc_response_free(&r);
    char h[96];
    snprintf(h, sizeof h, "If-None-Match: \"999999\", %s", etag);
    CHECK(status_with(d, "PUT", "/v1/layers/once", LAYER, h) == 409, "If-None-Match names it");
    CHECK(status_with(d, "PUT", "/v1/layers/once", LAYER, "If-None-Match: \"999999\"") == 200,
          "If-None-Match names another version");
    const char *both[] = {star, "If-Match: *", NULL};
    hc_opts ob = {.headers = both};
    hc_request(d, "PUT", "/v1/layers/once", NULL, LAYER, -1, &ob, &r);
    CHECK_ERROR(r, 409, "conflict", "If-None-Match");
    hc_response_free(&r);
    /* the weights of an existing layer: "*" can never hold */
    hc_request(d, "PUT", "/v1/layers/once/weights", NULL, "{}", -1, &o, &r);
    CHECK_ERROR(r, 409, "conflict", "If-None-Match");
    hc_response_free(&r);
    const char *junk[] = {"If-None-Match: junk", NULL};
    hc_opts oj = {.headers = junk};
    hc_request(d, "PUT", "/v1/layers/once", NULL, LAYER, -1, &oj, &r);
    CHECK_ERROR(r, 400, "bad_request", "If-None-Match");
    hc_response_free(&r);
}

/* Create-only PUTs racing for the same names: exactly one of them succeeds (201) for each name,
 * the others get 409 (never a 200: that would be a replacement). */
enum { RACERS = 4, RACE_NAMES = 12 };
typedef struct racer {
    srv_daemon *d;
    int created[RACE_NAMES]; /* successes (2xx) this racer got, per name */
} racer;

static void *race_main(void *p)
{
    racer *r = p;
    for (int k = 0; k < RACE_NAMES; k++) {
        char path[64];
        snprintf(path, sizeof path, "/v1/layers/race-%d", k);
        long st = status_with(r->d, "PUT", path, LAYER, "If-None-Match: *");
        r->created[k] = st >= 200 && st < 300;
    }
    return NULL;
}

static void test_if_none_match_race(srv_daemon *d)
{
    racer rs[RACERS];
    pthread_t t[RACERS];
    for (int i = 0; i < RACERS; i++) {
        rs[i] = (racer){.d = d};
        pthread_create(&t[i], NULL, race_main, &rs[i]);
    }
    for (int i = 0; i < RACERS; i++)
        pthread_join(t[i], NULL);
    for (int k = 0; k < RACE_NAMES; k++) {
        int n = 0;
        for (int i = 0; i < RACERS; i++)
            n += rs[i].created[k];
        CHECK(n == 1, "race-%d created %d times", k, n);
    }
}

/* Two Content-Length headers that disagree: which frames the body is ambiguous (request
 * smuggling), so the request is refused (RFC 9112 6.3) and the connection closed. */
static void test_conflicting_length(srv_daemon *d)
{
    char out[2048];
    const char *req = "POST /v1/layers/e/forward HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      "Content-Type: application/json\r\nContent-Length: 2\r\n"
                      "Content-Length: 25\r\n\r\n{\"query\": [[1, 2, 3, 4]]}";
    int st = hc_raw(srv_daemon_port(d), req, strlen(req), 2000, out, sizeof out);
    CHECK(st == 400 && strstr(out, "\"field\":\"Content-Length\""),
          "two Content-Lengths: %d %.300s", st, out);
    /* the same value twice is one length */
    req = "POST /v1/layers/e/forward HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
          "Content-Type: application/json\r\nContent-Length: 25\r\n"
          "Content-Length: 25\r\n\r\n{\"query\": [[1, 2, 3, 4]]}";
    st = hc_raw(srv_daemon_port(d), req, strlen(req), 2000, out, sizeof out);
    CHECK(st == 200, "the same Content-Length twice: %d %.300s", st, out);
}

/* A transfer coding other than chunked: libmicrohttpd would wait for the connection to close
 * (the client for a reply until the idle timeout); RFC 9112 6.1 says 501, at once. */
static void test_transfer_encoding(srv_daemon *d)
{
    char out[2048];
    const char *reqs[] = {
        "POST /v1/layers/e/forward HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: gzip, "
        "chunked\r\nContent-Type: application/json\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        "POST /v1/layers/e/forward HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: identity\r\n"
        "Content-Length: 25\r\nContent-Type: application/json\r\n\r\n{\"query\": [[1, 2, 3, 4]]}",
        "POST /v1/layers/e/forward HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked \r\n"
        "Content-Type: application/json\r\n\r\n19\r\n{\"query\": [[1, 2, 3, 4]]}\r\n0\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof reqs / sizeof *reqs; i++) {
        double t0 = srv_now();
        int st = hc_raw(srv_daemon_port(d), reqs[i], strlen(reqs[i]), 5000, out, sizeof out);
        CHECK(st == 501 && strstr(out, "\"field\":\"Transfer-Encoding\"") && srv_now() - t0 < 4,
              "Transfer-Encoding %zu: %d %.300s", i, st, out);
    }
    const char *ok = "POST /v1/layers/e/forward HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                     "Transfer-Encoding: Chunked\r\nContent-Type: application/json\r\n\r\n"
                     "19\r\n{\"query\": [[1, 2, 3, 4]]}\r\n0\r\n\r\n";
    int st = hc_raw(srv_daemon_port(d), ok, strlen(ok), 5000, out, sizeof out);
    CHECK(st == 200, "Transfer-Encoding: Chunked: %d %.300s", st, out);
}

/* Request targets other than a plain path: the absolute form proxies send (RFC 9112 3.2.2: a
 * server must accept it) is served as its path; OPTIONS * describes the server. */
static void test_request_targets(srv_daemon *d)
{
    char out[8192]; /* a describe reply: its "flops" come after every head's rows */
    const char *req = "GET http://127.0.0.1/v1/layers/e?L=3 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      "Connection: close\r\n\r\n";
    int st = hc_raw(srv_daemon_port(d), req, strlen(req), 2000, out, sizeof out);
    CHECK(st == 200 && strstr(out, "\"name\":\"e\"") && strstr(out, "\"L\":3"),
          "absolute-form target: %d %.300s", st, out);
    req = "GET HTTP://127.0.0.1 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    st = hc_raw(srv_daemon_port(d), req, strlen(req), 2000, out, sizeof out);
    CHECK(st == 200 && strstr(out, "\"links\""), "absolute-form without a path is /, the index: %d %.300s",
          st, out);
    /* HTTP/1.1 without Host is malformed (RFC 9112 3.2: 400); HTTP/1.0 needs none */
    req = "GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n";
    st = hc_raw(srv_daemon_port(d), req, strlen(req), 2000, out, sizeof out);
    CHECK(st == 400 && strstr(out, "\"field\":\"Host\""), "HTTP/1.1 without Host: %d %.300s", st,
          out);
    req = "GET /healthz HTTP/1.0\r\n\r\n";
    st = hc_raw(srv_daemon_port(d), req, strlen(req), 2000, out, sizeof out);
    CHECK(st == 200, "HTTP/1.0 without Host: %d %.300s", st, out);
    req = "OPTIONS * HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    st = hc_raw(srv_daemon_port(d), req, strlen(req), 2000, out, sizeof out);
    CHECK(st == 204 && strstr(out, "Allow: GET, HEAD, PUT, POST, DELETE, OPTIONS"),
          "OPTIONS *: %d %.300s", st, out);
}

/* The content type of GET weights for an Accept header. */
static void weights_type(srv_daemon *d, const char *accept, const char *want)
{
    char h[160], ct[128] = "";
    snprintf(h, sizeof h, "Accept: %s", accept);
    const char *hs[] = {h, NULL};
    hc_opts o = {.headers = hs};
    hc_response r;
    hc_request(d, "GET", "/v1/layers/e/weights", NULL, NULL, 0, &o, &r);
    hc_header(&r, "Content-Type", ct, sizeof ct);
    CHECK(r.status == 200 && strncmp(ct, want, strlen(want)) == 0, "Accept: %s gave %ld %s",
          accept, r.status, ct);
    hc_response_free(&r);
}

/* Accept's qualities decide between JSON and safetensors, not only the order. */
static void test_accept(srv_daemon *d)
{
    weights_type(d, "application/octet-stream", "application/octet-stream");
    weights_type(d, "application/json", "application/json");
    weights_type(d, "*/*", "application/json");
    weights_type(d, "application/octet-stream, application/json", "application/octet-stream");
    weights_type(d, "application/json, application/octet-stream", "application/json");
    weights_type(d, "application/octet-stream;q=0.1, application/json", "application/json");
    weights_type(d, "application/json;q=0.5, application/octet-stream", "application/octet-stream");
    weights_type(d, "application/octet-stream; q=0", "application/json");
    weights_type(d, "APPLICATION/OCTET-STREAM", "application/octet-stream");
    /* a q that is not an RFC 9110 qvalue makes its member count for nothing */
    weights_type(d, "application/octet-stream;q=2", "application/json");
    weights_type(d, "application/octet-stream;q=.5", "application/json");
    weights_type(d, "application/json;q=abc, application/octet-stream;q=0.001", "application/octet-stream");
    /* empty members, quoted parameters holding commas, parameters before q */
    weights_type(d, ",, application/json;q=0.5 ,application/octet-stream;x=\"a,b\";q=0.6,",
                 "application/octet-stream");
    weights_type(d, "application/octet-stream;q=1.000, application/json;q=1", "application/octet-stream");
}

/* A safetensors weights upload with an unknown or a missing parameter answers with the codes a
 * JSON map gets (unknown_field, missing_field), naming the parameter. */
static void test_safetensors_names(srv_daemon *d)
{
    hc_response r;
    hc_request(d, "GET", "/v1/layers/e/weights", NULL, NULL, 0,
               &(hc_opts){.headers = (const char *const[]){"Accept: application/octet-stream",
                                                          NULL}},
               &r);
    srv_st st;
    srv_error err = {0};
    if (!CHECK(r.status == 200 && srv_st_parse(&st, (const uint8_t *)r.body, r.len, 1 << 20,
                                               "e", &err) == 0,
               "download: %ld %s", r.status, err.message)) {
        hc_response_free(&r);
        return;
    }
    srv_st_view v[MHA_MAX_PARAMS + 1];
    for (int i = 0; i < st.n; i++)
        v[i] = (srv_st_view){st.tensors[i].name, st.tensors[i].ndim, st.tensors[i].shape,
                             st.tensors[i].data};
    srv_buf b;
    /* one too many: a parameter this config does not have */
    v[st.n] = (srv_st_view){"bias_k", v[0].ndim, v[0].shape, v[0].data};
    srv_buf_init(&b);
    srv_st_write(&b, v, st.n + 1, NULL, &err);
    hc_response up;
    hc_request(d, "PUT", "/v1/layers/e/weights", "application/octet-stream", b.data, (long)b.len,
               NULL, &up);
    CHECK_ERROR(up, 400, "unknown_field", "weights.bias_k");
    hc_response_free(&up);
    srv_buf_free(&b);
    /* one too few: the last parameter left out */
    srv_buf_init(&b);
    srv_st_write(&b, v, st.n - 1, NULL, &err);
    hc_request(d, "PUT", "/v1/layers/e/weights", "application/octet-stream", b.data, (long)b.len,
               NULL, &up);
    char want[96];
    snprintf(want, sizeof want, "weights.%s", v[st.n - 1].name);
    CHECK_ERROR(up, 400, "missing_field", want);
    hc_response_free(&up);
    srv_buf_free(&b);
    srv_st_free(&st);
    hc_response_free(&r);
}

int main(void)
{
    srv_daemon *d = hc_start(NULL);
    if (!CHECK(d, "daemon starts"))
        return check_report();
    hc_response r;
    hc_request(d, "PUT", "/v1/layers/e", NULL, LAYER, -1, NULL, &r);
    CHECK(r.status == 201, "PUT e: %ld %s", r.status, r.body);
    hc_response_free(&r);

    test_content_encoding(d);
    test_if_match_list(d);
    test_if_none_match(d);
    test_if_none_match_race(d);
    test_conflicting_length(d);
    test_accept(d);
    test_request_targets(d);
    test_transfer_encoding(d);
    test_safetensors_names(d);

    hc_stop(d);

    /* with a data dir, the create-only check runs before the files are written too */
    char dir[256];
    if (td_make(dir, sizeof dir, "edges") == 0) {
        srv_options opt;
        hc_options(&opt);
        snprintf(opt.data_dir, sizeof opt.data_dir, "%s", dir);
        d = hc_start(&opt);
        if (CHECK(d, "daemon with a data dir starts")) {
            test_if_none_match(d);
            test_if_none_match_race(d);
            hc_stop(d);
        }
        td_rm_rf(dir);
    }
    return check_report();
}
