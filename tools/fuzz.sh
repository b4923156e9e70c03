#!/usr/bin/env bash
# Builds every libFuzzer target with clang (ASan + UBSan) and runs each for
# SECONDS (default 60). Prints one line per target:
#   fuzz: NAME PASSED|FAILED (runs, seconds)
# and exits non-zero if any target crashed. Crash inputs are kept in
# $HETPS_FUZZ_OUT (default /tmp/hetps-fuzz) for reproduction:
#   /tmp/hetps-fuzz/NAME /tmp/hetps-fuzz/crash-...
#
# usage: tools/fuzz.sh [SECONDS]
set -uo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
out=${HETPS_FUZZ_OUT:-/tmp/hetps-fuzz}
mkdir -p "$out"
CXX=${CXX_FUZZ:-clang++-14}
flags=(-std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I.)

# name | sources
targets=(
  "wire_fuzz|lib/transport/fuzz/wire_fuzz.cc lib/transport/wire.cc"
)

status=0
for t in "${targets[@]}"; do
  name=${t%%|*}
  srcs=${t#*|}
  # shellcheck disable=SC2086
  if ! "$CXX" "${flags[@]}" $srcs -o "$out/$name" 2>"$out/$name.build.log"; then
    echo "fuzz: $name FAILED (build; see $out/$name.build.log)"
    status=1
    continue
  fi
  corpus="$out/$name.corpus"
  mkdir -p "$corpus"
  # Seed with hand-made valid packets (committed beside the target).
  seeds="$(dirname "${srcs%% *}")/seeds"
  [ -d "$seeds" ] && cp -n "$seeds"/* "$corpus"/ 2>/dev/null
  log="$out/$name.log"
  if (cd "$out" && "./$name" -max_total_time="$seconds" -print_final_stats=1 "$corpus" >"$log" 2>&1); then
    runs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' || echo '?')
    echo "fuzz: $name PASSED ($runs runs, ${seconds}s)"
  else
    echo "fuzz: $name FAILED (see $log)"
    tail -n 30 "$log"
    status=1
  fi
done
exit $status
