#!/usr/bin/env bash
# The systemd units in deploy/systemd against the built daemons:
# `systemd-analyze verify` passes with ExecStart pointed at the binaries
# (templates as instance 0), and `systemd-analyze security --offline=yes`
# rates schedd and psd at most 2.0 and workerd at most 3.0 (the goals of
# docs/operations.md). Prints each unit's rating.
set -euo pipefail
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/units.XXXXXX")
trap 'rm -rf "$work"' EXIT
runfiles=${TEST_SRCDIR:-$PWD/..}/${TEST_WORKSPACE:-hetps}
fail=0
check() {  # unit file, instance name, binary, threshold x10
  local unit=$1 name=$2 bin=$3 threshold=$4
  local path="$runfiles/$bin"
  [ -x "$path" ] || { echo "systemd_test: no binary $path"; exit 1; }
  sed "s|/usr/local/bin/[a-z]*|$path|" "$runfiles/deploy/systemd/$unit" >"$work/$name"
  if ! out=$(systemd-analyze verify "$work/$name" 2>&1) || [ -n "$out" ]; then
    echo "systemd_test: verify $unit: ${out:-failed}"
    fail=1
  fi
  local rating
  rating=$(systemd-analyze security --offline=yes "$work/$name" 2>/dev/null | tail -1)
  echo "systemd_test: $unit: ${rating#*: }"
  if ! systemd-analyze security --offline=yes --threshold="$threshold" "$work/$name" \
      >/dev/null 2>&1; then
    echo "systemd_test: $unit exposure above $((threshold / 10)).$((threshold % 10))"
    fail=1
  fi
}
check hetps-schedd.service hetps-schedd.service daemons/schedd/schedd 20
check hetps-psd@.service hetps-psd@0.service daemons/psd/psd 20
check hetps-workerd@.service hetps-workerd@0.service daemons/workerd/workerd 30
exit $fail
