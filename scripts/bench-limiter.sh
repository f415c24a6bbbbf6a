#!/usr/bin/env bash
# The limiter benchmark (docs/performance.md): PING, acquire(), the same script by hand
# through phpredis, Symfony RateLimiter, over TCP loopback and a Unix socket, from
# 1, 2, 4 and 8 processes; the Lua engine's cost inside Valkey as a multiple of an empty
# script (`return 1` by EVALSHA, same Valkey, best of several rounds: global, hot shop,
# auto_hot); the flood fast path on and off; accuracy at saturation.
# Prints the numbers, writes docs/results/benchmarks.md (machine, date, command) and
# .run/bench-limiter/results.json. Bounded: about 4 minutes in all.
#
#   scripts/bench-limiter.sh short    # N = 1, 2, short runs; docs/results/benchmarks.md untouched (CI; the default)
#   scripts/bench-limiter.sh full     # the documented run: writes docs/results/benchmarks.md
#   BENCH_ONLY=lua_cost scripts/bench-limiter.sh short   # the Lua engine's cost alone (also flood, accuracy)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$CG_ROOT"
mode=$(run_mode bench-limiter.sh "${1:-}") || exit 2
bash scripts/setup.sh >/dev/null
build_extension

out="$CG_ROOT/.run/bench-limiter"
run="$out/valkey-$$"
trap 'stop_pidfile "$run/valkey.pid"; rm -rf "$run"' EXIT INT TERM
mkdir -p "$run"
port=$(free_port)
# With the native module loaded: its cases (*_module) run beside the script's.
start_valkey "$run" "$port" "$run/valkey.sock" --loadmodule "$CG_VALKEY_MODULE"

php -d "extension=$CG_EXT" -d memory_limit=1G bench/limiter.php "$port" "$run/valkey.sock" "$mode" "$out/results.json"
args=("$out/results.json" --command "scripts/bench-limiter.sh $mode" --valkey "$("$(valkey_bin)" --version)")
if [ "$mode" = full ]; then
  .venv/bin/python bench/limiter_report.py "${args[@]}" > docs/results/benchmarks.md
  cat docs/results/benchmarks.md
else
  .venv/bin/python bench/limiter_report.py "${args[@]}"
fi
