#!/usr/bin/env bash
# Loopback round time: one psd shard server (bench/incast_bench, the real
# ps::ShardServer) and 2 workers on 127.0.0.1, each worker pushing a
# gradient of the model's size and waiting for the parameters, no compute.
# For every model size and transport it prints the median round (first
# worker's push start to last worker's pull done), its push and pull parts,
# and the ratio to the tcp transport of the same size (kernel TCP: the
# baseline, run in the same invocation).
#
# usage: bench/rounds.sh [--sizes "1 10 100"] [--transports "reliable ltp tcp"]
#                        [--iterations N] [--workers N] [-- extra incast_bench flags]
#   Iterations default to 200 at 1 MB and fewer for larger models (about
#   2 GB per run); the first 10% are warm-up and not counted.
set -euo pipefail
cd "$(dirname "$0")/.."

sizes="1 10 100"
transports="reliable ltp tcp"
iterations=""
workers=2
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --sizes) sizes=$2; shift 2 ;;
    --transports) transports=$2; shift 2 ;;
    --iterations) iterations=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "rounds: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

bazel build --config=opt //bench:incast_bench >/dev/null 2>&1
BIN=$(bazel info --config=opt bazel-bin 2>/dev/null)/bench/incast_bench
out=$(mktemp -d /tmp/hetps-rounds.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$out"
}
trap cleanup EXIT

port=$((20000 + RANDOM % 20000))
run_one() {  # size transport log
  local mb=$1 tr=$2 log=$3 its=$iterations
  [ -n "$its" ] || its=$(python3 -c "print(max(20, min(200, int(2000 / $mb))))")
  local list="" i
  pids=()
  for i in $(seq 1 "$workers"); do
    list+="${list:+,}127.0.0.1:$((port + i))"
    "$BIN" --role=worker --offload=1 --listen="127.0.0.1:$((port + i))" --server="127.0.0.1:$port" \
      --transport="$tr" --model_mb="$mb" --iterations="$its" "${extra[@]}" >>"$log" 2>>"$log.err" &
    pids+=($!)
  done
  "$BIN" --role=server --offload=1 --listen="127.0.0.1:$port" --workers="$list" \
    --transport="$tr" --model_mb="$mb" --iterations="$its" "${extra[@]}" >>"$log" 2>>"$log.err" &
  pids+=($!)
  local rc=0 p
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  pids=()
  port=$((port + workers + 1))
  if [ $rc -ne 0 ]; then
    echo "rounds: $tr at $mb MB failed:" >&2
    tail -5 "$log.err" >&2
  fi
  return $rc
}

echo "# loopback rounds: 1 psd, $workers workers, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores"
printf '%-8s %-9s %10s %9s %9s %9s %8s\n' model transport round_ms push_ms pull_ms Gbit/s vs_tcp
for mb in $sizes; do
  for tr in $transports; do
    log="$out/$mb-$tr.log"
    : >"$log"
    run_one "$mb" "$tr" "$log" || { printf '%-8s %-9s %10s\n' "${mb}MB" "$tr" failed; continue; }
  done
  python3 - "$out" "$mb" "$workers" $transports <<'PY'
import json, statistics, sys
out, mb, workers, transports = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
res = {}
for tr in transports:
    it = {}
    try:
        lines = open(f"{out}/{mb}-{tr}.log").read().splitlines()
    except OSError:
        continue
    for l in lines:
        try:
            r = json.loads(l)
        except ValueError:
            continue
        if r.get("role") == "worker" and "iteration" in r:
            it.setdefault(r["iteration"], []).append(r)
    full = [rs for _, rs in sorted(it.items()) if len(rs) == workers]
    full = full[max(1, len(full) // 10):]
    if not full:
        continue
    rnd = [max(r["pull_done"] for r in rs) - min(r["push_start"] for r in rs) for rs in full]
    push = [max(r["push_done"] for r in rs) - min(r["push_start"] for r in rs) for rs in full]
    pull = [max(r["pull_done"] for r in rs) - max(r["push_done"] for r in rs) for rs in full]
    nbytes = full[0][0]["push_bytes"]
    res[tr] = (statistics.median(rnd), statistics.median(push), statistics.median(pull), nbytes)
for tr in transports:
    if tr not in res:
        continue
    r, p, q, n = res[tr]
    # Every round moves each worker's push in and the parameters out to each.
    gbit = 2 * workers * n * 8 / r / 1e9
    ratio = f"{res['tcp'][0] / r:.2f}" if "tcp" in res else "-"
    print(f"{mb + 'MB':<8} {tr:<9} {r * 1e3:10.2f} {p * 1e3:9.2f} {q * 1e3:9.2f} {gbit:9.2f} {ratio:>8}")
PY
done
echo "# vs_tcp: the tcp round's median over this one's (above 1: faster than kernel TCP)"
