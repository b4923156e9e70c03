#!/usr/bin/env bash
# The main job: builds hetps (optimized), starts a local cluster on loopback
# (1 schedd, 2 psd, 2 workerd; --workers N for more), submits a training job (default: mlp on
# Fashion-MNIST, deploy/jobs/mlp.yaml) with psctl, and shows its progress
# until it ends; then stops the cluster. Exit status 0 when every job
# succeeded. Several --job flags, or --repeat, run jobs one after another
# on the same cluster; each ends with a line
#   run-cluster: job K/N NAME STATE elapsed_s E train_s T samples_per_s S accuracy A compute_s C
# (E: schedd's running time; T: the slowest worker's training loop, its
# compute, push and pull-wait time from when it holds the initial
# parameters, as a DDP loop starts once its constructor synced them; S:
# samples over T; C: the workers' mean compute time). Installs what it needs (Debian packages, idempotent). Stops only
# the daemons it started, by PID (SIGTERM: they drain and leave the cluster).
# The control plane runs with mTLS: a development CA and certificates are
# made in OUT/certs (tools/dev-certs.sh), and psctl's settings written to
# OUT/psctl.yaml (export HETPS_PSCTL_CONFIG=OUT/psctl.yaml to use it).
#
# usage: tools/run-cluster.sh [--job FILE]... [--repeat N] [--keep]
#                             [--refresh SECONDS] [--port BASE] [--out DIR]
#                             [--trace DIR] [--workers N] [--worker-flag NODE=FLAG]...
#                             [--bin DIR] [--no-pin] [--between CMD]
#   --job       job spec to submit (default deploy/jobs/mlp.yaml); repeatable
#   --repeat    submit the job list N times (default 1)
#   --keep      keep the cluster running after the job, until Ctrl-C
#   --refresh   seconds between progress updates (default 2; a job's end is
#               seen within a second either way)
#   --port      schedd's control port; metrics ports follow (default 7070)
#   --out       logs (default out/cluster)
#   --trace     write round traces of psd and workerd to DIR (docs/tracing.md)
#   --workers   workerd daemons (default 2)
#   --worker-flag  one more flag for one workerd, e.g.
#               worker-3=--compute_slowdown=2 (repeatable)
#   --bin       run prebuilt schedd, psd, workerd and psctl from DIR
#               (tools/device-bundle.sh's .device/bin) instead of installing
#               packages and building: for a machine without Bazel or apt
#   --no-pin    let the kernel place every daemon; by default, when this
#               machine has a core per trainer, workerd K runs on the K-th
#               (cpu_affinity) and schedd and psd on the cores left, or,
#               with none left, psd K beside workerd K
#   --between   run CMD (bash -c) before each job, while the cluster idles;
#               a failing CMD stops the run (exit 1). bench/ten-jobs.sh runs
#               its baseline there, so both see the machine at the same time
set -euo pipefail
cd "$(dirname "$0")/.."

jobs=()
repeat=1
keep=0
refresh=2
base_port=7070
out=out/cluster
trace=()
workers=2
worker_flags=()
prebuilt=""
pin=1
between=""
while [ $# -gt 0 ]; do
  case "$1" in
    --job) jobs+=("$2"); shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    --refresh) refresh=$2; shift 2 ;;
    --port) base_port=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --trace) mkdir -p "$2"; trace=(--trace_dir="$(cd "$2" && pwd)"); shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --worker-flag) worker_flags+=("$2"); shift 2 ;;
    --bin) prebuilt=$2; shift 2 ;;
    --no-pin) pin=0; shift ;;
    --between) between=$2; shift 2 ;;
    -h|--help) sed -n '2,42p' "$0"; exit 0 ;;
    *) echo "run-cluster: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ ${#jobs[@]} -gt 0 ] || jobs=(deploy/jobs/mlp.yaml)
