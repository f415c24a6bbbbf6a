#!/usr/bin/env bash
# The scan against DuckDB on the same generated day (in .run/bench-scan/), same thresholds:
# events per second and peak memory, and a check that both find the same windows (logic:
# bench/scan_compare.py). Bounded: one file, three runs per engine.
#
#   scripts/bench-scan.sh short   # 1 million events, ~230 MB of JSONL (the default)
#   scripts/bench-scan.sh full    # 10 million events, ~2.3 GB (the documented run)
#   EVENTS=N scripts/bench-scan.sh  # another size
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$CG_ROOT"
mode=$(run_mode bench-scan.sh "${1:-}") || exit 2
bash scripts/setup.sh >/dev/null
build_extension
case "$mode" in
  short) EVENTS=${EVENTS:-1000000} ;;
  full) EVENTS=${EVENTS:-10000000} ;;
esac
dir="$CG_ROOT/.run/bench-scan"; mkdir -p "$dir"
file="$dir/day-$EVENTS.jsonl"
[ -s "$file" ] || target/release/checkout-guard generate --events "$EVENTS" -o "$file"
.venv/bin/python bench/scan_compare.py "$file"
