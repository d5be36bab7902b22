/*
 * check.h - the test harness every tests/<layer>/test_*.c uses: plain executables, no framework.
 *
 *   CHECK(cond, "fmt", ...)     counts a pass, or prints file:line and the message and counts a fail
 *   CHECK_CLOSE(got, want, ...) float within 2e-5 absolute + 1e-4 relative (the project's tolerance)
 *   return check_report();      prints "N passed, N failed" and returns the exit status
 *
 * A test binary runs from the repository root (tests/run_tests.sh makes sure), so it can read
 * tests/golden/ and tests/cases/ by relative path.
 */
#ifndef ATTND_CHECK_H
#define ATTND_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CHECK_ATOL 2e-5
#define CHECK_RTOL 1e-4

extern int check_passed;
extern int check_failed;

/* Records one check; prints "file:line: FAIL: <message>" when ok is false. Returns ok. */
bool check_record(bool ok, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define CHECK(cond, ...) check_record(!!(cond), __FILE__, __LINE__, __VA_ARGS__)

/* True when |got - want| <= CHECK_ATOL + CHECK_RTOL·|want| (both infinite of one sign also match). */
bool check_close(float got, float want);

/* Compares n floats; on the first mismatch records a fail naming what, the index and both values;
 * otherwise records one pass. Returns true when all match. *max_abs (may be NULL) gets the largest
 * absolute difference seen. */
bool check_close_array(const char *file, int line, const char *what, const float *got,
                       const float *want, int64_t n, double *max_abs);
#define CHECK_CLOSE_ARRAY(what, got, want, n) \
    check_close_array(__FILE__, __LINE__, (what), (got), (want), (n), NULL)

/* Prints "N passed, N failed" on its own line; returns 0 when nothing failed, else 1. */
int check_report(void);

/* Reads a whole file into a NUL-terminated malloc'd buffer (caller frees); NULL on failure. */
char *check_read_file(const char *path, size_t *len);

#endif
