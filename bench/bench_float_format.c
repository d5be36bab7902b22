/*
 * bench_float_format.c - ns per number of the shortest float32 writer on realistic data, the
 * current server/codec/float_format.c against the previous implementation (bench/float_format_ref.h)
 * in the same run, interleaved, so load from other processes hits both alike:
 *
 *   ref      the old srv_format_float, one call per number, as write_numbers called it
 *   single   srv_format_float, one call per number
 *   batch    srv_format_floats, the whole row in one call (what tensor_write.c and v2_response.c use)
 *
 * Data: attention weights (softmax over rows of 32 N(0,1) scores), causal weights (the same with
 * the upper triangle 0), layer outputs N(0, 0.1), activations N(0, 1), and random finite bit
 * patterns. Each output is also compared byte for byte with ref's.
 *
 * Usage: build/bench/bench_float_format [--reps N] [--count N]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codec/float_format.h"
#include "float_format_ref.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng_state = 0x2545F4914F6CDD1DULL;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static double uniform(void) { return (double)(rng() >> 11) * (1.0 / 9007199254740992.0); }
static float normal(void)
{
    double u = uniform() + 1e-12, v = uniform();
    return (float)(sqrt(-2 * log(u)) * cos(6.283185307179586 * v));
}

/* the old function as a separate call, as it was from tensor_write.c (another translation unit) */
__attribute__((noinline)) static int ref_call(char *buf, float f) { return ref_format_float(buf, f); }

static size_t run_ref(char *o, const float *x, int64_t n)
{
    char *p = o;
    for (int64_t i = 0; i < n; i++) {
        if (i > 0)
            *p++ = ',';
        p += ref_call(p, x[i]);
    }
    return (size_t)(p - o);
}

static size_t run_single(char *o, const float *x, int64_t n)
{
    char *p = o;
    for (int64_t i = 0; i < n; i++) {
        if (i > 0)
            *p++ = ',';
        p += srv_format_float(p, x[i]);
    }
    return (size_t)(p - o);
}

static size_t run_batch(char *o, const float *x, int64_t n) { return srv_format_floats(o, x, n, ','); }

typedef size_t (*runner)(char *, const float *, int64_t);

int main(int argc, char **argv)
{
    int reps = 7;
    int64_t count = 1 << 16;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--count") == 0 && i + 1 < argc)
            count = atoll(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--reps N] [--count N]\n", argv[0]);
            return 2;
        }
    }
    if (reps < 1)
        reps = 1;
    if (count < 32)
        count = 32;
    count -= count % 32;
    const char *names[] = {"weights", "causal", "out N(0,0.1)", "N(0,1)", "bits"};
    enum { NSETS = 5, NIMPL = 3 };
    float *data[NSETS];
    for (int d = 0; d < NSETS; d++)
        data[d] = malloc((size_t)count * sizeof(float));
    for (int64_t r = 0; r < count / 32; r++) {
        float sc[32], mx = -INFINITY, sum = 0;
        for (int j = 0; j < 32; j++) {
            sc[j] = normal();
            mx = sc[j] > mx ? sc[j] : mx;
        }
        for (int j = 0; j < 32; j++)
            sum += (sc[j] = expf(sc[j] - mx));
        int row = (int)(r % 32);
        float csum = 0;
        for (int j = 0; j <= row; j++)
            csum += sc[j];
        for (int j = 0; j < 32; j++) {
            data[0][r * 32 + j] = sc[j] / sum;
            data[1][r * 32 + j] = j <= row ? sc[j] / csum : 0.0f;
        }
    }
    for (int64_t i = 0; i < count; i++) {
        data[2][i] = 0.1f * normal();
        data[3][i] = normal();
        uint32_t u;
        do
            u = (uint32_t)rng();
        while (((u >> 23) & 0xFF) == 0xFF);
        memcpy(&data[4][i], &u, 4);
    }
    size_t room = (size_t)count * 17 + 64;
    char *out[NIMPL];
    for (int k = 0; k < NIMPL; k++)
        out[k] = malloc(room);
    runner impl[NIMPL] = {run_ref, run_single, run_batch};
    const char *iname[NIMPL] = {"ref", "single", "batch"};
    printf("shortest float32 writer, %lld numbers per set, best of %d interleaved runs, ns/number\n",
           (long long)count, reps);
    printf("%-14s %8s %8s %8s %9s %9s %7s\n", "data", "ref", "single", "batch", "ref/single",
           "ref/batch", "B/num");
    int bad = 0;
    for (int d = 0; d < NSETS; d++) {
        double best[NIMPL] = {1e30, 1e30, 1e30};
        size_t len[NIMPL] = {0};
        for (int r = 0; r < reps; r++)
            for (int k = 0; k < NIMPL; k++) {
                double t0 = now();
                len[k] = impl[k](out[k], data[d], count);
                double dt = now() - t0;
                if (dt < best[k])
                    best[k] = dt;
            }
        for (int k = 1; k < NIMPL; k++)
            if (len[k] != len[0] || memcmp(out[k], out[0], len[0]) != 0) {
                printf("%s: %s output differs from ref\n", names[d], iname[k]);
                bad = 1;
            }
        double ns[NIMPL];
        for (int k = 0; k < NIMPL; k++)
            ns[k] = best[k] / (double)count * 1e9;
        printf("%-14s %8.2f %8.2f %8.2f %9.2fx %8.2fx %7.2f\n", names[d], ns[0], ns[1], ns[2],
               ns[0] / ns[1], ns[0] / ns[2], (double)len[0] / (double)count);
    }
    for (int d = 0; d < NSETS; d++)
        free(data[d]);
    for (int k = 0; k < NIMPL; k++)
        free(out[k]);
    return bad;
}
