#!/usr/bin/env bash
# Peer benchmark: hetps against PyTorch DDP (gloo, CPU, Debian's
# python3-torch, installed here and only here) on this machine, same
# models, data, per-worker batch (64), optimizer (SGD, lr 0.05, momentum
# 0.9), iterations and threads (one per trainer), 2 workers:
#   mlp 5 epochs, lenet5 1 epoch, mlp-wide 100 iterations.
# hetps runs the default local cluster (tools/run-cluster.sh: 1 schedd,
# 2 psd, 2 workerd on loopback), the three jobs one after another. Each
# side's time is its training loop, both from when the initial parameters
# are in place (DDP: after its constructor synced them and a barrier, to
# the last all-reduce and a barrier; hetps: the slowest worker's compute +
# push + pull wait after it holds the initial parameters, to the final
# parameters).
# Each model runs once per seed on each side (different initial weights
# and data order; one seed's final accuracy varies by about 1 pp between
# seeds, so accuracy is compared as the mean over seeds). Prints, per
# model, the mean samples/s of each, the ratio (hetps / DDP: above 1,
# hetps is faster) and each one's mean final test accuracy (10000 test
# images) with its range over the seeds.
#
# usage: bench/peer.sh [--models "mlp lenet5 mlp-wide"] [--seeds "1 2 3"]
set -euo pipefail
cd "$(dirname "$0")/.."

models="mlp lenet5 mlp-wide"
seeds="1 2 3"
while [ $# -gt 0 ]; do
  case "$1" in
    --models) models=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "peer: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

# shellcheck source=bench/torch-env.sh
source bench/torch-env.sh

out=$(mktemp -d /tmp/hetps-peer.XXXXXX)
trap 'rm -rf "$out"' EXIT
jobs=()
for m in $models; do
  [ -r "bench/jobs/$m.yaml" ] || { echo "peer: no job spec bench/jobs/$m.yaml" >&2; exit 2; }
  for sd in $seeds; do
    sed -E "s/^seed:.*/seed: $sd/; s/^name: .*/name: peer-$m-s$sd/" "bench/jobs/$m.yaml" \
      >"$out/$m-s$sd.yaml"
    jobs+=(--job "$out/$m-s$sd.yaml")
  done
done

echo "peer: hetps cluster, ${models// /, }, seeds ${seeds// /, } ..."
bash tools/run-cluster.sh "${jobs[@]}" --refresh 1 --out "$out/cluster" >"$out/hetps.log" 2>&1 || {
  echo "peer: the hetps cluster failed; its output:" >&2
  tail -30 "$out/hetps.log" >&2
  exit 1
}
grep '^run-cluster: job ' "$out/hetps.log" >"$out/hetps.txt"

: >"$out/ddp.txt"
for m in $models; do
  spec="bench/jobs/$m.yaml"
  span=$(sed -nE 's/^(epochs|iterations):[[:space:]]*([0-9]+).*/--\1 \2/p' "$spec")
  for sd in $seeds; do
    echo "peer: PyTorch DDP, $m ($span, seed $sd) ..."
    # shellcheck disable=SC2086
    "$py" bench/ddp_fashion.py --model "$m" $span --workers 2 --batch 64 --seed "$sd" \
      --port $((29500 + RANDOM % 1000)) >>"$out/ddp.txt"
  done
done

python3 - "$out/hetps.txt" "$out/ddp.txt" $models <<'PY'
import json, re, statistics, sys
hetps_path, ddp_path, models = sys.argv[1], sys.argv[2], sys.argv[3:]
hetps, ddp = {}, {}
for line in open(hetps_path):
    m = re.search(r"job \d+/\d+ peer-(\S+)-s(\d+) (\S+) elapsed_s (\S+) train_s (\S+) "
                  r"samples_per_s (\S+) accuracy (\S+)", line)
    if m:
        hetps.setdefault(m.group(1), []).append(dict(
            state=m.group(3), train=float(m.group(5)), sps=float(m.group(6)),
            acc=float(m.group(7))))
for line in open(ddp_path):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    ddp.setdefault(r["model"], []).append(r)

def rng(xs):
    return f"{100 * min(xs):.2f}-{100 * max(xs):.2f}"

print(f"{'model':<9} {'runs':>4} {'hetps samples/s':>15} {'DDP samples/s':>13} {'ratio':>6} "
      f"{'hetps acc (range)':>22} {'DDP acc (range)':>22} {'diff pp':>8}")
ok = True
for m in models:
    h, d = hetps.get(m, []), ddp.get(m, [])
    if not h or not d or any(x["state"] != "succeeded" for x in h):
        print(f"{m:<9} missing or failed: hetps {h} ddp {d}")
        ok = False
        continue
    hs = statistics.mean(x["sps"] for x in h)
    ds = statistics.mean(x["samples_per_s"] for x in d)
    ha = [x["acc"] for x in h]
    da = [x["test_accuracy"] for x in d]
    print(f"{m:<9} {len(h):>4} {hs:15.0f} {ds:13.0f} {hs / ds:6.2f} "
          f"{100 * statistics.mean(ha):8.2f}% ({rng(ha)}) {100 * statistics.mean(da):8.2f}% "
          f"({rng(da)}) {100 * (statistics.mean(ha) - statistics.mean(da)):+8.2f}")
torch = next(iter(ddp.values()), [{}])[0].get("torch", "?")
print(f"# PyTorch {torch} DDP (gloo, 2 processes, 1 thread each) vs hetps (2 psd, 2 workerd), "
      f"loopback, this machine; means over seeds")
sys.exit(0 if ok else 1)
PY
