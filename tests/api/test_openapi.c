/*
 * test_openapi.c - openapi.yaml stays true to the daemon: the same routes, served, and served as is.
 *
 *  - every route of the route table (server/api/routes.c) is a path + method of openapi.yaml's `paths`;
 *  - every path + method of openapi.yaml is served by an in-process daemon (not 404 or 405, and
 *    never a 5xx), with a layer created for the {name} parameters, its version for {version} and
 *    attnd.js for the viewer's {asset};
 *  - GET /openapi.yaml answers the repository's file byte for byte.
 *
 * No YAML library: only the layout of `paths` is read, the way openapi.yaml writes it (a path as a
 * key indented 2 spaces under a top-level `paths:`, its operations as keys indented 4). Any other
 * line there (parameters, comments, nested keys) is skipped. The file is checked as OpenAPI 3.1 by
 * a linter during development (README, "Development"); this test needs no network and no npm.
 */
#include "api/api.h"
#include "check.h"
#include "http_client.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_OPS 128

typedef struct op {
    char method[8];  /* upper case: GET, PUT, POST, DELETE, ... */
    char path[128]; /* as in the file: /v1/layers/{name}       */
} op;

static const char *const http_methods[] = {"get",  "put",     "post",  "delete",
                                           "patch", "options", "head", "trace"};

/* Reads the operations under `paths:` of the YAML text into ops; returns how many (-1 on overflow
 * or a malformed line). */
static int read_paths(const char *yaml, op *ops, int max)
{
    int n = 0;
    bool in_paths = false;
    char path[128] = "";
    for (const char *line = yaml; *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : "") {
        size_t len = strcspn(line, "\n");
        if (len == 0 || line[0] == '#')
            continue;
        if (line[0] != ' ') { /* a top-level key */
            in_paths = strncmp(line, "paths:", 6) == 0;
            continue;
        }
        if (!in_paths)
            continue;
        if (strncmp(line, "  /", 3) == 0) {
            const char *colon = memchr(line, ':', len);
            if (!colon || (size_t)(colon - line - 2) >= sizeof path)
                return -1;
            memcpy(path, line + 2, (size_t)(colon - line - 2));
            path[colon - line - 2] = '\0';
            continue;
        }
        if (strncmp(line, "    ", 4) != 0 || line[4] == ' ')
            continue;
        for (size_t m = 0; m < sizeof http_methods / sizeof *http_methods; m++) {
            size_t ml = strlen(http_methods[m]);
            if (strncmp(line + 4, http_methods[m], ml) == 0 && line[4 + ml] == ':') {
                if (n == max || !path[0])
                    return -1;
                for (size_t i = 0; i <= ml; i++)
                    ops[n].method[i] = (char)toupper((unsigned char)http_methods[m][i]);
                snprintf(ops[n].path, sizeof ops[n].path, "%s", path);
                n++;
            }
        }
    }
    return n;
}

static bool has_op(const op *ops, int n, const char *method, const char *path)
{
    for (int i = 0; i < n; i++)
        if (strcmp(ops[i].method, method) == 0 && strcmp(ops[i].path, path) == 0)
            return true;
    return false;
}

static bool in_route_table(const char *method, const char *path)
{
    for (const srv_route *r = srv_routes; r->method; r++)
        if (strcmp(r->method, method) == 0 && strcmp(r->pattern, path) == 0)
            return true;
    return false;
}

/* path with {name} -> layer, {version} -> version and {asset} -> a file of the viewer, into out. */
static void instantiate(char *out, size_t size, const char *path, const char *layer,
                        const char *version)
{
    size_t o = 0;
    for (const char *p = path; *p && o + 1 < size;) {
        const char *sub = NULL;
        size_t skip = 0;
        if (strncmp(p, "{name}", 6) == 0)
            sub = layer, skip = 6;
        else if (strncmp(p, "{version}", 9) == 0)
            sub = version, skip = 9;
        else if (strncmp(p, "{asset}", 7) == 0)
            sub = "attnd.js", skip = 7;
        if (sub) {
            o += (size_t)snprintf(out + o, size - o, "%s", sub);
            p += skip;
        } else {
            out[o++] = *p++;
        }
    }
    out[o < size ? o : size - 1] = '\0';
}

