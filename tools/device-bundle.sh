#!/usr/bin/env bash
# Packs built test/bench binaries and the shared libraries they need (except
# glibc and the CUDA toolkit's, which the GPU machine has) into .device/, a
# git-ignored folder that the session's device tool can carry to a lent GPU
# machine. There: LD_LIBRARY_PATH=.device/lib:/usr/local/cuda/lib64 .device/bin/NAME
#
# usage: tools/device-bundle.sh //lib/train:cuda_backend_test [more targets]
set -euo pipefail
cd "$(dirname "$0")/.."
excl="$(git rev-parse --git-path info/exclude)"; mkdir -p "$(dirname "$excl")"
grep -qx "/.device/" "$excl" 2>/dev/null || echo "/.device/" >>"$excl"
bazel build "$@"
rm -rf .device && mkdir -p .device/bin .device/lib
for t in "$@"; do
  bin="bazel-bin/$(sed -E 's|^//||; s|:|/|' <<<"$t")"
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
du -sh .device
