/*
 * test_request_ids.c - one request followed by its id (X-Request-Id): the client's id echoed when it
 * is sane, replaced when it is not, made when absent; on every reply, in every error body as
 * "request_id" on /v1 and /v2 alike, and in the access log line in both formats.
 *
 * The rules are request_id.h's. Replies come from an in-process daemon; the log lines from the
 * built daemon run as a child process (its stderr). Traffic goes to 127.0.0.1 only.
 */
#include "check.h"
#include "child.h"
#include "http/request_id.h"
#include "http_client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool is_made_id(const char *id)
{
    return strlen(id) == 32 && strspn(id, "0123456789abcdef") == 32;
}

static void test_rules(void)
{
    static const char *const good[] = {"a", "abc-123", "0d3f6a2c-9b1e-47f8-a5c2-d9e0b7f4a613",
                                       "01ARZ3NDEKTSV4RRFFQ69G5FAV", "Root=1-5759e988-bd862e3fe1be46a994272793",
                                       "dGVzdA==", "a.b:c/d+e=f@g_h"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        CHECK(srv_request_id_valid(good[i]), "'%s' is kept", good[i]);
    char longest[SRV_REQUEST_ID_MAX + 2];
    memset(longest, 'x', sizeof longest);
    longest[SRV_REQUEST_ID_MAX] = '\0';
    CHECK(srv_request_id_valid(longest), "%d characters are kept", SRV_REQUEST_ID_MAX);
    longest[SRV_REQUEST_ID_MAX] = 'x';
    longest[SRV_REQUEST_ID_MAX + 1] = '\0';
    CHECK(!srv_request_id_valid(longest), "%d characters are not", SRV_REQUEST_ID_MAX + 1);
    static const char *const bad[] = {"", "has space", "quote\"d", "back\\slash", "new\nline",
                                      "tab\tbed", "caf\xc3\xa9", "semi;colon", "<script>",
                                      "comma,separated"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK(!srv_request_id_valid(bad[i]), "'%s' is replaced", bad[i]);
    CHECK(!srv_request_id_valid(NULL), "none is replaced");

    char a[SRV_REQUEST_ID_MAX + 1], b[SRV_REQUEST_ID_MAX + 1];
    CHECK(srv_request_id_take("keep-me", a) && strcmp(a, "keep-me") == 0, "a good id is taken");
    CHECK(!srv_request_id_take("no good", a) && is_made_id(a), "a bad one is replaced: %s", a);
    int distinct = 0;
    for (int i = 0; i < 1000; i++) {
        srv_request_id_take(NULL, b);
        distinct += is_made_id(b) && strcmp(a, b) != 0;
        memcpy(a, b, sizeof a);
    }
    CHECK(distinct == 1000, "made ids are 32 hex digits and each differs from the last (%d)",
          distinct);
}

/* r's X-Request-Id into id (size 160); false when absent. */
static bool reply_id(const hc_response *r, char *id)
{
    return hc_header(r, "X-Request-Id", id, 160);
}

/* The id of r's error body (top-level "request_id"), or "" */
static void body_id(const hc_response *r, char *out)
{
    json_t *j = hc_json(r);
    const char *s = json_string_value(json_object_get(j, "request_id"));
    snprintf(out, 160, "%s", s ? s : "");
    json_decref(j);
}

static void test_replies(void)
{
    srv_daemon *d = hc_start(NULL);
    if (!CHECK(d != NULL, "daemon starts"))
        return;
    hc_response r;
    char id[160], in_body[160];
    hc_request(d, "PUT", "/v1/layers/m", NULL, "{\"config\": {\"embed_dim\": 4, \"num_heads\": 2}}",
               -1, NULL, &r);
    CHECK(r.status == 201, "PUT m: %ld", r.status);
    hc_response_free(&r);

    /* success, with and without an id of the client's */
    const char *mine[] = {"X-Request-Id: client-7f3a", NULL};
    hc_opts with = {.headers = mine};
    hc_request(d, "POST", "/v1/layers/m/forward", NULL, "{\"query\": [[1, 0, 0, 0]]}", -1, &with,
               &r);
    CHECK(r.status == 200 && reply_id(&r, id) && strcmp(id, "client-7f3a") == 0,
          "a forward pass echoes the client's id: %ld '%s'", r.status, id);
    body_id(&r, in_body);
    CHECK(in_body[0] == '\0', "a success body does not repeat it");
    hc_response_free(&r);
    char first[160] = "";
    for (int i = 0; i < 2; i++) {
        hc_request(d, "GET", "/v1/layers", NULL, NULL, 0, NULL, &r);
        CHECK(reply_id(&r, id) && is_made_id(id) && strcmp(id, first) != 0,
              "without one, attnd makes one, new each time: '%s'", id);
        memcpy(first, id, sizeof first);
        hc_response_free(&r);
    }

    /* errors of every kind, /v1 and /v2: the body's request_id is the header's */
    static const struct {
        const char *method, *path, *body, *ctype;
        long status;
        bool v2;
    } errs[] = {
        {"GET", "/v1/layers/nope", NULL, NULL, 404, false},
        {"GET", "/no/such/path", NULL, NULL, 404, false},
        {"DELETE", "/v1/layers/m/forward", NULL, NULL, 405, false},
        {"POST", "/v1/layers/m/forward", "{\"query\": [[1, 0]]}", NULL, 400, false},
        {"POST", "/v1/layers/m/forward", "{not json", NULL, 400, false},
        {"POST", "/v1/layers/m/forward", "x=1", "text/plain", 415, false},
        {"GET", "/v1/layers?x=1", NULL, NULL, 400, false},
        {"PUT", "/v1/layers/bad", "{\"config\": {\"embed_dim\": 5, \"num_heads\": 2}}", NULL, 422,
         false},
        {"GET", "/v2/models/nope", NULL, NULL, 404, true},
        {"POST", "/v2/models/m/infer", "{\"inputs\": []}", NULL, 400, true},
        {"GET", "/v2/nothing", NULL, NULL, 404, true},
    };
    for (size_t i = 0; i < sizeof errs / sizeof *errs; i++) {
        for (int given = 0; given < 2; given++) {
            char line[96];
            snprintf(line, sizeof line, "X-Request-Id: err-%zu-%d", i, given);
            const char *hs[] = {line, NULL};
            hc_opts o = {.headers = given ? hs : NULL};
            hc_request(d, errs[i].method, errs[i].path, errs[i].ctype, errs[i].body, -1, &o, &r);
            reply_id(&r, id);
            body_id(&r, in_body);
            json_t *j = hc_json(&r);
            json_t *e = json_object_get(j, "error");
            bool dialect = errs[i].v2 ? json_is_string(e) && json_object_size(j) == 2
                                      : json_is_object(e) && json_object_size(j) == 2;
            json_decref(j);
            CHECK(r.status == errs[i].status && dialect,
                  "%s %s: %ld in its dialect with the id: %.200s", errs[i].method, errs[i].path,
                  r.status, r.body);
            CHECK(id[0] && strcmp(id, in_body) == 0 &&
                      (given ? strncmp(id, "err-", 4) == 0 : is_made_id(id)),
                  "%s %s (%s id): header '%s', body '%s'", errs[i].method, errs[i].path,
                  given ? "client's" : "made", id, in_body);
            hc_response_free(&r);
        }
    }

    /* an error answered before the body is read (413 from Content-Length) has it too */
    srv_app *app = srv_daemon_app(d);
    char raw[512], out[2048];
    snprintf(raw, sizeof raw,
             "POST /v1/layers/m/forward HTTP/1.1\r\nHost: x\r\nX-Request-Id: early-413\r\n"
             "Content-Type: application/json\r\nContent-Length: %lld\r\n\r\n",
             (long long)app->opt.max_body_bytes + 1);
    int st = hc_raw(srv_daemon_port(d), raw, strlen(raw), 2000, out, sizeof out);
    CHECK(st == 413 && strstr(out, "X-Request-Id: early-413") &&
              strstr(out, "\"request_id\":\"early-413\""),
          "a 413 before the body: %d %.300s", st, out);

    /* ids that are not sane are replaced, never echoed into the header or the log */
    static const char *const insane[] = {
        "X-Request-Id: has space",
        "X-Request-Id: quote\"here",
        "X-Request-Id: caf\xc3\xa9",
        "X-Request-Id: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
        "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
        "X-Request-Id;", /* curl's way to send it empty */
    };
    for (size_t i = 0; i < sizeof insane / sizeof *insane; i++) {
        const char *hs[] = {insane[i], NULL};
        hc_opts o = {.headers = hs};
        hc_request(d, "GET", "/v1/layers/nope", NULL, NULL, 0, &o, &r);
        reply_id(&r, id);
        body_id(&r, in_body);
        CHECK(is_made_id(id) && strcmp(id, in_body) == 0, "'%.40s...' is replaced by a made id: '%s'",
              insane[i], id);
        hc_response_free(&r);
    }

    /* a preflight and a 204 carry it too */
    const char *pre[] = {"X-Request-Id: pre-1", NULL};
    hc_opts po = {.headers = pre};
    hc_request(d, "OPTIONS", "/v1/layers", NULL, NULL, 0, &po, &r);
    CHECK(reply_id(&r, id) && strcmp(id, "pre-1") == 0, "OPTIONS echoes it: '%s'", id);
    hc_response_free(&r);
    const char *del[] = {"X-Request-Id: del-1", NULL};
    hc_opts dl = {.headers = del};
    hc_request(d, "DELETE", "/v1/layers/m", NULL, NULL, 0, &dl, &r);
    CHECK(r.status == 204 && reply_id(&r, id) && strcmp(id, "del-1") == 0,
          "a 204 echoes it: %ld '%s'", r.status, id);
    hc_response_free(&r);
    hc_stop(d);
}

/* The access log line ends with the id, in both formats; a made id is the one the reply carried. */
static void test_log(void)
{
    static const char *const formats[] = {"text", "json"};
    for (int f = 0; f < 2; f++) {
        ch_child c;
        const char *args[] = {"--port", "0", "--threads", "1", "--log-format", formats[f], NULL};
        int started = ch_start(&c, args, NULL, 20000);
        if (!CHECK(started == 0, "%s: daemon starts: %s", formats[f], c.err)) {
            ch_free(&c);
            continue;
        }
        hc_response r;
        const char *hs[] = {"X-Request-Id: log-me-1", NULL};
        hc_opts o = {.headers = hs};
        hc_request_port(c.port, "GET", "/v1/layers/nope", NULL, NULL, 0, &o, &r);
        hc_response_free(&r);
        hc_request_port(c.port, "GET", "/v2/health/live", NULL, NULL, 0, NULL, &r);
        char made[160] = "";
        hc_header(&r, "X-Request-Id", made, sizeof made);
        hc_response_free(&r);
        char want1[200], want2[200];
        if (f == 0) {
            snprintf(want1, sizeof want1, "\"GET\" \"/v1/layers/nope\" 404 in=0 out=");
            snprintf(want2, sizeof want2, " id=%s\n", made);
        } else {
            snprintf(want1, sizeof want1, "\"status\":404,");
            snprintf(want2, sizeof want2, "\"request_id\":\"%s\"}\n", made);
        }
        CHECK(ch_wait_err(&c, want2, 10000), "%s: the log has the made id: %s", formats[f], c.err);
        const char *line = strstr(c.err, want1);
        const char *end = line ? strchr(line, '\n') : NULL;
        const char *tag = f == 0 ? " id=log-me-1\n" : "\"request_id\":\"log-me-1\"}\n";
        CHECK(line && end && strncmp(end - strlen(tag) + 1, tag, strlen(tag)) == 0,
              "%s: the 404's line ends with the client's id: %s", formats[f], c.err);
        CHECK(ch_stop(&c, 10000) == 0, "%s: stops cleanly", formats[f]);
        ch_free(&c);
    }
}

int main(void)
{
    test_rules();
    test_replies();
    test_log();
    return check_report();
}
