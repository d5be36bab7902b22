/*
 * check_float_all.c - checks srv_format_float on every one of the 2^32 float32 bit patterns:
 * the output reads back (strtof, C locale) as the same bits, is at most 15 characters, and no
 * decimal with one significant digit fewer reads back as the same float (the two decimals of
 * that length either side of the value, and their neighbours, are tried). It is also the same,
 * byte for byte, as the previous implementation's (bench/float_format_ref.h: the style must not
 * drift), and srv_format_floats writes the same texts: each block of 2^16 patterns, non-finite
 * ones included, goes through it in one call and is compared with the single texts joined by ','.
 *
 * Not part of `make test` or `make bench` (it takes ~10 minutes on two cores):
 *     make build/bench/check_float_all && nice ./build/bench/check_float_all [threads [first last]]
 * With ATTND_CHECK_SAME_ONLY=1 in the environment it checks only the sameness with the previous
 * implementation (a few minutes): enough while changing the code, as the previous texts passed
 * the full check; run the full one before landing.
 * Prints the counts and exits 0 when every pattern passed.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/float_format.h"
#include "codec/float_parse.h"
#include "float_format_ref.h"

static atomic_ullong n_checked, n_bad;

static int sig_digits(const char *s, int *dec_exp, unsigned long long *mant)
{
    /* significant digits, their value, and the power of ten of the last one */
    char d[32];
    int n = 0, point = -1, e = 0;
    const char *p = s;
    if (*p == '-')
        p++;
    for (; *p && *p != 'e'; p++) {
        if (*p == '.')
            point = n;
        else
            d[n++] = *p;
    }
    if (*p == 'e')
        e = atoi(p + 1);
    if (point < 0)
        point = n;
    int a = 0, b = n;
    while (a < b && d[a] == '0')
        a++;
    while (b > a && d[b - 1] == '0')
        b--;
    unsigned long long m = 0;
    for (int i = a; i < b; i++)
        m = m * 10 + (unsigned long long)(d[i] - '0');
    *mant = m;
    *dec_exp = e + (point - b); /* value = m · 10^dec_exp */
    return b - a;
}

static int reads_back(float f, unsigned long long m, int e)
{
    char t[48], r[24];
    int n0 = 0, k = 0;
    do
        r[n0++] = (char)('0' + m % 10);
    while ((m /= 10) != 0);
    while (n0 > 0)
        t[k++] = r[--n0];
    t[k++] = 'e';
    if (e < 0) {
        t[k++] = '-';
        e = -e;
    }
    if (e >= 10)
        t[k++] = (char)('0' + e / 10);
    t[k++] = (char)('0' + e % 10);
    t[k] = '\0';
    float g;
    bool ovf;
    size_t n = srv_parse_float(t, t + strlen(t), &g, &ovf);
    return n == strlen(t) && memcmp(&g, &f, 4) == 0;
}

static long double pow10l_tab[120]; /* 10^(i-60) */

static int n_threads = 1;
static int same_only;

