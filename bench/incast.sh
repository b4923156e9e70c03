#!/usr/bin/env bash
# Incast benchmark on the network testbed: N workers push a gradient to one
# psd shard server and pull the parameters back, per iteration, over ltp,
# kernel TCP with cubic, and kernel TCP with bbr (docs/ltp.md has results).
#
#   bench/incast.sh [options] CASE...
#     CASE = MODEL_MB/RTT_MS/LOSS_PCT, e.g. 21/20/1
#   options (environment):
#     WORKERS=8 RATE=100mbit ITERATIONS=3 (measured, after 1 warm-up)
#     TRANSPORTS="ltp tcp:cubic tcp:bbr" SLACK_MS=30 OUT=/tmp/hps-incast
#     UDP_CEILING=1 also measures plain UDP goodput worker 1 -> psd per case
#     TRACE=true: each worker logs its controller towards psd every 50 ms
#     EXTRA="--ack_every=1 --room=0": more incast_bench flags (A/B runs)
#
# Prints, per case and transport, the median batch synchronization time
# (the last worker's pull minus the first worker's push start, per
# iteration) beside the ideal (bytes over the link rate), the steady-state
# seconds per iteration (round to round: a worker whose pull ended early
# pushes while the others still pull), and appends a
# row to $OUT/results.md. Needs root; builds what it runs (-c opt).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TB="$ROOT/deploy/testbed/testbed.sh"
WORKERS="${WORKERS:-8}"
RATE="${RATE:-100mbit}"
ITERATIONS="${ITERATIONS:-3}"
TRANSPORTS="${TRANSPORTS:-ltp tcp:cubic tcp:bbr}"
SLACK_MS="${SLACK_MS:-30}"
OUT="${OUT:-/tmp/hps-incast}"
PORT=7000

