#!/usr/bin/env bash
# Telemetry overhead, measured side by side in one run:
#   - measure() over calling $call directly, with the jsonl sink (batches of 1,000);
#   - the same written by hand in PHP: buffered JSON lines in batches of 1,000, and one
#     appended line per call;
#   - the cost of one flush of 1,000 events per sink (jsonl, stream, newrelic stand-in);
#   - measure() again with the shared counters off (checkout_guard.metrics=0, a per-process
#     setting): what the latency histogram's observation costs, on against off.
# Bounded: 200,000 calls per mode (20,000 for the per-call append), 30 flushes per sink;
# medians and the report: bench/telemetry_report.py.
#
#   scripts/bench-telemetry.sh short   # 20,000 calls per mode (2,000 appends) (the default)
#   scripts/bench-telemetry.sh full    # 200,000 calls per mode (the documented run)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$CG_ROOT"
mode=$(run_mode bench-telemetry.sh "${1:-}") || exit 2
bash scripts/setup.sh >/dev/null
build_extension

run="$CG_ROOT/.run/bench-$$"
trap 'stop_pidfile "$run/valkey/valkey.pid"; rm -rf "$run"' EXIT INT TERM
mkdir -p "$run"
port=$(free_port)
start_valkey "$run/valkey" "$port"
url="redis://127.0.0.1:$port"

php_ext=(php -n -d "extension=$CG_EXT" -d "checkout_guard.url=$url")
case "$mode" in
  short) N=20000 ;;
  full) N=200000 ;;
esac
med() { # median of 5 runs of: mode n [ini...]
  local mode=$1 n=$2; shift 2
  for i in 1 2 3 4 5; do
    rm -f "$run/out.jsonl" "$run/ev.jsonl"
    "${php_ext[@]}" "$@" bench/telemetry.php "$mode" "$n" "$run/out.jsonl"
  done | .venv/bin/python bench/telemetry_report.py median
}

direct=$(med direct $N)
measure=$(med measure $N -d checkout_guard.events.sinks=jsonl -d "checkout_guard.events.jsonl_path=$run/ev.jsonl")
measure_off=$(med measure $N)
# The same two with the shared counters off, right after: on and off minutes apart at most.
measure_nom=$(med measure $N -d checkout_guard.events.sinks=jsonl -d "checkout_guard.events.jsonl_path=$run/ev.jsonl" -d checkout_guard.metrics=0)
measure_off_nom=$(med measure $N -d checkout_guard.metrics=0)
hand=$(med hand_buffered $N)
append=$(med hand_append $((N / 10)))
f_jsonl=$(med flush 30 -d checkout_guard.events.buffer_size=2000 -d checkout_guard.events.sinks=jsonl -d "checkout_guard.events.jsonl_path=$run/ev.jsonl")
f_stream=$(med flush 30 -d checkout_guard.events.buffer_size=2000 -d checkout_guard.events.sinks=stream -d "checkout_guard.events.stream_url=$url")
f_nr=$(med flush 30 -d checkout_guard.events.buffer_size=2000 -d checkout_guard.events.sinks=newrelic -d auto_prepend_file=bench/newrelic_stand_in.php)

.venv/bin/python bench/telemetry_report.py report \
  "$direct" "$measure" "$measure_off" "$hand" "$append" "$f_jsonl" "$f_stream" "$f_nr" \
  "$measure_nom" "$measure_off_nom"
