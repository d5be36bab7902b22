/*
 * test_auth_metrics.c - API key checks and read-only (server/app/auth.c), CORS origin matching (server/http/cors.c) and the
 * Prometheus exposition (server/app/metrics.c), without a daemon.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include "app/auth.h"
#include "app/metrics.h"
#include "check.h"
#include "http/cors.h"

static void test_auth(void)
{
    srv_auth a;
    srv_error err = {0};
    CHECK(srv_auth_init(&a, "", "", false, false, &err) == 0 && a.key_len == 0, "no key");
    CHECK(srv_auth_check(&a, true, false, NULL, &err) == 0, "no key: changes allowed");

    CHECK(srv_auth_init(&a, NULL, "s3cret", false, false, &err) == 0, "key from env");
    CHECK(srv_auth_check(&a, false, false, NULL, &err) == 0, "reads need no key by default");
    memset(&err, 0, sizeof err);
    CHECK(srv_auth_check(&a, true, false, NULL, &err) == -1 && err.code == SRV_E_UNAUTHORIZED,
          "change without a key: 401");
    memset(&err, 0, sizeof err);
    CHECK(srv_auth_check(&a, true, false, "Bearer wrong!", &err) == -1 &&
              err.code == SRV_E_UNAUTHORIZED,
          "wrong key: 401");
    memset(&err, 0, sizeof err);
    CHECK(srv_auth_check(&a, true, false, "Bearer s3cre", &err) == -1, "prefix of the key: 401");
    memset(&err, 0, sizeof err);
    CHECK(srv_auth_check(&a, true, false, "Bearer s3cret2", &err) == -1, "key + more: 401");
    memset(&err, 0, sizeof err);
    CHECK(srv_auth_check(&a, true, false, "Basic czNjcmV0", &err) == -1, "Basic scheme: 401");
    CHECK(srv_auth_check(&a, true, false, "Bearer s3cret", &err) == 0, "right key");
    CHECK(srv_auth_check(&a, true, false, "bearer  s3cret ", &err) == 0,
          "scheme case-insensitive, spaces tolerated");

    CHECK(srv_auth_init(&a, NULL, "k", true, false, &err) == 0, "guard reads");
    memset(&err, 0, sizeof err);
    CHECK(srv_auth_check(&a, false, false, NULL, &err) == -1 && err.code == SRV_E_UNAUTHORIZED,
          "guarded read without key: 401");
    CHECK(srv_auth_check(&a, false, true, NULL, &err) == 0, "probes never need a key");
    memset(&err, 0, sizeof err);
    CHECK(srv_auth_init(&a, NULL, "", true, false, &err) == -1, "--auth-reads without a key refused");

    CHECK(srv_auth_init(&a, NULL, "k", false, true, &err) == 0, "read-only");
    memset(&err, 0, sizeof err);
    CHECK(srv_auth_check(&a, true, false, "Bearer k", &err) == -1 && err.code == SRV_E_FORBIDDEN &&
              srv_error_status(err.code) == 403,
          "read-only refuses changes with 403 even with the key");
    CHECK(srv_auth_check(&a, false, false, NULL, &err) == 0, "read-only allows reads");

    /* key file: the first line without its line end ("\n" or "\r\n"), nothing else trimmed */
    char path[] = "/tmp/attnd-test-key-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0 && write(fd, "filekey\r\nsecond line\n", 21) == 21, "key file written");
    close(fd);
    memset(&err, 0, sizeof err);
    CHECK(srv_auth_init(&a, path, "envkey", false, false, &err) == 0 &&
              strcmp(a.key, "filekey") == 0,
          "key file wins over the env, first line without its CR LF (%s)", a.key);
    static const struct {
        const char *text;
        size_t len;
        bool ok;
        const char *key; /* when ok */
    } files[] = {
        {"k e y\n", 6, true, "k e y"},        {"key", 3, true, "key"},
        {"key \n", 5, false, NULL},           {" key\n", 5, false, NULL},
        {"key\t\n", 5, false, NULL},          {"\tkey\n", 5, false, NULL},
        {"key\r\r\n", 6, false, NULL},        {"ke\x01y\n", 5, false, NULL},
        {"ke\0y\n", 5, false, NULL},          {"\nkey\n", 5, false, NULL},
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        fd = open(path, O_WRONLY | O_TRUNC);
        CHECK(write(fd, files[i].text, files[i].len) == (ssize_t)files[i].len, "key file %zu", i);
        close(fd);
        memset(&err, 0, sizeof err);
        int rc = srv_auth_init(&a, path, "", false, false, &err);
        if (files[i].ok)
            CHECK(rc == 0 && !strcmp(a.key, files[i].key), "key file %zu: key '%s' (%s)", i, a.key,
                  err.message);
        else
            CHECK(rc == -1 && strstr(err.message, path), "key file %zu refused, naming it: %s", i,
                  err.message);
    }
    fd = open(path, O_WRONLY | O_TRUNC);
    close(fd);
    memset(&err, 0, sizeof err);
    CHECK(srv_auth_init(&a, path, "", false, false, &err) == -1, "empty key file refused");
    unlink(path);
    memset(&err, 0, sizeof err);
    CHECK(srv_auth_init(&a, "/nonexistent/key", "", false, false, &err) == -1 &&
              strstr(err.message, "/nonexistent/key"),
          "missing key file refused: %s", err.message);

    /* the key from the environment or the flag: taken as it is, refused when no client could
     * ever send it */
    static const char *const bad_keys[] = {" s3cret", "s3cret ", "s3cret\t", "s3\ncret", "s3cret\r",
                                           "\x7fs3cret", " "};
    for (size_t i = 0; i < sizeof bad_keys / sizeof bad_keys[0]; i++) {
        memset(&err, 0, sizeof err);
        CHECK(srv_auth_init(&a, NULL, bad_keys[i], false, false, &err) == -1 &&
                  strstr(err.message, "ATTND_API_KEY") &&
                  (strstr(err.message, "space") || strstr(err.message, "control character")),
              "key %zu refused: %s", i, err.message);
    }
    memset(&err, 0, sizeof err);
    CHECK(srv_auth_init(&a, NULL, "s3 cr\xc3\xa9t", false, false, &err) == 0,
          "inner spaces and UTF-8 are fine: a client can send them (%s)", err.message);

    CHECK(srv_auth_equal("abc", 3, "abc", 3) && !srv_auth_equal("abd", 3, "abc", 3) &&
              !srv_auth_equal("", 0, "abc", 3) && !srv_auth_equal("abc\0", 4, "abc", 3),
          "constant-time equality");
}

