#!/usr/bin/env bash
# Packs built test/bench binaries and the shared libraries they need (except
# glibc and the CUDA toolkit's, which the GPU machine has) into .device/, a
# git-ignored folder that the session's device tool can carry to a lent GPU
# machine. There: LD_LIBRARY_PATH=.device/lib:/usr/local/cuda/lib64 .device/bin/NAME
#
# usage: tools/device-bundle.sh [--config=opt ...] [--with-dataset] [--pack] TARGET...
#   --with-dataset  copies Fashion-MNIST into .device/data (about 30 MB)
#   --pack          packs bin/ and lib/ into .device/bundle.tar.xz (a fifth of
#                   their size: the device tool carries at most 64 MiB);
#                   tools/device-check.sh unpacks it there
#   other arguments that start with -- go to bazel build
set -euo pipefail
cd "$(dirname "$0")/.."
flags=()
targets=()
dataset=0
pack=0
for a in "$@"; do
  case "$a" in
    --with-dataset) dataset=1 ;;
    --pack) pack=1 ;;
    --*) flags+=("$a") ;;
    *) targets+=("$a") ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || { echo "device-bundle: name at least one target" >&2; exit 2; }
excl="$(git rev-parse --git-path info/exclude)"; mkdir -p "$(dirname "$excl")"
grep -qx "/.device/" "$excl" 2>/dev/null || echo "/.device/" >>"$excl"
bazel build "${flags[@]}" "${targets[@]}"
bin_dir=$(bazel info "${flags[@]}" bazel-bin 2>/dev/null)
rm -rf .device && mkdir -p .device/bin .device/lib
if [ "$dataset" = 1 ]; then
  mkdir -p .device/data
  cp /usr/share/datasets/fashion-mnist/*.gz .device/data/
fi
for t in "${targets[@]}"; do
  [[ "$t" == *:* ]] || t="$t:${t##*/}"  # //daemons/psd is //daemons/psd:psd
  bin="$bin_dir/$(sed -E 's|^//||; s|:|/|' <<<"$t")"
  cp -L "$bin" .device/bin/
  ldd "$bin" | awk '/=> \// {print $3}' | while read -r lib; do
    case "$lib" in
      /usr/local/cuda/*|*/libc.so.*|*/libm.so.*|*/libpthread.so.*|*/libdl.so.*|*/librt.so.*) ;;
      *) cp -Ln "$lib" .device/lib/ ;;
    esac
  done
done
# dlopen()ed at run time, so ldd does not list it (lib/train/cpu_backend.cc).
openblas=$(readlink -f /usr/lib/x86_64-linux-gnu/libopenblas.so.0)
cp -L "$openblas" .device/lib/libopenblas.so.0
ldd "$openblas" | awk '/=> \// {print $3}' | while read -r lib; do
  case "$lib" in
    */libc.so.*|*/libm.so.*|*/libpthread.so.*|*/libdl.so.*|*/librt.so.*) ;;
    *) cp -Ln "$lib" .device/lib/ ;;
  esac
done
if [ "$pack" = 1 ]; then
  tar -C .device -cJf .device/bundle.tar.xz bin lib
  rm -rf .device/bin .device/lib
fi
du -sh .device
