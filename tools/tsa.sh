#!/usr/bin/env bash
# Checked lock discipline: compiles every source of lib/ and daemons/
# (tests included) with clang's thread-safety analysis, so each
# ABSL_GUARDED_BY / ABSL_EXCLUSIVE_LOCKS_REQUIRED annotation is enforced
# (gcc ignores them). Syntax and analysis only (-fsyntax-only): no code is
# generated and Bazel's gcc build cache is left alone. Needs the generated
# protobuf headers: it builds //proto:all first.
#
# Prints "tsa: PASSED (N files)" or the warnings and "tsa: FAILED (...)",
# and exits non-zero on any finding.
#
# usage: tools/tsa.sh [FILE.cc ...]   (default: lib/ and daemons/)
set -uo pipefail
cd "$(dirname "$0")/.."
CXX=${CXX_TSA:-clang++-14}
command -v "$CXX" >/dev/null || { echo "tsa: FAILED ($CXX not found; tools/bootstrap.sh installs clang-14)"; exit 1; }
bazel build //proto:all >/dev/null 2>&1 || { echo "tsa: FAILED (bazel build //proto:all)"; exit 1; }
gen=$(bazel info bazel-bin 2>/dev/null)

flags=(-std=c++17 -fsyntax-only -I. -I"$gen" -I/usr/local/cuda/include
       $(pkg-config --cflags grpc++ protobuf prometheus-cpp-core yaml-cpp libsodium 2>/dev/null)
       -Wthread-safety -Wthread-safety-beta -Werror=thread-safety -Werror=thread-safety-beta
       -Wno-unknown-warning-option)

if [ $# -gt 0 ]; then
  files=("$@")
else
  mapfile -t files < <(find lib daemons -name '*.cc' | sort)
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
printf '%s\n' "${files[@]}" |
  xargs -P "$(nproc)" -I{} sh -c '"$0" "$@" {} 2>&1 || echo "tsa-failed: {}"' "$CXX" "${flags[@]}" >"$log"
failed=$(grep -c '^tsa-failed: ' "$log" || true)
if [ "$failed" -gt 0 ]; then
  grep -E 'error:|warning:|tsa-failed' "$log" | head -100
  echo "tsa: FAILED ($failed of ${#files[@]} files)"
  exit 1
fi
echo "tsa: PASSED (${#files[@]} files)"
