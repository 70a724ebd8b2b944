#!/usr/bin/env bash
# The OpenAI Node client tests against a dsv4 binary (ctest's server.node): ./run-tests.sh path/to/dsv4
# Exits 77 (skipped) when node is missing or `npm ci` has not been run in this folder.
set -euo pipefail
cd "$(dirname "$0")"
command -v node >/dev/null || { echo "node not found: skipped"; exit 77; }
[ -f node_modules/openai/package.json ] || { echo "run 'npm ci' in tests/server/node first: skipped"; exit 77; }
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true  # load_many opens 1,024 connections at once
DSV4_BINARY="$1" exec node --test --test-concurrency=1 test/
