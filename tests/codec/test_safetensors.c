/*
 * test_safetensors.c - the safetensors reader and writer (server/codec/safetensors.c).
 *
 *   - golden files written by tests/torch/gen_safetensors.py from torch tensors in F32/F16/BF16/F64 read
 *     back as the float32 values torch converts them to (bit for bit, -0.0 included);
 *   - the writer reproduces the golden F32 file byte for byte (Rust's layout: sorted names, compact
 *     header padded with spaces to 8);
 *   - a file built here byte by byte;
 *   - a corpus of damaged files, each refused with the right code and message;
 *   - a round trip of random tensors.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "codec/safetensors.h"

#define DIR "tests/data/safetensors/"

static bool same_bits(float a, float b)
{
    return memcmp(&a, &b, sizeof a) == 0;
}

static void test_golden(void)
{
    size_t elen;
    char *etext = check_read_file(DIR "expected.json", &elen);
    if (!CHECK(etext, "read " DIR "expected.json"))
        return;
    json_error_t jerr;
    json_t *expected = json_loadb(etext, elen, 0, &jerr);
    free(etext);
    if (!CHECK(expected, "expected.json: %s", jerr.text))
        return;
    const char *file;
    json_t *tensors;
    int files = 0;
    json_object_foreach(expected, file, tensors) {
        char path[256];
        snprintf(path, sizeof path, DIR "%s", file);
        size_t len;
        char *bytes = check_read_file(path, &len);
        if (!CHECK(bytes, "read %s", path))
            continue;
        srv_st st;
        srv_error err = {0};
        int rc = srv_st_parse(&st, (const uint8_t *)bytes, len, 1 << 20, "golden", &err);
        CHECK(rc == 0, "%s parses: %s", file, err.message);
        if (rc == 0) {
            files++;
            CHECK(st.n == (int)json_object_size(tensors), "%s: %d tensors", file, st.n);
            CHECK(srv_st_meta(&st, "format") && strcmp(srv_st_meta(&st, "format"), "pt") == 0,
                  "%s: metadata format=pt", file);
            const char *name;
            json_t *want;
            json_object_foreach(tensors, name, want) {
                const srv_st_tensor *t = srv_st_find(&st, name);
                if (!CHECK(t, "%s: tensor %s present", file, name))
                    continue;
                json_t *shape = json_object_get(want, "shape");
                bool shape_ok = t->ndim == (int)json_array_size(shape);
                for (int d = 0; shape_ok && d < t->ndim; d++)
                    shape_ok = t->shape[d] == json_integer_value(json_array_get(shape, d));
                CHECK(shape_ok, "%s: %s shape", file, name);
                json_t *data = json_object_get(want, "data");
                bool data_ok = t->count == (int64_t)json_array_size(data);
                for (int64_t i = 0; data_ok && i < t->count; i++) {
                    float w = (float)json_number_value(json_array_get(data, (size_t)i));
                    data_ok = same_bits(t->data[i], w);
                    if (!data_ok)
                        printf("  %s %s[%lld]: got %.9g want %.9g\n", file, name, (long long)i,
                               t->data[i], w);
                }
                CHECK(data_ok, "%s: %s values equal torch's float32 bit for bit", file, name);
            }
            /* the writer lays out the F32 file exactly as the golden writer (Rust's layout) */
            if (strcmp(file, "golden_f32.safetensors") == 0) {
                srv_st_view views[16];
                for (int i = 0; i < st.n && i < 16; i++)
                    views[i] = (srv_st_view){st.tensors[i].name, st.tensors[i].ndim,
                                             st.tensors[i].shape, st.tensors[i].data};
                srv_buf out;
                srv_buf_init(&out);
                rc = srv_st_write(&out, views, st.n, st.metadata, &err);
                CHECK(rc == 0 && out.len == len && memcmp(out.data, bytes, len) == 0,
                      "writer reproduces golden_f32.safetensors byte for byte (%zu vs %zu bytes)",
                      out.len, len);
                srv_buf_free(&out);
            }
        }
        srv_st_free(&st);
        free(bytes);
    }
    CHECK(files == 4, "four golden files read (%d)", files);
    json_decref(expected);
}

