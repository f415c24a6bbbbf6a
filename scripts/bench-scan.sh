#!/usr/bin/env bash
# The scan against DuckDB on the same generated day (default 10 million events, ~2.3 GB
# of JSONL in .run/bench-scan/), same thresholds: events per second and peak memory, and
# a check that both find the same windows (bench/scan_compare.py). Bounded: one file, three runs per engine.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$CG_ROOT"
bash scripts/setup.sh >/dev/null
build_extension
EVENTS=${EVENTS:-10000000}
dir="$CG_ROOT/.run/bench-scan"; mkdir -p "$dir"
file="$dir/day-$EVENTS.jsonl"
[ -s "$file" ] || target/release/checkout-guard generate --events "$EVENTS" -o "$file"
.venv/bin/python bench/scan_compare.py "$file"
