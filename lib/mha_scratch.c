/*
 * mha_scratch.c - the one scratch allocation of a forward pass.
 *
 * Large blocks are mapped directly and, where the kernel allows (transparent huge pages in
 * "madvise" mode, Debian's default), backed by 2 MiB pages: a pass then takes a few dozen page
 * faults instead of one per 4 KiB, which measured as 15-20% of an L-shaped pass. Small blocks come
 * from malloc.
 */
#include "mha_internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define HUGE_PAGE ((size_t)2 << 20)
#define MAP_FROM ((size_t)4 << 20) /* below this, malloc's arenas do fine */

bool mha_test_switch(const char *name, int *cache)
{
    if (__atomic_load_n(cache, __ATOMIC_RELAXED) < 0) {
        const char *v = getenv(name);
        __atomic_store_n(cache, v && *v && strcmp(v, "0") != 0, __ATOMIC_RELAXED);
    }
    return __atomic_load_n(cache, __ATOMIC_RELAXED) == 1;
}

void mha_scratch_poison(void *p, size_t bytes)
{
    static int on = -1;
    if (p && mha_test_switch("ATTND_POISON_SCRATCH", &on))
        memset(p, 0xFF, bytes);
}

void *mha_scratch_alloc(mha_scratch *s, size_t bytes)
{
    s->ptr = s->base = NULL;
    s->bytes = s->size = 0;
    s->mapped = false;
    bytes = (bytes + 63) / 64 * 64;
    if (bytes < MAP_FROM) {
        s->base = s->ptr = aligned_alloc(64, bytes ? bytes : 64);
        s->bytes = s->ptr ? bytes : 0;
        mha_scratch_poison(s->ptr, s->bytes);
        return s->ptr;
    }
    if (bytes > SIZE_MAX - HUGE_PAGE)
        return NULL;
    size_t size = bytes + HUGE_PAGE;
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    s->base = p;
    s->size = size;
    s->mapped = true;
    char *aligned = (char *)(((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
#ifdef MADV_HUGEPAGE
    madvise(aligned, (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE, MADV_HUGEPAGE); /* a hint */
#endif
    s->ptr = aligned;
    s->bytes = bytes;
    mha_scratch_poison(aligned, bytes);
    return aligned;
}

void mha_scratch_free(mha_scratch *s)
{
    if (s->mapped)
        munmap(s->base, s->size);
    else
        free(s->base);
    s->base = s->ptr = NULL;
    s->bytes = s->size = 0;
    s->mapped = false;
}
