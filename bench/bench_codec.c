/*
 * bench_codec.c - MB/s of the JSON tensor codec, each form in each direction, on an L-sized tensor
 * (N=8, L=512, E=768: 3.1 M floats, a ~30 MB body with 6-decimal numbers like a client sends).
 *
 *   parse  nested / flat (6-decimal text)   srv_tensor_parse
 *   parse  base64                           srv_tensor_parse
 *   scan   the whole body                   srv_json_object_scan (validating every value), and
 *                                           srv_json_object_scan_lazy (the daemon's first pass)
 *   write  nested / flat / base64           srv_tensor_write (shortest round-trip floats)
 *   reference, same run: jansson json_loadb on a 1/8 slice (the node-per-number way), and
 *   strtof on the same numbers (the libc way)
 *   base64 alone, each kernel (scalar, AVX2, AVX-512 VBMI; srv_base64_set_path): encode and decode
 *                                           of the tensor's bytes, on one thread (calls of under
 *                                           SRV_BASE64_SPLIT_MIN) and as the daemon calls them
 *
 * Usage: build/bench/bench_codec [--reps N] [--scale F]   (scale multiplies the element count)
 * MB/s counts the JSON text's bytes (input for parsing, output for writing).
 */
#include <jansson.h>
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codec/base64.h"
#include "codec/json_scan.h"
#include "codec/tensor.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng_state = 0x2545F4914F6CDD1DULL;
static double uniform(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) * (1.0 / 9007199254740992.0);
}

/* roughly N(0,1), as activations are */
static float normal(void)
{
    double u = uniform() + 1e-12, v = uniform();
    return (float)(sqrt(-2 * log(u)) * cos(6.283185307179586 * v));
}

/* The first run of each operation touches fresh memory; on some VMs (Firecracker) a first-touch
 * page fault costs ~30 us, i.e. ~8 ms per MB, which can dominate. "cold" is that first run, the
 * MB/s column is the best of the runs after it (memory reused, as in a daemon that keeps freed memory
 * in the heap: see the mallopt calls in main()). */
static double cold_secs;

static void report(const char *what, size_t bytes, double secs, int64_t count)
{
    printf("%-34s %8.1f MB/s  %7.1f M numbers/s  (%5.1f MB in %6.1f ms; cold %6.1f ms)\n", what,
           (double)bytes / secs / 1e6, (double)count / secs / 1e6, (double)bytes / 1e6, secs * 1e3,
           cold_secs * 1e3);
}

/* Best time of reps runs of parse on text. */
static double time_parse(const char *text, size_t len, const srv_tensor_rules *r, int reps, int64_t want)
{
    double best = 1e30;
    for (int i = 0; i < reps; i++) {
        srv_tensor t;
        srv_error err = {0};
        double t0 = now();
        int rc = srv_tensor_parse(&t, text, len, r, &err);
        double dt = now() - t0;
        if (rc != 0 || t.count != want) {
            fprintf(stderr, "parse failed: %s\n", err.message);
            exit(1);
        }
        srv_tensor_free(&t);
        if (i == 0)
            cold_secs = dt;
        else if (dt < best)
            best = dt;
    }
    return best;
}

static double time_write(srv_buf *out, const float *x, int ndim, const int64_t *shape, srv_encoding enc,
                         int reps)
{
    double best = 1e30;
    srv_buf_free(out);
    srv_buf_init(out);
    for (int i = 0; i < reps; i++) {
        out->len = 0; /* keep the memory: later runs measure the codec, not page faults */
        double t0 = now();
        if (srv_tensor_write(out, x, ndim, shape, enc) != 0) {
            fprintf(stderr, "write failed\n");
            exit(1);
        }
        double dt = now() - t0;
        if (i == 0)
            cold_secs = dt;
        else if (dt < best)
            best = dt;
    }
    return best;
}

/* base64 of the tensor's bytes raw [n] with one kernel: encode and decode, on one thread (pieces of
 * under SRV_BASE64_SPLIT_MIN, whole 48-byte / 64-character blocks, so the text is the same) and in
 * one call as the daemon makes them (two threads for large inputs); MB/s of base64 text. */
