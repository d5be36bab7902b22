#!/usr/bin/env bash
# Builds the libFuzzer harnesses fuzz/fuzz_*.c (clang, -fsanitize=fuzzer,address,undefined) into
# build-fuzz/fuzz/. Not part of `make test`: `make fuzz` runs this, then e.g.
#   build-fuzz/fuzz/fuzz_tensor_parse -max_total_time=120 fuzz/corpus/tensor_parse
# (a copy of the seed corpus in a scratch dir keeps the repository's seeds small:
#   fuzz/run.sh NAME SECONDS does that).
# clang is a developer tool here, not a build dependency: installed on demand when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
CC=${FUZZ_CC:-clang}
if ! command -v "$CC" >/dev/null 2>&1; then
    echo "fuzz: installing clang (needs root)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends clang >&2
fi
OUT=build-fuzz
SAN=(-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
CFLAGS=(-O1 -g -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -pthread -Ilib -Iserver
        '-DATTND_VERSION="fuzz"' '-DATTND_GIT_REV="fuzz"')
mkdir -p "$OUT/lib" "$OUT/fuzz" $(for d in server/*/; do echo "$OUT/${d%/}"; done)

# the engine and the daemon's modules, instrumented for coverage (fuzzer-no-link), two at a time;
# an object is rebuilt when its source or any header is newer
objs=()
for src in lib/*.c server/*/*.c; do
    [ "$src" = server/cmd/main.c ] && continue
    obj="$OUT/${src%.c}.o"
    objs+=("$obj")
    if [ ! -e "$obj" ] || [ "$src" -nt "$obj" ] || [ -n "$(find lib server openapi.yaml -newer "$obj" -name '*.h' -o -newer "$obj" -name '*.yaml' | head -1)" ]; then
        echo "  CC $src"
        "$CC" "${CFLAGS[@]}" "${SAN[@]}" -fsanitize=fuzzer-no-link -c -o "$obj" "$src" &
        [ "$(jobs -rp | wc -l)" -ge 2 ] && wait -n
    fi
done
wait
rm -f "$OUT/libfuzzsrv.a"
ar rcs "$OUT/libfuzzsrv.a" "${objs[@]}"

for h in fuzz/fuzz_*.c; do
    name=$(basename "$h" .c)
    echo "  LD $OUT/fuzz/$name"
    "$CC" "${CFLAGS[@]}" "${SAN[@]}" -fsanitize=fuzzer -o "$OUT/fuzz/$name" "$h" "$OUT/libfuzzsrv.a" \
        -lmicrohttpd -ljansson -lopenblas -lm -lpthread
done