static void test_served(srv_daemon *d, const op *ops, int n)
{
    const char *layer_body = "{\"config\": {\"embed_dim\": 4, \"num_heads\": 2}}";
    hc_response r;
    hc_request(d, "PUT", "/v1/layers/doc", NULL, layer_body, -1, NULL, &r);
    CHECK(r.status == 201, "PUT /v1/layers/doc: %ld %s", r.status, r.body ? r.body : "");
    hc_response_free(&r);

    /* DELETEs last, so that the layer is there for every other operation */
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < n; i++) {
            bool del = strcmp(ops[i].method, "DELETE") == 0;
            if (del != (pass == 1))
                continue;
            /* the layer's version now (an earlier PUT of the loop may have replaced it) */
            char version[32] = "0";
            hc_request(d, "GET", "/v1/layers/doc", NULL, NULL, -1, NULL, &r);
            json_t *doc = hc_json(&r);
            if (doc)
                snprintf(version, sizeof version, "%lld",
                         (long long)json_integer_value(json_object_get(doc, "version")));
            json_decref(doc);
            hc_response_free(&r);
            char url[256];
            instantiate(url, sizeof url, ops[i].path, "doc", version);
            const char *body = NULL;
            if (strcmp(ops[i].method, "PUT") == 0 || strcmp(ops[i].method, "POST") == 0)
                body = strcmp(ops[i].path, "/v1/layers/{name}") == 0 ? layer_body : "{}";
            hc_request(d, ops[i].method, url, NULL, body, -1, NULL, &r);
            CHECK(r.status != 0 && r.status != 404 && r.status != 405 && r.status < 500,
                  "openapi.yaml documents %s %s, but %s %s answers %ld: %.200s", ops[i].method,
                  ops[i].path, ops[i].method, url, r.status, r.body ? r.body : "");
            hc_response_free(&r);
        }
    }
}

int main(void)
{
    size_t len = 0;
    char *yaml = check_read_file("openapi.yaml", &len);
    CHECK(yaml != NULL, "openapi.yaml is readable from the repository root");
    if (!yaml)
        return check_report();

    static op ops[MAX_OPS];
    int n = read_paths(yaml, ops, MAX_OPS);
    CHECK(n > 0, "openapi.yaml has operations under paths: (got %d)", n);

    /* the route table and the document name the same operations */
    int routes = 0;
    for (const srv_route *r = srv_routes; r->method; r++, routes++)
        CHECK(has_op(ops, n, r->method, r->pattern),
              "route %s %s (server/api/routes.c) is missing from openapi.yaml's paths", r->method,
              r->pattern);
    for (int i = 0; i < n; i++)
        CHECK(in_route_table(ops[i].method, ops[i].path),
              "openapi.yaml documents %s %s, which server/api/routes.c does not have", ops[i].method,
              ops[i].path);
    CHECK(n == routes, "openapi.yaml has %d operations, the route table %d routes", n, routes);

    /* the parser itself: a document it must read the same way */
    op t[4];
    int tn = read_paths("openapi: 3.1.0\npaths:\n  /a/{x}:\n    parameters: []\n    get:\n"
                        "      responses: {}\n    post: *anchor\n  /b:\n    delete:\n"
                        "components:\n  x:\n    get: {}\n",
                        t, 4);
    CHECK(tn == 3 && has_op(t, tn, "GET", "/a/{x}") && has_op(t, tn, "POST", "/a/{x}") &&
              has_op(t, tn, "DELETE", "/b"),
          "read_paths reads a small document (got %d operations)", tn);

    srv_daemon *d = hc_start(NULL);
    CHECK(d != NULL, "daemon starts");
    if (d) {
        hc_response r;
        hc_request(d, "GET", "/openapi.yaml", NULL, NULL, -1, NULL, &r);
        CHECK(r.status == 200, "GET /openapi.yaml: %ld", r.status);
        CHECK(r.len == len && r.body && memcmp(r.body, yaml, len) == 0,
              "GET /openapi.yaml serves the repository file byte for byte (%zu bytes served, file "
              "%zu; rebuild after editing it)",
              r.len, len);
        char ctype[128] = "";
        CHECK(hc_header(&r, "Content-Type", ctype, sizeof ctype) &&
                  strncmp(ctype, "application/yaml", 16) == 0,
              "GET /openapi.yaml: Content-Type application/yaml (got '%s')", ctype);
        hc_response_free(&r);
        test_served(d, ops, n);
        hc_stop(d);
    }
    free(yaml);
    return check_report();
}
