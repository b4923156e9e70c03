#!/usr/bin/env bash
# Fairness of LTP against kernel TCP on the network testbed (LTP paper
# V-D): worker 1 runs an ltp job and worker 2 a tcp job against two psd
# shard servers in node 0, at the same time, so the two pushes share node
# 0's ingress link and the two pulls its egress.
#
#   bench/fairness.sh [CC...]          CC = cubic | bbr (default: both)
#   environment: RATE=100mbit RTT=20 LOSS=0 MB=5 ITERATIONS=16
#                OUT=/tmp/hps-fair CHALLENGER=ltp
#
# CHALLENGER=bbr runs a tcp-bbr job in place of the ltp one: the reference
# for "as fair as BBR" (the paper's V-D claim is that LTP behaves like BBR).
#
# Prints, per CC, each job's throughput (push + pull bytes per second) over
# the time both ran, their ratio and Jain's index (1 = equal shares, 0.5 =
# one job took everything), and the same jobs run alone for reference.
# Needs root; builds what it runs (-c opt).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TB="$ROOT/deploy/testbed/testbed.sh"
RATE="${RATE:-100mbit}"
RTT="${RTT:-20}"
LOSS="${LOSS:-0}"
MB="${MB:-5}"
ITERATIONS="${ITERATIONS:-16}"
OUT="${OUT:-/tmp/hps-fair}"
CHALLENGER="${CHALLENGER:-ltp}"
case "$CHALLENGER" in
  ltp) CH_FLAGS=(--transport=ltp) ;;
  bbr) CH_FLAGS=(--transport=tcp --tcp_cc=bbr) ;;
  *)
    echo "fairness: CHALLENGER must be ltp or bbr, got $CHALLENGER" >&2
    exit 2
    ;;
esac
CCS=("$@")
[ "${#CCS[@]}" -gt 0 ] || CCS=(cubic bbr)
for cc in "${CCS[@]}"; do
  case "$cc" in cubic | bbr) ;; *)
    echo "fairness: CC must be cubic or bbr, got $cc" >&2
    exit 2
    ;;
  esac
done

mkdir -p "$OUT"
(cd "$ROOT" && bazel build -c opt //bench:incast_bench //tools:nfqdelay >/dev/null 2>&1) ||
  { echo "fairness: build failed (bazel build -c opt //bench:incast_bench //tools:nfqdelay)" >&2; exit 1; }
BIN="$ROOT/bazel-bin/bench/incast_bench"

cleanup() { "$TB" down >/dev/null 2>&1 || true; }
trap cleanup EXIT INT TERM
"$TB" up 2
"$TB" shape "$RATE" "$RTT" "$LOSS" >/dev/null
"$TB" check

# One job: worker node, server port, transport flags... -> appends to $log
job() {
  local node=$1 port=$2 log=$3
  shift 3
  local w s
  w="$("$TB" ip "$node"):7000"
  s="$("$TB" ip 0):$port"
  local common=(--model_mb="$MB" --iterations="$ITERATIONS" "$@")
  "$TB" exec "$node" "$BIN" --role=worker --listen="$w" --server="$s" "${common[@]}" \
    >>"$log" 2>>"$log.err" &
  local wp=$!
  sleep 0.5
  "$TB" exec 0 "$BIN" --role=server --listen="$s" --workers="$w" "${common[@]}" \
    >>"$log" 2>>"$log.err" &
  local sp=$!
  wait "$wp" && wait "$sp"
}

report() {
  python3 - "$MB" "$CHALLENGER" "$@" <<'PY'
import json, sys
mb = float(sys.argv[1])
ch = sys.argv[2]
def rows(log):
    return [json.loads(l) for l in open(log)
            if l.startswith("{") and '"iteration"' in l and '"worker"' in l]
def bytes_in(rs, lo, hi):
    # push (what arrived) + pull per iteration, counted for the part of the
    # iteration inside [lo, hi]
    total = 0.0
    for r in rs:
        a, b = r["push_start"], r["pull_done"]
        inside = max(0.0, min(b, hi) - max(a, lo))
        if b > a:
            sent = mb * 1e6 * (r["delivered_packets"] / r["packets"] + 1)
            total += sent * inside / (b - a)
    return total
cc, ltp_log, tcp_log, ltp_alone, tcp_alone = sys.argv[3:8]
l, t = rows(ltp_log), rows(tcp_log)
if not l or not t:
    sys.exit(f"fairness: no iterations logged ({ltp_log}, {tcp_log})")
lo = max(l[0]["push_start"], t[0]["push_start"])
hi = min(l[-1]["pull_done"], t[-1]["pull_done"])
if hi <= lo:
    sys.exit("fairness: the two jobs did not overlap")
a = bytes_in(l, lo, hi) * 8 / (hi - lo) / 1e6
b = bytes_in(t, lo, hi) * 8 / (hi - lo) / 1e6
jain = (a + b) ** 2 / (2 * (a * a + b * b))
def alone(log):
    rs = rows(log)
    return bytes_in(rs, rs[0]["push_start"], rs[-1]["pull_done"]) * 8 / (
        rs[-1]["pull_done"] - rs[0]["push_start"]) / 1e6
print(f"fairness: {ch} against tcp {cc}: together for {hi - lo:.1f} s: "
      f"{ch} {a:.1f} Mbit/s, {cc} {b:.1f} Mbit/s (push + pull), "
      f"{ch}/{cc} {a / b:.2f}, Jain {jain:.3f}; "
      f"alone: {ch} {alone(ltp_alone):.1f}, {cc} {alone(tcp_alone):.1f} Mbit/s")
PY
}

for cc in "${CCS[@]}"; do
  base="$OUT/$RTT-$LOSS-$CHALLENGER-$cc"
  for f in "$base-ltp" "$base-tcp" "$base-ltp-alone" "$base-tcp-alone"; do : >"$f.log"; done
  job 1 7000 "$base-ltp-alone.log" "${CH_FLAGS[@]}"
  job 2 7001 "$base-tcp-alone.log" --transport=tcp --tcp_cc="$cc"
  job 1 7000 "$base-ltp.log" "${CH_FLAGS[@]}" &
  lp=$!
  job 2 7001 "$base-tcp.log" --transport=tcp --tcp_cc="$cc" &
  tp=$!
  wait "$lp" && wait "$tp" || { echo "fairness: a job failed (see $base-*.log.err)" >&2; exit 1; }
  report "$cc" "$base-ltp.log" "$base-tcp.log" "$base-ltp-alone.log" "$base-tcp-alone.log"
done
