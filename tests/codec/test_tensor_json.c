/*
 * test_tensor_json.c - the three JSON tensor forms (nested, flat, base64) on input, with every
 * refusal the contract names (ragged, empty, too deep, NaN/inf, overflow, bools where not allowed,
 * mixed types, unknown keys, bad base64, shape/data mismatch, limits), and on output (exact text
 * of small cases; bit-exact round trips of random tensors in every form).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "codec/base64.h"
#include "codec/float_parse.h"
#include "codec/tensor.h"

static srv_tensor_rules rules_float = {.field = "query", .max_elements = 1000000, .max_depth = 8};
static srv_tensor_rules rules_mask = {
    .field = "attn_mask", .allow_bool = true, .allow_neg_inf = true, .max_elements = 1000000, .max_depth = 8};

/* Parses text; returns the error code (SRV_OK on success) and leaves the tensor in *t. */
static srv_code parse(srv_tensor *t, const char *text, const srv_tensor_rules *r, srv_error *err)
{
    memset(err, 0, sizeof *err);
    int rc = srv_tensor_parse(t, text, strlen(text), r, err);
    if (rc == 0)
        return SRV_OK;
    return err->code == SRV_OK ? SRV_E_INTERNAL : err->code;
}

static void expect_code(const char *text, const srv_tensor_rules *r, srv_code want, const char *needle)
{
    srv_tensor t;
    srv_error err;
    srv_code got = parse(&t, text, r, &err);
    CHECK(got == want, "%s: got %s (%s), want %s", text, srv_error_name(got), err.message,
          srv_error_name(want));
    if (got != SRV_OK) {
        CHECK(t.data == NULL, "%s: nothing owned after an error", text);
        /* the tensor's name; an unknown member of a tensor object is named below it ("q.dtpye") */
        size_t n = strlen(r->field);
        CHECK(strcmp(err.field, r->field) == 0 ||
                  (got == SRV_E_UNKNOWN_FIELD && strncmp(err.field, r->field, n) == 0 &&
                   err.field[n] == '.' && needle && strcmp(err.field + n + 1, needle) == 0),
              "%s: error field \"%s\"", text, err.field);
        if (needle)
            CHECK(strstr(err.message, needle) != NULL, "%s: message \"%s\" lacks \"%s\"", text,
                  err.message, needle);
    }
    srv_tensor_free(&t);
}