/* A file built by hand, byte by byte: one F32 tensor "w" of shape [2] = {1.0, -2.5}, an F16 "h"
 * [1] = 1.5, a BF16 "b" [] = -0.75, no metadata. */
static void test_hand_built(void)
{
    static const char header[] = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                                 "\"h\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[8,10]},"
                                 "\"b\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[10,12]}}";
    const size_t hl = sizeof header - 1;
    uint8_t file[256];
    size_t n = 0;
    for (int i = 0; i < 8; i++)
        file[n++] = (uint8_t)(hl >> (8 * i));
    memcpy(file + n, header, hl);
    n += hl;
    static const uint8_t data[12] = {
        0x00, 0x00, 0x80, 0x3f, /* 1.0f   = 0x3f800000 */
        0x00, 0x00, 0x20, 0xc0, /* -2.5f  = 0xc0200000 */
        0x00, 0x3e,             /* 1.5 as f16 = 0x3e00 */
        0x40, 0xbf,             /* -0.75 as bf16 = 0xbf40 */
    };
    memcpy(file + n, data, sizeof data);
    n += sizeof data;
    srv_st st;
    srv_error err = {0};
    int rc = srv_st_parse(&st, file, n, 100, "hand", &err);
    if (!CHECK(rc == 0, "hand-built file parses: %s", err.message))
        return;
    CHECK(st.n == 3 && !st.metadata, "3 tensors, no metadata");
    const srv_st_tensor *w = srv_st_find(&st, "w"), *h = srv_st_find(&st, "h"),
                        *b = srv_st_find(&st, "b");
    CHECK(w && w->ndim == 1 && w->shape[0] == 2 && w->data[0] == 1.0f && w->data[1] == -2.5f,
          "w = [1, -2.5]");
    CHECK(h && h->count == 1 && h->data[0] == 1.5f, "h = [1.5]");
    CHECK(b && b->ndim == 0 && b->count == 1 && b->data[0] == -0.75f, "b = -0.75 (scalar)");
    CHECK(strcmp(st.tensors[0].name, "w") == 0 && strcmp(st.tensors[2].name, "b") == 0,
          "tensors in offset order");
    srv_st_free(&st);

    /* f16 corner cases */
    CHECK(srv_st_f16_to_f32(0x0001) == ldexpf(1, -24), "smallest f16 subnormal");
    CHECK(srv_st_f16_to_f32(0x03ff) == ldexpf(1023, -24), "largest f16 subnormal");
    CHECK(srv_st_f16_to_f32(0x7bff) == 65504.0f, "largest f16");
    CHECK(signbit(srv_st_f16_to_f32(0x8000)) && srv_st_f16_to_f32(0x8000) == 0, "-0 f16");
    CHECK(isinf(srv_st_f16_to_f32(0xfc00)) && isnan(srv_st_f16_to_f32(0x7e00)), "f16 inf, nan");
}

/* Builds a file: 8-byte length of header (or len_override when non-zero), header, data. */
static uint8_t *build(size_t *n, const char *header, const void *data, size_t dlen,
                      uint64_t len_override)
{
    size_t hl = strlen(header);
    uint8_t *f = malloc(8 + hl + dlen + 1);
    uint64_t L = len_override ? len_override : hl;
    for (int i = 0; i < 8; i++)
        f[i] = (uint8_t)(L >> (8 * i));
    memcpy(f + 8, header, hl);
    if (dlen)
        memcpy(f + 8 + hl, data, dlen);
    *n = 8 + hl + dlen;
    return f;
}

typedef struct bad_case {
    const char *what;
    const char *header;
    size_t dlen;          /* bytes of data after the header (zeros unless fill says otherwise)   */
    uint64_t len_override;
    size_t file_len;      /* when non-zero, keep only the first file_len - 1 bytes (1: empty)   */
    int fill;             /* 1: the data holds a float32 NaN, 2: bf16 +inf, 3: f64 1e300         */
    srv_code code;
    const char *message;  /* a substring the message must contain                                */
} bad_case;

#define T1 "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}"