static void bench_base64_path(int path, const char *name, const uint8_t *raw, size_t n, int reps)
{
    if (srv_base64_set_path(path) != 0) {
        printf("base64 %-12s not on this processor\n", name);
        return;
    }
    const size_t piece = SRV_BASE64_SPLIT_MIN / 64 * 48 - 48; /* bytes; text 4/3 of it, both under */
    size_t tlen = (n + 2) / 3 * 4;
    srv_buf text;
    srv_buf_init(&text);
    uint8_t *dec = malloc(tlen / 4 * 3 + 3);
    if (!dec || srv_buf_reserve(&text, tlen) != 0) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    /* each operation's runs back to back (after one run of every operation, so the text exists):
     * a run right after a two-thread one would find half its lines in the other core's cache */
    double best[5] = {1e30, 1e30, 1e30, 1e30, 1e30};
    for (int k = 0; k < 5; k++) {
        for (int r = 0; r < reps; r++) {
            double t0 = now();
            long got = 0;
            bool special = false;
            if (k == 0 || k == 1)
                text.len = 0;
            if (k == 0) {
                for (size_t i = 0; i < n; i += piece)
                    srv_base64_encode(&text, raw + i, n - i < piece ? n - i : piece);
                got = (long)n;
            } else if (k == 1) {
                srv_base64_encode(&text, raw, n);
                got = (long)n;
            } else if (k == 2) {
                for (size_t i = 0; i < tlen; i += piece / 3 * 4) {
                    size_t m = tlen - i < piece / 3 * 4 ? tlen - i : piece / 3 * 4;
                    got += srv_base64_decode(dec + i / 4 * 3, text.data + i, m);
                }
            } else if (k == 3) {
                got = srv_base64_decode(dec, text.data, tlen);
            } else {
                got = srv_base64_decode_f32(dec, &special, text.data, tlen);
            }
            double dt = now() - t0;
            if (got != (long)n || special || text.len != tlen ||
                (k >= 2 && memcmp(dec, raw, n) != 0)) {
                fprintf(stderr, "base64 %s: the round trip failed\n", name);
                exit(1);
            }
            if (r > 0 && dt < best[k]) /* the first run is the cold one */
                best[k] = dt;
        }
    }
    static const char *const what[5] = {"encode, 1 thread", "encode (daemon)", "decode, 1 thread",
                                        "decode (daemon)", "decode_f32 (daemon)"};
    for (int k = 0; k < 5; k++)
        printf("base64 %-12s %-20s %8.1f MB/s  (%5.1f MB of text in %6.2f ms)\n", name, what[k],
               (double)tlen / best[k] / 1e6, (double)tlen / 1e6, best[k] * 1e3);
    srv_buf_free(&text);
    free(dec);
}

