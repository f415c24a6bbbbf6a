#!/usr/bin/env bash
# Decisions per second from one process of T request threads (the ZTS PHP's threaded
# host, tests/zts/host.c) against T processes of that PHP, T = 1, 4, 16: each worker makes
# N acquire() calls on a bucket that never empties (every decision is a round trip to a
# local Valkey). The extension keeps one pooled connection per Valkey endpoint per process,
# behind a mutex: T threads share it, T processes have one each.
#
#   scripts/bench-threads.sh [N]     # N decisions per worker (default 2000)
#
# Prints "mode T decisions seconds decisions/s" lines (the wall time from the start of the
# first worker to the end of the last, so start-up is in it for both).
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$CG_ROOT/scripts/chroot.sh"
source "$CG_ROOT/scripts/zts.sh"
cd "$CG_ROOT"
n=${1:-2000}
if ! [[ "$n" =~ ^[0-9]+$ ]] || [ "$n" -lt 1 ] || [ "$n" -gt 1000000 ]; then
  echo "bench-threads.sh: N must be a whole number from 1 to 1000000, got '$n'" >&2; exit 2
fi
case ":$PATH:" in *":$HOME/.cargo/bin:"*) ;; *) export PATH="$HOME/.cargo/bin:$PATH" ;; esac
prefix=$(cg_zts_ensure)
ext=$(cg_zts_build)
host=$(cg_zts_host)
run="$CG_ROOT/.run/bench-threads-$$"
trap 'stop_pidfile "$run/valkey/valkey.pid"; rm -rf "$run"' EXIT INT TERM
mkdir -p "$run"
port=$(free_port)
start_valkey "$run/valkey" "$port"
url="redis://127.0.0.1:$port"
printf 'extension=%s\n' "$ext" > "$run/php.ini"
printf '%-9s %3s %10s %8s %12s\n' mode T decisions seconds decisions/s
for t in 1 4 16; do
  t0=$(date +%s.%N)
  timeout 600 "$host" -c "$run/php.ini" "$t" 1 bench/threads.php "$url" "$n" > "$run/threads.out" 2> "$run/threads.err" ||
    { cat "$run/threads.err" >&2; exit 1; }
  t1=$(date +%s.%N)
  awk -v t="$t" -v a="$t0" -v b="$t1" -v n="$n" 'BEGIN { s = b - a; printf "%-9s %3d %10d %8.2f %12.0f\n", "threads", t, t * n, s, t * n / s }'
  t0=$(date +%s.%N)
  pids=()
  for ((w = 0; w < t; w++)); do
    timeout 600 "$prefix/bin/php" -c "$run/php.ini" bench/threads.php "$w" 0 "$url" "$n" > "$run/proc.$w.out" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  t1=$(date +%s.%N)
  awk -v t="$t" -v a="$t0" -v b="$t1" -v n="$n" 'BEGIN { s = b - a; printf "%-9s %3d %10d %8.2f %12.0f\n", "processes", t, t * n, s, t * n / s }'
done
