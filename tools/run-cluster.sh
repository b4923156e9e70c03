#!/usr/bin/env bash
# The main job: builds hetps (optimized) and runs a local cluster on loopback
# (1 schedd, 2 psd, 2 workerd), showing it live with psctl until Ctrl-C or
# --duration. Installs what it needs (Debian packages, idempotent). Stops only
# the daemons it started, by PID (SIGTERM: they drain and leave the cluster).
#
# usage: tools/run-cluster.sh [--duration SECONDS] [--refresh SECONDS]
#                             [--port BASE] [--out DIR]
#   --duration  stop after this many seconds (default: run until Ctrl-C)
#   --refresh   seconds between psctl updates (default 2)
#   --port      schedd's control port; metrics ports follow (default 7070)
#   --out       logs and config (default out/cluster)
set -euo pipefail
cd "$(dirname "$0")/.."

duration=0
refresh=2
base_port=7070
out=out/cluster
while [ $# -gt 0 ]; do
  case "$1" in
    --duration) duration=$2; shift 2 ;;
    --refresh) refresh=$2; shift 2 ;;
    --port) base_port=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "run-cluster: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

bash tools/bootstrap.sh
echo "run-cluster: building (bazel -c opt) ..."
bazel build --config=opt //daemons/schedd //daemons/psd //daemons/workerd //clients/psctl
bin=$(bazel info --config=opt bazel-bin 2>/dev/null)
mkdir -p "$out"
rm -f "$out"/*.ready

schedd_addr="127.0.0.1:$base_port"
pids=()
names=()

cleanup() {
  trap - EXIT INT TERM
  if [ ${#pids[@]} -gt 0 ]; then
    echo
    echo "run-cluster: stopping ${#pids[@]} daemons (SIGTERM) ..."
    for i in "${!pids[@]}"; do
      kill -TERM "${pids[$i]}" 2>/dev/null || true
    done
    for i in "${!pids[@]}"; do
      # Bounded wait, then SIGKILL only our own PID.
      for _ in $(seq 1 100); do
        kill -0 "${pids[$i]}" 2>/dev/null || break
        sleep 0.1
      done
      if kill -0 "${pids[$i]}" 2>/dev/null; then
        echo "run-cluster: ${names[$i]} did not stop; SIGKILL" >&2
        kill -KILL "${pids[$i]}" 2>/dev/null || true
      fi
      wait "${pids[$i]}" 2>/dev/null || true
    done
    echo "run-cluster: stopped; logs in $out/"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start() {  # start DAEMON NODE_ID [flags...]
  local daemon=$1 node=$2
  shift 2
  "$bin/daemons/$daemon/$daemon" --node_id="$node" --ready_file="$out/$node.ready" "$@" \
    2>"$out/$node.log" &
  pids+=($!)
  names+=("$node")
  for _ in $(seq 1 200); do
    [ -f "$out/$node.ready" ] && return 0
    if ! kill -0 "$!" 2>/dev/null; then
      echo "run-cluster: $node failed to start:" >&2
      cat "$out/$node.log" >&2
      exit 1
    fi
    sleep 0.05
  done
  echo "run-cluster: $node not ready after 10 s; see $out/$node.log" >&2
  exit 1
}

echo "run-cluster: starting schedd on $schedd_addr"
start schedd schedd --listen="$schedd_addr" --metrics_listen="127.0.0.1:$((base_port + 2400))"
i=0
for node in psd-0 psd-1; do
  i=$((i + 1))
  start psd "$node" --scheduler="$schedd_addr" --listen=127.0.0.1:0 \
    --metrics_listen="127.0.0.1:$((base_port + 2400 + i))"
done
for node in worker-0 worker-1; do
  i=$((i + 1))
  start workerd "$node" --scheduler="$schedd_addr" --listen=127.0.0.1:0 \
    --metrics_listen="127.0.0.1:$((base_port + 2400 + i))"
done

psctl() { "$bin/clients/psctl/psctl" --endpoint="$schedd_addr" "$@"; }
echo "run-cluster: waiting for 5 live nodes ..."
for _ in $(seq 1 100); do
  n=$(psctl nodes -o json 2>/dev/null | grep -o '"state":"alive"' | wc -l || true)
  [ "$n" -ge 5 ] && break
  sleep 0.1
done

start_ts=$(date +%s)
while true; do
  [ -t 1 ] && clear
  echo "hetps local cluster: schedd $schedd_addr   logs: $out/   (Ctrl-C stops)"
  echo
  psctl status || true
  echo
  psctl nodes || true
  now=$(date +%s)
  if [ "$duration" -gt 0 ] && [ $((now - start_ts)) -ge "$duration" ]; then
    echo
    echo "run-cluster: --duration $duration s reached"
    psctl nodes -o json
    break
  fi
  sleep "$refresh"
done