case "$refresh" in ''|*[!0-9.]*|.*|*.*.*) refresh=x ;; esac
awk -v r="$refresh" 'BEGIN { exit !(r + 0 >= 0.1) }' ||
  { echo "run-cluster: --refresh needs seconds (at least 0.1), e.g. 2 or 0.5" >&2; exit 2; }
refresh_s=${refresh%.*}  # whole seconds between progress updates
poll=1
[ "$refresh_s" -ge 1 ] || poll=$refresh
case "$repeat" in ''|*[!0-9]*|0) echo "run-cluster: --repeat needs a positive number" >&2; exit 2 ;; esac
case "$workers" in ''|*[!0-9]*|0) echo "run-cluster: --workers needs a positive number" >&2; exit 2 ;; esac
for f in "${worker_flags[@]}"; do
  case "$f" in worker-*=--*) ;; *) echo "run-cluster: --worker-flag needs NODE=--flag, got $f" >&2; exit 2 ;; esac
done
for j in "${jobs[@]}"; do
  [ -r "$j" ] || { echo "run-cluster: cannot read job spec $j" >&2; exit 2; }
done

if [ -n "$prebuilt" ]; then
  for d in schedd psd workerd psctl; do
    [ -x "$prebuilt/$d" ] || { echo "run-cluster: no executable $prebuilt/$d" >&2; exit 2; }
  done
  prebuilt=$(cd "$prebuilt" && pwd)
  binary() { echo "$prebuilt/$1"; }
else
  bash tools/bootstrap.sh
  echo "run-cluster: building (bazel -c opt) ..."
  bazel build --config=opt //daemons/schedd //daemons/psd //daemons/workerd //clients/psctl
  bin=$(bazel info --config=opt bazel-bin 2>/dev/null)
  binary() { case "$1" in psctl) echo "$bin/clients/psctl/psctl" ;; *) echo "$bin/daemons/$1/$1" ;; esac; }
