/*
 * mha_jit.c - GEMM kernels generated at run time for one exact shape, by libxsmm's code generator
 * (libxsmmgen from Debian's libxsmm-dev), in memory this file maps executable itself.
 *
 * Why the generator and not libxsmm's dispatch: the dispatch keeps one process-wide registry of
 * kernels for one target ISA, chosen once; the engine wants AVX2 and AVX-512 kernels side by side
 * (ATTND_ISA caps a pass, not a process) and kernels owned by whoever made them (a layer), freed
 * with it. The generator is a pure function from a GEMM descriptor and a target to machine code.
 *
 * Executable memory: an arena is mapped read + write while kernels are generated into it, then
 * sealed read + execute; it is never writable and executable at once. Where the system refuses
 * executable mappings the seal fails and the caller uses the hand kernels instead.
 *
 * Measured on Zen 4 (one core, in cache): scores 64 x 256 keys x hd 64 at 111-114 GFLOP/s for both
 * the AVX-512 and the AVX2 code (peak 117), the hand kernels 104-110.
 */
#include "mha_kernels.h"

#include <pthread.h>
#include <string.h>
#include <sys/mman.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#ifdef ATTND_HAVE_LIBXSMM
#include <libxsmm_cpuid.h>
#include <libxsmm_generator.h>
#endif

#define ARENA_BYTES ((size_t)256 << 10) /* room for ~100 kernels; pages never touched cost nothing */
#define ALIGN 64

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx"))) void mha_jit_leave(void)
{
    _mm256_zeroupper();
}
#else
void mha_jit_leave(void)
{
}
#endif

bool mha_jit_built(void)
{
#ifdef ATTND_HAVE_LIBXSMM
    return true;
#else
    return false;
#endif
}

#ifdef ATTND_HAVE_LIBXSMM
/* The generator keeps a few error flags of its own in static storage: one generation at a time. */
static pthread_mutex_t generator_lock = PTHREAD_MUTEX_INITIALIZER;

/* libxsmm's target for isa, or 0 when this CPU cannot run its code. The AVX-512 code uses the
 * F, CD, BW, DQ and VL subsets (libxsmm's "core" target, as Skylake-SP): checked one by one. */
static int target_of(mha_isa isa)
{
    if (isa == MHA_ISA_AVX512 && __builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        return LIBXSMM_X86_AVX512_CORE;
    if (isa == MHA_ISA_AVX2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return LIBXSMM_X86_AVX2;
    return 0;
}
#endif

mha_jit_fn mha_jit_add(mha_jit_arena *arena, mha_isa isa, const mha_mm_shape *s)
{
#ifdef ATTND_HAVE_LIBXSMM
    const int target = target_of(isa);
    const int64_t limit = (int64_t)1 << 30; /* libxsmm takes int sizes */
    if (!target || arena->sealed || s->rows < 1 || s->cols < 1 || s->depth < 1 ||
        s->ldc < s->cols || s->ldx < s->depth || s->ldw < s->cols || s->ldc > limit ||
        s->ldx > limit || s->ldw > limit || s->rows > limit || s->depth > limit)
        return NULL;
    if (!arena->code) {
        void *p = mmap(NULL, ARENA_BYTES, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED)
            return NULL;
        arena->code = p;
        arena->size = ARENA_BYTES;
        arena->used = 0;
    }
    libxsmm_descriptor_blob blob;
    const libxsmm_gemm_descriptor *desc = libxsmm_sgemm_descriptor_init(
        &blob, (libxsmm_blasint)s->cols, (libxsmm_blasint)s->rows, (libxsmm_blasint)s->depth,
        (libxsmm_blasint)s->ldw, (libxsmm_blasint)s->ldx, (libxsmm_blasint)s->ldc, 1.0f,
        s->acc ? 1.0f : 0.0f, s->acc ? LIBXSMM_GEMM_FLAG_NONE : LIBXSMM_GEMM_FLAG_BETA_0,
        LIBXSMM_GEMM_PREFETCH_NONE);
    if (!desc)
        return NULL;
    const size_t start = (arena->used + ALIGN - 1) / ALIGN * ALIGN;
    if (start >= arena->size)
        return NULL;
    libxsmm_generated_code code;
    memset(&code, 0, sizeof code);
    code.generated_code = arena->code + start;
    code.buffer_size = (unsigned int)(arena->size - start);
    code.code_type = 2; /* machine code, to be copied to executable memory (here: sealed in place) */
    code.arch = (unsigned int)target;
    pthread_mutex_lock(&generator_lock);
    libxsmm_generator_gemm_kernel(&code, desc);
    pthread_mutex_unlock(&generator_lock);
    if (code.last_error != 0 || code.code_size == 0)
        return NULL;
    arena->used = start + code.code_size;
    return (mha_jit_fn)(void *)(arena->code + start);
#else
    (void)arena, (void)isa, (void)s;
    return NULL;
#endif
}

bool mha_jit_seal(mha_jit_arena *arena)
{
    if (!arena->code)
        return false;
    if (!arena->sealed &&
        mprotect(arena->code, arena->size, PROT_READ | PROT_EXEC) != 0)
        return false;
    arena->sealed = true;
    return true;
}

void mha_jit_arena_free(mha_jit_arena *arena)
{
    if (arena && arena->code)
        munmap(arena->code, arena->size);
    if (arena)
        memset(arena, 0, sizeof *arena);
}
