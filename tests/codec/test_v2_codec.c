/*
 * test_v2_codec.c - the Open Inference Protocol codec without HTTP: request parsing (JSON, binary
 * tensor extension, mixed), every refusal with its status, outputs selection, the response writer
 * (JSON and binary outputs, shortest float32 numbers), model metadata and the error body. The
 * protocol documentation's own request/response examples are here, with our model's input names.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "codec/v2_codec.h"
#include "v2_examples.h"

#define MAXEL (1 << 20)

/* Parses a body that is all JSON. */
static int parse_json(srv_v2_request *req, const char *json, srv_error *err)
{
    memset(err, 0, sizeof *err);
    return srv_v2_request_parse(req, json, strlen(json), strlen(json), MAXEL, err);
}

/* A body = JSON header + binary bytes, in one malloc'd buffer at an offset `skew` from an aligned
 * address (to exercise both the in-place and the copying path). */
typedef struct body {
    char *mem;
    char *p;
    size_t len, header_len;
} body;

static body make_body(const char *json, const void *bin, size_t bin_len, size_t skew)
{
    body b;
    b.header_len = strlen(json);
    b.len = b.header_len + bin_len;
    b.mem = malloc(b.len + 16);
    b.p = b.mem + skew;
    memcpy(b.p, json, b.header_len);
    if (bin_len)
        memcpy(b.p + b.header_len, bin, bin_len);
    return b;
}

/* Expects parse to fail with HTTP status `status` and a message containing `part`. */
static void expect_refused(const char *what, const char *json, const void *bin, size_t bin_len,
                           int status, const char *part)
{
    body b = make_body(json, bin, bin_len, 0);
    srv_v2_request req;
    srv_error err = {0};
    int rc = srv_v2_request_parse(&req, b.p, b.len, b.header_len, MAXEL, &err);
    CHECK(rc == -1, "%s: refused", what);
    CHECK(srv_error_status(err.code) == status, "%s: status %d, want %d (%s)", what,
          srv_error_status(err.code), status, err.message);
    CHECK(strstr(err.message, part) != NULL, "%s: message '%s' names '%s'", what, err.message,
          part);
    srv_buf eb;
    srv_buf_init(&eb);
    int st = srv_v2_error_write(&eb, &err, NULL);
    json_t *j = json_loads(srv_buf_cstr(&eb), 0, NULL);
    CHECK(st == status && j && json_is_string(json_object_get(j, "error")) &&
              json_object_size(j) == 1,
          "%s: error body is {\"error\": string}: %s", what, srv_buf_cstr(&eb));
    json_decref(j);
    srv_buf_free(&eb);
    free(b.mem);
}

/* The request example of the protocol's inference_rest.md (two inputs, one output asked for), with
 * our names: query FP32 [2,2] and key_padding_mask BOOL (flat data). */
static void test_protocol_request_example(void)
{
    const char *json = V2_EXAMPLE_JSON("true, false");
    srv_v2_request req;
    srv_error err;
    CHECK(parse_json(&req, json, &err) == 0, "protocol example parses: %s", err.message);
    CHECK(req.id && strcmp(req.id, "42") == 0, "id echoed");
    const srv_v2_input *q = &req.inputs[SRV_V2_IN_QUERY];
    CHECK(q->present && !q->binary && q->dtype == SRV_DTYPE_F32 && q->ndim == 2 &&
              q->shape[0] == 2 && q->shape[1] == 2 && q->count == 4,
          "query [2,2] FP32");
    const float *qf = q->data;
    CHECK(qf && qf[0] == 1 && qf[1] == 2 && qf[2] == 3 && qf[3] == 4, "query data row-major");
    const srv_v2_input *m = &req.inputs[SRV_V2_IN_KEY_PADDING_MASK];
    const uint8_t *mb = m->data;
    CHECK(m->present && m->dtype == SRV_DTYPE_BOOL && m->count == 2 && mb && mb[0] == 1 &&
              mb[1] == 0,
          "mask BOOL [2] = true, false");
    CHECK(!req.inputs[SRV_V2_IN_KEY].present && !req.inputs[SRV_V2_IN_ATTN_MASK].present,
          "absent inputs stay absent");
    CHECK(req.noutputs == 1 && req.outputs[0].which == SRV_V2_OUT_OUTPUT && !req.outputs[0].binary,
          "one JSON output");
    CHECK(!req.need_weights && !req.is_causal && req.average_attn_weights, "defaults");

    srv_v2_request_free(&req);
    srv_v2_request_free(&req); /* freeing twice is harmless: the first zeroes it */
    srv_v2_request_free(NULL);
}

/* The response example of inference_rest.md: output [3,2] FP32 1.0, 1.1, 2.0, 2.1, 3.0, 3.1. */
static void test_protocol_response_example(void)
{
    srv_v2_request req;
    srv_error err;
    CHECK(parse_json(&req,
                     "{\"id\":\"42\",\"inputs\":[{\"name\":\"query\",\"shape\":[1],"
                     "\"datatype\":\"FP32\",\"data\":[0]}],\"outputs\":[{\"name\":\"output\"}]}",
                     &err) == 0,
          "parse: %s", err.message);
    static const float out[6] = {1.0f, 1.1f, 2.0f, 2.1f, 3.0f, 3.1f};
    srv_v2_result res[SRV_V2_OUT_COUNT] = {{.data = out, .ndim = 2, .shape = {3, 2}},
                                           {.data = NULL, .ndim = 0, .shape = {0}}};
    srv_buf b;
    srv_buf_init(&b);
    size_t jl = 0;
    CHECK(srv_v2_response_write(&b, &jl, &req, "mha", "1", res, &err) == 0, "write");
    const char *want = "{\"model_name\":\"mha\",\"model_version\":\"1\",\"id\":\"42\",\"outputs\":["
                       "{\"name\":\"output\",\"datatype\":\"FP32\",\"shape\":[3,2],"
                       "\"data\":[1,1.1,2,2.1,3,3.1]}]}";
    CHECK(jl == b.len && strcmp(srv_buf_cstr(&b), want) == 0, "response:\n %s\nwant\n %s",
          srv_buf_cstr(&b), want);
    srv_buf_free(&b);
    srv_v2_request_free(&req);
}