static const bad_case BAD[] = {
    {"empty file", "", 0, 0, 1, 0, SRV_E_BAD_REQUEST, "too short"},
    {"7 bytes", "", 0, 0, 8, 0, SRV_E_BAD_REQUEST, "too short"},
    {"header length over the cap", T1, 8, (uint64_t)1 << 40, 0, 0, SRV_E_BAD_REQUEST, "over the limit"},
    {"header length past the end", T1, 8, 200, 0, 0, SRV_E_BAD_REQUEST, "runs past the end"},
    {"truncated data", T1, 8, 0, 8 + sizeof T1 - 1 + 5, 0, SRV_E_BAD_REQUEST, "outside"},
    {"header not an object", "[1,2,3] ", 0, 0, 0, 0, SRV_E_BAD_REQUEST, "starting with '{'"},
    {"bad JSON", "{\"a\":{\"dtype\":", 0, 0, 0, 0, SRV_E_BAD_REQUEST, "not valid JSON"},
    {"trailing garbage in the header", "{} x", 0, 0, 0, 0, SRV_E_BAD_REQUEST, "not valid JSON"},
    {"invalid UTF-8", "{\"\xff\":1}", 0, 0, 0, 0, SRV_E_BAD_REQUEST, "not valid JSON"},
    {"duplicate names",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
     "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
     8, 0, 0, 0, SRV_E_BAD_REQUEST, "twice"},
    {"dtype I64", "{\"a\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8, 0, 0, 0,
     SRV_E_BAD_REQUEST, "dtype I64"},
    {"dtype not a string", "{\"a\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, 0, 0, 0,
     SRV_E_BAD_REQUEST, "needs \"dtype\""},
    {"no data_offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, 0, 0, 0, SRV_E_BAD_REQUEST,
     "data_offsets"},
    {"entry not an object", "{\"a\":[1]}", 0, 0, 0, 0, SRV_E_BAD_REQUEST, "not an object"},
    {"negative shape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, 0, 0,
     0, SRV_E_BAD_REQUEST, "shape[0] is not a non-negative integer"},
    {"fractional shape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}", 4, 0,
     0, 0, SRV_E_BAD_REQUEST, "shape[0]"},
    {"nine dimensions",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, 0, 0, 0,
     SRV_E_BAD_REQUEST, "9 dimensions"},
    {"huge shape (overflows 64 bits)",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,4]}}", 4, 0,
     0, 0, SRV_E_TOO_LARGE, "more than"},
    {"shape over the element limit",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[1000,1000],\"data_offsets\":[0,4]}}", 4, 0, 0, 0,
     SRV_E_TOO_LARGE, "more than"},
    {"offsets past the data", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, 0,
     0, 0, SRV_E_BAD_REQUEST, "outside the data buffer"},
    {"begin after end", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8, 0, 0, 0,
     SRV_E_BAD_REQUEST, "outside the data buffer"},
    {"negative offset", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 8, 0, 0,
     0, SRV_E_BAD_REQUEST, "data_offsets must be"},
    {"three offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 8, 0, 0,
     0, SRV_E_BAD_REQUEST, "data_offsets must be"},
    {"size does not match shape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}",
     8, 0, 0, 0, SRV_E_BAD_REQUEST, "needs 12"},
    {"gap between tensors",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
     12, 0, 0, 0, SRV_E_BAD_REQUEST, "gap"},
    {"overlapping tensors",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
     8, 0, 0, 0, SRV_E_BAD_REQUEST, "overlap"},
    {"data not starting at 0", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
     0, 0, 0, SRV_E_BAD_REQUEST, "gap"},
    {"trailing bytes", T1, 12, 0, 0, 0, SRV_E_BAD_REQUEST, "trailing bytes"},
    {"metadata not an object", "{\"__metadata__\":[1]}", 0, 0, 0, 0, SRV_E_BAD_REQUEST,
     "__metadata__ must be an object"},
    {"metadata value not a string", "{\"__metadata__\":{\"n\":1}}", 0, 0, 0, 0, SRV_E_BAD_REQUEST,
     "not a string"},
    {"empty tensor name", "{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, 0, 0,
     0, SRV_E_BAD_REQUEST, "empty name"},
    {"NaN in F32 weights", T1, 8, 0, 0, 1, SRV_E_BAD_VALUE, "NaN"},
    {"infinity in BF16 weights", "{\"a\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[0,8]}}", 8,
     0, 0, 2, SRV_E_BAD_VALUE, "infinite"},
    {"F64 out of float32 range", "{\"a\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8,
     0, 0, 3, SRV_E_BAD_VALUE, "outside float32"},
};

