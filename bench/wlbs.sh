#!/usr/bin/env bash
# WLBS live (issue 24): a loopback cluster of 2 psd and 4 workerd trains
# mlp (4 x 4096 samples per iteration, 150 iterations: compute-bound on
# loopback, so a slow worker shows) three ways:
#   uniform  every worker at full speed, equal batches;
#   equal    worker-3 at half speed (compute_slowdown=2), equal batches;
#   wlbs     worker-3 at half speed, batch_policy: wlbs.
# Prints the time per iteration of each, the ideal for one half-speed
# worker out of four (the uniform run's compute scaled by 4/3.5, plus its
# non-compute time: perfect balance over 3.5 workers' worth of speed),
# the ratios to it, and each run's final test accuracy.
# usage: bench/wlbs.sh [--out DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out=out/bench-wlbs
[ "${1:-}" = --out ] && out=$2
mkdir -p "$out"

run() {  # run NAME [run-cluster args...] -> the job lines in $out/NAME.log
  local name=$1
  shift
  bash tools/run-cluster.sh --workers 4 --refresh 1 --out "$out/$name" "$@" >"$out/$name.log" 2>&1 \
    || { echo "wlbs: $name failed; see $out/$name.log" >&2; tail -20 "$out/$name.log" >&2; exit 1; }
  grep '^run-cluster: job ' "$out/$name.log"
}

echo "wlbs: uniform (4 workers at full speed, equal batches) ..."
uniform=$(run uniform --job bench/jobs/wlbs-equal.yaml)
echo "$uniform"
echo "wlbs: worker-3 at half speed, equal batches then wlbs ..."
slowed=$(run slowed --worker-flag worker-3=--compute_slowdown=2 \
  --job bench/jobs/wlbs-equal.yaml --job bench/jobs/wlbs.yaml)
echo "$slowed"
python3 - "$uniform" "$slowed" <<'PY'
import re, sys
def jobs(text):
    out = []
    for line in text.splitlines():
        f = line.split()
        d = dict(zip(f[5::2], f[6::2]))
        out.append({k: float(v) for k, v in d.items()})
    return out
iters = 150
u = jobs(sys.argv[1])[0]
eq, wl = jobs(sys.argv[2])
per = lambda j: j["train_s"] / iters
c_u = u["compute_s"] / iters
ideal = c_u * 4 / 3.5 + (per(u) - c_u)
print()
print(f"{'run':<28} {'s/iteration':>12} {'x ideal':>8} {'accuracy':>9}")
for name, j in (("uniform, equal", u), ("half-speed worker, equal", eq),
                ("half-speed worker, wlbs", wl)):
    print(f"{name:<28} {per(j):12.4f} {per(j) / ideal:8.2f} {100 * j['accuracy']:8.2f}%")
print(f"{'ideal (3.5 workers of speed)':<28} {ideal:12.4f} {1.0:8.2f}")
print(f"\nwlbs: wlbs {per(wl) / ideal:.2f}x ideal (goal <= 1.1), equal {per(eq) / ideal:.2f}x "
      f"(goal >= 1.6), accuracy wlbs - equal {100 * (wl['accuracy'] - eq['accuracy']):+.2f} pp "
      f"(goal within 0.5)")
PY
