#!/usr/bin/env bash
# Peer benchmark: hetps against PyTorch DDP (gloo, CPU, Debian's
# python3-torch, installed here and only here) on this machine, same
# models, data, per-worker batch (64), optimizer (SGD, lr 0.05, momentum
# 0.9), iterations and threads (one per trainer), 2 workers:
#   mlp 5 epochs, lenet5 1 epoch, mlp-wide 100 iterations.
# hetps runs the default local cluster (tools/run-cluster.sh: 1 schedd,
# 2 psd, 2 workerd on loopback), the three jobs one after another. Each
# side's time is its training loop (DDP: first iteration to the last
# all-reduce; hetps: the slowest worker's compute + push + pull wait).
# Prints samples/s of each, the ratio (hetps / DDP: above 1, hetps is
# faster) and each one's final test accuracy (10000 test images).
#
# usage: bench/peer.sh [--models "mlp lenet5 mlp-wide"]
set -euo pipefail
cd "$(dirname "$0")/.."

models="mlp lenet5 mlp-wide"
while [ $# -gt 0 ]; do
  case "$1" in
    --models) models=$2; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "peer: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

# Debian's interpreter: the one python3-torch installs into (a python3
# earlier on PATH, e.g. pyenv's, would not see it).
py=/usr/bin/python3
if ! "$py" -c 'import torch' 2>/dev/null; then
  echo "peer: installing python3-torch (Debian) for the DDP baseline ..."
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd=sudo
  $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-torch >/dev/null
fi

out=$(mktemp -d /tmp/hetps-peer.XXXXXX)
trap 'rm -rf "$out"' EXIT
jobs=()
for m in $models; do
  [ -r "bench/jobs/$m.yaml" ] || { echo "peer: no job spec bench/jobs/$m.yaml" >&2; exit 2; }
  jobs+=(--job "bench/jobs/$m.yaml")
done

echo "peer: hetps cluster, ${models// /, } ..."
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
  echo "peer: PyTorch DDP, $m ($span) ..."
  # shellcheck disable=SC2086
  "$py" bench/ddp_fashion.py --model "$m" $span --workers 2 --batch 64 \
    --port $((29500 + RANDOM % 1000)) >>"$out/ddp.txt"
done

python3 - "$out/hetps.txt" "$out/ddp.txt" $models <<'PY'
import json, re, sys
hetps_path, ddp_path, models = sys.argv[1], sys.argv[2], sys.argv[3:]
hetps = {}
for line in open(hetps_path):
    m = re.search(r"job \d+/\d+ peer-(\S+) (\S+) elapsed_s (\S+) train_s (\S+) "
                  r"samples_per_s (\S+) accuracy (\S+)", line)
    if m:
        hetps[m.group(1)] = dict(state=m.group(2), train=float(m.group(4)),
                                 sps=float(m.group(5)), acc=float(m.group(6)))
ddp = {}
for line in open(ddp_path):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    ddp[r["model"]] = r
print(f"{'model':<10} {'hetps samples/s':>16} {'DDP samples/s':>14} {'ratio':>6} "
      f"{'hetps acc':>10} {'DDP acc':>8} {'diff pp':>8} {'hetps s':>8} {'DDP s':>7}")
for m in models:
    h, d = hetps.get(m), ddp.get(m)
    if not h or not d or h["state"] != "succeeded":
        print(f"{m:<10} missing: hetps {h} ddp {d}")
        continue
    print(f"{m:<10} {h['sps']:16.0f} {d['samples_per_s']:14.0f} {h['sps'] / d['samples_per_s']:6.2f} "
          f"{100 * h['acc']:9.2f}% {100 * d['test_accuracy']:7.2f}% "
          f"{100 * (h['acc'] - d['test_accuracy']):+8.2f} {h['train']:8.2f} {d['seconds']:7.2f}")
torch = next(iter(ddp.values()), {}).get("torch", "?")
print(f"# PyTorch {torch} DDP (gloo, 2 processes, 1 thread each) vs hetps (2 psd, 2 workerd), "
      f"loopback, this machine")
PY
