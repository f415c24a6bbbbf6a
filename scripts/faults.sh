#!/usr/bin/env bash
# The fault matrix (docs/reliability.md): the example checkout on php-fpm (8 workers recycled
# every 25 requests by pm.max_requests) + nginx, Valkey behind a loopback TCP proxy, steady
# checkout traffic, and real faults one after another, for each on_unavailable policy
# (allow, deny, throw). Prints one table; writes .run/faults/<mode>/ (per policy: the
# checkouts and decisions seen, faults.json) and verdict.md. Exits 1 when a must-hold
# check fails (PHP errors, crashes, hangs, slow recovery, leaked connections).
#
#   scripts/faults.sh short   # 2 s per fault + 3 s recovery: ~2.5 min (CI; the default)
#   scripts/faults.sh full    # 5 s + 5 s: ~5 min
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$CG_ROOT"

mode=$(run_mode faults.sh "${1:-}") || exit 2
case "$mode" in
  full) timing=(--fault 5 --recovery 5) ;;
  short) timing=(--fault 2 --recovery 3) ;;
esac
begin_run faults "$mode"

workers=8
for policy in allow deny throw; do
  dir="$out/$policy"; current="$dir"
  mkdir -p "$dir/valkey"
  { read -r vport; read -r xport; } < <(free_ports 2)
  start_valkey "$dir/valkey" "$vport"
  echo 0 > "$dir/proxy.ctl"
  .venv/bin/python loadtest/latency_proxy.py "$xport" "$vport" "$dir/proxy.ctl" > "$dir/proxy.log" 2>&1 &
  echo $! > "$dir/proxy.pid"
  wait_port "$xport"
  CHECKOUT_VALKEY_URL="redis://127.0.0.1:$xport" FPM_WORKERS=$workers FPM_MAX_REQUESTS=25 \
    start_checkout "$dir" on "" "CG_ON_UNAVAILABLE=$policy" > /dev/null
  http=$(sed -n 's/^http=//p' "$dir/ports"); ops=$(sed -n 's/^ops=//p' "$dir/ports")
  log "faults, on_unavailable=$policy"
  timeout 600 .venv/bin/python loadtest/faults.py --run-dir "$dir" --valkey-dir "$dir/valkey" \
    --valkey-bin "$(valkey_bin)" --valkey-port "$vport" --proxy-url "redis://127.0.0.1:$xport" \
    --proxy-control "$dir/proxy.ctl" --policy "$policy" --ext "$CG_EXT" --out "$dir" \
    --ops-port "$ops" --http-port "$http" --workers "$workers" "${timing[@]}" > "$dir/rows.jsonl" &
  wait $!
  stop_current
done
.venv/bin/python loadtest/faults_report.py "$out" | tee "$out/verdict.md"