/* Triton's binary tensor data example (extension_binary_data.md), with our names: the request
 * carries "model_name", both inputs binary (FP32 [2,2] = 16 bytes, BOOL [3] = 3 bytes), the
 * output asked for as binary. */
static void test_triton_binary_example(void)
{
    const char *json = V2_EXAMPLE_BINARY(3);
    unsigned char bin[19];
    float qv[4] = {0.5f, -1.25f, 3e-8f, 1e30f};
    memcpy(bin, qv, 16);
    bin[16] = 0, bin[17] = 1, bin[18] = 0;
    for (size_t skew = 0; skew < 4; skew++) { /* aligned and misaligned binary part */
        body b = make_body(json, bin, sizeof bin, skew);
        size_t hl = 0;
        char hv[32];
        srv_error err = {0};
        snprintf(hv, sizeof hv, "%zu", b.header_len);
        CHECK(srv_v2_header_length(&hl, hv, b.len, &err) == 0 && hl == b.header_len,
              "header length %s", hv);
        srv_v2_request req;
        CHECK(srv_v2_request_parse(&req, b.p, b.len, hl, MAXEL, &err) == 0, "skew %zu parses: %s",
              skew, err.message);
        const srv_v2_input *q = &req.inputs[SRV_V2_IN_QUERY];
        CHECK(q->binary && q->count == 4 && memcmp(q->data, qv, 16) == 0, "query bytes (skew %zu)",
              skew);
        CHECK(((uintptr_t)q->data % _Alignof(float)) == 0, "query data aligned (skew %zu)", skew);
        const srv_v2_input *m = &req.inputs[SRV_V2_IN_KEY_PADDING_MASK];
        const uint8_t *mb = m->data;
        CHECK(m->binary && m->dtype == SRV_DTYPE_BOOL && m->count == 3 && mb[0] == 0 &&
                  mb[1] == 1 && mb[2] == 0,
              "mask bytes");
        CHECK(req.noutputs == 1 && req.outputs[0].binary, "output asked as binary");
        CHECK(req.id == NULL, "no id");

        /* the response example: output [3,2] FP32 as 24 binary bytes after the JSON */
        static const float out[6] = {1.0f, 1.1f, 2.0f, 2.1f, 3.0f, 3.1f};
        srv_v2_result res[SRV_V2_OUT_COUNT] = {{.data = out, .ndim = 2, .shape = {3, 2}},
                                               {.data = NULL, .ndim = 0, .shape = {0}}};
        srv_buf rb;
        srv_buf_init(&rb);
        size_t jl = 0;
        CHECK(srv_v2_response_write(&rb, &jl, &req, "mymodel", "1", res, &err) == 0, "write");
        CHECK(rb.len == jl + 24, "24 bytes after the JSON (%zu, %zu)", rb.len, jl);
        CHECK(memcmp(rb.data + jl, out, 24) == 0, "binary output bytes");
        json_t *j = json_loadb(rb.data, jl, 0, NULL);
        json_t *o = json_array_get(json_object_get(j, "outputs"), 0);
        CHECK(j &&
                  json_integer_value(json_object_get(json_object_get(o, "parameters"),
                                                     "binary_data_size")) == 24 &&
                  !json_object_get(o, "data") &&
                  strcmp(json_string_value(json_object_get(o, "name")), "output") == 0 &&
                  strcmp(json_string_value(json_object_get(o, "datatype")), "FP32") == 0 &&
                  json_integer_value(json_array_get(json_object_get(o, "shape"), 0)) == 3,
              "response JSON header: %.*s", (int)jl, rb.data);
        json_decref(j);
        srv_buf_free(&rb);
        srv_v2_request_free(&req);
        free(b.mem);
    }
}

