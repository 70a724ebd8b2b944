#!/usr/bin/env bash
# Runs the libFuzzer targets for a while each, from a small seed corpus. Builds nothing.
#   fuzz/run.sh BUILD_DIR [SECONDS_PER_TARGET=20]
# BUILD_DIR is a tree configured with CC=clang CXX=clang++ -DDSV4_FUZZ=ON and built with
# --target fuzz_safetensors fuzz_config fuzz_requests. Crash inputs are written to $FUZZ_ARTIFACTS
# (default: the current directory); the script exits non-zero when a target finds one.
set -euo pipefail

build=${1:?usage: fuzz/run.sh BUILD_DIR [SECONDS_PER_TARGET]}
secs=${2:-20}
root=$(cd "$(dirname "$0")/.." && pwd)
shared=${DSV4_SHARED:-$root/../shared}
artifacts=${FUZZ_ARTIFACTS:-$PWD}

for t in fuzz_safetensors fuzz_config fuzz_requests; do
  [[ -x "$build/fuzz/$t" ]] || { echo "missing $build/fuzz/$t (build it first)" >&2; exit 2; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/dsv4_fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/safetensors" "$work/config" "$work/requests"

# Config seeds: the bundled model (legacy form) and, when shared/ is there, the transformers form.
cp "$root/models/tiny-shakespeare/config.json" "$work/config/legacy.json"
for f in "$shared/fixtures/tiny-a/model/config.json" "$shared/fixtures/tiny-q/model/config.json"; do
  [[ -f "$f" ]] && cp "$f" "$work/config/$(basename "$(dirname "$(dirname "$f")")").json"
done

# safetensors seeds: a small valid file written here (so the fuzzer starts from the success path), and the
# length + header + first data bytes of real checkpoints (their real tensor names, dtypes and shapes).
header='{"a.weight":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]},"b.scale":{"dtype":"F8_E8M0","shape":[3],"data_offsets":[8,11]},"__metadata__":{"format":"pt"}}'
while (( ${#header} % 8 )); do header+=' '; done
n=${#header}
printf "$(printf '\\x%02x' $((n & 255)) $((n >> 8 & 255)) 0 0 0 0 0 0)" >"$work/safetensors/small.safetensors"
printf '%s\x80\x3f\x00\x40\x00\x00\x80\xbf\x7f\x80\x81' "$header" >>"$work/safetensors/small.safetensors"
# (Two of them only: a 40 KB header costs ~20x the executions per second of the small file.)
for f in "$root/models/tiny-shakespeare/model.safetensors" "$shared/fixtures/tiny-a/golden.safetensors"; do
  [[ -f "$f" ]] || continue
  len=$(od -An -tu8 -N8 "$f" | tr -d ' ')  # little-endian u64, as on every host CI runs on
  head -c $((8 + len + 64)) "$f" >"$work/safetensors/$(echo "$f" | md5sum | cut -c1-8).safetensors"
done

# Request seeds: valid chat and completions bodies (tools, tool calls, response_format, template
# switches, sampling fields), and a dictionary of their keys.
cp "$root/fuzz/requests/"*.json "$work/requests/"

status=0
for t in safetensors config requests; do
  echo "== fuzz_$t for ${secs}s"
  dict=()
  [[ -f "$root/fuzz/$t.dict" ]] && dict=(-dict="$root/fuzz/$t.dict")
  "$build/fuzz/fuzz_$t" "$work/$t" "${dict[@]}" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$artifacts/fuzz_$t-" -print_final_stats=1 || status=$?
done
exit $status
