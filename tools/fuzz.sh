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

transport=lib/transport
absl_libs=$(pkg-config --libs absl_status absl_statusor absl_strings absl_str_format \
  absl_synchronization absl_time absl_hash absl_raw_hash_set)
# name | seed folder | sources | extra link flags | extra run flags
targets=(
  "wire_fuzz|$transport/fuzz/seeds|$transport/fuzz/wire_fuzz.cc $transport/wire.cc||"
  "tcp_frames_fuzz||$transport/fuzz/tcp_frames_fuzz.cc $transport/tcp_frames.cc||"
  # A local ring's reader against any writer's indices and records.
  "local_ring_fuzz||$transport/fuzz/local_ring_fuzz.cc $transport/local_ring.cc|$absl_libs|"
  # The whole endpoint on a simulated network. No single allocation may
  # pass 64 MiB: the budgets it runs with (4 MiB in all) allow far less.
  "endpoint_fuzz||$transport/fuzz/endpoint_fuzz.cc $transport/endpoint.cc $transport/endpoint_send.cc $transport/endpoint_recv.cc $transport/endpoint_ack.cc $transport/congestion.cc $transport/early_close.cc $transport/wire.cc $transport/datagram_socket.cc $transport/udp_socket.cc $transport/local_ring.cc $transport/sim_network.cc lib/base/net_address.cc lib/base/json_writer.cc lib/base/escape.cc $transport/packet_auth.cc $transport/ghash.cc|$absl_libs -lcrypto -lsodium|-malloc_limit_mb=64 -rss_limit_mb=2048"
)

status=0
for t in "${targets[@]}"; do
  IFS='|' read -r name seeds srcs libs run_flags <<<"$t"
  # shellcheck disable=SC2086
  if ! "$CXX" "${flags[@]}" $srcs $libs -o "$out/$name" 2>"$out/$name.build.log"; then
    echo "fuzz: $name FAILED (build; see $out/$name.build.log)"
    status=1
    continue
  fi
  corpus="$out/$name.corpus"
  mkdir -p "$corpus"
  # Seed with hand-made valid inputs (committed beside the target).
  [ -n "$seeds" ] && [ -d "$seeds" ] && cp -n "$seeds"/* "$corpus"/ 2>/dev/null
  log="$out/$name.log"
  # shellcheck disable=SC2086
  if (cd "$out" && "./$name" -max_total_time="$seconds" -print_final_stats=1 $run_flags "$corpus" >"$log" 2>&1); then
    runs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' || echo '?')
    echo "fuzz: $name PASSED ($runs runs, ${seconds}s)"
  else
    echo "fuzz: $name FAILED (see $log)"
    tail -n 30 "$log"
    status=1
  fi
done
exit $status
