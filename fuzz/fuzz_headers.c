/*
 * fuzz_headers.c - the parsers of request header values that decide something: Accept
 * (http/accept.h), the ETag lists of If-Match / If-None-Match (srv_etag_list, api/layer_io.h) and
 * Authorization with the API key (app/auth.h), each against a reference written here from the RFCs'
 * grammar.
 *
 * Input: a header value, then optionally a NUL and an API key (without one: "k3y-Secret_0").
 * Every parser reads the value (NUL-terminated; a NUL inside ends it, as in a C string):
 *   Accept         srv_accept_quality for application/json, application/octet-stream, text/html
 *                  and the first member's own type against a reference that splits the list at
 *                  commas outside quoted strings and matches each member against RFC 9110 12.5.1
 *                  (media-range, parameters of token or quoted-string values, weight = qvalue);
 *                  srv_accept_prefers_octet as its rule says (higher q, then earlier member);
 *   If-Match       srv_etag_list against: elements separated by commas, empty ones ignored
 *                  (RFC 9110 5.6.1.2), each [W/] then a version in quotes or bare, a version being
 *                  a decimal without leading zeros from 1 to 2^64-1; the first version and whether
 *                  one equals `now` (the first decimal in the value, or 7);
 *   Authorization  srv_auth_init with the key: a key it accepts must be one a client can send
 *                  ("Bearer <key>" must pass srv_auth_check); and srv_auth_check of the value passes
 *                  exactly when it is "Bearer" (any case), one or more spaces, the key, then
 *                  nothing but spaces and tabs.
 */
#include <ctype.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/layer_io.h"
#include "app/auth.h"
#include "http/accept.h"
#include "fuzz_fail.h"

#define MAX_MEMBERS 256

/* ---------------------------------------------------------------------------------------------- */
/* Accept, the reference                                                                          */

static bool tchar(char c)
{
    return isalnum((unsigned char)c) || (c && strchr("!#$%&'*+-.^_`|~", c));
}

static size_t token_len(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && tchar(s[i]))
        i++;
    return i;
}

/* quoted-string at s[0] == '"' within n: its length with both quotes, or 0 */
static size_t quoted_len(const char *s, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        if (s[i] == '\\') {
            if (++i == n)
                return 0;
        } else if (s[i] == '"') {
            return i + 1;
        }
    }
    return 0;
}

typedef struct ref_member {
    const char *type;
    size_t tlen;
    int q; /* thousandths; -1: the member is malformed */
} ref_member;

static int ref_qvalue(const char *s, size_t n)
{
    /* ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] ) */
    if (n == 0 || (s[0] != '0' && s[0] != '1'))
        return -1;
    int q = (s[0] - '0') * 1000;
    if (n == 1)
        return q;
    if (s[1] != '.' || n > 5)
        return -1;
    static const int scale[3] = {100, 10, 1};
    for (size_t i = 2; i < n; i++) {
        if (!isdigit((unsigned char)s[i]) || (s[0] == '1' && s[i] != '0'))
            return -1;
        q += (s[i] - '0') * scale[i - 2];
    }
    return q;
}

static bool ows(char c)
{
    return c == ' ' || c == '\t';
}

/* One member s[0, n), without the blanks around it. */
static ref_member ref_member_parse(const char *s, size_t n)
{
    ref_member m = {s, 0, -1};
    size_t t = token_len(s, n);
    if (t == 0 || t >= n || s[t] != '/')
        return m;
    size_t st = token_len(s + t + 1, n - t - 1);
    if (st == 0)
        return m;
    m.tlen = t + 1 + st;
    int q = 1000;
    size_t i = m.tlen;
    while (i < n) {
        while (i < n && ows(s[i]))
            i++;
        if (i == n)
            break;
        if (s[i] != ';')
            return m;
        i++;
        while (i < n && ows(s[i]))
            i++;
        if (i == n || s[i] == ';')
            continue; /* [ parameter ] */
        size_t name = token_len(s + i, n - i);
        if (name == 0 || i + name >= n || s[i + name] != '=')
            return m;
        size_t v = i + name + 1;
        size_t vl = v < n && s[v] == '"' ? quoted_len(s + v, n - v) : token_len(s + v, n - v);
        if (vl == 0)
            return m;
        if (name == 1 && (s[i] == 'q' || s[i] == 'Q') && (q = ref_qvalue(s + v, vl)) < 0)
            return m;
        i = v + vl;
    }
    m.q = q;
    return m;
}