static void test_nested_and_flat(void)
{
    srv_v2_request req;
    srv_error err;
    CHECK(parse_json(&req,
                     "{\"inputs\":[{\"name\":\"query\",\"shape\":[1,2,3],\"datatype\":\"FP32\","
                     "\"data\":[[[1,2,3],[4,5,6]]]},{\"name\":\"attn_mask\",\"shape\":[2,2],"
                     "\"datatype\":\"FP32\",\"data\":[[0,\"-inf\"],[0.5,0]]}]}",
                     &err) == 0,
          "nested data parses: %s", err.message);
    const float *q = req.inputs[SRV_V2_IN_QUERY].data;
    CHECK(q[0] == 1 && q[5] == 6, "nested row-major");
    const float *am = req.inputs[SRV_V2_IN_ATTN_MASK].data;
    CHECK(am[1] == -INFINITY && am[2] == 0.5f, "FP32 mask takes \"-inf\"");
    srv_v2_request_free(&req);

    CHECK(parse_json(&req,
                     "{\"inputs\":[{\"name\":\"query\",\"shape\":[2,3],\"datatype\":\"FP32\","
                     "\"data\":[1,2,3,4,5,6]}]}",
                     &err) == 0,
          "flat data for a 2-D shape");
    srv_v2_request_free(&req);

    expect_refused("empty JSON data",
                   "{\"inputs\":[{\"name\":\"query\",\"shape\":[0,4],\"datatype\":\"FP32\","
                   "\"data\":[]}]}",
                   NULL, 0, 400, "query");

    expect_refused("nested as another shape",
                   "{\"inputs\":[{\"name\":\"query\",\"shape\":[2,3],\"datatype\":\"FP32\","
                   "\"data\":[[1,2],[3,4],[5,6]]}]}",
                   NULL, 0, 400, "nested as [3,2]");
    expect_refused("data count vs shape",
                   "{\"inputs\":[{\"name\":\"query\",\"shape\":[2,3],\"datatype\":\"FP32\","
                   "\"data\":[1,2,3,4,5]}]}",
                   NULL, 0, 400, "holds 5");
    expect_refused("ragged data",
                   "{\"inputs\":[{\"name\":\"query\",\"shape\":[2,2],\"datatype\":\"FP32\","
                   "\"data\":[[1,2],[3]]}]}",
                   NULL, 0, 400, "query");
    expect_refused("-inf in query",
                   "{\"inputs\":[{\"name\":\"query\",\"shape\":[2],\"datatype\":\"FP32\","
                   "\"data\":[1,\"-inf\"]}]}",
                   NULL, 0, 400, "query");
    expect_refused(
        "numbers in a BOOL mask",
        "{\"inputs\":[{\"name\":\"query\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]},"
        "{\"name\":\"attn_mask\",\"shape\":[2],\"datatype\":\"BOOL\",\"data\":[1,0]}]}",
        NULL, 0, 400, "attn_mask");
    expect_refused("booleans in FP32",
                   "{\"inputs\":[{\"name\":\"query\",\"shape\":[2],\"datatype\":\"FP32\","
                   "\"data\":[true,false]}]}",
                   NULL, 0, 400, "query");
    expect_refused("data not an array",
                   "{\"inputs\":[{\"name\":\"query\",\"shape\":[1],\"datatype\":\"FP32\","
                   "\"data\":{\"shape\":[1],\"data\":[1]}}]}",
                   NULL, 0, 400, "must be an array");
}

static void test_structure_errors(void)
{
    expect_refused("not JSON", "{\"inputs\": [", NULL, 0, 400, "");
    expect_refused("unknown top-level member", "{\"inputz\":[]}", NULL, 0, 400, "inputz");
    expect_refused("no inputs", "{\"id\":\"1\"}", NULL, 0, 400, "inputs");
    expect_refused("empty inputs", "{\"inputs\":[]}", NULL, 0, 400, "query");
    expect_refused("inputs not an array", "{\"inputs\":{}}", NULL, 0, 400, "array");
    expect_refused("input not an object", "{\"inputs\":[1]}", NULL, 0, 400, "inputs[0]");
    expect_refused("id not a string",
                   "{\"id\":42,\"inputs\":[{\"name\":\"query\",\"shape\":[1],\"datatype\":\"FP32\","
                   "\"data\":[1]}]}",
                   NULL, 0, 400, "id");
    expect_refused("unknown input",
                   "{\"inputs\":[{\"name\":\"input0\",\"shape\":[1],\"datatype\":\"FP32\","
                   "\"data\":[1]}]}",
                   NULL, 0, 400, "unknown input 'input0'");
    expect_refused(
        "duplicate input",
        "{\"inputs\":[{\"name\":\"query\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]},"
        "{\"name\":\"query\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]}]}",
        NULL, 0, 400, "twice");
    expect_refused("no query",
                   "{\"inputs\":[{\"name\":\"key\",\"shape\":[1],\"datatype\":\"FP32\","
                   "\"data\":[1]}]}",
                   NULL, 0, 400, "query");
    expect_refused("a member twice in an input",
                   "{\"inputs\":[{\"name\":\"query\",\"shape\":[1],\"datatype\":\"FP32\","
                   "\"data\":[1],\"shape\":[1]}]}",
                   NULL, 0, 400, "twice");
    expect_refused("escaped member names are unescaped",
                   "{\"inputs\":[{\"n\\u0061me\":\"query\",\"shape\":[1],\"datatype\":\"FP32\","
                   "\"data\":[1],\"name\":\"key\"}]}",
                   NULL, 0, 400, "twice");
    expect_refused("unknown member of an input",
                   "{\"inputs\":[{\"name\":\"query\",\"shape\":[1],\"datatype\":\"FP32\","
                   "\"data\":[1],\"dtype\":\"x\"}]}",
                   NULL, 0, 400, "dtype");
    expect_refused("no shape",
                   "{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\",\"data\":[1]}]}", NULL,
                   0, 400, "shape");
    expect_refused("no datatype", "{\"inputs\":[{\"name\":\"query\",\"shape\":[1],\"data\":[1]}]}",
                   NULL, 0, 400, "datatype");
    expect_refused("no data",
                   "{\"inputs\":[{\"name\":\"query\",\"shape\":[1],\"datatype\":\"FP32\"}]}", NULL,
                   0, 400, "neither");
    expect_refused("an input in shared memory (Triton's extension, not served)",
                   "{\"inputs\":[{\"name\":\"query\",\"shape\":[1],\"datatype\":\"FP32\","
                   "\"parameters\":{\"shared_memory_region\":\"r0\","
                   "\"shared_memory_byte_size\":4}}]}",
                   NULL, 0, 400, "shared memory");
    expect_refused("negative dim",
                   "{\"inputs\":[{\"name\":\"query\",\"shape\":[-1],\"datatype\":\"FP32\","
                   "\"data\":[1]}]}",
                   NULL, 0, 400, "shape[0]");
    expect_refused("fractional dim",
                   "{\"inputs\":[{\"name\":\"query\",\"shape\":[1.5],\"datatype\":\"FP32\","
                   "\"data\":[1]}]}",
                   NULL, 0, 400, "shape[0]");
    expect_refused("too large",
                   "{\"inputs\":[{\"name\":\"query\",\"shape\":[1048576,2],\"datatype\":\"FP32\","
                   "\"parameters\":{\"binary_data_size\":8388608}}]}",
                   NULL, 0, 413, "limit");
    expect_refused("overflowing shape",
                   "{\"inputs\":[{\"name\":\"query\",\"shape\":[4294967296,4294967296,4294967296],"
                   "\"datatype\":\"FP32\",\"data\":[1]}]}",
                   NULL, 0, 413, "limit");
    expect_refused("nine dims",
                   "{\"inputs\":[{\"name\":\"query\",\"shape\":[1,1,1,1,1,1,1,1,1],"
                   "\"datatype\":\"FP32\",\"data\":[1]}]}",
                   NULL, 0, 400, "dimensions");
}