static void test_bad(void)
{
    for (size_t c = 0; c < sizeof BAD / sizeof BAD[0]; c++) {
        const bad_case *b = &BAD[c];
        uint8_t data[64] = {0};
        if (b->fill == 1) {
            float nan = NAN;
            memcpy(data + 4, &nan, 4);
        } else if (b->fill == 2) {
            data[6] = 0x80, data[7] = 0x7f; /* bf16 0x7f80 = +inf, element 3 */
        } else if (b->fill == 3) {
            double big = 1e300;
            memcpy(data, &big, 8);
        }
        size_t n;
        uint8_t *f = build(&n, b->header, data, b->dlen, b->len_override);
        if (b->file_len)
            n = b->file_len - 1 < n ? b->file_len - 1 : n;
        srv_st st;
        srv_error err = {0};
        int rc = srv_st_parse(&st, f, n, 1000, "weights", &err);
        CHECK(rc == -1 && err.code == b->code && strstr(err.message, b->message) &&
                  strcmp(err.field, "weights") == 0,
              "%s: refused with %s \"...%s...\" (got rc %d, %s: %s)", b->what,
              srv_error_name(b->code), b->message, rc, srv_error_name(err.code), err.message);
        CHECK(st.n == 0 && st.tensors == NULL && st.metadata == NULL, "%s: nothing owned", b->what);
        free(f);
    }

    /* every truncation of a valid file is refused, never read past its end (ASan watches) */
    size_t len;
    char *bytes = check_read_file(DIR "golden_f16.safetensors", &len);
    if (CHECK(bytes, "read golden_f16")) {
        int refused = 0;
        for (size_t cut = 0; cut < len; cut++) {
            uint8_t *copy = malloc(cut ? cut : 1);
            memcpy(copy, bytes, cut);
            srv_st st;
            srv_error err = {0};
            if (srv_st_parse(&st, copy, cut, 1 << 20, "w", &err) == -1)
                refused++;
            srv_st_free(&st);
            free(copy);
        }
        CHECK(refused == (int)len, "all %zu truncations refused (%d)", len, refused);
        free(bytes);
    }
}