/* The list split at commas outside quoted strings; empty members dropped. */
static int ref_accept(const char *s, ref_member *out)
{
    int n = 0;
    size_t len = strlen(s);
    for (size_t i = 0; i <= len && n < MAX_MEMBERS;) {
        size_t j = i;
        while (j < len && s[j] != ',') {
            if (s[j] == '"') {
                size_t q = quoted_len(s + j, len - j);
                j += q ? q : 1;
            } else {
                j++;
            }
        }
        size_t a = i, b = j;
        while (a < b && ows(s[a]))
            a++;
        while (b > a && ows(s[b - 1]))
            b--;
        if (b > a)
            out[n++] = ref_member_parse(s + a, b - a);
        i = j + 1;
    }
    return n;
}

static int ref_quality(const ref_member *m, int n, const char *type, int *pos)
{
    size_t tl = strlen(type);
    for (int i = 0; i < n; i++)
        if (m[i].q >= 0 && m[i].tlen == tl && strncasecmp(m[i].type, type, tl) == 0) {
            *pos = i;
            return m[i].q;
        }
    return -1;
}

static void check_accept(const char *v)
{
    static ref_member m[MAX_MEMBERS];
    int n = ref_accept(v, m);
    if (n == MAX_MEMBERS)
        return; /* the reference stopped counting */
    char first[128] = "application/json";
    if (n > 0 && m[0].tlen > 0 && m[0].tlen < sizeof first) {
        memcpy(first, m[0].type, m[0].tlen);
        first[m[0].tlen] = '\0';
    }
    const char *types[] = {"application/json", "application/octet-stream", "text/html", first};
    int q[4], pos[4];
    for (int i = 0; i < 4; i++) {
        int p = -7, rp = -7;
        q[i] = srv_accept_quality(v, types[i], &p);
        int want = ref_quality(m, n, types[i], &rp);
        if (q[i] != want || (want >= 0 && p != rp))
            FAIL("Accept: %s\n%s: quality %d at member %d, the reference %d at %d", v, types[i],
                 q[i], p, want, rp);
        if (q[i] < -1 || q[i] > 1000)
            FAIL("Accept: %s\n%s: quality %d", v, types[i], q[i]);
        pos[i] = p;
    }
    bool octet = q[1] > 0 && (q[1] > q[0] || (q[1] == q[0] && pos[1] < pos[0]));
    if (srv_accept_prefers_octet(v) != octet)
        FAIL("Accept: %s\nsrv_accept_prefers_octet says %d", v, !octet);
}

/* ---------------------------------------------------------------------------------------------- */
/* If-Match lists, the reference                                                                  */

/* One element s[0, n) without blanks: its version, or 0. */
static uint64_t ref_etag(const char *s, size_t n)
{
    if (n >= 2 && s[0] == 'W' && s[1] == '/')
        s += 2, n -= 2;
    if (n >= 2 && s[0] == '"' && s[n - 1] == '"')
        s++, n -= 2;
    if (n == 0 || n > 20 || s[0] == '0')
        return 0;
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i]))
            return 0;
        unsigned d = (unsigned)(s[i] - '0');
        if (x > (UINT64_MAX - d) / 10)
            return 0;
        x = x * 10 + d;
    }
    return x;
}

