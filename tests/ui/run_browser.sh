#!/usr/bin/env bash
# make test-ui: the viewer (/ui) and /ui/attnd.js in headless Chromium, against daemons started on
# free ports by tests/ui/browser/check_ui.mjs. Installs what is missing: Debian's chromium and
# nodejs/npm (apt, as root), playwright-core from npm (into $BUILD/ui-node, not the source tree;
# no browser download: Debian's /usr/bin/chromium is driven). Ends with "N passed, N failed".
#   UPDATE_SCREENSHOT=1  rewrite docs/viewer.png (the README's picture) from this run
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
PLAYWRIGHT_VERSION=1.65.1

missing=""
command -v chromium >/dev/null 2>&1 || missing="$missing chromium"
command -v node >/dev/null 2>&1 || missing="$missing nodejs"
command -v npm >/dev/null 2>&1 || missing="$missing npm"
if [ -n "$missing" ]; then
    echo "installing missing Debian packages:$missing"
    if [ "$(id -u)" != 0 ]; then
        echo "run as root, or: sudo apt-get install$missing" >&2
        echo "0 passed, 1 failed"
        exit 1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get update -q &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing || {
            echo "0 passed, 1 failed"
            exit 1
        }
fi

major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$major" -lt 20 ]; then
    echo "playwright-core $PLAYWRIGHT_VERSION needs Node.js 20 or later; this node is $(node --version 2>/dev/null)" >&2
    echo "0 passed, 1 failed"
    exit 1
fi

pw="$BUILD/ui-node/node_modules/playwright-core"
if [ "$(node -p "try { require('./$pw/package.json').version } catch (e) { '' }" 2>/dev/null)" != "$PLAYWRIGHT_VERSION" ]; then
    echo "installing playwright-core $PLAYWRIGHT_VERSION into $BUILD/ui-node"
    mkdir -p "$BUILD/ui-node"
    npm install --prefix "$BUILD/ui-node" --no-audit --no-fund --no-save --loglevel=error \
        "playwright-core@$PLAYWRIGHT_VERSION" || { echo "0 passed, 1 failed"; exit 1; }
fi

exec node tests/ui/browser/check_ui.mjs --attnd "$BUILD/attnd" --chromium "$(command -v chromium)" \
    --playwright "$pw" --screenshot docs/viewer.png