static void test_nested(void)
{
    srv_tensor t;
    srv_error err;
    CHECK(parse(&t, " [[0.1, 0.2, -3e2],\n [4, 5.5, 6]] ", &rules_float, &err) == SRV_OK, "2x3: %s",
          err.message);
    CHECK(t.dtype == SRV_DTYPE_F32 && t.ndim == 2 && t.shape[0] == 2 && t.shape[1] == 3 && t.count == 6,
          "2x3 shape");
    const float *f = t.data;
    CHECK(f[0] == 0.1f && f[1] == 0.2f && f[2] == -300.0f && f[3] == 4 && f[4] == 5.5f && f[5] == 6,
          "2x3 values");
    srv_tensor_free(&t);
    srv_tensor_free(&t);
    srv_tensor_free(NULL);

    CHECK(parse(&t, "[[[1],[2]],[[3],[4]],[[5],[6]]]", &rules_float, &err) == SRV_OK && t.ndim == 3 &&
              t.shape[0] == 3 && t.shape[1] == 2 && t.shape[2] == 1 && ((float *)t.data)[5] == 6,
          "3x2x1");
    srv_tensor_free(&t);
    CHECK(parse(&t, "2.5", &rules_float, &err) == SRV_OK && t.ndim == 0 && t.count == 1 &&
              ((float *)t.data)[0] == 2.5f,
          "a bare number is a 0-d tensor");
    srv_tensor_free(&t);
    CHECK(parse(&t, "[-0]", &rules_float, &err) == SRV_OK && signbit(((float *)t.data)[0]), "-0 kept");
    srv_tensor_free(&t);

    /* ragged, empty, too deep */
    expect_code("[[1,2],[3]]", &rules_float, SRV_E_SHAPE, "query[1]");
    expect_code("[[1,2],[3,4,5]]", &rules_float, SRV_E_SHAPE, "query[1] has 3");
    expect_code("[[1],2]", &rules_float, SRV_E_SHAPE, "query[1]");
    expect_code("[1,[2]]", &rules_float, SRV_E_SHAPE, "query[1]");
    expect_code("[[[1,2],[3,4]],[[1,2],[3]]]", &rules_float, SRV_E_SHAPE, "query[1][1]");
    expect_code("[[1],[]]", &rules_float, SRV_E_SHAPE, "query[1]");
    expect_code("[[],[1]]", &rules_float, SRV_E_SHAPE, NULL);
    expect_code("[[[1]],[]]", &rules_float, SRV_E_SHAPE, NULL);
    expect_code("[[],[[1]]]", &rules_float, SRV_E_SHAPE, NULL);
    expect_code("[]", &rules_float, SRV_E_SHAPE, "empty");
    expect_code("[[]]", &rules_float, SRV_E_SHAPE, "empty");
    expect_code("[[],[]]", &rules_float, SRV_E_SHAPE, "shape [2, 0]");
    srv_tensor_rules shallow = rules_float;
    shallow.max_depth = 2;
    expect_code("[[[1]]]", &shallow, SRV_E_SHAPE, "deeper than 2");
    expect_code("[[1]]", &shallow, SRV_OK, NULL);
    expect_code("[[[[[[[[[1]]]]]]]]]", &rules_float, SRV_E_SHAPE, "deeper than 8");

    /* values */
    expect_code("[1e39]", &rules_float, SRV_E_BAD_VALUE, "query[0] = 1e39");
    expect_code("[[0, -1e39]]", &rules_float, SRV_E_BAD_VALUE, "query[0][1]");
    expect_code("[3.4028235e38, 1e-50]", &rules_float, SRV_OK, NULL);
    expect_code("[\"-inf\"]", &rules_float, SRV_E_BAD_VALUE, "\"-inf\"");
    expect_code("[0, \"-inf\"]", &rules_mask, SRV_OK, NULL);
    expect_code("[\"inf\"]", &rules_mask, SRV_E_BAD_VALUE, "\"inf\"");
    expect_code("[\"nan\"]", &rules_mask, SRV_E_BAD_VALUE, NULL);
    expect_code("[\"NaN\"]", &rules_mask, SRV_E_BAD_VALUE, NULL);
    expect_code("[\"Infinity\"]", &rules_mask, SRV_E_BAD_VALUE, NULL);
    expect_code("[\"-Infinity\"]", &rules_mask, SRV_E_BAD_VALUE, NULL);
    expect_code("[\"-inf \"]", &rules_mask, SRV_E_BAD_VALUE, NULL);
    expect_code("[\"\\u002dinf\"]", &rules_mask, SRV_E_BAD_VALUE, NULL);
    expect_code("[NaN]", &rules_float, SRV_E_BAD_JSON, "NaN");
    expect_code("[Infinity]", &rules_float, SRV_E_BAD_JSON, NULL);
    expect_code("[-Infinity]", &rules_mask, SRV_E_BAD_JSON, NULL);
    expect_code("[null]", &rules_float, SRV_E_BAD_VALUE, "null");
    expect_code("[{}]", &rules_float, SRV_E_BAD_REQUEST, NULL);
    expect_code("[true]", &rules_float, SRV_E_BAD_VALUE, "boolean");
    expect_code("[true, 1]", &rules_mask, SRV_E_BAD_VALUE, "not both");
    expect_code("[1, false]", &rules_mask, SRV_E_BAD_VALUE, "not both");
    expect_code("[true, \"-inf\"]", &rules_mask, SRV_E_BAD_VALUE, NULL);
    CHECK(parse(&t, "[[true,false],[false,true]]", &rules_mask, &err) == SRV_OK &&
              t.dtype == SRV_DTYPE_BOOL && t.count == 4 && ((uint8_t *)t.data)[0] == 1 &&
              ((uint8_t *)t.data)[1] == 0 && ((uint8_t *)t.data)[3] == 1,
          "bool mask");
    srv_tensor_free(&t);

    /* JSON grammar */
    const char *bad[] = {"[01]", "[+1]", "[.5]", "[1.]", "[0x1]", "[1,]", "[,1]", "[1 2]", "[1",
                         "[1]]", "[1] x", "[1e]", "[--1]", "[tru]", "[truex]", "[1.5.3]", "",
                         "   ", "[\"-inf]", "[1,,2]", "[[1]2]", "[1}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_code(bad[i], &rules_mask, SRV_E_BAD_JSON, NULL);

    /* limits */
    srv_tensor_rules small = rules_float;
    small.max_elements = 3;
    expect_code("[1,2,3]", &small, SRV_OK, NULL);
    expect_code("[1,2,3,4]", &small, SRV_E_TOO_LARGE, NULL);
    expect_code("[[1,2],[3,4]]", &small, SRV_E_TOO_LARGE, NULL);
}

static void test_flat(void)
{
    srv_tensor t;
    srv_error err;
    CHECK(parse(&t, "{\"shape\": [2, 2], \"data\": [0.1, 0.2, 0.3, 0.4], \"dtype\": \"float32\"}",
                &rules_float, &err) == SRV_OK &&
              t.ndim == 2 && t.shape[0] == 2 && t.shape[1] == 2 && t.count == 4 &&
              ((float *)t.data)[3] == 0.4f,
          "flat 2x2: %s", err.message);
    srv_tensor_free(&t);
    CHECK(parse(&t, "{\"data\": [1,2,3,4,5,6], \"shape\": [3,1,2]}", &rules_float, &err) == SRV_OK &&
              t.ndim == 3 && t.shape[2] == 2 && t.dtype == SRV_DTYPE_F32,
          "flat, data before shape, no dtype");
    srv_tensor_free(&t);
    CHECK(parse(&t, "{\"shape\": [], \"data\": [7]}", &rules_float, &err) == SRV_OK && t.ndim == 0 &&
              t.count == 1,
          "flat scalar");
    srv_tensor_free(&t);
    CHECK(parse(&t, "{\"shape\":[1,3],\"dtype\":\"bool\",\"data\":[true,false,true]}", &rules_mask,
                &err) == SRV_OK &&
              t.dtype == SRV_DTYPE_BOOL && ((uint8_t *)t.data)[2] == 1,
          "flat bool");
    srv_tensor_free(&t);
    expect_code("{\"shape\":[2],\"data\":[0,\"-inf\"]}", &rules_mask, SRV_OK, NULL);

    expect_code("{\"shape\":[2,2],\"data\":[1,2,3]}", &rules_float, SRV_E_SHAPE, "3 elements");
    expect_code("{\"shape\":[2,2],\"data\":[1,2,3,4,5]}", &rules_float, SRV_E_SHAPE, NULL);
    expect_code("{\"shape\":[2,2],\"data\":[[1,2],[3,4]]}", &rules_float, SRV_E_BAD_REQUEST, "flat");
    expect_code("{\"shape\":[2],\"data\":[1,2],\"dtpye\":\"float32\"}", &rules_float,
                SRV_E_UNKNOWN_FIELD, "dtpye");
    expect_code("{\"data\":[1,2]}", &rules_float, SRV_E_MISSING_FIELD, "shape");
    expect_code("{\"shape\":[2]}", &rules_float, SRV_E_MISSING_FIELD, NULL);
    expect_code("{}", &rules_float, SRV_E_MISSING_FIELD, NULL);
    expect_code("{\"shape\":[1],\"data\":[1],\"base64\":\"AACAPw==\"}", &rules_float,
                SRV_E_BAD_REQUEST, NULL);
    expect_code("{\"shape\":[0,2],\"data\":[]}", &rules_float, SRV_E_SHAPE, "empty");
    /* an empty "data" is judged by the declared shape, which the message shows */
    expect_code("{\"shape\":[1,0,4],\"data\":[]}", &rules_float, SRV_E_SHAPE,
                "is empty (shape [1, 0, 4])");
    expect_code("{\"shape\":[1,4],\"data\":[]}", &rules_float, SRV_E_SHAPE,
                "has 0 elements but shape [1, 4] needs 4");
    expect_code("{\"shape\":[2],\"dtype\":\"bool\",\"data\":[]}", &rules_mask, SRV_E_SHAPE,
                "has 0 elements but shape [2] needs 2");
    expect_code("{\"shape\":[4294967296,4294967296,4294967296],\"data\":[1]}", &rules_float,
                SRV_E_TOO_LARGE, NULL);
    expect_code("{\"shape\":[99999999999999999999999],\"data\":[1]}", &rules_float, SRV_E_TOO_LARGE,
                NULL);
    expect_code("{\"shape\":[1000001],\"base64\":\"\"}", &rules_float, SRV_E_TOO_LARGE, NULL);
    expect_code("{\"shape\":[-1],\"data\":[1]}", &rules_float, SRV_E_BAD_REQUEST, "-1");
    expect_code("{\"shape\":[1.5],\"data\":[1]}", &rules_float, SRV_E_BAD_REQUEST, "1.5");
    expect_code("{\"shape\":[1e2],\"data\":[1]}", &rules_float, SRV_E_BAD_REQUEST, NULL);
    expect_code("{\"shape\":[\"2\"],\"data\":[1,2]}", &rules_float, SRV_E_BAD_REQUEST, NULL);
    expect_code("{\"shape\":2,\"data\":[1,2]}", &rules_float, SRV_E_BAD_REQUEST, NULL);
    expect_code("{\"shape\":[1,1,1,1,1,1,1,1,1],\"data\":[1]}", &rules_float, SRV_E_SHAPE, NULL);
    expect_code("{\"shape\":[1],\"data\":[1],\"dtype\":\"float64\"}", &rules_float, SRV_E_BAD_REQUEST,
                "float32");
    expect_code("{\"shape\":[1],\"dtype\":\"bool\",\"data\":[true]}", &rules_float, SRV_E_BAD_REQUEST,
                NULL);
    expect_code("{\"shape\":[1],\"data\":[1],\"dtype\":\"bool\"}", &rules_mask, SRV_E_BAD_VALUE, NULL);
    expect_code("{\"shape\":[1],\"data\":[true],\"dtype\":\"float32\"}", &rules_mask, SRV_E_BAD_VALUE,
                NULL);
    expect_code("{\"shape\":[1],\"data\":[1],\"shape\":[1]}", &rules_float, SRV_E_BAD_JSON,
                "duplicate");
    expect_code("{\"shape\":[1],\"data\":1}", &rules_float, SRV_E_BAD_REQUEST, NULL);
    expect_code("{\"shape\":[1],\"data\":[1]", &rules_float, SRV_E_BAD_JSON, NULL);
    expect_code("{\"shape\":[1],\"data\":[1],}", &rules_float, SRV_E_BAD_JSON, NULL);
    expect_code("{\"shape\":[1] \"data\":[1]}", &rules_float, SRV_E_BAD_JSON, NULL);
    expect_code("{\"shape\":[1],\"data\":[NaN]}", &rules_float, SRV_E_BAD_JSON, NULL);
    expect_code("{\"shape\":[1],\"data\":[1e40]}", &rules_float, SRV_E_BAD_VALUE, "query.data[0]");
}

static void test_base64(void)
{
    srv_tensor t;
    srv_error err;
    /* 1.0f = 00 00 80 3F, 2.0f = 00 00 00 40 -> "AACAPwAAAEA=" */
    CHECK(parse(&t, "{\"shape\":[2],\"dtype\":\"float32\",\"base64\":\"AACAPwAAAEA=\"}", &rules_float,
                &err) == SRV_OK &&
              t.count == 2 && ((float *)t.data)[0] == 1.0f && ((float *)t.data)[1] == 2.0f,
          "base64 floats: %s", err.message);
    srv_tensor_free(&t);
    CHECK(parse(&t, "{\"shape\":[1,3],\"dtype\":\"bool\",\"base64\":\"AQAB\"}", &rules_mask, &err) ==
                  SRV_OK &&
              t.dtype == SRV_DTYPE_BOOL && ((uint8_t *)t.data)[0] == 1 && ((uint8_t *)t.data)[1] == 0,
          "base64 bool");
    srv_tensor_free(&t);
    /* "\/" is a JSON escape some encoders write for '/': 0xFF 0xFF 0xFF 0xFF... "////" = 3 bytes 0xFF */
    expect_code("{\"shape\":[3],\"dtype\":\"bool\",\"base64\":\"AQAB\"}", &rules_float, SRV_E_BAD_REQUEST,
                NULL);
    expect_code("{\"shape\":[2],\"base64\":\"AACAPwAAAEA\"}", &rules_float, SRV_E_BAD_REQUEST,
                "multiple of 4");
    expect_code("{\"shape\":[3],\"base64\":\"AACAPwAAAEA=\"}", &rules_float, SRV_E_SHAPE, "8 bytes");
    expect_code("{\"shape\":[2],\"base64\":\"AACAPwAA*EA=\"}", &rules_float, SRV_E_BAD_REQUEST, NULL);
    expect_code("{\"shape\":[2],\"base64\":\"AACAPwAA\\nAEA=\"}", &rules_float, SRV_E_BAD_REQUEST, NULL);
    expect_code("{\"shape\":[2],\"base64\":\"AACAPwAAAEB=\"}", &rules_float, SRV_E_BAD_REQUEST, NULL);
    expect_code("{\"shape\":[2],\"base64\":\"AACAPw=AAEA=\"}", &rules_float, SRV_E_BAD_REQUEST, NULL);
    expect_code("{\"shape\":[1],\"base64\":\"AADAfw==\"}", &rules_float, SRV_E_BAD_VALUE, "NaN");
    expect_code("{\"shape\":[1],\"base64\":\"AACAfw==\"}", &rules_mask, SRV_E_BAD_VALUE, "+inf");
    expect_code("{\"shape\":[1],\"base64\":\"AACA\\/w==\"}", &rules_mask, SRV_OK, NULL); /* -inf */
    expect_code("{\"shape\":[1],\"base64\":\"AACA/w==\"}", &rules_float, SRV_E_BAD_VALUE, "-inf");
    expect_code("{\"shape\":[2],\"dtype\":\"bool\",\"base64\":\"AQI=\"}", &rules_mask, SRV_E_BAD_VALUE,
                "byte 1 is 2");
    expect_code("{\"shape\":[1],\"base64\":12}", &rules_float, SRV_E_BAD_REQUEST, NULL);

    /* the codec itself */
    uint8_t raw[256], dec[260];
    for (int i = 0; i < 256; i++)
        raw[i] = (uint8_t)(i * 7 + 3);
    for (size_t n = 0; n <= 10; n++) {
        srv_buf b;
        srv_buf_init(&b);
        srv_base64_encode(&b, raw, n);
        CHECK(b.len == (n + 2) / 3 * 4, "encoded length for %zu", n);
        long got = srv_base64_decode(dec, srv_buf_cstr(&b), b.len);
        CHECK(got == (long)n && memcmp(dec, raw, n) == 0, "base64 round trip of %zu bytes", n);
        srv_buf_free(&b);
    }
    srv_buf b;
    srv_buf_init(&b);
    srv_base64_encode(&b, (const uint8_t *)"foobar", 6);
    CHECK(strcmp(srv_buf_cstr(&b), "Zm9vYmFy") == 0, "RFC 4648 vector: %s", srv_buf_cstr(&b));
    srv_buf_free(&b);
    srv_base64_encode(&b, (const uint8_t *)"fooba", 5);
    CHECK(strcmp(srv_buf_cstr(&b), "Zm9vYmE=") == 0, "RFC 4648 vector: %s", srv_buf_cstr(&b));
    srv_buf_free(&b);
}

static void expect_write(const float *x, int ndim, const int64_t *shape, srv_encoding enc,
                         const char *want)
{
    srv_buf b;
    srv_buf_init(&b);
    CHECK(srv_tensor_write(&b, x, ndim, shape, enc) == 0, "write");
    CHECK(strcmp(srv_buf_cstr(&b), want) == 0, "wrote %s, want %s", srv_buf_cstr(&b), want);
    srv_buf_free(&b);
}

static uint64_t rng_state = 88172645463325252ULL;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* A base64 tensor of n floats, 0.5 * i except the given (index, value) pairs, in rules' check. */
static void expect_b64_floats(size_t n, const size_t *at, const float *val, int nspecial,
                              const srv_tensor_rules *r, srv_code want, const char *needle)
{
    float *f = malloc(n * sizeof *f);
    srv_buf b;
    srv_buf_init(&b);
    if (!f) {
        CHECK(0, "out of memory");
        return;
    }
    for (size_t i = 0; i < n; i++)
        f[i] = 0.5f * (float)(i % 1000);
    for (int k = 0; k < nspecial; k++)
        f[at[k]] = val[k];
    srv_buf_printf(&b, "{\"shape\":[%zu],\"base64\":\"", n);
    srv_base64_encode(&b, (const uint8_t *)f, n * sizeof *f);
    srv_buf_puts(&b, "\"}");
    char what[64];
    snprintf(what, sizeof what, "%zu floats, %d special", n, nspecial);
    srv_tensor t;
    srv_error err;
    srv_code got = parse(&t, srv_buf_cstr(&b), r, &err);
    CHECK(got == want, "%s: got %s (%s), want %s", what, srv_error_name(got), err.message, srv_error_name(want));
    if (got == SRV_OK)
        CHECK(t.count == (int64_t)n && memcmp(t.data, f, n * sizeof *f) == 0, "%s: values read back", what);
    else if (needle)
        CHECK(strstr(err.message, needle) != NULL, "%s: message \"%s\" lacks \"%s\"", what, err.message, needle);
    srv_tensor_free(&t);
    srv_buf_free(&b);
    free(f);
}

/* Large base64 tensors: the text is decoded by two threads and checked for non-finite values while
 * decoding; a non-finite value anywhere is still named by its index. */
static void test_base64_large(void)
{
    size_t n = 1000000; /* 5.3 MB of text: past SRV_BASE64_SPLIT_MIN; the rules allow 10^6 elements */
    CHECK(n * 16 / 3 >= SRV_BASE64_SPLIT_MIN, "the text is long enough to be split");
    expect_b64_floats(n, NULL, NULL, 0, &rules_float, SRV_OK, NULL);
    expect_b64_floats(n, (size_t[]){n - 1}, (float[]){NAN}, 1, &rules_float, SRV_E_BAD_VALUE,
                      "element 999999 is NaN");
    expect_b64_floats(n, (size_t[]){0}, (float[]){-INFINITY}, 1, &rules_float, SRV_E_BAD_VALUE,
                      "element 0 is -inf");
    expect_b64_floats(n, (size_t[]){150000}, (float[]){-INFINITY}, 1, &rules_mask, SRV_OK, NULL);
    expect_b64_floats(n, (size_t[]){150000, 200001}, (float[]){-INFINITY, INFINITY}, 2, &rules_mask,
                      SRV_E_BAD_VALUE, "element 200001 is +inf");
    expect_b64_floats(999, (size_t[]){500}, (float[]){NAN}, 1, &rules_float, SRV_E_BAD_VALUE,
                      "element 500 is NaN");
}

static void test_write(void)
{
    float x[6] = {0.1f, -2.0f, 1e-7f, 3.4028235e38f, -0.0f, 123.456f};
    int64_t s23[2] = {2, 3}, s6[1] = {6}, s0[1] = {0};
    expect_write(x, 2, s23, SRV_ENC_NESTED, "[[0.1,-2,1e-7],[3.4028235e38,-0,123.456]]");
    expect_write(x, 1, s6, SRV_ENC_NESTED, "[0.1,-2,1e-7,3.4028235e38,-0,123.456]");
    expect_write(x, 0, NULL, SRV_ENC_NESTED, "0.1");
    expect_write(x, 2, s23, SRV_ENC_FLAT,
                 "{\"shape\":[2,3],\"dtype\":\"float32\",\"data\":[0.1,-2,1e-7,3.4028235e38,-0,123.456]}");
    float one_two[2] = {1.0f, 2.0f};
    int64_t s2[1] = {2};
    expect_write(one_two, 1, s2, SRV_ENC_BASE64,
                 "{\"shape\":[2],\"dtype\":\"float32\",\"base64\":\"AACAPwAAAEA=\"}");
    float nf[3] = {-INFINITY, INFINITY, NAN};
    int64_t s3[1] = {3};
    expect_write(nf, 1, s3, SRV_ENC_NESTED, "[\"-inf\",\"inf\",\"nan\"]");
    expect_write(x, 1, s0, SRV_ENC_NESTED, "[]");

    srv_encoding e;
    CHECK(srv_encoding_parse("nested", &e) == 0 && e == SRV_ENC_NESTED, "nested");
    CHECK(srv_encoding_parse("flat", &e) == 0 && e == SRV_ENC_FLAT, "flat");
    CHECK(srv_encoding_parse("base64", &e) == 0 && e == SRV_ENC_BASE64, "base64");
    CHECK(srv_encoding_parse("Base64", &e) == -1 && srv_encoding_parse("", &e) == -1 &&
              srv_encoding_parse(NULL, &e) == -1,
          "unknown encodings refused");

    /* random tensors: write in each form, parse back, same bits and shape */
    int bad = 0;
    for (int iter = 0; iter < 60; iter++) {
        int ndim = 1 + (int)(rng() % 4);
        int64_t shape[4], count = 1;
        for (int i = 0; i < ndim; i++) {
            shape[i] = 1 + (int64_t)(rng() % 7);
            count *= shape[i];
        }
        float *v = malloc((size_t)count * 4);
        for (int64_t i = 0; i < count; i++) {
            do {
                uint32_t u = (uint32_t)rng();
                if (iter % 2)
                    u = (u & 0x807FFFFF) | (uint32_t)(100 + rng() % 50) << 23;
                memcpy(&v[i], &u, 4);
            } while (!isfinite(v[i]));
        }
        for (int enc = 0; enc < 3; enc++) {
            srv_buf b;
            srv_buf_init(&b);
            srv_tensor_write(&b, v, ndim, shape, (srv_encoding)enc);
            srv_tensor t;
            srv_error err;
            srv_code rc = parse(&t, srv_buf_cstr(&b), &rules_float, &err);
            bool ok = rc == SRV_OK && t.ndim == ndim && t.count == count &&
                      memcmp(t.shape, shape, sizeof(int64_t) * (size_t)ndim) == 0 &&
                      memcmp(t.data, v, (size_t)count * 4) == 0;
            if (!ok && bad++ < 5)
                CHECK(0, "round trip in form %d failed: %s (%s)", enc, err.message,
                      srv_buf_cstr(&b));
            srv_tensor_free(&t);
            srv_buf_free(&b);
        }
        free(v);
    }
    CHECK(bad == 0, "%d random round trips failed", bad);
}

/* The run of plain numbers parse_nested reads in a fast lane, where it hands back to the general
 * loop (white space before a comma, other values, errors) and where the element store must grow
 * (text denser than its first estimate of 8 bytes a number). */
static void test_number_runs(void)
{
    srv_tensor t;
    srv_error err;
    CHECK(parse(&t, "[[1, 2 ,3,\t4, -5, 1e2, 0.5,\n6], [-0.0,7 , 8,9,10,11,12 ,13 ]]", &rules_float, &err) ==
                  SRV_OK &&
              t.ndim == 2 && t.shape[0] == 2 && t.shape[1] == 8,
          "mixed spacing: %s", err.message);
    if (t.data) {
        const float *f = t.data;
        static const float want[16] = {1, 2, 3, 4, -5, 100, 0.5f, 6, -0.0f, 7, 8, 9, 10, 11, 12, 13};
        CHECK(memcmp(f, want, sizeof want) == 0 && signbit(f[8]), "mixed spacing values");
    }
    srv_tensor_free(&t);
    expect_code("[[1, 2, 3], [4, 5, 1e39]]", &rules_float, SRV_E_BAD_VALUE, "query[1][2]");
    expect_code("[[1, 2, 3], [4, 5, 01]]", &rules_float, SRV_E_BAD_JSON, NULL);
    expect_code("[[1, 2, 3], [4, 5, -Infinity]]", &rules_float, SRV_E_BAD_JSON, "NaN and Infinity");
    expect_code("[[1, 2, 3], [4, 5, -]]", &rules_float, SRV_E_BAD_JSON, NULL);
    expect_code("[[1, 2, 3], [4, 5, 6x]]", &rules_float, SRV_E_BAD_JSON, NULL);
    expect_code("[[1, 2, 3], [4, 5, true]]", &rules_float, SRV_E_BAD_VALUE, "query[1][2]");
    expect_code("[[1, 2, 3], [4, 5, \"-inf\"]]", &rules_float, SRV_E_BAD_VALUE, "query[1][2]");
    expect_code("[[1, 2, 3], [4, 5, [6]]]", &rules_float, SRV_E_SHAPE, "query[1][2]");
    expect_code("[[1, 2, 3], [4, 5, 6, 7]]", &rules_float, SRV_E_SHAPE, "query[1]");
    expect_code("[[1, 2, 3], [4, 5]]", &rules_float, SRV_E_SHAPE, "query[1]");
    expect_code("[1, 2, 3,]", &rules_float, SRV_E_BAD_JSON, NULL);
    expect_code("[1, 2, 3", &rules_float, SRV_E_BAD_JSON, NULL);
    CHECK(parse(&t, "[[0, \"-inf\", 1.5], [2, 3, 4]]", &rules_mask, &err) == SRV_OK && t.count == 6 &&
              isinf(((float *)t.data)[1]) && ((float *)t.data)[5] == 4,
          "-inf in a run: %s", err.message);
    srv_tensor_free(&t);

    /* dense text: 2 bytes a number, 4 times the first estimate, and booleans (5-6 bytes) */
    enum { N = 100000 };
    char *text = malloc(N * 6 + 4);
    size_t k = 0;
    text[k++] = '[';
    for (int i = 0; i < N; i++)
        k += (size_t)sprintf(text + k, "%s%d", i ? "," : "", i % 10);
    text[k++] = ']';
    text[k] = '\0';
    srv_tensor_rules big = rules_float;
    big.max_elements = N;
    CHECK(parse(&t, text, &big, &err) == SRV_OK && t.count == N, "dense digits: %s", err.message);
    bool ok = t.data != NULL;
    for (int i = 0; ok && i < N; i++)
        ok = ((float *)t.data)[i] == (float)(i % 10);
    CHECK(ok, "dense digits: values");
    srv_tensor_free(&t);
    big.max_elements = N - 1;
    expect_code(text, &big, SRV_E_TOO_LARGE, NULL);
    k = 0;
    text[k++] = '[';
    for (int i = 0; i < N; i++)
        k += (size_t)sprintf(text + k, "%s%s", i ? "," : "", i % 3 ? "true" : "false");
    text[k++] = ']';
    text[k] = '\0';
    srv_tensor_rules bools = rules_mask;
    bools.max_elements = N;
    CHECK(parse(&t, text, &bools, &err) == SRV_OK && t.count == N && t.dtype == SRV_DTYPE_BOOL,
          "dense booleans: %s", err.message);
    ok = t.data != NULL;
    for (int i = 0; ok && i < N; i++)
        ok = ((uint8_t *)t.data)[i] == (i % 3 != 0);
    CHECK(ok, "dense booleans: values");
    srv_tensor_free(&t);
    free(text);
}

/* srv_floats_any_special: inf, -inf or NaN at every position of arrays of every length up to 40,
 * read from an address that is not 4-byte aligned, and none in finite ones (huge, tiny, -0). */
static void test_any_special(void)
{
    const float specials[3] = {INFINITY, -INFINITY, NAN};
    unsigned char raw[41 * 4 + 1] = {0};
    int wrong = 0;
    for (size_t n = 0; n <= 40; n++) {
        float v[41];
        for (size_t i = 0; i < n; i++)
            v[i] = i % 3 == 0 ? 3.4028235e38f : i % 3 == 1 ? -1e-45f : -0.0f;
        memcpy(raw + 1, v, n * 4);
        wrong += srv_floats_any_special(raw + 1, n);
        for (size_t at = 0; at < n; at++)
            for (int s = 0; s < 3; s++) {
                float w[41];
                memcpy(w, v, n * 4);
                w[at] = specials[s];
                memcpy(raw + 1, w, n * 4);
                wrong += !srv_floats_any_special(raw + 1, n);
            }
    }
    CHECK(wrong == 0, "srv_floats_any_special wrong %d times", wrong);
}

/* srv_tensor_peek_shape: the shape the flat and base64 forms declare, read without the data; and
 * when both it and the parse succeed, the same shape. */
static void test_peek_shape(void)
{
    static const struct {
        const char *json;
        int ndim; /* -1: does not say */
        int64_t shape[3];
    } cases[] = {
        {"{\"shape\": [2, 3], \"data\": [1, 2, 3, 4, 5, 6]}", 2, {2, 3}},
        {" {\"data\": [[1], {\"x\": \"]}\"}], \"dtype\": \"float32\", \"shape\" : [ 1 ,2,3 ] } ", 3, {1, 2, 3}},
        {"{\"base64\": \"a\\\"b\\\\\", \"shape\": [4]}", 1, {4}},
        {"{\"shape\": []}", 0, {0}},
        {"{\"shape\": [262144, 64], \"base64\": \"!!\"}", 2, {262144, 64}},
        {"[[1, 2], [3, 4]]", -1, {0}},
        {"{\"data\": [1]}", -1, {0}},
        {"{\"shape\": [1, -2]}", -1, {0}},
        {"{\"shape\": [1.5]}", -1, {0}},
        {"{\"shape\": [99999999999999999999]}", -1, {0}},
        {"{\"shape\": [1,1,1,1,1,1,1,1,1]}", -1, {0}},
        {"{\"data\": [1, 2", -1, {0}},
        {"{\"data\": \"unterminated", -1, {0}},
        {"{\"sh\\u0061pe\": [1]}", -1, {0}},
        {"", -1, {0}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t shape[SRV_TENSOR_MAX_DIMS];
        int ndim = -1;
        bool got = srv_tensor_peek_shape(cases[i].json, strlen(cases[i].json), shape, &ndim);
        bool ok = got == (cases[i].ndim >= 0);
        for (int d = 0; ok && got && d < cases[i].ndim; d++)
            ok = ndim == cases[i].ndim && shape[d] == cases[i].shape[d];
        CHECK(ok, "peek %zu (%s): %s, ndim %d", i, cases[i].json, got ? "says" : "does not say",
              ndim);
    }
    /* the text is read within its length only: a prefix that stops inside the data says nothing */
    const char *t = "{\"data\": [1, 2], \"shape\": [2]}";
    int64_t shape[SRV_TENSOR_MAX_DIMS];
    int ndim;
    CHECK(!srv_tensor_peek_shape(t, 12, shape, &ndim) && srv_tensor_peek_shape(t, strlen(t), shape, &ndim),
          "peek stays within the given length");
}

int main(void)
{
    test_any_special();
    test_peek_shape();
    test_nested();
    test_number_runs();
    test_flat();
    test_base64();
    test_base64_large();
    test_write();
    return check_report();
}