static void test_datatypes(void)
{
    static const char *const bad[] = {"FP16",  "INT32", "UINT32", "FP64",
                                      "BYTES", "BF16",  "fp32",   "FLOAT"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char json[256];
        snprintf(json, sizeof json,
                 "{\"inputs\":[{\"name\":\"query\",\"shape\":[1],\"datatype\":\"%s\","
                 "\"data\":[1]}]}",
                 bad[i]);
        expect_refused(bad[i], json, NULL, 0, 400, bad[i]);
    }
    expect_refused("BOOL query",
                   "{\"inputs\":[{\"name\":\"query\",\"shape\":[1],\"datatype\":\"BOOL\","
                   "\"data\":[true]}]}",
                   NULL, 0, 400, "takes FP32");
    expect_refused(
        "INT64 mask",
        "{\"inputs\":[{\"name\":\"query\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]},"
        "{\"name\":\"attn_mask\",\"shape\":[1],\"datatype\":\"INT64\",\"data\":[1]}]}",
        NULL, 0, 400, "BOOL or FP32");
    expect_refused("datatype not a string",
                   "{\"inputs\":[{\"name\":\"query\",\"shape\":[1],\"datatype\":1,\"data\":[1]}]}",
                   NULL, 0, 400, "datatype");
}

static void test_binary_errors(void)
{
    float four[4] = {1, 2, 3, 4};
    const char *q16 = "{\"inputs\":[{\"name\":\"query\",\"shape\":[4],\"datatype\":\"FP32\","
                      "\"parameters\":{\"binary_data_size\":16}}]}";
    unsigned char extra[17] = {0};
    memcpy(extra, four, 16);
    expect_refused("binary longer than the sizes", q16, extra, 17, 400, "must match exactly");
    expect_refused("binary shorter than the sizes", q16, four, 12, 400, "must match exactly");
    expect_refused("no binary part", q16, NULL, 0, 400, "Inference-Header-Content-Length");
    expect_refused("binary_data_size vs shape",
                   "{\"inputs\":[{\"name\":\"query\",\"shape\":[4],\"datatype\":\"FP32\","
                   "\"parameters\":{\"binary_data_size\":12}}]}",
                   four, 12, 400, "16 bytes");
    expect_refused(
        "BOOL binary_data_size vs shape",
        "{\"inputs\":[{\"name\":\"query\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]},"
        "{\"name\":\"key_padding_mask\",\"shape\":[3],\"datatype\":\"BOOL\","
        "\"parameters\":{\"binary_data_size\":12}}]}",
        four, 12, 400, "3 bytes");
    expect_refused("binary_data_size not an integer",
                   "{\"inputs\":[{\"name\":\"query\",\"shape\":[4],\"datatype\":\"FP32\","
                   "\"parameters\":{\"binary_data_size\":\"16\"}}]}",
                   four, 16, 400, "binary_data_size");
    expect_refused("data and binary_data_size",
                   "{\"inputs\":[{\"name\":\"query\",\"shape\":[4],\"datatype\":\"FP32\","
                   "\"data\":[1,2,3,4],\"parameters\":{\"binary_data_size\":16}}]}",
                   four, 16, 400, "both");
    expect_refused("trailing bytes with JSON inputs only",
                   "{\"inputs\":[{\"name\":\"query\",\"shape\":[1],\"datatype\":\"FP32\","
                   "\"data\":[1]}]}",
                   four, 4, 400, "must match exactly");

    float nanq[4] = {1, NAN, 3, 4};
    expect_refused("NaN in binary query", q16, nanq, 16, 400, "NaN");
    float infq[4] = {1, 2, -INFINITY, 4};
    expect_refused("-inf in binary query", q16, infq, 16, 400, "finite");
    const char *qm = "{\"inputs\":[{\"name\":\"query\",\"shape\":[1],\"datatype\":\"FP32\","
                     "\"data\":[1]},{\"name\":\"attn_mask\",\"shape\":[4],\"datatype\":\"FP32\","
                     "\"parameters\":{\"binary_data_size\":16}}]}";
    float pinf[4] = {0, INFINITY, 0, 0};
    expect_refused("+inf in a binary FP32 mask", qm, pinf, 16, 400, "+inf");
    const char *bm = "{\"inputs\":[{\"name\":\"query\",\"shape\":[1],\"datatype\":\"FP32\","
                     "\"data\":[1]},{\"name\":\"attn_mask\",\"shape\":[3],\"datatype\":\"BOOL\","
                     "\"parameters\":{\"binary_data_size\":3}}]}";
    unsigned char two[3] = {0, 2, 1};
    expect_refused("BOOL byte 2", bm, two, 3, 400, "0 or 1");

    /* -inf in a binary FP32 mask is fine */
    float ninf[4] = {0, -INFINITY, 0, 0};
    body b = make_body(qm, ninf, 16, 0);
    srv_v2_request req;
    srv_error err = {0};
    CHECK(srv_v2_request_parse(&req, b.p, b.len, b.header_len, MAXEL, &err) == 0,
          "-inf in a binary FP32 mask: %s", err.message);
    srv_v2_request_free(&req);
    free(b.mem);

    /* the Inference-Header-Content-Length header itself */
    size_t hl;
    memset(&err, 0, sizeof err);
    CHECK(srv_v2_header_length(&hl, "101", 100, &err) == -1 && srv_error_status(err.code) == 400 &&
              strstr(err.message, "only 100"),
          "header length past the body: %s", err.message);
    static const char *const junk[] = {"", "abc", "12x", "-5", "99999999999999999999999"};
    for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++) {
        memset(&err, 0, sizeof err);
        CHECK(srv_v2_header_length(&hl, junk[i], 100, &err) == -1 &&
                  srv_error_status(err.code) == 400,
              "header length '%s' refused", junk[i]);
    }
    CHECK(srv_v2_header_length(&hl, NULL, 100, &err) == 0 && hl == 100, "no header: all JSON");
    CHECK(srv_v2_header_length(&hl, " 64 ", 100, &err) == 0 && hl == 64, "spaces around");
    memset(&err, 0, sizeof err);
    CHECK(srv_v2_request_parse(&req, "{}", 2, 3, MAXEL, &err) == -1 &&
              srv_error_status(err.code) == 400,
          "parse refuses a header length past the body too");
    /* header cut inside the JSON: the JSON part is then not valid */
    const char *j = "{\"inputs\":[{\"name\":\"query\",\"shape\":[1],\"datatype\":\"FP32\","
                    "\"data\":[1]}]}";
    memset(&err, 0, sizeof err);
    CHECK(srv_v2_request_parse(&req, j, strlen(j), strlen(j) - 3, MAXEL, &err) == -1 &&
              srv_error_status(err.code) == 400,
          "header length short of the JSON: %s", err.message);
}

