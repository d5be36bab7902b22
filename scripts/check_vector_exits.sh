#!/usr/bin/env bash
# check_vector_exits.sh - no function in the given objects leaves 256/512-bit code for another
# function without clearing the registers' upper halves. A function whose code touches ymm/zmm and
# then jumps or calls out (GCC tail-calls a scalar tail without the vzeroupper it puts before a
# `ret`) hands over dirty upper halves, and legacy SSE code entered so cost ~300 cycles a call on
# Zen 3 (the RoPE rotation and a pooled map's accumulation each paid it per row). Prints each such
# place and exits 1; 0 when there is none.
#   scripts/check_vector_exits.sh build/lib/*.o
set -u
bad=0
for o in "$@"; do
    out=$(objdump -dr --no-show-raw-insn "$o" | awk -v obj="$o" '
        function report(target) {
            if (wide && target != fn) print obj ": " fn " " at " " target " with the upper halves in use"
        }
        /^[0-9a-f]+ <.*>:$/ { fn = $2; wide = 0; pending = 0; next }
        pending && /R_X86_64_(PLT32|PC32)/ { t = $NF; sub(/-0x[0-9a-f]+$/, "", t); report("<" t ">") }
        { pending = 0 }
        /[yz]mm[0-9]/ { wide = 1 }
        /vzeroupper/ { wide = 0 }
        /^ *[0-9a-f]+:[ \t]+(jmp|call)[ \t]/ {
            at = $1 " " $2
            if ($NF ~ /^<[^+>]+>$/) report($NF)   # a function of this object
            else pending = 1                      # another object'"'"'s: its relocation follows
        }')
    if [ -n "$out" ]; then
        echo "$out"
        bad=1
    fi
done
exit $bad
