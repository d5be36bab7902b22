/* check.c - counters and comparisons for the test executables (see check.h). */
#include "check.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

int check_passed;
int check_failed;

bool check_record(bool ok, const char *file, int line, const char *fmt, ...)
{
    if (ok) {
        check_passed++;
        return true;
    }
    check_failed++;
    fprintf(stdout, "%s:%d: FAIL: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stdout, fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    fflush(stdout);
    return false;
}

bool check_close(float got, float want)
{
    if (isnan(got) || isnan(want))
        return false;
    if (isinf(want) || isinf(got))
        return got == want;
    return fabs((double)got - (double)want) <= CHECK_ATOL + CHECK_RTOL * fabs((double)want);
}

bool check_close_array(const char *file, int line, const char *what, const float *got,
                       const float *want, int64_t n, double *max_abs)
{
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!check_close(got[i], want[i])) {
            check_record(false, file, line, "%s[%lld]: got %.9g, want %.9g", what, (long long)i,
                         (double)got[i], (double)want[i]);
            if (max_abs)
                *max_abs = INFINITY;
            return false;
        }
        double d = fabs((double)got[i] - (double)want[i]);
        if (d > worst)
            worst = d;
    }
    if (max_abs)
        *max_abs = worst;
    check_record(true, file, line, "%s", what);
    return true;
}

int check_report(void)
{
    printf("%d passed, %d failed\n", check_passed, check_failed);
    fflush(stdout);
    return check_failed ? 1 : 0;
}

char *check_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n + 65536 + 1 > cap) {
            cap = cap ? cap * 2 : 131072;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0)
            break;
    }
    fclose(f);
    buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
}