static void check_etags(const char *v)
{
    uint64_t now = 7;
    const char *d = strpbrk(v, "0123456789");
    if (d) {
        now = 0;
        for (int i = 0; isdigit((unsigned char)d[i]) && i < 19; i++)
            now = now * 10 + (uint64_t)(d[i] - '0');
    }
    /* the reference */
    uint64_t rfirst = 0, sfirst = 0; /* s: If-Match's strong comparison, weak tags left out */
    bool rfound = false, sfound = false, rok = true;
    size_t len = strlen(v);
    for (size_t i = 0; i <= len;) {
        size_t j = i;
        while (j < len && v[j] != ',')
            j++;
        size_t a = i, b = j;
        while (a < b && ows(v[a]))
            a++;
        while (b > a && ows(v[b - 1]))
            b--;
        if (b > a) {
            uint64_t x = ref_etag(v + a, b - a);
            if (!x) {
                rok = false;
                break;
            }
            if (!rfirst)
                rfirst = x;
            rfound |= x == now;
            if (!(b - a >= 2 && v[a] == 'W' && v[a + 1] == '/')) {
                if (!sfirst)
                    sfirst = x;
                sfound |= x == now;
            }
        }
        i = j + 1;
    }
    rok = rok && rfirst;

    uint64_t first = 99;
    bool found = true;
    srv_error err = {0};
    for (int strong = 0; strong < 2; strong++) { /* If-None-Match's weak comparison, If-Match's */
        uint64_t want_first = strong ? sfirst : rfirst;
        bool want_found = strong ? sfound : rfound;
        first = 99;
        found = true;
        memset(&err, 0, sizeof err);
        int rc = srv_etag_list(v, now, "If-Match", strong, &first, &found, &err);
        if ((rc == 0) != rok)
            FAIL("If-Match: %s\nsrv_etag_list %s it (%s), the reference %s", v,
                 rc == 0 ? "takes" : "refuses", err.message, rok ? "takes it" : "does not");
        if (rc == 0 && (first != want_first || found != want_found))
            FAIL("If-Match: %s (now %llu, strong %d)\nfirst %llu found %d, the reference %llu %d",
                 v, (unsigned long long)now, strong, (unsigned long long)first, found,
                 (unsigned long long)want_first, want_found);
        if (rc != 0 && (err.code != SRV_E_BAD_REQUEST || strcmp(err.field, "If-Match") != 0))
            FAIL("If-Match: %s\nrefused with code %d field %s", v, err.code, err.field);
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* Authorization                                                                                  */

static void check_auth(const char *value, const char *key)
{
    srv_auth a;
    srv_error err = {0};
    if (srv_auth_init(&a, NULL, key, false, false, &err) != 0) {
        if (err.code == SRV_OK || !err.message[0])
            FAIL("key \"%s\" refused without a message", key);
        return;
    }
    if (!key[0])
        return; /* no key: every request goes on */
    char bearer[SRV_API_KEY_MAX + 16];
    snprintf(bearer, sizeof bearer, "Bearer %s", key);
    if (srv_auth_check(&a, true, false, bearer, &err) != 0)
        FAIL("key \"%s\" was accepted at start, and \"%s\" does not match it", key, bearer);

    /* the reference: "bearer" in any case, 1*SP, the key, then only blanks */
    bool want = false;
    size_t kl = strlen(key), vl = strlen(value);
    if (vl > 7 && strncasecmp(value, "Bearer ", 7) == 0) {
        size_t i = 7;
        while (i < vl && value[i] == ' ')
            i++;
        size_t end = vl;
        while (end > i && ows(value[end - 1]))
            end--;
        want = end - i == kl && memcmp(value + i, key, kl) == 0;
    }
    srv_error e2 = {0};
    bool got = srv_auth_check(&a, true, false, value, &e2) == 0;
    if (got != want)
        FAIL("key \"%s\", Authorization: %s\nsrv_auth_check %s, the reference %s", key, value,
             got ? "lets it in" : "refuses it", want ? "lets it in" : "refuses it");
    if (!got && (e2.code != SRV_E_UNAUTHORIZED || !e2.message[0]))
        FAIL("Authorization refused with code %d", e2.code);
    /* a probe, or a read without --auth-reads, never needs the key */
    if (srv_auth_check(&a, false, true, value, &e2) != 0 ||
        srv_auth_check(&a, false, false, value, &e2) != 0)
        FAIL("a probe or a read needed the key");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *v = malloc(size + 1);
    memcpy(v, data, size);
    v[size] = '\0';
    size_t vl = strlen(v);
    const char *key = vl < size ? v + vl + 1 : "k3y-Secret_0";
    if (strlen(key) >= SRV_API_KEY_MAX)
        key = "k3y-Secret_0";
    check_accept(v);
    check_etags(v);
    check_auth(v, key);
    free(v);
    return 0;
}
