/*
 * test_half.c - float32 -> float16 / bfloat16 (codec/half.h) against torch's x.half() and
 * x.bfloat16(), bit for bit, on the table tests/torch/gen_half.py wrote (tests/golden_select/
 * half.json: every boundary, tie and subnormal of both formats, infinities, random bit patterns and
 * attention-weight-like values). Then the way back: every float16 and bfloat16 bit pattern decodes
 * to a float32 that converts back to the same bits (NaNs to the quiet NaN), and the names and
 * sizes.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "check.h"
#include "codec/half.h"
#include "golden.h"

/* The base64 member key of doc decoded into a fresh buffer of n elements of size bytes. */
static void *decode_member(json_t *doc, const char *key, size_t n, size_t size)
{
    const char *s = json_string_value(json_object_get(doc, key));
    uint8_t *out = malloc(n * size + 4);
    if (!s || !out) {
        free(out);
        return NULL;
    }
    if (golden_base64_decode(out, n * size + 4, s, strlen(s)) != (int64_t)(n * size)) {
        free(out);
        return NULL;
    }
    return out;
}

static void check_torch_table(void)
{
    json_error_t jerr;
    json_t *doc = json_load_file("tests/golden_select/half.json", 0, &jerr);
    if (!CHECK(doc, "tests/golden_select/half.json: %s", jerr.text))
        return;
    size_t n = (size_t)json_integer_value(json_object_get(doc, "count"));
    float *x = decode_member(doc, "f32", n, 4);
    uint16_t *f16 = decode_member(doc, "f16", n, 2), *bf16 = decode_member(doc, "bf16", n, 2);
    if (CHECK(n > 10000 && x && f16 && bf16, "the table holds %zu values and decodes", n)) {
        int bad16 = 0, badbf = 0;
        for (size_t i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, &x[i], 4);
            uint16_t a = srv_f32_to_f16(x[i]), b = srv_f32_to_bf16(x[i]);
            /* a NaN: torch's NaN may carry a payload; ours is the quiet NaN (half.h) */
            bool nan = isnan(x[i]);
            if (nan ? (a & 0x7C00) != 0x7C00 || !(a & 0x3FF) : a != f16[i]) {
                if (bad16++ < 5)
                    CHECK(0, "float16 of %08x (%.9g): ours %04x, torch %04x", u, x[i], a, f16[i]);
            }
            if (nan ? (b & 0x7F80) != 0x7F80 || !(b & 0x7F) : b != bf16[i]) {
                if (badbf++ < 5)
                    CHECK(0, "bfloat16 of %08x (%.9g): ours %04x, torch %04x", u, x[i], b, bf16[i]);
            }
        }
        CHECK(bad16 == 0, "float16 equals torch's .half() on all %zu values (%d differ)", n, bad16);
        CHECK(badbf == 0, "bfloat16 equals torch's .bfloat16() on all %zu values (%d differ)", n,
              badbf);

        /* the array forms do the same */
        uint16_t *h = malloc(n * 2);
        float *r = malloc(n * 4);
        int bad = 0;
        srv_f32_to_half_array(h, x, n, SRV_WIRE_F16);
        srv_f32_round_array(r, x, n, SRV_WIRE_F16);
        for (size_t i = 0; i < n; i++)
            if (!isnan(x[i]) &&
                (h[i] != f16[i] || memcmp(&r[i], &(float){srv_f16_to_f32(f16[i])}, 4)))
                bad++;
        srv_f32_to_half_array(h, x, n, SRV_WIRE_BF16);
        memcpy(r, x, n * 4);
        srv_f32_round_array(r, r, n, SRV_WIRE_BF16); /* in place */
        for (size_t i = 0; i < n; i++)
            if (!isnan(x[i]) &&
                (h[i] != bf16[i] || memcmp(&r[i], &(float){srv_bf16_to_f32(bf16[i])}, 4)))
                bad++;
        CHECK(bad == 0, "the array conversions agree with torch (%d differ)", bad);
        free(h);
        free(r);
    }
    free(x);
    free(f16);
    free(bf16);
    json_decref(doc);
}

static void check_round_trips(void)
{
    int bad16 = 0, badbf = 0;
    for (uint32_t v = 0; v < 65536; v++) {
        uint16_t h = (uint16_t)v;
        float f = srv_f16_to_f32(h), g = srv_bf16_to_f32(h);
        bool nan16 = (h & 0x7C00) == 0x7C00 && (h & 0x3FF),
             nanbf = (h & 0x7F80) == 0x7F80 && (h & 0x7F);
        uint16_t back = srv_f32_to_f16(f), backbf = srv_f32_to_bf16(g);
        if (nan16 ? !(isnan(f) && back == ((h & 0x8000) | 0x7E00)) : back != h)
            bad16++;
        if (nanbf ? !(isnan(g) && backbf == ((h & 0x8000) | 0x7FC0)) : backbf != h)
            badbf++;
    }
    CHECK(bad16 == 0, "every float16 decodes exactly and converts back (%d differ)", bad16);
    CHECK(badbf == 0, "every bfloat16 decodes exactly and converts back (%d differ)", badbf);
    CHECK(srv_f16_to_f32(0x0001) == ldexpf(1.0f, -24), "the smallest float16 subnormal is 2^-24");
    CHECK(srv_f16_to_f32(0x7BFF) == 65504.0f, "the largest float16 is 65504");
    CHECK(srv_f32_to_f16(65519.0f) == 0x7BFF && srv_f32_to_f16(65520.0f) == 0x7C00,
          "float16 overflows to inf from 65520 on");
    CHECK(srv_f32_to_f16(-0.0f) == 0x8000 && srv_f32_to_bf16(-0.0f) == 0x8000, "-0 keeps its sign");
}

static void check_names(void)
{
    srv_wire_dtype d = SRV_WIRE_F32;
    CHECK(srv_wire_dtype_parse("float16", &d) == 0 && d == SRV_WIRE_F16, "float16 parses");
    CHECK(srv_wire_dtype_parse("bfloat16", &d) == 0 && d == SRV_WIRE_BF16, "bfloat16 parses");
    CHECK(srv_wire_dtype_parse("float32", &d) == 0 && d == SRV_WIRE_F32, "float32 parses");
    CHECK(srv_wire_dtype_parse("half", &d) < 0 && srv_wire_dtype_parse(NULL, &d) < 0,
          "other names do not");
    CHECK(!strcmp(srv_wire_dtype_v2_name(SRV_WIRE_BF16), "BF16") &&
              !strcmp(srv_wire_dtype_name(SRV_WIRE_F16), "float16"),
          "names");
    CHECK(srv_wire_dtype_size(SRV_WIRE_F16) == 2 && srv_wire_dtype_size(SRV_WIRE_F32) == 4,
          "sizes");
}

int main(void)
{
    check_torch_table();
    check_round_trips();
    check_names();
    return check_report();
}
