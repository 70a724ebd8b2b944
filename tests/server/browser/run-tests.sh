#!/usr/bin/env bash
# The chat page of dsv4 serve in a real browser (ctest's server.browser):
#   ./run-tests.sh path/to/dsv4 ARTIFACT_DIR      (the screenshots go into ARTIFACT_DIR)
# Debian's Chromium (/usr/bin/chromium, or $DSV4_CHROMIUM) driven by playwright-core; no browser is
# downloaded. Exits 77 (skipped) when node or Chromium is missing or `npm ci` has not run here.
set -euo pipefail
cd "$(dirname "$0")"
command -v node >/dev/null || { echo "node not found: skipped"; exit 77; }
chromium="${DSV4_CHROMIUM:-/usr/bin/chromium}"
[ -x "$chromium" ] || { echo "$chromium not found (apt-get install chromium): skipped"; exit 77; }
[ -f node_modules/playwright-core/package.json ] || { echo "run 'npm ci' in tests/server/browser first: skipped"; exit 77; }
DSV4_BINARY="$1" DSV4_CHROMIUM="$chromium" DSV4_ARTIFACTS="${2:-.}" exec node --test --test-concurrency=1 ./*.test.mjs
