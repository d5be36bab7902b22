#!/usr/bin/env bash
# check_layers.sh - the layout stays true: every #include in lib/ and server/ goes down the layers,
# never up or sideways, and no circle of includes exists (docs/design.md, "Project layout").
#
#   scripts/check_layers.sh [ROOT]     ROOT defaults to the repository; exits 1 on any violation
#
# The layers, bottom to top, and what each may include besides itself (and system headers):
#   lib/            the engine           nothing of server/
#   server/base/    errors, buffers, log, sysinfo    lib
#   server/codec/   bytes <-> tensors    base, lib
#   server/http/    the HTTP server      base
#   server/store/   layers and the data dir          codec, base, lib
#   server/app/     the shared state and settings    store, http, codec, base, lib
#   server/api/     routes and endpoints             app, store, http, codec, base, lib
#   server/cmd/     entry points (main)              api, app, store, http, codec, base, lib
# A module is a header and the sources that implement it: x.h with x.c, or with the source whose first
# include from its own folder is x.h (tensor_parse.c and tensor_write.c implement tensor.h). Module A
# depends on B when a file of A includes B's header. Circles are looked for among the modules of
# lib/ and server/ (tsort).
# Output ends with "N passed, N failed" like every test program.
set -u
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root" || exit 2

allowed() { # folder -> the folders it may include
    case "$1" in
    lib) echo "lib" ;;
    server/base) echo "server/base lib" ;;
    server/codec) echo "server/codec server/base lib" ;;
    server/http) echo "server/http server/base" ;;
    server/store) echo "server/store server/codec server/base lib" ;;
    server/app) echo "server/app server/store server/http server/codec server/base lib" ;;
    server/api) echo "server/api server/app server/store server/http server/codec server/base lib" ;;
    server/cmd) echo "server/cmd server/api server/app server/store server/http server/codec server/base lib" ;;
    *) echo "" ;;
    esac
}

passed=0
failed=0
edges=$(mktemp)
trap 'rm -f "$edges"' EXIT

files=$(find lib server -name '*.[ch]' | sort)
for f in $files; do
    dir=$(dirname "$f")
    case "$dir" in
    lib | server/base | server/codec | server/http | server/store | server/app | server/api | server/cmd) ;;
    *)
        echo "check_layers: $f is in $dir, which is no layer (add it to scripts/check_layers.sh)"
        failed=$((failed + 1))
        continue
        ;;
    esac
    ok=$(allowed "$dir")
    mod=${f%.*}
    if [ "${f##*.}" = c ] && [ ! -f "$mod.h" ]; then
        # the module this source implements: the first header of its own folder that it includes
        first=$(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"/]*\)".*/\1/p' "$f" |
                while read -r h; do [ -f "$dir/$h" ] && echo "$h" && break; done)
        [ -n "$first" ] && mod="$dir/${first%.*}"
    fi
    while IFS= read -r inc; do
        [ -n "$inc" ] || continue
        # resolve as the compiler does: next to the file, then -Iserver, then -Ilib
        if [ -f "$dir/$inc" ]; then
            target="$dir/$inc"
        elif [ -f "server/$inc" ]; then
            target="server/$inc"
        elif [ -f "lib/$inc" ]; then
            target="lib/$inc"
        else
            echo "check_layers: $f includes \"$inc\", which is no file of lib/ or server/"
            failed=$((failed + 1))
            continue
        fi
        tdir=$(dirname "$target")
        case " $ok " in
        *" $tdir "*) passed=$((passed + 1)) ;;
        *)
            echo "check_layers: $f includes $target: $dir may not include $tdir (allowed: $ok)"
            failed=$((failed + 1))
            ;;
        esac
        tmod=${target%.*}
        [ "$tmod" != "$mod" ] && echo "$tmod $mod" >>"$edges"
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
done

# circles: tsort lists the modules on each loop it finds on stderr
loops=$(sort -u "$edges" | tsort 2>&1 >/dev/null | grep -v 'input contains a loop' | sed 's/^tsort: //')
if [ -n "$loops" ]; then
    echo "check_layers: a circle of includes among these modules:"
    echo "$loops" | sed 's/^/  /'
    failed=$((failed + 1))
else
    passed=$((passed + 1))
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
