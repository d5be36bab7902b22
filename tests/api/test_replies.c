/*
 * test_replies.c - what every reply shares, route by route: a JSON body ends with "\n" (so a
 * terminal's prompt starts on its own line), successes and errors alike, on every route of the
 * table (a route added later is covered without a change here); and GET /, the index a newcomer
 * finds at the daemon's address (JSON, or the viewer for a browser).
 */
#include "check.h"
#include "http_client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"

/* The route's pattern with {name} = layer and {version} = version, into out. */
static void fill(const char *pattern, const char *layer, const char *version, char *out,
                 size_t size)
{
    size_t o = 0;
    for (const char *p = pattern; *p && o + 1 < size;) {
        const char *with = NULL;
        if (strncmp(p, "{name}", 6) == 0)
            with = layer, p += 6;
        else if (strncmp(p, "{version}", 9) == 0)
            with = version, p += 9;
        else if (strncmp(p, "{asset}", 7) == 0) /* a file of the viewer */
            with = "attnd.js", p += 7;
        else if (*p == '{') { /* a placeholder this test does not know: any segment */
            with = "x";
            p = strchr(p, '}') + 1;
        }
        if (with)
            o += (size_t)snprintf(out + o, size - o, "%s", with);
        else
            out[o++] = *p++;
    }
    out[o < size ? o : size - 1] = '\0';
}

/* A body the route takes (or NULL). */
static const char *good_body(const srv_route *r)
{
    if (strstr(r->pattern, "/infer"))
        return "{\"inputs\": [{\"name\": \"query\", \"datatype\": \"FP32\", \"shape\": [1, 4], "
               "\"data\": [1, 0, 0, 0]}]}";
    if (strstr(r->pattern, "/forward") || strstr(r->pattern, "/trace"))
        return "{\"query\": [[1, 0, 0, 0]], \"need_weights\": true}";
    if (strstr(r->pattern, "/import")) /* from the daemon's --checkpoints-dir, below */
        return "{\"checkpoint\": \"bert_base\", \"layer\": 0}";
    if (strcmp(r->method, "PUT") == 0 && strstr(r->pattern, "/weights"))
        return NULL; /* filled from a GET of the weights */
    if (strcmp(r->method, "PUT") == 0)
        return "{\"config\": {\"embed_dim\": 4, \"num_heads\": 2}}";
    return NULL;
}

static void check_reply(const char *what, const hc_response *r)
{
    char ct[128] = "";
    hc_header(r, "Content-Type", ct, sizeof ct);
    if (strncmp(ct, "application/json", 16) != 0)
        return;
    CHECK(r->len > 0 && r->body[r->len - 1] == '\n' && (r->len < 2 || r->body[r->len - 2] != '\n'),
          "%s: the JSON reply ends with one newline: ...%.40s", what,
          r->len > 40 ? r->body + r->len - 40 : r->body);
    json_t *j = hc_json(r);
    CHECK(j != NULL, "%s: and is JSON", what);
    json_decref(j);
}

static void test_every_route(void)
{
    srv_options opt;
    hc_options(&opt);
    snprintf(opt.checkpoints_dir, sizeof opt.checkpoints_dir, "tests/data/hf");
    srv_daemon *d = hc_start(&opt);
    if (!CHECK(d != NULL, "daemon starts"))
        return;
    hc_response r;
    int json_replies = 0;
    for (const srv_route *rt = srv_routes; rt->method; rt++) {
        if (strcmp(rt->method, "DELETE") == 0)
            continue; /* below, last */
        /* a layer for the route, fresh each time (a PUT may have replaced it) */
        hc_request(d, "PUT", "/v1/layers/t", NULL,
                   "{\"config\": {\"embed_dim\": 4, \"num_heads\": 2}}", -1, NULL, &r);
        hc_response_free(&r);
        hc_request(d, "GET", "/v1/layers/t", NULL, NULL, 0, NULL, &r);
        json_t *desc = hc_json(&r);
        char version[32];
        snprintf(version, sizeof version, "%lld",
                 (long long)json_integer_value(json_object_get(desc, "version")));
        json_decref(desc);
        hc_response_free(&r);

        char path[256], what[320];
        const char *body = good_body(rt);
        char *weights = NULL;
        if (!body && strcmp(rt->method, "PUT") == 0) {
            hc_request(d, "GET", "/v1/layers/t/weights", NULL, NULL, 0, NULL, &r);
            weights = strdup(r.body);
            body = weights;
            hc_response_free(&r);
        }
        for (int bad = 0; bad < 2; bad++) { /* the route's answer, then an error of it */
            fill(rt->pattern, bad ? "nope" : "t", bad ? "999999" : version, path, sizeof path);
            if (bad && !strchr(rt->pattern, '{'))
                snprintf(path + strlen(path), sizeof path - strlen(path), "%s",
                         strcmp(rt->method, "GET") == 0 && rt->query && !*rt->query ? "?bad=1"
                                                                                    : "");
            snprintf(what, sizeof what, "%s %s", rt->method, path);
            hc_request(d, rt->method, path, NULL, body, body ? -1 : 0, NULL, &r);
            CHECK(r.status > 0 && (bad || r.status < 400), "%s answers: %ld %.200s", what, r.status,
                  r.body);
            char ct[128] = "";
            hc_header(&r, "Content-Type", ct, sizeof ct);
            json_replies += strncmp(ct, "application/json", 16) == 0;
            check_reply(what, &r);
            hc_response_free(&r);
        }
        free(weights);
    }
    hc_request(d, "DELETE", "/v1/layers/t", NULL, NULL, 0, NULL, &r);
    CHECK(r.status == 204 && r.len == 0, "DELETE: 204 without a body");
    hc_response_free(&r);
    hc_request(d, "DELETE", "/v1/layers/t", NULL, NULL, 0, NULL, &r);
    check_reply("DELETE of a layer that is gone", &r);
    hc_response_free(&r);
    hc_request(d, "GET", "/metrics", NULL, NULL, 0, NULL, &r);
    CHECK(r.len > 0 && r.body[r.len - 1] == '\n', "/metrics (text) ends with a newline");
    hc_response_free(&r);
    CHECK(json_replies >= 25, "JSON replies checked: %d", json_replies);

    /* large replies too (a body built in a cached block sized up front) */
    hc_request(d, "PUT", "/v1/layers/big", NULL,
               "{\"config\": {\"embed_dim\": 64, \"num_heads\": 4}}", -1, NULL, &r);
    hc_response_free(&r);
    size_t n = 4 * 1024;
    char *q = malloc(n * 64 * 4 + 64);
    size_t o = (size_t)sprintf(q, "{\"query\": [");
    for (size_t i = 0; i < n; i++) {
        q[o++] = '[';
        for (int k = 0; k < 64; k++)
            o += (size_t)sprintf(q + o, "%s%d", k ? "," : "", (int)((i + k) % 3) - 1);
        q[o++] = ']';
        if (i + 1 < n)
            q[o++] = ',';
    }
    o += (size_t)sprintf(q + o, "], \"need_weights\": true}");
    hc_request(d, "POST", "/v1/layers/big/forward", NULL, q, (long)o, NULL, &r);
    CHECK(r.status == 200 && r.len > ((size_t)1 << 20), "a reply over 1 MB: %ld, %zu bytes",
          r.status, r.len);
    check_reply("a large forward reply", &r);
    hc_response_free(&r);
    free(q);
    hc_stop(d);
}

