/*
 * mha_blas.c - which OpenBLAS kernels the engine runs on, for the daemon's log and the benchmark.
 *
 * OpenBLAS (built with DYNAMIC_ARCH, as Debian's is) chooses its kernel set when it loads: the one
 * for the CPU, or the one OPENBLAS_CORETYPE names. An operator's variable is respected, never
 * overridden; this file only reports it, and says when the core in use is weaker than the CPU:
 * pinned to one without the CPU's AVX-512, or chosen by an OpenBLAS that does not know the CPU's
 * model. Debian 12's OpenBLAS 0.3.21 takes an Emerald Rapids Xeon (family 6 model 207, AVX-512)
 * for a Prescott and runs SSE3 kernels on it: a 1024² sgemm at a tenth of the core's FMA peak.
 */
#include "mha_internal.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* OpenBLAS 0.3.x core names whose kernels use AVX-512, and those that use AVX2 and FMA at least. */
static const char *const AVX512_CORES[] = {"SkylakeX", "Cooperlake", "Sapphirerapids"};
static const char *const AVX2_CORES[] = {"Haswell", "Zen", "SkylakeX", "Cooperlake",
                                         "Sapphirerapids"};

static bool named(const char *core, const char *const *names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcasecmp(core, names[i]) == 0)
            return true;
    return false;
}

void mha_blas_classify(mha_blas_info *info, const char *core, const char *pinned, bool cpu_avx2,
                       bool cpu_avx512)
{
    memset(info, 0, sizeof *info);
    snprintf(info->core, sizeof info->core, "%s", core ? core : "unknown");
    snprintf(info->pinned, sizeof info->pinned, "%s", pinned ? pinned : "");
    info->cpu_avx512 = cpu_avx512;
    info->core_avx512 = named(info->core, AVX512_CORES, sizeof AVX512_CORES / sizeof *AVX512_CORES);
    const bool core_avx2 = named(info->core, AVX2_CORES, sizeof AVX2_CORES / sizeof *AVX2_CORES);
    /* pinned below the CPU's AVX-512, or (pinned or not) below its AVX2 */
    info->weaker = (info->pinned[0] && cpu_avx512 && !info->core_avx512) || (cpu_avx2 && !core_avx2);
    info->unknown_cpu = info->weaker && !info->pinned[0];
}

void mha_blas_get_info(mha_blas_info *info)
{
#if defined(__x86_64__) && defined(__GNUC__)
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#else
    const bool avx2 = false, avx512 = false;
#endif
    mha_blas_classify(info, openblas_get_corename(), getenv("OPENBLAS_CORETYPE"), avx2, avx512);
}

const char *mha_blas_info_describe(const mha_blas_info *in, char *buf, size_t size)
{
    if (!buf || size == 0)
        return buf;
    const char *best = in->cpu_avx512 ? "SkylakeX" : "Haswell";
    if (in->unknown_cpu)
        snprintf(buf, size,
                 "OpenBLAS core %s: this OpenBLAS does not know the CPU's model and fell back to "
                 "it, though the CPU has %s: set OPENBLAS_CORETYPE=%s for faster GEMMs on the "
                 "generic path (ATTND_ISA=generic; the engine's own kernels do not use OpenBLAS)",
                 in->core, in->cpu_avx512 ? "AVX-512" : "AVX2", best);
    else if (in->weaker)
        snprintf(buf, size,
                 "OpenBLAS core %s, pinned by OPENBLAS_CORETYPE=%s; this CPU has %s: unset "
                 "OPENBLAS_CORETYPE (or set it to %s) for faster GEMMs",
                 in->core, in->pinned, in->cpu_avx512 ? "AVX-512" : "AVX2", best);
    else
        snprintf(buf, size, "OpenBLAS core %s%s%s (CPU %s AVX-512)", in->core,
                 in->pinned[0] ? ", pinned by OPENBLAS_CORETYPE=" : "", in->pinned,
                 in->cpu_avx512 ? "has" : "without");
    return buf;
}

const char *mha_blas_describe(char *buf, size_t size)
{
    mha_blas_info in;
    mha_blas_get_info(&in);
    return mha_blas_info_describe(&in, buf, size);
}