[ "$#" -ge 1 ] || { sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
mkdir -p "$OUT"
(cd "$ROOT" && bazel build -c opt //bench:incast_bench //tools:nfqdelay >/dev/null 2>&1) ||
  { echo "incast: build failed (bazel build -c opt //bench:incast_bench //tools:nfqdelay)" >&2; exit 1; }
BIN="$ROOT/bazel-bin/bench/incast_bench"

cleanup() { "$TB" down >/dev/null 2>&1 || true; }
trap cleanup EXIT INT TERM
"$TB" up "$WORKERS"

addr() { echo "$("$TB" ip "$1"):$PORT"; }
worker_list() {
  local l=""
  for i in $(seq 1 "$WORKERS"); do l="$l${l:+,}$(addr "$i")"; done
  echo "$l"
}

# One run: transport spec (ltp | reliable | tcp:CC), model MB -> $log
run_one() {
  local spec=$1 mb=$2 log=$3
  local transport=${spec%%:*} cc=""
  [ "$transport" != "$spec" ] && cc=${spec#*:}
  local common=(--transport="$transport" --model_mb="$mb" --iterations=$((ITERATIONS + 1))
    --ltp_slack_ms="$SLACK_MS" --trace="${TRACE:-false}" ${EXTRA:-})
  [ -n "$cc" ] && common+=(--tcp_cc="$cc")
  local pids=()
  : >"$log"
  for i in $(seq 1 "$WORKERS"); do
    "$TB" exec "$i" "$BIN" --role=worker --listen="$(addr "$i")" --server="$(addr 0)" \
      "${common[@]}" >>"$log" 2>>"$log.err" &
    pids+=($!)
  done
  sleep 0.5
  "$TB" exec 0 "$BIN" --role=server --listen="$(addr 0)" --workers="$(worker_list)" \
    "${common[@]}" >>"$log" 2>>"$log.err" &
  pids+=($!)
  local rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  return $rc
}

udp_ceiling() {
  local log=$1
  : >"$log"
  "$TB" exec 0 "$BIN" --role=udp_sink --listen="$(addr 0)" >>"$log" 2>&1 &
  local sink=$!
  sleep 0.3
  "$TB" exec 1 "$BIN" --role=udp_blast --server="$(addr 0)" --seconds=5 >>"$log" 2>&1
  wait "$sink"
}

summarize() {
  python3 - "$@" <<'PY'
import json, statistics, sys
log, mb, rtt, loss, spec, workers, rate_mbit = sys.argv[1:8]
workers, mb, rate = int(workers), float(mb), float(rate_mbit) * 1e6
rows = []
for l in open(log):
    try:
        rows.append(json.loads(l))
    except ValueError:
        pass  # not a JSON line (a daemon's message)
it = {}
cc = set()
server = {}
trace = None
for r in rows:
    if r.get("role") == "server":
        server = r
    if r.get("role") == "trace":
        trace = r
    if "tcp_congestion" in r:
        cc.add(r["tcp_congestion"])
    if r.get("role") == "worker" and "iteration" in r:
        it.setdefault(r["iteration"], []).append(r)

def union(intervals):
    """Merged [start, end) intervals, sorted."""
    out = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def ingress_bytes(spans):
    """psd's received bytes inside spans, from the 100 ms trace (linear between samples)."""
    if not trace or len(trace["t"]) < 2:
        return float("nan")
    t, b = trace["t"], trace["rx_bytes"]

    def at(x):
        if x <= t[0]:
            return b[0]
        for k in range(1, len(t)):
            if x <= t[k]:
                return b[k - 1] + (b[k] - b[k - 1]) * (x - t[k - 1]) / (t[k] - t[k - 1])
        return b[-1]

    return sum(at(e) - at(s) for s, e in spans)


sync, push, delivered, busy, ingress, pull = [], [], [], [], [], []
for i, rs in sorted(it.items()):
    if i == 0 or len(rs) != workers:
        continue  # warm-up (connections, slow start, the first LT)
    sync.append(max(r["pull_done"] for r in rs) - min(r["push_start"] for r in rs))
    push.append(max(r["push_done"] for r in rs) - min(r["push_start"] for r in rs))
    # The pull (broadcast) phase: psd sends the parameters once the last
    # push is in, until the last worker has them.
    pull.append(max(r["pull_done"] for r in rs) - max(r["push_done"] for r in rs))
    # Pushes start when each worker's pull ends, so the span from the first
    # push to the last can hold gaps in which no worker has anything to
    # push: `busy` is the time at least one push is in flight.
    spans = union([(r["push_start"], r["push_done"]) for r in rs])
    busy.append(sum(e - s for s, e in spans))
    ingress.append(ingress_bytes(spans) * 8 / busy[-1] / 1e6)
    # Gradient bytes that arrived (an LTP push closed early delivers less).
    delivered.append(sum(r["push_bytes"] * r["delivered_packets"] / r["packets"] for r in rs))
# Steady-state seconds per iteration: from the warm-up's last pull to the
# last pull of the last iteration, over the iterations measured. Workers
# whose pull ended early start their next push early, while the others
# still pull (opposite link directions), so this can be below `sync`.
done = {i: max(r["pull_done"] for r in rs) for i, rs in it.items() if len(rs) == workers}
measured = sorted(i for i in done if i > 0)
period = ((done[measured[-1]] - done[0]) / len(measured)
          if measured and 0 in done else float("nan"))
ideal = 2 * workers * mb * 1e6 * 8 / rate
med = statistics.median(sync) if sync else float("nan")
pmed = statistics.median(push) if push else float("nan")
goodput = statistics.median(d * 8 / p / 1e6 for d, p in zip(delivered, push)) if push else float("nan")
bmed = statistics.median(busy) if busy else float("nan")
bgood = statistics.median(d * 8 / b / 1e6 for d, b in zip(delivered, busy)) if busy else float("nan")
imed = statistics.median(ingress) if ingress else float("nan")
lmed = statistics.median(pull) if pull else float("nan")
lgood = workers * mb * 1e6 * 8 / lmed / 1e6 if pull else float("nan")
frac = statistics.median(d / (workers * mb * 1e6) for d in delivered) if push else float("nan")
name = spec + ("(" + ",".join(sorted(cc)) + ")" if cc else "")
print(f"incast: {mb:g} MB rtt {rtt} ms loss {loss}% {name}: sync median {med:.2f} s "
      f"(runs {[round(s, 2) for s in sync]}), push {pmed:.2f} s, {frac:.1%} delivered = "
      f"{goodput:.1f} Mbit/s aggregate goodput; pushing {bmed:.2f} s of it: {bgood:.1f} Mbit/s goodput, "
      f"psd ingress {imed:.1f} Mbit/s; pull {lmed:.2f} s = {lgood:.1f} Mbit/s; ideal {ideal:.2f} s; {period:.2f} s per iteration; server {server}")
print(f"| {mb:g} | {rtt} | {loss} | {name} | {med:.2f} | {med / ideal:.2f} | {period:.2f} | {pmed:.2f} | "
      f"{frac:.1%} | {goodput:.1f} | {bmed:.2f} | {bgood:.1f} | {imed:.1f} | {lmed:.2f} | {lgood:.1f} | {ideal:.2f} | {server.get('retransmissions', 0)} |",
      file=open(sys.argv[8], "a"))
PY
}

rate_mbit=$(echo "$RATE" | sed -n 's/^\([0-9.]*\)mbit$/\1/p')
[ -n "$rate_mbit" ] || { echo "incast: RATE must be in mbit, got $RATE" >&2; exit 2; }
[ -f "$OUT/results.md" ] || echo "| MB | RTT ms | loss % | transport | sync s (median) | x ideal | s/iteration | push s | delivered | push goodput Mbit/s | busy s | busy goodput Mbit/s | psd ingress while pushing Mbit/s | pull s | pull goodput Mbit/s | ideal s | psd retransmissions |
|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|" >"$OUT/results.md"
for case in "$@"; do
  IFS=/ read -r mb rtt loss <<<"$case"
  "$TB" shape "$RATE" "$rtt" "$loss" >/dev/null
  "$TB" check
  if [ "${UDP_CEILING:-0}" = 1 ]; then
    udp_ceiling "$OUT/udp-$rtt-$loss.log"
    echo "incast: plain UDP 1 -> 0: $(grep udp_sink "$OUT/udp-$rtt-$loss.log")"
  fi
  for spec in $TRANSPORTS; do
    log="$OUT/$mb-$rtt-$loss-${spec/:/-}.log"
    start=$(date +%s)
    if ! run_one "$spec" "$mb" "$log"; then
      echo "incast: $case $spec FAILED (see $log.err)" >&2
      continue
    fi
    summarize "$log" "$mb" "$rtt" "$loss" "$spec" "$WORKERS" "$rate_mbit" "$OUT/results.md"
    echo "incast: ($(($(date +%s) - start)) s)"
  done
done
