/*
 * mha_isa.c - which kernel set a pass runs: the best the CPU has, capped by ATTND_ISA.
 *
 * The cap lets a test (or an operator chasing a difference) run the generic and AVX2 paths on an
 * AVX-512 machine: ATTND_ISA=generic makes the attention's GEMMs go through cblas and the softmax
 * through its portable loop. It is read when a pass is planned and kept in the plan, so a pass
 * never mixes two choices (the plan sizes the workspace for the kernels it picked).
 */
#include "mha_internal.h"

#include <stdlib.h>
#include <string.h>

static mha_isa cpu_best(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx512f"))
        return MHA_ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return MHA_ISA_AVX2;
#endif
    return MHA_ISA_PORTABLE;
}

const char *mha_isa_name(mha_isa isa)
{
    switch (isa) {
    case MHA_ISA_PORTABLE:
        return "generic";
    case MHA_ISA_AVX2:
        return "avx2";
    case MHA_ISA_AVX512:
        return "avx512";
    default:
        return "unknown";
    }
}

bool mha_isa_from_name(const char *name, mha_isa *isa)
{
    for (int i = 0; i < MHA_ISA_COUNT; i++)
        if (!strcmp(name, mha_isa_name((mha_isa)i))) {
            *isa = (mha_isa)i;
            return true;
        }
    return false;
}

mha_isa mha_isa_active(void)
{
    mha_isa best = cpu_best(), cap;
    const char *name = getenv("ATTND_ISA");
    if (name && mha_isa_from_name(name, &cap))
        return cap < best ? cap : best;
    return best;
}
