/*
 * fuzz_fail.h - how a harness says a property broke: "FAIL: <what>" on stderr, then abort(), which
 * libFuzzer reports as a crash and saves the input for. The prefix lets fuzz/check.sh show the
 * reason in CI's output next to the reproducer.
 */
#ifndef ATTND_FUZZ_FAIL_H
#define ATTND_FUZZ_FAIL_H

#include <stdio.h>
#include <stdlib.h>

#define FAIL(...) (fputs("FAIL: ", stderr), fprintf(stderr, __VA_ARGS__), fputc('\n', stderr), abort())

#endif