/* Some inputs binary, some JSON, in an order where binary ones are not adjacent. */
static void test_mixed(void)
{
    const char *json = "{\"inputs\":["
                       "{\"name\":\"query\",\"shape\":[1,2,2],\"datatype\":\"FP32\","
                       "\"parameters\":{\"binary_data_size\":16}},"
                       "{\"name\":\"key\",\"shape\":[1,3,2],\"datatype\":\"FP32\","
                       "\"data\":[[[1,2],[3,4],[5,6]]]},"
                       "{\"name\":\"key_padding_mask\",\"shape\":[1,3],\"datatype\":\"BOOL\","
                       "\"parameters\":{\"binary_data_size\":3,\"content_type\":\"x\"}},"
                       "{\"name\":\"value\",\"shape\":[1,3,2],\"datatype\":\"FP32\","
                       "\"parameters\":{\"binary_data_size\":24}}]}";
    unsigned char bin[16 + 3 + 24];
    float q[4] = {0.1f, 0.2f, 0.3f, 0.4f}, v[6] = {-1, -2, -3, -4, -5, -6};
    memcpy(bin, q, 16);
    bin[16] = 0, bin[17] = 0, bin[18] = 1;
    memcpy(bin + 19, v, 24); /* value's floats are misaligned by 3 in the binary part */
    body b = make_body(json, bin, sizeof bin, 0);
    srv_v2_request req;
    srv_error err = {0};
    CHECK(srv_v2_request_parse(&req, b.p, b.len, b.header_len, MAXEL, &err) == 0, "mixed: %s",
          err.message);
    CHECK(memcmp(req.inputs[SRV_V2_IN_QUERY].data, q, 16) == 0, "query from binary");
    const float *k = req.inputs[SRV_V2_IN_KEY].data;
    CHECK(!req.inputs[SRV_V2_IN_KEY].binary && k[0] == 1 && k[5] == 6, "key from JSON");
    const uint8_t *m = req.inputs[SRV_V2_IN_KEY_PADDING_MASK].data;
    CHECK(m[0] == 0 && m[1] == 0 && m[2] == 1, "mask from binary");
    CHECK(memcmp(req.inputs[SRV_V2_IN_VALUE].data, v, 24) == 0 &&
              ((uintptr_t)req.inputs[SRV_V2_IN_VALUE].data % _Alignof(float)) == 0,
          "value from binary, realigned");
    CHECK(req.ninputs == 4 && req.input_order[0] == SRV_V2_IN_QUERY &&
              req.input_order[3] == SRV_V2_IN_VALUE,
          "input order kept");
    srv_v2_request_free(&req);
    free(b.mem);
}

static const char *const Q1 =
    "{\"name\":\"query\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]}";

static int parse_with(srv_v2_request *req, const char *params, const char *outputs, srv_error *err)
{
    char json[1024];
    snprintf(json, sizeof json, "{%s%s%s\"inputs\":[%s]%s%s}", params ? "\"parameters\":" : "",
             params ? params : "", params ? "," : "", Q1, outputs ? ",\"outputs\":" : "",
             outputs ? outputs : "");
    return parse_json(req, json, err);
}

