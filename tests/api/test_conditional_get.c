/*
 * test_conditional_get.c - GET of a layer or of its weights with If-None-Match: "*" or the current
 * ETag is 304 Not Modified (the ETag, no body), as HTTP caches and clients that poll a layer
 * expect; another tag, a stale one after a change or a value that is no tag gets the full answer.
 * The weights, JSON or safetensors by Accept, say Vary: Accept. Also srv_none_match_hits itself
 * (the viewer's files use it too). In-process daemon on port 0.
 */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "http/conditional.h"
#include "http_client.h"

#define LAYER "{\"config\": {\"embed_dim\": 4, \"num_heads\": 2}, \"init\": {\"seed\": 1}}"

static void test_hits(void)
{
    CHECK(srv_none_match_hits("\"3\"", "\"3\""), "the tag itself");
    CHECK(srv_none_match_hits("W/\"3\"", "\"3\""), "a weak tag compares by its opaque part");
    CHECK(srv_none_match_hits(" \"1\" ,, \"3\" ", "\"3\""), "a list, blanks and empty members");
    CHECK(srv_none_match_hits("*", "\"3\""), "*");
    CHECK(!srv_none_match_hits("\"33\"", "\"3\""), "another tag");
    CHECK(!srv_none_match_hits("3", "\"3\""), "no quotes: not the tag");
    CHECK(!srv_none_match_hits("", "\"3\"") && !srv_none_match_hits(NULL, "\"3\""), "no value");
}

/* GET path with If-None-Match inm (NULL: none) and accept (NULL: none); the status, *etag, *vary.
 */
static long get(srv_daemon *d, const char *path, const char *inm, const char *accept, char *etag,
                char *vary, size_t *len)
{
    char l1[128], l2[128];
    const char *hs[3] = {NULL, NULL, NULL};
    int n = 0;
    if (inm) {
        snprintf(l1, sizeof l1, "If-None-Match: %s", inm);
        hs[n++] = l1;
    }
    if (accept) {
        snprintf(l2, sizeof l2, "Accept: %s", accept);
        hs[n++] = l2;
    }
    hc_opts o = {.headers = hs};
    hc_response r;
    hc_request(d, "GET", path, NULL, NULL, 0, &o, &r);
    etag[0] = vary[0] = '\0';
    hc_header(&r, "ETag", etag, 64);
    hc_header(&r, "Vary", vary, 64);
    *len = r.len;
    long st = r.status;
    hc_response_free(&r);
    return st;
}

static void test_layer(srv_daemon *d)
{
    hc_response r;
    hc_request(d, "PUT", "/v1/layers/c", NULL, LAYER, -1, NULL, &r);
    char tag[64] = "", etag[64], vary[64], weak[80], other[80];
    hc_header(&r, "ETag", tag, sizeof tag);
    hc_response_free(&r);
    CHECK(tag[0] == '"', "PUT gave an ETag: %s", tag);
    snprintf(weak, sizeof weak, "W/%s", tag);
    snprintf(other, sizeof other, "\"1%s", tag + 1);
    size_t len;

    static const char *const paths[] = {"/v1/layers/c", "/v1/layers/c/weights"};
    for (int i = 0; i < 2; i++) {
        const char *p = paths[i];
        CHECK(get(d, p, tag, NULL, etag, vary, &len) == 304 && len == 0 && !strcmp(etag, tag),
              "%s with its ETag: 304, no body, the ETag (%s, %zu bytes)", p, etag, len);
        CHECK(get(d, p, weak, NULL, etag, vary, &len) == 304, "%s with W/ETag: 304", p);
        CHECK(get(d, p, "*", NULL, etag, vary, &len) == 304, "%s with *: 304", p);
        CHECK(get(d, p, other, NULL, etag, vary, &len) == 200 && len > 0 && !strcmp(etag, tag),
              "%s with another tag: 200 and the body", p);
        CHECK(get(d, p, "garbage", NULL, etag, vary, &len) == 200 && len > 0,
              "%s with a value that is no tag: 200 (nothing to compare)", p);
        CHECK(get(d, p, NULL, NULL, etag, vary, &len) == 200 && len > 0, "%s unconditional", p);
    }
    CHECK(get(d, "/v1/layers/c/weights", NULL, "application/octet-stream", etag, vary, &len) ==
                  200 &&
              strstr(vary, "Accept"),
          "the weights vary by Accept (Vary: %s)", vary);
    CHECK(get(d, "/v1/layers/c/weights", tag, "application/octet-stream", etag, vary, &len) == 304,
          "safetensors with its ETag: 304");

    /* a change makes the old tag stale */
    hc_request(d, "PUT", "/v1/layers/c", NULL, LAYER, -1, NULL, &r);
    hc_response_free(&r);
    CHECK(get(d, "/v1/layers/c", tag, NULL, etag, vary, &len) == 200 && strcmp(etag, tag) != 0,
          "after a replace the old ETag gets 200 and the new ETag (%s, was %s)", etag, tag);
    CHECK(get(d, "/v1/layers/nope", "*", NULL, etag, vary, &len) == 404, "no layer: still 404");
}

int main(void)
{
    test_hits();
    srv_daemon *d = hc_start(NULL);
    if (CHECK(d != NULL, "daemon started"))
        test_layer(d);
    hc_stop(d);
    return check_report();
}