/* GET /: JSON for a program, the viewer for a browser when it is served. */
static void test_index(void)
{
    srv_daemon *d = hc_start(NULL);
    if (!CHECK(d != NULL, "daemon starts"))
        return;
    bool ui = false;
    for (const srv_route *rt = srv_routes; rt->method; rt++)
        ui |= strcmp(rt->method, "GET") == 0 && strcmp(rt->pattern, "/ui") == 0;

    static const char *const accepts[] = {
        NULL, "Accept: */*", "Accept: application/json", "Accept: text/html;q=0, application/json",
        /* JSON preferred: the index, not the viewer */
        "Accept: application/json, text/html;q=0.1", "Accept: application/json, text/html",
        /* JSON preferred through a range */
        "Accept: */*;q=0.9, text/html;q=0.8", "Accept: application/*;q=1, text/html;q=0.9"};
    for (size_t i = 0; i < sizeof accepts / sizeof *accepts; i++) {
        const char *hs[] = {accepts[i], NULL};
        hc_opts o = {.headers = accepts[i] ? hs : NULL};
        hc_response r;
        hc_request(d, "GET", "/", NULL, NULL, 0, &o, &r);
        json_t *j = hc_json(&r);
        json_t *links = json_object_get(j, "links");
        CHECK(r.status == 200 && !strcmp(json_string_value(json_object_get(j, "name")), "attnd") &&
                  !strcmp(json_string_value(json_object_get(j, "version")), ATTND_VERSION),
              "GET / (%s): 200 with name and version: %ld %s",
              accepts[i] ? accepts[i] : "no Accept", r.status, r.body);
        static const char *const want[][2] = {{"layers", "/v1/layers"},
                                              {"openapi", "/openapi.yaml"},
                                              {"v2", "/v2"},
                                              {"healthz", "/healthz"},
                                              {"metrics", "/metrics"}};
        for (size_t k = 0; k < sizeof want / sizeof *want; k++) {
            const char *link = json_string_value(json_object_get(links, want[k][0]));
            CHECK(link && !strcmp(link, want[k][1]), "links.%s is %s", want[k][0], want[k][1]);
            if (!link)
                continue;
            hc_response t; /* and the link answers */
            hc_request(d, "GET", link, NULL, NULL, 0, NULL, &t);
            CHECK(t.status == 200, "GET %s (linked from /): %ld", link, t.status);
            hc_response_free(&t);
        }
        CHECK((json_object_get(links, "ui") != NULL) == ui, "links.ui exactly when /ui is served");
        json_decref(j);
        hc_response_free(&r);
    }

    const char *browser[] = {"Accept: text/html,application/xhtml+xml,application/xml;q=0.9,"
                             "image/avif,*/*;q=0.8",
                             NULL};
    hc_opts o = {.headers = browser};
    hc_response r;
    hc_request(d, "GET", "/", NULL, NULL, 0, &o, &r);
    char location[64] = "";
    hc_header(&r, "Location", location, sizeof location);
    if (ui)
        CHECK(r.status == 302 && !strcmp(location, "/ui"), "a browser is sent to /ui: %ld %s",
              r.status, location);
    else
        CHECK(r.status == 200 && !location[0] && strstr(r.body, "\"links\""),
              "without a viewer a browser gets the index too: %ld", r.status);
    hc_response_free(&r);

    hc_request(d, "HEAD", "/", NULL, NULL, 0, NULL, &r);
    CHECK(r.status == 200, "HEAD /: %ld", r.status);
    hc_response_free(&r);
    hc_request(d, "POST", "/", NULL, "{}", -1, NULL, &r);
    CHECK(r.status == 405, "POST /: 405 (%ld)", r.status);
    hc_response_free(&r);
    hc_stop(d);
}

int main(void)
{
    test_every_route();
    test_index();
    return check_report();
}