static void test_parameters_and_outputs(void)
{
    srv_v2_request req;
    srv_error err;
    CHECK(parse_with(&req,
                     "{\"is_causal\":true,\"average_attn_weights\":false,"
                     "\"need_weights\":true,\"priority\":3,\"sequence_id\":\"x\"}",
                     NULL, &err) == 0,
          "parameters: %s", err.message);
    CHECK(req.is_causal && !req.average_attn_weights && req.need_weights, "flags read");
    CHECK(req.noutputs == 2 && req.outputs[0].which == SRV_V2_OUT_OUTPUT &&
              req.outputs[1].which == SRV_V2_OUT_ATTN_WEIGHTS && !req.outputs[0].binary,
          "need_weights without outputs: both outputs");
    srv_v2_request_free(&req);

    CHECK(parse_with(&req, NULL, "[{\"name\":\"attn_weights\"}]", &err) == 0 && req.need_weights &&
              req.noutputs == 1 && req.outputs[0].which == SRV_V2_OUT_ATTN_WEIGHTS,
          "asking attn_weights turns need_weights on");
    srv_v2_request_free(&req);

    CHECK(parse_with(&req, "{\"need_weights\":true}", "[{\"name\":\"output\"}]", &err) == 0 &&
              !req.need_weights && req.noutputs == 1,
          "weights not asked in outputs: not computed");
    srv_v2_request_free(&req);

    CHECK(parse_with(&req, NULL, "[]", &err) == 0 && req.noutputs == 1 &&
              req.outputs[0].which == SRV_V2_OUT_OUTPUT,
          "empty outputs = all");
    srv_v2_request_free(&req);

    CHECK(parse_with(&req, "{\"binary_data_output\":true,\"need_weights\":true}", NULL, &err) ==
                  0 &&
              req.noutputs == 2 && req.outputs[0].binary && req.outputs[1].binary,
          "binary_data_output: all outputs binary");
    srv_v2_request_free(&req);

    CHECK(parse_with(&req, "{\"binary_data_output\":true}",
                     "[{\"name\":\"attn_weights\",\"parameters\":{\"binary_data\":false}},"
                     "{\"name\":\"output\"}]",
                     &err) == 0 &&
              req.noutputs == 2 && req.outputs[0].which == SRV_V2_OUT_ATTN_WEIGHTS &&
              !req.outputs[0].binary && req.outputs[1].binary,
          "binary_data on an output overrides binary_data_output; order kept");
    srv_v2_request_free(&req);

    CHECK(parse_with(&req, NULL, "[{\"name\":\"attn_weights\",\"datatype\":\"FP16\"}]", &err) ==
                  0 &&
              req.select.dtype == SRV_WIRE_F16 && req.need_weights,
          "attn_weights asked as FP16 by its datatype: %s", err.message);
    srv_v2_request_free(&req);
    CHECK(parse_with(&req, "{\"weights_datatype\":\"BF16\"}",
                     "[{\"name\":\"output\",\"datatype\":\"FP32\"},{\"name\":\"attn_weights\","
                     "\"parameters\":{\"datatype\":\"BF16\"}}]",
                     &err) == 0 &&
              req.select.dtype == SRV_WIRE_BF16 && req.noutputs == 2,
          "BF16 by parameters.datatype, agreeing with weights_datatype: %s", err.message);
    srv_v2_request_free(&req);

    struct {
        const char *what, *params, *outputs, *part;
    } bad[] = {
        {"is_causal not bool", "{\"is_causal\":1}", NULL, "is_causal"},
        {"need_weights not bool", "{\"need_weights\":\"true\"}", NULL, "need_weights"},
        {"binary_data_output not bool", "{\"binary_data_output\":\"yes\"}", NULL,
         "binary_data_output"},
        {"parameters not an object", "[]", NULL, "parameters"},
        {"unknown output", NULL, "[{\"name\":\"output0\"}]", "unknown output 'output0'"},
        {"duplicate output", NULL, "[{\"name\":\"output\"},{\"name\":\"output\"}]", "twice"},
        {"output without name", NULL, "[{}]", "name"},
        {"outputs not an array", NULL, "{}", "outputs"},
        {"unknown output member", NULL, "[{\"name\":\"output\",\"binary_data\":true}]",
         "binary_data"},
        {"binary_data not bool", NULL, "[{\"name\":\"output\",\"parameters\":{\"binary_data\":1}}]",
         "binary_data"},
        {"classification", NULL, "[{\"name\":\"output\",\"parameters\":{\"classification\":3}}]",
         "classification"},
        {"output asked as FP16", NULL, "[{\"name\":\"output\",\"datatype\":\"FP16\"}]",
         "cannot be FP16"},
        {"indices asked as FP32", NULL,
         "[{\"name\":\"attn_topk_indices\",\"parameters\":{\"datatype\":\"FP32\"}}]",
         "cannot be FP32"},
        {"weights datatype unknown", NULL, "[{\"name\":\"attn_weights\",\"datatype\":\"FP64\"}]",
         "FP32, FP16 or BF16"},
        {"datatype and parameters.datatype differ", NULL,
         "[{\"name\":\"attn_weights\",\"datatype\":\"FP16\",\"parameters\":{\"datatype\":"
         "\"BF16\"}}]",
         "give one"},
        {"output datatype and weights_datatype differ", "{\"weights_datatype\":\"BF16\"}",
         "[{\"name\":\"attn_weights\",\"datatype\":\"FP16\"}]", "weights_datatype"},
        {"output datatype FP16 beside weights_datatype FP32", "{\"weights_datatype\":\"FP32\"}",
         "[{\"name\":\"attn_weights\",\"datatype\":\"FP16\"}]", "weights_datatype"},
        {"output in shared memory", NULL,
         "[{\"name\":\"output\",\"parameters\":{\"shared_memory_region\":\"r0\","
         "\"shared_memory_byte_size\":256}}]",
         "shared memory"},
        {"weights asked but need_weights false", "{\"need_weights\":false}",
         "[{\"name\":\"attn_weights\"}]", "need_weights"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&err, 0, sizeof err);
        int rc = parse_with(&req, bad[i].params, bad[i].outputs, &err);
        CHECK(rc == -1 && srv_error_status(err.code) == 400 && strstr(err.message, bad[i].part),
              "%s: refused with 400 naming '%s': %s", bad[i].what, bad[i].part, err.message);
    }
}

