#!/usr/bin/env bash
# The fault matrix (docs/reliability.md): the example checkout on php-fpm (8 workers recycled
# every 25 requests by pm.max_requests) + nginx, Valkey behind a loopback TCP proxy, steady
# checkout traffic, and real faults one after another, for each on_unavailable policy
# (allow, deny, throw), with the script deciding (Valkey without the module) and with the
# native module (Valkey with it, engine auto; one more fault: a restart without the
# module). Prints one table; writes .run/faults/<mode>/ (per run, <policy>/ for the script
# and module-<policy>/ for the module, tls-<policy>/ over TLS: the checkouts and decisions
# seen, faults.json) and verdict.md. The TLS run (tls-deny): the same faults, the script
# deciding, against Debian's redis-server serving TLS only with certificates made by the run
# (a CA and a server certificate for localhost and 127.0.0.1, in <run>/tls/), the proxy
# forwarding the TLS bytes, the checkout's URL rediss:// with the CA in
# checkout_guard.tls.cafile. Exits 1 when a must-hold check fails (PHP errors, crashes,
# hangs, slow recovery, leaked connections, a TLS run whose connections were not TLS).
#
#   scripts/faults.sh short   # 2 s per fault + 3 s recovery; the module and TLS with deny only: ~3.7 min (CI; the default)
#   scripts/faults.sh full    # 5 s + 5 s, the module with every policy, TLS with deny: ~11 min
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$CG_ROOT"

mode=$(run_mode faults.sh "${1:-}") || exit 2
case "$mode" in
  full) timing=(--fault 5 --recovery 5); runs="allow deny throw module-allow module-deny module-throw tls-deny" ;;
  short) timing=(--fault 2 --recovery 3); runs="allow deny throw module-deny tls-deny" ;;
esac
module="$CG_ROOT/target/release/libcheckout_guard_valkey.so"
[ -f "$module" ] || { echo "the Valkey module is not built: $module (cargo build --release)" >&2; exit 1; }
begin_run faults "$mode"

workers=8
for run in $runs; do
  policy=${run#module-}; policy=${policy#tls-}
  dir="$out/$run"; current="$dir"
  with_module=() tls=() scheme=redis server_bin=$(valkey_bin) ini=""
  [ "$run" != "module-$policy" ] || with_module=(--module "$module")
  mkdir -p "$dir/valkey"
  { read -r vport; read -r xport; } < <(free_ports 2)
  if [ "$run" = "tls-$policy" ]; then
    make_tls_certs "$dir/tls"
    start_tls_server "$dir/valkey" "$vport" "$dir/tls"
    tls=(--tls-dir "$dir/tls" --proxy-stats "$dir/proxy.stats.json")
    scheme=rediss server_bin=$(redis_tls_bin) ini="checkout_guard.tls.cafile=$dir/tls/ca.pem"
  else
    start_valkey "$dir/valkey" "$vport" "" ${with_module[@]:+--loadmodule "$module"}
  fi
  echo 0 > "$dir/proxy.ctl"
  .venv/bin/python loadtest/latency_proxy.py "$xport" "$vport" "$dir/proxy.ctl" "$dir/proxy.stats.json" > "$dir/proxy.log" 2>&1 &
  echo $! > "$dir/proxy.pid"
  wait_port "$xport"
  CHECKOUT_VALKEY_URL="$scheme://127.0.0.1:$xport" CHECKOUT_INI=$ini FPM_WORKERS=$workers FPM_MAX_REQUESTS=25 \
    start_checkout "$dir" on "" "CG_ON_UNAVAILABLE=$policy" > /dev/null
  http=$(sed -n 's/^http=//p' "$dir/ports"); ops=$(sed -n 's/^ops=//p' "$dir/ports")
  log "faults, on_unavailable=$policy${with_module[*]:+, with the module}${tls[*]:+, over TLS}"
  timeout 600 .venv/bin/python loadtest/faults.py --run-dir "$dir" --valkey-dir "$dir/valkey" \
    --valkey-bin "$server_bin" --valkey-port "$vport" --proxy-url "$scheme://127.0.0.1:$xport" \
    --proxy-control "$dir/proxy.ctl" --policy "$policy" --ext "$CG_EXT" --out "$dir" \
    --ops-port "$ops" --http-port "$http" --workers "$workers" "${timing[@]}" ${with_module[@]:+"${with_module[@]}"} ${tls[@]:+"${tls[@]}"} \
    > "$dir/rows.jsonl" &
  wait $!
  stop_current
done
.venv/bin/python loadtest/faults_report.py "$out" | tee "$out/verdict.md"
