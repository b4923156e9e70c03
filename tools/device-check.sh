#!/usr/bin/env bash
# shellcheck disable=SC2317  # the steps are called by name, run_STEP
# The checks a lent GPU machine is for, in one run (docs/build.md): the
# GPU-tagged tests, trainer compute on the CPU and CUDA backends against
# PyTorch on the same machine, and the default job on a local cluster with
# CUDA trainers against the same job with CPU trainers, then ten default
# jobs on one cluster beside a DDP baseline. The machine has the
# CUDA toolkit and PyTorch but no Bazel or apt, so everything of ours comes
# from the bundle made here first:
#
#   tools/device-bundle.sh --config=opt --with-dataset --pack //daemons/schedd \
#     //daemons/psd //daemons/workerd //clients/psctl //bench:model_bench \
#     //lib/gpu:gpu_selftest_test //lib/train:backend_select_test \
#     //lib/train:cuda_backend_test
#
# then, there, with .device carried:
#
#   bash tools/device-check.sh [--steps LIST] [DIR]
#
# LIST: comma-separated, in the order they run: tests (the GPU-tagged
# tests), ten-jobs, compute (model_bench against PyTorch), cluster (the
# default job and lenet5 with CUDA and CPU trainers); default all four.
# Device time is scarce (minutes a session), so the step that an issue
# waits on comes first. Each step's output goes to DIR (default
# out/device), the summary to stdout; with $OUT set (the device tool), DIR
# is packed into $OUT/device-check.tar.gz after every step, so a run cut
# off at its time limit still brings back the steps it finished. A
# failing step is reported and the rest still run. Exit status: the
# number of failed steps.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
steps=tests,ten-jobs,compute,cluster
if [ "${1:-}" = --steps ]; then
  steps=${2:?device-check: --steps needs a list}
  shift 2
fi
for s in ${steps//,/ }; do
  case "$s" in
    tests|ten-jobs|compute|cluster) ;;
    *) echo "device-check: unknown step $s (tests, ten-jobs, compute, cluster)" >&2; exit 2 ;;
  esac
done
out=${1:-out/device}
rm -rf "$out" && mkdir -p "$out"
if [ -f .device/bundle.tar.xz ]; then
  rm -rf .device/bin .device/lib && tar -C .device -xJf .device/bundle.tar.xz
fi
[ -d .device/bin ] || { echo "device-check: no .device/bin (run tools/device-bundle.sh)" >&2; exit 2; }
# cuBLAS and NCCL may live in the toolkit or in PyTorch's wheels.
libs="$PWD/.device/lib:/usr/local/cuda/lib64"
for d in $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, n, "lib") for p in nvidia.__path__ for n in sorted(os.listdir(p))))' 2>/dev/null); do
  [ -d "$d" ] && libs="$libs:$d"
done
export LD_LIBRARY_PATH="$libs"
failed=0
pack() {  # the results so far, for the device tool to bring back
  [ -z "${OUT:-}" ] || tar -czf "$OUT/device-check.tar.gz" --exclude='*-checkpoints' \
    --exclude='*-models' --exclude='schedd-state' -C "$(dirname "$out")" "$(basename "$out")"
}
step() {  # step NAME COMMAND...: runs it, output to OUT/NAME.log and a summary line
  local name=$1
  shift
  local t0=$SECONDS
  if "$@" >"$out/$name.log" 2>&1; then
    echo "device-check: $name passed ($((SECONDS - t0)) s)"
  else
    echo "device-check: $name FAILED rc=$? ($((SECONDS - t0)) s); last lines:"
    tail -15 "$out/$name.log"
    failed=$((failed + 1))
  fi
  pack
}

job_spec() {  # job_spec MODEL BACKEND: the default job's spec with them, on the bundle's data
  local spec="$out/$1-$2.yaml"
  sed -E "s|^dataset:.*|dataset: $PWD/.device/data|; s|^name:.*|name: $1-$2|; s|^model:.*|model: $1|" \
    deploy/jobs/mlp.yaml >"$spec"
  echo "backend: $2" >>"$spec"
  echo "$spec"
}
run_tests() {
  for t in gpu_selftest_test backend_select_test cuda_backend_test; do
    step "$t" ".device/bin/$t"
    tail -3 "$out/$t.log"
  done
}
run_compute() {
  for b in cpu cuda; do
    step "model_bench-$b" .device/bin/model_bench --backend "$b"
    step "torch-$b" python3 bench/ddp_fashion.py --compute-only --device "$b"
  done
  # What page-locking the trainer's buffers (Backend::PinHost) is worth.
  step model_bench-cuda-pageable .device/bin/model_bench --backend cuda --pageable
  for f in "$out"/model_bench-*.log "$out"/torch-*.log; do echo "== $(basename "$f")"; cat "$f"; done
}
run_cluster() {
  # The default job (deploy/jobs/mlp.yaml) and lenet5 for one epoch, each with
  # CUDA trainers, then CPU trainers, on one cluster.
  jobs=()
  for model in mlp lenet5; do
    for backend in cuda cpu; do
      spec=$(job_spec "$model" "$backend")
      [ "$model" = lenet5 ] && sed -i -E 's|^epochs:.*|epochs: 1|' "$spec"
      jobs+=(--job "$spec")
    done
  done
  step cluster bash tools/run-cluster.sh --bin .device/bin --out "$out/cluster" --refresh 5 "${jobs[@]}"
  grep -E "run-cluster: job " "$out/cluster.log"
  grep -h 'event=training' "$out"/cluster/worker-*.log
}
run_ten_jobs() {
  # Ten default jobs (CUDA trainers) on one cluster, each after a CPU DDP run
  # of the same job (bench/ten-jobs.sh): whether one job slows the next, on
  # a machine with cores to spare.
  step ten-jobs bash bench/ten-jobs.sh --bin .device/bin --job "$(job_spec mlp cuda)" \
    --out "$out/ten-jobs"
  tail -16 "$out/ten-jobs.log"
}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
for s in ${steps//,/ }; do
  "run_${s//-/_}"
done
echo "device-check: $failed failed"
pack
exit "$failed"
