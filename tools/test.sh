#!/usr/bin/env bash
# The whole hetps test suite: installs what it needs (Debian packages,
# idempotent), builds everything, runs every test, and ends with one line
#   N passed, M failed[, K skipped]
# counting Catch2 test cases (a target without a Catch2 summary counts as one).
# GPU-tagged targets run only where a GPU is present; elsewhere they are
# counted as skipped.
#
# Then the clang thread-safety check of lib/ and daemons/ (tools/tsa.sh,
# one test), and every libFuzzer target for HETPS_FUZZ_SECONDS (default
# 60; 0 skips).
#
# usage: tools/test.sh [extra bazel flags, e.g. --config=asan]
set -uo pipefail
cd "$(dirname "$0")/.."

bash tools/bootstrap.sh || { echo "bootstrap failed"; echo "0 passed, 1 failed"; exit 1; }

tag_filter="-gpu"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  tag_filter=""
  echo "test: GPU found; GPU-tagged tests run"
else
  echo "test: no GPU; GPU-tagged tests are skipped"
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
bazel test //... --keep_going --test_tag_filters="$tag_filter" "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}

skipped=0
if [ -n "$tag_filter" ]; then
  skipped=$(bazel query 'attr(tags, "\bgpu\b", tests(//...))' 2>/dev/null | grep -c '^//' || true)
fi

passed=0
failed=0
testlogs=$(bazel info bazel-testlogs "$@" 2>/dev/null)
echo
echo "test: per target"
while read -r target status; do
  pkg_name=${target#//}
  logfile="$testlogs/${pkg_name/://}/test.log"
  p=0
  f=0
  if [ -f "$logfile" ]; then
    if line=$(grep -E '^All tests passed \(' "$logfile" | tail -1) && [ -n "$line" ]; then
      p=$(sed -E 's/.* in ([0-9]+) test cases?\)/\1/' <<<"$line")
    elif line=$(grep -E '^test cases: ' "$logfile" | tail -1) && [ -n "$line" ]; then
      p=$(sed -nE 's/.*\| *([0-9]+) passed.*/\1/p' <<<"$line")
      f=$(sed -nE 's/.*\| *([0-9]+) failed.*/\1/p' <<<"$line")
      p=${p:-0}
      f=${f:-0}
    fi
  fi
  if [ "$status" = PASSED ]; then
    [ "$p" -eq 0 ] && p=1
    f=0
  else
    # Crashed, timed out or failed without a summary: at least one failure.
    [ "$f" -eq 0 ] && f=1
  fi
  printf '  %-45s %-8s %3d passed %3d failed\n' "$target" "$status" "$p" "$f"
  passed=$((passed + p))
  failed=$((failed + f))
done < <(grep -E '^//[^ ]+ +(\(cached\) +)?(PASSED|FAILED|TIMEOUT|FLAKY|NO STATUS|INCOMPLETE)' "$log" |
         sed -E 's/^(\/\/[^ ]+) +(\(cached\) +)?([A-Z ]*[A-Z]).*/\1 \3/' | sed -E 's/ (NO STATUS)$/ NO_STATUS/')

# rc 1: build failure; 3: some tests failed; 4: no tests ran.
if [ "$rc" -ne 0 ] && [ "$rc" -ne 3 ] && [ "$failed" -eq 0 ]; then
  echo "test: bazel exited $rc (build or infrastructure failure)"
  failed=$((failed + 1))
fi
if [ "$passed" -eq 0 ] && [ "$failed" -eq 0 ]; then
  echo "test: no test ran"
  failed=1
fi

# Checked lock discipline (clang -Wthread-safety -Werror): one test.
echo
echo "test: clang thread-safety analysis (tools/tsa.sh)"
tsa_out=$(bash tools/tsa.sh 2>&1)
echo "$tsa_out" | tail -n 40 | sed 's/^/  /'
if grep -q '^tsa: PASSED' <<<"$tsa_out"; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
fi

# Fuzz targets (libFuzzer, ASan + UBSan): each counts as one test.
fuzz_seconds=${HETPS_FUZZ_SECONDS:-60}
if [ "$fuzz_seconds" -gt 0 ]; then
  echo
  echo "test: fuzzing each target for ${fuzz_seconds}s"
  fuzz_log=$(mktemp)
  bash tools/fuzz.sh "$fuzz_seconds" >"$fuzz_log" 2>&1
  fuzz_rc=$?
  fuzz_failed=0
  while read -r line; do
    echo "  $line"
    case "$line" in
      *" PASSED "*) passed=$((passed + 1)) ;;
      *) failed=$((failed + 1)); fuzz_failed=$((fuzz_failed + 1)) ;;
    esac
  done < <(grep -E '^fuzz: ' "$fuzz_log")
  if [ "$fuzz_rc" -ne 0 ] && [ "$fuzz_failed" -eq 0 ]; then
    echo "test: tools/fuzz.sh exited $fuzz_rc"
    tail -n 20 "$fuzz_log"
    failed=$((failed + 1))
  fi
  rm -f "$fuzz_log"
fi

summary="$passed passed, $failed failed"
[ "$skipped" -gt 0 ] && summary="$summary, $skipped skipped"
echo "$summary"
[ "$failed" -eq 0 ]
