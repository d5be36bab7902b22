/*
 * test_cases.c - the data-driven bad-request suite: every tests/cases/<name>/ (format in
 * tests/cases/README.md) against one in-process daemon, then proof that the daemon survived them
 * all with its layer intact.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "http_client.h"

#define FORWARD "/v1/layers/case/forward"
#define PROBE "{\"query\": [[1,2,3,4],[4,3,2,1]], \"encoding\": \"base64\"}"

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void run_case(srv_daemon *d, const char *name)
{
    char path[512];
    size_t blen = 0;
    snprintf(path, sizeof path, "tests/cases/%s/request.json", name);
    char *body = check_read_file(path, &blen);
    snprintf(path, sizeof path, "tests/cases/%s/expected.json", name);
    json_error_t je;
    json_t *exp = json_load_file(path, 0, &je);
    if (!CHECK(body && exp, "%s: cannot read request.json / expected.json", name)) {
        free(body);
        json_decref(exp);
        return;
    }
    const char *method = json_string_value(json_object_get(exp, "method"));
    const char *url = json_string_value(json_object_get(exp, "path"));
    const char *ct = json_string_value(json_object_get(exp, "content_type"));
    method = method ? method : "POST";
    bool send_body = blen > 0 || !strcmp(method, "POST") || !strcmp(method, "PUT");

    hc_response r;
    hc_request(d, method, url ? url : FORWARD, ct, send_body ? body : NULL, (long)blen, NULL, &r);

    json_t *st = json_object_get(exp, "status"), *in = json_object_get(exp, "status_in");
    bool ok = st ? r.status == json_integer_value(st) : false;
    for (size_t i = 0; in && i < json_array_size(in); i++)
        ok |= r.status == json_integer_value(json_array_get(in, i));
    CHECK(ok, "%s: status %ld: %.300s", name, r.status, r.body);
    CHECK(r.status < 500 || r.status == 503, "%s: never a 5xx for client input (%ld)", name,
          r.status);

    char got[128];
    const char *want = json_string_value(json_object_get(exp, "code"));
    if (want)
        CHECK(!strcmp(hc_error_code(&r, got, sizeof got), want), "%s: code '%s', want '%s'", name,
              got, want);
    want = json_string_value(json_object_get(exp, "field"));
    if (want)
        CHECK(!strcmp(hc_error_field(&r, got, sizeof got), want), "%s: field '%s', want '%s'",
              name, got, want);
    want = json_string_value(json_object_get(exp, "allow"));
    if (want)
        CHECK(hc_header(&r, "Allow", got, sizeof got) && !strcmp(got, want),
              "%s: Allow '%s', want '%s'", name, got, want);
    if (r.status >= 400) {
        json_t *doc = hc_json(&r);
        CHECK(json_is_string(json_object_get(json_object_get(doc, "error"), "message")),
              "%s: the error body is JSON with a message", name);
        json_decref(doc);
    }
    hc_response_free(&r);
    free(body);
    json_decref(exp);
}

int main(void)
{
    srv_options opt;
    hc_options(&opt);
    opt.max_body_bytes = 8192;
    opt.max_trace_elements = 4096;
    srv_daemon *d = hc_start(&opt);
    if (!CHECK(d != NULL, "daemon"))
        return check_report();

    hc_response r, probe;
    hc_request(d, "PUT", "/v1/layers/case", NULL,
               "{\"config\": {\"embed_dim\": 4, \"num_heads\": 2}, \"init\": {\"seed\": 7}}", -1,
               NULL, &r);
    CHECK(r.status == 201, "create the layer: %ld %s", r.status, r.body);
    hc_response_free(&r);
    hc_request(d, "POST", FORWARD, NULL, PROBE, -1, NULL, &probe);
    CHECK(probe.status == 200, "probe forward: %ld", probe.status);

    DIR *dir = opendir("tests/cases");
    char *names[512];
    int n = 0;
    for (struct dirent *e; dir && (e = readdir(dir)) != NULL && n < 512;)
        if (e->d_name[0] != '.' && e->d_type == DT_DIR)
            names[n++] = strdup(e->d_name);
    if (dir)
        closedir(dir);
    qsort(names, (size_t)n, sizeof *names, by_name);
    CHECK(n >= 40, "%d cases found", n);
    for (int i = 0; i < n; i++) {
        run_case(d, names[i]);
        free(names[i]);
    }

    /* the daemon survived, with its layer as it was and nothing else */
    hc_request(d, "GET", "/healthz", NULL, NULL, 0, NULL, &r);
    CHECK(r.status == 200, "alive after every case");
    hc_response_free(&r);
    hc_request(d, "POST", FORWARD, NULL, PROBE, -1, NULL, &r);
    CHECK(r.status == 200 && r.len == probe.len && !memcmp(r.body, probe.body, r.len),
          "the layer answers as before, bit for bit");
    hc_response_free(&r);
    hc_request(d, "GET", "/v1/layers", NULL, NULL, 0, NULL, &r);
    json_t *doc = hc_json(&r);
    json_t *layers = json_object_get(doc, "layers");
    CHECK(json_array_size(layers) == 1 &&
              !strcmp(json_string_value(json_object_get(json_array_get(layers, 0), "name")),
                      "case"),
          "only the layer 'case' exists: %s", r.body);
    json_decref(doc);
    hc_response_free(&r);
    hc_response_free(&probe);
    hc_stop(d);
    return check_report();
}