static void test_cors(void)
{
    CHECK(srv_cors_allow_origin("", "https://a.example") == NULL, "no CORS configured");
    CHECK(strcmp(srv_cors_allow_origin("*", NULL), "*") == 0, "* allows all");
    const char *list = "https://a.example, http://localhost:3000";
    CHECK(srv_cors_allow_origin(list, "http://localhost:3000") != NULL, "listed origin echoed");
    CHECK(srv_cors_allow_origin(list, "https://a.example") != NULL, "first listed origin");
    CHECK(srv_cors_allow_origin(list, "https://a.example.evil") == NULL, "no prefix match");
    CHECK(srv_cors_allow_origin(list, "https://a.exampl") == NULL, "no partial match");
    CHECK(srv_cors_allow_origin(list, NULL) == NULL, "no Origin: no header");
}

static void test_metrics(void)
{
    static const char *const methods[] = {"GET", "POST"};
    static const char *const patterns[] = {"/v1/layers", "/v1/layers/{name}/forward"};
    srv_metrics *m = srv_metrics_create(2, methods, patterns);
    if (!CHECK(m, "create"))
        return;
    srv_metrics_request_begin(m);
    srv_metrics_request_begin(m);
    CHECK(srv_metrics_in_flight(m) == 2, "two in flight");
    srv_metrics_request_end(m, 1, 200, 0.003, 100, 2000);
    srv_metrics_request_end(m, -1, 404, 0.0001, 0, 50);
    srv_metrics_request_begin(m);
    srv_metrics_request_end(m, 1, 418, 20.0, 5, 5);
    srv_metrics_request_begin(m);
    srv_metrics_request_end(m, 0, 0, 0.5, 10, 0);
    /* the codes attnd itself answers with have their own series: a redirect, a full disk */
    srv_metrics_request_begin(m);
    srv_metrics_request_end(m, 0, 302, 0.0001, 0, 0);
    srv_metrics_request_begin(m);
    srv_metrics_request_end(m, 0, 507, 0.0001, 0, 0);
    srv_metrics_forward(m, false, 1234.0);
    srv_metrics_forward(m, true, 10.0);
    srv_metrics_connection(m, 1);
    srv_metrics_connection(m, 1);
    srv_metrics_connection(m, -1);
    srv_metrics_connection_cut(m, SRV_CUT_BODY_TOO_SLOW);
    srv_metrics_connection_cut(m, SRV_CUT_HALF_CLOSED);
    srv_metrics_connection_cut(m, SRV_CUT_HALF_CLOSED);
    srv_metrics_request_begin(m);
    srv_metrics_request_end(m, 0, 408, 1.0, 0, 0);
    srv_buf b;
    srv_buf_init(&b);
    srv_metrics_gauges g = {.layers = 3, .layers_damaged = 1, .ready = true, .start_time = 1.5};
    CHECK(srv_metrics_render(&b, m, &g) == 0, "render");
    const char *t = srv_buf_cstr(&b);
    const char *want[] = {
        "attnd_build_info{version=\"",
        "attnd_http_requests_total{method=\"POST\",route=\"/v1/layers/{name}/forward\",code=\"200\"} 1\n",
        "attnd_http_requests_total{method=\"POST\",route=\"/v1/layers/{name}/forward\",code=\"4xx\"} 1\n",
        "attnd_http_requests_total{method=\"\",route=\"unmatched\",code=\"404\"} 1\n",
        "attnd_http_request_duration_seconds_bucket{method=\"POST\",route=\"/v1/layers/{name}/forward\",le=\"0.0025\"} 0\n",
        "attnd_http_request_duration_seconds_bucket{method=\"POST\",route=\"/v1/layers/{name}/forward\",le=\"0.005\"} 1\n",
        "attnd_http_request_duration_seconds_bucket{method=\"POST\",route=\"/v1/layers/{name}/forward\",le=\"10\"} 1\n",
        "attnd_http_request_duration_seconds_bucket{method=\"POST\",route=\"/v1/layers/{name}/forward\",le=\"+Inf\"} 2\n",
        "attnd_http_request_duration_seconds_count{method=\"POST\",route=\"/v1/layers/{name}/forward\"} 2\n",
        "attnd_http_request_duration_seconds_sum{method=\"POST\",route=\"/v1/layers/{name}/forward\"} 20.003",
        "attnd_http_requests_in_flight 0\n",
        "attnd_http_requests_total{method=\"GET\",route=\"/v1/layers\",code=\"aborted\"} 1\n",
        "attnd_http_request_bytes_total 115\n",
        "attnd_http_response_bytes_total 2055\n",
        "attnd_forward_passes_total{kind=\"forward\"} 1\n",
        "attnd_forward_passes_total{kind=\"trace\"} 1\n",
        "attnd_forward_flops_total 1244\n",
        "attnd_http_connections_open 1\n",
        "attnd_http_connections_closed_total{reason=\"header_timeout\"} 0\n",
        "attnd_http_connections_closed_total{reason=\"body_too_slow\"} 1\n",
        "attnd_http_connections_closed_total{reason=\"half_closed\"} 2\n",
        "attnd_http_connections_closed_total{reason=\"reply_too_slow\"} 0\n",
        "attnd_http_requests_total{method=\"GET\",route=\"/v1/layers\",code=\"408\"} 1\n",
        "attnd_http_requests_total{method=\"GET\",route=\"/v1/layers\",code=\"302\"} 1\n",
        "attnd_http_requests_total{method=\"GET\",route=\"/v1/layers\",code=\"507\"} 1\n",
        "attnd_layers 3\n",
        "attnd_layers_damaged 1\n",
        "attnd_ready 1\n",
        "# TYPE attnd_http_request_duration_seconds histogram\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECK(strstr(t, want[i]) != NULL, "exposition has: %s", want[i]);
    CHECK(strstr(t, "code=\"5xx\"") == NULL, "an unanswered request is not a 5xx");
    srv_buf_free(&b);
    srv_metrics_free(m);
}

int main(void)
{
    test_auth();
    test_cors();
    test_metrics();
    return check_report();
}