fi
mkdir -p "$out"
rm -f "$out"/*.ready
certs="$out/certs"
worker_ids=()
for w in $(seq 0 $((workers - 1))); do worker_ids+=("worker-$w"); done
bash tools/dev-certs.sh "$certs" --nodes "schedd psd-0 psd-1 ${worker_ids[*]}" >/dev/null
certs=$(cd "$certs" && pwd)
cat >"$out/psctl.yaml" <<YAML
endpoint: 127.0.0.1:$base_port
tls_ca: $certs/ca.pem
tls_cert: $certs/admin.pem
tls_key: $certs/admin.key
YAML

schedd_addr="127.0.0.1:$base_port"
pids=()
names=()

keep_pid=""

cleanup() {
  trap - EXIT INT TERM
  [ -n "$keep_pid" ] && kill "$keep_pid" 2>/dev/null
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
  "$(binary "$daemon")" --node_id="$node" --ready_file="$out/$node.ready" \
    --tls_ca="$certs/ca.pem" --tls_cert="$certs/$node.pem" --tls_key="$certs/$node.key" \
    --admin_tokens_file="$certs/admin-tokens" "$@" \
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

# Loopback's MTU is 64 KiB: 32 KiB datagrams (two per 16384-float chunk)
# cost a 23rd of the per-datagram work of 1400-byte ones, with no IP
# fragmentation. On a real network data_packet_bytes stays within the
# path MTU (1400 by default).
data_flags=(--data_packet_bytes=32848)

# A trainer that shares its core with the other trainer, or is moved
# between cores, loses compute time and cache to it; a core each avoids
# both (docs/jobs.md).
cpus=()
for r in $(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status | tr ',' ' '); do
  for c in $(seq "${r%-*}" "${r#*-}"); do cpus+=("$c"); done
done
# With cores to spare, schedd and the psds share those; without, psd K
# runs beside worker K, so each core carries the same load where floating
# psds can crowd one trainer and leave the other idle.
worker_cpu=()
rest_flags=()
psd_cpu=()
if [ "$pin" = 1 ] && [ "${#cpus[@]}" -ge "$workers" ]; then
  worker_cpu=("${cpus[@]:0:$workers}")
  rest=("${cpus[@]:$workers}")
  if [ ${#rest[@]} -gt 0 ]; then
    rest_flags=(--cpu_affinity="$(IFS=,; echo "${rest[*]}")")
    echo "run-cluster: trainers pinned to CPUs ${worker_cpu[*]}; schedd and psd to ${rest[*]} (--no-pin: not)"
  else
    psd_cpu=("${worker_cpu[0]}" "${worker_cpu[$((1 % workers))]}")
    echo "run-cluster: trainers pinned to CPUs ${worker_cpu[*]}, psd-0 and psd-1 to ${psd_cpu[*]} (--no-pin: not)"
  fi
fi

echo "run-cluster: starting schedd on $schedd_addr"
# A new cluster: the previous run's schedd state (its jobs) is not this
# cluster's; checkpoints stay (psd's checkpoint_keep_jobs bounds them).
rm -rf "$out/schedd-state"
start schedd schedd --listen="$schedd_addr" --metrics_listen="127.0.0.1:$((base_port + 2400))" \
  --state_dir="$out/schedd-state" "${rest_flags[@]}"
i=0
for node in psd-0 psd-1; do
  i=$((i + 1))
  # Jobs that set checkpoint_every_rounds checkpoint here.
  start psd "$node" --scheduler="$schedd_addr" --listen=127.0.0.1:0 \
    --metrics_listen="127.0.0.1:$((base_port + 2400 + i))" "${data_flags[@]}" "${trace[@]}" \
    --checkpoint_dir="$out/$node-checkpoints" "${rest_flags[@]}" \
    ${psd_cpu[$((i - 1))]:+--cpu_affinity=${psd_cpu[$((i - 1))]}}
done
# The trainers share this machine's cores: one BLAS thread each.
for node in "${worker_ids[@]}"; do
  i=$((i + 1))
  extra=()
  k=$((i - 3))
  [ ${#worker_cpu[@]} -gt 0 ] && extra+=(--cpu_affinity="${worker_cpu[$k]}")
  for f in "${worker_flags[@]}"; do
    [ "${f%%=*}" = "$node" ] && extra+=("${f#*=}")
  done
  start workerd "$node" --scheduler="$schedd_addr" --listen=127.0.0.1:0 \
    --metrics_listen="127.0.0.1:$((base_port + 2400 + i))" --cpu_threads=1 "${data_flags[@]}" \
    "${trace[@]}" --model_dir="$out/$node-models" "${extra[@]}"
done

psctl() { "$(binary psctl)" --config="$out/psctl.yaml" "$@"; }
echo "run-cluster: psctl settings in $out/psctl.yaml (export HETPS_PSCTL_CONFIG=$(cd "$out" && pwd)/psctl.yaml)"
echo "run-cluster: waiting for $((3 + workers)) live nodes ..."
for _ in $(seq 1 100); do
  n=$(psctl nodes -o json 2>/dev/null | grep -o '"state":"alive"' | wc -l || true)
  [ "$n" -ge $((3 + workers)) ] && break
  sleep 0.1
done

# Submits one job spec and follows it to its end; sets $state and $id.
run_job() {  # run_job SPEC K N
  local spec=$1 k=$2 n=$3 json it acc sps loss
  echo "run-cluster: submitting $spec ($k/$n)"
  id=$(psctl job submit "$spec" | sed -nE 's/^submitted ([^ ]+).*/\1/p')
  state=""
  local shown=$SECONDS
  while true; do
    # The end is noticed within a second; progress shows every --refresh.
    sleep "$poll"
    json=$(psctl job status "$id" -o json 2>/dev/null || true)
    state=$(sed -nE 's/.*"state":"([a-z]+)".*/\1/p' <<<"${json%%\"nodes\"*}")
    case "$state" in succeeded|failed|cancelled) break ;; esac
    [ $((SECONDS - shown)) -ge "$refresh_s" ] || continue
    shown=$SECONDS
    if [ -t 1 ]; then
      clear
      echo "hetps local cluster: schedd $schedd_addr   logs: $out/   (Ctrl-C stops)"
      echo
      psctl job status "$id" || true
    else
      # One progress line per update when not on a terminal (CI, logs).
      it=$(sed -nE 's/.*"iteration":([0-9]+),"total_iterations":([0-9]+).*/\1\/\2/p' <<<"$json")
      acc=$(sed -nE 's/.*"test_accuracy":([-0-9.e]+),.*/\1/p' <<<"${json%%\"nodes\"*}")
      sps=$(sed -nE 's/.*"samples_per_second":([-0-9.e]+),.*/\1/p' <<<"${json%%\"nodes\"*}")
      loss=$(sed -nE 's/.*"loss":([-0-9.e]+),.*/\1/p' <<<"${json%%\"nodes\"*}")
      printf 'run-cluster: %-9s iteration %-11s loss %-7.4f test accuracy %-7s samples/s %.0f\n' \
        "$state" "$it" "${loss:-0}" "$(awk -v a="${acc:--1}" 'BEGIN{if (a<0) print "-"; else printf "%.2f%%", 100*a}')" \
        "${sps:-0}"
    fi
  done
  echo
  psctl job status "$id" || true
  json=$(psctl job status "$id" -o json 2>/dev/null || true)
  python3 - "$k" "$n" "$json" "$spec" <<'PY'
