#!/usr/bin/env bash
# Consecutive jobs on one cluster: does one job slow the next? Runs the
# default job (deploy/jobs/mlp.yaml, or --job FILE) N times on one local
# cluster (tools/run-cluster.sh --repeat N) and, before each, the same
# model, data and span with PyTorch DDP on the CPU (bench/ddp_fashion.py,
# 2 processes; Debian's python3-torch, installed here where no python3
# has torch) while the cluster idles. DDP starts fresh processes each
# time, so its spread is what this machine's own variation gives a job of
# this size in the same minutes; hetps' spread beyond it, or a rise over
# the sequence, is state the cluster carries from job to job.
# Prints a line per job (hetps train_s, the DDP run just before it, their
# ratio), then each side's slowest / fastest, the spread of the per-job
# ratio, and the mean of the last three jobs over the first three (a
# trend). Issue 22 asks for hetps' slowest <= 1.10x its fastest.
#
# usage: bench/ten-jobs.sh [--jobs N] [--job FILE] [--bin DIR] [--out DIR]
#                          [--no-baseline]
#   --jobs         jobs in the sequence (default 10)
#   --job          the job spec (default deploy/jobs/mlp.yaml)
#   --bin          prebuilt daemons (tools/run-cluster.sh --bin)
#   --out          keep the cluster's logs and both sides' results in DIR
#   --no-baseline  hetps only (no DDP runs, nothing installed)
set -euo pipefail
cd "$(dirname "$0")/.."

jobs=10
spec=deploy/jobs/mlp.yaml
bin=()
out=""
baseline=1
while [ $# -gt 0 ]; do
  case "$1" in
    --jobs) jobs=$2; shift 2 ;;
    --bin) bin=(--bin "$2"); shift 2 ;;
    --out) out=$2; shift 2 ;;
    --no-baseline) baseline=0; shift ;;
    --job) spec=$2; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "ten-jobs: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$jobs" in ''|*[!0-9]*|0|1) echo "ten-jobs: --jobs needs a number >= 2" >&2; exit 2 ;; esac
[ -r "$spec" ] || { echo "ten-jobs: no job spec $spec" >&2; exit 2; }

if [ -z "$out" ]; then
  out=$(mktemp -d /tmp/hetps-ten-jobs.XXXXXX)
  trap 'rm -rf "$out"' EXIT
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
: >"$out/ddp.txt"

between=()
if [ "$baseline" -eq 1 ]; then
  # shellcheck source=bench/torch-env.sh
  source bench/torch-env.sh
  field() { sed -nE "s/^$1:[[:space:]]*([^[:space:]#]+).*/\1/p" "$spec"; }
  span=$(sed -nE 's/^(epochs|iterations):[[:space:]]*([0-9]+).*/--\1 \2/p' "$spec")
  model=$(field model) batch=$(field batch_size) seed=$(field seed) data=$(field dataset)
  # The single quotes go into the command run-cluster runs (bash -c).
  # shellcheck disable=SC2016
  between=(--between "$py bench/ddp_fashion.py --model ${model:-mlp} $span --workers 2 \
--batch ${batch:-64} --seed ${seed:-1} ${data:+--dataset '$data'} \
--port \$((29500 + RANDOM % 1000)) >>'$out/ddp.txt'")
fi

echo "ten-jobs: $jobs jobs of $spec on one cluster$([ "$baseline" -eq 1 ] &&
  echo ", each after a PyTorch DDP run of the same job") (logs: $out) ..."
bash tools/run-cluster.sh --job "$spec" --repeat "$jobs" --refresh 5 --out "$out/cluster" \
  "${bin[@]}" "${between[@]}" >"$out/hetps.log" 2>&1 || {
  echo "ten-jobs: the run failed; its output:" >&2
  tail -30 "$out/hetps.log" >&2
  exit 1
}
grep '^run-cluster: job ' "$out/hetps.log" >"$out/hetps.txt"

python3 - "$out/hetps.txt" "$out/ddp.txt" <<'PY'
import json, re, statistics, sys
hetps = [float(m.group(1)) for line in open(sys.argv[1])
         if (m := re.search(r" train_s ([0-9.]+)", line))]
ddp = [json.loads(line)["seconds"] for line in open(sys.argv[2]) if line.startswith("{")]
if not hetps or min(hetps) <= 0:
    sys.exit("ten-jobs: no job times in the cluster's output")
print(f"{'job':>4} {'hetps train_s':>14} {'DDP s (before)':>15} {'ratio':>7}")
for k, h in enumerate(hetps):
    d = ddp[k] if k < len(ddp) else None
    print(f"{k + 1:>4} {h:>14.2f} {'-' if d is None else f'{d:.2f}':>15} "
          f"{'-' if d is None else f'{h / d:.3f}':>7}")

def spread(xs):
    return max(xs) / min(xs)

def trend(xs):
    n = min(3, len(xs) // 2)
    return statistics.mean(xs[-n:]) / statistics.mean(xs[:n])

print(f"hetps: {min(hetps):.2f}-{max(hetps):.2f} s, slowest/fastest {spread(hetps):.3f} "
      f"(goal <= 1.10), last/first jobs {trend(hetps):.3f}")
if len(ddp) == len(hetps) and min(ddp) > 0:
    ratio = [h / d for h, d in zip(hetps, ddp)]
    print(f"PyTorch DDP, fresh processes: {min(ddp):.2f}-{max(ddp):.2f} s, slowest/fastest "
          f"{spread(ddp):.3f}, last/first runs {trend(ddp):.3f}")
    print(f"hetps / DDP per job: {min(ratio):.3f}-{max(ratio):.3f}, slowest/fastest "
          f"{spread(ratio):.3f}")
PY