static void *worker(void *arg)
{
    /* blocks of 2^16 patterns dealt round-robin, so every thread gets its share of the slow ones */
    uint64_t lo = ((uint64_t *)arg)[0], hi = ((uint64_t *)arg)[1], me = ((uint64_t *)arg)[2];
    unsigned long long checked = 0, bad = 0;
    /* the current block through srv_format_floats, and where the next text starts in it */
    float *block = malloc(sizeof(float) << 16);
    char *batch = malloc(SRV_FORMAT_FLOATS_ROOM(1 << 16));
    size_t batch_len = 0, at = 0;
    for (uint64_t u = lo; u < hi; u++) {
        if (((u - lo) >> 16) % (uint64_t)n_threads != me) {
            u = lo + ((u - lo) | 0xFFFF); /* skip to the end of this block */
            continue;
        }
        if (u == lo || ((u - lo) & 0xFFFF) == 0) {
            size_t cnt = hi - u < (1 << 16) ? (size_t)(hi - u) : (size_t)1 << 16;
            for (size_t j = 0; j < cnt; j++) {
                uint32_t b = (uint32_t)(u + j);
                memcpy(&block[j], &b, 4);
            }
            batch_len = srv_format_floats(batch, block, cnt, ',');
            at = 0;
        }
        uint32_t bits = (uint32_t)u;
        float f;
        memcpy(&f, &bits, 4);
        /* srv_format_floats' text of this pattern: the single one (or the string), then ',' */
        char want[32];
        if (isfinite(f))
            ref_format_float(want, f);
        else
            strcpy(want, isnan(f) ? "\"nan\"" : f < 0 ? "\"-inf\"" : "\"inf\"");
        size_t wl = strlen(want);
        if (at + wl > batch_len || memcmp(batch + at, want, wl) != 0 ||
            (at + wl < batch_len && batch[at + wl] != ',')) {
            if (bad < 20)
                fprintf(stderr, "0x%08x: srv_format_floats wrote \"%.*s\", want \"%s\"\n", bits,
                        (int)(batch_len - at < 16 ? batch_len - at : 16), batch + at, want);
            bad++;
            u = lo + ((u - lo) | 0xFFFF); /* its positions are off for the rest of the block */
            continue;
        }
        at += wl + 1;
        if (!isfinite(f))
            continue;
        checked++;
        char out[32];
        int len = srv_format_float(out, f);
        if (strcmp(out, want) != 0 || len != (int)wl) {
            if (bad < 20)
                fprintf(stderr, "0x%08x: \"%s\", the previous implementation wrote \"%s\"\n", bits,
                        out, want);
            bad++;
            continue;
        }
        if (bits >> 31) { /* negative: must be "-" and the positive's text (checked in its turn) */
            char pos[32];
            float a = -f;
            int plen = srv_format_float(pos, a);
            if (len != plen + 1 || out[0] != '-' || strcmp(out + 1, pos) != 0) {
                fprintf(stderr, "0x%08x: \"%s\" is not '-' and \"%s\"\n", bits, out, pos);
                bad++;
            }
            continue;
        }
        if (same_only)
            continue;
        float back = strtof(out, NULL);
        int ok = len > 0 && len <= 15 && out[len] == '\0' && memcmp(&back, &f, 4) == 0;
        float a = fabsf(f);
        if (ok && a != 0) {
            int e;
            unsigned long long m;
            int nd = sig_digits(out, &e, &m);
            if (nd > 1) {
                /* the (nd-1)-digit decimals near a: a ≈ t · 10^(e'), t in [10^(nd-2), 10^(nd-1)) */
                int e1 = e + 1;
                long double t = (long double)a / pow10l_tab[e1 + 60];
                long long base = (long long)floorl(t);
                for (long long c = base - 1; c <= base + 2 && ok; c++)
                    if (c > 0 && reads_back(a, (unsigned long long)c, e1))
                        ok = 0;
            }
        }
        if (!ok) {
            if (bad < 20)
                fprintf(stderr, "0x%08x: \"%s\" wrong or not shortest\n", bits, out);
            bad++;
        }
    }
    free(block);
    free(batch);
    atomic_fetch_add(&n_checked, checked);
    atomic_fetch_add(&n_bad, bad);
    return NULL;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    const char *so = getenv("ATTND_CHECK_SAME_ONLY");
    same_only = so && strcmp(so, "1") == 0;
    if (threads < 1 || threads > 64)
        threads = 2;
    for (int i = 0; i < 120; i++)
        pow10l_tab[i] = powl(10.0L, (long double)(i - 60));
    pthread_t th[64];
    uint64_t ranges[64][3];
    /* optional [first last] (hex, inclusive) to check a part */
    uint64_t first = argc > 3 ? strtoull(argv[2], NULL, 16) : 0;
    uint64_t end = argc > 3 ? strtoull(argv[3], NULL, 16) + 1 : 1ULL << 32;
    n_threads = threads;
    for (int i = 0; i < threads; i++) {
        ranges[i][0] = first;
        ranges[i][1] = end;
        ranges[i][2] = (uint64_t)i;
        pthread_create(&th[i], NULL, worker, ranges[i]);
    }
    for (int i = 0; i < threads; i++)
        pthread_join(th[i], NULL);
    printf("%llu finite float32 patterns checked%s, %llu wrong or not shortest\n",
           (unsigned long long)n_checked, same_only ? " (sameness only)" : "",
           (unsigned long long)n_bad);
    return n_bad != 0;
}
