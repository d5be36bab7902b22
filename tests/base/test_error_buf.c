/*
 * test_error_buf.c - the error table (code -> status, name), first-error-wins and safe truncation
 * of messages, and the growable buffer with its JSON string escaping.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/error.h"
#include "check.h"
#include "mha.h"

static void test_table(void)
{
    static const struct {
        srv_code code;
        int status;
        const char *name;
    } want[] = {
        {SRV_E_BAD_JSON, 400, "bad_json"},          {SRV_E_BAD_REQUEST, 400, "bad_request"},
        {SRV_E_BAD_VALUE, 400, "bad_value"},        {SRV_E_SHAPE, 400, "shape_mismatch"},
        {SRV_E_UNKNOWN_FIELD, 400, "unknown_field"}, {SRV_E_MISSING_FIELD, 400, "missing_field"},
        {SRV_E_BAD_NAME, 400, "bad_name"},          {SRV_E_UNAUTHORIZED, 401, "unauthorized"},
        {SRV_E_FORBIDDEN, 403, "forbidden"},        {SRV_E_NOT_FOUND, 404, "not_found"},
        {SRV_E_LAYER_NOT_FOUND, 404, "layer_not_found"},
        {SRV_E_METHOD, 405, "method_not_allowed"},  {SRV_E_CONFLICT, 409, "conflict"},
        {SRV_E_LENGTH_REQUIRED, 411, "length_required"},
        {SRV_E_TIMEOUT, 408, "request_timeout"},
        {SRV_E_TOO_LARGE, 413, "too_large"},        {SRV_E_MEDIA_TYPE, 415, "unsupported_media_type"},
        {SRV_E_INVALID_CONFIG, 422, "invalid_config"},
        {SRV_E_INTERNAL, 500, "internal"},          {SRV_E_NOMEM, 503, "out_of_memory"},
        {SRV_E_UNAVAILABLE, 503, "unavailable"},    {SRV_E_NOT_IMPLEMENTED, 501, "not_implemented"},
        {SRV_E_URI_TOO_LONG, 414, "uri_too_long"},
        {SRV_E_INSUFFICIENT_STORAGE, 507, "insufficient_storage"},
        {SRV_E_TOO_COSTLY, 413, "too_costly"},
        {SRV_E_CANCELLED, 499, "client_closed_request"},
    };
    size_t n = sizeof want / sizeof want[0];
    CHECK(n == SRV_E_COUNT - 1, "every code has a row in this test (%zu vs %d)", n, SRV_E_COUNT - 1);
    for (size_t i = 0; i < n; i++) {
        CHECK(srv_error_status(want[i].code) == want[i].status, "status of %s: %d", want[i].name,
              srv_error_status(want[i].code));
        CHECK(strcmp(srv_error_name(want[i].code), want[i].name) == 0, "name %s vs %s",
              srv_error_name(want[i].code), want[i].name);
    }
    CHECK(srv_error_status((srv_code)999) == 500, "unknown code is a 500");
    CHECK(strcmp(srv_error_name((srv_code)999), "internal") == 0, "unknown code is internal");
}

static void test_set(void)
{
    srv_error err = {0};
    CHECK(srv_error_set(&err, SRV_E_SHAPE, "key", "key has %d features", 5) == -1, "returns -1");
    CHECK(err.code == SRV_E_SHAPE, "code set");
    CHECK(strcmp(err.field, "key") == 0, "field set");
    CHECK(strcmp(err.message, "key has 5 features") == 0, "message: %s", err.message);
    srv_error_set(&err, SRV_E_BAD_JSON, "other", "second");
    CHECK(err.code == SRV_E_SHAPE && strcmp(err.message, "key has 5 features") == 0,
          "first error wins");
    CHECK(srv_error_set(NULL, SRV_E_BAD_JSON, NULL, "x") == -1, "NULL error accepted");

    /* a long message with multi-byte characters is cut on a character boundary and marked */
    char longmsg[2000];
    size_t k = 0;
    while (k + 2 < sizeof longmsg - 1) {
        longmsg[k++] = '\xc3';
        longmsg[k++] = '\xa9'; /* é */
    }
    longmsg[k] = '\0';
    srv_error e2 = {0};
    srv_error_set(&e2, SRV_E_BAD_REQUEST, longmsg, "x%s", longmsg);
    size_t ml = strlen(e2.message), fl = strlen(e2.field);
    CHECK(ml < sizeof e2.message && ml > 200, "message truncated to %zu", ml);
    CHECK(strcmp(e2.message + ml - 3, "...") == 0, "truncation marked");
    CHECK(((ml - 4) % 2) == 0, "cut on a character boundary ('x' + whole 2-byte chars)");
    CHECK(fl < sizeof e2.field && strcmp(e2.field + fl - 3, "...") == 0 && (fl - 3) % 2 == 0,
          "field truncated on a boundary: %zu", fl);
}

