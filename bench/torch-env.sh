# shellcheck shell=bash
# Sourced by the benchmarks that run PyTorch DDP as their baseline: sets
# $py to an interpreter that imports torch. Debian's first (python3-torch
# installs into it; a python3 earlier on PATH, e.g. pyenv's, would not
# see it), then python3 on PATH (a machine with PyTorch from wheels and no
# apt), else python3-torch is installed. Benchmarks only: the test suite
# never installs a peer.
py=/usr/bin/python3
if ! "$py" -c 'import torch' 2>/dev/null; then
  if command -v python3 >/dev/null && python3 -c 'import torch' 2>/dev/null; then
    py=$(command -v python3)
  else
    echo "installing python3-torch (Debian) for the DDP baseline ..."
    sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd=sudo
    $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-torch >/dev/null
  fi
fi