/* Response numbers: the shortest decimal that reads back as the same float32; both outputs; ids
 * with characters that need escaping; non-finite values as strings. */
static void test_response_writer(void)
{
    srv_v2_request req;
    srv_error err;
    CHECK(parse_with(&req, "{\"need_weights\":true}", NULL, &err) == 0, "parse");
    free(req.id);
    req.id = strdup("a\"b\\c\n");
    float out[8] = {0.1f,          1.0f / 3.0f, -2.5e-8f, 16777216.0f,
                    3.4028235e38f, 1.4e-45f,    -0.0f,    1e-3f};
    float w[3] = {0.25f, 0.5f, -INFINITY};
    srv_v2_result res[SRV_V2_OUT_COUNT] = {{.data = out, .ndim = 3, .shape = {1, 2, 4}},
                                           {.data = w, .ndim = 2, .shape = {1, 3}}};
    srv_buf b;
    srv_buf_init(&b);
    size_t jl;
    CHECK(srv_v2_response_write(&b, &jl, &req, "layer.x", "7", res, &err) == 0 && jl == b.len,
          "all JSON");
    json_t *j = json_loads(srv_buf_cstr(&b), 0, NULL);
    CHECK(j != NULL, "valid JSON: %s", srv_buf_cstr(&b));
    CHECK(strcmp(json_string_value(json_object_get(j, "id")), "a\"b\\c\n") == 0, "id escaped");
    CHECK(strcmp(json_string_value(json_object_get(j, "model_name")), "layer.x") == 0 &&
              strcmp(json_string_value(json_object_get(j, "model_version")), "7") == 0,
          "model name and version");
    json_t *o0 = json_array_get(json_object_get(j, "outputs"), 0);
    json_t *data = json_object_get(o0, "data");
    CHECK(json_array_size(data) == 8, "flat data of 8");
    for (size_t i = 0; i < 8; i++) {
        float back = (float)json_number_value(json_array_get(data, i));
        CHECK(back == out[i], "out[%zu] round-trips", i);
    }
    CHECK(strstr(srv_buf_cstr(&b), "[0.1,0.33333334,") != NULL &&
              strstr(srv_buf_cstr(&b), ",-0,") != NULL,
          "shortest forms, -0 keeps its sign: %s", srv_buf_cstr(&b));
    json_t *o1 = json_array_get(json_object_get(j, "outputs"), 1);
    CHECK(strcmp(json_string_value(json_object_get(o1, "name")), "attn_weights") == 0 &&
              strcmp(json_string_value(json_array_get(json_object_get(o1, "data"), 2)), "-inf") ==
                  0,
          "attn_weights second, -inf as a string");
    json_decref(j);
    srv_buf_free(&b);

    /* a missing result is our bug, not a crash */
    srv_v2_result none[SRV_V2_OUT_COUNT] = {{.data = out, .ndim = 3, .shape = {1, 2, 4}},
                                            {.data = NULL, .ndim = 0, .shape = {0}}};
    srv_buf_init(&b);
    memset(&err, 0, sizeof err);
    CHECK(srv_v2_response_write(&b, &jl, &req, "l", "1", none, &err) == -1 &&
              srv_error_status(err.code) == 500,
          "missing output refused");
    srv_buf_free(&b);
    srv_v2_request_free(&req);

    /* both outputs binary: bytes in the order of "outputs" */
    CHECK(parse_with(&req, "{\"binary_data_output\":true}",
                     "[{\"name\":\"attn_weights\"},{\"name\":\"output\"}]", &err) == 0,
          "parse");
    srv_buf_init(&b);
    CHECK(srv_v2_response_write(&b, &jl, &req, "l", "1", res, &err) == 0, "write binary");
    CHECK(b.len == jl + 12 + 32 && memcmp(b.data + jl, w, 12) == 0 &&
              memcmp(b.data + jl + 12, out, 32) == 0,
          "attn_weights bytes then output bytes");
    j = json_loadb(b.data, jl, 0, NULL);
    CHECK(j && json_integer_value(json_object_get(
                   json_object_get(json_array_get(json_object_get(j, "outputs"), 1), "parameters"),
                   "binary_data_size")) == 32,
          "binary_data_size of output");
    CHECK(json_object_get(j, "id") == NULL, "no id when the request had none");
    json_decref(j);
    srv_buf_free(&b);
    srv_v2_request_free(&req);
}

