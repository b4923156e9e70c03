#!/usr/bin/env bash
# The trained model out and back in: hetps-train trains an mlp briefly and
# saves it (--save); --eval reports the test accuracy of the file; a
# Python script with json and numpy alone (tests/read_model.py, no
# safetensors package) reads the header and tensors and, running the
# forward pass itself, gets the same accuracy (within 0.001: float
# summation order may flip a near-tie).
set -euo pipefail
runfiles=${TEST_SRCDIR:-$PWD/..}/${TEST_WORKSPACE:-hetps}
train="$runfiles/clients/train/hetps-train"
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/model.XXXXXX")
trap 'rm -rf "$work"' EXIT
printf 'name: model-file-test\nmodel: mlp\niterations: 60\neval_every: 0\n' >"$work/job.yaml"
trained=$("$train" "$work/job.yaml" --report-every 0 --save "$work/m.safetensors")
echo "$trained" | tail -2
want=$(echo "$trained" | sed -nE 's/.*done, .* test accuracy ([0-9.]+) .*/\1/p')
evaluated=$("$train" --eval "$work/m.safetensors")
echo "$evaluated"
got=$(echo "$evaluated" | sed -nE 's/.*test accuracy ([0-9.]+),.*/\1/p')
[ "$got" = "$want" ] || { echo "model_file_test: --eval says $got, training said $want"; exit 1; }
py=$(/usr/bin/python3 "$runfiles/tests/read_model.py" "$work/m.safetensors")
echo "$py"
echo "$py" | grep -q '^tensor dense1.weight \[256, 784\]$'
echo "$py" | grep -q '"format": "hetps-model-1"'
np=$(echo "$py" | sed -nE 's/^numpy accuracy ([0-9.]+)$/\1/p')
awk -v a="$np" -v b="$want" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.001) }' ||
  { echo "model_file_test: numpy accuracy $np, hetps $want"; exit 1; }
# A file that is not a model: refused with exit 2 and the reason.
head -c 100 /dev/urandom >"$work/junk"
set +e
"$train" --eval "$work/junk" 2>"$work/err"
rc=$?
set -e
[ "$rc" -eq 2 ] || { echo "model_file_test: junk file exit $rc"; exit 1; }
grep -q "safetensors" "$work/err"
echo "model_file_test: passed"
