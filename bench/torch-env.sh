# shellcheck shell=bash
# Sourced by the benchmarks that run PyTorch DDP as their baseline: sets
# $py to Debian's interpreter, the one python3-torch installs into (a
# python3 earlier on PATH, e.g. pyenv's, would not see it), and installs
# python3-torch when it is missing. Benchmarks only: the test suite never
# installs a peer.
py=/usr/bin/python3
if ! "$py" -c 'import torch' 2>/dev/null; then
  echo "installing python3-torch (Debian) for the DDP baseline ..."
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd=sudo
  $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-torch >/dev/null
fi