static void test_metadata(void)
{
    mha_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.embed_dim = 8, cfg.num_heads = 2, cfg.kdim = 5, cfg.vdim = 3, cfg.bias = true;
    cfg.batch_first = false;
    srv_buf b;
    srv_buf_init(&b);
    json_t *params = json_pack("{s:i, s:i, s:i, s:i, s:b}", "embed_dim", 8, "num_heads", 2, "kdim",
                               5, "vdim", 3, "batch_first", 0);
    CHECK(srv_v2_metadata_write(&b, "enc\"0", "3", &cfg, params) == 0, "write metadata");
    json_decref(params);
    json_t *j = json_loads(srv_buf_cstr(&b), 0, NULL);
    CHECK(j != NULL, "valid JSON: %s", srv_buf_cstr(&b));
    CHECK(strcmp(json_string_value(json_object_get(j, "name")), "enc\"0") == 0 &&
              strcmp(json_string_value(json_array_get(json_object_get(j, "versions"), 0)), "3") ==
                  0 &&
              strcmp(json_string_value(json_object_get(j, "platform")), "attnd_mha") == 0,
          "name, versions, platform");
    json_t *ins = json_object_get(j, "inputs");
    CHECK(json_array_size(ins) == 7, "seven inputs");
    static const char *const names[7] = {
        "query", "key", "value", "key_padding_mask", "attn_mask", "positions", "key_positions"};
    static const int64_t last[7] = {8, 5, 3, -1, -1, -1, -1};
    for (int i = 0; i < 7 && i < (int)json_array_size(ins); i++) {
        json_t *t = json_array_get(ins, i);
        json_t *shape = json_object_get(t, "shape");
        CHECK(strcmp(json_string_value(json_object_get(t, "name")), names[i]) == 0 &&
                  json_integer_value(json_array_get(shape, 0)) == -1 &&
                  json_integer_value(json_array_get(shape, json_array_size(shape) - 1)) == last[i],
              "input %s", names[i]);
    }
    json_t *outs = json_object_get(j, "outputs");
    CHECK(json_array_size(outs) == 4 &&
              strcmp(json_string_value(json_object_get(json_array_get(outs, 1), "name")),
                     "attn_weights") == 0 &&
              strcmp(json_string_value(json_object_get(json_array_get(outs, 2), "datatype")),
                     "INT32") == 0 &&
              strcmp(json_string_value(json_object_get(json_array_get(outs, 3), "name")),
                     "attn_topk_values") == 0,
          "four outputs: output, attn_weights, attn_topk_indices (INT32), attn_topk_values");
    CHECK(json_is_false(json_object_get(json_object_get(j, "parameters"), "batch_first")),
          "batch_first reported");
    json_decref(j);
    srv_buf_free(&b);

    srv_error err = {0};
    srv_buf_init(&b);
    srv_error_set(&err, SRV_E_LAYER_NOT_FOUND, "", "no model 'x'");
    CHECK(srv_v2_error_write(&b, &err, NULL) == 404 &&
              strcmp(srv_buf_cstr(&b), "{\"error\":\"no model 'x'\"}\n") == 0,
          "error body: %s", srv_buf_cstr(&b));
    srv_buf_free(&b);
    srv_buf_init(&b);
    CHECK(srv_v2_error_write(&b, &err, "r-1") == 404 &&
              strcmp(srv_buf_cstr(&b), "{\"error\":\"no model 'x'\",\"request_id\":\"r-1\"}\n") ==
                  0,
          "error body with the request id: %s", srv_buf_cstr(&b));
    srv_buf_free(&b);
}

/* Every prefix of a valid request, and every single-byte change of it, is parsed or refused with
 * a 4xx, never a crash or a read out of bounds (the ASan build runs this too). */
static void test_robustness(void)
{
    const char *json = "{\"id\":\"r\",\"parameters\":{\"is_causal\":true},\"inputs\":["
                       "{\"name\":\"query\",\"shape\":[1,2,2],\"datatype\":\"FP32\","
                       "\"data\":[[[1,2.5e-1],[-3E+2,4]]]},"
                       "{\"name\":\"attn_mask\",\"shape\":[2,2],\"datatype\":\"BOOL\","
                       "\"parameters\":{\"binary_data_size\":4}}],"
                       "\"outputs\":[{\"name\":\"output\",\"parameters\":{\"binary_data\":true}}]}";
    unsigned char bin[4] = {0, 1, 1, 0};
    size_t hl = strlen(json), n = hl + sizeof bin;
    char *buf = malloc(n);
    int refused = 0, bad_status = 0, accepted = 0;
    for (size_t cut = 0; cut <= n; cut++) {
        for (int mode = 0; mode < 2; mode++) {
            memcpy(buf, json, hl);
            memcpy(buf + hl, bin, sizeof bin);
            /* mode 0: the body cut at `cut`; mode 1: the byte at `cut` changed */
            size_t len = mode == 0 ? cut : n;
            if (mode == 1 && cut < n)
                buf[cut] = (char)(buf[cut] ^ 0x5a);
            char *copy = malloc(len ? len : 1); /* exact size: ASan sees any overread */
            memcpy(copy, buf, len);
            srv_v2_request req;
            srv_error err = {0};
            size_t h = hl < len ? hl : len;
            if (srv_v2_request_parse(&req, copy, len, h, MAXEL, &err) == 0) {
                accepted++;
                srv_v2_request_free(&req);
            } else {
                refused++;
                int st = srv_error_status(err.code);
                if (st < 400 || st >= 500)
                    bad_status++;
            }
            free(copy);
        }
    }
    CHECK(bad_status == 0, "every refusal is a 4xx (%d were not)", bad_status);
    CHECK(refused > 0 && accepted > 0, "some changes refused (%d), the intact body accepted (%d)",
          refused, accepted);
    free(buf);
}

int main(void)
{
    test_protocol_request_example();
    test_protocol_response_example();
    test_triton_binary_example();
    test_nested_and_flat();
    test_structure_errors();
    test_datatypes();
    test_binary_errors();
    test_mixed();
    test_parameters_and_outputs();
    test_response_writer();
    test_metadata();
    test_robustness();
    return check_report();
}
