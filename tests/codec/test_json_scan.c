/*
 * test_json_scan.c - srv_json_object_scan: members and their value text, keys unescaped, every
 * refusal (syntax, duplicates, depth, too many members, long keys), and a differential check
 * against jansson on thousands of mutated documents (both must agree on what is valid JSON).
 * srv_json_object_scan_lazy: tensor values delimited right (strings holding brackets and quotes),
 * and on the same mutated documents the same members as the strict scan, or its very error.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "codec/json_scan.h"

static int scan(const char *text, srv_json_member *m, int max, int depth, srv_error *err)
{
    memset(err, 0, sizeof *err);
    return srv_json_object_scan(text, strlen(text), "body", depth, m, max, err);
}

static void test_members(void)
{
    srv_json_member m[8];
    srv_error err;
    const char *text = " {\"query\": [[1, 2], [3, 4]], \"need_weights\" :true,\n"
                       "\"config\": {\"a\": [1, {\"b\": null}]}, \"k\\u00e9y\\ud83d\\ude00\": \"s\\\"\"} ";
    int n = scan(text, m, 8, 16, &err);
    CHECK(n == 4, "4 members: %d %s", n, err.message);
    if (n == 4) {
        CHECK(strcmp(m[0].key, "query") == 0 && m[0].value_len == 16 &&
                  strncmp(m[0].value, "[[1, 2], [3, 4]]", 16) == 0,
              "query value text");
        CHECK(strcmp(m[1].key, "need_weights") == 0 && m[1].value_len == 4 &&
                  strncmp(m[1].value, "true", 4) == 0,
              "bool value");
        CHECK(strcmp(m[2].key, "config") == 0 && m[2].value[0] == '{' &&
                  m[2].value[m[2].value_len - 1] == '}',
              "object value");
        CHECK(strcmp(m[3].key, "k\xc3\xa9y\xf0\x9f\x98\x80") == 0, "key unescaped to UTF-8: %s", m[3].key);
        CHECK(m[3].value_len == 5, "string value with escape kept raw");
    }
    CHECK(scan("{}", m, 8, 4, &err) == 0, "empty object");
    CHECK(scan(" \t\r\n{ } \n", m, 8, 4, &err) == 0, "white space");
}

static void expect_err(const char *text, int max, int depth, srv_code want, const char *needle)
{
    srv_json_member m[4];
    srv_error err;
    int n = scan(text, m, max, depth, &err);
    CHECK(n == -1 && err.code == want, "%s: got %d %s (%s), want %s", text, n, srv_error_name(err.code),
          err.message, srv_error_name(want));
    if (needle && n == -1)
        CHECK(strstr(err.message, needle) != NULL, "%s: message \"%s\" lacks \"%s\"", text, err.message,
              needle);
    /* the object's name, or for a key given twice that key below it ("body.a") */
    if (n == -1)
        CHECK(strcmp(err.field, "body") == 0 ||
                  (strstr(err.message, "duplicate key") && strncmp(err.field, "body.", 5) == 0),
              "field named: %s", err.field);
}

