/*
 * bench_v2.c - the same forward pass through four wire formats, same daemon, same run:
 *   /v2 infer with binary tensors (Triton's extension), /v2 infer with JSON data,
 *   /v1 forward with nested JSON, /v1 forward with base64 tensors,
 * and the engine alone (mha_forward on the daemon's layer) as the floor they share.
 *
 * Shape: the "L" case, N=8 L=512 E=768 H=12 self-attention, need_weights false (BENCH_N, BENCH_L,
 * BENCH_E, BENCH_H and BENCH_REPS in the environment override it). Each API runs BENCH_REPS times
 * (default 3), interleaved so background load hits them alike; the median wall time per request
 * (client encode excluded, server parse + forward + response + transfer + client receive included)
 * is printed, with the body sizes. The outputs of all four are checked to be the same bits.
 *
 * The daemon runs in-process on 127.0.0.1, port 0.
 */
#include <curl/curl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/daemon.h"
#include "bench_http.h"
#include "base/buf.h"
#include "codec/base64.h"
#include "codec/float_parse.h"
#include "codec/tensor.h"
#include "mha.h"
#include "store/registry.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int64_t env_int(const char *name, int64_t def)
{
    const char *v = getenv(name);
    return v && *v ? strtoll(v, NULL, 10) : def;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Decodes the output of a response in the API's form into out[count]; returns 0 when it had
 * exactly count floats. */
static int read_output(float *out, int64_t count, int api, const srv_buf *r, long ihcl)
{
    if (api == 0) { /* v2 binary: the bytes after the JSON header */
        if (ihcl < 0 || r->len - (size_t)ihcl != (size_t)count * 4)
            return -1;
        memcpy(out, r->data + ihcl, (size_t)count * 4);
        return 0;
    }
    if (api == 3) { /* v1 base64 */
        const char *p = strstr(r->data, "\"base64\":\"");
        if (!p)
            return -1;
        p += 10;
        const char *e = strchr(p, '"');
        if (!e || (size_t)(e - p) / 4 * 3 < (size_t)count * 4)
            return -1;
        uint8_t *tmp = malloc((size_t)(e - p) / 4 * 3 + 3);
        long n = srv_base64_decode(tmp, p, (size_t)(e - p));
        int rc = n == count * 4 ? 0 : -1;
        if (rc == 0)
            memcpy(out, tmp, (size_t)n);
        free(tmp);
        return rc;
    }
    /* v2 JSON "data": [...] flat, v1 nested: every number in order after the key */
    const char *p = strstr(r->data, api == 1 ? "\"data\":" : "\"output\":");
    if (!p)
        return -1;
    const char *end = r->data + r->len;
    int64_t i = 0;
    for (p = strchr(p, '['); p && p < end && i <= count; p++) {
        if ((*p >= '0' && *p <= '9') || *p == '-') {
            bool ovf;
            size_t n = srv_parse_float(p, end, &out[i < count ? i : 0], &ovf);
            if (!n)
                return -1;
            i++;
            p += n - 1;
        } else if (*p == '}') {
            break;
        }
    }
    return i == count ? 0 : -1;
}

int main(void)
{
    int64_t N = env_int("BENCH_N", 8), L = env_int("BENCH_L", 512), E = env_int("BENCH_E", 768),
            H = env_int("BENCH_H", 12), reps = env_int("BENCH_REPS", 3);
    int64_t count = N * L * E;
    srv_daemon *d = bench_daemon(0, "bench_v2");
    curl_global_init(CURL_GLOBAL_DEFAULT);
    CURL *c = curl_easy_init();
    char base[64], url[4][160];
    bench_put_layer(d, c, "bench", E, H, 0, "bench_v2", base, sizeof base);
    srv_buf resp;
    srv_buf_init(&resp);
    long ihcl, st;
    snprintf(url[0], sizeof url[0], "%s/v2/models/bench/infer", base);
    snprintf(url[1], sizeof url[1], "%s/v2/models/bench/infer", base);
    snprintf(url[2], sizeof url[2], "%s/v1/layers/bench/forward", base);
    snprintf(url[3], sizeof url[3], "%s/v1/layers/bench/forward", base);
    static const char *const api_name[4] = {"/v2 binary", "/v2 JSON", "/v1 JSON (nested)",
                                            "/v1 base64"};

    /* the query: uniform in [-1, 1), fixed seed */
    float *q = malloc((size_t)count * sizeof(float));
    uint64_t s = 0x9E3779B97F4A7C15u;
    for (int64_t i = 0; i < count; i++) {
        s = s * 6364136223846793005u + 1442695040888963407u;
        q[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    }
    srv_buf body[4];
    long body_ihcl[4] = {-1, -1, -1, -1};
    for (int a = 0; a < 4; a++)
        srv_buf_init(&body[a]);
    /* /v2 binary: JSON header padded to a multiple of 4 so the floats land aligned */
    srv_buf_printf(&body[0],
                   "{\"inputs\":[{\"name\":\"query\",\"shape\":[%" PRId64 ",%" PRId64 ",%" PRId64
                   "],\"datatype\":\"FP32\",\"parameters\":{\"binary_data_size\":%" PRId64 "}}],"
                   "\"outputs\":[{\"name\":\"output\",\"parameters\":{\"binary_data\":true}}]}",
                   N, L, E, count * 4);
    while (body[0].len % 4)
        srv_buf_putc(&body[0], ' ');
    body_ihcl[0] = (long)body[0].len;
    srv_buf_append(&body[0], q, (size_t)count * 4);
    /* /v2 JSON: flat data */
    srv_buf_printf(&body[1],
                   "{\"inputs\":[{\"name\":\"query\",\"shape\":[%" PRId64 ",%" PRId64 ",%" PRId64
                   "],\"datatype\":\"FP32\",\"data\":",
                   N, L, E);
    srv_tensor_write(&body[1], q, 1, &count, SRV_ENC_NESTED);
    srv_buf_puts(&body[1], "}]}");
    /* /v1 nested JSON, and base64 */
    int64_t shape[3] = {N, L, E};
    srv_buf_puts(&body[2], "{\"query\":");
    srv_tensor_write(&body[2], q, 3, shape, SRV_ENC_NESTED);
    srv_buf_puts(&body[2], "}");
    srv_buf_puts(&body[3], "{\"encoding\":\"base64\",\"query\":");
    srv_tensor_write(&body[3], q, 3, shape, SRV_ENC_BASE64);
    srv_buf_puts(&body[3], "}");

    double *ms[4];
    size_t resp_len[4] = {0};
    float *got = malloc((size_t)count * sizeof(float)),
          *first = malloc((size_t)count * sizeof(float));
    bool same = true;
    for (int a = 0; a < 4; a++)
        ms[a] = calloc((size_t)reps, sizeof(double));
    for (int64_t r = 0; r < reps; r++) {
        for (int a = 0; a < 4; a++) {
            double t0 = now_ms();
            st = bench_request(c, "POST", url[a], body[a].data, body[a].len,
                         a == 0 ? "application/octet-stream" : "application/json", body_ihcl[a],
                         &resp, &ihcl);
            ms[a][r] = now_ms() - t0;
            resp_len[a] = resp.len;
            if (st != 200) {
                fprintf(stderr, "bench_v2: %s: status %ld %.300s\n", api_name[a], st,
                        srv_buf_cstr(&resp));
                return 1;
            }
            if (r == 0) {
                if (read_output(a == 0 ? first : got, count, a, &resp, ihcl) < 0) {
                    fprintf(stderr, "bench_v2: %s: could not read the output\n", api_name[a]);
                    same = false;
                } else if (a > 0 && memcmp(got, first, (size_t)count * 4) != 0) {
                    same = false;
                }
            }
        }
    }

    /* the engine alone, on the daemon's own layer */
    srv_layer *l = srv_registry_get(srv_daemon_app(d)->registry, "bench", NULL);
    mha_inputs in;
    memset(&in, 0, sizeof in);
    in.query.data = q;
    in.query.ndim = 3;
    memcpy(in.query.shape, shape, sizeof shape);
    in.average_attn_weights = true;
    mha_plan plan;
    mha_error me;
    double *eng = calloc((size_t)reps, sizeof(double));
    if (mha_plan_forward(l->layer, &in, &srv_daemon_app(d)->limits, &plan, &me) == MHA_OK) {
        for (int64_t r = 0; r < reps; r++) {
            double t0 = now_ms();
            mha_forward(l->layer, &in, &plan, got, NULL, NULL, srv_daemon_app(d)->pool, &me);
            eng[r] = now_ms() - t0;
        }
        if (memcmp(got, first, (size_t)count * 4) != 0)
            same = false;
    }
    srv_layer_release(l);

    printf("bench_v2: N=%" PRId64 " L=%" PRId64 " E=%" PRId64 " H=%" PRId64
           " self-attention, need_weights false, %" PRId64 " reps, median ms per request\n",
           N, L, E, H, reps);
    qsort(eng, (size_t)reps, sizeof(double), cmp_double);
    printf("  %-20s %9.1f ms\n", "engine only", eng[reps / 2]);
    for (int a = 0; a < 4; a++) {
        qsort(ms[a], (size_t)reps, sizeof(double), cmp_double);
        printf("  %-20s %9.1f ms   request %6.1f MB, response %6.1f MB\n", api_name[a],
               ms[a][reps / 2], body[a].len / 1e6, resp_len[a] / 1e6);
    }
    printf("  outputs of all four APIs and the engine bit-identical: %s\n", same ? "yes" : "NO");

    for (int a = 0; a < 4; a++) {
        srv_buf_free(&body[a]);
        free(ms[a]);
    }
    free(eng);
    free(q);
    free(got);
    free(first);
    srv_buf_free(&resp);
    curl_easy_cleanup(c);
    curl_global_cleanup();
    srv_daemon_stop(d);
    return same ? 0 : 1;
}
