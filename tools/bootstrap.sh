#!/usr/bin/env bash
# Installs every Debian package hetps needs to build, test and run.
# Idempotent: packages already present are not reinstalled, and apt-get update
# runs only when something is missing. CUDA 13 + NCCL are expected under
# /usr/local/cuda (pre-installed on this machine kind, not from apt).
set -euo pipefail

PACKAGES=(
  # Build: Debian's Bazel with offline rules_java.
  bazel-bootstrap bazel-rules-java pkg-config
  # Control plane and libraries.
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev librocksdb-dev prometheus-cpp-dev libyaml-cpp-dev zlib1g-dev
  # sd_notify (READY=1, WATCHDOG=1) for the Type=notify systemd units;
  # systemd-analyze checks the units (tests/systemd_test.sh).
  libsystemd-dev systemd
  # Data-plane MAC (AES-GCM), TLS certificates for the control plane.
  libssl-dev openssl libsodium-dev
  # CPU training backend: OpenBLAS sgemm.
  libopenblas-dev
  # Real training data: Fashion-MNIST (IDX, gzip) in /usr/share/datasets.
  dataset-fashion-mnist
  # Tests: Catch2 v2 with Debian's prebuilt main; promtool (prometheus) checks
  # the exposition format; curl scrapes /metrics.
  catch2 prometheus curl
  # tests/safetensors_test.sh reads a model file with numpy alone.
  python3-numpy
  # Fuzzing: clang with libFuzzer and the sanitizer runtimes.
  clang-14 libclang-rt-14-dev
  # Network testbed (deploy/testbed): ip netns, tc, nft, iptables (NFQUEUE),
  # offload switches,
  # user-level ping, and libnetfilter-queue for the delay program
  # (tools/nfqdelay.cc); process utilities.
  iproute2 nftables iptables ethtool iputils-ping libnetfilter-queue-dev procps
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "bootstrap: all ${#PACKAGES[@]} packages present"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  SUDO=sudo
else
  SUDO=
fi
echo "bootstrap: installing ${#missing[@]} package(s): ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null
echo "bootstrap: done"