import json, re, sys
k, n, text, spec = sys.argv[1:5]
try:
    j = json.loads(text)
except ValueError:
    print(f"run-cluster: job {k}/{n} status unreadable")
    sys.exit(0)
job = j
e = job.get("elapsed_s") or 0
it = job.get("total_iterations") or 0
m = re.search(r"^batch_size:\s*(\d+)", open(spec).read(), re.M)
batch = int(m.group(1)) if m else 64  # the job spec default
ws = [x for x in j.get("nodes", []) if x.get("role") == "worker"]
train = max((x.get("compute_seconds", 0) + x.get("push_seconds", 0) +
             x.get("pull_wait_seconds", 0) for x in ws), default=0)
sps = it * batch * len(ws) / train if train else 0
compute = sum(x.get("compute_seconds", 0) for x in ws) / len(ws) if ws else 0
print(f"run-cluster: job {k}/{n} {job.get('name', '?')} {job.get('state', '?')} "
      f"elapsed_s {e:.2f} train_s {train:.2f} samples_per_s {sps:.0f} "
      f"accuracy {job.get('test_accuracy', -1):.4f} compute_s {compute:.2f}")
PY
}

all_ok=1
state=none  # the last job's state
total=$(( ${#jobs[@]} * repeat ))
k=0
for _ in $(seq 1 "$repeat"); do
  for spec in "${jobs[@]}"; do
    k=$((k + 1))
    if [ -n "$between" ] && ! bash -c "$between"; then
      echo "run-cluster: --between command failed before job $k/$total: $between" >&2
      all_ok=0
      break 2
    fi
    run_job "$spec" "$k" "$total"
    [ "$state" = succeeded ] || all_ok=0
    # Rank 0 (worker-0) saved the model; psctl job export fetches the same.
    if [ "$state" = succeeded ] && [ -f "$out/worker-0-models/$id.safetensors" ]; then
      echo "run-cluster: model in $out/worker-0-models/$id.safetensors" \
        "(hetps-train --eval FILE; init_from: FILE)"
    fi
  done
done
if [ "$keep" -eq 1 ]; then
  echo "run-cluster: job $state; cluster kept running (--keep) until Ctrl-C"
  # In the background, so a SIGTERM (not only a terminal's Ctrl-C) stops
  # the cluster now; the sleep goes with it.
  sleep infinity &
  keep_pid=$!
  wait "$keep_pid"
fi
[ "$all_ok" -eq 1 ]
