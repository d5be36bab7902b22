/*
 * mha_blas.c - which OpenBLAS kernels the engine runs on, for the daemon's log and the benchmark.
 *
 * OpenBLAS (built with DYNAMIC_ARCH, as Debian's is) chooses its kernel set when it loads: the one
 * for the CPU, or the one OPENBLAS_CORETYPE names. An operator's variable is respected, never
 * overridden; this file only reports it, and says when it pins a core weaker than the CPU.
 */
#include "mha_internal.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* OpenBLAS 0.3.x core names whose kernels use AVX-512. */
static const char *const AVX512_CORES[] = {"SkylakeX", "Cooperlake", "Sapphirerapids"};

static bool cpu_has_avx512(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#else
    return false;
#endif
}

void mha_blas_get_info(mha_blas_info *info)
{
    memset(info, 0, sizeof *info);
    const char *core = openblas_get_corename();
    snprintf(info->core, sizeof info->core, "%s", core ? core : "unknown");
    const char *pin = getenv("OPENBLAS_CORETYPE");
    snprintf(info->pinned, sizeof info->pinned, "%s", pin ? pin : "");
    info->cpu_avx512 = cpu_has_avx512();
    for (size_t i = 0; i < sizeof AVX512_CORES / sizeof AVX512_CORES[0]; i++)
        info->core_avx512 |= strcasecmp(info->core, AVX512_CORES[i]) == 0;
    info->weaker = info->pinned[0] && info->cpu_avx512 && !info->core_avx512;
}

const char *mha_blas_describe(char *buf, size_t size)
{
    mha_blas_info in;
    mha_blas_get_info(&in);
    if (!buf || size == 0)
        return buf;
    if (in.weaker)
        snprintf(buf, size,
                 "OpenBLAS core %s, pinned by OPENBLAS_CORETYPE=%s; this CPU has AVX-512: unset "
                 "OPENBLAS_CORETYPE (or set it to SkylakeX) for faster GEMMs",
                 in.core, in.pinned);
    else
        snprintf(buf, size, "OpenBLAS core %s%s%s (CPU %s AVX-512)", in.core,
                 in.pinned[0] ? ", pinned by OPENBLAS_CORETYPE=" : "", in.pinned,
                 in.cpu_avx512 ? "has" : "without");
    return buf;
}