/* An engine error that holds nothing sets nothing: the caller's own error is the one reported. */
static void test_from_mha(void)
{
    srv_error err = {0};
    mha_error none = {0};
    CHECK(srv_error_from_mha(&err, &none, "") == -1 && err.code == SRV_OK && err.message[0] == '\0',
          "an empty engine error is not recorded (code %d, '%s')", err.code, err.message);
    srv_error_set(&err, SRV_E_NOMEM, "", "out of memory creating the registry");
    CHECK(err.code == SRV_E_NOMEM && strstr(err.message, "registry"),
          "the caller's error after it is the one kept: %s", err.message);

    srv_error e2 = {0};
    mha_error shape = {.status = MHA_ERR_SHAPE};
    snprintf(shape.field, sizeof shape.field, "query");
    snprintf(shape.message, sizeof shape.message, "query has 3 features");
    srv_error_from_mha(&e2, &shape, "x.");
    CHECK(e2.code == SRV_E_SHAPE && strcmp(e2.field, "x.query") == 0 &&
              strcmp(e2.message, "query has 3 features") == 0,
          "an engine error keeps its message and gets the prefix: %s %s", e2.field, e2.message);
}

static void test_buf(void)
{
    srv_buf b;
    srv_buf_init(&b);
    CHECK(strcmp(srv_buf_cstr(&b), "") == 0, "empty cstr");
    for (int i = 0; i < 10000; i++)
        srv_buf_putc(&b, (char)('a' + i % 26));
    CHECK(b.len == 10000 && b.data[9999] == 'a' + 9999 % 26 && b.data[10000] == '\0', "putc grows");
    srv_buf_free(&b);
    CHECK(b.data == NULL && b.len == 0, "free zeroes");
    srv_buf_free(&b);
    srv_buf_free(NULL);

    srv_buf_printf(&b, "%d-%s", 42, "x");
    char big[600];
    memset(big, 'z', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    srv_buf_printf(&b, "[%s]", big);
    CHECK(b.len == 4 + 601 && strncmp(b.data, "42-x[zz", 7) == 0 && b.data[b.len - 1] == ']',
          "printf small and large (%zu)", b.len);
    size_t len = 0;
    char *s = srv_buf_steal(&b, &len);
    CHECK(s && len == 605 && s[605] == '\0' && b.data == NULL && b.len == 0, "steal");
    free(s);

    srv_buf_json_string(&b, "a\"b\\c\n\x01\xc3\xa9\xff\xed\xa0\x80z");
    CHECK(strcmp(srv_buf_cstr(&b),
                 "\"a\\\"b\\\\c\\n\\u0001\xc3\xa9\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdz\"") ==
              0,
          "json string escapes, invalid UTF-8 replaced: %s", srv_buf_cstr(&b));
    srv_buf_free(&b);

    /* DEL and the C1 controls (U+0080..U+009F) are escaped too; U+00A0 and up stay as they are */
    srv_buf_json_string(&b, "\x7f\xc2\x80\xc2\x9b\xc2\x9f\xc2\xa0");
    CHECK(strcmp(srv_buf_cstr(&b), "\"\\u007f\\u0080\\u009b\\u009f\xc2\xa0\"") == 0,
          "json string: DEL and C1 escaped: %s", srv_buf_cstr(&b));
    srv_buf_free(&b);

    b.failed = true;
    CHECK(srv_buf_puts(&b, "x") == -1 && srv_buf_steal(&b, NULL) == NULL, "failed buffer stays failed");
    srv_buf_free(&b);
}

int main(void)
{
    test_table();
    test_set();
    test_from_mha();
    test_buf();
    return check_report();
}