int main(int argc, char **argv)
{
    int reps = 4;
    double scale = 1.0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--scale") == 0 && i + 1 < argc)
            scale = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--reps N] [--scale F]\n", argv[0]);
            return 2;
        }
    }
    if (reps < 2)
        reps = 2;
    /* keep freed memory for reuse instead of returning it to the kernel (see cold_secs) */
    mallopt(M_MMAP_THRESHOLD, 512 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    int64_t shape[3] = {8, 512, (int64_t)(768 * scale)};
    if (shape[2] < 1)
        shape[2] = 1;
    int64_t count = shape[0] * shape[1] * shape[2];
    float *x = malloc((size_t)count * 4);
    for (int64_t i = 0; i < count; i++)
        x[i] = normal();
    srv_tensor_rules rules = {
        .field = "query", .max_elements = (int64_t)1 << 30, .max_depth = 8}; /* no predecoder */
    printf("JSON tensor codec, shape [%lld, %lld, %lld] = %lld floats, best of %d runs after a cold one\n",
           (long long)shape[0], (long long)shape[1], (long long)shape[2], (long long)count, reps - 1);

    /* the text a client sends: 6 decimals, nested and flat */
    srv_buf nested, flat, body;
    srv_buf_init(&nested);
    srv_buf_init(&flat);
    srv_buf_init(&body);
    char num[32];
    srv_buf_puts(&flat, "{\"shape\":[8,512,");
    srv_buf_printf(&flat, "%lld],\"dtype\":\"float32\",\"data\":[", (long long)shape[2]);
    for (int64_t i = 0; i < count; i++) {
        int64_t j = i % shape[2], row = i / shape[2];
        if (j == 0)
            srv_buf_puts(&nested, i == 0 ? "[[[" : row % shape[1] == 0 ? "]],[[" : "],[");
        else
            srv_buf_puts(&nested, ", ");
        int n = snprintf(num, sizeof num, "%.6f", (double)x[i]);
        srv_buf_append(&nested, num, (size_t)n);
        if (i)
            srv_buf_puts(&flat, ", ");
        srv_buf_append(&flat, num, (size_t)n);
    }
    srv_buf_puts(&nested, "]]]");
    srv_buf_puts(&flat, "]}");
    srv_buf b64;
    srv_buf_init(&b64);
    srv_tensor_write(&b64, x, 3, shape, SRV_ENC_BASE64);

    double t;
    t = time_parse(nested.data, nested.len, &rules, reps, count);
    report("parse nested (6 decimals)", nested.len, t, count);
    t = time_parse(flat.data, flat.len, &rules, reps, count);
    report("parse flat (6 decimals)", flat.len, t, count);
    t = time_parse(b64.data, b64.len, &rules, reps, count);
    report("parse base64", b64.len, t, count);

    /* the request body the daemon scans first */
    srv_buf_puts(&body, "{\"query\":");
    srv_buf_append(&body, nested.data, nested.len);
    srv_buf_puts(&body, ",\"need_weights\":true}");
    static const char *const tensor_keys[] = {"query", NULL};
    for (int lazy = 0; lazy < 2; lazy++) { /* validating (strict), then as the daemon does */
        double best = 1e30;
        for (int i = 0; i < reps; i++) {
            srv_json_member m[8];
            srv_error err = {0};
            double t0 = now();
            int n = lazy ? srv_json_object_scan_lazy(body.data, body.len, "", 64, tensor_keys, m, 8, &err)
                         : srv_json_object_scan(body.data, body.len, "", 64, m, 8, &err);
            double dt = now() - t0;
            if (n != 2) {
                fprintf(stderr, "scan failed: %s\n", err.message);
                return 1;
            }
            if (i == 0)
                cold_secs = dt;
            else if (dt < best)
                best = dt;
        }
        report(lazy ? "scan body (tensor only delimited)" : "scan body (json_scan, validating)",
               body.len, best, count);
    }

    /* writing */
    srv_buf out;
    srv_buf_init(&out);
    t = time_write(&out, x, 3, shape, SRV_ENC_NESTED, reps);
    report("write nested (shortest)", out.len, t, count);
    t = time_write(&out, x, 3, shape, SRV_ENC_FLAT, reps);
    report("write flat (shortest)", out.len, t, count);
    t = time_write(&out, x, 3, shape, SRV_ENC_BASE64, reps);
    report("write base64", out.len, t, count);
    /* attention weights: values in [0, 1), as softmax gives */
    for (int64_t i = 0; i < count; i++)
        x[i] = (float)uniform() / 64;
    t = time_write(&out, x, 3, shape, SRV_ENC_NESTED, reps);
    report("write nested, weights in [0,1/64)", out.len, t, count);

    /* references in the same run */
    size_t slice = flat.len / 8;
    while (slice > 0 && flat.data[slice] != ',')
        slice--;
    srv_buf js;
    srv_buf_init(&js);
    srv_buf_append(&js, flat.data + 40, slice - 40); /* numbers after "data":[ */
    char *d = strchr(js.data, '[');
    size_t off = d ? (size_t)(d - js.data) : 0;
    srv_buf arr;
    srv_buf_init(&arr);
    srv_buf_append(&arr, js.data + off, js.len - off);
    srv_buf_putc(&arr, ']');
    int64_t jn = 1;
    for (size_t i = 0; i < arr.len; i++)
        jn += arr.data[i] == ',';
    cold_secs = 0;
    double t0 = now();
    json_error_t jerr;
    json_t *j = json_loadb(arr.data, arr.len, 0, &jerr);
    double jt = now() - t0;
    if (!j)
        fprintf(stderr, "jansson: %s\n", jerr.text);
    json_decref(j);
    report("reference: jansson json_loadb", arr.len, jt, jn);
    t0 = now();
    float sink = 0;
    char *p = arr.data + 1;
    for (int64_t i = 0; i < jn; i++) {
        char *e;
        sink += strtof(p, &e);
        p = e + 1;
        while (*p == ' ')
            p++;
    }
    double st = now() - t0;
    report("reference: strtof loop", arr.len, st, jn);
    if (sink == 12345.0f)
        printf(" \n");

    /* base64 alone, each kernel, on the tensor's bytes (attention weights now: all finite) */
    printf("\nbase64 of %.1f MB (float32), best of %d runs after a cold one\n", (double)count * 4 / 1e6,
           reps - 1);
    bench_base64_path(SRV_BASE64_PATH_SCALAR, "scalar", (const uint8_t *)x, (size_t)count * 4, reps);
    bench_base64_path(SRV_BASE64_PATH_AVX2, "AVX2", (const uint8_t *)x, (size_t)count * 4, reps);
    bench_base64_path(SRV_BASE64_PATH_AVX512VBMI, "AVX-512 VBMI", (const uint8_t *)x,
                      (size_t)count * 4, reps);
    srv_base64_set_path(SRV_BASE64_PATH_AUTO);

    srv_buf_free(&nested);
    srv_buf_free(&flat);
    srv_buf_free(&body);
    srv_buf_free(&b64);
    srv_buf_free(&out);
    srv_buf_free(&js);
    srv_buf_free(&arr);
    free(x);
    return 0;
}