static void test_errors(void)
{
    expect_err("{\"a\":1,\"a\":2}", 4, 8, SRV_E_BAD_JSON, "duplicate key \"a\"");
    expect_err("{\"a\":1,\"\\u0061\":2}", 4, 8, SRV_E_BAD_JSON, "duplicate");
    /* valid JSON of another type under a name ("body" here, "weights" in a PUT) is a type error;
     * the whole request body (scanned under "") stays bad_json (tests/cases/not_an_object) */
    expect_err("[1,2]", 4, 8, SRV_E_BAD_REQUEST, "object");
    expect_err("\"x\"", 4, 8, SRV_E_BAD_REQUEST, "object");
    expect_err("", 4, 8, SRV_E_BAD_JSON, NULL);
    expect_err("{\"a\":1} {}", 4, 8, SRV_E_BAD_JSON, "byte 8");
    expect_err("{\"a\":1,\"b\":2,\"c\":3}", 2, 8, SRV_E_BAD_REQUEST, "more than 2");
    char longkey[300];
    snprintf(longkey, sizeof longkey, "{\"%0200d\":1}", 0);
    expect_err(longkey, 4, 8, SRV_E_BAD_REQUEST, "200 bytes");
    expect_err("{\"a\\u0000b\":1}", 4, 8, SRV_E_BAD_REQUEST, "\\u0000");
    expect_err("{\"a\":[[[1]]]}", 4, 3, SRV_E_BAD_JSON, "deeper than 3");
    CHECK(scan("{\"a\":[[1]]}", (srv_json_member[4]){0}, 4, 3, &(srv_error){0}) == 1, "depth 3 fits");

    static const char *bad[] = {
        "{", "{\"a\"}", "{\"a\":}", "{\"a\" 1}", "{a:1}", "{'a':1}", "{\"a\":1,}", "{,}",
        "{\"a\":01}", "{\"a\":+1}", "{\"a\":.5}", "{\"a\":1.}", "{\"a\":1e}", "{\"a\":-}", "{\"a\":0x1}",
        "{\"a\":NaN}", "{\"a\":Infinity}", "{\"a\":-Infinity}", "{\"a\":tru}", "{\"a\":nul}",
        "{\"a\":True}", "{\"a\":[1,]}", "{\"a\":[,1]}", "{\"a\":[1 2]}", "{\"a\":[}", "{\"a\":{\"b\"}}",
        "{\"a\":\"\\x\"}", "{\"a\":\"\\u12\"}", "{\"a\":\"\\ud800\"}", "{\"a\":\"\\udc00\"}",
        "{\"a\":\"\\ud800\\u0041\"}", "{\"a\":\"tab\there\"}", "{\"a\":\"\xff\"}", "{\"a\":\"\xc0\xaf\"}",
        "{\"a\":\"\xed\xa0\x80\"}", "{\"a\":\"\xf4\x90\x80\x80\"}", "{\"a\":\"unterminated}", "{\"a\":1 ",
        "{\"a\":[1]]}", "{\"a\":1}}", "{\"a\":1e5.5}", "{\"a\":-01}", "{\"a\":\"\x01\"}",
        "\xef\xbb\xbf{}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_err(bad[i], 4, 8, SRV_E_BAD_JSON, "invalid JSON");

    /* NUL bytes inside the text (the length says where it ends, not a NUL) */
    srv_json_member m[2];
    srv_error err = {0};
    CHECK(srv_json_object_scan("{\"a\":1}\0", 8, "", 8, m, 2, &err) == -1 && err.code == SRV_E_BAD_JSON,
          "NUL after the object");
    memset(&err, 0, sizeof err);
    CHECK(srv_json_object_scan("{\"a\":\"x\0y\"}", 11, "", 8, m, 2, &err) == -1 &&
              err.code == SRV_E_BAD_JSON,
          "NUL inside a string");
    memset(&err, 0, sizeof err);
    CHECK(srv_json_object_scan("{\"a\":1}xyz", 7, "", 8, m, 2, &err) == 1, "length bounds the text");

    /* srv_json_string cuts output to cap but reports the full length */
    char out[4];
    size_t n = 0;
    const char *s = "\"abcdef\" tail";
    const char *q = srv_json_string(s, s + strlen(s), out, sizeof out, &n, s, "", &err);
    CHECK(q == s + 8 && n == 6 && strcmp(out, "abc") == 0, "cut string: %s %zu", out, n);
}

/* The it-th test document: one of a few seeds with 1-3 random bytes replaced, inserted or deleted
 * (state *st); written to doc[cap], its length returned. */
static size_t mutated(char *doc, size_t cap, int it, uint64_t *st)
{
    static const char *seeds[] = {
        "{\"query\": [[0.1, -2e-3, 3E+2], [4, 5, 6]], \"need_weights\": true, \"x\": null}",
        "{\"config\": {\"embed_dim\": 8, \"num_heads\": 2, \"bias\": false}, \"s\": \"a\\\"b\\\\c\\/\\u00e9\"}",
        "{\"w\": {\"shape\": [2], \"dtype\": \"float32\", \"base64\": \"AACAPwAAAEA=\"}, \"e\": []}",
        "{\"k\": \"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\", \"n\": -0.0, \"m\": [{}, [], [[]]], \"z\": 0}",
    };
    const char alphabet[] = "{}[]\",:0123456789.eE+-tfnrul\\ \xc3\xa9\xff\x01";
    const char *seed = seeds[it % 4];
    size_t len = strlen(seed);
    memcpy(doc, seed, len + 1);
    int muts = 1 + it % 3;
    for (int k = 0; k < muts; k++) {
        *st ^= *st << 13, *st ^= *st >> 7, *st ^= *st << 17;
        size_t pos = (size_t)(*st % len);
        int op = (int)(*st >> 20) % 3;
        char ch = alphabet[(*st >> 32) % (sizeof alphabet - 1)];
        if (op == 0) { /* replace */
            doc[pos] = ch;
        } else if (op == 1 && len + 1 < cap) { /* insert */
            memmove(doc + pos + 1, doc + pos, len - pos + 1);
            doc[pos] = ch;
            len++;
        } else if (len > 1) { /* delete */
            memmove(doc + pos, doc + pos + 1, len - pos);
            len--;
        }
    }
    return len;
}

/* Both scanners must agree on validity. jansson is told to reject duplicate keys and to take any
 * value; differences that are decisions, not bugs, are skipped: numbers out of double range
 * (jansson refuses them, JSON's grammar does not) and duplicates in nested objects (we only check
 * the scanned object's own keys). */
static void test_against_jansson(void)
{
    uint64_t st = 12345;
    int disagree = 0, tried = 0;
    for (int it = 0; it < 40000; it++) {
        char doc[256];
        size_t len = mutated(doc, sizeof doc, it, &st);
        json_error_t jerr;
        json_t *j = json_loadb(doc, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
        bool jok = j != NULL && json_is_object(j);
        json_decref(j);
        srv_json_member m[16];
        srv_error err = {0};
        int n = srv_json_object_scan(doc, len, "", 64, m, 16, &err);
        bool ok = n >= 0;
        if (!jok && (strstr(jerr.text, "overflow") || strstr(jerr.text, "duplicate")))
            continue;
        tried++;
        if (ok != jok) {
            if (disagree++ < 5)
                CHECK(0, "scanner says %s, jansson says %s, on: %s (%s / %s)", ok ? "valid" : "invalid",
                      jok ? "valid" : "invalid", doc, err.message, jok ? "" : jerr.text);
        }
    }
    CHECK(disagree == 0, "%d of %d mutated documents judged differently from jansson", disagree, tried);
}

static int scan_lazy(const char *text, size_t len, const char *const *keys, srv_json_member *m, int max,
                     int depth, srv_error *err)
{
    memset(err, 0, sizeof *err);
    return srv_json_object_scan_lazy(text, len, "body", depth, keys, m, max, err);
}

static void test_lazy(void)
{
    static const char *const all[] = {"*", NULL};
    static const char *const some[] = {"q", "w", NULL};
    srv_json_member m[8];
    srv_error err;
    /* strings holding brackets, braces and escaped quotes must not move the value's end */
    const char *text = "{\"q\": [[\"]]\", \"\\\"]\\\\\"], [\"{\", 1e5]] , \"w\": {\"a\": \"}\\\\\", \"b\": [\"[\"]},"
                       " \"x\": [1, 2], \"q2\": 7, \"y\": \"[\"}";
    int n = scan_lazy(text, strlen(text), some, m, 8, 8, &err);
    CHECK(n == 5, "5 members: %d %s", n, err.message);
    if (n == 5) {
        const char *q = "[[\"]]\", \"\\\"]\\\\\"], [\"{\", 1e5]]";
        const char *w = "{\"a\": \"}\\\\\", \"b\": [\"[\"]}";
        CHECK(m[0].lazy && m[0].value_len == strlen(q) && !memcmp(m[0].value, q, strlen(q)), "q delimited: %.*s",
              (int)m[0].value_len, m[0].value);
        CHECK(m[1].lazy && m[1].value_len == strlen(w) && !memcmp(m[1].value, w, strlen(w)), "w delimited: %.*s",
              (int)m[1].value_len, m[1].value);
        CHECK(!m[2].lazy && !m[3].lazy && !m[4].lazy, "unlisted keys and scalars are validated");
    }
    /* what a lazy value does not check... */
    n = scan_lazy("{\"q\": [1, 02, NaN,, x]}", 23, some, m, 8, 8, &err);
    CHECK(n == 1 && m[0].lazy && m[0].value_len == 16, "lazy value not validated: %d %s", n, err.message);
    /* ...and what it does: the error is then the strict scan's */
    static const char *bad[] = {
        "{\"q\": [1, 2}",          "{\"q\": [1, 2]]}",      "{\"q\": [[1, 2]}",    "{\"q\": {\"a\": [}]}",
        "{\"q\": [\"]\"}",         "{\"q\": [\"\\\"]}",    "{\"q\": [1, 2] 3}",   "{\"q\": [1,02], \"q\": 1}",
        "{\"q\": [1,02], \"x\": 01}", "{\"q\": [[[[[[[[[1]]]]]]]]]}", "{\"q\": [01], " "\"k\\u0000\": 1}",
        "{\"q\": [1]",             "{\"q\": [1]} x",        "{\"x\": [01], \"q\": [1]}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        srv_error strict;
        int ns = scan(bad[i], m, 8, 8, &strict);
        int nl = scan_lazy(bad[i], strlen(bad[i]), some, m, 8, 8, &err);
        CHECK(ns == -1 && nl == -1 && err.code == strict.code && !strcmp(err.message, strict.message) &&
                  !strcmp(err.field, strict.field),
              "%s: lazy %d %s (%s), strict %d %s (%s)", bad[i], nl, srv_error_name(err.code), err.message,
              ns, srv_error_name(strict.code), strict.message);
    }
    /* mutated documents: what the strict scan accepts, the lazy one splits the same way; what the
     * lazy one refuses, it refuses with the strict error; it accepts more only inside lazy values */
    uint64_t st = 777;
    int wrong = 0;
    for (int it = 0; it < 40000; it++) {
        char doc[256];
        size_t len = mutated(doc, sizeof doc, it, &st);
        srv_json_member ms[16], ml[16];
        srv_error es = {0}, el = {0};
        int ns = srv_json_object_scan(doc, len, "", 6, ms, 16, &es);
        int nl = srv_json_object_scan_lazy(doc, len, "", 6, all, ml, 16, &el);
        bool ok;
        if (ns >= 0) {
            ok = nl == ns;
            for (int i = 0; ok && i < ns; i++)
                ok = !strcmp(ms[i].key, ml[i].key) && ms[i].value == ml[i].value &&
                     ms[i].value_len == ml[i].value_len;
        } else if (nl < 0) {
            ok = el.code == es.code && !strcmp(el.message, es.message);
        } else {
            ok = false;
            for (int i = 0; i < nl; i++)
                ok |= ml[i].lazy;
        }
        if (!ok && wrong++ < 5)
            CHECK(0, "lazy scan %d (%s), strict %d (%s) on: %s", nl, el.message, ns, es.message, doc);
    }
    CHECK(wrong == 0, "%d mutated documents scanned differently lazily", wrong);
}

/* The result of scanning doc one way, to compare levels. */
typedef struct scan_result {
    int n;
    size_t lens[4];
    char message[1024];
    long str_end;      /* srv_json_string on the first string value: end offset, -1 on error */
    size_t str_len;
} scan_result;

static void scan_all_ways(const char *doc, size_t len, const char *str, scan_result *r)
{
    static const char *const q_only[] = {"q", NULL};
    srv_json_member m[4];
    srv_error err = {0}, e2 = {0}, e3 = {0};
    memset(r, 0, sizeof *r);
    r->n = srv_json_object_scan_lazy(doc, len, "", 8, q_only, m, 4, &err);
    for (int i = 0; i < r->n && i < 4; i++)
        r->lens[i] = m[i].value_len;
    int ns = srv_json_object_scan(doc, len, "", 8, m, 4, &e2);
    char out[64];
    const char *q = srv_json_string(str, doc + len, out, sizeof out, &r->str_len, doc, "s", &e3);
    r->str_end = q ? q - doc : -1;
    snprintf(r->message, sizeof r->message, "%d|%s|%s|%s|%.20s", ns, err.message, e2.message,
             e3.message, q ? out : "");
}

/* A plain-string oracle for srv_json_object_scan_lazy_plain: the strings of `doc` opening at the
 * positions listed. */
typedef struct plain_oracle {
    const char *const *opens;
    int n;
    int asked;
} plain_oracle;

static const char *oracle_close(void *cls, const char *q)
{
    plain_oracle *o = cls;
    o->asked++;
    for (int i = 0; i < o->n; i++)
        if (o->opens[i] == q)
            return strchr(q + 1, '"');
    return NULL;
}

static void test_plain_hints(void)
{
    static const char *const keys[] = {"q", "k", NULL};
    const char *doc = "{\"q\": {\"shape\": [2], \"base64\": \"AAAAAAAAAAA=\"}, \"k\": [\"QUJD\", \"x\\\"]\"], "
                      "\"n\": \"plain but not lazy\"}";
    const char *opens[2] = {strstr(doc, "\"AAAA"), strstr(doc, "\"QUJD")};
    plain_oracle o = {opens, 2, 0};
    srv_json_plain plain = {oracle_close, &o};
    srv_json_member a[4], b[4];
    srv_error ea = {0}, eb = {0};
    int na = srv_json_object_scan_lazy(doc, strlen(doc), "", 8, keys, a, 4, &ea);
    int nb = srv_json_object_scan_lazy_plain(doc, strlen(doc), "", 8, keys, &plain, b, 4, &eb);
    CHECK(na == 3 && nb == 3, "both scans split the body: %d %d %s", na, nb, eb.message);
    for (int i = 0; i < na && i < nb; i++)
        CHECK(a[i].value == b[i].value && a[i].value_len == b[i].value_len && !strcmp(a[i].key, b[i].key),
              "member %d the same with hints", i);
    CHECK(o.asked >= 2, "the oracle was asked about the strings in lazy values (%d)", o.asked);
}

static void test_vector_runs(void)
{
    /* Long strings and arrays are skipped a vector at a time: a stop byte at every offset of the
     * blocks (and across their edges) must give every level the words-only level's results. */
    static const char *const inserts[] = {"\"", "\\n", "\\x", "\n", "\x80", "\xC3\xA9", "[", "]",
                                          "{", "}", "\x1F", " "};
    static const size_t lens[] = {60, 64, 65, 70, 97, 128, 130, 200, 333};
    int wrong = 0, docs = 0;
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        size_t run = lens[li];
        for (size_t pos = 0; pos < run; pos++) {
            for (size_t k = 0; k < sizeof inserts / sizeof inserts[0]; k++) {
                char doc[1600]; /* 4 runs of at most 333 bytes and the rest */
                char body[400];
                memset(body, 'A', run);
                size_t il = strlen(inserts[k]);
                memcpy(body + pos, inserts[k], pos + il <= run ? il : run - pos);
                body[run] = '\0';
                /* the run as a string (in a lazy tensor and in a strict member) and in an array */
                int len = snprintf(doc, sizeof doc,
                                   "{\"q\": {\"shape\": [1], \"base64\": \"%s\"}, \"s\": \"%s\", "
                                   "\"x\": [\"%s\", [%s]]}",
                                   body, body, body, body);
                if (len <= 0 || (size_t)len >= sizeof doc) {
                    CHECK(0, "document of %d bytes does not fit", len);
                    continue;
                }
                const char *str = strstr(doc, "\"s\": ") + 5;
                scan_result want, got;
                srv_json_scan_set_simd(0);
                scan_all_ways(doc, (size_t)len, str, &want);
                for (int level = 1; level <= 2; level++) {
                    srv_json_scan_set_simd(level);
                    scan_all_ways(doc, (size_t)len, str, &got);
                    if (memcmp(&want, &got, sizeof want) != 0 && wrong++ < 5)
                        CHECK(0, "level %d differs on run %zu, insert %zu at %zu: n %d/%d str_end %ld/%ld, %s / %s",
                              level, run, k, pos, got.n, want.n, got.str_end, want.str_end,
                              got.message, want.message);
                }
                docs++;
            }
        }
    }
    srv_json_scan_set_simd(-1);
    CHECK(wrong == 0, "%d of %d documents scanned differently with vectors", wrong, docs);
}

int main(void)
{
    test_vector_runs();
    test_plain_hints();
    test_members();
    test_errors();
    test_against_jansson();
    test_lazy();
    return check_report();
}
