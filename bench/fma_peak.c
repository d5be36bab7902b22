/*
 * fma_peak.c - this machine's float32 FMA peak: a kernel that does nothing but fused multiply-adds
 * on registers (no loads, no stores), 256-bit (ymm, AVX2+FMA) or 512-bit (zmm, AVX-512F), on one
 * thread or on T threads at once. It is the ceiling every other figure of `make bench` is a
 * percentage of.
 *
 *   build/bench/fma_peak [--isa ymm|zmm] [--threads T] [--seconds SEC]
 *
 * Prints one JSON line: {"isa", "threads", "gflops" (all threads together), "per_thread": [...]}
 * or {"isa", "skipped": "why"} when the CPU lacks the instructions.
 *
 * Why the kernel looks as it does: an FMA has a latency of 4-5 cycles and a CPU issues two per
 * cycle, so at least 10 independent chains are needed to keep both pipes busy; ymm uses 12 (of 16
 * registers), zmm 24 (of 32). Each chain computes a = a·b + c with b just under 1, which converges
 * to c/(1-b) instead of overflowing or turning denormal (denormals would slow some CPUs down). The
 * sum of the chains is printed nowhere but returned, so the compiler cannot drop the work.
 * On Zen 4 a zmm FMA runs as two 256-bit halves: zmm and ymm then measure the same peak; on a
 * native 512-bit core (Zen 5, Intel server parts) zmm measures twice ymm.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86 1
#endif

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

enum { YMM_CHAINS = 12, ZMM_CHAINS = 24 };

/* One thread's work: iters rounds of every chain; returns a value depending on every chain. */
typedef float (*kernel_fn)(int64_t iters, float seed);

#ifdef HAVE_X86
__attribute__((target("avx2,fma"), noinline)) static float kernel_ymm(int64_t iters, float seed)
{
    const __m256 b = _mm256_set1_ps(0.99999988f), c = _mm256_set1_ps(1e-6f);
    __m256 a[YMM_CHAINS];
#pragma GCC unroll 12
    for (int i = 0; i < YMM_CHAINS; i++)
        a[i] = _mm256_set1_ps(seed + (float)i);
    for (int64_t k = 0; k < iters; k++) {
#pragma GCC unroll 12
        for (int i = 0; i < YMM_CHAINS; i++)
            a[i] = _mm256_fmadd_ps(a[i], b, c);
    }
    __m256 s = a[0];
#pragma GCC unroll 12
    for (int i = 1; i < YMM_CHAINS; i++)
        s = _mm256_add_ps(s, a[i]);
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0] + out[7];
}

__attribute__((target("avx512f"), noinline)) static float kernel_zmm(int64_t iters, float seed)
{
    const __m512 b = _mm512_set1_ps(0.99999988f), c = _mm512_set1_ps(1e-6f);
    __m512 a[ZMM_CHAINS];
#pragma GCC unroll 24
    for (int i = 0; i < ZMM_CHAINS; i++)
        a[i] = _mm512_set1_ps(seed + (float)i);
    for (int64_t k = 0; k < iters; k++) {
#pragma GCC unroll 24
        for (int i = 0; i < ZMM_CHAINS; i++)
            a[i] = _mm512_fmadd_ps(a[i], b, c);
    }
    __m512 s = a[0];
#pragma GCC unroll 24
    for (int i = 1; i < ZMM_CHAINS; i++)
        s = _mm512_add_ps(s, a[i]);
    return _mm512_reduce_add_ps(s);
}
#endif

typedef struct run {
    kernel_fn fn;
    int64_t iters;
    pthread_barrier_t *start;
    double seconds; /* out: this thread's time from the common start */
    float sink;     /* out */
} run;

static void *thread_main(void *p)
{
    run *r = p;
    pthread_barrier_wait(r->start);
    double t0 = now();
    r->sink = r->fn(r->iters, 1.0f);
    r->seconds = now() - t0;
    return NULL;
}

int main(int argc, char **argv)
{
    const char *isa = "ymm";
    int threads = 1;
    double seconds = 0.25;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--isa") && i + 1 < argc)
            isa = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--isa ymm|zmm] [--threads T] [--seconds SEC]\n", argv[0]);
            return 2;
        }
    }
    if (threads < 1 || threads > 256 || !(seconds > 0) || (strcmp(isa, "ymm") && strcmp(isa, "zmm"))) {
        fprintf(stderr, "fma_peak: --isa ymm|zmm, --threads 1..256, --seconds > 0\n");
        return 2;
    }
    kernel_fn fn = NULL;
    int flops_per_iter = 0; /* FMA = 2 FLOP per lane */
    const char *why = "not an x86-64 build";
#ifdef HAVE_X86
    if (!strcmp(isa, "ymm")) {
        why = "this CPU has no AVX2+FMA";
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
            fn = kernel_ymm;
            flops_per_iter = YMM_CHAINS * 8 * 2;
        }
    } else {
        why = "this CPU has no AVX-512F";
        if (__builtin_cpu_supports("avx512f")) {
            fn = kernel_zmm;
            flops_per_iter = ZMM_CHAINS * 16 * 2;
        }
    }
#endif
    if (!fn) {
        printf("{\"isa\": \"%s\", \"threads\": %d, \"skipped\": \"%s\"}\n", isa, threads, why);
        return 0;
    }
    /* Calibrate on one thread (which also wakes the core up), then size the run to `seconds`. */
    int64_t iters = 1 << 20;
    double t = now();
    float sink = fn(iters, 0.5f);
    t = now() - t;
    iters = (int64_t)((double)iters * seconds / (t > 1e-6 ? t : 1e-6));
    iters = iters < 1000 ? 1000 : iters;

    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)threads);
    run *r = calloc((size_t)threads, sizeof *r);
    pthread_t *th = calloc((size_t)threads, sizeof *th);
    if (!r || !th) {
        fprintf(stderr, "fma_peak: out of memory\n");
        return 1;
    }
    for (int i = 0; i < threads; i++) {
        r[i] = (run){fn, iters, &start, 0, 0};
        if (i > 0 && pthread_create(&th[i], NULL, thread_main, &r[i]) != 0) {
            fprintf(stderr, "fma_peak: cannot start thread %d\n", i);
            return 1;
        }
    }
    thread_main(&r[0]);
    double slowest = r[0].seconds;
    for (int i = 1; i < threads; i++) {
        pthread_join(th[i], NULL);
        slowest = r[i].seconds > slowest ? r[i].seconds : slowest;
    }
    /* All threads together: the work of all over the time of the slowest (they started together). */
    const double per_thread_flop = (double)iters * flops_per_iter;
    printf("{\"isa\": \"%s\", \"threads\": %d, \"gflops\": %.2f, \"per_thread\": [", isa, threads,
           per_thread_flop * threads / slowest / 1e9);
    for (int i = 0; i < threads; i++) {
        printf("%s%.2f", i ? ", " : "", per_thread_flop / r[i].seconds / 1e9);
        sink += r[i].sink;
    }
    printf("], \"sink\": %g}\n", (double)sink);
    pthread_barrier_destroy(&start);
    free(r);
    free(th);
    return 0;
}