static void test_round_trip(void)
{
    srand(42);
    int64_t s0[2] = {7, 5}, s1[1] = {5}, s2[3] = {1, 1, 3};
    float d0[35], d1[5], d2[3];
    for (int i = 0; i < 35; i++)
        d0[i] = (float)rand() / RAND_MAX * 2 - 1;
    for (int i = 0; i < 5; i++)
        d1[i] = ldexpf((float)rand(), -40 + i * 20);
    d2[0] = -0.0f, d2[1] = 1e-45f, d2[2] = 3.4e38f;
    srv_st_view v[3] = {{"out_proj.weight", 2, s0, d0}, {"out_proj.bias", 1, s1, d1},
                        {"bias_k", 3, s2, d2}};
    json_t *meta = json_pack("{s:s, s:s}", "format", "pt", "attnd.config", "{\"embed_dim\":5}");
    srv_buf out;
    srv_buf_init(&out);
    srv_error err = {0};
    int rc = srv_st_write(&out, v, 3, meta, &err);
    CHECK(rc == 0, "write: %s", err.message);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = hl << 8 | (uint8_t)out.data[i];
    CHECK(hl % 8 == 0 && (out.data[8 + hl - 1] == ' ' || out.data[8 + hl - 1] == '}'),
          "header padded to a multiple of 8 (%llu)", (unsigned long long)hl);
    srv_st st;
    rc = srv_st_parse(&st, (const uint8_t *)out.data, out.len, 100, "rt", &err);
    if (CHECK(rc == 0, "read back: %s", err.message)) {
        CHECK(st.n == 3 && strcmp(st.tensors[0].name, "bias_k") == 0 &&
                  strcmp(st.tensors[1].name, "out_proj.bias") == 0,
              "tensors stored sorted by name");
        for (int k = 0; k < 3; k++) {
            const srv_st_tensor *t = srv_st_find(&st, v[k].name);
            bool ok = t && t->ndim == v[k].ndim;
            int64_t count = 1;
            for (int d = 0; ok && d < t->ndim; d++)
                ok = t->shape[d] == v[k].shape[d], count *= v[k].shape[d];
            ok = ok && t->count == count && memcmp(t->data, v[k].data, 4 * (size_t)count) == 0;
            CHECK(ok, "%s reads back bit for bit", v[k].name);
        }
        CHECK(json_equal(st.metadata, meta), "metadata reads back");
    }
    srv_st_free(&st);

    /* refused arguments */
    srv_st_view dup[2] = {{"a", 1, s1, d1}, {"a", 1, s1, d1}};
    srv_error e2 = {0};
    CHECK(srv_st_write(&out, dup, 2, NULL, &e2) == -1 && e2.code == SRV_E_INTERNAL,
          "duplicate names refused by the writer");
    srv_st_view meta_name = {"__metadata__", 1, s1, d1};
    srv_error e3 = {0};
    CHECK(srv_st_write(&out, &meta_name, 1, NULL, &e3) == -1, "__metadata__ refused as a name");
    /* no tensors at all: a valid, empty file */
    srv_buf empty;
    srv_buf_init(&empty);
    CHECK(srv_st_write(&empty, NULL, 0, NULL, &err) == 0 && empty.len == 16 &&
              memcmp(empty.data + 8, "{}      ", 8) == 0,
          "empty file is {} padded to 8");
    srv_st st2;
    CHECK(srv_st_parse(&st2, (const uint8_t *)empty.data, empty.len, 1, "e", &err) == 0 &&
              st2.n == 0,
          "empty file reads back");
    srv_st_free(&st2);
    srv_buf_free(&empty);
    json_decref(meta);
    srv_buf_free(&out);
}

/* Random byte changes in the header and the length of a valid file: every result is either a
 * clean parse whose tensors tile the data, or a refusal; never a crash or an overread (ASan). */
static void test_mutations(void)
{
    size_t len;
    char *orig = check_read_file(DIR "golden_bf16.safetensors", &len);
    if (!CHECK(orig && len > 16, "read golden_bf16"))
        return;
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = hl << 8 | (uint8_t)orig[i];
    uint8_t *f = malloc(len);
    uint32_t seed = 12345;
    int parsed = 0, refused = 0, bad = 0;
    const char pool[] = "{}[]\":,0123456789-. eE\\aF";
    for (int round = 0; round < 3000; round++) {
        memcpy(f, orig, len);
        int changes = 1 + round % 4;
        for (int k = 0; k < changes; k++) {
            seed = seed * 1664525u + 1013904223u;
            size_t at = (seed >> 8) % (8 + hl); /* the length or the header */
            seed = seed * 1664525u + 1013904223u;
            f[at] = (seed >> 24) & 1 ? (uint8_t)pool[(seed >> 8) % (sizeof pool - 1)]
                                     : (uint8_t)(seed >> 16);
        }
        srv_st st;
        srv_error err = {0};
        if (srv_st_parse(&st, f, len, 1 << 20, "m", &err) == 0) {
            parsed++;
            int64_t total = 0;
            for (int i = 0; i < st.n; i++)
                total += st.tensors[i].count;
            if (total > (int64_t)len)
                bad++;
        } else {
            refused++;
            if (!err.message[0] || err.code == SRV_OK)
                bad++;
        }
        srv_st_free(&st);
    }
    CHECK(bad == 0 && refused > 0, "3000 mutated files: %d parsed, %d refused with a message, %d bad",
          parsed, refused, bad);
    free(f);
    free(orig);
}

int main(void)
{
    test_mutations();
    test_golden();
    test_hand_built();
    test_bad();
    test_round_trip();
    return check_report();
}
