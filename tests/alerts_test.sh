#!/bin/bash
# The alert rules load, and promtool's unit tests of when each fires pass.
set -euo pipefail
dir="$(dirname "$(readlink -f "$TEST_SRCDIR/hetps/deploy/prometheus/hetps-alerts.yml")")"
promtool=/usr/bin/promtool  # Debian's prometheus, installed by tools/bootstrap.sh
[[ -x $promtool ]] || { echo "no $promtool: run tools/bootstrap.sh" >&2; exit 1; }
"$promtool" check rules "$dir/hetps-alerts.yml"
"$promtool" check config --syntax-only "$dir/prometheus.yml"
cd "$dir"
"$promtool" test rules hetps-alerts_test.yml
