#!/usr/bin/env bash
# test_vector_exits.sh - no function of the engine or the daemon leaves AVX code for another function
# with the ymm/zmm upper halves in use (scripts/check_vector_exits.sh on the build's objects): legacy
# SSE code entered so cost ~300 cycles a call on Zen 3. Then the check must fail on a scratch object
# whose AVX2 functions hand over to a static scalar function of their own object (GCC clears the
# upper halves before calling another object's functions, not before its own non-AVX ones), by a
# tail call and by a plain call, so that it cannot pass by accident. Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
build=${BUILD:-build}
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "test_vector_exits.sh: FAIL: $*"; fail=$((fail + 1)); }

objs=$(find "$build/lib" "$build/server" -name '*.o' 2>/dev/null)
if [ -z "$objs" ]; then
    bad "no objects under $build/lib and $build/server: build first"
elif nm -u "$build/lib/mha_rope.o" 2>/dev/null | grep -q '__[atu]*san_\|__ubsan_'; then
    # the sanitizers' report calls are made with whatever is in the registers, and their builds
    # inline differently: the check is about the build that runs in production
    echo "SKIP $build's objects: built with sanitizers (the check is for the optimized build)"
else
    # shellcheck disable=SC2086
    out=$(scripts/check_vector_exits.sh $objs 2>&1)
    if [ $? -eq 0 ]; then ok; else bad "AVX code hands over dirty upper halves:"; echo "$out"; fi
fi

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cat >"$scratch/t.c" <<'C'
#include <immintrin.h>
void elsewhere(float *x, long n);
static __attribute__((noinline)) void tail(float *x, long n)
{
    for (long j = 0; j < n; j++)
        x[j] *= 3.0f;
}
__attribute__((target("avx2"))) void here(float *x, long n)
{
    long j = 0;
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(x + j, _mm256_add_ps(_mm256_loadu_ps(x + j), _mm256_set1_ps(1.0f)));
    tail(x + j, n - j);
}
__attribute__((target("avx2"))) float there(float *x, long n)
{
    long j = 0;
    __m256 s = _mm256_setzero_ps();
    for (; j + 8 <= n; j += 8)
        s = _mm256_add_ps(s, _mm256_loadu_ps(x + j));
    tail(x + j, n - j);
    return _mm256_cvtss_f32(s) + x[0];
}
__attribute__((target("avx2"))) void away(float *x, long n)
{
    long j = 0;
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(x + j, _mm256_add_ps(_mm256_loadu_ps(x + j), _mm256_set1_ps(1.0f)));
    elsewhere(x + j, n - j);
}
C
if ! ${CC:-gcc} -O2 -c "$scratch/t.c" -o "$scratch/t.o" 2>"$scratch/cc.log"; then
    bad "could not compile the scratch object: $(cat "$scratch/cc.log")"
else
    msg=$(scripts/check_vector_exits.sh "$scratch/t.o" 2>&1)
    rc=$?
    [ $rc -ne 0 ] && ok || bad "the check passed an object that tail-calls with dirty upper halves"
    grep -q "<here>.*<tail>" <<<"$msg" && ok || bad "the tail call within the object was not named: $msg"
    grep -q "<there>.*call <tail>" <<<"$msg" && ok || bad "the plain call was not named: $msg"
    grep -q "<away>" <<<"$msg" && bad "a call to another object (GCC clears before it) was named: $msg" || ok
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
