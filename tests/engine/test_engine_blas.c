/*
 * test_engine_blas.c - what the engine says of OpenBLAS's kernels (lib/mha_blas.c): a core weaker
 * than the CPU, pinned by OPENBLAS_CORETYPE or chosen by an OpenBLAS that does not know the CPU's
 * model (Debian 12's takes an Emerald Rapids Xeon for a Prescott), is flagged with the variable to
 * set; a core that matches the CPU, or an operator's pin that does, is not.
 */
#include "check.h"
#include "mha.h"

#include <cblas.h>
#include <stdio.h>
#include <string.h>

static void expect(const char *core, const char *pinned, bool avx2, bool avx512, bool weaker,
                   bool unknown, const char *says)
{
    mha_blas_info in;
    mha_blas_classify(&in, core, pinned, avx2, avx512);
    char line[512];
    mha_blas_info_describe(&in, line, sizeof line);
    CHECK(in.weaker == weaker && in.unknown_cpu == unknown && strstr(line, says) &&
              strstr(line, core),
          "core %s, pinned %s, CPU%s%s: weaker %d (want %d), unknown CPU %d (want %d), line "
          "\"%s\" says \"%s\"",
          core, pinned ? pinned : "-", avx2 ? " avx2" : "", avx512 ? " avx512" : "", in.weaker,
          weaker, in.unknown_cpu, unknown, line, says);
}

int main(void)
{
    /* OpenBLAS's own choice */
    expect("Prescott", NULL, true, true, true, true, "OPENBLAS_CORETYPE=SkylakeX");
    expect("Prescott", NULL, true, true, true, true, "does not know the CPU's model");
    expect("Prescott", NULL, true, false, true, true, "OPENBLAS_CORETYPE=Haswell");
    expect("Prescott", NULL, false, false, false, false, "CPU without AVX-512");
    expect("Cooperlake", NULL, true, true, false, false, "OpenBLAS core Cooperlake (CPU has AVX-512)");
    expect("Zen", NULL, true, false, false, false, "(CPU without AVX-512)");
    expect("Haswell", NULL, true, true, false, false, "(CPU has AVX-512)"); /* its own pick */
    /* an operator's pin */
    expect("Haswell", "Haswell", true, true, true, false, "pinned by OPENBLAS_CORETYPE=Haswell");
    expect("Haswell", "Haswell", true, true, true, false, "set it to SkylakeX");
    expect("Haswell", "Haswell", true, false, false, false, "pinned by OPENBLAS_CORETYPE=Haswell");
    expect("Sandybridge", "Sandybridge", true, false, true, false, "set it to Haswell");
    expect("SkylakeX", "skylakex", true, true, false, false, "pinned by OPENBLAS_CORETYPE=skylakex");
    /* this process: the core OpenBLAS reports */
    mha_blas_info in;
    mha_blas_get_info(&in);
    const char *core = openblas_get_corename();
    CHECK(core && strcmp(in.core, core) == 0, "this process's core is OpenBLAS's (%s, %s)", in.core,
          core ? core : "NULL");
    char line[512];
    printf("%s\n", mha_blas_describe(line, sizeof line));
    return check_report();
}
