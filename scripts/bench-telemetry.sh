#!/usr/bin/env bash
# Telemetry overhead, measured side by side in one run:
#   - measure() over calling $call directly, with the jsonl sink (batches of 1,000);
#   - the same written by hand in PHP: buffered JSON lines in batches of 1,000, and one
#     appended line per call;
#   - the cost of one flush of 1,000 events per sink (jsonl, stream, newrelic stand-in).
# Bounded: 200,000 calls per mode (20,000 for the per-call append), 30 flushes per sink.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$CG_ROOT"
bash scripts/setup.sh >/dev/null
build_extension

run="$CG_ROOT/.run/bench-$$"
trap 'stop_pidfile "$run/valkey/valkey.pid"; rm -rf "$run"' EXIT INT TERM
mkdir -p "$run"
port=$(free_port)
start_valkey "$run/valkey" "$port"
url="redis://127.0.0.1:$port"

php_ext=(php -n -d "extension=$CG_EXT" -d "checkout_guard.url=$url")
N=200000
med() { # median of 5 runs of: mode n [ini...]
  local mode=$1 n=$2; shift 2
  for i in 1 2 3 4 5; do
    rm -f "$run/out.jsonl" "$run/ev.jsonl"
    "${php_ext[@]}" "$@" bench/telemetry.php "$mode" "$n" "$run/out.jsonl"
  done | php -r '$v=[]; while($l=fgets(STDIN)){$j=json_decode($l,true); $v[]=$j["ns_per_call"] ?? $j["median_ns_per_flush"];} sort($v); echo $v[2];'
}

direct=$(med direct $N)
measure=$(med measure $N -d checkout_guard.events.sinks=jsonl -d "checkout_guard.events.jsonl_path=$run/ev.jsonl")
measure_off=$(med measure $N)
hand=$(med hand_buffered $N)
append=$(med hand_append 20000)
f_jsonl=$(med flush 30 -d checkout_guard.events.buffer_size=2000 -d checkout_guard.events.sinks=jsonl -d "checkout_guard.events.jsonl_path=$run/ev.jsonl")
f_stream=$(med flush 30 -d checkout_guard.events.buffer_size=2000 -d checkout_guard.events.sinks=stream -d "checkout_guard.events.stream_url=$url")
f_nr=$(med flush 30 -d checkout_guard.events.buffer_size=2000 -d checkout_guard.events.sinks=newrelic -d auto_prepend_file=bench/newrelic_stand_in.php)

php -r '
[$_, $d, $m, $off, $h, $a, $fj, $fs, $fn] = $argv;
printf("telemetry overhead per measured call (median of 5 runs, %s)\n", php_uname("n"));
printf("  %-58s %8.2f us\n", "calling \$call directly", $d / 1000);
printf("  %-58s %8.2f us\n", "Telemetry::measure(), jsonl sink, batches of 1,000: overhead", ($m - $d) / 1000);
printf("  %-58s %8.2f us\n", "Telemetry::measure(), telemetry off (counting only): overhead", ($off - $d) / 1000);
printf("  %-58s %8.2f us\n", "by hand in PHP, buffered, batches of 1,000: overhead", ($h - $d) / 1000);
printf("  %-58s %8.2f us\n", "by hand in PHP, one appended line per call: overhead", ($a - $d) / 1000);
printf("  measure() vs hand-written buffered: %.2fx\n", ($m - $d) / max(1, $h - $d));
printf("one flush of 1,000 events (median of 30)\n");
printf("  %-10s %8.2f ms  (%.2f us/event)\n", "jsonl", $fj / 1e6, $fj / 1e6);
printf("  %-10s %8.2f ms  (%.2f us/event)\n", "stream", $fs / 1e6, $fs / 1e6);
printf("  %-10s %8.2f ms  (%.2f us/event)\n", "newrelic", $fn / 1e6, $fn / 1e6);
' -- "$direct" "$measure" "$measure_off" "$hand" "$append" "$f_jsonl" "$f_stream" "$f_nr"
