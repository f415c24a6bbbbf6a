#!/usr/bin/env bash
# The soak (docs/reliability.md): the example checkout (8 php-fpm workers, never recycled, so a
# leak cannot hide) under steady checkout traffic (8 buyers x 10/s) for a bounded time;
# RSS and open fds per worker and Valkey's connected_clients printed over time, and they
# must stay flat (exit 1 otherwise). Results in .run/soak/<mode>/.
#
#   scripts/soak.sh short    # 45 s, a sample every 5 s (CI; the default)
#   scripts/soak.sh full     # 10 minutes, a sample every 30 s
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$CG_ROOT"
mode=$(run_mode soak.sh "${1:-}") || exit 2
case "$mode" in
  full) timing=(--seconds 600 --every 30) ;;
  short) timing=(--seconds 45 --every 5) ;;
esac
begin_run soak "$mode"
dir="$out/stack"
current="$dir"
FPM_WORKERS=8 FPM_MAX_REQUESTS=0 start_checkout "$dir" on "" > /dev/null
http=$(sed -n 's/^http=//p' "$dir/ports")
vport=$(sed -n 's/^valkey=//p' "$dir/ports")
log "soak ($mode): steady checkouts against $http, Valkey on $vport"
timeout 900 .venv/bin/python loadtest/soak.py --run-dir "$dir" --valkey-port "$vport" --http-port "$http" \
  --out "$out" "${timing[@]}" | tee "$out/soak.txt" &
wait $!
