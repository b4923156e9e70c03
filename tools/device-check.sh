#!/usr/bin/env bash
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
# then, there, with .device carried: bash tools/device-check.sh [DIR]
# Each step's output goes to DIR (default out/device), the summary to
# stdout; with $OUT set (the device tool), DIR is packed into
# $OUT/device-check.tar.gz. A failing step is reported and the rest still
# run. Exit status: the number of failed steps.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
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
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
for t in gpu_selftest_test backend_select_test cuda_backend_test; do
  step "$t" ".device/bin/$t"
  tail -3 "$out/$t.log"
done
for b in cpu cuda; do
  step "model_bench-$b" .device/bin/model_bench --backend "$b"
  step "torch-$b" python3 bench/ddp_fashion.py --compute-only --device "$b"
done
# What page-locking the trainer's buffers (Backend::PinHost) is worth.
step model_bench-cuda-pageable .device/bin/model_bench --backend cuda --pageable
for f in "$out"/model_bench-*.log "$out"/torch-*.log; do echo "== $(basename "$f")"; cat "$f"; done

# The default job (deploy/jobs/mlp.yaml) and lenet5 for one epoch, each with
# CUDA trainers, then CPU trainers, on one cluster.
jobs=()
for model in mlp lenet5; do
  for backend in cuda cpu; do
    spec="$out/$model-$backend.yaml"
    sed -E "s|^dataset:.*|dataset: $PWD/.device/data|; s|^name:.*|name: $model-$backend|; s|^model:.*|model: $model|" \
      deploy/jobs/mlp.yaml >"$spec"
    [ "$model" = lenet5 ] && sed -i -E 's|^epochs:.*|epochs: 1|' "$spec"
    echo "backend: $backend" >>"$spec"
    jobs+=(--job "$spec")
  done
done
step cluster bash tools/run-cluster.sh --bin .device/bin --out "$out/cluster" --refresh 5 "${jobs[@]}"
grep -E "run-cluster: job " "$out/cluster.log"
grep -h 'event=training' "$out"/cluster/worker-*.log
# Ten default jobs (CUDA trainers) on one cluster, each after a CPU DDP run
# of the same job (bench/ten-jobs.sh): whether one job slows the next, on
# a machine with cores to spare.
step ten-jobs bash bench/ten-jobs.sh --bin .device/bin --job "$out/mlp-cuda.yaml" \
  --out "$out/ten-jobs"
tail -16 "$out/ten-jobs.log"
echo "device-check: $failed failed"
[ -n "${OUT:-}" ] && tar -czf "$OUT/device-check.tar.gz" --exclude='*-checkpoints' --exclude='*-models' --exclude='schedd-state' -C "$(dirname "$out")" "$(basename "$out")"
exit "$failed"
